/*
 * restore.c -- fb_ckpt_restore: the newest complete checkpoint whose shard
 * for this rank verifies, read straight into the registered tensors.
 *
 * Walks the checkpoints newest first (store.c).  An incomplete one, or one
 * whose shard is missing, truncated, malformed, from another world size or
 * fails its hashes, is reported (RESTORE_FALLBACK, with the reason) and the
 * next older one is tried.  A shard whose tensors differ from the
 * registered ones (names, dtypes, shapes, a slice's place) is a program
 * error, not damage: restore stops with FB_EMISMATCH and says what
 * differs.  A shard whose recorded step, rank or world size is not its
 * place (a shard copied or linked under another step's name) is damage:
 * fall back.
 *
 * A restore that fails leaves the registered tensors byte for byte as
 * they were: host tensors with staging memory (async handles) are read
 * straight into place, each piece copied aside into staging just before
 * it is overwritten and put back if any hash fails (but for a tensor's
 * zero bytes, put back by clearing them: nothing to copy, and staging not
 * touched, where a restarted program's state is zero); device tensors are
 * read into staging and copied to the device only after every hash
 * matched; tensors without staging (synchronous handles) are read
 * straight into place as long as the bytes they overwrite are zero (put
 * back by clearing them: a fresh program's optimizer moments, new
 * tensors), and from the first piece that is not, only verified, then read
 * again once every hash matched (docs/checkpoint.md has the cost).
 *
 * A shard that fails its hashes is renamed rank-R.corrupt, so that the
 * checkpoint is incomplete for every later restore of every rank; and this
 * rank's shards of newer incomplete checkpoints (an abandoned timeline)
 * are removed, so they never mix with shards of the new one.
 */
#include "ckpt/engine.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/cuda.h"
#include "ckpt/shard.h"
#include "ckpt/store.h"
#include "common/alloc.h"
#include "common/util.h"
#include "lib/lib.h"

static void fallback(const fb_ckpt *ck, uint64_t step, int code, const char *why)
{
    fb__say("rank %d: not restoring checkpoint step %llu: %s\n",
            ck->rank, (unsigned long long)step, why);
    fb__lib_report(FB__REPORT_RESTORE_FALLBACK, code, step, 0, 0, 0, why);
}

static void dims_text(char *buf, size_t size, int ndim, const int64_t *v)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int d = 0; d < ndim && len < size; d++)
        len += (size_t)snprintf(buf + len, size - len, "%s%" PRId64,
                                d ? "," : "", v[d]);
}

/* A slice's recorded place (firebreak.global_shape.NAME and
 * .global_offset.NAME, written by the engine) must be the registered one:
 * the same local shape at another offset is another part of the tensor.
 * A shard without the keys records no place. */
static int match_slice(const fb__ckpt_tensor *t, const fb__st_header *h,
                       char *why, size_t why_size)
{
    static const char *const what[2] = {"global_shape", "global_offset"};
    char key[FB__ST_NAME_MAX + 64], want[FB__ST_MAX_DIMS * 21 + 1];
    for (int k = 0; k < 2; k++) {
        snprintf(key, sizeof key, "firebreak.%s.%s", what[k], t->name);
        const char *got = fb__st_meta_get(h, key);
        if (!got)
            continue;
        dims_text(want, sizeof want, t->ndim, k ? t->global_offset : t->global_shape);
        if (strcmp(got, want)) {
            fb__ckpt_say(why, why_size, "tensor \"%.200s\": %s [%.200s] in the "
                         "checkpoint, [%s] registered", t->name, what[k], got, want);
            return FB_EMISMATCH;
        }
    }
    return 0;
}

/* 0 when the shard holds exactly the registered tensors, with map[j] the
 * registered tensor of the shard's tensor j; else FB_EMISMATCH with the
 * first difference in why. */
