/*
 * test_layout.c -- reading a checkpoint across shards (fb_ckpt_layout_*):
 * replicated tensors written by one rank and read by any, slices of a
 * global tensor read back on another world size (every split of rows and
 * columns), mismatches and uncovered regions named, corruption caught
 * before any buffer is written, steps chosen by world size and max_step,
 * a shard whose recorded slice does not fit passed over; fb_ckpt_dir and
 * fb_ckpt_device_support.
 * `test_layout NAME` runs one case, `test_layout --list` names them.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "firebreak/firebreak.h"
#include "lib/lib.h"
#include "../check.h"

static char root[256];

static void fresh_dir(const char *name, char *out, size_t size)
{
    snprintf(out, size, "%s/%s", root, name);
    fb__rm_rf(out);
}

static fb_ckpt *open_ck(const char *dir, int rank, int world)
{
    fb_ckpt_options o;
    fb_ckpt_options_init(&o);
    o.dir = dir;
    o.rank = rank;
    o.world_size = world;
    o.async = 0;
    o.keep = 5;
    fb_ckpt *ck = NULL;
    CHECK_RC(fb_ckpt_open(&ck, &o), 0);
    return ck;
}

/* The global R x C tensor: element (r, c) = r * 100 + c + step. */
enum { R = 6, C = 5 };
static float global_at(int r, int c, int step)
{
    return (float)(r * 100 + c + step);
}

/* Save step `step` with `world` ranks: each holds rows [r*R/world,
 * (r+1)*R/world) of "w" (a slice), a replica "rep_K" owned by rank K % world
 * for K < 3, and its own "own" tensor. */
static void save_sharded(const char *dir, int world, int step)
{
    for (int r = 0; r < world; r++) {
        fb_ckpt *ck = open_ck(dir, r, world);
        int lo = r * R / world, hi = (r + 1) * R / world;
        float w[R * C], own[2] = {(float)r, (float)step}, rep[3][4];
        for (int i = lo; i < hi; i++)
            for (int c = 0; c < C; c++)
                w[(i - lo) * C + c] = global_at(i, c, step);
        int64_t shape[2] = {hi - lo, C}, gshape[2] = {R, C}, goff[2] = {lo, 0};
        CHECK_RC(fb_ckpt_register_slice(ck, "w", FB_DTYPE_F32, 2, shape, w,
                                        gshape, goff), 0);
        int64_t two = 2, four = 4;
        CHECK_RC(fb_ckpt_register(ck, "own", FB_DTYPE_F32, 1, &two, own), 0);
        char name[16];
        for (int k = 0; k < 3; k++) {
            if (k % world != r)
                continue;
            for (int e = 0; e < 4; e++)
                rep[k][e] = (float)(k * 10 + e + step);
            snprintf(name, sizeof name, "rep_%d", k);
            CHECK_RC(fb_ckpt_register(ck, name, FB_DTYPE_F32, 1, &four, rep[k]), 0);
        }
        CHECK_RC(fb_ckpt_save(ck, (uint64_t)step), 0);
        fb_ckpt_close(ck);
    }
}

static fb_ckpt_read_req req_of(const char *name, int rank, int ndim,
                               const int64_t *shape, const int64_t *gshape,
                               const int64_t *goff, void *data)
{
    fb_ckpt_read_req q = {name, rank, FB_DTYPE_F32, ndim, shape, gshape, goff, data};
    return q;
}

