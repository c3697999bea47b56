/*
 * engine.c -- the checkpoint engine behind fb_ckpt_* (firebreak.h).
 *
 * Save: with async on, fb_ckpt_save() takes a snapshot of every registered
 * tensor -- by write-protecting its pages (protect.c), where the kernel
 * allows, or else by copying it into staging memory that was allocated and
 * pre-faulted when the tensor was registered (staging.c) -- hands the step
 * to the handle's writer thread and returns.  The writer copies the
 * protected tensors into staging behind the training thread's back, then
 * hashes and writes the shard while training goes on.
 * With async off the same writer code runs on the caller's thread straight
 * from the tensors.  At most one save is in flight per handle.
 *
 * A shard is written as <step dir>/.rank-R.<pid>.tmp: data section first
 * (hashing as it goes), then the header, whose length is known up front
 * because hashes are fixed-width hex; then fsync, rename to
 * rank-R.safetensors, fsync of the step directory.  Rank 0 then applies
 * retention (store.c).
 *
 * Restore: the newest complete checkpoint (store.c) whose shard for this
 * rank parses, matches the registered tensors and verifies hash by hash,
 * read by io_threads threads in parallel straight into the tensors.
 *
 * In a test build (FB_TEST_HOOKS), tests crash the engine on purpose with
 * FIREBREAK_CKPT_CRASH_AT=POINT[@STEP] (POINT: before_rename, after_rename,
 * during_delete; SIGKILL there), inject write errors with
 * FIREBREAK_CKPT_FAIL=ENOSPC|EIO|EACCES|EDQUOT[@STEP], and slow the writer
 * with FIREBREAK_CKPT_WRITE_DELAY_MS and, before it copies write-protected
 * tensors, FIREBREAK_CKPT_DRAIN_DELAY_MS; FIREBREAK_CKPT_PURGE_GATE=PATH
 * holds the removal of deleted checkpoints until PATH exists (the writer
 * still takes saves), and FIREBREAK_CKPT_PURGE_DELAY_MS (store.c) slows
 * it; FIREBREAK_CKPT_HASH_GATHER=0
 * hashes on a second thread instead of while gathering (the bench's
 * "before").  A release build has none of them.
 */
#include "ckpt/engine.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "ckpt/cuda.h"
#include "ckpt/hash.h"
#include "ckpt/safetensors.h"
#include "ckpt/shard.h"
#include "ckpt/store.h"
#include "common/jsonw.h"
#include "common/util.h"
#include "lib/lib.h"

#define CHUNK_BYTES (8u << 20) /* unit of write+hash in the writer */
#define MAX_IO_THREADS 16
#define IOV_BATCH 256
/* Smaller host tensors are copied in the stall: a few pages are cheaper to
 * copy than to protect. */
#define WP_MIN_BYTES (16u << 10)

/* ------------------------------------------------------------------------
 * Options and test hooks
 * ---------------------------------------------------------------------- */

/* The size of fb_ckpt_options in the first release (every field up to
 * `snapshot`).  Never changes: a caller's struct is at least this big. */
#define OPTIONS_V1_SIZE (offsetof(fb_ckpt_options, snapshot) + sizeof(fb_ckpt_snapshot))
_Static_assert(offsetof(fb_ckpt_options, struct_size) == 0,
               "struct_size comes first (the ABI rule in firebreak.h)");

static void options_defaults(fb_ckpt_options *opt)
{
    memset(opt, 0, sizeof *opt);
    opt->struct_size = sizeof *opt;
    opt->rank = -1;
    opt->world_size = 0;
    opt->keep = 2;
    opt->async = 1;
    opt->on_busy = FB_CKPT_BUSY_WAIT;
    opt->on_error = FB_CKPT_ERROR_CONTINUE;
    opt->io_threads = 0;
    opt->snapshot = FB_CKPT_SNAPSHOT_AUTO;
}

void fb_ckpt_options_init_sized(fb_ckpt_options *opt, size_t struct_size)
{
    fb_ckpt_options d;
    if (!opt || struct_size < sizeof opt->struct_size)
        return;
    options_defaults(&d);
    /* A newer caller's fields this library does not know: 0, their default. */
    memset(opt, 0, struct_size);
    memcpy(opt, &d, struct_size < sizeof d ? struct_size : sizeof d);
    opt->struct_size = struct_size;
}

/*
 * The caller's options as this library's struct (firebreak.h, ABI rule):
 * the fields its struct_size covers, 0 for the rest; bytes beyond this
 * library's struct must be 0.  0, -EINVAL, -E2BIG.
 */
static int options_read(const fb_ckpt_options *in, fb_ckpt_options *out)
{
    if (!in) {
        options_defaults(out);
        return 0;
    }
    size_t n = in->struct_size;
    if (n < OPTIONS_V1_SIZE) {
        fb__say("fb_ckpt_open: options.struct_size is %zu "
                "(at least %zu): start from fb_ckpt_options_init()\n",
                n, (size_t)OPTIONS_V1_SIZE);
        return -EINVAL;
    }
    memset(out, 0, sizeof *out);
    memcpy(out, in, n < sizeof *out ? n : sizeof *out);
    for (size_t i = sizeof *out; i < n; i++)
        if (((const unsigned char *)in)[i]) {
            fb__say("fb_ckpt_open: an option at byte %zu is "
                    "set, but this libfirebreak (%s) knows options up "
                    "to byte %zu only\n", i, fb_version(), sizeof *out);
            return -E2BIG;
        }
    out->struct_size = sizeof *out;
    return 0;
}

/*
 * Test hooks, compiled in only with FB_TEST_HOOKS (a CMake option, on in
 * the build trees `make test` uses, off in `make install`'s: see
 * docs/development.md).  A release library ignores these variables.
 */
#ifdef FB_TEST_HOOKS
/* FIREBREAK_CKPT_CRASH_AT=POINT[@STEP]: SIGKILL at that point of a save. */
static void crash_hook(const char *point, uint64_t step)
{
    const char *spec = fb__getenv("FIREBREAK_CKPT_CRASH_AT");
    if (!spec)
        return;
    size_t n = strlen(point);
    if (strncmp(spec, point, n) || (spec[n] && spec[n] != '@'))
        return;
    long long want;
    if (spec[n] == '@' && (fb__parse_int(spec + n + 1, 0, LLONG_MAX, &want) ||
                           (uint64_t)want != step))
        return;
    fprintf(stderr, "firebreak: FIREBREAK_CKPT_CRASH_AT=%s: killing rank at "
                    "step %llu\n", spec, (unsigned long long)step);
    raise(SIGKILL);
}

/* FIREBREAK_CKPT_FAIL=ERRNAME[@STEP]: the shard's first write fails so. */
static int injected_write_error(uint64_t step)
{
    const char *spec = fb__getenv("FIREBREAK_CKPT_FAIL");
    if (!spec)
        return 0;
    static const struct { const char *name; int err; } names[] = {
        {"ENOSPC", ENOSPC}, {"EIO", EIO}, {"EACCES", EACCES}, {"EDQUOT", EDQUOT}};
    const char *at = strchr(spec, '@');
    size_t n = at ? (size_t)(at - spec) : strlen(spec);
    long long want;
    if (at && (fb__parse_int(at + 1, 0, LLONG_MAX, &want) || (uint64_t)want != step))
        return 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strlen(names[i].name) == n && !strncmp(spec, names[i].name, n))
            return -names[i].err;
    return 0;
}

