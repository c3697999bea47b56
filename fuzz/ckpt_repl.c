/*
 * ckpt_repl.c -- libFuzzer target for the fbr1 header decoder
 * (src/ckpt/replicate.c), the one parser of what a peer sends before the
 * shard itself (which the shard reader and its own target check).
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ckpt/replicate.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char why[256];
    fb__repl_header h;
    if (fb__repl_header_decode(data, size, 1ull << 40, &h, why, sizeof why) == 0) {
        /* What decodes encodes back to the same bytes. */
        unsigned char again[FB__REPL_HEADER_BYTES];
        fb__repl_header_encode(&h, again);
        if (memcmp(again, data, sizeof again))
            __builtin_trap();
    }
    return 0;
}
