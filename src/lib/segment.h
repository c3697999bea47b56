/*
 * segment.h -- the per-rank shared-memory segment (layout version 1.3).
 *
 * One file per rank in /dev/shm, named by job, attempt and rank:
 *
 *     /dev/shm/fb.<job_id>.<attempt>.<rank>          mode 0600
 *
 * The rank creates it in fb_init() and is its only writer (the checkpoint
 * engine's background threads append reports too, through an atomic
 * index).  The supervisor, the node watcher and the agent map it read-only.
 * Because it is a tmpfs file, everything in it survives the rank's death,
 * SIGKILL included; the supervisor removes it when the run ends and cleans
 * stale ones whose supervisor is gone.
 *
 *   offset 0            +------------------------------------------+
 *                       | fb__seg_header   (identity, progress,    |
 *                       |                   exit record, injection)|
 *   report_offset       +------------------------------------------+
 *                       | fb__seg_report[report_capacity]          |
 *                       |   rank -> supervisor messages: checkpoint|
 *                       |   committed / failed, restore fell back  |
 *   fr_offset           +------------------------------------------+
 *                       | flight-recorder ring (src/fr/ring.h):    |
 *                       |   fr_capacity slots of fr_entry_size     |
 *   total_size          +------------------------------------------+
 *
 * Rules for writers and readers:
 *  - Header fields are naturally aligned 64- or 32-bit words written with
 *    relaxed atomic stores (plain stores on x86/arm64), so a reader never
 *    sees a torn word.  Where several fields must be read together, a
 *    sequence field is stored last with release ordering and read first
 *    with acquire ordering.
 *  - `magic` is stored last at creation (release): a reader that sees the
 *    magic sees a fully initialized header.
 *  - Readers check magic and major version, accept any minor version >= 0
 *    (newer minors only append fields), and bound every offset and count
 *    by the file size.
 *
 * Trust (readers): the rank writes this file while we read it, and a buggy
 * or hostile rank may write anything, at any time.  So a reader
 *  - opens it with O_NOFOLLOW, and accepts only a regular file owned by
 *    the expected user with no group or other permission bits
 *    (fb__seg_open_as; another local user could otherwise plant a file
 *    under the name before the rank creates it);
 *  - copies the identity (offsets, capacities, sizes, rank, pid...) ONCE
 *    at attach, bounded by the mapped size from fstat, and uses only the
 *    copies afterwards (fb__seg_identity); the live identity is never
 *    re-read except by fb__seg_check, which compares it to the copy;
 *  - bounds every head or index it reads live before using it (modulo a
 *    copied capacity), copies slots out before looking at them, and
 *    NUL-terminates copied text;
 *  - calls fb__seg_check on every pass: a changed identity, a head that
 *    went backwards or jumped absurdly, or an enum out of range means the
 *    segment is corrupt, and the reader stops trusting it;
 *  - survives a rank that truncates its own file (tmpfs files cannot be
 *    sealed): reader mappings are registered with a SIGBUS guard
 *    (segment_guard.h) that zero-fills the lost pages so the load runs
 *    again, and fb__seg_check reports the segment truncated.  The guard's
 *    handler is installed by the first fb__seg_open_as, never in a rank.
 *  - Times: *_mono_ns are CLOCK_MONOTONIC (comparable on one host only);
 *    *_wall_ns are CLOCK_REALTIME.
 *  - Minor 1 appended fr_clock and fr_tsc_hz; a minor-0 file reads them as
 *    0 (clock unknown, which means CLOCK_MONOTONIC).
 *  - Minor 2 appended dump_request and dump_done: the one word a reader
 *    writes (the supervisor asks the rank to dump PyTorch's flight
 *    recorder, with pwrite(2) on the file, never through a mapping), and
 *    the rank's answer.  A minor-1 rank never answers: the supervisor's
 *    wait is bounded.
 *  - Minor 3 appended sdc_offset, sdc_capacity and sdc_head, and a ring of
 *    SDC check records after the flight-recorder ring (total_size grew);
 *    a file of an older minor has none (sdc_capacity reads 0).
 */
