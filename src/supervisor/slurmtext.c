/*
 * slurmtext.c -- reading what Slurm's commands print (slurmtext.h).
 *
 * srun writes its own errors to its stderr, an attempt's srun.log (the
 * tasks' output goes to their own files, --output): the lines read here
 * are those of Slurm 22.05, e.g.
 *
 *   srun: error: node3: task 2: Killed
 *   srun: error: Task launch for StepId=12.3 failed on node node3: Socket timed out
 *   srun: error: Unable to create step for job 12: Requested node configuration is not available
 *
 * and `scontrol -o show node` prints one line per node of space-separated
 * KEY=VALUE words, some values with spaces (OS=, Reason= ...).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "supervisor/slurmtext.h"

int fb__slurm_next_line(const char *text, size_t len, size_t *pos, char *line, size_t size)
{
    size_t p = *pos;
    if (!text || p >= len || !text[p] || size == 0)
        return 0;
    size_t e = p;
    while (e < len && text[e] && text[e] != '\n')
        e++;
    size_t n = e - p;
    if (n && text[p + n - 1] == '\r')
        n--;
    if (n >= size)
        n = size - 1;
    memcpy(line, text + p, n);
    line[n] = '\0';
    *pos = e < len && text[e] == '\n' ? e + 1 : e;
    return 1;
}

/* The node name that ends at the first ':' of s into node; the rest, past
 * ": ", in *rest.  0, or -1 (node unchanged). */
static int node_colon(const char *s, char node[FB__FBW1_NODE_MAX], const char **rest)
{
    const char *c = strchr(s, ':');
    char name[FB__FBW1_NODE_MAX];
    if (!c || c == s || (size_t)(c - s) >= FB__FBW1_NODE_MAX)
        return -1;
    memcpy(name, s, (size_t)(c - s));
    name[c - s] = '\0';
    if (!fb__fbw1_node_name_ok(name))
        return -1;
    memcpy(node, name, sizeof name);
    c++;
    while (*c == ' ')
        c++;
    *rest = c;
    return 0;
}

void fb__srun_line_parse(const char *line, fb__srun_line *out)
{
    static const char err[] = "srun: error: ";
    memset(out, 0, sizeof *out);
    out->task = -1;
    if (strncmp(line, err, sizeof err - 1))
        return;
    const char *s = line + sizeof err - 1, *rest = NULL;
    static const char launch[] = "Task launch for ", on[] = " failed on node ";
    static const char refused[] = "Unable to create step for job ";
    if (!strncmp(s, launch, sizeof launch - 1)) {
        const char *p = strstr(s, on);
        if (!p || node_colon(p + sizeof on - 1, out->node, &rest))
            return;
        fb__safe_text(out->what, sizeof out->what, rest);
        out->kind = FB__SRUN_LAUNCH_FAILED;
        return;
    }
    if (!strncmp(s, refused, sizeof refused - 1)) {
        const char *p = strchr(s + sizeof refused - 1, ':');
        if (!p)
            return;
        for (p++; *p == ' '; p++)
            ;
        fb__safe_text(out->what, sizeof out->what, p);
        out->kind = FB__SRUN_STEP_REFUSED;
        return;
    }
    /* NODE: task T: WHAT, or NODE: tasks LIST: WHAT for several tasks of
     * the node that ended the same way at once (LIST as "0-3,5") */
    char node[FB__FBW1_NODE_MAX];
    if (node_colon(s, node, &rest))
        return;
    int several = !strncmp(rest, "tasks ", 6);
    if (!several && strncmp(rest, "task ", 5))
        return;
    const char *list = rest + (several ? 6 : 5);
    size_t n = several ? strspn(list, "0123456789-,") : strspn(list, "0123456789");
    if (n == 0 || list[0] < '0' || list[0] > '9' || list[n] != ':')
        return;
    char *end;
    long t = strtol(list, &end, 10);
    if (t > 1 << 30)
        return;
    /* A long list (a cyclic distribution's "0,64,128,...") is the same
     * report: its head is kept, marked as cut. */
    if (n < sizeof out->tasks) {
        memcpy(out->tasks, list, n);
        out->tasks[n] = '\0';
    } else { /* cut after a whole entry, never inside a number */
        size_t keep = sizeof out->tasks - 4;
        while (keep > 0 && list[keep] != ',')
            keep--;
        memcpy(out->tasks, list, keep);
        memcpy(out->tasks + keep, "...", 4);
    }
    for (end = (char *)list + n + 1; *end == ' '; end++)
        ;
    memcpy(out->node, node, sizeof node);
    out->task = (int)t;
    out->several = several;
    fb__safe_text(out->what, sizeof out->what, end);
    out->kind = FB__SRUN_TASK_END;
}

