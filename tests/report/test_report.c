/*
 * test_report.c -- unit tests of the report over journals written by
 * fb-report-gen (the supervisor's journal API):
 *
 *   test_report classify                 root-cause rules on sample inputs
 *   test_report basic DIR                exact accounting and categories
 *   test_report running DIR              a run that has not ended
 *   test_report afterfail DIR            saves after the failure, not in it
 *   test_report shortfirst DIR           a short attempt's lost work from its incident
 *   test_report error DIR CODE TEXT      load fails with CODE, err has TEXT
 *
 * The expected numbers of the basic scenario are worked out by hand in
 * gen_journal.c's comments and docs/report.md.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "firebreak/firebreak.h"
#include "report/report.h"
#include "../check.h"

/* A duration in microseconds against the expected seconds. */
#define EXPECT_US(got, want_s) do { long long g_ = (long long)(got), \
    w_ = llround((want_s) * 1e6); if (g_ != w_) { fprintf(stderr, \
    "%s:%d: %s = %lld us, expected %lld us\n", __FILE__, __LINE__, #got, \
    g_, w_); failures++; } } while (0)

static void cls(const fb__report_evidence *ev, const char *category,
                const char *component, const char *by)
{
    fb__report_class c;
    fb__report_classify(ev, &c);
    if (strcmp(c.category, category) || strcmp(c.component, component) ||
        strcmp(c.decided_by, by)) {
        fprintf(stderr, "classify(kind=%s): got %s / %s by %s (%s), expected "
                "%s / %s by %s\n", ev->kind, c.category, c.component,
                c.decided_by, c.evidence, category, component, by);
        failures++;
    }
}

