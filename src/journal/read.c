/*
 * read.c -- the one reader of the run journal (journal.h, "Reading").
 *
 * `firebreak report` and `firebreak sim --from-run` read journal.sqlite
 * through here and hold no SQL of their own, so the rules of reading live
 * in one place:
 *
 *   - The file and SQLite's side files (-wal, -shm, -journal) must be
 *     regular: SQLite would block forever opening a FIFO, and read a device.
 *   - Read-only, not immutable: the supervisor may be writing (WAL), and a
 *     reader must see what it committed.  One read transaction, so a live
 *     run gives a consistent picture.
 *   - meta.schema_version is MAJOR.MINOR: every minor of the major we know
 *     is read, naming only the columns we know (a new minor adds tables and
 *     nullable columns, never renames or removes); other majors are refused.
 *   - SQLite's BUSY, NOTADB and CORRUPT become messages that name the file
 *     and say what to do.
 */
#include "journal/journal.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "firebreak/firebreak.h"

/* How long a read waits for the writer's lock before it says "locked". */
#define BUSY_TIMEOUT_MS 1000

struct fb__journal_ro {
    sqlite3 *db;
    char path[PATH_MAX];
    char version[32];
    long minor;                  /* of version */
    char err[1024];
};

struct fb__journal_cursor {
    fb__journal_ro *jr;
    fb__journal_table table;
    sqlite3_stmt *st;
    int bad;                     /* first bad column of this row; -1: none */
    char bad_name[96];           /* table.column of it                     */
};

/* The columns each cursor reads, in the order its next function takes
 * them: those of schema 1.1 (a newer minor's extra ones are ignored).  A
 * 1.0 file lacks some: `old` reads NULL in their place.  event.source
 * (restore_done's tier, issue 18; in no schema.sql yet) is read, after
 * them, where the column exists: EVENT_SOURCE below. */
#define EVENT_SOURCE_11                                                       \
    "SELECT id, attempt_id, time, rank, kind, step, code, bytes, value_ms,"   \
    " detail, node, host, source FROM event ORDER BY id"
#define EVENT_SOURCE_10                                                       \
    "SELECT id, attempt_id, time, rank, kind, step, code, bytes, value_ms,"   \
    " detail, NULL, NULL, source FROM event ORDER BY id"

static const struct {
    const char *name; /* the table, as messages name it */
    const char *select;
    const char *old;  /* for schema 1.0, where it differs */
} tables[FB__JOURNAL_NTABLES] = {
    [FB__JOURNAL_RUN] = {"run", "SELECT id, name, status, reason, hostname,"
                         " nproc, nnodes, started_at, ended_at FROM run"
                         " ORDER BY id", NULL},
    [FB__JOURNAL_ATTEMPT] = {"attempt", "SELECT id, run_id, number,"
                             " started_at, launched_at, ready_at, ended_at,"
                             " restored_step, restore_s, start_step, end_step,"
                             " outcome FROM attempt ORDER BY id", NULL},
    [FB__JOURNAL_INCIDENT] = {"incident", "SELECT id, attempt_id, kind,"
                              " occurred_at, detected_at, detect_ms, rank,"
                              " node, signal, exit_code, phase, step, lost_s,"
                              " injected, detail, last_lines, fr_verdict,"
                              " health, category, component, evidence, host"
                              " FROM incident ORDER BY id",
                              "SELECT id, attempt_id, kind,"
                              " occurred_at, detected_at, detect_ms, rank,"
                              " node, signal, exit_code, phase, step, lost_s,"
                              " injected, detail, last_lines, fr_verdict,"
                              " health, category, component, evidence, NULL"
                              " FROM incident ORDER BY id"},
    [FB__JOURNAL_CHECKPOINT] = {"checkpoint", "SELECT id, attempt_id, step,"
                                " committed_at, ranks, bytes, stall_ms,"
                                " persist_ms, status FROM checkpoint"
                                " ORDER BY id", NULL},
    [FB__JOURNAL_EVENT] = {"event", "SELECT id, attempt_id, time, rank, kind,"
                           " step, code, bytes, value_ms, detail, node, host"
                           " FROM event ORDER BY id",
                           "SELECT id, attempt_id, time, rank, kind,"
                           " step, code, bytes, value_ms, detail, NULL, NULL"
                           " FROM event ORDER BY id"},
    /* no id: samples come in the order they were written (rowid) */
    [FB__JOURNAL_SAMPLE] = {"step_sample", "SELECT attempt_id, rank, time,"
                            " step, step_time_ms, node, host FROM step_sample",
                            "SELECT attempt_id, rank, time,"
                            " step, step_time_ms, NULL, NULL FROM step_sample"},
    [FB__JOURNAL_PLACEMENT] = {"placement", "SELECT attempt_id, rank, node, host"
                               " FROM placement ORDER BY attempt_id, rank",
                               "SELECT 0, 0, '', NULL WHERE 0"},
};

