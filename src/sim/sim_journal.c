/*
 * sim_journal.c -- the costs a real firebreak run measured, read from its
 * journal (RUN_DIR/journal.sqlite, schema in src/journal/schema.sql and
 * docs/journal.md), so `firebreak sim --from-run` can project that job to
 * another scale.
 *
 * Read through src/journal's reader (journal.h, "Reading"), which opens
 * it read-only and applies the schema-version rule; the measures are
 * computed here from its rows.  What is taken:
 *   stall, persist  mean stall_ms / persist_ms of complete checkpoints
 *   interval        mean gap between consecutive commits in one attempt,
 *                   less the stall (compute time between checkpoints)
 *   detection       mean detect_ms of crashes (crash, error_exit,
 *                   node_failure) and of hangs, separately
 *   restart         for every attempt after the first: from the detection
 *                   that ended the previous attempt (or its end) to the
 *                   first completed step (teardown, relaunch, init,
 *                   restore); one predecessor per attempt, found by
 *                   binary search, so a journal's size costs n log n
 *   restores        bytes per second of the ranks' restore_done events,
 *                   by the tier event.source names (a later schema minor;
 *                   without it, storage); the mean restore_s of attempts,
 *                   to take the restore out of the restart with tiers;
 *                   a rank's checkpoint bytes (restore_done, else a
 *                   complete checkpoint's bytes / ranks), to scale by
 * Anything the journal lacks is left < 0 and the caller keeps its default.
 * Every value taken is checked first (check()): one that is not a number,
 * not finite, negative or out of range stops the reading with a message
 * naming the file, table.column and row, since one absurd row would make
 * any mean absurd.
 */
#include "sim/sim.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/rundir.h"
#include "journal/journal.h"

/* A mean as SQLite's avg() takes it: NaN (NULL) values left out, summed
 * in row order; -1 when there is none. */
typedef struct mean {
    double sum;
    int64_t n;
} mean;

static void mean_add(mean *m, double x)
{
    if (!isnan(x)) {
        m->sum += x;
        m->n++;
    }
}

static double mean_of(const mean *m)
{
    return m->n ? m->sum / (double)m->n : -1;
}

/* What the measures need of the journal's rows. */
typedef struct attempt {
    int64_t id, run_id;
    int number;
    double started_at, ready_at, ended_at;
    double last_detected_at; /* latest incident detected in it; NaN: none */
} attempt;

typedef struct ckpt {
    int64_t id, attempt_id;
    double committed_at, stall_ms;
} ckpt;

typedef struct rows {
    const char *path;  /* for messages */
    char *err;
    size_t err_size;
    int bad;           /* err holds why a row was refused */
    attempt *att;
    size_t natt;
    ckpt *ck;       /* complete checkpoints, in id order */
    size_t nck;
    mean stall, persist, crash, hang;
    int64_t ncrash, nhang;
    double restore_bytes[FB_SIM_NTIERS], restore_secs[FB_SIM_NTIERS];
    int64_t nrestore[FB_SIM_NTIERS];
    mean restore_event_bytes, ckpt_rank_bytes, attempt_restore;
    long gpus;      /* nproc of the last run; -1: none */
} rows;

static int push(void **arr, size_t *n, size_t *cap, size_t elem)
{
    if (*n < *cap)
        return 0;
    size_t nc = *cap ? *cap * 2 : 16;
    void *p = realloc(*arr, nc * elem);
    if (!p)
        return -ENOMEM;
    *arr = p;
    *cap = nc;
    return 0;
}

/* What a column may hold: [lo, hi] and what to say when it does not. */
typedef struct range {
    double lo, hi;
    const char *want;
} range;

#define MAX_RANK_BYTES 1125899906842624.0 /* 1 PiB */
#define MAX_RANK_BPS 1125899906842624.0   /* 1 PiB/s */
static const range MS = {0, FB_SIM_MAX_SECONDS * 1e3,
                         "milliseconds from 0 to 100 years"};
static const range SECONDS = {0, FB_SIM_MAX_SECONDS,
                              "seconds from 0 to 100 years"};
static const range UNIX_TIME = {0, 1e11, "Unix seconds from 0 to 1e11"};
static const range BYTES = {0, MAX_RANK_BYTES, "bytes from 0 to 1 PiB a rank"};
static const range CKPT_BYTES = {0, MAX_RANK_BYTES * 2147483647.0,
                                 "bytes from 0 to 1 PiB a rank"};
static const range COUNT = {0, 2147483647.0, "a count from 0 to 2^31-1"};
static const range GPUS = {1, (double)FB_SIM_MAX_GPUS,
                           "ranks from 1 to 100000000"};

