/*
 * aggregate.c -- across incidents and runs: the Table 5 rows (component,
 * category, count) and suspects (nodes or ranks whose failures ended
 * attempts repeatedly); and fb__report_html, the one call `firebreak demo`
 * needs.
 */
#include "report/report.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int fb__report_is_interruption(const fb__report_incident *in)
{
    return in->ends_attempt && strcmp(in->cls.category, "Planned") != 0;
}

static int row_cmp(const void *a, const void *b)
{
    const fb__report_row *x = a, *y = b;
    if (x->count != y->count)
        return x->count < y->count ? 1 : -1;
    int c = strcmp(x->category, y->category);
    return c ? c : strcmp(x->component, y->component);
}

long fb__report_table(fb__report_run *const *runs, size_t n,
                      fb__report_row **rows_out, size_t *total_out)
{
    fb__report_row *rows = NULL;
    size_t nrows = 0, cap = 0;
    for (size_t r = 0; r < n; r++)
        for (size_t i = 0; i < runs[r]->nincidents; i++) {
            const fb__report_class *c = &runs[r]->incidents[i].cls;
            if (!fb__report_is_interruption(&runs[r]->incidents[i]))
                continue;
            size_t k = 0;
            while (k < nrows && (strcmp(rows[k].component, c->component) ||
                                 strcmp(rows[k].category, c->category)))
                k++;
            if (k == nrows) {
                if (nrows == cap) {
                    cap = cap ? cap * 2 : 16;
                    fb__report_row *p = realloc(rows, cap * sizeof *p);
                    if (!p) {
                        free(rows);
                        return -ENOMEM;
                    }
                    rows = p;
                }
                rows[nrows++] = (fb__report_row){c->component, c->category, 0, 0};
            }
            rows[k].count++;
            rows[k].injected += (size_t)(c->injected != 0);
        }
    if (nrows)
        qsort(rows, nrows, sizeof *rows, row_cmp);
    if (total_out) {
        *total_out = 0;
        for (size_t k = 0; k < nrows; k++)
            *total_out += rows[k].count;
    }
    *rows_out = rows;
    return (long)nrows;
}

typedef struct tally {
    char what[160];
    size_t failures, runs;
    size_t last_run;
} tally;

static int bump(tally **t, size_t *n, size_t *cap, const char *what, size_t run)
{
    size_t k = 0;
    while (k < *n && strcmp((*t)[k].what, what))
        k++;
    if (k == *n) {
        if (*n == *cap) {
            size_t nc = *cap ? *cap * 2 : 16;
            tally *p = realloc(*t, nc * sizeof *p);
            if (!p)
                return -ENOMEM;
            *t = p;
            *cap = nc;
        }
        memset(&(*t)[k], 0, sizeof **t);
        snprintf((*t)[k].what, sizeof (*t)[k].what, "%s", what);
        (*t)[k].last_run = (size_t)-1;
        (*n)++;
    }
    (*t)[k].failures++;
    if ((*t)[k].last_run != run) {
        (*t)[k].last_run = run;
        (*t)[k].runs++;
    }
    return 0;
}

/* Whether the runs saw more than one node (their incidents' and their
 * attempts' placements) and more than one rank: a node or rank that was
 * the only one failed every time there was a failure, which says nothing
 * of it. */
static void see_node(const char *nd, const char **first, int *many)
{
    if (!nd || !*nd)
        return;
    if (!*first)
        *first = nd;
    else if (strcmp(nd, *first))
        *many = 1;
}

static void spread(fb__report_run *const *runs, size_t n, int *nodes, int *ranks)
{
    const char *first = NULL;
    *nodes = *ranks = 0;
    for (size_t r = 0; r < n; r++) {
        const fb__report_run *run = runs[r];
        if (run->nproc > 1)
            *ranks = 1;
        for (size_t i = 0; i < run->nincidents; i++)
            see_node(run->incidents[i].node, &first, nodes);
        for (size_t a = 0; a < run->nattempts; a++)
            for (size_t k = 0; k < run->attempts[a].nnodes; k++)
                see_node(run->attempts[a].nodes[k].node, &first, nodes);
    }
}

long fb__report_suspects(fb__report_run *const *runs, size_t n,
                         fb__report_suspect **out)
{
    tally *t = NULL;
    size_t nt = 0, cap = 0;
    int many_nodes, many_ranks;
    spread(runs, n, &many_nodes, &many_ranks);
    for (size_t r = 0; r < n; r++)
        for (size_t i = 0; i < runs[r]->nincidents; i++) {
            const fb__report_incident *in = &runs[r]->incidents[i];
            /* A fault the operator injected is no evidence against where
             * it fired; the program's own failure (a software bug, a
             * dependency, its GPU memory) none against the node it ran on. */
            if (!fb__report_is_interruption(in) || in->cls.injected)
                continue;
            char what[160];
            int rc = 0;
            if (many_nodes && in->node && *in->node && !in->cls.programs_own) {
                snprintf(what, sizeof what, "node %.140s", in->node);
                rc = bump(&t, &nt, &cap, what, r);
            }
            if (!rc && many_ranks && in->rank >= 0) {
                snprintf(what, sizeof what, "rank %d", in->rank);
                rc = bump(&t, &nt, &cap, what, r);
            }
            if (rc) {
                free(t);
                return -ENOMEM;
            }
        }
    fb__report_suspect *s = calloc(nt ? nt : 1, sizeof *s);
    if (!s) {
        free(t);
        return -ENOMEM;
    }
    size_t ns = 0;
    for (size_t k = 0; k < nt; k++) {
        int repeated = n > 1 ? t[k].runs >= 2 : t[k].failures >= 2;
        if (!repeated)
            continue;
        memcpy(s[ns].what, t[k].what, sizeof s[ns].what);
        s[ns].failures = t[k].failures;
        s[ns].runs = t[k].runs;
        ns++;
    }
    free(t);
    *out = s;
    return (long)ns;
}

int fb__report_html(const char *run_dir, const char *html_path, char *err,
                    size_t errsz)
{
    fb__report_run *run;
    int rc = fb__report_load(run_dir, &run, err, errsz);
    if (rc)
        return rc;
    fb__report_run *const runs[1] = {run};
    rc = fb__report_write_html_file(html_path, runs, 1, err, errsz);
    fb__report_free(run);
    return rc;
}
