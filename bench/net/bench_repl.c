/*
 * bench_repl.c -- replication of a checkpoint step to a peer's memory
 * (fbr1, src/ckpt/replicate.c) against the raw socket throughput between
 * the same two processes, measured in the same run (issue 18: target
 * >= 0.8x).
 *
 * Over loopback: a child process receives, the parent sends.  The step:
 * BENCH_REPL_RANKS shards (default 4) of BENCH_REPL_MIB MiB in all
 * (default 512), saved by the engine into /dev/shm.  A warm-up round, not
 * counted, then RUNS rounds (BENCH_REPL_RUNS, default 5), each of nine
 * connections (fifteen with --variants): the baseline, raw
 * TCP moving the same bytes the same way (the shard files sent whole with
 * sendfile, no header, received into a pre-faulted malloc'd buffer of the
 * step's size, no hashing); the same received into a pre-faulted shared
 * mapping of a /dev/shm file, the kind of memory the receive pool gives
 * the replication (informational: the memory's part of the gap, no
 * target); with --variants, the same into anonymous memory advised
 * MADV_HUGEPAGE and MADV_NOHUGEPAGE (how many of each buffer's bytes
 * huge pages map is printed beside, from /proc/self/smaps), and into the
 * tmpfs pages asking each read for all that is left, as the replication
 * reads a shard; raw TCP as bench_tcp does it (4 MiB writes from one
 * buffer into one 4 MiB buffer, which stays in the cache; printed with
 * its ratio, no target); the step sent with fb__repl_send_step and
 * received by fb__repl_serve_pool without a pool (every shard's pages
 * allocated on arrival); and the same with the receive pool holding the
 * files of the step evicted before (the steady state of a tier that
 * keeps its newest steps), every hash checked on arrival, before the
 * shard is answered; and the way the node watcher receives (peer.c):
 * the same pool, hashes checked after the transfer by fb__repl_scrub
 * (FB__REPL_DEFER_VERIFY), the figure the target is for, with the
 * scrub's own time and CPU printed beside it, and the transfer and scrub
 * together.  Every shard is verified by hash before it commits, in
 * either way.  Rounds interleave so that the load of the moment weighs
 * on each alike; the baseline and the replication to arrival run twice a
 * round, as two pairs back to back, ABBA (kind_at), the raw socket into
 * the other kinds of memory around them, mirrored (set_order).  Each
 * figure is the best of its RUNS (those run twice a round: of 2 RUNS),
 * and the median of the rounds' (pairs') own ratios is printed beside.
 * Beside each figure, the CPU time both ends spent per byte (the
 * sender's thread and the whole receiving process), which the load
 * moves less than the throughput.  Last, the step slowdown while a
 * replica is sent (issue 18, "Speed"; step_slowdown).  With --stages,
 * where the replication's time goes at each end, stage by stage
 * (fb__repl_times: the header, the pool's file, the data, the rename,
 * the directory's sync, the mapping's release, the answer), the means
 * per shard over the counted rounds.  Records the
 * target in the results file (bench/bench_result.h: the table `make
 * bench` ends with fails when it was missed).  Exits 1 on a miss, or
 * when replication itself failed.  Removes its /dev/shm directories, also
 * on SIGTERM and SIGINT, and those a killed run left (bench_shm.h).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../bench_result.h"
#include "../bench_shm.h"
#include "../loopback.h"
#include "ckpt/replicate.h"
#include "common/util.h"
#include "firebreak/firebreak.h"

#define CHUNK_BYTES (4u << 20)
#define RUNS_MAX 20

static char base[64], src[128], dst[128], rawf[128];
static int runs = 5; /* BENCH_REPL_RUNS */

static long long env_ll(const char *name, long long dflt, long long lo, long long hi)
{
    const char *v = getenv(name);
    long long x;
    return v && !fb__parse_int(v, lo, hi, &x) ? x : dflt;
}

/* The step: `ranks` shards of one tensor each, `bytes` in all. */
static int make_step(int ranks, size_t bytes)
{
    size_t per = bytes / (size_t)ranks / 4 * 4;
    float *w = malloc(per);
    if (!w)
        return -ENOMEM;
    for (size_t i = 0; i < per / 4; i++)
        w[i] = (float)(i % 1000) * 0.5f;
    int rc = 0;
    for (int r = 0; r < ranks && !rc; r++) {
        fb_ckpt_options o;
        fb_ckpt_options_init(&o);
        o.dir = src;
        o.rank = r;
        o.world_size = ranks;
        o.async = 0;
        fb_ckpt *ck = NULL;
        w[0] = (float)r;
        if (!(rc = fb_ckpt_open(&ck, &o))) {
            rc = fb_ckpt_register(ck, "w", FB_DTYPE_F32, 1,
                                  (int64_t[]){(int64_t)(per / 4)}, w);
            if (!rc)
                rc = fb_ckpt_save(ck, 1);
            fb_ckpt_close(ck);
        }
    }
    free(w);
    return rc;
}

/* A raw connection drained into buf (4 MiB, reused) or, when big is not
 * NULL, into big (raw_bytes), 4 MiB a read, or all that is left when
 * whole; 0 when every byte came. */
static int drain(int fd, char *buf, char *big, unsigned long long raw_bytes, int whole)
{
    unsigned long long got = 0;
    for (;;) {
        char *at = big ? big + got : buf;
        size_t room = !big                                        ? CHUNK_BYTES
                      : whole || raw_bytes - got < CHUNK_BYTES ? raw_bytes - got
                                                                : CHUNK_BYTES;
        if (!room)
            break;
        ssize_t n = read(fd, at, room);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (unsigned long long)n;
    }
    return got == raw_bytes ? 0 : -1;
}

