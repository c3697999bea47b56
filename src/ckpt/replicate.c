/*
 * replicate.c -- fbr1: a step's node-memory shards to a peer's memory over
 * TCP (see replicate.h for the protocol).
 *
 * The sender hands the kernel each shard file with sendfile (no copy in
 * user space).  The receiver reads the socket straight into a receive
 * pool's file, mapped with its pages in place (one copy, the socket's),
 * or, for a new file, into a ring of chunk buffers written to the file
 * (dest: its pages allocated as they are written): the length word and
 * the header first, checked as a reader checks a file (safetensors.c,
 * shard.c), then the data in 1 MiB chunks, hashed by a second thread
 * behind the socket; or, deferred (FB__REPL_DEFER_VERIFY), not hashed on
 * the transfer's path at all: the shard waits under a hidden name until
 * fb__repl_scrub reads it back and checks every hash.  Only a shard whose
 * every hash matched is renamed to its committed name.  Its mapping is
 * released after its answer, once the socket has nothing waiting or at
 * the connection's end (release_list), not between shards, where the
 * unmapping would hold up the next shard and the sender.
 */
#include "ckpt/replicate.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/engine.h"
#include "ckpt/hash.h"
#include "ckpt/safetensors.h"
#include "ckpt/shard.h"
#include "ckpt/store.h"
#include "ckpt/tier.h"
#include "common/util.h"
#include "firebreak/firebreak.h"

/* Stage times (replicate.h, fb__repl_times_record): where this thread's
 * are added, NULL when not recorded; and when the stage going on began. */
static __thread fb__repl_times *times;
static __thread uint64_t stage_mark;

void fb__repl_times_record(fb__repl_times *t)
{
    times = t;
}

const char *fb__repl_stage_name(fb__repl_stage s)
{
    static const char *const names[FB__REPL_STAGES] = {
        [FB__REPL_RX_HEADER] = "rx header",   [FB__REPL_RX_PREP] = "rx prepare",
        [FB__REPL_RX_TAKE] = "rx pool take",  [FB__REPL_RX_META] = "rx shard header",
        [FB__REPL_RX_DATA] = "rx data",       [FB__REPL_RX_RENAME] = "rx rename",
        [FB__REPL_RX_SYNC] = "rx dir sync",   [FB__REPL_RX_RELEASE] = "rx unmap",
        [FB__REPL_RX_ARRIVAL] = "rx arrival", [FB__REPL_RX_ANSWER] = "rx answer",
        [FB__REPL_TX_OPEN] = "tx open",       [FB__REPL_TX_HEADER] = "tx header",
        [FB__REPL_TX_DATA] = "tx sendfile",   [FB__REPL_TX_CLOSE] = "tx close",
        [FB__REPL_TX_ANSWERS] = "tx answers",
    };
    return (unsigned)s < FB__REPL_STAGES ? names[s] : "?";
}

int fb__repl_log_allow(fb__repl_log_limit *l, uint64_t now_ns, unsigned *dropped_before)
{
    *dropped_before = 0;
    uint64_t w = atomic_load(&l->window_ns);
    if (!w || now_ns - w >= FB__REPL_LOG_WINDOW_NS) {
        /* One caller begins the new window; two at once count a line or
         * two in the wrong one, no more. */
        if (atomic_compare_exchange_strong(&l->window_ns, &w, now_ns ? now_ns : 1)) {
            atomic_store(&l->said, 0);
            *dropped_before = atomic_exchange(&l->dropped, 0);
        }
    }
    if (atomic_fetch_add(&l->said, 1) < FB__REPL_LOG_BURST)
        return 1;
    atomic_fetch_add(&l->dropped, 1);
    return 0;
}

void fb__repl_log(fb__repl_log_limit *l, const char *fmt, ...)
{
    unsigned dropped;
    if (!fb__repl_log_allow(l, fb__now_ns(), &dropped) && !dropped)
        return;
    /* One write(2) of a line made here, not stdio: stderr's stream lock,
     * held through a write to srun's pipe, is one the idle-priority scrub
     * must not take (peer.c).  A line past the buffer is cut. */
    char buf[2048];
    int n = 0;
    if (dropped)
        n = snprintf(buf, sizeof buf, "firebreak: %u more lines like the next left out "
                     "in the last minute\n", dropped);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, ap);
    va_end(ap);
    size_t len = m < 0 ? (size_t)n : (size_t)n + (size_t)m;
    if (len >= sizeof buf) {
        len = sizeof buf - 1;
        buf[len - 1] = '\n';
    }
    (void)fb__write_all(STDERR_FILENO, buf, len);
}

/* A stage begins now. */
static void stage_begin(void)
{
    if (times)
        stage_mark = fb__now_ns();
}

/* Stage s, begun at the last mark, ends now; the next begins. */
static void stage_end(fb__repl_stage s)
{
    if (!times)
        return;
    uint64_t now = fb__now_ns();
    times->ns[s] += now - stage_mark;
    stage_mark = now;
}

