/*
 * test_shim.c -- the shim every launched process runs under
 * (src/supervisor/proc.c), with real processes:
 *
 *   - STARTED names a process that already runs the program (the shim
 *     starts the rank with vfork and exec, and
 *     reports once the exec is done);
 *   - a program that cannot be started: ENDED, exit 127, its errno;
 *   - cwd, stdout and the environment reach the program;
 *   - a stop (SIGTERM through the shim) ends the program with SIGTERM;
 *   - the supervisor's main thread ending first (as a SIGKILL takes its
 *     threads down one by one) ends the program at once by SIGKILL, never
 *     by a SIGTERM passed on as a stop (srun would SIGKILL its step's
 *     tasks then, before they cleaned up);
 *   - the supervisor's per-rank arrays (fb__proc_calloc_nofork) are not
 *     inherited by a fork, so that writing them after a shim's fork takes
 *     no copy-on-write fault;
 *   - the shim server, its own program (argv[1]) exec'd, and a fork
 *     where there is none: its shims are this process's children, hold
 *     none of its close-on-exec descriptors; they run at this process's nice, their programs at the
 *     nice before fb__proc_nice_raise; the tests above through it;
 *     a server killed is replaced by forks here; a server that answers
 *     after the timeout is given up, and the shim it made starts nothing;
 *     a stop leaves nothing;
 *   - the sweep (fb__proc_sweep) kills every descendant but those kept and
 *     what is below them, however deep.
 *
 * `test_shim --cost N [--server]` (not a test: docs/bench.md) starts N
 * shims of /bin/true one after the other (through the shim server) and
 * prints the wall time of the spawn calls and the CPU of the shims and
 * their programs, per process.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../check.h"
#include "supervisor/proc.h"

extern char **environ;

/* The next message of a shim, waiting up to 10 s; 1 read, else 0. */
static int next_msg(int fd, fb__shim_msg *m)
{
    for (int waited = 0; waited < 10000; waited += 100) {
        int r = fb__shim_read(fd, m);
        if (r)
            return r > 0;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        poll(&p, 1, 100);
    }
    return 0;
}

/* Start argv under a shim and read its first message, which must be
 * STARTED; 0, or -1 (counted as a failure). */
static int spawn_started(fb__spawn *sp, pid_t *shim, int *fd, fb__shim_msg *m)
{
    int rc = fb__shim_spawn(sp, shim, fd);
    CHECK_RC(rc, 0);
    if (rc)
        return -1;
    int got = next_msg(*fd, m);
    CHECK(got);
    CHECK_EQ_INT(m->type, FB_SHIM_STARTED);
    return got && m->type == FB_SHIM_STARTED ? 0 : -1;
}

static void reap(pid_t shim)
{
    int st;
    while (waitpid(shim, &st, 0) < 0 && errno == EINTR)
        ;
}

/* The program's path as the kernel knows it, or "" when it has none. */
static void exe_of(pid_t pid, char *buf, size_t size)
{
    char link[64];
    snprintf(link, sizeof link, "/proc/%d/exe", (int)pid);
    ssize_t n = readlink(link, buf, size - 1);
    buf[n > 0 ? n : 0] = '\0';
}

static void test_started_after_exec(void)
{
    char sleep_path[PATH_MAX];
    if (!realpath("/bin/sleep", sleep_path)) {
        fprintf(stderr, "test_shim: no /bin/sleep\n");
        failures++;
        return;
    }
    /* Several rounds: a STARTED sent before the exec would show the
     * shim's own program at least once. */
    for (int round = 0; round < 100; round++) {
        char *argv[] = {"sleep", "30", NULL};
        fb__spawn sp = {.argv = argv, .envp = environ, .stdout_fd = -1,
                        .stderr_fd = -1};
        pid_t shim;
        int fd;
        fb__shim_msg m;
        if (spawn_started(&sp, &shim, &fd, &m))
            break;
        char exe[PATH_MAX];
        exe_of(m.pid, exe, sizeof exe);
        CHECK_EQ_STR(exe, sleep_path);
        /* The rank leads a process group of its own. */
        CHECK_EQ_INT(getpgid(m.pid), m.pid);
        fb__shim_stop(shim, 0);
        CHECK(next_msg(fd, &m));
        CHECK_EQ_INT(m.type, FB_SHIM_ENDED);
        CHECK(WIFSIGNALED(m.wstatus) && WTERMSIG(m.wstatus) == SIGTERM);
        CHECK_EQ_INT(m.exec_errno, 0);
        close(fd);
        reap(shim);
        if (failures)
            break;
    }
}

