/*
 * safetensors.c -- the hostile-input shard reader (see safetensors.h).
 *
 * Every size read from a file is bounded before it is used: the header
 * length by the file size and FB__ST_HEADER_MAX, shapes by
 * FB__ST_MAX_DIMS, products with overflow checks, offsets by the data
 * section.  The tensors must tile the data section exactly.
 */
#include "ckpt/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/hash.h"
#include "common/alloc.h"
#include "common/json.h"
#include "common/util.h"

int fb__st_dtype_from_name(const char *name, size_t len)
{
    for (int d = 0; d < FB_DTYPE_COUNT_; d++) {
        const char *n = fb_dtype_name((fb_dtype)d);
        if (strlen(n) == len && !memcmp(n, name, len))
            return d;
    }
    return -1;
}

static int failf(char *err, size_t err_size, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int failf(char *err, size_t err_size, int rc, const char *fmt, ...)
{
    if (err && err_size) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_size, fmt, ap);
        va_end(ap);
    }
    return rc;
}

static int cmp_begin(const void *a, const void *b)
{
    const fb__st_tensor *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return 0;
}

void fb__st_free(fb__st_header *h)
{
    if (!h)
        return;
    fb__json_free(h->doc_);
    free(h->tensors);
    free(h->meta);
    free(h);
}

static int parse_meta(fb__st_header *h, const fb__json *m, const char *label,
                      char *err, size_t err_size)
{
    if (m->type != FB_JSON_OBJECT)
        return failf(err, err_size, FB_EFORMAT,
                     "%s: __metadata__ is not an object", label);
    int dup = fb__json_has_duplicate_keys(m);
    if (dup < 0)
        return dup;
    if (dup)
        return failf(err, err_size, FB_EFORMAT,
                     "%s: __metadata__ has a duplicate key", label);
    h->meta = fb__calloc(m->count ? m->count : 1, sizeof *h->meta);
    if (!h->meta)
        return -ENOMEM;
    for (const fb__json *v = m->child; v; v = v->next) {
        if (v->type != FB_JSON_STRING)
            return failf(err, err_size, FB_EFORMAT,
                         "%s: __metadata__ value of \"%.100s\" is not a string",
                         label, v->key);
        h->meta[h->nmeta].key = v->key;
        h->meta[h->nmeta].value = v->str;
        h->nmeta++;
    }
    return 0;
}

static int parse_tensor(fb__st_tensor *t, const fb__json *e, const char *label,
                        char *err, size_t err_size)
{
    t->name = e->key;
    t->name_len = e->key_len;
    if (e->key_len > FB__ST_NAME_MAX)
        return failf(err, err_size, FB_EFORMAT,
                     "%s: tensor name \"%.60s...\" longer than %d bytes", label,
                     e->key, FB__ST_NAME_MAX);
    if (strlen(e->key) != e->key_len)
        return failf(err, err_size, FB_EFORMAT,
                     "%s: tensor name \"%.100s\" contains a NUL byte", label,
                     e->key);
    if (e->type != FB_JSON_OBJECT)
        return failf(err, err_size, FB_EFORMAT,
                     "%s: tensor \"%.100s\" is not an object", label, e->key);
    int dup = fb__json_has_duplicate_keys(e);
    if (dup < 0)
        return dup;
    if (dup)
        return failf(err, err_size, FB_EFORMAT,
                     "%s: tensor \"%.100s\" has a duplicate field", label, e->key);
    const fb__json *dt = fb__json_get(e, "dtype");
    const fb__json *sh = fb__json_get(e, "shape");
    const fb__json *off = fb__json_get(e, "data_offsets");
    if (!dt || dt->type != FB_JSON_STRING)
        return failf(err, err_size, FB_EFORMAT,
                     "%s: tensor \"%.100s\": field dtype missing or not a string",
                     label, e->key);
    int d = fb__st_dtype_from_name(dt->str, dt->str_len);
    if (d < 0)
        return failf(err, err_size, FB_EFORMAT,
                     "%s: tensor \"%.100s\": unknown dtype \"%.32s\"", label,
                     e->key, dt->str);
    t->dtype = (fb_dtype)d;
    if (!sh || sh->type != FB_JSON_ARRAY)
        return failf(err, err_size, FB_EFORMAT,
                     "%s: tensor \"%.100s\": field shape missing or not an array",
                     label, e->key);
    if (sh->count > FB__ST_MAX_DIMS)
        return failf(err, err_size, FB_EFORMAT,
                     "%s: tensor \"%.100s\": shape has %zu dimensions (limit %d)",
                     label, e->key, sh->count, FB__ST_MAX_DIMS);
    uint64_t bytes = fb_dtype_size(t->dtype);
    t->ndim = 0;
    for (const fb__json *x = sh->child; x; x = x->next) {
        int64_t v;
        if (fb__json_as_i64(x, &v) || v < 0)
            return failf(err, err_size, FB_EFORMAT,
                         "%s: tensor \"%.100s\": shape entry %d is not a "
                         "non-negative integer", label, e->key, t->ndim);
        if (__builtin_mul_overflow(bytes, (uint64_t)v, &bytes))
            return failf(err, err_size, FB_EFORMAT,
                         "%s: tensor \"%.100s\": shape x dtype size overflows",
                         label, e->key);
        t->shape[t->ndim++] = v;
    }
    if (!off || off->type != FB_JSON_ARRAY || off->count != 2 ||
        fb__json_as_u64(off->child, &t->begin) ||
        fb__json_as_u64(off->child->next, &t->end))
        return failf(err, err_size, FB_EFORMAT,
                     "%s: tensor \"%.100s\": field data_offsets is not [begin, end]",
                     label, e->key);
    if (t->end < t->begin)
        return failf(err, err_size, FB_EFORMAT,
                     "%s: tensor \"%.100s\": data_offsets end %llu before begin %llu",
                     label, e->key, (unsigned long long)t->end,
                     (unsigned long long)t->begin);
    if (t->end - t->begin != bytes)
        return failf(err, err_size, FB_EFORMAT,
                     "%s: tensor \"%.100s\": data_offsets span %llu bytes but "
                     "shape x dtype size is %llu", label, e->key,
                     (unsigned long long)(t->end - t->begin),
                     (unsigned long long)bytes);
    return 0;
}

