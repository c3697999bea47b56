/*
 * lib.c -- attaching a rank to its run: fb_init, fb_step, phases, and the
 * handlers that record how the rank ended.
 *
 * The hot path, fb_step(), is one clock read and a handful of relaxed
 * stores into the segment; no lock and no system call.
 */
#include "lib/lib.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"

static struct {
    int initialized;
    int attached;
    int rank, world_size, local_rank, restart_count;
    fb__seg *seg;
    fb__seg_header *hdr;
    pid_t pid;            /* the process that attached: a forked child's
                             exit, crash or fb_finalize is not this rank's */
    uint64_t last_beat_ns;
    uint32_t phase_before_done; /* the phase fb_finalize ended (train when
                                   the program had set done itself)      */
    char run_dir[PATH_MAX];
    char ckpt_dir[PATH_MAX];
    struct sigaction old_actions[32];
} g = {.world_size = 1};

int fb__inject_armed;

static const int fatal_signals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};

fb__seg *fb__lib_seg(void)
{
    return g.seg;
}

void fb__lib_report(fb__report_kind kind, int32_t code, uint64_t step,
                    uint64_t bytes, uint64_t value1, uint64_t value2,
                    const char *text)
{
    if (g.seg)
        fb__seg_append_report(g.seg, kind, code, step, bytes, value1, value2, text);
}

const char *fb__lib_ckpt_dir(void)
{
    return g.ckpt_dir[0] ? g.ckpt_dir : NULL;
}

static int env_int(const char *const *names, int def)
{
    for (; *names; names++) {
        const char *v = fb__getenv(*names);
        long long x;
        if (v && fb__parse_int(v, 0, INT_MAX, &x) == 0)
            return (int)x;
    }
    return def;
}

/* The rank's own segment, or NULL in a process forked from it (it shares
 * the mapping, but its end is not the rank's: a helper that exits, a
 * DataLoader worker that crashes). */
static fb__seg_header *own_hdr(void)
{
    return g.hdr && getpid() == g.pid ? g.hdr : NULL;
}

