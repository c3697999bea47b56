/*
 * test_agent_detect.c -- the agent's pure detectors: stragglers (median of
 * the others, consecutive samples, hysteresis, ranks not judged) and node
 * power swings; a rank's productive time, a counter; Prometheus label
 * escaping and number formatting.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/agent.h"
#include "lib/segment.h"
#include "../check.h"

static int began[8], ended[8];

static void emit(void *ctx, const fb__rank_sample *r, int begin)
{
    (void)ctx;
    if (begin)
        began[r->rank]++;
    else
        ended[r->rank]++;
}

static void set(fb__rank_sample *r, int n, const double *ewma)
{
    for (int i = 0; i < n; i++) {
        r[i].rank = i;
        r[i].steps_done = 10;
        r[i].step_ewma_s = ewma[i];
    }
}

static void test_stragglers(void)
{
    fb__rank_sample r[4];
    memset(r, 0, sizeof r);
    double even[4] = {0.1, 0.1, 0.11, 0.1};
    double slow[4] = {0.1, 0.1, 0.4, 0.1};
    set(r, 4, even);
    fb__agent_stragglers(r, 4, 1.5, 3, emit, NULL);
    CHECK_EQ_INT(began[2], 0);
    CHECK(!r[2].straggler);
    set(r, 4, slow);
    fb__agent_stragglers(r, 4, 1.5, 3, emit, NULL);
    fb__agent_stragglers(r, 4, 1.5, 3, emit, NULL);
    CHECK_EQ_INT(began[2], 0); /* two samples: not yet */
    fb__agent_stragglers(r, 4, 1.5, 3, emit, NULL);
    CHECK_EQ_INT(began[2], 1);
    CHECK(r[2].straggler && r[2].median_s > 0.099 && r[2].median_s < 0.101);
    CHECK_EQ_INT(began[0] + began[1] + began[3], 0); /* the others are fine */
    fb__agent_stragglers(r, 4, 1.5, 3, emit, NULL);
    CHECK_EQ_INT(began[2], 1); /* reported once */
    double between[4] = {0.1, 0.1, 0.14, 0.1}; /* under 1.5x, above 1.25x */
    set(r, 4, between);
    fb__agent_stragglers(r, 4, 1.5, 3, emit, NULL);
    CHECK_EQ_INT(ended[2], 0);
    CHECK(r[2].straggler);
    set(r, 4, even);
    fb__agent_stragglers(r, 4, 1.5, 3, emit, NULL);
    CHECK_EQ_INT(ended[2], 1);
    CHECK(!r[2].straggler);
    /* a rank that ended or has too few steps is not judged */
    set(r, 4, slow);
    r[2].end_kind = FB__END_EXIT;
    for (int i = 0; i < 5; i++)
        fb__agent_stragglers(r, 4, 1.5, 3, emit, NULL);
    CHECK_EQ_INT(began[2], 1);
    r[2].end_kind = FB__END_NONE;
    r[2].steps_done = 2;
    for (int i = 0; i < 5; i++)
        fb__agent_stragglers(r, 4, 1.5, 3, emit, NULL);
    CHECK_EQ_INT(began[2], 1);
    /* one rank alone has nobody to be slower than */
    fb__rank_sample one[1];
    memset(one, 0, sizeof one);
    set(one, 1, slow + 2);
    for (int i = 0; i < 5; i++)
        fb__agent_stragglers(one, 1, 1.5, 3, emit, NULL);
    CHECK(!one[0].straggler);
}

static void test_swing(void)
{
    CHECK_EQ_INT(fb__agent_power_swing(5600, 1200, 0.3, 500), 1);
    CHECK_EQ_INT(fb__agent_power_swing(1200, 5600, 0.3, 500), 1);
    CHECK_EQ_INT(fb__agent_power_swing(5600, 5200, 0.3, 500), 0);
    CHECK_EQ_INT(fb__agent_power_swing(800, 300, 0.3, 500), 1);
    CHECK_EQ_INT(fb__agent_power_swing(800, 400, 0.3, 500), 0); /* under 500 W */
    CHECK_EQ_INT(fb__agent_power_swing(0, 5000, 0.3, 500), 0);  /* no baseline */
}

