/*
 * protect.c -- write-protect snapshots: save without copying in the stall.
 *
 * Instead of copying every host tensor into staging before fb_ckpt_save
 * returns, save write-protects the tensors' pages with userfaultfd
 * (UFFDIO_WRITEPROTECT, a page-table walk: microseconds for 1 GiB in huge
 * pages) and returns.  The drainer thread (engine.c) then copies the
 * tensors into staging in 2 MiB chunks, lifting the protection from each
 * chunk once it is copied, while the writer writes the chunks already
 * copied (fb__wp_wait_copied).  A thread that writes a page not yet copied
 * blocks in the kernel and the drainer copies that chunk first, then
 * releases it: every byte reaches staging as it was when save was called,
 * which is the snapshot the copy would have taken.  QEMU's background
 * snapshots use the same mechanism.
 *
 * Only the whole pages inside a tensor are protected; the partial pages at
 * its ends (< 4 KiB each) are copied in the stall.  So a protected page
 * holds nothing but tensor bytes: never a neighbour in the heap, never
 * firebreak's own state, nothing the writer itself writes while copying.
 *
 * Rules that keep it safe:
 *  - Pages are protected only while the drainer runs drain(); drain returns
 *    only once no page is protected (or the descriptor, and with it every
 *    protection, is gone).
 *  - drain() calls nothing that could take a lock a blocked thread holds:
 *    no malloc, no stdio; memcpy, ioctl and the drainer's own lock (dmu,
 *    held by the writer's threads only to look at chunk flags).
 *    Everything it needs was allocated by plan() on the training thread.
 *  - The descriptor is created without UFFD_USER_MODE_ONLY, so a write by
 *    the kernel (read(2) into a tensor) waits like any other; where only a
 *    user-mode descriptor is allowed the engine copies instead.
 *  - The drainer and writer threads block every signal (engine.c), so no
 *    handler runs on them while pages are protected.
 */
#include "ckpt/engine.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/util.h"

#ifdef __linux__
#include <linux/userfaultfd.h>
#endif

#if defined(__linux__) && defined(SYS_userfaultfd) && defined(UFFDIO_WRITEPROTECT)
#define FB_HAVE_UFFD_WP 1
#endif

#define WP_CHUNK ((uintptr_t)2 << 20)

static uintptr_t page_size(void)
{
    static uintptr_t ps;
    if (!ps) {
        long v = sysconf(_SC_PAGESIZE);
        ps = v > 0 ? (uintptr_t)v : 4096;
    }
    return ps;
}

static uintptr_t down(uintptr_t a, uintptr_t to) { return a & ~(to - 1); }
static uintptr_t up(uintptr_t a, uintptr_t to) { return (a + to - 1) & ~(to - 1); }

void fb__wp_interior(const fb__ckpt_tensor *t, uintptr_t *lo, uintptr_t *hi)
{
    uintptr_t a = (uintptr_t)t->data, ps = page_size();
    *lo = up(a, ps);
    *hi = down(a + t->bytes, ps);
    if (*hi < *lo)
        *hi = *lo;
}

void fb__wp_reset(fb__wp *w)
{
    free(w->order);
    free(w->start);
    free(w->end);
    free(w->maxend);
    free(w->span);
    free(w->done);
    free(w->edge_off);
    fb__staging_free(&w->edges);
    w->edge_off = NULL;
    w->order = NULL;
    w->start = w->end = w->maxend = NULL;
    w->span = NULL;
    w->done = NULL;
    w->nt = w->nspan = w->nchunk = 0;
    w->planned = 0;
}

/* Drops every registration (and protection); the drain's last resort. */
static void drop_fd(fb__wp *w)
{
    if (w->fd >= 0)
        close(w->fd); /* first: then nothing is protected while we free */
    w->fd = -1;
    fb__wp_reset(w);
}

void fb__wp_close(fb__wp *w)
{
    fb__bg_cancel(w); /* no collapse of the tensors after close */
    drop_fd(w);
}

#ifdef FB_HAVE_UFFD_WP

#ifndef UFFD_FEATURE_WP_UNPOPULATED
#define UFFD_FEATURE_WP_UNPOPULATED (1 << 13)
#endif