static void test_classify(void)
{
    CHECK_EQ_INT(fb__report_find_xid("NVRM: Xid (PCI:0000:3b:00): 79, pid=1"), 79);
    CHECK_EQ_INT(fb__report_find_xid("XID 48 seen"), 48);
    CHECK_EQ_INT(fb__report_find_xid("xid=119"), 119);
    CHECK_EQ_INT(fb__report_find_xid("no such thing"), -1);
    CHECK_EQ_INT(fb__report_find_xid("Xid (unterminated"), -1);
    CHECK_EQ_INT(fb__report_find_xid(NULL), -1);

    fb__report_evidence ev = {.kind = "crash", .signal = 9,
                              .injected = "kill:rank=1,step=30"};
    /* what it imitates: a SIGKILL by an unknown sender, not maintenance */
    cls(&ev, "Unknown", "Unknown", "injected");
    ev = (fb__report_evidence){.kind = "crash", .signal = 9};
    cls(&ev, "Unknown", "Unknown", "signal");
    ev = (fb__report_evidence){.kind = "crash", .signal = 6};
    cls(&ev, "Dependency", "Software bug", "signal");
    ev = (fb__report_evidence){.kind = "crash", .has_exit_code = 1, .exit_code = 139};
    cls(&ev, "Dependency", "Software bug", "signal");
    ev = (fb__report_evidence){.kind = "error_exit", .has_exit_code = 1, .exit_code = 3};
    cls(&ev, "Dependency", "Software bug", "exit_code");
    ev = (fb__report_evidence){.kind = "launch_failure", .detail = "no mpirun"};
    cls(&ev, "Dependency", "Dependency", "kind");
    ev = (fb__report_evidence){.kind = "hang"};
    cls(&ev, "Unknown", "Collective watchdog timeout", "kind");
    ev = (fb__report_evidence){.kind = "hang", .phase = "train"};
    cls(&ev, "Unknown", "Collective watchdog timeout", "kind");
    /* after fb_finalize: the program's teardown (--exit-timeout) */
    ev = (fb__report_evidence){.kind = "hang", .phase = "done"};
    cls(&ev, "Dependency", "Software bug", "kind");
    ev = (fb__report_evidence){.kind = "hang", .signal = 9,
        .fr_verdict = "{\"verdict\":\"mismatch\",\"findings\":[{\"kind\":"
                      "\"op_mismatch\",\"group\":\"0\",\"seq\":7,\"ranks\":[0,3]}]}"};
    cls(&ev, "Dependency", "Software bug", "flight_recorder");
    ev = (fb__report_evidence){.kind = "hang", .fr_verdict = "{not json"};
    cls(&ev, "Unknown", "Collective watchdog timeout", "kind");
    ev = (fb__report_evidence){.kind = "crash", .signal = 11,
        .health = "{\"verdict\":\"fail\",\"checks\":[{\"name\":\"hbm\",\"status\":"
                  "\"fail\",\"category\":\"gpu\",\"detail\":\"remapped rows "
                  "pending\"}]}"};
    cls(&ev, "GPU", "GPU HBM3 memory", "health");
    ev = (fb__report_evidence){.kind = "crash",
        .health = "{\"verdict\":\"fail\",\"checks\":[{\"name\":\"ib0\",\"status\":"
                  "\"fail\",\"category\":\"network\",\"detail\":\"port down\"}]}"};
    cls(&ev, "Network", "Network switch/cable", "health");
    ev = (fb__report_evidence){.kind = "crash", /* docs/health.md's form */
        .health = "{\"version\":\"1.0\",\"verdict\":\"fail\",\"checks\":[{"
                  "\"name\":\"gpu3.present\",\"status\":\"fail\",\"detail\":"
                  "\"GPU 3: GPU is lost\",\"category\":\"GPU\",\"component\":"
                  "\"Faulty GPU\",\"action\":\"drain\"}]}"};
    cls(&ev, "GPU", "Faulty GPU", "health");
    ev = (fb__report_evidence){.kind = "crash",
        .last_lines = "NVRM: Xid (PCI:0000:3b:00): 119, GSP timeout"};
    cls(&ev, "GPU", "GPU system processor", "xid");
    ev = (fb__report_evidence){.kind = "error_exit", .has_exit_code = 1,
        .exit_code = 1, .last_lines = "RuntimeError: CUDA error: uncorrectable "
                                      "ECC error encountered"};
    cls(&ev, "GPU", "GPU HBM3 memory", "log");
    ev = (fb__report_evidence){.kind = "crash", .category = "Host",
        .component = "NIC", .evidence = "operator said so"};
    cls(&ev, "Host", "NIC", "supervisor");
    ev = (fb__report_evidence){.kind = "interrupted"};
    cls(&ev, "Planned", "Planned stop", "kind");
    ev = (fb__report_evidence){.kind = "restore_fallback",
                               .injected = "corrupt:rank=1,step=90"};
    cls(&ev, "Host", "SSD", "injected");
    ev = (fb__report_evidence){.kind = "restore_fallback",
                               .detail = "tensor x: hash 01, recorded 02"};
    cls(&ev, "Unknown", "Unknown", "kind");
    ev = (fb__report_evidence){.kind = "save_failed"};
    cls(&ev, "Unknown", "Unknown", "none");
    ev = (fb__report_evidence){0};
    cls(&ev, "Unknown", "Unknown", "none");

    /* The sample inputs of the fuzz target must classify without harm. */
    const char *dir = getenv("FB_REPORT_SAMPLES");
    static const char *const files[] = {"health_fail.json", "fr_hang.json",
                                        "kmsg_xid.txt", NULL};
    for (int i = 0; dir && files[i]; i++) {
        char path[1024], buf[65536];
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        FILE *f = fopen(path, "r");
        CHECK(f != NULL);
        if (!f)
            continue;
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = '\0';
        fb__report_evidence e = {.kind = "crash", .health = buf,
                                 .fr_verdict = buf, .last_lines = buf};
        fb__report_class c;
        fb__report_classify(&e, &c);
        CHECK(strcmp(c.decided_by, "none") != 0);
    }
}

