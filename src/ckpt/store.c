/*
 * store.c -- listing, completeness and retention of checkpoint directories,
 * and the write-behind of a shard being written (see store.h).
 */
#include "ckpt/store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "ckpt/engine.h"
#include "ckpt/safetensors.h"
#include "ckpt/shard.h"
#include "common/alloc.h"
#include "common/util.h"

int fb__ckpt_step_path(char *buf, size_t size, const char *dir, uint64_t step)
{
    return fb__fmt(buf, size, "%s/step-%010llu", dir, (unsigned long long)step);
}

int fb__ckpt_shard_path(char *buf, size_t size, const char *dir, uint64_t step,
                        int rank)
{
    return fb__fmt(buf, size, "%s/step-%010llu/rank-%05d.safetensors", dir,
                   (unsigned long long)step, rank);
}

/* Parse "<prefix><digits><suffix>" exactly; digits at least `min_digits`. */
static int parse_numbered(const char *name, const char *prefix, const char *suffix,
                          unsigned long long *out)
{
    size_t pl = strlen(prefix), sl = strlen(suffix), n = strlen(name);
    if (n <= pl + sl || strncmp(name, prefix, pl) || strcmp(name + n - sl, suffix))
        return -1;
    unsigned long long v = 0;
    size_t digits = n - pl - sl;
    if (digits > 19)
        return -1;
    for (size_t i = pl; i < n - sl; i++) {
        if (name[i] < '0' || name[i] > '9')
            return -1;
        v = v * 10 + (unsigned long long)(name[i] - '0');
    }
    *out = v;
    return 0;
}

int fb__ckpt_shard_world_size(const char *path)
{
    int fd;
    fb__st_header *h;
    int rc = fb__st_open(path, &fd, &h, NULL, 0);
    if (rc)
        return rc == -ENOMEM ? rc : -1;
    close(fd);
    const char *w = fb__st_meta_get(h, "firebreak.world_size");
    long long v = -1;
    if (!w || fb__parse_int(w, 1, INT_MAX, &v))
        v = -1;
    fb__st_free(h);
    return (int)v;
}

int fb__ckpt_list_ranks(const char *dir, uint64_t step, int **out, int *count)
{
    char sdir[PATH_MAX];
    if (fb__ckpt_step_path(sdir, sizeof sdir, dir, step))
        return -ENAMETOOLONG;
    DIR *d = opendir(sdir);
    if (!d)
        return -errno;
    int n = 0, cap = 16;
    int *v = malloc(sizeof *v * (size_t)cap);
    struct dirent *e;
    while (v && (e = readdir(d))) {
        int r, len = 0;
        if (sscanf(e->d_name, "rank-%d.safetensors%n", &r, &len) != 1 ||
            len != (int)strlen(e->d_name) || r < 0)
            continue;
        if (n == cap) {
            int *nv = realloc(v, sizeof *v * (size_t)(cap *= 2));
            if (!nv) {
                free(v);
                v = NULL;
                break;
            }
            v = nv;
        }
        v[n++] = r;
    }
    closedir(d);
    if (!v)
        return -ENOMEM;
    for (int i = 1; i < n; i++) /* insertion sort: small, nearly sorted */
        for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
            int t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    *out = v;
    *count = n;
    return 0;
}

int fb__ckpt_step_world(const char *dir, uint64_t step, int world_size)
{
    if (world_size <= 0)
        return -1;
    int *ranks = NULL, n = 0;
    int lr = fb__ckpt_list_ranks(dir, step, &ranks, &n);
    if (lr)
        return lr == -ENOENT ? 1 : lr == -ENOMEM ? lr : -1;
    int rc = !(n > 0 && ranks[n - 1] >= world_size); /* no job of world_size wrote it */
    int unknown = 0;
    for (int i = 0; i < n && rc; i++) {
        char p[PATH_MAX];
        int w = fb__ckpt_shard_path(p, sizeof p, dir, step, ranks[i])
                    ? -1 : fb__ckpt_shard_world_size(p);
        if (w == -ENOMEM || (w > 0 && w != world_size))
            rc = w == -ENOMEM ? w : 0;
        else if (w != world_size)
            unknown = 1; /* a later one may still say another size */
    }
    if (rc == 1 && unknown)
        rc = -1;
    free(ranks);
    return rc;
}

int fb__ckpt_job_complete(const fb__ckpt_entry *e)
{
    return e->complete && !e->beyond;
}

