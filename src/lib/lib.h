/*
 * lib.h -- state of libfirebreak inside a rank, shared by the library's
 * components (checkpoint engine, flight recorder, fault injection).
 * Internal: not installed, not part of the public API.
 */
#ifndef FB_LIB_LIB_H
#define FB_LIB_LIB_H

#include <stddef.h>
#include <stdint.h>

#include "firebreak/firebreak.h"
#include "lib/segment.h"

/* This rank's segment, or NULL when not attached. */
fb__seg *fb__lib_seg(void);
/* The phase this rank's segment says (FB_PHASE_TRAIN without one). */
fb_phase fb__lib_phase(void);
/* A heartbeat at `now` (CLOCK_MONOTONIC ns, the coarse clock will do):
 * the flight recorder's, at each completed collective (recorder.c). */
void fb__lib_beat(uint64_t now);

/* Report to the supervisor through the segment (no-op when detached). */
void fb__lib_report(fb__report_kind kind, int32_t code, uint64_t step,
                    uint64_t bytes, uint64_t value1, uint64_t value2,
                    const char *text);

/* The checkpoint directory the supervisor chose (FIREBREAK_CKPT_DIR, else
 * <run_dir>/checkpoints), or NULL. */
const char *fb__lib_ckpt_dir(void);

/* ---- messages to the user (error.c) ---- */

/* "firebreak: " and FMT's text (a trailing newline dropped) as one line on
 * stderr; while this thread keeps its messages (fb__say_keep), kept for
 * the caller instead: the Python binding raises them in firebreak.Error,
 * or writes them to sys.stderr.  Not for the last words before the
 * process kills itself (fault injection): those go straight to stderr. */
void fb__say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The same, only for a thread that keeps its messages: what another
 * thread already said on stderr, told again to the caller it concerns (a
 * background save's failure, returned by fb_ckpt_wait). */
void fb__say_to_keeper(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Where a thread keeps its messages: one a line, without "firebreak: "
 * and without the last newline; a message that does not fit is left out,
 * "..." in its place.  The caller's (on its stack): the thread's storage
 * holds only the pointer, so a module loaded with dlopen can use it. */
typedef struct fb__say_buf {
    char text[2048];
    size_t len;
    int cut;
} fb__say_buf;

/* Keep this thread's messages in B from now on (emptied first); NULL:
 * stop keeping them. */
void fb__say_keep(fb__say_buf *b);

/* ---- fault injection (inject.c) ---- */

#define FB__INJECT_MAX 16

typedef struct fb__inject_fault {
    fb__inject_kind kind;
    int rank;           /* -1: every rank                              */
    int attempt;        /* -1: every attempt; default 0 (the first)    */
    int has_step;
    uint64_t step;      /* in-process trigger: at fb_step(step)        */
    int has_after;
    double after_s;     /* supervisor-side trigger: seconds after launch */
    int code;           /* exit code (EXIT)                            */
    double factor;      /* SLOW: step time multiplier                  */
    char tensor[FB__SEG_SDC_NAME_MAX]; /* FLIP: the tensor ("": the first) */
    int fired;
} fb__inject_fault;

typedef struct fb__inject_plan {
    fb__inject_fault faults[FB__INJECT_MAX];
    int count;
} fb__inject_plan;

/* Parse a spec like "kill:rank=1,step=40;hang:rank=2,after=5s".  On error
 * returns -EINVAL and writes a message naming the bad part into err. */
int fb__inject_parse(const char *spec, fb__inject_plan *plan, char *err,
                     size_t err_size);
/* after= is at most this many seconds (30 days). */
#define FB__INJECT_AFTER_MAX_S (30.0 * 86400)
/* Every fault must name a rank of a job of `world` ranks (rank=* always
 * does) and an attempt the job may reach (at most max_restarts; < 0: not
 * checked): 0, or -EINVAL with a message naming the rank or attempt. */
int fb__inject_check_job(const fb__inject_plan *plan, int world,
                         int max_restarts, char *err, size_t err_size);
const char *fb__inject_kind_name(fb__inject_kind kind);

/* Arm the in-process faults meant for (rank, attempt). */
void fb__inject_arm(const fb__inject_plan *plan, int rank, int attempt);
/* Called by fb_step(); fires a due fault.  `step_ns` is the last step's
 * duration (for SLOW). */
void fb__inject_step(uint64_t step, uint64_t step_ns);
/* sdc.c: flip a bit in a tensor registered for the SDC check (FLIP). */
int fb__sdc_flip(const char *name, char *hit, size_t hit_size);

/* 1 when any in-process fault is armed (fb_step's fast check). */
extern int fb__inject_armed;

#endif
