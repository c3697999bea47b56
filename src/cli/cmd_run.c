/*
 * cmd_run.c -- `firebreak run [options] -- CMD ARGS...`: parse options and
 * hand them to the supervisor.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/tier.h"
#include "cli/cli.h"
#include "common/jsonw.h"
#include "common/util.h"
#include "health/nvml.h"
#include "supervisor/supervisor.h"
#include "supervisor/watcher.h"

static void usage(FILE *f)
{
    fprintf(f,
"usage: firebreak run [options] -- CMD [ARGS...]\n"
"\n"
"Launch CMD as a training job, watch every rank, and restart the job from its\n"
"newest complete checkpoint when a rank crashes, hangs or exits with an error.\n"
"\n"
"  --nproc-per-node N     ranks on this node (default 1); or, as torchrun,\n"
"                         gpu (one per visible GPU), cpu (one per CPU),\n"
"                         auto (gpu if there are GPUs, else cpu)\n"
"  --nnodes N             slurm: nodes the job uses (default: the allocation\n"
"                         minus --spare-nodes); 1 with the other launchers;\n"
"                         torchrun's MIN:MAX when MIN = MAX (no elastic range)\n"
"  --master-addr ADDR     MASTER_ADDR for the ranks (default 127.0.0.1; not\n"
"                         with slurm: the first node's address)\n"
"  --master-port PORT     MASTER_PORT for the ranks of every attempt\n"
"                         (default: a free port, new for each attempt)\n"
"  --standalone           torchrun's one-node job: checked (not with slurm or\n"
"                         --nnodes above 1), else nothing to do\n"
"  --node-rank 0          torchrun's: 0 taken on one node; no other value\n"
"                         (a job across nodes is --launcher slurm)\n"
"  --rdzv-backend, --rdzv-endpoint, --rdzv-id, --rdzv-conf V\n"
"                         torchrun's rendezvous: ignored, said on stderr (the\n"
"                         supervisor starts every rank itself)\n"
"  --launcher L           local (default: child processes with torchrun's\n"
"                         environment), mpirun (Open MPI), or slurm (srun\n"
"                         inside an allocation)\n"
"  --max-restarts K       restarts before giving up (default 3)\n"
"  --hang-timeout DUR     no step progress for DUR = hang (default 300s)\n"
"  --startup-timeout DUR  limit for start-up and restore phases (default 600s)\n"
"  --ckpt-timeout DUR     limit for the blocking part of a checkpoint (900s)\n"
"  --attach-timeout DUR   a rank that never calls fb_init within DUR is hung\n"
"                         (default: off; unmodified programs are watched for\n"
"                         exits only)\n"
"  --exit-timeout DUR     a rank still running DUR after fb_finalize (the Python\n"
"                         hooks call it at exit) is hung in its teardown\n"
"                         (default 300s; 0 = no limit)\n"
"  --grace DUR            SIGTERM to SIGKILL when stopping ranks (default 5s;\n"
"                         0 = SIGKILL at once)\n"
"  --crash-loop N         stop when N attempts in a row fail the same way (kind,\n"
"                         exit code or signal) at the same step (default 2;\n"
"                         0 = never)\n"
"  --supervisor-nice N    the supervisor and its shims run N nice steps above\n"
"                         the ranks, where the kernel allows it (root,\n"
"                         CAP_SYS_NICE or RLIMIT_NICE), so that stopping\n"
"                         and relaunching ranks does not wait behind them;\n"
"                         the ranks keep the nice firebreak started with\n"
"                         (default 10; 0: the ranks' own)\n"
"  --supervisor-rt N      from a failure's detection until its ranks are\n"
"                         stopped, the supervisor runs at real-time priority\n"
"                         N (SCHED_FIFO, as chrt -f N), where the kernel\n"
"                         allows it, so that its evidence and the stop's\n"
"                         signals do not wait behind ranks still training;\n"
"                         not for hangs or under slurm (default 1; 0: none)\n"
"  --run-dir DIR          the run directory (default runs/<name>-<time>)\n"
"  --run-root DIR         where default run directories go (default runs)\n"
"  --name NAME            run name (default: the program's name)\n"
"  --ckpt-dir DIR         checkpoints (default <run-dir>/checkpoints)\n"
"  --shared-group GROUP   let GROUP read the run (directories 2750, files\n"
"                         0640); default: private to you (0700, 0600)\n"
"  --persist-every M      checkpoints go to node memory (/dev/shm) first;\n"
"                         every M-th save also to the checkpoint directory\n"
"                         (0: only on SIGUSR1 and at the end of the run)\n"
"  --memory-ckpt-max SIZE cap on node-memory checkpoints (e.g. 64G): oldest\n"
"                         steps evicted first; a save that cannot fit goes\n"
"                         to the checkpoint directory (turns node memory on)\n"
"  --peer-domains SPEC    slurm: failure domains, NODE=DOMAIN,... (e.g.\n"
"                         node1=rack1,node2=rack1,node3=rack2): a node's\n"
"                         peer copy goes to a node of another domain;\n"
"                         'slurm': each node's leaf switch in Slurm's\n"
"                         topology (topology/tree)\n"
"  --peer-copies K        slurm: copies of each node's steps in the memory\n"
"                         of K other nodes (default 1, at most 8 and fewer\n"
"                         than --nnodes; 0: no peer copies; each node then\n"
"                         holds its own steps and K other nodes')\n"
"  --inject SPEC          inject faults, e.g. 'kill:rank=1,step=40' or\n"
"                         'hang:rank=0,after=5s' (repeatable; docs/inject.md)\n"
"  --fr-capacity N        flight-recorder events per rank (default 4096)\n"
"  --no-fr-preload        mpirun: do not preload libfirebreak-mpi.so\n"
"  --no-python-hooks      do not load firebreak's hooks into Python ranks\n"
"                         (default: a rank that imports torch heartbeats per\n"
"                         optimizer step and records its collectives;\n"
"                         docs/pytorch.md, \"Unmodified scripts\")\n"
"  --no-warm-pool         restarts start fresh Python interpreters (default:\n"
"                         one per rank started ahead, torch imported;\n"
"                         docs/supervisor.md, \"Warm pool\")\n"
"  --mpirun PATH          mpirun to use; --mpirun-arg ARG passes ARG to it\n"
"                         (not -np, --host or --output-filename: firebreak's)\n"
"  --spare-nodes N        slurm: nodes held in reserve for restarts\n"
"  --node-timeout DUR     slurm: a node whose watcher says nothing this long\n"
"                         is lost (node_failure; default 10s)\n"
"  --drain                slurm: drain a node found at fault (scontrol)\n"
"  --health-check         slurm: health-check nodes before each launch\n"
"  --on-no-nodes ACTION   slurm: stop (default) or requeue\n"
"  --on-straggler ACTION  a rank that keeps arriving late at collectives:\n"
"                         warn (default: incident, warning, lateness.prom;\n"
"                         no restart) or off (docs/supervisor.md)\n"
"  --console-ranks RANKS  local: also show these ranks' output (stdout and\n"
"                         stderr) on stderr, each line after [rankR]: ('all',\n"
"                         'none', or e.g. '0' or '0,2-3'; default none: the\n"
"                         output goes to logs/rank-R.log only, as always).\n"
"                         --local-ranks-filter is the same (torchrun's name)\n"
"  --kmsg FILE            the kernel log read after a failure for its root\n"
"                         cause (default /dev/kmsg, or FIREBREAK_KMSG; a\n"
"                         file of /dev/kmsg records or dmesg lines; 'none':\n"
"                         not read)\n"
"  --no-incident-health   do not run the health check after a failure\n"
"  --health-root DIR      that health check reads the fixture tree DIR\n"
"                         (as firebreak health --root)\n"
"  --quiet                no progress output\n"
"  --json                 print a summary as one JSON line at the end\n"
"  -h, --help             this help\n"
"\n"
"Durations: 90s, 30m, 1.5h, 250ms or plain seconds; timeouts from 1ms to 30d\n"
"(--grace from 0).  Options may be spelled with underscores, as torchrun's\n"
"(--nproc_per_node=8); a Python script runs as -- python3 train.py (torchrun\n"
"adds the interpreter, firebreak runs the command as given).\n"
"\n"
"Exit status: 0 the program completed, 1 it did not (restarts exhausted,\n"
"crash loop), 2 bad usage, the run or checkpoint directory in use by another\n"
"run, or stdout not writable, 3 the journal could not be written completely\n"
"(e.g. a full disk; said on stderr), 128+N stopped by signal N.\n"
"Everything of a run is in its run directory, private to you unless\n"
"--shared-group: journal.sqlite, checkpoints/, logs/, fr/.\n");
}

/* Timeouts are at most 30 days: beyond that a limit is no limit, and
 * seconds * 1e9 must stay inside a uint64_t of nanoseconds. */
