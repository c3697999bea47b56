/*
 * tee.c -- ranks' output on the console as well as in their logs
 * (--console-ranks, torchrun's --local-ranks-filter and --tee).
 *
 * A rank chosen for the console writes its stdout and stderr into one
 * pipe; the supervisor's event loop reads it (non-blocking) and writes
 *   - every byte, as read, to logs/rank-<R>.log (a regular file: the log
 *     is never short of a byte the rank wrote);
 *   - every line, as "[rank<R>]: <line>" with control bytes made harmless
 *     (fb__safe_text), to the supervisor's stderr, but only when stderr
 *     can take it now: a console that does not keep up (a full pipe, a
 *     terminal on hold) loses lines, counted and said once it drains,
 *     rather than stall the loop and, behind it, the ranks' own writes.
 * A line longer than FB__SUP_TEE_LINE bytes is cut with a marker on the
 * console (the log has it whole).  Ranks not chosen write straight to
 * their log, as before.  The pipe is drained when its rank's end is
 * noticed (so its last lines are in the log before the incident quotes
 * them) and when the attempt closes.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "common/util.h"
#include "supervisor/sup.h"

/* "all", "none" or a list of ranks and ranges: "0", "0,3", "0-3,7". */
int fb__sup_rank_spec_valid(const char *spec)
{
    return fb__sup_rank_in_spec(spec, -1) >= 0;
}

int fb__sup_rank_in_spec(const char *spec, int rank)
{
    if (!spec || !strcmp(spec, "none"))
        return 0;
    if (!strcmp(spec, "all"))
        return 1;
    int hit = 0;
    const char *p = spec;
    for (;;) {
        long lo = 0, hi;
        if (*p < '0' || *p > '9')
            return -1;
        for (; *p >= '0' && *p <= '9'; p++)
            if ((lo = lo * 10 + (*p - '0')) > 1000000)
                return -1;
        hi = lo;
        if (*p == '-') {
            p++;
            if (*p < '0' || *p > '9')
                return -1;
            for (hi = 0; *p >= '0' && *p <= '9'; p++)
                if ((hi = hi * 10 + (*p - '0')) > 1000000)
                    return -1;
            if (hi < lo)
                return -1;
        }
        if (rank >= lo && rank <= hi)
            hit = 1;
        if (!*p)
            return hit;
        if (*p++ != ',')
            return -1;
    }
}

int fb__sup_tee_open(int rank, int log_fd, fb__sup_tee **out, int *write_fd)
{
    fb__sup_tee *t = calloc(1, sizeof *t);
    int p[2];
    if (!t)
        return -ENOMEM;
    if (pipe2(p, O_CLOEXEC)) {
        int e = -errno;
        free(t);
        return e;
    }
    t->log_fd = fcntl(log_fd, F_DUPFD_CLOEXEC, 3);
    if (t->log_fd < 0) {
        int e = -errno;
        close(p[0]);
        close(p[1]);
        free(t);
        return e;
    }
    fcntl(p[0], F_SETFL, O_NONBLOCK);
    t->fd = p[0];
    t->rank = rank;
    *out = t;
    *write_fd = p[1];
    return 0;
}

_Static_assert(FB__SUP_TEE_OUT <= PIPE_BUF, "a console line is written whole");

typedef struct {
    fb__sup *s;
    const fb__sup_tee *t;
} tee_ctx;

/* Room left in a console pipe for the supervisor's own lines (its log
 * lines and status are written blocking, as they always were): rank
 * output never fills the pipe past this, so that a console read late
 * does not stop the supervisor in one of its own writes, and, behind
 * it, the ranks. */
#define CONSOLE_RESERVE (16 * 1024)

/* Whether `need` bytes (at most PIPE_BUF) can go to stderr now, without
 * blocking: a pipe then takes them whole. */
static int console_has_room(size_t need)
{
    struct pollfd pf = {.fd = STDERR_FILENO, .events = POLLOUT};
    if (poll(&pf, 1, 0) != 1 || !(pf.revents & POLLOUT))
        return 0;
    int cap = fcntl(STDERR_FILENO, F_GETPIPE_SZ);
    int queued = 0;
    if (cap > 0 && ioctl(STDERR_FILENO, FIONREAD, &queued) == 0 &&
        (size_t)queued + need + CONSOLE_RESERVE > (size_t)cap)
        return 0;
    return 1;
}