int fb__wp_open(fb__wp *w, char *why, size_t why_size)
{
    w->fd = -1;
    /* Not UFFD_USER_MODE_ONLY: kernel-mode writes must wait too. */
    int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
    if (fd < 0 && errno == EPERM) {
        /* Without CAP_SYS_PTRACE: /dev/userfaultfd, where access to it was
         * granted (Linux >= 6.1). */
        int dev = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
        if (dev >= 0) {
            fd = ioctl(dev, _IO(0xAA, 0x00) /* USERFAULTFD_IOC_NEW */,
                       O_CLOEXEC | O_NONBLOCK);
            close(dev);
        } else {
            errno = EPERM;
        }
    }
    if (fd < 0) {
        int e = errno;
        fb__ckpt_say(why, why_size, "userfaultfd: %s%s", strerror(e),
                     e == EPERM ? " (needs CAP_SYS_PTRACE, access to "
                                  "/dev/userfaultfd, or "
                                  "vm.unprivileged_userfaultfd=1)" : "");
        return -e;
    }
    /* WP_UNPOPULATED: pages never touched (or swapped out) are protected
     * too, so a first write to one cannot slip past the snapshot. */
    struct uffdio_api api = {.api = UFFD_API,
                             .features = UFFD_FEATURE_PAGEFAULT_FLAG_WP |
                                         UFFD_FEATURE_WP_UNPOPULATED};
    if (ioctl(fd, UFFDIO_API, &api)) {
        int e = errno;
        close(fd);
        fb__ckpt_say(why, why_size, "userfaultfd: write-protect faults on "
                     "unpopulated anonymous memory not supported (Linux >= 6.4 "
                     "needed): %s", strerror(e));
        return -e;
    }
    w->fd = fd;
    return 0;
}

/* Register a span; -errno when its memory cannot be write-protected. */
static int register_range(int fd, uintptr_t lo, uintptr_t hi)
{
    struct uffdio_register r = {.range = {.start = lo, .len = hi - lo},
                                .mode = UFFDIO_REGISTER_MODE_WP};
    return ioctl(fd, UFFDIO_REGISTER, &r) ? -errno : 0;
}

int fb__wp_register(fb__wp *w, void *data, size_t bytes)
{
    if (w->fd < 0 || !bytes)
        return -EINVAL;
    /* Huge pages make protecting 1 GiB cost microseconds instead of a walk
     * over 262,144 page-table entries; the tensor's aligned interior is
     * collapsed into them (contents unchanged; fails harmlessly where THP
     * is off).  That is a copy of the tensor, so the background thread
     * does it (staging.c), not registration: a page protected before it
     * gets there is simply not collapsed. */
    uintptr_t a = (uintptr_t)data;
    uintptr_t hlo = up(a, WP_CHUNK), hhi = down(a + bytes, WP_CHUNK);
    if (hhi > hlo && hhi - hlo >= 2 * WP_CHUNK) {
        (void)madvise((void *)hlo, hhi - hlo, MADV_HUGEPAGE);
        fb__bg_collapse(w, (void *)hlo, hhi - hlo);
    }
    w->planned = 0; /* the plan checks and registers it */
    return 0;
}

/* The process's private anonymous mappings, from /proc/self/maps, sorted
 * (the kernel lists them in address order). */
typedef struct vma { uintptr_t lo, hi; } vma;

static int load_private_anon(vma **out, size_t *n_out)
{
    FILE *f = fopen("/proc/self/maps", "re");
    if (!f)
        return -errno;
    size_t n = 0, cap = 256;
    vma *v = malloc(cap * sizeof *v);
    char line[4096];
    while (v && fgets(line, sizeof line, f)) {
        unsigned long lo, hi, off, ino;
        char perms[8];
        unsigned maj, mnr;
        if (sscanf(line, "%lx-%lx %7s %lx %x:%x %lu", &lo, &hi, perms, &off,
                   &maj, &mnr, &ino) != 7 || hi <= lo)
            continue;
        /* Private, writable, no file behind: nothing but this process can
         * change it.  (Shared or file-backed memory could be written through
         * another mapping, past the protection.) */
        if (ino != 0 || strlen(perms) < 4 || perms[1] != 'w' || perms[3] != 'p')
            continue;
        if (n && v[n - 1].hi == lo) { /* adjacent: one range */
            v[n - 1].hi = hi;
            continue;
        }
        if (n == cap) {
            vma *nv = realloc(v, (cap *= 2) * sizeof *v);
            if (!nv) {
                free(v);
                v = NULL;
                break;
            }
            v = nv;
        }
        v[n++] = (vma){lo, hi};
    }
    fclose(f);
    if (!v)
        return -ENOMEM;
    *out = v;
    *n_out = n;
    return 0;
}

