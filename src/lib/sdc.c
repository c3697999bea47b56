/*
 * sdc.c -- the rank's side of the silent-data-corruption check
 * (docs/sdc.md): hash a rotating slice of the registered replicated
 * tensors after each optimizer step, every tensor every `full_every`
 * steps, and publish one record per tensor piece in the segment's SDC
 * ring (segment.h, minor 3).  The supervisor compares (supervisor/sdc.c).
 *
 * The hash is the checkpoints' (XXH3-64; CRC32C in builds without
 * libxxhash): every rank of a job runs the same build.
 *
 * Cost: one XXH3 pass over `slice_bytes` per step, plus a pass over every
 * tensor once per `full_every` steps; no lock, no system call.
 */
#include "lib/lib.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/hash.h"
#include "common/util.h"

#define SDC_MAX_TENSORS 4096
#define SDC_MIN_SLICE 4096
/* Records one check may publish: a slice over many small tensors stops
 * early and the rotation goes on from there next step. */
#define SDC_MAX_PIECES 64

typedef struct sdc_tensor {
    char name[FB__SEG_SDC_NAME_MAX];
    unsigned char *data;
    size_t bytes;
} sdc_tensor;

static struct {
    sdc_tensor *t;
    uint32_t n, cap;
    size_t total;       /* bytes registered */
    size_t slice;
    uint64_t full_every;
    int configured;
    uint32_t cur_t;     /* rotation: next tensor ... */
    size_t cur_off;     /* ... and byte within it    */
} S;

static void configure_defaults(void)
{
    if (S.configured)
        return;
    S.configured = 1;
    S.slice = FB_SDC_DEFAULT_SLICE_BYTES;
    S.full_every = FB_SDC_DEFAULT_FULL_EVERY;
    long long v;
    const char *e = fb__getenv("FIREBREAK_SDC_SLICE");
    if (e && fb__parse_int(e, SDC_MIN_SLICE, (long long)1 << 40, &v) == 0)
        S.slice = (size_t)v;
    e = fb__getenv("FIREBREAK_SDC_FULL_EVERY");
    if (e && fb__parse_int(e, 1, (long long)1 << 40, &v) == 0)
        S.full_every = (uint64_t)v;
}

int fb_sdc_configure(size_t slice_bytes, uint64_t full_every)
{
    int env_slice = fb__getenv("FIREBREAK_SDC_SLICE") != NULL;
    int env_full = fb__getenv("FIREBREAK_SDC_FULL_EVERY") != NULL;
    S.configured = 0;
    configure_defaults();
    if (slice_bytes && !env_slice)
        S.slice = slice_bytes < SDC_MIN_SLICE ? SDC_MIN_SLICE : slice_bytes;
    if (full_every && !env_full)
        S.full_every = full_every;
    S.cur_t = 0; /* pieces start at multiples of the (new) slice */
    S.cur_off = 0;
    return 0;
}

int fb_sdc_register(const char *name, void *data, size_t bytes)
{
    if (!name || !name[0] || (!data && bytes))
        return -EINVAL;
    for (uint32_t i = 0; i < S.n; i++)
        if (!strncmp(S.t[i].name, name, sizeof S.t[i].name - 1))
            return -EINVAL;
    if (S.n == SDC_MAX_TENSORS)
        return -E2BIG;
    if (S.n == S.cap) {
        uint32_t nc = S.cap ? S.cap * 2 : 16;
        sdc_tensor *t = realloc(S.t, nc * sizeof *t);
        if (!t)
            return -ENOMEM;
        S.t = t;
        S.cap = nc;
    }
    sdc_tensor *t = &S.t[S.n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->data = data;
    t->bytes = bytes;
    S.total += bytes;
    configure_defaults();
    return 0;
}

void fb_sdc_clear(void)
{
    free(S.t);
    S.t = NULL;
    S.n = S.cap = 0;
    S.total = 0;
    S.cur_t = 0;
    S.cur_off = 0;
}

static void publish(uint64_t step, uint32_t ti, size_t off, size_t len,
                    uint32_t flags)
{
    const sdc_tensor *t = &S.t[ti];
    uint64_t h = fb__hash(fb__hash_default(), t->data + off, len);
    fb__seg_append_sdc(fb__lib_seg(), step, h, off, len, ti, flags, t->name);
}

int fb_sdc_check(uint64_t step)
{
    if (!S.n || !fb__lib_seg())
        return 0; /* nothing to check, or nobody to compare with */
    configure_defaults();
    if (S.full_every && step % S.full_every == 0) {
        for (uint32_t i = 0; i < S.n; i++)
            publish(step, i, 0, S.t[i].bytes, FB__SDC_FULL);
        return 0;
    }
    /* Rotation: `slice` bytes from where the last check stopped, one
     * record per tensor piece.  Pieces start at multiples of the slice
     * within a tensor, so the same piece is hashed again a whole rotation
     * later and the supervisor can tell when it last agreed. */
    if (S.cur_t >= S.n)
        S.cur_t = 0, S.cur_off = 0;
    uint32_t t0 = S.cur_t;
    size_t o0 = S.cur_off, done = 0;
    for (int pieces = 0; pieces < SDC_MAX_PIECES && done < S.slice &&
                         (done < S.total || pieces == 0); pieces++) {
        if (pieces > 0 && S.cur_t == t0 && S.cur_off == o0)
            break; /* a whole rotation in one check */
        const sdc_tensor *t = &S.t[S.cur_t];
        size_t len = t->bytes - S.cur_off;
        if (len > S.slice)
            len = S.slice;
        publish(step, S.cur_t, S.cur_off, len, 0);
        done += len;
        S.cur_off += len;
        if (S.cur_off >= t->bytes && ++S.cur_t >= S.n)
            S.cur_t = 0;
        if (S.cur_off >= t->bytes)
            S.cur_off = 0;
    }
    return 0;
}

/* Flip one bit of a registered tensor (inject.c, FB__INJECT_FLIP):
 * `name` or, when NULL or empty, the first tensor; the bit is in the
 * middle byte.  The name of the tensor hit goes into `hit`.  0, or
 * -ENOENT when no such tensor (or it is empty). */
int fb__sdc_flip(const char *name, char *hit, size_t hit_size)
{
    for (uint32_t i = 0; i < S.n; i++) {
        sdc_tensor *t = &S.t[i];
        if (name && name[0] && strcmp(t->name, name))
            continue;
        if (!t->bytes)
            continue;
        t->data[t->bytes / 2] ^= 0x10;
        snprintf(hit, hit_size, "%s", t->name);
        return 0;
    }
    return -ENOENT;
}
