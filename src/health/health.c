/*
 * health.c -- running the checks, the result list, the verdict, the --json
 * object and draining through scontrol (see health.h).
 */
#include "health/health.h"

#include <errno.h>
#include <stdarg.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/util.h"

struct fb__health_result {
    fb__health_check *checks;
    size_t count, cap;
    int oom;
    char host[256];
    char root[512];
};

void fb__health_opts_init(fb__health_opts *o)
{
    memset(o, 0, sizeof *o);
    o->expect_gpus = -1;
    o->min_free_bytes = 1ull << 30;
}

const char *fb__health_status_name(fb__health_status s)
{
    switch (s) {
    case FB_HEALTH_OK: return "ok";
    case FB_HEALTH_WARN: return "warn";
    case FB_HEALTH_FAIL: return "fail";
    case FB_HEALTH_SKIPPED: return "skipped";
    case FB_HEALTH_UNKNOWN: return "unknown";
    }
    return "?";
}

int fb__health_path(const fb__health_opts *o, char *buf, size_t size,
                    const char *abs_path)
{
    return fb__fmt(buf, size, "%s%s", o->root ? o->root : "", abs_path);
}

fb__health_check *fb__health_add(fb__health_result *r, const char *name,
                                 fb__health_status st, const char *category,
                                 const char *component, const char *action,
                                 const char *fmt, ...)
{
    if (r->count == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 32;
        fb__health_check *c = realloc(r->checks, cap * sizeof *c);
        if (!c) {
            r->oom = 1;
            return NULL;
        }
        r->checks = c;
        r->cap = cap;
    }
    fb__health_check *c = &r->checks[r->count++];
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "%s", name);
    c->status = st;
    if (st == FB_HEALTH_WARN || st == FB_HEALTH_FAIL) {
        c->category = category;
        c->component = component;
        c->action = action;
    } else {
        c->action = st == FB_HEALTH_OK || st == FB_HEALTH_UNKNOWN ? action
                                                                  : NULL;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->detail, sizeof c->detail, fmt, ap);
    va_end(ap);
    /* Names and evidence carry text from sysfs, NVML and the kernel log:
     * no control byte reaches a terminal, the drain reason or the JSON. */
    fb__safe_text(c->name, sizeof c->name, c->name);
    fb__safe_text(c->detail, sizeof c->detail, c->detail);
    return c;
}

int fb__health_run(const fb__health_opts *o, fb__health_result **out,
                   char *err, size_t err_size)
{
    *out = NULL;
    if (o->root) {
        struct stat st;
        if (stat(o->root, &st) || !S_ISDIR(st.st_mode)) {
            snprintf(err, err_size, "--root %s: not a directory", o->root);
            return -ENOENT;
        }
    }
    fb__health_result *r = calloc(1, sizeof *r);
    if (!r)
        return -ENOMEM;
    if (gethostname(r->host, sizeof r->host - 1))
        snprintf(r->host, sizeof r->host, "unknown");
    snprintf(r->root, sizeof r->root, "%s", o->root ? o->root : "/");
    if (!o->skip_gpu)
        fb__health_check_gpus(o, r);
    fb__health_check_kernel_log(o, r);
    fb__health_check_host(o, r);
    if (r->oom) {
        fb__health_free(r);
        return -ENOMEM;
    }
    *out = r;
    return 0;
}

void fb__health_free(fb__health_result *r)
{
    if (!r)
        return;
    free(r->checks);
    free(r);
}

/* Severity of a status for the outcome: a check that could not decide
 * might hide a failure, so it ranks above a warning, below a failure. */
static int rank_of(fb__health_status s)
{
    switch (s) {
    case FB_HEALTH_WARN: return 1;
    case FB_HEALTH_UNKNOWN: return 2;
    case FB_HEALTH_FAIL: return 3;
    default: return 0; /* ok, skipped */
    }
}

fb__health_status fb__health_outcome(const fb__health_result *r)
{
    fb__health_status v = FB_HEALTH_OK;
    for (size_t i = 0; i < r->count; i++)
        if (rank_of(r->checks[i].status) > rank_of(v))
            v = r->checks[i].status;
    return v;
}

int fb__health_exit_code(fb__health_status outcome)
{
    return outcome == FB_HEALTH_UNKNOWN ? 3 : (int)outcome;
}

fb__health_status fb__health_verdict(const fb__health_result *r)
{
    fb__health_status v = fb__health_outcome(r);
    return v == FB_HEALTH_UNKNOWN ? FB_HEALTH_WARN : v;
}

size_t fb__health_count(const fb__health_result *r)
{
    return r->count;
}

const fb__health_check *fb__health_at(const fb__health_result *r, size_t i)
{
    return i < r->count ? &r->checks[i] : NULL;
}

static const fb__health_check *worst(const fb__health_result *r)
{
    fb__health_status v = fb__health_outcome(r);
    if (v == FB_HEALTH_OK)
        return NULL;
    for (size_t i = 0; i < r->count; i++)
        if (r->checks[i].status == v)
            return &r->checks[i];
    return NULL;
}

