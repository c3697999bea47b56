/*
 * json.c -- bounded recursive-descent JSON parser (see json.h).
 *
 * Nodes come from an arena of fixed-size blocks; strings are decoded into
 * the same arena.  Recursion depth, node count and input size are bounded
 * so hostile input cannot exhaust the stack or memory.
 */
#include "common/json.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "firebreak/firebreak.h"

typedef struct block {
    struct block *next;
    size_t used, cap;
    _Alignas(max_align_t) unsigned char data[];
} block;

struct fb__json_doc {
    block *blocks;
    fb__json *root;
};

typedef struct parser {
    const char *p, *end, *start;
    fb__json_doc *doc;
    size_t nodes, max_nodes;
    int depth, max_depth;
    char *err;
    size_t err_size;
    int rc;
} parser;

static void *arena_alloc(fb__json_doc *doc, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    block *b = doc->blocks;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        b = fb__malloc(sizeof *b + cap);
        if (!b)
            return NULL;
        b->cap = cap;
        b->used = 0;
        b->next = doc->blocks;
        doc->blocks = b;
    }
    void *r = b->data + b->used;
    b->used += n;
    return r;
}

static int fail(parser *ps, int rc, const char *what)
{
    if (ps->rc == 0) {
        ps->rc = rc;
        if (ps->err && ps->err_size)
            snprintf(ps->err, ps->err_size, "%s at byte %zu", what,
                     (size_t)(ps->p - ps->start));
    }
    return ps->rc;
}

static void skip_ws(parser *ps)
{
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' ||
                               *ps->p == '\n' || *ps->p == '\r'))
        ps->p++;
}

static fb__json *new_node(parser *ps, fb__json_type t)
{
    if (++ps->nodes > ps->max_nodes) {
        fail(ps, FB_ETOOBIG, "too many JSON values");
        return NULL;
    }
    fb__json *n = arena_alloc(ps->doc, sizeof *n);
    if (!n) {
        fail(ps, -ENOMEM, "out of memory");
        return NULL;
    }
    memset(n, 0, sizeof *n);
    n->type = t;
    return n;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int read_hex4(parser *ps, unsigned *out)
{
    if (ps->end - ps->p < 4)
        return fail(ps, FB_EFORMAT, "truncated \\u escape");
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(ps->p[i]);
        if (h < 0)
            return fail(ps, FB_EFORMAT, "bad \\u escape");
        v = v << 4 | (unsigned)h;
    }
    ps->p += 4;
    *out = v;
    return 0;
}

static size_t put_utf8(char *o, unsigned cp)
{
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) {
        o[0] = (char)(0xc0 | cp >> 6); o[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | cp >> 12); o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | cp >> 18); o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3f)); o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* Parse a string at ps->p (which points at the opening quote). */
static int parse_string(parser *ps, const char **out, size_t *out_len)
{
    ps->p++;
    const char *s = ps->p;
    size_t raw = 0;
    int has_escape = 0;
    while (s < ps->end && *s != '"') {
        if ((unsigned char)*s < 0x20) {
            ps->p = s;
            return fail(ps, FB_EFORMAT, "control character in string");
        }
        if (*s == '\\') {
            has_escape = 1;
            s++;
            if (s >= ps->end)
                break;
        }
        s++;
        raw++;
    }
    if (s >= ps->end) {
        ps->p = s;
        return fail(ps, FB_EFORMAT, "unterminated string");
    }
    size_t span = (size_t)(s - ps->p);
    char *o = arena_alloc(ps->doc, span + 1);
    if (!o)
        return fail(ps, -ENOMEM, "out of memory");
    if (!has_escape) {
        memcpy(o, ps->p, span);
        o[span] = '\0';
        *out = o;
        *out_len = span;
        ps->p = s + 1;
        return 0;
    }
    size_t n = 0;
    while (ps->p < s) {
        char c = *ps->p++;
        if (c != '\\') {
            o[n++] = c;
            continue;
        }
        c = *ps->p++;
        switch (c) {
        case '"': o[n++] = '"'; break;
        case '\\': o[n++] = '\\'; break;
        case '/': o[n++] = '/'; break;
        case 'b': o[n++] = '\b'; break;
        case 'f': o[n++] = '\f'; break;
        case 'n': o[n++] = '\n'; break;
        case 'r': o[n++] = '\r'; break;
        case 't': o[n++] = '\t'; break;
        case 'u': {
            unsigned cp;
            if (read_hex4(ps, &cp))
                return ps->rc;
            if (cp >= 0xd800 && cp <= 0xdbff) {
                unsigned lo;
                if (ps->end - ps->p >= 6 && ps->p[0] == '\\' && ps->p[1] == 'u') {
                    ps->p += 2;
                    if (read_hex4(ps, &lo))
                        return ps->rc;
                    if (lo < 0xdc00 || lo > 0xdfff)
                        return fail(ps, FB_EFORMAT, "bad surrogate pair");
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                } else {
                    return fail(ps, FB_EFORMAT, "lone surrogate");
                }
            } else if (cp >= 0xdc00 && cp <= 0xdfff) {
                return fail(ps, FB_EFORMAT, "lone surrogate");
            }
            /* 6 escape bytes always cover the <= 4 output bytes. */
            n += put_utf8(o + n, cp);
            break;
        }
        default:
            return fail(ps, FB_EFORMAT, "bad escape in string");
        }
    }
    o[n] = '\0';
    *out = o;
    *out_len = n;
    ps->p = s + 1;
    return 0;
}

