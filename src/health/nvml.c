/*
 * nvml.c -- NVML through dlopen (see nvml.h).  Structures NVML fills are
 * declared here with the layout of nvml.h (which we do not ship or need).
 */
#include "health/nvml.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "firebreak/firebreak.h"

typedef struct {
    char bus_id_legacy[16];
    unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
    char bus_id[32];
} nvml_pci_info;

typedef struct {
    unsigned gpu, memory;
} nvml_utilization;

typedef struct {
    unsigned field_id, scope_id;
    long long timestamp, latency_us;
    int value_type, nvml_return;
    union {
        double d;
        unsigned u;
        unsigned long ul;
        unsigned long long ull;
        long long sll;
    } value;
} nvml_field_value;

#define FIELD_MEMORY_TEMP 82
#define FIELD_RECOVERY_ACTION 230

typedef int (*fn_void)(void);
typedef int (*fn_count)(unsigned *);
typedef int (*fn_handle)(unsigned, fb__nvml_dev *);
typedef int (*fn_str)(fb__nvml_dev, char *, unsigned);
typedef int (*fn_pci)(fb__nvml_dev, nvml_pci_info *);
typedef int (*fn_u)(fb__nvml_dev, unsigned *);
typedef int (*fn_ull)(fb__nvml_dev, unsigned long long *);
typedef int (*fn_type_u)(fb__nvml_dev, int, unsigned *);
typedef int (*fn_ecc)(fb__nvml_dev, int, int, unsigned long long *);
typedef int (*fn_remap)(fb__nvml_dev, unsigned *, unsigned *, unsigned *,
                        unsigned *);
typedef int (*fn_retired)(fb__nvml_dev, int, unsigned *, unsigned long long *);
typedef int (*fn_link_state)(fb__nvml_dev, unsigned, int *);
typedef int (*fn_link_err)(fb__nvml_dev, unsigned, int, unsigned long long *);
typedef int (*fn_util)(fb__nvml_dev, nvml_utilization *);
typedef int (*fn_fields)(fb__nvml_dev, int, nvml_field_value *);
typedef const char *(*fn_errstr)(int);

struct fb__nvml {
    void *dl;
    char path[512];
    fn_void init, shutdown;
    fn_errstr error_string;
    fn_count count;
    fn_handle handle;
    fn_str uuid, name;
    fn_pci pci;
    fn_type_u temperature, clock, max_clock;
    fn_u power, limit, gen, gen_max, width, width_max, replay;
    fn_ull energy, reasons;
    fn_ecc ecc;
    fn_remap remap;
    fn_retired retired;
    fn_link_state link_state;
    fn_link_err link_err;
    fn_util util;
    fn_fields fields;
};

/* dlsym into a function pointer without a cast ISO C forbids. */
static void load_sym(void *dl, const char *name, void *slot)
{
    void *p = dlsym(dl, name);
    memcpy(slot, &p, sizeof p);
}

