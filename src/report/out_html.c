/*
 * out_html.c -- `firebreak report --html FILE`: one self-contained page
 * (inline CSS and SVG; no scripts, fonts or images from anywhere) with a
 * timeline of attempts and incidents, the time breakdown, step time per
 * rank over time and, when agent.sqlite holds them, temperature and power
 * beside throughput with their Pearson correlation.
 *
 * Charts use a viewBox and width:100%, so they shrink with a narrow
 * window; tables scroll sideways on their own.  Large journals are
 * bucketed (SERIES_BUCKETS points per line) so the page stays small.
 */
#include "report/report.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "firebreak/firebreak.h"

#define SERIES_BUCKETS 300
#define ENV_BUCKETS FB__REPORT_ENV_BUCKETS
#define MAX_RANK_LINES 16
#define MAX_MARKERS 2000
#define MAX_INCIDENT_ROWS 500

static const char *const part_color[FB__T_N] = {
    "#2e7d32", "#1565c0", "#ef6c00", "#c62828", "#6a1b9a", "#00838f"};
static const char *const palette[MAX_RANK_LINES] = {
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
    "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939",
    "#8c6d31", "#843c39", "#7b4173", "#3182bd"};

static double pct(int64_t a, int64_t b)
{
    return b > 0 ? 100.0 * (double)a / (double)b : 0.0;
}

/* ---- a plot: data ranges mapped into a fixed viewBox ------------------- */

typedef struct plot {
    FILE *f;
    double w, h, ml, mr, mt, mb;   /* size and margins (viewBox units) */
    double x0, x1, y0, y1;         /* data ranges */
} plot;

static double px(const plot *p, double x)
{
    double span = p->x1 > p->x0 ? p->x1 - p->x0 : 1;
    return p->ml + (x - p->x0) / span * (p->w - p->ml - p->mr);
}

static double py(const plot *p, double y)
{
    double span = p->y1 > p->y0 ? p->y1 - p->y0 : 1;
    return p->h - p->mb - (y - p->y0) / span * (p->h - p->mt - p->mb);
}

static double nice_step(double range)
{
    if (!(range > 0) || !isfinite(range))
        return 1;
    double raw = range / 5, mag = pow(10, floor(log10(raw)));
    double n = raw / mag;
    return (n < 1.5 ? 1 : n < 3.5 ? 2 : n < 7.5 ? 5 : 10) * mag;
}

static void plot_begin(plot *p, FILE *f, const char *label, double h)
{
    memset(p, 0, sizeof *p);
    p->f = f;
    p->w = 760;
    p->h = h;
    p->ml = 64;
    p->mr = 16;
    p->mt = 28;
    p->mb = 44;
    fprintf(f, "<div class=\"chartbox\"><svg class=\"chart\" viewBox=\"0 0 %.0f %.0f\" role=\"img\" "
               "aria-label=\"", p->w, p->h);
    fb__markup_text(f, label);
    fprintf(f, "\" xmlns=\"http://www.w3.org/2000/svg\">\n");
}

/* Axes with ticks; the y axis is skipped when ylabel is NULL. */
static void axes(plot *p, const char *xlabel, const char *ylabel)
{
    FILE *f = p->f;
    double bx = p->h - p->mb;
    fprintf(f, "<g class=\"axis\" stroke=\"#444\" fill=\"none\"><line x1=\"%.1f\" "
               "y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>", p->ml, bx, p->w - p->mr, bx);
    if (ylabel)
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>",
                p->ml, p->mt, p->ml, bx);
    fprintf(f, "</g>\n<g font-size=\"12\" fill=\"#222\">");
    double st = nice_step(p->x1 - p->x0);
    for (double x = ceil(p->x0 / st) * st; x <= p->x1 + st * 1e-9; x += st)
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                   "stroke=\"#444\"/><text x=\"%.1f\" y=\"%.1f\" "
                   "text-anchor=\"middle\">%g</text>",
                px(p, x), bx, px(p, x), bx + 4, px(p, x), bx + 16, x);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">",
            (p->ml + p->w - p->mr) / 2, p->h - 6);
    fb__markup_text(f, xlabel);
    fprintf(f, "</text>");
    if (ylabel) {
        st = nice_step(p->y1 - p->y0);
        for (double y = ceil(p->y0 / st) * st; y <= p->y1 + st * 1e-9; y += st)
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                       "stroke=\"#ddd\"/><text x=\"%.1f\" y=\"%.1f\" "
                       "text-anchor=\"end\">%g</text>",
                    p->ml, py(p, y), p->w - p->mr, py(p, y), p->ml - 4,
                    py(p, y) + 4, y);
        fprintf(f, "<text transform=\"translate(14 %.1f) rotate(-90)\" "
                   "text-anchor=\"middle\">", (p->mt + bx) / 2);
        fb__markup_text(f, ylabel);
        fprintf(f, "</text>");
    }
    fprintf(f, "</g>\n");
}

/* A legend along the top of the plot: rows of 16 px, as many as needed
 * (the plot's top margin must leave room for them). */
static void legend(plot *p, const char *const *labels, const char *const *colors,
                   int n)
{
    double x = p->ml, y = 8;
    fprintf(p->f, "<g class=\"legend\" font-size=\"12\">");
    for (int i = 0; i < n; i++) {
        double wl = 22 + 7.0 * (double)strlen(labels[i]);
        if (x > p->ml && x + wl > p->w - p->mr) {
            x = p->ml;
            y += 16;
        }
        fprintf(p->f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"10\" height=\"10\" "
                      "fill=\"%s\"/><text x=\"%.1f\" y=\"%.1f\">", x, y,
                colors[i], x + 13, y + 9);
        fb__markup_text(p->f, labels[i]);
        fprintf(p->f, "</text>");
        x += wl;
    }
    fprintf(p->f, "</g>\n");
}

