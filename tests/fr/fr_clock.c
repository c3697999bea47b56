/*
 * fr_clock.c -- the flight recorder's event times agree with
 * CLOCK_MONOTONIC, whichever clock takes them (the TSC with anchors, or
 * clock_gettime when FIREBREAK_FR_CLOCK=monotonic or no usable TSC), and
 * never go backwards.  Events are spaced from nothing to 30 ms apart so
 * that both the extrapolated path and renewed anchors are exercised.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"
#include "firebreak/firebreak.h"
#include "fr/recorder.h"
#include "fr/ring.h"
#include "lib/segment.h"

#define EVENTS 600
#define TOLERANCE_NS 20000 /* conversion error allowed: 20 us (finding: 200 us) */

static void pause_ns(uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
    nanosleep(&ts, NULL);
}

int main(void)
{
    char job[32], name[FB__SEG_NAME_MAX];
    snprintf(job, sizeof job, "frclock%d", (int)getpid());
    fb__seg *seg = NULL;
    fb__seg_create_args a = {.job_id = job, .rank = 0, .world_size = 1};
    if (fb__seg_create(&seg, &a)) {
        fprintf(stderr, "fr_clock: cannot create a segment\n");
        return 1;
    }
    fb__seg_name(name, sizeof name, job, 0, 0);
    shm_unlink(name);
    fb__fr_bind(seg);
    fb_fr_comm(7, 1, 0, NULL, "clock");
    fb__seg_header *h = fb__seg_hdr(seg);
    uint32_t cap = h->fr_capacity;
    const fb__fr_event *ring = (const fb__fr_event *)(
        (char *)fb__seg_base(seg) + h->fr_offset +
        (size_t)fb__fr_comm_slots(cap) * FB__SEG_FR_ENTRY_SIZE);
    uint32_t slots = fb__fr_ring_slots(cap);

    int bad = 0;
    uint64_t prev = 0, worst = 0;
    for (int i = 0; i < EVENTS && bad < 5; i++) {
        /* Mostly back to back, with pauses of 50 us to 30 ms in between. */
        static const uint64_t gaps[] = {0, 0, 0, 0, 0, 50000, 0, 1500000,
                                        0, 0, 300000, 30000000};
        pause_ns(gaps[i % 12]);
        uint64_t t0 = fb__now_ns();
        uint64_t hd = fb_fr_begin(7, FB_OP_ALLREDUCE, FB_DTYPE_F32, 4, -1);
        uint64_t t1 = fb__now_ns();
        fb_fr_end(hd);
        uint64_t t2 = fb__now_ns();
        fb__fr_event e;
        if (!hd || !fb__fr_read_event(ring, slots, hd - 1, &e)) {
            fprintf(stderr, "fr_clock: event %d was not recorded\n", i);
            return 1;
        }
        uint64_t off = e.begin_mono_ns + TOLERANCE_NS < t0 ? t0 - e.begin_mono_ns
                       : e.begin_mono_ns > t1 + TOLERANCE_NS ? e.begin_mono_ns - t1
                                                            : 0;
        if (off) {
            fprintf(stderr, "fr_clock: event %d begin_mono_ns %llu is %llu ns "
                    "outside [%llu, %llu]\n", i, (unsigned long long)e.begin_mono_ns,
                    (unsigned long long)off, (unsigned long long)t0,
                    (unsigned long long)t1);
            bad++;
        }
        uint64_t d = e.begin_mono_ns > t1 ? e.begin_mono_ns - t1
                     : e.begin_mono_ns < t0 ? t0 - e.begin_mono_ns : 0;
        if (d > worst)
            worst = d;
        if (e.begin_mono_ns < prev) {
            fprintf(stderr, "fr_clock: event %d begins %llu ns before the "
                    "previous one\n", i, (unsigned long long)(prev - e.begin_mono_ns));
            bad++;
        }
        prev = e.begin_mono_ns;
        if (e.state != FB__FR_COMPLETED || e.end_mono_ns < e.begin_mono_ns ||
            e.end_mono_ns > t2 + TOLERANCE_NS) {
            fprintf(stderr, "fr_clock: event %d end_mono_ns %llu (begin %llu, "
                    "done by %llu)\n", i, (unsigned long long)e.end_mono_ns,
                    (unsigned long long)e.begin_mono_ns, (unsigned long long)t2);
            bad++;
        }
    }

    uint32_t clock = atomic_load(&h->fr_clock);
    uint64_t hz = atomic_load(&h->fr_tsc_hz);
    const char *want = getenv("FIREBREAK_FR_CLOCK");
    if (clock != FB_CLOCK_TSC && clock != FB_CLOCK_MONOTONIC) {
        fprintf(stderr, "fr_clock: header fr_clock is %u\n", clock);
        bad++;
    } else if (want && !strcmp(want, "monotonic") && clock != FB_CLOCK_MONOTONIC) {
        fprintf(stderr, "fr_clock: FIREBREAK_FR_CLOCK=monotonic but fr_clock is %u\n",
                clock);
        bad++;
    } else if (clock == FB_CLOCK_TSC && (hz < 100000000ull || hz > 20000000000ull)) {
        fprintf(stderr, "fr_clock: fr_tsc_hz %llu is not a TSC rate\n",
                (unsigned long long)hz);
        bad++;
    }
    printf("fr_clock: clock %s, tsc %.3f MHz, %d events, worst offset %llu ns\n",
           clock == FB_CLOCK_TSC ? "tsc" : "monotonic", (double)hz / 1e6, EVENTS,
           (unsigned long long)worst);
    fb__fr_bind(NULL);
    fb__seg_close(seg);
    return bad ? 1 : 0;
}
