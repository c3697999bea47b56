/*
 * test_engine.c -- the checkpoint engine as a training program sees it:
 * round trips of every dtype (sync and async), completeness across ranks,
 * fallback on corruption (tensors untouched when every checkpoint is bad),
 * shards out of place, stale temporaries, mismatch, retention, busy/skip,
 * write failures, SIGKILL at each point of a save, sharded slices and the
 * options struct across library versions.  `test_engine NAME` runs one
 * case, `test_engine --list` names them (the table at the end).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ckpt/engine.h"
#include "ckpt/hash.h"
#include "ckpt/safetensors.h"
#include "ckpt/store.h"
#include "ckpt/tier.h"
#include "common/util.h"
#include "firebreak/firebreak.h"
#include "../check.h"

static char root[256];

static void fresh_dir(const char *name, char *out, size_t size)
{
    snprintf(out, size, "%s/%s", root, name);
    fb__rm_rf(out);
}

/* fb_ckpt_open's result; *ck the handle on success. */
static int try_open(const char *dir, int rank, int world, int async, int keep,
                    fb_ckpt_snapshot snapshot, fb_ckpt **ck)
{
    fb_ckpt_options o;
    fb_ckpt_options_init(&o);
    o.dir = dir;
    o.rank = rank;
    o.world_size = world;
    o.async = async;
    o.keep = keep;
    o.snapshot = snapshot;
    *ck = NULL;
    return fb_ckpt_open(ck, &o);
}

static fb_ckpt *open_ck(const char *dir, int rank, int world, int async, int keep)
{
    fb_ckpt *ck = NULL;
    CHECK_RC(try_open(dir, rank, world, async, keep, FB_CKPT_SNAPSHOT_AUTO, &ck), 0);
    return ck;
}

static void fill(void *p, size_t n, unsigned seed)
{
    unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        b[i] = (unsigned char)((i * 2654435761u + seed * 40503u) >> 13);
}

/* One state of every dtype plus a scalar, an empty and a bigger tensor. */
typedef struct state {
    void *buf[FB_DTYPE_COUNT_ + 3];
    size_t bytes[FB_DTYPE_COUNT_ + 3];
} state;

static void state_register(fb_ckpt *ck, state *s, unsigned seed)
{
    char name[64];
    for (int d = 0; d < FB_DTYPE_COUNT_; d++) {
        int64_t shape[2] = {3, 5 + d};
        s->bytes[d] = 3 * (size_t)(5 + d) * fb_dtype_size((fb_dtype)d);
        s->buf[d] = malloc(s->bytes[d]);
        fill(s->buf[d], s->bytes[d], seed + (unsigned)d);
        snprintf(name, sizeof name, "t.%s", fb_dtype_name((fb_dtype)d));
        CHECK_RC(fb_ckpt_register(ck, name, (fb_dtype)d, 2, shape, s->buf[d]), 0);
    }
    int k = FB_DTYPE_COUNT_;
    s->bytes[k] = 8;
    s->buf[k] = malloc(8);
    fill(s->buf[k], 8, seed + 100);
    CHECK_RC(fb_ckpt_register(ck, "scalar", FB_DTYPE_F64, 0, NULL, s->buf[k]), 0);
    k++;
    int64_t zero[2] = {0, 4};
    s->bytes[k] = 0;
    s->buf[k] = malloc(1);
    CHECK_RC(fb_ckpt_register(ck, "empty", FB_DTYPE_F32, 2, zero, s->buf[k]), 0);
    k++;
    int64_t big[1] = {3 << 20}; /* 12 MiB: mmap'd staging, several chunks */
    s->bytes[k] = (size_t)big[0] * 4;
    s->buf[k] = malloc(s->bytes[k]);
    fill(s->buf[k], s->bytes[k], seed + 200);
    CHECK_RC(fb_ckpt_register(ck, "big", FB_DTYPE_F32, 1, big, s->buf[k]), 0);
}

static void state_refill(state *s, unsigned seed)
{
    for (int k = 0; k < FB_DTYPE_COUNT_ + 3; k++)
        fill(s->buf[k], s->bytes[k], seed + (unsigned)k * 7);
}

static void state_zero(state *s)
{
    for (int k = 0; k < FB_DTYPE_COUNT_ + 3; k++)
        memset(s->buf[k], 0, s->bytes[k]);
}

static void state_snapshot(const state *s, state *copy)
{
    for (int k = 0; k < FB_DTYPE_COUNT_ + 3; k++) {
        copy->bytes[k] = s->bytes[k];
        copy->buf[k] = malloc(s->bytes[k] ? s->bytes[k] : 1);
        memcpy(copy->buf[k], s->buf[k], s->bytes[k]);
    }
}

/* Every tensor of `got` holds the bytes of `want`'s. */
#define CHECK_STATE(got, want)                                                \
    do {                                                                      \
        for (int k_ = 0; k_ < FB_DTYPE_COUNT_ + 3; k_++) {                    \
            CHECK_EQ_U64((got)->bytes[k_], (want)->bytes[k_]);                \
            CHECK_EQ_MEM((got)->buf[k_], (want)->buf[k_], (got)->bytes[k_]);  \
        }                                                                     \
    } while (0)

static void state_free(state *s)
{
    for (int k = 0; k < FB_DTYPE_COUNT_ + 3; k++)
        free(s->buf[k]);
}

/* A restore that finds no good checkpoint changes no registered byte. */
static void check_refused_untouched(fb_ckpt *ck, const state *s)
{
    state before;
    state_snapshot(s, &before);
    CHECK_RC(fb_ckpt_restore(ck, NULL), FB_ENOCKPT);
    CHECK_STATE(s, &before);
    state_free(&before);
}

static int exists(const char *fmt, const char *dir, unsigned long long step, int rank)
{
    char p[512];
    snprintf(p, sizeof p, fmt, dir, step, rank);
    struct stat st;
    return stat(p, &st) == 0;
}
#define SHARD "%s/step-%010llu/rank-%05d.safetensors"

/* Save steps 10 and 20 with different contents; restore gives 20's. */
static void case_roundtrip(int async)
{
    char dir[300];
    fresh_dir(async ? "rt_async" : "rt_sync", dir, sizeof dir);
    fb_ckpt *ck = open_ck(dir, 0, 1, async, 2);
    state s, want;
    state_register(ck, &s, 1);
    CHECK_RC(fb_ckpt_save(ck, 10), 0);
    CHECK_RC(fb_ckpt_wait(ck), 0);
    state_refill(&s, 2);
    CHECK_RC(fb_ckpt_save(ck, 20), 0);
    /* The async copy is taken at save: changing tensors now is safe. */
    state_snapshot(&s, &want);
    state_refill(&s, 3);
    CHECK_RC(fb_ckpt_wait(ck), 0);
    CHECK(exists(SHARD, dir, 20, 0));
    state_zero(&s);
    uint64_t step = 0;
    CHECK_RC(fb_ckpt_restore(ck, &step), 0);
    CHECK_EQ_U64(step, 20);
    CHECK_STATE(&s, &want);
    fb_ckpt_close(ck);
    state_free(&s);
    state_free(&want);
}

/* Over 64 MiB, save's copy is split across threads, cutting tensors in
 * the middle: every byte must still arrive. */
static void case_big_copy(void)
{
    char dir[300];
    fresh_dir("bigcopy", dir, sizeof dir);
    fb_ckpt_options o;
    fb_ckpt_options_init(&o);
    o.dir = dir;
    o.rank = 0;
    o.world_size = 1;
    o.io_threads = 3;
    fb_ckpt *ck = NULL;
    CHECK_RC(fb_ckpt_open(&ck, &o), 0);
    ck->copy_threads = 3; /* whatever this machine's core count */
    enum { N = 5 };
    size_t sizes[N] = {37u << 20, 3, 29u << 20, 1001, 7u << 20};
    unsigned char *t[N], *want[N];
    for (int i = 0; i < N; i++) {
        t[i] = malloc(sizes[i]);
        want[i] = malloc(sizes[i]);
        fill(t[i], sizes[i], (unsigned)i + 5);
        memcpy(want[i], t[i], sizes[i]);
        char name[16];
        snprintf(name, sizeof name, "t%d", i);
        int64_t shape[1] = {(int64_t)sizes[i]};
        CHECK_RC(fb_ckpt_register(ck, name, FB_DTYPE_U8, 1, shape, t[i]), 0);
    }
    CHECK_RC(fb_ckpt_save(ck, 1), 0);
    for (int i = 0; i < N; i++)
        memset(t[i], 0, sizes[i]);
    CHECK_RC(fb_ckpt_wait(ck), 0);
    uint64_t step = 0;
    CHECK_RC(fb_ckpt_restore(ck, &step), 0);
    for (int i = 0; i < N; i++) {
        CHECK_EQ_MEM(t[i], want[i], sizes[i]);
        free(t[i]);
        free(want[i]);
    }
    fb_ckpt_close(ck);
}

