/*
 * recorder.c -- writes flight-recorder events into this rank's segment
 * (layout in ring.h): fb_fr_comm, fb_fr_begin, fb_fr_end and the internal
 * calls of recorder.h.
 *
 * Hot path: one clock read, a handful of plain stores into the slot and
 * two release stores (the slot's seq and fr_head).  The clock read is the
 * TSC where it is invariant and the kernel keeps time with it (see
 * event_ns), else clock_gettime.  Communicator state is
 * process-local (a small open-addressing table keyed by comm id, with a
 * one-entry cache in front); only the records a reader needs go to the
 * segment.
 */
#include "fr/recorder.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__)
#include <cpuid.h>
#include <x86intrin.h>
#endif

#include "common/util.h"
#include "lib/lib.h"

static struct {
    fb__seg_header *hdr;
    fb__fr_event *ring;
    uint32_t ring_slots;
    fb__fr_comm_rec *comms;
    uint32_t comm_slots;
    uint64_t wall_minus_mono_ns;
    fb__fr_comm **table;     /* open addressing; TOMB marks a removed one */
    size_t table_cap, table_used;
    fb__fr_comm *last;       /* the communicator of the previous event    */
    uint32_t next_slot;      /* fr_head % ring_slots, kept without dividing */
    uint64_t last_handle;    /* the previous event and its slot, for the   */
    fb__fr_event *last_slot; /* fb_fr_end that usually follows at once     */
} R;

#define TOMB ((fb__fr_comm *)1)

/*
 * Event clock.  clock_gettime(CLOCK_MONOTONIC) costs tens of ns in a VM;
 * rdtsc about half of it.  With an invariant TSC (constant rate, ticking
 * in every C-state, synchronized across CPUs: the kernel's clocksource is
 * "tsc") an event's time is
 *
 *     ns = anchor_ns + ((tsc - anchor_tsc) * mult >> 32)
 *
 * where (anchor_tsc, anchor_ns) is a CLOCK_MONOTONIC reading taken between
 * two rdtsc, renewed on the first event more than REANCHOR_NS after the
 * last one, so that no time is ever extrapolated further than that.  mult
 * (ns per tick << 32) comes from the span between the renewed anchor and a
 * calibration base at least min(CAL_SPAN_NS, age of the process's first
 * anchor) old; until that span reaches CAL_MIN_NS every event reads
 * clock_gettime.  Error against CLOCK_MONOTONIC: the anchor's own reading
 * (tens of ns) plus the rate error over at most REANCHOR_NS (well under a
 * microsecond).  An event's time is never before the previous event's.
 *
 * Process-wide, one writer thread (the recorder's rule).
 */
#define REANCHOR_NS 1000000ull   /* 1 ms   */
#define CAL_MIN_NS 200000ull     /* 200 us */
#define CAL_SPAN_NS 1000000000ull /* 1 s   */

static struct {
    int mode;                 /* FB_CLOCK_*; 0: not chosen yet           */
    uint64_t anchor_tsc, anchor_ns;
    uint64_t mult;            /* ns per tick << 32; 0: not calibrated    */
    uint64_t refresh_ticks;   /* REANCHOR_NS in ticks; 0 while uncalibrated */
    uint64_t cal_tsc, cal_ns; /* calibration base                        */
    uint64_t cal_span_ns;     /* span mult was computed over             */
} C;

#if defined(__x86_64__)
/* Invariant TSC (CPUID 0x80000007 EDX bit 8) and the kernel's clocksource
 * is the TSC (it checked the TSC is synchronized and stable). */
static int tsc_usable(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(0x80000007, &a, &b, &c, &d) || !(d & (1u << 8)))
        return 0;
    FILE *f = fopen("/sys/devices/system/clocksource/clocksource0/"
                    "current_clocksource", "r");
    if (!f)
        return 0;
    char src[32] = "";
    int ok = fgets(src, sizeof src, f) && !strcmp(src, "tsc\n");
    fclose(f);
    return ok;
}

