/*
 * cmd_ckpt.c -- `firebreak ckpt ls|verify|inspect`: list, verify and
 * inspect checkpoint directories (src/ckpt/tool.c does the work).
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt/tool.h"
#include "cli/cli.h"
#include "common/rundir.h"
#include "common/util.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: firebreak ckpt ls DIR [--json]\n"
            "       firebreak ckpt verify DIR [--step N] [--threads N] [--json]\n"
            "                             [--replicas [--per-rank GLOB]...]\n"
            "       firebreak ckpt inspect PATH [--step N] [--rank R] [--json]\n\n"
            "DIR is a checkpoint directory, or a run directory (for its checkpoints/).\n"
            "  ls       list checkpoints: step, complete or not, shards, size, age\n"
            "  verify   check every hash of every shard (exit 1 on any failure);\n"
            "           --replicas also compares whole tensors across ranks:\n"
            "           a replica that differs from the majority fails\n"
            "           (--per-rank GLOB: names that are not replicas)\n"
            "  inspect  show one shard's metadata and tensors; PATH is a\n"
            "           .safetensors file or DIR (newest step, rank 0 by default)\n"
            "exit: 0 ok, 1 a checkpoint is bad, 2 usage or input error\n"
            "      (verify: 0 needs a restorable checkpoint, the one --step names\n"
            "      or any: 1 when none is, all incomplete; 2 when there is\n"
            "      nothing to verify in DIR)\n");
}

/* Is PATH the checkpoint directory of RUN (where it has none yet)? */
static int is_ckpt_dir_of(const char *path, const char *run)
{
    char ck[PATH_MAX];
    struct stat a, b;
    return fb__rundir_has(run, FB__RUNDIR_CKPT, 0, ck, sizeof ck) && !stat(ck, &a) &&
           !stat(path, &b) && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/* The step N of PATH when it is a checkpoint's own directory (step-N, the
 * digits only), else -1. */
static long long step_dir_step(const char *path)
{
    char p[PATH_MAX];
    struct stat st;
    long long step;
    if (fb__fmt(p, sizeof p, "%s", path) || stat(p, &st) || !S_ISDIR(st.st_mode))
        return -1;
    for (size_t n = strlen(p); n > 1 && p[n - 1] == '/';)
        p[--n] = '\0';
    const char *b = strrchr(p, '/');
    b = b ? b + 1 : p;
    if (strncmp(b, "step-", 5) || b[5] < '0' || b[5] > '9' ||
        fb__parse_int(b + 5, 0, LLONG_MAX, &step))
        return -1;
    return step;
}

/* A directory with no checkpoint: the runs below it (or in its runs/),
 * or the run it is inside, whose checkpoints `ckpt` reads when given the
 * run directory.  On stderr. */
static void where_hint(const char *sub, const char *path)
{
    fb__rundir_where *w = malloc(sizeof *w);
    char where[1024], safe[PATH_MAX];
    if (!w)
        return;
    fb__rundir_where_find(path, w);
    int k = fb__rundir_where_say(w, path, where, sizeof where);
    fb__safe_text(safe, sizeof safe, path);
    if (k == FB__RUNDIR_WHERE_BELOW)
        fprintf(stderr, "firebreak ckpt %s: %s holds no checkpoint, but %s: give one "
                "for its checkpoints\n", sub, safe, where);
    else if (k == FB__RUNDIR_WHERE_INSIDE && !is_ckpt_dir_of(path, w->inside))
        fprintf(stderr, "firebreak ckpt %s: %s holds no checkpoint: %s: give that one "
                "for its checkpoints\n", sub, safe, where);
    free(w);
}

int fb__cmd_ckpt(int argc, char **argv)
{
    if (argc < 2 || fb__cli_is_help(argv[1])) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *sub = argv[1], *path = NULL;
    if (strcmp(sub, "ls") && strcmp(sub, "verify") && strcmp(sub, "inspect")) {
        fprintf(stderr, "firebreak ckpt: unknown subcommand %s (ls, verify, inspect)\n",
                sub);
        usage(stderr);
        return 2;
    }
    int json = 0, has_step = 0, replicas = 0, nper = 0;
    char *per_rank[32];
    long long step = 0, rank = 0, threads = 4;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (fb__cli_is_help(a)) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "--replicas")) {
            replicas = 1;
        } else if (!strcmp(a, "--per-rank") && i + 1 < argc) {
            if (nper == (int)(sizeof per_rank / sizeof per_rank[0]))
                goto bad_value;
            per_rank[nper++] = argv[++i];
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
    /* A run directory stands for its checkpoints; a directory with none
     * gets where the runs are (stderr; ls still lists nothing, exit 0). */
    char ckdir[PATH_MAX];
    int steps;
    const char *given = path;
    path = fb__ckpt_tool_dir(path, ckdir, sizeof ckdir, &steps);
    /* No hint for a file (inspect reads a shard; ls and verify say their
     * error), nor the run's one for a checkpoint's own directory inside
     * it: it holds that checkpoint, and what it lacks is said instead. */
    struct stat gst;
    long long in_step = steps || path != given ? -1 : step_dir_step(given);
    if (in_step >= 0) {
        char safe[PATH_MAX];
        fb__safe_text(safe, sizeof safe, given);
        fprintf(stderr, "firebreak ckpt %s: %s is the directory of checkpoint step %lld, "
                "not a checkpoint directory: give the directory above it%s\n", sub,
                safe, in_step, strcmp(sub, "ls") ? ", with --step" : "");
    } else if (!steps && path == given && !stat(given, &gst) && S_ISDIR(gst.st_mode)) {
        where_hint(sub, given);
    }
    if (!strcmp(sub, "ls"))
        return fb__ckpt_ls(path, json, stdout);
    if ((replicas || nper) && strcmp(sub, "verify")) {
        fprintf(stderr, "firebreak ckpt: --replicas and --per-rank go with verify\n");
        return 2;
    }
    if (nper && !replicas) { /* it would be ignored: said instead */
        fprintf(stderr, "firebreak ckpt verify: --per-rank goes with --replicas\n");
        return 2;
    }
    if (!strcmp(sub, "verify")) {
        int rc = fb__ckpt_verify(path, has_step, (uint64_t)step, (int)threads, json,
                                 stdout);
        if (!replicas || rc == 2)
            return rc;
        /* --json: a second object on its own line */
        int rr = fb__ckpt_verify_replicas(path, has_step, (uint64_t)step, per_rank,
                                          nper, json, stdout);
        return rr > rc ? rr : rc;
    }
    if (!strcmp(sub, "inspect"))
        return fb__ckpt_inspect(path, has_step, (uint64_t)step, (int)rank, json,
                                stdout);
    fprintf(stderr, "firebreak ckpt: unknown subcommand %s (ls, verify, inspect)\n",
            sub);
    return 2;
}
