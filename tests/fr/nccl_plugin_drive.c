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

#include "fr/nccl_profiler_v4.h"

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    void *so = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!so) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 1;
    }
    const fb_nccl_profiler_v4_t *p = dlsym(so, "ncclProfiler_v4");
    if (!p || strcmp(p->name, "firebreak")) {
        fprintf(stderr, "no ncclProfiler_v4 named firebreak\n");
        return 1;
    }
    void *ctx = NULL;
    int mask = 0;
    p->init(&ctx, &mask, "dp", 0xabcdef, 1, 4, 1, NULL);
    if (!ctx || !(mask & FB_NCCL_PROFILE_COLL)) {
        fprintf(stderr, "plugin did not activate collectives (mask %d)\n", mask);
        return 1;
    }
    for (int i = 0; i < 3; i++) {
        fb_nccl_descr_v4_t d;
        memset(&d, 0, sizeof d);
        d.type = FB_NCCL_PROFILE_COLL;
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
    fb_nccl_descr_v4_t s;
    memset(&s, 0, sizeof s);
    s.type = FB_NCCL_PROFILE_P2P;
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
