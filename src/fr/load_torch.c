/*
 * load_torch.c -- PyTorch flight-recorder dumps (c10d FlightRecorder,
 * versions 2.2 to 2.10; REFERENCE §4) into the analyzer's model.
 *
 * The format is detected from the content: '{' starts JSON, anything else
 * is read as a pickle.  Both become the same DOM (json.h), read here.
 * Fields of the wrong type make the entry (or field) be skipped with a
 * warning naming it; a dump we cannot read at all is an error naming the
 * file.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/alloc.h"
#include "common/json.h"
#include "firebreak/firebreak.h"
#include "fr/model.h"
#include "fr/pickle.h"

#define MAX_RANKS_IN_PG (1 << 24)

static int as_int(const fb__json *v, int64_t *out)
{
    if (!v)
        return -1;
    if (v->type == FB_JSON_BOOL) {
        *out = v->boolean;
        return 0;
    }
    if (fb__json_as_i64(v, out) == 0)
        return 0;
    double d;
    if (fb__json_as_double(v, &d) == 0 && d >= -9e18 && d <= 9e18) {
        *out = (int64_t)d;
        return 0;
    }
    return -1;
}

static const fb__json *member(const fb__json *obj, const char *key)
{
    return fb__json_get(obj, key);
}

static int add_rank(int **r, int *n, size_t *cap, int64_t x)
{
    if (x < 0 || x > FR_MAX_RANK || *n >= MAX_RANKS_IN_PG)
        return -1;
    if ((size_t)*n == *cap) {
        int *nr = fb__realloc(*r, *cap * 2 * sizeof *nr);
        if (!nr)
            return -ENOMEM;
        *r = nr;
        *cap *= 2;
    }
    (*r)[(*n)++] = (int)x;
    return 0;
}

/* "[0, 1, 2]" or a list of ints -> malloc'd array.  0, -ENOMEM, or -1
 * (not a rank list). */
static int parse_ranks(const fb__json *v, int **out, int *n)
{
    int rc = -1;
    *out = NULL;
    *n = 0;
    if (!v)
        return -1;
    size_t cap = 16;
    int *r = fb__malloc(cap * sizeof *r);
    if (!r)
        return -ENOMEM;
    if (v->type == FB_JSON_ARRAY) {
        for (const fb__json *c = v->child; c; c = c->next) {
            int64_t x;
            if (as_int(c, &x) || (rc = add_rank(&r, n, &cap, x)))
                goto bad;
        }
    } else if (v->type == FB_JSON_STRING) {
        const char *s = v->str;
        while (*s) {
            while (*s && (*s < '0' || *s > '9'))
                s++;
            if (!*s)
                break;
            char *e;
            unsigned long long x = strtoull(s, &e, 10);
            if ((rc = add_rank(&r, n, &cap, x > INT32_MAX ? -1 : (int64_t)x)))
                goto bad;
            s = e;
        }
    } else {
        goto bad;
    }
    *out = r;
    return 0;
bad:
    free(r);
    *n = 0;
    return rc == -ENOMEM ? -ENOMEM : -1;
}

/* Sum over tensors of the product of dims; -1 when unreadable. */
static int64_t numel(const fb__json *sizes)
{
    if (!sizes || sizes->type != FB_JSON_ARRAY)
        return -1;
    int64_t total = 0;
    for (const fb__json *t = sizes->child; t; t = t->next) {
        if (t->type != FB_JSON_ARRAY)
            return -1;
        int64_t p = 1;
        for (const fb__json *d = t->child; d; d = d->next) {
            int64_t x;
            if (as_int(d, &x) || x < 0)
                return -1;
            if (x && p > INT64_MAX / x)
                p = INT64_MAX;
            else
                p *= x;
        }
        total = (total > INT64_MAX - p) ? INT64_MAX : total + p;
    }
    return total;
}

