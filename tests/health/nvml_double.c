/*
 * nvml_double.c -- a test double for NVML (libnvidia-ml.so.1): exports the
 * symbols firebreak loads and answers from a scenario file named by
 * FIREBREAK_NVML_SCENARIO.  Built with the tests; firebreak finds it
 * through FIREBREAK_NVML_LIB.
 *
 * Scenario file, one setting a line, '#' comments:
 *     count 8                  devices reported
 *     init_error 9             nvmlInit_v2 fails with this code
 *     * temp 45                every GPU
 *     3 lost 1                 GPU 3 only (calls answer GPU_IS_LOST)
 * Keys: lost name uuid temp mem_temp power_mw limit_mw energy_mj sm_mhz
 * mem_mhz sm_max_mhz reasons util ecc_unc ecc_corr remap_corr remap_unc
 * remap_pending remap_failure retired_sbe retired_dbe pcie_gen pcie_gen_max
 * pcie_width pcie_width_max replay nvlinks nvlink_down (bit mask of links)
 * nvlink_errors (per link with errors, on the links in nvlink_err_mask)
 * nvlink_err_mask recovery.  Energy grows with power over time, as on real
 * hardware.
 *
 * Readings that vary, deterministically (for correlations and events):
 * with `wave_period N` (samples), a GPU's k-th temperature reading and the
 * power and clock event reasons read after it follow a triangle wave of
 * period N: temp + temp_wave * w(k), power_mw + power_wave_mw * w(k), and
 * reasons | reasons_wave while w(k) > 1/2, where w goes 0 -> 1 -> 0 over
 * N readings.  k counts that GPU's temperature readings (one per agent
 * sample), so the sequence does not depend on timing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_GPUS 64
#define NOT_SUPPORTED 3
#define INVALID_ARGUMENT 2
#define LOST 15

typedef struct {
    int index, lost;
    char name[96], uuid[96];
    unsigned long long v[40];
    unsigned long long reads;   /* temperature readings so far (the wave) */
} gpu;

enum {
    K_TEMP, K_MEM_TEMP, K_POWER, K_LIMIT, K_ENERGY, K_SM, K_MEM, K_SM_MAX,
    K_REASONS, K_UTIL, K_ECC_UNC, K_ECC_CORR, K_REMAP_CORR, K_REMAP_UNC,
    K_REMAP_PENDING, K_REMAP_FAILURE, K_RET_SBE, K_RET_DBE, K_GEN, K_GEN_MAX,
    K_WIDTH, K_WIDTH_MAX, K_REPLAY, K_NVLINKS, K_NVLINK_DOWN, K_NVLINK_ERRORS,
    K_NVLINK_ERR_MASK, K_RECOVERY, K_WAVE_PERIOD, K_TEMP_WAVE,
    K_POWER_WAVE, K_REASONS_WAVE, K_COUNT_
};

static const char *keys[K_COUNT_] = {
    "temp", "mem_temp", "power_mw", "limit_mw", "energy_mj", "sm_mhz",
    "mem_mhz", "sm_max_mhz", "reasons", "util", "ecc_unc", "ecc_corr",
    "remap_corr", "remap_unc", "remap_pending", "remap_failure",
    "retired_sbe", "retired_dbe", "pcie_gen", "pcie_gen_max", "pcie_width",
    "pcie_width_max", "replay", "nvlinks", "nvlink_down", "nvlink_errors",
    "nvlink_err_mask", "recovery", "wave_period", "temp_wave", "power_wave_mw",
    "reasons_wave"};

static gpu gpus[MAX_GPUS];
static int count, init_error, loaded;
static double t0;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void set(gpu *g, const char *key, const char *val)
{
    if (!strcmp(key, "lost")) {
        g->lost = atoi(val);
        return;
    }
    if (!strcmp(key, "name")) {
        snprintf(g->name, sizeof g->name, "%s", val);
        return;
    }
    if (!strcmp(key, "uuid")) {
        snprintf(g->uuid, sizeof g->uuid, "%s", val);
        return;
    }
    for (int k = 0; k < K_COUNT_; k++)
        if (!strcmp(key, keys[k])) {
            g->v[k] = strtoull(val, NULL, 0);
            return;
        }
    fprintf(stderr, "nvml_double: unknown key '%s'\n", key);
}