int fb__journal_files_regular(const char *path, char *err, size_t errsz)
{
    static const char *const side[] = {"", "-wal", "-shm", "-journal"};
    for (size_t i = 0; i < sizeof side / sizeof side[0]; i++) {
        char p[PATH_MAX + 16];
        struct stat st;
        snprintf(p, sizeof p, "%s%s", path, side[i]);
        if (i > 0 && lstat(p, &st) != 0)
            continue; /* no side file: nothing to check */
        int fd = fb__open_regular(p, 0);
        if (fd < 0) {
            snprintf(err, errsz, "%s: %s", p, fb_strerror(fd));
            return fd;
        }
        close(fd);
    }
    return 0;
}

/* Map an SQLite failure to our code and a message naming the file. */
static int db_fail(fb__journal_ro *jr, int rc, const char *what)
{
    int prim = rc & 0xff;
    if (prim == SQLITE_BUSY || prim == SQLITE_LOCKED) {
        snprintf(jr->err, sizeof jr->err, "%s is locked by another process "
                 "(%s); wait for it to finish or copy the file and report on "
                 "the copy", jr->path, what);
        return -EBUSY;
    }
    if (prim == SQLITE_NOTADB || prim == SQLITE_CORRUPT) {
        snprintf(jr->err, sizeof jr->err, "%s is corrupted or not an SQLite "
                 "database (%s: %s); restore it from a backup or inspect it "
                 "with 'sqlite3 %s \"PRAGMA integrity_check\"'", jr->path,
                 what, sqlite3_errstr(rc), jr->path);
        return FB_EFORMAT;
    }
    if (prim == SQLITE_NOMEM) {
        snprintf(jr->err, sizeof jr->err, "%s: %s: out of memory", jr->path,
                 what);
        return -ENOMEM;
    }
    snprintf(jr->err, sizeof jr->err, "%s: %s: %s", jr->path, what,
             jr->db ? sqlite3_errmsg(jr->db) : sqlite3_errstr(rc));
    return FB_EFORMAT;
}

/* The schema-version rule, the only copy of it. */
static int check_version(fb__journal_ro *jr)
{
    sqlite3_stmt *s;
    int rc = sqlite3_prepare_v2(jr->db, "SELECT value FROM meta WHERE "
                                "key='schema_version'", -1, &s, NULL);
    if (rc != SQLITE_OK) {
        if ((rc & 0xff) == SQLITE_ERROR) {
            snprintf(jr->err, sizeof jr->err, "%s is not a firebreak journal "
                     "(no meta table); was it written by 'firebreak run'?",
                     jr->path);
            return FB_EFORMAT;
        }
        return db_fail(jr, rc, "reading meta");
    }
    rc = sqlite3_step(s);
    if (rc != SQLITE_ROW) {
        sqlite3_finalize(s);
        if (rc != SQLITE_DONE)
            return db_fail(jr, rc, "reading meta");
        snprintf(jr->err, sizeof jr->err, "%s has no meta.schema_version: "
                 "not a firebreak journal", jr->path);
        return FB_EFORMAT;
    }
    const char *v = (const char *)sqlite3_column_text(s, 0);
    snprintf(jr->version, sizeof jr->version, "%s", v ? v : "");
    sqlite3_finalize(s);
    char *end;
    long major = strtol(jr->version, &end, 10);
    if (end == jr->version || (*end && *end != '.')) {
        snprintf(jr->err, sizeof jr->err, "%s: meta.schema_version '%s' is "
                 "not MAJOR.MINOR", jr->path, jr->version);
        return FB_EFORMAT;
    }
    jr->minor = *end == '.' ? strtol(end + 1, NULL, 10) : 0;
    if (major != FB__JOURNAL_SCHEMA_MAJOR) {
        snprintf(jr->err, sizeof jr->err, "%s: journal schema version %s is "
                 "not supported: this firebreak reads %d.x; %s", jr->path,
                 jr->version, FB__JOURNAL_SCHEMA_MAJOR,
                 major < FB__JOURNAL_SCHEMA_MAJOR
                     ? "report on it with the firebreak release that wrote it"
                     : "use a newer firebreak");
        return FB_EVERSION;
    }
    return 0;
}

