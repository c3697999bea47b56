/*
 * test_journal_read.c -- the journal's one reader (journal.h, "Reading"):
 * what the writer wrote reads back, row by row, NULLs as "none"; a live
 * journal (the writer still open, rows in its WAL) reads; a newer minor
 * schema version with extra columns and tables reads; another major is
 * refused with FB_EVERSION and a message that names the file and says
 * what to do; a FIFO where the database or its -wal is, is refused at once
 * (SQLite would block opening it); a file that is not a journal is
 * refused; where ranks ran (schema 1.1: placement, and the node and host
 * of incidents, events and samples) reads back, and a 1.0 file reads with
 * those as NULL and is upgraded to 1.1 when the writer opens it.
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "journal/journal.h"
#include "../check.h"

static char dir[] = "/tmp/fb-journal-read.XXXXXX";

static const char *in_dir(const char *name)
{
    static char p[4][4096];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
    return p[k];
}

/* A journal as the supervisor writes it: one run, two attempts, a crash,
 * an event, a checkpoint, samples.  The writer is left open for the
 * caller (a live run) or closed (a finished one). */
static fb__journal *write_journal(const char *path, int leave_open)
{
    fb__journal *j = NULL;
    char err[256];
    CHECK_RC(fb__journal_open(&j, path, err, sizeof err), 0);
    if (!j)
        return NULL;
    fb__journal_run r = {.name = "t", .job_id = "t-1", .run_dir = dir,
                         .command_json = "[\"train\"]", .launcher = "local",
                         .hostname = "h1", .options_json = "{}", .nproc = 4,
                         .nnodes = 2, .max_restarts = 3,
                         .hang_timeout_s = 10, .started_at = 100.25};
    CHECK_RC(fb__journal_begin_run(j, &r), 0);
    int64_t a0, a1, inc;
    CHECK_RC(fb__journal_begin_attempt(j, 0, 100.5, &a0), 0);
    CHECK_RC(fb__journal_attempt_real(j, a0, "ready_at", 102), 0);
    CHECK_RC(fb__journal_attempt_int(j, a0, "end_step", 41), 0);
    CHECK_RC(fb__journal_attempt_text(j, a0, "outcome", "failed"), 0);
    fb__journal_incident in = {
        .attempt_id = a0, .kind = "crash", .occurred_at = 110,
        .detected_at = 110.5, .detect_ms = 500, .rank = 3, .node = "n2",
        .signal = 9, .phase = "train", .step = 41, .lost_s = -1,
        .detail = "rank 3 died"};
    CHECK_RC(fb__journal_add_incident(j, &in, &inc), 0);
    CHECK_RC(fb__journal_incident_text(j, inc, "category", "GPU"), 0);
    fb__journal_event ev = {.attempt_id = a0, .time = 105, .rank = -1,
                            .kind = "inject", .step = -1, .code = 0,
                            .bytes = 0, .value_ms = -1,
                            .detail = "corrupt:step=40"};
    CHECK_RC(fb__journal_add_event(j, &ev), 0);
    CHECK_RC(fb__journal_checkpoint(j, a0, 40, 108, 4, 4096, 12.5, 80,
                                    "complete"), 0);
    CHECK_RC(fb__journal_sample(j, a0, 0, 103, 10, 50), 0);
    CHECK_RC(fb__journal_sample(j, a0, 1, 103.5, 11, 51), 0);
    CHECK_RC(fb__journal_begin_attempt(j, 1, 111, &a1), 0);
    CHECK_RC(fb__journal_flush(j), 0);
    if (leave_open)
        return j;
    CHECK_RC(fb__journal_end_run(j, 200, "completed", 0, "done"), 0);
    fb__journal_close(j);
    return NULL;
}

static void sql(const char *path, const char *stmts)
{
    sqlite3 *db = NULL;
    char *msg = NULL;
    CHECK_EQ_INT(sqlite3_open(path, &db), SQLITE_OK);
    CHECKF(sqlite3_exec(db, stmts, NULL, NULL, &msg) == SQLITE_OK, "%s: %s",
           stmts, msg ? msg : "?");
    sqlite3_free(msg);
    sqlite3_close(db);
}

