/*
 * train_mlp.c -- fb-train-mlp: a deterministic data-parallel trainer over
 * MPI, the example workload firebreak's demo and tests run.
 *
 * The model is a character-level MLP language model (Bengio et al. 2003):
 * the previous CONTEXT bytes of a text file are embedded (EMBED floats
 * each), concatenated, passed through one tanh hidden layer and a softmax
 * over the bytes that occur in the file.  Adam trains it.  Each rank reads
 * its own contiguous shard of the text with its own random stream, the
 * ranks sum their gradients with MPI_Allreduce, and every rank applies the
 * same update to its replica of the weights.
 *
 * The point of the program is that a run killed and restarted from a
 * checkpoint, any number of times, ends with weights bit-identical to a
 * run that was never interrupted (docs/examples.md):
 *   - everything that defines the state is registered with the checkpoint
 *     engine: weights, both Adam moments, Adam's step count, each rank's
 *     RNG state and data cursor, the loss statistics;
 *   - every computation is sequential, in a fixed order, in one thread;
 *   - gradients are reduced in 64-bit fixed point (MPI_INT64_T, MPI_SUM):
 *     integer addition is associative, so the sum is the same bits whatever
 *     algorithm or order the MPI library picks for the reduction.
 *
 * After every optimizer step it calls fb_sdc_check: the weights and Adam's
 * moments are replicas, and the supervisor compares their hashes across
 * ranks (docs/sdc.md) to catch silent data corruption.
 *
 * It uses libfirebreak's public API only: fb_init, fb_ckpt_*, fb_sdc_*,
 * fb_step.
 */
#include <firebreak/firebreak.h>

#include <errno.h>
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ex_util.h"

#define CONTEXT 8        /* bytes of context                       */
#define EMBED 16         /* embedding width per byte               */
#define IN (CONTEXT * EMBED)
#define MAX_TEXT_BYTES (64u << 20)
#define FIRST_STEPS 10   /* steps averaged for the "start" loss    */

/* Gradients travel as integers in units of 2^-GRAD_FRAC_BITS. */
#define GRAD_FRAC_BITS 32
#define GRAD_CLAMP 1.0e6

typedef struct {
    const char *data_path;
    const char *ckpt_dir;
    const char *hash_out;
    long long steps, ckpt_every, ckpt_keep, batch, seed, hidden, sleep_ms, log_every;
    double lr;
} options;

/* The model's parameters live in one contiguous array (so Adam, the
 * gradient reduction and the hash see one buffer); each tensor is a view
 * at an offset, registered with the checkpoint engine under its name. */
enum { P_EMB, P_W1, P_B1, P_W2, P_B2, P_COUNT };
static const char *const param_names[P_COUNT] = {"emb", "w1", "b1", "w2", "b2"};

typedef struct {
    int vocab, hidden;
    size_t off[P_COUNT], len[P_COUNT];
    int ndim[P_COUNT];
    int64_t shape[P_COUNT][2];
    size_t n;               /* total parameters */
    float *w, *m, *v;       /* weights, Adam first and second moments */
    float *grad;            /* this step's gradient (local, then global) */
    int64_t *qgrad, *qsum;  /* fixed-point gradient + loss, and their sum */
} model;

typedef struct {
    uint64_t adam_step[1];
    uint64_t rng[1];        /* this rank's splitmix64 state           */
    uint64_t cursor[1];     /* this rank's position in its shard      */
    uint64_t world[1];      /* the world size that wrote the state    */
    double loss_stats[3];   /* sum of first steps' loss, their count, EMA */
} train_state;

static int mpi_rank, mpi_size;

