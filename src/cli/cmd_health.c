/*
 * cmd_health.c -- `firebreak health`: check this node's hardware.
 * Exit codes follow Nagios / NHC: 0 ok, 1 warn, 2 fail, 3 could not check.
 */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "common/jsonw.h"
#include "common/util.h"
#include "health/health.h"

#define EXIT_UNKNOWN 3

static void usage(FILE *f)
{
    fprintf(f,
        "usage: firebreak health [--json] [--root DIR] [--expect-gpus N]\n"
        "                        [--since DURATION] [--ckpt-dir DIR]\n"
        "                        [--min-free SIZE] [--drain] [--node NAME]\n"
        "                        [--no-gpu] [-v]\n\n"
        "Check this node: GPUs through NVML (count, lost, XID, ECC, row\n"
        "remapping, retired pages, thermal and power slowdowns, PCIe link,\n"
        "NVLink, recovery action), the kernel log's XIDs, EDAC, InfiniBand,\n"
        "PCIe AER, thermal zones, free space in /dev/shm and --ckpt-dir.\n\n"
        "  --json            one JSON object on the last line of stdout\n"
        "  --root DIR        read /sys, /proc and dev/kmsg from a fixture tree\n"
        "                    (NVML then only through FIREBREAK_NVML_LIB)\n"
        "  --expect-gpus N   fail when fewer GPUs are visible (or no driver)\n"
        "  --since DURATION  only kernel-log records of the last DURATION (above 0)\n"
        "  --ckpt-dir DIR    also check free space there\n"
        "  --min-free SIZE   fail below this free space (default 1G)\n"
        "  --drain           on fail, drain this node: scontrol update\n"
        "                    NodeName=<node> State=DRAIN Reason=...\n"
        "  --node NAME       node name for --drain (default SLURMD_NODENAME,\n"
        "                    else the hostname)\n"
        "  --no-gpu          skip the NVML checks\n"
        "  -v                list passing checks too\n\n"
        "Exit: 0 ok, 1 warn, 2 fail, 3 could not check (usage errors too).\n"
        "Environment: FIREBREAK_NVML_LIB overrides the NVML library path.\n");
}

int fb__cmd_health(int argc, char **argv)
{
    fb__health_opts o;
    int json = 0, drain = 0, verbose = 0;
    const char *node = NULL;
    fb__health_opts_init(&o);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        long long n;
        if (fb__cli_is_help(a)) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "--drain")) {
            drain = 1;
        } else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
            verbose = 1;
        } else if (!strcmp(a, "--no-gpu")) {
            o.skip_gpu = 1;
        } else if (!v && (!strcmp(a, "--root") || !strcmp(a, "--expect-gpus") ||
                          !strcmp(a, "--since") || !strcmp(a, "--ckpt-dir") ||
                          !strcmp(a, "--min-free") || !strcmp(a, "--node"))) {
            fprintf(stderr, "firebreak health: %s needs a value\n", a);
            return EXIT_UNKNOWN;
        } else if (!strcmp(a, "--root")) {
            o.root = argv[++i];
        } else if (!strcmp(a, "--ckpt-dir")) {
            o.ckpt_dir = argv[++i];
        } else if (!strcmp(a, "--node")) {
            node = argv[++i];
        } else if (!strcmp(a, "--expect-gpus")) {
            if (fb__parse_int(v, 0, 4096, &n)) {
                fprintf(stderr, "firebreak health: --expect-gpus '%s': want a "
                        "whole number 0..4096\n", v);
                return EXIT_UNKNOWN;
            }
            o.expect_gpus = (int)n;
            i++;
        } else if (!strcmp(a, "--since")) {
            if (fb__parse_duration(v, &o.since_s)) {
                fprintf(stderr, "firebreak health: --since '%s': want a "
                        "duration like 90s, 30m, 2h\n", v);
                return EXIT_UNKNOWN;
            }
            if (!(o.since_s > 0)) { /* 0 would be the whole log */
                fprintf(stderr, "firebreak health: --since '%s': want a "
                        "duration above 0 (leave it out for the whole log "
                        "since boot)\n", v);
                return EXIT_UNKNOWN;
            }
            i++;
        } else if (!strcmp(a, "--min-free")) {
            if (fb__parse_size(v, &o.min_free_bytes)) {
                fprintf(stderr, "firebreak health: --min-free '%s': want a "
                        "size like 512M, 4G\n", v);
                return EXIT_UNKNOWN;
            }
            i++;
        } else {
            fprintf(stderr, "firebreak health: unknown argument '%s'\n\n", a);
            usage(stderr);
            return EXIT_UNKNOWN;
        }
    }
    char err[512];
    fb__health_result *r;
    int rc = fb__health_run(&o, &r, err, sizeof err);
    if (rc) {
        fprintf(stderr, "firebreak health: %s\n",
                rc == -12 ? "out of memory" : err);
        return EXIT_UNKNOWN;
    }
    fb__health_status v = fb__health_outcome(r);
    int code = fb__health_exit_code(v);
    if (drain && v == FB_HEALTH_FAIL) {
        int drc = fb__health_drain(r, node, err, sizeof err);
        if (drc) /* the verdict stays fail: the node is bad either way */
            fprintf(stderr, "firebreak health: drain failed: %s\n", err);
        else {
            char reason[400];
            fb__health_reason(r, reason, sizeof reason);
            fprintf(stderr, "firebreak health: drained this node: %s\n", reason);
        }
    }
    if (json) {
        fb__jsonw w;
        fb__jsonw_init(&w);
        fb__health_write_json(r, &w);
        /* A failed write to stdout is reported by main(); exit 3. */
        if (fb__jsonw_print(&w, stdout))
            code = EXIT_UNKNOWN;
        fb__jsonw_free(&w);
    } else {
        fb__health_print(r, verbose, stdout);
    }
    fb__health_free(r);
    return code;
}
