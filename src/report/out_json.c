/*
 * out_json.c -- `firebreak report --json`: one object on one line
 * (docs/report.md, "JSON output", version FB__REPORT_JSON_VERSION).
 */
#include "report/report.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/jsonw.h"

static void time_obj(fb__jsonw *w, const int64_t us[FB__T_N])
{
    fb__jsonw_key(w, "time_s");
    fb__jsonw_obj_begin(w);
    for (int p = 0; p < FB__T_N; p++)
        fb__jsonw_kdouble(w, fb__report_part_key(p), fb__report_s(us[p]));
    fb__jsonw_obj_end(w);
}

static double ratio(int64_t a, int64_t b)
{
    return b > 0 ? (double)a / (double)b : 0.0;
}

static void incident(fb__jsonw *w, const fb__report_run *run, size_t r,
                     const fb__report_incident *in)
{
    fb__jsonw_obj_begin(w);
    fb__jsonw_kint(w, "run", (long long)r);
    fb__jsonw_kint(w, "id", in->id);
    fb__jsonw_kint(w, "attempt",
                   in->attempt >= 0 ? run->attempts[in->attempt].number : -1);
    fb__jsonw_kstr(w, "kind", in->kind);
    fb__jsonw_kstr(w, "category", in->cls.category);
    fb__jsonw_kstr(w, "component", in->cls.component);
    fb__jsonw_key(w, "rank");
    if (in->rank >= 0)
        fb__jsonw_int(w, in->rank);
    else
        fb__jsonw_null(w);
    fb__jsonw_kstr(w, "node", in->node);
    fb__jsonw_kstr(w, "host", in->host);
    fb__jsonw_key(w, "step");
    if (in->step >= 0)
        fb__jsonw_int(w, in->step);
    else
        fb__jsonw_null(w);
    /* the journal keeps microseconds: drop float noise past them */
    fb__jsonw_key(w, "detect_ms");
    if (in->detect_ms >= 0)
        fb__jsonw_double(w, round(in->detect_ms * 1e3) / 1e3);
    else
        fb__jsonw_null(w);
    double lost = in->lost_acc_s >= 0 ? in->lost_acc_s : in->lost_s;
    fb__jsonw_key(w, "lost_s");
    if (lost >= 0)
        fb__jsonw_double(w, round(lost * 1e6) / 1e6);
    else
        fb__jsonw_null(w);
    fb__jsonw_kbool(w, "ended_attempt", in->ends_attempt);
    fb__jsonw_kstr(w, "evidence", in->cls.evidence);
    fb__jsonw_kstr(w, "decided_by", in->cls.decided_by);
    fb__jsonw_kstr(w, "injected", in->injected);
    /* the category is the one the injected fault imitates */
    fb__jsonw_kbool(w, "injected_cause", in->cls.injected);
    fb__jsonw_key(w, "signal");
    if (in->signal > 0)
        fb__jsonw_int(w, in->signal);
    else
        fb__jsonw_null(w);
    fb__jsonw_key(w, "exit_code");
    if (in->has_exit_code)
        fb__jsonw_int(w, in->exit_code);
    else
        fb__jsonw_null(w);
    fb__jsonw_obj_end(w);
}

static void real_or_null(fb__jsonw *w, const char *key, double v)
{
    fb__jsonw_key(w, key);
    if (isnan(v))
        fb__jsonw_null(w);
    else
        fb__jsonw_double(w, round(v * 1e6) / 1e6);
}

/* "environment": the correlation (null: n/a), "agent_events": the events
 * (time since the run started), "agent_event_counts": by kind. */
