/*
 * fbw1.h -- the line protocol between the per-node watcher (`firebreak
 * watch`, watcher.c) and the slurm launcher's reader (slurm.c), version
 * fbw1 (docs/slurm.md).  This module is its single home: the watcher
 * writes every line with fb__fbw1_format, the supervisor reads every line
 * with fb__fbw1_parse, and both use the bounds below, so a line the one
 * writes is a line the other accepts (tests/slurm/test_fbw1.c round-trips
 * every kind; fuzz/fbw1_line.c fuzzes the parser).
 *
 * One message per line, fields separated by one space, at most
 * FB__FBW1_LINE_MAX bytes before the newline, no control bytes:
 *
 *   fbw1 hello NODE NODEID PID [HOST]   the watcher of NODE started; HOST:
 *                                       its machine's hostname (optional)
 *   fbw1 attach RANK PID                RANK created its segment
 *   fbw1 beat RANK STEP PHASE AGE_MS    progress (STEP -1: none yet),
 *                                       heartbeat age in milliseconds
 *   fbw1 end RANK HOW CODE              RANK's process is gone; HOW is
 *                                       exit | signal | finalized | vanished
 *   fbw1 report RANK IDX KIND CODE STEP BYTES V1 V2 WALL_NS TEXT...
 *                                       RANK's report number IDX (segment
 *                                       report ring, docs/segment.md);
 *                                       TEXT is the rest of the line
 *   fbw1 health NODE VERDICT REASON...  `watch --health`: ok | warn | fail |
 *                                       error, then a free-text reason
 *   fbw1 bye NODE                       every rank of NODE has ended
 *   fbw1 alive NODE                     the watcher of NODE is alive (every
 *                                       interval, ranks or none)
 *   fbw1 snapped NODE ATTEMPT COUNT     after a `snap`: COUNT segments of
 *                                       NODE's ranks are in the run directory
 *   fbw1 peer NODE STEP RANK0 COUNT     NODE's memory holds a peer copy
 *                                       (received over fbr1, every hash
 *                                       checked) of the shards of ranks
 *                                       RANK0 .. RANK0+COUNT-1 of STEP
 *
 * Three requests go the other way, from the supervisor to every watcher
 * (srun's stdin, broadcast with --input=all):
 *
 *   fbw1 snap ATTEMPT                   a hang: write the flight-recorder
 *                                       snapshots of ATTEMPT's ranks into
 *                                       the run directory, then `snapped`
 *   fbw1 drop STEP [KEEP [KEEP]]        every rank can restore STEP: remove
 *                                       the older steps from node memory
 *                                       (own shards and peer copies), but
 *                                       the KEEP steps (older ones still
 *                                       needed: the newest step that
 *                                       outlives the loss of any one node,
 *                                       and the one being replicated)
 *   fbw1 send STEP                      replicate STEP to the peers (once
 *                                       complete in this node's memory), on
 *                                       a lane of its own: every node
 *                                       copies the same steps
 *   fbw1 keep                           the supervisor is about to stop the
 *                                       watchers and goes on: keep node
 *                                       memory (a watcher stopped without
 *                                       it removes it: the supervisor is
 *                                       gone)
 *
 * The lines come from other nodes through srun's stdout: the parser takes
 * any bytes and either rejects them or fills a message within the bounds.
 */
#ifndef FB_SUPERVISOR_FBW1_H
#define FB_SUPERVISOR_FBW1_H

#include <stddef.h>

#define FB__FBW1_LINE_MAX 512   /* bytes of a line, without its newline */
#define FB__FBW1_NODE_MAX 64    /* node name, with its NUL */
#define FB__FBW1_NODEID_MAX 1023 /* a hello's NODEID (the launcher's node limit - 1) */
#define FB__FBW1_PHASE_MAX 15
#define FB__FBW1_REPORT_KIND_MAX 64
#define FB__FBW1_ATTEMPT_MAX 1000000 /* snap, snapped */
#define FB__FBW1_COUNT_MAX 1024  /* snapped: a watcher's ranks (FB__WATCH_MAX_LOCAL) */
#define FB__FBW1_STEP_MAX 9999999999LL /* peer: a checkpoint step (FB__REPL_MAX_STEP) */

typedef enum {
    FB_FBW1_HELLO = 1,
    FB_FBW1_ATTACH,
    FB_FBW1_BEAT,
    FB_FBW1_END,
    FB_FBW1_HEALTH,
    FB_FBW1_BYE,
    FB_FBW1_REPORT,
    FB_FBW1_ALIVE,
    FB_FBW1_SNAP,       /* request: supervisor -> watchers */
    FB_FBW1_SNAPPED,
    FB_FBW1_PEER,
    FB_FBW1_DROP,       /* request: supervisor -> watchers */
    FB_FBW1_KEEP,       /* request: supervisor -> watchers */
    FB_FBW1_SEND        /* request: supervisor -> watchers */
} fb__fbw1_kind;