static uint64_t cpu_ns(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The kinds of connection.  The raw socket's received into: RAW_SAME,
 * the baseline, a malloc'd buffer (anonymous memory, huge pages only
 * where the host's THP policy is "always"); RAW_TMPFS, a pre-faulted
 * shared mapping of a /dev/shm file, the kind of memory the receive pool
 * gives the replication; with --variants, anonymous memory advised
 * MADV_HUGEPAGE (RAW_HUGE) and MADV_NOHUGEPAGE (RAW_NOHUGE), and into
 * tmpfs pages asking each read for all that is left of the stream, as the
 * replication asks for all that is left of a shard (RAW_WHOLE), where
 * the others ask for 4 MiB at a time. */
enum {
    RAW_CACHED, RAW_SAME, RAW_TMPFS, RAW_HUGE, RAW_NOHUGE, RAW_WHOLE,
    REPL_COLD, REPL_POOL, REPL_DEFER, KINDS
};

#define CONNS_MAX 16
static int order[CONNS_MAX], conns; /* a round's connections (set_order) */

/* A round's connections: every kind once, and those compared with the
 * replication to arrival twice.  The baseline and the replication to
 * arrival run as two pairs, each one right after the other, ABBA, the
 * first of each pair in turns from round to round (kind_at), so that the
 * load of the moment weighs on both alike (others' builds come and go
 * within seconds here); the raw socket into tmpfs pages (and with
 * variants, into the anonymous memory advised either way) right around
 * them, mirrored; the rest before. */
static void set_order(int variants)
{
    static const int head[] = {RAW_CACHED, REPL_COLD, REPL_POOL};
    int n = 0;
    for (size_t i = 0; i < sizeof head / sizeof head[0]; i++)
        order[n++] = head[i];
    int outer[4], no = 0;
    if (variants) {
        outer[no++] = RAW_HUGE;
        outer[no++] = RAW_NOHUGE;
        outer[no++] = RAW_WHOLE;
    }
    outer[no++] = RAW_TMPFS;
    for (int i = 0; i < no; i++)
        order[n++] = outer[i];
    order[n++] = RAW_SAME;
    order[n++] = REPL_DEFER;
    order[n++] = REPL_DEFER;
    order[n++] = RAW_SAME;
    for (int i = no - 1; i >= 0; i--)
        order[n++] = outer[i];
    conns = n;
}

/* The kind of a round's pos-th connection. */
static int kind_at(int round, int pos)
{
    int k = order[pos];
    if (round % 2 && (k == RAW_SAME || k == REPL_DEFER))
        k = k == RAW_SAME ? REPL_DEFER : RAW_SAME;
    return k;
}

/* Kilobytes of the mapping that holds addr that are mapped by huge pages
 * (anonymous, shmem or file), from /proc/self/smaps; -1 when not read. */
static long long huge_kib(const void *addr)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f)
        return -1;
    char line[512];
    int in = 0;
    long long kib = -1;
    uintptr_t a = (uintptr_t)addr;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        long long v;
        char key[64];
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) {
            if (in)
                break;
            in = a >= lo && a < hi;
            if (in)
                kib = 0;
        } else if (in && sscanf(line, "%63[A-Za-z]: %lld kB", key, &v) == 2 &&
                   (!strcmp(key, "AnonHugePages") || !strcmp(key, "ShmemPmdMapped") ||
                    !strcmp(key, "FilePmdMapped"))) {
            kib += v;
        }
    }
    fclose(f);
    return kib;
}

/* Anonymous memory of bytes, advised advice (0: none), every page
 * written; NULL when it could not be had. */
static char *anon_buffer(size_t bytes, int advice)
{
    void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return NULL;
    if (advice)
        (void)madvise(m, bytes, advice);
    memset(m, 0, bytes);
    return m;
}

/* A /dev/shm file of bytes mapped shared with its pages allocated and
 * populated writable, as the receive pool maps its files (replicate.c,
 * size_and_map); unlinked once mapped, so that its pages go with the
 * mapping.  NULL when it could not be had. */
static char *tmpfs_buffer(const char *path, size_t bytes)
{
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return NULL;
    void *m = MAP_FAILED;
    if (!ftruncate(fd, (off_t)bytes) && !fallocate(fd, 0, 0, (off_t)bytes))
        m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    unlink(path);
    close(fd);
    if (m == MAP_FAILED)
        return NULL;
    if (madvise(m, bytes, MADV_POPULATE_WRITE) && errno != EINVAL)
        memset(m, 0, bytes);
    return m;
}

#define PROBE_BYTES (64ul << 20)

/* Whether the receive pool's kind of memory could be had in huge pages
 * here without changing the host's settings: a /dev/shm file and a
 * memfd, each advised MADV_HUGEPAGE before its pages are populated, and
 * a memfd of reserved huge pages (MFD_HUGETLB).  Prints a line of what
 * each got. */
static void probe_huge(const char *path)
{
    long long kib[2] = {-1, -1};
    for (int i = 0; i < 2; i++) {
        int fd = i ? memfd_create("bench_repl", MFD_CLOEXEC)
                   : open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0)
            continue;
        if (!i)
            unlink(path);
        void *m = MAP_FAILED;
        if (!ftruncate(fd, PROBE_BYTES))
            m = mmap(NULL, PROBE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        if (m == MAP_FAILED)
            continue;
        (void)madvise(m, PROBE_BYTES, MADV_HUGEPAGE);
        memset(m, 0, PROBE_BYTES);
        kib[i] = huge_kib(m);
        munmap(m, PROBE_BYTES);
    }
    const char *tlb = "mapped";
    int fd = memfd_create("bench_repl", MFD_CLOEXEC | MFD_HUGETLB);
    if (fd < 0) {
        tlb = strerror(errno);
    } else {
        void *m = MAP_FAILED;
        if (!ftruncate(fd, PROBE_BYTES))
            m = mmap(NULL, PROBE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED)
            tlb = strerror(errno);
        else
            munmap(m, PROBE_BYTES);
        close(fd);
    }
    printf("  huge pages for the pool's kind of memory here (of %lu MiB, MADV_HUGEPAGE): "
           "/dev/shm file %lld MiB, memfd %lld MiB; MFD_HUGETLB: %s\n", PROBE_BYTES >> 20,
           kib[0] >> 10, kib[1] >> 10, tlb);
}

