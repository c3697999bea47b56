/*
 * bench_sdc.c -- what the silent-data-corruption check (docs/sdc.md) costs
 * a training step over 1 GiB of replicated parameters at the default
 * setting (FB_SDC_DEFAULT_SLICE_BYTES a step, every tensor every
 * FB_SDC_DEFAULT_FULL_EVERY steps), against a step that reads and writes
 * every parameter once, measured in the same run.  Target: under 1% of
 * the step; the bench exits 1 when missed.
 *
 * The cost of a step with the check is the step plus fb_sdc_check(); the
 * rotating-slice checks are timed on the steps themselves and the full
 * check (every tensor, once per FULL_EVERY steps) is timed once and
 * spread over its steps.  The median over rounds of (step with the check)
 * / (step without it), taken back to back in alternating order, is
 * printed beside as a cross-check; on a loaded machine a step's time
 * varies by more than 1% from one to the next, so the verdict uses the
 * timed costs.  The target goes to the results file (bench/bench_result.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../bench_result.h"
#include "common/util.h"
#include "firebreak/firebreak.h"
#include "lib/segment.h"

#define PARAM_BYTES (1ull << 30)
#define TENSORS 16 /* a model's worth of tensors, 64 MiB each */
#define ROUNDS 8

__attribute__((noinline)) static void step_once(float *p, size_t n, float a)
{
    for (size_t i = 0; i < n; i++)
        p[i] = p[i] * a + 1e-7f;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    bench_help_no_args(argc, argv, "bench_sdc",
                      "What the silent-data-corruption check (docs/sdc.md) costs a step over\n"
                      "1 GiB of replicated parameters at the default setting, against a step\n"
                      "that reads and writes every parameter once, in the same run.  Target:\n"
                      "under 1% of the step; a miss makes the exit status 1.\n");
    char job[64];
    snprintf(job, sizeof job, "bench-sdc-%d", (int)getpid());
    setenv("FIREBREAK_JOB_ID", job, 1);
    setenv("FIREBREAK_RANK", "0", 1);
    setenv("FIREBREAK_WORLD_SIZE", "1", 1);
    unsetenv("FIREBREAK_SDC_SLICE");
    unsetenv("FIREBREAK_SDC_FULL_EVERY");
    if (fb_init() || !fb_attached()) {
        fprintf(stderr, "bench_sdc: cannot attach\n");
        return 1;
    }
    size_t n = PARAM_BYTES / sizeof(float);
    float *p = malloc(PARAM_BYTES);
    if (!p) {
        fprintf(stderr, "bench_sdc: cannot allocate 1 GiB\n");
        fb__seg_remove_job(job, -1);
        return 1;
    }
    for (size_t i = 0; i < n; i++)
        p[i] = (float)(i % 1000) * 1e-3f;
    size_t per = n / TENSORS;
    for (int t = 0; t < TENSORS; t++) {
        char name[32];
        snprintf(name, sizeof name, "layer%d.weight", t);
        if (fb_sdc_register(name, p + (size_t)t * per, per * sizeof(float))) {
            fprintf(stderr, "bench_sdc: cannot register %s\n", name);
            return 1;
        }
    }
    uint64_t base[ROUNDS], with[ROUNDS], check[ROUNDS];
    uint64_t step = 1; /* never a multiple of FULL_EVERY below */
    step_once(p, n, 0.999f); /* warm the pages */
    for (int r = 0; r < ROUNDS; r++) {
        /* Alternate which comes first, so drift in the machine's load
         * falls on both sides. */
        for (int k = 0; k < 2; k++) {
            int checked = (k + r) % 2;
            uint64_t t0 = fb__now_ns();
            step_once(p, n, k ? 1.001f : 0.999f);
            uint64_t t1 = fb__now_ns();
            if (checked)
                fb_sdc_check(step++);
            uint64_t t2 = fb__now_ns();
            if (checked) {
                with[r] = t2 - t0;
                check[r] = t2 - t1;
            } else {
                base[r] = t2 - t0;
            }
        }
    }
    /* The full check: every tensor, once per FULL_EVERY steps. */
    uint64_t f0 = fb__now_ns();
    fb_sdc_check(FB_SDC_DEFAULT_FULL_EVERY);
    uint64_t full = fb__now_ns() - f0;
    /* Paired: each round's step with the check over its step without. */
    uint64_t ratio[ROUNDS];
    for (int r = 0; r < ROUNDS; r++)
        ratio[r] = (uint64_t)((double)with[r] / (double)base[r] * 1e6);
    qsort(ratio, ROUNDS, sizeof ratio[0], cmp_u64);
    qsort(base, ROUNDS, sizeof base[0], cmp_u64);
    qsort(with, ROUNDS, sizeof with[0], cmp_u64);
    qsort(check, ROUNDS, sizeof check[0], cmp_u64);
    double step_ms = (double)base[ROUNDS / 2] / 1e6;
    double slice_ms = (double)check[ROUNDS / 2] / 1e6;
    double full_ms = (double)full / 1e6;
    double cost_ms = slice_ms + full_ms / FB_SDC_DEFAULT_FULL_EVERY;
    double pct = 100.0 * cost_ms / step_ms;
    double e2e = 100.0 * ((double)ratio[ROUNDS / 2] / 1e6 - 1.0);
    printf("sdc check over 1 GiB of replicated parameters (%d tensors), default "
           "setting (%u MiB a step, all every %d steps):\n", TENSORS,
           FB_SDC_DEFAULT_SLICE_BYTES >> 20, FB_SDC_DEFAULT_FULL_EVERY);
    printf("  baseline step (read+write every parameter once): %.1f ms (median of %d)\n",
           step_ms, ROUNDS);
    printf("  check: slice %.3f ms a step, full %.1f ms once per %d steps: %.3f ms "
           "a step on average\n", slice_ms, full_ms, FB_SDC_DEFAULT_FULL_EVERY, cost_ms);
    printf("  slowdown %.3f%% of the step (target < 1%%): %s\n", pct,
           pct < 1.0 ? "met" : "NOT met");
    printf("  cross-check, step with the slice check vs without, median of paired "
           "rounds: %+.2f%% (noise-bound on a loaded machine)\n",
           e2e);
    char m[96], b[96];
    int met = bench_target(
        "bench_sdc", "SDC check, 1 GiB in 16 tensors, default setting",
        bench_fmt(m, sizeof m, "%.3f ms a step = %.3f%%", cost_ms, pct),
        bench_fmt(b, sizeof b, "step (read+write all) %.1f ms", step_ms), "< 1% of step",
        pct < 1.0);
    free(p);
    fb_sdc_clear();
    fb__seg_remove_job(job, -1);
    return met ? 0 : 1;
}
