/*
 * cmd_sim.c -- `firebreak sim`: what effective training time would this job
 * keep at 16k or 100k GPUs?  Parses options, builds an fb__sim_config
 * (preset, rates file, or measured costs of a real run), runs the
 * simulator in src/sim/ and prints.  The model is in docs/sim.md.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "common/util.h"
#include "firebreak/firebreak.h"
#include "sim/sim.h"

#define MAX_SWEEP_POINTS 64
#define MAX_RATES_BYTES (1u << 20)
#define DEFAULT_CKPT_BYTES_PER_GPU (2.0 * 1024 * 1024 * 1024)
#define DEFAULT_STORAGE_BYTES_PER_S (2.0 * 1024 * 1024 * 1024 * 1024)
/* A rank's verified restore rate, bench_ckpt in docs/bench.md (1.34 GB/s
 * from a file; from memory it is faster): the default cost of a restore
 * per byte when no run measured one. */
#define DEFAULT_RESTORE_BYTES_PER_S 1.34e9
/* --from-run warns when it stretches a run's bytes or ranks further. */
#define TOY_FACTOR 100.0

static const char usage_text[] =
    "usage: firebreak sim [options] [--json] [--csv] [--sweep gpus=A:B "
    "[--svg FILE]]\n"
    "\n"
    "Monte Carlo of one training job: failures, checkpoints, detection,\n"
    "restarts, spares and maintenance; reports effective training time\n"
    "(ETTR), interruptions by category, where the time went and the best\n"
    "checkpoint interval next to Young's and Daly's.  Durations: 90s, 30m,\n"
    "1.5h, 2d, 250ms.  Sizes: 4G, 512M.  See docs/sim.md.\n"
    "\n"
    "failure model:\n"
    "  --preset NAME            llama3 (default), rsc1, rsc2\n"
    "  --rates FILE             categories from a file (docs/sim.md)\n"
    "  --failure-model M        categories (default) | exponential\n"
    "  --mtbf DUR               exponential: whole-job mean time between "
    "failures\n"
    "  --planned-per-day X      planned maintenance events per day "
    "(llama3: 47/54)\n"
    "  --maint-duration DUR     downtime of one planned maintenance [10m]\n"
    "job:\n"
    "  --gpus N                 GPUs [16384]\n"
    "  --gpus-per-node N        [8]\n"
    "  --days D                 wall-clock days simulated [54]\n"
    "checkpoints:\n"
    "  --ckpt-interval DUR      compute time between checkpoints [15m]\n"
    "  --ckpt-stall DUR         training blocked per checkpoint [10s]\n"
    "  --persist DUR            background time until a checkpoint is "
    "durable\n"
    "  --ckpt-size-per-gpu SIZE   or: persist = size x GPUs / bandwidth "
    "[2G]\n"
    "  --storage-bandwidth RATE   aggregate, e.g. 2T/s [2T/s]\n"
    "checkpoint tiers (any of these turns them on; docs/sim.md):\n"
    "  --tiers                  node memory, k peers' memory, storage\n"
    "  --peers K                copies on K other nodes [1]\n"
    "  --peer-copy DUR          stall end -> peer copies complete\n"
    "  --peer-bandwidth RATE      or: size x GPUs per node x K / RATE\n"
    "  --persist-every M        every M-th checkpoint to storage [1]\n"
    "  --restore-memory DUR     [size / 1.34 GB/s]\n"
    "  --restore-peer DUR       [max(memory, peer copy / K)]\n"
    "  --restore-storage DUR    [max(memory, size x GPUs / bandwidth)]\n"
    "  --double-failure F       share of node failures that take their\n"
    "                           peers' copies too [0]\n"
    "recovery:\n"
    "  --detect DUR             detection latency of crashes and hangs\n"
    "  --detect-crash DUR       [30s]\n"
    "  --detect-hang DUR        [10m]\n"
    "  --restart DUR            relaunch + init + restore [5m]\n"
    "                           (with tiers: without the restore)\n"
    "  --spares N               spare nodes [1% of nodes]\n"
    "  --repair DUR             a failed node is back after [24h]\n"
    "  --drain-repair DUR       a drained node is back after [3d]\n"
    "  --lemon-fraction F       share of nodes that fail more often [0]\n"
    "  --lemon-factor K         how much more often [1]\n"
    "  --drain                  drain a node after its first failure\n"
    "  --from-run RUN_DIR       take stall, persist, detection and restart\n"
    "                           measured by a firebreak run (journal)\n"
    "monte carlo and output:\n"
    "  --trials N               [1000]\n"
    "  --seed S                 [1]\n"
    "  --threads N              [the CPUs it may run on]\n"
    "  --no-search              skip the search for the best interval\n"
    "  --sweep gpus=A:B         doubling from A to B (or gpus=A,B,C)\n"
    "  --svg FILE               plot of the sweep\n"
    "  --csv                    per-trial (or per-point) CSV\n"
    "  --json                   one JSON object on one line, last line\n"
    "Durations up to 100 years.  Long work shows a progress line on stderr;\n"
    "work over 1e11 expected failures and stops (trials x evaluations) is\n"
    "refused, naming what to lower.\n"
    "exit: 0 ok, 2 usage or input error\n";