static void on_fatal_signal(int sig, siginfo_t *si, void *uc)
{
    fb__seg_header *h = own_hdr();
    /* A fatal signal after fb_finalize() (a crash in exit handlers, say)
     * still counts: only an earlier fatal signal wins over it. */
    uint32_t prev = h ? atomic_load_explicit(&h->end_kind, memory_order_relaxed) : 0;
    if (h && (prev == FB__END_NONE || prev == FB__END_FINALIZED)) {
        atomic_store_explicit(&h->end_code, sig, memory_order_relaxed);
        atomic_store_explicit(&h->end_mono_ns, fb__now_ns(), memory_order_relaxed);
        atomic_store_explicit(&h->end_kind, FB__END_SIGNAL, memory_order_release);
    }
    /* Hand the signal to whoever had it before us (or the default action)
     * and let it happen again. */
    struct sigaction *old = (sig > 0 && sig < 32) ? &g.old_actions[sig] : NULL;
    if (old && (old->sa_flags & SA_SIGINFO) && old->sa_sigaction) {
        old->sa_sigaction(sig, si, uc);
        return;
    }
    if (old && old->sa_handler != SIG_DFL && old->sa_handler != SIG_IGN) {
        old->sa_handler(sig);
        return;
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

static void on_exit_record(int status, void *arg)
{
    (void)arg;
    fb__seg_header *h = own_hdr();
    if (!h)
        return;
    uint32_t prev = atomic_load_explicit(&h->end_kind, memory_order_relaxed);
    if (prev != FB__END_NONE && prev != FB__END_FINALIZED)
        return;
    /* Finalized, then exited with an error (Python's sys.exit(3) after the
     * hooks' exit handler, a C program's fb_finalize(); return 1;): the
     * program failed in what it was doing, not after it had finished. */
    if (status != 0 && prev == FB__END_FINALIZED)
        atomic_store_explicit(&h->phase, g.phase_before_done, memory_order_relaxed);
    atomic_store_explicit(&h->end_code, status, memory_order_relaxed);
    atomic_store_explicit(&h->end_mono_ns, fb__now_ns(), memory_order_relaxed);
    atomic_store_explicit(&h->end_kind, FB__END_EXIT, memory_order_release);
}

static void install_handlers(void)
{
    for (size_t i = 0; i < sizeof fatal_signals / sizeof fatal_signals[0]; i++) {
        int sig = fatal_signals[i];
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_fatal_signal;
        sa.sa_flags = SA_SIGINFO | SA_RESETHAND | SA_NODEFER;
        sigemptyset(&sa.sa_mask);
        sigaction(sig, &sa, &g.old_actions[sig]);
    }
    on_exit(on_exit_record, NULL);
}

int fb_init(void)
{
    static const char *rank_vars[] = {"FIREBREAK_RANK", "RANK",
        "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID", NULL};
    static const char *world_vars[] = {"FIREBREAK_WORLD_SIZE", "WORLD_SIZE",
        "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS", NULL};
    static const char *local_vars[] = {"LOCAL_RANK",
        "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", NULL};
    static const char *restart_vars[] = {"FIREBREAK_ATTEMPT",
        "TORCHELASTIC_RESTART_COUNT", NULL};

    if (g.initialized)
        return 0;
    g.initialized = 1;
    g.rank = env_int(rank_vars, 0);
    g.world_size = env_int(world_vars, 1);
    g.local_rank = env_int(local_vars, 0);
    g.restart_count = env_int(restart_vars, 0);

    /* Fault injection works with or without a supervisor. */
    const char *spec = fb__getenv("FIREBREAK_INJECT");
    if (spec) {
        fb__inject_plan plan;
        char err[256];
        if (fb__inject_parse(spec, &plan, err, sizeof err) == 0)
            fb__inject_arm(&plan, g.rank, g.restart_count);
        else
            fb__say("ignoring FIREBREAK_INJECT: %s\n", err);
    }

    const char *job = fb__getenv("FIREBREAK_JOB_ID");
    if (!job)
        return 0; /* no supervisor: record nothing */

    const char *run_dir = fb__getenv("FIREBREAK_RUN_DIR");
    if (run_dir)
        snprintf(g.run_dir, sizeof g.run_dir, "%s", run_dir);
    const char *ck = fb__getenv("FIREBREAK_CKPT_DIR");
    if (ck)
        snprintf(g.ckpt_dir, sizeof g.ckpt_dir, "%s", ck);
    else if (run_dir)
        snprintf(g.ckpt_dir, sizeof g.ckpt_dir, "%s/checkpoints", run_dir);

    uint64_t fr_cap = 0;
    const char *frc = fb__getenv("FIREBREAK_FR_CAPACITY");
    if (frc) {
        long long v;
        if (fb__parse_int(frc, 1, FB__SEG_FR_MAX_CAPACITY, &v) == 0)
            fr_cap = (uint64_t)v;
    }
    static const char *sup_vars[] = {"FIREBREAK_SUPERVISOR_PID", NULL};
    struct stat taken;
    memset(&taken, 0, sizeof taken);
    fb__seg_create_args args = {
        .job_id = job, .attempt = g.restart_count, .rank = g.rank,
        .world_size = g.world_size, .local_rank = g.local_rank,
        .supervisor_pid = env_int(sup_vars, 0),
        .fr_capacity = (uint32_t)fr_cap, .taken = &taken,
    };
    int rc = fb__seg_create(&g.seg, &args);
    if (rc == FB_ENOTOURS) {
        /* Someone else put a file under our name: never write into it, and
         * say so loudly (the supervisor refuses the file too, naming it). */
        char name[FB__SEG_NAME_MAX];
        fb__seg_name(name, sizeof name, job, g.restart_count, g.rank);
        fb__say("rank %d cannot create its segment: "
                "/dev/shm%s already exists and is not ours (owner uid %u, "
                "mode %04o); not recording this rank\n", g.rank, name,
                (unsigned)taken.st_uid, (unsigned)(taken.st_mode & 07777));
        return rc;
    }
    if (rc) {
        fb__say("rank %d cannot create its segment: %s\n",
                g.rank, fb_strerror(rc));
        return rc;
    }
    g.hdr = fb__seg_hdr(g.seg);
    g.pid = getpid();
    g.attached = 1;
    g.last_beat_ns = g.hdr->created_mono_ns;
    install_handlers();
    return 0;
}

void fb_finalize(void)
{
    fb__seg_header *h = own_hdr();
    if (!h)
        return;
    uint64_t now = fb__now_ns();
    uint32_t was = atomic_load_explicit(&h->phase, memory_order_relaxed);
    /* called twice: the first call's; done set by the program itself
     * (fb_set_phase) before: its work was training */
    if (was != FB_PHASE_DONE)
        g.phase_before_done = was;
    else if (!(atomic_load_explicit(&h->end_kind, memory_order_relaxed) == FB__END_FINALIZED))
        g.phase_before_done = FB_PHASE_TRAIN;
    atomic_store_explicit(&h->phase, FB_PHASE_DONE, memory_order_relaxed);
    atomic_store_explicit(&h->phase_since_mono_ns, now, memory_order_relaxed);
    atomic_store_explicit(&h->heartbeat_mono_ns, now, memory_order_relaxed);
    if (atomic_load_explicit(&h->end_kind, memory_order_relaxed) == FB__END_NONE) {
        atomic_store_explicit(&h->end_mono_ns, now, memory_order_relaxed);
        atomic_store_explicit(&h->end_kind, FB__END_FINALIZED, memory_order_release);
    }
    /* The mapping stays until exit: the exit handler still records the
     * exit code into it, and background checkpoint threads may report. */
}

fb_phase fb__lib_phase(void)
{
    return g.hdr ? (fb_phase)atomic_load_explicit(&g.hdr->phase, memory_order_relaxed)
                 : FB_PHASE_TRAIN;
}

int fb_attached(void) { return g.attached; }
int fb_rank(void) { return g.rank; }
int fb_world_size(void) { return g.world_size; }
int fb_restart_count(void) { return g.restart_count; }
const char *fb_run_dir(void) { return g.run_dir[0] ? g.run_dir : NULL; }

void fb_step(uint64_t step)
{
    uint64_t now = fb__now_ns();
    uint64_t dur = now - g.last_beat_ns;
    g.last_beat_ns = now;
    fb__seg_header *h = g.hdr;
    if (h) {
        uint64_t ewma = atomic_load_explicit(&h->step_ewma_ns, memory_order_relaxed);
        uint64_t done = atomic_load_explicit(&h->steps_done, memory_order_relaxed);
        if (done == 0) {
            atomic_store_explicit(&h->first_step_mono_ns, now, memory_order_relaxed);
            ewma = dur;
        } else {
            ewma = ewma - (ewma >> 3) + (dur >> 3);
        }
        atomic_store_explicit(&h->step, step, memory_order_relaxed);
        atomic_store_explicit(&h->last_step_ns, dur, memory_order_relaxed);
        atomic_store_explicit(&h->step_ewma_ns, ewma, memory_order_relaxed);
        atomic_store_explicit(&h->steps_done, done + 1, memory_order_relaxed);
        if (atomic_load_explicit(&h->phase, memory_order_relaxed) != FB_PHASE_TRAIN) {
            atomic_store_explicit(&h->phase, FB_PHASE_TRAIN, memory_order_relaxed);
            atomic_store_explicit(&h->phase_since_mono_ns, now, memory_order_relaxed);
        }
        atomic_store_explicit(&h->heartbeat_mono_ns, now, memory_order_release);
    }
    if (fb__inject_armed)
        fb__inject_step(step, dur);
}

void fb_set_phase(fb_phase phase)
{
    fb__seg_header *h = g.hdr;
    uint64_t now = fb__now_ns();
    if (phase == FB_PHASE_TRAIN)
        g.last_beat_ns = now; /* do not count a checkpoint as a step */
    if (!h)
        return;
    atomic_store_explicit(&h->phase, (uint32_t)phase, memory_order_relaxed);
    atomic_store_explicit(&h->phase_since_mono_ns, now, memory_order_relaxed);
    atomic_store_explicit(&h->heartbeat_mono_ns, now, memory_order_release);
}

void fb__lib_beat(uint64_t now)
{
    fb__seg_header *h = g.hdr;
    /* Never back: a coarse clock's beat may trail fb_step's by a tick. */
    if (h && now > atomic_load_explicit(&h->heartbeat_mono_ns, memory_order_relaxed))
        atomic_store_explicit(&h->heartbeat_mono_ns, now, memory_order_release);
}

void fb_heartbeat(void)
{
    fb__seg_header *h = g.hdr;
    if (h)
        atomic_store_explicit(&h->heartbeat_mono_ns, fb__now_ns(),
                              memory_order_release);
}
