/*
 * mpi.c -- libfirebreak-mpi.so, the PMPI interposer: records every
 * collective, point-to-point operation and communicator creation of an
 * unmodified MPI program into the flight recorder.
 *
 *     mpirun -x LD_PRELOAD=libfirebreak-mpi.so ./train      (firebreak run
 *                                                           does this)
 *
 * The library carries all of libfirebreak (its fb_* symbols interpose a
 * libfirebreak the program may link too, so there is one state) and calls
 * fb_init() from MPI_Init / MPI_Init_thread.  Without a supervisor it
 * records nothing and only forwards.
 *
 * Communicator identity, the same on every member without communication:
 *   MPI_COMM_WORLD       fnv1a("MPI_COMM_WORLD")
 *   dup/split/create...  fnv1a(parent id, n-th communicator created from
 *                        that parent, world ranks of the members)
 * Creation calls are collective over the parent, so every member counts
 * the same n; the member list (from MPI_Group_translate_ranks, local)
 * separates the colors of a split.  A communicator the interposer did not
 * see created (MPI_Cart_create, intercomm merges...) is named on first use
 * by its members and how many such communicators with the same members
 * came before.
 *
 * Non-blocking operations are recorded when posted and completed in the
 * MPI_Wait / MPI_Test families; requests map to event handles in a small
 * hash table.  Under MPI_THREAD_MULTIPLE a mutex serializes recording.
 */
#include <mpi.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "firebreak/firebreak.h"
#include "fr/recorder.h"

/* Open MPI 4 declares the buffers const; MPICH too.  Nothing below
 * depends on the handle types beyond their bytes. */

static int mt;                      /* MPI_THREAD_MULTIPLE: lock */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
#define LOCK() do { if (mt) pthread_mutex_lock(&mu); } while (0)
#define UNLOCK() do { if (mt) pthread_mutex_unlock(&mu); } while (0)

/* ---- handle -> state maps (keys are the handle's bytes) ---- */

typedef struct hent { uint64_t key; void *val; uint64_t h; } hent;
typedef struct hmap { hent *e; size_t cap, used; } hmap;
#define HEMPTY 0ull
#define HTOMB 1ull

static uint64_t hkey_bytes(const void *p, size_t n)
{
    uint64_t k = 0;
    memcpy(&k, p, n < sizeof k ? n : sizeof k);
    return k + 2; /* 0 and 1 are reserved */
}

static size_t hslot(uint64_t k, size_t cap)
{
    return (size_t)((k * 0x9e3779b97f4a7c15ull) >> 20) & (cap - 1);
}

static hent *hfind(hmap *m, uint64_t k)
{
    if (!m->cap)
        return NULL;
    for (size_t i = hslot(k, m->cap), n = 0; n < m->cap; i = (i + 1) & (m->cap - 1), n++) {
        if (m->e[i].key == HEMPTY)
            return NULL;
        if (m->e[i].key == k)
            return &m->e[i];
    }
    return NULL;
}

static void hput(hmap *m, uint64_t k, void *val, uint64_t h)
{
    if ((m->used + 1) * 2 > m->cap) {
        size_t ncap = m->cap ? m->cap * 2 : 256;
        hent *ne = calloc(ncap, sizeof *ne);
        if (!ne)
            return;
        size_t used = 0;
        for (size_t i = 0; i < m->cap; i++) {
            if (m->e[i].key <= HTOMB)
                continue;
            size_t j = hslot(m->e[i].key, ncap);
            while (ne[j].key != HEMPTY)
                j = (j + 1) & (ncap - 1);
            ne[j] = m->e[i];
            used++;
        }
        free(m->e);
        m->e = ne;
        m->cap = ncap;
        m->used = used;
    }
    hent *old = hfind(m, k);
    if (old) {
        old->val = val;
        old->h = h;
        return;
    }
    size_t j = hslot(k, m->cap);
    while (m->e[j].key > HTOMB)
        j = (j + 1) & (m->cap - 1);
    if (m->e[j].key == HEMPTY)
        m->used++;
    m->e[j] = (hent){k, val, h};
}

static void hdel(hent *e)
{
    e->key = HTOMB;
}

static hmap comms;      /* MPI_Comm -> fb__fr_comm* */
static hmap reqs;       /* MPI_Request -> event handle (val: comm if any-source) */
static struct { uint64_t key; fb__fr_comm *c; } last_comm;
static uint64_t lazy_seen[64][2]; /* members hash -> count, for lazy ids */

/* ---- communicators ---- */

#define WORLD_NAME "MPI_COMM_WORLD"

