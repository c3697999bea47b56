/*
 * gen_journal.c -- write run directories for the report tests through the
 * supervisor's own journal API (src/journal/journal.h), so the report
 * reads exactly what `firebreak run` writes.
 *
 *   fb-report-gen SCENARIO RUN_DIR
 *
 * basic      five attempts, five incidents with known causes and exactly
 *            known accounting (see test_report.c and docs/report.md)
 * agent      basic plus an agent.sqlite with temperature and power
 * running    basic without the run's end
 * newminor   basic with schema_version 1.7, an extra column and table
 * oldschema  basic with schema_version 0.9
 * empty      a journal with no run
 * nostart    a run that ended before any attempt
 * shortfirst a short first attempt with no step journaled, its lost
 *            work known only from the incident's lost_s
 * afterfail  a rank crashes at step 60 (8 s) while the other goes on
 *            saving steps 70-90 with 1.5 s stalls until the crash is
 *            detected (11 s), and a sample at 9.5 s finds it at step 50:
 *            neither the saves nor the sample are in the lost stretch
 * bench      10,000 incidents in 1,000 attempts, 1,000,000 step samples
 * fleet0..3  four runs of one fleet for `report --fleet` (see fleet_run):
 *            gpu-07 fails on hardware in runs 0 and 1 and its health check
 *            fails twice, and it is drained (--drain) in both; gpu-03
 *            has crashes of unknown cause in runs 1 and 2 and a drain
 *            that failed; gpu-04 software bugs in runs 2 and 3; gpu-05
 *            injected kills in runs 0 and 3; gpu-02 only hosts runs
 */
#include <errno.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "journal/journal.h"

#define T0 1700000000.0

static fb__journal *J;

static void die(const char *what)
{
    fprintf(stderr, "fb-report-gen: %s: %s\n", what, fb__journal_errmsg(J));
    exit(2);
}

#define CHECK(x) do { if ((x) != 0) die(#x); } while (0)

static void begin_run(const char *dir, int nproc)
{
    fb__journal_run r = {
        .name = "gen", .job_id = "gen-1", .run_dir = dir,
        .command_json = "[\"./fb-toy-train\"]", .launcher = "local",
        .hostname = "host-a", .options_json = "{}", .nproc = nproc,
        .nnodes = 1, .max_restarts = 10, .hang_timeout_s = 10,
        .started_at = T0,
    };
    CHECK(fb__journal_begin_run(J, &r));
}

/* One attempt: [start, end], ready at `ready`, restored from `restored`
 * (-1 fresh) in restore_s, steps from step0 at 10 steps/s, sampled every
 * second for ranks 0..nproc-1 from `ready` to `until`. */
static int64_t attempt(int number, double start, double ready, double end,
                       int64_t restored, double restore_s, int64_t step0,
                       double until, int nproc, const char *outcome)
{
    int64_t id;
    CHECK(fb__journal_begin_attempt(J, number, T0 + start, &id));
    CHECK(fb__journal_attempt_real(J, id, "launched_at", T0 + start + 0.1));
    CHECK(fb__journal_attempt_real(J, id, "ready_at", T0 + ready));
    if (restored >= 0) {
        CHECK(fb__journal_attempt_int(J, id, "restored_step", restored));
        CHECK(fb__journal_attempt_real(J, id, "restore_s", restore_s));
    }
    CHECK(fb__journal_attempt_int(J, id, "start_step", step0));
    CHECK(fb__journal_attempt_int(J, id, "end_step",
                                  step0 + (int64_t)llround((until - ready) * 10)));
    for (double t = ready; t <= until + 1e-9; t += 1.0)
        for (int r = 0; r < nproc; r++)
            CHECK(fb__journal_sample(J, id, r, T0 + t,
                                     step0 + (int64_t)llround((t - ready) * 10),
                                     100.0 + 5 * r + (t > 45 && t < 50 ? 20 : 0)));
    CHECK(fb__journal_attempt_real(J, id, "ended_at", T0 + end));
    CHECK(fb__journal_attempt_text(J, id, "outcome", outcome));
    return id;
}

