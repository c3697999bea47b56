/*
 * util.h -- small helpers shared by every component (fb__ prefix: internal
 * to firebreak, not part of the public API).
 *
 * Time: fb__now_ns() is CLOCK_MONOTONIC (intervals, heartbeats on one
 * host); fb__wall_ns() is CLOCK_REALTIME (journal timestamps, events that
 * are compared across hosts); fb__thread_cpu_ns() is the calling thread's
 * CPU time (costs of background work).
 */
#ifndef FB_COMMON_UTIL_H
#define FB_COMMON_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

static inline uint64_t fb__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t fb__wall_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* CLOCK_REALTIME `ms` from now, as pthread_cond_timedwait and
 * pthread_timedjoin_np take their deadlines. */
static inline struct timespec fb__wall_after_ms(unsigned ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += (time_t)(ms / 1000);
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

/* CPU time of the calling thread (0 where the clock is missing). */
static inline uint64_t fb__thread_cpu_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts))
        return 0;
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The directory of this process's program (/proc/self/exe), into buf:
 * where the files built or installed beside it are looked for.  0, or
 * -1 when it cannot be told or does not fit. */
static inline int fb__self_dir(char *buf, size_t size)
{
    ssize_t n = size > 1 ? readlink("/proc/self/exe", buf, size - 1) : -1;
    if (n <= 0 || (size_t)n >= size - 1)
        return -1;
    buf[n] = '\0';
    char *slash = strrchr(buf, '/');
    if (!slash)
        return -1;
    *slash = '\0';
    return 0;
}

/* Seconds since the epoch, as a double (journal timestamps). */
double fb__wall_s(void);

/* Parse a duration: "90s", "30m", "1.5h", "2d", "250ms", "10us", "5ns" or a
 * plain number of seconds.  Returns 0, or -EINVAL (negative, empty, junk,
 * not finite). */
int fb__parse_duration(const char *s, double *seconds_out);

/* fb__parse_duration, and the result must lie in [lo_s, hi_s] (a bound
 * keeps seconds * 1e9 inside a uint64_t of nanoseconds).  0, -EINVAL (not a
 * duration) or -ERANGE (a duration out of bounds). */
int fb__parse_duration_in(const char *s, double lo_s, double hi_s,
                          double *seconds_out);

/* Parse a size: "4096", "64k", "1.5G" (binary multiples).  0 or -EINVAL. */
int fb__parse_size(const char *s, uint64_t *bytes_out);

/* Parse a whole decimal integer in [lo, hi].  0 or -EINVAL / -ERANGE. */
int fb__parse_int(const char *s, long long lo, long long hi, long long *out);

/* mkdir -p with `mode`; 0 or -errno. */
int fb__mkdir_p(const char *path, unsigned mode);

/* Remove a directory tree; 0 or -errno.  No symlink is followed, at PATH
 * or below, even one swapped in for a directory while the walk runs
 * (every removal is relative to a directory already open); at most 64
 * levels deep (-ELOOP past them, the rest left). */
int fb__rm_rf(const char *path);

/* Resolve `prog` like execvp (a name with a '/' as it is, else the first
 * match on PATH) and check it is executable.  0, or -errno (-ENOENT,
 * -EACCES, -EISDIR, -ENAMETOOLONG), with the resolved path in `resolved`
 * when found.  (The supervisor checks its program and srun with it; the
 * demo finds its trainer.) */
int fb__find_program(const char *prog, char *resolved, size_t size);

/* open(2) a file that must be a regular file, for reading input from
 * outside (shards, dumps, journals, rates files, sysfs): the open is
 * non-blocking, so a FIFO or a device in its place cannot hang the caller,
 * and anything but a regular file is refused with FB_ENOTREG.  The
 * descriptor returned is blocking again, O_CLOEXEC.  fd, or -errno /
 * FB_ENOTREG.  `flags` adds to O_RDONLY (O_NOFOLLOW, ...). */
int fb__open_regular(const char *path, int flags);

/* Open PATH to append to it (created with `mode` less the umask): a log
 * that someone who can write its directory may have replaced.  Whatever
 * is there that is not a regular file (a FIFO, which would block the open
 * for good, a symlink, which would be followed, a device) is removed and
 * a regular file made in its place.  The descriptor (blocking,
 * O_APPEND|O_CLOEXEC), or -errno (a directory there: -EISDIR). */
int fb__open_append_regular(const char *path, mode_t mode);

/* Length of the valid UTF-8 sequence at s (at most n bytes; 1 for ASCII),
 * or 0 when it is not one (overlong, surrogate, past U+10FFFF, cut). */
size_t fb__utf8_len(const unsigned char *s, size_t n);

/* Write s (NULL: nothing) as HTML or XML text, or a quoted attribute's
 * value: markup characters escaped (< > & " '), and a control character
 * (C0 but tab and newline, DEL, the C1 controls U+0080..U+009F) or a byte
 * that is not valid UTF-8 as U+FFFD, so that the page or the SVG is
 * well-formed UTF-8 whatever s holds (a journal's text, a file name). */
