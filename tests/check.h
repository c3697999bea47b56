/*
 * check.h -- the assertions of the C test programs: a failed check prints
 * where and what, counts, and the test goes on so one run shows every
 * failure; main() returns `failures != 0`.
 *
 *   CHECK(cond)                 cond must hold
 *   CHECKF(cond, fmt, ...)      ... and say more when it does not
 *   CHECK_RC(expr, want)        an int return code (names it: fb_strerror)
 *   CHECK_EQ_INT(a, b)          two integers (as long long) are equal
 *   CHECK_EQ_U64(a, b)          two unsigned integers (as unsigned long long)
 *   CHECK_EQ_DBL(a, b)          two doubles are exactly equal
 *   CHECK_EQ_STR(a, b)          two strings are equal (NULL is a value)
 *   CHECK_EQ_MEM(a, b, n)       n bytes are equal (names the first that is not)
 *
 * The CHECK_EQ_* print both sides, each expression and its value (libuv's
 * ASSERT_EQ): compare values with them, not with CHECK(a == b).  Each
 * argument is evaluated once.  CHECK_EQ_INT and CHECK_EQ_U64 do not compile
 * with a float or double argument: use CHECK_EQ_DBL.
 *
 *   check_tmpdir(path)          path, a directory the test made, is removed
 *                               (rm -rf) should the test die of abort() (a
 *                               sanitizer's report, an assert(), a crash
 *                               ASan turns into one), SIGALRM (its alarm()
 *                               limit) or SIGTERM, where the test left that
 *                               signal's default.  Its normal end removes
 *                               it itself.  At most CHECK_TMPDIRS of them.
 *
 * So a test that fails that way leaves nothing in /tmp (the brief's "no
 * orphans ... on success or failure"; tests/leftovers.sh looks).  Only the
 * process that called check_tmpdir removes: a forked child that aborts on
 * purpose does not take its parent's directory.
 */
#ifndef FB_TESTS_CHECK_H
#define FB_TESTS_CHECK_H

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "firebreak/firebreak.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CHECK_SANITIZER_ 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(CHECK_SANITIZER_)
#define CHECK_SANITIZER_ 1
#endif
#ifdef CHECK_SANITIZER_
#include <sanitizer/common_interface_defs.h>
#endif

static int failures;

#define CHECK_TMPDIRS 8

static struct {
    char path[CHECK_TMPDIRS][4096];
    int n;
    pid_t owner;
    volatile sig_atomic_t removing;
} check_tmp_ __attribute__((unused));

/* Async-signal-safe: fork, execve and waitpid only (rm does the walk). */
static inline void check_tmp_remove_(void)
{
    if (getpid() != check_tmp_.owner || check_tmp_.removing)
        return;
    check_tmp_.removing = 1;
    for (int i = 0; i < check_tmp_.n; i++) {
        pid_t p = fork();
        if (p == 0) {
            char *argv[] = {"rm", "-rf", "--", check_tmp_.path[i], NULL};
            char *envp[] = {NULL};
            execve("/bin/rm", argv, envp);
            _exit(127);
        }
        while (p > 0 && waitpid(p, NULL, 0) < 0 && errno == EINTR)
            ;
    }
}

static inline void check_tmp_on_abort_(int sig)
{
    int saved = errno;
    check_tmp_remove_();
    errno = saved;
    signal(sig, SIG_DFL);
    raise(sig);
}

static inline void check_tmpdir(const char *path)
{
    if (check_tmp_.n == CHECK_TMPDIRS || strlen(path) >= sizeof check_tmp_.path[0]) {
        fprintf(stderr, "check_tmpdir: cannot keep %s (at most %d)\n", path, CHECK_TMPDIRS);
        failures++;
        return;
    }
    memcpy(check_tmp_.path[check_tmp_.n], path, strlen(path) + 1);
    if (check_tmp_.n++ == 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = check_tmp_on_abort_;
        sigemptyset(&sa.sa_mask);
        check_tmp_.owner = getpid();
        /* abort(); alarm()'s limit and a plain kill, where the test has
         * not taken the signal for itself. */
        int sigs[] = {SIGABRT, SIGALRM, SIGTERM};
        for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
            struct sigaction old;
            if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_DFL)
                sigaction(sigs[i], &sa, NULL);
        }