static int parse_number(parser *ps, fb__json *n)
{
    const char *s = ps->p;
    const char *p = s;
    if (p < ps->end && *p == '-')
        p++;
    if (p >= ps->end)
        return fail(ps, FB_EFORMAT, "bad number");
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
        while (p < ps->end && *p >= '0' && *p <= '9')
            p++;
    } else {
        return fail(ps, FB_EFORMAT, "bad number");
    }
    if (p < ps->end && *p == '.') {
        p++;
        if (p >= ps->end || *p < '0' || *p > '9')
            return fail(ps, FB_EFORMAT, "bad number");
        while (p < ps->end && *p >= '0' && *p <= '9')
            p++;
    }
    if (p < ps->end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < ps->end && (*p == '+' || *p == '-'))
            p++;
        if (p >= ps->end || *p < '0' || *p > '9')
            return fail(ps, FB_EFORMAT, "bad number");
        while (p < ps->end && *p >= '0' && *p <= '9')
            p++;
    }
    size_t len = (size_t)(p - s);
    if (len > 400)
        return fail(ps, FB_ETOOBIG, "number too long");
    char *o = arena_alloc(ps->doc, len + 1);
    if (!o)
        return fail(ps, -ENOMEM, "out of memory");
    memcpy(o, s, len);
    o[len] = '\0';
    n->str = o;
    n->str_len = len;
    ps->p = p;
    return 0;
}

static fb__json *parse_value(parser *ps);

static int parse_container(parser *ps, fb__json *n, char close)
{
    if (++ps->depth > ps->max_depth)
        return fail(ps, FB_ETOOBIG, "nesting too deep");
    ps->p++;
    skip_ws(ps);
    fb__json **tail = &n->child;
    if (ps->p < ps->end && *ps->p == close) {
        ps->p++;
        ps->depth--;
        return 0;
    }
    for (;;) {
        const char *key = NULL;
        size_t key_len = 0;
        skip_ws(ps);
        if (close == '}') {
            if (ps->p >= ps->end || *ps->p != '"')
                return fail(ps, FB_EFORMAT, "expected a string key");
            if (parse_string(ps, &key, &key_len))
                return ps->rc;
            skip_ws(ps);
            if (ps->p >= ps->end || *ps->p != ':')
                return fail(ps, FB_EFORMAT, "expected ':'");
            ps->p++;
        }
        fb__json *v = parse_value(ps);
        if (!v)
            return ps->rc;
        v->key = key;
        v->key_len = key_len;
        *tail = v;
        tail = &v->next;
        n->count++;
        skip_ws(ps);
        if (ps->p >= ps->end)
            return fail(ps, FB_EFORMAT, "unterminated container");
        if (*ps->p == ',') {
            ps->p++;
            continue;
        }
        if (*ps->p == close) {
            ps->p++;
            ps->depth--;
            return 0;
        }
        return fail(ps, FB_EFORMAT, close == '}' ? "expected ',' or '}'"
                                                 : "expected ',' or ']'");
    }
}

static int match_word(parser *ps, const char *w)
{
    size_t l = strlen(w);
    if ((size_t)(ps->end - ps->p) < l || memcmp(ps->p, w, l) != 0)
        return 0;
    ps->p += l;
    return 1;
}

static fb__json *parse_value(parser *ps)
{
    skip_ws(ps);
    if (ps->p >= ps->end) {
        fail(ps, FB_EFORMAT, "unexpected end of input");
        return NULL;
    }
    fb__json *n;
    char c = *ps->p;
    switch (c) {
    case '{':
    case '[':
        n = new_node(ps, c == '{' ? FB_JSON_OBJECT : FB_JSON_ARRAY);
        if (!n || parse_container(ps, n, c == '{' ? '}' : ']'))
            return NULL;
        return n;
    case '"':
        n = new_node(ps, FB_JSON_STRING);
        if (!n || parse_string(ps, &n->str, &n->str_len))
            return NULL;
        return n;
    case 't':
    case 'f':
        n = new_node(ps, FB_JSON_BOOL);
        if (!n)
            return NULL;
        if (match_word(ps, "true")) n->boolean = 1;
        else if (!match_word(ps, "false")) {
            fail(ps, FB_EFORMAT, "unexpected token");
            return NULL;
        }
        return n;
    case 'n':
        n = new_node(ps, FB_JSON_NULL);
        if (!n)
            return NULL;
        if (!match_word(ps, "null")) {
            fail(ps, FB_EFORMAT, "unexpected token");
            return NULL;
        }
        return n;
    default:
        if (c == '-' || (c >= '0' && c <= '9')) {
            n = new_node(ps, FB_JSON_NUMBER);
            if (!n || parse_number(ps, n))
                return NULL;
            return n;
        }
        fail(ps, FB_EFORMAT, "unexpected character");
        return NULL;
    }
}

