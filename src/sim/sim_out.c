/*
 * sim_out.c -- what `firebreak sim` prints: a text report for people, CSV
 * for spreadsheets, one JSON line for scripts (format in docs/sim.md,
 * versioned by FB_SIM_JSON_VERSION), and the SVG plot of a sweep.
 */
#include "sim/sim.h"

#include "common/jsonw.h"
#include "common/util.h"

#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void fb__sim_fmt_duration(double s, char *buf, size_t size)
{
    if (!isfinite(s)) {
        /* no failures: no Young or Daly interval (null in the JSON) */
        snprintf(buf, size, "none");
        return;
    }
    if (fabs(s) > 1e3 * FB_SIM_MAX_SECONDS) {
        /* Past any option's bound (a derived figure): as a number, since
         * the days would not fit a long. */
        snprintf(buf, size, "%.3gs", s);
        return;
    }
    if (s < 1.0) {
        snprintf(buf, size, "%.0fms", s * 1e3);
        return;
    }
    if (s < 60) {
        snprintf(buf, size, s < 10 ? "%.1fs" : "%.0fs", s);
        return;
    }
    long total = (long)floor(s + 0.5);
    long d = total / 86400, h = total / 3600 % 24, m = total / 60 % 60,
         sec = total % 60;
    if (d)
        snprintf(buf, size, h ? "%ldd%02ldh" : "%ldd", d, h);
    else if (h)
        snprintf(buf, size, m ? "%ldh%02ldm" : "%ldh", h, m);
    else
        snprintf(buf, size, sec ? "%ldm%02lds" : "%ldm", m, sec);
}

void fb__sim_progress_add(fb__sim_progress *p, uint64_t n, int draw)
{
    uint64_t done = atomic_fetch_add(&p->done, n) + n;
    if (!draw)
        return;
    uint64_t now = fb__now_ns(), since = now - p->start_ns;
    uint64_t first = p->on_tty ? 1000000000ull : 10000000000ull;
    uint64_t period = p->on_tty ? 500000000ull : 10000000000ull;
    if (since < first || (p->last_ns && now - p->last_ns < period))
        return;
    p->last_ns = now;
    double secs = (double)since / 1e9, rate = (double)done / secs;
    double frac = p->total > 0 ? (double)done / p->total : 0;
    if (frac > 0.99) /* the total is an estimate */
        frac = 0.99;
    char left[32];
    fb__sim_fmt_duration(rate > 0 ? (p->total - (double)done) / rate : 0,
                         left, sizeof left);
    char line[160];
    snprintf(line, sizeof line, "%.0f%% of about %.3g events, %.3g "
             "events/s, about %s left", 100 * frac, p->total, rate,
             frac >= 0.99 ? "a moment" : left);
    if (p->on_tty) {
        fprintf(stderr, "\r\033[Kfirebreak sim: %s", line);
        p->drawn = 1;
    } else {
        fprintf(stderr, "firebreak sim: progress: %s\n", line);
    }
}

void fb__sim_progress_end(fb__sim_progress *p)
{
    if (p && p->drawn)
        fputs("\r\033[K", stderr);
    if (p)
        p->drawn = 0;
}

const char *fb__sim_cat_name(const fb__sim_config *c, int i)
{
    return c->exponential ? "failure" : c->cat[i].name;
}

int fb__sim_cat_count(const fb__sim_config *c)
{
    return c->exponential ? 1 : c->ncat;
}

static double pct(double x)
{
    return 100.0 * x;
}