static fb__report_run *load(const char *dir)
{
    fb__report_run *run = NULL;
    char err[1024] = "";
    int rc = fb__report_load(dir, &run, err, sizeof err);
    if (rc) {
        fprintf(stderr, "load %s: %d: %s\n", dir, rc, err);
        exit(1);
    }
    return run;
}

static void test_basic(const char *dir)
{
    fb__report_run *run = load(dir);
    CHECK(run->finished);
    CHECK_EQ_INT(run->nattempts, 5);
    CHECK_EQ_INT(run->nincidents, 6);
    EXPECT_US(run->wall_us, 61.0);
    EXPECT_US(run->us[FB__T_USEFUL], 16.4);
    EXPECT_US(run->us[FB__T_CKPT], 0.6);
    EXPECT_US(run->us[FB__T_LOST], 15.0);
    EXPECT_US(run->us[FB__T_DETECT], 10.61);
    EXPECT_US(run->us[FB__T_RESTART], 15.39);
    EXPECT_US(run->us[FB__T_RESTORE], 3.0);
    int64_t sum = 0;
    for (int p = 0; p < FB__T_N; p++)
        sum += run->us[p];
    CHECK_EQ_INT(sum, run->wall_us);

    /* attempt 0: start-up 2 s, training 8 s (0.2 ckpt, 3 lost), detect
     * 0.5 s, teardown 0.5 s */
    const fb__report_attempt *a = &run->attempts[0];
    EXPECT_US(a->us[FB__T_USEFUL], 4.8);
    EXPECT_US(a->us[FB__T_CKPT], 0.2);
    EXPECT_US(a->us[FB__T_LOST], 3.0);
    EXPECT_US(a->us[FB__T_DETECT], 0.5);
    EXPECT_US(a->us[FB__T_RESTART], 2.5);
    EXPECT_US(a->us[FB__T_RESTORE], 0);
    CHECK_EQ_STR(a->lost_from, "steps");
    a = &run->attempts[1];
    EXPECT_US(a->us[FB__T_RESTORE], 1.5);
    EXPECT_US(a->us[FB__T_RESTART], 2.49);
    EXPECT_US(a->us[FB__T_LOST], 1.0);
    EXPECT_US(a->us[FB__T_USEFUL], 4.7);
    a = &run->attempts[2];
    EXPECT_US(a->us[FB__T_DETECT], 10.0);
    EXPECT_US(a->us[FB__T_LOST], 4.0);
    EXPECT_US(a->us[FB__T_USEFUL], 0);
    a = &run->attempts[4];
    EXPECT_US(a->us[FB__T_USEFUL], 6.9);
    EXPECT_US(a->us[FB__T_LOST], 0);
    CHECK_EQ_INT(a->failure, -1);
    for (size_t i = 0; i < run->nattempts; i++) {
        int64_t s = 0;
        for (int p = 0; p < FB__T_N; p++)
            s += run->attempts[i].us[p];
        CHECK_EQ_INT(s, run->attempts[i].end_us - run->attempts[i].start_us);
    }

    static const char *const want[][3] = {
        {"Unknown", "Unknown", "injected"},
        {"Dependency", "Software bug", "signal"},
        {"Unknown", "Collective watchdog timeout", "flight_recorder"},
        {"GPU", "GPU HBM3 memory", "xid"},
        {"Unknown", "Unknown", "none"},
        {"Host", "SSD", "injected"}, /* from the rank's inject event */
    };
    for (size_t i = 0; i < run->nincidents && i < 6; i++) {
        CHECK_EQ_STR(run->incidents[i].cls.category, want[i][0]);
        CHECK_EQ_STR(run->incidents[i].cls.component, want[i][1]);
        CHECK_EQ_STR(run->incidents[i].cls.decided_by, want[i][2]);
    }
    CHECK(run->incidents[0].ends_attempt && !run->incidents[4].ends_attempt);
    CHECK(fabs(run->incidents[0].lost_acc_s - 3.0) < 1e-9);
    CHECK_EQ_INT((int)run->reports_lost, 12); /* 7 of rank 1, then 5 of rank 0 */
    CHECK_EQ_INT(run->reports_lost_first, 1);
    CHECK(strstr(run->incidents[2].cls.evidence, "rank(s) [1]") != NULL);

    fb__report_suspect *s;
    fb__report_run *runs[1] = {run};
    long ns = fb__report_suspects(runs, 1, &s);
    /* rank 0: the SIGSEGV and the ECC exit.  Not rank 1 nor host-a (one
     * of their two is the injected kill), nor host-b (the SIGSEGV is a
     * software bug, no evidence against the node). */
    CHECK_EQ_INT(ns, 1);
    if (ns == 1) {
        CHECK_EQ_STR(s[0].what, "rank 0");
        CHECK_EQ_INT((int)s[0].failures, 2);
    }
    free(s);
    fb__report_row *rows;
    size_t total;
    long nr = fb__report_table(runs, 1, &rows, &total);
    CHECK_EQ_INT(total, 4); /* interruptions only: not the failed save */
    CHECK_EQ_INT(nr, 4);
    free(rows);
    fb__report_free(run);
}

