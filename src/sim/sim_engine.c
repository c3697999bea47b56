/*
 * sim_engine.c -- one Monte Carlo trial, and many of them on threads.
 *
 * A trial walks the wall clock from one event to the next; nothing is
 * stepped in time.  The events are failures (a Poisson process whose rate
 * changes only when a lemon node is drained), planned maintenance (evenly
 * spaced with a random phase) and the end of the horizon.  Between two
 * events the job is either running or down:
 *
 *   running   cycles of [compute interval][blocking stall], the checkpoint
 *             persisting in the background for persist_s after its stall;
 *             a running stretch is accounted in closed form (segment()),
 *             so the cost of a trial is proportional to its failures, not
 *             to its checkpoints.
 *   down      detection -> wait for a replacement node -> restart, or for
 *             planned maintenance: final checkpoint -> maintenance ->
 *             restart.  A failure while down counts as an interruption and
 *             starts detection over; one during maintenance does not end
 *             it (the restart waits for the maintenance's end), and one
 *             before the final checkpoint is persisted loses the work
 *             since the previous durable checkpoint.
 *
 * With checkpoint tiers (c->tiers) a trial also keeps where the job's
 * state is (compute seconds done, `pos`) and the newest checkpoint each
 * tier holds; a failure restores from the newest one that survives it
 * (tier_failure()), and the work between is lost (tier_restore()).
 *
 * Determinism: trial i draws only from a generator seeded by (seed, i);
 * trials are handed out in blocks, results are stored per trial and summed
 * in trial order, so any thread count gives the same bits.
 */
#include "sim/sim.h"
#include "sim/sim_rng.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

#define BLOCK_TRIALS 16

/* Read-only after plan_init; shared by all threads. */
typedef struct plan {
    const fb__sim_config *c;
    double horizon_s;
    double tau, stall, window;   /* window: async in-flight loss window */
    double job_rate;             /* job-scoped failures per second      */
    double node_base;            /* per normal node, per second         */
    long nodes, lemons0, spares;
    double lemon_factor;
    double planned_period;       /* INFINITY: none                      */
    int njob, nnode;
    int job_idx[FB_SIM_MAX_CATEGORIES], node_idx[FB_SIM_MAX_CATEGORIES];
    double job_cum[FB_SIM_MAX_CATEGORIES];  /* cumulative rates         */
    double node_cum[FB_SIM_MAX_CATEGORIES]; /* cumulative shares, to 1  */
    double detect[FB_SIM_MAX_CATEGORIES];
    int exp_single;              /* exponential mode: one category      */
    int tiers;                   /* checkpoint tiers on                 */
} plan;

/* With tiers: a checkpoint, as the compute position it holds (seconds of
 * compute since the start) and its index (0: the start; the persist-every
 * count runs on it). */
typedef struct ckpt_at {
    double pos;
    long index;
} ckpt_at;

/* Per-trial state; heap storage is per thread and reused. */
typedef struct trial {
    const plan *p;
    fb__sim_rng rng;
    double *heap;                /* repair completion times (min-heap)  */
    long heap_n;
    long free_spares;
    long lemons;
    double rate;                 /* current total failure rate          */
    double next_fail;            /* absolute time of the next failure   */
    fb__sim_trial out;
    uint64_t *cat_counts;

    /* Tiers only.  The job's state is `now` compute seconds in; the
     * running stretch started from checkpoint `at`.  Newest checkpoint in
     * every node's memory, in the peers' memory (peer_ok: the peers hold
     * any copy of the current timeline), on storage.  lost_nodes: nodes
     * lost since the newest peer-complete checkpoint (their memory held
     * peer copies of other nodes' shards).  While down, the restore that
     * the failures so far require: the oldest position, the farthest tier
     * (restore_tier < 0: none yet). */
    double now;
    ckpt_at at, mem, peer, store;
    int peer_ok;
    long lost_nodes;
    ckpt_at restore;
    int restore_tier;
} trial;