static void print_policy(FILE *f, const fb__sim_report *rep)
{
    const fb__sim_config *c = rep->c;
    char iv[32], st[32], ps[32], dc[32], dh[32], rs[32], rp[32];
    fb__sim_fmt_duration(c->interval_s, iv, sizeof iv);
    fb__sim_fmt_duration(c->stall_s, st, sizeof st);
    fb__sim_fmt_duration(c->persist_s, ps, sizeof ps);
    fb__sim_fmt_duration(c->detect_crash_s, dc, sizeof dc);
    fb__sim_fmt_duration(c->detect_hang_s, dh, sizeof dh);
    fb__sim_fmt_duration(c->restart_s, rs, sizeof rs);
    fb__sim_fmt_duration(c->repair_s, rp, sizeof rp);
    long nodes = (c->gpus + c->gpus_per_node - 1) / c->gpus_per_node;
    double days = c->horizon_s / 86400.0;
    fprintf(f, "firebreak sim: %s, %ld GPU%s (%ld node%s), %.4g day%s, "
               "%ld trial%s, seed %llu\n",
            rep->source, c->gpus, c->gpus == 1 ? "" : "s", nodes,
            nodes == 1 ? "" : "s", days, days == 1.0 ? "" : "s", c->trials,
            c->trials == 1 ? "" : "s",
            (unsigned long long)c->seed);
    if (c->exponential) {
        char mt[32];
        fb__sim_fmt_duration(c->mtbf_s, mt, sizeof mt);
        fprintf(f, "model: exponential, job MTBF %s; checkpoint every %s, "
                   "stall %s; detect %s; restart %s\n",
                mt, iv, st, dc, rs);
        return;
    }
    if (c->tiers) {
        char pc[32], rm[32], rpe[32], rst[32], si[32];
        fb__sim_fmt_duration(c->peer_s, pc, sizeof pc);
        fb__sim_fmt_duration(c->restore_s[FB_SIM_TIER_MEMORY], rm, sizeof rm);
        fb__sim_fmt_duration(c->restore_s[FB_SIM_TIER_PEER], rpe, sizeof rpe);
        fb__sim_fmt_duration(c->restore_s[FB_SIM_TIER_STORAGE], rst,
                             sizeof rst);
        fb__sim_fmt_duration(c->interval_s * c->persist_every, si, sizeof si);
        fprintf(f, "tiers: checkpoint to memory every %s, stall %s; copy to "
                   "%d peer%s %s; every %d%s to storage (every %s of "
                   "compute), persist %s (%s)\n",
                iv, st, c->peers, c->peers == 1 ? "" : "s", pc,
                c->persist_every,
                c->persist_every == 1 ? "" : "th", si, ps,
                rep->persist_from ? rep->persist_from : "given");
        fprintf(f, "restore: memory %s, peer %s, storage %s (%s); "
                   "double failures %.3g%% of node failures plus "
                   "coincidences\n",
                rm, rpe, rst, rep->tiers_from ? rep->tiers_from : "given",
                pct(c->double_failure));
    } else {
        fprintf(f, "policy: checkpoint every %s, stall %s, persist %s (%s)\n",
                iv, st, ps, rep->persist_from ? rep->persist_from : "given");
    }
    fprintf(f, "recovery: detect crash %s / hang %s, restart %s%s, ", dc,
            dh, rs, c->tiers ? " + restore" : "");
    long spares = fb__sim_spares(c);
    fprintf(f, "%ld spare node%s%s", spares, spares == 1 ? "" : "s",
            c->spares < 0 ? " (1%)" : "");
    fprintf(f, ", repair %s", rp);
    if (c->lemon_fraction > 0)
        fprintf(f, "; lemons %.3g%% at %.3gx%s", pct(c->lemon_fraction),
                c->lemon_factor, c->drain ? ", drained" : ", not drained");
    fprintf(f, "\n");
}

static void print_time_row(FILE *f, const char *name, double s, double T)
{
    char d[32];
    fb__sim_fmt_duration(s, d, sizeof d);
    fprintf(f, "  %-12s %10s  %6.2f%%\n", name, d, pct(s / T));
}