enum opt_type { T_DUR, T_LONG, T_INT, T_DOUBLE, T_SIZE, T_BW, T_STR, T_FLAG };

typedef struct sim_opts {
    fb__sim_config c;
    const char *preset, *rates, *model, *from_run, *sweep, *svg;
    double detect_s, planned_per_day, days, ckpt_bytes, storage_bw, peer_bw;
    long seed;
    int json, csv, no_search, help;
} sim_opts;

static const struct opt {
    const char *name;
    enum opt_type type;
    size_t offset;
} opts_table[] = {
    {"--preset", T_STR, offsetof(sim_opts, preset)},
    {"--rates", T_STR, offsetof(sim_opts, rates)},
    {"--failure-model", T_STR, offsetof(sim_opts, model)},
    {"--mtbf", T_DUR, offsetof(sim_opts, c.mtbf_s)},
    {"--planned-per-day", T_DOUBLE, offsetof(sim_opts, planned_per_day)},
    {"--maint-duration", T_DUR, offsetof(sim_opts, c.maint_down_s)},
    {"--gpus", T_LONG, offsetof(sim_opts, c.gpus)},
    {"--gpus-per-node", T_INT, offsetof(sim_opts, c.gpus_per_node)},
    {"--days", T_DOUBLE, offsetof(sim_opts, days)},
    {"--ckpt-interval", T_DUR, offsetof(sim_opts, c.interval_s)},
    {"--ckpt-stall", T_DUR, offsetof(sim_opts, c.stall_s)},
    {"--persist", T_DUR, offsetof(sim_opts, c.persist_s)},
    {"--ckpt-size-per-gpu", T_SIZE, offsetof(sim_opts, ckpt_bytes)},
    {"--storage-bandwidth", T_BW, offsetof(sim_opts, storage_bw)},
    {"--tiers", T_FLAG, offsetof(sim_opts, c.tiers)},
    {"--peers", T_INT, offsetof(sim_opts, c.peers)},
    {"--peer-copy", T_DUR, offsetof(sim_opts, c.peer_s)},
    {"--peer-bandwidth", T_BW, offsetof(sim_opts, peer_bw)},
    {"--persist-every", T_INT, offsetof(sim_opts, c.persist_every)},
    {"--restore-memory", T_DUR,
     offsetof(sim_opts, c.restore_s) + FB_SIM_TIER_MEMORY * sizeof(double)},
    {"--restore-peer", T_DUR,
     offsetof(sim_opts, c.restore_s) + FB_SIM_TIER_PEER * sizeof(double)},
    {"--restore-storage", T_DUR,
     offsetof(sim_opts, c.restore_s) + FB_SIM_TIER_STORAGE * sizeof(double)},
    {"--double-failure", T_DOUBLE, offsetof(sim_opts, c.double_failure)},
    {"--detect", T_DUR, offsetof(sim_opts, detect_s)},
    {"--detect-crash", T_DUR, offsetof(sim_opts, c.detect_crash_s)},
    {"--detect-hang", T_DUR, offsetof(sim_opts, c.detect_hang_s)},
    {"--restart", T_DUR, offsetof(sim_opts, c.restart_s)},
    {"--spares", T_LONG, offsetof(sim_opts, c.spares)},
    {"--repair", T_DUR, offsetof(sim_opts, c.repair_s)},
    {"--drain-repair", T_DUR, offsetof(sim_opts, c.drain_repair_s)},
    {"--lemon-fraction", T_DOUBLE, offsetof(sim_opts, c.lemon_fraction)},
    {"--lemon-factor", T_DOUBLE, offsetof(sim_opts, c.lemon_factor)},
    {"--drain", T_FLAG, offsetof(sim_opts, c.drain)},
    {"--from-run", T_STR, offsetof(sim_opts, from_run)},
    {"--trials", T_LONG, offsetof(sim_opts, c.trials)},
    {"--seed", T_LONG, offsetof(sim_opts, seed)},
    {"--threads", T_INT, offsetof(sim_opts, c.threads)},
    {"--no-search", T_FLAG, offsetof(sim_opts, no_search)},
    {"--sweep", T_STR, offsetof(sim_opts, sweep)},
    {"--svg", T_STR, offsetof(sim_opts, svg)},
    {"--csv", T_FLAG, offsetof(sim_opts, csv)},
    {"--json", T_FLAG, offsetof(sim_opts, json)},
    {"--help", T_FLAG, offsetof(sim_opts, help)},
};
#define NOPTS (sizeof opts_table / sizeof opts_table[0])

