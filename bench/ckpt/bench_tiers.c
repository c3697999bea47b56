/*
 * bench_tiers.c -- restore from node memory and from a peer's memory
 * against restore from storage, and the save's stall with the memory tier
 * against without it (docs/checkpoint.md, "Tiers"; issue 18's "Speed"),
 * measured in the same run.
 *
 * One rank's state, BENCH_TIERS_MIB MiB (default 256) in 8 tensors, saved
 * once with a memory tier in /dev/shm and --persist-every 1, so the same
 * step is in both tiers.  Then, best of 3 each:
 *   memory   fb_ckpt_restore with the tier: verified read from tmpfs
 *   storage  fb_ckpt_restore without it, the shard's page cache dropped
 *            first (POSIX_FADV_DONTNEED, as bench_ckpt does)
 *   peer     a replaced node's restore: the shard fetched from the peer's
 *            memory (the first tier's directory) over loopback TCP, fbr1,
 *            into an empty node memory's peer directory, verified on
 *            arrival, as `watch --mem-fetch` stores it; then
 *            fb_ckpt_restore there (per node, the step the supervisor
 *            chose), with the storage copy moved out of reach, so that
 *            only the peer's copy can serve it
 * and the ratios.  Then the save's stall (fb_ckpt_save's return: the
 * snapshot taken, write-protected where the kernel allows it, else
 * copied; the write goes on in the background and is waited for before
 * the next), best of 5, with the memory tier and without it (storage
 * only, as before tiers).  Usage: bench_tiers DIR (the storage side: the run
 * directory's filesystem).  Exits 0 either way (no targets); removes what
 * it wrote.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../bench_result.h"
#include "../bench_shm.h"
#include "../loopback.h"
#include "ckpt/engine.h"
#include "ckpt/replicate.h"
#include "ckpt/store.h"
#include "common/util.h"

#define TENSORS 8
#define RUNS 3

static char mem[64], node[64], store[4096];

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

/* The receiving node's side of one fetch: accept one connection on the
 * listener and store what it brings in dir, verified on arrival. */
struct receiver {
    int lfd;
    char dir[128];
    int rc;
};

static void *receive(void *arg)
{
    struct receiver *r = arg;
    int fd = accept(r->lfd, NULL, NULL);
    if (fd < 0) {
        r->rc = -1;
        return NULL;
    }
    fb__repl_stats st;
    char why[256];
    memset(&st, 0, sizeof st);
    r->rc = fb__repl_serve(fd, r->dir, 1ull << 40, &st, why, sizeof why);
    if (r->rc || st.shards != 1) {
        fprintf(stderr, "bench_tiers: receiving: %s\n", r->rc ? why : "no shard");
        r->rc = r->rc ? r->rc : -1;
    }
    close(fd);
    return NULL;
}

/* A replaced node's restore from its peer: the fetch, then the restore
 * from the node memory's peer directory; -1 when it failed or was not
 * served by the peer's copy. */
static double peer_restore_s(fb_ckpt *ck)
{
    char hidden[4200], step1[4200], peer[128];
    if (fb__ckpt_step_path(step1, sizeof step1, store, 1))
        return -1;
    snprintf(hidden, sizeof hidden, "%s/hidden-step-1", store);
    snprintf(peer, sizeof peer, "%s/peer", node);
    if (rename(step1, hidden)) { /* storage out of reach: only the peer */
        perror("bench_tiers: rename");
        return -1;
    }
    double best = 1e30;
    for (int i = 0; i < RUNS && best > 0; i++) {
        fb__rm_rf(node);
        int port = 0, lfd = bench_listen_loopback(&port);
        struct receiver r = {.lfd = lfd};
        snprintf(r.dir, sizeof r.dir, "%s", peer);
        pthread_t th;
        if (lfd < 0 || fb__mkdir_p(peer, 0700) || pthread_create(&th, NULL, receive, &r)) {
            perror("bench_tiers: receiver");
            if (lfd >= 0)
                close(lfd);
            best = -1;
            break;
        }
        uint64_t t0 = fb__now_ns();
        int fd = bench_connect_loopback(port);
        char why[256] = "";
        int rc = fd < 0 ? -1 : fb__repl_send_step(fd, mem, 1, 0, 1, why, sizeof why);
        if (fd >= 0)
            close(fd);
        pthread_join(th, NULL);
        close(lfd);
        snprintf(ck->tier.mem_dir, sizeof ck->tier.mem_dir, "%s", node);
        ck->tier.per_node = 1;
        ck->tier.restore_step = 1;
        uint64_t step = 0;
        if (!rc && !r.rc)
            rc = fb_ckpt_restore(ck, &step);
        double s = (double)(fb__now_ns() - t0) / 1e9;
        ck->tier.per_node = 0;
        ck->tier.restore_step = -1;
        if (rc || r.rc || step != 1) {
            fprintf(stderr, "bench_tiers: restore from the peer failed: %s\n",
                    why[0] ? why : fb_strerror(rc));
            best = -1;
            break;
        }
        best = s < best ? s : best;
    }
    if (rename(hidden, step1))
        perror("bench_tiers: rename back");
    return best;
}

