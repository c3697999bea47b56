/*
 * staging.c -- staging memory for async saves, on huge pages, faulted in
 * off the training thread.
 *
 * The first touch of 1 GiB in 4 KiB pages costs seconds on virtual
 * machines (every page is an exit to the hypervisor); with transparent huge
 * pages it is a clear of 512 pages, about 0.07 s where the host already
 * backs the memory.  Either way it is too slow for the registration of a
 * tensor, which a program pays at every start.  So:
 *
 *  - staging is mapped and advised MADV_HUGEPAGE *before* any page is
 *    touched, its start aligned to 2 MiB so every whole 2 MiB of it can be
 *    a huge page: a tensor of 4 MiB or more in a mapping of its own, the
 *    smaller ones packed into shared 64 MiB slabs (one mapping, huge pages
 *    once more than 2 MiB of it is used -- below, its pages are 4 KiB, so
 *    a small state costs no huge page clear -- instead of a heap
 *    allocation each);
 *  - registration only maps; a background thread (one per process, started
 *    on first use, every signal blocked) populates the mappings with
 *    MADV_POPULATE_WRITE, 4 MiB at a time, and then collapses registered
 *    tensors' interiors into huge pages for protect.c (MADV_COLLAPSE, a
 *    copy of the tensor the kernel makes under its own locks);
 *  - neither changes a byte: populating maps the page the memory already
 *    has or a zeroed one where it had none, so a save may copy into staging
 *    while it is being populated (the copy faults what is not populated
 *    yet), and collapsing moves a tensor's bytes to a huge page as
 *    khugepaged would.  Nothing waits for this work but freeing: a mapping
 *    is unmapped only once the thread is off it (fb__bg_cancel).
 *
 * Slabs are bump-allocated and unmapped when their last staging is freed;
 * the last allocation of a slab freed gives its bytes back.
 */
#include "ckpt/engine.h"
#include "ckpt/store.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif

#define HUGE_BYTES ((size_t)2 << 20)
#define OWN_MAPPING_BYTES ((size_t)4 << 20) /* this size and up: own mapping */
#define SLAB_BYTES ((size_t)64 << 20)
#define PIECE_BYTES ((size_t)4 << 20)       /* background work per lock round */
/* Work starts once nothing was queued for this long (bg_wait_for_work). */
#define QUIET_NS ((uint64_t)20 * 1000000)

/* ------------------------------------------------------------------------
 * The background thread: a queue of ranges to populate or collapse.
 * ---------------------------------------------------------------------- */

typedef struct bg_item {
    const void *owner;  /* cancel key                                   */
    uintptr_t at, end;  /* what is left to do                           */
} bg_item;

/* Items [head, n) of q are pending, the one at head in progress. */
typedef struct bg_queue {
    bg_item *q;
    size_t head, n, cap;
} bg_queue;

enum { POPULATE = 0, COLLAPSE = 1 };
static const int advice_of[2] = {MADV_POPULATE_WRITE, MADV_COLLAPSE};

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* work queued / a piece finished            */
    bg_queue queue[2];      /* [POPULATE], [COLLAPSE]                    */
    int started;
    const void *running;    /* owner of the piece in progress, or NULL   */
    int held[2];            /* > 0: start no piece of [FB__BG_ALL], no
                               collapse [FB__BG_COLLAPSE] (fb__bg_hold)  */
    int populate_ok;        /* 0: MADV_POPULATE_WRITE refused (old kernel) */
    uint64_t quiet_at_ns;   /* start no piece before (CLOCK_MONOTONIC)   */
} bg = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, {{0}, {0}}, 0,
        NULL, {0, 0}, 1, 0};

static uintptr_t page_bytes(void)
{
    long v = sysconf(_SC_PAGESIZE);
    return v > 0 ? (uintptr_t)v : 4096;
}

/* One piece of work, outside the lock. */
static void bg_piece(int advice, uintptr_t lo, uintptr_t hi)
{
    if (advice == MADV_COLLAPSE) {
        (void)madvise((void *)lo, hi - lo, MADV_COLLAPSE); /* a hint: may fail */
        return;
    }
    if (__atomic_load_n(&bg.populate_ok, __ATOMIC_RELAXED)) {
        if (madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE) == 0 || errno != EINVAL)
            return; /* done, or out of memory: then the save faults it */
        __atomic_store_n(&bg.populate_ok, 0, __ATOMIC_RELAXED);
    }
    /* Kernels before 5.14: touch each page with an atomic no-op, which
     * leaves its byte as it is even when a save is copying into it. */
    for (uintptr_t p = lo; p < hi; p += page_bytes())
        __atomic_fetch_or((volatile unsigned char *)p, 0, __ATOMIC_RELAXED);
}