static void die(const char *fmt, const char *detail)
{
    fprintf(stderr, "fb-train-mlp: rank %d: ", mpi_rank);
    fprintf(stderr, fmt, detail);
    fputc('\n', stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

static void usage(FILE *f)
{
    fprintf(f,
"usage: fb-train-mlp [options]   (run under mpirun, or `firebreak run`)\n"
"A character-level MLP language model trained data-parallel over MPI.\n"
"  --data FILE        text to learn (default /usr/share/common-licenses/GPL-3)\n"
"  --steps N          optimizer steps (default 300)\n"
"  --ckpt-every N     save a checkpoint every N steps, 0 never (default 50)\n"
"  --ckpt-dir DIR     checkpoint directory when not under the supervisor\n"
"                     (default under it: $FIREBREAK_RUN_DIR/checkpoints)\n"
"  --batch N          examples per rank per step (default 64)\n"
"  --seed N           seed of the weights and of every rank's stream (default 1)\n"
"  --hidden N         hidden units (default 256)\n"
"  --lr X             Adam learning rate (default 0.003)\n"
"  --sleep-ms N       extra sleep per step, to make runs longer (default 0)\n"
"  --ckpt-keep N      newest checkpoints kept (default 0: the engine's, 2)\n"
"  --log-every N      print the loss every N steps on rank 0 (default 25)\n"
"  --hash-out FILE    where to write the final weights hash\n"
"                     (default $FIREBREAK_RUN_DIR/final_hash when set)\n"
"Prints final_hash=<16 hex digits> (FNV-1a 64 of all weight bytes).\n"
"Exit: 0 done, 1 failure, 2 usage error.\n");
}

static int parse_options(int argc, char **argv, options *o)
{
    *o = (options){
        .data_path = "/usr/share/common-licenses/GPL-3",
        .steps = 300, .ckpt_every = 50, .ckpt_keep = 0, .batch = 64, .seed = 1,
        .hidden = 256, .sleep_ms = 0, .log_every = 25, .lr = 3e-3,
    };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 1;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "fb-train-mlp: unknown option or missing value: %s\n", a);
            return -1;
        }
        const char *val = argv[++i];
        int rc = 0;
        if (!strcmp(a, "--data"))
            o->data_path = val;
        else if (!strcmp(a, "--ckpt-dir"))
            o->ckpt_dir = val;
        else if (!strcmp(a, "--hash-out"))
            o->hash_out = val;
        else if (!strcmp(a, "--steps"))
            rc = ex_parse_ll(a, val, 1, 1000000000, &o->steps);
        else if (!strcmp(a, "--ckpt-every"))
            rc = ex_parse_ll(a, val, 0, 1000000000, &o->ckpt_every);
        else if (!strcmp(a, "--ckpt-keep"))
            rc = ex_parse_ll(a, val, 0, 1000000, &o->ckpt_keep);
        else if (!strcmp(a, "--batch"))
            rc = ex_parse_ll(a, val, 1, 65536, &o->batch);
        else if (!strcmp(a, "--seed"))
            rc = ex_parse_ll(a, val, 0, INT64_MAX, &o->seed);
        else if (!strcmp(a, "--hidden"))
            rc = ex_parse_ll(a, val, 1, 65536, &o->hidden);
        else if (!strcmp(a, "--sleep-ms"))
            rc = ex_parse_ll(a, val, 0, 3600000, &o->sleep_ms);
        else if (!strcmp(a, "--log-every"))
            rc = ex_parse_ll(a, val, 1, 1000000000, &o->log_every);
        else if (!strcmp(a, "--lr"))
            rc = ex_parse_double(a, val, 1e-9, 10.0, &o->lr);
        else {
            fprintf(stderr, "fb-train-mlp: unknown option %s (see --help)\n", a);
            return -1;
        }
        if (rc)
            return -1;
    }
    return 0;
}

/* ---- data ------------------------------------------------------------ */

typedef struct {
    uint8_t *tok;           /* the text as vocabulary indices */
    size_t n;
    int vocab;
    size_t shard_start, shard_len; /* this rank's windows start here */
} corpus;

