/*
 * test_protect.c -- write-protect snapshots (src/ckpt/protect.c): the
 * checkpoint holds the tensors as they were when fb_ckpt_save was called,
 * whatever the program writes right after, and nothing ever waits forever.
 * FIREBREAK_CKPT_DRAIN_DELAY_MS holds the writer's copy back so that the
 * writes below really land on protected pages.  `test_protect CASE`;
 * `test_protect --list` names them (the table at the end).
 *
 * Exit 77 (skipped) where the kernel refuses userfaultfd to this process,
 * or the case needs the test hooks and the build has none.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ckpt/engine.h"
#include "ckpt/store.h"
#include "common/util.h"
#include "firebreak/firebreak.h"
#include "../check.h"

#define SKIP 77

static char root[256];

static fb_ckpt *open_keep(const char *dir, fb_ckpt_snapshot mode, int keep)
{
    fb_ckpt_options o;
    fb_ckpt_options_init(&o);
    o.dir = dir;
    o.rank = 0;
    o.world_size = 1;
    o.keep = keep;
    o.snapshot = mode;
    fb_ckpt *ck = NULL;
    int rc = fb_ckpt_open(&ck, &o);
    return rc ? NULL : ck;
}

static fb_ckpt *open_mode(const char *dir, fb_ckpt_snapshot mode)
{
    return open_keep(dir, mode, 4);
}

static void fill(void *p, size_t n, unsigned seed)
{
    unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        b[i] = (unsigned char)((i * 2654435761u + seed * 40503u) >> 13);
}

static int same(const void *p, size_t n, unsigned seed)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i] != (unsigned char)((i * 2654435761u + seed * 40503u) >> 13))
            return 0;
    return 1;
}

static int zero(const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i])
            return 0;
    return 1;
}

/* Tensors in every kind of memory a program hands us. */
enum { T_TINY, T_SMALL, T_HEAP0, T_HEAP7 = T_HEAP0 + 7, T_MALLOC, T_HUGE,
       T_UNTOUCHED, T_COUNT };

typedef struct set {
    void *p[T_COUNT];
    size_t n[T_COUNT];
    void *huge_map, *untouched_map;
    size_t huge_len, untouched_len;
} set;

