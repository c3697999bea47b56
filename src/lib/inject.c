/*
 * inject.c -- fault injection (docs/inject.md).
 *
 * A spec is a ';'-separated list of faults, each KIND:key=value,...
 *
 *     kill:rank=1,step=40            SIGKILL rank 1 when it completes step 40
 *     hang:rank=2,step=120           rank 2 stops making progress
 *     exit:rank=3,step=200,code=3    rank 3 exits with code 3
 *     slow:rank=0,step=10,factor=3   rank 0 runs 3x slower from step 10
 *     segv:rank=0,step=5             rank 0 raises SIGSEGV
 *     corrupt:rank=1,step=90         flip a byte in rank 1's newest shard
 *     flip:rank=1,step=30,tensor=w1  flip a bit in rank 1's replica of w1
 *     kill:rank=1,after=3s           the supervisor kills rank 1 3 s after
 *                                    launch (works for unmodified programs)
 *
 * `attempt=N` (default 0) picks the attempt the fault fires in; `attempt=any`
 * fires in every attempt (a crash loop).  `rank=*` means every rank.
 * In-process faults (step=) fire inside fb_step(); supervisor-side ones
 * (after=) are delivered as signals by `firebreak run`: SIGKILL, SIGSTOP
 * for a hang, SIGSEGV.  Before an in-process fault fires the rank records
 * it in its segment: the supervisor keeps that as evidence.
 */
#include "lib/lib.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckpt/store.h"
#include "common/util.h"

static const char *const kind_names[] = {
    [FB__INJECT_NONE] = "none", [FB__INJECT_KILL] = "kill",
    [FB__INJECT_HANG] = "hang", [FB__INJECT_EXIT] = "exit",
    [FB__INJECT_SLOW] = "slow", [FB__INJECT_SEGV] = "segv",
    [FB__INJECT_CORRUPT_CKPT] = "corrupt", [FB__INJECT_FLIP] = "flip",
};

const char *fb__inject_kind_name(fb__inject_kind kind)
{
    if ((unsigned)kind < sizeof kind_names / sizeof kind_names[0])
        return kind_names[kind];
    return "?";
}

/* Each key at most once: "rank=1,rank=2" is a typo, not a choice.
 * `seen` holds the keys met so far in one fault. */
static int seen_twice(const char *key, unsigned *seen)
{
    static const char *const keys[] = {"rank", "attempt", "step", "after",
                                       "code", "factor", "tensor"};
    for (unsigned i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        if (strcmp(key, keys[i]))
            continue;
        if (*seen & (1u << i))
            return 1;
        *seen |= 1u << i;
    }
    return 0;
}

static int parse_one(char *item, fb__inject_fault *f, char *err, size_t es)
{
    memset(f, 0, sizeof *f);
    f->rank = -2; /* required */
    f->attempt = 0;
    f->code = 1;
    f->factor = 2.0;
    char *colon = strchr(item, ':');
    if (colon)
        *colon = '\0';
    for (int k = 1; k < (int)(sizeof kind_names / sizeof kind_names[0]); k++)
        if (strcmp(item, kind_names[k]) == 0)
            f->kind = (fb__inject_kind)k;
    if (f->kind == FB__INJECT_NONE) {
        snprintf(err, es, "unknown fault kind '%s' (kill, hang, exit, slow, "
                 "segv, corrupt, flip)", item);
        return -EINVAL;
    }
    unsigned seen = 0;
    char *save = NULL;
    for (char *kv = colon ? strtok_r(colon + 1, ",", &save) : NULL; kv;
         kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '=');
        if (!eq) {
            snprintf(err, es, "'%s' in fault '%s' is not key=value", kv, item);
            return -EINVAL;
        }
        *eq = '\0';
        const char *k = kv, *v = eq + 1;
        long long x;
        if (seen_twice(k, &seen)) {
            snprintf(err, es, "key '%s' given twice in fault '%s'", k, item);
            return -EINVAL;
        }
        if (!strcmp(k, "rank")) {
            if (!strcmp(v, "*"))
                f->rank = -1;
            else if (fb__parse_int(v, 0, INT_MAX, &x) == 0)
                f->rank = (int)x;
            else
                goto bad;
        } else if (!strcmp(k, "attempt")) {
            if (!strcmp(v, "any") || !strcmp(v, "*"))
                f->attempt = -1;
            else if (fb__parse_int(v, 0, INT_MAX, &x) == 0)
                f->attempt = (int)x;
            else
                goto bad;
        } else if (!strcmp(k, "step")) {
            if (fb__parse_int(v, 0, LLONG_MAX, &x))
                goto bad;
            f->has_step = 1;
            f->step = (uint64_t)x;
        } else if (!strcmp(k, "after")) {
            if (fb__parse_duration_in(v, 0, FB__INJECT_AFTER_MAX_S, &f->after_s))
                goto bad;
            f->has_after = 1;
        } else if (!strcmp(k, "code")) {
            if (fb__parse_int(v, 0, 255, &x))
                goto bad;
            f->code = (int)x;
        } else if (!strcmp(k, "factor")) {
            char *end;
            f->factor = strtod(v, &end);
            if (*end || !(f->factor >= 1.0 && f->factor <= 1000.0))
                goto bad;
        } else if (!strcmp(k, "tensor") && f->kind == FB__INJECT_FLIP) {
            if (!v[0] || fb__fmt(f->tensor, sizeof f->tensor, "%s", v))
                goto bad;
        } else {
            snprintf(err, es, "unknown key '%s' in fault '%s' (rank, step, "
                     "after, attempt, code, factor; tensor for flip)", k, item);
            return -EINVAL;
        }
        continue;
    bad:
        snprintf(err, es, "bad value '%s' for '%s' in fault '%s'", v, k, item);
        return -EINVAL;
    }
    if (f->rank == -2) {
        snprintf(err, es, "fault '%s' needs rank=N (or rank=*)", item);
        return -EINVAL;
    }
    if (f->has_step == f->has_after) {
        snprintf(err, es, "fault '%s' needs exactly one of step=N or after=DURATION",
                 item);
        return -EINVAL;
    }
    if (f->has_after && f->kind != FB__INJECT_KILL && f->kind != FB__INJECT_HANG &&
        f->kind != FB__INJECT_SEGV) {
        snprintf(err, es, "fault '%s': after= works for kill, hang and segv "
                 "(delivered as signals); use step= for the others", item);
        return -EINVAL;
    }
    return 0;
}