static const struct { const char *name; fb_op op; } op_map[] = {
    {"all_reduce", FB_OP_ALLREDUCE}, {"allreduce", FB_OP_ALLREDUCE},
    {"allreduce_coalesced", FB_OP_ALLREDUCE},
    {"all_reduce_coalesced", FB_OP_ALLREDUCE},
    {"broadcast", FB_OP_BROADCAST}, {"reduce", FB_OP_REDUCE},
    {"all_gather", FB_OP_ALLGATHER}, {"allgather", FB_OP_ALLGATHER},
    {"_allgather_base", FB_OP_ALLGATHER},
    {"all_gather_into_tensor_coalesced", FB_OP_ALLGATHER},
    {"allgather_into_tensor_coalesced", FB_OP_ALLGATHER},
    {"reduce_scatter", FB_OP_REDUCE_SCATTER},
    {"_reduce_scatter_base", FB_OP_REDUCE_SCATTER},
    {"reduce_scatter_tensor_coalesced", FB_OP_REDUCE_SCATTER},
    {"all_to_all", FB_OP_ALLTOALL}, {"alltoall", FB_OP_ALLTOALL},
    {"alltoall_base", FB_OP_ALLTOALL}, {"all_to_all_single", FB_OP_ALLTOALL},
    {"barrier", FB_OP_BARRIER}, {"gather", FB_OP_GATHER},
    {"scatter", FB_OP_SCATTER}, {"send", FB_OP_SEND}, {"recv", FB_OP_RECV},
    {"coalesced", FB_OP_COALESCED}, {"scan", FB_OP_SCAN},
};

/* "nccl:send 1->2" -> send, peer 2; "nccl:recv 3<-0" -> recv, peer 0. */
static fb_op parse_name(const char *pn, int *peer)
{
    *peer = -1;
    const char *colon = strchr(pn, ':');
    const char *s = colon ? colon + 1 : pn;
    size_t n = strcspn(s, " ");
    for (size_t i = 0; i < sizeof op_map / sizeof op_map[0]; i++) {
        if (strlen(op_map[i].name) != n || strncmp(s, op_map[i].name, n))
            continue;
        fb_op op = op_map[i].op;
        if (op == FB_OP_SEND || op == FB_OP_RECV) {
            const char *arrow = strstr(s, op == FB_OP_SEND ? "->" : "<-");
            if (arrow) {
                char *e;
                long x = strtol(arrow + 2, &e, 10);
                if (e != arrow + 2 && x >= 0 && x < INT32_MAX)
                    *peer = (int)x;
            }
        }
        return op;
    }
    return FB_OP_UNKNOWN;
}

static const char *str_or(const fb__json *v, const char *def)
{
    const char *s = fb__json_as_str(v);
    return s ? s : def;
}

/* The fields of one entry, found in one pass over its members. */
enum { F_PG, F_PGID, F_PN, F_STATE, F_ISP2P, F_CSEQ, F_PSEQ, F_RID, F_TIME,
       F_INDT, F_INSZ, F_OUTSZ, F_FRAMES, F_RETIRED, F_N };
static const char *const field_names[F_N] = {
    "process_group", "pg_id", "profiling_name", "state", "is_p2p",
    "collective_seq_id", "p2p_seq_id", "record_id", "time_created_ns",
    "input_dtypes", "input_sizes", "output_sizes", "frames", "retired",
};

static void fields(const fb__json *e, const fb__json *f[F_N])
{
    for (int i = 0; i < F_N; i++)
        f[i] = NULL;
    for (const fb__json *c = e->child; c; c = c->next)
        for (int i = 0; i < F_N; i++)
            if (!f[i] && c->key_len == strlen(field_names[i]) &&
                !memcmp(c->key, field_names[i], c->key_len)) {
                f[i] = c;
                break;
            }
}

/* p2p pair counters: (group, peer, direction) -> ops so far, in a hash
 * table (open addressing, at most half full; n == 0 is an empty slot): a
 * rank may talk to thousands of peers, and a list made that quadratic. */
typedef struct pairc { uint32_t g; int peer, send; uint32_t n; } pairc;
typedef struct pairtab { pairc *slot; size_t cap, used; } pairtab;