/* World ranks of comm's members; fills first/stride; returns the hash. */
static uint64_t members_of(MPI_Comm comm, int size, int *first, int *stride)
{
    MPI_Group g, wg;
    *first = -1;
    *stride = 0;
    int *in = malloc((size_t)size * sizeof *in);
    int *out = malloc((size_t)size * sizeof *out);
    uint64_t h = 0x5bd1e995ull;
    if (!in || !out || PMPI_Comm_group(comm, &g) != MPI_SUCCESS) {
        free(in);
        free(out);
        return h;
    }
    PMPI_Comm_group(MPI_COMM_WORLD, &wg);
    for (int i = 0; i < size; i++)
        in[i] = i;
    if (PMPI_Group_translate_ranks(g, size, in, wg, out) == MPI_SUCCESS) {
        h = fb__fnv1a64(out, (size_t)size * sizeof *out, h);
        *first = out[0];
        *stride = size > 1 ? out[1] - out[0] : 1;
        for (int i = 2; i < size && *stride; i++)
            if (out[i] - out[i - 1] != *stride)
                *stride = 0;
        if (*stride < 0)
            *stride = 0;
    }
    PMPI_Group_free(&g);
    PMPI_Group_free(&wg);
    free(in);
    free(out);
    return h;
}

static fb__fr_comm *comm_add(MPI_Comm comm, fb__fr_comm *parent, const char *how)
{
    int size = 0, rank = 0, inter = 0;
    if (comm == MPI_COMM_NULL)
        return NULL;
    PMPI_Comm_test_inter(comm, &inter);
    if (inter) {
        PMPI_Comm_remote_size(comm, &size); /* peers are remote ranks */
    } else {
        PMPI_Comm_size(comm, &size);
    }
    PMPI_Comm_rank(comm, &rank);
    int first, stride;
    uint64_t mh = inter ? 0 : members_of(comm, size, &first, &stride);
    if (inter)
        first = -1, stride = 0;
    uint64_t id;
    if (parent) {
        uint64_t v[3] = {parent->id, parent->children++, mh};
        id = fb__fnv1a64(v, sizeof v, 0);
    } else {
        uint64_t n = 0;
        for (int i = 0; i < 64; i++)
            if (lazy_seen[i][0] == mh || !lazy_seen[i][0]) {
                lazy_seen[i][0] = mh;
                n = lazy_seen[i][1]++;
                break;
            }
        uint64_t v[3] = {0x6c617a79ull, mh, n};
        id = fb__fnv1a64(v, sizeof v, 0);
    }
    char name[FB__FR_NAME_MAX] = "";
    int len = 0;
    char mpiname[MPI_MAX_OBJECT_NAME];
    if (PMPI_Comm_get_name(comm, mpiname, &len) == MPI_SUCCESS && len > 0)
        snprintf(name, sizeof name, "%s", mpiname);
    else
        snprintf(name, sizeof name, "%s", how);
    fb__fr_comm *c = fb__fr_comm_register(id, parent ? parent->id : 0, size, rank,
                                          first, stride, name);
    if (c)
        hput(&comms, hkey_bytes(&comm, sizeof comm), c, 0);
    return c;
}

static fb__fr_comm *comm_get(MPI_Comm comm)
{
    uint64_t k = hkey_bytes(&comm, sizeof comm);
    if (last_comm.c && last_comm.key == k)
        return last_comm.c;
    hent *e = hfind(&comms, k);
    fb__fr_comm *c = e ? e->val : NULL;
    if (!c && fb__fr_active())
        c = comm_add(comm, NULL, "comm");
    last_comm.key = k;
    last_comm.c = c;
    return c;
}

static void comm_forget(MPI_Comm comm)
{
    uint64_t k = hkey_bytes(&comm, sizeof comm);
    hent *e = hfind(&comms, k);
    if (e) {
        fb__fr_comm *c = e->val;
        hdel(e);
        if (c)
            fb__fr_comm_forget(c->id);
    }
    last_comm.c = NULL;
}

/* ---- datatypes ---- */

static struct { MPI_Datatype t; int code; uint32_t bytes; } last_dt;

