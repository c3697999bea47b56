/*
 * engine.h -- internals of the checkpoint engine shared by its files
 * (engine.c: save path and handles; restore.c; staging.c).
 */
#ifndef FB_CKPT_ENGINE_H
#define FB_CKPT_ENGINE_H

#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "ckpt/hash.h"
#include "ckpt/safetensors.h"
#include "firebreak/firebreak.h"

/* `firebreak.format` of the shards this build writes (docs/checkpoint.md). */
#define FB__CKPT_FORMAT_VERSION "1"

/* Staging memory: pre-faulted at registration, reused by every save, freed
 * by fb_ckpt_close (on the thread that registered, in the usual program). */
typedef struct fb__staging {
    void *ptr;
    size_t bytes;   /* requested                                    */
    size_t mapped;  /* > 0: an mmap of this length; 0: malloc'd     */
} fb__staging;

int fb__staging_alloc(fb__staging *s, size_t bytes);
void fb__staging_free(fb__staging *s);

typedef struct fb__ckpt_tensor {
    char *name;
    fb_dtype dtype;
    int ndim;
    int64_t shape[FB__ST_MAX_DIMS];
    int64_t global_shape[FB__ST_MAX_DIMS];
    int64_t global_offset[FB__ST_MAX_DIMS];
    void *data;
    size_t bytes;
    fb__staging stage;
    void *staging;      /* stage.ptr (async, or a device tensor)        */
    int on_device;      /* data is CUDA device memory (cuda.h)          */
    int pinned;         /* staging registered with CUDA for DMA         */
    uint64_t hash;      /* of the last shard written                    */
} fb__ckpt_tensor;

struct fb_ckpt {
    char dir[PATH_MAX];
    int rank, world_size, keep, async, io_threads;
    int copy_threads;   /* threads for save's host copy (caller included) */
    fb_ckpt_busy on_busy;
    fb_ckpt_on_error on_error;
    fb__hash_alg alg;
    fb__ckpt_tensor *t;
    size_t n, cap;

    /* The writer thread and the one save in flight, under mu. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t writer;
    int writer_started;
    int busy;           /* a save is in flight (copy or write)          */
    int job_ready;      /* staging holds job_step, not yet picked up    */
    int stop;
    uint64_t job_step, job_stall_ns;
    int last_rc;        /* result of the last save                      */
    int sticky_rc;      /* on_error = STOP: first failure, returned after */

    /* Last save's numbers (tests, bench). */
    uint64_t last_stall_ns, last_persist_ns, last_bytes;

    fb_ckpt *next_open; /* list of open handles (flushed at exit)       */
};

/* snprintf into a message buffer, where cutting a long path is fine. */
void fb__ckpt_say(char *buf, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Where the writer reads a tensor's bytes from. */
static inline const char *fb__ckpt_source(const fb__ckpt_tensor *t, int from_staging)
{
    return (from_staging || t->on_device) ? (const char *)t->staging
                                          : (const char *)t->data;
}

/* Wait until no save is in flight; the last save's result. */
int fb__ckpt_wait_idle(fb_ckpt *ck);

#endif
