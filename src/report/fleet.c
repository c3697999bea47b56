/*
 * fleet.c -- `firebreak report --fleet DIR...`: nodes ranked across many
 * runs by their interruptions, hardware root causes and failed health
 * checks, with the lemon flags of docs/report.md ("Fleet") and the
 * incidents behind each (in the spirit of Kokolis et al.'s lemon-node
 * signals: a node whose failures repeat across jobs more than its share).
 *
 * Runs are added one at a time (the caller loads a run, adds it, frees
 * it), so memory grows with the nodes and their evidence, not with the
 * runs' samples.  fb__fleet_judge is the policy, a pure function over
 * the counts; the writers print what it decided.
 */
#include "report/report.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/json.h"
#include "common/jsonw.h"
#include "common/rundir.h"
#include "common/util.h"

#define EV_PER_NODE_MAX 64 /* evidence lines kept per node (all counted) */

static const char *const flag_names[FB__FLEET_NFLAGS] = {
    [FB__FLEET_REPEAT] = "repeat", [FB__FLEET_HARDWARE] = "hardware",
    [FB__FLEET_HEALTH] = "health", [FB__FLEET_RATE] = "rate",
    [FB__FLEET_DRAIN] = "drain"};

const char *fb__fleet_flag_name(int flag)
{
    return flag >= 0 && flag < FB__FLEET_NFLAGS ? flag_names[flag] : "?";
}

void fb__fleet_thresholds_init(fb__fleet_thresholds *t)
{
    t->repeat_runs = 2;
    t->hardware = 2;
    t->health = 2;
    t->rate_factor = 3.0;
    t->rate_min = 2;
    t->drains = 2;
}

void fb__fleet_judge(const fb__fleet_thresholds *t, double fleet_rate,
                     fb__fleet_node *n)
{
    n->rate = n->runs ? (double)n->interruptions / (double)n->runs : 0;
    n->flags = 0;
    if (n->runs_failed >= (size_t)t->repeat_runs)
        n->flags |= 1u << FB__FLEET_REPEAT;
    if (n->hardware >= (size_t)t->hardware)
        n->flags |= 1u << FB__FLEET_HARDWARE;
    if (n->health_fails >= (size_t)t->health)
        n->flags |= 1u << FB__FLEET_HEALTH;
    if (n->interruptions >= (size_t)t->rate_min && fleet_rate > 0 &&
        n->rate >= t->rate_factor * fleet_rate * (1 - 1e-9)) /* 3 x 0.1 is 0.3 */
        n->flags |= 1u << FB__FLEET_RATE;
    if (n->drains >= (size_t)t->drains)
        n->flags |= 1u << FB__FLEET_DRAIN;
}

/* ---- accumulating ------------------------------------------------------ */

static fb__fleet_node *node_of(fb__fleet *f, const char *name)
{
    for (size_t i = 0; i < f->nnodes; i++)
        if (!strcmp(f->nodes[i].name, name))
            return &f->nodes[i];
    if (f->nnodes == f->cap) {
        size_t nc = f->cap ? f->cap * 2 : 16;
        fb__fleet_node *p = realloc(f->nodes, nc * sizeof *p);
        if (!p)
            return NULL;
        f->nodes = p;
        f->cap = nc;
    }
    fb__fleet_node *n = &f->nodes[f->nnodes++];
    memset(n, 0, sizeof *n);
    snprintf(n->name, sizeof n->name, "%s", name);
    n->last_run = (size_t)-1;
    n->last_failed_run = (size_t)-1;
    return n;
}