static int bad(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The message quotes arguments and rates-file text: control bytes are
 * written as '?' so a file cannot drive the terminal. */
static int bad(const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "firebreak sim: %s\n", fb__safe_text(msg, sizeof msg, msg));
    return 2;
}

/* "2T/s", "500G", "1.5T/s": bytes per second (binary multiples). */
static int parse_bandwidth(const char *s, double *out)
{
    char buf[64];
    size_t n = strlen(s);
    if (n == 0 || n >= sizeof buf)
        return -EINVAL;
    memcpy(buf, s, n + 1);
    if (n > 2 && strcmp(buf + n - 2, "/s") == 0)
        buf[n - 2] = '\0';
    uint64_t v;
    if (fb__parse_size(buf, &v) || v == 0)
        return -EINVAL;
    *out = (double)v;
    return 0;
}

static int set_option(sim_opts *o, const struct opt *op, const char *arg)
{
    char *p = (char *)o + op->offset;
    long long ll;
    uint64_t u64;
    char *end;
    switch (op->type) {
    case T_STR:
        *(const char **)(void *)p = arg;
        return 0;
    case T_FLAG:
        *(int *)(void *)p = 1;
        return 0;
    case T_DUR:
        return fb__parse_duration(arg, (double *)(void *)p);
    case T_LONG:
        if (fb__parse_int(arg, -1, 1LL << 53, &ll))
            return -EINVAL;
        *(long *)(void *)p = (long)ll;
        return 0;
    case T_INT:
        if (fb__parse_int(arg, 0, 1 << 30, &ll))
            return -EINVAL;
        *(int *)(void *)p = (int)ll;
        return 0;
    case T_DOUBLE:
        errno = 0;
        *(double *)(void *)p = strtod(arg, &end);
        if (end == arg || *end || errno || !isfinite(*(double *)(void *)p))
            return -EINVAL;
        return 0;
    case T_SIZE:
        if (fb__parse_size(arg, &u64))
            return -EINVAL;
        *(double *)(void *)p = (double)u64;
        return 0;
    case T_BW:
        return parse_bandwidth(arg, (double *)(void *)p);
    }
    return -EINVAL;
}

/* Which options were given, by index in opts_table. */
typedef struct given {
    unsigned char v[NOPTS];
} given;

static int was_given(const given *g, const char *name)
{
    for (size_t i = 0; i < NOPTS; i++)
        if (strcmp(opts_table[i].name, name) == 0)
            return g->v[i];
    return 0;
}

static int parse_args(sim_opts *o, given *g, int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *eq = strchr(a, '=');
        size_t name_len = eq && a[0] == '-' ? (size_t)(eq - a) : strlen(a);
        size_t k;
        for (k = 0; k < NOPTS; k++)
            if (strlen(opts_table[k].name) == name_len &&
                strncmp(opts_table[k].name, a, name_len) == 0)
                break;
        if (k == NOPTS) {
            if (strcmp(a, "-h") == 0) {
                o->help = 1;
                continue;
            }
            return bad("unknown option '%s' (see firebreak sim --help)", a);
        }
        const struct opt *op = &opts_table[k];
        const char *arg = NULL;
        if (op->type == T_FLAG) {
            if (eq && a[0] == '-')
                return bad("%s takes no value", op->name);
        } else if (eq && a[0] == '-') {
            arg = eq + 1;
        } else if (i + 1 < argc) {
            arg = argv[++i];
        } else {
            return bad("%s needs a value", op->name);
        }
        if (op->type == T_STR && !arg[0])
            /* --from-run "" read /journal.sqlite */
            return bad("%s needs a value, not an empty string", op->name);
        if (set_option(o, op, arg))
            return bad("bad value '%s' for %s", arg, op->name);
        g->v[k] = 1;
    }
    return 0;
}

/* gpus=A:B (doubling, B included) or gpus=A,B,C. */
static int parse_sweep(const char *spec, long *gpus, int *n)
{
    if (strncmp(spec, "gpus=", 5) != 0)
        return -EINVAL;
    const char *s = spec + 5;
    char *end;
    *n = 0;
    /* Every count is digits only: strtol alone took "8," and " +8". */
    if (strchr(s, ':')) {
        errno = 0;
        long a = isdigit((unsigned char)*s) ? strtol(s, &end, 10) : -1;
        if (a < 0 || errno || *end != ':')
            return -EINVAL;
        const char *t = end + 1;
        long b = isdigit((unsigned char)*t) ? strtol(t, &end, 10) : -1;
        if (b < 0 || errno || *end || a < 1 || b < a ||
            b > FB_SIM_MAX_GPUS)
            return -EINVAL;
        for (long x = a; x < b && *n < MAX_SWEEP_POINTS - 1; x *= 2)
            gpus[(*n)++] = x;
        gpus[(*n)++] = b;
        return 0;
    }
    for (;;) {
        errno = 0;
        long x = isdigit((unsigned char)*s) ? strtol(s, &end, 10) : -1;
        if (x < 1 || errno || x > FB_SIM_MAX_GPUS ||
            *n == MAX_SWEEP_POINTS || (*end && *end != ',') ||
            (*n > 0 && x <= gpus[*n - 1]))
            return -EINVAL;
        gpus[(*n)++] = x;
        if (!*end)
            break;
        s = end + 1; /* after a comma, another count */
    }
    return *n ? 0 : -EINVAL;
}