/* Suspects: what counts against a node or a rank. */
static void test_suspects(void)
{
    fb__report_incident in[3];
    memset(in, 0, sizeof in);
    for (int i = 0; i < 3; i++) {
        in[i].ends_attempt = 1;
        in[i].rank = 0;
        in[i].node = "solo";
        in[i].cls.category = "GPU";
        in[i].cls.component = "Faulty GPU";
    }
    fb__report_run run = {.nproc = 1, .incidents = in, .nincidents = 3};
    fb__report_run *runs[1] = {&run};
    fb__report_suspect *s;
    /* The only node and the only rank: every failure was there. */
    CHECK_EQ_INT(fb__report_suspects(runs, 1, &s), 0);
    free(s);
    /* Two ranks, two nodes: rank 0 and node solo, three times each. */
    run.nproc = 2;
    in[2].node = "other";
    in[2].rank = 1;
    in[1].rank = 0;
    CHECK_EQ_INT(fb__report_suspects(runs, 1, &s), 2);
    free(s);
    /* An injected fault counts against neither; a software bug not
     * against its node. */
    in[0].cls.injected = 1;
    CHECK_EQ_INT(fb__report_suspects(runs, 1, &s), 0);
    free(s);
    in[0].cls.injected = 0;
    in[0].cls.category = "Dependency";
    in[0].cls.component = "Software bug";
    in[0].cls.programs_own = 1;
    long ns = fb__report_suspects(runs, 1, &s);
    CHECK_EQ_INT(ns, 1);
    if (ns == 1)
        CHECK_EQ_STR(s[0].what, "rank 0");
    free(s);
    /* nor the job running out of its GPU memory (the classifier says
     * which causes are the program's own) */
    in[0].cls.component = "GPU out of memory";
    ns = fb__report_suspects(runs, 1, &s);
    CHECK_EQ_INT(ns, 1);
    if (ns == 1)
        CHECK_EQ_STR(s[0].what, "rank 0");
    free(s);
}

/* The set of journals read: each of 300 run directories (past the
 * table's first growth) is new once and seen after, by any spelling of
 * its path; one that cannot be stat()ed is never "seen". */
