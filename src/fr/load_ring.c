/*
 * load_ring.c -- read a firebreak flight-recorder ring (ring.h) from a live
 * segment or a dumped file into the analyzer's model.
 *
 * The segment may still be written while we read: every slot is copied
 * under its sequence check, and a slot that changes under us is skipped
 * (counted in `torn`), never half-read.  Offsets, capacity, rank and clock
 * anchors come from the identity fb__seg_open_as copied and bounded at
 * attach; heads read live are clamped to the ring before use.  The file
 * is one the user named (or a dump), so any owner is accepted.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/util.h"
#include "firebreak/firebreak.h"
#include "fr/model.h"
#include "fr/ring.h"
#include "lib/segment.h"

/* A live segment, read now: its shm name ("/fb.J.A.R") or that name in
 * /dev/shm.  Any other file, in a directory under /dev/shm too (a run
 * directory on tmpfs), is a snapshot, as of when it was last written. */
static int is_live(const char *path)
{
    if (!strncmp(path, "/dev/shm/", 9))
        path += 8;
    return path[0] == '/' && path[1] && !strchr(path + 1, '/');
}

static uint64_t snapshot_time(const char *path)
{
    struct stat st;
    if (is_live(path) || stat(path, &st))
        return fb__wall_ns();
    return (uint64_t)st.st_mtim.tv_sec * 1000000000ull +
           (uint64_t)st.st_mtim.tv_nsec;
}

static int group_of(fb__fr_model *m, uint64_t id, const char *name)
{
    char key[32];
    snprintf(key, sizeof key, "0x%016" PRIx64, id);
    return fb__fr_model_group(m, key, name);
}

/* A ring is read in two steps so that many can be read at once
 * (analyze.c): fb__fr_ring_read copies and decodes a file without touching
 * the model (any thread), and fb__fr_ring_commit applies it to the model
 * (one thread, in the order the files were named).  Every call the
 * one-step loader made on the model -- a group per change of communicator,
 * a string per change of dtype or call site -- is recorded as an op and
 * replayed by the commit in the same order, so groups and interned strings
 * get the indices they got when rings were read one at a time; entries
 * hold op indices until the commit maps them. */

static void stage_free_ops(fb__fr_ring_stage *s)
{
    for (size_t i = 0; i < s->nops; i++)
        free(s->ops[i].str);
    free(s->ops);
    s->ops = NULL;
    s->nops = s->cap_ops = 0;
}

void fb__fr_ring_stage_free(fb__fr_ring_stage *s)
{
    stage_free_ops(s);
    free(s->comms);
    free(s->ents);
    memset(s, 0, sizeof *s);
}

/* Index of a new op in *idx; 0 or -ENOMEM (str is taken either way). */
static int stage_op(fb__fr_ring_stage *s, uint64_t comm_id, int32_t size,
                    int32_t grank, char *str, uint32_t *idx)
{
    if (s->nops == s->cap_ops) {
        size_t ncap = s->cap_ops ? s->cap_ops * 2 : 8;
        fb__fr_stage_op *n = fb__realloc(s->ops, ncap * sizeof *n);
        if (!n) {
            free(str);
            return -ENOMEM;
        }
        s->ops = n;
        s->cap_ops = ncap;
    }
    s->ops[s->nops] = (fb__fr_stage_op){comm_id, str, size, grank};
    *idx = (uint32_t)s->nops++;
    return 0;
}

static int stage_str(fb__fr_ring_stage *s, const char *text, uint32_t *idx)
{
    char *copy = fb__strdup(text);
    if (!copy)
        return -ENOMEM;
    return stage_op(s, 0, 0, 0, copy, idx);
}

