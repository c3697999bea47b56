/*
 * layout.c -- reading a checkpoint across shards (fb_ckpt_layout_*).
 *
 * fb_ckpt_restore reads one rank's own shard.  State that is not one
 * rank's alone needs the others: a replicated tensor written once by one
 * rank of its group (every rank reads it back), and the slices of a
 * sharded tensor restored on another world size (a rank's new slice
 * overlaps slices several old ranks saved).  This file opens one complete
 * step, keeps every shard's header, and reads any region of any tensor
 * from the stored tensors that hold it.
 *
 * A stored tensor is hashed whole, so one that is needed is read whole
 * into scratch memory and verified there (shard.c, through a header that
 * lists only the tensors needed); only when every one needed by every
 * request has verified are the regions copied into the callers' buffers.
 * A slice's place comes from the shard's metadata
 * (firebreak.global_shape.NAME, firebreak.global_offset.NAME), which is
 * outside input: parsed with bounds, and a shard whose place does not fit
 * its global shape makes the step malformed.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/engine.h"
#include "ckpt/shard.h"
#include "ckpt/store.h"
#include "common/alloc.h"
#include "common/util.h"
#include "lib/lib.h"

typedef struct stored {
    int rank;
    const fb__st_tensor *t;              /* in hdr[rank]                  */
    int64_t gshape[FB__ST_MAX_DIMS];
    int64_t goff[FB__ST_MAX_DIMS];
    void *buf;                           /* read: scratch, verified        */
    int needed;
} stored;

struct fb_ckpt_layout {
    char dir[PATH_MAX];
    uint64_t step;
    int world_size;
    fb__st_header **hdr;                 /* per rank                       */
    stored *s;
    size_t n;
    stored **byname;                     /* s sorted by name, then rank    */
};

/* "4,8" -> {4, 8}: exactly ndim non-negative integers ("" for 0 dims). */
static int parse_dims(const char *text, int ndim, int64_t *out)
{
    const char *p = text;
    for (int d = 0; d < ndim; d++) {
        char num[24];
        size_t len = strcspn(p, ",");
        if (len == 0 || len >= sizeof num)
            return -1;
        memcpy(num, p, len);
        num[len] = '\0';
        long long v;
        if (fb__parse_int(num, 0, INT64_MAX, &v))
            return -1;
        out[d] = v;
        p += len;
        if (d + 1 < ndim) {
            if (*p != ',')
                return -1;
            p++;
        }
    }
    return *p ? -1 : 0;
}

int fb__shard_slice_place(const fb__st_header *h, const fb__st_tensor *t,
                          int64_t *global_shape, int64_t *global_offset,
                          const char *label, char *err, size_t err_size)
{
    static const char *const what[2] = {"global_shape", "global_offset"};
    char key[FB__ST_NAME_MAX + 64];
    int64_t *dst[2] = {global_shape, global_offset};
    for (int d = 0; d < t->ndim; d++) {
        global_shape[d] = t->shape[d];
        global_offset[d] = 0;
    }
    for (int k = 0; k < 2; k++) {
        snprintf(key, sizeof key, "firebreak.%s.%s", what[k], t->name);
        const char *v = fb__st_meta_get(h, key);
        if (v && parse_dims(v, t->ndim, dst[k])) {
            fb__ckpt_say(err, err_size, "%s: metadata %.200s is not %d "
                         "comma-separated non-negative integers", label, key,
                         t->ndim);
            return FB_EFORMAT;
        }
    }
    for (int d = 0; d < t->ndim; d++)
        if (global_offset[d] > global_shape[d] - t->shape[d]) {
            fb__ckpt_say(err, err_size, "%s: tensor \"%.200s\": slice of %" PRId64
                         " elements at offset %" PRId64 " in dimension %d "
                         "exceeds the global size %" PRId64, label, t->name,
                         t->shape[d], global_offset[d], d, global_shape[d]);
            return FB_EFORMAT;
        }
    return 0;
}