static void plot_end(plot *p)
{
    fprintf(p->f, "</svg></div>\n");
}

/* A polyline over buckets: NAN points are skipped, and the line breaks
 * where seg (when given: the attempt of each bucket) changes.  A piece of
 * one point is a dot (a polyline of one point draws nothing). */
static void series(plot *p, const double *xs, const double *ys, const int *seg,
                   int n, const char *color, const char *title)
{
    int points = 0, last_seg = -2;
    double x0 = 0, y0 = 0; /* the piece's first point, drawn with the second */
    for (int i = 0; i <= n; i++) {
        if (i < n && isnan(ys[i]))
            continue;
        if (points && (i == n || (seg && seg[i] != last_seg))) {
            if (points == 1)
                fprintf(p->f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"%s\">"
                              "<title>%s</title></circle>\n", x0, y0, color, title);
            else
                fprintf(p->f, "\"><title>%s</title></polyline>\n", title);
            points = 0;
        }
        if (i == n)
            break;
        double x = px(p, xs[i]), y = py(p, ys[i]);
        if (points == 1)
            fprintf(p->f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" "
                          "points=\"%.1f,%.1f ", color, x0, y0);
        if (points) {
            fprintf(p->f, "%.1f,%.1f ", x, y);
        } else {
            x0 = x;
            y0 = y;
        }
        points++;
        last_seg = seg ? seg[i] : -2;
    }
}

/* ---- the charts --------------------------------------------------------- */

static void rect(FILE *f, double x0, double x1, double y, double h,
                 const char *color, const char *title)
{
    if (x1 - x0 <= 0)
        return;
    fprintf(f, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" "
               "fill=\"%s\"><title>%s</title></rect>", x0, y,
            x1 - x0 < 0.3 ? 0.3 : x1 - x0, h, color, title);
}

/* The colour of an agent event's marker, by its kind's family. */
static const char *event_color(const char *kind)
{
    if (!strncmp(kind, "thermal", 7))
        return "#e91e63";
    if (!strncmp(kind, "power_slowdown", 14))
        return "#795548";
    if (!strncmp(kind, "power_swing", 11))
        return "#f9a825";
    if (!strncmp(kind, "straggler", 9))
        return "#37474f";
    return "#9e9e9e";
}

/* The agent's events on their own row under the attempts: diamonds, the
 * event in the tooltip. */
static void event_markers(FILE *f, const plot *p, const fb__report_run *run,
                          double y)
{
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" "
               "text-anchor=\"end\">agent</text>", p->ml - 4, y + 12);
    for (size_t k = 0; k < run->nevents && k < MAX_MARKERS; k++) {
        const fb__report_agent_event *e = &run->events[k];
        double x = px(p, e->time - run->started_at);
        fprintf(f, "<path class=\"agent-event\" d=\"M%.1f %.1f l5 7 l-5 7 l-5 -7 z\" "
                   "fill=\"%s\"><title>%.3f s: ", x, y + 1, event_color(e->kind),
                e->time - run->started_at);
        fb__markup_text(f, e->kind);
        fprintf(f, " ");
        fb__markup_text(f, e->subject);
        fprintf(f, ": ");
        fb__markup_text(f, e->detail);
        fprintf(f, "</title></path>");
    }
}