static void fmt_bytes(double b, char *buf, size_t size)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB",
                                        "PiB"};
    int u = 0;
    while (b >= 1024 && u < 5) {
        b /= 1024;
        u++;
    }
    snprintf(buf, size, "%.4g %s", b, units[u]);
}

/* How the persist time is decided: given, measured, or derived. */
typedef struct persist_rule {
    int derived;              /* recompute for every GPU count */
    double bytes_per_gpu, bytes_per_s;
    char from[160];
} persist_rule;

static void apply_persist(fb__sim_config *c, const persist_rule *pr)
{
    if (pr->derived)
        c->persist_s = fb__sim_persist_time(pr->bytes_per_gpu, c->gpus,
                                            pr->bytes_per_s);
}

/* How the tier costs are decided at each GPU count: given, scaled from a
 * rate per rank (measured by a run, or the default), or derived from the
 * links they cross. */
typedef struct tier_rule {
    int peer_derived;                  /* K x size x GPUs a node / bw   */
    double peer_bw;
    int given[FB_SIM_NTIERS];          /* --restore-TIER                */
    double bps[FB_SIM_NTIERS];         /* bytes/s a rank restores        */
    int measured[FB_SIM_NTIERS];
    char from[768];
} tier_rule;

/* Restore times not given: size / rate per rank, and no faster than the
 * link the bytes cross (one copy back over the node's link for a peer;
 * every node's bytes through the shared storage for storage). */
static void apply_tiers(fb__sim_config *c, const persist_rule *pr,
                        const tier_rule *tr)
{
    if (!c->tiers)
        return;
    double b = pr->bytes_per_gpu;
    if (tr->peer_derived)
        c->peer_s = c->peers * b * c->gpus_per_node / tr->peer_bw;
    double t[FB_SIM_NTIERS];
    for (int i = 0; i < FB_SIM_NTIERS; i++)
        t[i] = b / tr->bps[i];
    t[FB_SIM_TIER_PEER] = fmax(t[FB_SIM_TIER_PEER], c->peer_s / c->peers);
    t[FB_SIM_TIER_STORAGE] =
        fmax(t[FB_SIM_TIER_STORAGE],
             fb__sim_persist_time(b, c->gpus, pr->bytes_per_s));
    for (int i = 0; i < FB_SIM_NTIERS; i++)
        if (!tr->given[i])
            c->restore_s[i] = t[i];
}

static int load_rates(fb__sim_config *c, const char *path)
{
    char *text = NULL;
    size_t len = 0;
    int rc = fb__read_file(path, MAX_RATES_BYTES, &text, &len);
    if (rc)
        return bad("--rates %s: cannot read: %s", path,
                   rc == FB_ETOOBIG ? "larger than 1 MiB" : fb_strerror(rc));
    char err[256];
    rc = fb__sim_parse_rates(c, text, len, err, sizeof err);
    free(text);
    if (rc)
        return bad("--rates %s: %s", path, err);
    return 0;
}

