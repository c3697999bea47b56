/*
 * proc.c -- the shim, process-tree walks and kills (see proc.h).
 */
#include "supervisor/proc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"

int fb__pidfd_open(pid_t pid)
{
#ifdef SYS_pidfd_open
    long fd = syscall(SYS_pidfd_open, pid, 0);
    return fd < 0 ? -errno : (int)fd;
#else
    (void)pid;
    return -ENOSYS;
#endif
}

/* Parent pid of `pid` from /proc/<pid>/stat, or -1. */
static pid_t proc_ppid(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    /* The command name may hold spaces and parentheses: skip to the last ')'. */
    char *p = strrchr(buf, ')');
    if (!p)
        return -1;
    char state;
    int ppid;
    if (sscanf(p + 1, " %c %d", &state, &ppid) != 2)
        return -1;
    return (pid_t)ppid;
}

int fb__proc_signal_child(int pidfd, pid_t pid, pid_t parent, int sig)
{
    if (pidfd < 0 || pid <= 0 || parent <= 0)
        return -EINVAL;
    if (proc_ppid(pid) != parent)
        return -EPERM;
#ifdef SYS_pidfd_send_signal
    return syscall(SYS_pidfd_send_signal, pidfd, sig, NULL, 0) ? -errno : 0;
#else
    return -ENOSYS;
#endif
}

typedef struct pp { pid_t pid, ppid; } pp;

static int snapshot(pp *out, int max)
{
    DIR *d = opendir("/proc");
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < max) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        if (*end || pid <= 0)
            continue;
        pid_t ppid = proc_ppid((pid_t)pid);
        if (ppid < 0)
            continue;
        out[n].pid = (pid_t)pid;
        out[n].ppid = ppid;
        n++;
    }
    closedir(d);
    return n;
}

static int descendants(const pp *all, int nall, pid_t root, pid_t *out, int *par,
                       int max)
{
    int n = 0;
    /* Breadth-first over the snapshot: out[] doubles as the queue. */
    pid_t frontier = root;
    int head = -1;
    for (;;) {
        for (int i = 0; i < nall && n < max; i++)
            if (all[i].ppid == frontier && all[i].pid != root) {
                if (par)
                    par[n] = head;
                out[n++] = all[i].pid;
            }
        if (++head >= n)
            break;
        frontier = out[head];
    }
    return n;
}

/* Append the children of every thread of `pid` (/proc/PID/task/TID/children)
 * to out[*n..max).  A process or thread that is gone has no children. */
static void proc_children(pid_t pid, pid_t *out, int *n, int max)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)) && *n < max) {
        char *end;
        long tid = strtol(e->d_name, &end, 10);
        if (*end || tid <= 0)
            continue;
        char cpath[96];
        snprintf(cpath, sizeof cpath, "/proc/%d/task/%ld/children", (int)pid, tid);
        int fd = open(cpath, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue; /* the thread ended */
        /* "PID PID ... ": parse across reads; a number cut at a buffer's
         * end carries over. */
        char buf[4096];
        long cur = 0;
        int have = 0;
        ssize_t got;
        while ((got = read(fd, buf, sizeof buf)) > 0) {
            for (ssize_t i = 0; i < got; i++) {
                if (buf[i] >= '0' && buf[i] <= '9') {
                    if (cur < INT_MAX / 10)
                        cur = cur * 10 + (buf[i] - '0');
                    have = 1;
                } else if (have) {
                    if (*n < max)
                        out[(*n)++] = (pid_t)cur;
                    cur = 0;
                    have = 0;
                }
            }
        }
        if (have && *n < max)
            out[(*n)++] = (pid_t)cur;
        close(fd);
    }
    closedir(d);
}

/* Does this kernel have the children files (CONFIG_PROC_CHILDREN)?  Asked
 * once, of the calling thread's own. */
static int have_children_files(void)
{
    static int known; /* 1 yes, -1 no, 0 not asked yet */
    if (!known) {
        char path[96];
        snprintf(path, sizeof path, "/proc/self/task/%ld/children",
                 (long)syscall(SYS_gettid));
        known = access(path, R_OK) == 0 ? 1 : -1;
    }
    return known > 0;
}

static int pid_cmp(const void *a, const void *b)
{
    pid_t x = *(const pid_t *)a, y = *(const pid_t *)b;
    return (x > y) - (x < y);
}

/* The descendants of root, breadth-first, with each one's parent: its
 * index in out[], or -1 for root's children (par may be NULL), so that a
 * parent always comes before its children.  The children of the nprune
 * pids in prune[] (sorted) may be left out: the sweep keeps them all. */
static int tree(pid_t root, pid_t *out, int *par, int max, const pid_t *prune,
                int nprune)
{
    /* Through the children files, breadth-first (out[] is the queue): the
     * cost follows the tree, not every process on the machine, which made
     * each shim's clean-up, and so stopping N ranks, grow as N squared. */
    if (have_children_files()) {
        int n = 0;
        for (int head = -1; head < n && n < max; head++) {
            int from = n;
            if (head >= 0 && nprune > 0 &&
                bsearch(&out[head], prune, (size_t)nprune, sizeof *prune, pid_cmp))
                continue;
            proc_children(head < 0 ? root : out[head], out, &n, max);
            for (int j = from; par && j < n; j++)
                par[j] = head;
        }
        return n;
    }
    enum { MAXP = 65536 };
    pp *all = malloc(MAXP * sizeof *all);
    if (!all)
        return 0;
    int nall = snapshot(all, MAXP);
    int n = descendants(all, nall, root, out, par, max);
    free(all);
    return n;
}

int fb__proc_descendants(pid_t root, pid_t *out, int max)
{
    return tree(root, out, NULL, max, NULL, 0);
}

