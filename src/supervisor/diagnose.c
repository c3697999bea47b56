/*
 * diagnose.c -- the root cause of an incident, from evidence, stored with
 * it (docs/report.md "Root cause", docs/supervisor.md "What happens on a
 * failure").
 *
 * After an attempt failed and its ranks were stopped, the supervisor
 *   1. starts this node's health checks in a child (`firebreak health
 *      --json --since 10m`, killed after DIAG_HEALTH_TIMEOUT_MS) and goes
 *      on with the relaunch; the loop reads the child's answer as it comes
 *      (fb__sup_diagnose_poll) and keeps its verdict in incident.health,
 *      then does the rest: the check (13-340 ms, seconds where a GPU
 *      driver is slow to answer) is not on the path to the next attempt;
 *   2. scans the kernel log (--kmsg, default /dev/kmsg) for the evidence
 *      lines from DIAG_KMSG_BEFORE_S before the incident until now;
 *   3. classifies (src/diag, pure) with those, the exit, the rank's last
 *      lines, a failed save's code and the flight recorder's verdict, and
 *      stores category, component and evidence ("[by RULE] chain").
 * Incidents that do not end an attempt (a failed save, a restore that
 * fell back) are classified when they are written, from what they carry.
 *
 * Both outside inputs are bounded: the child's output (DIAG_HEALTH_MAX
 * bytes, its last line only) and the kernel log (fb__diag_kmsg_scan).
 * Under the slurm launcher the failed rank may be on another node: its
 * health check runs there (`srun --overlap -w NODE firebreak health
 * --json`, same limits); its kernel log is not read (it is not this
 * node's).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/util.h"
#include "diag/diag.h"
#include "firebreak/firebreak.h"
#include "supervisor/sup.h"

#define DIAG_HEALTH_TIMEOUT_MS 20000
#define DIAG_HEALTH_MAX (256u << 10)
#define DIAG_KMSG_BEFORE_S 300
#define DIAG_KLOG_MAX 12288
/* Diagnoses whose checks run at once: failures that come faster than
 * their checks end (a crash loop, a check held up by a slow GPU driver)
 * wait for the oldest beyond this many, not for every one before. */
#define DIAG_INFLIGHT_MAX FB__SUP_DIAG_KEEP_MAX

/* The last non-empty line of out, in place. */
static char *last_line(char *out)
{
    size_t n = strlen(out);
    while (n && (out[n - 1] == '\n' || out[n - 1] == '\r'))
        out[--n] = '\0';
    char *nl = strrchr(out, '\n');
    return nl ? nl + 1 : out;
}

/* The command of the health check of this node, or of `node` (a Slurm
 * node: the check runs there in a step of its own), into argv (20
 * entries); self and var are its storage.  The root of the checks:
 * --health-root, else under Slurm the test hook `firebreak watch
 * --health` reads (FIREBREAK_HEALTH_ROOT_<node>, FIREBREAK_HEALTH_ROOT),
 * else the real system's.  -errno when this program's path is unknown. */
static int health_argv(fb__sup *s, const char *node, char **argv, char *self,
                       size_t self_size, char *var, size_t var_size)
{
    ssize_t n = readlink("/proc/self/exe", self, self_size - 1);
    if (n <= 0)
        return -ENOENT;
    self[n] = '\0';
    int k = 0;
    const char *root = s->o->health_root;
#ifdef FB_TEST_HOOKS
    /* test hook: a check that answers only after this many ms */
    const char *delay = getenv("FIREBREAK_TEST_HEALTH_DELAY_MS");
    static char sleep_cmd[64];
    if (delay && atoi(delay) > 0) {
        snprintf(sleep_cmd, sizeof sleep_cmd, "sleep %d.%03d; exec \"$0\" \"$@\"",
                 atoi(delay) / 1000, atoi(delay) % 1000);
        argv[k++] = "sh";
        argv[k++] = "-c";
        argv[k++] = sleep_cmd;
    }
#endif
    if (node) {
        static const char *const srun[] = {"srun", "--overlap", "--kill-on-bad-exit=0",
                                           "-N", "1", "-n", "1", "-w"};
        for (size_t i = 0; i < sizeof srun / sizeof srun[0]; i++)
            argv[k++] = (char *)srun[i];
        argv[k++] = (char *)node;
        argv[k++] = "--export=ALL";
        snprintf(var, var_size, "FIREBREAK_HEALTH_ROOT_%s", node);
        if (!root)
            root = fb__getenv(var);
        if (!root)
            root = fb__getenv("FIREBREAK_HEALTH_ROOT");
    }
    argv[k++] = self;
    argv[k++] = "health";
    argv[k++] = "--json";
    argv[k++] = "--since";
    argv[k++] = "10m";
    if (root) {
        argv[k++] = "--root";
        argv[k++] = (char *)root;
    }
    argv[k] = NULL;
    return 0;
}

