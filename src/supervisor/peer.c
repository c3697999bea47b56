/*
 * peer.c -- the peer tier of node-memory checkpoints under the slurm
 * launcher (docs/slurm.md, "Checkpoint tiers"; watcher.h).
 *
 * Each node's watcher copies the steps its ranks completed in its memory
 * to the memory of K other nodes (--peer-copies, default 1), in the
 * attempt's node order outside its failure domain, spread over the other
 * domains (fb__peer_place), to each peer independently, over fbr1
 * (src/ckpt/replicate.h).  Copies received from other nodes live apart
 * from the node's own ranks' shards:
 *
 *   /dev/shm/fb.<job>.mem/step-<N>/rank-<R>.safetensors       own ranks
 *   /dev/shm/fb.<job>.mem/peer/step-<N>/rank-<R>.safetensors  peer copies
 *
 * so a restore knows a peer copy from its own (restore_done's source) and
 * the supervisor can count it as a third kind of copy (nodemem.c).  Both
 * ends run in threads of the watcher, never in a rank: two sender lanes,
 * one for the steps the supervisor names (`fbw1 send`: the same steps on
 * every node) and one for the node's newest step between them, each
 * taking the newest step offered to it (a newer one replaces one not
 * begun), with a sender thread per peer, so a stalled or dead peer
 * delays only its own copies; the receiver serves up to
 * PEER_RX_SLOTS senders at once (a node is the peer of about K others),
 * each in a slot thread with its own receive pool, taking each shard in as
 * soon as it arrived whole with a valid header (FB__REPL_DEFER_VERIFY:
 * no hashing on the transfer's path), and wakes the scrub after each
 * shard: a third thread, at idle priority (SCHED_IDLE), which verifies
 * every hash of what arrived, commits what passed, drops what did not;
 * then a fourth, at normal priority, says which steps of which ranks the
 * node now holds (`fbw1 peer`): the supervisor counts only verified
 * copies.  The idle thread takes no lock another thread waits on (it is
 * woken through a semaphore, and leaves the saying to the fourth): on a
 * node whose CPUs training keeps busy it may not run for seconds, and a
 * lock it held meanwhile would stall the watcher's own lines (its
 * `alive`: the node would be taken for lost).  Old steps go when the supervisor says
 * (`fbw1 drop`, fb__peer_drop_older).
 *
 * `firebreak watch --mem-fetch` is the other direction, before a launch:
 * the supervisor names, per rank placed on a node that holds no copy of
 * the chosen step, the live node that does; that node sends the shard and
 * the new node stores it in its peer directory, verified by hash.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckpt/replicate.h"
#include "ckpt/store.h"
#include "ckpt/tier.h"
#include "common/util.h"
#include "firebreak/firebreak.h"
#include "lib/segment.h"
#include "supervisor/sup.h"
#include "supervisor/watcher.h"

#define PEER_SHARD_MAX_DEFAULT (256ull << 30) /* without --memory-ckpt-max */
#define PEER_STALL_S 10                       /* no byte moved: stalled    */
#define PEER_REPORTED_MAX 64

/* ---- sockets ---- */

/* How long a connection may move no byte before it is given up:
 * PEER_STALL_S (shorter under a test hook).  A live receiver takes bytes
 * every few ms, and a live sender sends a step's shards back to back;
 * the sender allows 1 ms a MiB of the shard on top, a margin for a
 * receiver of a version before, which grew a pool file before it read
 * (fb__repl_send_step_within).  A receiver also holds its sender to
 * deadlines on the whole shard (replicate.h, fb__repl_rx_deadline). */
static int stall_ms(void)
{
#ifdef FB_TEST_HOOKS
    /* test hook: a short stall limit (test_peer.c) */
    const char *v = getenv("FIREBREAK_TEST_PEER_STALL_MS");
    if (v && atoi(v) > 0)
        return atoi(v);
#endif
    return PEER_STALL_S * 1000;
}

/* The stall rule on a connection: it fails once no byte moved on it for
 * stall_ms().  The sender applies it itself (fb__repl_send_step_within:
 * SO_SNDTIMEO returns a partial write after the limit and waits the limit
 * again on the next call, so a peer that stopped reading held a sender
 * two or three times the limit).  The receiver reads: SO_RCVTIMEO is the
 * rule there, a read returning as soon as one byte came, else failing
 * (EAGAIN) after the limit; SO_SNDTIMEO bounds its 4-byte answers. */
static void io_timeout(int fd)
{
    int ms = stall_ms();
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

/* Whether rc, from a connection under the stall rule, is its limit. */
static int stalled(int rc)
{
    return rc == -EAGAIN || rc == -EWOULDBLOCK || rc == -ETIMEDOUT;
}

static int listen_on(int port)
{
    int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int v6 = fd >= 0;
    if (fd < 0)
        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    int one = 1, zero = 0;
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    int rc;
    if (v6) {
        (void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
        struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port),
                                 .sin6_addr = in6addr_any};
        rc = bind(fd, (struct sockaddr *)&a, sizeof a);
    } else {
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                                .sin_addr.s_addr = htonl(INADDR_ANY)};
        rc = bind(fd, (struct sockaddr *)&a, sizeof a);
    }
    if (rc || listen(fd, 16)) {
        rc = -errno;
        close(fd);
        return rc;
    }
    return fd;
}

/* Listen, retrying while the port is still held (the watcher of the
 * attempt before may take up to a second to go). */
static int listen_retry(int port, int timeout_ms, volatile int *stopping)
{
    uint64_t t0 = fb__now_ns();
    for (;;) {
        int fd = listen_on(port);
        if (fd >= 0 || fd != -EADDRINUSE || (stopping && *stopping) ||
            fb__now_ns() - t0 > (uint64_t)timeout_ms * 1000000ull)
            return fd;
        struct timespec ts = {0, 200000000};
        nanosleep(&ts, NULL);
    }
}

/* How often a connect in progress looks at the stop flag. */
#define CONNECT_POLL_MS 100

/* Complete the connect of non-blocking fd to a by deadline_ns, giving up
 * as soon as *stopping (may be NULL) is set: 0, or -errno (-ETIMEDOUT
 * past the deadline, -ECANCELED stopped).  A blocking connect() to a peer
 * that drops SYNs (a dead node) waits out the kernel's SYN retries, about
 * 130 s: `--mem-fetch --timeout 5s` ran 134 s, and a watcher's stop
 * waited that long for its sender (Slurm kills it after KillWait first,
 * and the node's memory is never removed). */
