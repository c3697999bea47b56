/*
 * test_journal.c -- the journal keeps what it cannot write: writes that
 * fail (a full disk, simulated by a SQLite VFS that refuses writes on
 * demand) wait in a bounded queue, in order, and reach the database once
 * it can be written again; what does not fit is counted, never lost
 * quietly.  And the writer's commits never wait for an fsync: the WAL's
 * checkpoints run on the journal's own thread (the VFS counts the syncs
 * each thread asks for).
 */
#include <errno.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "journal/journal.h"
#include "../check.h"

/* ---- a VFS whose writes fail with SQLITE_FULL while disk_full is set ---- */

static int disk_full;
static sqlite3_vfs *parent;
static _Thread_local long syncs_here;  /* asked for by this thread */
static atomic_long syncs_all;          /* by every thread          */

typedef struct ffile {
    sqlite3_file base;
    sqlite3_file *real;
} ffile;

#define REAL(f) (((ffile *)(f))->real)

static int f_close(sqlite3_file *f) { return REAL(f)->pMethods->xClose(REAL(f)); }
static int f_read(sqlite3_file *f, void *b, int n, sqlite3_int64 o)
{ return REAL(f)->pMethods->xRead(REAL(f), b, n, o); }
static int f_write(sqlite3_file *f, const void *b, int n, sqlite3_int64 o)
{ return disk_full ? SQLITE_FULL : REAL(f)->pMethods->xWrite(REAL(f), b, n, o); }
static int f_truncate(sqlite3_file *f, sqlite3_int64 s)
{ return REAL(f)->pMethods->xTruncate(REAL(f), s); }
static int f_sync(sqlite3_file *f, int fl)
{
    syncs_here++;
    atomic_fetch_add(&syncs_all, 1);
    return disk_full ? SQLITE_IOERR_FSYNC : REAL(f)->pMethods->xSync(REAL(f), fl);
}
static int f_size(sqlite3_file *f, sqlite3_int64 *s)
{ return REAL(f)->pMethods->xFileSize(REAL(f), s); }
static int f_lock(sqlite3_file *f, int l) { return REAL(f)->pMethods->xLock(REAL(f), l); }
static int f_unlock(sqlite3_file *f, int l) { return REAL(f)->pMethods->xUnlock(REAL(f), l); }
static int f_reserved(sqlite3_file *f, int *r)
{ return REAL(f)->pMethods->xCheckReservedLock(REAL(f), r); }
static int f_fcntl(sqlite3_file *f, int op, void *a)
{ return REAL(f)->pMethods->xFileControl(REAL(f), op, a); }
static int f_sector(sqlite3_file *f) { return REAL(f)->pMethods->xSectorSize(REAL(f)); }
static int f_devchar(sqlite3_file *f)
{ return REAL(f)->pMethods->xDeviceCharacteristics(REAL(f)); }
static int f_shmmap(sqlite3_file *f, int i, int sz, int ext, void volatile **p)
{ return REAL(f)->pMethods->xShmMap(REAL(f), i, sz, ext, p); }
static int f_shmlock(sqlite3_file *f, int o, int n, int fl)
{ return REAL(f)->pMethods->xShmLock(REAL(f), o, n, fl); }
static void f_shmbarrier(sqlite3_file *f) { REAL(f)->pMethods->xShmBarrier(REAL(f)); }
static int f_shmunmap(sqlite3_file *f, int d) { return REAL(f)->pMethods->xShmUnmap(REAL(f), d); }

static const sqlite3_io_methods f_methods = {
    2, f_close, f_read, f_write, f_truncate, f_sync, f_size, f_lock, f_unlock,
    f_reserved, f_fcntl, f_sector, f_devchar, f_shmmap, f_shmlock, f_shmbarrier,
    f_shmunmap, NULL, NULL,
};

static int v_open(sqlite3_vfs *v, const char *name, sqlite3_file *f, int flags,
                  int *out)
{
    (void)v;
    ffile *ff = (ffile *)f;
    ff->real = (sqlite3_file *)(ff + 1);
    int rc = parent->xOpen(parent, name, ff->real, flags, out);
    ff->base.pMethods = rc == SQLITE_OK && ff->real->pMethods ? &f_methods : NULL;
    return rc;
}

