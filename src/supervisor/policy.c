/*
 * policy.c -- the supervisor's decisions (policy.h): failure kinds and
 * their names, how a rank ended, who is to blame, restart or stop.
 *
 * Pure functions only: no I/O, no clock, no globals.  The I/O loops gather
 * the facts (supervisor.c, watch.c) and tests/supervisor/test_policy.c
 * checks every rule from a table.
 */
#include "supervisor/policy.h"

#include <signal.h>
#include <string.h>
#include <sys/wait.h>

static const char *const fail_kind_names[FB__SUP_FAIL_KIND_COUNT] = {
    [FB__SUP_FAIL_NONE] = "none",
    [FB__SUP_FAIL_HANG] = "hang",
    [FB__SUP_FAIL_CRASH] = "crash",
    [FB__SUP_FAIL_ERROR_EXIT] = "error_exit",
    [FB__SUP_FAIL_LAUNCH_FAILURE] = "launch_failure",
    [FB__SUP_FAIL_SEGMENT_CORRUPT] = "segment_corrupt",
    [FB__SUP_FAIL_SEGMENT_NOT_OURS] = "segment_not_ours",
    [FB__SUP_FAIL_NODE_FAILURE] = "node_failure",
    [FB__SUP_FAIL_SAVE_FAILED] = "save_failed",
    [FB__SUP_FAIL_RESTORE_FALLBACK] = "restore_fallback",
    [FB__SUP_FAIL_SDC] = "sdc",
};

const char *fb__sup_fail_kind_name(fb__sup_fail_kind kind)
{
    if ((unsigned)kind < FB__SUP_FAIL_KIND_COUNT && fail_kind_names[kind])
        return fail_kind_names[kind];
    return "unknown";
}

int fb__sup_sdc_supersedes(fb__sup_fail_kind kind, int64_t fail_step, int64_t sdc_step)
{
    switch (kind) {
    case FB__SUP_FAIL_CRASH:
    case FB__SUP_FAIL_ERROR_EXIT:
    case FB__SUP_FAIL_HANG:
        return fail_step < 0 || sdc_step <= fail_step;
    default:
        return 0;
    }
}

/* ---- how one rank ended ---- */

void fb__sup_judge_end(const fb__sup_rank_end *e, fb__sup_end_verdict *v)
{
    memset(v, 0, sizeof *v);
    int sig = 0, has_code = 0, code = 0;
    if (e->wstatus_known) {
        if (WIFEXITED(e->wstatus)) {
            has_code = 1;
            code = WEXITSTATUS(e->wstatus);
        } else if (WIFSIGNALED(e->wstatus)) {
            sig = WTERMSIG(e->wstatus);
        }
    } else if (e->end_kind == FB__END_EXIT) {
        has_code = 1;
        code = e->end_code;
    } else if (e->end_kind == FB__END_SIGNAL) {
        sig = e->end_code;
    } else if (e->end_kind == FB__END_FINALIZED) {
        has_code = 1;
    }

    if (e->exec_errno) {
        v->how = FB__SUP_END_LAUNCH;
        v->kind = FB__SUP_FAIL_LAUNCH_FAILURE;
        v->launch_error = 1;
        v->has_exit_code = 1;
        v->exit_code = 127;
    } else if (sig) {
        v->how = FB__SUP_END_SIGNAL;
        v->kind = FB__SUP_FAIL_CRASH;
        v->signal = sig;
    } else if (has_code && code != 0) {
        v->how = FB__SUP_END_EXIT;
        v->kind = FB__SUP_FAIL_ERROR_EXIT;
        v->has_exit_code = 1;
        v->exit_code = code;
    } else if (has_code) {
        v->how = FB__SUP_END_OK;
    } else if (e->injected == FB__INJECT_KILL) {
        /* The rank recorded the kill it was about to receive. */
        v->how = FB__SUP_END_INJECTED_KILL;
        v->kind = FB__SUP_FAIL_CRASH;
        v->signal = SIGKILL;
    } else {
        v->how = FB__SUP_END_VANISHED;
        v->kind = FB__SUP_FAIL_CRASH;
    }
}

int fb__sup_record_is_fatal(uint32_t end_kind, int end_code)
{
    fb__sup_rank_end e = {.end_kind = end_kind, .end_code = end_code};
    fb__sup_end_verdict v;
    fb__sup_judge_end(&e, &v);
    return v.how == FB__SUP_END_SIGNAL || v.how == FB__SUP_END_EXIT;
}