#define FB__FBW1_DROP_KEEP_MAX 2 /* KEEP steps of a drop */

typedef enum {
    FB_FBW1_END_EXIT = 1,
    FB_FBW1_END_SIGNAL,
    FB_FBW1_END_FINALIZED,
    FB_FBW1_END_VANISHED
} fb__fbw1_end_how;

typedef enum {
    FB_FBW1_OK = 1,
    FB_FBW1_WARN,
    FB_FBW1_FAIL,
    FB_FBW1_ERROR   /* the watcher could not run the checks */
} fb__fbw1_verdict;

typedef struct fb__fbw1_msg {
    fb__fbw1_kind kind;
    char node[FB__FBW1_NODE_MAX];   /* hello, health, bye, alive, snapped,
                                       peer                             */
    char host[FB__FBW1_NODE_MAX];   /* hello: hostname; "": not given   */
    int nodeid;                     /* hello                            */
    long long pid;                  /* hello, attach                    */
    int rank;                       /* attach, beat, end, report; peer:
                                       the first rank                   */
    long long step;                 /* beat, peer, drop, send           */
    long long keep[FB__FBW1_DROP_KEEP_MAX]; /* drop: steps kept       */
    int nkeep;                      /* drop: how many of keep[]         */
    int phase;                      /* beat                             */
    long long age_ms;               /* beat                             */
    fb__fbw1_end_how how;           /* end                              */
    int code;                       /* end: exit status or signal       */
    fb__fbw1_verdict verdict;       /* health                           */
    char reason[256];               /* health                           */
    long long rep_idx;              /* report: its index in the ring    */
    int rep_kind, rep_code;         /* report: fb__report_kind, code    */
    long long rep_step, rep_bytes, rep_v1, rep_v2, rep_wall_ns;
    char rep_text[208];             /* report: free text                */
    int attempt;                    /* snap, snapped                    */
    int count;                      /* snapped: segments written; peer:
                                       ranks from `rank` on             */
} fb__fbw1_msg;

/* Parse one line (without its newline; need not be NUL-terminated).
 * 0, or -EINVAL for anything that is not a well-formed fbw1 message: an
 * unknown kind, a missing or extra field, a number that is not plain
 * decimal or out of its bounds, a bad node name, a control byte or a NUL
 * anywhere, more than FB__FBW1_LINE_MAX bytes.  Ranks are bounded by
 * max_rank (exclusive). */
int fb__fbw1_parse(const char *line, size_t len, int max_rank, fb__fbw1_msg *m);

/* Write `m` as one line, with its newline and a terminating NUL, into
 * line[size].  Control bytes in the free text (reason, rep_text) are
 * written as '?'.  Returns the line's length (newline included), or
 * -EINVAL (a field outside the bounds the parser enforces, a bad node
 * name, an unknown kind) or -EMSGSIZE (does not fit `size`, or over
 * FB__FBW1_LINE_MAX).  Whatever it writes, fb__fbw1_parse accepts (with a
 * max_rank above m->rank) and gives back `m`. */
int fb__fbw1_format(const fb__fbw1_msg *m, char *line, size_t size);

/* Split what a stream gave into lines: call on_line for each complete
 * line in buf[0..len) (without its newline), skipping the rest of a line
 * that was over FB__FBW1_LINE_MAX (*dropping carries that across calls),
 * move what is left of an unfinished line to the front of buf and return
 * its length.  buf must hold at least FB__FBW1_LINE_MAX bytes, so that a
 * line of the maximum length always fits. */
size_t fb__fbw1_lines(char *buf, size_t len, int *dropping,
                      void (*on_line)(void *ctx, const char *line, size_t n), void *ctx);

/* A node name as Slurm writes it: [A-Za-z0-9._-], 1..63 characters. */
int fb__fbw1_node_name_ok(const char *s);

/* `firebreak watch --peers`: per node of the attempt, comma-separated,
 * the addresses it sends its copies to, '+'-separated (at most
 * FB__PEER_COPIES_MAX, each a node name), or "-" for none; at most
 * FB__FBW1_NODEID_MAX + 1 entries. */
#define FB__PEER_COPIES_MAX 8   /* --peer-copies: a node's peers */
#define FB__PEERS_ENTRY_MAX (FB__PEER_COPIES_MAX * FB__FBW1_NODE_MAX)

/* Entry node_id of list into to (size bytes), "" for "-" or no such
 * entry.  0, or -EINVAL for a list that is not one of node addresses. */
int fb__fbw1_peers_entry(const char *list, long long node_id, char *to, size_t size);
/* Split an entry's '+'-separated addresses into addr.  How many, or
 * -EINVAL (an empty or bad name, more than FB__PEER_COPIES_MAX). */
int fb__fbw1_peers_split(const char *entry, char addr[][FB__FBW1_NODE_MAX]);

const char *fb__fbw1_end_how_name(fb__fbw1_end_how how);
const char *fb__fbw1_verdict_name(fb__fbw1_verdict v);

#endif
