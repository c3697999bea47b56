/*
 * journal.h -- the run journal: one SQLite database per run directory
 * (journal.sqlite), written only by the supervisor (journal.c) and read by
 * `firebreak report` and `firebreak sim --from-run` through the reader at
 * the end of this file (read.c).  Schema in schema.sql and docs/journal.md.
 *
 * Writing.  Every function returns 0 or a negative code; a
 * journal error never stops supervision (the supervisor keeps running the
 * job), and it is never lost quietly: a write that fails for a reason that
 * may pass (a full disk, an I/O error) waits in a bounded queue and is
 * retried by every fb__journal_flush(); what is dropped is counted, and
 * fb__journal_get_status() tells the caller, who must say so.  A write
 * function returns 0 when the row is written or queued.
 */
#ifndef FB_JOURNAL_JOURNAL_H
#define FB_JOURNAL_JOURNAL_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#define FB__JOURNAL_SCHEMA_VERSION "1.1"
/* The major version readers accept (every minor of it): see read.c. */
#define FB__JOURNAL_SCHEMA_MAJOR 1

typedef struct fb__journal fb__journal;

typedef struct fb__journal_run {
    const char *name, *job_id, *run_dir, *command_json, *launcher, *hostname;
    const char *options_json;
    int nproc, nnodes, max_restarts;
    double hang_timeout_s, started_at;
} fb__journal_run;

typedef struct fb__journal_incident {
    int64_t attempt_id;
    const char *kind;
    double occurred_at, detected_at, detect_ms;
    int rank;            /* -1: none */
    const char *node;    /* NULL: the rank's placed node (fb__journal_place) */
    const char *host;    /* NULL: the rank's placed host */
    int signal;          /* 0: none */
    int has_exit_code;
    int exit_code;
    const char *phase;
    int64_t step;        /* -1: unknown */
    double lost_s;       /* < 0: unknown */
    const char *injected, *detail, *last_lines, *fr_verdict, *health;
    const char *category, *component, *evidence;
} fb__journal_incident;

typedef struct fb__journal_event {
    int64_t attempt_id;
    double time;
    int rank;
    const char *kind;
    int64_t step;        /* -1: none */
    int code;
    int64_t bytes;
    double value_ms;     /* < 0: none */
    const char *detail;
    const char *source;  /* restore_done: memory, peer, storage; NULL: none */
    const char *node;    /* NULL: the rank's placed node (a drain: the node) */
} fb__journal_event;

/* Whether the journal is being written, and what was lost. */
typedef struct fb__journal_status {
    int failing;                /* the last write failed: writes wait       */
    size_t pending_rows;        /* rows waiting in the queue                */
    size_t pending_samples;     /* step samples waiting                     */
    uint64_t dropped_rows;      /* rows lost for good (queue full, refused, */
    uint64_t dropped_samples;   /* or still waiting when the journal closed)*/
    uint64_t failures;          /* failed writes and retries so far         */
    char last_error[256];       /* SQLite's message (the system's error)    */
    char path[PATH_MAX];
} fb__journal_status;

/* Create or open run_dir/journal.sqlite (WAL, synchronous=NORMAL). */
int fb__journal_open(fb__journal **out, const char *path, char *err, size_t errsz);
/* Flush, close, free.  fb__journal_close_status fills *st (may be NULL) with
 * the final status: rows or samples that could not be written by then
 * count as dropped. */
void fb__journal_close(fb__journal *j);
void fb__journal_close_status(fb__journal *j, fb__journal_status *st);
const char *fb__journal_errmsg(fb__journal *j);
void fb__journal_get_status(fb__journal *j, fb__journal_status *st);
/* Bounds of the queue (default 4096 rows, 65536 samples); for tests. */
void fb__journal_set_limits(fb__journal *j, size_t max_rows, size_t max_samples);

int fb__journal_begin_run(fb__journal *j, const fb__journal_run *r);
int fb__journal_end_run(fb__journal *j, double ended_at, const char *status,
                        int exit_code, const char *reason);

int fb__journal_begin_attempt(fb__journal *j, int number, double started_at,
                              int64_t *attempt_id_out);
/* Set one column of an attempt row: `column` is one of launched_at,
 * ready_at, ended_at, restore_s (REAL) or restored_step, start_step,
 * end_step (INTEGER), outcome, nodes (TEXT). */