#ifndef FB_LIB_SEGMENT_H
#define FB_LIB_SEGMENT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#define FB__SEG_MAGIC 0x31474553424546ull /* "FEBSEG1\0" little-endian */
#define FB__SEG_VERSION_MAJOR 1
#define FB__SEG_VERSION_MINOR 3
#define FB__SEG_HEADER_SIZE 4096
#define FB__SEG_REPORT_CAPACITY 128
#define FB__SEG_FR_DEFAULT_CAPACITY 4096
#define FB__SEG_FR_MAX_CAPACITY (1u << 22)
#define FB__SEG_FR_ENTRY_SIZE 128 /* bytes per ring slot; src/fr/ring.h asserts it */
#define FB__SEG_NAME_MAX 128
/* A head (report_head, fr_head) that moves by more than this between two
 * checks, or backwards, is corruption, not progress. */
#define FB__SEG_HEAD_JUMP_MAX (1ull << 32)

/* Reports: what a rank tells the supervisor (which writes the journal). */
typedef enum {
    FB__REPORT_NONE = 0,
    FB__REPORT_CKPT_BEGIN = 1,     /* step                                   */
    FB__REPORT_CKPT_COMMITTED = 2, /* step, bytes, value1 = stall ns,
                                     value2 = persist ns                    */
    FB__REPORT_CKPT_FAILED = 3,    /* step, code (-errno), text             */
    FB__REPORT_CKPT_SKIPPED = 4,   /* step: a save skipped while busy        */
    FB__REPORT_RESTORE_BEGIN = 5,
    FB__REPORT_RESTORE_DONE = 6,   /* step restored, bytes, value1 = ns       */
    FB__REPORT_RESTORE_FALLBACK = 7, /* step rejected, code, text = why     */
    FB__REPORT_RESTORE_NONE = 8,   /* no checkpoint: starting fresh          */
    FB__REPORT_INJECT = 9,         /* an injected fault fires: code = kind,
                                     step, text = the spec                  */
    FB__REPORT_NOTE = 10,          /* free text                              */
    FB__REPORT_CKPT_DELETED = 11   /* an old checkpoint was deleted: step    */
} fb__report_kind;

/* CKPT_COMMITTED's code: 0 from the checkpoint engine (one rank's shard;
 * the step is durable once every rank's is); FB__COMMIT_WHOLE from the
 * Python hooks (the script's own torch.save / dcp.save, or
 * firebreak.committed): that step is durable as a whole. */
#define FB__COMMIT_WHOLE 1
/* NOTE's code: FB__NOTE_WHERE is the Python hooks' answer to a dump
 * request: text is where the rank's main thread is ("file:line in f"). */
#define FB__NOTE_WHERE 1

#define FB__REPORT_TEXT_MAX 200

typedef struct fb__seg_report {
    _Atomic uint64_t seq;   /* index + 1, stored last (release); 0: empty */
    uint32_t kind;          /* fb__report_kind                            */
    int32_t code;
    uint64_t step;
    uint64_t bytes;
    uint64_t value1;
    uint64_t value2;
    uint64_t wall_ns;
    char text[FB__REPORT_TEXT_MAX];
} fb__seg_report; /* 256 bytes */

/* What the rank recorded about its own end (exit code or fatal signal). */
typedef enum {
    FB__END_NONE = 0,     /* still running, or vanished (SIGKILL)         */
    FB__END_EXIT = 1,     /* exit(end_code), through exit() / return      */
    FB__END_SIGNAL = 2,   /* fatal signal end_code (SIGSEGV, SIGABRT...)  */
    FB__END_FINALIZED = 3 /* fb_finalize() was called; an exit code or a
                            fatal signal recorded later replaces it        */
} fb__end_kind;

/* Injected fault kinds (docs/inject.md). */
typedef enum {
    FB__INJECT_NONE = 0,
    FB__INJECT_KILL = 1,   /* SIGKILL itself                      */
    FB__INJECT_HANG = 2,   /* stop making progress forever        */
    FB__INJECT_EXIT = 3,   /* exit(code)                          */
    FB__INJECT_SLOW = 4,   /* sleep (factor - 1) x step time      */
    FB__INJECT_SEGV = 5,   /* raise SIGSEGV                        */
    FB__INJECT_CORRUPT_CKPT = 6, /* flip a byte in the newest shard */
    FB__INJECT_FLIP = 7,   /* flip a bit in a tensor registered for the
                              SDC check (minor 3)                  */
    FB__INJECT_LAST_ = FB__INJECT_FLIP
} fb__inject_kind;

