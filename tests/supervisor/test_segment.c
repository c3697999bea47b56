/*
 * test_segment.c -- the segment reader trusts nothing the rank or another
 * user can write (src/lib/segment.c, docs/segment.md "Readers"):
 *
 *  - offsets and capacities rewritten after attach are not used (the
 *    identity is copied once), and fb__seg_check names the field;
 *  - a huge or backwards report_head is bounded and flagged;
 *  - copied report text is NUL-terminated and free of control bytes;
 *  - a file planted under a segment's name by another uid, open to
 *    others, or a symlink is refused by the reader (FB_ENOTOURS) and by
 *    the creating rank, which leaves it alone;
 *  - the flight-recorder loader survives a thread that keeps rewriting
 *    fr_offset / fr_capacity while it reads;
 *  - a rank that truncates its file (to a page, to 0, to 0 and back) does
 *    not kill the reader with SIGBUS: reads return zeros, fb__seg_check
 *    says "truncated", the dump still works, and a truncated file is
 *    refused at attach; a SIGBUS anywhere else still kills (or reaches
 *    the handler that was there before).
 *
 *  - SDC check records (minor 2): read back under their sequence check,
 *    names made safe; an SDC ring offset or capacity that does not fit
 *    the file is refused at attach, rewritten after attach it is not
 *    used and fb__seg_check names it; an sdc_head that jumps is flagged.
 *
 * Tests that need another uid (chown) run only as root; they say so.
 */
#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../check.h"
#include "fr/model.h"
#include "lib/segment.h"

#define OTHER_UID 65534

static char job[64];

static fb__seg *make(int attempt, int rank)
{
    fb__seg *seg = NULL;
    fb__seg_create_args a = {.job_id = job, .attempt = attempt, .rank = rank,
                             .world_size = 4, .fr_capacity = 256};
    CHECK_RC(fb__seg_create(&seg, &a), 0);
    return seg;
}

/* A rank's segment (rank 0 of `attempt`) and a reader attached to it;
 * `name` (FB__SEG_NAME_MAX bytes) gets its shm name. */
static fb__seg *make_pair(int attempt, fb__seg **reader, char *name)
{
    fb__seg *w = make(attempt, 0);
    *reader = NULL;
    fb__seg_name(name, FB__SEG_NAME_MAX, job, attempt, 0);
    CHECK_RC(fb__seg_open(reader, name), 0);
    return w;
}

static void seg_path(char *buf, size_t size, int attempt, int rank)
{
    char name[FB__SEG_NAME_MAX];
    fb__seg_name(name, sizeof name, job, attempt, rank);
    snprintf(buf, size, "/dev/shm%s", name);
}

/* Offsets rewritten after attach: reads stay in bounds, check says so. */
static void test_toctou_offsets(void)
{
    fb__seg *r;
    char name[FB__SEG_NAME_MAX], why[128];
    fb__seg *w = make_pair(0, &r, name);
    if (!w || !r)
        goto out;
    fb__seg_append_report(w, FB__REPORT_NOTE, 0, 1, 0, 0, 0, "hello");
    CHECK_RC(fb__seg_check(r, why, sizeof why), 0);

    fb__seg_header *h = fb__seg_hdr(w);
    h->report_offset = 0xfffff000u; /* far past the mapping */
    h->report_capacity = 1;
    h->fr_offset = 1ull << 40;
    atomic_fetch_add(&h->report_head, 1);
    fb__seg_report rep;
    int got = fb__seg_read_report(r, 0, &rep); /* crashed before the fix */
    CHECKF(got == 1 && !strcmp(rep.text, "hello"), "got %d", got);
    CHECKF(fb__seg_ident(r)->report_offset == FB__SEG_HEADER_SIZE,
           "report_offset %u", fb__seg_ident(r)->report_offset);
    uint32_t cap = 0;
    const char *area = fb__seg_fr_area(r, &cap);
    CHECK(area && cap == 256 &&
          area + (size_t)cap * FB__SEG_FR_ENTRY_SIZE <=
              (char *)fb__seg_base(r) + fb__seg_size(r));
    why[0] = '\0';
    CHECK_RC(fb__seg_check(r, why, sizeof why), FB_EFORMAT);
    CHECKF(strstr(why, "identity") != NULL, "why: %s", why);
out:
    fb__seg_close(r);
    fb__seg_close(w);
    fb__seg_remove_job(job, 0);
}

/* A head that jumps absurdly or goes back is corruption, and the report
 * reader neither loops nor reads out of bounds. */
