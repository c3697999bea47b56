/*
 * tool.c -- listing, verifying and inspecting checkpoint directories for
 * `firebreak ckpt` and the supervisor (see tool.h).
 */
#include "ckpt/tool.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckpt/engine.h"
#include "ckpt/safetensors.h"
#include "ckpt/shard.h"
#include "ckpt/store.h"
#include "common/jsonw.h"
#include "common/rundir.h"
#include "common/util.h"

static void human_bytes(char *buf, size_t size, uint64_t b)
{
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)b;
    int u = 0;
    while (v >= 1024 && u < 4)
        v /= 1024, u++;
    snprintf(buf, size, u ? "%.1f %s" : "%.0f %s", v, units[u]);
}

static void human_age(char *buf, size_t size, int64_t s)
{
    if (s < 0)
        s = 0;
    if (s < 120)
        snprintf(buf, size, "%llds", (long long)s);
    else if (s < 7200)
        snprintf(buf, size, "%lldm", (long long)(s / 60));
    else if (s < 172800)
        snprintf(buf, size, "%lldh", (long long)(s / 3600));
    else
        snprintf(buf, size, "%lldd", (long long)(s / 86400));
}

/* Has directory PATH a step-* entry? */
static int has_steps(const char *path)
{
    DIR *d = opendir(path);
    if (!d)
        return 0;
    int steps = 0;
    for (struct dirent *e; !steps && (e = readdir(d));)
        steps = !strncmp(e->d_name, "step-", 5);
    closedir(d);
    return steps;
}

const char *fb__ckpt_tool_dir(const char *path, char *buf, size_t size, int *steps)
{
    if ((*steps = has_steps(path)) || !fb__rundir_has(path, FB__RUNDIR_CKPT, 0, buf, size))
        return path;
    *steps = has_steps(buf);
    return buf;
}

int fb__ckpt_ls(const char *dir, int json, FILE *out)
{
    fb__ckpt_entry *v;
    size_t n;
    int rc = fb__ckpt_scan(dir, 0, 1, &v, &n);
    if (rc) {
        fprintf(stderr, "firebreak ckpt ls: %s: %s\n", dir, fb_strerror(rc));
        return 2;
    }
    int64_t now = (int64_t)time(NULL);
    size_t complete = 0;
    for (size_t i = 0; i < n; i++)
        complete += (size_t)v[i].complete;
    if (json) {
        fb__jsonw w;
        fb__jsonw_init(&w);
        fb__jsonw_obj_begin(&w);
        fb__jsonw_kstr(&w, "dir", dir);
        fb__jsonw_key(&w, "checkpoints");
        fb__jsonw_arr_begin(&w);
        for (size_t i = 0; i < n; i++) {
            fb__jsonw_obj_begin(&w);
            fb__jsonw_kuint(&w, "step", v[i].step);
            fb__jsonw_kbool(&w, "complete", v[i].complete);
            fb__jsonw_key(&w, "error");
            if (v[i].error)
                fb__jsonw_str(&w, fb_strerror(v[i].error));
            else
                fb__jsonw_null(&w);
            fb__jsonw_kint(&w, "shards", v[i].shards);
            fb__jsonw_kint(&w, "world_size", v[i].world_size);
            fb__jsonw_kuint(&w, "bytes", v[i].bytes);
            fb__jsonw_kint(&w, "age_s", v[i].mtime_s ? now - v[i].mtime_s : -1);
            fb__jsonw_obj_end(&w);
        }
        fb__jsonw_arr_end(&w);
        fb__jsonw_kuint(&w, "complete", complete);
        fb__jsonw_obj_end(&w);
        fb__jsonw_print(&w, out);
        fb__jsonw_free(&w);
    } else {
        fprintf(out, "%-12s %-10s %-9s %10s %6s\n", "STEP", "STATE", "SHARDS",
                "SIZE", "AGE");
        for (size_t i = 0; i < n; i++) {
            char sz[32], age[32], sh[32];
            human_bytes(sz, sizeof sz, v[i].bytes);
            if (v[i].mtime_s)
                human_age(age, sizeof age, now - v[i].mtime_s);
            else
                snprintf(age, sizeof age, "-");
            if (v[i].world_size > 0)
                snprintf(sh, sizeof sh, "%d/%d", v[i].shards, v[i].world_size);
            else
                snprintf(sh, sizeof sh, "?");
            fprintf(out, "%-12llu %-10s %-9s %10s %6s%s%s\n",
                    (unsigned long long)v[i].step,
                    v[i].error ? "unreadable"
                    : v[i].complete ? "complete" : "incomplete", sh, sz, age,
                    v[i].error ? " " : "", v[i].error ? fb_strerror(v[i].error) : "");
        }
        fprintf(out, "%zu checkpoint(s), %zu complete, in %s\n", n, complete, dir);
    }
    free(v);
    return 0;
}

