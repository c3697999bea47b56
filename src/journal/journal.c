/*
 * journal.c -- the run journal in SQLite (see journal.h, schema.sql).
 *
 * The supervisor is the only writer.  WAL mode lets `firebreak report` and
 * the agent read while a run is live; synchronous=NORMAL keeps a commit off
 * the supervisor's critical path (WAL still never corrupts on a crash; the
 * last transactions may be lost on power failure, never half-applied).
 *
 * A write that fails is not lost quietly.  When SQLite refuses one for a
 * reason that may pass (a full disk, an I/O error, a lock), it goes into a
 * bounded queue, in order, and every fb__journal_flush() retries the whole
 * queue, and the buffered step samples, in one transaction.  Row ids (run,
 * attempt, incident) are chosen here, not by SQLite, so that the updates
 * that refer to a queued insert still find it; no write reads the
 * database.  A write refused for good (a constraint: a bug), or that finds
 * the queue full, is dropped and counted.  fb__journal_get_status() tells
 * the caller, who must say so: this file prints nothing.
 *
 * The WAL's checkpoints (its pages copied into the database, with the
 * fsyncs) run on a thread of their own, on a connection of its own: left
 * to SQLite, the commit that finds the WAL past 1,000 pages runs one
 * itself, and the supervisor's loop waits for the disk there (17-91 ms
 * seen at 256 ranks, between a crash's detection and the stop).
 */
#include "journal/journal.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
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
    int node, host;      /* indices into names; -1: not known */
    double time, step_time_ms;
} sample;

/* Where a rank of the placed attempt runs: indices into names, -1. */
typedef struct place {
    int node, host;
} place;

/* Ranks of one attempt the journal places (fb__journal_place). */
#define MAX_PLACED_RANKS (1 << 20)

/* One row write, kept until it is in the database. */
enum { V_NULL, V_INT, V_REAL, V_TEXT };
typedef struct jval {
    int type;
    int64_t i;
    double r;
    char *t;
} jval;

#define MAX_VALS 24
typedef struct jop {
    char *sql;                   /* owned when own_sql, else a literal */
    int own_sql;
    int n;
    int oom;
    jval v[MAX_VALS];
} jop;

/* Bounds of what waits in memory while the database cannot be written. */
#define DEFAULT_MAX_OPS 4096
#define DEFAULT_MAX_SAMPLES 65536
/* Samples are written in batches of this many when nothing fails. */
#define SAMPLE_BATCH 4096
/* Prepared statements kept, by SQL text: a statement is compiled once,
 * not at every row (at 256 ranks checkpointing every 100 ms, compiling
 * was most of the supervisor's time in SQLite). */
#define MAX_STMTS 16

typedef struct jstmt {
    char *sql;
    sqlite3_stmt *st;
} jstmt;

struct fb__journal {
    sqlite3 *db;
    char path[PATH_MAX];
    int64_t run_id;
    int64_t last_attempt_id, last_incident_id;
    sample *samples;
    size_t nsamples, cap;
    jop *ops;
    size_t nops, cap_ops;
    size_t max_ops, max_samples;
    fb__journal_status st;
    /* Node and host names, interned (kept until close): samples waiting
     * in the queue refer to them by index. */
    char **names;
    size_t nnames, cap_names;
    int64_t placed_attempt;      /* the attempt of places[]; 0: none */
    place *places;               /* by rank */
    size_t nplaces;
    int batch;                   /* open fb__journal_batch_begin()s */
    struct {                     /* the checkpointer thread            */
        pthread_t tid;
        pthread_mutex_t mu;
        pthread_cond_t cv;
        int started, due, stop;
        sqlite3 *db;             /* its connection                     */
    } ckp;
    jstmt stmts[MAX_STMTS];      /* compiled statements, by SQL text */
    int nstmts, next_stmt;       /* slots used; the next to reuse when full */
};

static int errno_of(int sqlite_rc)
{
    return (sqlite_rc & 0xff) == SQLITE_FULL ? -ENOSPC : -EIO;
}

/* Errors that may pass: keep the write and retry it. */
static int transient(int sqlite_rc)
{
    switch (sqlite_rc & 0xff) {
    case SQLITE_FULL: case SQLITE_IOERR: case SQLITE_BUSY: case SQLITE_LOCKED:
    case SQLITE_CANTOPEN: case SQLITE_NOMEM: case SQLITE_PROTOCOL:
    case SQLITE_READONLY:
        return 1;
    default:
        return 0;
    }
}