static void timeline(FILE *f, const fb__report_run *run)
{
    int rows = run->nattempts <= 30 ? (int)run->nattempts : 1;
    int erow = run->nevents > 0; /* a row for the agent's events */
    plot p;
    plot_begin(&p, f, "timeline of attempts and incidents",
               72 + (rows + erow) * 22.0 + erow * 16.0);
    p.mt += erow * 16.0; /* a second legend row */
    p.x0 = 0;
    p.x1 = fb__report_s(run->wall_us);
    p.y0 = 0;
    p.y1 = rows + erow;
    for (size_t i = 0; i < run->nattempts; i++) {
        const fb__report_attempt *a = &run->attempts[i];
        double y = p.mt + (rows == 1 ? 0 : (double)i) * 22 + 3, h = 16;
        double s = px(&p, fb__report_s(a->start_us));
        double rs = px(&p, fb__report_s(a->ready_us - a->us[FB__T_RESTORE]));
        double r = px(&p, fb__report_s(a->ready_us));
        double l = px(&p, fb__report_s(a->fail_us - a->us[FB__T_LOST]));
        double fl = px(&p, fb__report_s(a->fail_us));
        double d = px(&p, fb__report_s(a->detected_us));
        double e = px(&p, fb__report_s(a->end_us));
        char t[96];
        snprintf(t, sizeof t, "attempt %d: start-up", a->number);
        rect(f, s, rs, y, h, part_color[FB__T_RESTART], t);
        snprintf(t, sizeof t, "attempt %d: restore", a->number);
        rect(f, rs, r, y, h, part_color[FB__T_RESTORE], t);
        snprintf(t, sizeof t, "attempt %d: training", a->number);
        rect(f, r, l, y, h, part_color[FB__T_USEFUL], t);
        snprintf(t, sizeof t, "attempt %d: lost work (recomputed later)", a->number);
        rect(f, l, fl, y, h, part_color[FB__T_LOST], t);
        snprintf(t, sizeof t, "attempt %d: detection", a->number);
        rect(f, fl, d, y, h, part_color[FB__T_DETECT], t);
        snprintf(t, sizeof t, "attempt %d: teardown", a->number);
        rect(f, d, e, y, h, part_color[FB__T_RESTART], t);
        if (rows > 1)
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" "
                       "text-anchor=\"end\">#%d</text>", p.ml - 4, y + 12, a->number);
    }
    for (size_t k = 0; k < run->nckpts && k < MAX_MARKERS; k++) {
        const fb__report_ckpt *c = &run->ckpts[k];
        if (c->attempt < 0 || isnan(c->committed_at))
            continue;
        double y = p.mt + (rows == 1 ? 0 : (double)c->attempt) * 22 + 3;
        double x = px(&p, c->committed_at - run->started_at);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                   "stroke=\"%s\" stroke-width=\"2\"><title>checkpoint step %lld "
                   "(", x, y, x, y + 16, part_color[FB__T_CKPT],
                (long long)c->step);
        fb__markup_text(f, c->status);
        fprintf(f, ", stall %.1f ms)</title></line>", c->stall_ms);
    }
    for (size_t k = 0; k < run->nincidents && k < MAX_MARKERS; k++) {
        const fb__report_incident *in = &run->incidents[k];
        int row = rows == 1 || in->attempt < 0 ? 0 : in->attempt;
        double y = p.mt + row * 22.0 + 3;
        double x = px(&p, in->occurred_at - run->started_at);
        fprintf(f, "<path d=\"M%.1f %.1f l-5 -8 h10 z\" fill=\"#000\"><title>",
                x, y + 1);
        fb__markup_text(f, in->kind);
        if (in->rank >= 0)
            fprintf(f, " rank %d", in->rank);
        fprintf(f, ": ");
        fb__markup_text(f, in->cls.category);
        fprintf(f, "%s / ", in->cls.injected ? " (injected)" : "");
        fb__markup_text(f, in->cls.component);
        fprintf(f, "</title></path>");
    }
    if (erow)
        event_markers(f, &p, run, p.mt + rows * 22.0 + 3);
    fprintf(f, "\n");
    axes(&p, "time since the run started (s)", NULL);
    static const char *const labels[] = {"start-up / teardown", "restore",
        "training", "lost work", "detection", "checkpoint", "incident",
        "agent: thermal", "power slowdown", "power swing", "straggler",
        "other"};
    const char *colors[] = {part_color[FB__T_RESTART], part_color[FB__T_RESTORE],
        part_color[FB__T_USEFUL], part_color[FB__T_LOST],
        part_color[FB__T_DETECT], part_color[FB__T_CKPT], "#000", "#e91e63",
        "#795548", "#f9a825", "#37474f", "#9e9e9e"};
    legend(&p, labels, colors, erow ? 12 : 7);
    plot_end(&p);
}

static void breakdown_chart(FILE *f, const int64_t us[FB__T_N], int64_t wall)
{
    plot p;
    plot_begin(&p, f, "time breakdown", 44 + 24.0 * FB__T_N + 28);
    p.ml = 170;
    p.x0 = 0;
    p.x1 = fb__report_s(wall) > 0 ? fb__report_s(wall) : 1;
    for (int i = 0; i < FB__T_N; i++) {
        double y = p.mt + i * 24.0;
        char t[128];
        snprintf(t, sizeof t, "%s: %.3f s (%.2f%%)", fb__report_part_label(i),
                 fb__report_s(us[i]), pct(us[i], wall));
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" "
                   "text-anchor=\"end\">%s</text>", p.ml - 6, y + 13,
                fb__report_part_label(i));
        rect(f, px(&p, 0), px(&p, fb__report_s(us[i])), y + 2, 16,
             part_color[i], t);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\">%.2f%%</text>\n",
                px(&p, fb__report_s(us[i])) + 4, y + 14, pct(us[i], wall));
    }
    axes(&p, "seconds", NULL);
    plot_end(&p);
}