static void put_le(unsigned char *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_le(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* ---- the run's key ---- */

static unsigned char repl_key[FB__REPL_KEY_BYTES];

void fb__repl_set_key(const unsigned char key[FB__REPL_KEY_BYTES])
{
    memcpy(repl_key, key, sizeof repl_key);
}

static int hex_digit(char c)
{
    return c >= '0' && c <= '9' ? c - '0'
         : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

int fb__repl_key_from_env(void)
{
    const char *v = getenv("FIREBREAK_PEER_KEY");
    if (!v)
        return 0;
    unsigned char key[FB__REPL_KEY_BYTES];
    int rc = strlen(v) == 2 * sizeof key ? 0 : -EINVAL;
    for (size_t i = 0; !rc && i < sizeof key; i++) {
        int hi = hex_digit(v[2 * i]), lo = hex_digit(v[2 * i + 1]);
        if (hi < 0 || lo < 0)
            rc = -EINVAL;
        else
            key[i] = (unsigned char)(hi << 4 | lo);
    }
    if (!rc)
        fb__repl_set_key(key);
    /* Not into what this process starts, nor left readable in
     * /proc/PID/environ (the string is the environment block's own:
     * unsetenv alone only drops the pointer to it). */
    memset((char *)v, '0', strlen(v));
    unsetenv("FIREBREAK_PEER_KEY");
    return rc;
}

int fb__repl_key_new_hex(char hex[2 * FB__REPL_KEY_BYTES + 1])
{
    unsigned char key[FB__REPL_KEY_BYTES];
    if (getrandom(key, sizeof key, 0) != (ssize_t)sizeof key)
        return -errno;
    for (size_t i = 0; i < sizeof key; i++)
        snprintf(hex + 2 * i, 3, "%02x", key[i]);
    return 0;
}

/* Whether the key message's 32 bytes are this process's key, in a time
 * that does not depend on where they differ. */
static int key_matches(const unsigned char *k)
{
    unsigned char d = 0;
    for (size_t i = 0; i < sizeof repl_key; i++)
        d |= (unsigned char)(k[i] ^ repl_key[i]);
    return d == 0;
}

void fb__repl_header_encode(const fb__repl_header *h,
                            unsigned char out[FB__REPL_HEADER_BYTES])
{
    memcpy(out, "FBR1", 4);
    put_le(out + 4, h->rank, 4);
    put_le(out + 8, h->step, 8);
    put_le(out + 16, h->bytes, 8);
}

int fb__repl_header_decode(const unsigned char *buf, size_t len,
                           uint64_t max_bytes, fb__repl_header *h, char *why,
                           size_t why_size)
{
    if (len < FB__REPL_HEADER_BYTES) {
        fb__ckpt_say(why, why_size, "fbr1 header: %zu bytes, want %d", len,
                     FB__REPL_HEADER_BYTES);
        return FB_EFORMAT;
    }
    if (memcmp(buf, "FBR1", 4)) {
        fb__ckpt_say(why, why_size, "fbr1 header: bad magic");
        return FB_EFORMAT;
    }
    h->rank = (uint32_t)get_le(buf + 4, 4);
    h->step = get_le(buf + 8, 8);
    h->bytes = get_le(buf + 16, 8);
    if (h->rank > 99999) {
        fb__ckpt_say(why, why_size, "fbr1 header: rank %u over 99999", h->rank);
        return FB_EFORMAT;
    }
    if (h->step > FB__REPL_MAX_STEP) {
        fb__ckpt_say(why, why_size, "fbr1 header: step %llu over %llu",
                     (unsigned long long)h->step, FB__REPL_MAX_STEP);
        return FB_EFORMAT;
    }
    if (h->bytes < 8 || h->bytes > max_bytes) {
        fb__ckpt_say(why, why_size, "fbr1 header: shard of %llu bytes (8 to %llu)",
                     (unsigned long long)h->bytes, (unsigned long long)max_bytes);
        return FB_EFORMAT;
    }
    return 0;
}

/*
 * The sender's stall rule (fb__repl_send_step_within): the connection is
 * given up once no byte moved on it for ms.  The socket is non-blocking
 * meanwhile and each wait is a poll up to that deadline, which every
 * byte moved pushes back.  A blocking socket's SO_SNDTIMEO is not that
 * rule: a call that moved some bytes and then waited the whole limit
 * returns them, and the next waits the limit again, so a peer that
 * stopped reading held the sender two or three times the limit.
 */
typedef struct progress {
    int ms;                 /* 0: no rule, the socket blocks as it is */
    uint64_t grace_ms;      /* added while a shard goes (ALLOC_GRACE_MIB) */
    uint64_t last_ns;       /* when a byte last moved */
} progress;

/* While a shard goes, the limit is longer by 1 ms for each MiB of it: a
 * receiver used to grow its pool's largest file to a larger shard before
 * it read any of it (0.8-0.9 ms a MiB here); one now takes the shard into
 * a new file as its bytes arrive (pool_take), so this is only a margin,
 * kept for a receiver of a version before. */
#define ALLOC_GRACE_MIB 1

static void moved(progress *pg)
{
    if (pg->ms)
        pg->last_ns = fb__now_ns();
}

/* Wait until fd is ready for events (POLLIN, POLLOUT) before the stall
 * deadline: 0, or -ETIMEDOUT. */
static int wait_moving(int fd, short events, progress *pg)
{
    for (;;) {
        uint64_t now = fb__now_ns();
        uint64_t end = pg->last_ns + ((uint64_t)pg->ms + pg->grace_ms) * 1000000ull;
        if (now >= end)
            return -ETIMEDOUT;
        struct pollfd pfd = {.fd = fd, .events = events};
        int left_ms = (int)((end - now + 999999) / 1000000);
        int r = poll(&pfd, 1, left_ms);
        if (r > 0)
            return 0; /* ready, or an error the next call returns */
        if (r < 0 && errno != EINTR)
            return -errno;
    }
}

/* After a call on fd failed (errno): 1 to call again (interrupted, or
 * ready again under the stall rule), else -errno or -ETIMEDOUT. */
static int try_again(int fd, short events, progress *pg)
{
    if (errno == EINTR)
        return 1;
    if (errno != EAGAIN || !pg->ms)
        return -errno;
    int rc = wait_moving(fd, events, pg);
    return rc ? rc : 1;
}

/* Write exactly n bytes: 0 or -errno; under the stall rule (pg->ms) on a
 * non-blocking fd, -ETIMEDOUT when none moved for its limit. */
static int send_full(int fd, const void *buf, size_t n, progress *pg)
{
    size_t off = 0;
    while (off < n) {
        ssize_t r = write(fd, (const char *)buf + off, n - off);
        int again = r < 0 ? try_again(fd, POLLOUT, pg) : 0;
        if (again < 0)
            return again;
        if (again)
            continue;
        off += (size_t)r;
        moved(pg);
    }
    return 0;
}

/* Read exactly n bytes: 0, 1 at EOF before any byte, or -errno (-EPIPE:
 * EOF inside); under the stall rule, as send_full. */
static int recv_full(int fd, void *buf, size_t n, progress *pg)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, (char *)buf + got, n - got);
        int again = r < 0 ? try_again(fd, POLLIN, pg) : 0;
        if (again < 0)
            return again;
        if (again)
            continue;
        if (r == 0)
            return got ? -EPIPE : 1;
        got += (size_t)r;
        moved(pg);
    }
    return 0;
}

/*
 * The receiver's deadlines.  A connection holds one of the receiver's few
 * slots, so its sender must keep to time on the whole, not only byte by
 * byte (a byte every few seconds passed the stall rule, SO_RCVTIMEO, for
 * ever): a shard's header must be in within RX_HEADER_MS of the receiver
 * waiting for it, and the shard within RX_GRACE_MS plus 1 s per
 * RX_FLOOR_MIB_S MiB of the time its header was in (rx_shard_deadline).
 * A caller may set an overall deadline too (fb__repl_rx_deadline).  The
 * stall rule stays: the socket's SO_RCVTIMEO, read once a connection,
 * bounds each wait for a byte.  The receiving thread's own, as
 * fb__repl_serve_pool runs on its caller's thread; rx_end_ns is the
 * deadline of what is read now (0: none, reads block as the socket does).
 */
#define RX_HEADER_MS 5000
#define RX_GRACE_MS 5000
#define RX_FLOOR_MIB_S 16
static __thread uint64_t rx_until_ns;   /* fb__repl_rx_deadline; 0: none   */
static __thread uint64_t rx_end_ns;     /* what is read now; 0: none       */
static __thread uint64_t rx_stall_ns;   /* the socket's SO_RCVTIMEO; 0: none */

void fb__repl_rx_deadline(uint64_t deadline_ns)
{
    rx_until_ns = deadline_ns;
}

/* The earlier of a and the caller's overall deadline. */
static uint64_t rx_bound(uint64_t a)
{
    return rx_until_ns && rx_until_ns < a ? rx_until_ns : a;
}

/* When a shard of bytes whose header was in at header_ns must be in whole. */
static uint64_t rx_shard_deadline(uint64_t header_ns, uint64_t bytes)
{
    uint64_t floor = (uint64_t)RX_FLOOR_MIB_S << 20;
    return header_ns + RX_GRACE_MS * 1000000ull + bytes / floor * 1000000000ull +
           bytes % floor * 1000000000ull / floor;
}

/* Wait for fd to be readable before rx_end_ns and within the stall rule
 * (last_ns: when a byte last came): 0, -ETIMEDOUT past the deadline, or
 * -EAGAIN past the stall limit (as SO_RCVTIMEO says it). */
static int rx_wait(int fd, uint64_t last_ns)
{
    for (;;) {
        uint64_t now = fb__now_ns(), end = rx_end_ns;
        int stall = rx_stall_ns && last_ns + rx_stall_ns < end;
        if (stall)
            end = last_ns + rx_stall_ns;
        if (now >= end)
            return stall ? -EAGAIN : -ETIMEDOUT;
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        uint64_t left_ms = (end - now + 999999) / 1000000;
        int r = poll(&pfd, 1, left_ms > 60000 ? 60000 : (int)left_ms);
        if (r > 0)
            return 0; /* ready, or an error the read returns */
        if (r < 0 && errno != EINTR)
            return -errno;
    }
}

/* Read exactly n bytes on the receiver's side, within rx_end_ns: 0, 1 at
 * EOF before any byte, or -errno (-EPIPE: EOF inside; -ETIMEDOUT: past
 * the deadline). */