static int dtype_of(MPI_Datatype t, uint32_t *bytes, uint32_t *flags)
{
    if (last_dt.bytes && last_dt.t == t) {
        *bytes = last_dt.bytes;
        if (last_dt.code < 0)
            *flags |= FB__FR_F_DTYPE_OTHER;
        return last_dt.code < 0 ? 0 : last_dt.code;
    }
    int code = -1;
    if (t == MPI_FLOAT) code = FB_DTYPE_F32;
    else if (t == MPI_DOUBLE) code = FB_DTYPE_F64;
    else if (t == MPI_INT || t == MPI_INT32_T) code = FB_DTYPE_I32;
    else if (t == MPI_UNSIGNED || t == MPI_UINT32_T) code = FB_DTYPE_U32;
    else if (t == MPI_LONG_LONG || t == MPI_INT64_T ||
             (t == MPI_LONG && sizeof(long) == 8)) code = FB_DTYPE_I64;
    else if (t == MPI_UNSIGNED_LONG_LONG || t == MPI_UINT64_T ||
             (t == MPI_UNSIGNED_LONG && sizeof(long) == 8)) code = FB_DTYPE_U64;
    else if (t == MPI_SHORT || t == MPI_INT16_T) code = FB_DTYPE_I16;
    else if (t == MPI_UNSIGNED_SHORT || t == MPI_UINT16_T) code = FB_DTYPE_U16;
    else if (t == MPI_SIGNED_CHAR || t == MPI_INT8_T || t == MPI_CHAR) code = FB_DTYPE_I8;
    else if (t == MPI_UNSIGNED_CHAR || t == MPI_UINT8_T || t == MPI_BYTE) code = FB_DTYPE_U8;
    else if (t == MPI_C_BOOL) code = FB_DTYPE_BOOL;
    int sz = 0;
    if (t != MPI_DATATYPE_NULL)
        PMPI_Type_size(t, &sz);
    last_dt.t = t;
    last_dt.code = code;
    last_dt.bytes = sz > 0 ? (uint32_t)sz : 1;
    *bytes = last_dt.bytes;
    if (code < 0)
        *flags |= FB__FR_F_DTYPE_OTHER;
    return code < 0 ? 0 : code;
}

/* ---- recording helpers ---- */

static uint64_t rec(MPI_Comm comm, fb_op op, MPI_Datatype t, uint64_t in,
                    uint64_t out, int peer, int tag, uint32_t flags)
{
    if (!fb__fr_active())
        return 0;
    LOCK();
    fb__fr_comm *c = comm_get(comm);
    uint32_t bytes = 1;
    int code = dtype_of(t, &bytes, &flags);
    uint64_t h = fb__fr_record(c, op, code, bytes, in, out, peer, tag, flags,
                               FB__FR_STARTED);
    UNLOCK();
    return h;
}

static void done(uint64_t h)
{
    if (!h)
        return;
    LOCK();
    fb__fr_event_state(h, FB__FR_COMPLETED);
    UNLOCK();
}

static void req_track(MPI_Request *r, uint64_t h, MPI_Comm comm, int any_source)
{
    if (!h || !r || *r == MPI_REQUEST_NULL)
        return;
    LOCK();
    hput(&reqs, hkey_bytes(r, sizeof *r), any_source ? comm_get(comm) : NULL, h);
    UNLOCK();
}

/* Requests before a completion call, and what became of them after. */
static void req_done(MPI_Request before, MPI_Request after, const MPI_Status *st)
{
    if (before == MPI_REQUEST_NULL || (after != MPI_REQUEST_NULL && after == before))
        return; /* not complete (or persistent: still active) */
    LOCK();
    hent *e = hfind(&reqs, hkey_bytes(&before, sizeof before));
    if (e) {
        if (e->val && st && st != MPI_STATUS_IGNORE && st->MPI_SOURCE >= 0)
            fb__fr_event_peer(e->h, e->val, st->MPI_SOURCE);
        fb__fr_event_state(e->h, FB__FR_COMPLETED);
        hdel(e);
    }
    UNLOCK();
}

static int csize(MPI_Comm comm)
{
    int s = 1;
    PMPI_Comm_size(comm, &s);
    return s;
}

static int crank(MPI_Comm comm)
{
    int r = 0;
    PMPI_Comm_rank(comm, &r);
    return r;
}

static uint64_t sum_counts(const int *counts, int n)
{
    uint64_t s = 0;
    for (int i = 0; counts && i < n; i++)
        s += counts[i] > 0 ? (uint64_t)counts[i] : 0;
    return s;
}

/* ---- init ---- */

static void after_init(void)
{
    fb_init();
    if (!fb__fr_active())
        return;
    fb__fr_comm *w = comm_add(MPI_COMM_WORLD, NULL, WORLD_NAME);
    if (w) {
        /* the world's id is fixed, not derived from members */
        uint64_t id = fb__fnv1a64(WORLD_NAME, sizeof WORLD_NAME - 1, 0);
        hent *e = hfind(&comms, hkey_bytes(&(MPI_Comm){MPI_COMM_WORLD}, sizeof(MPI_Comm)));
        fb__fr_comm_forget(w->id);
        w = fb__fr_comm_register(id, 0, csize(MPI_COMM_WORLD), crank(MPI_COMM_WORLD),
                                 0, 1, WORLD_NAME);
        if (e)
            e->val = w;
        last_comm.c = NULL;
    }
}

