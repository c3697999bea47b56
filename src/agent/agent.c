/*
 * agent.c -- the agent's sampling loop, rank segments, events and the
 * /metrics text (see agent.h).  One thread samples, detects, records and
 * renders; the HTTP thread only copies the last rendered text.
 */
#include "agent/agent.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agent/sensors.h"
#include "agent/store.h"
#include "common/jsonw.h"
#include "common/util.h"
#include "firebreak/firebreak.h"
#include "health/parse.h"
#include "lib/segment.h"

#define FULL_GPU_EVERY 10  /* ECC / remap / NVLink readings every N samples */
#define JOB_ID_MAX 64

typedef struct {
    fb__seg *seg;
    char name[96];      /* its name in shm_dir, and the file's identity */
    dev_t dev;          /* there: gone or another file, the slot closes  */
    ino_t ino;
    fb__rank_sample s;  /* detector state lives here between samples */
    uint64_t prev_steps, prev_ns; /* steps_done, when, at the last sample */
} rank_slot;

typedef struct {
    const fb__agent_opts *o;
    char host[256];
    double started_wall_s;

    fb__nvml *nvml;
    int ngpu;
    fb__gpu_sample gpu[FB__NVML_MAX_GPUS];
    int last_xid[FB__NVML_MAX_GPUS];
    int thermal[FB__NVML_MAX_GPUS], power[FB__NVML_MAX_GPUS];

    fb__host_sensor sensors[FB__AGENT_MAX_SENSORS];
    int nsensors;
    fb__kmsg_reader kmsg;
    int kmsg_ok;

    char job[JOB_ID_MAX];
    uid_t job_uid;           /* owner of <run_dir>/job: the segments'  */
    int attempt;             /* highest attempt seen, -1 before any */
    rank_slot *slots;        /* by rank number */
    int nslots;              /* 1 + the highest rank seen */
    fb__rank_sample *compact;

    double gpu_power_w, node_power_w, prev_node_power_w;
    int gpu_power_n;         /* GPUs whose power this sample read */
    int node_power_known;    /* this sample's node_power_w is a reading */
    int have_prev_power;
    uint64_t samples;
    double sample_s;
    double sample_wall_s;      /* when the last sample began (wall clock)  */
    uint64_t events_by_kind[8];

    fb__agent_db *db;
    fb__http *http;
    pthread_mutex_t mu;
    char *text;              /* the last rendered exposition, under mu */
    size_t text_len;
} agent;

static const char *event_kinds[8] = {"thermal_slowdown", "power_slowdown",
                                     "power_swing", "straggler", "xid",
                                     "other", NULL, NULL};

static volatile sig_atomic_t stop_flag;

static void on_signal(int sig)
{
    (void)sig;
    stop_flag = 1;
}

void fb__agent_opts_init(fb__agent_opts *o)
{
    memset(o, 0, sizeof *o);
    o->listen = "127.0.0.1:9400";
    o->interval_s = 1.0;
    o->shm_dir = "/dev/shm";
    o->straggler_ratio = 1.5;
    o->straggler_samples = 3;
    o->swing_fraction = 0.3;
    o->swing_min_w = 500;
}

/* ---- events ---- */

static void event(agent *a, int kind_index, const char *subject,
                  const char *severity, const fb__jsonw *evidence,
                  const char *fmt, ...) __attribute__((format(printf, 6, 7)));