/* The health verdict's outcome and its failing checks' names. */
static int health_failed(const char *health, char *checks, size_t size)
{
    checks[0] = '\0';
    if (!health || !*health)
        return 0;
    fb__json_limits lim = {.max_input = 1u << 20, .max_depth = 16,
                           .max_nodes = 100000};
    fb__json_doc *doc = NULL;
    if (fb__json_parse(health, strlen(health), &lim, &doc, NULL, 0))
        return 0;
    const fb__json *root = fb__json_root(doc);
    const char *v = fb__json_as_str(fb__json_get(root, "verdict"));
    int failed = v && !strcmp(v, "fail");
    const fb__json *c = fb__json_get(root, "checks");
    size_t used = 0;
    for (c = failed && c && c->type == FB_JSON_ARRAY ? c->child : NULL; c; c = c->next) {
        const char *st = fb__json_as_str(fb__json_get(c, "status"));
        const char *name = fb__json_as_str(fb__json_get(c, "name"));
        if (!st || strcmp(st, "fail") || !name)
            continue;
        int w = snprintf(checks + used, size - used, "%s%.60s", used ? "," : "", name);
        if (w < 0 || (size_t)w >= size - used)
            break;
        used += (size_t)w;
    }
    fb__json_free(doc);
    return failed;
}

static int is_hardware(const fb__report_class *c)
{
    return !c->injected && (!strcmp(c->category, "GPU") ||
                            !strcmp(c->category, "Host") ||
                            !strcmp(c->category, "Network"));
}

/* One more line of evidence for n, counted; *out the slot for the first
 * EV_PER_NODE_MAX (NULL past them), its run and attempt filled in. */
static int ev_slot(fb__fleet_node *n, const fb__report_run *run, int attempt,
                   fb__fleet_ev **out)
{
    *out = NULL;
    n->nevidence++;
    if (n->nev >= EV_PER_NODE_MAX)
        return 0;
    if (!n->ev && !(n->ev = calloc(EV_PER_NODE_MAX, sizeof *n->ev)))
        return -ENOMEM;
    fb__fleet_ev *e = *out = &n->ev[n->nev++];
    char buf[200];
    snprintf(e->run, sizeof e->run, "%s", fb__safe_text(buf, sizeof buf,
             run->name ? run->name : run->dir));
    e->attempt = attempt >= 0 ? run->attempts[attempt].number : -1;
    return 0;
}

static int add_evidence(fb__fleet_node *n, const fb__report_run *run,
                        const fb__report_incident *in, int interruption,
                        int hw, int hfail, const char *checks)
{
    fb__fleet_ev *e;
    int rc = ev_slot(n, run, in->attempt, &e);
    if (rc || !e)
        return rc;
    e->id = in->id;
    snprintf(e->kind, sizeof e->kind, "%s", in->kind);
    snprintf(e->category, sizeof e->category, "%s%s", in->cls.category,
             in->cls.injected ? " (injected)" : "");
    snprintf(e->component, sizeof e->component, "%s", in->cls.component);
    snprintf(e->why, sizeof e->why, "%s", in->cls.evidence);
    snprintf(e->checks, sizeof e->checks, "%s", checks);
    e->interruption = interruption;
    e->hardware = hw;
    e->health_fail = hfail;
    return 0;
}

/* A drain by firebreak (--drain): its reason is the evidence. */
static int add_drain(fb__fleet_node *n, const fb__report_run *run,
                     const fb__report_drain *d)
{
    fb__fleet_ev *e;
    int rc = ev_slot(n, run, d->attempt, &e);
    if (rc || !e)
        return rc;
    e->id = -1;
    snprintf(e->kind, sizeof e->kind, "drain");
    snprintf(e->category, sizeof e->category, "-");
    snprintf(e->component, sizeof e->component, "-");
    snprintf(e->why, sizeof e->why, "drained, Reason=%s", d->reason);
    e->drain = 1;
    return 0;
}

/* Count run idx once for the node. */
static void seen_in(fb__fleet_node *n, size_t idx)
{
    if (n->last_run != idx) {
        n->last_run = idx;
        n->runs++;
    }
}