void fb__sim_print_text(FILE *f, const fb__sim_report *rep)
{
    const fb__sim_config *c = rep->c;
    const fb__sim_result *r = rep->r;
    double T = c->horizon_s;
    print_policy(f, rep);
    fprintf(f, "\neffective training time (ETTR): mean %.2f%%  p5 %.2f%%  "
               "p95 %.2f%%\n",
            pct(r->ettr_mean), pct(r->ettr_p5), pct(r->ettr_p95));
    fprintf(f, "\ninterruptions (mean per trial): %.1f unexpected",
            r->interruptions_mean);
    if (!c->exponential)
        fprintf(f, " + %.1f planned", r->planned_mean);
    fprintf(f, "\n");
    for (int i = 0; i < fb__sim_cat_count(c); i++) {
        double m = r->by_category_mean[i];
        fprintf(f, "  %-24s %8.1f  %5.1f%%\n", fb__sim_cat_name(c, i), m,
                r->interruptions_mean > 0 ? pct(m / r->interruptions_mean)
                                          : 0.0);
    }
    if (c->tiers)
        fprintf(f, "\nrestores (mean per trial): memory %.1f, peer %.1f, "
                   "storage %.1f\n",
                r->restores_mean[FB_SIM_TIER_MEMORY],
                r->restores_mean[FB_SIM_TIER_PEER],
                r->restores_mean[FB_SIM_TIER_STORAGE]);
    if (rep->warning)
        fprintf(f, "\nwarning: %s\n", rep->warning);
    fprintf(f, "\nwhere the time went (mean per trial):\n");
    print_time_row(f, "useful", r->time_mean.useful, T);
    print_time_row(f, "checkpoint", r->time_mean.checkpoint, T);
    print_time_row(f, "lost work", r->time_mean.lost, T);
    print_time_row(f, "detection", r->time_mean.detect, T);
    print_time_row(f, "restart", r->time_mean.restart, T);
    print_time_row(f, "repair wait", r->time_mean.repair_wait, T);
    print_time_row(f, "maintenance", r->time_mean.maintenance, T);
    const fb__sim_optimum *o = rep->o;
    if (!o)
        return;
    char b[32];
    fprintf(f, "\ncheckpoint interval:\n");
    fb__sim_fmt_duration(o->search_s, b, sizeof b);
    fprintf(f, "  search       %10s  ETTR %.2f%% (%d evaluations)%s\n", b,
            pct(o->search_ettr), o->evaluations,
            o->bound_by_floor ? "  [at the persist floor]" : "");
    fb__sim_fmt_duration(o->young_s, b, sizeof b);
    fprintf(f, "  young        %10s%s\n", b,
            o->young_below_floor ? (c->tiers ? "  [impossible: below the floor]"
                                             : "  [impossible: below persist time]")
                                 : "");
    fb__sim_fmt_duration(o->daly_s, b, sizeof b);
    fprintf(f, "  daly         %10s%s\n", b,
            o->daly_below_floor ? (c->tiers ? "  [impossible: below the floor]"
                                            : "  [impossible: below persist time]")
                                : "");
    if (o->floor_s > 0) {
        fb__sim_fmt_duration(o->floor_s, b, sizeof b);
        fprintf(f, "  floor        %10s  (%s)\n", b,
                c->tiers ? "the peer copy's time, or the persist time "
                           "shared by --persist-every intervals"
                         : "one checkpoint's persist time");
    }
    if (c->tiers &&
        (o->bound_by_floor || o->young_below_floor || o->daly_below_floor))
        fprintf(f, "note: the formulas ask for checkpoints faster than "
                   "the peer copy or storage can take them; the best "
                   "physical policy is bounded by that floor -- a larger "
                   "--persist-every (if storage sets it), a faster peer "
                   "copy or smaller checkpoints would raise ETTR.\n");
    else if (o->bound_by_floor || o->young_below_floor ||
             o->daly_below_floor)
        fprintf(f, "note: the formulas ask for checkpoints faster than "
                   "storage can persist them; the best physical policy is "
                   "bounded by the persist time -- faster storage or "
                   "smaller checkpoints would raise ETTR.\n");
}

void fb__sim_print_csv(FILE *f, const fb__sim_report *rep)
{
    const fb__sim_result *r = rep->r;
    double T = rep->c->horizon_s;
    fprintf(f, "trial,ettr,interruptions,planned,useful_s,checkpoint_s,"
               "lost_s,detect_s,restart_s,repair_wait_s,maintenance_s\n");
    for (long i = 0; r->per_trial && i < r->trials; i++) {
        const fb__sim_trial *x = &r->per_trial[i];
        fprintf(f, "%ld,%.6f,%u,%u,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f\n", i,
                x->t.useful / T, x->interruptions, x->planned, x->t.useful,
                x->t.checkpoint, x->t.lost, x->t.detect, x->t.restart,
                x->t.repair_wait, x->t.maintenance);
    }
}