/* Every table reads back what was written; NULLs come as "none". */
static void check_rows(fb__journal_ro *jr, int finished)
{
    fb__journal_cursor *c;
    fb__journal_run_row run;
    CHECK_RC(fb__journal_rows(jr, FB__JOURNAL_RUN, &c), 0);
    CHECK_RC(fb__journal_next_run(c, &run), 1);
    CHECK_EQ_STR(run.name, "t");
    CHECK_EQ_STR(run.hostname, "h1");
    CHECK_EQ_INT(run.nproc, 4);
    CHECK_EQ_INT(run.nnodes, 2);
    CHECK_EQ_DBL(run.started_at, 100.25);
    if (finished) {
        CHECK_EQ_STR(run.status, "completed");
        CHECK_EQ_STR(run.reason, "done");
        CHECK_EQ_DBL(run.ended_at, 200);
    } else {
        CHECK_EQ_STR(run.status, "running");
        CHECK_EQ_STR(run.reason, NULL);
        CHECK(isnan(run.ended_at));
    }
    CHECK_RC(fb__journal_next_run(c, &run), 0);
    fb__journal_rows_close(c);

    fb__journal_attempt_row a;
    CHECK_RC(fb__journal_rows(jr, FB__JOURNAL_ATTEMPT, &c), 0);
    CHECK_RC(fb__journal_next_attempt(c, &a), 1);
    CHECK_EQ_INT(a.number, 0);
    CHECK_EQ_DBL(a.started_at, 100.5);
    CHECK_EQ_DBL(a.ready_at, 102);
    CHECK_EQ_INT(a.end_step, 41);
    CHECK_EQ_INT(a.start_step, -1);
    CHECK_EQ_INT(a.restored_step, -1);
    CHECK(isnan(a.launched_at) && isnan(a.ended_at) && isnan(a.restore_s));
    CHECK_EQ_STR(a.outcome, "failed");
    int64_t a0 = a.id;
    CHECK_RC(fb__journal_next_attempt(c, &a), 1);
    CHECK_EQ_INT(a.number, 1);
    CHECK(a.id > a0);
    CHECK_EQ_STR(a.outcome, NULL);
    CHECK_RC(fb__journal_next_attempt(c, &a), 0);
    /* a cursor is read as its own table only */
    fb__journal_incident_row in;
    CHECK_RC(fb__journal_next_incident(c, &in), -EINVAL);
    fb__journal_rows_close(c);

    CHECK_RC(fb__journal_rows(jr, FB__JOURNAL_INCIDENT, &c), 0);
    CHECK_RC(fb__journal_next_incident(c, &in), 1);
    CHECK_EQ_INT(in.attempt_id, a0);
    CHECK_EQ_STR(in.kind, "crash");
    CHECK_EQ_DBL(in.occurred_at, 110);
    CHECK_EQ_DBL(in.detected_at, 110.5);
    CHECK_EQ_DBL(in.detect_ms, 500);
    CHECK_EQ_INT(in.rank, 3);
    CHECK_EQ_STR(in.node, "n2");
    CHECK_EQ_INT(in.signal, 9);
    CHECK(!in.has_exit_code);
    CHECK_EQ_INT(in.step, 41);
    CHECK(isnan(in.lost_s));
    CHECK_EQ_STR(in.category, "GPU");
    CHECK_EQ_STR(in.detail, "rank 3 died");
    CHECK_EQ_STR(in.fr_verdict, NULL);
    CHECK_RC(fb__journal_next_incident(c, &in), 0);
    fb__journal_rows_close(c);

    fb__journal_checkpoint_row k;
    CHECK_RC(fb__journal_rows(jr, FB__JOURNAL_CHECKPOINT, &c), 0);
    CHECK_RC(fb__journal_next_checkpoint(c, &k), 1);
    CHECK_EQ_INT(k.attempt_id, a0);
    CHECK_EQ_INT(k.step, 40);
    CHECK_EQ_DBL(k.committed_at, 108);
    CHECK_EQ_INT(k.ranks, 4);
    CHECK_EQ_INT(k.bytes, 4096);
    CHECK_EQ_DBL(k.stall_ms, 12.5);
    CHECK_EQ_DBL(k.persist_ms, 80);
    CHECK_EQ_STR(k.status, "complete");
    CHECK_RC(fb__journal_next_checkpoint(c, &k), 0);
    fb__journal_rows_close(c);

    fb__journal_event_row e;
    CHECK_RC(fb__journal_rows(jr, FB__JOURNAL_EVENT, &c), 0);
    CHECK_RC(fb__journal_next_event(c, &e), 1);
    CHECK_EQ_DBL(e.time, 105);
    CHECK_EQ_INT(e.rank, -1);
    CHECK_EQ_STR(e.kind, "inject");
    CHECK_EQ_INT(e.step, -1);
    CHECK(isnan(e.value_ms));
    CHECK_EQ_STR(e.detail, "corrupt:step=40");
    CHECK_RC(fb__journal_next_event(c, &e), 0);
    fb__journal_rows_close(c);

    int64_t n = -1;
    CHECK_RC(fb__journal_count(jr, FB__JOURNAL_SAMPLE, &n), 0);
    CHECKF(n == 2, "%lld samples", (long long)n);
    fb__journal_sample_row s;
    CHECK_RC(fb__journal_rows(jr, FB__JOURNAL_SAMPLE, &c), 0);
    CHECK_RC(fb__journal_next_sample(c, &s), 1);
    CHECK_EQ_INT(s.rank, 0);
    CHECK_EQ_DBL(s.time, 103);
    CHECK_EQ_INT(s.step, 10);
    CHECK_EQ_DBL(s.step_time_ms, 50);
    CHECK_RC(fb__journal_next_sample(c, &s), 1);
    CHECK_EQ_INT(s.rank, 1);
    CHECK_EQ_INT(s.step, 11);
    CHECK_RC(fb__journal_next_sample(c, &s), 0);
    fb__journal_rows_close(c);
}