int fb__nvml_open(fb__nvml **out, const char *lib_path, int allow_system,
                  char *err, size_t err_size)
{
    *out = NULL;
    if (!lib_path)
        lib_path = fb__getenv("FIREBREAK_NVML_LIB");
    if (!lib_path) {
        if (!allow_system) {
            snprintf(err, err_size, "NVML not consulted with --root "
                     "(set FIREBREAK_NVML_LIB to a test double)");
            return -ENOENT;
        }
        lib_path = "libnvidia-ml.so.1";
    }
    void *dl = dlopen(lib_path, RTLD_NOW | RTLD_LOCAL);
    if (!dl) {
        const char *e = dlerror();
        snprintf(err, err_size, "no NVIDIA driver: cannot load %s (%s)",
                 lib_path, e ? e : "?");
        return -ENOENT;
    }
    fb__nvml *n = calloc(1, sizeof *n);
    if (!n) {
        dlclose(dl);
        return -ENOMEM;
    }
    n->dl = dl;
    snprintf(n->path, sizeof n->path, "%s", lib_path);
    load_sym(dl, "nvmlInit_v2", &n->init);
    load_sym(dl, "nvmlShutdown", &n->shutdown);
    load_sym(dl, "nvmlErrorString", &n->error_string);
    load_sym(dl, "nvmlDeviceGetCount_v2", &n->count);
    load_sym(dl, "nvmlDeviceGetHandleByIndex_v2", &n->handle);
    load_sym(dl, "nvmlDeviceGetUUID", &n->uuid);
    load_sym(dl, "nvmlDeviceGetName", &n->name);
    load_sym(dl, "nvmlDeviceGetPciInfo_v3", &n->pci);
    load_sym(dl, "nvmlDeviceGetTemperature", &n->temperature);
    load_sym(dl, "nvmlDeviceGetClockInfo", &n->clock);
    load_sym(dl, "nvmlDeviceGetMaxClockInfo", &n->max_clock);
    load_sym(dl, "nvmlDeviceGetPowerUsage", &n->power);
    load_sym(dl, "nvmlDeviceGetEnforcedPowerLimit", &n->limit);
    load_sym(dl, "nvmlDeviceGetCurrPcieLinkGeneration", &n->gen);
    load_sym(dl, "nvmlDeviceGetMaxPcieLinkGeneration", &n->gen_max);
    load_sym(dl, "nvmlDeviceGetCurrPcieLinkWidth", &n->width);
    load_sym(dl, "nvmlDeviceGetMaxPcieLinkWidth", &n->width_max);
    load_sym(dl, "nvmlDeviceGetPcieReplayCounter", &n->replay);
    load_sym(dl, "nvmlDeviceGetTotalEnergyConsumption", &n->energy);
    load_sym(dl, "nvmlDeviceGetCurrentClocksEventReasons", &n->reasons);
    if (!n->reasons) /* older drivers: the same call under its old name */
        load_sym(dl, "nvmlDeviceGetCurrentClocksThrottleReasons", &n->reasons);
    load_sym(dl, "nvmlDeviceGetTotalEccErrors", &n->ecc);
    load_sym(dl, "nvmlDeviceGetRemappedRows", &n->remap);
    load_sym(dl, "nvmlDeviceGetRetiredPages", &n->retired);
    load_sym(dl, "nvmlDeviceGetNvLinkState", &n->link_state);
    load_sym(dl, "nvmlDeviceGetNvLinkErrorCounter", &n->link_err);
    load_sym(dl, "nvmlDeviceGetUtilizationRates", &n->util);
    load_sym(dl, "nvmlDeviceGetFieldValues", &n->fields);
    if (!n->init || !n->count || !n->handle) {
        snprintf(err, err_size, "%s lacks nvmlInit_v2, nvmlDeviceGetCount_v2 "
                 "or nvmlDeviceGetHandleByIndex_v2", lib_path);
        dlclose(dl);
        free(n);
        return FB_EFORMAT;
    }
    int rc = n->init();
    if (rc != FB__NVML_SUCCESS) {
        snprintf(err, err_size, "nvmlInit_v2 failed in %s: %s", lib_path,
                 fb__nvml_strerror(n, rc));
        dlclose(dl);
        free(n);
        return -EIO;
    }
    *out = n;
    return 0;
}

void fb__nvml_close(fb__nvml *n)
{
    if (!n)
        return;
    if (n->shutdown)
        n->shutdown();
    dlclose(n->dl);
    free(n);
}

const char *fb__nvml_path(const fb__nvml *n)
{
    return n->path;
}

const char *fb__nvml_strerror(fb__nvml *n, int rc)
{
    static _Thread_local char buf[48];
    const char *s = n && n->error_string ? n->error_string(rc) : NULL;
    if (s && *s)
        return s;
    snprintf(buf, sizeof buf, "NVML error %d", rc);
    return buf;
}

int fb__nvml_count(fb__nvml *n)
{
    unsigned c = 0;
    int rc = n->count(&c);
    if (rc != FB__NVML_SUCCESS)
        return -(rc ? rc : FB__NVML_ERROR_UNKNOWN);
    return c > FB__NVML_MAX_GPUS ? FB__NVML_MAX_GPUS : (int)c;
}

/* Record GPU_IS_LOST from any call; returns 1 when rc is success. */
static int ok(fb__gpu_sample *s, int rc)
{
    if (rc == FB__NVML_ERROR_GPU_IS_LOST)
        s->lost = 1;
    return rc == FB__NVML_SUCCESS;
}

/* Copy a string NVML wrote, stopping at NUL or the buffer's end. */
static void clean_str(char *s, size_t size)
{
    s[size - 1] = '\0';
    for (char *p = s; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == '"' || *p == '\\')
            *p = '?';
}

static void sample_links(fb__nvml *n, fb__nvml_dev d, fb__gpu_sample *s)
{
    size_t off = 0;
    s->nvlink_detail[0] = '\0';
    if (!n->link_state)
        return;
    for (unsigned link = 0; link < FB__NVML_MAX_LINKS; link++) {
        int active = 0;
        int rc = n->link_state(d, link, &active);
        if (!ok(s, rc))
            continue; /* not supported / no such link */
        s->nvlink_links++;
        unsigned long long errs = 0;
        for (int c = 0; c < 4 && n->link_err; c++) {
            unsigned long long v = 0;
            if (ok(s, n->link_err(d, link, c, &v)) && v < (1ull << 62))
                errs += v;
        }
        s->nvlink_errors += errs;
        if (!active)
            s->nvlink_down++;
        if ((!active || errs) && off < sizeof s->nvlink_detail) {
            int w = snprintf(s->nvlink_detail + off,
                             sizeof s->nvlink_detail - off, "%slink %u %s",
                             off ? ", " : "", link, active ? "up" : "down");
            if (w > 0)
                off += (size_t)w;
            if (errs && off < sizeof s->nvlink_detail) {
                w = snprintf(s->nvlink_detail + off,
                             sizeof s->nvlink_detail - off, " %llu errors",
                             errs);
                if (w > 0)
                    off += (size_t)w;
            }
        }
    }
}