int fb__inject_parse(const char *spec, fb__inject_plan *plan, char *err,
                     size_t err_size)
{
    memset(plan, 0, sizeof *plan);
    if (err_size)
        err[0] = '\0';
    char buf[2048];
    if (fb__fmt(buf, sizeof buf, "%s", spec)) {
        snprintf(err, err_size, "fault spec too long");
        return -EINVAL;
    }
    char *save = NULL;
    for (char *item = strtok_r(buf, ";", &save); item;
         item = strtok_r(NULL, ";", &save)) {
        while (*item == ' ')
            item++;
        if (!*item)
            continue;
        if (plan->count == FB__INJECT_MAX) {
            snprintf(err, err_size, "more than %d faults", FB__INJECT_MAX);
            return -EINVAL;
        }
        int rc = parse_one(item, &plan->faults[plan->count], err, err_size);
        if (rc)
            return rc;
        plan->count++;
    }
    if (plan->count == 0) {
        snprintf(err, err_size, "empty fault spec");
        return -EINVAL;
    }
    return 0;
}

int fb__inject_check_job(const fb__inject_plan *plan, int world,
                         int max_restarts, char *err, size_t err_size)
{
    for (int i = 0; i < plan->count; i++) {
        const fb__inject_fault *f = &plan->faults[i];
        if (max_restarts >= 0 && f->attempt > max_restarts) {
            snprintf(err, err_size, "fault %d (%s:attempt=%d) names attempt %d, "
                     "but --max-restarts %d allows attempts 0..%d: it would "
                     "never fire", i + 1, fb__inject_kind_name(f->kind),
                     f->attempt, f->attempt, max_restarts, max_restarts);
            return -EINVAL;
        }
        if (f->rank < world)
            continue;
        snprintf(err, err_size, "fault %d (%s:rank=%d) names rank %d, but the "
                 "job has %d rank%s (0..%d): it would never fire", i + 1,
                 fb__inject_kind_name(f->kind), f->rank, f->rank, world,
                 world == 1 ? "" : "s", world - 1);
        return -EINVAL;
    }
    return 0;
}

static fb__inject_plan armed;
static double slow_factor;
static uint64_t slow_from_step;
static int slow_on;
static uint64_t slow_last_sleep_ns;

void fb__inject_arm(const fb__inject_plan *plan, int rank, int attempt)
{
    memset(&armed, 0, sizeof armed);
    for (int i = 0; i < plan->count; i++) {
        const fb__inject_fault *f = &plan->faults[i];
        if (!f->has_step)
            continue; /* supervisor-side */
        if (f->rank != -1 && f->rank != rank)
            continue;
        if (f->attempt != -1 && f->attempt != attempt)
            continue;
        armed.faults[armed.count++] = *f;
    }
    fb__inject_armed = armed.count > 0;
}

