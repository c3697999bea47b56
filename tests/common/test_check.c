/*
 * test_check.c -- check.h's check_tmpdir: a test program that dies of
 * abort() (or of a sanitizer's report) leaves no directory behind, and a
 * child it forks that aborts does not take its parent's directory.
 *
 * The program runs itself as the test that dies:
 *   test_check                 the checks below
 *   test_check die abort       make a directory, register it, abort()
 *   test_check die fork        ... fork a child that aborts, then remove
 *                              the directory itself and exit 0 only if the
 *                              child left it in place
 *   test_check die ub          ... a signed overflow (sanitizer builds)
 * Each "die" run writes its directory's path on stdout first.
 */
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "../check.h"

static int die(const char *how)
{
    char dir[] = "/tmp/fb-check-test.XXXXXX", file[64];
    if (!mkdtemp(dir))
        return 2;
    snprintf(file, sizeof file, "%s/inside", dir);
    int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0)
        close(fd);
    check_tmpdir(dir);
    printf("%s\n", dir);
    fflush(stdout);
    if (!strcmp(how, "abort"))
        abort();
    if (!strcmp(how, "fork")) {
        pid_t p = fork();
        if (p == 0)
            abort();
        int st = 0;
        waitpid(p, &st, 0);
        int kept = access(file, F_OK) == 0;
        char *argv[] = {"rm", "-rf", "--", dir, NULL};
        pid_t r = fork();
        if (r == 0) {
            execv("/bin/rm", argv);
            _exit(127);
        }
        waitpid(r, NULL, 0);
        return WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT && kept ? 0 : 3;
    }
    if (!strcmp(how, "ub")) {
        volatile int big = INT_MAX;
        int over = big + 1; /* UBSan: signed overflow, halt_on_error */
        printf("%d\n", over);
        return 4;
    }
    return 2;
}

/* Runs `test_check die HOW` with stdout on a pipe; the directory it named
 * goes to dir, its wait status is returned. */
static int run_die(const char *self, const char *how, char *dir, size_t cap)
{
    int fds[2];
    if (pipe(fds))
        return -1;
    pid_t p = fork();
    if (p == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        /* The death callback's path: the sanitizer ends in _exit, not abort. */
        setenv("UBSAN_OPTIONS", "halt_on_error=1:abort_on_error=0:print_stacktrace=0", 1);
        setenv("ASAN_OPTIONS", "abort_on_error=0:detect_leaks=0", 1);
        struct rlimit nocore = {0, 0};
        setrlimit(RLIMIT_CORE, &nocore);
        execl(self, self, "die", how, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    size_t got = 0;
    ssize_t n;
    while (got + 1 < cap && (n = read(fds[0], dir + got, cap - 1 - got)) > 0)
        got += (size_t)n;
    close(fds[0]);
    dir[got] = 0;
    char *nl = strchr(dir, '\n');
    if (nl)
        *nl = 0;
    int st = 0;
    waitpid(p, &st, 0);
    return st;
}

static void expect_gone(const char *how, const char *dir)
{
    CHECKF(!strncmp(dir, "/tmp/fb-check-test.", 19), "%s: no directory named (\"%s\")", how, dir);
    struct stat sb;
    CHECKF(stat(dir, &sb) < 0 && errno == ENOENT, "%s: %s left behind", how, dir);
    if (stat(dir, &sb) == 0) {
        char cmd[200];
        snprintf(cmd, sizeof cmd, "rm -rf -- '%s'", dir);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", dir);
    }
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "die"))
        return die(argv[2]);
    char self[4096], dir[4200];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return 2;
    self[n] = 0;

    int st = run_die(self, "abort", dir, sizeof dir);
    CHECKF(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "abort: wait status %#x", st);
    expect_gone("abort", dir);

    st = run_die(self, "fork", dir, sizeof dir);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0,
           "fork: the child's abort took the parent's directory (status %#x)", st);
    expect_gone("fork", dir);

#ifdef CHECK_SANITIZER_
    st = run_die(self, "ub", dir, sizeof dir);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) != 0 && WEXITSTATUS(st) != 4,
           "ub: the sanitizer did not end it (status %#x)", st);
    expect_gone("ub (the sanitizer's death callback)", dir);
#else
    fprintf(stderr, "test_check: ub case only in sanitizer builds\n");
#endif
    if (failures)
        fprintf(stderr, "test_check: %d check(s) failed\n", failures);
    return failures != 0;
}