/* Costs measured by a real run fill what the user did not say. */
static int apply_run(sim_opts *o, const given *g, persist_rule *pr,
                     tier_rule *tr, char *warning, size_t warning_size,
                     char *source, size_t source_size)
{
    fb__sim_measured m;
    char err[256];
    if (fb__sim_read_run(o->from_run, &m, err, sizeof err))
        return bad("--from-run %s: %s", o->from_run, err);
    fb__sim_config *c = &o->c;
    if (m.stall_s >= 0 && !was_given(g, "--ckpt-stall"))
        c->stall_s = m.stall_s;
    if (m.persist_s >= 0 && !c->exponential && !was_given(g, "--persist") &&
        !was_given(g, "--ckpt-size-per-gpu") &&
        !was_given(g, "--storage-bandwidth")) {
        c->persist_s = m.persist_s;
        pr->derived = 0;
        snprintf(pr->from, sizeof pr->from, "measured by the run");
    }
    if (m.interval_s > 0 && !was_given(g, "--ckpt-interval"))
        c->interval_s = m.interval_s;
    if (!was_given(g, "--detect")) {
        if (m.detect_crash_s >= 0 && !was_given(g, "--detect-crash"))
            c->detect_crash_s = m.detect_crash_s;
        if (m.detect_hang_s >= 0 && !was_given(g, "--detect-hang"))
            c->detect_hang_s = m.detect_hang_s;
    }
    if (m.restart_s >= 0 && !was_given(g, "--restart")) {
        c->restart_s = m.restart_s;
        /* With tiers the restore is counted apart, by tier. */
        if (c->tiers && m.restore_s > 0)
            c->restart_s = fmax(0, m.restart_s - m.restore_s);
    }
    for (int i = 0; i < FB_SIM_NTIERS; i++)
        if (m.restore_bps[i] > 0) {
            tr->bps[i] = m.restore_bps[i];
            tr->measured[i] = 1;
        }
    /* A toy run's costs stretched to a large job: say so. */
    double bytes_x = m.bytes_per_rank > 0 ? pr->bytes_per_gpu /
                                                m.bytes_per_rank : 0;
    double ranks_x = m.gpus > 0 ? (double)c->gpus / (double)m.gpus : 0;
    if (bytes_x > TOY_FACTOR || ranks_x > TOY_FACTOR) {
        char rb[64], tb[32], bx[32] = "";
        if (m.bytes_per_rank > 0) {
            char b[32];
            fmt_bytes(m.bytes_per_rank, b, sizeof b);
            snprintf(rb, sizeof rb, "with %s of checkpoint each", b);
            snprintf(bx, sizeof bx, "x%.3g bytes, ", bytes_x);
        } else { /* no restore in the run: the size was not measured */
            snprintf(rb, sizeof rb, "whose checkpoint size it did not measure");
        }
        fmt_bytes(pr->bytes_per_gpu, tb, sizeof tb);
        snprintf(warning, warning_size,
                 "--from-run extrapolates from a toy-sized run: %ld ranks "
                 "%s, projected to %ld GPUs with %s each (%sx%.3g ranks); the "
                 "measured costs are scaled linearly and may not hold at that "
                 "size", m.gpus, rb, c->gpus, tb, bx, ranks_x);
    }
    size_t n = strlen(source);
    snprintf(source + n, source_size - n,
             ", costs measured by run %s (%ld ranks: %lld checkpoints, %lld "
             "detections, %lld restarts; rank restores from memory %lld, "
             "peer %lld, storage %lld)",
             o->from_run, m.gpus, (long long)m.samples_stall,
             (long long)m.samples_detect, (long long)m.samples_restart,
             (long long)m.samples_restore[FB_SIM_TIER_MEMORY],
             (long long)m.samples_restore[FB_SIM_TIER_PEER],
             (long long)m.samples_restore[FB_SIM_TIER_STORAGE]);
    return 0;
}

static const char *const tier_options[] = {
    "--tiers", "--peers", "--peer-copy", "--peer-bandwidth",
    "--persist-every", "--restore-memory", "--restore-peer",
    "--restore-storage", "--double-failure"};

/* Say where each tier cost comes from (the JSON's assumptions). */
static void describe_tiers(const sim_opts *o, const persist_rule *pr,
                           tier_rule *tr)
{
    char sz[32], bw[32];
    size_t n = 0;
    fmt_bytes(pr->bytes_per_gpu, sz, sizeof sz);
    if (tr->peer_derived) {
        fmt_bytes(tr->peer_bw, bw, sizeof bw);
        n += (size_t)snprintf(tr->from + n, sizeof tr->from - n,
                              "peer copy: %d x %s x %d GPUs a node at %s/s "
                              "a node",
                              o->c.peers, sz, o->c.gpus_per_node, bw);
    } else {
        n += (size_t)snprintf(tr->from + n, sizeof tr->from - n,
                              "peer copy: given");
    }
    for (int i = 0; i < FB_SIM_NTIERS && n < sizeof tr->from; i++) {
        const char *name = fb__sim_tier_name(i);
        if (tr->given[i]) {
            n += (size_t)snprintf(tr->from + n, sizeof tr->from - n,
                                  "; %s restore: given", name);
            continue;
        }
        char rate[32];
        fmt_bytes(tr->bps[i], rate, sizeof rate);
        n += (size_t)snprintf(
            tr->from + n, sizeof tr->from - n, "; %s restore: %s at %s/s a "
            "rank (%s)%s", name, sz, rate,
            tr->measured[i] ? "measured by the run"
                            : "default: bench_ckpt's verified restore",
            i == FB_SIM_TIER_PEER      ? ", at least one copy back over "
                                         "the node's link"
            : i == FB_SIM_TIER_STORAGE ? ", at least every GPU's bytes "
                                         "at the storage bandwidth"
                                       : "");
    }
}

