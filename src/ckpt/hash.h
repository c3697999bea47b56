/*
 * hash.h -- the 64-bit hashes recorded per tensor in a shard's metadata
 * (`firebreak.hash` names the algorithm, `firebreak.hash.<tensor>` holds
 * 16 lower-case hex digits).
 *
 * XXH3-64 (Debian's libxxhash, inlined from its header) is the default:
 * bench/ckpt measures it against CRC32C (SSE4.2 when the CPU has it);
 * docs/checkpoint.md records the numbers.  CRC32C stays as the fallback
 * for builds without libxxhash and as the reader of shards written so.
 */
#ifndef FB_CKPT_HASH_H
#define FB_CKPT_HASH_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    FB__HASH_XXH3 = 0,   /* "xxh3-64"  */
    FB__HASH_CRC32C = 1  /* "crc32c": the 32-bit CRC, zero-extended */
} fb__hash_alg;

/* The algorithm new shards use. */
fb__hash_alg fb__hash_default(void);
const char *fb__hash_alg_name(fb__hash_alg alg);
/* The algorithm for a name, or -1 when unknown or not built in. */
int fb__hash_alg_from_name(const char *name);

/* Streaming state: init, update any number of times, digest. */
typedef struct fb__hash_ctx fb__hash_ctx;
fb__hash_ctx *fb__hash_new(fb__hash_alg alg);
void fb__hash_update(fb__hash_ctx *c, const void *data, size_t len);
uint64_t fb__hash_digest(const fb__hash_ctx *c);
void fb__hash_free(fb__hash_ctx *c);

/* One-shot. */
uint64_t fb__hash(fb__hash_alg alg, const void *data, size_t len);

/* "%016llx" into buf (17 bytes); parse it back (0, or -1 when malformed). */
void fb__hash_hex(uint64_t h, char buf[17]);
int fb__hash_parse_hex(const char *s, uint64_t *out);

#endif