static int covered(const vma *v, size_t n, uintptr_t lo, uintptr_t hi)
{
    size_t a = 0, b = n;
    while (a < b) { /* first range ending after lo */
        size_t m = (a + b) / 2;
        if (v[m].hi <= lo)
            a = m + 1;
        else
            b = m;
    }
    return a < n && v[a].lo <= lo && v[a].hi >= hi;
}

static int by_start(const void *pa, const void *pb, void *arg)
{
    const uintptr_t *start = arg;
    uintptr_t a = start[*(const size_t *)pa], b = start[*(const size_t *)pb];
    return a < b ? -1 : a > b;
}

static int build_plan(fb_ckpt *ck);

/*
 * The chunks of the tensors marked wp: spans of merged page ranges, each
 * registered, cut at 2 MiB boundaries.  A span that is not wholly private
 * anonymous memory, or that cannot be registered, demotes its tensors to
 * the copy.  Runs on the training thread (at the first save after a
 * registration, or after a tensor's memory was replaced); drain() then
 * allocates nothing.
 */
int fb__wp_plan(fb_ckpt *ck)
{
    fb__wp *w = &ck->wp;
    if (w->planned)
        return 0;
    vma *v;
    size_t nv;
    int rc = load_private_anon(&v, &nv);
    if (rc)
        return rc;
    for (size_t i = 0; i < ck->n; i++) {
        fb__ckpt_tensor *t = &ck->t[i];
        uintptr_t lo, hi;
        fb__wp_interior(t, &lo, &hi);
        if (t->wp && (hi == lo || !covered(v, nv, lo, hi)))
            t->wp = 0;
    }
    free(v);
    for (;;) {
        int demoted = 0;
        if ((rc = build_plan(ck)))
            break;
        for (size_t s = 0; s < w->nspan; s++)
            if (register_range(w->fd, w->span[s].lo, w->span[s].hi)) {
                for (size_t k = w->span[s].t0; k < w->span[s].t1; k++)
                    ck->t[w->order[k]].wp = 0;
                demoted = 1;
            }
        if (!demoted)
            break;
        w->planned = 0;
    }
    return rc;
}

static int build_plan(fb_ckpt *ck)
{
    fb__wp *w = &ck->wp;
    fb__wp_reset(w);
    size_t n = 0;
    for (size_t i = 0; i < ck->n; i++)
        n += ck->t[i].wp;
    if (!n) {
        w->planned = 1;
        return 0;
    }
    size_t *idx = malloc(n * sizeof *idx);
    uintptr_t *all_start = malloc(ck->n * sizeof *all_start);
    w->order = malloc(n * sizeof *w->order);
    w->start = malloc(n * sizeof *w->start);
    w->end = malloc(n * sizeof *w->end);
    w->maxend = malloc(n * sizeof *w->maxend);
    w->span = malloc(n * sizeof *w->span);
    if (!idx || !all_start || !w->order || !w->start || !w->end || !w->maxend ||
        !w->span) {
        free(idx);
        free(all_start);
        fb__wp_reset(w);
        return -ENOMEM;
    }
    for (size_t i = 0, k = 0; i < ck->n; i++) {
        uintptr_t hi;
        fb__wp_interior(&ck->t[i], &all_start[i], &hi);
        if (ck->t[i].wp)
            idx[k++] = i;
    }
    qsort_r(idx, n, sizeof *idx, by_start, all_start);
    free(all_start);
    size_t ns = 0, chunks = 0;
    for (size_t k = 0; k < n; k++) {
        w->order[k] = idx[k];
        fb__wp_interior(&ck->t[idx[k]], &w->start[k], &w->end[k]);
        w->maxend[k] = k && w->maxend[k - 1] > w->end[k] ? w->maxend[k - 1] : w->end[k];
        uintptr_t lo = w->start[k], hi = w->end[k];
        if (ns && lo <= w->span[ns - 1].hi) { /* touching or overlapping */
            if (hi > w->span[ns - 1].hi)
                w->span[ns - 1].hi = hi;
            w->span[ns - 1].t1 = k + 1;
            continue;
        }
        w->span[ns++] = (fb__wp_span){.lo = lo, .hi = hi, .t0 = k, .t1 = k + 1};
    }
    for (size_t s = 0; s < ns; s++) {
        fb__wp_span *sp = &w->span[s];
        sp->chunk0 = chunks;
        chunks += (up(sp->hi, WP_CHUNK) - down(sp->lo, WP_CHUNK)) / WP_CHUNK;
    }
    free(idx);
    w->nt = n;
    w->nspan = ns;
    w->nchunk = chunks;
    /* The partial pages go aside in the stall, into memory faulted in
     * now: staging may not be faulted in yet (staging.c), and a first
     * touch there would be a huge page cleared inside the stall. */
    size_t edge_bytes = 0;
    if ((w->edge_off = malloc(n * sizeof *w->edge_off)))
        for (size_t k = 0; k < n; k++) {
            const fb__ckpt_tensor *t = &ck->t[w->order[k]];
            w->edge_off[k] = edge_bytes;
            edge_bytes += t->bytes - (w->end[k] - w->start[k]);
        }
    if (!(w->done = calloc(chunks, 1)) || !w->edge_off ||
        fb__staging_alloc_now(&w->edges, edge_bytes)) {
        fb__wp_reset(w);
        return -ENOMEM;
    }
    w->planned = 1;
    return 0;
}