int fb__proc_sweep(const pid_t *keep, int nkeep, int timeout_ms)
{
    enum { MAXD = 4096 };
    pid_t *d = malloc(MAXD * sizeof *d);
    int *par = malloc(MAXD * sizeof *par);
    pid_t *ks = malloc(((size_t)(nkeep > 0 ? nkeep : 0) + 1) * sizeof *ks);
    unsigned char *kept = malloc(MAXD);
    if (!d || !par || !ks || !kept) {
        free(d);
        free(par);
        free(ks);
        free(kept);
        return 0;
    }
    /* One walk of the tree a pass: a process is kept when it is in keep[]
     * or its parent is (parents come first).  Walking each kept pid's tree
     * again, as before, read /proc twice for each standby shim and its
     * rank, 512 processes at 256 ranks; and a kept pid's own children are
     * not read at all (the standby's ranks exec'd ahead: 8-18 ms of a
     * relaunch at 256 ranks went to the walk). */
    if (nkeep > 0) {
        memcpy(ks, keep, (size_t)nkeep * sizeof *ks);
        qsort(ks, (size_t)nkeep, sizeof *ks, pid_cmp);
    }
    int killed = 0;
    uint64_t deadline = fb__now_ns() + (uint64_t)timeout_ms * 1000000ull;
    for (;;) {
        int n = tree(getpid(), d, par, MAXD, ks, nkeep), victims = 0;
        for (int i = 0; i < n; i++)
            kept[i] = (par[i] >= 0 && kept[par[i]]) ||
                      (nkeep > 0 && bsearch(&d[i], ks, (size_t)nkeep, sizeof *ks, pid_cmp));
        for (int i = 0; i < n; i++) {
            if (kept[i])
                continue;
            /* Zombies are ours to reap, not to kill. */
            if (kill(d[i], SIGKILL) == 0) {
                victims++;
                killed++;
            }
        }
        /* Reap those that are our children and have ended, but for those
         * kept: not waitpid(-1), which would take a kept child's status
         * from whoever waits for it (a health check's, diagnose.c). */
        for (int i = 0; i < n; i++)
            if (!kept[i])
                (void)waitpid(d[i], NULL, WNOHANG);
        if (victims == 0 || fb__now_ns() > deadline)
            break;
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
    free(d);
    free(par);
    free(ks);
    free(kept);
    return killed;
}

/* ---- the shim ---- */

/* Reap every child that ended.  The rank's own status is kept (*reaped,
 * *ws): reaping orphans with waitpid(-1) may collect the rank too, and its
 * status is what the supervisor waits for. */
static void shim_reap(pid_t rank, int *reaped, int *ws)
{
    int st;
    pid_t r;
    while ((r = waitpid(-1, &st, WNOHANG)) > 0)
        if (r == rank && !*reaped) {
            *reaped = 1;
            *ws = st;
        }
}

/* Has the shim a child, ended or not?  Every descendant left is below a
 * child of ours: a subreaper's orphans are reparented to it before their
 * parent can be reaped.  With none, the walk of /proc is not needed: it
 * is most of what a shim does itself at a stop, on the way from its
 * rank's end to its report (docs/bench.md, "Idle runs"). */
static int shim_has_child(void)
{
    siginfo_t si;
    memset(&si, 0, sizeof si);
    return waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) == 0 || errno != ECHILD;
}

