/*
 * shard.c -- parallel, verified reads of a shard's data (see shard.h).
 *
 * Tensors are split into `threads` runs of consecutive tensors holding
 * about equal bytes, so each thread reads one contiguous range of the
 * file sequentially.  Each tensor is hashed as it is read.
 */
#include "ckpt/shard.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/engine.h"
#include "ckpt/hash.h"

#define READ_CHUNK (8u << 20)
#define MAX_THREADS 16

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

typedef struct job {
    int fd;
    const fb__st_header *h;
    const char *label;
    void *const *dest;
    size_t first, last;         /* tensors [first, last) */
    fb__hash_alg alg;
    fb__shard_progress progress;
    void *progress_arg;
    int rc;
    char err[512];
} job;

static void *read_range(void *arg)
{
    job *j = arg;
    char *scratch = NULL;
    char key[FB__ST_NAME_MAX + 32];
    for (size_t i = j->first; i < j->last && !j->rc; i++) {
        const fb__st_tensor *t = &j->h->tensors[i];
        char *dst = j->dest ? j->dest[i] : NULL;
        uint64_t len = t->end - t->begin;
        if (!dst && len && !scratch && !(scratch = malloc(READ_CHUNK))) {
            j->rc = -ENOMEM;
            break;
        }
        fb__hash_ctx *hc = fb__hash_new(j->alg);
        if (!hc) {
            j->rc = -ENOMEM;
            break;
        }
        for (uint64_t done = 0; done < len;) {
            size_t n = len - done < READ_CHUNK ? (size_t)(len - done) : READ_CHUNK;
            char *p = dst ? dst + done : scratch;
            ssize_t r = pread(j->fd, p, n, (off_t)(j->h->data_offset + t->begin + done));
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0) {
                j->rc = r < 0 ? -errno : FB_ECORRUPT;
                snprintf(j->err, sizeof j->err, "%s: tensor \"%.200s\": %s",
                         j->label, t->name, r < 0 ? strerror(errno) : "file truncated");
                break;
            }
            fb__hash_update(hc, p, (size_t)r);
            done += (uint64_t)r;
            if (j->progress)
                j->progress(j->progress_arg, (uint64_t)r);
        }
        uint64_t want = 0, got = fb__hash_digest(hc);
        fb__hash_free(hc);
        if (j->rc)
            break;
        snprintf(key, sizeof key, "firebreak.hash.%s", t->name);
        if (fb__hash_parse_hex(fb__st_meta_get(j->h, key), &want)) {
            j->rc = FB_EFORMAT;
            snprintf(j->err, sizeof j->err, "%s: metadata %.200s is missing or "
                     "malformed", j->label, key);
        } else if (want != got) {
            j->rc = FB_ECORRUPT;
            snprintf(j->err, sizeof j->err, "%s: tensor \"%.200s\": hash %016llx, "
                     "recorded %016llx (data corrupted)", j->label, t->name,
                     (unsigned long long)got, (unsigned long long)want);
        }
    }
    free(scratch);
    return NULL;
}

int fb__shard_read_verify(int fd, const fb__st_header *h, const char *label,
                          void *const *dest, int threads,
                          fb__shard_progress progress, void *progress_arg,
                          char *err, size_t err_size)
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
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);

    job jobs[MAX_THREADS];
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
        j->alg = alg;
        j->progress = progress;
        j->progress_arg = progress_arg;
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
            pthread_join(tid[k], NULL);
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
