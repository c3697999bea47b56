/*
 * env.c -- the environment beside throughput (docs/report.md, "The
 * agent"): the run's wall time in FB__REPORT_ENV_BUCKETS buckets, the mean
 * throughput (steps/s per rank, from the journal's step samples), the mean
 * GPU temperature and power (agent.sqlite) of each, and the Pearson
 * correlation of temperature and of power with throughput over the
 * buckets where both are known.  Every output prints these same numbers.
 */
#include "report/report.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static double pearson(const double *a, const double *b, int n, int *used)
{
    double sa = 0, sb = 0, saa = 0, sbb = 0, sab = 0;
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (isnan(a[i]) || isnan(b[i]))
            continue;
        sa += a[i];
        sb += b[i];
        saa += a[i] * a[i];
        sbb += b[i] * b[i];
        sab += a[i] * b[i];
        k++;
    }
    *used = k;
    if (k < 3)
        return NAN;
    double cov = sab - sa * sb / k, va = saa - sa * sa / k, vb = sbb - sb * sb / k;
    /* a series that does not vary has no correlation (n/a), however the
     * rounding of its sums comes out */
    if (!(va > 1e-12 * (saa > 0 ? saa : 1)) || !(vb > 1e-12 * (sbb > 0 ? sbb : 1)))
        return NAN;
    return cov / sqrt(va * vb);
}

static void mean_into(double *sum, const double *cnt, int n)
{
    for (int i = 0; i < n; i++)
        sum[i] = cnt[i] > 0 ? sum[i] / cnt[i] : NAN;
}

static int bucket(const fb__report_run *run, double t, double wall_s)
{
    double b = (t - run->started_at) / wall_s * FB__REPORT_ENV_BUCKETS;
    return b >= 0 && b < FB__REPORT_ENV_BUCKETS ? (int)b : -1;
}

void fb__report_env_corr(const fb__report_run *run, fb__report_envcorr *out)
{
    enum { N = FB__REPORT_ENV_BUCKETS };
    double cthr[N] = {0}, ctc[N] = {0}, ctp[N] = {0};
    memset(out, 0, sizeof *out);
    double W = fb__report_s(run->wall_us) > 0 ? fb__report_s(run->wall_us) : 1;
    out->wall_s = W;
    for (int b = 0; b < N; b++)
        out->x_s[b] = (b + 0.5) * W / N;
    for (size_t i = 0; i < run->nsamples; i++) {
        const fb__report_sample *x = &run->samples[i];
        int b = bucket(run, x->time, W);
        if (b < 0 || !(x->step_time_ms > 0))
            continue;
        out->throughput[b] += 1000.0 / x->step_time_ms;
        cthr[b] += 1;
    }
    for (size_t i = 0; i < run->nenv; i++) {
        const fb__report_env *e = &run->env[i];
        int b = bucket(run, e->time, W);
        if (b < 0)
            continue;
        if (!isnan(e->temp_c)) {
            out->temp_c[b] += e->temp_c;
            ctc[b] += 1;
        }
        if (!isnan(e->power_w)) {
            out->power_w[b] += e->power_w;
            ctp[b] += 1;
        }
    }
    mean_into(out->throughput, cthr, N);
    mean_into(out->temp_c, ctc, N);
    mean_into(out->power_w, ctp, N);
    out->r_temp = pearson(out->temp_c, out->throughput, N, &out->n_temp);
    out->r_power = pearson(out->power_w, out->throughput, N, &out->n_power);
}

void fb__report_corr_phrase(double r, int n, const char *b0, const char *b1,
                            char *buf, size_t size)
{
    if (isnan(r))
        snprintf(buf, size, "%sn/a%s", b0, b1);
    else
        snprintf(buf, size, "%sr = %.3f%s (%d buckets)", b0, r, b1, n);
}
