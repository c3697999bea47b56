/*
 * report.c -- libFuzzer target for the report's root-cause classifier:
 * the health and flight-recorder verdicts (JSON from other programs) and
 * the failing rank's last lines (kernel-log style XIDs).
 *
 * Input: two bytes of signal / exit code, then NUL-separated fields:
 * kind, health, fr_verdict, last_lines, detail, injected.  Seeds:
 * tests/report/data/.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "report/report.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    char *buf = malloc(size + 1);
    if (!buf)
        return 0;
    memcpy(buf, data + 2, size - 2);
    buf[size - 2] = '\0';
    const char *field[6] = {NULL};
    size_t at = 0;
    for (int i = 0; i < 6 && at <= size - 2; i++) {
        field[i] = buf + at;
        at += strlen(buf + at) + 1;
    }
    fb__report_evidence ev = {
        .kind = field[0], .health = field[1], .fr_verdict = field[2],
        .last_lines = field[3], .detail = field[4], .injected = field[5],
        .signal = data[0] & 0x1f, .has_exit_code = data[1] != 0,
        .exit_code = data[1],
    };
    fb__report_class c;
    fb__report_classify(&ev, &c);
    if (!c.category || !c.component || !c.decided_by ||
        strnlen(c.evidence, sizeof c.evidence) >= sizeof c.evidence)
        abort();
    (void)fb__report_find_xid(field[3]);
    free(buf);
    return 0;
}