/* h->header_hash from the header's bytes (FB__ST_HEADER_HASH_KEY). */
static int check_header_hash(fb__st_header *h, const char *json, size_t len)
{
    const char *hex = fb__st_meta_get(h, FB__ST_HEADER_HASH_KEY);
    if (!hex)
        return 0;
    static const char prefix[] = FB__ST_HEADER_HASH_PREFIX;
    const size_t p = sizeof prefix - 1;
    uint64_t want;
    int alg = fb__hash_alg_from_name(fb__st_meta_get(h, "firebreak.hash"));
    h->header_hash = -1;
    if (alg < 0 || len < p + 17 || memcmp(json, prefix, p) || json[p + 16] != '"' ||
        fb__hash_parse_hex(hex, &want))
        return 0;
    fb__hash_ctx *c = fb__hash_new((fb__hash_alg)alg);
    if (!c)
        return -ENOMEM;
    fb__hash_update(c, json, p);
    fb__hash_update(c, "0000000000000000", 16);
    fb__hash_update(c, json + p + 16, len - p - 16);
    h->header_hash = fb__hash_digest(c) == want ? 1 : -1;
    fb__hash_free(c);
    return 0;
}

int fb__st_parse_header(const char *json, size_t len, uint64_t file_size,
                        const char *label, fb__st_header **out, char *err,
                        size_t err_size)
{
    if (len > FB__ST_HEADER_MAX)
        return failf(err, err_size, FB_ETOOBIG,
                     "%s: header length %zu exceeds the limit of %llu bytes",
                     label, len, FB__ST_HEADER_MAX);
    if (file_size < 8 || len > file_size - 8)
        return failf(err, err_size, FB_EFORMAT,
                     "%s: header length %zu runs past the end of the file "
                     "(%llu bytes)", label, len, (unsigned long long)file_size);
    fb__st_header *h = fb__calloc(1, sizeof *h);
    if (!h)
        return failf(err, err_size, -ENOMEM, "%s: out of memory reading the "
                     "header", label);
    h->header_len = len;
    h->data_offset = 8 + (uint64_t)len;
    h->data_len = file_size - h->data_offset;

    char jerr[160] = "";
    fb__json_limits lim = {.max_input = len + 1, .max_depth = 8, .max_nodes = 0};
    fb__json_doc *doc = NULL;
    int rc = fb__json_parse(json, len, &lim, &doc, jerr, sizeof jerr);
    if (rc) {
        rc = rc == -ENOMEM ? rc
                           : failf(err, err_size, rc, "%s: header JSON: %s", label, jerr);
        goto fail;
    }
    h->doc_ = doc;
    const fb__json *root = fb__json_root(doc);
    if (root->type != FB_JSON_OBJECT) {
        rc = failf(err, err_size, FB_EFORMAT, "%s: header JSON is not an object",
                   label);
        goto fail;
    }
    int dup = fb__json_has_duplicate_keys(root);
    if (dup < 0) {
        rc = dup;
        goto fail;
    }
    if (dup) {
        rc = failf(err, err_size, FB_EFORMAT,
                   "%s: header has a duplicate tensor name", label);
        goto fail;
    }
    h->tensors = fb__calloc(root->count ? root->count : 1, sizeof *h->tensors);
    if (!h->tensors) {
        rc = -ENOMEM;
        goto fail;
    }
    for (const fb__json *e = root->child; e; e = e->next) {
        if (!strcmp(e->key, "__metadata__") && e->key_len == 12) {
            if ((rc = parse_meta(h, e, label, err, err_size)))
                goto fail;
            continue;
        }
        if ((rc = parse_tensor(&h->tensors[h->ntensors], e, label, err, err_size)))
            goto fail;
        h->ntensors++;
    }
    qsort(h->tensors, h->ntensors, sizeof *h->tensors, cmp_begin);
    uint64_t pos = 0;
    for (size_t i = 0; i < h->ntensors; i++) {
        const fb__st_tensor *t = &h->tensors[i];
        if (t->begin != pos) {
            rc = failf(err, err_size, FB_EFORMAT,
                       "%s: tensor \"%.100s\": data_offsets begin %llu leaves %s "
                       "at byte %llu of the data section", label, t->name,
                       (unsigned long long)t->begin,
                       t->begin > pos ? "a gap" : "an overlap",
                       (unsigned long long)pos);
            goto fail;
        }
        pos = t->end;
    }
    if (pos != h->data_len) {
        rc = failf(err, err_size, FB_EFORMAT,
                   "%s: tensors end at byte %llu of the data section but the "
                   "file holds %llu data bytes (truncated or trailing bytes)",
                   label, (unsigned long long)pos, (unsigned long long)h->data_len);
        goto fail;
    }
    if ((rc = check_header_hash(h, json, len)))
        goto fail;
    *out = h;
    return 0;
fail:
    if (rc == -ENOMEM)
        failf(err, err_size, rc, "%s: out of memory reading the header", label);
    fb__st_free(h);
    return rc;
}