/* Remember what went wrong: SQLite's message and the system's error. */
static void note_error(fb__journal *j, int sqlite_rc)
{
    int sys = sqlite3_system_errno(j->db);
    const char *msg = sqlite3_errmsg(j->db);
    if (!msg || !strcmp(msg, "not an error"))
        msg = sqlite3_errstr(sqlite_rc);
    if (sys)
        snprintf(j->st.last_error, sizeof j->st.last_error, "%s (%s)", msg,
                 strerror(sys));
    else
        snprintf(j->st.last_error, sizeof j->st.last_error, "%s", msg);
    j->st.failures++;
}

static void op_free(jop *op)
{
    for (int i = 0; i < op->n; i++)
        free(op->v[i].t);
    if (op->own_sql)
        free(op->sql);
    memset(op, 0, sizeof *op);
}

/* An op on a string literal (kept as is) ... */
static void op_init(jop *op, const char *sql)
{
    memset(op, 0, sizeof *op);
    op->sql = (char *)sql;
}

/* ... or on SQL built by the caller (copied). */
static void op_init_copy(jop *op, const char *sql)
{
    memset(op, 0, sizeof *op);
    op->sql = strdup(sql);
    op->own_sql = 1;
    op->oom = !op->sql;
}

static jval *op_val(jop *op, int type)
{
    if (op->n == MAX_VALS) {
        op->oom = 1;
        return NULL;
    }
    jval *v = &op->v[op->n++];
    v->type = type;
    return v;
}

static void op_int(jop *op, int64_t x)
{
    jval *v = op_val(op, V_INT);
    if (v)
        v->i = x;
}

static void op_real(jop *op, double x)
{
    jval *v = op_val(op, V_REAL);
    if (v)
        v->r = x;
}

static void op_null(jop *op)
{
    op_val(op, V_NULL);
}

/* NULL for "absent" values. */
static void op_text(jop *op, const char *x)
{
    if (!x) {
        op_null(op);
        return;
    }
    jval *v = op_val(op, V_TEXT);
    if (v && !(v->t = strdup(x)))
        op->oom = 1;
}

/* The compiled statement of sql, from the cache or compiled now (and
 * kept, replacing the oldest when the cache is full); NULL with *rc set
 * when SQLite refuses it. */
static sqlite3_stmt *stmt_for(fb__journal *j, const char *sql, int *rc)
{
    for (int i = 0; i < j->nstmts; i++)
        if (!strcmp(j->stmts[i].sql, sql))
            return j->stmts[i].st;
    sqlite3_stmt *st;
    *rc = sqlite3_prepare_v3(j->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &st, NULL);
    if (*rc != SQLITE_OK)
        return NULL;
    char *copy = strdup(sql);
    if (!copy) {
        sqlite3_finalize(st);
        *rc = SQLITE_NOMEM;
        return NULL;
    }
    int k = j->nstmts < MAX_STMTS ? j->nstmts++ : j->next_stmt++ % MAX_STMTS;
    if (j->stmts[k].st) {
        sqlite3_finalize(j->stmts[k].st);
        free(j->stmts[k].sql);
    }
    j->stmts[k] = (jstmt){copy, st};
    return st;
}

static void stmts_free(fb__journal *j)
{
    for (int i = 0; i < j->nstmts; i++) {
        sqlite3_finalize(j->stmts[i].st);
        free(j->stmts[i].sql);
    }
    j->nstmts = j->next_stmt = 0;
}

/* Run one write; SQLITE_OK, or SQLite's error (noted). */
static int exec_op(fb__journal *j, const jop *op)
{
    int rc = SQLITE_OK;
    sqlite3_stmt *st = stmt_for(j, op->sql, &rc);
    if (!st) {
        note_error(j, rc);
        return rc;
    }
    for (int i = 0; i < op->n; i++) {
        const jval *v = &op->v[i];
        if (v->type == V_INT)
            sqlite3_bind_int64(st, i + 1, v->i);
        else if (v->type == V_REAL)
            sqlite3_bind_double(st, i + 1, v->r);
        else if (v->type == V_TEXT)
            sqlite3_bind_text(st, i + 1, v->t, -1, SQLITE_STATIC);
        else
            sqlite3_bind_null(st, i + 1);
    }
    rc = sqlite3_step(st);
    if (rc == SQLITE_DONE || rc == SQLITE_ROW)
        rc = SQLITE_OK;
    else
        note_error(j, rc);
    /* Ready for the next row; the op's texts are bound without a copy
     * and are freed after this. */
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return rc;
}

