/*
 * firebreak.h -- the whole API a training program sees.
 *
 * firebreak is the reliability layer a training job runs under.  A rank
 * links libfirebreak (or is run unmodified; see README), and the supervisor
 * `firebreak run` launches it, watches it and restarts it.  This header is
 * the in-process side:
 *
 *   - attach / detach:   fb_init(), fb_finalize()
 *   - progress:          fb_step(), fb_set_phase()  (heartbeats, step times)
 *   - checkpoints:       fb_ckpt_*                  (safetensors shards)
 *   - flight recorder:   fb_fr_*                    (collective events)
 *
 * Everything a rank reports lands in a per-rank shared-memory segment that
 * the supervisor reads, and that stays readable after the rank dies, even by
 * SIGKILL.  The hot path (fb_step, fb_fr_*) is plain stores: no lock, no
 * system call.
 *
 * Conventions:
 *   - Functions that can fail return int: 0 on success, a negative FB_E*
 *     code or a negative errno value.  fb_strerror() names either.
 *   - A program run without the supervisor works: fb_init() returns 0, the
 *     library records nothing, checkpoints still work when given a directory.
 *   - Strings passed in are copied; memory the library returns is owned by
 *     the library unless a function says otherwise.
 *   - Thread safety: fb_step() and fb_fr_*() are meant for one training
 *     thread per rank.  fb_ckpt_* functions on one handle must not be called
 *     concurrently.
 */
#ifndef FIREBREAK_H
#define FIREBREAK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FB_VERSION_MAJOR 0
#define FB_VERSION_MINOR 1
#define FB_VERSION_PATCH 0
/* "0.1.0": fb_version() returns the library's; this is the header's. */
#define FB__STRINGIFY(x) #x
#define FB__VERSION_STR(a, b, c) FB__STRINGIFY(a) "." FB__STRINGIFY(b) "." FB__STRINGIFY(c)
#define FB_VERSION_STRING \
    FB__VERSION_STR(FB_VERSION_MAJOR, FB_VERSION_MINOR, FB_VERSION_PATCH)

/* ------------------------------------------------------------------------
 * Errors.  Codes are never renumbered; new ones are appended, each one
 * below the last (FB__ERRNO_BASE - its position; error.c checks it).
 * ---------------------------------------------------------------------- */

#define FB_ERRNO_MAP(X)                                                     \
    X(ENOTATTACHED, -4001, "not running under the firebreak supervisor")    \
    X(EFORMAT,      -4002, "malformed file or input")                       \
    X(EVERSION,     -4003, "unsupported format version")                    \
    X(ECORRUPT,     -4004, "data does not match its recorded hash")         \
    X(ENOCKPT,      -4005, "no complete checkpoint found")                  \
    X(EBUSY,        -4006, "a checkpoint save is already in flight")        \
    X(ETOOBIG,      -4007, "size exceeds a limit")                          \
    X(EMISMATCH,    -4008, "registered tensors do not match the checkpoint")\
    X(ESTATE,       -4009, "call not valid in the current state")           \
    X(EINJECTED,    -4010, "failure injected on purpose")                   \
    X(ENOTREG,      -4011, "not a regular file (a FIFO, device or directory)") \
    X(ENOTOURS,     -4012, "file belongs to another user or is open to others")

#define FB__ERRNO_BASE (-4001)

/* Positions in the table: FB__ERRNO_COUNT is how many codes there are. */
enum {
#define FB__ERRPOS(name, code, msg) FB__ERRPOS_##name,
    FB_ERRNO_MAP(FB__ERRPOS)
#undef FB__ERRPOS
    FB__ERRNO_COUNT
};

typedef enum {
#define FB__ERRDEF(name, code, msg) FB_##name = code,
    FB_ERRNO_MAP(FB__ERRDEF)
#undef FB__ERRDEF
    FB_ELAST_ = FB__ERRNO_BASE - FB__ERRNO_COUNT /* one past the last code */
} fb_errno;

/* A static string describing rc (an FB_E* code or a negative errno). */
const char *fb_strerror(int rc);

/* The library's version, "MAJOR.MINOR.PATCH" ("0.1.0"): compare with
 * FB_VERSION_STRING to see the header a program was built with. */
