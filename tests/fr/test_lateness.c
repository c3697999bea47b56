/*
 * test_lateness.c -- the live lateness analysis (src/fr/lateness.c):
 * the straggler rule as a table of cases, then the tracker over rings
 * generated in memory (late_ring.h), fed incrementally as the supervisor
 * feeds live segments.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "../check.h"
#include "fr/fr.h"
#include "late_ring.h"

#define WORLD_ID 0x1111111111111111ull
#define MS 1000000ull

/* ---- the rule ---- */

static const struct rule_case {
    const char *name;
    uint32_t n, last;
    double mean_ms, step_s;
    int flagged, want;
} rule_cases[] = {
    {"too_few_stays_off", 31, 31, 50, 0.1, 0, 0},
    {"too_few_keeps_flag", 10, 0, 0, 0.1, 1, 1},
    {"late_and_last", 64, 40, 20, 0.1, 0, 1},
    {"at_threshold", 64, 32, 5, 0, 0, 1},
    {"just_under_abs", 64, 64, 4.9, 0, 0, 0},
    {"step_share_raises", 64, 64, 8, 0.2, 0, 0},    /* 5% of 200 ms = 10 ms */
    {"step_share_met", 64, 64, 10.5, 0.2, 0, 1},
    {"late_not_last", 64, 31, 50, 0.1, 0, 0},       /* a 1-in-2 share needed */
    {"last_not_late", 64, 64, 1, 0.1, 0, 0},        /* jitter */
    {"early_rank", 64, 0, -20, 0.1, 0, 0},
    {"hyst_holds", 64, 17, 3, 0.1, 1, 1},           /* >= 25%, >= 2.5 ms */
    {"hyst_share_ends", 64, 15, 30, 0.1, 1, 0},
    {"hyst_late_ends", 64, 64, 2.4, 0.1, 1, 0},
    {"hyst_step_scaled", 64, 64, 4, 0.2, 1, 0},     /* half of 10 ms = 5 */
};

static void test_rule(void)
{
    fb__fr_late_rule rule;
    fb__fr_late_rule_init(&rule);
    for (size_t i = 0; i < sizeof rule_cases / sizeof rule_cases[0]; i++) {
        const struct rule_case *c = &rule_cases[i];
        fb__fr_late_window w = {.n = c->n, .last = c->last, .mean_s = c->mean_ms / 1e3};
        int got = fb__fr_late_judge(&rule, &w, c->step_s, c->flagged);
        CHECKF(got == c->want, "rule case %s: got %d, want %d", c->name, got, c->want);
    }
}

/* ---- the tracker ---- */

/* A deterministic jitter of 0 .. 2 ms. */
static uint64_t jitter(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x % (2 * MS);
}

typedef struct job {
    int world;
    late_ring r[8];
    uint64_t t;
    uint64_t rng;
} job;

static void job_init(job *j, int world, uint32_t capacity)
{
    j->world = world;
    j->t = 1000 * MS;
    j->rng = 88172645463325252ull;
    for (int k = 0; k < world; k++)
        CHECK(late_ring_init(&j->r[k], capacity) == 0);
}

static void job_free(job *j)
{
    for (int k = 0; k < j->world; k++)
        late_ring_free(&j->r[k]);
}

/* n collectives 100 ms apart; `slow` (or -1) enters late_ms late. */
static void job_steps(job *j, int n, int slow, uint64_t late_ms)
{
    for (int i = 0; i < n; i++) {
        j->t += 100 * MS;
        for (int k = 0; k < j->world; k++)
            late_ring_put(&j->r[k], WORLD_ID, k, j->world,
                          j->t + jitter(&j->rng) + (k == slow ? late_ms * MS : 0), 0);
    }
}

static uint32_t feed_all(fb__fr_late *t, job *j, uint32_t budget)
{
    uint32_t n = 0;
    for (int k = 0; k < j->world; k++)
        n += fb__fr_late_feed_ring(t, k, j->r[k].area, j->r[k].capacity,
                                   j->r[k].head, 0, budget);
    return n;
}

static void test_names_slow_rank(void)
{
    job j;
    fb__fr_late *t;
    job_init(&j, 4, 256);
    CHECK_RC(fb__fr_late_new(&t, 4, NULL), 0);
    int changed[4], n = 0;
    /* fed every 10 collectives, as a live job would be */
    for (int pass = 0; pass < 8; pass++) {
        job_steps(&j, 10, 2, 20);
        CHECK_EQ_U64(feed_all(t, &j, 4096), 40);
        int c = fb__fr_late_update(t, 0.1, changed + n, 4 - n);
        n += c;
    }
    CHECK_EQ_INT(n, 1);
    CHECK_EQ_INT(changed[0], 2);
    fb__fr_late_window w;
    int flagged = 0;
    CHECK_RC(fb__fr_late_get(t, 2, &w, &flagged), 0);
    CHECK_EQ_INT(flagged, 1);
    CHECK_EQ_U64(w.n, 64);
    CHECK_EQ_U64(w.last, 64);
    CHECKF(w.mean_s > 0.018 && w.mean_s < 0.022, "mean %.6f s, want about 20 ms", w.mean_s);
    CHECK_RC(fb__fr_late_get(t, 0, &w, &flagged), 0);
    CHECK_EQ_INT(flagged, 0);
    CHECKF(w.mean_s < 0, "rank 0 mean %.6f s: should be early", w.mean_s);
    CHECK_EQ_U64(fb__fr_late_complete(t), 80);
    CHECK_EQ_U64(fb__fr_late_dropped(t), 0);
    /* nothing new: a feed reads nothing */
    CHECK_EQ_U64(feed_all(t, &j, 4096), 0);
    /* on time again: the flag ends (hysteresis: not at once) */
    job_steps(&j, 20, -1, 0);
    feed_all(t, &j, 4096);
    CHECK_EQ_INT(fb__fr_late_update(t, 0.1, changed, 4), 0);
    job_steps(&j, 60, -1, 0);
    feed_all(t, &j, 4096);
    CHECK_EQ_INT(fb__fr_late_update(t, 0.1, changed, 4), 1);
    CHECK_EQ_INT(changed[0], 2);
    fb__fr_late_free(t);
    job_free(&j);
}