int fb__journal_open_ro(const char *path, fb__journal_ro **out, char *err,
                        size_t errsz)
{
    *out = NULL;
    if (strlen(path) >= PATH_MAX) {
        snprintf(err, errsz, "%s: path too long", path);
        return -ENAMETOOLONG;
    }
    int rc = fb__journal_files_regular(path, err, errsz);
    if (rc)
        return rc;
    fb__journal_ro *jr = calloc(1, sizeof *jr);
    if (!jr) {
        snprintf(err, errsz, "%s: out of memory", path);
        return -ENOMEM;
    }
    snprintf(jr->path, sizeof jr->path, "%s", path);
    rc = sqlite3_open_v2(path, &jr->db, SQLITE_OPEN_READONLY, NULL);
    if (rc != SQLITE_OK) {
        rc = db_fail(jr, rc, "opening");
        goto out;
    }
    sqlite3_busy_timeout(jr->db, BUSY_TIMEOUT_MS);
    rc = sqlite3_exec(jr->db, "BEGIN", NULL, NULL, NULL);
    if (rc != SQLITE_OK) {
        rc = db_fail(jr, rc, "starting a read");
        goto out;
    }
    rc = check_version(jr);
out:
    if (rc) {
        snprintf(err, errsz, "%s", jr->err);
        fb__journal_close_ro(jr);
        return rc;
    }
    *out = jr;
    return 0;
}

void fb__journal_close_ro(fb__journal_ro *jr)
{
    if (!jr)
        return;
    if (jr->db && !sqlite3_get_autocommit(jr->db))
        sqlite3_exec(jr->db, "COMMIT", NULL, NULL, NULL);
    sqlite3_close(jr->db);
    free(jr);
}

const char *fb__journal_ro_version(const fb__journal_ro *jr)
{
    return jr->version;
}

const char *fb__journal_ro_errmsg(const fb__journal_ro *jr)
{
    return jr->err;
}

static int bad_table(fb__journal_ro *jr, fb__journal_table t)
{
    if ((unsigned)t < FB__JOURNAL_NTABLES)
        return 0;
    snprintf(jr->err, sizeof jr->err, "%s: no table %d", jr->path, (int)t);
    return -EINVAL;
}

int fb__journal_count(fb__journal_ro *jr, fb__journal_table t, int64_t *n)
{
    *n = 0;
    int rc = bad_table(jr, t);
    if (rc)
        return rc;
    char what[64], sql[64];
    snprintf(what, sizeof what, "reading %s", tables[t].name);
    if (jr->minor < 1 && t == FB__JOURNAL_PLACEMENT)
        return 0; /* no such table in 1.0 */
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s", tables[t].name);
    sqlite3_stmt *s;
    rc = sqlite3_prepare_v2(jr->db, sql, -1, &s, NULL);
    if (rc != SQLITE_OK)
        return db_fail(jr, rc, "reading the journal");
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW)
        *n = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    return rc == SQLITE_ROW ? 0 : db_fail(jr, rc, what);
}

int fb__journal_rows(fb__journal_ro *jr, fb__journal_table t,
                     fb__journal_cursor **out)
{
    *out = NULL;
    int rc = bad_table(jr, t);
    if (rc)
        return rc;
    fb__journal_cursor *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(jr->err, sizeof jr->err, "%s: out of memory", jr->path);
        return -ENOMEM;
    }
    c->jr = jr;
    c->table = t;
    /* event.source is read where the column exists. */
    rc = SQLITE_ERROR;
    if (t == FB__JOURNAL_EVENT)
        rc = sqlite3_prepare_v2(jr->db, jr->minor < 1 ? EVENT_SOURCE_10 : EVENT_SOURCE_11,
                                -1, &c->st, NULL);
    if (rc != SQLITE_OK) {
        const char *sql = jr->minor < 1 && tables[t].old ? tables[t].old : tables[t].select;
        rc = sqlite3_prepare_v2(jr->db, sql, -1, &c->st, NULL);
    }
    if (rc != SQLITE_OK) {
        free(c);
        return db_fail(jr, rc, "reading the journal");
    }
    *out = c;
    return 0;
}