int MPI_Init(int *argc, char ***argv)
{
    int rc = PMPI_Init(argc, argv);
    if (rc == MPI_SUCCESS)
        after_init();
    return rc;
}

int MPI_Init_thread(int *argc, char ***argv, int required, int *provided)
{
    int rc = PMPI_Init_thread(argc, argv, required, provided);
    if (rc == MPI_SUCCESS) {
        mt = *provided == MPI_THREAD_MULTIPLE;
        after_init();
    }
    return rc;
}

/* ---- communicator creation ---- */

#define CREATE(call, parent, newcomm, how)                                   \
    do {                                                                     \
        int rc_ = (call);                                                    \
        if (rc_ == MPI_SUCCESS && fb__fr_active()) {                         \
            LOCK();                                                          \
            fb__fr_comm *p_ = comm_get(parent);                              \
            if (*(newcomm) != MPI_COMM_NULL)                                 \
                comm_add(*(newcomm), p_, how);                               \
            else if (p_)                                                     \
                p_->children++;                                              \
            UNLOCK();                                                        \
        }                                                                    \
        return rc_;                                                          \
    } while (0)

int MPI_Comm_dup(MPI_Comm comm, MPI_Comm *newcomm)
{
    CREATE(PMPI_Comm_dup(comm, newcomm), comm, newcomm, "dup");
}

int MPI_Comm_dup_with_info(MPI_Comm comm, MPI_Info info, MPI_Comm *newcomm)
{
    CREATE(PMPI_Comm_dup_with_info(comm, info, newcomm), comm, newcomm, "dup");
}

int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm *newcomm)
{
    CREATE(PMPI_Comm_split(comm, color, key, newcomm), comm, newcomm, "split");
}

int MPI_Comm_split_type(MPI_Comm comm, int type, int key, MPI_Info info,
                        MPI_Comm *newcomm)
{
    CREATE(PMPI_Comm_split_type(comm, type, key, info, newcomm), comm, newcomm,
           "split_type");
}

int MPI_Comm_create(MPI_Comm comm, MPI_Group group, MPI_Comm *newcomm)
{
    CREATE(PMPI_Comm_create(comm, group, newcomm), comm, newcomm, "create");
}

int MPI_Comm_create_group(MPI_Comm comm, MPI_Group group, int tag,
                          MPI_Comm *newcomm)
{
    CREATE(PMPI_Comm_create_group(comm, group, tag, newcomm), comm, newcomm,
           "create_group");
}

int MPI_Comm_free(MPI_Comm *comm)
{
    MPI_Comm old = *comm;
    int rc = PMPI_Comm_free(comm);
    if (rc == MPI_SUCCESS && fb__fr_active()) {
        LOCK();
        comm_forget(old);
        UNLOCK();
    }
    return rc;
}

/* ---- blocking collectives ---- */

#define BLOCKING(call, ...)                                                  \
    do {                                                                     \
        uint64_t h_ = rec(__VA_ARGS__);                                      \
        int rc_ = (call);                                                    \
        done(h_);                                                            \
        return rc_;                                                          \
    } while (0)

int MPI_Barrier(MPI_Comm comm)
{
    BLOCKING(PMPI_Barrier(comm), comm, FB_OP_BARRIER, MPI_BYTE, 0, 0, -1, 0, 0);
}

int MPI_Bcast(void *buf, int count, MPI_Datatype t, int root, MPI_Comm comm)
{
    BLOCKING(PMPI_Bcast(buf, count, t, root, comm), comm, FB_OP_BROADCAST, t,
             (uint64_t)count, (uint64_t)count, root, 0, 0);
}

int MPI_Allreduce(const void *sb, void *rb, int count, MPI_Datatype t, MPI_Op op,
                  MPI_Comm comm)
{
    BLOCKING(PMPI_Allreduce(sb, rb, count, t, op, comm), comm, FB_OP_ALLREDUCE, t,
             (uint64_t)count, (uint64_t)count, -1, 0, 0);
}

int MPI_Reduce(const void *sb, void *rb, int count, MPI_Datatype t, MPI_Op op,
               int root, MPI_Comm comm)
{
    BLOCKING(PMPI_Reduce(sb, rb, count, t, op, root, comm), comm, FB_OP_REDUCE, t,
             (uint64_t)count, (uint64_t)count, root, 0, 0);
}

int MPI_Scan(const void *sb, void *rb, int count, MPI_Datatype t, MPI_Op op,
             MPI_Comm comm)
{
    BLOCKING(PMPI_Scan(sb, rb, count, t, op, comm), comm, FB_OP_SCAN, t,
             (uint64_t)count, (uint64_t)count, -1, 0, 0);
}

