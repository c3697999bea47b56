/*
 * replicate.h -- copying a step's node-memory shards to a peer node's
 * memory over TCP (docs/checkpoint.md, "Tiers": the peer tier).
 *
 * Protocol fbr1, one TCP connection from the sender to the receiver.
 * Each batch of shards (fb__repl_send_step) begins with the run's key,
 * 36 bytes, which the receiver checks before it takes any shard:
 *
 *   offset 0  "FBK1"                       magic
 *          4  32 bytes                     the key (fb__repl_set_key)
 *
 * A key that is not the receiver's, or a shard before any key, is
 * answered -EACCES and ends the connection: a watcher takes copies only
 * from its own run's watchers (another job's on the same port, or anyone
 * else on the network, cannot plant a step its supervisor would restore).
 * The key goes in the clear: it keeps out whoever cannot read the
 * traffic, not whoever can.  Then for each shard the sender writes a
 * 24-byte header and the shard file:
 *
 *   offset 0  "FBR1"                       magic
 *          4  u32 rank       (LE)          0 .. 99999
 *          8  u64 step       (LE)          0 .. 9999999999
 *         16  u64 bytes      (LE)          8 .. the receiver's limit
 *         24  the shard, `bytes` bytes, as committed in the sender's tier
 *
 * The receiver writes it under a temporary name in its directory, checks
 * its header and recorded place (step, rank), and answers each shard with
 * a 4-byte LE status (0, or the negative error: FB_ECORRUPT for a shard
 * that failed its hashes, FB_EFORMAT for a header that is not valid,
 * -ENOSPC for one refused under the receiver's cap, fb__repl_pool_cap).
 * Its hashes are checked either on arrival, before the answer (the
 * default), or later, off the transfer's path (FB__REPL_DEFER_VERIFY):
 * the shard then waits under a hidden name, .rank-R.arrived in its step's
 * directory, until fb__repl_scrub checks every hash.  Either way a shard
 * is renamed to its committed name only once every hash matched, so a
 * step in the peer's tier is complete only when every shard arrived whole
 * and verified, by the same rule as every tier (store.h).
 */
#ifndef FB_CKPT_REPLICATE_H
#define FB_CKPT_REPLICATE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define FB__REPL_HEADER_BYTES 24
#define FB__REPL_KEY_BYTES 32
#define FB__REPL_KEY_MSG_BYTES (4 + FB__REPL_KEY_BYTES)

/* The run's key, which this process's senders send and its receivers
 * require; all zeros until set (watchers started by hand, the tests).
 * The supervisor makes one per run and gives it to its watchers in the
 * environment (FIREBREAK_PEER_KEY, 64 hex digits): fb__repl_key_from_env
 * takes it from there and removes it; 0, or -EINVAL for a value that is
 * not 64 hex digits (nothing set). */
void fb__repl_set_key(const unsigned char key[FB__REPL_KEY_BYTES]);
int fb__repl_key_from_env(void);
/* A new random key as 64 hex digits and a NUL into hex; 0 or -errno. */
int fb__repl_key_new_hex(char hex[2 * FB__REPL_KEY_BYTES + 1]);
#define FB__REPL_MAX_STEP 9999999999ull

typedef struct fb__repl_header {
    uint32_t rank;
    uint64_t step;
    uint64_t bytes;
} fb__repl_header;

/* Encode / decode a header.  Decoding is the parser of outside input
 * (fuzz/ckpt_repl.c): 0, or FB_EFORMAT with why naming the field. */
void fb__repl_header_encode(const fb__repl_header *h,
                            unsigned char out[FB__REPL_HEADER_BYTES]);
int fb__repl_header_decode(const unsigned char *buf, size_t len,
                           uint64_t max_bytes, fb__repl_header *h, char *why,
                           size_t why_size);

typedef struct fb__repl_stats {
    uint64_t shards, bytes;     /* committed, or (deferred) arrived    */
    uint64_t rejected;          /* failed verification (not committed) */
    uint64_t refused;           /* no room under the pool's cap        */
} fb__repl_stats;