/* FIREBREAK_CKPT_HASH_GATHER=0: hash on a second thread reading the
 * tensors again, not while gathering them for O_DIRECT (bench_ckpt's
 * "before"). */
static int hash_while_gathering(void)
{
    const char *v = fb__getenv("FIREBREAK_CKPT_HASH_GATHER");
    return !v || strcmp(v, "0");
}

/* FIREBREAK_CKPT_DRAIN_BESIDE=0 (read at each save): the writer drains a
 * write-protect snapshot, then writes it, as without a drainer thread
 * (bench_ckpt's "before"). */
static int drain_beside(void)
{
    const char *v = fb__getenv("FIREBREAK_CKPT_DRAIN_BESIDE");
    return !v || strcmp(v, "0");
}

/* FIREBREAK_CKPT_PURGE_GATE=PATH: no deleted checkpoint's bytes are
 * removed while PATH does not exist. */
static int purge_gate_closed(void)
{
    const char *v = fb__getenv("FIREBREAK_CKPT_PURGE_GATE");
    return v && access(v, F_OK) != 0;
}

/* FIREBREAK_CKPT_WRITE_DELAY_MS / _DRAIN_DELAY_MS=N: the writer sleeps N ms
 * (at most 60 s) before writing the shard / copying protected tensors. */
static void test_delay(const char *var)
{
    const char *v = fb__getenv(var);
    long long ms;
    if (v && fb__parse_int(v, 0, 60000, &ms) == 0)
        usleep((useconds_t)ms * 1000);
}
#else
static void crash_hook(const char *point, uint64_t step)
{
    (void)point;
    (void)step;
}

static int injected_write_error(uint64_t step)
{
    (void)step;
    return 0;
}

static int hash_while_gathering(void)
{
    return 1;
}

static int drain_beside(void)
{
    return 1;
}

static void test_delay(const char *var)
{
    (void)var;
}

static int purge_gate_closed(void)
{
    return 0;
}
#endif

/* ------------------------------------------------------------------------
 * Handles still open at exit are flushed (fb_finalize's promise).
 * ---------------------------------------------------------------------- */

static pthread_mutex_t open_mu = PTHREAD_MUTEX_INITIALIZER;
static fb_ckpt *open_list;
static int atexit_installed;

static int wait_in_ckpt_phase(fb_ckpt *ck);

/* In phase checkpoint while a save is still going, as fb_ckpt_wait: at
 * exit, after fb_finalize, the wait is under --ckpt-timeout and the rank
 * counts as working, not as hung in its teardown (--exit-timeout). */
void fb__ckpt_wait_open_saves(void)
{
    pthread_mutex_lock(&open_mu);
    for (fb_ckpt *c = open_list; c; c = c->next_open)
        wait_in_ckpt_phase(c);
    pthread_mutex_unlock(&open_mu);
}

static void wait_all_at_exit(void)
{
    fb__ckpt_wait_open_saves();
}

/* A forked child has none of the writer threads: its exit must not wait
 * for their saves (it would wait forever). */
static void forget_in_child(void)
{
    pthread_mutex_init(&open_mu, NULL);
    open_list = NULL;
}

static void track_open(fb_ckpt *ck, int add)
{
    pthread_mutex_lock(&open_mu);
    if (add) {
        ck->next_open = open_list;
        open_list = ck;
        if (!atexit_installed && atexit(wait_all_at_exit) == 0) {
            atexit_installed = 1;
            pthread_atfork(NULL, NULL, forget_in_child);
        }
    } else {
        for (fb_ckpt **p = &open_list; *p; p = &(*p)->next_open)
            if (*p == ck) {
                *p = ck->next_open;
                break;
            }
    }
    pthread_mutex_unlock(&open_mu);
}

/* ------------------------------------------------------------------------
 * Writing a shard
 * ---------------------------------------------------------------------- */

static void dims_text(char *buf, size_t size, int ndim, const int64_t *v)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < ndim && len < size; i++)
        len += (size_t)snprintf(buf + len, size - len, "%s%lld", i ? "," : "",
                                (long long)v[i]);
}

/* The header JSON, padded with spaces so 8 + length is a multiple of 8. */
static int build_header(const fb_ckpt *ck, uint64_t step, fb__jsonw *w)
{
    char key[FB__ST_NAME_MAX + 64], val[FB__ST_MAX_DIMS * 21 + 1], hex[17];
    fb__jsonw_init(w);
    fb__jsonw_obj_begin(w);
    fb__jsonw_key(w, "__metadata__");
    fb__jsonw_obj_begin(w);
    /* first, where readers look for it (FB__ST_HEADER_HASH_PREFIX): zeros
     * until the whole header is written, then its hash */
    fb__jsonw_kstr(w, FB__ST_HEADER_HASH_KEY, "0000000000000000");
    fb__jsonw_kstr(w, "firebreak.format", FB__CKPT_FORMAT_VERSION);
    fb__jsonw_kstr(w, "firebreak.version", fb_version());
    snprintf(val, sizeof val, "%llu", (unsigned long long)step);
    fb__jsonw_kstr(w, "firebreak.step", val);
    snprintf(val, sizeof val, "%d", ck->rank);
    fb__jsonw_kstr(w, "firebreak.rank", val);
    snprintf(val, sizeof val, "%d", ck->world_size);
    fb__jsonw_kstr(w, "firebreak.world_size", val);
    snprintf(val, sizeof val, "%d", fb_restart_count());
    fb__jsonw_kstr(w, "firebreak.attempt", val);
    fb__jsonw_kstr(w, "firebreak.hash", fb__hash_alg_name(ck->alg));
    for (size_t i = 0; i < ck->n; i++) {
        const fb__ckpt_tensor *t = &ck->t[i];
        fb__hash_hex(t->hash, hex);
        snprintf(key, sizeof key, "firebreak.hash.%s", t->name);
        fb__jsonw_kstr(w, key, hex);
        snprintf(key, sizeof key, "firebreak.global_shape.%s", t->name);
        dims_text(val, sizeof val, t->ndim, t->global_shape);
        fb__jsonw_kstr(w, key, val);
        snprintf(key, sizeof key, "firebreak.global_offset.%s", t->name);
        dims_text(val, sizeof val, t->ndim, t->global_offset);
        fb__jsonw_kstr(w, key, val);
    }
    fb__jsonw_obj_end(w);
    uint64_t off = 0;
    for (size_t i = 0; i < ck->n; i++) {
        const fb__ckpt_tensor *t = &ck->t[i];
        fb__jsonw_key(w, t->name);
        fb__jsonw_obj_begin(w);
        fb__jsonw_kstr(w, "dtype", fb_dtype_name(t->dtype));
        fb__jsonw_key(w, "shape");
        fb__jsonw_arr_begin(w);
        for (int d = 0; d < t->ndim; d++)
            fb__jsonw_int(w, t->shape[d]);
        fb__jsonw_arr_end(w);
        fb__jsonw_key(w, "data_offsets");
        fb__jsonw_arr_begin(w);
        fb__jsonw_uint(w, off);
        fb__jsonw_uint(w, off + t->bytes);
        fb__jsonw_arr_end(w);
        fb__jsonw_obj_end(w);
        off += t->bytes;
    }
    fb__jsonw_obj_end(w);
    /* Spaces (the format allows them) up to a multiple of 8 bytes, or of
     * FB__CKPT_DATA_ALIGN where the data section is large enough for the
     * writer to send staging to the file as it is (store.c). */
    uint64_t align = off >= FB__CKPT_DIRECT_MIN ? FB__CKPT_DATA_ALIGN : 8;
    size_t pad = (size_t)((align - (8 + w->len) % align) % align);
    if (!w->oom && w->len + pad + 1 > w->cap) {
        char *nb = realloc(w->buf, w->len + pad + 1);
        if (nb) {
            w->buf = nb;
            w->cap = w->len + pad + 1;
        } else {
            w->oom = 1;
        }
    }
    if (!w->oom) {
        memset(w->buf + w->len, ' ', pad);
        w->len += pad;
        w->buf[w->len] = '\0';
    }
    if (w->oom) {
        fb__jsonw_free(w);
        return -ENOMEM;
    }
    if (w->len > FB__ST_HEADER_MAX) {
        fb__jsonw_free(w);
        return FB_ETOOBIG;
    }
    const size_t p = sizeof FB__ST_HEADER_HASH_PREFIX - 1;
    if (w->len < p + 16 || memcmp(w->buf, FB__ST_HEADER_HASH_PREFIX, p)) {
        fb__jsonw_free(w); /* the writer's own shape: cannot happen */
        return -EINVAL;
    }
    fb__hash_hex(fb__hash(ck->alg, w->buf, w->len), hex);
    memcpy(w->buf + p, hex, 16);
    return 0;
}