static void set_make(set *s)
{
    memset(s, 0, sizeof *s);
    s->n[T_TINY] = 100;              /* below the threshold: copied       */
    s->n[T_SMALL] = 20u << 10;       /* heap, shares pages with others    */
    for (int i = T_HEAP0; i <= T_HEAP7; i++)
        s->n[i] = 64u << 10;         /* adjacent heap blocks: one span    */
    s->n[T_MALLOC] = (3u << 20) + 8; /* glibc's own mmap                  */
    s->n[T_HUGE] = 16u << 20;        /* 2 MiB-aligned, huge pages         */
    s->n[T_UNTOUCHED] = 3u << 20;    /* never written before the save (too
                                        small to be collapsed to huge pages,
                                        which would populate it)         */
    for (int i = 0; i < T_MALLOC + 1; i++)
        CHECK((s->p[i] = malloc(s->n[i])) != NULL);
    s->huge_len = s->n[T_HUGE] + (2u << 20);
    char *m = mmap(NULL, s->huge_len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(m != MAP_FAILED);
    s->huge_map = m;
    s->p[T_HUGE] = (void *)(((uintptr_t)m + (2u << 20) - 1) & ~(uintptr_t)((2u << 20) - 1));
    (void)madvise(s->p[T_HUGE], s->n[T_HUGE], MADV_HUGEPAGE);
    s->untouched_len = s->n[T_UNTOUCHED];
    s->untouched_map = mmap(NULL, s->untouched_len, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(s->untouched_map != MAP_FAILED);
    s->p[T_UNTOUCHED] = s->untouched_map;
}

static void set_free(set *s)
{
    for (int i = 0; i < T_MALLOC + 1; i++)
        free(s->p[i]);
    munmap(s->huge_map, s->huge_len);
    munmap(s->untouched_map, s->untouched_len);
}

static void set_register(fb_ckpt *ck, set *s)
{
    for (int i = 0; i < T_COUNT; i++) {
        char name[32];
        snprintf(name, sizeof name, "t%02d", i);
        int64_t shape[1] = {(int64_t)s->n[i]};
        CHECK_RC(fb_ckpt_register(ck, name, FB_DTYPE_U8, 1, shape, s->p[i]), 0);
    }
}

/* Every tensor but the untouched one gets pattern `seed`. */
static void set_fill(set *s, unsigned seed)
{
    for (int i = 0; i < T_COUNT; i++)
        if (i != T_UNTOUCHED)
            fill(s->p[i], s->n[i], seed + (unsigned)i);
}

static void set_overwrite(set *s, unsigned seed, int from, int step)
{
    for (int i = from; i < T_COUNT; i += step)
        fill(s->p[i], s->n[i], seed + (unsigned)i);
}

/* The tensors hold pattern `seed` (untouched: zeros, unless `untouched`). */
static void set_check(set *s, unsigned seed, const char *what)
{
    for (int i = 0; i < T_COUNT; i++) {
        int ok = i == T_UNTOUCHED ? zero(s->p[i], s->n[i])
                                  : same(s->p[i], s->n[i], seed + (unsigned)i);
        CHECKF(ok, "%s: tensor t%02d (%zu bytes) differs", what, i, s->n[i]);
    }
}

/* Restore the newest checkpoint into the tensors and check it is `seed`. */
static void check_checkpoint(fb_ckpt *ck, set *s, uint64_t want_step, unsigned seed)
{
    uint64_t step = 0;
    CHECK_RC(fb_ckpt_restore(ck, &step), 0);
    CHECKF(step == want_step, "restored step %llu, wanted %llu",
           (unsigned long long)step, (unsigned long long)want_step);
    set_check(s, seed, "restored checkpoint");
}

static int available(const char *dir)
{
    fb_ckpt *ck = open_mode(dir, FB_CKPT_SNAPSHOT_PROTECT);
    if (!ck)
        return 0;
    fb_ckpt_close(ck);
    return 1;
}

/* A set of tensors registered and filled with pattern 1; the writer's copy
 * will be held back `hold_ms`. */
static fb_ckpt *setup(const char *dir, set *s, fb_ckpt_snapshot mode,
                      const char *hold_ms)
{
    set_make(s);
    fb_ckpt *ck = open_mode(dir, mode);
    CHECK(ck != NULL);
    if (!ck)
        exit(1);
    set_register(ck, s);
    set_fill(s, 1);
    setenv("FIREBREAK_CKPT_DRAIN_DELAY_MS", hold_ms, 1);
    return ck;
}

/* The program overwrites every tensor as soon as save returns. */
static void case_overwrite(const char *dir)
{
    set s;
    fb_ckpt *ck = setup(dir, &s, FB_CKPT_SNAPSHOT_AUTO, "300");
    uint64_t t0 = fb__now_ns();
    CHECK_RC(fb_ckpt_save(ck, 1), 0);
    uint64_t saved = fb__now_ns();
    CHECK_EQ_INT(ck->last_protected, 1);
    /* The untouched tensor first, while the copy is held back: its first
     * write must wait too (pages never touched are protected as well). */
    fill(s.p[T_UNTOUCHED], s.n[T_UNTOUCHED], 100 + T_UNTOUCHED);
    set_overwrite(&s, 100, 0, 1);
    uint64_t wrote = fb__now_ns();
    /* The copy was held back 300 ms: the overwrite must have waited for
     * it, which is the point -- the saved bytes are the old ones. */
    CHECKF(wrote - t0 >= 250000000ull, "the overwrite took %.3f s; it should "
           "have waited for the held-back copy",
           (double)(wrote - t0) / 1e9);
    CHECK_RC(fb_ckpt_wait(ck), 0);
    unsetenv("FIREBREAK_CKPT_DRAIN_DELAY_MS");
    CHECKF(ck->last_faults > 0, "no write waited (%llu)",
           (unsigned long long)ck->last_faults);
    /* The writes waited for the held-back copy (at least 250 ms, above):
     * the stall must say so, however late the writer began to drain. */
    CHECKF(ck->last_stall_ns > saved - t0 && ck->last_stall_ns >= 250000000ull,
           "stall %llu ns does not count the writes' waits (%.3f s)",
           (unsigned long long)ck->last_stall_ns, (double)(wrote - t0) / 1e9);
    /* Now the program's bytes are pattern 100 (and the untouched tensor
     * too); the checkpoint must be pattern 1 with the untouched one zero. */
    for (int i = 0; i < T_COUNT; i++)
        CHECK(same(s.p[i], s.n[i], 100 + (unsigned)i));
    check_checkpoint(ck, &s, 1, 1);

    /* A second save protects again (the plan is reused). */
    set_fill(&s, 7);
    fill(s.p[T_UNTOUCHED], s.n[T_UNTOUCHED], 7 + T_UNTOUCHED);
    CHECK_RC(fb_ckpt_save(ck, 2), 0);
    CHECK_EQ_INT(ck->last_protected, 1);
    set_overwrite(&s, 200, 0, 1);
    CHECK_RC(fb_ckpt_wait(ck), 0);
    uint64_t step = 0;
    CHECK_RC(fb_ckpt_restore(ck, &step), 0);
    CHECK_EQ_U64(step, 2);
    for (int i = 0; i < T_COUNT; i++)
        CHECKF(same(s.p[i], s.n[i], 7 + (unsigned)i), "save 2: t%02d", i);
    fb_ckpt_close(ck);
    set_free(&s);
}

typedef struct writer_arg {
    set *s;
    int from;
} writer_arg;

/* Every other tensor from `from`, but not T_HUGE (the kernel writes it). */
static void *overwrite_thread(void *arg)
{
    writer_arg *a = arg;
    for (int i = a->from; i < T_COUNT; i += 2)
        if (i != T_HUGE)
            fill(a->s->p[i], a->s->n[i], 100 + (unsigned)i);
    return NULL;
}

/* Other threads write, the kernel writes (read(2) into a tensor), and
 * another process writes (process_vm_writev). */
static void case_threads_kernel(const char *dir)
{
    set s;
    fb_ckpt *ck = setup(dir, &s, FB_CKPT_SNAPSHOT_PROTECT, "200");
    int fds[2];
    CHECK(pipe(fds) == 0);
    char msg[4096];
    fill(msg, sizeof msg, 99);
    CHECK(write(fds[1], msg, sizeof msg) == (ssize_t)sizeof msg);
    CHECK_RC(fb_ckpt_save(ck, 1), 0);
    CHECK_EQ_INT(ck->last_protected, 1);
    pthread_t tid[2];
    writer_arg args[2] = {{&s, 0}, {&s, 1}};
    for (int k = 0; k < 2; k++)
        CHECK(pthread_create(&tid[k], NULL, overwrite_thread, &args[k]) == 0);
    /* Not EFAULT: the kernel's write waits like the threads' do. */
    ssize_t got = read(fds[0], (char *)s.p[T_HUGE] + 12345, sizeof msg);
    CHECKF(got == (ssize_t)sizeof msg, "read(2) into a protected tensor: %zd (%s)",
           got, got < 0 ? strerror(errno) : "short");
    /* Another process's write (process_vm_writev, as MPI's shared-memory
     * transport delivers messages) waits as well. */
    char *remote = (char *)s.p[T_HUGE] + (5u << 20);
    pid_t parent = getpid(), pid = fork();
    if (pid == 0) {
        struct iovec l = {msg, sizeof msg}, r = {remote, sizeof msg};
        ssize_t n = process_vm_writev(parent, &l, 1, &r, 1, 0);
        _exit(n == (ssize_t)sizeof msg ? 0 : n < 0 && errno == EPERM ? 2 : 1);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
    CHECKF(WIFEXITED(status) && WEXITSTATUS(status) != 1,
           "process_vm_writev into a protected tensor failed (status %d)", status);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        CHECK_EQ_MEM(remote, msg, sizeof msg);
    else
        fprintf(stderr, "threads_kernel: process_vm_writev not permitted here; "
                        "that part skipped\n");
    for (int k = 0; k < 2; k++)
        pthread_join(tid[k], NULL);
    CHECK_EQ_MEM((char *)s.p[T_HUGE] + 12345, msg, sizeof msg);
    CHECK(same(s.p[T_SMALL], s.n[T_SMALL], 100 + T_SMALL));
    CHECK_RC(fb_ckpt_wait(ck), 0);
    unsetenv("FIREBREAK_CKPT_DRAIN_DELAY_MS");
    check_checkpoint(ck, &s, 1, 1);
    close(fds[0]);
    close(fds[1]);
    fb_ckpt_close(ck);
    set_free(&s);
}

/* A child forked while pages are protected writes its copy freely. */
static void case_fork(const char *dir)
{
    set s;
    fb_ckpt *ck = setup(dir, &s, FB_CKPT_SNAPSHOT_PROTECT, "2000");
    /* The writer sleeps through the fork too: under ASan a child forked
     * while another thread is in the allocator inherits its lock held,
     * and the leak check of the child's exit() waits for it forever (the
     * writer no longer waits for the held-back copy before it allocates
     * its write; glibc's malloc is safe across fork). */
    setenv("FIREBREAK_CKPT_WRITE_DELAY_MS", "2000", 1);
    CHECK_RC(fb_ckpt_save(ck, 1), 0);
    uint64_t t0 = fb__now_ns();
    pid_t pid = fork();
    if (pid == 0) {
        set_overwrite(&s, 100, 0, 1);
        /* exit, not _exit: the child's exit must not wait for the
         * parent's save in flight (there is no writer thread here). */
        exit(same(s.p[T_HUGE], s.n[T_HUGE], 100 + T_HUGE) ? 0 : 1);
    }
    CHECK(pid > 0);
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status 0x%x", status);
    /* The child did not wait for the parent's copy (held back 2 s). */
    CHECKF(fb__now_ns() - t0 < 1500000000ull, "the child took %.3f s: it "
           "waited on the parent's write protection",
           (double)(fb__now_ns() - t0) / 1e9);
    CHECK_RC(fb_ckpt_wait(ck), 0);
    unsetenv("FIREBREAK_CKPT_DRAIN_DELAY_MS");
    unsetenv("FIREBREAK_CKPT_WRITE_DELAY_MS");
    set_check(&s, 1, "parent's tensors after the child wrote its copy");
    check_checkpoint(ck, &s, 1, 1);
    fb_ckpt_close(ck);
    set_free(&s);
}

/* Heap neighbours -- the program's other data, and firebreak's own handle
 * and staging -- share pages with small tensors; they must never be
 * protected: writing them does not wait, and save itself does not hang. */
static void case_neighbors(const char *dir)
{
    enum { N = 6 };
    fb_ckpt *ck = open_mode(dir, FB_CKPT_SNAPSHOT_PROTECT);
    CHECK(ck != NULL);
    if (!ck)
        return;
    char *before[N], *tensor[N], *after[N];
    size_t tn = 20000;
    for (int i = 0; i < N; i++) {
        before[i] = malloc(100);
        tensor[i] = malloc(tn);
        after[i] = malloc(100);
        fill(tensor[i], tn, (unsigned)i);
        char name[16];
        snprintf(name, sizeof name, "n%d", i);
        int64_t shape[1] = {(int64_t)tn};
        CHECK_RC(fb_ckpt_register(ck, name, FB_DTYPE_U8, 1, shape, tensor[i]), 0);
    }
    setenv("FIREBREAK_CKPT_DRAIN_DELAY_MS", "1500", 1);
    uint64_t t0 = fb__now_ns();
    CHECK_RC(fb_ckpt_save(ck, 1), 0);
    CHECK_EQ_INT(ck->last_protected, 1);
    for (int i = 0; i < N; i++) {
        memset(before[i], 0xab, 100);
        memset(after[i], 0xcd, 100);
        char *more = malloc(100); /* the allocator writes its own headers */
        memset(more, 1, 100);
        free(more);
    }
    CHECKF(fb__now_ns() - t0 < 1000000000ull, "writing next to the tensors took "
           "%.3f s: neighbours were protected", (double)(fb__now_ns() - t0) / 1e9);
    for (int i = 0; i < N; i++)
        fill(tensor[i], tn, 50 + (unsigned)i);
    CHECK_RC(fb_ckpt_wait(ck), 0);
    unsetenv("FIREBREAK_CKPT_DRAIN_DELAY_MS");
    uint64_t step = 0;
    CHECK_RC(fb_ckpt_restore(ck, &step), 0);
    for (int i = 0; i < N; i++) {
        CHECKF(same(tensor[i], tn, (unsigned)i), "tensor n%d", i);
        free(before[i]);
        free(tensor[i]);
        free(after[i]);
    }
    fb_ckpt_close(ck);
}

/* A tensor's memory replaced between saves; shared memory; copy mode. */
static void case_fallbacks(const char *dir)
{
    size_t n = 8u << 20;
    char *m = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    char *shared = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                        -1, 0);
    CHECK(m != MAP_FAILED && shared != MAP_FAILED);
    fb_ckpt *ck = open_mode(dir, FB_CKPT_SNAPSHOT_PROTECT);
    CHECK(ck != NULL);
    int64_t shape[1] = {(int64_t)n};
    CHECK_RC(fb_ckpt_register(ck, "private", FB_DTYPE_U8, 1, shape, m), 0);
    CHECK_RC(fb_ckpt_register(ck, "shared", FB_DTYPE_U8, 1, shape, shared), 0);
    fill(m, n, 1);
    fill(shared, n, 2);
    CHECK_RC(fb_ckpt_save(ck, 1), 0);
    CHECK_EQ_INT(ck->last_protected, 1);
    /* Shared memory could be written through another mapping: copied. */
    CHECK_EQ_INT(ck->t[0].wp, 1);
    CHECK_EQ_INT(ck->t[1].wp, 0);
    CHECK_RC(fb_ckpt_wait(ck), 0);

    /* Replace the private tensor's memory at the same address. */
    CHECK(mmap(m, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
               -1, 0) == m);
    fill(m, n, 3);
    CHECK_RC(fb_ckpt_save(ck, 2), 0);
    CHECK_EQ_INT(ck->last_protected, 0); /* this one copied ...              */
    fill(m, n, 4);
    CHECK_RC(fb_ckpt_wait(ck), 0);
    uint64_t step = 0;
    CHECK_RC(fb_ckpt_restore(ck, &step), 0);
    CHECK_EQ_U64(step, 2);
    CHECK(same(m, n, 3) && same(shared, n, 2));
    fill(m, n, 5);
    CHECK_RC(fb_ckpt_save(ck, 3), 0);
    CHECK_EQ_INT(ck->last_protected, 1); /* ... the next protects it again  */
    fill(m, n, 6);
    CHECK_RC(fb_ckpt_wait(ck), 0);
    CHECK_RC(fb_ckpt_restore(ck, &step), 0);
    CHECK_EQ_U64(step, 3);
    CHECK(same(m, n, 5));
    fb_ckpt_close(ck);

    /* FIREBREAK_CKPT_SNAPSHOT overrides the option; a bad value is named. */
    setenv("FIREBREAK_CKPT_SNAPSHOT", "copy", 1);
    ck = open_mode(dir, FB_CKPT_SNAPSHOT_PROTECT);
    CHECK(ck != NULL);
    CHECK_RC(fb_ckpt_register(ck, "private", FB_DTYPE_U8, 1, shape, m), 0);
    CHECK_RC(fb_ckpt_save(ck, 4), 0);
    CHECK_EQ_INT(ck->last_protected, 0);
    CHECK_RC(fb_ckpt_wait(ck), 0);
    fb_ckpt_close(ck);
    setenv("FIREBREAK_CKPT_SNAPSHOT", "cow", 1);
    CHECK(open_mode(dir, FB_CKPT_SNAPSHOT_AUTO) == NULL);
    unsetenv("FIREBREAK_CKPT_SNAPSHOT");
    munmap(m, n);
    munmap(shared, n);
}

/* Without the right to use userfaultfd: auto copies, protect refuses. */
static int case_unprivileged(const char *dir)
{
    if (geteuid() != 0) {
        fprintf(stderr, "unprivileged: needs root to drop privileges; skipped\n");
        return SKIP;
    }
    chmod(root, 0777);
    fb__mkdir_p(dir, 0777);
    chmod(dir, 0777);
    pid_t pid = fork();
    if (pid == 0) {
        if (setgid(65534) || setuid(65534))
            _exit(3);
        fb_ckpt *ck = open_mode(dir, FB_CKPT_SNAPSHOT_PROTECT);
        if (ck) { /* this kernel lets everyone use it: nothing to test */
            fb_ckpt_close(ck);
            _exit(SKIP);
        }
        ck = open_mode(dir, FB_CKPT_SNAPSHOT_AUTO);
        CHECK(ck != NULL);
        if (!ck)
            _exit(1);
        size_t n = 4u << 20;
        char *m = malloc(n);
        fill(m, n, 1);
        int64_t shape[1] = {(int64_t)n};
        CHECK_RC(fb_ckpt_register(ck, "x", FB_DTYPE_U8, 1, shape, m), 0);
        CHECK_RC(fb_ckpt_save(ck, 1), 0);
        CHECK_EQ_INT(ck->last_protected, 0);
        fill(m, n, 2);
        CHECK_RC(fb_ckpt_wait(ck), 0);
        uint64_t step;
        CHECK_RC(fb_ckpt_restore(ck, &step), 0);
        CHECK(same(m, n, 1));
        fb_ckpt_close(ck);
        free(m);
        _exit(failures ? 1 : 0);
    }
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    if (WIFEXITED(status) && WEXITSTATUS(status) == SKIP)
        return SKIP;
    CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
    return 0;
}

/* Pages of [p, p + n) (p page-aligned) in memory now. */
static size_t resident(const void *p, size_t n)
{
    size_t ps = (size_t)sysconf(_SC_PAGESIZE), pages = (n + ps - 1) / ps, in = 0;
    unsigned char *v = malloc(pages);
    CHECK(v != NULL && mincore((void *)p, n, v) == 0);
    for (size_t i = 0; v && i < pages; i++)
        in += v[i] & 1;
    free(v);
    return in;
}

/* Registration maps staging and returns; the background thread faults it
 * in (staging.c).  While that thread is held, staging stays untouched by
 * registration and by save's stall (the partial pages at a protected
 * tensor's ends go aside, not into staging), and the snapshot is still
 * exact. */
static void case_background(const char *dir)
{
    fb__bg_hold(FB__BG_ALL, 1);
    size_t n = (8u << 20) + 100, n2 = (64u << 10) + 12;
    char *big = malloc(n), *small = malloc(n2);
    CHECK(big && small);
    fill(big, n, 1);
    fill(small, n2, 1);
    fb_ckpt *ck = open_mode(dir, FB_CKPT_SNAPSHOT_PROTECT);
    CHECK(ck != NULL);
    int64_t shape[1] = {(int64_t)n}, shape2[1] = {(int64_t)n2};
    CHECK_RC(fb_ckpt_register(ck, "big", FB_DTYPE_U8, 1, shape, big), 0);
    CHECK_RC(fb_ckpt_register(ck, "small", FB_DTYPE_U8, 1, shape2, small), 0);
    const fb__staging *st = &ck->t[0].stage;
    CHECK(st->mapped > 0);
    CHECK_EQ_U64(resident(st->ptr, st->mapped), 0);
    setenv("FIREBREAK_CKPT_DRAIN_DELAY_MS", "300", 1);
    CHECK_RC(fb_ckpt_save(ck, 1), 0);
    CHECK_EQ_INT(ck->last_protected, 1);
    CHECK_EQ_INT(ck->t[0].wp, 1);
    CHECK_EQ_U64(resident(st->ptr, st->mapped), 0); /* the drain waits */
    fill(big, n, 2);   /* waits for the copy of each chunk it writes */
    fill(small, n2, 2);
    CHECK_RC(fb_ckpt_wait(ck), 0);
    unsetenv("FIREBREAK_CKPT_DRAIN_DELAY_MS");
    uint64_t step = 0;
    CHECK_RC(fb_ckpt_restore(ck, &step), 0);
    CHECK_EQ_U64(step, 1);
    CHECK(same(big, n, 1) && same(small, n2, 1));
    fb_ckpt_close(ck);

    /* Let go: the thread faults in what a new registration mapped. */
    fb__bg_hold(FB__BG_ALL, 0);
    ck = open_mode(dir, FB_CKPT_SNAPSHOT_COPY);
    CHECK(ck != NULL);
    CHECK_RC(fb_ckpt_register(ck, "big", FB_DTYPE_U8, 1, shape, big), 0);
    CHECK_RC(fb_ckpt_register(ck, "small", FB_DTYPE_U8, 1, shape2, small), 0);
    st = &ck->t[0].stage;
    for (int i = 0; i < 3000 && fb__bg_pending(); i++)
        usleep(10000);
    CHECK_EQ_U64(fb__bg_pending(), 0);
    CHECK_EQ_U64(resident(st->ptr, st->mapped), st->mapped / (size_t)sysconf(_SC_PAGESIZE));
    /* The small one's slab (64 MiB, its first allocation at the start,
     * less than 2 MiB of it used): only the pages handed out are faulted
     * in, in 4 KiB pages, not a huge page (a whole 2 MiB cleared for each
     * process of a small state). */
    const fb__staging *sm = &ck->t[1].stage;
    CHECK(sm->slab != NULL);
    size_t ps = (size_t)sysconf(_SC_PAGESIZE), in = resident(sm->ptr, 64u << 20) * ps;
    CHECKF(in >= n2 && in <= ((n2 + ps - 1) & ~(ps - 1)) + ps,
           "%zu KiB of the slab faulted in for a %zu KiB tensor", in >> 10, n2 >> 10);
    fb_ckpt_close(ck);
    free(big);
    free(small);
}

/* The background thread starts only once registrations have stopped for
 * 20 ms (staging.c): while a program registers tensor after tensor, with
 * pauses shorter than that, no staging is faulted in (each fault would
 * hold the mmap lock that the next registration's mmap waits for); once
 * it stops, all of it is. */
static void case_quiet(const char *dir)
{
    enum { N = 16 };
    size_t n = 4u << 20;
    char *mem[N];
    fb_ckpt *ck = open_mode(dir, FB_CKPT_SNAPSHOT_PROTECT);
    CHECK(ck != NULL);
    for (int i = 0; i < N; i++) {
        CHECK((mem[i] = malloc(n)) != NULL);
        fill(mem[i], n, (unsigned)i);
    }
    /* widest: a bound on the time between two registrations' queueing
     * (from the start of one to the end of the next), and from the last
     * to the end of the residency check below. */
    uint64_t widest = 0, prev_start = 0;
    for (int i = 0; i < N; i++) {
        char name[16];
        snprintf(name, sizeof name, "t%d", i);
        int64_t shape[1] = {(int64_t)n};
        usleep(1000); /* a program doing a little between registrations */
        uint64_t start = fb__now_ns();
        CHECK_RC(fb_ckpt_register(ck, name, FB_DTYPE_U8, 1, shape, mem[i]), 0);
        uint64_t end = fb__now_ns();
        if (i && end - prev_start > widest)
            widest = end - prev_start;
        prev_start = start;
    }
    size_t in = 0, all = 0;
    for (int i = 0; i < N; i++) {
        in += resident(ck->t[i].stage.ptr, ck->t[i].stage.mapped);
        all += ck->t[i].stage.mapped / (size_t)sysconf(_SC_PAGESIZE);
    }
    if (fb__now_ns() - prev_start > widest)
        widest = fb__now_ns() - prev_start;
    if (widest < 15 * 1000000ull)
        CHECKF(in == 0, "%zu of %zu staging pages faulted in while registering "
               "(pauses up to %.1f ms)", in, all, (double)widest / 1e6);
    else /* the machine held this thread back past the quiet period */
        fprintf(stderr, "quiet: %.1f ms between registrations; not checking\n",
                (double)widest / 1e6);
    for (int i = 0; i < 3000 && fb__bg_pending(); i++)
        usleep(10000);
    CHECK_EQ_U64(fb__bg_pending(), 0);
    in = 0;
    for (int i = 0; i < N; i++)
        in += resident(ck->t[i].stage.ptr, ck->t[i].stage.mapped);
    CHECK_EQ_U64(in, all);
    fb_ckpt_close(ck);
    for (int i = 0; i < N; i++)
        free(mem[i]);
}

/* fb_ckpt_restore makes the write-protect plan (the /proc/self/maps check,
 * the registrations with the descriptor), so the program's first save
 * after it does not; the snapshot is still exact. */
static void case_plan_ahead(const char *dir)
{
    set s;
    set_make(&s);
    set_fill(&s, 1);
    fb_ckpt *ck = open_mode(dir, FB_CKPT_SNAPSHOT_PROTECT);
    CHECK(ck != NULL);
    set_register(ck, &s);
    CHECK_EQ_INT(ck->wp.planned, 0);
    uint64_t step = 0;
    CHECK_RC(fb_ckpt_restore(ck, &step), FB_ENOCKPT);
    CHECK_EQ_INT(ck->wp.planned, 1);
    CHECK(ck->wp.nt > 0 && ck->wp.nspan > 0);
    CHECK_RC(fb_ckpt_save(ck, 1), 0);
    CHECK_EQ_INT(ck->last_protected, 1);
    set_overwrite(&s, 50, 0, 1);
    CHECK_RC(fb_ckpt_wait(ck), 0);
    check_checkpoint(ck, &s, 1, 1);
    fb_ckpt_close(ck);
    set_free(&s);
}

/* The drain copies what nothing asked for in the order a step writes:
 * tensor by tensor as registered, each from its start, not by address.
 * Three tensors of 4 chunks, registered top down (as a program's large
 * allocations are mapped): the first registered, at the highest address,
 * comes first. */
static void case_drain_order(const char *dir)
{
    const size_t chunk = 2u << 20, each = 4 * chunk;
    size_t len = 3 * each + chunk;
    char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(m != MAP_FAILED);
    fb_ckpt *ck = open_mode(dir, FB_CKPT_SNAPSHOT_PROTECT);
    CHECK(ck != NULL);
    if (m == MAP_FAILED || !ck)
        return;
    char *base = (char *)(((uintptr_t)m + chunk - 1) & ~(uintptr_t)(chunk - 1));
    for (int i = 0; i < 3; i++) {
        char name[16];
        snprintf(name, sizeof name, "t%d", i);
        int64_t shape[1] = {(int64_t)each};
        CHECK_RC(fb_ckpt_register(ck, name, FB_DTYPE_U8, 1, shape,
                                  base + (size_t)(2 - i) * each), 0);
        memset(base + (size_t)(2 - i) * each, i + 1, each);
    }
    CHECK_RC(fb__wp_plan(ck), 0);
    CHECK_EQ_U64(ck->wp.nchunk, 12);
    /* Chunks are numbered by address: t2 holds 0-3, t1 4-7, t0 8-11. */
    const size_t want[12] = {8, 9, 10, 11, 4, 5, 6, 7, 0, 1, 2, 3};
    size_t ti = 0, got = 0;
    uintptr_t at = 0;
    for (size_t c; got < 13 && (c = fb__wp_next_chunk(ck, &ti, &at)) != SIZE_MAX; got++) {
        CHECKF(got < 12 && c == want[got], "copy %zu: chunk %zu, wanted %zu", got, c,
               got < 12 ? want[got] : SIZE_MAX);
        if (c < ck->wp.nchunk)
            ck->wp.done[c] = 1; /* as copy_release marks it */
    }
    CHECK_EQ_U64(got, 12);
    /* A chunk a write asked for first is passed over when reached. */
    memset(ck->wp.done, 0, ck->wp.nchunk);
    ck->wp.done[9] = ck->wp.done[4] = 1;
    ti = 0, at = 0;
    size_t c1 = fb__wp_next_chunk(ck, &ti, &at);
    CHECK_EQ_U64(c1, 8);
    ck->wp.done[8] = 1;
    CHECK_EQ_U64(fb__wp_next_chunk(ck, &ti, &at), 10);
    memset(ck->wp.done, 0, ck->wp.nchunk);
    fb_ckpt_close(ck);
    munmap(m, len);
}

/* Old checkpoints' removal never holds a snapshot's drain: keep=1, three
 * old steps hidden while their removal was held (FIREBREAK_CKPT_PURGE_GATE),
 * then removed at 400 ms a file (FIREBREAK_CKPT_PURGE_DELAY_MS, a disk slow
 * to discard).  A save during the removal goes first (once a removal, as
 * ever); a second save during the same removal still has its write wait for
 * the rest of it, but not its drain: the program's write right after it
 * waits at most for the file under way, not for every file left (0.5-0.8 s
 * of an AdamW step's writes waited, every other save, keep=2, before). */
static void case_drain_before_purge(const char *dir)
{
    fb_ckpt *ck = open_keep(dir, FB_CKPT_SNAPSHOT_PROTECT, 1);
    CHECK(ck != NULL);
    const size_t bytes = 8u << 20;
    unsigned char *x = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(x != MAP_FAILED);
    if (!ck || x == MAP_FAILED)
        return;
    int64_t shape[1] = {(int64_t)bytes};
    CHECK_RC(fb_ckpt_register(ck, "x", FB_DTYPE_U8, 1, shape, x), 0);
    char gate[4300];
    snprintf(gate, sizeof gate, "%s/gate", root); /* removed with root */
    unlink(gate);
    setenv("FIREBREAK_CKPT_PURGE_GATE", gate, 1);
    for (int step = 1; step <= 4; step++) { /* steps 1-3 hidden, not removed */
        memset(x, step, bytes);
        CHECK_RC(fb_ckpt_save(ck, (uint64_t)step), 0);
        CHECK_RC(fb_ckpt_wait(ck), 0);
    }
    setenv("FIREBREAK_CKPT_PURGE_DELAY_MS", "400", 1);
    int fd = open(gate, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
    CHECK(fd >= 0);
    if (fd >= 0)
        close(fd);
    usleep(100000); /* the removal of the first file is under way */
    double waited[2];
    for (int k = 0; k < 2; k++) {
        uint64_t step = 5 + (uint64_t)k;
        memset(x, (int)step, bytes);
        CHECK_RC(fb_ckpt_save(ck, step), 0);
        CHECK_EQ_INT(ck->last_protected, 1);
        uint64_t t0 = fb__now_ns();
        x[bytes / 2] = 0xEE; /* the program writes at once */
        waited[k] = (double)(fb__now_ns() - t0) / 1e9;
        CHECK_RC(fb_ckpt_wait(ck), 0);
    }
    /* The second save's write: at most the file under way (0.4 s), not the
     * files left (0.8 s or more). */
    CHECKF(waited[1] < 0.65, "a write after the second save waited %.3f s for the "
           "removal of old checkpoints (the first: %.3f s)", waited[1], waited[0]);
    printf("writes after the saves during the removal waited %.3f s, %.3f s\n", waited[0],
           waited[1]);
    unsetenv("FIREBREAK_CKPT_PURGE_DELAY_MS");
    unsetenv("FIREBREAK_CKPT_PURGE_GATE");
    /* Step 6 as it was at its save, not with the write after it. */
    memset(x, 0, bytes);
    uint64_t got = 0;
    CHECK_RC(fb_ckpt_restore(ck, &got), 0);
    CHECK_EQ_U64(got, 6);
    size_t bad = 0;
    for (size_t i = 0; i < bytes; i++)
        bad += x[i] != 6;
    CHECKF(bad == 0, "restored step 6: %zu bytes not as saved", bad);
    fb_ckpt_close(ck);
    unlink(gate);
    munmap(x, bytes);
}

/*
 * The write does not wait for the whole drain: it takes each chunk once
 * the drainer has copied it.  The drain is held after its first 8 chunks
 * (16 MiB of a 32 MiB tensor, FIREBREAK_CKPT_DRAIN_HOLD) at the second
 * save: meanwhile the shard's temporary file must already hold the
 * tensor's first bytes (the first 8 MiB batch, written with O_DIRECT), and
 * not the bytes the drain has not copied, which staging still holds from
 * the first save; once the hold ends, the checkpoint restores whole.  With
 * the drain first, then the write, nothing is written while it is held.
 */
static int run_beside(const char *dir)
{
    size_t n = 32u << 20, len = n + (2u << 20);
    char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    CHECK(m != MAP_FAILED);
    char *t = (char *)(((uintptr_t)m + (2u << 20) - 1) & ~(uintptr_t)((2u << 20) - 1));
    fill(t, n, 1);
    fb_ckpt *ck = open_mode(dir, FB_CKPT_SNAPSHOT_PROTECT);
    CHECK(ck != NULL);
    if (!ck)
        return 0;
    /* Only where the directory takes O_DIRECT: the other way waits for
     * the drain's end, as it must (engine.c, write_shard). */
    char probe[600];
    snprintf(probe, sizeof probe, "%s/.odirect", dir);
    int pfd = open(probe, O_WRONLY | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
    if (pfd < 0) {
        fprintf(stderr, "beside: %s does not take O_DIRECT; skipped\n", dir);
        fb_ckpt_close(ck);
        munmap(m, len);
        return SKIP;
    }
    close(pfd);
    unlink(probe);
    int64_t shape[1] = {(int64_t)n};
    CHECK_RC(fb_ckpt_register(ck, "big", FB_DTYPE_U8, 1, shape, t), 0);
    CHECK_RC(fb_ckpt_save(ck, 1), 0);
    CHECK_RC(fb_ckpt_wait(ck), 0);
    fill(t, n, 2);
    char go[600], hold[700];
    snprintf(go, sizeof go, "%s/go", root);
    snprintf(hold, sizeof hold, "8:%s", go);
    setenv("FIREBREAK_CKPT_DRAIN_HOLD", hold, 1);
    CHECK_RC(fb_ckpt_save(ck, 2), 0);
    CHECK_EQ_INT(ck->last_protected, 1);
    /* The temporary shard, this process's: the data section starts after
     * the header (under 64 KiB here); its first 4 MiB must be the
     * tensor's. */
    char sdir[600], tmp[700];
    CHECK_RC(fb__ckpt_step_path(sdir, sizeof sdir, dir, 2), 0);
    snprintf(tmp, sizeof tmp, "%s/.rank-00000.%d.tmp", sdir, (int)getpid());
    size_t want = 4u << 20, head = 64u << 10, got = 0;
    char *buf = malloc(want + head);
    CHECK(buf != NULL);
    int found = 0, stale = -1;
    for (int tries = 0; tries < 1000 && !found && buf; tries++) { /* 10 s */
        int fd = open(tmp, O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            ssize_t r = pread(fd, buf, want + head, 0);
            got = r > 0 ? (size_t)r : 0;
            size_t at = 8;
            for (; at < head && at + want <= got && !found; at++)
                found = buf[at] == t[0] && !memcmp(buf + at, t, want);
            /* 20 MiB in: in chunks not copied yet (16 MiB were), so
             * unwritten (zeros), not the first save's bytes. */
            if (found && pread(fd, buf, 4096, (off_t)(at - 1 + (20u << 20))) == 4096)
                stale = !zero(buf, 4096);
            close(fd);
        }
        if (!found)
            usleep(10000);
    }
    free(buf);
    CHECKF(found, "while the drain was held after 8 chunks, %s held none of "
           "the tensor's copied bytes (%zu bytes read): the write waited for "
           "the whole drain", tmp, got);
    CHECKF(stale == 0, "while the drain was held, %s already held bytes 20 MiB "
           "into the tensor, which the drain had not copied (%d)", tmp, stale);
    CHECK(access(go, F_OK) != 0); /* the drain is still held */
    int gfd = open(go, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    CHECK(gfd >= 0);
    if (gfd >= 0)
        close(gfd);
    CHECK_RC(fb_ckpt_wait(ck), 0);
    unsetenv("FIREBREAK_CKPT_DRAIN_HOLD");
    fill(t, n, 3);
    uint64_t step = 0;
    CHECK_RC(fb_ckpt_restore(ck, &step), 0);
    CHECK_EQ_U64(step, 2);
    CHECKF(same(t, n, 2), "the restored tensor differs from the one saved");
    fb_ckpt_close(ck);
    munmap(m, len);
    return 0;
}

/* The same overwrite with the writer draining before it writes, the way
 * without a drainer thread (FIREBREAK_CKPT_DRAIN_BESIDE=0). */
static int run_overwrite_writer_drains(const char *dir)
{
    setenv("FIREBREAK_CKPT_DRAIN_BESIDE", "0", 1);
    case_overwrite(dir);
    unsetenv("FIREBREAK_CKPT_DRAIN_BESIDE");
    return 0;
}

static int run_overwrite(const char *dir) { case_overwrite(dir); return 0; }
static int run_drain_order(const char *dir) { case_drain_order(dir); return 0; }
static int run_drain_before_purge(const char *dir)
{
    case_drain_before_purge(dir);
    return 0;
}
static int run_quiet(const char *dir) { case_quiet(dir); return 0; }
static int run_plan_ahead(const char *dir) { case_plan_ahead(dir); return 0; }
static int run_background(const char *dir) { case_background(dir); return 0; }
static int run_threads_kernel(const char *dir) { case_threads_kernel(dir); return 0; }
static int run_fork(const char *dir) { case_fork(dir); return 0; }
static int run_neighbors(const char *dir) { case_neighbors(dir); return 0; }
static int run_fallbacks(const char *dir) { case_fallbacks(dir); return 0; }

/*
 * The cases, the only list: tests/ckpt/CMakeLists.txt reads this table
 * (one `{"name", ...}` per line), `test_protect --list` prints it.  HOOKS:
 * the case holds the writer's copy back (FIREBREAK_CKPT_DRAIN_DELAY_MS), a
 * test hook; a build without them (FB_TEST_HOOKS off) skips it.  UFFD: the
 * case needs userfaultfd, skipped where the kernel refuses it.
 */
enum { UFFD = 1, HOOKS = 2 };
static const struct {
    const char *name;
    int (*run)(const char *dir);
    int needs;
} cases[] = {
    {"overwrite", run_overwrite, UFFD | HOOKS},
    {"overwrite_writer_drains", run_overwrite_writer_drains, UFFD | HOOKS},
    {"beside", run_beside, UFFD | HOOKS},
    {"drain_order", run_drain_order, UFFD},
    {"drain_before_purge", run_drain_before_purge, UFFD | HOOKS},
    {"threads_kernel", run_threads_kernel, UFFD | HOOKS},
    {"fork", run_fork, UFFD | HOOKS},
    {"neighbors", run_neighbors, UFFD | HOOKS},
    {"fallbacks", run_fallbacks, UFFD},
    {"unprivileged", case_unprivileged, 0},
    {"background", run_background, UFFD | HOOKS},
    {"quiet", run_quiet, UFFD},
    {"plan_ahead", run_plan_ahead, UFFD},
};

int main(int argc, char **argv)
{
    size_t ncases = sizeof cases / sizeof cases[0];
    if (argc < 2) {
        fprintf(stderr, "usage: test_protect CASE | --list\n");
        return 2;
    }
    if (!strcmp(argv[1], "--list")) {
        for (size_t i = 0; i < ncases; i++)
            printf("%s\n", cases[i].name);
        return 0;
    }
    const char *c = argv[1];
    size_t i = 0;
    while (i < ncases && strcmp(cases[i].name, c))
        i++;
    if (i == ncases) {
        fprintf(stderr, "unknown case %s (test_protect --list)\n", c);
        return 2;
    }
#ifndef FB_TEST_HOOKS
    if (cases[i].needs & HOOKS) {
        fprintf(stderr, "%s: needs the checkpoint test hooks (FB_TEST_HOOKS); "
                        "skipped\n", c);
        return SKIP;
    }
#endif
    snprintf(root, sizeof root, "%s/fb-protect-test.%d",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
    fb__mkdir_p(root, 0755);
    check_tmpdir(root);
    char dir[512];
    snprintf(dir, sizeof dir, "%s/ck", root);
    alarm(60); /* a write that waits forever fails the test, not CI */
    int rc = 0;
    if ((cases[i].needs & UFFD) && !available(dir)) {
        fprintf(stderr, "%s: userfaultfd refused to this process; skipped\n", c);
        rc = SKIP;
    } else {
        rc = cases[i].run(dir);
    }
    fb__rm_rf(root);
    if (failures)
        fprintf(stderr, "%s: %d check(s) failed\n", c, failures);
    return failures ? 1 : rc;
}