static void free_headers(fb_ckpt_layout *l)
{
    if (l->hdr)
        for (int r = 0; r < l->world_size; r++)
            fb__st_free(l->hdr[r]);
    free(l->hdr);
    free(l->s);
    free(l->byname);
    l->hdr = NULL;
    l->s = NULL;
    l->byname = NULL;
    l->n = 0;
}

static int cmp_byname(const void *a, const void *b)
{
    const stored *x = *(stored *const *)a, *y = *(stored *const *)b;
    int c = strcmp(x->t->name, y->t->name);
    return c ? c : x->rank - y->rank;
}

/* Read every shard header of one step: 0, -ENOMEM, or another code when
 * the step is to be passed over. */
static int load_step(fb_ckpt_layout *l, char *err, size_t err_size)
{
    char path[PATH_MAX];
    size_t total = 0;
    if (!(l->hdr = fb__calloc((size_t)l->world_size, sizeof *l->hdr)))
        return -ENOMEM;
    for (int r = 0; r < l->world_size; r++) {
        int fd = -1;
        if (fb__ckpt_shard_path(path, sizeof path, l->dir, l->step, r))
            return -ENAMETOOLONG;
        int rc = fb__st_open(path, &fd, &l->hdr[r], err, err_size);
        if (fd >= 0)
            close(fd);
        if (!rc)
            rc = fb__shard_check_place(l->hdr[r], path, l->step, r, l->world_size,
                                       err, err_size);
        if (!rc)
            rc = fb__shard_check_meta(l->hdr[r], path, err, err_size);
        if (rc)
            return rc;
        total += l->hdr[r]->ntensors;
    }
    if (!(l->s = fb__calloc(total ? total : 1, sizeof *l->s)))
        return -ENOMEM;
    for (int r = 0; r < l->world_size; r++) {
        const fb__st_header *h = l->hdr[r];
        if (fb__ckpt_shard_path(path, sizeof path, l->dir, l->step, r))
            return -ENAMETOOLONG;
        for (size_t j = 0; j < h->ntensors; j++) {
            stored *s = &l->s[l->n++];
            s->rank = r;
            s->t = &h->tensors[j];
            int rc = fb__shard_slice_place(h, s->t, s->gshape, s->goff, path,
                                           err, err_size);
            if (rc)
                return rc;
        }
    }
    if (!(l->byname = fb__calloc(l->n ? l->n : 1, sizeof *l->byname)))
        return -ENOMEM;
    for (size_t k = 0; k < l->n; k++)
        l->byname[k] = &l->s[k];
    qsort(l->byname, l->n, sizeof *l->byname, cmp_byname);
    return 0;
}

int fb_ckpt_layout_open(fb_ckpt_layout **out, const char *dir, int world_size,
                        uint64_t max_step)
{
    if (!out || !dir || world_size < 0)
        return -EINVAL;
    fb_ckpt_layout *l = fb__calloc(1, sizeof *l);
    if (!l)
        return -ENOMEM;
    if (fb__fmt(l->dir, sizeof l->dir, "%s", dir)) {
        free(l);
        return -ENAMETOOLONG;
    }
    fb__ckpt_entry *v = NULL;
    size_t n = 0;
    int rc = fb__ckpt_scan(dir, world_size, 0, &v, &n);
    if (rc == -ENOENT)
        n = 0, rc = 0;
    if (!rc)
        rc = FB_ENOCKPT;
    for (size_t i = 0; i < n && rc == FB_ENOCKPT; i++) {
        if (v[i].step > max_step || !v[i].complete || v[i].world_size < 1)
            continue;
        char err[512] = "";
        l->step = v[i].step;
        l->world_size = v[i].world_size;
        int r = load_step(l, err, sizeof err);
        if (r == -ENOMEM) {
            rc = r;
            break;
        }
        if (r == 0) {
            rc = 0;
            break;
        }
        /* Passed over, as restore does, and said as restore says it: a
         * caller finding nothing at all must not take it for "none". */
        fb__say("not restoring checkpoint step %llu: %s\n",
                (unsigned long long)v[i].step, err[0] ? err : fb_strerror(r));
        free_headers(l);
    }
    free(v);
    if (rc) {
        free_headers(l);
        free(l);
        return rc;
    }
    *out = l;
    return 0;
}