static void load_corpus(const char *path, corpus *c)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        char msg[4200];
        snprintf(msg, sizeof msg, "%s: %s", path, strerror(errno));
        die("cannot open --data %s", msg);
    }
    c->tok = malloc(MAX_TEXT_BYTES);
    if (!c->tok)
        die("%s", "out of memory");
    c->n = fread(c->tok, 1, MAX_TEXT_BYTES, f);
    fclose(f);
    if (c->n < 4 * (CONTEXT + 1) * (size_t)mpi_size)
        die("--data %s is too short for this many ranks", path);
    /* The vocabulary: the bytes that occur, in byte order. */
    int map[256], seen[256] = {0};
    for (size_t i = 0; i < c->n; i++)
        seen[c->tok[i]] = 1;
    c->vocab = 0;
    for (int b = 0; b < 256; b++)
        map[b] = seen[b] ? c->vocab++ : -1;
    for (size_t i = 0; i < c->n; i++)
        c->tok[i] = (uint8_t)map[c->tok[i]];
    /* Each rank owns a contiguous shard of window starts. */
    size_t windows = c->n - CONTEXT;
    c->shard_start = windows * (size_t)mpi_rank / (size_t)mpi_size;
    c->shard_len = windows * (size_t)(mpi_rank + 1) / (size_t)mpi_size - c->shard_start;
}

/* The next training window of this rank: advance the cursor by a random
 * stride of 1..8 bytes through its shard, wrapping around. */
static size_t next_window(const corpus *c, train_state *st)
{
    uint64_t stride = 1 + ex_splitmix64(&st->rng[0]) % 8;
    st->cursor[0] = (st->cursor[0] + stride) % c->shard_len;
    return c->shard_start + st->cursor[0];
}

/* ---- model ----------------------------------------------------------- */

static void model_init(model *mo, int vocab, int hidden, uint64_t seed)
{
    mo->vocab = vocab;
    mo->hidden = hidden;
    size_t len[P_COUNT] = {
        [P_EMB] = (size_t)vocab * EMBED, [P_W1] = (size_t)IN * hidden,
        [P_B1] = (size_t)hidden, [P_W2] = (size_t)hidden * vocab,
        [P_B2] = (size_t)vocab,
    };
    int64_t shape[P_COUNT][2] = {
        [P_EMB] = {vocab, EMBED}, [P_W1] = {IN, hidden}, [P_B1] = {hidden, 0},
        [P_W2] = {hidden, vocab}, [P_B2] = {vocab, 0},
    };
    mo->n = 0;
    for (int p = 0; p < P_COUNT; p++) {
        mo->off[p] = mo->n;
        mo->len[p] = len[p];
        mo->ndim[p] = shape[p][1] ? 2 : 1;
        mo->shape[p][0] = shape[p][0];
        mo->shape[p][1] = shape[p][1];
        mo->n += len[p];
    }
    mo->w = calloc(mo->n, sizeof(float));
    mo->m = calloc(mo->n, sizeof(float));
    mo->v = calloc(mo->n, sizeof(float));
    mo->grad = calloc(mo->n, sizeof(float));
    mo->qgrad = calloc(mo->n + 1, sizeof(int64_t));
    mo->qsum = calloc(mo->n + 1, sizeof(int64_t));
    if (!mo->w || !mo->m || !mo->v || !mo->grad || !mo->qgrad || !mo->qsum)
        die("%s", "out of memory");
    /* Same seed on every rank: the replicas start identical. */
    uint64_t s = seed ^ 0x5eed5eed5eedull;
    double scale[P_COUNT] = {
        [P_EMB] = 1.0, [P_W1] = 1.0 / sqrt((double)IN),
        [P_B1] = 0.0, [P_W2] = 1.0 / sqrt((double)hidden), [P_B2] = 0.0,
    };
    for (int p = 0; p < P_COUNT; p++)
        for (size_t i = 0; i < mo->len[p]; i++) {
            double u = (double)(ex_splitmix64(&s) >> 11) * 0x1p-53; /* [0,1) */
            mo->w[mo->off[p] + i] = (float)((2.0 * u - 1.0) * scale[p]);
        }
}