int fb__journal_attempt_real(fb__journal *j, int64_t attempt_id,
                             const char *column, double value);
int fb__journal_attempt_int(fb__journal *j, int64_t attempt_id,
                            const char *column, int64_t value);
int fb__journal_attempt_text(fb__journal *j, int64_t attempt_id,
                             const char *column, const char *value);

/* Where `rank` of the attempt runs (schema 1.1): a placement row (written
 * again when called again), and from then on the node and host of that
 * rank's incidents (unless given), events and step samples in that
 * attempt.  node: the Slurm node name, or the host's name where there is
 * no Slurm; host: the machine's hostname (NULL: not known).  Placing a
 * new attempt forgets the previous one's ranks. */
int fb__journal_place(fb__journal *j, int64_t attempt_id, int rank,
                      const char *node, const char *host);

int fb__journal_add_incident(fb__journal *j, const fb__journal_incident *inc,
                         int64_t *id_out);
/* Update one TEXT column of an incident (fr_verdict, health, detail...). */
int fb__journal_incident_text(fb__journal *j, int64_t id, const char *column,
                              const char *value);

int fb__journal_add_event(fb__journal *j, const fb__journal_event *ev);

/* Insert or update the checkpoint row for (attempt, step). */
int fb__journal_checkpoint(fb__journal *j, int64_t attempt_id, int64_t step,
                           double committed_at, int ranks, int64_t bytes,
                           double stall_ms, double persist_ms,
                           const char *status);

/* Step samples are buffered and written in one transaction by flush (and
 * every 4096 samples).  Flush writes every queued row and sample in one
 * transaction: 0, or -ENOSPC / -EIO when it failed (everything stays
 * queued, but rows refused for good, which are dropped and counted). */
int fb__journal_sample(fb__journal *j, int64_t attempt_id, int rank,
                       double time, int64_t step, double step_time_ms);
int fb__journal_flush(fb__journal *j);

/* Batches: between begin and end (they nest), row writes are queued, not
 * written one transaction each; the outermost end writes the queue in one
 * transaction (0 or as fb__journal_flush).  Values are taken at the call,
 * so a batch changes when rows reach the database, not what they say.  The
 * supervisor opens one per wake-up of its event loop. */
void fb__journal_batch_begin(fb__journal *j);
int fb__journal_batch_end(fb__journal *j);

/* ---- Reading (read.c) -------------------------------------------------
 *
 * The one reader of journal.sqlite.  It opens the file read-only (never
 * immutable: a live run's WAL must be seen), refuses a FIFO, device or
 * directory where the database or its -wal, -shm, -journal files are
 * (SQLite would block opening a FIFO), reads in one transaction (a
 * consistent picture of a live run), and applies the schema-version rule:
 * every minor version of FB__JOURNAL_SCHEMA_MAJOR is read (a new minor only
 * adds tables and nullable columns: a newer one's the reader does not name,
 * an older one's read as NULL or no rows), any other major is refused with
 * FB_EVERSION.
 *
 * Rows come through cursors, in id order (step samples: in the order they
 * were written).  In a row, text is NULL when the column is NULL and points
 * into SQLite's memory, valid until the next call on the cursor; a NULL
 * REAL is NAN; a NULL integer is -1 (signal: 0), as the writer's structs
 * above say "none".  Errors: a negative code (-EBUSY when another process
 * holds a lock, FB_EFORMAT for a corrupted file or not a journal,
 * FB_EVERSION, FB_ENOTREG, -ENOMEM, -errno) and a message naming the file
 * and what to do, from fb__journal_ro_errmsg(). */

typedef struct fb__journal_ro fb__journal_ro;
typedef struct fb__journal_cursor fb__journal_cursor;

typedef enum {
    FB__JOURNAL_RUN, FB__JOURNAL_ATTEMPT, FB__JOURNAL_INCIDENT,
    FB__JOURNAL_CHECKPOINT, FB__JOURNAL_EVENT, FB__JOURNAL_SAMPLE,
    FB__JOURNAL_PLACEMENT, /* 1.1; none in a 1.0 file */
    FB__JOURNAL_NTABLES
} fb__journal_table;

typedef struct fb__journal_run_row {
    int64_t id;
    const char *name, *status, *reason, *hostname;
    int nproc, nnodes;
    double started_at, ended_at;
} fb__journal_run_row;