#define MAX_TIMEOUT_S (30.0 * 86400)
/* Ranks in one job. */
#define MAX_WORLD 65536

/* A duration in [lo_s, hi_s]; the message names the option and the bounds. */
static int parse_dur(const char *opt, const char *v, double lo_s, double hi_s,
                     double *out)
{
    int rc = fb__parse_duration_in(v, lo_s, hi_s, out);
    if (rc == 0)
        return 0;
    if (rc == -ERANGE)
        fprintf(stderr, "firebreak run: %s: '%s' is out of range: give a duration "
                "from %s to 30d\n", opt, v, lo_s > 0 ? "1ms" : "0");
    else
        fprintf(stderr, "firebreak run: %s: bad duration '%s' (e.g. 30s, 5m, "
                "1.5h)\n", opt, v);
    return -1;
}

/* A path option given as "" (an unset shell variable): said as that, not
 * as the error of making a directory named "". */
static int nonempty(const char *opt, const char *v)
{
    if (v[0])
        return 0;
    fprintf(stderr, "firebreak run: %s: an empty path (an unset variable?)\n", opt);
    return -1;
}

static int parse_num(const char *opt, const char *v, long long lo, long long hi,
                     int *out)
{
    long long x;
    if (fb__parse_int(v, lo, hi, &x) == 0) {
        *out = (int)x;
        return 0;
    }
    fprintf(stderr, "firebreak run: %s: expected a whole number in [%lld, %lld], "
            "got '%s'\n", opt, lo, hi, v);
    return -1;
}

