/*
 * late_ring.h -- generated flight-recorder areas in memory, laid out as in
 * a segment (ring.h: communicator slots, then the event ring) and written
 * under the ring's sequence protocol, for the live lateness analysis's
 * test (test_lateness.c) and benchmark (bench/fr/bench_lateness.c).
 */
#ifndef FB_TESTS_LATE_RING_H
#define FB_TESTS_LATE_RING_H

#include <stdlib.h>
#include <string.h>

#include "fr/ring.h"

typedef struct late_ring {
    char *area;           /* capacity slots of FB__SEG_FR_ENTRY_SIZE       */
    uint32_t capacity;
    uint64_t head;        /* events written                                */
    uint64_t seq;         /* the rank's collectives so far                 */
} late_ring;

static int late_ring_init(late_ring *r, uint32_t capacity)
{
    memset(r, 0, sizeof *r);
    r->area = calloc(capacity, FB__SEG_FR_ENTRY_SIZE);
    r->capacity = capacity;
    return r->area ? 0 : -1;
}

static void late_ring_free(late_ring *r)
{
    free(r->area);
    r->area = NULL;
}

/* Append one completed collective (comm_id, the next seq) that rank
 * `comm_rank` of `comm_size` entered at t_ns. */
static void late_ring_put(late_ring *r, uint64_t comm_id, int comm_rank,
                          int comm_size, uint64_t t_ns, uint32_t flags)
{
    uint32_t slots = fb__fr_ring_slots(r->capacity);
    fb__fr_event *ring = (fb__fr_event *)(void *)(
        r->area + (size_t)fb__fr_comm_slots(r->capacity) * FB__SEG_FR_ENTRY_SIZE);
    uint64_t idx = r->head;
    fb__fr_event *e = &ring[idx % slots];
    atomic_store_explicit(&e->seq, 0, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    e->comm_id = comm_id;
    e->coll_seq = ++r->seq;
    e->count = 1024;
    e->out_count = 1024;
    e->begin_mono_ns = t_ns;
    e->end_mono_ns = t_ns + 1000;
    e->comm_size = comm_size;
    e->comm_rank = comm_rank;
    e->peer = -1;
    e->elem_bytes = 4;
    e->op = 1;
    e->state = FB__FR_COMPLETED;
    e->flags = flags;
    atomic_store_explicit(&e->seq, idx + 1, memory_order_release);
    r->head = idx + 1;
}

#endif
