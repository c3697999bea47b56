/*
 * checks_gpu.c -- GPU checks through NVML: count, lost GPUs, ECC, row
 * remapping, retired pages, thermal and power slowdowns, PCIe link
 * training and replays, NVLink, and NVML's recovery action.  Thresholds are
 * documented in docs/health.md.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "health/health.h"
#include "health/nvml.h"

#define TEMP_WARN_C 87u      /* H100 slowdown starts around 87-90 C */
#define TEMP_ABSURD_C 200u
#define POWER_ABSURD_MW 5000000u
#define REPLAY_WARN 1000u
#define RETIRED_PAGES_FAIL 60u  /* NVIDIA's retirement limit per GPU */

static void gpu_one(fb__nvml *n, int i, fb__health_result *r)
{
    fb__gpu_sample s;
    char name[64], id[160];
    fb__nvml_sample(n, i, 1, &s);
    snprintf(id, sizeof id, "GPU %d%s%s%s", i, s.bus_id[0] ? " (" : "",
             s.bus_id, s.bus_id[0] ? ")" : "");

    snprintf(name, sizeof name, "gpu%d.present", i);
    if (s.lost || s.handle_rc) {
        fb__health_add(r, name, FB_HEALTH_FAIL, "GPU", "Faulty GPU",
                       "drain the node and reboot it (GPU fell off the bus)",
                       "%s: %s", id,
                       s.lost ? "GPU is lost (NVML_ERROR_GPU_IS_LOST)"
                              : fb__nvml_strerror(n, s.handle_rc));
        return; /* the other readings of a lost GPU mean nothing */
    }
    fb__health_add(r, name, FB_HEALTH_OK, NULL, NULL, NULL, "%s %s %s", id,
                   s.name, s.uuid);

    snprintf(name, sizeof name, "gpu%d.ecc", i);
    if (!s.has_ecc)
        fb__health_add(r, name, FB_HEALTH_SKIPPED, NULL, NULL, NULL,
                       "%s: ECC counters not supported", id);
    else if (s.ecc_uncorrected_volatile)
        fb__health_add(r, name, FB_HEALTH_FAIL, "GPU", "GPU HBM3 memory",
                       "reset the GPU (drain the node until then)",
                       "%s: %llu uncorrectable ECC errors since the last "
                       "reset (%llu corrected)", id, s.ecc_uncorrected_volatile,
                       s.ecc_corrected_volatile);
    else
        fb__health_add(r, name, FB_HEALTH_OK, NULL, NULL, NULL,
                       "%s: no uncorrectable ECC errors (%llu corrected)", id,
                       s.ecc_corrected_volatile);

    snprintf(name, sizeof name, "gpu%d.remap", i);
    if (!s.has_remap)
        fb__health_add(r, name, FB_HEALTH_SKIPPED, NULL, NULL, NULL,
                       "%s: row remapping not supported", id);
    else if (s.remap_failure)
        fb__health_add(r, name, FB_HEALTH_FAIL, "GPU", "GPU HBM3 memory",
                       "replace the GPU: its HBM has no spare rows left",
                       "%s: row remapping failed (%u uncorrectable, %u "
                       "correctable rows remapped)", id, s.remap_unc,
                       s.remap_corr);
    else if (s.remap_pending)
        fb__health_add(r, name, FB_HEALTH_WARN, "GPU", "GPU HBM3 memory",
                       "reset the GPU when idle to apply the pending remap",
                       "%s: row remap pending (%u uncorrectable, %u "
                       "correctable rows remapped)", id, s.remap_unc,
                       s.remap_corr);
    else
        fb__health_add(r, name, FB_HEALTH_OK, NULL, NULL, NULL,
                       "%s: %u uncorrectable, %u correctable rows remapped",
                       id, s.remap_unc, s.remap_corr);

    snprintf(name, sizeof name, "gpu%d.retired_pages", i);
    if (!s.has_retired)
        fb__health_add(r, name, FB_HEALTH_SKIPPED, NULL, NULL, NULL,
                       "%s: page retirement not supported (row remapping "
                       "replaces it on A100 and later)", id);
    else if (s.retired_sbe + s.retired_dbe >= RETIRED_PAGES_FAIL)
        fb__health_add(r, name, FB_HEALTH_FAIL, "GPU", "GPU HBM3 memory",
                       "replace the GPU", "%s: %u pages retired (limit %u)",
                       id, s.retired_sbe + s.retired_dbe, RETIRED_PAGES_FAIL);
    else if (s.retired_dbe)
        fb__health_add(r, name, FB_HEALTH_WARN, "GPU", "GPU HBM3 memory",
                       "watch the retired page count",
                       "%s: %u pages retired for double-bit errors, %u for "
                       "single-bit", id, s.retired_dbe, s.retired_sbe);
    else
        fb__health_add(r, name, FB_HEALTH_OK, NULL, NULL, NULL,
                       "%s: %u pages retired", id, s.retired_sbe);

    snprintf(name, sizeof name, "gpu%d.thermal", i);
    if (!s.has_temp && !s.has_reasons)
        fb__health_add(r, name, FB_HEALTH_SKIPPED, NULL, NULL, NULL,
                       "%s: no temperature reading", id);
    else if (s.has_temp && s.temp_c > TEMP_ABSURD_C)
        fb__health_add(r, name, FB_HEALTH_WARN, "GPU",
                       "GPU thermal interface + sensor",
                       "check the GPU's temperature sensor",
                       "%s: absurd temperature %u C reported", id, s.temp_c);
    else if (s.has_reasons && (s.reasons & FB__NVML_REASONS_THERMAL))
        fb__health_add(r, name, FB_HEALTH_WARN, "GPU",
                       "GPU thermal interface + sensor",
                       "check cooling (airflow, fans, thermal interface)",
                       "%s: thermal slowdown at %u C (clock event reasons "
                       "0x%llx%s%s%s)", id, s.temp_c, s.reasons,
                       s.reasons & FB__NVML_REASON_SW_THERMAL ? " sw-thermal" : "",
                       s.reasons & FB__NVML_REASON_HW_THERMAL ? " hw-thermal" : "",
                       s.reasons & FB__NVML_REASON_HW_SLOWDOWN ? " hw-slowdown" : "");
    else if (s.has_temp && s.temp_c >= TEMP_WARN_C)
        fb__health_add(r, name, FB_HEALTH_WARN, "GPU",
                       "GPU thermal interface + sensor",
                       "check cooling before it slows down",
                       "%s: %u C (warn at %u C)", id, s.temp_c, TEMP_WARN_C);
    else
        fb__health_add(r, name, FB_HEALTH_OK, NULL, NULL, NULL, "%s: %u C",
                       id, s.temp_c);

    snprintf(name, sizeof name, "gpu%d.power", i);
    if (!s.has_power)
        fb__health_add(r, name, FB_HEALTH_SKIPPED, NULL, NULL, NULL,
                       "%s: no power reading", id);
    else if (s.power_mw > POWER_ABSURD_MW)
        fb__health_add(r, name, FB_HEALTH_WARN, "Host", "Power supply",
                       "check the GPU's power sensor",
                       "%s: absurd power %u mW reported", id, s.power_mw);
    else if (s.has_reasons && (s.reasons & FB__NVML_REASONS_POWER))
        fb__health_add(r, name, FB_HEALTH_WARN, "Host", "Power supply",
                       "check the node's power supplies and power brake signal",
                       "%s: hardware power brake slowdown at %.1f W (limit "
                       "%.1f W)", id, s.power_mw / 1000.0, s.limit_mw / 1000.0);
    else if (s.has_limit && s.limit_mw &&
             s.power_mw > s.limit_mw + s.limit_mw / 20)
        fb__health_add(r, name, FB_HEALTH_WARN, "Host", "Power supply",
                       "check the power limit and the sensor",
                       "%s: drawing %.1f W over its %.1f W limit", id,
                       s.power_mw / 1000.0, s.limit_mw / 1000.0);
    else
        fb__health_add(r, name, FB_HEALTH_OK, NULL, NULL, NULL,
                       "%s: %.1f W of %.1f W", id, s.power_mw / 1000.0,
                       s.limit_mw / 1000.0);

    snprintf(name, sizeof name, "gpu%d.pcie", i);
    if (!s.has_pcie)
        fb__health_add(r, name, FB_HEALTH_SKIPPED, NULL, NULL, NULL,
                       "%s: PCIe link not reported", id);
    else if (s.pcie_width < s.pcie_width_max ||
             (s.pcie_gen < s.pcie_gen_max &&
              !(s.has_reasons && (s.reasons & FB__NVML_REASON_IDLE))))
        fb__health_add(r, name, FB_HEALTH_WARN, "Host", "IO expansion board",
                       "reseat the GPU / riser; drain if it persists",
                       "%s: PCIe link down-trained: gen %u x%u (max gen %u "
                       "x%u)%s", id, s.pcie_gen, s.pcie_width, s.pcie_gen_max,
                       s.pcie_width_max,
                       s.has_replay ? "" : ", replay counter unavailable");
    else if (s.has_replay && s.pcie_replay >= REPLAY_WARN)
        fb__health_add(r, name, FB_HEALTH_WARN, "Host", "IO expansion board",
                       "reseat the GPU / riser; watch the replay rate",
                       "%s: %u PCIe replays (warn at %u)", id, s.pcie_replay,
                       REPLAY_WARN);
    else
        fb__health_add(r, name, FB_HEALTH_OK, NULL, NULL, NULL,
                       "%s: gen %u x%u (max gen %u x%u), %u replays", id,
                       s.pcie_gen, s.pcie_width, s.pcie_gen_max,
                       s.pcie_width_max, s.pcie_replay);

    snprintf(name, sizeof name, "gpu%d.nvlink", i);
    if (!s.nvlink_links)
        fb__health_add(r, name, FB_HEALTH_SKIPPED, NULL, NULL, NULL,
                       "%s: no NVLink", id);
    else if (s.nvlink_down)
        fb__health_add(r, name, FB_HEALTH_FAIL, "GPU", "Faulty GPU",
                       "drain the node, check the NVLink peer and NVSwitch",
                       "%s: %d of %d NVLinks down: %s", id, s.nvlink_down,
                       s.nvlink_links, s.nvlink_detail);
    else if (s.nvlink_errors)
        fb__health_add(r, name, FB_HEALTH_WARN, "GPU", "Faulty GPU",
                       "watch the NVLink error counters; drain if they grow",
                       "%s: %llu NVLink errors (replay, recovery, CRC): %s",
                       id, s.nvlink_errors, s.nvlink_detail);
    else
        fb__health_add(r, name, FB_HEALTH_OK, NULL, NULL, NULL,
                       "%s: %d NVLinks up, no errors", id, s.nvlink_links);

    snprintf(name, sizeof name, "gpu%d.recovery", i);
    if (!s.has_recovery)
        fb__health_add(r, name, FB_HEALTH_SKIPPED, NULL, NULL, NULL,
                       "%s: recovery action field not supported", id);
    else if (s.recovery_action != 0) {
        static const char *names[] = {"none", "GPU reset", "node reboot",
                                      "drain P2P", "drain and reset"};
        long long a = s.recovery_action;
        fb__health_add(r, name, FB_HEALTH_FAIL, "GPU", "Faulty GPU",
                       "follow NVML's recovery action",
                       "%s: NVML recovery action %lld (%s)", id, a,
                       a > 0 && a < 5 ? names[a] : "unknown");
    } else
        fb__health_add(r, name, FB_HEALTH_OK, NULL, NULL, NULL,
                       "%s: no recovery action pending", id);
}

