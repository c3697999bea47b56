/*
 * status.c -- what the supervisor tells the person watching: a live
 * one-line status on a terminal, plain timestamped log lines otherwise.
 * Everything goes to stderr; stdout is kept for --json.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/util.h"
#include "supervisor/sup.h"

void fb__sup_log(fb__sup *s, const char *fmt, ...)
{
    if (s->o->quiet)
        return;
    if (s->status_on_tty)
        fputs("\r\033[K", stderr);
    double t = (double)(fb__now_ns() - s->run_start_ns) / 1e9;
    fprintf(stderr, "[firebreak %7.2fs] ", t);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    if (s->status_on_tty)
        s->last_status_ns = 0; /* redraw the status line under it */
}

void fb__sup_warn(fb__sup *s, const char *fmt, ...)
{
    if (s->status_on_tty)
        fputs("\r\033[K", stderr);
    fputs("firebreak run: ", stderr);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    if (s->status_on_tty)
        s->last_status_ns = 0;
}

void fb__sup_status(fb__sup *s, uint64_t now, int force)
{
    if (s->o->quiet)
        return;
    uint64_t period = s->status_on_tty ? 500000000ull : 10000000000ull;
    if (!force && s->last_status_ns && now - s->last_status_ns < period)
        return;
    s->last_status_ns = now;
    double wall = (double)(now - s->run_start_ns) / 1e9;
    double useful = s->useful_s;
    if (s->attempt_ready_ns && now > s->attempt_ready_ns)
        useful += (double)(now - s->attempt_ready_ns) / 1e9;
    double rate = 0;
    int attached = 0;
    for (int r = 0; r < s->world; r++) {
        if (!s->ranks[r].seg)
            continue;
        attached++;
        fb__seg_header *h = fb__seg_hdr(s->ranks[r].seg);
        uint64_t ewma = atomic_load_explicit(&h->step_ewma_ns, memory_order_relaxed);
        if (ewma && r == 0)
            rate = 1e9 / (double)ewma;
    }
    char line[256], step[24] = "-"; /* none taken yet */
    if (s->max_step >= 0)
        snprintf(step, sizeof step, "%lld", (long long)s->max_step);
    snprintf(line, sizeof line,
             "attempt %d | step %s | %.1f steps/s | restarts %d | ETTR %.0f%% | "
             "%d/%d ranks attached | %.0fs",
             s->attempt, step, rate, s->res->restarts,
             wall > 0 ? 100.0 * useful / wall : 0.0, attached, s->world, wall);
    if (s->status_on_tty)
        fprintf(stderr, "\r\033[K%s", line);
    else /* stamped like the log lines (now may be a few ms old) */
        fprintf(stderr, "[firebreak %7.2fs] status: %s\n",
                (double)(fb__now_ns() - s->run_start_ns) / 1e9, line);
    fflush(stderr);
}
