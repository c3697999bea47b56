/*
 * pickle.c -- bounded pickle reader (pickle.h).
 *
 * A small stack machine over the opcodes of protocols 0-5.  Every value is
 * a node from an arena (counted against max_nodes); strings are copied
 * into the arena NUL-terminated.  A node already placed in a container
 * is copied shallowly before it is placed again (a memo reference), so
 * sibling links stay a tree while children are shared.
 */
#include "fr/pickle.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "firebreak/firebreak.h"

typedef struct pnode {
    fb__json j;          /* first: a pnode* is a fb__json* */
    fb__json *tail;      /* containers: last child          */
    int placed;          /* already a child of a container  */
    const char *global;  /* a GLOBAL reference: "module.name" */
} pnode;

typedef struct block { struct block *next; size_t used, cap; } block;

struct fb__pickle_doc {
    block *blocks;
    size_t nodes;
    size_t unknown_calls;
    fb__json *root;
};

typedef struct vm {
    fb__pickle_doc *doc;
    fb__pickle_limits lim;
    const unsigned char *p, *end, *start;
    pnode **stack;
    size_t sp, scap;
    size_t *marks;
    size_t nmarks;
    pnode **memo;
    size_t memo_cap, memo_next;
    char *err;
    size_t errsz;
    int op;
} vm;

static void *arena(fb__pickle_doc *d, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    block *b = d->blocks;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > (1u << 20) ? n : (1u << 20);
        b = fb__malloc(sizeof *b + cap);
        if (!b)
            return NULL;
        b->cap = cap;
        b->used = 0;
        b->next = d->blocks;
        d->blocks = b;
    }
    void *p = (char *)(b + 1) + b->used;
    b->used += n;
    return p;
}

static int fail(vm *v, int rc, const char *what)
{
    snprintf(v->err, v->errsz, "pickle: %s at byte %zu (opcode 0x%02x)", what,
             (size_t)(v->p - v->start), (unsigned)v->op & 0xff);
    return rc;
}

static pnode *node(vm *v, fb__json_type t)
{
    if (++v->doc->nodes > v->lim.max_nodes)
        return NULL;
    pnode *n = arena(v->doc, sizeof *n);
    if (!n)
        return NULL;
    memset(n, 0, sizeof *n);
    n->j.type = t;
    return n;
}

static char *str_copy(vm *v, const void *s, size_t n)
{
    char *c = arena(v->doc, n + 1);
    if (!c)
        return NULL;
    memcpy(c, s, n);
    c[n] = '\0';
    return c;
}

static int push(vm *v, pnode *n)
{
    if (!n)
        return fail(v, v->doc->nodes > v->lim.max_nodes ? FB_ETOOBIG : -ENOMEM,
                    "too many values");
    if (v->sp == v->scap) {
        size_t nc = v->scap ? v->scap * 2 : 256;
        if (nc > v->lim.max_nodes + 16)
            return fail(v, FB_ETOOBIG, "stack too deep");
        pnode **ns = fb__realloc(v->stack, nc * sizeof *ns);
        if (!ns)
            return fail(v, -ENOMEM, "out of memory");
        v->stack = ns;
        v->scap = nc;
    }
    v->stack[v->sp++] = n;
    return 0;
}

static pnode *pop(vm *v)
{
    if (v->sp == 0 || (v->nmarks && v->sp <= v->marks[v->nmarks - 1]))
        return NULL;
    return v->stack[--v->sp];
}

static pnode *top(vm *v)
{
    if (v->sp == 0 || (v->nmarks && v->sp <= v->marks[v->nmarks - 1]))
        return NULL;
    return v->stack[v->sp - 1];
}

/* The node to place as a child: itself the first time, a copy after. */
static pnode *placeable(vm *v, pnode *n)
{
    if (!n->placed) {
        n->placed = 1;
        return n;
    }
    pnode *c = node(v, n->j.type);
    if (!c)
        return NULL;
    *c = *n;
    c->j.next = NULL;
    c->j.key = NULL;
    c->j.key_len = 0;
    c->placed = 1;
    return c;
}