/* What the receiver says once, before the first connection: kilobytes
 * of each raw kind's buffer mapped by huge pages (-1: none). */
typedef struct rx_mem {
    long long huge_kib[KINDS];
} rx_mem;

/* What the receiver says after each connection. */
typedef struct rx_fig {
    uint64_t cpu_ns;        /* the connection's, this process       */
    uint64_t scrub_ns;      /* REPL_DEFER: the scrub after it, wall */
    uint64_t scrub_cpu_ns;  /* ... and CPU                          */
    fb__repl_times times;   /* --stages: a replication's, receiving */
} rx_fig;

static int stages; /* --stages: each replication's time split by stage */

/*
 * The child, one connection per run, in the parent's order: a warm-up
 * round and RUNS rounds of conns connections, then one replication beside
 * the training steps.  After each replication the step is evicted, as the
 * tier evicts its oldest before the next arrives: recycled into the pool
 * (when it has run empty, and always after a pooled run) or removed.
 * After every connection, once the receiver is idle again (the eviction
 * is not timed), it writes the CPU time the connection cost this process
 * (receiving and hashing threads) on ready_fd, and for a deferred one
 * the scrub's time: the parent waits for it before the next run.
 */
static int receiver(int lfd, int ready_fd, unsigned long long raw_bytes, int variants)
{
    char *buf = malloc(CHUNK_BYTES), *big = malloc(raw_bytes);
    char *into[KINDS] = {0};
    char why[1024] = "";
    fb__repl_pool *pool = NULL;
    if (!buf || !big || fb__repl_pool_open(&pool, dst, why, sizeof why)) {
        fprintf(stderr, "bench_repl: receiver: %s\n", why);
        return 1;
    }
    memset(big, 0, raw_bytes);
    into[RAW_SAME] = big;
    into[RAW_TMPFS] = into[RAW_WHOLE] = tmpfs_buffer(rawf, raw_bytes);
    if (variants) {
        into[RAW_HUGE] = anon_buffer(raw_bytes, MADV_HUGEPAGE);
        into[RAW_NOHUGE] = anon_buffer(raw_bytes, MADV_NOHUGEPAGE);
    }
    rx_mem mem;
    for (int k = 0; k < KINDS; k++)
        mem.huge_kib[k] = into[k] ? huge_kib(into[k]) : -1;
    int rc = !into[RAW_TMPFS] || (variants && (!into[RAW_HUGE] || !into[RAW_NOHUGE]));
    snprintf(why, sizeof why, "cannot map the raw socket's buffers: %s", strerror(errno));
    if (!rc && write(ready_fd, &mem, sizeof mem) != (ssize_t)sizeof mem)
        rc = -EPIPE;
    for (int i = 0; i < conns * (runs + 1) + 1 && !rc; i++) {
        int kind = i < conns * (runs + 1) ? kind_at(i / conns, i % conns) : REPL_DEFER;
        int fd = accept(lfd, NULL, NULL);
        fb__repl_times tm = {0};
        if (stages && kind >= REPL_COLD)
            fb__repl_times_record(&tm);
        uint64_t c0 = cpu_ns(CLOCK_PROCESS_CPUTIME_ID);
        if (kind < REPL_COLD) {
            rc = drain(fd, buf, into[kind], raw_bytes, kind == RAW_WHOLE);
            snprintf(why, sizeof why, "raw connection cut short");
            close(fd);
        } else {
            fb__repl_stats st = {0};
            rc = fb__repl_serve_pool(fd, dst, 1ull << 40, kind == REPL_COLD ? NULL : pool,
                                     kind == REPL_DEFER ? FB__REPL_DEFER_VERIFY : 0, &st,
                                     why, sizeof why);
            close(fd);
        }
        rx_fig fig = {cpu_ns(CLOCK_PROCESS_CPUTIME_ID) - c0, 0, 0, tm};
        fb__repl_times_record(NULL);
        if (!rc && kind == REPL_DEFER) {
            fb__repl_scrub_stats ss = {0};
            uint64_t t0 = fb__now_ns(), s0 = cpu_ns(CLOCK_PROCESS_CPUTIME_ID);
            (void)fb__repl_scrub(dst, NULL, NULL, NULL, &ss);
            fig.scrub_ns = fb__now_ns() - t0;
            fig.scrub_cpu_ns = cpu_ns(CLOCK_PROCESS_CPUTIME_ID) - s0;
            if (ss.bytes != raw_bytes || ss.dropped) {
                snprintf(why, sizeof why, "the scrub committed %llu bytes of %llu, dropped "
                         "%llu shards", (unsigned long long)ss.bytes, raw_bytes,
                         (unsigned long long)ss.dropped);
                rc = -EIO;
            }
        }
        if (rc || kind < REPL_COLD) {
            /* nothing to evict */
        } else if (kind != REPL_COLD || !fb__repl_pool_files(pool, NULL)) {
            rc = fb__repl_pool_recycle(pool, dst, 1, why, sizeof why);
            rc = rc < 0 ? rc : 0;
        } else {
            char step_dir[160];
            snprintf(step_dir, sizeof step_dir, "%s/step-0000000001", dst);
            fb__rm_rf(step_dir);
        }
        if (!rc && write(ready_fd, &fig, sizeof fig) != (ssize_t)sizeof fig)
            rc = -EPIPE;
    }
    if (rc)
        fprintf(stderr, "bench_repl: receiver: %s\n", why);
    fb__repl_pool_close(pool);
    for (int k = RAW_TMPFS; k < RAW_WHOLE; k++)
        if (into[k])
            munmap(into[k], raw_bytes);
    free(buf);
    free(big);
    return rc != 0;
}

