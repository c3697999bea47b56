/*
 * out_text.c -- the report for people: summary, time breakdown, attempts,
 * the Table 5 incident table, and each incident with its evidence.  With
 * several run directories: one summary line per run, the aggregate and the
 * suspects.
 *
 * Text from the journal (incident details, node names, evidence quoting
 * the ranks' last lines, statuses) goes to a terminal: the report is
 * written into memory and copied out with every control byte but newline
 * and tab as '?', and the free-text fields are printed on one line each
 * (fb__safe_text), so a journal cannot drive the terminal or fake lines.
 */
#include "report/report.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

static double pct(int64_t part, int64_t whole)
{
    return whole > 0 ? 100.0 * (double)part / (double)whole : 0.0;
}

static void breakdown(FILE *f, const int64_t us[FB__T_N], int64_t wall)
{
    fprintf(f, "\ntime breakdown                 seconds    share\n");
    for (int p = 0; p < FB__T_N; p++)
        fprintf(f, "  %-26s %10.3f  %6.2f%%\n", fb__report_part_label(p),
                fb__report_s(us[p]), pct(us[p], wall));
    fprintf(f, "  %-26s %10.3f  %6.2f%%\n", "total (= wall time)",
            fb__report_s(wall), wall > 0 ? 100.0 : 0.0);
}

static size_t restarts(const fb__report_run *run)
{
    return run->nattempts ? run->nattempts - 1 : 0;
}

static void summary(FILE *f, const fb__report_run *run)
{
    char d[1024], nm[256], st[64], sv[64];
    fprintf(f, "run %s (%s, %s, %d rank%s on %d node%s, journal schema %s)\n",
            fb__safe_text(d, sizeof d, run->dir),
            fb__safe_text(nm, sizeof nm, run->name ? run->name : "?"),
            fb__safe_text(st, sizeof st, run->status ? run->status : "?"), run->nproc,
            run->nproc == 1 ? "" : "s", run->nnodes,
            run->nnodes == 1 ? "" : "s", fb__safe_text(sv, sizeof sv, run->schema_version));
    if (run->runs_in_journal > 1)
        fprintf(f, "  the newest of %d runs in this directory (it was reused, e.g. to "
                   "resume from its checkpoints): the earlier ones are not in this "
                   "report\n", run->runs_in_journal);
    if (!run->finished)
        fprintf(f, "  the run has not ended: accounted up to the journal's "
                   "last record\n");
    fprintf(f, "  wall %.3f s, useful %.3f s, effective training time %.2f%%, "
               "%zu restart%s, %zu incident%s\n",
            fb__report_s(run->wall_us), fb__report_s(run->us[FB__T_USEFUL]),
            pct(run->us[FB__T_USEFUL], run->wall_us), restarts(run),
            restarts(run) == 1 ? "" : "s", run->nincidents,
            run->nincidents == 1 ? "" : "s");
    if (run->reports_lost)
        fprintf(f, "  %llu report%s of the ranks lost (rank %d first): "
                   FB__REPORT_LOST_WHY "\n",
                (unsigned long long)run->reports_lost, run->reports_lost == 1 ? "" : "s",
                run->reports_lost_first);
}

static void attempts(FILE *f, const fb__report_run *run)
{
    fprintf(f, "\nattempts (seconds)\n  %3s %-9s %9s %9s %8s %8s %8s %8s %8s  %s\n",
            "#", "outcome", "wall", "useful", "ckpt", "lost", "detect",
            "restart", "restore", "lost work from");
    for (size_t i = 0; i < run->nattempts; i++) {
        const fb__report_attempt *a = &run->attempts[i];
        char oc[sizeof a->outcome];
        fprintf(f, "  %3d %-9s %9.3f %9.3f %8.3f %8.3f %8.3f %8.3f %8.3f  %s\n",
                a->number, fb__safe_text(oc, sizeof oc, a->outcome[0] ? a->outcome : "-"),
                fb__report_s(a->end_us - a->start_us),
                fb__report_s(a->us[FB__T_USEFUL]), fb__report_s(a->us[FB__T_CKPT]),
                fb__report_s(a->us[FB__T_LOST]), fb__report_s(a->us[FB__T_DETECT]),
                fb__report_s(a->us[FB__T_RESTART]),
                fb__report_s(a->us[FB__T_RESTORE]), a->lost_from);
    }
}

/* Ascending ranks as ranges: "0-3,8,10-11". */
static void rank_ranges(FILE *f, const int *r, size_t n)
{
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j + 1 < n && r[j + 1] == r[j] + 1)
            j++;
        fprintf(f, "%s%d", i ? "," : "", r[i]);
        if (j > i)
            fprintf(f, "-%d", r[j]);
        i = j + 1;
    }
}

static int same_nodes(const fb__report_attempt *a, const fb__report_attempt *b)
{
    if (a->nnodes != b->nnodes)
        return 0;
    for (size_t k = 0; k < a->nnodes; k++) {
        const fb__report_node *x = &a->nodes[k], *y = &b->nodes[k];
        if (strcmp(x->node, y->node) || x->nranks != y->nranks ||
            memcmp(x->ranks, y->ranks, x->nranks * sizeof *x->ranks))
            return 0;
    }
    return 1;
}