int fb__fr_ring_read(fb__fr_ring_stage *s, const char *path, char *err, size_t errsz)
{
    fb__seg *seg = NULL;
    memset(s, 0, sizeof *s);
    int rc = fb__seg_open_as(&seg, path, FB__SEG_ANY_OWNER, NULL);
    if (rc) {
        snprintf(err, errsz, "%s: not a readable firebreak segment: %s", path,
                 fb_strerror(rc));
        return rc;
    }
    const fb__seg_header *h = fb__seg_hdr(seg); /* live fields only */
    const fb__seg_identity *id = fb__seg_ident(seg);
    uint32_t cap;
    const char *area = fb__seg_fr_area(seg, &cap);
    if (!area) {
        snprintf(err, errsz, "%s: fr_entry_size %u / fr_capacity %u: not a "
                 "ring this firebreak reads", path, id->fr_entry_size,
                 id->fr_capacity);
        fb__seg_close(seg);
        return FB_EVERSION;
    }
    int rank = id->rank;
    if (rank < 0 || rank > FR_MAX_RANK) {
        snprintf(err, errsz, "%s: field rank is %d", path, rank);
        fb__seg_close(seg);
        return FB_EFORMAT;
    }
    s->rank = rank;
    /* Bounded and cleaned by fb__seg_open_as: NUL-terminated, no control
     * bytes. */
    snprintf(s->host, sizeof s->host, "%s", id->hostname);
    snprintf(s->version, sizeof s->version, "%u.%u", id->version_major,
             id->version_minor);
    s->snapshot_ns = snapshot_time(path);
    s->step = atomic_load_explicit(&((fb__seg_header *)h)->steps_done,
                                   memory_order_relaxed)
                  ? (int64_t)atomic_load_explicit(&((fb__seg_header *)h)->step,
                                                  memory_order_relaxed)
                  : -1;
    s->world_size = id->world_size;

    uint32_t comm_slots = fb__fr_comm_slots(cap);
    uint32_t ring_slots = fb__fr_ring_slots(cap);
    const fb__fr_comm_rec *tab = (const fb__fr_comm_rec *)area;
    const fb__fr_event *ring =
        (const fb__fr_event *)(area + (size_t)comm_slots * FB__SEG_FR_ENTRY_SIZE);
    uint64_t wall_off = id->created_wall_ns - id->created_mono_ns;

    uint64_t ncomm = atomic_load_explicit(&((fb__seg_header *)h)->fr_comm_count,
                                          memory_order_acquire);
    if (ncomm > comm_slots)
        ncomm = comm_slots;
    if (ncomm) {
        s->comms = fb__malloc((size_t)ncomm * sizeof *s->comms);
        if (!s->comms)
            goto oom;
    }
    for (uint32_t i = 0; i < ncomm; i++) {
        fb__fr_comm_rec *c = &s->comms[s->ncomms];
        if (!fb__fr_read_comm(tab, i, c))
            continue;
        char name[FB__FR_NAME_MAX];
        fb__safe_text(name, sizeof name, c->name); /* printed by the analyzer */
        memcpy(c->name, name, sizeof name);
        s->ncomms++;
    }

    uint64_t head = atomic_load_explicit(&((fb__seg_header *)h)->fr_head,
                                         memory_order_acquire);
    uint64_t first = head > ring_slots ? head - ring_slots : 0; /* clamp */
    s->wrapped_from = first;
    if (head > first) { /* at most ring_slots: one allocation, no growth */
        s->ents = fb__malloc((size_t)(head - first) * sizeof *s->ents);
        if (!s->ents)
            goto oom;
    }
    uint32_t last_g = 0, last_dt = 0, last_site = 0;
    int have_g = 0, have_site = 0;
    uint64_t last_id = 0, last_dkey = UINT64_MAX;
    char last_site_file[FB__FR_SITE_FILE_MAX];
    uint32_t last_site_line = 0;
    for (uint64_t idx = first; idx < head; idx++) {
        fb__fr_event e;
        if (!fb__fr_read_event(ring, ring_slots, idx, &e)) {
            s->torn++;
            continue;
        }
        if (!have_g || e.comm_id != last_id) {
            if (stage_op(s, e.comm_id, e.comm_size, e.comm_rank, NULL, &last_g))
                goto oom;
            have_g = 1;
            last_id = e.comm_id;
        }
        uint64_t dkey = ((uint64_t)e.elem_bytes << 16) | ((uint64_t)e.dtype << 1) |
                        !!(e.flags & FB__FR_F_DTYPE_OTHER);
        if (dkey != last_dkey) { /* interning is a hash lookup: skip repeats */
            char dt[24];
            if (e.flags & FB__FR_F_DTYPE_OTHER)
                snprintf(dt, sizeof dt, "bytes%u", e.elem_bytes);
            else
                snprintf(dt, sizeof dt, "%s",
                         fb_dtype_name((fb_dtype)e.dtype)
                             ? fb_dtype_name((fb_dtype)e.dtype) : "?");
            if (stage_str(s, dt, &last_dt))
                goto oom;
            last_dkey = dkey;
        }
        fb__fr_ent x = {
            .seq = e.coll_seq,
            .t_ns = e.begin_mono_ns + wall_off,
            .in_numel = (int64_t)(e.count & INT64_MAX),
            .out_numel = (int64_t)(e.out_count & INT64_MAX),
            .group = last_g,
            .dtype = last_dt,
            .peer = e.peer,
            .pair_seq = e.pair_seq,
            .op = e.op < FB_OP_COUNT_ ? e.op : FB_OP_UNKNOWN,
            .state = e.state == FB__FR_COMPLETED ? FR_DONE
                     : e.state == FB__FR_STARTED ? FR_PENDING_STARTED
                                                 : FR_PENDING_SCHEDULED,
            .flags = ((e.flags & FB__FR_F_P2P) ? FR_ENT_P2P : 0) |
                     ((e.flags & FB__FR_F_VARIABLE) ? FR_ENT_VARIABLE : 0),
        };
        if (e.flags & FB__FR_F_ANY_SOURCE)
            x.peer = -1;
        if (e.site_line) { /* minor 1: the caller's file:line */
            if (!have_site || e.site_line != last_site_line ||
                memcmp(e.site_file, last_site_file, FB__FR_SITE_FILE_MAX)) {
                char raw[FB__FR_SITE_FILE_MAX + 1], file[FB__FR_SITE_FILE_MAX + 1],
                    site[FB__FR_SITE_FILE_MAX + 16];
                memcpy(raw, e.site_file, FB__FR_SITE_FILE_MAX);
                raw[FB__FR_SITE_FILE_MAX] = '\0';
                fb__safe_text(file, sizeof file, raw); /* printed by the analyzer */
                snprintf(site, sizeof site, "%s:%u", file[0] ? file : "?",
                         e.site_line);
                if (stage_str(s, site, &last_site))
                    goto oom;
                memcpy(last_site_file, e.site_file, FB__FR_SITE_FILE_MAX);
                last_site_line = e.site_line;
                have_site = 1;
            }
            x.frame = last_site + 1; /* 0 stays "no site" */
        }
        s->ents[s->n++] = x;
    }
    fb__seg_close(seg);
    return 0;
oom:
    fb__seg_close(seg);
    fb__fr_ring_stage_free(s);
    snprintf(err, errsz, "%s: out of memory", path);
    return -ENOMEM;
}

