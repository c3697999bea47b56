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
#include "ckpt/names.h"
#include "ckpt/safetensors.h"
#include "ckpt/tier.h"
#include "firebreak/firebreak.h"

/* `firebreak.format` of the shards this build writes (docs/checkpoint.md). */
#define FB__CKPT_FORMAT_VERSION "1"

/* Staging memory (staging.c): mapped on huge pages at registration and
 * faulted in by a background thread, reused by every save, freed by
 * fb_ckpt_close (on the thread that registered, in the usual program). */
typedef struct fb__staging {
    void *ptr;
    size_t bytes;   /* requested                                    */
    size_t mapped;  /* > 0: an mmap of this length                  */
    size_t phase;   /* ptr - the mmap's start (fb__staging_alloc)   */
    void *slab;     /* else: carved from this shared slab           */
} fb__staging;

/* phase (< 4096): where a staging of its own (4 MiB and up) starts past a
 * page boundary, so that ptr is congruent to the tensor's offset in the
 * shard's data section and the writer can send it to the file with
 * O_DIRECT as it is (store.c); smaller ones come from shared slabs and
 * ignore it. */
int fb__staging_alloc(fb__staging *s, size_t bytes, size_t phase);
void fb__staging_free(fb__staging *s);
/* Staging of its own, faulted in before it returns (small buffers the
 * stall writes). */
int fb__staging_alloc_now(fb__staging *s, size_t bytes);
/* The same background thread collapses [addr, addr + len) into huge pages
 * (contents unchanged; a hint).  fb__bg_cancel drops owner's queued work
 * and waits until none of it runs.  fb__bg_hold(WHAT, 1) keeps the thread
 * from starting work of that kind (FB__BG_ALL: any; FB__BG_COLLAPSE:
 * collapses, which take the page tables for writing) until the matching
 * fb__bg_hold(WHAT, 0): a snapshot's page-table calls would queue behind
 * the thread's.  fb__bg_pending: bytes not done yet. */
enum { FB__BG_ALL = 0, FB__BG_COLLAPSE = 1 };
void fb__bg_collapse(const void *owner, void *addr, size_t len);
void fb__bg_cancel(const void *owner);
void fb__bg_hold(int what, int hold);
size_t fb__bg_pending(void);

/* Write-protect snapshots (protect.c): the plan of what save protects. */
typedef struct fb__wp_span {
    uintptr_t lo, hi;   /* page-aligned, registered with the descriptor   */
    size_t t0, t1;      /* its tensors, [t0, t1) in the plan's order      */
    size_t chunk0;      /* its first chunk                                */
} fb__wp_span;

typedef struct fb__wp {
    int fd;             /* userfaultfd; -1: none (saves copy)             */
    int planned;        /* the plan matches the registered tensors        */
    size_t nt, nspan, nchunk;
    size_t *order;      /* tensor indexes by start address                */
    uintptr_t *start, *end, *maxend; /* per planned tensor, its interior;
                                        maxend: running max of end        */
    fb__wp_span *span;
    unsigned char *done;/* per chunk: copied and released                 */
    size_t *edge_off;   /* per planned tensor: its partial pages' bytes in
                           `edges` (head, then tail)                       */
    uint64_t faults, fault_ns; /* last save: writes that waited; bound on
                                  the time they waited (protect.c)        */
    uint64_t protected_ns;     /* when the last save's protection was set  */
    fb__staging edges;         /* the partial pages, copied in the stall   */
} fb__wp;

typedef struct fb__ckpt_tensor fb__ckpt_tensor;

int fb__wp_open(fb__wp *w, char *why, size_t why_size);
/* [*lo, *hi): the whole pages inside t, what protection covers (may be
 * empty); the bytes before and after are copied in the stall. */
void fb__wp_interior(const fb__ckpt_tensor *t, uintptr_t *lo, uintptr_t *hi);
/* A tensor to protect from now on (its huge pages collapsed); the next
 * plan checks its memory and registers it.  -errno: it is copied. */
int fb__wp_register(fb__wp *w, void *data, size_t bytes);
int fb__wp_plan(fb_ckpt *ck);
/* In save's stall: protect every planned tensor.  On failure nothing is
 * left protected and this save copies. */
int fb__wp_protect(fb_ckpt *ck);
/* In save's stall, after fb__wp_protect: copy the partial pages at the
 * ends of protected tensors aside (into pre-faulted memory; drain puts
 * them into staging). */
void fb__wp_copy_edges(fb_ckpt *ck);
/* The drain's order: the next chunk not copied yet, tensor by tensor as
 * registered, each from its start (protect.c says why); SIZE_MAX when none
 * is left.  (*ti, *at) is the cursor, from (0, 0). */
size_t fb__wp_next_chunk(const fb_ckpt *ck, size_t *ti, uintptr_t *at);
/* On the drainer thread (engine.c; the writer where that thread could not
 * be started): put the partial pages into staging, then copy every chunk,
 * faulted ones first, and release it.  Returns with nothing protected;
 * non-zero: the snapshot was abandoned.  While it runs beside the write,
 * each chunk copied is told to fb__wp_wait_copied's waiters. */