/* A diagnosis under way (fb__sup_diagnose_start): what the failure left,
 * copied, and the health check's child with what it has said so far. */
struct fb__sup_diag {
    int64_t incident_id;
    fb__sup_failure f;
    char *fr_verdict;      /* malloc'd, or NULL */
    char last[2048];       /* the failed rank's last lines */
    int ckpt_code, pid;    /* of the failed rank */
    int local;
    pid_t child;           /* 0: none (not wanted, not started, reaped) */
    int reaped, wstatus, timed_out;
    int out_fd;            /* -1 once it ended */
    char *out;             /* DIAG_HEALTH_MAX bytes */
    size_t len;
    uint64_t t0, deadline;
    struct fb__sup_diag *next; /* s->diag's list, oldest first */
};

/* Read what the check wrote; 1 once its output has ended. */
static int health_read(struct fb__sup_diag *d)
{
    while (d->out_fd >= 0) {
        char tmp[4096];
        ssize_t n = read(d->out_fd, tmp, sizeof tmp);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return 0;
        if (n <= 0) {
            close(d->out_fd);
            d->out_fd = -1;
            break;
        }
        size_t take = (size_t)n;
        if (d->len + take > DIAG_HEALTH_MAX - 1)
            take = DIAG_HEALTH_MAX - 1 - d->len;
        memcpy(d->out + d->len, tmp, take);
        d->len += take;
    }
    return 1;
}

/* The check's verdict (JSON, malloc'd) once it has ended, or NULL with
 * why logged. */
static char *health_verdict(fb__sup *s, struct fb__sup_diag *d)
{
    d->out[d->len] = '\0';
    int rc = d->timed_out ? -ETIMEDOUT
           : WIFEXITED(d->wstatus) ? WEXITSTATUS(d->wstatus) : 128 + WTERMSIG(d->wstatus);
    const char *line = last_line(d->out);
    char *json = NULL;
    /* exit 0 ok, 1 warn, 2 fail, 3 could not check: all answers */
    if (rc >= 0 && rc <= 3 && line[0] == '{')
        json = strdup(line);
    else
        fb__sup_log(s, "health check after the failure gave no verdict (%s)",
                    rc == -ETIMEDOUT ? "timed out" : "no JSON line");
    fb__sup_log(s, "health check after the failure: %s in %.0f ms",
                json ? (rc == 0 ? "ok" : rc == 1 ? "warn" : rc == 2 ? "fail"
                                                           : "unknown")
                     : "none",
                (double)(fb__now_ns() - d->t0) / 1e6);
    return json;
}

/* The kernel log's evidence lines around the failure, or "" (why logged). */
static void kernel_log(fb__sup *s, uint64_t occurred_ns, char *buf, size_t size)
{
    buf[0] = '\0';
    const char *path = s->o->kmsg_path ? s->o->kmsg_path : "/dev/kmsg";
    if (!strcmp(path, "none"))
        return;
    uint64_t at_us = occurred_ns / 1000, now_us = fb__now_ns() / 1000;
    uint64_t before = (uint64_t)DIAG_KMSG_BEFORE_S * 1000000ull;
    int n = fb__diag_kmsg_scan(path, at_us > before ? at_us - before : 0,
                               now_us + 1000000ull, buf, size);
    if (n < 0)
        fb__sup_log(s, "kernel log %s not read: %s", path, fb_strerror(n));
    else if (n > 0)
        fb__sup_log(s, "kernel log %s: %d evidence line%s around the failure",
                    path, n, n == 1 ? "" : "s");
}

static void store(fb__sup *s, int64_t id, const fb__diag_class *c)
{
    char stored[sizeof c->evidence + 64];
    fb__diag_format_stored(c, stored, sizeof stored);
    fb__journal_incident_text(s->j, id, "category", c->category);
    fb__journal_incident_text(s->j, id, "component", c->component);
    fb__journal_incident_text(s->j, id, "evidence", stored);
}