static int connect_within(int fd, const struct sockaddr *a, socklen_t len,
                          uint64_t deadline_ns, volatile int *stopping)
{
    if (!connect(fd, a, len))
        return 0;
    if (errno != EINPROGRESS && errno != EINTR)
        return -errno;
    for (;;) {
        uint64_t now = fb__now_ns();
        if (stopping && *stopping)
            return -ECANCELED;
        if (now >= deadline_ns)
            return -ETIMEDOUT;
        uint64_t left_ms = (deadline_ns - now + 999999) / 1000000ull;
        struct pollfd pfd = {.fd = fd, .events = POLLOUT};
        int r = poll(&pfd, 1, left_ms > CONNECT_POLL_MS ? CONNECT_POLL_MS : (int)left_ms);
        if (r < 0 && errno != EINTR)
            return -errno;
        if (r > 0) {
            int err = 0;
            socklen_t elen = sizeof err;
            if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen))
                return -errno;
            return -err;
        }
    }
}

/* One try at connecting to addr:port, by deadline_ns and while not
 * *stopping (connect_within): the connected fd, blocking, under the stall
 * rule; or -errno. */
static int connect_once(const char *addr, int port, uint64_t deadline_ns,
                        volatile int *stopping)
{
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    int rc = getaddrinfo(addr, ps, &hints, &ai);
    if (rc)
        return -EHOSTUNREACH;
    rc = -ECONNREFUSED;
    for (struct addrinfo *p = ai; p; p = p->ai_next) {
        int fd = socket(p->ai_family, p->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                        p->ai_protocol);
        if (fd < 0)
            continue;
        rc = connect_within(fd, p->ai_addr, p->ai_addrlen, deadline_ns, stopping);
        int fl = rc ? 0 : fcntl(fd, F_GETFL);
        if (!rc && (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK)))
            rc = -errno;
        if (!rc) {
            freeaddrinfo(ai);
            io_timeout(fd);
            return fd;
        }
        close(fd);
        if (rc == -ETIMEDOUT || rc == -ECANCELED)
            break;
    }
    freeaddrinfo(ai);
    return rc;
}

/* Connect, retrying until deadline: the other end may not listen yet. */
static int connect_retry(const char *addr, int port, int timeout_ms,
                         volatile int *stopping)
{
    uint64_t t0 = fb__now_ns(), deadline = t0 + (uint64_t)timeout_ms * 1000000ull;
    for (;;) {
        int fd = connect_once(addr, port, deadline, stopping);
        if (fd >= 0 || (stopping && *stopping) || fb__now_ns() >= deadline)
            return fd;
        struct timespec ts = {0, 200000000};
        nanosleep(&ts, NULL);
    }
}

/* The node's cap (--memory-ckpt-max); 0: none. */
static uint64_t node_cap(void)
{
    long long cap = 0;
    const char *v = fb__getenv("FIREBREAK_CKPT_MEM_MAX");
    if (v && !fb__parse_int(v, 0, INT64_MAX, &cap) && cap > 0)
        return (uint64_t)cap;
    return 0;
}

static uint64_t shard_max_bytes(void)
{
    uint64_t cap = node_cap();
    return cap ? cap : PEER_SHARD_MAX_DEFAULT;
}

/* The bytes of memory the node holds for the run: everything allocated
 * under its directory, own steps, peer copies, the receive pool's files
 * and files being written alike (tmpfs counts allocated blocks). */
static __thread uint64_t held_sum;

static int held_add(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)path, (void)ftw;
    if (flag == FTW_F)
        held_sum += (uint64_t)st->st_blocks * 512;
    return 0;
}

static uint64_t node_held(void *mem_dir)
{
    held_sum = 0;
    (void)nftw(mem_dir, held_add, 8, FTW_PHYS);
    return held_sum;
}

int fb__peer_dir_path(char *buf, size_t size, const char *mem_dir)
{
    return fb__fmt(buf, size, "%s/" FB__TIER_PEER_SUBDIR, mem_dir);
}

/* Remove a step directory of node memory: a hidden name first (as
 * store.c does), so a half-removed step is never taken for a checkpoint. */
static void remove_step(const char *dir, uint64_t step)
{
    char from[PATH_MAX], to[PATH_MAX];
    if (fb__ckpt_step_path(from, sizeof from, dir, step) ||
        fb__fmt(to, sizeof to, "%s/.deleted-step-%010llu.%d", dir,
                (unsigned long long)step, (int)getpid()) ||
        rename(from, to))
        return;
    fb__rm_rf(to);
}

int fb__peer_drop_older(const char *mem_dir, int world, int64_t step,
                        const long long *keep, int nkeep)
{
    char dirs[2][PATH_MAX];
    int64_t k[FB__FBW1_DROP_KEEP_MAX];
    int dropped = 0;
    nkeep = nkeep < 0 ? 0 : nkeep > FB__FBW1_DROP_KEEP_MAX ? FB__FBW1_DROP_KEEP_MAX : nkeep;
    for (int i = 0; i < nkeep; i++)
        k[i] = (int64_t)keep[i];
    if (fb__fmt(dirs[0], sizeof dirs[0], "%s", mem_dir) ||
        fb__peer_dir_path(dirs[1], sizeof dirs[1], mem_dir))
        return 0;
    for (int d = 0; d < 2; d++) {
        fb__ckpt_entry *v = NULL;
        size_t n = 0;
        if (fb__ckpt_scan(dirs[d], world, 0, &v, &n))
            continue;
        for (size_t i = 0; i < n; i++)
            if ((int64_t)v[i].step < step && !fb__sup_step_kept((int64_t)v[i].step, k, nkeep)) {
                remove_step(dirs[d], v[i].step);
                dropped++;
            }
        free(v);
    }
    return dropped;
}

/* ---- the watcher's sender and receiver ---- */

/* A receiving slot: one connection at a time, with a receive pool of its
 * own (replicate.h: a pool serves one thread).  Slot 0's pool is in the
 * peer directory, slot i's in <peer>/.rx-<i>/, same tmpfs, so a shard
 * renamed from it lands in the peer directory as from slot 0's. */
typedef struct rx_slot {
    struct fb__peer *p;
    int i;
    int fd;                         /* the connection; -1 idle; under mu  */
    unsigned char from[16];         /* its source, IPv6 (v4 mapped); mu   */
    pthread_t th;
    int up;
} rx_slot;