long fb__sim_spares(const fb__sim_config *c)
{
    if (c->spares >= 0)
        return c->spares;
    long nodes = (c->gpus + c->gpus_per_node - 1) / c->gpus_per_node;
    long s = (nodes + 99) / 100; /* default: 1% of the job's nodes */
    return s < 1 ? 1 : s;
}

static void plan_init(plan *p, const fb__sim_config *c)
{
    memset(p, 0, sizeof *p);
    p->c = c;
    p->horizon_s = c->horizon_s;
    p->tau = c->interval_s;
    p->stall = c->stall_s;
    p->nodes = (c->gpus + c->gpus_per_node - 1) / c->gpus_per_node;
    p->spares = fb__sim_spares(c);
    p->lemon_factor = c->lemon_factor;
    if (c->exponential) {
        /* Model checking: one job-scoped process, checkpoint durable at
         * the end of its stall, nothing else. */
        p->exp_single = 1;
        p->window = 0;
        p->job_rate = 1.0 / c->mtbf_s;
        p->njob = 1;
        p->job_idx[0] = 0;
        p->job_cum[0] = p->job_rate;
        p->detect[0] = c->detect_crash_s;
        p->planned_period = INFINITY;
        return;
    }
    p->window = c->persist_s;
    p->tiers = c->tiers;
    p->planned_period =
        c->planned_per_job_s > 0 ? 1.0 / c->planned_per_job_s : INFINITY;
    double node_rate = 0;
    for (int i = 0; i < c->ncat; i++) {
        const fb__sim_category *k = &c->cat[i];
        double r = k->rate_per_gpu_s * (double)c->gpus + k->rate_per_job_s;
        p->detect[i] = k->kind == FB_SIM_HANG ? c->detect_hang_s
                                              : c->detect_crash_s;
        if (k->scope == FB_SIM_SCOPE_NODE) {
            p->node_idx[p->nnode] = i;
            node_rate += r;
            p->node_cum[p->nnode++] = node_rate;
        } else {
            p->job_idx[p->njob] = i;
            p->job_rate += r;
            p->job_cum[p->njob++] = p->job_rate;
        }
    }
    for (int j = 0; j < p->nnode; j++)
        p->node_cum[j] = node_rate > 0 ? p->node_cum[j] / node_rate : 1;
    if (p->nnode)
        p->node_cum[p->nnode - 1] = 1.0;
    p->lemons0 = (long)floor(c->lemon_fraction * (double)p->nodes + 0.5);
    /* Lemons fail lemon_factor times as often as the others; the total at
     * the start is the calibrated rate, so an undrained job keeps it. */
    double weight = (double)(p->nodes - p->lemons0) +
                    (double)p->lemons0 * p->lemon_factor;
    p->node_base = weight > 0 ? node_rate / weight : 0;
}

static double rate_with_lemons(const plan *p, long lemons)
{
    return p->job_rate +
           p->node_base * ((double)(p->nodes - lemons) +
                           (double)lemons * p->lemon_factor);
}

/* ---- repair heap ---- */

static void heap_push(trial *s, double v)
{
    long i = s->heap_n++;
    while (i > 0) {
        long parent = (i - 1) / 2;
        if (s->heap[parent] <= v)
            break;
        s->heap[i] = s->heap[parent];
        i = parent;
    }
    s->heap[i] = v;
}

static double heap_pop(trial *s)
{
    double top = s->heap[0];
    double last = s->heap[--s->heap_n];
    long i = 0, n = s->heap_n;
    for (;;) {
        long child = 2 * i + 1;
        if (child >= n)
            break;
        if (child + 1 < n && s->heap[child + 1] < s->heap[child])
            child++;
        if (last <= s->heap[child])
            break;
        s->heap[i] = s->heap[child];
        i = child;
    }
    if (n > 0)
        s->heap[i] = last;
    return top;
}

/* A running stretch of length d that starts right after a restore (no
 * checkpoint in flight) as n whole [compute tau][stall] cycles and rem
 * seconds of the next: how much it computed and how long it stalled. */