static void test_heads(void)
{
    fb__seg *r;
    char name[FB__SEG_NAME_MAX], why[128] = "";
    fb__seg *w = make_pair(1, &r, name);
    if (!w || !r)
        goto out;
    fb__seg_header *h = fb__seg_hdr(w);
    for (int i = 0; i < 3; i++)
        fb__seg_append_report(w, FB__REPORT_NOTE, 0, (uint64_t)i, 0, 0, 0, "x");
    CHECK_RC(fb__seg_check(r, why, sizeof why), 0);
    atomic_store(&h->report_head, UINT64_MAX - 5);
    fb__seg_report rep;
    CHECK_RC(fb__seg_read_report(r, 3, &rep), -1);
    CHECK_RC(fb__seg_check(r, why, sizeof why), FB_EFORMAT);
    CHECKF(strstr(why, "report_head") != NULL, "why: %s", why);

    fb__seg_close(r);
    r = NULL;
    atomic_store(&h->report_head, 10);
    CHECK_RC(fb__seg_open(&r, name), 0); /* heads judged from here */
    atomic_store(&h->fr_head, 100);
    CHECK_RC(fb__seg_check(r, why, sizeof why), 0);
    atomic_store(&h->fr_head, 50); /* backwards */
    CHECK_RC(fb__seg_check(r, why, sizeof why), FB_EFORMAT);
    CHECKF(strstr(why, "fr_head") != NULL, "why: %s", why);

    atomic_store(&h->fr_head, 100);
    atomic_store(&h->phase, 77); /* fb_set_phase takes any value: not corrupt */
    CHECK_RC(fb__seg_check(r, why, sizeof why), 0);
    atomic_store(&h->phase, FB_PHASE_TRAIN);
    atomic_store(&h->end_kind, 9);
    CHECK_RC(fb__seg_check(r, why, sizeof why), FB_EFORMAT);
    CHECKF(strstr(why, "end_kind") != NULL, "why: %s", why);
    atomic_store(&h->end_kind, FB__END_NONE);
    atomic_store(&h->magic, 0);
    CHECK_RC(fb__seg_check(r, why, sizeof why), FB_EFORMAT);
    CHECKF(strstr(why, "magic") != NULL, "why: %s", why);
out:
    fb__seg_close(r);
    fb__seg_close(w);
    fb__seg_remove_job(job, 1);
}

/* SDC records: round trip, bounds at attach and after. */
static void test_sdc(void)
{
    fb__seg *r;
    char name[FB__SEG_NAME_MAX], why[128] = "";
    fb__seg *w = make_pair(5, &r, name);
    if (!w || !r)
        goto out;
    CHECK_EQ_INT(fb__seg_ident(r)->sdc_capacity, FB__SEG_SDC_CAPACITY);
    fb__seg_append_sdc(w, 7, 0xabcdefull, 4096, 512, 3, 0, "layer.w\x1b[2J");
    fb__seg_append_sdc(w, 7, 0x1234ull, 0, 64, 4, FB__SDC_FULL, "b");
    fb__seg_sdc rec;
    CHECK_RC(fb__seg_read_sdc(r, 0, &rec), 1);
    CHECK_EQ_U64(rec.step, 7);
    CHECK_EQ_U64(rec.hash, 0xabcdefull);
    CHECK_EQ_U64(rec.offset, 4096);
    CHECK_EQ_U64(rec.length, 512);
    CHECK_EQ_INT(rec.tensor, 3);
    CHECK_EQ_STR(rec.name, "layer.w?[2J");
    CHECK_RC(fb__seg_read_sdc(r, 1, &rec), 1);
    CHECK_EQ_INT(rec.flags, FB__SDC_FULL);
    CHECK_RC(fb__seg_read_sdc(r, 2, &rec), 0); /* not written yet */
    CHECK_RC(fb__seg_check(r, why, sizeof why), 0);

    /* A name with no NUL in its 48 bytes is cut, not overrun. */
    fb__seg_header *h = fb__seg_hdr(w);
    fb__seg_sdc *ring = (fb__seg_sdc *)((char *)fb__seg_base(w) + h->sdc_offset);
    memset(ring[1].name, 'x', sizeof ring[1].name);
    CHECK_RC(fb__seg_read_sdc(r, 1, &rec), 1);
    CHECK(strlen(rec.name) < sizeof rec.name);

    /* Rewritten after attach: the copy is used, the check says so. */
    uint64_t off = h->sdc_offset;
    h->sdc_offset = 1ull << 40;
    CHECK_RC(fb__seg_read_sdc(r, 0, &rec), 1);
    CHECK_RC(fb__seg_check(r, why, sizeof why), FB_EFORMAT);
    CHECKF(strstr(why, "sdc_offset") != NULL, "why: %s", why);

    /* The same at attach: refused. */
    fb__seg *r2 = NULL;
    CHECK_RC(fb__seg_open(&r2, name), FB_EFORMAT);
    h->sdc_offset = off;
    h->sdc_capacity = 3; /* not a power of two */
    CHECK_RC(fb__seg_open(&r2, name), FB_EFORMAT);
    h->sdc_capacity = FB__SEG_SDC_CAPACITY * 2; /* past the end of the file */
    CHECK_RC(fb__seg_open(&r2, name), FB_EFORMAT);
    h->sdc_capacity = FB__SEG_SDC_CAPACITY;
    CHECK_RC(fb__seg_open(&r2, name), 0);
    if (r2) {
        CHECK_RC(fb__seg_check(r2, why, sizeof why), 0);
        atomic_store(&h->sdc_head, UINT64_MAX - 3); /* a jump */
        CHECK_RC(fb__seg_read_sdc(r2, 0, &rec), -1); /* lost, not read */
        CHECK_RC(fb__seg_check(r2, why, sizeof why), FB_EFORMAT);
        CHECKF(strstr(why, "sdc_head") != NULL, "why: %s", why);
        fb__seg_close(r2);
    }
out:
    fb__seg_close(r);
    fb__seg_close(w);
    fb__seg_remove_job(job, 5);
}