static void record(const fb__inject_fault *f, uint64_t step)
{
    fb__seg *seg = fb__lib_seg();
    fb__seg_header *h = fb__seg_hdr(seg);
    char text[128];
    snprintf(text, sizeof text, "%s:rank=%d,step=%llu%s%s", fb__inject_kind_name(f->kind),
             fb_rank(), (unsigned long long)step, f->tensor[0] ? ",tensor=" : "",
             f->tensor);
    if (h) {
        atomic_store_explicit(&h->inject_code, f->code, memory_order_relaxed);
        atomic_store_explicit(&h->inject_step, step, memory_order_relaxed);
        atomic_store_explicit(&h->inject_mono_ns, fb__now_ns(), memory_order_relaxed);
        atomic_store_explicit(&h->inject_kind, (uint32_t)f->kind,
                              memory_order_release);
    }
    fb__lib_report(FB__REPORT_INJECT, (int32_t)f->kind, step, 0, 0, 0, text);
    fprintf(stderr, "firebreak: injecting fault %s\n", text);
}

/* Flip one byte in the data section of this rank's newest shard: in node
 * memory when the supervisor gave a memory tier (the copy a restore reads
 * first, src/ckpt/tier.h), else in the checkpoint directory.  The layout
 * of the checkpoint directory is src/ckpt/store.h's to know. */
static void corrupt_newest_shard(void)
{
    /* An asynchronous save still being written would not be the newest
     * shard yet: the fault would hit an older step than it means to, and
     * on a loaded host the restore would never meet it. */
    fb__ckpt_wait_open_saves();
    const char *mem = fb__getenv("FIREBREAK_CKPT_MEM_DIR");
    const char *dir = mem && *mem ? mem : fb__lib_ckpt_dir();
    if (!dir)
        return;
    fb__ckpt_entry *e = NULL;
    size_t n = 0;
    if (fb__ckpt_scan(dir, fb_world_size(), 0, &e, &n))
        return;
    char path[PATH_MAX];
    int found = 0;
    struct stat st;
    for (size_t i = 0; i < n && !found; i++)     /* newest first */
        found = !fb__ckpt_shard_path(path, sizeof path, dir, e[i].step, fb_rank()) &&
                lstat(path, &st) == 0;
    free(e);
    if (!found)
        return;
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return;
    if (fstat(fd, &st) == 0 && st.st_size > 16) {
        off_t off = st.st_size - 1 - (st.st_size / 7 % 8);
        unsigned char b;
        if (pread(fd, &b, 1, off) == 1) {
            b ^= 0x5a;
            if (pwrite(fd, &b, 1, off) == 1) {
                fsync(fd);
                fprintf(stderr, "firebreak: corrupted byte %lld of %s\n",
                        (long long)off, path);
            }
        }
    }
    close(fd);
}

void fb__inject_step(uint64_t step, uint64_t step_ns)
{
    if (slow_on && step >= slow_from_step && step_ns > 0) {
        /* step_ns includes the previous sleep: slow the real work only. */
        uint64_t work = step_ns > slow_last_sleep_ns ? step_ns - slow_last_sleep_ns
                                                     : step_ns;
        uint64_t ns = (uint64_t)((slow_factor - 1.0) * (double)work);
        struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000ull),
                              .tv_nsec = (long)(ns % 1000000000ull)};
        nanosleep(&ts, NULL);
        slow_last_sleep_ns = ns;
    }
    for (int i = 0; i < armed.count; i++) {
        fb__inject_fault *f = &armed.faults[i];
        if (f->fired || f->step != step)
            continue;
        f->fired = 1;
        record(f, step);
        switch (f->kind) {
        case FB__INJECT_KILL:
            raise(SIGKILL);
            break;
        case FB__INJECT_SEGV:
            raise(SIGSEGV);
            break;
        case FB__INJECT_EXIT:
            exit(f->code);
        case FB__INJECT_HANG:
            for (;;)
                pause();
        case FB__INJECT_SLOW:
            slow_on = 1;
            slow_factor = f->factor;
            slow_from_step = step;
            break;
        case FB__INJECT_CORRUPT_CKPT:
            corrupt_newest_shard();
            break;
        case FB__INJECT_FLIP: {
            char hit[FB__SEG_SDC_NAME_MAX];
            if (fb__sdc_flip(f->tensor, hit, sizeof hit))
                fprintf(stderr, "firebreak: flip: no tensor %s registered for "
                        "the SDC check: nothing flipped\n",
                        f->tensor[0] ? f->tensor : "at all");
            else
                fprintf(stderr, "firebreak: flipped a bit of tensor %s\n", hit);
            break;
        }
        default:
            break;
        }
    }
}
