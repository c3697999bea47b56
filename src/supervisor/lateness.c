/*
 * lateness.c -- the supervisor's live straggler check (docs/supervisor.md,
 * "Stragglers").
 *
 * A few times a second, after the watch pass has checked the segments,
 * the rings of the ranks this supervisor maps are fed to the flight
 * recorder's live lateness analysis (src/fr/lateness.c): only entries new
 * since the last pass, at most FEED_BUDGET per rank, so a pass costs what
 * the job did since the last one.  The rule (fb__fr_late_judge) decides;
 * this file records what it decided:
 *
 *   - a rank newly named: an incident of kind "straggler" (once per rank
 *     and attempt) and a warning on the console; the job goes on;
 *   - a rank no longer late: an event "straggler_end";
 *   - every LATE_EVENT_NS: events "lateness" (the worst rank and every
 *     flagged one), which the report draws over time;
 *   - every PROM_NS: run_dir/lateness.prom, one series per rank in
 *     Prometheus' text format (for node_exporter's textfile collector).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "fr/fr.h"
#include "supervisor/sup.h"

#define PASS_NS 250000000ull         /* at most 4 passes a second         */
#define LATE_EVENT_NS 10000000000ull /* lateness events every 10 s        */
#define PROM_NS 5000000000ull        /* lateness.prom every 5 s           */
#define FEED_BUDGET 4096u            /* entries per rank and pass         */
#define MAX_EVENTS 8                 /* lateness events per interval      */

static const char *const on_straggler_names[FB_ON_STRAGGLER_COUNT_] = {
    [FB_ON_STRAGGLER_WARN] = "warn",
    [FB_ON_STRAGGLER_OFF] = "off",
};

const char *fb__sup_on_straggler_name(fb__on_straggler v)
{
    return (int)v >= 0 && v < FB_ON_STRAGGLER_COUNT_ ? on_straggler_names[v] : "unknown";
}

int fb__sup_on_straggler_from_name(const char *name)
{
    for (int i = 0; i < FB_ON_STRAGGLER_COUNT_; i++)
        if (name && !strcmp(name, on_straggler_names[i]))
            return i;
    return -1;
}

static void describe(char *buf, size_t size, int rank, const fb__fr_late_window *w)
{
    snprintf(buf, size, "rank %d late by %.1f ms on average, last to arrive in "
             "%u of the last %u collectives", rank, w->mean_s * 1e3, w->last, w->n);
}

/* An event "lateness": rank's window now (value_ms its mean lateness,
 * code the collectives it reached last, bytes those in the window). */
static void sample_event(fb__sup *s, int rank, const fb__fr_late_window *w, double now)
{
    char what[200];
    describe(what, sizeof what, rank, w);
    fb__journal_event ev = {.attempt_id = s->attempt_id, .time = now, .rank = rank,
                            .kind = "lateness", .step = s->max_step,
                            .code = (int)w->last, .bytes = w->n,
                            .value_ms = w->mean_s * 1e3, .detail = what};
    fb__journal_add_event(s->j, &ev);
}

static void named(fb__sup *s, int rank, const fb__fr_late_window *w, double step_s)
{
    double now = fb__wall_s();
    char detail[512], what[200];
    describe(what, sizeof what, rank, w);
    if (s->late_warned[rank]) { /* named again after it ended: an event */
        fb__journal_event ev = {.attempt_id = s->attempt_id, .time = now,
                                .rank = rank, .kind = "straggler", .step = s->max_step,
                                .value_ms = w->mean_s * 1e3, .detail = what};
        fb__journal_add_event(s->j, &ev);
        fb__sup_log(s, "straggler again: %s", what);
        return;
    }
    s->late_warned[rank] = 1;
    sample_event(s, rank, w, now); /* the window that named it */
    char step[48] = "step time unknown";
    if (step_s > 0)
        snprintf(step, sizeof step, "step time %.1f ms", step_s * 1e3);
    snprintf(detail, sizeof detail, "%s (%s); the job goes on (--on-straggler "
             "warn)", what, step);
    fb__journal_incident inc = {
        .attempt_id = s->attempt_id, .kind = "straggler", .occurred_at = now,
        .detected_at = now, .rank = rank, .node = s->hostname, .phase = "train",
        .step = s->max_step, .lost_s = -1, .detail = detail,
        .injected = s->ranks[rank].injected[0] ? s->ranks[rank].injected : NULL,
    };
    fb__journal_add_incident(s->j, &inc, NULL);
    fb__sup_warn(s, "straggler: %s on %s", what, s->hostname);
}

static void ended(fb__sup *s, int rank, const fb__fr_late_window *w)
{
    char what[200];
    describe(what, sizeof what, rank, w);
    fb__journal_event ev = {.attempt_id = s->attempt_id, .time = fb__wall_s(),
                            .rank = rank, .kind = "straggler_end", .step = s->max_step,
                            .value_ms = w->mean_s * 1e3, .detail = what};
    fb__journal_add_event(s->j, &ev);
    fb__sup_log(s, "no longer a straggler: %s", what);
}