const char *fb_version(void);

/* ------------------------------------------------------------------------
 * Attaching to the run.
 * ---------------------------------------------------------------------- */

/*
 * Attach to the run the supervisor set up through the environment
 * (FIREBREAK_JOB_ID, FIREBREAK_RUN_DIR, rank from FIREBREAK_RANK, RANK,
 * OMPI_COMM_WORLD_RANK, PMI_RANK or SLURM_PROCID; see docs/environment.md).
 * Creates this rank's shared-memory segment, installs handlers that record
 * a fatal signal or an exit code in it, and arms fault injection
 * (FIREBREAK_INJECT).  Sets the phase to FB_PHASE_INIT.
 *
 * Returns 0 when attached, 0 as well when no supervisor is present (the
 * library then records nothing: fb_attached() says which), or a negative
 * code when the supervisor's environment is present but unusable (the
 * program may go on; nothing will be recorded).  Calling it twice is
 * harmless.
 */
int fb_init(void);

/*
 * Mark this rank as finished cleanly (phase FB_PHASE_DONE), flush and wait
 * for any in-flight checkpoint of handles still open, and unmap the
 * segment.  The segment itself stays for the supervisor, which removes it.
 * A process that then exits with a non-zero status failed in the phase it
 * was in before (its exit record puts that phase back): the status, not
 * the finalize, is its last word.
 * In a process forked from the rank (which shares the mapping) it does
 * nothing, and neither does the library's record of an exit or a crash
 * there: a child's end is not the rank's.
 */
void fb_finalize(void);

/* 1 if attached to a supervisor, else 0. */
int fb_attached(void);

/* This rank, the world size, and how many times the job was restarted
 * (0 for the first attempt).  Without a supervisor: from the usual launcher
 * variables, else rank 0 of 1. */
int fb_rank(void);
int fb_world_size(void);
int fb_restart_count(void);

/* The run directory (FIREBREAK_RUN_DIR), or NULL without a supervisor. */
const char *fb_run_dir(void);

/* ------------------------------------------------------------------------
 * Progress: heartbeats, step timing, phases.
 * ---------------------------------------------------------------------- */

typedef enum {
    FB_PHASE_INIT = 0,       /* start-up: before the first fb_step()     */
    FB_PHASE_TRAIN = 1,      /* training steps                           */
    FB_PHASE_CHECKPOINT = 2, /* saving a checkpoint (blocking part)      */
    FB_PHASE_RESTORE = 3,    /* restoring a checkpoint                   */
    FB_PHASE_DONE = 4        /* finished: fb_finalize() was called       */
} fb_phase;

/*
 * Step `step` has completed.  Records a heartbeat and the step's duration,
 * and switches the phase to FB_PHASE_TRAIN.  Costs a few tens of
 * nanoseconds: plain stores into shared memory, one clock read (vDSO).
 * Injected faults fire here (see docs/inject.md).  No-op when not attached,
 * except for fault injection.
 */
void fb_step(uint64_t step);

/* Set the phase explicitly; the supervisor applies a different hang
 * timeout to each.  The checkpoint and restore calls set their phases
 * themselves. */
void fb_set_phase(fb_phase phase);

/* A heartbeat without completing a step (for long start-up work). */
void fb_heartbeat(void);

/* ------------------------------------------------------------------------
 * Checkpoints.
 *
 * One shard per rank per step in the safetensors format, at
 *   <dir>/step-<NNNNNNNNNN>/rank-<RRRRR>.safetensors
 * committed atomically (temporary name, fsync, rename, fsync of the
 * directory).  A checkpoint is complete when every rank's shard is
 * committed.  See docs/checkpoint.md for the layout and metadata.
 * ---------------------------------------------------------------------- */

typedef struct fb_ckpt fb_ckpt;

/* safetensors dtypes, with their on-disk names. */
typedef enum {
    FB_DTYPE_BOOL = 0, FB_DTYPE_U8, FB_DTYPE_I8, FB_DTYPE_F8_E5M2,
    FB_DTYPE_F8_E4M3, FB_DTYPE_I16, FB_DTYPE_U16, FB_DTYPE_F16,
    FB_DTYPE_BF16, FB_DTYPE_I32, FB_DTYPE_U32, FB_DTYPE_F32, FB_DTYPE_C64,
    FB_DTYPE_F64, FB_DTYPE_I64, FB_DTYPE_U64,
    FB_DTYPE_COUNT_
} fb_dtype;