static int scan_step(const char *dir, fb__ckpt_entry *e, int world_size,
                     int with_sizes)
{
    char sdir[PATH_MAX];
    if (fb__ckpt_step_path(sdir, sizeof sdir, dir, e->step))
        return -ENAMETOOLONG;
    DIR *d = opendir(sdir);
    if (!d)
        return -errno;
    int cap = 64, n = 0;
    int *ranks = fb__malloc(sizeof *ranks * (size_t)cap);
    struct dirent *de;
    int lowest = INT_MAX;
    while (ranks && (de = readdir(d))) {
        unsigned long long r;
        if (parse_numbered(de->d_name, "rank-", ".safetensors", &r) || r > INT_MAX)
            continue;
        if (n == cap) {
            int *nr = fb__realloc(ranks, sizeof *ranks * (size_t)(cap *= 2));
            if (!nr) {
                free(ranks);
                ranks = NULL;
                break;
            }
            ranks = nr;
        }
        ranks[n++] = (int)r;
        if ((int)r < lowest)
            lowest = (int)r;
    }
    closedir(d);
    if (!ranks)
        return -ENOMEM;
    e->world_size = world_size;
    if (world_size <= 0 && lowest != INT_MAX) {
        char p[PATH_MAX];
        if (!fb__ckpt_shard_path(p, sizeof p, dir, e->step, lowest))
            e->world_size = fb__ckpt_shard_world_size(p);
        if (e->world_size == -ENOMEM) {
            free(ranks);
            return -ENOMEM;
        }
    }
    e->shards = 0;
    for (int i = 0; i < n; i++) {
        if (e->world_size > 0 && ranks[i] < e->world_size)
            e->shards++;
        else if (e->world_size > 0)
            e->beyond++;
        if (with_sizes) {
            char p[PATH_MAX];
            struct stat st;
            if (!fb__ckpt_shard_path(p, sizeof p, dir, e->step, ranks[i]) &&
                !stat(p, &st)) {
                e->bytes += (uint64_t)st.st_size;
                if (st.st_mtime > e->mtime_s)
                    e->mtime_s = st.st_mtime;
            }
        }
    }
    /* Names are unique in a directory, so counting ranks < W suffices. */
    e->complete = e->world_size > 0 && e->shards == e->world_size;
    free(ranks);
    return 0;
}

static int cmp_newest_first(const void *a, const void *b)
{
    const fb__ckpt_entry *x = a, *y = b;
    return x->step == y->step ? 0 : x->step > y->step ? -1 : 1;
}

int fb__ckpt_scan(const char *dir, int world_size, int with_sizes,
                  fb__ckpt_entry **out, size_t *count)
{
    DIR *d = opendir(dir);
    if (!d)
        return -errno;
    size_t n = 0, cap = 16;
    fb__ckpt_entry *v = fb__calloc(cap, sizeof *v);
    int rc = 0;
    struct dirent *de;
    while (v && (de = readdir(d))) {
        unsigned long long step;
        if (parse_numbered(de->d_name, "step-", "", &step))
            continue;
        if (n == cap) {
            fb__ckpt_entry *nv = fb__realloc(v, sizeof *v * (cap *= 2));
            if (!nv) {
                rc = -ENOMEM;
                break;
            }
            v = nv;
        }
        memset(&v[n], 0, sizeof v[n]);
        v[n].step = step;
        int r = scan_step(dir, &v[n], world_size, with_sizes);
        if (r == -ENOMEM) { /* a step passed over would look absent */
            rc = r;
            break;
        }
        /* One that cannot be read is listed, so that it is said (gone
         * meanwhile, or a file under a step's name: not a checkpoint). */
        if (r && r != -ENOENT && r != -ENOTDIR && r != -ENAMETOOLONG) {
            v[n].world_size = world_size;
            v[n].error = r;
            r = 0;
        }
        if (r == 0)
            n++;
    }
    closedir(d);
    if (!v || rc) {
        free(v);
        return rc ? rc : -ENOMEM;
    }
    qsort(v, n, sizeof *v, cmp_newest_first);
    *out = v;
    *count = n;
    return 0;
}