static void cycles(const plan *p, double d, double *n, double *rem,
                   double *compute, double *stall)
{
    double tau = p->tau, cycle = p->tau + p->stall;
    *n = floor(d / cycle);
    *rem = d - *n * cycle;
    if (*rem < 0)
        *rem = 0;
    if (*rem < tau) {
        *compute = *n * tau + *rem;
        *stall = *n * p->stall;
    } else {
        *compute = (*n + 1) * tau;
        *stall = *n * p->stall + (*rem - tau);
    }
}

/* Without tiers: also how much of its compute a failure at its end would
 * throw away. */
static void segment(const plan *p, double d, double *compute, double *stall,
                    double *lost)
{
    double n, rem;
    cycles(p, d, &n, &rem, compute, stall);
    if (rem < p->tau)
        /* Computing.  The last checkpoint is durable only if its persist
         * (started at the end of its stall) has finished. */
        *lost = (n >= 1 && rem < p->window) ? p->tau + rem : rem;
    else
        /* Inside a stall: this snapshot is not complete; the previous one
         * is durable because interval >= persist time. */
        *lost = p->tau;
}

/* A running stretch of length d with tiers, from checkpoint s->at: what
 * it computed and stalled, and the newest checkpoint each tier holds at
 * its end.  Checkpoint i of the stretch ends its stall at i * cycle; it is
 * in memory then, on the peers peer_s later, and, if its index is a
 * multiple of persist_every, on storage persist_s later. */
static void tier_segment(trial *s, double d, double *compute, double *stall)
{
    const plan *p = s->p;
    const fb__sim_config *c = p->c;
    double tau = p->tau, cycle = p->tau + p->stall;
    double n, rem;
    cycles(p, d, &n, &rem, compute, stall);
    if (n >= 1)
        s->mem = (ckpt_at){s->at.pos + n * tau, s->at.index + (long)n};
    if (d >= c->peer_s) {
        double i = fmin(floor((d - c->peer_s) / cycle), n);
        if (i >= 1) {
            s->peer = (ckpt_at){s->at.pos + i * tau, s->at.index + (long)i};
            s->peer_ok = 1;
            s->lost_nodes = 0;
        }
    }
    if (d >= c->persist_s) {
        double i = fmin(floor((d - c->persist_s) / cycle), n);
        if (i >= 1) {
            long index = s->at.index + (long)i;
            i -= (double)(index % c->persist_every);
            if (i >= 1)
                s->store = (ckpt_at){s->at.pos + i * tau,
                                     s->at.index + (long)i};
        }
    }
}

/* A node was lost: are its peer copies gone too?  Either a failure that
 * takes the peers' domain with it (double_failure), or independent bad
 * luck: every one of its k peers is among the nodes lost since the newest
 * peer-complete checkpoint (placement at random among the other nodes). */
static int peers_lost(trial *s)
{
    const plan *p = s->p;
    const fb__sim_config *c = p->c;
    if (!s->peer_ok)
        return 1;
    if (c->double_failure > 0 &&
        fb__sim_uniform(&s->rng) < c->double_failure)
        return 1;
    if (s->lost_nodes < c->peers)
        return 0;
    double prob = 1;
    for (int j = 0; j < c->peers; j++)
        prob *= (double)(s->lost_nodes - j) / (double)(p->nodes - 1 - j);
    return fb__sim_uniform(&s->rng) < prob;
}

/* A failure of category cat with tiers: which checkpoint survives it.  A
 * job-scoped failure (process, software, network) leaves every node's
 * memory; a node-scoped one loses that node's memory, so its ranks need
 * the peer copy, or storage when that is gone as well.  Several failures
 * in one outage: the oldest checkpoint and the farthest tier of all. */
static void tier_failure(trial *s, int cat)
{
    const fb__sim_config *c = s->p->c;
    ckpt_at from = s->mem;
    int tier = FB_SIM_TIER_MEMORY;
    if (c->cat[cat].scope == FB_SIM_SCOPE_NODE) {
        int lost = peers_lost(s);
        s->lost_nodes++;
        if (!lost && s->peer.pos >= s->store.pos) {
            from = s->peer;
            tier = FB_SIM_TIER_PEER;
        } else {
            from = s->store;
            tier = FB_SIM_TIER_STORAGE;
        }
    }
    if (s->restore_tier < 0 || from.pos < s->restore.pos)
        s->restore = from;
    if (tier > s->restore_tier)
        s->restore_tier = tier;
}