void fb__health_check_gpus(const fb__health_opts *o, fb__health_result *r)
{
    char err[512];
    fb__nvml *n = NULL;
    int rc = fb__nvml_open(&n, o->nvml_lib, o->root == NULL, err, sizeof err);
    if (rc) {
        if (o->expect_gpus > 0)
            fb__health_add(r, "gpu.count", FB_HEALTH_FAIL, "GPU", "Faulty GPU",
                           "check the NVIDIA driver (nvidia-smi); reboot "
                           "the node", "expected %d GPUs: %s",
                           o->expect_gpus, err);
        else
            fb__health_add(r, "gpu.count", FB_HEALTH_SKIPPED, NULL, NULL,
                           NULL, "GPU checks skipped: %s", err);
        return;
    }
    int count = fb__nvml_count(n);
    if (count < 0) {
        fb__health_add(r, "gpu.count", o->expect_gpus > 0 ? FB_HEALTH_FAIL
                                                          : FB_HEALTH_WARN,
                       "GPU", "Faulty GPU", "check the NVIDIA driver",
                       "nvmlDeviceGetCount_v2 failed: %s",
                       fb__nvml_strerror(n, -count));
        count = o->expect_gpus > 0 ? o->expect_gpus : 0;
    } else if (o->expect_gpus >= 0 && count < o->expect_gpus) {
        fb__health_add(r, "gpu.count", FB_HEALTH_FAIL, "GPU", "Faulty GPU",
                       "drain the node and reboot it (a GPU fell off the bus)",
                       "%d GPUs visible, %d expected (%s)", count,
                       o->expect_gpus, fb__nvml_path(n));
    } else {
        fb__health_add(r, "gpu.count", FB_HEALTH_OK, NULL, NULL, NULL,
                       "%d GPUs visible%s (%s)", count,
                       o->expect_gpus >= 0 ? " as expected" : "",
                       fb__nvml_path(n));
    }
    for (int i = 0; i < count; i++)
        gpu_one(n, i, r);
    fb__nvml_close(n);
}
