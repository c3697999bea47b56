/*
 * load.c -- read a run directory's journal.sqlite (and agent.sqlite when
 * it is there) into an fb__report_run.
 *
 * The journal is read through src/journal's reader (journal.h,
 * "Reading"), which holds the rules: read-only, regular files only, one
 * transaction, the schema-version rule, messages that name the file.  What
 * is here is what the report makes of the rows.  agent.sqlite belongs to
 * the agent (docs/agent.md) and is still read here, with SQL of its own.
 */
#include "report/report.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "common/rundir.h"
#include "common/util.h"
#include "firebreak/firebreak.h"
#include "journal/journal.h"

/* The longest detection latency taken as recorded: twice the longest
 * --hang-timeout (30 days), in ms. */
#define DETECT_MS_MAX (60.0 * 86400 * 1e3)

typedef struct loader {
    fb__journal_ro *jr;
    const char *path;
    char *err;
    size_t errsz;
    const fb__report_run *run;     /* its attempts loaded: events filtered */
    int nth;                       /* the run row wanted: -1 the newest  */
} loader;

/* A failure of the reader: its message (naming the file) into err. */
static int read_fail(loader *L, int rc)
{
    snprintf(L->err, L->errsz, "%s", fb__journal_ro_errmsg(L->jr));
    return rc;
}

static char *dup_str(const char *t)
{
    return t ? strdup(t) : NULL;
}

static int load_run(loader *L, fb__report_run *run)
{
    fb__journal_cursor *c;
    fb__journal_run_row r;
    int rc = fb__journal_rows(L->jr, FB__JOURNAL_RUN, &c);
    if (rc)
        return read_fail(L, rc);
    /* One run row per `firebreak run` in this directory: a reused run
     * directory (a job resumed from its checkpoints) holds several.  The
     * newest (the largest id) is the run reported; its attempts, and the
     * rows of those, are loaded (fb__report_row_is_ours). */
    while ((rc = fb__journal_next_run(c, &r)) == 1) { /* by id */
        int i = run->runs_in_journal++;
        if (L->nth >= 0 ? i != L->nth : i > 0 && r.id < run->run_id)
            continue;
        free(run->name);
        free(run->status);
        free(run->reason);
        free(run->hostname);
        run->run_id = r.id;
        run->name = dup_str(r.name);
        run->status = dup_str(r.status);
        run->reason = dup_str(r.reason);
        run->hostname = dup_str(r.hostname);
        run->nproc = r.nproc;
        run->nnodes = r.nnodes;
        run->started_at = r.started_at;
        run->ended_at = r.ended_at;
        run->finished = !isnan(run->ended_at);
    }
    if (rc == 0 && L->nth >= run->runs_in_journal && run->runs_in_journal) {
        snprintf(L->err, L->errsz, "%s holds %d runs, not a run number %d", L->path,
                 run->runs_in_journal, L->nth);
        rc = FB_EFORMAT;
    } else if (rc == 0 && run->runs_in_journal) {
        rc = 0;
    } else if (rc == 0) {
        snprintf(L->err, L->errsz, "%s holds no run: the journal is empty "
                 "(did 'firebreak run' fail before it began?)", L->path);
        rc = FB_EFORMAT;
    } else {
        rc = read_fail(L, rc);
    }
    fb__journal_rows_close(c);
    if (!rc && isnan(run->started_at)) {
        snprintf(L->err, L->errsz, "%s: run.started_at is NULL", L->path);
        rc = FB_EFORMAT;
    }
    return rc;
}

/* Grow *arr (of elem bytes) so that index n fits. */
static int grow(void **arr, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap)
        return 0;
    size_t nc = *cap ? *cap * 2 : 64;
    void *p = realloc(*arr, nc * elem);
    if (!p)
        return -ENOMEM;
    *arr = p;
    *cap = nc;
    return 0;
}