/*
 * The receiver's deadlines (fb__repl_serve, fb__repl_serve_pool): a
 * shard's header must be in within 5 s of the receiver waiting for it
 * (after the connection began, or the previous shard's answer), and the
 * shard within 5 s plus 1 s per 16 MiB of it after its header, else the
 * connection is given up with -ETIMEDOUT (why saying which): a sender
 * that trickles a byte now and then, never stalled long enough for the
 * socket's receive timeout (SO_RCVTIMEO, which also still applies), no
 * longer holds the receiver.  fb__repl_rx_deadline(t) ends this thread's
 * later receives by t too (fb__now_ns's clock; 0: none, the default).
 */
void fb__repl_rx_deadline(uint64_t deadline_ns);

/*
 * Lines said per connection or per shard from the network (a refusal, a
 * rejection, a connection given up) are rate limited: a peer can open
 * tens of thousands of connections a second, and the watcher's stderr is
 * a file on the run directory's file system.  Each limiter (one per kind
 * of line, zero-initialized, static) lets FB__REPL_LOG_BURST lines through
 * per FB__REPL_LOG_WINDOW_NS; the rest are counted, and the count is said
 * before the first line of a later window.  Lock-free (atomics, and each
 * line one write(2), not stdio's locked stream): the idle-priority scrub
 * says its drops through one and must take no lock.
 */
#define FB__REPL_LOG_BURST 10
#define FB__REPL_LOG_WINDOW_NS 60000000000ull

typedef struct fb__repl_log_limit {
    _Atomic uint64_t window_ns;     /* when the window began */
    _Atomic unsigned said, dropped; /* in the window */
} fb__repl_log_limit;

/* Whether a line at now_ns may be said under l; *dropped_before (if the
 * line begins a window) the count of lines the window before left out,
 * else 0.  The policy, without I/O. */
int fb__repl_log_allow(fb__repl_log_limit *l, uint64_t now_ns, unsigned *dropped_before);

/* fprintf(stderr, fmt, ...) under l (a line, its newline included),
 * preceded by "firebreak: N more lines like the next left out in the last
 * minute" when the window before left some out. */