/* Step time per rank, bucketed over time (mean per bucket). */
static void step_chart(FILE *f, const fb__report_run *run)
{
    if (run->nsamples == 0) {
        fprintf(f, "<p class=\"note\">No step samples in the journal.</p>\n");
        return;
    }
    int maxrank = 0;
    double ymax = 0;
    for (size_t i = 0; i < run->nsamples; i++) {
        const fb__report_sample *x = &run->samples[i];
        if (x->rank > maxrank)
            maxrank = x->rank;
        if (!isnan(x->step_time_ms) && x->step_time_ms > ymax)
            ymax = x->step_time_ms;
    }
    int per_rank = maxrank < MAX_RANK_LINES;
    int nlines = per_rank ? maxrank + 1 : 2;
    double *sum = calloc((size_t)nlines * SERIES_BUCKETS, sizeof *sum);
    double *cnt = calloc((size_t)nlines * SERIES_BUCKETS, sizeof *cnt);
    double *ys = malloc(SERIES_BUCKETS * sizeof *ys);
    double *xs = malloc(SERIES_BUCKETS * sizeof *xs);
    int *seg = malloc(SERIES_BUCKETS * sizeof *seg);
    if (!sum || !cnt || !ys || !xs || !seg)
        goto out;
    for (int b = 0; b < SERIES_BUCKETS; b++)
        seg[b] = -1;
    double W = fb__report_s(run->wall_us) > 0 ? fb__report_s(run->wall_us) : 1;
    for (size_t i = 0; i < run->nsamples; i++) {
        const fb__report_sample *x = &run->samples[i];
        if (isnan(x->step_time_ms))
            continue;
        int b = (int)((x->time - run->started_at) / W * SERIES_BUCKETS);
        if (b < 0 || b >= SERIES_BUCKETS)
            continue;
        seg[b] = x->attempt;
        if (per_rank) {
            sum[x->rank * SERIES_BUCKETS + b] += x->step_time_ms;
            cnt[x->rank * SERIES_BUCKETS + b] += 1;
        } else { /* line 0: mean over ranks; line 1: max over ranks */
            sum[b] += x->step_time_ms;
            cnt[b] += 1;
            if (x->step_time_ms > sum[SERIES_BUCKETS + b])
                sum[SERIES_BUCKETS + b] = x->step_time_ms;
            cnt[SERIES_BUCKETS + b] = 1;
        }
    }
    plot p;
    plot_begin(&p, f, "step time per rank over time", 280);
    p.x0 = 0;
    p.x1 = W;
    p.y0 = 0;
    p.y1 = ymax > 0 ? ymax * 1.05 : 1;
    axes(&p, "time since the run started (s)", "step time (ms)");
    const char *labels[MAX_RANK_LINES];
    char names[MAX_RANK_LINES][24];
    for (int l = 0; l < nlines; l++) {
        for (int b = 0; b < SERIES_BUCKETS; b++) {
            xs[b] = (b + 0.5) * W / SERIES_BUCKETS;
            double c = cnt[l * SERIES_BUCKETS + b];
            ys[b] = c > 0 ? sum[l * SERIES_BUCKETS + b] / (per_rank || l == 0 ? c : 1)
                          : NAN;
        }
        if (per_rank)
            snprintf(names[l], sizeof names[l], "rank %d", l);
        else
            snprintf(names[l], sizeof names[l], l == 0 ? "mean over ranks"
                                                       : "max over ranks");
        labels[l] = names[l];
        series(&p, xs, ys, seg, SERIES_BUCKETS, palette[l], names[l]);
    }
    legend(&p, labels, palette, nlines);
    plot_end(&p);
out:
    free(sum);
    free(cnt);
    free(ys);
    free(xs);
    free(seg);
}

static void small_plot(FILE *f, const char *label, const char *ylabel,
                       const double *xs, const double *ys, double W,
                       const char *color)
{
    double lo = INFINITY, hi = -INFINITY;
    for (int i = 0; i < ENV_BUCKETS; i++)
        if (!isnan(ys[i])) {
            lo = fmin(lo, ys[i]);
            hi = fmax(hi, ys[i]);
        }
    if (!isfinite(lo))
        return;
    double pad = hi > lo ? (hi - lo) * 0.1 : fabs(hi) * 0.05 + 1;
    plot p;
    plot_begin(&p, f, label, 190);
    p.x0 = 0;
    p.x1 = W;
    p.y0 = lo - pad;
    p.y1 = hi + pad;
    axes(&p, "time since the run started (s)", ylabel);
    series(&p, xs, ys, NULL, ENV_BUCKETS, color, label);
    legend(&p, &label, &color, 1);
    plot_end(&p);
}

static void env_chart(FILE *f, const fb__report_run *run)
{
    if (run->nenv == 0) {
        fprintf(f, "<p class=\"note\">Temperature and power: ");
        fb__markup_text(f, run->agent_note[0] ? run->agent_note : "no agent data");
        fprintf(f, ".</p>\n");
        return;
    }
    fb__report_envcorr ec;
    fb__report_env_corr(run, &ec);
    char rt[80], rp[80];
    fb__report_corr_phrase(ec.r_temp, ec.n_temp, "<b>", "</b>", rt, sizeof rt);
    fb__report_corr_phrase(ec.r_power, ec.n_power, "<b>", "</b>", rp, sizeof rp);
    fprintf(f, "<p id=\"correlation\">Correlation with throughput (Pearson r "
               "over %d-bucket means): temperature %s, power %s.</p>\n",
            ENV_BUCKETS, rt, rp);
    small_plot(f, "throughput", "steps/s per rank", ec.x_s, ec.throughput,
               ec.wall_s, "#2e7d32");
    small_plot(f, "GPU temperature", "temperature (°C)", ec.x_s, ec.temp_c,
               ec.wall_s, "#c62828");
    small_plot(f, "GPU power", "power (W)", ec.x_s, ec.power_w, ec.wall_s,
               "#1565c0");
}

/* ---- the page ----------------------------------------------------------- */

static void breakdown_table(FILE *f, const int64_t us[FB__T_N], int64_t wall)
{
    fprintf(f, "<div class=\"tbl\"><table id=\"breakdown\"><tr><th>part</th>"
               "<th>seconds</th><th>share</th></tr>\n");
    for (int p = 0; p < FB__T_N; p++)
        fprintf(f, "<tr><td><span class=\"sw\" style=\"background:%s\"></span>"
                   "%s</td><td data-key=\"%s\">%.3f</td><td>%.2f%%</td></tr>\n",
                part_color[p], fb__report_part_label(p), fb__report_part_key(p),
                fb__report_s(us[p]), pct(us[p], wall));
    fprintf(f, "<tr><th>total (= wall time)</th><th data-key=\"wall\">%.3f</th>"
               "<th>100%%</th></tr></table></div>\n", fb__report_s(wall));
}