static void flip_byte(const char *path, long from_end)
{
    FILE *f = fopen(path, "r+b");
    CHECK(f != NULL);
    if (!f)
        return;
    fseek(f, -from_end, SEEK_END);
    int c = fgetc(f);
    fseek(f, -from_end, SEEK_END);
    fputc(c ^ 0x5a, f);
    fclose(f);
}

static void case_corrupt(void)
{
    char dir[300], p[512];
    fresh_dir("corrupt", dir, sizeof dir);
    fb_ckpt *ck = open_ck(dir, 0, 1, 1, 3);
    state s, want;
    state_register(ck, &s, 1);
    CHECK_RC(fb_ckpt_save(ck, 1), 0);
    state_snapshot(&s, &want);
    CHECK_RC(fb_ckpt_wait(ck), 0);
    state_refill(&s, 9);
    CHECK_RC(fb_ckpt_save(ck, 2), 0);
    CHECK_RC(fb_ckpt_wait(ck), 0);
    snprintf(p, sizeof p, SHARD, dir, 2ull, 0);
    flip_byte(p, 5);
    state_zero(&s);
    uint64_t step = 0;
    CHECK_RC(fb_ckpt_restore(ck, &step), 0);
    CHECK_EQ_U64(step, 1);
    CHECK_STATE(&s, &want);
    /* The corrupt shard is set aside: later restores skip it at once. */
    CHECK(!exists(SHARD, dir, 2, 0));
    CHECK(exists("%s/step-%010llu/rank-%05d.corrupt", dir, 2, 0));
    /* A truncated shard falls back too. */
    snprintf(p, sizeof p, SHARD, dir, 1ull, 0);
    CHECK(truncate(p, 100) == 0);
    CHECK_RC(fb_ckpt_restore(ck, &step), FB_ENOCKPT);
    fb_ckpt_close(ck);
    state_free(&s);
    state_free(&want);
}

/* A restore that fails leaves every registered byte as it was: each
 * checkpoint is corrupt in its last tensor ("big"), read after the others
 * (by another thread, too). */
static void case_untouched(int async)
{
    char dir[300], p[512];
    fresh_dir(async ? "untouched_async" : "untouched_sync", dir, sizeof dir);
    fb_ckpt *ck = open_ck(dir, 0, 1, async, 3);
    state s;
    state_register(ck, &s, 1);
    for (unsigned k = 1; k <= 2; k++) {
        state_refill(&s, k);
        CHECK_RC(fb_ckpt_save(ck, k), 0);
        CHECK_RC(fb_ckpt_wait(ck), 0);
        snprintf(p, sizeof p, SHARD, dir, (unsigned long long)k, 0);
        flip_byte(p, 5);
    }
    state_refill(&s, 77);
    check_refused_untouched(ck, &s);
    fb_ckpt_close(ck);
    state_free(&s);
}

/* A synchronous handle reads a tensor straight into place while the bytes
 * it overwrites are zero, and only the others twice (verified first): a
 * mixed state -- even tensors zero, odd ones not, "big" (12 MiB, read in
 * pieces) zero but for its last MiB -- restores to the saved bytes with
 * only the non-zero tensors (big whole) read again, an all-zero one with
 * none; and a restore that fails (every checkpoint corrupt in big, whose
 * zero part was overwritten by then) leaves every byte as it was. */
static void mixed_zero(state *s)
{
    const int big = FB_DTYPE_COUNT_ + 2;
    for (int k = 0; k < big; k++)
        if (k % 2 == 0)
            memset(s->buf[k], 0, s->bytes[k]);
    memset(s->buf[big], 0, s->bytes[big] - (1u << 20));
}

static uint64_t nonzero_bytes(const state *s)
{
    uint64_t n = 0;
    for (int k = 0; k < FB_DTYPE_COUNT_ + 3; k++) {
        const unsigned char *b = s->buf[k];
        size_t i = 0;
        while (i < s->bytes[k] && !b[i])
            i++;
        n += i < s->bytes[k] ? s->bytes[k] : 0;
    }
    return n;
}

/* Step 2 saved, then both checkpoints made corrupt in big (read last):
 * restores of a mixed state and of an all-zero one are refused, every
 * byte as it was. */
static void check_corrupt_untouched(fb_ckpt *ck, const char *dir, state *s)
{
    char p[512];
    CHECK_RC(fb_ckpt_save(ck, 2), 0);
    CHECK_RC(fb_ckpt_wait(ck), 0);
    for (unsigned k = 1; k <= 2; k++) {
        snprintf(p, sizeof p, SHARD, dir, (unsigned long long)k, 0);
        flip_byte(p, 5);
    }
    state_refill(s, 77);
    mixed_zero(s);
    check_refused_untouched(ck, s);
    state_zero(s);
    check_refused_untouched(ck, s);
}

static void case_zero_in_place(void)
{
    char dir[300];
    fresh_dir("zero_in_place", dir, sizeof dir);
    fb_ckpt *ck = open_ck(dir, 0, 1, 0, 3);
    state s, want;
    state_register(ck, &s, 1);
    state_refill(&s, 5);
    CHECK_RC(fb_ckpt_save(ck, 1), 0);
    state_snapshot(&s, &want);
    /* Mixed: the non-zero tensors, big whole, are read again. */
    state_refill(&s, 9);
    mixed_zero(&s);
    uint64_t again = nonzero_bytes(&s), step = 0;
    CHECK(again > (1u << 20) && again < (16u << 20));
    CHECK_RC(fb_ckpt_restore(ck, &step), 0);
    CHECK_EQ_U64(step, 1);
    CHECK_STATE(&s, &want);
    CHECK_EQ_U64(ck->reread, again);
    /* All zero: one read. */
    state_zero(&s);
    CHECK_RC(fb_ckpt_restore(ck, &step), 0);
    CHECK_STATE(&s, &want);
    CHECK_EQ_U64(ck->reread, 0);
    /* Every checkpoint corrupt in big: the zero bytes overwritten before its
     * hash failed are cleared again, the others never touched. */
    check_corrupt_untouched(ck, dir, &s);
    fb_ckpt_close(ck);
    state_free(&s);
    state_free(&want);
}

/* An async handle keeps aside in staging only what is not zero: the same
 * mixed state restores to the saved bytes with only the non-zero tensors
 * (big whole: its zero part cleared in the backup when its last MiB was
 * met) kept aside, an all-zero state with nothing; and a restore that
 * fails leaves every byte as it was, the zero ones cleared again. */