static void shim_kill_tree(pid_t rank_pgid, int *reaped, int *ws)
{
    if (rank_pgid > 0)
        kill(-rank_pgid, SIGKILL);
    /* Orphans reparented to us (we are a subreaper): each round reaps
     * what the last one killed, 1 ms on. */
    for (int round = 0; round < 100; round++) {
        shim_reap(rank_pgid, reaped, ws);
        if (!shim_has_child())
            break;
        pid_t d[1024];
        int n = fb__proc_descendants(getpid(), d, 1024);
        int live = 0;
        for (int i = 0; i < n; i++)
            if (kill(d[i], SIGKILL) == 0)
                live++;
        if (live == 0)
            break; /* reaped below */
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    shim_reap(rank_pgid, reaped, ws);
}

static void write_msg(int fd, const fb__shim_msg *m)
{
    ssize_t r;
    do
        r = write(fd, m, sizeof *m);
    while (r < 0 && errno == EINTR);
}

/* The nice before fb__proc_nice_raise, given back to every program
 * exec'd. */
static int nice_before, nice_raised;

int fb__proc_nice_raise(int steps)
{
    if (nice_raised)
        return -EALREADY;
    errno = 0;
    int n = getpriority(PRIO_PROCESS, 0); /* this thread's, on Linux */
    if (n == -1 && errno)
        return -errno;
    int want = n - steps < -20 ? -20 : n - steps;
    if (steps <= 0 || want == n)
        return 0;
    if (setpriority(PRIO_PROCESS, 0, want))
        return -errno;
    nice_before = n;
    nice_raised = 1;
    return 0;
}

void fb__proc_nice_restore(void)
{
    if (nice_raised)
        (void)setpriority(PRIO_PROCESS, 0, nice_before);
}

int fb__proc_rt_enter(int prio)
{
    struct sched_param sp = {.sched_priority = prio};
    if (prio <= 0)
        return -EINVAL;
    return sched_setscheduler(0, SCHED_FIFO | SCHED_RESET_ON_FORK, &sp) ? -errno : 0;
}

void fb__proc_rt_leave(void)
{
    struct sched_param sp = {.sched_priority = 0};
    (void)sched_setscheduler(0, SCHED_OTHER, &sp); /* the nice is kept */
}

/* The soft limit of open files before fb__proc_nofile_raise, given back to
 * every rank. */
static struct rlimit nofile_before;
static int nofile_raised;

void fb__proc_nofile_raise(void)
{
    struct rlimit r;
    if (nofile_raised || getrlimit(RLIMIT_NOFILE, &r) || r.rlim_cur >= r.rlim_max)
        return;
    /* The hard limit, or below the kernel's fs.nr_open where the hard one
     * is past it (unlimited). */
    static const rlim_t tries[] = {0, 1 << 20, 1 << 16};
    for (size_t i = 0; i < sizeof tries / sizeof tries[0]; i++) {
        rlim_t want = tries[i] ? tries[i] : r.rlim_max;
        if (want > r.rlim_max || want <= r.rlim_cur)
            continue;
        struct rlimit up = {.rlim_cur = want, .rlim_max = r.rlim_max};
        if (!setrlimit(RLIMIT_NOFILE, &up)) {
            nofile_before = r;
            nofile_raised = 1;
            return;
        }
    }
}

typedef struct rank_child {
    const fb__spawn *sp;
    int errfd, msg_fd;
    int traced; /* stop at the exec, before the program's first instruction */
} rank_child;

/* The rank's side of the shim's spawn, until its exec.  It runs in the
 * shim's memory (vfork: the shim suspended until the exec or _exit), below
 * the shim's stack frames: it never returns, only makes system calls and
 * writes nothing the shim reads but errno, which the shim does not look
 * at. */
__attribute__((noreturn)) static void rank_child_main(const rank_child *c)
{
    const fb__spawn *sp = c->sp;
    close(c->msg_fd);
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() == 1)
        _exit(1);
    if (sp->stdin_fd > 0)
        dup2(sp->stdin_fd, STDIN_FILENO);
    if (sp->stdout_fd >= 0)
        dup2(sp->stdout_fd, STDOUT_FILENO);
    if (sp->stderr_fd >= 0)
        dup2(sp->stderr_fd, STDERR_FILENO);
    if (sp->cwd && chdir(sp->cwd)) {
        int e = errno;
        (void)!write(c->errfd, &e, sizeof e);
        _exit(127);
    }
    /* The shim handles no signal, but an ignored one stays ignored
     * across exec: every one back to its default. */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    for (int s = 1; s < NSIG; s++)
        sigaction(s, &dfl, NULL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    if (nofile_raised)
        setrlimit(RLIMIT_NOFILE, &nofile_before);
    fb__proc_nice_restore();
    /* A standby rank (standby_wait): the exec stops it (SIGTRAP to a
     * tracee) until the shim lets it go; one that cannot be traced does
     * not run ahead at all. */
    if (c->traced && ptrace(PTRACE_TRACEME, 0, NULL, NULL))
        _exit(126);
    if (sp->path)
        execve(sp->path, sp->argv, sp->envp);
    else
        execvpe(sp->argv[0], sp->argv, sp->envp);
    int e = errno;
    (void)!write(c->errfd, &e, sizeof e);
    _exit(127);
}

/* Start the rank with vfork and exec, as posix_spawn does, so that the
 * shim's memory (a copy of the supervisor's) is neither copied again nor
 * write-protected for each rank; posix_spawn itself cannot set the
 * parent-death signal.  (vfork, not clone on a stack of our own: the
 * sanitizers know vfork, and a noreturn call on a foreign stack confuses
 * them.)  Returns when the exec succeeded or the child ended; the pid, or
 * -1. */
static pid_t spawn_rank(const rank_child *c)
{
    pid_t pid = vfork();
    if (pid == 0)
        rank_child_main(c);
    return pid;
}

/* With sp->exec_ahead: the rank's exec, done now, stopped before the
 * program runs (it is the shim's tracee until standby_release).  Returns
 * its pid and *errfd (the exec's error pipe), or 0 when it could not be
 * made so (no ptrace here, the exec failed): the launch execs as usual. */
static pid_t exec_ahead(const fb__spawn *sp, int msg_fd, int *errfd)
{
    int errpipe[2];
    if (!sp->exec_ahead || pipe2(errpipe, O_CLOEXEC))
        return 0;
    rank_child c = {.sp = sp, .errfd = errpipe[1], .msg_fd = msg_fd, .traced = 1};
    pid_t pid = spawn_rank(&c);
    close(errpipe[1]);
    int st = 0;
    pid_t w = -1;
    if (pid > 0)
        while ((w = waitpid(pid, &st, 0)) < 0 && errno == EINTR)
            ;
    /* Stopped at the exec: no longer traced, but stopped by SIGSTOP in
     * its place, so that a SIGCONT (the supervisor's, at the launch) lets
     * it run; the supervisor learns its pid now (FB_SHIM_AHEAD). */
    if (pid > 0 && w == pid && WIFSTOPPED(st) && WSTOPSIG(st) == SIGTRAP &&
        ptrace(PTRACE_DETACH, pid, NULL, (void *)(long)SIGSTOP) == 0) {
        while ((w = waitpid(pid, &st, WUNTRACED)) < 0 && errno == EINTR)
            ;
        if (w == pid && WIFSTOPPED(st)) {
            fb__shim_msg m = {.type = FB_SHIM_AHEAD, .pid = pid, .mono_ns = fb__now_ns()};
            write_msg(msg_fd, &m);
            *errfd = errpipe[0];
            return pid;
        }
    }
    if (pid > 0 && w == pid && WIFSTOPPED(st)) { /* not the stop expected */
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
    }
    close(errpipe[0]);
    return 0;
}

/* A standby shim's wait for its launch: one byte of the go pipe is its
 * turn; end of file or an error, none (the supervisor gave the standby up,
 * or died: then the parent-death SIGKILL has come first anyway).  Returns
 * the rank exec'd ahead (exec_ahead), or 0. */
static pid_t standby_wait(const fb__spawn *sp, pid_t supervisor, int msg_fd, int *errfd)
{
    prctl(PR_SET_NAME, "fb-standby");
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != supervisor)
        _exit(1);
    /* the rank may run before this shim has read its turn */
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    /* SCHED_BATCH until its turn, and so its rank exec'd ahead: woken
     * together at the launch, they do not preempt the supervisor that
     * wakes them (no wake-up preemption for batch tasks); each goes back
     * to SCHED_OTHER at once (the shim here, the rank by the supervisor,
     * launch.c).  A kernel that refuses: no matter. */
    struct sched_param normal = {0};
    int batch = sched_setscheduler(0, SCHED_BATCH, &normal) == 0;
    if (sp->go_wfd > 0)
        close(sp->go_wfd);
    /* Its parent-death SIGKILL (set before the exec) ties it to this
     * shim. */
    pid_t ahead = exec_ahead(sp, msg_fd, errfd);
    char b;
    ssize_t r;
    while ((r = read(sp->go_rfd, &b, 1)) < 0 && errno == EINTR)
        ;
    if (r != 1) {
        if (ahead > 0)
            kill(ahead, SIGKILL);
        _exit(1);
    }
    close(sp->go_rfd);
    prctl(PR_SET_NAME, "fb-shim");
    if (batch)
        sched_setscheduler(0, SCHED_OTHER, &normal);
    if (ahead > 0) {
        /* Killed while it waited (still our zombie): a fresh one. */
        int st;
        if (waitpid(ahead, &st, WNOHANG) == ahead) {
            close(*errfd);
            *errfd = -1;
            return 0;
        }
        /* The supervisor has sent SIGCONT already, unless it missed our
         * message; once more does no harm, and nor does a second return
         * to SCHED_OTHER (the supervisor's covers threads started since). */
        if (batch)
            sched_setscheduler(ahead, SCHED_OTHER, &normal);
        kill(ahead, SIGCONT);
    }
    return ahead;
}