static int table5(FILE *f, fb__report_run *const *runs, size_t n)
{
    fb__report_row *rows;
    size_t total;
    long nrows = fb__report_table(runs, n, &rows, &total);
    if (nrows < 0)
        return (int)nrows;
    fprintf(f, "<h2>Interruptions by root cause</h2>\n<p class=\"note\">"
               "Unexpected interruptions (incidents that ended an attempt), in "
               "the shape of Llama 3's Table 5.</p><div class=\"tbl\"><table "
               "id=\"table5\"><tr><th>component</th><th>category</th>"
               "<th>count</th><th>share</th><th>of them injected</th></tr>\n");
    for (long i = 0; i < nrows; i++) {
        fprintf(f, "<tr><td>");
        fb__markup_text(f, rows[i].component);
        fprintf(f, "</td><td>");
        fb__markup_text(f, rows[i].category);
        fprintf(f, "</td><td>%zu</td><td>%.1f%%</td><td>%zu</td></tr>\n",
                rows[i].count,
                total ? 100.0 * (double)rows[i].count / (double)total : 0,
                rows[i].injected);
    }
    fprintf(f, "</table></div>\n");
    free(rows);
    fb__report_suspect *s;
    long ns = fb__report_suspects(runs, n, &s);
    if (ns < 0)
        return (int)ns;
    if (ns > 0) {
        fprintf(f, "<h2>Suspects</h2><div class=\"tbl\"><table id=\"suspects\">"
                   "<tr><th>node / rank</th><th>failures</th><th>runs</th></tr>\n");
        for (long i = 0; i < ns; i++) {
            fprintf(f, "<tr><td>");
            fb__markup_text(f, s[i].what);
            fprintf(f, "</td><td>%zu</td><td>%zu</td></tr>\n", s[i].failures,
                    s[i].runs);
        }
        fprintf(f, "</table></div>\n");
    }
    free(s);
    return 0;
}

static void incident_table(FILE *f, const fb__report_run *run)
{
    if (!run->nincidents)
        return;
    fprintf(f, "<h3>Incidents</h3><div class=\"tbl\"><table class=\"incidents\">"
               "<tr><th>#</th><th>attempt</th><th>kind</th><th>rank</th>"
               "<th>step</th><th>detection (ms)</th><th>lost work (s)</th>"
               "<th>category</th><th>component</th><th>evidence</th></tr>\n");
    for (size_t i = 0; i < run->nincidents && i < MAX_INCIDENT_ROWS; i++) {
        const fb__report_incident *in = &run->incidents[i];
        double lost = in->lost_acc_s >= 0 ? in->lost_acc_s : in->lost_s;
        fprintf(f, "<tr><td>%lld</td><td>%d</td><td>", (long long)in->id,
                in->attempt >= 0 ? run->attempts[in->attempt].number : -1);
        fb__markup_text(f, in->kind);
        if (in->rank >= 0)
            fprintf(f, "</td><td>%d</td>", in->rank);
        else
            fprintf(f, "</td><td>-</td>");
        if (in->step >= 0)
            fprintf(f, "<td>%lld</td>", (long long)in->step);
        else
            fprintf(f, "<td>-</td>");
        if (in->detect_ms >= 0)
            fprintf(f, "<td>%.1f</td>", in->detect_ms);
        else
            fprintf(f, "<td>-</td>");
        if (lost >= 0)
            fprintf(f, "<td>%.3f</td><td>", lost);
        else
            fprintf(f, "<td>-</td><td>");
        fb__markup_text(f, in->cls.category);
        if (in->cls.injected)
            fprintf(f, " <span class=\"inj\">(injected)</span>");
        fprintf(f, "</td><td>");
        fb__markup_text(f, in->cls.component);
        fprintf(f, "</td><td class=\"ev\">");
        fb__markup_text(f, in->cls.evidence);
        fprintf(f, "</td></tr>\n");
    }
    fprintf(f, "</table></div>\n");
    if (run->nincidents > MAX_INCIDENT_ROWS)
        fprintf(f, "<p class=\"note\">%zu more incidents: see the text or JSON "
                   "report.</p>\n", run->nincidents - MAX_INCIDENT_ROWS);
}


static void event_table(FILE *f, const fb__report_run *run)
{
    if (!run->events_total)
        return;
    fprintf(f, "<h3>Agent events</h3><div class=\"tbl\"><table id=\"agent-events\">"
               "<tr><th>at (s)</th><th>kind</th><th>subject</th><th>severity</th>"
               "<th>detail</th></tr>\n");
    for (size_t i = 0; i < run->nevents && i < MAX_INCIDENT_ROWS; i++) {
        const fb__report_agent_event *e = &run->events[i];
        fprintf(f, "<tr><td>%.3f</td><td>", e->time - run->started_at);
        fb__markup_text(f, e->kind);
        fprintf(f, "</td><td>");
        fb__markup_text(f, e->subject);
        fprintf(f, "</td><td>");
        fb__markup_text(f, e->severity);
        fprintf(f, "</td><td class=\"ev\">");
        fb__markup_text(f, e->detail);
        fprintf(f, "</td></tr>\n");
    }
    fprintf(f, "</table></div>\n");
    if (run->events_total > MAX_INCIDENT_ROWS)
        fprintf(f, "<p class=\"note\">%zu more agent events: see the text or "
                   "JSON report.</p>\n", run->events_total - (run->nevents <
                   MAX_INCIDENT_ROWS ? run->nevents : MAX_INCIDENT_ROWS));
}

/* The supervisor's live lateness: each rank's mean lateness over time
 * (ranks that were named, or the worst, up to MAX_RANK_LINES lines),
 * namings and ends as markers, and the rows as a table. */