/* Communicator sizes (or this rank's place in one) a ring declares at or
 * above its own world size: counted for one warning. */
typedef struct implausible { int world, count, max; } implausible;

static int plausible(implausible *imp, int size, int grank)
{
    if (size <= imp->world && grank < imp->world)
        return 1;
    imp->count++;
    if (size > imp->max)
        imp->max = size;
    if (grank >= imp->max)
        imp->max = grank + 1;
    return 0;
}

int fb__fr_ring_commit(fb__fr_model *m, fb__fr_ring_stage *s, const char *path,
                       char *err, size_t errsz)
{
    uint32_t *map = NULL;
    int rc;
    fb__fr_rank *r = fb__fr_model_add_rank(m, s->rank, FR_SRC_RING, path);
    if (!r)
        goto oom;
    snprintf(r->host, sizeof r->host, "%s", s->host);
    r->version = fb__strdup(s->version);
    if (!r->version)
        goto oom;
    r->snapshot_ns = s->snapshot_ns;
    r->step = s->step;
    int world = m->world_max > 0 && s->world_size > m->world_max ? m->world_max
                                                                 : s->world_size;
    if (world > m->world_size && world <= FR_MAX_RANK)
        m->world_size = world;
    /* A communicator has no more members than the world.  A larger size
     * (a torn or hostile file: the supervisor's diagnosis reads what ranks
     * wrote) is not taken: the analysis sizes its arrays by group size,
     * and 2^24 members declared by a few events cost gigabytes. */
    implausible imp = {.world = s->world_size > 0 ? s->world_size : 1};
    if (m->world_max > 0 && imp.world > m->world_max) {
        fb__fr_model_warn(m, "rank %d: the ring states a world of %d ranks, the job "
                          "has %d: held to %d (%s)", s->rank, s->world_size,
                          m->world_max, m->world_max, path);
        imp.world = m->world_max;
    }
    for (uint32_t i = 0; i < s->ncomms; i++) {
        const fb__fr_comm_rec *c = &s->comms[i];
        int g = group_of(m, c->comm_id, c->name);
        if (g < 0)
            goto oom;
        int ok = plausible(&imp, c->size, c->rank);
        if (ok && c->size > 0 && c->size <= (1 << 24) && c->ranks_stride > 0 &&
            c->ranks_first >= 0 && !m->groups[g].members &&
            (int64_t)c->ranks_first + (int64_t)(c->size - 1) * c->ranks_stride <= FR_MAX_RANK) {
            int *mem = fb__malloc((size_t)c->size * sizeof *mem);
            if (!mem)
                goto oom;
            for (int k = 0; k < c->size; k++)
                mem[k] = c->ranks_first + k * c->ranks_stride;
            rc = fb__fr_model_group_members(m, g, mem, c->size);
            free(mem);
            if (rc)
                goto oom;
        } else if (ok && c->size > 0 && c->size <= (1 << 24)) {
            fb__fr_model_group_members(m, g, NULL, c->size);
        }
        if (ok && c->rank >= 0 && (c->size <= 0 || c->rank < c->size) &&
            fb__fr_rank_member(m, r, (uint32_t)g, c->rank))
            goto oom;
    }
    r->wrapped = s->wrapped_from > 0;
    if (r->wrapped)
        fb__fr_model_warn(m, "rank %d: ring wrapped, %" PRIu64 " older events "
                      "overwritten (%s)", s->rank, s->wrapped_from, path);
    /* Replay: op i becomes a group or a string index, map[i]. */
    if (s->nops) {
        map = fb__malloc(s->nops * sizeof *map);
        if (!map)
            goto oom;
    }
    for (size_t i = 0; i < s->nops; i++) {
        const fb__fr_stage_op *op = &s->ops[i];
        if (op->str) {
            if (fb__fr_model_intern(m, op->str, &map[i]))
                goto oom;
            continue;
        }
        int g = group_of(m, op->comm_id, NULL);
        if (g < 0)
            goto oom;
        map[i] = (uint32_t)g;
        int ok = plausible(&imp, op->size, op->grank);
        if (ok && op->size > 0 && op->size <= (1 << 24))
            fb__fr_model_group_members(m, g, NULL, op->size);
        /* a place in it past its size, as for a communicator record */
        if (ok && op->grank >= 0 && (op->size <= 0 || op->grank < op->size) &&
            fb__fr_rank_member(m, r, (uint32_t)g, op->grank))
            goto oom;
    }
    if (imp.count)
        fb__fr_model_warn(m, "rank %d: %d communicators declared larger than the "
                          "world size %d (up to %d members); their "
                          "sizes and this rank's place in them are not taken (%s)",
                          s->rank, imp.count, imp.world, imp.max, path);
    for (size_t k = 0; k < s->n; k++) {
        fb__fr_ent *x = &s->ents[k];
        x->group = map[x->group];
        x->dtype = map[x->dtype];
        if (x->frame) /* op index + 1; 0 stays "no site" */
            x->frame = map[x->frame - 1];
    }
    free(map);
    map = NULL;
    r->ents = s->ents;
    r->n = r->cap = s->n;
    s->ents = NULL;
    s->n = 0;
    r->torn = s->torn;
    if (r->torn)
        fb__fr_model_warn(m, "rank %d: %d events were being rewritten while read "
                      "(%s)", s->rank, r->torn, path);
    return 0;
oom:
    free(map);
    snprintf(err, errsz, "%s: out of memory", path);
    return -ENOMEM;
}

int fb__fr_load_ring(fb__fr_model *m, const char *path, char *err, size_t errsz)
{
    fb__fr_ring_stage s;
    int rc = fb__fr_ring_read(&s, path, err, errsz);
    if (rc)
        return rc;
    rc = fb__fr_ring_commit(m, &s, path, err, errsz);
    fb__fr_ring_stage_free(&s);
    return rc;
}
