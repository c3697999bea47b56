/*
 * test_reader.c -- the shard reader against hostile files: each bad-input
 * case in data/ must fail with a message naming the file and the field;
 * the good ones must parse.  Every file also goes through the fuzz
 * target's entry point, so it stays compiled and crash-free.
 * Usage: test_reader DATA_DIR
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/safetensors.h"
#include "ckpt/shard.h"
#include "common/util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const struct {
    const char *file, *want;
} cases[] = {
    {"bad_short.st", "shorter than the 8-byte"},
    {"bad_hdr_past_end.st", "runs past the end"},
    {"bad_hdr_too_big.st", "exceeds the limit"},
    {"bad_not_object.st", "header JSON is not an object"},
    {"bad_json.st", "header JSON"},
    {"bad_dtype.st", "unknown dtype \"F17\""},
    {"bad_size.st", "shape x dtype size is 12"},
    {"bad_gap.st", "a gap"},
    {"bad_overlap.st", "an overlap"},
    {"bad_overflow.st", "overflows"},
    {"bad_meta_type.st", "__metadata__ value of \"k\" is not a string"},
    {"bad_meta_not_obj.st", "__metadata__ is not an object"},
    {"bad_dup.st", "duplicate tensor name"},
    {"bad_trailing.st", "trailing"},
    {"bad_truncated.st", "truncated"},
    {"bad_neg_shape.st", "non-negative"},
    {"bad_offsets.st", "end 0 before begin 1"},
    {"ok_empty.st", NULL},
    {"ok_scalar_and_empty.st", NULL},
    {"valid.safetensors", NULL},
};

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_reader DATA_DIR\n");
        return 2;
    }
    int failures = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[1024], err[1024] = "", err2[1024] = "";
        snprintf(path, sizeof path, "%s/%s", argv[1], cases[i].file);
        char *buf;
        size_t len;
        if (fb__read_file(path, 1 << 20, &buf, &len)) {
            fprintf(stderr, "cannot read %s\n", path);
            return 2;
        }
        LLVMFuzzerTestOneInput((const uint8_t *)buf, len);
        fb__st_header *h = NULL, *h2 = NULL;
        int fd = -1;
        int rc = fb__st_open(path, &fd, &h, err, sizeof err);
        int rc2 = fb__st_parse_buffer(buf, len, path, &h2, err2, sizeof err2);
        if (cases[i].want) {
            if (rc == 0 || rc2 == 0 || !strstr(err, cases[i].want) ||
                !strstr(err, cases[i].file) || !strstr(err2, cases[i].want)) {
                fprintf(stderr, "%s: wanted an error with \"%s\", got rc %d \"%s\" / "
                        "rc %d \"%s\"\n", cases[i].file, cases[i].want, rc, err, rc2,
                        err2);
                failures++;
            }
        } else if (rc || rc2) {
            fprintf(stderr, "%s: should parse, got \"%s\" / \"%s\"\n", cases[i].file,
                    err, err2);
            failures++;
        } else if (!strcmp(cases[i].file, "valid.safetensors")) {
            /* A shard we wrote verifies; one flipped data byte does not. */
            if (fb__shard_read_verify(fd, h, path, NULL, 2, NULL, NULL, NULL, NULL, err,
                                      sizeof err)) {
                fprintf(stderr, "valid.safetensors: %s\n", err);
                failures++;
            }
            buf[len - 3] ^= 1;
            char tmp[] = "/tmp/fb-reader-XXXXXX";
            int t = mkstemp(tmp);
            if (t < 0 || write(t, buf, len) != (ssize_t)len) {
                failures++;
            } else if (fb__shard_read_verify(t, h, tmp, NULL, 1, NULL, NULL, NULL, NULL, err,
                                             sizeof err) != FB_ECORRUPT ||
                       !strstr(err, "tensor \"step\"")) {
                fprintf(stderr, "flipped byte not caught: %s\n", err);
                failures++;
            }
            if (t >= 0)
                close(t);
            unlink(tmp);
        }
        if (fd >= 0)
            close(fd);
        fb__st_free(h);
        fb__st_free(h2);
        free(buf);
    }
    if (failures)
        fprintf(stderr, "%d case(s) failed\n", failures);
    return failures ? 1 : 0;
}
