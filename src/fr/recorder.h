/*
 * recorder.h -- the rank side of the flight recorder, for the producers
 * inside firebreak (the MPI interposer, the NCCL profiler plugin) that
 * know more than the public fb_fr_* calls carry.
 *
 * All calls are for one thread per rank (the public header's rule); the
 * MPI interposer serializes them itself under MPI_THREAD_MULTIPLE.  When
 * the rank is not attached to a supervisor every call records nothing and
 * returns NULL / 0.
 */
#ifndef FB_FR_RECORDER_H
#define FB_FR_RECORDER_H

#include <stdint.h>

#include "firebreak/firebreak.h"
#include "fr/ring.h"

/* Process-local state of one communicator. */
typedef struct fb__fr_comm {
    uint64_t id;
    uint64_t coll_seq;       /* collectives entered so far               */
    uint64_t p2p_seq;        /* point-to-point ops entered so far        */
    int32_t size, rank;
    uint32_t *send_seq;      /* per peer, allocated on first p2p         */
    uint32_t *recv_seq;
    uint64_t children;       /* communicators created from it so far     */
    int32_t table_slot;      /* index in the segment's table, -1 none    */
} fb__fr_comm;

/* Record into `seg` from now on, forgetting every communicator (tools
 * and tests that write many ranks' rings from one process); NULL goes
 * back to this rank's own segment. */
void fb__fr_bind(fb__seg *seg);

/* 1 when events are being recorded (attached to a segment). */
int fb__fr_active(void);

/* Register (or update) a communicator.  `first`/`stride` describe the
 * world ranks of its members when they form an arithmetic progression
 * (stride 0: unknown).  Returns its state, or NULL when not recording. */
fb__fr_comm *fb__fr_comm_register(uint64_t id, uint64_t parent_id, int size,
                                  int rank, int first, int stride,
                                  const char *name);

/* The state of a known communicator, or NULL. */
fb__fr_comm *fb__fr_comm_find(uint64_t id);

/* Forget a communicator's process-local state (MPI_Comm_free).  Its
 * record in the segment stays: events still name it. */
void fb__fr_comm_forget(uint64_t id);

/* Record entering an operation.  `count` / `out_count` are input and
 * output elements; dtype is an fb_dtype, or any value with
 * FB__FR_F_DTYPE_OTHER in flags and the element size in elem_bytes.
 * Returns the event handle for fb__fr_event_state / fb_fr_end, 0 when not
 * recording. */
uint64_t fb__fr_record(fb__fr_comm *c, fb_op op, int dtype, uint32_t elem_bytes,
                       uint64_t count, uint64_t out_count, int peer, int tag,
                       uint32_t flags, int state);

/* fb__fr_record with the call site: `site_file` (its base name is kept,
 * the last FB__FR_SITE_FILE_MAX bytes of it) and `site_line` (0: none).
 * For producers that know where the program called from (the Python
 * hooks: the first frame outside torch). */
uint64_t fb__fr_record_at(fb__fr_comm *c, fb_op op, int dtype, uint32_t elem_bytes,
                          uint64_t count, uint64_t out_count, int peer, int tag,
                          uint32_t flags, int state, const char *site_file,
                          uint32_t site_line);

/* Move an event to `state` (FB__FR_STARTED or FB__FR_COMPLETED). */
void fb__fr_event_state(uint64_t handle, int state);
/* Completed by raising (the Python hooks): over in the ring, and no
 * heartbeat, which every other completion is (fb__lib_beat). */
void fb__fr_event_raised(uint64_t handle);

/* Fix the peer of a recv posted with MPI_ANY_SOURCE once it is known. */
void fb__fr_event_peer(uint64_t handle, fb__fr_comm *c, int peer);

#endif