void fb__ckpt_say(char *buf, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, size, fmt, ap);
    va_end(ap);
}

/* The writer: wait for the drain beside it to end; its result. */
static int wait_drained(fb_ckpt *ck)
{
    pthread_mutex_lock(&ck->dmu);
    while (!ck->drain_over)
        pthread_cond_wait(&ck->dcv, &ck->dmu);
    int rc = ck->drain_rc;
    pthread_mutex_unlock(&ck->dmu);
    return rc;
}

typedef struct hash_job {
    fb_ckpt *ck;
    int from_staging;
    pthread_t tid;
    uint64_t cpu_ns;    /* the thread's CPU when it ends */
} hash_job;

/* Fill every tensor's hash from the bytes being written. */
static void *hash_all(void *arg)
{
    hash_job *j = arg;
    for (size_t i = 0; i < j->ck->n; i++) {
        fb__ckpt_tensor *t = &j->ck->t[i];
        t->hash = fb__hash(j->ck->alg, fb__ckpt_source(t, j->from_staging),
                           t->bytes);
    }
    j->cpu_ns = fb__thread_cpu_ns();
    return NULL;
}

/*
 * Write, hash and commit this rank's shard for `step` from the staging
 * copies (from_staging) or the tensors themselves.  On failure the
 * temporary file is removed and `why` says what failed.
 */
static int write_shard(fb_ckpt *ck, const char *dir, uint64_t step,
                       int from_staging, uint64_t *bytes_out, char *why,
                       size_t why_size)
{
    fb__shard_out out;
    fb__jsonw hdr = {0};
    int rc;
    ck->last_writer_cpu_ns = 0;
    /* Temporaries of this rank's crashed saves (an earlier process):
     * every step directory once, not this step's at every save. */
    int swept = dir == ck->dir ? 1 : 2;
    if (!(ck->tmp_swept & swept)) {
        (void)fb__ckpt_clean_tmp_all(dir, ck->rank, (int)getpid());
        ck->tmp_swept |= swept;
    }
    /* Header length first (hashes are fixed-width), data, then header. */
    for (size_t i = 0; i < ck->n; i++)
        ck->t[i].hash = 0;
    if ((rc = build_header(ck, step, &hdr))) {
        fb__ckpt_say(why, why_size, "building the header: %s", fb_strerror(rc));
        return rc;
    }
    uint64_t data_off = 8 + hdr.len, off = data_off, file_bytes = data_off;
    fb__jsonw_free(&hdr);
    for (size_t i = 0; i < ck->n; i++)
        file_bytes += ck->t[i].bytes;
    if ((rc = fb__shard_out_begin(&out, dir, step, ck->rank, file_bytes, why,
                                  why_size)))
        return rc;
    int fd = out.fd;
    const char *tmp = out.tmp;
    if ((rc = injected_write_error(step))) {
        fb__ckpt_say(why, why_size, "write %s: %s (injected by FIREBREAK_CKPT_FAIL)",
                 tmp, strerror(-rc));
        goto fail;
    }
    /* With O_DIRECT where the file takes it, hashing as it gathers
     * (store.h); else the loop below, hashing on a second thread while
     * this one writes (the shard is then limited by the slower of the
     * two, not their sum). */
    hash_job hj = {.ck = ck, .from_staging = from_staging};
    int hashing = 0; /* 1: on a thread; -1: here, after writing */
    size_t i = 0, done = 0;
    /* Only the O_DIRECT path takes a drain's chunks as they come: the
     * others wait for its end (ck->beside: persist). */
    if (!hash_while_gathering()) {
        if (ck->beside && (rc = wait_drained(ck)))
            goto fail;
        hashing = pthread_create(&hj.tid, NULL, hash_all, &hj) == 0 ? 1 : -1;
    }
    fb__direct_stats ds;
    rc = fb__ckpt_write_direct(tmp, fd, ck, from_staging, !hashing, data_off,
                               file_bytes - data_off, &ds);
    ck->last_direct_bytes = ds.direct_bytes;
    ck->last_writer_cpu_ns = ds.gather_cpu_ns;
    if (rc == 1) {
        /* (With a hashing thread the drain was over before it started.) */
        if (ck->beside && !hashing && (rc = wait_drained(ck)))
            goto fail;
        rc = 0;
        if (!hashing)
            hashing = pthread_create(&hj.tid, NULL, hash_all, &hj) == 0 ? 1 : -1;
    } else if (rc) {
        fb__ckpt_say(why, why_size, "write %s: %s", tmp, strerror(-rc));
    } else {
        i = ck->n; /* all written, all hashed */
        off = file_bytes;
    }
    /* Data in batches of up to CHUNK_BYTES and IOV_BATCH pieces: one
     * pwritev each, so many small tensors cost few system calls. */
    struct iovec iov[IOV_BATCH];
    fb__write_behind wb = {data_off, data_off}; /* store.h */
    while (i < ck->n && !rc) {
        int np = 0;
        size_t total = 0;
        while (i < ck->n && np < IOV_BATCH && total < CHUNK_BYTES) {
            fb__ckpt_tensor *t = &ck->t[i];
            char *src = (char *)fb__ckpt_source(t, from_staging);
            size_t n = t->bytes - done < CHUNK_BYTES - total ? t->bytes - done
                                                             : CHUNK_BYTES - total;
            if (n) {
                iov[np].iov_base = src + done;
                iov[np].iov_len = n;
                np++;
            }
            total += n;
            done += n;
            if (done == t->bytes) {
                i++;
                done = 0;
            }
        }
        if (np && (rc = fb__ckpt_pwritev_all(fd, iov, np, off)))
            fb__ckpt_say(why, why_size, "write %s: %s", tmp, strerror(-rc));
        off += total;
        if (!rc)
            fb__ckpt_write_behind(fd, &wb, off);
    }
    if (hashing > 0) {
        pthread_join(hj.tid, NULL);
        ck->last_writer_cpu_ns += hj.cpu_ns;
    } else if (hashing < 0) {
        hash_all(&hj);
    }
    /* Committed only once the drain beside is over and whole. */
    if (rc || (ck->beside && (rc = wait_drained(ck))))
        goto fail;
    if ((rc = build_header(ck, step, &hdr))) {
        fb__ckpt_say(why, why_size, "building the header: %s", fb_strerror(rc));
        goto fail;
    }
    unsigned char lenbuf[8];
    for (int b = 0; b < 8; b++)
        lenbuf[b] = (unsigned char)((uint64_t)hdr.len >> (8 * b));
    if ((rc = fb__ckpt_pwrite_all(fd, lenbuf, 8, 0)) ||
        (rc = fb__ckpt_pwrite_all(fd, hdr.buf, hdr.len, 8))) {
        fb__ckpt_say(why, why_size, "write %s: %s", tmp, strerror(-rc));
        goto fail;
    }
    fb__jsonw_free(&hdr);
    /* fsync, rename, fsync of the directory; on a failed directory fsync
     * the shard is in place but maybe not durable: reported, kept. */
    if ((rc = fb__shard_out_commit(&out, step, crash_hook, why, why_size)))
        return rc;
    crash_hook("after_rename", step);
    *bytes_out = off;
    return 0;
fail:
    fb__jsonw_free(&hdr);
    fb__shard_out_abort(&out);
    return rc;
}