static int v_delete(sqlite3_vfs *v, const char *n, int s) { (void)v; return parent->xDelete(parent, n, s); }
static int v_access(sqlite3_vfs *v, const char *n, int fl, int *r) { (void)v; return parent->xAccess(parent, n, fl, r); }
static int v_full(sqlite3_vfs *v, const char *n, int sz, char *o) { (void)v; return parent->xFullPathname(parent, n, sz, o); }
static void *v_dlopen(sqlite3_vfs *v, const char *n) { (void)v; return parent->xDlOpen(parent, n); }
static void v_dlerr(sqlite3_vfs *v, int n, char *m) { (void)v; parent->xDlError(parent, n, m); }
static void (*v_dlsym(sqlite3_vfs *v, void *h, const char *s))(void) { (void)v; return parent->xDlSym(parent, h, s); }
static void v_dlclose(sqlite3_vfs *v, void *h) { (void)v; parent->xDlClose(parent, h); }
static int v_rand(sqlite3_vfs *v, int n, char *o) { (void)v; return parent->xRandomness(parent, n, o); }
static int v_sleep(sqlite3_vfs *v, int us) { (void)v; return parent->xSleep(parent, us); }
static int v_time(sqlite3_vfs *v, double *t) { (void)v; return parent->xCurrentTime(parent, t); }
static int v_lasterr(sqlite3_vfs *v, int n, char *m) { (void)v; return parent->xGetLastError(parent, n, m); }

static sqlite3_vfs full_vfs;

static void install_vfs(void)
{
    parent = sqlite3_vfs_find(NULL);
    full_vfs = (sqlite3_vfs){
        .iVersion = 1, .szOsFile = (int)sizeof(ffile) + parent->szOsFile,
        .mxPathname = parent->mxPathname, .zName = "fb-test-full",
        .xOpen = v_open, .xDelete = v_delete, .xAccess = v_access,
        .xFullPathname = v_full, .xDlOpen = v_dlopen, .xDlError = v_dlerr,
        .xDlSym = v_dlsym, .xDlClose = v_dlclose, .xRandomness = v_rand,
        .xSleep = v_sleep, .xCurrentTime = v_time, .xGetLastError = v_lasterr,
    };
    sqlite3_vfs_register(&full_vfs, 1); /* the default: fb__journal_open uses it */
}

/* ---- helpers ---- */

static char dir[] = "/tmp/fb-journal-test.XXXXXX";
static char path[4096];

static long long count(const char *sql)
{
    sqlite3 *db;
    long long n = -1;
    sqlite3_stmt *st;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, "unix") == SQLITE_OK &&
        sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK) {
        if (sqlite3_step(st) == SQLITE_ROW)
            n = sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
    }
    sqlite3_close(db);
    return n;
}

static fb__journal *open_fresh(const char *name)
{
    snprintf(path, sizeof path, "%s/%s", dir, name);
    fb__journal *j = NULL;
    char err[256];
    CHECK_RC(fb__journal_open(&j, path, err, sizeof err), 0);
    fb__journal_run r = {.name = "t", .job_id = "t-1", .run_dir = dir,
                         .command_json = "[]", .launcher = "local",
                         .hostname = "h", .nproc = 2, .nnodes = 1,
                         .max_restarts = 3, .hang_timeout_s = 10,
                         .started_at = 1.0};
    CHECK_RC(fb__journal_begin_run(j, &r), 0);
    return j;
}

static fb__journal_incident incident(int64_t attempt_id, const char *kind)
{
    return (fb__journal_incident){.attempt_id = attempt_id, .kind = kind,
        .occurred_at = 2, .detected_at = 2.1, .detect_ms = 100, .rank = 1,
        .phase = "train", .step = 7, .lost_s = 1, .detail = "rank 1 died"};
}

/* The disk fills mid-run: an attempt, an incident, an update of that
 * incident, a checkpoint and samples wait; once there is room again, one
 * flush writes them all, in order. */
