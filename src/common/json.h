/*
 * json.h -- a bounded JSON parser producing a small DOM.
 *
 * For outside input (safetensors headers, PyTorch flight-recorder dumps,
 * scenario files): every limit is explicit.  Input need not be
 * NUL-terminated.  Numbers keep their text so 64-bit integers survive
 * exactly (fb__json_as_i64/u64) while fb__json_as_double gives the value.
 * Duplicate object keys are kept; fb__json_get returns the first, and
 * fb__json_has_duplicate_keys tells callers who must reject them.
 *
 * All nodes and strings live in one arena freed by fb__json_free.
 */
#ifndef FB_COMMON_JSON_H
#define FB_COMMON_JSON_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    FB_JSON_NULL, FB_JSON_BOOL, FB_JSON_NUMBER, FB_JSON_STRING,
    FB_JSON_ARRAY, FB_JSON_OBJECT
} fb__json_type;

typedef struct fb__json fb__json;
struct fb__json {
    fb__json_type type;
    int boolean;          /* FB_JSON_BOOL */
    const char *str;      /* FB_JSON_STRING: decoded, NUL-terminated;
                             FB_JSON_NUMBER: the number's text         */
    size_t str_len;       /* decoded length (strings may hold NUL)      */
    const char *key;      /* when a member of an object: its key       */
    size_t key_len;
    fb__json *child;      /* ARRAY / OBJECT: first element / member    */
    fb__json *next;       /* next sibling                              */
    size_t count;         /* ARRAY / OBJECT: number of children        */
};

typedef struct fb__json_limits {
    size_t max_input;     /* bytes; 0: 256 MiB */
    int max_depth;        /* 0: 64 */
    size_t max_nodes;     /* 0: 50 million */
} fb__json_limits;

typedef struct fb__json_doc fb__json_doc;

/*
 * Parse `len` bytes.  On success returns 0 and *doc_out (root via
 * fb__json_root).  On failure returns FB_EFORMAT or FB_ETOOBIG (or -ENOMEM)
 * and writes a message with the byte offset into err (may be NULL).
 * Trailing whitespace is allowed, anything else after the value is not.
 */
int fb__json_parse(const char *text, size_t len, const fb__json_limits *lim,
                   fb__json_doc **doc_out, char *err, size_t err_size);
const fb__json *fb__json_root(const fb__json_doc *doc);
void fb__json_free(fb__json_doc *doc);

/* Object member by key (first match) or NULL; NULL-safe on obj. */
const fb__json *fb__json_get(const fb__json *obj, const char *key);
/* Array element i or NULL. */
const fb__json *fb__json_at(const fb__json *arr, size_t i);
/* 1 if an object has two members with the same key, 0 if not, -ENOMEM
 * when it cannot tell (a caller that rejects on non-zero stays safe). */
int fb__json_has_duplicate_keys(const fb__json *obj);

/* Conversions: 0 on success, FB_EFORMAT when the type or range is wrong. */
int fb__json_as_i64(const fb__json *v, int64_t *out);
int fb__json_as_u64(const fb__json *v, uint64_t *out);
int fb__json_as_double(const fb__json *v, double *out);
/* String value or NULL when v is not a string. */
const char *fb__json_as_str(const fb__json *v);

#endif