size_t fb__sup_tee_format(char *out, size_t size, const char *head, int rank,
                          const char *line, size_t len, int cut)
{
    const char *mark = cut ? " [firebreak: line cut; the log has it whole]" : "";
    size_t mlen = strlen(mark);
    char raw[FB__SUP_TEE_LINE + 1];
    if (len > FB__SUP_TEE_LINE)
        len = FB__SUP_TEE_LINE;
    memcpy(raw, line, len);
    for (size_t i = 0; i < len; i++)
        if (!raw[i])
            raw[i] = '\x01'; /* shown as '?', not the end of the line */
    raw[len] = '\0';
    int n = snprintf(out, size, "%s[rank%d]: ", head, rank);
    if (n < 0 || (size_t)n + mlen + 2 > size) {
        if (size)
            out[0] = '\0';
        return 0;
    }
    size_t used = (size_t)n;
    fb__safe_text(out + used, size - used - mlen - 1, raw);
    used += strlen(out + used);
    used += (size_t)snprintf(out + used, size - used, "%s\n", mark);
    return used;
}

/* One line (len bytes, no newline) to the console, or counted as lost. */
static void console_line(void *ctx, const char *line, size_t len, int cut)
{
    fb__sup *s = ((tee_ctx *)ctx)->s;
    const fb__sup_tee *t = ((tee_ctx *)ctx)->t;
    char head[192];
    snprintf(head, sizeof head, "%s", s->status_on_tty ? "\r\033[K" : "");
    if (s->tee_dropped)
        snprintf(head + strlen(head), sizeof head - strlen(head),
                 "[firebreak: %llu line%s of rank output not shown: "
                 "the console did not keep up; the logs have them]\n",
                 (unsigned long long)s->tee_dropped, s->tee_dropped == 1 ? "" : "s");
    char out[FB__SUP_TEE_OUT];
    size_t used = fb__sup_tee_format(out, sizeof out, head, t->rank, line, len, cut);
    if (!console_has_room(used)) {
        s->tee_dropped++;
        s->tee_dropped_total++;
        return;
    }
    if (write(STDERR_FILENO, out, used) < 0) {
        s->tee_dropped++;
        s->tee_dropped_total++;
        return;
    }
    s->tee_dropped = 0;
    if (s->status_on_tty)
        s->last_status_ns = 0; /* redraw the status line */
}

void fb__sup_tee_split(fb__sup_tee *t, const char *buf, size_t n, fb__sup_tee_line_fn *fn,
                       void *ctx)
{
    for (size_t i = 0; i < n; i++) {
        char c = buf[i];
        if (c == '\n') {
            if (!t->cutting)
                fn(ctx, t->line, t->len, 0);
            t->len = 0;
            t->cutting = 0;
            continue;
        }
        if (t->cutting)
            continue;
        if (t->len == FB__SUP_TEE_LINE) {
            fn(ctx, t->line, t->len, 1);
            t->len = 0;
            t->cutting = 1;
            continue;
        }
        t->line[t->len++] = c;
    }
}

void fb__sup_tee_end(fb__sup_tee *t, fb__sup_tee_line_fn *fn, void *ctx)
{
    if (t->len && !t->cutting)
        fn(ctx, t->line, t->len, 0);
    t->len = 0;
    t->cutting = 0;
}

#define TEE_READ_MAX (64 * 1024)

int fb__sup_tee_read(fb__sup *s, fb__sup_tee *t, size_t max_bytes)
{
    char buf[16384];
    size_t got = 0;
    tee_ctx c = {s, t};
    while (t && t->fd >= 0 && got < max_bytes) {
        ssize_t n = read(t->fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return 0;
        if (n <= 0) { /* EOF (every writer gone) or an error */
            fb__sup_tee_end(t, console_line, &c);
            close(t->fd);
            t->fd = -1;
            return 0;
        }
        got += (size_t)n;
        int wrc = fb__write_all(t->log_fd, buf, (size_t)n);
        if (wrc && !t->log_failed) {
            t->log_failed = 1;
            fb__sup_log(s, "rank %d's log cannot be written: %s", t->rank,
                        strerror(wrc < 0 ? -wrc : EIO));
        }
        fb__sup_tee_split(t, buf, (size_t)n, console_line, &c);
    }
    return 0;
}

void fb__sup_tee_poll_read(fb__sup *s, fb__sup_tee *t)
{
    fb__sup_tee_read(s, t, TEE_READ_MAX);
}

void fb__sup_tee_close(fb__sup *s, fb__sup_tee *t)
{
    if (!t)
        return;
    /* Everything the rank wrote that is still in the pipe (bounded: a
     * process that escaped and keeps writing does not hold us here). */
    fb__sup_tee_read(s, t, 64u << 20);
    if (t->fd >= 0) {
        tee_ctx c = {s, t};
        fb__sup_tee_end(t, console_line, &c);
        close(t->fd);
    }
    close(t->log_fd);
    free(t);
}
