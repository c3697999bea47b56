/*
 * test_replicate.c -- fbr1 between two processes over loopback TCP
 * (src/ckpt/replicate.c): a step's shards arrive committed and verified;
 * a shard corrupted in the sender's tier is rejected on arrival (answered
 * FB_ECORRUPT, never committed) and the connection goes on; a header that
 * is not fbr1 ends the connection with FB_EFORMAT.  With a receive pool:
 * an evicted step leaves the tier whole and its files take the next
 * shards (a rejected one's file goes back to the pool, a larger file is
 * cut to the shard's size), refill allocates as many files as the newest
 * step had shards, and closing the pool leaves nothing behind; under a
 * cap (fb__repl_pool_cap) a shard that would grow the node's memory past
 * it is refused (-ENOSPC, the connection goes on), one that fits in a
 * pool file is not.  Deferred verification (FB__REPL_DEFER_VERIFY, the
 * node watcher's way): shards are answered once they arrived, nothing is
 * committed until fb__repl_scrub checked every hash, and the scrub drops
 * a shard corrupted at the sender and one corrupted in the receiver's
 * memory after it arrived, never committing either.  Last, a copy the
 * scrub committed and that was corrupted in memory afterwards: a restore
 * (per node, the supervisor's choice of step) does not use it, falls to
 * storage, and records it (restore_fallback naming the peer copy, then
 * restore_done from storage, in the rank's segment).  Stage times
 * (fb__repl_times_record), asked for at either end on one step, count
 * that step's shards and their data and stay within its wall time.  A
 * committed shard's mapping may outlast its answer (the receiver releases
 * it once the socket has nothing waiting), never the connection.  Shards
 * of several MiB into new files (written from the receiver's ring of
 * chunk buffers, not a mapping): committed byte for byte, a corruption in
 * a middle chunk or the last one rejected, and a file that cannot be
 * written (RLIMIT_FSIZE) answered with its error while the connection
 * goes on in step.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../check.h"
#include "ckpt/replicate.h"
#include "ckpt/store.h"
#include "ckpt/tier.h"
#include "common/util.h"
#include "lib/segment.h"

static char dir[] = "/tmp/fb-repl-test.XXXXXX";
static char src[4200], dst[4200];

static char dst2[4200];
static char mem[4200], peer[4200], storage[4200]; /* a node's, deferred */

/* An engine saving rank `rank` of a 2-rank job into d, synchronously;
 * NULL when it could not open (counted). */
static fb_ckpt *open_rank(const char *d, int rank)
{
    fb_ckpt_options o;
    fb_ckpt_options_init(&o);
    o.dir = d;
    o.rank = rank;
    o.world_size = 2;
    o.async = 0;
    o.keep = 5;
    fb_ckpt *ck = NULL;
    CHECK_RC(fb_ckpt_open(&ck, &o), 0);
    return ck;
}

/* Steps 7 and 8 of a 2-rank job in src, saved by the engine, and step 9
 * with a quarter of the elements (smaller shards). */
static void save_steps(void)
{
    for (int rank = 0; rank < 2; rank++) {
        static float w[2][4096];
        for (int i = 0; i < 4096; i++)
            w[rank][i] = (float)(i * (rank + 1));
        for (int elems = 4096; elems >= 1024; elems -= 3072) {
            fb_ckpt *ck = open_rank(src, rank);
            if (!ck)
                return;
            CHECK_RC(fb_ckpt_register(ck, "w", FB_DTYPE_F32, 1, (int64_t[]){elems}, w[rank]),
                     0);
            if (elems == 4096) {
                CHECK_RC(fb_ckpt_save(ck, 7), 0);
                CHECK_RC(fb_ckpt_save(ck, 8), 0);
            } else {
                CHECK_RC(fb_ckpt_save(ck, 9), 0);
            }
            fb_ckpt_close(ck);
        }
    }
}

/* Flip the last byte of a file. */
static void corrupt_file(const char *p)
{
    int fd = open(p, O_RDWR);
    struct stat st;
    CHECK(fd >= 0 && fstat(fd, &st) == 0);
    unsigned char b = 0;
    CHECK(pread(fd, &b, 1, st.st_size - 1) == 1);
    b ^= 0x5a;
    CHECK(pwrite(fd, &b, 1, st.st_size - 1) == 1);
    close(fd);
}

/* Flip the last byte of a shard's data. */
static void corrupt(const char *d, uint64_t step, int rank)
{
    char p[4300];
    fb__ckpt_shard_path(p, sizeof p, d, step, rank);
    corrupt_file(p);
}

