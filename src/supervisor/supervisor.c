/*
 * supervisor.c -- the attempt loop of `firebreak run`: set up the run
 * directory and journal, launch, watch (signals, shim messages, pidfds,
 * segments), decide on a failure (record, snapshot evidence, stop every
 * rank, restart with back-off or give up), and clean up so that nothing is
 * left behind: no process, no segment.  What to decide is policy.c's
 * (restart or stop, back-off, crash loop); this file does what it says.
 *
 * Detection paths and their latency:
 *   - a local rank's death: its shim's waitpid() returns, the shim writes a
 *     message, poll() wakes us: well under a millisecond;
 *   - an mpirun rank's death: a pidfd per rank, same poll(): likewise;
 *   - a hang: heartbeats in the segments, checked every 50-250 ms
 *     (fb__sup_watch_period_ms: 2.5% of the smallest limit).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/jsonw.h"
#include "common/rundir.h"
#include "common/util.h"
#include "supervisor/ranklog.h"
#include "supervisor/sup.h"
#include "ckpt/tool.h"
#include "fr/fr.h"

void fb__sup_options_init(fb__sup_options *o)
{
    memset(o, 0, sizeof *o);
    o->nproc_per_node = 1;
    o->launcher = FB__LAUNCH_LOCAL;
    o->max_restarts = 3;
    o->hang_timeout_s = 300;
    o->startup_timeout_s = 600;
    o->node_timeout_s = 10;
    o->ckpt_timeout_s = 900;
    o->exit_timeout_s = 300;
    o->grace_s = 5;
    o->crash_loop = 2;
    o->sup_nice = 10;
    o->sup_rt = 1;
    o->run_root = "runs";
    o->preload_fr = 1;
    o->on_no_nodes = FB_ON_NO_NODES_STOP;
    o->incident_health = 1;
    o->persist_every = -1;
}

static const char *const launcher_names[] = {
    [FB__LAUNCH_LOCAL] = "local",
    [FB__LAUNCH_MPIRUN] = "mpirun",
    [FB__LAUNCH_SLURM] = "slurm",
};

static const char *const on_no_nodes_names[FB_ON_NO_NODES_COUNT_] = {
    [FB_ON_NO_NODES_STOP] = "stop",
    [FB_ON_NO_NODES_REQUEUE] = "requeue",
};

#define NAMES_N(t) ((int)(sizeof(t) / sizeof((t)[0])))

static const char *name_of(const char *const *names, int n, int v)
{
    return v >= 0 && v < n && names[v] ? names[v] : "unknown";
}

static int value_of(const char *const *names, int n, const char *name)
{
    for (int v = 0; name && v < n; v++)
        if (names[v] && !strcmp(names[v], name))
            return v;
    return -1;
}

const char *fb__sup_launcher_name(fb__launcher l)
{
    return name_of(launcher_names, NAMES_N(launcher_names), (int)l);
}

int fb__sup_launcher_from_name(const char *name)
{
    return value_of(launcher_names, NAMES_N(launcher_names), name);
}

const char *fb__sup_on_no_nodes_name(fb__on_no_nodes v)
{
    return name_of(on_no_nodes_names, NAMES_N(on_no_nodes_names), (int)v);
}

int fb__sup_on_no_nodes_from_name(const char *name)
{
    return value_of(on_no_nodes_names, NAMES_N(on_no_nodes_names), name);
}

double fb__sup_mono_to_wall(uint64_t mono_ns)
{
    uint64_t now = fb__now_ns();
    double wall = fb__wall_s();
    return wall - ((double)now - (double)mono_ns) / 1e9;
}

const char *fb__sup_fr_preload_path(void)
{
    static char path[PATH_MAX];
    char self[PATH_MAX];
    if (fb__self_dir(self, sizeof self))
        return NULL;
    static const char *const cands[] = {"%s/libfirebreak-mpi.so",
                                        "%s/../lib/libfirebreak-mpi.so",
                                        "%s/../lib/x86_64-linux-gnu/libfirebreak-mpi.so",
                                        "%s/src/fr/libfirebreak-mpi.so"};
    for (size_t i = 0; i < sizeof cands / sizeof cands[0]; i++) {
        snprintf(path, sizeof path, cands[i], self);
        if (access(path, R_OK) == 0)
            return path;
    }
    return NULL;
}

static void sanitize_name(const char *in, char *out, size_t size)
{
    size_t n = 0;
    for (; *in && n + 1 < size; in++) {
        char c = *in;
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                 (c >= '0' && c <= '9') || c == '_' || c == '-';
        out[n++] = ok ? c : '_';
    }
    out[n] = '\0';
    if (!n)
        snprintf(out, size, "job");
}

/* Create (or reuse) the run directory; its mode is set once it is locked. */
static int make_run_dir(fb__sup *s)
{
    const fb__sup_options *o = s->o;
    int rc;
    if (o->run_dir) {
        struct stat st;
        rc = fb__fmt(s->run_dir, sizeof s->run_dir, "%s", o->run_dir);
        s->made_run_dir = !rc && lstat(s->run_dir, &st) && errno == ENOENT;
        if (!rc)
            rc = fb__sup_mkdir_parents(s, s->run_dir);
    } else {
        time_t t = time(NULL);
        struct tm tm;
        localtime_r(&t, &tm);
        char stamp[32];
        strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
        struct stat st;
        int new_root = lstat(o->run_root, &st) && errno == ENOENT;
        rc = fb__sup_mkdir_parents(s, o->run_root);
        for (int k = 1; !rc && k < 1000; k++) {
            rc = k == 1 ? fb__fmt(s->run_dir, sizeof s->run_dir, "%s/%s-%s",
                                  o->run_root, s->name, stamp)
                        : fb__fmt(s->run_dir, sizeof s->run_dir, "%s/%s-%s-%d",
                                  o->run_root, s->name, stamp, k);
            if (rc)
                break;
            if (mkdir(s->run_dir, 0700) == 0) {
                s->made_run_dir = new_root ? 2 : 1;
                break;
            }
            if (errno != EEXIST)
                rc = -errno;
        }
    }
    if (rc) {
        fprintf(stderr, "firebreak run: cannot create the run directory %s: %s\n",
                o->run_dir ? o->run_dir : o->run_root, fb_strerror(rc));
        s->made_run_dir = 0;
        return rc;
    }
    /* Absolute paths: ranks may change directory. */
    char abs[PATH_MAX];
    if (realpath(s->run_dir, abs))
        snprintf(s->run_dir, sizeof s->run_dir, "%s", abs);
    return 0;
}

static int same_dir(const char *a, const char *b)
{
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

/* The run directory and the checkpoint directory, each locked for this run
 * before anything in it is written (rundir.c), then logs/ and `job`. */
static int setup_run_dir(fb__sup *s)
{
    const fb__sup_options *o = s->o;
    const char *base = strrchr(o->argv[0], '/');
    base = base ? base + 1 : o->argv[0];
    sanitize_name(o->name ? o->name : base, s->name, 24);

    unsigned char rnd[6];
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) {
        uint64_t x = fb__now_ns() ^ (uint64_t)getpid() << 32;
        memcpy(rnd, &x, sizeof rnd);
    }
    snprintf(s->job_id, sizeof s->job_id, "%s-%02x%02x%02x%02x%02x%02x", s->name,
             rnd[0], rnd[1], rnd[2], rnd[3], rnd[4], rnd[5]);

    /* Lock first: the directory may be another run's, which must not be
     * touched, not even its mode. */
    int rc = make_run_dir(s);
    if (!rc)
        rc = fb__sup_lock_dir(s, s->run_dir, "run directory", 0);
    if (!rc)
        rc = fb__sup_secure_dir(s, s->run_dir);
    if (rc)
        return rc;
    char abs[PATH_MAX];
    if (o->ckpt_dir) {
        rc = fb__sup_mkdir_parents(s, o->ckpt_dir);
        if (!rc && realpath(o->ckpt_dir, abs))
            snprintf(s->ckpt_dir, sizeof s->ckpt_dir, "%s", abs);
        else if (!rc)
            rc = fb__fmt(s->ckpt_dir, sizeof s->ckpt_dir, "%s", o->ckpt_dir);
    } else {
        rc = fb__rundir_path(s->ckpt_dir, sizeof s->ckpt_dir, s->run_dir, FB__RUNDIR_CKPT, 0);
        if (!rc && mkdir(s->ckpt_dir, 0700) && errno != EEXIST)
            rc = -errno;
    }
    if (rc) {
        fprintf(stderr, "firebreak run: cannot create the checkpoint directory "
                "%s: %s\n", o->ckpt_dir ? o->ckpt_dir : s->ckpt_dir, fb_strerror(rc));
        return rc;
    }
    /* A checkpoint directory is one run's too, wherever it is: two runs
     * writing and restoring the same steps would mix their states. */
    if (!same_dir(s->ckpt_dir, s->run_dir))
        rc = fb__sup_lock_dir(s, s->ckpt_dir, "checkpoint directory", 1);
    if (!rc)
        rc = fb__sup_secure_dir(s, s->ckpt_dir);
    if (!rc)
        rc = fb__rundir_path(s->logs_dir, sizeof s->logs_dir, s->run_dir, FB__RUNDIR_LOGS, 0);
    if (!rc && mkdir(s->logs_dir, 0700) && errno != EEXIST)
        rc = -errno;
    if (!rc)
        rc = fb__sup_secure_dir(s, s->logs_dir);
    if (!rc) {
        char path[PATH_MAX], line[80];
        snprintf(path, sizeof path, "%s/job", s->run_dir);
        int n = snprintf(line, sizeof line, "%s\n", s->job_id);
        rc = fb__write_file_atomic(path, line, (size_t)n);
    }
    if (rc && rc != -EBUSY)
        fprintf(stderr, "firebreak run: cannot prepare %s: %s\n", s->run_dir,
                fb_strerror(rc));
    return rc;
}

static void command_json(const fb__sup_options *o, fb__jsonw *w)
{
    fb__jsonw_arr_begin(w);
    for (char *const *a = o->argv; *a; a++)
        fb__jsonw_str(w, *a);
    fb__jsonw_arr_end(w);
}

static void options_json(const fb__sup_options *o, fb__jsonw *w)
{
    fb__jsonw_obj_begin(w);
    fb__jsonw_kint(w, "nproc_per_node", o->nproc_per_node);
    fb__jsonw_kstr(w, "launcher", fb__sup_launcher_name(o->launcher));
    fb__jsonw_kint(w, "max_restarts", o->max_restarts);
    fb__jsonw_kdouble(w, "hang_timeout_s", o->hang_timeout_s);
    fb__jsonw_kdouble(w, "startup_timeout_s", o->startup_timeout_s);
    fb__jsonw_kdouble(w, "node_timeout_s", o->node_timeout_s);
    fb__jsonw_kdouble(w, "ckpt_timeout_s", o->ckpt_timeout_s);
    fb__jsonw_kdouble(w, "attach_timeout_s", o->attach_timeout_s);
    fb__jsonw_kdouble(w, "exit_timeout_s", o->exit_timeout_s);
    fb__jsonw_kdouble(w, "grace_s", o->grace_s);
    fb__jsonw_kint(w, "crash_loop", o->crash_loop);
    fb__jsonw_kint(w, "supervisor_nice", o->sup_nice);
    fb__jsonw_kint(w, "supervisor_rt", o->sup_rt);
    fb__jsonw_kstr(w, "inject", o->inject);
    if (o->persist_every >= 0 || o->memory_ckpt_max) {
        fb__jsonw_kint(w, "persist_every", o->persist_every < 0 ? 1 : o->persist_every);
        fb__jsonw_kuint(w, "memory_ckpt_max", o->memory_ckpt_max);
    }
    fb__jsonw_obj_end(w);
}

