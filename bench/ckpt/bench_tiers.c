/*
 * bench_tiers.c -- restore from node memory against restore from storage
 * (docs/checkpoint.md, "Tiers"), measured in the same run.
 *
 * One rank's state, BENCH_TIERS_MIB MiB (default 256) in 8 tensors, saved
 * once with a memory tier in /dev/shm and --persist-every 1, so the same
 * step is in both tiers.  Then, best of 3 each:
 *   memory   fb_ckpt_restore with the tier: verified read from tmpfs
 *   storage  fb_ckpt_restore without it, the shard's page cache dropped
 *            first (POSIX_FADV_DONTNEED, as bench_ckpt does)
 * and the ratio.  Usage: bench_tiers DIR (the storage side: the run
 * directory's filesystem).  Exits 0 either way; removes what it wrote.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/engine.h"
#include "ckpt/store.h"
#include "common/util.h"

#define TENSORS 8
#define RUNS 3

static char mem[64], store[4096];

static void cleanup(void)
{
    if (mem[0])
        fb__rm_rf(mem);
    if (store[0])
        fb__rm_rf(store);
}

static void drop_cache(void)
{
    char p[4200];
    fb__ckpt_shard_path(p, sizeof p, store, 1, 0);
    int fd = open(p, O_RDONLY);
    if (fd >= 0) {
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        close(fd);
    }
}

static double restore_s(fb_ckpt *ck, const char *tier, int cold)
{
    double best = 1e30;
    for (int i = 0; i < RUNS; i++) {
        snprintf(ck->tier.mem_dir, sizeof ck->tier.mem_dir, "%s", tier);
        if (cold)
            drop_cache();
        uint64_t step = 0, t0 = fb__now_ns();
        int rc = fb_ckpt_restore(ck, &step);
        double s = (double)(fb__now_ns() - t0) / 1e9;
        if (rc || step != 1) {
            fprintf(stderr, "bench_tiers: restore failed: %s\n", fb_strerror(rc));
            return -1;
        }
        best = s < best ? s : best;
    }
    return best;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: bench_tiers DIR\n");
        return 2;
    }
    const char *v = getenv("BENCH_TIERS_MIB");
    long long mib = 256;
    if (v && fb__parse_int(v, 8, 1 << 16, &mib))
        mib = 256;
    snprintf(mem, sizeof mem, "/dev/shm/fb-bench-tiers.%d", (int)getpid());
    snprintf(store, sizeof store, "%s/bench-tiers.%d", argv[1], (int)getpid());
    atexit(cleanup);
    if (fb__mkdir_p(mem, 0700) || fb__mkdir_p(store, 0700)) {
        perror("bench_tiers: mkdir");
        return 1;
    }
    size_t per = (size_t)mib * (1u << 20) / TENSORS;
    float *t[TENSORS];
    fb_ckpt_options o;
    fb_ckpt_options_init(&o);
    o.dir = store;
    o.rank = 0;
    o.world_size = 1;
    o.async = 1; /* restore reads through staging, as a training program's */
    fb_ckpt *ck = NULL;
    if (fb_ckpt_open(&ck, &o)) {
        fprintf(stderr, "bench_tiers: cannot open a handle on %s\n", store);
        return 1;
    }
    for (int i = 0; i < TENSORS; i++) {
        char name[16];
        snprintf(name, sizeof name, "t%d", i);
        if (!(t[i] = malloc(per)))
            return 1;
        for (size_t k = 0; k < per / 4; k++)
            t[i][k] = (float)(k % 977) * 0.25f + (float)i;
        if (fb_ckpt_register(ck, name, FB_DTYPE_F32, 1, (int64_t[]){(int64_t)(per / 4)},
                             t[i]))
            return 1;
    }
    /* The tier as the supervisor would give it: memory, every save also
     * copied to storage. */
    snprintf(ck->tier.mem_dir, sizeof ck->tier.mem_dir, "%s", mem);
    ck->tier.persist_every = 1;
    ck->tier.node_ranks = 1;
    if (fb_ckpt_save(ck, 1) || fb_ckpt_wait(ck)) {
        fprintf(stderr, "bench_tiers: save failed\n");
        return 1;
    }
    double m = restore_s(ck, mem, 0), s = restore_s(ck, "", 1);
    fb_ckpt_close(ck);
    for (int i = 0; i < TENSORS; i++)
        free(t[i]);
    if (m < 0 || s < 0)
        return 1;
    printf("bench_tiers: restore of %lld MiB, one rank, best of %d, verified\n", mib,
           RUNS);
    printf("  storage, page cache dropped (baseline) %7.3f s  %6.2f GB/s\n", s,
           (double)mib * (1 << 20) / s / 1e9);
    printf("  node memory                            %7.3f s  %6.2f GB/s\n", m,
           (double)mib * (1 << 20) / m / 1e9);
    printf("  ratio (storage / memory)               %7.2fx faster\n", s / m);
    return 0;
}
