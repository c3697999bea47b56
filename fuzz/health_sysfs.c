/*
 * health_sysfs.c -- libFuzzer target for the sysfs value parsers (integer
 * files, PCIe AER counter files, InfiniBand port state).
 */
#include <stddef.h>
#include <stdint.h>

#include "health/parse.h"

int fb__fuzz_health_sysfs(const uint8_t *data, size_t size);

int fb__fuzz_health_sysfs(const uint8_t *data, size_t size)
{
    const char *s = (const char *)data;
    int64_t v;
    uint64_t total;
    int state;
    (void)fb__sysfs_parse_i64(s, size, &v);
    (void)fb__aer_parse(s, size, &total);
    (void)fb__ib_state_parse(s, size, &state);
    return 0;
}

#ifndef FB_FUZZ_NO_ENTRY
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return fb__fuzz_health_sysfs(data, size);
}
#endif
