/*
 * report_out.c -- libFuzzer target for the report's outputs (text, JSON,
 * HTML: src/report/out_*.c) over a journal's text: a run's name, status
 * and reason, attempts' outcomes, incidents' fields, agent events and
 * notes, drains.  That text comes from ranks (details, last lines), other
 * programs (verdicts) and whoever can write the journal (a group-shared
 * run directory), so any bytes: the text report has no control byte but
 * newline and tab (it cannot drive the terminal) and no line of the
 * input's making, the JSON is one line that parses, and the HTML holds no
 * markup but the page's own.  "Of the input's making": the output counts
 * other numbers of newlines (or '<', '>', '"') than the output of the
 * same input with each such byte written otherwise (field()).
 * The same for the fleet report (`report --fleet`) over that run, its
 * node flagged so that its evidence is written.
 * Input: NUL-separated fields, in the order of the enum below (missing
 * ones are ""); the numbers are fixed (two attempts, the first failed).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"
#include "common/jsonw.h"
#include "common/util.h"
#include "report/report.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum {
    F_NAME, F_STATUS, F_REASON, F_HOSTNAME, F_DIR, F_OUTCOME0, F_OUTCOME1, F_NOTE,
    F_EV_KIND, F_EV_SUBJECT, F_EV_SEVERITY, F_EV_DETAIL, F_DRAIN_NODE, F_DRAIN_REASON,
    F_INC, /* then per incident: */
    I_KIND = 0, I_NODE, I_HOST, I_PHASE, I_INJECTED, I_DETAIL, I_LAST, I_FR, I_HEALTH,
    I_CATEGORY, I_COMPONENT, I_EVIDENCE, I_N
};
#define NINC 2
#define NFIELDS (F_INC + NINC * I_N)

/* Field i, or neutral: its '<', '>', '"' and newlines written "#1" .. "#4"
 * and '#' "##", so that distinct names stay distinct and none of those
 * bytes is left (in the JSON verdicts, which must still parse, the quotes
 * and newlines are kept). */
static char *field(const char *const *f, int i, int neutral)
{
    const char *in = f[i];
    char *s = malloc(2 * strlen(in) + 1), *o = s;
    if (!s)
        __builtin_trap();
    int json = i >= F_INC && ((i - F_INC) % I_N == I_FR || (i - F_INC) % I_N == I_HEALTH);
    const char *set = json ? "#<>" : "#<>\"\n";
    for (; *in; in++) {
        const char *at = neutral ? strchr(set, *in) : NULL;
        if (at) {
            *o++ = '#';
            *o++ = at == set ? '#' : (char)('0' + (at - set));
        } else {
            *o++ = *in;
        }
    }
    *o = '\0';
    return s;
}

static void copy_to(char *dst, size_t size, const char *const *f, int i, int neutral)
{
    char *s = field(f, i, neutral);
    snprintf(dst, size, "%s", s);
    free(s);
}

