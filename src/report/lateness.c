/*
 * lateness.c -- the report's "lateness" section: what the supervisor's
 * live straggler check recorded (docs/supervisor.md "Stragglers",
 * docs/report.md "Lateness").
 *
 * The supervisor journals, in the `event` table, a rank's window every
 * 10 s ("lateness": value_ms the mean lateness, code the collectives it
 * reached last, bytes the collectives in the window), "straggler_end" when
 * a named rank is on time again and "straggler" when one is named again;
 * the first naming is an incident of kind "straggler".  They are read
 * here into one list by time; out_html.c draws it.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/jsonw.h"
#include "common/util.h"
#include "journal/journal.h"
#include "report/report.h"

static const char *const kind_names[FB__LATE_KIND_COUNT_] = {
    [FB__LATE_SAMPLE] = "lateness",
    [FB__LATE_NAMED] = "straggler",
    [FB__LATE_ENDED] = "straggler_end",
};

const char *fb__report_late_kind_name(fb__report_late_kind k)
{
    return (int)k >= 0 && k < FB__LATE_KIND_COUNT_ ? kind_names[k] : "unknown";
}

static int kind_of(const char *name)
{
    for (int k = 0; name && k < FB__LATE_KIND_COUNT_; k++)
        if (!strcmp(name, kind_names[k]))
            return k;
    return -1;
}

/* Room for one more row: 0, 1 when the list is full (counted only), or
 * -ENOMEM. */
static int room(fb__report_run *run, size_t *cap)
{
    run->late_total++;
    if (run->nlate >= FB__REPORT_LATE_MAX)
        return 1;
    if (run->nlate < *cap)
        return 0;
    size_t n = *cap ? *cap * 2 : 64;
    fb__report_late *p = realloc(run->late, n * sizeof *p);
    if (!p)
        return -ENOMEM;
    run->late = p;
    *cap = n;
    return 0;
}

static int by_time(const void *a, const void *b)
{
    const fb__report_late *x = a, *y = b;
    if (x->time != y->time)
        return x->time < y->time ? -1 : 1;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

int fb__report_load_lateness(fb__journal_ro *jr, fb__report_run *run)
{
    size_t cap = 0;
    int rc = 0, r;
    for (size_t i = 0; i < run->nincidents; i++) {
        const fb__report_incident *in = &run->incidents[i];
        if (strcmp(in->kind, "straggler"))
            continue;
        if ((r = room(run, &cap)) < 0)
            return r;
        if (r)
            continue;
        run->late[run->nlate++] = (fb__report_late){
            .time = in->detected_at, .rank = in->rank, .kind = FB__LATE_NAMED,
            .attempt = in->attempt, .step = in->step, .late_ms = NAN,
            .last = -1, .collectives = -1};
    }
    fb__journal_cursor *c;
    fb__journal_event_row e;
    if ((rc = fb__journal_rows(jr, FB__JOURNAL_EVENT, &c)))
        return rc;
    while ((rc = fb__journal_next_event(c, &e)) == 1) {
        int k = kind_of(e.kind), a = fb__report_attempt_index(run, e.attempt_id);
        if (k < 0 || e.rank < 0 || !isfinite(e.time) ||
            !fb__report_row_is_ours(run, a))
            continue; /* not a lateness row, or an earlier run's */
        if ((r = room(run, &cap)) < 0) {
            rc = r;
            break;
        }
        if (r)
            continue;
        fb__report_late *l = &run->late[run->nlate++];
        *l = (fb__report_late){.time = e.time, .rank = e.rank,
                               .kind = (fb__report_late_kind)k,
                               .attempt = a,
                               .step = e.step, .late_ms = NAN, .last = -1,
                               .collectives = -1};
        if (e.value_ms >= -1e9 && e.value_ms <= 1e9)
            l->late_ms = e.value_ms;
        if (k == FB__LATE_SAMPLE && e.bytes > 0 && e.code >= 0 && e.code <= e.bytes) {
            l->last = e.code;
            l->collectives = e.bytes;
        }
    }
    fb__journal_rows_close(c);
    if (rc < 0)
        return rc;
    if (run->nlate > 1)
        qsort(run->late, run->nlate, sizeof *run->late, by_time);
    return 0;
}

void fb__report_lateness_text(FILE *f, const fb__report_run *run)
{
    if (!run->late_total)
        return;
    fprintf(f, "\nlateness at collectives (supervisor's live check; %zu row%s",
            run->nlate, run->nlate == 1 ? "" : "s");
    if (run->late_total > run->nlate)
        fprintf(f, " of %zu", run->late_total);
    fprintf(f, ")\n  %10s  %-14s %6s %8s %12s  %s\n", "at s", "kind", "rank",
            "step", "late ms", "last in");
    for (size_t i = 0; i < run->nlate; i++) {
        const fb__report_late *l = &run->late[i];
        char ms[32] = "-", last[48] = "-";
        if (!isnan(l->late_ms))
            snprintf(ms, sizeof ms, "%.1f", l->late_ms);
        if (l->collectives > 0)
            snprintf(last, sizeof last, "%lld of %lld", (long long)l->last,
                     (long long)l->collectives);
        fprintf(f, "  %10.3f  %-14s %6d %8lld %12s  %s\n", l->time - run->started_at,
                fb__report_late_kind_name(l->kind), l->rank, (long long)l->step,
                ms, last);
    }
}

void fb__report_lateness_json(fb__jsonw *w, const fb__report_run *run)
{
    fb__jsonw_kint(w, "lateness_total", (long long)run->late_total);
    fb__jsonw_key(w, "lateness");
    fb__jsonw_arr_begin(w);
    for (size_t i = 0; i < run->nlate; i++) {
        const fb__report_late *l = &run->late[i];
        fb__jsonw_obj_begin(w);
        fb__jsonw_kdouble(w, "at_s", round((l->time - run->started_at) * 1e6) / 1e6);
        fb__jsonw_kstr(w, "kind", fb__report_late_kind_name(l->kind));
        fb__jsonw_kint(w, "rank", l->rank);
        fb__jsonw_kint(w, "attempt", l->attempt);
        fb__jsonw_kint(w, "step", l->step);
        fb__jsonw_key(w, "late_ms");
        if (isnan(l->late_ms))
            fb__jsonw_null(w);
        else
            fb__jsonw_double(w, round(l->late_ms * 1e3) / 1e3);
        fb__jsonw_key(w, "last");
        if (l->collectives > 0)
            fb__jsonw_int(w, l->last);
        else
            fb__jsonw_null(w);
        fb__jsonw_key(w, "collectives");
        if (l->collectives > 0)
            fb__jsonw_int(w, l->collectives);
        else
            fb__jsonw_null(w);
        fb__jsonw_obj_end(w);
    }
    fb__jsonw_arr_end(w);
}