static void case_zero_aside(void)
{
    char dir[300];
    fresh_dir("zero_aside", dir, sizeof dir);
    fb_ckpt *ck = open_ck(dir, 0, 1, 1, 3);
    state s, want;
    state_register(ck, &s, 1);
    state_refill(&s, 5);
    CHECK_RC(fb_ckpt_save(ck, 1), 0);
    CHECK_RC(fb_ckpt_wait(ck), 0);
    state_snapshot(&s, &want);
    uint64_t total = 0, step = 0;
    for (int k = 0; k < FB_DTYPE_COUNT_ + 3; k++)
        total += s.bytes[k];
    /* Not zero: every byte kept aside, nothing read twice. */
    state_refill(&s, 9);
    CHECK_RC(fb_ckpt_restore(ck, &step), 0);
    CHECK_STATE(&s, &want);
    CHECK_EQ_U64(ck->aside, total);
    CHECK_EQ_U64(ck->reread, 0);
    /* Mixed: the non-zero tensors, big whole. */
    state_refill(&s, 9);
    mixed_zero(&s);
    uint64_t kept = nonzero_bytes(&s);
    CHECK(kept > (1u << 20) && kept < total);
    CHECK_RC(fb_ckpt_restore(ck, &step), 0);
    CHECK_EQ_U64(step, 1);
    CHECK_STATE(&s, &want);
    CHECK_EQ_U64(ck->aside, kept);
    CHECK_EQ_U64(ck->reread, 0);
    /* All zero: nothing. */
    state_zero(&s);
    CHECK_RC(fb_ckpt_restore(ck, &step), 0);
    CHECK_STATE(&s, &want);
    CHECK_EQ_U64(ck->aside, 0);
    /* Every checkpoint corrupt in big, read last: what was read into
     * place before its hash failed is put back, from the backup or by
     * clearing. */
    check_corrupt_untouched(ck, dir, &s);
    fb_ckpt_close(ck);
    state_free(&s);
    state_free(&want);
}

static void copy_file(const char *from, const char *to)
{
    char *buf = NULL;
    size_t len = 0;
    CHECK_RC(fb__read_file(from, 1u << 30, &buf, &len), 0);
    CHECK_RC(fb__write_file_atomic(to, buf, len), 0);
    free(buf);
}

/* A shard's recorded step must be its directory's: step 1's shard copied
 * or linked under a newer step's name is not restored as that step. */
static void case_placed(void)
{
    char dir[300], a[512], b[512];
    fresh_dir("placed", dir, sizeof dir);
    fb_ckpt *ck = open_ck(dir, 0, 1, 1, 5);
    state s, want;
    state_register(ck, &s, 1);
    CHECK_RC(fb_ckpt_save(ck, 1), 0);
    CHECK_RC(fb_ckpt_wait(ck), 0);
    state_snapshot(&s, &want);
    for (unsigned k = 2; k <= 3; k++) {
        state_refill(&s, k);
        CHECK_RC(fb_ckpt_save(ck, k), 0);
        CHECK_RC(fb_ckpt_wait(ck), 0);
    }
    snprintf(a, sizeof a, SHARD, dir, 1ull, 0);
    snprintf(b, sizeof b, SHARD, dir, 2ull, 0);
    copy_file(a, b);
    snprintf(b, sizeof b, SHARD, dir, 3ull, 0);
    CHECK(unlink(b) == 0);
    CHECK(symlink("../step-0000000001/rank-00000.safetensors", b) == 0);
    state_zero(&s);
    uint64_t step = 0;
    CHECK_RC(fb_ckpt_restore(ck, &step), 0);
    CHECK_EQ_U64(step, 1); /* the shards under steps 2 and 3 are step 1's */
    CHECK_STATE(&s, &want);
    fb_ckpt_close(ck);
    state_free(&s);
    state_free(&want);
}

static void touch(const char *dir, unsigned long long step, const char *name)
{
    char p[512];
    snprintf(p, sizeof p, "%s/step-%010llu", dir, step);
    fb__mkdir_p(p, 0755);
    snprintf(p, sizeof p, "%s/step-%010llu/%s", dir, step, name);
    CHECK_RC(fb__write_file_atomic(p, "x", 1), 0);
}

static int there(const char *dir, unsigned long long step, const char *name)
{
    char p[512];
    struct stat st;
    snprintf(p, sizeof p, "%s/step-%010llu/%s", dir, step, name);
    return stat(p, &st) == 0;
}

/* Temporaries of crashed saves: this rank's own are removed, in every
 * step, when it restores or at its first save; another rank's (it may be
 * writing it now) and one of this process stay.  Once per process: a later
 * save does not list the step directories again. */
static void case_stale_tmp(void)
{
    char dir[300], mine[64];
    fresh_dir("stale_tmp", dir, sizeof dir);
    fb_ckpt *ck = open_ck(dir, 0, 1, 0, 5);
    state s;
    state_register(ck, &s, 1);
    CHECK_RC(fb_ckpt_save(ck, 1), 0);
    snprintf(mine, sizeof mine, ".rank-00000.%d.tmp", (int)getpid());
    touch(dir, 1, ".rank-00000.999999.tmp");
    touch(dir, 1, ".rank-00001.999999.tmp");
    touch(dir, 1, mine);
    touch(dir, 5, ".rank-00000.888888.tmp");
    touch(dir, 2, ".rank-00000.777777.tmp");
    CHECK_RC(fb_ckpt_restore(ck, NULL), 0);
    CHECK(!there(dir, 1, ".rank-00000.999999.tmp"));
    CHECK(!there(dir, 5, ".rank-00000.888888.tmp"));
    CHECK(there(dir, 1, ".rank-00001.999999.tmp"));
    CHECK(there(dir, 1, mine));
    CHECK_RC(fb_ckpt_save(ck, 2), 0);
    CHECK(exists(SHARD, dir, 2, 0));
    fb_ckpt_close(ck);
    state_free(&s);

    /* A process that does not restore: its first save sweeps every step. */
    touch(dir, 2, ".rank-00000.777777.tmp");
    touch(dir, 5, ".rank-00000.666666.tmp");
    ck = open_ck(dir, 0, 1, 0, 5);
    state_register(ck, &s, 0);
    CHECK_RC(fb_ckpt_save(ck, 3), 0);
    CHECK(!there(dir, 2, ".rank-00000.777777.tmp"));
    CHECK(!there(dir, 5, ".rank-00000.666666.tmp"));
    CHECK(there(dir, 1, ".rank-00001.999999.tmp"));
    touch(dir, 4, ".rank-00000.555555.tmp");
    CHECK_RC(fb_ckpt_save(ck, 4), 0);
    CHECK(there(dir, 4, ".rank-00000.555555.tmp"));
    CHECK(exists(SHARD, dir, 4, 0));
    fb_ckpt_close(ck);
    state_free(&s);
}

/* The largest step a shard's metadata holds (int64) saves and restores;
 * one above it is refused before anything is written (it would be a
 * checkpoint no restore can read, taking a retention slot). */
static void case_step_max(void)
{
    char dir[300];
    fresh_dir("step_max", dir, sizeof dir);
    float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {0};
    int64_t s6[1] = {6};
    fb_ckpt *ck = open_ck(dir, 0, 1, 0, 2);
    CHECK_RC(fb_ckpt_register(ck, "w", FB_DTYPE_F32, 1, s6, a), 0);
    CHECK_RC(fb_ckpt_save(ck, (uint64_t)INT64_MAX + 1), -EINVAL);
    CHECK_RC(fb_ckpt_save(ck, UINT64_MAX), -EINVAL);
    CHECK_RC(fb_ckpt_save(ck, (uint64_t)INT64_MAX), 0);
    fb_ckpt_close(ck);
    ck = open_ck(dir, 0, 1, 0, 2);
    CHECK_RC(fb_ckpt_register(ck, "w", FB_DTYPE_F32, 1, s6, b), 0);
    uint64_t step = 0;
    CHECK_RC(fb_ckpt_restore(ck, &step), 0);
    CHECK_EQ_U64(step, (uint64_t)INT64_MAX);
    CHECK_EQ_MEM(a, b, sizeof a);
    fb_ckpt_close(ck);
}

