/*
 * test_slurm_parse.c -- the fbw1 watcher-line parser (src/supervisor/slurm.h)
 * over samples/valid.txt (every line parses) and samples/invalid.txt (every
 * line is rejected), plus bounds: over-long lines, embedded NULs, ranks at
 * the limit.  The fuzz target fuzz/slurm_line.c drives the same function.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "supervisor/slurm.h"
#include "../check.h"

static void each_line(const char *path, int want_ok)
{
    FILE *f = fopen(path, "r");
    CHECKF(f != NULL, "cannot open %s", path);
    if (!f)
        return;
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        size_t len = strcspn(line, "\n");
        fb__slurm_msg m;
        int rc = fb__slurm_parse_line(line, len, 8, &m);
        CHECKF(want_ok ? rc == 0 : rc == -EINVAL, "%s: '%.*s' gave %d", path,
              (int)len, line, rc);
        n++;
    }
    fclose(f);
    CHECKF(n > 5, "%s: only %d lines", path, n);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_slurm_parse SAMPLES_DIR\n");
        return 2;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/valid.txt", argv[1]);
    each_line(path, 1);
    snprintf(path, sizeof path, "%s/invalid.txt", argv[1]);
    each_line(path, 0);

    fb__slurm_msg m;
    const char *l = "fbw1 end 3 signal 9";
    CHECKF(fb__slurm_parse_line(l, strlen(l), 4, &m) == 0 && m.kind == FB_SLURM_MSG_END &&
          m.rank == 3 && m.how == FB_SLURM_END_SIGNAL && m.code == 9, "end fields");
    CHECKF(fb__slurm_parse_line(l, strlen(l), 3, &m) == -EINVAL, "rank == max_rank");
    l = "fbw1 health node3 fail firebreak: a b  c";
    CHECKF(fb__slurm_parse_line(l, strlen(l), 1, &m) == 0 &&
          !strcmp(m.reason, "firebreak: a b  c") && !strcmp(m.node, "node3"), "reason kept whole");
    char nul[] = "fbw1 bye no\0de3";
    CHECKF(fb__slurm_parse_line(nul, sizeof nul - 1, 1, &m) == -EINVAL, "embedded NUL");
    char big[FB__SLURM_LINE_MAX + 2];
    memset(big, 'a', sizeof big);
    memcpy(big, "fbw1 bye ", 9);
    CHECKF(fb__slurm_parse_line(big, sizeof big, 1, &m) == -EINVAL, "over-long line");
    char name[80];
    memset(name, 'n', sizeof name);
    name[64] = '\0';
    CHECKF(!fb__slurm_node_name_ok(name), "64-character node name accepted");
    name[63] = '\0';
    CHECKF(fb__slurm_node_name_ok(name), "63-character node name rejected");
    CHECKF(fb__slurm_parse_line("", 0, 1, &m) == -EINVAL, "empty line");
    l = "fbw1 report 3 41 2 0 120 65536 1500000 4200000 1764500000000000000 shard rank 3";
    CHECKF(fb__slurm_parse_line(l, strlen(l), 4, &m) == 0 &&
          m.kind == FB_SLURM_MSG_REPORT && m.rank == 3 && m.rep_idx == 41 &&
          m.rep_kind == 2 && m.rep_step == 120 && m.rep_bytes == 65536 &&
          m.rep_v1 == 1500000 && m.rep_v2 == 4200000 &&
          !strcmp(m.rep_text, "shard rank 3"), "report line fields");
    if (failures)
        return 1;
    printf("ok: fbw1 parser\n");
    return 0;
}