int fb__ckpt_clean_tmp(const char *dir, uint64_t step, int rank, int keep_pid)
{
    char sdir[PATH_MAX], prefix[32], p[PATH_MAX];
    if (fb__ckpt_step_path(sdir, sizeof sdir, dir, step))
        return -ENAMETOOLONG;
    snprintf(prefix, sizeof prefix, ".rank-%05d.", rank);
    DIR *d = opendir(sdir);
    if (!d)
        return errno == ENOENT ? 0 : -errno;
    int removed = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        unsigned long long pid;
        if (parse_numbered(de->d_name, prefix, ".tmp", &pid) ||
            pid == (unsigned long long)keep_pid ||
            fb__fmt(p, sizeof p, "%s/%s", sdir, de->d_name))
            continue;
        removed += unlink(p) == 0;
    }
    closedir(d);
    if (removed)
        fb__fsync_dir(sdir);
    return removed;
}

int fb__ckpt_clean_tmp_all(const char *dir, int rank, int keep_pid)
{
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT ? 0 : -errno;
    int removed = 0, rc = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        unsigned long long step;
        if (parse_numbered(de->d_name, "step-", "", &step))
            continue;
        int r = fb__ckpt_clean_tmp(dir, step, rank, keep_pid);
        if (r < 0 && !rc)
            rc = r;
        else if (r > 0)
            removed += r;
    }
    closedir(d);
    return rc ? rc : removed;
}

/* Rename to a hidden name and make that durable: from here on no reader
 * sees the step; its bytes go with fb__ckpt_purge. */
static int hide_step(const char *dir, uint64_t step, fb__ckpt_hook hook)
{
    char from[PATH_MAX], to[PATH_MAX];
    if (fb__ckpt_step_path(from, sizeof from, dir, step) ||
        fb__fmt(to, sizeof to, "%s/.deleted-step-%010llu.%d", dir,
                (unsigned long long)step, (int)getpid()))
        return -ENAMETOOLONG;
    if (rename(from, to))
        return errno == ENOENT ? 0 : -errno;
    int rc = fb__fsync_dir(dir);
    if (hook)
        hook("during_delete", step);
    return rc;
}

/* A file cut from its end PURGE_CUT bytes at a time before its unlink,
 * asking yield() between cuts: freeing its blocks is what takes long (0.18
 * s a GiB where ext4 discards them), and one unlink of a 1 GiB shard held a
 * save up to that long.  Only a file with no other link (a user's `cp -al`
 * of a checkpoint keeps its bytes).  1 when yield() stopped it. */
#define PURGE_CUT ((off_t)64 << 20)

static int remove_file(const char *path, int (*yield)(void *), void *arg)
{
#ifdef FB_TEST_HOOKS
    /* FIREBREAK_CKPT_PURGE_DELAY_MS=N: each file the writer's purge removes
     * takes N ms more (at most 10 s), as on a disk slow to discard. */
    const char *delay = fb__getenv("FIREBREAK_CKPT_PURGE_DELAY_MS");
    long long ms;
    if (yield && delay && fb__parse_int(delay, 0, 10000, &ms) == 0)
        usleep((useconds_t)ms * 1000);
#endif
    int fd = yield ? open(path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK) : -1;
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_nlink == 1) {
        for (off_t size = st.st_size; size > PURGE_CUT;) {
            size -= PURGE_CUT;
            if (ftruncate(fd, size))
                break;
            if (yield(arg)) {
                close(fd);
                return 1;
            }
        }
    }
    if (fd >= 0)
        close(fd);
    return fb__rm_rf(path);
}

/* fn on the path of each entry of directory d (named dir) that want()
 * accepts, asking yield() before each where `ask`: 1 when yield() or fn
 * stopped it, else the first error, or 0.  Closes d. */
static int each_entry(DIR *d, const char *dir, int (*want)(const char *name),
                      int (*fn)(const char *path, int (*yield)(void *), void *arg),
                      int ask, int (*yield)(void *), void *arg)
{
    int rc = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!want(e->d_name))
            continue;
        char p[PATH_MAX];
        int r = 1;
        if (!(ask && yield && yield(arg)))
            r = fb__fmt(p, sizeof p, "%s/%s", dir, e->d_name) ? -ENAMETOOLONG
                                                              : fn(p, yield, arg);
        if (r == 1) {
            closedir(d);
            return 1;
        }
        if (r && !rc)
            rc = r;
    }
    closedir(d);
    return rc;
}

static int not_dots(const char *name)
{
    return strcmp(name, ".") && strcmp(name, "..");
}