#define EXPECT(cond, ...)                                                     \
    do {                                                                      \
        if (!(cond)) {                                                        \
            fprintf(stderr, "receiver: " __VA_ARGS__);                        \
            fputc('\n', stderr);                                              \
            bad++;                                                            \
        }                                                                     \
    } while (0)

/* Bytes allocated under dir (ctx), as the node's memory counts them. */
static uint64_t du_total;
static int du_add(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)path, (void)flag, (void)ftw;
    du_total += (uint64_t)st->st_blocks * 512;
    return 0;
}

static uint64_t held_under(void *ctx)
{
    du_total = 0;
    nftw(ctx, du_add, 16, FTW_PHYS);
    return du_total;
}

/* A cap of cap_bytes on what is held under cap_dir, for one pool on one
 * thread (the node watcher's is shared by its slots: test_peer.c). */
static uint64_t cap_bytes, cap_reserved;
static char *cap_dir;

static int reserve_under(void *ctx, uint64_t bytes, fb__repl_room *room)
{
    (void)ctx;
    room->cap = cap_bytes;
    room->held = held_under(cap_dir);
    room->reserved = cap_reserved;
    if (room->held + cap_reserved + bytes > cap_bytes)
        return 0;
    cap_reserved += bytes;
    return 1;
}

static void release_under(void *ctx, uint64_t bytes)
{
    (void)ctx;
    cap_reserved -= bytes;
}

/* Stage times recorded at one end (rx: the receiver's, of `shards`
 * shards; else the sender's, of one step of `shards`), within wall_ns:
 * that end's counts and its data stage, nothing at the other's; 0, or 1
 * (said). */
static int check_times(const fb__repl_times *t, int rx, uint64_t shards, uint64_t wall_ns,
                       const char *what)
{
    uint64_t mine = 0, other = 0;
    for (int s = 0; s < FB__REPL_STAGES; s++) {
        if ((s < FB__REPL_TX_OPEN) == rx)
            mine += t->ns[s];
        else
            other += t->ns[s];
    }
    uint64_t data = t->ns[rx ? FB__REPL_RX_DATA : FB__REPL_TX_DATA];
    int counts = rx ? t->rx_shards == shards && !t->tx_shards && !t->tx_steps
                    : t->tx_shards == shards && t->tx_steps == 1 && !t->rx_shards;
    if (counts && data > 0 && mine >= data && mine <= wall_ns && !other)
        return 0;
    fprintf(stderr, "%s: stage counts rx %llu, tx %llu shards and %llu steps (want %llu "
            "shards %s); %s %llu ns, that end's stages %llu ns in %llu ns of wall time, "
            "the other end's %llu ns (want 0)\n", what, (unsigned long long)t->rx_shards,
            (unsigned long long)t->tx_shards, (unsigned long long)t->tx_steps,
            (unsigned long long)shards, rx ? "received" : "sent in 1 step",
            fb__repl_stage_name(rx ? FB__REPL_RX_DATA : FB__REPL_TX_DATA),
            (unsigned long long)data, (unsigned long long)mine, (unsigned long long)wall_ns,
            (unsigned long long)other);
    return 1;
}

/* How many of this process's mappings are of files in d's step
 * directories (the pool's own files are not). */
static int step_mappings(const char *d)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[8192], want[4300];
    int n = 0;
    snprintf(want, sizeof want, "%s/step-", d);
    while (f && fgets(line, sizeof line, f))
        n += strstr(line, want) != NULL;
    if (f)
        fclose(f);
    return n;
}

/* One connection into dst2 through pool: it ends cleanly with these
 * counts, and the pool holds `files` files after it; 0, or 1 (said). */
static int pooled_conn(int lfd, fb__repl_pool *pool, const char *what, uint64_t shards,
                       uint64_t rejected, uint64_t refused, size_t files)
{
    char why[1024] = "";
    int bad = 0, fd = accept(lfd, NULL, NULL);
    fb__repl_stats st = {0};
    int rc = fb__repl_serve_pool(fd, dst2, 1u << 20, pool, 0, &st, why, sizeof why);
    close(fd);
    EXPECT(rc == 0 && st.shards == shards && st.rejected == rejected &&
           st.refused == refused, "%s: rc %d (%s), %llu committed, %llu rejected, %llu "
           "refused; want %llu, %llu, %llu", what, rc, why,
           (unsigned long long)st.shards, (unsigned long long)st.rejected,
           (unsigned long long)st.refused, (unsigned long long)shards,
           (unsigned long long)rejected, (unsigned long long)refused);
    size_t n = fb__repl_pool_files(pool, NULL);
    EXPECT(n == files, "%s: the pool holds %zu files after it, want %zu", what, n, files);
    int maps = step_mappings(dst2);
    EXPECT(maps == 0, "%s: %d shards still mapped after it", what, maps);
    return bad;
}