int fb__report_attempt_index(const fb__report_run *run, int64_t id)
{
    size_t lo = 0, hi = run->nattempts;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (run->attempts[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < run->nattempts && run->attempts[lo].id == id ? (int)lo : -1;
}

static int load_attempts(loader *L, fb__report_run *run)
{
    fb__journal_cursor *c;
    fb__journal_attempt_row r;
    int rc = fb__journal_rows(L->jr, FB__JOURNAL_ATTEMPT, &c);
    if (rc)
        return read_fail(L, rc);
    size_t cap = 0;
    while ((rc = fb__journal_next_attempt(c, &r)) == 1) {
        if (run->runs_in_journal > 1 && r.run_id != run->run_id)
            continue; /* an earlier run of a reused run directory */
        if (grow((void **)&run->attempts, &cap, run->nattempts,
                 sizeof *run->attempts)) {
            fb__journal_rows_close(c);
            return -ENOMEM;
        }
        fb__report_attempt *a = &run->attempts[run->nattempts++];
        memset(a, 0, sizeof *a);
        a->id = r.id;
        a->number = r.number;
        a->started_at = r.started_at;
        a->launched_at = r.launched_at;
        a->ready_at = r.ready_at;
        a->ended_at = r.ended_at;
        a->restored_step = r.restored_step;
        a->restore_s = r.restore_s;
        a->start_step = r.start_step;
        a->end_step = r.end_step;
        snprintf(a->outcome, sizeof a->outcome, "%s",
                 r.outcome ? r.outcome : "");
        a->failure = -1;
        a->lost_from = "none";
    }
    fb__journal_rows_close(c);
    if (rc)
        return read_fail(L, rc);
    if (run->nattempts == 0) {
        snprintf(L->err, L->errsz, "%s: the run never started (no attempt "
                 "was launched)%s%s", L->path, run->reason ? ": " : "",
                 run->reason ? run->reason : "");
        return FB_EFORMAT;
    }
    return 0;
}

static int load_incidents(loader *L, fb__report_run *run)
{
    fb__journal_cursor *c;
    fb__journal_incident_row r;
    int rc = fb__journal_rows(L->jr, FB__JOURNAL_INCIDENT, &c);
    if (rc)
        return read_fail(L, rc);
    size_t cap = 0;
    while ((rc = fb__journal_next_incident(c, &r)) == 1) {
        if (!fb__report_row_is_ours(run, fb__report_attempt_index(run, r.attempt_id)))
            continue;
        if (grow((void **)&run->incidents, &cap, run->nincidents,
                 sizeof *run->incidents)) {
            fb__journal_rows_close(c);
            return -ENOMEM;
        }
        fb__report_incident *in = &run->incidents[run->nincidents++];
        memset(in, 0, sizeof *in);
        in->id = r.id;
        in->attempt_id = r.attempt_id;
        in->attempt = fb__report_attempt_index(run, in->attempt_id);
        in->kind = dup_str(r.kind);
        in->occurred_at = r.occurred_at;
        in->detected_at = r.detected_at;
        /* a latency no supervisor records (negative, past the longest
         * --hang-timeout and more, not a number) is unknown: -1 */
        in->detect_ms = isfinite(r.detect_ms) && r.detect_ms >= 0 &&
                                r.detect_ms <= DETECT_MS_MAX
                            ? r.detect_ms
                            : -1;
        in->rank = r.rank;
        in->node = dup_str(r.node);
        in->host = dup_str(r.host);
        in->signal = r.signal;
        in->has_exit_code = r.has_exit_code;
        in->exit_code = r.exit_code;
        in->phase = dup_str(r.phase);
        in->step = r.step;
        in->lost_s = isnan(r.lost_s) ? -1 : r.lost_s;
        in->lost_acc_s = -1;
        in->injected = dup_str(r.injected);
        in->detail = dup_str(r.detail);
        in->last_lines = dup_str(r.last_lines);
        in->fr_verdict = dup_str(r.fr_verdict);
        in->health = dup_str(r.health);
        in->sup_category = dup_str(r.category);
        in->sup_component = dup_str(r.component);
        in->sup_evidence = dup_str(r.evidence);
        if (!in->kind) {
            fb__journal_rows_close(c);
            snprintf(L->err, L->errsz, "%s: incident %lld has no kind",
                     L->path, (long long)in->id);
            return FB_EFORMAT;
        }
    }
    fb__journal_rows_close(c);
    return rc ? read_fail(L, rc) : 0;
}

/* Rank r of attempt a ran on node/host: add it to the attempt's nodes. */
static int place_rank(fb__report_attempt *a, int r, const char *node,
                      const char *host)
{
    size_t k = 0;
    while (k < a->nnodes && strcmp(a->nodes[k].node, node))
        k++;
    if (k == a->nnodes) {
        fb__report_node *p = realloc(a->nodes, (k + 1) * sizeof *p);
        if (!p)
            return -ENOMEM;
        a->nodes = p;
        memset(&p[k], 0, sizeof p[k]);
        p[k].node = strdup(node);
        p[k].host = dup_str(host);
        a->nnodes++;
        if (!p[k].node || (host && !p[k].host))
            return -ENOMEM;
    }
    fb__report_node *n = &a->nodes[k];
    if ((n->nranks & (n->nranks - 1)) == 0) { /* 0, 1, 2, 4...: grow */
        int *p = realloc(n->ranks, (n->nranks ? n->nranks * 2 : 1) * sizeof *p);
        if (!p)
            return -ENOMEM;
        n->ranks = p;
    }
    n->ranks[n->nranks++] = r;
    return 0;
}

/* Where each attempt's ranks ran (rows by attempt, then rank). */
static int load_placement(loader *L, fb__report_run *run)
{
    fb__journal_cursor *c;
    fb__journal_placement_row r;
    int rc = fb__journal_rows(L->jr, FB__JOURNAL_PLACEMENT, &c);
    if (rc)
        return read_fail(L, rc);
    while ((rc = fb__journal_next_placement(c, &r)) == 1) {
        int a = fb__report_attempt_index(run, r.attempt_id);
        if (a < 0 || !r.node || r.rank < 0)
            continue;
        if (place_rank(&run->attempts[a], r.rank, r.node, r.host)) {
            fb__journal_rows_close(c);
            return -ENOMEM;
        }
    }
    fb__journal_rows_close(c);
    return rc ? read_fail(L, rc) : 0;
}

static int load_ckpts(loader *L, fb__report_run *run)
{
    fb__journal_cursor *c;
    fb__journal_checkpoint_row r;
    int rc = fb__journal_rows(L->jr, FB__JOURNAL_CHECKPOINT, &c);
    if (rc)
        return read_fail(L, rc);
    size_t cap = 0;
    while ((rc = fb__journal_next_checkpoint(c, &r)) == 1) {
        if (!fb__report_row_is_ours(run, fb__report_attempt_index(run, r.attempt_id)))
            continue;
        if (grow((void **)&run->ckpts, &cap, run->nckpts, sizeof *run->ckpts)) {
            fb__journal_rows_close(c);
            return -ENOMEM;
        }
        fb__report_ckpt *k = &run->ckpts[run->nckpts++];
        k->attempt = fb__report_attempt_index(run, r.attempt_id);
        k->step = r.step;
        k->committed_at = r.committed_at;
        k->stall_ms = r.stall_ms;
        if (isnan(k->stall_ms) || k->stall_ms < 0)
            k->stall_ms = 0;
        k->persist_ms = r.persist_ms;
        if (isnan(k->persist_ms) || k->persist_ms < 0)
            k->persist_ms = 0;
        snprintf(k->status, sizeof k->status, "%s", r.status ? r.status : "");
    }
    fb__journal_rows_close(c);
    return rc ? read_fail(L, rc) : 0;
}

/* Stable counting sort of the samples by attempt, so each attempt's
 * samples are one slice (unknown attempts last, in no slice). */
static int group_samples(fb__report_run *run)
{
    size_t na = run->nattempts, n = run->nsamples;
    size_t *start = calloc(na + 2, sizeof *start);
    fb__report_sample *out = malloc((n ? n : 1) * sizeof *out);
    if (!start || !out) {
        free(start);
        free(out);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        int a = run->samples[i].attempt;
        start[(a < 0 ? na : (size_t)a) + 1]++;
    }
    for (size_t a = 1; a <= na + 1; a++)
        start[a] += start[a - 1];
    for (size_t a = 0; a < na; a++) {
        run->attempts[a].sample_lo = start[a];
        run->attempts[a].sample_hi = start[a + 1];
    }
    for (size_t i = 0; i < n; i++) {
        int a = run->samples[i].attempt;
        out[start[a < 0 ? na : (size_t)a]++] = run->samples[i];
    }
    free(start);
    free(run->samples);
    run->samples = out;
    return 0;
}

static int load_samples(loader *L, fb__report_run *run)
{
    int64_t n;
    int rc = fb__journal_count(L->jr, FB__JOURNAL_SAMPLE, &n);
    if (rc)
        return read_fail(L, rc);
    if (n <= 0)
        return 0;
    run->samples = malloc((size_t)n * sizeof *run->samples);
    if (!run->samples)
        return -ENOMEM;
    fb__journal_cursor *c;
    fb__journal_sample_row r;
    rc = fb__journal_rows(L->jr, FB__JOURNAL_SAMPLE, &c);
    if (rc)
        return read_fail(L, rc);
    int64_t last_id = INT64_MIN;
    int last_idx = -1;
    while (run->nsamples < (size_t)n &&
           (rc = fb__journal_next_sample(c, &r)) == 1) {
        if (r.attempt_id != last_id) { /* samples come in runs of one attempt */
            last_id = r.attempt_id;
            last_idx = fb__report_attempt_index(run, r.attempt_id);
        }
        if (!fb__report_row_is_ours(run, last_idx))
            continue;
        fb__report_sample *x = &run->samples[run->nsamples++];
        x->attempt = last_idx;
        x->rank = r.rank;
        x->time = r.time;
        x->step = r.step;
        x->step_time_ms = isnan(r.step_time_ms) ? NAN : (float)r.step_time_ms;
    }
    fb__journal_rows_close(c);
    if (rc < 0)
        return read_fail(L, rc);
    return group_samples(run);
}

/* ---- agent.sqlite ------------------------------------------------------ */

/* agent.sqlite (docs/agent.md, schema 1.x): gpu_samples(t, gpu, temp_c,
 * power_w, ...), averaged over the GPUs of each sample time.  A file
 * from another major version, or without that table, is left out with a
 * note; the report never fails because of it. */
static double col_real(sqlite3_stmt *s, int i)
{
    return sqlite3_column_type(s, i) == SQLITE_NULL ? NAN
                                                   : sqlite3_column_double(s, i);
}

static int agent_version_ok(sqlite3 *db, fb__report_run *run, const char *path)
{
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key="
                           "'schema_version'", -1, &s, NULL) != SQLITE_OK)
        return 1; /* no meta table: take the tables for what they are */
    int ok = 1;
    if (sqlite3_step(s) == SQLITE_ROW) {
        const char *v = (const char *)sqlite3_column_text(s, 0);
        if (v && atoi(v) != 1) {
            snprintf(run->agent_note, sizeof run->agent_note, "%s: schema "
                     "version %.20s is not supported (this firebreak reads 1.x)",
                     path, v);
            ok = 0;
        }
    }
    sqlite3_finalize(s);
    return ok;
}