/* The queue to work on next, or -1: none, or held.  Staging first: a
 * first save before it is faulted in pays the faults in the writer's copy,
 * which writes to protected pages wait for (the copy snapshot pays them in
 * the stall itself); a tensor not yet collapsed costs only a slower
 * protection, 4 KiB pages instead of 2 MiB ones. */
static int bg_next(void)
{
    if (bg.held[FB__BG_ALL])
        return -1;
    if (bg.queue[POPULATE].head < bg.queue[POPULATE].n)
        return POPULATE;
    if (bg.queue[COLLAPSE].head < bg.queue[COLLAPSE].n && !bg.held[FB__BG_COLLAPSE])
        return COLLAPSE;
    return -1;
}

/* Under bg.mu: wait until there is work to start and nothing has been
 * queued for QUIET_NS.  A program registers its tensors one call after
 * another; each call maps staging (and, for write protection, advises the
 * tensor), which takes the process's mmap lock for writing, while a piece
 * of populating holds it for reading for milliseconds (more where fresh
 * memory is slow to fault): starting while registrations still arrived
 * made each of them wait behind a piece (162 ms for 1,164 tensors). */
static int bg_wait_for_work(void)
{
    for (;;) {
        int kind = bg_next();
        if (kind < 0) {
            pthread_cond_wait(&bg.cv, &bg.mu);
            continue;
        }
        uint64_t now = fb__now_ns();
        if (now >= bg.quiet_at_ns)
            return kind;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t at = (uint64_t)ts.tv_nsec + (bg.quiet_at_ns - now);
        ts.tv_sec += (time_t)(at / 1000000000u);
        ts.tv_nsec = (long)(at % 1000000000u);
        pthread_cond_timedwait(&bg.cv, &bg.mu, &ts);
    }
}

static void *bg_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&bg.mu);
    for (;;) {
        int kind = bg_wait_for_work();
        bg_queue *qu = &bg.queue[kind];
        bg_item *it = &qu->q[qu->head];
        const void *owner = it->owner;
        uintptr_t lo = it->at;
        uintptr_t hi = it->end - lo > PIECE_BYTES ? lo + PIECE_BYTES : it->end;
        it->at = hi;
        if (hi == it->end && ++qu->head == qu->n) /* taken whole: off the queue */
            qu->head = qu->n = 0;
        if (hi == lo) /* cancelled */
            continue;
        bg.running = owner;
        pthread_mutex_unlock(&bg.mu);
        bg_piece(advice_of[kind], lo, hi);
        pthread_mutex_lock(&bg.mu);
        bg.running = NULL;
        pthread_cond_broadcast(&bg.cv);
    }
    return NULL;
}

/* fork() holds bg.mu, so the child's copy of the queue is whole; the
 * child has no background thread, so its queue starts empty. */
static void bg_prepare(void) { pthread_mutex_lock(&bg.mu); }
static void bg_parent(void) { pthread_mutex_unlock(&bg.mu); }
static void bg_child(void)
{
    pthread_mutex_init(&bg.mu, NULL);
    pthread_cond_init(&bg.cv, NULL);
    bg.queue[POPULATE].head = bg.queue[POPULATE].n = 0;
    bg.queue[COLLAPSE].head = bg.queue[COLLAPSE].n = 0;
    bg.started = 0;
    bg.running = NULL;
    bg.held[0] = bg.held[1] = 0;
    bg.quiet_at_ns = 0;
}

static pthread_once_t bg_atfork_once = PTHREAD_ONCE_INIT;
static void bg_atfork(void) { pthread_atfork(bg_prepare, bg_parent, bg_child); }

/* Queue [addr, addr + len) for `advice`; under bg.mu.  Where no thread can
 * be started or no memory is left the work is skipped: it only saves
 * faults later. */
