/*
 * pyhooks.c -- what the supervisor does with the Python hooks of
 * unmodified PyTorch scripts (docs/pytorch.md, "Unmodified scripts"):
 * finds its own copy of the firebreak package for the ranks' PYTHONPATH,
 * asks the ranks for their dumps on a hang, and words a hang that no
 * evidence pins on one rank.
 *
 * Dump requests: a rank whose hooks listen has stored FB__DUMP_LISTENING
 * in its segment's dump_done.  The supervisor writes a request number into
 * dump_request (fb__seg_request_dump: pwrite on the file, never a store
 * through a mapping) and waits, at most DUMP_WAIT_MS, until every asked
 * rank stored that number into dump_done.  The rank's hook thread does the
 * work while its main thread may be blocked in a C collective (which
 * released the GIL): PyTorch's flight-recorder dump, where the main
 * thread is (a NOTE_WHERE report).  A rank holding the GIL forever never
 * answers: that is what the bound is for.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"
#include "supervisor/sup.h"

#define DUMP_WAIT_MS 3000
#define FB__DUMP_LISTENING UINT64_MAX

void fb__sup_request_dumps(fb__sup *s)
{
    if (s->o->no_python_hooks)
        return;
    uint64_t req = (uint64_t)s->attempt + 1;
    int asked = 0, answered = 0;
    char *wait = calloc((size_t)s->world, 1);
    if (!wait)
        return;
    for (int r = 0; r < s->world; r++) {
        fb__sup_rank *rk = &s->ranks[r];
        if (!rk->seg || rk->seg_corrupt || rk->ended)
            continue;
        fb__seg_header *h = fb__seg_hdr(rk->seg);
        if (atomic_load_explicit(&h->dump_done, memory_order_acquire) !=
            FB__DUMP_LISTENING)
            continue;
        char name[FB__SEG_NAME_MAX];
        if (fb__seg_name(name, sizeof name, s->job_id, s->attempt, r))
            continue;
        int rc = fb__seg_request_dump(rk->seg, name, req);
        if (rc) {
            fb__sup_log(s, "cannot ask rank %d for its dumps: %s", r, fb_strerror(rc));
            continue;
        }
        wait[r] = 1;
        asked++;
    }
    uint64_t t0 = fb__now_ns();
    while (answered < asked && fb__now_ns() - t0 < DUMP_WAIT_MS * 1000000ull) {
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
        for (int r = 0; r < s->world; r++) {
            const fb__sup_rank *rk = &s->ranks[r];
            if (!wait[r] || !rk->seg || rk->seg_corrupt)
                continue;
            if (atomic_load_explicit(&fb__seg_hdr(rk->seg)->dump_done,
                                     memory_order_acquire) == req) {
                wait[r] = 0;
                answered++;
            }
        }
    }
    free(wait);
    /* The answers' reports (where each main thread is), before the
     * snapshot; the failure is set, so the pass declares nothing. */
    fb__sup_watch(s, fb__now_ns());
    if (asked)
        fb__sup_log(s, "asked %d rank%s for their flight-recorder dumps: %d answered "
                    "in %.0f ms", asked, asked == 1 ? "" : "s", answered,
                    (double)(fb__now_ns() - t0) / 1e6);
}

void fb__sup_hang_undecided(fb__sup *s, const char *evidence)
{
    fb__sup_failure *f = &s->fail;
    int r = f->rank;
    char d[sizeof f->detail], at[256] = "";
    double silent = 0, limit = 0;
    if (r >= 0 && r < s->world && s->hang_facts) {
        const fb__sup_hang_rank *k = &s->hang_facts[r];
        silent = f->detected_ns > k->last_beat_ns
                     ? (double)(f->detected_ns - k->last_beat_ns) / 1e9 : 0;
        limit = (double)k->limit_ns / 1e9;
    }
    /* Where every rank was, when they said. */
    for (int k = 0, n = 0; k < s->world && strlen(at) + 40 < sizeof at; k++) {
        if (!s->ranks[k].where[0])
            continue;
        size_t l = strlen(at);
        snprintf(at + l, sizeof at - l, "%s%d at %s", n++ ? ", " : "; ranks: ", k,
                 s->ranks[k].where);
    }
    char last[32];
    snprintf(d, sizeof d, "no rank blamed: no progress for %.1f s in phase %s "
             "(limit %.1f s), %s; the flight recorder could not tell "
             "which rank stopped first (%s); rank %d was only the one silent the "
             "longest%s", silent, f->phase, limit,
             fb__sup_step_words(last, sizeof last, f->step, 1), evidence, r, at);
    snprintf(f->detail, sizeof f->detail, "%s", d);
    f->rank = -1;
    f->injected[0] = '\0';
}

/* dir holds firebreak/__init__.py and firebreak/_boot/sitecustomize.py */
static int has_package(const char *dir)
{
    char p[PATH_MAX];
    return !fb__fmt(p, sizeof p, "%s/firebreak/_boot/sitecustomize.py", dir) &&
           access(p, R_OK) == 0 &&
           !fb__fmt(p, sizeof p, "%s/firebreak/__init__.py", dir) && access(p, R_OK) == 0;
}

int fb__sup_python_dir(char *buf, size_t size)
{
    const char *env = getenv("FIREBREAK_PYTHON_DIR");
    if (env && env[0])
        return has_package(env) && !fb__fmt(buf, size, "%s", env) ? 0 : -ENOENT;
    char exe[PATH_MAX];
    if (fb__self_dir(exe, sizeof exe))
        return -ENOENT;
    /* the build tree (build/firebreak, build/python), then an install
     * (<prefix>/bin/firebreak, <prefix>/lib/firebreak/python) */
    static const char *const rel[] = {"python", "../lib/firebreak/python"};
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
        char d[PATH_MAX];
        if (fb__fmt(d, sizeof d, "%s/%s", exe, rel[i]) == 0 && has_package(d))
            return fb__fmt(buf, size, "%s", d);
    }
    return -ENOENT;
}