uint64_t fb_ckpt_layout_step(const fb_ckpt_layout *lay)
{
    return lay ? lay->step : 0;
}

int fb_ckpt_layout_world_size(const fb_ckpt_layout *lay)
{
    return lay ? lay->world_size : 0;
}

size_t fb_ckpt_layout_count(const fb_ckpt_layout *lay)
{
    return lay ? lay->n : 0;
}

int fb_ckpt_layout_tensor(const fb_ckpt_layout *lay, size_t i,
                          fb_ckpt_tensor_info *out)
{
    if (!lay || !out || i >= lay->n)
        return -ERANGE;
    const stored *s = &lay->s[i];
    out->name = s->t->name;
    out->rank = s->rank;
    out->dtype = s->t->dtype;
    out->ndim = s->t->ndim;
    out->shape = s->t->shape;
    out->global_shape = s->gshape;
    out->global_offset = s->goff;
    out->bytes = s->t->end - s->t->begin;
    return 0;
}

void fb_ckpt_layout_close(fb_ckpt_layout *lay)
{
    if (!lay)
        return;
    for (size_t i = 0; i < lay->n; i++)
        free(lay->s[i].buf);
    free_headers(lay);
    free(lay);
}

/* ------------------------------------------------------------------------
 * Reading regions
 * ---------------------------------------------------------------------- */

/* A request's box in its global tensor, checked. */
typedef struct box {
    int ndim;
    int64_t lo[FB__ST_MAX_DIMS], n[FB__ST_MAX_DIMS], g[FB__ST_MAX_DIMS];
} box;

static void dims_text(char *buf, size_t size, int ndim, const int64_t *v)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int d = 0; d < ndim && len < size; d++)
        len += (size_t)snprintf(buf + len, size - len, "%s%" PRId64, d ? "," : "",
                                v[d]);
}

static int check_req(const fb_ckpt_read_req *q, box *b, char *err, size_t err_size)
{
    if (!q->name || fb_dtype_size(q->dtype) == 0 || q->ndim < 0 ||
        q->ndim > FB__ST_MAX_DIMS || (q->ndim && !q->shape)) {
        fb__ckpt_say(err, err_size, "tensor \"%.200s\": bad name, dtype or "
                     "dimensions", q->name ? q->name : "(null)");
        return -EINVAL;
    }
    uint64_t bytes = fb_dtype_size(q->dtype);
    b->ndim = q->ndim;
    for (int d = 0; d < q->ndim; d++) {
        b->n[d] = q->shape[d];
        b->g[d] = q->global_shape ? q->global_shape[d] : q->shape[d];
        b->lo[d] = q->global_offset ? q->global_offset[d] : 0;
        if (b->n[d] < 0 || b->g[d] < 0 || b->lo[d] < 0 ||
            b->lo[d] > b->g[d] - b->n[d] ||
            __builtin_mul_overflow(bytes, (uint64_t)b->n[d], &bytes)) {
            fb__ckpt_say(err, err_size, "tensor \"%.200s\": region of %" PRId64
                         " at %" PRId64 " in dimension %d does not fit the "
                         "global size %" PRId64, q->name, b->n[d], b->lo[d], d,
                         b->g[d]);
            return -EINVAL;
        }
    }
    if (bytes && !q->data) {
        fb__ckpt_say(err, err_size, "tensor \"%.200s\": no buffer", q->name);
        return -EINVAL;
    }
    return 0;
}

