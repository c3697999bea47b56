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