/* Forward and backward pass of one example; accumulates the gradient of
 * the loss times `gscale` into mo->grad and returns the loss. */
static double example_grad(const model *mo, const uint8_t *ctx, int target,
                           float gscale, float *x, float *h, float *logits,
                           float *dh)
{
    const int H = mo->hidden, V = mo->vocab;
    const float *emb = mo->w + mo->off[P_EMB], *w1 = mo->w + mo->off[P_W1],
                *b1 = mo->w + mo->off[P_B1], *w2 = mo->w + mo->off[P_W2],
                *b2 = mo->w + mo->off[P_B2];
    float *gemb = mo->grad + mo->off[P_EMB], *gw1 = mo->grad + mo->off[P_W1],
          *gb1 = mo->grad + mo->off[P_B1], *gw2 = mo->grad + mo->off[P_W2],
          *gb2 = mo->grad + mo->off[P_B2];

    for (int c = 0; c < CONTEXT; c++)
        memcpy(x + c * EMBED, emb + (size_t)ctx[c] * EMBED, EMBED * sizeof(float));
    memcpy(h, b1, (size_t)H * sizeof(float));
    for (int i = 0; i < IN; i++) {
        const float xi = x[i], *row = w1 + (size_t)i * H;
        for (int j = 0; j < H; j++)
            h[j] += xi * row[j];
    }
    for (int j = 0; j < H; j++)
        h[j] = tanhf(h[j]);
    memcpy(logits, b2, (size_t)V * sizeof(float));
    for (int j = 0; j < H; j++) {
        const float hj = h[j], *row = w2 + (size_t)j * V;
        for (int k = 0; k < V; k++)
            logits[k] += hj * row[k];
    }
    float mx = logits[0];
    for (int k = 1; k < V; k++)
        mx = logits[k] > mx ? logits[k] : mx;
    double sum = 0.0;
    for (int k = 0; k < V; k++) {
        logits[k] = expf(logits[k] - mx);
        sum += logits[k];
    }
    double loss = -(log((double)logits[target] / sum));
    /* dlogits = (softmax - onehot) * gscale, kept in `logits`. */
    const float inv = (float)(1.0 / sum);
    for (int k = 0; k < V; k++)
        logits[k] = logits[k] * inv * gscale;
    logits[target] -= gscale;

    for (int k = 0; k < V; k++)
        gb2[k] += logits[k];
    for (int j = 0; j < H; j++) {
        const float hj = h[j], *row = w2 + (size_t)j * V;
        float *grow = gw2 + (size_t)j * V, acc = 0.0f;
        for (int k = 0; k < V; k++) {
            grow[k] += hj * logits[k];
            acc += row[k] * logits[k];
        }
        dh[j] = acc * (1.0f - hj * hj);
    }
    for (int j = 0; j < H; j++)
        gb1[j] += dh[j];
    for (int i = 0; i < IN; i++) {
        const float xi = x[i], *row = w1 + (size_t)i * H;
        float *grow = gw1 + (size_t)i * H, acc = 0.0f;
        for (int j = 0; j < H; j++) {
            grow[j] += xi * dh[j];
            acc += row[j] * dh[j];
        }
        gemb[(size_t)ctx[i / EMBED] * EMBED + (size_t)(i % EMBED)] += acc;
    }
    return loss;
}

static int64_t to_fixed(double g)
{
    if (!(g > -GRAD_CLAMP)) /* also catches NaN */
        g = -GRAD_CLAMP;
    if (g > GRAD_CLAMP)
        g = GRAD_CLAMP;
    return (int64_t)llrint(g * 0x1p32);
}