/* ---- verification ---- */

typedef struct progress {
    int on;
    uint64_t total;
    uint64_t done; /* atomic */
    uint64_t last_ns;
} progress;

static void progress_cb(void *arg, uint64_t bytes)
{
    progress *p = arg;
    uint64_t done = __atomic_add_fetch(&p->done, bytes, __ATOMIC_RELAXED);
    uint64_t now = fb__now_ns();
    if (now - __atomic_load_n(&p->last_ns, __ATOMIC_RELAXED) < 200000000ull)
        return;
    __atomic_store_n(&p->last_ns, now, __ATOMIC_RELAXED);
    char a[32], b[32];
    human_bytes(a, sizeof a, done);
    human_bytes(b, sizeof b, p->total);
    fprintf(stderr, "\rverifying: %s of %s (%.0f%%)   ", a, b,
            p->total ? 100.0 * (double)done / (double)p->total : 100.0);
}

/* Verify one shard file completely: its place (step, rank, world size
 * when world > 0) and every hash; 0 or an error with err set. */
static int verify_shard(const char *dir, uint64_t step, int rank, int world,
                        int threads, progress *pr, fb__shard_stop stop,
                        void *stop_arg, char *err, size_t err_size)
{
    char path[PATH_MAX];
    if (fb__ckpt_shard_path(path, sizeof path, dir, step, rank)) {
        snprintf(err, err_size, "path too long");
        return -ENAMETOOLONG;
    }
    int fd;
    fb__st_header *h;
    int rc = fb__st_open(path, &fd, &h, err, err_size);
    if (rc)
        return rc;
    rc = fb__shard_check_place(h, path, step, rank, world, err, err_size);
    if (!rc)
        rc = fb__shard_read_verify(fd, h, path, NULL, threads,
                                   pr && pr->on ? progress_cb : NULL, pr, stop,
                                   stop_arg, err, err_size);
    fb__st_free(h);
    close(fd);
    return rc;
}

