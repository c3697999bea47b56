/*
 * sim_model.c -- the simulator's parameters: defaults, the calibrated
 * presets, validation and the few quantities derived from them.
 *
 * Presets:
 *   llama3  Llama 3 Table 5 (REFERENCE.md §1): 419 unexpected interruptions
 *           in 54 days on 16,384 GPUs, grouped into the table's six
 *           categories, plus 47 planned maintenance events.
 *   rsc1    Kokolis et al.: 6.50 failures per 1,000 node-days (8 GPUs a
 *   rsc2    node), 2.34 for RSC-2, split by the Llama 3 category shares.
 * Rates are per GPU and per wall-clock second (see docs/sim.md, "The model",
 * "Failures").
 */
#include "sim/sim.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define DAY_S 86400.0

/* Llama 3 Table 5, counts in 54 days on 16,384 GPUs, by category. */
static const struct {
    const char *name;
    int count;
    int kind;
    int scope;
} llama3_table[] = {
    {"gpu", 268, FB_SIM_CRASH, FB_SIM_SCOPE_NODE},
    {"dependency", 56, FB_SIM_CRASH, FB_SIM_SCOPE_JOB},
    {"network", 35, FB_SIM_CRASH, FB_SIM_SCOPE_JOB},
    {"unplanned_maintenance", 32, FB_SIM_CRASH, FB_SIM_SCOPE_NODE},
    {"host", 21, FB_SIM_CRASH, FB_SIM_SCOPE_NODE},
    {"unknown", 7, FB_SIM_HANG, FB_SIM_SCOPE_JOB},
};
#define LLAMA3_TOTAL 419
#define LLAMA3_PLANNED 47
#define LLAMA3_DAYS 54.0
#define LLAMA3_GPUS 16384.0

const char *const fb__sim_preset_names[] = {"llama3", "rsc1", "rsc2", NULL};

void fb__sim_config_defaults(fb__sim_config *c)
{
    memset(c, 0, sizeof *c);
    c->mtbf_s = 0;
    c->maint_down_s = 600;
    c->gpus = 16384;
    c->gpus_per_node = 8;
    c->horizon_s = 54 * DAY_S;
    c->interval_s = 900;
    c->stall_s = 10;
    c->persist_s = 0;
    c->tiers = 0;
    c->peers = 1;
    c->peer_s = 0;
    c->persist_every = 1;
    c->double_failure = 0;
    c->detect_crash_s = 30;
    c->detect_hang_s = 600;
    c->restart_s = 300;
    c->spares = -1;
    c->repair_s = DAY_S;
    c->drain_repair_s = 3 * DAY_S;
    c->lemon_fraction = 0;
    c->lemon_factor = 1;
    c->drain = 0;
    c->trials = 1000;
    c->seed = 1;
    c->threads = 0;
}

/* Fill the six Llama 3 categories, scaled so that they sum to
 * total_per_gpu_s with the table's shares. */
static void set_llama3_categories(fb__sim_config *c, double total_per_gpu_s)
{
    size_t n = sizeof llama3_table / sizeof llama3_table[0];
    c->ncat = (int)n;
    for (size_t i = 0; i < n; i++) {
        fb__sim_category *k = &c->cat[i];
        memset(k, 0, sizeof *k);
        snprintf(k->name, sizeof k->name, "%s", llama3_table[i].name);
        k->rate_per_gpu_s =
            total_per_gpu_s * llama3_table[i].count / LLAMA3_TOTAL;
        k->kind = llama3_table[i].kind;
        k->scope = llama3_table[i].scope;
    }
}

int fb__sim_preset(fb__sim_config *c, const char *name)
{
    if (strcmp(name, "llama3") == 0) {
        set_llama3_categories(c, LLAMA3_TOTAL /
                                     (LLAMA3_DAYS * DAY_S * LLAMA3_GPUS));
        c->planned_per_job_s = LLAMA3_PLANNED / (LLAMA3_DAYS * DAY_S);
        return 0;
    }
    double per_1000_node_days;
    if (strcmp(name, "rsc1") == 0)
        per_1000_node_days = 6.50;
    else if (strcmp(name, "rsc2") == 0)
        per_1000_node_days = 2.34;
    else
        return -ENOENT;
    /* The paper gives node-days on 8-GPU nodes. */
    set_llama3_categories(c, per_1000_node_days / 1000.0 / 8.0 / DAY_S);
    c->planned_per_job_s = 0;
    return 0;
}

double fb__sim_total_rate(const fb__sim_config *c)
{
    if (c->exponential)
        return c->mtbf_s > 0 ? 1.0 / c->mtbf_s : 0;
    double sum = 0;
    for (int i = 0; i < c->ncat; i++)
        sum += c->cat[i].rate_per_gpu_s * (double)c->gpus +
               c->cat[i].rate_per_job_s;
    return sum;
}

