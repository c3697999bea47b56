/*
 * cmd_demo.c -- `firebreak demo`: the main job, end to end.  The example
 * MPI trainer (fb-train-mlp) runs on 4 ranks under the supervisor with a
 * fixed chaos schedule (a bit flipped in one replica of the weights, caught
 * by the SDC check, a rank hung, a rank exiting with
 * an error, the newest checkpoint corrupted just before a crash); every
 * fault is detected, diagnosed and recovered.  Then the same job runs once
 * more without faults, and the demo checks that both end with bit-identical
 * weights.
 *
 * `--torch` does the same with the PyTorch example (examples/gpt/train.py,
 * a small GPT over DDP/gloo using the firebreak Python package) on 2 ranks
 * through the local launcher; the faults fire inside firebreak.step().
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
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
    "flip:rank=1,step=50,tensor=w1,attempt=0;"
    "hang:rank=2,step=110,attempt=1;"
    "exit:rank=3,step=170,code=3,attempt=2;"
    "corrupt:rank=0,step=215,attempt=3;"
    "kill:rank=0,step=218,attempt=3";

/* The PyTorch example: same kinds of faults, on ranks 0 and 1.  The
 * corruption comes 17 steps after the save of step 80; the fault waits for
 * that asynchronous save to be committed (src/lib/inject.c), so it is step
 * 80's shard that is corrupted and set aside, however loaded the machine. */
#define TORCH_STEPS "120"
#define TORCH_CKPT_EVERY "20"
static const char torch_faults[] =
    "kill:rank=1,step=30,attempt=0;"
    "hang:rank=0,step=55,attempt=1;"
    "exit:rank=1,step=75,code=3,attempt=2;"
    "corrupt:rank=0,step=97,attempt=3;"
    "kill:rank=0,step=99,attempt=3";

/* What the demo trains: the C/MPI trainer or the PyTorch example. */
typedef struct demo_job {
    int torch;
    const char *faults;
    char program[PATH_MAX];   /* fb-train-mlp, or the python interpreter  */
    char script[PATH_MAX];    /* torch: examples/gpt/train.py             */
    char torch_version[64];   /* torch: what the interpreter imports      */
} demo_job;

static void usage(FILE *f)
{
    fprintf(f,
"usage: firebreak demo [--torch [--python PATH]] [--json] [--run-root DIR]\n"
"                      [--nproc N] [--no-reference] [--quiet]\n"
"\n"
"Runs the example trainer (a character-level MLP language model, MPI data\n"
"parallel) under firebreak with faults injected: a bit flipped in rank 1's\n"
"replica of the weights (silent data corruption), rank 2 hung, rank 3\n"
"exiting with an error, and rank 0's newest checkpoint corrupted just\n"
"before rank 0 is SIGKILLed.  Each is detected, diagnosed and recovered.\n"
"Then a fault-free reference run checks that the final weights are\n"
"bit-identical.  Prints a summary; --json prints one JSON line at the end.\n"
"\n"
"With --torch the trainer is the PyTorch example examples/gpt/train.py (a\n"
"small GPT, DDP over gloo on CPU, checkpointed with the firebreak Python\n"
"package) on 2 ranks: rank 1 SIGKILLed, rank 0 hung, rank 1 exiting with\n"
"an error, rank 0's newest checkpoint corrupted just before it crashes.\n"
"\n"
"  --torch          the PyTorch example instead of the MPI trainer\n"
"  --python PATH    the interpreter with torch (default /usr/bin/python3)\n"
"  --run-root DIR   where the run directories go (default demo-runs)\n"
"  --nproc N        ranks (default 4; with --torch 2)\n"
"  --no-reference   skip the fault-free reference run\n"
"  --quiet          only the summary\n");
}

/* The directory of this binary (no trailing slash), or -1. */
static int self_dir(char *dir, size_t size)
{
    if (fb__fmt(dir, size, "%s", fb__cli_self()))
        return -1;
    char *slash = strrchr(dir, '/');
    if (!slash)
        return -1;
    *slash = '\0';
    return 0;
}

