/*
 * names.h -- the registered tensors' names, indexed by hash, so that
 * registering n tensors checks for duplicates in O(n), not O(n^2) string
 * comparisons (20,000 tensors took 8 s).  Open addressing over indexes
 * into the caller's array of names; grows at half full; no removal
 * (tensors are never unregistered).
 */
#ifndef FB_CKPT_NAMES_H
#define FB_CKPT_NAMES_H

#include <stddef.h>

typedef struct fb__names {
    size_t *slot;   /* index + 1 into the caller's names; 0: empty      */
    size_t cap;     /* power of two, or 0                                */
    size_t n;
} fb__names;

/* The index of `name` among names[0 .. count), or -1.  `name_of(arg, i)`
 * gives the i-th name. */
long fb__names_find(const fb__names *s, const char *name,
                    const char *(*name_of)(const void *arg, size_t i),
                    const void *arg);
/* Add index i (whose name is name_of(arg, i)); 0 or -ENOMEM. */
int fb__names_add(fb__names *s, size_t i,
                  const char *(*name_of)(const void *arg, size_t i),
                  const void *arg);
void fb__names_free(fb__names *s);

#endif