double fb__sim_mean_detect(const fb__sim_config *c)
{
    if (c->exponential)
        return c->detect_crash_s;
    double sum = 0, weighted = 0;
    for (int i = 0; i < c->ncat; i++) {
        double r = c->cat[i].rate_per_gpu_s * (double)c->gpus +
                   c->cat[i].rate_per_job_s;
        sum += r;
        weighted += r * (c->cat[i].kind == FB_SIM_HANG ? c->detect_hang_s
                                                       : c->detect_crash_s);
    }
    return sum > 0 ? weighted / sum : c->detect_crash_s;
}

double fb__sim_floor(const fb__sim_config *c)
{
    if (!c->tiers)
        return c->persist_s;
    double storage = c->persist_every > 0 ? c->persist_s / c->persist_every
                                          : c->persist_s;
    return c->peer_s > storage ? c->peer_s : storage;
}

const char *fb__sim_tier_name(int tier)
{
    static const char *const names[FB_SIM_NTIERS] = {"memory", "peer",
                                                     "storage"};
    return tier >= 0 && tier < FB_SIM_NTIERS ? names[tier] : "?";
}

double fb__sim_persist_time(double bytes_per_gpu, long gpus, double bytes_per_s)
{
    if (bytes_per_s <= 0)
        return INFINITY;
    return bytes_per_gpu * (double)gpus / bytes_per_s;
}

int fb__sim_errf(char *err, size_t size, const char *fmt, ...)
{
    if (err && size) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, size, fmt, ap);
        va_end(ap);
    }
    return -EINVAL;
}

static int nonneg(double v)
{
    return isfinite(v) && v >= 0;
}

/* A duration an option may give: 0 to 100 years.  Longer ones are not a
 * job, and their sums and prints would overflow. */
static int duration(double v)
{
    return nonneg(v) && v <= FB_SIM_MAX_SECONDS;
}

/* An interval below a physical floor: what it is too short for. */
static int too_short(char *err, size_t size, double interval_s,
                     double need_s, const char *takes, const char *never)
{
    return fb__sim_errf(err, size,
                        "--ckpt-interval %.6gs is shorter than the %.6gs it "
                        "takes to %s: %s; use an interval of at least %.6gs",
                        interval_s, need_s, takes, never, need_s);
}

/* The tiers' parameters, and the two physical floors: a peer copy must
 * be complete before the next checkpoint starts one, and a persist before
 * the next checkpoint that goes to storage. */
static int validate_tiers(const fb__sim_config *c, char *err, size_t size)
{
    long nodes = (c->gpus + c->gpus_per_node - 1) / c->gpus_per_node;
    if (c->exponential)
        return fb__sim_errf(err, size,
                            "checkpoint tiers need --failure-model "
                            "categories (the exponential model has no "
                            "nodes)");
    if (c->peers < 1 || c->peers > FB_SIM_MAX_PEERS)
        return fb__sim_errf(err, size, "--peers must be between 1 and %d",
                            FB_SIM_MAX_PEERS);
    if (nodes < (long)c->peers + 1)
        return fb__sim_errf(err, size,
                            "--peers %d needs at least %d nodes; the job "
                            "has %ld",
                            c->peers, c->peers + 1, nodes);
    if (c->persist_every < 1 || c->persist_every > 1000000)
        return fb__sim_errf(err, size,
                            "--persist-every must be between 1 and 1000000");
    if (!duration(c->peer_s))
        return fb__sim_errf(err, size, "--peer-copy must be between 0 and "
                            "100 years");
    for (int i = 0; i < FB_SIM_NTIERS; i++)
        if (!duration(c->restore_s[i]))
            return fb__sim_errf(err, size, "--restore-%s must be between 0 "
                                "and 100 years", fb__sim_tier_name(i));
    if (!nonneg(c->double_failure) || c->double_failure > 1)
        return fb__sim_errf(err, size, "--double-failure must be in [0, 1]");
    if (c->interval_s < c->peer_s)
        return too_short(err, size, c->interval_s, c->peer_s,
                         "copy one checkpoint to its peers",
                         "no peer copy would ever complete");
    if (c->interval_s * c->persist_every < c->persist_s)
        return fb__sim_errf(
            err, size,
            "--ckpt-interval %.6gs x --persist-every %d is shorter than "
            "the %.6gs it takes to persist one checkpoint: no checkpoint "
            "would ever reach storage; use an interval of at least %.6gs "
            "or persist less often",
            c->interval_s, c->persist_every, c->persist_s,
            c->persist_s / c->persist_every);
    return 0;
}