/* The value of the word "KEY=" in line, before any free-text field, into
 * val (one word, cut at size); 0, or -1 when absent. */
static int field(const char *line, const char *key, char *val, size_t size)
{
    static const char *const free_text[] = {"Reason=", "Comment=", "Extra="};
    size_t klen = strlen(key);
    for (const char *w = line; *w;) {
        while (*w == ' ' || *w == '\t')
            w++;
        for (size_t i = 0; i < sizeof free_text / sizeof free_text[0]; i++)
            if (!strncmp(w, free_text[i], strlen(free_text[i])))
                return -1;
        size_t n = strcspn(w, " \t");
        if (n > klen && !strncmp(w, key, klen)) {
            size_t v = n - klen < size ? n - klen : size - 1;
            memcpy(val, w + klen, v);
            val[v] = '\0';
            return 0;
        }
        w += n;
    }
    return -1;
}

int fb__slurm_node_parse(const char *line, fb__slurm_node_info *out)
{
    memset(out, 0, sizeof *out);
    char v[FB__SLURM_LINE_MAX];
    if (field(line, "NodeName=", v, FB__FBW1_NODE_MAX + 1) ||
        strlen(v) >= FB__FBW1_NODE_MAX || !fb__fbw1_node_name_ok(v))
        return -1;
    snprintf(out->name, sizeof out->name, "%s", v);
    if (!field(line, "NodeAddr=", v, FB__FBW1_NODE_MAX + 1) &&
        strlen(v) < FB__FBW1_NODE_MAX && fb__fbw1_node_name_ok(v))
        snprintf(out->addr, sizeof out->addr, "%s", v);
    if (!field(line, "NodeHostName=", v, FB__FBW1_NODE_MAX + 1) &&
        strlen(v) < FB__FBW1_NODE_MAX && fb__fbw1_node_name_ok(v))
        snprintf(out->host, sizeof out->host, "%s", v);
    if (!field(line, "State=", v, FB__SLURM_STATE_MAX + 1) &&
        strlen(v) < FB__SLURM_STATE_MAX)
        fb__safe_text(out->state, sizeof out->state, v);
    return 0;
}

int fb__slurm_switch_parse(const char *line, fb__slurm_switch *out)
{
    memset(out, 0, sizeof *out);
    out->level = -1;
    char v[FB__SLURM_TOPO_LINE_MAX];
    if (field(line, "SwitchName=", v, FB__FBW1_NODE_MAX + 1) ||
        strlen(v) >= FB__FBW1_NODE_MAX || !fb__fbw1_node_name_ok(v))
        return -1;
    snprintf(out->name, sizeof out->name, "%s", v);
    long long level;
    if (!field(line, "Level=", v, 16) && !fb__parse_int(v, 0, 1000, &level))
        out->level = (int)level;
    if (!field(line, "Nodes=", v, sizeof v)) {
        static const char ok[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                 "0123456789-_.,[]";
        if (v[strspn(v, ok)] || v[0] == '-' || /* an argument of scontrol's */
            strlen(v) >= sizeof out->nodes - 1)  /* perhaps cut: not taken   */
            return -1;
        snprintf(out->nodes, sizeof out->nodes, "%s", v);
    }
    return 0;
}

int fb__slurm_state_down(const char *state)
{
    static const char *const down[] = {"DOWN", "NOT_RESPONDING", "POWERED_DOWN",
                                       "POWERING_DOWN", "POWER_DOWN"};
    size_t n = strlen(state);
    if (n && state[n - 1] == '*')
        return 1;
    /* STATE[+FLAG...] */
    for (const char *w = state; *w;) {
        size_t l = strcspn(w, "+");
        for (size_t i = 0; i < sizeof down / sizeof down[0]; i++)
            if (l == strlen(down[i]) && !strncmp(w, down[i], l))
                return 1;
        w += l;
        if (*w == '+')
            w++;
    }
    return 0;
}
