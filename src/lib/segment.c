/*
 * segment.c -- create, map, read and clean the per-rank shared-memory
 * segments described in segment.h.
 */
#include "lib/segment.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"
#include "firebreak/firebreak.h"

#define SHM_DIR "/dev/shm"

struct fb__seg {
    void *base;
    size_t size;
    int writable;
};

static int valid_job_id(const char *job)
{
    size_t n = strlen(job);
    if (n == 0 || n > 48)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = job[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

int fb__seg_name(char *name, size_t size, const char *job_id, int attempt,
                 int rank)
{
    if (!job_id || !valid_job_id(job_id) || attempt < 0 || rank < 0)
        return -EINVAL;
    return fb__fmt(name, size, "/fb.%s.%d.%d", job_id, attempt, rank);
}

static uint32_t round_pow2(uint32_t v)
{
    uint32_t p = 1;
    while (p < v)
        p <<= 1;
    return p;
}

int fb__seg_create(fb__seg **out, const fb__seg_create_args *a)
{
    char name[FB__SEG_NAME_MAX];
    int rc = fb__seg_name(name, sizeof name, a->job_id, a->attempt, a->rank);
    if (rc)
        return rc;
    uint32_t cap = a->fr_capacity ? a->fr_capacity : FB__SEG_FR_DEFAULT_CAPACITY;
    if (cap > FB__SEG_FR_MAX_CAPACITY)
        cap = FB__SEG_FR_MAX_CAPACITY;
    cap = round_pow2(cap);
    size_t report_off = FB__SEG_HEADER_SIZE;
    size_t fr_off = report_off + FB__SEG_REPORT_CAPACITY * sizeof(fb__seg_report);
    size_t total = fr_off + (size_t)cap * FB__SEG_FR_ENTRY_SIZE;

    /* A leftover of the same name can only come from a rank of this very
     * attempt that died and was relaunched by hand: replace it. */
    shm_unlink(name);
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    if (ftruncate(fd, (off_t)total)) {
        rc = -errno;
        close(fd);
        shm_unlink(name);
        return rc;
    }
    void *base = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    rc = -errno;
    close(fd);
    if (base == MAP_FAILED) {
        shm_unlink(name);
        return rc;
    }
    fb__seg *seg = calloc(1, sizeof *seg);
    if (!seg) {
        munmap(base, total);
        shm_unlink(name);
        return -ENOMEM;
    }
    seg->base = base;
    seg->size = total;
    seg->writable = 1;

    fb__seg_header *h = base;
    h->version_major = FB__SEG_VERSION_MAJOR;
    h->version_minor = FB__SEG_VERSION_MINOR;
    h->total_size = total;
    h->header_size = FB__SEG_HEADER_SIZE;
    h->report_offset = (uint32_t)report_off;
    h->report_capacity = FB__SEG_REPORT_CAPACITY;
    h->fr_entry_size = FB__SEG_FR_ENTRY_SIZE;
    h->fr_offset = fr_off;
    h->fr_capacity = cap;
    h->pid = (int32_t)getpid();
    h->rank = a->rank;
    h->world_size = a->world_size;
    h->local_rank = a->local_rank;
    h->attempt = a->attempt;
    h->supervisor_pid = a->supervisor_pid;
    h->created_wall_ns = fb__wall_ns();
    h->created_mono_ns = fb__now_ns();
    snprintf(h->job_id, sizeof h->job_id, "%s", a->job_id);
    gethostname(h->hostname, sizeof h->hostname - 1);
    atomic_store_explicit(&h->phase, FB_PHASE_INIT, memory_order_relaxed);
    atomic_store_explicit(&h->heartbeat_mono_ns, h->created_mono_ns,
                          memory_order_relaxed);
    atomic_store_explicit(&h->heartbeat_wall_ns, h->created_wall_ns,
                          memory_order_relaxed);
    atomic_store_explicit(&h->phase_since_mono_ns, h->created_mono_ns,
                          memory_order_relaxed);
    atomic_store_explicit(&h->magic, FB__SEG_MAGIC, memory_order_release);
    *out = seg;
    return 0;
}

int fb__seg_open(fb__seg **out, const char *name_or_path)
{
    char path[PATH_MAX];
    int rc;
    if (name_or_path[0] == '/' && strchr(name_or_path + 1, '/') == NULL)
        rc = fb__fmt(path, sizeof path, SHM_DIR "%s", name_or_path);
    else
        rc = fb__fmt(path, sizeof path, "%s", name_or_path);
    if (rc)
        return rc;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct stat st;
    if (fstat(fd, &st)) {
        rc = -errno;
        close(fd);
        return rc;
    }
    if ((size_t)st.st_size < FB__SEG_HEADER_SIZE) {
        close(fd);
        return st.st_size == 0 ? -ENOENT : FB_EFORMAT;
    }
    size_t size = (size_t)st.st_size;
    void *base = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    rc = -errno;
    close(fd);
    if (base == MAP_FAILED)
        return rc;
    const fb__seg_header *h = base;
    rc = 0;
    if (atomic_load_explicit(&((fb__seg_header *)base)->magic,
                             memory_order_acquire) != FB__SEG_MAGIC)
        rc = -ENOENT; /* not initialized yet, or not a segment */
    else if (h->version_major != FB__SEG_VERSION_MAJOR)
        rc = FB_EVERSION;
    else if (h->total_size != size || h->header_size < sizeof(fb__seg_header) ||
             h->report_offset < h->header_size ||
             (uint64_t)h->report_offset +
                     (uint64_t)h->report_capacity * sizeof(fb__seg_report) > size ||
             h->fr_offset > size || h->fr_entry_size == 0 ||
             h->fr_capacity > FB__SEG_FR_MAX_CAPACITY ||
             (h->fr_capacity & (h->fr_capacity - 1)) != 0 ||
             h->fr_offset + (uint64_t)h->fr_capacity * h->fr_entry_size > size)
        rc = FB_EFORMAT;
    if (rc) {
        munmap(base, size);
        return rc;
    }
    fb__seg *seg = calloc(1, sizeof *seg);
    if (!seg) {
        munmap(base, size);
        return -ENOMEM;
    }
    seg->base = base;
    seg->size = size;
    *out = seg;
    return 0;
}

void fb__seg_close(fb__seg *seg)
{
    if (!seg)
        return;
    munmap(seg->base, seg->size);
    free(seg);
}

fb__seg_header *fb__seg_hdr(const fb__seg *seg)
{
    return seg ? (fb__seg_header *)seg->base : NULL;
}

void *fb__seg_base(const fb__seg *seg)
{
    return seg ? seg->base : NULL;
}

size_t fb__seg_size(const fb__seg *seg)
{
    return seg ? seg->size : 0;
}

static fb__seg_report *report_slot(const fb__seg *seg, uint64_t idx)
{
    fb__seg_header *h = seg->base;
    fb__seg_report *r = (fb__seg_report *)((char *)seg->base + h->report_offset);
    return &r[idx % h->report_capacity];
}

void fb__seg_append_report(fb__seg *seg, fb__report_kind kind, int32_t code,
                    uint64_t step, uint64_t bytes, uint64_t value1,
                    uint64_t value2, const char *text)
{
    if (!seg || !seg->writable)
        return;
    fb__seg_header *h = seg->base;
    uint64_t idx = atomic_fetch_add_explicit(&h->report_head, 1,
                                             memory_order_relaxed);
    fb__seg_report *r = report_slot(seg, idx);
    /* Mark the slot as being rewritten before touching its fields. */
    atomic_store_explicit(&r->seq, 0, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    r->kind = (uint32_t)kind;
    r->code = code;
    r->step = step;
    r->bytes = bytes;
    r->value1 = value1;
    r->value2 = value2;
    r->wall_ns = fb__wall_ns();
    snprintf(r->text, sizeof r->text, "%s", text ? text : "");
    atomic_store_explicit(&r->seq, idx + 1, memory_order_release);
}

int fb__seg_read_report(const fb__seg *seg, uint64_t idx, fb__seg_report *out)
{
    fb__seg_header *h = seg->base;
    uint64_t head = atomic_load_explicit(&h->report_head, memory_order_acquire);
    if (idx >= head)
        return 0;
    if (head - idx > h->report_capacity)
        return -1;
    fb__seg_report *r = report_slot(seg, idx);
    uint64_t s1 = atomic_load_explicit(&r->seq, memory_order_acquire);
    if (s1 == 0)
        return 0; /* being written; try again on the next poll */
    if (s1 != idx + 1)
        return s1 > idx + 1 ? -1 : 0;
    out->kind = r->kind;
    out->code = r->code;
    out->step = r->step;
    out->bytes = r->bytes;
    out->value1 = r->value1;
    out->value2 = r->value2;
    out->wall_ns = r->wall_ns;
    memcpy(out->text, r->text, sizeof out->text);
    out->text[sizeof out->text - 1] = '\0';
    atomic_thread_fence(memory_order_acquire);
    uint64_t s2 = atomic_load_explicit(&r->seq, memory_order_relaxed);
    if (s2 != s1)
        return s2 == 0 ? 0 : -1;
    atomic_store_explicit(&out->seq, s1, memory_order_relaxed);
    return 1;
}

int fb__seg_dump(const fb__seg *seg, const char *path)
{
    /* Atomic (temporary name + rename) but not fsynced: the supervisor takes
     * these snapshots on the restart path, where two fsyncs per rank would
     * cost more than the whole relaunch; the page cache writes them soon. */
    char tmp[PATH_MAX];
    if (fb__fmt(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid()))
        return -ENAMETOOLONG;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    int rc = fb__write_all(fd, seg->base, seg->size);
    if (close(fd) && !rc)
        rc = -errno;
    if (!rc && rename(tmp, path))
        rc = -errno;
    if (rc)
        unlink(tmp);
    return rc;
}

/* Parse "fb.<job>.<attempt>.<rank>" into its job id. */
static int parse_seg_filename(const char *fn, char *job, size_t job_size,
                              int *attempt, int *rank)
{
    if (strncmp(fn, "fb.", 3) != 0)
        return -1;
    const char *j = fn + 3;
    const char *d1 = strchr(j, '.');
    if (!d1 || (size_t)(d1 - j) >= job_size)
        return -1;
    char *end;
    long a = strtol(d1 + 1, &end, 10);
    if (*end != '.')
        return -1;
    long r = strtol(end + 1, &end, 10);
    if (*end)
        return -1;
    memcpy(job, j, (size_t)(d1 - j));
    job[d1 - j] = '\0';
    *attempt = (int)a;
    *rank = (int)r;
    return 0;
}

static int supervisor_alive(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 1; /* cannot tell: leave it */
    fb__seg_header h;
    ssize_t n = read(fd, &h, sizeof h);
    close(fd);
    if (n != (ssize_t)sizeof h || h.magic != FB__SEG_MAGIC)
        return 0; /* never initialized: its creator died mid-way */
    if (h.supervisor_pid <= 0) {
        /* Not started by a supervisor: alive while the rank is. */
        return h.pid > 0 && (kill(h.pid, 0) == 0 || errno == EPERM);
    }
    return kill(h.supervisor_pid, 0) == 0 || errno == EPERM;
}

/* Is any segment of `job` left in /dev/shm? */
static int job_has_segments(const char *job)
{
    DIR *d = opendir(SHM_DIR);
    if (!d)
        return 0;
    char prefix[80];
    snprintf(prefix, sizeof prefix, "fb.%s.", job);
    size_t pl = strlen(prefix);
    int found = 0;
    struct dirent *e;
    while (!found && (e = readdir(d)))
        found = !strncmp(e->d_name, prefix, pl) &&
                strcmp(e->d_name + pl, "ompi") != 0;
    closedir(d);
    return found;
}

/* "fb.<job>.ompi": Open MPI's shared memory of a job (supervisor/launch.c).
 * Stale when old and the job has no segment left. */
static void cleanup_mpi_dir(const char *name, const char *job_id, int only_stale)
{
    size_t n = strlen(name);
    if (strncmp(name, "fb.", 3) != 0 || n < 9 || strcmp(name + n - 5, ".ompi") != 0)
        return;
    char job[64];
    if (n - 8 >= sizeof job)
        return;
    memcpy(job, name + 3, n - 8);
    job[n - 8] = '\0';
    if (job_id && strcmp(job, job_id) != 0)
        return;
    char path[PATH_MAX];
    if (fb__fmt(path, sizeof path, SHM_DIR "/%s", name))
        return;
    if (only_stale) {
        struct stat st;
        if (stat(path, &st) || time(NULL) - st.st_mtime < 5 || job_has_segments(job))
            return;
    }
    fb__rm_rf(path);
}

static int cleanup(const char *job_id, int attempt, int only_stale)
{
    DIR *d = opendir(SHM_DIR);
    if (!d)
        return 0;
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        char job[64];
        int a, r;
        if (parse_seg_filename(e->d_name, job, sizeof job, &a, &r)) {
            if (attempt < 0)
                cleanup_mpi_dir(e->d_name, job_id, only_stale);
            continue;
        }
        if (job_id && strcmp(job, job_id) != 0)
            continue;
        if (attempt >= 0 && a != attempt)
            continue;
        char path[PATH_MAX];
        if (fb__fmt(path, sizeof path, SHM_DIR "/%s", e->d_name))
            continue;
        if (only_stale) {
            struct stat st;
            /* Young segments may belong to a rank still initializing. */
            if (stat(path, &st) || time(NULL) - st.st_mtime < 5)
                continue;
            if (supervisor_alive(path))
                continue;
        }
        if (unlink(path) == 0)
            removed++;
    }
    closedir(d);
    return removed;
}

int fb__seg_cleanup(const char *job_id)
{
    return job_id ? cleanup(job_id, -1, 0) : cleanup(NULL, -1, 1);
}

int fb__seg_remove_job(const char *job_id, int attempt)
{
    return cleanup(job_id, attempt, 0);
}