/* Ranks per node, each attempt (journal schema 1.1): "node3 (host h3): 2-3".
 * At most 32 nodes a line. */
static void placement(FILE *f, const fb__report_run *run)
{
    int any = 0;
    for (size_t i = 0; i < run->nattempts; i++)
        any |= run->attempts[i].nnodes > 0;
    if (!any)
        return;
    fprintf(f, "\nranks per node\n");
    for (size_t i = 0; i < run->nattempts; i++) {
        const fb__report_attempt *a = &run->attempts[i];
        if (!a->nnodes)
            continue;
        if (i > 0 && same_nodes(a, &run->attempts[i - 1])) {
            fprintf(f, "  attempt %d: as attempt %d\n", a->number,
                    run->attempts[i - 1].number);
            continue;
        }
        fprintf(f, "  attempt %d: %zu node%s:", a->number, a->nnodes,
                a->nnodes == 1 ? "" : "s");
        for (size_t k = 0; k < a->nnodes && k < 32; k++) {
            const fb__report_node *nd = &a->nodes[k];
            char b1[128], b2[128];
            fprintf(f, "%s %s", k ? ";" : "", fb__safe_text(b1, sizeof b1, nd->node));
            if (nd->host && strcmp(nd->host, nd->node))
                fprintf(f, " (host %s)", fb__safe_text(b2, sizeof b2, nd->host));
            fprintf(f, " rank%s ", nd->nranks == 1 ? "" : "s");
            rank_ranges(f, nd->ranks, nd->nranks);
        }
        if (a->nnodes > 32)
            fprintf(f, "; and %zu more", a->nnodes - 32);
        fprintf(f, "\n");
    }
}

static int table(FILE *f, fb__report_run *const *runs, size_t n)
{
    fb__report_row *rows;
    size_t total;
    long nrows = fb__report_table(runs, n, &rows, &total);
    if (nrows < 0)
        return (int)nrows;
    fprintf(f, "\nunexpected interruptions by root cause (Llama 3 Table 5)\n"
               "  %-32s %-22s %6s %7s %9s\n", "component", "category", "count",
            "share", "injected");
    char co[256], ca[256];
    for (long i = 0; i < nrows; i++)
        fprintf(f, "  %-32s %-22s %6zu %6.1f%% %9zu\n",
                fb__safe_text(co, sizeof co, rows[i].component),
                fb__safe_text(ca, sizeof ca, rows[i].category), rows[i].count,
                total ? 100.0 * (double)rows[i].count / (double)total : 0.0,
                rows[i].injected);
    if (nrows == 0)
        fprintf(f, "  (no interruptions)\n");
    free(rows);
    return 0;
}

static void incidents(FILE *f, const fb__report_run *run)
{
    if (!run->nincidents)
        return;
    fprintf(f, "\nincidents\n");
    for (size_t i = 0; i < run->nincidents; i++) {
        const fb__report_incident *in = &run->incidents[i];
        int an = in->attempt >= 0 ? run->attempts[in->attempt].number : -1;
        char buf[1024];
        fprintf(f, "  #%lld attempt %d %s", (long long)in->id, an,
                fb__safe_text(buf, sizeof buf, in->kind));
        if (in->rank >= 0)
            fprintf(f, " rank %d", in->rank);
        if (in->node)
            fprintf(f, " on %s", fb__safe_text(buf, sizeof buf, in->node));
        if (in->host && (!in->node || strcmp(in->host, in->node)))
            fprintf(f, " (host %s)", fb__safe_text(buf, sizeof buf, in->host));
        if (in->step >= 0)
            fprintf(f, " at step %lld", (long long)in->step);
        if (in->detect_ms >= 0)
            fprintf(f, ": detected in %.1f ms", in->detect_ms);
        else
            fprintf(f, ": detection time unknown");
        double lost = in->lost_acc_s >= 0 ? in->lost_acc_s : in->lost_s;
        if (lost >= 0)
            fprintf(f, ", lost work %.3f s", lost);
        fprintf(f, "%s\n", in->ends_attempt ? " (ended its attempt)" : "");
        if (in->detail && *in->detail)
            fprintf(f, "      %s\n", fb__safe_text(buf, sizeof buf, in->detail));
        char cause[512], safe[512];
        fb__diag_cause_text(&in->cls, cause, sizeof cause);
        fprintf(f, "      root cause: %s, decided by %s: %s\n",
                fb__safe_text(safe, sizeof safe, cause), in->cls.decided_by,
                fb__safe_text(buf, sizeof buf, in->cls.evidence));
    }
}