/* Refuse the row whose column col (table.column) holds v outside r; NaN
 * is NULL, which every measure leaves out.  0 or -EINVAL. */
static int check(rows *R, const char *col, int64_t id, double v,
                 const range *r)
{
    if (isnan(v) || (v >= r->lo && v <= r->hi))
        return 0;
    fb__sim_errf(R->err, R->err_size, "%s: %s of row %lld is %g: want %s",
                 R->path, col, (long long)id, v, r->want);
    R->bad = 1;
    return -EINVAL;
}

/* A column the reader could not read as its field (not a number). */
static int check_types(rows *R, fb__journal_cursor *c, int64_t id)
{
    const char *col = fb__journal_cursor_bad(c);
    if (!col)
        return 0;
    fb__sim_errf(R->err, R->err_size, "%s: %s of row %lld is not a number "
                 "that fits it", R->path, col, (long long)id);
    R->bad = 1;
    return -EINVAL;
}

/* An int64 field whose NULL reads as -1. */
static double or_null(int64_t v)
{
    return v == -1 ? NAN : (double)v;
}

static int check_run(rows *R, fb__journal_cursor *c,
                     const fb__journal_run_row *r)
{
    int bad = check_types(R, c, r->id) ||
              check(R, "run.nproc", r->id, or_null(r->nproc), &GPUS);
    return bad ? -EINVAL : 0;
}

static int check_attempt(rows *R, fb__journal_cursor *c,
                         const fb__journal_attempt_row *a)
{
    int bad =
        check_types(R, c, a->id) ||
        check(R, "attempt.number", a->id, a->number, &COUNT) ||
        check(R, "attempt.started_at", a->id, a->started_at, &UNIX_TIME) ||
        check(R, "attempt.ready_at", a->id, a->ready_at, &UNIX_TIME) ||
        check(R, "attempt.ended_at", a->id, a->ended_at, &UNIX_TIME) ||
        check(R, "attempt.restore_s", a->id, a->restore_s, &SECONDS);
    return bad ? -EINVAL : 0;
}

static int check_incident(rows *R, fb__journal_cursor *c,
                          const fb__journal_incident_row *in)
{
    int bad = check_types(R, c, in->id) ||
              check(R, "incident.detected_at", in->id, in->detected_at,
                    &UNIX_TIME) ||
              check(R, "incident.detect_ms", in->id, in->detect_ms, &MS);
    return bad ? -EINVAL : 0;
}

static int check_checkpoint(rows *R, fb__journal_cursor *c,
                            const fb__journal_checkpoint_row *k)
{
    int bad =
        check_types(R, c, k->id) ||
        check(R, "checkpoint.committed_at", k->id, k->committed_at,
              &UNIX_TIME) ||
        check(R, "checkpoint.stall_ms", k->id, k->stall_ms, &MS) ||
        check(R, "checkpoint.persist_ms", k->id, k->persist_ms, &MS) ||
        check(R, "checkpoint.ranks", k->id, or_null(k->ranks), &COUNT) ||
        check(R, "checkpoint.bytes", k->id, or_null(k->bytes), &CKPT_BYTES);
    return bad ? -EINVAL : 0;
}

/* A restore_done event: its bytes, its time, and the rate of the two. */
static int check_restore(rows *R, fb__journal_cursor *c,
                         const fb__journal_event_row *e)
{
    if (check_types(R, c, e->id) ||
        check(R, "event.bytes", e->id, or_null(e->bytes), &BYTES) ||
        check(R, "event.value_ms", e->id, e->value_ms, &MS))
        return -EINVAL;
    if (!(e->bytes > 0) || !(e->value_ms > 0))
        return 0;
    double bps = (double)e->bytes / (e->value_ms / 1e3);
    if (bps <= MAX_RANK_BPS)
        return 0;
    fb__sim_errf(R->err, R->err_size, "%s: event row %lld restores %lld "
                 "bytes in %g ms: faster than 1 PiB/s for one rank",
                 R->path, (long long)e->id, (long long)e->bytes, e->value_ms);
    R->bad = 1;
    return -EINVAL;
}

/* R->att is in id order (the reader reads ORDER BY id, and ids are
 * unique): a binary search. */