#ifdef CHECK_SANITIZER_
        /* halt_on_error without abort_on_error ends in _exit: the
         * sanitizer's own last call. */
        __sanitizer_set_death_callback(check_tmp_remove_);
#endif
    }
}

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

/* CHECK_EQ_INT and CHECK_EQ_U64 refuse a floating-point argument at
 * compile time: cast to an integer, 2.5 would equal 2. */
#define CHECK_NOT_FLOAT_(x)                                                   \
    (void)sizeof(char[_Generic((x), float: -1, double: -1, long double: -1,  \
                               default: 1)])

#define CHECK_EQ_INT(a, b)                                                    \
    do {                                                                      \
        CHECK_NOT_FLOAT_(a);                                                  \
        CHECK_NOT_FLOAT_(b);                                                  \
        long long a_ = (long long)(a), b_ = (long long)(b);                   \
        if (a_ != b_) {                                                       \
            fprintf(stderr, "%s:%d: check failed: %s == %s: %lld != %lld\n",  \
                    __FILE__, __LINE__, #a, #b, a_, b_);                      \
            failures++;                                                       \
        }                                                                     \
    } while (0)

#define CHECK_EQ_U64(a, b)                                                    \
    do {                                                                      \
        CHECK_NOT_FLOAT_(a);                                                  \
        CHECK_NOT_FLOAT_(b);                                                  \
        unsigned long long a_ = (unsigned long long)(a),                      \
                           b_ = (unsigned long long)(b);                      \
        if (a_ != b_) {                                                       \
            fprintf(stderr, "%s:%d: check failed: %s == %s: %llu != %llu\n",  \
                    __FILE__, __LINE__, #a, #b, a_, b_);                      \
            failures++;                                                       \
        }                                                                     \
    } while (0)

#define CHECK_EQ_DBL(a, b)                                                    \
    do {                                                                      \
        double a_ = (double)(a), b_ = (double)(b);                            \
        if (!(a_ == b_)) {                                                    \
            fprintf(stderr, "%s:%d: check failed: %s == %s: %.17g != %.17g\n",\
                    __FILE__, __LINE__, #a, #b, a_, b_);                      \
            failures++;                                                       \
        }                                                                     \
    } while (0)

#define CHECK_EQ_STR(a, b)                                                    \
    do {                                                                      \
        const char *a_ = (a), *b_ = (b);                                      \
        if (a_ != b_ && (!a_ || !b_ || strcmp(a_, b_))) {                     \
            fprintf(stderr, "%s:%d: check failed: %s == %s: ", __FILE__,       \
                    __LINE__, #a, #b);                                        \
            fprintf(stderr, a_ ? "\"%s\"" : "%s", a_ ? a_ : "NULL");          \
            fprintf(stderr, " != ");                                          \
            fprintf(stderr, b_ ? "\"%s\"" : "%s", b_ ? b_ : "NULL");          \
            fputc('\n', stderr);                                              \
            failures++;                                                       \
        }                                                                     \
    } while (0)

#define CHECK_EQ_MEM(a, b, n)                                                 \
    do {                                                                      \
        const unsigned char *a_ = (const void *)(a), *b_ = (const void *)(b); \
        size_t n_ = (n), i_ = 0;                                              \
        while (i_ < n_ && a_[i_] == b_[i_])                                   \
            i_++;                                                             \
        if (i_ < n_) {                                                        \
            fprintf(stderr, "%s:%d: check failed: %s == %s (%zu bytes): "     \
                    "byte %zu is 0x%02x != 0x%02x\n", __FILE__, __LINE__,     \
                    #a, #b, n_, i_, a_[i_], b_[i_]);                          \
            failures++;                                                       \
        }                                                                     \
    } while (0)

#endif
