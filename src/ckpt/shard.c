/*
 * shard.c -- parallel, verified reads of a shard's data (see shard.h).
 *
 * Tensors are split into `threads` runs of consecutive tensors holding
 * about equal bytes, so each thread reads one contiguous range of the
 * file sequentially.  Each tensor is hashed as it is read.  Only the
 * calling thread asks the caller's stop function (it may read the
 * caller's signalfd, which is not for many threads); the others see its
 * answer in a shared flag between chunks.
 */
#include "ckpt/shard.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "ckpt/engine.h"
#include "ckpt/hash.h"
#include "common/alloc.h"
#include "common/util.h"

#define READ_CHUNK (8u << 20)
#define MAX_THREADS 16
#define THREAD_MIN_BYTES ((uint64_t)8 << 20)
#define IOV_BATCH 256

int fb__shard_check_meta(const fb__st_header *h, const char *label, char *err,
                         size_t err_size)
{
    const char *fmt = fb__st_meta_get(h, "firebreak.format");
    if (!fmt) {
        snprintf(err, err_size, "%s: __metadata__ has no firebreak.format "
                 "(not written by firebreak)", label);
        return FB_EFORMAT;
    }
    if (strcmp(fmt, FB__CKPT_FORMAT_VERSION)) {
        snprintf(err, err_size, "%s: firebreak.format \"%.20s\" is not supported "
                 "(this build reads %s)", label, fmt, FB__CKPT_FORMAT_VERSION);
        return FB_EVERSION;
    }
    const char *alg = fb__st_meta_get(h, "firebreak.hash");
    if (fb__hash_alg_from_name(alg) < 0) {
        snprintf(err, err_size, "%s: firebreak.hash \"%.20s\" is unknown or not "
                 "built in", label, alg ? alg : "(missing)");
        return FB_EFORMAT;
    }
    if (h->header_hash < 0) {
        snprintf(err, err_size, "%s: its header does not match its %s (the "
                 "metadata was damaged: a slice's place, the step, a hash)",
                 label, FB__ST_HEADER_HASH_KEY);
        return FB_ECORRUPT;
    }
    char key[FB__ST_NAME_MAX + 32];
    for (size_t i = 0; i < h->ntensors; i++) {
        uint64_t v;
        snprintf(key, sizeof key, "firebreak.hash.%s", h->tensors[i].name);
        if (fb__hash_parse_hex(fb__st_meta_get(h, key), &v)) {
            snprintf(err, err_size, "%s: metadata %.200s is missing or not 16 hex "
                     "digits", label, key);
            return FB_EFORMAT;
        }
    }
    return 0;
}

int fb__shard_check_place(const fb__st_header *h, const char *label,
                          uint64_t step, int rank, int world_size, char *err,
                          size_t err_size)
{
    static const char *const keys[] = {"firebreak.step", "firebreak.rank",
                                       "firebreak.world_size"};
    static const char *const where[] = {"the step directory it is in",
                                        "its file name", "the run's world size"};
    long long want[3] = {(long long)step, rank, world_size};
    for (int k = 0; k < 3; k++) {
        if (k == 2 && world_size <= 0)
            break;
        const char *v = fb__st_meta_get(h, keys[k]);
        long long got = -1;
        if (v && !fb__parse_int(v, 0, LLONG_MAX, &got) && got == want[k])
            continue;
        char shown[32];
        fb__safe_text(shown, sizeof shown, v ? v : "missing");
        snprintf(err, err_size, "%s: metadata %s is %s%s%s, expected %lld (%s)",
                 label, keys[k], v ? "\"" : "", shown, v ? "\"" : "", want[k],
                 where[k]);
        return FB_EFORMAT;
    }
    return 0;
}

typedef struct job {
    int fd;
    const fb__st_header *h;
    const char *label;
    void *const *dest;
    void *const *backup;        /* may be NULL (fb__shard_read_verify_keep) */
    size_t *saved;
    unsigned char *zero;        /* may be NULL: FB__SHARD_ZERO_* per tensor */
    size_t first, last;         /* tensors [first, last) */
    fb__hash_alg alg;
    fb__shard_progress progress;
    void *progress_arg;
    fb__shard_stop stop;        /* job 0 only: the calling thread */
    void *stop_arg;
    atomic_int *cancel;         /* shared: stop said so            */
    int rc;
    char err[512];
} job;

