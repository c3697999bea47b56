/*
 * ex_util.h -- small helpers shared by the example trainers.
 *
 * The examples use libfirebreak's public API only (firebreak.h), the way a
 * user's program would; these few helpers (option parsing, a weights hash,
 * an atomic file write) are therefore their own and not firebreak's
 * internal fb__ helpers.
 */
#ifndef FB_EXAMPLES_EX_UTIL_H
#define FB_EXAMPLES_EX_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* 64-bit FNV-1a, continued from `h` (start with EX_FNV_OFFSET). */
#define EX_FNV_OFFSET 0xcbf29ce484222325ull
uint64_t ex_fnv1a64(uint64_t h, const void *data, size_t len);

/* Parse a whole decimal integer in [lo, hi] from an option value; prints a
 * message naming `opt` and returns -1 on junk or out of range. */
int ex_parse_ll(const char *opt, const char *s, long long lo, long long hi,
                long long *out);
int ex_parse_double(const char *opt, const char *s, double lo, double hi,
                    double *out);

/* Write `len` bytes to `path` atomically (temporary name in the same
 * directory, fsync, rename).  0 or -errno. */
int ex_write_atomic(const char *path, const void *buf, size_t len);

/* Write "<16 hex digits>\n" to `path` atomically; prints an error naming
 * the file on failure.  0 or -errno. */
int ex_write_hash(const char *path, uint64_t hash);

/* Sleep `ms` milliseconds (0: return at once). */
void ex_sleep_ms(long long ms);

/* Monotonic seconds. */
double ex_now_s(void);

/* splitmix64: a tiny, well-mixed deterministic generator.  The state is a
 * single uint64_t, which the trainers checkpoint as a tensor. */
uint64_t ex_splitmix64(uint64_t *state);

#endif