int fb__ckpt_verify(const char *dir, int has_step, uint64_t step, int threads,
                    int json, FILE *out)
{
    fb__ckpt_entry *v;
    size_t n;
    int rc = fb__ckpt_scan(dir, 0, 1, &v, &n);
    if (rc) {
        fprintf(stderr, "firebreak ckpt verify: %s: %s\n", dir, fb_strerror(rc));
        return 2;
    }
    progress pr = {.on = !json && fb__isatty(2)};
    for (size_t i = 0; i < n; i++)
        if (!has_step || v[i].step == step)
            pr.total += v[i].bytes;
    fb__jsonw w;
    fb__jsonw_init(&w);
    fb__jsonw_obj_begin(&w);
    fb__jsonw_kstr(&w, "dir", dir);
    fb__jsonw_key(&w, "failures");
    fb__jsonw_arr_begin(&w);
    int failed = 0, checked = 0, found = 0, restorable_n = 0;
    uint64_t newest_ok = 0;
    char why_not[128] = ""; /* the requested step's, when not restorable */
    for (size_t i = 0; i < n; i++) {
        if (has_step && v[i].step != step)
            continue;
        found = 1;
        int *ranks = NULL, nr = 0, step_failed = 0;
        int lr = v[i].error ? v[i].error : fb__ckpt_list_ranks(dir, v[i].step, &ranks, &nr);
        if (lr == -ENOENT || lr == -ENOTDIR)
            continue; /* gone since the listing (retention): as fb__ckpt_scan */
        if (lr) { /* a step no reader can use: said, not passed over */
            char err[256];
            snprintf(err, sizeof err, "its directory cannot be read: %s", fb_strerror(lr));
            failed++;
            step_failed++;
            if (!json)
                fprintf(out, "FAIL step %llu: %s\n", (unsigned long long)v[i].step, err);
            fb__jsonw_obj_begin(&w);
            fb__jsonw_kuint(&w, "step", v[i].step);
            fb__jsonw_kint(&w, "rank", -1);
            fb__jsonw_kstr(&w, "error", err);
            fb__jsonw_obj_end(&w);
        }
        for (int k = 0; k < nr; k++) {
            char err[1024];
            checked++;
            /* Every shard must agree with the world size completeness was
             * counted with (the lowest rank's). */
            int r = verify_shard(dir, v[i].step, ranks[k],
                                 v[i].world_size > 0 ? v[i].world_size : 0,
                                 threads, &pr, NULL, NULL, err, sizeof err);
            if (!r)
                continue;
            failed++;
            step_failed++;
            if (pr.on)
                fputc('\n', stderr);
            if (!json)
                fprintf(out, "FAIL step %llu rank %d: %s\n",
                        (unsigned long long)v[i].step, ranks[k], err);
            fb__jsonw_obj_begin(&w);
            fb__jsonw_kuint(&w, "step", v[i].step);
            fb__jsonw_kint(&w, "rank", ranks[k]);
            fb__jsonw_kstr(&w, "error", err);
            fb__jsonw_obj_end(&w);
        }
        free(ranks);
        /* A step with any failed shard is not complete, whatever count. */
        int restorable = v[i].complete && !step_failed;
        if (restorable && !restorable_n++)
            newest_ok = v[i].step;
        if (!restorable)
            snprintf(why_not, sizeof why_not, "%s, %d/%d shards",
                     step_failed ? "failed" : "incomplete", v[i].shards, v[i].world_size);
        if (!json)
            fprintf(out, "step %llu: %s, %d/%d shards%s\n",
                    (unsigned long long)v[i].step,
                    step_failed ? "FAILED" : v[i].complete ? "complete" : "incomplete",
                    v[i].shards, v[i].world_size,
                    restorable ? "" : " (not restorable)");
    }
    if (pr.on)
        fprintf(stderr, "\r%60s\r", "");
    fb__jsonw_arr_end(&w);
    fb__jsonw_kint(&w, "shards_checked", checked);
    fb__jsonw_kint(&w, "failed", failed);
    /* ok: nothing failed and something to restore from (with --step, that
     * checkpoint): a directory whose checkpoints are all incomplete has
     * nothing bad in it, and nothing a restart can use either. */
    fb__jsonw_kint(&w, "restorable", restorable_n);
    fb__jsonw_key(&w, "newest_restorable");
    if (restorable_n)
        fb__jsonw_uint(&w, newest_ok);
    else
        fb__jsonw_null(&w);
    int ok = failed == 0 && found && restorable_n > 0;
    fb__jsonw_kbool(&w, "ok", ok);
    fb__jsonw_obj_end(&w);
    if (json)
        fb__jsonw_print(&w, out);
    else if (found)
        fprintf(out, "%d shard(s) checked, %d failed\n", checked, failed);
    fb__jsonw_free(&w);
    free(v);
    if (!found) {
        /* Nothing verified is not a pass: a script gating on the exit
         * code must not take a wrong DIR for good checkpoints. */
        if (has_step)
            fprintf(stderr, "firebreak ckpt verify: %s: no checkpoint at step %llu\n",
                    dir, (unsigned long long)step);
        else
            fprintf(stderr, "firebreak ckpt verify: %s: no checkpoint to verify\n", dir);
        return 2;
    }
    if (!failed && !restorable_n) {
        if (has_step)
            fprintf(stderr, "firebreak ckpt verify: %s: step %llu is not restorable "
                    "(%s)\n", dir, (unsigned long long)step, why_not);
        else
            fprintf(stderr, "firebreak ckpt verify: %s: no checkpoint is restorable "
                    "(every one incomplete)\n", dir);
    }
    return ok ? 0 : 1;
}