static void json_config(fb__jsonw *w, const fb__sim_config *c,
                        const char *source)
{
    fb__jsonw_kint(w, "version", FB_SIM_JSON_VERSION);
    fb__jsonw_kstr(w, "source", source);
    fb__jsonw_kstr(w, "failure_model",
                   c->exponential ? "exponential" : "categories");
    fb__jsonw_kint(w, "gpus", c->gpus);
    fb__jsonw_kint(w, "gpus_per_node", c->gpus_per_node);
    fb__jsonw_kdouble(w, "days", c->horizon_s / 86400.0);
    fb__jsonw_kint(w, "trials", c->trials);
    fb__jsonw_kuint(w, "seed", (unsigned long long)c->seed);
    fb__jsonw_key(w, "policy");
    fb__jsonw_obj_begin(w);
    fb__jsonw_kdouble(w, "interval_s", c->interval_s);
    fb__jsonw_kdouble(w, "stall_s", c->stall_s);
    fb__jsonw_kdouble(w, "persist_s", c->persist_s);
    fb__jsonw_kdouble(w, "detect_crash_s", c->detect_crash_s);
    fb__jsonw_kdouble(w, "detect_hang_s", c->detect_hang_s);
    fb__jsonw_kdouble(w, "restart_s", c->restart_s);
    if (c->exponential) {
        fb__jsonw_kdouble(w, "mtbf_s", c->mtbf_s);
    } else {
        fb__jsonw_kint(w, "spares", fb__sim_spares(c));
        fb__jsonw_kdouble(w, "repair_s", c->repair_s);
        fb__jsonw_kdouble(w, "lemon_fraction", c->lemon_fraction);
        fb__jsonw_kdouble(w, "lemon_factor", c->lemon_factor);
        fb__jsonw_kbool(w, "drain", c->drain);
    }
    if (c->tiers) {
        fb__jsonw_key(w, "tiers");
        fb__jsonw_obj_begin(w);
        fb__jsonw_kdouble(w, "memory_interval_s", c->interval_s);
        fb__jsonw_kint(w, "peers", c->peers);
        fb__jsonw_kdouble(w, "peer_copy_s", c->peer_s);
        fb__jsonw_kint(w, "persist_every", c->persist_every);
        fb__jsonw_kdouble(w, "storage_interval_s",
                          c->interval_s * c->persist_every);
        fb__jsonw_key(w, "restore_s");
        fb__jsonw_obj_begin(w);
        for (int i = 0; i < FB_SIM_NTIERS; i++)
            fb__jsonw_kdouble(w, fb__sim_tier_name(i), c->restore_s[i]);
        fb__jsonw_obj_end(w);
        fb__jsonw_kdouble(w, "double_failure", c->double_failure);
        fb__jsonw_obj_end(w);
    }
    fb__jsonw_obj_end(w);
}

/* What the numbers rest on, beyond the policy: the failure categories and
 * their rates, maintenance, and where derived costs came from. */
static void json_assumptions(fb__jsonw *w, const fb__sim_report *rep)
{
    const fb__sim_config *c = rep->c;
    fb__jsonw_key(w, "assumptions");
    fb__jsonw_obj_begin(w);
    fb__jsonw_kstr(w, "persist_from",
                   rep->persist_from ? rep->persist_from : "given");
    if (c->tiers)
        fb__jsonw_kstr(w, "tiers_from",
                       rep->tiers_from ? rep->tiers_from : "given");
    if (!c->exponential) {
        fb__jsonw_kdouble(w, "planned_per_day", c->planned_per_job_s * 86400);
        fb__jsonw_kdouble(w, "maint_duration_s", c->maint_down_s);
        fb__jsonw_kdouble(w, "drain_repair_s", c->drain_repair_s);
        fb__jsonw_key(w, "categories");
        fb__jsonw_arr_begin(w);
        for (int i = 0; i < c->ncat; i++) {
            const fb__sim_category *k = &c->cat[i];
            fb__jsonw_obj_begin(w);
            fb__jsonw_kstr(w, "name", k->name);
            fb__jsonw_kdouble(w, "per_gpu_day", k->rate_per_gpu_s * 86400);
            fb__jsonw_kdouble(w, "per_job_day", k->rate_per_job_s * 86400);
            fb__jsonw_kstr(w, "kind", k->kind == FB_SIM_HANG ? "hang"
                                                             : "crash");
            fb__jsonw_kstr(w, "scope", k->scope == FB_SIM_SCOPE_NODE
                                           ? "node" : "job");
            if (c->tiers)
                fb__jsonw_kstr(w, "restores_from",
                               k->scope == FB_SIM_SCOPE_NODE
                                   ? "peer (storage if the peers' copies "
                                     "are lost too)"
                                   : "memory");
            fb__jsonw_obj_end(w);
        }
        fb__jsonw_arr_end(w);
    }
    fb__jsonw_key(w, "warnings");
    fb__jsonw_arr_begin(w);
    if (rep->warning)
        fb__jsonw_str(w, rep->warning);
    fb__jsonw_arr_end(w);
    fb__jsonw_obj_end(w);
}