/* ---- signals ---- */

static int setup_signals(fb__sup *s, sigset_t *old)
{
    /* A reader of the supervisor's output that goes away (a closed
     * terminal, `| head`, a tee that died) must not end the run: writes to
     * it fail with EPIPE instead, and the run goes on to its end, recorded.
     * For the rest of the process: its last lines come after the run.
     * What it starts gets the default back (proc.c: the shim and, at exec,
     * the ranks; slurm.c's and health.c's helpers). */
    signal(SIGPIPE, SIG_IGN);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    sigaddset(&set, SIGUSR1);
    if (sigprocmask(SIG_BLOCK, &set, old))
        return -errno;
    s->sigfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    return s->sigfd < 0 ? -errno : 0;
}

static fb__sup_unit *unit_by_shim(fb__sup *s, pid_t pid)
{
    for (int i = 0; i < s->nunits; i++)
        if (s->units[i].shim == pid)
            return &s->units[i];
    return NULL;
}

/* Did mpirun end before it started any rank of this attempt?  It makes
 * each rank's output directory (--output-filename) as it starts the rank,
 * so none there, and no rank attached, is none started: its own usage, its
 * host list, an application it cannot run. */
static int mpirun_started_none(fb__sup *s)
{
    char dir[PATH_MAX];
    struct stat st;
    if (s->o->launcher != FB__LAUNCH_MPIRUN || s->slurm)
        return 0;
    for (int r = 0; r < s->world; r++)
        if (s->ranks[r].seg)
            return 0;
    return !fb__rundir_path(dir, sizeof dir, s->run_dir, FB__RUNDIR_MPIRUN_OUT, s->attempt) &&
           stat(dir, &st) && errno == ENOENT;
}

/* mpirun ended and no rank's end decided: mpirun's own status is the
 * failure, when it is one. */
static void mpirun_failure(fb__sup *s, const fb__shim_msg *m)
{
    fb__sup_rank_end e = {.wstatus_known = 1, .wstatus = m->wstatus,
                          .exec_errno = m->exec_errno};
    fb__sup_end_verdict v;
    fb__sup_judge_end(&e, &v);
    if (v.how == FB__SUP_END_OK)
        return;
    /* the launcher's name and log: srun's under --launcher slurm (which
     * also keeps mpirun's output there with --mpirun) */
    const char *prog = s->slurm && !s->o->mpirun ? "srun" : "mpirun";
    char log[64] = "", dir[48];
    if (!s->slurm)
        fb__rundir_path(log, sizeof log, NULL, FB__RUNDIR_MPIRUN_LOG, 0);
    else if (!fb__rundir_path(dir, sizeof dir, NULL, FB__RUNDIR_SLURM_LOGS, s->attempt))
        snprintf(log, sizeof log, "%s/srun.log", dir);
    fb__sup_failure *f = &s->fail;
    memset(f, 0, sizeof *f);
    f->set = 1;
    f->kind = v.kind;
    f->rank = -1;
    f->step = s->max_step;
    f->occurred_ns = m->mono_ns;
    f->detected_ns = fb__now_ns();
    snprintf(f->phase, sizeof f->phase, "%s", s->attempt_ready_ns ? "train" : "init");
    if (v.how == FB__SUP_END_LAUNCH) {
        f->launch_error = 1;
        snprintf(f->detail, sizeof f->detail, "cannot start %s: %s", prog,
                 strerror(m->exec_errno));
    } else if (v.how == FB__SUP_END_SIGNAL) {
        f->signal = v.signal;
        snprintf(f->detail, sizeof f->detail, "%s killed by signal %d", prog,
                 f->signal);
    } else if (mpirun_started_none(s)) {
        /* as a program that cannot be executed: not restarted, the same
         * mpirun would refuse again; its own words in the detail */
        char path[PATH_MAX], tail[256], safe[256];
        tail[0] = '\0';
        if (!fb__rundir_path(path, sizeof path, s->run_dir, FB__RUNDIR_MPIRUN_LOG, 0))
            fb__rank_log_tail(path, tail, sizeof tail);
        for (char *nl; (nl = strchr(tail, '\n'));)
            *nl = nl[1] ? ' ' : '\0';
        f->kind = FB__SUP_FAIL_LAUNCH_FAILURE;
        f->launch_error = 1;
        f->has_exit_code = 1;
        f->exit_code = WEXITSTATUS(m->wstatus);
        snprintf(f->detail, sizeof f->detail,
                 "%s exited with code %d before starting any rank (%s%s%s)", prog,
                 f->exit_code, log, tail[0] ? ": " : "",
                 fb__safe_text(safe, sizeof safe, tail));
    } else {
        /* exit code, or a status that is neither (judged "vanished") */
        f->kind = FB__SUP_FAIL_ERROR_EXIT;
        f->has_exit_code = 1;
        f->exit_code = WEXITSTATUS(m->wstatus);
        snprintf(f->detail, sizeof f->detail,
                 "%s exited with code %d (no rank identified; see %s)", prog,
                 f->exit_code, log);
    }
}

static void on_shim_msg(fb__sup *s, fb__sup_unit *u, const fb__shim_msg *m)
{
    if (m->type == FB_SHIM_STARTED) {
        u->child = m->pid;
        if (u->rank >= 0)
            s->ranks[u->rank].pid = m->pid;
        return;
    }
    if (m->type != FB_SHIM_ENDED || u->ended)
        return;
    u->ended = 1;
    u->wstatus = m->wstatus;
    u->exec_errno = m->exec_errno;
    u->end_ns = m->mono_ns;
    if (u->rank >= 0) {
        fb__sup_rank_ended(s, u->rank, 1, m->wstatus, m->exec_errno, m->mono_ns);
        return;
    }
    if (u->rank == FB__SUP_UNIT_WATCHERS)
        return; /* slurm's node watchers: not the job */
    /* mpirun ended.  Ranks that went away are known through pidfds; give
     * every rank still unresolved its own end record first -- attaching
     * late to ranks that came and went between two looks (their segments
     * outlive them). */
    for (int r = 0; r < s->world; r++) {
        if (s->ranks[r].ended)
            continue;
        if (!s->ranks[r].seg)
            fb__sup_try_attach(s, r);
        if (s->ranks[r].seg)
            fb__sup_rank_ended(s, r, 0, 0, 0, m->mono_ns);
    }
    if (!s->fail.set && fb__sup_slurm_defer_step_end(s))
        return; /* a vanished rank's node may be dying: slurm.c decides */
    if (!s->fail.set)
        mpirun_failure(s, m);
}

void fb__sup_step_failure(fb__sup *s, const fb__sup_unit *u)
{
    fb__shim_msg m = {.type = FB_SHIM_ENDED, .pid = u->child, .wstatus = u->wstatus,
                      .exec_errno = u->exec_errno, .mono_ns = u->end_ns};
    if (!s->fail.set)
        mpirun_failure(s, &m);
}

static void drain_shim(fb__sup *s, fb__sup_unit *u)
{
    fb__shim_msg m;
    int r;
    /* The rank's output before its end is in the pipe by now: into the
     * log first, where the incident's last lines come from. */
    if (u->tee)
        fb__sup_tee_read(s, u->tee, 4u << 20);
    while ((r = fb__shim_read(u->msg_fd, &m)) > 0)
        on_shim_msg(s, u, &m);
}

static void reap_children(fb__sup *s)
{
    int ws;
    pid_t pid;
    while ((pid = waitpid(-1, &ws, WNOHANG)) > 0) {
        if (fb__sup_diagnose_reaped(s, pid, ws))
            continue;
        if (fb__shim_server_reaped(pid)) {
            fb__sup_log(s, "the shim server ended (status %d): the supervisor forks "
                        "the shims from now on", ws);
            continue;
        }
        fb__sup_unit *u = unit_by_shim(s, pid);
        if (!u) {
            if (!fb__sup_standby_reaped(s, pid))
                fb__sup_warm_reaped(s, pid); /* the warm pool's, or an orphan */
            continue;
        }
        drain_shim(s, u);
        if (!u->ended) {
            /* The shim died without reporting (killed): its rank went with
             * it (parent-death signal). */
            fb__shim_msg m = {.type = FB_SHIM_ENDED, .pid = u->child,
                              .wstatus = ws, .mono_ns = fb__now_ns()};
            on_shim_msg(s, u, &m);
        }
    }
}

static int all_units_ended(const fb__sup *s)
{
    for (int i = 0; i < s->nunits; i++)
        if (!s->units[i].ended)
            return 0;
    return 1;
}

static void journal_tick(fb__sup *s, uint64_t now);

/* What the loop waits on: an epoll set kept from one wake-up to the next.
 * poll() over every shim's pipe cost the kernel a wait-queue entry per
 * descriptor at each wake-up: at 1,024 ranks training, a fifth of the
 * supervisor's CPU.  Each wake-up lists the descriptors it wants, as
 * poll() did, and the set changes only by what differs from the last
 * list (a rank that ended, a tee closed); an attempt's start and end
 * rebuild it (their descriptor numbers are reused under the same tags). */
#define SUP_WAIT_MAX (1 + 1024 + 1024 + 1024 + 1)
#define SUP_TAG_SLURM 300000 /* tags ascend in the order they are listed */
static struct {
    int epfd;        /* -1: none */
    unsigned epoch;  /* bumped where descriptors are reused (below) */
    unsigned built;  /* the epoch the set was built in */
    int n;
    int tag[SUP_WAIT_MAX], fd[SUP_WAIT_MAX];
} g_wait = {.epfd = -1};

static void wait_set_reset(void)
{
    g_wait.epoch++;
}

static void wait_set_close(void)
{
    if (g_wait.epfd >= 0)
        close(g_wait.epfd);
    g_wait.epfd = -1;
    g_wait.n = 0;
    g_wait.epoch++;
}

/* Bring the epoll set to tag[]/fd[] (n entries, tags ascending): removals
 * first, so that a number closed and reused under another tag is added
 * afresh.  -errno when the set cannot be made. */
