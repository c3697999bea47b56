/*
 * cmd_demo.c -- `firebreak demo`: the main job, end to end.  The example
 * MPI trainer (fb-train-mlp) runs on 4 ranks under the supervisor with a
 * fixed chaos schedule (a rank SIGKILLed, a rank hung, a rank exiting with
 * an error, the newest checkpoint corrupted just before a crash); every
 * fault is detected, diagnosed and recovered.  Then the same job runs once
 * more without faults, and the demo checks that both end with bit-identical
 * weights.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/jsonw.h"
#include "common/util.h"
#include "supervisor/supervisor.h"
#include "report/report.h"

/* Steps, checkpoint interval and faults: 4 attempts fail, the 5th completes. */
#define DEMO_STEPS "240"
#define DEMO_CKPT_EVERY "30"
static const char demo_faults[] =
    "kill:rank=1,step=50,attempt=0;"
    "hang:rank=2,step=110,attempt=1;"
    "exit:rank=3,step=170,code=3,attempt=2;"
    "corrupt:rank=0,step=215,attempt=3;"
    "kill:rank=0,step=218,attempt=3";

static void usage(FILE *f)
{
    fprintf(f,
"usage: firebreak demo [--json] [--run-root DIR] [--nproc N] [--no-reference]\n"
"\n"
"Runs the example trainer (a character-level MLP language model, MPI data\n"
"parallel) under firebreak with faults injected: rank 1 SIGKILLed, rank 2\n"
"hung, rank 3 exiting with an error, and the newest checkpoint corrupted\n"
"just before rank 0 crashes.  Each is detected, diagnosed and recovered.\n"
"Then a fault-free reference run checks that the final weights are\n"
"bit-identical.  Prints a summary; --json prints one JSON line at the end.\n"
"\n"
"  --run-root DIR   where the run directories go (default demo-runs)\n"
"  --nproc N        ranks (default 4)\n"
"  --no-reference   skip the fault-free reference run\n"
"  --quiet          only the summary\n");
}

/* The trainer next to this binary, else on PATH. */
static int find_trainer(char *out, size_t size)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", fb__cli_self());
    char *slash = strrchr(dir, '/');
    if (slash) {
        *slash = '\0';
        static const char *const cands[] = {"%s/fb-train-mlp",
                                            "%s/../libexec/firebreak/fb-train-mlp"};
        for (size_t i = 0; i < sizeof cands / sizeof cands[0]; i++) {
            snprintf(out, size, cands[i], dir);
            if (access(out, X_OK) == 0)
                return 0;
        }
    }
    return fb__find_program("fb-train-mlp", out, size);
}

static int read_hash(const char *run_dir, char *hash, size_t size)
{
    char path[PATH_MAX], *buf = NULL;
    snprintf(path, sizeof path, "%s/final_hash", run_dir);
    size_t len;
    int rc = fb__read_file(path, 256, &buf, &len);
    if (rc)
        return rc;
    while (len && (buf[len - 1] == '\n' || buf[len - 1] == ' '))
        buf[--len] = '\0';
    snprintf(hash, size, "%s", buf);
    free(buf);
    return 0;
}

static int run_job(const char *trainer, const char *root, const char *name,
                   int nproc, const char *faults, int quiet, fb__sup_result *res)
{
    char *argv[] = {(char *)trainer, "--steps", DEMO_STEPS, "--ckpt-every",
                    DEMO_CKPT_EVERY, "--log-every", "40", NULL};
    fb__sup_options o;
    fb__sup_options_init(&o);
    o.argv = argv;
    o.nproc_per_node = nproc;
    o.launcher = FB__LAUNCH_MPIRUN;
    o.max_restarts = 6;
    o.hang_timeout_s = 3;
    o.startup_timeout_s = 60;
    o.grace_s = 2;
    o.run_root = root;
    o.name = name;
    o.inject = faults;
    o.quiet = quiet;
    o.account = fb__cli_account;
    return fb__sup_run(&o, res);
}

static void print_summary(const fb__sup_result *r, const char *hash,
                          const char *ref_hash, int match, const char *html)
{
    printf("\nfirebreak demo: %s\n", r->completed ? "training completed" : "training DID NOT complete");
    printf("  run directory     %s\n", r->run_dir);
    printf("  steps             %lld\n", (long long)r->last_step);
    printf("  attempts          %d (%d restarts)\n", r->attempts, r->restarts);
    printf("  wall time         %.1f s, useful %.1f s\n", r->wall_s, r->useful_s);
    printf("  effective training time  %.1f%%\n", 100.0 * r->ettr);
    printf("  incidents:\n");
    printf("    %-17s %5s %6s %12s %9s  %s\n", "kind", "rank", "step", "detect", "lost", "detail");
    for (int i = 0; i < r->nincidents; i++) {
        const fb__sup_incident *in = &r->incidents[i];
        char detail[sizeof in->detail]; /* may quote what a rank printed */
        printf("    %-17s %5d %6lld %9.1f ms %7.2f s  %s\n", in->kind, in->rank,
               (long long)in->step, in->detect_ms, in->lost_s > 0 ? in->lost_s : 0,
               fb__safe_text(detail, sizeof detail, in->detail));
    }
    printf("  final weights     %s\n", hash[0] ? hash : "(none)");
    if (ref_hash)
        printf("  reference run     %s  -> %s\n", ref_hash[0] ? ref_hash : "(none)",
               match ? "MATCH: bit-identical after every recovery"
                     : "MISMATCH");
    if (html && html[0])
        printf("  report            %s\n", html);
}

