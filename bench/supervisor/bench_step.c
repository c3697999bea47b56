/*
 * bench_step.c -- what fb_step() costs a training loop: N calls attached to
 * a real segment, against the same loop with an empty call, in one run.
 * Target: under 100 ns a call.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "../bench_result.h"
#include "common/util.h"
#include "firebreak/firebreak.h"
#include "lib/segment.h"

__attribute__((noinline)) static void empty_step(uint64_t step)
{
    __asm__ volatile("" : : "r"(step) : "memory");
}

int main(int argc, char **argv)
{
    bench_help_no_args(argc, argv, "bench_step",
                      "What fb_step() costs a training loop, attached to a real segment,\n"
                      "against the same loop with an empty call.  Target: under 100 ns a call.\n");
    const uint64_t n = 20000000;
    char job[64];
    snprintf(job, sizeof job, "bench-step-%d", (int)getpid());
    setenv("FIREBREAK_JOB_ID", job, 1);
    setenv("FIREBREAK_RANK", "0", 1);
    setenv("FIREBREAK_WORLD_SIZE", "1", 1);
    if (fb_init() || !fb_attached()) {
        fprintf(stderr, "bench_step: cannot attach\n");
        return 1;
    }
    double best_empty = 1e9, best_step = 1e9;
    for (int round = 0; round < 5; round++) { /* warm both sides, keep the best */
        uint64_t t0 = fb__now_ns();
        for (uint64_t i = 0; i < n; i++)
            empty_step(i);
        uint64_t t1 = fb__now_ns();
        for (uint64_t i = 0; i < n; i++)
            fb_step(i);
        uint64_t t2 = fb__now_ns();
        double e = (double)(t1 - t0) / (double)n, s = (double)(t2 - t1) / (double)n;
        if (e < best_empty) best_empty = e;
        if (s < best_step) best_step = s;
    }
    double cost = best_step - best_empty;
    printf("fb_step: %.1f ns/call, empty loop %.1f ns/call, fb_step's own cost "
           "%.1f ns (target < 100 ns): %s\n", best_step, best_empty, cost,
           cost < 100 ? "met" : "NOT met");
    fb__seg_remove_job(job, -1);
    char m[96], b[96];
    int met = bench_target("bench_step", "fb_step() cost over the empty loop",
                           bench_fmt(m, sizeof m, "%.1f ns", cost),
                           bench_fmt(b, sizeof b, "empty loop %.1f ns", best_empty),
                           "< 100 ns", cost < 100);
    return met ? 0 : 1;
}