static void test_retry(void)
{
    fb__journal *j = open_fresh("retry.sqlite");
    fb__journal_status st;
    int64_t a0, a1, inc;
    CHECK_RC(fb__journal_begin_attempt(j, 0, 1.5, &a0), 0);
    disk_full = 1;
    fb__journal_incident in = incident(a0, "crash");
    CHECK_RC(fb__journal_add_incident(j, &in, &inc), 0);  /* queued */
    CHECK_RC(fb__journal_incident_text(j, inc, "fr_verdict", "{\"v\":1}"), 0);
    CHECK_RC(fb__journal_attempt_text(j, a0, "outcome", "failed"), 0);
    CHECK_RC(fb__journal_begin_attempt(j, 1, 3.0, &a1), 0);
    CHECK_EQ_INT(a1, a0 + 1);
    CHECK_RC(fb__journal_checkpoint(j, a1, 10, 4.0, 2, 100, 1, 2, "partial"), 0);
    CHECK_RC(fb__journal_checkpoint(j, a1, 10, 4.5, 2, 200, 1, 2, "complete"), 0);
    CHECK_RC(fb__journal_sample(j, a1, 0, 4.0, 10, 5.0), 0);
    CHECK_RC(fb__journal_flush(j), -ENOSPC);
    fb__journal_get_status(j, &st);
    CHECK(st.failing);
    /* incident, its update, the attempt's update, an attempt, and two
     * checkpoint writes (update, insert-if-absent) each time */
    CHECKF(st.pending_rows == 8, "pending_rows %zu", st.pending_rows);
    CHECK_EQ_INT(st.pending_samples, 1);
    CHECK_EQ_INT(st.dropped_rows, 0);
    CHECK_EQ_INT(st.dropped_samples, 0);
    CHECKF(strstr(st.last_error, "full") != NULL, "last_error '%s'", st.last_error);
    CHECK(strstr(st.path, "retry.sqlite") != NULL);
    CHECK_EQ_INT(count("select count(*) from incident"), 0);

    disk_full = 0;
    CHECK_RC(fb__journal_flush(j), 0);
    fb__journal_get_status(j, &st);
    CHECK(!st.failing);
    CHECK_EQ_INT(st.pending_rows, 0);
    CHECK_EQ_INT(st.pending_samples, 0);
    CHECK_EQ_INT(count("select count(*) from incident where kind='crash' and "
                       "fr_verdict='{\"v\":1}'"), 1);
    CHECK_EQ_INT(count("select count(*) from attempt"), 2);
    CHECK_EQ_INT(count("select count(*) from attempt where outcome='failed'"), 1);
    CHECK_EQ_INT(count("select count(*) from checkpoint"), 1);
    CHECK_EQ_INT(count("select bytes from checkpoint where status='complete'"), 200);
    CHECK_EQ_INT(count("select count(*) from step_sample"), 1);
    CHECK_RC(fb__journal_end_run(j, 5, "completed", 0, "ok"), 0);
    fb__journal_close_status(j, &st);
    CHECK_EQ_INT(st.dropped_rows, 0);
    CHECK_EQ_INT(st.dropped_samples, 0);
    CHECK_EQ_INT(count("select count(*) from run where status='completed'"), 1);
}

/* The disk stays full: the queue is bounded, and what does not fit -- and
 * what still waits when the journal closes -- is counted as dropped. */
static void test_bounded(void)
{
    fb__journal *j = open_fresh("bounded.sqlite");
    fb__journal_set_limits(j, 3, 2);
    fb__journal_status st;
    int64_t a0;
    CHECK_RC(fb__journal_begin_attempt(j, 0, 1.5, &a0), 0);
    disk_full = 1;
    for (int i = 0; i < 5; i++) {
        fb__journal_incident in = incident(a0, "crash");
        int rc = fb__journal_add_incident(j, &in, NULL);
        CHECK_RC(rc, i < 3 ? 0 : -ENOSPC);
    }
    for (int i = 0; i < 3; i++)
        fb__journal_sample(j, a0, 0, 2.0 + i, i, 1.0);
    fb__journal_get_status(j, &st);
    CHECK_EQ_INT(st.pending_rows, 3);
    CHECK_EQ_INT(st.dropped_rows, 2);
    CHECK_EQ_INT(st.pending_samples, 2);
    CHECK_EQ_INT(st.dropped_samples, 1);
    CHECK_RC(fb__journal_end_run(j, 5, "completed", 0, "ok"), -ENOSPC);
    fb__journal_close_status(j, &st);
    /* 2 that did not fit, the run's end that did not fit, 3 still waiting */
    CHECKF(st.dropped_rows == 6, "dropped_rows %llu", (unsigned long long)st.dropped_rows);
    CHECK_EQ_INT(st.dropped_samples, 3);
    CHECK(st.failing);
    disk_full = 0;
    /* What made it before the disk filled is there; the run row says
     * "running" -- which is why the caller must report the drops. */
    CHECK_EQ_INT(count("select count(*) from attempt"), 1);
    CHECK_EQ_INT(count("select count(*) from run where status='running'"), 1);
}