static int wp_range(int fd, uintptr_t lo, uintptr_t len, int protect)
{
    struct uffdio_writeprotect wp = {
        .range = {.start = lo, .len = len},
        .mode = protect ? UFFDIO_WRITEPROTECT_MODE_WP : 0};
    for (int tries = 0; tries < 100; tries++) {
        if (!ioctl(fd, UFFDIO_WRITEPROTECT, &wp))
            return 0;
        if (errno != EAGAIN && errno != EINTR)
            return -errno;
    }
    return -EAGAIN;
}

int fb__wp_protect(fb_ckpt *ck)
{
    fb__wp *w = &ck->wp;
    memset(w->done, 0, w->nchunk);
    w->faults = w->fault_ns = 0;
    /* While this protects, the background thread (staging.c) starts
     * nothing; until drain has released the last chunk, no collapse
     * either (each would hold up a release).  It may populate staging
     * meanwhile, ahead of drain's copy. */
    fb__bg_hold(FB__BG_ALL, 1);
    for (size_t s = 0; s < w->nspan; s++) {
        int rc = wp_range(w->fd, w->span[s].lo, w->span[s].hi - w->span[s].lo, 1);
        if (rc) {
            /* A tensor's memory was unmapped or replaced since it was
             * registered: undo, and copy this time. */
            int stuck = 0;
            for (size_t u = 0; u <= s && !stuck; u++)
                stuck = wp_range(w->fd, w->span[u].lo,
                                 w->span[u].hi - w->span[u].lo, 0) != 0 && u < s;
            if (stuck)
                drop_fd(w); /* last resort: drops every protection */
            else
                w->planned = 0;
            fb__bg_hold(FB__BG_ALL, 0);
            return rc;
        }
    }
    w->protected_ns = fb__now_ns();
    fb__bg_hold(FB__BG_COLLAPSE, 1);
    fb__bg_hold(FB__BG_ALL, 0);
    return 0;
}

void fb__wp_copy_edges(fb_ckpt *ck)
{
    fb__wp *w = &ck->wp;
    char *out = w->edges.ptr;
    for (size_t k = 0; k < w->nt; k++) {
        const fb__ckpt_tensor *t = &ck->t[w->order[k]];
        uintptr_t a = (uintptr_t)t->data, head = w->start[k] - a;
        memcpy(out + w->edge_off[k], t->data, head);
        memcpy(out + w->edge_off[k] + head, (const void *)w->end[k],
               a + t->bytes - w->end[k]);
    }
}

/* At the drain's start: the partial pages into staging. */
static void place_edges(fb_ckpt *ck)
{
    fb__wp *w = &ck->wp;
    const char *in = w->edges.ptr;
    for (size_t k = 0; k < w->nt; k++) {
        const fb__ckpt_tensor *t = &ck->t[w->order[k]];
        uintptr_t a = (uintptr_t)t->data, head = w->start[k] - a;
        memcpy(t->staging, in + w->edge_off[k], head);
        memcpy((char *)t->staging + (w->end[k] - a), in + w->edge_off[k] + head,
               a + t->bytes - w->end[k]);
    }
}