/* Turn parsed options into a config.  Returns 0 or an exit code. */
static int build_config(sim_opts *o, const given *g, persist_rule *pr,
                        tier_rule *tr, char *warning, size_t warning_size,
                        char *source, size_t source_size)
{
    fb__sim_config *c = &o->c;
    int rc;
    if (o->model && strcmp(o->model, "exponential") == 0) {
        c->exponential = 1;
        if (o->preset || o->rates)
            return bad("--failure-model exponential replaces --preset and "
                       "--rates; give only one");
        if (!was_given(g, "--mtbf"))
            return bad("--failure-model exponential needs --mtbf DUR");
        /* The model-checking mode has none of these effects; refuse them
         * rather than ignore them. */
        static const char *const off[] = {
            "--planned-per-day", "--maint-duration", "--spares", "--repair",
            "--drain-repair", "--lemon-fraction", "--lemon-factor",
            "--drain", "--detect-hang", "--persist", "--ckpt-size-per-gpu",
            "--storage-bandwidth"};
        for (size_t i = 0; i < sizeof off / sizeof off[0]; i++)
            if (was_given(g, off[i]))
                return bad("%s has no effect with --failure-model "
                           "exponential (one failure process, nothing "
                           "else)", off[i]);
        snprintf(source, source_size, "exponential model");
    } else if (o->model && strcmp(o->model, "categories") != 0) {
        return bad("unknown --failure-model '%s' (want categories or "
                   "exponential)", o->model);
    } else if (o->rates) {
        if (o->preset)
            return bad("give --preset or --rates, not both");
        if ((rc = load_rates(c, o->rates)))
            return rc;
        snprintf(source, source_size, "rates %s", o->rates);
    } else {
        const char *name = o->preset ? o->preset : "llama3";
        if (fb__sim_preset(c, name)) {
            char list[128] = "";
            for (int i = 0; fb__sim_preset_names[i]; i++) {
                strncat(list, i ? ", " : "", sizeof list - strlen(list) - 1);
                strncat(list, fb__sim_preset_names[i],
                        sizeof list - strlen(list) - 1);
            }
            return bad("unknown --preset '%s' (known: %s)", name, list);
        }
        snprintf(source, source_size, "preset %s", name);
    }
    if (was_given(g, "--mtbf") && !c->exponential)
        return bad("--mtbf needs --failure-model exponential");
    if (was_given(g, "--days")) {
        if (!(o->days > 0))
            return bad("--days must be greater than zero");
        c->horizon_s = o->days * 86400.0;
    }
    if (was_given(g, "--planned-per-day")) {
        if (!(o->planned_per_day >= 0) || o->planned_per_day > 86400)
            return bad("--planned-per-day must be between 0 and 86400 "
                       "(one a second)");
        c->planned_per_job_s = o->planned_per_day / 86400.0;
    }
    if (was_given(g, "--detect"))
        c->detect_crash_s = c->detect_hang_s = o->detect_s;
    if (was_given(g, "--seed")) {
        if (o->seed < 0)
            return bad("--seed must be >= 0");
        c->seed = (uint64_t)o->seed;
    }
    if (was_given(g, "--spares") && c->spares < 0)
        return bad("--spares must be >= 0");

    /* Persist time: given, or size x GPUs / bandwidth.  The model-checking
     * mode assumes none unless told. */
    int sized = was_given(g, "--ckpt-size-per-gpu") ||
                was_given(g, "--storage-bandwidth");
    pr->bytes_per_gpu = sized && was_given(g, "--ckpt-size-per-gpu")
                            ? o->ckpt_bytes
                            : DEFAULT_CKPT_BYTES_PER_GPU;
    pr->bytes_per_s = sized && was_given(g, "--storage-bandwidth")
                          ? o->storage_bw
                          : DEFAULT_STORAGE_BYTES_PER_S;
    if (was_given(g, "--persist")) {
        if (sized)
            return bad("give --persist or --ckpt-size-per-gpu/"
                       "--storage-bandwidth, not both");
        pr->derived = 0;
        snprintf(pr->from, sizeof pr->from, "given");
    } else if (c->exponential) {
        /* A checkpoint is durable at the end of its stall (no persist). */
        pr->derived = 0;
        c->persist_s = 0;
        snprintf(pr->from, sizeof pr->from, "none");
    } else {
        pr->derived = 1;
        char sz[32], bw[32];
        fmt_bytes(pr->bytes_per_gpu, sz, sizeof sz);
        fmt_bytes(pr->bytes_per_s, bw, sizeof bw);
        snprintf(pr->from, sizeof pr->from,
                 "%s per GPU at %s/s aggregate", sz, bw);
    }
    for (size_t i = 0; i < sizeof tier_options / sizeof tier_options[0];
         i++)
        if (was_given(g, tier_options[i]))
            c->tiers = 1;
    if (c->tiers) {
        if (c->exponential)
            return bad("checkpoint tiers need --failure-model categories "
                       "(the exponential model has no nodes)");
        if (was_given(g, "--peer-copy") && was_given(g, "--peer-bandwidth"))
            return bad("give --peer-copy or --peer-bandwidth, not both");
        if (!was_given(g, "--peer-copy") && !was_given(g, "--peer-bandwidth"))
            return bad("checkpoint tiers need the peer copy's time: "
                       "--peer-copy DUR, or --peer-bandwidth RATE (what one "
                       "node sends to its peers per second)");
        tr->peer_derived = was_given(g, "--peer-bandwidth");
        tr->peer_bw = o->peer_bw;
        static const char *const restore_opt[FB_SIM_NTIERS] = {
            "--restore-memory", "--restore-peer", "--restore-storage"};
        for (int i = 0; i < FB_SIM_NTIERS; i++) {
            tr->given[i] = was_given(g, restore_opt[i]);
            tr->bps[i] = DEFAULT_RESTORE_BYTES_PER_S;
        }
    }
    if (o->from_run &&
        (rc = apply_run(o, g, pr, tr, warning, warning_size, source,
                        source_size)))
        return rc;
    if (c->tiers)
        describe_tiers(o, pr, tr);
    apply_persist(c, pr);
    apply_tiers(c, pr, tr);
    return 0;
}