int MPI_Exscan(const void *sb, void *rb, int count, MPI_Datatype t, MPI_Op op,
               MPI_Comm comm)
{
    BLOCKING(PMPI_Exscan(sb, rb, count, t, op, comm), comm, FB_OP_EXSCAN, t,
             (uint64_t)count, (uint64_t)count, -1, 0, 0);
}

int MPI_Allgather(const void *sb, int sc, MPI_Datatype st, void *rb, int rc,
                  MPI_Datatype rt, MPI_Comm comm)
{
    uint64_t n = (uint64_t)csize(comm);
    uint64_t in = sb == MPI_IN_PLACE ? (uint64_t)rc : (uint64_t)sc;
    BLOCKING(PMPI_Allgather(sb, sc, st, rb, rc, rt, comm), comm, FB_OP_ALLGATHER,
             sb == MPI_IN_PLACE ? rt : st, in, (uint64_t)rc * n, -1, 0, 0);
}

int MPI_Allgatherv(const void *sb, int sc, MPI_Datatype st, void *rb,
                   const int rcs[], const int displs[], MPI_Datatype rt,
                   MPI_Comm comm)
{
    BLOCKING(PMPI_Allgatherv(sb, sc, st, rb, rcs, displs, rt, comm), comm,
             FB_OP_ALLGATHER, rt, (uint64_t)(sc > 0 ? sc : 0),
             sum_counts(rcs, csize(comm)), -1, 0, FB__FR_F_VARIABLE);
}

int MPI_Gather(const void *sb, int sc, MPI_Datatype st, void *rb, int rc,
               MPI_Datatype rt, int root, MPI_Comm comm)
{
    int me = crank(comm);
    uint64_t out = me == root ? (uint64_t)rc * (uint64_t)csize(comm) : 0;
    uint64_t in = sb == MPI_IN_PLACE ? (uint64_t)rc : (uint64_t)sc;
    BLOCKING(PMPI_Gather(sb, sc, st, rb, rc, rt, root, comm), comm, FB_OP_GATHER,
             sb == MPI_IN_PLACE ? rt : st, in, out, root, 0, 0);
}

int MPI_Gatherv(const void *sb, int sc, MPI_Datatype st, void *rb,
                const int rcs[], const int displs[], MPI_Datatype rt, int root,
                MPI_Comm comm)
{
    BLOCKING(PMPI_Gatherv(sb, sc, st, rb, rcs, displs, rt, root, comm), comm,
             FB_OP_GATHER, st, (uint64_t)(sc > 0 ? sc : 0), 0, root, 0,
             FB__FR_F_VARIABLE);
}

int MPI_Scatter(const void *sb, int sc, MPI_Datatype st, void *rb, int rc,
                MPI_Datatype rt, int root, MPI_Comm comm)
{
    int me = crank(comm);
    uint64_t in = me == root ? (uint64_t)sc * (uint64_t)csize(comm) : 0;
    uint64_t out = rb == MPI_IN_PLACE ? (uint64_t)sc : (uint64_t)rc;
    BLOCKING(PMPI_Scatter(sb, sc, st, rb, rc, rt, root, comm), comm, FB_OP_SCATTER,
             rb == MPI_IN_PLACE ? st : rt, in, out, root, 0, 0);
}

int MPI_Scatterv(const void *sb, const int scs[], const int displs[],
                 MPI_Datatype st, void *rb, int rc, MPI_Datatype rt, int root,
                 MPI_Comm comm)
{
    BLOCKING(PMPI_Scatterv(sb, scs, displs, st, rb, rc, rt, root, comm), comm,
             FB_OP_SCATTER, rt, 0, (uint64_t)(rc > 0 ? rc : 0), root, 0,
             FB__FR_F_VARIABLE);
}

int MPI_Reduce_scatter_block(const void *sb, void *rb, int rc, MPI_Datatype t,
                             MPI_Op op, MPI_Comm comm)
{
    BLOCKING(PMPI_Reduce_scatter_block(sb, rb, rc, t, op, comm), comm,
             FB_OP_REDUCE_SCATTER, t, (uint64_t)rc * (uint64_t)csize(comm),
             (uint64_t)rc, -1, 0, 0);
}

int MPI_Reduce_scatter(const void *sb, void *rb, const int rcs[], MPI_Datatype t,
                       MPI_Op op, MPI_Comm comm)
{
    int n = csize(comm), me = crank(comm);
    BLOCKING(PMPI_Reduce_scatter(sb, rb, rcs, t, op, comm), comm,
             FB_OP_REDUCE_SCATTER, t, sum_counts(rcs, n),
             (uint64_t)(rcs && rcs[me] > 0 ? rcs[me] : 0), -1, 0, FB__FR_F_VARIABLE);
}

