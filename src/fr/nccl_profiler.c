/*
 * nccl_profiler.c -- a NCCL profiler plugin (interface ncclProfiler_v4,
 * NCCL 2.25+) that feeds NCCL's collectives and point-to-point operations
 * into the firebreak flight recorder of the calling rank.
 *
 *     NCCL_PROFILER_PLUGIN=/path/to/libfirebreak-nccl.so ./train
 *
 * NCCL ships the plugin interface only in its source tree
 * (ext-profiler/); the few types used are declared here from that
 * interface's documented layout.  Each communicator NCCL initializes
 * becomes a flight-recorder communicator named by NCCL's commHash (the
 * same on every member); a collective is recorded "scheduled" when NCCL
 * starts its event and "completed" when NCCL stops it.  NCCL may stop
 * events from its proxy thread, so calls are serialized here.
 */
#include <nccl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "firebreak/firebreak.h"
#include "fr/recorder.h"

#define FB_NCCL_RESULT ncclResult_t
#include "fr/nccl_profiler_v4.h"

/* ---- the plugin ---- */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

typedef struct ctx {
    uint64_t comm_id;
    int nranks;
} ctx;

static const struct { const char *name; fb_op op; } funcs[] = {
    {"AllReduce", FB_OP_ALLREDUCE}, {"Broadcast", FB_OP_BROADCAST},
    {"Reduce", FB_OP_REDUCE}, {"AllGather", FB_OP_ALLGATHER},
    {"ReduceScatter", FB_OP_REDUCE_SCATTER}, {"AlltoAll", FB_OP_ALLTOALL},
    {"AllToAll", FB_OP_ALLTOALL}, {"Gather", FB_OP_GATHER},
    {"Scatter", FB_OP_SCATTER}, {"Send", FB_OP_SEND}, {"Recv", FB_OP_RECV},
};

static const struct { const char *name; fb_dtype dt; uint32_t bytes; } dtypes[] = {
    {"ncclInt8", FB_DTYPE_I8, 1}, {"ncclUint8", FB_DTYPE_U8, 1},
    {"ncclInt32", FB_DTYPE_I32, 4}, {"ncclUint32", FB_DTYPE_U32, 4},
    {"ncclInt64", FB_DTYPE_I64, 8}, {"ncclUint64", FB_DTYPE_U64, 8},
    {"ncclFloat16", FB_DTYPE_F16, 2}, {"ncclFloat32", FB_DTYPE_F32, 4},
    {"ncclFloat64", FB_DTYPE_F64, 8}, {"ncclBfloat16", FB_DTYPE_BF16, 2},
    {"ncclFloat8e4m3", FB_DTYPE_F8_E4M3, 1}, {"ncclFloat8e5m2", FB_DTYPE_F8_E5M2, 1},
};

static fb_op op_of(const char *f)
{
    for (size_t i = 0; f && i < sizeof funcs / sizeof funcs[0]; i++)
        if (!strcmp(f, funcs[i].name))
            return funcs[i].op;
    return FB_OP_UNKNOWN;
}

static int dtype_of(const char *d, uint32_t *bytes, uint32_t *flags)
{
    for (size_t i = 0; d && i < sizeof dtypes / sizeof dtypes[0]; i++)
        if (!strcmp(d, dtypes[i].name)) {
            *bytes = dtypes[i].bytes;
            return dtypes[i].dt;
        }
    *bytes = 1;
    *flags |= FB__FR_F_DTYPE_OTHER;
    return 0;
}

static ncclResult_t fb_init_ctx(void **context, int *mask, const char *name,
                                uint64_t hash, int nnodes, int nranks, int rank,
                                fb_nccl_logger_t logfn)
{
    (void)nnodes;
    (void)logfn;
    *context = NULL;
    *mask = 0;
    fb_init();
    pthread_mutex_lock(&mu);
    fb__fr_comm *c = fb__fr_comm_register(hash, 0, nranks, rank, -1, 0,
                                          name && *name ? name : "nccl");
    pthread_mutex_unlock(&mu);
    if (!c)
        return ncclSuccess; /* not attached: record nothing */
    ctx *x = calloc(1, sizeof *x);
    if (!x)
        return ncclSuccess;
    x->comm_id = hash;
    x->nranks = nranks;
    *context = x;
    *mask = FB_NCCL_PROFILE_COLL | FB_NCCL_PROFILE_P2P;
    return ncclSuccess;
}

static ncclResult_t fb_start(void *context, void **handle, fb_nccl_descr_v4_t *d)
{
    ctx *x = context;
    *handle = NULL;
    if (!x || !d)
        return ncclSuccess;
    uint64_t n = x->nranks > 0 ? (uint64_t)x->nranks : 1;
    uint32_t flags = 0, bytes = 1;
    uint64_t h = 0;
    pthread_mutex_lock(&mu);
    fb__fr_comm *c = fb__fr_comm_find(x->comm_id);
    if (d->type == FB_NCCL_PROFILE_COLL) {
        fb_op op = op_of(d->coll.func);
        int dt = dtype_of(d->coll.datatype, &bytes, &flags);
        uint64_t in = d->coll.count, out = d->coll.count;
        if (op == FB_OP_ALLGATHER)
            out = in * n;
        else if (op == FB_OP_REDUCE_SCATTER)
            in = out * n;
        h = fb__fr_record(c, op, dt, bytes, in, out, d->coll.root, 0, flags,
                          FB__FR_SCHEDULED);
    } else if (d->type == FB_NCCL_PROFILE_P2P) {
        fb_op op = op_of(d->p2p.func);
        int dt = dtype_of(d->p2p.datatype, &bytes, &flags);
        h = fb__fr_record(c, op, dt, bytes, d->p2p.count, d->p2p.count,
                          d->p2p.peer, 0, flags | FB__FR_F_P2P, FB__FR_SCHEDULED);
    }
    pthread_mutex_unlock(&mu);
    *handle = (void *)(uintptr_t)h;
    return ncclSuccess;
}

static ncclResult_t fb_stop(void *handle)
{
    uint64_t h = (uint64_t)(uintptr_t)handle;
    if (!h)
        return ncclSuccess;
    pthread_mutex_lock(&mu);
    fb__fr_event_state(h, FB__FR_COMPLETED);
    pthread_mutex_unlock(&mu);
    return ncclSuccess;
}

static ncclResult_t fb_state(void *handle, int state, fb_nccl_state_args_v4_t *args)
{
    (void)handle;
    (void)state;
    (void)args;
    return ncclSuccess;
}

static ncclResult_t fb_finalize_ctx(void *context)
{
    free(context);
    return ncclSuccess;
}

/* The symbol NCCL looks up. */
extern const fb_nccl_profiler_v4_t ncclProfiler_v4;
const fb_nccl_profiler_v4_t ncclProfiler_v4 = {
    .name = "firebreak",
    .init = fb_init_ctx,
    .startEvent = fb_start,
    .stopEvent = fb_stop,
    .recordEventState = fb_state,
    .finalize = fb_finalize_ctx,
};