/* The shim's parent-death signal, one the supervisor never sends: the
 * kernel sends it when the parent *thread* ends, and a SIGKILLed
 * supervisor's threads end one by one, its main thread (which forks every
 * shim; the shim server has no other) often first, while getppid() still
 * names the supervisor.  Were it SIGTERM, as a stop is, it would be passed
 * on to the program as a stop: srun turns a SIGTERM into a SIGKILL of its
 * step's tasks, and the node watchers died without removing their node's
 * memory (tests/slurm/peer.sh, case 6). */
#define SHIM_PARENT_GONE SIGRTMIN

static void shim_main(const fb__spawn *sp, pid_t supervisor, int msg_fd)
{
    prctl(PR_SET_NAME, "fb-shim");
    pid_t ahead = 0;
    int ahead_errfd = -1;
    if (sp->standby && sp->go_rfd > 0)
        ahead = standby_wait(sp, supervisor, msg_fd, &ahead_errfd);
    signal(SIGPIPE, SIG_DFL); /* the supervisor ignores it (setup_signals) */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    sigaddset(&set, SIGUSR1);
    sigaddset(&set, SIGUSR2);
    sigaddset(&set, SHIM_PARENT_GONE);
    sigprocmask(SIG_BLOCK, &set, NULL);
    /* Blocked first: the supervisor's end is never this shim's own. */
    prctl(PR_SET_PDEATHSIG, SHIM_PARENT_GONE);
    if (getppid() != supervisor)
        _exit(1);
    prctl(PR_SET_CHILD_SUBREAPER, 1);

    /* A launch of many ranks: wait until the supervisor has forked every
     * shim (it closes its end of the pipe), so that the ranks' start-up
     * does not compete with the supervisor's forks for the CPUs; the
     * supervisor then waits for every STARTED.  End of file also comes
     * when the supervisor died: then nothing is started. */
    if (sp->go_rfd > 0 && !sp->standby) {
        if (sp->go_wfd > 0)
            close(sp->go_wfd);
        char b;
        while (read(sp->go_rfd, &b, 1) < 0 && errno == EINTR)
            ;
        close(sp->go_rfd);
        if (getppid() != supervisor)
            _exit(1);
    }

    /* exec errors come back through a close-on-exec pipe. */
    int errpipe[2];
    pid_t pid;
    if (ahead > 0) {
        /* exec'd ahead: it runs the program from now on */
        pid = ahead;
        errpipe[0] = ahead_errfd;
    } else {
        if (pipe2(errpipe, O_CLOEXEC))
            _exit(1);
        rank_child c = {.sp = sp, .errfd = errpipe[1], .msg_fd = msg_fd};
        pid = spawn_rank(&c);
        if (pid < 0)
            _exit(1);
        /* The child made its own process group before its exec. */
        close(errpipe[1]);
    }
    /* vfork's parent resumes once the child has let go of the old memory,
     * a moment before the new program becomes the task's (seen under
     * load: /proc/PID/exe still the shim's).  The exec's close-on-exec
     * pipe closes only after that, or brings its errno: so STARTED names
     * a process that already runs the program, or one that failed. */
    int exec_errno = 0, reaped = 0, ws = 0;
    {
        int e;
        ssize_t r;
        while ((r = read(errpipe[0], &e, sizeof e)) < 0 && errno == EINTR)
            ;
        if (r == (ssize_t)sizeof e)
            exec_errno = e;
    }
    fb__shim_msg m = {.type = FB_SHIM_STARTED, .pid = pid, .mono_ns = fb__now_ns()};
    write_msg(msg_fd, &m);

    for (;;) {
        siginfo_t si;
        int sig = sigwaitinfo(&set, &si);
        if (sig < 0)
            continue;
        if (sig == SIGCHLD) {
            shim_reap(pid, &reaped, &ws);
        } else if (sig == SHIM_PARENT_GONE || getppid() != supervisor || sig == SIGUSR2) {
            /* The supervisor is gone, or asks for a hard stop. */
            shim_kill_tree(pid, &reaped, &ws);
            if (sig == SHIM_PARENT_GONE || getppid() != supervisor)
                _exit(1);
        } else {
            kill(-pid, sig);
            /* A stopped rank (SIGSTOP: a debugger, a job-control stop, an
             * injected hang) holds a stop signal pending until the hard
             * stop: let it run to take it, as systemd does. */
            if (sig == SIGTERM || sig == SIGINT || sig == SIGHUP)
                kill(-pid, SIGCONT);
        }
        if (!reaped)
            continue;
        /* The rank ended (by itself, or in the hard stop's kill): its
         * status goes to the supervisor, whichever wait collected it. */
        uint64_t t = fb__now_ns();
        shim_kill_tree(pid, &reaped, &ws);
        fb__shim_msg end = {.type = FB_SHIM_ENDED, .pid = pid, .wstatus = ws,
                            .exec_errno = exec_errno, .mono_ns = t};
        write_msg(msg_fd, &end);
        _exit(0);
    }
}