/* GPUs this process may use, as torch counts them: CUDA_VISIBLE_DEVICES
 * when set (its entries), else NVML's device count.  0 with a reason in
 * why when there are none. */
static int visible_gpus(char *why, size_t size)
{
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    if (cvd) {
        int n = 0;
        for (const char *p = cvd; *p; p += strcspn(p, ","), p += *p == ',')
            n += strcspn(p, ",") > 0;
        if (!n)
            snprintf(why, size, "CUDA_VISIBLE_DEVICES is empty");
        return n;
    }
    fb__nvml *nv;
    char err[256];
    if (fb__nvml_open(&nv, NULL, 1, err, sizeof err)) {
        snprintf(why, size, "%s", err);
        return 0;
    }
    int n = fb__nvml_count(nv);
    fb__nvml_close(nv);
    if (n <= 0)
        snprintf(why, size, "NVML sees no GPU");
    return n > 0 ? n : 0;
}

/* --nproc-per-node: a number, or torchrun's names: cpu (the CPUs this
 * process may run on), gpu (the GPUs it sees: an error when none), auto
 * (gpu when there are any, else cpu). */
static int parse_nproc(const char *v, int *out)
{
    if (strcmp(v, "cpu") && strcmp(v, "gpu") && strcmp(v, "auto"))
        return parse_num("--nproc-per-node", v, 1, 4096, out);
    char why[300] = "";
    int n = strcmp(v, "cpu") ? visible_gpus(why, sizeof why) : 0;
    if (!n && !strcmp(v, "gpu")) {
        fprintf(stderr, "firebreak run: --nproc-per-node gpu: no GPU visible "
                "(%s); give a number, or cpu\n", why);
        return -1;
    }
    if (!n)
        n = fb__usable_cpus();
    *out = n < 1 ? 1 : n > 4096 ? 4096 : n;
    return 0;
}

static int print_json(const fb__sup_result *r)
{
    fb__jsonw w;
    fb__jsonw_init(&w);
    fb__jsonw_obj_begin(&w);
    fb__jsonw_kstr(&w, "version", "1.0");
    fb__jsonw_kbool(&w, "completed", r->completed);
    fb__jsonw_kint(&w, "exit_code", r->exit_code);
    fb__jsonw_kstr(&w, "run_dir", r->run_dir);
    fb__jsonw_kint(&w, "attempts", r->attempts);
    fb__jsonw_kint(&w, "restarts", r->restarts);
    fb__jsonw_kdouble(&w, "wall_s", r->wall_s);
    fb__jsonw_kdouble(&w, "useful_s", r->useful_s);
    if (r->ettr_known)
        fb__jsonw_kdouble(&w, "ettr", r->ettr);
    else
        fb__jsonw_key(&w, "ettr"), fb__jsonw_null(&w);
    fb__jsonw_kint(&w, "last_step", r->last_step);
    fb__jsonw_key(&w, "checkpoint_step");
    if (r->checkpoint_step >= 0)
        fb__jsonw_int(&w, r->checkpoint_step);
    else
        fb__jsonw_null(&w);
    fb__jsonw_kstr(&w, "reason", r->reason);
    fb__jsonw_key(&w, "incidents");
    fb__jsonw_arr_begin(&w);
    for (int i = 0; i < r->nincidents; i++) {
        const fb__sup_incident *in = &r->incidents[i];
        fb__jsonw_obj_begin(&w);
        fb__jsonw_kstr(&w, "kind", in->kind);
        fb__jsonw_kint(&w, "rank", in->rank);
        fb__jsonw_kint(&w, "step", in->step);
        fb__jsonw_kint(&w, "attempt", in->attempt);
        fb__jsonw_kdouble(&w, "detect_ms", in->detect_ms);
        fb__jsonw_kdouble(&w, "lost_s", in->lost_s);
        fb__jsonw_kstr(&w, "detail", in->detail);
        fb__cli_cause_json(&w, in);
        fb__jsonw_obj_end(&w);
    }
    fb__jsonw_arr_end(&w);
    fb__jsonw_key(&w, "journal");
    fb__jsonw_obj_begin(&w);
    fb__jsonw_kbool(&w, "complete", !r->journal_incomplete);
    fb__jsonw_kint(&w, "dropped_rows", (long long)r->journal_dropped_rows);
    fb__jsonw_kint(&w, "dropped_samples", (long long)r->journal_dropped_samples);
    if (r->journal_incomplete)
        fb__jsonw_kstr(&w, "error", r->journal_error);
    else
        fb__jsonw_key(&w, "error"), fb__jsonw_null(&w);
    fb__jsonw_obj_end(&w);
    fb__jsonw_obj_end(&w);
    int rc = fb__jsonw_print(&w, stdout);
    fb__jsonw_free(&w);
    return rc;
}