/* Minor 2: the silent-data-corruption check (src/lib/sdc.c, docs/sdc.md).
 * Each record is the hash of one piece of one replicated tensor after an
 * optimizer step; the supervisor compares the same piece across ranks. */
#define FB__SEG_SDC_CAPACITY 1024
#define FB__SEG_SDC_NAME_MAX 48
#define FB__SDC_FULL 1u       /* flags: part of a check of every tensor  */
typedef struct fb__seg_sdc {
    _Atomic uint64_t seq;     /* index + 1, stored last (release); 0: empty */
    uint64_t step;            /* the step fb_sdc_check was given         */
    uint64_t hash;            /* XXH3-64 of the piece                    */
    uint64_t offset;          /* first byte of the piece in the tensor   */
    uint64_t length;          /* bytes hashed                            */
    uint32_t tensor;          /* registration index                      */
    uint32_t flags;           /* FB__SDC_*                                */
    char name[FB__SEG_SDC_NAME_MAX]; /* the tensor's name, NUL-terminated */
} fb__seg_sdc; /* 96 bytes */

typedef struct fb__seg_header {
    /* --- identity: written once at creation, before magic --- */
    _Atomic uint64_t magic;
    uint32_t version_major;
    uint32_t version_minor;
    uint64_t total_size;
    uint32_t header_size;
    uint32_t report_offset;
    uint32_t report_capacity;
    uint32_t fr_entry_size;
    uint64_t fr_offset;
    uint32_t fr_capacity;        /* slots; a power of two                */
    int32_t pid;
    int32_t rank;
    int32_t world_size;
    int32_t local_rank;
    int32_t attempt;
    int32_t supervisor_pid;
    uint32_t reserved0;
    uint64_t created_wall_ns;
    uint64_t created_mono_ns;
    char job_id[64];
    char hostname[64];

    /* --- progress: written by fb_step / fb_set_phase --- */
    _Atomic uint32_t phase;          /* fb_phase                          */
    uint32_t reserved1;
    _Atomic uint64_t step;           /* last completed step               */
    _Atomic uint64_t steps_done;     /* fb_step calls in this attempt     */
    _Atomic uint64_t heartbeat_mono_ns; /* last sign of life               */
    _Atomic uint64_t heartbeat_wall_ns; /* creation time only: fb_step keeps
                                          to one clock read; wall time of a
                                          heartbeat = heartbeat_mono_ns +
                                          created_wall_ns - created_mono_ns */
    _Atomic uint64_t phase_since_mono_ns;
    _Atomic uint64_t last_step_ns;   /* duration of the last step          */
    _Atomic uint64_t step_ewma_ns;   /* smoothed step duration (1/8)       */
    _Atomic uint64_t first_step_mono_ns; /* end of start-up / restore      */

    /* --- end record: written by the exit / fatal-signal handlers --- */
    _Atomic uint32_t end_kind;       /* fb__end_kind                       */
    _Atomic int32_t end_code;        /* exit code or signal number         */
    _Atomic uint64_t end_mono_ns;

    /* --- injection record: written just before an injected fault --- */
    _Atomic uint32_t inject_kind;    /* fb__inject_kind, 0: none fired     */
    _Atomic int32_t inject_code;
    _Atomic uint64_t inject_step;
    _Atomic uint64_t inject_mono_ns;

    /* --- reports: next index to write (atomic fetch-add) --- */
    _Atomic uint64_t report_head;

    /* --- flight recorder: next slot to write (owned by src/fr) --- */
    _Atomic uint64_t fr_head;
    _Atomic uint64_t fr_comm_count;  /* for src/fr's communicator table    */

    /* --- minor 1: how the flight recorder takes event times (src/fr) --- */
    _Atomic uint32_t fr_clock;       /* fb__seg_clock; 0 in minor-0 files  */
    uint32_t reserved2;
    _Atomic uint64_t fr_tsc_hz;      /* calibrated TSC rate (FB_CLOCK_TSC)  */

    /* --- minor 2: dump requests (docs/segment.md, "Dump requests") --- */
    _Atomic uint64_t dump_request;   /* the supervisor: n-th request, by
                                        pwrite (fb__seg_request_dump)      */
    _Atomic uint64_t dump_done;      /* the rank: the request it answered  */
    /* --- minor 3: SDC check records (src/lib/sdc.c).  Offset and
     * capacity are written once at creation, before magic; readers copy
     * them at attach (fb__seg_ident) and fb__seg_check compares. --- */
    uint64_t sdc_offset;             /* ring of fb__seg_sdc; 0 in minor < 3 */
    uint32_t sdc_capacity;           /* records; a power of two, or 0       */
    uint32_t reserved3;
    _Atomic uint64_t sdc_head;       /* next record index (the rank's)      */
} fb__seg_header;