int fb__fleet_add_run(fb__fleet *f, const fb__report_run *run)
{
    size_t idx = f->nruns++;
    /* The nodes it ran on: its ranks' (journal placement, schema 1.1),
     * else the run's own host. */
    int placed = 0;
    for (size_t a = 0; a < run->nattempts; a++)
        for (size_t k = 0; k < run->attempts[a].nnodes; k++) {
            fb__fleet_node *n = node_of(f, run->attempts[a].nodes[k].node);
            if (!n)
                return -ENOMEM;
            seen_in(n, idx);
            placed = 1;
        }
    if (!placed && run->hostname && *run->hostname) {
        fb__fleet_node *n = node_of(f, run->hostname);
        if (!n)
            return -ENOMEM;
        seen_in(n, idx);
    }
    for (size_t i = 0; i < run->nincidents; i++) {
        const fb__report_incident *in = &run->incidents[i];
        if (!in->node || !*in->node)
            continue;
        char checks[200];
        /* An injected fault, or the program's own failure (a software bug,
         * a dependency, its GPU memory: the same on any node), is no
         * evidence against the node it happened on, as for the report's
         * suspects (aggregate.c). */
        int intr = fb__report_is_interruption(in) && !in->cls.injected &&
                   !in->cls.programs_own;
        int hfail = health_failed(in->health, checks, sizeof checks);
        int hw = intr && is_hardware(&in->cls);
        /* the node was in the run, whatever happened on it */
        fb__fleet_node *n = node_of(f, in->node);
        if (!n)
            return -ENOMEM;
        seen_in(n, idx);
        if (!intr && !hfail)
            continue;
        n->interruptions += (size_t)intr;
        n->hardware += (size_t)hw;
        n->health_fails += (size_t)hfail;
        if (intr && n->last_failed_run != idx) {
            n->last_failed_run = idx;
            n->runs_failed++;
        }
        if (intr)
            f->interruptions++;
        if (add_evidence(n, run, in, intr, hw, hfail, checks))
            return -ENOMEM;
    }
    for (size_t i = 0; i < run->ndrains; i++) {
        const fb__report_drain *d = &run->drains[i];
        if (d->code != 0) /* scontrol failed: not drained */
            continue;
        fb__fleet_node *n = node_of(f, d->node);
        if (!n)
            return -ENOMEM;
        seen_in(n, idx);
        n->drains++;
        if (add_drain(n, run, d))
            return -ENOMEM;
    }
    return 0;
}

static int cmp_nodes(const void *a, const void *b)
{
    const fb__fleet_node *x = a, *y = b;
    int fx = __builtin_popcount(x->flags), fy = __builtin_popcount(y->flags);
    if (fx != fy)
        return fy - fx;
    if (x->hardware != y->hardware)
        return x->hardware < y->hardware ? 1 : -1;
    if (x->interruptions != y->interruptions)
        return x->interruptions < y->interruptions ? 1 : -1;
    if (x->health_fails != y->health_fails)
        return x->health_fails < y->health_fails ? 1 : -1;
    if (x->drains != y->drains)
        return x->drains < y->drains ? 1 : -1;
    return strcmp(x->name, y->name);
}

void fb__fleet_finish(fb__fleet *f)
{
    size_t node_runs = 0;
    for (size_t i = 0; i < f->nnodes; i++)
        node_runs += f->nodes[i].runs;
    f->rate = node_runs ? (double)f->interruptions / (double)node_runs : 0;
    for (size_t i = 0; i < f->nnodes; i++)
        fb__fleet_judge(&f->t, f->rate, &f->nodes[i]);
    if (f->nnodes > 1) /* none: f->nodes is NULL, which qsort may not take */
        qsort(f->nodes, f->nnodes, sizeof *f->nodes, cmp_nodes);
}

void fb__fleet_free(fb__fleet *f)
{
    for (size_t i = 0; i < f->nnodes; i++)
        free(f->nodes[i].ev);
    free(f->nodes);
    fb__report_seen_free(&f->seen);
    memset(f, 0, sizeof *f);
}