/* "F32" etc., or NULL for an invalid value. */
const char *fb_dtype_name(fb_dtype dtype);
/* Size of one element in bytes, or 0 for an invalid value. */
size_t fb_dtype_size(fb_dtype dtype);

typedef enum {
    FB_CKPT_BUSY_WAIT = 0, /* a save while one is in flight waits for it  */
    FB_CKPT_BUSY_SKIP = 1  /* ... or is skipped (logged), returns FB_EBUSY */
} fb_ckpt_busy;

typedef enum {
    FB_CKPT_ERROR_CONTINUE = 0, /* a failed save is reported; training goes on */
    FB_CKPT_ERROR_STOP = 1      /* ... and the next save/wait returns the error */
} fb_ckpt_on_error;

/* How an async save takes its in-memory snapshot of host tensors
 * (docs/checkpoint.md).  FIREBREAK_CKPT_SNAPSHOT=auto|copy|protect
 * overrides the option. */
typedef enum {
    FB_CKPT_SNAPSHOT_AUTO = 0,   /* protect where the kernel allows, else copy */
    FB_CKPT_SNAPSHOT_COPY = 1,   /* copy every tensor before save returns     */
    FB_CKPT_SNAPSHOT_PROTECT = 2 /* write-protect and copy behind; open fails
                                    where userfaultfd is not allowed          */
} fb_ckpt_snapshot;

/*
 * Options of fb_ckpt_open().  The caller allocates this struct, and later
 * versions of the library will add fields at its end, so:
 *
 *   ABI rule.  `struct_size` comes first and says how big the caller's
 *   struct is: fb_ckpt_options_init() sets it to the size the caller was
 *   compiled with.  The library reads only the fields that size covers;
 *   a field past it (added after the caller was built) reads as 0, and 0
 *   means "the default" for every field added after the first release.
 *   A caller built against a newer header may pass a bigger struct: the
 *   library accepts it when every byte it does not know is 0, and fails
 *   with -E2BIG when one is not (an option it cannot honour was asked
 *   for).  Fields are never removed, reordered or retyped.
 *
 * Always start from fb_ckpt_options_init(&opt) (or FB_CKPT_OPTIONS_INIT),
 * then set the fields wanted: fb_ckpt_open() refuses a struct_size of 0
 * (-EINVAL), which is what an options struct that was never initialised
 * usually holds.
 */
typedef struct fb_ckpt_options {
    size_t struct_size;     /* sizeof(fb_ckpt_options) as the caller saw
                               it; set by fb_ckpt_options_init()          */
    const char *dir;        /* NULL: <run_dir>/checkpoints; required when
                               not attached                               */
    int rank;               /* -1: fb_rank()                              */
    int world_size;         /* 0: fb_world_size()                         */
    int keep;               /* newest complete checkpoints to keep; 0: 2 */
    int async;              /* 1: save returns after the in-memory copy   */
    fb_ckpt_busy on_busy;
    fb_ckpt_on_error on_error;
    int io_threads;         /* 0: default (4)                             */
    fb_ckpt_snapshot snapshot;
    /* New fields go here, at the end; 0 must mean their default. */
} fb_ckpt_options;

/*
 * Fill *opt with the defaults (async on, keep 2, wait when busy, rank and
 * world size from the run) and set opt->struct_size.  A macro over
 * fb_ckpt_options_init_sized(), so that the size is the caller's.
 */
#define fb_ckpt_options_init(opt) \
    fb_ckpt_options_init_sized((opt), sizeof *(opt))
void fb_ckpt_options_init_sized(fb_ckpt_options *opt, size_t struct_size);

/* The same defaults as an initializer:
 *   fb_ckpt_options o = FB_CKPT_OPTIONS_INIT; */
#define FB_CKPT_OPTIONS_INIT                                                 \
    { sizeof(fb_ckpt_options), NULL, -1, 0, 2, 1, FB_CKPT_BUSY_WAIT,         \
      FB_CKPT_ERROR_CONTINUE, 0, FB_CKPT_SNAPSHOT_AUTO }