static void finish(fb__sup *s, struct fb__sup_diag *d);
static int health_done(struct fb__sup_diag *d, int wait);

void fb__sup_diagnose_start(fb__sup *s, const char *fr_verdict)
{
    /* Earlier ones run on beside this one (each has its own child and
     * incident), up to DIAG_INFLIGHT_MAX: then the oldest is waited for. */
    fb__sup_diagnose_poll(s, 0);
    int n = 0;
    for (struct fb__sup_diag *e = s->diag; e; e = e->next)
        n++;
    while (n-- >= DIAG_INFLIGHT_MAX && s->diag) {
        struct fb__sup_diag *oldest = s->diag;
        health_done(oldest, 1);
        s->diag = oldest->next;
        finish(s, oldest);
    }
    const fb__sup_failure *f = &s->fail;
    int64_t id = s->fail_incident_id;
    s->fail_incident_id = 0;
    if (id <= 0)
        return;
    struct fb__sup_diag *d = calloc(1, sizeof *d);
    char *out = malloc(DIAG_HEALTH_MAX);
    if (!d || !out) {
        free(d);
        free(out);
        return;
    }
    d->incident_id = id;
    d->f = *f;
    d->fr_verdict = fr_verdict ? strdup(fr_verdict) : NULL;
    d->out = out;
    d->out_fd = -1;
    fb__sup_last_lines(s, f->rank, d->last, sizeof d->last);
    if (f->rank >= 0 && f->rank < s->world) {
        d->ckpt_code = s->ranks[f->rank].ckpt_code;
        d->pid = (int)s->ranks[f->rank].pid;
    }
    d->local = !s->slurm;
    /* Under Slurm, the failed rank's node, when it is still there. */
    const char *node = d->local || f->kind == FB__SUP_FAIL_NODE_FAILURE
                     ? NULL : fb__sup_slurm_node_of_rank(s, f->rank);
    struct fb__sup_diag **tail = &s->diag;
    while (*tail)
        tail = &(*tail)->next;
    *tail = d;
    char *argv[24], self[PATH_MAX], var[96];
    d->t0 = fb__now_ns();
    d->deadline = d->t0 + DIAG_HEALTH_TIMEOUT_MS * 1000000ull;
    if (!s->o->incident_health || !(d->local || node) ||
        health_argv(s, node, argv, self, sizeof self, var, sizeof var))
        return;
    int rc = fb__sup_spawn_capture(argv, -1, &d->child, &d->out_fd);
    if (rc) {
        d->child = 0;
        fb__sup_log(s, "health check after the failure gave no verdict (%s)",
                    fb_strerror(rc));
        return;
    }
    int fl = fcntl(d->out_fd, F_GETFL);
    if (fl >= 0)
        fcntl(d->out_fd, F_SETFL, fl | O_NONBLOCK);
    /* Under Slurm the check is a job step (srun) on the failed rank's node:
     * it is waited for here, before the next attempt's own steps (the
     * pre-launch health check, the watchers), as before the check went
     * beside the relaunch; with it beside them, slurm_nodeloss's "back"
     * case once left a healthy spare out of the next attempt. */
    if (!d->local)
        fb__sup_diagnose_poll(s, 1);
}

int fb__sup_diagnose_reaped(fb__sup *s, pid_t pid, int wstatus)
{
    for (struct fb__sup_diag *d = s->diag; d; d = d->next)
        if (d->child > 0 && d->child == pid && !d->reaped) {
            d->reaped = 1;
            d->wstatus = wstatus;
            return 1;
        }
    return 0;
}

int fb__sup_diagnose_keep(const fb__sup *s, pid_t *keep, int max)
{
    int n = 0;
    for (const struct fb__sup_diag *d = s->diag; d && n < max; d = d->next)
        if (d->child > 0 && !d->reaped)
            keep[n++] = d->child;
    return n;
}

/* The check's child is done (its output ended and it is reaped), or
 * killed at its deadline; with `wait`, waits for that. */