/* A reader far behind skips to what the ring still holds, in one step. */
static void test_report_next(void)
{
    fb__seg *w = make(9, 0);
    fb__seg *r = NULL;
    char name[FB__SEG_NAME_MAX];
    fb__seg_name(name, sizeof name, job, 9, 0);
    CHECK_RC(fb__seg_open(&r, name), 0);
    if (!w || !r)
        goto out;
    for (int i = 0; i < 1000; i++)
        fb__seg_append_report(w, FB__REPORT_NOTE, 0, (uint64_t)i, 0, 0, 0, "n");
    fb__seg_report rep;
    CHECK_RC(fb__seg_read_report(r, 0, &rep), -1);
    uint64_t next = fb__seg_report_next(r, 0);
    CHECKF(next == 1000 - FB__SEG_REPORT_CAPACITY, "next %llu", (unsigned long long)next);
    CHECK_RC(fb__seg_read_report(r, next, &rep), 1);
    CHECKF(rep.step == next, "step %llu", (unsigned long long)rep.step);
    CHECK_EQ_INT(fb__seg_report_next(r, 998), 999);
out:
    fb__seg_close(r);
    fb__seg_close(w);
    fb__seg_remove_job(job, 9);
}

/* Malformed sizes or offsets: refused at attach. */
static void test_malformed(void)
{
    fb__seg *model = make(10, 0);
    if (!model)
        return;
    static const struct { size_t off; uint64_t value; int bytes; } bad[] = {
        {offsetof(fb__seg_header, total_size), 1ull << 40, 8},
        {offsetof(fb__seg_header, report_offset), 0xfffff000u, 4},
        {offsetof(fb__seg_header, report_capacity), 0, 4},
        {offsetof(fb__seg_header, report_offset), FB__SEG_HEADER_SIZE + 4, 4},
        {offsetof(fb__seg_header, fr_offset), 1ull << 40, 8},
        {offsetof(fb__seg_header, fr_capacity), 3, 4},
        {offsetof(fb__seg_header, fr_capacity), 1u << 21, 4},
        {offsetof(fb__seg_header, header_size), 16, 4},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char path[64];
        snprintf(path, sizeof path, "/tmp/fbseg-malformed-%d", (int)getpid());
        int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        CHECK(fd >= 0);
        if (fd < 0)
            break;
        CHECK_EQ_INT(write(fd, fb__seg_base(model), fb__seg_size(model)),
                     (ssize_t)fb__seg_size(model));
        CHECK_EQ_INT(pwrite(fd, &bad[i].value, (size_t)bad[i].bytes, (off_t)bad[i].off),
                     bad[i].bytes);
        close(fd);
        fb__seg *r = NULL;
        int rc = fb__seg_open(&r, path);
        CHECKF(rc == FB_EFORMAT, "case %zu: %d (%s)", i, rc, fb_strerror(rc));
        fb__seg_close(r);
        unlink(path);
    }
    fb__seg_close(model);
    fb__seg_remove_job(job, 10);
}

/* Report text: bounded, NUL-terminated, no control bytes. */
static void test_report_text(void)
{
    fb__seg *w = make(2, 0);
    fb__seg *r = NULL;
    char name[FB__SEG_NAME_MAX];
    fb__seg_name(name, sizeof name, job, 2, 0);
    CHECK_RC(fb__seg_open(&r, name), 0);
    if (!w || !r)
        goto out;
    fb__seg_append_report(w, FB__REPORT_NOTE, 0, 0, 0, 0, 0, "x");
    fb__seg_report *slot =
        (fb__seg_report *)((char *)fb__seg_base(w) + FB__SEG_HEADER_SIZE);
    memset(slot->text, 'A', sizeof slot->text);
    slot->text[3] = '\033';
    slot->text[4] = '\n';
    fb__seg_report rep;
    memset(&rep, 0x55, sizeof rep);
    CHECK_RC(fb__seg_read_report(r, 0, &rep), 1);
    size_t n = strnlen(rep.text, sizeof rep.text);
    CHECKF(n < sizeof rep.text, "text not terminated (%zu)", n);
    for (size_t i = 0; i < n; i++)
        CHECKF((unsigned char)rep.text[i] >= 0x20 && rep.text[i] != 0x7f,
               "control byte 0x%02x at %zu", (unsigned char)rep.text[i], i);
out:
    fb__seg_close(r);
    fb__seg_close(w);
    fb__seg_remove_job(job, 2);
}

/* Copy a valid segment's bytes to `path` (a file the reader would map). */
static int plant(const char *path, const fb__seg *model, mode_t mode, uid_t uid)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd < 0)
        return -errno;
    ssize_t n = write(fd, fb__seg_base(model), fb__seg_size(model));
    int rc = n == (ssize_t)fb__seg_size(model) ? 0 : -EIO;
    if (!rc && fchmod(fd, mode))
        rc = -errno;
    if (!rc && uid != (uid_t)-1 && fchown(fd, uid, (gid_t)-1))
        rc = -errno;
    close(fd);
    return rc;
}