/* The "supervisor" of test_parent_thread_ends: a thread that outlives the
 * main one by 3 s, as a SIGKILLed process's last thread may. */
static void *outlive(void *arg)
{
    (void)arg;
    struct timespec ts = {3, 0};
    nanosleep(&ts, NULL);
    _exit(0);
}

/* server_program: the "supervisor" starts its shim server (whose shims
 * are its main thread's children too), else NULL: it forks them. */
static void test_parent_thread_ends(const char *server_program)
{
    char dir[] = "/tmp/fb-test-shim.XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(0);
        return;
    }
    char term[PATH_MAX], script[PATH_MAX + 128];
    snprintf(term, sizeof term, "%s/term", dir);
    /* A program that says so when a SIGTERM reaches it, and goes on. */
    snprintf(script, sizeof script,
             "trap 'echo TERM > %s' TERM; while :; do sleep 0.02; done", term);
    int p[2];
    if (pipe(p)) {
        CHECK(0);
        return;
    }
    pid_t sup = fork();
    if (sup == 0) {
        close(p[0]);
        char *argv[] = {"sh", "-c", script, NULL};
        fb__spawn sp = {.argv = argv, .envp = environ, .stdout_fd = -1, .stderr_fd = -1};
        pid_t shim;
        int fd;
        fb__shim_msg m;
        pthread_t th;
        if (server_program && (setenv("FIREBREAK_SHIM_SERVER_PROGRAM", server_program, 1) ||
                               fb__shim_server_start() || fb__shim_server_pid() <= 0))
            _exit(1);
        if (pthread_create(&th, NULL, outlive, NULL) || fb__shim_spawn(&sp, &shim, &fd) ||
            !next_msg(fd, &m) || m.type != FB_SHIM_STARTED)
            _exit(1);
        pid_t pids[2] = {shim, m.pid};
        (void)!write(p[1], pids, sizeof pids);
        struct timespec ts = {0, 200000000}; /* the trap set */
        nanosleep(&ts, NULL);
        syscall(SYS_exit, 0); /* this thread only */
    }
    close(p[1]);
    pid_t pids[2] = {0, 0};
    CHECK(read(p[0], pids, sizeof pids) == (ssize_t)sizeof pids);
    close(p[0]);
    /* Gone within 2 s, while the supervisor still lives (its other
     * thread): by the main thread's end, not by the whole process's. */
    int gone = 0;
    for (int t = 0; t < 200 && pids[1] > 0 && !gone; t++) {
        gone = kill(pids[1], 0) && errno == ESRCH;
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    CHECK(gone);
    CHECK_EQ_INT(kill(sup, 0), 0);
    CHECK_EQ_INT(access(term, F_OK), -1);
    int st;
    CHECK_EQ_INT(waitpid(sup, &st, 0), sup);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    if (!gone && pids[1] > 0)
        kill(pids[1], SIGKILL);
    unlink(term);
    rmdir(dir);
}

static void test_exec_fails(void)
{
    char *argv[] = {"/nonexistent/fb-no-such-program", NULL};
    fb__spawn sp = {.argv = argv, .envp = environ, .stdout_fd = -1, .stderr_fd = -1};
    pid_t shim;
    int fd;
    fb__shim_msg m;
    if (spawn_started(&sp, &shim, &fd, &m))
        return;
    CHECK(next_msg(fd, &m));
    CHECK_EQ_INT(m.type, FB_SHIM_ENDED);
    CHECK(WIFEXITED(m.wstatus) && WEXITSTATUS(m.wstatus) == 127);
    CHECK_EQ_INT(m.exec_errno, ENOENT);
    close(fd);
    reap(shim);

    /* A working directory that is not there: its errno, not the exec's. */
    char *argv2[] = {"/bin/true", NULL};
    sp.argv = argv2;
    sp.cwd = "/nonexistent/fb-no-such-dir";
    if (spawn_started(&sp, &shim, &fd, &m))
        return;
    CHECK(next_msg(fd, &m));
    CHECK_EQ_INT(m.type, FB_SHIM_ENDED);
    CHECK_EQ_INT(m.exec_errno, ENOENT);
    CHECK(WIFEXITED(m.wstatus) && WEXITSTATUS(m.wstatus) == 127);
    close(fd);
    reap(shim);
}