static void case_mismatch(void)
{
    char dir[300];
    fresh_dir("mismatch", dir, sizeof dir);
    float a[6] = {1, 2, 3, 4, 5, 6}, b[6];
    int64_t s23[2] = {2, 3}, s32[2] = {3, 2}, s6[1] = {6};
    fb_ckpt *ck = open_ck(dir, 0, 1, 0, 2);
    CHECK_RC(fb_ckpt_register(ck, "w", FB_DTYPE_F32, 2, s23, a), 0);
    CHECK_RC(fb_ckpt_save(ck, 5), 0);
    fb_ckpt_close(ck);
    ck = open_ck(dir, 0, 1, 0, 2);
    CHECK_RC(fb_ckpt_register(ck, "w", FB_DTYPE_F32, 2, s32, b), 0);
    CHECK_RC(fb_ckpt_restore(ck, NULL), FB_EMISMATCH);
    fb_ckpt_close(ck);
    ck = open_ck(dir, 0, 1, 0, 2);
    CHECK_RC(fb_ckpt_register(ck, "w", FB_DTYPE_I32, 1, s6, b), 0);
    CHECK_RC(fb_ckpt_restore(ck, NULL), FB_EMISMATCH);
    fb_ckpt_close(ck);
    ck = open_ck(dir, 0, 1, 0, 2);
    CHECK_RC(fb_ckpt_register(ck, "v", FB_DTYPE_F32, 2, s23, b), 0);
    CHECK_RC(fb_ckpt_restore(ck, NULL), FB_EMISMATCH);
    CHECK_RC(fb_ckpt_register(ck, "v", FB_DTYPE_F32, 2, s23, b), -EINVAL);
    fb_ckpt_close(ck);
    ck = open_ck(dir, 0, 1, 0, 2);
    CHECK_RC(fb_ckpt_register(ck, "w", FB_DTYPE_F32, 2, s23, b), 0);
    uint64_t step;
    CHECK_RC(fb_ckpt_restore(ck, &step), 0);
    CHECK_EQ_U64(step, 5);
    CHECK_EQ_MEM(a, b, sizeof a);
    fb_ckpt_close(ck);
}

/* Ranks of one world save into the same directory (as on a shared
 * filesystem); a checkpoint missing a rank's shard is not restored. */
static void case_ranks(void)
{
    char dir[300];
    fresh_dir("ranks", dir, sizeof dir);
    double v[3][4];
    int64_t shape[1] = {4};
    fb_ckpt *ck[3];
    for (int r = 0; r < 3; r++) {
        ck[r] = open_ck(dir, r, 3, 1, 2);
        CHECK_RC(fb_ckpt_register(ck[r], "v", FB_DTYPE_F64, 1, shape, v[r]), 0);
        for (int i = 0; i < 4; i++)
            v[r][i] = r * 10 + i;
        CHECK_RC(fb_ckpt_save(ck[r], 100), 0);
    }
    for (int r = 0; r < 3; r++) {
        CHECK_RC(fb_ckpt_wait(ck[r]), 0);
        v[r][0] = -1;
        if (r < 2) /* rank 2 never writes step 200 */
            CHECK_RC(fb_ckpt_save(ck[r], 200), 0);
    }
    for (int r = 0; r < 3; r++) {
        CHECK_RC(fb_ckpt_wait(ck[r]), 0);
        uint64_t step = 0;
        CHECK_RC(fb_ckpt_restore(ck[r], &step), 0);
        CHECK_EQ_U64(step, 100);
        CHECK_EQ_DBL(v[r][0], r * 10);
    }
    /* Restore dropped the abandoned step-200 shards of ranks 0 and 1. */
    CHECK(!exists(SHARD, dir, 200, 0) && !exists(SHARD, dir, 200, 1));
    fb__ckpt_entry *e;
    size_t n;
    CHECK_RC(fb__ckpt_scan(dir, 0, 1, &e, &n), 0);
    CHECK_EQ_U64(n, 2);
    if (n == 2) {
        CHECK_EQ_U64(e[1].step, 100);
        CHECK_EQ_INT(e[1].complete, 1);
        CHECK_EQ_INT(e[1].world_size, 3);
    }
    free(e);
    for (int r = 0; r < 3; r++)
        fb_ckpt_close(ck[r]);
}

static int count_steps(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

static void case_retention(void)
{
    char dir[300];
    fresh_dir("retention", dir, sizeof dir);
    fb_ckpt *ck = open_ck(dir, 0, 1, 1, 2);
    int64_t shape[1] = {16};
    float x[16] = {0};
    CHECK_RC(fb_ckpt_register(ck, "x", FB_DTYPE_F32, 1, shape, x), 0);
    for (int s = 1; s <= 5; s++) {
        CHECK_RC(fb_ckpt_save(ck, (uint64_t)s), 0);
        CHECK_RC(fb_ckpt_wait(ck), 0);
    }
    CHECK_EQ_INT(count_steps(dir), 2);
    CHECK(exists(SHARD, dir, 5, 0) && exists(SHARD, dir, 4, 0));
    fb_ckpt_close(ck);
}

/* Hidden step directories (.deleted-step-*): deleted, bytes not yet removed. */
static int count_hidden(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        n += !strncmp(e->d_name, ".deleted-step-", 14);
    if (d)
        closedir(d);
    return n;
}

/* Saves keep keep=1.  An async handle hides the old step before the save
 * counts as done and removes its bytes when no save waits: with that
 * removal held (FIREBREAK_CKPT_PURGE_GATE, as a slow `discard` unlink
 * holds it), saves still complete; closing finishes it; without the gate
 * the writer finishes it by itself.  A synchronous handle removes at once. */
static void case_purge_deferred(void)
{
    char dir[300], gate[400];
    fresh_dir("purge", dir, sizeof dir);
    snprintf(gate, sizeof gate, "%s.gate", dir);
    unlink(gate);
    setenv("FIREBREAK_CKPT_PURGE_GATE", gate, 1);
    int64_t shape[1] = {1 << 16};
    float *x = calloc(1 << 16, 4);
    CHECK(x != NULL);
    if (!x)
        return;
    for (int async = 1; async >= 0; async--) {
        fb__rm_rf(dir);
        fb_ckpt *ck = open_ck(dir, 0, 1, async, 1);
        CHECK_RC(fb_ckpt_register(ck, "x", FB_DTYPE_F32, 1, shape, x), 0);
        for (int s = 1; s <= 3; s++) {
            CHECK_RC(fb_ckpt_save(ck, (uint64_t)s), 0);
            CHECK_RC(fb_ckpt_wait(ck), 0);
            CHECK_EQ_INT(count_steps(dir), 1);
            CHECK(exists(SHARD, dir, (uint64_t)s, 0));
            CHECKF(count_hidden(dir) == (async ? s - 1 : 0),
                   "%s, step %d: %d hidden step directories", async ? "async" : "sync",
                   s, count_hidden(dir));
        }
        int fd = open(gate, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
        CHECK(fd >= 0);
        if (fd >= 0)
            close(fd);
        fb_ckpt_close(ck);
        CHECK_EQ_INT(count_hidden(dir), 0);
        unlink(gate);
    }
    /* No gate: the writer removes them while the handle stays open. */
    unsetenv("FIREBREAK_CKPT_PURGE_GATE");
    fb__rm_rf(dir);
    fb_ckpt *ck = open_ck(dir, 0, 1, 1, 1);
    CHECK_RC(fb_ckpt_register(ck, "x", FB_DTYPE_F32, 1, shape, x), 0);
    for (int s = 1; s <= 3; s++) {
        CHECK_RC(fb_ckpt_save(ck, (uint64_t)s), 0);
        CHECK_RC(fb_ckpt_wait(ck), 0);
    }
    for (int i = 0; i < 1000 && count_hidden(dir); i++)
        usleep(10000);
    CHECK_EQ_INT(count_hidden(dir), 0);
    CHECK_EQ_INT(count_steps(dir), 1);
    fb_ckpt_close(ck);
    free(x);
}

/* fb__ckpt_purge's yield: 0 for the first `go` calls, then 1. */
static int yield_after(void *arg)
{
    int *go = arg;
    return (*go)-- <= 0;
}

static long long file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) ? -1 : (long long)st.st_size;
}

/* Whether /dev/shm holds any name starting with prefix. */
static int shm_has(const char *prefix)
{
    DIR *d = opendir("/dev/shm");
    struct dirent *e;
    int found = 0;
    while (d && !found && (e = readdir(d)))
        found = !strncmp(e->d_name, prefix, strlen(prefix));
    if (d)
        closedir(d);
    return found;
}

/* A node's memory removed while a rank still writes steps into it (a
 * watcher whose supervisor died, the ranks not yet stopped by Slurm):
 * nothing of it stays, under its name or the one it was removed under.
 * A walk removing entry by entry left a step made behind it. */