/* Connections 3 to 5, into dst2 with a receive pool: step 7; then, after
 * step 7 was recycled, step 8 (rank 1 corrupted), then step 9.  Then,
 * under a cap that leaves no room to grow: step 7 again (larger shards
 * than the pool's files, so refused), and step 9 again (the pool's files
 * hold it, so received). */
static int pooled_receiver(int lfd)
{
    char why[1024] = "";
    int bad = 0;
    fb__repl_pool *pool = NULL;
    uint64_t bytes = 0;
    if (fb__repl_pool_open(&pool, dst2, why, sizeof why)) {
        fprintf(stderr, "receiver: pool: %s\n", why);
        return 1;
    }
    /* Stage times, asked for on this connection alone: every shard's
     * stages at this end, none of the sender's, within the wall time. */
    fb__repl_times tm = {0};
    uint64_t t0 = fb__now_ns();
    fb__repl_times_record(&tm);
    bad += pooled_conn(lfd, pool, "pooled step 7", 2, 0, 0, 0);
    fb__repl_times_record(NULL);
    bad += check_times(&tm, 1, 2, fb__now_ns() - t0, "receiving step 7");
    int rc = fb__repl_pool_recycle(pool, dst2, 7, why, sizeof why);
    EXPECT(rc == 2, "recycling step 7 gave %d (%s), want 2 files", rc, why);
    char p[4300];
    struct stat stt;
    fb__ckpt_step_path(p, sizeof p, dst2, 7);
    EXPECT(stat(p, &stt) != 0, "step 7 still in the tier after its recycling");
    size_t n = fb__repl_pool_files(pool, &bytes);
    EXPECT(n == 2, "the pool holds %zu files after recycling step 7, want 2", n);

    /* Rank 0 took one file; rank 1's came back after its rejection. */
    bad += pooled_conn(lfd, pool, "pooled step 8", 1, 1, 0, 1);
    /* Rank 0 took that file, cut to its smaller shard; rank 1 found none. */
    bad += pooled_conn(lfd, pool, "pooled step 9", 2, 0, 0, 0);
    rc = fb__repl_pool_refill(pool, why, sizeof why);
    EXPECT(rc == 2, "refill made %d files (%s), want 2 (step 9's shards)", rc, why);
    uint64_t step9 = 0;
    for (int r = 0; r < 2; r++) {
        fb__ckpt_shard_path(p, sizeof p, dst2, 9, r);
        step9 += stat(p, &stt) == 0 ? (uint64_t)stt.st_size : 0;
    }
    n = fb__repl_pool_files(pool, &bytes);
    EXPECT(n == 2 && bytes == step9, "after refill: %zu files, %llu bytes, want 2 and "
           "%llu", n, (unsigned long long)bytes, (unsigned long long)step9);

    cap_dir = dst2;
    cap_bytes = held_under(dst2) + 1;
    fb__repl_pool_cap(pool, &(fb__repl_cap){.reserve = reserve_under,
                                            .release = release_under});
    bad += pooled_conn(lfd, pool, "step 7 over the cap", 0, 0, 2, 2);
    bad += pooled_conn(lfd, pool, "step 9 at the cap, in the pool's files", 2, 0, 0, 0);
    fb__repl_pool_close(pool);
    return bad != 0;
}

static int exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

/* The last connection, into the node's peer directory, deferred: steps 7
 * and 8 (rank 1 corrupted at the sender) arrive and are answered, none
 * committed, the pool's callback told of each as it waits for the scrub; step 8 rank 0 is corrupted in memory before the scrub; the
 * scrub commits step 7 and drops both shards of step 8 (a first one,
 * stopped at once, leaves the shard it claimed to the second). */
static int stop_now(void *arg)
{
    (void)arg;
    return 1;
}

/* fb__repl_pool_on_arrival's count, and whether the shard was there for
 * the scrub each time. */
static int arrivals, arrived_unseen;

static void on_arrival(void *ctx)
{
    char cmd[4400];
    snprintf(cmd, sizeof cmd, "ls -A '%s'/step-000000000[78] | grep -c '^\\.rank-0000[01]"
             "\\.arrived$' | grep -qx %d", (const char *)ctx, arrivals + 1);
    arrived_unseen += system(cmd) != 0;
    arrivals++;
}

/* A cap that grants everything and records the renames it is told of
 * (fb__repl_cap's moving): each begins and ends, with the bytes of a
 * file the node holds. */
static int moving_begins, moving_ends, moving_unsized;
static uint64_t moving_in_flight;

static int grant_all(void *ctx, uint64_t bytes, fb__repl_room *room)
{
    (void)ctx, (void)bytes;
    memset(room, 0, sizeof *room);
    return 1;
}