/* Elements in the intersection of a request's box and a stored slice
 * (0: none); lo/hi receive it in global coordinates. */
static uint64_t overlap(const box *b, const stored *s, int64_t *lo, int64_t *hi)
{
    uint64_t v = 1;
    for (int d = 0; d < b->ndim; d++) {
        int64_t a = b->lo[d] > s->goff[d] ? b->lo[d] : s->goff[d];
        int64_t e1 = b->lo[d] + b->n[d], e2 = s->goff[d] + s->t->shape[d];
        int64_t e = e1 < e2 ? e1 : e2;
        if (e <= a)
            return 0;
        lo[d] = a;
        hi[d] = e;
        v *= (uint64_t)(e - a);
    }
    return v;
}

static int same_box(const stored *a, const stored *b)
{
    for (int d = 0; d < a->t->ndim; d++)
        if (a->goff[d] != b->goff[d] || a->t->shape[d] != b->t->shape[d])
            return 0;
    return 1;
}

static int boxes_meet(const stored *a, const stored *b)
{
    for (int d = 0; d < a->t->ndim; d++)
        if (a->goff[d] >= b->goff[d] + b->t->shape[d] ||
            b->goff[d] >= a->goff[d] + a->t->shape[d])
            return 0;
    return 1;
}

/* The first stored tensor named `name` in byname order, or n. */
static size_t first_named(const fb_ckpt_layout *l, const char *name)
{
    size_t lo = 0, hi = l->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(l->byname[mid]->t->name, name) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The stored tensors that make up a request, appended to picks[*np]
 * (stored indexes).  0, or FB_EMISMATCH / FB_EFORMAT with err. */
static int plan_req(fb_ckpt_layout *l, const fb_ckpt_read_req *q, const box *b,
                    size_t *picks, size_t *np, char *err, size_t err_size)
{
    char want[FB__ST_MAX_DIMS * 21 + 1], got[FB__ST_MAX_DIMS * 21 + 1];
    uint64_t need = 1, have = 0;
    int found = 0;
    size_t first = *np;
    int64_t lo[FB__ST_MAX_DIMS], hi[FB__ST_MAX_DIMS];
    for (int d = 0; d < b->ndim; d++)
        need *= (uint64_t)b->n[d];
    for (size_t i = first_named(l, q->name);
         i < l->n && !strcmp(l->byname[i]->t->name, q->name); i++) {
        stored *s = l->byname[i];
        if (q->rank >= 0 && s->rank != q->rank)
            continue;
        found = 1;
        int same = s->t->ndim == b->ndim && s->t->dtype == q->dtype;
        for (int d = 0; same && d < b->ndim; d++)
            same = s->gshape[d] == b->g[d];
        if (!same) {
            dims_text(got, sizeof got, s->t->ndim, s->gshape);
            dims_text(want, sizeof want, b->ndim, b->g);
            fb__ckpt_say(err, err_size, "tensor \"%.200s\": %s [%s] in rank %d's "
                         "shard of step %" PRIu64 ", %s [%s] expected", q->name,
                         fb_dtype_name(s->t->dtype), got, s->rank, l->step,
                         fb_dtype_name(q->dtype), want);
            return FB_EMISMATCH;
        }
        uint64_t v = overlap(b, s, lo, hi);
        int dup = 0;
        for (size_t m = first; v && m < *np && !dup; m++) {
            const stored *o = &l->s[picks[m]];
            if (same_box(o, s))
                dup = 1;   /* a replica of a slice already taken */
            else if (boxes_meet(o, s)) {
                fb__ckpt_say(err, err_size, "tensor \"%.200s\": the slices in "
                             "rank %d's and rank %d's shards of step %" PRIu64
                             " overlap", q->name, o->rank, s->rank, l->step);
                return FB_EFORMAT;
            }
        }
        if (!v || dup)
            continue;
        picks[(*np)++] = (size_t)(s - l->s);
        have += v;
    }
    if (!found) {
        if (q->rank >= 0)
            fb__ckpt_say(err, err_size, "tensor \"%.200s\" is not in rank %d's "
                         "shard of step %" PRIu64 " (saved by %d ranks)", q->name,
                         q->rank, l->step, l->world_size);
        else
            fb__ckpt_say(err, err_size, "tensor \"%.200s\" is not in step %" PRIu64
                         " (saved by %d ranks)", q->name, l->step, l->world_size);
        return FB_EMISMATCH;
    }
    if (have != need) {
        dims_text(want, sizeof want, b->ndim, b->n);
        dims_text(got, sizeof got, b->ndim, b->lo);
        fb__ckpt_say(err, err_size, "tensor \"%.200s\": the slices saved by %d "
                     "ranks in step %" PRIu64 " hold %" PRIu64 " of the %" PRIu64
                     " elements of [%s] at [%s]", q->name, l->world_size, l->step,
                     have, need, want, got);
        return FB_EMISMATCH;
    }
    return 0;
}

/* Read and verify the needed tensors of one shard into their scratch. */
static int read_rank(fb_ckpt_layout *l, int rank, int threads, char *err,
                     size_t err_size)
{
    const fb__st_header *h = l->hdr[rank];
    size_t cnt = 0;
    for (size_t k = 0; k < l->n; k++)
        cnt += l->s[k].rank == rank && l->s[k].needed;
    if (!cnt)
        return 0;
    char path[PATH_MAX];
    if (fb__ckpt_shard_path(path, sizeof path, l->dir, l->step, rank))
        return -ENAMETOOLONG;
    fb__st_tensor *sub = fb__calloc(cnt, sizeof *sub);
    void **dest = fb__calloc(cnt, sizeof *dest);
    fb__st_header *now = NULL;
    int fd = -1, rc = -ENOMEM;
    if (!sub || !dest) {
        fb__ckpt_say(err, err_size, "%s: out of memory", path);
        goto out;
    }
    /* The file may have been replaced since the layout was read: its
     * header must be the one the regions were planned with. */
    rc = fb__st_open(path, &fd, &now, err, err_size);
    if (rc)
        goto out;
    rc = FB_ECORRUPT;
    if (now->header_len != h->header_len || now->data_len != h->data_len) {
        fb__ckpt_say(err, err_size, "%s: changed since the checkpoint's layout "
                     "was read", path);
        goto out;
    }
    size_t j = 0;
    uint64_t bytes = 0;
    for (size_t k = 0; k < l->n; k++) {  /* by rank, then file order */
        stored *s = &l->s[k];
        if (s->rank != rank || !s->needed)
            continue;
        const fb__st_tensor *t = fb__st_find(now, s->t->name);
        if (!t || t->begin != s->t->begin || t->end != s->t->end) {
            fb__ckpt_say(err, err_size, "%s: changed since the checkpoint's "
                         "layout was read", path);
            goto out;
        }
        size_t len = (size_t)(t->end - t->begin);
        if (!(s->buf = fb__malloc(len ? len : 1))) {
            rc = -ENOMEM;
            fb__ckpt_say(err, err_size, "%s: out of memory (%zu bytes for tensor "
                         "\"%.200s\")", path, len, t->name);
            goto out;
        }
        sub[j] = *t;
        dest[j++] = s->buf;
        bytes += len;
    }
    fb__st_header view = *now;   /* only the tensors needed, in file order */
    view.tensors = sub;
    view.ntensors = cnt;
    view.data_len = bytes;       /* only splits the work between threads */
    rc = fb__shard_read_verify(fd, &view, path, dest, threads, NULL, NULL, NULL,
                               NULL, err, err_size);
out:
    if (fd >= 0)
        close(fd);
    fb__st_free(now);
    free(dest);
    free(sub);
    return rc;
}

/* Copy the overlap [lo, hi) of stored slice s (verified, in s->buf) into
 * the request's buffer: one memcpy per run of the last dimension. */
static void copy_overlap(const stored *s, const box *b, const int64_t *lo,
                         const int64_t *hi, void *data)
{
    size_t es = fb_dtype_size(s->t->dtype);
    int nd = b->ndim;
    if (nd == 0) {
        memcpy(data, s->buf, es);
        return;
    }
    int64_t idx[FB__ST_MAX_DIMS];
    for (int d = 0; d < nd; d++)
        idx[d] = lo[d];
    size_t run = (size_t)(hi[nd - 1] - lo[nd - 1]) * es;
    for (;;) {
        uint64_t src = 0, dst = 0;
        for (int d = 0; d < nd; d++) {
            src = src * (uint64_t)s->t->shape[d] + (uint64_t)(idx[d] - s->goff[d]);
            dst = dst * (uint64_t)b->n[d] + (uint64_t)(idx[d] - b->lo[d]);
        }
        memcpy((char *)data + dst * es, (const char *)s->buf + src * es, run);
        int d = nd - 2;
        while (d >= 0 && ++idx[d] == hi[d]) {
            idx[d] = lo[d];
            d--;
        }
        if (d < 0)
            return;
    }
}

int fb_ckpt_layout_read(fb_ckpt_layout *lay, const fb_ckpt_read_req *req,
                        size_t n, int io_threads, char *err, size_t err_size)
{
    char scratch_err[8];
    if (!err || !err_size) {
        err = scratch_err;
        err_size = sizeof scratch_err;
    }
    err[0] = '\0';
    if (!lay || (n && !req))
        return -EINVAL;
    if (io_threads <= 0)
        io_threads = 4;
    /* A stored tensor serves a request at most once: picks <= n * stored
     * tensors, but also <= what overlaps; grown as needed. */
    box *b = fb__calloc(n ? n : 1, sizeof *b);
    size_t *pstart = fb__calloc(n + 1, sizeof *pstart);
    size_t cap = lay->n + n + 16, np = 0, *picks = fb__calloc(cap, sizeof *picks);
    int rc = -ENOMEM;
    if (!b || !pstart || !picks) {
        fb__ckpt_say(err, err_size, "out of memory");
        goto out;
    }
    for (size_t k = 0; k < lay->n; k++)
        lay->s[k].needed = 0;
    for (size_t i = 0; i < n; i++) {
        if (cap - np < lay->n) {  /* room for every stored tensor */
            size_t *p = fb__realloc(picks, (cap = np + lay->n + cap) * sizeof *p);
            if (!p) {
                fb__ckpt_say(err, err_size, "out of memory");
                rc = -ENOMEM;
                goto out;
            }
            picks = p;
        }
        pstart[i] = np;
        if ((rc = check_req(&req[i], &b[i], err, err_size)) ||
            (rc = plan_req(lay, &req[i], &b[i], picks, &np, err, err_size)))
            goto out;
        for (size_t m = pstart[i]; m < np; m++)
            lay->s[picks[m]].needed = 1;
    }
    pstart[n] = np;
    for (int r = 0; r < lay->world_size; r++)
        if ((rc = read_rank(lay, r, io_threads, err, err_size)))
            goto out;
    /* Everything needed verified: only now into the callers' buffers. */
    int64_t lo[FB__ST_MAX_DIMS], hi[FB__ST_MAX_DIMS];
    for (size_t i = 0; i < n; i++)
        for (size_t m = pstart[i]; m < pstart[i + 1]; m++)
            if (overlap(&b[i], &lay->s[picks[m]], lo, hi))
                copy_overlap(&lay->s[picks[m]], &b[i], lo, hi, req[i].data);
    rc = 0;
out:
    for (size_t k = 0; k < lay->n; k++) {  /* scratch lives for one read */
        free(lay->s[k].buf);
        lay->s[k].buf = NULL;
    }
    free(picks);
    free(pstart);
    free(b);
    return rc;
}
