/*
 * alloc_torture.c -- allocation-failure torture of the flight-recorder
 * analyzer and the checkpoint reader (curl's torture mode, SQLite's
 * malloc tests).
 *
 * Built with FB_ALLOC_TORTURE (src/common/alloc.h) and its own copies of
 * the code under test.  Each case runs once to learn the right answer,
 * then again failing allocation 1, 2, 3, ... in turn until a run makes
 * no failing allocation.  Every run must either fail with -ENOMEM or
 * succeed with the right answer: out of memory must never become a
 * verdict, a "corrupt" shard or a fallback to an older checkpoint.  No
 * crash, and (under ASan) no leak.
 *
 *   alloc_torture FR_DATA_DIR CKPT_DATA_DIR
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/safetensors.h"
#include "ckpt/shard.h"
#include "common/alloc.h"
#include "common/jsonw.h"
#include "common/util.h"
#include "firebreak/firebreak.h"
#include "fr/fr.h"
#include "../check.h"

/* One run of a case: 0 and the answer in *out (malloc'd, compared with
 * the first run's), or an error. */
typedef int (*run_fn)(void *arg, char **out);

/* Run `fn` failing each allocation in turn.  Returns runs made. */
static uint64_t torture(const char *name, run_fn fn, void *arg)
{
    char *want = NULL;
    fb__alloc_fail_at(0);
    int rc = fn(arg, &want);
    uint64_t total = fb__alloc_count();
    CHECKF(rc == 0, "%s: the run without failures returned %d (%s)", name, rc,
           fb_strerror(rc));
    if (rc)
        return 0;
    uint64_t n;
    for (n = 1;; n++) {
        char *got = NULL;
        fb__alloc_fail_at(n);
        rc = fn(arg, &got);
        int failed = fb__alloc_failed();
        fb__alloc_fail_at(0);
        if (!failed) {
            CHECKF(rc == 0 && got && !strcmp(got, want),
                   "%s: run %" PRIu64 " failed no allocation but returned %d",
                   name, n, rc);
            free(got);
            break;
        }
        if (rc == 0)
            CHECKF(got && !strcmp(got, want),
                   "%s: allocation %" PRIu64 " failed and the call succeeded "
                   "with another answer:\n  want %s\n  got  %s", name, n, want,
                   got ? got : "(none)");
        else
            CHECKF(rc == -ENOMEM,
                   "%s: allocation %" PRIu64 " failed and the call returned %d "
                   "(%s), not -ENOMEM", name, n, rc, fb_strerror(rc));
        free(got);
    }
    printf("%s: %" PRIu64 " allocations (first run %" PRIu64 "), each failed "
           "in turn\n", name, n - 1, total);
    free(want);
    return n;
}

/* ---- the analyzer ---- */

static int run_fr(void *arg, char **out)
{
    const char *path = arg;
    fb__fr_result *r = NULL;
    char err[512];
    int rc = fb__fr_analyze_paths(&path, 1, &r, err, sizeof err);
    if (rc)
        return rc;
    fb__jsonw w;
    fb__jsonw_init(&w);
    rc = fb__fr_result_json(r, &w);
    if (!rc) {
        /* the answer and how it is told (the text goes to a null file) */
        FILE *f = fopen("/dev/null", "w");
        if (f) {
            fb__fr_result_text(r, f);
            fclose(f);
        }
        *out = strdup(fb__jsonw_text(&w));
    }
    fb__jsonw_free(&w);
    fb__fr_result_free(r);
    return rc;
}

/* ---- the checkpoint reader ---- */

typedef struct buf { char *p; size_t n; } buf;

static int run_st_buffer(void *arg, char **out)
{
    const buf *b = arg;
    fb__st_header *h = NULL;
    char err[512], ans[256];
    int rc = fb__st_parse_buffer(b->p, b->n, "valid.safetensors", &h, err,
                                 sizeof err);
    if (rc)
        return rc;
    snprintf(ans, sizeof ans, "%zu tensors, %zu meta, data %" PRIu64,
             h->ntensors, h->nmeta, h->data_len);
    fb__st_free(h);
    *out = strdup(ans);
    return 0;
}

static int run_verify(void *arg, char **out)
{
    const char *path = arg;
    fb__st_header *h = NULL;
    int fd = -1;
    char err[1024];
    int rc = fb__st_open(path, &fd, &h, err, sizeof err);
    if (rc)
        return rc;
    rc = fb__shard_read_verify(fd, h, path, NULL, 1, NULL, NULL, NULL, NULL,
                               err, sizeof err);
    fb__st_free(h);
    close(fd);
    if (!rc)
        *out = strdup("verified");
    return rc;
}