int fb__cmd_demo(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"json", no_argument, 0, 'j'}, {"run-root", required_argument, 0, 'r'},
        {"nproc", required_argument, 0, 'n'}, {"no-reference", no_argument, 0, 'R'},
        {"quiet", no_argument, 0, 'q'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    int json = 0, reference = 1, quiet = 0;
    long long nproc = 4;
    const char *root = "demo-runs";
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'j': json = 1; break;
        case 'r': root = optarg; break;
        case 'R': reference = 0; break;
        case 'q': quiet = 1; break;
        case 'n':
            if (fb__parse_int(optarg, 4, 64, &nproc)) {
                fprintf(stderr, "firebreak demo: --nproc: need a number from 4 to 64\n");
                return 2;
            }
            break;
        case 'h': usage(stdout); return 0;
        default:
            fprintf(stderr, "firebreak demo: unknown option '%s'\n", argv[optind - 1]);
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "firebreak demo: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    char trainer[PATH_MAX];
    if (find_trainer(trainer, sizeof trainer)) {
        fprintf(stderr, "firebreak demo: cannot find fb-train-mlp (built with "
                "Open MPI next to the firebreak binary); run 'make build'\n");
        return 2;
    }
    fb__sup_result *res = calloc(2, sizeof *res);
    if (!res)
        return 2;
    fb__sup_result *ref = &res[1];
    if (!quiet)
        fprintf(stderr, "firebreak demo: training %s on %lld ranks with faults: %s\n",
                trainer, nproc, demo_faults);
    int rc = run_job(trainer, root, "demo", (int)nproc, demo_faults, quiet, res);
    if (rc) {
        free(res);
        return 2;
    }
    char hash[64] = "", ref_hash[64] = "", html[PATH_MAX] = "";
    read_hash(res->run_dir, hash, sizeof hash);
    int match = 0;
    if (reference) {
        if (!quiet)
            fprintf(stderr, "\nfirebreak demo: reference run without faults\n");
        rc = run_job(trainer, root, "demo-reference", (int)nproc, NULL, quiet, ref);
        if (!rc)
            read_hash(ref->run_dir, ref_hash, sizeof ref_hash);
        match = hash[0] && !strcmp(hash, ref_hash);
    }
    {
        char err[512];
        snprintf(html, sizeof html, "%s/report.html", res->run_dir);
        if (fb__report_html(res->run_dir, html, err, sizeof err)) {
            fprintf(stderr, "firebreak demo: report: %s\n", err);
            html[0] = '\0';
        }
    }
    print_summary(res, hash, reference ? ref_hash : NULL, match, html);
    if (json) {
        fb__jsonw w;
        fb__jsonw_init(&w);
        fb__jsonw_obj_begin(&w);
        fb__jsonw_kstr(&w, "version", "1.0");
        fb__jsonw_kbool(&w, "completed", res->completed);
        fb__jsonw_kstr(&w, "run_dir", res->run_dir);
        fb__jsonw_kint(&w, "restarts", res->restarts);
        fb__jsonw_kint(&w, "steps", res->last_step);
        fb__jsonw_key(&w, "incidents");
        fb__jsonw_arr_begin(&w);
        for (int i = 0; i < res->nincidents; i++) {
            const fb__sup_incident *in = &res->incidents[i];
            fb__jsonw_obj_begin(&w);
            fb__jsonw_kstr(&w, "kind", in->kind);
            fb__jsonw_kint(&w, "rank", in->rank);
            fb__jsonw_kint(&w, "step", in->step);
            fb__jsonw_kdouble(&w, "detect_ms", in->detect_ms);
            fb__jsonw_kdouble(&w, "lost_s", in->lost_s > 0 ? in->lost_s : 0);
            fb__jsonw_kstr(&w, "detail", in->detail);
            fb__jsonw_obj_end(&w);
        }
        fb__jsonw_arr_end(&w);
        fb__jsonw_kdouble(&w, "ettr", res->ettr);
        fb__jsonw_kdouble(&w, "wall_s", res->wall_s);
        fb__jsonw_kstr(&w, "final_hash", hash);
        if (reference) {
            fb__jsonw_kstr(&w, "reference_hash", ref_hash);
            fb__jsonw_kstr(&w, "reference_run_dir", ref->run_dir);
        } else {
            fb__jsonw_key(&w, "reference_hash");
            fb__jsonw_null(&w);
        }
        fb__jsonw_kbool(&w, "match", match);
        fb__jsonw_kstr(&w, "report_html", html[0] ? html : NULL);
        fb__jsonw_obj_end(&w);
        fb__jsonw_print(&w, stdout);
        fb__jsonw_free(&w);
    }
    int ok = res->completed && (!reference || match);
    free(res);
    return ok ? 0 : 1;
}