static void json_ettr(fb__jsonw *w, const fb__sim_result *r)
{
    fb__jsonw_key(w, "ettr");
    fb__jsonw_obj_begin(w);
    fb__jsonw_kdouble(w, "mean", r->ettr_mean);
    fb__jsonw_kdouble(w, "p5", r->ettr_p5);
    fb__jsonw_kdouble(w, "p95", r->ettr_p95);
    fb__jsonw_obj_end(w);
}

static int json_finish(fb__jsonw *w, FILE *f)
{
    int rc = w->oom ? -ENOMEM : fb__jsonw_print(w, f);
    fb__jsonw_free(w);
    return rc;
}

int fb__sim_print_json(FILE *f, const fb__sim_report *rep)
{
    const fb__sim_config *c = rep->c;
    const fb__sim_result *r = rep->r;
    fb__jsonw w;
    fb__jsonw_init(&w);
    fb__jsonw_obj_begin(&w);
    json_config(&w, c, rep->source);
    json_assumptions(&w, rep);
    json_ettr(&w, r);
    fb__jsonw_key(&w, "interruptions");
    fb__jsonw_obj_begin(&w);
    fb__jsonw_kdouble(&w, "mean", r->interruptions_mean);
    fb__jsonw_kdouble(&w, "planned_mean", r->planned_mean);
    fb__jsonw_key(&w, "by_category");
    fb__jsonw_obj_begin(&w);
    for (int i = 0; i < fb__sim_cat_count(c); i++)
        fb__jsonw_kdouble(&w, fb__sim_cat_name(c, i), r->by_category_mean[i]);
    fb__jsonw_obj_end(&w);
    fb__jsonw_obj_end(&w);
    if (c->tiers) {
        fb__jsonw_key(&w, "restores");
        fb__jsonw_obj_begin(&w);
        for (int i = 0; i < FB_SIM_NTIERS; i++)
            fb__jsonw_kdouble(&w, fb__sim_tier_name(i), r->restores_mean[i]);
        fb__jsonw_obj_end(&w);
    }
    fb__jsonw_key(&w, "time_s");
    fb__jsonw_obj_begin(&w);
    fb__jsonw_kdouble(&w, "useful", r->time_mean.useful);
    fb__jsonw_kdouble(&w, "checkpoint", r->time_mean.checkpoint);
    fb__jsonw_kdouble(&w, "lost", r->time_mean.lost);
    fb__jsonw_kdouble(&w, "detect", r->time_mean.detect);
    fb__jsonw_kdouble(&w, "restart", r->time_mean.restart);
    fb__jsonw_kdouble(&w, "repair_wait", r->time_mean.repair_wait);
    fb__jsonw_kdouble(&w, "maintenance", r->time_mean.maintenance);
    fb__jsonw_kdouble(&w, "wall", c->horizon_s);
    fb__jsonw_obj_end(&w);
    fb__jsonw_key(&w, "optimal_interval_s");
    if (rep->o) {
        const fb__sim_optimum *o = rep->o;
        fb__jsonw_obj_begin(&w);
        fb__jsonw_kdouble(&w, "search", o->search_s);
        fb__jsonw_kdouble(&w, "young", o->young_s);
        fb__jsonw_kdouble(&w, "daly", o->daly_s);
        fb__jsonw_kdouble(&w, "floor", o->floor_s);
        fb__jsonw_kdouble(&w, "search_ettr", o->search_ettr);
        fb__jsonw_kbool(&w, "bound_by_floor", o->bound_by_floor);
        fb__jsonw_kbool(&w, "young_below_floor", o->young_below_floor);
        fb__jsonw_kbool(&w, "daly_below_floor", o->daly_below_floor);
        fb__jsonw_obj_end(&w);
    } else {
        fb__jsonw_null(&w);
    }
    fb__jsonw_obj_end(&w);
    return json_finish(&w, f);
}

