/*
 * fuzz_driver.c -- runs a fuzz target's LLVMFuzzerTestOneInput over files
 * (the fixtures), over every prefix of each (truncation), over copies
 * with bytes flipped, and over hostile inputs made here: so the targets
 * stay compiled and the readers meet bad input in every test run.
 * Exit 0 when nothing crashed (crashes abort under the sanitizers).
 *
 *   fuzz_driver FILE...
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void hostile(void)
{
    static uint8_t buf[1 << 16];
    size_t n = 0;
    /* deep nesting: MARK x 10000 then EMPTY_LIST x 10000 + APPENDs */
    buf[n++] = 0x80; buf[n++] = 2;
    for (int i = 0; i < 10000; i++) buf[n++] = '(';
    buf[n++] = '.';
    LLVMFuzzerTestOneInput(buf, n);
    n = 0;
    buf[n++] = 0x80; buf[n++] = 2;
    for (int i = 0; i < 10000; i++) buf[n++] = ']';
    for (int i = 0; i < 9999; i++) buf[n++] = 'a';
    buf[n++] = '.';
    LLVMFuzzerTestOneInput(buf, n);
    /* absurd string and memo sizes */
    const uint8_t big_str[] = {0x80, 4, 0x8d, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 'x', '.'};
    LLVMFuzzerTestOneInput(big_str, sizeof big_str);
    const uint8_t big_memo[] = {0x80, 2, 'N', 'r', 0xff, 0xff, 0xff, 0xff, '.'};
    LLVMFuzzerTestOneInput(big_memo, sizeof big_memo);
    const uint8_t bad_get[] = {0x80, 2, 'h', 7, '.'};
    LLVMFuzzerTestOneInput(bad_get, sizeof bad_get);
    /* a memo bomb: one list referenced by a list referenced ... */
    n = 0;
    buf[n++] = 0x80; buf[n++] = 2; buf[n++] = ']'; buf[n++] = 'q'; buf[n++] = 0;
    for (int lvl = 1; lvl < 40; lvl++) {
        buf[n++] = ']'; buf[n++] = '(';
        for (int k = 0; k < 50; k++) { buf[n++] = 'h'; buf[n++] = (uint8_t)(lvl - 1); }
        buf[n++] = 'e'; buf[n++] = 'q'; buf[n++] = (uint8_t)lvl;
    }
    buf[n++] = '.';
    LLVMFuzzerTestOneInput(buf, n);
    /* JSON: deep arrays, wrong types */
    n = 0;
    for (int i = 0; i < 5000; i++) buf[n++] = '[';
    LLVMFuzzerTestOneInput(buf, n);
    const char *js[] = {
        "{\"version\":\"2.10\",\"entries\":\"nope\"}",
        "{\"version\":7,\"rank\":1,\"entries\":[1,2,{\"profiling_name\":5}]}",
        "{\"version\":\"9.1\",\"rank\":0,\"pg_config\":{\"0\":{\"ranks\":\"[0, 99999999999]\"}},"
        "\"entries\":[{\"process_group\":[\"0\",\"\"],\"collective_seq_id\":-4,"
        "\"profiling_name\":\"nccl:all_gather\",\"input_sizes\":[[99999999999,99999999999]],"
        "\"state\":\"scheduled\"}]}",
        "{\"version\":\"2.10\",\"rank\":2,\"entries\":[{\"pg_id\":0,\"collective_seq_id\":"
        "18446744073709551615,\"profiling_name\":\"nccl:recv 2<-9999999999\",\"is_p2p\":true,"
        "\"p2p_seq_id\":1,\"state\":\"started\"}]}",
    };
    for (size_t i = 0; i < sizeof js / sizeof js[0]; i++)
        LLVMFuzzerTestOneInput((const uint8_t *)js[i], strlen(js[i]));
}

int main(int argc, char **argv)
{
    hostile();
    size_t runs = 0;
    for (int i = 1; i < argc; i++) {
        char *buf = NULL;
        size_t len = 0;
        if (fb__read_file(argv[i], 64u << 20, &buf, &len)) {
            fprintf(stderr, "fuzz_driver: cannot read %s\n", argv[i]);
            return 2;
        }
        LLVMFuzzerTestOneInput((const uint8_t *)buf, len);
        size_t step = len > 400 ? len / 200 : 1;
        for (size_t k = 0; k < len; k += step, runs++)
            LLVMFuzzerTestOneInput((const uint8_t *)buf, k);
        uint64_t x = 0x9e3779b97f4a7c15ull;
        for (int k = 0; k < 100 && len; k++, runs++) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            size_t at = (size_t)(x % len);
            char old = buf[at];
            buf[at] = (char)(x >> 32);
            LLVMFuzzerTestOneInput((const uint8_t *)buf, len);
            buf[at] = old;
        }
        free(buf);
    }
    printf("fuzz_driver: %zu inputs, no crash\n", runs);
    return 0;
}