/* stdout could not be written (a full disk, /dev/full, a closed pipe):
 * say so, exit 2.  A script reading the output must not take silence for
 * an answer. */
static int stdout_failed(const char *what)
{
    int e = errno;
    fprintf(stderr, "firebreak run: cannot write %s to stdout: %s\n", what,
            strerror(e ? e : EIO));
    fb__cli_stdout_said = 1;
    return 2;
}

/* torchrun takes every option with underscores as well as dashes
 * (`--nproc_per_node=8`, `--max_restarts`, `--local_ranks_filter`), and
 * scripts carry them over: rewrite those spellings in place, for the
 * option words before the program only (an option's value, such as an
 * `--mpirun-arg`'s, is left as it is). */
/* The name of a "--name[=value]" word with underscores as dashes, into
 * name: its length, or 0 when ARG is not such a word (or too long). */
static size_t option_name(const char *arg, char *name, size_t size)
{
    if (strncmp(arg, "--", 2))
        return 0;
    size_t len = strcspn(arg + 2, "=");
    if (len == 0 || len >= size)
        return 0;
    for (size_t k = 0; k < len; k++)
        name[k] = arg[2 + k] == '_' ? '-' : arg[2 + k];
    name[len] = '\0';
    return len;
}

static void torchrun_spellings(int argc, char **argv, const struct option *opts)
{
    for (int i = 1; i < argc; i++) {
        char *a = argv[i], name[64];
        if (a[0] != '-' || !strcmp(a, "--"))
            return; /* the program (getopt stops there too: "+") */
        size_t len = option_name(a, name, sizeof name);
        for (const struct option *o = opts; len && o->name; o++) {
            if (strcmp(o->name, name))
                continue;
            if (memchr(a + 2, '_', len))
                memcpy(a + 2, name, len); /* the same length */
            if (o->has_arg == required_argument && !a[2 + len])
                i++; /* its value is the next word */
            break;
        }
    }
}

/* --nnodes: N, or torchrun's MIN:MAX, taken when MIN = MAX.  An elastic
 * range is torchrun's membership that grows and shrinks between restarts;
 * firebreak restarts a job with the size it was given. */
static int parse_nnodes(const char *v, int *out)
{
    const char *colon = strchr(v, ':');
    if (!colon)
        return parse_num("--nnodes", v, 1, 100000, out);
    char min_s[32];
    size_t len = (size_t)(colon - v);
    int min, max;
    if (len >= sizeof min_s)
        len = sizeof min_s - 1; /* too long for a number: refused below */
    memcpy(min_s, v, len);
    min_s[len] = '\0';
    if (parse_num("--nnodes MIN", min_s, 1, 100000, &min) ||
        parse_num("--nnodes MAX", colon + 1, 1, 100000, &max))
        return -1;
    if (min == max) {
        *out = min;
        return 0;
    }
    if (min > max)
        fprintf(stderr, "firebreak run: --nnodes %s: MIN is above MAX\n", v);
    else
        fprintf(stderr, "firebreak run: --nnodes %s: an elastic node count (MIN "
                "below MAX) is not supported: firebreak run keeps a job's size "
                "across restarts (under Slurm --spare-nodes replaces a lost "
                "node); give one number, e.g. --nnodes %d\n", v, max);
    return -1;
}

/* torchrun's options that firebreak run has no use for, and why: said
 * after "unknown option" ("" for any other). */
static const char *torchrun_only(const char *arg)
{
    static const struct { const char *name, *why; } known[] = {
        {"no-python", "; firebreak runs the command as given (put python3 before "
                      "a script yourself)"},
        {"module", "; firebreak runs the command as given: -- python3 -m MODULE"},
        {"tee", "; each rank's output is in the run's logs/; --console-ranks "
                "also shows ranks on the console"},
        {"redirects", "; each rank's output is in the run's logs/; --console-ranks "
                      "also shows ranks on the console"},
        {"log-dir", "; each rank's output is in the run's logs/ (--run-dir sets "
                    "where the run goes)"},
        {"monitor-interval", "; firebreak watches the ranks without polling "
                             "(pidfds): leave it out"},
    };
    char name[32];
    if (!option_name(strcmp(arg, "-m") ? arg : "--module", name, sizeof name))
        return "";
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (!strcmp(name, known[i].name))
            return known[i].why;
    return "";
}