static void bg_queue_locked(const void *owner, int kind, void *addr, size_t len)
{
    if (!len)
        return;
    if (!bg.started) {
        pthread_once(&bg_atfork_once, bg_atfork);
        pthread_t tid;
        pthread_attr_t attr;
        sigset_t all, old;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        int rc = pthread_create(&tid, &attr, bg_main, NULL);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        pthread_attr_destroy(&attr);
        if (rc)
            return;
        bg.started = 1;
    }
    bg_queue *qu = &bg.queue[kind];
    if (qu->n == qu->cap && qu->head > qu->cap / 2) {
        /* Mostly done: move the pending ones down instead of growing (the
         * thread keeps no pointer into the queue while it works). */
        memmove(qu->q, qu->q + qu->head, (qu->n - qu->head) * sizeof *qu->q);
        qu->n -= qu->head;
        qu->head = 0;
    }
    if (qu->n == qu->cap) {
        size_t cap = qu->cap ? qu->cap * 2 : 64;
        bg_item *nq = realloc(qu->q, cap * sizeof *nq);
        if (!nq)
            return;
        qu->q = nq;
        qu->cap = cap;
    }
    qu->q[qu->n++] = (bg_item){owner, (uintptr_t)addr, (uintptr_t)addr + len};
    bg.quiet_at_ns = fb__now_ns() + QUIET_NS;
    pthread_cond_broadcast(&bg.cv);
}

void fb__bg_collapse(const void *owner, void *addr, size_t len)
{
    pthread_mutex_lock(&bg.mu);
    bg_queue_locked(owner, COLLAPSE, addr, len);
    pthread_mutex_unlock(&bg.mu);
}

void fb__bg_cancel(const void *owner)
{
    pthread_mutex_lock(&bg.mu);
    for (int kind = 0; kind < 2; kind++)
        for (size_t i = bg.queue[kind].head; i < bg.queue[kind].n; i++)
            if (bg.queue[kind].q[i].owner == owner) /* nothing left to do */
                bg.queue[kind].q[i].at = bg.queue[kind].q[i].end;
    while (bg.running == owner)
        pthread_cond_wait(&bg.cv, &bg.mu);
    pthread_mutex_unlock(&bg.mu);
}

void fb__bg_hold(int what, int hold)
{
    pthread_mutex_lock(&bg.mu);
    bg.held[what] += hold ? 1 : -1;
    if (!bg.held[what])
        pthread_cond_broadcast(&bg.cv);
    pthread_mutex_unlock(&bg.mu);
}

size_t fb__bg_pending(void)
{
    pthread_mutex_lock(&bg.mu);
    size_t left = 0;
    for (int kind = 0; kind < 2; kind++)
        for (size_t i = bg.queue[kind].head; i < bg.queue[kind].n; i++)
            left += bg.queue[kind].q[i].end - bg.queue[kind].q[i].at;
    if (bg.running)
        left++;
    pthread_mutex_unlock(&bg.mu);
    return left;
}

/* ------------------------------------------------------------------------
 * Mappings and slabs
 * ---------------------------------------------------------------------- */

/* len bytes (a multiple of the page size) starting on a 2 MiB boundary;
 * NULL when out of memory. */
