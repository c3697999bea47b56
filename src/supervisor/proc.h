/*
 * proc.h -- process control for the supervisor: the per-unit shim that
 * guarantees no orphans, process-tree walks and kills.
 *
 * Every process the supervisor launches runs under a shim:
 *
 *   firebreak run (child subreaper)
 *     ├─ shim server (forked once, early; forks the shims with CLONE_PARENT)
 *     └─ shim  (forked, not exec'd; child subreaper; parent-death SIGTERM)
 *          └─ rank or mpirun (vfork + exec; own process group; parent-death SIGKILL)
 *               └─ whatever it starts, setsid() or not
 *
 * - When the rank ends, the shim kills everything left below it (orphans
 *   reparent to the shim, because it is a subreaper), reaps it, reports the
 *   rank's wait status through a pipe and exits.
 * - When the supervisor dies, even by SIGKILL, the kernel sends the shim
 *   SIGTERM (parent-death signal); the shim kills its whole tree and exits.
 * - The supervisor is a subreaper too: if a shim is SIGKILLed, what it
 *   leaves reparents to the supervisor, which sweeps it.
 * - A standby shim (fb__spawn.standby, launch.c) is forked for the next
 *   attempt and waits, its rank exec'd and stopped; until its turn its
 *   parent-death signal is SIGKILL, and so is its rank's.
 */
#ifndef FB_SUPERVISOR_PROC_H
#define FB_SUPERVISOR_PROC_H

#include <stdint.h>
#include <sys/types.h>

/* Messages from a shim, fixed size (atomic pipe writes). */
/* AHEAD: a standby shim's rank, exec'd and stopped (SIGSTOP) until its
 * launch: the supervisor lets it run with SIGCONT (launch.c). */
enum { FB_SHIM_STARTED = 1, FB_SHIM_ENDED = 2, FB_SHIM_AHEAD = 3 };
typedef struct fb__shim_msg {
    int32_t type;
    int32_t pid;        /* the rank (or mpirun) process                 */
    int32_t wstatus;    /* ENDED: waitpid status                       */
    int32_t exec_errno; /* ENDED: errno of a failed exec, else 0        */
    uint64_t mono_ns;   /* when it happened (CLOCK_MONOTONIC)           */
} fb__shim_msg;

typedef struct fb__spawn {
    char *const *argv;      /* program and arguments (execvp)              */
    /* Non-NULL: exec this file (execve, no PATH search), and a file the
     * kernel cannot execute (ENOEXEC) is the exec's error, not handed to
     * /bin/sh as execvp does: set for an ELF program, never a script. */
    const char *path;
    char *const *envp;      /* full environment                            */
    const char *cwd;        /* NULL: inherit                                */
    int stdout_fd, stderr_fd; /* -1: inherit                               */
    int stdin_fd;           /* > 0: the program's stdin; 0: inherit        */
    /* > 0: the two ends of a pipe of the launch (launch.c): the shim
     * closes the write end and starts the program only at the end of
     * file, once the supervisor has forked every shim and closed its own;
     * 0 or -1: at once. */
    int go_rfd, go_wfd;
    /* A standby shim (launch.c): forked ahead of its attempt, it waits for
     * one byte on go_rfd (EOF: it exits, starting nothing), then starts
     * the program.  Until then its parent-death signal is SIGKILL. */
    int standby;
    /* A standby shim also execs the program while it waits: the child
     * stops at the exec as the shim's tracee (PTRACE_TRACEME), before the
     * program's first instruction; the shim detaches it with SIGSTOP in
     * place of the exec's SIGTRAP and says FB_SHIM_AHEAD.  SIGCONT lets
     * it run.  Where it cannot trace, the shim execs at its turn. */
    int exec_ahead;
} fb__spawn;

/* Raise this process's soft limit of open files to its hard limit: a
 * supervisor holds a pidfd and pipes per rank (more with standby shims),
 * past Debian's default of 1,024 at a few hundred ranks.  Every rank is
 * exec'd with the soft limit it had before (select() users rely on it).
 * Once per process; what it could not raise stays as it was. */
void fb__proc_nofile_raise(void);

/* Run the calling thread `steps` nice steps above what it had (lower nice
 * values, clamped at -20), and so the threads and shims it starts after:
 * a failure's stop and relaunch is their work, done while every rank
 * still wants the CPUs (docs/supervisor.md, "Priority").  Every program
 * exec'd from here gets the nice it had before (fb__proc_nice_restore).
 * 0, or -errno where the kernel refused (EACCES without root,
 * CAP_SYS_NICE or RLIMIT_NICE): nothing changed then.  Once per process
 * (-EALREADY after). */
int fb__proc_nice_raise(int steps);

/* In a child about to exec: back to the nice before fb__proc_nice_raise
 * (async-signal-safe: a system call only). */
void fb__proc_nice_restore(void);

/* The calling thread under SCHED_FIFO at `prio` (1-99), with
 * SCHED_RESET_ON_FORK: every process and thread it starts meanwhile is
 * SCHED_OTHER at its nice.  0, or -errno where the kernel refused (EPERM
 * without root, CAP_SYS_NICE or an RLIMIT_RTPRIO that allows it): nothing
 * changed then.  fb__proc_rt_leave returns it to SCHED_OTHER, its nice
 * kept. */
int fb__proc_rt_enter(int prio);
void fb__proc_rt_leave(void);

/* Fork a shim that execs sp->argv (through the shim server, when one
 * runs).  On success *shim_pid and *msg_fd (the
 * read end of the shim's message pipe, non-blocking, close-on-exec). */
int fb__shim_spawn(const fb__spawn *sp, pid_t *shim_pid, int *msg_fd);