/* Planned maintenance with tiers: the final checkpoint goes to storage,
 * and the nodes may be rebooted, so the job comes back from storage.  The
 * final checkpoint is counted as on storage from the start; a failure
 * before its persist ends takes it back (tier_final_lost()), so *before
 * keeps the checkpoint storage held until then. */
static void tier_maintenance(trial *s, int ckpt_first, ckpt_at *before)
{
    *before = s->store;
    if (ckpt_first)
        s->store = (ckpt_at){s->now, s->mem.index + 1};
    s->mem = s->store;
    s->peer_ok = 0;
    s->restore = s->store;
    s->restore_tier = FB_SIM_TIER_STORAGE;
}

/* A failure struck before the final checkpoint of a maintenance was on
 * storage: the job comes back from the one before it. */
static void tier_final_lost(trial *s, ckpt_at before)
{
    s->store = before;
    s->mem = before;
    s->restore = before;
    s->restore_tier = FB_SIM_TIER_STORAGE;
}

/* The outage is over (or the horizon ended in it): the job goes back to
 * the checkpoint the failures left, and the compute since is lost. */
static void tier_restore(trial *s)
{
    if (s->restore_tier < 0)
        return;
    double lost = s->now - s->restore.pos;
    s->out.t.useful -= lost;
    s->out.t.lost += lost;
    s->out.restores[s->restore_tier]++;
    s->now = s->restore.pos;
    s->at = s->restore;
    /* The restored checkpoint is in every node's memory again; newer
     * copies belong to a timeline that was rolled back. */
    s->mem = s->restore;
    if (s->peer.pos > s->restore.pos || s->restore_tier ==
                                            FB_SIM_TIER_STORAGE)
        s->peer_ok = 0;
    if (s->store.pos > s->restore.pos)
        s->store = s->restore;
    s->restore_tier = -1;
}

static int pick_category(trial *s)
{
    const plan *p = s->p;
    double u = fb__sim_uniform(&s->rng) * s->rate;
    if (u < p->job_rate || p->nnode == 0) {
        for (int j = 0; j < p->njob - 1; j++)
            if (u < p->job_cum[j])
                return p->job_idx[j];
        return p->job_idx[p->njob - 1];
    }
    double v = (u - p->job_rate) / (s->rate - p->job_rate);
    for (int j = 0; j < p->nnode - 1; j++)
        if (v < p->node_cum[j])
            return p->node_idx[j];
    return p->node_idx[p->nnode - 1];
}

/* A failure of category cat strikes at time a.  Returns the time a
 * replacement node is available (a when none is needed). */
static double on_failure(trial *s, int cat, double a)
{
    const plan *p = s->p;
    const fb__sim_config *c = p->c;
    double node_avail = a;
    s->out.interruptions++;
    s->cat_counts[cat]++;
    if (!p->exp_single && c->cat[cat].scope == FB_SIM_SCOPE_NODE) {
        long n = p->nodes, L = s->lemons;
        double lemon_w = (double)L * p->lemon_factor;
        int is_lemon = L > 0 && fb__sim_uniform(&s->rng) * ((double)(n - L) +
                                                           lemon_w) < lemon_w;
        while (s->heap_n > 0 && s->heap[0] <= a) {
            heap_pop(s);
            s->free_spares++;
        }
        heap_push(s, a + (c->drain ? c->drain_repair_s : c->repair_s));
        if (s->free_spares > 0)
            s->free_spares--;
        else
            node_avail = heap_pop(s);
        if (c->drain && is_lemon) {
            /* Drained for good: its replacement is a normal node. */
            s->lemons--;
            s->rate = rate_with_lemons(p, s->lemons);
        }
    }
    if (p->tiers)
        tier_failure(s, cat);
    s->next_fail = a + fb__sim_exp(&s->rng, s->rate);
    return node_avail;
}

/* Spend [from, to) of a phase, clipped at `until`, into *acc. */
static void spend(double *acc, double from, double to, double until)
{
    if (to > until)
        to = until;
    if (to > from)
        *acc += to - from;
}