static void release_none(void *ctx, uint64_t bytes)
{
    (void)ctx, (void)bytes;
}

static void record_moving(void *ctx, uint64_t bytes, int done)
{
    (void)ctx;
    if (done) {
        moving_ends++;
        moving_in_flight -= bytes;
    } else {
        moving_begins++;
        moving_in_flight += bytes;
        moving_unsized += bytes == 0;
    }
}

static int deferred_receiver(int lfd)
{
    char why[1024] = "", p[4300], ls[4500];
    int bad = 0;
    fb__repl_pool *pool = NULL;
    if (fb__repl_pool_open(&pool, peer, why, sizeof why)) {
        fprintf(stderr, "receiver: pool: %s\n", why);
        return 1;
    }
    fb__repl_pool_on_arrival(pool, on_arrival, peer);
    const fb__repl_cap rec = {.reserve = grant_all, .release = release_none,
                              .moving = record_moving};
    fb__repl_pool_cap(pool, &rec);
    int fd = accept(lfd, NULL, NULL);
    fb__repl_stats st = {0};
    int rc = fb__repl_serve_pool(fd, peer, 1u << 20, pool, FB__REPL_DEFER_VERIFY, &st, why,
                                 sizeof why);
    close(fd);
    int maps = step_mappings(peer);
    EXPECT(maps == 0, "deferred: %d shards still mapped after it", maps);
    EXPECT(arrivals == 4 && arrived_unseen == 0, "deferred: told of %d arrivals, want 4, "
           "%d of them not waiting for the scrub then", arrivals, arrived_unseen);
    EXPECT(rc == 0 && st.shards == 4 && st.rejected == 0, "deferred: rc %d (%s), %llu "
           "arrived, %llu rejected; want 4, 0", rc, why, (unsigned long long)st.shards,
           (unsigned long long)st.rejected);
    /* Each shard's move from its pool file into its step was told, with
     * its bytes (the node's cap counts them while they move). */
    EXPECT(moving_begins == 4 && moving_ends == 4 && moving_in_flight == 0 &&
               moving_unsized == 0,
           "deferred: %d renames begun, %d ended, %llu bytes left in flight, %d told "
           "without bytes; want 4, 4, 0, 0", moving_begins, moving_ends,
           (unsigned long long)moving_in_flight, moving_unsized);
    for (int i = 0; i < 4; i++) {
        uint64_t step = 7 + (uint64_t)(i / 2);
        fb__ckpt_shard_path(p, sizeof p, peer, step, i % 2);
        EXPECT(!exists(p), "deferred: step %llu rank %d committed before its scrub",
               (unsigned long long)step, i % 2);
    }
    snprintf(p, sizeof p, "%s/step-0000000008/.rank-00000.arrived", peer);
    EXPECT(exists(p), "deferred: %s not there", p);
    corrupt_file(p);
    /* A scrub stopped at once leaves the shard it claimed for the next. */
    fb__repl_scrub_stats ss = {0};
    rc = fb__repl_scrub(peer, stop_now, NULL, NULL, &ss);
    EXPECT(rc == -ECANCELED && ss.committed == 0 && ss.dropped == 0, "stopped scrub: "
           "rc %d, %llu committed, %llu dropped; want -ECANCELED, 0, 0", rc,
           (unsigned long long)ss.committed, (unsigned long long)ss.dropped);
    snprintf(ls, sizeof ls, "ls -A '%s'/step-000000000[78] | grep -c '^\\.rank-0000[01]\\.scrub$' "
             "| grep -qx 1", peer);
    EXPECT(system(ls) == 0, "stopped scrub: not one shard left claimed");
    moving_begins = moving_ends = 0;
    rc = fb__repl_scrub(peer, NULL, NULL, &rec, &ss);
    EXPECT(rc == 0 && ss.committed == 2 && ss.dropped == 2, "scrub: rc %d, %llu "
           "committed, %llu dropped; want 2, 2", rc, (unsigned long long)ss.committed,
           (unsigned long long)ss.dropped);
    /* Claims (3: one was claimed by the stopped scrub) and commits (2). */
    EXPECT(moving_begins == 5 && moving_ends == 5 && moving_in_flight == 0 &&
               moving_unsized == 0,
           "scrub: %d renames begun, %d ended, %llu bytes left in flight, %d told "
           "without bytes; want 5, 5, 0, 0", moving_begins, moving_ends,
           (unsigned long long)moving_in_flight, moving_unsized);
    fb__repl_pool_close(pool);
    return bad != 0;
}

