/*
 * detect.c -- the agent's event detectors that are pure functions of the
 * samples (kept apart so unit tests can drive them): stragglers and node
 * power swings.
 */
#include <math.h>
#include <stdlib.h>

#include "agent/agent.h"
#include "lib/segment.h"

#define MIN_STEPS 3

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int judged(const fb__rank_sample *r)
{
    return r->steps_done >= MIN_STEPS && r->end_kind == FB__END_NONE &&
           r->step_ewma_s > 0;
}

void fb__agent_stragglers(fb__rank_sample *ranks, int n, double ratio,
                          int need, fb__straggler_emit emit, void *ctx)
{
    double *v = malloc(sizeof *v * (size_t)(n > 0 ? n : 1));
    if (!v)
        return;
    for (int i = 0; i < n; i++) {
        fb__rank_sample *r = &ranks[i];
        int m = 0;
        if (!judged(r)) {
            r->over = 0;
            continue;
        }
        /* the median of the other ranks: one slow rank cannot move it */
        for (int j = 0; j < n; j++)
            if (j != i && judged(&ranks[j]))
                v[m++] = ranks[j].step_ewma_s;
        if (m == 0) {
            r->over = 0;
            continue;
        }
        qsort(v, (size_t)m, sizeof *v, cmp_double);
        double med = m % 2 ? v[m / 2] : (v[m / 2 - 1] + v[m / 2]) / 2;
        r->median_s = med;
        if (r->step_ewma_s > ratio * med) {
            r->over++;
            if (!r->straggler && r->over >= need) {
                r->straggler = 1;
                if (emit)
                    emit(ctx, r, 1);
            }
        } else {
            r->over = 0;
            /* hysteresis: clear only once well back among the others */
            if (r->straggler && r->step_ewma_s <= (1 + (ratio - 1) / 2) * med) {
                r->straggler = 0;
                if (emit)
                    emit(ctx, r, 0);
            }
        }
    }
    free(v);
}

double fb__agent_productive_add(double productive_s, uint64_t prev_steps, uint64_t steps,
                                double step_ewma_s, double since_s)
{
    if (steps <= prev_steps || !(step_ewma_s > 0) || !(since_s > 0))
        return productive_s;
    double add = (double)(steps - prev_steps) * step_ewma_s;
    return productive_s + (add < since_s ? add : since_s);
}

int fb__agent_power_swing(double prev_w, double now_w, double fraction,
                          double min_w)
{
    if (!(prev_w > 0) || !isfinite(now_w))
        return 0;
    double d = fabs(now_w - prev_w);
    double th = fraction * prev_w;
    return d >= (th > min_w ? th : min_w);
}