/* The job is down from *t: because a failure of category cat struck
 * (cat >= 0), or for planned maintenance (cat < 0; ckpt_first says whether
 * a final checkpoint must be taken first; without tiers, at_risk is the
 * compute a failure before that checkpoint is persisted throws away).
 * Returns 0 with *t the time the job runs again, or 1 when the horizon
 * ends first.
 *
 * The job restarts once every reason to stay down has ended: the
 * maintenance (hold, which a failure inside it does not shorten), the
 * newest failure's detection, and the wait for replacement nodes
 * (node_ready, the latest of all failures so far).  A failure while down
 * counts as an interruption and starts the detection over. */
static int down(trial *s, double *t, int cat, int ckpt_first,
                double at_risk)
{
    const plan *p = s->p;
    const fb__sim_config *c = p->c;
    fb__sim_time *acc = &s->out.t;
    double node_ready = -INFINITY, stall_end = -INFINITY, hold = -INFINITY;
    double final_done = -INFINITY; /* final checkpoint persisted */
    ckpt_at store_before = {0, 0};
    if (p->tiers)
        s->restore_tier = -1;
    if (cat < 0) {
        double stall = ckpt_first ? p->stall : 0;
        double persist = ckpt_first ? p->window : 0;
        stall_end = *t + stall;
        final_done = ckpt_first ? stall_end + persist : -INFINITY;
        hold = stall_end + persist + c->maint_down_s;
        if (p->tiers)
            tier_maintenance(s, ckpt_first, &store_before);
    }
    for (;;) {
        double a = *t;
        double detect_end = -INFINITY;
        if (cat >= 0) {
            if (a < final_done) {
                /* The final checkpoint is lost: a normal loss. */
                final_done = -INFINITY;
                if (p->tiers) {
                    tier_final_lost(s, store_before);
                } else {
                    acc->useful -= at_risk;
                    acc->lost += at_risk;
                }
            }
            double avail = on_failure(s, cat, a);
            if (avail > node_ready)
                node_ready = avail;
            detect_end = a + p->detect[cat];
        }
        double ends[4] = {stall_end, hold, detect_end, node_ready};
        double *into[4] = {&acc->checkpoint, &acc->maintenance,
                           &acc->detect, &acc->repair_wait};
        double restart = c->restart_s;
        if (p->tiers)
            restart += c->restore_s[s->restore_tier];

        double until = s->next_fail < p->horizon_s ? s->next_fail
                                                    : p->horizon_s;
        double from = a;
        for (int i = 0; i < 4; i++) {
            if (ends[i] > from) {
                spend(into[i], from, ends[i], until);
                from = ends[i];
            }
        }
        spend(&acc->restart, from, from + restart, until);
        from += restart;
        if (from <= until) {
            *t = from;
            if (p->tiers)
                tier_restore(s);
            return 0;
        }
        if (until >= p->horizon_s) {
            if (p->tiers)
                tier_restore(s);
            return 1;
        }
        *t = until;
        cat = pick_category(s);
    }
}