/* ---- the shim server (proc.h) ----
 *
 * One request, one SOCK_SEQPACKET message: a header, then argv's and
 * envp's strings, the cwd and the path (SRV_CWD, SRV_PATH), each ending in NUL; the descriptors it names
 * ride along (SCM_RIGHTS) in the order of the flags below.  One reply: the
 * shim's pid or -errno and the server's CPU for the request, with the read
 * end of the shim's message pipe and the write end of its go-ahead: the
 * shim waits for one byte there before it does anything, so that a shim
 * whose reply the supervisor never took (it gave up waiting: a stopped
 * or overloaded server) ends at the end of file instead of starting a
 * rank nobody knows. */
enum {
    SRV_MAGIC = 0x46425353, /* "FBSS" */
    SRV_STANDBY = 1, SRV_EXEC_AHEAD = 2, SRV_CWD = 4, SRV_STDIN = 8,
    SRV_STDOUT = 16, SRV_STDERR = 32, SRV_GO_R = 64, SRV_GO_W = 128,
    SRV_PATH = 256,
    SRV_MAX_FDS = 5,
    /* what one message may hold; a bigger request is forked here */
    SRV_MAX_MSG = 160 * 1024,
    SRV_MAX_STRINGS = 16384,
    SRV_REPLY_MS = 5000, /* a server that does not answer is given up */
};

typedef struct srv_req {
    uint32_t magic, flags, argc, envc, len;
} srv_req;

typedef struct srv_reply {
    int32_t pid; /* > 0, or -errno */
    int32_t pad;
    uint64_t cpu_ns;
} srv_reply;

static int srv_fd = -1;
static pid_t srv_pid;
static uint64_t srv_cpu;

static void srv_close_fds(const int *fds, int n)
{
    for (int i = 0; i < n; i++)
        if (fds[i] >= 0)
            close(fds[i]);
}

/* Send one message with fds[0..nfd) attached; 0 or -errno. */
static int srv_send(int sock, const struct iovec *iov, int niov, const int *fds, int nfd)
{
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(SRV_MAX_FDS * sizeof(int))];
    } c;
    memset(&c, 0, sizeof c);
    struct msghdr mh = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)niov};
    if (nfd > 0) {
        mh.msg_control = c.buf;
        mh.msg_controllen = CMSG_SPACE((size_t)nfd * sizeof(int));
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN((size_t)nfd * sizeof(int));
        memcpy(CMSG_DATA(cm), fds, (size_t)nfd * sizeof(int));
    }
    ssize_t r;
    while ((r = sendmsg(sock, &mh, MSG_NOSIGNAL)) < 0 && errno == EINTR)
        ;
    return r < 0 ? -errno : 0;
}

/* Receive one message into buf and up to max fds (close-on-exec); the
 * bytes, 0 at the end, or -errno.  *nfd: how many came (those past max,
 * or with a cut message, are closed and the message refused). */
static ssize_t srv_recv(int sock, void *buf, size_t size, int *fds, int max, int *nfd)
{
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(SRV_MAX_FDS * sizeof(int))];
    } c;
    struct iovec iov = {.iov_base = buf, .iov_len = size};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = c.buf,
                        .msg_controllen = sizeof c.buf};
    ssize_t r;
    while ((r = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR)
        ;
    *nfd = 0;
    if (r < 0)
        return -errno;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
            continue;
        size_t n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < n; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof fd);
            if (*nfd < max)
                fds[(*nfd)++] = fd;
            else
                close(fd);
        }
    }
    if (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
        srv_close_fds(fds, *nfd);
        *nfd = 0;
        return -EMSGSIZE;
    }
    return r;
}

static int popcount(uint32_t v)
{
    int n = 0;
    for (; v; v &= v - 1)
        n++;
    return n;
}

/* Split n NUL-ended strings off *p (bounded by end) into out[0..n), then
 * NULL; 0, or -EINVAL where they do not fit. */
static int srv_strings(char **p, const char *end, char **out, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        const char *z = memchr(*p, '\0', (size_t)(end - *p));
        if (!z)
            return -EINVAL;
        out[i] = *p;
        *p = (char *)z + 1;
    }
    out[n] = NULL;
    return 0;
}

/* One NUL-ended string off *p into *out: 0, or -EINVAL. */
static int srv_string(char **p, const char *end, const char **out)
{
    char *one[2];
    int rc = srv_strings(p, end, one, 1);
    *out = rc ? NULL : one[0];
    return rc;
}

int fb__shim_req_parse(char *buf, size_t n, int nfd, fb__spawn *sp, uint32_t *flags)
{
    srv_req h;
    memset(sp, 0, sizeof *sp);
    sp->stdout_fd = sp->stderr_fd = -1;
    *flags = 0;
    if (n < sizeof h || n > SRV_MAX_MSG || nfd < 0 || nfd > SRV_MAX_FDS)
        return -EINVAL;
    memcpy(&h, buf, sizeof h);
    if (h.magic != SRV_MAGIC || h.len != (uint64_t)n - sizeof h || h.argc < 1 ||
        h.argc > SRV_MAX_STRINGS || h.envc > SRV_MAX_STRINGS ||
        popcount(h.flags & ~(uint32_t)(SRV_STANDBY | SRV_EXEC_AHEAD | SRV_CWD | SRV_PATH)) !=
            nfd ||
        (h.flags & ~(uint32_t)0x1ff))
        return -EINVAL;
    char **vec = malloc(((size_t)h.argc + h.envc + 2) * sizeof *vec);
    if (!vec)
        return -ENOMEM;
    char *p = buf + sizeof h, *end = buf + n;
    const char *cwd = NULL, *path = NULL;
    int rc = srv_strings(&p, end, vec, h.argc) ||
             srv_strings(&p, end, vec + h.argc + 1, h.envc) ||
             ((h.flags & SRV_CWD) && srv_string(&p, end, &cwd)) ||
             ((h.flags & SRV_PATH) && srv_string(&p, end, &path));
    if (rc || p != end) {
        free(vec);
        return -EINVAL;
    }
    sp->argv = vec;
    sp->envp = vec + h.argc + 1;
    sp->cwd = cwd;
    sp->path = path;
    sp->standby = !!(h.flags & SRV_STANDBY);
    sp->exec_ahead = !!(h.flags & SRV_EXEC_AHEAD);
    *flags = h.flags;
    return 0;
}

