/*
 * warm.c -- the warm pool (docs/supervisor.md, "Warm pool"): for a local
 * job whose program is `python [-u] SCRIPT ...` or `python [-u] -m MOD ...`,
 * one Python interpreter per rank, started ahead (once the running attempt
 * has stepped), with torch imported, waiting to become the next attempt's
 * rank.  At the next launch the supervisor hands each waiting interpreter
 * its rank's argv, environment and output file; the interpreter
 * (python/firebreak/_boot/fbwarm.py) then runs the script as __main__.
 * A slot that is not ready within WARM_WAIT_MS (none is waited for after
 * one was not), or gone, falls back to a normal launch.
 *
 * Each interpreter runs under a shim like any rank (proc.h), so nothing is
 * left behind when the supervisor dies, even by SIGKILL: the shim's
 * parent-death signal kills it and its tree.  The control channel is a
 * socketpair: the shim puts its far end on the interpreter's stdout
 * (fb__spawn has no other fd to pass); the interpreter takes it off fd 1,
 * writes 'R' once torch is imported, and exits when the channel closes.
 *
 * Message (supervisor -> interpreter): "FBW1", u32 length (little endian),
 * with the rank's output fd as SCM_RIGHTS; then `length` bytes: argv
 * strings, NUL each, an empty string, environment strings, NUL each, an
 * empty string.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"
#include "supervisor/sup.h"

#define WARM_WAIT_MS 10000     /* a slot still importing torch: at most */
#define WARM_MSG_MAX (1u << 20)

typedef struct warm_slot {
    pid_t shim;           /* 0: empty                                     */
    int msg_fd, ctl;      /* shim messages; control socket                */
    pid_t pid;            /* the interpreter, once the shim said          */
    int ready, dead;
    uint64_t started_ns;
} warm_slot;

struct fb__sup_warm {
    int n;
    int timed_out;        /* a slot was not ready in time: no more waits   */
    int taken;            /* ranks the launch gave an interpreter of it    */
    double age_min, age_max; /* how long before those had started, s       */
    warm_slot slot[];
};

/* The program's own interpreter arguments that the pool can take over:
 * [-u] SCRIPT or [-u] -m MODULE.  Returns the index of the script (or of
 * "-m"), 0 when the form is another. */
static int script_index(char *const *argv)
{
    const char *b = strrchr(argv[0], '/');
    b = b ? b + 1 : argv[0];
    if (strncmp(b, "python", 6) || strspn(b + 6, "0123456789.") != strlen(b + 6))
        return 0;
    int i = 1;
    if (argv[i] && !strcmp(argv[i], "-u"))
        i++;
    if (!argv[i])
        return 0;
    if (!strcmp(argv[i], "-m"))
        return argv[i + 1] ? i : 0;
    return argv[i][0] == '-' ? 0 : i;
}

int fb__sup_warm_enabled(const fb__sup *s)
{
    return !s->o->no_warm_pool && s->o->launcher == FB__LAUNCH_LOCAL && s->o->argv &&
           s->world <= FB__SUP_MAX_WARM &&
           script_index(s->o->argv) > 0;
}

/* Read what the slot's shim said: its interpreter's pid, or its end. */
static void slot_poll(warm_slot *w)
{
    fb__shim_msg m;
    int r;
    while (w->msg_fd >= 0 && (r = fb__shim_read(w->msg_fd, &m)) != 0) {
        if (r < 0 || m.type == FB_SHIM_ENDED) {
            w->dead = 1;
            return;
        }
        if (m.type == FB_SHIM_STARTED)
            w->pid = m.pid;
    }
}

/* Wait up to ms (0: only look) for the slot's 'R'; 1 ready. */
static int slot_wait_ready(warm_slot *w, int ms)
{
    uint64_t until = fb__now_ns() + (uint64_t)ms * 1000000ull;
    while (!w->ready && !w->dead) {
        struct pollfd p = {.fd = w->ctl, .events = POLLIN};
        int64_t left = ((int64_t)until - (int64_t)fb__now_ns()) / 1000000;
        int n = poll(&p, 1, left <= 0 ? 0 : left < 50 ? (int)left : 50);
        if (n > 0) {
            char c;
            ssize_t r = recv(w->ctl, &c, 1, MSG_DONTWAIT);
            if (r == 1 && c == 'R')
                w->ready = 1;
            else if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
                w->dead = 1;
        }
        slot_poll(w);
        if (fb__now_ns() >= until)
            break;
    }
    return w->ready && !w->dead;
}

