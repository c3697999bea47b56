/*
 * sim_search.c -- the checkpoint interval with the best effective training
 * time, found by running the simulator, next to the closed forms of Young
 * and Daly (REFERENCE.md §2).
 *
 * The search evaluates mean ETTR on the same trials (same seeds) for every
 * candidate interval -- common random numbers -- so differences between
 * candidates are not drowned by trial-to-trial noise.  A log-spaced grid
 * around Daly's estimate finds the neighbourhood; a least-squares fit of
 * the first-order shape over the points there gives the optimum (a
 * golden-section search in log(interval) when the fit is not concave).
 * Candidates never go below the floor (fb__sim_floor: the persist time,
 * or with tiers the peer copy's): such a policy could not make a
 * checkpoint durable.
 */
#include "sim/sim.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#define GRID_POINTS 17
#define GRID_SPAN 16.0      /* grid covers [daly / 16, daly * 16] */
#define GOLDEN_STEPS 12
#define FIT_HALF 3          /* fit over the best grid point +- 3 */
#define MIN_INTERVAL_S 1.0
#define SEARCH_EVENT_BUDGET 2e6 /* failures simulated per evaluation */

double fb__sim_young(double stall_s, double mttf_s)
{
    return sqrt(2.0 * stall_s * mttf_s);
}

double fb__sim_daly(double stall_s, double restart_s, double mttf_s)
{
    return sqrt(2.0 * stall_s * (restart_s + mttf_s));
}

typedef struct search {
    fb__sim_config c;
    int evaluations;
} search;

static int eval(search *s, double log_tau, double *ettr)
{
    s->c.interval_s = exp(log_tau);
    double floor_s = fb__sim_floor(&s->c);
    if (s->c.interval_s < floor_s)
        s->c.interval_s = floor_s;
    s->evaluations++;
    return fb__sim_mean_ettr(&s->c, ettr);
}

/* Solve the 3x3 system m x = v by Gaussian elimination with pivoting. */
static int solve3(double m[3][3], double v[3], double x[3])
{
    for (int col = 0; col < 3; col++) {
        int piv = col;
        for (int r = col + 1; r < 3; r++)
            if (fabs(m[r][col]) > fabs(m[piv][col]))
                piv = r;
        if (fabs(m[piv][col]) < 1e-300)
            return -1;
        for (int k = 0; k < 3; k++) {
            double t = m[col][k];
            m[col][k] = m[piv][k];
            m[piv][k] = t;
        }
        double t = v[col];
        v[col] = v[piv];
        v[piv] = t;
        for (int r = col + 1; r < 3; r++) {
            double f = m[r][col] / m[col][col];
            for (int k = col; k < 3; k++)
                m[r][k] -= f * m[col][k];
            v[r] -= f * v[col];
        }
    }
    for (int r = 2; r >= 0; r--) {
        double acc = v[r];
        for (int k = r + 1; k < 3; k++)
            acc -= m[r][k] * x[k];
        x[r] = acc / m[r][r];
    }
    return 0;
}

/*
 * Near its optimum, ETTR as a function of the interval tau behaves like
 * a + p/tau + q*tau (the stall costs C/tau, failures lose about
 * lambda*tau/2), with p, q < 0.  A least-squares fit of that shape over
 * the grid points around the best one averages out the Monte Carlo noise
 * that would make the single best point wander; the optimum is then
 * sqrt(p/q).  Returns 0 with *x_out = log(optimum), or -1 when the fit is
 * not concave (the caller falls back to golden-section search).
 */
static int fit_optimum(const double *gx, const double *gy, int best,
                       double *x_out)
{
    int lo = best - FIT_HALF, hi = best + FIT_HALF;
    if (lo < 0)
        lo = 0;
    if (hi > GRID_POINTS - 1)
        hi = GRID_POINTS - 1;
    if (hi - lo < 3)
        return -1;
    /* Scale tau around the best point so the basis is well conditioned. */
    double x0 = gx[best];
    double m[3][3] = {{0}}, v[3] = {0}, coef[3];
    for (int i = lo; i <= hi; i++) {
        double f[3] = {1.0, exp(-(gx[i] - x0)), exp(gx[i] - x0)};
        for (int r = 0; r < 3; r++) {
            for (int k = 0; k < 3; k++)
                m[r][k] += f[r] * f[k];
            v[r] += f[r] * gy[i];
        }
    }
    if (solve3(m, v, coef) || !(coef[1] < 0) || !(coef[2] < 0))
        return -1;
    double x = x0 + 0.5 * log(coef[1] / coef[2]);
    if (x < gx[lo])
        x = gx[lo];
    if (x > gx[hi])
        x = gx[hi];
    *x_out = x;
    return 0;
}

/* Golden-section refinement in the bracket around the grid's best. */
static int golden(search *s, const double *gx, const double *gy, int best,
                  double *x_out, double *y_out)
{
    double a = gx[best > 0 ? best - 1 : 0];
    double b = gx[best < GRID_POINTS - 1 ? best + 1 : GRID_POINTS - 1];
    double best_x = gx[best], best_y = gy[best];
    const double g = 0.6180339887498949;
    double x1 = b - g * (b - a), x2 = a + g * (b - a), y1 = 0, y2 = 0;
    int rc = eval(s, x1, &y1);
    if (!rc)
        rc = eval(s, x2, &y2);
    for (int i = 0; !rc && i < GOLDEN_STEPS; i++) {
        if (y1 >= y2) {
            b = x2;
            x2 = x1;
            y2 = y1;
            x1 = b - g * (b - a);
            rc = eval(s, x1, &y1);
        } else {
            a = x1;
            x1 = x2;
            y1 = y2;
            x2 = a + g * (b - a);
            rc = eval(s, x2, &y2);
        }
        if (y1 > best_y) {
            best_y = y1;
            best_x = x1;
        }
        if (y2 > best_y) {
            best_y = y2;
            best_x = x2;
        }
    }
    *x_out = best_x;
    *y_out = best_y;
    return rc;
}