void fb__repl_log(fb__repl_log_limit *l, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* fb__repl_serve_pool's flags. */
#define FB__REPL_DEFER_VERIFY 1u /* hashes checked by fb__repl_scrub */

/*
 * Receive shards on connected socket fd into checkpoint directory dir
 * until the sender closes the connection.  Shards over max_bytes end the
 * connection.  A shard that fails verification, or is refused for want of
 * room (fb__repl_pool_cap), is answered with its error and left out; the
 * connection goes on.  0 at a clean end (EOF between
 * shards), or an error (why filled).
 */
int fb__repl_serve(int fd, const char *dir, uint64_t max_bytes,
                   fb__repl_stats *st, char *why, size_t why_size);

/*
 * The receive pool: tmpfs files in the receiver's directory whose pages
 * are already allocated and mapped, so that a shard received into one
 * costs the socket's copy and its hashing, not the allocation of its
 * pages (without a pool each shard's pages are allocated as its bytes are
 * written to a new file: 0.6 ms per MiB here, the socket's copy
 * included, against 0.1 ms into a pool's file).  Files come from steps the tier
 * evicts (fb__repl_pool_recycle: their pages are reused) and from
 * fb__repl_pool_refill, which allocates them ahead, when the receiver is
 * idle, as many and as large as the shards of the newest step received
 * (only those that arrived whole with a valid header, and verified unless
 * deferred; at most 128: a header alone allocates nothing).  A shard is
 * received into the pool's smallest file as large (cut down to its size)
 * and renamed from there to its committed name, so nothing shows in the
 * step's directory before it verified; no pool file is grown for a
 * shard, whose bytes have not come yet: a shard larger than every file
 * goes to a new file, its pages allocated as its bytes arrive.  The pool
 * lives in <dir>/.fbr1-pool.<pid>/ and holds at most the newest step's
 * shard count plus 4 files, a file of a shard that failed included.  Its files are tmpfs memory beside the tier's steps:
 * recycling only moves an evicted step's pages, a refill adds about one
 * step; fb__repl_pool_cap holds them, and the shards received, within the
 * node's cap, exactly, however many pools receive at once.  One thread at
 * a time; not shared between processes.
 */
typedef struct fb__repl_pool fb__repl_pool;

/* An empty pool for checkpoint directory dir.  0, or -errno (why filled). */
int fb__repl_pool_open(fb__repl_pool **pool, const char *dir, char *why,
                       size_t why_size);
/* Unmap and remove every file the pool holds, and its directory. */
void fb__repl_pool_close(fb__repl_pool *pool);

/* fb__repl_serve, taking each shard's file from pool when it has one
 * (NULL: no pool, as fb__repl_serve).  flags: FB__REPL_DEFER_VERIFY
 * leaves each shard that arrived whole, with a valid header, as
 * .rank-R.arrived for fb__repl_scrub and answers 0; its hashes are not
 * read here. */
int fb__repl_serve_pool(int fd, const char *dir, uint64_t max_bytes,
                        fb__repl_pool *pool, unsigned flags, fb__repl_stats *st,
                        char *why, size_t why_size);

typedef struct fb__repl_scrub_stats {
    uint64_t committed, bytes;  /* verified and committed              */
    uint64_t dropped;           /* failed verification: removed        */
} fb__repl_scrub_stats;

/*
 * Verify every shard that waits in dir's step directories after a
 * deferred receive (FB__REPL_DEFER_VERIFY): its recorded place, metadata
 * and every hash, as a restore reads it (shard.h).  One that passes is
 * renamed to its committed name; one that fails is removed and said on
 * stderr (`replica of step S rank R dropped by the scrub: ...`), so a
 * corrupted copy never commits.  A shard is claimed first (renamed to
 * .rank-R.scrub), so one that arrives again meanwhile is not taken for
 * the one verified.  stop (may be NULL) is asked every 8 MiB: non-zero
 * leaves the shard claimed, for the next scrub, and returns -ECANCELED.
 * 0 otherwise; st (may be NULL) counts.  Runs beside the receiver; one
 * scrub at a time per directory.  cap (may be NULL): its moving is called
 * around each rename (fb__repl_cap).
 */
struct fb__repl_cap;
int fb__repl_scrub(const char *dir, int (*stop)(void *), void *stop_arg,
                   const struct fb__repl_cap *cap,
                   fb__repl_scrub_stats *st);

/* Evict step from dir into the pool: the step leaves the directory at once
 * and whole (one rename), then its shard files join the pool up to its
 * bound (the rest are removed).  How many joined, or -errno. */
int fb__repl_pool_recycle(fb__repl_pool *pool, const char *dir, uint64_t step,
                          char *why, size_t why_size);

/* Allocate files until the pool holds as many as the newest step received
 * had shards, each as large as one of them (none before a step arrived).
 * How many were made, or -errno.  Takes 0.5-0.7 ms per MiB here: call it
 * between steps, not while a sender waits. */
int fb__repl_pool_refill(fb__repl_pool *pool, char *why, size_t why_size);

/*
 * Hold what the node keeps for the run to its cap (--memory-ckpt-max).
 * The node's receiver may serve several senders at once, a pool each, so
 * the cap is kept by the caller, shared by its pools, as a reservation:
 * before a pool adds memory (a shard with no pool file as large, a
 * refill's file) it asks reserve(ctx, bytes, room) for the growth, in
 * whole pages; reserve grants it (1) only when the bytes the node holds
 * now, plus those reserved and not yet allocated, plus these, fit in the
 * cap, in one step against every other pool's reservation, and fills
 * room either way (for the refusal's message).  Once the file is
 * allocated (then the node's own count holds it) or its allocation
 * failed, the pool calls release(ctx, bytes).  A shard that is refused
 * has its bytes read and dropped, is answered -ENOSPC, and the
 * connection goes on; refill allocates only what is granted.  Both
 * functions are called from the pool's thread, so from every pool's
 * thread at once: they lock.  moving (may be NULL) is called with done 0
 * just before, and done 1 just after, a file the node holds is renamed
 * (a shard from its pool file into its step; the scrub's claims and
 * commits), with the bytes it holds: a walk of the node's directories
 * that meets a rename midway may miss the file (met in neither place), so
 * the caller counts the bytes of the files in flight as held, or walks
 * again once they landed.
 */
typedef struct fb__repl_room {
    uint64_t cap, held, reserved;  /* what a reservation was checked against */
} fb__repl_room;

typedef struct fb__repl_cap {
    int (*reserve)(void *ctx, uint64_t bytes, fb__repl_room *room);
    void (*release)(void *ctx, uint64_t bytes);
    void (*moving)(void *ctx, uint64_t bytes, int done);
    void *ctx;
} fb__repl_cap;

/* Put pool under cap (copied; NULL or reserve NULL: no cap, the default). */
void fb__repl_pool_cap(fb__repl_pool *pool, const fb__repl_cap *cap);

/* Call fn(ctx) after each shard a deferred receive (FB__REPL_DEFER_VERIFY)
 * through this pool left for the scrub, on the receiving thread, before
 * it answers the sender: so a scrub can start on it while the next one
 * arrives.  fn NULL: none (the default). */
void fb__repl_pool_on_arrival(fb__repl_pool *pool, void (*fn)(void *ctx), void *ctx);

/* Files in the pool; *bytes (may be NULL) their total size. */
size_t fb__repl_pool_files(const fb__repl_pool *pool, uint64_t *bytes);

/*
 * Send the committed shards of `step`, ranks [rank0, rank0 + nranks), from
 * dir over fd, then wait for every answer.  0 when the peer committed all
 * of them; else the first error (a peer's answer, or the connection's),
 * why naming the rank.
 */
int fb__repl_send_step(int fd, const char *dir, uint64_t step, int rank0,
                       int nranks, char *why, size_t why_size);

/*
 * fb__repl_send_step under a stall rule: the send fails with -ETIMEDOUT
 * (why saying "no byte moved for N ms") once no byte moved on fd for
 * stall_ms: none taken by the socket while sending, none read while
 * waiting for the answers.  A live receiver takes bytes every few ms; one
 * that stopped reading (hung, SIGSTOPped: its kernel still takes the
 * connection) fills the socket's buffers and then takes none.  While a
 * shard goes the limit is longer by 1 ms a MiB of it (a margin: a
 * receiver of a version before grew a pool file before it read, 0.8-0.9
 * ms a MiB).  fd is made non-blocking for the call and restored after.
 * stall_ms 0: as fb__repl_send_step (the socket's own timeouts apply).
 */
int fb__repl_send_step_within(int fd, const char *dir, uint64_t step, int rank0,
                              int nranks, int stall_ms, char *why, size_t why_size);

/*
 * Where the time of a transfer goes, stage by stage (bench_repl --stages,
 * docs/checkpoint.md): off unless a thread asks.  fb__repl_times_record(t)
 * makes this thread's later fb__repl_send_step and fb__repl_serve_pool
 * calls add each stage's wall time to t (NULL: stop; the default, then
 * no clock is read).  Receiver stages are per shard; the sender's last
 * one, waiting for the answers, is once per step.
 */
typedef enum fb__repl_stage {
    FB__REPL_RX_HEADER,     /* reading the 24-byte header (waits for the sender) */
    FB__REPL_RX_PREP,       /* decoding it, the step's directory, the cap       */
    FB__REPL_RX_TAKE,       /* the shard's file: from the pool, or created      */
    FB__REPL_RX_META,       /* the shard's own header read and checked          */
    FB__REPL_RX_DATA,       /* its data off the socket (and hashed, on arrival) */
    FB__REPL_RX_RENAME,     /* renamed to .arrived or its committed name        */
    FB__REPL_RX_SYNC,       /* its step directory synced                        */
    FB__REPL_RX_RELEASE,    /* its file's mapping released                      */
    FB__REPL_RX_ARRIVAL,    /* the arrival callback (the scrub's wake-up)       */
    FB__REPL_RX_ANSWER,     /* the 4-byte answer written                        */
    FB__REPL_TX_OPEN,       /* the shard file opened and sized                  */
    FB__REPL_TX_HEADER,     /* the header written                               */
    FB__REPL_TX_DATA,       /* the file sent (sendfile)                         */
    FB__REPL_TX_CLOSE,      /* the file closed                                  */
    FB__REPL_TX_ANSWERS,    /* every answer read, once a step                   */
    FB__REPL_STAGES
} fb__repl_stage;

typedef struct fb__repl_times {
    uint64_t ns[FB__REPL_STAGES];
    uint64_t rx_shards, tx_shards, tx_steps;
} fb__repl_times;

void fb__repl_times_record(fb__repl_times *t);
const char *fb__repl_stage_name(fb__repl_stage s);

#endif