/* ---- which rank is to blame ---- */

int fb__sup_blame_instead(const fb__sup_end_verdict *self_verdict, int self,
                          const fb__sup_end_record *recs, int n)
{
    if (self_verdict->how != FB__SUP_END_VANISHED)
        return -1;
    for (int r = 0; r < n; r++) {
        const fb__sup_end_record *o = &recs[r];
        if (r == self || o->ended || !o->readable)
            continue;
        if (fb__sup_record_is_fatal(o->end_kind, o->end_code))
            return r;
    }
    return -1;
}

int fb__sup_held_first(int named, const uint64_t *held_ns,
                       const unsigned char *injected_kill, int n)
{
    if (named >= 0 && named < n && held_ns[named] && injected_kill[named])
        return named;
    int first = -1;
    for (int r = 0; r < n; r++)
        if (held_ns[r] && injected_kill[r] && (first < 0 || held_ns[r] < held_ns[first]))
            first = r;
    return first >= 0 ? first : named;
}

/* The watched rank silent the longest past its phase's limit, or -1. */
static int oldest_silent(const fb__sup_hang_facts *f)
{
    int rank = -1;
    for (int r = 0; r < f->world; r++) {
        const fb__sup_hang_rank *k = &f->ranks[r];
        if (!k->watched || !k->limit_ns || f->now_ns <= k->last_beat_ns ||
            f->now_ns - k->last_beat_ns <= k->limit_ns)
            continue;
        if (rank < 0 || k->last_beat_ns < f->ranks[rank].last_beat_ns)
            rank = r;
    }
    return rank;
}

/* Whether rank r, silent past its limit, is the only rank silent: every
 * other one ended (readable, its end noticed) or beat within a quarter of
 * r's limit (policy.h, rule 1). */
static int silent_alone(const fb__sup_hang_facts *f, int r)
{
    uint64_t quarter = f->ranks[r].limit_ns / 4;
    for (int q = 0; q < f->world; q++) {
        const fb__sup_hang_rank *k = &f->ranks[q];
        if (q == r || (k->readable && !k->watched))
            continue;
        if (!k->readable ||
            (f->now_ns > k->last_beat_ns && f->now_ns - k->last_beat_ns > quarter))
            return 0;
    }
    return 1;
}

uint64_t fb__sup_trusted_beat(uint64_t hb, uint64_t now, uint64_t *odd,
                              uint64_t *odd_seen_ns)
{
    if (hb <= now)
        return hb;
    if (*odd != hb) { /* a new value: a write, so the rank was alive now */
        *odd = hb;
        *odd_seen_ns = now;
    }
    return *odd_seen_ns;
}

void fb__sup_blame_hang(const fb__sup_hang_facts *f, fb__sup_hang_blame *b)
{
    memset(b, 0, sizeof *b);
    b->rank = f->declared;
    b->basis = f->declared >= 0 ? FB__SUP_HANG_DECLARED : FB__SUP_HANG_NONE;
    if (f->declared < 0 && f->ranks) {
        b->rank = oldest_silent(f);
        if (b->rank < 0)
            return;
        b->basis = FB__SUP_HANG_OLDEST_BEAT;
        b->alone = f->world > 1 && silent_alone(f, b->rank); /* others to tell */
        for (int r = 0; r < f->world; r++) {
            if (f->ranks[r].readable && f->ranks[r].injected == FB__INJECT_HANG) {
                b->rank = r;
                b->basis = FB__SUP_HANG_INJECTED;
                break;
            }
        }
    }
    int c = f->fr_culprits && f->fr_nculprits > 0 ? f->fr_culprits[0] : -1;
    int one = f->fr_hang && f->fr_nculprits == 1 && c >= 0 && c < f->world;
    if (f->declared >= 0 && f->declared_by_silence && f->fr_analyzed &&
        f->world > 1 && !one) {
        b->rank = -1;
        b->basis = FB__SUP_HANG_UNDECIDED;
        b->fr_named = f->fr_hang && f->fr_nculprits > 0;
        return;
    }
    if (!f->fr_hang || f->fr_nculprits < 1)
        return;
    b->fr_named = 1;
    if (one && c != b->rank) {
        b->rank = c;
        b->basis = FB__SUP_HANG_FR_CULPRIT;
    }
}

#define INJECT_CAUSE_WINDOW_NS 5000000000ull