#define PEER_RX_SLOTS FB__PEER_COPIES_MAX /* senders served at once    */
/* At most this many of the slots serve one source address at once: a
 * node sends to a peer on its two lanes, so 2 at most; one host cannot
 * take every slot with connections that trickle until their deadline. */
#define PEER_RX_PER_SOURCE 4
#define PEER_SENT_KEPT 4            /* steps remembered as sent, per peer   */

/* A sender: one lane's copies to one peer, in a thread of its own, so a
 * peer that is slow, stalled or gone holds up only its own copies. */
typedef struct tx {
    struct fb__peer *p;
    int lane, peer;                 /* lane 0 or 1; index into to[]       */
    int64_t pending;                /* the step it sends next; -1. mu     */
    int64_t busy;                   /* the step it is sending; -1. mu     */
    int fd;                         /* its connection; -1 none. mu        */
    pthread_t th;
    int up;
} tx;

struct fb__peer {
    char mem_dir[PATH_MAX], peer_dir[PATH_MAX];
    char node[FB__FBW1_NODE_MAX];
    char to[FB__PEER_COPIES_MAX][FB__FBW1_NODE_MAX]; /* the peers' addresses */
    int nto;
    int port, world;
    FILE *out;
    void (*emit)(FILE *out, const fb__fbw1_msg *m);
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_cond_t slot_cv;         /* a slot took or ended a connection  */
    /* Lock-free wake-ups, for and from the idle-priority scrub: */
    sem_t scrub_due;                /* posted: something to verify        */
    sem_t held_due;                 /* posted: the scrub committed some   */
    int rx_done;                    /* the acceptor ended; under mu       */
    volatile int stopping;
    int lfd;                        /* -1 none; under mu                  */
    rx_slot slot[PEER_RX_SLOTS];
    /* Two lanes: 0 sends the steps the supervisor names (`fbw1 send`), 1
     * this node's newest step between them, so a slow copy of one never
     * holds up the other; each lane has a sender per peer, so a stalled
     * peer never holds up another's copies.  Both lanes' senders to one
     * peer never send the same step at once (tx_main). */
    tx tx[2][FB__PEER_COPIES_MAX];
    int64_t offered[2];             /* newest offered to each lane        */
    /* The last steps sent whole to each peer (sent[i][nsent[i] % ...]),
     * not sent to it again by the other lane; under mu. */
    int64_t sent[FB__PEER_COPIES_MAX][PEER_SENT_KEPT];
    int nsent[FB__PEER_COPIES_MAX];
    int rank0, nranks;
    /* The node's cap (--memory-ckpt-max; 0: none), shared by every slot's
     * pool (cap_reserve): */
    uint64_t cap;
    pthread_mutex_t cap_mu;
    uint64_t reserved;              /* granted, not yet allocated; cap_mu */
    uint64_t settled;               /* reservations released, renames
                                       begun or ended; cap_mu          */
    uint64_t in_flight;             /* bytes of files being renamed; cap_mu */
    int quiet_gone;                 /* FIREBREAK_WATCH_DEBUG unset        */
    pthread_t rx, scrub, teller;
    int rx_up, scrub_up, teller_up;
    /* Who frees p: 2 while the scrub runs (it and fb__peer_stop), the last
     * to let go frees (peer_release); the scrub may be left running by a
     * stop that could not wait for it (SCRUB_JOIN_MS). */
    atomic_int refs;
    /* The teller thread's own: */
    struct { int64_t step; int shards; } reported[PEER_REPORTED_MAX];
    int nreported;
};

/* Say which ranks of each step the peer directory holds (a step once per
 * count of shards).  Nothing is removed here: the supervisor, which knows
 * which step every rank can restore, says when (`fbw1 drop`). */
static void held(fb__peer *p)
{
    fb__ckpt_entry *v = NULL;
    size_t n = 0;
    if (fb__ckpt_scan(p->peer_dir, p->world, 0, &v, &n))
        return;
    for (size_t i = 0; i < n; i++) {
        int j = 0;
        while (j < p->nreported && p->reported[j].step != (int64_t)v[i].step)
            j++;
        if (j < p->nreported && p->reported[j].shards == v[i].shards)
            continue;
        if (j == p->nreported) {
            if (p->nreported == PEER_REPORTED_MAX)
                memmove(p->reported, p->reported + 1,
                        sizeof p->reported[0] * --p->nreported);
            j = p->nreported++;
        }
        p->reported[j].step = (int64_t)v[i].step;
        p->reported[j].shards = v[i].shards;
        /* One line per run of consecutive ranks present. */
        int start = -1;
        for (int r = 0; r <= p->world; r++) {
            char path[PATH_MAX];
            int here = r < p->world &&
                       !fb__ckpt_shard_path(path, sizeof path, p->peer_dir, v[i].step, r) &&
                       access(path, F_OK) == 0;
            if (here && start < 0)
                start = r;
            if (!here && start >= 0) {
                fb__fbw1_msg m;
                memset(&m, 0, sizeof m);
                m.kind = FB_FBW1_PEER;
                snprintf(m.node, sizeof m.node, "%s", p->node);
                m.step = (long long)v[i].step;
                m.rank = start;
                m.count = r - start;
                p->emit(p->out, &m);
                start = -1;
            }
        }
    }
    free(v);
}

/* Give the scrub work: after each shard that arrived (the pool's
 * callback, so verifying it overlaps receiving the next), and after each
 * connection. */
static void wake_scrub(void *arg)
{
    fb__peer *p = arg;
    sem_post(&p->scrub_due);
}

/*
 * The node's cap, one reservation for every slot (fb__repl_cap): a pool's
 * growth is granted only when what the node holds (node_held), what other
 * slots were granted and have not allocated yet, and the growth fit in
 * the cap, checked and reserved in one critical section, so two slots
 * never both take the last room.  The walk of the node's directory is
 * costly: it runs outside the lock, and counts only if no reservation
 * was settled meanwhile (a file allocated during the walk may be missed
 * by it, and is no longer reserved); else the node is walked again, the
 * last time under the lock.  A file being allocated may be counted twice
 * meanwhile (walked and reserved): a shard may then be refused that
 * would have fit, never the reverse.  A file being renamed (a shard into
 * its step, the scrub's claim and commit: cap_moving) may be met by the
 * walk in neither place: its bytes count as held until it landed, and
 * its rename's start and end settle as a reservation does (the same
 * rule: counted twice at worst, never missed).  Removals of old steps
 * (fb__peer_drop_older) are not told: a step renamed away to be removed
 * may go uncounted while its files are freed.
 */
#define CAP_WALKS_UNLOCKED 2