static void incident(int64_t aid, const char *kind, double occurred,
                     double detected, int rank, const char *node, int sig,
                     int has_exit, int code, int64_t step, double lost_s,
                     const char *injected, const char *detail,
                     const char *fr, const char *health)
{
    fb__journal_incident in = {
        .attempt_id = aid, .kind = kind, .occurred_at = T0 + occurred,
        .detected_at = T0 + detected, .detect_ms = (detected - occurred) * 1e3,
        .rank = rank, .node = node, .signal = sig, .has_exit_code = has_exit,
        .exit_code = code, .phase = "train", .step = step, .lost_s = lost_s,
        .injected = injected, .detail = detail, .fr_verdict = fr,
        .health = health,
    };
    CHECK(fb__journal_add_incident(J, &in, NULL));
}

static void basic(const char *dir, int end)
{
    begin_run(dir, 2);
    int64_t a;
    a = attempt(0, 1, 3, 12, -1, 0, 0, 11, 2, "failed");
    CHECK(fb__journal_checkpoint(J, a, 50, T0 + 8, 2, 4096, 200, 30, "complete"));
    incident(a, "crash", 11, 11.5, 1, "host-a", 9, 0, 0, 80, 3.0,
             "kill:rank=1,step=80", "rank 1 killed by SIGKILL", NULL, NULL);
    a = attempt(1, 14, 17, 24, 50, 1.5, 50, 23, 2, "failed");
    CHECK(fb__journal_checkpoint(J, a, 100, T0 + 22, 2, 4096, 300, 30, "complete"));
    incident(a, "crash", 23, 23.01, 0, "host-b", 11, 0, 0, 110, -1, NULL,
             "rank 0 killed by SIGSEGV", NULL, NULL);
    a = attempt(2, 25, 26, 41, 100, 0.5, 100, 30, 2, "failed");
    incident(a, "hang", 30, 40, 1, "host-a", 9, 0, 0, 140, 4.0, NULL,
             "rank 1 made no progress for 10 s",
             "{\"verdict\":\"hang\",\"findings\":[{\"kind\":\"missing_rank\","
             "\"group\":\"world\",\"seq\":42,\"ranks\":[1],\"detail\":\"rank 1 "
             "never entered allreduce #42\"}]}", NULL);
    a = attempt(3, 42, 43, 51, 100, 0.5, 100, 50, 2, "failed");
    incident(a, "error_exit", 50, 50.1, 0, "host-b", 0, 1, 1, 170, -1, NULL,
             "rank 0 exited with code 1", NULL,
             "{\"verdict\":\"fail\",\"checks\":[{\"name\":\"gpu_ecc\",\"status\":"
             "\"fail\",\"detail\":\"GPU 0: uncorrectable ECC errors, Xid 48\","
             "\"category\":\"gpu\",\"action\":\"drain\"},{\"name\":\"disk\","
             "\"status\":\"ok\",\"detail\":\"\",\"category\":\"host\","
             "\"action\":\"\"}]}");
    fb__journal_event ev = {.attempt_id = a, .time = T0 + 49, .rank = 0,
                            .kind = "inject", .step = 165, .code = 6,
                            .value_ms = -1, .detail = "corrupt:rank=0,step=165"};
    CHECK(fb__journal_add_event(J, &ev));
    /* the supervisor's count of reports overwritten unread (watch.c), for
     * two ranks of this attempt */
    fb__journal_event lost = {.attempt_id = a, .time = T0 + 51, .rank = 1,
                              .kind = "reports_lost", .step = -1, .code = 7,
                              .value_ms = -1, .detail = "7 reports of rank 1 overwritten"};
    CHECK(fb__journal_add_event(J, &lost));
    lost.rank = 0;
    lost.code = 5;
    CHECK(fb__journal_add_event(J, &lost));
    a = attempt(4, 52, 53, 60, 100, 0.5, 100, 60, 2, "completed");
    CHECK(fb__journal_checkpoint(J, a, 200, T0 + 57, 2, 4096, 100, 30, "complete"));
    incident(a, "save_failed", 55, 55.2, -1, NULL, 0, 0, 0, 120, -1, NULL,
             "checkpoint 120 not saved", NULL, NULL);
    incident(a, "restore_fallback", 52.5, 52.5, -1, NULL, 0, 0, 0, 160, -1,
             NULL, "checkpoint 160 set aside: rank-00000.safetensors: hash "
             "0c3b, recorded 8c2c (data corrupted)", NULL, NULL);
    CHECK(fb__journal_flush(J));
    if (end)
        CHECK(fb__journal_end_run(J, T0 + 61, "completed", 0, "all steps done"));
}