#define NT 3
#define TBYTES 4096

typedef struct restore_case {
    fb_ckpt *ck;
    float *t[NT];
} restore_case;

/* Restore into zeroed tensors: the step and a digest of what arrived; on
 * failure the tensors must be as they were (zero). */
static int run_restore(void *arg, char **out)
{
    restore_case *c = arg;
    for (int i = 0; i < NT; i++)
        memset(c->t[i], 0, TBYTES);
    uint64_t step = 0;
    int rc = fb_ckpt_restore(c->ck, &step);
    uint64_t h = 0;
    if (rc) {
        for (int i = 0; i < NT; i++)
            for (int k = 0; k < TBYTES / 4; k++)
                if (c->t[i][k] != 0) {
                    CHECKF(0, "restore failed (%d) but wrote tensor %d", rc, i);
                    return rc;
                }
        return rc;
    }
    for (int i = 0; i < NT; i++)
        h = fb__fnv1a64(c->t[i], TBYTES, h);
    char ans[96];
    snprintf(ans, sizeof ans, "step %" PRIu64 " data %016" PRIx64, step, h);
    *out = strdup(ans);
    return 0;
}

static void ckpt_cases(const char *data_dir)
{
    char path[4096], tmpl[] = "/tmp/fb-alloc-torture.XXXXXX";
    buf b = {0};
    snprintf(path, sizeof path, "%s/valid.safetensors", data_dir);
    CHECK_RC(fb__read_file(path, 1 << 20, &b.p, &b.n), 0);
    if (b.p)
        torture("safetensors header", run_st_buffer, &b);
    free(b.p);

    char *root = mkdtemp(tmpl);
    CHECK(root != NULL);
    if (!root)
        return;
    check_tmpdir(root);
    restore_case c = {0};
    fb_ckpt_options o;
    fb_ckpt_options_init(&o);
    o.dir = root;
    o.rank = 0;
    o.world_size = 1;
    o.async = 0;
    o.keep = 2;
    o.io_threads = 1;
    CHECK_RC(fb_ckpt_open(&c.ck, &o), 0);
    if (!c.ck)
        goto out;
    for (int i = 0; i < NT; i++) {
        char name[32];
        int64_t shape[1] = {TBYTES / 4};
        c.t[i] = calloc(1, TBYTES);
        snprintf(name, sizeof name, "layer.%d.weight", i);
        CHECK_RC(fb_ckpt_register(c.ck, name, FB_DTYPE_F32, 1, shape, c.t[i]), 0);
    }
    /* two checkpoints: out of memory must not fall back to the older */
    for (uint64_t step = 1; step <= 2; step++) {
        for (int i = 0; i < NT; i++)
            for (int k = 0; k < TBYTES / 4; k++)
                c.t[i][k] = (float)(step * 1000 + (uint64_t)i * 100 + (uint64_t)k);
        CHECK_RC(fb_ckpt_save(c.ck, step), 0);
    }
    snprintf(path, sizeof path, "%s/step-%010d/rank-%05d.safetensors", root, 2, 0);
    torture("shard verify", run_verify, path);
    torture("restore", run_restore, &c);
    fb_ckpt_close(c.ck);
    for (int i = 0; i < NT; i++)
        free(c.t[i]);
out:
    fb__rm_rf(root);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s FR_DATA_DIR CKPT_DATA_DIR\n", argv[0]);
        return 2;
    }
    static const char *const fr_cases[] = {
        "torch/hang-json", "torch/hang-p3", "torch/type-json", "torch/size-p2",
        "torch/dtype-p3", "torch/straggler-json", "torch/p2p-p5",
        "torch/subgroup-p4", "torch/wrapped-p2", "torch/ok-json",
        "torch/versions-json", "ring/wrapped-rank-0.fbseg",
        "torch/hang-json/nccl_trace_rank_1", /* one rank of four: incomplete */
        "torch_real/2.9.1/json", "torch_real/2.15.0/pickle",
    };
    char path[4096];
    for (size_t i = 0; i < sizeof fr_cases / sizeof fr_cases[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", argv[1], fr_cases[i]);
        char name[128];
        snprintf(name, sizeof name, "fr analyze %s", fr_cases[i]);
        torture(name, run_fr, path);
    }
    ckpt_cases(argv[2]);
    return failures != 0;
}
