/*
 * segment.c -- create, map, read and clean the per-rank shared-memory
 * segments described in segment.h.  Reader mappings are guarded against
 * a rank that truncates its file (segment_guard.c).
 */
#include "lib/segment.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/futex.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"
#include "firebreak/firebreak.h"
#include "lib/segment_guard.h"

#define SHM_DIR "/dev/shm"

/* Bytes of the header written once at creation, before the magic. */
#define IDENT_BYTES offsetof(fb__seg_header, phase)

struct fb__seg {
    void *base;
    size_t size;               /* mapped bytes: fstat at attach          */
    int writable;
    int guarded;               /* reader: registered with the SIGBUS guard */
    uint32_t guard_slot;
    fb__seg_identity id;       /* reader: copied once, bounded           */
    unsigned char ident_raw[IDENT_BYTES]; /* the identity as attached     */
    uint64_t report_head_seen, fr_head_seen; /* fb__seg_check's last look */
    dev_t dev;                 /* reader: the file attached              */
    ino_t ino;
    uint64_t sdc_head_seen;
    uint64_t sdc_offset_raw;   /* minor 2 layout words as attached       */
    uint32_t sdc_capacity_raw;
    int lock_fd;               /* writer: its file, a shared flock held  */
};

size_t fb__job_id_span(const char *s)
{
    size_t n = 0;
    for (; s[n] && s[n] != '.'; n++) {
        char c = s[n];
        if (n == FB__JOB_ID_MAX || !((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                                     (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return 0;
    }
    return n;
}

int fb__job_id_ok(const char *job)
{
    size_t n = job ? fb__job_id_span(job) : 0;
    return n > 0 && job[n] == '\0';
}

int fb__seg_name(char *name, size_t size, const char *job_id, int attempt,
                 int rank)
{
    if (!fb__job_id_ok(job_id) || attempt < 0 || rank < 0)
        return -EINVAL;
    return fb__fmt(name, size, "/fb.%s.%d.%d", job_id, attempt, rank);
}

static int copy_identity(fb__seg *seg);
static int seg_truncated(const fb__seg *seg, uint64_t *offset);

static uint32_t round_pow2(uint32_t v)
{
    uint32_t p = 1;
    while (p < v)
        p <<= 1;
    return p;
}

/* A file under our segment's name: ours (a leftover of this very attempt,
 * relaunched by hand) when a regular file of our uid with no group/other
 * bits; then it is removed.  FB_ENOTOURS otherwise, *taken filled. */
static int remove_leftover(const char *name, struct stat *taken)
{
    char path[PATH_MAX];
    int rc = fb__fmt(path, sizeof path, SHM_DIR "%s", name);
    if (rc)
        return rc;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return errno == ELOOP ? FB_ENOTOURS : -errno;
    struct stat st;
    if (fstat(fd, &st)) {
        rc = -errno;
        goto out;
    }
    if (taken)
        *taken = st;
    if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077)) {
        rc = FB_ENOTOURS;
        goto out;
    }
    if (shm_unlink(name) && errno != ENOENT)
        rc = -errno;
out:
    close(fd);
    return rc;
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
    size_t sdc_off = fr_off + (size_t)cap * FB__SEG_FR_ENTRY_SIZE;
    size_t total = sdc_off + (size_t)FB__SEG_SDC_CAPACITY * sizeof(fb__seg_sdc);

    /* Exclusive: never write into a file someone else put under the name.
     * /dev/shm is world-writable, and job ids are readable in <run>/job. */
    int flags = O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
    int fd = shm_open(name, flags, 0600);
    if (fd < 0 && errno == EEXIST) {
        rc = remove_leftover(name, a->taken);
        if (rc)
            return rc;
        fd = shm_open(name, flags, 0600);
    }
    if (fd < 0)
        return -errno;
    /* The umask may have cleared bits, never added any; be explicit. */
    if (fchmod(fd, 0600) || ftruncate(fd, (off_t)total)) {
        rc = -errno;
        close(fd);
        shm_unlink(name);
        return rc;
    }
    void *base = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    rc = -errno;
    fb__seg *seg = base == MAP_FAILED ? NULL : calloc(1, sizeof *seg);
    if (!seg) {
        close(fd);
        if (base != MAP_FAILED)
            munmap(base, total);
        shm_unlink(name);
        return base == MAP_FAILED ? rc : -ENOMEM;
    }
    /* The descriptor stays, with a shared flock: how a stale sweep in
     * another pid namespace, to which our pids mean nothing, sees the
     * segment in use (is_stale).  Not waited for: a sweep holds its test
     * lock for a moment only. */
    seg->lock_fd = fd;
    for (int t = 0; t < 3 && flock(fd, LOCK_SH | LOCK_NB); t++) {
        struct timespec ts = {0, 1000000L};
        nanosleep(&ts, NULL);
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
    h->sdc_offset = sdc_off;
    h->sdc_capacity = FB__SEG_SDC_CAPACITY;
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
    copy_identity(seg); /* our own, valid by construction */
    *out = seg;
    return 0;
}

/* Copy the identity once and check it against the mapped size.  Every
 * later use of an offset or a capacity goes through these copies, so a
 * rank rewriting its header after this cannot move a reader out of
 * bounds. */
static int copy_identity(fb__seg *seg)
{
    const fb__seg_header *h = seg->base;
    uint64_t size = seg->size;
    memcpy(seg->ident_raw, seg->base, IDENT_BYTES);
    fb__seg_header c; /* a private copy: nothing below re-reads the map */
    memset(&c, 0, sizeof c);
    memcpy(&c, seg->ident_raw, IDENT_BYTES);
    if (atomic_load_explicit(&((fb__seg_header *)h)->magic,
                             memory_order_acquire) != FB__SEG_MAGIC ||
        c.magic != FB__SEG_MAGIC)
        return -ENOENT; /* not initialized yet, or not a segment */
    if (c.version_major != FB__SEG_VERSION_MAJOR)
        return FB_EVERSION;
    if (c.total_size != size || c.header_size < sizeof(fb__seg_header) ||
        c.header_size > size || c.report_offset < c.header_size ||
        c.report_capacity == 0 ||
        (uint64_t)c.report_offset +
                (uint64_t)c.report_capacity * sizeof(fb__seg_report) > size ||
        c.report_offset % _Alignof(fb__seg_report) != 0 ||
        c.fr_offset > size || c.fr_entry_size == 0 ||
        c.fr_offset % 8 != 0 || c.fr_entry_size % 8 != 0 ||
        c.fr_capacity > FB__SEG_FR_MAX_CAPACITY ||
        (c.fr_capacity & (c.fr_capacity - 1)) != 0 ||
        c.fr_offset + (uint64_t)c.fr_capacity * c.fr_entry_size > size)
        return FB_EFORMAT;
    /* Minor 3's SDC ring: after the identity bytes, so read here once. */
    uint64_t sdc_off = 0;
    uint32_t sdc_cap = 0;
    if (c.version_minor >= 3 && c.header_size >= sizeof(fb__seg_header)) {
        sdc_off = h->sdc_offset;
        sdc_cap = h->sdc_capacity;
    }
    seg->sdc_offset_raw = sdc_off;
    seg->sdc_capacity_raw = sdc_cap;
    if (sdc_cap != 0 &&
        ((sdc_cap & (sdc_cap - 1)) != 0 || sdc_cap > (1u << 20) ||
         sdc_off % 8 != 0 || sdc_off < c.header_size || sdc_off > size ||
         (size - sdc_off) / sizeof(fb__seg_sdc) < sdc_cap))
        return FB_EFORMAT;
    fb__seg_identity *id = &seg->id;
    id->version_major = c.version_major;
    id->version_minor = c.version_minor;
    id->total_size = c.total_size;
    id->header_size = c.header_size;
    id->report_offset = c.report_offset;
    id->report_capacity = c.report_capacity;
    id->fr_entry_size = c.fr_entry_size;
    id->fr_offset = c.fr_offset;
    id->fr_capacity = c.fr_capacity;
    id->sdc_offset = sdc_off;
    id->sdc_capacity = sdc_cap;
    id->pid = c.pid;
    id->rank = c.rank;
    id->world_size = c.world_size;
    id->local_rank = c.local_rank;
    id->attempt = c.attempt;
    id->supervisor_pid = c.supervisor_pid;
    id->created_wall_ns = c.created_wall_ns;
    id->created_mono_ns = c.created_mono_ns;
    char text[sizeof c.job_id + 1];
    memcpy(text, c.job_id, sizeof c.job_id);
    text[sizeof c.job_id] = '\0';
    fb__safe_text(id->job_id, sizeof id->job_id, text);
    memcpy(text, c.hostname, sizeof c.hostname);
    text[sizeof c.hostname] = '\0';
    fb__safe_text(id->hostname, sizeof id->hostname, text);
    return 0;
}

/* A segment's name ("/fb.<job>.<attempt>.<rank>": in /dev/shm) or a path. */
static int seg_path(char *path, size_t size, const char *name_or_path)
{
    if (name_or_path[0] == '/' && strchr(name_or_path + 1, '/') == NULL)
        return fb__fmt(path, size, SHM_DIR "%s", name_or_path);
    return fb__fmt(path, size, "%s", name_or_path);
}

int fb__seg_open_as(fb__seg **out, const char *name_or_path, uid_t uid,
                    struct stat *st_out)
{
    char path[PATH_MAX];
    fb__seg *seg = NULL;
    void *base = MAP_FAILED;
    size_t size = 0;
    int fd = -1, rc;
    rc = seg_path(path, sizeof path, name_or_path);
    if (rc)
        goto out;
    /* O_NOFOLLOW: a symlink planted under the name is refused (ELOOP).
     * A file the user named (any owner) may be a link to a dump. */
    fd = fb__open_regular(path, uid == FB__SEG_ANY_OWNER ? 0 : O_NOFOLLOW);
    if (fd < 0) {
        rc = fd == -ELOOP ? FB_ENOTOURS : fd;
        goto out;
    }
    struct stat st;
    if (fstat(fd, &st)) {
        rc = -errno;
        goto out;
    }
    if (st_out)
        *st_out = st;
    if (uid != FB__SEG_ANY_OWNER && (st.st_uid != uid || (st.st_mode & 077))) {
        rc = FB_ENOTOURS;
        goto out;
    }
    if (st.st_size < FB__SEG_HEADER_SIZE) {
        rc = st.st_size == 0 ? -ENOENT : FB_EFORMAT;
        goto out;
    }
    if ((uint64_t)st.st_size > SIZE_MAX / 2) {
        rc = FB_EFORMAT;
        goto out;
    }
    size = (size_t)st.st_size;
    seg = calloc(1, sizeof *seg);
    if (!seg) {
        rc = -ENOMEM;
        goto out;
    }
    seg->lock_fd = -1;
    base = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        rc = -errno;
        goto out;
    }
    seg->base = base;
    seg->size = size;
    /* Guarded before the first load: the rank may shrink the file at any
     * time, also between the fstat above and the copy below. */
    rc = fb__seg_guard_add(base, size, &seg->guard_slot);
    if (rc)
        goto out;
    seg->guarded = 1;
    rc = copy_identity(seg);
    if (rc == 0 && seg_truncated(seg, NULL))
        rc = FB_EFORMAT; /* shrank since fstat: its size does not fit */
    if (rc)
        goto out;
    seg->dev = st.st_dev;
    seg->ino = st.st_ino;
    seg->id.owner_uid = st.st_uid;
    seg->id.mode = (uint32_t)(st.st_mode & 07777);
    /* Heads are judged by how they move from here on. */
    seg->report_head_seen = atomic_load_explicit(&((fb__seg_header *)base)->report_head,
                                                 memory_order_acquire);
    seg->fr_head_seen = atomic_load_explicit(&((fb__seg_header *)base)->fr_head,
                                             memory_order_acquire);
    if (seg->id.sdc_capacity)
        seg->sdc_head_seen = atomic_load_explicit(
            &((fb__seg_header *)base)->sdc_head, memory_order_acquire);
    *out = seg;
    seg = NULL;
    base = MAP_FAILED;
out:
    if (seg && seg->guarded)
        fb__seg_guard_remove(seg->guard_slot);
    free(seg);
    if (base != MAP_FAILED)
        munmap(base, size);
    if (fd >= 0)
        close(fd);
    return rc;
}

int fb__seg_open(fb__seg **out, const char *name_or_path)
{
    return fb__seg_open_as(out, name_or_path, geteuid(), NULL);
}

void fb__seg_close(fb__seg *seg)
{
    if (!seg)
        return;
    if (seg->guarded)
        fb__seg_guard_remove(seg->guard_slot);
    munmap(seg->base, seg->size);
    if (seg->writable && seg->lock_fd >= 0)
        close(seg->lock_fd);
    free(seg);
}

/* Has the file shrunk under a reader's mapping?  A truncation loses a
 * suffix of the file, so loading from the last page is enough to find
 * one: when that page is gone, the guard zero-fills it and records it. */
static int seg_truncated(const fb__seg *seg, uint64_t *offset)
{
    if (!seg->guarded)
        return 0;
    (void)*(const volatile unsigned char *)((const char *)seg->base + seg->size - 1);
    return fb__seg_guard_lost(seg->guard_slot, offset);
}

/* After a truncation was found: load from pages below the lowest lost one,
 * halving the range each time, so the guard's record (and the dump's
 * zeros) start where the file now ends, not where a reader happened to
 * look first.  Pages below the lost one are still the file's, so a load
 * either succeeds or faults and moves the record down: at most about 17
 * faults for the largest segment, once. */
static void find_file_end(const fb__seg *seg)
{
    long ps = sysconf(_SC_PAGESIZE);
    uint64_t page = ps > 0 ? (uint64_t)ps : 4096, lost = 0;
    if (!fb__seg_guard_lost(seg->guard_slot, &lost))
        return;
    uint64_t lo = 0, hi = lost / page; /* the first lost page is in [lo, hi] */
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        (void)*(const volatile unsigned char *)((const char *)seg->base + mid * page);
        fb__seg_guard_lost(seg->guard_slot, &lost);
        if (lost <= mid * page)
            hi = mid;
        else
            lo = mid + 1;
    }
}

int fb__seg_truncated(const fb__seg *seg, uint64_t *offset)
{
    return seg ? seg_truncated(seg, offset) : 0;
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

const fb__seg_identity *fb__seg_ident(const fb__seg *seg)
{
    return seg ? &seg->id : NULL;
}

/* A head may only move forward, and not absurdly far between two looks. */
static int head_ok(uint64_t head, uint64_t *seen)
{
    if (head < *seen || head - *seen > FB__SEG_HEAD_JUMP_MAX)
        return 0;
    *seen = head;
    return 1;
}

int fb__seg_check(fb__seg *seg, char *why, size_t why_size)
{
    fb__seg_header *h = seg->base;
    const char *field = NULL;
    unsigned long long value = 0;
    uint64_t rh = atomic_load_explicit(&h->report_head, memory_order_acquire);
    uint64_t fh = atomic_load_explicit(&h->fr_head, memory_order_acquire);
    uint64_t sh = 0, sdc_off = 0;
    uint32_t sdc_cap = 0;
    if (seg->id.version_minor >= 3) {
        sh = atomic_load_explicit(&h->sdc_head, memory_order_acquire);
        sdc_off = *(volatile uint64_t *)&h->sdc_offset;
        sdc_cap = *(volatile uint32_t *)&h->sdc_capacity;
    }
    uint32_t end_kind = atomic_load_explicit(&h->end_kind, memory_order_relaxed);
    uint32_t inject_kind = atomic_load_explicit(&h->inject_kind, memory_order_relaxed);
    uint64_t lost_at = 0;
    /* After the loads above: any of them may have found the file shrunk,
     * and then they read zeros, which would only say "magic". */
    if (seg_truncated(seg, &lost_at)) {
        find_file_end(seg);
        fb__seg_guard_lost(seg->guard_slot, &lost_at);
        if (why && why_size)
            snprintf(why, why_size, "the file was truncated: its pages from "
                     "offset %llu of %zu bytes are gone",
                     (unsigned long long)lost_at, seg->size);
        return FB_EFORMAT;
    }
    if (atomic_load_explicit(&h->magic, memory_order_acquire) != FB__SEG_MAGIC) {
        field = "magic";
    } else if (memcmp(seg->ident_raw, seg->base, IDENT_BYTES) != 0) {
        field = "identity (offsets, sizes, rank or pid)";
    } else if (!head_ok(rh, &seg->report_head_seen)) {
        field = "report_head";
        value = rh;
    } else if (!head_ok(fh, &seg->fr_head_seen)) {
        field = "fr_head";
        value = fh;
    } else if (sdc_off != seg->sdc_offset_raw || sdc_cap != seg->sdc_capacity_raw) {
        field = "sdc_offset or sdc_capacity";
    } else if (seg->id.sdc_capacity && !head_ok(sh, &seg->sdc_head_seen)) {
        field = "sdc_head";
        value = sh;
    } else if (end_kind > FB__END_FINALIZED) {
        field = "end_kind";
        value = end_kind;
    } else if (inject_kind > FB__INJECT_LAST_) {
        field = "inject_kind";
        value = inject_kind;
    }
    if (!field)
        return 0;
    if (why && why_size) {
        if (value)
            snprintf(why, why_size, "field %s changed to %llu", field, value);
        else
            snprintf(why, why_size, "field %s was overwritten", field);
    }
    return FB_EFORMAT;
}

const void *fb__seg_fr_area(const fb__seg *seg, uint32_t *capacity)
{
    const fb__seg_identity *id = &seg->id;
    if (id->fr_capacity == 0 || id->fr_entry_size != FB__SEG_FR_ENTRY_SIZE) {
        *capacity = 0;
        return NULL;
    }
    *capacity = id->fr_capacity;
    return (const char *)seg->base + id->fr_offset;
}

/* Writer side: the rank's own layout, fixed at creation. */
static fb__seg_report *report_slot(const fb__seg *seg, uint64_t idx)
{
    fb__seg_report *r = (fb__seg_report *)((char *)seg->base + FB__SEG_HEADER_SIZE);
    return &r[idx % FB__SEG_REPORT_CAPACITY];
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

/* Copy ring slot `slot` (its first word is its seq: index + 1, 0 while
 * being written) for index idx into `copy`: 1 copied whole, 0 not written
 * yet or being rewritten (try later), -1 overwritten (lost). */
static int copy_slot(const void *slot, size_t size, uint64_t idx, void *copy)
{
    _Atomic uint64_t *seq = (_Atomic uint64_t *)slot;
    uint64_t s1 = atomic_load_explicit(seq, memory_order_acquire);
    if (s1 != idx + 1)
        return s1 > idx + 1 ? -1 : 0;
    memcpy(copy, slot, size);
    atomic_thread_fence(memory_order_acquire);
    uint64_t s2 = atomic_load_explicit(seq, memory_order_relaxed);
    if (s2 != s1)
        return s2 == 0 ? 0 : -1;
    return 1;
}

int fb__seg_read_report(const fb__seg *seg, uint64_t idx, fb__seg_report *out)
{
    fb__seg_header *h = seg->base;
    uint64_t cap = seg->id.report_capacity;
    uint64_t head = atomic_load_explicit(&h->report_head, memory_order_acquire);
    if (idx >= head)
        return 0;
    if (head - idx > cap)
        return -1;
    fb__seg_report *ring = (fb__seg_report *)((char *)seg->base + seg->id.report_offset);
    fb__seg_report c;
    int got = copy_slot(&ring[idx % cap], sizeof c, idx, &c);
    if (got != 1)
        return got;
    /* Only the private copy is looked at from here on. */
    out->kind = c.kind;
    out->code = c.code;
    out->step = c.step;
    out->bytes = c.bytes;
    out->value1 = c.value1;
    out->value2 = c.value2;
    out->wall_ns = c.wall_ns;
    c.text[sizeof c.text - 1] = '\0';
    fb__safe_text(out->text, sizeof out->text, c.text);
    atomic_store_explicit(&out->seq, idx + 1, memory_order_relaxed);
    return 1;
}

uint64_t fb__seg_report_next(const fb__seg *seg, uint64_t idx)
{
    fb__seg_header *h = seg->base;
    uint64_t head = atomic_load_explicit(&h->report_head, memory_order_acquire);
    uint64_t cap = seg->id.report_capacity;
    if (head > idx + 1 && head - (idx + 1) > cap)
        return head - cap;
    return idx + 1;
}

/* The end of a dump: close the temporary file and rename it into place,
 * or remove it when anything failed (rc, or the close). */
/* Open the temporary file a dump to `path` is written to (tmp: its name,
 * renamed by dump_finish); the fd, or -errno. */
/* The snapshot's temporary file: never one a rank planted at a name it
 * could guess (a FIFO there blocked the supervisor's open for good). */
static int dump_open(const char *path, char *tmp, size_t tmp_size)
{
    return fb__open_tmp_beside(path, tmp, tmp_size, 0600);
}

static int dump_finish(int fd, const char *tmp, const char *path, int rc)
{
    if (close(fd) && !rc)
        rc = -errno;
    if (!rc && rename(tmp, path))
        rc = -errno;
    if (rc)
        unlink(tmp);
    return rc;
}

/* Copy [off, off + n) of the mapping to fd at the same offset, through a
 * buffer (see fb__seg_dump). */
static int dump_range(const fb__seg *seg, int fd, size_t off, size_t n)
{
    unsigned char buf[16384];
    size_t end = off + n;
    for (; off < end;) {
        size_t k = end - off < sizeof buf ? end - off : sizeof buf;
        memcpy(buf, (const char *)seg->base + off, k);
        size_t done = 0;
        while (done < k) {
            ssize_t w = pwrite(fd, buf + done, k - done, (off_t)(off + done));
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                return w < 0 ? -errno : -EIO;
            done += (size_t)w;
        }
        off += k;
    }
    return 0;
}

/* ---- a sparse dump taken into memory (see segment.h) ---- */

#define SEG_COPY_MAX_RANGES 4096

struct fb__seg_copy {
    size_t size;          /* the dump file's length: the segment's size    */
    int nranges, cap;
    struct seg_range { size_t off, len; } *range;
    size_t nbytes;
    unsigned char *bytes; /* the ranges' bytes, one after the other        */
};

/* Append a range; 0, or -1 when the table is full (or cannot grow). */
static int copy_add(fb__seg_copy *c, size_t off, size_t len)
{
    if (c->nranges == c->cap) {
        int cap = c->cap ? c->cap * 4 : 8;
        if (cap > SEG_COPY_MAX_RANGES)
            return -1;
        struct seg_range *r = realloc(c->range, (size_t)cap * sizeof *r);
        if (!r)
            return -1;
        c->range = r;
        c->cap = cap;
    }
    c->range[c->nranges].off = off;
    c->range[c->nranges].len = len;
    c->nranges++;
    return 0;
}

/* The ranges fb__seg_dump_sparse would write, into c->range: those of the
 * segment's file that hold data, or the whole segment when the file cannot
 * tell (not the one mapped any more) or has more ranges than the table. */
static void copy_ranges(const fb__seg *seg, const char *name, fb__seg_copy *c)
{
    char shm[PATH_MAX];
    int in = -1, whole = 1;
    struct stat st;
    if (seg->guarded && name && !seg_path(shm, sizeof shm, name))
        in = open(shm, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (in >= 0 && !fstat(in, &st) && S_ISREG(st.st_mode) && st.st_dev == seg->dev &&
        st.st_ino == seg->ino) {
        whole = 0;
        size_t off = 0;
        while (!whole && off < seg->size) {
            off_t d = lseek(in, (off_t)off, SEEK_DATA);
            if (d < 0) { /* ENXIO: only a hole is left */
                if (errno != ENXIO)
                    whole = copy_add(c, off, seg->size - off) != 0;
                break;
            }
            if ((size_t)d >= seg->size)
                break;
            off_t h = lseek(in, d, SEEK_HOLE);
            size_t hole = h < 0 || (size_t)h > seg->size ? seg->size : (size_t)h;
            if (hole <= (size_t)d) /* no progress: take the rest */
                hole = seg->size;
            whole = copy_add(c, (size_t)d, hole - (size_t)d) != 0;
            off = hole;
        }
    }
    if (in >= 0)
        close(in);
    if (whole) {
        c->nranges = 0;
        if (copy_add(c, 0, seg->size))
            c->nranges = -1;
    }
}

int fb__seg_dump_sparse(const fb__seg *seg, const char *name, const char *path)
{
    if (!seg->guarded || !name)
        return fb__seg_dump(seg, path);
    /* The bytes always come from our mapping; the file only says where
     * its holes are (never written: zeros, in the dump too).  A file
     * system without SEEK_DATA answers with the whole file as data. */
    fb__seg_copy c = {.size = seg->size};
    copy_ranges(seg, name, &c);
    if (c.nranges < 0)
        return fb__seg_dump(seg, path);
    char tmp[PATH_MAX];
    int fd = dump_open(path, tmp, sizeof tmp);
    if (fd < 0) {
        free(c.range);
        return fd;
    }
    int rc = ftruncate(fd, (off_t)seg->size) ? -errno : 0;
    for (int i = 0; !rc && i < c.nranges; i++)
        rc = dump_range(seg, fd, c.range[i].off, c.range[i].len);
    free(c.range);
    return dump_finish(fd, tmp, path, rc);
}

int fb__seg_copy_take(const fb__seg *seg, const char *name, size_t max_bytes,
                      fb__seg_copy **out)
{
    *out = NULL;
    fb__seg_copy *c = calloc(1, sizeof *c);
    if (!c)
        return -ENOMEM;
    c->size = seg->size;
    copy_ranges(seg, name, c);
    if (c->nranges < 0) {
        fb__seg_copy_free(c);
        return -ENOMEM;
    }
    for (int i = 0; i < c->nranges; i++)
        c->nbytes += c->range[i].len;
    if (c->nbytes > max_bytes) {
        fb__seg_copy_free(c);
        return -E2BIG;
    }
    c->bytes = malloc(c->nbytes ? c->nbytes : 1);
    if (!c->bytes) {
        fb__seg_copy_free(c);
        return -ENOMEM;
    }
    /* Loads from the mapping: pages a truncation took read as zeros under
     * the guard (fb__seg_dump). */
    size_t at = 0;
    for (int i = 0; i < c->nranges; i++) {
        memcpy(c->bytes + at, (const char *)seg->base + c->range[i].off, c->range[i].len);
        at += c->range[i].len;
    }
    *out = c;
    return 0;
}

size_t fb__seg_copy_bytes(const fb__seg_copy *c)
{
    return c ? c->nbytes : 0;
}

int fb__seg_copy_write(const fb__seg_copy *c, const char *path)
{
    char tmp[PATH_MAX];
    int fd = dump_open(path, tmp, sizeof tmp);
    if (fd < 0)
        return fd;
    int rc = ftruncate(fd, (off_t)c->size) ? -errno : 0;
    size_t at = 0;
    for (int i = 0; !rc && i < c->nranges; i++) {
        size_t done = 0, len = c->range[i].len;
        while (!rc && done < len) {
            ssize_t w = pwrite(fd, c->bytes + at + done, len - done,
                               (off_t)(c->range[i].off + done));
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                rc = w < 0 ? -errno : -EIO;
            else
                done += (size_t)w;
        }
        at += len;
    }
    return dump_finish(fd, tmp, path, rc);
}

void fb__seg_copy_free(fb__seg_copy *c)
{
    if (!c)
        return;
    free(c->range);
    free(c->bytes);
    free(c);
}

void fb__seg_append_sdc(fb__seg *seg, uint64_t step, uint64_t hash,
                        uint64_t offset, uint64_t length, uint32_t tensor,
                        uint32_t flags, const char *name)
{
    if (!seg || !seg->writable || !seg->id.sdc_capacity)
        return;
    fb__seg_header *h = seg->base;
    uint64_t idx = atomic_load_explicit(&h->sdc_head, memory_order_relaxed);
    fb__seg_sdc *ring = (fb__seg_sdc *)((char *)seg->base + seg->id.sdc_offset);
    fb__seg_sdc *r = &ring[idx & (seg->id.sdc_capacity - 1)];
    atomic_store_explicit(&r->seq, 0, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    r->step = step;
    r->hash = hash;
    r->offset = offset;
    r->length = length;
    r->tensor = tensor;
    r->flags = flags;
    snprintf(r->name, sizeof r->name, "%s", name ? name : "");
    atomic_store_explicit(&r->seq, idx + 1, memory_order_release);
    atomic_store_explicit(&h->sdc_head, idx + 1, memory_order_release);
}

uint64_t fb__seg_sdc_head(const fb__seg *seg)
{
    if (!seg || !seg->id.sdc_capacity)
        return 0;
    fb__seg_header *h = seg->base;
    return atomic_load_explicit(&h->sdc_head, memory_order_acquire);
}

int fb__seg_read_sdc(const fb__seg *seg, uint64_t idx, fb__seg_sdc *out)
{
    uint64_t cap = seg->id.sdc_capacity;
    if (!cap)
        return 0;
    uint64_t head = fb__seg_sdc_head(seg);
    if (idx >= head)
        return 0;
    if (head - idx > cap)
        return -1;
    const fb__seg_sdc *ring =
        (const fb__seg_sdc *)((const char *)seg->base + seg->id.sdc_offset);
    fb__seg_sdc c;
    int got = copy_slot(&ring[idx & (cap - 1)], sizeof c, idx, &c);
    if (got != 1)
        return got;
    out->step = c.step;
    out->hash = c.hash;
    out->offset = c.offset;
    out->length = c.length;
    out->tensor = c.tensor;
    out->flags = c.flags;
    c.name[sizeof c.name - 1] = '\0';
    fb__safe_text(out->name, sizeof out->name, c.name);
    atomic_store_explicit(&out->seq, idx + 1, memory_order_relaxed);
    return 1;
}

int fb__seg_dump(const fb__seg *seg, const char *path)
{
    /* Atomic (temporary name + rename) but not fsynced: the supervisor takes
     * these snapshots on the restart path, where two fsyncs per rank would
     * cost more than the whole relaunch; the page cache writes them soon. */
    char tmp[PATH_MAX];
    int fd = dump_open(path, tmp, sizeof tmp);
    if (fd < 0)
        return fd;
    int rc = 0;
    if (seg->guarded) {
        /* Through a buffer: our own loads from pages a truncation took are
         * zero-filled by the guard, where write() from the mapping would
         * fail with EFAULT and lose the evidence that is still there. */
        unsigned char buf[16384];
        for (size_t off = 0; !rc && off < seg->size; off += sizeof buf) {
            size_t n = seg->size - off < sizeof buf ? seg->size - off : sizeof buf;
            memcpy(buf, (const char *)seg->base + off, n);
            rc = fb__write_all(fd, buf, n);
        }
    } else {
        rc = fb__write_all(fd, seg->base, seg->size);
    }
    return dump_finish(fd, tmp, path, rc);
}

/* Parse "fb.<job>.<attempt>.<rank>" into its job id. */
static int parse_seg_filename(const char *fn, char *job, size_t job_size,
                              int *attempt, int *rank)
{
    if (strncmp(fn, "fb.", 3) != 0)
        return -1;
    const char *j = fn + 3;
    size_t n = fb__job_id_span(j);
    const char *d1 = j + n;
    if (!n || *d1 != '.' || n >= job_size)
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

/* Whether a segment of ours is stale: its supervisor (or, for a rank run
 * without one, the rank) is gone.  A header not written yet belongs to a
 * rank still initializing while the file is young (under 5 s), to a
 * creator that died mid-way when older.  The age rule applies only to
 * that case: a killed supervisor's segments go at the next run's start,
 * however soon it comes. */
static int is_stale(const char *path, const struct stat *st)
{
    int fd = fb__open_regular(path, O_NOFOLLOW);
    if (fd < 0)
        return 0; /* cannot tell: leave it */
    fb__seg_header h;
    ssize_t n = read(fd, &h, sizeof h);
    int held = fb__lock_held_fd(fd); /* its rank lives, in any pid namespace */
    close(fd);
    if (held)
        return 0;
    if (n != (ssize_t)sizeof h || h.magic != FB__SEG_MAGIC)
        return time(NULL) - st->st_mtime >= 5;
    pid_t owner = h.supervisor_pid > 0 ? (pid_t)h.supervisor_pid : (pid_t)h.pid;
    return owner <= 0 || (kill(owner, 0) != 0 && errno == ESRCH);
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

/* Stale when the supervisor that wrote its FB__SEG_MPI_DIR_PID file is
 * gone; without that file (an older firebreak), when old and the job has
 * no segment left. */
static int mpi_dir_stale(const char *path, const struct stat *st, const char *job)
{
    char pidfile[PATH_MAX];
    int gone = fb__fmt(pidfile, sizeof pidfile, "%s/" FB__SEG_MPI_DIR_PID, path)
                   ? -1 : fb__pid_file_gone(pidfile);
    if (gone >= 0)
        return gone;
    return time(NULL) - st->st_mtime >= 5 && !job_has_segments(job);
}

/* "fb.<job>.ompi": Open MPI's shared memory of a job (supervisor/launch.c). */
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
    struct stat st;
    if (lstat(path, &st) || !S_ISDIR(st.st_mode) || st.st_uid != geteuid())
        return; /* not ours: not ours to remove */
    if (only_stale && !mpi_dir_stale(path, &st, job))
        return;
    fb__rm_rf(path);
}

/* attempt < 0: every attempt; below: the attempts before `attempt`. */
static int cleanup(const char *job_id, int attempt, int below, int only_stale)
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
        if (attempt >= 0 && (below ? a >= attempt : a != attempt))
            continue;
        char path[PATH_MAX];
        if (fb__fmt(path, sizeof path, SHM_DIR "/%s", e->d_name))
            continue;
        /* Only our own regular files: another user's file under one of
         * our names is evidence (and, as root, not ours to delete); a
         * FIFO would block the open in supervisor_alive. */
        struct stat st;
        if (lstat(path, &st) || !S_ISREG(st.st_mode) || st.st_uid != geteuid())
            continue;
        if (only_stale && !is_stale(path, &st))
            continue;
        if (unlink(path) == 0)
            removed++;
    }
    closedir(d);
    return removed;
}

int fb__seg_cleanup(const char *job_id)
{
    return job_id ? cleanup(job_id, -1, 0, 0) : cleanup(NULL, -1, 0, 1);
}

int fb__seg_remove_job(const char *job_id, int attempt)
{
    return cleanup(job_id, attempt, 0, 0);
}

int fb__seg_remove_older(const char *job_id, int attempt)
{
    return job_id && attempt > 0 ? cleanup(job_id, attempt, 1, 0) : 0;
}

int fb__seg_request_dump(const fb__seg *seg, const char *name_or_path,
                         uint64_t request)
{
    char path[PATH_MAX];
    int rc;
    if (!seg || seg->writable)
        return -EINVAL;
    rc = seg_path(path, sizeof path, name_or_path);
    if (rc)
        return rc;
    int fd = open(path, O_WRONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return -errno;
    struct stat st;
    if (fstat(fd, &st) < 0) {
        rc = -errno;
    } else if (!S_ISREG(st.st_mode) || st.st_dev != seg->dev || st.st_ino != seg->ino) {
        rc = FB_ENOTOURS; /* replaced since attach: not the rank we watch */
    } else {
        /* One aligned 8-byte word: the rank reads it with a relaxed load. */
        ssize_t n = pwrite(fd, &request, sizeof request,
                           (off_t)offsetof(fb__seg_header, dump_request));
        rc = n == (ssize_t)sizeof request ? 0 : n < 0 ? -errno : -EIO;
        /* The rank's thread sleeps on the word's low half (a shared
         * futex: keyed by the file's page, so our read-only mapping of it
         * reaches it; a wake only reads).  A truncated page is EFAULT,
         * not a fault. */
        if (!rc)
            syscall(SYS_futex, (uint32_t *)((char *)seg->base +
                                            offsetof(fb__seg_header, dump_request)),
                    FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
    }
    close(fd);
    return rc;
}