/* Failures and planned stops one trial meets on average. */
static double events_per_trial(const fb__sim_config *c)
{
    return (fb__sim_total_rate(c) + c->planned_per_job_s) * c->horizon_s;
}

/* Keep each evaluation affordable: enough trials for about
 * SEARCH_EVENT_BUDGET failures, but never more than asked for. */
static long search_trials(const fb__sim_config *c)
{
    double per_trial = events_per_trial(c);
    if (per_trial * (double)c->trials <= SEARCH_EVENT_BUDGET)
        return c->trials;
    long t = (long)(SEARCH_EVENT_BUDGET / per_trial);
    return t < 100 ? (c->trials < 100 ? c->trials : 100) : t;
}

double fb__sim_expected_events(const fb__sim_config *c, int with_search)
{
    double per_trial = events_per_trial(c) + 1; /* at least one stretch */
    double n = (double)c->trials * per_trial;
    if (with_search) /* the grid, then a fit or a golden-section refinement */
        n += (GRID_POINTS + GOLDEN_STEPS + 1) * (double)search_trials(c) *
             per_trial;
    return n;
}

int fb__sim_optimize(const fb__sim_config *c, fb__sim_optimum *o)
{
    memset(o, 0, sizeof *o);
    double rate = fb__sim_total_rate(c);
    double mttf = rate > 0 ? 1.0 / rate : INFINITY;
    double recover = c->restart_s + fb__sim_mean_detect(c);
    double phys_floor = fb__sim_floor(c);
    if (c->tiers && rate > 0) {
        /* The restore is outside restart_s: memory for job-scoped
         * failures, a peer for node-scoped ones. */
        double node = 0;
        for (int i = 0; i < c->ncat; i++)
            if (c->cat[i].scope == FB_SIM_SCOPE_NODE)
                node += c->cat[i].rate_per_gpu_s * (double)c->gpus +
                        c->cat[i].rate_per_job_s;
        recover += (node * c->restore_s[FB_SIM_TIER_PEER] +
                    (rate - node) * c->restore_s[FB_SIM_TIER_MEMORY]) /
                   rate;
    }
    o->young_s = fb__sim_young(c->stall_s, mttf);
    o->daly_s = fb__sim_daly(c->stall_s, recover, mttf);
    o->floor_s = phys_floor;
    o->young_below_floor = o->young_s < o->floor_s;
    o->daly_below_floor = o->daly_s < o->floor_s;

    search s;
    memset(&s, 0, sizeof s);
    s.c = *c;
    s.c.trials = search_trials(c);

    double floor_s = phys_floor > MIN_INTERVAL_S ? phys_floor
                                                 : MIN_INTERVAL_S;
    double center = isfinite(o->daly_s) && o->daly_s > 0 ? o->daly_s
                                                         : c->interval_s;
    if (!isfinite(mttf) || c->stall_s <= 0) {
        /* No failures: the longest interval wins.  Free checkpoints: the
         * shortest physical one does.  Nothing to search either way. */
        o->search_s = !isfinite(mttf) ? c->horizon_s : floor_s;
        o->bound_by_floor = isfinite(mttf) && phys_floor > 0;
        s.c.interval_s = o->search_s;
        o->evaluations = 1;
        return fb__sim_mean_ettr(&s.c, &o->search_ettr);
    }
    double lo = center / GRID_SPAN, hi = center * GRID_SPAN;
    if (lo < floor_s)
        lo = floor_s;
    if (hi < lo * 4)
        hi = lo * 4;
    if (hi > c->horizon_s)
        hi = c->horizon_s > lo ? c->horizon_s : lo;

    double llo = log(lo), lhi = log(hi);
    double grid_x[GRID_POINTS], grid_y[GRID_POINTS];
    int best = 0;
    for (int i = 0; i < GRID_POINTS; i++) {
        grid_x[i] = llo + (lhi - llo) * i / (GRID_POINTS - 1);
        int rc = eval(&s, grid_x[i], &grid_y[i]);
        if (rc)
            return rc;
        if (grid_y[i] > grid_y[best])
            best = i;
    }
    double best_x, best_y;
    int rc = fit_optimum(grid_x, grid_y, best, &best_x);
    if (rc == 0) {
        rc = eval(&s, best_x, &best_y);
        if (rc)
            return rc;
    } else {
        rc = golden(&s, grid_x, grid_y, best, &best_x, &best_y);
        if (rc)
            return rc;
    }
    o->search_s = exp(best_x);
    if (o->search_s < phys_floor)
        o->search_s = phys_floor;
    o->search_ettr = best_y;
    /* On the floor: the best policy the physics allows is "checkpoint as
     * soon as the previous one is durable"; say so. */
    o->bound_by_floor = phys_floor > 0 && best == 0 && lo == floor_s &&
                        o->search_s <= phys_floor * 1.05;
    o->evaluations = s.evaluations;
    return 0;
}