static void test_not_ours(void)
{
    fb__seg *model = make(3, 0); /* a well-formed image to copy */
    char path[256], name[FB__SEG_NAME_MAX];
    struct stat st;
    fb__seg *r = NULL;
    if (!model)
        return;

    /* Ours but open to others (0644): refused by the reader. */
    seg_path(path, sizeof path, 4, 0);
    fb__seg_name(name, sizeof name, job, 4, 0);
    CHECK_RC(plant(path, model, 0644, (uid_t)-1), 0);
    memset(&st, 0, sizeof st);
    CHECK_RC(fb__seg_open_as(&r, name, geteuid(), &st), FB_ENOTOURS);
    CHECKF((st.st_mode & 07777) == 0644, "mode %o", st.st_mode & 07777);
    fb__seg_close(r);
    r = NULL;
    /* ... and an explicit file of any owner is still readable. */
    CHECK_RC(fb__seg_open_as(&r, path, FB__SEG_ANY_OWNER, NULL), 0);
    fb__seg_close(r);
    r = NULL;
    /* The creating rank does not write into it either. */
    fb__seg *w = NULL;
    struct stat taken;
    memset(&taken, 0, sizeof taken);
    fb__seg_create_args a = {.job_id = job, .attempt = 4, .rank = 0,
                             .world_size = 1, .taken = &taken};
    CHECK_RC(fb__seg_create(&w, &a), FB_ENOTOURS);
    CHECK_EQ_INT(stat(path, &st), 0);
    CHECK_EQ_INT(st.st_mode & 07777, 0644);
    fb__seg_close(w);
    w = NULL;
    unlink(path);

    /* A symlink under the name: refused (O_NOFOLLOW). */
    seg_path(path, sizeof path, 5, 0);
    fb__seg_name(name, sizeof name, job, 5, 0);
    CHECK_EQ_INT(symlink("/etc/passwd", path), 0);
    CHECK_RC(fb__seg_open(&r, name), FB_ENOTOURS);
    fb__seg_close(r);
    r = NULL;
    a.attempt = 5;
    CHECK_RC(fb__seg_create(&w, &a), FB_ENOTOURS);
    fb__seg_close(w);
    w = NULL;
    CHECK(lstat(path, &st) == 0 && S_ISLNK(st.st_mode));
    unlink(path);

    /* Our own leftover (0600) is replaced. */
    seg_path(path, sizeof path, 6, 0);
    CHECK_RC(plant(path, model, 0600, (uid_t)-1), 0);
    a.attempt = 6;
    CHECK_RC(fb__seg_create(&w, &a), 0);
    fb__seg_close(w);
    w = NULL;

    if (geteuid() != 0) {
        printf("skip: another uid's file needs root (chown)\n");
    } else {
        /* Another user's well-formed 0600 file: refused, named, untouched. */
        seg_path(path, sizeof path, 7, 0);
        fb__seg_name(name, sizeof name, job, 7, 0);
        CHECK_RC(plant(path, model, 0600, OTHER_UID), 0);
        memset(&st, 0, sizeof st);
        CHECK_RC(fb__seg_open_as(&r, name, geteuid(), &st), FB_ENOTOURS);
        CHECKF(st.st_uid == OTHER_UID, "uid %u", (unsigned)st.st_uid);
        fb__seg_close(r);
        r = NULL;
        memset(&taken, 0, sizeof taken);
        a.attempt = 7;
        CHECK_RC(fb__seg_create(&w, &a), FB_ENOTOURS);
        CHECKF(taken.st_uid == OTHER_UID, "taken uid %u", (unsigned)taken.st_uid);
        CHECK_EQ_INT(stat(path, &st), 0);
        CHECK_EQ_INT(st.st_uid, OTHER_UID);
        fb__seg_close(w);
        w = NULL;
        /* The agent's view: the job's user is the other uid. */
        CHECK_RC(fb__seg_open_as(&r, name, OTHER_UID, NULL), 0);
        fb__seg_close(r);
        r = NULL;
        unlink(path);
    }
    fb__seg_close(model);
    fb__seg_remove_job(job, -1);
}

/* The fr loader against a writer that keeps moving the fr area. */
static volatile int stop_flipping;

static void *flipper(void *arg)
{
    fb__seg_header *h = arg;
    uint64_t good_off = h->fr_offset;
    uint32_t good_cap = h->fr_capacity;
    while (!stop_flipping) {
        h->fr_offset = 1ull << 40;
        h->fr_capacity = 1u << 22;
        atomic_store(&h->fr_head, UINT64_MAX - 1);
        h->fr_offset = good_off;
        h->fr_capacity = good_cap;
        atomic_store(&h->fr_head, 0);
    }
    return NULL;
}

