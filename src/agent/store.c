/*
 * store.c -- the agent's SQLite database (see store.h, docs/agent.md).
 * WAL mode with synchronous=NORMAL: one small transaction a second must
 * not cost an fsync each; a crash loses at most the last samples.
 */
#include "agent/store.h"

#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "firebreak/firebreak.h"
#include "health/nvml.h"

static const char schema[] =
    "PRAGMA journal_mode=WAL;"
    "PRAGMA synchronous=NORMAL;"
    "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);"
    "CREATE TABLE IF NOT EXISTS gpu_samples("
    " t REAL NOT NULL, gpu INTEGER NOT NULL, uuid TEXT, temp_c REAL,"
    " mem_temp_c REAL, power_w REAL, power_limit_w REAL, energy_j REAL,"
    " sm_clock_mhz INTEGER, mem_clock_mhz INTEGER, util_pct INTEGER,"
    " clock_event_reasons INTEGER, thermal_slowdown INTEGER,"
    " power_slowdown INTEGER);"
    "CREATE INDEX IF NOT EXISTS gpu_samples_t ON gpu_samples(t);"
    "CREATE TABLE IF NOT EXISTS host_samples("
    " t REAL NOT NULL, sensor TEXT NOT NULL, kind TEXT NOT NULL,"
    " value REAL NOT NULL);"
    "CREATE INDEX IF NOT EXISTS host_samples_t ON host_samples(t);"
    "CREATE TABLE IF NOT EXISTS rank_samples("
    " t REAL NOT NULL, rank INTEGER NOT NULL, attempt INTEGER NOT NULL,"
    " step INTEGER, steps_done INTEGER, last_step_s REAL, step_ewma_s REAL,"
    " heartbeat_age_s REAL, phase INTEGER, straggler INTEGER);"
    "CREATE INDEX IF NOT EXISTS rank_samples_t ON rank_samples(t);"
    "CREATE TABLE IF NOT EXISTS events("
    " id INTEGER PRIMARY KEY, t REAL NOT NULL, kind TEXT NOT NULL,"
    " subject TEXT, severity TEXT NOT NULL, detail TEXT NOT NULL,"
    " evidence TEXT NOT NULL);"
    "CREATE INDEX IF NOT EXISTS events_t ON events(t);";

struct fb__agent_db {
    sqlite3 *db;
    sqlite3_stmt *gpu, *host, *rank, *event, *begin, *commit;
    unsigned long errors;
};

static int prep(fb__agent_db *d, const char *sql, sqlite3_stmt **st)
{
    return sqlite3_prepare_v2(d->db, sql, -1, st, NULL);
}