/* fr_clock: the source of the flight recorder's *_mono_ns event times.
 * Either way they are CLOCK_MONOTONIC nanoseconds. */
typedef enum {
    FB_CLOCK_UNKNOWN = 0,   /* minor 0, or no event recorded yet          */
    FB_CLOCK_MONOTONIC = 1, /* clock_gettime(CLOCK_MONOTONIC) per event   */
    FB_CLOCK_TSC = 2        /* invariant TSC, converted with anchors taken
                               from CLOCK_MONOTONIC at least every ms     */
} fb__seg_clock;

_Static_assert(sizeof(fb__seg_header) <= FB__SEG_HEADER_SIZE,
               "segment header grew past its page");
_Static_assert(sizeof(fb__seg_report) == 256, "report slot size changed");
_Static_assert(sizeof(fb__seg_sdc) == 96, "SDC record size changed");

/* ---- writer side (the rank; src/lib/segment.c) ---- */

typedef struct fb__seg fb__seg; /* a mapped segment, either side */

/* A firebreak job id: 1 to FB__JOB_ID_MAX of [A-Za-z0-9_-] (the
 * supervisor's "<name>-<12 hex>", Slurm's job number).  It names files in
 * /dev/shm and directories under the node-memory tier's root, so every
 * command that takes one from outside (a rank's environment, `--job`, a
 * run directory's `job` file) checks it here.
 *   fb__job_id_ok     the whole string is one
 *   fb__job_id_span   the length of the one s starts with, ended by the
 *                     string's end or a '.' (a segment's file name); 0 when
 *                     s does not start with one */
#define FB__JOB_ID_MAX 48
int fb__job_id_ok(const char *job);
size_t fb__job_id_span(const char *s);

/* Fill `name` (at least FB__SEG_NAME_MAX bytes) with the shm name
 * "/fb.<job>.<attempt>.<rank>"; 0 or -ENAMETOOLONG / -EINVAL (job ids are
 * [A-Za-z0-9_-], at most 48 characters). */
int fb__seg_name(char *name, size_t size, const char *job_id, int attempt,
                 int rank);

typedef struct fb__seg_create_args {
    const char *job_id;
    int attempt, rank, world_size, local_rank, supervisor_pid;
    uint32_t fr_capacity;   /* 0: default; rounded up to a power of two */
    struct stat *taken;     /* may be NULL: the stat of a file that held
                               the name and is not ours (FB_ENOTOURS)    */
} fb__seg_create_args;

/* Create and map the segment, exclusively (O_EXCL | O_NOFOLLOW, 0600).
 * A file already under the name that is ours (our uid, a regular file, no
 * group/other bits) is a leftover of this very attempt and is replaced;
 * anything else is refused with FB_ENOTOURS, and args->taken (when not
 * NULL) receives its stat, so the caller can name owner and mode. */
int fb__seg_create(fb__seg **out, const fb__seg_create_args *args);

/* ---- reader side ---- */

/* The identity, copied once at attach and bounded by the mapped size:
 * readers use these, never the live header's copies of the same fields. */