void fb__iov_advance(struct iovec **iov, int *cnt, size_t n)
{
    while (*cnt > 0 && n >= (*iov)->iov_len) {
        n -= (*iov)->iov_len;
        (*iov)++;
        (*cnt)--;
    }
    if (*cnt > 0) {
        (*iov)->iov_base = (char *)(*iov)->iov_base + n;
        (*iov)->iov_len -= n;
    }
}

/* preadv until every iovec is full; returns bytes read (short at EOF) or
 * -errno.  Modifies iov. */
static ssize_t preadv_full(int fd, struct iovec *iov, int cnt, uint64_t off)
{
    ssize_t got = 0;
    while (cnt > 0) {
        ssize_t r = preadv(fd, iov, cnt > IOV_BATCH ? IOV_BATCH : cnt, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -errno;
        if (r == 0)
            break;
        got += r;
        off += (uint64_t)r;
        fb__iov_advance(&iov, &cnt, (size_t)r);
    }
    return got;
}

static int finish_tensor(job *j, const fb__st_tensor *t, uint64_t got)
{
    char key[FB__ST_NAME_MAX + 32];
    uint64_t want = 0;
    snprintf(key, sizeof key, "firebreak.hash.%s", t->name);
    if (fb__hash_parse_hex(fb__st_meta_get(j->h, key), &want)) {
        snprintf(j->err, sizeof j->err, "%s: metadata %.200s is missing or "
                 "malformed", j->label, key);
        return FB_EFORMAT;
    }
    if (want != got) {
        snprintf(j->err, sizeof j->err, "%s: tensor \"%.200s\": hash %016llx, "
                 "recorded %016llx (data corrupted)", j->label, t->name,
                 (unsigned long long)got, (unsigned long long)want);
        return FB_ECORRUPT;
    }
    return 0;
}

/* Whether n bytes at p are all zero (memcmp against itself shifted by one:
 * the C library's vector loop). */
static int all_zero(const char *p, size_t n)
{
    return n == 0 || (p[0] == 0 && memcmp(p, p + 1, n - 1) == 0);
}

/*
 * Read tensors [first, last) in batches of up to READ_CHUNK bytes and
 * IOV_BATCH pieces (one preadv each, so many small tensors cost one system
 * call), then hash each piece; a tensor's hash is checked when its last
 * piece is in.
 */
static void *read_range(void *arg)
{
    job *j = arg;
    const fb__st_header *h = j->h;
    char *scratch = NULL;
    struct iovec iov[IOV_BATCH];
    struct piece { size_t tensor; uint64_t at; size_t n; char *p; } pc[IOV_BATCH];
    fb__hash_ctx *hc = NULL;
    int need_scratch = !j->dest;
    for (size_t k = j->first; !need_scratch && k < j->last; k++)
        need_scratch = !j->dest[k] ||
                       (j->zero && j->zero[k] && !(j->backup && j->backup[k]));
    if (need_scratch && !(scratch = fb__malloc(READ_CHUNK))) {
        j->rc = -ENOMEM;
        snprintf(j->err, sizeof j->err, "%s: out of memory", j->label);
        return NULL;
    }
    size_t i = j->first;
    uint64_t done = 0;
    while (i < j->last && !j->rc) {
        if (j->stop && j->stop(j->stop_arg))
            atomic_store(j->cancel, 1);
        if (atomic_load(j->cancel)) {
            j->rc = -ECANCELED;
            snprintf(j->err, sizeof j->err, "%s: verification stopped", j->label);
            break;
        }
        uint64_t off = h->data_offset + h->tensors[i].begin + done;
        size_t np = 0, total = 0;
        while (i < j->last && np < IOV_BATCH && total < READ_CHUNK) {
            const fb__st_tensor *t = &h->tensors[i];
            /* A header listing part of a shard's tensors (layout.c) may
             * have gaps: one preadv covers adjacent bytes only. */
            if (np && done == 0 && t->begin != h->tensors[i - 1].end)
                break;
            uint64_t len = t->end - t->begin;
            size_t n = len - done < READ_CHUNK - total ? (size_t)(len - done)
                                                        : READ_CHUNK - total;
            int in_place = j->dest && j->dest[i];
            if (in_place && j->zero && j->zero[i] == FB__SHARD_ZERO_TRY &&
                !all_zero((const char *)j->dest[i] + done, n)) {
                if (j->backup && j->backup[i]) {
                    /* Kept aside from here; the zero bytes before, read
                     * in place already, are zero in the backup too, so
                     * that putting it back restores the whole prefix. */
                    memset(j->backup[i], 0, (size_t)done);
                    j->zero[i] = FB__SHARD_ZERO_KEPT;
                } else {
                    j->zero[i] = FB__SHARD_ZERO_NO; /* only verified from here */
                }
            }
            if (in_place && j->zero && j->zero[i] == FB__SHARD_ZERO_NO)
                in_place = 0;
            char *p = in_place ? (char *)j->dest[i] + done : scratch + total;
            pc[np] = (struct piece){i, done, n, p};
            iov[np].iov_base = p;
            iov[np].iov_len = n;
            np++;
            total += n;
            done += n;
            if (done == len) {
                i++;
                done = 0;
            }
        }
        if (j->rc)
            break;
        for (size_t k = 0; (j->backup || j->zero) && k < np; k++) {
            size_t t = pc[k].tensor;
            if (j->zero && j->zero[t] == FB__SHARD_ZERO_TRY) {
                j->saved[t] = (size_t)pc[k].at + pc[k].n; /* were zero */
            } else if (j->backup && j->backup[t] && j->dest && j->dest[t]) {
                memcpy((char *)j->backup[t] + pc[k].at, pc[k].p, pc[k].n);
                j->saved[t] = (size_t)pc[k].at + pc[k].n;
            }
        }
        ssize_t r = preadv_full(j->fd, iov, (int)np, off);
        if (r != (ssize_t)total) {
            j->rc = r < 0 ? (int)r : FB_ECORRUPT;
            snprintf(j->err, sizeof j->err, "%s: tensor \"%.200s\": %s", j->label,
                     h->tensors[pc[0].tensor].name,
                     r < 0 ? strerror((int)-r) : "file truncated");
            break;
        }
        for (size_t k = 0; k < np && !j->rc; k++) {
            const fb__st_tensor *t = &h->tensors[pc[k].tensor];
            if (pc[k].at == 0 && !(hc = fb__hash_new(j->alg))) {
                j->rc = -ENOMEM;
                snprintf(j->err, sizeof j->err, "%s: out of memory", j->label);
                break;
            }
            fb__hash_update(hc, pc[k].p, pc[k].n);
            if (pc[k].at + pc[k].n == t->end - t->begin) {
                j->rc = finish_tensor(j, t, fb__hash_digest(hc));
                fb__hash_free(hc);
                hc = NULL;
            }
        }
        if (j->progress)
            j->progress(j->progress_arg, total);
    }
    fb__hash_free(hc);
    free(scratch);
    return NULL;
}

/* Join thread tid, asking stop every 50 ms meanwhile. */
static void join_polling(pthread_t tid, fb__shard_stop stop, void *stop_arg,
                         atomic_int *cancel)
{
    if (!stop) {
        pthread_join(tid, NULL);
        return;
    }
    for (;;) {
        struct timespec ts = fb__wall_after_ms(50);
        if (pthread_timedjoin_np(tid, NULL, &ts) != ETIMEDOUT)
            return;
        if (stop(stop_arg))
            atomic_store(cancel, 1);
    }
}

static int read_verify(int fd, const fb__st_header *h, const char *label,
                       void *const *dest, void *const *backup, size_t *saved,
                       unsigned char *zero, int threads,
                       fb__shard_progress progress, void *progress_arg,
                       fb__shard_stop stop, void *stop_arg, char *err,
                       size_t err_size);

int fb__shard_read_verify(int fd, const fb__st_header *h, const char *label,
                          void *const *dest, int threads,
                          fb__shard_progress progress, void *progress_arg,
                          fb__shard_stop stop, void *stop_arg, char *err,
                          size_t err_size)
{
    return read_verify(fd, h, label, dest, NULL, NULL, NULL, threads, progress,
                       progress_arg, stop, stop_arg, err, err_size);
}

int fb__shard_read_verify_keep(int fd, const fb__st_header *h, const char *label,
                               void *const *dest, void *const *backup,
                               size_t *saved, unsigned char *zero, int threads,
                               char *err, size_t err_size)
{
    for (size_t i = 0; i < h->ntensors; i++)
        saved[i] = 0;
    return read_verify(fd, h, label, dest, backup, saved, zero, threads, NULL,
                       NULL, NULL, NULL, err, err_size);
}

void fb__shard_undo(const fb__st_header *h, void *const *dest,
                    void *const *backup, const size_t *saved,
                    const unsigned char *zero)
{
    for (size_t i = 0; i < h->ntensors; i++) {
        if (!saved[i])
            continue;
        if (backup && backup[i] && !(zero && zero[i] == FB__SHARD_ZERO_TRY))
            memcpy(dest[i], backup[i], saved[i]);
        else
            memset(dest[i], 0, saved[i]);
    }
}

static int read_verify(int fd, const fb__st_header *h, const char *label,
                       void *const *dest, void *const *backup, size_t *saved,
                       unsigned char *zero, int threads,
                       fb__shard_progress progress, void *progress_arg,
                       fb__shard_stop stop, void *stop_arg, char *err,
                       size_t err_size)
{
    int rc = fb__shard_check_meta(h, label, err, err_size);
    if (rc)
        return rc;
    fb__hash_alg alg = (fb__hash_alg)fb__hash_alg_from_name(
        fb__st_meta_get(h, "firebreak.hash"));
    if (threads < 1)
        threads = 1;
    if (threads > MAX_THREADS)
        threads = MAX_THREADS;
    if ((size_t)threads > h->ntensors)
        threads = h->ntensors ? (int)h->ntensors : 1;
    /* A thread per THREAD_MIN_BYTES at least: starting one costs 0.05-0.1
     * ms on a VM, more than reading and hashing a small shard (the
     * supervisor's check before a relaunch verifies every rank's). */
    if ((uint64_t)threads > h->data_len / THREAD_MIN_BYTES)
        threads = h->data_len >= THREAD_MIN_BYTES ? (int)(h->data_len / THREAD_MIN_BYTES) : 1;
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);

    job jobs[MAX_THREADS];
    atomic_int cancel = 0;
    pthread_t tid[MAX_THREADS];
    int started[MAX_THREADS] = {0};
    uint64_t per = h->data_len / (uint64_t)threads + 1, acc = 0;
    size_t i = 0;
    for (int k = 0; k < threads; k++) {
        job *j = &jobs[k];
        memset(j, 0, sizeof *j);
        j->fd = fd;
        j->h = h;
        j->label = label;
        j->dest = dest;
        j->backup = backup;
        j->saved = saved;
        j->zero = zero;
        j->alg = alg;
        j->progress = progress;
        j->progress_arg = progress_arg;
        j->stop = k == 0 ? stop : NULL;
        j->stop_arg = stop_arg;
        j->cancel = &cancel;
        j->first = i;
        /* Take tensors until this thread's share of bytes is reached. */
        while (i < h->ntensors &&
               (k == threads - 1 || acc < per * (uint64_t)(k + 1) || i == j->first)) {
            acc += h->tensors[i].end - h->tensors[i].begin;
            i++;
        }
        j->last = i;
    }
    for (int k = 1; k < threads; k++)
        started[k] = pthread_create(&tid[k], NULL, read_range, &jobs[k]) == 0;
    read_range(&jobs[0]);
    for (int k = 1; k < threads; k++) {
        if (started[k])
            join_polling(tid[k], stop, stop_arg, &cancel);
        else
            read_range(&jobs[k]);
    }
    for (int k = 0; k < threads; k++)
        if (jobs[k].rc) {
            snprintf(err, err_size, "%s", jobs[k].err);
            return jobs[k].rc;
        }
    return 0;
}