uint64_t fb__sup_end_time(uint64_t noticed_ns, uint64_t detected_ns,
                          uint32_t end_kind, uint64_t end_ns, uint64_t inject_ns)
{
    uint64_t t = noticed_ns ? noticed_ns : detected_ns;
    if (end_kind != FB__END_NONE && end_ns && end_ns <= t)
        return end_ns;
    if (inject_ns && inject_ns <= t && t - inject_ns < INJECT_CAUSE_WINDOW_NS)
        return inject_ns;
    return t;
}

/* ---- restart or stop ---- */

void fb__sup_history_init(fb__sup_history *h)
{
    memset(h, 0, sizeof *h);
    h->prev_fail_step = -2;
    h->prev_fail_kind = FB__SUP_FAIL_NONE;
}

#define BACKOFF_FIRST_S 0.5
#define BACKOFF_MAX_S 30.0

double fb__sup_backoff_s(int no_progress)
{
    if (no_progress <= 0)
        return 0;
    double delay = BACKOFF_FIRST_S;
    for (int k = 1; k < no_progress && delay < BACKOFF_MAX_S; k++)
        delay *= 2;
    return delay > BACKOFF_MAX_S ? BACKOFF_MAX_S : delay;
}

void fb__sup_decide(const fb__sup_restart_limits *lim, fb__sup_history *h,
                    const fb__sup_attempt_end *a, fb__sup_decision *d)
{
    memset(d, 0, sizeof *d);
    if (a->completed) {
        d->action = FB__SUP_DO_COMPLETED;
        return;
    }
    if (a->stop_signal) {
        d->action = FB__SUP_DO_INTERRUPTED;
        return;
    }
    if (a->launch_error) {
        d->action = FB__SUP_DO_STOP_LAUNCH;
        return;
    }
    int64_t prev_step = h->prev_fail_step;
    /* The same way: the same kind, and the same exit code or signal (one
     * rank's exit 3 and another's exit 17 at one step are two failures). */
    if (a->step == h->prev_fail_step && a->kind == h->prev_fail_kind &&
        a->code == h->prev_fail_code)
        h->same_in_a_row++;
    else
        h->same_in_a_row = 1;
    h->prev_fail_step = a->step;
    h->prev_fail_kind = a->kind;
    h->prev_fail_code = a->code;
    d->same_in_a_row = h->same_in_a_row;
    if (lim->crash_loop > 0 && h->same_in_a_row >= lim->crash_loop) {
        d->action = FB__SUP_DO_STOP_CRASH_LOOP;
        return;
    }
    if (h->restarts >= lim->max_restarts) {
        d->action = FB__SUP_DO_STOP_MAX_RESTARTS;
        return;
    }
    /* Progress: failing later than the attempt before, or a new complete
     * checkpoint; the first failure always counts as progress. */
    int progressed = a->durable_after > a->durable_before || a->step > prev_step ||
                     prev_step == -2;
    h->no_progress = progressed ? 0 : h->no_progress + 1;
    h->restarts++;
    d->action = FB__SUP_DO_RESTART;
    d->delay_s = fb__sup_backoff_s(h->no_progress);
}

int fb__sup_torch_fr_names(const char *version)
{
    const int both = FB__SUP_TORCH_FR_OLD | FB__SUP_TORCH_FR_NEW;
    if (!version)
        return both;
    long part[2] = {0, 0};
    const char *p = version;
    for (int i = 0; i < 2; i++) {
        if (*p < '0' || *p > '9')
            return both;
        for (int d = 0; *p >= '0' && *p <= '9'; p++, d++) {
            if (d >= 6)
                return both;
            part[i] = part[i] * 10 + (*p - '0');
        }
        if (i == 0 && *p++ != '.')
            return both;
    }
    if (part[0] > 2 || (part[0] == 2 && part[1] >= 7))
        return FB__SUP_TORCH_FR_NEW;
    return FB__SUP_TORCH_FR_OLD;
}

int fb__sup_stop_rt_priority(int rt, int same_node, fb__sup_fail_kind kind)
{
    if (rt <= 0 || !same_node || kind == FB__SUP_FAIL_NONE || kind == FB__SUP_FAIL_HANG ||
        kind >= FB__SUP_FAIL_KIND_COUNT)
        return 0;
    return rt > 99 ? 99 : rt;
}

/* ---- the standby's schedule (policy.h) ---- */

