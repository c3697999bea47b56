/*
 * rundir.c -- the layout of a run directory (see rundir.h).
 */
#include "common/rundir.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "common/util.h"

int fb__rundir_path(char *buf, size_t size, const char *run, fb__rundir_part part,
                    long attempt)
{
    const char *r = run ? run : "", *sl = run ? "/" : "";
    switch (part) {
    case FB__RUNDIR_JOURNAL:
        return fb__fmt(buf, size, "%s%sjournal.sqlite", r, sl);
    case FB__RUNDIR_CKPT:
        return fb__fmt(buf, size, "%s%scheckpoints", r, sl);
    case FB__RUNDIR_LOGS:
        return fb__fmt(buf, size, "%s%slogs", r, sl);
    case FB__RUNDIR_MPIRUN_LOG:
        return fb__fmt(buf, size, "%s%slogs/mpirun.log", r, sl);
    case FB__RUNDIR_MPIRUN_OUT:
        return fb__fmt(buf, size, "%s%slogs/mpirun-attempt-%ld", r, sl, attempt);
    case FB__RUNDIR_SLURM_LOGS:
        return fb__fmt(buf, size, "%s%slogs/slurm-attempt-%ld", r, sl, attempt);
    case FB__RUNDIR_FR:
        return fb__fmt(buf, size, "%s%sfr", r, sl);
    case FB__RUNDIR_FR_ATTEMPT:
    case FB__RUNDIR_FR_TORCH: {
        char fr[PATH_MAX];
        int rc = fb__fmt(fr, sizeof fr, "%s%sfr", r, sl);
        return rc ? rc : fb__rundir_fr_path(buf, size, fr, part, attempt);
    }
    }
    return -EINVAL;
}

int fb__rundir_fr_path(char *buf, size_t size, const char *fr, fb__rundir_part part,
                       long attempt)
{
    if (part == FB__RUNDIR_FR_ATTEMPT)
        return fb__fmt(buf, size, "%s/attempt-%ld", fr, attempt);
    if (part == FB__RUNDIR_FR_TORCH)
        return fb__fmt(buf, size, "%s/torch/attempt-%ld", fr, attempt);
    return -EINVAL;
}

int fb__rundir_has(const char *path, fb__rundir_part part, long attempt, char *buf,
                   size_t size)
{
    struct stat st;
    if (fb__rundir_path(buf, size, path, part, attempt) || stat(buf, &st))
        return 0;
    int file = part == FB__RUNDIR_JOURNAL || part == FB__RUNDIR_MPIRUN_LOG;
    return file ? S_ISREG(st.st_mode) : S_ISDIR(st.st_mode);
}

long fb__rundir_newest_attempt(const char *dir, int *count)
{
    *count = 0;
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    long hi = -1;
    struct stat st;
    for (struct dirent *e; (e = readdir(d));) {
        char *end;
        /* the name first: a directory of 16,384 dumps costs no stat */
        if (strncmp(e->d_name, "attempt-", 8) || e->d_name[8] < '0' || e->d_name[8] > '9')
            continue;
        errno = 0;
        long k = strtol(e->d_name + 8, &end, 10);
        if (*end || errno || fstatat(dirfd(d), e->d_name, &st, 0) || !S_ISDIR(st.st_mode))
            continue;
        ++*count;
        hi = k > hi ? k : hi;
    }
    closedir(d);
    return hi;
}

/* The run directories right below DIR (at most RUNS_BELOW_MAX entries
 * looked at): how many, and the one whose journal changed last into
 * newest. */
#define RUNS_BELOW_MAX 10000
static int runs_below(const char *dir, char *newest, size_t size)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int runs = 0, seen = 0;
    struct timespec best = {0, 0};
    struct dirent *e;
    while ((e = readdir(d)) && seen++ < RUNS_BELOW_MAX) {
        char run[PATH_MAX], p[PATH_MAX];
        struct stat st;
        if (e->d_name[0] == '.' || fb__fmt(run, sizeof run, "%s/%s", dir, e->d_name) ||
            fb__rundir_path(p, sizeof p, run, FB__RUNDIR_JOURNAL, 0) || stat(p, &st) ||
            !S_ISREG(st.st_mode))
            continue;
        if (!runs++ || st.st_mtim.tv_sec > best.tv_sec ||
            (st.st_mtim.tv_sec == best.tv_sec && st.st_mtim.tv_nsec > best.tv_nsec)) {
            best = st.st_mtim;
            snprintf(newest, size, "%s", run);
        }
    }
    closedir(d);
    return runs;
}

void fb__rundir_where_find(const char *path, fb__rundir_where *w)
{
    memset(w, 0, sizeof *w);
    snprintf(w->below, sizeof w->below, "%s", path);
    if ((w->runs = runs_below(path, w->newest, sizeof w->newest)) > 0)
        return;
    if (!fb__fmt(w->below, sizeof w->below, "%s/runs", path) &&
        (w->runs = runs_below(w->below, w->newest, sizeof w->newest)) > 0)
        return;
    if (!fb__rundir_enclosing(path, w->inside, sizeof w->inside))
        w->inside[0] = '\0';
}

int fb__rundir_where_say(const fb__rundir_where *w, const char *path, char *buf,
                         size_t size)
{
    char (*safe)[PATH_MAX] = malloc(2 * sizeof *safe);
    int found = 0;
    buf[0] = '\0';
    if (safe) {
        if (w->runs > 0) {
            snprintf(buf, size, "%s holds %d run director%s (the newest %s)",
                     strcmp(w->below, path) ? fb__safe_text(safe[0], PATH_MAX, w->below)
                                            : "it",
                     w->runs, w->runs == 1 ? "y" : "ies",
                     fb__safe_text(safe[1], PATH_MAX, w->newest));
            found = FB__RUNDIR_WHERE_BELOW;
        } else if (w->inside[0]) {
            snprintf(buf, size, "it is inside the run directory %s",
                     fb__safe_text(safe[0], PATH_MAX, w->inside));
            found = FB__RUNDIR_WHERE_INSIDE;
        }
    }
    free(safe);
    return found;
}

int fb__rundir_enclosing(const char *path, char *buf, size_t size)
{
    char abs[PATH_MAX], journal[PATH_MAX];
    if (!realpath(path, abs))
        return 0;
    for (char *slash; (slash = strrchr(abs, '/')) && slash != abs;) {
        *slash = '\0'; /* "/" is in no run */
        if (fb__rundir_has(abs, FB__RUNDIR_JOURNAL, 0, journal, sizeof journal))
            return !fb__fmt(buf, size, "%s", abs);
    }
    return 0;
}