static void case_replica(void)
{
    char dir[512], err[512];
    fresh_dir("replica", dir, sizeof dir);
    save_sharded(dir, 2, 7);
    fb_ckpt_layout *lay = NULL;
    CHECK_RC(fb_ckpt_layout_open(&lay, dir, 2, FB_CKPT_NEWEST), 0);
    if (!lay)
        return;
    CHECK_EQ_U64(fb_ckpt_layout_step(lay), 7);
    CHECK_EQ_INT(fb_ckpt_layout_world_size(lay), 2);
    /* rank 0: w, own, rep_0, rep_2; rank 1: w, own, rep_1 */
    CHECK_EQ_U64(fb_ckpt_layout_count(lay), 7);
    int seen_rep1 = 0;
    for (size_t i = 0; i < fb_ckpt_layout_count(lay); i++) {
        fb_ckpt_tensor_info t;
        CHECK_RC(fb_ckpt_layout_tensor(lay, i, &t), 0);
        if (!strcmp(t.name, "rep_1")) {
            seen_rep1 = 1;
            CHECK_EQ_INT(t.rank, 1);
            CHECK_EQ_U64(t.bytes, 16);
        }
        if (!strcmp(t.name, "w")) {
            CHECK_EQ_INT(t.global_shape[0], R);
            CHECK_EQ_INT(t.global_offset[0], t.rank ? 3 : 0);
        }
    }
    CHECK(seen_rep1);
    fb_ckpt_tensor_info t;
    CHECK_RC(fb_ckpt_layout_tensor(lay, 7, &t), -ERANGE);

    float rep[3][4], own1[2];
    int64_t four = 4, two = 2;
    fb_ckpt_read_req q[4];
    char name[3][8];
    for (int k = 0; k < 3; k++) {
        snprintf(name[k], sizeof name[k], "rep_%d", k);
        q[k] = req_of(name[k], -1, 1, &four, NULL, NULL, rep[k]);
    }
    q[3] = req_of("own", 1, 1, &two, NULL, NULL, own1);
    CHECK_RC(fb_ckpt_layout_read(lay, q, 4, 2, err, sizeof err), 0);
    for (int k = 0; k < 3; k++)
        for (int e = 0; e < 4; e++)
            CHECK_EQ_DBL(rep[k][e], (double)(k * 10 + e + 7));
    CHECK_EQ_DBL(own1[0], 1.0);
    CHECK_EQ_DBL(own1[1], 7.0);
    /* A replica asked of a rank that does not hold it. */
    q[0] = req_of("rep_1", 0, 1, &four, NULL, NULL, rep[1]);
    CHECK_RC(fb_ckpt_layout_read(lay, q, 1, 1, err, sizeof err), FB_EMISMATCH);
    CHECKF(strstr(err, "\"rep_1\" is not in rank 0's shard of step 7"), "%s", err);
    fb_ckpt_layout_close(lay);
}

/* Read "w" split into `parts` row blocks, or column blocks, and whole. */
static void read_split(fb_ckpt_layout *lay, int parts, int by_col, int step)
{
    char err[512];
    for (int p = 0; p < parts; p++) {
        int n = by_col ? C : R;
        int lo = p * n / parts, hi = (p + 1) * n / parts;
        int64_t shape[2] = {by_col ? R : hi - lo, by_col ? hi - lo : C};
        int64_t goff[2] = {by_col ? 0 : lo, by_col ? lo : 0};
        int64_t gshape[2] = {R, C};
        float buf[R * C];
        fb_ckpt_read_req q = req_of("w", -1, 2, shape, gshape, goff, buf);
        CHECK_RC(fb_ckpt_layout_read(lay, &q, 1, 3, err, sizeof err), 0);
        for (int i = 0; i < shape[0]; i++)
            for (int c = 0; c < shape[1]; c++)
                CHECKF(buf[i * shape[1] + c] ==
                           global_at(i + (int)goff[0], c + (int)goff[1], step),
                       "part %d/%d%s: (%d,%d) = %g", p, parts, by_col ? " by column" : "",
                       i, c, buf[i * shape[1] + c]);
    }
}

static void case_reshard(void)
{
    char dir[512];
    fresh_dir("reshard", dir, sizeof dir);
    save_sharded(dir, 2, 3);
    fb_ckpt_layout *lay = NULL;
    /* A job of another size asks for the size recorded (0). */
    CHECK_RC(fb_ckpt_layout_open(&lay, dir, 0, FB_CKPT_NEWEST), 0);
    if (!lay)
        return;
    CHECK_EQ_INT(fb_ckpt_layout_world_size(lay), 2);
    for (int parts = 1; parts <= R; parts++) {
        read_split(lay, parts, 0, 3);
        read_split(lay, parts, 1, 3);
    }
    fb_ckpt_layout_close(lay);
    /* Saved by 3 ranks, read by 2 (and by 4, 5 and 6). */
    fresh_dir("reshard3", dir, sizeof dir);
    save_sharded(dir, 3, 4);
    CHECK_RC(fb_ckpt_layout_open(&lay, dir, 0, FB_CKPT_NEWEST), 0);
    if (!lay)
        return;
    CHECK_EQ_INT(fb_ckpt_layout_world_size(lay), 3);
    for (int parts = 1; parts <= R; parts++)
        read_split(lay, parts, 0, 4);
    fb_ckpt_layout_close(lay);
}