/* The receiver: two connections; exit 0 when each ended as expected. */
static int receiver(int lfd)
{
    char why[1024];
    fb__repl_stats st = {0};
    int fd = accept(lfd, NULL, NULL);
    int rc = fb__repl_serve(fd, dst, 1u << 20, &st, why, sizeof why);
    close(fd);
    if (rc || st.shards != 3 || st.rejected != 1) {
        fprintf(stderr, "receiver: rc %d (%s), %llu committed, %llu rejected\n", rc,
                why, (unsigned long long)st.shards, (unsigned long long)st.rejected);
        return 1;
    }
    fd = accept(lfd, NULL, NULL);
    rc = fb__repl_serve(fd, dst, 1u << 20, &st, why, sizeof why);
    close(fd);
    if (rc != FB_EFORMAT) {
        fprintf(stderr, "receiver: garbage header gave %d (%s)\n", rc, why);
        return 1;
    }
    return pooled_receiver(lfd) | deferred_receiver(lfd);
}

/* In a child, as rank 0 of 2 on a node whose peer directory holds step 7
 * (the supervisor's choice) corrupted: restore takes step 7 from storage,
 * the peer copy set aside, both recorded in the rank's segment.  0 when
 * so. */
static int restore_past_corrupt_peer_copy(void)
{
    char job[64], name[FB__SEG_NAME_MAX];
    int before = failures; /* the parent's, up to the fork */
    snprintf(job, sizeof job, "repltest-%d", (int)getpid());
    setenv("FIREBREAK_JOB_ID", job, 1);
    setenv("FIREBREAK_RANK", "0", 1);
    setenv("FIREBREAK_WORLD_SIZE", "2", 1);
    setenv("FIREBREAK_CKPT_DIR", storage, 1);
    setenv("FIREBREAK_CKPT_MEM_DIR", mem, 1);
    setenv("FIREBREAK_CKPT_MEM_PER_NODE", "1", 1);
    setenv("FIREBREAK_CKPT_RESTORE_STEP", "7", 1);
    unsetenv("FIREBREAK_INJECT");
    CHECK_RC(fb_init(), 0);
    fb__seg *reader = NULL;
    fb__seg_name(name, sizeof name, job, 0, 0);
    CHECK_RC(fb__seg_open(&reader, name), 0);
    fb_ckpt_options o;
    fb_ckpt_options_init(&o);
    o.async = 0;
    fb_ckpt *ck = NULL;
    static float w[4096];
    uint64_t step = 0;
    CHECK_RC(fb_ckpt_open(&ck, &o), 0);
    if (ck) {
        CHECK_RC(fb_ckpt_register(ck, "w", FB_DTYPE_F32, 1, (int64_t[]){4096}, w), 0);
        CHECK_RC(fb_ckpt_restore(ck, &step), 0);
        fb_ckpt_close(ck);
    }
    CHECK_EQ_U64(step, 7);
    int same = 1;
    for (int i = 0; i < 4096; i++)
        same &= w[i] == (float)i;
    CHECKF(same, "rank 0's tensor after the restore is not the one saved");
    char p[4300];
    snprintf(p, sizeof p, "%s/step-0000000007/rank-00000.corrupt", peer);
    CHECKF(exists(p), "the corrupt peer copy was not set aside as %s", p);
    int fell = 0, from_storage = 0;
    fb__seg_report r;
    for (uint64_t i = 0; reader && i < 64 && fb__seg_read_report(reader, i, &r) == 1; i++) {
        if (r.kind == FB__REPORT_RESTORE_FALLBACK && r.step == 7 &&
            strstr(r.text, "peer copy") && r.code == FB_ECORRUPT)
            fell++;
        if (r.kind == FB__REPORT_RESTORE_DONE && r.step == 7 && !strcmp(r.text, "storage"))
            from_storage++;
    }
    CHECKF(fell == 1 && from_storage == 1, "reports: %d restore_fallback from the peer "
           "copy, %d restore_done from storage; want 1 and 1", fell, from_storage);
    fb__seg_close(reader);
    fb__seg_remove_job(job, -1);
    return failures != before;
}

/* d holds two steps of the 2-rank job, newest first, with these many
 * shards each (2: complete). */
static void check_steps(const char *d, uint64_t newer, int newer_shards,
                        uint64_t older, int older_shards)
{
    fb__ckpt_entry *v = NULL;
    size_t n = 0;
    CHECK_RC(fb__ckpt_scan(d, 2, 0, &v, &n), 0);
    CHECK_EQ_U64(n, 2);
    for (size_t i = 0; i < n && i < 2; i++) {
        CHECK_EQ_U64(v[i].step, i ? older : newer);
        CHECK_EQ_INT(v[i].shards, i ? older_shards : newer_shards);
        CHECK_EQ_INT(v[i].complete, (i ? older_shards : newer_shards) == 2);
    }
    free(v);
}

