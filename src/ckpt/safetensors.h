/*
 * safetensors.h -- the safetensors shard format: a header writer and a
 * reader that treats every file as hostile.
 *
 *   u64 LE  N             header length
 *   N bytes JSON object   {"__metadata__": {str: str}, "name": {"dtype",
 *                          "shape", "data_offsets": [b, e]}, ...}, padded
 *                          with spaces so the data starts 8-aligned
 *   data                  tensors tiling [0, data_len) without gaps
 *
 * The reader checks every rule of the format (REFERENCE.md §3) and bounds
 * every size; an error message names the file and the field.
 */
#ifndef FB_CKPT_SAFETENSORS_H
#define FB_CKPT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "firebreak/firebreak.h"

#define FB__ST_HEADER_MAX 100000000ull /* the reference reader's limit */
#define FB__ST_MAX_DIMS 32
#define FB__ST_NAME_MAX 1024

typedef struct fb__st_tensor {
    const char *name;           /* NUL-terminated, owned by the header     */
    size_t name_len;
    fb_dtype dtype;
    int ndim;
    int64_t shape[FB__ST_MAX_DIMS];
    uint64_t begin, end;        /* relative to the data section            */
} fb__st_tensor;

typedef struct fb__st_meta {
    const char *key, *value;
} fb__st_meta;

typedef struct fb__st_header {
    uint64_t header_len;        /* N                                       */
    uint64_t data_offset;       /* 8 + N                                   */
    uint64_t data_len;
    size_t ntensors;
    fb__st_tensor *tensors;     /* in data order (sorted by begin)         */
    size_t nmeta;
    fb__st_meta *meta;
    /* firebreak.header_hash (firebreak's shards, FB__ST_HEADER_HASH_KEY):
     * 0 none, 1 it matches the header's bytes, -1 it does not (or is not
     * where the engine writes it: the first key of __metadata__) */
    int header_hash;
    void *doc_;                 /* owns the strings                        */
} fb__st_header;

/* The hash of a shard's header bytes (with its own 16 hex digits read as
 * zeros), in the shard's hash algorithm (firebreak.hash): the metadata the
 * tensors' hashes do not cover (a slice's place, the step) damaged is
 * damage, not a program that registered other tensors. */
#define FB__ST_HEADER_HASH_KEY "firebreak.header_hash"
#define FB__ST_HEADER_HASH_PREFIX "{\"__metadata__\":{\"" FB__ST_HEADER_HASH_KEY "\":\""

/* fb_dtype for an on-disk name ("F32"), or -1. */
int fb__st_dtype_from_name(const char *name, size_t len);

/*
 * Parse and validate the header JSON (`json`, `len` bytes: the N bytes
 * after the length word) of a file of `file_size` bytes.  `label` names the
 * file in messages.  Returns 0, FB_EFORMAT / FB_ETOOBIG / -ENOMEM with a
 * message in err.
 */
int fb__st_parse_header(const char *json, size_t len, uint64_t file_size,
                        const char *label, fb__st_header **out, char *err,
                        size_t err_size);

/* Parse a whole file held in memory (length word, header, data). */
int fb__st_parse_buffer(const void *buf, size_t size, const char *label,
                        fb__st_header **out, char *err, size_t err_size);

/* Open `path`, read and validate its header.  On success *fd_out is an open
 * read-only descriptor (caller closes).  -errno, FB_EFORMAT, FB_ETOOBIG. */
int fb__st_open(const char *path, int *fd_out, fb__st_header **out, char *err,
                size_t err_size);

void fb__st_free(fb__st_header *h);

/* A metadata value or NULL. */
const char *fb__st_meta_get(const fb__st_header *h, const char *key);
/* A tensor by name or NULL. */
const fb__st_tensor *fb__st_find(const fb__st_header *h, const char *name);

#endif
