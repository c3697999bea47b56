/*
 * fake_rank.c -- a stand-in training rank for the agent's tests: attaches
 * through the supervisor's environment (FIREBREAK_JOB_ID, FIREBREAK_RANK,
 * FIREBREAK_WORLD_SIZE, FIREBREAK_RUN_DIR) and completes STEPS steps of
 * STEP_MS milliseconds each.  FIREBREAK_INJECT="slow:rank=2,step=5,factor=4"
 * turns one rank into a straggler.  STEPS 0: run until SIGTERM.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "firebreak/firebreak.h"

static volatile sig_atomic_t stop;

static void on_term(int sig)
{
    (void)sig;
    stop = 1;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: fake_rank STEPS STEP_MS\n");
        return 2;
    }
    long steps = atol(argv[1]), step_ms = atol(argv[2]);
    signal(SIGTERM, on_term);
    int rc = fb_init();
    if (rc || !fb_attached()) {
        fprintf(stderr, "fake_rank: not attached: %s\n", fb_strerror(rc));
        return 1;
    }
    struct timespec ts = {step_ms / 1000, (step_ms % 1000) * 1000000L};
    for (long s = 1; !stop && (steps == 0 || s <= steps); s++) {
        nanosleep(&ts, NULL);
        fb_step((uint64_t)s);
    }
    fb_finalize();
    return 0;
}