/* The step being saved, for crash points inside retention. */
static _Thread_local uint64_t saving_step;

static void delete_hook(const char *point, uint64_t deleted_step)
{
    (void)deleted_step;
    crash_hook(point, saving_step);
}

static void report_deleted(uint64_t step)
{
    fb__lib_report(FB__REPORT_CKPT_DELETED, 0, step, 0, 0, 0, NULL);
}

/* Say that save STEP failed, WHY (and AFTER), and keep it as the save's
 * message for a caller that keeps messages (fb__say_to_keeper: wait, a
 * later save returning the failure).  On the thread that ran the save,
 * while it is busy: nothing else reads last_why then. */
static void save_failed(fb_ckpt *ck, uint64_t step, const char *why, const char *after)
{
    snprintf(ck->last_why, sizeof ck->last_why, "checkpoint step %llu (rank %d) "
             "failed: %s%s", (unsigned long long)step, ck->rank, why, after);
    fb__say("%s", ck->last_why);
}

/* Finish a write-protect snapshot: copy what save protected, after which
 * no write of the program waits any more.  0, or the error (said and
 * reported; the snapshot is abandoned and later saves copy).  On the
 * drainer thread, or the writer's (drain_snapshot: *stall_ns gains the
 * writes' waits). */
static int run_drain(fb_ckpt *ck, uint64_t step)
{
    /* Tests hold the copy back to make writes wait for it. */
    test_delay("FIREBREAK_CKPT_DRAIN_DELAY_MS");
    int wrc = fb__wp_drain(ck);
    if (wrc) {
        char why[200];
        fb__ckpt_say(why, sizeof why, "lifting the write protection failed (%s); "
                     "snapshot abandoned, later saves copy", strerror(-wrc));
        save_failed(ck, step, why, "");
        fb__lib_report(FB__REPORT_CKPT_FAILED, wrc, step, 0, 0, 0, why);
    }
    return wrc;
}

/* A drain over: its numbers into the save's.  On the writer thread. */
static void drain_counted(fb_ckpt *ck, uint64_t *stall_ns)
{
    ck->job_protected = 0;
    ck->last_faults = ck->wp.faults;
    *stall_ns += ck->wp.fault_ns; /* writes that waited count as stall */
    ck->last_stall_ns = *stall_ns;
}

static int drain_snapshot(fb_ckpt *ck, uint64_t step, uint64_t *stall_ns)
{
    int wrc = run_drain(ck, step);
    drain_counted(ck, stall_ns);
    return wrc;
}

/* Write + report + retention; runs on the writer thread or the caller. */
static int persist(fb_ckpt *ck, uint64_t step, int from_staging, uint64_t stall_ns)
{
    char why[FB__REPORT_TEXT_MAX + 200] = "";
    uint64_t bytes = 0, cpu0 = fb__thread_cpu_ns();
    char how[80];
    /* A write-protect snapshot is drained beside the write by the drainer
     * (from save on), the write taking each chunk once it is in staging;
     * without a drainer, here first. */
    int beside = ck->job_protected && ck->job_beside;
    if (ck->job_protected && !beside) {
        int wrc = drain_snapshot(ck, step, &stall_ns);
        if (wrc)
            return wrc;
        ck->job_drained = 1;
    }
    ck->beside = beside;
    test_delay("FIREBREAK_CKPT_WRITE_DELAY_MS");
    uint64_t t0 = fb__now_ns();
    /* Node memory first when the supervisor gave one (tier.c). */
    const char *dir = fb__tier_save_dir(ck, step);
    int rc = write_shard(ck, dir, step, from_staging, &bytes, why, sizeof why);
    if ((rc == -ENOSPC || rc == -EDQUOT) && dir != ck->dir) {
        /* Node memory full (a /dev/shm smaller than the steps it keeps;
         * its retention runs after a commit there).  The drain beside, if
         * any, ends first: a second write takes its bytes from staging
         * whole.  Again in node memory once the steps older than its
         * newest complete one are evicted (a step split between the two
         * tiers, some ranks' shards in each, is complete in neither);
         * else to storage, said, instead of every save failing from now
         * on. */
        int full = rc;
        if (beside && (rc = wait_drained(ck)) == 0)
            ck->beside = 0;
        if (rc == 0 || rc == full) {
            rc = full;
            if (fb__tier_evict_older(ck, step) > 0) {
                why[0] = '\0';
                rc = write_shard(ck, dir, step, from_staging, &bytes, why, sizeof why);
            }
        }
        if (rc == -ENOSPC || rc == -EDQUOT) {
            char text[FB__REPORT_TEXT_MAX];
            snprintf(text, sizeof text, "does not fit in node memory (%.*s); saved "
                     "to storage", (int)(sizeof text - 60), why);
            fb__say("rank %d: checkpoint step %llu %s\n", ck->rank,
                    (unsigned long long)step, text);
            fb__lib_report(FB__REPORT_NOTE, 0, step, 0, 0, 0, text);
            why[0] = '\0';
            dir = ck->dir;
            rc = write_shard(ck, dir, step, from_staging, &bytes, why, sizeof why);
        }
    }
    uint64_t persist_ns = fb__now_ns() - t0;
    if (beside) {
        /* Over already unless the write failed first: nothing may stay
         * protected once this save is done. */
        int wrc = wait_drained(ck);
        ck->beside = 0;
        drain_counted(ck, &stall_ns);
        ck->job_drained = 1;
        if (wrc) /* said and reported by the drainer; the write gave up */
            return wrc;
    }
    if (!from_staging)
        snprintf(how, sizeof how, "synchronous save");
    else if (ck->job_drained) /* here, beside, or ahead of a purge */
        snprintf(how, sizeof how, "write-protect snapshot, %llu writes waited",
                 (unsigned long long)ck->last_faults);
    else
        snprintf(how, sizeof how, "copy snapshot");
    ck->job_drained = 0;
    /* write_shard set its helper threads' share */
    ck->last_writer_cpu_ns += fb__thread_cpu_ns() - cpu0;
    if (rc) {
        save_failed(ck, step, why, "; older checkpoints are intact");
        fb__lib_report(FB__REPORT_CKPT_FAILED, rc, step, 0, 0, 0, why);
        return rc;
    }
    ck->last_bytes = bytes;
    ck->last_persist_ns = persist_ns;
    if (ck->tier.mem_dir[0])
        snprintf(how + strlen(how), sizeof how - strlen(how), ", in %s",
                 dir == ck->dir ? "storage" : "node memory");
    fb__lib_report(FB__REPORT_CKPT_COMMITTED, 0, step, bytes, stall_ns, persist_ns,
                   how);
    fb__tier_committed(ck, step, dir);
    if (ck->rank == 0 && ck->keep > 0) {
        saving_step = step;
        /* With a writer thread, the old steps are only hidden here: their
         * bytes are removed when no save waits (writer_main), not before
         * this save counts as done (fb_ckpt_wait). */
        int defer = ck->writer_started;
        int r = fb__ckpt_retain(ck->dir, ck->world_size, ck->keep, defer,
                                delete_hook, report_deleted);
        if (r < 0)
            fb__say("deleting old checkpoints in %s: %s\n",
                    ck->dir, fb_strerror(r));
        if (defer) {
            pthread_mutex_lock(&ck->mu);
            ck->purge = 1; /* also what a crashed deletion left */
            pthread_cond_broadcast(&ck->cv);
            pthread_mutex_unlock(&ck->mu);
        }
    }
    return 0;
}

