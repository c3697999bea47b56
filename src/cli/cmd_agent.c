/*
 * cmd_agent.c -- `firebreak agent`: the per-node telemetry agent with a
 * Prometheus /metrics endpoint (src/agent).  Runs in the foreground.
 */
#include <netinet/in.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "agent/agent.h"
#include "cli/cli.h"
#include "common/util.h"
#include "firebreak/firebreak.h"

static void usage(FILE *f)
{
    fprintf(f,
        "usage: firebreak agent [--listen ADDR:PORT] [--interval DURATION]\n"
        "                       [--run DIR] [--db FILE] [--root DIR]\n"
        "                       [--port-file FILE] [--duration DURATION]\n"
        "                       [--once] [--quiet]\n\n"
        "Sample GPUs (NVML), host sensors (thermal zones, hwmon, RAPL), the\n"
        "kernel log's XIDs and, with --run, the ranks' step times; record\n"
        "samples and events (thermal / power slowdowns, power swings,\n"
        "stragglers) in DIR/agent.sqlite; serve Prometheus text at /metrics.\n"
        "Runs in the foreground until SIGTERM / SIGINT.\n\n"
        "  --listen ADDR:PORT  default 127.0.0.1:9400 (loopback; so is :PORT);\n"
        "                      port 0 picks a free one; 'none' serves nothing\n"
        "  --interval D        sampling interval (default 1s; 10ms..1h)\n"
        "  --run DIR           a run directory: ranks from DIR/job's segments,\n"
        "                      database DIR/agent.sqlite\n"
        "  --db FILE           the database file (default: DIR/agent.sqlite\n"
        "                      with --run, else none)\n"
        "  --root DIR          read sysfs and dev/kmsg from a fixture tree\n"
        "                      (NVML then only through FIREBREAK_NVML_LIB)\n"
        "  --port-file FILE    write the bound port there once listening\n"
        "  --duration D        stop after D (tests, benchmarks)\n"
        "  --once              take one sample, print /metrics, exit\n"
        "  --straggler-ratio R flag ranks over R x the others' median (1.5)\n"
        "  --quiet             no event lines on stderr\n\n"
        "Exit: 0 stopped (SIGTERM / SIGINT, --duration, --once), 2 usage error\n"
        "or could not start (the message names the option or file).\n");
}

int fb__cmd_agent(int argc, char **argv)
{
    fb__agent_opts o;
    fb__agent_opts_init(&o);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (fb__cli_is_help(a)) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--once")) {
            o.once = 1;
        } else if (!strcmp(a, "--quiet")) {
            o.quiet = 1;
        } else if (!v && a[0] == '-' && a[1] == '-') {
            fprintf(stderr, "firebreak agent: %s needs a value (or is "
                    "unknown)\n", a);
            return 2;
        } else if (!strcmp(a, "--listen")) {
            o.listen = argv[++i];
        } else if (!strcmp(a, "--run")) {
            o.run_dir = argv[++i];
        } else if (!strcmp(a, "--db")) {
            o.db_path = argv[++i];
        } else if (!strcmp(a, "--root")) {
            o.root = argv[++i];
        } else if (!strcmp(a, "--port-file")) {
            o.port_file = argv[++i];
        } else if (!strcmp(a, "--shm-dir")) { /* tests: segments elsewhere */
            o.shm_dir = argv[++i];
        } else if (!strcmp(a, "--interval") || !strcmp(a, "--duration")) {
            double s;
            if (fb__parse_duration(v, &s) ||
                (!strcmp(a, "--interval") && (s < 0.01 || s > 3600))) {
                fprintf(stderr, "firebreak agent: %s '%s': want a duration "
                        "like 1s, 500ms%s\n", a, v,
                        a[2] == 'i' ? " (10ms..1h)" : "");
                return 2;
            }
            if (a[2] == 'i')
                o.interval_s = s;
            else
                o.duration_s = s;
            i++;
        } else if (!strcmp(a, "--straggler-ratio")) {
            char *end;
            o.straggler_ratio = strtod(v, &end);
            if (*end || !(o.straggler_ratio > 1.0 && o.straggler_ratio < 100)) {
                fprintf(stderr, "firebreak agent: --straggler-ratio '%s': want "
                        "a number above 1, e.g. 1.5\n", v);
                return 2;
            }
            i++;
        } else {
            fprintf(stderr, "firebreak agent: unknown argument '%s'\n\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (o.listen && strcmp(o.listen, "none") && !o.once && !fb__http_available()) {
        fprintf(stderr, "firebreak agent: this build has no libmicrohttpd, so "
                "no /metrics; install libmicrohttpd-dev and rebuild, or use "
                "--listen none to only record samples\n");
        return 2;
    }
    if (o.listen && strcmp(o.listen, "none")) {
        struct sockaddr_in sa;
        char err[256];
        if (fb__http_parse_listen(o.listen, &sa, err, sizeof err)) {
            fprintf(stderr, "firebreak agent: %s\n", err);
            return 2;
        }
    }
    /* --run names a directory that is there: the run may start later,
     * but its directory is made first (firebreak run --run-dir) */
    struct stat st;
    const char *why = !o.run_dir               ? NULL
                      : stat(o.run_dir, &st)   ? strerror(errno)
                      : !S_ISDIR(st.st_mode)   ? "not a directory"
                                               : NULL;
    if (why) {
        char safe[PATH_MAX];
        fprintf(stderr, "firebreak agent: --run %s: %s (give the run directory "
                "that 'firebreak run' writes)\n",
                fb__safe_text(safe, sizeof safe, o.run_dir), why);
        return 2;
    }
    /* Every failure is one to start: a bad --listen, --root, --db or
     * --port-file, the port taken (the message has named it). */
    int rc = fb__agent_run(&o);
    return rc ? 2 : 0;
}