/* One optimizer step; returns the global mean loss. */
static double train_step(model *mo, const corpus *c, train_state *st,
                         long long batch, double lr, float *scratch)
{
    const int H = mo->hidden, V = mo->vocab;
    float *x = scratch, *h = x + IN, *logits = h + H, *dh = logits + V;
    const float gscale = (float)(1.0 / ((double)batch * mpi_size));

    memset(mo->grad, 0, mo->n * sizeof(float));
    double loss_sum = 0.0;
    for (long long b = 0; b < batch; b++) {
        size_t at = next_window(c, st);
        loss_sum += example_grad(mo, c->tok + at, c->tok[at + CONTEXT], gscale,
                                 x, h, logits, dh);
    }
    /* Sum gradients (already scaled to the global mean) and the loss across
     * ranks in fixed point: the same bits whatever the reduction order. */
    for (size_t i = 0; i < mo->n; i++)
        mo->qgrad[i] = to_fixed(mo->grad[i]);
    mo->qgrad[mo->n] = to_fixed(loss_sum);
    int rc = MPI_Allreduce(mo->qgrad, mo->qsum, (int)(mo->n + 1), MPI_INT64_T,
                           MPI_SUM, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS)
        die("%s", "MPI_Allreduce of the gradients failed");

    /* Adam. */
    const double b1 = 0.9, b2 = 0.999, eps = 1e-8;
    uint64_t t = ++st->adam_step[0];
    const double c1 = 1.0 - pow(b1, (double)t), c2 = 1.0 - pow(b2, (double)t);
    const float step_size = (float)(lr / c1), inv_c2 = (float)(1.0 / c2);
    for (size_t i = 0; i < mo->n; i++) {
        const float g = (float)((double)mo->qsum[i] * 0x1p-32);
        mo->m[i] = (float)b1 * mo->m[i] + (float)(1.0 - b1) * g;
        mo->v[i] = (float)b2 * mo->v[i] + (float)(1.0 - b2) * g * g;
        mo->w[i] -= step_size * mo->m[i] / (sqrtf(mo->v[i] * inv_c2) + (float)eps);
    }
    return (double)mo->qsum[mo->n] * 0x1p-32 / ((double)batch * mpi_size);
}

static uint64_t weights_hash(const model *mo)
{
    return ex_fnv1a64(EX_FNV_OFFSET, mo->w, mo->n * sizeof(float));
}

/* ---- checkpoint ------------------------------------------------------ */

static void reg(fb_ckpt *ck, const char *name, fb_dtype dt, int ndim,
                const int64_t *shape, void *data)
{
    int rc = fb_ckpt_register(ck, name, dt, ndim, shape, data);
    if (rc) {
        fprintf(stderr, "fb-train-mlp: rank %d: cannot register tensor %s: %s\n",
                mpi_rank, name, fb_strerror(rc));
        MPI_Abort(MPI_COMM_WORLD, 1);
        exit(1);
    }
}

/* The replicated tensors -- weights and both Adam moments, every one the
 * same on every rank -- by name: fn(arg, name, parameter index, data). */
static void each_replica(model *mo, void (*fn)(void *, const char *, int, float *),
                         void *arg)
{
    char name[64];
    float *bufs[3] = {mo->w, mo->m, mo->v};
    const char *prefix[3] = {"", "adam.m.", "adam.v."};
    for (int b = 0; b < 3; b++)
        for (int p = 0; p < P_COUNT; p++) {
            snprintf(name, sizeof name, "%s%s", prefix[b], param_names[p]);
            fn(arg, name, p, bufs[b] + mo->off[p]);
        }
}

typedef struct {
    fb_ckpt *ck;
    model *mo;
} reg_arg;

static void reg_replica(void *arg, const char *name, int p, float *data)
{
    reg_arg *a = arg;
    reg(a->ck, name, FB_DTYPE_F32, a->mo->ndim[p], a->mo->shape[p], data);
}