static int health_done(struct fb__sup_diag *d, int wait)
{
    if (d->child <= 0)
        return 1;
    for (;;) {
        health_read(d);
        if (!d->reaped && d->out_fd < 0) {
            int ws;
            pid_t p = waitpid(d->child, &ws, wait ? 0 : WNOHANG);
            if (p == d->child) {
                d->reaped = 1;
                d->wstatus = ws;
            } else if (p < 0 && errno != EINTR) {
                d->reaped = 1; /* reaped elsewhere: no status */
                d->wstatus = 0;
            }
        }
        if (d->reaped && d->out_fd < 0)
            return 1;
        uint64_t now = fb__now_ns();
        if (now >= d->deadline) {
            d->timed_out = 1;
            kill(d->child, SIGKILL);
            if (d->out_fd >= 0) {
                close(d->out_fd);
                d->out_fd = -1;
            }
            while (!d->reaped && waitpid(d->child, NULL, 0) < 0 && errno == EINTR)
                ;
            d->reaped = 1;
            return 1;
        }
        if (!wait)
            return 0;
        if (d->out_fd >= 0) {
            struct pollfd pf = {.fd = d->out_fd, .events = POLLIN};
            poll(&pf, 1, (int)((d->deadline - now) / 1000000ull) + 1);
        }
    }
}

void fb__sup_diagnose_poll(fb__sup *s, int wait)
{
    /* In the order they began: their root causes are said in that order. */
    for (struct fb__sup_diag **pd = &s->diag; *pd;) {
        struct fb__sup_diag *d = *pd;
        if (!health_done(d, wait)) {
            pd = &d->next;
            continue;
        }
        *pd = d->next;
        finish(s, d);
    }
}

/* The rest of a diagnosis whose check is over: verdict, kernel log, root
 * cause, stored with its incident. */
static void finish(fb__sup *s, struct fb__sup_diag *d)
{
    const fb__sup_failure *f = &d->f;
    int64_t id = d->incident_id;
    char *health = d->child > 0 ? health_verdict(s, d) : NULL;
    if (health)
        fb__journal_incident_text(s->j, id, "health", health);
    char *klog = malloc(DIAG_KLOG_MAX);
    if (klog) {
        klog[0] = '\0';
        if (d->local)
            kernel_log(s, f->occurred_ns, klog, DIAG_KLOG_MAX);
    }
    fb__diag_evidence ev = {
        .kind = fb__sup_fail_kind_name(f->kind), .phase = f->phase,
        .injected = f->injected[0] ? f->injected : NULL, .detail = f->detail,
        .last_lines = d->last[0] ? d->last : NULL, .fr_verdict = d->fr_verdict,
        .health = health, .kernel_log = klog && klog[0] ? klog : NULL,
        .signal = f->signal, .has_exit_code = f->has_exit_code,
        .exit_code = f->exit_code, .ckpt_code = d->ckpt_code, .pid = d->pid,
    };
    fb__diag_class c;
    fb__diag_classify(&ev, &c);
    store(s, id, &c);
    char cause[512];
    if (c.rule == FB__DIAG_BY_INJECTED) { /* the fault named, "injected" once */
        fb__diag_class plain = c;
        plain.injected = 0;
        fb__diag_cause_text(&plain, cause, sizeof cause);
        char spec[sizeof f->injected * 4];
        fb__sup_log(s, "root cause: %s (by the injected fault %s)", cause,
                    fb__safe_text(spec, sizeof spec, f->injected));
    } else {
        fb__diag_cause_text(&c, cause, sizeof cause);
        fb__sup_log(s, "root cause: %s (by %s)", cause, c.decided_by);
    }
    free(klog);
    free(health);
    free(d->fr_verdict);
    free(d->out);
    free(d);
}

void fb__sup_diagnose(fb__sup *s, const char *fr_verdict)
{
    fb__sup_diagnose_start(s, fr_verdict);
    fb__sup_diagnose_poll(s, 1);
}

void fb__sup_classify_row(fb__journal_incident *inc, int ckpt_code, char *buf,
                          size_t size)
{
    fb__diag_evidence ev = {
        .kind = inc->kind, .phase = inc->phase, .injected = inc->injected,
        .detail = inc->detail,
        .last_lines = inc->last_lines, .signal = inc->signal,
        .has_exit_code = inc->has_exit_code, .exit_code = inc->exit_code,
        .ckpt_code = ckpt_code,
    };
    fb__diag_class c;
    fb__diag_classify(&ev, &c);
    fb__diag_format_stored(&c, buf, size);
    inc->category = c.category;
    inc->component = c.component;
    inc->evidence = buf;
}