typedef struct fb__seg_identity {
    uint32_t version_major, version_minor;
    uint64_t total_size;       /* == the mapped size                     */
    uint32_t header_size;
    uint32_t report_offset;    /* report area lies inside the mapping    */
    uint32_t report_capacity;  /* >= 1                                    */
    uint32_t fr_entry_size;
    uint64_t fr_offset;        /* fr area lies inside the mapping        */
    uint32_t fr_capacity;      /* a power of two, or 0                    */
    uint64_t sdc_offset;       /* minor 3: SDC ring inside the mapping   */
    uint32_t sdc_capacity;     /* a power of two, or 0 (none)            */
    int32_t pid, rank, world_size, local_rank, attempt, supervisor_pid;
    uint64_t created_wall_ns, created_mono_ns;
    char job_id[64];           /* NUL-terminated, control bytes as '?'    */
    char hostname[64];
    uid_t owner_uid;           /* from fstat at attach                    */
    uint32_t mode;             /* st_mode & 07777                         */
} fb__seg_identity;

/* Expected owner "anyone" for fb__seg_open_as: explicit files a user
 * names (firebreak fr) and the node agent, which only reports metrics. */
#define FB__SEG_ANY_OWNER ((uid_t)-1)

/* Map an existing segment read-only by shm name or by path; validates
 * magic, version and bounds and copies the identity.  Refuses anything
 * but a regular file (FB_ENOTREG), and unless `uid` is FB__SEG_ANY_OWNER
 * a symlink, a file not owned by `uid` or one with any group or other
 * permission bit (FB_ENOTOURS).  `st` (may be NULL) receives the
 * file's stat whenever fstat ran, so a refusal can name owner and mode.
 * -ENOENT while the rank has not created it, FB_EFORMAT / FB_EVERSION for
 * a bad one. */
int fb__seg_open_as(fb__seg **out, const char *name_or_path, uid_t uid,
                    struct stat *st);

/* fb__seg_open_as(out, name_or_path, geteuid(), NULL). */
int fb__seg_open(fb__seg **out, const char *name_or_path);

void fb__seg_close(fb__seg *seg);

/* The mapped header.  Readers may load only the live fields (progress,
 * end record, injection record, heads) from it, and must bound what they
 * load before using it as an index; identity comes from fb__seg_identity. */
fb__seg_header *fb__seg_hdr(const fb__seg *seg);
void *fb__seg_base(const fb__seg *seg);
size_t fb__seg_size(const fb__seg *seg);
const fb__seg_identity *fb__seg_ident(const fb__seg *seg);

/* Is the live segment still consistent with what was attached?  Checks
 * that the file was not truncated under the mapping (it loads from the
 * last page; a page the file lost reads as zeros from then on), then
 * magic, the identity (byte for byte against the copy), the heads (never
 * backwards, never more than FB__SEG_HEAD_JUMP_MAX since attach or the
 * last check) and the library-written enums (end_kind, inject_kind; the
 * phase is the program's to set, fb_set_phase, and reads as "unknown").  0, or FB_EFORMAT with a
 * sentence in `why` naming the field.  Readers call it once per pass and
 * stop trusting a segment that failed it once. */
int fb__seg_check(fb__seg *seg, char *why, size_t why_size);

/* A reader's mapping: 1 when the file shrank under it (the SIGBUS guard
 * zero-filled pages from *offset on; offset may be NULL), else 0.  Loads
 * from the last page to find out.  Cheaper than fb__seg_check, for a
 * reader that wants to know whether the values it just read were real. */
int fb__seg_truncated(const fb__seg *seg, uint64_t *offset);

/* The flight-recorder area from the copied identity: base address and
 * capacity in slots (0: no ring, or entries of another size). */
const void *fb__seg_fr_area(const fb__seg *seg, uint32_t *capacity);

/* Ask the rank whose segment `seg` is (attached with fb__seg_open_as) to
 * dump its flight recorders: stores `request` into its dump_request with
 * pwrite(2) on the file, reopened by `name_or_path` with O_NOFOLLOW and
 * accepted only when it is still the file attached (same device and
 * inode): a write through a mapping of a file the rank may truncate
 * would fault.  Then wakes the rank's thread, which sleeps on the word's
 * low 32 bits (a shared futex).  0 or a negative code. */
int fb__seg_request_dump(const fb__seg *seg, const char *name_or_path,
                         uint64_t request);

