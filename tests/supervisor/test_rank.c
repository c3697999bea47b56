/*
 * test_rank.c -- a minimal rank for supervisor tests: attaches, steps with a
 * sleep, optionally leaves a setsid() grandchild behind (orphan tests),
 * optionally ignores SIGTERM (escalation tests).  No checkpoints: each
 * attempt starts from step 1, and prints "done" at the end.
 *
 *   fb-test-rank [--steps N] [--sleep-ms M] [--spawn-child] [--ignore-term]
 *                [--exit-code C] [--abort-after-finalize RANK]
 *                [--init-sleep-ms M]
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <firebreak/firebreak.h>

int main(int argc, char **argv)
{
    long steps = 20, sleep_ms = 20, exit_code = 0, init_sleep_ms = 0;
    int spawn = 0, ignore_term = 0, abort_rank = -1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--steps") && i + 1 < argc)
            steps = atol(argv[++i]);
        else if (!strcmp(argv[i], "--sleep-ms") && i + 1 < argc)
            sleep_ms = atol(argv[++i]);
        else if (!strcmp(argv[i], "--init-sleep-ms") && i + 1 < argc)
            init_sleep_ms = atol(argv[++i]);
        else if (!strcmp(argv[i], "--exit-code") && i + 1 < argc)
            exit_code = atol(argv[++i]);
        else if (!strcmp(argv[i], "--spawn-child"))
            spawn = 1;
        else if (!strcmp(argv[i], "--ignore-term"))
            ignore_term = 1;
        else if (!strcmp(argv[i], "--abort-after-finalize") && i + 1 < argc)
            abort_rank = atoi(argv[++i]);
    }
    if (ignore_term)
        signal(SIGTERM, SIG_IGN);
    int rc = fb_init();
    if (rc)
        fprintf(stderr, "fb_init: %s\n", fb_strerror(rc));
    printf("rank %d of %d, attempt %d, attached=%d\n", fb_rank(), fb_world_size(),
           fb_restart_count(), fb_attached());
    fflush(stdout);
    if (spawn) {
        pid_t pid = fork();
        if (pid == 0) {
            setsid();
            pid_t g = fork();
            if (g == 0) {
                const char *dir = fb_run_dir();
                if (dir) {
                    char path[4096];
                    snprintf(path, sizeof path, "%s/child.%d.%d", dir, fb_rank(),
                             fb_restart_count());
                    FILE *f = fopen(path, "w");
                    if (f) {
                        fprintf(f, "%d\n", (int)getpid());
                        fclose(f);
                    }
                }
                for (;;)
                    pause();
            }
            _exit(0);
        }
    }
    /* Long start-up work before the first step (start-up timeout tests). */
    struct timespec init = {init_sleep_ms / 1000, (init_sleep_ms % 1000) * 1000000L};
    nanosleep(&init, NULL);
    struct timespec ts = {sleep_ms / 1000, (sleep_ms % 1000) * 1000000L};
    for (long s = 1; s <= steps; s++) {
        nanosleep(&ts, NULL);
        fb_step((uint64_t)s);
    }
    printf("done rank %d\n", fb_rank());
    fb_finalize();
    if (fb_rank() == abort_rank)
        abort(); /* a crash in exit handlers, after a clean finalize */
    return (int)exit_code;
}