static void register_state(fb_ckpt *ck, model *mo, train_state *st)
{
    reg_arg a = {ck, mo};
    each_replica(mo, reg_replica, &a);
    const int64_t one[1] = {1}, three[1] = {3};
    reg(ck, "adam.step", FB_DTYPE_U64, 1, one, st->adam_step);
    reg(ck, "rng.state", FB_DTYPE_U64, 1, one, st->rng);
    reg(ck, "data.cursor", FB_DTYPE_U64, 1, one, st->cursor);
    reg(ck, "run.world_size", FB_DTYPE_U64, 1, one, st->world);
    reg(ck, "loss.stats", FB_DTYPE_F64, 1, three, st->loss_stats);
}

/* The SDC check hashes the replicated state (the RNG, cursor and loss
 * statistics are per rank and stay out). */
static void sdc_replica(void *arg, const char *name, int p, float *data)
{
    model *mo = arg;
    int rc = fb_sdc_register(name, data, mo->len[p] * sizeof(float));
    if (rc)
        die("cannot register a tensor for the SDC check: %s", fb_strerror(rc));
}

/* Restore the newest checkpoint; every rank must land on the same step.
 * Returns the step to continue after (0: fresh start). */
static uint64_t restore(fb_ckpt *ck, train_state *st)
{
    uint64_t step = 0;
    int rc = fb_ckpt_restore(ck, &step);
    if (rc == FB_ENOCKPT)
        step = 0;
    else if (rc)
        die("cannot restore a checkpoint: %s", fb_strerror(rc));
    else if (st->world[0] != (uint64_t)mpi_size) {
        fprintf(stderr, "fb-train-mlp: rank %d: checkpoint step %llu was "
                "written by %llu ranks, this run has %d: the shards, the data "
                "and the global batch would differ\n", mpi_rank,
                (unsigned long long)step, (unsigned long long)st->world[0],
                mpi_size);
        MPI_Abort(MPI_COMM_WORLD, 1);
    } else if (st->adam_step[0] != step) {
        fprintf(stderr, "fb-train-mlp: rank %d: checkpoint step %llu holds "
                "adam.step %llu\n", mpi_rank, (unsigned long long)step,
                (unsigned long long)st->adam_step[0]);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    uint64_t lo, hi;
    MPI_Allreduce(&step, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&step, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    if (lo != hi) {
        if (mpi_rank == 0)
            fprintf(stderr, "fb-train-mlp: ranks restored different steps "
                    "(%llu to %llu); refusing to train on mixed state\n",
                    (unsigned long long)lo, (unsigned long long)hi);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return step;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &mpi_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &mpi_size);

    options o;
    int prc = parse_options(argc, argv, &o);
    if (prc) {
        MPI_Finalize();
        return prc > 0 ? 0 : 2;
    }
    int rc = fb_init();
    if (rc && mpi_rank == 0)
        fprintf(stderr, "fb-train-mlp: fb_init: %s (going on unrecorded)\n",
                fb_strerror(rc));

    corpus c;
    load_corpus(o.data_path, &c);
    model mo;
    model_init(&mo, c.vocab, (int)o.hidden, (uint64_t)o.seed);
    train_state st = {.world = {(uint64_t)mpi_size}};
    /* Each rank its own stream, derived from the seed and its rank. */
    st.rng[0] = ex_fnv1a64((uint64_t)o.seed, &mpi_rank, sizeof mpi_rank);

    fb_ckpt *ck = NULL;
    const char *run_dir = fb_run_dir();
    if (run_dir || o.ckpt_dir) {
        fb_ckpt_options co;
        fb_ckpt_options_init(&co);
        co.dir = run_dir ? NULL : o.ckpt_dir;
        co.rank = mpi_rank;
        co.world_size = mpi_size;
        if (o.ckpt_keep)
            co.keep = (int)o.ckpt_keep;
        rc = fb_ckpt_open(&ck, &co);
        if (rc)
            die("cannot open the checkpoint directory: %s", fb_strerror(rc));
        register_state(ck, &mo, &st);
    } else if (mpi_rank == 0) {
        fprintf(stderr, "fb-train-mlp: no run directory and no --ckpt-dir: "
                "training without checkpoints\n");
    }
    uint64_t start = ck ? restore(ck, &st) : 0;
    each_replica(&mo, sdc_replica, &mo);
    if (mpi_rank == 0) {
        printf("fb-train-mlp: %d ranks, vocab %d, %zu parameters, batch %lld x %d, "
               "%s step %llu\n", mpi_size, c.vocab, mo.n, o.batch, mpi_size,
               start ? "resuming after" : "starting at",
               (unsigned long long)start);
        fflush(stdout);
    }

    float *scratch = malloc(((size_t)IN + 2 * (size_t)o.hidden + (size_t)c.vocab) *
                            sizeof(float));
    if (!scratch)
        die("%s", "out of memory");
    double t0 = ex_now_s();
    for (uint64_t step = start + 1; step <= (uint64_t)o.steps; step++) {
        double loss = train_step(&mo, &c, &st, o.batch, o.lr, scratch);
        if (st.loss_stats[1] < FIRST_STEPS) {
            st.loss_stats[0] += loss;
            st.loss_stats[1] += 1;
        }
        st.loss_stats[2] = step == 1 ? loss : 0.9 * st.loss_stats[2] + 0.1 * loss;
        ex_sleep_ms(o.sleep_ms);
        fb_step(step);
        fb_sdc_check(step);
        if (mpi_rank == 0 && (step % (uint64_t)o.log_every == 0 || step == 1)) {
            printf("step %llu/%lld loss %.4f (avg %.4f) %.1f steps/s\n",
                   (unsigned long long)step, o.steps, loss, st.loss_stats[2],
                   (double)(step - start) / (ex_now_s() - t0));
            fflush(stdout);
        }
        if (ck && o.ckpt_every && step % (uint64_t)o.ckpt_every == 0) {
            rc = fb_ckpt_save(ck, step);
            if (rc && rc != FB_EBUSY)
                die("checkpoint save failed: %s", fb_strerror(rc));
        }
    }
    if (ck && (rc = fb_ckpt_wait(ck)) != 0)
        die("checkpoint save failed: %s", fb_strerror(rc));

    /* Data parallelism keeps the replicas identical; check it. */
    uint64_t hash = weights_hash(&mo), lo, hi;
    MPI_Allreduce(&hash, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&hash, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    int status = 0;
    if (lo != hi) {
        if (mpi_rank == 0)
            fprintf(stderr, "fb-train-mlp: the ranks' weights differ at the end\n");
        status = 1;
    }
    if (mpi_rank == 0 && !status) {
        double first = st.loss_stats[1] > 0 ? st.loss_stats[0] / st.loss_stats[1] : 0;
        double last = st.loss_stats[2];
        printf("loss %.4f (mean of first %d steps) -> %.4f (average at step %lld): "
               "%s by %.0f%%\n", first, (int)st.loss_stats[1], last, o.steps,
               last < first ? "fell" : "rose",
               first > 0 ? fabs(first - last) / first * 100.0 : 0.0);
        printf("final_hash=%016llx\n", (unsigned long long)hash);
        fflush(stdout);
        char path[4096];
        const char *out = o.hash_out;
        const char *rd = run_dir ? run_dir : getenv("FIREBREAK_RUN_DIR");
        if (!out && rd && *rd) {
            snprintf(path, sizeof path, "%s/final_hash", rd);
            out = path;
        }
        if (out && ex_write_hash(out, hash))
            status = 1;
    }
    if (ck)
        fb_ckpt_close(ck);
    fb_finalize();
    free(scratch);
    free(mo.w), free(mo.m), free(mo.v), free(mo.grad), free(mo.qgrad), free(mo.qsum);
    free(c.tok);
    MPI_Finalize();
    return status;
}
