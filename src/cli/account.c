/*
 * account.c -- one source of truth for effective training time: after a
 * run, `firebreak run` and `firebreak demo` replace the supervisor's live
 * estimates with the report's exact accounting of the journal
 * (docs/report.md), so every command prints the same numbers.
 */
#include <stdio.h>

#include "cli/cli.h"
#include "common/jsonw.h"
#include "supervisor/supervisor.h"
#include "report/report.h"

void fb__cli_cause_json(fb__jsonw *w, const fb__sup_incident *in)
{
    fb__jsonw_kstr(w, "category", in->category[0] ? in->category : NULL);
    fb__jsonw_kstr(w, "component", in->component[0] ? in->component : NULL);
    fb__jsonw_kstr(w, "decided_by", in->decided_by[0] ? in->decided_by : NULL);
    fb__jsonw_kstr(w, "injected", in->injected[0] ? in->injected : NULL);
}

void fb__cli_account(fb__sup_result *res)
{
    fb__report_run *run = NULL;
    char err[512];
    if (fb__report_load(res->run_dir, &run, err, sizeof err)) {
        fprintf(stderr, "firebreak: accounting: %s\n", err);
        return;
    }
    if (run->wall_us > 0) {
        res->wall_s = fb__report_s(run->wall_us);
        res->useful_s = fb__report_s(run->us[FB__T_USEFUL]);
        res->ettr = res->useful_s / res->wall_s;
    }
    /* The incidents that ended attempts, in order, are the result's. */
    int k = 0;
    for (size_t i = 0; i < run->nincidents && k < res->nincidents; i++) {
        const fb__report_incident *in = &run->incidents[i];
        if (!in->ends_attempt)
            continue;
        fb__sup_incident *out = &res->incidents[k++];
        if (in->lost_acc_s >= 0)
            out->lost_s = in->lost_acc_s;
        snprintf(out->category, sizeof out->category, "%s",
                 in->cls.category ? in->cls.category : "");
        snprintf(out->component, sizeof out->component, "%s",
                 in->cls.component ? in->cls.component : "");
        snprintf(out->decided_by, sizeof out->decided_by, "%s",
                 in->cls.decided_by ? in->cls.decided_by : "");
        snprintf(out->injected, sizeof out->injected, "%s", in->injected ? in->injected : "");
    }
    fb__report_free(run);
}