/* A CLOCK_MONOTONIC reading and the TSC at the same moment: the tightest
 * of three tries, so that a preemption inside one does not skew it. */
static void read_pair(uint64_t *tsc, uint64_t *ns)
{
    uint64_t best = UINT64_MAX;
    *tsc = 0; /* always set by the first round; said for the compiler */
    *ns = 0;
    for (int i = 0; i < 3; i++) {
        uint64_t t1 = __rdtsc();
        uint64_t n = fb__now_ns();
        uint64_t t2 = __rdtsc();
        if (t2 - t1 < best) {
            best = t2 - t1;
            *tsc = t1 + (t2 - t1) / 2;
            *ns = n;
        }
    }
}
#endif

static void publish_clock(void);

static void clock_init(void)
{
    C.mode = FB_CLOCK_MONOTONIC;
#if defined(__x86_64__)
    const char *force = fb__getenv("FIREBREAK_FR_CLOCK");
    if ((!force || strcmp(force, "monotonic")) && tsc_usable()) {
        C.mode = FB_CLOCK_TSC;
        read_pair(&C.cal_tsc, &C.cal_ns);
        C.anchor_tsc = C.cal_tsc;
        C.anchor_ns = C.cal_ns;
    }
#endif
}

#if defined(__x86_64__)
/* The slow path of event_ns: a new anchor, and a better rate when the
 * span allows.  Gives up on the TSC if it disagrees with the kernel. */
static uint64_t reanchor(void)
{
    uint64_t tsc, ns;
    read_pair(&tsc, &ns);
    /* Never before the previous event (the old rate may have run ahead). */
    uint64_t out = ns;
    if (R.last_slot && R.last_slot->begin_mono_ns > out)
        out = R.last_slot->begin_mono_ns;
    if (tsc <= C.cal_tsc || ns < C.cal_ns) {
        C.mode = FB_CLOCK_MONOTONIC; /* TSC went backwards: stop trusting it */
        publish_clock();
        return ns;
    }
    uint64_t span_ns = ns - C.cal_ns;
    if (span_ns >= CAL_MIN_NS && span_ns >= C.cal_span_ns) {
        unsigned __int128 m = ((unsigned __int128)span_ns << 32) / (tsc - C.cal_tsc);
        /* Sanity: a TSC between 100 MHz and 20 GHz. */
        if (m > ((unsigned __int128)10 << 32) || m < ((1ull << 32) / 20)) {
            C.mode = FB_CLOCK_MONOTONIC;
            publish_clock();
            return ns;
        }
        C.mult = (uint64_t)m;
        C.refresh_ticks = (REANCHOR_NS << 32) / C.mult;
        C.cal_span_ns = span_ns < CAL_SPAN_NS ? span_ns : CAL_SPAN_NS;
        if (span_ns >= CAL_SPAN_NS) {
            C.cal_tsc = tsc;
            C.cal_ns = ns;
        }
        publish_clock();
    }
    C.anchor_tsc = tsc;
    C.anchor_ns = out;
    return out;
}
#endif

/* CLOCK_MONOTONIC nanoseconds for an event. */
static inline uint64_t event_ns(void)
{
#if defined(__x86_64__)
    if (C.mode == FB_CLOCK_TSC) {
        uint64_t d = __rdtsc() - C.anchor_tsc;
        if (__builtin_expect(d < C.refresh_ticks, 1))
            return C.anchor_ns + ((d * C.mult) >> 32);
        return reanchor();
    }
#endif
    return fb__now_ns();
}