static int cap_reserve(void *arg, uint64_t bytes, fb__repl_room *room)
{
    fb__peer *p = arg;
    uint64_t held;
    pthread_mutex_lock(&p->cap_mu);
    for (int walk = 0;; walk++) {
        uint64_t settled = p->settled;
        if (walk == CAP_WALKS_UNLOCKED) {
            held = node_held(p->mem_dir); /* no reservation settles meanwhile */
            break;
        }
        pthread_mutex_unlock(&p->cap_mu);
        held = node_held(p->mem_dir);
        pthread_mutex_lock(&p->cap_mu);
        if (p->settled == settled)
            break;
    }
    held += p->in_flight;
    room->cap = p->cap;
    room->held = held;
    room->reserved = p->reserved;
    int ok = held <= p->cap && p->reserved <= p->cap - held &&
             bytes <= p->cap - held - p->reserved;
    if (ok)
        p->reserved += bytes;
    pthread_mutex_unlock(&p->cap_mu);
#ifdef FB_TEST_HOOKS
    /* test hook: a slow allocation (test_peer.c): time between a granted
     * reservation and its file, when other slots check the cap */
    const char *slow = getenv("FIREBREAK_TEST_PEER_CAP_DELAY_MS");
    if (ok && slow && atoi(slow) > 0)
        usleep((useconds_t)atoi(slow) * 1000);
#endif
    return ok;
}

/* A file the node holds is being renamed (done 0) or was (done 1). */
static void cap_moving(void *arg, uint64_t bytes, int done)
{
    fb__peer *p = arg;
    pthread_mutex_lock(&p->cap_mu);
    if (!done)
        p->in_flight += bytes;
    else
        p->in_flight -= bytes <= p->in_flight ? bytes : p->in_flight;
    p->settled++;
    pthread_mutex_unlock(&p->cap_mu);
}

/* A granted reservation's file is allocated (node_held counts it), or
 * will not be. */
static void cap_release(void *arg, uint64_t bytes)
{
    fb__peer *p = arg;
    pthread_mutex_lock(&p->cap_mu);
    p->reserved -= bytes <= p->reserved ? bytes : p->reserved;
    p->settled++;
    pthread_mutex_unlock(&p->cap_mu);
}

/* The node's cap as the receive pools and the scrub are told it. */
static fb__repl_cap cap_of(fb__peer *p)
{
    return (fb__repl_cap){.reserve = cap_reserve, .release = cap_release,
                          .moving = cap_moving, .ctx = p};
}

/* The receive pool of slot i (replicate.h): each step's files are
 * allocated while the slot waits for its next connection, not while a
 * sender waits for them.  NULL when it could not be made (said): shards
 * are then received as fb__repl_serve does. */
static fb__repl_pool *slot_pool(fb__peer *p, int i, char *parent, size_t size)
{
    fb__repl_pool *pool = NULL;
    char why[512] = "";
    if ((i == 0 ? fb__fmt(parent, size, "%s", p->peer_dir)
                : fb__fmt(parent, size, "%s/.rx-%d", p->peer_dir, i)) ||
        (i && mkdir(parent, 0700) && errno != EEXIST) ||
        fb__repl_pool_open(&pool, parent, why, sizeof why)) {
        fprintf(stderr, "firebreak watch: %s: no receive pool (%s): peer copies "
                "allocate their memory as they arrive\n", p->node,
                why[0] ? why : strerror(errno));
        return NULL;
    }
    /* The node's cap covers what it holds for the run, copies received
     * and every slot's pool files included: a copy that would not fit is
     * refused (the sender's node keeps its own; the supervisor counts no
     * peer copy of it).  One reservation for all slots: with several
     * senders at once the node never passes its cap. */
    if (p->cap) {
        fb__repl_cap cap = cap_of(p);
        fb__repl_pool_cap(pool, &cap);
    }
    fb__repl_pool_on_arrival(pool, wake_scrub, p);
    return pool;
}

/* A slot's thread: serve each connection the acceptor hands it, in full,
 * then refill its pool before it takes the next. */
static void *slot_main(void *arg)
{
    rx_slot *sl = arg;
    fb__peer *p = sl->p;
    uint64_t max = shard_max_bytes();
    char parent[PATH_MAX] = "", pwhy[512];
    fb__repl_pool *pool = slot_pool(p, sl->i, parent, sizeof parent);
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stopping && !p->rx_done && sl->fd < 0)
            pthread_cond_wait(&p->slot_cv, &p->mu);
        if (p->stopping || (p->rx_done && sl->fd < 0))
            break;
        int c = sl->fd;
        pthread_mutex_unlock(&p->mu);
#ifdef FB_TEST_HOOKS
        /* test hook: a stalled peer (tests/slurm/peerstall.sh): the node
         * named takes connections in and never reads them, until it stops */
        const char *hang = getenv("FIREBREAK_TEST_PEER_RX_HANG");
        while (hang && !strcmp(hang, p->node) && !p->stopping)
            usleep(10000);
#endif
        io_timeout(c);
        fb__repl_stats st = {0};
        char why[1024] = "";
        int rc = fb__repl_serve_pool(c, p->peer_dir, max, pool, FB__REPL_DEFER_VERIFY,
                                     &st, why, sizeof why);
        static fb__repl_log_limit rx_log; /* every slot's, a line per connection */
        if (rc && !p->stopping && rc != -ETIMEDOUT && stalled(rc))
            fb__repl_log(&rx_log, "firebreak watch: peer copy into %s: the sender "
                         "stalled, no byte moved for %g s: connection given up "
                         "(%s)\n", p->peer_dir, stall_ms() / 1000.0, why);
        else if (rc && !p->stopping)
            fb__repl_log(&rx_log, "firebreak watch: peer copy into %s: %s\n", p->peer_dir,
                         why);
        if (st.shards)
            sem_post(&p->scrub_due);
        if (pool && !p->stopping && fb__repl_pool_refill(pool, pwhy, sizeof pwhy) < 0)
            fprintf(stderr, "firebreak watch: %s: receive pool: %s\n", p->node, pwhy);
        pthread_mutex_lock(&p->mu);
        close(c);
        sl->fd = -1;
        pthread_cond_broadcast(&p->slot_cv);
    }
    if (sl->fd >= 0) {
        close(sl->fd);
        sl->fd = -1;
    }
    pthread_mutex_unlock(&p->mu);
    fb__repl_pool_close(pool);
    if (sl->i && parent[0])
        (void)rmdir(parent);
    return NULL;
}