/* 1 when every shard of the step records world_size: a save of this job's
 * size cut short.  A step with a shard of another size (a job of another
 * size saved it: complete for its own, and restorable by it again), or
 * one that cannot say, is not this job's to remove. */
static int own_size_only(const char *dir, uint64_t step, int world_size)
{
    return fb__ckpt_step_world(dir, step, world_size) == 1;
}

/* Remove the incomplete checkpoints of this job's size in v (a scan of
 * dir, newest first) newer than `after` (every one without has_after). */
static void drop_newer(const char *dir, int world_size, const fb__ckpt_entry *v,
                       size_t n, int has_after, uint64_t after,
                       void (*why_cb)(void *arg, uint64_t step, int set_aside,
                                      const char *why),
                       void *arg)
{
    int dropped = 0;
    for (size_t i = 0; i < n && (!has_after || v[i].step > after); i++) {
        char path[PATH_MAX], why[160];
        if (v[i].complete || v[i].error || !own_size_only(dir, v[i].step, world_size) ||
            fb__ckpt_step_path(path, sizeof path, dir, v[i].step))
            continue;
        int r = fb__rm_rf(path);
        dropped++;
        snprintf(why, sizeof why, "incomplete (%d of %d shards): %s", v[i].shards,
                 world_size > 0 ? world_size : v[i].world_size,
                 r ? fb_strerror(r) : "removed");
        if (why_cb)
            why_cb(arg, v[i].step, 2, why);
    }
    if (dropped)
        fb__fsync_dir(dir);
}

typedef void (*why_fn)(void *arg, uint64_t step, int set_aside, const char *why);

/* Verify every shard of `step`, saved by `world` ranks: 0, -ECANCELED
 * (stop said so), or the failure, named in err. */
static int verify_step(const char *dir, uint64_t step, int world, int threads,
                       int (*stop)(void *arg), void *arg, char *err, size_t err_size)
{
    int bad = 0;
    for (int r = 0; r < world && !bad; r++)
        bad = stop && stop(arg) ? -ECANCELED
            : verify_shard(dir, step, r, world, threads, NULL, stop, arg, err, err_size);
    return bad;
}

/* Rename a step that failed to .corrupt-step-N (kept as evidence; an
 * older one of that name is replaced) and tell why_cb (set_aside 1). */
static void set_aside(const char *dir, uint64_t step, const char *err, why_fn why_cb,
                      void *arg)
{
    char from[PATH_MAX], to[PATH_MAX];
    if (fb__ckpt_step_path(from, sizeof from, dir, step) ||
        fb__fmt(to, sizeof to, "%s/.corrupt-step-%010llu", dir, (unsigned long long)step))
        return;
    fb__rm_rf(to);
    if (rename(from, to) == 0)
        fb__fsync_dir(dir);
    if (why_cb)
        why_cb(arg, step, 1, err);
}

/* A step whose rank 0 records `w0` ranks, not this job's `world_size`:
 * never this job's choice, but a program that restores across world
 * sizes (firebreak.Checkpointer, fb_ckpt_layout_open with 0) takes the
 * newest step complete for its own size, whatever this job's, so such a
 * step is verified as a whole too, every shard of its own size, and set
 * aside when bad: left there, one corrupt shard made every attempt of
 * such a program fail.  One incomplete for its own size is no reader's
 * and stays.  1 verified, 0 not (incomplete, set aside), -ECANCELED,
 * -ENOMEM. */