int fb__sim_validate(const fb__sim_config *c, char *err, size_t size)
{
    if (c->gpus < 1 || c->gpus > FB_SIM_MAX_GPUS)
        return fb__sim_errf(err, size, "--gpus must be between 1 and %ld",
                            FB_SIM_MAX_GPUS);
    if (c->gpus_per_node < 1 || c->gpus_per_node > 1024)
        return fb__sim_errf(err, size,
                            "--gpus-per-node must be between 1 and 1024");
    if (!isfinite(c->horizon_s) || c->horizon_s <= 0 ||
        c->horizon_s > 36500 * DAY_S)
        return fb__sim_errf(err, size, "--days must be > 0 and at most 36500");
    if (!isfinite(c->interval_s) || c->interval_s <= 0)
        return fb__sim_errf(err, size,
                            "--ckpt-interval must be greater than zero");
    if (c->interval_s > FB_SIM_MAX_SECONDS)
        return fb__sim_errf(err, size,
                            "--ckpt-interval must be at most 100 years");
    if (!duration(c->stall_s))
        return fb__sim_errf(err, size,
                            "--ckpt-stall must be between 0 and 100 years");
    if (!duration(c->persist_s))
        return fb__sim_errf(err, size,
                            "the persist time (--persist, or "
                            "--ckpt-size-per-gpu x GPUs / "
                            "--storage-bandwidth) must be between 0 and "
                            "100 years");
    if (c->tiers) {
        int rc = validate_tiers(c, err, size);
        if (rc)
            return rc;
    } else if (c->interval_s < c->persist_s)
        return too_short(err, size, c->interval_s, c->persist_s,
                         "persist one checkpoint",
                         "no checkpoint would ever become durable");
    if (!duration(c->restart_s))
        return fb__sim_errf(err, size,
                            "--restart must be between 0 and 100 years");
    if (!duration(c->detect_crash_s))
        return fb__sim_errf(err, size, "--detect-crash (or --detect) must "
                            "be between 0 and 100 years");
    if (!duration(c->detect_hang_s))
        return fb__sim_errf(err, size, "--detect-hang (or --detect) must "
                            "be between 0 and 100 years");
    if (!duration(c->maint_down_s))
        return fb__sim_errf(err, size,
                            "--maint-duration must be between 0 and 100 "
                            "years");
    if (c->spares < -1 || c->spares > 10000000)
        return fb__sim_errf(err, size,
                            "--spares must be between 0 and 10000000");
    if (!duration(c->repair_s) || !duration(c->drain_repair_s))
        return fb__sim_errf(err, size, "--repair and --drain-repair must be "
                            "between 0 and 100 years");
    if (!nonneg(c->lemon_fraction) || c->lemon_fraction > 1)
        return fb__sim_errf(err, size, "--lemon-fraction must be in [0, 1]");
    if (!isfinite(c->lemon_factor) || c->lemon_factor < 1 ||
        c->lemon_factor > 1e6)
        return fb__sim_errf(err, size, "--lemon-factor must be in [1, 1e6]");
    if (c->trials < 1 || c->trials > FB_SIM_MAX_TRIALS)
        return fb__sim_errf(err, size, "--trials must be between 1 and %ld",
                            FB_SIM_MAX_TRIALS);
    if (c->threads < 0 || c->threads > 1024)
        return fb__sim_errf(err, size, "--threads must be between 0 and 1024");
    if (c->exponential) {
        if (!isfinite(c->mtbf_s) || c->mtbf_s <= 0)
            return fb__sim_errf(err, size,
                                "--failure-model exponential needs --mtbf > 0");
        if (c->mtbf_s > FB_SIM_MAX_SECONDS)
            return fb__sim_errf(err, size, "--mtbf must be at most 100 "
                                "years");
    } else {
        if (c->ncat < 1 || c->ncat > FB_SIM_MAX_CATEGORIES)
            return fb__sim_errf(err, size,
                                "no failure categories (use --preset "
                                "or --rates)");
        for (int i = 0; i < c->ncat; i++)
            if (!nonneg(c->cat[i].rate_per_gpu_s) ||
                !nonneg(c->cat[i].rate_per_job_s))
                return fb__sim_errf(err, size,
                                    "rate of category '%s' is negative "
                                    "or not finite",
                                    c->cat[i].name);
        if (!nonneg(c->planned_per_job_s))
            return fb__sim_errf(err, size,
                                "planned maintenance rate must be >= 0");
    }
    /* Each event costs a few tens of nanoseconds; refuse what would run
     * for hours rather than hang. */
    double events =
        (fb__sim_total_rate(c) + c->planned_per_job_s) * c->horizon_s;
    if (!isfinite(events) || events > 1e7)
        return fb__sim_errf(
            err, size,
            "%.3g failures and planned maintenance events per trial "
            "expected: too many to simulate (at most 1e7); lower the "
            "rates (--preset, --rates, --mtbf, --planned-per-day), "
            "--gpus or --days",
            events);
    return 0;
}