static int append(vm *v, pnode *list, pnode *item)
{
    pnode *c = placeable(v, item);
    if (!c)
        return fail(v, FB_ETOOBIG, "too many values");
    if (list->tail)
        list->tail->next = &c->j;
    else
        list->j.child = &c->j;
    list->tail = &c->j;
    list->j.count++;
    return 0;
}

static int set_item(vm *v, pnode *dict, pnode *key, pnode *val)
{
    if (dict->j.type != FB_JSON_OBJECT)
        return fail(v, FB_EFORMAT, "SETITEM on something not a dict");
    const char *k = NULL;
    size_t klen = 0;
    if (key->j.type == FB_JSON_STRING || key->j.type == FB_JSON_NUMBER) {
        k = key->j.str;
        klen = key->j.type == FB_JSON_STRING ? key->j.str_len : strlen(key->j.str);
    } else if (key->j.type == FB_JSON_BOOL) {
        k = key->j.boolean ? "True" : "False";
        klen = strlen(k);
    } else {
        k = "";
    }
    pnode *c = placeable(v, val);
    if (!c)
        return fail(v, FB_ETOOBIG, "too many values");
    c->j.key = k;
    c->j.key_len = klen;
    if (dict->tail)
        dict->tail->next = &c->j;
    else
        dict->j.child = &c->j;
    dict->tail = &c->j;
    dict->j.count++;
    return 0;
}

static int need(vm *v, size_t n)
{
    if ((size_t)(v->end - v->p) < n)
        return fail(v, FB_EFORMAT, "truncated");
    return 0;
}

static uint64_t le(const unsigned char *p, int n)
{
    uint64_t x = 0;
    for (int i = n - 1; i >= 0; i--)
        x = (x << 8) | p[i];
    return x;
}

/* A line of text (protocol 0 operands), without its newline. */
static int line(vm *v, const char **s, size_t *n)
{
    const unsigned char *nl = memchr(v->p, '\n', (size_t)(v->end - v->p));
    if (!nl)
        return fail(v, FB_EFORMAT, "unterminated text operand");
    *s = (const char *)v->p;
    *n = (size_t)(nl - v->p);
    v->p = nl + 1;
    return 0;
}

static int push_str(vm *v, const void *s, size_t n)
{
    pnode *x = node(v, FB_JSON_STRING);
    if (!x)
        return push(v, NULL);
    x->j.str = str_copy(v, s, n);
    if (!x->j.str)
        return fail(v, -ENOMEM, "out of memory");
    x->j.str_len = n;
    return push(v, x);
}

static int push_number_text(vm *v, const char *txt)
{
    pnode *x = node(v, FB_JSON_NUMBER);
    if (!x)
        return push(v, NULL);
    x->j.str = str_copy(v, txt, strlen(txt));
    if (!x->j.str)
        return fail(v, -ENOMEM, "out of memory");
    x->j.str_len = strlen(txt);
    return push(v, x);
}