static void test_cwd_stdout_env(void)
{
    int out[2];
    if (pipe(out)) {
        failures++;
        return;
    }
    char *argv[] = {"sh", "-c", "printf '%s %s' \"$(pwd)\" \"$FB_TEST_SHIM\"", NULL};
    char *envp[] = {"FB_TEST_SHIM=hello", "PATH=/usr/bin:/bin", NULL};
    fb__spawn sp = {.argv = argv, .envp = envp, .cwd = "/", .stdout_fd = out[1],
                    .stderr_fd = -1};
    pid_t shim;
    int fd;
    CHECK_RC(fb__shim_spawn(&sp, &shim, &fd), 0);
    close(out[1]);
    char buf[256];
    size_t n = 0;
    ssize_t r;
    while (n < sizeof buf - 1 && (r = read(out[0], buf + n, sizeof buf - 1 - n)) > 0)
        n += (size_t)r;
    buf[n] = '\0';
    CHECK_EQ_STR(buf, "/ hello");
    fb__shim_msg m;
    CHECK(next_msg(fd, &m));
    CHECK(next_msg(fd, &m));
    CHECK_EQ_INT(m.type, FB_SHIM_ENDED);
    CHECK(WIFEXITED(m.wstatus) && WEXITSTATUS(m.wstatus) == 0);
    close(out[0]);
    close(fd);
    reap(shim);
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static double cpu_s(const struct rusage *u)
{
    return (double)(u->ru_utime.tv_sec + u->ru_stime.tv_sec) +
           (double)(u->ru_utime.tv_usec + u->ru_stime.tv_usec) / 1e6;
}

static int cost(int n)
{
    char *argv[] = {"/bin/true", NULL};
    fb__spawn sp = {.argv = argv, .envp = environ, .stdout_fd = -1, .stderr_fd = -1};
    pid_t *shim = calloc((size_t)n, sizeof *shim);
    int *fd = calloc((size_t)n, sizeof *fd);
    if (!shim || !fd)
        return 1;
    struct rusage c0, c1, s0, s1;
    getrusage(RUSAGE_CHILDREN, &c0);
    getrusage(RUSAGE_SELF, &s0);
    uint64_t srv0 = fb__shim_server_cpu_ns();
    double t0 = now_s();
    for (int i = 0; i < n; i++)
        if (fb__shim_spawn(&sp, &shim[i], &fd[i]))
            return 1;
    double t1 = now_s();
    getrusage(RUSAGE_SELF, &s1);
    double srv_ms = (double)(fb__shim_server_cpu_ns() - srv0) / 1e6;
    for (int i = 0; i < n; i++) {
        reap(shim[i]);
        close(fd[i]);
    }
    double t2 = now_s();
    getrusage(RUSAGE_CHILDREN, &c1);
    printf("%d shims of /bin/true%s: spawn calls %.3f ms each (this process's CPU "
           "%.3f ms each, the shim server's %.3f); all ended after %.3f ms each; CPU "
           "of the shims and their programs %.3f ms each\n", n,
           fb__shim_server_pid() > 0 ? " through the shim server" : "",
           (t1 - t0) * 1e3 / n, (cpu_s(&s1) - cpu_s(&s0)) * 1e3 / n, srv_ms / n,
           (t2 - t0) * 1e3 / n, (cpu_s(&c1) - cpu_s(&c0)) * 1e3 / n);
    free(shim);
    free(fd);
    return 0;
}

/* Memory from fb__proc_calloc_nofork: zeroed; absent in a forked child;
 * after a fork the parent writes it without a fault per page (a plain
 * allocation takes one copy-on-write fault on each page it writes). */
static void test_nofork_arrays(void)
{
    enum { PAGES = 64 };
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    unsigned char *a = fb__proc_calloc_nofork(PAGES, page);
    CHECK(a != NULL);
    if (!a)
        return;
    int zero = 1;
    for (size_t i = 0; i < PAGES * page; i += 97)
        zero &= a[i] == 0;
    CHECK(zero);
    for (size_t i = 0; i < PAGES; i++)
        a[i * page] = 1;
    pid_t pid = fork();
    if (pid == 0) {
        /* mincore fails with ENOMEM on a range that is not mapped. */
        unsigned char vec[PAGES];
        _exit(mincore(a, PAGES * page, vec) == -1 && errno == ENOMEM ? 0 : 1);
    }
    CHECK(pid > 0);
    struct rusage r0, r1;
    getrusage(RUSAGE_SELF, &r0);
    for (size_t i = 0; i < PAGES; i++)
        a[i * page] = 2;
    getrusage(RUSAGE_SELF, &r1);
    long faults = r1.ru_minflt - r0.ru_minflt;
    CHECKF(faults < PAGES / 2, "%ld faults writing %d pages after a fork", faults, PAGES);
    int ws = 0;
    CHECK(waitpid(pid, &ws, 0) == pid);
    CHECKF(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "the child saw the array (status %d)", ws);
    fb__proc_free_nofork(a, PAGES, page);
}

/* The shim server: a shim it forks is this process's child (CLONE_PARENT),
 * not the server's; the descriptors a spawn names reach the program; the
 * server's CPU is counted; a server killed is noticed at the next spawn,
 * which forks here instead; after a stop nothing of it is left. */
/* Whether process pid holds a descriptor of path. */
static int holds(pid_t pid, const char *path)
{
    char dir[64], link[PATH_MAX], target[PATH_MAX];
    snprintf(dir, sizeof dir, "/proc/%d/fd", (int)pid);
    DIR *d = opendir(dir);
    struct dirent *e;
    int found = 0;
    while (d && (e = readdir(d))) {
        snprintf(link, sizeof link, "%s/%s", dir, e->d_name);
        ssize_t n = readlink(link, target, sizeof target - 1);
        if (n > 0) {
            target[n] = '\0';
            found |= !strcmp(target, path);
        }
    }
    if (d)
        closedir(d);
    return found;
}

/* The nice of a process (field 19 of its stat), or 99. */
static int nice_of(pid_t pid)
{
    char path[64], st[512] = "";
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 99;
    int n = 99;
    if (fgets(st, sizeof st, f)) {
        const char *rp = strrchr(st, ')');
        if (!rp || sscanf(rp + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u "
                          "%*d %*d %*d %d", &n) != 1)
            n = 99;
    }
    fclose(f);
    return n;
}

/* program: the server's own (FIREBREAK_SHIM_SERVER_PROGRAM), or NULL: none
 * to exec (a path that does not exist), so the fork serves.  nice_raised:
 * this process runs a step above the nice it started with, which the
 * ranks get back. */
static void test_server(const char *program, int nice_raised)
{
    setenv("FIREBREAK_SHIM_SERVER_PROGRAM", program ? program : "/nonexistent/fb-shim-server",
           1);
    /* Open before the server: one close-on-exec (the supervisor's own:
     * not for the shims), one without (the user's: every rank inherits
     * it, through the shim). */
    char own[] = "/tmp/fb-test-shim-own.XXXXXX", user[] = "/tmp/fb-test-shim-user.XXXXXX";
    int own_fd = mkstemp(own), user_fd = mkstemp(user);
    CHECK(own_fd >= 0 && user_fd >= 0);
    fcntl(own_fd, F_SETFD, FD_CLOEXEC);
    fcntl(user_fd, F_SETFD, 0);
    CHECK_RC(fb__shim_server_start(), 0);
    pid_t srv = fb__shim_server_pid();
    CHECK(srv > 0);
    char comm[64] = "";
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/comm", (int)srv);
    FILE *f;
    /* it names itself once it runs */
    for (int i = 0; i < 500 && strcmp(comm, "fb-shim-server\n"); i++) {
        if (i)
            usleep(10000);
        if ((f = fopen(path, "r"))) {
            if (!fgets(comm, sizeof comm, f))
                comm[0] = '\0';
            fclose(f);
        }
    }
    CHECK_EQ_STR(comm, "fb-shim-server\n");

    char *argv[] = {"sleep", "30", NULL};
    fb__spawn sp = {.argv = argv, .envp = environ, .stdout_fd = -1, .stderr_fd = -1};
    pid_t shim;
    int fd;
    fb__shim_msg m;
    uint64_t cpu0 = fb__shim_server_cpu_ns();
    if (!spawn_started(&sp, &shim, &fd, &m)) {
        /* the parent the kernel knows: this process */
        char st[512] = "";
        snprintf(path, sizeof path, "/proc/%d/stat", (int)shim);
        f = fopen(path, "r");
        int ppid = -1;
        if (f) {
            if (fgets(st, sizeof st, f)) {
                const char *rp = strrchr(st, ')');
                if (rp)
                    sscanf(rp + 2, "%*c %d", &ppid);
            }
            fclose(f);
        }
        CHECK_EQ_INT(ppid, (int)getpid());
        /* the server's own program, a copy of it in each shim (not of
         * this process: docs/supervisor.md, "The shim server") */
        char exe[PATH_MAX] = "";
        snprintf(path, sizeof path, "/proc/%d/exe", (int)shim);
        ssize_t n = readlink(path, exe, sizeof exe - 1);
        exe[n > 0 ? n : 0] = '\0';
        const char *base = strrchr(exe, '/') ? strrchr(exe, '/') + 1 : exe;
        CHECK_EQ_STR(base, program ? "fb-shim-server" : "test_shim");
        /* the shim at this process's nice, its program at the one before */
        int mine = nice_of(getpid());
        CHECK_EQ_INT(nice_of(shim), mine);
        CHECK_EQ_INT(nice_of(m.pid), mine + nice_raised);
        CHECKF(!holds(shim, own), "the shim holds this process's %s", own);
        CHECKF(holds(shim, user), "the shim lost the inherited %s", user);
        CHECK(fb__shim_server_cpu_ns() > cpu0);
        fb__shim_stop(shim, 0);
        CHECK(next_msg(fd, &m));
        CHECK_EQ_INT(m.type, FB_SHIM_ENDED);
        CHECK(WIFSIGNALED(m.wstatus) && WTERMSIG(m.wstatus) == SIGTERM);
        close(fd);
        int ws = 0;
        CHECK(waitpid(shim, &ws, 0) == shim); /* ours to reap */
    }
    close(own_fd);
    close(user_fd);
    unlink(own);
    unlink(user);

    /* the tests above again, every shim through the server */
    test_exec_fails();
    test_cwd_stdout_env();
    CHECK_EQ_INT((int)fb__shim_server_pid(), (int)srv);

    /* a server killed: the next spawn forks here, and works */
    kill(srv, SIGKILL);
    int ws = 0;
    CHECK(waitpid(srv, &ws, 0) == srv);
    CHECK_EQ_INT(fb__shim_server_reaped(srv), 1);
    CHECK_EQ_INT((int)fb__shim_server_pid(), 0);
    test_cwd_stdout_env();

    /* A server that answers after the supervisor gave up: the shim it
     * made never starts its program, and the spawn is a fork here.  The
     * program would leave its mark in a file.  (The server reads its
     * hook at its fork.) */
    setenv("FIREBREAK_TEST_SHIM_SERVER_LATE_MS", "600", 1);
    CHECK_RC(fb__shim_server_start(), 0);
    unsetenv("FIREBREAK_TEST_SHIM_SERVER_LATE_MS");
    srv = fb__shim_server_pid();
    char mark[] = "/tmp/fb-test-shim-late.XXXXXX";
    int mfd = mkstemp(mark);
    CHECK(mfd >= 0);
    if (mfd >= 0)
        close(mfd);
    unlink(mark);
    char script[PATH_MAX + 32];
    snprintf(script, sizeof script, "echo ran >> %s", mark);
    char *late_argv[] = {"sh", "-c", script, NULL};
    /* (before environ is read below: setenv may move it) */
    setenv("FIREBREAK_TEST_SHIM_SERVER_REPLY_MS", "100", 1);
    fb__spawn late = {.argv = late_argv, .envp = environ, .stdout_fd = -1,
                      .stderr_fd = -1};
    int ok = !fb__shim_spawn(&late, &shim, &fd);
    unsetenv("FIREBREAK_TEST_SHIM_SERVER_REPLY_MS");
    CHECK(ok);
    CHECK_EQ_INT((int)fb__shim_server_pid(), 0); /* given up: killed and reaped */
    CHECK(kill(srv, 0) < 0 && errno == ESRCH);
    CHECK_EQ_INT(fb__shim_server_reaped(srv), 0);
    if (ok) {
        CHECK(next_msg(fd, &m));
        CHECK(next_msg(fd, &m));
        CHECK_EQ_INT(m.type, FB_SHIM_ENDED);
        close(fd);
        reap(shim);
    }
    /* the shim it made (no go-ahead) ends: the only child left */
    int reaped = 0;
    for (int i = 0; i < 300 && reaped < 1; i++) {
        pid_t p = waitpid(-1, &ws, WNOHANG);
        if (p > 0)
            reaped++;
        else
            usleep(10000);
    }
    CHECK_EQ_INT(reaped, 1);
    CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 1);
    /* once: the fork's run */
    char got[64] = "";
    f = fopen(mark, "r");
    size_t len = f ? fread(got, 1, sizeof got - 1, f) : 0;
    got[len] = '\0';
    if (f)
        fclose(f);
    CHECK_EQ_STR(got, "ran\n");
    unlink(mark);

    /* stopped: killed and reaped */
    CHECK_RC(fb__shim_server_start(), 0);
    srv = fb__shim_server_pid();
    CHECK(srv > 0);
    test_exec_fails();
    fb__shim_server_stop();
    CHECK_EQ_INT((int)fb__shim_server_pid(), 0);
    CHECK(kill(srv, 0) < 0 && errno == ESRCH);
    unsetenv("FIREBREAK_SHIM_SERVER_PROGRAM");
}

