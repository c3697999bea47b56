/*
 * epilog.c -- the marker a node's fb.<job>.mem carries, and the cleanup
 * Slurm's Epilog runs with it (watcher.h, "the Slurm Epilog"; docs/slurm.md, "Epilog").
 *
 * The cleanup works on /dev/shm, which every local user can write, as
 * root: every name is looked at with fstatat(AT_SYMLINK_NOFOLLOW), every
 * directory opened with O_NOFOLLOW relative to its parent's descriptor
 * and checked to be the one looked at (device and inode), and a marker
 * is read through a descriptor, at most FB__EPILOG_MARKER_MAX + 1 bytes,
 * after fstat says it is a small regular file of the directory's owner.
 * Two passes over /dev/shm: the first finds the fb.<job>.mem directories
 * whose marker names the Slurm job, the second removes them with the
 * same firebreak job's rank segments and Open MPI directory.
 */
#include "supervisor/watcher.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <syslog.h>
#include <unistd.h>

#include "ckpt/tier.h"
#include "common/util.h"
#include "lib/segment.h"

#define MARKER_KEY "SLURM_JOB_ID="
#define JOB_ID_DIGITS 10        /* 4294967295                               */
#define FB_JOB_MAX FB__JOB_ID_MAX /* a firebreak job id (lib/segment.h)     */
#define MAX_ENTRIES (1 << 20)   /* names of /dev/shm looked at, per pass    */

/* ---- the marker ---- */

/* Decimal 1..UINT32_MAX in exactly len bytes, no leading zero. */
static int parse_decimal(const char *s, size_t len, uint32_t *out)
{
    if (len == 0 || len > JOB_ID_DIGITS || s[0] == '0')
        return -EINVAL;
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -EINVAL;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    if (v > UINT32_MAX)
        return -EINVAL;
    *out = (uint32_t)v;
    return 0;
}

int fb__epilog_parse_job_id(const char *s, uint32_t *job)
{
    if (!s)
        return -EINVAL;
    return parse_decimal(s, strnlen(s, JOB_ID_DIGITS + 1), job);
}

int fb__epilog_marker_format(char *buf, size_t size, uint32_t job)
{
    int n = snprintf(buf, size, MARKER_KEY "%u\n", (unsigned)job);
    return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : n;
}

int fb__epilog_marker_parse(const char *buf, size_t len, uint32_t *job)
{
    size_t k = sizeof MARKER_KEY - 1;
    if (!buf || len > FB__EPILOG_MARKER_MAX || len <= k || memcmp(buf, MARKER_KEY, k))
        return -EINVAL;
    if (buf[len - 1] == '\n')
        len--;
    return parse_decimal(buf + k, len - k, job);
}

int fb__epilog_mark(const char *mem_dir, int create, FILE *err)
{
    const char *v = fb__getenv("SLURM_JOB_ID");
    if (!mem_dir || !mem_dir[0] || !v)
        return 0;
    uint32_t job;
    char path[PATH_MAX], text[FB__EPILOG_MARKER_MAX];
    int n, rc;
    if (fb__epilog_parse_job_id(v, &job)) {
        fprintf(err, "firebreak: SLURM_JOB_ID '%.32s' is not a job id: %s has no "
                "marker, and Slurm's Epilog will not remove it\n", v, mem_dir);
        return -EINVAL;
    }
    if (create && mkdir(mem_dir, 0700) && errno != EEXIST) {
        rc = -errno;
        fprintf(err, "firebreak: mkdir %s: %s\n", mem_dir, strerror(-rc));
        return rc;
    }
    if ((rc = fb__fmt(path, sizeof path, "%s/" FB__EPILOG_MARKER, mem_dir)) ||
        (n = fb__epilog_marker_format(text, sizeof text, job)) < 0 ||
        (rc = fb__write_file_atomic(path, text, (size_t)n))) {
        rc = rc ? rc : -ENAMETOOLONG;
        fprintf(err, "firebreak: the Slurm job's marker %s: %s (Slurm's Epilog will "
                "not remove %s)\n", path, strerror(-rc), mem_dir);
    }
    return rc;
}

