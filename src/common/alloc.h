/*
 * alloc.h -- the allocation functions of code that must survive running
 * out of memory (the flight-recorder analyzer, the checkpoint reader, the
 * JSON parser and writer): malloc, calloc, realloc and strdup, with a
 * failure hook for tests in the manner of SQLite's and curl's torture
 * modes.
 *
 * In what ships (libfirebreak, the firebreak tool) these are the C
 * library's functions, inlined: there is no hook and no counter.  Only
 * objects compiled with FB_ALLOC_TORTURE defined -- the copies of these
 * sources the torture test builds for itself (tests/common/CMakeLists.txt)
 * -- count allocations, and fail the one fb__alloc_fail_at armed
 * (docs/development.md).  free() is the C library's in both.
 */
#ifndef FB_COMMON_ALLOC_H
#define FB_COMMON_ALLOC_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef FB_ALLOC_TORTURE

void *fb__malloc(size_t size);
void *fb__calloc(size_t n, size_t size);
void *fb__realloc(void *p, size_t size);
char *fb__strdup(const char *s);

/* Fail the n-th allocation (1-based) from now on, that one only, and start
 * counting afresh; 0 fails none (counting goes on).  Thread-safe. */
void fb__alloc_fail_at(uint64_t n);
/* Allocations since the last fb__alloc_fail_at. */
uint64_t fb__alloc_count(void);
/* Whether the armed allocation was reached and failed. */
int fb__alloc_failed(void);

#else

static inline void *fb__malloc(size_t size) { return malloc(size); }
static inline void *fb__calloc(size_t n, size_t size) { return calloc(n, size); }
static inline void *fb__realloc(void *p, size_t size) { return realloc(p, size); }
static inline char *fb__strdup(const char *s) { return strdup(s); }

#endif

#endif
