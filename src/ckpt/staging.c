/*
 * staging.c -- staging memory for async saves, faulted in up front.
 *
 * The first touch of 1 GiB in 4 KiB pages costs seconds on these virtual
 * machines; with transparent huge pages a tenth of that.  So staging is
 * mapped, advised MADV_HUGEPAGE *before* any page is touched, then
 * populated (MADV_POPULATE_WRITE, or touching each page on kernels
 * without it) when the tensor is registered -- never in the save's stall.
 */
#include "ckpt/engine.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define HUGE_BYTES (2u << 20)

int fb__staging_alloc(fb__staging *s, size_t bytes)
{
    memset(s, 0, sizeof *s);
    if (bytes < HUGE_BYTES) {
        size_t len = (bytes + 63) & ~(size_t)63;
        void *p = aligned_alloc(64, len ? len : 64);
        if (!p)
            return -ENOMEM;
        memset(p, 0, len);
        s->ptr = p;
        s->bytes = bytes;
        return 0;
    }
    size_t len = (bytes + HUGE_BYTES - 1) & ~(size_t)(HUGE_BYTES - 1);
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    if (p == MAP_FAILED)
        return -ENOMEM;
    (void)madvise(p, len, MADV_HUGEPAGE); /* advisory: THP may be off */
    if (madvise(p, len, MADV_POPULATE_WRITE)) {
        if (errno == ENOMEM) {
            munmap(p, len);
            return -ENOMEM;
        }
        long page = sysconf(_SC_PAGESIZE);
        for (size_t off = 0; off < len; off += (size_t)page)
            ((volatile char *)p)[off] = 0;
    }
    s->ptr = p;
    s->bytes = bytes;
    s->mapped = len;
    return 0;
}

void fb__staging_free(fb__staging *s)
{
    if (!s->ptr)
        return;
    if (s->mapped)
        munmap(s->ptr, s->mapped);
    else
        free(s->ptr);
    memset(s, 0, sizeof *s);
}
