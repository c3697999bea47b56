/*
 * test_sdc.c -- the rank's side of the SDC check (src/lib/sdc.c,
 * docs/sdc.md), attached to a real segment and read back with the
 * supervisor's reader:
 *
 *  - the rotation: slice-sized pieces that never cross a tensor, start at
 *    multiples of the slice, cover every byte once per rotation, come
 *    round again at the same offsets, and stop at a whole rotation;
 *  - every tensor whole, flagged FB__SDC_FULL, on multiples of full_every;
 *  - the hash is the checkpoints' hash of the piece's bytes, so a flipped
 *    bit changes exactly the pieces that hold it;
 *  - FIREBREAK_SDC_SLICE / FIREBREAK_SDC_FULL_EVERY override
 *    fb_sdc_configure; bad registrations are refused.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../check.h"
#include "ckpt/hash.h"
#include "lib/lib.h"
#include "lib/segment.h"

static fb__seg *reader;
static uint64_t next_idx;

/* The records published since the last call, into out (at most max). */
static int drain(fb__seg_sdc *out, int max)
{
    int n = 0;
    fb__seg_sdc rec;
    while (n < max && fb__seg_read_sdc(reader, next_idx, &rec) == 1) {
        out[n++] = rec;
        next_idx++;
    }
    return n;
}

int main(void)
{
    char job[64], name[FB__SEG_NAME_MAX];
    snprintf(job, sizeof job, "sdctest-%d", (int)getpid());
    setenv("FIREBREAK_JOB_ID", job, 1);
    setenv("FIREBREAK_RANK", "0", 1);
    setenv("FIREBREAK_WORLD_SIZE", "1", 1);
    unsetenv("FIREBREAK_SDC_SLICE");
    unsetenv("FIREBREAK_SDC_FULL_EVERY");
    unsetenv("FIREBREAK_INJECT");
    CHECK_RC(fb_init(), 0);
    fb__seg_name(name, sizeof name, job, 0, 0);
    CHECK_RC(fb__seg_open(&reader, name), 0);
    if (!reader)
        return 1;

    /* Three tensors: 10000, 3000 and 100 bytes. */
    static unsigned char a[10000], b[3000], c[100];
    for (size_t i = 0; i < sizeof a; i++)
        a[i] = (unsigned char)(i * 7);
    memset(b, 3, sizeof b);
    CHECK_RC(fb_sdc_register("a", a, sizeof a), 0);
    CHECK_RC(fb_sdc_register("b", b, sizeof b), 0);
    CHECK_RC(fb_sdc_register("c", c, sizeof c), 0);
    CHECK_RC(fb_sdc_register("b", c, sizeof c), -EINVAL);  /* duplicate */
    CHECK_RC(fb_sdc_register("", c, sizeof c), -EINVAL);
    CHECK_RC(fb_sdc_register("x", NULL, 8), -EINVAL);
    CHECK_RC(fb_sdc_configure(4096, 10), 0);

    /* Rotation: step 1: a[0,4096); 2: a[4096,8192); 3: a[8192,10000) +
     * b[0,3000) (1808 + 3000 >= 4096: stops); 4: c, then round to a[0..). */
    fb__seg_sdc r[64];
    struct { uint64_t step; uint32_t t; uint64_t off, len; } want[] = {
        {1, 0, 0, 4096}, {2, 0, 4096, 4096}, {3, 0, 8192, 1808},
        {3, 1, 0, 3000}, {4, 2, 0, 100}, {4, 0, 0, 4096},
    };
    for (uint64_t s = 1; s <= 4; s++)
        CHECK_RC(fb_sdc_check(s), 0);
    int n = drain(r, 64);
    CHECK_EQ_INT(n, 6);
    for (int i = 0; i < n && i < 6; i++) {
        CHECK_EQ_U64(r[i].step, want[i].step);
        CHECK_EQ_INT(r[i].tensor, want[i].t);
        CHECK_EQ_U64(r[i].offset, want[i].off);
        CHECK_EQ_U64(r[i].length, want[i].len);
        CHECK_EQ_INT(r[i].flags, 0);
        const unsigned char *base = want[i].t == 0 ? a : want[i].t == 1 ? b : c;
        CHECK_EQ_U64(r[i].hash, fb__hash(fb__hash_default(), base + want[i].off,
                                         want[i].len));
    }
    CHECK_EQ_STR(r[3].name, "b");

    /* A flipped bit: the piece holding it hashes differently next round;
     * the others do not. */
    uint64_t before = r[1].hash;
    char hit[FB__SEG_SDC_NAME_MAX];
    CHECK_RC(fb__sdc_flip("a", hit, sizeof hit), 0); /* a[5000]: 2nd piece */
    CHECK_EQ_STR(hit, "a");
    CHECK_RC(fb__sdc_flip("nope", hit, sizeof hit), -ENOENT);
    CHECK_RC(fb_sdc_check(5), 0);
    n = drain(r, 64);
    CHECK(n == 1 && r[0].offset == 4096 && r[0].hash != before);

    /* Step 10: every tensor whole, flagged. */
    CHECK_RC(fb_sdc_check(10), 0);
    n = drain(r, 64);
    CHECK_EQ_INT(n, 3);
    for (int i = 0; i < n; i++) {
        CHECK_EQ_INT(r[i].flags, FB__SDC_FULL);
        CHECK_EQ_U64(r[i].offset, 0);
        CHECK_EQ_INT(r[i].tensor, i);
    }
    CHECK_EQ_U64(r[0].length, sizeof a);

    /* A slice larger than everything: one whole rotation a step. */
    CHECK_RC(fb_sdc_configure(1 << 20, 1000), 0);
    CHECK_RC(fb_sdc_check(11), 0);
    n = drain(r, 64);
    CHECK_EQ_INT(n, 3);

    /* The environment wins over the program's values. */
    setenv("FIREBREAK_SDC_FULL_EVERY", "12", 1);
    CHECK_RC(fb_sdc_configure(1 << 20, 1000), 0);
    CHECK_RC(fb_sdc_check(12), 0);
    n = drain(r, 64);
    CHECK(n == 3 && r[0].flags == FB__SDC_FULL);
    unsetenv("FIREBREAK_SDC_FULL_EVERY");

    fb_sdc_clear();
    CHECK_RC(fb_sdc_check(13), 0);
    CHECK_EQ_INT(drain(r, 64), 0);
    fb__seg_close(reader);
    fb__seg_remove_job(job, -1);
    if (!failures)
        printf("ok: sdc check (rank side)\n");
    return failures != 0;
}
