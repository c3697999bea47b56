/*
 * model.h -- the analyzer's merged view of every rank's flight recorder,
 * whatever the source (firebreak ring, PyTorch JSON or pickle dump).
 * Loaders (load_ring.c, load_torch.c) fill it; analyze.c reads it.
 *
 * Entries are compact (the analysis of 16,384 ranks x 2,000 entries keeps
 * 32 M of them) and hold interned indices instead of strings.
 */
#ifndef FB_FR_MODEL_H
#define FB_FR_MODEL_H

#include <stddef.h>
#include <stdint.h>

enum { FR_SRC_RING = 1, FR_SRC_TORCH_JSON = 2, FR_SRC_TORCH_PICKLE = 3 };
enum { FR_PENDING_SCHEDULED = 0, FR_PENDING_STARTED = 1, FR_DONE = 2 };
/* Largest rank number the analyzer accepts (16 M ranks). */
#define FR_MAX_RANK (1 << 24)

#define FR_ENT_P2P 1u
#define FR_ENT_VARIABLE 2u /* sizes differ across ranks by design */

typedef struct fb__fr_ent {
    uint64_t seq;          /* collective seq, or p2p seq (FR_ENT_P2P)    */
    uint64_t t_ns;         /* wall-clock entry time, 0 unknown           */
    int64_t in_numel;      /* -1 unknown                                 */
    int64_t out_numel;
    uint32_t group;        /* index into fb__fr_model.groups                 */
    uint32_t dtype;        /* interned string index, 0 unknown           */
    int32_t peer;          /* root / peer as a group rank, -1 none       */
    uint32_t pair_seq;     /* p2p: n-th op with this peer, this way; 0 ? */
    uint32_t frame;        /* interned "file:line name" of the caller, 0 */
    uint16_t op;           /* fb_op                                      */
    uint8_t state;         /* FR_PENDING_* / FR_DONE                      */
    uint8_t flags;
} fb__fr_ent;

typedef struct fb__fr_rank {
    int rank;              /* global rank                                */
    int src;               /* FR_SRC_*                                   */
    char *path;
    char *version;         /* format version as the dump states it       */
    fb__fr_ent *ents;          /* in recording order                         */
    size_t n, cap;
    uint64_t snapshot_ns;  /* wall time the evidence was taken            */
    int wrapped;           /* older entries were overwritten / dropped    */
    int64_t step;          /* firebreak: last completed step, -1 unknown */
    int torn;              /* firebreak: slots skipped while rewritten   */
    char host[64];         /* firebreak: the host it ran on (its segment's
                            * identity; control bytes '?'), "" unknown     */
    struct fb__fr_memb { uint32_t group; int32_t grank; } *memb;
    size_t nmemb, cap_memb; /* groups this rank says it belongs to       */
} fb__fr_rank;

typedef struct fb__fr_group {
    char *key;             /* comm id "0x..." or PyTorch pg name          */
    char *name;            /* description, may be ""                      */
    int size;              /* members, 0 unknown                          */
    int *members;          /* global ranks by group rank; NULL unknown    */
    size_t member_of;      /* 1 + index in fb__fr_model.ranks of the last rank
                            * recorded as a member (fb__fr_rank_member), 0   */
} fb__fr_group;

typedef struct fb__fr_model {
    int world_max;         /* fb__fr_options.world_max                    */
    fb__fr_rank *ranks;
    size_t nranks, cap_ranks;
    fb__fr_group *groups;
    size_t ngroups, cap_groups;
    void *group_index;     /* key -> index (analyze.c's string table)    */
    char **strs;           /* interned strings; 0 is ""                   */
    size_t nstrs, cap_strs;
    void *str_index;
    char **warnings;
    size_t nwarnings, cap_warnings;
    size_t where_warning;      /* 1 + the index of the warning that says
                                  where a directory's dumps are; 0 none */
    int world_size;        /* largest world size a source stated, 0 ?    */
    int oom;               /* an allocation failed in a function that has
                            * no error return (warnings, group members):
                            * the model is not whole, the analysis fails */
} fb__fr_model;

/* 0 or -ENOMEM (then m->oom is set; fb__fr_model_free still applies). */
int fb__fr_model_init(fb__fr_model *m);
void fb__fr_model_free(fb__fr_model *m);
fb__fr_rank *fb__fr_model_add_rank(fb__fr_model *m, int rank, int src, const char *path);
int fb__fr_rank_push(fb__fr_rank *r, const fb__fr_ent *e);
/* Note that rank r (the rank a loader is reading, the last one added) is
 * member `grank` of group g; again for the same group is a no-op.  O(1):
 * a dump may describe 100,000 groups. */
int fb__fr_rank_member(fb__fr_model *m, fb__fr_rank *r, uint32_t g, int grank);
/* Whether r was recorded as a member of g (r: the last rank added). */
int fb__fr_rank_in_group(const fb__fr_model *m, const fb__fr_rank *r, uint32_t g);
/* Group by key; created on first use.  Returns its index or -1 (ENOMEM). */
int fb__fr_model_group(fb__fr_model *m, const char *key, const char *name);
/* Set a group's members (copied) when not yet known.  0 or -ENOMEM
 * (m->oom is set too). */
int fb__fr_model_group_members(fb__fr_model *m, int g, const int *members, int size);
/* The index of string s in m->strs (0 is ""), interned on first use, in
 * *idx.  0 or -ENOMEM. */
int fb__fr_model_intern(fb__fr_model *m, const char *s, uint32_t *idx);
/* A warning for the result; one that cannot be stored sets m->oom. */
void fb__fr_model_warn(fb__fr_model *m, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Loaders.  Each returns 0, or a negative code with a message naming the
 * file and the field in err; a warning only goes to m->warnings. */
int fb__fr_load_ring(fb__fr_model *m, const char *path, char *err, size_t errsz);
/* A ring in two steps, for loading many at once (load_ring.c):
 * fb__fr_ring_read copies and checks one file without the model (any
 * thread; on error the stage is empty), fb__fr_ring_commit adds it to the
 * model (one thread, files in order: the result is the one
 * fb__fr_load_ring gives, which is read + commit).  The stage is freed
 * with fb__fr_ring_stage_free either way. */
typedef struct fb__fr_stage_op {
    uint64_t comm_id;      /* a group, when str is NULL                  */
    char *str;             /* a string to intern                         */
    int32_t size, grank;   /* the group's size and this rank's, as seen  */
} fb__fr_stage_op;

typedef struct fb__fr_ring_stage {
    int rank, world_size, torn;
    int64_t step;
    uint64_t snapshot_ns, wrapped_from;
    char host[64], version[32];
    struct fb__fr_comm_rec *comms; /* consistent records, names cleaned */
    uint32_t ncomms;
    fb__fr_stage_op *ops;  /* the model calls, in order                  */
    size_t nops, cap_ops;
    fb__fr_ent *ents;      /* group, dtype: op index; frame: op index + 1 */
    size_t n;
} fb__fr_ring_stage;

int fb__fr_ring_read(fb__fr_ring_stage *s, const char *path, char *err, size_t errsz);
int fb__fr_ring_commit(fb__fr_model *m, fb__fr_ring_stage *s, const char *path,
                       char *err, size_t errsz);
void fb__fr_ring_stage_free(fb__fr_ring_stage *s);
/* A PyTorch dump (JSON or pickle), detected from its first bytes.
 * `rank_hint` is the file name's trailing number, -1 when none. */
int fb__fr_load_torch(fb__fr_model *m, const char *path, const void *data, size_t len,
                  int rank_hint, char *err, size_t errsz);

#endif
