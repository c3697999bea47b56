/*
 * nccl_plugin_drive.c -- loads libfirebreak-nccl.so the way NCCL does
 * (dlopen, symbol ncclProfiler_v4) and drives it like NCCL would for a
 * 4-rank communicator: three all_reduces and a send, the last all_reduce
 * never stopped.  No GPU needed; the test then reads the ring.
 *
 *   nccl_plugin_drive PLUGIN.so
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

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
            uint8_t nChannels, nWarps;
            const char *algo, *proto;
        } coll;
        struct {
            const char *func;
            void *buff;
            const char *datatype;
            size_t count;
            int peer;
            uint8_t nChannels;
        } p2p;
        char pad[128];
    };
} descr;

typedef struct {
    const char *name;
    int (*init)(void **, int *, const char *, uint64_t, int, int, int, void *);
    int (*startEvent)(void *, void **, descr *);
    int (*stopEvent)(void *);
    int (*recordEventState)(void *, int, void *);
    int (*finalize)(void *);
} plugin;

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    void *so = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!so) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 1;
    }
    const plugin *p = dlsym(so, "ncclProfiler_v4");
    if (!p || strcmp(p->name, "firebreak")) {
        fprintf(stderr, "no ncclProfiler_v4 named firebreak\n");
        return 1;
    }
    void *ctx = NULL;
    int mask = 0;
    p->init(&ctx, &mask, "dp", 0xabcdef, 1, 4, 1, NULL);
    if (!ctx || !(mask & 2)) {
        fprintf(stderr, "plugin did not activate collectives (mask %d)\n", mask);
        return 1;
    }
    for (int i = 0; i < 3; i++) {
        descr d;
        memset(&d, 0, sizeof d);
        d.type = 1 << 1;
        d.coll.seqNumber = (uint64_t)i;
        d.coll.func = "AllReduce";
        d.coll.count = 1024;
        d.coll.datatype = "ncclFloat32";
        d.coll.root = -1;
        void *h = NULL;
        p->startEvent(ctx, &h, &d);
        if (i < 2)
            p->stopEvent(h);
    }
    descr s;
    memset(&s, 0, sizeof s);
    s.type = 1 << 2;
    s.p2p.func = "Send";
    s.p2p.datatype = "ncclBfloat16";
    s.p2p.count = 8;
    s.p2p.peer = 2;
    void *h = NULL;
    p->startEvent(ctx, &h, &s);
    p->stopEvent(h);
    p->finalize(ctx);
    printf("drove %s\n", p->name);
    return 0;
}
