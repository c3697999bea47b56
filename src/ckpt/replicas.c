/*
 * replicas.c -- `firebreak ckpt verify --replicas` (docs/sdc.md): compare
 * the recorded hashes of whole (unsharded) tensors across the ranks'
 * shards of each checkpoint.  Data-parallel replicas must be identical; a
 * rank whose tensor differs from the majority carries a corrupted replica
 * even when its shard verifies against its own hashes (the corruption
 * happened in memory, before the save).
 *
 * Which whole tensors are replicas is not recorded in a shard, so: a
 * tensor on which no two ranks agree is per-rank state (a random stream,
 * a data cursor) and is listed, not judged; --per-rank GLOB leaves out
 * names outright.  Only headers are read: cheap on any size.
 */
#include <errno.h>
#include <fnmatch.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/hash.h"
#include "ckpt/safetensors.h"
#include "ckpt/store.h"
#include "ckpt/tool.h"
#include "common/jsonw.h"
#include "common/util.h"
#include "firebreak/firebreak.h"

static int excluded(const char *name, char *const *per_rank, int n)
{
    for (int i = 0; i < n; i++)
        if (fnmatch(per_rank[i], name, 0) == 0)
            return 1;
    return 0;
}

/* A whole tensor: its global shape (when recorded) is its own shape, at
 * offset 0 in every dimension. */
static int is_whole(const fb__st_header *h, const fb__st_tensor *t)
{
    char key[600], own[FB__ST_MAX_DIMS * 24 + 1] = "";
    if (fb__fmt(key, sizeof key, "firebreak.global_shape.%s", t->name))
        return 0;
    const char *gs = fb__st_meta_get(h, key);
    if (!gs)
        return 1;
    size_t len = 0;
    for (int d = 0; d < t->ndim && d < FB__ST_MAX_DIMS; d++)
        len += (size_t)snprintf(own + len, sizeof own - len, "%s%lld", d ? "," : "",
                                (long long)t->shape[d]);
    if (strcmp(gs, own))
        return 0;
    if (fb__fmt(key, sizeof key, "firebreak.global_offset.%s", t->name))
        return 0;
    const char *go = fb__st_meta_get(h, key);
    return !go || strspn(go, "0,") == strlen(go);
}

static int recorded_hash(const fb__st_header *h, const char *name, uint64_t *out)
{
    char key[600];
    const char *v;
    if (fb__fmt(key, sizeof key, "firebreak.hash.%s", name) ||
        !(v = fb__st_meta_get(h, key)))
        return -1;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 16);
    if (errno || *end || end == v)
        return -1;
    *out = x;
    return 0;
}

typedef struct step_check {
    fb__jsonw *w;
    FILE *out;
    int json;
    int failed, compared, per_rank_seen;
    int not_read; /* shards of the steps checked missing or unreadable */
} step_check;

static void say_fail(step_check *c, uint64_t step, int rank, const char *tensor,
                     const char *why)
{
    c->failed++;
    if (!c->json)
        fprintf(c->out, "FAIL step %llu rank %d tensor %s: %s\n",
                (unsigned long long)step, rank, tensor, why);
    fb__jsonw_obj_begin(c->w);
    fb__jsonw_kuint(c->w, "step", step);
    fb__jsonw_kint(c->w, "rank", rank);
    fb__jsonw_kstr(c->w, "tensor", tensor);
    fb__jsonw_kstr(c->w, "error", why);
    fb__jsonw_obj_end(c->w);
}

