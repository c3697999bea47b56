/*
 * sim_journal.c -- the costs a real firebreak run measured, read from its
 * journal (RUN_DIR/journal.sqlite, schema in src/journal/schema.sql and
 * docs/journal.md), so `firebreak sim --from-run` can project that job to
 * another scale.
 *
 * Read-only: the supervisor is the journal's only writer.  What is taken:
 *   stall, persist  mean stall_ms / persist_ms of complete checkpoints
 *   interval        mean gap between consecutive commits in one attempt,
 *                   less the stall (compute time between checkpoints)
 *   detection       mean detect_ms of crashes (crash, error_exit,
 *                   node_failure) and of hangs, separately
 *   restart         for every attempt after the first: from the detection
 *                   that ended the previous attempt (or its end) to the
 *                   first completed step (teardown, relaunch, init,
 *                   restore)
 * Anything the journal lacks is left < 0 and the caller keeps its default.
 */
#include "sim/sim.h"

#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "firebreak/firebreak.h"

/* SQLite would block forever opening a FIFO: the journal and the side
 * files SQLite opens next to it (-wal, -shm, -journal), where present,
 * must be regular files (fb__open_regular never blocks). */
static int files_regular(const char *path, char *err, size_t size)
{
    static const char *const side[] = {"", "-wal", "-shm", "-journal"};
    for (size_t i = 0; i < sizeof side / sizeof side[0]; i++) {
        char p[4200];
        struct stat st;
        snprintf(p, sizeof p, "%s%s", path, side[i]);
        if (i > 0 && lstat(p, &st) != 0)
            continue;
        int fd = fb__open_regular(p, 0);
        if (fd < 0) {
            /* fb_sim does not link libfirebreak's fb_strerror */
            fb__sim_errf(err, size, "%s: %s", p,
                         fd == FB_ENOTREG ? "not a regular file (a FIFO, "
                                            "device or directory)"
                                          : strerror(-fd));
            return fd;
        }
        close(fd);
    }
    return 0;
}

/* Run a query returning one row; up to ncol column values into out[]
 * (NULL, a missing row or a missing column give -1).  0 or -EIO. */
static int one_row(sqlite3 *db, const char *sql, double *out, int ncol,
                   char *err, size_t size)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
        fb__sim_errf(err, size, "journal query failed: %s", sqlite3_errmsg(db));
        return -EIO;
    }
    for (int i = 0; i < ncol; i++)
        out[i] = -1;
    if (ncol > sqlite3_column_count(st))
        ncol = sqlite3_column_count(st);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        for (int i = 0; i < ncol; i++)
            if (sqlite3_column_type(st, i) != SQLITE_NULL)
                out[i] = sqlite3_column_double(st, i);
    } else if (rc != SQLITE_DONE) {
        fb__sim_errf(err, size, "journal query failed: %s", sqlite3_errmsg(db));
        sqlite3_finalize(st);
        return -EIO;
    }
    sqlite3_finalize(st);
    return 0;
}

static int check_version(sqlite3 *db, char *err, size_t size)
{
    sqlite3_stmt *st = NULL;
    const char *sql = "SELECT value FROM meta WHERE key = 'schema_version'";
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        return fb__sim_errf(err, size, "not a firebreak journal (%s)",
                            sqlite3_errmsg(db));
    int rc = 0;
    if (sqlite3_step(st) == SQLITE_ROW) {
        const char *v = (const char *)sqlite3_column_text(st, 0);
        /* Readers accept any version with the same major number. */
        if (!v || strtol(v, NULL, 10) != 1)
            rc = fb__sim_errf(err, size,
                              "journal schema version '%s' is not 1.x",
                              v ? v : "(null)");
    }
    sqlite3_finalize(st);
    return rc;
}

int fb__sim_read_run(const char *run_dir, fb_sim_measured *m, char *err,
                     size_t size)
{
    memset(m, 0, sizeof *m);
    m->stall_s = m->persist_s = m->detect_crash_s = m->detect_hang_s = -1;
    m->restart_s = m->interval_s = -1;
    m->gpus = -1;
    char path[4096];
    if (snprintf(path, sizeof path, "%s/journal.sqlite", run_dir) >=
        (int)sizeof path)
        return fb__sim_errf(err, size, "path too long");
    struct stat sb;
    if (stat(path, &sb) != 0)
        return fb__sim_errf(err, size,
                            "no journal.sqlite in this directory (%s)",
                            strerror(errno));
    int frc = files_regular(path, err, size);
    if (frc)
        return frc;
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        int rc = fb__sim_errf(err, size, "cannot open %s: %s", path,
                              db ? sqlite3_errmsg(db) : "out of memory");
        sqlite3_close(db);
        return rc;
    }
    sqlite3_busy_timeout(db, 2000);
    /* Each query gives one row; what it measures is assigned below. */
    enum { Q_CKPT, Q_INTERVAL, Q_CRASH, Q_HANG, Q_RESTART, Q_RUN, NQ };
    static const char *const queries[NQ] = {
        [Q_CKPT] = "SELECT count(*), avg(stall_ms) / 1e3, "
                   "avg(persist_ms) / 1e3 FROM checkpoint "
                   "WHERE status = 'complete'",
        [Q_INTERVAL] = "SELECT avg(gap) FROM (SELECT committed_at - "
                       "lag(committed_at) OVER (PARTITION BY attempt_id "
                       "ORDER BY committed_at) - stall_ms / 1e3 AS gap "
                       "FROM checkpoint WHERE status = 'complete') "
                       "WHERE gap > 0",
        [Q_CRASH] = "SELECT count(*), avg(detect_ms) / 1e3 FROM incident "
                    "WHERE kind IN ('crash', 'error_exit', 'node_failure')",
        [Q_HANG] = "SELECT count(*), avg(detect_ms) / 1e3 FROM incident "
                   "WHERE kind = 'hang'",
        [Q_RESTART] = "SELECT count(*), avg(a.ready_at - coalesce("
                      "(SELECT max(i.detected_at) FROM incident i "
                      "WHERE i.attempt_id = p.id), p.ended_at, "
                      "a.started_at)) "
                      "FROM attempt a JOIN attempt p ON p.run_id = a.run_id "
                      "AND p.number = a.number - 1 "
                      "WHERE a.number >= 1 AND a.ready_at IS NOT NULL",
        [Q_RUN] = "SELECT nproc FROM run ORDER BY id DESC LIMIT 1",
    };
    double v[NQ][3];
    int rc = check_version(db, err, size);
    for (int q = 0; q < NQ && !rc; q++)
        rc = one_row(db, queries[q], v[q], 3, err, size);
    if (!rc) {
        m->samples_stall = (int)v[Q_CKPT][0];
        m->stall_s = v[Q_CKPT][1];
        m->persist_s = v[Q_CKPT][2];
        m->interval_s = v[Q_INTERVAL][0];
        m->samples_detect = (int)v[Q_CRASH][0] + (int)v[Q_HANG][0];
        m->detect_crash_s = v[Q_CRASH][1];
        m->detect_hang_s = v[Q_HANG][1];
        m->samples_restart = (int)v[Q_RESTART][0];
        m->restart_s = v[Q_RESTART][1];
        m->gpus = (long)v[Q_RUN][0];
    }
    sqlite3_close(db);
    if (rc)
        return rc;
    if (m->samples_stall == 0 && m->samples_detect == 0 &&
        m->samples_restart == 0)
        return fb__sim_errf(err, size,
                            "the journal has no complete checkpoint, "
                            "detected failure or restart to measure");
    return 0;
}
