/*
 * sim_rng.h -- the simulator's random numbers: xoshiro256** seeded through
 * splitmix64 (both by Blackman and Vigna, public domain algorithms).
 *
 * Each trial gets its own generator, seeded from (seed, trial index), so a
 * trial's outcome depends only on those two numbers and never on which
 * thread ran it or in what order.
 */
#ifndef FB_SIM_RNG_H
#define FB_SIM_RNG_H

#include <math.h>
#include <stdint.h>

typedef struct fb__sim_rng {
    uint64_t s[4];
} fb__sim_rng;

static inline uint64_t fb__sim_splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline void fb__sim_rng_seed(fb__sim_rng *r, uint64_t seed,
                                    uint64_t stream)
{
    /* Mix the stream into the seed first so neighbouring trial indices
     * give unrelated states. */
    uint64_t x = seed;
    uint64_t k = fb__sim_splitmix64(&x) ^ (stream * 0xd1342543de82ef95ull);
    for (int i = 0; i < 4; i++)
        r->s[i] = fb__sim_splitmix64(&k);
}

static inline uint64_t fb__sim_rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static inline uint64_t fb__sim_next(fb__sim_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = fb__sim_rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = fb__sim_rotl(s[3], 45);
    return result;
}

/* Uniform in [0, 1). */
static inline double fb__sim_uniform(fb__sim_rng *r)
{
    return (double)(fb__sim_next(r) >> 11) * 0x1.0p-53;
}

/* Exponential with the given rate (per second); rate 0 gives +inf. */
static inline double fb__sim_exp(fb__sim_rng *r, double rate)
{
    if (rate <= 0)
        return INFINITY;
    /* 1 - u lies in (0, 1], so the log is finite. */
    return -log(1.0 - fb__sim_uniform(r)) / rate;
}

#endif