static void run_trial(trial *s, uint64_t index)
{
    const plan *p = s->p;
    const fb__sim_config *c = p->c;
    fb__sim_time *acc = &s->out.t;
    double T = p->horizon_s;

    fb__sim_rng_seed(&s->rng, c->seed, index);
    memset(&s->out, 0, sizeof s->out);
    s->heap_n = 0;
    s->free_spares = p->spares;
    s->lemons = p->lemons0;
    s->rate = p->exp_single ? p->job_rate : rate_with_lemons(p, s->lemons);
    s->next_fail = fb__sim_exp(&s->rng, s->rate);
    double next_maint = isfinite(p->planned_period)
                            ? fb__sim_uniform(&s->rng) * p->planned_period
                            : INFINITY;
    if (p->tiers) {
        /* The start is checkpoint 0, everywhere. */
        s->now = 0;
        s->at = s->mem = s->peer = s->store = (ckpt_at){0, 0};
        s->peer_ok = 1;
        s->lost_nodes = 0;
        s->restore_tier = -1;
    }
    double t = 0;
    for (;;) {
        if (next_maint <= t) {
            /* Came due while the job was down: do it now, before any new
             * work, so no final checkpoint is needed; events that piled up
             * during a long outage are served by this one stop. */
            while (next_maint <= t) {
                s->out.planned++;
                next_maint += p->planned_period;
            }
            /* With tiers the restored state may be newer than storage,
             * and maintenance may reboot the nodes: checkpoint first. */
            if (down(s, &t, -1, p->tiers && s->now > s->store.pos, 0))
                break;
            continue;
        }
        double end = s->next_fail;
        if (next_maint < end)
            end = next_maint;
        if (T < end)
            end = T;
        double compute, stall, lost = 0;
        if (p->tiers) {
            /* The loss is known only when the outage is: tier_restore(). */
            tier_segment(s, end - t, &compute, &stall);
            s->now = s->at.pos + compute;
        } else {
            segment(p, end - t, &compute, &stall, &lost);
        }
        acc->checkpoint += stall;
        if (end >= T) {
            acc->useful += compute;
            break;
        }
        if (end == s->next_fail) {
            acc->useful += compute - lost;
            acc->lost += lost;
            t = end;
            if (down(s, &t, pick_category(s), 0, 0))
                break;
        } else {
            acc->useful += compute;
            s->out.planned++;
            next_maint += p->planned_period;
            t = end;
            if (down(s, &t, -1, 1, lost))
                break;
        }
    }
}

/* ---- threads ---- */

typedef struct work {
    plan p;
    long trials;
    atomic_long next_block;
    fb__sim_trial *out;
} work;

typedef struct worker {
    work *w;
    pthread_t tid;
    uint64_t cat_counts[FB_SIM_MAX_CATEGORIES];
    int rc;
    int draws;                   /* the calling thread draws progress */
} worker;