static int suspects(FILE *f, fb__report_run *const *runs, size_t n)
{
    fb__report_suspect *s;
    long ns = fb__report_suspects(runs, n, &s);
    if (ns < 0)
        return (int)ns;
    fprintf(f, "\nsuspects (failed repeatedly%s)\n",
            n > 1 ? " across runs" : " in this run");
    char w[sizeof s->what];
    for (long i = 0; i < ns; i++)
        fprintf(f, "  %-30s %zu failure%s in %zu run%s\n", fb__safe_text(w, sizeof w, s[i].what),
                s[i].failures, s[i].failures == 1 ? "" : "s", s[i].runs,
                s[i].runs == 1 ? "" : "s");
    if (ns == 0)
        fprintf(f, "  (none)\n");
    free(s);
    return 0;
}

/* The agent's part: correlation with throughput, and its events. */
static void agent_part(FILE *f, const fb__report_run *run)
{
    if (run->nenv) {
        fb__report_envcorr ec;
        fb__report_env_corr(run, &ec);
        char rt[64], rp[64];
        fb__report_corr_phrase(ec.r_temp, ec.n_temp, "", "", rt, sizeof rt);
        fb__report_corr_phrase(ec.r_power, ec.n_power, "", "", rp, sizeof rp);
        fprintf(f, "\nenvironment: correlation with throughput (Pearson r over "
                   "%d-bucket means): temperature %s, power %s\n",
                FB__REPORT_ENV_BUCKETS, rt, rp);
    } else if (run->agent_note[0]) {
        char note[sizeof run->agent_note];
        fprintf(f, "\nenvironment: %s\n", fb__safe_text(note, sizeof note, run->agent_note));
    }
    if (!run->events_total)
        return;
    fprintf(f, "\nagent events (%zu", run->nevents);
    if (run->events_total > run->nevents)
        fprintf(f, " of %zu", run->events_total);
    fprintf(f, ")\n  %10s  %-22s %-10s %-5s %s\n", "at s", "kind", "subject",
            "sev", "detail");
    for (size_t i = 0; i < run->nevents; i++) {
        const fb__report_agent_event *e = &run->events[i];
        char buf[600], k[sizeof e->kind], sj[sizeof e->subject], sv[sizeof e->severity];
        fprintf(f, "  %10.3f  %-22s %-10s %-5s %s\n", e->time - run->started_at,
                fb__safe_text(k, sizeof k, e->kind), fb__safe_text(sj, sizeof sj, e->subject),
                fb__safe_text(sv, sizeof sv, e->severity),
                fb__safe_text(buf, sizeof buf, e->detail));
    }
}

static int write_text(FILE *f, fb__report_run *const *runs, size_t n)
{
    int rc = 0;
    if (n == 1) {
        const fb__report_run *run = runs[0];
        summary(f, run);
        breakdown(f, run->us, run->wall_us);
        attempts(f, run);
        placement(f, run);
        if ((rc = table(f, runs, 1)))
            return rc;
        incidents(f, run);
        if ((rc = suspects(f, runs, 1)))
            return rc;
        agent_part(f, run);
        fb__report_lateness_text(f, run);
        return ferror(f) ? -EIO : 0;
    }
    int64_t us[FB__T_N] = {0}, wall = 0;
    size_t ninc = 0;
    fprintf(f, "%zu runs\n  %-40s %10s %8s %8s %9s\n", n, "run", "wall s",
            "ETTR", "restarts", "incidents");
    for (size_t r = 0; r < n; r++) {
        const fb__report_run *run = runs[r];
        char d[1024];
        fprintf(f, "  %-40s %10.3f %7.2f%% %8zu %9zu\n", fb__safe_text(d, sizeof d, run->dir),
                fb__report_s(run->wall_us),
                pct(run->us[FB__T_USEFUL], run->wall_us), restarts(run),
                run->nincidents);
        for (int p = 0; p < FB__T_N; p++)
            us[p] += run->us[p];
        wall += run->wall_us;
        ninc += run->nincidents;
    }
    fprintf(f, "  %-40s %10.3f %7.2f%% %8s %9zu\n", "all runs",
            fb__report_s(wall), pct(us[FB__T_USEFUL], wall), "", ninc);
    breakdown(f, us, wall);
    if ((rc = table(f, runs, n)) || (rc = suspects(f, runs, n)))
        return rc;
    for (size_t r = 0; r < n; r++) {
        char d[1024];
        fprintf(f, "\n---- %s\n", fb__safe_text(d, sizeof d, runs[r]->dir));
        summary(f, runs[r]);
        incidents(f, runs[r]);
        agent_part(f, runs[r]);
        fb__report_lateness_text(f, runs[r]);
    }
    return ferror(f) ? -EIO : 0;
}

int fb__report_write_text(FILE *f, fb__report_run *const *runs, size_t n)
{
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    if (!m)
        return -ENOMEM;
    int rc = write_text(m, runs, n);
    if (fclose(m) && !rc)
        rc = -ENOMEM;
    for (size_t i = 0; !rc && i < len; i++) {
        unsigned char c = (unsigned char)text[i];
        if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f)
            text[i] = '?';
    }
    if (!rc && len && fwrite(text, 1, len, f) != len)
        rc = -EIO;
    free(text);
    if (!rc && ferror(f))
        rc = -EIO;
    return rc;
}