int fb__cmd_run(int argc, char **argv)
{
    enum { O_NPROC = 1000, O_LAUNCHER, O_MAXR, O_HANG, O_STARTUP, O_CKPTT,
           O_ATTACH, O_EXITT, O_GRACE, O_LOOP, O_RUNDIR, O_RUNROOT, O_NAME, O_CKPTDIR,
           O_INJECT, O_FRCAP, O_NOPRELOAD, O_MPIRUN, O_MPIRUNARG, O_SPARE,
           O_DRAIN, O_HEALTH, O_NONODES, O_STRAGGLER, O_QUIET, O_JSON, O_NNODES,
           O_SHGROUP, O_CONSOLE, O_KMSG, O_NOIHEALTH, O_HEALTHROOT, O_NODETIMEOUT,
           O_NOPYHOOKS, O_PERSIST, O_MEMMAX, O_NOWARM, O_PEERDOM,
           O_PEERCOPIES, O_SUPNICE, O_SUPRT, O_MASTERADDR, O_MASTERPORT,
           O_STANDALONE, O_NODERANK, O_RDZV };
    static const struct option longopts[] = {
        {"nproc-per-node", required_argument, 0, O_NPROC},
        {"nproc", required_argument, 0, O_NPROC},
        {"nnodes", required_argument, 0, O_NNODES},
        /* torchrun's, for a command line carried over (docs/supervisor.md,
         * "Options and their bounds") */
        {"master-addr", required_argument, 0, O_MASTERADDR},
        {"master-port", required_argument, 0, O_MASTERPORT},
        {"standalone", no_argument, 0, O_STANDALONE},
        {"node-rank", required_argument, 0, O_NODERANK},
        {"rdzv-backend", required_argument, 0, O_RDZV},
        {"rdzv-endpoint", required_argument, 0, O_RDZV},
        {"rdzv-id", required_argument, 0, O_RDZV},
        {"rdzv-conf", required_argument, 0, O_RDZV},
        {"launcher", required_argument, 0, O_LAUNCHER},
        {"max-restarts", required_argument, 0, O_MAXR},
        {"hang-timeout", required_argument, 0, O_HANG},
        {"startup-timeout", required_argument, 0, O_STARTUP},
        {"ckpt-timeout", required_argument, 0, O_CKPTT},
        {"attach-timeout", required_argument, 0, O_ATTACH},
        {"exit-timeout", required_argument, 0, O_EXITT},
        {"grace", required_argument, 0, O_GRACE},
        {"crash-loop", required_argument, 0, O_LOOP},
        {"supervisor-nice", required_argument, 0, O_SUPNICE},
        {"supervisor-rt", required_argument, 0, O_SUPRT},
        {"run-dir", required_argument, 0, O_RUNDIR},
        {"run-root", required_argument, 0, O_RUNROOT},
        {"name", required_argument, 0, O_NAME},
        {"ckpt-dir", required_argument, 0, O_CKPTDIR},
        {"shared-group", required_argument, 0, O_SHGROUP},
        {"inject", required_argument, 0, O_INJECT},
        {"persist-every", required_argument, 0, O_PERSIST},
        {"memory-ckpt-max", required_argument, 0, O_MEMMAX},
        {"peer-domains", required_argument, 0, O_PEERDOM},
        {"peer-copies", required_argument, 0, O_PEERCOPIES},
        {"fr-capacity", required_argument, 0, O_FRCAP},
        {"no-fr-preload", no_argument, 0, O_NOPRELOAD},
        {"no-python-hooks", no_argument, 0, O_NOPYHOOKS},
        {"no-warm-pool", no_argument, 0, O_NOWARM},
        {"mpirun", required_argument, 0, O_MPIRUN},
        {"mpirun-arg", required_argument, 0, O_MPIRUNARG},
        {"spare-nodes", required_argument, 0, O_SPARE},
        {"node-timeout", required_argument, 0, O_NODETIMEOUT},
        {"drain", no_argument, 0, O_DRAIN},
        {"health-check", no_argument, 0, O_HEALTH},
        {"on-no-nodes", required_argument, 0, O_NONODES},
        {"on-straggler", required_argument, 0, O_STRAGGLER},
        {"console-ranks", required_argument, 0, O_CONSOLE},
        {"local-ranks-filter", required_argument, 0, O_CONSOLE},
        {"kmsg", required_argument, 0, O_KMSG},
        {"no-incident-health", no_argument, 0, O_NOIHEALTH},
        {"health-root", required_argument, 0, O_HEALTHROOT},
        {"quiet", no_argument, 0, O_QUIET},
        {"json", no_argument, 0, O_JSON},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    torchrun_spellings(argc, argv, longopts);
    fb__sup_options o;
    fb__sup_options_init(&o);
    int json = 0;
    char inject[2048] = "";
    char *mpirun_args[64];
    int nmpirun_args = 0;
    /* the first option given that only one launcher acts on */
    const char *slurm_only = NULL, *mpirun_only = NULL;
    int standalone = 0, node_rank = -1; /* -1: not given */
    char rdzv[512] = ""; /* torchrun's rendezvous options given, as given */
    int li = -1;
    optind = 1;
    opterr = 0;
    int c;
    while ((li = -1, c = getopt_long(argc, argv, "+h", longopts, &li)) != -1) {
        int bad = 0;
        switch (c) {
        case 'h':
            usage(stdout);
            errno = 0;
            if (fflush(stdout) || ferror(stdout))
                return stdout_failed("the help");
            return 0;
        case O_NPROC: bad = parse_nproc(optarg, &o.nproc_per_node); break;
        case O_NNODES: bad = parse_nnodes(optarg, &o.nnodes); break;
        case O_MASTERADDR:
            if (!optarg[0] || strlen(optarg) > 253) { /* a DNS name's limit */
                fprintf(stderr, "firebreak run: --master-addr: want a host name or "
                        "address (1 to 253 characters), got '%s'\n", optarg);
                bad = 1;
            }
            o.master_addr = optarg;
            break;
        case O_MASTERPORT: bad = parse_num("--master-port", optarg, 1, 65535, &o.master_port); break;
        case O_STANDALONE: standalone = 1; break;
        case O_NODERANK: bad = parse_num("--node-rank", optarg, 0, 100000, &node_rank); break;
        case O_RDZV: { /* said once, below, when the rest is good */
            size_t l = strlen(rdzv);
            snprintf(rdzv + l, sizeof rdzv - l, "%s--%s %s", l ? " " : "",
                     longopts[li].name, optarg);
            break;
        }
        case O_LAUNCHER: {
            int l = fb__sup_launcher_from_name(optarg);
            if (l < 0) {
                fprintf(stderr, "firebreak run: --launcher: '%s' is not one of "
                        "local, mpirun, slurm\n", optarg);
                bad = 1;
            } else {
                o.launcher = (fb__launcher)l;
            }
            break;
        }
        case O_MAXR: bad = parse_num("--max-restarts", optarg, 0, 1000000, &o.max_restarts); break;
        case O_HANG: bad = parse_dur("--hang-timeout", optarg, 1e-3, MAX_TIMEOUT_S, &o.hang_timeout_s); break;
        case O_STARTUP: bad = parse_dur("--startup-timeout", optarg, 1e-3, MAX_TIMEOUT_S, &o.startup_timeout_s); break;
        case O_CKPTT: bad = parse_dur("--ckpt-timeout", optarg, 1e-3, MAX_TIMEOUT_S, &o.ckpt_timeout_s); break;
        case O_ATTACH: bad = parse_dur("--attach-timeout", optarg, 1e-3, MAX_TIMEOUT_S, &o.attach_timeout_s); break;
        case O_EXITT: bad = parse_dur("--exit-timeout", optarg, 0, MAX_TIMEOUT_S, &o.exit_timeout_s); break;
        case O_GRACE: bad = parse_dur("--grace", optarg, 0, MAX_TIMEOUT_S, &o.grace_s); break;
        case O_LOOP: bad = parse_num("--crash-loop", optarg, 0, 1000, &o.crash_loop); break;
        case O_SUPNICE: bad = parse_num("--supervisor-nice", optarg, 0, 39, &o.sup_nice); break;
        case O_SUPRT: bad = parse_num("--supervisor-rt", optarg, 0, 99, &o.sup_rt); break;
        case O_RUNDIR: bad = nonempty("--run-dir", optarg); o.run_dir = optarg; break;
        case O_RUNROOT: bad = nonempty("--run-root", optarg); o.run_root = optarg; break;
        case O_NAME: o.name = optarg; break;
        case O_CKPTDIR: bad = nonempty("--ckpt-dir", optarg); o.ckpt_dir = optarg; break;
        case O_SHGROUP: o.shared_group = optarg; break;
        case O_PERSIST: bad = parse_num("--persist-every", optarg, 0, 1000000000, &o.persist_every); break;
        case O_MEMMAX:
            /* The ranks' bound (tier.h): 2^63 bytes is 8388608T. */
            if (fb__parse_size(optarg, &o.memory_ckpt_max) || !o.memory_ckpt_max ||
                o.memory_ckpt_max > (uint64_t)FB__CKPT_MEM_MAX_BYTES) {
                fprintf(stderr, "firebreak run: --memory-ckpt-max '%s': want a "
                        "size above 0 and below 8388608T (2^63 bytes), in bytes or "
                        "K, M, G, T, e.g. 64G or 512M\n", optarg);
                bad = 1;
            }
            break;
        case O_INJECT: {
            size_t l = strlen(inject);
            if (l + strlen(optarg) + 2 >= sizeof inject) {
                fprintf(stderr, "firebreak run: --inject: too many faults\n");
                bad = 1;
                break;
            }
            snprintf(inject + l, sizeof inject - l, "%s%s", l ? ";" : "", optarg);
            break;
        }
        case O_FRCAP: bad = parse_num("--fr-capacity", optarg, 16, 1 << 22, &o.fr_capacity); break;
        case O_NOPRELOAD: o.preload_fr = 0; break;
        case O_NOPYHOOKS: o.no_python_hooks = 1; break;
        case O_NOWARM: o.no_warm_pool = 1; break;
        case O_PEERDOM: {
            char dom[64];
            int rc = strcmp(optarg, "slurm") ? fb__peer_domain_of(optarg, "", dom, sizeof dom)
                                             : 0; /* Slurm's topology (slurm.c) */
            if (rc) {
                fprintf(stderr, "firebreak run: --peer-domains '%s': %s (want "
                        "NODE=DOMAIN,..., each domain under 64 bytes, or slurm: "
                        "its switch topology)\n", optarg,
                        strerror(-rc));
                bad = 1;
            }
            o.peer_domains = optarg;
            break;
        }
        case O_PEERCOPIES: { /* fewer than the nodes: checked at the launch */
            int k;
            bad = parse_num("--peer-copies", optarg, 0, FB__PEER_COPIES_MAX, &k);
            o.peer_copies = optarg;
            break;
        }
        case O_MPIRUN: o.mpirun = optarg; break;
        case O_MPIRUNARG:
            if (nmpirun_args == 63) {
                fprintf(stderr, "firebreak run: --mpirun-arg: at most 63\n");
                bad = 1;
                break;
            }
            mpirun_args[nmpirun_args++] = optarg;
            break;
        case O_SPARE: bad = parse_num("--spare-nodes", optarg, 0, 100000, &o.spare_nodes); break;
        case O_NODETIMEOUT: bad = parse_dur("--node-timeout", optarg, 0.5, MAX_TIMEOUT_S, &o.node_timeout_s); break;
        case O_DRAIN: o.drain = 1; break;
        case O_HEALTH: o.health_check = 1; break;
        case O_NONODES: {
            int v = fb__sup_on_no_nodes_from_name(optarg);
            if (v < 0) {
                fprintf(stderr, "firebreak run: --on-no-nodes: '%s' is not stop "
                        "or requeue\n", optarg);
                bad = 1;
            } else {
                o.on_no_nodes = (fb__on_no_nodes)v;
            }
            break;
        }
        case O_STRAGGLER: {
            int v = fb__sup_on_straggler_from_name(optarg);
            if (v < 0) {
                fprintf(stderr, "firebreak run: --on-straggler: '%s' is not warn "
                        "or off\n", optarg);
                bad = 1;
            } else {
                o.on_straggler = (fb__on_straggler)v;
            }
            break;
        }
        case O_CONSOLE:
            if (!fb__sup_rank_spec_valid(optarg)) {
                fprintf(stderr, "firebreak run: --console-ranks '%s': want 'all', "
                        "'none', or ranks and ranges such as '0' or '0,2-3'\n", optarg);
                bad = 1;
            }
            o.console_ranks = optarg;
            break;
        case O_KMSG: o.kmsg_path = optarg; break;
        case O_NOIHEALTH: o.incident_health = 0; break;
        case O_HEALTHROOT: o.health_root = optarg; break;
        case O_QUIET: o.quiet = 1; break;
        case O_JSON: json = 1; break;
        case '?':
        default:
            if (optopt)
                fprintf(stderr, "firebreak run: option needs a value or is unknown: "
                        "'%s'%s\n", argv[optind - 1], torchrun_only(argv[optind - 1]));
            else
                fprintf(stderr, "firebreak run: unknown option '%s'%s\n",
                        argv[optind - 1], torchrun_only(argv[optind - 1]));
            bad = 1;
            break;
        }
        const char *name = li >= 0 ? longopts[li].name : "";
        if (!slurm_only && (c == O_PEERDOM || c == O_PEERCOPIES || c == O_SPARE ||
                            c == O_NODETIMEOUT || c == O_DRAIN || c == O_HEALTH ||
                            c == O_NONODES))
            slurm_only = name;
        if (!mpirun_only && (c == O_NOPRELOAD || c == O_MPIRUN || c == O_MPIRUNARG))
            mpirun_only = name;
        if (bad) {
            fprintf(stderr, "usage: firebreak run [options] -- CMD [ARGS...] "
                    "('firebreak run --help' for more)\n");
            return 2;
        }
    }
    if ((long long)o.nproc_per_node * (o.nnodes > 0 ? o.nnodes : 1) > MAX_WORLD) {
        fprintf(stderr, "firebreak run: --nproc-per-node %d x --nnodes %d is more "
                "than %d ranks\n", o.nproc_per_node, o.nnodes, MAX_WORLD);
        return 2;
    }
    if (o.console_ranks && strcmp(o.console_ranks, "none") &&
        o.launcher != FB__LAUNCH_LOCAL) {
        fprintf(stderr, "firebreak run: --console-ranks is for the local launcher; "
                "with --launcher %s each rank's output is in the run's logs/ "
                "(mpirun writes its own per-rank files there)\n",
                fb__sup_launcher_name(o.launcher));
        return 2;
    }
    /* An option the launcher does not act on would do nothing, silently:
     * --drain without --launcher slurm drains no node. */
    if (slurm_only && o.launcher != FB__LAUNCH_SLURM) {
        fprintf(stderr, "firebreak run: --%s is for --launcher slurm (it acts on "
                "the allocation's nodes); with --launcher %s it would do "
                "nothing\n", slurm_only, fb__sup_launcher_name(o.launcher));
        return 2;
    }
    /* torchrun's "--nnodes=1" is common and harmless; more nodes than
     * this one need a launcher that reaches them. */
    if (o.nnodes > 1 && o.launcher != FB__LAUNCH_SLURM) {
        fprintf(stderr, "firebreak run: --nnodes %d: jobs across nodes run under "
                "--launcher slurm (docs/slurm.md); --launcher %s starts ranks on "
                "this node only (--nproc-per-node for more of them)\n", o.nnodes,
                fb__sup_launcher_name(o.launcher));
        return 2;
    }
    if ((standalone || o.master_addr) && o.launcher == FB__LAUNCH_SLURM) {
        fprintf(stderr, "firebreak run: --%s is not for --launcher slurm: the job "
                "spans the allocation's nodes, and MASTER_ADDR is the first node's "
                "address (docs/slurm.md)\n", standalone ? "standalone" : "master-addr");
        return 2;
    }
    if (standalone && o.nnodes > 1) { /* slurm's, refused above otherwise */
        fprintf(stderr, "firebreak run: --standalone is one node: not with "
                "--nnodes %d\n", o.nnodes);
        return 2;
    }
    if (node_rank == 0 && o.launcher == FB__LAUNCH_SLURM) {
        fprintf(stderr, "firebreak run: --node-rank: with --launcher slurm each "
                "node's rank comes from the allocation (one firebreak run for the "
                "whole job): leave it out\n");
        return 2;
    }
    if (node_rank > 0) {
        fprintf(stderr, "firebreak run: --node-rank %d: firebreak run starts every "
                "rank of a job on this node itself, node 0; a job across nodes is "
                "one firebreak run with --launcher slurm --nnodes N (docs/slurm.md), "
                "not one launcher per node\n", node_rank);
        return 2;
    }
    if (mpirun_only && o.launcher != FB__LAUNCH_MPIRUN &&
        !(o.launcher == FB__LAUNCH_SLURM && o.mpirun)) {
        fprintf(stderr, "firebreak run: --%s is for --launcher mpirun, or slurm "
                "with --mpirun PATH (srun starts the ranks otherwise); with "
                "--launcher %s%s it would do nothing\n", mpirun_only,
                fb__sup_launcher_name(o.launcher),
                o.launcher == FB__LAUNCH_SLURM ? " and no --mpirun" : "");
        return 2;
    }
    if (optind < argc && !strcmp(argv[optind], "--"))
        optind++;
    if (optind >= argc) {
        fprintf(stderr, "firebreak run: no program given\n"
                "usage: firebreak run [options] -- CMD [ARGS...] "
                "('firebreak run --help' for more)\n");
        return 2;
    }
    mpirun_args[nmpirun_args] = NULL;
    o.mpirun_args = mpirun_args;
    o.argv = argv + optind;
    o.account = fb__cli_account;
    if (inject[0])
        o.inject = inject;
    if (rdzv[0])
        fprintf(stderr, "firebreak run: ignored: %s (torchrun's rendezvous: "
                "firebreak run has none; it starts every rank itself and gives "
                "each MASTER_ADDR and MASTER_PORT)\n", rdzv);
    fb__sup_result res;
    if (!o.kmsg_path && getenv("FIREBREAK_KMSG") && *getenv("FIREBREAK_KMSG"))
        o.kmsg_path = getenv("FIREBREAK_KMSG");
    int rc = fb__sup_run(&o, &res);
    if (rc)
        return 2;
    if (json) {
        errno = 0;
        if (print_json(&res) || ferror(stdout))
            return stdout_failed("the --json summary");
    }
    return res.exit_code;
}