static void lateness_section(FILE *f, const fb__report_run *run)
{
    if (!run->late_total)
        return;
    fprintf(f, "<h3>Lateness at collectives</h3>\n");
    int lines[MAX_RANK_LINES], nl = 0;
    double lo = 0, hi = 0;
    for (size_t i = 0; i < run->nlate; i++) {
        const fb__report_late *l = &run->late[i];
        if (!isnan(l->late_ms)) {
            lo = fmin(lo, l->late_ms);
            hi = fmax(hi, l->late_ms);
        }
        int k = 0;
        while (k < nl && lines[k] != l->rank)
            k++;
        if (k == nl && nl < MAX_RANK_LINES)
            lines[nl++] = l->rank;
    }
    size_t n = run->nlate;
    double *xs = malloc((n ? n : 1) * sizeof *xs), *ys = malloc((n ? n : 1) * sizeof *ys);
    int *seg = malloc((n ? n : 1) * sizeof *seg);
    if (xs && ys && seg) {
        double W = fb__report_s(run->wall_us) > 0 ? fb__report_s(run->wall_us) : 1;
        plot p;
        plot_begin(&p, f, "mean lateness per rank over time", 260);
        p.x0 = 0;
        p.x1 = W;
        p.y0 = lo;
        p.y1 = hi > lo ? hi * 1.05 : lo + 1;
        axes(&p, "time since the run started (s)", "mean lateness (ms)");
        const char *labels[MAX_RANK_LINES];
        char names[MAX_RANK_LINES][24];
        for (int k = 0; k < nl; k++) {
            int m = 0;
            for (size_t i = 0; i < n; i++) {
                const fb__report_late *l = &run->late[i];
                if (l->rank != lines[k] || l->kind != FB__LATE_SAMPLE)
                    continue;
                xs[m] = l->time - run->started_at;
                ys[m] = l->late_ms;
                seg[m++] = l->attempt;
            }
            snprintf(names[k], sizeof names[k], "rank %d", lines[k]);
            labels[k] = names[k];
            series(&p, xs, ys, seg, m, palette[k], names[k]);
        }
        for (size_t i = 0; i < n; i++) {
            const fb__report_late *l = &run->late[i];
            if (l->kind == FB__LATE_SAMPLE)
                continue;
            double x = px(&p, l->time - run->started_at);
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                       "stroke=\"%s\" stroke-dasharray=\"4 3\"><title>%s rank %d"
                       "</title></line>\n", x, p.mt, x, p.h - p.mb,
                    l->kind == FB__LATE_NAMED ? "#c62828" : "#2e7d32",
                    fb__report_late_kind_name(l->kind), l->rank);
        }
        legend(&p, labels, palette, nl);
        plot_end(&p);
    }
    free(xs);
    free(ys);
    free(seg);
    fprintf(f, "<div class=\"tbl\"><table id=\"lateness\"><tr><th>at (s)</th>"
               "<th>kind</th><th>rank</th><th>step</th><th>mean lateness (ms)</th>"
               "<th>last to arrive</th></tr>\n");
    for (size_t i = 0; i < n && i < MAX_INCIDENT_ROWS; i++) {
        const fb__report_late *l = &run->late[i];
        fprintf(f, "<tr><td>%.3f</td><td>%s</td><td>%d</td><td>%lld</td><td>",
                l->time - run->started_at, fb__report_late_kind_name(l->kind),
                l->rank, (long long)l->step);
        if (!isnan(l->late_ms))
            fprintf(f, "%.1f", l->late_ms);
        fprintf(f, "</td><td>");
        if (l->collectives > 0)
            fprintf(f, "%lld of %lld", (long long)l->last, (long long)l->collectives);
        fprintf(f, "</td></tr>\n");
    }
    fprintf(f, "</table></div>\n");
    if (run->late_total > n || n > MAX_INCIDENT_ROWS)
        fprintf(f, "<p class=\"note\">%zu more lateness rows: see the text or "
                   "JSON report.</p>\n", run->late_total -
                   (n < MAX_INCIDENT_ROWS ? n : MAX_INCIDENT_ROWS));
}

static int run_section(FILE *f, fb__report_run *const *runs, size_t r,
                       size_t n)
{
    const fb__report_run *run = runs[r];
    fprintf(f, "<section class=\"run\"><h2>Run ");
    fb__markup_text(f, run->dir);
    fprintf(f, "</h2>\n<p class=\"summary\">");
    fb__markup_text(f, run->name ? run->name : "?");
    fprintf(f, " &middot; ");
    fb__markup_text(f, run->status ? run->status : "?");
    fprintf(f, " &middot; %d ranks &middot; wall <b>%.3f s</b> &middot; useful "
               "<b>%.3f s</b> &middot; effective training time <b "
               "id=\"ettr\">%.2f%%</b> &middot; %zu restarts &middot; %zu "
               "incidents%s</p>\n",
            run->nproc, fb__report_s(run->wall_us),
            fb__report_s(run->us[FB__T_USEFUL]),
            pct(run->us[FB__T_USEFUL], run->wall_us),
            run->nattempts ? run->nattempts - 1 : 0, run->nincidents,
            run->finished ? "" : " &middot; <i>not ended yet</i>");
    if (run->reports_lost)
        fprintf(f, "<p class=\"lost\"><b id=\"reports-lost\">%llu</b> report%s of "
                   "the ranks lost (rank %d first): " FB__REPORT_LOST_WHY "</p>\n",
                (unsigned long long)run->reports_lost, run->reports_lost == 1 ? "" : "s",
                run->reports_lost_first);
    fprintf(f, "<h3>Timeline</h3>\n");
    timeline(f, run);
    fprintf(f, "<h3>Where the time went</h3>\n");
    breakdown_chart(f, run->us, run->wall_us);
    breakdown_table(f, run->us, run->wall_us);
    fprintf(f, "<h3>Step time per rank</h3>\n");
    step_chart(f, run);
    fprintf(f, "<h3>Temperature and power beside throughput</h3>\n");
    env_chart(f, run);
    event_table(f, run);
    lateness_section(f, run);
    if (n == 1) {
        int rc = table5(f, runs, 1);
        if (rc)
            return rc;
    }
    incident_table(f, run);
    fprintf(f, "</section>\n");
    return 0;
}

