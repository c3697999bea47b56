/*
 * sim_rates.c -- libFuzzer target for the rates-file parser of
 * `firebreak sim --rates` (src/sim/sim_rates.c).  Any bytes must give 0 or
 * -EINVAL with a message; on success every category must be usable by the
 * simulator (valid name, finite non-negative rates).
 */
#include "sim/sim.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fb__sim_config c;
    fb__sim_config_defaults(&c);
    char err[256];
    err[0] = '\0';
    int rc = fb__sim_parse_rates(&c, (const char *)data, size, err,
                                 sizeof err);
    if (rc != 0) {
        if (err[0] == '\0')
            abort(); /* an error must say what was wrong */
        return 0;
    }
    if (c.ncat < 1 || c.ncat > FB_SIM_MAX_CATEGORIES)
        abort();
    for (int i = 0; i < c.ncat; i++) {
        const fb__sim_category *k = &c.cat[i];
        if (!memchr(k->name, '\0', sizeof k->name) || k->name[0] == '\0')
            abort();
        if (!isfinite(k->rate_per_gpu_s) || k->rate_per_gpu_s < 0 ||
            !isfinite(k->rate_per_job_s) || k->rate_per_job_s < 0)
            abort();
    }
    if (!isfinite(c.planned_per_job_s) || c.planned_per_job_s < 0)
        abort();
    return 0;
}