/* Chunk c's address range [*lo, *hi) and its span. */
static const fb__wp_span *chunk_range(const fb__wp *w, size_t c, uintptr_t *lo,
                                      uintptr_t *hi)
{
    size_t a = 0, b = w->nspan;
    while (b - a > 1) { /* last span with chunk0 <= c */
        size_t m = (a + b) / 2;
        if (w->span[m].chunk0 <= c)
            a = m;
        else
            b = m;
    }
    const fb__wp_span *sp = &w->span[a];
    uintptr_t base = down(sp->lo, WP_CHUNK) + (c - sp->chunk0) * WP_CHUNK;
    *lo = base > sp->lo ? base : sp->lo;
    *hi = base + WP_CHUNK < sp->hi ? base + WP_CHUNK : sp->hi;
    return sp;
}

/* The chunk holding addr, or SIZE_MAX when no span holds it. */
static size_t chunk_of(const fb__wp *w, uintptr_t addr)
{
    size_t a = 0, b = w->nspan;
    while (a < b) { /* first span with hi > addr */
        size_t m = (a + b) / 2;
        if (w->span[m].hi <= addr)
            a = m + 1;
        else
            b = m;
    }
    if (a == w->nspan || addr < w->span[a].lo)
        return SIZE_MAX;
    const fb__wp_span *sp = &w->span[a];
    return sp->chunk0 + (down(addr, WP_CHUNK) - down(sp->lo, WP_CHUNK)) / WP_CHUNK;
}

/* Wake the writer waiting in fb__wp_wait_copied, if any.  dmu is only
 * ever held for a few loads by the writer's threads, never by a thread
 * that writes tensors, so taking it here cannot wait on a blocked one. */
static void tell_copied(fb_ckpt *ck)
{
    if (!ck->drainer_started)
        return;
    pthread_mutex_lock(&ck->dmu);
    pthread_cond_broadcast(&ck->dcv);
    pthread_mutex_unlock(&ck->dmu);
}

/* Copy chunk c's tensor bytes to staging, then lift its protection. */
static int copy_release(fb_ckpt *ck, size_t c)
{
    fb__wp *w = &ck->wp;
    uintptr_t lo, hi;
    const fb__wp_span *sp = chunk_range(w, c, &lo, &hi);
    size_t a = sp->t0, b = sp->t1;
    while (a < b) { /* first tensor (by start) whose max end passes lo */
        size_t m = (a + b) / 2;
        if (w->maxend[m] <= lo)
            a = m + 1;
        else
            b = m;
    }
    for (size_t k = a; k < sp->t1 && w->start[k] < hi; k++) {
        uintptr_t from = w->start[k] > lo ? w->start[k] : lo;
        uintptr_t to = w->end[k] < hi ? w->end[k] : hi;
        if (to > from) {
            fb__ckpt_tensor *t = &ck->t[w->order[k]];
            memcpy((char *)t->staging + (from - (uintptr_t)t->data), (const void *)from,
                   to - from);
        }
    }
    /* In staging now: the write beside may take these bytes. */
    __atomic_store_n(&w->done[c], 1, __ATOMIC_RELEASE);
    tell_copied(ck);
    uintptr_t ps = page_size(), plo = down(lo, ps), phi = up(hi, ps);
    int rc = wp_range(w->fd, plo, phi - plo, 0);
    if (rc) {
        /* Unregistering clears the protection and wakes any waiter. */
        struct uffdio_range r = {.start = plo, .len = phi - plo};
        if (ioctl(w->fd, UFFDIO_UNREGISTER, &r))
            return rc;
        w->planned = 0;
    }
    return 0;
}