void fb__markup_text(FILE *f, const char *s);

/* Copy src into dst (size bytes, NUL-terminated) with every control
 * character written as '?' (C0 but tab, DEL, the C1 controls U+0080..U+009F)
 * and every byte that is not valid UTF-8 too, so text that came from a rank
 * or a file cannot drive the terminal it is printed on.  A multi-byte
 * character is never cut.  Returns dst. */
char *fb__safe_text(char *dst, size_t size, const char *src);

/* Read a whole file of at most max_bytes into a NUL-terminated malloc'd
 * buffer.  The file must be a regular file (fb__open_regular).  0, -errno,
 * FB_ENOTREG or FB_ETOOBIG. */
int fb__read_file(const char *path, size_t max_bytes, char **buf_out,
                  size_t *len_out);

/* Read the head of a text file: all of it when it holds at most max_bytes,
 * else its first max_bytes cut after their last newline (no line is
 * returned in part; *cut_out, when not NULL, set to 1), into a NUL-terminated malloc'd
 * buffer.  For logs whose first lines are what counts, and which may grow
 * past any bound.  0, -errno or FB_ENOTREG. */
int fb__read_file_head(const char *path, size_t max_bytes, char **buf_out,
                       size_t *len_out, int *cut_out);

/* The same, from byte FROM on: what a log appended to since FROM holds
 * (nothing past its end). */
int fb__read_file_head_at(const char *path, off_t from, size_t max_bytes, char **buf_out,
                          size_t *len_out, int *cut_out);

/* Create a temporary file beside PATH, for a rename over it: a fresh name
 * (PATH.tmp.PID.RANDOM, into tmp) opened O_CREAT|O_EXCL|O_NOFOLLOW for
 * writing with `mode` less the umask, so a file, symlink or FIFO someone
 * planted at a name they could guess is never opened, followed or waited
 * on.  The descriptor, or -errno (-EEXIST after 64 names taken). */
int fb__open_tmp_beside(const char *path, char *tmp, size_t size, mode_t mode);

/* Write a whole file atomically: a temporary file of a random name made
 * beside it (O_EXCL: never one planted there, nor a symlink followed),
 * fsync, rename, fsync of the directory.  Mode 0644 less the umask.  PATH must be a
 * regular file or not exist: anything else there (a device, a FIFO, a
 * directory) is refused with FB_ENOTREG, not replaced; a symlink at PATH
 * is replaced by the file, never followed.  0, -errno or FB_ENOTREG. */
int fb__write_file_atomic(const char *path, const void *buf, size_t len);
/* The same without the fsyncs: a reader sees the old file or the new one,
 * whole, but a crash of the machine may keep neither.  For files rewritten
 * every few seconds from a loop that must not wait on the disk (metrics). */
int fb__write_file_replace(const char *path, const void *buf, size_t len);
/* The same, the file held with a shared flock from before its rename (no
 * moment under its name unlocked) through *fd, close-on-exec, until the
 * holder closes it or ends; a descriptor already in *fd is closed once
 * the new one is in place.  Liveness a pid cannot give across pid
 * namespaces (fb__lock_held): a supervisor's pid files. */
int fb__write_file_atomic_held(const char *path, const void *buf, size_t len, int *fd);

/* write(2) all of buf, retrying on EINTR and short writes; 0 or -errno. */
int fb__write_all(int fd, const void *buf, size_t len);

/* fsync a directory by path; 0 or -errno. */
int fb__fsync_dir(const char *path);

/* Whether the process a pid file (one decimal pid, at most 64 bytes)
 * names is gone: 1 gone, 0 alive, -1 the file is missing or malformed.
 * A file someone holds a lock on (fb__write_file_atomic_held) is alive whatever its
 * pid says: a pid of another pid namespace (a container sharing
 * /dev/shm) reads as gone from this one. */
int fb__pid_file_gone(const char *path);

/* 1 when some process holds a lock on the file at path
 * (fb__write_file_atomic_held, a rank's segment),
 * 0 when none does or it cannot be told (missing, not a regular file). */
int fb__lock_held(const char *path);
/* The same for a descriptor open on the file. */
int fb__lock_held_fd(int fd);

/* snprintf that reports truncation: 0, or -ENAMETOOLONG. */
int fb__fmt(char *buf, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The environment variable as a string, or NULL if unset or empty. */
const char *fb__getenv(const char *name);

/* 64-bit FNV-1a over bytes (identities, not integrity). */
uint64_t fb__fnv1a64(const void *data, size_t len, uint64_t seed);

/* Whether stdout / stderr is a terminal (for live status lines). */
int fb__isatty(int fd);
/* The CPUs this process may run on (its affinity mask: taskset, cpusets,
 * Slurm's binding), else the online ones; at least 1. */
int fb__usable_cpus(void);

#endif
