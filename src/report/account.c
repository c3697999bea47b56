/*
 * account.c -- split a run's wall time into six parts that add up exactly.
 *
 * The partition (docs/report.md, "Accounting"): every microsecond between
 * run.started_at and the run's end belongs to exactly one part.  Time not
 * inside any attempt (before the first launch, back-off between attempts,
 * after the last) is restart.  Inside an attempt [s, e] we place four cut
 * points s <= r <= f <= d <= e:
 *
 *   d  detected_at of the failure that ended the attempt (e if none)
 *   f  its occurred_at (so detection d - f is capped to the attempt)
 *   r  ready_at (f if the attempt never became ready)
 *
 *   [s, r]  start-up:  restore = min(restore_s, r - s), the rest restart
 *   [r, f]  training:  checkpoint stall (sum of per-step max stall_ms),
 *                      lost work (recomputed later), the rest useful
 *   [f, d]  detection
 *   [d, e]  teardown:  restart
 *
 * Everything is integer microseconds since the run started, so the sums
 * are exact; fb__report_account checks them and fails loudly if not.
 */
#include "report/report.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "firebreak/firebreak.h"

static const char *const part_keys[FB__T_N] = {
    "useful", "checkpoint", "lost", "detect", "restart", "restore"};
static const char *const part_labels[FB__T_N] = {
    "useful training", "checkpoint stall", "lost work (recomputed)",
    "detection", "restart and start-up", "restore"};

const char *fb__report_part_key(int part)
{
    return part >= 0 && part < FB__T_N ? part_keys[part] : "?";
}

const char *fb__report_part_label(int part)
{
    return part >= 0 && part < FB__T_N ? part_labels[part] : "?";
}

/* Kinds of incident that end an attempt (the others are notable faults
 * the job survived: a failed save, a restore that fell back). */
static int ends_attempt(const char *kind)
{
    static const char *const k[] = {"crash", "hang", "error_exit", "sdc",
        "launch_failure", "node_failure", "interrupted", "segment_corrupt",
        "segment_not_ours", NULL};
    for (int i = 0; k[i]; i++)
        if (!strcmp(kind, k[i]))
            return 1;
    return 0;
}

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

/* Seconds since the run started -> µs; NAN maps to `none`. */
static int64_t rel_us(const fb__report_run *run, double t, int64_t none)
{
    if (isnan(t))
        return none;
    double us = (t - run->started_at) * 1e6;
    if (us < -9e15)
        return INT64_MIN / 4;
    if (us > 9e15)
        return INT64_MAX / 4;
    return llround(us);
}

/* The run's end: run.ended_at, or for a run still going (or whose
 * supervisor died) the last time the journal mentions. */
static double run_end(const fb__report_run *run)
{
    if (run->finished)
        return run->ended_at;
    double end = run->started_at;
#define SEE(t) do { if (!isnan(t) && (t) > end) end = (t); } while (0)
    for (size_t i = 0; i < run->nattempts; i++) {
        SEE(run->attempts[i].started_at);
        SEE(run->attempts[i].ready_at);
        SEE(run->attempts[i].ended_at);
    }
    for (size_t i = 0; i < run->nincidents; i++)
        SEE(run->incidents[i].detected_at);
    for (size_t i = 0; i < run->nsamples; i++)
        SEE(run->samples[i].time);
    for (size_t i = 0; i < run->nckpts; i++)
        SEE(run->ckpts[i].committed_at);
#undef SEE
    return end;
}

/* When did attempt a finish step `step`?  Known points: its step samples
 * up to the failure (those after it are of ranks that went on while the
 * failed one was dying, or behind it), the first step at ready_at (r,
 * step_r) and the failing step when it failed (f, step_f; -1 unknown).
 * The last point at or below the step and the first at or above it are
 * interpolated.  Returns µs since run start,
 * INT64_MIN/4 when every point is past the step (all of the attempt's
 * training came after it), INT64_MAX/4 when none is (nothing did), or
 * `none` without any point. */
typedef struct point {
    int64_t step, t_us;
} point;