/* The page's head and style, up to its <h1>. */
static void page_head(FILE *f, const char *title)
{
    fprintf(f, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
               "<meta name=\"viewport\" content=\"width=device-width, "
               "initial-scale=1\"><meta name=\"generator\" content=\"firebreak "
               "report %s\"><title>%s</title>\n<style>\n"
               "body{font-family:system-ui,sans-serif;margin:0 auto;padding:0 "
               "12px;max-width:980px;color:#222;line-height:1.4}\n"
               "svg.chart{width:100%%;height:auto;display:block;margin:6px 0 "
               "14px;min-width:540px}\n.chartbox,.tbl{overflow-x:auto}\n"
               "td.ev{min-width:22em}\ntable{border-collapse:collapse;"
               "font-size:13px;margin:6px 0 14px}\nth,td{border-bottom:1px solid "
               "#ddd;padding:3px 8px;text-align:left;vertical-align:top}\n"
               ".sw{display:inline-block;width:10px;height:10px;margin-right:6px}\n"
               ".note{color:#555;font-size:13px}\n</style></head><body>\n"
               "<h1>%s</h1>\n", FB__REPORT_JSON_VERSION, title, title);
}

int fb__report_write_html(FILE *f, fb__report_run *const *runs, size_t n)
{
    page_head(f, "firebreak report");
    if (n > 1) {
        int64_t us[FB__T_N] = {0}, wall = 0;
        fprintf(f, "<h2>%zu runs</h2><div class=\"tbl\"><table id=\"runs\"><tr>"
                   "<th>run</th><th>wall (s)</th><th>ETTR</th><th>restarts</th>"
                   "<th>incidents</th></tr>\n", n);
        for (size_t r = 0; r < n; r++) {
            fprintf(f, "<tr><td>");
            fb__markup_text(f, runs[r]->dir);
            fprintf(f, "</td><td>%.3f</td><td>%.2f%%</td><td>%zu</td><td>%zu"
                       "</td></tr>\n", fb__report_s(runs[r]->wall_us),
                    pct(runs[r]->us[FB__T_USEFUL], runs[r]->wall_us),
                    runs[r]->nattempts ? runs[r]->nattempts - 1 : 0,
                    runs[r]->nincidents);
            for (int p = 0; p < FB__T_N; p++)
                us[p] += runs[r]->us[p];
            wall += runs[r]->wall_us;
        }
        fprintf(f, "</table></div>\n<h2>All runs: where the time went</h2>\n");
        breakdown_chart(f, us, wall);
        breakdown_table(f, us, wall);
    }
    int rc = n > 1 ? table5(f, runs, n) : 0;
    for (size_t r = 0; r < n && !rc; r++)
        rc = run_section(f, runs, r, n);
    if (rc)
        return rc;
    fprintf(f, "</body></html>\n");
    return ferror(f) ? -EIO : 0;
}

/* `report --fleet --html`: the text's table and evidence (docs/report.md
 * "Fleet"), every name and reason escaped. */