static fb__report_run *build(const char *const *f, int neutral, const fb__report_class *cls)
{
    fb__report_run *run = calloc(1, sizeof *run);
    if (!run)
        __builtin_trap();
    run->dir = field(f, F_DIR, neutral);
    run->name = field(f, F_NAME, neutral);
    run->status = field(f, F_STATUS, neutral);
    run->reason = field(f, F_REASON, neutral);
    run->hostname = field(f, F_HOSTNAME, neutral);
    snprintf(run->schema_version, sizeof run->schema_version, "1.1");
    run->nproc = 2;
    run->nnodes = 1;
    run->finished = 1;
    run->started_at = 1000;
    run->ended_at = 1100;
    run->attempts = calloc(2, sizeof *run->attempts);
    run->incidents = calloc(NINC, sizeof *run->incidents);
    run->events = calloc(1, sizeof *run->events);
    run->drains = calloc(1, sizeof *run->drains);
    if (!run->attempts || !run->incidents || !run->events || !run->drains)
        __builtin_trap();
    run->nattempts = 2;
    for (int a = 0; a < 2; a++) {
        fb__report_attempt *at = &run->attempts[a];
        at->id = a + 1;
        at->number = a;
        at->started_at = 1000 + 50 * a;
        at->launched_at = at->started_at + 1;
        at->ready_at = at->started_at + 2;
        at->ended_at = at->started_at + 50;
        at->restore_s = a ? 0.5 : NAN;
        at->restored_step = a ? 10 : -1;
        at->start_step = a ? 10 : 0;
        at->end_step = a ? 40 : 20;
        copy_to(at->outcome, sizeof at->outcome, f, a ? F_OUTCOME1 : F_OUTCOME0, neutral);
        at->failure = -1;
        at->lost_from = "none";
    }
    run->nincidents = NINC;
    for (int i = 0; i < NINC; i++) {
        fb__report_incident *in = &run->incidents[i];
        int b = F_INC + i * I_N;
        in->id = i + 1;
        in->attempt_id = 1;
        in->attempt = 0;
        in->kind = field(f, b + I_KIND, neutral);
        in->node = field(f, b + I_NODE, neutral);
        in->host = field(f, b + I_HOST, neutral);
        in->phase = field(f, b + I_PHASE, neutral);
        in->injected = field(f, b + I_INJECTED, neutral);
        in->detail = field(f, b + I_DETAIL, neutral);
        in->last_lines = field(f, b + I_LAST, neutral);
        in->fr_verdict = field(f, b + I_FR, neutral);
        in->health = field(f, b + I_HEALTH, neutral);
        in->sup_category = field(f, b + I_CATEGORY, neutral);
        in->sup_component = field(f, b + I_COMPONENT, neutral);
        in->sup_evidence = field(f, b + I_EVIDENCE, neutral);
        in->rank = i;
        in->signal = i ? 0 : 9;
        in->has_exit_code = i;
        in->exit_code = i;
        in->step = 15;
        in->occurred_at = 1040 + i;
        in->detected_at = 1041 + i;
        in->detect_ms = 1000;
        in->lost_s = -1;
        in->lost_acc_s = -1;
        in->cls = cls[i];
        if (neutral) {
            const char *ev[1] = {cls[i].evidence};
            copy_to(in->cls.evidence, sizeof in->cls.evidence, ev, 0, 1);
        }
    }
    fb__report_agent_event *e = &run->events[0];
    e->time = 1045;
    copy_to(e->kind, sizeof e->kind, f, F_EV_KIND, neutral);
    copy_to(e->subject, sizeof e->subject, f, F_EV_SUBJECT, neutral);
    copy_to(e->severity, sizeof e->severity, f, F_EV_SEVERITY, neutral);
    e->detail = field(f, F_EV_DETAIL, neutral);
    run->nevents = run->events_total = 1;
    copy_to(run->agent_note, sizeof run->agent_note, f, F_NOTE, neutral);
    fb__report_drain *d = &run->drains[0];
    d->time = 1042;
    d->code = 0;
    copy_to(d->node, sizeof d->node, f, F_DRAIN_NODE, neutral);
    copy_to(d->reason, sizeof d->reason, f, F_DRAIN_REASON, neutral);
    run->ndrains = run->drains_total = 1;
    char err[256];
    if (fb__report_account(run, err, sizeof err))
        __builtin_trap(); /* the partition must add up whatever the text */
    return run;
}

/* How many bytes of s are in set. */
static size_t count_of(const char *s, const char *set)
{
    size_t n = 0;
    for (; *s; s++)
        n += strchr(set, *s) != NULL;
    return n;
}

/* What a writer wrote, NUL-terminated (malloc'd). */
static char *output_of(fb__report_run *run, int html)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        __builtin_trap();
    fb__report_run *runs[1] = {run};
    if (html)
        (void)fb__report_write_html(f, runs, 1);
    else
        (void)fb__report_write_text(f, runs, 1);
    fclose(f);
    return buf;
}

static char *html_of(fb__report_run *run)
{
    return output_of(run, 1);
}

static char *text_of(fb__report_run *run)
{
    return output_of(run, 0);
}

/* The fleet report over run (`report --fleet`): text, then HTML. */
static void fleet_of(fb__report_run *run, char **text, char **html)
{
    fb__fleet fl;
    memset(&fl, 0, sizeof fl);
    fb__fleet_thresholds_init(&fl.t);
    fl.t.hardware = fl.t.health = 1; /* flag the node: its evidence is written */
    if (fb__fleet_add_run(&fl, run))
        __builtin_trap();
    fb__fleet_finish(&fl);
    for (int h = 0; h < 2; h++) {
        size_t len = 0;
        char **buf = h ? html : text;
        *buf = NULL;
        FILE *f = open_memstream(buf, &len);
        if (!f)
            __builtin_trap();
        (void)(h ? fb__fleet_write_html(f, &fl) : fb__fleet_write_text(f, &fl));
        fclose(f);
    }
    fb__fleet_free(&fl);
}