/* The agent's events (kind, subject, severity, detail), by time: at most
 * FB__REPORT_AGENT_EVENTS_MAX kept, all counted.  A database without the
 * table (an agent that recorded none, a minimal file) has none. */
static void load_events(sqlite3 *db, fb__report_run *run)
{
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(db, "SELECT t, kind, subject, severity, detail FROM "
                           "events ORDER BY t, id", -1, &s, NULL) != SQLITE_OK)
        return;
    size_t cap = 0;
    while (sqlite3_step(s) == SQLITE_ROW) {
        double t = col_real(s, 0);
        if (isnan(t))
            continue;
        run->events_total++;
        if (run->nevents >= FB__REPORT_AGENT_EVENTS_MAX ||
            grow((void **)&run->events, &cap, run->nevents, sizeof *run->events))
            continue;
        fb__report_agent_event *e = &run->events[run->nevents];
        memset(e, 0, sizeof *e);
        e->time = t;
        const char *k = (const char *)sqlite3_column_text(s, 1);
        const char *sub = (const char *)sqlite3_column_text(s, 2);
        const char *sev = (const char *)sqlite3_column_text(s, 3);
        const char *d = (const char *)sqlite3_column_text(s, 4);
        snprintf(e->kind, sizeof e->kind, "%s", k ? k : "?");
        snprintf(e->subject, sizeof e->subject, "%s", sub ? sub : "");
        snprintf(e->severity, sizeof e->severity, "%s", sev ? sev : "");
        /* a sentence: 512 bytes are plenty; a longer one is cut */
        e->detail = strndup(d ? d : "", 512);
        if (e->detail)
            run->nevents++;
    }
    sqlite3_finalize(s);
}

