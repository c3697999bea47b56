/*
 * test_fleet.c -- the fleet's lemon policy (fb__fleet_judge, a pure
 * function over a node's counts) on a table of nodes, each with the flags
 * docs/report.md ("Fleet") gives it; and the ranking of fb__fleet_finish.
 */
#include <stdio.h>
#include <string.h>

#include "report/report.h"
#include "../check.h"

#define R (1u << FB__FLEET_REPEAT)
#define H (1u << FB__FLEET_HARDWARE)
#define HC (1u << FB__FLEET_HEALTH)
#define RT (1u << FB__FLEET_RATE)
#define D (1u << FB__FLEET_DRAIN)

static const struct {
    const char *what;
    size_t runs, runs_failed, interruptions, hardware, health;
    double fleet_rate;
    unsigned want;
    size_t drains;
} cases[] = {
    {"healthy node", 10, 0, 0, 0, 0, 0.1, 0, 0},
    {"one failure", 10, 1, 1, 0, 0, 0.1, 0, 0},
    {"two failures, one run", 1, 1, 2, 0, 0, 0.1, RT, 0},
    {"two failures, one run, busy fleet", 1, 1, 2, 0, 0, 0.9, 0, 0},
    {"failures in two runs", 10, 2, 2, 0, 0, 0.1, R, 0},
    {"two hardware causes", 10, 1, 2, 2, 0, 0.1, H, 0},
    {"one hardware cause", 10, 1, 1, 1, 0, 0.1, 0, 0},
    {"health failed twice, no interruption", 5, 0, 0, 0, 2, 0.1, HC, 0},
    {"rate just at 3x", 10, 1, 3, 0, 0, 0.1, RT, 0},
    {"rate under 3x", 10, 1, 2, 0, 0, 0.1, 0, 0},
    {"everything", 4, 3, 4, 3, 3, 0.1, R | H | HC | RT, 0},
    {"no fleet rate", 1, 1, 2, 0, 0, 0, 0, 0},
    {"drained once", 5, 0, 0, 0, 0, 0.1, 0, 1},
    {"drained twice, no interruption", 5, 0, 0, 0, 0, 0.1, D, 2},
};

int main(void)
{
    fb__fleet_thresholds t;
    fb__fleet_thresholds_init(&t);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fb__fleet_node n;
        memset(&n, 0, sizeof n);
        n.runs = cases[i].runs;
        n.runs_failed = cases[i].runs_failed;
        n.interruptions = cases[i].interruptions;
        n.hardware = cases[i].hardware;
        n.health_fails = cases[i].health;
        n.drains = cases[i].drains;
        fb__fleet_judge(&t, cases[i].fleet_rate, &n);
        CHECKF(n.flags == cases[i].want, "%s: flags 0x%x, expected 0x%x",
               cases[i].what, n.flags, cases[i].want);
    }
    /* Ranking: more flags first, then hardware, interruptions, health. */
    fb__fleet f;
    memset(&f, 0, sizeof f);
    fb__fleet_thresholds_init(&f.t);
    fb__fleet_node nodes[3];
    memset(nodes, 0, sizeof nodes);
    snprintf(nodes[0].name, sizeof nodes[0].name, "calm");
    nodes[0].runs = 5;
    snprintf(nodes[1].name, sizeof nodes[1].name, "lemon");
    nodes[1].runs = 5;
    nodes[1].runs_failed = nodes[1].interruptions = nodes[1].hardware = 3;
    snprintf(nodes[2].name, sizeof nodes[2].name, "buggy");
    nodes[2].runs = 5;
    nodes[2].runs_failed = nodes[2].interruptions = 3;
    f.nodes = nodes;
    f.nnodes = f.cap = 3;
    f.interruptions = 6;
    fb__fleet_finish(&f);
    CHECK_EQ_STR(f.nodes[0].name, "lemon");
    CHECK_EQ_STR(f.nodes[1].name, "buggy");
    CHECK_EQ_STR(f.nodes[2].name, "calm");
    CHECK_EQ_INT(f.nodes[0].flags, R | H);
    CHECK_EQ_DBL(f.rate, 6.0 / 15.0);
    if (!failures)
        printf("report_fleet_unit: ok\n");
    return failures != 0;
}