/* Open a checkpoint handle.  opt may be NULL for the defaults.  Creates the
 * directory when missing.  *out is set only on success.  Errors: -EINVAL
 * (an invalid option, or opt->struct_size 0 or smaller than the first
 * release's struct), -E2BIG (a newer caller set a field this library does
 * not have), -ENOMEM, -errno of creating the directory. */
int fb_ckpt_open(fb_ckpt **out, const fb_ckpt_options *opt);

/*
 * Register a tensor to be saved and restored.  `name` is copied; `data`
 * must stay valid and mapped until fb_ckpt_close().  With a copy snapshot
 * its contents must be stable during fb_ckpt_save; with write protection
 * the program may write it as soon as save returns (a write to a page not
 * yet copied waits for that page's copy).  ndim may be 0 (a scalar);
 * shape entries >= 0.
 * fb_ckpt_register_slice() describes a sharded tensor: this rank holds the
 * slice `shape` at `global_offset` of a tensor of `global_shape` (both of
 * ndim entries, recorded in the shard; each dimension must satisfy
 * 0 <= global_offset[d] and global_offset[d] + shape[d] <= global_shape[d]).
 * A NULL global_shape means the tensor is whole (a replica), as with
 * fb_ckpt_register().  Restore requires the same geometry as was saved.
 * Registering may allocate and pre-fault staging memory.
 * Errors: -EINVAL (bad dtype/shape/slice geometry/duplicate name), -ENOMEM,
 * FB_ESTATE (a save is in flight).
 */
int fb_ckpt_register(fb_ckpt *ck, const char *name, fb_dtype dtype,
                     int ndim, const int64_t *shape, void *data);
int fb_ckpt_register_slice(fb_ckpt *ck, const char *name, fb_dtype dtype,
                           int ndim, const int64_t *shape, void *data,
                           const int64_t *global_shape,
                           const int64_t *global_offset);

/*
 * Save every registered tensor as checkpoint `step`.  With async on, it
 * returns once the snapshot is taken -- the bytes copied to staging memory,
 * or the pages write-protected -- and background threads write the shard; otherwise it returns after the shard is
 * committed.  Returns 0, FB_EBUSY when skipped (on_busy = SKIP), or an
 * error (I/O errors of an earlier async save when on_error = STOP;
 * -EINVAL for a step above INT64_MAX, which a shard cannot record).
 */
int fb_ckpt_save(fb_ckpt *ck, uint64_t step);

/* Wait for an in-flight save (in phase FB_PHASE_CHECKPOINT, then back to
 * the phase before); returns its result. */
int fb_ckpt_wait(fb_ckpt *ck);

/*
 * Restore the newest complete checkpoint whose shard for this rank
 * verifies, into the registered tensors.  A missing, truncated, corrupt
 * or misplaced shard (recorded step, rank or world size not its place; not
 * a regular file) makes it fall back to the next older checkpoint; each
 * fallback is reported to the supervisor.  A shard is verified whole
 * before any byte of it is written into the tensors, so a restore that
 * fails leaves them as they were.  On success *step_out (may be NULL) is
 * the restored step.  Returns FB_ENOCKPT when there is none (start fresh;
 * the tensors are untouched), -ENOMEM when it could not allocate what
 * verifying needs (it then stops rather than fall back to an older step:
 * a lack of memory says nothing against the newer checkpoint), FB_ESTATE
 * while a save is in flight, or FB_EMISMATCH when the registered tensors
 * do not match the checkpoint's.
 */
int fb_ckpt_restore(fb_ckpt *ck, uint64_t *step_out);

/* Wait for any in-flight save and, on rank 0, for the removal of the files
 * of checkpoints retention deleted (done between saves: docs/checkpoint.md,
 * "Retention"), then free the handle and staging memory. */
void fb_ckpt_close(fb_ckpt *ck);

/* The handle's checkpoint directory (the option, or the one picked when
 * it was NULL).  Owned by the handle. */
const char *fb_ckpt_dir(const fb_ckpt *ck);