/* The shim server (issue 14): a fork of a supervisor costs a copy of its
 * page tables (0.7 ms at 13 MB, 350 mappings; 0.13 ms for a process of
 * 1 MB), and write-protects its memory, so that it takes a copy-on-write
 * fault on every page it writes after.  fb__shim_server_start forks one
 * small child, early, while this process is small; it closes what it
 * inherited with close-on-exec and forks every later shim of
 * fb__shim_spawn with CLONE_PARENT: the shims stay this process's
 * children (waitpid, the parent-death signal, getppid all as before),
 * with their descriptors passed over a socket.  Where there is no server,
 * it died, gave no answer within 5 s, or a request is too big for one
 * message (160 KiB of arguments and environment), fb__shim_spawn forks
 * here.  The server dies with this process (parent-death SIGKILL, end of
 * file on its socket).  The child execs the server's own program,
 * FB__SHIM_SERVER_PROGRAM (FIREBREAK_SHIM_SERVER_PROGRAM, else beside this
 * program, else ../libexec/firebreak): static, linked with this file
 * alone, so that each shim is a copy of a process of a few mappings, not
 * of every library this program loads; without it, the fork serves.  0,
 * or -errno (no server: forks here). */
int fb__shim_server_start(void);

#define FB__SHIM_SERVER_PROGRAM "fb-shim-server"

/* The server program's main: argv is {name, socket descriptor,
 * supervisor's pid, the ranks' soft limit of open files or "-", their
 * nice or "-"}, as fb__shim_server_start passes them.  Serves until the
 * supervisor closes the socket; 2 on bad arguments. */
int fb__shim_server_main(int argc, char **argv);

/* The server program's arguments, parsed (exposed for fuzz/sup_shim_args.c). */
typedef struct fb__shim_server_argv {
    int sock;          /* >= 3 */
    pid_t supervisor;  /* >= 2 */
    int set_nofile;    /* 0: "-" */
    long long nofile;  /* >= 0 */
    int set_nice;      /* 0: "-" */
    int nice;          /* -20..19 */
} fb__shim_server_argv;

/* argv as fb__shim_server_main takes it, each number a whole decimal in
 * its range: 0, or -EINVAL (*a then unspecified).  Reads nothing but
 * argv[0..argc). */
int fb__shim_server_parse(int argc, char *const *argv, fb__shim_server_argv *a);

/* The server's reader of one request (exposed for fuzz/sup_shim_req.c):
 * a header of five uint32 in host byte order (magic 0x46425353 "FBSS",
 * flags, argc >= 1, envc, and len, the bytes after the header: all of the
 * rest), then argc + envc NUL-ended strings and, with flag 4, the working
 * directory, with flag 256 the file to exec; nothing after.  nfd: the
 * descriptors that came with it, one per flag from 8 to 128 (stdin,
 * stdout, stderr, the go pipe's two ends).  At most 160 KiB and 16,384
 * strings of each kind.  Fills sp's argv and envp (one vector, freed with
 * free(sp->argv), pointing into buf), cwd, path, standby and exec_ahead,
 * and *flags.  0, -EINVAL or -ENOMEM. */
int fb__shim_req_parse(char *buf, size_t n, int nfd, fb__spawn *sp, uint32_t *flags);
/* Kill and reap the server (also what a server given up gets); nothing
 * when there is none. */
void fb__shim_server_stop(void);
/* The server's pid (a sweep spares it), or 0. */
pid_t fb__shim_server_pid(void);
/* pid, reaped by the caller, was the server's: 1 (it is gone; later shims
 * are forked here), else 0. */
int fb__shim_server_reaped(pid_t pid);
/* The server's CPU time on requests so far, as it reported it (ns). */
uint64_t fb__shim_server_cpu_ns(void);

/* Read one message; 1 read, 0 none available, -1 EOF/error. */
int fb__shim_read(int msg_fd, fb__shim_msg *msg);

/* Ask a shim to stop its rank: SIGTERM (forwarded to the rank's process
 * group), or hard: SIGUSR2 (SIGKILL to the whole tree). */
void fb__shim_stop(pid_t shim, int hard);

/* Forward a signal to the rank below a shim. */
void fb__shim_signal(pid_t shim, int sig);

/* Collect the pids of every descendant of `root` (not root itself) from
 * /proc.  Returns how many were found (at most max). */
int fb__proc_descendants(pid_t root, pid_t *out, int max);

/* SIGKILL every descendant of the calling process except those in keep[]
 * (and their descendants), repeatedly until none are left or timeout_ms
 * passes; reaps what it can.  Returns the number killed. */
int fb__proc_sweep(const pid_t *keep, int nkeep, int timeout_ms);

/* Zeroed memory for n elements of `size` that no fork inherits
 * (MADV_DONTFORK), or NULL: the supervisor's per-rank arrays, which its
 * watch pass writes every pass.  A fork (a standby shim's) otherwise
 * copies their page tables and write-protects their pages, and the next
 * pass takes a copy-on-write fault on each page it writes; the children
 * (shims, helpers that exec) never read them.  Freed with
 * fb__proc_free_nofork (same n and size). */
void *fb__proc_calloc_nofork(size_t n, size_t size);
void fb__proc_free_nofork(void *p, size_t n, size_t size);

/* pidfd_open(2) wrapper; -errno on failure. */
int fb__pidfd_open(pid_t pid);

/* Send `sig` to the process of `pidfd` (pid `pid`) only when it is a child
 * of `parent`: a rank's pid comes from its segment, which the rank wrote,
 * so it is believed only for a process the launcher started.  The pidfd
 * pins the process: if it ended and the pid was reused, the parent read
 * may be the new process's, but the signal goes nowhere (ESRCH).  0, or
 * -errno (-EPERM: not a child of parent). */
int fb__proc_signal_child(int pidfd, pid_t pid, pid_t parent, int sig);

#endif