void fb__journal_rows_close(fb__journal_cursor *c)
{
    if (!c)
        return;
    sqlite3_finalize(c->st);
    free(c);
}

/* Step a cursor of table t: 1 a row, 0 the end, or the failure. */
static int step(fb__journal_cursor *c, fb__journal_table t)
{
    if (c->table != t) {
        snprintf(c->jr->err, sizeof c->jr->err, "%s: a cursor over %s read "
                 "as %s", c->jr->path, tables[c->table].name, tables[t].name);
        return -EINVAL;
    }
    c->bad = -1;
    int rc = sqlite3_step(c->st);
    if (rc == SQLITE_ROW)
        return 1;
    if (rc == SQLITE_DONE)
        return 0;
    char what[64];
    snprintf(what, sizeof what, "reading %s", tables[t].name);
    return db_fail(c->jr, rc, what);
}

static const char *col_text(sqlite3_stmt *s, int i)
{
    return (const char *)sqlite3_column_text(s, i);
}

/* Column i of this row does not hold what its field can: remember the
 * first one (fb__journal_cursor_bad()). */
static void mark_bad(fb__journal_cursor *c, int i)
{
    if (c->bad < 0)
        c->bad = i;
}

/* A number column: NULL or a number.  TEXT or a BLOB there (SQLite keeps
 * what it cannot convert) is marked, and reads as NULL would. */
static int col_number(fb__journal_cursor *c, int i)
{
    int t = sqlite3_column_type(c->st, i);
    if (t == SQLITE_INTEGER || t == SQLITE_FLOAT)
        return 1;
    if (t != SQLITE_NULL)
        mark_bad(c, i);
    return 0;
}

static double col_real(fb__journal_cursor *c, int i)
{
    return col_number(c, i) ? sqlite3_column_double(c->st, i) : NAN;
}

static int64_t col_i64(fb__journal_cursor *c, int i, int64_t none)
{
    return col_number(c, i) ? sqlite3_column_int64(c->st, i) : none;
}

/* An int field: a value outside int's range is marked and reads as none,
 * not truncated. */
static int col_int(fb__journal_cursor *c, int i, int none)
{
    int64_t v = col_i64(c, i, none);
    if (v < INT_MIN || v > INT_MAX) {
        mark_bad(c, i);
        return none;
    }
    return (int)v;
}

const char *fb__journal_cursor_bad(fb__journal_cursor *c)
{
    if (c->bad < 0)
        return NULL;
    snprintf(c->bad_name, sizeof c->bad_name, "%s.%s", tables[c->table].name,
             sqlite3_column_name(c->st, c->bad));
    return c->bad_name;
}

int fb__journal_next_run(fb__journal_cursor *c, fb__journal_run_row *r)
{
    int rc = step(c, FB__JOURNAL_RUN);
    if (rc != 1)
        return rc;
    sqlite3_stmt *s = c->st;
    r->id = sqlite3_column_int64(s, 0);
    r->name = col_text(s, 1);
    r->status = col_text(s, 2);
    r->reason = col_text(s, 3);
    r->hostname = col_text(s, 4);
    r->nproc = col_int(c, 5, -1);
    r->nnodes = col_int(c, 6, -1);
    r->started_at = col_real(c, 7);
    r->ended_at = col_real(c, 8);
    return 1;
}

int fb__journal_next_attempt(fb__journal_cursor *c, fb__journal_attempt_row *r)
{
    int rc = step(c, FB__JOURNAL_ATTEMPT);
    if (rc != 1)
        return rc;
    sqlite3_stmt *s = c->st;
    r->id = sqlite3_column_int64(s, 0);
    r->run_id = col_i64(c, 1, -1);
    r->number = col_int(c, 2, 0);
    r->started_at = col_real(c, 3);
    r->launched_at = col_real(c, 4);
    r->ready_at = col_real(c, 5);
    r->ended_at = col_real(c, 6);
    r->restored_step = col_i64(c, 7, -1);
    r->restore_s = col_real(c, 8);
    r->start_step = col_i64(c, 9, -1);
    r->end_step = col_i64(c, 10, -1);
    r->outcome = col_text(s, 11);
    return 1;
}