/* A row refused for good (a bug, not the disk) does not block the rows
 * queued behind it: it is dropped and counted. */
static void test_refused(void)
{
    fb__journal *j = open_fresh("refused.sqlite");
    fb__journal_status st;
    int64_t a0;
    CHECK_RC(fb__journal_begin_attempt(j, 0, 1.5, &a0), 0);
    fb__journal_incident bad = incident(a0, NULL); /* kind NOT NULL */
    CHECK_RC(fb__journal_add_incident(j, &bad, NULL), -EIO);
    disk_full = 1;
    fb__journal_incident good = incident(a0, "hang");
    CHECK_RC(fb__journal_add_incident(j, &good, NULL), 0);  /* queued */
    CHECK_RC(fb__journal_add_incident(j, &bad, NULL), 0);   /* behind it */
    CHECK_RC(fb__journal_add_incident(j, &good, NULL), 0);
    disk_full = 0;
    CHECK_RC(fb__journal_flush(j), 0);
    fb__journal_get_status(j, &st);
    CHECKF(st.dropped_rows == 2 && st.pending_rows == 0, "dropped %llu pending %zu",
           (unsigned long long)st.dropped_rows, st.pending_rows);
    CHECKF(strstr(st.last_error, "NOT NULL") != NULL, "last_error '%s'", st.last_error);
    CHECK_EQ_INT(count("select count(*) from incident where kind='hang'"), 2);
    fb__journal_close(j);
}

/* A 1.0 journal reopened by this writer gains 1.1's event.source (and its
 * version says 1.1); a restore_done event records its tier there. */
static void test_migrate_1_0(void)
{
    snprintf(path, sizeof path, "%s/old.sqlite", dir);
    sqlite3 *db;
    CHECK(sqlite3_open(path, &db) == SQLITE_OK);
    CHECK(sqlite3_exec(db,
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
        "INSERT INTO meta VALUES('schema_version','1.0');"
        "CREATE TABLE event (id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL,"
        " attempt_id INTEGER NOT NULL, time REAL NOT NULL, rank INTEGER,"
        " kind TEXT NOT NULL, step INTEGER, code INTEGER, bytes INTEGER,"
        " value_ms REAL, detail TEXT);", NULL, NULL, NULL) == SQLITE_OK);
    sqlite3_close(db);
    fb__journal *j = NULL;
    char err[256];
    CHECK_RC(fb__journal_open(&j, path, err, sizeof err), 0);
    if (!j)
        return;
    fb__journal_event ev = {.attempt_id = 1, .time = 3, .rank = 1,
                            .kind = "restore_done", .step = 5, .value_ms = 2,
                            .detail = "memory", .source = "memory"};
    CHECK_RC(fb__journal_add_event(j, &ev), 0);
    ev.kind = "note";
    ev.source = NULL;
    CHECK_RC(fb__journal_add_event(j, &ev), 0);
    fb__journal_close(j);
    CHECK_EQ_U64((uint64_t)count("SELECT count(*) FROM meta WHERE "
                                 "key='schema_version' AND value='1.1'"), 1);
    CHECK_EQ_U64((uint64_t)count("SELECT count(*) FROM event WHERE "
                                 "kind='restore_done' AND source='memory'"), 1);
    CHECK_EQ_U64((uint64_t)count("SELECT count(*) FROM event WHERE "
                                 "kind='note' AND source IS NULL"), 1);
}

/* Batches: rows written between begin and end reach the database
 * together at the outermost end (one transaction), not one by one; a
 * batch whose end finds the disk full leaves them queued for the retries. */