static void test_fault_free(void)
{
    job j;
    fb__fr_late *t;
    job_init(&j, 8, 1024);
    CHECK_RC(fb__fr_late_new(&t, 8, NULL), 0);
    int changed[8];
    for (int pass = 0; pass < 50; pass++) {
        job_steps(&j, 7, -1, 0);
        feed_all(t, &j, 4096);
        CHECK_EQ_INT(fb__fr_late_update(t, 0.1, changed, 8), 0);
    }
    CHECK_EQ_U64(fb__fr_late_complete(t), 350);
    fb__fr_late_free(t);
    job_free(&j);
}

/* Budgets, a wrapped ring, ranks read at different times: the same
 * answer as one big feed. */
static void test_incremental(void)
{
    job j;
    fb__fr_late *t;
    job_init(&j, 4, 64); /* 63 ring slots */
    CHECK_RC(fb__fr_late_new(&t, 4, NULL), 0);
    job_steps(&j, 100, 1, 30); /* wrapped: only the last 63 remain */
    CHECK_EQ_U64(feed_all(t, &j, 10), 40);
    CHECK_EQ_U64(fb__fr_late_complete(t), 10);
    CHECK_EQ_U64(feed_all(t, &j, 4096), 4 * 53);
    CHECK_EQ_U64(fb__fr_late_complete(t), 63);
    /* rank 3 falls behind by 30 collectives; then catches up */
    job_steps(&j, 30, 1, 30);
    for (int k = 0; k < 3; k++)
        fb__fr_late_feed_ring(t, k, j.r[k].area, j.r[k].capacity, j.r[k].head, 0, 4096);
    CHECK_EQ_U64(fb__fr_late_complete(t), 63);
    fb__fr_late_feed_ring(t, 3, j.r[3].area, j.r[3].capacity, j.r[3].head, 0, 4096);
    CHECK_EQ_U64(fb__fr_late_complete(t), 93);
    int changed[4];
    CHECK_EQ_INT(fb__fr_late_update(t, 0.1, changed, 4), 1);
    CHECK_EQ_INT(changed[0], 1);
    fb__fr_late_free(t);
    job_free(&j);
}

/* What does not count: sub-communicators, point-to-point, a rank that
 * writes a seq twice; collectives a member never reaches are given up. */
static void test_ignored(void)
{
    job j;
    fb__fr_late *t;
    job_init(&j, 4, 1024);
    CHECK_RC(fb__fr_late_new(&t, 4, NULL), 0);
    for (int i = 0; i < 100; i++)
        for (int k = 0; k < 4; k++) {
            late_ring_put(&j.r[k], 0x22, k % 2, 2, 1000 * MS + i * 100 * MS, 0);
            late_ring_put(&j.r[k], WORLD_ID, k, 4, 1000 * MS + i * 100 * MS,
                          FB__FR_F_P2P);
        }
    feed_all(t, &j, 4096);
    CHECK_EQ_U64(fb__fr_late_complete(t), 0);
    CHECK_EQ_U64(fb__fr_late_dropped(t), 0);
    /* rank 3 absent from 200 world collectives: 96 stay open at most, so
     * rank 0 alone makes 104 be given up (and ranks 1 and 2, fed after it,
     * reopen and give up more) */
    for (int i = 0; i < 200; i++)
        for (int k = 0; k < 3; k++)
            late_ring_put(&j.r[k], WORLD_ID, k, 4, 30000 * MS + i * MS, 0);
    feed_all(t, &j, 4096);
    CHECK_EQ_U64(fb__fr_late_complete(t), 0);
    CHECKF(fb__fr_late_dropped(t) >= 104, "dropped %llu, want >= 104",
           (unsigned long long)fb__fr_late_dropped(t));
    CHECK_RC(fb__fr_late_get(t, 4, &(fb__fr_late_window){0}, NULL), -EINVAL);
    fb__fr_late *bad;
    CHECK_RC(fb__fr_late_new(&bad, 0, NULL), -EINVAL);
    fb__fr_late_free(t);
    job_free(&j);
}

int main(void)
{
    test_rule();
    test_names_slow_rank();
    test_fault_free();
    test_incremental();
    test_ignored();
    if (failures)
        fprintf(stderr, "%d check(s) failed\n", failures);
    return failures != 0;
}