static void *worker_main(void *arg)
{
    worker *k = arg;
    work *w = k->w;
    trial s;
    memset(&s, 0, sizeof s);
    s.p = &w->p;
    s.cat_counts = k->cat_counts;
    s.heap = malloc(sizeof(double) * (size_t)(w->p.spares + 2));
    if (!s.heap) {
        k->rc = -ENOMEM;
        return NULL;
    }
    long nblocks = (w->trials + BLOCK_TRIALS - 1) / BLOCK_TRIALS;
    for (;;) {
        long b = atomic_fetch_add(&w->next_block, 1);
        if (b >= nblocks)
            break;
        long lo = b * BLOCK_TRIALS, hi = lo + BLOCK_TRIALS;
        if (hi > w->trials)
            hi = w->trials;
        uint64_t events = 0;
        for (long i = lo; i < hi; i++) {
            run_trial(&s, (uint64_t)i);
            w->out[i] = s.out;
            events += (uint64_t)s.out.interruptions + s.out.planned + 1;
        }
        if (w->p.c->progress)
            fb__sim_progress_add(w->p.c->progress, events, k->draws);
    }
    free(s.heap);
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Linear interpolation between order statistics. */
static double quantile(const double *sorted, long n, double q)
{
    double pos = q * (double)(n - 1);
    long i = (long)floor(pos);
    if (i >= n - 1)
        return sorted[n - 1];
    double f = pos - (double)i;
    return sorted[i] + f * (sorted[i + 1] - sorted[i]);
}

static int thread_count(const fb__sim_config *c, long trials)
{
    long n = c->threads;
    if (n <= 0)
        n = fb__usable_cpus();
    long blocks = (trials + BLOCK_TRIALS - 1) / BLOCK_TRIALS;
    if (n > blocks)
        n = blocks;
    return (int)n;
}

static void aggregate(const work *w, const worker *ks, int nk,
                      const double *ettr_sorted, fb__sim_result *r)
{
    long n = w->trials;
    const fb__sim_config *c = w->p.c;
    double sum_ettr = 0, sum_int = 0, sum_planned = 0;
    double sum_restores[FB_SIM_NTIERS] = {0};
    fb__sim_time sum = {0};
    for (long i = 0; i < n; i++) {
        const fb__sim_trial *x = &w->out[i];
        sum_ettr += x->t.useful / c->horizon_s;
        sum_int += x->interruptions;
        sum_planned += x->planned;
        sum.useful += x->t.useful;
        sum.checkpoint += x->t.checkpoint;
        sum.lost += x->t.lost;
        sum.detect += x->t.detect;
        sum.restart += x->t.restart;
        sum.repair_wait += x->t.repair_wait;
        sum.maintenance += x->t.maintenance;
        for (int k = 0; k < FB_SIM_NTIERS; k++)
            sum_restores[k] += x->restores[k];
    }
    double dn = (double)n;
    r->trials = n;
    r->ettr_mean = sum_ettr / dn;
    r->ettr_p5 = quantile(ettr_sorted, n, 0.05);
    r->ettr_p95 = quantile(ettr_sorted, n, 0.95);
    r->interruptions_mean = sum_int / dn;
    r->planned_mean = sum_planned / dn;
    for (int k = 0; k < FB_SIM_NTIERS; k++)
        r->restores_mean[k] = sum_restores[k] / dn;
    r->time_mean.useful = sum.useful / dn;
    r->time_mean.checkpoint = sum.checkpoint / dn;
    r->time_mean.lost = sum.lost / dn;
    r->time_mean.detect = sum.detect / dn;
    r->time_mean.restart = sum.restart / dn;
    r->time_mean.repair_wait = sum.repair_wait / dn;
    r->time_mean.maintenance = sum.maintenance / dn;
    int ncat = c->exponential ? 1 : c->ncat;
    for (int j = 0; j < ncat; j++) {
        uint64_t total = 0;
        for (int k = 0; k < nk; k++)
            total += ks[k].cat_counts[j];
        r->by_category_mean[j] = (double)total / dn;
    }
}

int fb__sim_run(const fb__sim_config *c, int keep_trials, fb__sim_result *r)
{
    char err[256];
    memset(r, 0, sizeof *r);
    if (fb__sim_validate(c, err, sizeof err))
        return -EINVAL;
    int rc = 0;
    work *w = calloc(1, sizeof *w);
    if (!w)
        return -ENOMEM;
    plan_init(&w->p, c);
    w->trials = c->trials;
    atomic_init(&w->next_block, 0);
    w->out = calloc((size_t)c->trials, sizeof *w->out);
    double *ettr = malloc(sizeof(double) * (size_t)c->trials);
    int nk = thread_count(c, c->trials);
    worker *ks = calloc((size_t)nk, sizeof *ks);
    if (!w->out || !ettr || !ks) {
        rc = -ENOMEM;
        goto out;
    }
    int started = 0;
    for (int k = 0; k < nk; k++) {
        ks[k].w = w;
        if (k == 0)
            continue; /* the calling thread is worker 0 */
        if (pthread_create(&ks[k].tid, NULL, worker_main, &ks[k]) != 0)
            break; /* fewer threads only makes it slower */
        started = k;
    }
    ks[0].draws = 1;
    worker_main(&ks[0]);
    for (int k = 1; k <= started; k++)
        pthread_join(ks[k].tid, NULL);
    for (int k = 0; k < nk; k++)
        if (ks[k].rc)
            rc = ks[k].rc;
    if (rc)
        goto out;
    for (long i = 0; i < c->trials; i++)
        ettr[i] = w->out[i].t.useful / c->horizon_s;
    qsort(ettr, (size_t)c->trials, sizeof *ettr, cmp_double);
    aggregate(w, ks, nk, ettr, r);
    if (keep_trials) {
        r->per_trial = w->out;
        w->out = NULL;
    }
out:
    free(ks);
    free(ettr);
    free(w->out);
    free(w);
    return rc;
}

void fb__sim_result_free(fb__sim_result *r)
{
    free(r->per_trial);
    r->per_trial = NULL;
}

int fb__sim_mean_ettr(const fb__sim_config *c, double *ettr_out)
{
    fb__sim_result r;
    int rc = fb__sim_run(c, 0, &r);
    if (rc == 0)
        *ettr_out = r.ettr_mean;
    return rc;
}