static attempt *find_attempt(rows *R, int64_t id)
{
    size_t lo = 0, hi = R->natt;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (R->att[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < R->natt && R->att[lo].id == id ? &R->att[lo] : NULL;
}

/* Read every table the measures need into R.  0, or the reader's code. */
static int read_rows(fb__journal_ro *jr, rows *R)
{
    fb__journal_cursor *c = NULL;
    size_t cap = 0;
    int rc;
    fb__journal_run_row run;
    if ((rc = fb__journal_rows(jr, FB__JOURNAL_RUN, &c)))
        return rc;
    while ((rc = fb__journal_next_run(c, &run)) == 1) {
        if ((rc = check_run(R, c, &run)))
            break;
        R->gpus = run.nproc; /* the last run, NULL: -1 */
    }
    fb__journal_rows_close(c);
    if (rc)
        return rc;

    fb__journal_attempt_row a;
    if ((rc = fb__journal_rows(jr, FB__JOURNAL_ATTEMPT, &c)))
        return rc;
    while ((rc = fb__journal_next_attempt(c, &a)) == 1) {
        if ((rc = check_attempt(R, c, &a)))
            break;
        if ((rc = push((void **)&R->att, &R->natt, &cap, sizeof *R->att)))
            break;
        if (a.number >= 1 && a.restore_s > 0)
            mean_add(&R->attempt_restore, a.restore_s);
        R->att[R->natt++] = (attempt){
            .id = a.id, .run_id = a.run_id, .number = a.number,
            .started_at = a.started_at, .ready_at = a.ready_at,
            .ended_at = a.ended_at, .last_detected_at = NAN};
    }
    fb__journal_rows_close(c);
    if (rc)
        return rc;

    fb__journal_incident_row in;
    if ((rc = fb__journal_rows(jr, FB__JOURNAL_INCIDENT, &c)))
        return rc;
    while ((rc = fb__journal_next_incident(c, &in)) == 1) {
        if ((rc = check_incident(R, c, &in)))
            break;
        attempt *p = find_attempt(R, in.attempt_id);
        if (p && !isnan(in.detected_at) &&
            (isnan(p->last_detected_at) || in.detected_at > p->last_detected_at))
            p->last_detected_at = in.detected_at;
        const char *k = in.kind ? in.kind : "";
        if (!strcmp(k, "crash") || !strcmp(k, "error_exit") ||
            !strcmp(k, "node_failure")) {
            R->ncrash++;
            mean_add(&R->crash, in.detect_ms);
        } else if (!strcmp(k, "hang")) {
            R->nhang++;
            mean_add(&R->hang, in.detect_ms);
        }
    }
    fb__journal_rows_close(c);
    if (rc)
        return rc;

    fb__journal_checkpoint_row k;
    cap = 0;
    if ((rc = fb__journal_rows(jr, FB__JOURNAL_CHECKPOINT, &c)))
        return rc;
    while ((rc = fb__journal_next_checkpoint(c, &k)) == 1) {
        if (!k.status || strcmp(k.status, "complete"))
            continue;
        if ((rc = check_checkpoint(R, c, &k)))
            break;
        mean_add(&R->stall, k.stall_ms);
        mean_add(&R->persist, k.persist_ms);
        if (k.bytes > 0 && k.ranks > 0)
            mean_add(&R->ckpt_rank_bytes, (double)k.bytes / k.ranks);
        if ((rc = push((void **)&R->ck, &R->nck, &cap, sizeof *R->ck)))
            break;
        R->ck[R->nck++] = (ckpt){.id = k.id, .attempt_id = k.attempt_id,
                                 .committed_at = k.committed_at,
                                 .stall_ms = k.stall_ms};
    }
    fb__journal_rows_close(c);
    if (rc)
        return rc;

    fb__journal_event_row e;
    if ((rc = fb__journal_rows(jr, FB__JOURNAL_EVENT, &c)))
        return rc;
    while ((rc = fb__journal_next_event(c, &e)) == 1) {
        if (!e.kind || strcmp(e.kind, "restore_done"))
            continue;
        if ((rc = check_restore(R, c, &e)))
            break;
        if (e.bytes <= 0 || !(e.value_ms > 0))
            continue;
        int tier = FB_SIM_TIER_STORAGE;
        for (int i = 0; e.source && i < FB_SIM_NTIERS; i++)
            if (!strcmp(e.source, fb__sim_tier_name(i)))
                tier = i;
        R->restore_bytes[tier] += (double)e.bytes;
        R->restore_secs[tier] += e.value_ms / 1e3;
        R->nrestore[tier]++;
        mean_add(&R->restore_event_bytes, (double)e.bytes);
    }
    fb__journal_rows_close(c);
    return rc;
}

/* By attempt, then commit time (unknown first, as SQL sorts NULL), then
 * id. */
static int ckpt_order(const void *x, const void *y)
{
    const ckpt *a = x, *b = y;
    if (a->attempt_id != b->attempt_id)
        return a->attempt_id < b->attempt_id ? -1 : 1;
    int na = isnan(a->committed_at), nb = isnan(b->committed_at);
    if (na != nb)
        return na ? -1 : 1;
    if (!na && a->committed_at != b->committed_at)
        return a->committed_at < b->committed_at ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

/* Compute time between consecutive complete commits of one attempt, less
 * the stall of the later one; gaps that are not positive left out. */
static double interval_s(rows *R)
{
    mean m = {0};
    if (R->nck > 1) /* none: R->ck is NULL, which qsort may not take */
        qsort(R->ck, R->nck, sizeof *R->ck, ckpt_order);
    for (size_t i = 1; i < R->nck; i++) {
        if (R->ck[i].attempt_id != R->ck[i - 1].attempt_id)
            continue;
        double gap = R->ck[i].committed_at - R->ck[i - 1].committed_at -
                     R->ck[i].stall_ms / 1e3;
        if (gap > 0)
            mean_add(&m, gap);
    }
    return mean_of(&m);
}

/* Attempts by run, number, then id: where an attempt's predecessor is. */
static int by_number(const void *x, const void *y)
{
    const attempt *a = *(const attempt *const *)x;
    const attempt *b = *(const attempt *const *)y;
    if (a->run_id != b->run_id)
        return a->run_id < b->run_id ? -1 : 1;
    if (a->number != b->number)
        return a->number < b->number ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

/* The attempt before a: of its run, numbered one less, the newest (by
 * id) written before it; NULL when there is none.  A journal with
 * several attempts of one number (not one `firebreak run` writes) gives
 * each attempt one predecessor at most, not every pair.  idx: every
 * attempt, sorted by by_number(). */
static const attempt *predecessor(const attempt *const *idx, size_t n,
                                  const attempt *a)
{
    attempt key = {.run_id = a->run_id, .number = a->number - 1,
                   .id = a->id};
    const attempt *k = &key;
    size_t lo = 0, hi = n; /* first entry after key */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (by_number(&idx[mid], &k) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return NULL;
    const attempt *p = idx[lo - 1];
    return p->run_id == a->run_id && p->number == a->number - 1 ? p : NULL;
}

/* For every ready attempt after the first, from the end of the one before
 * it (its last detection, else its end, else this one's start) to ready,
 * into *out.  0, -ENOMEM, or -EINVAL (message in R->err) for an attempt
 * ready before the one before it ended. */
static int restart_s(const rows *R, double *out, int64_t *samples)
{
    mean m = {0};
    *samples = 0;
    *out = -1;
    if (R->natt == 0)
        return 0;
    const attempt **idx = malloc(R->natt * sizeof *idx);
    if (!idx)
        return -ENOMEM;
    for (size_t i = 0; i < R->natt; i++)
        idx[i] = &R->att[i];
    qsort(idx, R->natt, sizeof *idx, by_number);
    int rc = 0;
    for (size_t i = 0; i < R->natt; i++) {
        const attempt *a = &R->att[i];
        if (a->number < 1 || isnan(a->ready_at))
            continue;
        const attempt *p = predecessor(idx, R->natt, a);
        if (!p)
            continue;
        double from = !isnan(p->last_detected_at) ? p->last_detected_at
                      : !isnan(p->ended_at)       ? p->ended_at
                                                  : a->started_at;
        if (a->ready_at < from) {
            fb__sim_errf(R->err, R->err_size, "%s: attempt.ready_at of "
                         "row %lld is before attempt %lld ended or its "
                         "failure was detected", R->path,
                         (long long)a->id, (long long)p->id);
            rc = -EINVAL;
            break;
        }
        (*samples)++;
        mean_add(&m, a->ready_at - from);
    }
    free(idx);
    *out = mean_of(&m);
    return rc;
}

/* Means of values in range can still be out of it (a restart from
 * timestamps far apart) or contradict each other. */
static int check_measured(const fb__sim_measured *m, const char *path,
                          char *err, size_t size)
{
    const struct {
        const char *what;
        double v;
    } d[] = {
        {"the mean stall (checkpoint.stall_ms)", m->stall_s},
        {"the mean persist (checkpoint.persist_ms)", m->persist_s},
        {"the mean crash detection (incident.detect_ms)", m->detect_crash_s},
        {"the mean hang detection (incident.detect_ms)", m->detect_hang_s},
        {"the mean restart (attempt.ready_at)", m->restart_s},
        {"the mean interval between commits (checkpoint.committed_at)",
         m->interval_s},
    };
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++)
        if (d[i].v > FB_SIM_MAX_SECONDS)
            return fb__sim_errf(err, size, "%s: %s is %.3g s, more than "
                                "100 years", path, d[i].what, d[i].v);
    if (m->restore_s > 0 && m->restart_s >= 0 && m->restore_s > m->restart_s)
        return fb__sim_errf(err, size, "%s: the mean restore "
                            "(attempt.restore_s, %.3g s) is longer than the "
                            "mean restart it is part of (%.3g s)", path,
                            m->restore_s, m->restart_s);
    return 0;
}

int fb__sim_read_run(const char *run_dir, fb__sim_measured *m, char *err,
                     size_t size)
{
    memset(m, 0, sizeof *m);
    m->stall_s = m->persist_s = m->detect_crash_s = m->detect_hang_s = -1;
    m->restart_s = m->interval_s = -1;
    m->gpus = -1;
    m->restore_s = m->bytes_per_rank = -1;
    for (int i = 0; i < FB_SIM_NTIERS; i++)
        m->restore_bps[i] = -1;
    char path[4096];
    if (fb__rundir_path(path, sizeof path, run_dir, FB__RUNDIR_JOURNAL, 0))
        return fb__sim_errf(err, size, "path too long");
    struct stat sb;
    if (stat(path, &sb) != 0) {
        int e = errno, rc_where;
        /* where the runs are, as `firebreak report` says it */
        if (stat(run_dir, &sb))
            return fb__sim_errf(err, size, "%s", strerror(errno));
        fb__rundir_where *w = malloc(sizeof *w);
        char where[1024];
        int k = 0;
        if (w && S_ISDIR(sb.st_mode)) {
            fb__rundir_where_find(run_dir, w);
            k = fb__rundir_where_say(w, run_dir, where, sizeof where);
        }
        if (k == FB__RUNDIR_WHERE_BELOW)
            rc_where = fb__sim_errf(err, size, "no journal.sqlite here, but %s: give one",
                                    where);
        else if (k == FB__RUNDIR_WHERE_INSIDE)
            rc_where = fb__sim_errf(err, size, "no journal.sqlite here: %s: give that one",
                                    where);
        else
            rc_where = fb__sim_errf(err, size, "no journal.sqlite in this directory (%s)",
                                    strerror(e));
        free(w);
        return rc_where;
    }
    fb__journal_ro *jr;
    int rc = fb__journal_open_ro(path, &jr, err, size);
    if (rc)
        return rc;
    rows R = {.path = path, .err = err, .err_size = size, .gpus = -1};
    rc = read_rows(jr, &R);
    if (rc == -ENOMEM) {
        snprintf(err, size, "%s: out of memory", path);
    } else if (rc && !R.bad) {
        snprintf(err, size, "%s", fb__journal_ro_errmsg(jr));
    } else if (!rc) {
        /* avg(x) / 1e3, as the SQL this replaced: the mean, then seconds */
        m->samples_stall = (int64_t)R.nck;
        m->stall_s = R.stall.n ? mean_of(&R.stall) / 1e3 : -1;
        m->persist_s = R.persist.n ? mean_of(&R.persist) / 1e3 : -1;
        m->samples_detect = R.ncrash + R.nhang;
        m->detect_crash_s = R.crash.n ? mean_of(&R.crash) / 1e3 : -1;
        m->detect_hang_s = R.hang.n ? mean_of(&R.hang) / 1e3 : -1;
        rc = restart_s(&R, &m->restart_s, &m->samples_restart);
        if (rc == -ENOMEM)
            snprintf(err, size, "%s: out of memory", path);
        m->interval_s = interval_s(&R);
        m->gpus = R.gpus;
        for (int i = 0; i < FB_SIM_NTIERS; i++) {
            m->samples_restore[i] = R.nrestore[i];
            if (R.nrestore[i] && R.restore_secs[i] > 0)
                m->restore_bps[i] = R.restore_bytes[i] / R.restore_secs[i];
        }
        m->restore_s = mean_of(&R.attempt_restore);
        m->bytes_per_rank = R.restore_event_bytes.n
                                ? mean_of(&R.restore_event_bytes)
                                : mean_of(&R.ckpt_rank_bytes);
    }
    fb__journal_close_ro(jr);
    free(R.att);
    free(R.ck);
    if (rc)
        return rc;
    if ((rc = check_measured(m, path, err, size)))
        return rc;
    if (m->samples_stall == 0 && m->samples_detect == 0 &&
        m->samples_restart == 0)
        return fb__sim_errf(err, size,
                            "the journal has no complete checkpoint, "
                            "detected failure or restart to measure");
    return 0;
}