/* A crash at 8 s (step 60; restored next from step 50, saved at 7 s)
 * detected at 11 s: the other rank saved steps 70, 80 and 90 meanwhile,
 * each with a 1.5 s stall, and a sample has it at step 50 at 9.5 s.
 * Attempt 0: training 2-8 s, of which 0.1 s checkpoint and 1.0 s lost
 * (steps 50-60), not 4.6 s and 0 s. */
static void afterfail(const char *dir)
{
    begin_run(dir, 2);
    int64_t a = attempt(0, 1, 2, 12, -1, 0, 0, 8, 2, "failed");
    CHECK(fb__journal_checkpoint(J, a, 50, T0 + 7.02, 2, 4096, 100, 10, "complete"));
    CHECK(fb__journal_checkpoint(J, a, 70, T0 + 9.6, 1, 2048, 1500, 10, "partial"));
    CHECK(fb__journal_checkpoint(J, a, 80, T0 + 10.2, 1, 2048, 1500, 10, "partial"));
    CHECK(fb__journal_checkpoint(J, a, 90, T0 + 10.9, 1, 2048, 1500, 10, "partial"));
    /* rank 1 behind: at the restored step only during the detection */
    CHECK(fb__journal_sample(J, a, 1, T0 + 9.5, 50, 100.0));
    incident(a, "crash", 8, 11, 0, "host-a", 11, 0, 0, 60, -1,
             "segv:rank=0,step=60", "rank 0 killed by SIGSEGV", NULL, NULL);
    attempt(1, 12.5, 13, 20, 50, 0.2, 50, 20, 2, "completed");
    CHECK(fb__journal_flush(J));
    CHECK(fb__journal_end_run(J, T0 + 21, "completed", 0, "all steps done"));
}

/* A short first attempt: no first step, no sample (killed at step 5
 * before any was journaled), a checkpoint of step 3 complete; the next
 * attempt restores step 3.  The live lost_s (0.2 s) is all that says
 * what was lost. */
static void shortfirst(const char *dir)
{
    begin_run(dir, 2);
    int64_t a;
    CHECK(fb__journal_begin_attempt(J, 0, T0 + 1, &a));
    CHECK(fb__journal_attempt_real(J, a, "launched_at", T0 + 1.05));
    CHECK(fb__journal_attempt_real(J, a, "ready_at", T0 + 1.2));
    CHECK(fb__journal_checkpoint(J, a, 3, T0 + 1.5, 2, 4096, 10, 5, "complete"));
    incident(a, "crash", 1.8, 1.81, 1, "host-a", 9, 0, 0, 5, 0.2,
             "kill:rank=1,step=5", "rank 1 killed by SIGKILL", NULL, NULL);
    CHECK(fb__journal_attempt_real(J, a, "ended_at", T0 + 1.9));
    CHECK(fb__journal_attempt_text(J, a, "outcome", "failed"));
    attempt(1, 2, 2.5, 10, 3, 0.1, 4, 9, 2, "completed");
    CHECK(fb__journal_flush(J));
    CHECK(fb__journal_end_run(J, T0 + 10, "completed", 0, "all steps done"));
}

/* Text with terminal escape sequences everywhere a journal carries text
 * that the report prints: an incident's detail, node, last lines, an
 * event's detail, the run's reason. */
#define ESC_CLEAR "\033[2J"
static void escapes(const char *dir)
{
    begin_run(dir, 2);
    int64_t a = attempt(0, 1, 3, 12, -1, 0, 0, 11, 2, "failed");
    fb__journal_incident in = {
        .attempt_id = a, .kind = "crash", .occurred_at = T0 + 11,
        .detected_at = T0 + 11.5, .detect_ms = 500, .rank = 1,
        .node = "host" ESC_CLEAR "-a", .signal = 9, .phase = "train",
        .step = 80, .lost_s = 3,
        .detail = "rank 1 said " ESC_CLEAR "\033]0;owned\007 and died",
        .last_lines = "segfault " ESC_CLEAR "\nline two\033[31m red",
    };
    CHECK(fb__journal_add_incident(J, &in, NULL));
    a = attempt(1, 14, 17, 24, -1, 0, 0, 23, 2, "failed");
    fb__journal_incident in2 = {
        .attempt_id = a, .kind = "hang", .occurred_at = T0 + 20,
        .detected_at = T0 + 23, .detect_ms = 3000, .rank = 0,
        .node = "host" ESC_CLEAR "-a", .phase = "train", .step = 60,
        .lost_s = 1, .detail = "no progress",
        .category = "GPU" ESC_CLEAR, .component = "HBM\033[5m",
        .evidence = "the supervisor saw \033]0;owned\007" ESC_CLEAR,
    };
    CHECK(fb__journal_add_incident(J, &in2, NULL));
    a = attempt(2, 24, 25, 30, -1, 0, 0, 29, 2, "completed");
    /* a second node, so that host-a's two failures make it a suspect
     * (a run's only node is none) */
    incident(a, "save_failed", 26, 26.1, 1, "host-b", 0, 0, 0, 90, -1, NULL,
             "checkpoint 90 not saved", NULL, NULL);
    CHECK(fb__journal_flush(J));
    CHECK(fb__journal_end_run(J, T0 + 31, "completed", 0,
                              "done " ESC_CLEAR));
}