/* The server's program run by hand, or with arguments out of bounds: a
 * message and exit status 2, nothing served. */
static void test_server_args(const char *program)
{
    static const char *const bad[] = {
        "", "x 1 - -", "3 1 - -", "0 1 - -", "1 1 - - extra",
        "2 1 - 99", "2 1 -5 -", "2 0 - -", "2 1 - 1x", "99999999999999999999 1 - -",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char cmd[PATH_MAX + 128];
        snprintf(cmd, sizeof cmd, "%s %s 2>/dev/null", program, bad[i]);
        int st = system(cmd);
        CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 2, "'%s' exited %d", bad[i], st);
    }
}

/* The arguments' parser itself: each field read back, "-" left unset,
 * and a number one past each range refused. */
static void test_server_parse(void)
{
    fb__shim_server_argv a;
    char *good[] = {"fb-shim-server", "5", "1234", "1048576", "-20", NULL};
    CHECK(fb__shim_server_parse(5, good, &a) == 0);
    CHECK(a.sock == 5 && a.supervisor == 1234 && a.set_nofile && a.nofile == 1048576 &&
          a.set_nice && a.nice == -20);
    char *unset[] = {"fb-shim-server", "3", "2", "-", "-", NULL};
    CHECK(fb__shim_server_parse(5, unset, &a) == 0);
    CHECK(a.sock == 3 && a.supervisor == 2 && !a.set_nofile && !a.set_nice);
    static const char *const field[][5] = {
        {"x", "2", "3", "-", "-"}, {"x", "3", "1", "-", "-"}, {"x", "3", "2", "-1", "-"},
        {"x", "3", "2", "-", "20"}, {"x", "3", "2", "-", "-21"}, {"x", "3", "2", "", "-"},
        {"x", "3", "2147483648", "-", "-"}, {"x", "3", "2", "-", "1 "},
    };
    for (size_t i = 0; i < sizeof field / sizeof field[0]; i++)
        CHECKF(fb__shim_server_parse(5, (char *const *)field[i], &a) == -EINVAL,
               "case %zu accepted", i);
    CHECK(fb__shim_server_parse(4, good, &a) == -EINVAL);
}