static void test_seen(void)
{
    char tmp[] = "/tmp/fb-report-seen.XXXXXX", path[4096];
    CHECK(mkdtemp(tmp) != NULL);
    fb__report_seen seen = {0};
    int fresh = 0, again = 0;
    for (int i = 0; i < 300; i++) {
        snprintf(path, sizeof path, "%s/run-%d", tmp, i);
        mkdir(path, 0700);
        snprintf(path, sizeof path, "%s/run-%d/journal.sqlite", tmp, i);
        fclose(fopen(path, "w"));
        snprintf(path, sizeof path, "%s/run-%d", tmp, i);
        fresh += fb__report_seen_add(&seen, path) == 0;
    }
    for (int i = 0; i < 300; i++) {
        snprintf(path, sizeof path, "%s/run-%d/%s", tmp, i, i % 2 ? "" : "journal.sqlite");
        again += fb__report_seen_add(&seen, path) == 1;
    }
    CHECK_EQ_INT(fresh, 300);
    CHECK_EQ_INT(again, 300);
    CHECK_EQ_INT(fb__report_seen_add(&seen, "/nonexistent/run"), 0);
    CHECK_EQ_INT(fb__report_seen_add(&seen, "/nonexistent/run"), 0);
    fb__report_seen_free(&seen);
    for (int i = 0; i < 300; i++) {
        snprintf(path, sizeof path, "%s/run-%d/journal.sqlite", tmp, i);
        unlink(path);
        snprintf(path, sizeof path, "%s/run-%d", tmp, i);
        rmdir(path);
    }
    rmdir(tmp);
}

static void test_running(const char *dir)
{
    fb__report_run *run = load(dir);
    CHECK(!run->finished);
    EXPECT_US(run->wall_us, 60.0); /* the last record: attempt 4 ended */
    EXPECT_US(run->us[FB__T_USEFUL], 16.4);
    fb__report_free(run);
}

static void test_afterfail(const char *dir)
{
    fb__report_run *run = load(dir);
    const fb__report_attempt *a = &run->attempts[0];
    EXPECT_US(a->us[FB__T_CKPT], 0.1);
    EXPECT_US(a->us[FB__T_LOST], 1.0);
    EXPECT_US(a->us[FB__T_USEFUL], 4.9);
    EXPECT_US(a->us[FB__T_DETECT], 3.0);
    CHECK_EQ_STR(a->lost_from, "steps");
    CHECK(fabs(run->incidents[0].lost_acc_s - 1.0) < 1e-9);
    fb__report_free(run);
}

static void test_shortfirst(const char *dir)
{
    fb__report_run *run = load(dir);
    const fb__report_attempt *a = &run->attempts[0];
    /* all of its 0.6 s of training was counted lost ("steps") before */
    CHECK_EQ_STR(a->lost_from, "incident");
    EXPECT_US(a->us[FB__T_LOST], 0.2);
    CHECK(fabs(run->incidents[0].lost_acc_s - 0.2) < 1e-9);
    fb__report_free(run);
}

static void test_error(const char *dir, const char *code, const char *text)
{
    fb__report_run *run = NULL;
    char err[1024] = "";
    int rc = fb__report_load(dir, &run, err, sizeof err);
    int want = !strcmp(code, "EFORMAT") ? FB_EFORMAT
             : !strcmp(code, "EVERSION") ? FB_EVERSION
             : !strcmp(code, "EBUSY") ? -EBUSY : -ENOENT;
    if (rc != want || !strstr(err, text)) {
        fprintf(stderr, "load %s: rc %d (%s), err '%s'; expected %s and '%s'\n",
                dir, rc, fb_strerror(rc), err, code, text);
        failures++;
    }
    CHECK(run == NULL);
}

int main(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "classify")) {
        test_classify();
        test_suspects();
        test_seen();
    }
    else if (argc == 3 && !strcmp(argv[1], "basic"))
        test_basic(argv[2]);
    else if (argc == 3 && !strcmp(argv[1], "running"))
        test_running(argv[2]);
    else if (argc == 3 && !strcmp(argv[1], "afterfail"))
        test_afterfail(argv[2]);
    else if (argc == 3 && !strcmp(argv[1], "shortfirst"))
        test_shortfirst(argv[2]);
    else if (argc == 5 && !strcmp(argv[1], "error"))
        test_error(argv[2], argv[3], argv[4]);
    else {
        fprintf(stderr, "usage: test_report classify|basic DIR|running DIR|afterfail DIR|shortfirst DIR|"
                "error DIR CODE TEXT\n");
        return 2;
    }
    if (failures)
        fprintf(stderr, "%d failure(s)\n", failures);
    return failures ? 1 : 0;
}