static void test_fr_live(void)
{
    fb__seg *w = make(8, 0);
    char name[FB__SEG_NAME_MAX], err[256];
    fb__seg_name(name, sizeof name, job, 8, 0);
    if (!w)
        return;
    pthread_t t;
    stop_flipping = 0;
    CHECK_EQ_INT(pthread_create(&t, NULL, flipper, fb__seg_hdr(w)), 0);
    int ok = 0;
    for (int i = 0; i < 3000; i++) {
        fb__fr_model m;
        fb__fr_model_init(&m);
        int rc = fb__fr_load_ring(&m, name, err, sizeof err);
        ok += rc == 0;
        fb__fr_model_free(&m);
    }
    stop_flipping = 1;
    pthread_join(t, NULL);
    CHECKF(ok > 0, "no load succeeded: %s", err);
    fb__seg_close(w);
    fb__seg_remove_job(job, 8);
}

/* Read a whole file into a new buffer; NULL on failure. */
static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    struct stat st;
    unsigned char *b = NULL;
    if (fstat(fileno(f), &st) == 0 && (b = malloc((size_t)st.st_size + 1)) &&
        fread(b, 1, (size_t)st.st_size, f) != (size_t)st.st_size) {
        free(b);
        b = NULL;
    }
    *n = (size_t)st.st_size;
    fclose(f);
    return b;
}

/* The sparse snapshot is the same bytes as the whole one, but the pages
 * the rank never wrote (most of a fresh ring) are holes, not written; a
 * file replaced under the name gets the whole copy. */
static void test_dump_sparse(void)
{
    char name[FB__SEG_NAME_MAX], path[256], full[64], sparse[64];
    fb__seg *w = NULL, *r = NULL;
    fb__seg_create_args a = {.job_id = job, .attempt = 13, .rank = 0,
                             .world_size = 4, .fr_capacity = 16384};
    CHECK_RC(fb__seg_create(&w, &a), 0);
    fb__seg_name(name, sizeof name, job, 13, 0);
    seg_path(path, sizeof path, 13, 0);
    CHECK_RC(fb__seg_open(&r, name), 0);
    if (!w || !r)
        goto out;
    fb__seg_append_report(w, FB__REPORT_NOTE, 0, 1, 0, 0, 0, "evidence");
    snprintf(full, sizeof full, "/tmp/fbseg-full-%d", (int)getpid());
    snprintf(sparse, sizeof sparse, "/tmp/fbseg-sparse-%d", (int)getpid());
    /* Sparse first: reading a hole through the mapping (the whole dump
     * does) gives the file a page there. */
    CHECK_RC(fb__seg_dump_sparse(r, name, sparse), 0);
    CHECK_RC(fb__seg_dump(r, full), 0);
    size_t nf = 0, ns = 0;
    unsigned char *bf = slurp(full, &nf), *bs = slurp(sparse, &ns);
    CHECK(bf && bs);
    CHECK_EQ_U64(ns, fb__seg_size(r));
    CHECK(bf && bs && nf == ns && memcmp(bf, bs, nf) == 0);
    free(bf);
    free(bs);
    struct stat sf, ss;
    CHECK_EQ_INT(stat(full, &sf), 0);
    CHECK_EQ_INT(stat(sparse, &ss), 0);
    CHECKF((uint64_t)ss.st_blocks * 512 < fb__seg_size(r) / 4,
           "sparse dump holds %llu bytes of %zu", (unsigned long long)ss.st_blocks * 512,
           fb__seg_size(r));
    unlink(sparse);

    /* Another file under the name: its holes say nothing of our mapping. */
    CHECK_EQ_INT(unlink(path), 0);
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
    CHECK(fd >= 0);
    if (fd >= 0) {
        CHECK_EQ_INT(ftruncate(fd, (off_t)fb__seg_size(r)), 0);
        close(fd);
    }
    CHECK_RC(fb__seg_dump_sparse(r, name, sparse), 0);
    CHECK_EQ_INT(stat(sparse, &ss), 0);
    CHECKF((uint64_t)ss.st_blocks * 512 >= fb__seg_size(r),
           "replaced file: dump holds %llu bytes of %zu",
           (unsigned long long)ss.st_blocks * 512, fb__seg_size(r));
    unlink(sparse);
    unlink(full);
out:
    fb__seg_close(r);
    fb__seg_close(w);
    fb__seg_remove_job(job, 13);
}

/* A copy held in memory (the supervisor writes it after the relaunch):
 * the bytes as they were when taken, written as the same sparse file;
 * over its limit, nothing is taken. */
