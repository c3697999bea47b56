/*
 * diagnose.c -- the root cause of an incident, from evidence, stored with
 * it (docs/report.md "Root cause", docs/supervisor.md "Diagnosis").
 *
 * After an attempt failed and its ranks were stopped, the supervisor
 *   1. runs this node's health checks in a child (`firebreak health
 *      --json --since 10m`, killed after DIAG_HEALTH_TIMEOUT_MS) and keeps
 *      its verdict in incident.health;
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
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"
#include "diag/diag.h"
#include "firebreak/firebreak.h"
#include "supervisor/sup.h"

#define DIAG_HEALTH_TIMEOUT_MS 20000
#define DIAG_HEALTH_MAX (256u << 10)
#define DIAG_KMSG_BEFORE_S 300
#define DIAG_KLOG_MAX 12288

/* The last non-empty line of out, in place. */
static char *last_line(char *out)
{
    size_t n = strlen(out);
    while (n && (out[n - 1] == '\n' || out[n - 1] == '\r'))
        out[--n] = '\0';
    char *nl = strrchr(out, '\n');
    return nl ? nl + 1 : out;
}

/* The health verdict (JSON, malloc'd) of this node, or of `node` (a
 * Slurm node: the check runs there in a step of its own), or NULL with
 * why logged.  The root of the checks: --health-root, else under Slurm
 * the test hook `firebreak watch --health` reads
 * (FIREBREAK_HEALTH_ROOT_<node>, FIREBREAK_HEALTH_ROOT), else the real
 * system's. */
static char *health_now(fb__sup *s, const char *node)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return NULL;
    self[n] = '\0';
    char *argv[20];
    int k = 0;
    const char *root = s->o->health_root;
    if (node) {
        static const char *const srun[] = {"srun", "--overlap", "--kill-on-bad-exit=0",
                                           "-N", "1", "-n", "1", "-w"};
        for (size_t i = 0; i < sizeof srun / sizeof srun[0]; i++)
            argv[k++] = (char *)srun[i];
        argv[k++] = (char *)node;
        argv[k++] = "--export=ALL";
        char var[96];
        snprintf(var, sizeof var, "FIREBREAK_HEALTH_ROOT_%s", node);
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
    char *out = malloc(DIAG_HEALTH_MAX);
    if (!out)
        return NULL;
    out[0] = '\0';
    uint64_t t0 = fb__now_ns();
    int rc = fb__sup_run_capture(argv, out, DIAG_HEALTH_MAX, -1,
                                 DIAG_HEALTH_TIMEOUT_MS);
    const char *line = last_line(out);
    char *json = NULL;
    /* exit 0 ok, 1 warn, 2 fail, 3 could not check: all answers */
    if (rc >= 0 && rc <= 3 && line[0] == '{')
        json = strdup(line);
    else
        fb__sup_log(s, "health check after the failure gave no verdict (%s)",
                    rc == -ETIMEDOUT ? "timed out" : rc < 0 ? fb_strerror(rc)
                                                            : "no JSON line");
    fb__sup_log(s, "health check after the failure: %s in %.0f ms",
                json ? (rc == 0 ? "ok" : rc == 1 ? "warn" : rc == 2 ? "fail"
                                                           : "unknown")
                     : "none",
                (double)(fb__now_ns() - t0) / 1e6);
    free(out);
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

void fb__sup_diagnose(fb__sup *s, const char *fr_verdict)
{
    const fb__sup_failure *f = &s->fail;
    int64_t id = s->fail_incident_id;
    if (id <= 0)
        return;
    int local = !s->slurm;
    /* Under Slurm, the failed rank's node, when it is still there. */
    const char *node = local || f->kind == FB__SUP_FAIL_NODE_FAILURE ? NULL
                     : fb__sup_slurm_node_of_rank(s, f->rank);
    char *health = s->o->incident_health && (local || node) ? health_now(s, node) : NULL;
    if (health)
        fb__journal_incident_text(s->j, id, "health", health);
    char *klog = malloc(DIAG_KLOG_MAX);
    if (klog) {
        klog[0] = '\0';
        if (local)
            kernel_log(s, f->occurred_ns, klog, DIAG_KLOG_MAX);
    }
    char last[2048];
    fb__sup_last_lines(s, f->rank, last, sizeof last);
    const fb__sup_rank *r = f->rank >= 0 && f->rank < s->world ? &s->ranks[f->rank]
                                                               : NULL;
    fb__diag_evidence ev = {
        .kind = fb__sup_fail_kind_name(f->kind),
        .injected = f->injected[0] ? f->injected : NULL, .detail = f->detail,
        .last_lines = last[0] ? last : NULL, .fr_verdict = fr_verdict,
        .health = health, .kernel_log = klog && klog[0] ? klog : NULL,
        .signal = f->signal, .has_exit_code = f->has_exit_code,
        .exit_code = f->exit_code, .ckpt_code = r ? r->ckpt_code : 0,
        .pid = r ? (int)r->pid : 0,
    };
    fb__diag_class c;
    fb__diag_classify(&ev, &c);
    store(s, id, &c);
    fb__sup_log(s, "root cause: %s%s / %s (by %s)", c.category,
                c.injected ? " (injected)" : "", c.component, c.decided_by);
    free(klog);
    free(health);
    s->fail_incident_id = 0;
}

void fb__sup_classify_row(fb__journal_incident *inc, int ckpt_code, char *buf,
                          size_t size)
{
    fb__diag_evidence ev = {
        .kind = inc->kind, .injected = inc->injected, .detail = inc->detail,
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