static void consider(point *lo, point *hi, int64_t step, point x)
{
    if (x.step <= step && (lo->t_us == INT64_MIN || x.step > lo->step ||
                           (x.step == lo->step && x.t_us > lo->t_us)))
        *lo = x;
    if (x.step >= step && (hi->t_us == INT64_MIN || x.step < hi->step ||
                           (x.step == hi->step && x.t_us < hi->t_us)))
        *hi = x;
}

static int64_t time_of_step(const fb__report_run *run, int a, int64_t step,
                            int64_t none, point ready, point failed)
{
    point lo = {0, INT64_MIN}, hi = {0, INT64_MIN};
    const fb__report_attempt *at = &run->attempts[a];
    for (size_t i = at->sample_lo; i < at->sample_hi; i++) {
        const fb__report_sample *x = &run->samples[i];
        point p = {x->step, rel_us(run, x->time, 0)};
        if (p.t_us <= failed.t_us) /* not a rank still going after it */
            consider(&lo, &hi, step, p);
    }
    if (ready.step >= 0)
        consider(&lo, &hi, step, ready);
    if (failed.step >= 0)
        consider(&lo, &hi, step, failed);
    if (lo.t_us == INT64_MIN && hi.t_us == INT64_MIN)
        return none;
    if (lo.t_us == INT64_MIN)
        return INT64_MIN / 4;
    if (hi.t_us == INT64_MIN)
        return INT64_MAX / 4;
    if (hi.step == lo.step)
        return lo.t_us;
    return lo.t_us + llround((double)(hi.t_us - lo.t_us) *
                             (double)(step - lo.step) / (double)(hi.step - lo.step));
}

/* Did checkpoint k's save begin by f (µs since the run's start)?  Its
 * commit less its persist and its stall.  Ranks that go on while a failed
 * one is still dying save in the detection window after f: those stalls
 * are not in the training before the failure (a journal without the
 * commit's time counts the save in, as before). */
static int saved_by(const fb__report_run *run, const fb__report_ckpt *k, int64_t f)
{
    double began = k->committed_at - (k->persist_ms + k->stall_ms) / 1e3;
    return rel_us(run, began, INT64_MIN / 4) <= f;
}

/* Lost work of attempt i, ending at f after training from r: the time
 * spent on steps past the checkpoint the next attempt restored (NULL
 * restored_step: it started fresh, all of it), less the checkpoint stalls
 * already counted inside that stretch (saves begun by f); else the
 * journal's incident lost_s. */
static int64_t lost_us(fb__report_run *run, size_t i, int64_t r, int64_t f)
{
    fb__report_attempt *a = &run->attempts[i];
    if (i + 1 < run->nattempts) {
        int64_t restored = run->attempts[i + 1].restored_step;
        /* the first step it completed, at ready_at */
        int64_t step_r = a->start_step >= 0 ? a->start_step
                         : a->restored_step >= 0 ? a->restored_step + 1 : -1;
        int64_t step_f = a->failure >= 0 && run->incidents[a->failure].step >= 0
                             ? run->incidents[a->failure].step : a->end_step;
        int64_t t = restored < 0 ? INT64_MIN / 4
                    : time_of_step(run, (int)i, restored, INT64_MIN,
                                   (point){step_r, r}, (point){step_f, f});
        /* The restored step before every point known, and the attempt's
         * own first step not known either (a short attempt: no step of it
         * journaled before the failure): the steps cannot tell when the
         * restored one was done, not "before the attempt began"; the
         * incident's lost_s, measured live, can. */
        if (restored >= 0 && step_r < 0 && t == INT64_MIN / 4)
            t = INT64_MIN;
        if (t != INT64_MIN) {
            int64_t from = clamp64(t, r, f);
            int64_t stall = 0;
            for (size_t k = 0; k < run->nckpts; k++)
                if (run->ckpts[k].attempt == (int)i &&
                    (restored < 0 || run->ckpts[k].step > restored) &&
                    saved_by(run, &run->ckpts[k], f))
                    stall += llround(run->ckpts[k].stall_ms * 1e3);
            a->lost_from = "steps";
            return f - from - min64(stall, f - from);
        }
    }
    if (a->failure >= 0 && run->incidents[a->failure].lost_s >= 0) {
        a->lost_from = "incident";
        return llround(run->incidents[a->failure].lost_s * 1e6);
    }
    a->lost_from = "none";
    return 0;
}

