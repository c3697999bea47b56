/*
 * util.c -- parsing of durations and sizes, file and directory helpers.
 */
#include "common/util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/alloc.h"
#include "firebreak/firebreak.h"

double fb__wall_s(void)
{
    return (double)fb__wall_ns() / 1e9;
}

int fb__parse_duration(const char *s, double *seconds_out)
{
    static const struct { const char *suffix; double mult; } units[] = {
        {"ns", 1e-9}, {"us", 1e-6}, {"ms", 1e-3}, {"s", 1.0},
        {"m", 60.0}, {"h", 3600.0}, {"d", 86400.0}, {"", 1.0},
    };
    if (!s || !*s)
        return -EINVAL;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno == ERANGE || !isfinite(v) || v < 0)
        return -EINVAL;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(end, units[i].suffix) == 0) {
            double r = v * units[i].mult;
            if (!isfinite(r))
                return -EINVAL;
            *seconds_out = r;
            return 0;
        }
    }
    return -EINVAL;
}

int fb__parse_duration_in(const char *s, double lo_s, double hi_s,
                          double *seconds_out)
{
    double v;
    int rc = fb__parse_duration(s, &v);
    if (rc)
        return rc;
    if (v < lo_s || v > hi_s)
        return -ERANGE;
    *seconds_out = v;
    return 0;
}

int fb__parse_size(const char *s, uint64_t *bytes_out)
{
    if (!s || !*s)
        return -EINVAL;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno == ERANGE || !isfinite(v) || v < 0)
        return -EINVAL;
    double mult = 1;
    switch (*end) {
    case '\0': break;
    case 'k': case 'K': mult = 1024.0; end++; break;
    case 'm': case 'M': mult = 1024.0 * 1024; end++; break;
    case 'g': case 'G': mult = 1024.0 * 1024 * 1024; end++; break;
    case 't': case 'T': mult = 1024.0 * 1024 * 1024 * 1024; end++; break;
    default: return -EINVAL;
    }
    if (*end == 'i' || *end == 'B')
        end++;
    if (*end == 'B')
        end++;
    if (*end)
        return -EINVAL;
    double r = v * mult;
    if (r >= 18446744073709551615.0)
        return -EINVAL;
    *bytes_out = (uint64_t)r;
    return 0;
}

int fb__parse_int(const char *s, long long lo, long long hi, long long *out)
{
    if (!s || !*s)
        return -EINVAL;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end)
        return -EINVAL;
    if (errno == ERANGE || v < lo || v > hi)
        return -ERANGE;
    *out = v;
    return 0;
}

int fb__mkdir_p(const char *path, unsigned mode)
{
    char buf[PATH_MAX];
    if (fb__fmt(buf, sizeof buf, "%s", path))
        return -ENAMETOOLONG;
    size_t n = strlen(buf);
    while (n > 1 && buf[n - 1] == '/')
        buf[--n] = '\0';
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, mode) && errno != EEXIST)
            return -errno;
        *p = '/';
    }
    if (mkdir(buf, mode) && errno != EEXIST)
        return -errno;
    struct stat st;
    if (stat(buf, &st))
        return -errno;
    return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

#define RM_RF_DEPTH 64

/* Remove `name` in the directory dfd: a directory (opened without
 * following a symlink) emptied first, anything else unlinked.  Every step
 * is relative to a directory already open, so swapping a directory for a
 * symlink while the walk runs removes the symlink, never what it names. */
static int rm_at(int dfd, const char *name, int depth)
{
    int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return 0;
        if (errno != ENOTDIR && errno != ELOOP)
            return -errno;
        return unlinkat(dfd, name, 0) && errno != ENOENT ? -errno : 0;
    }
    if (depth >= RM_RF_DEPTH) {
        close(fd);
        return -ELOOP;
    }
    DIR *d = fdopendir(fd);
    if (!d) {
        int rc = -errno;
        close(fd);
        return rc;
    }
    int rc = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        int r = rm_at(fd, e->d_name, depth + 1);
        if (r && !rc)
            rc = r;
    }
    closedir(d);
    if (unlinkat(dfd, name, AT_REMOVEDIR) && errno != ENOENT && !rc)
        rc = -errno;
    return rc;
}

int fb__rm_rf(const char *path)
{
    return rm_at(AT_FDCWD, path, 0);
}