/* A rank stopped for 3 s at step 300 of 10 ms steps, sampled every
 * 0.5 s: its smoothed step time jumps, then decays (weight 1/8).  The
 * old estimate, steps_done x step time, went 3.0 -> 52 -> ... -> 4.0
 * (a counter going down: rate() read resets); the sum never falls and
 * never outgrows the time that passed. */
static void test_productive(void)
{
    double ewma[] = {0.01, 0.01, 0.01, 0.16, 0.14, 0.12, 0.06, 0.03, 0.015, 0.011, 0.01};
    uint64_t steps[] = {100, 200, 300, 301, 302, 303, 320, 350, 390, 440, 490};
    double p = 0, prev = 0, t = 0;
    uint64_t last = 0;
    for (size_t i = 0; i < sizeof ewma / sizeof ewma[0]; i++) {
        double since = i == 3 ? 3.5 : 0.5;
        t += since;
        p = fb__agent_productive_add(p, last, steps[i], ewma[i], since);
        last = steps[i];
        CHECK(p >= prev);
        CHECK(p <= t + 1e-9);
        prev = p;
    }
    CHECK(p > 4.0 && p < 6.0);
    /* the first sample of a rank found mid-attempt: at most its age */
    CHECK(fabs(fb__agent_productive_add(0, 0, 1000, 0.05, 12.0) - 12.0) < 1e-9);
    CHECK(fabs(fb__agent_productive_add(0, 0, 100, 0.05, 12.0) - 5.0) < 1e-9);
    /* nothing new, or no step time yet: unchanged */
    CHECK(fb__agent_productive_add(7.0, 10, 10, 0.05, 1.0) == 7.0);
    CHECK(fb__agent_productive_add(7.0, 10, 12, 0.0, 1.0) == 7.0);
    CHECK(fb__agent_productive_add(7.0, 10, 12, 0.05, 0.0) == 7.0);
}

static void test_prom(void)
{
    char out[64];
    fb__prom p = {0};
    fb__prom_escape(out, sizeof out, "a\"b\\c\nd");
    CHECK_EQ_STR(out, "a\\\"b\\\\c\\nd");
    fb__prom_escape(out, 8, "0123456789");
    CHECK(strlen(out) < 8);
    /* bytes that are not UTF-8 and control bytes as '?' (Prometheus
     * refuses the whole scrape for one such label); characters kept whole */
    fb__prom_escape(out, sizeof out, "H100\xff\xfe x\xc3 \xc3\xa9\x01\x7f\t");
    CHECK_EQ_STR(out, "H100?? x? \xc3\xa9???");
    fb__prom_escape(out, 7, "ab\xe2\x82\xac\xe2\x82\xac"); /* room for one euro sign */
    CHECK_EQ_STR(out, "ab\xe2\x82\xac");
    fb__prom_family(&p, "x_seconds", "gauge", "help");
    fb__prom_sample(&p, "x_seconds", "", 1.5);
    fb__prom_sample(&p, "x_seconds", "a=\"1\"", 42);
    fb__prom_sample(&p, "x_seconds", "", NAN);
    CHECK_EQ_STR(p.buf, "# HELP x_seconds help\n# TYPE x_seconds gauge\n"
                        "x_seconds 1.5\nx_seconds{a=\"1\"} 42\n"
                        "x_seconds NaN\n");
    fb__prom_free(&p);
    /* values read back exactly: a Unix time to the sub-second, a large
     * counter's fraction, and short forms where they are exact */
    char num[32];
    CHECK_EQ_STR(fb__prom_number(num, sizeof num, 1765155000.25), "1765155000.25");
    CHECK_EQ_STR(fb__prom_number(num, sizeof num, 0.1), "0.1");
    CHECK_EQ_STR(fb__prom_number(num, sizeof num, 2.5e-7), "2.5e-07");
    double third = 1.0 / 3, big = 123456789012.5 + 1.0 / 1024;
    CHECK(strtod(fb__prom_number(num, sizeof num, third), NULL) == third);
    CHECK(strtod(fb__prom_number(num, sizeof num, big), NULL) == big);
}

int main(void)
{
    test_stragglers();
    test_swing();
    test_productive();
    test_prom();
    if (failures)
        fprintf(stderr, "%d checks failed\n", failures);
    else
        printf("agent detectors: all checks passed\n");
    return failures ? 1 : 0;
}