int MPI_Alltoall(const void *sb, int sc, MPI_Datatype st, void *rb, int rc,
                 MPI_Datatype rt, MPI_Comm comm)
{
    uint64_t n = (uint64_t)csize(comm);
    uint64_t in = sb == MPI_IN_PLACE ? (uint64_t)rc : (uint64_t)sc;
    BLOCKING(PMPI_Alltoall(sb, sc, st, rb, rc, rt, comm), comm, FB_OP_ALLTOALL,
             sb == MPI_IN_PLACE ? rt : st, in * n, (uint64_t)rc * n, -1, 0, 0);
}

int MPI_Alltoallv(const void *sb, const int scs[], const int sd[], MPI_Datatype st,
                  void *rb, const int rcs[], const int rd[], MPI_Datatype rt,
                  MPI_Comm comm)
{
    int n = csize(comm);
    BLOCKING(PMPI_Alltoallv(sb, scs, sd, st, rb, rcs, rd, rt, comm), comm,
             FB_OP_ALLTOALL, rt, sb == MPI_IN_PLACE ? 0 : sum_counts(scs, n),
             sum_counts(rcs, n), -1, 0, FB__FR_F_VARIABLE);
}

/* ---- non-blocking collectives ---- */

#define NONBLOCKING(call, req, comm, ...)                                    \
    do {                                                                     \
        uint64_t h_ = rec(comm, __VA_ARGS__);                                \
        int rc_ = (call);                                                    \
        if (rc_ == MPI_SUCCESS)                                              \
            req_track(req, h_, comm, 0);                                     \
        return rc_;                                                          \
    } while (0)

int MPI_Ibarrier(MPI_Comm comm, MPI_Request *req)
{
    NONBLOCKING(PMPI_Ibarrier(comm, req), req, comm, FB_OP_BARRIER, MPI_BYTE, 0, 0,
                -1, 0, FB__FR_F_NONBLOCKING);
}

int MPI_Ibcast(void *buf, int count, MPI_Datatype t, int root, MPI_Comm comm,
               MPI_Request *req)
{
    NONBLOCKING(PMPI_Ibcast(buf, count, t, root, comm, req), req, comm,
                FB_OP_BROADCAST, t, (uint64_t)count, (uint64_t)count, root, 0,
                FB__FR_F_NONBLOCKING);
}

int MPI_Iallreduce(const void *sb, void *rb, int count, MPI_Datatype t, MPI_Op op,
                   MPI_Comm comm, MPI_Request *req)
{
    NONBLOCKING(PMPI_Iallreduce(sb, rb, count, t, op, comm, req), req, comm,
                FB_OP_ALLREDUCE, t, (uint64_t)count, (uint64_t)count, -1, 0,
                FB__FR_F_NONBLOCKING);
}

int MPI_Ireduce(const void *sb, void *rb, int count, MPI_Datatype t, MPI_Op op,
                int root, MPI_Comm comm, MPI_Request *req)
{
    NONBLOCKING(PMPI_Ireduce(sb, rb, count, t, op, root, comm, req), req, comm,
                FB_OP_REDUCE, t, (uint64_t)count, (uint64_t)count, root, 0,
                FB__FR_F_NONBLOCKING);
}

int MPI_Iallgather(const void *sb, int sc, MPI_Datatype st, void *rb, int rc,
                   MPI_Datatype rt, MPI_Comm comm, MPI_Request *req)
{
    uint64_t n = (uint64_t)csize(comm);
    uint64_t in = sb == MPI_IN_PLACE ? (uint64_t)rc : (uint64_t)sc;
    NONBLOCKING(PMPI_Iallgather(sb, sc, st, rb, rc, rt, comm, req), req, comm,
                FB_OP_ALLGATHER, sb == MPI_IN_PLACE ? rt : st, in, (uint64_t)rc * n,
                -1, 0, FB__FR_F_NONBLOCKING);
}

int MPI_Ireduce_scatter_block(const void *sb, void *rb, int rc, MPI_Datatype t,
                              MPI_Op op, MPI_Comm comm, MPI_Request *req)
{
    NONBLOCKING(PMPI_Ireduce_scatter_block(sb, rb, rc, t, op, comm, req), req, comm,
                FB_OP_REDUCE_SCATTER, t, (uint64_t)rc * (uint64_t)csize(comm),
                (uint64_t)rc, -1, 0, FB__FR_F_NONBLOCKING);
}