static void agent_db(const char *dir)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/agent.sqlite", dir);
    sqlite3 *db;
    if (sqlite3_open(path, &db) != SQLITE_OK)
        exit(2);
    /* the columns of docs/agent.md that the report reads */
    sqlite3_exec(db, "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT);"
                 "INSERT INTO meta VALUES('schema_version','1.0');"
                 "CREATE TABLE gpu_samples(t REAL NOT NULL, gpu INTEGER NOT NULL,"
                 " temp_c REAL, power_w REAL, sm_clock_mhz INTEGER); BEGIN",
                 NULL, NULL, NULL);
    for (double t = 0; t <= 61; t += 0.5) {
        char sql[256];
        /* hotter while the step time is longer (t in 45..50) */
        double temp = 60 + (t > 45 && t < 50 ? 15 : 0) + 0.1 * t;
        double power = 500 - (t > 45 && t < 50 ? 80 : 0) + 0.5 * t;
        for (int g = 0; g < 2; g++) {
            snprintf(sql, sizeof sql, "INSERT INTO gpu_samples VALUES(%.3f, %d,"
                     " %.2f, %.2f, 1980)", T0 + t, g, temp + g, power + 10 * g);
            sqlite3_exec(db, sql, NULL, NULL, NULL);
        }
    }
    /* the agent's events (docs/agent.md): a swing, then a thermal slowdown
     * while it is hot; text that must be escaped and cleaned */
    sqlite3_exec(db, "CREATE TABLE events(id INTEGER PRIMARY KEY, t REAL NOT NULL,"
                 " kind TEXT NOT NULL, subject TEXT, severity TEXT NOT NULL,"
                 " detail TEXT NOT NULL, evidence TEXT NOT NULL)", NULL, NULL, NULL);
    static const struct { double t; const char *kind, *subject, *sev, *detail; } ev[] = {
        {45.2, "power_swing", "node", "warn",
         "node power 1020 W -> 700 W in 1 s (<31%> of it)"},
        {46.0, "thermal_slowdown", "gpu0", "warn",
         "GPU 0: thermal slowdown (clock event reasons 0x40) at 75 C " ESC_CLEAR},
        {50.5, "thermal_slowdown_end", "gpu0", "info", "GPU 0: thermal slowdown ended"},
    };
    for (size_t i = 0; i < sizeof ev / sizeof ev[0]; i++) {
        char *q = sqlite3_mprintf("INSERT INTO events(t,kind,subject,severity,"
                                  "detail,evidence) VALUES(%.3f,%Q,%Q,%Q,%Q,'{}')",
                                  T0 + ev[i].t, ev[i].kind, ev[i].subject,
                                  ev[i].sev, ev[i].detail);
        sqlite3_exec(db, q, NULL, NULL, NULL);
        sqlite3_free(q);
    }
    sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
    sqlite3_close(db);
}

static void sql_on(const char *dir, const char *sql)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/journal.sqlite", dir);
    sqlite3 *db;
    char *msg = NULL;
    if (sqlite3_open(path, &db) != SQLITE_OK ||
        sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        fprintf(stderr, "fb-report-gen: %s: %s\n", sql, msg ? msg : "?");
        exit(2);
    }
    sqlite3_close(db);
}