/* Asked before each file the purge removes: stop for a save waiting, once
 * a purge, so that a save never waits for an old checkpoint's removal and
 * what waits for removal never grows past one more checkpoint (a writer
 * always busy would otherwise fill the disk with hidden ones). */
static int purge_yield(void *arg)
{
    fb_ckpt *ck = arg;
    pthread_mutex_lock(&ck->mu);
    int yield = ck->job_ready && !ck->purge_yielded;
    if (yield)
        ck->purge_yielded = 1;
    /* And for the drain of a write-protect snapshot, every time: the
     * program's writes wait on it.  The purge then goes on, and the write
     * after it (writer_main). */
    else if (ck->job_ready && ck->job_protected && !ck->job_drained &&
             !ck->job_beside)
        yield = ck->purge_resume = 1;
    pthread_mutex_unlock(&ck->mu);
    return yield;
}

/* The writer's purge, with mu held on entry and return. */
static void writer_purge(fb_ckpt *ck)
{
    int rc = 1; /* held by the test gate: nothing done */
    if (!purge_gate_closed()) {
        pthread_mutex_unlock(&ck->mu);
        rc = fb__ckpt_purge(ck->dir, purge_yield, ck);
        if (rc < 0)
            fb__say("removing deleted checkpoints in %s: %s\n",
                    ck->dir, fb_strerror(rc));
        pthread_mutex_lock(&ck->mu);
    }
    if (rc != 1) {
        ck->purge = 0;
        ck->purge_yielded = 0;
    } else if (!ck->job_ready) { /* held by the test gate: look again soon */
        struct timespec ts = fb__wall_after_ms(10);
        pthread_cond_timedwait(&ck->cv, &ck->mu, &ts);
    }
}

/* ------------------------------------------------------------------------
 * The writer thread
 * ---------------------------------------------------------------------- */

/* The writer runs with every signal blocked (set by fb_ckpt_open around
 * pthread_create): a handler running on it while pages are protected could
 * write one and wait for itself. */
static void *writer_main(void *arg)
{
    fb_ckpt *ck = arg;
    pthread_mutex_lock(&ck->mu);
    for (;;) {
        while (!ck->job_ready && !ck->stop && !ck->purge)
            pthread_cond_wait(&ck->cv, &ck->mu);
        if (ck->job_ready && ck->job_protected && !ck->job_drained &&
            !ck->job_beside) {
            /* Not drained beside (no drainer thread, or the test hook), a
             * write-protect snapshot is drained here at once, also while a
             * purge that let a save go first holds this one's write back
             * (purge_yield): the program's writes wait on the drain,
             * and must not wait on old checkpoints' removal too (measured
             * with torch's AdamW right after each save, keep=2: 0.5-0.8 s
             * of writes waiting, every other save). */
            uint64_t step = ck->job_step, stall = ck->job_stall_ns;
            pthread_mutex_unlock(&ck->mu);
            int rc = drain_snapshot(ck, step, &stall);
            pthread_mutex_lock(&ck->mu);
            ck->job_stall_ns = stall;
            if (rc) {
                ck->job_ready = 0;
                ck->purge_resume = 0;
                ck->last_rc = rc;
                if (ck->on_error == FB_CKPT_ERROR_STOP && !ck->sticky_rc)
                    ck->sticky_rc = rc;
                ck->busy = 0;
                pthread_cond_broadcast(&ck->cv);
                continue;
            }
            ck->job_drained = 1;
        }
        if (ck->job_ready && ck->purge_resume) {
            /* The purge stopped for the drain only: the write waits for
             * the rest of it, as it did before. */
            ck->purge_resume = 0;
            writer_purge(ck);
            continue;
        }
        if (ck->job_ready) {
            uint64_t step = ck->job_step, stall = ck->job_stall_ns;
            ck->job_ready = 0;
            pthread_mutex_unlock(&ck->mu);
            int rc = persist(ck, step, 1, stall);
            pthread_mutex_lock(&ck->mu);
            ck->last_rc = rc;
            if (rc && ck->on_error == FB_CKPT_ERROR_STOP && !ck->sticky_rc)
                ck->sticky_rc = rc;
            ck->busy = 0;
            pthread_cond_broadcast(&ck->cv);
            continue;
        }
        if (ck->purge) { /* before stopping: fb_ckpt_close leaves none */
            writer_purge(ck);
            continue;
        }
        if (ck->stop)
            break;
    }
    pthread_mutex_unlock(&ck->mu);
    return NULL;
}

/* The drainer: each write-protect snapshot save posts is drained at
 * once, whatever the writer is busy with (a purge of old checkpoints, the
 * shard's first bytes), while the writer writes what is copied.  Every
 * signal blocked, as on the writer: a handler running here while pages
 * are protected could write one and wait for itself. */
