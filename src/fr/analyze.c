/*
 * analyze.c -- merge every rank's flight recorder and decide what went
 * wrong (fr.h).  The rules are in docs/flight-recorder.md; in short:
 *
 *  hang      per group, the lowest sequence number some rank has been
 *            stuck in (pending longer than min_wait) is where progress
 *            stopped; members that never entered it are at fault.  Ranks
 *            that are themselves stuck in another group are victims, not
 *            culprits: the culprits are the missing ranks stuck nowhere.
 *  mismatch  per (group, seq), the majority's operation, size and dtype
 *            are taken as intended; ranks that differ are at fault.  Sizes
 *            follow the per-operation rules (all_gather output = input x
 *            group size, reduce_scatter input = output x group size).
 *            Sends and recvs match by (group, src, dst, n-th op).
 *  slow      on collectives every member completed, a rank's lateness is
 *            its arrival minus the mean arrival of the others; ranks whose
 *            mean lateness passes late_threshold are reported, worst first.
 *
 * Entries are visited a few times in linear passes; per (group, seq)
 * state lives in dense bucket arrays, so 16,384 ranks x 2,000 entries stay
 * within seconds and a few GiB.
 */
#include "fr/fr.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/rundir.h"
#include "common/util.h"
#include "firebreak/firebreak.h"
#include "fr/model.h"
#include "lib/segment.h"

#define MAX_TUPLES 200000

typedef struct finding {
    fb__fr_finding_kind kind;
    int group;             /* -1 none */
    uint64_t seq;
    int has_seq;
    int op;                /* fb_op, -1 none */
    int *ranks;
    int nranks;
    double sort_key;
    char detail[768];
} finding;

struct fb__fr_result {
    fb__fr_model m;
    fb__fr_options opt;
    int verdict;           /* fb__fr_verdict_code; V_NONE while undecided
                            * by the findings */
    finding *f;
    size_t nf, capf;
    size_t dropped[FB__FR_FINDING_KIND_COUNT_]; /* over max_findings */
    size_t listed[FB__FR_FINDING_KIND_COUNT_];  /* findings kept */
    int *culprits;
    int nculprits;
    int nranks;            /* ranks with evidence */
    uint64_t events;       /* entries read */
    int world;
    int nmissing;          /* ranks of the world with no evidence */
    char missing[256];     /* them, as "1-3, 7" (bounded) */
    char summary[1024];
};

enum { V_NONE = -1 };

/* The names of docs/flight-recorder.md: JSON and text output, journals
 * and reports read them, so they never change. */
static const char *const verdict_names[FB__FR_VERDICT_COUNT_] = {
    [FB__FR_UNDECIDED] = "undecided", [FB__FR_HANG] = "hang",
    [FB__FR_MISMATCH] = "mismatch", [FB__FR_SLOW] = "slow",
    [FB__FR_OK] = "ok", [FB__FR_INCOMPLETE] = "incomplete",
};

static const char *const kind_names[FB__FR_FINDING_KIND_COUNT_] = {
    [FB__FR_MISSING_RANKS] = "missing_ranks",
    [FB__FR_TYPE_MISMATCH] = "type_mismatch",
    [FB__FR_SIZE_MISMATCH] = "size_mismatch",
    [FB__FR_DTYPE_MISMATCH] = "dtype_mismatch",
    [FB__FR_STATE_MISMATCH] = "state_mismatch",
    [FB__FR_P2P_MISMATCH] = "p2p_mismatch",
    [FB__FR_LATE_RANKS] = "late_ranks",
    [FB__FR_MISSING_DUMP] = "missing_dump",
};


const char *fb__fr_verdict_name(fb__fr_verdict_code v)
{
    return (unsigned)v < FB__FR_VERDICT_COUNT_ ? verdict_names[v] : NULL;
}

const char *fb__fr_finding_kind_name(fb__fr_finding_kind k)
{
    return (unsigned)k < FB__FR_FINDING_KIND_COUNT_ ? kind_names[k] : NULL;
}

int fb__fr_verdict_from_name(const char *name)
{
    for (int v = 0; name && v < FB__FR_VERDICT_COUNT_; v++)
        if (!strcmp(verdict_names[v], name))
            return v;
    return -1;
}

int fb__fr_finding_kind_from_name(const char *name)
{
    for (int k = 0; name && k < FB__FR_FINDING_KIND_COUNT_; k++)
        if (!strcmp(kind_names[k], name))
            return k;
    return -1;
}

/* ------------------------------------------------------------------ */

void fb__fr_options_init(fb__fr_options *opt)
{
    opt->min_wait_s = 1.0;
    opt->late_threshold_s = 200e-6;
    opt->max_findings = 20;
    opt->inputs_must_open = 0;
    opt->world_max = 0;
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

static int sort_unique(int *v, int n)
{
    if (n <= 0)
        return 0;
    qsort(v, (size_t)n, sizeof *v, cmp_int);
    int k = 1;
    for (int i = 1; i < n; i++)
        if (v[i] != v[k - 1])
            v[k++] = v[i];
    return k;
}

/* A finding in *out, or *out NULL when max_findings of its kind are
 * listed already (it is counted).  0 or -ENOMEM. */
static int add_finding(fb__fr_result *res, fb__fr_finding_kind kind, int group,
                       uint64_t seq, int has_seq, int op, const int *ranks,
                       int nranks, finding **out)
{
    *out = NULL;
    if (res->listed[kind] >= (size_t)res->opt.max_findings) {
        res->dropped[kind]++;
        return 0;
    }
    if (res->nf == res->capf) {
        size_t nc = res->capf ? res->capf * 2 : 16;
        finding *nf = fb__realloc(res->f, nc * sizeof *nf);
        if (!nf)
            return -ENOMEM;
        res->f = nf;
        res->capf = nc;
    }
    finding *f = &res->f[res->nf];
    memset(f, 0, sizeof *f);
    f->kind = (fb__fr_finding_kind)kind;
    f->group = group;
    f->seq = seq;
    f->has_seq = has_seq;
    f->op = op;
    if (nranks > 0) {
        f->ranks = fb__malloc((size_t)nranks * sizeof *f->ranks);
        if (!f->ranks)
            return -ENOMEM;
        memcpy(f->ranks, ranks, (size_t)nranks * sizeof *f->ranks);
        f->nranks = sort_unique(f->ranks, nranks);
    }
    res->listed[kind]++;
    res->nf++;
    *out = f;
    return 0;
}

/* "0, 1, 5-9" into buf (sorted r), at most size bytes: a list too long
 * ends in ", ... (N in all)", so a million ranks still fit a line. */
static void fmt_ranks(char *buf, size_t size, const int *r, int n)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && len + 48 < size; ) {
        int j = i;
        while (j + 1 < n && r[j + 1] == r[j] + 1)
            j++;
        len += (size_t)snprintf(buf + len, size - len, "%s%d", i ? ", " : "",
                                r[i]);
        if (j > i)
            len += (size_t)snprintf(buf + len, size - len, "%s%d",
                                    j == i + 1 ? ", " : "-", r[j]);
        i = j + 1;
        if (i < n && len + 48 >= size) {
            snprintf(buf + len, size - len, ", ... (%d in all)", n);
            break;
        }
    }
}

static const char *opname(int op)
{
    const char *n = op >= 0 ? fb_op_name((fb_op)op) : NULL;
    return n ? n : "?";
}

static const char *gname(const fb__fr_model *m, int g)
{
    if (g < 0 || (size_t)g >= m->ngroups)
        return "?";
    return m->groups[g].name[0] ? m->groups[g].name : m->groups[g].key;
}

/* ------------------------------------------------------------------ */
/* Loading inputs. */

static int trailing_number(const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(base);
    /* skip a known extension */
    const char *dot = strrchr(base, '.');
    if (dot && dot > base && (!strcmp(dot, ".json") || !strcmp(dot, ".pkl") ||
                              !strcmp(dot, ".pickle") || !strcmp(dot, ".fbseg")))
        n = (size_t)(dot - base);
    size_t e = n;
    while (e > 0 && base[e - 1] >= '0' && base[e - 1] <= '9')
        e--;
    if (e == n || n - e > 9)
        return -1;
    int v = 0;
    for (size_t i = e; i < n; i++)
        v = v * 10 + (base[i] - '0');
    return v;
}

#define MAX_DUMP_BYTES ((size_t)1 << 30)

/* 1 when path holds a firebreak segment (by its magic), 0 when not, or
 * a negative code with a message naming the file in err. */
static int probe(const char *path, char *err, size_t errsz)
{
    /* Opened without blocking and refused unless a regular file: a FIFO
     * in place of a dump would hang the supervisor's hang diagnosis. */
    int fd = fb__open_regular(path, 0);
    if (fd < 0) {
        snprintf(err, errsz, "%s: %s", path, fb_strerror(fd));
        return fd;
    }
    unsigned char head[8] = {0};
    ssize_t got;
    do
        got = read(fd, head, sizeof head);
    while (got < 0 && errno == EINTR);
    close(fd);
    uint64_t magic = 0;
    for (ssize_t i = 0; i < 8 && i < got; i++)
        magic |= (uint64_t)head[i] << (8 * i);
    return got == 8 && magic == FB__SEG_MAGIC;
}