static void load(void)
{
    if (loaded)
        return;
    loaded = 1;
    t0 = now_s();
    count = 8;
    for (int i = 0; i < MAX_GPUS; i++) {
        gpu *g = &gpus[i];
        g->index = i;
        snprintf(g->name, sizeof g->name, "NVIDIA H100 80GB HBM3");
        snprintf(g->uuid, sizeof g->uuid,
                 "GPU-00000000-fake-4000-8000-0000000000%02d", i);
        unsigned long long d[K_COUNT_] = {
            [K_TEMP] = 40, [K_MEM_TEMP] = 45, [K_POWER] = 300000,
            [K_LIMIT] = 700000, [K_ENERGY] = 1000000, [K_SM] = 1980,
            [K_MEM] = 2619, [K_SM_MAX] = 1980, [K_UTIL] = 95, [K_GEN] = 5,
            [K_GEN_MAX] = 5, [K_WIDTH] = 16, [K_WIDTH_MAX] = 16,
            [K_NVLINKS] = 18};
        memcpy(g->v, d, sizeof d);
    }
    const char *path = getenv("FIREBREAK_NVML_SCENARIO");
    FILE *f = path ? fopen(path, "r") : NULL;
    if (!f) {
        if (path)
            fprintf(stderr, "nvml_double: cannot open %s\n", path);
        return;
    }
    char line[512];
    while (fgets(line, sizeof line, f)) {
        char a[64], b[64], c[256];
        int n = sscanf(line, "%63s %63s %255[^\n]", a, b, c);
        if (n < 2 || a[0] == '#')
            continue;
        if (!strcmp(a, "count"))
            count = atoi(b) > MAX_GPUS ? MAX_GPUS : atoi(b);
        else if (!strcmp(a, "init_error"))
            init_error = atoi(b);
        else if (n == 3 && !strcmp(a, "*"))
            for (int i = 0; i < MAX_GPUS; i++)
                set(&gpus[i], b, c);
        else if (n == 3 && atoi(a) >= 0 && atoi(a) < MAX_GPUS)
            set(&gpus[atoi(a)], b, c);
    }
    fclose(f);
}

/* Every device call goes through here: NULL handle or lost GPU. */
static int dev(void *h, gpu **g)
{
    *g = h;
    if (!*g)
        return INVALID_ARGUMENT;
    return (*g)->lost ? LOST : 0;
}

#define DEV(h)              \
    gpu *g;                 \
    int rc_ = dev((h), &g); \
    if (rc_)                \
        return rc_

/* The exported NVML surface (prototypes here keep -Wmissing-prototypes
 * quiet; NVML's own header is not needed). */
int nvmlInit_v2(void);
int nvmlShutdown(void);
const char *nvmlErrorString(int rc);
int nvmlDeviceGetCount_v2(unsigned *c);
int nvmlDeviceGetHandleByIndex_v2(unsigned i, void **h);
int nvmlDeviceGetUUID(void *h, char *buf, unsigned len);
int nvmlDeviceGetName(void *h, char *buf, unsigned len);
int nvmlDeviceGetPciInfo_v3(void *h, void *pci);
int nvmlDeviceGetTemperature(void *h, int sensor, unsigned *t);
int nvmlDeviceGetPowerUsage(void *h, unsigned *mw);
int nvmlDeviceGetEnforcedPowerLimit(void *h, unsigned *mw);
int nvmlDeviceGetTotalEnergyConsumption(void *h, unsigned long long *mj);
int nvmlDeviceGetClockInfo(void *h, int type, unsigned *mhz);
int nvmlDeviceGetMaxClockInfo(void *h, int type, unsigned *mhz);
int nvmlDeviceGetCurrentClocksEventReasons(void *h, unsigned long long *r);
int nvmlDeviceGetTotalEccErrors(void *h, int type, int counter,
                                unsigned long long *n);
int nvmlDeviceGetRemappedRows(void *h, unsigned *corr, unsigned *unc,
                              unsigned *pending, unsigned *failure);
int nvmlDeviceGetRetiredPages(void *h, int cause, unsigned *count_,
                              unsigned long long *addrs);