/* The trainer next to this binary, else on PATH. */
static int find_trainer(char *out, size_t size)
{
    char dir[PATH_MAX];
    if (self_dir(dir, sizeof dir) == 0) {
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

/* examples/gpt/train.py: copied into the build tree next to this binary,
 * or installed under <prefix>/share/firebreak/examples.  A build tree's
 * python/ (the package `make build` builds) goes first on PYTHONPATH;
 * installed, the package is the interpreter's own (pip install ./python). */
static int find_torch_example(char *script, size_t size)
{
    char dir[PATH_MAX];
    if (self_dir(dir, sizeof dir))
        return -ENOENT;
    static const char *const cands[] = {
        "%s/examples/gpt/train.py", "%s/../share/firebreak/examples/gpt/train.py"};
    for (size_t i = 0; i < sizeof cands / sizeof cands[0]; i++)
        if (fb__fmt(script, size, cands[i], dir) == 0 && access(script, R_OK) == 0)
            return 0;
    return -ENOENT;
}

static int use_build_tree_package(void)
{
    char dir[PATH_MAX], pkg[PATH_MAX + 64], path[2 * PATH_MAX + 2];
    if (self_dir(dir, sizeof dir) ||
        fb__fmt(pkg, sizeof pkg, "%s/python/firebreak/__init__.py", dir) ||
        access(pkg, R_OK))
        return 0;
    const char *old = getenv("PYTHONPATH");
    if (fb__fmt(path, sizeof path, "%s/python%s%s", dir, old && *old ? ":" : "",
                old && *old ? old : ""))
        return 0;
    return setenv("PYTHONPATH", path, 1) == 0;
}

/* Exit status 3: no torch; 4: no firebreak package; 0: torch's version. */
static const char probe_py[] =
    "import sys\n"
    "try:\n"
    "    import torch, torch.distributed\n"
    "except Exception as e:\n"
    "    sys.stdout.write('%s' % e); sys.exit(3)\n"
    "try:\n"
    "    import firebreak\n"
    "except Exception as e:\n"
    "    sys.stdout.write('%s' % e); sys.exit(4)\n"
    "sys.stdout.write(torch.__version__)\n";

/* Ask the interpreter whether it imports torch and firebreak.  Returns 0
 * with torch's version in job->torch_version, else prints why not. */
static int probe_python(demo_job *job)
{
    int p[2];
    pid_t pid = -1;
    if (pipe2(p, O_CLOEXEC) == 0 && (pid = fork()) < 0) {
        int e = errno;
        close(p[0]);
        close(p[1]);
        errno = e;
    }
    if (pid < 0) {
        fprintf(stderr, "firebreak demo --torch: cannot run %s: %s\n", job->program,
                strerror(errno));
        return -1;
    }
    if (pid == 0) {
        dup2(p[1], 1);
        close(p[0]);
        close(p[1]);
        int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
        if (null >= 0)
            dup2(null, 2);
        execl(job->program, job->program, "-c", probe_py, (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    char out[512];
    size_t len = 0;
    ssize_t n;
    while ((n = read(p[0], out + len, sizeof out - 1 - len)) > 0 ||
           (n < 0 && errno == EINTR))
        if (n > 0)
            len += (size_t)n;
    close(p[0]);
    out[len] = '\0';
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    char safe[sizeof out];
    fb__safe_text(safe, sizeof safe, out);
    if (code == 0 && len) {
        snprintf(job->torch_version, sizeof job->torch_version, "%s", safe);
        return 0;
    }
    if (code == 3)
        fprintf(stderr, "firebreak demo --torch: %s cannot import torch (%s); install "
                "Debian's python3-torch, or give --python an interpreter that has "
                "torch\n", job->program, safe);
    else if (code == 4)
        fprintf(stderr, "firebreak demo --torch: %s cannot import the firebreak "
                "package (%s); build it with 'make build' (build/python) or install "
                "it into that python with 'pip install ./python' (docs/pytorch.md)\n",
                job->program, safe);
    else
        fprintf(stderr, "firebreak demo --torch: cannot run %s (exit status %d)\n",
                job->program, code);
    return -1;
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

static int run_job(const demo_job *job, const char *root, const char *name,
                   int nproc, const char *faults, int quiet, fb__sup_result *res)
{
    char *mpi_argv[] = {(char *)job->program, "--steps", DEMO_STEPS, "--ckpt-every",
                        DEMO_CKPT_EVERY, "--log-every", "40", NULL};
    char *torch_argv[] = {(char *)job->program, (char *)job->script, "--steps",
                          TORCH_STEPS, "--ckpt-every", TORCH_CKPT_EVERY,
                          "--eval-every", "50", "--log-every", "20", NULL};
    fb__sup_options o;
    fb__sup_options_init(&o);
    o.argv = job->torch ? torch_argv : mpi_argv;
    o.nproc_per_node = nproc;
    o.launcher = job->torch ? FB__LAUNCH_LOCAL : FB__LAUNCH_MPIRUN;
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

static void print_summary(const demo_job *job, const fb__sup_result *r,
                          const char *hash, const char *ref_hash, int match,
                          const char *html)
{
    printf("\nfirebreak demo: %s\n", r->completed ? "training completed" : "training DID NOT complete");
    if (job->torch)
        printf("  trainer           %s %s (torch %s)\n", job->program, job->script,
               job->torch_version);
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
    /* The hashes are what the trainer wrote: printed as safe text. */
    char safe[128], ref_safe[128];
    printf("  final weights     %s\n",
           hash[0] ? fb__safe_text(safe, sizeof safe, hash) : "(none)");
    if (ref_hash)
        printf("  reference run     %s  -> %s\n",
               ref_hash[0] ? fb__safe_text(ref_safe, sizeof ref_safe, ref_hash) : "(none)",
               match ? "MATCH: bit-identical after every recovery"
                     : "MISMATCH");
    if (html && html[0])
        printf("  report            %s\n", html);
}

/* Options parsed; job filled in: 0, else the exit status. */
static int find_job(demo_job *job, const char *python)
{
    if (!job->torch) {
        job->faults = demo_faults;
        if (find_trainer(job->program, sizeof job->program)) {
            fprintf(stderr, "firebreak demo: cannot find fb-train-mlp (built with "
                    "Open MPI next to the firebreak binary); run 'make build'\n");
            return 2;
        }
        return 0;
    }
    job->faults = torch_faults;
    if (find_torch_example(job->script, sizeof job->script)) {
        fprintf(stderr, "firebreak demo --torch: cannot find examples/gpt/train.py "
                "(in the build tree next to the firebreak binary, or installed in "
                "<prefix>/share/firebreak/examples); run 'make build'\n");
        return 2;
    }
    int rc = fb__find_program(python, job->program, sizeof job->program);
    if (rc) {
        fprintf(stderr, "firebreak demo --torch: python '%s': %s; give --python the "
                "interpreter that has torch\n", python, strerror(-rc));
        return 2;
    }
    use_build_tree_package();
    return probe_python(job) ? 2 : 0;
}

int fb__cmd_demo(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"json", no_argument, 0, 'j'}, {"run-root", required_argument, 0, 'r'},
        {"nproc", required_argument, 0, 'n'}, {"no-reference", no_argument, 0, 'R'},
        {"quiet", no_argument, 0, 'q'}, {"torch", no_argument, 0, 't'},
        {"python", required_argument, 0, 'p'}, {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    int json = 0, reference = 1, quiet = 0;
    long long nproc = 0;
    const char *root = "demo-runs", *python = NULL, *nproc_arg = NULL;
    demo_job *job = calloc(1, sizeof *job);
    if (!job)
        return 2;
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'j': json = 1; break;
        case 'r': root = optarg; break;
        case 'R': reference = 0; break;
        case 'q': quiet = 1; break;
        case 't': job->torch = 1; break;
        case 'p': python = optarg; break;
        case 'n': nproc_arg = optarg; break;
        case 'h': usage(stdout); free(job); return 0;
        default:
            fprintf(stderr, "firebreak demo: unknown option '%s'\n", argv[optind - 1]);
            usage(stderr);
            free(job);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "firebreak demo: unexpected argument '%s'\n", argv[optind]);
        free(job);
        return 2;
    }
    /* The schedules name ranks 0-3 (MPI) and 0-1 (torch). */
    long long min_nproc = job->torch ? 2 : 4;
    nproc = min_nproc;
    if (nproc_arg && fb__parse_int(nproc_arg, min_nproc, 64, &nproc)) {
        fprintf(stderr, "firebreak demo: --nproc: need a number from %lld to 64\n",
                min_nproc);
        free(job);
        return 2;
    }
    if (python && !job->torch) {
        fprintf(stderr, "firebreak demo: --python goes with --torch\n");
        free(job);
        return 2;
    }
    int rc = find_job(job, python ? python : "/usr/bin/python3");
    if (rc) {
        free(job);
        return rc;
    }
    fb__sup_result *res = calloc(2, sizeof *res);
    if (!res) {
        free(job);
        return 2;
    }
    fb__sup_result *ref = &res[1];
    if (!quiet)
        fprintf(stderr, "firebreak demo: training %s%s%s on %lld ranks with faults: %s\n",
                job->program, job->torch ? " " : "", job->script, nproc, job->faults);
    rc = run_job(job, root, "demo", (int)nproc, job->faults, quiet, res);
    if (rc) {
        free(res);
        free(job);
        return 2;
    }
    /* A sha256 in hex from the torch example, 16 hex digits from the MPI one. */
    char hash[128] = "", ref_hash[128] = "", html[PATH_MAX] = "";
    read_hash(res->run_dir, hash, sizeof hash);
    int match = 0;
    if (reference) {
        if (!quiet)
            fprintf(stderr, "\nfirebreak demo: reference run without faults\n");
        rc = run_job(job, root, "demo-reference", (int)nproc, NULL, quiet, ref);
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
    print_summary(job, res, hash, reference ? ref_hash : NULL, match, html);
    if (json) {
        fb__jsonw w;
        fb__jsonw_init(&w);
        fb__jsonw_obj_begin(&w);
        fb__jsonw_kstr(&w, "version", "1.0");
        fb__jsonw_kstr(&w, "trainer", job->torch ? "torch" : "mpi");
        if (job->torch)
            fb__jsonw_kstr(&w, "torch_version", job->torch_version);
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
            fb__cli_cause_json(&w, in);
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
        if (reference) /* no reference run: nothing compared, not "differs" */
            fb__jsonw_kbool(&w, "match", match);
        else {
            fb__jsonw_key(&w, "match");
            fb__jsonw_null(&w);
        }
        fb__jsonw_kstr(&w, "report_html", html[0] ? html : NULL);
        fb__jsonw_obj_end(&w);
        fb__jsonw_print(&w, stdout);
        fb__jsonw_free(&w);
    }
    int ok = res->completed && (!reference || match);
    free(res);
    free(job);
    return ok ? 0 : 1;
}