/* The receiver child a connection goes to: if it has died (a check of
 * its own, or a sanitizer), the listener it leaves open in this process
 * would take connections that are never answered; stop the test there. */
static pid_t receiving;

static int connect_port(int port)
{
    int st;
    if (receiving > 0 && waitpid(receiving, &st, WNOHANG) == receiving) {
        fprintf(stderr, "the receiver (pid %d) ended with status %d before this "
                "connection\n", (int)receiving, st);
        char cmd[4300];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        exit(system(cmd) == 0 ? 1 : 2);
    }
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK(fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0);
    /* A receiver that died leaves the listener open here (lfd2): a send
     * or an answer that never comes fails the test instead of hanging it. */
    struct timeval tv = {.tv_sec = 30};
    CHECK(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) == 0 &&
          setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) == 0);
    return fd;
}

/* ---- shards of several MiB into new files ---- */

static char big[4200], bigdst[4200], bigdst2[4200];

/* Steps 11 and 12 of a 2-rank job in big: three tensors, 9.3 MB a shard
 * (nine of the receiver's 1 MiB chunks: its ring of four goes round
 * twice), sizes that do not fall on a chunk's edge. */
static void save_big(void)
{
    static const int64_t elems[3] = {1234567, 1100003, 5};
    float *w[3];
    for (int t = 0; t < 3; t++)
        CHECK((w[t] = malloc((size_t)elems[t] * sizeof(float))) != NULL);
    for (int rank = 0; rank < 2; rank++) {
        for (int t = 0; t < 3; t++)
            for (int64_t i = 0; i < elems[t]; i++)
                w[t][i] = (float)(i % 1000003) * (float)(rank + 1) + (float)t;
        fb_ckpt *ck = open_rank(big, rank);
        if (!ck)
            break;
        static const char *names[3] = {"emb", "proj", "bias"};
        for (int t = 0; t < 3; t++)
            CHECK_RC(fb_ckpt_register(ck, names[t], FB_DTYPE_F32, 1, &elems[t], w[t]), 0);
        CHECK_RC(fb_ckpt_save(ck, 11), 0);
        CHECK_RC(fb_ckpt_save(ck, 12), 0);
        fb_ckpt_close(ck);
    }
    for (int t = 0; t < 3; t++)
        free(w[t]);
}

/* Flip the byte at a third of a shard's file (a middle chunk's). */
static void corrupt_middle(const char *d, uint64_t step, int rank)
{
    char p[4300];
    fb__ckpt_shard_path(p, sizeof p, d, step, rank);
    int fd = open(p, O_RDWR);
    struct stat st;
    unsigned char b = 0;
    CHECK(fd >= 0 && fstat(fd, &st) == 0 && st.st_size > (3 << 20));
    CHECK(pread(fd, &b, 1, st.st_size / 3) == 1);
    b ^= 0x01;
    CHECK(pwrite(fd, &b, 1, st.st_size / 3) == 1);
    close(fd);
}

/* Two connections: step 11 whole, step 12's two corrupted shards
 * rejected; then, with files limited to 2 MiB, step 11's shards each
 * answered with the write's error, the connection in step to its end. */
static int big_receiver(int lfd)
{
    char why[1024] = "";
    fb__repl_stats st = {0};
    int fd = accept(lfd, NULL, NULL);
    int rc = fb__repl_serve(fd, bigdst, 64u << 20, &st, why, sizeof why);
    close(fd);
    if (rc || st.shards != 2 || st.rejected != 2) {
        fprintf(stderr, "big receiver: rc %d (%s), %llu committed, %llu rejected\n", rc,
                why, (unsigned long long)st.shards, (unsigned long long)st.rejected);
        return 1;
    }
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim = {.rlim_cur = 2u << 20, .rlim_max = 2u << 20};
    memset(&st, 0, sizeof st);
    fd = accept(lfd, NULL, NULL);
    rc = setrlimit(RLIMIT_FSIZE, &lim) ? -errno
                                       : fb__repl_serve(fd, bigdst2, 64u << 20, &st, why,
                                                        sizeof why);
    close(fd);
    if (rc || st.shards != 0 || st.rejected != 2) {
        fprintf(stderr, "big receiver, files limited: rc %d (%s), %llu committed, "
                "%llu rejected\n", rc, why, (unsigned long long)st.shards,
                (unsigned long long)st.rejected);
        return 1;
    }
    return 0;
}