/* ---- sweep ---- */

void fb__sim_print_sweep_text(FILE *f, const fb__sim_config *c,
                              const fb__sim_point *pts, int n)
{
    fprintf(f, "%9s %8s %8s %8s %9s %9s %9s %10s  %s\n", "gpus", "ETTR",
            "p5", "p95", "failures", "persist", "daly", "at daly",
            "(ETTR at the given interval, then at max(daly, persist))");
    for (int i = 0; i < n; i++) {
        const fb__sim_point *p = &pts[i];
        char ps[32], dl[32];
        fb__sim_fmt_duration(p->persist_s, ps, sizeof ps);
        fb__sim_fmt_duration(p->daly_s, dl, sizeof dl);
        if (!p->feasible) {
            fprintf(f, "%9ld %8s %8s %8s %9s %9s %9s %9.2f%%  %s\n",
                    p->gpus, "-", "-", "-", "-", ps, dl,
                    pct(p->ettr_at_best), p->why);
            continue;
        }
        int bar = (int)floor(p->r.ettr_mean * 40 + 0.5);
        char bars[41];
        memset(bars, '#', sizeof bars);
        bars[bar < 0 ? 0 : bar > 40 ? 40 : bar] = '\0';
        fprintf(f, "%9ld %7.2f%% %7.2f%% %7.2f%% %9.1f %9s %9s %9.2f%%  %s\n",
                p->gpus, pct(p->r.ettr_mean), pct(p->r.ettr_p5),
                pct(p->r.ettr_p95), p->r.interruptions_mean, ps, dl,
                pct(p->ettr_at_best), bars);
    }
    (void)c;
}

void fb__sim_print_sweep_csv(FILE *f, const fb__sim_point *pts, int n)
{
    fprintf(f, "gpus,feasible,ettr_mean,ettr_p5,ettr_p95,interruptions_mean,"
               "persist_s,young_s,daly_s,best_interval_s,ettr_at_best\n");
    for (int i = 0; i < n; i++) {
        const fb__sim_point *p = &pts[i];
        if (p->feasible)
            fprintf(f, "%ld,1,%.6f,%.6f,%.6f,%.3f,", p->gpus,
                    p->r.ettr_mean, p->r.ettr_p5, p->r.ettr_p95,
                    p->r.interruptions_mean);
        else
            fprintf(f, "%ld,0,,,,,", p->gpus);
        fprintf(f, "%.3f,%.3f,%.3f,%.3f,%.6f\n", p->persist_s, p->young_s,
                p->daly_s, p->best_interval_s, p->ettr_at_best);
    }
}

int fb__sim_print_sweep_json(FILE *f, const fb__sim_config *c,
                             const char *source, const fb__sim_point *pts,
                             int n)
{
    fb__jsonw w;
    fb__jsonw_init(&w);
    fb__jsonw_obj_begin(&w);
    json_config(&w, c, source);
    fb__jsonw_kstr(&w, "sweep", "gpus");
    fb__jsonw_key(&w, "points");
    fb__jsonw_arr_begin(&w);
    for (int i = 0; i < n; i++) {
        const fb__sim_point *p = &pts[i];
        fb__jsonw_obj_begin(&w);
        fb__jsonw_kint(&w, "gpus", p->gpus);
        fb__jsonw_kbool(&w, "feasible", p->feasible);
        if (p->feasible) {
            json_ettr(&w, &p->r);
            fb__jsonw_kdouble(&w, "interruptions_mean",
                              p->r.interruptions_mean);
        } else {
            fb__jsonw_kstr(&w, "why", p->why);
        }
        fb__jsonw_kdouble(&w, "persist_s", p->persist_s);
        fb__jsonw_kdouble(&w, "young_s", p->young_s);
        fb__jsonw_kdouble(&w, "daly_s", p->daly_s);
        fb__jsonw_kdouble(&w, "best_interval_s", p->best_interval_s);
        fb__jsonw_kdouble(&w, "ettr_at_best", p->ettr_at_best);
        fb__jsonw_obj_end(&w);
    }
    fb__jsonw_arr_end(&w);
    fb__jsonw_obj_end(&w);
    return json_finish(&w, f);
}

