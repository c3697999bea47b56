/*
 * hash.c -- XXH3-64 and CRC32C behind one streaming interface (hash.h).
 */
#include "ckpt/hash.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef FB_HAVE_XXHASH
#define XXH_INLINE_ALL
#include <xxhash.h>
#endif

#ifdef FB_HAVE_XXHASH_AVX2
uint64_t fb__xxh3_avx2(const void *data, size_t len);
void fb__xxh3_update_avx2(void *state, const void *data, size_t len);
#define HAVE_AVX2() __builtin_cpu_supports("avx2")
#else
#define HAVE_AVX2() 0
#define fb__xxh3_avx2(d, n) 0
#define fb__xxh3_update_avx2(s, d, n) ((void)0)
#endif

struct fb__hash_ctx {
    fb__hash_alg alg;
    uint32_t crc;
#ifdef FB_HAVE_XXHASH
    XXH3_state_t *xxh;
#endif
};

fb__hash_alg fb__hash_default(void)
{
#ifdef FB_HAVE_XXHASH
    return FB__HASH_XXH3;
#else
    return FB__HASH_CRC32C;
#endif
}

const char *fb__hash_alg_name(fb__hash_alg alg)
{
    return alg == FB__HASH_XXH3 ? "xxh3-64" : "crc32c";
}

int fb__hash_alg_from_name(const char *name)
{
    if (!name)
        return -1;
#ifdef FB_HAVE_XXHASH
    if (!strcmp(name, "xxh3-64"))
        return FB__HASH_XXH3;
#endif
    if (!strcmp(name, "crc32c"))
        return FB__HASH_CRC32C;
    return -1;
}

/* ---- CRC32C (Castagnoli), reflected polynomial 0x82F63B78 ---- */

static uint32_t crc_table[8][256];
static int crc_table_ready;

static void crc_init_table(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^
                              crc_table[0][crc_table[t - 1][i] & 0xff];
    __atomic_store_n(&crc_table_ready, 1, __ATOMIC_RELEASE);
}

static uint32_t crc_sw(uint32_t crc, const unsigned char *p, size_t n)
{
    if (!__atomic_load_n(&crc_table_ready, __ATOMIC_ACQUIRE))
        crc_init_table(); /* idempotent: racing threads write equal values */
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        v ^= crc;
        crc = crc_table[7][v & 0xff] ^ crc_table[6][(v >> 8) & 0xff] ^
              crc_table[5][(v >> 16) & 0xff] ^ crc_table[4][(v >> 24) & 0xff] ^
              crc_table[3][(v >> 32) & 0xff] ^ crc_table[2][(v >> 40) & 0xff] ^
              crc_table[1][(v >> 48) & 0xff] ^ crc_table[0][v >> 56];
        p += 8;
        n -= 8;
    }
    while (n--)
        crc = (crc >> 8) ^ crc_table[0][(crc ^ *p++) & 0xff];
    return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t crc,
                                                          const unsigned char *p,
                                                          size_t n)
{
    uint64_t c = crc;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = __builtin_ia32_crc32di(c, v);
        p += 8;
        n -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (n--)
        c32 = __builtin_ia32_crc32qi(c32, *p++);
    return c32;
}
#endif

static uint32_t crc32c_update(uint32_t crc, const void *data, size_t n)
{
#if defined(__x86_64__)
    if (__builtin_cpu_supports("sse4.2"))
        return crc_hw(crc, data, n);
#endif
    return crc_sw(crc, data, n);
}

fb__hash_ctx *fb__hash_new(fb__hash_alg alg)
{
    fb__hash_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->alg = alg;
    c->crc = 0xffffffffu;
#ifdef FB_HAVE_XXHASH
    if (alg == FB__HASH_XXH3) {
        c->xxh = XXH3_createState();
        if (!c->xxh) {
            free(c);
            return NULL;
        }
        XXH3_64bits_reset(c->xxh);
    }
#endif
    return c;
}

void fb__hash_update(fb__hash_ctx *c, const void *data, size_t len)
{
    if (!len)
        return;
#ifdef FB_HAVE_XXHASH
    if (c->alg == FB__HASH_XXH3) {
        if (HAVE_AVX2())
            fb__xxh3_update_avx2(c->xxh, data, len);
        else
            XXH3_64bits_update(c->xxh, data, len);
        return;
    }
#endif
    c->crc = crc32c_update(c->crc, data, len);
}

uint64_t fb__hash_digest(const fb__hash_ctx *c)
{
#ifdef FB_HAVE_XXHASH
    if (c->alg == FB__HASH_XXH3)
        return XXH3_64bits_digest(c->xxh);
#endif
    return (uint64_t)(c->crc ^ 0xffffffffu);
}

void fb__hash_free(fb__hash_ctx *c)
{
    if (!c)
        return;
#ifdef FB_HAVE_XXHASH
    XXH3_freeState(c->xxh);
#endif
    free(c);
}

uint64_t fb__hash(fb__hash_alg alg, const void *data, size_t len)
{
#ifdef FB_HAVE_XXHASH
    if (alg == FB__HASH_XXH3)
        return HAVE_AVX2() ? fb__xxh3_avx2(data, len) : XXH3_64bits(data, len);
#endif
    return (uint64_t)(crc32c_update(0xffffffffu, data, len) ^ 0xffffffffu);
}

void fb__hash_hex(uint64_t h, char buf[17])
{
    snprintf(buf, 17, "%016llx", (unsigned long long)h);
}

int fb__hash_parse_hex(const char *s, uint64_t *out)
{
    if (!s || strlen(s) != 16)
        return -1;
    uint64_t v = 0;
    for (int i = 0; i < 16; i++) {
        char ch = s[i];
        int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
        if (d < 0)
            return -1;
        v = v << 4 | (uint64_t)d;
    }
    *out = v;
    return 0;
}
