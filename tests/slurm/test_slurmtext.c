/*
 * test_slurmtext.c -- reading what Slurm's commands print
 * (src/supervisor/slurmtext.c), without a cluster:
 *   - lines of srun's own log, as Slurm 22.05 words them: a task's end,
 *     a launch that failed on a node, a step refused outright; lines
 *     like them that are not them; hostile bytes made safe;
 *   - lines of `scontrol -o show node`: the fields firebreak takes, a
 *     drain reason that poses as a field, names that are not names;
 *   - which states are down;
 *   - the line splitter: CRLF, NUL, a last line without '\n', cut lines.
 */
#include <string.h>

#include "../check.h"
#include "supervisor/slurmtext.h"

static fb__srun_line srun(const char *line)
{
    fb__srun_line l;
    fb__srun_line_parse(line, &l);
    return l;
}

static void test_srun(void)
{
    fb__srun_line l = srun("srun: error: node3: task 2: Killed");
    CHECK_EQ_INT(l.kind, FB__SRUN_TASK_END);
    CHECK_EQ_INT(l.task, 2);
    CHECK_EQ_STR(l.node, "node3");
    CHECK_EQ_STR(l.what, "Killed");
    l = srun("srun: error: gpu-a17.rack2: task 4095: Exited with exit code 3");
    CHECK_EQ_INT(l.kind, FB__SRUN_TASK_END);
    CHECK_EQ_INT(l.task, 4095);
    CHECK_EQ_STR(l.what, "Exited with exit code 3");
    CHECK_EQ_INT(l.several, 0);
    CHECK_EQ_STR(l.tasks, "4095");
    /* several tasks of one node that ended the same way at once (srun
     * folds them into one line): the first, and the list as written */
    l = srun("srun: error: node3: tasks 4-7,9: Out Of Memory");
    CHECK_EQ_INT(l.kind, FB__SRUN_TASK_END);
    CHECK_EQ_INT(l.task, 4);
    CHECK_EQ_INT(l.several, 1);
    CHECK_EQ_STR(l.tasks, "4-7,9");
    CHECK_EQ_STR(l.node, "node3");
    CHECK_EQ_STR(l.what, "Out Of Memory");
    CHECK_EQ_INT(srun("srun: error: node3: tasks : Killed").kind, FB__SRUN_OTHER);
    CHECK_EQ_INT(srun("srun: error: node3: tasks -3: Killed").kind, FB__SRUN_OTHER);
    CHECK_EQ_INT(srun("srun: error: node3: task 0-3: Killed").kind, FB__SRUN_OTHER);
    CHECK_EQ_INT(srun("srun: error: node3: tasks 0-3 Killed").kind, FB__SRUN_OTHER);
    /* longer than the list kept (a cyclic distribution): the same report,
     * its list cut */
    l = srun("srun: error: node3: tasks 7,71,135,199,263,327,391,455,519,583: Killed");
    CHECK_EQ_INT(l.kind, FB__SRUN_TASK_END);
    CHECK_EQ_INT(l.task, 7);
    CHECK_EQ_STR(l.tasks, "7,71,135,199,263,327,391,455...");
    l = srun("srun: error: node3: tasks 1000,2000,3000,4000,5000,6000,7000: Killed");
    CHECK_EQ_STR(l.tasks, "1000,2000,3000,4000,5000...");
    CHECK_EQ_STR(l.what, "Killed");
    CHECK_EQ_INT(srun("srun: error: node3: task -1: Killed").kind, FB__SRUN_OTHER);
    CHECK_EQ_INT(srun("srun: error: node3: task 99999999999: Killed").kind, FB__SRUN_OTHER);
    CHECK_EQ_INT(srun("srun: error: node3: task 2 Killed").kind, FB__SRUN_OTHER);
    CHECK_EQ_INT(srun("srun: error: no de: task 2: Killed").kind, FB__SRUN_OTHER);
    CHECK_EQ_INT(srun("srun: error: : task 2: Killed").kind, FB__SRUN_OTHER);
    CHECK_EQ_INT(srun("srun: node3: task 2: Killed").kind, FB__SRUN_OTHER);
    CHECK_EQ_INT(srun("srun: Job step aborted: Waiting up to 32 seconds").kind,
                 FB__SRUN_OTHER);
    CHECK_EQ_INT(srun("").kind, FB__SRUN_OTHER);
    char longname[200];
    memset(longname, 'n', sizeof longname);
    memcpy(longname, "srun: error: ", 13);
    strcpy(longname + 150, ": task 1: Killed");
    CHECK_EQ_INT(srun(longname).kind, FB__SRUN_OTHER);
    /* what srun says is made safe for a terminal */
    l = srun("srun: error: node3: task 1: \x1b[2JKilled\x07");
    CHECK_EQ_INT(l.kind, FB__SRUN_TASK_END);
    CHECK(strchr(l.what, 0x1b) == NULL && strchr(l.what, 0x07) == NULL);

    l = srun("srun: error: Task launch for StepId=12.3 failed on node node3: "
             "Socket timed out on send/recv operation");
    CHECK_EQ_INT(l.kind, FB__SRUN_LAUNCH_FAILED);
    CHECK_EQ_STR(l.node, "node3");
    CHECK_EQ_STR(l.what, "Socket timed out on send/recv operation");
    l = srun("srun: error: Task launch for StepId=12.3 failed on node node3:");
    CHECK_EQ_INT(l.kind, FB__SRUN_LAUNCH_FAILED);
    CHECK_EQ_STR(l.what, "");
    CHECK_EQ_INT(srun("srun: error: Task launch for StepId=12.3 failed on node : x").kind,
                 FB__SRUN_OTHER);
    CHECK_EQ_INT(srun("srun: error: Task launch for StepId=12.3 failed").kind,
                 FB__SRUN_OTHER);
    /* a name that is not one leaves nothing behind (found by the fuzz
     * target: samples/slurm-text-crash-node.txt) */
    l = srun("srun: error: Task launch for StepId=12.3 failed on node node3 :x");
    CHECK_EQ_INT(l.kind, FB__SRUN_OTHER);
    CHECK_EQ_STR(l.node, "");

    l = srun("srun: error: Unable to create step for job 12: Requested node "
             "configuration is not available");
    CHECK_EQ_INT(l.kind, FB__SRUN_STEP_REFUSED);
    CHECK_EQ_STR(l.what, "Requested node configuration is not available");
    CHECK_EQ_STR(l.node, "");
    CHECK_EQ_INT(srun("srun: error: Unable to create step for job 12").kind, FB__SRUN_OTHER);
}