/* ---- SVG ---- */

#define SVG_W 760.0
#define SVG_H 440.0
#define PAD_L 70.0
#define PAD_R 30.0
#define PAD_T 50.0
#define PAD_B 60.0
/* Legend in the lower left: ETTR falls with scale, so that corner is
 * usually empty. */
#define LEGEND_Y (SVG_H - PAD_B - 40)

typedef struct axes {
    double x0, x1, y0, y1; /* data ranges: log2(gpus), ETTR */
} axes;

static double sx(const axes *a, double gpus)
{
    double span = a->x1 - a->x0 > 0 ? a->x1 - a->x0 : 1;
    return PAD_L + (log2(gpus) - a->x0) / span * (SVG_W - PAD_L - PAD_R);
}

static double sy(const axes *a, double ettr)
{
    return SVG_H - PAD_B -
           (ettr - a->y0) / (a->y1 - a->y0) * (SVG_H - PAD_T - PAD_B);
}

static void svg_gpus_label(char *buf, size_t size, long gpus)
{
    if (gpus >= 1024 && gpus % 1024 == 0)
        snprintf(buf, size, "%ldk", gpus / 1024);
    else
        snprintf(buf, size, "%ld", gpus);
}

static void svg_polyline(FILE *f, const axes *a, const fb__sim_point *pts,
                         int n, int best, const char *style)
{
    fprintf(f, "<polyline fill=\"none\" %s points=\"", style);
    for (int i = 0; i < n; i++) {
        if (!best && !pts[i].feasible)
            continue;
        double y = best ? pts[i].ettr_at_best : pts[i].r.ettr_mean;
        fprintf(f, "%.1f,%.1f ", sx(a, (double)pts[i].gpus), sy(a, y));
    }
    fprintf(f, "\"/>\n");
}

