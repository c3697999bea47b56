/*
 * bench_result.h -- one line per target into the results file that
 * `make bench` ends with (bench/summary.sh prints the table and fails when
 * a target was missed).  The file is $FB_BENCH_RESULTS, set by CMake for
 * every test labelled bench; unset (a benchmark run by hand), nothing is
 * written.  Line: bench, what, measured, baseline, target, met|MISSED,
 * tab-separated; each line is one write(2) with O_APPEND, so benchmarks
 * running side by side cannot interleave their lines.
 */
#ifndef FB_BENCH_RESULT_H
#define FB_BENCH_RESULT_H

#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The command line, first thing in main: -h or --help anywhere prints
 * "usage: USAGE" and ABOUT (what the benchmark measures, against which
 * baseline, and what it leaves) on stdout and exits 0.  bench_bad_usage:
 * WHY and the usage line on stderr, exit 2 -- for an argument a benchmark
 * does not take, so that a mistyped option is never taken for a
 * directory to fill. */
static inline void bench_help(int argc, char **argv, const char *usage,
                              const char *about)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: %s\n%s", usage, about);
            exit(0);
        }
}

static inline void bench_bad_usage(const char *usage, const char *why)
{
    fprintf(stderr, "%s\nusage: %s (--help: what it measures)\n", why, usage);
    exit(2);
}

/* bench_help for a benchmark NAME that takes no arguments: any other
 * argument is refused. */
static inline void bench_help_no_args(int argc, char **argv, const char *name,
                                      const char *about)
{
    bench_help(argc, argv, name, about);
    if (argc > 1) {
        char why[256];
        snprintf(why, sizeof why, "%s: takes no arguments, not \"%.100s\"", name,
                 argv[1]);
        bench_bad_usage(name, why);
    }
}

/* Record one target; returns met, so `ok &= bench_target(...)` reads. */
static inline int bench_target(const char *bench, const char *what,
                               const char *measured, const char *baseline,
                               const char *target, int met)
{
    const char *path = getenv("FB_BENCH_RESULTS");
    if (!path || !*path)
        return met;
    char line[1024];
    int n = snprintf(line, sizeof line, "%s\t%s\t%s\t%s\t%s\t%s\n", bench, what,
                     measured, baseline, target, met ? "met" : "MISSED");
    if (n <= 0 || (size_t)n >= sizeof line)
        return met;
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
        if (write(fd, line, (size_t)n) != n)
            fprintf(stderr, "%s: writing %s failed\n", bench, path);
        close(fd);
    }
    return met;
}

/* snprintf into a caller's buffer, for the measured and baseline texts. */
static inline const char *bench_fmt(char *buf, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline const char *bench_fmt(char *buf, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, size, fmt, ap);
    va_end(ap);
    return buf;
}

#endif