int fb__json_parse(const char *text, size_t len, const fb__json_limits *lim,
                   fb__json_doc **doc_out, char *err, size_t err_size)
{
    size_t max_input = lim && lim->max_input ? lim->max_input : 256u << 20;
    parser ps = {
        .p = text, .end = text + len, .start = text,
        .max_nodes = lim && lim->max_nodes ? lim->max_nodes : 50000000,
        .max_depth = lim && lim->max_depth ? lim->max_depth : 64,
        .err = err, .err_size = err_size,
    };
    if (err && err_size)
        err[0] = '\0';
    if (len > max_input) {
        if (err && err_size)
            snprintf(err, err_size, "input of %zu bytes exceeds the limit of %zu",
                     len, max_input);
        return FB_ETOOBIG;
    }
    fb__json_doc *doc = fb__calloc(1, sizeof *doc);
    if (!doc)
        return -ENOMEM;
    ps.doc = doc;
    doc->root = parse_value(&ps);
    if (doc->root) {
        skip_ws(&ps);
        if (ps.p != ps.end)
            fail(&ps, FB_EFORMAT, "trailing characters after the JSON value");
    }
    if (ps.rc) {
        fb__json_free(doc);
        return ps.rc;
    }
    *doc_out = doc;
    return 0;
}

const fb__json *fb__json_root(const fb__json_doc *doc)
{
    return doc ? doc->root : NULL;
}

void fb__json_free(fb__json_doc *doc)
{
    if (!doc)
        return;
    block *b = doc->blocks;
    while (b) {
        block *n = b->next;
        free(b);
        b = n;
    }
    free(doc);
}

const fb__json *fb__json_get(const fb__json *obj, const char *key)
{
    if (!obj || obj->type != FB_JSON_OBJECT)
        return NULL;
    size_t kl = strlen(key);
    for (const fb__json *c = obj->child; c; c = c->next)
        if (c->key_len == kl && memcmp(c->key, key, kl) == 0)
            return c;
    return NULL;
}

const fb__json *fb__json_at(const fb__json *arr, size_t i)
{
    if (!arr || arr->type != FB_JSON_ARRAY)
        return NULL;
    const fb__json *c = arr->child;
    while (c && i--)
        c = c->next;
    return c;
}

static int keycmp(const void *a, const void *b)
{
    const fb__json *x = *(const fb__json *const *)a;
    const fb__json *y = *(const fb__json *const *)b;
    size_t n = x->key_len < y->key_len ? x->key_len : y->key_len;
    int c = memcmp(x->key, y->key, n);
    if (c)
        return c;
    return (x->key_len > y->key_len) - (x->key_len < y->key_len);
}

int fb__json_has_duplicate_keys(const fb__json *obj)
{
    if (!obj || obj->type != FB_JSON_OBJECT || obj->count < 2)
        return 0;
    const fb__json **v = fb__malloc(obj->count * sizeof *v);
    if (!v)
        return -ENOMEM;
    size_t n = 0;
    for (const fb__json *c = obj->child; c; c = c->next)
        v[n++] = c;
    qsort(v, n, sizeof *v, keycmp);
    int dup = 0;
    for (size_t i = 1; i < n && !dup; i++)
        dup = keycmp(&v[i - 1], &v[i]) == 0;
    free(v);
    return dup;
}

int fb__json_as_i64(const fb__json *v, int64_t *out)
{
    if (!v || v->type != FB_JSON_NUMBER)
        return FB_EFORMAT;
    char *end;
    errno = 0;
    long long r = strtoll(v->str, &end, 10);
    if (*end || errno == ERANGE)
        return FB_EFORMAT;
    *out = r;
    return 0;
}

int fb__json_as_u64(const fb__json *v, uint64_t *out)
{
    if (!v || v->type != FB_JSON_NUMBER || v->str[0] == '-')
        return FB_EFORMAT;
    char *end;
    errno = 0;
    unsigned long long r = strtoull(v->str, &end, 10);
    if (*end || errno == ERANGE)
        return FB_EFORMAT;
    *out = r;
    return 0;
}

int fb__json_as_double(const fb__json *v, double *out)
{
    if (!v || v->type != FB_JSON_NUMBER)
        return FB_EFORMAT;
    double r = strtod(v->str, NULL);
    if (!isfinite(r))
        return FB_EFORMAT;
    *out = r;
    return 0;
}

const char *fb__json_as_str(const fb__json *v)
{
    return (v && v->type == FB_JSON_STRING) ? v->str : NULL;
}
