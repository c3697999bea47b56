/*
 * common_json.c -- libFuzzer target for the bounded JSON parser
 * (src/common/json.c): any input must parse or fail cleanly, and a parsed
 * document must be walkable.
 */
#include <stddef.h>
#include <stdint.h>

#include "common/json.h"

static size_t walk(const fb__json *v, int depth)
{
    size_t n = 1;
    if (depth > 100)
        return n;
    for (const fb__json *c = v->child; c; c = c->next)
        n += walk(c, depth + 1);
    int64_t i;
    double d;
    (void)fb__json_as_i64(v, &i);
    (void)fb__json_as_double(v, &d);
    (void)fb__json_has_duplicate_keys(v);
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fb__json_limits lim = {.max_input = 1 << 20, .max_depth = 32, .max_nodes = 100000};
    fb__json_doc *doc;
    char err[128];
    if (fb__json_parse((const char *)data, size, &lim, &doc, err, sizeof err) == 0) {
        walk(fb__json_root(doc), 0);
        (void)fb__json_get(fb__json_root(doc), "__metadata__");
        fb__json_free(doc);
    }
    return 0;
}