static int read_full(int fd, void *buf, size_t n)
{
    if (!rx_end_ns)
        return recv_full(fd, buf, n, &(progress){0});
    size_t got = 0;
    uint64_t last_ns = fb__now_ns();
    while (got < n) {
        int rc = rx_wait(fd, last_ns);
        if (rc)
            return rc;
        ssize_t r = read(fd, (char *)buf + got, n - got);
        if (r < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (r < 0)
            return -errno;
        if (r == 0)
            return got ? -EPIPE : 1;
        got += (size_t)r;
        last_ns = fb__now_ns();
    }
    return 0;
}

static int write_full(int fd, const void *buf, size_t n)
{
    return send_full(fd, buf, n, &(progress){0});
}

/* The hashes a shard's header promises, checked as its data arrives. */
typedef struct verifier {
    const fb__st_header *h;
    fb__hash_alg alg;
    size_t ti;              /* tensor being hashed                   */
    uint64_t pos;           /* bytes of the data section seen         */
    fb__hash_ctx *ctx;
    int rc;
    char *why;
    size_t why_size;
    const char *label;
} verifier;

static int verifier_init(verifier *v, const fb__st_header *h, const char *label,
                         char *why, size_t why_size)
{
    memset(v, 0, sizeof *v);
    v->h = h;
    v->label = label;
    v->why = why;
    v->why_size = why_size;
    int alg = fb__hash_alg_from_name(fb__st_meta_get(h, "firebreak.hash"));
    if (alg < 0) {
        fb__ckpt_say(why, why_size, "%s: hash algorithm not known", label);
        return FB_EFORMAT;
    }
    v->alg = (fb__hash_alg)alg;
    return 0;
}

/* Compare tensor ti's digest with its recorded hash. */
static void verifier_close_tensor(verifier *v)
{
    const fb__st_tensor *t = &v->h->tensors[v->ti];
    uint64_t got = v->ctx ? fb__hash_digest(v->ctx) : fb__hash(v->alg, "", 0), want = 0;
    fb__hash_free(v->ctx);
    v->ctx = NULL;
    char key[FB__ST_NAME_MAX + 32];
    snprintf(key, sizeof key, "firebreak.hash.%s", t->name);
    const char *hex = fb__st_meta_get(v->h, key);
    if (!v->rc && (!hex || fb__hash_parse_hex(hex, &want) || got != want)) {
        fb__ckpt_say(v->why, v->why_size, "%s: tensor \"%.200s\": hash %016llx, "
                     "recorded %s (data corrupted)", v->label, t->name,
                     (unsigned long long)got, hex ? hex : "none");
        v->rc = FB_ECORRUPT;
    }
    v->ti++;
}

/* The next n bytes of the data section. */
static void verifier_feed(verifier *v, const unsigned char *p, size_t n)
{
    while (v->ti < v->h->ntensors) {
        const fb__st_tensor *t = &v->h->tensors[v->ti];
        if (v->pos >= t->end) {
            verifier_close_tensor(v);
            continue;
        }
        if (!n)
            return;
        if (!v->ctx && !(v->ctx = fb__hash_new(v->alg))) {
            v->rc = -ENOMEM;
            return;
        }
        size_t take = t->end - v->pos < n ? (size_t)(t->end - v->pos) : n;
        fb__hash_update(v->ctx, p, take);
        p += take;
        n -= take;
        v->pos += take;
    }
}

/*
 * The hasher: a second thread that hashes the data section behind the
 * receiving thread, so receiving the next bytes and hashing the last ones
 * overlap (on a host with a core to spare; with none it costs a thread).
 * The receiver publishes how far the bytes arrived (avail) under mu, and
 * the hasher how far it hashed (done); the hasher alone touches the
 * verifier until it is joined.  The bytes are either in the shard's
 * mapping (map: bytes below avail are never written again, so the hasher
 * reads them unlocked) or in the receiver's ring of RING_CHUNKS buffers
 * (ring: chunk k of the data section, from `from`, in buffer k mod
 * RING_CHUNKS; the receiver reuses a buffer only once the hasher is done
 * with it, hasher_wait).
 */
#define RECV_CHUNK (1u << 20) /* handed to the hasher in these */
#define RING_CHUNKS 4u

typedef struct hasher {
    verifier *v;
    const unsigned char *map, *ring;
    uint64_t from;          /* where the data section starts */
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* avail, end or done moved */
    uint64_t avail;         /* bytes [.., avail) have arrived */
    int end;                /* no more will: hash what arrived and stop */
    uint64_t done;          /* hashed up to */
    pthread_t th;
} hasher;

/* Hash the data section's bytes [lo, hi) from where they are. */
static void hasher_feed(hasher *hs, uint64_t lo, uint64_t hi)
{
    if (hs->map) {
        verifier_feed(hs->v, hs->map + lo, (size_t)(hi - lo));
        return;
    }
    while (lo < hi) {
        uint64_t k = (lo - hs->from) / RECV_CHUNK, in = (lo - hs->from) % RECV_CHUNK;
        uint64_t take = RECV_CHUNK - in < hi - lo ? RECV_CHUNK - in : hi - lo;
        verifier_feed(hs->v, hs->ring + (k % RING_CHUNKS) * RECV_CHUNK + in, (size_t)take);
        lo += take;
    }
}

static void *hasher_main(void *arg)
{
    hasher *hs = arg;
    pthread_mutex_lock(&hs->mu);
    for (;;) {
        while (hs->avail == hs->done && !hs->end)
            pthread_cond_wait(&hs->cv, &hs->mu);
        uint64_t from = hs->done, upto = hs->avail;
        if (upto == from)
            break; /* end, all hashed */
        pthread_mutex_unlock(&hs->mu);
        hasher_feed(hs, from, upto);
        pthread_mutex_lock(&hs->mu);
        hs->done = upto;
        pthread_cond_broadcast(&hs->cv);
    }
    pthread_mutex_unlock(&hs->mu);
    return NULL;
}

/* Start hashing from `from`, the bytes in map or (map NULL) in ring; 0,
 * or -1 (then hash inline). */
static int hasher_start(hasher *hs, verifier *v, const unsigned char *map,
                        const unsigned char *ring, uint64_t from)
{
    memset(hs, 0, sizeof *hs);
    hs->v = v;
    hs->map = map;
    hs->ring = ring;
    hs->from = hs->avail = hs->done = from;
    pthread_mutex_init(&hs->mu, NULL);
    pthread_cond_init(&hs->cv, NULL);
    if (pthread_create(&hs->th, NULL, hasher_main, hs)) {
        pthread_mutex_destroy(&hs->mu);
        pthread_cond_destroy(&hs->cv);
        return -1;
    }
    return 0;
}

static void hasher_publish(hasher *hs, uint64_t avail, int end)
{
    pthread_mutex_lock(&hs->mu);
    hs->avail = avail;
    hs->end |= end;
    pthread_cond_broadcast(&hs->cv);
    pthread_mutex_unlock(&hs->mu);
}

/* Wait until the bytes below upto are hashed. */
static void hasher_wait(hasher *hs, uint64_t upto)
{
    pthread_mutex_lock(&hs->mu);
    while (hs->done < upto && hs->done < hs->avail)
        pthread_cond_wait(&hs->cv, &hs->mu);
    pthread_mutex_unlock(&hs->mu);
}

/* Wait until everything published is hashed. */
static void hasher_join(hasher *hs)
{
    hasher_publish(hs, hs->avail, 1);
    pthread_join(hs->th, NULL);
    pthread_mutex_destroy(&hs->mu);
    pthread_cond_destroy(&hs->cv);
}

/*
 * Where a shard's bytes go.  A file from the receive pool is mapped with
 * its pages in place, and the socket is read straight into the mapping.
 * A new file is not: allocating and mapping its pages before the bytes
 * come (fallocate, then MADV_POPULATE_WRITE) costs 0.8-0.9 ms a MiB
 * here, and the sender waits; instead the socket is read into a ring of
 * chunk buffers (reused, so warm) and each chunk written to the file
 * (pwrite allocates the pages as it copies: 0.6 ms a MiB, the socket
 * included), the hasher reading the ring.  The ring is the connection's,
 * made at its first new file.
 */
typedef struct dest {
    unsigned char *map;     /* the file's mapping; NULL: written to fd */
    int fd;
    unsigned char *ring;    /* RING_CHUNKS * RECV_CHUNK, when map is NULL */
} dest;

/* Write n bytes at off to the file: 0 or -errno. */
static int dest_write(const dest *k, const unsigned char *p, size_t n, uint64_t off)
{
    while (n) {
        ssize_t w = pwrite(k->fd, p, n, (off_t)off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return w < 0 ? -errno : -EIO;
        p += w;
        n -= (size_t)w;
        off += (uint64_t)w;
    }
    return 0;
}

/*
 * One shard off the socket into dest k (the file named label): the
 * length word and the header first, checked (format, place, metadata),
 * then the data in chunks, hashed by the hasher as they arrive (inline
 * when no thread could be started; not at all unless verify).  0:
 * received whole and verified (or, without verify, with a valid header);
 * FB_ECORRUPT / FB_EFORMAT: received whole, not valid, and -errno: its
 * file could not be written (the stream is still in step); other: the
 * connection failed.  *stream_ok says whether the stream is still in step.
 */
static int receive_into(int fd, const dest *k, const char *label,
                        const fb__repl_header *rh, int verify, int *stream_ok,
                        char *why, size_t why_size)
{
    uint64_t bytes = rh->bytes;
    *stream_ok = 0;
    int rc = 0, threaded = 0;
    fb__st_header *h = NULL;
    unsigned char len8[8], *head = k->map;
    verifier v = {0};
    hasher hs;
    if ((rc = read_full(fd, k->map ? k->map : len8, 8)))
        goto cut;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = (n << 8) | (k->map ? k->map : len8)[i];
    if (n > FB__ST_HEADER_MAX || n > bytes - 8) {
        fb__ckpt_say(why, why_size, "%s: header length %llu in a shard of %llu "
                     "bytes", label, (unsigned long long)n, (unsigned long long)bytes);
        rc = FB_EFORMAT;
        goto out; /* cannot tell where the shard's bytes end: stop */
    }
    if (!head && !(head = malloc(8 + (size_t)n))) {
        rc = -ENOMEM;
        goto cut;
    }
    if (!k->map)
        memcpy(head, len8, 8);
    if ((rc = read_full(fd, head + 8, (size_t)n)))
        goto cut;
    int bad = fb__st_parse_header((const char *)head + 8, (size_t)n, bytes, label, &h,
                                  why, why_size);
    if (!bad)
        bad = fb__shard_check_place(h, label, rh->step, (int)rh->rank, 0, why, why_size);
    if (!bad)
        bad = fb__shard_check_meta(h, label, why, why_size);
    if (!bad)
        bad = verifier_init(&v, h, label, why, why_size);
    if (!bad && !k->map && (rc = dest_write(k, head, 8 + (size_t)n, 0))) {
        fb__ckpt_say(why, why_size, "write %s: %s", label, strerror(-rc));
        bad = rc;
    }
    if (!bad && verify)
        threaded = hasher_start(&hs, &v, k->map, k->ring, 8 + n) == 0;
    stage_end(FB__REPL_RX_META);
    /* The rest of the shard is read either way, to stay in step: in
     * chunks for the hasher or the ring, else as much as each read
     * gives. */
    uint64_t chunk = threaded || (!bad && verify) || !k->map ? RECV_CHUNK : bytes;
    for (uint64_t off = 8 + n; off < bytes;) {
        size_t want = bytes - off < chunk ? (size_t)(bytes - off) : (size_t)chunk;
        unsigned char *to;
        if (k->map) {
            to = k->map + off;
        } else {
            uint64_t c = (off - 8 - n) / RECV_CHUNK;
            to = k->ring + (c % RING_CHUNKS) * RECV_CHUNK;
            if (threaded && c >= RING_CHUNKS) /* the buffer's last chunk hashed */
                hasher_wait(&hs, off - (RING_CHUNKS - 1) * (uint64_t)RECV_CHUNK);
        }
        if ((rc = read_full(fd, to, want)))
            goto cut;
        if (threaded)
            hasher_publish(&hs, off + want, 0);
        else if (!bad && verify)
            verifier_feed(&v, to, want);
        if (!bad && !k->map && (rc = dest_write(k, to, want, off))) {
            fb__ckpt_say(why, why_size, "write %s: %s", label, strerror(-rc));
            bad = rc; /* the rest is read and dropped */
        }
        off += want;
    }
    if (threaded) {
        hasher_join(&hs);
        threaded = 0;
    }
    if (!bad && verify) {
        verifier_feed(&v, NULL, 0); /* closes the tensors that end here */
        bad = v.rc;
    }
    *stream_ok = 1;
    rc = bad;
    goto out;
cut:
    rc = rc > 0 ? -EPIPE : rc;
    fb__ckpt_say(why, why_size, "receiving %s: %s", label, strerror(-rc));
out:
    if (threaded)
        hasher_join(&hs);
    if (head != k->map)
        free(head);
    fb__hash_free(v.ctx);
    fb__st_free(h);
    return rc;
}

/*
 * The receive pool (replicate.h).  Each file is open and mapped with its
 * pages present, so a shard received into it costs the socket's copy and
 * the hashing, nothing else.  Files are taken by the receiver (one at a
 * time, the pool's owner's thread) and come back on failure; a committed
 * one has left the pool by its rename.
 */
typedef struct pool_file {
    int fd;
    unsigned char *map;
    uint64_t bytes;         /* the file's size and the mapping's length */
    char path[PATH_MAX];
} pool_file;

struct fb__repl_pool {
    char dir[PATH_MAX];     /* <tier>/.fbr1-pool.<pid> */
    pool_file *files;
    size_t n, cap;
    uint64_t seq;           /* names the next file */
    uint64_t step;          /* the newest step received ... */
    uint64_t *sizes;        /* ... and the sizes of its shards, for refill */
    size_t nsizes, sizes_cap;
    fb__repl_cap budget;    /* fb__repl_pool_cap; reserve NULL: none */
    void (*on_arrival)(void *ctx); /* fb__repl_pool_on_arrival */
    void *arrival_ctx;
};

void fb__repl_pool_on_arrival(fb__repl_pool *p, void (*fn)(void *ctx), void *ctx)
{
    p->on_arrival = fn;
    p->arrival_ctx = ctx;
}

void fb__repl_pool_cap(fb__repl_pool *p, const fb__repl_cap *cap)
{
    if (cap && cap->reserve && cap->release)
        p->budget = *cap;
    else
        memset(&p->budget, 0, sizeof p->budget);
}

/* Reserve grow bytes under the pool's cap: 1 when granted (or nothing to
 * reserve), 0 when they do not fit; room (may be NULL) what was seen. */
static int pool_reserve(const fb__repl_pool *p, uint64_t grow, fb__repl_room *room)
{
    fb__repl_room seen = {0};
    int ok = !p || !p->budget.reserve || !grow ||
             p->budget.reserve(p->budget.ctx, grow, &seen);
    if (room)
        *room = seen;
    return ok;
}

/* What pool_reserve granted is allocated now, or will not be. */
static void pool_release(const fb__repl_pool *p, uint64_t grow)
{
    if (p && p->budget.reserve && grow)
        p->budget.release(p->budget.ctx, grow);
}

/* The memory a file of bytes takes on tmpfs: whole pages. */
static uint64_t page_bytes(uint64_t bytes)
{
    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0)
        page = 4096;
    return (bytes + (uint64_t)page - 1) / (uint64_t)page * (uint64_t)page;
}

/* The bytes a shard of `bytes` adds to the node's memory: none when the
 * pool has a file at least as large, else the whole shard's, in whole
 * pages (as the node's memory counts them): it goes to a new file,
 * allocated as its bytes arrive (pool_take grows no file). */
static uint64_t pool_growth(const fb__repl_pool *p, uint64_t bytes)
{
    for (size_t i = 0; p && i < p->n; i++)
        if (p->files[i].bytes >= bytes)
            return 0;
    return page_bytes(bytes);
}

static void pool_file_drop(pool_file *f, int remove)
{
    if (f->map && f->map != MAP_FAILED)
        munmap(f->map, f->bytes);
    if (f->fd >= 0)
        close(f->fd);
    if (remove)
        unlink(f->path);
    f->map = NULL;
    f->fd = -1;
}

/* Size the open file fd to bytes with every page allocated, and map it
 * with the pages in place (pages already there are only mapped). */
static int size_and_map(int fd, uint64_t bytes, unsigned char **map,
                        const char *label, char *why, size_t why_size)
{
    *map = NULL;
    if (ftruncate(fd, (off_t)bytes) ||
        (fallocate(fd, 0, 0, (off_t)bytes) && errno != EOPNOTSUPP)) {
        int rc = -errno;
        fb__ckpt_say(why, why_size, "allocate %s (%llu bytes): %s", label,
                     (unsigned long long)bytes, strerror(-rc));
        return rc;
    }
    /* MAP_POPULATE maps a shared file's pages read-only (not to dirty
     * them for nothing), so each page's first write would still fault:
     * 1 in 4 KiB of the socket's copy.  Populate them writable instead
     * (Linux 5.14); an older kernel faults them as the bytes arrive. */
    void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        int rc = -errno;
        fb__ckpt_say(why, why_size, "map %s: %s", label, strerror(-rc));
        return rc;
    }
    if (madvise(m, bytes, MADV_POPULATE_WRITE) && errno != EINVAL) {
        int rc = -errno;
        munmap(m, bytes);
        fb__ckpt_say(why, why_size, "populate %s: %s", label, strerror(-rc));
        return rc;
    }
    *map = m;
    return 0;
}