int nvmlDeviceGetCurrPcieLinkGeneration(void *h, unsigned *v);
int nvmlDeviceGetMaxPcieLinkGeneration(void *h, unsigned *v);
int nvmlDeviceGetCurrPcieLinkWidth(void *h, unsigned *v);
int nvmlDeviceGetMaxPcieLinkWidth(void *h, unsigned *v);
int nvmlDeviceGetPcieReplayCounter(void *h, unsigned *v);
int nvmlDeviceGetNvLinkState(void *h, unsigned link, int *active);
int nvmlDeviceGetNvLinkErrorCounter(void *h, unsigned link, int counter,
                                    unsigned long long *v);
int nvmlDeviceGetUtilizationRates(void *h, unsigned *util);
int nvmlDeviceGetFieldValues(void *h, int n, void *values);

int nvmlInit_v2(void)
{
    load();
    return init_error;
}

int nvmlShutdown(void)
{
    return 0;
}

const char *nvmlErrorString(int rc)
{
    switch (rc) {
    case 0: return "Success";
    case INVALID_ARGUMENT: return "Invalid Argument";
    case NOT_SUPPORTED: return "Not Supported";
    case 9: return "Driver Not Loaded";
    case LOST: return "GPU is lost";
    default: return "Unknown Error";
    }
}

int nvmlDeviceGetCount_v2(unsigned *c)
{
    *c = (unsigned)count;
    return 0;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned i, void **h)
{
    if (i >= (unsigned)count)
        return INVALID_ARGUMENT;
    *h = &gpus[i];
    return gpus[i].lost ? LOST : 0;
}

int nvmlDeviceGetUUID(void *h, char *buf, unsigned len)
{
    DEV(h);
    snprintf(buf, len, "%s", g->uuid);
    return 0;
}

int nvmlDeviceGetName(void *h, char *buf, unsigned len)
{
    DEV(h);
    snprintf(buf, len, "%s", g->name);
    return 0;
}

int nvmlDeviceGetPciInfo_v3(void *h, void *pci)
{
    DEV(h);
    /* nvmlPciInfo_t: busIdLegacy[16], 5 unsigned, busId[32] */
    unsigned char *p = pci;
    memset(p, 0, 16 + 20 + 32);
    unsigned bus = 0x18 + 0x10 * (unsigned)g->index;
    snprintf((char *)p, 16, "0000:%02X:00.0", bus & 0xff);
    memcpy(p + 16 + 4, &bus, sizeof bus);
    snprintf((char *)p + 36, 32, "00000000:%02X:00.0", bus & 0xff);
    return 0;
}

/* The wave at the GPU's current reading, in 1/1000 (0..1000). */
static unsigned long long wave_milli(const gpu *g)
{
    unsigned long long n = g->v[K_WAVE_PERIOD];
    if (n < 2 || !g->reads)
        return 0;
    unsigned long long ph = (g->reads - 1) % n, half = n / 2;
    return ph <= half ? ph * 1000 / half : (n - ph) * 1000 / (n - half);
}

int nvmlDeviceGetTemperature(void *h, int sensor, unsigned *t)
{
    DEV(h);
    g->reads++;
    *t = (unsigned)(g->v[K_TEMP] + g->v[K_TEMP_WAVE] * wave_milli(g) / 1000);
    return sensor == 0 ? 0 : INVALID_ARGUMENT;
}

int nvmlDeviceGetPowerUsage(void *h, unsigned *mw)
{
    DEV(h);
    *mw = (unsigned)(g->v[K_POWER] + g->v[K_POWER_WAVE] * wave_milli(g) / 1000);
    return 0;
}

int nvmlDeviceGetEnforcedPowerLimit(void *h, unsigned *mw)
{
    DEV(h);
    *mw = (unsigned)g->v[K_LIMIT];
    return 0;
}

int nvmlDeviceGetTotalEnergyConsumption(void *h, unsigned long long *mj)
{
    DEV(h);
    *mj = g->v[K_ENERGY] +
          (unsigned long long)((now_s() - t0) * (double)g->v[K_POWER]);
    return 0;
}

int nvmlDeviceGetClockInfo(void *h, int type, unsigned *mhz)
{
    DEV(h);
    *mhz = (unsigned)g->v[type == 1 ? K_SM : K_MEM];
    return 0;
}