static int hidden_step(const char *name)
{
    return !strncmp(name, ".deleted-step-", 14);
}

/* One hidden step directory, entry by entry; 1 when yield() stopped it.
 * A name that is not a directory (a symbolic link among them: never
 * followed) is only unlinked. */
static int purge_one(const char *path, int (*yield)(void *), void *arg)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        if (e == ENOTDIR || e == ELOOP)
            return unlink(path) && errno != ENOENT ? -errno : 0;
        return e == ENOENT ? 0 : -e;
    }
    int rc = each_entry(d, path, not_dots, remove_file, 1, yield, arg);
    if (rc != 1 && rmdir(path) && errno != ENOENT && !rc)
        rc = -errno;
    return rc;
}

int fb__ckpt_purge(const char *dir, int (*yield)(void *), void *arg)
{
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT ? 0 : -errno;
    return each_entry(d, dir, hidden_step, purge_one, 0, yield, arg);
}

int fb__ckpt_retain(const char *dir, int world_size, int keep, int defer,
                    fb__ckpt_hook hook, void (*deleted_cb)(uint64_t step))
{
    fb__ckpt_entry *v;
    size_t n;
    int rc = fb__ckpt_scan(dir, world_size, 0, &v, &n);
    if (rc)
        return rc;
    int kept = 0, deleted = 0;
    size_t i = 0;
    for (; i < n && kept < keep; i++)
        kept += fb__ckpt_job_complete(&v[i]);
    if (kept == keep) {
        /* v[i..] are all older than the oldest kept complete checkpoint. */
        for (; i < n; i++) {
            if (v[i].error)
                continue; /* unreadable: left as it was, said by ls/verify */
            if (fb__ckpt_step_world(dir, v[i].step, world_size) == 0)
                continue; /* a job of another size saved it: not ours */
            int r = hide_step(dir, v[i].step, hook);
            if (r < 0) {
                rc = r;
                continue;
            }
            deleted++;
            if (deleted_cb)
                deleted_cb(v[i].step);
        }
    }
    free(v);
    if (!defer) { /* these, and what interrupted deletions left */
        int r = fb__ckpt_purge(dir, NULL, NULL);
        if (r < 0 && !rc)
            rc = r;
    }
    return rc ? rc : deleted;
}

void fb__ckpt_write_behind(int fd, fb__write_behind *wb, uint64_t end)
{
#ifdef FB_TEST_HOOKS
    /* FIREBREAK_CKPT_WRITE_BEHIND=0: off (bench_ckpt's "before"). */
    const char *v = fb__getenv("FIREBREAK_CKPT_WRITE_BEHIND");
    if (v && !strcmp(v, "0"))
        return;
#endif
#ifdef SYNC_FILE_RANGE_WRITE
    if (end > wb->started) {
        (void)sync_file_range(fd, (off_t)wb->started, (off_t)(end - wb->started),
                              SYNC_FILE_RANGE_WRITE);
        wb->started = end;
    }
    if (end > wb->synced + FB__CKPT_WRITE_BEHIND) {
        uint64_t upto = end - FB__CKPT_WRITE_BEHIND;
        if (sync_file_range(fd, (off_t)wb->synced, (off_t)(upto - wb->synced),
                            SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
                                SYNC_FILE_RANGE_WAIT_AFTER) == 0)
            (void)posix_fadvise(fd, (off_t)wb->synced, (off_t)(upto - wb->synced),
                                POSIX_FADV_DONTNEED);
        wb->synced = upto;
    }
#else
    (void)fd, (void)wb, (void)end;
#endif
}