static int check_other_size(const char *dir, uint64_t step, int w0, int world_size,
                            int threads, why_fn why_cb, int (*stop)(void *arg),
                            void *arg)
{
    int *ranks = NULL, nr = 0, have = 0;
    int rc = fb__ckpt_list_ranks(dir, step, &ranks, &nr);
    if (rc)
        return rc == -ENOMEM ? rc : 0; /* gone since the listing */
    for (int k = 0; k < nr; k++)
        have += ranks[k] < w0;
    free(ranks);
    char err[1024];
    if (have < w0) {
        snprintf(err, sizeof err, "saved by %d ranks, this job has %d; incomplete "
                 "for them (%d of %d shards): left in place", w0, world_size, have, w0);
    } else {
        int bad = verify_step(dir, step, w0, threads, stop, arg, err, sizeof err);
        if (bad == -ECANCELED)
            return bad;
        if (bad) {
            set_aside(dir, step, err, why_cb, arg);
            return 0;
        }
        snprintf(err, sizeof err, "saved by %d ranks, this job has %d: verified, left "
                 "in place (only a program that restores across world sizes "
                 "restores it)", w0, world_size);
    }
    if (why_cb)
        why_cb(arg, step, 0, err);
    return have == w0;
}

int fb__ckpt_prepare_restore(const char *dir, int world_size, int threads,
                             int drop_incomplete, uint64_t *step_out,
                             void (*why_cb)(void *arg, uint64_t step,
                                            int set_aside, const char *why),
                             int (*stop)(void *arg), void *arg)
{
    fb__ckpt_entry *v;
    size_t n;
    int rc = fb__ckpt_scan(dir, world_size, 0, &v, &n);
    if (rc)
        return rc == -ENOENT ? FB_ENOCKPT : rc;
    rc = FB_ENOCKPT;
    int other_ok = 0; /* a step of another size verified */
    for (size_t i = 0; i < n && rc == FB_ENOCKPT; i++) {
        if (v[i].error)
            continue;
        /* Rank 0's shard says a job of another size saved it: checked as
         * that size's, never chosen.  One that cannot say (truncated,
         * malformed) is verified below and set aside like any bad shard. */
        char p0[PATH_MAX];
        int w0 = world_size > 0 && !fb__ckpt_shard_path(p0, sizeof p0, dir, v[i].step, 0)
                     ? fb__ckpt_shard_world_size(p0) : -1;
        if (w0 == -ENOMEM) {
            rc = w0;
            break;
        }
        if (w0 > 0 && w0 != world_size) {
            if (other_ok)
                continue; /* older than one verified: no reader takes it */
            int r = check_other_size(dir, v[i].step, w0, world_size, threads, why_cb,
                                     stop, arg);
            if (r < 0) { /* -ENOMEM, or a stop: no verdict */
                rc = r;
                break;
            }
            other_ok = r;
            continue;
        }
        if (!v[i].complete)
            continue;
        char err[1024] = "";
        int bad = verify_step(dir, v[i].step, v[i].world_size, threads, stop, arg,
                              err, sizeof err);
        if (bad == -ECANCELED) { /* a stop is no verdict: set nothing aside */
            rc = bad;
            break;
        }
        if (!bad) {
            *step_out = v[i].step;
            rc = 0;
            break;
        }
        set_aside(dir, v[i].step, err, why_cb, arg);
    }
    if (drop_incomplete && (rc == 0 || rc == FB_ENOCKPT))
        drop_newer(dir, world_size, v, n, rc == 0, rc == 0 ? *step_out : 0, why_cb, arg);
    free(v);
    return rc;
}

int fb__ckpt_drop_incomplete(const char *dir, int world_size, int has_after,
                             uint64_t after,
                             void (*why_cb)(void *arg, uint64_t step,
                                            int set_aside, const char *why),
                             void *arg)
{
    fb__ckpt_entry *v;
    size_t n;
    int rc = fb__ckpt_scan(dir, world_size, 0, &v, &n);
    if (rc)
        return rc == -ENOENT ? 0 : rc;
    drop_newer(dir, world_size, v, n, has_after, after, why_cb, arg);
    free(v);
    return 0;
}

