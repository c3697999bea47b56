/*
 * bench_lateness.c -- CPU per second of the supervisor's live lateness
 * analysis (src/fr/lateness.c) at 8 and 1,024 ranks.
 *
 *   fr_bench_lateness [RATE [SECONDS]]
 *
 * Every rank's ring (generated in memory, tests/fr/late_ring.h) gets RATE
 * collectives a second (default 100: a DDP job with 25 gradient buckets
 * at 4 steps a second), rank 1 arriving 20 ms late.  The analysis runs as
 * the supervisor runs it: a pass every 250 ms feeding every rank's new
 * entries and applying the rule.  Only the passes are timed (this
 * thread's CPU time); writing the rings is not.  The baseline is the
 * floor of any incremental reader: copying the same new entries under
 * the ring's sequence check and nothing else.
 *
 * Target (docs/flight-recorder.md, "Live lateness"): below 1% of one core
 * at 1,024 ranks.  Exits 1 when missed, or when rank 1 is not named; both
 * checks go to the results file (bench/bench_result.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "../bench_result.h"
#include "fr/fr.h"
#include "../../tests/fr/late_ring.h"

#define MS 1000000ull
#define PASSES_PER_S 4
#define CAPACITY 256
#define TARGET_CORE_SHARE 0.01

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

typedef struct result {
    double analysis_s, baseline_s;
    int named;
} result;

static int run(int world, int rate, int seconds, result *res)
{
    late_ring *r = calloc((size_t)world, sizeof *r);
    uint64_t *seen = calloc((size_t)world, sizeof *seen);
    fb__fr_late *t = NULL;
    if (!r || !seen || fb__fr_late_new(&t, world, NULL))
        return -1;
    for (int k = 0; k < world; k++)
        if (late_ring_init(&r[k], CAPACITY))
            return -1;
    uint32_t slots = fb__fr_ring_slots(CAPACITY);
    int per_pass = rate / PASSES_PER_S;
    uint64_t now = 1000 * MS, x = 2463534242u;
    volatile uint64_t sink = 0;
    res->analysis_s = res->baseline_s = 0;
    res->named = 0;
    for (int pass = 0; pass < seconds * PASSES_PER_S; pass++) {
        for (int i = 0; i < per_pass; i++) {
            now += 1000 * MS / (uint64_t)rate;
            for (int k = 0; k < world; k++) {
                x ^= x << 13, x ^= x >> 17, x ^= x << 5;
                late_ring_put(&r[k], 0x1111, k, world,
                              now + x % (2 * MS) + (k == 1 ? 20 * MS : 0), 0);
            }
        }
        /* baseline: copy the new entries, nothing else */
        double c0 = cpu_s();
        for (int k = 0; k < world; k++) {
            const fb__fr_event *ring = (const fb__fr_event *)(const void *)(
                r[k].area + (size_t)fb__fr_comm_slots(CAPACITY) * FB__SEG_FR_ENTRY_SIZE);
            for (; seen[k] < r[k].head; seen[k]++) {
                fb__fr_event e;
                if (fb__fr_read_event(ring, slots, seen[k], &e))
                    sink += e.begin_mono_ns;
            }
        }
        double c1 = cpu_s();
        for (int k = 0; k < world; k++)
            fb__fr_late_feed_ring(t, k, r[k].area, CAPACITY, r[k].head, 0, 4096);
        int changed[16];
        int n = fb__fr_late_update(t, 0.25, changed, 16);
        double c2 = cpu_s();
        for (int i = 0; i < n; i++)
            if (changed[i] == 1)
                res->named = 1;
        res->baseline_s += c1 - c0;
        res->analysis_s += c2 - c1;
    }
    (void)sink;
    fb__fr_late_free(t);
    for (int k = 0; k < world; k++)
        late_ring_free(&r[k]);
    free(r);
    free(seen);
    return 0;
}

int main(int argc, char **argv)
{
    static const char usage[] = "fr_bench_lateness [RATE 4..100000 [SECONDS]]";
    bench_help(argc, argv, usage,
               "CPU per second of the supervisor's live lateness analysis at 8 and\n"
               "1,024 ranks, RATE collectives a second per rank (default 100) for\n"
               "SECONDS (default 20), rank 1 late; baseline: copying the same entries.\n"
               "Target: below 1% of a core at 1,024 ranks.  Writes nothing.\n");
    if (argc > 3 || (argc > 1 && argv[1][0] == '-'))
        bench_bad_usage(usage, "fr_bench_lateness: at most RATE and SECONDS");
    int rate = argc > 1 ? atoi(argv[1]) : 100;
    int seconds = argc > 2 ? atoi(argv[2]) : 20;
    if (rate < PASSES_PER_S || rate > 100000 || seconds < 1 || seconds > 3600) {
        bench_bad_usage(usage, "fr_bench_lateness: RATE or SECONDS out of range");
    }
    static const int worlds[] = {8, 1024};
    int fail = 0;
    printf("live lateness: %d collectives/s per rank, a pass every %d ms, %d s "
           "simulated\n", rate, 1000 / PASSES_PER_S, seconds);
    for (size_t i = 0; i < sizeof worlds / sizeof worlds[0]; i++) {
        result res;
        if (run(worlds[i], rate, seconds, &res)) {
            fprintf(stderr, "fr_bench_lateness: out of memory at %d ranks\n", worlds[i]);
            return 2;
        }
        double share = res.analysis_s / seconds, base = res.baseline_s / seconds;
        printf("%5d ranks: analysis %.4f%% of a core (%.3f ms CPU per second); "
               "baseline (copying the new entries only) %.4f%%; ratio %.2f; "
               "straggler %s\n", worlds[i], share * 100, share * 1e3, base * 100,
               base > 0 ? share / base : 0, res.named ? "named" : "NOT named");
        char w[96], m[96], b[96];
        if (!bench_target("fr_bench_lateness",
                          bench_fmt(w, sizeof w, "straggler (rank 1, 20 ms late) named, "
                                    "%d ranks", worlds[i]),
                          res.named ? "named" : "not named", "-", "named", res.named))
            fail = 1;
        if (worlds[i] == 1024 &&
            !bench_target("fr_bench_lateness", "live lateness CPU, 1,024 ranks",
                          bench_fmt(m, sizeof m, "%.3f%% of a core", share * 100),
                          bench_fmt(b, sizeof b, "copying the entries %.3f%% (%.2fx)",
                                    base * 100, base > 0 ? share / base : 0),
                          "< 1% of a core", share < TARGET_CORE_SHARE)) {
            printf("FAIL: %.3f%% of a core at 1,024 ranks, target below %.1f%%\n",
                   share * 100, TARGET_CORE_SHARE * 100);
            fail = 1;
        }
    }
    printf("target: below %.1f%% of a core at 1,024 ranks: %s\n",
           TARGET_CORE_SHARE * 100, fail ? "missed" : "met");
    return fail;
}
