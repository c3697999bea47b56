/*
 * model.c -- the merged flight-recorder model (model.h): ranks, groups,
 * interned strings, warnings.
 */
#include "fr/model.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/util.h"

/* A string -> index hash table (open addressing, grows at 1/2). */
typedef struct strtab {
    uint32_t *slots; /* index + 1; 0 empty */
    size_t cap;
} strtab;

static int strtab_find(strtab *t, char **strs, const char *s, uint32_t *idx,
                       size_t *slot_out)
{
    if (!t->cap)
        return 0;
    size_t h = (size_t)fb__fnv1a64(s, strlen(s), 0);
    for (size_t i = h & (t->cap - 1);; i = (i + 1) & (t->cap - 1)) {
        if (!t->slots[i]) {
            *slot_out = i;
            return 0;
        }
        if (!strcmp(strs[t->slots[i] - 1], s)) {
            *idx = t->slots[i] - 1;
            return 1;
        }
    }
}

static int strtab_grow(strtab *t, char **strs, size_t n)
{
    if ((n + 1) * 2 <= t->cap)
        return 0;
    size_t ncap = t->cap ? t->cap * 2 : 64;
    uint32_t *ns = fb__calloc(ncap, sizeof *ns);
    if (!ns)
        return -ENOMEM;
    for (size_t k = 0; k < t->cap; k++) {
        uint32_t v = t->slots[k];
        if (!v)
            continue;
        const char *s = strs[v - 1];
        size_t i = (size_t)fb__fnv1a64(s, strlen(s), 0) & (ncap - 1);
        while (ns[i])
            i = (i + 1) & (ncap - 1);
        ns[i] = v;
    }
    free(t->slots);
    t->slots = ns;
    t->cap = ncap;
    return 0;
}

static int grow(void **arr, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t ncap = *cap ? *cap : 8;
    while (ncap < need)
        ncap *= 2;
    void *p = fb__realloc(*arr, ncap * elem);
    if (!p)
        return -ENOMEM;
    *arr = p;
    *cap = ncap;
    return 0;
}

int fb__fr_model_init(fb__fr_model *m)
{
    uint32_t empty;
    memset(m, 0, sizeof *m);
    m->str_index = fb__calloc(1, sizeof(strtab));
    m->group_index = fb__calloc(1, sizeof(strtab)); /* {of_str, cap} */
    if (!m->str_index || !m->group_index || fb__fr_model_intern(m, "", &empty)) {
        m->oom = 1;
        return -ENOMEM;
    }
    return 0;
}

void fb__fr_model_free(fb__fr_model *m)
{
    for (size_t i = 0; i < m->nranks; i++) {
        free(m->ranks[i].ents);
        free(m->ranks[i].path);
        free(m->ranks[i].version);
        free(m->ranks[i].memb);
    }
    free(m->ranks);
    for (size_t i = 0; i < m->ngroups; i++) {
        free(m->groups[i].key);
        free(m->groups[i].name);
        free(m->groups[i].members);
    }
    free(m->groups);
    for (size_t i = 0; i < m->nstrs; i++)
        free(m->strs[i]);
    free(m->strs);
    for (size_t i = 0; i < m->nwarnings; i++)
        free(m->warnings[i]);
    free(m->warnings);
    if (m->str_index)
        free(((strtab *)m->str_index)->slots);
    if (m->group_index)
        free(*(uint32_t **)m->group_index);
    free(m->str_index);
    free(m->group_index);
    memset(m, 0, sizeof *m);
}

fb__fr_rank *fb__fr_model_add_rank(fb__fr_model *m, int rank, int src, const char *path)
{
    if (grow((void **)&m->ranks, &m->cap_ranks, m->nranks + 1, sizeof *m->ranks)) {
        m->oom = 1;
        return NULL;
    }
    fb__fr_rank *r = &m->ranks[m->nranks];
    memset(r, 0, sizeof *r);
    r->rank = rank;
    r->src = src;
    r->step = -1;
    r->path = fb__strdup(path ? path : "");
    if (!r->path) {
        m->oom = 1;
        return NULL;
    }
    m->nranks++;
    return r;
}

int fb__fr_rank_push(fb__fr_rank *r, const fb__fr_ent *e)
{
    if (grow((void **)&r->ents, &r->cap, r->n + 1, sizeof *r->ents))
        return -ENOMEM;
    r->ents[r->n++] = *e;
    return 0;
}

int fb__fr_rank_in_group(const fb__fr_model *m, const fb__fr_rank *r, uint32_t g)
{
    return m->groups[g].member_of == (size_t)(r - m->ranks) + 1;
}