static void test_copy_held(void)
{
    char name[FB__SEG_NAME_MAX], sparse[64], held[64];
    fb__seg *w = NULL, *r = NULL;
    fb__seg_create_args a = {.job_id = job, .attempt = 14, .rank = 0,
                             .world_size = 4, .fr_capacity = 16384};
    CHECK_RC(fb__seg_create(&w, &a), 0);
    fb__seg_name(name, sizeof name, job, 14, 0);
    CHECK_RC(fb__seg_open(&r, name), 0);
    if (!w || !r)
        goto out;
    fb__seg_append_report(w, FB__REPORT_NOTE, 0, 1, 0, 0, 0, "at the failure");
    snprintf(sparse, sizeof sparse, "/tmp/fbseg-sparse-%d", (int)getpid());
    snprintf(held, sizeof held, "/tmp/fbseg-held-%d", (int)getpid());
    CHECK_RC(fb__seg_dump_sparse(r, name, sparse), 0);
    fb__seg_copy *c = NULL;
    CHECK_RC(fb__seg_copy_take(r, name, 64, &c), -E2BIG);
    CHECK(c == NULL);
    CHECK_RC(fb__seg_copy_take(r, name, SIZE_MAX, &c), 0);
    CHECKF(c && fb__seg_copy_bytes(c) < fb__seg_size(r) / 4,
           "held %zu bytes of %zu", fb__seg_copy_bytes(c), fb__seg_size(r));
    /* What the rank writes after the take is not in the copy. */
    fb__seg_append_report(w, FB__REPORT_NOTE, 0, 2, 0, 0, 0, "after it");
    if (c)
        CHECK_RC(fb__seg_copy_write(c, held), 0);
    fb__seg_copy_free(c);
    size_t ns = 0, nh = 0;
    unsigned char *bs = slurp(sparse, &ns), *bh = slurp(held, &nh);
    CHECK(bs && bh);
    CHECK_EQ_U64(nh, ns);
    CHECK(bs && bh && nh == ns && memcmp(bs, bh, ns) == 0);
    free(bs);
    free(bh);
    struct stat ss, sh;
    CHECK_EQ_INT(stat(sparse, &ss), 0);
    CHECK_EQ_INT(stat(held, &sh), 0);
    CHECK_EQ_INT(sh.st_blocks, ss.st_blocks);
    CHECK_EQ_INT(sh.st_mode & 0777, 0600);
    unlink(sparse);
    unlink(held);
out:
    fb__seg_close(r);
    fb__seg_close(w);
    fb__seg_remove_job(job, 14);
}

/* A rank shrinks its file under the reader: no SIGBUS reaches us. */
static void test_truncated(void)
{
    long page = sysconf(_SC_PAGESIZE);
    char name[FB__SEG_NAME_MAX], path[256], why[128] = "", want[96];
    fb__seg *w = make(11, 0), *r = NULL;
    fb__seg_name(name, sizeof name, job, 11, 0);
    seg_path(path, sizeof path, 11, 0);
    CHECK_RC(fb__seg_open(&r, name), 0);
    if (!w || !r)
        goto out;
    fb__seg_append_report(w, FB__REPORT_NOTE, 0, 1, 0, 0, 0, "before");
    CHECK_RC(fb__seg_check(r, why, sizeof why), 0);
    CHECK_EQ_INT(fb__seg_truncated(r, NULL), 0);

    /* To one page: the header stays, reports and ring are gone. */
    CHECK_EQ_INT(truncate(path, page), 0);
    fb__seg_report rep;
    CHECK_RC(fb__seg_read_report(r, 0, &rep), 0); /* SIGBUS before the guard */
    uint32_t cap = 0;
    const unsigned char *area = fb__seg_fr_area(r, &cap);
    unsigned sum = 0;
    for (size_t i = 0; area && i < (size_t)cap * FB__SEG_FR_ENTRY_SIZE; i++)
        sum |= area[i];
    CHECKF(area && sum == 0, "ring read %u", sum);
    CHECK_EQ_U64(atomic_load(&fb__seg_hdr(r)->magic), FB__SEG_MAGIC);
    CHECK_RC(fb__seg_check(r, why, sizeof why), FB_EFORMAT);
    CHECKF(strstr(why, "truncated") != NULL, "why: %s", why);
    uint64_t off = 0;
    CHECK_EQ_INT(fb__seg_truncated(r, &off), 1);
    CHECKF(off == (uint64_t)page, "lost from %llu", (unsigned long long)off);
    snprintf(want, sizeof want, "truncated: its pages from offset %ld of %zu "
             "bytes are gone", page, fb__seg_size(r));
    CHECKF(strstr(why, want) != NULL, "why: %s", why);
    /* The evidence that is left can still be kept. */
    char dump[64];
    snprintf(dump, sizeof dump, "/tmp/fbseg-trunc-%d", (int)getpid());
    CHECK_RC(fb__seg_dump(r, dump), 0);
    struct stat st;
    CHECK_EQ_INT(stat(dump, &st), 0);
    CHECK_EQ_U64(st.st_size, fb__seg_size(r));
    unlink(dump);
    fb__seg_close(r);
    r = NULL;

    /* A fresh attach of the shrunk file: refused, not faulted on. */
    CHECK_RC(fb__seg_open(&r, name), FB_EFORMAT);
    fb__seg_close(r);
    r = NULL;
    fb__seg_close(w);
    w = NULL;
    fb__seg_remove_job(job, 11);

    /* To three pages, found by fb__seg_check alone: it names the new end
     * of the file, not the page it happened to probe. */
    w = make(16, 0);
    fb__seg_name(name, sizeof name, job, 16, 0);
    seg_path(path, sizeof path, 16, 0);
    CHECK_RC(fb__seg_open(&r, name), 0);
    if (!w || !r)
        goto out;
    CHECK_EQ_INT(truncate(path, 3 * page), 0);
    CHECK_RC(fb__seg_check(r, why, sizeof why), FB_EFORMAT);
    snprintf(want, sizeof want, "pages from offset %ld of", 3 * page);
    CHECKF(strstr(why, want) != NULL, "why: %s", why);
    fb__seg_close(r);
    r = NULL;
    fb__seg_close(w);
    w = NULL;

    /* To 0: even the header is gone. */
    w = make(12, 0);
    fb__seg_name(name, sizeof name, job, 12, 0);
    seg_path(path, sizeof path, 12, 0);
    CHECK_RC(fb__seg_open(&r, name), 0);
    if (!w || !r)
        goto out;
    size_t size = fb__seg_size(r);
    CHECK_EQ_INT(truncate(path, 0), 0);
    CHECK_EQ_U64(atomic_load(&fb__seg_hdr(r)->magic), 0);
    CHECK_RC(fb__seg_read_report(r, 0, &rep), 0);
    CHECK_RC(fb__seg_check(r, why, sizeof why), FB_EFORMAT);
    CHECKF(strstr(why, "pages from offset 0 of") != NULL, "why: %s", why);
    fb__seg_close(r);
    r = NULL;
    CHECK_RC(fb__seg_open(&r, name), -ENOENT); /* as if not created yet */
    fb__seg_close(r);
    r = NULL;

    /* To 0 and back before the reader looked: zeros, no fault; the check
     * finds the magic gone. */
    CHECK_EQ_INT(truncate(path, (off_t)size), 0);
    fb__seg_close(w);
    w = make(13, 0);
    fb__seg_name(name, sizeof name, job, 13, 0);
    seg_path(path, sizeof path, 13, 0);
    CHECK_RC(fb__seg_open(&r, name), 0);
    if (!w || !r)
        goto out;
    CHECK_EQ_INT(truncate(path, 0), 0);
    CHECK_EQ_INT(truncate(path, (off_t)size), 0);
    CHECK_RC(fb__seg_check(r, why, sizeof why), FB_EFORMAT);
    CHECKF(strstr(why, "magic") != NULL, "why: %s", why);
    CHECK_EQ_INT(fb__seg_truncated(r, NULL), 0);
out:
    fb__seg_close(r);
    fb__seg_close(w);
    fb__seg_remove_job(job, -1);
}