static int push_int(vm *v, int64_t i)
{
    /* the hot path of a dump: ids, sizes, times (no printf) */
    char buf[24], *e = buf + sizeof buf - 1, *p = e;
    uint64_t u = i < 0 ? 0 - (uint64_t)i : (uint64_t)i;
    *p = '\0';
    do {
        *--p = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (i < 0)
        *--p = '-';
    pnode *x = node(v, FB_JSON_NUMBER);
    if (!x)
        return push(v, NULL);
    x->j.str_len = (size_t)(e - p);
    x->j.str = str_copy(v, p, x->j.str_len);
    if (!x->j.str)
        return fail(v, -ENOMEM, "out of memory");
    return push(v, x);
}

static int push_long_bytes(vm *v, const unsigned char *b, size_t n)
{
    if (n == 0)
        return push_int(v, 0);
    if (n > 8) {
        /* bigger than 64 bits: keep it as a (lossy) float */
        double d = 0;
        for (size_t i = n; i-- > 0;)
            d = d * 256.0 + b[i];
        if (b[n - 1] & 0x80)
            d -= ldexp(1.0, (int)(8 * n));
        char buf[40];
        snprintf(buf, sizeof buf, "%.17g", d);
        return push_number_text(v, buf);
    }
    uint64_t x = le(b, (int)n);
    if (n < 8 && (b[n - 1] & 0x80))
        x |= ~0ull << (8 * n); /* sign-extend */
    return push_int(v, (int64_t)x);
}

static int push_float(vm *v, double d)
{
    char buf[40];
    if (!isfinite(d))
        return push(v, node(v, FB_JSON_NULL));
    snprintf(buf, sizeof buf, "%.17g", d);
    return push_number_text(v, buf);
}

static int memo_put(vm *v, size_t idx)
{
    pnode *t = top(v);
    if (!t)
        return fail(v, FB_EFORMAT, "memo store with an empty stack");
    if (idx >= v->lim.max_memo)
        return fail(v, FB_ETOOBIG, "memo index too large");
    if (idx >= v->memo_cap) {
        size_t nc = v->memo_cap ? v->memo_cap : 256;
        while (nc <= idx)
            nc *= 2;
        pnode **nm = fb__realloc(v->memo, nc * sizeof *nm);
        if (!nm)
            return fail(v, -ENOMEM, "out of memory");
        memset(nm + v->memo_cap, 0, (nc - v->memo_cap) * sizeof *nm);
        v->memo = nm;
        v->memo_cap = nc;
    }
    v->memo[idx] = t;
    return 0;
}

static int memo_get(vm *v, size_t idx)
{
    if (idx >= v->memo_cap || !v->memo[idx])
        return fail(v, FB_EFORMAT, "memo reference to an empty slot");
    return push(v, v->memo[idx]);
}

static int text_index(vm *v, size_t *idx)
{
    const char *s;
    size_t n;
    int rc = line(v, &s, &n);
    if (rc)
        return rc;
    char buf[24];
    if (n == 0 || n >= sizeof buf)
        return fail(v, FB_EFORMAT, "bad memo index");
    memcpy(buf, s, n);
    buf[n] = '\0';
    *idx = (size_t)strtoull(buf, NULL, 10);
    return 0;
}

static int mark(vm *v)
{
    if ((int)v->nmarks >= v->lim.max_depth)
        return fail(v, FB_ETOOBIG, "nested too deeply");
    v->marks[v->nmarks++] = v->sp;
    return 0;
}

/* Pop everything above the last MARK into `into` (array or object). */
static int collect(vm *v, pnode *into, int pairs)
{
    if (!v->nmarks)
        return fail(v, FB_EFORMAT, "no MARK");
    size_t m = v->marks[--v->nmarks];
    size_t n = v->sp - m;
    if (pairs && (n & 1))
        return fail(v, FB_EFORMAT, "odd number of items for a dict");
    for (size_t i = m; i < v->sp; i += pairs ? 2 : 1) {
        int rc = pairs ? set_item(v, into, v->stack[i], v->stack[i + 1])
                       : append(v, into, v->stack[i]);
        if (rc)
            return rc;
    }
    v->sp = m;
    return 0;
}

static int tuple_n(vm *v, int n)
{
    pnode *t = node(v, FB_JSON_ARRAY);
    if (!t)
        return push(v, NULL);
    if (v->sp < (size_t)n || (v->nmarks && v->sp - (size_t)n < v->marks[v->nmarks - 1]))
        return fail(v, FB_EFORMAT, "stack underflow");
    for (size_t i = v->sp - (size_t)n; i < v->sp; i++) {
        int rc = append(v, t, v->stack[i]);
        if (rc)
            return rc;
    }
    v->sp -= (size_t)n;
    return push(v, t);
}

static int global(vm *v, const char *mod, size_t ml, const char *name, size_t nl)
{
    pnode *g = node(v, FB_JSON_NULL);
    if (!g)
        return push(v, NULL);
    char *s = arena(v->doc, ml + nl + 2);
    if (!s)
        return fail(v, -ENOMEM, "out of memory");
    memcpy(s, mod, ml);
    s[ml] = '.';
    memcpy(s + ml + 1, name, nl);
    s[ml + nl + 1] = '\0';
    g->global = s;
    return push(v, g);
}

/* REDUCE: only the helpers that rebuild plain containers are known. */
static int reduce(vm *v)
{
    pnode *args = pop(v), *fn = pop(v);
    if (!args || !fn)
        return fail(v, FB_EFORMAT, "stack underflow");
    const char *g = fn->global ? fn->global : "";
    if ((!strncmp(g, "torch.jit._pickle.build_", 24) ||
         !strcmp(g, "torch.jit._pickle.restore_type_tag") ||
         !strcmp(g, "collections.OrderedDict")) &&
        args->j.type == FB_JSON_ARRAY) {
        if (args->j.child)
            return push(v, (pnode *)args->j.child);
        if (!strcmp(g, "collections.OrderedDict"))
            return push(v, node(v, FB_JSON_OBJECT));
    }
    v->doc->unknown_calls++;
    return push(v, node(v, FB_JSON_NULL));
}

static int run(vm *v)
{
    while (v->p < v->end) {
        int rc = 0;
        v->op = *v->p++;
        const char *s;
        size_t n;
        pnode *a, *b, *c;
        switch (v->op) {
        case 0x80: /* PROTO */
            if ((rc = need(v, 1)))
                return rc;
            if (*v->p > 5)
                return fail(v, FB_EVERSION, "protocol newer than 5");
            v->p++;
            break;
        case 0x95: /* FRAME */
            if ((rc = need(v, 8)))
                return rc;
            v->p += 8;
            break;
        case '.': /* STOP */
            a = pop(v);
            if (!a)
                return fail(v, FB_EFORMAT, "STOP with an empty stack");
            v->doc->root = &a->j;
            return 0;
        case '(':
            rc = mark(v);
            break;
        case '0':
            if (!pop(v))
                return fail(v, FB_EFORMAT, "stack underflow");
            break;
        case '1':
            if (!v->nmarks)
                return fail(v, FB_EFORMAT, "no MARK");
            v->sp = v->marks[--v->nmarks];
            break;
        case '2':
            if (!(a = top(v)))
                return fail(v, FB_EFORMAT, "stack underflow");
            rc = push(v, a);
            break;
        case 'N':
            rc = push(v, node(v, FB_JSON_NULL));
            break;
        case 0x88: case 0x89:
            if ((a = node(v, FB_JSON_BOOL)))
                a->j.boolean = v->op == 0x88;
            rc = push(v, a);
            break;
        case 'I': case 'L': { /* INT / LONG text */
            if ((rc = line(v, &s, &n)))
                return rc;
            char buf[64];
            if (n == 0 || n >= sizeof buf)
                return fail(v, FB_EFORMAT, "bad integer text");
            memcpy(buf, s, n);
            buf[n] = '\0';
            if (buf[n - 1] == 'L')
                buf[n - 1] = '\0';
            if (v->op == 'I' && (!strcmp(buf, "00") || !strcmp(buf, "01"))) {
                if ((a = node(v, FB_JSON_BOOL)))
                    a->j.boolean = buf[1] == '1';
                rc = push(v, a);
                break;
            }
            char *e;
            long long x = strtoll(buf, &e, 10);
            if (*e || e == buf)
                return fail(v, FB_EFORMAT, "bad integer text");
            rc = push_int(v, x);
            break;
        }
        case 'J':
            if ((rc = need(v, 4)))
                return rc;
            rc = push_int(v, (int32_t)(uint32_t)le(v->p, 4));
            v->p += 4;
            break;
        case 'K':
            if ((rc = need(v, 1)))
                return rc;
            rc = push_int(v, *v->p++);
            break;
        case 'M':
            if ((rc = need(v, 2)))
                return rc;
            rc = push_int(v, (int64_t)le(v->p, 2));
            v->p += 2;
            break;
        case 0x8a: case 0x8b: { /* LONG1 / LONG4 */
            int w = v->op == 0x8a ? 1 : 4;
            if ((rc = need(v, (size_t)w)))
                return rc;
            uint64_t len = le(v->p, w);
            v->p += w;
            if (len > 4096)
                return fail(v, FB_ETOOBIG, "integer too long");
            if ((rc = need(v, (size_t)len)))
                return rc;
            rc = push_long_bytes(v, v->p, (size_t)len);
            v->p += len;
            break;
        }
        case 'F': {
            if ((rc = line(v, &s, &n)))
                return rc;
            char buf[64];
            if (n == 0 || n >= sizeof buf)
                return fail(v, FB_EFORMAT, "bad float text");
            memcpy(buf, s, n);
            buf[n] = '\0';
            rc = push_float(v, strtod(buf, NULL));
            break;
        }
        case 'G': {
            if ((rc = need(v, 8)))
                return rc;
            uint64_t x = 0;
            for (int i = 0; i < 8; i++)
                x = (x << 8) | v->p[i];
            double d;
            memcpy(&d, &x, sizeof d);
            v->p += 8;
            rc = push_float(v, d);
            break;
        }
        case 'S': case 'V': { /* STRING (quoted) / UNICODE (raw) */
            if ((rc = line(v, &s, &n)))
                return rc;
            if (v->op == 'S' && n >= 2 && (s[0] == '\'' || s[0] == '"') &&
                s[n - 1] == s[0]) {
                s++;
                n -= 2;
            }
            rc = push_str(v, s, n);
            break;
        }
        case 'T': case 'X': case 'B': case 'U': case 0x8c: case 'C':
        case 0x8d: case 0x8e: case 0x96: {
            int w = (v->op == 'U' || v->op == 0x8c || v->op == 'C') ? 1
                    : (v->op == 0x8d || v->op == 0x8e || v->op == 0x96) ? 8 : 4;
            if ((rc = need(v, (size_t)w)))
                return rc;
            uint64_t len = le(v->p, w);
            v->p += w;
            if (len > (uint64_t)(v->end - v->p))
                return fail(v, FB_EFORMAT, "string runs past the end");
            rc = push_str(v, v->p, (size_t)len);
            v->p += len;
            break;
        }
        case ']':
            rc = push(v, node(v, FB_JSON_ARRAY));
            break;
        case ')':
            rc = push(v, node(v, FB_JSON_ARRAY));
            break;
        case '}':
            rc = push(v, node(v, FB_JSON_OBJECT));
            break;
        case 0x8f: /* EMPTY_SET */
            rc = push(v, node(v, FB_JSON_ARRAY));
            break;
        case 'l': case 't': case 0x91: /* LIST, TUPLE, FROZENSET */
            if (!(a = node(v, FB_JSON_ARRAY)))
                return push(v, NULL);
            if ((rc = collect(v, a, 0)))
                return rc;
            rc = push(v, a);
            break;
        case 'd':
            if (!(a = node(v, FB_JSON_OBJECT)))
                return push(v, NULL);
            if ((rc = collect(v, a, 1)))
                return rc;
            rc = push(v, a);
            break;
        case 0x85: rc = tuple_n(v, 1); break;
        case 0x86: rc = tuple_n(v, 2); break;
        case 0x87: rc = tuple_n(v, 3); break;
        case 'a':
            b = pop(v);
            a = top(v);
            if (!a || !b || a->j.type != FB_JSON_ARRAY)
                return fail(v, FB_EFORMAT, "APPEND to something not a list");
            rc = append(v, a, b);
            break;
        case 'e': case 0x90: { /* APPENDS, ADDITEMS */
            if (!v->nmarks || v->marks[v->nmarks - 1] == 0)
                return fail(v, FB_EFORMAT, "APPENDS without a list and MARK");
            a = v->stack[v->marks[v->nmarks - 1] - 1];
            if (a->j.type != FB_JSON_ARRAY)
                return fail(v, FB_EFORMAT, "APPENDS to something not a list");
            rc = collect(v, a, 0);
            break;
        }
        case 's':
            c = pop(v);
            b = pop(v);
            a = top(v);
            if (!a || !b || !c)
                return fail(v, FB_EFORMAT, "stack underflow");
            rc = set_item(v, a, b, c);
            break;
        case 'u':
            if (!v->nmarks || v->marks[v->nmarks - 1] == 0)
                return fail(v, FB_EFORMAT, "SETITEMS without a dict and MARK");
            a = v->stack[v->marks[v->nmarks - 1] - 1];
            rc = collect(v, a, 1);
            break;
        case 'p': case 'g': { /* PUT / GET with a text index */
            size_t idx;
            if ((rc = text_index(v, &idx)))
                return rc;
            rc = v->op == 'p' ? memo_put(v, idx) : memo_get(v, idx);
            break;
        }
        case 'q': case 'h':
            if ((rc = need(v, 1)))
                return rc;
            rc = v->op == 'q' ? memo_put(v, *v->p) : memo_get(v, *v->p);
            v->p++;
            break;
        case 'r': case 'j':
            if ((rc = need(v, 4)))
                return rc;
            rc = v->op == 'r' ? memo_put(v, (size_t)le(v->p, 4))
                              : memo_get(v, (size_t)le(v->p, 4));
            v->p += 4;
            break;
        case 0x94: /* MEMOIZE */
            rc = memo_put(v, v->memo_next);
            v->memo_next++;
            break;
        case 'c': { /* GLOBAL module\nname\n */
            const char *mod, *name;
            size_t ml, nl;
            if ((rc = line(v, &mod, &ml)) || (rc = line(v, &name, &nl)))
                return rc;
            rc = global(v, mod, ml, name, nl);
            break;
        }
        case 0x93: /* STACK_GLOBAL */
            b = pop(v);
            a = pop(v);
            if (!a || !b || a->j.type != FB_JSON_STRING || b->j.type != FB_JSON_STRING)
                return fail(v, FB_EFORMAT, "STACK_GLOBAL needs two strings");
            rc = global(v, a->j.str, a->j.str_len, b->j.str, b->j.str_len);
            break;
        case 'R':
            rc = reduce(v);
            break;
        case 0x81: /* NEWOBJ: cls args */
            if (!pop(v) || !pop(v))
                return fail(v, FB_EFORMAT, "stack underflow");
            v->doc->unknown_calls++;
            rc = push(v, node(v, FB_JSON_NULL));
            break;
        case 0x92: /* NEWOBJ_EX: cls args kwargs */
            if (!pop(v) || !pop(v) || !pop(v))
                return fail(v, FB_EFORMAT, "stack underflow");
            v->doc->unknown_calls++;
            rc = push(v, node(v, FB_JSON_NULL));
            break;
        case 'b': /* BUILD: state is dropped */
            if (!pop(v) || !top(v))
                return fail(v, FB_EFORMAT, "stack underflow");
            break;
        default:
            return fail(v, FB_EFORMAT, "unsupported opcode");
        }
        if (rc)
            return rc;
    }
    return fail(v, FB_EFORMAT, "no STOP before the end (truncated)");
}

int fb__pickle_parse(const void *data, size_t len, const fb__pickle_limits *lim,
                     fb__pickle_doc **doc_out, char *err, size_t err_size)
{
    char dummy[8];
    vm v = {0};
    v.err = err ? err : dummy;
    v.errsz = err ? err_size : sizeof dummy;
    v.lim.max_input = lim && lim->max_input ? lim->max_input : ((size_t)1 << 30);
    v.lim.max_nodes = lim && lim->max_nodes ? lim->max_nodes : 50000000;
    v.lim.max_depth = lim && lim->max_depth ? lim->max_depth : 64;
    v.lim.max_memo = lim && lim->max_memo ? lim->max_memo : (4u << 20);
    if (len > v.lim.max_input) {
        snprintf(v.err, v.errsz, "pickle: %zu bytes is over the limit of %zu", len,
                 v.lim.max_input);
        return FB_ETOOBIG;
    }
    v.doc = fb__calloc(1, sizeof *v.doc);
    v.marks = fb__malloc((size_t)v.lim.max_depth * sizeof *v.marks);
    if (!v.doc || !v.marks) {
        free(v.doc);
        free(v.marks);
        return -ENOMEM;
    }
    v.start = v.p = data;
    v.end = v.p + len;
    int rc = run(&v);
    free(v.stack);
    free(v.marks);
    free(v.memo);
    if (rc) {
        fb__pickle_free(v.doc);
        return rc < 0 ? rc : FB_EFORMAT;
    }
    *doc_out = v.doc;
    return 0;
}

const fb__json *fb__pickle_root(const fb__pickle_doc *doc)
{
    return doc ? doc->root : NULL;
}

size_t fb__pickle_unknown_calls(const fb__pickle_doc *doc)
{
    return doc ? doc->unknown_calls : 0;
}

void fb__pickle_free(fb__pickle_doc *doc)
{
    if (!doc)
        return;
    for (block *b = doc->blocks; b;) {
        block *n = b->next;
        free(b);
        b = n;
    }
    free(doc);
}
