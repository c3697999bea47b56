/*
 * pickle.h -- a bounded reader for Python pickles (protocols 0-5), enough
 * for the data PyTorch's flight recorder dumps: dicts, lists, tuples,
 * strings, bytes, ints, floats, bools, None, memo references, and the
 * torch.jit._pickle helpers that wrap typed lists.  It executes nothing:
 * any other class or callable becomes null (counted in `unknown_calls`).
 *
 * The result is the JSON DOM of json.h (dict -> object, list / tuple /
 * set -> array, int / float -> number, bytes -> string), so one loader
 * reads both formats.  A value referenced twice (the memo) shares its
 * children; walk arrays and objects through child / next.
 */
#ifndef FB_FR_PICKLE_H
#define FB_FR_PICKLE_H

#include <stddef.h>

#include "common/json.h"

typedef struct fb__pickle_limits {
    size_t max_input;   /* bytes; 0: 1 GiB                       */
    size_t max_nodes;   /* values created; 0: 50 million         */
    int max_depth;      /* open MARKs / containers; 0: 64        */
    size_t max_memo;    /* memo slots; 0: 4 million              */
} fb__pickle_limits;

typedef struct fb__pickle_doc fb__pickle_doc;

/* Parse `len` bytes.  0 and *doc_out, or FB_EFORMAT / FB_ETOOBIG /
 * -ENOMEM with a message naming the byte offset and opcode in err. */
int fb__pickle_parse(const void *data, size_t len, const fb__pickle_limits *lim,
                     fb__pickle_doc **doc_out, char *err, size_t err_size);
const fb__json *fb__pickle_root(const fb__pickle_doc *doc);
/* Calls to classes or functions the reader does not know (became null). */
size_t fb__pickle_unknown_calls(const fb__pickle_doc *doc);
void fb__pickle_free(fb__pickle_doc *doc);

#endif