/* Add an open file (named path, size bytes) to the pool, mapping it. */
static int pool_add(fb__repl_pool *p, int fd, const char *path, uint64_t bytes,
                    char *why, size_t why_size)
{
    if (p->n == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 8;
        pool_file *f = realloc(p->files, cap * sizeof *f);
        if (!f) {
            fb__ckpt_say(why, why_size, "receive pool: out of memory");
            return -ENOMEM;
        }
        p->files = f;
        p->cap = cap;
    }
    pool_file *f = &p->files[p->n];
    f->fd = fd;
    f->bytes = bytes;
    snprintf(f->path, sizeof f->path, "%s", path);
    int rc = size_and_map(fd, bytes, &f->map, path, why, why_size);
    if (rc) {
        f->map = NULL;
        pool_file_drop(f, 1);
        return rc;
    }
    p->n++;
    return 0;
}

/* The path of the pool's next file. */
static int pool_name(fb__repl_pool *p, char *path, size_t size, char *why,
                     size_t why_size)
{
    if (fb__fmt(path, size, "%s/f-%llu", p->dir, (unsigned long long)p->seq++)) {
        fb__ckpt_say(why, why_size, "receive pool: path too long under %s", p->dir);
        return -ENAMETOOLONG;
    }
    return 0;
}