static void *drainer_main(void *arg)
{
    fb_ckpt *ck = arg;
    pthread_mutex_lock(&ck->dmu);
    for (;;) {
        while (!ck->drain_pending && !ck->drain_stop)
            pthread_cond_wait(&ck->dcv, &ck->dmu);
        if (!ck->drain_pending)
            break;
        ck->drain_pending = 0;
        uint64_t step = ck->drain_step;
        pthread_mutex_unlock(&ck->dmu);
        int rc = run_drain(ck, step);
        pthread_mutex_lock(&ck->dmu);
        ck->drain_rc = rc;
        ck->drain_over = 1;
        pthread_cond_broadcast(&ck->dcv);
    }
    pthread_mutex_unlock(&ck->dmu);
    return NULL;
}

int fb__ckpt_busy(fb_ckpt *ck)
{
    pthread_mutex_lock(&ck->mu);
    int busy = ck->busy;
    pthread_mutex_unlock(&ck->mu);
    return busy;
}

int fb__ckpt_wait_idle(fb_ckpt *ck)
{
    pthread_mutex_lock(&ck->mu);
    while (ck->busy)
        pthread_cond_wait(&ck->cv, &ck->mu);
    int rc = ck->last_rc;
    if (rc && ck->last_why[0])
        fb__say_to_keeper("%s", ck->last_why);
    pthread_mutex_unlock(&ck->mu);
    return rc;
}

/* ------------------------------------------------------------------------
 * Public API
 * ---------------------------------------------------------------------- */

int fb_ckpt_open(fb_ckpt **out, const fb_ckpt_options *opt_in)
{
    fb_ckpt_options opt;
    int rc = options_read(opt_in, &opt);
    if (rc)
        return rc;
    const char *dir = opt.dir ? opt.dir : fb__lib_ckpt_dir();
    if (!dir || !*dir) {
        fb__say("fb_ckpt_open: no checkpoint directory (set "
                "options.dir, or run under `firebreak run`)\n");
        return -EINVAL;
    }
    int rank = opt.rank >= 0 ? opt.rank : fb_rank();
    int world = opt.world_size > 0 ? opt.world_size : fb_world_size();
    if (world < 1 || rank < 0 || rank >= world || rank > 99999 ||
        opt.keep < 0 || opt.io_threads < 0 ||
        (opt.on_busy != FB_CKPT_BUSY_WAIT && opt.on_busy != FB_CKPT_BUSY_SKIP) ||
        (unsigned)opt.snapshot > FB_CKPT_SNAPSHOT_PROTECT ||
        (opt.on_error != FB_CKPT_ERROR_CONTINUE && opt.on_error != FB_CKPT_ERROR_STOP)) {
        fb__say("fb_ckpt_open: invalid options (rank %d of "
                "world size %d, keep %d)\n", rank, world, opt.keep);
        return -EINVAL;
    }
    fb_ckpt *ck = calloc(1, sizeof *ck);
    if (!ck)
        return -ENOMEM;
    if (fb__fmt(ck->dir, sizeof ck->dir, "%s", dir)) {
        rc = -ENAMETOOLONG;
        goto fail;
    }
    if ((rc = fb__mkdir_p(ck->dir, 0755))) {
        fb__say("fb_ckpt_open: mkdir %s: %s\n", ck->dir,
                fb_strerror(rc));
        goto fail;
    }
    ck->rank = rank;
    ck->world_size = world;
    ck->keep = opt.keep ? opt.keep : 2;
    ck->async = opt.async != 0;
    ck->on_busy = opt.on_busy;
    ck->on_error = opt.on_error;
    ck->io_threads = opt.io_threads ? opt.io_threads : 4;
    if (ck->io_threads > MAX_IO_THREADS)
        ck->io_threads = MAX_IO_THREADS;
    ck->alg = fb__hash_default();
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    ck->copy_threads = cpus < 2 ? 1 : cpus < ck->io_threads ? (int)cpus : ck->io_threads;
    if ((rc = fb__tier_open(ck, opt.dir)))
        goto fail;
    ck->wp.fd = -1;
    ck->snapshot = opt.snapshot;
    const char *snap = fb__getenv("FIREBREAK_CKPT_SNAPSHOT");
    if (snap) {
        if (!strcmp(snap, "auto"))
            ck->snapshot = FB_CKPT_SNAPSHOT_AUTO;
        else if (!strcmp(snap, "copy"))
            ck->snapshot = FB_CKPT_SNAPSHOT_COPY;
        else if (!strcmp(snap, "protect"))
            ck->snapshot = FB_CKPT_SNAPSHOT_PROTECT;
        else {
            fb__say("FIREBREAK_CKPT_SNAPSHOT=%s: expected "
                    "auto, copy or protect\n", snap);
            rc = -EINVAL;
            goto fail;
        }
    }
    if (ck->async && ck->snapshot != FB_CKPT_SNAPSHOT_COPY) {
        char why[256];
        if ((rc = fb__wp_open(&ck->wp, why, sizeof why)) &&
            ck->snapshot == FB_CKPT_SNAPSHOT_PROTECT) {
            fb__say("fb_ckpt_open: write-protect snapshots "
                    "asked for but unavailable: %s\n", why);
            goto fail;
        }
        rc = 0;
    }
    pthread_mutex_init(&ck->mu, NULL);
    pthread_cond_init(&ck->cv, NULL);
    pthread_mutex_init(&ck->dmu, NULL);
    pthread_cond_init(&ck->dcv, NULL);
    if (ck->async) {
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        rc = -pthread_create(&ck->writer, NULL, writer_main, ck);
        /* Without it the writer drains, then writes. */
        if (!rc && ck->wp.fd >= 0)
            ck->drainer_started =
                pthread_create(&ck->drainer, NULL, drainer_main, ck) == 0;
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (rc) {
            fb__wp_close(&ck->wp);
            pthread_mutex_destroy(&ck->mu);
            pthread_cond_destroy(&ck->cv);
            pthread_mutex_destroy(&ck->dmu);
            pthread_cond_destroy(&ck->dcv);
            goto fail;
        }
        ck->writer_started = 1;
    }
    track_open(ck, 1);
    *out = ck;
    return 0;
fail:
    free(ck);
    return rc;
}

/* names.h's view of the registered names. */
static const char *tensor_name(const void *arg, size_t i)
{
    return ((const fb_ckpt *)arg)->t[i].name;
}

static int valid_name(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n > FB__ST_NAME_MAX || !strcmp(name, "__metadata__"))
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)name[i] < 0x20 || (unsigned char)name[i] > 0x7e)
            return 0;
    return 1;
}

