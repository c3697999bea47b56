/*
 * slurm.h -- `firebreak run --launcher slurm` (slurm.c) and the line
 * protocol of the per-node watcher (`firebreak watch`, src/cli/cmd_watch.c).
 *
 * Inside an allocation the supervisor starts two job steps per attempt on
 * the chosen nodes: the ranks (`srun -K1 -m block ...`) and one watcher per
 * node (`srun --ntasks-per-node=1 firebreak watch ...`).  Each watcher maps
 * its node's rank segments and writes status lines to stdout; Slurm's I/O
 * forwarding carries them to the supervisor, which polls the srun's stdout.
 *
 * Watcher protocol, version fbw1 (docs/slurm.md): one line per message,
 * fields separated by one space, at most FB__SLURM_LINE_MAX bytes:
 *
 *   fbw1 hello NODE NODEID PID          the watcher of NODE started
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
 */
#ifndef FB_SUPERVISOR_SLURM_H
#define FB_SUPERVISOR_SLURM_H

#include <stddef.h>

#define FB__SLURM_LINE_MAX 512
#define FB__SLURM_NODE_MAX 64 /* node name, with its NUL */

typedef enum {
    FB_SLURM_MSG_HELLO = 1,
    FB_SLURM_MSG_ATTACH,
    FB_SLURM_MSG_BEAT,
    FB_SLURM_MSG_END,
    FB_SLURM_MSG_HEALTH,
    FB_SLURM_MSG_BYE,
    FB_SLURM_MSG_REPORT
} fb__slurm_msg_kind;

typedef enum {
    FB_SLURM_END_EXIT = 1,
    FB_SLURM_END_SIGNAL,
    FB_SLURM_END_FINALIZED,
    FB_SLURM_END_VANISHED
} fb__slurm_end_how;

typedef struct fb__slurm_msg {
    fb__slurm_msg_kind kind;
    char node[FB__SLURM_NODE_MAX];  /* hello, health, bye               */
    int nodeid;                     /* hello                            */
    long long pid;                  /* hello, attach                    */
    int rank;                       /* attach, beat, end                */
    long long step;                 /* beat                             */
    int phase;                      /* beat                             */
    long long age_ms;               /* beat                             */
    fb__slurm_end_how how;          /* end                              */
    int code;                       /* end                              */
    char verdict[8];                /* health                           */
    char reason[256];               /* health                           */
    long long rep_idx;              /* report: its index in the ring    */
    int rep_kind, rep_code;         /* report: fb__report_kind, code    */
    long long rep_step, rep_bytes, rep_v1, rep_v2, rep_wall_ns;
    char rep_text[208];             /* report: free text                */
} fb__slurm_msg;

/* Parse one line (without its newline; need not be NUL-terminated).
 * 0, or -EINVAL for anything that is not a well-formed fbw1 message
 * (ranks and node ids are bounded by max_rank, exclusive). */
int fb__slurm_parse_line(const char *line, size_t len, int max_rank,
                         fb__slurm_msg *m);

/* A node name as Slurm writes it: [A-Za-z0-9._-], 1..63 characters. */
int fb__slurm_node_name_ok(const char *s);

const char *fb__slurm_end_how_name(fb__slurm_end_how how);

#endif