static int load_one(fb__fr_model *m, const char *path, char *err, size_t errsz)
{
    /* live segment name */
    if (path[0] == '/' && !strchr(path + 1, '/'))
        return fb__fr_load_ring(m, path, err, errsz);
    int kind = probe(path, err, errsz);
    if (kind < 0)
        return kind;
    if (kind == 1)
        return fb__fr_load_ring(m, path, err, errsz);
    char *buf = NULL;
    size_t len = 0;
    int rc = fb__read_file(path, MAX_DUMP_BYTES, &buf, &len);
    if (rc) {
        snprintf(err, errsz, "%s: cannot read: %s", path, fb_strerror(rc));
        return rc;
    }
    rc = fb__fr_load_torch(m, path, buf, len, trailing_number(path), err, errsz);
    free(buf);
    return rc;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* ------------------------------------------------------------------ */
/* A directory's files are read by a few threads and added to the model
 * by this one, in name order.  Reading (stat, open, the copy of a ring's
 * events, a dump's bytes) needs no shared state; adding to the model
 * (groups, interned strings, warnings) happens in order, so the model,
 * and so the result, is the one a single thread builds.  Workers run at
 * most LOAD_WINDOW files ahead of the one being added, and start no file
 * while the dumps read but not yet added hold LOAD_HOLD_BYTES (a PyTorch
 * dump may be 1 GiB; a ring's entries are the model's either way). */

#define LOAD_WINDOW 64
#define LOAD_HOLD_BYTES ((size_t)256 << 20)
#define LOAD_THREADS_MAX 8

typedef struct load_item {
    char *path;
    int kind;              /* ITEM_* */
    int rc;                /* ITEM_RING / ITEM_FAILED: the read's code */
    fb__fr_ring_stage ring;
    char *buf;             /* ITEM_DUMP: the file's bytes */
    size_t len;
    char err[512];
} load_item;

enum { ITEM_SKIP, ITEM_NOTREG, ITEM_FAILED, ITEM_RING, ITEM_DUMP };

typedef struct loader {
    load_item *items;
    size_t n;
    size_t next;           /* first item not claimed */
    size_t done_upto;      /* items below were added to the model */
    size_t held;           /* bytes of dumps read, not yet added */
    uint8_t *ready;
    int stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;
} loader;

/* Everything about one file that does not need the model. */
static void read_item(load_item *it)
{
    struct stat st;
    if (stat(it->path, &st) != 0) {
        it->kind = ITEM_SKIP;
        return;
    }
    if (!S_ISREG(st.st_mode)) {
        it->kind = S_ISDIR(st.st_mode) ? ITEM_SKIP : ITEM_NOTREG;
        return;
    }
    int kind = probe(it->path, it->err, sizeof it->err);
    if (kind < 0) {
        it->kind = ITEM_FAILED;
        it->rc = kind;
        return;
    }
    if (kind == 1) {
        it->rc = fb__fr_ring_read(&it->ring, it->path, it->err, sizeof it->err);
        it->kind = it->rc ? ITEM_FAILED : ITEM_RING;
        return;
    }
    it->rc = fb__read_file(it->path, MAX_DUMP_BYTES, &it->buf, &it->len);
    if (it->rc) {
        snprintf(it->err, sizeof it->err, "%s: cannot read: %s", it->path,
                 fb_strerror(it->rc));
        it->kind = ITEM_FAILED;
        return;
    }
    it->kind = ITEM_DUMP;
}

/* Claim the next item, when one is within the window (mu held). */
static int claim(loader *L, size_t *i)
{
    if (L->stop || L->next >= L->n || L->next >= L->done_upto + LOAD_WINDOW)
        return 0;
    if (L->next > L->done_upto && L->held >= LOAD_HOLD_BYTES)
        return 0; /* the file being added is always read */
    *i = L->next++;
    return 1;
}

static void run_item(loader *L, size_t i)
{
    pthread_mutex_unlock(&L->mu);
    read_item(&L->items[i]);
    pthread_mutex_lock(&L->mu);
    L->held += L->items[i].len;
    L->ready[i] = 1;
    pthread_cond_broadcast(&L->cv);
}

static void *load_worker(void *arg)
{
    loader *L = arg;
    pthread_mutex_lock(&L->mu);
    for (;;) {
        size_t i;
        if (claim(L, &i))
            run_item(L, i);
        else if (L->stop || L->next >= L->n)
            break;
        else
            pthread_cond_wait(&L->cv, &L->mu);
    }
    pthread_mutex_unlock(&L->mu);
    return NULL;
}

/* How many threads read files: FIREBREAK_FR_THREADS when it is a whole
 * number from 1 (1 reads them all in this thread, in order), else the CPUs
 * this process may run on (taskset, cpusets); at most LOAD_THREADS_MAX,
 * and never more than files.  `firebreak fr` says when the variable is
 * set to something else. */
static int load_threads(size_t nfiles)
{
    long long n;
    if (fb__parse_int(getenv("FIREBREAK_FR_THREADS"), 1, LLONG_MAX, &n) != 0)
        n = fb__usable_cpus();
    if (n < 1)
        n = 1;
    if (n > LOAD_THREADS_MAX)
        n = LOAD_THREADS_MAX;
    if ((size_t)n > nfiles)
        n = (long)(nfiles ? nfiles : 1);
    return (int)n;
}

/* Add item i to the model as load_one would have.  0, or -ENOMEM. */
static int add_item(fb__fr_model *m, load_item *it, int *any, int *loaded)
{
    int rc = 0;
    switch (it->kind) {
    case ITEM_SKIP:
        return 0;
    case ITEM_NOTREG:
        fb__fr_model_warn(m, "%s: %s; skipped", it->path, fb_strerror(FB_ENOTREG));
        return 0;
    case ITEM_FAILED:
        rc = it->rc;
        break;
    case ITEM_RING:
        rc = fb__fr_ring_commit(m, &it->ring, it->path, it->err, sizeof it->err);
        break;
    case ITEM_DUMP:
        rc = fb__fr_load_torch(m, it->path, it->buf, it->len,
                               trailing_number(it->path), it->err, sizeof it->err);
        break;
    }
    *any = 1;
    if (rc && rc != -ENOMEM)
        fb__fr_model_warn(m, "%s", it->err);
    else if (!rc)
        (*loaded)++;
    return rc == -ENOMEM ? rc : 0;
}

static void release_item(load_item *it)
{
    fb__fr_ring_stage_free(&it->ring);
    free(it->buf);
    it->buf = NULL;
    free(it->path);
    it->path = NULL;
}

/* Read and add the files `names` (sorted; taken), on load_threads()
 * threads.  0 or -ENOMEM. */
static int load_files(fb__fr_model *m, char **names, size_t n, int *any, int *loaded)
{
    loader L = {.n = n};
    pthread_t tid[LOAD_THREADS_MAX];
    int nthreads = load_threads(n), started = 0, rc = 0;
    L.items = fb__calloc(n ? n : 1, sizeof *L.items);
    L.ready = fb__calloc(n ? n : 1, 1);
    if (!L.items || !L.ready) {
        for (size_t i = 0; i < n; i++)
            free(names[i]);
        free(L.items);
        free(L.ready);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++)
        L.items[i].path = names[i];
    pthread_mutex_init(&L.mu, NULL);
    pthread_cond_init(&L.cv, NULL);
    if (nthreads > 1) {
        /* Workers take no asynchronous signals (the supervisor handles
         * its own in this thread); faults stay deliverable: the segment
         * guard's SIGBUS must reach the thread that touched the page. */
        sigset_t all, old;
        sigfillset(&all);
        sigdelset(&all, SIGBUS);
        sigdelset(&all, SIGSEGV);
        sigdelset(&all, SIGFPE);
        sigdelset(&all, SIGILL);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        for (int t = 0; t < nthreads - 1; t++)
            if (pthread_create(&tid[started], NULL, load_worker, &L) == 0)
                started++;
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    }
    pthread_mutex_lock(&L.mu);
    for (size_t i = 0; i < n; i++) {
        /* this thread reads too while item i is not ready */
        while (!L.ready[i]) {
            size_t j;
            if (claim(&L, &j))
                run_item(&L, j);
            else
                pthread_cond_wait(&L.cv, &L.mu);
        }
        pthread_mutex_unlock(&L.mu);
        if (!rc)
            rc = add_item(m, &L.items[i], any, loaded);
        size_t len = L.items[i].len;
        release_item(&L.items[i]);
        pthread_mutex_lock(&L.mu);
        L.held -= len;
        L.done_upto = i + 1;
        if (rc)
            L.stop = 1;
        pthread_cond_broadcast(&L.cv);
        if (rc)
            break;
    }
    L.stop = 1;
    pthread_cond_broadcast(&L.cv);
    pthread_mutex_unlock(&L.mu);
    for (int t = 0; t < started; t++)
        pthread_join(tid[t], NULL);
    for (size_t i = 0; i < n; i++) /* after a failure: read, never added */
        release_item(&L.items[i]);
    pthread_mutex_destroy(&L.mu);
    pthread_cond_destroy(&L.cv);
    free(L.items);
    free(L.ready);
    return rc;
}

/* Is the absolute path ABS directory DIR or below it? */
static int in_dir(const char *abs, const char *dir)
{
    size_t n = strlen(dir);
    return !strncmp(abs, dir, n) && (abs[n] == '\0' || abs[n] == '/');
}

/* Where a directory without dumps points: a run directory whose fr/
 * holds no attempt's snapshots (`fr analyze` takes a run directory with
 * some for its newest attempt: fb__fr_newest_attempt), the runs below
 * PATH, or the run PATH is inside when not in its fr/ (the supervisor's
 * own inputs are there).  Into hint, "" when none. */
static void dir_hint(const char *path, char *hint, size_t size)
{
    char fr[PATH_MAX], abs[PATH_MAX];
    hint[0] = '\0';
    if (fb__rundir_has(path, FB__RUNDIR_FR, 0, fr, sizeof fr)) {
        snprintf(hint, size, " (a run directory, and no attempt's snapshots in %s: "
                 "the supervisor writes them into attempt-<N> when attempt N fails)", fr);
        return;
    }
    fb__rundir_where *w = fb__malloc(sizeof *w);
    char where[1024];
    if (!w)
        return;
    fb__rundir_where_find(path, w);
    int k = fb__rundir_where_say(w, path, where, sizeof where);
    if (k == FB__RUNDIR_WHERE_BELOW)
        snprintf(hint, size, " (but %s: give one for its newest attempt's flight "
                 "recorders)", where);
    else if (k == FB__RUNDIR_WHERE_INSIDE &&
             !fb__rundir_path(fr, sizeof fr, w->inside, FB__RUNDIR_FR, 0) &&
             realpath(path, abs) && !in_dir(abs, fr))
        snprintf(hint, size, " (%s: give that one for its newest attempt's flight "
                 "recorders)", where);
    free(w);
}

/* Has directory PATH an entry? */
static int dir_has_entry(const char *path)
{
    DIR *d = opendir(path);
    if (!d)
        return 0;
    struct dirent *e;
    while ((e = readdir(d)) && (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")))
        ;
    closedir(d);
    return e != NULL;
}

long fb__fr_newest_attempt(const char *path, char *fr, char *torch, size_t size,
                           int *count)
{
    char base[PATH_MAX]; /* PATH's fr/, or PATH itself */
    if (!fb__rundir_has(path, FB__RUNDIR_FR, 0, base, sizeof base) &&
        fb__fmt(base, sizeof base, "%s", path))
        return -1;
    long hi = fb__rundir_newest_attempt(base, count);
    if (hi < 0 || fb__rundir_fr_path(fr, size, base, FB__RUNDIR_FR_ATTEMPT, hi) ||
        fb__rundir_fr_path(torch, size, base, FB__RUNDIR_FR_TORCH, hi))
        return -1;
    if (!dir_has_entry(torch))
        torch[0] = '\0';
    return hi;
}

/* Load a path: a file, a live segment name, or a directory of files. */
static int load_path(fb__fr_model *m, const char *path, int *loaded)
{
    char err[512];
    struct stat st;
    int is_shm_name = path[0] == '/' && !strchr(path + 1, '/') &&
                      stat(path, &st) != 0;
    if (!is_shm_name && stat(path, &st)) {
        fb__fr_model_warn(m, "%s: %s", path, strerror(errno));
        return -errno;
    }
    if (is_shm_name || !S_ISDIR(st.st_mode)) {
        int rc = load_one(m, path, err, sizeof err);
        if (rc && rc != -ENOMEM)
            fb__fr_model_warn(m, "%s", err);
        else
            (*loaded)++;
        return rc;
    }
    /* opendir opens with O_DIRECTORY | O_NONBLOCK: a FIFO swapped in
     * after the stat fails with ENOTDIR instead of blocking */
    DIR *d = opendir(path);
    if (!d) {
        fb__fr_model_warn(m, "%s: %s", path, strerror(errno));
        return -errno;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 64;
            char **nn = fb__realloc(names, ncap * sizeof *nn);
            if (!nn) {
                rc = -ENOMEM;
                break;
            }
            names = nn;
            cap = ncap;
        }
        size_t need = strlen(path) + strlen(e->d_name) + 2;
        names[n] = fb__malloc(need);
        if (!names[n]) {
            rc = -ENOMEM;
            break;
        }
        snprintf(names[n], need, "%s/%s", path, e->d_name);
        n++;
    }
    closedir(d);
    if (rc) {
        for (size_t i = 0; i < n; i++)
            free(names[i]);
        free(names);
        return rc;
    }
    if (n)
        qsort(names, n, sizeof *names, cmp_str);
    char hint[512];
    dir_hint(path, hint, sizeof hint);
    int any = 0, before = *loaded;
    rc = load_files(m, names, n, &any, loaded);
    free(names);
    if (rc)
        return rc;
    if (!any || (*loaded == before && hint[0])) {
        if (hint[0] && !m->where_warning)
            m->where_warning = m->nwarnings + 1;
        fb__fr_model_warn(m, "%s: directory holds no dump files%s%s", path,
                          any ? " it could read" : "", hint);
    }
    return 0;
}

/* ------------------------------------------------------------------ */
/* Analysis. */

typedef struct gstat {      /* one member of one group */
    uint64_t max_entered;   /* highest collective seq entered, 0 none */
    uint64_t min_seen;      /* lowest seq seen (window start), 0 none */
    uint64_t stuck_seq;     /* lowest pending collective seq, 0 none  */
    uint64_t stuck_t;
    uint64_t first_pending_seq; /* lowest pending, however young */
    int rank_idx;           /* index in m->ranks, -1 no evidence      */
} gstat;

typedef struct vc { uint64_t v; uint32_t n; } vc;
#define NV 4
typedef struct bucket {
    vc op[NV], sz[NV], dt[NV];
    uint32_t n, ndone, npending_old;
    uint64_t t_base, t_max;
    double t_sum;           /* of t - t_base */
    uint8_t t_all;          /* every entry had a time */
} bucket;

typedef struct tuple { uint32_t kind, group; uint64_t seq; int rank; int op; } tuple;

typedef struct ctx {
    fb__fr_result *res;
    fb__fr_model *m;
    int maxrank;
    int *rank_idx;          /* global rank -> index in m->ranks, -1 */
    gstat **gs;             /* per group, per group rank */
    int *gsize;             /* per group: members */
    int *grank;             /* per group: the bound rank's group rank, -1 */
    uint8_t *stuck_rank;    /* per index in m->ranks: pending long enough */
    size_t *np2p;           /* per index in m->ranks: p2p entries, SIZE_MAX
                             * not counted (a duplicate rank) */
    uint64_t *gmin, *gmax, *gcnt; /* per group: collective seqs seen, the
                             * lowest, highest and how many (member_stats) */
    uint64_t *stuck;        /* per group: seq where progress stopped, 0 */
    int *stuck_op;
    uint64_t *bbase;        /* per group: bucket window start seq */
    uint64_t *bcount;
    bucket **b;
    tuple *tup;
    size_t ntup;
    size_t tup_over;
    uint64_t snapshot_torch;
    int any_entries;
    int multihost;          /* the rings came from more than one host */
    size_t p2p_stuck;       /* p2p ops stuck with no rank to blame; the
                             * first: group, src, dst, k, send, matched */
    int64_t p2p_stuck_key[6];
} ctx;

static void tuple_add(ctx *c, int kind, uint32_t g, uint64_t seq, int rank, int op)
{
    if (c->ntup >= MAX_TUPLES) {
        c->tup_over++;
        return;
    }
    c->tup[c->ntup++] = (tuple){(uint32_t)kind, g, seq, rank, op};
}

/* When the evidence was taken.  A PyTorch dump is written on the timeout,
 * so its file time says how long ranks waited -- unless the file was
 * copied long after (then only the newest entry is known). */
static uint64_t snap_of(const ctx *c, const fb__fr_rank *r)
{
    if (r->src == FR_SRC_RING)
        return r->snapshot_ns;
    if (r->snapshot_ns >= c->snapshot_torch &&
        r->snapshot_ns - c->snapshot_torch < 86400ull * 1000000000ull)
        return r->snapshot_ns;
    return c->snapshot_torch;
}

static int old_enough(const ctx *c, const fb__fr_rank *r, uint64_t t)
{
    if (r->src != FR_SRC_RING)
        return 1; /* PyTorch dumps are written on a timeout */
    uint64_t s = r->snapshot_ns;
    return t == 0 || (s > t && (double)(s - t) / 1e9 >= c->res->opt.min_wait_s);
}

/* A rank's group rank in every group is a lookup in c->grank while the
 * rank is bound: ranks may belong to many groups, and scanning their
 * membership list per entry or per group made the passes quadratic. */
static void bind_rank(ctx *c, const fb__fr_rank *r)
{
    for (size_t i = r->nmemb; i-- > 0;) /* the first record wins */
        c->grank[r->memb[i].group] = r->memb[i].grank;
}

static void unbind_rank(ctx *c, const fb__fr_rank *r)
{
    for (size_t i = 0; i < r->nmemb; i++)
        c->grank[r->memb[i].group] = -1;
}

/* Groups whose member list no source gave: sized and filled from what the
 * ranks say about themselves (members[grank] = global rank or -1). */
static int fill_unlisted_groups(ctx *c)
{
    fb__fr_model *m = c->m;
    int *maxg = fb__malloc((m->ngroups + 1) * sizeof *maxg);
    if (!maxg)
        return -ENOMEM;
    for (size_t g = 0; g < m->ngroups; g++)
        maxg[g] = m->groups[g].members ? INT_MIN : -1;
    for (size_t i = 0; i < m->nranks; i++)
        for (size_t k = 0; k < m->ranks[i].nmemb; k++) {
            const struct fb__fr_memb *mb = &m->ranks[i].memb[k];
            if (maxg[mb->group] != INT_MIN && mb->grank > maxg[mb->group])
                maxg[mb->group] = mb->grank;
        }
    int rc = 0;
    /* No group has more members than the world: a place past it (a rank's
     * own claim, in a dump or a ring that states no such world) would size
     * the group's arrays, gigabytes for one number. */
    int limit = m->world_size > 0 && m->world_size < (1 << 24) ? m->world_size : 1 << 24;
    int past = 0;
    for (size_t g = 0; g < m->ngroups; g++) {
        fb__fr_group *gr = &m->groups[g];
        int size = gr->size;
        if (maxg[g] == INT_MIN)
            continue;
        if (maxg[g] >= limit) {
            past++;
            maxg[g] = INT_MIN;
            gr->size = 0; /* no member list: nothing may index one */
            continue;
        }
        if (size <= maxg[g] || size > limit)
            size = maxg[g] + 1;
        if (size <= 0) {
            maxg[g] = INT_MIN;
            continue;
        }
        gr->members = fb__malloc((size_t)size * sizeof *gr->members);
        if (!gr->members) {
            rc = -ENOMEM;
            goto out;
        }
        for (int k = 0; k < size; k++)
            gr->members[k] = -1;
        gr->size = size;
    }
    for (size_t i = 0; i < m->nranks; i++)
        for (size_t k = 0; k < m->ranks[i].nmemb; k++) {
            const struct fb__fr_memb *mb = &m->ranks[i].memb[k];
            fb__fr_group *gr = &m->groups[mb->group];
            if (maxg[mb->group] != INT_MIN && mb->grank >= 0 && mb->grank < gr->size)
                gr->members[mb->grank] = m->ranks[i].rank;
        }
    if (past)
        fb__fr_model_warn(m, "%d group%s named a rank's place at or past the world "
                          "size %d: %s membership is not known", past,
                          past == 1 ? "" : "s", limit, past == 1 ? "its" : "their");
out:
    free(maxg);
    return rc;
}

/* Resolve group membership and allocate the per-member summaries. */
static int resolve_groups(ctx *c)
{
    fb__fr_model *m = c->m;
    int rc;
    c->gsize = fb__calloc(m->ngroups + 1, sizeof *c->gsize);
    c->gs = fb__calloc(m->ngroups + 1, sizeof *c->gs);
    c->grank = fb__malloc((m->ngroups + 1) * sizeof *c->grank);
    if (!c->gsize || !c->gs || !c->grank)
        return -ENOMEM;
    for (size_t g = 0; g < m->ngroups; g++)
        c->grank[g] = -1;
    if ((rc = fill_unlisted_groups(c)))
        return rc;
    for (size_t g = 0; g < m->ngroups; g++) {
        fb__fr_group *gr = &m->groups[g];
        if (!gr->members || gr->size <= 0)
            continue;
        c->gsize[g] = gr->size;
        c->gs[g] = fb__calloc((size_t)gr->size, sizeof(gstat));
        if (!c->gs[g])
            return -ENOMEM;
        for (int k = 0; k < gr->size; k++) {
            int gl = gr->members[k];
            c->gs[g][k].rank_idx = (gl >= 0 && gl <= c->maxrank) ? c->rank_idx[gl] : -1;
        }
    }
    return 0;
}

/* Pass 1: per member summaries; per group the span of sequence numbers
 * (for buckets) and per rank its p2p entries (for the p2p passes, which
 * skip ranks without): each pass is a walk over every entry, so passes
 * that can share one do. */
static int member_stats(ctx *c)
{
    fb__fr_model *m = c->m;
    c->np2p = fb__malloc((m->nranks + 1) * sizeof *c->np2p);
    c->gmin = fb__calloc(m->ngroups + 1, sizeof *c->gmin);
    c->gmax = fb__calloc(m->ngroups + 1, sizeof *c->gmax);
    c->gcnt = fb__calloc(m->ngroups + 1, sizeof *c->gcnt);
    if (!c->np2p || !c->gmin || !c->gmax || !c->gcnt)
        return -ENOMEM;
    for (size_t i = 0; i < m->nranks; i++) {
        fb__fr_rank *r = &m->ranks[i];
        c->np2p[i] = SIZE_MAX;
        if (c->rank_idx[r->rank] != (int)i)
            continue; /* a duplicate */
        uint32_t lastg = UINT32_MAX;
        gstat *st = NULL;
        size_t np2p = 0;
        bind_rank(c, r);
        for (size_t k = 0; k < r->n; k++) {
            const fb__fr_ent *e = &r->ents[k];
            c->any_entries = 1;
            if (e->flags & FR_ENT_P2P) {
                np2p++;
                continue;
            }
            if (e->seq > c->gmax[e->group])
                c->gmax[e->group] = e->seq;
            if (!c->gmin[e->group] || e->seq < c->gmin[e->group])
                c->gmin[e->group] = e->seq;
            c->gcnt[e->group]++;
            if (e->group != lastg) {
                lastg = e->group;
                int gr = c->grank[e->group];
                st = (gr >= 0 && gr < c->gsize[e->group]) ? &c->gs[e->group][gr] : NULL;
            }
            if (!st)
                continue;
            if (e->seq > st->max_entered)
                st->max_entered = e->seq;
            if (!st->min_seen || e->seq < st->min_seen)
                st->min_seen = e->seq;
            if (e->state != FR_DONE) {
                if (!st->first_pending_seq || e->seq < st->first_pending_seq)
                    st->first_pending_seq = e->seq;
                if (old_enough(c, r, e->t_ns) &&
                    (!st->stuck_seq || e->seq < st->stuck_seq)) {
                    st->stuck_seq = e->seq;
                    st->stuck_t = e->t_ns;
                }
            }
        }
        c->np2p[i] = np2p;
        unbind_rank(c, r);
    }
    return 0;
}

/* Which ranks with evidence are stuck anywhere (a collective or a p2p op
 * pending long enough), once per rank: the culprit step asks for each of
 * up to a million candidates. */
static int mark_stuck_ranks(ctx *c)
{
    const fb__fr_model *m = c->m;
    c->stuck_rank = fb__calloc(m->nranks + 1, 1);
    if (!c->stuck_rank)
        return -ENOMEM;
    for (size_t i = 0; i < m->nranks; i++) {
        const fb__fr_rank *r = &m->ranks[i];
        for (size_t k = 0; k < r->nmemb && !c->stuck_rank[i]; k++) {
            uint32_t g = r->memb[k].group;
            int gr = r->memb[k].grank;
            if (gr >= 0 && gr < c->gsize[g] && c->gs[g] && c->gs[g][gr].stuck_seq)
                c->stuck_rank[i] = 1;
        }
        for (size_t k = c->np2p[i] ? r->n : 0; k-- > 0 && !c->stuck_rank[i];) {
            const fb__fr_ent *e = &r->ents[k];
            if ((e->flags & FR_ENT_P2P) && e->state != FR_DONE &&
                old_enough(c, r, e->t_ns))
                c->stuck_rank[i] = 1;
        }
    }
    return 0;
}

static int rank_stuck(const ctx *c, int global)
{
    int idx = (global >= 0 && global <= c->maxrank) ? c->rank_idx[global] : -1;
    return idx >= 0 && c->stuck_rank[idx];
}

/* The last completed entry of a rank, described. */
static void last_done(const ctx *c, int global, char *buf, size_t size)
{
    int idx = (global >= 0 && global <= c->maxrank) ? c->rank_idx[global] : -1;
    buf[0] = '\0';
    if (idx < 0) {
        snprintf(buf, size, "rank %d: no flight-recorder data", global);
        return;
    }
    const fb__fr_rank *r = &c->m->ranks[idx];
    /* Across hosts the culprit's host is news (on one it is not). */
    char host[80] = "";
    if (c->multihost && r->host[0])
        snprintf(host, sizeof host, " (host %s)", r->host);
    for (size_t k = r->n; k-- > 0;) {
        const fb__fr_ent *e = &r->ents[k];
        if (e->state == FR_DONE) {
            snprintf(buf, size, "rank %d%s last completed %s #%" PRIu64 " on %s%s",
                     global, host, opname(e->op), e->seq, gname(c->m, (int)e->group),
                     (e->flags & FR_ENT_P2P) ? " (p2p)" : "");
            if (r->step >= 0)
                snprintf(buf + strlen(buf), size - strlen(buf), " at step %" PRId64,
                         r->step);
            if (e->frame)
                snprintf(buf + strlen(buf), size - strlen(buf), " from %s",
                         c->m->strs[e->frame]);
            return;
        }
    }
    snprintf(buf, size, "rank %d%s completed nothing in its recorder", global, host);
}

/* The call site (interned "file:line", 0 none) of global rank `global`'s
 * collective #seq on group g, or of any rank's when `global` < 0. */
static uint32_t site_at(const ctx *c, int global, uint32_t g, uint64_t seq)
{
    for (size_t i = 0; i < c->m->nranks; i++) {
        const fb__fr_rank *r = &c->m->ranks[i];
        if (c->rank_idx[r->rank] != (int)i || (global >= 0 && r->rank != global))
            continue;
        for (size_t k = r->n; k-- > 0;) {
            const fb__fr_ent *e = &r->ents[k];
            if (e->group == g && e->seq == seq && !(e->flags & FR_ENT_P2P)) {
                if (e->frame)
                    return e->frame;
                break;
            }
        }
    }
    return 0;
}

static int hang_analysis(ctx *c)
{
    fb__fr_model *m = c->m;
    fb__fr_result *res = c->res;
    c->stuck = fb__calloc(m->ngroups + 1, sizeof *c->stuck);
    c->stuck_op = fb__calloc(m->ngroups + 1, sizeof *c->stuck_op);
    /* each list holds at most one group's members */
    int maxsize = 1;
    for (size_t g = 0; g < m->ngroups; g++)
        if (c->gsize[g] > maxsize)
            maxsize = c->gsize[g];
    int *missing = fb__malloc((size_t)maxsize * sizeof *missing);
    int *unknown = fb__malloc((size_t)maxsize * sizeof *unknown);
    int *unknown_g = fb__malloc((size_t)maxsize * sizeof *unknown_g);
    if (!c->stuck || !c->stuck_op || !missing || !unknown || !unknown_g) {
        free(missing);
        free(unknown);
        free(unknown_g);
        return -ENOMEM;
    }
    int rc = 0;
    for (size_t g = 0; g < m->ngroups && !rc; g++) {
        int size = c->gsize[g];
        gstat *gs = c->gs[g];
        if (!gs)
            continue;
        uint64_t s = 0;
        for (int k = 0; k < size; k++)
            if (gs[k].stuck_seq && (!s || gs[k].stuck_seq < s))
                s = gs[k].stuck_seq;
        if (!s)
            continue;
        c->stuck[g] = s;
        int nmiss = 0, nunk = 0, nunk_g = 0, nwait = 0;
        double max_wait = 0;
        int op = -1;
        for (int k = 0; k < size; k++) {
            int gl = m->groups[g].members[k];
            if (gs[k].rank_idx < 0) {
                if (gl >= 0)
                    unknown[nunk++] = gl;
                else
                    unknown_g[nunk_g++] = k;
                continue;
            }
            const fb__fr_rank *r = &m->ranks[gs[k].rank_idx];
            if (gs[k].max_entered < s && !(r->wrapped && gs[k].min_seen > s)) {
                missing[nmiss++] = gl;
            } else if (gs[k].first_pending_seq && gs[k].first_pending_seq <= s) {
                nwait++;
                uint64_t snap = snap_of(c, r);
                if (gs[k].stuck_t && snap > gs[k].stuck_t &&
                    (double)(snap - gs[k].stuck_t) / 1e9 > max_wait)
                    max_wait = (double)(snap - gs[k].stuck_t) / 1e9;
            }
        }
        /* the operation at s, from any rank that entered it */
        for (int k = 0; k < size && op < 0; k++) {
            if (gs[k].rank_idx < 0)
                continue;
            const fb__fr_rank *r = &m->ranks[gs[k].rank_idx];
            for (size_t i = r->n; i-- > 0;)
                if (r->ents[i].group == g && r->ents[i].seq == s &&
                    !(r->ents[i].flags & FR_ENT_P2P)) {
                    op = r->ents[i].op;
                    break;
                }
        }
        c->stuck_op[g] = op;
        char rl[256], wait[64], last[384] = "";
        if (max_wait >= 0.05)
            snprintf(wait, sizeof wait, " up to %.1f s", max_wait);
        else
            wait[0] = '\0';
        if (nmiss) {
            fmt_ranks(rl, sizeof rl, missing, nmiss);
            finding *f;
            if ((rc = add_finding(res, FB__FR_MISSING_RANKS, (int)g, s, 1, op, missing,
                                  nmiss, &f)) || !f)
                continue;
            last_done(c, f->ranks[0], last, sizeof last);
            uint32_t site = site_at(c, -1, (uint32_t)g, s);
            snprintf(f->detail, sizeof f->detail,
                     "rank%s %s never entered %s #%" PRIu64 "%s%s on %s; %d rank%s "
                     "waiting in it%s; %s", nmiss > 1 ? "s" : "", rl,
                     opname(op), s, site ? " at " : "", m->strs[site],
                     gname(m, (int)g), nwait, nwait == 1 ? "" : "s", wait, last);
        } else if (nunk || nunk_g) {
            if (nunk)
                fmt_ranks(rl, sizeof rl, unknown, nunk);
            else
                fmt_ranks(rl, sizeof rl, unknown_g, nunk_g);
            finding *f;
            rc = add_finding(res, FB__FR_MISSING_RANKS, (int)g, s, 1, op, unknown,
                             nunk, &f);
            int many = (nunk ? nunk : nunk_g) > 1;
            if (f)
                snprintf(f->detail, sizeof f->detail,
                         "every rank with data entered %s #%" PRIu64 " on %s "
                         "(%d waiting%s); no flight-recorder data from %s%s %s%s, "
                         "which did not finish it", opname(op), s,
                         gname(m, (int)g), nwait, wait,
                         nunk ? "rank" : "group rank", many ? "s" : "", rl,
                         nunk ? "" : " (world ranks unknown)");
        }
    }
    free(missing);
    free(unknown);
    free(unknown_g);
    return rc;
}

static uint64_t cmp_size(const fb__fr_ent *e)
{
    if (e->op == FB_OP_REDUCE_SCATTER || e->op == FB_OP_SCATTER)
        return (uint64_t)e->out_numel;
    return (uint64_t)e->in_numel;
}

static void vc_add(vc *v, uint64_t x)
{
    for (int i = 0; i < NV; i++) {
        if (v[i].n && v[i].v == x) {
            v[i].n++;
            return;
        }
        if (!v[i].n) {
            v[i].v = x;
            v[i].n = 1;
            return;
        }
    }
}

static uint64_t vc_major(const vc *v)
{
    int best = 0;
    for (int i = 1; i < NV; i++)
        if (v[i].n > v[best].n)
            best = i;
    return v[best].v;
}

static int vc_distinct(const vc *v)
{
    return v[1].n != 0;
}

static int buckets(ctx *c)
{
    fb__fr_model *m = c->m;
    size_t G = m->ngroups;
    c->bbase = fb__calloc(G + 1, sizeof *c->bbase);
    c->bcount = fb__calloc(G + 1, sizeof *c->bcount);
    c->b = fb__calloc(G + 1, sizeof *c->b);
    const uint64_t *maxs = c->gmax, *mins = c->gmin, *cnt = c->gcnt;
    int rc = -ENOMEM;
    if (!c->bbase || !c->bcount || !c->b)
        goto out;
    for (size_t g = 0; g < G; g++) {
        if (!cnt[g])
            continue;
        uint64_t limit = 4 * cnt[g] / (c->gsize[g] ? (uint64_t)c->gsize[g] : 1) + 4096;
        uint64_t base = mins[g];
        if (maxs[g] - mins[g] + 1 > limit) {
            base = maxs[g] - limit + 1;
            fb__fr_model_warn(m, "group %s: sequence numbers span %" PRIu64 "..%" PRIu64
                          "; only the newest %" PRIu64 " are compared across ranks",
                          gname(m, (int)g), mins[g], maxs[g], limit);
        }
        c->bbase[g] = base;
        c->bcount[g] = maxs[g] - base + 1;
        c->b[g] = fb__calloc(c->bcount[g], sizeof(bucket));
        if (!c->b[g])
            goto out;
    }
    for (size_t i = 0; i < m->nranks; i++) {
        fb__fr_rank *r = &m->ranks[i];
        if (c->rank_idx[r->rank] != (int)i)
            continue;
        for (size_t k = 0; k < r->n; k++) {
            const fb__fr_ent *e = &r->ents[k];
            if ((e->flags & FR_ENT_P2P) || e->seq < c->bbase[e->group])
                continue;
            bucket *b = &c->b[e->group][e->seq - c->bbase[e->group]];
            vc_add(b->op, e->op);
            if (!(e->flags & FR_ENT_VARIABLE))
                vc_add(b->sz, cmp_size(e));
            vc_add(b->dt, e->dtype);
            if (b->n == 0) {
                b->t_all = 1;
                b->t_base = e->t_ns;
            }
            b->n++;
            if (e->state == FR_DONE)
                b->ndone++;
            else if (old_enough(c, r, e->t_ns))
                b->npending_old++;
            if (!e->t_ns)
                b->t_all = 0;
            else {
                b->t_sum += (double)((int64_t)(e->t_ns - b->t_base));
                if (e->t_ns > b->t_max)
                    b->t_max = e->t_ns;
            }
        }
    }
    rc = 0;
out:
    return rc;
}

static int symmetric(int op)
{
    return op == FB_OP_ALLREDUCE || op == FB_OP_ALLGATHER ||
           op == FB_OP_REDUCE_SCATTER || op == FB_OP_ALLTOALL ||
           op == FB_OP_BARRIER;
}

/* Pass 2: entries that disagree with their bucket's majority. */
static void mismatches(ctx *c)
{
    fb__fr_model *m = c->m;
    for (size_t i = 0; i < m->nranks; i++) {
        fb__fr_rank *r = &m->ranks[i];
        if (c->rank_idx[r->rank] != (int)i)
            continue;
        for (size_t k = 0; k < r->n; k++) {
            const fb__fr_ent *e = &r->ents[k];
            uint32_t g = e->group;
            if ((e->flags & FR_ENT_P2P) || !c->b[g] || e->seq < c->bbase[g])
                continue;
            const bucket *b = &c->b[g][e->seq - c->bbase[g]];
            /* own size rule */
            int gsz = c->gsize[g];
            if (gsz > 0 && e->in_numel >= 0 && e->out_numel >= 0 &&
                !(e->flags & FR_ENT_VARIABLE) &&
                ((e->op == FB_OP_ALLGATHER && e->out_numel != e->in_numel * gsz) ||
                 (e->op == FB_OP_REDUCE_SCATTER && e->in_numel != e->out_numel * gsz))) {
                tuple_add(c, FB__FR_SIZE_MISMATCH, g, e->seq, r->rank, e->op);
                continue;
            }
            if (b->n < 2)
                continue;
            uint64_t mop = vc_major(b->op);
            if (vc_distinct(b->op) && e->op != mop) {
                tuple_add(c, FB__FR_TYPE_MISMATCH, g, e->seq, r->rank, (int)mop);
                continue;
            }
            if (vc_distinct(b->sz) && cmp_size(e) != vc_major(b->sz) &&
                e->in_numel >= 0 && !(e->flags & FR_ENT_VARIABLE)) {
                tuple_add(c, FB__FR_SIZE_MISMATCH, g, e->seq, r->rank, e->op);
                continue;
            }
            if (vc_distinct(b->dt) && e->dtype != vc_major(b->dt) && e->dtype) {
                tuple_add(c, FB__FR_DTYPE_MISMATCH, g, e->seq, r->rank, e->op);
                continue;
            }
            if (symmetric(e->op) && b->ndone && e->state != FR_DONE &&
                (int)b->n == gsz && old_enough(c, r, e->t_ns))
                tuple_add(c, FB__FR_STATE_MISMATCH, g, e->seq, r->rank, e->op);
        }
    }
}

/* p2p: (group, src, dst, pair_seq) of sends and recvs must pair up.
 * pair_seq is the n-th op of the rank with that peer, that way: firebreak
 * rings record it, so it is absolute; a PyTorch dump does not, and the
 * loader counts it from the dump's first entry, so in a dump that dropped
 * its oldest entries it starts lower than the peer's count (`rel`).  Such
 * a run of ops is aligned with the peer's by PyTorch's p2p_seq_id (`pseq`)
 * before they are paired; when the ids do not line up, nothing unmatched
 * in the run can be blamed on a rank. */
typedef struct p2pkey {
    uint64_t pseq;        /* p2p_seq_id (PyTorch), the ring's p2p seq   */
    uint32_t g;
    int32_t src, dst;     /* group ranks                                 */
    uint32_t k;           /* pair_seq                                    */
    int32_t who;          /* the global rank that recorded it            */
    uint8_t send, pending, old, rel;
} p2pkey;

static int cmp_p2p(const void *a, const void *b)
{
    const p2pkey *x = a, *y = b;
    if (x->g != y->g) return x->g < y->g ? -1 : 1;
    if (x->src != y->src) return x->src < y->src ? -1 : 1;
    if (x->dst != y->dst) return x->dst < y->dst ? -1 : 1;
    if (x->k != y->k) return x->k < y->k ? -1 : 1;
    return (int)x->send - (int)y->send;
}

/* A matched pair both sides entered and neither completed, or a pending
 * op whose pair cannot be told: stuck, with no rank to blame (the
 * verdict is `undecided`, as for a collective every member entered). */
static void p2p_stuck(ctx *c, const p2pkey *x, int matched)
{
    if (c->p2p_stuck++)
        return;
    c->p2p_stuck_key[0] = (int64_t)x->g;
    c->p2p_stuck_key[1] = x->src;
    c->p2p_stuck_key[2] = x->dst;
    c->p2p_stuck_key[3] = x->k;
    c->p2p_stuck_key[4] = x->send;
    c->p2p_stuck_key[5] = matched;
}

/* Shift the relative side of the run v[0..n) (one group, source and
 * destination) so that its ops line up with the peer's by p2p_seq_id, and
 * sort the run again.  Returns 1 when aligned (or nothing to align), 0
 * when the ids give no consistent alignment. */
static int p2p_align(p2pkey *v, size_t n)
{
    int srel = 0, rrel = 0, ns = 0, nr = 0;
    for (size_t i = 0; i < n; i++) {
        if (v[i].send) {
            ns++;
            srel |= v[i].rel;
        } else {
            nr++;
            rrel |= v[i].rel;
        }
    }
    if ((!srel && !rrel) || !ns || !nr)
        return 1;
    int xsend = srel; /* the side to shift */
    const p2pkey *x = NULL;
    for (size_t i = 0; i < n && !x; i++) /* sorted by k: the first is lowest */
        if (v[i].send == xsend)
            x = &v[i];
    const p2pkey *y = NULL;
    for (size_t i = 0; i < n && !y && x->pseq; i++)
        if (v[i].send != xsend && v[i].pseq == x->pseq)
            y = &v[i];
    if (!y) { /* the peer's window may start later: anchor on its first */
        const p2pkey *y0 = NULL;
        for (size_t i = 0; i < n && !y0; i++)
            if (v[i].send != xsend)
                y0 = &v[i];
        for (size_t i = 0; i < n && !y && y0->pseq; i++)
            if (v[i].send == xsend && v[i].pseq == y0->pseq) {
                x = &v[i];
                y = y0;
            }
    }
    if (!y)
        return 0;
    int64_t d = (int64_t)y->k - (int64_t)x->k;
    int64_t lo = INT64_MAX;
    for (size_t i = 0; i < n; i++)
        if (v[i].send == xsend && (int64_t)v[i].k + d < lo)
            lo = (int64_t)v[i].k + d;
    /* both relative and the shifted side would start below 1: shift the
     * other side up instead (numbers stay relative either way) */
    int64_t dx = lo < 1 ? d + 1 - lo : d, dy = lo < 1 ? 1 - lo : 0;
    for (size_t i = 0; i < n; i++) {
        int64_t k = (int64_t)v[i].k + (v[i].send == xsend ? dx : dy);
        if (k < 1 || k > UINT32_MAX - 1)
            return 0;
        v[i].k = (uint32_t)k;
    }
    qsort(v, n, sizeof *v, cmp_p2p);
    for (size_t i = 0; i + 1 < n; i++) /* every pair agrees on the id */
        if (v[i].k == v[i + 1].k && v[i].send != v[i + 1].send &&
            v[i].pseq != v[i + 1].pseq)
            return 0;
    return 1;
}

/* One run of v (a group, a source, a destination): pairs, and findings
 * for what is unmatched. */
static void p2p_run(ctx *c, p2pkey *v, size_t n)
{
    fb__fr_model *m = c->m;
    int aligned = p2p_align(v, n);
    uint32_t kmin[2] = {UINT32_MAX, UINT32_MAX}; /* per side: recv, send */
    for (size_t i = 0; i < n; i++)
        if (v[i].k < kmin[v[i].send])
            kmin[v[i].send] = v[i].k;
    for (size_t i = 0; i < n; i++) {
        if (i + 1 < n && v[i].k == v[i + 1].k && v[i].send != v[i + 1].send) {
            if (v[i].pending && v[i + 1].pending && v[i].old && v[i + 1].old)
                p2p_stuck(c, &v[i], aligned); /* unaligned: a pair by guess */
            i++;
            continue;
        }
        /* unmatched: the peer never posted its side, or its record of it
         * is gone */
        if (v[i].pending && !v[i].old)
            continue; /* just posted: in flight */
        if (!aligned) {
            if (v[i].pending)
                p2p_stuck(c, &v[i], 0);
            continue;
        }
        int peer_g = v[i].send ? v[i].dst : v[i].src;
        fb__fr_group *gr = &m->groups[v[i].g];
        if (peer_g < 0 || peer_g >= gr->size)
            continue;
        int peer = gr->members[peer_g];
        int pidx = (peer >= 0 && peer <= c->maxrank) ? c->rank_idx[peer] : -1;
        if (pidx < 0)
            continue; /* no data: reported as a missing dump */
        const fb__fr_rank *pr = &m->ranks[pidx];
        uint32_t pk = kmin[!v[i].send];
        if (pr->wrapped && (!v[i].pending || (pk != UINT32_MAX && v[i].k < pk)))
            continue; /* the peer's side may be among what it dropped */
        tuple_add(c, FB__FR_P2P_MISMATCH, v[i].g, v[i].k, peer,
                  v[i].send ? FB_OP_SEND : FB_OP_RECV);
        /* remember the direction in the seq's high bit for the detail */
        c->tup[c->ntup - 1].seq = ((uint64_t)v[i].send << 63) |
                                  ((uint64_t)(uint32_t)v[i].src << 32) |
                                  (uint32_t)v[i].dst;
        c->tup[c->ntup - 1].op = (int)v[i].k | (v[i].pending ? 1 << 30 : 0);
    }
}

static int p2p_check(ctx *c)
{
    fb__fr_model *m = c->m;
    size_t n = 0, cap = 0;
    p2pkey *v = NULL;
    for (size_t i = 0; i < m->nranks; i++) {
        fb__fr_rank *r = &m->ranks[i];
        if (c->rank_idx[r->rank] != (int)i || !c->np2p[i])
            continue;
        uint8_t rel = r->src != FR_SRC_RING && r->wrapped;
        bind_rank(c, r);
        for (size_t k = 0; k < r->n; k++) {
            const fb__fr_ent *e = &r->ents[k];
            if (!(e->flags & FR_ENT_P2P) || e->peer < 0 || !e->pair_seq ||
                (e->op != FB_OP_SEND && e->op != FB_OP_RECV))
                continue;
            int me = c->grank[e->group];
            if (me < 0)
                continue;
            if (n == cap) {
                cap = cap ? cap * 2 : 256;
                p2pkey *nv = fb__realloc(v, cap * sizeof *nv);
                if (!nv) {
                    unbind_rank(c, r);
                    free(v);
                    return -ENOMEM;
                }
                v = nv;
            }
            int send = e->op == FB_OP_SEND;
            v[n++] = (p2pkey){e->seq, e->group, send ? me : e->peer,
                              send ? e->peer : me, e->pair_seq, r->rank,
                              (uint8_t)send, e->state != FR_DONE,
                              (uint8_t)old_enough(c, r, e->t_ns), rel};
        }
        unbind_rank(c, r);
    }
    if (n)
        qsort(v, n, sizeof *v, cmp_p2p);
    for (size_t a = 0, b; a < n; a = b) {
        for (b = a + 1; b < n && v[b].g == v[a].g && v[b].src == v[a].src &&
                        v[b].dst == v[a].dst; b++)
            ;
        p2p_run(c, v + a, b - a);
    }
    free(v);
    return 0;
}

static int cmp_tuple(const void *a, const void *b)
{
    const tuple *x = a, *y = b;
    if (x->kind != y->kind) return x->kind < y->kind ? -1 : 1;
    if (x->group != y->group) return x->group < y->group ? -1 : 1;
    if (x->seq != y->seq) return x->seq < y->seq ? -1 : 1;
    if (x->op != y->op) return x->op < y->op ? -1 : 1;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

static int tuples_to_findings(ctx *c, int *p2p_hang)
{
    fb__fr_result *res = c->res;
    fb__fr_model *m = c->m;
    int rc = 0;
    if (c->ntup)
        qsort(c->tup, c->ntup, sizeof *c->tup, cmp_tuple);
    int *rk = fb__malloc((c->ntup + 1) * sizeof *rk);
    if (!rk)
        return -ENOMEM;
    for (size_t i = 0; i < c->ntup && !rc;) {
        size_t j = i;
        int n = 0;
        while (j < c->ntup && c->tup[j].kind == c->tup[i].kind &&
               c->tup[j].group == c->tup[i].group && c->tup[j].seq == c->tup[i].seq &&
               c->tup[j].op == c->tup[i].op)
            rk[n++] = c->tup[j++].rank;
        const tuple *t = &c->tup[i];
        int kind = (int)t->kind;
        char rl[256];
        if (kind == FB__FR_P2P_MISMATCH) {
            int send = (int)(t->seq >> 63);
            int src = (int)((t->seq >> 32) & 0x7fffffff), dst = (int)(uint32_t)t->seq;
            int pending = (t->op >> 30) & 1;
            int k = t->op & ((1 << 30) - 1);
            fb__fr_group *gr = &m->groups[t->group];
            int gsrc = src < gr->size ? gr->members[src] : -1;
            int gdst = dst < gr->size ? gr->members[dst] : -1;
            finding *f;
            rc = add_finding(res, FB__FR_P2P_MISMATCH, (int)t->group, (uint64_t)k, 1,
                             send ? FB_OP_SEND : FB_OP_RECV, rk, n, &f);
            if (f)
                snprintf(f->detail, sizeof f->detail,
                         "%s #%d from rank %d to rank %d on %s (%s) has no "
                         "matching %s on rank %d", send ? "send" : "recv", k,
                         gsrc, gdst, gname(m, (int)t->group),
                         pending ? "still pending" : "completed",
                         send ? "recv" : "send", send ? gdst : gsrc);
            if (pending)
                *p2p_hang = 1;
        } else {
            finding *f;
            rc = add_finding(res, kind, (int)t->group, t->seq, 1, t->op, rk, n, &f);
            fmt_ranks(rl, sizeof rl, rk, n);
            const bucket *b = (c->b[t->group] && t->seq >= c->bbase[t->group])
                                  ? &c->b[t->group][t->seq - c->bbase[t->group]] : NULL;
            if (f && kind == FB__FR_TYPE_MISMATCH && b) {
                /* Where the odd rank called from, and where the others did. */
                uint32_t own = site_at(c, rk[0], t->group, t->seq), other = 0;
                const fb__fr_ent *oe = NULL;
                for (size_t i2 = 0; i2 < m->nranks && !oe; i2++) {
                    const fb__fr_rank *r2 = &m->ranks[i2];
                    if (c->rank_idx[r2->rank] != (int)i2 || r2->rank == rk[0])
                        continue;
                    for (size_t k = r2->n; k-- > 0;)
                        if (r2->ents[k].group == t->group && r2->ents[k].seq == t->seq &&
                            !(r2->ents[k].flags & FR_ENT_P2P)) {
                            if (r2->ents[k].op == (uint16_t)t->op)
                                oe = &r2->ents[k];
                            break;
                        }
                }
                if (oe)
                    other = oe->frame;
                const fb__fr_ent *me = NULL;
                int mi = rk[0] <= c->maxrank ? c->rank_idx[rk[0]] : -1;
                for (size_t k = mi >= 0 ? m->ranks[mi].n : 0; k-- > 0;)
                    if (m->ranks[mi].ents[k].group == t->group &&
                        m->ranks[mi].ents[k].seq == t->seq &&
                        !(m->ranks[mi].ents[k].flags & FR_ENT_P2P)) {
                        me = &m->ranks[mi].ents[k];
                        break;
                    }
                char mine[160] = "another operation";
                if (me)
                    snprintf(mine, sizeof mine, "%s%s%s", opname(me->op),
                             own ? " at " : "", m->strs[own]);
                snprintf(f->detail, sizeof f->detail,
                         "rank%s %s called %s where the other "
                         "ranks called %s #%" PRIu64 "%s%s on %s", n > 1 ? "s" : "", rl,
                         mine, opname(t->op), t->seq, other ? " at " : "",
                         m->strs[other], gname(m, (int)t->group));
            }
            else if (f && kind == FB__FR_SIZE_MISMATCH && b)
                snprintf(f->detail, sizeof f->detail,
                         "rank%s %s passed a size that differs from the other "
                         "ranks (%" PRIu64 " elements) or breaks the %s size rule "
                         "in %s #%" PRIu64 " on %s", n > 1 ? "s" : "", rl,
                         vc_major(b->sz), opname(t->op), opname(t->op), t->seq,
                         gname(m, (int)t->group));
            else if (f && kind == FB__FR_DTYPE_MISMATCH && b)
                snprintf(f->detail, sizeof f->detail,
                         "rank%s %s used a dtype other than %s in %s #%" PRIu64
                         " on %s", n > 1 ? "s" : "", rl, m->strs[vc_major(b->dt)],
                         opname(t->op), t->seq, gname(m, (int)t->group));
            else if (f && kind == FB__FR_SIZE_MISMATCH)
                snprintf(f->detail, sizeof f->detail,
                         "rank%s %s: sizes break the %s rule (group size %d) "
                         "in #%" PRIu64 " on %s", n > 1 ? "s" : "", rl,
                         opname(t->op), c->gsize[t->group], t->seq,
                         gname(m, (int)t->group));
            else if (f && kind == FB__FR_STATE_MISMATCH)
                snprintf(f->detail, sizeof f->detail,
                         "rank%s %s still in %s #%" PRIu64 " on %s, which "
                         "other ranks completed", n > 1 ? "s" : "", rl,
                         opname(t->op), t->seq, gname(m, (int)t->group));
        }
        i = j;
    }
    free(rk);
    if (c->tup_over)
        fb__fr_model_warn(m, "%zu more disagreements were not itemized", c->tup_over);
    return rc;
}

typedef struct late { int rank; double sum; uint32_t n, last; } late;

static int cmp_late(const void *a, const void *b)
{
    const late *x = a, *y = b;
    double dx = x->n ? x->sum / x->n : 0, dy = y->n ? y->sum / y->n : 0;
    return (dx < dy) - (dx > dy);
}

/* One group's late ranks, worst first, as a finding.  Sorts L. */
static int late_finding(ctx *c, size_t g, late *L, int size)
{
    fb__fr_result *res = c->res;
    qsort(L, (size_t)size, sizeof *L, cmp_late);
    int nl = 0;
    int *rk = fb__malloc((size_t)size * sizeof *rk);
    char det[768];
    size_t len = 0;
    if (!rk)
        return -ENOMEM;
    det[0] = '\0';
    for (int k = 0; k < size; k++) {
        double mean = L[k].n ? L[k].sum / L[k].n : 0;
        if (mean < res->opt.late_threshold_s || L[k].n < 2)
            break;
        if (L[k].last * 4 < L[k].n && mean < 5 * res->opt.late_threshold_s)
            continue; /* rarely the last one: jitter, not a straggler */
        rk[nl++] = L[k].rank;
        if (len + 96 < sizeof det)
            len += (size_t)snprintf(det + len, sizeof det - len,
                                    "%srank %d late by %.3f ms on average, last "
                                    "in %u of %u", nl > 1 ? "; " : "", L[k].rank,
                                    mean * 1e3, L[k].last, L[k].n);
    }
    if (nl) {
        /* keep the lateness order in `ranks`: add_finding sorts, so
         * fill the finding by hand */
        finding *f;
        int rc = add_finding(res, FB__FR_LATE_RANKS, (int)g, 0, 0, -1, rk, nl, &f);
        if (rc) {
            free(rk);
            return rc;
        }
        if (f) {
            memcpy(f->ranks, rk, (size_t)nl * sizeof *rk);
            f->nranks = nl;
            snprintf(f->detail, sizeof f->detail, "on %s: %s",
                     gname(c->m, (int)g), det);
        }
    }
    free(rk);
    return 0;
}

/* Lateness of every member of every group at the collectives all members
 * completed: one pass over every rank's entries, then each group's
 * finding. */
static int lateness(ctx *c)
{
    fb__fr_model *m = c->m;
    late **L = fb__calloc(m->ngroups + 1, sizeof *L);
    int rc = -ENOMEM;
    if (!L)
        return -ENOMEM;
    for (size_t g = 0; g < m->ngroups; g++) {
        if (!c->b[g] || c->gsize[g] < 2)
            continue;
        L[g] = fb__calloc((size_t)c->gsize[g], sizeof **L);
        if (!L[g])
            goto out;
        for (int k = 0; k < c->gsize[g]; k++)
            L[g][k].rank = m->groups[g].members[k];
    }
    for (size_t i = 0; i < m->nranks; i++) {
        fb__fr_rank *r = &m->ranks[i];
        if (c->rank_idx[r->rank] != (int)i)
            continue;
        bind_rank(c, r);
        for (size_t k = 0; k < r->n; k++) {
            const fb__fr_ent *e = &r->ents[k];
            uint32_t g = e->group;
            int size = c->gsize[g], me = c->grank[g];
            if (!L[g] || (e->flags & FR_ENT_P2P) || e->seq < c->bbase[g] ||
                me < 0 || me >= size)
                continue;
            const bucket *b = &c->b[g][e->seq - c->bbase[g]];
            if ((int)b->n != size || b->ndone != b->n || !b->t_all)
                continue;
            double mine = (double)((int64_t)(e->t_ns - b->t_base));
            double others = (b->t_sum - mine) / (double)(size - 1);
            L[g][me].sum += (mine - others) / 1e9;
            L[g][me].n++;
            if (e->t_ns == b->t_max)
                L[g][me].last++;
        }
        unbind_rank(c, r);
    }
    for (size_t g = 0; g < m->ngroups; g++)
        if (L[g] && (rc = late_finding(c, g, L[g], c->gsize[g])))
            goto out;
    rc = 0;
out:
    for (size_t g = 0; g < m->ngroups; g++)
        free(L[g]);
    free(L);
    return rc;
}

/* Ranks of the world without evidence: a finding, and the compact list
 * the verdict `incomplete` and the summary name. */
static int missing_dumps(ctx *c)
{
    fb__fr_result *res = c->res;
    int world = res->world;
    size_t n = 0;
    int *miss = fb__malloc(((size_t)world + 1) * sizeof *miss);
    if (!miss)
        return -ENOMEM;
    for (int r = 0; r < world; r++)
        if (r > c->maxrank || c->rank_idx[r] < 0)
            miss[n++] = r;
    res->nmissing = (int)n;
    fmt_ranks(res->missing, sizeof res->missing, miss, (int)n);
    int rc = 0;
    if (n) {
        finding *f;
        rc = add_finding(res, FB__FR_MISSING_DUMP, -1, 0, 0, -1, miss, (int)n, &f);
        if (f)
            snprintf(f->detail, sizeof f->detail,
                     "no flight-recorder data from rank%s %s of %d: the "
                     "analysis cannot see %s", n > 1 ? "s" : "", res->missing,
                     world, n > 1 ? "them" : "it");
    }
    free(miss);
    return rc;
}

/* Takes v (malloc'd, n ranks) as the culprits; sorted unless `ordered`. */
static void set_culprits(fb__fr_result *res, int *v, int n, int ordered)
{
    free(res->culprits);
    res->culprits = v;
    res->nculprits = ordered ? n : sort_unique(v, n);
}

static int is_mismatch_kind(const finding *f)
{
    switch (f->kind) {
    case FB__FR_TYPE_MISMATCH:
    case FB__FR_SIZE_MISMATCH:
    case FB__FR_DTYPE_MISMATCH:
    case FB__FR_STATE_MISMATCH:
    case FB__FR_P2P_MISMATCH:
        return 1;
    default:
        return 0;
    }
}

static int at_stuck_seq(const ctx *c, const finding *f)
{
    return f->group >= 0 && f->has_seq && c->stuck[f->group] == f->seq;
}

/* Which of two files read for the same rank is analyzed (a read before
 * b): the one with entries over an empty one (a firebreak ring that saw
 * none of PyTorch's collectives beside PyTorch's own dump, in either
 * order).  Of two with entries, firebreak's ring over PyTorch's dump,
 * whatever the order they were read in, so that every rank read from both
 * is analyzed from the same kind of source (the two name groups
 * differently, and mixing them would split one collective in two); of
 * two of the same kind, the first.  Returns 1 when b replaces a. */
static int rank_source_wins(const fb__fr_rank *a, const fb__fr_rank *b)
{
    if (!a->n || !b->n)
        return b->n > 0 && a->n == 0;
    return b->src == FR_SRC_RING && a->src != FR_SRC_RING;
}

/* Ranks by number (rank_idx; a rank read twice is warned about and one
 * file chosen by rank_source_wins), the time PyTorch dumps were taken,
 * dump versions. */
static int index_ranks(ctx *c)
{
    fb__fr_model *m = c->m;
    const char *host = NULL;
    for (size_t i = 0; i < m->nranks; i++) {
        if (m->ranks[i].rank > c->maxrank)
            c->maxrank = m->ranks[i].rank;
        if (!m->ranks[i].host[0])
            continue;
        if (!host)
            host = m->ranks[i].host;
        else if (strcmp(m->ranks[i].host, host))
            c->multihost = 1;
    }
    c->rank_idx = fb__malloc(((size_t)c->maxrank + 2) * sizeof *c->rank_idx);
    if (!c->rank_idx)
        return -ENOMEM;
    for (int i = 0; i <= c->maxrank; i++)
        c->rank_idx[i] = -1;
    for (size_t i = 0; i < m->nranks; i++) {
        fb__fr_rank *r = &m->ranks[i];
        int prev = c->rank_idx[r->rank];
        if (prev >= 0) {
            const fb__fr_rank *p = &m->ranks[prev];
            int wins = rank_source_wins(p, r);
            fb__fr_model_warn(m, "rank %d appears twice (%s, %zu entries, and %s, "
                              "%zu entries); using %s", r->rank, p->path, p->n,
                              r->path, r->n, wins ? r->path : p->path);
            if (wins)
                c->rank_idx[r->rank] = (int)i;
            continue;
        }
        c->rank_idx[r->rank] = (int)i;
        c->res->nranks++;
    }
    for (size_t i = 0; i < m->nranks; i++) {
        const fb__fr_rank *r = &m->ranks[i];
        if (c->rank_idx[r->rank] != (int)i || r->src == FR_SRC_RING)
            continue;
        for (size_t k = 0; k < r->n; k++)
            if (r->ents[k].t_ns > c->snapshot_torch)
                c->snapshot_torch = r->ents[k].t_ns;
    }
    for (size_t i = 1; i < m->nranks; i++)
        if (m->ranks[i].version && m->ranks[0].version &&
            m->ranks[i].src == m->ranks[0].src &&
            strcmp(m->ranks[i].version, m->ranks[0].version)) {
            fb__fr_model_warn(m, "ranks have different dump versions (rank %d: %s, "
                          "rank %d: %s); analyzing the fields they share",
                          m->ranks[0].rank, m->ranks[0].version, m->ranks[i].rank,
                          m->ranks[i].version);
            break;
        }
    return 0;
}

/* The verdict the findings decide: a mismatch where progress stopped (or
 * mismatches and nothing missing) before a hang; NULL when they decide
 * nothing.  *at_stuck: a mismatch sits where progress stopped. */
static void decide_verdict(ctx *c, int p2p_hang, int *at_stuck)
{
    fb__fr_result *res = c->res;
    int nmissing = 0, nmis = 0;
    *at_stuck = 0;
    for (size_t i = 0; i < res->nf; i++) {
        const finding *f = &res->f[i];
        if (f->kind == FB__FR_MISSING_RANKS) {
            nmissing++;
        } else if (is_mismatch_kind(f)) {
            nmis++;
            if (at_stuck_seq(c, f) && f->kind != FB__FR_P2P_MISMATCH)
                *at_stuck = 1;
        }
    }
    if (*at_stuck || (nmis && !nmissing && !p2p_hang))
        res->verdict = FB__FR_MISMATCH;
    else if (nmissing || p2p_hang)
        res->verdict = FB__FR_HANG;
}

/* Culprits of a decided verdict.  Undecided by the findings: `undecided`
 * when something is stuck, else late ranks (`slow`) or `ok`.  `ok` and
 * `undecided` become `incomplete` when ranks of the world have no evidence:
 * their evidence could have changed the answer.  A decided verdict stays,
 * missing evidence or not (docs/flight-recorder.md). */
static int find_culprits(ctx *c, int at_stuck)
{
    fb__fr_result *res = c->res;
    const fb__fr_model *m = c->m;
    size_t cap = 1, nc = 0;
    int rc;
    for (size_t i = 0; i < res->nf; i++) /* culprits come from rank lists */
        cap += (size_t)res->f[i].nranks;
    int *cul = fb__malloc(cap * sizeof *cul);
    if (!cul)
        return -ENOMEM;
    if (res->verdict == FB__FR_HANG) {
        /* missing (or p2p-silent) ranks that are stuck nowhere; if every
         * one is stuck somewhere, all of them */
        for (int pass = 0; pass < 2 && nc == 0; pass++)
            for (size_t i = 0; i < res->nf; i++) {
                const finding *f = &res->f[i];
                if (f->kind != FB__FR_MISSING_RANKS && f->kind != FB__FR_P2P_MISMATCH)
                    continue;
                for (int k = 0; k < f->nranks; k++)
                    if (pass == 1 || !rank_stuck(c, f->ranks[k]))
                        cul[nc++] = f->ranks[k];
            }
    } else if (res->verdict != V_NONE) {
        for (size_t i = 0; i < res->nf; i++) {
            const finding *f = &res->f[i];
            if (!is_mismatch_kind(f) || (at_stuck && !at_stuck_seq(c, f)))
                continue;
            for (int k = 0; k < f->nranks; k++)
                cul[nc++] = f->ranks[k];
        }
    }
    if (res->verdict != V_NONE) {
        set_culprits(res, cul, (int)nc, 0);
        return 0;
    }
    int stuck_any = c->p2p_stuck > 0;
    for (size_t g = 0; g < m->ngroups; g++)
        if (c->stuck[g])
            stuck_any = 1;
    if (!stuck_any) {
        if ((rc = lateness(c))) {
            free(cul);
            return rc;
        }
        for (size_t i = 0; i < res->nf; i++)
            if (res->f[i].kind == FB__FR_LATE_RANKS) { /* added last */
                size_t need = nc + (size_t)res->f[i].nranks + 1;
                if (need > cap) {
                    int *ncul = fb__realloc(cul, need * sizeof *cul);
                    if (!ncul) {
                        free(cul);
                        return -ENOMEM;
                    }
                    cul = ncul;
                    cap = need;
                }
                res->verdict = FB__FR_SLOW;
                for (int k = 0; k < res->f[i].nranks; k++)
                    cul[nc++] = res->f[i].ranks[k];
            }
    }
    if (res->verdict == V_NONE)
        res->verdict = stuck_any || !c->any_entries ? FB__FR_UNDECIDED : FB__FR_OK;
    if (res->nmissing && (res->verdict == FB__FR_OK ||
                          res->verdict == FB__FR_UNDECIDED))
        res->verdict = FB__FR_INCOMPLETE;
    set_culprits(res, cul, (int)nc, 1); /* slow: lateness order */
    return 0;
}

static int is_culprit(const fb__fr_result *res, int rank)
{
    return bsearch(&rank, res->culprits, (size_t)res->nculprits,
                   sizeof rank, cmp_int) != NULL;
}

/* The finding that tells the verdict.  For a hang, the missing_ranks or
 * p2p finding that made most of the culprits: the root, not the groups
 * whose members wait for it (culprits are sorted then: a binary search
 * per rank keeps this n log n for a million ranks). */
static const finding *top_finding(const fb__fr_result *res)
{
    int v = res->verdict;
    const finding *top = NULL;
    double best = 0;
    for (size_t i = 0; i < res->nf; i++) {
        const finding *f = &res->f[i];
        if (v == FB__FR_HANG && (f->kind == FB__FR_MISSING_RANKS ||
                                 f->kind == FB__FR_P2P_MISMATCH)) {
            int hits = 0;
            for (int k = 0; k < f->nranks; k++)
                hits += is_culprit(res, f->ranks[k]);
            double frac = f->nranks ? (double)hits / f->nranks : 0;
            if (frac > best || !top) {
                best = frac;
                top = f;
            }
        } else if (top) {
            continue;
        } else if (v == FB__FR_MISMATCH && is_mismatch_kind(f)) {
            top = f;
        } else if (v == FB__FR_SLOW && f->kind == FB__FR_LATE_RANKS) {
            top = f;
        }
    }
    return top;
}

/* What the summary says of a p2p op stuck with no rank to blame. */
static void p2p_stuck_text(const ctx *c, char *buf, size_t size)
{
    const fb__fr_model *m = c->m;
    const int64_t *key = c->p2p_stuck_key;
    const fb__fr_group *gr = &m->groups[key[0]];
    int src = key[1] < gr->size ? gr->members[key[1]] : -1;
    int dst = key[2] < gr->size ? gr->members[key[2]] : -1;
    char more[64] = "";
    if (c->p2p_stuck > 1)
        snprintf(more, sizeof more, " (%zu such ops in all)", c->p2p_stuck);
    if (key[5])
        snprintf(buf, size, "rank %d's send and rank %d's recv #%" PRId64 " on %s "
                 "were both entered and neither completed%s: suspect the network "
                 "or the transport, not a rank", src, dst, key[3],
                 gname(m, (int)key[0]), more);
    else
        snprintf(buf, size, "rank %d's %s #%" PRId64 " %s rank %d on %s is pending, "
                 "and the dumps that dropped older entries do not tell its pair "
                 "(their p2p_seq_id do not line up)%s: no rank can be blamed",
                 key[4] ? src : dst, key[4] ? "send" : "recv", key[3],
                 key[4] ? "to" : "from", key[4] ? dst : src,
                 gname(m, (int)key[0]), more);
}

/* One line: the verdict and what tells it. */
static void write_summary(ctx *c)
{
    fb__fr_result *res = c->res;
    const fb__fr_model *m = c->m;
    const finding *top = top_finding(res);
    char seen[640];
    int n = res->nranks, incomplete = res->verdict == FB__FR_INCOMPLETE;
    if (top) {
        snprintf(res->summary, sizeof res->summary, "%s: %s", fb__fr_verdict(res),
                 top->detail);
        return;
    }
    size_t g = 0;
    while (g < m->ngroups && !c->stuck[g])
        g++;
    if (g < m->ngroups)
        snprintf(seen, sizeof seen, "every rank%s entered %s #%" PRIu64
                 " on %s and none completed it: suspect the network or the "
                 "transport, not a rank", incomplete ? " read" : "",
                 opname(c->stuck_op[g]), c->stuck[g], gname(m, (int)g));
    else if (c->p2p_stuck)
        p2p_stuck_text(c, seen, sizeof seen);
    else if (!c->any_entries)
        snprintf(seen, sizeof seen, "no flight-recorder entries in %d rank%s",
                 n, n == 1 ? "" : "s");
    else if (incomplete)
        snprintf(seen, sizeof seen, "the %d rank%s read show%s nothing stuck "
                 "and no disagreement", n, n == 1 ? "" : "s", n == 1 ? "s" : "");
    else
        snprintf(seen, sizeof seen, "%d rank%s agree on every operation; "
                 "nothing stuck", n, n == 1 ? "" : "s");
    if (incomplete)
        snprintf(res->summary, sizeof res->summary, "incomplete: missing rank%s "
                 "%s (no flight-recorder data from %d of %d ranks); %s",
                 res->nmissing == 1 ? "" : "s", res->missing, res->nmissing,
                 res->world, seen);
    else
        snprintf(res->summary, sizeof res->summary, "%s: %s", fb__fr_verdict(res),
                 seen);
}

/* Text from ranks and files (group names, dtypes, frames, paths) goes into
 * details and the summary, which end on terminals and in logs: control
 * bytes become '?'.  Warnings are scrubbed by fb__fr_model_warn. */
static void scrub(char *s, size_t size)
{
    char tmp[1024];
    fb__safe_text(tmp, sizeof tmp < size ? sizeof tmp : size, s);
    memcpy(s, tmp, strlen(tmp) + 1);
}

static int analyze(fb__fr_result *res)
{
    fb__fr_model *m = &res->m;
    ctx c = {.res = res, .m = m, .maxrank = -1};
    int rc, p2p_hang = 0, at_stuck = 0;
    if ((rc = index_ranks(&c)) || (rc = resolve_groups(&c)))
        goto out;
    res->world = m->world_size > c.maxrank + 1 ? m->world_size : c.maxrank + 1;
    for (size_t g = 0; g < m->ngroups; g++)
        for (int k = 0; k < m->groups[g].size; k++)
            if (m->groups[g].members[k] >= res->world)
                res->world = m->groups[g].members[k] + 1;
    c.tup = fb__malloc(MAX_TUPLES * sizeof *c.tup);
    if (!c.tup) {
        rc = -ENOMEM;
        goto out;
    }
    if ((rc = member_stats(&c)) || (rc = mark_stuck_ranks(&c)) || (rc = hang_analysis(&c)) ||
        (rc = buckets(&c)))
        goto out;
    mismatches(&c);
    if ((rc = p2p_check(&c)) || (rc = tuples_to_findings(&c, &p2p_hang)) ||
        (rc = missing_dumps(&c)))
        goto out;
    decide_verdict(&c, p2p_hang, &at_stuck);
    if ((rc = find_culprits(&c, at_stuck)))
        goto out;
    write_summary(&c);
    scrub(res->summary, sizeof res->summary);
    for (size_t i = 0; i < res->nf; i++)
        scrub(res->f[i].detail, sizeof res->f[i].detail);
    if (m->oom) /* a warning could not be stored */
        rc = -ENOMEM;
out:
    if (c.gs)
        for (size_t g = 0; g < m->ngroups; g++)
            free(c.gs[g]);
    if (c.b)
        for (size_t g = 0; g < m->ngroups; g++)
            free(c.b[g]);
    free(c.gs);
    free(c.gsize);
    free(c.grank);
    free(c.stuck_rank);
    free(c.np2p);
    free(c.gmin);
    free(c.gmax);
    free(c.gcnt);
    free(c.b);
    free(c.bbase);
    free(c.bcount);
    free(c.stuck);
    free(c.stuck_op);
    free(c.rank_idx);
    free(c.tup);
    return rc;
}

/* Whether a load_path error says the path could not be opened (an errno,
 * not a regular file, not ours), not that what it holds is no dump. */
static int cannot_open(int rc)
{
    return rc == FB_ENOTREG || rc == FB_ENOTOURS || (rc < 0 && rc > -4000);
}

int fb__fr_analyze_paths_opt(const char *const *paths, int npaths,
                             const fb__fr_options *opt, fb__fr_result **out,
                             char *err, size_t errsz)
{
    fb__fr_result *res = fb__calloc(1, sizeof *res);
    if (!res) {
        snprintf(err, errsz, "flight-recorder analysis: %s", fb_strerror(-ENOMEM));
        return -ENOMEM;
    }
    res->verdict = V_NONE;
    if (fb__fr_model_init(&res->m)) {
        snprintf(err, errsz, "flight-recorder analysis: %s", fb_strerror(-ENOMEM));
        fb__fr_result_free(res);
        return -ENOMEM;
    }
    if (opt)
        res->opt = *opt;
    else
        fb__fr_options_init(&res->opt);
    if (res->opt.max_findings <= 0)
        res->opt.max_findings = 20;
    res->m.world_max = res->opt.world_max;
    int loaded = 0, last_rc = -ENOENT;
    for (int i = 0; i < npaths; i++) {
        int rc = load_path(&res->m, paths[i], &loaded);
        /* out of memory while reading is no missing evidence: a verdict
         * without a rank's dump could blame the wrong rank */
        if (rc == -ENOMEM || res->m.oom) {
            snprintf(err, errsz, "%s: %s", paths[i], fb_strerror(-ENOMEM));
            fb__fr_result_free(res);
            return -ENOMEM;
        }
        if (rc && res->opt.inputs_must_open && cannot_open(rc)) {
            snprintf(err, errsz, "%s", res->m.nwarnings
                     ? res->m.warnings[res->m.nwarnings - 1] : paths[i]);
            fb__fr_result_free(res);
            return rc;
        }
        if (rc)
            last_rc = rc;
    }
    if (!loaded) {
        /* the one that says where the dumps are, else the first */
        size_t w = res->m.where_warning;
        const char *why = w && w <= res->m.nwarnings ? res->m.warnings[w - 1]
                          : res->m.nwarnings ? res->m.warnings[0] : "";
        snprintf(err, errsz, "no flight-recorder data could be read%s%s",
                 *why ? ": " : "", why);
        fb__fr_result_free(res);
        return last_rc ? last_rc : FB_EFORMAT;
    }
    int rc = analyze(res);
    /* entries are no longer needed: keep the result small */
    for (size_t i = 0; i < res->m.nranks; i++) {
        res->events += res->m.ranks[i].n;
        free(res->m.ranks[i].ents);
        res->m.ranks[i].ents = NULL;
        res->m.ranks[i].n = res->m.ranks[i].cap = 0;
    }
    if (rc) {
        snprintf(err, errsz, "analysis failed: %s", fb_strerror(rc));
        fb__fr_result_free(res);
        return rc;
    }
    *out = res;
    return 0;
}

int fb__fr_analyze_paths(const char *const *paths, int npaths,
                         fb__fr_result **out, char *err, size_t errsz)
{
    return fb__fr_analyze_paths_opt(paths, npaths, NULL, out, err, errsz);
}

fb__fr_verdict_code fb__fr_verdict_kind(const fb__fr_result *r)
{
    return r && r->verdict != V_NONE ? (fb__fr_verdict_code)r->verdict
                                     : FB__FR_UNDECIDED;
}

const char *fb__fr_verdict(const fb__fr_result *r)
{
    return fb__fr_verdict_name(fb__fr_verdict_kind(r));
}

int fb__fr_culprit_ranks(const fb__fr_result *r, int *ranks, int max)
{
    if (!r)
        return 0;
    for (int i = 0; i < r->nculprits && i < max && ranks; i++)
        ranks[i] = r->culprits[i];
    return r->nculprits;
}

void fb__fr_summary(const fb__fr_result *r, char *buf, size_t size)
{
    snprintf(buf, size, "%s", r ? r->summary : "undecided");
}

int fb__fr_result_json(const fb__fr_result *r, fb__jsonw *w)
{
    return fb__fr_result_json_max(r, w, SIZE_MAX);
}

int fb__fr_result_json_max(const fb__fr_result *r, fb__jsonw *w, size_t max_list)
{
    const fb__fr_model *m = &r->m;
    fb__jsonw_obj_begin(w);
    fb__jsonw_kstr(w, "version", FB__FR_RESULT_VERSION);
    fb__jsonw_kstr(w, "verdict", fb__fr_verdict(r));
    fb__jsonw_kstr(w, "summary", r->summary);
    fb__jsonw_key(w, "culprits");
    fb__jsonw_arr_begin(w);
    for (int i = 0; i < r->nculprits && (size_t)i < max_list; i++)
        fb__jsonw_int(w, r->culprits[i]);
    fb__jsonw_arr_end(w);
    fb__jsonw_kint(w, "culprit_count", r->nculprits);
    fb__jsonw_kint(w, "ranks", r->nranks);
    fb__jsonw_kint(w, "world_size", r->world);
    fb__jsonw_kint(w, "missing_count", r->nmissing);
    fb__jsonw_kstr(w, "missing_ranks", r->missing);
    fb__jsonw_kuint(w, "events", r->events);
    fb__jsonw_key(w, "findings");
    fb__jsonw_arr_begin(w);
    for (size_t i = 0; i < r->nf; i++) {
        const finding *f = &r->f[i];
        fb__jsonw_obj_begin(w);
        fb__jsonw_kstr(w, "kind", fb__fr_finding_kind_name(f->kind));
        if (f->group >= 0) {
            fb__jsonw_kstr(w, "group", m->groups[f->group].key);
            fb__jsonw_kstr(w, "group_name", m->groups[f->group].name);
        } else {
            fb__jsonw_key(w, "group");
            fb__jsonw_null(w);
        }
        fb__jsonw_key(w, "seq");
        if (f->has_seq)
            fb__jsonw_uint(w, f->seq);
        else
            fb__jsonw_null(w);
        fb__jsonw_key(w, "op");
        if (f->op >= 0)
            fb__jsonw_str(w, opname(f->op));
        else
            fb__jsonw_null(w);
        fb__jsonw_key(w, "ranks");
        fb__jsonw_arr_begin(w);
        for (int k = 0; k < f->nranks && (size_t)k < max_list; k++)
            fb__jsonw_int(w, f->ranks[k]);
        fb__jsonw_arr_end(w);
        fb__jsonw_kint(w, "rank_count", f->nranks);
        fb__jsonw_kstr(w, "detail", f->detail);
        fb__jsonw_obj_end(w);
    }
    fb__jsonw_arr_end(w);
    size_t dropped = 0;
    for (size_t k = 0; k < sizeof r->dropped / sizeof r->dropped[0]; k++)
        dropped += r->dropped[k];
    fb__jsonw_kuint(w, "findings_not_listed", dropped);
    fb__jsonw_key(w, "warnings");
    fb__jsonw_arr_begin(w);
    for (size_t i = 0; i < m->nwarnings && i < max_list; i++)
        fb__jsonw_str(w, m->warnings[i]);
    fb__jsonw_arr_end(w);
    fb__jsonw_kuint(w, "warnings_not_listed",
                    m->nwarnings > max_list ? m->nwarnings - max_list : 0);
    fb__jsonw_obj_end(w);
    return w->oom ? -ENOMEM : 0;
}

/* For people, on a terminal: group names come from ranks and dumps and are
 * printed through fb__safe_text; details, the summary and warnings were
 * scrubbed when written. */
void fb__fr_result_text(const fb__fr_result *r, FILE *f)
{
    const fb__fr_model *m = &r->m;
    char rl[512], name[256];
    fprintf(f, "verdict: %s\n", fb__fr_verdict(r));
    fprintf(f, "%s\n", r->summary);
    fmt_ranks(rl, sizeof rl, r->culprits, r->nculprits);
    if (r->nculprits)
        fprintf(f, "culprit rank%s: %s\n", r->nculprits > 1 ? "s" : "", rl);
    fprintf(f, "evidence: %d rank%s of %d\n", r->nranks, r->nranks == 1 ? "" : "s",
            r->world);
    if (r->nmissing)
        fprintf(f, "missing ranks: %s\n", r->missing);
    if (r->nf)
        fprintf(f, "\nfindings:\n");
    for (size_t i = 0; i < r->nf; i++) {
        const finding *x = &r->f[i];
        fmt_ranks(rl, sizeof rl, x->ranks, x->nranks);
        fprintf(f, "  %-15s", fb__fr_finding_kind_name(x->kind));
        if (x->group >= 0)
            fprintf(f, " %s", fb__safe_text(name, sizeof name, gname(m, x->group)));
        if (x->has_seq)
            fprintf(f, " #%" PRIu64, x->seq);
        fprintf(f, "  ranks [%s]\n      %s\n", rl, x->detail);
    }
    for (size_t k = 0; k < sizeof r->dropped / sizeof r->dropped[0]; k++)
        if (r->dropped[k])
            fprintf(f, "  (%zu more %s findings not listed)\n", r->dropped[k],
                    fb__fr_finding_kind_name((fb__fr_finding_kind)k));
    if (m->nwarnings)
        fprintf(f, "\nwarnings:\n");
    for (size_t i = 0; i < m->nwarnings; i++)
        fprintf(f, "  %s\n", m->warnings[i]);
}

void fb__fr_result_free(fb__fr_result *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->nf; i++)
        free(r->f[i].ranks);
    free(r->f);
    free(r->culprits);
    fb__fr_model_free(&r->m);
    free(r);
}