static void drop_op(fb__journal *j, jop *op)
{
    j->st.dropped_rows++;
    op_free(op);
}

/* Write now, or queue for a retry; 0 when written or queued. */
static int submit(fb__journal *j, jop *op)
{
    if (op->oom) {
        snprintf(j->st.last_error, sizeof j->st.last_error, "out of memory");
        drop_op(j, op);
        return -ENOMEM;
    }
    if (j->nops == 0 && !j->batch) {
        int rc = exec_op(j, op);
        if (rc == SQLITE_OK) {
            op_free(op);
            return 0;
        }
        if (!transient(rc)) {
            drop_op(j, op);
            return -EIO;
        }
        j->st.failing = 1;
    }
    /* A batch that fills the queue is written now, not dropped. */
    if (j->nops == j->max_ops && j->batch && !j->st.failing)
        fb__journal_flush(j);
    if (j->nops == j->max_ops) {
        drop_op(j, op);
        return -ENOSPC;
    }
    if (j->nops == j->cap_ops) {
        size_t cap = j->cap_ops ? j->cap_ops * 2 : 16;
        jop *n = realloc(j->ops, cap * sizeof *n);
        if (!n) {
            drop_op(j, op);
            return -ENOMEM;
        }
        j->ops = n;
        j->cap_ops = cap;
    }
    j->ops[j->nops++] = *op; /* the queue owns its strings now */
    return 0;
}

static int64_t max_id(fb__journal *j, const char *table)
{
    char sql[64];
    snprintf(sql, sizeof sql, "SELECT coalesce(max(id), 0) FROM %s", table);
    sqlite3_stmt *st;
    int64_t id = 0;
    if (sqlite3_prepare_v2(j->db, sql, -1, &st, NULL) == SQLITE_OK) {
        if (sqlite3_step(st) == SQLITE_ROW)
            id = sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
    }
    return id;
}

/* Columns added by minor versions after 1.0, all nullable: a journal of
 * an older minor that this writer reopens gains them (ALTER TABLE), and
 * its meta.schema_version becomes this writer's. */
static const struct { const char *table, *column, *type; } added_columns[] = {
    {"incident", "host", "TEXT"},           /* 1.1: node identity */
    {"event", "node", "TEXT"},
    {"event", "host", "TEXT"},
    {"step_sample", "node", "TEXT"},
    {"step_sample", "host", "TEXT"},
    {"event", "source", "TEXT"},            /* 1.1: restore_done's tier */
};

static int has_column(sqlite3 *db, const char *table, const char *column)
{
    char sql[128];
    snprintf(sql, sizeof sql, "PRAGMA table_info(%s)", table);
    sqlite3_stmt *st;
    int found = 0;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        return 0;
    while (!found && sqlite3_step(st) == SQLITE_ROW) {
        const unsigned char *name = sqlite3_column_text(st, 1);
        found = name && !strcmp((const char *)name, column);
    }
    sqlite3_finalize(st);
    return found;
}

static int migrate(sqlite3 *db, char **msg)
{
    int rc = SQLITE_OK;
    for (size_t i = 0; rc == SQLITE_OK &&
                       i < sizeof added_columns / sizeof added_columns[0]; i++) {
        if (has_column(db, added_columns[i].table, added_columns[i].column))
            continue;
        char sql[160];
        snprintf(sql, sizeof sql, "ALTER TABLE %s ADD COLUMN %s %s",
                 added_columns[i].table, added_columns[i].column,
                 added_columns[i].type);
        rc = sqlite3_exec(db, sql, NULL, NULL, msg);
    }
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(db, "UPDATE meta SET value='" FB__JOURNAL_SCHEMA_VERSION
                              "' WHERE key='schema_version' AND value='1.0'",
                          NULL, NULL, msg);
    return rc;
}