static void case_mismatch(void)
{
    char dir[512], err[512];
    fresh_dir("mismatch", dir, sizeof dir);
    save_sharded(dir, 2, 5);
    fb_ckpt_layout *lay = NULL;
    CHECK_RC(fb_ckpt_layout_open(&lay, dir, 2, FB_CKPT_NEWEST), 0);
    if (!lay)
        return;
    float buf[R * C + 8], before[R * C + 8];
    memset(buf, 0x5a, sizeof buf);
    memcpy(before, buf, sizeof buf);
    int64_t four = 4, whole[2] = {R, C}, wide[2] = {R, C + 1};
    fb_ckpt_read_req q[2];
    /* A good request beside a bad one: neither buffer is written. */
    q[0] = req_of("rep_0", -1, 1, &four, NULL, NULL, buf);
    q[1] = req_of("nope", -1, 1, &four, NULL, NULL, buf + 4);
    CHECK_RC(fb_ckpt_layout_read(lay, q, 2, 1, err, sizeof err), FB_EMISMATCH);
    CHECKF(strstr(err, "\"nope\" is not in step 5 (saved by 2 ranks)"), "%s", err);
    CHECK_EQ_MEM(buf, before, sizeof buf);
    q[1] = req_of("w", -1, 2, wide, wide, NULL, buf + 4);
    CHECK_RC(fb_ckpt_layout_read(lay, q, 2, 1, err, sizeof err), FB_EMISMATCH);
    CHECKF(strstr(err, "\"w\": F32 [6,5] in rank 0's shard of step 5, F32 [6,6] "
                       "expected"), "%s", err);
    q[1] = req_of("w", -1, 2, whole, NULL, NULL, buf + 4);
    q[1].dtype = FB_DTYPE_I32;
    CHECK_RC(fb_ckpt_layout_read(lay, q, 2, 1, err, sizeof err), FB_EMISMATCH);
    CHECKF(strstr(err, "I32 [6,5] expected"), "%s", err);
    /* Only rank 1's slice: rows 3..5 of 0..5. */
    q[1] = req_of("w", 1, 2, whole, NULL, NULL, buf + 4);
    CHECK_RC(fb_ckpt_layout_read(lay, q, 2, 1, err, sizeof err), FB_EMISMATCH);
    CHECKF(strstr(err, "hold 15 of the 30 elements of [6,5] at [0,0]"), "%s", err);
    CHECK_EQ_MEM(buf, before, sizeof buf);
    /* A region that does not fit its global shape is the caller's error. */
    int64_t off[2] = {2, 0};
    q[1] = req_of("w", -1, 2, whole, whole, off, buf + 4);
    CHECK_RC(fb_ckpt_layout_read(lay, q, 2, 1, err, sizeof err), -EINVAL);
    CHECK_EQ_MEM(buf, before, sizeof buf);
    fb_ckpt_layout_close(lay);
}

/* Flip one byte at `from_end` bytes before the end of a file. */
static void flip(const char *path, size_t from_end)
{
    char *buf = NULL;
    size_t len = 0;
    CHECK_RC(fb__read_file(path, 1 << 20, &buf, &len), 0);
    if (buf && len >= from_end) {
        buf[len - from_end] ^= 0xff;
        CHECK_RC(fb__write_file_atomic(path, buf, len), 0);
    }
    free(buf);
}

static void case_corrupt(void)
{
    char dir[512], err[512], path[1024];
    fresh_dir("corrupt", dir, sizeof dir);
    save_sharded(dir, 2, 9);
    /* rank 1's shard: w (rows 3..5), own, rep_1 (last, 16 bytes) */
    snprintf(path, sizeof path, "%s/step-0000000009/rank-00001.safetensors", dir);
    flip(path, 3);
    fb_ckpt_layout *lay = NULL;
    CHECK_RC(fb_ckpt_layout_open(&lay, dir, 2, FB_CKPT_NEWEST), 0);
    if (!lay)
        return;
    float a[4], b[4], w[R * C], before[4];
    memset(a, 0, sizeof a);
    memset(before, 0, sizeof before);
    int64_t four = 4, whole[2] = {R, C};
    fb_ckpt_read_req q[2] = {req_of("rep_0", -1, 1, &four, NULL, NULL, a),
                             req_of("rep_1", -1, 1, &four, NULL, NULL, b)};
    CHECK_RC(fb_ckpt_layout_read(lay, q, 2, 2, err, sizeof err), FB_ECORRUPT);
    CHECKF(strstr(err, "rank-00001.safetensors: tensor \"rep_1\": hash"), "%s", err);
    CHECK_EQ_MEM(a, before, sizeof a);   /* rank 0's verified, not copied */
    /* What rank 1's damaged tensor is not needed for still reads. */
    q[1] = req_of("w", -1, 2, whole, NULL, NULL, w);
    /* One reader: rank 0's w and rep_0, with own between them, in one pass. */
    CHECK_RC(fb_ckpt_layout_read(lay, q, 2, 1, err, sizeof err), 0);
    CHECK_EQ_DBL(a[3], 3.0 + 9);
    CHECK_EQ_DBL(w[R * C - 1], global_at(R - 1, C - 1, 9));
    fb_ckpt_layout_close(lay);
}