int fb__fleet_write_html(FILE *f, const fb__fleet *fl)
{
    page_head(f, "firebreak fleet");
    size_t flagged = 0;
    for (size_t i = 0; i < fl->nnodes; i++)
        flagged += fl->nodes[i].flags != 0;
    fprintf(f, "<p id=\"summary\">%zu runs, %zu nodes, %zu interruptions on a "
               "node (%.3f per node-run); <b>%zu flagged</b>", fl->nruns,
            fl->nnodes, fl->interruptions, fl->rate, flagged);
    if (fl->skipped)
        fprintf(f, "; %zu run director%s skipped (could not be read)", fl->skipped,
                fl->skipped == 1 ? "y" : "ies");
    fprintf(f, "</p>\n<p class=\"note\">Flags: repeat &ge; %d runs with an "
               "interruption; hardware &ge; %d; health &ge; %d failed checks; rate "
               "&ge; %.1f&times; the fleet's with &ge; %d interruptions; drain "
               "&ge; %d drains.</p>\n", fl->t.repeat_runs, fl->t.hardware,
            fl->t.health, fl->t.rate_factor, fl->t.rate_min, fl->t.drains);
    fprintf(f, "<div class=\"tbl\"><table id=\"fleet\"><tr><th>node</th><th>runs"
               "</th><th>interruptions</th><th>hardware</th><th>health</th><th>"
               "drains</th><th>rate</th><th>flags</th></tr>\n");
    for (size_t i = 0; i < fl->nnodes; i++) {
        const fb__fleet_node *n = &fl->nodes[i];
        fprintf(f, "<tr%s><td>", n->flags ? " class=\"lemon\"" : "");
        fb__markup_text(f, n->name);
        fprintf(f, "</td><td>%zu</td><td>%zu</td><td>%zu</td><td>%zu</td><td>%zu"
                   "</td><td>%.3f</td><td>", n->runs, n->interruptions, n->hardware,
                n->health_fails, n->drains, n->rate);
        int any = 0;
        for (int k = 0; k < FB__FLEET_NFLAGS; k++)
            if (n->flags & (1u << k))
                fprintf(f, "%s<b>%s</b>", any++ ? ", " : "", fb__fleet_flag_name(k));
        fprintf(f, "%s</td></tr>\n", any ? "" : "-");
    }
    fprintf(f, "</table></div>\n");
    for (size_t i = 0; i < fl->nnodes; i++) {
        const fb__fleet_node *n = &fl->nodes[i];
        if (!n->flags)
            continue;
        fprintf(f, "<h2>");
        fb__markup_text(f, n->name);
        fprintf(f, ": evidence</h2>\n<div class=\"tbl\"><table class=\"evidence\">"
                   "<tr><th>run</th><th>attempt</th><th>incident</th><th>kind</th>"
                   "<th>category</th><th>component</th><th>health failed</th>"
                   "<th>evidence</th></tr>\n");
        for (size_t k = 0; k < n->nev; k++) {
            const fb__fleet_ev *e = &n->ev[k];
            fprintf(f, "<tr><td>");
            fb__markup_text(f, e->run);
            fprintf(f, "</td><td>%d</td><td>", e->attempt);
            if (e->drain)
                fprintf(f, "-");
            else
                fprintf(f, "#%lld", (long long)e->id);
            fprintf(f, "</td><td>");
            fb__markup_text(f, e->kind);
            fprintf(f, "</td><td>");
            fb__markup_text(f, e->category);
            fprintf(f, "%s</td><td>", e->hardware ? " [hardware]" : "");
            fb__markup_text(f, e->component);
            fprintf(f, "</td><td>");
            fb__markup_text(f, e->health_fail ? e->checks : "");
            fprintf(f, "</td><td class=\"ev\">");
            fb__markup_text(f, e->why);
            fprintf(f, "</td></tr>\n");
        }
        fprintf(f, "</table></div>\n");
        if (n->nevidence > n->nev)
            fprintf(f, "<p class=\"note\">... %zu more</p>\n", n->nevidence - n->nev);
    }
    fprintf(f, "</body></html>\n");
    return ferror(f) ? -EIO : 0;
}

/* A page: the runs' report or the fleet's. */
typedef struct page {
    fb__report_run *const *runs;
    size_t n;
    const fb__fleet *fleet;
} page;

/* The page into an open stream; every write, the flush and the close are
 * checked (a full disk, /dev/full).  fsync when the file is a regular one.
 * Closes f.  0 or -errno. */
static int write_stream(FILE *f, const page *pg)
{
    int rc = pg->fleet ? fb__fleet_write_html(f, pg->fleet)
                       : fb__report_write_html(f, pg->runs, pg->n);
    if (fflush(f) && (!rc || rc == -EIO))
        rc = -errno; /* why the write failed (ENOSPC), not just -EIO */
    if (!rc && ferror(f))
        rc = -EIO;
    struct stat st;
    if (!rc && fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode) &&
        fsync(fileno(f)))
        rc = -errno;
    if (fclose(f) && !rc)
        rc = errno ? -errno : -EIO;
    return rc;
}

static int write_page(const char *path, const page *pg, char *err, size_t errsz)
{
    struct stat st;
    int rc;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        /* A device or a FIFO (/dev/stdout, a pipe): written in place; a
         * directory is refused by fopen. */
        errno = 0;
        FILE *f = fopen(path, "w");
        rc = f ? write_stream(f, pg) : -errno;
        if (rc)
            snprintf(err, errsz, "cannot write %s: %s", path, fb_strerror(rc));
        return rc;
    }
    /* A regular file: a temporary one renamed over it, so a reader never
     * sees half a page and a failed write leaves the old page. */
    char tmp[4096];
    if (fb__fmt(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid())) {
        snprintf(err, errsz, "%s: path too long", path);
        return -ENAMETOOLONG;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = -errno;
        snprintf(err, errsz, "cannot write %s: %s", path, fb_strerror(rc));
        return rc;
    }
    FILE *f = fdopen(fd, "w");
    if (!f) {
        rc = -errno;
        close(fd);
        unlink(tmp);
        snprintf(err, errsz, "cannot write %s: %s", path, fb_strerror(rc));
        return rc;
    }
    rc = write_stream(f, pg);
    if (!rc && rename(tmp, path))
        rc = -errno;
    if (!rc) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", path);
        char *slash = strrchr(dir, '/');
        if (!slash)
            snprintf(dir, sizeof dir, ".");
        else if (slash == dir)
            dir[1] = '\0';
        else
            *slash = '\0';
        rc = fb__fsync_dir(dir);
    }
    if (rc) {
        snprintf(err, errsz, "cannot write %s: %s", path, fb_strerror(rc));
        unlink(tmp);
    }
    return rc;
}

int fb__report_write_html_file(const char *path, fb__report_run *const *runs,
                               size_t n, char *err, size_t errsz)
{
    page pg = {.runs = runs, .n = n};
    return write_page(path, &pg, err, errsz);
}

int fb__fleet_write_html_file(const char *path, const fb__fleet *f, char *err,
                              size_t errsz)
{
    page pg = {.fleet = f};
    return write_page(path, &pg, err, errsz);
}
