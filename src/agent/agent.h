/*
 * agent.h -- `firebreak agent`: the per-node telemetry agent.
 *
 * A foreground process (systemd and Slurm supervise it; it never forks
 * itself away) that every interval samples
 *   - GPUs through NVML (dlopen, shared with src/health/nvml.h),
 *   - host sensors from sysfs: thermal zones, hwmon temperatures and power,
 *     RAPL energy counters,
 *   - the kernel log's new NVIDIA XIDs,
 *   - with a run directory, the ranks' shared-memory segments
 *     (/dev/shm/fb.<job>.<attempt>.<rank>, the highest attempt present),
 * detects events (thermal / power slowdowns, node power swings,
 * stragglers), records samples and events in its own SQLite database
 * (DIR/agent.sqlite; schema in docs/agent.md) and serves the Prometheus
 * text format at /metrics (dcgm-exporter's names for GPU metrics,
 * firebreak_* for the rest) through libmicrohttpd.
 *
 * Threads: the sampling loop runs on the caller's thread and is the only
 * writer of the state and the database; it renders the exposition text
 * after each sample and swaps it in under a mutex, so a scrape is a copy
 * of a ready buffer (the HTTP thread never touches NVML or sysfs).
 */
#ifndef FB_AGENT_AGENT_H
#define FB_AGENT_AGENT_H

#include <stddef.h>
#include <stdint.h>

#include "health/nvml.h"

#define FB__AGENT_SCHEMA_VERSION "1.0"
#define FB__AGENT_MAX_RANKS 4096
#define FB__AGENT_MAX_SENSORS 128

typedef struct fb__agent_opts {
    const char *listen;        /* "127.0.0.1:9400"; NULL or "none": no HTTP */
    double interval_s;         /* default 1 */
    const char *run_dir;       /* NULL: no ranks, no database by default */
    const char *db_path;       /* NULL: <run_dir>/agent.sqlite */
    const char *root;          /* fixture tree for sysfs / kmsg; NULL: / */
    const char *nvml_lib;      /* NULL: FIREBREAK_NVML_LIB / the driver */
    const char *port_file;     /* write the bound port here (for --listen :0) */
    const char *shm_dir;       /* where segments live; default /dev/shm */
    double duration_s;         /* > 0: stop after this long */
    int once;                  /* 1: one sample, print /metrics, exit */
    double straggler_ratio;    /* default 1.5 (x the other ranks' median) */
    int straggler_samples;     /* consecutive samples over; default 3 */
    double swing_fraction;     /* default 0.3 of the previous node power */
    double swing_min_w;        /* default 500 W */
    int quiet;                 /* no event lines on stderr */
} fb__agent_opts;

void fb__agent_opts_init(fb__agent_opts *o);

/* Run until SIGINT / SIGTERM (or duration).  Returns 0, or a negative code
 * after printing what went wrong (bad --listen, database, port taken). */
int fb__agent_run(const fb__agent_opts *o);

/* ---- internals shared by the agent's files ---- */

typedef struct fb__host_sensor {
    char sensor[64];     /* "thermal_zone0", "hwmon1/power1", "intel-rapl:0" */
    char type[64];       /* zone type, hwmon name, RAPL domain name */
    char path[512];      /* the sysfs file */
    char kind;           /* 't' temperature (m C), 'p' power (uW), 'e' energy (uJ) */
    int ok;              /* last read succeeded */
    double value;        /* C, W, or J (energy) */
    double power_w;      /* energy sensors: derived power, once rated */
    int rated;           /* energy sensors: power_w is a rate of two readings */
    int output;          /* power: a supply's output side (its label says
                            "out"), not added to the node's meter: its
                            input side already counts the same power */
    uint64_t prev_uj, max_uj;
    uint64_t prev_ns;
} fb__host_sensor;

typedef struct fb__rank_sample {
    int rank, attempt, pid;
    int phase, end_kind;
    uint64_t step, steps_done;
    double last_step_s, step_ewma_s, heartbeat_age_s, attempt_age_s;
    double productive_s;     /* estimate: fb__agent_productive_add      */
    int over;                /* consecutive samples over the threshold */
    int straggler;           /* flagged now */
    double median_s;         /* the others' median at the last sample */
} fb__rank_sample;

/* Straggler detection over one sample of ranks: updates over / straggler /
 * median_s in place; calls `emit` for every rank that becomes a straggler
 * (begin = 1) or stops being one (begin = 0).  Ranks that have not
 * finished 3 steps, or have ended, are not judged. */
typedef void (*fb__straggler_emit)(void *ctx, const fb__rank_sample *r,
                                   int begin);
void fb__agent_stragglers(fb__rank_sample *ranks, int n, double ratio,
                          int need, fb__straggler_emit emit, void *ctx);

/* A rank's productive time (a counter): what it was, plus the steps done
 * since the last sample at the smoothed step time, but never more than
 * the `since_s` seconds that passed.  Never less than before: the
 * smoothed step time falls after a slow step, and steps_done x step time
 * went down with it (firebreak_rank_productive_seconds_total read as a
 * counter reset by rate() and increase()). */
double fb__agent_productive_add(double productive_s, uint64_t prev_steps, uint64_t steps,
                                double step_ewma_s, double since_s);

/* Node power swing: 1 when |now - prev| >= max(fraction x prev, min_w). */
int fb__agent_power_swing(double prev_w, double now_w, double fraction,
                          double min_w);

/* Prometheus text writer (metrics.c). */
typedef struct fb__prom {
    char *buf;
    size_t len, cap;
    int oom;
} fb__prom;
void fb__prom_family(fb__prom *p, const char *name, const char *type,
                     const char *help);
/* v as a sample value: the shortest of 15 or 17 significant digits that
 * reads back as v exactly; buf of 32 bytes is enough. */
const char *fb__prom_number(char *buf, size_t size, double v);
/* One sample: labels is "" or `k="v",...` already escaped. */
void fb__prom_sample(fb__prom *p, const char *name, const char *labels,
                     double value);
/* Escape a label value (backslash, quote, newline) into out; a control
 * byte or one that is not valid UTF-8 becomes '?' (Prometheus refuses a
 * whole scrape for one label that is not UTF-8), and a multi-byte
 * character is never cut at the end of out. */
void fb__prom_escape(char *out, size_t size, const char *in);
void fb__prom_free(fb__prom *p);

/* HTTP (http.c; a stub when built without libmicrohttpd). */
typedef struct fb__http fb__http;
/* Start serving; `get_metrics` returns a malloc'd copy of the exposition
 * text.  Returns 0 with the bound port in *port, or a negative code with a
 * sentence in err. */
int fb__http_start(fb__http **out, const char *listen,
                   char *(*get_metrics)(void *ctx, size_t *len), void *ctx,
                   int *port, char *err, size_t err_size);
void fb__http_stop(fb__http *h);
uint64_t fb__http_requests(const fb__http *h);
/* 1 when built with libmicrohttpd. */
int fb__http_available(void);
/* "ADDR:PORT" (IPv4; an empty ADDR is loopback) into *sa: 0, or -EINVAL
 * with a sentence naming --listen in err.  Needs no libmicrohttpd, so the
 * command checks it before anything starts. */
struct sockaddr_in;
int fb__http_parse_listen(const char *listen, struct sockaddr_in *sa,
                          char *err, size_t err_size);

#endif