/* The source address of a connection as 16 bytes (IPv4 mapped into
 * IPv6, as the dual-stack listener sees it); printable into text. */
static void source_of(const struct sockaddr_storage *a, unsigned char out[16],
                      char *text, size_t text_size)
{
    memset(out, 0, 16);
    if (a->ss_family == AF_INET6) {
        memcpy(out, &((const struct sockaddr_in6 *)a)->sin6_addr, 16);
    } else if (a->ss_family == AF_INET) {
        out[10] = out[11] = 0xff;
        memcpy(out + 12, &((const struct sockaddr_in *)a)->sin_addr, 4);
    }
    static const unsigned char mapped[12] = {[10] = 0xff, [11] = 0xff};
    int v4 = !memcmp(out, mapped, sizeof mapped);
    if (!inet_ntop(v4 ? AF_INET : AF_INET6, v4 ? out + 12 : out, text,
                   (socklen_t)text_size))
        snprintf(text, text_size, "?");
}

/* How many slots serve source from now.  Under mu. */
static int slots_from(const fb__peer *p, const unsigned char from[16])
{
    int n = 0;
    for (int i = 0; i < PEER_RX_SLOTS; i++)
        n += p->slot[i].fd >= 0 && !memcmp(p->slot[i].from, from, 16);
    return n;
}

/* The acceptor: each connection to an idle slot, so up to PEER_RX_SLOTS
 * senders (a node's K peers' origins) send at once; a further one waits
 * in the listen queue until a slot is free. */
static void *rx_main(void *arg)
{
    fb__peer *p = arg;
    /* Here, not in fb__peer_start: the watcher's first lines must not
     * wait for the port. */
    int lfd = listen_retry(p->port, 10000, &p->stopping);
    pthread_mutex_lock(&p->mu);
    if (lfd >= 0 && p->stopping) {
        close(lfd);
        lfd = -1;
    }
    p->lfd = lfd;
    pthread_mutex_unlock(&p->mu);
    if (lfd < 0) {
        if (!p->stopping)
            fprintf(stderr, "firebreak watch: %s: no peer copies received (port %d): "
                    "%s\n", p->node, p->port, fb_strerror(lfd));
        return NULL;
    }
    pthread_mutex_lock(&p->mu);
    for (;;) {
        rx_slot *free_slot = NULL;
        while (!p->stopping && !free_slot) {
            for (int i = 0; i < PEER_RX_SLOTS && !free_slot; i++)
                if (p->slot[i].fd < 0)
                    free_slot = &p->slot[i];
            if (!free_slot)
                pthread_cond_wait(&p->slot_cv, &p->mu);
        }
        if (p->stopping)
            break;
        pthread_mutex_unlock(&p->mu);
        struct sockaddr_storage sa = {0};
        socklen_t salen = sizeof sa;
        int c = accept4(lfd, (struct sockaddr *)&sa, &salen, SOCK_CLOEXEC), err = errno;
        pthread_mutex_lock(&p->mu);
        if (c < 0) {
            if (err == EINTR || err == ECONNABORTED)
                continue;
            break; /* shut down */
        }
        if (p->stopping) {
            close(c);
            break;
        }
        unsigned char from[16];
        char text[INET6_ADDRSTRLEN];
        source_of(&sa, from, text, sizeof text);
        if (slots_from(p, from) >= PEER_RX_PER_SOURCE) {
            static fb__repl_log_limit busy_log;
            close(c);
            fb__repl_log(&busy_log, "firebreak watch: %s: peer connection from %s "
                         "closed: %d of its connections are served already\n", p->node,
                         text, PEER_RX_PER_SOURCE);
            continue;
        }
        memcpy(free_slot->from, from, 16);
        if (!free_slot->up) {
            free_slot->p = p;
            free_slot->i = (int)(free_slot - p->slot);
            if (pthread_create(&free_slot->th, NULL, slot_main, free_slot)) {
                fprintf(stderr, "firebreak watch: %s: no thread for a peer's "
                        "connection\n", p->node);
                close(c);
                continue;
            }
            free_slot->up = 1;
        }
        free_slot->fd = c;
        pthread_cond_broadcast(&p->slot_cv);
    }
    p->rx_done = 1; /* the acceptor is gone: so are the slots */
    pthread_cond_broadcast(&p->slot_cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < PEER_RX_SLOTS; i++)
        if (p->slot[i].up)
            pthread_join(p->slot[i].th, NULL);
    return NULL;
}

static int scrub_stop(void *arg)
{
    return ((fb__peer *)arg)->stopping;
}

static void peer_free(fb__peer *p)
{
    pthread_mutex_destroy(&p->mu);
    pthread_mutex_destroy(&p->cap_mu);
    pthread_cond_destroy(&p->cv);
    sem_destroy(&p->scrub_due);
    sem_destroy(&p->held_due);
    pthread_cond_destroy(&p->slot_cv);
    free(p);
}

/* Let go of p: the last of the scrub and fb__peer_stop frees it. */
static void peer_release(fb__peer *p)
{
    if (atomic_fetch_sub(&p->refs, 1) == 1)
        peer_free(p);
}

/* The scrub (fb__repl_scrub): what the receiver took in is verified here,
 * at idle priority, so it takes only a CPU nothing else wants (training's
 * own threads, the sender of the node's own steps and the receiver go
 * first); then the node says what it holds.  Also once at the start, for
 * what a watcher before this one received and did not verify. */
static void *scrub_main(void *arg)
{
    fb__peer *p = arg;
    struct sched_param sp = {0};
    (void)pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp);
    for (;;) {
        while (sem_wait(&p->scrub_due) && errno == EINTR)
            ;
        while (!sem_trywait(&p->scrub_due)) /* one pass for every wake-up */
            ;
        if (p->stopping)
            break;
#ifdef FB_TEST_HOOKS
        /* test hook: the scrub starved of CPU (a node busy training): not
         * run at all meanwhile, so it sees no stop either */
        const char *starve = getenv("FIREBREAK_TEST_PEER_SCRUB_STALL_MS");
        if (starve && atoi(starve) > 0)
            usleep((useconds_t)atoi(starve) * 1000u);
        if (p->stopping)
            break;
#endif
        fb__repl_scrub_stats st = {0};
        fb__repl_cap cap = cap_of(p);
        (void)fb__repl_scrub(p->peer_dir, scrub_stop, p, p->cap ? &cap : NULL, &st);
        if (st.committed && !p->stopping)
            sem_post(&p->held_due);
    }
    peer_release(p); /* nothing of p touched after this */
    return NULL;
}