static const char *const op_names[FB_OP_COUNT_] = {
    [FB_OP_UNKNOWN] = "unknown", [FB_OP_ALLREDUCE] = "all_reduce",
    [FB_OP_BROADCAST] = "broadcast", [FB_OP_REDUCE] = "reduce",
    [FB_OP_ALLGATHER] = "all_gather", [FB_OP_GATHER] = "gather",
    [FB_OP_SCATTER] = "scatter", [FB_OP_REDUCE_SCATTER] = "reduce_scatter",
    [FB_OP_ALLTOALL] = "all_to_all", [FB_OP_BARRIER] = "barrier",
    [FB_OP_SEND] = "send", [FB_OP_RECV] = "recv",
    [FB_OP_SENDRECV] = "sendrecv", [FB_OP_COALESCED] = "coalesced",
    [FB_OP_SCAN] = "scan", [FB_OP_EXSCAN] = "exscan",
};

const char *fb_op_name(fb_op op)
{
    if ((unsigned)op < FB_OP_COUNT_)
        return op_names[op];
    return NULL;
}

static int bind_seg(fb__seg *seg);

/* Bind to the segment the first time one is there. */
static int ready(void)
{
    if (R.hdr)
        return 1;
    return bind_seg(fb__lib_seg());
}

static int bind_seg(fb__seg *seg)
{
    if (!seg)
        return 0;
    fb__seg_header *h = fb__seg_hdr(seg);
    uint32_t cap = h->fr_capacity;
    if (cap == 0 || h->fr_entry_size != FB__SEG_FR_ENTRY_SIZE)
        return 0;
    char *area = (char *)fb__seg_base(seg) + h->fr_offset;
    R.comm_slots = fb__fr_comm_slots(cap);
    R.ring_slots = fb__fr_ring_slots(cap);
    R.comms = (fb__fr_comm_rec *)area;
    R.ring = (fb__fr_event *)(area + (size_t)R.comm_slots * FB__SEG_FR_ENTRY_SIZE);
    R.wall_minus_mono_ns = h->created_wall_ns - h->created_mono_ns;
    R.next_slot = (uint32_t)(atomic_load_explicit(&h->fr_head, memory_order_relaxed) %
                             R.ring_slots);
    R.hdr = h;
    if (!C.mode)
        clock_init();
    publish_clock();
    return 1;
}

/* Tell readers how event times are taken (header fields of minor 1). */
static void publish_clock(void)
{
    fb__seg_header *h = R.hdr;
    if (!h)
        return;
    uint64_t hz = 0;
    if (C.mode == FB_CLOCK_TSC && C.mult)
        hz = (uint64_t)((1000000000ull << 32) / C.mult);
    atomic_store_explicit(&h->fr_tsc_hz, hz, memory_order_relaxed);
    atomic_store_explicit(&h->fr_clock, (uint32_t)C.mode, memory_order_relaxed);
}

void fb__fr_bind(fb__seg *seg)
{
    for (size_t i = 0; i < R.table_cap; i++) {
        fb__fr_comm *c = R.table[i];
        if (c && c != TOMB) {
            free(c->send_seq);
            free(c->recv_seq);
            free(c);
        }
    }
    free(R.table);
    memset(&R, 0, sizeof R);
    bind_seg(seg);
}

int fb__fr_active(void)
{
    return ready();
}

static size_t slot_of(uint64_t id, size_t cap)
{
    uint64_t x = id * 0x9e3779b97f4a7c15ull;
    return (size_t)(x >> 17) & (cap - 1);
}

fb__fr_comm *fb__fr_comm_find(uint64_t id)
{
    if (R.last && R.last->id == id)
        return R.last;
    if (!R.table)
        return NULL;
    for (size_t i = slot_of(id, R.table_cap), n = 0; n < R.table_cap;
         i = (i + 1) & (R.table_cap - 1), n++) {
        fb__fr_comm *c = R.table[i];
        if (!c)
            return NULL;
        if (c != TOMB && c->id == id)
            return c;
    }
    return NULL;
}

