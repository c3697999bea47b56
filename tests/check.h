/*
 * check.h -- the assertions of the C test programs: a failed check prints
 * where and what, counts, and the test goes on so one run shows every
 * failure; main() returns `failures != 0`.
 *
 *   CHECK(cond)                 cond must hold
 *   CHECKF(cond, fmt, ...)      ... and say more when it does not
 *   CHECK_RC(expr, want)        an int return code (names it: fb_strerror)
 */
#ifndef FB_TESTS_CHECK_H
#define FB_TESTS_CHECK_H

#include <stdio.h>

#include "firebreak/firebreak.h"

static int failures;

#define CHECK(cond)                                                           \
    do {                                                                      \
        if (!(cond)) {                                                        \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__,  \
                    #cond);                                                   \
            failures++;                                                       \
        }                                                                     \
    } while (0)

#define CHECKF(cond, ...)                                                     \
    do {                                                                      \
        if (!(cond)) {                                                        \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__,  \
                    #cond);                                                   \
            fprintf(stderr, __VA_ARGS__);                                     \
            fputc('\n', stderr);                                              \
            failures++;                                                       \
        }                                                                     \
    } while (0)

#define CHECK_RC(expr, want)                                                  \
    do {                                                                      \
        int rc_ = (expr);                                                     \
        if (rc_ != (want)) {                                                  \
            fprintf(stderr, "%s:%d: %s returned %d (%s), wanted %d\n",        \
                    __FILE__, __LINE__, #expr, rc_, fb_strerror(rc_),         \
                    (int)(want));                                             \
            failures++;                                                       \
        }                                                                     \
    } while (0)

#endif