/*
 * The next chunk not copied yet, in the order a step writes: tensor by
 * tensor as they were registered (an optimizer walks its parameters, and
 * a model its layers, in the order they were made), each from its start;
 * SIZE_MAX when none is left.  (*ti, *at) is the cursor.
 *
 * Not by address: a program's large tensors are mapped top down (glibc
 * mmaps every allocation over its threshold, and the kernel places each
 * new mapping below the last), so ascending addresses are often the
 * reverse of the order the step writes.  Copying ahead of the step in its
 * own order, the copy made while the step reads (a forward pass, or
 * bench_ckpt's reading step) is exactly what the step writes first.
 * Measured (bench_ckpt, 1 GiB, malloc'd tensors, 3 runs each, old and new
 * alternated): the reading step's stall 0.010-0.016 s with no write
 * waiting, against 0.037-0.057 s by ascending address; the overwriting
 * step's 0.009-0.016 s against 0.080-0.106 s (docs/bench.md, "The
 * checkpoint stall").
 */
size_t fb__wp_next_chunk(const fb_ckpt *ck, size_t *ti, uintptr_t *at)
{
    const fb__wp *w = &ck->wp;
    for (; *ti < ck->n; (*ti)++, *at = 0) {
        const fb__ckpt_tensor *t = &ck->t[*ti];
        if (!t->wp)
            continue;
        uintptr_t lo, hi;
        fb__wp_interior(t, &lo, &hi);
        if (*at < lo)
            *at = lo;
        for (; *at < hi; *at = down(*at, WP_CHUNK) + WP_CHUNK) {
            size_t c = chunk_of(w, *at);
            if (c != SIZE_MAX && !w->done[c])
                return c;
        }
    }
    return SIZE_MAX;
}

#ifdef FB_TEST_HOOKS
/* FIREBREAK_CKPT_DRAIN_HOLD=K:PATH: the drain stops after K chunks copied
 * in its own order until PATH exists (at most 60 s), so a test sees what
 * the write beside it did meanwhile.  Read with getenv and strtoul: no
 * allocation, as everything in the drain. */
typedef struct drain_hold {
    size_t after, copied;
    char path[256];
} drain_hold;

static void hold_read(drain_hold *h)
{
    const char *v = getenv("FIREBREAK_CKPT_DRAIN_HOLD");
    char *end;
    h->after = h->copied = 0;
    if (!v)
        return;
    unsigned long k = strtoul(v, &end, 10);
    if (*end != ':' || !k || strlen(end + 1) >= sizeof h->path)
        return;
    memcpy(h->path, end + 1, strlen(end + 1) + 1);
    h->after = k;
}

static void hold_after_copy(drain_hold *h)
{
    if (!h->after || ++h->copied != h->after)
        return;
    for (int ms = 0; ms < 60000 && access(h->path, F_OK); ms++)
        usleep(1000);
}
#else
typedef struct drain_hold {
    int unused;
} drain_hold;
static void hold_read(drain_hold *h) { (void)h; }
static void hold_after_copy(drain_hold *h) { (void)h; }
#endif

int fb__wp_drain(fb_ckpt *ck)
{
    fb__wp *w = &ck->wp;
    drain_hold hold;
    hold_read(&hold);
    size_t left = w->nchunk, ti = 0;
    uintptr_t at = 0;
    int rc = 0;
    struct uffd_msg msg[16];
    /* A fault read now was raised after the previous read: from then to its
     * release bounds how long its writer waited.  The first read may find
     * faults raised any time since the protection was set (the drain may
     * start late), so the first bound runs from then. */
    uint64_t prev_read = w->protected_ns ? w->protected_ns : fb__now_ns();
    /* The partial pages first (a few KiB a tensor, set aside in the
     * stall): the write beside then waits only for chunks. */
    place_edges(ck);
    if (ck->drainer_started) {
        pthread_mutex_lock(&ck->dmu);
        ck->edges_placed = 1;
        pthread_cond_broadcast(&ck->dcv);
        pthread_mutex_unlock(&ck->dmu);
    }
    while (left && !rc) {
        uint64_t this_read = fb__now_ns();
        ssize_t got = read(w->fd, msg, sizeof msg);
        if (got >= (ssize_t)sizeof msg[0]) {
            for (size_t m = 0; m < (size_t)got / sizeof msg[0] && !rc; m++) {
                if (msg[m].event != UFFD_EVENT_PAGEFAULT)
                    continue;
                uintptr_t addr = (uintptr_t)msg[m].arg.pagefault.address;
                size_t c = chunk_of(w, addr);
                w->faults++;
                if (c != SIZE_MAX && !w->done[c]) {
                    rc = copy_release(ck, c);
                    left--;
                } else {
                    /* Released already (the fault raced the release), or
                     * not ours: make sure the writer is not left waiting. */
                    uintptr_t p = down(addr, page_size());
                    if (c == SIZE_MAX)
                        (void)wp_range(w->fd, p, page_size(), 0);
                    struct uffdio_range r = {.start = p, .len = page_size()};
                    (void)ioctl(w->fd, UFFDIO_WAKE, &r);
                }
                w->fault_ns += fb__now_ns() - prev_read;
            }
            prev_read = this_read;
            continue;
        }
        prev_read = this_read;
        size_t c = fb__wp_next_chunk(ck, &ti, &at);
        for (size_t k = 0; c == SIZE_MAX && k < w->nchunk; k++)
            if (!w->done[k]) /* every chunk is some tensor's; never reached */
                c = k;
        if (c != SIZE_MAX) {
            rc = copy_release(ck, c);
            left--;
            hold_after_copy(&hold);
        }
    }
    if (rc) {
        /* Could neither release nor unregister a chunk: closing the
         * descriptor drops every protection.  The snapshot is abandoned. */
        drop_fd(w);
    }
    /* Nothing is protected any more, so no thread waits on a page, and
     * taking the background thread's lock cannot wait for one that does. */
    fb__bg_hold(FB__BG_COLLAPSE, 0);
    return rc;
}