static void test_node(void)
{
    fb__slurm_node_info n;
    CHECK_RC(fb__slurm_node_parse(
                 "NodeName=node3 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 CPUTot=2 "
                 "NodeAddr=10.77.0.4 NodeHostName=fb-host3 Version=22.05.8 "
                 "OS=Linux 6.1.0-18-amd64 #1 SMP PREEMPT_DYNAMIC Debian RealMemory=1000 "
                 "State=DOWN+NOT_RESPONDING ThreadsPerCore=1 Partitions=debug "
                 "Reason=Not responding [slurm@2026-12-02T10:00:00]",
                 &n),
             0);
    CHECK_EQ_STR(n.name, "node3");
    CHECK_EQ_STR(n.addr, "10.77.0.4");
    CHECK_EQ_STR(n.host, "fb-host3");
    CHECK_EQ_STR(n.state, "DOWN+NOT_RESPONDING");
    CHECK(fb__slurm_state_down(n.state));

    /* a drain reason (free text, often a rank's words) poses as fields */
    CHECK_RC(fb__slurm_node_parse("NodeName=node2 State=IDLE+DRAIN Reason=firebreak: x "
                                  "NodeAddr=6.6.6.6 NodeHostName=evil State=DOWN",
                                  &n),
             0);
    CHECK_EQ_STR(n.addr, "");
    CHECK_EQ_STR(n.host, "");
    CHECK_EQ_STR(n.state, "IDLE+DRAIN");
    CHECK(!fb__slurm_state_down(n.state));
    CHECK_RC(fb__slurm_node_parse("NodeName=node2 Comment=State=DOWN", &n), 0);
    CHECK_EQ_STR(n.state, "");
    /* a key inside another word is not the key */
    CHECK_RC(fb__slurm_node_parse("NodeName=node2 XNodeAddr=1.2.3.4 SomeState=DOWN", &n), 0);
    CHECK_EQ_STR(n.addr, "");
    CHECK_EQ_STR(n.state, "");
    /* not names: refused, the line or the field */
    CHECK_RC(fb__slurm_node_parse("Arch=x86_64 State=IDLE", &n), -1);
    CHECK_RC(fb__slurm_node_parse("NodeName= State=IDLE", &n), -1);
    CHECK_RC(fb__slurm_node_parse("NodeName=a/b State=IDLE", &n), -1);
    char line[300] = "NodeName=";
    memset(line + 9, 'x', 70);
    CHECK_RC(fb__slurm_node_parse(line, &n), -1);
    CHECK_RC(fb__slurm_node_parse("NodeName=n1 NodeAddr=a;rm NodeHostName=h\x1b", &n), 0);
    CHECK_EQ_STR(n.addr, "");
    CHECK_EQ_STR(n.host, "");
    snprintf(line, sizeof line, "NodeName=n1 State=");
    memset(line + 18, 'D', 100);
    CHECK_RC(fb__slurm_node_parse(line, &n), 0);
    CHECK_EQ_STR(n.state, "");

    CHECK(fb__slurm_state_down("DOWN"));
    CHECK(fb__slurm_state_down("IDLE*"));
    CHECK(fb__slurm_state_down("ALLOCATED+NOT_RESPONDING"));
    CHECK(fb__slurm_state_down("IDLE+POWERED_DOWN"));
    CHECK(fb__slurm_state_down("MIXED+DRAIN+DOWN"));
    CHECK(!fb__slurm_state_down("IDLE"));
    CHECK(!fb__slurm_state_down("ALLOCATED+DRAIN"));
    CHECK(!fb__slurm_state_down("MIXED+COMPLETING"));
    CHECK(!fb__slurm_state_down("DOWNTIME"));
    CHECK(!fb__slurm_state_down(""));
}

