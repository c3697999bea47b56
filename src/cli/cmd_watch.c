/*
 * cmd_watch.c -- `firebreak watch`: the command line of the per-node
 * watcher of the slurm launcher (docs/slurm.md).  The watcher itself is
 * src/supervisor/watcher.c, beside the reader of its fbw1 lines
 * (src/supervisor/slurm.c); the protocol is src/supervisor/fbw1.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/replicate.h"
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
"       firebreak watch --sweep --job ID\n"
"       firebreak watch --mem-fetch --job ID --world W --step S --port N\n"
"                       --plan RANK:SRC:m|p:DST:ADDR,... [--timeout DUR]\n"
"\n"
"The per-node watcher of `firebreak run --launcher slurm`, started by the\n"
"supervisor on every node with `srun --ntasks-per-node=1`.  Watches ranks\n"
"K*P .. K*P+P-1 of the job (K: --node-id, default SLURM_NODEID) through\n"
"their segments in /dev/shm and prints one status line per event on stdout\n"
"(protocol fbw1, docs/slurm.md); exits when every rank has ended, or on\n"
"SIGTERM.  SIGUSR1 is ignored (it is meant for the ranks).  With node\n"
"memory it writes the Slurm job's id (SLURM_JOB_ID) into\n"
"/dev/shm/fb.ID.mem/slurm-job, which `firebreak slurm-epilog` reads.\n"
"\n"
"  --health        run this node's health checks (`firebreak health`) once\n"
"                  and print `fbw1 health NODE VERDICT REASON`.  Test hook:\n"
"                  FIREBREAK_HEALTH_ROOT_<NODE> (non-alphanumerics as _), else\n"
"                  FIREBREAK_HEALTH_ROOT, is read as the fixture tree (--root)\n"
"  --mem-finish    the end of a run with node-memory checkpoints: copy this\n"
"                  node's shards of step S (-1: none) from /dev/shm/fb.ID.mem\n"
"                  to DIR where DIR lacks them, each verified, then remove\n"
"                  the directory (docs/slurm.md, \"Checkpoint tiers\");\n"
"                  --from-peer R:NODE,...: NODE copies rank R's shard from\n"
"                  its peer copies\n"
"  --sweep         the end of a run whose ranks were stopped: remove this\n"
"                  node's segments of every attempt of job ID and its Open\n"
"                  MPI directory in /dev/shm (our own files only)\n"
"  --mem-fetch     before a launch: send and receive the shards the plan\n"
"                  names for this node (fbr1 on port N, each verified by\n"
"                  hash into the receiver's /dev/shm/fb.ID.mem/peer;\n"
"                  --timeout, default 60s, bounds it)\n"
"  --peer-port N   with node memory (FIREBREAK_CKPT_MEM_DIR): receive peer\n"
"                  copies on port N, and with --peers send this node's\n"
"                  complete steps to its peers there\n"
"  --peers A,B,..  per node of the attempt, in order: the addresses it sends\n"
"                  its copies to, '+'-separated (A1+A2: two copies, each\n"
"                  sent by a thread of its own; \"-\": none); this node's\n"
"                  is entry --node-id.  FIREBREAK_WATCH_DEBUG=1 also says\n"
"                  when a newest step was dropped before its copy went\n"
"  --node NAME     this node's name (default SLURMD_NODENAME, else hostname)\n"
"  --interval DUR  heartbeat lines every DUR (default 1s)\n"
"  -h, --help      this help\n");
}

int fb__cmd_watch(int argc, char **argv)
{
    const char *job = NULL, *node_opt = NULL;
    long long attempt = -1, ppn = -1, world = -1, node_id = -1;
    double interval_s = 1.0;
    int health = 0, mem_finish = 0, sweep = 0;
    const char *ckpt_dir = NULL, *plan = NULL, *peers = NULL, *from_peer = NULL;
    long long step = -2, port = 0, peer_port = 0;
    double timeout_s = 60.0;
    int mem_fetch = 0;
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
        if (!strcmp(a, "--mem-fetch")) {
            mem_fetch = 1;
            continue;
        }
        if (!strcmp(a, "--sweep")) {
            sweep = 1;
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
        else if (!strcmp(a, "--plan")) plan = v;
        else if (!strcmp(a, "--from-peer")) from_peer = v;
        else if (!strcmp(a, "--peers")) peers = v;
        else if (!strcmp(a, "--port")) bad = fb__parse_int(v, 1, 65535, &port);
        else if (!strcmp(a, "--peer-port")) bad = fb__parse_int(v, 1, 65535, &peer_port);
        else if (!strcmp(a, "--timeout")) bad = fb__parse_duration(v, &timeout_s) || timeout_s <= 0 || timeout_s > 3600;
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
    if (fb__repl_key_from_env()) {
        fprintf(stderr, "firebreak watch: FIREBREAK_PEER_KEY: not 64 hex digits\n");
        return 2;
    }
    char node[FB__FBW1_NODE_MAX];
    fb__watch_node_name(node_opt, node);
    setvbuf(stdout, NULL, _IOLBF, 0); /* each line reaches srun at once */
    if (health)
        return fb__watch_health(node, stdout);
    if (sweep) {
        if (!job) {
            fprintf(stderr, "firebreak watch: --sweep needs --job (see --help)\n");
            return 2;
        }
        return fb__watch_sweep(job, node, stderr);
    }
    if (mem_finish) {
        if (!job || !ckpt_dir || world < 1 || step < -1) {
            fprintf(stderr, "firebreak watch: --mem-finish needs --job, --ckpt-dir, "
                    "--world and --step (see --help)\n");
            return 2;
        }
        if (from_peer && strlen(from_peer) > FB__PEER_PLAN_MAX) {
            fprintf(stderr, "firebreak watch: --from-peer: over %d bytes\n",
                    FB__PEER_PLAN_MAX);
            return 2;
        }
        return fb__nodemem_finish_here(job, ckpt_dir, (int)world, step, from_peer, node,
                                       stderr);
    }
    if (mem_fetch) {
        if (!job || world < 1 || step < 0 || !port || !plan) {
            fprintf(stderr, "firebreak watch: --mem-fetch needs --job, --world, "
                    "--step, --port and --plan (see --help)\n");
            return 2;
        }
        (void)fb__epilog_mark_job(job, stderr); /* it may make the node's memory */
        return fb__peer_fetch_here(job, node, (int)port, (int)world, step, plan,
                                   (int)(timeout_s * 1000), stderr);
    }
    if (!job || attempt < 0 || ppn < 1 || world < 1) {
        fprintf(stderr, "firebreak watch: --job, --attempt, --ranks-per-node and "
                "--world are required (see --help)\n");
        return 2;
    }
    if (fb__watch_check_job(job, stderr)) /* it names /dev/shm/fb.<job>.* */
        return 2;
    if (node_id < 0) {
        const char *e = fb__getenv("SLURM_NODEID");
        if (!e || fb__parse_int(e, 0, 1 << 20, &node_id)) {
            fprintf(stderr, "firebreak watch: no --node-id and no SLURM_NODEID\n");
            return 2;
        }
    }
    static char to[FB__PEERS_ENTRY_MAX];
    if (peers && fb__fbw1_peers_entry(peers, node_id, to, sizeof to)) {
        fprintf(stderr, "firebreak watch: --peers: not a list of node addresses: %s\n",
                peers);
        return 2;
    }
    const char *mem = fb__getenv("FIREBREAK_CKPT_MEM_DIR");
    fb__watch_opts o = {.job = job, .attempt = (int)attempt,
                        .ranks_per_node = (int)ppn, .world = (int)world,
                        .node_id = node_id, .interval_s = interval_s,
                        .node = node, .out = stdout, .mem_dir = mem,
                        .peer_port = (int)peer_port, .peer_to = to[0] ? to : NULL};
    fb__nodemem_own(stderr); /* this node's memory tier, when the run has one */
    (void)fb__epilog_mark(mem, 0, stderr); /* the Slurm job's, for its Epilog */
    return fb__watch_run(&o);
}