int fb__report_account(fb__report_run *run, char *err, size_t errsz)
{
    double end = run_end(run);
    int64_t W = rel_us(run, end, 0);
    if (W < 0)
        W = 0;
    run->ended_at = end;
    run->wall_us = W;
    memset(run->us, 0, sizeof run->us);

    for (size_t k = 0; k < run->nincidents; k++) {
        fb__report_incident *in = &run->incidents[k];
        in->ends_attempt = 0;
        if (in->attempt < 0 || !ends_attempt(in->kind))
            continue;
        fb__report_attempt *a = &run->attempts[in->attempt];
        if (a->failure < 0 ||
            in->detected_at < run->incidents[a->failure].detected_at)
            a->failure = (int)k;
    }

    int64_t prev_end = 0;
    for (size_t i = 0; i < run->nattempts; i++) {
        fb__report_attempt *a = &run->attempts[i];
        memset(a->us, 0, sizeof a->us);
        int64_t s = clamp64(rel_us(run, a->started_at, prev_end), prev_end, W);
        int64_t next = i + 1 < run->nattempts
                           ? rel_us(run, run->attempts[i + 1].started_at, W) : W;
        int64_t e = clamp64(rel_us(run, a->ended_at, clamp64(next, s, W)), s, W);
        run->us[FB__T_RESTART] += s - prev_end; /* gap before it: back-off */
        int64_t d = e, f = e;
        if (a->failure >= 0) {
            fb__report_incident *in = &run->incidents[a->failure];
            in->ends_attempt = 1;
            d = clamp64(rel_us(run, in->detected_at, e), s, e);
            f = clamp64(rel_us(run, in->occurred_at, d), s, d);
        }
        int64_t r = clamp64(rel_us(run, a->ready_at, f), s, f);
        int64_t restore = isnan(a->restore_s) || a->restore_s < 0
                              ? 0 : llround(a->restore_s * 1e6);
        restore = min64(restore, r - s);
        a->us[FB__T_RESTORE] = restore;
        a->us[FB__T_RESTART] = (r - s - restore) + (e - d);
        a->us[FB__T_DETECT] = d - f;
        int64_t train = f - r, stall = 0;
        for (size_t k = 0; k < run->nckpts; k++)
            if (run->ckpts[k].attempt == (int)i && saved_by(run, &run->ckpts[k], f))
                stall += llround(run->ckpts[k].stall_ms * 1e3);
        a->ckpt_stall_us = stall;
        a->us[FB__T_CKPT] = min64(stall, train);
        int64_t lost = lost_us(run, i, r, f);
        a->us[FB__T_LOST] = clamp64(lost, 0, train - a->us[FB__T_CKPT]);
        a->us[FB__T_USEFUL] = train - a->us[FB__T_CKPT] - a->us[FB__T_LOST];
        if (a->failure >= 0)
            run->incidents[a->failure].lost_acc_s = fb__report_s(a->us[FB__T_LOST]);
        a->start_us = s;
        a->end_us = e;
        a->ready_us = r;
        a->fail_us = f;
        a->detected_us = d;
        int64_t sum = 0;
        for (int p = 0; p < FB__T_N; p++) {
            sum += a->us[p];
            run->us[p] += a->us[p];
            if (a->us[p] < 0) {
                snprintf(err, errsz, "accounting bug: attempt %d part %s is "
                         "negative", a->number, part_keys[p]);
                return FB_EFORMAT;
            }
        }
        if (sum != e - s) {
            snprintf(err, errsz, "accounting bug: attempt %d parts sum to %lld "
                     "us, its wall is %lld us", a->number, (long long)sum,
                     (long long)(e - s));
            return FB_EFORMAT;
        }
        prev_end = e;
    }
    run->us[FB__T_RESTART] += W - prev_end; /* after the last attempt */
    int64_t sum = 0;
    for (int p = 0; p < FB__T_N; p++)
        sum += run->us[p];
    if (sum != W) {
        snprintf(err, errsz, "accounting bug: parts sum to %lld us, the wall is "
                 "%lld us", (long long)sum, (long long)W);
        return FB_EFORMAT;
    }
    return 0;
}