/* The teller: at normal priority, what the scrub committed is said. */
static void *teller_main(void *arg)
{
    fb__peer *p = arg;
    for (;;) {
        while (sem_wait(&p->held_due) && errno == EINTR)
            ;
        while (!sem_trywait(&p->held_due))
            ;
        if (p->stopping)
            break;
        held(p);
    }
    return NULL;
}

/* The node's newest step, sent by lane 1, may be dropped by the
 * supervisor (`fbw1 drop`) before or while it goes: expected, not an
 * error.  Only that case: the step's directory is gone from node memory. */
static int dropped_meanwhile(const fb__peer *p, int lane, int64_t step, int rc)
{
    char dir[PATH_MAX];
    return lane == 1 && rc == -ENOENT &&
           !fb__ckpt_step_path(dir, sizeof dir, p->mem_dir, (uint64_t)step) &&
           access(dir, F_OK) && errno == ENOENT;
}

/* Send `step` to t's peer.  0, or an error (said, unless stopping or
 * dropped meanwhile). */
static int send_to(tx *t, int64_t step)
{
    fb__peer *p = t->p;
    const char *to = p->to[t->peer];
    char why[1024] = "";
#ifdef FB_TEST_HOOKS
    /* test hook: a slow link (tests/slurm/peerlag.sh): each copy starts
     * this long after its step was taken */
    const char *lag = getenv("FIREBREAK_TEST_PEER_SEND_DELAY_MS");
    for (int ms = lag ? atoi(lag) : 0; ms > 0 && !p->stopping; ms -= 10)
        usleep(10000);
#endif
    int fd = connect_retry(to, p->port, 10000, &p->stopping), rc = fd;
    if (fd >= 0) {
        pthread_mutex_lock(&p->mu);
        t->fd = fd;
        if (p->stopping)
            shutdown(fd, SHUT_RDWR); /* fb__peer_stop came first: not held */
        pthread_mutex_unlock(&p->mu);
        rc = fb__repl_send_step_within(fd, p->mem_dir, (uint64_t)step, p->rank0,
                                       p->nranks, stall_ms(), why, sizeof why);
        pthread_mutex_lock(&p->mu);
        t->fd = -1;
        pthread_mutex_unlock(&p->mu);
        close(fd);
    } else {
        snprintf(why, sizeof why, "connecting to %s port %d: %s", to, p->port,
                 fb_strerror(fd));
    }
    if (rc && !p->stopping) {
        if (fd >= 0 && stalled(rc))
            fprintf(stderr, "firebreak watch: peer copy of step %lld to %s: the peer "
                    "stalled, no byte moved for %g s: copy given up (%s)\n",
                    (long long)step, to, stall_ms() / 1000.0, why);
        else if (!dropped_meanwhile(p, t->lane, step, rc))
            fprintf(stderr, "firebreak watch: peer copy of step %lld to %s: %s\n",
                    (long long)step, to, why);
        else if (!p->quiet_gone)
            fprintf(stderr, "firebreak watch: debug: peer copy of step %lld to %s: "
                    "not sent, dropped meanwhile (%s)\n", (long long)step, to, why);
    }
    return rc;
}

/* Whether `step` went whole to peer i.  Under mu. */
static int was_sent(const fb__peer *p, int i, int64_t step)
{
    for (int j = 0; j < PEER_SENT_KEPT; j++)
        if (p->sent[i][j] == step)
            return 1;
    return 0;
}

/* A sender: each step taken goes to its peer.  The other lane's sender
 * to the same peer may be sending that step already (named while it was
 * the newest): it waits for that one to end, and sends the step only if
 * it did not get there whole, so a peer never receives one step from two
 * connections at once, and a failed copy is still sent by the other lane. */
static void *tx_main(void *arg)
{
    tx *t = arg;
    fb__peer *p = t->p;
    const tx *other = &p->tx[1 - t->lane][t->peer];
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stopping && t->pending < 0)
            pthread_cond_wait(&p->cv, &p->mu);
        if (p->stopping)
            break;
        int64_t step = t->pending;
        t->pending = -1;
        while (!p->stopping && other->busy == step)
            pthread_cond_wait(&p->cv, &p->mu);
        if (p->stopping)
            break;
        if (t->pending >= 0 || was_sent(p, t->peer, step))
            continue; /* a newer one came meanwhile, or it is there */
        t->busy = step;
        pthread_mutex_unlock(&p->mu);
        int rc = send_to(t, step);
        pthread_mutex_lock(&p->mu);
        t->busy = -1;
        if (!rc && !p->stopping)
            p->sent[t->peer][p->nsent[t->peer]++ % PEER_SENT_KEPT] = step;
        pthread_cond_broadcast(&p->cv); /* the other lane may wait on busy */
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

int fb__peer_start(fb__peer **out, const fb__peer_opts *o)
{
    *out = NULL;
    fb__peer *p = calloc(1, sizeof *p);
    if (!p)
        return -ENOMEM;
    atomic_init(&p->refs, 1); /* fb__peer_stop's */
    pthread_mutex_init(&p->mu, NULL);
    pthread_mutex_init(&p->cap_mu, NULL);
    p->cap = node_cap();
    pthread_cond_init(&p->cv, NULL);
    pthread_cond_init(&p->slot_cv, NULL);
    sem_init(&p->scrub_due, 0, 1); /* a first pass, for what came before */
    sem_init(&p->held_due, 0, 0);
    p->lfd = -1;
    for (int i = 0; i < PEER_RX_SLOTS; i++)
        p->slot[i].fd = -1;
    p->offered[0] = p->offered[1] = -1;
    for (int l = 0; l < 2; l++)
        for (int i = 0; i < FB__PEER_COPIES_MAX; i++)
            p->tx[l][i] = (tx){.p = p, .lane = l, .peer = i, .pending = -1, .busy = -1,
                               .fd = -1};
    for (int i = 0; i < FB__PEER_COPIES_MAX; i++)
        for (int j = 0; j < PEER_SENT_KEPT; j++)
            p->sent[i][j] = -1;
    p->quiet_gone = !fb__getenv("FIREBREAK_WATCH_DEBUG");
    p->port = o->port;
    p->world = o->world;
    p->rank0 = o->rank0;
    p->nranks = o->nranks;
    p->out = o->out;
    p->emit = o->emit;
    snprintf(p->node, sizeof p->node, "%s", o->node);
    int rc = 0;
    if (o->to && (p->nto = fb__fbw1_peers_split(o->to, p->to)) < 0) {
        p->nto = 0;
        rc = -EINVAL;
        goto fail;
    }
    if (fb__fmt(p->mem_dir, sizeof p->mem_dir, "%s", o->mem_dir) ||
        fb__peer_dir_path(p->peer_dir, sizeof p->peer_dir, o->mem_dir)) {
        rc = -ENAMETOOLONG;
        goto fail;
    }
    if (mkdir(p->peer_dir, 0700) && errno != EEXIST) {
        rc = -errno;
        goto fail;
    }
    if (pthread_create(&p->teller, NULL, teller_main, p)) {
        rc = -EAGAIN;
        goto fail;
    }
    p->teller_up = 1;
    atomic_store(&p->refs, 2); /* the scrub's and ours */
    if (pthread_create(&p->scrub, NULL, scrub_main, p)) {
        atomic_store(&p->refs, 1);
        rc = -EAGAIN;
        goto fail;
    }
    p->scrub_up = 1;
    if (pthread_create(&p->rx, NULL, rx_main, p)) {
        rc = -EAGAIN;
        goto fail;
    }
    p->rx_up = 1;
    /* A sender per lane and peer; one that cannot start sends nothing
     * (that peer still gets the other lane's steps). */
    for (int l = 0; l < 2; l++)
        for (int i = 0; i < p->nto; i++)
            if (!pthread_create(&p->tx[l][i].th, NULL, tx_main, &p->tx[l][i]))
                p->tx[l][i].up = 1;
    *out = p;
    return 0;
fail:
    fb__peer_stop(p);
    return rc;
}