static int match_tensors(const fb_ckpt *ck, const fb__st_header *h,
                         size_t *map, char *why, size_t why_size)
{
    if (h->ntensors != ck->n) {
        fb__ckpt_say(why, why_size, "it holds %zu tensors, %zu are registered",
                 h->ntensors, ck->n);
        return FB_EMISMATCH;
    }
    for (size_t i = 0; i < ck->n; i++) {
        const fb__ckpt_tensor *t = &ck->t[i];
        const fb__st_tensor *s = fb__st_find(h, t->name);
        if (!s) {
            fb__ckpt_say(why, why_size, "tensor \"%.200s\" is registered but not in "
                     "the checkpoint", t->name);
            return FB_EMISMATCH;
        }
        if (s->dtype != t->dtype) {
            fb__ckpt_say(why, why_size, "tensor \"%.200s\": dtype %s in the checkpoint, "
                     "%s registered", t->name, fb_dtype_name(s->dtype),
                     fb_dtype_name(t->dtype));
            return FB_EMISMATCH;
        }
        int same = s->ndim == t->ndim;
        for (int d = 0; same && d < t->ndim; d++)
            same = s->shape[d] == t->shape[d];
        if (!same) {
            char a[256] = "", b[256] = "";
            size_t la = 0, lb = 0;
            for (int d = 0; d < s->ndim && la < sizeof a; d++)
                la += (size_t)snprintf(a + la, sizeof a - la, "%s%" PRId64,
                                       d ? "," : "", s->shape[d]);
            for (int d = 0; d < t->ndim && lb < sizeof b; d++)
                lb += (size_t)snprintf(b + lb, sizeof b - lb, "%s%" PRId64,
                                       d ? "," : "", t->shape[d]);
            fb__ckpt_say(why, why_size, "tensor \"%.200s\": shape [%s] in the "
                     "checkpoint, [%s] registered", t->name, a, b);
            return FB_EMISMATCH;
        }
        int rc = match_slice(t, h, why, why_size);
        if (rc)
            return rc;
        map[s - h->tensors] = i;
    }
    return 0;
}

/* This rank's shard of an abandoned (newer, incomplete) checkpoint. */
void fb__ckpt_drop_own_shard(const fb_ckpt *ck, const char *dir, uint64_t step)
{
    char p[PATH_MAX], sdir[PATH_MAX];
    if (fb__ckpt_shard_path(p, sizeof p, dir, step, ck->rank) ||
        fb__ckpt_step_path(sdir, sizeof sdir, dir, step))
        return;
    /* Only a shard of this job's size: an older step of a job with fewer
     * ranks is incomplete here but whole for its own, and stays. */
    if (fb__ckpt_shard_world_size(p) != ck->world_size)
        return;
    if (unlink(p) == 0)
        fb__fsync_dir(sdir);
}

static void quarantine_own_shard(const fb_ckpt *ck, const char *dir, uint64_t step)
{
    char p[PATH_MAX], q[PATH_MAX], sdir[PATH_MAX];
    if (fb__ckpt_shard_path(p, sizeof p, dir, step, ck->rank) ||
        fb__fmt(q, sizeof q, "%s/step-%010llu/rank-%05d.corrupt", dir,
                (unsigned long long)step, ck->rank) ||
        fb__ckpt_step_path(sdir, sizeof sdir, dir, step))
        return;
    if (rename(p, q) == 0)
        fb__fsync_dir(sdir);
}

/* FIREBREAK_CKPT_RESTORE_STAGED=1 (test builds): read host tensors into
 * staging and copy them into place after the last hash, the old way
 * (bench_ckpt's "before"). */
static int read_in_place(void)
{
#ifdef FB_TEST_HOOKS
    const char *v = fb__getenv("FIREBREAK_CKPT_RESTORE_STAGED");
    return !v || strcmp(v, "1");
#else
    return 1;
#endif
}

typedef struct keep {
    void **dest, **backup, **dest2;
    size_t *saved;
    unsigned char *zero;
    fb__st_tensor *sub;          /* the second read's tensors */
} keep;

/*
 * Read and verify the shard: host tensors with staging (async handles)
 * straight into place, each piece of a tensor first copied aside into its
 * staging (shard.h: on the reading threads, while the others wait for the
 * disk, instead of one more pass over the whole state after the last
 * read) unless it and the tensor's bytes before it are zero
 * (FB__SHARD_ZERO_TRY, then _KEPT); device tensors into staging; the rest
 * (synchronous handles) into place while what they overwrite is zero
 * (FB__SHARD_ZERO_TRY), else only verified, then, when all verified, read
 * again into those tensors.  On failure every byte written into a tensor
 * is put back (fb__shard_undo), but for the second pass's tensors, which
 * hold part of it.  k: the first pass's dest, backup, saved and zero, for
 * the caller's undo.
 */