int fb_ckpt_register_slice(fb_ckpt *ck, const char *name, fb_dtype dtype,
                           int ndim, const int64_t *shape, void *data,
                           const int64_t *global_shape,
                           const int64_t *global_offset)
{
    if (!ck || !name)
        return -EINVAL;
    if (fb__ckpt_busy(ck))
        return FB_ESTATE;
    if (!valid_name(name) || fb_dtype_size(dtype) == 0 || ndim < 0 ||
        ndim > FB__ST_MAX_DIMS || (ndim > 0 && !shape)) {
        fb__say("fb_ckpt_register: tensor \"%.100s\": bad "
                "name, dtype or rank (names: 1-%d printable ASCII "
                "bytes; ndim 0-%d)\n", name, FB__ST_NAME_MAX,
                FB__ST_MAX_DIMS);
        return -EINVAL;
    }
    uint64_t bytes = fb_dtype_size(dtype);
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0 || __builtin_mul_overflow(bytes, (uint64_t)shape[d], &bytes) ||
            (global_shape && (global_shape[d] < 0 || !global_offset ||
                              global_offset[d] < 0 ||
                              global_offset[d] > global_shape[d] - shape[d])))
            return -EINVAL;
    }
    if (bytes > SIZE_MAX / 2 || (bytes && !data))
        return -EINVAL;
    if (fb__names_find(&ck->names, name, tensor_name, ck) >= 0) {
        fb__say("fb_ckpt_register: tensor \"%s\" is "
                "already registered\n", name);
        return -EINVAL;
    }
    if (ck->n == ck->cap) {
        size_t cap = ck->cap ? ck->cap * 2 : 16;
        fb__ckpt_tensor *nt = realloc(ck->t, cap * sizeof *nt);
        if (!nt)
            return -ENOMEM;
        ck->t = nt;
        ck->cap = cap;
    }
    fb__ckpt_tensor *t = &ck->t[ck->n];
    memset(t, 0, sizeof *t);
    if (!(t->name = strdup(name)))
        return -ENOMEM;
    t->dtype = dtype;
    t->ndim = ndim;
    for (int d = 0; d < ndim; d++) {
        t->shape[d] = shape[d];
        t->global_shape[d] = global_shape ? global_shape[d] : shape[d];
        t->global_offset[d] = global_shape ? global_offset[d] : 0;
    }
    t->data = data;
    t->bytes = (size_t)bytes;
    t->on_device = t->bytes && fb__cuda_is_device(data);
    if ((ck->async || t->on_device) && t->bytes) {
        /* Its bytes start at this offset into the data section (in the
         * order of registration), which the header's padding aligns to
         * FB__CKPT_DATA_ALIGN: staging at the same phase is written to
         * the file as it is (store.c, fb__ckpt_write_direct). */
        uint64_t at = 0;
        for (size_t i = 0; i < ck->n; i++)
            at += ck->t[i].bytes;
        int rc = fb__staging_alloc(&t->stage, t->bytes,
                                   (size_t)(at % FB__CKPT_DATA_ALIGN));
        if (rc) {
            free(t->name);
            return rc;
        }
        t->staging = t->stage.ptr;
        /* Pinned staging lets the device copy run at DMA speed; pageable
         * memory still works, only slower. */
        t->pinned = t->on_device && fb__cuda_pin(t->staging, t->bytes) == 0;
        t->wp = ck->wp.fd >= 0 && !t->on_device && t->bytes >= WP_MIN_BYTES &&
                fb__wp_register(&ck->wp, data, t->bytes) == 0;
        ck->wp.planned = 0;
    }
    if (fb__names_add(&ck->names, ck->n, tensor_name, ck)) {
        if (t->pinned)
            fb__cuda_unpin(t->staging);
        fb__staging_free(&t->stage);
        free(t->name);
        return -ENOMEM;
    }
    ck->n++;
    return 0;
}

int fb_ckpt_register(fb_ckpt *ck, const char *name, fb_dtype dtype, int ndim,
                     const int64_t *shape, void *data)
{
    return fb_ckpt_register_slice(ck, name, dtype, ndim, shape, data, NULL, NULL);
}

typedef struct copy_job {
    fb_ckpt *ck;
    int skip_wp;               /* leave write-protected tensors out  */
    size_t first, last;        /* tensors [first, last)             */
    size_t skip, stop;         /* bytes of tensor first to skip; bytes of
                                  tensor last-1 to stop at (0: all)   */
} copy_job;

static void *copy_range(void *arg)
{
    copy_job *j = arg;
    for (size_t i = j->first; i < j->last; i++) {
        fb__ckpt_tensor *t = &j->ck->t[i];
        if (!t->bytes || t->on_device || (j->skip_wp && t->wp))
            continue;
        size_t from = i == j->first ? j->skip : 0;
        size_t to = i == j->last - 1 && j->stop ? j->stop : t->bytes;
        if (to > from)
            memcpy((char *)t->staging + from, (const char *)t->data + from, to - from);
    }
    return NULL;
}

/* Host tensors into staging, split by bytes over up to copy_threads
 * threads (the caller is one): one core's memcpy does not reach the
 * memory bandwidth of a multi-core node. */
static void copy_host(fb_ckpt *ck, int skip_wp)
{
    /* Write-protected tensors: only the partial pages at their ends. */
    if (skip_wp)
        fb__wp_copy_edges(ck);
    size_t total = 0;
#define COPIED(t) ((t)->on_device || (skip_wp && (t)->wp) ? 0 : (t)->bytes)
    for (size_t i = 0; i < ck->n; i++)
        total += COPIED(&ck->t[i]);
    int nt = ck->copy_threads;
    if (total < (64u << 20) || nt < 2) {
        copy_job all = {ck, skip_wp, 0, ck->n, 0, 0};
        copy_range(&all);
        return;
    }
    copy_job jobs[MAX_IO_THREADS];
    pthread_t tid[MAX_IO_THREADS];
    int started[MAX_IO_THREADS] = {0};
    size_t per = total / (size_t)nt + 1, i = 0, at = 0; /* at: bytes into t[i] */
    for (int k = 0; k < nt; k++) {
        copy_job *j = &jobs[k];
        j->ck = ck;
        j->skip_wp = skip_wp;
        j->first = i;
        j->skip = at;
        size_t want = k == nt - 1 ? SIZE_MAX : per;
        while (i < ck->n && want) {
            fb__ckpt_tensor *t = &ck->t[i];
            size_t left = COPIED(t) ? t->bytes - at : 0;
            if (left > want) {
                at += want;
                want = 0;
                break;
            }
            want -= left;
            i++;
            at = 0;
        }
        /* This job ends inside tensor i (at > 0) or just before it. */
        j->last = at ? i + 1 : i;
        j->stop = at;
    }
    for (int k = 1; k < nt; k++)
        started[k] = pthread_create(&tid[k], NULL, copy_range, &jobs[k]) == 0;
    copy_range(&jobs[0]);
    for (int k = 1; k < nt; k++) {
        if (started[k])
            pthread_join(tid[k], NULL);
        else
            copy_range(&jobs[k]);
    }
#undef COPIED
}

/*
 * Take the snapshot: device tensors are queued on the CUDA stream first so
 * the DMA overlaps the host side; host tensors only when `host` (async):
 * write-protected where planned (*protected_out = 1; the writer copies
 * them), the rest copied here.  Returns when every copy is done.
 */
static int snapshot(fb_ckpt *ck, int host, int *protected_out)
{
    int rc = 0, queued = 0, prot = 0;
    for (size_t i = 0; i < ck->n && !rc; i++)
        if (ck->t[i].on_device) {
            rc = fb__cuda_d2h_async(ck->t[i].staging, ck->t[i].data, ck->t[i].bytes);
            queued = 1;
        }
    if (host && !rc) {
        if (ck->wp.fd >= 0 && fb__wp_plan(ck) == 0 && ck->wp.nt > 0)
            prot = fb__wp_protect(ck) == 0;
        copy_host(ck, prot);
    }
    if (queued) {
        int r = fb__cuda_sync();
        if (!rc)
            rc = r;
    }
    if (rc && prot) {
        /* The save fails: release the protection here, never leave it. */
        (void)fb__wp_drain(ck);
        prot = 0;
    }
    *protected_out = prot;
    return rc;
}

