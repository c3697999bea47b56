/*
 * fr_pickle.c -- libFuzzer target for the bounded pickle reader
 * (src/fr/pickle.c) that reads PyTorch flight-recorder dumps.
 */
#include <stddef.h>
#include <stdint.h>

#include "fr/pickle.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static size_t walk(const fb__json *v, int depth)
{
    size_t n = 1;
    if (!v || depth > 8)
        return n;
    for (const fb__json *c = v->child; c && n < 100000; c = c->next)
        n += walk(c, depth + 1);
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fb__pickle_limits lim = {.max_nodes = 1u << 20, .max_depth = 64,
                             .max_memo = 1u << 16};
    fb__pickle_doc *doc = NULL;
    char err[256];
    if (fb__pickle_parse(data, size, &lim, &doc, err, sizeof err) == 0) {
        walk(fb__pickle_root(doc), 0);
        fb__pickle_free(doc);
    }
    return 0;
}