static int ready_rd = -1; /* the receiver's CPU time per connection */

/* --stages: the last run's stage times at each end and its elapsed time
 * (finish_run, repl_run_flag), and their sums over the counted rounds
 * per kind (main). */
static fb__repl_times last_rx, last_tx;
static uint64_t last_elapsed_ns;
static fb__repl_times sum_rx[KINDS], sum_tx[KINDS];
static uint64_t sum_elapsed_ns[KINDS], sum_conns[KINDS];

static void times_add(fb__repl_times *to, const fb__repl_times *t)
{
    for (int s = 0; s < FB__REPL_STAGES; s++)
        to->ns[s] += t->ns[s];
    to->rx_shards += t->rx_shards;
    to->tx_shards += t->tx_shards;
    to->tx_steps += t->tx_steps;
}

/* One run's figures: throughput, and the CPU time both ends spent on
 * each byte. */
typedef struct run_fig {
    double gbps, cpu_ns_per_byte;
    double rx_share;        /* of that CPU time, the receiver's */
    double scrub_gbps;      /* REPL_DEFER: the scrub alone ...     */
    double scrub_ns_per_byte; /* ... its CPU per byte              */
    double e2e_gbps;        /* ... and transfer and scrub together */
} run_fig;

/* Wait for the receiver to be idle again, and take its CPU time: the
 * run's figures from the sender's elapsed and CPU times; gbps -1 when the
 * run failed. */
static run_fig finish_run(int ok, uint64_t elapsed_ns, uint64_t sender_cpu_ns,
                          unsigned long long total)
{
    run_fig f = {-1, 0, 0, 0, 0, 0};
    rx_fig rx;
    if (read(ready_rd, &rx, sizeof rx) != (ssize_t)sizeof rx || !ok || !elapsed_ns)
        return f;
    last_rx = rx.times;
    last_elapsed_ns = elapsed_ns;
    uint64_t rx_cpu = rx.cpu_ns;
    f.gbps = (double)total / ((double)elapsed_ns / 1e9) / 1e9;
    if (rx.scrub_ns) {
        f.scrub_gbps = (double)total / ((double)rx.scrub_ns / 1e9) / 1e9;
        f.scrub_ns_per_byte = (double)rx.scrub_cpu_ns / (double)total;
        f.e2e_gbps = (double)total / ((double)(elapsed_ns + rx.scrub_ns) / 1e9) / 1e9;
    }
    f.cpu_ns_per_byte = (double)(sender_cpu_ns + rx_cpu) / (double)total;
    f.rx_share = (double)rx_cpu / (double)(sender_cpu_ns + rx_cpu + 1);
    return f;
}

/* Write all of n bytes from p; 0, or -1. */
static int send_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Send each shard file whole with sendfile, no header: the bytes a
 * replica moves, moved the way it moves them. */
static int send_files(int fd, int ranks)
{
    for (int r = 0; r < ranks; r++) {
        char p[200];
        snprintf(p, sizeof p, "%s/step-0000000001/rank-%05d.safetensors", src, r);
        int in = open(p, O_RDONLY | O_CLOEXEC);
        struct stat st;
        if (in < 0 || fstat(in, &st)) {
            if (in >= 0)
                close(in);
            return -1;
        }
        off_t off = 0;
        while (off < st.st_size) {
            ssize_t n = sendfile(fd, in, &off, (size_t)(st.st_size - off));
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0) {
                close(in);
                return -1;
            }
        }
        close(in);
    }
    return 0;
}

/* A raw run: total bytes from one 4 MiB buffer (ranks 0), or the ranks'
 * shard files with sendfile; timed until the receiver closed. */
static run_fig raw_run(int port, const char *buf, int ranks, unsigned long long total)
{
    int fd = bench_connect_loopback(port);
    if (fd < 0)
        return finish_run(0, 0, 0, total);
    uint64_t c0 = cpu_ns(CLOCK_THREAD_CPUTIME_ID), t0 = fb__now_ns();
    int rc = 0;
    if (ranks) {
        rc = send_files(fd, ranks);
    } else {
        for (unsigned long long left = total; left && !rc;) {
            size_t want = left < CHUNK_BYTES ? (size_t)left : CHUNK_BYTES;
            rc = send_all(fd, buf, want);
            left -= want;
        }
    }
    shutdown(fd, SHUT_WR);
    char c;
    while (read(fd, &c, 1) > 0)
        ;
    uint64_t t = fb__now_ns() - t0, cpu = cpu_ns(CLOCK_THREAD_CPUTIME_ID) - c0;
    close(fd);
    return finish_run(rc == 0, t, cpu, total);
}

/* A replication; *sent (may be NULL) is set once the peer answered every
 * shard, before waiting for the receiver to be idle again (its scrub). */
static run_fig repl_run_flag(int port, int ranks, unsigned long long total,
                             volatile int *sent)
{
    int fd = bench_connect_loopback(port);
    if (fd < 0)
        return finish_run(0, 0, 0, total);
    char why[1024];
    fb__repl_times tm = {0};
    if (stages && !sent)
        fb__repl_times_record(&tm);
    uint64_t c0 = cpu_ns(CLOCK_THREAD_CPUTIME_ID), t0 = fb__now_ns();
    int rc = fb__repl_send_step(fd, src, 1, 0, ranks, why, sizeof why);
    uint64_t t = fb__now_ns() - t0, cpu = cpu_ns(CLOCK_THREAD_CPUTIME_ID) - c0;
    fb__repl_times_record(NULL);
    last_tx = tm;
    close(fd);
    if (sent)
        __atomic_store_n(sent, 1, __ATOMIC_RELEASE);
    if (rc)
        fprintf(stderr, "bench_repl: %s\n", why);
    return finish_run(rc == 0, t, cpu, total);
}

