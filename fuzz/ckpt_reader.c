/*
 * ckpt_reader.c -- libFuzzer target for the safetensors shard reader:
 * parse a whole file from memory, then check its firebreak metadata and
 * hash every tensor the header describes (bounds come from the parser),
 * and read every tensor's recorded slice place (layout.c).
 */
#include <stddef.h>
#include <stdint.h>

#include "ckpt/hash.h"
#include "ckpt/safetensors.h"
#include "ckpt/shard.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512];
    fb__st_header *h = NULL;
    if (fb__st_parse_buffer(data, size, "fuzz", &h, err, sizeof err))
        return 0;
    if (fb__shard_check_meta(h, "fuzz", err, sizeof err) == 0) {
        for (size_t i = 0; i < h->ntensors; i++) {
            const fb__st_tensor *t = &h->tensors[i];
            (void)fb__hash(fb__hash_default(), data + h->data_offset + t->begin,
                           (size_t)(t->end - t->begin));
        }
    }
    for (size_t i = 0; i < h->ntensors; i++) {
        int64_t gshape[FB__ST_MAX_DIMS], goff[FB__ST_MAX_DIMS];
        (void)fb__shard_slice_place(h, &h->tensors[i], gshape, goff, "fuzz", err,
                                    sizeof err);
    }
    (void)fb__st_meta_get(h, "firebreak.step");
    fb__st_free(h);
    return 0;
}
