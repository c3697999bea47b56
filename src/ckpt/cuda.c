/*
 * cuda.c -- device-to-host copies for checkpoints (see cuda.h).
 */
#include "ckpt/cuda.h"
#include "firebreak/firebreak.h"

#include <errno.h>

#ifdef FB_HAVE_CUDA
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#include "lib/lib.h"

static struct {
    int ok;
    cudaStream_t stream;
    cudaError_t (*pointer_attrs)(struct cudaPointerAttributes *, const void *);
    cudaError_t (*host_register)(void *, size_t, unsigned int);
    cudaError_t (*host_unregister)(void *);
    cudaError_t (*memcpy_async)(void *, const void *, size_t, enum cudaMemcpyKind,
                                cudaStream_t);
    cudaError_t (*memcpy_sync)(void *, const void *, size_t, enum cudaMemcpyKind);
    cudaError_t (*stream_create)(cudaStream_t *, unsigned int);
    cudaError_t (*stream_sync)(cudaStream_t);
    cudaError_t (*get_last_error)(void);
    const char *(*error_string)(cudaError_t);
} cu;

static pthread_once_t cu_once = PTHREAD_ONCE_INIT;

static void cu_load(void)
{
    static const char *names[] = {"libcudart.so", "libcudart.so.13",
                                  "libcudart.so.12", NULL};
    void *h = NULL;
    for (int i = 0; names[i] && !h; i++)
        h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return;
#define SYM(field, name)                                  \
    if (!(*(void **)&cu.field = dlsym(h, name)))          \
        return;
    SYM(pointer_attrs, "cudaPointerGetAttributes")
    SYM(host_register, "cudaHostRegister")
    SYM(host_unregister, "cudaHostUnregister")
    SYM(memcpy_async, "cudaMemcpyAsync")
    SYM(memcpy_sync, "cudaMemcpy")
    SYM(stream_create, "cudaStreamCreateWithFlags")
    SYM(stream_sync, "cudaStreamSynchronize")
    SYM(get_last_error, "cudaGetLastError")
    SYM(error_string, "cudaGetErrorString")
#undef SYM
    cu.ok = 1;
}

static int ready(void)
{
    pthread_once(&cu_once, cu_load);
    return cu.ok;
}

static int fail(const char *what, cudaError_t e)
{
    fb__say("checkpoint: %s: %s\n", what, cu.error_string(e));
    return -EIO;
}

int fb_ckpt_device_support(void)
{
    return 1;
}

int fb__cuda_is_device(const void *p)
{
    if (!p || !ready())
        return 0;
    struct cudaPointerAttributes a;
    if (cu.pointer_attrs(&a, p) != cudaSuccess) {
        cu.get_last_error(); /* plain host memory: clear the sticky error */
        return 0;
    }
    return a.type == cudaMemoryTypeDevice;
}

int fb__cuda_pin(void *p, size_t n)
{
    if (!ready())
        return -EIO;
    cudaError_t e = cu.host_register(p, n, cudaHostRegisterPortable);
    return e == cudaSuccess ? 0 : fail("cudaHostRegister", e);
}

void fb__cuda_unpin(void *p)
{
    if (ready())
        cu.host_unregister(p);
}

static int stream(void)
{
    if (cu.stream)
        return 0;
    cudaError_t e = cu.stream_create(&cu.stream, cudaStreamNonBlocking);
    return e == cudaSuccess ? 0 : fail("cudaStreamCreate", e);
}

int fb__cuda_d2h_async(void *dst, const void *src, size_t n)
{
    if (!ready())
        return -EIO;
    int rc = stream();
    if (rc)
        return rc;
    cudaError_t e = cu.memcpy_async(dst, src, n, cudaMemcpyDeviceToHost, cu.stream);
    return e == cudaSuccess ? 0 : fail("cudaMemcpyAsync", e);
}

int fb__cuda_sync(void)
{
    if (!ready() || !cu.stream)
        return 0;
    cudaError_t e = cu.stream_sync(cu.stream);
    return e == cudaSuccess ? 0 : fail("cudaStreamSynchronize", e);
}

int fb__cuda_h2d(void *dst, const void *src, size_t n)
{
    if (!ready())
        return -EIO;
    cudaError_t e = cu.memcpy_sync(dst, src, n, cudaMemcpyHostToDevice);
    return e == cudaSuccess ? 0 : fail("cudaMemcpy", e);
}

#else /* !FB_HAVE_CUDA: the path compiles out */

int fb_ckpt_device_support(void) { return 0; }

int fb__cuda_is_device(const void *p) { (void)p; return 0; }
int fb__cuda_pin(void *p, size_t n) { (void)p; (void)n; return -ENOSYS; }
void fb__cuda_unpin(void *p) { (void)p; }
int fb__cuda_d2h_async(void *dst, const void *src, size_t n)
{
    (void)dst; (void)src; (void)n;
    return -ENOSYS;
}
int fb__cuda_sync(void) { return 0; }
int fb__cuda_h2d(void *dst, const void *src, size_t n)
{
    (void)dst; (void)src; (void)n;
    return -ENOSYS;
}

#endif