int MPI_Ialltoall(const void *sb, int sc, MPI_Datatype st, void *rb, int rc,
                  MPI_Datatype rt, MPI_Comm comm, MPI_Request *req)
{
    uint64_t n = (uint64_t)csize(comm);
    uint64_t in = sb == MPI_IN_PLACE ? (uint64_t)rc : (uint64_t)sc;
    NONBLOCKING(PMPI_Ialltoall(sb, sc, st, rb, rc, rt, comm, req), req, comm,
                FB_OP_ALLTOALL, sb == MPI_IN_PLACE ? rt : st, in * n,
                (uint64_t)rc * n, -1, 0, FB__FR_F_NONBLOCKING);
}

/* ---- point-to-point ---- */

int MPI_Send(const void *buf, int count, MPI_Datatype t, int dest, int tag,
             MPI_Comm comm)
{
    BLOCKING(PMPI_Send(buf, count, t, dest, tag, comm), comm, FB_OP_SEND, t,
             (uint64_t)count, (uint64_t)count, dest, tag, FB__FR_F_P2P);
}

int MPI_Ssend(const void *buf, int count, MPI_Datatype t, int dest, int tag,
              MPI_Comm comm)
{
    BLOCKING(PMPI_Ssend(buf, count, t, dest, tag, comm), comm, FB_OP_SEND, t,
             (uint64_t)count, (uint64_t)count, dest, tag, FB__FR_F_P2P);
}

int MPI_Recv(void *buf, int count, MPI_Datatype t, int src, int tag,
             MPI_Comm comm, MPI_Status *status)
{
    MPI_Status local;
    MPI_Status *st = status == MPI_STATUS_IGNORE ? &local : status;
    int any = src == MPI_ANY_SOURCE;
    uint64_t h = rec(comm, FB_OP_RECV, t, (uint64_t)count, (uint64_t)count,
                     any ? -1 : src, tag,
                     FB__FR_F_P2P | (any ? FB__FR_F_ANY_SOURCE : 0));
    int rc = PMPI_Recv(buf, count, t, src, tag, comm, st);
    if (h) {
        LOCK();
        if (any && rc == MPI_SUCCESS)
            fb__fr_event_peer(h, comm_get(comm), st->MPI_SOURCE);
        fb__fr_event_state(h, FB__FR_COMPLETED);
        UNLOCK();
    }
    return rc;
}

int MPI_Sendrecv(const void *sb, int sc, MPI_Datatype st, int dest, int stag,
                 void *rb, int rc, MPI_Datatype rt, int src, int rtag,
                 MPI_Comm comm, MPI_Status *status)
{
    uint64_t hs = rec(comm, FB_OP_SEND, st, (uint64_t)sc, (uint64_t)sc, dest, stag,
                      FB__FR_F_P2P);
    uint64_t hr = rec(comm, FB_OP_RECV, rt, (uint64_t)rc, (uint64_t)rc,
                      src == MPI_ANY_SOURCE ? -1 : src, rtag,
                      FB__FR_F_P2P | (src == MPI_ANY_SOURCE ? FB__FR_F_ANY_SOURCE : 0));
    int r = PMPI_Sendrecv(sb, sc, st, dest, stag, rb, rc, rt, src, rtag, comm,
                          status);
    done(hs);
    done(hr);
    return r;
}

int MPI_Isend(const void *buf, int count, MPI_Datatype t, int dest, int tag,
              MPI_Comm comm, MPI_Request *req)
{
    NONBLOCKING(PMPI_Isend(buf, count, t, dest, tag, comm, req), req, comm,
                FB_OP_SEND, t, (uint64_t)count, (uint64_t)count, dest, tag,
                FB__FR_F_P2P | FB__FR_F_NONBLOCKING);
}

int MPI_Issend(const void *buf, int count, MPI_Datatype t, int dest, int tag,
               MPI_Comm comm, MPI_Request *req)
{
    NONBLOCKING(PMPI_Issend(buf, count, t, dest, tag, comm, req), req, comm,
                FB_OP_SEND, t, (uint64_t)count, (uint64_t)count, dest, tag,
                FB__FR_F_P2P | FB__FR_F_NONBLOCKING);
}

int MPI_Irecv(void *buf, int count, MPI_Datatype t, int src, int tag,
              MPI_Comm comm, MPI_Request *req)
{
    int any = src == MPI_ANY_SOURCE;
    uint64_t h = rec(comm, FB_OP_RECV, t, (uint64_t)count, (uint64_t)count,
                     any ? -1 : src, tag,
                     FB__FR_F_P2P | FB__FR_F_NONBLOCKING |
                         (any ? FB__FR_F_ANY_SOURCE : 0));
    int rc = PMPI_Irecv(buf, count, t, src, tag, comm, req);
    if (rc == MPI_SUCCESS)
        req_track(req, h, comm, any);
    return rc;
}

/* ---- completion ---- */

static int tracking(void)
{
    return reqs.used != 0;
}