static void case_mem_remove_live(void)
{
    char prefix[64], mem[PATH_MAX];
    snprintf(prefix, sizeof prefix, "fb.fbtest%d", (int)getpid());
    snprintf(mem, sizeof mem, "/dev/shm/%s.mem", prefix);
    for (int round = 0; round < 20; round++) {
        CHECK_RC(fb__ckpt_mem_dir_create(mem), 0);
        for (uint64_t s = 1; s <= 100; s++)
            touch(mem, s, "rank-00000.safetensors");
        pid_t w = fork();
        if (w == 0) { /* the rank: a step after another, as store.c writes them */
            static char data[4096];
            for (uint64_t s = 1000;; s++) {
                fb__shard_out o;
                char why[256];
                if (fb__shard_out_begin(&o, mem, s, 0, sizeof data, why, sizeof why))
                    continue;
                if (write(o.fd, data, sizeof data) != (ssize_t)sizeof data ||
                    fb__shard_out_commit(&o, s, NULL, why, sizeof why))
                    fb__shard_out_abort(&o);
            }
        }
        CHECK(w > 0);
        char first[PATH_MAX];
        CHECK(!fb__ckpt_step_path(first, sizeof first, mem, 1002));
        for (int i = 0; i < 2000 && access(first, F_OK); i++)
            usleep(1000);
        fb__ckpt_mem_dir_remove(mem);
        usleep(20000); /* the rank goes on a while: nothing new appears */
        kill(w, SIGKILL);
        waitpid(w, NULL, 0);
        if (shm_has(prefix)) {
            CHECK(!"node memory left after its removal");
            char cmd[PATH_MAX + 64];
            snprintf(cmd, sizeof cmd, "ls -d /dev/shm/%s* >&2", prefix);
            (void)system(cmd);
            snprintf(cmd, sizeof cmd, "rm -rf /dev/shm/%s*", prefix);
            (void)system(cmd);
            break;
        }
    }
}

/* The purge cuts a big hidden file 64 MiB at a time from its end, asking
 * between cuts (a save waits at most one cut, not a whole unlink); a file
 * with another link is not cut (a user's `cp -al` keeps its bytes). */