/* Refuse what would run for hours (the work grows with trials x events
 * per trial x evaluations), naming what to lower. */
static int check_work(const sim_opts *o, const persist_rule *pr,
                      const tier_rule *tr, double *total)
{
    double events = 0;
    if (o->sweep) {
        long gpus[MAX_SWEEP_POINTS];
        int n;
        if (parse_sweep(o->sweep, gpus, &n))
            return 0; /* run_sweep says what is wrong */
        for (int i = 0; i < n; i++) {
            fb__sim_config c = o->c;
            c.gpus = gpus[i];
            apply_persist(&c, pr);
            apply_tiers(&c, pr, tr);
            /* at the given interval, then at the best one */
            events += 2 * fb__sim_expected_events(&c, 0);
        }
    } else {
        events = fb__sim_expected_events(&o->c, !o->no_search);
    }
    *total = events;
    if (events <= FB_SIM_MAX_EVENTS)
        return 0;
    return bad("about %.3g failures and planned stops to simulate in all "
               "(--trials %ld%s): more than %.0e, hours of work; lower "
               "--trials, --days or --gpus%s",
               events, o->c.trials,
               o->sweep ? " at every --sweep point, twice"
               : o->no_search ? "" : ", and the interval search",
               FB_SIM_MAX_EVENTS,
               o->sweep || o->no_search ? "" : ", or add --no-search");
}

static int run_single(sim_opts *o, const char *source,
                      const persist_rule *pr, const tier_rule *tr,
                      const char *warning)
{
    fb__sim_result r;
    fb__sim_optimum opt;
    int rc = fb__sim_run(&o->c, o->csv, &r);
    if (rc)
        return bad("simulation failed: %s", strerror(-rc));
    if (!o->no_search)
        rc = fb__sim_optimize(&o->c, &opt);
    fb__sim_progress_end(o->c.progress); /* before any line below */
    if (rc) {
        fb__sim_result_free(&r);
        return bad("interval search failed: %s", strerror(-rc));
    }
    fb__sim_report rep = {&o->c, source, pr->from, &r,
                         o->no_search ? NULL : &opt, tr->from,
                         warning[0] ? warning : NULL};
    if (o->csv)
        fb__sim_print_csv(stdout, &rep);
    if (o->json)
        rc = fb__sim_print_json(stdout, &rep);
    else if (!o->csv)
        fb__sim_print_text(stdout, &rep);
    fb__sim_result_free(&r);
    if (rc) /* main() names a failed write to stdout */
        return ferror(stdout) ? 2 : bad("cannot write output: %s",
                                        strerror(-rc));
    return 0;
}