int fb__epilog_mark_job(const char *job, FILE *err)
{
    char dir[PATH_MAX];
    if (!fb__job_id_ok(job))
        return -EINVAL;
    if (fb__ckpt_mem_dir_path(dir, sizeof dir, job))
        return -ENAMETOOLONG;
    return fb__epilog_mark(dir, 1, err);
}

/* ---- the cleanup ---- */

typedef struct ctx {
    const fb__epilog_opts *o;
    fb__epilog_result *res;
    const char *shm;
    dev_t dev;    /* the filesystem of shm: nothing elsewhere is touched */
} ctx;

static void say(const ctx *c, int prio, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void say(const ctx *c, int prio, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (c->o->log)
        fprintf(c->o->log, "firebreak slurm-epilog: job %u: %s\n", (unsigned)c->o->job,
                msg);
    if (c->o->syslog)
        syslog(prio, "job %u: %s", (unsigned)c->o->job, msg);
}

static int owner_ok(const ctx *c, uid_t uid)
{
    return uid == 0 || uid == geteuid() || (c->o->have_uid && uid == c->o->job_uid);
}

/* "fb.<J>.<suffix>" with J a firebreak job id ([A-Za-z0-9_-], 1..48):
 * J's length, the suffix in *suffix; 0 when the name is not one. */
static size_t fb_job_of(const char *name, const char **suffix)
{
    if (strncmp(name, "fb.", 3))
        return 0;
    size_t n = fb__job_id_span(name + 3);
    if (n == 0 || name[3 + n] != '.')
        return 0;
    *suffix = name + 3 + n + 1;
    return n;
}

/* "<attempt>.<rank>": the rest of a rank segment's name. */
static int is_segment_suffix(const char *s)
{
    int dots = 0, digits = 0;
    for (; *s; s++) {
        if (*s == '.') {
            if (!digits || ++dots > 1)
                return 0;
            digits = 0;
        } else if (*s >= '0' && *s <= '9') {
            if (++digits > 10)
                return 0;
        } else {
            return 0;
        }
    }
    return dots == 1 && digits;
}

/* Remove the entry `name` of the directory pfd, a tree, never following a
 * symlink nor leaving the filesystem; ino (0: any) is the inode it must
 * still be.  0, or -errno of the first failure (the rest is still tried). */
static int remove_at(const ctx *c, int pfd, const char *name, ino_t ino, int depth)
{
    struct stat st;
    if (fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW))
        return errno == ENOENT ? 0 : -errno;
    if (ino && st.st_ino != ino)
        return -ESTALE;
    if (!S_ISDIR(st.st_mode))
        return unlinkat(pfd, name, 0) && errno != ENOENT ? -errno : 0;
    if (st.st_dev != c->dev)
        return -EXDEV;
    if (depth <= 0)
        return -EDOM; /* TOO_DEEP */
    int fd = openat(pfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct stat fst;
    if (fstat(fd, &fst) || fst.st_ino != st.st_ino || fst.st_dev != st.st_dev) {
        close(fd);
        return -ESTALE; /* replaced between the look and the open */
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
        int r = remove_at(c, dirfd(d), e->d_name, 0, depth - 1);
        if (r && !rc)
            rc = r;
    }
    closedir(d);
    if (unlinkat(pfd, name, AT_REMOVEDIR) && errno != ENOENT && !rc)
        rc = -errno;
    return rc;
}

#define WORDS_(x) #x
#define WORDS(x) WORDS_(x)

/* remove_at's failures in words: its own codes, else the system's. */
static const char *removal_error(int rc)
{
    switch (rc) {
    case -EDOM: return "deeper than " WORDS(FB__EPILOG_MAX_DEPTH) " levels: the rest left";
    case -ESTALE: return "replaced while it was removed: the rest left";
    case -EXDEV: return "holds another filesystem: the rest left";
    default: return strerror(-rc);
    }
}

static void remove_entry(const ctx *c, int shm_fd, const char *name, ino_t ino)
{
    int rc = remove_at(c, shm_fd, name, ino, FB__EPILOG_MAX_DEPTH);
    if (rc) {
        c->res->failed++;
        say(c, LOG_WARNING, "could not remove %s/%s: %s", c->shm, name,
            removal_error(rc));
    } else {
        c->res->removed++;
        say(c, LOG_INFO, "removed %s/%s", c->shm, name);
    }
}

/* A directory we may remove: a real one on shm's filesystem, of an owner
 * allowed, writable by its owner alone.  NULL, or why not. */
static const char *dir_refused(const ctx *c, const struct stat *st, char *why, size_t size)
{
    if (!S_ISDIR(st->st_mode))
        return "not a directory (a symlink or a file under the name)";
    if (st->st_dev != c->dev)
        return "on another filesystem";
    if (!owner_ok(c, st->st_uid)) {
        snprintf(why, size, "owner uid %u is neither root nor the job's user",
                 (unsigned)st->st_uid);
        return why;
    }
    if (st->st_mode & 022) {
        snprintf(why, size, "writable by others than its owner (mode %04o)",
                 (unsigned)(st->st_mode & 07777));
        return why;
    }
    return NULL;
}

/* The Slurm job an fb.<J>.mem directory's marker names, read through its
 * descriptor dfd.  0 with *job, or why not (why). */
static const char *read_marker(int dfd, const struct stat *dst, uint32_t *job, char *why,
                               size_t size)
{
    int fd = openat(dfd, FB__EPILOG_MARKER, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return "no marker " FB__EPILOG_MARKER " (not a Slurm job's, or from an "
                   "older firebreak)";
        snprintf(why, size, "marker " FB__EPILOG_MARKER ": %s", strerror(errno));
        return why;
    }
    struct stat st;
    char buf[FB__EPILOG_MARKER_MAX + 1];
    ssize_t n = -1;
    const char *bad = NULL;
    if (fstat(fd, &st))
        bad = "marker cannot be read";
    else if (!S_ISREG(st.st_mode))
        bad = "marker is not a regular file";
    else if (st.st_uid != dst->st_uid)
        bad = "marker has another owner than its directory";
    else if (st.st_size > FB__EPILOG_MARKER_MAX)
        bad = "marker is too long";
    else if ((n = read(fd, buf, sizeof buf)) < 0 || n > FB__EPILOG_MARKER_MAX)
        bad = "marker cannot be read whole";
    else if (fb__epilog_marker_parse(buf, (size_t)n, job))
        bad = "marker does not parse";
    close(fd);
    if (bad)
        snprintf(why, size, "%s", bad);
    return bad ? why : NULL;
}

/* Pass 1 on one name: 1 when it is an fb.<J>.mem directory of the Slurm
 * job (its inode in *ino), 0 when it is not one or another job's, -1
 * when left alone (said). */
static int examine(const ctx *c, int shm_fd, const char *name, ino_t *ino)
{
    const char *suffix;
    if (!fb_job_of(name, &suffix) || strcmp(suffix, "mem"))
        return 0;
    struct stat st, fst;
    char why[160];
    const char *refused = NULL;
    uint32_t job = 0;
    if (fstatat(shm_fd, name, &st, AT_SYMLINK_NOFOLLOW))
        return 0; /* gone */
    refused = dir_refused(c, &st, why, sizeof why);
    if (!refused) {
        int fd = openat(shm_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
            refused = "cannot be opened";
        else if (fstat(fd, &fst) || fst.st_ino != st.st_ino || fst.st_dev != st.st_dev)
            refused = "replaced while looked at";
        else
            refused = read_marker(fd, &st, &job, why, sizeof why);
        if (fd >= 0)
            close(fd);
    }
    if (refused) {
        c->res->left++;
        say(c, LOG_NOTICE, "left alone %s/%s: %s", c->shm, name, refused);
        return -1;
    }
    if (job != c->o->job)
        return 0; /* another job's: not ours to say anything about */
    *ino = st.st_ino;
    return 1;
}

/* Pass 2 on one name: a rank segment or Open MPI directory of a matched
 * firebreak job J (its index in jobs), removed when it may be. */
static void remove_related(const ctx *c, int shm_fd, const char *name,
                           char jobs[][FB_JOB_MAX + 1], int njobs)
{
    const char *suffix;
    size_t n = fb_job_of(name, &suffix);
    int seg = n && is_segment_suffix(suffix), ompi = n && !strcmp(suffix, "ompi");
    if (!seg && !ompi)
        return;
    int k = 0;
    while (k < njobs && !(strlen(jobs[k]) == n && !strncmp(jobs[k], name + 3, n)))
        k++;
    if (k == njobs)
        return;
    struct stat st;
    char why[160];
    const char *refused = NULL;
    if (fstatat(shm_fd, name, &st, AT_SYMLINK_NOFOLLOW))
        return;
    if (ompi)
        refused = dir_refused(c, &st, why, sizeof why);
    else if (!S_ISREG(st.st_mode))
        refused = "not a regular file";
    else if (!owner_ok(c, st.st_uid))
        refused = "owner is neither root nor the job's user";
    if (refused) {
        c->res->left++;
        say(c, LOG_NOTICE, "left alone %s/%s: %s", c->shm, name, refused);
        return;
    }
    remove_entry(c, shm_fd, name, st.st_ino);
}

void fb__epilog_clean(const fb__epilog_opts *o, fb__epilog_result *res)
{
    static char jobs[FB__EPILOG_MAX_JOBS][FB_JOB_MAX + 1];
    static ino_t inos[FB__EPILOG_MAX_JOBS];
    memset(res, 0, sizeof *res);
    ctx c = {.o = o, .res = res, .shm = o->shm_dir ? o->shm_dir : "/dev/shm"};
    int shm_fd = open(c.shm, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    struct stat st;
    DIR *d = NULL;
    if (shm_fd < 0 || fstat(shm_fd, &st) || !(d = fdopendir(shm_fd))) {
        say(&c, LOG_WARNING, "cannot read %s: %s", c.shm, strerror(errno));
        if (shm_fd >= 0)
            close(shm_fd);
        return;
    }
    c.dev = st.st_dev;
    int njobs = 0, seen = 0;
    struct dirent *e;
    while ((e = readdir(d)) && seen++ < MAX_ENTRIES) {
        ino_t ino = 0;
        if (examine(&c, shm_fd, e->d_name, &ino) != 1)
            continue;
        if (njobs == FB__EPILOG_MAX_JOBS) {
            res->left++;
            say(&c, LOG_WARNING, "left alone %s/%s: over %d of the job's directories",
                c.shm, e->d_name, FB__EPILOG_MAX_JOBS);
            continue;
        }
        snprintf(jobs[njobs], sizeof jobs[njobs], "%.*s",
                 (int)(strlen(e->d_name) - 7), e->d_name + 3); /* fb.J.mem */
        inos[njobs++] = ino;
    }
    if (seen > MAX_ENTRIES)
        say(&c, LOG_WARNING, "%s holds over %d names: looked at the first only", c.shm,
            MAX_ENTRIES);
    res->jobs = njobs;
    if (njobs) {
        rewinddir(d);
        seen = 0;
        while ((e = readdir(d)) && seen++ < MAX_ENTRIES)
            remove_related(&c, shm_fd, e->d_name, jobs, njobs);
        for (int k = 0; k < njobs; k++) {
            char name[FB_JOB_MAX + 8];
            snprintf(name, sizeof name, "fb.%s.mem", jobs[k]);
            remove_entry(&c, shm_fd, name, inos[k]);
        }
    }
    closedir(d); /* closes shm_fd */
}