static void load_agent(fb__report_run *run, const char *dir)
{
    char path[4096];
    struct stat st;
    if (snprintf(path, sizeof path, "%s/agent.sqlite", dir) >= (int)sizeof path ||
        stat(path, &st) != 0) {
        snprintf(run->agent_note, sizeof run->agent_note,
                 "no agent.sqlite in the run directory");
        return;
    }
    sqlite3 *db = NULL;
    sqlite3_stmt *s = NULL;
    char why[512];
    if (fb__journal_files_regular(path, why, sizeof why)) {
        snprintf(run->agent_note, sizeof run->agent_note, "%s", why);
        return;
    }
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        snprintf(run->agent_note, sizeof run->agent_note, "%s: cannot open: %s",
                 path, db ? sqlite3_errmsg(db) : "out of memory");
        goto out;
    }
    sqlite3_busy_timeout(db, 1000);
    if (!agent_version_ok(db, run, path))
        goto out;
    load_events(db, run);
    if (sqlite3_prepare_v2(db, "SELECT t, avg(temp_c), avg(power_w) FROM "
                           "gpu_samples GROUP BY t ORDER BY t", -1, &s,
                           NULL) != SQLITE_OK) {
        snprintf(run->agent_note, sizeof run->agent_note, "%s: no GPU samples "
                 "(%s)", path, sqlite3_errmsg(db));
        goto out;
    }
    size_t cap = 0;
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (grow((void **)&run->env, &cap, run->nenv, sizeof *run->env))
            break;
        fb__report_env *e = &run->env[run->nenv];
        e->time = col_real(s, 0);
        e->temp_c = col_real(s, 1);
        e->power_w = col_real(s, 2);
        if (!isnan(e->time))
            run->nenv++;
    }
    if (rc != SQLITE_DONE && rc != SQLITE_ROW)
        snprintf(run->agent_note, sizeof run->agent_note, "%s: %s (agent data "
                 "left out)", path, sqlite3_errmsg(db));
    else if (run->nenv == 0)
        snprintf(run->agent_note, sizeof run->agent_note, "%s has no GPU "
                 "samples (no GPU on this node?)", path);