static uint64_t le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

int fb__st_parse_buffer(const void *buf, size_t size, const char *label,
                        fb__st_header **out, char *err, size_t err_size)
{
    if (size < 8)
        return failf(err, err_size, FB_EFORMAT,
                     "%s: %zu bytes, shorter than the 8-byte header length",
                     label, size);
    uint64_t n = le64(buf);
    if (n > FB__ST_HEADER_MAX)
        return failf(err, err_size, FB_ETOOBIG,
                     "%s: header length %llu exceeds the limit of %llu bytes",
                     label, (unsigned long long)n, FB__ST_HEADER_MAX);
    if (n > size - 8)
        return failf(err, err_size, FB_EFORMAT,
                     "%s: header length %llu runs past the end of the file "
                     "(%zu bytes)", label, (unsigned long long)n, size);
    return fb__st_parse_header((const char *)buf + 8, (size_t)n, size, label, out,
                               err, err_size);
}

int fb__st_open(const char *path, int *fd_out, fb__st_header **out, char *err,
                size_t err_size)
{
    /* A FIFO or device in a shard's place is refused, never waited on. */
    int fd = fb__open_regular(path, 0);
    if (fd < 0)
        return failf(err, err_size, fd, "%s: %s", path, fb_strerror(fd));
    struct stat st;
    unsigned char lenbuf[8];
    char *json = NULL;
    int rc;
    if (fstat(fd, &st)) {
        rc = -errno;
        failf(err, err_size, rc, "%s: %s", path, strerror(-rc));
        goto fail;
    }
    uint64_t size = (uint64_t)st.st_size;
    if (size < 8 || pread(fd, lenbuf, 8, 0) != 8) {
        rc = failf(err, err_size, FB_EFORMAT,
                   "%s: %llu bytes, shorter than the 8-byte header length", path,
                   (unsigned long long)size);
        goto fail;
    }
    uint64_t n = le64(lenbuf);
    if (n > FB__ST_HEADER_MAX) {
        rc = failf(err, err_size, FB_ETOOBIG,
                   "%s: header length %llu exceeds the limit of %llu bytes", path,
                   (unsigned long long)n, FB__ST_HEADER_MAX);
        goto fail;
    }
    if (n > size - 8) {
        rc = failf(err, err_size, FB_EFORMAT,
                   "%s: header length %llu runs past the end of the file "
                   "(%llu bytes)", path, (unsigned long long)n,
                   (unsigned long long)size);
        goto fail;
    }
    json = fb__malloc(n ? n : 1);
    if (!json) {
        rc = failf(err, err_size, -ENOMEM, "%s: out of memory reading the header",
                   path);
        goto fail;
    }
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, json + got, n - got, (off_t)(8 + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            rc = r < 0 ? -errno : FB_EFORMAT;
            failf(err, err_size, rc, "%s: reading the header: %s", path,
                  r < 0 ? strerror(errno) : "file shrank");
            goto fail;
        }
        got += (size_t)r;
    }
    rc = fb__st_parse_header(json, n, size, path, out, err, err_size);
    if (rc)
        goto fail;
    free(json);
    *fd_out = fd;
    return 0;
fail:
    free(json);
    close(fd);
    return rc;
}

const char *fb__st_meta_get(const fb__st_header *h, const char *key)
{
    for (size_t i = 0; i < h->nmeta; i++)
        if (!strcmp(h->meta[i].key, key))
            return h->meta[i].value;
    return NULL;
}

const fb__st_tensor *fb__st_find(const fb__st_header *h, const char *name)
{
    for (size_t i = 0; i < h->ntensors; i++)
        if (!strcmp(h->tensors[i].name, name))
            return &h->tensors[i];
    return NULL;
}
