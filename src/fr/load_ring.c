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

static int is_live(const char *path)
{
    return (path[0] == '/' && !strchr(path + 1, '/')) ||
           !strncmp(path, "/dev/shm/", 9);
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

int fb__fr_load_ring(fb__fr_model *m, const char *path, char *err, size_t errsz)
{
    fb__seg *seg = NULL;
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
    fb__fr_rank *r = fb__fr_model_add_rank(m, rank, FR_SRC_RING, path);
    if (!r) {
        fb__seg_close(seg);
        return -ENOMEM;
    }
    /* Bounded and cleaned by fb__seg_open_as: NUL-terminated, no control
     * bytes. */
    snprintf(r->host, sizeof r->host, "%s", id->hostname);
    char ver[32];
    snprintf(ver, sizeof ver, "%u.%u", id->version_major, id->version_minor);
    r->version = fb__strdup(ver);
    if (!r->version)
        goto oom;
    r->snapshot_ns = snapshot_time(path);
    r->step = atomic_load_explicit(&((fb__seg_header *)h)->steps_done,
                                   memory_order_relaxed)
                  ? (int64_t)atomic_load_explicit(&((fb__seg_header *)h)->step,
                                                  memory_order_relaxed)
                  : -1;
    if (id->world_size > m->world_size && id->world_size <= FR_MAX_RANK)
        m->world_size = id->world_size;

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
    for (uint32_t i = 0; i < ncomm; i++) {
        fb__fr_comm_rec c;
        if (!fb__fr_read_comm(tab, i, &c))
            continue;
        char name[FB__FR_NAME_MAX];
        fb__safe_text(name, sizeof name, c.name); /* printed by the analyzer */
        int g = group_of(m, c.comm_id, name);
        if (g < 0)
            goto oom;
        if (c.size > 0 && c.size <= (1 << 24) && c.ranks_stride > 0 &&
            c.ranks_first >= 0 && !m->groups[g].members &&
            (int64_t)c.ranks_first + (int64_t)(c.size - 1) * c.ranks_stride <= FR_MAX_RANK) {
            int *mem = fb__malloc((size_t)c.size * sizeof *mem);
            if (!mem)
                goto oom;
            for (int k = 0; k < c.size; k++)
                mem[k] = c.ranks_first + k * c.ranks_stride;
            rc = fb__fr_model_group_members(m, g, mem, c.size);
            free(mem);
            if (rc)
                goto oom;
        } else if (c.size > 0 && c.size <= (1 << 24)) {
            fb__fr_model_group_members(m, g, NULL, c.size);
        }
        if (c.rank >= 0 && (c.size <= 0 || c.rank < c.size) &&
            fb__fr_rank_member(m, r, (uint32_t)g, c.rank))
            goto oom;
    }

    uint64_t head = atomic_load_explicit(&((fb__seg_header *)h)->fr_head,
                                         memory_order_acquire);
    uint64_t first = head > ring_slots ? head - ring_slots : 0; /* clamp */
    r->wrapped = first > 0;
    if (r->wrapped)
        fb__fr_model_warn(m, "rank %d: ring wrapped, %" PRIu64 " older events "
                      "overwritten (%s)", rank, first, path);
    int last_g = -1;
    uint64_t last_id = 0, last_dkey = UINT64_MAX;
    uint32_t last_dt = 0;
    for (uint64_t idx = first; idx < head; idx++) {
        fb__fr_event e;
        if (!fb__fr_read_event(ring, ring_slots, idx, &e)) {
            r->torn++;
            continue;
        }
        if (last_g < 0 || e.comm_id != last_id) {
            last_g = group_of(m, e.comm_id, NULL);
            if (last_g < 0)
                goto oom;
            last_id = e.comm_id;
            if (e.comm_size > 0 && e.comm_size <= (1 << 24))
                fb__fr_model_group_members(m, last_g, NULL, e.comm_size);
            if (e.comm_rank >= 0 &&
                fb__fr_rank_member(m, r, (uint32_t)last_g, e.comm_rank))
                goto oom;
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
            if (fb__fr_model_intern(m, dt, &last_dt))
                goto oom;
            last_dkey = dkey;
        }
        fb__fr_ent x = {
            .seq = e.coll_seq,
            .t_ns = e.begin_mono_ns + wall_off,
            .in_numel = (int64_t)(e.count & INT64_MAX),
            .out_numel = (int64_t)(e.out_count & INT64_MAX),
            .group = (uint32_t)last_g,
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
            char raw[FB__FR_SITE_FILE_MAX + 1], file[FB__FR_SITE_FILE_MAX + 1],
                site[FB__FR_SITE_FILE_MAX + 16];
            memcpy(raw, e.site_file, FB__FR_SITE_FILE_MAX);
            raw[FB__FR_SITE_FILE_MAX] = '\0';
            fb__safe_text(file, sizeof file, raw); /* printed by the analyzer */
            snprintf(site, sizeof site, "%s:%u", file[0] ? file : "?", e.site_line);
            if (fb__fr_model_intern(m, site, &x.frame))
                goto oom;
        }
        if (fb__fr_rank_push(r, &x))
            goto oom;
    }
    if (r->torn)
        fb__fr_model_warn(m, "rank %d: %d events were being rewritten while read "
                      "(%s)", rank, r->torn, path);
    fb__seg_close(seg);
    return 0;
oom:
    fb__seg_close(seg);
    snprintf(err, errsz, "%s: out of memory", path);
    return -ENOMEM;
}