void fb__nvml_sample(fb__nvml *n, int index, int full, fb__gpu_sample *s)
{
    memset(s, 0, sizeof *s);
    s->index = index;
    fb__nvml_dev d = NULL;
    s->handle_rc = n->handle((unsigned)index, &d);
    if (!ok(s, s->handle_rc))
        return;
    if (n->uuid && ok(s, n->uuid(d, s->uuid, sizeof s->uuid)))
        clean_str(s->uuid, sizeof s->uuid);
    else
        s->uuid[0] = '\0';
    if (n->name && ok(s, n->name(d, s->name, sizeof s->name)))
        clean_str(s->name, sizeof s->name);
    else
        s->name[0] = '\0';
    nvml_pci_info pci;
    memset(&pci, 0, sizeof pci);
    if (n->pci && ok(s, n->pci(d, &pci))) {
        memcpy(s->bus_id, pci.bus_id, sizeof s->bus_id);
        clean_str(s->bus_id, sizeof s->bus_id);
    }
    s->has_temp = n->temperature && ok(s, n->temperature(d, 0, &s->temp_c));
    s->has_power = n->power && ok(s, n->power(d, &s->power_mw));
    s->has_limit = n->limit && ok(s, n->limit(d, &s->limit_mw));
    s->has_energy = n->energy && ok(s, n->energy(d, &s->energy_mj));
    s->has_clocks = n->clock && ok(s, n->clock(d, 1, &s->sm_mhz)) &&
                    ok(s, n->clock(d, 2, &s->mem_mhz));
    if (n->max_clock && !ok(s, n->max_clock(d, 1, &s->sm_max_mhz)))
        s->sm_max_mhz = 0;
    s->has_reasons = n->reasons && ok(s, n->reasons(d, &s->reasons));
    nvml_utilization u = {0, 0};
    s->has_util = n->util && ok(s, n->util(d, &u));
    s->util_pct = u.gpu;
    s->has_replay = n->replay && ok(s, n->replay(d, &s->pcie_replay));
    if (n->fields) {
        nvml_field_value fv[2];
        memset(fv, 0, sizeof fv);
        fv[0].field_id = FIELD_MEMORY_TEMP;
        fv[1].field_id = FIELD_RECOVERY_ACTION;
        if (ok(s, n->fields(d, 2, fv))) {
            if (fv[0].nvml_return == 0) {
                s->has_mem_temp = 1;
                s->mem_temp_c = fv[0].value.u;
            }
            if (fv[1].nvml_return == 0) {
                s->has_recovery = 1;
                s->recovery_action = (long long)fv[1].value.u;
            }
        }
    }
    if (!full)
        return;
    s->has_ecc = n->ecc && ok(s, n->ecc(d, 1, 0, &s->ecc_uncorrected_volatile)) &&
                 ok(s, n->ecc(d, 0, 0, &s->ecc_corrected_volatile));
    s->has_remap = n->remap && ok(s, n->remap(d, &s->remap_corr, &s->remap_unc,
                                              &s->remap_pending,
                                              &s->remap_failure));
    if (n->retired) {
        unsigned c0 = 0, c1 = 0;
        int r0 = n->retired(d, 0, &c0, NULL);
        int r1 = n->retired(d, 1, &c1, NULL);
        ok(s, r0);
        ok(s, r1);
        s->has_retired = (r0 == 0 || r0 == FB__NVML_ERROR_INSUFFICIENT_SIZE) &&
                         (r1 == 0 || r1 == FB__NVML_ERROR_INSUFFICIENT_SIZE);
        s->retired_sbe = c0;
        s->retired_dbe = c1;
    }
    s->has_pcie = n->gen && n->gen_max && n->width && n->width_max &&
                  ok(s, n->gen(d, &s->pcie_gen)) &&
                  ok(s, n->gen_max(d, &s->pcie_gen_max)) &&
                  ok(s, n->width(d, &s->pcie_width)) &&
                  ok(s, n->width_max(d, &s->pcie_width_max));
    sample_links(n, d, s);
}