static void slot_close(warm_slot *w)
{
    if (!w->shim)
        return;
    if (w->ctl >= 0)
        close(w->ctl); /* the interpreter sees EOF and exits */
    w->ctl = -1;
    fb__shim_stop(w->shim, 1);
    int ws;
    uint64_t until = fb__now_ns() + 3000000000ull;
    for (;;) {
        pid_t p = waitpid(w->shim, &ws, WNOHANG);
        if (p == w->shim || (p < 0 && errno == ECHILD))
            break;
        if (fb__now_ns() >= until) {
            kill(w->shim, SIGKILL);
            waitpid(w->shim, &ws, 0);
            break;
        }
        struct timespec ts = {0, 5000000};
        nanosleep(&ts, NULL);
    }
    if (w->msg_fd >= 0)
        close(w->msg_fd);
    memset(w, 0, sizeof *w);
    w->msg_fd = w->ctl = -1;
}

void fb__sup_warm_close(fb__sup *s)
{
    if (!s->warm)
        return;
    for (int i = 0; i < s->warm->n; i++)
        slot_close(&s->warm->slot[i]);
    free(s->warm);
    s->warm = NULL;
}

/* Start one interpreter per rank, with the attempt's common environment
 * less the hooks (armed once the rank's environment is in place). */
static int warm_start(fb__sup *s)
{
    char dir[PATH_MAX], script[PATH_MAX];
    if (fb__sup_python_dir(dir, sizeof dir) ||
        fb__fmt(script, sizeof script, "%s/firebreak/_boot/fbwarm.py", dir) ||
        access(script, R_OK)) {
        if (!s->warm_said++)
            fb__sup_log(s, "no warm pool: no copy of firebreak's Python package "
                        "(set FIREBREAK_PYTHON_DIR); restarts start fresh interpreters");
        return -ENOENT;
    }
    struct fb__sup_warm *pool = calloc(1, sizeof *pool + (size_t)s->world * sizeof(warm_slot));
    if (!pool)
        return -ENOMEM;
    pool->n = s->world;
    for (int i = 0; i < pool->n; i++)
        pool->slot[i].msg_fd = pool->slot[i].ctl = -1;
    s->warm = pool;
    char **env = fb__sup_env_common(s);
    if (!env)
        return -ENOMEM;
    size_t ne = 0;
    while (env[ne])
        ne++;
    char **wenv = calloc(ne + 3, sizeof *wenv);
    if (!wenv) {
        fb__sup_env_free(env);
        return -ENOMEM;
    }
    size_t k = 0;
    for (size_t i = 0; i < ne; i++)
        if (strncmp(env[i], "FIREBREAK_PYTHON_HOOKS=", 23))
            wenv[k++] = env[i];
    wenv[k++] = "FIREBREAK_PYTHON_HOOKS=0";
    wenv[k++] = "FIREBREAK_WARM=1";
    wenv[k] = NULL;
    char *argv[] = {s->o->argv[0], script, NULL};
    int rc = 0;
    for (int r = 0; r < pool->n && !rc; r++) {
        warm_slot *w = &pool->slot[r];
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) {
            rc = -errno;
            break;
        }
        char logp[PATH_MAX];
        int lfd = -1;
        if (!fb__fmt(logp, sizeof logp, "%s/warm-%d.log", s->logs_dir, r))
            lfd = fb__open_append_regular(logp, 0644);
        fb__spawn sp = {.argv = argv, .envp = wenv, .stdout_fd = sv[1],
                        .stderr_fd = lfd};
        rc = fb__shim_spawn(&sp, &w->shim, &w->msg_fd);
        close(sv[1]);
        if (lfd >= 0)
            close(lfd);
        if (rc) {
            close(sv[0]);
            w->shim = 0;
            break;
        }
        w->ctl = sv[0];
        w->started_ns = fb__now_ns();
    }
    free(wenv);
    fb__sup_env_free(env);
    if (rc) {
        fb__sup_log(s, "cannot start the warm pool: %s", fb_strerror(rc));
        fb__sup_warm_close(s);
    }
    return rc;
}

void fb__sup_warm_tick(fb__sup *s)
{
    if (!s->warm && s->attempt_ready_ns && fb__sup_warm_enabled(s) &&
        s->attempt < s->o->max_restarts && !s->warm_failed)
        s->warm_failed = warm_start(s) != 0;
}

int fb__sup_warm_keep(const fb__sup *s, pid_t *keep, int max)
{
    int n = 0;
    for (int i = 0; s->warm && i < s->warm->n && n < max; i++)
        if (s->warm->slot[i].shim > 0)
            keep[n++] = s->warm->slot[i].shim;
    return n;
}

