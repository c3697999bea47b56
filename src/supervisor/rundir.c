/*
 * rundir.c -- who owns a run directory, and who may read it.
 *
 * Ownership: one supervisor per run directory, and per checkpoint
 * directory.  An flock(2) on <dir>/supervisor.lock is taken before anything
 * in the directory is written and held for the whole run; the file says
 * who holds it (pid, host, since when), so that a second `firebreak run`
 * on the same directory can name the first and stop (exit 2).  The lock is
 * the flock, not the file: the kernel drops it when the supervisor dies,
 * even by SIGKILL, so a dead run never blocks the next one and the file is
 * never removed (removing it would let two runs lock two different files).
 * The descriptor is close-on-exec; the shims (forked, not exec'd) share it,
 * so a killed supervisor's directory stays locked until its shims have
 * killed its ranks.
 *
 * Access: everything of a run (journal, `job`, logs, checkpoints, flight
 * recorder dumps) is private to the user by default: the run's directories
 * are 0700, and the supervisor runs with umask 077, which the ranks inherit,
 * so files they create are 0600 whatever mode they ask for.  With
 * --shared-group G the directories are 02750 with group G (setgid: what is
 * created below inherits G) and the umask is 027: files 0640.  Parents the
 * supervisor creates on the way (runs/, --run-dir's parents) get the user's
 * own umask.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"
#include "supervisor/sup.h"

#define LOCK_NAME "supervisor.lock"

static int resolve_group(const char *name, gid_t *gid_out)
{
    long long x;
    struct group *g = getgrnam(name);
    if (g)
        *gid_out = g->gr_gid;
    else if (fb__parse_int(name, 0, 0x7fffffff, &x) == 0)
        *gid_out = (gid_t)x;
    else
        return -ENOENT;
    return 0;
}

static int in_group(gid_t gid)
{
    if (geteuid() == 0 || getegid() == gid)
        return 1;
    gid_t groups[1024];
    int n = getgroups(1024, groups);
    for (int i = 0; i < n; i++)
        if (groups[i] == gid)
            return 1;
    return 0;
}

int fb__sup_access_init(fb__sup *s)
{
    const char *group = s->o->shared_group;
    if (group) {
        if (resolve_group(group, &s->shared_gid)) {
            fprintf(stderr, "firebreak run: --shared-group: no group '%s'\n", group);
            return -EINVAL;
        }
        if (!in_group(s->shared_gid)) {
            fprintf(stderr, "firebreak run: --shared-group: you are not a member "
                    "of group '%s' (see `id -Gn`)\n", group);
            return -EPERM;
        }
        s->shared = 1;
    }
    s->user_umask = umask(s->shared ? 027 : 077);
    s->umask_set = 1;
    s->lock_fd[0] = s->lock_fd[1] = -1;
    return 0;
}

int fb__sup_mkdir_parents(fb__sup *s, const char *path)
{
    mode_t private = umask(s->user_umask);
    int rc = fb__mkdir_p(path, 0777);
    umask(private);
    return rc;
}

int fb__sup_secure_dir(fb__sup *s, const char *path)
{
    mode_t want = s->shared ? 02750 : 0700;
    struct stat st;
    if (stat(path, &st))
        return -errno;
    int rc = 0;
    if (s->shared && st.st_gid != s->shared_gid &&
        chown(path, (uid_t)-1, s->shared_gid)) {
        rc = -errno;
        fprintf(stderr, "firebreak run: cannot give %s to group '%s': %s\n", path,
                s->o->shared_group, strerror(-rc));
        return rc;
    }
    if ((st.st_mode & 07777) == want || chmod(path, want) == 0)
        return 0;
    rc = -errno;
    /* Someone else's directory (a team's checkpoint area): fine as long as
     * it gives nothing to others. */
    if (rc == -EPERM && !(st.st_mode & 07) &&
        (!s->shared || st.st_gid == s->shared_gid))
        return 0;
    fprintf(stderr, "firebreak run: cannot make %s %s (mode %04o): %s\n", path,
            s->shared ? "group-shared" : "private", (unsigned)want, strerror(-rc));
    return rc;
}

/* The holder's line: "pid host since", written by the holder. */
static void describe_holder(int fd, const char *path, char *buf, size_t size)
{
    char line[256] = "";
    ssize_t n = pread(fd, line, sizeof line - 1, 0);
    line[n > 0 ? n : 0] = '\0';
    int pid;
    char host[128], since[64];
    if (sscanf(line, "%d %127s %63s", &pid, host, since) == 3) {
        char h[128], t[64];
        snprintf(buf, size, "pid %d on host %s, since %s", pid,
                 fb__safe_text(h, sizeof h, host), fb__safe_text(t, sizeof t, since));
    } else {
        snprintf(buf, size, "holder not recorded yet in %s", path);
    }
}

int fb__sup_lock_dir(fb__sup *s, const char *dir, const char *what, int slot)
{
    char path[PATH_MAX];
    if (fb__fmt(path, sizeof path, "%s/" LOCK_NAME, dir))
        return -ENAMETOOLONG;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) {
        int rc = -errno;
        fprintf(stderr, "firebreak run: cannot open %s: %s\n", path, strerror(-rc));
        return rc;
    }
    if (flock(fd, LOCK_EX | LOCK_NB)) {
        int rc = -errno;
        if (rc == -EWOULDBLOCK) {
            char holder[320];
            describe_holder(fd, path, holder, sizeof holder);
            fprintf(stderr, "firebreak run: the %s %s is in use by another "
                    "firebreak run (%s). One supervisor per directory: wait for "
                    "that run to end, or give another %s.\n", what, dir, holder,
                    slot == 0 ? "--run-dir" : "--ckpt-dir");
            close(fd);
            return -EBUSY;
        }
        /* A file system without locks: say so, and run unguarded. */
        fb__sup_log(s, "warning: cannot lock %s (%s): nothing keeps a second "
                    "run out of this %s", path, strerror(-rc), what);
        close(fd);
        return 0;
    }
    /* Created before the directory got its group (we lock first). */
    if (s->shared && fchown(fd, (uid_t)-1, s->shared_gid))
        fb__sup_log(s, "warning: cannot give %s to group '%s': %s", path,
                    s->o->shared_group, strerror(errno));
    char since[64], line[256];
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(since, sizeof since, "%Y-%m-%dT%H:%M:%SZ", &tm);
    int n = snprintf(line, sizeof line, "%d %s %s\n", (int)getpid(),
                     s->hostname[0] ? s->hostname : "?", since);
    if (ftruncate(fd, 0) || pwrite(fd, line, (size_t)n, 0) != n)
        fb__sup_log(s, "warning: cannot record the holder in %s: %s", path,
                    strerror(errno));
    s->lock_fd[slot] = fd;
    return 0;
}

void fb__sup_release_dirs(fb__sup *s)
{
    for (int i = 0; i < 2; i++) {
        if (s->lock_fd[i] >= 0)
            close(s->lock_fd[i]);
        s->lock_fd[i] = -1;
    }
    if (s->umask_set)
        umask(s->user_umask);
    s->umask_set = 0;
}