int fb__find_program(const char *prog, char *resolved, size_t size)
{
    if (strchr(prog, '/')) {
        if (fb__fmt(resolved, size, "%s", prog))
            return -ENAMETOOLONG;
        struct stat st;
        if (stat(prog, &st))
            return -errno;
        if (S_ISDIR(st.st_mode))
            return -EISDIR;
        return access(prog, X_OK) ? -errno : 0;
    }
    const char *path = getenv("PATH");
    if (!path)
        path = "/usr/local/bin:/usr/bin:/bin";
    int saw_eacces = 0;
    const char *p = path;
    while (*p) {
        const char *colon = strchr(p, ':');
        size_t len = colon ? (size_t)(colon - p) : strlen(p);
        char cand[PATH_MAX];
        if (fb__fmt(cand, sizeof cand, "%.*s/%s", (int)len, len ? p : ".", prog) == 0) {
            struct stat st;
            if (stat(cand, &st) == 0 && !S_ISDIR(st.st_mode)) {
                if (access(cand, X_OK) == 0) {
                    fb__fmt(resolved, size, "%s", cand);
                    return 0;
                }
                saw_eacces = 1;
            }
        }
        p += len;
        if (*p == ':')
            p++;
    }
    return saw_eacces ? -EACCES : -ENOENT;
}

int fb__open_regular(const char *path, int flags)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY | flags);
    if (fd < 0)
        return -errno;
    struct stat st;
    if (fstat(fd, &st) < 0) {
        int rc = -errno;
        close(fd);
        return rc;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return FB_ENOTREG;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
        int rc = -errno;
        close(fd);
        return rc;
    }
    return fd;
}

int fb__open_append_regular(const char *path, mode_t mode)
{
    for (int tries = 0; tries < 3; tries++) {
        int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW |
                                O_NONBLOCK | O_NOCTTY, mode);
        struct stat st;
        int rc = fd < 0 ? -errno : fstat(fd, &st) ? -errno : 0;
        if (!rc && S_ISREG(st.st_mode) && fcntl(fd, F_SETFL, O_APPEND) == 0)
            return fd;
        if (!rc)
            rc = S_ISREG(st.st_mode) ? -errno : FB_ENOTREG;
        if (fd >= 0)
            close(fd);
        /* a FIFO (ENXIO without a reader), a symlink (ELOOP), a device:
         * not ours to write through; take its place */
        if (rc != FB_ENOTREG && rc != -ELOOP && rc != -ENXIO)
            return rc;
        if (unlink(path) && errno != ENOENT)
            return rc;
    }
    return FB_ENOTREG;
}

size_t fb__utf8_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t len;
    unsigned min;
    if (c < 0x80)
        return 1;
    if ((c & 0xe0) == 0xc0) { len = 2; min = 0x80; c &= 0x1f; }
    else if ((c & 0xf0) == 0xe0) { len = 3; min = 0x800; c &= 0x0f; }
    else if ((c & 0xf8) == 0xf0) { len = 4; min = 0x10000; c &= 0x07; }
    else return 0;
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        c = (c << 6) | (s[i] & 0x3f);
    }
    if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
        return 0;
    return len;
}

char *fb__safe_text(char *dst, size_t size, const char *src)
{
    if (!size)
        return dst;
    const unsigned char *p = (const unsigned char *)(src ? src : "");
    size_t i = 0, left = strlen((const char *)p);
    while (*p && i + 1 < size) {
        if (*p < 0x80) {
            dst[i++] = (*p < 0x20 && *p != '\t') || *p == 0x7f ? '?' : (char)*p;
            p++;
            left--;
            continue;
        }
        /* Valid UTF-8 passes whole, but the C1 controls (U+0080..U+009F,
         * "\xc2\x80".."\xc2\x9f": CSI among them) and any byte that is not
         * part of a valid sequence (a lone 0x9b is CSI on an 8-bit
         * terminal) become '?'. */
        size_t n = fb__utf8_len(p, left);
        if (n == 0 || (n == 2 && p[0] == 0xc2 && p[1] < 0xa0)) {
            dst[i++] = '?';
            n = n ? n : 1;
        } else {
            if (i + n + 1 > size)
                break;
            memcpy(dst + i, p, n);
            i += n;
        }
        p += n;
        left -= n;
    }
    dst[i] = '\0';
    return dst;
}