static int read_shard(fb_ckpt *ck, int fd, const fb__st_header *h,
                      const char *path, const size_t *map, keep *k,
                      char *why, size_t why_size)
{
    size_t again = 0;
    uint64_t again_bytes = 0;
    int place = read_in_place();
    ck->reread = ck->aside = 0;
    for (size_t j = 0; j < h->ntensors; j++) {
        const fb__ckpt_tensor *t = &ck->t[map[j]];
        int in_place = place && t->bytes && t->staging && !t->on_device;
        int if_zero = in_place || (t->bytes && !t->staging && !t->on_device);
        k->dest[j] = if_zero ? t->data : t->staging;
        k->backup[j] = in_place ? t->staging : NULL;
        k->zero[j] = if_zero ? FB__SHARD_ZERO_TRY : FB__SHARD_ZERO_OFF;
    }
    int rc = fb__shard_read_verify_keep(fd, h, path, k->dest, k->backup, k->saved,
                                        k->zero, ck->io_threads, why, why_size);
    if (rc) {
        fb__shard_undo(h, k->dest, k->backup, k->saved, k->zero);
        return rc;
    }
    for (size_t j = 0; j < h->ntensors; j++)
        if (k->backup[j] && k->zero[j] != FB__SHARD_ZERO_TRY)
            ck->aside += k->saved[j];
    /* The second read, now that every hash matched: only the tensors not
     * wholly read into place, in file order. */
    for (size_t j = 0; j < h->ntensors; j++) {
        if (k->zero[j] != FB__SHARD_ZERO_NO)
            continue;
        k->sub[again] = h->tensors[j];
        k->dest2[again++] = ck->t[map[j]].data;
        again_bytes += h->tensors[j].end - h->tensors[j].begin;
    }
    ck->reread = again_bytes;
    if (!again)
        return 0;
    fb__st_header view = *h;
    view.tensors = k->sub;
    view.ntensors = again;
    view.data_len = again_bytes; /* only splits the work between threads */
    char err[FB__REPORT_TEXT_MAX + 600];
    rc = fb__shard_read_verify(fd, &view, path, k->dest2, ck->io_threads, NULL, NULL,
                               NULL, NULL, err, sizeof err);
    if (rc) {
        fb__shard_undo(h, k->dest, k->backup, k->saved, k->zero);
        fb__ckpt_say(why, why_size, "%s (the shard changed while it was read; "
                     "registered tensors without staging hold part of it)", err);
    }
    return rc;
}

/* Device tensors from staging, once the shard verified (host tensors are
 * in place already: the caller puts them back when this fails). */
static int place_staged(fb_ckpt *ck, char *why, size_t why_size)
{
    for (size_t i = 0; i < ck->n; i++) {
        fb__ckpt_tensor *t = &ck->t[i];
        int rc = t->bytes && t->on_device
                     ? fb__cuda_h2d(t->data, t->staging, t->bytes) : 0;
        if (rc) {
            fb__ckpt_say(why, why_size, "copying tensor \"%.200s\" to the device "
                         "failed", t->name);
            return rc;
        }
    }
    for (size_t i = 0; i < ck->n && !read_in_place(); i++) {
        fb__ckpt_tensor *t = &ck->t[i];
        if (t->bytes && t->staging && !t->on_device)
            memcpy(t->data, t->staging, t->bytes);
    }
    return 0;
}

/* Try one checkpoint of dir: 0 restored, FB_EMISMATCH or -ENOMEM fatal,
 * other: fall back. */
int fb__ckpt_try_step(fb_ckpt *ck, const char *dir, uint64_t step,
                      uint64_t *bytes_out, char *why, size_t why_size)
{
    char path[PATH_MAX];
    if (fb__ckpt_shard_path(path, sizeof path, dir, step, ck->rank)) {
        fb__ckpt_say(why, why_size, "path too long");
        return -ENAMETOOLONG;
    }
    int fd = -1;
    fb__st_header *h = NULL;
    keep k = {0};
    size_t *map = NULL;
    int rc = fb__st_open(path, &fd, &h, why, why_size);
    if (rc)
        return rc;
    if ((rc = fb__shard_check_place(h, path, step, ck->rank, ck->world_size, why,
                                    why_size)) ||
        (rc = fb__shard_check_meta(h, path, why, why_size))) {
        if (rc == FB_ECORRUPT) /* its header hash: set aside for every rank */
            quarantine_own_shard(ck, dir, step);
        goto out;
    }
    size_t nt = h->ntensors ? h->ntensors : 1;
    k.dest = fb__calloc(nt, sizeof *k.dest);
    k.backup = fb__calloc(nt, sizeof *k.backup);
    k.dest2 = fb__calloc(nt, sizeof *k.dest2);
    k.saved = fb__calloc(nt, sizeof *k.saved);
    k.zero = fb__calloc(nt, sizeof *k.zero);
    k.sub = fb__calloc(nt, sizeof *k.sub);
    map = fb__calloc(nt, sizeof *map);
    if (!k.dest || !k.backup || !k.dest2 || !k.saved || !k.zero || !k.sub || !map) {
        rc = -ENOMEM;
        fb__ckpt_say(why, why_size, "out of memory");
        goto out;
    }
    char mm[512];
    if ((rc = match_tensors(ck, h, map, mm, sizeof mm))) {
        fb__ckpt_say(why, why_size, "%s: %s", path, mm);
        goto out;
    }
    rc = read_shard(ck, fd, h, path, map, &k, why, why_size);
    if (rc == FB_ECORRUPT)
        quarantine_own_shard(ck, dir, step);
    if (!rc && (rc = place_staged(ck, why, why_size)))
        fb__shard_undo(h, k.dest, k.backup, k.saved, k.zero);
    if (!rc)
        *bytes_out = h->data_offset + h->data_len;
out:
    free(map);
    free(k.dest);
    free(k.backup);
    free(k.dest2);
    free(k.saved);
    free(k.zero);
    free(k.sub);
    fb__st_free(h);
    if (fd >= 0)
        close(fd);
    return rc;
}

