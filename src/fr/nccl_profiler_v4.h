/*
 * nccl_profiler_v4.h -- the NCCL profiler plugin interface, version 4, as
 * NCCL's ext-profiler/example/nccl/profiler_v4.h defines it (declared here
 * because CUDA's toolkit ships nccl.h without it).  Shared by the plugin
 * (nccl_profiler.c) and its test driver, so both see one ABI.
 *
 * Function results are ncclResult_t in the plugin (define FB_NCCL_RESULT
 * to it before including) and int elsewhere: the same enum-sized value.
 */
#ifndef FB_FR_NCCL_PROFILER_V4_H
#define FB_FR_NCCL_PROFILER_V4_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifndef FB_NCCL_RESULT
#define FB_NCCL_RESULT int
#endif

enum {
    FB_NCCL_PROFILE_GROUP = 1 << 0,
    FB_NCCL_PROFILE_COLL = 1 << 1,
    FB_NCCL_PROFILE_P2P = 1 << 2,
};

typedef void (*fb_nccl_logger_t)(int level, unsigned long flags, const char *file,
                                 int line, const char *fmt, ...);

typedef struct {
    uint8_t type;
    void *parentObj;
    int rank;
    union {
        struct {
            uint64_t seqNumber;
            const char *func;
            void const *sendBuff;
            void *recvBuff;
            size_t count;
            int root;
            const char *datatype;
            uint8_t nChannels;
            uint8_t nWarps;
            const char *algo;
            const char *proto;
        } coll;
        struct {
            const char *func;
            void *buff;
            const char *datatype;
            size_t count;
            int peer;
            uint8_t nChannels;
        } p2p;
        struct {
            pid_t pid;
            uint8_t channelId;
            int peer;
            int nSteps;
            int chunkSize;
            int isSend;
        } proxyOp;
        struct { int step; } proxyStep;
        struct { uint8_t channelId; uint64_t pTimer; } kernelCh;
        struct { int64_t id; void *data; } netPlugin;
    };
} fb_nccl_descr_v4_t;

typedef union {
    struct { size_t transSize; } proxyStep;
    struct { int appendedProxyOps; } proxyCtrl;
    struct { void *data; } netPlugin;
    struct { uint64_t pTimer; } kernelCh;
} fb_nccl_state_args_v4_t;

typedef struct {
    const char *name;
    FB_NCCL_RESULT (*init)(void **context, int *eActivationMask,
                         const char *commName, uint64_t commHash, int nNodes,
                         int nranks, int rank, fb_nccl_logger_t logfn);
    FB_NCCL_RESULT (*startEvent)(void *context, void **eHandle,
                               fb_nccl_descr_v4_t *eDescr);
    FB_NCCL_RESULT (*stopEvent)(void *eHandle);
    FB_NCCL_RESULT (*recordEventState)(void *eHandle, int eState,
                                     fb_nccl_state_args_v4_t *eStateArgs);
    FB_NCCL_RESULT (*finalize)(void *context);
} fb_nccl_profiler_v4_t;

#endif