/* ---- output ------------------------------------------------------------ */

static void flags_text(unsigned flags, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int k = 0; k < FB__FLEET_NFLAGS; k++)
        if (flags & (1u << k))
            used += (size_t)snprintf(buf + used, size - used, "%s%s",
                                     used ? "," : "", flag_names[k]);
    if (!used)
        snprintf(buf, size, "-");
}

int fb__fleet_write_text(FILE *out, const fb__fleet *f)
{
    char fl[64], b1[200], b2[400];
    size_t flagged = 0;
    for (size_t i = 0; i < f->nnodes; i++)
        flagged += f->nodes[i].flags != 0;
    fprintf(out, "fleet: %zu run%s, %zu node%s, %zu interruption%s on a node "
            "(%.3f per node-run); %zu flagged\n", f->nruns, f->nruns == 1 ? "" : "s",
            f->nnodes, f->nnodes == 1 ? "" : "s", f->interruptions,
            f->interruptions == 1 ? "" : "s", f->rate, flagged);
    if (f->skipped)
        fprintf(out, "  %zu run director%s skipped (could not be read; see "
                "stderr)\n", f->skipped, f->skipped == 1 ? "y" : "ies");
    if (f->repeated)
        fprintf(out, "  %zu run director%s given more than once, counted once\n",
                f->repeated, f->repeated == 1 ? "y" : "ies");
    fprintf(out, "thresholds: repeat >= %d runs with an interruption; hardware "
            ">= %d; health >= %d failed checks; rate >= %.1fx the fleet's with "
            ">= %d interruptions; drain >= %d drains\n\n", f->t.repeat_runs,
            f->t.hardware, f->t.health, f->t.rate_factor, f->t.rate_min, f->t.drains);
    fprintf(out, "  %-24s %5s %7s %8s %6s %6s %8s  %s\n", "node", "runs",
            "interr", "hardware", "health", "drains", "rate", "flags");
    for (size_t i = 0; i < f->nnodes; i++) {
        const fb__fleet_node *n = &f->nodes[i];
        flags_text(n->flags, fl, sizeof fl);
        fprintf(out, "  %-24s %5zu %7zu %8zu %6zu %6zu %8.3f  %s\n",
                fb__safe_text(b1, sizeof b1, n->name), n->runs, n->interruptions,
                n->hardware, n->health_fails, n->drains, n->rate, fl);
    }
    for (size_t i = 0; i < f->nnodes; i++) {
        const fb__fleet_node *n = &f->nodes[i];
        if (!n->flags)
            continue;
        flags_text(n->flags, fl, sizeof fl);
        fprintf(out, "\n%s (%s): evidence\n", fb__safe_text(b1, sizeof b1, n->name), fl);
        for (size_t k = 0; k < n->nev; k++) {
            const fb__fleet_ev *e = &n->ev[k];
            if (e->drain) {
                fprintf(out, "  %s attempt %d drain\n      %s\n",
                        fb__safe_text(b1, sizeof b1, e->run), e->attempt,
                        fb__safe_text(b2, sizeof b2, e->why));
                continue;
            }
            /* kind, root cause and the checks' names are the journal's
             * text too */
            char kd[sizeof e->kind], ck[sizeof e->checks], ca[sizeof e->category],
                co[sizeof e->component];
            fprintf(out, "  %s attempt %d #%lld %s: %s / %s%s%s%s%s\n      %s\n",
                    fb__safe_text(b1, sizeof b1, e->run), e->attempt,
                    (long long)e->id, fb__safe_text(kd, sizeof kd, e->kind),
                    fb__safe_text(ca, sizeof ca, e->category),
                    fb__safe_text(co, sizeof co, e->component),
                    e->hardware ? " [hardware]" : "",
                    e->health_fail ? " [health failed: " : "",
                    e->health_fail ? fb__safe_text(ck, sizeof ck, e->checks) : "",
                    e->health_fail ? "]" : "", fb__safe_text(b2, sizeof b2, e->why));
        }
        if (n->nevidence > n->nev)
            fprintf(out, "  ... %zu more\n", n->nevidence - n->nev);
    }
    return ferror(out) ? -EIO : 0;
}