out:
    sqlite3_finalize(s);
    sqlite3_close(db);
}

/* ---- entry points ------------------------------------------------------ */

void fb__report_free(fb__report_run *run)
{
    if (!run)
        return;
    for (size_t i = 0; i < run->nincidents; i++) {
        fb__report_incident *in = &run->incidents[i];
        free(in->kind);
        free(in->node);
        free(in->host);
        free(in->phase);
        free(in->injected);
        free(in->detail);
        free(in->last_lines);
        free(in->fr_verdict);
        free(in->health);
        free(in->sup_category);
        free(in->sup_component);
        free(in->sup_evidence);
    }
    free(run->incidents);
    for (size_t i = 0; i < run->nattempts; i++) {
        for (size_t k = 0; k < run->attempts[i].nnodes; k++) {
            free(run->attempts[i].nodes[k].node);
            free(run->attempts[i].nodes[k].host);
            free(run->attempts[i].nodes[k].ranks);
        }
        free(run->attempts[i].nodes);
    }
    free(run->attempts);
    free(run->samples);
    free(run->ckpts);
    free(run->env);
    for (size_t i = 0; i < run->nevents; i++)
        free(run->events[i].detail);
    free(run->events);
    free(run->late);
    free(run->drains);
    free(run->dir);
    free(run->name);
    free(run->status);
    free(run->reason);
    free(run->hostname);
    free(run);
}

/* A checkpoint that failed its hash check after `--inject corrupt:...`:
 * the supervisor records the injection as an `inject` event of the rank
 * (the incident that follows, a restore fallback in a later attempt, has
 * no injected column), so the latest such event before the fallback on
 * the same rank is its injected cause. */