int fb__repl_pool_open(fb__repl_pool **out, const char *dir, char *why,
                       size_t why_size)
{
    *out = NULL;
    fb__repl_pool *p = calloc(1, sizeof *p);
    if (!p) {
        fb__ckpt_say(why, why_size, "receive pool: out of memory");
        return -ENOMEM;
    }
    if (fb__fmt(p->dir, sizeof p->dir, "%s/.fbr1-pool.%d", dir, (int)getpid())) {
        fb__ckpt_say(why, why_size, "receive pool: path too long under %s", dir);
        free(p);
        return -ENAMETOOLONG;
    }
    fb__rm_rf(p->dir); /* a process of this pid that is gone left it */
    if (mkdir(p->dir, 0700)) {
        int rc = -errno;
        fb__ckpt_say(why, why_size, "mkdir %s: %s", p->dir, strerror(-rc));
        free(p);
        return rc;
    }
    *out = p;
    return 0;
}

void fb__repl_pool_close(fb__repl_pool *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->n; i++)
        pool_file_drop(&p->files[i], 1);
    fb__rm_rf(p->dir);
    free(p->files);
    free(p->sizes);
    free(p);
}

size_t fb__repl_pool_files(const fb__repl_pool *p, uint64_t *bytes)
{
    uint64_t b = 0;
    for (size_t i = 0; p && i < p->n; i++)
        b += p->files[i].bytes;
    if (bytes)
        *bytes = b;
    return p ? p->n : 0;
}

/* At most this many files wait in a pool beyond the newest step's shards. */
#define POOL_SPARE 4
/* At most this many shard sizes are remembered for a refill: a sender
 * sends its node's ranks, far fewer; a stream of shards of one step is
 * not let grow the pool without end. */
#define POOL_SIZES_MAX 128

int fb__repl_pool_recycle(fb__repl_pool *p, const char *dir, uint64_t step,
                          char *why, size_t why_size)
{
    char sdir[PATH_MAX], hold[PATH_MAX];
    if (fb__ckpt_step_path(sdir, sizeof sdir, dir, step) ||
        fb__fmt(hold, sizeof hold, "%s/step-%010llu", p->dir, (unsigned long long)step)) {
        fb__ckpt_say(why, why_size, "receive pool: path too long under %s", dir);
        return -ENAMETOOLONG;
    }
    /* The step leaves the tier at once and whole, as a deletion does. */
    if (rename(sdir, hold)) {
        int rc = errno == ENOENT ? 0 : -errno;
        if (rc)
            fb__ckpt_say(why, why_size, "rename %s: %s", sdir, strerror(-rc));
        return rc;
    }
    fb__fsync_dir(dir);
    DIR *d = opendir(hold);
    int got = 0, rc = 0;
    struct dirent *de;
    while (d && !rc && (de = readdir(d))) {
        char from[PATH_MAX], to[PATH_MAX];
        if (de->d_name[0] == '.' || p->n >= p->nsizes + POOL_SPARE ||
            fb__fmt(from, sizeof from, "%s/%s", hold, de->d_name))
            continue;
        int fd = open(from, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
        struct stat stt;
        if (fd < 0 || fstat(fd, &stt) || !S_ISREG(stt.st_mode) || stt.st_size < 8) {
            if (fd >= 0)
                close(fd);
            continue;
        }
        if ((rc = pool_name(p, to, sizeof to, why, why_size))) {
            close(fd);
            break;
        }
        if (rename(from, to)) {
            rc = -errno;
            fb__ckpt_say(why, why_size, "rename %s: %s", from, strerror(-rc));
            unlink(to);
            close(fd);
            break;
        }
        if (!(rc = pool_add(p, fd, to, (uint64_t)stt.st_size, why, why_size)))
            got++;
    }
    if (d)
        closedir(d);
    fb__rm_rf(hold);
    return rc ? rc : got;
}

/* One file of bytes more in the pool, allocated now: 0, or -errno. */
static int pool_grow(fb__repl_pool *p, uint64_t bytes, char *why, size_t why_size)
{
    char path[PATH_MAX];
    int rc = pool_name(p, path, sizeof path, why, why_size);
    if (rc)
        return rc;
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        rc = -errno;
        fb__ckpt_say(why, why_size, "create %s: %s", path, strerror(-rc));
        return rc;
    }
    return pool_add(p, fd, path, bytes, why, why_size);
}

int fb__repl_pool_refill(fb__repl_pool *p, char *why, size_t why_size)
{
    int made = 0;
    for (size_t i = p->n; i < p->nsizes; i++) {
        uint64_t grow = page_bytes(p->sizes[i]);
        if (!pool_reserve(p, grow, NULL))
            break;
        int rc = pool_grow(p, p->sizes[i], why, why_size);
        pool_release(p, grow); /* allocated (the node counts it), or not */
        if (rc)
            return rc;
        made++;
    }
    return made;
}

/* Remember a shard's size under the newest step received: only a shard
 * that arrived whole with a valid header (and verified, unless deferred),
 * so that a header alone, which costs its sender 24 bytes, makes the
 * refill allocate nothing. */
static void pool_note(fb__repl_pool *p, uint64_t step, uint64_t bytes)
{
    if (step != p->step)
        p->nsizes = 0;
    p->step = step;
    if (p->nsizes == POOL_SIZES_MAX)
        return;
    if (p->nsizes == p->sizes_cap) {
        size_t cap = p->sizes_cap ? 2 * p->sizes_cap : 8;
        uint64_t *s = realloc(p->sizes, cap * sizeof *s);
        if (!s)
            return; /* refill then allocates fewer: only slower */
        p->sizes = s;
        p->sizes_cap = cap;
    }
    p->sizes[p->nsizes++] = bytes;
}

/* Take the pool's smallest file at least as large as bytes, sized down
 * and mapped to bytes; 1 when it has none.  No file is grown here: its
 * pages would be allocated on the word of a header, before any byte of
 * the shard came (a new file's are allocated as its bytes arrive). */
static int pool_take(fb__repl_pool *p, uint64_t bytes, pool_file *out, char *why,
                     size_t why_size)
{
    size_t best = p->n;
    for (size_t i = 0; i < p->n; i++) {
        uint64_t b = p->files[i].bytes;
        if (b >= bytes && (best == p->n || b < p->files[best].bytes))
            best = i;
    }
    if (best == p->n)
        return 1;
    *out = p->files[best];
    p->files[best] = p->files[--p->n];
    if (out->bytes == bytes)
        return 0;
    munmap(out->map, out->bytes);
    out->map = NULL;
    out->bytes = bytes;
    int rc = size_and_map(out->fd, bytes, &out->map, out->path, why, why_size);
    if (rc)
        pool_file_drop(out, 1);
    return rc;
}

/* A file for a shard of bytes: from the pool when it has one (mapped,
 * its pages in place), else a new one at tmp, empty and not mapped: the
 * shard is written into it (dest). */
static int shard_file(fb__repl_pool *p, const char *tmp, uint64_t bytes,
                      pool_file *f, char *why, size_t why_size)
{
    f->fd = -1;
    f->map = NULL;
    if (p) {
        int rc = pool_take(p, bytes, f, why, why_size);
        if (rc <= 0)
            return rc;
    }
    snprintf(f->path, sizeof f->path, "%s", tmp);
    f->bytes = bytes;
    f->fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (f->fd < 0) {
        int rc = -errno;
        fb__ckpt_say(why, why_size, "create %s: %s", tmp, strerror(-rc));
        return rc;
    }
    return 0;
}

/* After a shard: a pool's file that was not committed goes back to the
 * pool (its bytes are overwritten whole next time), within the pool's
 * bound; any other is closed, and removed unless committed. */
static void shard_file_done(fb__repl_pool *p, pool_file *f, int committed)
{
    int pooled = p && !strncmp(f->path, p->dir, strlen(p->dir));
    if (pooled && !committed && p->n < p->cap && p->n < p->nsizes + POOL_SPARE) {
        p->files[p->n++] = *f;
        return;
    }
    pool_file_drop(f, !committed);
}

/* Read and drop a shard of bytes that will not be kept, to stay in step:
 * 0, or -errno (-EPIPE at EOF). */
