/*
 * fr.h -- flight-recorder analysis, the tool side (library fb_fr_analyze).
 *
 * Reads every rank's evidence -- firebreak rings (live segments in
 * /dev/shm or files written by fb__seg_dump) and PyTorch flight-recorder
 * dumps (JSON or pickle, versions 2.2 to 2.10) -- merges the ranks and
 * says what went wrong: which ranks never entered the collective where
 * progress stopped, which ranks disagree about an operation, which arrive
 * late.  `firebreak fr analyze` prints it; the supervisor calls it on a
 * hang.  Formats and rules: docs/flight-recorder.md.
 */
#ifndef FB_FR_FR_H
#define FB_FR_FR_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/jsonw.h"

/* Version of the --json / fb__fr_result_json object (docs/flight-recorder.md). */
#define FB__FR_RESULT_VERSION "1.1"

typedef struct fb__fr_result fb__fr_result;

typedef struct fb__fr_options {
    /* A pending operation younger than this (against the time the
     * evidence was taken) is in flight, not stuck.  Default 1 s; PyTorch
     * dumps are written on a timeout, so there it is not applied. */
    double min_wait_s;
    /* Mean lateness at collectives below this is noise.  Default 200 us. */
    double late_threshold_s;
    /* Findings kept per kind (the rest are counted).  Default 20. */
    int max_findings;
    /* 1: a path given that cannot be opened (it does not exist, is a FIFO
     * or a device, belongs to another user, ...) fails the analysis with
     * its name in err, as `fr analyze` does for an INPUT the user named.
     * 0 (the default): a warning, as for the supervisor, whose attempt's
     * directories may be absent.  Files inside a directory are warnings
     * either way; a file that opens but is no dump is a warning too. */
    int inputs_must_open;
    /* > 0: the job's size as the caller knows it (the supervisor's): a
     * ring that states a larger world is held to it, so that what a rank
     * wrote into its own ring cannot size the analysis's arrays (a ring's
     * communicator sizes are bounded by the world it states).  0: none. */
    int world_max;
} fb__fr_options;

void fb__fr_options_init(fb__fr_options *opt);

/*
 * Analyze `npaths` inputs: files (rings, dumps) or directories holding one
 * file per rank; a name "/fb.<job>.<attempt>.<rank>" opens a live segment.
 * opt may be NULL.  Returns 0 and *out (free with fb__fr_result_free) when
 * at least one rank's evidence was read; files that could not be read
 * become warnings in the result.  Returns FB_EFORMAT / -ENOENT / ... with a
 * message naming the file in err when nothing usable was read, and -ENOMEM
 * when memory ran out anywhere (never a verdict made without a rank's
 * evidence or a finding).
 */
int fb__fr_analyze_paths(const char *const *paths, int npaths,
                         fb__fr_result **out, char *err, size_t errsz);

/*
 * PATH as a run directory (PATH/fr/attempt-<N>/, the snapshots the
 * supervisor keeps of a failed attempt) or a run's fr/ (PATH/attempt-<N>/):
 * the newest attempt's snapshot directory into fr, and PyTorch's dumps of
 * that attempt into torch when PATH/[fr/]torch/attempt-<N> holds any, else
 * "".  Returns N (and the number of attempts with snapshots in *count), or
 * -1 when PATH is neither (or a path does not fit in size).
 */
long fb__fr_newest_attempt(const char *path, char *fr, char *torch, size_t size,
                           int *count);
int fb__fr_analyze_paths_opt(const char *const *paths, int npaths,
                             const fb__fr_options *opt, fb__fr_result **out,
                             char *err, size_t errsz);

/* Verdicts (docs/flight-recorder.md).  incomplete: nothing decided, and
 * ranks of the world have no evidence.  A decided verdict (hang, mismatch,
 * slow) stays one when evidence is missing; the missing ranks are a
 * missing_dump finding either way.  Names: fb__fr_verdict_name. */
typedef enum fb__fr_verdict_code {
    FB__FR_UNDECIDED = 0,  /* "undecided" */
    FB__FR_HANG,           /* "hang"      */
    FB__FR_MISMATCH,       /* "mismatch"  */
    FB__FR_SLOW,           /* "slow"      */
    FB__FR_OK,             /* "ok"        */
    FB__FR_INCOMPLETE,     /* "incomplete" */
    FB__FR_VERDICT_COUNT_
} fb__fr_verdict_code;

/* Kinds of findings, in the order they are listed (docs/flight-recorder.md).
 * Names: fb__fr_finding_kind_name. */
typedef enum fb__fr_finding_kind {
    FB__FR_MISSING_RANKS = 0, /* "missing_ranks"  */
    FB__FR_TYPE_MISMATCH,     /* "type_mismatch"  */
    FB__FR_SIZE_MISMATCH,     /* "size_mismatch"  */
    FB__FR_DTYPE_MISMATCH,    /* "dtype_mismatch" */
    FB__FR_STATE_MISMATCH,    /* "state_mismatch" */
    FB__FR_P2P_MISMATCH,      /* "p2p_mismatch"   */
    FB__FR_LATE_RANKS,        /* "late_ranks"     */
    FB__FR_MISSING_DUMP,      /* "missing_dump"   */
    FB__FR_FINDING_KIND_COUNT_
} fb__fr_finding_kind;