typedef struct inject_event {
    double time;
    int rank; /* -1: not one rank */
    char *detail;
} inject_event;

static int needs_cause(const fb__report_incident *in)
{
    return !strcmp(in->kind, "restore_fallback") && !in->injected &&
           !(in->detail && strstr(in->detail, "incomplete"));
}

/* Every event row of the journal, in id order, to fn (0 to go on, or
 * -ENOMEM to stop): 0, -ENOMEM, or a read failure said in L. */
static int each_event(loader *L, int (*fn)(void *arg, const fb__journal_event_row *r),
                      void *arg)
{
    fb__journal_cursor *c;
    fb__journal_event_row r;
    int rc = fb__journal_rows(L->jr, FB__JOURNAL_EVENT, &c);
    if (rc)
        return read_fail(L, rc);
    while ((rc = fb__journal_next_event(c, &r)) == 1) {
        if (L->run && !fb__report_row_is_ours(
                          L->run, fb__report_attempt_index(L->run, r.attempt_id)))
            continue; /* an earlier run's */
        if ((rc = fn(arg, &r)) < 0)
            break;
    }
    fb__journal_rows_close(c);
    return rc < 0 && rc != -ENOMEM ? read_fail(L, rc) : rc;
}

typedef struct inject_list {
    inject_event *ev;
    size_t n, cap;
} inject_list;

static int corrupt_inject(void *arg, const fb__journal_event_row *r)
{
    inject_list *l = arg;
    if (!r->kind || strcmp(r->kind, "inject") || !r->detail ||
        strncasecmp(r->detail, "corrupt:", 8))
        return 0;
    if (grow((void **)&l->ev, &l->cap, l->n, sizeof *l->ev))
        return -ENOMEM;
    inject_event *e = &l->ev[l->n];
    e->time = r->time;
    e->rank = r->rank;
    if (!(e->detail = strdup(r->detail)))
        return -ENOMEM;
    l->n++;
    return 0;
}

/* The journal's `inject` events of a corrupt: fault, in id order. */
static int load_corrupt_injects(loader *L, inject_event **out, size_t *n)
{
    inject_list l = {0};
    int rc = each_event(L, corrupt_inject, &l);
    *out = l.ev;
    *n = l.n;
    return rc;
}

static int attribute_corruption(loader *L, fb__report_run *run)
{
    size_t i = 0, nev = 0;
    while (i < run->nincidents && !needs_cause(&run->incidents[i]))
        i++;
    if (i == run->nincidents)
        return 0;
    inject_event *ev = NULL;
    int rc = load_corrupt_injects(L, &ev, &nev);
    for (; !rc && i < run->nincidents; i++) {
        fb__report_incident *in = &run->incidents[i];
        if (!needs_cause(in))
            continue;
        const inject_event *best = NULL; /* the latest, the first of ties */
        for (size_t k = 0; k < nev; k++)
            if (ev[k].time <= in->detected_at &&
                (in->rank < 0 || ev[k].rank < 0 || ev[k].rank == in->rank) &&
                (!best || ev[k].time > best->time))
                best = &ev[k];
        if (best && !(in->injected = strdup(best->detail)))
            rc = -ENOMEM;
        in->injected_from_event = in->injected != NULL;
    }
    for (size_t k = 0; k < nev; k++)
        free(ev[k].detail);
    free(ev);
    return rc;
}

typedef struct drain_list {
    fb__report_run *run;
    size_t cap;
} drain_list;

static int drain_event(void *arg, const fb__journal_event_row *r)
{
    drain_list *l = arg;
    fb__report_run *run = l->run;
    if (!r->kind || strcmp(r->kind, "drain") || !r->node || !*r->node)
        return 0;
    if (run->drains_total++ >= FB__REPORT_DRAINS_MAX)
        return 0;
    if (grow((void **)&run->drains, &l->cap, run->ndrains, sizeof *run->drains))
        return -ENOMEM;
    fb__report_drain *d = &run->drains[run->ndrains++];
    d->time = r->time;
    d->attempt = fb__report_attempt_index(run, r->attempt_id);
    d->code = r->code;
    snprintf(d->node, sizeof d->node, "%s", r->node);
    snprintf(d->reason, sizeof d->reason, "%s", r->detail ? r->detail : "");
    return 0;
}