/* WAL pages after a commit from which a checkpoint is due (SQLite's own
 * default for its automatic ones). */
#define WAL_CHECKPOINT_PAGES 1000

static int wal_hook(void *arg, sqlite3 *db, const char *name, int pages)
{
    fb__journal *j = arg;
    (void)db;
    (void)name;
    if (pages >= WAL_CHECKPOINT_PAGES) {
        pthread_mutex_lock(&j->ckp.mu);
        j->ckp.due = 1;
        pthread_cond_signal(&j->ckp.cv);
        pthread_mutex_unlock(&j->ckp.mu);
    }
    return SQLITE_OK;
}

static void *checkpointer(void *arg)
{
    fb__journal *j = arg;
    pthread_mutex_lock(&j->ckp.mu);
    while (!j->ckp.stop) {
        if (!j->ckp.due) {
            pthread_cond_wait(&j->ckp.cv, &j->ckp.mu);
            continue;
        }
        j->ckp.due = 0;
        pthread_mutex_unlock(&j->ckp.mu);
        /* PASSIVE: copies what no reader still needs, never waits for the
         * writer; what it leaves is copied at a later one. */
        (void)sqlite3_wal_checkpoint_v2(j->ckp.db, NULL, SQLITE_CHECKPOINT_PASSIVE,
                                        NULL, NULL);
        pthread_mutex_lock(&j->ckp.mu);
    }
    pthread_mutex_unlock(&j->ckp.mu);
    return NULL;
}

/* The checkpointer, and the writer's commits no longer checkpoint; where
 * it cannot start, SQLite's automatic checkpoints stay. */