/* fb_ckpt_save's return, best of 5 saves from `step` on, each waited for
 * before the next; with the memory tier `tier`, or none (""). */
static double stall_s(fb_ckpt *ck, const char *tier, uint64_t step)
{
    double best = 1e30;
    snprintf(ck->tier.mem_dir, sizeof ck->tier.mem_dir, "%s", tier);
    for (int i = 0; i < 5; i++) {
        uint64_t t0 = fb__now_ns();
        int rc = fb_ckpt_save(ck, step + (uint64_t)i);
        double s = (double)(fb__now_ns() - t0) / 1e9;
        if (rc || fb_ckpt_wait(ck)) {
            fprintf(stderr, "bench_tiers: save failed: %s\n", fb_strerror(rc));
            return -1;
        }
        best = s < best ? s : best;
    }
    return best;
}

int main(int argc, char **argv)
{
    static const char usage[] = "bench_tiers DIR";
    bench_help(argc, argv, usage,
               "Restore from node memory and from a peer's memory against restore from\n"
               "storage, and the save's stall with the memory tier against without it,\n"
               "in the same run (docs/bench.md).  BENCH_TIERS_MIB MiB (default 256)\n"
               "under DIR (the storage side) and /dev/shm, removed at the end.  No\n"
               "targets: exits 0 unless a step fails.\n");
    if (argc != 2 || argv[1][0] == '-')
        bench_bad_usage(usage, argc == 2 ? "bench_tiers: DIR may not start with '-'"
                                         : "bench_tiers: one directory expected");
    const char *v = getenv("BENCH_TIERS_MIB");
    long long mib = 256;
    if (v && fb__parse_int(v, 8, 1 << 16, &mib))
        mib = 256;
    bench_shm_sweep();
    snprintf(mem, sizeof mem, "/dev/shm/fb-bench-tiers.%d", (int)getpid());
    snprintf(node, sizeof node, "/dev/shm/fb-bench-tiers-node.%d", (int)getpid());
    snprintf(store, sizeof store, "%s/bench-tiers.%d", argv[1], (int)getpid());
    bench_shm_keep(mem); /* removed at exit, also on SIGTERM and SIGINT */
    bench_shm_keep(node);
    bench_shm_keep(store);
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
    double p = m < 0 || s < 0 ? -1 : peer_restore_s(ck);
    /* Saves from step 2 on: with the tier (and persist every 1, as above),
     * then storage only, then with the tier again; the better of the two
     * with the tier. */
    double st1 = p < 0 ? -1 : stall_s(ck, mem, 2);
    double st0 = st1 < 0 ? -1 : stall_s(ck, "", 7);
    double st2 = st0 < 0 ? -1 : stall_s(ck, mem, 12);
    fb_ckpt_close(ck);
    for (int i = 0; i < TENSORS; i++)
        free(t[i]);
    if (m < 0 || s < 0 || p < 0 || st0 < 0 || st2 < 0)
        return 1;
    double st = st1 < st2 ? st1 : st2;
    printf("bench_tiers: restore of %lld MiB, one rank, best of %d, verified\n", mib,
           RUNS);
    printf("  storage, page cache dropped (baseline) %7.3f s  %6.2f GB/s\n", s,
           (double)mib * (1 << 20) / s / 1e9);
    printf("  node memory                            %7.3f s  %6.2f GB/s\n", m,
           (double)mib * (1 << 20) / m / 1e9);
    printf("  ratio (storage / memory)               %7.2fx faster\n", s / m);
    printf("  peer: fetched over loopback TCP, then  %7.3f s  %6.2f GB/s  (a replaced node's rank)\n",
           p, (double)mib * (1 << 20) / p / 1e9);
    printf("  ratio (storage / peer)                 %7.2fx %s\n",
           s >= p ? s / p : p / s, s >= p ? "faster" : "slower");
    printf("save's stall, best of 5 (save's return: the snapshot; no target)\n");
    printf("  storage only (baseline, no tier)       %7.4f s\n", st0);
    printf("  with the memory tier                   %7.4f s  = %.2fx\n", st, st / st0);
    return 0;
}