/* 1 when this libfirebreak was built with the device-to-host path (CUDA
 * toolkit found at build time; libcudart is loaded at run time), else 0.
 * Without it a device pointer given to fb_ckpt_register is read as host
 * memory: a crash.  Whether a GPU is present is another question. */
int fb_ckpt_device_support(void);

/* ------------------------------------------------------------------------
 * Reading checkpoints across shards: what a step holds, and any part of
 * any tensor from whichever rank's shard holds it.  For replicated state
 * written by one rank of a group, and for sharded state restored on
 * another world size (docs/checkpoint.md, "Reading across shards").
 * ---------------------------------------------------------------------- */

#define FB_CKPT_MAX_DIMS 32        /* dimensions of a tensor, at most      */
#define FB_CKPT_NEWEST UINT64_MAX  /* max_step of fb_ckpt_layout_open      */

typedef struct fb_ckpt_layout fb_ckpt_layout;

/*
 * Open the newest complete checkpoint of `dir` whose step is <= max_step,
 * reading the header of every shard (no data).  world_size > 0: the
 * checkpoint must have been saved by that many ranks (completeness is
 * counted with it); 0: the world size the lowest rank's shard records
 * (to restore on another world size).  A step with a shard that is not a
 * regular file, has a malformed header, or records another step, rank or
 * world size than its place is passed over (as restore does).  Nothing is
 * verified yet: fb_ckpt_layout_read verifies what it reads.  *out is set
 * only on success.  Errors: FB_ENOCKPT (none; also when dir is missing),
 * -ENOMEM, -EINVAL, -errno of listing dir.
 */
int fb_ckpt_layout_open(fb_ckpt_layout **out, const char *dir, int world_size,
                        uint64_t max_step);
uint64_t fb_ckpt_layout_step(const fb_ckpt_layout *lay);
int fb_ckpt_layout_world_size(const fb_ckpt_layout *lay);

/* One stored tensor: a whole tensor, or a slice of a global one.  Pointers
 * are owned by the layout. */
typedef struct fb_ckpt_tensor_info {
    const char *name;
    int rank;                     /* the shard that holds it                */
    fb_dtype dtype;
    int ndim;
    const int64_t *shape;         /* what is stored                         */
    const int64_t *global_shape;  /* the whole tensor; == shape when whole  */
    const int64_t *global_offset; /* where shape sits in it; 0s when whole  */
    uint64_t bytes;
} fb_ckpt_tensor_info;

/* How many tensors the step's shards hold (all ranks together), and the
 * i-th, by rank then the shard's order.  -ERANGE past the end. */
size_t fb_ckpt_layout_count(const fb_ckpt_layout *lay);
int fb_ckpt_layout_tensor(const fb_ckpt_layout *lay, size_t i,
                          fb_ckpt_tensor_info *out);

/* One region to read: the part `shape` at `global_offset` (NULL: 0s) of
 * the tensor `name` of `global_shape` (NULL: == shape, a whole tensor),
 * into `data` (contiguous, row-major, shape x dtype bytes). */
typedef struct fb_ckpt_read_req {
    const char *name;
    int rank;                     /* -1: any shard; else only that rank's   */
    fb_dtype dtype;
    int ndim;
    const int64_t *shape;
    const int64_t *global_shape;
    const int64_t *global_offset;
    void *data;
} fb_ckpt_read_req;

/*
 * Read every request from the shards that hold it: a whole tensor from any
 * shard that has it (a replica), a region from every stored slice that
 * overlaps it (resharding: the region may span slices saved by several
 * ranks).  Each stored tensor needed is read whole and its hash verified;
 * nothing is written into any request's data before every stored tensor
 * needed by any request has verified, so on failure the buffers are as
 * they were.  io_threads: readers per shard (0: 4).  Errors, with err
 * (may be NULL) naming the tensor, the shard and what was expected:
 * FB_EMISMATCH (a name not in the step, or not in that rank's shard; a
 * dtype, dimension count or global shape other than stored; a region the
 * stored slices do not cover whole), FB_ECORRUPT (a hash differs, a file
 * truncated or changed since open), FB_EFORMAT (stored slices overlap
 * each other), -EINVAL (a bad request), -ENOMEM, -errno of reading.
 */
int fb_ckpt_layout_read(fb_ckpt_layout *lay, const fb_ckpt_read_req *req,
                        size_t n, int io_threads, char *err, size_t err_size);