static run_fig repl_run(int port, int ranks, unsigned long long total)
{
    return repl_run_flag(port, ranks, total, NULL);
}

/*
 * The step slowdown while a replica is sent.  A training step here reads
 * and writes every element of a BENCH_REPL_STEP_MIB array (default 64),
 * as an optimizer step does its weights; its median time alone, then
 * while a thread sends the step's replica (pool warm), until the peer
 * answered its last shard; not its scrub after, which the node watcher
 * runs at idle priority (it takes only a CPU training leaves).  The
 * receiver is on this host too, where on a cluster it is another node:
 * its CPU competes with the step here and would not there.
 */
typedef struct sender_arg {
    int port, ranks;
    unsigned long long total;
    volatile int done;
    double gbps;
} sender_arg;

static void *sender_main(void *p)
{
    sender_arg *a = p;
    a->gbps = repl_run_flag(a->port, a->ranks, a->total, &a->done).gbps;
    __atomic_store_n(&a->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double one_step(float *w, size_t n)
{
    uint64_t t0 = fb__now_ns();
    for (size_t i = 0; i < n; i++)
        w[i] = w[i] * 0.999f + 0.001f;
    __asm__ volatile("" : : "r"(w) : "memory");
    return (double)(fb__now_ns() - t0) / 1e6;
}

#define MAX_STEPS 4096

/* Median step in ms alone (*alone) and during a replica (*during, over
 * *nduring steps); 0, or -1 when the replica failed. */
static int step_slowdown(int port, int ranks, unsigned long long total, double *alone,
                         double *during, int *nduring)
{
    size_t n = (size_t)env_ll("BENCH_REPL_STEP_MIB", 64, 1, 4096) << 18;
    float *w = malloc(n * sizeof *w);
    double *t = malloc(MAX_STEPS * sizeof *t);
    if (!w || !t) {
        free(w);
        free(t);
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        w[i] = (float)(i & 1023);
    int k = 0;
    one_step(w, n); /* warm */
    for (; k < 15; k++)
        t[k] = one_step(w, n);
    qsort(t, (size_t)k, sizeof *t, cmp_double);
    *alone = t[k / 2];
    sender_arg a = {.port = port, .ranks = ranks, .total = total};
    pthread_t th;
    if (pthread_create(&th, NULL, sender_main, &a)) {
        free(w);
        free(t);
        return -1;
    }
    k = 0;
    while (!__atomic_load_n(&a.done, __ATOMIC_ACQUIRE) && k < MAX_STEPS)
        t[k++] = one_step(w, n);
    pthread_join(th, NULL);
    qsort(t, (size_t)k, sizeof *t, cmp_double);
    *during = k ? t[k / 2] : 0;
    *nduring = k;
    free(w);
    free(t);
    return a.gbps < 0 ? -1 : 0;
}

/* Fold one run's figures into the best of its kind: each figure the
 * best it reached (CPU: the least). */
static void keep_best(run_fig *best, const run_fig *g)
{
    if (g->gbps > best->gbps)
        best->gbps = g->gbps;
    if (!best->cpu_ns_per_byte || g->cpu_ns_per_byte < best->cpu_ns_per_byte) {
        best->cpu_ns_per_byte = g->cpu_ns_per_byte;
        best->rx_share = g->rx_share;
    }
    if (g->scrub_gbps > best->scrub_gbps)
        best->scrub_gbps = g->scrub_gbps;
    if (g->e2e_gbps > best->e2e_gbps)
        best->e2e_gbps = g->e2e_gbps;
    if (!best->scrub_ns_per_byte || g->scrub_ns_per_byte < best->scrub_ns_per_byte)
        best->scrub_ns_per_byte = g->scrub_ns_per_byte;
}

/* --stages: where the replication's time went (kind, named name), at
 * each end, per shard: the means over the counted rounds of each stage's
 * wall time (fb__repl_times) and its share of that end's whole; beside,
 * the raw socket's mean time for the same bytes. */
static void print_stages(int kind, const char *name, int ranks, unsigned long long total)
{
    const fb__repl_times *rx = &sum_rx[kind], *tx = &sum_tx[kind];
    if (!rx->rx_shards || !tx->tx_shards || !tx->tx_steps || !sum_conns[kind])
        return;
    uint64_t rx_all = 0, tx_all = 0;
    for (int st = 0; st < FB__REPL_TX_OPEN; st++)
        rx_all += rx->ns[st];
    for (int st = FB__REPL_TX_OPEN; st < FB__REPL_STAGES; st++)
        tx_all += tx->ns[st];
    printf("  stages, %s: %d shards of %.1f MiB, mean of %llu steps, %.2f ms a step "
           "(the sender's wall time)\n", name, ranks, (double)total / ranks / (1 << 20),
           (unsigned long long)sum_conns[kind],
           (double)sum_elapsed_ns[kind] / (double)sum_conns[kind] / 1e6);
    for (int st = 0; st < FB__REPL_STAGES; st++) {
        int is_rx = st < FB__REPL_TX_OPEN, per_step = st == FB__REPL_TX_ANSWERS;
        uint64_t n = is_rx ? rx->rx_shards : per_step ? tx->tx_steps : tx->tx_shards;
        uint64_t ns = is_rx ? rx->ns[st] : tx->ns[st], all = is_rx ? rx_all : tx_all;
        printf("    %-16s %8.3f ms a %-5s %5.1f%% of the %s's time\n",
               fb__repl_stage_name((fb__repl_stage)st), (double)ns / (double)n / 1e6,
               per_step ? "step" : "shard", all ? 100.0 * (double)ns / (double)all : 0,
               is_rx ? "receiver" : "sender");
    }
    for (int k = RAW_SAME; k <= RAW_TMPFS; k++)
        if (sum_conns[k])
            printf("    raw socket%-6s %8.3f ms a shard's bytes (%.2f ms a step)\n",
                   k == RAW_SAME ? "" : ", tmpfs",
                   (double)sum_elapsed_ns[k] / (double)sum_conns[k] / ranks / 1e6,
                   (double)sum_elapsed_ns[k] / (double)sum_conns[k] / 1e6);
}

int main(int argc, char **argv)
{
    static const char usage[] = "bench_repl [--variants] [--stages]";
    bench_help(argc, argv, usage,
               "Replication of a checkpoint step to a peer's memory (fbr1) against raw\n"
               "TCP moving the same bytes between the same two processes, in the same\n"
               "run (issue 18: target >= 0.8x).  BENCH_REPL_RANKS shards (4) of\n"
               "BENCH_REPL_MIB MiB (512), BENCH_REPL_RUNS rounds (5), in /dev/shm,\n"
               "removed.  --variants: more ways of sending; --stages: where time goes.\n");
    int variants = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--variants")) {
            variants = 1;
        } else if (!strcmp(argv[i], "--stages")) {
            stages = 1;
        } else {
            bench_bad_usage(usage, "bench_repl: unknown argument");
        }
    }
    set_order(variants);
    signal(SIGPIPE, SIG_IGN);
    runs = (int)env_ll("BENCH_REPL_RUNS", 5, 1, RUNS_MAX);
    int ranks = (int)env_ll("BENCH_REPL_RANKS", 4, 1, 64);
    size_t bytes = (size_t)env_ll("BENCH_REPL_MIB", 512, 1, 1 << 16) << 20;
    bench_shm_sweep();
    snprintf(base, sizeof base, "/dev/shm/fb-bench-repl.%d", (int)getpid());
    snprintf(src, sizeof src, "%s/a", base);
    snprintf(dst, sizeof dst, "%s/b", base);
    snprintf(rawf, sizeof rawf, "%s/raw-tmpfs", base);
    if (fb__mkdir_p(src, 0700) || fb__mkdir_p(dst, 0700)) {
        perror("bench_repl: mkdir");
        return 1;
    }
    bench_shm_keep(base);
    if (make_step(ranks, bytes)) {
        fprintf(stderr, "bench_repl: cannot save the step in %s\n", src);
        return 1;
    }
    unsigned long long total = 0;
    for (int r = 0; r < ranks; r++) {
        char p[200];
        snprintf(p, sizeof p, "%s/step-0000000001/rank-%05d.safetensors", src, r);
        FILE *f = fopen(p, "rb");
        if (!f || fseek(f, 0, SEEK_END))
            return 1;
        total += (unsigned long long)ftell(f);
        fclose(f);
    }
    int port;
    int lfd = bench_listen_loopback(&port);
    if (lfd < 0) {
        perror("bench_repl: listen");
        return 1;
    }
    int ready[2];
    if (pipe(ready)) {
        perror("bench_repl: pipe");
        return 1;
    }
    pid_t child = fork();
    if (child == 0) {
        bench_shm_disown(); /* the parent removes the directories */
        close(ready[0]);
        _exit(receiver(lfd, ready[1], total, variants));
    }
    close(lfd);
    close(ready[1]);
    ready_rd = ready[0];
    rx_mem mem;
    if (read(ready_rd, &mem, sizeof mem) != (ssize_t)sizeof mem) {
        fprintf(stderr, "bench_repl: the receiver did not start\n");
        waitpid(child, NULL, 0);
        return 1;
    }

    char *buf = malloc(CHUNK_BYTES);
    if (!buf)
        return 1;
    memset(buf, 0x5a, CHUNK_BYTES);
    /* Interleaved rounds after one to warm up (both ends' pages, the
     * pool, the caches), so that the load of the moment weighs on each
     * figure alike; each figure the best of its runs (2 runs for the
     * kinds a round has twice), and the median of the rounds' (pairs')
     * own ratios beside. */
    run_fig best[KINDS];
    memset(best, 0, sizeof best);
    double ratios[2 * RUNS_MAX], ratios_cached[RUNS_MAX], ratios_arrival[RUNS_MAX];
    double ratios_cpu[2 * RUNS_MAX], ratios_tmpfs[2 * RUNS_MAX], ratios_tmpfs_cpu[2 * RUNS_MAX];
    /* the raw socket into each other kind of memory against the baseline,
     * pair by pair: throughput, CPU per byte */
    double mem_gbps[KINDS][2 * RUNS_MAX], mem_cpu[KINDS][2 * RUNS_MAX];
    double whole_cpu[2 * RUNS_MAX]; /* RAW_WHOLE against RAW_TMPFS, CPU per byte */
    double alone = 0, during = 0;
    int failed = 0, nduring = 0;
    for (int i = -1; i < runs && !failed; i++) {
        run_fig g[KINDS], pair[2][KINDS];
        int seen[KINDS] = {0};
        for (int pos = 0; pos < conns && !failed; pos++) {
            int k = kind_at(i + 1, pos); /* the receiver counts the warm-up as round 0 */
            run_fig f = k == RAW_CACHED ? raw_run(port, buf, 0, total)
                        : k < REPL_COLD ? raw_run(port, buf, ranks, total)
                                        : repl_run(port, ranks, total);
            failed |= f.gbps < 0;
            g[k] = pair[seen[k]++ ? 1 : 0][k] = f;
            if (i >= 0)
                keep_best(&best[k], &f);
            if (i >= 0 && !failed) {
                sum_elapsed_ns[k] += last_elapsed_ns;
                sum_conns[k]++;
                if (k >= REPL_COLD) {
                    times_add(&sum_rx[k], &last_rx);
                    times_add(&sum_tx[k], &last_tx);
                }
            }
        }
        if (i >= 0 && !failed) {
            for (int j = 0; j < 2; j++) {
                const run_fig *a = &pair[j][RAW_SAME], *b = &pair[j][REPL_DEFER],
                              *t = &pair[j][RAW_TMPFS];
                ratios[2 * i + j] = b->gbps / a->gbps;
                ratios_cpu[2 * i + j] =
                    a->cpu_ns_per_byte > 0 ? b->cpu_ns_per_byte / a->cpu_ns_per_byte : 0;
                ratios_tmpfs[2 * i + j] = b->gbps / t->gbps;
                ratios_tmpfs_cpu[2 * i + j] =
                    t->cpu_ns_per_byte > 0 ? b->cpu_ns_per_byte / t->cpu_ns_per_byte : 0;
                whole_cpu[2 * i + j] = t->cpu_ns_per_byte > 0
                                           ? pair[j][RAW_WHOLE].cpu_ns_per_byte / t->cpu_ns_per_byte
                                           : 0;
                for (int k = RAW_TMPFS; k <= RAW_WHOLE; k++) {
                    mem_gbps[k][2 * i + j] = pair[j][k].gbps / a->gbps;
                    mem_cpu[k][2 * i + j] = a->cpu_ns_per_byte > 0
                                                ? pair[j][k].cpu_ns_per_byte / a->cpu_ns_per_byte
                                                : 0;
                }
            }
            ratios_arrival[i] = g[REPL_POOL].gbps / g[RAW_SAME].gbps;
            ratios_cached[i] = g[REPL_DEFER].gbps / g[RAW_CACHED].gbps;
        }
    }
    qsort(ratios, (size_t)(2 * runs), sizeof ratios[0], cmp_double);
    qsort(ratios_arrival, (size_t)runs, sizeof ratios_arrival[0], cmp_double);
    qsort(ratios_cached, (size_t)runs, sizeof ratios_cached[0], cmp_double);
    qsort(ratios_cpu, (size_t)(2 * runs), sizeof ratios_cpu[0], cmp_double);
    qsort(ratios_tmpfs, (size_t)(2 * runs), sizeof ratios_tmpfs[0], cmp_double);
    qsort(ratios_tmpfs_cpu, (size_t)(2 * runs), sizeof ratios_tmpfs_cpu[0], cmp_double);
    qsort(whole_cpu, (size_t)(2 * runs), sizeof whole_cpu[0], cmp_double);
    for (int k = RAW_TMPFS; k <= RAW_WHOLE; k++) {
        qsort(mem_gbps[k], (size_t)(2 * runs), sizeof mem_gbps[k][0], cmp_double);
        qsort(mem_cpu[k], (size_t)(2 * runs), sizeof mem_cpu[k][0], cmp_double);
    }
    if (!failed)
        failed |= step_slowdown(port, ranks, total, &alone, &during, &nduring) != 0;
    if (failed)
        kill(child, SIGKILL);
    int status = 0;
    waitpid(child, &status, 0);
    free(buf);
    if (failed || !WIFEXITED(status) || WEXITSTATUS(status)) {
        fprintf(stderr, "bench_repl: failed (receiver status %d)\n", status);
        return 1;
    }
    double raw = best[RAW_SAME].gbps, repl = best[REPL_DEFER].gbps, ratio = repl / raw;
    printf("bench_repl: %d shards, %.0f MiB, loopback, best of %d after a warm-up round (the "
           "baseline, to arrival and the raw socket into tmpfs pages: of %d)\n", ranks,
           (double)total / (1 << 20), runs, 2 * runs);
    printf("  %-32s %6.2f GB/s  %5.2f ns/B CPU %3.0f%% rx  (the shard files with sendfile, no "
           "header, into a %.0f MiB malloc'd buffer; %lld MiB of it in huge pages)\n",
           "raw socket, same bytes (baseline)", raw, best[RAW_SAME].cpu_ns_per_byte,
           100 * best[RAW_SAME].rx_share, (double)total / (1 << 20),
           mem.huge_kib[RAW_SAME] >> 10);
    printf("  %-32s %6.2f GB/s  %5.2f ns/B CPU %3.0f%% rx  (the same, into a pre-faulted shared "
           "mapping of a /dev/shm file, the receive pool's kind; %lld MiB in huge pages; "
           "informational)\n", "raw socket into tmpfs pages", best[RAW_TMPFS].gbps,
           best[RAW_TMPFS].cpu_ns_per_byte, 100 * best[RAW_TMPFS].rx_share,
           mem.huge_kib[RAW_TMPFS] >> 10);
    if (variants) {
        printf("  %-32s %6.2f GB/s  %5.2f ns/B CPU %3.0f%% rx  (anonymous, MADV_HUGEPAGE; %lld "
               "MiB in huge pages)\n", "raw socket into THP memory", best[RAW_HUGE].gbps,
               best[RAW_HUGE].cpu_ns_per_byte, 100 * best[RAW_HUGE].rx_share,
               mem.huge_kib[RAW_HUGE] >> 10);
        printf("  %-32s %6.2f GB/s  %5.2f ns/B CPU %3.0f%% rx  (anonymous, MADV_NOHUGEPAGE; "
               "%lld MiB in huge pages)\n", "raw socket into 4 KiB anon pages",
               best[RAW_NOHUGE].gbps, best[RAW_NOHUGE].cpu_ns_per_byte,
               100 * best[RAW_NOHUGE].rx_share, mem.huge_kib[RAW_NOHUGE] >> 10);
        printf("  %-32s %6.2f GB/s  %5.2f ns/B CPU %3.0f%% rx  (tmpfs pages, each read asking "
               "for all that is left, as the replication's)\n", "raw into tmpfs, whole reads",
               best[RAW_WHOLE].gbps, best[RAW_WHOLE].cpu_ns_per_byte,
               100 * best[RAW_WHOLE].rx_share);
    }
    printf("  %-32s %6.2f GB/s  %5.2f ns/B CPU %3.0f%% rx  (one 4 MiB buffer on both ends, "
           "bench_tcp's way)\n", "raw socket, cached buffers",
           best[RAW_CACHED].gbps, best[RAW_CACHED].cpu_ns_per_byte,
           100 * best[RAW_CACHED].rx_share);
    printf("  %-32s %6.2f GB/s  %5.2f ns/B CPU %3.0f%% rx  (each shard's pages allocated on "
           "arrival)\n", "replication, no pool", best[REPL_COLD].gbps,
           best[REPL_COLD].cpu_ns_per_byte, 100 * best[REPL_COLD].rx_share);
    printf("  %-32s %6.2f GB/s  %5.2f ns/B CPU %3.0f%% rx  (receive pool: the evicted step's "
           "files, hashes checked on arrival)\n", "replication, verified on arrival",
           best[REPL_POOL].gbps, best[REPL_POOL].cpu_ns_per_byte,
           100 * best[REPL_POOL].rx_share);
    printf("  %-32s %6.2f GB/s  %5.2f ns/B CPU %3.0f%% rx  (the same pool, hashes checked "
           "after, by the scrub: the node watcher's way)\n", "replication, to arrival", repl,
           best[REPL_DEFER].cpu_ns_per_byte, 100 * best[REPL_DEFER].rx_share);
    printf("  %-32s %6.2f GB/s  %5.2f ns/B CPU       (reads back every shard, checks every "
           "hash, commits)\n", "  the scrub after it", best[REPL_DEFER].scrub_gbps,
           best[REPL_DEFER].scrub_ns_per_byte);
    printf("  %-32s %6.2f GB/s                     (arrival, then the scrub, one after the "
           "other)\n", "  transfer and scrub", best[REPL_DEFER].e2e_gbps);
    printf("  ratio                      %6.2f   (to arrival; target >= 0.80; median of "
           "pairs %.2f, %.2f to %.2f)\n", ratio, ratios[runs], ratios[0],
           ratios[2 * runs - 1]);
    printf("  ratio to raw into tmpfs    %6.2f   (to arrival against the raw socket into the "
           "same kind of memory; informational, no target; median of pairs %.2f; CPU per "
           "byte %.2f, median of pairs %.2f)\n", repl / best[RAW_TMPFS].gbps,
           ratios_tmpfs[runs],
           best[REPL_DEFER].cpu_ns_per_byte / best[RAW_TMPFS].cpu_ns_per_byte,
           ratios_tmpfs_cpu[runs]);
    static const char *const mem_name[KINDS] = {
        [RAW_TMPFS] = "tmpfs", [RAW_HUGE] = "THP", [RAW_NOHUGE] = "4 KiB anon",
        [RAW_WHOLE] = "tmpfs whole"};
    for (int k = RAW_TMPFS; k <= (variants ? RAW_WHOLE : RAW_TMPFS); k++)
        printf("  raw: %-10s / baseline %6.2f   (the memory's part; median of pairs %.2f; CPU "
               "per byte %.2f, median of pairs %.2f)\n", mem_name[k], best[k].gbps / raw,
               mem_gbps[k][runs], best[k].cpu_ns_per_byte / best[RAW_SAME].cpu_ns_per_byte,
               mem_cpu[k][runs]);
    if (variants) {
        printf("  raw into tmpfs: whole reads / 4 MiB reads, CPU per byte %.2f (median of "
               "pairs %.2f)\n", best[RAW_WHOLE].cpu_ns_per_byte / best[RAW_TMPFS].cpu_ns_per_byte,
               whole_cpu[runs]);
        probe_huge(rawf);
    }
    printf("  ratio verified on arrival  %6.2f   (median of rounds %.2f)\n",
           best[REPL_POOL].gbps / raw, ratios_arrival[runs / 2]);
    printf("  ratio transfer and scrub   %6.2f\n", best[REPL_DEFER].e2e_gbps / raw);
    printf("  ratio to cached raw        %6.2f   (median of rounds %.2f)\n",
           repl / best[RAW_CACHED].gbps, ratios_cached[runs / 2]);
    printf("  ratio without the pool     %6.2f   (verified on arrival)\n",
           best[REPL_COLD].gbps / raw);
    printf("  CPU per byte / raw's        %5.2f to arrival (median of pairs %.2f), %.2f "
           "verified on arrival, %.2f with the scrub (both ends, best of each)\n",
           best[REPL_DEFER].cpu_ns_per_byte / best[RAW_SAME].cpu_ns_per_byte,
           ratios_cpu[runs],
           best[REPL_POOL].cpu_ns_per_byte / best[RAW_SAME].cpu_ns_per_byte,
           (best[REPL_DEFER].cpu_ns_per_byte + best[REPL_DEFER].scrub_ns_per_byte) /
               best[RAW_SAME].cpu_ns_per_byte);
    if (stages) {
        print_stages(REPL_DEFER, "to arrival", ranks, total);
        print_stages(REPL_POOL, "verified on arrival", ranks, total);
    }
    printf("  training step, %lld MiB rw  %6.1f ms alone, %.1f ms while a replica is "
           "sent (median of %d) = %.2fx\n",
           env_ll("BENCH_REPL_STEP_MIB", 64, 1, 4096), alone, during, nduring,
           alone > 0 ? during / alone : 0);
    double load[3] = {0};
    if (getloadavg(load, 3) < 0)
        load[0] = -1;
    printf("  (the receiver shares this host's %ld CPUs; load average %.2f)\n",
           sysconf(_SC_NPROCESSORS_ONLN), load[0]);
    char w[96], m[64], b[64];
    bench_target("bench_repl",
                 bench_fmt(w, sizeof w, "peer replication, fbr1, %d shards, %.0f MiB, "
                           "to arrival, pool", ranks, (double)total / (1 << 20)),
                 bench_fmt(m, sizeof m, "%.2f GB/s = %.2fx", repl, ratio),
                 bench_fmt(b, sizeof b, "raw socket, same bytes %.2f GB/s", raw),
                 ">= 0.8x", ratio >= 0.8);
    return ratio >= 0.8 ? 0 : 1;
}