static void bench(const char *dir)
{
    const int attempts = 1000, per = 10, nproc = 8, samples = 125;
    begin_run(dir, nproc);
    double t = 0;
    for (int n = 0; n < attempts; n++) {
        int64_t id;
        CHECK(fb__journal_begin_attempt(J, n, T0 + t, &id));
        CHECK(fb__journal_attempt_real(J, id, "ready_at", T0 + t + 1));
        if (n)
            CHECK(fb__journal_attempt_int(J, id, "restored_step", n * 100));
        for (int k = 0; k < samples; k++)
            for (int r = 0; r < nproc; r++)
                CHECK(fb__journal_sample(J, id, r, T0 + t + 1 + k * 0.1,
                                         (int64_t)n * 100 + k, 100 + r));
        CHECK(fb__journal_checkpoint(J, id, n * 100 + 100, T0 + t + 10, nproc,
                                     1 << 20, 50, 200, "complete"));
        for (int i = 0; i < per; i++)
            incident(id, i == 0 ? "crash" : "save_failed", t + 13 + i * 0.01,
                     t + 13.5 + i * 0.01, (n * 7 + i) % nproc, "host-a",
                     i == 0 ? (n % 2 ? 9 : 11) : 0, 0, 0, n * 100 + 120, 1.0,
                     n % 3 ? NULL : "kill:rank=1,step=120", "generated", NULL,
                     NULL);
        CHECK(fb__journal_attempt_real(J, id, "ended_at", T0 + t + 14));
        CHECK(fb__journal_attempt_text(J, id, "outcome", "failed"));
        if (n % 50 == 49)
            CHECK(fb__journal_flush(J));
        t += 15;
    }
    CHECK(fb__journal_flush(J));
    CHECK(fb__journal_end_run(J, T0 + t, "failed", 1, "generated"));
}

/* A crash on `node` with a classification stored as the supervisor
 * stores it, and a health verdict (NULL: none). */
static void fleet_incident(int64_t a, const char *kind, double t, const char *node,
                           const char *cat, const char *comp, const char *ev,
                           const char *injected, const char *health)
{
    fb__journal_incident in = {
        .attempt_id = a, .kind = kind, .occurred_at = T0 + t,
        .detected_at = T0 + t + 0.5, .detect_ms = 500, .rank = 0, .node = node,
        .signal = 9, .phase = "train", .step = 10, .lost_s = 1,
        .injected = injected, .detail = "generated", .health = health,
        .category = cat, .component = comp, .evidence = ev,
    };
    CHECK(fb__journal_add_incident(J, &in, NULL));
}

/* A drain event as slurm.c writes it (scontrol's exit in code). */
static void fleet_drain(int64_t a, double t, const char *node, int code)
{
    fb__journal_event ev = {.attempt_id = a, .time = T0 + t, .rank = -1,
                            .kind = "drain", .step = -1, .code = code,
                            .value_ms = -1, .node = node,
                            .detail = "firebreak: crash of rank 0 at step 10; "
                                      "health check failed: kernel.xid79"};
    CHECK(fb__journal_add_event(J, &ev));
}

#define HEALTH_FAIL "{\"version\":\"1.0\",\"verdict\":\"fail\",\"checks\":[" \
    "{\"name\":\"kernel.xid79.0000:3b:00\",\"status\":\"fail\",\"component\":" \
    "\"Faulty GPU\"},{\"name\":\"gpu.count\",\"status\":\"ok\"}]}"
#define HEALTH_OK "{\"version\":\"1.0\",\"verdict\":\"ok\",\"checks\":[]}"

