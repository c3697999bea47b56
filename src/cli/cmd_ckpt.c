/*
 * cmd_ckpt.c -- `firebreak ckpt ls|verify|inspect`: list, verify and
 * inspect checkpoint directories (src/ckpt/tool.c does the work).
 */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "ckpt/tool.h"
#include "cli/cli.h"
#include "common/util.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: firebreak ckpt ls DIR [--json]\n"
            "       firebreak ckpt verify DIR [--step N] [--threads N] [--json]\n"
            "       firebreak ckpt inspect PATH [--step N] [--rank R] [--json]\n\n"
            "DIR is a checkpoint directory (<run_dir>/checkpoints).\n"
            "  ls       list checkpoints: step, complete or not, shards, size, age\n"
            "  verify   check every hash of every shard (exit 1 on any failure)\n"
            "  inspect  show one shard's metadata and tensors; PATH is a\n"
            "           .safetensors file or DIR (newest step, rank 0 by default)\n"
            "exit: 0 ok, 1 a checkpoint is bad, 2 usage or input error\n");
}

int fb__cmd_ckpt(int argc, char **argv)
{
    if (argc < 2 || fb__cli_is_help(argv[1])) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *sub = argv[1], *path = NULL;
    int json = 0, has_step = 0;
    long long step = 0, rank = 0, threads = 4;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (fb__cli_is_help(a)) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "--step") && i + 1 < argc) {
            if (fb__parse_int(argv[++i], 0, LLONG_MAX, &step))
                goto bad_value;
            has_step = 1;
        } else if (!strcmp(a, "--rank") && i + 1 < argc) {
            if (fb__parse_int(argv[++i], 0, 99999, &rank))
                goto bad_value;
        } else if (!strcmp(a, "--threads") && i + 1 < argc) {
            if (fb__parse_int(argv[++i], 1, 16, &threads))
                goto bad_value;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "firebreak ckpt: unknown option %s\n", a);
            return 2;
        } else if (!path) {
            path = a;
        } else {
            fprintf(stderr, "firebreak ckpt: unexpected argument %s\n", a);
            return 2;
        }
        continue;
    bad_value:
        fprintf(stderr, "firebreak ckpt: bad value for %s: %s\n", a, argv[i]);
        return 2;
    }
    if (!path) {
        fprintf(stderr, "firebreak ckpt %s: missing DIR\n", sub);
        usage(stderr);
        return 2;
    }
    if (!strcmp(sub, "ls"))
        return fb__ckpt_ls(path, json, stdout);
    if (!strcmp(sub, "verify"))
        return fb__ckpt_verify(path, has_step, (uint64_t)step, (int)threads, json,
                               stdout);
    if (!strcmp(sub, "inspect"))
        return fb__ckpt_inspect(path, has_step, (uint64_t)step, (int)rank, json,
                                stdout);
    fprintf(stderr, "firebreak ckpt: unknown subcommand %s (ls, verify, inspect)\n",
            sub);
    return 2;
}