/* Compare one checkpoint's shards (ranks 0..world-1 that exist). */
static void check_step(step_check *c, const char *dir, uint64_t step, int world,
                       char *const *per_rank, int nper)
{
    fb__st_header **h = calloc((size_t)world, sizeof *h);
    uint64_t *hv = calloc((size_t)world, sizeof *hv);
    int *has = calloc((size_t)world, sizeof *has);
    if (!h || !hv || !has)
        goto out;
    int first = -1;
    for (int r = 0; r < world; r++) {
        char path[PATH_MAX], err[256];
        int fd;
        if (fb__ckpt_shard_path(path, sizeof path, dir, step, r) ||
            fb__st_open(path, &fd, &h[r], err, sizeof err)) {
            c->not_read++; /* plain verify reports missing or malformed ones */
            continue;
        }
        close(fd);
        if (first < 0)
            first = r;
    }
    if (first < 0)
        goto out;
    const char *alg = fb__st_meta_get(h[first], "firebreak.hash");
    for (size_t t = 0; t < h[first]->ntensors; t++) {
        const char *name = h[first]->tensors[t].name;
        if (!is_whole(h[first], &h[first]->tensors[t]) || excluded(name, per_rank, nper))
            continue;
        int n = 0;
        for (int r = 0; r < world; r++) {
            has[r] = 0;
            const char *a;
            const fb__st_tensor *tr = h[r] ? fb__st_find(h[r], name) : NULL;
            if (!tr || !is_whole(h[r], tr) ||
                !(a = fb__st_meta_get(h[r], "firebreak.hash")) || !alg ||
                strcmp(a, alg) || recorded_hash(h[r], name, &hv[r]))
                continue;
            has[r] = 1;
            n++;
        }
        if (n < 2)
            continue;
        /* The majority hash and how many ranks hold it; how many distinct. */
        uint64_t best = 0;
        int best_n = 0, distinct = 0;
        for (int r = 0; r < world; r++) {
            if (!has[r])
                continue;
            int same = 0, seen_before = 0;
            for (int q = 0; q < world; q++)
                if (has[q] && hv[q] == hv[r]) {
                    same++;
                    seen_before |= q < r;
                }
            distinct += !seen_before;
            if (same > best_n)
                best_n = same, best = hv[r];
        }
        c->compared++;
        if (best_n == n)
            continue;
        if (distinct == n) { /* no two ranks agree: per-rank state */
            c->per_rank_seen++;
            if (!c->json)
                fprintf(c->out, "step %llu: %s differs on every rank: per-rank "
                        "state, not compared\n", (unsigned long long)step, name);
            continue;
        }
        char why[256], hb[17], hm[17];
        fb__hash_hex(best, hm);
        for (int r = 0; r < world; r++) {
            if (!has[r] || (best_n * 2 > n && hv[r] == best))
                continue;
            fb__hash_hex(hv[r], hb);
            if (best_n * 2 > n)
                snprintf(why, sizeof why, "replica differs from the majority (%d "
                         "of %d ranks): %s, not %s", best_n, n, hb, hm);
            else
                snprintf(why, sizeof why, "replicas disagree with no majority "
                         "(%d distinct hashes over %d ranks): %s", distinct, n, hb);
            say_fail(c, step, r, name, why);
        }
    }
out:
    if (h)
        for (int r = 0; r < world; r++)
            fb__st_free(h[r]);
    free(h);
    free(hv);
    free(has);
}

int fb__ckpt_verify_replicas(const char *dir, int has_step, uint64_t step,
                             char *const *per_rank, int nper, int json, FILE *out)
{
    fb__ckpt_entry *v;
    size_t n;
    int rc = fb__ckpt_scan(dir, 0, 0, &v, &n);
    if (rc) {
        fprintf(stderr, "firebreak ckpt verify --replicas: %s: %s\n", dir,
                fb_strerror(rc));
        return 2;
    }
    fb__jsonw w;
    fb__jsonw_init(&w);
    fb__jsonw_obj_begin(&w);
    fb__jsonw_kstr(&w, "dir", dir);
    fb__jsonw_key(&w, "replica_failures");
    fb__jsonw_arr_begin(&w);
    step_check c = {.w = &w, .out = out, .json = json};
    int found = 0;
    for (size_t i = 0; i < n; i++) {
        if ((has_step && v[i].step != step) || v[i].world_size < 2)
            continue;
        found = 1;
        int before = c.failed, compared = c.compared, unread = c.not_read;
        check_step(&c, dir, v[i].step, v[i].world_size, per_rank, nper);
        compared = c.compared - compared;
        unread = c.not_read - unread;
        if (json)
            continue;
        /* "agree" only for what was compared: a step whose shards could
         * not be read, or with nothing replicated, says so instead. */
        if (c.failed > before)
            fprintf(out, "step %llu: replicas DISAGREE", (unsigned long long)v[i].step);
        else if (compared)
            fprintf(out, "step %llu: replicas agree", (unsigned long long)v[i].step);
        else
            fprintf(out, "step %llu: no replicated tensor compared",
                    (unsigned long long)v[i].step);
        fprintf(out, " (%d tensor(s) compared", compared);
        if (unread)
            fprintf(out, "; %d of %d shards missing or unreadable, not compared", unread,
                    v[i].world_size);
        fprintf(out, ")\n");
    }
    fb__jsonw_arr_end(&w);
    fb__jsonw_kint(&w, "tensors_compared", c.compared);
    fb__jsonw_kint(&w, "per_rank", c.per_rank_seen);
    fb__jsonw_kint(&w, "shards_not_read", c.not_read);
    fb__jsonw_kint(&w, "replica_failed", c.failed);
    fb__jsonw_kbool(&w, "replicas_ok", c.failed == 0);
    fb__jsonw_obj_end(&w);
    if (json)
        fb__jsonw_print(&w, out);
    else if (found)
        fprintf(out, "%d replicated tensor(s) compared across ranks, %d "
                "disagreement(s)\n", c.compared, c.failed);
    else
        fprintf(out, "no checkpoint of 2 or more ranks%s in %s\n",
                has_step ? " at that step" : "", dir);
    fb__jsonw_free(&w);
    free(v);
    return c.failed ? 1 : 0;
}