int fb__shard_out_begin(fb__shard_out *o, const char *dir, uint64_t step,
                        int rank, uint64_t bytes, char *why, size_t why_size)
{
    int rc;
    o->fd = -1;
    if (fb__ckpt_step_path(o->sdir, sizeof o->sdir, dir, step) ||
        fb__fmt(o->tmp, sizeof o->tmp, "%s/.rank-%05d.%d.tmp", o->sdir, rank,
                (int)getpid()) ||
        fb__ckpt_shard_path(o->final, sizeof o->final, dir, step, rank)) {
        fb__ckpt_say(why, why_size, "checkpoint path too long under %s", dir);
        return -ENAMETOOLONG;
    }
    if (mkdir(o->sdir, 0755) && errno != EEXIST) {
        rc = -errno;
        fb__ckpt_say(why, why_size, "mkdir %s: %s", o->sdir, strerror(-rc));
        return rc;
    }
    /* Made, never opened: whatever is at the name (a FIFO, whose open
     * would wait for a reader for good, a symlink, a file of an earlier
     * process with our pid) is unlinked, not written through, and the
     * name made again. */
    int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC;
    o->fd = open(o->tmp, flags, 0644);
    if (o->fd < 0 && errno == EEXIST && unlink(o->tmp) == 0)
        o->fd = open(o->tmp, flags, 0644);
    if (o->fd >= 0)
        (void)fcntl(o->fd, F_SETFL, 0); /* a regular file: blocking writes */
    if (o->fd < 0) {
        rc = -errno;
        fb__ckpt_say(why, why_size, "create %s: %s", o->tmp, strerror(-rc));
        rmdir(o->sdir); /* only when empty: other ranks' shards stay */
        return rc;
    }
    if (fallocate(o->fd, 0, 0, (off_t)bytes) && (rc = -errno) != -EOPNOTSUPP &&
        rc != -ENOSYS) {
        fb__ckpt_say(why, why_size, "allocate %llu bytes for %s: %s",
                     (unsigned long long)bytes, o->tmp, strerror(-rc));
        fb__shard_out_abort(o);
        return rc;
    }
    return 0;
}

int fb__shard_out_commit(fb__shard_out *o, uint64_t step, fb__ckpt_hook hook,
                         char *why, size_t why_size)
{
    int rc;
    if (fsync(o->fd)) {
        rc = -errno;
        fb__ckpt_say(why, why_size, "fsync %s: %s", o->tmp, strerror(-rc));
        fb__shard_out_abort(o);
        return rc;
    }
    rc = close(o->fd) ? -errno : 0;
    o->fd = -1;
    if (rc) {
        fb__ckpt_say(why, why_size, "close %s: %s", o->tmp, strerror(-rc));
        fb__shard_out_abort(o);
        return rc;
    }
    if (hook)
        hook("before_rename", step);
    if (rename(o->tmp, o->final)) {
        rc = -errno;
        fb__ckpt_say(why, why_size, "rename %s: %s", o->tmp, strerror(-rc));
        fb__shard_out_abort(o);
        return rc;
    }
    if ((rc = fb__fsync_dir(o->sdir)))
        fb__ckpt_say(why, why_size, "fsync %s: %s", o->sdir, strerror(-rc));
    return rc;
}

void fb__shard_out_abort(fb__shard_out *o)
{
    if (o->fd >= 0)
        close(o->fd);
    o->fd = -1;
    unlink(o->tmp);
    rmdir(o->sdir); /* only when empty: other ranks' shards stay */
}

#define DIO_ALIGN FB__CKPT_DATA_ALIGN
#define DIO_BATCH ((size_t)8 << 20)
#define HASH_BLOCK ((size_t)256 << 10) /* hashed right after its copy: in L2 */
#define MERGE_IOV 64 /* batches merged into one O_DIRECT write, at most */

