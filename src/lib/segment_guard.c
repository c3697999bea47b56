/*
 * segment_guard.c -- a SIGBUS guard for the readers' segment mappings
 * (segment_guard.h).
 *
 * A rank may ftruncate() its own segment file while the supervisor, the
 * node watcher or the agent has it mapped; a load from a page past the new
 * end of the file raises SIGBUS, whose default action would kill the
 * reader.  Readers register each mapping in a table the handler can search
 * without locks or allocation:
 *
 *   table[FB__SEG_GUARD_MAX]   (mmap'd once, on the first registration)
 *   +------+-----+-----------+
 *   | base | end | lost_from |   base == 0: free (linked from free_head)
 *   +------+-----+-----------+   slots [0, used) were handed out once
 *
 * Registration and removal take `mu` (a free list and a bump index: O(1)
 * per attach); they publish `base` last with release ordering, and clear
 * it first on removal, so the handler, which scans [0, used) with acquire
 * loads, never matches a half-written slot.  The scan is linear, but it
 * runs only when a SIGBUS happened.
 *
 * When the faulting address lies in a registered mapping, the handler maps
 * anonymous zero pages (PROT_READ, MAP_FIXED) from the faulting page to
 * the end of the mapping -- a truncation loses a suffix of the file, so
 * every later page is lost too -- records the lowest such page in
 * `lost_from`, and returns: the load runs again and reads zeros.
 * fb__seg_check then reports the segment corrupt (truncated), and the
 * reader stops believing it.  mmap() is not on POSIX's list of
 * async-signal-safe functions, but glibc's and musl's mmap are a bare
 * system call with no lock and no allocation, which is safe in a handler
 * in practice (as are the loads and compare-and-swaps here).
 *
 * Any other SIGBUS (a real bug, or one sent with kill) goes to the handler
 * that was installed before ours; if that was the default action, the
 * default is put back and the fault happens again, so the process still
 * dies with a core that shows the real address.
 *
 * Limits: a handler someone installs for SIGBUS after our first
 * registration replaces ours (it is the process's to choose); a mapping
 * closed by one thread while another thread faults on it is a
 * use-after-close the guard does not try to make safe.
 */
#include "lib/segment_guard.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct guard_slot {
    _Atomic uintptr_t base;      /* 0: free; stored last (release)         */
    _Atomic uintptr_t end;       /* base + mapped size                     */
    _Atomic uintptr_t lost_from; /* 0, or the lowest page zero-filled      */
    uint32_t next_free;          /* free list: index + 1, 0 ends; under mu */
} guard_slot;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static guard_slot *_Atomic table;   /* FB__SEG_GUARD_MAX slots            */
static _Atomic uint32_t used;       /* slots [0, used) handed out once    */
static uint32_t free_head;          /* index + 1 of a free slot; under mu */
static uintptr_t page_size;         /* set before the handler is installed */
static struct sigaction old_action; /* SIGBUS before ours                  */

/* The handler's half: zero-fill the rest of the mapping that holds addr.
 * 1 when done (the load may run again), 0 when addr is not ours. */
static int guard_fault(uintptr_t addr)
{
    guard_slot *t = atomic_load_explicit(&table, memory_order_acquire);
    if (!t)
        return 0;
    uint32_t n = atomic_load_explicit(&used, memory_order_acquire);
    for (uint32_t i = 0; i < n; i++) {
        guard_slot *g = &t[i];
        uintptr_t base = atomic_load_explicit(&g->base, memory_order_acquire);
        if (!base || addr < base)
            continue;
        uintptr_t end = atomic_load_explicit(&g->end, memory_order_relaxed);
        if (addr >= end)
            continue;
        uintptr_t page = addr & ~(page_size - 1);
        /* Idempotent: pages already zero-filled are zero-filled again. */
        void *p = mmap((void *)page, end - page, PROT_READ,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
        if (p == MAP_FAILED)
            return 0; /* cannot repair: let the fault take its course */
        uintptr_t lost = atomic_load_explicit(&g->lost_from, memory_order_relaxed);
        while ((lost == 0 || page < lost) &&
               !atomic_compare_exchange_weak_explicit(&g->lost_from, &lost, page,
                                                      memory_order_release,
                                                      memory_order_relaxed))
            ;
        return 1;
    }
    return 0;
}

/* Not ours: to the previous handler, or the default action. */
static void pass_on(int sig, siginfo_t *si, void *uc)
{
    if ((old_action.sa_flags & SA_SIGINFO) && old_action.sa_sigaction) {
        old_action.sa_sigaction(sig, si, uc);
        return;
    }
    if (!(old_action.sa_flags & SA_SIGINFO) && old_action.sa_handler != SIG_DFL &&
        old_action.sa_handler != SIG_IGN) {
        old_action.sa_handler(sig);
        return;
    }
    int sent = !si || si->si_code <= 0; /* kill(), sigqueue(), raise() */
    if (sent && old_action.sa_handler == SIG_IGN &&
        !(old_action.sa_flags & SA_SIGINFO))
        return;
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, NULL);
    /* A fault happens again when the load re-runs; a sent signal must be
     * sent again (it stays pending until this handler returns). */
    if (sent)
        raise(sig);
}