static void agent_obj(fb__jsonw *w, const fb__report_run *run)
{
    fb__jsonw_key(w, "environment");
    if (run->nenv) {
        fb__report_envcorr ec;
        fb__report_env_corr(run, &ec);
        fb__jsonw_obj_begin(w);
        fb__jsonw_kint(w, "buckets", FB__REPORT_ENV_BUCKETS);
        real_or_null(w, "r_temp_throughput", ec.r_temp);
        fb__jsonw_kint(w, "temp_buckets", ec.n_temp);
        real_or_null(w, "r_power_throughput", ec.r_power);
        fb__jsonw_kint(w, "power_buckets", ec.n_power);
        fb__jsonw_obj_end(w);
    } else {
        fb__jsonw_null(w);
    }
    fb__jsonw_kint(w, "agent_events_total", (long long)run->events_total);
    fb__jsonw_key(w, "agent_event_counts");
    fb__jsonw_obj_begin(w);
    for (size_t i = 0; i < run->nevents; i++) {
        size_t k = 0, c = 0;
        while (k < i && strcmp(run->events[k].kind, run->events[i].kind))
            k++;
        if (k < i)
            continue; /* counted at its first */
        for (size_t j = i; j < run->nevents; j++)
            c += !strcmp(run->events[j].kind, run->events[i].kind);
        fb__jsonw_kint(w, run->events[i].kind, (long long)c);
    }
    fb__jsonw_obj_end(w);
    fb__jsonw_key(w, "agent_events");
    fb__jsonw_arr_begin(w);
    for (size_t i = 0; i < run->nevents; i++) {
        const fb__report_agent_event *e = &run->events[i];
        fb__jsonw_obj_begin(w);
        fb__jsonw_kdouble(w, "at_s", round((e->time - run->started_at) * 1e6) / 1e6);
        fb__jsonw_kstr(w, "kind", e->kind);
        fb__jsonw_kstr(w, "subject", e->subject);
        fb__jsonw_kstr(w, "severity", e->severity);
        fb__jsonw_kstr(w, "detail", e->detail);
        fb__jsonw_obj_end(w);
    }
    fb__jsonw_arr_end(w);
}

static void run_obj(fb__jsonw *w, const fb__report_run *run)
{
    fb__jsonw_obj_begin(w);
    fb__jsonw_kstr(w, "dir", run->dir);
    fb__jsonw_kstr(w, "name", run->name);
    fb__jsonw_kstr(w, "status", run->status);
    fb__jsonw_kbool(w, "finished", run->finished);
    fb__jsonw_kstr(w, "schema_version", run->schema_version);
    /* a reused run directory: the newest of this many runs is reported */
    fb__jsonw_kint(w, "runs_in_journal", run->runs_in_journal);
    fb__jsonw_kint(w, "nproc", run->nproc);
    fb__jsonw_kdouble(w, "started_at", run->started_at);
    fb__jsonw_kdouble(w, "wall_s", fb__report_s(run->wall_us));
    fb__jsonw_kdouble(w, "ettr", ratio(run->us[FB__T_USEFUL], run->wall_us));
    time_obj(w, run->us);
    fb__jsonw_kint(w, "restarts", run->nattempts ? (long long)run->nattempts - 1 : 0);
    fb__jsonw_kint(w, "incidents", (long long)run->nincidents);
    fb__jsonw_kuint(w, "reports_lost", run->reports_lost);
    fb__jsonw_key(w, "attempts");
    fb__jsonw_arr_begin(w);
    for (size_t i = 0; i < run->nattempts; i++) {
        const fb__report_attempt *a = &run->attempts[i];
        fb__jsonw_obj_begin(w);
        fb__jsonw_kint(w, "number", a->number);
        fb__jsonw_kstr(w, "outcome", a->outcome[0] ? a->outcome : NULL);
        fb__jsonw_kdouble(w, "start_s", fb__report_s(a->start_us));
        fb__jsonw_kdouble(w, "wall_s", fb__report_s(a->end_us - a->start_us));
        time_obj(w, a->us);
        fb__jsonw_kstr(w, "lost_from", a->lost_from);
        /* where its ranks ran (journal schema 1.1; [] before) */
        fb__jsonw_key(w, "nodes");
        fb__jsonw_arr_begin(w);
        for (size_t k = 0; k < a->nnodes; k++) {
            const fb__report_node *nd = &a->nodes[k];
            fb__jsonw_obj_begin(w);
            fb__jsonw_kstr(w, "node", nd->node);
            fb__jsonw_kstr(w, "host", nd->host);
            fb__jsonw_key(w, "ranks");
            fb__jsonw_arr_begin(w);
            for (size_t q = 0; q < nd->nranks; q++)
                fb__jsonw_int(w, nd->ranks[q]);
            fb__jsonw_arr_end(w);
            fb__jsonw_obj_end(w);
        }
        fb__jsonw_arr_end(w);
        fb__jsonw_obj_end(w);
    }
    fb__jsonw_arr_end(w);
    fb__jsonw_kstr(w, "agent", run->agent_note[0] ? run->agent_note : NULL);
    agent_obj(w, run);
    fb__report_lateness_json(w, run);
    fb__jsonw_obj_end(w);
}