static void test_roundtrip(void)
{
    const char *path = in_dir("done.sqlite");
    write_journal(path, 0);
    fb__journal_ro *jr = NULL;
    char err[1024] = "";
    CHECK_RC(fb__journal_open_ro(path, &jr, err, sizeof err), 0);
    if (!jr) {
        fprintf(stderr, "open_ro: %s\n", err);
        return;
    }
    CHECK_EQ_STR(fb__journal_ro_version(jr), FB__JOURNAL_SCHEMA_VERSION);
    check_rows(jr, 1);
    fb__journal_close_ro(jr);
}

/* While the supervisor writes: its committed rows, still in the WAL, are
 * read (read-only, not immutable). */
static void test_live(void)
{
    const char *path = in_dir("live.sqlite");
    fb__journal *j = write_journal(path, 1);
    struct stat st;
    CHECK(stat(in_dir("live.sqlite-wal"), &st) == 0 && st.st_size > 0);
    fb__journal_ro *jr = NULL;
    char err[1024] = "";
    CHECK_RC(fb__journal_open_ro(path, &jr, err, sizeof err), 0);
    if (jr) {
        check_rows(jr, 0);
        fb__journal_close_ro(jr);
    } else {
        fprintf(stderr, "open_ro (live): %s\n", err);
    }
    fb__journal_close(j);
}

/* A newer minor version adds a column and a table: read, its extras
 * ignored. */
static void test_newer_minor(void)
{
    const char *path = in_dir("minor.sqlite");
    write_journal(path, 0);
    sql(path, "UPDATE meta SET value='1.7' WHERE key='schema_version';"
              "ALTER TABLE incident ADD COLUMN blast_radius TEXT;"
              "ALTER TABLE run ADD COLUMN cluster TEXT;"
              "CREATE TABLE future(x);");
    fb__journal_ro *jr = NULL;
    char err[1024] = "";
    CHECK_RC(fb__journal_open_ro(path, &jr, err, sizeof err), 0);
    if (!jr) {
        fprintf(stderr, "open_ro (1.7): %s\n", err);
        return;
    }
    CHECK_EQ_STR(fb__journal_ro_version(jr), "1.7");
    check_rows(jr, 1);
    fb__journal_close_ro(jr);
}