int fb__wp_drain(fb_ckpt *ck);
/* On the writer and its gatherer, while a drain runs beside the write
 * (ck->beside): wait until bytes [off, off + n) of tensor i are in
 * staging.  0, or the drain's error (the snapshot was abandoned: those
 * bytes may never come).  Returns at once for a tensor copied in the
 * stall, or when no drain runs beside. */
int fb__wp_wait_copied(fb_ckpt *ck, size_t i, size_t off, size_t n);
void fb__wp_reset(fb__wp *w);
void fb__wp_close(fb__wp *w);

struct fb__ckpt_tensor {
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
    int wp;             /* snapshot by write protection, not copied     */
    uint64_t hash;      /* of the last shard written                    */
};

struct fb_ckpt {
    char dir[PATH_MAX];
    int rank, world_size, keep, async, io_threads;
    int copy_threads;   /* threads for save's host copy (caller included) */
    uint64_t reread;    /* the last restore's bytes read twice (restore.c) */
    uint64_t aside;     /* ... and bytes it kept aside in staging           */
    fb_ckpt_busy on_busy;
    fb_ckpt_on_error on_error;
    fb__hash_alg alg;
    fb_ckpt_snapshot snapshot; /* as asked: auto, copy or protect       */
    fb__wp wp;
    int job_protected;  /* the save in flight waits for fb__wp_drain    */
    int job_drained;    /* ... which the writer did, the write not yet  */
    int job_beside;     /* ... which the drainer does, beside the write */

    /* The drainer thread (async saves with write protection): it drains a
     * write-protect snapshot from the moment save returns, while the
     * writer writes the shard beside it, chunk by chunk as they are in
     * staging (fb__wp_wait_copied).  Under dmu; the drain's progress in
     * wp.done[] (atomic: written by the drainer, read by the writer). */
    pthread_t drainer;
    int drainer_started;
    pthread_mutex_t dmu;
    pthread_cond_t dcv;
    int drain_pending;  /* a snapshot to drain, not picked up yet       */
    int drain_stop;
    int drain_over;     /* the last one posted is drained (or failed)   */
    int drain_rc;       /* ... with this result                         */
    int edges_placed;   /* its partial pages are in staging             */
    uint64_t drain_step;
    int beside;         /* the writer's: this write's bytes come in as
                           the drainer copies them (gated)             */
    fb__ckpt_tensor *t;
    size_t n, cap;
    fb__names names;    /* index of t[].name (duplicates at registration) */

    /* The writer thread and the one save in flight, under mu. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t writer;
    int writer_started;
    int busy;           /* a save is in flight (copy or write)          */
    int job_ready;      /* staging holds job_step, not yet picked up    */
    int stop;
    int purge;          /* deleted checkpoints' bytes to remove (rank 0) */
    int purge_yielded;  /* the purge under way has let a save go first   */
    int purge_resume;   /* it stopped for a drain only: resumed first   */
    int tmp_swept;      /* this rank's stale temporaries removed in: 1
                           the checkpoint dir, 2 node memory (writer)  */
    uint64_t job_step, job_stall_ns;
    int last_rc;        /* result of the last save                      */
    char last_why[640]; /* its failure's message ("":
                           none), said again to a caller that keeps its
                           messages when wait or save returns it         */
    int sticky_rc;      /* on_error = STOP: first failure, returned after */

    /* Last save's numbers (tests, bench). */
    uint64_t last_stall_ns, last_persist_ns, last_bytes;
    uint64_t last_save_ns;     /* time fb_ckpt_save itself took        */
    uint64_t last_faults;      /* writes that waited for the snapshot  */
    int last_protected;        /* 1: by write protection; 0: copied    */
    uint64_t last_direct_bytes; /* written from their source as they
                                   are, not gathered (store.c)          */
    uint64_t last_writer_cpu_ns; /* CPU the background write took: the
                                    writer's and its helper threads'    */

    fb_ckpt *next_open; /* list of open handles (flushed at exit)       */
    fb__tier tier;      /* node-memory tier (tier.c); mem_dir "": none  */
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

/* The rank's phase now (FB_PHASE_TRAIN when not attached). */
fb_phase fb__ckpt_phase(void);

/* A save is in flight (registering and restoring must wait). */
int fb__ckpt_busy(fb_ckpt *ck);

/* restore.c, for tier.c: try to restore `step` from checkpoint directory
 * dir (0 restored, FB_EMISMATCH or -ENOMEM fatal, other: fall back; a
 * shard failing its hashes is renamed rank-R.corrupt); remove this rank's
 * shard of an abandoned step in dir, when it records this job's world size
 * (a step of a job of another size is left where it is). */
int fb__ckpt_try_step(fb_ckpt *ck, const char *dir, uint64_t step,
                      uint64_t *bytes_out, char *why, size_t why_size);
void fb__ckpt_drop_own_shard(const fb_ckpt *ck, const char *dir, uint64_t step);

/* Wait until no save is in flight; the last save's result. */
int fb__ckpt_wait_idle(fb_ckpt *ck);

#endif