static int drop_bytes(int fd, uint64_t bytes)
{
    static __thread unsigned char sink[64 << 10];
    while (bytes) {
        size_t want = bytes < sizeof sink ? (size_t)bytes : sizeof sink;
        int rc = read_full(fd, sink, want);
        if (rc)
            return rc > 0 ? -EPIPE : rc;
        bytes -= want;
    }
    return 0;
}

int fb__repl_serve(int fd, const char *dir, uint64_t max_bytes,
                   fb__repl_stats *st, char *why, size_t why_size)
{
    return fb__repl_serve_pool(fd, dir, max_bytes, NULL, 0, st, why, why_size);
}

/* Where a shard waits for the scrub (deferred) or is being verified by it. */
#define ARRIVED_SUFFIX ".arrived"
#define SCRUB_SUFFIX ".scrub"

static int waiting_path(char *buf, size_t size, const char *dir, uint64_t step,
                        unsigned rank, const char *suffix)
{
    return fb__fmt(buf, size, "%s/step-%010llu/.rank-%05u%s", dir,
                   (unsigned long long)step, rank, suffix);
}

/*
 * Committed shards' mappings waiting to be released.  Unmapping a shard's
 * file costs about 30 us a MiB here (a page table entry at a time): done
 * between shards, it holds up the next shard, whose bytes are already
 * waiting, and with it the sender.  So a committed shard's mapping (and
 * descriptor) waits here until the socket has nothing waiting, or the
 * connection ends; nothing outlives fb__repl_serve_pool.  Its file is
 * committed already: the wait only keeps its pages mapped a while.
 */
#define RELEASE_MAX 64

typedef struct release_list {
    struct {
        unsigned char *map;
        uint64_t bytes;
        int fd;
    } f[RELEASE_MAX];
    int n;
} release_list;

static void release_all(release_list *rl)
{
    for (int i = 0; i < rl->n; i++) {
        if (rl->f[i].map)
            munmap(rl->f[i].map, rl->f[i].bytes);
        if (rl->f[i].fd >= 0)
            close(rl->f[i].fd);
    }
    rl->n = 0;
}

/* A committed shard's file f, released later (now when the list is full). */
static void release_later(release_list *rl, pool_file *f)
{
    if (rl->n == RELEASE_MAX)
        release_all(rl);
    rl->f[rl->n].map = f->map;
    rl->f[rl->n].bytes = f->bytes;
    rl->f[rl->n].fd = f->fd;
    rl->n++;
    f->map = NULL;
    f->fd = -1;
}

/* Whether fd has bytes (or its end) waiting to be read. */
static int readable_now(int fd)
{
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    return poll(&pfd, 1, 0) > 0;
}

static int serve(int fd, const char *dir, uint64_t max_bytes, fb__repl_pool *pool,
                 unsigned flags, release_list *rl, unsigned char **ring,
                 fb__repl_stats *st, char *why, size_t why_size);

/* A step's directory is removed when a shard of it is refused or
 * rejected and it is empty; another connection bringing a shard of the
 * same step at once (a node receives from several senders) may have
 * made it just before, and finds it gone when it creates or renames its
 * shard there: it makes it again, up to this many times. */
#define STEP_DIR_AGAIN 3

/* rename(from, to) of a file the node holds, told to cap's moving (NULL:
 * none) around it: 0 or -errno. */
static int rename_held(const fb__repl_cap *cap, const char *from, const char *to)
{
    if (!cap || !cap->moving)
        return rename(from, to) ? -errno : 0;
    struct stat st;
    uint64_t bytes = lstat(from, &st) ? 0 : (uint64_t)st.st_blocks * 512;
    cap->moving(cap->ctx, bytes, 0);
    int rc = rename(from, to) ? -errno : 0;
    cap->moving(cap->ctx, bytes, 1);
    return rc;
}

/* rename(from, to), to in step directory sdir: 0 or -errno. */
static int rename_into(const fb__repl_cap *cap, const char *sdir, const char *from,
                       const char *to)
{
    for (int again = 0;; again++) {
        int rc = rename_held(cap, from, to);
        if (!rc)
            return 0;
        if (rc != -ENOENT || again == STEP_DIR_AGAIN ||
            (mkdir(sdir, 0700) && errno != EEXIST))
            return rc;
    }
}

int fb__repl_serve_pool(int fd, const char *dir, uint64_t max_bytes,
                        fb__repl_pool *pool, unsigned flags, fb__repl_stats *st,
                        char *why, size_t why_size)
{
    release_list rl;
    rl.n = 0;
    unsigned char *ring = NULL; /* dest's, made at the first new file */
    int rc = serve(fd, dir, max_bytes, pool, flags, &rl, &ring, st, why, why_size);
    rx_end_ns = 0; /* the thread's next reads are another connection's */
    stage_begin();
    release_all(&rl);
    free(ring);
    stage_end(FB__REPL_RX_RELEASE);
    return rc;
}

/* The stall limit a caller set on socket fd (SO_RCVTIMEO), in ns; 0: none. */
static uint64_t socket_stall_ns(int fd)
{
    struct timeval tv = {0};
    socklen_t len = sizeof tv;
    if (getsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, &len))
        return 0;
    return (uint64_t)tv.tv_sec * 1000000000ull + (uint64_t)tv.tv_usec * 1000ull;
}

/* why for a read of shard h (NULL: its header) that failed with rc. */
static void say_cut(char *why, size_t why_size, const fb__repl_header *h,
                    uint64_t begin_ns, const char *detail, int rc)
{
    if (rc != -ETIMEDOUT)
        fb__ckpt_say(why, why_size, "fbr1: %s", detail);
    else if (!h)
        fb__ckpt_say(why, why_size, "fbr1: no header within %.1f s: connection given up",
                     (double)(rx_end_ns - begin_ns) / 1e9);
    else
        fb__ckpt_say(why, why_size, "fbr1: step %llu rank %u: %llu bytes not in within "
                     "%.1f s (%d s, then %d MiB/s at least): connection given up",
                     (unsigned long long)h->step, h->rank, (unsigned long long)h->bytes,
                     (double)(rx_end_ns - begin_ns) / 1e9, RX_GRACE_MS / 1000,
                     RX_FLOOR_MIB_S);
}