static void test_switch(void)
{
    fb__slurm_switch w;
    CHECK_RC(fb__slurm_switch_parse("SwitchName=s0 Level=0 LinkSpeed=1 Nodes=node[1-2]", &w),
             0);
    CHECK_EQ_STR(w.name, "s0");
    CHECK_EQ_INT(w.level, 0);
    CHECK_EQ_STR(w.nodes, "node[1-2]");
    CHECK_RC(fb__slurm_switch_parse("SwitchName=top Level=1 LinkSpeed=1 Switches=s[0-1]", &w),
             0);
    CHECK_EQ_INT(w.level, 1);
    CHECK_EQ_STR(w.nodes, "");
    CHECK_RC(fb__slurm_switch_parse("SwitchName=s9 Nodes=gpu-a[01-16,20],gpu-b7", &w), 0);
    CHECK_EQ_INT(w.level, -1);
    CHECK_EQ_STR(w.nodes, "gpu-a[01-16,20],gpu-b7");
    /* not a switch, not a name, not a host list (one that would be an
     * option of scontrol's, or carry a shell's characters) */
    CHECK_RC(fb__slurm_switch_parse("NodeName=s0 Level=0", &w), -1);
    CHECK_RC(fb__slurm_switch_parse("SwitchName=a/b Level=0 Nodes=n1", &w), -1);
    CHECK_RC(fb__slurm_switch_parse("SwitchName=s0 Level=0 Nodes=-h", &w), -1);
    CHECK_RC(fb__slurm_switch_parse("SwitchName=s0 Level=0 Nodes=n1;reboot", &w), -1);
    CHECK_RC(fb__slurm_switch_parse("SwitchName=s0 Level=x Nodes=n1", &w), 0);
    CHECK_EQ_INT(w.level, -1);
    /* a host list that would be cut: not taken (a node would lose its
     * domain silently) */
    static char big[FB__SLURM_TOPO_LINE_MAX + 64];
    int n = snprintf(big, sizeof big, "SwitchName=s0 Level=0 Nodes=");
    for (int i = 0; n < (int)sizeof big - 8; i++)
        n += snprintf(big + n, sizeof big - (size_t)n, "%sn%d", i ? "," : "", i);
    CHECK_RC(fb__slurm_switch_parse(big, &w), -1);
}

static void test_lines(void)
{
    const char text[] = "a\r\nbb\n\nccc\0ddd";
    char line[3];
    size_t pos = 0;
    const char *want[] = {"a", "bb", "", "cc"};
    for (int i = 0; i < 4; i++) {
        CHECK(fb__slurm_next_line(text, sizeof text - 1, &pos, line, sizeof line));
        CHECK_EQ_STR(line, want[i]);
    }
    CHECK(!fb__slurm_next_line(text, sizeof text - 1, &pos, line, sizeof line));
    pos = 0;
    CHECK(fb__slurm_next_line("x", 1, &pos, line, sizeof line));
    CHECK_EQ_STR(line, "x");
    CHECK(!fb__slurm_next_line("x", 1, &pos, line, sizeof line));
    pos = 0;
    CHECK(!fb__slurm_next_line("", 0, &pos, line, sizeof line));
}

int main(void)
{
    test_srun();
    test_node();
    test_switch();
    test_lines();
    return failures != 0;
}