int fb__report_write_json(struct fb__jsonw *w, fb__report_run *const *runs,
                          size_t n)
{
    int64_t us[FB__T_N] = {0}, wall = 0;
    size_t restarts = 0;
    for (size_t r = 0; r < n; r++) {
        for (int p = 0; p < FB__T_N; p++)
            us[p] += runs[r]->us[p];
        wall += runs[r]->wall_us;
        restarts += runs[r]->nattempts ? runs[r]->nattempts - 1 : 0;
    }
    fb__report_row *rows;
    size_t ninterrupt;
    long nrows = fb__report_table(runs, n, &rows, &ninterrupt);
    if (nrows < 0)
        return (int)nrows;
    fb__report_suspect *sus;
    long nsus = fb__report_suspects(runs, n, &sus);
    if (nsus < 0) {
        free(rows);
        return (int)nsus;
    }
    fb__jsonw_obj_begin(w);
    fb__jsonw_kstr(w, "version", FB__REPORT_JSON_VERSION);
    fb__jsonw_kstr(w, "kind", "firebreak.report");
    fb__jsonw_kint(w, "nruns", (long long)n);
    fb__jsonw_kdouble(w, "ettr", ratio(us[FB__T_USEFUL], wall));
    fb__jsonw_kdouble(w, "wall_s", fb__report_s(wall));
    time_obj(w, us);
    fb__jsonw_kint(w, "restarts", (long long)restarts);
    fb__jsonw_kint(w, "interruptions", (long long)ninterrupt);
    fb__jsonw_key(w, "incidents");
    fb__jsonw_arr_begin(w);
    for (size_t r = 0; r < n; r++)
        for (size_t i = 0; i < runs[r]->nincidents; i++)
            incident(w, runs[r], r, &runs[r]->incidents[i]);
    fb__jsonw_arr_end(w);
    /* by_category: {category: interruptions}; table: the Table 5 rows. */
    fb__jsonw_key(w, "by_category");
    fb__jsonw_obj_begin(w);
    for (long i = 0; i < nrows; i++) {
        int seen = 0;
        for (long k = 0; k < i && !seen; k++)
            seen = !strcmp(rows[k].category, rows[i].category);
        if (seen)
            continue;
        size_t c = 0;
        for (long k = i; k < nrows; k++)
            if (!strcmp(rows[k].category, rows[i].category))
                c += rows[k].count;
        fb__jsonw_kint(w, rows[i].category, (long long)c);
    }
    fb__jsonw_obj_end(w);
    fb__jsonw_key(w, "table");
    fb__jsonw_arr_begin(w);
    for (long i = 0; i < nrows; i++) {
        fb__jsonw_obj_begin(w);
        fb__jsonw_kstr(w, "component", rows[i].component);
        fb__jsonw_kstr(w, "category", rows[i].category);
        fb__jsonw_kint(w, "count", (long long)rows[i].count);
        fb__jsonw_kdouble(w, "share", ninterrupt ? (double)rows[i].count /
                                                   (double)ninterrupt : 0);
        fb__jsonw_kint(w, "injected", (long long)rows[i].injected);
        fb__jsonw_obj_end(w);
    }
    fb__jsonw_arr_end(w);
    fb__jsonw_key(w, "suspects");
    fb__jsonw_arr_begin(w);
    for (long i = 0; i < nsus; i++) {
        fb__jsonw_obj_begin(w);
        fb__jsonw_kstr(w, "what", sus[i].what);
        fb__jsonw_kint(w, "failures", (long long)sus[i].failures);
        fb__jsonw_kint(w, "runs", (long long)sus[i].runs);
        fb__jsonw_obj_end(w);
    }
    fb__jsonw_arr_end(w);
    fb__jsonw_key(w, "runs");
    fb__jsonw_arr_begin(w);
    for (size_t r = 0; r < n; r++)
        run_obj(w, runs[r]);
    fb__jsonw_arr_end(w);
    fb__jsonw_obj_end(w);
    free(rows);
    free(sus);
    return w->oom ? -ENOMEM : 0;
}