static size_t pair_hash(uint32_t g, int peer, int send, size_t cap)
{
    uint64_t x = ((uint64_t)g << 33) ^ ((uint64_t)(uint32_t)peer << 1) ^
                 (uint64_t)(send != 0);
    x *= 0x9e3779b97f4a7c15ull;
    return (size_t)(x >> 20) & (cap - 1);
}

static int pair_grow(pairtab *t)
{
    size_t nc = t->cap ? t->cap * 2 : 64;
    pairc *ns = fb__calloc(nc, sizeof *ns);
    if (!ns)
        return -ENOMEM;
    for (size_t i = 0; i < t->cap; i++) {
        const pairc *p = &t->slot[i];
        if (!p->n)
            continue;
        size_t j = pair_hash(p->g, p->peer, p->send, nc);
        while (ns[j].n)
            j = (j + 1) & (nc - 1);
        ns[j] = *p;
    }
    free(t->slot);
    t->slot = ns;
    t->cap = nc;
    return 0;
}

/* The n-th op of this rank with `peer` in this direction (0 past 2^32-1)
 * in *n.  0 or -ENOMEM. */
static int next_pair(pairtab *t, uint32_t g, int peer, int send, uint32_t *n)
{
    if ((t->used + 1) * 2 > t->cap && pair_grow(t))
        return -ENOMEM;
    size_t j = pair_hash(g, peer, send, t->cap);
    for (; t->slot[j].n; j = (j + 1) & (t->cap - 1)) {
        pairc *p = &t->slot[j];
        if (p->g == g && p->peer == peer && p->send == send) {
            *n = p->n == UINT32_MAX ? 0 : ++p->n;
            return 0;
        }
    }
    t->slot[j] = (pairc){g, peer, send, 1};
    t->used++;
    *n = 1;
    return 0;
}

/* Whether a frame's file is PyTorch's own: a "torch/" directory right
 * under site-packages or dist-packages (an installed wheel), or a path
 * that starts with "torch/" (frames of a source build, relative). */
static int inside_torch(const char *file)
{
    if (!strncmp(file, "torch/", 6))
        return 1;
    return strstr(file, "site-packages/torch/") || strstr(file, "dist-packages/torch/");
}

/* The frame that names the caller: the first one (innermost) whose file
 * is not inside torch -- PyTorch's first frames are its own collective
 * wrappers (distributed_c10d.py, c10d_logger.py) -- else the first.
 * NULL when there is none.  Looks at the first 64 frames. */
static const fb__json *caller_frame(const fb__json *frames)
{
    if (!frames || frames->type != FB_JSON_ARRAY)
        return NULL;
    const fb__json *first = NULL;
    int n = 0;
    for (const fb__json *f = frames->child; f && n < 64; f = f->next, n++) {
        if (f->type != FB_JSON_OBJECT)
            continue;
        if (!first)
            first = f;
        const char *file = fb__json_as_str(member(f, "filename"));
        if (file && !inside_torch(file))
            return f;
    }
    return first;
}

/* Group g takes the members of the dump's one unnamed pg_config group. */
static int adopt_unnamed(fb__fr_model *m, fb__fr_rank *r, int g, const int *rk, int n,
                         const char *path)
{
    for (int i = 0; i < n; i++)
        if (rk[i] == r->rank) {
            if (fb__fr_model_group_members(m, g, rk, n) ||
                fb__fr_rank_member(m, r, (uint32_t)g, i))
                return -ENOMEM;
            fb__fr_model_warn(m, "rank %d: pg_config has no group '%s' but one group "
                          "with an empty name; read as that group (%s)", r->rank,
                          m->groups[g].key, path);
            return 0;
        }
    return 0;
}