void fb__peer_offer(fb__peer *p, int64_t step, int named)
{
    int lane = named ? 0 : 1;
    if (!p || step <= p->offered[lane])
        return;
    pthread_mutex_lock(&p->mu);
    p->offered[lane] = step;
    /* Also when the other lane has it pending to that peer: whichever
     * begins first sends it, the other then finds it sent (tx_main). */
    for (int i = 0; i < p->nto; i++)
        if (p->tx[lane][i].up && !was_sent(p, i, step))
            p->tx[lane][i].pending = step; /* a newer one replaces one not begun */
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

/* How long a stop waits for the scrub.  At idle priority, on a node whose
 * CPUs are busy (training, or the CI's tests on 2 CPUs), the scrub may not
 * run for seconds (1-6 s measured here beside 2-8 busy processes), and it
 * cannot see the stop until it runs.  A watcher stopped by Slurm must
 * remove the node's memory within KillWait of the SIGTERM (2 s on the test
 * cluster): waiting for the scrub lost that race (slurm_peer case 6,
 * 2026-12-05).  So it is raised back to normal priority where allowed (root,
 * or RLIMIT_NICE), waited for this long, and otherwise left to end by
 * itself: it touches nothing once it sees the stop, and frees p
 * (peer_release) if it is the last. */
#define SCRUB_JOIN_MS 200

static int scrub_joined(fb__peer *p)
{
    struct sched_param sp = {0};
    (void)pthread_setschedparam(p->scrub, SCHED_OTHER, &sp);
    struct timespec ts = fb__wall_after_ms(SCRUB_JOIN_MS);
    if (pthread_timedjoin_np(p->scrub, NULL, &ts) == 0)
        return 1;
    pthread_detach(p->scrub);
    return 0;
}

void fb__peer_stop(fb__peer *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stopping = 1;
    if (p->lfd >= 0)
        shutdown(p->lfd, SHUT_RDWR); /* wakes accept */
    for (int i = 0; i < PEER_RX_SLOTS; i++)
        if (p->slot[i].fd >= 0)
            shutdown(p->slot[i].fd, SHUT_RDWR);
    for (int l = 0; l < 2; l++)
        for (int i = 0; i < p->nto; i++)
            if (p->tx[l][i].fd >= 0)
                shutdown(p->tx[l][i].fd, SHUT_RDWR);
    pthread_cond_broadcast(&p->cv);
    pthread_cond_broadcast(&p->slot_cv);
    pthread_mutex_unlock(&p->mu);
    sem_post(&p->scrub_due);
    sem_post(&p->held_due);
    if (p->rx_up)
        pthread_join(p->rx, NULL);
    for (int l = 0; l < 2; l++)
        for (int i = 0; i < p->nto; i++)
            if (p->tx[l][i].up)
                pthread_join(p->tx[l][i].th, NULL);
    if (p->teller_up)
        pthread_join(p->teller, NULL);
    if (p->lfd >= 0)
        close(p->lfd);
    p->lfd = -1;
    if (p->scrub_up && !scrub_joined(p))
        fprintf(stderr, "firebreak watch: %s: the scrub (idle priority) got no CPU "
                "within %d ms of the stop: not waited for\n", p->node, SCRUB_JOIN_MS);
    peer_release(p);
}

/* ---- `firebreak watch --mem-fetch` ---- */

typedef struct fetch_entry {
    int rank;
    char src[FB__FBW1_NODE_MAX], dst[FB__FBW1_NODE_MAX], addr[FB__FBW1_NODE_MAX];
    int peer;               /* the source's copy is in its peer directory */
} fetch_entry;

/* One entry, RANK:SRC:m|p:DST:DSTADDR; 0 or -EINVAL. */
static int parse_entry(char *e, int world, fetch_entry *f)
{
    char *field[5];
    int n = 0;
    for (char *tok = e; n < 5; n++) {
        field[n] = tok;
        char *c = strchr(tok, ':');
        if (!c) {
            n++;
            break;
        }
        *c = '\0';
        tok = c + 1;
    }
    long long r;
    if (n != 5 || fb__parse_int(field[0], 0, world - 1, &r) ||
        !fb__fbw1_node_name_ok(field[1]) || strlen(field[2]) != 1 ||
        (field[2][0] != 'm' && field[2][0] != 'p') || !fb__fbw1_node_name_ok(field[3]) ||
        !fb__fbw1_node_name_ok(field[4]) || !strcmp(field[1], field[3]))
        return -EINVAL;
    f->rank = (int)r;
    snprintf(f->src, sizeof f->src, "%s", field[1]);
    f->peer = field[2][0] == 'p';
    snprintf(f->dst, sizeof f->dst, "%s", field[3]);
    snprintf(f->addr, sizeof f->addr, "%s", field[4]);
    return 0;
}

static int parse_plan(const char *plan, int world, fetch_entry **out, int *count)
{
    size_t len = strlen(plan);
    *out = NULL;
    *count = 0;
    if (len > FB__PEER_PLAN_MAX)
        return -E2BIG;
    char *copy = strdup(plan);
    fetch_entry *v = calloc(len / 2 + 1, sizeof *v);
    int n = 0, rc = 0;
    if (!copy || !v) {
        rc = -ENOMEM;
        goto out;
    }
    char *save = NULL;
    for (char *e = strtok_r(copy, ",", &save); e; e = strtok_r(NULL, ",", &save))
        if ((rc = parse_entry(e, world, &v[n++])))
            goto out;
    if (!n)
        rc = -EINVAL;
out:
    free(copy);
    if (rc) {
        free(v);
        return rc;
    }
    *out = v;
    *count = n;
    return 0;
}

typedef struct fetch_rx {
    const char *peer_dir;
    int lfd, world;
    const fetch_entry *v;
    int n;
    const char *me;
    long long step;
    uint64_t deadline_ns;
    int missing;            /* out */
} fetch_rx;

static int count_missing(const fetch_rx *x)
{
    int missing = 0;
    for (int i = 0; i < x->n; i++) {
        char path[PATH_MAX];
        if (strcmp(x->v[i].dst, x->me))
            continue;
        if (fb__ckpt_shard_path(path, sizeof path, x->peer_dir, (uint64_t)x->step,
                                x->v[i].rank) ||
            access(path, F_OK))
            missing++;
    }
    return missing;
}

static void *fetch_rx_main(void *arg)
{
    fetch_rx *x = arg;
    uint64_t max = shard_max_bytes();
    uint64_t now;
    fb__repl_rx_deadline(x->deadline_ns); /* --timeout bounds each receive */
    while ((x->missing = count_missing(x)) > 0 && (now = fb__now_ns()) < x->deadline_ns) {
        struct pollfd pfd = {.fd = x->lfd, .events = POLLIN};
        /* From the one reading of the clock: a second one past the
         * deadline made this negative, and poll waited for ever. */
        uint64_t left_ms = (x->deadline_ns - now) / 1000000ull;
        if (poll(&pfd, 1, left_ms > 200 ? 200 : (int)left_ms) <= 0)
            continue;
        int c = accept4(x->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0)
            continue;
        io_timeout(c);
        fb__repl_stats st = {0};
        char why[1024] = "";
        static fb__repl_log_limit fetch_log; /* a line per connection */
        if (fb__repl_serve(c, x->peer_dir, max, &st, why, sizeof why))
            fb__repl_log(&fetch_log, "firebreak watch: fetching into %s: %s\n",
                         x->peer_dir, why);
        close(c);
    }
    return NULL;
}

/* Send every shard the plan has this node send, grouped by destination. */
static int fetch_send(const fetch_entry *v, int n, const char *me, const char *mem_dir,
                      long long step, int port, uint64_t deadline_ns)
{
    int failed = 0;
    char *done = calloc((size_t)n + 1, 1), peer_dir[PATH_MAX];
    if (!done || fb__peer_dir_path(peer_dir, sizeof peer_dir, mem_dir)) {
        free(done);
        return 1;
    }
    for (int i = 0; i < n; i++) {
        if (done[i] || strcmp(v[i].src, me))
            continue;
        uint64_t now = fb__now_ns();
        int left_ms = now < deadline_ns ? (int)((deadline_ns - now) / 1000000ull) : 0;
        int fd = connect_retry(v[i].addr, port, left_ms, NULL);
        for (int j = i; j < n; j++) {
            if (done[j] || strcmp(v[j].src, me) || strcmp(v[j].dst, v[i].dst))
                continue;
            done[j] = 1;
            char why[1024] = "";
            int rc = fd < 0 ? fd
                   : fb__repl_send_step_within(fd, v[j].peer ? peer_dir : mem_dir,
                                               (uint64_t)step, v[j].rank, 1, stall_ms(),
                                               why, sizeof why);
            if (rc) {
                fprintf(stderr, "firebreak watch: rank %d's shard of step %lld to %s: "
                        "%s\n", v[j].rank, step, v[j].dst, fd < 0 ? fb_strerror(fd) : why);
                failed = 1;
            }
        }
        if (fd >= 0)
            close(fd);
    }
    free(done);
    return failed;
}

int fb__peer_fetch_here(const char *job, const char *node, int port, int world,
                        long long step, const char *plan, int timeout_ms, FILE *err)
{
    char mem_dir[PATH_MAX], peer_dir[PATH_MAX];
    if (!fb__job_id_ok(job) ||
        fb__ckpt_mem_dir_path(mem_dir, sizeof mem_dir, job) ||
        fb__peer_dir_path(peer_dir, sizeof peer_dir, mem_dir)) {
        fprintf(err, "firebreak watch: --job: not a job id: %s\n", job);
        return 2;
    }
    fetch_entry *v = NULL;
    int n = 0, rc = parse_plan(plan, world, &v, &n);
    if (rc) {
        fprintf(err, "firebreak watch: --plan: %s (RANK:SRC:m|p:DST:ADDR,...; "
                "see docs/slurm.md)\n", fb_strerror(rc));
        return 2;
    }
    uint64_t deadline = fb__now_ns() + (uint64_t)timeout_ms * 1000000ull;
    fetch_rx x = {.peer_dir = peer_dir, .lfd = -1, .world = world, .v = v, .n = n,
                  .me = node, .step = step, .deadline_ns = deadline};
    pthread_t th;
    int rx = 0, failed = 0;
    if (count_missing(&x) > 0) {
        if ((mkdir(mem_dir, 0700) && errno != EEXIST) ||
            (mkdir(peer_dir, 0700) && errno != EEXIST) ||
            (x.lfd = listen_retry(port, 5000, NULL)) < 0) {
            fprintf(err, "firebreak watch: %s: cannot receive on port %d: %s\n", node,
                    port, x.lfd < 0 ? fb_strerror(x.lfd) : strerror(errno));
            failed = 1;
        } else if (!pthread_create(&th, NULL, fetch_rx_main, &x)) {
            rx = 1;
        } else {
            failed = 1;
        }
    }
    failed |= fetch_send(v, n, node, mem_dir, step, port, deadline);
    if (rx) {
        pthread_join(th, NULL);
        if (x.missing) {
            fprintf(err, "firebreak watch: %s: %d shard(s) of step %lld not received\n",
                    node, x.missing, step);
            failed = 1;
        }
    }
    if (x.lfd >= 0)
        close(x.lfd);
    free(v);
    return failed;
}
