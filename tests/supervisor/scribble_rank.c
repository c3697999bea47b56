/*
 * scribble_rank.c -- a hostile rank for supervisor tests: it attaches like
 * any rank, steps a few times, then one rank writes random bytes over its
 * own segment every millisecond (through the library's internal handle,
 * lib.h), as a wild pointer or a malicious program would.  The others keep
 * stepping.  The supervisor must not crash, and must name the segment.
 *
 *   fb-test-scribbler [--scribble-rank R]
 *                     [--mode all|live|reports|truncate|truncate0|
 *                             future-beat|bad-phase]
 *                     [--seconds S]
 *                     [--delay-ms M]
 *
 * --mode all: the whole segment, identity and magic included.
 * --mode live: everything after the identity (progress, end record, heads,
 *   reports, flight-recorder ring), so the reader's copies are all that
 *   stands between it and the garbage offsets a rewritten header would give.
 * --mode reports: a rank that keeps to the protocol but not to sense: every
 *   ms a report with random kind, fields and text (no NUL), published
 *   properly, and random flight-recorder slots behind a plausible fr_head.
 *   The segment stays consistent, so the supervisor reads garbage for the
 *   whole time instead of giving up on the segment.
 * --mode truncate, truncate0: ftruncate() its own segment file, once, to
 *   one page (the header survives; the rank keeps stepping) or to 0 bytes
 *   (the rank can no longer touch it: it sleeps, then leaves with _exit).
 *   Readers that load from the lost pages take SIGBUS unless guarded.
 * --mode future-beat, bad-phase: one write, then silence for --seconds:
 *   a heartbeat far in the future (a reader that took it as it is saw the
 *   rank as never silent), or a phase that is none of the library's (it had
 *   no time limit); the rank then stops stepping, hung, and exits 0.
 * --delay-ms: step this long before scribbling (default 100), so a reader
 *   started beside it attaches first.
 */
#include <fcntl.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "firebreak/firebreak.h"
#include "lib/lib.h"
#include "lib/segment.h"

static uint64_t rng_state;

static uint64_t next(void)
{
    uint64_t x = rng_state; /* xorshift64 */
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return rng_state = x;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void fill(void *p, size_t n)
{
    unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        b[i] = (unsigned char)next();
}

/* One well-published report of random content, and random ring slots. */
static void scribble_reports(fb__seg *seg)
{
    fb__seg_header *h = fb__seg_hdr(seg);
    fb__seg_report *ring =
        (fb__seg_report *)((char *)fb__seg_base(seg) + FB__SEG_HEADER_SIZE);
    uint64_t idx = atomic_fetch_add(&h->report_head, 1);
    fb__seg_report *r = &ring[idx % FB__SEG_REPORT_CAPACITY];
    atomic_store(&r->seq, 0);
    fill((char *)r + sizeof r->seq, sizeof *r - sizeof r->seq);
    r->kind = (uint32_t)(next() % 16);
    atomic_store(&r->seq, idx + 1);

    uint32_t cap = h->fr_capacity;
    unsigned char *area = (unsigned char *)fb__seg_base(seg) + h->fr_offset;
    for (int i = 0; i < 8; i++)
        fill(area + (next() % cap) * FB__SEG_FR_ENTRY_SIZE, FB__SEG_FR_ENTRY_SIZE);
    atomic_fetch_add(&h->fr_head, next() % 64);
    atomic_store(&h->fr_comm_count, next() % 1000);
}

/* Shrink our own segment file to `size` bytes, as a hostile rank could. */
static int truncate_own(fb__seg *seg, off_t size)
{
    const fb__seg_header *h = fb__seg_hdr(seg);
    char name[FB__SEG_NAME_MAX];
    if (fb__seg_name(name, sizeof name, h->job_id, h->attempt, h->rank))
        return -1;
    int fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    int rc = ftruncate(fd, size);
    close(fd);
    return rc;
}

int main(int argc, char **argv)
{
    int scribble_rank = 0, live_only = 0, reports = 0, truncate_to = -1, one_write = 0;
    double seconds = 10;
    long delay_ms = 100;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--scribble-rank") && i + 1 < argc)
            scribble_rank = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--mode") && i + 1 < argc) {
            i++;
            live_only = !strcmp(argv[i], "live");
            reports = !strcmp(argv[i], "reports");
            if (!strcmp(argv[i], "truncate"))
                truncate_to = (int)sysconf(_SC_PAGESIZE);
            else if (!strcmp(argv[i], "truncate0"))
                truncate_to = 0;
            else if (!strcmp(argv[i], "future-beat"))
                one_write = 1;
            else if (!strcmp(argv[i], "bad-phase"))
                one_write = 2;
        }
        else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (!strcmp(argv[i], "--delay-ms") && i + 1 < argc)
            delay_ms = atol(argv[++i]);
    }
    int rc = fb_init();
    if (rc) {
        fprintf(stderr, "fb_init: %s\n", fb_strerror(rc));
        return 3;
    }
    rng_state = 0x9e3779b97f4a7c15ull ^ ((uint64_t)getpid() << 17);
    uint64_t step = 0;
    for (long waited = 0; waited < delay_ms; waited += 20) {
        sleep_ms(20);
        fb_step(++step);
    }
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    fb__seg *seg = fb__lib_seg();
    int me = fb_rank() == scribble_rank && seg;
    if (me) {
        if (truncate_to >= 0)
            printf("rank %d: truncating its segment to %d bytes\n", fb_rank(),
                   truncate_to);
        else
            printf("rank %d: scribbling over its segment (%s)\n", fb_rank(),
                   reports ? "reports and ring" : live_only ? "live fields" : "all of it");
        fflush(stdout);
    }
    if (me && one_write) {
        fb__seg_header *h = fb__seg_hdr(seg);
        if (one_write == 1)
            atomic_store_explicit(&h->heartbeat_mono_ns, UINT64_MAX / 2, memory_order_release);
        else
            atomic_store_explicit(&h->phase, 99, memory_order_release);
        printf("rank %d: %s, then silent\n", fb_rank(),
               one_write == 1 ? "a heartbeat from the future" : "phase 99");
        fflush(stdout);
        sleep_ms((long)(seconds * 1000));
        return 0;
    }
    if (me && truncate_to >= 0) {
        if (truncate_own(seg, truncate_to)) {
            perror("truncate own segment");
            return 4;
        }
        if (truncate_to == 0) {
            /* fb_step, fb_finalize and the exit record would all store
             * into the lost header page and die of SIGBUS here. */
            sleep_ms((long)(seconds * 1000));
            _exit(0);
        }
        me = 0; /* the header is still there: step like the others */
    }
    unsigned char *base = fb__seg_base(seg);
    size_t size = fb__seg_size(seg);
    size_t from = live_only ? offsetof(fb__seg_header, phase) : 0;
    unsigned long n = 0;
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &t);
        if ((double)(t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) / 1e9 > seconds)
            break;
        if (me && reports) {
            scribble_reports(seg);
            if (++n % 10 == 0)
                fb_step(++step); /* alive, as far as heartbeats go */
            sleep_ms(1);
        } else if (me) {
            for (size_t off = from; off + 8 <= size; off += 8) {
                uint64_t v = next();
                memcpy(base + off, &v, 8);
            }
            sleep_ms(1);
        } else {
            fb_step(++step);
            sleep_ms(10);
        }
    }
    printf("done rank %d\n", fb_rank());
    fb_finalize();
    return 0;
}