int fb__fleet_write_json(fb__jsonw *w, const fb__fleet *f)
{
    fb__jsonw_obj_begin(w);
    fb__jsonw_kstr(w, "version", FB__REPORT_JSON_VERSION);
    fb__jsonw_kstr(w, "kind", "firebreak.fleet");
    fb__jsonw_kint(w, "nruns", (long long)f->nruns);
    fb__jsonw_kint(w, "skipped", (long long)f->skipped);
    fb__jsonw_kint(w, "repeated", (long long)f->repeated);
    fb__jsonw_kint(w, "interruptions", (long long)f->interruptions);
    fb__jsonw_kdouble(w, "rate", round(f->rate * 1e6) / 1e6);
    fb__jsonw_key(w, "thresholds");
    fb__jsonw_obj_begin(w);
    fb__jsonw_kint(w, "repeat_runs", f->t.repeat_runs);
    fb__jsonw_kint(w, "hardware", f->t.hardware);
    fb__jsonw_kint(w, "health", f->t.health);
    fb__jsonw_kdouble(w, "rate_factor", f->t.rate_factor);
    fb__jsonw_kint(w, "rate_min", f->t.rate_min);
    fb__jsonw_kint(w, "drains", f->t.drains);
    fb__jsonw_obj_end(w);
    fb__jsonw_key(w, "nodes");
    fb__jsonw_arr_begin(w);
    for (size_t i = 0; i < f->nnodes; i++) {
        const fb__fleet_node *n = &f->nodes[i];
        fb__jsonw_obj_begin(w);
        fb__jsonw_kstr(w, "node", n->name);
        fb__jsonw_kint(w, "runs", (long long)n->runs);
        fb__jsonw_kint(w, "runs_failed", (long long)n->runs_failed);
        fb__jsonw_kint(w, "interruptions", (long long)n->interruptions);
        fb__jsonw_kint(w, "hardware", (long long)n->hardware);
        fb__jsonw_kint(w, "health_fails", (long long)n->health_fails);
        fb__jsonw_kint(w, "drains", (long long)n->drains);
        fb__jsonw_kdouble(w, "rate", round(n->rate * 1e6) / 1e6);
        fb__jsonw_kbool(w, "flagged", n->flags != 0);
        fb__jsonw_key(w, "flags");
        fb__jsonw_arr_begin(w);
        for (int k = 0; k < FB__FLEET_NFLAGS; k++)
            if (n->flags & (1u << k))
                fb__jsonw_str(w, flag_names[k]);
        fb__jsonw_arr_end(w);
        fb__jsonw_kint(w, "evidence_total", (long long)n->nevidence);
        fb__jsonw_key(w, "evidence");
        fb__jsonw_arr_begin(w);
        for (size_t k = 0; k < n->nev; k++) {
            const fb__fleet_ev *e = &n->ev[k];
            fb__jsonw_obj_begin(w);
            fb__jsonw_kstr(w, "run", e->run);
            fb__jsonw_kint(w, "attempt", e->attempt);
            fb__jsonw_key(w, "incident");
            if (e->drain)
                fb__jsonw_null(w);
            else
                fb__jsonw_int(w, e->id);
            fb__jsonw_kstr(w, "kind", e->kind);
            fb__jsonw_kstr(w, "category", e->category);
            fb__jsonw_kstr(w, "component", e->component);
            fb__jsonw_kbool(w, "interruption", e->interruption);
            fb__jsonw_kbool(w, "hardware", e->hardware);
            fb__jsonw_kbool(w, "health_failed", e->health_fail);
            fb__jsonw_kbool(w, "drain", e->drain);
            fb__jsonw_kstr(w, "failed_checks", e->checks[0] ? e->checks : NULL);
            fb__jsonw_kstr(w, "evidence", e->why);
            fb__jsonw_obj_end(w);
        }
        fb__jsonw_arr_end(w);
        fb__jsonw_obj_end(w);
    }
    fb__jsonw_arr_end(w);
    fb__jsonw_obj_end(w);
    return 0;
}