/* fb__repl_serve_pool's loop, committed shards' mappings left in rl. */
static int serve(int fd, const char *dir, uint64_t max_bytes, fb__repl_pool *pool,
                 unsigned flags, release_list *rl, unsigned char **ring,
                 fb__repl_stats *st, char *why, size_t why_size)
{
    int defer = (flags & FB__REPL_DEFER_VERIFY) != 0, keyed = 0;
    rx_stall_ns = socket_stall_ns(fd);
    for (;;) {
        unsigned char hb[FB__REPL_KEY_MSG_BYTES]; /* a header, or a key */
        stage_begin();
        if (rl->n && !readable_now(fd))
            release_all(rl); /* the sender waits: nothing is held up */
        stage_end(FB__REPL_RX_RELEASE);
        /* a header, or the key (its rest under the same deadline) */
        uint64_t begin_ns = fb__now_ns();
        rx_end_ns = rx_bound(begin_ns + RX_HEADER_MS * 1000000ull);
        int rc = read_full(fd, hb, FB__REPL_HEADER_BYTES);
        int key = !rc && !memcmp(hb, "FBK1", 4);
        if (key) {
            rc = read_full(fd, hb + FB__REPL_HEADER_BYTES,
                           FB__REPL_KEY_MSG_BYTES - FB__REPL_HEADER_BYTES);
            rc = rc == 1 ? -EPIPE : rc;
        }
        stage_end(FB__REPL_RX_HEADER);
        if (rc == 1)
            return 0;
        if (rc) {
            char detail[128];
            snprintf(detail, sizeof detail, "reading a header: %s", strerror(-rc));
            say_cut(why, why_size, NULL, begin_ns, detail, rc);
            return rc;
        }
        if (key && key_matches(hb + 4)) {
            keyed = 1;
            continue;
        }
        /* another key, or a shard before any (bytes that are not fbr1 at
         * all fail the header's decoding below, as before) */
        if (key || (!keyed && !memcmp(hb, "FBR1", 4))) {
            fb__ckpt_say(why, why_size, "fbr1: %s: connection refused (not one of "
                         "this run's watchers: another job's on this port?)",
                         key ? "a key that is not this run's" : "a shard before any key");
            unsigned char ack[4];
            put_le(ack, (uint32_t)-EACCES, 4);
            (void)write_full(fd, ack, sizeof ack);
            return -EACCES;
        }
        fb__repl_header h;
        if ((rc = fb__repl_header_decode(hb, FB__REPL_HEADER_BYTES, max_bytes, &h, why,
                                         why_size)))
            return rc;
        begin_ns = fb__now_ns();
        rx_end_ns = rx_bound(rx_shard_deadline(begin_ns, h.bytes));
        char sdir[PATH_MAX], tmp[PATH_MAX], dst[PATH_MAX];
        if (fb__ckpt_step_path(sdir, sizeof sdir, dir, h.step) ||
            fb__fmt(tmp, sizeof tmp, "%s/.rank-%05u.%d.tmp", sdir, h.rank,
                    (int)getpid()) ||
            (defer ? waiting_path(dst, sizeof dst, dir, h.step, h.rank, ARRIVED_SUFFIX)
                   : fb__ckpt_shard_path(dst, sizeof dst, dir, h.step, (int)h.rank))) {
            fb__ckpt_say(why, why_size, "fbr1: path too long under %s", dir);
            return -ENAMETOOLONG;
        }
        if (mkdir(sdir, 0700) && errno != EEXIST) {
            rc = -errno;
            fb__ckpt_say(why, why_size, "mkdir %s: %s", sdir, strerror(-rc));
            return rc;
        }
        char err[1024];
        int in_step = 0;
        pool_file f;
        int status, release = 0; /* f committed: released later */
        uint64_t grow = pool_growth(pool, h.bytes);
        fb__repl_room room;
        int fits = pool_reserve(pool, grow, &room);
        stage_end(FB__REPL_RX_PREP);
        if (!fits) {
            /* No room under the node's cap: refused whole, the stream kept
             * in step, the sender told why. */
            rmdir(sdir); /* only when empty */
            if ((rc = drop_bytes(fd, h.bytes))) {
                snprintf(err, sizeof err, "dropping a shard: %s", strerror(-rc));
                say_cut(why, why_size, &h, begin_ns, err, rc);
                return rc;
            }
            if (st)
                st->refused++;
            static fb__repl_log_limit refused_log;
            fb__repl_log(&refused_log, "firebreak: replica of step %llu rank %u "
                         "refused: %llu bytes do not fit under the node's cap of "
                         "%llu (%llu held, %llu reserved for shards arriving)\n",
                         (unsigned long long)h.step, h.rank, (unsigned long long)h.bytes,
                         (unsigned long long)room.cap, (unsigned long long)room.held,
                         (unsigned long long)room.reserved);
            status = -ENOSPC;
            stage_end(FB__REPL_RX_DATA);
            goto answer;
        }
        status = shard_file(pool, tmp, h.bytes, &f, err, sizeof err);
        for (int again = 0; status == -ENOENT && again < STEP_DIR_AGAIN; again++)
            if (!mkdir(sdir, 0700) || errno == EEXIST) /* see rename_into */
                status = shard_file(pool, tmp, h.bytes, &f, err, sizeof err);
        /* A pool's file is allocated now (the node counts it); a new one
         * as its bytes are written: its reservation stands until then. */
        int written = !status && !f.map;
        if (written && !*ring && !(*ring = malloc((size_t)RING_CHUNKS * RECV_CHUNK))) {
            shard_file_done(pool, &f, 0);
            status = -ENOMEM;
            snprintf(err, sizeof err, "receive buffers: out of memory");
        }
        if (!written || status)
            pool_release(pool, grow);
        stage_end(FB__REPL_RX_TAKE);
        if (status) {
            rmdir(sdir);
            fb__ckpt_say(why, why_size, "fbr1: %s", err);
            return status; /* nothing read of the shard: out of step */
        }
        dest k = {.map = f.map, .fd = f.fd, .ring = *ring};
        status = receive_into(fd, &k, tmp, &h, !defer, &in_step, err, sizeof err);
        if (written)
            pool_release(pool, grow);
        stage_end(FB__REPL_RX_DATA);
        if (!in_step) {
            shard_file_done(pool, &f, 0);
            rmdir(sdir);
            say_cut(why, why_size, &h, begin_ns, err, status);
            return status; /* the stream is no longer in step */
        }
        if (!status)
            status = rename_into(pool ? &pool->budget : NULL, sdir, f.path, dst);
        stage_end(FB__REPL_RX_RENAME);
        if (!status) {
            release = 1;
            if (pool)
                pool_note(pool, h.step, h.bytes);
            fb__fsync_dir(sdir);
            stage_end(FB__REPL_RX_SYNC);
            if (st)
                st->shards++, st->bytes += h.bytes;
            if (defer && pool && pool->on_arrival)
                pool->on_arrival(pool->arrival_ctx);
            stage_end(FB__REPL_RX_ARRIVAL);
        } else {
            shard_file_done(pool, &f, 0);
            rmdir(sdir); /* only when empty */
            if (st)
                st->rejected++;
            static fb__repl_log_limit rejected_log;
            fb__repl_log(&rejected_log, "firebreak: replica of step %llu rank %u "
                         "rejected: %s\n", (unsigned long long)h.step, h.rank, err);
        }
    answer:;
        unsigned char ack[4];
        put_le(ack, (uint32_t)status, 4);
        rc = write_full(fd, ack, sizeof ack);
        stage_end(FB__REPL_RX_ANSWER);
        if (release)
            release_later(rl, &f);
        if (rc) {
            fb__ckpt_say(why, why_size, "fbr1: answering: %s", strerror(-rc));
            return rc;
        }
        if (times)
            times->rx_shards++;
    }
}

/* Parse "<prefix><digits><suffix>" exactly, digits at most 10; 0 or -1. */
static int parse_name(const char *name, const char *prefix, const char *suffix,
                      uint64_t *out)
{
    size_t lp = strlen(prefix), ls = strlen(suffix), n = strlen(name);
    if (n <= lp + ls || n - lp - ls > 10 || strncmp(name, prefix, lp) ||
        strcmp(name + n - ls, suffix))
        return -1;
    uint64_t v = 0;
    for (size_t i = lp; i < n - ls; i++) {
        if (name[i] < '0' || name[i] > '9')
            return -1;
        v = v * 10 + (uint64_t)(name[i] - '0');
    }
    *out = v;
    return 0;
}

#define SCRUB_CHUNK (8u << 20) /* stop is asked between these */

/* Verify one claimed shard (path, of step and rank) as the receiver does
 * on arrival (the same header checks and verifier), hashing it where it
 * lies: a read-only mapping, no copy.  Nothing truncates a claimed file
 * (it is the receiver's own, out of the pool and under a name only the
 * scrub uses).  0, -ECANCELED, or the error with why filled. */
static int scrub_verify(const char *path, uint64_t step, int rank, int (*stop)(void *),
                        void *stop_arg, char *why, size_t why_size)
{
    int fd = fb__open_regular(path, 0);
    if (fd < 0) {
        fb__ckpt_say(why, why_size, "open %s: %s", path, fb_strerror(fd));
        return fd;
    }
    struct stat stt;
    if (fstat(fd, &stt) || stt.st_size < 8) {
        int rc = stt.st_size < 8 ? FB_EFORMAT : -errno;
        fb__ckpt_say(why, why_size, "%s: %s", path, fb_strerror(rc));
        close(fd);
        return rc;
    }
    uint64_t bytes = (uint64_t)stt.st_size;
    unsigned char *m = mmap(NULL, bytes, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        int rc = -errno;
        fb__ckpt_say(why, why_size, "map %s: %s", path, strerror(-rc));
        return rc;
    }
    fb__st_header *h = NULL;
    verifier v = {0};
    int rc = fb__st_parse_buffer(m, bytes, path, &h, why, why_size);
    if (!rc)
        rc = fb__shard_check_place(h, path, step, rank, 0, why, why_size);
    if (!rc)
        rc = fb__shard_check_meta(h, path, why, why_size);
    if (!rc)
        rc = verifier_init(&v, h, path, why, why_size);
    if (!rc) {
        /* The data section follows the length word and the header, whose
         * length the parse above bounded by the file's. */
        uint64_t start = 8 + get_le(m, 8);
        for (uint64_t off = start; off < bytes && !v.rc; off += SCRUB_CHUNK) {
            if (stop && stop(stop_arg)) {
                rc = -ECANCELED;
                break;
            }
            uint64_t n = bytes - off < SCRUB_CHUNK ? bytes - off : SCRUB_CHUNK;
            verifier_feed(&v, m + off, (size_t)n);
        }
        if (!rc) {
            verifier_feed(&v, NULL, 0); /* closes the tensors that end here */
            rc = v.rc;
        }
    }
    fb__hash_free(v.ctx);
    fb__st_free(h);
    munmap(m, bytes);
    return rc;
}