/* ---- inspect ---- */

static int pick_shard(const char *path, int has_step, uint64_t step, int rank,
                      char *out, size_t size)
{
    struct stat st;
    if (stat(path, &st)) {
        fprintf(stderr, "firebreak ckpt inspect: %s: %s\n", path, strerror(errno));
        return 2;
    }
    if (!S_ISDIR(st.st_mode))
        return fb__fmt(out, size, "%s", path) ? 2 : 0;
    if (!has_step) {
        /* The newest step that has this rank's shard: a save cut short
         * leaves a newer step without it (said, not an error). */
        fb__ckpt_entry *v;
        size_t n;
        if (fb__ckpt_scan(path, 0, 0, &v, &n) || n == 0) {
            fprintf(stderr, "firebreak ckpt inspect: %s: no checkpoints\n", path);
            return 2;
        }
        size_t i = 0;
        for (; i < n; i++)
            if (!fb__ckpt_shard_path(out, size, path, v[i].step, rank) &&
                !stat(out, &st) && S_ISREG(st.st_mode))
                break;
        if (i == n) {
            fprintf(stderr, "firebreak ckpt inspect: %s: no checkpoint has a shard of "
                    "rank %d (%zu step(s), newest %llu)\n", path, rank, n,
                    (unsigned long long)v[0].step);
            free(v);
            return 2;
        }
        if (i > 0)
            fprintf(stderr, "firebreak ckpt inspect: %s: step %llu has no shard of "
                    "rank %d (%s): step %llu\n", path, (unsigned long long)v[0].step,
                    rank, v[0].complete ? "not a regular file" : "incomplete",
                    (unsigned long long)v[i].step);
        step = v[i].step;
        free(v);
    }
    if (fb__ckpt_shard_path(out, size, path, step, rank))
        return 2;
    return 0;
}

/* "[4,11]" into buf; returns its length (at most size - 1). */
static int shape_text(char *buf, size_t size, const fb__st_tensor *t)
{
    size_t len = (size_t)snprintf(buf, size, "[");
    for (int d = 0; d < t->ndim && len < size; d++)
        len += (size_t)snprintf(buf + len, size - len, "%s%lld", d ? "," : "",
                                (long long)t->shape[d]);
    if (len < size)
        len += (size_t)snprintf(buf + len, size - len, "]");
    return (int)(len < size ? len : size - 1);
}