static int table_insert(fb__fr_comm *c)
{
    if ((R.table_used + 1) * 2 > R.table_cap) {
        size_t ncap = R.table_cap ? R.table_cap * 2 : 64;
        fb__fr_comm **nt = calloc(ncap, sizeof *nt);
        if (!nt)
            return -ENOMEM;
        size_t used = 0;
        for (size_t i = 0; i < R.table_cap; i++) {
            fb__fr_comm *o = R.table[i];
            if (!o || o == TOMB)
                continue;
            size_t j = slot_of(o->id, ncap);
            while (nt[j])
                j = (j + 1) & (ncap - 1);
            nt[j] = o;
            used++;
        }
        free(R.table);
        R.table = nt;
        R.table_cap = ncap;
        R.table_used = used;
    }
    size_t j = slot_of(c->id, R.table_cap);
    while (R.table[j] && R.table[j] != TOMB)
        j = (j + 1) & (R.table_cap - 1);
    if (!R.table[j])
        R.table_used++;
    R.table[j] = c;
    return 0;
}

void fb__fr_comm_forget(uint64_t id)
{
    if (!R.table)
        return;
    for (size_t i = slot_of(id, R.table_cap), n = 0; n < R.table_cap;
         i = (i + 1) & (R.table_cap - 1), n++) {
        fb__fr_comm *c = R.table[i];
        if (!c)
            return;
        if (c != TOMB && c->id == id) {
            R.table[i] = TOMB;
            if (R.last == c)
                R.last = NULL;
            free(c->send_seq);
            free(c->recv_seq);
            free(c);
            return;
        }
    }
}