const char *fb__health_category(const fb__health_result *r)
{
    const fb__health_check *c = worst(r);
    return c ? c->category : NULL;
}

void fb__health_reason(const fb__health_result *r, char *buf, size_t size)
{
    const fb__health_check *c = worst(r);
    size_t n = 0;
    if (!c) {
        snprintf(buf, size, "firebreak: healthy");
        return;
    }
    for (size_t i = 0; i < r->count; i++)
        n += r->checks[i].status == c->status;
    snprintf(buf, size, "firebreak: %s: %s%s", c->name, c->detail,
             n > 1 ? " (and more)" : "");
    /* scontrol takes the reason as one argument: keep it printable */
    for (char *p = buf; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == '"')
            *p = ' ';
}

void fb__health_write_json(const fb__health_result *r, fb__jsonw *w)
{
    size_t counts[FB__HEALTH_NSTATUS] = {0};
    fb__health_status v = fb__health_outcome(r);
    fb__jsonw_obj_begin(w);
    fb__jsonw_kstr(w, "version", FB__HEALTH_JSON_VERSION);
    fb__jsonw_kstr(w, "host", r->host);
    fb__jsonw_kstr(w, "root", r->root);
    fb__jsonw_kstr(w, "verdict", fb__health_status_name(v));
    fb__jsonw_kint(w, "exit", fb__health_exit_code(v));
    fb__jsonw_kstr(w, "category", fb__health_category(r));
    fb__jsonw_key(w, "checks");
    fb__jsonw_arr_begin(w);
    for (size_t i = 0; i < r->count; i++) {
        const fb__health_check *c = &r->checks[i];
        counts[c->status]++;
        fb__jsonw_obj_begin(w);
        fb__jsonw_kstr(w, "name", c->name);
        fb__jsonw_kstr(w, "status", fb__health_status_name(c->status));
        fb__jsonw_kstr(w, "detail", c->detail);
        fb__jsonw_kstr(w, "category", c->category);
        fb__jsonw_kstr(w, "component", c->component);
        fb__jsonw_kstr(w, "action", c->action);
        fb__jsonw_obj_end(w);
    }
    fb__jsonw_arr_end(w);
    fb__jsonw_key(w, "counts");
    fb__jsonw_obj_begin(w);
    for (int s = 0; s < FB__HEALTH_NSTATUS; s++)
        fb__jsonw_kuint(w, fb__health_status_name((fb__health_status)s),
                        counts[s]);
    fb__jsonw_obj_end(w);
    fb__jsonw_obj_end(w);
}

void fb__health_print(const fb__health_result *r, int verbose, FILE *f)
{
    size_t ok = 0, skipped = 0;
    for (size_t i = 0; i < r->count; i++) {
        const fb__health_check *c = &r->checks[i];
        if (!verbose && (c->status == FB_HEALTH_OK || c->status == FB_HEALTH_SKIPPED)) {
            ok += c->status == FB_HEALTH_OK;
            skipped += c->status == FB_HEALTH_SKIPPED;
            continue;
        }
        fprintf(f, "%-7s %-28s %s\n", fb__health_status_name(c->status),
                c->name, c->detail);
        if (c->category)
            fprintf(f, "        %-28s category: %s (%s)\n", "", c->category,
                    c->component ? c->component : "?");
        if (c->action && c->status != FB_HEALTH_OK)
            fprintf(f, "        %-28s action: %s\n", "", c->action);
    }
    if (ok || skipped)
        fprintf(f, "        %zu check%s ok, %zu skipped (-v lists them)\n", ok,
                ok == 1 ? "" : "s", skipped);
    fprintf(f, "verdict: %s\n", fb__health_status_name(fb__health_outcome(r)));
}

int fb__health_drain(const fb__health_result *r, const char *node,
                     char *err, size_t err_size)
{
    char host[256], node_arg[320], reason[400], reason_arg[420];
    if (!node)
        node = fb__getenv("SLURMD_NODENAME");
    if (!node) {
        if (gethostname(host, sizeof host - 1)) {
            snprintf(err, err_size, "cannot name this node: %s; use --node",
                     strerror(errno));
            return -errno;
        }
        host[sizeof host - 1] = '\0';
        node = host;
    }
    fb__health_reason(r, reason, sizeof reason);
    /* Slurm keeps reasons short; cut on a character boundary we made */
    if (strlen(reason) > 240)
        reason[240] = '\0';
    snprintf(node_arg, sizeof node_arg, "NodeName=%s", node);
    snprintf(reason_arg, sizeof reason_arg, "Reason=%s", reason);
    char *argv[] = {"scontrol", "update", node_arg, "State=DRAIN", reason_arg,
                    NULL};
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(err, err_size, "fork: %s", strerror(errno));
        return -errno;
    }
    if (pid == 0) {
        signal(SIGPIPE, SIG_DFL); /* a supervisor ignores it */
        execvp("scontrol", argv);
        fprintf(stderr, "firebreak health: cannot run scontrol: %s\n",
                strerror(errno));
        _exit(127);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return -errno;
    int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (rc)
        snprintf(err, err_size, "scontrol update NodeName=%s State=DRAIN "
                 "exited with %d", node, rc);
    return rc;
}