static int run_sweep(sim_opts *o, const char *source, const persist_rule *pr,
                     const tier_rule *tr)
{
    long gpus[MAX_SWEEP_POINTS];
    int n;
    if (parse_sweep(o->sweep, gpus, &n))
        return bad("bad --sweep '%s' (want gpus=A:B or gpus=A,B,C with "
                   "increasing counts)", o->sweep);
    fb__sim_point *pts = calloc((size_t)n, sizeof *pts);
    if (!pts)
        return bad("out of memory");
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        fb__sim_point *p = &pts[i];
        fb__sim_config c = o->c;
        c.gpus = gpus[i];
        apply_persist(&c, pr);
        apply_tiers(&c, pr, tr);
        p->gpus = c.gpus;
        p->persist_s = c.persist_s;
        double rate = fb__sim_total_rate(&c);
        double mttf = rate > 0 ? 1 / rate : INFINITY;
        p->young_s = fb__sim_young(c.stall_s, mttf);
        p->daly_s = fb__sim_daly(c.stall_s,
                                 c.restart_s + fb__sim_mean_detect(&c), mttf);
        char err[256];
        p->feasible = 1;
        if (c.interval_s < fb__sim_floor(&c)) {
            p->feasible = 0;
            char iv[32], ps[32];
            fb__sim_fmt_duration(c.interval_s, iv, sizeof iv);
            fb__sim_fmt_duration(fb__sim_floor(&c), ps, sizeof ps);
            snprintf(p->why, sizeof p->why,
                     "impossible: interval %s < %s time %s", iv,
                     c.tiers ? "peer copy or persist" : "persist", ps);
        } else if (fb__sim_validate(&c, err, sizeof err)) {
            rc = bad("at %ld GPUs: %s", c.gpus, err);
            break;
        } else if ((rc = fb__sim_run(&c, 0, &p->r))) {
            rc = bad("simulation failed: %s", strerror(-rc));
            break;
        }
        p->best_interval_s = isfinite(p->daly_s) ? p->daly_s : c.horizon_s;
        if (p->best_interval_s < fb__sim_floor(&c))
            p->best_interval_s = fb__sim_floor(&c);
        if (p->best_interval_s <= 0)
            p->best_interval_s = 1;
        c.interval_s = p->best_interval_s;
        if (fb__sim_validate(&c, err, sizeof err)) {
            rc = bad("at %ld GPUs: %s", c.gpus, err);
            break;
        }
        if ((rc = fb__sim_mean_ettr(&c, &p->ettr_at_best)))
            rc = bad("simulation failed: %s", strerror(-rc));
    }
    fb__sim_progress_end(o->c.progress); /* before any line below */
    if (!rc && o->svg) {
        int wrc = fb__sim_write_svg(o->svg, &o->c, source, pts, n);
        if (wrc)
            rc = bad("--svg %s: %s", o->svg, strerror(-wrc));
    }
    if (!rc) {
        if (o->csv)
            fb__sim_print_sweep_csv(stdout, pts, n);
        if (o->json) {
            if (fb__sim_print_sweep_json(stdout, &o->c, source, pts, n))
                rc = ferror(stdout) ? 2 : bad("cannot write output");
        } else if (!o->csv) {
            printf("firebreak sim --sweep: %s, %.4g days, %ld trials, "
                   "seed %llu\n\n",
                   source, o->c.horizon_s / 86400.0, o->c.trials,
                   (unsigned long long)o->c.seed);
            fb__sim_print_sweep_text(stdout, &o->c, pts, n);
            if (o->svg)
                printf("\nplot: %s\n", o->svg);
        }
    }
    free(pts);
    return rc;
}

int fb__cmd_sim(int argc, char **argv)
{
    sim_opts o;
    given g;
    memset(&o, 0, sizeof o);
    memset(&g, 0, sizeof g);
    fb__sim_config_defaults(&o.c);
    int rc = parse_args(&o, &g, argc, argv);
    if (rc)
        return rc;
    if (o.help) {
        fputs(usage_text, stdout);
        return 0;
    }
    if (o.svg && !o.sweep)
        return bad("--svg plots a sweep: add --sweep gpus=A:B");
    char source[1024], warning[512] = "";
    persist_rule pr;
    tier_rule tr;
    memset(&pr, 0, sizeof pr);
    memset(&tr, 0, sizeof tr);
    if ((rc = build_config(&o, &g, &pr, &tr, warning, sizeof warning, source,
                           sizeof source)))
        return rc;
    if (warning[0])
        fprintf(stderr, "firebreak sim: warning: %s\n", warning);
    char err[512];
    /* A sweep judges feasibility point by point; validate the rest. */
    fb__sim_config check = o.c;
    if (o.sweep && check.interval_s < fb__sim_floor(&check))
        check.persist_s = check.peer_s = 0;
    if (fb__sim_validate(&check, err, sizeof err)) {
        if (check.interval_s * (check.tiers ? check.persist_every : 1) <
            check.persist_s)
            return bad("%s (persist time: %s)", err, pr.from);
        return bad("%s", err);
    }
    fb__sim_progress progress = {.start_ns = fb__now_ns(),
                                 .on_tty = fb__isatty(2)};
    if ((rc = check_work(&o, &pr, &tr, &progress.total)))
        return rc;
    o.c.progress = &progress;
    rc = o.sweep ? run_sweep(&o, source, &pr, &tr)
                 : run_single(&o, source, &pr, &tr, warning);
    fb__sim_progress_end(&progress);
    return rc;
}