int fb__sup_warm_reaped(fb__sup *s, pid_t pid)
{
    for (int i = 0; s->warm && i < s->warm->n; i++) {
        warm_slot *w = &s->warm->slot[i];
        if (w->shim == pid) {
            w->dead = 1;
            w->shim = 0; /* reaped: nothing to wait for */
            if (w->ctl >= 0)
                close(w->ctl);
            if (w->msg_fd >= 0)
                close(w->msg_fd);
            w->ctl = w->msg_fd = -1;
            return 1;
        }
    }
    return 0;
}

static int send_spec(int ctl, char *const *argv, char *const *envp, int out_fd)
{
    size_t len = 2;
    for (char *const *a = argv; *a; a++)
        len += strlen(*a) + 1;
    for (char *const *e = envp; *e; e++)
        len += strlen(*e) + 1;
    if (len > WARM_MSG_MAX)
        return -E2BIG;
    char *buf = malloc(len), *p = buf;
    if (!buf)
        return -ENOMEM;
    for (char *const *a = argv; *a; a++)
        p = stpcpy(p, *a) + 1;
    *p++ = '\0';
    for (char *const *e = envp; *e; e++)
        p = stpcpy(p, *e) + 1;
    *p++ = '\0';
    unsigned char hdr[8] = {'F', 'B', 'W', '1', (unsigned char)len,
                            (unsigned char)(len >> 8), (unsigned char)(len >> 16),
                            (unsigned char)(len >> 24)};
    struct iovec iov = {.iov_base = hdr, .iov_len = sizeof hdr};
    union {
        struct cmsghdr h;
        char b[CMSG_SPACE(sizeof(int))];
    } c;
    memset(&c, 0, sizeof c);
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = c.b,
                        .msg_controllen = sizeof c.b};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &out_fd, sizeof(int));
    int rc = 0;
    if (sendmsg(ctl, &mh, MSG_NOSIGNAL) != (ssize_t)sizeof hdr)
        rc = -EPIPE;
    for (size_t off = 0; !rc && off < len;) {
        ssize_t w = send(ctl, buf + off, len - off, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            rc = -EPIPE;
        else
            off += (size_t)w;
    }
    free(buf);
    return rc;
}

int fb__sup_warm_take(fb__sup *s, int rank, char *const *envp, int out_fd,
                      fb__sup_unit *u)
{
    if (!s->warm || rank >= s->warm->n)
        return -ENOENT;
    warm_slot *w = &s->warm->slot[rank];
    if (!w->shim)
        return -ENOENT;
    slot_poll(w);
    uint64_t t0 = fb__now_ns();
    int ready = slot_wait_ready(w, s->warm->timed_out ? 0 : WARM_WAIT_MS);
    s->relaunch.warm_ns += fb__now_ns() - t0;
    if (!ready || !w->pid) {
        s->warm->timed_out |= !w->dead;
        fb__sup_log(s, "rank %d: its warm interpreter is %s: a fresh one instead",
                    rank, w->dead ? "gone" : "not ready");
        slot_close(w);
        return -EAGAIN;
    }
    int rc = send_spec(w->ctl, s->o->argv, envp, out_fd);
    if (rc) {
        fb__sup_log(s, "rank %d: cannot hand its warm interpreter the rank: %s",
                    rank, fb_strerror(rc));
        slot_close(w);
        return rc;
    }
    u->shim = w->shim;
    u->msg_fd = w->msg_fd;
    u->child = w->pid;
    s->ranks[rank].pid = w->pid;
    double age = (double)(fb__now_ns() - w->started_ns) / 1e9;
    struct fb__sup_warm *p = s->warm;
    p->age_min = !p->taken || age < p->age_min ? age : p->age_min;
    p->age_max = !p->taken || age > p->age_max ? age : p->age_max;
    p->taken++;
    /* The control socket stays open in the interpreter only; ours goes. */
    close(w->ctl);
    memset(w, 0, sizeof *w);
    w->msg_fd = w->ctl = -1;
    return 0;
}

/* After a launch: what the pool did not give goes. */
void fb__sup_warm_after_launch(fb__sup *s)
{
    /* one line for the launch, not one a rank (a pool of 256) */
    const struct fb__sup_warm *p = s->warm;
    if (p && p->taken) {
        char ages[64], hi[32];
        snprintf(ages, sizeof ages, "%.1f", p->age_min);
        snprintf(hi, sizeof hi, "%.1f", p->age_max);
        if (strcmp(ages, hi)) /* a range only where it shows */
            snprintf(ages + strlen(ages), sizeof ages - strlen(ages), "-%s", hi);
        fb__sup_log(s, "attempt %d: %d of %d rank%s in warm interpreters started %s s "
                    "before (each says which rank it became in logs/warm-<R>.log)",
                    s->attempt, p->taken, s->world, s->world == 1 ? "" : "s", ages);
    }
    fb__sup_warm_close(s);
}