static void case_purge_cuts(void)
{
    char dir[300], hidden[400], big[500], linked[500], other[400];
    fresh_dir("purge_cuts", dir, sizeof dir);
    snprintf(hidden, sizeof hidden, "%s/.deleted-step-0000000001.1", dir);
    snprintf(big, sizeof big, "%s/rank-00000.safetensors", hidden);
    snprintf(linked, sizeof linked, "%s/rank-00001.safetensors", hidden);
    snprintf(other, sizeof other, "%s/kept.safetensors", dir);
    CHECK(fb__mkdir_p(hidden, 0755) == 0);
    long long size = 200ll << 20; /* sparse: cut all the same */
    int fd = open(big, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
    CHECK(fd >= 0 && ftruncate(fd, size) == 0);
    if (fd >= 0)
        close(fd);
    /* Stopped after its first cut. */
    int go = 1;
    CHECK_EQ_INT(fb__ckpt_purge(dir, yield_after, &go), 1);
    CHECKF(file_size(big) == size - (64ll << 20), "after one cut: %lld bytes",
           file_size(big));
    fd = open(linked, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
    CHECK(fd >= 0 && ftruncate(fd, size) == 0);
    if (fd >= 0)
        close(fd);
    CHECK(link(linked, other) == 0);
    /* Then to the end: the hidden directory goes, the other link stays. */
    go = 1000;
    CHECK_EQ_INT(fb__ckpt_purge(dir, yield_after, &go), 0);
    CHECK_EQ_INT(count_hidden(dir), 0);
    CHECK_EQ_INT(file_size(other) == size, 1);
    /* A hidden name that is a symbolic link to a directory: the link
     * goes, what it points to stays. */
    char outside[400], victim[500], sym[400];
    snprintf(outside, sizeof outside, "%s.outside", dir);
    snprintf(victim, sizeof victim, "%s/precious", outside);
    snprintf(sym, sizeof sym, "%s/.deleted-step-0000000002.1", dir);
    CHECK(fb__mkdir_p(outside, 0755) == 0);
    fd = open(victim, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
    CHECK(fd >= 0);
    if (fd >= 0)
        close(fd);
    CHECK(symlink(outside, sym) == 0);
    CHECK_EQ_INT(fb__ckpt_purge(dir, NULL, NULL), 0);
    CHECK(access(victim, F_OK) == 0);
    struct stat st;
    CHECK(lstat(sym, &st) != 0 && errno == ENOENT);
}

static void case_busy_skip(void)
{
    char dir[300];
    fresh_dir("busy", dir, sizeof dir);
    setenv("FIREBREAK_CKPT_WRITE_DELAY_MS", "300", 1);
    fb_ckpt_options o;
    fb_ckpt_options_init(&o);
    o.dir = dir;
    o.rank = 0;
    o.world_size = 1;
    o.on_busy = FB_CKPT_BUSY_SKIP;
    fb_ckpt *ck = NULL;
    CHECK_RC(fb_ckpt_open(&ck, &o), 0);
    int64_t shape[1] = {16};
    float x[16] = {0};
    CHECK_RC(fb_ckpt_register(ck, "x", FB_DTYPE_F32, 1, shape, x), 0);
    CHECK_RC(fb_ckpt_save(ck, 1), 0);
    CHECK_RC(fb_ckpt_save(ck, 2), FB_EBUSY);
    CHECK_RC(fb_ckpt_register(ck, "y", FB_DTYPE_F32, 1, shape, x), FB_ESTATE);
    CHECK_RC(fb_ckpt_wait(ck), 0);
    CHECK(exists(SHARD, dir, 1, 0) && !exists(SHARD, dir, 2, 0));
    fb_ckpt_close(ck);
    /* WAIT (the default) makes the second save wait for the first. */
    ck = open_ck(dir, 0, 1, 1, 5);
    CHECK_RC(fb_ckpt_register(ck, "x", FB_DTYPE_F32, 1, shape, x), 0);
    CHECK_RC(fb_ckpt_save(ck, 3), 0);
    CHECK_RC(fb_ckpt_save(ck, 4), 0);
    CHECK_RC(fb_ckpt_wait(ck), 0);
    CHECK(exists(SHARD, dir, 3, 0) && exists(SHARD, dir, 4, 0));
    fb_ckpt_close(ck);
    unsetenv("FIREBREAK_CKPT_WRITE_DELAY_MS");
}

/* A failed write (injected ENOSPC) leaves older checkpoints intact. */
static void case_write_error(int stop)
{
    char dir[300];
    fresh_dir(stop ? "werr_stop" : "werr", dir, sizeof dir);
    fb_ckpt_options o;
    fb_ckpt_options_init(&o);
    o.dir = dir;
    o.rank = 0;
    o.world_size = 1;
    o.on_error = stop ? FB_CKPT_ERROR_STOP : FB_CKPT_ERROR_CONTINUE;
    fb_ckpt *ck = NULL;
    CHECK_RC(fb_ckpt_open(&ck, &o), 0);
    int64_t shape[1] = {16};
    float x[16] = {1};
    CHECK_RC(fb_ckpt_register(ck, "x", FB_DTYPE_F32, 1, shape, x), 0);
    CHECK_RC(fb_ckpt_save(ck, 1), 0);
    CHECK_RC(fb_ckpt_wait(ck), 0);
    setenv("FIREBREAK_CKPT_FAIL", "ENOSPC@2", 1);
    CHECK_RC(fb_ckpt_save(ck, 2), 0);
    CHECK_RC(fb_ckpt_wait(ck), -ENOSPC);
    unsetenv("FIREBREAK_CKPT_FAIL");
    CHECK_RC(fb_ckpt_save(ck, 3), stop ? -ENOSPC : 0);
    CHECK_RC(fb_ckpt_wait(ck), stop ? -ENOSPC : 0);
    CHECK(exists(SHARD, dir, 1, 0) && !exists(SHARD, dir, 2, 0));
    CHECK(!exists("%s/step-%010llu", dir, 2, 0)); /* no empty leftovers */
    uint64_t step = 0;
    CHECK_RC(fb_ckpt_restore(ck, &step), 0);
    CHECK_EQ_U64(step, stop ? 1u : 3u);
    fb_ckpt_close(ck);
}

/* A child saves steps 1 and 2 (keep 1) and is SIGKILLed at `point` of
 * step 2; the checkpoint a restore then takes must be complete. */
static void case_crash(const char *point, uint64_t want_step)
{
    char dir[300], spec[64];
    fresh_dir(point, dir, sizeof dir);
    int world = !strcmp(point, "after_rename") ? 2 : 1;
    pid_t pid = fork();
    if (pid == 0) {
        snprintf(spec, sizeof spec, "%s@2", point);
        setenv("FIREBREAK_CKPT_CRASH_AT", spec, 1);
        fb_ckpt *ck = open_ck(dir, 0, world, 1, 1);
        fb_ckpt *ck1 = world > 1 ? open_ck(dir, 1, world, 1, 1) : NULL;
        int64_t shape[1] = {1 << 20};
        float *x = calloc(1 << 20, 4);
        x[0] = 1;
        fb_ckpt_register(ck, "x", FB_DTYPE_F32, 1, shape, x);
        if (ck1)
            fb_ckpt_register(ck1, "x", FB_DTYPE_F32, 1, shape, x);
        fb_ckpt_save(ck, 1);
        fb_ckpt_wait(ck);
        if (ck1) {
            fb_ckpt_save(ck1, 1); /* rank 1 has step 1 only */
            fb_ckpt_wait(ck1);
        }
        x[0] = 2;
        fb_ckpt_save(ck, 2);
        fb_ckpt_wait(ck);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECKF(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
           "the saving child was not SIGKILLed at %s (wait status 0x%x)", point,
           status);
    for (int r = 0; r < world; r++) {
        fb_ckpt *ck = open_ck(dir, r, world, 0, 1);
        int64_t shape[1] = {1 << 20};
        float *x = calloc(1 << 20, 4);
        CHECK_RC(fb_ckpt_register(ck, "x", FB_DTYPE_F32, 1, shape, x), 0);
        uint64_t step = 0;
        CHECK_RC(fb_ckpt_restore(ck, &step), 0);
        CHECK_EQ_U64(step, want_step);
        CHECK_EQ_DBL(x[0], want_step);
        fb_ckpt_close(ck);
        free(x);
    }
}

/* A sharded tensor: this rank holds rows 2..5 of an 8x6 tensor.  The
 * bytes round-trip, the place is recorded in the shard, a place that does
 * not fit is refused at registration, and a restore into another place
 * (the same local shape) is a mismatch, not a silent load. */
static void case_slice(void)
{
    char dir[300], p[512];
    fresh_dir("slice", dir, sizeof dir);
    enum { ROWS = 4, COLS = 6 };
    int64_t shape[2] = {ROWS, COLS}, global[2] = {8, COLS}, at[2] = {2, 0};
    float w[ROWS * COLS], want[ROWS * COLS];
    fill(w, sizeof w, 42);
    memcpy(want, w, sizeof w);
    fb_ckpt *ck = open_ck(dir, 0, 1, 1, 2);
    CHECK_RC(fb_ckpt_register_slice(ck, "w", FB_DTYPE_F32, 2, shape, w, global, at), 0);
    /* Geometry that does not fit the global tensor, or half of it. */
    int64_t past[2] = {5, 0}, neg[2] = {-1, 0}, small[2] = {3, COLS};
    CHECK_RC(fb_ckpt_register_slice(ck, "v", FB_DTYPE_F32, 2, shape, w, global, past), -EINVAL);
    CHECK_RC(fb_ckpt_register_slice(ck, "v", FB_DTYPE_F32, 2, shape, w, global, neg), -EINVAL);
    CHECK_RC(fb_ckpt_register_slice(ck, "v", FB_DTYPE_F32, 2, shape, w, small, at), -EINVAL);
    CHECK_RC(fb_ckpt_register_slice(ck, "v", FB_DTYPE_F32, 2, shape, w, global, NULL), -EINVAL);
    CHECK_RC(fb_ckpt_save(ck, 7), 0);
    memset(w, 0, sizeof w); /* after save: the async snapshot has the bytes */
    CHECK_RC(fb_ckpt_wait(ck), 0);
    uint64_t step = 0;
    CHECK_RC(fb_ckpt_restore(ck, &step), 0);
    CHECK_EQ_U64(step, 7);
    CHECK_EQ_MEM(w, want, sizeof w);
    fb_ckpt_close(ck);

    /* The place is in the shard's metadata. */
    fb__st_header *h = NULL;
    int fd = -1;
    snprintf(p, sizeof p, SHARD, dir, 7ull, 0);
    CHECK_RC(fb__st_open(p, &fd, &h, NULL, 0), 0);
    if (h) {
        CHECK_EQ_STR(fb__st_meta_get(h, "firebreak.global_shape.w"), "8,6");
        CHECK_EQ_STR(fb__st_meta_get(h, "firebreak.global_offset.w"), "2,0");
        close(fd);
        fb__st_free(h);
    }

    /* The same local shape at rows 4..7, or registered whole: mismatch,
     * and the tensor is left as it was. */
    int64_t other[2] = {4, 0};
    memset(w, 0x7f, sizeof w);
    float before[ROWS * COLS];
    memcpy(before, w, sizeof w);
    ck = open_ck(dir, 0, 1, 0, 2);
    CHECK_RC(fb_ckpt_register_slice(ck, "w", FB_DTYPE_F32, 2, shape, w, global, other), 0);
    CHECK_RC(fb_ckpt_restore(ck, NULL), FB_EMISMATCH);
    fb_ckpt_close(ck);
    ck = open_ck(dir, 0, 1, 0, 2);
    CHECK_RC(fb_ckpt_register(ck, "w", FB_DTYPE_F32, 2, shape, w), 0);
    CHECK_RC(fb_ckpt_restore(ck, NULL), FB_EMISMATCH);
    fb_ckpt_close(ck);
    CHECK_EQ_MEM(w, before, sizeof w);
}

/* fb_ckpt_options across library versions (the ABI rule in firebreak.h). */
static void case_options_abi(void)
{
    char dir[300];
    fresh_dir("options", dir, sizeof dir);
    fb_ckpt_options o;
    memset(&o, 0xee, sizeof o);
    fb_ckpt_options_init(&o);
    CHECK_EQ_U64(o.struct_size, sizeof o);
    CHECK_EQ_INT(o.rank, -1);
    CHECK_EQ_INT(o.keep, 2);
    CHECK_EQ_INT(o.async, 1);
    CHECK_EQ_INT(o.snapshot, FB_CKPT_SNAPSHOT_AUTO);
    /* The initializer agrees with the function. */
    fb_ckpt_options i = FB_CKPT_OPTIONS_INIT;
    CHECK_EQ_MEM(&i, &o, sizeof o);

    /* Never initialised (struct_size 0), or too small: refused. */
    fb_ckpt *ck = NULL;
    o.dir = dir;
    o.rank = 0;
    o.world_size = 1;
    o.struct_size = 0;
    CHECK_RC(fb_ckpt_open(&ck, &o), -EINVAL);
    o.struct_size = offsetof(fb_ckpt_options, snapshot);
    CHECK_RC(fb_ckpt_open(&ck, &o), -EINVAL);
    CHECK(ck == NULL);

    /* A newer caller's bigger struct: its unknown tail must be zero. */
    struct {
        fb_ckpt_options o;
        int future_field;
    } big;
    memset(&big, 0xee, sizeof big);
    fb_ckpt_options_init_sized(&big.o, sizeof big);
    CHECK_EQ_U64(big.o.struct_size, sizeof big);
    CHECK_EQ_INT(big.future_field, 0);
    CHECK_EQ_INT(big.o.keep, 2);
    big.o.dir = dir;
    big.o.rank = 0;
    big.o.world_size = 1;
    big.o.async = 0;
    CHECK_RC(fb_ckpt_open(&ck, &big.o), 0);
    fb_ckpt_close(ck);
    ck = NULL;
    big.future_field = 1;
    CHECK_RC(fb_ckpt_open(&ck, &big.o), -E2BIG);
    CHECK(ck == NULL);

    /* An older caller (the first release's struct, up to `snapshot`) gets
     * today's fields, every later one reads as 0. */
    fb_ckpt_options_init(&o);
    o.struct_size = offsetof(fb_ckpt_options, snapshot) + sizeof o.snapshot;
    o.dir = dir;
    o.rank = 0;
    o.world_size = 1;
    o.keep = 3;
    CHECK_RC(fb_ckpt_open(&ck, &o), 0);
    if (ck)
        CHECK_EQ_INT(ck->keep, 3);
    fb_ckpt_close(ck);
}

/* The test hooks read their variables only in a test build: a release
 * library (FB_TEST_HOOKS off) saves as if they were not set. */
static void case_hooks_build(void)
{
    char dir[300];
    fresh_dir("hooks", dir, sizeof dir);
    fb_ckpt *ck = open_ck(dir, 0, 1, 0, 2);
    int64_t shape[1] = {4};
    float x[4] = {1, 2, 3, 4};
    CHECK_RC(fb_ckpt_register(ck, "x", FB_DTYPE_F32, 1, shape, x), 0);
    setenv("FIREBREAK_CKPT_FAIL", "EIO", 1);
    CHECK_RC(fb_ckpt_save(ck, 1), 0); /* on_error CONTINUE: wait tells */
#ifdef FB_TEST_HOOKS
    CHECK_RC(fb_ckpt_wait(ck), -EIO);
    CHECK(!exists(SHARD, dir, 1, 0));
#else
    CHECK_RC(fb_ckpt_wait(ck), 0);
    CHECK(exists(SHARD, dir, 1, 0));
#endif
    unsetenv("FIREBREAK_CKPT_FAIL");
    fb_ckpt_close(ck);
}

/* Pages of the file at path in the page cache. */
static size_t cached_pages(const char *path, size_t n)
{
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0);
    size_t pages = (n + 4095) / 4096, in = 0;
    unsigned char *v = malloc(pages);
    void *m = mmap(NULL, n, PROT_READ, MAP_SHARED, fd, 0);
    CHECK(v != NULL && m != MAP_FAILED && mincore(m, n, v) == 0);
    for (size_t i = 0; v && i < pages; i++)
        in += v[i] & 1;
    if (m != MAP_FAILED)
        munmap(m, n);
    close(fd);
    free(v);
    return in;
}

/* The write path (store.h): once a save of 256 MiB is committed the page
 * cache holds at most the last 64 MiB of its shard (write-behind), and
 * none of it where the file takes O_DIRECT, even with write-behind off;
 * tensors of odd sizes cross the aligned blocks and restore exactly. */
static void case_write_behind(void)
{
    char dir[300], path[400];
    fresh_dir("write_behind", dir, sizeof dir);
    fb_ckpt *ck = open_ck(dir, 0, 1, 1, 2);
    size_t n[3] = {(3u << 20) + 13, 5, 256u << 20};
    unsigned char *x[3];
    const char *names[3] = {"odd", "tiny", "big"};
    for (int k = 0; k < 3; k++) {
        CHECK((x[k] = malloc(n[k])) != NULL);
        fill(x[k], n[k], 1 + (unsigned)k);
        int64_t shape[1] = {(int64_t)n[k]};
        CHECK_RC(fb_ckpt_register(ck, names[k], FB_DTYPE_U8, 1, shape, x[k]), 0);
    }
    size_t total = n[0] + n[1] + n[2];
    CHECK_RC(fb_ckpt_save(ck, 1), 0);
    CHECK_RC(fb_ckpt_wait(ck), 0);
    CHECK_RC(fb__ckpt_shard_path(path, sizeof path, dir, 1, 0), 0);
    size_t cached = cached_pages(path, total);
    CHECKF(cached * 4096 <= (80u << 20), "%zu of the shard's %zu MiB in the "
           "page cache", cached * 4096 >> 20, total >> 20);
#ifdef FB_TEST_HOOKS
    int probe = open(path, O_RDONLY | O_DIRECT);
    if (probe >= 0) { /* this filesystem takes O_DIRECT */
        close(probe);
        setenv("FIREBREAK_CKPT_WRITE_BEHIND", "0", 1);
        CHECK_RC(fb_ckpt_save(ck, 2), 0);
        CHECK_RC(fb_ckpt_wait(ck), 0);
        unsetenv("FIREBREAK_CKPT_WRITE_BEHIND");
        CHECK_RC(fb__ckpt_shard_path(path, sizeof path, dir, 2, 0), 0);
        cached = cached_pages(path, total);
        CHECKF(cached * 4096 <= (1u << 20), "O_DIRECT: %zu KiB of the shard in "
               "the page cache", cached * 4096 >> 10);
    }
#endif
    for (int k = 0; k < 3; k++)
        fill(x[k], n[k], 9);
    uint64_t step = 0;
    CHECK_RC(fb_ckpt_restore(ck, &step), 0);
    for (int k = 0; k < 3; k++) {
        unsigned char *want = malloc(n[k]);
        CHECK(want != NULL);
        fill(want, n[k], 1 + (unsigned)k);
        CHECKF(want && memcmp(x[k], want, n[k]) == 0, "tensor %s", names[k]);
        free(want);
    }
    fb_ckpt_close(ck);
    for (int k = 0; k < 3; k++)
        free(x[k]);
}

/*
 * The O_DIRECT path hashes each piece as it gathers it (store.c): every
 * tensor's recorded hash is the hash of its bytes, whatever its size and
 * wherever it falls against the 256 KiB hash blocks and 8 MiB batches --
 * empty tensors first, between and last, one byte, pieces straddling both
 * -- from staging (async) and from the tensors (sync).
 */
static void case_direct_hash(void)
{
    static const size_t n[] = {0, 1, 4095, (256u << 10) + 3, (8u << 20) + 5, 0,
                               3u << 20, 7, (8u << 20) - 4099, 0};
    enum { N = sizeof n / sizeof n[0] };
    unsigned char *x[N];
    for (int k = 0; k < N; k++) {
        CHECK((x[k] = malloc(n[k] ? n[k] : 1)) != NULL);
        fill(x[k], n[k], 3 + (unsigned)k);
    }
    for (int async = 0; async < 2; async++) {
        char dir[300], path[400], key[64], name[16];
        fresh_dir(async ? "direct_hash_async" : "direct_hash_sync", dir, sizeof dir);
        fb_ckpt *ck = open_ck(dir, 0, 1, async, 2);
        for (int k = 0; k < N; k++) {
            snprintf(name, sizeof name, "t%d", k);
            int64_t shape[1] = {(int64_t)n[k]};
            CHECK_RC(fb_ckpt_register(ck, name, FB_DTYPE_U8, 1, shape, x[k]), 0);
        }
        CHECK_RC(fb_ckpt_save(ck, 1), 0);
        CHECK_RC(fb_ckpt_wait(ck), 0);
        CHECK_RC(fb__ckpt_shard_path(path, sizeof path, dir, 1, 0), 0);
        int probe = open(path, O_RDONLY | O_DIRECT);
        if (probe < 0)
            fprintf(stderr, "direct_hash: %s takes no O_DIRECT; the plain "
                    "way was checked\n", dir);
        else
            close(probe);
        int fd;
        fb__st_header *h = NULL;
        CHECK_RC(fb__st_open(path, &fd, &h, NULL, 0), 0);
        for (int k = 0; h && k < N; k++) {
            snprintf(key, sizeof key, "firebreak.hash.t%d", k);
            uint64_t got = 1, want = fb__hash(ck->alg, x[k], n[k]);
            CHECK_RC(fb__hash_parse_hex(fb__st_meta_get(h, key), &got), 0);
            CHECKF(got == want, "%s t%d (%zu bytes): recorded %016llx, its bytes "
                   "hash to %016llx", async ? "async" : "sync", k, n[k],
                   (unsigned long long)got, (unsigned long long)want);
        }
        if (h) {
            fb__st_free(h);
            close(fd);
        }
        fb_ckpt_close(ck);
    }
    for (int k = 0; k < N; k++)
        free(x[k]);
}

/*
 * Staging goes to the disk as it is (store.c): a shard of a few MiB or more
 * starts its data section at a multiple of 4 KiB, each big tensor's staging
 * sits at its offset's phase even behind odd-sized neighbours (a 4-byte
 * optimizer step between moments; a 2 MiB one from a shared slab at an
 * offset the slab can take), so the writer sends it without the
 * gathering copy: with the copy snapshot and with write protection, the
 * big tensors' whole blocks are written from staging, the checkpoint
 * verifies, and a save after the tensors changed restores their new bytes.
 */
static void case_direct_staging(void)
{
    static const size_t n[] = {100, 8u << 20, 28, 2u << 20, (8u << 20) + 12, 4,
                               16u << 20, 4, (5u << 20) + 4, 100, 4u << 20};
    enum { N = sizeof n / sizeof n[0] };
    unsigned char *x[N];
    size_t big = 0;
    for (int k = 0; k < N; k++) {
        CHECK((x[k] = malloc(n[k])) != NULL);
        if (n[k] >= FB__CKPT_DIRECT_MIN)
            big += n[k];
    }
    for (int mode = 0; mode < 2; mode++) {
        char dir[300], path[400], name[16];
        fresh_dir(mode ? "direct_staging_protect" : "direct_staging_copy", dir,
                  sizeof dir);
        fb_ckpt *ck = NULL;
        int rc = try_open(dir, 0, 1, 1, 2, mode ? FB_CKPT_SNAPSHOT_PROTECT
                                               : FB_CKPT_SNAPSHOT_COPY, &ck);
        if (mode && rc) { /* no userfaultfd here: the copy case stands */
            fprintf(stderr, "direct_staging: write protection unavailable, "
                    "checked with the copy snapshot only\n");
            break;
        }
        CHECK_RC(rc, 0);
        if (!ck)
            break;
        for (int k = 0; k < N; k++) {
            fill(x[k], n[k], 5 + (unsigned)k);
            snprintf(name, sizeof name, "t%d", k);
            int64_t shape[1] = {(int64_t)n[k]};
            CHECK_RC(fb_ckpt_register(ck, name, FB_DTYPE_U8, 1, shape, x[k]), 0);
        }
        for (uint64_t step = 1; step <= 2; step++) {
            if (step == 2)
                for (int k = 0; k < N; k++)
                    fill(x[k], n[k], 50 + (unsigned)k);
            CHECK_RC(fb_ckpt_save(ck, step), 0);
            CHECK_RC(fb_ckpt_wait(ck), 0);
            CHECK_RC(fb__ckpt_shard_path(path, sizeof path, dir, step, 0), 0);
            int fd, probe = open(path, O_RDONLY | O_DIRECT);
            fb__st_header *h = NULL;
            CHECK_RC(fb__st_open(path, &fd, &h, NULL, 0), 0);
            CHECKF(h && h->data_offset % FB__CKPT_DATA_ALIGN == 0, "data section "
                   "at %llu", h ? (unsigned long long)h->data_offset : 0ull);
            if (h) {
                fb__st_free(h);
                close(fd);
            }
            if (probe >= 0) { /* this filesystem takes O_DIRECT */
                close(probe);
                /* all but the partial blocks at each big tensor's ends */
                CHECKF(ck->last_direct_bytes + 6 * 2 * 4096 >= big,
                       "%s, step %llu: %llu of the big tensors' %zu bytes "
                       "written from staging", mode ? "protect" : "copy",
                       (unsigned long long)step,
                       (unsigned long long)ck->last_direct_bytes, big);
            }
        }
        for (int k = 0; k < N; k++)
            fill(x[k], n[k], 99);
        uint64_t step = 0;
        CHECK_RC(fb_ckpt_restore(ck, &step), 0);
        CHECK(step == 2);
        for (int k = 0; k < N; k++) {
            unsigned char *want = malloc(n[k]);
            CHECK(want != NULL);
            fill(want, n[k], 50 + (unsigned)k);
            CHECKF(want && memcmp(x[k], want, n[k]) == 0, "%s: tensor t%d",
                   mode ? "protect" : "copy", k);
            free(want);
        }
        fb_ckpt_close(ck);
    }
    for (int k = 0; k < N; k++)
        free(x[k]);
}

static void case_roundtrip_sync(void) { case_roundtrip(0); }
static void case_roundtrip_async(void) { case_roundtrip(1); }
static void case_untouched_async(void) { case_untouched(1); }
static void case_untouched_sync(void) { case_untouched(0); }
static void case_write_error_continue(void) { case_write_error(0); }
static void case_write_error_stop(void) { case_write_error(1); }
static void case_crash_before_rename(void) { case_crash("before_rename", 1); }
static void case_crash_after_rename(void) { case_crash("after_rename", 1); }
static void case_crash_during_delete(void) { case_crash("during_delete", 2); }

/*
 * The cases.  This table is the only list: tests/ckpt/CMakeLists.txt reads
 * it (one `{"name", ...}` per line) and adds ckpt_<name> for each, and
 * `test_engine --list` prints it.  HOOKS: the case needs the engine's test
 * hooks (FB_TEST_HOOKS); without them it is skipped (exit 77).
 */
enum { PLAIN = 0, HOOKS = 1 };
static const struct {
    const char *name;
    void (*run)(void);
    int needs;
} cases[] = {
    {"roundtrip_sync", case_roundtrip_sync, PLAIN},
    {"roundtrip_async", case_roundtrip_async, PLAIN},
    {"big_copy", case_big_copy, PLAIN},
    {"corrupt", case_corrupt, PLAIN},
    {"untouched_async", case_untouched_async, PLAIN},
    {"untouched_sync", case_untouched_sync, PLAIN},
    {"zero_in_place", case_zero_in_place, PLAIN},
    {"zero_aside", case_zero_aside, PLAIN},
    {"placed", case_placed, PLAIN},
    {"stale_tmp", case_stale_tmp, PLAIN},
    {"mismatch", case_mismatch, PLAIN},
    {"step_max", case_step_max, PLAIN},
    {"ranks", case_ranks, PLAIN},
    {"retention", case_retention, PLAIN},
    {"slice", case_slice, PLAIN},
    {"options_abi", case_options_abi, PLAIN},
    {"hooks_build", case_hooks_build, PLAIN},
    {"busy", case_busy_skip, HOOKS},
    {"write_error", case_write_error_continue, HOOKS},
    {"write_error_stop", case_write_error_stop, HOOKS},
    {"crash_before_rename", case_crash_before_rename, HOOKS},
    {"crash_after_rename", case_crash_after_rename, HOOKS},
    {"crash_during_delete", case_crash_during_delete, HOOKS},
    {"purge_deferred", case_purge_deferred, HOOKS},
    {"purge_cuts", case_purge_cuts, PLAIN},
    {"mem_remove_live", case_mem_remove_live, PLAIN},
    {"write_behind", case_write_behind, PLAIN},
    {"direct_hash", case_direct_hash, PLAIN},
    {"direct_staging", case_direct_staging, PLAIN},
};

int main(int argc, char **argv)
{
    size_t ncases = sizeof cases / sizeof cases[0];
    if (argc < 2) {
        fprintf(stderr, "usage: test_engine CASE | --list\n");
        return 2;
    }
    if (!strcmp(argv[1], "--list")) {
        for (size_t i = 0; i < ncases; i++)
            printf("%s\n", cases[i].name);
        return 0;
    }
    const char *c = argv[1];
    size_t i = 0;
    while (i < ncases && strcmp(cases[i].name, c))
        i++;
    if (i == ncases) {
        fprintf(stderr, "unknown case %s (test_engine --list)\n", c);
        return 2;
    }
#ifndef FB_TEST_HOOKS
    if (cases[i].needs == HOOKS) {
        fprintf(stderr, "%s: skipped: needs the checkpoint test hooks "
                        "(configure with -DFB_TEST_HOOKS=ON)\n", c);
        return 77;
    }
#endif
    snprintf(root, sizeof root, "%s/fb-ckpt-test.%d",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
    fb__mkdir_p(root, 0755);
    check_tmpdir(root);
    cases[i].run();
    fb__rm_rf(root);
    if (failures)
        fprintf(stderr, "%s: %d check(s) failed\n", c, failures);
    return failures ? 1 : 0;
}
