/*
 * names.c -- hash index of the registered tensors' names (names.h).
 */
#include "ckpt/names.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t name_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

long fb__names_find(const fb__names *s, const char *name,
                    const char *(*name_of)(const void *arg, size_t i),
                    const void *arg)
{
    if (!s->cap)
        return -1;
    for (size_t k = name_hash(name) & (s->cap - 1);; k = (k + 1) & (s->cap - 1)) {
        if (!s->slot[k])
            return -1;
        if (!strcmp(name_of(arg, s->slot[k] - 1), name))
            return (long)(s->slot[k] - 1);
    }
}

static void put(size_t *slot, size_t cap, uint64_t h, size_t i)
{
    size_t k = h & (cap - 1);
    while (slot[k])
        k = (k + 1) & (cap - 1);
    slot[k] = i + 1;
}

int fb__names_add(fb__names *s, size_t i,
                  const char *(*name_of)(const void *arg, size_t i),
                  const void *arg)
{
    if (2 * (s->n + 1) > s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 64;
        size_t *slot = calloc(cap, sizeof *slot);
        if (!slot)
            return -ENOMEM;
        for (size_t k = 0; k < s->cap; k++)
            if (s->slot[k])
                put(slot, cap, name_hash(name_of(arg, s->slot[k] - 1)), s->slot[k] - 1);
        free(s->slot);
        s->slot = slot;
        s->cap = cap;
    }
    put(s->slot, s->cap, name_hash(name_of(arg, i)), i);
    s->n++;
    return 0;
}

void fb__names_free(fb__names *s)
{
    free(s->slot);
    memset(s, 0, sizeof *s);
}