int fb__ckpt_pwritev_all(int fd, struct iovec *iov, int cnt, uint64_t off)
{
    while (cnt > 0) {
        ssize_t r = pwritev(fd, iov, cnt, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -errno;
        if (r == 0)
            return -EIO;
        off += (uint64_t)r;
        fb__iov_advance(&iov, &cnt, (size_t)r);
    }
    return 0;
}

int fb__ckpt_pwrite_all(int fd, const void *buf, size_t n, uint64_t off)
{
    struct iovec one = {.iov_base = (void *)buf, .iov_len = n};
    return n ? fb__ckpt_pwritev_all(fd, &one, 1, off) : 0;
}

#ifdef O_DIRECT
/*
 * The data section in batches, written in order by the calling thread.
 * A batch is either direct (whole 4 KiB blocks of one tensor whose source
 * is at the file's phase: written from the source as soon as the writer
 * reaches it; the source stays unchanged while the shard is written) or
 * gathered by a second thread into one of two aligned buffers.  That
 * thread goes through the section in order: it copies each gathered piece
 * and hashes it right after (in blocks of HASH_BLOCK, still in cache), and
 * hashes a direct batch where it lies, so every byte is read from memory
 * once by the CPU; the writer waits for it to finish before returning.
 *
 * Batches: the head up to the first 4 KiB boundary and the tail after the
 * last (gathered, through the plain descriptor), and at most DIO_BATCH
 * bytes each between (O_DIRECT).  ready: batches the gatherer is done
 * with; slot_batch[k]: the batch buffer k holds, -1 while free.
 */
typedef struct dio_batch {
    uint64_t off;
    size_t n;
    const char *src; /* direct: the bytes; NULL: gathered */
    size_t ti;       /* direct: its tensor                */
} dio_batch;

typedef struct dio_pipe {
    fb_ckpt *ck;
    int from_staging, hash;
    char *buf[2];
    dio_batch *b;
    size_t nbatch;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t ready;
    long slot_batch[2];
    int stop;                          /* the writer gave up            */
    int rc;                            /* gatherer: 0, -ENOMEM          */
    /* The gatherer's own: where it is, the hash of the tensor it is in. */
    size_t i, at;
    fb__hash_ctx *hc;
    uint64_t cpu_ns;                   /* the gatherer's, when it ends   */
} dio_pipe;

#ifdef FB_TEST_HOOKS
/* FIREBREAK_CKPT_GATHER_ALL=1: every batch gathered (bench_ckpt's
 * "before"). */
static int gather_all(void)
{
    const char *v = fb__getenv("FIREBREAK_CKPT_GATHER_ALL");
    return v && !strcmp(v, "1");
}
#else
static int gather_all(void)
{
    return 0;
}
#endif

/* [from, to) in batches of at most DIO_BATCH, from src (NULL: gathered);
 * with b NULL only counts them. */
static size_t add_batches(dio_batch *b, size_t nb, uint64_t from, uint64_t to,
                          const char *src, size_t ti)
{
    while (from < to) {
        size_t n = to - from > DIO_BATCH ? DIO_BATCH : (size_t)(to - from);
        if (b)
            b[nb] = (dio_batch){from, n, src, ti};
        nb++;
        from += n;
        if (src)
            src += n;
    }
    return nb;
}

/* The batches of [data_off, end), lo and hi its first and last 4 KiB
 * boundaries; with b NULL only counts them. */
static size_t plan_batches(const dio_pipe *p, dio_batch *b, uint64_t data_off,
                           uint64_t lo, uint64_t hi, uint64_t end)
{
    size_t nb = 0;
    if (b)
        b[nb] = (dio_batch){data_off, (size_t)(lo - data_off), NULL, 0};
    nb++;
    uint64_t cur = lo, off = data_off;
    size_t n = gather_all() ? 0 : p->ck->n;
    for (size_t i = 0; i < n; i++) {
        const fb__ckpt_tensor *t = &p->ck->t[i];
        uint64_t f = off;
        off += t->bytes;
        const char *src = fb__ckpt_source(t, p->from_staging);
        if (t->bytes < FB__CKPT_DIRECT_MIN ||
            ((uintptr_t)src & (DIO_ALIGN - 1)) != (f & (DIO_ALIGN - 1)))
            continue;
        uint64_t a = (f + DIO_ALIGN - 1) & ~(DIO_ALIGN - 1);
        uint64_t z = (f + t->bytes) & ~(DIO_ALIGN - 1);
        if (a < cur)
            a = cur;
        if (z > hi)
            z = hi;
        if (z <= a)
            continue;
        nb = add_batches(b, nb, cur, a, NULL, 0);
        nb = add_batches(b, nb, a, z, src + (a - f), i);
        cur = z;
    }
    nb = add_batches(b, nb, cur, hi, NULL, 0);
    if (b)
        b[nb] = (dio_batch){hi, (size_t)(end - hi), NULL, 0};
    return nb + 1;
}

/* Tensors from p->i on that hold no more bytes past p->at: hashed. */
static int finish_tensors(dio_pipe *p)
{
    fb_ckpt *ck = p->ck;
    while (p->i < ck->n && p->at == ck->t[p->i].bytes) {
        if (!p->hash) {
            p->i++;
            p->at = 0;
            continue;
        }
        if (!p->hc && !(p->hc = fb__hash_new(ck->alg)))
            return -ENOMEM;
        ck->t[p->i].hash = fb__hash_digest(p->hc);
        fb__hash_free(p->hc);
        p->hc = NULL;
        p->i++;
        p->at = 0;
    }
    return 0;
}

/* The next n bytes of the section into buf (NULL: a direct batch, left
 * where they are), each piece hashed from buf or from its source; a
 * tensor's hash is set as soon as its last byte is in (an empty one's
 * when gathering reaches it). */
static int gather_hash(dio_pipe *p, char *buf, size_t n)
{
    fb_ckpt *ck = p->ck;
    int rc = finish_tensors(p);
    while (n && !rc && p->i < ck->n) {
        const fb__ckpt_tensor *t = &ck->t[p->i];
        size_t k = t->bytes - p->at;
        if (k > n)
            k = n;
        if (k > HASH_BLOCK)
            k = HASH_BLOCK;
        if (p->hash && !p->hc && !(p->hc = fb__hash_new(ck->alg)))
            return -ENOMEM;
        /* A write-protect snapshot's bytes as the drain beside copies them. */
        if (p->from_staging && (rc = fb__wp_wait_copied(ck, p->i, p->at, k)))
            return rc;
        const char *src = fb__ckpt_source(t, p->from_staging) + p->at;
        if (buf) {
            memcpy(buf, src, k);
            src = buf;
            buf += k;
        }
        if (p->hash)
            fb__hash_update(p->hc, src, k);
        n -= k;
        p->at += k;
        rc = finish_tensors(p);
    }
    return rc;
}

static void *gatherer(void *arg)
{
    dio_pipe *p = arg;
    size_t gathered = 0;
    for (size_t b = 0; b < p->nbatch; b++) {
        int k = -1;
        pthread_mutex_lock(&p->mu);
        if (!p->b[b].src) {
            k = (int)(gathered++ & 1);
            while (p->slot_batch[k] >= 0 && !p->stop)
                pthread_cond_wait(&p->cv, &p->mu);
        }
        int stop = p->stop;
        pthread_mutex_unlock(&p->mu);
        if (stop)
            break;
        int rc = gather_hash(p, k >= 0 ? p->buf[k] : NULL, p->b[b].n);
        pthread_mutex_lock(&p->mu);
        if (rc) {
            p->rc = rc;
        } else {
            if (k >= 0)
                p->slot_batch[k] = (long)b;
            p->ready = b + 1;
        }
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
        if (rc)
            break;
    }
    fb__hash_free(p->hc);
    p->hc = NULL;
    p->cpu_ns = fb__thread_cpu_ns();
    return NULL;
}
#endif

int fb__ckpt_write_direct(const char *path, int fd, fb_ckpt *ck,
                          int from_staging, int hash, uint64_t data_off,
                          uint64_t bytes, fb__direct_stats *st)
{
    if (st)
        *st = (fb__direct_stats){0, 0};
#ifdef O_DIRECT
#ifdef FB_TEST_HOOKS
    /* FIREBREAK_CKPT_DIRECT=0: the plain way (bench_ckpt's "before"). */
    const char *v = fb__getenv("FIREBREAK_CKPT_DIRECT");
    if (v && !strcmp(v, "0"))
        return 1;
#endif
    dio_pipe p = {.ck = ck, .from_staging = from_staging, .hash = hash,
                  .slot_batch = {-1, -1}};
    uint64_t end = data_off + bytes;
    uint64_t lo = (data_off + DIO_ALIGN - 1) & ~(DIO_ALIGN - 1);
    uint64_t hi = end & ~(DIO_ALIGN - 1);
    if (hi <= lo + DIO_ALIGN)
        return 1; /* too small to matter */
    p.nbatch = plan_batches(&p, NULL, data_off, lo, hi, end);
    if (!(p.b = malloc(p.nbatch * sizeof *p.b)))
        return -ENOMEM;
    (void)plan_batches(&p, p.b, data_off, lo, hi, end);
    /* The same file as fd, or the plain way: whatever a rank put at the
     * name since (a FIFO would hold this open for good) is not written. */
    int dfd = open(path, O_WRONLY | O_DIRECT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    struct stat got, want;
    if (dfd >= 0 && (fstat(dfd, &got) || fstat(fd, &want) || got.st_ino != want.st_ino ||
                     got.st_dev != want.st_dev)) {
        close(dfd);
        dfd = -1;
    }
    if (dfd < 0) {
        free(p.b);
        return 1;
    }
    (void)fcntl(dfd, F_SETFL, O_DIRECT); /* blocking writes */
    /* On huge pages (staging.c): 16 MiB in 4 KiB pages, faulted in again
     * at every save, would cost milliseconds on a virtual machine. */
    fb__staging bounce;
    if (fb__staging_alloc_now(&bounce, 2 * DIO_BATCH)) {
        close(dfd);
        free(p.b);
        return 1;
    }
    p.buf[0] = bounce.ptr;
    p.buf[1] = (char *)bounce.ptr + DIO_BATCH;
    pthread_mutex_init(&p.mu, NULL);
    pthread_cond_init(&p.cv, NULL);
    pthread_t tid;
    int started = pthread_create(&tid, NULL, gatherer, &p) == 0;
    int rc = started ? 0 : 1;
    uint64_t sent_as_is = 0;
    for (size_t b = 0; b < p.nbatch && !rc;) {
        /* One write of batches b..e-1: O_DIRECT ones merged into one
         * pwritev of up to DIO_BATCH bytes, so a tensor boundary (a direct
         * batch ends there, a few gathered blocks follow) does not cost
         * the disk a small write; at most two gathered batches in it, the
         * two buffers, which the gatherer cannot refill before it ends. */
        int direct = b > 0 && b < p.nbatch - 1;
        size_t e = b + 1, total = p.b[b].n;
        int gathered = !p.b[b].src;
        while (direct && e < p.nbatch - 1 && e - b < MERGE_IOV &&
               total + p.b[e].n <= DIO_BATCH && gathered + !p.b[e].src <= 2) {
            gathered += !p.b[e].src;
            total += p.b[e].n;
            e++;
        }
        /* Direct batches are written at once (the gatherer hashes them
         * meanwhile, reading the same unchanged bytes); gathered ones
         * once filled. */
        size_t need = 0;
        for (size_t j = b; j < e; j++)
            if (!p.b[j].src)
                need = j + 1;
        struct iovec iov[MERGE_IOV];
        int slot[MERGE_IOV];
        pthread_mutex_lock(&p.mu);
        while (p.ready < need && !p.rc)
            pthread_cond_wait(&p.cv, &p.mu);
        rc = p.ready >= need ? 0 : p.rc;
        for (size_t j = b; j < e && !rc; j++) {
            const dio_batch *d = &p.b[j];
            slot[j - b] = d->src ? -1 : p.slot_batch[0] == (long)j ? 0 : 1;
            iov[j - b].iov_base = (void *)(d->src ? d->src : p.buf[slot[j - b]]);
            iov[j - b].iov_len = d->n;
        }
        pthread_mutex_unlock(&p.mu);
        for (size_t j = b; j < e && !rc && from_staging; j++)
            if (p.b[j].src) /* as the drain beside copies it (engine.c) */
                rc = fb__wp_wait_copied(ck, p.b[j].ti,
                                        (size_t)(p.b[j].src -
                                                 (const char *)ck->t[p.b[j].ti].staging),
                                        p.b[j].n);
        if (rc)
            break;
        rc = total ? fb__ckpt_pwritev_all(direct ? dfd : fd, iov, (int)(e - b),
                                          p.b[b].off)
                   : 0;
        if (rc == -EINVAL && direct)
            rc = 1; /* opened, but not written so here: the plain way
                       rewrites the whole section */
        pthread_mutex_lock(&p.mu);
        for (size_t j = b; j < e; j++) {
            if (!rc && p.b[j].src)
                sent_as_is += p.b[j].n;
            if (slot[j - b] >= 0)
                p.slot_batch[slot[j - b]] = -1;
        }
        pthread_cond_broadcast(&p.cv);
        pthread_mutex_unlock(&p.mu);
        b = e;
    }
    if (started) { /* stop it where this gave up, and wait */
        pthread_mutex_lock(&p.mu);
        while (!rc && p.ready < p.nbatch && !p.rc) /* the last hashes */
            pthread_cond_wait(&p.cv, &p.mu);
        if (!rc && p.ready < p.nbatch)
            rc = p.rc;
        p.stop = 1;
        pthread_cond_broadcast(&p.cv);
        pthread_mutex_unlock(&p.mu);
        pthread_join(tid, NULL);
    }
    pthread_mutex_destroy(&p.mu);
    pthread_cond_destroy(&p.cv);
    fb__staging_free(&bounce);
    free(p.b);
    close(dfd);
    if (st) {
        st->gather_cpu_ns = p.cpu_ns;
        if (!rc)
            st->direct_bytes = sent_as_is;
    }
    return rc;
#else
    (void)path, (void)fd, (void)ck, (void)from_staging, (void)hash;
    (void)data_off, (void)bytes;
    return 1;
#endif
}