static void big_shards(int port, int lfd)
{
    save_big();
    corrupt_middle(big, 12, 0);
    corrupt(big, 12, 1);
    pid_t child = fork();
    if (child == 0)
        _exit(big_receiver(lfd));
    receiving = child;
    char why[1024] = "";
    int fd = connect_port(port);
    CHECK_RC(fb__repl_send_step(fd, big, 11, 0, 2, why, sizeof why), 0);
    CHECK_RC(fb__repl_send_step(fd, big, 12, 0, 2, why, sizeof why), FB_ECORRUPT);
    close(fd);
    fd = connect_port(port);
    CHECK_RC(fb__repl_send_step(fd, big, 11, 0, 2, why, sizeof why), -EFBIG);
    CHECKF(strstr(why, "rank 0") != NULL, "%s", why);
    close(fd);
    int status = -1;
    receiving = 0;
    CHECK(waitpid(child, &status, 0) == child);
    CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0, "big receiver status %d",
           status);
    for (int r = 0; r < 2; r++) {
        char p[4300], q[4300], cmd[9000];
        fb__ckpt_shard_path(p, sizeof p, bigdst, 11, r);
        fb__ckpt_shard_path(q, sizeof q, big, 11, r);
        CHECKF(fb__ckpt_verify_shard(p, 11, r, why, sizeof why) == 0, "%s", why);
        snprintf(cmd, sizeof cmd, "cmp -s '%s' '%s'", p, q);
        CHECKF(system(cmd) == 0, "%s differs from the shard sent", p);
    }
    char ls[9000];
    snprintf(ls, sizeof ls, "test -z \"$(ls -A '%s/step-0000000012' 2>/dev/null)\" && "
             "test -z \"$(ls -A '%s/step-0000000011' 2>/dev/null)\"", bigdst, bigdst2);
    CHECKF(system(ls) == 0, "a rejected shard left something in %s or %s", bigdst,
           bigdst2);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    check_tmpdir(dir);
    snprintf(src, sizeof src, "%s/a", dir);
    snprintf(dst, sizeof dst, "%s/b", dir);
    snprintf(dst2, sizeof dst2, "%s/c", dir);
    snprintf(mem, sizeof mem, "%s/mem", dir);
    snprintf(peer, sizeof peer, "%s/mem/" FB__TIER_PEER_SUBDIR, dir);
    snprintf(storage, sizeof storage, "%s/storage", dir);
    CHECK(mkdir(dst, 0700) == 0 && mkdir(dst2, 0700) == 0 && mkdir(mem, 0700) == 0 &&
          mkdir(peer, 0700) == 0 && mkdir(storage, 0700) == 0);
    save_steps();
    corrupt(src, 8, 1);

    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    CHECK(lfd >= 0 && bind(lfd, (struct sockaddr *)&a, sizeof a) == 0 &&
          listen(lfd, 8) == 0 && getsockname(lfd, (struct sockaddr *)&a, &len) == 0);
    int lfd2 = dup(lfd); /* for big_shards' receiver, after this one */
    pid_t child = fork();
    if (child == 0)
        _exit(receiver(lfd));
    receiving = child;
    close(lfd);

    char why[1024] = "";
    int fd = connect_port(ntohs(a.sin_port));
    /* The sender's stage times, asked for on step 7 alone. */
    fb__repl_times tm = {0};
    uint64_t t0 = fb__now_ns();
    fb__repl_times_record(&tm);
    CHECK_RC(fb__repl_send_step(fd, src, 7, 0, 2, why, sizeof why), 0);
    fb__repl_times_record(NULL);
    uint64_t wall = fb__now_ns() - t0;
    fb__repl_times before = tm;
    CHECK_RC(fb__repl_send_step(fd, src, 8, 0, 2, why, sizeof why), FB_ECORRUPT);
    failures += check_times(&tm, 0, 2, wall, "sending step 7");
    CHECKF(!memcmp(&tm, &before, sizeof tm), "stage times recorded after they were "
           "no longer asked for");
    CHECKF(strstr(why, "rank 1") != NULL, "%s", why);
    close(fd);
    /* Not fbr1: the receiver ends this connection. */
    fd = connect_port(ntohs(a.sin_port));
    const char junk[FB__REPL_HEADER_BYTES] = "GET / HTTP/1.0\r\n\r\n";
    CHECK(write(fd, junk, sizeof junk) == (ssize_t)sizeof junk);
    close(fd);
    /* Into dst2 through a receive pool: step 7, then 8 and 9. */
    fd = connect_port(ntohs(a.sin_port));
    CHECK_RC(fb__repl_send_step(fd, src, 7, 0, 2, why, sizeof why), 0);
    close(fd);
    fd = connect_port(ntohs(a.sin_port));
    CHECK_RC(fb__repl_send_step(fd, src, 8, 0, 2, why, sizeof why), FB_ECORRUPT);
    close(fd);
    fd = connect_port(ntohs(a.sin_port));
    CHECK_RC(fb__repl_send_step(fd, src, 9, 0, 2, why, sizeof why), 0);
    close(fd);
    /* Under the cap: step 7 refused (the connection goes on to rank 1),
     * step 9 received into the pool's files. */
    fd = connect_port(ntohs(a.sin_port));
    CHECK_RC(fb__repl_send_step(fd, src, 7, 0, 2, why, sizeof why), -ENOSPC);
    CHECKF(strstr(why, "rank 0") != NULL, "%s", why);
    close(fd);
    fd = connect_port(ntohs(a.sin_port));
    CHECK_RC(fb__repl_send_step(fd, src, 9, 0, 2, why, sizeof why), 0);
    close(fd);
    /* Deferred: both steps answered as arrived, step 8's rank 1 too. */
    fd = connect_port(ntohs(a.sin_port));
    CHECK_RC(fb__repl_send_step(fd, src, 7, 0, 2, why, sizeof why), 0);
    CHECK_RC(fb__repl_send_step(fd, src, 8, 0, 2, why, sizeof why), 0);
    close(fd);
    int status = -1;
    receiving = 0;
    CHECK(waitpid(child, &status, 0) == child);
    CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0, "receiver status %d", status);

    /* Step 7 complete at the peer and every shard verifies; of step 8 only
     * rank 0, the rejected shard never committed nor left behind. */
    check_steps(dst, 8, 1, 7, 2);
    for (int r = 0; r < 2; r++) {
        char p[4300];
        fb__ckpt_shard_path(p, sizeof p, dst, 7, r);
        CHECK_RC(fb__ckpt_verify_shard(p, 7, r, why, sizeof why), 0);
    }
    char tmpglob[4400];
    snprintf(tmpglob, sizeof tmpglob, "ls -A '%s/step-0000000008' | grep -qv '^rank-00000.safetensors$'", dst);
    CHECKF(system(tmpglob) != 0, "step 8 at the peer holds more than rank 0's shard");

    /* Through the pool: step 7 evicted, step 8 rank 0 and step 9 whole,
     * each verifying; nothing else in the tier (no temporary file, no
     * pool directory once the pool closed). */
    check_steps(dst2, 9, 2, 8, 1);
    for (int r = 0; r < 3; r++) {
        char p[4300];
        uint64_t step = r < 2 ? 9 : 8;
        fb__ckpt_shard_path(p, sizeof p, dst2, step, r % 2);
        CHECKF(fb__ckpt_verify_shard(p, step, r % 2, why, sizeof why) == 0, "%s", why);
    }
    char ls[4400];
    snprintf(ls, sizeof ls, "cd '%s' && test \"$(ls -A | tr '\\n' ' ')\" = "
             "'step-0000000008 step-0000000009 ' && test \"$(ls -A step-0000000008)\" = "
             "rank-00000.safetensors && test \"$(ls -A step-0000000009 | wc -l)\" = 2", dst2);
    CHECKF(system(ls) == 0, "%s holds more than steps 8 (rank 0) and 9", dst2);

    /* Deferred, after the scrub: step 7 committed whole and verifying,
     * nothing of step 8, nothing waiting. */
    for (int r = 0; r < 2; r++) {
        char p[4300];
        fb__ckpt_shard_path(p, sizeof p, peer, 7, r);
        CHECKF(fb__ckpt_verify_shard(p, 7, r, why, sizeof why) == 0, "%s", why);
    }
    snprintf(ls, sizeof ls, "cd '%s' && test \"$(ls -A step-0000000007 | tr '\\n' ' ')\" = "
             "'rank-00000.safetensors rank-00001.safetensors ' && "
             "test -z \"$(ls -A step-0000000008)\"", peer);
    CHECKF(system(ls) == 0, "%s holds more than step 7's two shards", peer);

    /* The committed copy corrupted in memory: never used. */
    for (int r = 0; r < 2; r++)
        CHECK_RC(fb__ckpt_copy_shard(src, storage, 7, r, 1, why, sizeof why), 0);
    corrupt(peer, 7, 0);
    pid_t rank = fork();
    if (rank == 0)
        _exit(restore_past_corrupt_peer_copy());
    CHECK(waitpid(rank, &status, 0) == rank);
    CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0, "restoring rank: status %d",
           status);

    /* Shards of several MiB into new files. */
    snprintf(big, sizeof big, "%s/big", dir);
    snprintf(bigdst, sizeof bigdst, "%s/bigdst", dir);
    snprintf(bigdst2, sizeof bigdst2, "%s/bigdst2", dir);
    CHECK(mkdir(bigdst, 0700) == 0 && mkdir(bigdst2, 0700) == 0);
    big_shards(ntohs(a.sin_port), lfd2);
    close(lfd2);

    char cmd[4300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        failures++;
    return failures != 0;
}