/* The name in --json and text output, or NULL when v / k is out of range. */
const char *fb__fr_verdict_name(fb__fr_verdict_code v);
const char *fb__fr_finding_kind_name(fb__fr_finding_kind k);
/* The code of a name, or -1 (for readers of the JSON result). */
int fb__fr_verdict_from_name(const char *name);
int fb__fr_finding_kind_from_name(const char *name);

/* The verdict (FB__FR_UNDECIDED for a NULL result), and its name. */
fb__fr_verdict_code fb__fr_verdict_kind(const fb__fr_result *r);
const char *fb__fr_verdict(const fb__fr_result *r);

/* The global ranks at fault (hang: never entered where progress stopped;
 * mismatch: disagree with the majority; slow: late ranks), at most `max`
 * into ranks (may be NULL).  Returns how many there are. */
int fb__fr_culprit_ranks(const fb__fr_result *r, int *ranks, int max);

/* One line for the journal and the console (control bytes from dumps
 * are '?'), e.g.
 * "hang: rank 2 never entered all_reduce #6 on world (0x...); 3 ranks
 * waiting up to 12.0 s; rank 2 last completed all_reduce #5". */
void fb__fr_summary(const fb__fr_result *r, char *buf, size_t size);

/* The result as one JSON object (verdict, culprits, findings, warnings,
 * ranks); see docs/flight-recorder.md.  0 or -ENOMEM. */
int fb__fr_result_json(const fb__fr_result *r, fb__jsonw *w);

/* The same with every list (culprits, each finding's ranks, warnings) cut
 * to its first max_list entries; culprit_count, rank_count and
 * warnings_not_listed still give the whole.  The supervisor journals a
 * hang's verdict this way, so a group of a million ranks stays a few
 * kilobytes that the report can read. */
int fb__fr_result_json_max(const fb__fr_result *r, fb__jsonw *w, size_t max_list);

/* The result for people. */
void fb__fr_result_text(const fb__fr_result *r, FILE *f);

void fb__fr_result_free(fb__fr_result *r);

/* ---- Lateness, live (lateness.c) ----
 *
 * The supervisor's continuous straggler check over the live rings: each
 * pass reads only the entries a rank wrote since the last pass, gathers
 * every rank's arrival at each collective on a communicator that spans
 * the job, and keeps per rank a sliding window of its lateness (arrival
 * minus the mean arrival of the others) and of how often it came last.
 * The rule that names a straggler is fb__fr_late_judge, a pure function.
 * docs/flight-recorder.md, "Live lateness". */

typedef struct fb__fr_late_rule {
    int window;             /* collectives per rank in the window (64)       */
    int min_collectives;    /* none judged with fewer in the window (32)     */
    double last_share_on;   /* last to arrive in >= this share ... (0.5)     */
    double late_on_s;       /* ... and mean lateness >= max(this (5 ms),     */
    double late_step_frac;  /*     this x the step time (0.05))              */
    double last_share_off;  /* flagged: ends below this share (0.25) or ...  */
    double off_ratio;       /* ... below off_ratio x the threshold (0.5)     */
} fb__fr_late_rule;

void fb__fr_late_rule_init(fb__fr_late_rule *rule);

/* One rank's window: n collectives, last in `last` of them, mean
 * lateness mean_s (negative: early). */
typedef struct fb__fr_late_window {
    uint32_t n, last;
    double mean_s;
} fb__fr_late_window;

/* The rule: 1 when the rank is (still) a straggler, given whether it was
 * flagged before (hysteresis) and the job's step time (0: unknown). */
int fb__fr_late_judge(const fb__fr_late_rule *rule, const fb__fr_late_window *w,
                      double step_s, int flagged);

typedef struct fb__fr_late fb__fr_late;
struct fb__seg;

/* A tracker for `world` ranks (1 .. 1<<20); rule NULL: the defaults.
 * 0, -EINVAL or -ENOMEM. */
int fb__fr_late_new(fb__fr_late **out, int world, const fb__fr_late_rule *rule);
void fb__fr_late_free(fb__fr_late *t);

/* Read rank's entries written since its last feed, at most `budget` of
 * them, from a ring area (ring.h: `capacity` slots at `area`, fr_head
 * `head`; `wall_off_ns` turns its times into wall-clock ns).  An entry
 * being rewritten stops the feed (read next time); one overwritten is
 * skipped.  Returns how many entries were read. */
uint32_t fb__fr_late_feed_ring(fb__fr_late *t, int rank, const void *area,
                               uint32_t capacity, uint64_t head,
                               uint64_t wall_off_ns, uint32_t budget);
/* The same from a mapped segment (its fr area and live head). */
uint32_t fb__fr_late_feed_seg(fb__fr_late *t, int rank, const struct fb__seg *seg,
                              uint32_t budget);

/* Apply the rule to every rank with the step time step_s (0: unknown).
 * Ranks whose state changed go to changed[] (at most max; the rest wait
 * for the next call).  Returns how many are in changed[]. */
int fb__fr_late_update(fb__fr_late *t, double step_s, int *changed, int max);

/* Rank's window and flag; -EINVAL for a rank out of range. */
int fb__fr_late_get(const fb__fr_late *t, int rank, fb__fr_late_window *w,
                    int *flagged);
/* Collectives every member reached (counted), and those given up on
 * (a member never showed, or the table of open ones was full). */
uint64_t fb__fr_late_complete(const fb__fr_late *t);
uint64_t fb__fr_late_dropped(const fb__fr_late *t);

#endif
