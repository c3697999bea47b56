/*
 * test_prepare.c -- runs fb__ckpt_prepare_restore (the supervisor's check
 * before a restart) on DIR for WORLD ranks and prints what it decided.
 * Usage: test_ckpt_prepare DIR WORLD
 */
#include <stdio.h>
#include <stdlib.h>

#include "ckpt/tool.h"
#include "firebreak/firebreak.h"

static void why(void *arg, uint64_t step, const char *text)
{
    (void)arg;
    printf("set aside step %llu: %s\n", (unsigned long long)step, text);
}

int main(int argc, char **argv)
{
    if (argc != 3)
        return 2;
    uint64_t step = 0;
    int rc = fb__ckpt_prepare_restore(argv[1], atoi(argv[2]), 2, &step, why, NULL);
    if (rc) {
        printf("none: %s\n", fb_strerror(rc));
        return rc == FB_ENOCKPT ? 0 : 1;
    }
    printf("restore %llu\n", (unsigned long long)step);
    return 0;
}