/* Text for a terminal: no control byte but newline and tab, and as many
 * lines as plain (the output of the neutral input). */
static void check_text_out(const char *txt, const char *plain)
{
    for (const char *q = txt; *q; q++)
        if (((unsigned char)*q < 0x20 && *q != '\n' && *q != '\t') || *q == 0x7f)
            __builtin_trap();
    if (count_of(txt, "\n") != count_of(plain, "\n"))
        __builtin_trap();
}

/* HTML: no markup from the input (as many '<', '>', '"' as plain), no
 * control byte, valid UTF-8 with no C1 control. */
static void check_html_out(const char *html, const char *plain)
{
    if (count_of(html, "<>\"") != count_of(plain, "<>\""))
        __builtin_trap();
    size_t n = strlen(html);
    for (size_t i = 0; i < n;) {
        const unsigned char *u = (const unsigned char *)html + i;
        size_t l = fb__utf8_len(u, n - i);
        if (l == 0 || (l == 1 && ((u[0] < 0x20 && u[0] != '\n' && u[0] != '\t') ||
                                  u[0] == 0x7f)) ||
            (l == 2 && u[0] == 0xC2 && u[1] < 0xA0))
            __builtin_trap();
        i += l;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 1 << 16)
        return 0;
    char *text = malloc(size + 1);
    if (!text)
        __builtin_trap();
    memcpy(text, data, size);
    text[size] = '\0';
    const char *f[NFIELDS];
    const char *p = text, *end = text + size;
    for (int i = 0; i < NFIELDS; i++) {
        f[i] = p < end ? p : "";
        if (p < end)
            p += strlen(p) + 1;
    }
    fb__report_class cls[NINC];
    for (int i = 0; i < NINC; i++) {
        int b = F_INC + i * I_N;
        fb__report_evidence ev = {
            .kind = f[b + I_KIND], .injected = f[b + I_INJECTED], .detail = f[b + I_DETAIL],
            .last_lines = f[b + I_LAST], .fr_verdict = f[b + I_FR], .health = f[b + I_HEALTH],
            .category = f[b + I_CATEGORY][0] ? f[b + I_CATEGORY] : NULL,
            .component = f[b + I_COMPONENT][0] ? f[b + I_COMPONENT] : NULL,
            .evidence = f[b + I_EVIDENCE][0] ? f[b + I_EVIDENCE] : NULL,
            .signal = i ? 0 : 9, .has_exit_code = i, .exit_code = i,
        };
        fb__report_classify(&ev, &cls[i]);
    }
    fb__report_run *run = build(f, 0, cls);
    fb__report_run *runs[1] = {run};

    fb__report_run *plain = build(f, 1, cls);

    /* Text: nothing that drives a terminal, no line of the input's. */
    char *txt = text_of(run), *txt_plain = text_of(plain);
    check_text_out(txt, txt_plain);
    free(txt);
    free(txt_plain);

    /* JSON: one line that parses. */
    fb__jsonw w;
    fb__jsonw_init(&w);
    if (fb__report_write_json(&w, runs, 1) == 0 && !w.oom) {
        fb__json_limits lim = {0};
        fb__json_doc *doc = NULL;
        if (memchr(w.buf, '\n', w.len) || fb__json_parse(w.buf, w.len, &lim, &doc, NULL, 0))
            __builtin_trap();
        fb__json_free(doc);
    }
    fb__jsonw_free(&w);

    /* HTML: no markup from the input. */
    char *html = html_of(run), *html_plain = html_of(plain);
    check_html_out(html, html_plain);
    free(html);
    free(html_plain);

    /* The fleet report over the same run. */
    char *ftxt, *fhtml, *ftxt_plain, *fhtml_plain;
    fleet_of(run, &ftxt, &fhtml);
    fleet_of(plain, &ftxt_plain, &fhtml_plain);
    check_text_out(ftxt, ftxt_plain);
    check_html_out(fhtml, fhtml_plain);
    free(ftxt);
    free(fhtml);
    free(ftxt_plain);
    free(fhtml_plain);
    fb__report_free(plain);
    fb__report_free(run);
    free(text);
    return 0;
}