static void case_choose_step(void)
{
    char dir[512];
    fb_ckpt_layout *lay = NULL;
    fresh_dir("choose", dir, sizeof dir);
    CHECK_RC(fb_ckpt_layout_open(&lay, dir, 0, FB_CKPT_NEWEST), FB_ENOCKPT);
    save_sharded(dir, 2, 10);
    save_sharded(dir, 2, 20);
    CHECK_RC(fb_ckpt_layout_open(&lay, dir, 3, FB_CKPT_NEWEST), FB_ENOCKPT);
    CHECK_RC(fb_ckpt_layout_open(&lay, dir, 2, 19), 0);
    if (lay)
        CHECK_EQ_U64(fb_ckpt_layout_step(lay), 10);
    fb_ckpt_layout_close(lay);
    lay = NULL;
    CHECK_RC(fb_ckpt_layout_open(&lay, dir, 2, 9), FB_ENOCKPT);
    /* A missing shard makes step 20 incomplete: step 10. */
    char path[1024];
    snprintf(path, sizeof path, "%s/step-0000000020/rank-00001.safetensors", dir);
    CHECK_RC(unlink(path), 0);
    CHECK_RC(fb_ckpt_layout_open(&lay, dir, 0, FB_CKPT_NEWEST), 0);
    if (lay)
        CHECK_EQ_U64(fb_ckpt_layout_step(lay), 10);
    fb_ckpt_layout_close(lay);
}

/* Replace the first occurrence of `from` in a file by `to` (same length). */
static void patch(const char *path, const char *from, const char *to)
{
    char *buf = NULL;
    size_t len = 0;
    CHECK_RC(fb__read_file(path, 1 << 20, &buf, &len), 0);
    char *p = buf ? memmem(buf, len, from, strlen(from)) : NULL;
    CHECKF(p != NULL, "%s has no %s", path, from);
    if (p) {
        memcpy(p, to, strlen(to));
        CHECK_RC(fb__write_file_atomic(path, buf, len), 0);
    }
    free(buf);
}

