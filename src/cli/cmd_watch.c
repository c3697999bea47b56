/*
 * cmd_watch.c -- `firebreak watch`: the command line of the per-node
 * watcher of the slurm launcher (docs/slurm.md).  The watcher itself is
 * src/supervisor/watcher.c, beside the reader of its fbw1 lines
 * (src/supervisor/slurm.c); the protocol is src/supervisor/fbw1.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "common/util.h"
#include "supervisor/watcher.h"

static void usage(FILE *f)
{
    fprintf(f,
"usage: firebreak watch --job ID --attempt N --ranks-per-node P --world W\n"
"                       [--node NAME] [--node-id K] [--interval DUR]\n"
"       firebreak watch --health [--node NAME]\n"
"       firebreak watch --mem-finish --job ID --ckpt-dir DIR --world W --step S\n"
"\n"
"The per-node watcher of `firebreak run --launcher slurm`, started by the\n"
"supervisor on every node with `srun --ntasks-per-node=1`.  Watches ranks\n"
"K*P .. K*P+P-1 of the job (K: --node-id, default SLURM_NODEID) through\n"
"their segments in /dev/shm and prints one status line per event on stdout\n"
"(protocol fbw1, docs/slurm.md); exits when every rank has ended, or on\n"
"SIGTERM.  SIGUSR1 is ignored (it is meant for the ranks).\n"
"\n"
"  --health        run this node's health checks (`firebreak health`) once\n"
"                  and print `fbw1 health NODE VERDICT REASON`.  Test hook:\n"
"                  FIREBREAK_HEALTH_ROOT_<NODE> (non-alphanumerics as _), else\n"
"                  FIREBREAK_HEALTH_ROOT, is read as the fixture tree (--root)\n"
"  --mem-finish    the end of a run with node-memory checkpoints: copy this\n"
"                  node's shards of step S (-1: none) from /dev/shm/fb.ID.mem\n"
"                  to DIR where DIR lacks them, each verified, then remove\n"
"                  the directory (docs/slurm.md, \"Checkpoint tiers\")\n"
"  --node NAME     this node's name (default SLURMD_NODENAME, else hostname)\n"
"  --interval DUR  heartbeat lines every DUR (default 1s)\n"
"  -h, --help      this help\n");
}

int fb__cmd_watch(int argc, char **argv)
{
    const char *job = NULL, *node_opt = NULL;
    long long attempt = -1, ppn = -1, world = -1, node_id = -1;
    double interval_s = 1.0;
    int health = 0, mem_finish = 0;
    const char *ckpt_dir = NULL;
    long long step = -2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (fb__cli_is_help(a)) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--health")) {
            health = 1;
            continue;
        }
        if (!strcmp(a, "--mem-finish")) {
            mem_finish = 1;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "firebreak watch: %s needs a value\n", a);
            return 2;
        }
        const char *v = argv[++i];
        int bad = 0;
        if (!strcmp(a, "--job")) job = v;
        else if (!strcmp(a, "--node")) node_opt = v;
        else if (!strcmp(a, "--ckpt-dir")) ckpt_dir = v;
        else if (!strcmp(a, "--step")) bad = fb__parse_int(v, -1, 9999999999LL, &step);
        else if (!strcmp(a, "--attempt")) bad = fb__parse_int(v, 0, 1 << 30, &attempt);
        else if (!strcmp(a, "--ranks-per-node")) bad = fb__parse_int(v, 1, FB__WATCH_MAX_LOCAL, &ppn);
        else if (!strcmp(a, "--world")) bad = fb__parse_int(v, 1, 1 << 24, &world);
        else if (!strcmp(a, "--node-id")) bad = fb__parse_int(v, 0, 1 << 20, &node_id);
        else if (!strcmp(a, "--interval")) bad = fb__parse_duration(v, &interval_s) || interval_s <= 0;
        else {
            fprintf(stderr, "firebreak watch: unknown option '%s' (see --help)\n", a);
            return 2;
        }
        if (bad) {
            fprintf(stderr, "firebreak watch: %s: bad value '%s'\n", a, v);
            return 2;
        }
    }
    char node[FB__FBW1_NODE_MAX];
    fb__watch_node_name(node_opt, node);
    setvbuf(stdout, NULL, _IOLBF, 0); /* each line reaches srun at once */
    if (health)
        return fb__watch_health(node, stdout);
    if (mem_finish) {
        if (!job || !ckpt_dir || world < 1 || step < -1) {
            fprintf(stderr, "firebreak watch: --mem-finish needs --job, --ckpt-dir, "
                    "--world and --step (see --help)\n");
            return 2;
        }
        return fb__nodemem_finish_here(job, ckpt_dir, (int)world, step, stderr);
    }
    if (!job || attempt < 0 || ppn < 1 || world < 1) {
        fprintf(stderr, "firebreak watch: --job, --attempt, --ranks-per-node and "
                "--world are required (see --help)\n");
        return 2;
    }
    if (node_id < 0) {
        const char *e = fb__getenv("SLURM_NODEID");
        if (!e || fb__parse_int(e, 0, 1 << 20, &node_id)) {
            fprintf(stderr, "firebreak watch: no --node-id and no SLURM_NODEID\n");
            return 2;
        }
    }
    fb__watch_opts o = {.job = job, .attempt = (int)attempt,
                        .ranks_per_node = (int)ppn, .world = (int)world,
                        .node_id = node_id, .interval_s = interval_s,
                        .node = node, .out = stdout};
    fb__nodemem_own(stderr); /* this node's memory tier, when the run has one */
    return fb__watch_run(&o);
}