/* Append a report (any thread of the rank).  text may be NULL. */
void fb__seg_append_report(fb__seg *seg, fb__report_kind kind, int32_t code,
                    uint64_t step, uint64_t bytes, uint64_t value1,
                    uint64_t value2, const char *text);

/* Read the report with index `idx` (0-based) into *out.  Returns 1 when
 * read, 0 when not written yet, -1 when it was overwritten (lost).  The
 * copy's text is NUL-terminated with control bytes as '?'.  A caller that
 * loops until 0 should stop after report_capacity reads per pass: a
 * hostile report_head is bounded only by fb__seg_check. */
int fb__seg_read_report(const fb__seg *seg, uint64_t idx,
                        fb__seg_report *out);

/* After fb__seg_read_report returned -1 (lost) for `idx`: the next index
 * worth reading, idx + 1 or the oldest one the ring can still hold. */
uint64_t fb__seg_report_next(const fb__seg *seg, uint64_t idx);

/* SDC check records (minor 3).  Writer: append one (the rank's training
 * thread only).  Reader: the same contract as fb__seg_read_report: 1 and
 * *out filled (name NUL-terminated, control bytes as '?'), 0 not written
 * yet, -1 lost (overwritten); fb__seg_sdc_head is the live head, bounded
 * by nothing: callers read at most sdc_capacity records behind it. */
void fb__seg_append_sdc(fb__seg *seg, uint64_t step, uint64_t hash,
                        uint64_t offset, uint64_t length, uint32_t tensor,
                        uint32_t flags, const char *name);
int fb__seg_read_sdc(const fb__seg *seg, uint64_t idx, fb__seg_sdc *out);
uint64_t fb__seg_sdc_head(const fb__seg *seg);

/* Copy the whole segment to a file (post-mortem evidence; pages a
 * truncation took are written as zeros); 0 or -errno. */
int fb__seg_dump(const fb__seg *seg, const char *path);

/* The same file, written sparse: only the ranges that hold data in the
 * segment's file `name` (SEEK_DATA; never-written pages are holes, read
 * as zeros), when `name` is still the file mapped; otherwise as
 * fb__seg_dump.  The bytes come from the mapping either way. */
int fb__seg_dump_sparse(const fb__seg *seg, const char *name, const char *path);

/* The bytes fb__seg_dump_sparse would write, taken now into memory, to be
 * written later with fb__seg_copy_write: the supervisor takes the evidence
 * at the failure and writes its files once the next attempt is launched.
 * -E2BIG when the data is over max_bytes (nothing taken: dump instead),
 * -ENOMEM; *out is freed with fb__seg_copy_free. */
typedef struct fb__seg_copy fb__seg_copy;
int fb__seg_copy_take(const fb__seg *seg, const char *name, size_t max_bytes,
                      fb__seg_copy **out);
/* The bytes held (what the copy costs in memory). */
size_t fb__seg_copy_bytes(const fb__seg_copy *c);
/* The file fb__seg_dump_sparse would have written at the take. */
int fb__seg_copy_write(const fb__seg_copy *c, const char *path);
void fb__seg_copy_free(fb__seg_copy *c);

/* Remove stale segments in /dev/shm: those whose supervisor pid is dead,
 * or, when job_id is given, every one of that job.  Only regular files of
 * our own uid are touched (another user's file under a segment's name is
 * left as evidence).  Returns how many were removed. */
int fb__seg_cleanup(const char *job_id);

/* In /dev/shm/fb.<job>.ompi (Open MPI's shared memory of a job, made by
 * the supervisor for each attempt): the supervisor's pid, so that a later
 * run can tell the directory of a killed supervisor from a live one. */
#define FB__SEG_MPI_DIR_PID "firebreak.pid"

/* Remove every segment of one job and attempt (attempt < 0: all). */
int fb__seg_remove_job(const char *job_id, int attempt);

/* Remove every segment of the job's attempts before `attempt`: a node
 * watcher's sweep at its start (supervisor/watcher.c); a stopped attempt's
 * watcher, SIGKILLed by srun with its step, removed none. */
int fb__seg_remove_older(const char *job_id, int attempt);

#endif
