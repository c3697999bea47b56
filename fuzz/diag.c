/*
 * diag.c -- libFuzzer target for the root-cause classifier's kernel-log
 * side: the input is a kernel log in /dev/kmsg's record format.  Each
 * line is taken as evidence text (fb__diag_kernel_line); the whole input
 * is scanned as a file (fb__diag_kmsg_scan, through a memfd) and what the
 * scan keeps, and the input itself as a rank's last lines, are classified.
 * Seeds: tests/diag/data/.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "diag/diag.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *p = (const char *)data, *end = p + size;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
        fb__kline k;
        fb__kline_kind kind = fb__diag_kernel_line(p, len, &k);
        if (kind != k.kind || strnlen(k.name, sizeof k.name) >= sizeof k.name)
            abort();
        p += len + (nl != NULL);
    }
    static char klog[16384];
    klog[0] = '\0';
    int fd = memfd_create("fuzz-kmsg", MFD_CLOEXEC);
    if (fd >= 0) {
        char path[64];
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        if (write(fd, data, size) == (ssize_t)size) {
            int n = fb__diag_kmsg_scan(path, 0, UINT64_MAX, klog, sizeof klog);
            if (n > FB__DIAG_KLINES_MAX || strnlen(klog, sizeof klog) >= sizeof klog)
                abort();
        }
        close(fd);
    }
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    fb__diag_evidence ev = {.kind = "crash", .signal = 9, .pid = 48213,
                            .kernel_log = klog, .last_lines = text,
                            .detail = text};
    fb__diag_class c;
    fb__diag_classify(&ev, &c);
    if (!c.category || !c.component || !c.decided_by ||
        strnlen(c.evidence, sizeof c.evidence) >= sizeof c.evidence)
        abort();
    ev.kernel_log = text;
    fb__diag_classify(&ev, &c);
    char stored[1200];
    fb__diag_format_stored(&c, stored, sizeof stored);
    if (fb__diag_stored_rule(stored) != c.rule)
        abort();
    (void)fb__diag_stored_rule(text);
    free(text);
    return 0;
}