int fb_ckpt_save(fb_ckpt *ck, uint64_t step)
{
    if (!ck)
        return -EINVAL;
    if (step > (uint64_t)INT64_MAX) { /* a shard's metadata holds an int64 */
        fb__say("checkpoint step %llu refused: steps go up to %lld\n",
                (unsigned long long)step, (long long)INT64_MAX);
        return -EINVAL;
    }
    pthread_mutex_lock(&ck->mu);
    if (ck->sticky_rc) {
        int rc = ck->sticky_rc;
        if (ck->last_why[0]) /* the failure that stopped saves */
            fb__say_to_keeper("%s", ck->last_why);
        pthread_mutex_unlock(&ck->mu);
        return rc;
    }
    if (ck->busy && ck->on_busy == FB_CKPT_BUSY_SKIP) {
        uint64_t inflight = ck->job_step;
        pthread_mutex_unlock(&ck->mu);
        char text[96];
        snprintf(text, sizeof text, "step %llu still being written",
                 (unsigned long long)inflight);
        fb__lib_report(FB__REPORT_CKPT_SKIPPED, FB_EBUSY, step, 0, 0, 0, text);
        fb__say("checkpoint step %llu skipped: %s\n",
                (unsigned long long)step, text);
        return FB_EBUSY;
    }
    /* Waiting for the previous save is part of this one: in the checkpoint
     * phase (the supervisor applies the checkpoint timeout, not the hang
     * timeout of training) and inside the stall this save reports. */
    pthread_mutex_unlock(&ck->mu);
    fb__lib_report(FB__REPORT_CKPT_BEGIN, 0, step, 0, 0, 0, NULL);
    /* back to the phase it was called in (an evaluation's, start-up's),
     * not always training's */
    fb_phase before = fb__ckpt_phase();
    fb_set_phase(FB_PHASE_CHECKPOINT);
    uint64_t t0 = fb__now_ns();
    pthread_mutex_lock(&ck->mu);
    while (ck->busy)
        pthread_cond_wait(&ck->cv, &ck->mu);
    if (ck->sticky_rc) {
        int rc = ck->sticky_rc;
        if (ck->last_why[0])
            fb__say_to_keeper("%s", ck->last_why);
        pthread_mutex_unlock(&ck->mu);
        fb_set_phase(before);
        return rc;
    }
    ck->busy = 1;
    ck->last_why[0] = '\0';
    ck->job_step = step;
    pthread_mutex_unlock(&ck->mu);

    int prot = 0;
    int rc = snapshot(ck, ck->async, &prot);
    if (rc) {
        fb_set_phase(before);
        save_failed(ck, step, "copying device tensors to host memory failed", "");
        fb__lib_report(FB__REPORT_CKPT_FAILED, rc, step, 0, 0, 0,
                       "copying device tensors to host memory failed");
        pthread_mutex_lock(&ck->mu);
        ck->busy = 0;
        ck->last_rc = rc;
        if (ck->on_error == FB_CKPT_ERROR_STOP)
            ck->sticky_rc = rc;
        pthread_cond_broadcast(&ck->cv);
        pthread_mutex_unlock(&ck->mu);
        return ck->on_error == FB_CKPT_ERROR_STOP ? rc : 0;
    }
    if (ck->async) {
        uint64_t stall = fb__now_ns() - t0;
        ck->last_stall_ns = ck->last_save_ns = stall;
        ck->last_protected = prot;
        ck->last_faults = 0;
        fb_set_phase(before);
        int beside = prot && ck->drainer_started && drain_beside();
        if (beside) {
            /* Posted before the job: the writer's gates see this drain's
             * progress, never the last one's end. */
            pthread_mutex_lock(&ck->dmu);
            ck->drain_step = step;
            ck->drain_over = ck->drain_rc = ck->edges_placed = 0;
            ck->drain_pending = 1;
            pthread_cond_broadcast(&ck->dcv);
            pthread_mutex_unlock(&ck->dmu);
        }
        pthread_mutex_lock(&ck->mu);
        ck->job_protected = prot;
        ck->job_beside = beside;
        ck->job_stall_ns = stall;
        ck->job_ready = 1;
        pthread_cond_broadcast(&ck->cv);
        pthread_mutex_unlock(&ck->mu);
        return 0;
    }
    rc = persist(ck, step, 0, 0);
    ck->last_stall_ns = fb__now_ns() - t0;
    fb_set_phase(before);
    pthread_mutex_lock(&ck->mu);
    ck->busy = 0;
    ck->last_rc = rc;
    if (rc && ck->on_error == FB_CKPT_ERROR_STOP)
        ck->sticky_rc = rc;
    pthread_cond_broadcast(&ck->cv);
    pthread_mutex_unlock(&ck->mu);
    return ck->on_error == FB_CKPT_ERROR_STOP ? rc : 0;
}

fb_phase fb__ckpt_phase(void)
{
    return fb__lib_phase();
}

/* Wait for the save in flight in the checkpoint phase, so the supervisor
 * times the wait with the checkpoint limit, not as silence in training;
 * then back to the phase before. */
static int wait_in_ckpt_phase(fb_ckpt *ck)
{
    if (!fb__ckpt_busy(ck))
        return fb__ckpt_wait_idle(ck);
    fb_phase before = fb__ckpt_phase();
    fb_set_phase(FB_PHASE_CHECKPOINT);
    int rc = fb__ckpt_wait_idle(ck);
    fb_set_phase(before);
    return rc;
}

int fb_ckpt_wait(fb_ckpt *ck)
{
    return ck ? wait_in_ckpt_phase(ck) : -EINVAL;
}

void fb_ckpt_close(fb_ckpt *ck)
{
    if (!ck)
        return;
    track_open(ck, 0);
    wait_in_ckpt_phase(ck);
    if (ck->writer_started) {
        pthread_mutex_lock(&ck->mu);
        ck->stop = 1;
        pthread_cond_broadcast(&ck->cv);
        pthread_mutex_unlock(&ck->mu);
        pthread_join(ck->writer, NULL);
    }
    if (ck->drainer_started) { /* idle: the last save is done */
        pthread_mutex_lock(&ck->dmu);
        ck->drain_stop = 1;
        pthread_cond_broadcast(&ck->dcv);
        pthread_mutex_unlock(&ck->dmu);
        pthread_join(ck->drainer, NULL);
    }
    fb__wp_close(&ck->wp);
    for (size_t i = 0; i < ck->n; i++) {
        if (ck->t[i].pinned)
            fb__cuda_unpin(ck->t[i].staging);
        fb__staging_free(&ck->t[i].stage);
        free(ck->t[i].name);
    }
    free(ck->t);
    fb__names_free(&ck->names);
    pthread_mutex_destroy(&ck->mu);
    pthread_cond_destroy(&ck->cv);
    pthread_mutex_destroy(&ck->dmu);
    pthread_cond_destroy(&ck->dcv);
    free(ck);
}

const char *fb_ckpt_dir(const fb_ckpt *ck)
{
    return ck ? ck->dir : NULL;
}