/* ---- reading run directories ------------------------------------------- */

static int add_one(fb__fleet *f, const char *dir, FILE *errf)
{
    fb__report_run *run = NULL;
    char err[1024] = "";
    int rc = fb__report_seen_add(&f->seen, dir);
    if (rc < 0)
        return rc;
    if (rc) {
        f->repeated++;
        fprintf(errf, "firebreak report: --fleet: %s is a run read already "
                "(given twice, or also inside a directory given): counted "
                "once\n", fb__safe_text(err, sizeof err, dir));
        return 0;
    }
    rc = fb__report_load(dir, &run, err, sizeof err);
    if (rc == -ENOMEM)
        return rc;
    if (rc) {
        f->skipped++;
        fprintf(errf, "firebreak report: --fleet: skipped %s\n",
                fb__safe_text(err, sizeof err, err[0] ? err : dir));
        return 0;
    }
    rc = fb__fleet_add_run(f, run);
    int runs = run->runs_in_journal;
    fb__report_free(run);
    /* A reused run directory's earlier runs count too, each as a run. */
    for (int k = 0; !rc && k < runs - 1; k++) {
        if ((rc = fb__report_load_nth(dir, k, &run, err, sizeof err))) {
            if (rc == -ENOMEM)
                return rc;
            f->skipped++;
            fprintf(errf, "firebreak report: --fleet: skipped run %d of %s\n", k,
                    fb__safe_text(err, sizeof err, err[0] ? err : dir));
            rc = 0;
            continue;
        }
        rc = fb__fleet_add_run(f, run);
        fb__report_free(run);
    }
    return rc;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int fb__fleet_add_dir(fb__fleet *f, const char *dir, FILE *errf)
{
    char path[4096];
    struct stat st;
    if (fb__rundir_path(path, sizeof path, dir, FB__RUNDIR_JOURNAL, 0))
        return -ENAMETOOLONG;
    if (stat(dir, &st) != 0) {
        fprintf(errf, "firebreak report: --fleet: %s: %s\n", dir, strerror(errno));
        return -ENOENT;
    }
    if (stat(path, &st) == 0 || !S_ISDIR(st.st_mode))
        return add_one(f, dir, errf); /* a run, or a journal file itself */
    DIR *d = opendir(dir);
    if (!d)
        return add_one(f, dir, errf);
    char **names = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    struct dirent *e;
    while ((e = readdir(d)) && f->nruns + n < FB__FLEET_RUNS_MAX) {
        if (e->d_name[0] == '.')
            continue;
        char run[4096];
        if (fb__fmt(run, sizeof run, "%s/%s", dir, e->d_name) ||
            !fb__rundir_has(run, FB__RUNDIR_JOURNAL, 0, path, sizeof path))
            continue;
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 64;
            char **p = realloc(names, nc * sizeof *p);
            if (!p) {
                rc = -ENOMEM;
                break;
            }
            names = p;
            cap = nc;
        }
        if (!(names[n] = strdup(e->d_name))) {
            rc = -ENOMEM;
            break;
        }
        n++;
    }
    closedir(d);
    if (!rc && n)
        qsort(names, n, sizeof *names, cmp_str);
    for (size_t i = 0; !rc && i < n; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        rc = add_one(f, path, errf);
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    if (!rc && n == 0) {
        f->skipped++;
        fprintf(errf, "firebreak report: --fleet: %s holds no run directory "
                "(no journal.sqlite in it or its subdirectories)\n", dir);
    }
    return rc;
}