/* A child that forks a grandchild (whose pid it writes to fd) and both
 * sleep. */
static pid_t fork_pair(int fd)
{
    pid_t c = fork();
    if (c == 0) {
        pid_t g = fork();
        if (g == 0) {
            pause();
            _exit(0);
        }
        (void)!write(fd, &g, sizeof g);
        pause();
        _exit(0);
    }
    return c;
}

static int alive(pid_t pid)
{
    char path[64], state = 0;
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    int n = fscanf(f, "%*d (%*[^)]) %c", &state);
    fclose(f);
    return n == 1 && state != 'Z';
}

static void test_sweep_keeps(void)
{
    int p[2];
    CHECK(pipe(p) == 0);
    pid_t kept = fork_pair(p[1]), gone = fork_pair(p[1]), g[2] = {0, 0};
    CHECK(kept > 0 && gone > 0);
    CHECK(read(p[0], &g[0], sizeof g[0]) == sizeof g[0]);
    CHECK(read(p[0], &g[1], sizeof g[1]) == sizeof g[1]);
    close(p[0]);
    close(p[1]);
    int killed = fb__proc_sweep(&kept, 1, 2000);
    CHECKF(killed >= 2, "the sweep killed %d processes", killed);
    CHECK(alive(kept));
    CHECK(!alive(gone));
    int kept_grandchildren = alive(g[0]) + alive(g[1]);
    CHECKF(kept_grandchildren == 1, "%d grandchildren alive, not the kept one's only",
           kept_grandchildren);
    kill(g[0], SIGKILL);
    kill(g[1], SIGKILL);
    kill(kept, SIGKILL);
    waitpid(kept, NULL, 0);
}