static void case_bad_place(void)
{
    char dir[512], path[1024];
    fresh_dir("badplace", dir, sizeof dir);
    save_sharded(dir, 2, 1);
    save_sharded(dir, 2, 2);
    snprintf(path, sizeof path, "%s/step-0000000002/rank-00001.safetensors", dir);
    /* rank 1's rows 3..5 said to sit at row 4: past the global 6 rows. */
    patch(path, "\"firebreak.global_offset.w\":\"3,0\"",
          "\"firebreak.global_offset.w\":\"4,0\"");
    fb_ckpt_layout *lay = NULL;
    fb__say_buf said; /* the step passed over is said, with why */
    /* The header's own hash (firebreak.header_hash) no longer matches:
     * damage, whatever the place says. */
    fb__say_keep(&said);
    CHECK_RC(fb_ckpt_layout_open(&lay, dir, 2, FB_CKPT_NEWEST), 0);
    fb__say_keep(NULL);
    CHECKF(strstr(said.text, "not restoring checkpoint step 2: ") &&
           strstr(said.text, "rank-00001.safetensors: its header does not match its "
                             "firebreak.header_hash"),
           "said: %s", said.text);
    if (lay)
        CHECK_EQ_U64(fb_ckpt_layout_step(lay), 1);
    fb_ckpt_layout_close(lay);
    /* A shard without the header hash (as before it was written): the
     * place itself is checked. */
    patch(path, "\"firebreak.header_hash\"", "\"firebreak.header_hasz\"");
    lay = NULL;
    fb__say_keep(&said);
    CHECK_RC(fb_ckpt_layout_open(&lay, dir, 2, FB_CKPT_NEWEST), 0);
    fb__say_keep(NULL);
    CHECKF(strstr(said.text, "not restoring checkpoint step 2: ") &&
           strstr(said.text, "rank-00001.safetensors: tensor \"w\": slice"),
           "said: %s", said.text);
    if (lay)
        CHECK_EQ_U64(fb_ckpt_layout_step(lay), 1);
    fb_ckpt_layout_close(lay);
    lay = NULL;
    /* Malformed places: not ndim non-negative integers. */
    static const char *const bad[] = {"3,x", "-30", ",30", "30,", "3,,", "3 0",
                                      "300"};
    const char *prev = "4,0";
    char from[64], to[64];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(from, sizeof from, "\"firebreak.global_offset.w\":\"%s\"", prev);
        snprintf(to, sizeof to, "\"firebreak.global_offset.w\":\"%s\"", bad[i]);
        patch(path, from, to);
        prev = bad[i];
        lay = NULL;
        CHECK_RC(fb_ckpt_layout_open(&lay, dir, 2, FB_CKPT_NEWEST), 0);
        if (lay)
            CHECKF(fb_ckpt_layout_step(lay) == 1, "offset \"%s\" accepted", bad[i]);
        fb_ckpt_layout_close(lay);
    }
    /* The same shard's global shape made too small for the slice. */
    snprintf(from, sizeof from, "\"firebreak.global_offset.w\":\"%s\"", prev);
    patch(path, from, "\"firebreak.global_offset.w\":\"3,0\"");
    patch(path, "\"firebreak.global_shape.w\":\"6,5\"",
          "\"firebreak.global_shape.w\":\"5,5\"");
    lay = NULL;
    CHECK_RC(fb_ckpt_layout_open(&lay, dir, 2, FB_CKPT_NEWEST), 0);
    if (lay)
        CHECK_EQ_U64(fb_ckpt_layout_step(lay), 1);
    fb_ckpt_layout_close(lay);
    /* Put right again, step 2 is read. */
    patch(path, "\"firebreak.global_shape.w\":\"5,5\"",
          "\"firebreak.global_shape.w\":\"6,5\"");
    lay = NULL;
    CHECK_RC(fb_ckpt_layout_open(&lay, dir, 2, FB_CKPT_NEWEST), 0);
    if (lay)
        CHECK_EQ_U64(fb_ckpt_layout_step(lay), 2);
    fb_ckpt_layout_close(lay);
}

/* The handle's directory and whether the CUDA path is built in. */
static void case_handle_info(void)
{
    char dir[512];
    fresh_dir("info", dir, sizeof dir);
    fb_ckpt *ck = open_ck(dir, 0, 1);
    CHECK_EQ_STR(fb_ckpt_dir(ck), dir);
    fb_ckpt_close(ck);
    CHECK(fb_ckpt_dir(NULL) == NULL);
    CHECK_EQ_INT(fb_ckpt_device_support(), FB_TEST_EXPECT_CUDA);
}

static const struct {
    const char *name;
    void (*run)(void);
    int unused;
} cases[] = {
    {"replica", case_replica, 0},
    {"reshard", case_reshard, 0},
    {"mismatch", case_mismatch, 0},
    {"corrupt", case_corrupt, 0},
    {"choose_step", case_choose_step, 0},
    {"bad_place", case_bad_place, 0},
    {"handle_info", case_handle_info, 0},
};

int main(int argc, char **argv)
{
    size_t ncases = sizeof cases / sizeof cases[0];
    if (argc < 2) {
        fprintf(stderr, "usage: test_layout CASE | --list\n");
        return 2;
    }
    if (!strcmp(argv[1], "--list")) {
        for (size_t i = 0; i < ncases; i++)
            printf("%s\n", cases[i].name);
        return 0;
    }
    size_t i = 0;
    while (i < ncases && strcmp(cases[i].name, argv[1]))
        i++;
    if (i == ncases) {
        fprintf(stderr, "unknown case %s (test_layout --list)\n", argv[1]);
        return 2;
    }
    snprintf(root, sizeof root, "%s/fb-layout-test.%d",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
    fb__mkdir_p(root, 0755);
    check_tmpdir(root);
    cases[i].run();
    fb__rm_rf(root);
    if (failures)
        fprintf(stderr, "%s: %d check(s) failed\n", argv[1], failures);
    return failures ? 1 : 0;
}