static int load_dom(fb__fr_model *m, const char *path, const fb__json *root, int src,
                    int rank_hint, char *err, size_t errsz)
{
    if (!root || root->type != FB_JSON_OBJECT) {
        snprintf(err, errsz, "%s: top level is not a dict/object", path);
        return FB_EFORMAT;
    }
    const char *version = fb__json_as_str(member(root, "version"));
    int64_t rank = -1;
    if (as_int(member(root, "rank"), &rank) || rank < 0 || rank > FR_MAX_RANK)
        rank = rank_hint;
    if (rank > FR_MAX_RANK) {
        snprintf(err, errsz, "%s: rank %" PRId64 " is over the limit of %d",
                 path, rank, FR_MAX_RANK);
        return FB_ETOOBIG;
    }
    if (rank < 0) {
        snprintf(err, errsz, "%s: no rank in the dump and none at the end of the "
                 "file name (PyTorch names dumps <prefix><rank>)", path);
        return FB_EFORMAT;
    }
    const fb__json *entries = member(root, "entries");
    if (!version && !entries) {
        snprintf(err, errsz, "%s: neither 'version' nor 'entries': not a PyTorch "
                 "flight-recorder dump", path);
        return FB_EFORMAT;
    }
    fb__fr_rank *r = fb__fr_model_add_rank(m, (int)rank, src, path);
    if (!r)
        return -ENOMEM;
    r->version = fb__strdup(version ? version : "?");
    if (!r->version)
        return -ENOMEM;
    struct stat st;
    if (stat(path, &st) == 0)
        r->snapshot_ns = (uint64_t)st.st_mtim.tv_sec * 1000000000ull +
                         (uint64_t)st.st_mtim.tv_nsec;
    if (!version) {
        fb__fr_model_warn(m, "rank %d: no 'version' field (%s); reading it as 2.x",
                      (int)rank, path);
    } else {
        int maj = 0, min = 0;
        if (sscanf(version, "%d.%d", &maj, &min) != 2 || maj != 2)
            fb__fr_model_warn(m, "rank %d: dump version '%s' is not 2.x (%s); "
                          "reading the fields it shares", (int)rank, version, path);
        else if (min > 10)
            fb__fr_model_warn(m, "rank %d: dump version %s is newer than 2.10 (%s); "
                          "reading the fields it shares", (int)rank, version, path);
        else if (min < 2)
            fb__fr_model_warn(m, "rank %d: dump version %s is older than 2.2 (%s)",
                          (int)rank, version, path);
    }

    /* ProcessGroupGloo (torch 2.9 to 2.15) files its group in pg_config
     * under an empty name, while its entries name the group by id ("0").
     * An entry can never name "", so a dump's only unnamed group stands for
     * the first group its entries name that pg_config does not describe. */
    int *unnamed = NULL, nunnamed = 0, unnamed_count = 0;
    const fb__json *pgc = member(root, "pg_config");
    if (pgc && pgc->type == FB_JSON_OBJECT) {
        for (const fb__json *pg = pgc->child; pg; pg = pg->next) {
            char key[256];
            snprintf(key, sizeof key, "%.*s", (int)(pg->key_len < 255 ? pg->key_len : 255),
                     pg->key ? pg->key : "");
            if (!key[0]) {
                free(unnamed);
                unnamed = NULL;
                nunnamed = 0;
                int prc = ++unnamed_count == 1
                              ? parse_ranks(member(pg, "ranks"), &unnamed, &nunnamed)
                              : -1;
                if (prc == -ENOMEM)
                    return -ENOMEM;
                if (prc || !nunnamed) {
                    free(unnamed);
                    unnamed = NULL;
                    nunnamed = 0;
                }
                continue;
            }
            const char *desc = str_or(member(pg, "desc"), "");
            int g = fb__fr_model_group(m, key, desc);
            if (g < 0) {
                free(unnamed);
                return -ENOMEM;
            }
            int *rk = NULL, n = 0;
            int prc = parse_ranks(member(pg, "ranks"), &rk, &n);
            if (prc == -ENOMEM) {
                free(unnamed);
                return -ENOMEM;
            }
            if (prc == 0 && n > 0) {
                int mrc = fb__fr_model_group_members(m, g, rk, n);
                for (int i = 0; i < n && !mrc; i++)
                    if (rk[i] == rank)
                        mrc = fb__fr_rank_member(m, r, (uint32_t)g, i);
                if (mrc) {
                    free(rk);
                    free(unnamed);
                    return mrc;
                }
            } else if (member(pg, "ranks")) {
                fb__fr_model_warn(m, "rank %d: pg_config[%s].ranks is not a rank list "
                              "(%s)", (int)rank, key, path);
            }
            free(rk);
        }
    } else if (pgc) {
        fb__fr_model_warn(m, "rank %d: pg_config is not a dict (%s)", (int)rank, path);
    }

    if (!entries) {
        fb__fr_model_warn(m, "rank %d: no 'entries' (%s)", (int)rank, path);
        free(unnamed);
        return 0;
    }
    if (entries->type != FB_JSON_ARRAY) {
        fb__fr_model_warn(m, "rank %d: 'entries' is not a list (%s)", (int)rank, path);
        free(unnamed);
        return 0;
    }
    pairtab pairs = {0};
    size_t idx = 0, skipped = 0;
    int64_t min_record = -1;
    int rc = 0;
    for (const fb__json *e = entries->child; e; e = e->next, idx++) {
        if (e->type != FB_JSON_OBJECT) {
            if (!skipped++)
                fb__fr_model_warn(m, "rank %d: entries[%zu] is not a dict (%s)",
                              (int)rank, idx, path);
            continue;
        }
        const fb__json *F[F_N];
        fields(e, F);
        const fb__json *pgv = F[F_PG];
        char gkey[256] = "";
        const char *gdesc = "";
        if (pgv && pgv->type == FB_JSON_ARRAY && pgv->child &&
            fb__json_as_str(pgv->child)) {
            snprintf(gkey, sizeof gkey, "%s", pgv->child->str);
            if (pgv->child->next)
                gdesc = str_or(pgv->child->next, "");
        } else {
            int64_t pid;
            if (!as_int(F[F_PGID], &pid))
                snprintf(gkey, sizeof gkey, "%" PRId64, pid);
        }
        const char *pn = fb__json_as_str(F[F_PN]);
        const char *state = fb__json_as_str(F[F_STATE]);
        if (!gkey[0] || !pn) {
            if (!skipped++)
                fb__fr_model_warn(m, "rank %d: entries[%zu] lacks %s or has the wrong "
                              "type (%s); such entries are skipped", (int)rank, idx,
                              !gkey[0] ? "process_group/pg_id" : "profiling_name",
                              path);
            continue;
        }
        int peer;
        fb_op op = parse_name(pn, &peer);
        int64_t is_p2p = 0;
        if (as_int(F[F_ISP2P], &is_p2p))
            is_p2p = op == FB_OP_SEND || op == FB_OP_RECV;
        int64_t seq = 0;
        if (as_int((is_p2p ? F[F_PSEQ] : F[F_CSEQ]), &seq) ||
            seq < 0) {
            if (!skipped++)
                fb__fr_model_warn(m, "rank %d: entries[%zu].%s is missing or not an "
                              "integer (%s); such entries are skipped", (int)rank,
                              idx, is_p2p ? "p2p_seq_id" : "collective_seq_id", path);
            continue;
        }
        int64_t rid;
        if (!as_int(F[F_RID], &rid) && (min_record < 0 || rid < min_record))
            min_record = rid;
        int g = fb__fr_model_group(m, gkey, gdesc);
        if (g < 0) {
            rc = -ENOMEM;
            break;
        }
        if (unnamed && !fb__fr_rank_in_group(m, r, (uint32_t)g)) {
            rc = adopt_unnamed(m, r, g, unnamed, nunnamed, path);
            free(unnamed); /* for the first such group only */
            unnamed = NULL;
            if (rc)
                break;
        }
        int64_t t = 0;
        as_int(F[F_TIME], &t);
        const fb__json *dts = F[F_INDT];
        const char *dt = (dts && dts->type == FB_JSON_ARRAY && dts->child)
                             ? str_or(dts->child, "") : "";
        const fb__json *f0 = caller_frame(F[F_FRAMES]);
        uint32_t frame = 0;
        if (f0) {
            int64_t ln = 0;
            as_int(member(f0, "line"), &ln);
            char buf[512];
            snprintf(buf, sizeof buf, "%s:%" PRId64 " %s",
                     str_or(member(f0, "filename"), "?"), ln,
                     str_or(member(f0, "name"), "?"));
            if (fb__fr_model_intern(m, buf, &frame)) {
                rc = -ENOMEM;
                break;
            }
        }
        uint32_t dtype;
        if (fb__fr_model_intern(m, dt, &dtype)) {
            rc = -ENOMEM;
            break;
        }
        fb__fr_ent x = {
            .seq = (uint64_t)seq,
            .t_ns = t > 0 ? (uint64_t)t : 0,
            .in_numel = numel(F[F_INSZ]),
            .out_numel = numel(F[F_OUTSZ]),
            .group = (uint32_t)g,
            .dtype = dtype,
            .peer = peer,
            .op = (uint16_t)op,
            .state = state && !strcmp(state, "completed") ? FR_DONE
                     : state && !strcmp(state, "started") ? FR_PENDING_STARTED
                                                          : FR_PENDING_SCHEDULED,
            .flags = is_p2p ? FR_ENT_P2P : 0,
            .frame = frame,
        };
        /* gloo never updates `state` past "scheduled": `retired` (set
         * when the work finished) is what tells a completed entry. */
        int64_t retired = 0;
        if (!as_int(F[F_RETIRED], &retired) && retired)
            x.state = FR_DONE;
        if (op == FB_OP_COALESCED || op == FB_OP_UNKNOWN)
            x.flags |= FR_ENT_VARIABLE;
        if ((is_p2p && peer >= 0 &&
             next_pair(&pairs, (uint32_t)g, peer, op == FB_OP_SEND, &x.pair_seq)) ||
            fb__fr_rank_push(r, &x)) {
            rc = -ENOMEM;
            break;
        }
    }
    free(pairs.slot);
    free(unnamed);
    if (skipped > 1)
        fb__fr_model_warn(m, "rank %d: %zu entries skipped in all (%s)", (int)rank,
                      skipped, path);
    if (min_record > 0) {
        r->wrapped = 1;
        fb__fr_model_warn(m, "rank %d: the dump starts at record_id %" PRId64 ": "
                      "older entries were dropped from PyTorch's ring (%s)",
                      (int)rank, min_record, path);
    }
    if (rc)
        snprintf(err, errsz, "%s: out of memory", path);
    return rc;
}

