/*
 * bench_record.c -- cost of recording one flight-recorder event
 * (fb_fr_begin + fb_fr_end, and fb_fr_begin alone) into a real segment,
 * against an empty loop of the same trip count in the same run.
 */
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../bench_result.h"
#include "common/util.h"
#include "firebreak/firebreak.h"
#include "fr/recorder.h"
#include "lib/segment.h"

#define N 1000000

static volatile uint64_t sink;

static double per_op(uint64_t t0, uint64_t t1)
{
    return (double)(t1 - t0) / N;
}

int main(int argc, char **argv)
{
    bench_help_no_args(argc, argv, "fr_bench_record",
                      "The cost of recording one flight-recorder event (fb_fr_begin +\n"
                      "fb_fr_end, and fb_fr_begin alone) into a real segment, against an empty\n"
                      "loop of the same trip count in the same run.\n");
    char job[32];
    snprintf(job, sizeof job, "frbench%d", (int)getpid());
    fb__seg *seg = NULL;
    fb__seg_create_args a = {.job_id = job, .rank = 0, .world_size = 1};
    if (fb__seg_create(&seg, &a)) {
        fprintf(stderr, "bench_record: cannot create a segment\n");
        return 1;
    }
    fb__fr_bind(seg);
    int ranks[1] = {0};
    fb_fr_comm(42, 1, 0, ranks, "bench");
    double best_empty = 1e9, best_pair = 1e9, best_begin = 1e9, best_clock = 1e9;
    for (int rep = 0; rep < 25; rep++) {
        uint64_t t0 = fb__now_ns();
        for (uint64_t i = 0; i < N; i++) {
            sink = i;
            __asm__ volatile("" ::: "memory");
        }
        uint64_t t1 = fb__now_ns();
        for (uint64_t i = 0; i < N; i++) {
            uint64_t h = fb_fr_begin(42, FB_OP_ALLREDUCE, FB_DTYPE_F32, 1024, -1);
            fb_fr_end(h);
            sink = h;
        }
        uint64_t t2 = fb__now_ns();
        for (uint64_t i = 0; i < N; i++)
            sink = fb_fr_begin(42, FB_OP_ALLREDUCE, FB_DTYPE_F32, 1024, -1);
        uint64_t t3 = fb__now_ns();
        for (uint64_t i = 0; i < N; i++)
            sink = fb__now_ns();
        uint64_t t4 = fb__now_ns();
        if (per_op(t3, t4) < best_clock) best_clock = per_op(t3, t4);
        if (per_op(t0, t1) < best_empty) best_empty = per_op(t0, t1);
        if (per_op(t1, t2) < best_pair) best_pair = per_op(t1, t2);
        if (per_op(t2, t3) < best_begin) best_begin = per_op(t2, t3);
    }
    printf("empty loop:                 %6.1f ns/iter (baseline)\n", best_empty);
    printf("fb_fr_begin + fb_fr_end:    %6.1f ns/event, %5.1f ns over the "
           "baseline (target < 50)\n", best_pair, best_pair - best_empty);
    printf("fb_fr_begin alone:          %6.1f ns/event, %5.1f ns over the baseline\n",
           best_begin, best_begin - best_empty);
    printf("one clock_gettime:          %6.1f ns (what each event paid before "
           "the TSC clock)\n", best_clock);
    fb__seg_header *h = fb__seg_hdr(seg);
    printf("event clock:                %s",
           h->fr_clock == FB_CLOCK_TSC ? "tsc" : "clock_gettime(CLOCK_MONOTONIC)");
    if (h->fr_clock == FB_CLOCK_TSC)
        printf(" at %.1f MHz", (double)h->fr_tsc_hz / 1e6);
    printf(" (FIREBREAK_FR_CLOCK=monotonic forces clock_gettime)\n");
    printf("ratio event/empty loop:     %.1fx; begin/clock read: %.2fx\n",
           best_pair / best_empty, best_begin / best_clock);
    char name[FB__SEG_NAME_MAX];
    fb__seg_name(name, sizeof name, job, 0, 0);
    shm_unlink(name);
    fb__fr_bind(NULL);
    fb__seg_close(seg);
    char m[96], b[96];
    int met = bench_target("fr_bench_record", "flight-recorder event (begin + end)",
                           bench_fmt(m, sizeof m, "%.1f ns over the loop", best_pair - best_empty),
                           bench_fmt(b, sizeof b, "empty loop %.1f ns; clock read %.1f ns",
                                     best_empty, best_clock),
                           "< 50 ns", best_pair - best_empty < 50);
    return met ? 0 : 1;
}