int fb__ckpt_inspect(const char *path, int has_step, uint64_t step, int rank,
                     int json, FILE *out)
{
    char file[PATH_MAX], err[1024];
    int rc = pick_shard(path, has_step, step, rank, file, sizeof file);
    if (rc)
        return rc;
    int fd;
    fb__st_header *h;
    rc = fb__st_open(file, &fd, &h, err, sizeof err);
    if (rc) {
        fprintf(stderr, "firebreak ckpt inspect: %s\n", err);
        return rc == FB_EFORMAT || rc == FB_ETOOBIG || rc == FB_EVERSION ? 1 : 2;
    }
    close(fd);
    if (json) {
        fb__jsonw w;
        fb__jsonw_init(&w);
        fb__jsonw_obj_begin(&w);
        fb__jsonw_kstr(&w, "file", file);
        fb__jsonw_kuint(&w, "header_bytes", h->header_len);
        fb__jsonw_kuint(&w, "data_bytes", h->data_len);
        fb__jsonw_key(&w, "metadata");
        fb__jsonw_obj_begin(&w);
        for (size_t i = 0; i < h->nmeta; i++)
            fb__jsonw_kstr(&w, h->meta[i].key, h->meta[i].value);
        fb__jsonw_obj_end(&w);
        fb__jsonw_key(&w, "tensors");
        fb__jsonw_arr_begin(&w);
        for (size_t i = 0; i < h->ntensors; i++) {
            const fb__st_tensor *t = &h->tensors[i];
            fb__jsonw_obj_begin(&w);
            fb__jsonw_kstr(&w, "name", t->name);
            fb__jsonw_kstr(&w, "dtype", fb_dtype_name(t->dtype));
            fb__jsonw_key(&w, "shape");
            fb__jsonw_arr_begin(&w);
            for (int d = 0; d < t->ndim; d++)
                fb__jsonw_int(&w, t->shape[d]);
            fb__jsonw_arr_end(&w);
            fb__jsonw_key(&w, "data_offsets");
            fb__jsonw_arr_begin(&w);
            fb__jsonw_uint(&w, t->begin);
            fb__jsonw_uint(&w, t->end);
            fb__jsonw_arr_end(&w);
            fb__jsonw_obj_end(&w);
        }
        fb__jsonw_arr_end(&w);
        fb__jsonw_obj_end(&w);
        fb__jsonw_print(&w, out);
        fb__jsonw_free(&w);
    } else {
        /* A file's names and values as text a terminal shows as they are
         * (control bytes and bad UTF-8 as '?': fb__safe_text). */
        char sk[FB__ST_NAME_MAX + 40], sv[1024];
        fprintf(out, "%s: %zu tensor(s), header %llu bytes, data %llu bytes\n",
                fb__safe_text(sv, sizeof sv, file), h->ntensors,
                (unsigned long long)h->header_len, (unsigned long long)h->data_len);
        fprintf(out, "metadata:\n");
        for (size_t i = 0; i < h->nmeta; i++)
            if (strncmp(h->meta[i].key, "firebreak.hash.", 15) &&
                strncmp(h->meta[i].key, "firebreak.global_", 17))
                fprintf(out, "  %s = %s\n", fb__safe_text(sk, sizeof sk, h->meta[i].key),
                        fb__safe_text(sv, sizeof sv, h->meta[i].value));
        fprintf(out, "tensors:\n");
        /* Columns as wide as their widest cell (a name at most 64), so
         * that a shape or a byte count never shifts what follows it. */
        char key[FB__ST_NAME_MAX + 40], bytes[32];
        int wname = 4, wshape = 5, wbytes = 5;
        for (size_t i = 0; i < h->ntensors; i++) {
            const fb__st_tensor *t = &h->tensors[i];
            char shape[512];
            int n = (int)strlen(t->name);
            wname = n > wname ? (n < 64 ? n : 64) : wname;
            n = shape_text(shape, sizeof shape, t);
            wshape = n > wshape ? n : wshape;
            n = snprintf(bytes, sizeof bytes, "%llu",
                         (unsigned long long)(t->end - t->begin));
            wbytes = n > wbytes ? n : wbytes;
        }
        fprintf(out, "  %-*s %-8s %-*s %*s  %-16s  %s\n", wname, "name",
                "dtype", wshape, "shape", wbytes, "bytes", "hash",
                "global shape at offset");
        for (size_t i = 0; i < h->ntensors; i++) {
            const fb__st_tensor *t = &h->tensors[i];
            char shape[512];
            shape_text(shape, sizeof shape, t);
            snprintf(key, sizeof key, "firebreak.hash.%s", t->name);
            const char *hash = fb__st_meta_get(h, key);
            snprintf(key, sizeof key, "firebreak.global_shape.%s", t->name);
            const char *gs = fb__st_meta_get(h, key);
            snprintf(key, sizeof key, "firebreak.global_offset.%s", t->name);
            const char *go = fb__st_meta_get(h, key);
            char sgs[256], sgo[256];
            fprintf(out, "  %-*s %-8s %-*s %*llu  %-16s  [%s] at [%s]\n",
                    wname, fb__safe_text(sk, sizeof sk, t->name), fb_dtype_name(t->dtype),
                    wshape, shape, wbytes, (unsigned long long)(t->end - t->begin),
                    hash ? fb__safe_text(sv, sizeof sv, hash) : "-",
                    gs ? fb__safe_text(sgs, sizeof sgs, gs) : "?",
                    go ? fb__safe_text(sgo, sizeof sgo, go) : "?");
        }
    }
    fb__st_free(h);
    return 0;
}