int main(int argc, char **argv)
{
    if (argc >= 3 && !strcmp(argv[1], "--cost")) {
        /* --ballast MB: this process first grows to a supervisor's size
         * (MB of memory written, in 350 mappings); --server: the shims
         * through the shim server, started before the ballast (as the
         * supervisor starts it before its tables) */
        int server = 0;
        long mb = 0;
        for (int i = 3; i < argc; i++) {
            if (!strcmp(argv[i], "--server"))
                server = 1;
            else if (!strcmp(argv[i], "--ballast") && i + 1 < argc)
                mb = atol(argv[++i]);
        }
        if (server && fb__shim_server_start())
            return 1;
        for (long i = 0; i < 350 && mb > 0; i++) {
            size_t len = ((size_t)mb << 20) / 350;
            char *b = mmap(NULL, len, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (b == MAP_FAILED)
                return 1;
            memset(b, 1, len);
            /* not merged with the next mapping */
            mprotect(b, 4096, PROT_READ);
        }
        int rc = cost(atoi(argv[2]) > 0 ? atoi(argv[2]) : 100);
        fb__shim_server_stop();
        return rc;
    }
    test_started_after_exec();
    test_exec_fails();
    /* before any server of this process's: the "supervisor" starts its own */
    test_parent_thread_ends(NULL);
    if (argc >= 2)
        test_parent_thread_ends(argv[1]);
    test_cwd_stdout_env();
    test_nofork_arrays();
    /* argv[1]: fb-shim-server; a step of nice up where allowed (root),
     * which its ranks must not keep */
    int before = nice_of(getpid());
    int raised = before > -20 && fb__proc_nice_raise(1) == 0 ? 1 : 0;
    CHECK_EQ_INT(nice_of(getpid()), before - raised);
    if (argc >= 2) {
        test_server(argv[1], raised);
        test_server_args(argv[1]);
    }
    test_server_parse();
    test_server(NULL, raised);
    test_sweep_keeps();
    if (failures)
        fprintf(stderr, "test_shim: %d check%s failed\n", failures,
                failures == 1 ? "" : "s");
    return failures != 0;
}