int fb_ckpt_restore(fb_ckpt *ck, uint64_t *step_out)
{
    if (!ck)
        return -EINVAL;
    if (fb__ckpt_busy(ck))
        return FB_ESTATE;
    /* A program restores once, after registering and before its first
     * save: make the write-protect plan now, not in that save's stall. */
    if (ck->wp.fd >= 0)
        (void)fb__wp_plan(ck);
    if (ck->tier.mem_dir[0]) /* memory first, then storage (tier.c) */
        return fb__tier_restore(ck, step_out);
    fb_phase before = fb__ckpt_phase();
    fb__lib_report(FB__REPORT_RESTORE_BEGIN, 0, 0, 0, 0, 0, NULL);
    fb_set_phase(FB_PHASE_RESTORE);
    uint64_t t0 = fb__now_ns();
    fb__ckpt_entry *v = NULL;
    size_t n = 0;
    int rc = fb__ckpt_scan(ck->dir, ck->world_size, 0, &v, &n);
    if (rc == -ENOENT)
        n = 0, rc = 0;
    if (rc) {
        fb__say("restore: listing %s: %s\n", ck->dir,
                fb_strerror(rc));
        goto out;
    }
    rc = FB_ENOCKPT;
    char why[FB__REPORT_TEXT_MAX + 600];
    for (size_t i = 0; i < n; i++) /* leftovers of this rank's crashed saves */
        (void)fb__ckpt_clean_tmp(ck->dir, v[i].step, ck->rank, (int)getpid());
    ck->tmp_swept |= 1; /* the saves need not look again (write_shard) */
    for (size_t i = 0; i < n; i++) {
        if (!v[i].complete) {
            if (v[i].error)
                fb__ckpt_say(why, sizeof why, "its directory cannot be read: %s",
                             fb_strerror(v[i].error));
            else
                fb__ckpt_say(why, sizeof why, "incomplete: %d of %d shards committed",
                             v[i].shards, ck->world_size);
            fallback(ck, v[i].step, FB_ENOCKPT, why);
            fb__ckpt_drop_own_shard(ck, ck->dir, v[i].step);
            continue;
        }
        uint64_t bytes = 0;
        int r = fb__ckpt_try_step(ck, ck->dir, v[i].step, &bytes, why, sizeof why);
        if (r == -ENOMEM) {
            /* not damage: an older checkpoint would lose the newer's steps */
            fb__say("rank %d: restoring checkpoint step %llu: "
                    "%s\n", ck->rank, (unsigned long long)v[i].step, why);
            rc = r;
            break;
        }
        if (r == FB_EMISMATCH) {
            fb__say("rank %d: checkpoint step %llu does not "
                    "match the registered tensors: %s\n", ck->rank,
                    (unsigned long long)v[i].step, why);
            fb__lib_report(FB__REPORT_RESTORE_FALLBACK, r, v[i].step, 0, 0, 0, why);
            rc = r;
            break;
        }
        if (r) {
            fallback(ck, v[i].step, r, why);
            continue;
        }
        uint64_t ns = fb__now_ns() - t0;
        fb__lib_report(FB__REPORT_RESTORE_DONE, 0, v[i].step, bytes, ns, 0,
                       fb__tier_source_name(FB__TIER_STORAGE));
        if (step_out)
            *step_out = v[i].step;
        rc = 0;
        break;
    }
    if (rc == FB_ENOCKPT)
        fb__lib_report(FB__REPORT_RESTORE_NONE, 0, 0, 0, 0, 0, NULL);
out:
    free(v);
    fb_set_phase(before);
    return rc;
}