/* Schema 1.1: fb__journal_place gives each rank's node and host to its
 * incidents (unless named), events and samples, in that attempt only. */
static void test_placement(void)
{
    const char *path = in_dir("place.sqlite");
    fb__journal *j = NULL;
    char err[1024] = "";
    CHECK_RC(fb__journal_open(&j, path, err, sizeof err), 0);
    if (!j)
        return;
    fb__journal_run r = {.name = "p", .job_id = "p-1", .run_dir = dir,
                         .command_json = "[]", .launcher = "slurm",
                         .hostname = "login", .nproc = 4, .nnodes = 2,
                         .started_at = 1};
    CHECK_RC(fb__journal_begin_run(j, &r), 0);
    int64_t a0, a1;
    CHECK_RC(fb__journal_begin_attempt(j, 0, 2, &a0), 0);
    static const char *const node[] = {"node1", "node1", "node2", "node2"};
    static const char *const host[] = {"h1", "h1", "h2", "h2"};
    for (int k = 0; k < 4; k++)
        CHECK_RC(fb__journal_place(j, a0, k, node[k], host[k]), 0);
    CHECK_RC(fb__journal_place(j, a0, -1, "x", NULL), -EINVAL);
    CHECK_RC(fb__journal_place(j, a0, 0, NULL, NULL), -EINVAL);
    fb__journal_incident in = {.attempt_id = a0, .kind = "crash", .rank = 3,
                               .step = -1, .lost_s = -1, .detail = "d"};
    CHECK_RC(fb__journal_add_incident(j, &in, NULL), 0);
    in.rank = -1;
    in.node = "node9";
    CHECK_RC(fb__journal_add_incident(j, &in, NULL), 0);
    fb__journal_event ev = {.attempt_id = a0, .time = 3, .rank = 2,
                            .kind = "ckpt_committed", .step = 5, .value_ms = -1};
    CHECK_RC(fb__journal_add_event(j, &ev), 0);
    CHECK_RC(fb__journal_sample(j, a0, 1, 4, 6, -1), 0);
    /* A new attempt: rank 1 moves to node3; rank 0 is not placed. */
    CHECK_RC(fb__journal_begin_attempt(j, 1, 5, &a1), 0);
    CHECK_RC(fb__journal_place(j, a1, 1, "node3", NULL), 0);
    CHECK_RC(fb__journal_sample(j, a1, 1, 6, 7, -1), 0);
    CHECK_RC(fb__journal_sample(j, a1, 0, 6, 7, -1), 0);
    CHECK_RC(fb__journal_sample(j, a0, 1, 6, 7, -1), 0); /* a0 no longer placed */
    fb__journal_close(j);

    fb__journal_ro *jr = NULL;
    CHECK_RC(fb__journal_open_ro(path, &jr, err, sizeof err), 0);
    if (!jr) {
        fprintf(stderr, "open_ro (placement): %s\n", err);
        return;
    }
    CHECK_EQ_STR(fb__journal_ro_version(jr), FB__JOURNAL_SCHEMA_VERSION);
    fb__journal_cursor *c;
    fb__journal_placement_row p;
    int64_t n = -1;
    CHECK_RC(fb__journal_count(jr, FB__JOURNAL_PLACEMENT, &n), 0);
    CHECKF(n == 5, "%lld placement rows", (long long)n);
    CHECK_RC(fb__journal_rows(jr, FB__JOURNAL_PLACEMENT, &c), 0);
    for (int k = 0; k < 4; k++) {
        CHECK_RC(fb__journal_next_placement(c, &p), 1);
        CHECK_EQ_INT(p.attempt_id, a0);
        CHECK_EQ_INT(p.rank, k);
        CHECK_EQ_STR(p.node, node[k]);
        CHECK_EQ_STR(p.host, host[k]);
    }
    CHECK_RC(fb__journal_next_placement(c, &p), 1);
    CHECK_EQ_INT(p.attempt_id, a1);
    CHECK_EQ_STR(p.node, "node3");
    CHECK_EQ_STR(p.host, NULL);
    CHECK_RC(fb__journal_next_placement(c, &p), 0);
    fb__journal_rows_close(c);

    fb__journal_incident_row ir;
    CHECK_RC(fb__journal_rows(jr, FB__JOURNAL_INCIDENT, &c), 0);
    CHECK_RC(fb__journal_next_incident(c, &ir), 1);
    CHECK_EQ_STR(ir.node, "node2");
    CHECK_EQ_STR(ir.host, "h2");
    CHECK_RC(fb__journal_next_incident(c, &ir), 1);
    CHECK_EQ_STR(ir.node, "node9");
    CHECK_EQ_STR(ir.host, NULL);
    fb__journal_rows_close(c);

    fb__journal_event_row e;
    CHECK_RC(fb__journal_rows(jr, FB__JOURNAL_EVENT, &c), 0);
    CHECK_RC(fb__journal_next_event(c, &e), 1);
    CHECK_EQ_STR(e.node, "node2");
    CHECK_EQ_STR(e.host, "h2");
    fb__journal_rows_close(c);

    static const char *const want[][2] = {{"node1", "h1"}, {"node3", NULL},
                                          {NULL, NULL}, {NULL, NULL}};
    fb__journal_sample_row sr;
    CHECK_RC(fb__journal_rows(jr, FB__JOURNAL_SAMPLE, &c), 0);
    for (int k = 0; k < 4; k++) {
        CHECK_RC(fb__journal_next_sample(c, &sr), 1);
        CHECK_EQ_STR(sr.node, want[k][0]);
        CHECK_EQ_STR(sr.host, want[k][1]);
    }
    fb__journal_rows_close(c);
    fb__journal_close_ro(jr);
}