/* Events "lateness": the worst rank, then flagged ones, MAX_EVENTS at most. */
static void lateness_events(fb__sup *s)
{
    int worst = -1;
    fb__fr_late_window w, ww = {0};
    for (int r = 0; r < s->world; r++)
        if (!fb__fr_late_get(s->late, r, &w, NULL) && w.n &&
            (worst < 0 || w.mean_s > ww.mean_s)) {
            worst = r;
            ww = w;
        }
    if (worst < 0)
        return;
    double now = fb__wall_s();
    sample_event(s, worst, &ww, now);
    int n = 1, flagged;
    for (int r = 0; r < s->world && n < MAX_EVENTS; r++)
        if (r != worst && !fb__fr_late_get(s->late, r, &w, &flagged) && flagged) {
            sample_event(s, r, &w, now);
            n++;
        }
}

/* Append to a buffer of cap bytes; a line that does not fit marks it
 * cut (*len = cap) and nothing more is added. */
static void put(char *buf, size_t cap, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void put(char *buf, size_t cap, size_t *len, const char *fmt, ...)
{
    if (*len >= cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + *len, cap - *len, fmt, ap);
    va_end(ap);
    *len = n < 0 || (size_t)n >= cap - *len ? cap : *len + (size_t)n;
}

/* run_dir/lateness.prom, written whole and renamed into place; not
 * fsynced: this is the detection loop, and a slow run-directory file
 * system (NFS, Lustre) would delay the hang check by its sync time.  The
 * next write, 5 s on, replaces a file a crash lost. */
static void write_prom(fb__sup *s)
{
    /* a series line is at most ~130 bytes (a 48-byte job id) */
    size_t cap = 2048 + (size_t)s->world * 3 * 192, len = 0;
    char *buf = malloc(cap);
    if (!buf)
        return;
    static const char *const metric[3][2] = {
        {"firebreak_rank_lateness_seconds", "Mean lateness of the rank at the "
         "job's collectives over the window (its arrival minus the mean arrival "
         "of the others)"},
        {"firebreak_rank_last_arrival_ratio", "Share of the window's collectives "
         "the rank reached last"},
        {"firebreak_rank_lateness_straggler", "1 while the supervisor names the "
         "rank a straggler"},
    };
    for (int m = 0; m < 3; m++) {
        put(buf, cap, &len, "# HELP %s %s.\n# TYPE %s gauge\n", metric[m][0],
            metric[m][1], metric[m][0]);
        for (int r = 0; r < s->world; r++) {
            fb__fr_late_window w;
            int flagged;
            if (fb__fr_late_get(s->late, r, &w, &flagged) || !w.n)
                continue;
            double v = m == 0 ? w.mean_s : m == 1 ? (double)w.last / w.n : flagged;
            put(buf, cap, &len, "%s{job_id=\"%s\",rank=\"%d\"} %.6g\n",
                metric[m][0], s->job_id, r, v);
        }
    }
    if (len >= cap) { /* cannot happen with the bound above: write nothing */
        free(buf);
        return;
    }
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/lateness.prom", s->run_dir) < (int)sizeof path)
        fb__write_file_replace(path, buf, len);
    free(buf);
}

static int start(fb__sup *s)
{
    if (s->late_off)
        return -1;
    int rc = fb__fr_late_new(&s->late, s->world, NULL);
    if (!rc && !(s->late_warned = calloc((size_t)s->world, 1)))
        rc = -ENOMEM;
    if (rc) {
        fb__sup_warn(s, "no live lateness analysis for this run: %s", fb_strerror(rc));
        fb__sup_lateness_end(s);
        s->late_off = 1;
        return -1;
    }
    return 0;
}

void fb__sup_lateness(fb__sup *s, uint64_t now)
{
    /* slurm: most ranks' rings are on other nodes, where no whole-job
     * collective could be assembled from; not analyzed (yet) */
    if (s->o->on_straggler == FB_ON_STRAGGLER_OFF || s->world < 2 || s->slurm ||
        now - s->late_pass_ns < PASS_NS || (!s->late && start(s)))
        return;
    s->late_pass_ns = now;
    double step_sum = 0;
    int nstep = 0;
    for (int r = 0; r < s->world; r++) {
        fb__sup_rank *rk = &s->ranks[r];
        if (!rk->seg || rk->seg_corrupt)
            continue;
        fb__fr_late_feed_seg(s->late, r, rk->seg, FEED_BUDGET);
        fb__seg_header *h = fb__seg_hdr(rk->seg);
        uint64_t ewma = atomic_load_explicit(&h->step_ewma_ns, memory_order_relaxed);
        if (ewma && ewma < 3600000000000ull) {
            step_sum += (double)ewma / 1e9;
            nstep++;
        }
    }
    double step_s = nstep ? step_sum / nstep : 0;
    int changed[16];
    int n = fb__fr_late_update(s->late, step_s, changed, 16);
    for (int i = 0; i < n; i++) {
        fb__fr_late_window w;
        int flagged = 0;
        fb__fr_late_get(s->late, changed[i], &w, &flagged);
        if (flagged)
            named(s, changed[i], &w, step_s);
        else
            ended(s, changed[i], &w);
    }
    if (now - s->late_event_ns >= LATE_EVENT_NS) {
        if (s->late_event_ns)
            lateness_events(s);
        s->late_event_ns = now;
    }
    if (now - s->late_prom_ns >= PROM_NS) {
        write_prom(s);
        s->late_prom_ns = now;
    }
}

void fb__sup_lateness_end(fb__sup *s)
{
    if (s->late) {
        lateness_events(s); /* where the attempt ended */
        write_prom(s);
    }
    fb__fr_late_free(s->late);
    s->late = NULL;
    free(s->late_warned);
    s->late_warned = NULL;
    s->late_pass_ns = s->late_event_ns = s->late_prom_ns = 0;
}
