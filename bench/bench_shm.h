/*
 * bench_shm.h -- a benchmark's directories in /dev/shm, never left behind:
 * removed at exit and on SIGTERM / SIGINT (^C, `timeout`), and those of an
 * earlier run that could not remove them (killed with SIGKILL, as ctest
 * does at a test's timeout) removed by the next run of any benchmark.
 *
 * Every such directory is /dev/shm/fb-bench-NAME.PID (PID the process that
 * made it): bench_shm_sweep() removes each whose PID no longer runs; one
 * whose PID runs (the benchmark's own, or the number reused) is left.
 * bench_shm_keep(path) registers a directory to remove at exit and on
 * those signals (up to 4); bench_shm_disown() forgets them all (in a
 * forked child).  The signal handler calls fb__rm_rf, which is not
 * async-signal-safe in principle: it is the process's last act either way.
 */
#ifndef FB_BENCH_SHM_H
#define FB_BENCH_SHM_H

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "common/util.h"

#define BENCH_SHM_DIR "/dev/shm"
#define BENCH_SHM_PREFIX "fb-bench-"
#define BENCH_SHM_MAX 4

static char bench_shm_paths[BENCH_SHM_MAX][1024];

static inline void bench_shm_remove_all(void)
{
    for (int i = 0; i < BENCH_SHM_MAX; i++)
        if (bench_shm_paths[i][0])
            fb__rm_rf(bench_shm_paths[i]);
}

static inline void bench_shm_on_signal(int sig)
{
    bench_shm_remove_all();
    signal(sig, SIG_DFL);
    raise(sig);
}

/* The PID of a name fb-bench-NAME.PID (PID: up to 9 digits), or 0. */
static inline long bench_shm_pid_of(const char *name)
{
    if (strncmp(name, BENCH_SHM_PREFIX, sizeof BENCH_SHM_PREFIX - 1))
        return 0;
    const char *dot = strrchr(name, '.');
    if (!dot || !dot[1] || strlen(dot + 1) > 9)
        return 0;
    long pid = 0;
    for (const char *p = dot + 1; *p; p++) {
        if (*p < '0' || *p > '9')
            return 0;
        pid = pid * 10 + (*p - '0');
    }
    return pid;
}

static inline void bench_shm_sweep(void)
{
    DIR *d = opendir(BENCH_SHM_DIR);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        long pid = bench_shm_pid_of(e->d_name);
        if (pid <= 0 || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue; /* running, or another user's: not ours to judge */
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", BENCH_SHM_DIR, e->d_name);
        if (fb__rm_rf(p) == 0)
            fprintf(stderr, "removed %s, left by an earlier run (process %ld "
                    "no longer runs)\n", p, pid);
    }
    closedir(d);
}

static inline void bench_shm_keep(const char *path)
{
    static int armed;
    for (int i = 0; i < BENCH_SHM_MAX; i++)
        if (!strcmp(bench_shm_paths[i], path))
            return;
    for (int i = 0; i < BENCH_SHM_MAX; i++)
        if (!bench_shm_paths[i][0]) {
            snprintf(bench_shm_paths[i], sizeof bench_shm_paths[i], "%s", path);
            break;
        }
    if (!armed) {
        armed = 1;
        atexit(bench_shm_remove_all);
        signal(SIGTERM, bench_shm_on_signal);
        signal(SIGINT, bench_shm_on_signal);
    }
}

/* In a forked child: the directories are the parent's to remove. */
static inline void bench_shm_disown(void)
{
    for (int i = 0; i < BENCH_SHM_MAX; i++)
        bench_shm_paths[i][0] = '\0';
}

#endif
