/*
 * slurm_text.c -- libFuzzer target for the readers of what Slurm's
 * commands print (src/supervisor/slurmtext.c): srun's log, `scontrol
 * -o show node` and `scontrol show topology`.  Any bytes: every line is
 * split within bounds, and what is taken from it is NUL-terminated, safe
 * for a terminal, a node name where one is wanted, and a task in range.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "supervisor/slurmtext.h"

#include "check_text.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void name(const char *s, size_t cap, int wanted)
{
    fuzz_check_text(s, cap);
    if (s[0] ? !fb__fbw1_node_name_ok(s) : wanted)
        __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    char line[FB__SLURM_LINE_MAX];
    size_t pos = 0, lines = 0;
    while (fb__slurm_next_line(text, size, &pos, line, sizeof line)) {
        if (pos > size || ++lines > size + 1 || memchr(line, '\0', sizeof line) == NULL ||
            strchr(line, '\n'))
            __builtin_trap();
        fb__srun_line l;
        fb__srun_line_parse(line, &l);
        fuzz_check_text(l.what, sizeof l.what);
        switch (l.kind) {
        case FB__SRUN_TASK_END:
            name(l.node, sizeof l.node, 1);
            fuzz_check_text(l.tasks, sizeof l.tasks);
            if (l.task < 0 || !l.tasks[0] || l.tasks[strspn(l.tasks, "0123456789-,")] ||
                (!l.several && strchr(l.tasks, '-')))
                __builtin_trap();
            break;
        case FB__SRUN_LAUNCH_FAILED:
            name(l.node, sizeof l.node, 1);
            break;
        case FB__SRUN_STEP_REFUSED:
        case FB__SRUN_OTHER:
            if (l.node[0])
                __builtin_trap();
            break;
        default:
            __builtin_trap();
        }
        fb__slurm_switch sw;
        if (fb__slurm_switch_parse(line, &sw) == 0) {
            name(sw.name, sizeof sw.name, 1);
            fuzz_check_text(sw.nodes, sizeof sw.nodes);
            if (sw.level < -1 || sw.level > 1000 || sw.nodes[0] == '-' ||
                sw.nodes[strspn(sw.nodes, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOP"
                                          "QRSTUVWXYZ0123456789-_.,[]")])
                __builtin_trap();
        }
        fb__slurm_node_info n;
        if (fb__slurm_node_parse(line, &n) == 0) {
            name(n.name, sizeof n.name, 1);
            name(n.addr, sizeof n.addr, 0);
            name(n.host, sizeof n.host, 0);
            fuzz_check_text(n.state, sizeof n.state);
            (void)fb__slurm_state_down(n.state);
        }
    }
    return 0;
}