/* Readers come and go (a supervisor re-attaches every attempt): slots are
 * reused, and the guard still covers the newest mapping. */
static void test_guard_reuse(void)
{
    char name[FB__SEG_NAME_MAX], path[256], why[128] = "";
    fb__seg *w = make(14, 0), *r = NULL;
    fb__seg_name(name, sizeof name, job, 14, 0);
    seg_path(path, sizeof path, 14, 0);
    for (int i = 0; w && i < 2000; i++) {
        fb__seg *rs[4] = {NULL, NULL, NULL, NULL};
        for (int k = 0; k < 4; k++)
            CHECK_RC(fb__seg_open(&rs[k], name), 0);
        for (int k = 0; k < 4; k++)
            fb__seg_close(rs[k]);
    }
    CHECK_RC(fb__seg_open(&r, name), 0);
    if (w && r) {
        CHECK_EQ_INT(truncate(path, 0), 0);
        CHECK_RC(fb__seg_check(r, why, sizeof why), FB_EFORMAT);
        CHECKF(strstr(why, "truncated") != NULL, "why: %s", why);
    }
    fb__seg_close(r);
    fb__seg_close(w);
    fb__seg_remove_job(job, 14);
}

static void on_foreign_sigbus(int sig, siginfo_t *si, void *uc)
{
    (void)sig;
    (void)si;
    (void)uc;
    _exit(42);
}

/* In a child with a reader attached: 1 fault on a truncated mapping that
 * is not a segment, 2 raise(SIGBUS), 3 like 1 with a SIGBUS handler of
 * its own installed before the reader's (it must still get the fault). */
static void sigbus_child(int how)
{
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    /* The default action before the guard (a sanitizer runtime would
     * otherwise have its own handler there, which reports and exits). */
    signal(SIGBUS, SIG_DFL);
    if (how == 3) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_foreign_sigbus;
        sa.sa_flags = SA_SIGINFO;
        sigaction(SIGBUS, &sa, NULL);
    }
    char name[FB__SEG_NAME_MAX], other[64];
    fb__seg_name(name, sizeof name, job, 15, 0);
    fb__seg *r = NULL;
    if (fb__seg_open(&r, name))
        _exit(3); /* the guard is installed from here on */
    if (how == 2)
        raise(SIGBUS);
    snprintf(other, sizeof other, "/tmp/fbseg-other-%d", (int)getpid());
    int fd = open(other, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || ftruncate(fd, 8192))
        _exit(4);
    volatile unsigned char *p = mmap(NULL, 8192, PROT_READ, MAP_SHARED, fd, 0);
    unlink(other);
    if (p == MAP_FAILED || ftruncate(fd, 0))
        _exit(5);
    (void)p[4096];
    _exit(0); /* survived: the guard swallowed a fault not its own */
}

