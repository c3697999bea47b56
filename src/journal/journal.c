/*
 * journal.c -- the run journal in SQLite (see journal.h, schema.sql).
 *
 * The supervisor is the only writer.  WAL mode lets `firebreak report` and
 * the agent read while a run is live; synchronous=NORMAL keeps a commit off
 * the supervisor's critical path (WAL still never corrupts on a crash; the
 * last transactions may be lost on power failure, never half-applied).
 */
#include "journal/journal.h"

#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "firebreak/firebreak.h"

/* schema.sql, embedded at build time (see CMakeLists.txt). */
extern const char fb__journal_schema_sql[];

typedef struct sample {
    int64_t attempt_id, step;
    int rank;
    double time, step_time_ms;
} sample;

struct fb__journal {
    sqlite3 *db;
    int64_t run_id;
    sample *samples;
    size_t nsamples, cap;
};

static int fail(fb__journal *j, int rc)
{
    fprintf(stderr, "firebreak: journal: %s\n", sqlite3_errmsg(j->db));
    return rc == SQLITE_FULL ? -ENOSPC : -EIO;
}

int fb__journal_open(fb__journal **out, const char *path, char *err, size_t errsz)
{
    fb__journal *j = calloc(1, sizeof *j);
    if (!j)
        return -ENOMEM;
    int rc = sqlite3_open_v2(path, &j->db,
                             SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
                             SQLITE_OPEN_FULLMUTEX, NULL);
    if (rc != SQLITE_OK) {
        snprintf(err, errsz, "cannot open %s: %s", path,
                 j->db ? sqlite3_errmsg(j->db) : "out of memory");
        sqlite3_close(j->db);
        free(j);
        return -EIO;
    }
    sqlite3_busy_timeout(j->db, 2000);
    char *msg = NULL;
    rc = sqlite3_exec(j->db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
                      NULL, NULL, &msg);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(j->db, fb__journal_schema_sql, NULL, NULL, &msg);
    if (rc == SQLITE_OK) {
        char sql[256];
        snprintf(sql, sizeof sql,
                 "INSERT OR IGNORE INTO meta VALUES('schema_version','%s');"
                 "INSERT OR IGNORE INTO meta VALUES('writer','firebreak %s');",
                 FB__JOURNAL_SCHEMA_VERSION, fb_version());
        rc = sqlite3_exec(j->db, sql, NULL, NULL, &msg);
    }
    if (rc != SQLITE_OK) {
        snprintf(err, errsz, "cannot initialize %s: %s", path, msg ? msg : "?");
        sqlite3_free(msg);
        sqlite3_close(j->db);
        free(j);
        return -EIO;
    }
    *out = j;
    return 0;
}

void fb__journal_close(fb__journal *j)
{
    if (!j)
        return;
    fb__journal_flush(j);
    /* Leave a single self-contained file behind: readers of a finished
     * run need no -wal/-shm files (and read-only readers cannot remove
     * them). */
    sqlite3_exec(j->db, "PRAGMA journal_mode=DELETE", NULL, NULL, NULL);
    sqlite3_close(j->db);
    free(j->samples);
    free(j);
}

const char *fb__journal_errmsg(fb__journal *j)
{
    return j ? sqlite3_errmsg(j->db) : "no journal";
}