static void checkpointer_start(fb__journal *j, const char *path)
{
    /* A connection sees the WAL once it has read the database: until
     * then its checkpoints do nothing (and say the log is not there). */
    sqlite3_stmt *st = NULL;
    int wal = 0;
    if (sqlite3_open_v2(path, &j->ckp.db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_FULLMUTEX,
                        NULL) == SQLITE_OK &&
        sqlite3_prepare_v2(j->ckp.db, "PRAGMA journal_mode", -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW) {
        const char *mode = (const char *)sqlite3_column_text(st, 0);
        wal = mode && !strcmp(mode, "wal");
    }
    sqlite3_finalize(st);
    if (!wal) {
        sqlite3_close(j->ckp.db);
        j->ckp.db = NULL;
        return;
    }
    pthread_mutex_init(&j->ckp.mu, NULL);
    pthread_cond_init(&j->ckp.cv, NULL);
    /* Signals stay with the caller's threads (the supervisor's signalfd). */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    j->ckp.started = pthread_create(&j->ckp.tid, NULL, checkpointer, j) == 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (!j->ckp.started) {
        pthread_cond_destroy(&j->ckp.cv);
        pthread_mutex_destroy(&j->ckp.mu);
        sqlite3_close(j->ckp.db);
        j->ckp.db = NULL;
        return;
    }
    sqlite3_wal_hook(j->db, wal_hook, j); /* replaces the automatic ones */
}

static void checkpointer_stop(fb__journal *j)
{
    if (!j->ckp.started)
        return;
    sqlite3_wal_hook(j->db, NULL, NULL);
    pthread_mutex_lock(&j->ckp.mu);
    j->ckp.stop = 1;
    pthread_cond_signal(&j->ckp.cv);
    pthread_mutex_unlock(&j->ckp.mu);
    pthread_join(j->ckp.tid, NULL);
    j->ckp.started = 0;
    pthread_cond_destroy(&j->ckp.cv);
    pthread_mutex_destroy(&j->ckp.mu);
    sqlite3_close(j->ckp.db);
    j->ckp.db = NULL;
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
    if (rc == SQLITE_OK)
        rc = migrate(j->db, &msg);
    if (rc != SQLITE_OK) {
        snprintf(err, errsz, "cannot initialize %s: %s", path, msg ? msg : "?");
        sqlite3_free(msg);
        sqlite3_close(j->db);
        free(j);
        return -EIO;
    }
    snprintf(j->path, sizeof j->path, "%s", path);
    j->max_ops = DEFAULT_MAX_OPS;
    j->max_samples = DEFAULT_MAX_SAMPLES;
    j->run_id = max_id(j, "run");
    j->last_attempt_id = max_id(j, "attempt");
    j->last_incident_id = max_id(j, "incident");
    checkpointer_start(j, path);
    *out = j;
    return 0;
}

void fb__journal_close(fb__journal *j)
{
    fb__journal_close_status(j, NULL);
}

void fb__journal_close_status(fb__journal *j, fb__journal_status *st)
{
    if (!j)
        return;
    fb__journal_flush(j);
    /* What could not be written by now is lost. */
    j->st.dropped_rows += j->nops;
    j->st.dropped_samples += j->nsamples;
    for (size_t i = 0; i < j->nops; i++)
        op_free(&j->ops[i]);
    j->nops = j->nsamples = 0;
    /* Leave a single self-contained file behind: readers of a finished
     * run need no -wal/-shm files (and read-only readers cannot remove
     * them). */
    stmts_free(j);
    checkpointer_stop(j); /* its connection would keep the WAL */
    if (!j->st.failing)
        sqlite3_exec(j->db, "PRAGMA journal_mode=DELETE", NULL, NULL, NULL);
    if (st)
        fb__journal_get_status(j, st);
    sqlite3_close(j->db);
    free(j->ops);
    free(j->samples);
    for (size_t i = 0; i < j->nnames; i++)
        free(j->names[i]);
    free(j->names);
    free(j->places);
    free(j);
}

const char *fb__journal_errmsg(fb__journal *j)
{
    if (!j)
        return "no journal";
    return j->st.last_error[0] ? j->st.last_error : sqlite3_errmsg(j->db);
}

void fb__journal_get_status(fb__journal *j, fb__journal_status *st)
{
    *st = j->st;
    st->pending_rows = j->nops;
    st->pending_samples = j->nsamples;
    snprintf(st->path, sizeof st->path, "%s", j->path);
}

void fb__journal_set_limits(fb__journal *j, size_t max_rows, size_t max_samples)
{
    j->max_ops = max_rows;
    j->max_samples = max_samples;
}

int fb__journal_begin_run(fb__journal *j, const fb__journal_run *r)
{
    jop op;
    op_init(&op, "INSERT INTO run(id, name, job_id, run_dir, command, launcher,"
                 " nproc, nnodes, hostname, max_restarts, hang_timeout_s,"
                 " options, started_at) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?)");
    op_int(&op, ++j->run_id);
    op_text(&op, r->name);
    op_text(&op, r->job_id);
    op_text(&op, r->run_dir);
    op_text(&op, r->command_json);
    op_text(&op, r->launcher);
    op_int(&op, r->nproc);
    op_int(&op, r->nnodes);
    op_text(&op, r->hostname);
    op_int(&op, r->max_restarts);
    op_real(&op, r->hang_timeout_s);
    op_text(&op, r->options_json ? r->options_json : "{}");
    op_real(&op, r->started_at);
    return submit(j, &op);
}

int fb__journal_end_run(fb__journal *j, double ended_at, const char *status,
                        int exit_code, const char *reason)
{
    jop op;
    op_init(&op, "UPDATE run SET ended_at=?, status=?, exit_code=?, reason=?"
                 " WHERE id=?");
    op_real(&op, ended_at);
    op_text(&op, status);
    op_int(&op, exit_code);
    op_text(&op, reason);
    op_int(&op, j->run_id);
    int rc = submit(j, &op);
    int frc = fb__journal_flush(j);
    return rc ? rc : frc;
}

int fb__journal_begin_attempt(fb__journal *j, int number, double started_at,
                              int64_t *attempt_id_out)
{
    jop op;
    op_init(&op, "INSERT INTO attempt(id, run_id, number, started_at)"
                 " VALUES(?,?,?,?)");
    int64_t id = ++j->last_attempt_id;
    op_int(&op, id);
    op_int(&op, j->run_id);
    op_int(&op, number);
    op_real(&op, started_at);
    *attempt_id_out = id;
    return submit(j, &op);
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
    jop op;
    op_init_copy(&op, sql);
    if (type == V_REAL)
        op_real(&op, d);
    else if (type == V_INT)
        op_int(&op, i);
    else
        op_text(&op, t);
    op_int(&op, id);
    return submit(j, &op);
}

int fb__journal_attempt_real(fb__journal *j, int64_t id, const char *c, double v)
{
    return attempt_set(j, id, c, V_REAL, v, 0, NULL);
}

int fb__journal_attempt_int(fb__journal *j, int64_t id, const char *c, int64_t v)
{
    return attempt_set(j, id, c, V_INT, 0, v, NULL);
}

int fb__journal_attempt_text(fb__journal *j, int64_t id, const char *c,
                             const char *v)
{
    return attempt_set(j, id, c, V_TEXT, 0, 0, v);
}

/* The index of name in j->names, added if new; -1 for NULL or no memory. */
static int intern(fb__journal *j, const char *name)
{
    if (!name)
        return -1;
    for (size_t i = 0; i < j->nnames; i++)
        if (!strcmp(j->names[i], name))
            return (int)i;
    if (j->nnames == j->cap_names) {
        size_t cap = j->cap_names ? j->cap_names * 2 : 16;
        char **p = realloc(j->names, cap * sizeof *p);
        if (!p)
            return -1;
        j->names = p;
        j->cap_names = cap;
    }
    char *c = strdup(name);
    if (!c)
        return -1;
    j->names[j->nnames] = c;
    return (int)j->nnames++;
}

static const char *name_at(const fb__journal *j, int i)
{
    return i >= 0 && (size_t)i < j->nnames ? j->names[i] : NULL;
}

/* Where `rank` of `attempt_id` runs, as last placed; {-1, -1} if unknown. */
static place placed(const fb__journal *j, int64_t attempt_id, int rank)
{
    if (attempt_id != j->placed_attempt || rank < 0 || (size_t)rank >= j->nplaces)
        return (place){-1, -1};
    return j->places[rank];
}

int fb__journal_place(fb__journal *j, int64_t attempt_id, int rank,
                      const char *node, const char *host)
{
    if (rank < 0 || rank >= MAX_PLACED_RANKS || !node)
        return -EINVAL;
    if (attempt_id != j->placed_attempt) {
        j->placed_attempt = attempt_id;
        for (size_t i = 0; i < j->nplaces; i++)
            j->places[i] = (place){-1, -1};
    }
    if ((size_t)rank >= j->nplaces) {
        size_t n = (size_t)rank + 1 > j->nplaces * 2 ? (size_t)rank + 1 : j->nplaces * 2;
        place *p = realloc(j->places, n * sizeof *p);
        if (!p)
            return -ENOMEM;
        for (size_t i = j->nplaces; i < n; i++)
            p[i] = (place){-1, -1};
        j->places = p;
        j->nplaces = n;
    }
    j->places[rank] = (place){intern(j, node), intern(j, host)};
    jop op;
    op_init(&op, "INSERT OR REPLACE INTO placement(run_id, attempt_id, rank, node,"
                 " host) VALUES(?,?,?,?,?)");
    op_int(&op, j->run_id);
    op_int(&op, attempt_id);
    op_int(&op, rank);
    op_text(&op, node);
    op_text(&op, host);
    return submit(j, &op);
}

int fb__journal_add_incident(fb__journal *j, const fb__journal_incident *in,
                         int64_t *id_out)
{
    jop op;
    op_init(&op, "INSERT INTO incident(id, run_id, attempt_id, kind, occurred_at,"
                 " detected_at, detect_ms, rank, node, signal, exit_code, phase,"
                 " step, lost_s, injected, detail, last_lines, fr_verdict,"
                 " health, category, component, evidence, host)"
                 " VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
    place pl = placed(j, in->attempt_id, in->rank);
    int64_t id = ++j->last_incident_id;
    op_int(&op, id);
    op_int(&op, j->run_id);
    op_int(&op, in->attempt_id);
    op_text(&op, in->kind);
    op_real(&op, in->occurred_at);
    op_real(&op, in->detected_at);
    op_real(&op, in->detect_ms);
    if (in->rank >= 0)
        op_int(&op, in->rank);
    else
        op_null(&op);
    op_text(&op, in->node ? in->node : name_at(j, pl.node));
    if (in->signal > 0)
        op_int(&op, in->signal);
    else
        op_null(&op);
    if (in->has_exit_code)
        op_int(&op, in->exit_code);
    else
        op_null(&op);
    op_text(&op, in->phase);
    if (in->step >= 0)
        op_int(&op, in->step);
    else
        op_null(&op);
    if (in->lost_s >= 0)
        op_real(&op, in->lost_s);
    else
        op_null(&op);
    op_text(&op, in->injected);
    op_text(&op, in->detail ? in->detail : "");
    op_text(&op, in->last_lines);
    op_text(&op, in->fr_verdict);
    op_text(&op, in->health);
    op_text(&op, in->category);
    op_text(&op, in->component);
    op_text(&op, in->evidence);
    op_text(&op, in->host ? in->host : name_at(j, pl.host));
    if (id_out)
        *id_out = id;
    return submit(j, &op);
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
    jop op;
    op_init_copy(&op, sql);
    op_text(&op, value);
    op_int(&op, id);
    return submit(j, &op);
}

int fb__journal_add_event(fb__journal *j, const fb__journal_event *ev)
{
    jop op;
    op_init(&op, "INSERT INTO event(run_id, attempt_id, time, rank, kind, step,"
                 " code, bytes, value_ms, detail, node, host, source)"
                 " VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?)");
    place pl = placed(j, ev->attempt_id, ev->rank);
    op_int(&op, j->run_id);
    op_int(&op, ev->attempt_id);
    op_real(&op, ev->time);
    if (ev->rank >= 0)
        op_int(&op, ev->rank);
    else
        op_null(&op);
    op_text(&op, ev->kind);
    if (ev->step >= 0)
        op_int(&op, ev->step);
    else
        op_null(&op);
    op_int(&op, ev->code);
    op_int(&op, ev->bytes);
    if (ev->value_ms >= 0)
        op_real(&op, ev->value_ms);
    else
        op_null(&op);
    op_text(&op, ev->detail);
    op_text(&op, ev->node ? ev->node : name_at(j, pl.node));
    op_text(&op, ev->node ? NULL : name_at(j, pl.host));
    op_text(&op, ev->source);
    return submit(j, &op);
}

/* Insert or update the row of (attempt, step): an update, then an insert
 * when there was no row -- two writes that need no read, so that either
 * may wait in the queue. */
int fb__journal_checkpoint(fb__journal *j, int64_t attempt_id, int64_t step,
                           double committed_at, int ranks, int64_t bytes,
                           double stall_ms, double persist_ms, const char *status)
{
    jop up, ins;
    op_init(&up, "UPDATE checkpoint SET committed_at=?, ranks=?, bytes=?,"
                 " stall_ms=?, persist_ms=?, status=? WHERE attempt_id=? AND step=?");
    op_init(&ins, "INSERT INTO checkpoint(committed_at, ranks, bytes, stall_ms,"
                  " persist_ms, status, run_id, attempt_id, step)"
                  " SELECT ?,?,?,?,?,?,?,?,? WHERE NOT EXISTS (SELECT 1 FROM"
                  " checkpoint WHERE attempt_id=? AND step=?)");
    jop *ops[2] = {&up, &ins};
    for (int k = 0; k < 2; k++) {
        op_real(ops[k], committed_at);
        op_int(ops[k], ranks);
        op_int(ops[k], bytes);
        op_real(ops[k], stall_ms);
        op_real(ops[k], persist_ms);
        op_text(ops[k], status);
    }
    op_int(&up, attempt_id);
    op_int(&up, step);
    op_int(&ins, j->run_id);
    op_int(&ins, attempt_id);
    op_int(&ins, step);
    op_int(&ins, attempt_id);
    op_int(&ins, step);
    int rc = submit(j, &up);
    int rc2 = submit(j, &ins);
    return rc ? rc : rc2;
}

int fb__journal_sample(fb__journal *j, int64_t attempt_id, int rank,
                       double time, int64_t step, double step_time_ms)
{
    if (j->nsamples >= j->max_samples) {
        j->st.dropped_samples++;
        return -ENOSPC;
    }
    if (j->nsamples == j->cap) {
        size_t cap = j->cap ? j->cap * 2 : 256;
        sample *n = realloc(j->samples, cap * sizeof *n);
        if (!n) {
            j->st.dropped_samples++;
            return -ENOMEM;
        }
        j->samples = n;
        j->cap = cap;
    }
    place pl = placed(j, attempt_id, rank);
    j->samples[j->nsamples++] = (sample){attempt_id, step, rank, pl.node, pl.host,
                                         time, step_time_ms};
    /* Batches, so that memory stays bounded between the caller's flushes;
     * while the database fails, the caller's flushes retry. */
    if (j->nsamples % SAMPLE_BATCH == 0 && !j->st.failing)
        fb__journal_flush(j);
    return 0;
}

/* The queued rows, in order, in the open transaction.  A row refused for
 * good is dropped (counted); the others stay queued until the COMMIT.
 * SQLITE_OK or the first error that may pass. */
static int write_ops(fb__journal *j)
{
    size_t kept = 0;
    int rc = SQLITE_OK;
    for (size_t i = 0; i < j->nops; i++) {
        if (rc == SQLITE_OK) {
            int r = exec_op(j, &j->ops[i]);
            if (r != SQLITE_OK && !transient(r)) {
                drop_op(j, &j->ops[i]);
                continue;
            }
            rc = r;
        }
        j->ops[kept++] = j->ops[i];
    }
    j->nops = kept;
    return rc;
}

static int write_samples(fb__journal *j)
{
    if (j->nsamples == 0)
        return SQLITE_OK;
    int rc = SQLITE_OK;
    sqlite3_stmt *st = stmt_for(j, "INSERT INTO step_sample(run_id, attempt_id,"
                                " rank, time, step, step_time_ms, node, host)"
                                " VALUES(?,?,?,?,?,?,?,?)", &rc);
    if (!st) {
        note_error(j, rc);
        return rc;
    }
    for (size_t i = 0; i < j->nsamples && rc == SQLITE_OK; i++) {
        const sample *x = &j->samples[i];
        sqlite3_bind_int64(st, 1, j->run_id);
        sqlite3_bind_int64(st, 2, x->attempt_id);
        sqlite3_bind_int(st, 3, x->rank);
        sqlite3_bind_double(st, 4, x->time);
        sqlite3_bind_int64(st, 5, x->step);
        if (x->step_time_ms >= 0)
            sqlite3_bind_double(st, 6, x->step_time_ms);
        else
            sqlite3_bind_null(st, 6);
        sqlite3_bind_text(st, 7, name_at(j, x->node), -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 8, name_at(j, x->host), -1, SQLITE_STATIC);
        int r = sqlite3_step(st);
        if (r != SQLITE_DONE) {
            note_error(j, r);
            rc = r;
        }
        sqlite3_reset(st);
    }
    sqlite3_clear_bindings(st);
    return rc;
}

int fb__journal_flush(fb__journal *j)
{
    if (!j || (j->nops == 0 && j->nsamples == 0))
        return 0;
    int rc = sqlite3_exec(j->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
    if (rc != SQLITE_OK) {
        note_error(j, rc);
        goto failed;
    }
    /* Rows first (samples refer to attempts).  The queue is kept until the
     * COMMIT: a failed COMMIT rolls every row back. */
    rc = write_ops(j);
    if (rc == SQLITE_OK)
        rc = write_samples(j);
    if (rc == SQLITE_OK) {
        rc = sqlite3_exec(j->db, "COMMIT", NULL, NULL, NULL);
        if (rc != SQLITE_OK)
            note_error(j, rc);
    }
    if (rc != SQLITE_OK) {
        if (!sqlite3_get_autocommit(j->db))
            sqlite3_exec(j->db, "ROLLBACK", NULL, NULL, NULL);
        if (!transient(rc)) {
            /* The samples themselves are refused: drop them, counted. */
            j->st.dropped_samples += j->nsamples;
            j->nsamples = 0;
        }
        goto failed;
    }
    for (size_t i = 0; i < j->nops; i++)
        op_free(&j->ops[i]);
    j->nops = 0;
    j->nsamples = 0;
    j->st.failing = 0;
    return 0;
failed:
    j->st.failing = 1;
    return errno_of(rc);
}

void fb__journal_batch_begin(fb__journal *j)
{
    if (j)
        j->batch++;
}

int fb__journal_batch_end(fb__journal *j)
{
    if (!j || j->batch <= 0 || --j->batch > 0)
        return 0;
    /* While the database fails, the queue waits for the caller's retries
     * (fb__journal_flush once a second), as unbatched writes do. */
    if (j->nops == 0 || j->st.failing)
        return 0;
    return fb__journal_flush(j);
}