int fb__sim_write_svg(const char *path, const fb__sim_config *c,
                      const char *source, const fb__sim_point *pts, int n)
{
    if (n < 1)
        return -EINVAL;
    FILE *f = fopen(path, "w");
    if (!f)
        return -errno;
    axes a = {log2((double)pts[0].gpus), log2((double)pts[n - 1].gpus), 1,
              1};
    double lowest = 1;
    for (int i = 0; i < n; i++) {
        if (pts[i].feasible && pts[i].r.ettr_p5 < lowest)
            lowest = pts[i].r.ettr_p5;
        if (pts[i].ettr_at_best < lowest)
            lowest = pts[i].ettr_at_best;
    }
    a.y0 = floor(lowest * 10 - 0.5) / 10;
    if (a.y0 < 0)
        a.y0 = 0;
    if (a.y0 > 0.9)
        a.y0 = 0.9;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" "
               "height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
               "font-family=\"sans-serif\" font-size=\"12\">\n",
            SVG_W, SVG_H, SVG_W, SVG_H);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(f, "<text x=\"%.0f\" y=\"24\" font-size=\"15\">Effective "
               "training time vs scale (", PAD_L);
    fb__markup_text(f, source); /* names a rates file or a run directory */
    fprintf(f, ", %.4g days, %ld trials)</text>\n", c->horizon_s / 86400.0,
            c->trials);
    /* Grid and axis labels. */
    for (double y = a.y0; y <= 1.0 + 1e-9; y += 0.1) {
        fprintf(f, "<line x1=\"%.0f\" x2=\"%.0f\" y1=\"%.1f\" y2=\"%.1f\" "
                   "stroke=\"#ddd\"/>\n",
                PAD_L, SVG_W - PAD_R, sy(&a, y), sy(&a, y));
        fprintf(f, "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">"
                   "%.0f%%</text>\n",
                PAD_L - 8, sy(&a, y) + 4, y * 100);
    }
    for (int i = 0; i < n; i++) {
        char lab[32];
        svg_gpus_label(lab, sizeof lab, pts[i].gpus);
        fprintf(f, "<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\">"
                   "%s</text>\n",
                sx(&a, (double)pts[i].gpus), SVG_H - PAD_B + 18, lab);
    }
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">GPUs "
               "(log scale)</text>\n",
            (PAD_L + SVG_W - PAD_R) / 2, SVG_H - 18);
    fprintf(f, "<text transform=\"translate(18 %.0f) rotate(-90)\" "
               "text-anchor=\"middle\">ETTR</text>\n",
            (PAD_T + SVG_H - PAD_B) / 2);
    /* p5..p95 band over the feasible points. */
    fprintf(f, "<polygon fill=\"#9ecae1\" fill-opacity=\"0.5\" "
               "stroke=\"none\" points=\"");
    for (int i = 0; i < n; i++)
        if (pts[i].feasible)
            fprintf(f, "%.1f,%.1f ", sx(&a, (double)pts[i].gpus),
                    sy(&a, pts[i].r.ettr_p95));
    for (int i = n - 1; i >= 0; i--)
        if (pts[i].feasible)
            fprintf(f, "%.1f,%.1f ", sx(&a, (double)pts[i].gpus),
                    sy(&a, pts[i].r.ettr_p5));
    fprintf(f, "\"/>\n");
    svg_polyline(f, &a, pts, n, 0, "stroke=\"#08519c\" stroke-width=\"2\"");
    svg_polyline(f, &a, pts, n, 1,
                 "stroke=\"#d94801\" stroke-width=\"2\" "
                 "stroke-dasharray=\"6 4\"");
    for (int i = 0; i < n; i++) {
        double x = sx(&a, (double)pts[i].gpus);
        if (pts[i].feasible)
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" "
                       "fill=\"#08519c\"><title>%ld GPUs: %.2f%%</title>"
                       "</circle>\n",
                    x, sy(&a, pts[i].r.ettr_mean), pts[i].gpus,
                    pct(pts[i].r.ettr_mean));
        else
            fprintf(f, "<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\" "
                       "fill=\"#a50f15\">impossible</text>\n",
                    x, PAD_T + 14);
    }
    char iv[32];
    fb__sim_fmt_duration(c->interval_s, iv, sizeof iv);
    fprintf(f, "<g font-size=\"12\"><line x1=\"%.0f\" x2=\"%.0f\" y1=\"%.0f\" "
               "y2=\"%.0f\" stroke=\"#08519c\" stroke-width=\"2\"/>"
               "<text x=\"%.0f\" y=\"%.0f\">mean ETTR, checkpoint every %s "
               "(band: p5-p95)</text>\n",
            PAD_L + 10, PAD_L + 40, LEGEND_Y, LEGEND_Y, PAD_L + 46,
            LEGEND_Y + 4, iv);
    fprintf(f, "<line x1=\"%.0f\" x2=\"%.0f\" y1=\"%.0f\" y2=\"%.0f\" "
               "stroke=\"#d94801\" stroke-width=\"2\" "
               "stroke-dasharray=\"6 4\"/><text x=\"%.0f\" y=\"%.0f\">mean "
               "ETTR at max(Daly interval, persist time)</text></g>\n",
            PAD_L + 10, PAD_L + 40, LEGEND_Y + 18, LEGEND_Y + 18,
            PAD_L + 46, LEGEND_Y + 22);
    fprintf(f, "</svg>\n");
    /* Every write checked: the flush, a write that failed earlier (its
     * data is gone even when the last flush succeeds), fsync, the close. */
    int rc = 0;
    struct stat st;
    if (fflush(f))
        rc = -errno;
    else if (ferror(f))
        rc = -EIO;
    else if (fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode) &&
             fsync(fileno(f)))
        rc = -errno;
    if (fclose(f) != 0 && !rc)
        rc = -errno;
    return rc;
}