static void write_comm_rec(uint32_t slot, const fb__fr_comm *c,
                           uint64_t parent_id, int first, int stride,
                           const char *name)
{
    fb__fr_comm_rec *r = &R.comms[slot];
    atomic_store_explicit(&r->seq, 0, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    r->comm_id = c->id;
    r->parent_id = parent_id;
    r->size = c->size;
    r->rank = c->rank;
    r->ranks_first = first;
    r->ranks_stride = stride;
    r->created_mono_ns = fb__now_ns();
    memset(r->name, 0, sizeof r->name);
    if (name)
        strncpy(r->name, name, sizeof r->name - 1);
    memset(r->reserved, 0, sizeof r->reserved);
    atomic_store_explicit(&r->seq, (uint64_t)slot + 1, memory_order_release);
}

fb__fr_comm *fb__fr_comm_register(uint64_t id, uint64_t parent_id, int size,
                                  int rank, int first, int stride,
                                  const char *name)
{
    if (!ready())
        return NULL;
    fb__fr_comm *c = fb__fr_comm_find(id);
    if (!c) {
        c = calloc(1, sizeof *c);
        if (!c)
            return NULL;
        c->id = id;
        c->table_slot = -1;
        if (table_insert(c)) {
            free(c);
            return NULL;
        }
    }
    if (c->size != size) {
        free(c->send_seq);
        free(c->recv_seq);
        c->send_seq = c->recv_seq = NULL;
    }
    c->size = size;
    c->rank = rank;
    if (c->table_slot < 0) {
        uint64_t n = atomic_load_explicit(&R.hdr->fr_comm_count,
                                          memory_order_relaxed);
        if (n < R.comm_slots) {
            c->table_slot = (int32_t)n;
            write_comm_rec((uint32_t)n, c, parent_id, first, stride, name);
            atomic_store_explicit(&R.hdr->fr_comm_count, n + 1,
                                  memory_order_release);
        }
    } else {
        write_comm_rec((uint32_t)c->table_slot, c, parent_id, first, stride,
                       name);
    }
    return c;
}

int fb_fr_comm(uint64_t comm_id, int size, int rank, const int *global_ranks,
               const char *name)
{
    if (size <= 0 || rank < 0 || rank >= size)
        return -EINVAL;
    if (!ready())
        return 0;
    int first = -1, stride = 0;
    if (global_ranks) {
        first = global_ranks[0];
        stride = size > 1 ? global_ranks[1] - global_ranks[0] : 1;
        for (int i = 1; i < size && stride; i++)
            if (global_ranks[i] - global_ranks[i - 1] != stride)
                stride = 0;
        if (stride <= 0)
            stride = 0;
    }
    return fb__fr_comm_register(comm_id, 0, size, rank, first, stride, name)
               ? 0 : -ENOMEM;
}

static uint32_t next_pair_seq(fb__fr_comm *c, int peer, int is_send)
{
    if (peer < 0 || peer >= c->size)
        return 0;
    uint32_t **arr = is_send ? &c->send_seq : &c->recv_seq;
    if (!*arr) {
        *arr = calloc((size_t)c->size, sizeof **arr);
        if (!*arr)
            return 0;
    }
    return ++(*arr)[peer];
}

uint64_t fb__fr_record(fb__fr_comm *c, fb_op op, int dtype, uint32_t elem_bytes,
                       uint64_t count, uint64_t out_count, int peer, int tag,
                       uint32_t flags, int state)
{
    return fb__fr_record_at(c, op, dtype, elem_bytes, count, out_count, peer, tag,
                            flags, state, NULL, 0);
}

/* The site's file name into the slot's fixed field: its last
 * FB__FR_SITE_FILE_MAX bytes when longer (the end of a name tells more
 * than its start), NUL-padded. */
static void put_site_file(char *dst, const char *file, size_t len)
{
    if (len > FB__FR_SITE_FILE_MAX) {
        file += len - FB__FR_SITE_FILE_MAX;
        len = FB__FR_SITE_FILE_MAX;
    }
    memset(dst, 0, FB__FR_SITE_FILE_MAX);
    memcpy(dst, file, len);
}

uint64_t fb__fr_record_at(fb__fr_comm *c, fb_op op, int dtype, uint32_t elem_bytes,
                          uint64_t count, uint64_t out_count, int peer, int tag,
                          uint32_t flags, int state, const char *site_file,
                          uint32_t site_line)
{
    if (!R.hdr || !c)
        return 0;
    R.last = c;
    uint64_t seq;
    uint32_t pair = 0;
    if (flags & FB__FR_F_P2P) {
        seq = ++c->p2p_seq;
        if (!(flags & FB__FR_F_ANY_SOURCE))
            pair = next_pair_seq(c, peer, op == FB_OP_SEND);
    } else {
        seq = ++c->coll_seq;
    }
    fb__seg_header *h = R.hdr;
    uint64_t idx = atomic_load_explicit(&h->fr_head, memory_order_relaxed);
    fb__fr_event *e = &R.ring[R.next_slot];
    if (++R.next_slot == R.ring_slots)
        R.next_slot = 0;
    uint64_t now = event_ns();

    atomic_store_explicit(&e->seq, 0, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    e->comm_id = c->id;
    e->coll_seq = seq;
    e->count = count;
    e->out_count = out_count;
    e->begin_mono_ns = now;
    e->end_mono_ns = 0;
    e->begin_wall_ns = now + R.wall_minus_mono_ns;
    e->step = atomic_load_explicit(&h->step, memory_order_relaxed);
    e->peer = peer;
    e->tag = tag;
    e->comm_size = c->size;
    e->comm_rank = c->rank;
    e->pair_seq = pair;
    e->elem_bytes = elem_bytes;
    e->op = (uint16_t)op;
    e->dtype = (uint8_t)dtype;
    e->state = (uint8_t)state;
    e->flags = flags;
    if (site_file && site_line) {
        const char *base = strrchr(site_file, '/');
        base = base ? base + 1 : site_file;
        e->site_line = site_line;
        put_site_file(e->site_file, base, strlen(base));
    } else {
        e->site_line = 0;
        memset(e->site_file, 0, sizeof e->site_file);
    }
    atomic_store_explicit(&e->seq, idx + 1, memory_order_release);
    atomic_store_explicit(&h->fr_head, idx + 1, memory_order_release);
    R.last_handle = idx + 1;
    R.last_slot = e;
    return idx + 1;
}

/* The slot of a live handle, or NULL when the ring has overwritten it. */
static fb__fr_event *live_slot(uint64_t handle)
{
    if (!handle || !R.hdr)
        return NULL;
    if (handle == R.last_handle)
        return R.last_slot; /* the newest event: it cannot be overwritten */
    uint64_t idx = handle - 1;
    uint64_t head = atomic_load_explicit(&R.hdr->fr_head, memory_order_relaxed);
    if (idx >= head || head - idx > R.ring_slots)
        return NULL;
    return &R.ring[idx % R.ring_slots];
}

static void event_state(uint64_t handle, int state, int beat);

void fb__fr_event_state(uint64_t handle, int state)
{
    event_state(handle, state, 1);
}

void fb__fr_event_raised(uint64_t handle)
{
    event_state(handle, FB__FR_COMPLETED, 0);
}

static void event_state(uint64_t handle, int state, int beat)
{
    fb__fr_event *e = live_slot(handle);
    if (!e)
        return;
    /* Completion time from the coarse clock (a few ns instead of tens;
     * tick resolution, ~1-4 ms): arrival times, which the analysis
     * compares across ranks, keep the precise clock. */
    uint64_t now = 0;
    if (state == FB__FR_COMPLETED) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
        now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
        if (now < e->begin_mono_ns)
            now = e->begin_mono_ns;
    }
    atomic_store_explicit(&e->seq, 0, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    e->state = (uint8_t)state;
    if (state == FB__FR_COMPLETED)
        e->end_mono_ns = now;
    atomic_store_explicit(&e->seq, handle, memory_order_release);
    /* A completed collective is progress, as NCCL's watchdog counts it: an
     * evaluation pass, a hand-written update or work after the last step
     * that keeps communicating is not a hang (it was, past --hang-timeout,
     * and blamed on a collective timeout).  A collective that never
     * completes still stops every beat of the ranks waiting in it; one
     * that raised is over, not progress (a loop retrying a collective on
     * a broken group would never be a hang). */
    if (state == FB__FR_COMPLETED && beat)
        fb__lib_beat(now);
}

void fb__fr_event_peer(uint64_t handle, fb__fr_comm *c, int peer)
{
    fb__fr_event *e = live_slot(handle);
    if (!e || !c)
        return;
    uint32_t pair = next_pair_seq(c, peer, 0);
    atomic_store_explicit(&e->seq, 0, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    e->peer = peer;
    e->pair_seq = pair;
    e->flags &= ~(uint32_t)FB__FR_F_ANY_SOURCE;
    atomic_store_explicit(&e->seq, handle, memory_order_release);
}

uint64_t fb_fr_begin(uint64_t comm_id, fb_op op, fb_dtype dtype,
                     uint64_t count, int peer)
{
    if (!ready())
        return 0;
    fb__fr_comm *c = fb__fr_comm_find(comm_id);
    if (!c)
        c = fb__fr_comm_register(comm_id, 0, 0, 0, -1, 0, NULL);
    if (!c)
        return 0;
    uint64_t in = count, out = count;
    uint64_t n = c->size > 0 ? (uint64_t)c->size : 1;
    if (op == FB_OP_ALLGATHER)
        out = count * n;
    else if (op == FB_OP_REDUCE_SCATTER)
        in = count * n;
    uint32_t flags = (op == FB_OP_SEND || op == FB_OP_RECV) ? FB__FR_F_P2P : 0;
    return fb__fr_record(c, op, (int)dtype, (uint32_t)fb_dtype_size(dtype), in,
                         out, peer, 0, flags, FB__FR_STARTED);
}

void fb_fr_end(uint64_t handle)
{
    fb__fr_event_state(handle, FB__FR_COMPLETED);
}
