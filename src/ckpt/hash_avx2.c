/*
 * hash_avx2.c -- XXH3 compiled for AVX2 (this file only gets -mavx2);
 * hash.c calls it when the CPU has AVX2, the SSE2 build otherwise.  Same
 * results either way: XXH3's output does not depend on the vector unit.
 */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "ckpt/hash.h"

uint64_t fb__xxh3_avx2(const void *data, size_t len);
void fb__xxh3_update_avx2(void *state, const void *data, size_t len);

uint64_t fb__xxh3_avx2(const void *data, size_t len)
{
    return XXH3_64bits(data, len);
}

void fb__xxh3_update_avx2(void *state, const void *data, size_t len)
{
    XXH3_64bits_update((XXH3_state_t *)state, data, len);
}
