/*
 * main.c -- `firebreak`: dispatch to a subcommand, then make sure what it
 * printed reached stdout: a command whose output could not be written
 * (a full disk, /dev/full, a closed pipe end) does not exit 0.
 */
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "firebreak/firebreak.h"

/* io_error_exit: the exit code when what the command printed could not
 * be written (finish()), whatever it would have been; 0 for the default:
 * a failing code is kept, a successful one becomes 2.  `health` has 3,
 * "could not check" (Nagios): its verdict did not reach the caller; the
 * commands whose exit 1 is a verdict (`fr`: a hang, `ckpt verify`: a bad
 * shard) or whose output is the answer (`report`, `sim`) have 2, so a
 * script never takes lost output for the verdict. */
typedef struct command {
    const char *name;
    int (*fn)(int, char **);
    const char *summary;
    int io_error_exit;
} command;

static const command commands[] = {
    {"run", fb__cmd_run, "launch and supervise a training job", 0},
    {"demo", fb__cmd_demo, "a real training run with faults injected", 0},
    {"ckpt", fb__cmd_ckpt, "list, verify and inspect checkpoints", 2},
    {"fr", fb__cmd_fr, "analyze flight recorders (firebreak, PyTorch)", 2},
    {"health", fb__cmd_health, "check this node's hardware", 3},
    {"agent", fb__cmd_agent, "telemetry agent with Prometheus /metrics", 0},
    {"report", fb__cmd_report, "where the time went and why runs failed", 2},
    {"sim", fb__cmd_sim, "simulate effective training time at scale", 2},
    {"watch", fb__cmd_watch, "per-node watcher (started by run under Slurm)", 0},
    {"slurm-epilog", fb__cmd_slurm_epilog, "node cleanup after a Slurm job (Epilog=)", 0},
};

/* Run under this name (a symlink to firebreak), the binary is `firebreak
 * slurm-epilog`: slurm.conf's Epilog= names a program and passes it no
 * arguments. */
#define EPILOG_NAME "firebreak-slurm-epilog"

static const command *find(const char *name)
{
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(name, commands[i].name))
            return &commands[i];
    return NULL;
}

static char self_path[PATH_MAX];

const char *fb__cli_self(void)
{
    return self_path;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: firebreak COMMAND [ARGS...]\n\n"
               "firebreak keeps a training job running through crashes, hangs "
               "and bad hardware.\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n'firebreak COMMAND --help' (or 'firebreak help COMMAND') for a "
               "command's options; "
               "'firebreak --version'.\n");
}

int fb__cli_stdout_said; /* cli.h */

/* The errno of the first write to stdout that failed.  stdio keeps only
 * a flag, and by the time a command's output is flushed for the last time
 * the errno of the write that failed (ENOSPC, EPIPE) is long gone. */
static int stdout_errno;
static FILE *stdout_stdio; /* glibc's own, put back once ours is closed */

static ssize_t stdout_write(void *cookie, const char *buf, size_t n)
{
    (void)cookie;
    size_t done = 0;
    while (done < n) {
        ssize_t w = write(STDOUT_FILENO, buf + done, n - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            if (!stdout_errno)
                stdout_errno = w < 0 ? errno : EIO;
            return 0; /* fopencookie: 0 is the error */
        }
        done += (size_t)w;
    }
    return (ssize_t)n;
}

static int stdout_close(void *cookie)
{
    (void)cookie;
    return close(STDOUT_FILENO);
}

/* stdout as a stream over descriptor 1 that remembers why a write failed
 * (stdout_errno), buffered as stdio buffers it (by line on a terminal).
 * Where the stream cannot be made, stdout stays as it was. */
static void stdout_keep_errno(void)
{
    cookie_io_functions_t io = {.write = stdout_write, .close = stdout_close};
    FILE *f = fopencookie(NULL, "w", io);
    if (!f)
        return;
    setvbuf(f, NULL, isatty(STDOUT_FILENO) ? _IOLBF : _IOFBF, BUFSIZ);
    stdout_stdio = stdout;
    stdout = f;
}

/* Flush and close stdout; when what was printed could not be written,
 * say so on stderr and exit with the command's io_error_exit when it has
 * one, else turn a successful exit into 2 (a failing code is kept).
 * Commands leave the message about stdout to this (one that says it
 * itself, with the write's errno, sets fb__cli_stdout_said).  Closing a
 * stdout that was never open (`>&-`) with nothing written is not an error
 * (gnulib's close_stdout does the same). */
static int finish(int code, const command *c)
{
    const char *cmd = c ? c->name : NULL;
    int err = 0;
    errno = 0;
    if (fflush(stdout) != 0 || ferror(stdout))
        err = stdout_errno ? stdout_errno : errno ? errno : EIO;
    if (fclose(stdout) != 0 && !err && errno != EBADF)
        err = errno ? errno : EIO;
    if (stdout_stdio) /* never a freed stream, should anything print after */
        stdout = stdout_stdio;
    if (!err)
        return code;
    if (!fb__cli_stdout_said)
        fprintf(stderr, "firebreak%s%s: cannot write output: %s\n",
                cmd ? " " : "", cmd ? cmd : "", strerror(err));
    if (c && c->io_error_exit)
        return c->io_error_exit;
    return code ? code : 2;
}

/* A command started with stdin, stdout or stderr closed would hand that
 * descriptor number to the first file it opens (a journal, a shard), and
 * its printed output would land there.  Hold each closed slot with
 * /dev/null opened read-only: reads see end of file, writes fail (EBADF),
 * and finish() turns failed output into an error as for a full disk. */
static void hold_std_fds(void)
{
    for (int fd = 0; fd <= 2; fd++) {
        if (fcntl(fd, F_GETFD) != -1 || errno != EBADF)
            continue;
        int nfd = open("/dev/null", O_RDONLY);
        if (nfd >= 0 && nfd != fd) {
            dup2(nfd, fd);
            close(nfd);
        }
    }
}

int main(int argc, char **argv)
{
    hold_std_fds();
    stdout_keep_errno();
    ssize_t n = readlink("/proc/self/exe", self_path, sizeof self_path - 1);
    if (n > 0)
        self_path[n] = '\0';
    else
        snprintf(self_path, sizeof self_path, "%s", argv[0]);
    const char *base = argc > 0 ? strrchr(argv[0], '/') : NULL;
    if (argc > 0 && !strcmp(base ? base + 1 : argv[0], EPILOG_NAME)) {
        const command *c = find("slurm-epilog");
        return finish(c->fn(argc, argv), c);
    }
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "help") && argc >= 3 && find(argv[2])) {
        /* "firebreak help run", as git and go: the command's own help */
        const command *c = find(argv[2]);
        static char help[] = "--help"; /* writable, as argv is */
        char *hv[] = {argv[2], help, NULL};
        return finish(c->fn(2, hv), c);
    }
    if (!strcmp(argv[1], "help") && argc >= 3) { /* "help NOTACOMMAND" */
        fprintf(stderr, "firebreak help: unknown command '%s'\n\n", argv[2]);
        usage(stderr);
        return 2;
    }
    if (fb__cli_is_help(argv[1]) ||
        !strcmp(argv[1], "help")) {
        usage(stdout);
        return finish(0, NULL);
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
        printf("firebreak %s\n", fb_version());
        return finish(0, NULL);
    }
    const command *c = find(argv[1]);
    if (c)
        return finish(c->fn(argc - 1, argv + 1), c);
    fprintf(stderr, "firebreak: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