static void test_sigbus_elsewhere(void)
{
    fb__seg *w = make(15, 0);
    if (!w)
        return;
    for (int how = 1; how <= 3; how++) {
        pid_t pid = fork();
        if (pid == 0)
            sigbus_child(how);
        int st = 0;
        CHECK(pid > 0 && waitpid(pid, &st, 0) == pid);
        if (how < 3)
            CHECKF(WIFSIGNALED(st) && WTERMSIG(st) == SIGBUS,
                   "case %d: status 0x%x (exit %d, signal %d)", how, st,
                   WIFEXITED(st) ? WEXITSTATUS(st) : -1,
                   WIFSIGNALED(st) ? WTERMSIG(st) : 0);
        else
            CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 42,
                   "case 3: status 0x%x (exit %d, signal %d)", st,
                   WIFEXITED(st) ? WEXITSTATUS(st) : -1,
                   WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    }
    fb__seg_close(w);
    fb__seg_remove_job(job, 15);
}

/* A node watcher's sweep at its start: every segment of the job's earlier
 * attempts goes (a rank that outlived its attempt left it), the attempt's
 * own and later ones and another job's stay. */
static void test_remove_older(void)
{
    char other[80], path[256], name[FB__SEG_NAME_MAX];
    struct stat st;
    fb__seg *s[5] = {make(20, 0), make(20, 1), make(21, 0), make(22, 0), make(23, 0)};
    snprintf(other, sizeof other, "%s-other", job);
    fb__seg *o = NULL;
    fb__seg_create_args a = {.job_id = other, .attempt = 20, .rank = 0,
                             .world_size = 4, .fr_capacity = 256};
    CHECK_RC(fb__seg_create(&o, &a), 0);
    CHECK_EQ_INT(fb__seg_remove_older(job, 0), 0);
    CHECK_EQ_INT(fb__seg_remove_older(job, 22), 3);
    static const int gone[][2] = {{20, 0}, {20, 1}, {21, 0}}, kept[][2] = {{22, 0}, {23, 0}};
    for (int i = 0; i < 3; i++) {
        seg_path(path, sizeof path, gone[i][0], gone[i][1]);
        CHECKF(stat(path, &st) != 0, "%s left", path);
    }
    for (int i = 0; i < 2; i++) {
        seg_path(path, sizeof path, kept[i][0], kept[i][1]);
        CHECKF(stat(path, &st) == 0, "%s removed", path);
    }
    fb__seg_name(name, sizeof name, other, 20, 0);
    snprintf(path, sizeof path, "/dev/shm%s", name);
    CHECKF(stat(path, &st) == 0, "%s (another job's) removed", path);
    for (int i = 0; i < 5; i++)
        fb__seg_close(s[i]);
    fb__seg_close(o);
    fb__seg_remove_job(other, -1);
    fb__seg_remove_job(job, -1);
}

/* One job id check for every command that takes one from outside. */
static void test_job_id(void)
{
    char longest[FB__JOB_ID_MAX + 2];
    memset(longest, 'a', FB__JOB_ID_MAX);
    longest[FB__JOB_ID_MAX] = '\0';
    CHECK_EQ_INT(fb__job_id_ok("train-0a1b2c3d4e5f"), 1);
    CHECK_EQ_INT(fb__job_id_ok("12345"), 1);
    CHECK_EQ_INT(fb__job_id_ok("A_b-9"), 1);
    CHECK_EQ_INT(fb__job_id_ok(longest), 1);
    longest[FB__JOB_ID_MAX] = 'a';
    longest[FB__JOB_ID_MAX + 1] = '\0';
    CHECK_EQ_INT(fb__job_id_ok(longest), 0);
    const char *bad[] = {"", "..", ".", "a/b", "/etc", "a.b", "a b", "a\nb", "caf\xc3\xa9",
                         "a*", "$(x)"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECKF(!fb__job_id_ok(bad[i]), "\"%s\" taken as a job id", bad[i]);
    CHECK_EQ_INT(fb__job_id_ok(NULL), 0);
    CHECK_EQ_U64(fb__job_id_span("job-1.3.7"), 5);
    CHECK_EQ_U64(fb__job_id_span("job-1"), 5);
    CHECK_EQ_U64(fb__job_id_span(".3.7"), 0);
    CHECK_EQ_U64(fb__job_id_span("a/b.3.7"), 0);
    CHECK_EQ_U64(fb__job_id_span(longest), 0);
    char name[FB__SEG_NAME_MAX];
    CHECK_RC(fb__seg_name(name, sizeof name, "a/b", 0, 0), -EINVAL);
    CHECK_RC(fb__seg_name(name, sizeof name, "job-1", 0, 3), 0);
    CHECK_EQ_STR(name, "/fb.job-1.0.3");
}

int main(void)
{
    snprintf(job, sizeof job, "segtest-%d", (int)getpid());
    /* First, while no reader has installed the guard in this process. */
    test_sigbus_elsewhere();
    test_truncated();
    test_dump_sparse();
    test_copy_held();
    test_guard_reuse();
    test_toctou_offsets();
    test_heads();
    test_report_text();
    test_report_next();
    test_sdc();
    test_malformed();
    test_not_ours();
    test_fr_live();
    test_remove_older();
    test_job_id();
    fb__seg_remove_job(job, -1);
    if (!failures)
        printf("ok: segment reader\n");
    return failures != 0;
}
