/*
 * fbw1_line.c -- libFuzzer target for the fbw1 watcher protocol
 * (src/supervisor/fbw1.c): the supervisor reads these lines from srun's
 * stdout, written by watchers on other nodes, so any byte string must be
 * rejected or parsed within bounds; and a parsed message, formatted again,
 * must parse back to itself (the watcher's formatter and the supervisor's
 * parser agree).
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "supervisor/fbw1.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fb__fbw1_msg m, back;
    int max_rank = size ? data[0] : 1;
    if (fb__fbw1_parse((const char *)data, size, max_rank, &m) != 0)
        return 0;
    /* A parsed message keeps its invariants. */
    if ((m.kind == FB_FBW1_HEALTH || m.kind == FB_FBW1_HELLO || m.kind == FB_FBW1_BYE ||
         m.kind == FB_FBW1_ALIVE || m.kind == FB_FBW1_SNAPPED) &&
        !fb__fbw1_node_name_ok(m.node))
        __builtin_trap();
    if (m.host[0] && (m.kind != FB_FBW1_HELLO || !fb__fbw1_node_name_ok(m.host)))
        __builtin_trap();
    if (m.kind != FB_FBW1_HELLO && m.kind != FB_FBW1_HEALTH && m.kind != FB_FBW1_BYE &&
        m.kind != FB_FBW1_ALIVE && m.kind != FB_FBW1_SNAP && m.kind != FB_FBW1_SNAPPED &&
        (m.rank < 0 || m.rank >= max_rank))
        __builtin_trap();
    if (!memchr(m.reason, '\0', sizeof m.reason) || !memchr(m.rep_text, '\0', sizeof m.rep_text))
        __builtin_trap();
    if ((m.kind == FB_FBW1_SNAP || m.kind == FB_FBW1_SNAPPED) &&
        (m.attempt < 0 || m.attempt > FB__FBW1_ATTEMPT_MAX || m.count < 0 ||
         m.count > FB__FBW1_COUNT_MAX))
        __builtin_trap();
    if (m.nkeep < 0 || m.nkeep > FB__FBW1_DROP_KEEP_MAX || (m.nkeep && m.kind != FB_FBW1_DROP))
        __builtin_trap();
    for (int i = 0; i < m.nkeep; i++)
        if (m.keep[i] < 0 || m.keep[i] >= m.step)
            __builtin_trap();
    /* ... and comes back from the formatter unchanged. */
    char line[FB__FBW1_LINE_MAX + 2];
    int n = fb__fbw1_format(&m, line, sizeof line);
    if (n <= 0 || fb__fbw1_parse(line, (size_t)n - 1, max_rank, &back) != 0)
        __builtin_trap();
    if (m.kind != back.kind || m.rank != back.rank || strcmp(m.node, back.node) ||
        strcmp(m.host, back.host) ||
        strcmp(m.reason, back.reason) || strcmp(m.rep_text, back.rep_text) ||
        m.step != back.step || m.age_ms != back.age_ms || m.code != back.code ||
        m.rep_idx != back.rep_idx || m.attempt != back.attempt || m.count != back.count || m.rep_wall_ns != back.rep_wall_ns ||
        m.nkeep != back.nkeep || memcmp(m.keep, back.keep, sizeof m.keep))
        __builtin_trap();
    return 0;
}