int fb__journal_next_incident(fb__journal_cursor *c,
                              fb__journal_incident_row *r)
{
    int rc = step(c, FB__JOURNAL_INCIDENT);
    if (rc != 1)
        return rc;
    sqlite3_stmt *s = c->st;
    r->id = sqlite3_column_int64(s, 0);
    r->attempt_id = sqlite3_column_int64(s, 1);
    r->kind = col_text(s, 2);
    r->occurred_at = col_real(c, 3);
    r->detected_at = col_real(c, 4);
    r->detect_ms = col_real(c, 5);
    r->rank = col_int(c, 6, -1);
    r->node = col_text(s, 7);
    r->signal = col_int(c, 8, 0);
    r->has_exit_code = sqlite3_column_type(s, 9) != SQLITE_NULL;
    r->exit_code = sqlite3_column_int(s, 9);
    r->phase = col_text(s, 10);
    r->step = col_i64(c, 11, -1);
    r->lost_s = col_real(c, 12);
    r->injected = col_text(s, 13);
    r->detail = col_text(s, 14);
    r->last_lines = col_text(s, 15);
    r->fr_verdict = col_text(s, 16);
    r->health = col_text(s, 17);
    r->category = col_text(s, 18);
    r->component = col_text(s, 19);
    r->evidence = col_text(s, 20);
    r->host = col_text(s, 21);
    return 1;
}

int fb__journal_next_checkpoint(fb__journal_cursor *c,
                                fb__journal_checkpoint_row *r)
{
    int rc = step(c, FB__JOURNAL_CHECKPOINT);
    if (rc != 1)
        return rc;
    sqlite3_stmt *s = c->st;
    r->id = sqlite3_column_int64(s, 0);
    r->attempt_id = sqlite3_column_int64(s, 1);
    r->step = sqlite3_column_int64(s, 2);
    r->committed_at = col_real(c, 3);
    r->ranks = col_int(c, 4, -1);
    r->bytes = col_i64(c, 5, -1);
    r->stall_ms = col_real(c, 6);
    r->persist_ms = col_real(c, 7);
    r->status = col_text(s, 8);
    return 1;
}

int fb__journal_next_event(fb__journal_cursor *c, fb__journal_event_row *r)
{
    int rc = step(c, FB__JOURNAL_EVENT);
    if (rc != 1)
        return rc;
    sqlite3_stmt *s = c->st;
    r->id = sqlite3_column_int64(s, 0);
    r->attempt_id = sqlite3_column_int64(s, 1);
    r->time = col_real(c, 2);
    r->rank = col_int(c, 3, -1);
    r->kind = col_text(s, 4);
    r->step = col_i64(c, 5, -1);
    r->code = col_int(c, 6, 0);
    r->bytes = col_i64(c, 7, -1);
    r->value_ms = col_real(c, 8);
    r->detail = col_text(s, 9);
    r->node = col_text(s, 10);
    r->host = col_text(s, 11);
    r->source = sqlite3_column_count(s) > 12 ? col_text(s, 12) : NULL;
    return 1;
}

int fb__journal_next_sample(fb__journal_cursor *c, fb__journal_sample_row *r)
{
    int rc = step(c, FB__JOURNAL_SAMPLE);
    if (rc != 1)
        return rc;
    sqlite3_stmt *s = c->st;
    r->attempt_id = sqlite3_column_int64(s, 0);
    r->rank = sqlite3_column_int(s, 1);
    r->time = col_real(c, 2);
    r->step = sqlite3_column_int64(s, 3);
    r->step_time_ms = col_real(c, 4);
    r->node = col_text(s, 5);
    r->host = col_text(s, 6);
    return 1;
}

int fb__journal_next_placement(fb__journal_cursor *c,
                               fb__journal_placement_row *r)
{
    int rc = step(c, FB__JOURNAL_PLACEMENT);
    if (rc != 1)
        return rc;
    sqlite3_stmt *s = c->st;
    r->attempt_id = sqlite3_column_int64(s, 0);
    r->rank = sqlite3_column_int(s, 1);
    r->node = col_text(s, 2);
    r->host = col_text(s, 3);
    return 1;
}