/* A 1.0 journal (no placement, no node or host columns): it reads, with
 * those as NULL and no placement rows; the writer opening it upgrades it
 * to 1.1 and writes the new columns. */
static void test_schema_1_0(void)
{
    const char *path = in_dir("v10.sqlite");
    write_journal(path, 0);
    sql(path, "UPDATE meta SET value='1.0' WHERE key='schema_version';"
              "DROP TABLE placement;"
              "ALTER TABLE incident DROP COLUMN host;"
              "ALTER TABLE event DROP COLUMN node; ALTER TABLE event DROP COLUMN host;"
              "ALTER TABLE step_sample DROP COLUMN node;"
              "ALTER TABLE step_sample DROP COLUMN host;");
    fb__journal_ro *jr = NULL;
    char err[1024] = "";
    CHECK_RC(fb__journal_open_ro(path, &jr, err, sizeof err), 0);
    if (!jr) {
        fprintf(stderr, "open_ro (1.0): %s\n", err);
        return;
    }
    CHECK_EQ_STR(fb__journal_ro_version(jr), "1.0");
    check_rows(jr, 1);
    int64_t n = -1;
    CHECK_RC(fb__journal_count(jr, FB__JOURNAL_PLACEMENT, &n), 0);
    CHECK_EQ_INT(n, 0);
    fb__journal_cursor *c;
    fb__journal_placement_row p;
    CHECK_RC(fb__journal_rows(jr, FB__JOURNAL_PLACEMENT, &c), 0);
    CHECK_RC(fb__journal_next_placement(c, &p), 0);
    fb__journal_rows_close(c);
    fb__journal_incident_row ir;
    CHECK_RC(fb__journal_rows(jr, FB__JOURNAL_INCIDENT, &c), 0);
    CHECK_RC(fb__journal_next_incident(c, &ir), 1);
    CHECK_EQ_STR(ir.host, NULL);
    fb__journal_rows_close(c);
    fb__journal_close_ro(jr);

    fb__journal *j = NULL;
    CHECK_RC(fb__journal_open(&j, path, err, sizeof err), 0);
    if (!j) {
        fprintf(stderr, "open (1.0): %s\n", err);
        return;
    }
    int64_t a2;
    CHECK_RC(fb__journal_begin_attempt(j, 2, 300, &a2), 0);
    CHECK_RC(fb__journal_place(j, a2, 0, "node4", "h4"), 0);
    CHECK_RC(fb__journal_sample(j, a2, 0, 301, 1, -1), 0);
    CHECK_RC(fb__journal_flush(j), 0);
    fb__journal_status st;
    fb__journal_close_status(j, &st);
    CHECK_EQ_INT(st.dropped_rows, 0);
    CHECK_EQ_INT(st.dropped_samples, 0);
    CHECK_RC(fb__journal_open_ro(path, &jr, err, sizeof err), 0);
    if (!jr)
        return;
    CHECK_EQ_STR(fb__journal_ro_version(jr), FB__JOURNAL_SCHEMA_VERSION);
    CHECK_RC(fb__journal_count(jr, FB__JOURNAL_PLACEMENT, &n), 0);
    CHECK_EQ_INT(n, 1);
    fb__journal_sample_row sr;
    CHECK_RC(fb__journal_rows(jr, FB__JOURNAL_SAMPLE, &c), 0);
    int got = 0;
    while (fb__journal_next_sample(c, &sr) == 1)
        if (sr.attempt_id == a2) {
            CHECK_EQ_STR(sr.node, "node4");
            got++;
        }
    CHECK_EQ_INT(got, 1);
    fb__journal_rows_close(c);
    fb__journal_close_ro(jr);
}