static void fleet_run(const char *dir, int n)
{
    fb__journal_run r = {
        .name = n == 0 ? "f0" : n == 1 ? "f1" : n == 2 ? "f2" : "f3",
        .job_id = "gen-f", .run_dir = dir, .command_json = "[\"x\"]",
        .launcher = "local", .hostname = "gpu-02", .options_json = "{}",
        .nproc = 1, .nnodes = 1, .max_restarts = 3, .hang_timeout_s = 10,
        .started_at = T0,
    };
    CHECK(fb__journal_begin_run(J, &r));
    int64_t a = attempt(0, 0, 1, 10, -1, 0, 0, 9, 1, "failed");
    switch (n) {
    case 0:
        fleet_incident(a, "crash", 9, "gpu-07", "GPU", "Faulty GPU",
                       "[by kernel_log] GPU has fallen off the bus in the kernel "
                       "log around the incident: '[12.0] NVRM: Xid (PCI:0000:3b:00): "
                       "79, pid=1'", NULL, HEALTH_FAIL);
        fleet_drain(a, 10, "gpu-07", 0);
        a = attempt(1, 11, 12, 20, 0, 0, 1, 19, 1, "failed");
        fleet_incident(a, "crash", 19, "gpu-05", NULL, NULL, NULL,
                       "kill:rank=0,step=10", NULL);
        break;
    case 1:
        fleet_incident(a, "crash", 9, "gpu-07", NULL, NULL, NULL, NULL,
                       HEALTH_FAIL); /* classified by the report: health */
        fleet_drain(a, 10, "gpu-07", 0);
        a = attempt(1, 11, 12, 20, 0, 0, 1, 19, 1, "failed");
        fleet_incident(a, "crash", 19, "gpu-03", "Unknown", "Unknown",
                       "[by signal] SIGKILL from outside the process, as from an "
                       "unknown sender", NULL, HEALTH_OK);
        break;
    case 2:
        fleet_incident(a, "crash", 9, "gpu-03", "Unknown", "Unknown",
                       "[by signal] SIGKILL from outside the process, as from an "
                       "unknown sender", NULL, NULL);
        fleet_drain(a, 10, "gpu-03", 1); /* scontrol failed: not drained */
        a = attempt(1, 11, 12, 20, 0, 0, 1, 19, 1, "failed");
        fleet_incident(a, "error_exit", 19, "gpu-04", "Dependency",
                       "Software bug", "[by log] a Python exception ended the "
                       "program: 'ValueError: bad batch'", NULL, NULL);
        break;
    default:
        fleet_incident(a, "error_exit", 9, "gpu-04", "Dependency",
                       "Software bug", "[by log] a Python exception ended the "
                       "program: 'KeyError: step'", NULL, NULL);
        a = attempt(1, 11, 12, 20, 0, 0, 1, 19, 1, "failed");
        fleet_incident(a, "crash", 19, "gpu-05", NULL, NULL, NULL,
                       "kill:rank=0,step=10", NULL);
    }
    CHECK(fb__journal_attempt_real(J, a, "ended_at", T0 + 30));
    CHECK(fb__journal_flush(J));
    CHECK(fb__journal_end_run(J, T0 + 30, "failed", 1, "generated"));
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: fb-report-gen SCENARIO RUN_DIR\n");
        return 2;
    }
    const char *sc = argv[1], *dir = argv[2];
    char path[4096], err[512];
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/journal.sqlite", dir);
    remove(path);
    if (fb__journal_open(&J, path, err, sizeof err)) {
        fprintf(stderr, "fb-report-gen: %s\n", err);
        return 2;
    }
    if (!strcmp(sc, "basic") || !strcmp(sc, "newminor") ||
        !strcmp(sc, "oldschema") || !strcmp(sc, "agent")) {
        basic(dir, 1);
    } else if (!strcmp(sc, "running")) {
        basic(dir, 0);
    } else if (!strcmp(sc, "nostart")) {
        begin_run(dir, 2);
        CHECK(fb__journal_end_run(J, T0 + 1, "failed", 2,
                                  "launcher 'mpirun' not found"));
    } else if (!strcmp(sc, "afterfail")) {
        afterfail(dir);
    } else if (!strcmp(sc, "shortfirst")) {
        shortfirst(dir);
    } else if (!strcmp(sc, "bench")) {
        bench(dir);
    } else if (!strncmp(sc, "fleet", 5) && sc[5] >= '0' && sc[5] <= '3' && !sc[6]) {
        fleet_run(dir, sc[5] - '0');
    } else if (!strcmp(sc, "escapes")) {
        escapes(dir);
    } else if (!strcmp(sc, "nostart_escapes")) {
        begin_run(dir, 2);
        CHECK(fb__journal_end_run(J, T0 + 1, "failed", 2,
                                  "launcher " ESC_CLEAR "\033]0;x\007 gone"));
    } else if (strcmp(sc, "empty")) {
        fprintf(stderr, "fb-report-gen: unknown scenario '%s'\n", sc);
        return 2;
    }
    fb__journal_close(J);
    if (!strcmp(sc, "agent"))
        agent_db(dir);
    if (!strcmp(sc, "newminor"))
        sql_on(dir, "UPDATE meta SET value='1.7' WHERE key='schema_version';"
               "ALTER TABLE incident ADD COLUMN future_col TEXT;"
               "CREATE TABLE future_table(x INTEGER);");
    if (!strcmp(sc, "oldschema"))
        sql_on(dir, "UPDATE meta SET value='0.9' WHERE key='schema_version'");
    return 0;
}