static void test_batch(void)
{
    fb__journal *j = open_fresh("batch.sqlite");
    fb__journal_status st;
    int64_t a0, inc;
    CHECK_RC(fb__journal_begin_attempt(j, 0, 1.5, &a0), 0);
    CHECK_EQ_INT(count("select count(*) from attempt"), 1); /* no batch: at once */
    fb__journal_batch_begin(j);
    fb__journal_incident in = incident(a0, "crash");
    CHECK_RC(fb__journal_add_incident(j, &in, &inc), 0);
    CHECK_RC(fb__journal_incident_text(j, inc, "fr_verdict", "{\"v\":2}"), 0);
    fb__journal_batch_begin(j); /* nested: the inner end writes nothing */
    CHECK_RC(fb__journal_attempt_text(j, a0, "outcome", "failed"), 0);
    CHECK_RC(fb__journal_batch_end(j), 0);
    CHECK_EQ_INT(count("select count(*) from incident"), 0);
    CHECK_EQ_INT(count("select count(*) from attempt where outcome='failed'"), 0);
    fb__journal_get_status(j, &st);
    CHECK(!st.failing); /* queued by the batch, not by a failure */
    CHECK_EQ_INT(st.pending_rows, 3);
    CHECK_RC(fb__journal_batch_end(j), 0);
    CHECK_EQ_INT(count("select count(*) from incident where fr_verdict='{\"v\":2}'"), 1);
    CHECK_EQ_INT(count("select count(*) from attempt where outcome='failed'"), 1);
    fb__journal_get_status(j, &st);
    CHECK_EQ_INT(st.pending_rows, 0);

    fb__journal_batch_begin(j);
    CHECK_RC(fb__journal_attempt_text(j, a0, "outcome", "stopped"), 0);
    disk_full = 1;
    CHECK_RC(fb__journal_batch_end(j), -ENOSPC);
    fb__journal_get_status(j, &st);
    CHECK(st.failing);
    CHECK_EQ_INT(st.pending_rows, 1);
    disk_full = 0;
    CHECK_RC(fb__journal_flush(j), 0);
    CHECK_EQ_INT(count("select count(*) from attempt where outcome='stopped'"), 1);
    CHECK_RC(fb__journal_end_run(j, 5, "completed", 0, "ok"), 0);
    fb__journal_close_status(j, &st);
    CHECK_EQ_INT(st.dropped_rows, 0);
}

/* Thousands of samples, committed a batch at a time, grow the WAL far past
 * the 1,000 pages at which a checkpoint is due: none of the commits syncs
 * on the writer's thread (SQLite's automatic checkpoint would, inside the
 * commit), the journal's thread checkpoints, and the file closed is whole
 * (no -wal left, every sample in it). */
static void test_checkpoints_off_the_writer(void)
{
    fb__journal *j = open_fresh("wal.sqlite");
    int64_t a0;
    CHECK_RC(fb__journal_begin_attempt(j, 0, 1.5, &a0), 0);
    long mine = syncs_here, all = atomic_load(&syncs_all);
    enum { RANKS = 64, STEPS = 600 };
    for (int step = 0; step < STEPS; step++) {
        fb__journal_batch_begin(j);
        for (int r = 0; r < RANKS; r++)
            CHECK_RC(fb__journal_sample(j, a0, r, 2.0 + step * 0.1, step, 100.0), 0);
        CHECK_RC(fb__journal_batch_end(j), 0);
        if (step % 50 == 49)
            CHECK_RC(fb__journal_flush(j), 0);
    }
    CHECK_RC(fb__journal_flush(j), 0);
    char wal[4200];
    snprintf(wal, sizeof wal, "%s-wal", path);
    FILE *w = fopen(wal, "rb");
    long wal_bytes = 0;
    if (w) {
        fseek(w, 0, SEEK_END);
        wal_bytes = ftell(w);
        fclose(w);
    }
    CHECK(wal_bytes > 1000L * 4096); /* past the point where one is due */
    CHECK_EQ_INT(syncs_here - mine, 0);
    /* the thread's: it began at the first commit past 1,000 pages */
    for (int i = 0; i < 500 && atomic_load(&syncs_all) == all; i++)
        usleep(10000);
    CHECK(atomic_load(&syncs_all) > all);
    CHECK_RC(fb__journal_end_run(j, 5, "completed", 0, "ok"), 0);
    fb__journal_close(j);
    CHECK(access(wal, F_OK) != 0);
    CHECK_EQ_INT(count("select count(*) from step_sample"), (long long)RANKS * STEPS);
}

/* Compiled statements are kept and reused (more distinct ones than the
 * journal keeps, so some are replaced): every row written through a
 * reused statement has its own values, NULLs included, failing or not. */