int MPI_Wait(MPI_Request *req, MPI_Status *status)
{
    if (!tracking())
        return PMPI_Wait(req, status);
    MPI_Status local;
    MPI_Status *st = status == MPI_STATUS_IGNORE ? &local : status;
    MPI_Request before = *req;
    int rc = PMPI_Wait(req, st);
    req_done(before, *req, st);
    return rc;
}

int MPI_Test(MPI_Request *req, int *flag, MPI_Status *status)
{
    if (!tracking())
        return PMPI_Test(req, flag, status);
    MPI_Status local;
    MPI_Status *st = status == MPI_STATUS_IGNORE ? &local : status;
    MPI_Request before = *req;
    int rc = PMPI_Test(req, flag, st);
    if (*flag)
        req_done(before, *req, st);
    return rc;
}

/* Copy the request array (bounded on the stack, else heap). */
#define SAVE_REQS(n, reqs_in)                                                \
    MPI_Request stack_[64];                                                  \
    MPI_Request *before_ = (n) <= 64 ? stack_ : malloc((size_t)(n) * sizeof *before_); \
    if (before_)                                                             \
        memcpy(before_, reqs_in, (size_t)(n) * sizeof *before_)
#define FREE_REQS() do { if (before_ != stack_) free(before_); } while (0)

int MPI_Waitall(int n, MPI_Request reqs_[], MPI_Status sts[])
{
    if (!tracking() || n <= 0)
        return PMPI_Waitall(n, reqs_, sts);
    SAVE_REQS(n, reqs_);
    int rc = PMPI_Waitall(n, reqs_, sts);
    for (int i = 0; before_ && i < n; i++)
        req_done(before_[i], reqs_[i],
                 sts == MPI_STATUSES_IGNORE ? MPI_STATUS_IGNORE : &sts[i]);
    FREE_REQS();
    return rc;
}

int MPI_Testall(int n, MPI_Request reqs_[], int *flag, MPI_Status sts[])
{
    if (!tracking() || n <= 0)
        return PMPI_Testall(n, reqs_, flag, sts);
    SAVE_REQS(n, reqs_);
    int rc = PMPI_Testall(n, reqs_, flag, sts);
    for (int i = 0; before_ && *flag && i < n; i++)
        req_done(before_[i], reqs_[i],
                 sts == MPI_STATUSES_IGNORE ? MPI_STATUS_IGNORE : &sts[i]);
    FREE_REQS();
    return rc;
}

int MPI_Waitany(int n, MPI_Request reqs_[], int *idx, MPI_Status *status)
{
    if (!tracking() || n <= 0)
        return PMPI_Waitany(n, reqs_, idx, status);
    SAVE_REQS(n, reqs_);
    int rc = PMPI_Waitany(n, reqs_, idx, status);
    if (before_ && *idx >= 0 && *idx < n)
        req_done(before_[*idx], reqs_[*idx], status);
    FREE_REQS();
    return rc;
}

int MPI_Testany(int n, MPI_Request reqs_[], int *idx, int *flag,
                MPI_Status *status)
{
    if (!tracking() || n <= 0)
        return PMPI_Testany(n, reqs_, idx, flag, status);
    SAVE_REQS(n, reqs_);
    int rc = PMPI_Testany(n, reqs_, idx, flag, status);
    if (before_ && *flag && *idx >= 0 && *idx < n)
        req_done(before_[*idx], reqs_[*idx], status);
    FREE_REQS();
    return rc;
}

static int some(int (*fn)(int, MPI_Request *, int *, int *, MPI_Status *),
                int n, MPI_Request reqs_[], int *outcount, int idx[],
                MPI_Status sts[])
{
    if (!tracking() || n <= 0)
        return fn(n, reqs_, outcount, idx, sts);
    SAVE_REQS(n, reqs_);
    int rc = fn(n, reqs_, outcount, idx, sts);
    for (int k = 0; before_ && *outcount != MPI_UNDEFINED && k < *outcount; k++)
        if (idx[k] >= 0 && idx[k] < n)
            req_done(before_[idx[k]], reqs_[idx[k]],
                     sts == MPI_STATUSES_IGNORE ? MPI_STATUS_IGNORE : &sts[k]);
    FREE_REQS();
    return rc;
}

int MPI_Waitsome(int n, MPI_Request reqs_[], int *outcount, int idx[],
                 MPI_Status sts[])
{
    return some(PMPI_Waitsome, n, reqs_, outcount, idx, sts);
}

int MPI_Testsome(int n, MPI_Request reqs_[], int *outcount, int idx[],
                 MPI_Status sts[])
{
    return some(PMPI_Testsome, n, reqs_, outcount, idx, sts);
}