static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
    int saved_errno = errno;
    /* si_code > 0: raised by the kernel for a fault at si_addr. */
    if (si && si->si_code > 0 && guard_fault((uintptr_t)si->si_addr)) {
        errno = saved_errno;
        return;
    }
    errno = saved_errno;
    pass_on(sig, si, uc);
}

/* Under mu: the table and the handler, once per process. */
static int install(void)
{
    if (atomic_load_explicit(&table, memory_order_relaxed))
        return 0;
    long ps = sysconf(_SC_PAGESIZE);
    page_size = ps > 0 ? (uintptr_t)ps : 4096;
    /* Untouched pages of the table cost nothing. */
    void *t = mmap(NULL, sizeof(guard_slot) * FB__SEG_GUARD_MAX,
                   PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (t == MAP_FAILED)
        return -errno;
    atomic_store_explicit(&table, (guard_slot *)t, memory_order_release);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGBUS, &sa, &old_action)) {
        int rc = -errno;
        atomic_store_explicit(&table, NULL, memory_order_release);
        munmap(t, sizeof(guard_slot) * FB__SEG_GUARD_MAX);
        return rc;
    }
    return 0;
}

int fb__seg_guard_add(const void *base, size_t size, uint32_t *slot)
{
    int rc;
    pthread_mutex_lock(&mu);
    rc = install();
    if (rc)
        goto out;
    guard_slot *t = atomic_load_explicit(&table, memory_order_relaxed);
    uint32_t i, n = atomic_load_explicit(&used, memory_order_relaxed);
    if (free_head) {
        i = free_head - 1;
        free_head = t[i].next_free;
    } else if (n < FB__SEG_GUARD_MAX) {
        i = n;
    } else {
        rc = -ENOSPC;
        goto out;
    }
    guard_slot *g = &t[i];
    g->next_free = 0;
    atomic_store_explicit(&g->end, (uintptr_t)base + size, memory_order_relaxed);
    atomic_store_explicit(&g->lost_from, 0, memory_order_relaxed);
    atomic_store_explicit(&g->base, (uintptr_t)base, memory_order_release);
    if (i == n)
        atomic_store_explicit(&used, n + 1, memory_order_release);
    *slot = i;
out:
    pthread_mutex_unlock(&mu);
    return rc;
}

void fb__seg_guard_remove(uint32_t slot)
{
    pthread_mutex_lock(&mu);
    guard_slot *t = atomic_load_explicit(&table, memory_order_relaxed);
    if (t && slot < atomic_load_explicit(&used, memory_order_relaxed) &&
        atomic_load_explicit(&t[slot].base, memory_order_relaxed)) {
        atomic_store_explicit(&t[slot].base, 0, memory_order_release);
        t[slot].next_free = free_head;
        free_head = slot + 1;
    }
    pthread_mutex_unlock(&mu);
}

int fb__seg_guard_lost(uint32_t slot, uint64_t *offset)
{
    guard_slot *t = atomic_load_explicit(&table, memory_order_acquire);
    if (!t || slot >= atomic_load_explicit(&used, memory_order_acquire))
        return 0;
    guard_slot *g = &t[slot];
    uintptr_t lost = atomic_load_explicit(&g->lost_from, memory_order_acquire);
    if (!lost)
        return 0;
    uintptr_t base = atomic_load_explicit(&g->base, memory_order_relaxed);
    if (offset)
        *offset = lost > base ? (uint64_t)(lost - base) : 0;
    return 1;
}
