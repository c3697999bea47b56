/*
 * ckpt_sample.c -- test helper: a "training program" that registers one
 * tensor of every dtype (plus a scalar and an empty one) and saves
 * checkpoints through the public API.  SAMPLE_PAD_KB adds a tensor "pad"
 * of that many KiB.
 *
 *   ckpt_sample DIR RANK WORLD FIRST_STEP LAST_STEP [EVERY]
 *       saves steps FIRST..LAST (every EVERY), contents depend on the step;
 *       writes DIR/expect-rRANK/<name>.bin: the bytes of the last save.
 *   ckpt_sample --restore DIR RANK WORLD
 *       restores and prints "restored STEP", checks the bytes against
 *       the contents that step was saved with; exit 1 if they differ.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "firebreak/firebreak.h"

#define NT (FB_DTYPE_COUNT_ + 3)

static unsigned char *buf[NT];
static size_t bytes[NT];
static char names[NT][32];

static void fill(uint64_t step)
{
    for (int k = 0; k < NT; k++)
        for (size_t i = 0; i < bytes[k]; i++)
            buf[k][i] = k == FB_DTYPE_BOOL ? (unsigned char)((i + step) & 1)
                                           : (unsigned char)(i * 131 + k * 17 + step * 7);
}

static void release(void)
{
    for (int k = 0; k < NT; k++)
        free(buf[k]);
}

static void setup(fb_ckpt *ck)
{
    for (int d = 0; d < FB_DTYPE_COUNT_; d++) {
        int64_t shape[2] = {4, 3 + d};
        bytes[d] = 4 * (size_t)(3 + d) * fb_dtype_size((fb_dtype)d);
        buf[d] = calloc(1, bytes[d]);
        snprintf(names[d], sizeof names[d], "model.%s", fb_dtype_name((fb_dtype)d));
        if (fb_ckpt_register(ck, names[d], (fb_dtype)d, 2, shape, buf[d]))
            exit(3);
    }
    int k = FB_DTYPE_COUNT_;
    bytes[k] = 8;
    buf[k] = calloc(1, 8);
    snprintf(names[k], sizeof names[k], "scalar");
    if (fb_ckpt_register(ck, names[k], FB_DTYPE_I64, 0, NULL, buf[k]))
        exit(3);
    k++;
    int64_t zero[1] = {0};
    bytes[k] = 0;
    buf[k] = calloc(1, 1);
    snprintf(names[k], sizeof names[k], "empty");
    if (fb_ckpt_register(ck, names[k], FB_DTYPE_F32, 1, zero, buf[k]))
        exit(3);
    /* SAMPLE_PAD_KB: one more tensor of that size (disk-full tests). */
    k++;
    const char *pad = getenv("SAMPLE_PAD_KB");
    int64_t pad_shape[1] = {pad ? atoll(pad) * 1024 : 0};
    bytes[k] = (size_t)pad_shape[0];
    buf[k] = calloc(1, bytes[k] + 1);
    snprintf(names[k], sizeof names[k], "pad");
    if (fb_ckpt_register(ck, names[k], FB_DTYPE_U8, 1, pad_shape, buf[k]))
        exit(3);
}

int main(int argc, char **argv)
{
    int restore = argc > 1 && !strcmp(argv[1], "--restore");
    if (argc < (restore ? 5 : 6)) {
        fprintf(stderr, "usage: ckpt_sample DIR RANK WORLD FIRST LAST [EVERY] | "
                        "--restore DIR RANK WORLD\n");
        return 2;
    }
    char **a = argv + restore;
    fb_ckpt_options o;
    fb_ckpt_options_init(&o);
    o.dir = a[1];
    o.rank = atoi(a[2]);
    o.world_size = atoi(a[3]);
    fb_ckpt *ck;
    int rc = fb_ckpt_open(&ck, &o);
    if (rc) {
        fprintf(stderr, "open: %s\n", fb_strerror(rc));
        return 2;
    }
    setup(ck);
    if (restore) {
        uint64_t step = 0;
        rc = fb_ckpt_restore(ck, &step);
        if (rc) {
            fb_ckpt_close(ck);
            release();
            printf("restore: %s\n", fb_strerror(rc));
            return rc == FB_ENOCKPT ? 4 : 1;
        }
        printf("restored %llu\n", (unsigned long long)step);
        unsigned char *got[NT];
        for (int k = 0; k < NT; k++) {
            got[k] = malloc(bytes[k] + 1);
            memcpy(got[k], buf[k], bytes[k]);
        }
        fill(step);
        int differ = 0;
        for (int k = 0; k < NT; k++) {
            if (!differ && memcmp(got[k], buf[k], bytes[k])) {
                printf("tensor %s differs from step %llu's contents\n", names[k],
                       (unsigned long long)step);
                differ = 1;
            }
            free(got[k]);
        }
        fb_ckpt_close(ck);
        release();
        return differ;
    }
    uint64_t first = strtoull(a[4], NULL, 10), last = strtoull(a[5], NULL, 10);
    uint64_t every = argc > 6 ? strtoull(a[6], NULL, 10) : 1;
    for (uint64_t s = first; s <= last; s += every ? every : 1) {
        fill(s);
        if ((rc = fb_ckpt_save(ck, s)))
            fprintf(stderr, "save %llu: %s\n", (unsigned long long)s, fb_strerror(rc));
    }
    rc = fb_ckpt_wait(ck);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/expect-r%s", a[1], a[2]);
    fb__mkdir_p(dir, 0755);
    for (int k = 0; k < NT; k++) {
        char p[4200];
        snprintf(p, sizeof p, "%s/%s.bin", dir, names[k]);
        FILE *f = fopen(p, "wb");
        if (f) {
            fwrite(buf[k], 1, bytes[k], f);
            fclose(f);
        }
    }
    fb_ckpt_close(ck);
    release();
    printf("saved, last result: %s\n", rc ? fb_strerror(rc) : "ok");
    return rc ? 1 : 0;
}