int fb__fr_rank_member(fb__fr_model *m, fb__fr_rank *r, uint32_t g, int grank)
{
    if (fb__fr_rank_in_group(m, r, g))
        return 0;
    if (grow((void **)&r->memb, &r->cap_memb, r->nmemb + 1, sizeof *r->memb))
        return -ENOMEM;
    m->groups[g].member_of = (size_t)(r - m->ranks) + 1;
    r->memb[r->nmemb].group = g;
    r->memb[r->nmemb].grank = grank;
    r->nmemb++;
    return 0;
}

int fb__fr_model_intern(fb__fr_model *m, const char *s, uint32_t *idx)
{
    strtab *t = m->str_index;
    size_t slot = 0; /* set by strtab_find; said for the compiler */
    if (!t)
        goto oom;
    if (strtab_find(t, m->strs, s, idx, &slot))
        return 0;
    if (strtab_grow(t, m->strs, m->nstrs) ||
        grow((void **)&m->strs, &m->cap_strs, m->nstrs + 1, sizeof *m->strs))
        goto oom;
    char *copy = fb__strdup(s);
    if (!copy)
        goto oom;
    strtab_find(t, m->strs, s, idx, &slot);
    m->strs[m->nstrs] = copy;
    t->slots[slot] = (uint32_t)(m->nstrs + 1);
    *idx = (uint32_t)m->nstrs++;
    return 0;
oom:
    m->oom = 1;
    return -ENOMEM;
}

int fb__fr_model_group(fb__fr_model *m, const char *key, const char *name)
{
    /* group_index: for each interned string, its group index + 1 */
    struct gmap { uint32_t *of_str; size_t cap; } *gm = m->group_index;
    _Static_assert(sizeof(struct gmap) == sizeof(strtab), "same allocation");
    uint32_t sidx;
    if (!gm || fb__fr_model_intern(m, key, &sidx))
        goto oom;
    if (sidx < gm->cap && gm->of_str[sidx]) {
        fb__fr_group *g = &m->groups[gm->of_str[sidx] - 1];
        if (name && *name && (!g->name || !*g->name)) {
            char *n = fb__strdup(name);
            if (!n)
                goto oom;
            free(g->name);
            g->name = n;
        }
        return (int)gm->of_str[sidx] - 1;
    }
    if (sidx >= gm->cap) {
        size_t ncap = gm->cap ? gm->cap : 64;
        while (ncap <= sidx)
            ncap *= 2;
        uint32_t *n = fb__realloc(gm->of_str, ncap * sizeof *n);
        if (!n)
            goto oom;
        memset(n + gm->cap, 0, (ncap - gm->cap) * sizeof *n);
        gm->of_str = n;
        gm->cap = ncap;
    }
    if (grow((void **)&m->groups, &m->cap_groups, m->ngroups + 1,
             sizeof *m->groups))
        goto oom;
    fb__fr_group *g = &m->groups[m->ngroups];
    memset(g, 0, sizeof *g);
    g->key = fb__strdup(key);
    g->name = fb__strdup(name ? name : "");
    if (!g->key || !g->name) {
        free(g->key);
        free(g->name);
        goto oom;
    }
    gm->of_str[sidx] = (uint32_t)++m->ngroups;
    return (int)m->ngroups - 1;
oom:
    m->oom = 1;
    return -1;
}

int fb__fr_model_group_members(fb__fr_model *m, int gi, const int *members, int size)
{
    fb__fr_group *g = &m->groups[gi];
    if (size <= 0)
        return 0;
    if (!g->size)
        g->size = size;
    if (g->members || !members || size != g->size)
        return 0;
    g->members = fb__malloc((size_t)size * sizeof *g->members);
    if (!g->members) {
        m->oom = 1;
        return -ENOMEM;
    }
    memcpy(g->members, members, (size_t)size * sizeof *g->members);
    return 0;
}

void fb__fr_model_warn(fb__fr_model *m, const char *fmt, ...)
{
    if (m->nwarnings >= 1000)
        return;
    char raw[512], buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    /* warnings quote paths, group names and versions from dumps: no
     * control bytes reach a terminal */
    fb__safe_text(buf, sizeof buf, raw);
    if (grow((void **)&m->warnings, &m->cap_warnings, m->nwarnings + 1,
             sizeof *m->warnings)) {
        m->oom = 1;
        return;
    }
    char *w = fb__strdup(buf);
    if (!w) {
        m->oom = 1;
        return;
    }
    m->warnings[m->nwarnings++] = w;
}
