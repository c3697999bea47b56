/*
 * alloc.c -- the allocation-failure hook of alloc.h.  Compiled only into
 * test programs built with FB_ALLOC_TORTURE (never into libfirebreak or
 * the firebreak tool): fb_common does not list this file.
 */
#include "common/alloc.h"

#ifdef FB_ALLOC_TORTURE

#include <stdatomic.h>

static _Atomic uint64_t alloc_count;
static _Atomic uint64_t fail_at;
static atomic_int failed;

void fb__alloc_fail_at(uint64_t n)
{
    atomic_store(&fail_at, 0);
    atomic_store(&alloc_count, 0);
    atomic_store(&failed, 0);
    atomic_store(&fail_at, n);
}

uint64_t fb__alloc_count(void)
{
    return atomic_load(&alloc_count);
}

int fb__alloc_failed(void)
{
    return atomic_load(&failed);
}

/* Whether this allocation is the one to fail. */
static int fail_this(void)
{
    uint64_t k = atomic_fetch_add(&alloc_count, 1) + 1;
    if (k != atomic_load(&fail_at))
        return 0;
    atomic_store(&failed, 1);
    return 1;
}

void *fb__malloc(size_t size)
{
    return fail_this() ? NULL : malloc(size);
}

void *fb__calloc(size_t n, size_t size)
{
    return fail_this() ? NULL : calloc(n, size);
}

void *fb__realloc(void *p, size_t size)
{
    return fail_this() ? NULL : realloc(p, size);
}

char *fb__strdup(const char *s)
{
    return fail_this() ? NULL : strdup(s);
}

#else
typedef int fb__alloc_unused; /* ISO C: a translation unit is not empty */
#endif