/* One request, in the server: its shim cloned as the supervisor's child,
 * running shim_main. */
static void srv_serve(int sock, pid_t supervisor, char *buf, ssize_t n, int *fds, int nfd)
{
    uint64_t c0 = fb__thread_cpu_ns();
    srv_reply rep = {.pid = -EINVAL};
    int pipefd[2] = {-1, -1}, ack[2] = {-1, -1};
    fb__spawn sp = {.argv = NULL};
    uint32_t flags;
    int rc = n < 0 ? -EINVAL : fb__shim_req_parse(buf, (size_t)n, nfd, &sp, &flags);
    if (rc) {
        rep.pid = rc;
        goto reply;
    }
    int k = 0;
    if (flags & SRV_STDIN)
        sp.stdin_fd = fds[k++];
    if (flags & SRV_STDOUT)
        sp.stdout_fd = fds[k++];
    if (flags & SRV_STDERR)
        sp.stderr_fd = fds[k++];
    if (flags & SRV_GO_R)
        sp.go_rfd = fds[k++];
    if (flags & SRV_GO_W)
        sp.go_wfd = fds[k++];
    if (pipe2(pipefd, O_CLOEXEC) ||
        socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ack)) {
        rep.pid = -errno;
        goto reply;
    }
    /* A fork whose child is the supervisor's: no page tables of the
     * supervisor to copy.  The child runs on this process's copy of glibc
     * whose cached thread id is the server's: the shim calls nothing that
     * reads it (raise, abort, pthread_kill). */
    long pid = syscall(SYS_clone, (unsigned long)(CLONE_PARENT | SIGCHLD), NULL, NULL,
                       NULL, NULL);
    if (pid == 0) {
        close(sock);
        close(pipefd[0]);
        close(ack[1]);
        /* Nothing starts until the supervisor has the reply and says so:
         * a reply it never took (it gave up waiting, or this server died
         * first) closes the other end, and the shim leaves. */
        char b;
        ssize_t r;
        while ((r = read(ack[0], &b, 1)) < 0 && errno == EINTR)
            ;
        if (r != 1)
            _exit(1);
        close(ack[0]);
        shim_main(&sp, supervisor, pipefd[1]);
        _exit(1);
    }
    rep.pid = pid > 0 ? (int32_t)pid : -errno;
#ifdef FB_TEST_HOOKS
    /* test hook: a server that answers late (test_shim) */
    const char *late = getenv("FIREBREAK_TEST_SHIM_SERVER_LATE_MS");
    if (late && atoi(late) > 0)
        usleep((useconds_t)atoi(late) * 1000u);
#endif
reply:
    if (pipefd[1] >= 0)
        close(pipefd[1]);
    if (ack[0] >= 0)
        close(ack[0]);
    srv_close_fds(fds, nfd);
    free((void *)sp.argv);
    rep.cpu_ns = fb__thread_cpu_ns() - c0;
    struct iovec iov = {.iov_base = &rep, .iov_len = sizeof rep};
    int back[2] = {pipefd[0], ack[1]};
    srv_send(sock, &iov, 1, rep.pid > 0 ? back : NULL, rep.pid > 0 ? 2 : 0);
    srv_close_fds(back, 2);
}

__attribute__((noreturn)) static void srv_main(int sock, pid_t supervisor)
{
    prctl(PR_SET_NAME, "fb-shim-server");
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != supervisor)
        _exit(1);
    /* Only what a rank inherits through exec (descriptors without
     * close-on-exec: the user's) and the socket stay open: the shims
     * forked here hold nothing of the supervisor's. */
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        int fd = atoi(e->d_name);
        if (fd > 2 && fd != sock && fd != dirfd(d) &&
            (fcntl(fd, F_GETFD) & FD_CLOEXEC))
            close(fd);
    }
    if (d)
        closedir(d);
    /* Received descriptors land at 3 and up (the rank's dup2 onto 0-2 must
     * not clobber them). */
    for (int fd = 0; fd < 3; fd++)
        if (fcntl(fd, F_GETFD) < 0 && open("/dev/null", O_RDWR) != fd)
            _exit(1);
    char *buf = malloc(SRV_MAX_MSG);
    if (!buf)
        _exit(1);
    for (;;) {
        int fds[SRV_MAX_FDS], nfd;
        ssize_t n = srv_recv(sock, buf, SRV_MAX_MSG, fds, SRV_MAX_FDS, &nfd);
        if (n == 0 || (n < 0 && n != -EMSGSIZE))
            _exit(0); /* the supervisor closed its end, or is gone */
        srv_serve(sock, supervisor, buf, n, fds, nfd);
    }
}

/* The server's own program (FB__SHIM_SERVER_PROGRAM): where
 * FIREBREAK_SHIM_SERVER_PROGRAM says, else beside this program (the build
 * tree), else in ../libexec/firebreak (an install).  0, or -ENOENT. */
