/*
 * lib_inject.c -- libFuzzer target for the fault-injection spec parser
 * (FIREBREAK_INJECT, --inject): outside input from the environment and the
 * command line.
 */
#include <stdint.h>
#include <string.h>

#include "lib/lib.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char spec[4096];
    if (size >= sizeof spec)
        size = sizeof spec - 1;
    memcpy(spec, data, size);
    spec[size] = '\0';
    fb__inject_plan plan;
    char err[256];
    if (fb__inject_parse(spec, &plan, err, sizeof err) == 0) {
        for (int i = 0; i < plan.count; i++)
            (void)fb__inject_kind_name(plan.faults[i].kind);
    }
    return 0;
}