static int wait_set_update(const int *tag, const int *fd, int n)
{
    if (g_wait.epfd < 0 || g_wait.built != g_wait.epoch) {
        if (g_wait.epfd >= 0)
            close(g_wait.epfd);
        g_wait.n = 0;
        g_wait.epfd = epoll_create1(EPOLL_CLOEXEC);
        if (g_wait.epfd < 0)
            return -errno;
        g_wait.built = g_wait.epoch;
    }
    int i = 0, j = 0;
    while (i < g_wait.n) { /* removed, or another descriptor under the tag */
        while (j < n && tag[j] < g_wait.tag[i])
            j++;
        if (j == n || tag[j] != g_wait.tag[i] || fd[j] != g_wait.fd[i])
            epoll_ctl(g_wait.epfd, EPOLL_CTL_DEL, g_wait.fd[i], NULL); /* ENOENT: closed */
        i++;
    }
    for (i = 0, j = 0; j < n; j++) {
        while (i < g_wait.n && g_wait.tag[i] < tag[j])
            i++;
        if (i < g_wait.n && g_wait.tag[i] == tag[j] && g_wait.fd[i] == fd[j])
            continue;
        struct epoll_event ev = {.events = EPOLLIN, .data.u64 = (uint64_t)(uint32_t)tag[j]};
        if (epoll_ctl(g_wait.epfd, EPOLL_CTL_ADD, fd[j], &ev) && errno != EEXIST) {
            int e = errno;
            g_wait.epoch++; /* built again from scratch next time */
            return -e;
        }
    }
    memcpy(g_wait.tag, tag, sizeof *tag * (size_t)n);
    memcpy(g_wait.fd, fd, sizeof *fd * (size_t)n);
    g_wait.n = n;
    return 0;
}

