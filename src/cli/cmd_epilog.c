/*
 * cmd_epilog.c -- `firebreak slurm-epilog` (also run as
 * `firebreak-slurm-epilog`, the name slurm.conf's Epilog= points at):
 * after a Slurm job, remove what firebreak left of it in this node's
 * /dev/shm, whatever happened to its supervisor (docs/slurm.md,
 * "Epilog").  The cleanup itself is src/supervisor/epilog.c.
 *
 * slurmd runs the Epilog as root on every node of the job when it ends,
 * with no arguments and SLURM_JOB_ID (and SLURM_JOB_UID) set; an Epilog
 * that fails or hangs drains the node.  So this exits 0 whatever it
 * finds, and a watchdog ends it, still with 0, after TIME_LIMIT_S.
 * Only a usage error on the command line (a person typing) exits 2.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/util.h"
#include "supervisor/watcher.h"

#define TIME_LIMIT_S 20

static void usage(FILE *f)
{
    fprintf(f,
"usage: firebreak slurm-epilog [--job ID] [--uid UID] [--shm DIR] [--quiet]\n"
"       firebreak-slurm-epilog          (the same, as slurm.conf's Epilog)\n"
"\n"
"Slurm's Epilog for firebreak: add to slurm.conf on every node\n"
"\n"
"    Epilog=/usr/local/bin/firebreak-slurm-epilog\n"
"\n"
"(the installed firebreak's directory).  When a Slurm job ends, removes\n"
"from this node's /dev/shm every fb.<job>.mem directory (node-memory\n"
"checkpoints) whose marker names that Slurm job, with the same firebreak\n"
"job's rank segments and fb.<job>.ompi.  A directory that is a symlink,\n"
"is owned by neither root nor the job's user, is writable by others, or\n"
"whose marker is missing or bad is left alone and said (stderr, syslog).\n"
"Always exits 0 (a failing Epilog drains the node); stops after %d s.\n"
"\n"
"  --job ID     the Slurm job (default SLURM_JOB_ID)\n"
"  --uid UID    its user, who may own what is removed besides root\n"
"               (default SLURM_JOB_UID)\n"
"  --shm DIR    look in DIR instead of /dev/shm (tests)\n"
"  --quiet      nothing on stderr (syslog still)\n"
"  -h, --help   this help\n", TIME_LIMIT_S);
}

static void on_alarm(int sig)
{
    (void)sig;
    _exit(0); /* a hung Epilog drains the node: give up, successfully */
}

int fb__cmd_slurm_epilog(int argc, char **argv)
{
    const char *job_s = NULL, *uid_s = NULL, *shm = NULL;
    int quiet = 0;
    openlog("firebreak-slurm-epilog", LOG_PID, LOG_DAEMON);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (fb__cli_is_help(a)) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--quiet")) {
            quiet = 1;
            continue;
        }
        /* A mistake in the Epilog line is said (stderr, syslog) and
         * nothing is done, with exit 0 all the same: a failing Epilog
         * would drain every node it runs on. */
        int known = !strcmp(a, "--job") || !strcmp(a, "--uid") || !strcmp(a, "--shm");
        if (!known || i + 1 >= argc) {
            char safe[64];
            fb__safe_text(safe, sizeof safe, a);
            fprintf(stderr, "firebreak slurm-epilog: %s '%s' (see --help): nothing "
                    "removed\n", known ? "no value after" : "unknown option", safe);
            syslog(LOG_WARNING, "%s '%s': nothing removed",
                   known ? "no value after" : "unknown option", safe);
            return 0;
        }
        const char *v = argv[++i];
        if (!strcmp(a, "--job")) job_s = v;
        else if (!strcmp(a, "--uid")) uid_s = v;
        else shm = v;
    }
    signal(SIGALRM, on_alarm);
    alarm(TIME_LIMIT_S);
    fb__epilog_opts o = {.shm_dir = shm, .log = quiet ? NULL : stderr, .syslog = 1};
    const char *env_job = fb__getenv("SLURM_JOB_ID");
    if (!job_s)
        job_s = env_job;
    if (!job_s) {
        fprintf(stderr, "firebreak slurm-epilog: no SLURM_JOB_ID and no --job: "
                "nothing to do\n");
        return 0;
    }
    if (fb__epilog_parse_job_id(job_s, &o.job)) {
        fprintf(stderr, "firebreak slurm-epilog: '%.32s' is not a Slurm job id: "
                "nothing removed\n", job_s);
        syslog(LOG_WARNING, "'%.32s' is not a Slurm job id: nothing removed", job_s);
        return 0;
    }
    if (!uid_s)
        uid_s = fb__getenv("SLURM_JOB_UID");
    long long uid;
    if (uid_s && !fb__parse_int(uid_s, 0, 4294967294LL, &uid)) {
        o.have_uid = 1;
        o.job_uid = (uid_t)uid;
    } else if (uid_s) { /* cleaned as root's alone: said, as an option is */
        fprintf(stderr, "firebreak slurm-epilog: '%.32s' is not a user id: only "
                "root's files are removed\n", uid_s);
        syslog(LOG_WARNING, "'%.32s' is not a user id: only root's files are removed",
               uid_s);
    }
    fb__epilog_result r;
    fb__epilog_clean(&o, &r);
    if (!quiet && (r.jobs || r.left || r.failed))
        fprintf(stderr, "firebreak slurm-epilog: job %u: %d of its firebreak "
                "job%s found, %d removed, %d left alone, %d failed\n", (unsigned)o.job,
                r.jobs, r.jobs == 1 ? "" : "s", r.removed, r.left, r.failed);
    closelog();
    return 0;
}