/* A `reports_lost` event (watch.c, at an attempt's end): its code is how
 * many of the rank's reports were overwritten unread; a code below 1 (a
 * journal not ours) counts nothing. */
static void lost_event(fb__report_run *run, const fb__journal_event_row *r)
{
    if (!r->kind || strcmp(r->kind, "reports_lost") || r->code <= 0)
        return;
    uint64_t n = (uint64_t)r->code;
    run->reports_lost = run->reports_lost > UINT64_MAX - n ? UINT64_MAX
                                                           : run->reports_lost + n;
    if (run->reports_lost_first < 0)
        run->reports_lost_first = r->rank;
}

static int tally_event(void *arg, const fb__journal_event_row *r)
{
    drain_list *l = arg;
    lost_event(l->run, r);
    return drain_event(arg, r);
}

/* In one pass over the events: the journal's `drain` events (slurm.c,
 * under --drain: the node is the event's node column, the reason its
 * detail; FB__REPORT_DRAINS_MAX kept) and its `reports_lost` ones. */
static int load_event_tallies(loader *L, fb__report_run *run)
{
    drain_list l = {.run = run};
    run->reports_lost_first = -1;
    return each_event(L, tally_event, &l);
}

static void classify_all(fb__report_run *run)
{
    for (size_t i = 0; i < run->nincidents; i++) {
        fb__report_incident *in = &run->incidents[i];
        fb__report_evidence ev = {
            .kind = in->kind, .phase = in->phase, .injected = in->injected,
            .detail = in->detail, .last_lines = in->last_lines,
            .fr_verdict = in->fr_verdict,
            .health = in->health, .category = in->sup_category,
            .component = in->sup_component, .evidence = in->sup_evidence,
            .signal = in->signal, .has_exit_code = in->has_exit_code,
            .exit_code = in->exit_code,
        };
        /* The supervisor classified a fallback without the inject event
         * the report found for it: that event is the better evidence. */
        if (in->injected_from_event)
            ev.category = ev.component = ev.evidence = NULL;
        fb__report_classify(&ev, &in->cls);
        if (in->injected_from_event && in->cls.rule == FB__DIAG_BY_INJECTED) {
            size_t n = strlen(in->cls.evidence);
            snprintf(in->cls.evidence + n, sizeof in->cls.evidence - n,
                     " (the rank's inject event before this restore)");
        }
    }
}

/* Which journal RUN_DIR names: its device and inode, or -errno. */
static int journal_id(const char *run_dir, uint64_t id[2])
{
    char path[4096];
    struct stat st;
    if (stat(run_dir, &st))
        return -errno;
    if (S_ISDIR(st.st_mode)) {
        if (fb__rundir_path(path, sizeof path, run_dir, FB__RUNDIR_JOURNAL, 0))
            return -ENAMETOOLONG;
        if (stat(path, &st))
            return -errno;
    }
    id[0] = (uint64_t)st.st_dev;
    id[1] = (uint64_t)st.st_ino;
    return 0;
}

static size_t seen_slot(uint64_t (*t)[2], size_t cap, const uint64_t id[2])
{
    size_t i = (size_t)((id[0] * 0x9E3779B97F4A7C15ull) ^ id[1]) & (cap - 1);
    while ((t[i][0] || t[i][1]) && (t[i][0] != id[0] || t[i][1] != id[1]))
        i = (i + 1) & (cap - 1);
    return i;
}

int fb__report_seen_add(fb__report_seen *s, const char *run_dir)
{
    uint64_t id[2];
    if (journal_id(run_dir, id) || (!id[0] && !id[1]))
        return 0;
    if (s->cap) {
        const uint64_t *e = s->slot[seen_slot(s->slot, s->cap, id)];
        if (e[0] || e[1])
            return 1;
    }
    if (2 * (s->n + 1) > s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 64;
        uint64_t (*t)[2] = calloc(nc, sizeof *t);
        if (!t)
            return -ENOMEM;
        for (size_t i = 0; i < s->cap; i++)
            if (s->slot[i][0] || s->slot[i][1]) {
                size_t k = seen_slot(t, nc, s->slot[i]);
                t[k][0] = s->slot[i][0];
                t[k][1] = s->slot[i][1];
            }
        free(s->slot);
        s->slot = t;
        s->cap = nc;
    }
    size_t k = seen_slot(s->slot, s->cap, id);
    s->slot[k][0] = id[0];
    s->slot[k][1] = id[1];
    s->n++;
    return 0;
}

