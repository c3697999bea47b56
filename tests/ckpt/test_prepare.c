/*
 * test_prepare.c -- runs fb__ckpt_prepare_restore (the supervisor's check
 * before a restart) on DIR for WORLD ranks and prints what it decided.
 * Usage: test_ckpt_prepare DIR WORLD [STOP_AFTER]
 * STOP_AFTER: the stop callback says stop on its STOP_AFTER-th call.
 * DROP=1 in the environment: drop_incomplete, as the supervisor without
 * node memory.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "ckpt/tool.h"
#include "firebreak/firebreak.h"

static void why(void *arg, uint64_t step, int set_aside, const char *text)
{
    (void)arg;
    printf("%s step %llu: %s\n",
           set_aside == 2 ? "dropped" : set_aside ? "set aside" : "passed over",
           (unsigned long long)step, text);
}

static int calls, stop_after;

static int stop(void *arg)
{
    (void)arg;
    return ++calls >= stop_after;
}

int main(int argc, char **argv)
{
    if (argc != 3 && argc != 4)
        return 2;
    stop_after = argc == 4 ? atoi(argv[3]) : 0;
    uint64_t step = 0;
    const char *drop = getenv("DROP");
    int rc = fb__ckpt_prepare_restore(argv[1], atoi(argv[2]), 2, drop && *drop == '1', &step, why,
                                      stop_after ? stop : NULL, NULL);
    if (rc) {
        printf("none: %s\n", fb_strerror(rc));
        return rc == FB_ENOCKPT || rc == -ECANCELED ? 0 : 1;
    }
    printf("restore %llu\n", (unsigned long long)step);
    return 0;
}