int fb__fr_load_torch(fb__fr_model *m, const char *path, const void *data, size_t len,
                  int rank_hint, char *err, size_t errsz)
{
    const unsigned char *p = data;
    size_t i = 0;
    while (i < len && (p[i] == ' ' || p[i] == '\n' || p[i] == '\r' || p[i] == '\t'))
        i++;
    char perr[256];
    if (i < len && p[i] == '{') {
        fb__json_doc *doc = NULL;
        fb__json_limits lim = {.max_input = (size_t)1 << 30, .max_depth = 64,
                               .max_nodes = 50000000};
        int rc = fb__json_parse(data, len, &lim, &doc, perr, sizeof perr);
        if (rc) {
            snprintf(err, errsz, "%s: JSON: %s", path, perr);
            return rc;
        }
        rc = load_dom(m, path, fb__json_root(doc), FR_SRC_TORCH_JSON, rank_hint,
                      err, errsz);
        fb__json_free(doc);
        return rc;
    }
    if (len == 0 || (p[0] != 0x80 && p[0] != '(' && p[0] != '}' && p[0] != ']')) {
        snprintf(err, errsz, "%s: not a firebreak ring, a JSON dump or a pickle",
                 path);
        return FB_EFORMAT;
    }
    fb__pickle_doc *doc = NULL;
    int rc = fb__pickle_parse(data, len, NULL, &doc, perr, sizeof perr);
    if (rc) {
        snprintf(err, errsz, "%s: %s", path, perr);
        return rc;
    }
    if (fb__pickle_unknown_calls(doc))
        fb__fr_model_warn(m, "%s: %zu objects of unknown classes were read as null",
                      path, fb__pickle_unknown_calls(doc));
    rc = load_dom(m, path, fb__pickle_root(doc), FR_SRC_TORCH_PICKLE, rank_hint,
                  err, errsz);
    fb__pickle_free(doc);
    return rc;
}
