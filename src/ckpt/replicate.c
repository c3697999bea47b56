/*
 * replicate.c -- fbr1: a step's node-memory shards to a peer's memory over
 * TCP (see replicate.h for the protocol).
 *
 * The sender hands the kernel each shard file with sendfile (no copy in
 * user space).  The receiver maps the temporary file and reads the socket
 * straight into the mapping (one copy, the socket's): the length word and
 * the header first, checked as a reader checks a file (safetensors.c,
 * shard.c), then the data in 256 KiB chunks, each hashed right after it
 * arrived, while it is still in the cache.  Only a shard whose every hash
 * matched is renamed to its committed name.
 */
#include "ckpt/replicate.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/engine.h"
#include "ckpt/hash.h"
#include "ckpt/safetensors.h"
#include "ckpt/shard.h"
#include "ckpt/store.h"
#include "ckpt/tier.h"
#include "common/util.h"
#include "firebreak/firebreak.h"

static void put_le(unsigned char *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_le(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

void fb__repl_header_encode(const fb__repl_header *h,
                            unsigned char out[FB__REPL_HEADER_BYTES])
{
    memcpy(out, "FBR1", 4);
    put_le(out + 4, h->rank, 4);
    put_le(out + 8, h->step, 8);
    put_le(out + 16, h->bytes, 8);
}

int fb__repl_header_decode(const unsigned char *buf, size_t len,
                           uint64_t max_bytes, fb__repl_header *h, char *why,
                           size_t why_size)
{
    if (len < FB__REPL_HEADER_BYTES) {
        fb__ckpt_say(why, why_size, "fbr1 header: %zu bytes, want %d", len,
                     FB__REPL_HEADER_BYTES);
        return FB_EFORMAT;
    }
    if (memcmp(buf, "FBR1", 4)) {
        fb__ckpt_say(why, why_size, "fbr1 header: bad magic");
        return FB_EFORMAT;
    }
    h->rank = (uint32_t)get_le(buf + 4, 4);
    h->step = get_le(buf + 8, 8);
    h->bytes = get_le(buf + 16, 8);
    if (h->rank > 99999) {
        fb__ckpt_say(why, why_size, "fbr1 header: rank %u over 99999", h->rank);
        return FB_EFORMAT;
    }
    if (h->step > FB__REPL_MAX_STEP) {
        fb__ckpt_say(why, why_size, "fbr1 header: step %llu over %llu",
                     (unsigned long long)h->step, FB__REPL_MAX_STEP);
        return FB_EFORMAT;
    }
    if (h->bytes < 8 || h->bytes > max_bytes) {
        fb__ckpt_say(why, why_size, "fbr1 header: shard of %llu bytes (8 to %llu)",
                     (unsigned long long)h->bytes, (unsigned long long)max_bytes);
        return FB_EFORMAT;
    }
    return 0;
}

/* Read exactly n bytes: 0, 1 at EOF before any byte, or -errno (-EPIPE:
 * EOF inside). */
static int read_full(int fd, void *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, (char *)buf + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -errno;
        if (r == 0)
            return got ? -EPIPE : 1;
        got += (size_t)r;
    }
    return 0;
}

static int write_full(int fd, const void *buf, size_t n)
{
    size_t off = 0;
    while (off < n) {
        ssize_t r = write(fd, (const char *)buf + off, n - off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -errno;
        off += (size_t)r;
    }
    return 0;
}

#define RECV_CHUNK (256u << 10) /* hashed while still in the cache */

/* The hashes a shard's header promises, checked as its data arrives. */
typedef struct verifier {
    const fb__st_header *h;
    fb__hash_alg alg;
    size_t ti;              /* tensor being hashed                   */
    uint64_t pos;           /* bytes of the data section seen         */
    fb__hash_ctx *ctx;
    int rc;
    char *why;
    size_t why_size;
    const char *label;
} verifier;

static int verifier_init(verifier *v, const fb__st_header *h, const char *label,
                         char *why, size_t why_size)
{
    memset(v, 0, sizeof *v);
    v->h = h;
    v->label = label;
    v->why = why;
    v->why_size = why_size;
    int alg = fb__hash_alg_from_name(fb__st_meta_get(h, "firebreak.hash"));
    if (alg < 0) {
        fb__ckpt_say(why, why_size, "%s: hash algorithm not known", label);
        return FB_EFORMAT;
    }
    v->alg = (fb__hash_alg)alg;
    return 0;
}

/* Compare tensor ti's digest with its recorded hash. */
static void verifier_close_tensor(verifier *v)
{
    const fb__st_tensor *t = &v->h->tensors[v->ti];
    uint64_t got = v->ctx ? fb__hash_digest(v->ctx) : fb__hash(v->alg, "", 0), want = 0;
    fb__hash_free(v->ctx);
    v->ctx = NULL;
    char key[FB__ST_NAME_MAX + 32];
    snprintf(key, sizeof key, "firebreak.hash.%s", t->name);
    const char *hex = fb__st_meta_get(v->h, key);
    if (!v->rc && (!hex || fb__hash_parse_hex(hex, &want) || got != want)) {
        fb__ckpt_say(v->why, v->why_size, "%s: tensor \"%.200s\": hash %016llx, "
                     "recorded %s (data corrupted)", v->label, t->name,
                     (unsigned long long)got, hex ? hex : "none");
        v->rc = FB_ECORRUPT;
    }
    v->ti++;
}

/* The next n bytes of the data section. */
static void verifier_feed(verifier *v, const unsigned char *p, size_t n)
{
    while (v->ti < v->h->ntensors) {
        const fb__st_tensor *t = &v->h->tensors[v->ti];
        if (v->pos >= t->end) {
            verifier_close_tensor(v);
            continue;
        }
        if (!n)
            return;
        if (!v->ctx && !(v->ctx = fb__hash_new(v->alg))) {
            v->rc = -ENOMEM;
            return;
        }
        size_t take = t->end - v->pos < n ? (size_t)(t->end - v->pos) : n;
        fb__hash_update(v->ctx, p, take);
        p += take;
        n -= take;
        v->pos += take;
    }
}

/*
 * One shard off the socket into tmp (mapped): the length word and the
 * header first, checked (format, place, metadata), then the data in
 * chunks, each hashed right after it arrived.  0: received whole and
 * verified; FB_ECORRUPT / FB_EFORMAT: received whole, not valid (the
 * stream is still in step); other: the connection failed.  *stream_ok
 * says whether the stream is still in step.
 */
static int receive_into(int fd, const char *tmp, const fb__repl_header *rh,
                        int *stream_ok, char *why, size_t why_size)
{
    uint64_t bytes = rh->bytes;
    *stream_ok = 0;
    int out = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (out < 0) {
        int rc = -errno;
        fb__ckpt_say(why, why_size, "create %s: %s", tmp, strerror(-rc));
        return rc;
    }
    int rc = 0;
    unsigned char *map = MAP_FAILED;
    fb__st_header *h = NULL;
    verifier v = {0};
    if ((fallocate(out, 0, 0, (off_t)bytes) &&
         (errno != EOPNOTSUPP || ftruncate(out, (off_t)bytes)))) {
        rc = -errno;
        fb__ckpt_say(why, why_size, "allocate %s (%llu bytes): %s", tmp,
                     (unsigned long long)bytes, strerror(-rc));
        goto out;
    }
    map = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, out, 0);
    if (map == MAP_FAILED) {
        rc = -errno;
        fb__ckpt_say(why, why_size, "map %s: %s", tmp, strerror(-rc));
        goto out;
    }
    if ((rc = read_full(fd, map, 8)))
        goto cut;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = (n << 8) | map[i];
    if (n > FB__ST_HEADER_MAX || n > bytes - 8) {
        fb__ckpt_say(why, why_size, "%s: header length %llu in a shard of %llu "
                     "bytes", tmp, (unsigned long long)n, (unsigned long long)bytes);
        rc = FB_EFORMAT;
        goto out; /* cannot tell where the shard's bytes end: stop */
    }
    if ((rc = read_full(fd, map + 8, (size_t)n)))
        goto cut;
    int bad = fb__st_parse_header((const char *)map + 8, (size_t)n, bytes, tmp, &h,
                                  why, why_size);
    if (!bad)
        bad = fb__shard_check_place(h, tmp, rh->step, (int)rh->rank, 0, why, why_size);
    if (!bad)
        bad = fb__shard_check_meta(h, tmp, why, why_size);
    if (!bad)
        bad = verifier_init(&v, h, tmp, why, why_size);
    /* The rest of the shard is read either way, to stay in step. */
    for (uint64_t off = 8 + n; off < bytes;) {
        size_t want = bytes - off < RECV_CHUNK ? (size_t)(bytes - off) : RECV_CHUNK;
        if ((rc = read_full(fd, map + off, want)))
            goto cut;
        if (!bad)
            verifier_feed(&v, map + off, want);
        off += want;
    }
    if (!bad) {
        verifier_feed(&v, NULL, 0); /* closes the tensors that end here */
        bad = v.rc;
    }
    *stream_ok = 1;
    rc = bad;
    goto out;
cut:
    rc = rc > 0 ? -EPIPE : rc;
    fb__ckpt_say(why, why_size, "receiving %s: %s", tmp, strerror(-rc));
out:
    fb__hash_free(v.ctx);
    fb__st_free(h);
    if (map != MAP_FAILED)
        munmap(map, bytes);
    close(out);
    return rc;
}

int fb__repl_serve(int fd, const char *dir, uint64_t max_bytes,
                   fb__repl_stats *st, char *why, size_t why_size)
{
    for (;;) {
        unsigned char hb[FB__REPL_HEADER_BYTES];
        int rc = read_full(fd, hb, sizeof hb);
        if (rc == 1)
            return 0;
        if (rc) {
            fb__ckpt_say(why, why_size, "fbr1: reading a header: %s", strerror(-rc));
            return rc;
        }
        fb__repl_header h;
        if ((rc = fb__repl_header_decode(hb, sizeof hb, max_bytes, &h, why,
                                         why_size)))
            return rc;
        char sdir[PATH_MAX], tmp[PATH_MAX], dst[PATH_MAX];
        if (fb__ckpt_step_path(sdir, sizeof sdir, dir, h.step) ||
            fb__fmt(tmp, sizeof tmp, "%s/.rank-%05u.%d.tmp", sdir, h.rank,
                    (int)getpid()) ||
            fb__ckpt_shard_path(dst, sizeof dst, dir, h.step, (int)h.rank)) {
            fb__ckpt_say(why, why_size, "fbr1: path too long under %s", dir);
            return -ENAMETOOLONG;
        }
        if (mkdir(sdir, 0700) && errno != EEXIST) {
            rc = -errno;
            fb__ckpt_say(why, why_size, "mkdir %s: %s", sdir, strerror(-rc));
            return rc;
        }
        char err[1024];
        int in_step = 0;
        int status = receive_into(fd, tmp, &h, &in_step, err, sizeof err);
        if (!in_step) {
            unlink(tmp);
            rmdir(sdir);
            fb__ckpt_say(why, why_size, "fbr1: %s", err);
            return status; /* the stream is no longer in step */
        }
        if (!status && rename(tmp, dst))
            status = -errno;
        if (!status) {
            fb__fsync_dir(sdir);
            if (st)
                st->shards++, st->bytes += h.bytes;
        } else {
            unlink(tmp);
            rmdir(sdir); /* only when empty */
            if (st)
                st->rejected++;
            fprintf(stderr, "firebreak: replica of step %llu rank %u rejected: %s\n",
                    (unsigned long long)h.step, h.rank, err);
        }
        unsigned char ack[4];
        put_le(ack, (uint32_t)status, 4);
        if ((rc = write_full(fd, ack, sizeof ack))) {
            fb__ckpt_say(why, why_size, "fbr1: answering: %s", strerror(-rc));
            return rc;
        }
    }
}

static int send_shard(int fd, const char *dir, uint64_t step, int rank, char *why,
                      size_t why_size)
{
    char path[PATH_MAX];
    if (fb__ckpt_shard_path(path, sizeof path, dir, step, rank)) {
        fb__ckpt_say(why, why_size, "path too long under %s", dir);
        return -ENAMETOOLONG;
    }
    int in = fb__open_regular(path, 0);
    if (in < 0) {
        fb__ckpt_say(why, why_size, "open %s: %s", path, fb_strerror(in));
        return in;
    }
    struct stat stt;
    int rc = 0;
    if (fstat(in, &stt)) {
        rc = -errno;
        fb__ckpt_say(why, why_size, "stat %s: %s", path, strerror(-rc));
        close(in);
        return rc;
    }
    fb__repl_header h = {.rank = (uint32_t)rank, .step = step,
                         .bytes = (uint64_t)stt.st_size};
    unsigned char hb[FB__REPL_HEADER_BYTES];
    fb__repl_header_encode(&h, hb);
    rc = write_full(fd, hb, sizeof hb);
    off_t off = 0;
    while (!rc && off < stt.st_size) {
        ssize_t r = sendfile(fd, in, &off, (size_t)(stt.st_size - off));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            rc = r < 0 ? -errno : -EIO; /* the file shrank under us */
    }
    if (rc)
        fb__ckpt_say(why, why_size, "sending %s: %s", path, strerror(-rc));
    close(in);
    return rc;
}

int fb__repl_send_step(int fd, const char *dir, uint64_t step, int rank0,
                       int nranks, char *why, size_t why_size)
{
    /* A shard's short tail and the next 24-byte header go out at once,
     * not held back by Nagle.  Not a TCP socket: nothing to set. */
    int one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    int rc = 0;
    for (int r = rank0; r < rank0 + nranks && !rc; r++)
        rc = send_shard(fd, dir, step, r, why, why_size);
    if (rc)
        return rc;
    for (int r = rank0; r < rank0 + nranks; r++) {
        unsigned char ack[4];
        int e = read_full(fd, ack, sizeof ack);
        if (e) {
            e = e > 0 ? -EPIPE : e;
            fb__ckpt_say(why, why_size, "waiting for the peer's answer on rank %d: "
                         "%s", r, strerror(-e));
            return e;
        }
        int status = (int)(int32_t)get_le(ack, 4);
        if (status && !rc) {
            rc = status;
            fb__ckpt_say(why, why_size, "the peer rejected step %llu rank %d: %s",
                         (unsigned long long)step, r, fb_strerror(status));
        }
    }
    return rc;
}