typedef struct fb__journal_attempt_row {
    int64_t id, run_id;
    int number;
    double started_at, launched_at, ready_at, ended_at;
    int64_t restored_step;
    double restore_s;
    int64_t start_step, end_step;
    const char *outcome;
} fb__journal_attempt_row;

typedef struct fb__journal_incident_row {
    int64_t id, attempt_id;
    const char *kind;
    double occurred_at, detected_at, detect_ms;
    int rank;
    const char *node;
    int signal;
    int has_exit_code, exit_code;
    const char *phase;
    int64_t step;
    double lost_s;
    const char *injected, *detail, *last_lines, *fr_verdict, *health;
    const char *category, *component, *evidence;
    const char *host;    /* 1.1 */
} fb__journal_incident_row;

typedef struct fb__journal_checkpoint_row {
    int64_t id, attempt_id, step;
    double committed_at;
    int ranks;
    int64_t bytes;
    double stall_ms, persist_ms;
    const char *status;
} fb__journal_checkpoint_row;

typedef struct fb__journal_event_row {
    int64_t id, attempt_id;
    double time;
    int rank;
    const char *kind;
    int64_t step;
    int code;
    int64_t bytes;
    double value_ms;
    const char *detail;
    const char *node, *host; /* 1.1 */
    const char *source;   /* restore_done: memory, peer or storage; NULL
                             where the journal has no event.source */
} fb__journal_event_row;

typedef struct fb__journal_sample_row {
    int64_t attempt_id;
    int rank;
    double time;
    int64_t step;
    double step_time_ms;
    const char *node, *host; /* 1.1 */
} fb__journal_sample_row;

typedef struct fb__journal_placement_row {
    int64_t attempt_id;
    int rank;
    const char *node, *host;
} fb__journal_placement_row;

/* SQLite's files for the database at path -- the file itself and, where
 * present, path-wal, -shm and -journal -- are regular files (checked
 * without blocking).  0, or FB_ENOTREG / -errno with err naming the file.
 * For other read-only SQLite files too (the agent's). */
int fb__journal_files_regular(const char *path, char *err, size_t errsz);

/* Open the journal at path (the file, not the run directory) for reading:
 * the checks above, then the schema version.  On failure *out is NULL and
 * err holds the message. */
int fb__journal_open_ro(const char *path, fb__journal_ro **out, char *err,
                        size_t errsz);
void fb__journal_close_ro(fb__journal_ro *jr);
/* meta.schema_version as the file says it ("1.0"). */
const char *fb__journal_ro_version(const fb__journal_ro *jr);
/* The message of the last failure, naming the file. */
const char *fb__journal_ro_errmsg(const fb__journal_ro *jr);

/* Number of rows in a table (to size an array before reading it). */
int fb__journal_count(fb__journal_ro *jr, fb__journal_table t, int64_t *n);
/* A cursor over every row of table t.  Close it before the reader. */
int fb__journal_rows(fb__journal_ro *jr, fb__journal_table t,
                     fb__journal_cursor **out);
void fb__journal_rows_close(fb__journal_cursor *c);
/* After a next function's row: "table.column" of the first number column
 * of that row whose value is not a number (TEXT or a BLOB, which reads as
 * NULL) or does not fit its int field (reads as the field's NULL value);
 * NULL when every one is fine.  Valid until the next call on c. */
const char *fb__journal_cursor_bad(fb__journal_cursor *c);
/* The next row of a cursor over that table: 1 a row, 0 no more, or a
 * negative code (-EINVAL: a cursor over another table). */
int fb__journal_next_run(fb__journal_cursor *c, fb__journal_run_row *r);
int fb__journal_next_attempt(fb__journal_cursor *c, fb__journal_attempt_row *r);
int fb__journal_next_incident(fb__journal_cursor *c,
                              fb__journal_incident_row *r);
int fb__journal_next_checkpoint(fb__journal_cursor *c,
                                fb__journal_checkpoint_row *r);
int fb__journal_next_event(fb__journal_cursor *c, fb__journal_event_row *r);
int fb__journal_next_sample(fb__journal_cursor *c, fb__journal_sample_row *r);
int fb__journal_next_placement(fb__journal_cursor *c,
                               fb__journal_placement_row *r);

#endif
