/*
 * test_cuda.c -- device tensors through the checkpoint engine: a tensor in
 * GPU memory is saved (device-to-host into pinned staging), the device
 * copy is wiped, and restore brings the same bytes back, async and sync.
 * Exits 77 (skipped) when no GPU is visible.
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "firebreak/firebreak.h"

static int run(int async, const char *dir)
{
    const size_t n = 16u << 20; /* 64 MiB of F32 */
    float *host = malloc(n * 4), *back = malloc(n * 4), *dev = NULL, *host2 = malloc(4096);
    for (size_t i = 0; i < n; i++)
        host[i] = (float)(i % 1000003) * 0.5f;
    for (int i = 0; i < 1024; i++)
        host2[i] = (float)i;
    if (cudaMalloc((void **)&dev, n * 4) != cudaSuccess ||
        cudaMemcpy(dev, host, n * 4, cudaMemcpyHostToDevice) != cudaSuccess) {
        fprintf(stderr, "cuda setup failed\n");
        return 1;
    }
    fb_ckpt_options o;
    fb_ckpt_options_init(&o);
    o.dir = dir;
    o.rank = 0;
    o.world_size = 1;
    o.async = async;
    fb_ckpt *ck;
    int fails = 0;
    if (fb_ckpt_open(&ck, &o))
        return 1;
    int64_t shape[1] = {(int64_t)n}, shape2[1] = {1024};
    fails += fb_ckpt_register(ck, "dev.weight", FB_DTYPE_F32, 1, shape, dev) != 0;
    fails += fb_ckpt_register(ck, "host.bias", FB_DTYPE_F32, 1, shape2, host2) != 0;
    uint64_t t0 = fb__now_ns();
    fails += fb_ckpt_save(ck, 7) != 0;
    uint64_t stall = fb__now_ns() - t0;
    fails += fb_ckpt_wait(ck) != 0;
    cudaMemset(dev, 0, n * 4);
    memset(host2, 0, 4096);
    uint64_t step = 0;
    int rc = fb_ckpt_restore(ck, &step);
    if (rc || step != 7) {
        fprintf(stderr, "restore: %s step %llu\n", fb_strerror(rc), (unsigned long long)step);
        fails++;
    }
    cudaMemcpy(back, dev, n * 4, cudaMemcpyDeviceToHost);
    if (memcmp(back, host, n * 4)) {
        fprintf(stderr, "device tensor differs after restore\n");
        fails++;
    }
    for (int i = 0; i < 1024; i++)
        if (host2[i] != (float)i) {
            fprintf(stderr, "host tensor differs\n");
            fails++;
            break;
        }
    printf("%s: 64 MiB device tensor, save stall %.2f ms, restore %s\n",
           async ? "async" : "sync", (double)stall / 1e6, fails ? "FAILED" : "ok");
    fb_ckpt_close(ck);
    cudaFree(dev);
    free(host);
    free(back);
    free(host2);
    return fails;
}

int main(void)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    char dir[] = "/tmp/fb-ckpt-cuda.XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    int fails = run(1, dir) + run(0, dir);
    fb__rm_rf(dir);
    return fails ? 1 : 0;
}