/* The waiting shards of one step directory (step), claimed and verified
 * one at a time. */
static int scrub_step(const char *dir, uint64_t step, int (*stop)(void *),
                      void *stop_arg, const fb__repl_cap *cap, fb__repl_scrub_stats *st)
{
    char sdir[PATH_MAX];
    if (fb__ckpt_step_path(sdir, sizeof sdir, dir, step))
        return 0;
    DIR *d = opendir(sdir);
    if (!d)
        return 0; /* dropped meanwhile */
    int rc = 0;
    struct dirent *de;
    while (!rc && (de = readdir(d))) {
        uint64_t rank;
        int claimed = !parse_name(de->d_name, ".rank-", SCRUB_SUFFIX, &rank);
        if (!claimed && parse_name(de->d_name, ".rank-", ARRIVED_SUFFIX, &rank))
            continue;
        if (rank > 99999)
            continue;
        char from[PATH_MAX], path[PATH_MAX], dst[PATH_MAX], why[1024] = "";
        if (waiting_path(from, sizeof from, dir, step, (unsigned)rank, ARRIVED_SUFFIX) ||
            waiting_path(path, sizeof path, dir, step, (unsigned)rank, SCRUB_SUFFIX) ||
            fb__ckpt_shard_path(dst, sizeof dst, dir, step, (int)rank))
            continue;
        /* Claimed first: a copy that arrives again meanwhile takes the
         * .arrived name, and the next scrub verifies it. */
        if (!claimed && rename_held(cap, from, path))
            continue;
        int v = scrub_verify(path, step, (int)rank, stop, stop_arg, why, sizeof why);
        if (v == -ECANCELED) {
            rc = v;
        } else if (!v) {
            struct stat stt;
            if (!stat(path, &stt) && !rename_held(cap, path, dst)) {
                fb__fsync_dir(sdir);
                if (st)
                    st->committed++, st->bytes += (uint64_t)stt.st_size;
            }
        } else if (v == FB_ECORRUPT || v == FB_EFORMAT || v == FB_EVERSION) {
            unlink(path);
            if (st)
                st->dropped++;
            static fb__repl_log_limit dropped_log;
            fb__repl_log(&dropped_log, "firebreak: replica of step %llu rank %llu "
                         "dropped by the scrub: %s\n", (unsigned long long)step,
                         (unsigned long long)rank, why);
        }
        /* Else (gone meanwhile, no memory): left for the next scrub. */
    }
    closedir(d);
    return rc;
}

int fb__repl_scrub(const char *dir, int (*stop)(void *), void *stop_arg,
                   const fb__repl_cap *budget, fb__repl_scrub_stats *st)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    uint64_t *steps = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        uint64_t step;
        if (parse_name(de->d_name, "step-", "", &step) || step > FB__REPL_MAX_STEP)
            continue;
        if (n == cap) {
            size_t c = cap ? 2 * cap : 16;
            uint64_t *v = realloc(steps, c * sizeof *v);
            if (!v)
                break; /* the rest wait for the next scrub */
            steps = v;
            cap = c;
        }
        steps[n++] = step;
    }
    closedir(d);
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++)
        rc = scrub_step(dir, steps[i], stop, stop_arg, budget, st);
    free(steps);
    return rc;
}

static int send_shard(int fd, const char *dir, uint64_t step, int rank, progress *pg,
                      char *why, size_t why_size)
{
    char path[PATH_MAX];
    stage_begin();
    if (fb__ckpt_shard_path(path, sizeof path, dir, step, rank)) {
        fb__ckpt_say(why, why_size, "path too long under %s", dir);
        return -ENAMETOOLONG;
    }
    int in = fb__open_regular(path, 0);
    if (in < 0) {
        fb__ckpt_say(why, why_size, "open %s: %s", path, fb_strerror(in));
        return in;
    }
    struct stat stt;
    int rc = 0;
    if (fstat(in, &stt)) {
        rc = -errno;
        fb__ckpt_say(why, why_size, "stat %s: %s", path, strerror(-rc));
        close(in);
        return rc;
    }
    fb__repl_header h = {.rank = (uint32_t)rank, .step = step,
                         .bytes = (uint64_t)stt.st_size};
    unsigned char hb[FB__REPL_HEADER_BYTES];
    fb__repl_header_encode(&h, hb);
    stage_end(FB__REPL_TX_OPEN);
    pg->grace_ms = h.bytes / (1u << 20) * ALLOC_GRACE_MIB;
    rc = send_full(fd, hb, sizeof hb, pg);
    stage_end(FB__REPL_TX_HEADER);
    off_t off = 0;
    while (!rc && off < stt.st_size) {
        ssize_t r = sendfile(fd, in, &off, (size_t)(stt.st_size - off));
        int again = r < 0 ? try_again(fd, POLLOUT, pg) : 0;
        if (again)
            rc = again < 0 ? again : 0;
        else if (r == 0)
            rc = -EIO; /* the file shrank under us */
        else
            moved(pg);
    }
    stage_end(FB__REPL_TX_DATA);
    if (rc == -ETIMEDOUT && pg->ms)
        fb__ckpt_say(why, why_size, "sending %s: no byte moved for %llu ms", path,
                     (unsigned long long)(pg->ms + pg->grace_ms));
    else if (rc)
        fb__ckpt_say(why, why_size, "sending %s: %s", path, strerror(-rc));
    pg->grace_ms = 0;
    close(in);
    stage_end(FB__REPL_TX_CLOSE);
    if (times)
        times->tx_shards++;
    return rc;
}

int fb__repl_send_step(int fd, const char *dir, uint64_t step, int rank0,
                       int nranks, char *why, size_t why_size)
{
    return fb__repl_send_step_within(fd, dir, step, rank0, nranks, 0, why, why_size);
}

static int send_step(int fd, const char *dir, uint64_t step, int rank0, int nranks,
                     progress *pg, char *why, size_t why_size);

int fb__repl_send_step_within(int fd, const char *dir, uint64_t step, int rank0,
                              int nranks, int stall_ms, char *why, size_t why_size)
{
    progress pg = {.ms = stall_ms > 0 ? stall_ms : 0, .last_ns = fb__now_ns()};
    int flags = pg.ms ? fcntl(fd, F_GETFL) : -1;
    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK))
        pg.ms = 0; /* not a descriptor it can poll: as it blocks */
    int rc = send_step(fd, dir, step, rank0, nranks, &pg, why, why_size);
    if (pg.ms)
        (void)fcntl(fd, F_SETFL, flags);
    return rc;
}

static int send_step(int fd, const char *dir, uint64_t step, int rank0, int nranks,
                     progress *pg, char *why, size_t why_size)
{
    /* A shard's short tail and the next 24-byte header go out at once,
     * not held back by Nagle.  Not a TCP socket: nothing to set. */
    int one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    unsigned char key[FB__REPL_KEY_MSG_BYTES];
    memcpy(key, "FBK1", 4);
    memcpy(key + 4, repl_key, sizeof repl_key);
    int rc = send_full(fd, key, sizeof key, pg);
    if (rc) {
        fb__ckpt_say(why, why_size, "sending the run's key: %s", strerror(-rc));
        return rc;
    }
    for (int r = rank0; r < rank0 + nranks && !rc; r++)
        rc = send_shard(fd, dir, step, r, pg, why, why_size);
    if (rc)
        return rc;
    stage_begin();
    for (int r = rank0; r < rank0 + nranks; r++) {
        unsigned char ack[4];
        int e = recv_full(fd, ack, sizeof ack, pg);
        if (e == -ETIMEDOUT && pg->ms) {
            fb__ckpt_say(why, why_size, "waiting for the peer's answer on rank %d: "
                         "no byte moved for %d ms", r, pg->ms);
            return e;
        }
        if (e) {
            e = e > 0 ? -EPIPE : e;
            fb__ckpt_say(why, why_size, "waiting for the peer's answer on rank %d: "
                         "%s", r, strerror(-e));
            return e;
        }
        int status = (int)(int32_t)get_le(ack, 4);
        if (status && !rc) {
            rc = status;
            fb__ckpt_say(why, why_size, "the peer rejected step %llu rank %d: %s",
                         (unsigned long long)step, r, fb_strerror(status));
        }
    }
    stage_end(FB__REPL_TX_ANSWERS);
    if (times)
        times->tx_steps++;
    return rc;
}