/* Read fd to its end or to limit bytes (at least 1), whichever comes
 * first, into a NUL-terminated malloc'd buffer that grows as the bytes
 * come (a small file costs a small buffer, whatever the limit).  0 or
 * -errno. */
static int read_upto(int fd, size_t limit, char **buf_out, size_t *len_out)
{
    size_t cap = limit < 4096 ? limit : 4096, len = 0;
    char *buf = fb__malloc(cap + 1);
    if (!buf)
        return -ENOMEM;
    for (;;) {
        if (len == cap) {
            if (cap == limit)
                break;
            size_t ncap = cap > limit / 2 ? limit : cap * 2;
            char *nb = fb__realloc(buf, ncap + 1);
            if (!nb) {
                free(buf);
                return -ENOMEM;
            }
            buf = nb;
            cap = ncap;
        }
        ssize_t r = read(fd, buf + len, cap - len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int e = -errno;
            free(buf);
            return e;
        }
        if (r == 0)
            break;
        len += (size_t)r;
    }
    buf[len] = '\0';
    *buf_out = buf;
    *len_out = len;
    return 0;
}

/* Open path as a regular file and read at most max_bytes + 1 of it: one
 * byte past the bound tells a file of exactly max_bytes, which fits, from
 * a longer one.  A longer file is FB_ETOOBIG, or with head its first
 * max_bytes cut after their last newline (*cut_out set). */
static int read_capped(const char *path, off_t from, size_t max_bytes, int head,
                       char **buf_out, size_t *len_out, int *cut_out)
{
    if (cut_out)
        *cut_out = 0;
    if (max_bytes >= SIZE_MAX - 1 || from < 0)
        return -EINVAL;
    int fd = fb__open_regular(path, 0);
    if (fd < 0)
        return fd;
    if (from > 0 && lseek(fd, from, SEEK_SET) < 0) {
        int e = -errno;
        close(fd);
        return e;
    }
    char *buf = NULL;
    size_t len = 0;
    int rc = read_upto(fd, max_bytes + 1, &buf, &len);
    close(fd);
    if (rc)
        return rc;
    if (len > max_bytes) {
        if (!head) {
            free(buf);
            return FB_ETOOBIG;
        }
        if (cut_out)
            *cut_out = 1;
        len = max_bytes;
        while (len > 0 && buf[len - 1] != '\n')
            len--;
        buf[len] = '\0';
    }
    *buf_out = buf;
    if (len_out)
        *len_out = len;
    return 0;
}

int fb__read_file(const char *path, size_t max_bytes, char **buf_out,
                  size_t *len_out)
{
    return read_capped(path, 0, max_bytes, 0, buf_out, len_out, NULL);
}

int fb__read_file_head(const char *path, size_t max_bytes, char **buf_out,
                       size_t *len_out, int *cut_out)
{
    return read_capped(path, 0, max_bytes, 1, buf_out, len_out, cut_out);
}

int fb__read_file_head_at(const char *path, off_t from, size_t max_bytes, char **buf_out,
                          size_t *len_out, int *cut_out)
{
    return read_capped(path, from, max_bytes, 1, buf_out, len_out, cut_out);
}

/* Text into HTML or XML (util.h). */
void fb__markup_text(FILE *f, const char *s)
{
    size_t n = s ? strlen(s) : 0;
    for (size_t i = 0; i < n;) {
        const unsigned char *u = (const unsigned char *)s + i;
        size_t l = fb__utf8_len(u, n - i);
        if (l == 0 || (l == 2 && u[0] == 0xC2 && u[1] < 0xA0)) {
            fputs("&#xFFFD;", f);
            i += l ? l : 1;
            continue;
        }
        if (l > 1) {
            fwrite(u, 1, l, f);
            i += l;
            continue;
        }
        switch (u[0]) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&#39;", f); break;
        default:
            if ((u[0] < 0x20 && u[0] != '\t' && u[0] != '\n') || u[0] == 0x7f)
                fputs("&#xFFFD;", f);
            else
                fputc(u[0], f);
        }
        i++;
    }
}