int fb__agent_db_open(fb__agent_db **out, const char *path, const char *host,
                      double interval_s, char *err, size_t err_size)
{
    *out = NULL;
    /* SQLite would block opening a FIFO (or read a device): an existing
     * database must be a regular file. */
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        snprintf(err, err_size, "agent database %s: %s", path,
                 fb_strerror(FB_ENOTREG));
        return FB_ENOTREG;
    }
    fb__agent_db *d = calloc(1, sizeof *d);
    if (!d)
        return -ENOMEM;
    int rc = sqlite3_open_v2(path, &d->db,
                             SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
    if (rc == SQLITE_OK)
        sqlite3_busy_timeout(d->db, 2000);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(d->db, schema, NULL, NULL, NULL);
    if (rc == SQLITE_OK) {
        char sql[1024];
        char *q = sqlite3_mprintf(
            "INSERT OR REPLACE INTO meta VALUES('schema_version', %Q);"
            "INSERT OR REPLACE INTO meta VALUES('writer', 'firebreak agent %q');"
            "INSERT OR REPLACE INTO meta VALUES('host', %Q);"
            "INSERT OR REPLACE INTO meta VALUES('interval_s', '%g');",
            FB__AGENT_SCHEMA_VERSION, fb_version(), host, interval_s);
        snprintf(sql, sizeof sql, "%s", q ? q : "");
        sqlite3_free(q);
        rc = sqlite3_exec(d->db, sql, NULL, NULL, NULL);
    }
    if (rc == SQLITE_OK)
        rc = prep(d, "INSERT INTO gpu_samples VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                  &d->gpu);
    if (rc == SQLITE_OK)
        rc = prep(d, "INSERT INTO host_samples VALUES(?,?,?,?)", &d->host);
    if (rc == SQLITE_OK)
        rc = prep(d, "INSERT INTO rank_samples VALUES(?,?,?,?,?,?,?,?,?,?)",
                  &d->rank);
    if (rc == SQLITE_OK)
        rc = prep(d, "INSERT INTO events(t,kind,subject,severity,detail,"
                     "evidence) VALUES(?,?,?,?,?,?)", &d->event);
    if (rc == SQLITE_OK)
        rc = prep(d, "BEGIN", &d->begin);
    if (rc == SQLITE_OK)
        rc = prep(d, "COMMIT", &d->commit);
    if (rc != SQLITE_OK) {
        snprintf(err, err_size, "agent database %s: %s", path,
                 d->db ? sqlite3_errmsg(d->db) : sqlite3_errstr(rc));
        fb__agent_db_close(d);
        return -EIO;
    }
    *out = d;
    return 0;
}

void fb__agent_db_close(fb__agent_db *d)
{
    if (!d)
        return;
    sqlite3_finalize(d->gpu);
    sqlite3_finalize(d->host);
    sqlite3_finalize(d->rank);
    sqlite3_finalize(d->event);
    sqlite3_finalize(d->begin);
    sqlite3_finalize(d->commit);
    sqlite3_close(d->db);
    free(d);
}

static void step(fb__agent_db *d, sqlite3_stmt *st)
{
    if (sqlite3_step(st) != SQLITE_DONE)
        d->errors++;
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
}

void fb__agent_db_begin(fb__agent_db *d)
{
    if (d)
        step(d, d->begin);
}

void fb__agent_db_commit(fb__agent_db *d)
{
    if (d)
        step(d, d->commit);
}

unsigned long fb__agent_db_errors(const fb__agent_db *d)
{
    return d ? d->errors : 0;
}

/* Bind a reading or NULL when NVML did not answer. */
static void bind_opt(sqlite3_stmt *st, int i, int has, double v)
{
    if (has)
        sqlite3_bind_double(st, i, v);
    else
        sqlite3_bind_null(st, i);
}

void fb__agent_db_gpu(fb__agent_db *d, double t, const fb__gpu_sample *g)
{
    if (!d)
        return;
    sqlite3_stmt *st = d->gpu;
    sqlite3_bind_double(st, 1, t);
    sqlite3_bind_int(st, 2, g->index);
    sqlite3_bind_text(st, 3, g->uuid, -1, SQLITE_TRANSIENT);
    bind_opt(st, 4, g->has_temp, g->temp_c);
    bind_opt(st, 5, g->has_mem_temp, g->mem_temp_c);
    bind_opt(st, 6, g->has_power, g->power_mw / 1000.0);
    bind_opt(st, 7, g->has_limit, g->limit_mw / 1000.0);
    bind_opt(st, 8, g->has_energy, (double)g->energy_mj / 1000.0);
    bind_opt(st, 9, g->has_clocks, g->sm_mhz);
    bind_opt(st, 10, g->has_clocks, g->mem_mhz);
    bind_opt(st, 11, g->has_util, g->util_pct);
    if (g->has_reasons) {
        sqlite3_bind_int64(st, 12, (sqlite3_int64)g->reasons);
        sqlite3_bind_int(st, 13, !!(g->reasons & FB__NVML_REASONS_THERMAL));
        sqlite3_bind_int(st, 14, !!(g->reasons & (FB__NVML_REASONS_POWER |
                                                   FB__NVML_REASON_SW_POWER_CAP)));
    }
    step(d, st);
}

void fb__agent_db_host(fb__agent_db *d, double t, const char *sensor,
                       const char *kind, double value)
{
    if (!d)
        return;
    sqlite3_bind_double(d->host, 1, t);
    sqlite3_bind_text(d->host, 2, sensor, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(d->host, 3, kind, -1, SQLITE_STATIC);
    sqlite3_bind_double(d->host, 4, value);
    step(d, d->host);
}

void fb__agent_db_rank(fb__agent_db *d, double t, const fb__rank_sample *r)
{
    if (!d)
        return;
    sqlite3_stmt *st = d->rank;
    sqlite3_bind_double(st, 1, t);
    sqlite3_bind_int(st, 2, r->rank);
    sqlite3_bind_int(st, 3, r->attempt);
    sqlite3_bind_int64(st, 4, (sqlite3_int64)r->step);
    sqlite3_bind_int64(st, 5, (sqlite3_int64)r->steps_done);
    sqlite3_bind_double(st, 6, r->last_step_s);
    sqlite3_bind_double(st, 7, r->step_ewma_s);
    sqlite3_bind_double(st, 8, r->heartbeat_age_s);
    sqlite3_bind_int(st, 9, r->phase);
    sqlite3_bind_int(st, 10, r->straggler);
    step(d, st);
}

void fb__agent_db_event(fb__agent_db *d, double t, const char *kind,
                        const char *subject, const char *severity,
                        const char *detail, const char *evidence)
{
    if (!d)
        return;
    sqlite3_stmt *st = d->event;
    sqlite3_bind_double(st, 1, t);
    sqlite3_bind_text(st, 2, kind, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 3, subject, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 4, severity, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 5, detail, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 6, evidence, -1, SQLITE_TRANSIENT);
    step(d, st);
}