static void *map_aligned(size_t len)
{
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    if ((uintptr_t)p % HUGE_BYTES) {
        /* Not aligned by the kernel (before Linux 6.7, or a length that is
         * not a multiple of 2 MiB): map 2 MiB more and trim. */
        munmap(p, len);
        char *q = mmap(NULL, len + HUGE_BYTES, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (q == MAP_FAILED)
            return NULL;
        uintptr_t a = ((uintptr_t)q + HUGE_BYTES - 1) & ~(uintptr_t)(HUGE_BYTES - 1);
        if (a > (uintptr_t)q)
            munmap(q, a - (uintptr_t)q);
        if ((uintptr_t)q + len + HUGE_BYTES > a + len)
            munmap((void *)(a + len), (uintptr_t)q + len + HUGE_BYTES - (a + len));
        p = (void *)a;
    }
    return p;
}

/* map_aligned, advised MADV_HUGEPAGE before any page is touched. */
static void *map_huge(size_t len)
{
    void *p = map_aligned(len);
    if (p)
        (void)madvise(p, len, MADV_HUGEPAGE); /* advisory: THP may be off */
    return p;
}

typedef struct slab {
    struct slab *next;
    char *base;
    size_t used;        /* bump pointer                                 */
    size_t queued;      /* populating queued below this                 */
    size_t live;        /* allocations not yet freed                    */
    int huge;           /* advised MADV_HUGEPAGE (past its first 2 MiB) */
} slab;

static slab *slabs;     /* under bg.mu; the newest first                */

/* phase (a multiple of 64 below 4096, or SIZE_MAX for none): where in its
 * 4 KiB page the allocation starts; up to 4 KiB before it is left unused. */
static void *slab_alloc(size_t bytes, size_t phase, slab **out)
{
    size_t len = (bytes + 63) & ~(size_t)63;
    if (!len)
        len = 64;
    pthread_mutex_lock(&bg.mu);
    slab *s = slabs;
    size_t gap = 0;
    if (s && phase != SIZE_MAX)
        gap = (phase - (s->used & 4095)) & 4095;
    if (!s || SLAB_BYTES - s->used < len + gap) {
        gap = phase != SIZE_MAX ? phase : 0;
        s = calloc(1, sizeof *s);
        if (s && !(s->base = map_aligned(SLAB_BYTES))) {
            free(s);
            s = NULL;
        }
        if (!s) {
            pthread_mutex_unlock(&bg.mu);
            return NULL;
        }
        s->next = slabs;
        slabs = s;
    }
    s->used += gap;
    void *p = s->base + s->used;
    s->used += len;
    s->live++;
    if (s->used > s->queued) {
        /* Only what is handed out.  Up to 2 MiB of it in 4 KiB pages: a
         * program with a few small tensors gets those pages, not a huge
         * page cleared (256 ranks of such a program on a node cleared
         * 512 MiB at start-up, a third of their CPU on this VM's fresh
         * memory).  Past 2 MiB the slab takes huge pages, populated 2 MiB
         * at a time (its first 2 MiB stay as they are). */
        size_t step = page_bytes();
        if (s->used > HUGE_BYTES) {
            if (!s->huge)
                (void)madvise(s->base, SLAB_BYTES, MADV_HUGEPAGE);
            s->huge = 1;
            step = HUGE_BYTES;
        }
        size_t upto = (s->used + step - 1) & ~(step - 1);
        bg_queue_locked(s, POPULATE, s->base + s->queued, upto - s->queued);
        s->queued = upto;
    }
    pthread_mutex_unlock(&bg.mu);
    *out = s;
    return p;
}

static void slab_free(slab *s, void *p, size_t bytes)
{
    size_t len = (bytes + 63) & ~(size_t)63;
    if (!len)
        len = 64;
    pthread_mutex_lock(&bg.mu);
    if ((char *)p + len == s->base + s->used)
        s->used -= len; /* the last one: its bytes can be handed out again */
    int empty = --s->live == 0;
    if (empty)
        for (slab **pp = &slabs; *pp; pp = &(*pp)->next)
            if (*pp == s) {
                *pp = s->next;
                break;
            }
    pthread_mutex_unlock(&bg.mu);
    if (!empty)
        return;
    fb__bg_cancel(s);
    munmap(s->base, SLAB_BYTES);
    free(s);
}

int fb__staging_alloc(fb__staging *s, size_t bytes, size_t phase)
{
    memset(s, 0, sizeof *s);
    if (bytes < OWN_MAPPING_BYTES) {
        /* Below FB__CKPT_DIRECT_MIN the writer gathers anyway (store.h):
         * packed; above, at the phase asked for when it is 64-byte
         * aligned (a tensor's offset in the data section mostly is). */
        size_t at = bytes >= FB__CKPT_DIRECT_MIN && !(phase & 63) ? phase & 4095 : SIZE_MAX;
        slab *sl;
        if (!(s->ptr = slab_alloc(bytes, at, &sl)))
            return -ENOMEM;
        s->slab = sl;
        s->bytes = bytes;
        return 0;
    }
    phase &= page_bytes() - 1;
    size_t len = (phase + bytes + page_bytes() - 1) & ~(size_t)(page_bytes() - 1);
    void *p = map_huge(len);
    if (!p)
        return -ENOMEM;
    s->ptr = (char *)p + phase;
    s->bytes = bytes;
    s->mapped = len;
    s->phase = phase;
    pthread_mutex_lock(&bg.mu);
    bg_queue_locked(p, POPULATE, p, len);
    pthread_mutex_unlock(&bg.mu);
    return 0;
}

int fb__staging_alloc_now(fb__staging *s, size_t bytes)
{
    memset(s, 0, sizeof *s);
    size_t len = (bytes + page_bytes() - 1) & ~(size_t)(page_bytes() - 1);
    void *p = map_huge(len ? len : page_bytes());
    if (!p)
        return -ENOMEM;
    s->ptr = p;
    s->bytes = bytes;
    s->mapped = len ? len : page_bytes();
    bg_piece(MADV_POPULATE_WRITE, (uintptr_t)p, (uintptr_t)p + s->mapped);
    return 0;
}

void fb__staging_free(fb__staging *s)
{
    if (!s->ptr)
        return;
    if (s->slab) {
        slab_free(s->slab, s->ptr, s->bytes);
    } else {
        char *base = (char *)s->ptr - s->phase;
        fb__bg_cancel(base);
        munmap(base, s->mapped);
    }
    memset(s, 0, sizeof *s);
}
