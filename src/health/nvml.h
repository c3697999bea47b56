/*
 * nvml.h -- NVML loaded at run time with dlopen (no header, no link
 * dependency; REFERENCE.md section 6).  Shared by `firebreak health` and the
 * agent.  Only the versioned symbols are used; each missing optional symbol
 * is simply NULL and the caller treats the reading as "not supported".
 *
 * Library choice: FIREBREAK_NVML_LIB when set, else libnvidia-ml.so.1.  With
 * a fixture root (--root) only FIREBREAK_NVML_LIB is consulted, never the
 * real driver: pass allow_system = 0.
 *
 * Every value NVML returns is outside input: callers bound it (absurd
 * temperatures, powers and counts are reported, not believed).
 */
#ifndef FB_HEALTH_NVML_H
#define FB_HEALTH_NVML_H

#include <stddef.h>
#include <stdint.h>

/* NVML return codes we name (the rest are printed as numbers). */
enum {
    FB__NVML_SUCCESS = 0,
    FB__NVML_ERROR_INVALID_ARGUMENT = 2,
    FB__NVML_ERROR_NOT_SUPPORTED = 3,
    FB__NVML_ERROR_INSUFFICIENT_SIZE = 7,
    FB__NVML_ERROR_DRIVER_NOT_LOADED = 9,
    FB__NVML_ERROR_GPU_IS_LOST = 15,
    FB__NVML_ERROR_UNKNOWN = 999
};

/* Clock event ("throttle") reason bits. */
#define FB__NVML_REASON_IDLE 0x1ull
#define FB__NVML_REASON_SW_POWER_CAP 0x4ull
#define FB__NVML_REASON_HW_SLOWDOWN 0x8ull
#define FB__NVML_REASON_SW_THERMAL 0x20ull
#define FB__NVML_REASON_HW_THERMAL 0x40ull
#define FB__NVML_REASON_HW_POWER_BRAKE 0x80ull
#define FB__NVML_REASONS_THERMAL \
    (FB__NVML_REASON_SW_THERMAL | FB__NVML_REASON_HW_THERMAL | FB__NVML_REASON_HW_SLOWDOWN)
#define FB__NVML_REASONS_POWER FB__NVML_REASON_HW_POWER_BRAKE

#define FB__NVML_MAX_GPUS 64
#define FB__NVML_MAX_LINKS 18

typedef void *fb__nvml_dev; /* nvmlDevice_t: an opaque pointer */

/* One GPU's readings; `has_*` says whether NVML answered. */
typedef struct fb__gpu_sample {
    int index;
    int handle_rc;            /* nvmlDeviceGetHandleByIndex_v2's code */
    int lost;                 /* any call answered GPU_IS_LOST */
    char uuid[96], name[96], bus_id[32];
    int has_temp, has_mem_temp, has_power, has_limit, has_energy;
    int has_clocks, has_reasons, has_util;
    unsigned temp_c, mem_temp_c;
    unsigned power_mw, limit_mw;
    unsigned long long energy_mj;
    unsigned sm_mhz, mem_mhz, sm_max_mhz;
    unsigned long long reasons;
    unsigned util_pct;
    int has_ecc;
    unsigned long long ecc_uncorrected_volatile, ecc_corrected_volatile;
    int has_remap;
    unsigned remap_corr, remap_unc, remap_pending, remap_failure;
    int has_retired;
    unsigned retired_sbe, retired_dbe;
    int has_pcie;
    unsigned pcie_gen, pcie_gen_max, pcie_width, pcie_width_max;
    int has_replay;
    unsigned pcie_replay;
    int nvlink_links;         /* links NVML reported (supported) */
    int nvlink_down;          /* of those, inactive */
    unsigned long long nvlink_errors; /* replay + recovery + CRC, all links */
    char nvlink_detail[160];
    int has_recovery;
    long long recovery_action; /* field 230: 0 none, 1 reset, 2 reboot, 3/4 drain */
} fb__gpu_sample;

typedef struct fb__nvml fb__nvml;

/*
 * Load and initialize NVML.  lib_path NULL: FIREBREAK_NVML_LIB, else (when
 * allow_system) libnvidia-ml.so.1.  Returns 0, or a negative code with a
 * sentence in err: -ENOENT when no library could be loaded (no driver),
 * -EIO when nvmlInit_v2 failed, FB_EFORMAT when a required symbol is
 * missing.
 */
int fb__nvml_open(fb__nvml **out, const char *lib_path, int allow_system,
                  char *err, size_t err_size);
void fb__nvml_close(fb__nvml *n);

/* Device count (nvmlDeviceGetCount_v2), or a negative NVML code. */
int fb__nvml_count(fb__nvml *n);

/* Read everything about GPU `index`.  `full` adds the slow health-only
 * readings (ECC, remapping, retired pages, NVLink, PCIe).  Never fails:
 * what NVML could not answer is left unset. */
void fb__nvml_sample(fb__nvml *n, int index, int full, fb__gpu_sample *s);

/* nvmlErrorString when available, else "NVML error <rc>". */
const char *fb__nvml_strerror(fb__nvml *n, int rc);

/* The library path that was loaded. */
const char *fb__nvml_path(const fb__nvml *n);

#endif