void fb_ckpt_layout_close(fb_ckpt_layout *lay);

/* ------------------------------------------------------------------------
 * Flight recorder: a ring of collective and point-to-point events per rank
 * (docs/flight-recorder.md).  The MPI interposer libfirebreak-mpi.so fills
 * it without code changes; programs that call their own collectives (NCCL,
 * say) use these calls.
 * ---------------------------------------------------------------------- */

typedef enum {
    FB_OP_UNKNOWN = 0,
    FB_OP_ALLREDUCE, FB_OP_BROADCAST, FB_OP_REDUCE, FB_OP_ALLGATHER,
    FB_OP_GATHER, FB_OP_SCATTER, FB_OP_REDUCE_SCATTER, FB_OP_ALLTOALL,
    FB_OP_BARRIER, FB_OP_SEND, FB_OP_RECV, FB_OP_SENDRECV,
    FB_OP_COALESCED, FB_OP_SCAN, FB_OP_EXSCAN,
    FB_OP_COUNT_
} fb_op;

/* "all_reduce", "send", ... (PyTorch's spelling); NULL if invalid. */
const char *fb_op_name(fb_op op);

/*
 * Describe a communicator: `comm_id` is an identity stable across ranks
 * (the same value on every member), `size` its number of ranks, `rank`
 * this process's rank in it, `global_ranks` (may be NULL) the world ranks
 * of its members in order.  Returns 0 or a negative code.
 */
int fb_fr_comm(uint64_t comm_id, int size, int rank, const int *global_ranks,
               const char *name);

/*
 * Record that this rank enters a collective (or p2p operation) on
 * `comm_id`.  `peer` is the root for rooted collectives, the peer's rank in
 * the communicator for send/recv, -1 otherwise.  `dtype` uses fb_dtype;
 * `count` is in elements.  Returns an event handle for fb_fr_end (0 when
 * not recording).  The per-communicator sequence number is assigned here.
 */
uint64_t fb_fr_begin(uint64_t comm_id, fb_op op, fb_dtype dtype,
                     uint64_t count, int peer);

/* The operation identified by `handle` has completed. */
void fb_fr_end(uint64_t handle);


/* ------------------------------------------------------------------------
 * Silent data corruption check (docs/sdc.md).  Data-parallel replicas must
 * agree bit for bit after every optimizer step: register the replicated
 * tensors, call fb_sdc_check(step) after each step, and every rank hashes
 * a rotating slice of them (all of them every `full_every` steps) and
 * publishes the hashes in its segment; the supervisor compares them
 * across ranks and names a rank that disagrees with the majority.  The
 * replica group is every rank of the job.
 * ---------------------------------------------------------------------- */

/* Defaults: 4 MiB hashed per step, every tensor every 1000 steps. */
#define FB_SDC_DEFAULT_SLICE_BYTES (4u << 20)
#define FB_SDC_DEFAULT_FULL_EVERY 1000

/* Register `bytes` bytes at `data` as replicated tensor `name` (copied;
 * names are compared across ranks, so every rank registers the same
 * tensors in the same order).  `data` must stay valid until fb_sdc_clear
 * or exit, and writable: a `flip` fault (docs/inject.md) flips a bit in
 * it.  Errors: -EINVAL (NULL, empty, duplicate name), -E2BIG (more than
 * 4096 tensors), -ENOMEM. */
int fb_sdc_register(const char *name, void *data, size_t bytes);

/* slice_bytes: bytes hashed per check (0: default; at least 4 KiB);
 * full_every: every how many steps all tensors are hashed (0: default).
 * FIREBREAK_SDC_SLICE and FIREBREAK_SDC_FULL_EVERY override both. */
int fb_sdc_configure(size_t slice_bytes, uint64_t full_every);

/* Hash this step's slice and publish it.  Call it on every rank after the
 * optimizer step, after fb_step(step).  Returns 0; costs nothing when
 * nothing is registered or not attached (no supervisor to compare). */
int fb_sdc_check(uint64_t step);

/* Forget every registered tensor. */
void fb_sdc_clear(void);

#ifdef __cplusplus
}
#endif
#endif /* FIREBREAK_H */
