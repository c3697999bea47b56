/*
 * cmd_report.c -- `firebreak report RUN_DIR... [--json] [--html FILE]`:
 * where the time went and why runs failed (src/report/, docs/report.md).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "common/jsonw.h"
#include "common/util.h"
#include "report/report.h"

static void usage(FILE *f)
{
    fprintf(f,
        "usage: firebreak report RUN_DIR [RUN_DIR...] [--json] [--html FILE]\n"
        "       firebreak report --fleet DIR [DIR...] [--json] [--html FILE]\n\n"
        "Reads each run directory's journal.sqlite (and agent.sqlite when\n"
        "present) and reports: the wall time split into useful training,\n"
        "checkpoint stall, lost work, detection, restart and start-up, and\n"
        "restore (they add up to the wall time); effective training time;\n"
        "every incident with its Llama 3 root-cause category and the evidence\n"
        "that decided it; with several runs, the aggregate and suspects.\n"
        "A run directory used again (firebreak run --run-dir of an earlier\n"
        "run) is reported as its newest run; --fleet counts each of its runs.\n\n"
        "  --json       one JSON object on the last line of stdout\n"
        "  --html FILE  also write a self-contained HTML page with charts\n"
        "  --fleet      nodes across many runs (each DIR a run directory or a\n"
        "               directory of them), ranked by interruptions, hardware\n"
        "               root causes, failed health checks and drains, lemons\n"
        "               flagged with the evidence behind each flag (--html: a\n"
        "               page of the same)\n\n"
        "Exit: 0 ok, 2 usage error or a journal that cannot be read (--fleet:\n"
        "runs that cannot be read are skipped, each said on stderr and counted;\n"
        "2 when no run at all could be read).\n");
}

static int fleet(const char **dirs, size_t n, int json, const char *html)
{
    fb__fleet f;
    memset(&f, 0, sizeof f);
    fb__fleet_thresholds_init(&f.t);
    int r = 0;
    for (size_t i = 0; !r && i < n; i++)
        r = fb__fleet_add_dir(&f, dirs[i], stderr);
    if (r) {
        if (r != -ENOENT) /* a missing DIR was named already */
            fprintf(stderr, "firebreak report: --fleet: %s\n", strerror(-r));
        fb__fleet_free(&f);
        return 2;
    }
    fb__fleet_finish(&f);
    char err[512];
    if (html && fb__fleet_write_html_file(html, &f, err, sizeof err)) {
        fprintf(stderr, "firebreak report: --html: %s\n", err);
        fb__fleet_free(&f);
        return 2;
    }
    if (json) {
        fb__jsonw w;
        fb__jsonw_init(&w);
        r = fb__fleet_write_json(&w, &f);
        if (!r)
            r = fb__jsonw_print(&w, stdout);
        fb__jsonw_free(&w);
    } else {
        r = fb__fleet_write_text(stdout, &f);
        if (!r && html)
            printf("\nHTML report: %s\n", html);
        if (!r && fflush(stdout))
            r = -EIO;
    }
    size_t read = f.nruns, skipped = f.skipped;
    fb__fleet_free(&f);
    if (r && !ferror(stdout))
        fprintf(stderr, "firebreak report: %s\n", strerror(-r));
    if (!r && read == 0) {
        /* The (empty) report is written for a script that reads it; the
         * exit says that nothing was read, as a journal that cannot be
         * read does without --fleet. */
        fprintf(stderr, "firebreak report: --fleet: no run could be read (%zu "
                "skipped: see above)\n", skipped);
        return 2;
    }
    return r ? 2 : 0;
}

int fb__cmd_report(int argc, char **argv)
{
    int json = 0, rc = 0, is_fleet = 0;
    const char *html = NULL;
    const char **dirs = calloc((size_t)argc + 1, sizeof *dirs);
    size_t ndirs = 0;
    if (!dirs)
        return 2;
    for (int i = 1; i < argc; i++) {
        if (fb__cli_is_help(argv[i])) {
            usage(stdout);
            free(dirs);
            return 0;
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if (!strcmp(argv[i], "--fleet")) {
            is_fleet = 1;
        } else if (!strcmp(argv[i], "--html")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "firebreak report: --html needs a FILE\n");
                free(dirs);
                return 2;
            }
            html = argv[++i];
        } else if (!strncmp(argv[i], "--html=", 7)) {
            html = argv[i] + 7;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "firebreak report: unknown option '%s'\n", argv[i]);
            usage(stderr);
            free(dirs);
            return 2;
        } else {
            dirs[ndirs++] = argv[i];
        }
    }
    if (ndirs == 0) {
        usage(stderr);
        free(dirs);
        return 2;
    }
    if (is_fleet) {
        rc = fleet(dirs, ndirs, json, html);
        free(dirs);
        return rc;
    }
    fb__report_run **runs = calloc(ndirs, sizeof *runs);
    if (!runs) {
        free(dirs);
        return 2;
    }
    /* One run given twice ("runs/a runs/a/", overlapping globs) is
     * reported once: counted twice, its failures would make its nodes
     * and ranks suspects of "repeated" failures. */
    char err[1024];
    fb__report_seen seen = {0};
    size_t kept = 0;
    for (size_t i = 0; i < ndirs; i++) {
        int dup = fb__report_seen_add(&seen, dirs[i]);
        if (dup < 0) {
            fb__report_seen_free(&seen);
            free(runs);
            free(dirs);
            return 2;
        }
        if (dup)
            fprintf(stderr, "firebreak report: %s is a run given already: "
                    "reported once\n", fb__safe_text(err, sizeof err, dirs[i]));
        else
            dirs[kept++] = dirs[i];
    }
    ndirs = kept;
    fb__report_seen_free(&seen);
    size_t n = 0;
    for (; n < ndirs; n++) {
        err[0] = '\0';
        int r = fb__report_load(dirs[n], &runs[n], err, sizeof err);
        if (r) {
            /* err may quote the journal (the run's reason) */
            fprintf(stderr, "firebreak report: %s\n",
                    fb__safe_text(err, sizeof err, err[0] ? err : dirs[n]));
            rc = 2;
            goto out;
        }
    }
    if (html && fb__report_write_html_file(html, runs, n, err, sizeof err)) {
        fprintf(stderr, "firebreak report: --html: %s\n", err);
        rc = 2;
        goto out;
    }
    int r;
    if (json) {
        fb__jsonw w;
        fb__jsonw_init(&w);
        r = fb__report_write_json(&w, runs, n);
        if (!r)
            r = fb__jsonw_print(&w, stdout);
        fb__jsonw_free(&w);
    } else {
        r = fb__report_write_text(stdout, runs, n);
        if (!r && html)
            printf("\nHTML report: %s\n", html);
        if (!r && fflush(stdout))
            r = -EIO;
    }
    if (r) { /* main() names a failed write to stdout */
        if (!ferror(stdout))
            fprintf(stderr, "firebreak report: %s\n", strerror(-r));
        rc = 2;
    }
out:
    for (size_t i = 0; i < ndirs; i++)
        fb__report_free(runs[i]);
    free(runs);
    free(dirs);
    return rc;
}