static int srv_program(char *path, size_t size)
{
    const char *env = getenv("FIREBREAK_SHIM_SERVER_PROGRAM");
    if (env && env[0]) {
        int n = snprintf(path, size, "%s", env);
        return n > 0 && (size_t)n < size && access(path, X_OK) == 0 ? 0 : -ENOENT;
    }
    char self[PATH_MAX];
    if (fb__self_dir(self, sizeof self))
        return -ENOENT;
    static const char *const where[] = {"%s/" FB__SHIM_SERVER_PROGRAM,
                                        "%s/../libexec/firebreak/" FB__SHIM_SERVER_PROGRAM};
    for (size_t i = 0; i < sizeof where / sizeof where[0]; i++) {
        int k = snprintf(path, size, where[i], self);
        if (k > 0 && (size_t)k < size && access(path, X_OK) == 0)
            return 0;
    }
    return -ENOENT;
}

/* The server program's arguments (fb__shim_server_main), made before the
 * fork: what the ranks must get back (fb__proc_nofile_raise,
 * fb__proc_nice_raise). */
typedef struct srv_args {
    char fd[16], sup[24], nofile[48], nice[16];
} srv_args;

static void srv_args_make(srv_args *a, int sock, pid_t supervisor)
{
    snprintf(a->fd, sizeof a->fd, "%d", sock);
    snprintf(a->sup, sizeof a->sup, "%d", (int)supervisor);
    if (nofile_raised)
        snprintf(a->nofile, sizeof a->nofile, "%llu",
                 (unsigned long long)nofile_before.rlim_cur);
    else
        snprintf(a->nofile, sizeof a->nofile, "-");
    if (nice_raised)
        snprintf(a->nice, sizeof a->nice, "%d", nice_before);
    else
        snprintf(a->nice, sizeof a->nice, "-");
}

/* In the server's child: its own program.  Returns only when the exec
 * failed: then this fork serves. */
static void srv_exec(const char *program, int sock, srv_args *a)
{
    char *argv[] = {(char *)FB__SHIM_SERVER_PROGRAM, a->fd, a->sup, a->nofile, a->nice,
                    NULL};
    if (fcntl(sock, F_SETFD, 0))
        return;
    execv(program, argv);
    fcntl(sock, F_SETFD, FD_CLOEXEC);
}

/* One decimal in [lo, hi], or "-" (*set = 0). */
static int srv_arg(const char *v, long long lo, long long hi, long long *out, int *set)
{
    *set = 0;
    if (!strcmp(v, "-"))
        return 0;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi)
        return -1;
    *out = x;
    *set = 1;
    return 0;
}

int fb__shim_server_parse(int argc, char *const *argv, fb__shim_server_argv *a)
{
    long long sock, sup, nice = 0;
    int set;
    *a = (fb__shim_server_argv){0};
    if (argc != 5 || srv_arg(argv[1], 3, INT_MAX, &sock, &set) || !set ||
        srv_arg(argv[2], 2, INT_MAX, &sup, &set) || !set ||
        srv_arg(argv[3], 0, LLONG_MAX, &a->nofile, &a->set_nofile) ||
        srv_arg(argv[4], -20, 19, &nice, &a->set_nice))
        return -EINVAL;
    a->sock = (int)sock;
    a->supervisor = (pid_t)sup;
    a->nice = (int)nice;
    return 0;
}

int fb__shim_server_main(int argc, char **argv)
{
    fb__shim_server_argv a;
    if (fb__shim_server_parse(argc, argv, &a) || fcntl(a.sock, F_GETFD) < 0) {
        fprintf(stderr, "%s: firebreak run's helper, started by it (docs/supervisor.md, "
                "\"The shim server\"); not a command\n", FB__SHIM_SERVER_PROGRAM);
        return 2;
    }
    fcntl(a.sock, F_SETFD, FD_CLOEXEC);
    if (a.set_nofile && getrlimit(RLIMIT_NOFILE, &nofile_before) == 0) {
        nofile_before.rlim_cur = (rlim_t)a.nofile;
        nofile_raised = 1;
    }
    if (a.set_nice) {
        nice_before = a.nice;
        nice_raised = 1;
    }
    srv_main(a.sock, a.supervisor);
}

int fb__shim_server_start(void)
{
    if (srv_fd >= 0)
        return 0;
    char program[PATH_MAX];
    int have_program = srv_program(program, sizeof program) == 0;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv))
        return -errno;
    pid_t supervisor = getpid();
    srv_args args;
    srv_args_make(&args, sv[1], supervisor);
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(sv[0]);
        close(sv[1]);
        return -e;
    }
    if (pid == 0) {
        close(sv[0]);
        if (have_program)
            srv_exec(program, sv[1], &args);
        srv_main(sv[1], supervisor);
    }
    close(sv[1]);
    int big = SRV_MAX_MSG + 4096; /* best effort: else a big request forks here */
    setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
    srv_fd = sv[0];
    srv_pid = pid;
    srv_cpu = 0;
    return 0;
}

void fb__shim_server_stop(void)
{
    if (srv_fd >= 0)
        close(srv_fd);
    srv_fd = -1;
    if (srv_pid > 0) {
        kill(srv_pid, SIGKILL);
        while (waitpid(srv_pid, NULL, 0) < 0 && errno == EINTR)
            ;
    }
    srv_pid = 0;
}

pid_t fb__shim_server_pid(void)
{
    return srv_fd >= 0 ? srv_pid : 0;
}

int fb__shim_server_reaped(pid_t pid)
{
    if (pid <= 0 || pid != srv_pid)
        return 0;
    srv_pid = 0;
    if (srv_fd >= 0)
        close(srv_fd);
    srv_fd = -1;
    return 1;
}

uint64_t fb__shim_server_cpu_ns(void)
{
    return srv_cpu;
}

/* The server is given up: killed and reaped at once, so that its pid is
 * forgotten before anything else could reap it (a sweep) and the pid come
 * back as another child's. */
static void srv_give_up(void)
{
    fb__shim_server_stop();
}

/* A shim through the server: 0, 1 (not through it: fork here), or
 * -errno (its clone failed). */