int fb__sup_standby_phase(uint64_t ready_ns, uint64_t now_ns)
{
    if (!ready_ns)
        return FB__SUP_STANDBY_STARTING;
    /* A clock read before ready_ns (another thread's) is still the burst. */
    if (now_ns < ready_ns || now_ns - ready_ns < FB__SUP_STANDBY_BURST_NS)
        return FB__SUP_STANDBY_BURST;
    return FB__SUP_STANDBY_TRAINING;
}

uint64_t fb__sup_standby_budget_ns(int phase)
{
    switch (phase) {
    case FB__SUP_STANDBY_STARTING: return FB__SUP_STANDBY_TICK_NS_STARTING;
    case FB__SUP_STANDBY_BURST: return FB__SUP_STANDBY_TICK_NS_BURST;
    default: return FB__SUP_STANDBY_TICK_NS_TRAINING;
    }
}

uint64_t fb__sup_standby_wait_ns(int phase, uint64_t wall_ns, uint64_t cpu_ns)
{
    if (phase == FB__SUP_STANDBY_STARTING)
        return wall_ns;
    if (phase == FB__SUP_STANDBY_BURST) {
        uint64_t w = cpu_ns > UINT64_MAX / FB__SUP_STANDBY_DUTY_INV_BURST
                   ? UINT64_MAX : cpu_ns * (FB__SUP_STANDBY_DUTY_INV_BURST - 1);
        return w > wall_ns ? w : wall_ns;
    }
    uint64_t w = cpu_ns > UINT64_MAX / FB__SUP_STANDBY_DUTY_INV
               ? UINT64_MAX : cpu_ns * (FB__SUP_STANDBY_DUTY_INV - 1);
    if (w < wall_ns)
        w = wall_ns;
    return w > FB__SUP_STANDBY_PERIOD_NS ? w : FB__SUP_STANDBY_PERIOD_NS;
}

/* ---- a rank that vanished on another node (policy.h) ---- */

fb__sup_vanished_verdict fb__sup_judge_vanished(const fb__sup_vanished_facts *f)
{
    if (f->alive_after || f->node_timeout_s <= 0)
        return FB__SUP_VANISHED_RANK;
    if (f->watchers_gone)
        return FB__SUP_VANISHED_NODE_LOST;
    /* A clock read before the line was stamped is no silence. */
    if (f->now_ns > f->last_heard_ns &&
        (double)(f->now_ns - f->last_heard_ns) / 1e9 > f->node_timeout_s)
        return FB__SUP_VANISHED_NODE_LOST;
    return FB__SUP_VANISHED_WAIT;
}

const char *fb__sup_mpirun_arg_owned(const char *arg, int slurm)
{
    enum { COUNT, OUTPUT, HOSTS, MAP };
    static const struct { const char *name; int what; } owned[] = {
        {"-np", COUNT}, {"--np", COUNT}, {"-n", COUNT}, {"--n", COUNT}, {"-c", COUNT},
        {"--output-filename", OUTPUT}, {"-output-filename", OUTPUT},
        {"--host", HOSTS}, {"-host", HOSTS}, {"-H", HOSTS}, {"--hostfile", HOSTS},
        {"-hostfile", HOSTS}, {"--machinefile", HOSTS}, {"-machinefile", HOSTS},
        {"--map-by", MAP}, {"-map-by", MAP},
    };
    static const char *const slurm_hosts =
        "the host list and mapping are firebreak's under Slurm: the allocation's "
        "nodes less any drained, --nproc-per-node ranks on each";
    for (size_t i = 0; i < sizeof owned / sizeof owned[0]; i++) {
        if (strcmp(arg, owned[i].name))
            continue;
        switch (owned[i].what) {
        case COUNT:
            return "the rank count is firebreak's: --nproc-per-node sets it (the "
                   "supervisor waits for that many ranks)";
        case OUTPUT:
            return "the ranks' output directory is firebreak's: the run's "
                   "logs/mpirun-attempt-<N>, where it reads each rank's output";
        case HOSTS:
            return slurm ? slurm_hosts
                         : "--launcher mpirun starts ranks on this node (the "
                           "supervisor watches them in this node's /dev/shm); across "
                           "nodes: --launcher slurm --mpirun PATH (docs/slurm.md)";
        case MAP:
            return slurm ? slurm_hosts : NULL; /* a mapping on this node: the user's */
        }
    }
    return NULL;
}
