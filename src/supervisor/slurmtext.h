/*
 * slurmtext.h -- reading what Slurm's commands print (slurmtext.c): the
 * lines of srun's own log (an attempt's srun.log), of `scontrol -o show
 * node` and of `scontrol show topology`.  Pure functions on text, bounded, with fuzz targets
 * (fuzz/slurm_text.c); what they take out is safe to print
 * (fb__safe_text) and NUL-terminated.
 */
#ifndef FB_SUPERVISOR_SLURMTEXT_H
#define FB_SUPERVISOR_SLURMTEXT_H

#include <stddef.h>

#include "supervisor/fbw1.h"

#define FB__SLURM_LINE_MAX 1024 /* longer lines are cut there            */
#define FB__SLURM_WHAT_MAX 200
#define FB__SLURM_STATE_MAX 64
#define FB__SLURM_TOPO_LINE_MAX 8192 /* a line of `scontrol show topology` */

/* The next line of text (len bytes; a NUL ends it too) from *pos, into
 * line (size bytes, NUL-terminated, cut if longer; its '\r' dropped), and
 * *pos past it.  1, or 0 at the end. */
int fb__slurm_next_line(const char *text, size_t len, size_t *pos, char *line, size_t size);

typedef enum {
    FB__SRUN_OTHER = 0,
    FB__SRUN_TASK_END,      /* "srun: error: NODE: task T: WHAT", or
                               "srun: error: NODE: tasks 4-7,9: WHAT"              */
    FB__SRUN_LAUNCH_FAILED, /* "srun: error: Task launch for StepId=J.S failed on
                               node NODE: WHY"                                      */
    FB__SRUN_STEP_REFUSED,  /* "srun: error: Unable to create step for job J: WHY" */
} fb__srun_kind;

typedef struct fb__srun_line {
    fb__srun_kind kind;
    int task;                        /* TASK_END: the task (>= 0); of
                                        several, the first named           */
    int several;                     /* TASK_END: "tasks LIST"             */
    char tasks[32];                  /* TASK_END: T or LIST, as srun wrote */
    char node[FB__FBW1_NODE_MAX];    /* TASK_END, LAUNCH_FAILED            */
    char what[FB__SLURM_WHAT_MAX];   /* TASK_END: "Killed", "Exited with
                                        exit code 3"...; LAUNCH_FAILED,
                                        STEP_REFUSED: why ("" if none)  */
} fb__srun_line;

/* One line of srun's log; out->kind is FB__SRUN_OTHER for any other
 * line, and for one of the kinds above whose node name is not one
 * (fb__fbw1_node_name_ok) or whose task is out of range. */
void fb__srun_line_parse(const char *line, fb__srun_line *out);

/* What firebreak takes from one node of `scontrol -o show node`. */
typedef struct fb__slurm_node_info {
    char name[FB__FBW1_NODE_MAX];  /* NodeName                               */
    char addr[FB__FBW1_NODE_MAX];  /* NodeAddr; "" if absent or not a name   */
    char host[FB__FBW1_NODE_MAX];  /* NodeHostName; ""                       */
    char state[FB__SLURM_STATE_MAX]; /* State ("IDLE", "DOWN+NOT_RESPONDING",
                                        "ALLOCATED*"...); ""               */
} fb__slurm_node_info;

/* One line of `scontrol -o show node`: 0, or -1 when it names no node.
 * Each field is taken from a word that starts with its key, before the
 * free-text fields (Reason=, Comment=, Extra=), so a drain reason cannot
 * pose as another field. */
int fb__slurm_node_parse(const char *line, fb__slurm_node_info *out);

/* What firebreak takes from one switch of `scontrol show topology`
 * (topology/tree: "SwitchName=s0 Level=0 LinkSpeed=1 Nodes=node[1-2]"). */
typedef struct fb__slurm_switch {
    char name[FB__FBW1_NODE_MAX];  /* SwitchName: a name (fb__fbw1_node_name_ok) */
    int level;                     /* Level: 0 a leaf switch (its Nodes= are
                                      nodes), -1 absent                   */
    char nodes[FB__SLURM_TOPO_LINE_MAX]; /* Nodes: a Slurm host list
                                       ("node[1-2],gpu7"), only its
                                       characters; "" if absent          */
} fb__slurm_switch;

/* One line of `scontrol show topology` (at most FB__SLURM_TOPO_LINE_MAX
 * bytes: a switch's host list is never cut): 0, or -1 when it names no
 * switch or its Nodes= holds anything but a host list's characters
 * (letters, digits, "-_.,[]"; not '-' first: the list becomes an argument
 * of `scontrol show hostnames`) or does not fit. */
int fb__slurm_switch_parse(const char *line, fb__slurm_switch *out);

/* Whether a node in `state` cannot run a new step of the job: DOWN, not
 * responding (NOT_RESPONDING, or the '*' suffix) or powered down. */
int fb__slurm_state_down(const char *state);

#endif