/* Chunk c is in staging (acquire: its bytes are visible after). */
static int copied(const fb__wp *w, size_t c)
{
    return __atomic_load_n(&w->done[c], __ATOMIC_ACQUIRE) != 0;
}

/* The chunks of [a, z) (inside one tensor's interior) all copied. */
static int all_copied(const fb__wp *w, uintptr_t a, uintptr_t z)
{
    for (uintptr_t p = a; p < z; p = down(p, WP_CHUNK) + WP_CHUNK) {
        size_t c = chunk_of(w, p);
        if (c != SIZE_MAX && !copied(w, c))
            return 0;
    }
    return 1;
}

int fb__wp_wait_copied(fb_ckpt *ck, size_t i, size_t off, size_t n)
{
    const fb__ckpt_tensor *t = &ck->t[i];
    if (!ck->beside || !t->wp || !n)
        return 0;
    const fb__wp *w = &ck->wp;
    uintptr_t lo, hi;
    fb__wp_interior(t, &lo, &hi);
    uintptr_t a = (uintptr_t)t->data + off, z = a + n;
    int edge = a < lo || z > hi;
    uintptr_t ca = a < lo ? lo : a, cz = z > hi ? hi : z;
    pthread_mutex_lock(&ck->dmu);
    for (;;) {
        /* A failed drain may have copied these and still abandon the
         * snapshot: the save fails either way. */
        if (ck->drain_over && ck->drain_rc)
            break;
        if ((!edge || ck->edges_placed || ck->drain_over) &&
            (cz <= ca || all_copied(w, ca, cz)))
            break;
        pthread_cond_wait(&ck->dcv, &ck->dmu);
    }
    int rc = ck->drain_over ? ck->drain_rc : 0;
    pthread_mutex_unlock(&ck->dmu);
    return rc;
}

#else /* no userfaultfd write-protect: the engine copies */

int fb__wp_open(fb__wp *w, char *why, size_t why_size)
{
    w->fd = -1;
    fb__ckpt_say(why, why_size, "userfaultfd write-protect not available in "
                 "this build");
    return -ENOSYS;
}
int fb__wp_register(fb__wp *w, void *data, size_t bytes)
{
    (void)w, (void)data, (void)bytes;
    return -ENOSYS;
}
int fb__wp_plan(fb_ckpt *ck)
{
    ck->wp.planned = 1;
    return 0;
}
int fb__wp_protect(fb_ckpt *ck)
{
    (void)ck;
    return -ENOSYS;
}
int fb__wp_drain(fb_ckpt *ck)
{
    (void)ck;
    return 0;
}
void fb__wp_copy_edges(fb_ckpt *ck)
{
    (void)ck;
}
size_t fb__wp_next_chunk(const fb_ckpt *ck, size_t *ti, uintptr_t *at)
{
    (void)ck, (void)ti, (void)at;
    return SIZE_MAX;
}
int fb__wp_wait_copied(fb_ckpt *ck, size_t i, size_t off, size_t n)
{
    (void)ck, (void)i, (void)off, (void)n;
    return 0;
}

#endif