void fb__report_seen_free(fb__report_seen *s)
{
    free(s->slot);
    memset(s, 0, sizeof *s);
}

int fb__report_load(const char *run_dir, fb__report_run **out, char *err,
                    size_t errsz)
{
    return fb__report_load_nth(run_dir, -1, out, err, errsz);
}

int fb__report_load_nth(const char *run_dir, int nth, fb__report_run **out, char *err,
                        size_t errsz)
{
    char path[4096], dir[4096];
    struct stat st;
    *out = NULL;
    if (stat(run_dir, &st) != 0) {
        snprintf(err, errsz, "%s: %s", run_dir, strerror(errno));
        return -ENOENT;
    }
    if (S_ISDIR(st.st_mode)) {
        snprintf(dir, sizeof dir, "%s", run_dir);
        if (fb__rundir_path(path, sizeof path, run_dir, FB__RUNDIR_JOURNAL, 0)) {
            snprintf(err, errsz, "%s: path too long", run_dir);
            return -ENAMETOOLONG;
        }
        if (stat(path, &st) != 0) {
            /* Where the runs are (its checkpoints/, logs/, fr/: the run
             * it is in) */
            fb__rundir_where *w = malloc(sizeof *w);
            char where[1024];
            int k = 0;
            if (w) {
                fb__rundir_where_find(run_dir, w);
                k = fb__rundir_where_say(w, run_dir, where, sizeof where);
            }
            if (k == FB__RUNDIR_WHERE_BELOW)
                snprintf(err, errsz, "%s: no journal.sqlite here, but %s: give one or "
                         "more of them (--fleet %s ranks their nodes)", run_dir, where,
                         w->below);
            else if (k == FB__RUNDIR_WHERE_INSIDE)
                snprintf(err, errsz, "%s: no journal.sqlite here: %s: give that one",
                         run_dir, where);
            else
                snprintf(err, errsz, "%s: no journal.sqlite here; give the run "
                         "directory that 'firebreak run' wrote", run_dir);
            free(w);
            return -ENOENT;
        }
    } else {
        snprintf(path, sizeof path, "%s", run_dir);
        snprintf(dir, sizeof dir, "%s", run_dir);
        char *slash = strrchr(dir, '/');
        if (slash)
            *slash = '\0';
        else
            snprintf(dir, sizeof dir, ".");
    }
    fb__report_run *run = calloc(1, sizeof *run);
    if (!run)
        return -ENOMEM;
    run->dir = strdup(run_dir);
    loader L = {.path = path, .err = err, .errsz = errsz, .nth = nth};
    int rc = fb__journal_open_ro(path, &L.jr, err, errsz);
    if (rc)
        goto out;
    snprintf(run->schema_version, sizeof run->schema_version, "%s",
             fb__journal_ro_version(L.jr));
    L.run = run;
    if ((rc = load_run(&L, run)) || (rc = load_attempts(&L, run)) ||
        (rc = load_incidents(&L, run)) || (rc = load_placement(&L, run)) ||
        (rc = load_ckpts(&L, run)) ||
        (rc = load_samples(&L, run)) || (rc = attribute_corruption(&L, run)) ||
        (rc = load_event_tallies(&L, run)))
        goto out;
    if ((rc = fb__report_load_lateness(L.jr, run))) {
        read_fail(&L, rc);
        goto out;
    }
    fb__journal_close_ro(L.jr);
    L.jr = NULL;
    load_agent(run, dir);
    classify_all(run);
    rc = fb__report_account(run, err, errsz);
out:
    fb__journal_close_ro(L.jr);
    if (rc) {
        fb__report_free(run);
        return rc;
    }
    *out = run;
    return 0;
}