/* Open must fail with want, and its message hold each of the needles. */
static void expect_refused(const char *path, int want, const char *n1,
                           const char *n2)
{
    fb__journal_ro *jr = (fb__journal_ro *)&jr; /* must come back NULL */
    char err[1024] = "";
    CHECK_RC(fb__journal_open_ro(path, &jr, err, sizeof err), want);
    CHECK(jr == NULL);
    CHECKF(strstr(err, n1) != NULL, "'%s' lacks '%s'", err, n1);
    if (n2)
        CHECKF(strstr(err, n2) != NULL, "'%s' lacks '%s'", err, n2);
}

static void test_other_major(void)
{
    const char *path = in_dir("major.sqlite");
    write_journal(path, 0);
    sql(path, "UPDATE meta SET value='2.0' WHERE key='schema_version'");
    expect_refused(path, FB_EVERSION, path,
                   "schema version 2.0 is not supported: this firebreak "
                   "reads 1.x; use a newer firebreak");
    sql(path, "UPDATE meta SET value='0.9' WHERE key='schema_version'");
    expect_refused(path, FB_EVERSION, "schema version 0.9 is not supported",
                   "the firebreak release that wrote it");
    sql(path, "UPDATE meta SET value='one' WHERE key='schema_version'");
    expect_refused(path, FB_EFORMAT, "'one' is not MAJOR.MINOR", NULL);
}

static void test_not_a_journal(void)
{
    const char *path = in_dir("other.sqlite");
    sql(path, "CREATE TABLE t(x)");
    expect_refused(path, FB_EFORMAT, "not a firebreak journal", path);
    path = in_dir("garbage.sqlite");
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        for (int i = 0; i < 512; i++)
            fputs("not a database ", f);
        fclose(f);
    }
    expect_refused(path, FB_EFORMAT, "corrupted or not an SQLite database",
                   path);
    expect_refused(in_dir("absent.sqlite"), -ENOENT, "absent.sqlite", NULL);
}

/* A FIFO where the database or its -wal is: refused at once, not opened
 * (alarm: a blocked open kills the test instead of hanging it). */
static void test_fifo(void)
{
    const char *path = in_dir("fifo.sqlite");
    CHECK_EQ_INT(mkfifo(path, 0600), 0);
    alarm(20);
    expect_refused(path, FB_ENOTREG, path, ": not a regular file");
    path = in_dir("walfifo.sqlite");
    write_journal(path, 0);
    const char *wal = in_dir("walfifo.sqlite-wal");
    unlink(wal);
    CHECK_EQ_INT(mkfifo(wal, 0600), 0);
    expect_refused(path, FB_ENOTREG, wal, ": not a regular file");
    alarm(0);
}

int main(void)
{
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    check_tmpdir(dir);
    test_roundtrip();
    test_live();
    test_newer_minor();
    test_placement();
    test_schema_1_0();
    test_other_major();
    test_not_a_journal();
    test_fifo();
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    if (failures)
        fprintf(stderr, "%d check(s) failed\n", failures);
    return failures != 0;
}
