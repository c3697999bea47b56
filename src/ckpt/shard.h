/*
 * shard.h -- reading a shard's data and checking it against the hashes in
 * its metadata; used by restore (into the registered tensors) and by
 * `firebreak ckpt verify` (into a scratch buffer).
 */
#ifndef FB_CKPT_SHARD_H
#define FB_CKPT_SHARD_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt/safetensors.h"

struct iovec;

/* Drop the first n bytes from an iovec array (after a short transfer). */
void fb__iov_advance(struct iovec **iov, int *cnt, size_t n);

/* Progress callback: bytes done so far (any thread; may be NULL). */
typedef void (*fb__shard_progress)(void *arg, uint64_t bytes);

/*
 * Check the firebreak metadata of a shard: format version, hash algorithm
 * and a hash for every tensor.  0, FB_EVERSION or FB_EFORMAT (err says
 * which field).
 */
int fb__shard_check_meta(const fb__st_header *h, const char *label, char *err,
                         size_t err_size);

/*
 * A tensor's place in its global tensor, from the shard's metadata
 * (firebreak.global_shape.NAME, firebreak.global_offset.NAME; outside
 * input, parsed with bounds): exactly ndim non-negative integers each,
 * and the slice inside the global shape.  Without the keys the tensor is
 * whole (global shape = its shape, offset 0).  0 or FB_EFORMAT with err
 * naming the key (layout.c).
 */
int fb__shard_slice_place(const fb__st_header *h, const fb__st_tensor *t,
                          int64_t *global_shape, int64_t *global_offset,
                          const char *label, char *err, size_t err_size);

/* Asked between chunks, on the calling thread only: non-zero stops the
 * read (may be NULL). */
typedef int (*fb__shard_stop)(void *arg);

/*
 * Check that a shard's recorded place -- firebreak.step, firebreak.rank
 * and firebreak.world_size -- is where it was found: directory `step`,
 * file `rank`, the run's `world_size` (0: not checked).  A shard copied
 * or linked under another step's name fails here.  0 or FB_EFORMAT with
 * err naming the field.
 */
int fb__shard_check_place(const fb__st_header *h, const char *label,
                          uint64_t step, int rank, int world_size, char *err,
                          size_t err_size);

/*
 * Read every tensor of the open shard (fd, header h) with `threads`
 * threads, into dest[i] for h->tensors[i] (dest NULL, or an entry NULL:
 * read into scratch memory and only verify), hashing each tensor and
 * comparing with its `firebreak.hash.<name>`.  stop (may be NULL) is
 * polled by the calling thread between chunks of 8 MiB and while it waits
 * for the other threads.  Returns 0, FB_ECORRUPT (err names the file and
 * tensor), FB_EFORMAT, -ECANCELED (stop said so), -errno.  On failure
 * the dest buffers hold whatever was read.  h may list only some of the
 * shard's tensors (in file order, with gaps between them): only those are
 * read.
 */
int fb__shard_read_verify(int fd, const fb__st_header *h, const char *label,
                          void *const *dest, int threads,
                          fb__shard_progress progress, void *progress_arg,
                          fb__shard_stop stop, void *stop_arg, char *err,
                          size_t err_size);

/*
 * The same, keeping what it overwrites: before a piece of the file is
 * read into dest[i], the bytes there are copied to backup[i] (where both
 * are set), on the reading thread, while the others wait for the disk;
 * saved[i] is then how many bytes of tensor i, from its start, are in
 * backup[i] (every tensor is read from its start, in order, by one
 * thread).  A caller that must leave dest as it was when the read fails
 * copies those bytes back (fb__shard_undo).
 */
int fb__shard_read_verify_keep(int fd, const fb__st_header *h, const char *label,
                               void *const *dest, void *const *backup,
                               size_t *saved, unsigned char *zero, int threads,
                               char *err, size_t err_size);
/*
 * zero (may be NULL): for a tensor with dest[i] set, zero[i] =
 * FB__SHARD_ZERO_TRY reads it in place without keeping anything while the
 * bytes it overwrites are all zero (put back by clearing them: saved[i]
 * counts them as well), checked piece by piece just before each read.  At
 * the first piece holding anything else:
 *  - with no backup[i], the rest of the tensor is only verified (read into
 *    scratch) and zero[i] becomes FB__SHARD_ZERO_NO: the tensor is not in
 *    place, and the caller reads it again once every hash matched;
 *  - with a backup[i], the zero bytes read so far are cleared in the
 *    backup, the rest is kept aside as above, and zero[i] becomes
 *    FB__SHARD_ZERO_KEPT: one read, and no copy aside of the zero part.
 * A fresh program's optimizer moments and the new tensors a restore
 * allocates are zero; its parameters usually are not.
 */
enum {
    FB__SHARD_ZERO_OFF = 0,
    FB__SHARD_ZERO_TRY = 1,
    FB__SHARD_ZERO_NO = 2,
    FB__SHARD_ZERO_KEPT = 3
};
/* Put back what a keeping read overwrote: saved[i] bytes of tensor i from
 * backup[i], or cleared where it has no backup or zero[i] (may be NULL) is
 * still FB__SHARD_ZERO_TRY (zero bytes, above). */
void fb__shard_undo(const fb__st_header *h, void *const *dest,
                    void *const *backup, const size_t *saved,
                    const unsigned char *zero);

#endif