static void event(agent *a, int kind_index, const char *subject,
                  const char *severity, const fb__jsonw *evidence,
                  const char *fmt, ...)
{
    char detail[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    const char *kind = event_kinds[kind_index];
    char full_kind[48];
    /* an end of a condition is its kind + "_end" */
    snprintf(full_kind, sizeof full_kind, "%s%s", kind,
             !strcmp(severity, "info") && kind_index != 4 ? "_end" : "");
    a->events_by_kind[kind_index]++;
    fb__agent_db_event(a->db, fb__wall_s(), full_kind, subject, severity,
                       detail, fb__jsonw_text(evidence));
    if (!a->o->quiet) { /* detail may quote the kernel log */
        char line[700];
        snprintf(line, sizeof line, "%s %s: %s", full_kind, subject, detail);
        fprintf(stderr, "firebreak agent: %s\n",
                fb__safe_text(line, sizeof line, line));
    }
}

/* ---- GPUs ---- */

/* "0000:48:00" (kernel log) and "00000000:48:00.0" (NVML): same device? */
static int same_pci(const char *klog, const char *nvml)
{
    unsigned d1, b1, s1, d2, b2, s2;
    if (sscanf(klog, "%x:%x:%x", &d1, &b1, &s1) != 3 ||
        sscanf(nvml, "%x:%x:%x", &d2, &b2, &s2) != 3)
        return 0;
    return d1 == d2 && b1 == b2 && s1 == s2;
}

static void take_xids(agent *a, int record)
{
    fb__kmsg_record rec;
    if (!a->kmsg_ok)
        return;
    while (fb__kmsg_next(&a->kmsg, &rec, 0) == 1) {
        fb__xid_event ev;
        if (!fb__kmsg_is_kernel(&rec) || fb__xid_parse(rec.text, strlen(rec.text), &ev) != 1)
            continue;
        int gpu = -1;
        for (int i = 0; i < a->ngpu; i++)
            if (same_pci(ev.pci, a->gpu[i].bus_id))
                gpu = i;
        if (gpu >= 0)
            a->last_xid[gpu] = ev.xid;
        if (record) {
            fb__jsonw w;
            char subject[48];
            fb__xid_info info;
            fb__xid_lookup(&ev, &info);
            fb__jsonw_init(&w);
            fb__jsonw_obj_begin(&w);
            fb__jsonw_kint(&w, "xid", ev.xid);
            fb__jsonw_kstr(&w, "pci", ev.pci);
            fb__jsonw_kint(&w, "gpu", gpu);
            fb__jsonw_kdouble(&w, "kernel_time_s", rec.usec / 1e6);
            fb__jsonw_kstr(&w, "message", ev.msg);
            fb__jsonw_kstr(&w, "category", info.category);
            fb__jsonw_obj_end(&w);
            snprintf(subject, sizeof subject, "gpu%d", gpu);
            event(a, 4, subject, info.status == 2 ? "fail"
                                 : info.status == 1 ? "warn" : "info",
                  &w, "XID %d on PCI %s: %s", ev.xid, ev.pci, info.meaning);
            fb__jsonw_free(&w);
        }
    }
}

static void slowdown_event(agent *a, int i, int kind, int now_on)
{
    const fb__gpu_sample *g = &a->gpu[i];
    fb__jsonw w;
    char subject[16];
    snprintf(subject, sizeof subject, "gpu%d", i);
    fb__jsonw_init(&w);
    fb__jsonw_obj_begin(&w);
    fb__jsonw_kint(&w, "gpu", i);
    fb__jsonw_kstr(&w, "uuid", g->uuid);
    fb__jsonw_kuint(&w, "clock_event_reasons", g->reasons);
    fb__jsonw_kint(&w, "temp_c", g->temp_c);
    fb__jsonw_kdouble(&w, "power_w", g->power_mw / 1000.0);
    fb__jsonw_kdouble(&w, "power_limit_w", g->limit_mw / 1000.0);
    fb__jsonw_kint(&w, "sm_clock_mhz", g->sm_mhz);
    fb__jsonw_kint(&w, "sm_clock_max_mhz", g->sm_max_mhz);
    fb__jsonw_obj_end(&w);
    event(a, kind, subject, now_on ? "warn" : "info", &w,
          "%s slowdown %s: %u C, %.0f W of %.0f W, SM %u of %u MHz "
          "(reasons 0x%llx)", kind == 0 ? "thermal" : "power",
          now_on ? "began" : "ended", g->temp_c, g->power_mw / 1000.0,
          g->limit_mw / 1000.0, g->sm_mhz, g->sm_max_mhz, g->reasons);
    fb__jsonw_free(&w);
}

static void sample_gpus(agent *a, double t)
{
    a->gpu_power_w = 0;
    a->gpu_power_n = 0;
    if (!a->nvml)
        return;
    int full = a->samples % FULL_GPU_EVERY == 0;
    for (int i = 0; i < a->ngpu; i++) {
        fb__gpu_sample prev = a->gpu[i];
        fb__gpu_sample *g = &a->gpu[i];
        fb__nvml_sample(a->nvml, i, full, g);
        if (!full) { /* keep the slow readings from the last full sample */
            g->has_ecc = prev.has_ecc;
            g->ecc_uncorrected_volatile = prev.ecc_uncorrected_volatile;
            g->ecc_corrected_volatile = prev.ecc_corrected_volatile;
            g->has_remap = prev.has_remap;
            g->remap_corr = prev.remap_corr;
            g->remap_unc = prev.remap_unc;
            g->remap_pending = prev.remap_pending;
            g->remap_failure = prev.remap_failure;
        }
        if (g->has_temp && g->temp_c > 200)
            g->has_temp = 0; /* absurd: not believed */
        if (g->has_power && g->power_mw > 5000000)
            g->has_power = 0;
        if (g->has_power) {
            a->gpu_power_w += g->power_mw / 1000.0;
            a->gpu_power_n++;
        }
        int th = g->has_reasons && (g->reasons & FB__NVML_REASONS_THERMAL);
        int pw = g->has_reasons &&
                 (g->reasons & (FB__NVML_REASONS_POWER | FB__NVML_REASON_SW_POWER_CAP));
        if (th != a->thermal[i])
            slowdown_event(a, i, 0, th);
        if (pw != a->power[i])
            slowdown_event(a, i, 1, pw);
        a->thermal[i] = th;
        a->power[i] = pw;
        if (!g->lost && g->handle_rc == 0)
            fb__agent_db_gpu(a->db, t, g);
    }
}

/* ---- host ---- */

static void sample_host(agent *a, double t)
{
    double meter_w = 0, rapl_w = 0;
    int have_meter = 0, rapl_n = 0, rapl_pending = 0;
    fb__sensors_sample(a->sensors, a->nsensors);
    for (int i = 0; i < a->nsensors; i++) {
        fb__host_sensor *h = &a->sensors[i];
        if (!h->ok)
            continue;
        if (h->kind == 't') {
            fb__agent_db_host(a->db, t, h->sensor, "temp_c", h->value);
        } else if (h->kind == 'p') {
            fb__agent_db_host(a->db, t, h->sensor, "power_w", h->value);
            if (!h->output) { /* a supply's output: its input counts */
                meter_w += h->value;
                have_meter = 1;
            }
        } else if (h->kind == 'e') {
            /* top-level packages only: sub-zones are inside them */
            int package = !strchr(h->sensor + strlen("intel-rapl:"), ':');
            if (!h->rated) { /* a rate needs two readings */
                rapl_pending |= package;
                continue;
            }
            fb__agent_db_host(a->db, t, h->sensor, "power_w", h->power_w);
            if (package) {
                rapl_w += h->power_w;
                rapl_n++;
            }
        }
    }
    /* A node power meter already includes the GPUs; RAPL does not.  Without
     * a meter the node's power is known once every package has a rate (the
     * GPUs' alone would read as a swing at the next sample) and something
     * was read: no source at all is no reading, not 0 W. */
    a->node_power_known = have_meter || (!rapl_pending && (a->gpu_power_n || rapl_n));
    if (!a->node_power_known) {
        a->have_prev_power = 0;
        return;
    }
    a->node_power_w = have_meter ? meter_w : a->gpu_power_w + rapl_w;
    fb__agent_db_host(a->db, t, "node", "node_power_w", a->node_power_w);
    if (a->have_prev_power &&
        fb__agent_power_swing(a->prev_node_power_w, a->node_power_w,
                              a->o->swing_fraction, a->o->swing_min_w)) {
        fb__jsonw w;
        fb__jsonw_init(&w);
        fb__jsonw_obj_begin(&w);
        fb__jsonw_kdouble(&w, "from_w", a->prev_node_power_w);
        fb__jsonw_kdouble(&w, "to_w", a->node_power_w);
        fb__jsonw_kdouble(&w, "gpu_w", a->gpu_power_w);
        fb__jsonw_kdouble(&w, "interval_s", a->o->interval_s);
        fb__jsonw_obj_end(&w);
        event(a, 2, "node", "warn", &w, "node power %.0f W -> %.0f W in one "
              "interval", a->prev_node_power_w, a->node_power_w);
        fb__jsonw_free(&w);
    }
    a->prev_node_power_w = a->node_power_w;
    a->have_prev_power = 1;
}

/* ---- ranks ---- */

static void read_job(agent *a)
{
    char path[4096], *buf;
    size_t len;
    if (!a->o->run_dir || fb__fmt(path, sizeof path, "%s/job", a->o->run_dir))
        return;
    if (fb__read_file(path, 256, &buf, &len))
        return;
    size_t n = strcspn(buf, "\r\n \t");
    buf[n] = '\0';
    int valid = fb__job_id_ok(buf);
    struct stat st;
    if (valid && stat(path, &st) == 0)
        a->job_uid = st.st_uid; /* the user the job runs as */
    else
        valid = 0;
    if (valid && (n != strlen(a->job) || memcmp(a->job, buf, n))) {
        memcpy(a->job, buf, n);
        a->job[n] = '\0';
        a->attempt = -1;
    } else if (!valid && !a->o->quiet && !a->job[0]) {
        fprintf(stderr, "firebreak agent: %s: not a job id ([A-Za-z0-9_-], "
                "at most %d characters)\n", path, FB__JOB_ID_MAX);
    }
    free(buf);
}

static void close_ranks(agent *a)
{
    for (int r = 0; r < a->nslots; r++)
        if (a->slots[r].seg)
            fb__seg_close(a->slots[r].seg);
    memset(a->slots, 0, sizeof *a->slots * FB__AGENT_MAX_RANKS);
    a->nslots = 0;
}

/* Open the segments of the highest attempt present in shm_dir. */
static void find_ranks(agent *a)
{
    char prefix[JOB_ID_MAX + 8];
    snprintf(prefix, sizeof prefix, "fb.%s.", a->job);
    size_t pl = strlen(prefix);
    DIR *d = opendir(a->o->shm_dir);
    if (!d)
        return;
    int best = a->attempt;
    struct dirent *e;
    /* two passes over one listing: the highest attempt, then its ranks */
    long pos = telldir(d);
    while ((e = readdir(d))) {
        int att, rank;
        char tail;
        if (!strncmp(e->d_name, prefix, pl) &&
            sscanf(e->d_name + pl, "%d.%d%c", &att, &rank, &tail) == 2 &&
            att > best && att >= 0)
            best = att;
    }
    if (best != a->attempt) {
        close_ranks(a);
        a->attempt = best;
    }
    seekdir(d, pos);
    while ((e = readdir(d))) {
        int att, rank;
        char tail, path[4096];
        if (strncmp(e->d_name, prefix, pl) ||
            sscanf(e->d_name + pl, "%d.%d%c", &att, &rank, &tail) != 2 ||
            att != a->attempt || rank < 0 || rank >= FB__AGENT_MAX_RANKS ||
            a->slots[rank].seg)
            continue;
        if (fb__fmt(path, sizeof path, "%s/%s", a->o->shm_dir, e->d_name))
            continue;
        fb__seg *seg;
        struct stat st;
        /* Only segments of the user the job runs as: another user could
         * plant a file under the name (docs/segment.md, "Readers"). */
        if (strlen(e->d_name) >= sizeof a->slots[rank].name ||
            fb__seg_open_as(&seg, path, a->job_uid, &st))
            continue; /* not created completely yet: next sample */
        memset(&a->slots[rank], 0, sizeof a->slots[rank]);
        a->slots[rank].seg = seg;
        snprintf(a->slots[rank].name, sizeof a->slots[rank].name, "%s", e->d_name);
        a->slots[rank].dev = st.st_dev;
        a->slots[rank].ino = st.st_ino;
        if (rank + 1 > a->nslots)
            a->nslots = rank + 1;
    }
    closedir(d);
}

static void straggler_emit(void *ctx, const fb__rank_sample *r, int begin)
{
    agent *a = ctx;
    fb__jsonw w;
    char subject[32];
    snprintf(subject, sizeof subject, "rank%d", r->rank);
    fb__jsonw_init(&w);
    fb__jsonw_obj_begin(&w);
    fb__jsonw_kint(&w, "rank", r->rank);
    fb__jsonw_kint(&w, "attempt", r->attempt);
    fb__jsonw_kuint(&w, "step", r->step);
    fb__jsonw_kdouble(&w, "step_ewma_s", r->step_ewma_s);
    fb__jsonw_kdouble(&w, "last_step_s", r->last_step_s);
    fb__jsonw_kdouble(&w, "others_median_s", r->median_s);
    fb__jsonw_kdouble(&w, "ratio", r->median_s > 0 ? r->step_ewma_s / r->median_s : 0);
    fb__jsonw_kdouble(&w, "threshold_ratio", a->o->straggler_ratio);
    fb__jsonw_kint(&w, "samples_over", r->over);
    fb__jsonw_obj_end(&w);
    event(a, 3, subject, begin ? "warn" : "info", &w,
          "rank %d %s: step time %.4f s vs the others' median %.4f s "
          "(%.2fx) at step %llu", r->rank,
          begin ? "is a straggler" : "is back in line", r->step_ewma_s,
          r->median_s, r->median_s > 0 ? r->step_ewma_s / r->median_s : 0,
          (unsigned long long)r->step);
    fb__jsonw_free(&w);
}

static void sample_ranks(agent *a, double t)
{
    if (!a->o->run_dir)
        return;
    if (!a->job[0] || a->samples % 10 == 0)
        read_job(a);
    if (!a->job[0])
        return;
    find_ranks(a);
    uint64_t now = fb__now_ns();
    int n = 0;
    for (int r = 0; r < a->nslots; r++) {
        rank_slot *sl = &a->slots[r];
        if (!sl->seg)
            continue;
        /* Removed (the supervisor sweeps an attempt's segments at its
         * end, and the run's at the run's), or another file under its
         * name (a rank that made its segment again; anyone's file after
         * the sweep): its series go with it, not a heartbeat that ages
         * for ever once the job is over.  A new segment of the job's
         * user is found again by find_ranks. */
        char path[4096];
        struct stat st;
        int gone = 0;
        if (!fb__fmt(path, sizeof path, "%s/%s", a->o->shm_dir, sl->name)) {
            if (lstat(path, &st))
                gone = errno == ENOENT;
            else
                gone = st.st_dev != sl->dev || st.st_ino != sl->ino;
        }
        if (gone) {
            fb__seg_close(sl->seg);
            memset(sl, 0, sizeof *sl);
            continue;
        }
        const fb__seg_header *h = fb__seg_hdr(sl->seg);
        fb__rank_sample *s = &sl->s;
        uint64_t hb = atomic_load_explicit(&h->heartbeat_mono_ns, memory_order_acquire);
        s->rank = r;
        const fb__seg_identity *id = fb__seg_ident(sl->seg);
        s->attempt = id->attempt;
        s->pid = id->pid;
        s->phase = (int)atomic_load_explicit(&h->phase, memory_order_relaxed);
        s->end_kind = (int)atomic_load_explicit(&h->end_kind, memory_order_relaxed);
        s->step = atomic_load_explicit(&h->step, memory_order_relaxed);
        s->steps_done = atomic_load_explicit(&h->steps_done, memory_order_relaxed);
        s->last_step_s = atomic_load_explicit(&h->last_step_ns, memory_order_relaxed) / 1e9;
        s->step_ewma_s = atomic_load_explicit(&h->step_ewma_ns, memory_order_relaxed) / 1e9;
        s->heartbeat_age_s = hb && now > hb ? (now - hb) / 1e9 : 0;
        s->attempt_age_s = now > id->created_mono_ns ? (now - id->created_mono_ns) / 1e9 : 0;
        double since_s = sl->prev_ns ? (double)(now - sl->prev_ns) / 1e9 : s->attempt_age_s;
        s->productive_s = fb__agent_productive_add(s->productive_s, sl->prev_steps,
                                                   s->steps_done, s->step_ewma_s, since_s);
        sl->prev_steps = s->steps_done;
        sl->prev_ns = now;
        a->compact[n++] = *s;
    }
    fb__agent_stragglers(a->compact, n, a->o->straggler_ratio,
                         a->o->straggler_samples, straggler_emit, a);
    for (int i = 0; i < n; i++) {
        a->slots[a->compact[i].rank].s = a->compact[i];
        fb__agent_db_rank(a->db, t, &a->compact[i]);
    }
}

/* ---- /metrics ---- */

/* dcgm-exporter's labels (camelCase and all, for its dashboards) on the
 * DCGM_* families; snake_case ones on firebreak_*, which lint clean. */
static void gpu_labels(const agent *a, int i, int dcgm, char *out, size_t size)
{
    char uuid[200], name[200], bus[80], host[300];
    const fb__gpu_sample *g = &a->gpu[i];
    fb__prom_escape(uuid, sizeof uuid, g->uuid);
    fb__prom_escape(name, sizeof name, g->name);
    fb__prom_escape(bus, sizeof bus, g->bus_id);
    fb__prom_escape(host, sizeof host, a->host);
    if (dcgm)
        snprintf(out, size, "gpu=\"%d\",UUID=\"%s\",pci_bus_id=\"%s\","
                 "device=\"nvidia%d\",modelName=\"%s\",Hostname=\"%s\"", i,
                 uuid, bus, i, name, host);
    else
        snprintf(out, size, "gpu=\"%d\",uuid=\"%s\",pci_bus_id=\"%s\"", i,
                 uuid, bus);
}

typedef struct {
    const char *name, *type, *help;
    int field;
} gpu_family;

enum { F_TEMP, F_MEM_TEMP, F_POWER, F_ENERGY, F_SM, F_MEM, F_UTIL, F_XID,
       F_REPLAY, F_UNC_ROWS, F_CORR_ROWS, F_REMAP_FAIL, F_REASONS, F_THERMAL,
       F_POWER_SLOW, F_LIMIT };

static const gpu_family gpu_families[] = {
    {"DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", F_TEMP},
    {"DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C).", F_MEM_TEMP},
    {"DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", F_POWER},
    {"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter",
     "Total energy consumption since boot (in mJ).", F_ENERGY},
    {"DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", F_SM},
    {"DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", F_MEM},
    {"DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", F_UTIL},
    {"DCGM_FI_DEV_XID_ERRORS", "gauge",
     "Value of the last XID error encountered.", F_XID},
    {"DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter",
     "Total number of PCIe retries.", F_REPLAY},
    {"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter",
     "Number of remapped rows for uncorrectable errors.", F_UNC_ROWS},
    {"DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter",
     "Number of remapped rows for correctable errors.", F_CORR_ROWS},
    {"DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge",
     "Whether remapping of rows has failed.", F_REMAP_FAIL},
    {"firebreak_gpu_clock_event_reasons", "gauge",
     "NVML clock event (throttle) reason bits.", F_REASONS},
    {"firebreak_gpu_thermal_slowdown", "gauge",
     "1 while the GPU is slowed down for temperature.", F_THERMAL},
    {"firebreak_gpu_power_slowdown", "gauge",
     "1 while the GPU is slowed down by its power cap or power brake.",
     F_POWER_SLOW},
    {"firebreak_gpu_power_limit_watts", "gauge",
     "Enforced GPU power limit.", F_LIMIT},
};

/* The value of one family for one GPU; 0 when there is none. */
static int gpu_value(const agent *a, int i, int field, double *v)
{
    const fb__gpu_sample *g = &a->gpu[i];
    switch (field) {
    case F_TEMP: *v = g->temp_c; return g->has_temp;
    case F_MEM_TEMP: *v = g->mem_temp_c; return g->has_mem_temp;
    case F_POWER: *v = g->power_mw / 1000.0; return g->has_power;
    case F_ENERGY: *v = (double)g->energy_mj; return g->has_energy;
    case F_SM: *v = g->sm_mhz; return g->has_clocks;
    case F_MEM: *v = g->mem_mhz; return g->has_clocks;
    case F_UTIL: *v = g->util_pct; return g->has_util;
    case F_XID: *v = a->last_xid[i]; return 1;
    case F_REPLAY: *v = g->pcie_replay; return g->has_replay;
    case F_UNC_ROWS: *v = g->remap_unc; return g->has_remap;
    case F_CORR_ROWS: *v = g->remap_corr; return g->has_remap;
    case F_REMAP_FAIL: *v = g->remap_failure ? 1 : 0; return g->has_remap;
    case F_REASONS: *v = (double)g->reasons; return g->has_reasons;
    case F_THERMAL: *v = a->thermal[i]; return g->has_reasons;
    case F_POWER_SLOW: *v = a->power[i]; return g->has_reasons;
    case F_LIMIT: *v = g->limit_mw / 1000.0; return g->has_limit;
    }
    return 0;
}

static void render_gpus(const agent *a, fb__prom *p)
{
    char labels[800];
    for (size_t f = 0; f < sizeof gpu_families / sizeof gpu_families[0]; f++) {
        const gpu_family *fam = &gpu_families[f];
        int any = 0;
        double v;
        for (int i = 0; i < a->ngpu; i++) {
            if (a->gpu[i].lost || a->gpu[i].handle_rc ||
                !gpu_value(a, i, fam->field, &v))
                continue;
            if (!any++)
                fb__prom_family(p, fam->name, fam->type, fam->help);
            gpu_labels(a, i, !strncmp(fam->name, "DCGM_", 5), labels,
                       sizeof labels);
            fb__prom_sample(p, fam->name, labels, v);
        }
    }
    fb__prom_family(p, "firebreak_gpu_lost", "gauge",
                    "1 when NVML cannot reach the GPU (fell off the bus).");
    for (int i = 0; i < a->ngpu; i++) {
        char l[32];
        snprintf(l, sizeof l, "gpu=\"%d\"", i);
        fb__prom_sample(p, "firebreak_gpu_lost", l,
                        a->gpu[i].lost || a->gpu[i].handle_rc);
    }
    fb__prom_family(p, "firebreak_gpus", "gauge", "GPUs NVML reports.");
    fb__prom_sample(p, "firebreak_gpus", "", a->ngpu);
}

static void render_host(const agent *a, fb__prom *p)
{
    static const struct {
        char kind;
        const char *name, *type, *help;
    } fams[] = {
        {'t', "firebreak_host_temperature_celsius", "gauge",
         "Host temperature sensors (thermal zones, hwmon)."},
        {'p', "firebreak_host_power_watts", "gauge",
         "Host power: hwmon power meters, and power derived from RAPL."},
        {'e', "firebreak_host_energy_joules_total", "counter",
         "RAPL energy counters."},
    };
    char labels[400], s[160], t[160];
    for (size_t f = 0; f < 3; f++) {
        int any = 0;
        for (int i = 0; i < a->nsensors; i++) {
            const fb__host_sensor *h = &a->sensors[i];
            int power_from_energy = fams[f].kind == 'p' && h->kind == 'e';
            if (!h->ok || (h->kind != fams[f].kind && !power_from_energy) ||
                (power_from_energy && !h->rated))
                continue;
            if (!any++)
                fb__prom_family(p, fams[f].name, fams[f].type, fams[f].help);
            fb__prom_escape(s, sizeof s, h->sensor);
            fb__prom_escape(t, sizeof t, h->type);
            snprintf(labels, sizeof labels, "sensor=\"%s\",type=\"%s\"", s, t);
            fb__prom_sample(p, fams[f].name, labels,
                            power_from_energy ? h->power_w : h->value);
        }
    }
    /* what was not read is left out, not 0 W (Prometheus: no sample) */
    fb__prom_family(p, "firebreak_node_power_watts", "gauge",
                    "Node power: a node power meter when present, else GPUs "
                    "plus RAPL packages.");
    if (a->node_power_known)
        fb__prom_sample(p, "firebreak_node_power_watts", "", a->node_power_w);
    fb__prom_family(p, "firebreak_node_gpu_power_watts", "gauge",
                    "Sum of the GPUs' power draw.");
    if (a->gpu_power_n)
        fb__prom_sample(p, "firebreak_node_gpu_power_watts", "", a->gpu_power_w);
}

static void render_ranks(const agent *a, fb__prom *p)
{
    static const struct {
        const char *name, *type, *help;
    } fams[] = {
        {"firebreak_rank_step", "gauge", "Last completed step."},
        {"firebreak_rank_steps_total", "counter", "Steps completed in this attempt."},
        {"firebreak_rank_step_seconds", "gauge", "Smoothed step time."},
        {"firebreak_rank_last_step_seconds", "gauge", "Duration of the last step."},
        {"firebreak_rank_heartbeat_age_seconds", "gauge", "Time since the rank's last heartbeat."},
        {"firebreak_rank_phase", "gauge", "Phase: 0 init, 1 train, 2 checkpoint, 3 restore, 4 done."},
        {"firebreak_rank_straggler", "gauge", "1 while the rank's step time stays well above the others'."},
        {"firebreak_rank_productive_seconds_total", "counter",
         "Estimated productive step time in this attempt (steps done x smoothed step time, at most the time that passed)."},
    };
    if (!a->job[0])
        return;
    char job[160], labels[256];
    int n = 0;
    double eff_sum = 0;
    fb__prom_escape(job, sizeof job, a->job);
    for (size_t f = 0; f < sizeof fams / sizeof fams[0]; f++) {
        int any = 0;
        for (int r = 0; r < a->nslots; r++) {
            const fb__rank_sample *s = &a->slots[r].s;
            if (!a->slots[r].seg)
                continue;
            if (!any++)
                fb__prom_family(p, fams[f].name, fams[f].type, fams[f].help);
            double v[] = {(double)s->step, (double)s->steps_done, s->step_ewma_s,
                          s->last_step_s, s->heartbeat_age_s, s->phase,
                          s->straggler, s->productive_s};
            snprintf(labels, sizeof labels, "job_id=\"%s\",rank=\"%d\"", job, r);
            fb__prom_sample(p, fams[f].name, labels, v[f]);
            if (f == 0) {
                n++;
                if (s->attempt_age_s > 0)
                    eff_sum += fmin(1.0, s->productive_s / s->attempt_age_s);
            }
        }
    }
    snprintf(labels, sizeof labels, "job_id=\"%s\"", job);
    fb__prom_family(p, "firebreak_run_ranks", "gauge", "Ranks of the current attempt on this node.");
    fb__prom_sample(p, "firebreak_run_ranks", labels, n);
    fb__prom_family(p, "firebreak_run_restarts", "gauge",
                    "Restarts so far (the current attempt number).");
    fb__prom_sample(p, "firebreak_run_restarts", labels, a->attempt < 0 ? 0 : a->attempt);
    fb__prom_family(p, "firebreak_run_effective_training_ratio", "gauge",
                    "Estimated productive share of this attempt's time, mean over local ranks.");
    fb__prom_sample(p, "firebreak_run_effective_training_ratio", labels,
                    n ? eff_sum / n : 0);
}

static void render(agent *a)
{
    fb__prom p = {0};
    char labels[400], host[300];
    fb__prom_family(&p, "firebreak_agent_up", "gauge", "1 while the agent runs.");
    fb__prom_sample(&p, "firebreak_agent_up", "", 1);
    fb__prom_escape(host, sizeof host, a->host);
    snprintf(labels, sizeof labels, "version=\"%s\",hostname=\"%s\"", fb_version(), host);
    fb__prom_family(&p, "firebreak_agent_info", "gauge", "Agent version and host.");
    fb__prom_sample(&p, "firebreak_agent_info", labels, 1);
    fb__prom_family(&p, "firebreak_agent_samples_total", "counter", "Samples taken.");
    fb__prom_sample(&p, "firebreak_agent_samples_total", "", (double)a->samples);
    fb__prom_family(&p, "firebreak_agent_sample_duration_seconds", "gauge",
                    "Time the last sample took.");
    fb__prom_sample(&p, "firebreak_agent_sample_duration_seconds", "", a->sample_s);
    /* A sampler stuck (in the driver, on a file) keeps serving its last
     * text with agent_up 1: time() minus this says how old it is. */
    fb__prom_family(&p, "firebreak_agent_last_sample_timestamp_seconds", "gauge",
                    "Unix time the last sample began.");
    fb__prom_sample(&p, "firebreak_agent_last_sample_timestamp_seconds", "",
                    a->sample_wall_s);
    fb__prom_family(&p, "firebreak_agent_http_requests_total", "counter",
                    "HTTP requests answered (as of the last sample).");
    fb__prom_sample(&p, "firebreak_agent_http_requests_total", "",
                    (double)fb__http_requests(a->http));
    fb__prom_family(&p, "firebreak_agent_events_total", "counter",
                    "Events recorded, by kind.");
    for (int k = 0; k < 6; k++) {
        snprintf(labels, sizeof labels, "kind=\"%s\"", event_kinds[k]);
        fb__prom_sample(&p, "firebreak_agent_events_total", labels,
                        (double)a->events_by_kind[k]);
    }
    fb__prom_family(&p, "firebreak_agent_db_errors_total", "counter",
                    "Database statements that failed.");
    fb__prom_sample(&p, "firebreak_agent_db_errors_total", "",
                    (double)fb__agent_db_errors(a->db));
    render_gpus(a, &p);
    render_host(a, &p);
    render_ranks(a, &p);
    if (p.oom) {
        fb__prom_free(&p);
        return; /* keep serving the previous text */
    }
    pthread_mutex_lock(&a->mu);
    free(a->text);
    a->text = p.buf;
    a->text_len = p.len;
    pthread_mutex_unlock(&a->mu);
}

static char *get_metrics(void *ctx, size_t *len)
{
    agent *a = ctx;
    char *copy = NULL;
    pthread_mutex_lock(&a->mu);
    if (a->text && (copy = malloc(a->text_len + 1))) {
        memcpy(copy, a->text, a->text_len + 1);
        *len = a->text_len;
    }
    pthread_mutex_unlock(&a->mu);
    return copy;
}

/* ---- the loop ---- */

static void sample(agent *a)
{
    uint64_t t0 = fb__now_ns();
    double t = fb__wall_s();
    fb__agent_db_begin(a->db);
    take_xids(a, 1);
    sample_gpus(a, t);
    sample_host(a, t);
    sample_ranks(a, t);
    fb__agent_db_commit(a->db);
    a->samples++;
    a->sample_s = (fb__now_ns() - t0) / 1e9;
    a->sample_wall_s = t;
    render(a);
}

/* Sleep until `deadline` (monotonic ns) or a signal. */
static void sleep_until(uint64_t deadline)
{
    struct timespec ts = {(time_t)(deadline / 1000000000ull),
                          (long)(deadline % 1000000000ull)};
    while (!stop_flag &&
           clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

static int start(agent *a, const fb__agent_opts *o)
{
    char err[512], path[4096];
    a->o = o;
    a->attempt = -1;
    pthread_mutex_init(&a->mu, NULL);
    struct stat st;
    int rc = !o->root ? 0 : stat(o->root, &st) ? -errno
                          : !S_ISDIR(st.st_mode) ? -ENOTDIR : 0;
    if (rc) {
        fprintf(stderr, "firebreak agent: --root %s: %s (want the directory "
                "that holds a sys/, proc/ and dev/ tree)\n", o->root,
                fb_strerror(rc));
        return rc;
    }
    if (gethostname(a->host, sizeof a->host - 1))
        snprintf(a->host, sizeof a->host, "unknown");
    a->slots = calloc(FB__AGENT_MAX_RANKS, sizeof *a->slots);
    a->compact = calloc(FB__AGENT_MAX_RANKS, sizeof *a->compact);
    if (!a->slots || !a->compact)
        return -ENOMEM;
    rc = fb__nvml_open(&a->nvml, o->nvml_lib, o->root == NULL, err, sizeof err);
    if (rc) {
        if (!o->quiet)
            fprintf(stderr, "firebreak agent: GPU metrics off: %s\n", err);
    } else {
        a->ngpu = fb__nvml_count(a->nvml);
        if (a->ngpu < 0) {
            fprintf(stderr, "firebreak agent: nvmlDeviceGetCount_v2: %s\n",
                    fb__nvml_strerror(a->nvml, -a->ngpu));
            a->ngpu = 0;
        }
    }
    a->nsensors = fb__sensors_discover(o->root, a->sensors);
    if (fb__fmt(path, sizeof path, "%s/dev/kmsg", o->root ? o->root : "") == 0 &&
        fb__kmsg_open(&a->kmsg, path) == 0) {
        a->kmsg_ok = 1;
        take_xids(a, 0); /* the log so far: last XIDs, no new events */
    } else {
        a->kmsg.fd = -1;
    }
    const char *db = o->db_path;
    if (!db && o->run_dir) {
        if (fb__fmt(path, sizeof path, "%s/agent.sqlite", o->run_dir))
            return -ENAMETOOLONG;
        db = path;
    }
    if (db && (rc = fb__agent_db_open(&a->db, db, a->host, o->interval_s, err,
                                      sizeof err))) {
        fprintf(stderr, "firebreak agent: %s\n", err);
        return rc;
    }
    a->started_wall_s = fb__wall_s();
    return 0;
}

static void finish(agent *a)
{
    fb__http_stop(a->http);
    if (a->slots)
        close_ranks(a);
    free(a->slots);
    free(a->compact);
    fb__nvml_close(a->nvml);
    if (a->kmsg_ok)
        fb__kmsg_close(&a->kmsg);
    fb__agent_db_close(a->db);
    free(a->text);
    pthread_mutex_destroy(&a->mu);
}

int fb__agent_run(const fb__agent_opts *o)
{
    agent *a = calloc(1, sizeof *a);
    if (!a)
        return -ENOMEM;
    int rc = start(a, o);
    if (rc)
        goto out;
    if (o->once) {
        sample(a);
        if (a->nsensors) { /* a second sample gives RAPL a power reading */
            usleep(100000);
            sample(a);
        }
        pthread_mutex_lock(&a->mu);
        fwrite(a->text, 1, a->text_len, stdout);
        pthread_mutex_unlock(&a->mu);
        goto out;
    }
    sample(a); /* something to serve from the first scrape on */
    if (o->listen && strcmp(o->listen, "none")) {
        char err[512];
        int port;
        rc = fb__http_start(&a->http, o->listen, get_metrics, a, &port, err,
                            sizeof err);
        if (rc) {
            fprintf(stderr, "firebreak agent: %s\n", err);
            goto out;
        }
        if (o->port_file) {
            char num[16];
            int n = snprintf(num, sizeof num, "%d\n", port);
            rc = fb__write_file_atomic(o->port_file, num, (size_t)n);
            if (rc) {
                fprintf(stderr, "firebreak agent: --port-file %s: %s\n",
                        o->port_file, fb_strerror(rc));
                goto out;
            }
        }
        if (!o->quiet) {
            /* ":PORT" binds loopback (fb__http_parse_listen): say which */
            int hl = (int)(strrchr(o->listen, ':') - o->listen);
            fprintf(stderr, "firebreak agent: serving http://%.*s:%d/metrics\n",
                    hl ? hl : 9, hl ? o->listen : "127.0.0.1", port);
        }
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    uint64_t period = (uint64_t)(o->interval_s * 1e9);
    uint64_t began = fb__now_ns(), next = began + period;
    uint64_t end = o->duration_s > 0 ? began + (uint64_t)(o->duration_s * 1e9) : 0;
    while (!stop_flag) {
        if (end && next > end) {
            sleep_until(end);
            break;
        }
        sleep_until(next);
        if (stop_flag)
            break;
        sample(a);
        next += period;
        uint64_t now = fb__now_ns();
        if (next < now) /* fell behind (suspended?): skip, don't burst */
            next = now + period;
    }
    rc = 0;
out:
    finish(a);
    free(a);
    return rc;
}
