/*
 * slurm_line.c -- libFuzzer target for the fbw1 watcher-line parser
 * (src/supervisor/slurm.c): the supervisor reads these lines from srun's
 * stdout, so any byte string must be rejected or parsed within bounds.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "supervisor/slurm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fb__slurm_msg m;
    int max_rank = size ? data[0] : 1;
    if (fb__slurm_parse_line((const char *)data, size, max_rank, &m) == 0) {
        /* A parsed message keeps its invariants. */
        if (m.kind == FB_SLURM_MSG_HEALTH && !fb__slurm_node_name_ok(m.node))
            __builtin_trap();
        if ((m.kind == FB_SLURM_MSG_END || m.kind == FB_SLURM_MSG_BEAT) &&
            (m.rank < 0 || m.rank >= max_rank))
            __builtin_trap();
        if (memchr(m.reason, '\0', sizeof m.reason) == NULL)
            __builtin_trap();
    }
    return 0;
}