int nvmlDeviceGetMaxClockInfo(void *h, int type, unsigned *mhz)
{
    DEV(h);
    *mhz = (unsigned)g->v[type == 1 ? K_SM_MAX : K_MEM];
    return 0;
}

int nvmlDeviceGetCurrentClocksEventReasons(void *h, unsigned long long *r)
{
    DEV(h);
    *r = g->v[K_REASONS] | (wave_milli(g) > 500 ? g->v[K_REASONS_WAVE] : 0);
    return 0;
}

int nvmlDeviceGetTotalEccErrors(void *h, int type, int counter,
                                unsigned long long *n)
{
    DEV(h);
    (void)counter;
    *n = g->v[type == 1 ? K_ECC_UNC : K_ECC_CORR];
    return 0;
}

int nvmlDeviceGetRemappedRows(void *h, unsigned *corr, unsigned *unc,
                              unsigned *pending, unsigned *failure)
{
    DEV(h);
    *corr = (unsigned)g->v[K_REMAP_CORR];
    *unc = (unsigned)g->v[K_REMAP_UNC];
    *pending = (unsigned)g->v[K_REMAP_PENDING];
    *failure = (unsigned)g->v[K_REMAP_FAILURE];
    return 0;
}

int nvmlDeviceGetRetiredPages(void *h, int cause, unsigned *count_,
                              unsigned long long *addrs)
{
    DEV(h);
    (void)addrs;
    (void)cause;
    (void)count_;
    return NOT_SUPPORTED; /* H100: row remapping replaces page retirement */
}

int nvmlDeviceGetCurrPcieLinkGeneration(void *h, unsigned *v)
{
    DEV(h);
    *v = (unsigned)g->v[K_GEN];
    return 0;
}

int nvmlDeviceGetMaxPcieLinkGeneration(void *h, unsigned *v)
{
    DEV(h);
    *v = (unsigned)g->v[K_GEN_MAX];
    return 0;
}

int nvmlDeviceGetCurrPcieLinkWidth(void *h, unsigned *v)
{
    DEV(h);
    *v = (unsigned)g->v[K_WIDTH];
    return 0;
}

int nvmlDeviceGetMaxPcieLinkWidth(void *h, unsigned *v)
{
    DEV(h);
    *v = (unsigned)g->v[K_WIDTH_MAX];
    return 0;
}

int nvmlDeviceGetPcieReplayCounter(void *h, unsigned *v)
{
    DEV(h);
    *v = (unsigned)g->v[K_REPLAY];
    return 0;
}

int nvmlDeviceGetNvLinkState(void *h, unsigned link, int *active)
{
    DEV(h);
    if (link >= g->v[K_NVLINKS])
        return INVALID_ARGUMENT;
    *active = !((g->v[K_NVLINK_DOWN] >> link) & 1);
    return 0;
}

int nvmlDeviceGetNvLinkErrorCounter(void *h, unsigned link, int counter,
                                    unsigned long long *v)
{
    DEV(h);
    if (link >= g->v[K_NVLINKS])
        return INVALID_ARGUMENT;
    /* all of a link's errors reported as CRC flit errors (counter 2) */
    *v = counter == 2 && ((g->v[K_NVLINK_ERR_MASK] >> link) & 1)
             ? g->v[K_NVLINK_ERRORS] : 0;
    return 0;
}

int nvmlDeviceGetUtilizationRates(void *h, unsigned *util)
{
    DEV(h);
    util[0] = (unsigned)g->v[K_UTIL];
    util[1] = (unsigned)g->v[K_UTIL] / 2;
    return 0;
}

/* nvmlFieldValue_t: fieldId, scopeId, timestamp, latencyUsec, valueType,
 * nvmlReturn, value (8 bytes): 40 bytes. */
int nvmlDeviceGetFieldValues(void *h, int n, void *values)
{
    DEV(h);
    unsigned char *v = values;
    for (int i = 0; i < n; i++, v += 40) {
        unsigned id;
        int ret = 0;
        unsigned long long val = 0;
        memcpy(&id, v, sizeof id);
        if (id == 82)
            val = g->v[K_MEM_TEMP];
        else if (id == 230)
            val = g->v[K_RECOVERY];
        else
            ret = NOT_SUPPORTED;
        memcpy(v + 28, &ret, sizeof ret);
        memcpy(v + 32, &val, sizeof val);
    }
    return 0;
}