/* Bind helpers: NULL for "absent" values. */
static void bind_text(sqlite3_stmt *s, int i, const char *v)
{
    if (v)
        sqlite3_bind_text(s, i, v, -1, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(s, i);
}

static int step_done(fb__journal *j, sqlite3_stmt *s)
{
    int rc = sqlite3_step(s);
    sqlite3_finalize(s);
    return (rc == SQLITE_DONE || rc == SQLITE_ROW) ? 0 : fail(j, rc);
}

static int prepare(fb__journal *j, const char *sql, sqlite3_stmt **s)
{
    int rc = sqlite3_prepare_v2(j->db, sql, -1, s, NULL);
    return rc == SQLITE_OK ? 0 : fail(j, rc);
}

int fb__journal_begin_run(fb__journal *j, const fb__journal_run *r)
{
    sqlite3_stmt *s;
    if (prepare(j, "INSERT INTO run(name, job_id, run_dir, command, launcher,"
                   " nproc, nnodes, hostname, max_restarts, hang_timeout_s,"
                   " options, started_at) VALUES(?,?,?,?,?,?,?,?,?,?,?,?)", &s))
        return -EIO;
    bind_text(s, 1, r->name);
    bind_text(s, 2, r->job_id);
    bind_text(s, 3, r->run_dir);
    bind_text(s, 4, r->command_json);
    bind_text(s, 5, r->launcher);
    sqlite3_bind_int(s, 6, r->nproc);
    sqlite3_bind_int(s, 7, r->nnodes);
    bind_text(s, 8, r->hostname);
    sqlite3_bind_int(s, 9, r->max_restarts);
    sqlite3_bind_double(s, 10, r->hang_timeout_s);
    bind_text(s, 11, r->options_json ? r->options_json : "{}");
    sqlite3_bind_double(s, 12, r->started_at);
    int rc = step_done(j, s);
    if (!rc)
        j->run_id = sqlite3_last_insert_rowid(j->db);
    return rc;
}

int fb__journal_end_run(fb__journal *j, double ended_at, const char *status,
                        int exit_code, const char *reason)
{
    fb__journal_flush(j);
    sqlite3_stmt *s;
    if (prepare(j, "UPDATE run SET ended_at=?, status=?, exit_code=?, reason=?"
                   " WHERE id=?", &s))
        return -EIO;
    sqlite3_bind_double(s, 1, ended_at);
    bind_text(s, 2, status);
    sqlite3_bind_int(s, 3, exit_code);
    bind_text(s, 4, reason);
    sqlite3_bind_int64(s, 5, j->run_id);
    return step_done(j, s);
}

int fb__journal_begin_attempt(fb__journal *j, int number, double started_at,
                              int64_t *attempt_id_out)
{
    sqlite3_stmt *s;
    if (prepare(j, "INSERT INTO attempt(run_id, number, started_at)"
                   " VALUES(?,?,?)", &s))
        return -EIO;
    sqlite3_bind_int64(s, 1, j->run_id);
    sqlite3_bind_int(s, 2, number);
    sqlite3_bind_double(s, 3, started_at);
    int rc = step_done(j, s);
    if (!rc)
        *attempt_id_out = sqlite3_last_insert_rowid(j->db);
    return rc;
}

static int column_allowed(const char *col, const char *const *allowed)
{
    for (; *allowed; allowed++)
        if (!strcmp(col, *allowed))
            return 1;
    return 0;
}

static int attempt_set(fb__journal *j, int64_t id, const char *column,
                       int type, double d, int64_t i, const char *t)
{
    static const char *const cols[] = {"launched_at", "ready_at", "ended_at",
        "restore_s", "restored_step", "start_step", "end_step", "outcome",
        "nodes", NULL};
    if (!column_allowed(column, cols))
        return -EINVAL;
    char sql[128];
    snprintf(sql, sizeof sql, "UPDATE attempt SET %s=? WHERE id=?", column);
    sqlite3_stmt *s;
    if (prepare(j, sql, &s))
        return -EIO;
    if (type == 0)
        sqlite3_bind_double(s, 1, d);
    else if (type == 1)
        sqlite3_bind_int64(s, 1, i);
    else
        bind_text(s, 1, t);
    sqlite3_bind_int64(s, 2, id);
    return step_done(j, s);
}

int fb__journal_attempt_real(fb__journal *j, int64_t id, const char *c, double v)
{
    return attempt_set(j, id, c, 0, v, 0, NULL);
}

int fb__journal_attempt_int(fb__journal *j, int64_t id, const char *c, int64_t v)
{
    return attempt_set(j, id, c, 1, 0, v, NULL);
}

int fb__journal_attempt_text(fb__journal *j, int64_t id, const char *c,
                             const char *v)
{
    return attempt_set(j, id, c, 2, 0, 0, v);
}

int fb__journal_add_incident(fb__journal *j, const fb__journal_incident *in,
                         int64_t *id_out)
{
    sqlite3_stmt *s;
    if (prepare(j, "INSERT INTO incident(run_id, attempt_id, kind, occurred_at,"
                   " detected_at, detect_ms, rank, node, signal, exit_code, phase,"
                   " step, lost_s, injected, detail, last_lines, fr_verdict,"
                   " health, category, component, evidence)"
                   " VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", &s))
        return -EIO;
    sqlite3_bind_int64(s, 1, j->run_id);
    sqlite3_bind_int64(s, 2, in->attempt_id);
    bind_text(s, 3, in->kind);
    sqlite3_bind_double(s, 4, in->occurred_at);
    sqlite3_bind_double(s, 5, in->detected_at);
    sqlite3_bind_double(s, 6, in->detect_ms);
    if (in->rank >= 0)
        sqlite3_bind_int(s, 7, in->rank);
    else
        sqlite3_bind_null(s, 7);
    bind_text(s, 8, in->node);
    if (in->signal > 0)
        sqlite3_bind_int(s, 9, in->signal);
    else
        sqlite3_bind_null(s, 9);
    if (in->has_exit_code)
        sqlite3_bind_int(s, 10, in->exit_code);
    else
        sqlite3_bind_null(s, 10);
    bind_text(s, 11, in->phase);
    if (in->step >= 0)
        sqlite3_bind_int64(s, 12, in->step);
    else
        sqlite3_bind_null(s, 12);
    if (in->lost_s >= 0)
        sqlite3_bind_double(s, 13, in->lost_s);
    else
        sqlite3_bind_null(s, 13);
    bind_text(s, 14, in->injected);
    bind_text(s, 15, in->detail ? in->detail : "");
    bind_text(s, 16, in->last_lines);
    bind_text(s, 17, in->fr_verdict);
    bind_text(s, 18, in->health);
    bind_text(s, 19, in->category);
    bind_text(s, 20, in->component);
    bind_text(s, 21, in->evidence);
    int rc = step_done(j, s);
    if (!rc && id_out)
        *id_out = sqlite3_last_insert_rowid(j->db);
    return rc;
}

int fb__journal_incident_text(fb__journal *j, int64_t id, const char *column,
                              const char *value)
{
    static const char *const cols[] = {"fr_verdict", "health", "detail",
        "category", "component", "evidence", "last_lines", "injected", NULL};
    if (!column_allowed(column, cols))
        return -EINVAL;
    char sql[128];
    snprintf(sql, sizeof sql, "UPDATE incident SET %s=? WHERE id=?", column);
    sqlite3_stmt *s;
    if (prepare(j, sql, &s))
        return -EIO;
    bind_text(s, 1, value);
    sqlite3_bind_int64(s, 2, id);
    return step_done(j, s);
}

int fb__journal_add_event(fb__journal *j, const fb__journal_event *ev)
{
    sqlite3_stmt *s;
    if (prepare(j, "INSERT INTO event(run_id, attempt_id, time, rank, kind, step,"
                   " code, bytes, value_ms, detail) VALUES(?,?,?,?,?,?,?,?,?,?)", &s))
        return -EIO;
    sqlite3_bind_int64(s, 1, j->run_id);
    sqlite3_bind_int64(s, 2, ev->attempt_id);
    sqlite3_bind_double(s, 3, ev->time);
    if (ev->rank >= 0)
        sqlite3_bind_int(s, 4, ev->rank);
    else
        sqlite3_bind_null(s, 4);
    bind_text(s, 5, ev->kind);
    if (ev->step >= 0)
        sqlite3_bind_int64(s, 6, ev->step);
    else
        sqlite3_bind_null(s, 6);
    sqlite3_bind_int(s, 7, ev->code);
    sqlite3_bind_int64(s, 8, ev->bytes);
    if (ev->value_ms >= 0)
        sqlite3_bind_double(s, 9, ev->value_ms);
    else
        sqlite3_bind_null(s, 9);
    bind_text(s, 10, ev->detail);
    return step_done(j, s);
}

int fb__journal_checkpoint(fb__journal *j, int64_t attempt_id, int64_t step,
                           double committed_at, int ranks, int64_t bytes,
                           double stall_ms, double persist_ms, const char *status)
{
    sqlite3_stmt *s;
    if (prepare(j, "SELECT id FROM checkpoint WHERE attempt_id=? AND step=?", &s))
        return -EIO;
    sqlite3_bind_int64(s, 1, attempt_id);
    sqlite3_bind_int64(s, 2, step);
    int64_t id = -1;
    if (sqlite3_step(s) == SQLITE_ROW)
        id = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    if (id < 0) {
        if (prepare(j, "INSERT INTO checkpoint(committed_at, ranks, bytes,"
                       " stall_ms, persist_ms, status, run_id, attempt_id, step)"
                       " VALUES(?,?,?,?,?,?,?,?,?)", &s))
            return -EIO;
        sqlite3_bind_int64(s, 7, j->run_id);
        sqlite3_bind_int64(s, 8, attempt_id);
        sqlite3_bind_int64(s, 9, step);
    } else {
        if (prepare(j, "UPDATE checkpoint SET committed_at=?, ranks=?, bytes=?,"
                       " stall_ms=?, persist_ms=?, status=? WHERE id=?", &s))
            return -EIO;
        sqlite3_bind_int64(s, 7, id);
    }
    sqlite3_bind_double(s, 1, committed_at);
    sqlite3_bind_int(s, 2, ranks);
    sqlite3_bind_int64(s, 3, bytes);
    sqlite3_bind_double(s, 4, stall_ms);
    sqlite3_bind_double(s, 5, persist_ms);
    bind_text(s, 6, status);
    return step_done(j, s);
}

int fb__journal_sample(fb__journal *j, int64_t attempt_id, int rank,
                       double time, int64_t step, double step_time_ms)
{
    if (j->nsamples == j->cap) {
        size_t cap = j->cap ? j->cap * 2 : 256;
        sample *n = realloc(j->samples, cap * sizeof *n);
        if (!n)
            return -ENOMEM;
        j->samples = n;
        j->cap = cap;
    }
    j->samples[j->nsamples++] = (sample){attempt_id, step, rank, time, step_time_ms};
    return 0;
}

int fb__journal_flush(fb__journal *j)
{
    if (!j || j->nsamples == 0)
        return 0;
    sqlite3_stmt *s;
    if (sqlite3_exec(j->db, "BEGIN", NULL, NULL, NULL) != SQLITE_OK)
        return fail(j, SQLITE_ERROR);
    if (prepare(j, "INSERT INTO step_sample VALUES(?,?,?,?,?,?)", &s)) {
        sqlite3_exec(j->db, "ROLLBACK", NULL, NULL, NULL);
        return -EIO;
    }
    int rc = 0;
    for (size_t i = 0; i < j->nsamples && !rc; i++) {
        const sample *x = &j->samples[i];
        sqlite3_bind_int64(s, 1, j->run_id);
        sqlite3_bind_int64(s, 2, x->attempt_id);
        sqlite3_bind_int(s, 3, x->rank);
        sqlite3_bind_double(s, 4, x->time);
        sqlite3_bind_int64(s, 5, x->step);
        if (x->step_time_ms >= 0)
            sqlite3_bind_double(s, 6, x->step_time_ms);
        else
            sqlite3_bind_null(s, 6);
        int r = sqlite3_step(s);
        if (r != SQLITE_DONE)
            rc = fail(j, r);
        sqlite3_reset(s);
    }
    sqlite3_finalize(s);
    if (sqlite3_exec(j->db, rc ? "ROLLBACK" : "COMMIT", NULL, NULL, NULL) != SQLITE_OK &&
        !rc)
        rc = fail(j, SQLITE_ERROR);
    j->nsamples = 0;
    return rc;
}