static int tag_cmp(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* Handle one wake-up; a stop signal is left in s->stop_signal.
 * Every loop of the supervisor goes through here, so this is also where
 * the journal's retries happen (once a second). */
static void handle_events(fb__sup *s, int timeout_ms)
{
    journal_tick(s, fb__now_ns());
    fb__sup_tiers_poll(s);
    static int tag[SUP_WAIT_MAX], fds[SUP_WAIT_MAX], map[SUP_WAIT_MAX];
    int n = 0;
    tag[n] = -1;
    fds[n++] = s->sigfd;
    for (int i = 0; i < s->nunits && n < 1024; i++) {
        if (s->units[i].msg_fd < 0 || s->units[i].ended)
            continue;
        tag[n] = i;
        fds[n++] = s->units[i].msg_fd;
    }
    for (int r = 0; r < s->world && n < 2048; r++) {
        if (s->ranks[r].pidfd < 0 || s->ranks[r].ended)
            continue;
        tag[n] = 100000 + r;
        fds[n++] = s->ranks[r].pidfd;
    }
    int ntee = 0;
    for (int i = 0; i < s->nunits && ntee < 1024; i++) {
        if (!s->units[i].tee || s->units[i].tee->fd < 0)
            continue;
        tag[n] = 200000 + i;
        fds[n++] = s->units[i].tee->fd;
        ntee++;
    }
    int slurm_fd = fb__sup_slurm_fd(s);
    if (slurm_fd >= 0) {
        tag[n] = SUP_TAG_SLURM;
        fds[n++] = slurm_fd;
    }
    if (wait_set_update(tag, fds, n)) {
        /* No epoll set (out of memory or descriptors): poll() this once. */
        static struct pollfd pfd[SUP_WAIT_MAX];
        for (int i = 0; i < n; i++)
            pfd[i] = (struct pollfd){.fd = fds[i], .events = POLLIN};
        if (poll(pfd, (nfds_t)n, timeout_ms) <= 0)
            return;
        int k = 0;
        for (int i = 0; i < n; i++)
            if (pfd[i].revents)
                map[k++] = tag[i];
        n = k;
    } else {
        static struct epoll_event ev[SUP_WAIT_MAX];
        int rc = epoll_wait(g_wait.epfd, ev, SUP_WAIT_MAX, timeout_ms);
        if (rc <= 0)
            return;
        int k = 0;
        for (int i = 0; i < rc; i++) {
            int t = (int)(uint32_t)ev[i].data.u64;
            /* A descriptor closed while a child (a standby shim) still
             * holds a copy stays in the set, and a pipe's end keeps
             * reporting a hang-up: one no longer listed is dropped, and
             * the set is built afresh at the next wake-up. */
            if (!bsearch(&t, tag, (size_t)n, sizeof *tag, tag_cmp)) {
                g_wait.epoch++;
                continue;
            }
            map[k++] = t;
        }
        n = k;
        /* In the order poll() gave them: the signals (a SIGCHLD's reaping)
         * first, then the shims, the pidfds, the tees. */
        qsort(map, (size_t)n, sizeof *map, tag_cmp);
    }
    fb__journal_batch_begin(s->j);
    for (int i = 0; i < n; i++) {
        if (map[i] == -1) {
            struct signalfd_siginfo si;
            while (read(s->sigfd, &si, sizeof si) == (ssize_t)sizeof si) {
                int sig = (int)si.ssi_signo;
                if (sig == SIGCHLD) {
                    reap_children(s);
                } else if (sig == SIGUSR1) {
                    fb__sup_tiers_persist_request(s);
                    fb__sup_log(s, "forwarding SIGUSR1 to the ranks");
                    for (int k = 0; k < s->nunits; k++)
                        if (!s->units[k].ended)
                            fb__shim_signal(s->units[k].shim, SIGUSR1);
                } else if (!s->stop_signal) {
                    s->stop_signal = sig;
                } else {
                    s->stop_again = sig; /* Ctrl-C twice: stop now */
                }
            }
        } else if (map[i] == SUP_TAG_SLURM) {
            fb__sup_slurm_read(s);
        } else if (map[i] >= 200000) {
            fb__sup_tee_poll_read(s, s->units[map[i] - 200000].tee);
        } else if (map[i] >= 100000) {
            int r = map[i] - 100000;
            fb__sup_rank_ended(s, r, 0, 0, 0, fb__now_ns());
        } else {
            drain_shim(s, &s->units[map[i]]);
        }
    }
    fb__journal_batch_end(s->j);
}

/* Supervisor-side faults (after=DURATION): signals to a rank's process. */
static void fire_injections(fb__sup *s, uint64_t now)
{
    for (int i = 0; i < s->plan.count; i++) {
        fb__inject_fault *f = &s->plan.faults[i];
        if (!f->has_after || s->plan_fired[i])
            continue;
        if (f->attempt >= 0 && f->attempt != s->attempt)
            continue;
        if (now - s->attempt_start_ns < (uint64_t)(f->after_s * 1e9))
            continue;
        s->plan_fired[i] = 1;
        for (int r = 0; r < s->world; r++) {
            if (f->rank >= 0 && f->rank != r)
                continue;
            pid_t pid = s->ranks[r].pid;
            if (pid <= 0)
                continue;
            int sig = f->kind == FB__INJECT_KILL ? SIGKILL
                    : f->kind == FB__INJECT_HANG ? SIGSTOP : SIGSEGV;
            snprintf(s->ranks[r].injected, sizeof s->ranks[r].injected,
                     "%s:rank=%d,after=%gs", fb__inject_kind_name(f->kind), r, f->after_s);
            s->ranks[r].injected_kind = f->kind;
            s->ranks[r].inject_ns = fb__now_ns();
            fb__sup_log(s, "injecting fault %s (signal %d to pid %d)",
                        s->ranks[r].injected, sig, (int)pid);
            kill(pid, sig);
        }
    }
}

/* On a hang: analyze the flight recorders (the segment snapshots, and
 * PyTorch's own dumps when it wrote any) before anything is killed; the
 * analysis names the rank that never entered the collective where progress
 * stopped, and its verdict goes into the incident.  Whether its culprit
 * takes the blame is fb__sup_blame_hang's to say (policy.c).  Returns
 * the analyzer's JSON result for the journal (malloc'd), its rank lists
 * cut to SUP_FR_JSON_MAX_LIST entries so that a group of a million ranks
 * journals kilobytes, not megabytes; or NULL. */
#define SUP_FR_JSON_MAX_LIST 256

/* A hang blamed on silence alone that the flight recorder did not settle:
 * the detail says so, so that "silent the longest" is not read as "stopped
 * first". */
static void undecided_by_fr(fb__sup_failure *f)
{
    if (!f->by_silence)
        return;
    size_t l = strlen(f->detail);
    snprintf(f->detail + l, sizeof f->detail - l,
             "; the flight recorder could not tell which rank stopped first");
}

static char *analyze_hang(fb__sup *s)
{
    char *verdict_json = NULL;
    char segdir[PATH_MAX], torchdir[PATH_MAX], err[512];
    fb__rundir_path(segdir, sizeof segdir, s->run_dir, FB__RUNDIR_FR_ATTEMPT, s->attempt);
    fb__rundir_path(torchdir, sizeof torchdir, s->run_dir, FB__RUNDIR_FR_TORCH, s->attempt);
    const char *paths[2] = {segdir, torchdir};
    int npaths = 1;
    if (rmdir(torchdir) != 0 && errno == ENOTEMPTY)
        npaths = 2; /* PyTorch dumped its trace there */
    fb__fr_result *r = NULL;
    fb__sup_failure *f = &s->fail;
    fb__fr_options opt;
    fb__fr_options_init(&opt);
    opt.world_max = s->world; /* the rings are what ranks wrote */
    int rc = fb__fr_analyze_paths_opt(paths, npaths, &opt, &r, err, sizeof err);
    if (rc) {
        fb__sup_log(s, "flight-recorder analysis: %s", err);
        fb__sup_hang_facts hf = {.world = s->world, .declared = f->rank,
                                 .fr_analyzed = 1,
                                 .declared_by_silence = f->by_silence};
        fb__sup_hang_blame b;
        fb__sup_blame_hang(&hf, &b);
        if (b.basis == FB__SUP_HANG_UNDECIDED)
            fb__sup_hang_undecided(s, err);
        else
            undecided_by_fr(f);
        return NULL;
    }
    char summary[512];
    fb__fr_summary(r, summary, sizeof summary);
    int culprits[8];
    int n = fb__fr_culprit_ranks(r, culprits, 8);
    /* A mismatch where progress stopped names its culprits as a hang's do. */
    fb__fr_verdict_code vk = fb__fr_verdict_kind(r);
    fb__sup_hang_facts hf = {.world = s->world, .declared = f->rank,
                             .fr_hang = vk == FB__FR_HANG || vk == FB__FR_MISMATCH,
                             .fr_culprits = culprits, .fr_nculprits = n,
                             .fr_analyzed = 1, .declared_by_silence = f->by_silence};
    fb__sup_hang_blame b;
    fb__sup_blame_hang(&hf, &b);
    if (b.basis == FB__SUP_HANG_UNDECIDED) {
        fb__sup_hang_undecided(s, summary);
    } else if (b.fr_named) {
        if (b.rank != f->rank) {
            /* The step is the culprit's own (-1 when it did none, or its
             * segment is no longer trusted), never the rank first blamed. */
            f->rank = b.rank;
            const fb__sup_rank *cr = &s->ranks[f->rank];
            fb__seg_header *h = cr->seg && !cr->seg_corrupt ? fb__seg_hdr(cr->seg) : NULL;
            f->step = h && atomic_load_explicit(&h->steps_done, memory_order_relaxed)
                ? (int64_t)atomic_load_explicit(&h->step, memory_order_relaxed) : -1;
            snprintf(f->injected, sizeof f->injected, "%s", s->ranks[f->rank].injected);
            /* Lead with the rank blamed, not the one the detail began with. */
            char was[sizeof f->detail];
            snprintf(was, sizeof was, "%s", f->detail);
            snprintf(f->detail, sizeof f->detail, "rank %d, named by the flight "
                     "recorder; %s", f->rank, was);
        }
        size_t l = strlen(f->detail);
        snprintf(f->detail + l, sizeof f->detail - l, "; flight recorder: %s", summary);
    } else {
        /* said here only when the failure's own line will not say it */
        fb__sup_log(s, "flight recorder: %s", summary);
    }
    if (b.basis != FB__SUP_HANG_UNDECIDED && (!b.fr_named || n != 1))
        undecided_by_fr(f); /* no hang verdict, or several culprits */
    if (f->rank >= 0 && s->ranks[f->rank].where[0]) {
        size_t l = strlen(f->detail);
        snprintf(f->detail + l, sizeof f->detail - l, "; rank %d was at %s", f->rank,
                 s->ranks[f->rank].where);
    }
    fb__jsonw w;
    fb__jsonw_init(&w);
    if (fb__fr_result_json_max(r, &w, SUP_FR_JSON_MAX_LIST) == 0)
        verdict_json = strdup(fb__jsonw_text(&w));
    fb__jsonw_free(&w);
    fb__fr_result_free(r);
    return verdict_json;
}

/* At most this much of the segments' bytes is held in memory until the
 * next launch; beyond it the rest are written at once. */
#define SNAP_HOLD_MAX_BYTES (256u << 20)

static size_t snap_hold_max(void)
{
#ifdef FB_TEST_HOOKS
    /* test hook: a smaller hold (tests/supervisor/relaunch.sh) */
    const char *v = getenv("FIREBREAK_TEST_SNAP_HOLD_MAX");
    long long n;
    if (v && fb__parse_int(v, 0, SNAP_HOLD_MAX_BYTES, &n) == 0)
        return (size_t)n;
#endif
    return SNAP_HOLD_MAX_BYTES;
}

struct fb__sup_snap {
    fb__seg_copy *copy;
    char path[PATH_MAX];
};

/* Write the snapshots held since the failure (after the next launch, or
 * when the run ends without one). */
static void write_snapshots(fb__sup *s)
{
    for (int i = 0; i < s->nsnaps; i++) {
        int rc = fb__seg_copy_write(s->snaps[i].copy, s->snaps[i].path);
        if (rc)
            fb__sup_log(s, "cannot write the segment snapshot %s: %s",
                        s->snaps[i].path, fb_strerror(rc));
        else if (s->shared) /* written 0600: the run's group may read it too */
            chmod(s->snaps[i].path, 0640);
        fb__seg_copy_free(s->snaps[i].copy);
    }
    free(s->snaps);
    s->snaps = NULL;
    s->nsnaps = 0;
}

/* Every rank's segment as it is at the failure, into fr/attempt-N/.  With
 * `hold` the bytes are copied into memory now and the files written after
 * the next launch (write_snapshots): creating one file per rank is most of
 * a snapshot's cost, and it was on the path from the failure to the
 * relaunch.  A hang's analysis reads the files: no hold then. */
static void snapshot_segments(fb__sup *s, int hold)
{
    write_snapshots(s); /* none should be left; never more than one failure's */
    char dir[PATH_MAX];
    if (fb__rundir_path(dir, sizeof dir, s->run_dir, FB__RUNDIR_FR_ATTEMPT, s->attempt) ||
        fb__mkdir_p(dir, 0755))
        return;
    if (hold && !s->snaps && !(s->snaps = calloc((size_t)s->world, sizeof *s->snaps)))
        hold = 0;
    size_t held = 0, max = snap_hold_max();
    int over = 0; /* not held: over the cap */
    for (int r = 0; r < s->world; r++) {
        if (!s->ranks[r].seg)
            continue;
        char path[PATH_MAX];
        if (fb__fmt(path, sizeof path, "%s/rank-%d.fbseg", dir, r))
            continue;
        char name[FB__SEG_NAME_MAX];
        if (fb__seg_name(name, sizeof name, s->job_id, s->attempt, r))
            name[0] = '\0';
        fb__seg_copy *c = NULL;
        int rc = hold ? fb__seg_copy_take(s->ranks[r].seg, name[0] ? name : NULL,
                                          max - held, &c)
                      : -1;
        if (rc == 0) {
            held += fb__seg_copy_bytes(c);
            struct fb__sup_snap *sn = &s->snaps[s->nsnaps++];
            sn->copy = c;
            snprintf(sn->path, sizeof sn->path, "%s", path);
            continue;
        }
        over += rc == -E2BIG;
        if (fb__seg_dump_sparse(s->ranks[r].seg, name[0] ? name : NULL, path) == 0 &&
            s->shared) /* fb__seg_dump writes 0600: the run's group may read it too */
            chmod(path, 0640);
    }
    if (over)
        fb__sup_log(s, "attempt %d: %d segment snapshot%s written before the relaunch: "
                    "over the %zu bytes held in memory until it (%zu held)", s->attempt,
                    over, over == 1 ? "" : "s", max, held);
}

/* mpirun (Open MPI 4) answers SIGTERM by sending its ranks SIGCONT, then
 * SIGTERM only odls_base_sigkill_timeout (1 s) later: a second of training
 * on every relaunch, checkpoints taken after the failure included.  The
 * ranks it started get the signal from us at once, through the pidfds the
 * watch holds; mpirun still ends the job its way. */
static void signal_mpirun_ranks(fb__sup *s, int sig)
{
    if (s->o->launcher != FB__LAUNCH_MPIRUN || s->slurm)
        return;
    pid_t mpirun = 0;
    for (int i = 0; i < s->nunits; i++)
        if (s->units[i].rank == -1 && !s->units[i].ended) /* launch.c */
            mpirun = s->units[i].child;
    if (mpirun <= 0)
        return;
    for (int r = 0; r < s->world; r++)
        if (!s->ranks[r].ended && s->ranks[r].pidfd >= 0)
            fb__proc_signal_child(s->ranks[r].pidfd, s->ranks[r].pid, mpirun, sig);
}

/* A failure's first moments, until its ranks are stopped, at real-time
 * priority where allowed: its evidence and the stop's signals otherwise
 * wait behind every rank still training (docs/supervisor.md,
 * "Priority"). */
static void stop_rt_enter(fb__sup *s)
{
    int prio = fb__sup_stop_rt_priority(s->o->sup_rt, s->o->launcher != FB__LAUNCH_SLURM,
                                        s->fail.kind);
    if (!prio || s->rt_prio || s->rt_refused)
        return;
    int rc = fb__proc_rt_enter(prio);
    if (rc == 0) {
        s->rt_prio = prio;
        return;
    }
    s->rt_refused = 1;
    fb__sup_log(s, "real-time priority %d for a failure's stop: %s (the stop shares the "
                "CPUs with the ranks; --supervisor-rt 0 does not ask)", prio,
                fb_strerror(rc));
}

static void stop_rt_leave(fb__sup *s)
{
    if (!s->rt_prio)
        return;
    fb__proc_rt_leave();
    s->relaunch.rt = s->rt_prio;
    s->rt_prio = 0;
}

/* Stop every unit: SIGTERM through the shims, SIGKILL after the grace
 * period, then sweep anything that escaped. */
static void stop_all(fb__sup *s, int sig)
{
    uint64_t t0 = fb__now_ns();
    s->stopped_any = 1;
    fb__sup_slurm_keep(s); /* under slurm: node memory outlives the stop */
    for (int i = 0; i < s->nunits; i++)
        if (!s->units[i].ended)
            fb__shim_signal(s->units[i].shim, sig ? sig : SIGTERM);
    signal_mpirun_ranks(s, sig ? sig : SIGTERM);
    uint64_t grace = (uint64_t)(s->o->grace_s * 1e9);
    int hard = 0;
    while (!all_units_ended(s)) {
        uint64_t now = fb__now_ns();
        if (!hard && (now - t0 >= grace || s->stop_again)) {
            if (now - t0 < grace)
                fb__sup_log(s, "received %s again: killing the ranks now, without "
                            "the rest of --grace", strsignal(s->stop_again));
            hard = 1;
            for (int i = 0; i < s->nunits; i++)
                if (!s->units[i].ended)
                    fb__shim_stop(s->units[i].shim, 1);
        }
        if (hard == 1 && now - t0 >= grace + 5000000000ull) {
            hard = 2;
            fb__sup_log(s, "a shim did not report its rank's end within 5 s "
                        "of the hard stop: killed");
            for (int i = 0; i < s->nunits; i++)
                if (!s->units[i].ended)
                    kill(s->units[i].shim, SIGKILL);
        }
        handle_events(s, 10);
    }
    s->relaunch.at[FB__RL_STOPPED] = fb__now_ns();
    /* the warm pool and the standby shims wait for the next attempt; the
     * health checks of earlier failures go on */
    int nkeep = s->world + FB__SUP_MAX_WARM + FB__SUP_DIAG_KEEP_MAX + 1;
    pid_t *keep = malloc((size_t)nkeep * sizeof *keep);
    int n = keep ? fb__sup_warm_keep(s, keep, FB__SUP_MAX_WARM) : 0;
    if (keep) {
        if (fb__shim_server_pid() > 0)
            keep[n++] = fb__shim_server_pid();
        n += fb__sup_diagnose_keep(s, keep + n, FB__SUP_DIAG_KEEP_MAX);
        n += fb__sup_standby_keep(s, keep + n, nkeep - n);
    } else {
        fb__sup_standby_close(s);
        fb__sup_diagnose_poll(s, 1); /* nothing kept: not swept mid-check */
        fb__shim_server_stop(); /* nor the shim server: forks from now on */
    }
    fb__proc_sweep(keep, n, 2000);
    free(keep);
    s->relaunch.at[FB__RL_SWEPT] = fb__now_ns();
    stop_rt_leave(s);
}

static void close_attempt(fb__sup *s)
{
    fb__sup_lateness_end(s); /* reads the segments: before they close */
    fb__sup_sdc_attempt_end(s);
    for (int i = 0; i < s->nunits; i++) {
        if (s->units[i].msg_fd >= 0)
            close(s->units[i].msg_fd);
        fb__sup_tee_close(s, s->units[i].tee);
        s->units[i].tee = NULL;
    }
    if (s->tee_dropped) {
        fb__sup_log(s, "%llu line%s of rank output not shown: the console did not "
                    "keep up; the logs have them", (unsigned long long)s->tee_dropped,
                    s->tee_dropped == 1 ? "" : "s");
        s->tee_dropped = 0;
    }
    fb__sup_reports_lost_say(s);
    for (int r = 0; r < s->world; r++) {
        fb__seg_close(s->ranks[r].seg);
        if (s->ranks[r].pidfd >= 0)
            close(s->ranks[r].pidfd);
        memset(&s->ranks[r], 0, sizeof s->ranks[r]);
        s->ranks[r].pidfd = -1;
    }
    s->nunits = 0;
    wait_set_reset(); /* the next attempt's descriptors reuse these numbers */
    fb__seg_remove_job(s->job_id, s->attempt);
    char shm_dir[PATH_MAX];
    if (s->o->launcher == FB__LAUNCH_MPIRUN &&
        fb__sup_mpi_shm_dir(s, shm_dir, sizeof shm_dir) == 0 &&
        fb__sup_mpi_shm_dir_ours(shm_dir))
        fb__rm_rf(shm_dir);
}

static void add_result_incident(fb__sup *s, const fb__sup_failure *f, double detect_ms,
                                double lost_s)
{
    fb__sup_result *res = s->res;
    if (res->nincidents >= FB__SUP_MAX_INCIDENTS)
        return;
    fb__sup_incident *in = &res->incidents[res->nincidents++];
    snprintf(in->kind, sizeof in->kind, "%s", fb__sup_fail_kind_name(f->kind));
    in->rank = f->rank;
    in->step = f->step;
    in->attempt = s->attempt;
    in->detect_ms = detect_ms;
    in->lost_s = lost_s;
    in->signal = f->signal;
    in->exit_code = f->has_exit_code ? f->exit_code : -1;
    snprintf(in->detail, sizeof in->detail, "%s", f->detail);
}

/* A failed rank of the local launcher that left its exception in
 * TORCHELASTIC_ERROR_FILE (PyTorch's @record): the message and the user's
 * frame join the detail. */
static void error_file_detail(fb__sup *s, fb__sup_failure *f)
{
    if (s->o->launcher != FB__LAUNCH_LOCAL || f->rank < 0 || f->rank >= s->world ||
        f->kind == FB__SUP_FAIL_HANG)
        return;
    char path[PATH_MAX], msg[256], where[256];
    if (fb__sup_error_file_path(s, f->rank, path, sizeof path))
        return;
    int rc = fb__sup_error_file_read(path, msg, sizeof msg, where, sizeof where);
    if (rc == -ENOENT)
        return;
    if (rc) {
        fb__sup_log(s, "rank %d's error file %s: %s", f->rank, path, fb_strerror(rc));
        return;
    }
    size_t l = strlen(f->detail);
    snprintf(f->detail + l, sizeof f->detail - l, "; %s%s%s", msg,
             where[0] ? " at " : "", where);
}

/* Record the attempt's failure in the journal and the result. */
static void record_failure(fb__sup *s, const char *fr_verdict)
{
    fb__sup_failure *f = &s->fail;
    double detect_ms = (double)(f->detected_ns - f->occurred_ns) / 1e6;
    /* Work lost: training since the newest durable checkpoint, or since
     * this attempt became ready when none was made in it. */
    double lost_s = -1;
    if (s->attempt_ready_ns) {
        uint64_t from = s->attempt_ready_ns;
        if (s->durable_ns > from)
            from = s->durable_ns;
        lost_s = f->occurred_ns > from ? (double)(f->occurred_ns - from) / 1e9 : 0;
    }
    error_file_detail(s, f);
    char last[2048];
    fb__sup_last_lines(s, f->rank, last, sizeof last);
    const char *node, *host;
    fb__sup_failure_where(s, f, &node, &host);
    fb__journal_incident inc = {
        .attempt_id = s->attempt_id, .kind = fb__sup_fail_kind_name(f->kind),
        .occurred_at = fb__sup_mono_to_wall(f->occurred_ns),
        .detected_at = fb__sup_mono_to_wall(f->detected_ns),
        .detect_ms = detect_ms, .rank = f->rank, .node = node, .host = host,
        .signal = f->signal, .has_exit_code = f->has_exit_code,
        .exit_code = f->exit_code, .phase = f->phase, .step = f->step,
        .lost_s = lost_s, .injected = f->injected[0] ? f->injected : NULL,
        .detail = f->detail, .last_lines = last[0] ? last : NULL,
        .fr_verdict = fr_verdict && fr_verdict[0] ? fr_verdict : NULL,
    };
    fb__journal_add_incident(s->j, &inc, &s->fail_incident_id);
    add_result_incident(s, f, detect_ms, lost_s);
    fb__sup_log(s, "%s: %s (detected in %.1f ms%s)", fb__sup_fail_kind_name(f->kind),
                f->detail, detect_ms,
                f->injected[0] ? ", injected" : "");
    if (last[0] && !s->o->quiet) {
        fprintf(stderr, "  last output of rank %d:\n", f->rank);
        char shown[sizeof last];
        for (char *line = strtok(last, "\n"); line; line = strtok(NULL, "\n"))
            fprintf(stderr, "    | %s\n", fb__safe_text(shown, sizeof shown, line));
    }
}

static void finish_attempt_row(fb__sup *s, const char *outcome)
{
    fb__journal_attempt_real(s->j, s->attempt_id, "ended_at", fb__wall_s());
    fb__journal_attempt_text(s->j, s->attempt_id, "outcome", outcome);
    if (s->max_step >= 0)
        fb__journal_attempt_int(s->j, s->attempt_id, "end_step", s->max_step);
    fb__journal_flush(s->j);
}

static void add_useful(fb__sup *s, uint64_t end_ns, double lost_s)
{
    if (!s->attempt_ready_ns || end_ns <= s->attempt_ready_ns)
        return;
    double u = (double)(end_ns - s->attempt_ready_ns) / 1e9;
    if (lost_s > 0)
        u -= lost_s;
    if (u > 0)
        s->useful_s += u;
}

static void on_set_aside(void *arg, uint64_t step, int set_aside, const char *why)
{
    fb__sup *s = arg;
    if (!set_aside) { /* another job size's: nothing wrong with it */
        fb__sup_log(s, "checkpoint %llu, another job size's, not chosen: %s",
                    (unsigned long long)step, why);
        return;
    }
    if (set_aside == 2) { /* a save cut short: expected after a failure */
        fb__sup_log(s, "checkpoint %llu before the launch: %s (its shards must not "
                    "mix with the next attempt's saves of that step)",
                    (unsigned long long)step, why);
        return;
    }
    char detail[768];
    snprintf(detail, sizeof detail, "checkpoint %llu set aside before the launch "
             "(every rank must restore the same step): %s",
             (unsigned long long)step, why);
    double now = fb__wall_s();
    fb__journal_incident inc = {.attempt_id = s->attempt_id,
        .kind = fb__sup_fail_kind_name(FB__SUP_FAIL_RESTORE_FALLBACK),
        .occurred_at = now, .detected_at = now,
        .rank = -1, .phase = "restore", .step = (int64_t)step, .lost_s = -1,
        .detail = detail};
    char evidence[1200];
    fb__sup_classify_row(&inc, 0, evidence, sizeof evidence);
    fb__journal_add_incident(s->j, &inc, NULL);
    fb__sup_log(s, "%s", detail);
}

/* Asked during the check below: signals keep being answered, and a stop
 * (SIGTERM, SIGINT, SIGHUP) ends the check. */
static int stop_asked(void *arg)
{
    fb__sup *s = arg;
    handle_events(s, 0);
    return s->stop_signal != 0;
}

/* Before every launch, the first included: agree on the checkpoint every
 * rank will restore.  Each rank verifies only its own shard; a corrupt
 * shard elsewhere would make ranks restore different steps, so the
 * supervisor verifies the newest complete checkpoint as a whole and sets
 * aside the ones that fail. */
static void prepare_restore(fb__sup *s)
{
    uint64_t step;
    int rc;
    if (s->slurm && s->mem_dir[0])
        return; /* each node's memory holds its own ranks: nodemem.c decides */
    /* No rank runs now, and no copy of ours from node memory (SIGUSR1's is
     * waited for): the incomplete checkpoints newer than the one chosen,
     * in node memory and in storage, are saves cut short, which the new
     * attempt's saves of the same steps would complete with shards of
     * another run (ranks that save before every rank restored). */
    if (s->mem_dir[0]) {
        fb__sup_tiers_quiesce(s);
        /* Node memory first; storage is read only when it may hold a
         * newer step (a rank that crashed restores with no storage read). */
        rc = fb__ckpt_prepare_restore(s->mem_dir, s->world, 2, 1, &step, on_set_aside,
                                      stop_asked, s);
        if (rc == -ECANCELED)
            return;
        if (rc == 0) {
            fb__sup_log(s, "attempt %d will restore checkpoint %llu from node "
                        "memory (verified)", s->attempt, (unsigned long long)step);
            if (!fb__sup_tiers_storage_newer(s, step)) {
                (void)fb__ckpt_drop_incomplete(s->ckpt_dir, s->world, 1, step,
                                               on_set_aside, s);
                return;
            }
        }
    }
    rc = fb__ckpt_prepare_restore(s->ckpt_dir, s->world, 2, 1, &step,
                                  on_set_aside, stop_asked, s);
    if (rc == 0)
        fb__sup_log(s, "attempt %d will restore checkpoint %llu (verified)",
                    s->attempt, (unsigned long long)step);
    else if (rc != FB_ENOCKPT && rc != -ECANCELED)
        fb__sup_log(s, "cannot check the checkpoints in %s: %s", s->ckpt_dir,
                    fb_strerror(rc));
}

/* How long a launch waits for its ranks' execs before it goes on. */
#define LAUNCH_EXEC_WAIT_MS 10000

/* Until every shim of the local launcher said STARTED, which it sends once
 * its rank's exec is done (proc.c): the launch is over when the last rank
 * runs its program, and launched_at says so.  At a relaunch the shims
 * start their ranks together, after the last fork (launch.c's go pipe).
 * Messages of units past what one poll() watches are read here directly. */
static void wait_execs(fb__sup *s)
{
    uint64_t deadline = fb__now_ns() + LAUNCH_EXEC_WAIT_MS * 1000000ull;
    int k = 0;
    while (!s->stop_signal) {
        while (k < s->nunits && (s->units[k].child || s->units[k].ended))
            k++;
        if (k == s->nunits)
            return;
        drain_shim(s, &s->units[k]);
        if (s->units[k].child || s->units[k].ended)
            continue;
        if (fb__now_ns() > deadline) {
            fb__sup_log(s, "attempt %d: rank %d's program had not started after %d s: "
                        "going on", s->attempt, s->units[k].rank,
                        LAUNCH_EXEC_WAIT_MS / 1000);
            return;
        }
        handle_events(s, 5);
    }
}

/* After a failure: where the time from its detection to the last new
 * rank's exec went, part by part (docs/supervisor.md, "What happens on a
 * failure", step 6). */
static void say_relaunch(fb__sup *s)
{
    const uint64_t *t = s->relaunch.at; /* each part ends at the next mark */
    for (int i = 0; i < FB__RL_MARKS; i++)
        if (!t[i] || (i && t[i] < t[i - 1]))
            return; /* not a relaunch after a failure, or not every part */
    double ms[FB__RL_MARKS - 1];
    for (int i = 0; i < FB__RL_MARKS - 1; i++)
        ms[i] = (double)(t[i + 1] - t[i]) / 1e6;
    /* The launch's wait for the warm pool's imports is its own part. */
    double warm = (double)s->relaunch.warm_ns / 1e6;
    char wpart[64] = "", standing[64] = "";
    if (s->relaunch.warm_ns && warm <= ms[7]) {
        ms[7] -= warm;
        snprintf(wpart, sizeof wpart, ", warm interpreters' imports %.1f", warm);
    }
    /* shims forked ahead: the local launcher's, when no warm pool served */
    if (s->o->launcher == FB__LAUNCH_LOCAL && !s->relaunch.warm_ns)
        snprintf(standing, sizeof standing, " (%d of %d shims standing by)",
                 s->relaunch.standing, s->world);
    fb__sup_log(s, "attempt %d: relaunched %.1f ms after the detection: earlier "
                "diagnosis %.1f, evidence %.1f, stop %.1f, sweep %.1f, record %.1f, "
                "between attempts %.1f, checkpoint check %.1f, forks %.1f%s%s, "
                "execs %.1f ms%s",
                s->attempt, (double)(t[FB__RL_EXECS] - t[FB__RL_DETECTED]) / 1e6,
                ms[0], ms[1], ms[2], ms[3], ms[4], ms[5], ms[6], ms[7], standing, wpart,
                ms[8], s->relaunch.rt ? "; stopped at real-time priority" : "");
}

/* Launch the attempt's ranks; a launch that fails is the attempt's
 * failure (not restarted). */
static void start_attempt(fb__sup *s)
{
    wait_set_reset();
    s->attempt_start_ns = fb__now_ns();
    s->relaunch.at[FB__RL_STARTED] = s->attempt_start_ns;
    s->relaunch.warm_ns = 0;
    s->attempt_ready_ns = 0;
    s->work_over_ns = 0;
    s->max_step = -1;
    s->restored_step = -1;
    s->attempt_newest = -1;
    s->older_said = 0;
    s->restore_s = 0;
    memset(&s->fail, 0, sizeof s->fail);
    memset(s->plan_fired, 0, sizeof s->plan_fired);
    s->nckpts = 0; /* this attempt's commits only (watch.c, ckpt_track) */
    fb__journal_begin_attempt(s->j, s->attempt, fb__wall_s(), &s->attempt_id);
    prepare_restore(s);
    s->relaunch.at[FB__RL_CHECKED] = fb__now_ns();
    s->relaunch.standing = fb__sup_standby_count(s);

    /* A stop during the check: launch nothing; the watch loop ends at once. */
    int rc = s->stop_signal ? 0 : fb__sup_launch(s);
    s->relaunch.at[FB__RL_FORKED] = fb__now_ns();
    if (rc) {
        fb__sup_failure *f = &s->fail;
        f->set = 1;
        f->launch_error = 1;
        f->rank = -1;
        f->step = -1;
        f->occurred_ns = f->detected_ns = fb__now_ns();
        f->kind = FB__SUP_FAIL_LAUNCH_FAILURE;
        snprintf(f->phase, sizeof f->phase, "init");
        snprintf(f->detail, sizeof f->detail, "cannot launch the ranks: %s",
                 s->launch_detail[0] ? s->launch_detail : fb_strerror(rc));
    } else if (!s->stop_signal) {
        if (s->o->launcher == FB__LAUNCH_LOCAL)
            wait_execs(s);
        s->relaunch.at[FB__RL_EXECS] = fb__now_ns();
        fb__journal_attempt_real(s->j, s->attempt_id, "launched_at", fb__wall_s());
        fb__sup_place_ranks(s);
        fb__sup_log(s, "attempt %d: launched %d rank%s (%s)", s->attempt, s->world,
                    s->world == 1 ? "" : "s", fb__sup_launcher_name(s->o->launcher));
        say_relaunch(s);
    }
    fb__sup_standby_after_launch(s);
    write_snapshots(s); /* the last attempt's evidence, off the relaunch's path */
    fb__sup_diagnose_poll(s, 0);
}

/* The attempt failed: keep the evidence, record, stop every rank. */
static void fail_attempt(fb__sup *s)
{
    memset(&s->relaunch, 0, sizeof s->relaunch);
    s->relaunch.at[FB__RL_DETECTED] = s->fail.detected_ns;
    /* Earlier failures' diagnoses that are done; those still under way go
     * on (their checks are kept from the sweep) and end from the loop. */
    fb__sup_diagnose_poll(s, 0);
    s->relaunch.at[FB__RL_EARLIER] = fb__now_ns();
    if (s->fail.kind == FB__SUP_FAIL_HANG)
        fb__sup_request_dumps(s);
    /* Under slurm the watchers snapshot their nodes' ranks too, and the
     * node is blamed once the flight recorder has named the rank. */
    if (s->slurm && s->fail.kind == FB__SUP_FAIL_HANG)
        fb__sup_slurm_snapshot(s);
    /* Held in memory until the next launch, but for a hang, whose
     * analysis reads the files, and under slurm, whose watchers write
     * their nodes' snapshots beside these. */
    snapshot_segments(s, s->fail.kind != FB__SUP_FAIL_HANG && !s->slurm);
    char *verdict = s->fail.kind == FB__SUP_FAIL_HANG ? analyze_hang(s) : NULL;
    if (s->slurm)
        fb__sup_slurm_on_failure(s);
    record_failure(s, verdict);
    add_useful(s, s->fail.occurred_ns,
               s->res->nincidents ? s->res->incidents[s->res->nincidents - 1].lost_s : 0);
    s->relaunch.at[FB__RL_EVIDENCE] = fb__now_ns();
    stop_all(s, SIGTERM);
    /* health, kernel log, root cause: the health check runs beside the
     * relaunch and is finished from the loop (diagnose.c) */
    fb__sup_diagnose_start(s, verdict);
    free(verdict);
    fb__sup_sdc_on_failure(s); /* once stopped: set aside later checkpoints */
    finish_attempt_row(s, "failed");
    s->relaunch.at[FB__RL_CLOSED] = fb__now_ns();
}

/* Run one attempt to its end.  Returns 1 when the job completed, 0 when it
 * failed or was stopped. */
static int run_attempt(fb__sup *s)
{
    /* The journal: one transaction per wake-up, not one per row. */
    fb__journal_batch_begin(s->j);
    start_attempt(s);
    fb__journal_batch_end(s->j);
    while (!s->fail.set && !s->stop_signal && !all_units_ended(s)) {
        int wait_ms = fb__sup_watch_period_ms(s);
        int standby_ms = fb__sup_standby_due_ms(s); /* the standby's next forks */
        handle_events(s, standby_ms >= 0 && standby_ms < wait_ms ? standby_ms : wait_ms);
        /* A failure or a stop signal: straight to the last look below, not
         * a pass of the segments before it too (at 256 ranks, 0.3-40 ms
         * between a detection and the stop). */
        if (s->fail.set || s->stop_signal)
            break;
        fb__journal_batch_begin(s->j);
        uint64_t now = fb__now_ns();
        fb__sup_watch(s, now);
        fb__sup_warm_tick(s);
        fb__sup_standby_tick(s);
        fb__sup_diagnose_poll(s, 0);
        fire_injections(s, now);
        if (s->slurm)
            fb__sup_slurm_tick(s, now);
        fb__sup_status(s, now, 0);
        fb__journal_batch_end(s->j);
    }
    if (s->fail.set)
        stop_rt_enter(s); /* until stop_all's end */
    /* Last look at the segments: reports sent just before the end, in one
     * transaction as the loop's. */
    fb__journal_batch_begin(s->j);
    fb__sup_watch(s, fb__now_ns());
    fb__journal_batch_end(s->j);
    int completed = !s->fail.set && !s->stop_signal;
    uint64_t end_ns = fb__now_ns();
    if (s->fail.set) {
        fail_attempt(s);
    } else if (s->stop_signal) {
        fb__sup_diagnose_poll(s, 1);
        fb__sup_standby_close(s);
        fb__sup_log(s, "received %s: stopping the ranks", strsignal(s->stop_signal));
        add_useful(s, end_ns, 0);
        stop_all(s, s->stop_signal == SIGINT ? SIGINT : SIGTERM);
        finish_attempt_row(s, "stopped");
    } else {
        add_useful(s, end_ns, 0);
        finish_attempt_row(s, "completed");
        fb__sup_diagnose_poll(s, 1);
        fb__sup_standby_close(s);
        fb__shim_server_stop(); /* no shim after the last attempt */
        fb__proc_sweep(NULL, 0, 1000);
    }
    close_attempt(s);
    return completed;
}

/* Sleep up to `ms`, still answering signals. */
static void backoff_wait(fb__sup *s, double seconds)
{
    uint64_t until = fb__now_ns() + (uint64_t)(seconds * 1e9);
    while (!s->stop_signal && fb__now_ns() < until) {
        handle_events(s, 50);
        fb__sup_diagnose_poll(s, 0); /* its output read as it comes */
    }
}

/* ---- the journal's health ---- */

/* Say when the journal starts or stops failing, and what it dropped: a
 * journal that cannot be written must never look like a quiet run. */
static void report_journal(fb__sup *s)
{
    fb__journal_status st;
    fb__journal_get_status(s->j, &st);
    if (st.failing && !s->journal_failing)
        fb__sup_warn(s, "journal %s cannot be written: %s. Keeping %zu row%s and "
                     "%zu step sample%s in memory (at most 4096 and 65536), "
                     "retrying every second", st.path, st.last_error,
                     st.pending_rows, st.pending_rows == 1 ? "" : "s",
                     st.pending_samples, st.pending_samples == 1 ? "" : "s");
    else if (!st.failing && s->journal_failing)
        fb__sup_warn(s, "journal %s is written again; the delayed rows are in it",
                     st.path);
    uint64_t dropped = st.dropped_rows + st.dropped_samples;
    if (dropped > s->journal_dropped_seen)
        fb__sup_warn(s, "journal %s: %llu row%s and %llu step sample%s dropped so "
                     "far (%s)", st.path, (unsigned long long)st.dropped_rows,
                     st.dropped_rows == 1 ? "" : "s",
                     (unsigned long long)st.dropped_samples,
                     st.dropped_samples == 1 ? "" : "s", st.last_error);
    s->journal_failing = st.failing;
    s->journal_dropped_seen = dropped;
}

/* Once a second: write buffered samples, retry what failed. */
static void journal_tick(fb__sup *s, uint64_t now)
{
    if (!s->j || now - s->journal_tick_ns < 1000000000ull)
        return;
    s->journal_tick_ns = now;
    fb__journal_flush(s->j);
    report_journal(s);
}

/* End of the run: a few last tries (the disk may have room again), close,
 * and make what was lost part of the result: exit status 3 unless a signal
 * stopped the run. */
static void close_journal(fb__sup *s)
{
    fb__sup_result *res = s->res;
    for (int k = 0; k < 5 && fb__journal_flush(s->j) != 0; k++) {
        struct timespec ts = {0, 200000000};
        nanosleep(&ts, NULL);
    }
    report_journal(s);
    fb__journal_status st;
    fb__journal_close_status(s->j, &st);
    s->j = NULL;
    if (!st.dropped_rows && !st.dropped_samples)
        return;
    res->journal_incomplete = 1;
    res->journal_dropped_rows = st.dropped_rows;
    res->journal_dropped_samples = st.dropped_samples;
    snprintf(res->journal_error, sizeof res->journal_error, "%s", st.last_error);
    fb__sup_warn(s, "the journal %s is INCOMPLETE: %llu row%s and %llu step "
                 "sample%s could not be written (%s). It may show the run as "
                 "still running, or miss incidents; this summary is the record. "
                 "Exit status %d.", st.path, (unsigned long long)st.dropped_rows,
                 st.dropped_rows == 1 ? "" : "s",
                 (unsigned long long)st.dropped_samples,
                 st.dropped_samples == 1 ? "" : "s", st.last_error,
                 res->exit_code > 1 ? res->exit_code : FB__SUP_EXIT_JOURNAL);
    if (res->exit_code <= 1)
        res->exit_code = FB__SUP_EXIT_JOURNAL;
}

static void print_summary(fb__sup *s)
{
    fb__sup_result *res = s->res;
    if (s->o->quiet)
        return;
    if (s->status_on_tty)
        fputs("\r\033[K", stderr);
    char ettr[64];
    if (res->ettr_known)
        snprintf(ettr, sizeof ettr, "%.1f%%", 100.0 * res->ettr);
    else
        snprintf(ettr, sizeof ettr, "unknown (no rank attached to firebreak)");
    fprintf(stderr, "firebreak run: %s after %d attempt%s, %d restart%s, "
            "%.1f s wall, effective training time %s\n",
            res->completed ? "completed" : "did not complete", res->attempts,
            res->attempts == 1 ? "" : "s", res->restarts,
            res->restarts == 1 ? "" : "s", res->wall_s, ettr);
    if (!res->completed)
        fprintf(stderr, "firebreak run: %s\n", res->reason);
    fprintf(stderr, "firebreak run: run directory %s\n", res->run_dir);
    /* How to go on: the same directory resumes from its checkpoints
     * (docs/supervisor.md, "Run directory"). */
    if (!res->completed && s->durable_step >= 0)
        fprintf(stderr, "firebreak run: to resume from its newest checkpoint "
                "(step %lld when it stopped): firebreak run --run-dir %s "
                "[the same options] -- %s ...\n", (long long)s->durable_step,
                res->run_dir, s->o->argv[0]);
    if (s->mem_kept[0])
        fprintf(stderr, "firebreak run: node memory %s is kept: it holds checkpoints "
                "that storage (%s) does not (see above)\n", s->mem_kept,
                s->ckpt_dir);
}

/* A stop signal ended the run: its result (exit 128 + signal). */
static const char *interrupted(fb__sup *s, fb__sup_result *res)
{
    res->exit_code = 128 + s->stop_signal;
    snprintf(res->reason, sizeof res->reason, "stopped by %s",
             strsignal(s->stop_signal));
    return "interrupted";
}

/* Stopped between two attempts (the back-off's wait): the restart decided
 * was not made, so it is not counted (the journal has no attempt for it),
 * and the signal is said as it is during an attempt. */
static const char *stopped_between(fb__sup *s, fb__sup_result *res)
{
    fb__sup_log(s, "received %s between attempts: not restarting",
                strsignal(s->stop_signal));
    if (res->restarts > 0)
        res->restarts--;
    return interrupted(s, res);
}

/* What to do about a program that cannot be run, as torchrun's users
 * meet it: a name without a slash is looked up on PATH only, not in this
 * directory; a Python script needs its interpreter (torchrun adds it,
 * firebreak runs the command as given).  "" when there is nothing to add.
 * Returns 1 when PROG names a file in this directory. */
static int program_hint(const char *prog, int rc, char *buf, size_t size)
{
    struct stat st;
    size_t n = strlen(prog);
    int here = !strchr(prog, '/') && stat(prog, &st) == 0 && S_ISREG(st.st_mode);
    int py = n > 3 && !strcmp(prog + n - 3, ".py");
    buf[0] = '\0';
    if (py && (here || rc == -EACCES))
        snprintf(buf, size, "; a Python script runs under its interpreter: "
                 "firebreak run [options] -- python3 %s (torchrun adds the "
                 "interpreter; firebreak runs the command as given)", prog);
    else if (here && rc == -ENOENT)
        snprintf(buf, size, "; the file in this directory is ./%s (a name "
                 "without a slash is looked up on PATH only)", prog);
    return here;
}

/* The first bytes of the program PATH, at most size - 1, NUL-terminated:
 * how many, or -1 when it cannot be read (exec decides then).  Read once
 * for both checks below. */
static ssize_t program_head(const char *path, char *head, size_t size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return -1;
    ssize_t got = read(fd, head, size - 1);
    close(fd);
    head[got > 0 ? got : 0] = '\0';
    return got;
}

/* 0 when PATH is a Python script the kernel cannot execute: a ".py"
 * file without "#!" (execvp would hand it to /bin/sh, which fails on its
 * first line, at every restart); 1 for anything else, an unreadable file
 * included (exec decides).  head, got: program_head's. */
static int script_has_interpreter(const char *path, const char *head, ssize_t got)
{
    size_t n = strlen(path);
    if (n < 3 || strcmp(path + n - 3, ".py"))
        return 1;
    return got < 0 || (got >= 2 && head[0] == '#' && head[1] == '!');
}

/* The interpreter a "#!" head names, when that is an absolute path that
 * cannot be executed here: into interp (and 0 returned, errno-style
 * reason in *why), else -1.  exec reports such a script as ENOENT, as if
 * the script itself were missing, at every restart. */
static int missing_interpreter(const char *head, ssize_t got, char *interp, size_t size,
                               int *why)
{
    if (got < 3 || head[0] != '#' || head[1] != '!')
        return -1;
    const char *p = head + 2;
    while (*p == ' ' || *p == '\t')
        p++;
    size_t n = strcspn(p, " \t\r\n");
    if (*p != '/' || n == 0 || n >= size || p[n] == '\0')
        return -1; /* relative, empty, or longer than the line read */
    memcpy(interp, p, n);
    interp[n] = '\0';
    if (access(interp, X_OK) == 0)
        return -1;
    *why = errno;
    return 0;
}

/* Everything that can be refused before the run directory is touched
 * (exit 2, nothing launched).  Prints what is wrong. */
static int check_inputs(fb__sup *s)
{
    const fb__sup_options *o = s->o;
    char err[256];
    if (o->inject && fb__inject_parse(o->inject, &s->plan, err, sizeof err)) {
        fprintf(stderr, "firebreak run: --inject: %s\n", err);
        return -EINVAL;
    }
    for (char *const *a = o->mpirun_args; a && *a; a++) {
        const char *why = fb__sup_mpirun_arg_owned(*a, o->launcher == FB__LAUNCH_SLURM);
        if (why) {
            fprintf(stderr, "firebreak run: --mpirun-arg %s: %s; leave it out\n",
                    fb__safe_text(err, sizeof err, *a), why);
            return -EINVAL;
        }
    }
    char resolved[PATH_MAX];
    int rc = fb__find_program(o->argv[0], resolved, sizeof resolved);
    if (rc) {
        char hint[PATH_MAX + 200];
        int here = program_hint(o->argv[0], rc, hint, sizeof hint);
        fprintf(stderr, "firebreak run: cannot run '%s': %s%s\n", o->argv[0],
                rc != -ENOENT ? fb_strerror(rc)
                : here        ? "not found on PATH"
                              : "no such program (not a file, and not found on PATH)",
                hint);
        return rc;
    }
    char head[256];
    ssize_t got = program_head(resolved, head, sizeof head);
    if (!script_has_interpreter(resolved, head, got)) {
        char hint[PATH_MAX + 200];
        program_hint(o->argv[0], -EACCES, hint, sizeof hint);
        fprintf(stderr, "firebreak run: cannot run '%s': it has no #! line, so it "
                "would run under /bin/sh%s\n", o->argv[0], hint);
        return -ENOEXEC;
    }
    char interp[PATH_MAX];
    int why = 0;
    /* Local ranks only: another node may have the interpreter this one
     * lacks. */
    if (o->launcher == FB__LAUNCH_LOCAL &&
        missing_interpreter(head, got, interp, sizeof interp, &why) == 0) {
        char safe[PATH_MAX];
        fprintf(stderr, "firebreak run: cannot run '%s': its #! line names %s: %s\n",
                o->argv[0], fb__safe_text(safe, sizeof safe, interp), strerror(why));
        return -ENOENT;
    }
    if (o->launcher == FB__LAUNCH_LOCAL && got >= 4 && !memcmp(head, "\177ELF", 4))
        snprintf(s->elf_path, sizeof s->elf_path, "%s", resolved);
    if (o->launcher == FB__LAUNCH_MPIRUN) {
        rc = fb__find_program(o->mpirun ? o->mpirun : "mpirun", resolved,
                                   sizeof resolved);
        if (rc) {
            fprintf(stderr, "firebreak run: --launcher mpirun: cannot find mpirun "
                    "(install openmpi-bin, or give --mpirun PATH)\n");
            return rc;
        }
    }
    if (o->launcher == FB__LAUNCH_SLURM) {
        rc = fb__sup_slurm_init(s); /* sets s->world */
        if (rc)
            return rc;
    }
    /* Only now is the world size known (slurm: the allocation). */
    if (o->inject && fb__inject_check_job(&s->plan, s->world, o->max_restarts,
                                          err, sizeof err)) {
        fprintf(stderr, "firebreak run: --inject: %s\n", err);
        return -EINVAL;
    }
    return 0;
}

/* Say in res why the run stops after this attempt (policy.c decided). */
static const char *stop_reason(fb__sup *s, const fb__sup_decision *d,
                               const fb__sup_history *h)
{
    const fb__sup_options *o = s->o;
    fb__sup_result *res = s->res;
    const fb__sup_failure *f = &s->fail;
    res->exit_code = 1;
    switch (d->action) {
    case FB__SUP_DO_COMPLETED:
        res->completed = 1;
        res->exit_code = 0;
        snprintf(res->reason, sizeof res->reason, "the program completed");
        return "completed";
    case FB__SUP_DO_INTERRUPTED:
        return interrupted(s, res);
    case FB__SUP_DO_STOP_LAUNCH:
        snprintf(res->reason, sizeof res->reason,
                 "%s; not restarting: a restart would fail the same way", f->detail);
        break;
    case FB__SUP_DO_STOP_CRASH_LOOP: {
        /* With no restart left either, "instead of using the remaining
         * restarts" would not be true: say both. */
        char at[32], left[96];
        if (h->restarts < o->max_restarts)
            snprintf(left, sizeof left, "; stopping instead of using the "
                     "remaining restarts");
        else
            snprintf(left, sizeof left, ", with no restart left (--max-restarts "
                     "%d)", o->max_restarts);
        snprintf(res->reason, sizeof res->reason,
                 "crash loop: the job failed the same way (%s) %s in "
                 "%d attempts in a row%s. Last failure: %s",
                 fb__sup_fail_kind_name(f->kind),
                 fb__sup_step_words(at, sizeof at, f->step, 0), d->same_in_a_row,
                 left, f->detail);
        break;
    }
    case FB__SUP_DO_STOP_MAX_RESTARTS:
        snprintf(res->reason, sizeof res->reason,
                 "gave up after %d restart%s (--max-restarts %d). Last failure: %s",
                 h->restarts, h->restarts == 1 ? "" : "s", o->max_restarts, f->detail);
        break;
    case FB__SUP_DO_RESTART:
        break;
    }
    return "failed";
}

/* Every attempt, until the job completes, is stopped, or is given up
 * (crash loop, --max-restarts, a launch failure: fb__sup_decide).
 * Returns the run's status for the journal; fills res->exit_code and
 * res->reason. */
static const char *attempt_loop(fb__sup *s)
{
    const fb__sup_options *o = s->o;
    fb__sup_result *res = s->res;
    const fb__sup_restart_limits lim = {.max_restarts = o->max_restarts,
                                        .crash_loop = o->crash_loop};
    fb__sup_history h;
    fb__sup_history_init(&h);
    for (s->attempt = 0;; s->attempt++) {
        res->attempts = s->attempt + 1;
        fb__sup_attempt_end a = {.durable_before = s->durable_step};
        a.completed = run_attempt(s);
        a.stop_signal = s->stop_signal;
        a.kind = s->fail.kind;
        a.code = s->fail.signal > 0 ? 1000 + s->fail.signal
                 : s->fail.has_exit_code ? s->fail.exit_code : 0;
        a.step = s->fail.step;
        a.launch_error = s->fail.launch_error;
        a.durable_after = s->durable_step;
        fb__sup_decision d;
        fb__sup_decide(&lim, &h, &a, &d);
        res->restarts = h.restarts;
        if (d.action != FB__SUP_DO_RESTART)
            return stop_reason(s, &d, &h);
        if (d.delay_s > 0) {
            fb__sup_log(s, "restarting in %.1f s (no progress in the last attempt)",
                        d.delay_s);
            write_snapshots(s);
            backoff_wait(s, d.delay_s);
            if (s->stop_signal)
                return stopped_between(s, res);
        } else {
            if (s->durable_step >= 0)
                fb__sup_log(s, "restarting from the newest complete checkpoint "
                            "(step %lld)", (long long)s->durable_step);
            else
                fb__sup_log(s, "restarting from the newest complete checkpoint "
                            "(none yet: from the start)");
        }
#ifdef FB_TEST_HOOKS
        /* test hook: a pause between two attempts (under slurm the
         * watchers have stopped, the next ones are not started), where
         * tests/slurm/epilog.sh kills the supervisor */
        const char *pause = getenv("FIREBREAK_TEST_PAUSE_BETWEEN_ATTEMPTS_MS");
        if (pause && atoi(pause) > 0) {
            fb__sup_log(s, "test hook: pausing %d ms before attempt %d", atoi(pause),
                        s->attempt + 1);
            backoff_wait(s, atoi(pause) / 1000.0);
            if (s->stop_signal)
                return stopped_between(s, res);
        }
#endif
    }
}

/* The journal, opened in the run directory, with the run's row. */
static int open_journal(fb__sup *s)
{
    const fb__sup_options *o = s->o;
    char path[PATH_MAX], err[512];
    int rc = fb__rundir_path(path, sizeof path, s->run_dir, FB__RUNDIR_JOURNAL, 0);
    if (!rc && (rc = fb__journal_open(&s->j, path, err, sizeof err)) != 0)
        fprintf(stderr, "firebreak run: %s\n", err);
    if (rc)
        return rc;
    fb__jsonw cmd, opts;
    fb__jsonw_init(&cmd);
    fb__jsonw_init(&opts);
    command_json(o, &cmd);
    options_json(o, &opts);
    fb__journal_run jr = {
        .name = s->name, .job_id = s->job_id, .run_dir = s->run_dir,
        .command_json = fb__jsonw_text(&cmd), .launcher = fb__sup_launcher_name(o->launcher),
        .hostname = s->hostname, .options_json = fb__jsonw_text(&opts),
        .nproc = s->world, .nnodes = s->slurm ? fb__sup_slurm_nnodes(s) : o->nnodes > 0 ? o->nnodes : 1,
        .max_restarts = o->max_restarts, .hang_timeout_s = o->hang_timeout_s,
        .started_at = fb__wall_s(),
    };
    fb__journal_begin_run(s->j, &jr);
    fb__jsonw_free(&cmd);
    fb__jsonw_free(&opts);
    return 0;
}

/* Before the first launch: no leftovers of dead runs, subreaper, signals
 * through a signalfd, the ranks' table. */
static int setup_processes(fb__sup *s, sigset_t *oldmask)
{
    int srv_rc;
    /* Segments of runs whose supervisor died are removed, and so are their
     * node-memory checkpoints. */
    fb__seg_cleanup(NULL);
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    int rc = setup_signals(s, oldmask);
    /* The shims are forked by a small child made now, before the per-rank
     * tables and the tiers (proc.h); FIREBREAK_SHIM_SERVER=0 forks them
     * here (to compare). */
    const char *srv = getenv("FIREBREAK_SHIM_SERVER");
    if (!rc && !(srv && !strcmp(srv, "0")) && (srv_rc = fb__shim_server_start()) != 0)
        fb__sup_log(s, "no shim server (%s): the supervisor forks the shims",
                    fb_strerror(srv_rc));
    if (!rc)
        rc = fb__sup_tiers_setup(s);
    /* Written by every watch pass: no fork inherits them (proc.h). */
    s->units = fb__proc_calloc_nofork((size_t)(s->world + 1), sizeof *s->units);
    s->ranks = fb__proc_calloc_nofork((size_t)s->world, sizeof *s->ranks);
    s->hang_facts = fb__proc_calloc_nofork((size_t)s->world, sizeof *s->hang_facts);
    if (!rc && (!s->units || !s->ranks || !s->hang_facts))
        rc = -ENOMEM;
    if (rc) {
        fprintf(stderr, "firebreak run: setup failed: %s\n", fb_strerror(rc));
        return rc;
    }
    for (int r = 0; r < s->world; r++)
        s->ranks[r].pidfd = -1;
    return 0;
}

/* The end of the run, however it went: the result's totals, the journal
 * closed, nothing left behind (processes, segments, signal mask). */
static void finish_run(fb__sup *s, int rc, const char *status, const sigset_t *oldmask)
{
    const fb__sup_options *o = s->o;
    fb__sup_result *res = s->res;
    res->wall_s = (double)(fb__now_ns() - s->run_start_ns) / 1e9;
    res->useful_s = s->useful_s;
    res->ettr = res->wall_s > 0 ? s->useful_s / res->wall_s : 0;
    res->ettr_known = s->any_attached;
    res->last_step = s->max_step;
    if (s->j) {
        fb__journal_end_run(s->j, fb__wall_s(), rc ? "failed" : status,
                            rc ? 1 : res->exit_code, rc ? "setup failed" : res->reason);
        close_journal(s);
    }
    write_snapshots(s); /* a run that ends with a failure */
    fb__shim_server_stop();
    fb__proc_sweep(NULL, 0, 2000);
    int tier_swept = s->slurm && s->mem_dir[0]; /* its end-of-run step sweeps */
    fb__sup_tiers_finish(s); /* after every rank is gone; storage's step */
    res->checkpoint_step = s->durable_step;
    if (!tier_swept)
        fb__sup_slurm_sweep(s);
    fb__seg_remove_job(s->job_id, -1);
    wait_set_close();
    if (s->sigfd >= 0) {
        close(s->sigfd);
        sigprocmask(SIG_SETMASK, oldmask, NULL);
    }
    fb__proc_free_nofork(s->units, (size_t)(s->world + 1), sizeof *s->units);
    fb__sup_sdc_free(s);
    fb__proc_free_nofork(s->ranks, (size_t)s->world, sizeof *s->ranks);
    fb__proc_free_nofork(s->hang_facts, (size_t)s->world, sizeof *s->hang_facts);
    /* The exact accounting reads the journal: not from an incomplete one. */
    if (!rc && o->account && !res->journal_incomplete)
        o->account(res);
    if (!rc)
        print_summary(s);
    fb__sup_release_dirs(s);
}

int fb__sup_run(const fb__sup_options *o, fb__sup_result *res)
{
    memset(res, 0, sizeof *res);
    res->checkpoint_step = -1;
    fb__sup S, *s = &S;
    memset(s, 0, sizeof *s);
    s->o = o;
    s->res = res;
    s->sigfd = -1;
    s->run_start_ns = fb__now_ns();
    s->durable_step = -1;
    s->status_on_tty = fb__isatty(2) && !o->quiet;
    /* Test hook (docs/slurm.md): behave as if no rank shared this host, so
     * that everything must travel through the node watchers. */
    s->remote_only = o->launcher == FB__LAUNCH_SLURM &&
                     fb__getenv("FIREBREAK_SLURM_REMOTE_ONLY") != NULL;
    gethostname(s->hostname, sizeof s->hostname - 1);
    s->world = o->nproc_per_node * (o->nnodes > 0 ? o->nnodes : 1);
    s->lock_fd[0] = s->lock_fd[1] = -1;
    fb__proc_nofile_raise();
    /* Refused (no privilege): the supervisor shares the CPUs as any rank. */
    (void)fb__proc_nice_raise(o->sup_nice);

    int rc = check_inputs(s);
    if (rc)
        return rc;
    rc = fb__sup_access_init(s);
    if (!rc)
        rc = setup_run_dir(s);
    if (!rc)
        rc = open_journal(s);
    if (rc) {
        /* nothing was run: a run directory made for it goes again (a
         * --ckpt-dir that is a file left an empty run behind) */
        if (s->made_run_dir)
            fb__rm_rf(s->run_dir);
        if (s->made_run_dir == 2)
            rmdir(s->o->run_root); /* only when empty: another run's stays */
        fb__sup_release_dirs(s);
        return rc;
    }
    snprintf(res->run_dir, sizeof res->run_dir, "%s", s->run_dir);

    const char *status = "failed";
    sigset_t oldmask;
    sigemptyset(&oldmask);
    rc = setup_processes(s, &oldmask);
    if (!rc) {
        fb__sup_log(s, "run %s, job %s: %d rank%s, max %d restart%s, hang timeout %gs",
                    s->run_dir, s->job_id, s->world, s->world == 1 ? "" : "s",
                    o->max_restarts, o->max_restarts == 1 ? "" : "s", o->hang_timeout_s);
        if (o->nproc_per_node > 1 && !getenv("OMP_NUM_THREADS"))
            fb__sup_log(s, "OMP_NUM_THREADS=1 for every rank, as torchrun sets it "
                        "for several ranks on a node (set OMP_NUM_THREADS to choose)");
        status = attempt_loop(s);
        fb__sup_diagnose_poll(s, 1); /* the last failure's, if not yet */
        fb__sup_warm_close(s);
        fb__sup_standby_close(s);
    }
    finish_run(s, rc, status, &oldmask);
    return rc;
}