int fb__lock_held_fd(int fd)
{
    /* Exclusive, not waiting: refused while anyone holds it shared. */
    if (flock(fd, LOCK_EX | LOCK_NB))
        return errno == EWOULDBLOCK;
    (void)flock(fd, LOCK_UN);
    return 0;
}

int fb__lock_held(const char *path)
{
    int fd = fb__open_regular(path, O_NOFOLLOW);
    if (fd < 0)
        return 0;
    int held = fb__lock_held_fd(fd);
    close(fd);
    return held;
}

int fb__pid_file_gone(const char *path)
{
    if (fb__lock_held(path))
        return 0;
    char *text = NULL;
    size_t len;
    long long pid;
    if (fb__read_file(path, 64, &text, &len))
        return -1;
    text[strcspn(text, "\n")] = '\0';
    int bad = fb__parse_int(text, 1, INT_MAX, &pid);
    free(text);
    if (bad)
        return -1;
    return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

int fb__fsync_dir(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rc = fsync(fd) ? -errno : 0;
    close(fd);
    return rc;
}

int fb__write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

int fb__open_tmp_beside(const char *path, char *tmp, size_t size, mode_t mode)
{
    /* mkostemp's way (a fresh name, O_EXCL), with open's mode less the
     * umask (mkostemp's files are 0600 whatever it is) */
    for (int tries = 0; tries < 64; tries++) {
        unsigned long long r = fb__now_ns() ^ ((unsigned long long)rand() << 20) ^
                               (unsigned long long)tries << 56;
        if (fb__fmt(tmp, size, "%s.tmp.%d.%016llx", path, (int)getpid(), r))
            return -ENAMETOOLONG;
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
        if (fd >= 0 || errno != EEXIST)
            return fd >= 0 ? fd : -errno;
    }
    return -EEXIST;
}

/* keep: where the descriptor goes, locked shared before the rename (the
 * lock is on the file from its first moment under its name); NULL: closed. */
static int write_atomic(const char *path, const void *buf, size_t len, int *keep,
                        int durable)
{
    char tmp[PATH_MAX], dir[PATH_MAX];
    if (fb__fmt(dir, sizeof dir, "%s", path))
        return -ENAMETOOLONG;
    char *slash = strrchr(dir, '/');
    if (slash)
        *(slash == dir ? slash + 1 : slash) = '\0';
    else
        strcpy(dir, ".");
    struct stat st;
    if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode))
        return FB_ENOTREG;
    int fd = fb__open_tmp_beside(path, tmp, sizeof tmp, 0644);
    if (fd < 0)
        return fd;
    int rc = keep && flock(fd, LOCK_SH | LOCK_NB) ? -errno : 0;
    if (!rc)
        rc = fb__write_all(fd, buf, len);
    if (!rc && durable && fsync(fd))
        rc = -errno;
    if (!keep && close(fd) && !rc)
        rc = -errno;
    if (!rc && rename(tmp, path))
        rc = -errno;
    if (rc) {
        if (keep)
            close(fd);
        unlink(tmp);
        return rc;
    }
    if (keep) {
        if (*keep >= 0)
            close(*keep);
        *keep = fd;
    }
    return durable ? fb__fsync_dir(dir) : 0;
}

int fb__write_file_atomic(const char *path, const void *buf, size_t len)
{
    return write_atomic(path, buf, len, NULL, 1);
}

int fb__write_file_replace(const char *path, const void *buf, size_t len)
{
    return write_atomic(path, buf, len, NULL, 0);
}

int fb__write_file_atomic_held(const char *path, const void *buf, size_t len, int *fd)
{
    return write_atomic(path, buf, len, fd, 1);
}

int fb__fmt(char *buf, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, size, fmt, ap);
    va_end(ap);
    return (n < 0 || (size_t)n >= size) ? -ENAMETOOLONG : 0;
}

const char *fb__getenv(const char *name)
{
    const char *v = getenv(name);
    return (v && *v) ? v : NULL;
}

uint64_t fb__fnv1a64(const void *data, size_t len, uint64_t seed)
{
    const unsigned char *p = data;
    uint64_t h = 0xcbf29ce484222325ull ^ seed;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

int fb__isatty(int fd)
{
    return isatty(fd);
}

int fb__usable_cpus(void)
{
    cpu_set_t set;
    long n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set)
                                                         : sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 1 << 20 ? 1 << 20 : (int)n;
}
