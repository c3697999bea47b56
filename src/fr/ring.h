/*
 * ring.h -- the flight-recorder area of a rank's segment (format 1.0).
 *
 * The area starts at header->fr_offset and holds header->fr_capacity slots
 * of FB__SEG_FR_ENTRY_SIZE (128) bytes.  The first `comm_slots` slots are a
 * table of communicator records; the rest is the ring of events:
 *
 *   fr_offset  +--------------------------------------------+
 *              | fb__fr_comm_rec [comm_slots]                |  cap/64 slots
 *              |   one per communicator this rank joined     |  (1 if cap < 64,
 *              |   (header->fr_comm_count are in use)        |   0 if cap == 1)
 *              +--------------------------------------------+
 *              | fb__fr_event [ring_slots]                   |  the rest
 *              |   event i lives in slot i % ring_slots      |
 *              |   header->fr_head = events ever written     |
 *              +--------------------------------------------+
 *
 * Writer (the rank, one thread): to write or update a slot it stores
 * seq = 0, a release fence, the fields, then seq = index + 1 with release.
 * It publishes a new event by storing fr_head = index + 1 (release) after
 * the slot.  Comm records follow the same protocol, and fr_comm_count is
 * raised after the record is complete.
 *
 * Reader (any process, any time, also after the rank died): load seq
 * (acquire), copy the slot, fence (acquire), load seq again; the copy is
 * good when both loads equal index + 1.  Anything else is a slot being
 * rewritten (skip it) or one that was overwritten by a newer event (the
 * ring wrapped).  No reader ever writes.
 *
 * Minor 1 gave the event's last 24 reserved bytes to its call site (the
 * caller's file and line, as the Python hooks see it: the first frame
 * outside torch); a minor-0 writer leaves them zero, which reads as "no
 * site" (site_line 0).
 */
#ifndef FB_FR_RING_H
#define FB_FR_RING_H

#include <stdatomic.h>
#include <stdint.h>

#include "lib/segment.h"

#define FB__FR_FORMAT_MAJOR 1
#define FB__FR_FORMAT_MINOR 1

/* Event states (PyTorch's names). */
enum { FB__FR_SCHEDULED = 0, FB__FR_STARTED = 1, FB__FR_COMPLETED = 2 };

/* Event flags. */
enum {
    FB__FR_F_P2P = 1u << 0,         /* point-to-point: seq is the p2p seq */
    FB__FR_F_NONBLOCKING = 1u << 1, /* MPI_I*: completes in a Wait/Test    */
    FB__FR_F_ANY_SOURCE = 1u << 2,  /* recv from MPI_ANY_SOURCE            */
    FB__FR_F_DTYPE_OTHER = 1u << 3, /* dtype is not an fb_dtype; elem_bytes */
    FB__FR_F_VARIABLE = 1u << 4     /* v-variant: sizes differ by design   */
};

#define FB__FR_NAME_MAX 64
#define FB__FR_SITE_FILE_MAX 20

typedef struct fb__fr_event {
    _Atomic uint64_t seq;    /* index + 1 when consistent, 0 while written */
    uint64_t comm_id;        /* stable identity of the communicator        */
    uint64_t coll_seq;       /* 1-based per-communicator collective seq,
                                or p2p seq (FB__FR_F_P2P)                  */
    uint64_t count;          /* input elements                             */
    uint64_t out_count;      /* output elements                            */
    uint64_t begin_mono_ns;  /* CLOCK_MONOTONIC at entry                   */
    uint64_t end_mono_ns;    /* at completion; 0 while not completed       */
    uint64_t begin_wall_ns;  /* CLOCK_REALTIME at entry (cross-host)       */
    uint64_t step;           /* the rank's last completed fb_step          */
    int32_t peer;            /* root / peer rank in the comm, -1 none      */
    int32_t tag;             /* MPI tag for p2p, else 0                    */
    int32_t comm_size;
    int32_t comm_rank;
    uint32_t pair_seq;       /* p2p: n-th op with this peer, this direction */
    uint32_t elem_bytes;     /* bytes per element                          */
    uint16_t op;             /* fb_op                                      */
    uint8_t dtype;           /* fb_dtype, or see FB__FR_F_DTYPE_OTHER      */
    uint8_t state;           /* FB__FR_SCHEDULED / STARTED / COMPLETED     */
    uint32_t flags;          /* FB__FR_F_*                                 */
    uint32_t site_line;      /* caller's line; 0: no site recorded (minor 1) */
    char site_file[FB__FR_SITE_FILE_MAX]; /* caller's file name, its last
                                bytes when longer; NUL-padded, not always
                                NUL-terminated (minor 1)                  */
} fb__fr_event;

typedef struct fb__fr_comm_rec {
    _Atomic uint64_t seq;    /* slot index + 1 when consistent             */
    uint64_t comm_id;
    uint64_t parent_id;      /* 0: none / unknown                          */
    int32_t size;            /* members                                    */
    int32_t rank;            /* this process's rank in it                  */
    int32_t ranks_first;     /* world rank of member 0; -1 unknown         */
    int32_t ranks_stride;    /* members are first + i * stride; 0 unknown  */
    uint64_t created_mono_ns;
    char name[FB__FR_NAME_MAX]; /* NUL-terminated                          */
    uint64_t reserved[2];
} fb__fr_comm_rec;

_Static_assert(sizeof(fb__fr_event) == FB__SEG_FR_ENTRY_SIZE,
               "flight-recorder event must fill one ring slot");
_Static_assert(sizeof(fb__fr_comm_rec) == FB__SEG_FR_ENTRY_SIZE,
               "communicator record must fill one ring slot");

/* How the fr area of `capacity` slots is split. */
static inline uint32_t fb__fr_comm_slots(uint32_t capacity)
{
    if (capacity >= 64)
        return capacity / 64;
    return capacity >= 2 ? 1 : 0;
}

static inline uint32_t fb__fr_ring_slots(uint32_t capacity)
{
    return capacity - fb__fr_comm_slots(capacity);
}

/* Copy slot `idx` of a ring of `slots` if it holds event `idx`.  Returns 1
 * on a consistent copy, 0 when the slot is being written or holds another
 * event. */
static inline int fb__fr_read_event(const fb__fr_event *ring, uint32_t slots,
                                    uint64_t idx, fb__fr_event *out)
{
    const fb__fr_event *e = &ring[idx % slots];
    uint64_t s1 = atomic_load_explicit(&((fb__fr_event *)e)->seq,
                                       memory_order_acquire);
    if (s1 != idx + 1)
        return 0;
    __builtin_memcpy((void *)out, (const void *)e, sizeof *out);
    atomic_thread_fence(memory_order_acquire);
    uint64_t s2 = atomic_load_explicit(&((fb__fr_event *)e)->seq,
                                       memory_order_relaxed);
    return s2 == s1;
}

static inline int fb__fr_read_comm(const fb__fr_comm_rec *tab, uint32_t idx,
                                   fb__fr_comm_rec *out)
{
    const fb__fr_comm_rec *c = &tab[idx];
    uint64_t s1 = atomic_load_explicit(&((fb__fr_comm_rec *)c)->seq,
                                       memory_order_acquire);
    if (s1 != (uint64_t)idx + 1)
        return 0;
    __builtin_memcpy((void *)out, (const void *)c, sizeof *out);
    atomic_thread_fence(memory_order_acquire);
    uint64_t s2 = atomic_load_explicit(&((fb__fr_comm_rec *)c)->seq,
                                       memory_order_relaxed);
    out->name[FB__FR_NAME_MAX - 1] = '\0';
    return s2 == s1;
}

#endif