static void test_statements(void)
{
    fb__journal *j = open_fresh("stmts.sqlite");
    static const char *const reals[] = {"launched_at", "ready_at", "ended_at",
                                        "restore_s"};
    static const char *const ints[] = {"restored_step", "start_step", "end_step"};
    static const char *const texts[] = {"outcome", "nodes"};
    static const char *const inc_cols[] = {"fr_verdict", "health", "detail",
        "category", "component", "evidence", "last_lines", "injected"};
    int64_t a0, inc;
    CHECK_RC(fb__journal_begin_attempt(j, 0, 1.5, &a0), 0);
    fb__journal_incident in = incident(a0, "crash");
    CHECK_RC(fb__journal_add_incident(j, &in, &inc), 0);
    char v[64];
    for (int round = 0; round < 3; round++) {
        if (round == 1)
            fb__journal_batch_begin(j);
        disk_full = round == 2; /* the last round waits in the queue */
        for (int k = 0; k < 4; k++)
            CHECK_RC(fb__journal_attempt_real(j, a0, reals[k], round * 10 + k), 0);
        for (int k = 0; k < 3; k++)
            CHECK_RC(fb__journal_attempt_int(j, a0, ints[k], round * 100 + k), 0);
        for (int k = 0; k < 2; k++) {
            snprintf(v, sizeof v, "%s-%d", texts[k], round);
            CHECK_RC(fb__journal_attempt_text(j, a0, texts[k], v), 0);
        }
        for (int k = 0; k < 8; k++) {
            snprintf(v, sizeof v, "%s-%d", inc_cols[k], round);
            CHECK_RC(fb__journal_incident_text(j, inc, inc_cols[k], v), 0);
        }
        for (int e = 0; e < 4; e++) {
            snprintf(v, sizeof v, "d%d-%d", round, e);
            fb__journal_event ev = {.attempt_id = a0, .time = round, .rank = e % 2 ? -1 : e,
                .kind = "ckpt_commit", .step = e % 2 ? -1 : round, .value_ms = -1,
                .detail = e % 2 ? NULL : v, .source = e == 2 ? "memory" : NULL};
            CHECK_RC(fb__journal_add_event(j, &ev), 0);
        }
        CHECK_RC(fb__journal_checkpoint(j, a0, round, round + 0.5, 2, 4096, 1, 2,
                                        "committed"), 0);
        if (round == 1)
            CHECK_RC(fb__journal_batch_end(j), 0);
    }
    disk_full = 0;
    CHECK_RC(fb__journal_flush(j), 0);
    for (int k = 0; k < 4; k++) {
        snprintf(v, sizeof v, "select count(*) from attempt where %s=%d", reals[k], 20 + k);
        CHECK_EQ_INT(count(v), 1);
    }
    for (int k = 0; k < 3; k++) {
        snprintf(v, sizeof v, "select count(*) from attempt where %s=%d", ints[k], 200 + k);
        CHECK_EQ_INT(count(v), 1);
    }
    CHECK_EQ_INT(count("select count(*) from attempt where outcome='outcome-2' and"
                       " nodes='nodes-2'"), 1);
    CHECK_EQ_INT(count("select count(*) from incident where fr_verdict='fr_verdict-2'"
                       " and health='health-2' and detail='detail-2' and"
                       " category='category-2' and component='component-2' and"
                       " evidence='evidence-2' and last_lines='last_lines-2' and"
                       " injected='injected-2'"), 1);
    CHECK_EQ_INT(count("select count(*) from event where kind='ckpt_commit'"), 12);
    CHECK_EQ_INT(count("select count(*) from event where kind='ckpt_commit' and"
                       " detail is null and rank is null and step is null"
                       " and source is null"), 6);
    CHECK_EQ_INT(count("select count(*) from event where kind='ckpt_commit' and"
                       " detail='d'||step||'-'||rank"), 6);
    CHECK_EQ_INT(count("select count(*) from event where source='memory' and rank=2"), 3);
    CHECK_EQ_INT(count("select count(distinct step) from checkpoint where status="
                       "'committed' and committed_at=step+0.5"), 3);
    fb__journal_status st;
    CHECK_RC(fb__journal_end_run(j, 5, "completed", 0, "ok"), 0);
    fb__journal_close_status(j, &st);
    CHECK_EQ_INT(st.dropped_rows, 0);
}

int main(void)
{
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    check_tmpdir(dir);
    install_vfs();
    test_retry();
    test_bounded();
    test_refused();
    test_migrate_1_0();
    test_batch();
    test_statements();
    test_checkpoints_off_the_writer();
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        failures++;
    return failures != 0;
}