static int srv_spawn(const fb__spawn *sp, pid_t *shim_pid, int *msg_fd)
{
    srv_req h = {.magic = SRV_MAGIC};
    size_t len = (sp->cwd ? strlen(sp->cwd) + 1 : 0) + (sp->path ? strlen(sp->path) + 1 : 0);
    for (char *const *a = sp->argv; *a; a++, h.argc++)
        len += strlen(*a) + 1;
    for (char *const *v = sp->envp; v && *v; v++, h.envc++)
        len += strlen(*v) + 1;
    if (len + sizeof h > SRV_MAX_MSG || h.argc < 1 || h.argc > SRV_MAX_STRINGS ||
        h.envc > SRV_MAX_STRINGS)
        return 1;
    char *buf = malloc(len), *p = buf;
    if (!buf)
        return 1;
    for (char *const *a = sp->argv; *a; a++)
        p = stpcpy(p, *a) + 1;
    for (char *const *v = sp->envp; v && *v; v++)
        p = stpcpy(p, *v) + 1;
    if (sp->cwd)
        p = stpcpy(p, sp->cwd) + 1;
    if (sp->path)
        p = stpcpy(p, sp->path) + 1;
    h.len = (uint32_t)len;
    int fds[SRV_MAX_FDS], nfd = 0;
    h.flags = (sp->standby ? SRV_STANDBY : 0) | (sp->exec_ahead ? SRV_EXEC_AHEAD : 0) |
              (sp->cwd ? SRV_CWD : 0) | (sp->path ? SRV_PATH : 0);
    if (sp->stdin_fd > 0)
        h.flags |= SRV_STDIN, fds[nfd++] = sp->stdin_fd;
    if (sp->stdout_fd >= 0)
        h.flags |= SRV_STDOUT, fds[nfd++] = sp->stdout_fd;
    if (sp->stderr_fd >= 0)
        h.flags |= SRV_STDERR, fds[nfd++] = sp->stderr_fd;
    if (sp->go_rfd > 0)
        h.flags |= SRV_GO_R, fds[nfd++] = sp->go_rfd;
    if (sp->go_wfd > 0)
        h.flags |= SRV_GO_W, fds[nfd++] = sp->go_wfd;
    struct iovec iov[2] = {{.iov_base = &h, .iov_len = sizeof h},
                           {.iov_base = buf, .iov_len = len}};
    int rc = srv_send(srv_fd, iov, 2, fds, nfd);
    free(buf);
    if (rc) {
        if (rc != -EMSGSIZE) /* too big for the socket: this one forks here */
            srv_give_up();
        return 1;
    }
    struct pollfd pf = {.fd = srv_fd, .events = POLLIN};
    int pr, wait_ms = SRV_REPLY_MS;
#ifdef FB_TEST_HOOKS
    const char *ms = getenv("FIREBREAK_TEST_SHIM_SERVER_REPLY_MS");
    if (ms && atoi(ms) > 0)
        wait_ms = atoi(ms);
#endif
    while ((pr = poll(&pf, 1, wait_ms)) < 0 && errno == EINTR)
        ;
    srv_reply rep;
    int got[SRV_MAX_FDS], ngot = 0;
    ssize_t n = pr == 1 ? srv_recv(srv_fd, &rep, sizeof rep, got, SRV_MAX_FDS, &ngot) : -1;
    if (n != (ssize_t)sizeof rep || (rep.pid > 0 ? ngot != 2 : ngot != 0)) {
        srv_close_fds(got, ngot);
        srv_give_up(); /* silent, dead or confused: no more requests */
        return 1;
    }
    srv_cpu += rep.cpu_ns;
    if (rep.pid <= 0)
        return rep.pid < 0 ? rep.pid : -EPROTO;
    /* The shim's go-ahead (srv_serve): from now on it is ours. */
    ssize_t w;
    while ((w = send(got[1], "g", 1, MSG_NOSIGNAL)) < 0 && errno == EINTR)
        ;
    close(got[1]);
    if (w != 1) { /* it is gone already: reaped as a stranger */
        close(got[0]);
        return 1;
    }
    fcntl(got[0], F_SETFL, O_NONBLOCK);
    *shim_pid = rep.pid;
    *msg_fd = got[0];
    return 0;
}

int fb__shim_spawn(const fb__spawn *sp, pid_t *shim_pid, int *msg_fd)
{
    if (srv_fd >= 0) {
        int rc = srv_spawn(sp, shim_pid, msg_fd);
        if (rc <= 0)
            return rc;
    }
    int p[2];
    if (pipe2(p, O_CLOEXEC))
        return -errno;
    pid_t supervisor = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(p[0]);
        close(p[1]);
        return -e;
    }
    if (pid == 0) {
        close(p[0]);
        shim_main(sp, supervisor, p[1]);
        _exit(1);
    }
    close(p[1]);
    fcntl(p[0], F_SETFL, O_NONBLOCK);
    *shim_pid = pid;
    *msg_fd = p[0];
    return 0;
}

int fb__shim_read(int fd, fb__shim_msg *m)
{
    ssize_t r = read(fd, m, sizeof *m);
    if (r == (ssize_t)sizeof *m)
        return 1;
    if (r < 0 && (errno == EAGAIN || errno == EINTR))
        return 0;
    return -1;
}

void fb__shim_stop(pid_t shim, int hard)
{
    if (shim > 0)
        kill(shim, hard ? SIGUSR2 : SIGTERM);
}

void fb__shim_signal(pid_t shim, int sig)
{
    if (shim > 0)
        kill(shim, sig);
}

/* Whole pages, so that the advice covers nothing but the array. */
static size_t nofork_len(size_t n, size_t size)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if (size && n > (SIZE_MAX - page) / size)
        return 0;
    size_t len = n * size;
    return len ? (len + page - 1) / page * page : page;
}

void *fb__proc_calloc_nofork(size_t n, size_t size)
{
    size_t len = nofork_len(n, size);
    if (!len)
        return NULL;
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    /* Without the advice the array still works; a fork costs more. */
    (void)madvise(p, len, MADV_DONTFORK);
    return p;
}

void fb__proc_free_nofork(void *p, size_t n, size_t size)
{
    if (p)
        munmap(p, nofork_len(n, size));
}
