/*
 * health_kmsg.c -- libFuzzer target for the kernel-log parsers: the input
 * is a log file (records one per line, as under --root) and each line is
 * also tried as a bare XID text.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "health/parse.h"

int fb__fuzz_health_kmsg(const uint8_t *data, size_t size);

int fb__fuzz_health_kmsg(const uint8_t *data, size_t size)
{
    const char *p = (const char *)data, *end = p + size;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
        fb__kmsg_record rec;
        fb__xid_event ev;
        fb__xid_info info;
        if (fb__kmsg_parse(p, len, &rec) == 0 &&
            fb__xid_parse(rec.text, strlen(rec.text), &ev) == 1)
            fb__xid_lookup(&ev, &info);
        if (fb__xid_parse(p, len, &ev) == 1)
            fb__xid_lookup(&ev, &info);
        p += len + (nl != NULL);
    }
    return 0;
}

#ifndef FB_FUZZ_NO_ENTRY
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return fb__fuzz_health_kmsg(data, size);
}
#endif
