/*
 * test_lateness.c -- the report's lateness section (src/report/lateness.c)
 * from a journal written through the supervisor's journal API, as
 * src/supervisor/lateness.c writes it: a straggler incident, lateness
 * samples, an end; plus rows a hostile journal could hold (a rank of -1,
 * a last count above the window, a lateness of 1e300), which are skipped
 * or shown as unknown.
 *
 *   test_report_lateness DIR   (a scratch directory, emptied by the caller)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../check.h"
#include "common/jsonw.h"
#include "journal/journal.h"
#include "report/report.h"

#define T0 1700000000.0

static void event(fb__journal *j, int64_t att, double t, int rank, const char *kind,
                  int64_t step, int code, int64_t bytes, double ms)
{
    fb__journal_event ev = {.attempt_id = att, .time = T0 + t, .rank = rank,
                            .kind = kind, .step = step, .code = code,
                            .bytes = bytes, .value_ms = ms, .detail = "x"};
    CHECK_RC(fb__journal_add_event(j, &ev), 0);
}

static int write_journal(const char *dir)
{
    char err[256], path[4096];
    fb__journal *j;
    snprintf(path, sizeof path, "%s/journal.sqlite", dir);
    int rc = fb__journal_open(&j, path, err, sizeof err);
    if (rc) {
        fprintf(stderr, "%s\n", err);
        return rc;
    }
    fb__journal_run r = {.name = "late", .job_id = "late-1", .run_dir = dir,
                         .command_json = "[]", .launcher = "mpirun",
                         .hostname = "host-a", .options_json = "{}", .nproc = 4,
                         .nnodes = 1, .hang_timeout_s = 300, .started_at = T0};
    int64_t att;
    CHECK_RC(fb__journal_begin_run(j, &r), 0);
    CHECK_RC(fb__journal_begin_attempt(j, 0, T0, &att), 0);
    CHECK_RC(fb__journal_attempt_real(j, att, "launched_at", T0 + 0.1), 0);
    CHECK_RC(fb__journal_attempt_real(j, att, "ready_at", T0 + 1), 0);
    fb__journal_incident inc = {.attempt_id = att, .kind = "straggler",
                                .occurred_at = T0 + 3, .detected_at = T0 + 3,
                                .rank = 2, .node = "host-a", .phase = "train",
                                .step = 40, .lost_s = -1, .detail = "rank 2 late"};
    CHECK_RC(fb__journal_add_incident(j, &inc, NULL), 0);
    event(j, att, 3, 2, "lateness", 40, 30, 34, 40.5);
    event(j, att, 13, 2, "lateness", 160, 64, 64, 57.25);
    event(j, att, 20, 3, "lateness", 250, 10, 64, 2.5);  /* rank 3's only one */
    event(j, att, 23, 2, "straggler_end", 290, 0, 0, 1.5);
    event(j, att, 24, -1, "lateness", 300, 1, 64, 3);     /* no rank: skipped */
    event(j, att, 25, 1, "lateness", 310, 70, 64, 1e300); /* nonsense: unknown */
    event(j, att, 26, 0, "inject", 320, 0, 0, -1);        /* another kind */
    CHECK_RC(fb__journal_attempt_real(j, att, "ended_at", T0 + 30), 0);
    CHECK_RC(fb__journal_attempt_text(j, att, "outcome", "completed"), 0);
    CHECK_RC(fb__journal_end_run(j, T0 + 30, "completed", 0, NULL), 0);
    fb__journal_close(j);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_report_lateness DIR\n");
        return 2;
    }
    if (write_journal(argv[1]))
        return 1;
    fb__report_run *run;
    char err[512];
    CHECK_RC(fb__report_load(argv[1], &run, err, sizeof err), 0);
    if (failures)
        return 1;
    CHECK_EQ_U64(run->late_total, 6);
    CHECK_EQ_U64(run->nlate, 6);
    static const struct {
        double at;
        int rank;
        fb__report_late_kind kind;
        double ms;
        long long last, n;
    } want[] = {
        {3, 2, FB__LATE_NAMED, NAN, -1, -1},
        {3, 2, FB__LATE_SAMPLE, 40.5, 30, 34},
        {13, 2, FB__LATE_SAMPLE, 57.25, 64, 64},
        {20, 3, FB__LATE_SAMPLE, 2.5, 10, 64},
        {23, 2, FB__LATE_ENDED, 1.5, -1, -1},
        {25, 1, FB__LATE_SAMPLE, NAN, -1, -1},
    };
    for (size_t i = 0; i < run->nlate && i < 6; i++) {
        const fb__report_late *l = &run->late[i];
        CHECK_EQ_DBL(l->time - T0, want[i].at);
        CHECK_EQ_INT(l->rank, want[i].rank);
        CHECK_EQ_INT(l->kind, want[i].kind);
        CHECK_EQ_INT(l->attempt, 0);
        CHECKF(isnan(want[i].ms) ? isnan(l->late_ms) : l->late_ms == want[i].ms,
               "row %zu: late_ms %g, want %g", i, l->late_ms, want[i].ms);
        CHECK_EQ_INT(l->last, want[i].last);
        CHECK_EQ_INT(l->collectives, want[i].n);
    }
    /* text: a section with the rows */
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    CHECK(m != NULL);
    fb__report_lateness_text(m, run);
    fclose(m);
    CHECKF(text && strstr(text, "lateness at collectives (supervisor's live check; 6 rows)"),
           "text: %s", text ? text : "(none)");
    CHECKF(text && strstr(text, "  lateness            2      160         57.2  64 of 64"),
           "text: %s", text ? text : "(none)");
    free(text);
    /* JSON: the same rows */
    fb__jsonw w;
    fb__jsonw_init(&w);
    fb__jsonw_obj_begin(&w);
    fb__report_lateness_json(&w, run);
    fb__jsonw_obj_end(&w);
    m = open_memstream(&text, &len);
    fb__jsonw_print(&w, m);
    fclose(m);
    CHECKF(strstr(text, "\"lateness_total\":6") &&
           strstr(text, "{\"at_s\":13,\"kind\":\"lateness\",\"rank\":2,\"attempt\":0,"
                        "\"step\":160,\"late_ms\":57.25,\"last\":64,\"collectives\":64}") &&
           strstr(text, "\"kind\":\"straggler\",\"rank\":2,\"attempt\":0,\"step\":40,"
                        "\"late_ms\":null,\"last\":null,\"collectives\":null"),
           "JSON: %s", text);
    free(text);
    fb__jsonw_free(&w);
    /* HTML: rank 2's two samples a line, rank 3's one a dot (a polyline
     * of one point draws nothing: the chart showed a legend and no mark) */
    m = open_memstream(&text, &len);
    CHECK(m != NULL);
    CHECK_RC(fb__report_write_html(m, &run, 1), 0);
    fclose(m);
    const char *sec = text ? strstr(text, "<h3>Lateness at collectives</h3>") : NULL;
    CHECKF(sec && strstr(sec, "<title>rank 2</title></polyline>"), "HTML: no line for rank 2");
    CHECKF(sec && strstr(sec, "<title>rank 3</title></circle>") &&
               !strstr(sec, "<title>rank 3</title></polyline>"),
           "HTML: rank 3's single sample is not a dot");
    free(text);
    fb__report_free(run);
    if (failures)
        fprintf(stderr, "%d check(s) failed\n", failures);
    return failures != 0;
}
