/*
 * cuda.h -- the device-to-host path of the checkpoint engine.
 *
 * Compiled in when CMake finds the CUDA toolkit (FB_HAVE_CUDA); libcudart
 * is then loaded with dlopen on first use, so libfirebreak has no link
 * dependency on it and runs unchanged on machines without a GPU.  Device
 * tensors are copied with cudaMemcpyAsync on one non-blocking stream into
 * staging memory pinned with cudaHostRegister.  Without CUDA every
 * function here says "not a device pointer" and the path compiles out.
 */
#ifndef FB_CKPT_CUDA_H
#define FB_CKPT_CUDA_H

#include <stddef.h>

/* 1 when p is device memory (cudaMemoryTypeDevice), else 0. */
int fb__cuda_is_device(const void *p);
/* Pin / unpin host memory for DMA; 0 or -EIO. */
int fb__cuda_pin(void *p, size_t n);
void fb__cuda_unpin(void *p);
/* Queue a device-to-host copy on the engine's stream; fb__cuda_sync waits
 * for every queued copy.  0 or -EIO (message on stderr). */
int fb__cuda_d2h_async(void *dst, const void *src, size_t n);
int fb__cuda_sync(void);
/* Host-to-device copy (restore), synchronous.  0 or -EIO. */
int fb__cuda_h2d(void *dst, const void *src, size_t n);

#endif
