/*
 * test_common.c -- unit tests of the shared parsers and writers: the
 * bounded JSON parser, the JSON writer, durations, sizes, and fault-injection
 * specs.  Every case is something a user or a file could hand us.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/json.h"
#include "common/jsonw.h"
#include "common/rundir.h"
#include "common/util.h"
#include "firebreak/firebreak.h"
#include "lib/lib.h"
#include "../check.h"

static int parse(const char *s, fb__json_doc **doc, const fb__json_limits *lim)
{
    char err[128];
    return fb__json_parse(s, strlen(s), lim, doc, err, sizeof err);
}

static void test_json(void)
{
    fb__json_doc *doc;
    CHECK_RC(parse("{\"a\": [1, -2.5e3, true, null, \"x\\u00e9\\ud83d\\ude00\"], "
                   "\"big\": 18446744073709551615, \"neg\": -9223372036854775808}",
                   &doc, NULL), 0);
    const fb__json *r = fb__json_root(doc);
    const fb__json *a = fb__json_get(r, "a");
    CHECK(a != NULL);
    if (!a)
        return;
    CHECK_EQ_INT(a->type, FB_JSON_ARRAY);
    CHECK_EQ_U64(a->count, 5);
    double d;
    CHECK_RC(fb__json_as_double(fb__json_at(a, 1), &d), 0);
    CHECK_EQ_DBL(d, -2500.0);
    CHECK_EQ_INT(fb__json_at(a, 2)->boolean, 1);
    CHECK_EQ_STR(fb__json_as_str(fb__json_at(a, 4)), "x\xc3\xa9\xf0\x9f\x98\x80");
    uint64_t u;
    CHECK_RC(fb__json_as_u64(fb__json_get(r, "big"), &u), 0);
    CHECK_EQ_U64(u, 18446744073709551615ull);
    int64_t i;
    CHECK_RC(fb__json_as_i64(fb__json_get(r, "neg"), &i), 0);
    CHECK_EQ_INT(i, INT64_MIN);
    CHECK_RC(fb__json_as_i64(fb__json_get(r, "big"), &i), FB_EFORMAT); /* out of range */
    CHECK_RC(fb__json_as_u64(fb__json_get(r, "neg"), &u), FB_EFORMAT);
    CHECK(!fb__json_has_duplicate_keys(r));
    fb__json_free(doc);

    CHECK_RC(parse("{\"k\":1,\"k\":2}", &doc, NULL), 0);
    CHECK(fb__json_has_duplicate_keys(fb__json_root(doc)));
    fb__json_free(doc);

    /* Hostile input: each fails cleanly. */
    const char *bad[] = {"", "{", "[1,]", "{\"a\"}", "{\"a\":}", "\"\\x\"", "01",
                         "1.", "-", "tru", "\"\\ud800\"", "\"\\udc00x\"", "{} x",
                         "\"a\nb\"", "[1 2]", "{1:2}", "nul", "\"\\u12g4\""};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        int rc = parse(bad[k], &doc, NULL);
        CHECKF(rc == FB_EFORMAT, "bad JSON %zu (%s) gave %d (%s)", k, bad[k], rc,
               fb_strerror(rc));
    }
    /* Limits: depth, nodes, size. */
    char deep[300];
    memset(deep, '[', 200);
    deep[200] = '\0';
    fb__json_limits lim = {.max_depth = 64};
    CHECK_RC(parse(deep, &doc, &lim), FB_ETOOBIG);
    fb__json_limits few = {.max_nodes = 3};
    CHECK_RC(parse("[1,2,3,4]", &doc, &few), FB_ETOOBIG);
    fb__json_limits small = {.max_input = 4};
    CHECK_RC(parse("[1,2,3,4]", &doc, &small), FB_ETOOBIG);
    /* Not NUL-terminated input: only len bytes are read. */
    char buf[4] = {'[', '7', ']', 'x'};
    char err[64];
    CHECK_RC(fb__json_parse(buf, 3, NULL, &doc, err, sizeof err), 0);
    fb__json_free(doc);
}

static void test_jsonw(void)
{
    fb__jsonw w;
    fb__jsonw_init(&w);
    fb__jsonw_obj_begin(&w);
    fb__jsonw_kstr(&w, "s", "q\"b\\\n\x01\xff\x7f\xc2\x9b\xc3\xa9");
    fb__jsonw_key(&w, "a");
    fb__jsonw_arr_begin(&w);
    fb__jsonw_int(&w, -3);
    fb__jsonw_double(&w, 0.1);
    fb__jsonw_double(&w, NAN);
    fb__jsonw_obj_begin(&w);
    fb__jsonw_obj_end(&w);
    fb__jsonw_arr_end(&w);
    fb__jsonw_kbool(&w, "t", 1);
    fb__jsonw_obj_end(&w);
    const char *want = "{\"s\":\"q\\\"b\\\\\\n\\u0001\xef\xbf\xbd\\u007f\\u009b\xc3\xa9\",\"a\":[-3,0.1,null,{}],\"t\":true}";
    CHECK_EQ_STR(fb__jsonw_text(&w), want);
    /* What we write, we read back. */
    fb__json_doc *doc;
    CHECK_RC(parse(fb__jsonw_text(&w), &doc, NULL), 0);
    fb__json_free(doc);
    fb__jsonw_free(&w);
}

static void test_units(void)
{
    double s;
    CHECK_RC(fb__parse_duration("90s", &s), 0);
    CHECK_EQ_DBL(s, 90);
    CHECK_RC(fb__parse_duration("1.5h", &s), 0);
    CHECK_EQ_DBL(s, 5400);
    CHECK_RC(fb__parse_duration("250ms", &s), 0);
    CHECKF(fabs(s - 0.25) < 1e-12, "250ms is %.17g s", s);
    CHECK_RC(fb__parse_duration("2d", &s), 0);
    CHECK_EQ_DBL(s, 172800);
    CHECK_RC(fb__parse_duration("7", &s), 0);
    CHECK_EQ_DBL(s, 7);
    CHECK(fb__parse_duration("-1s", &s) != 0);
    CHECK(fb__parse_duration("5 s", &s) != 0);
    CHECK(fb__parse_duration("1e999", &s) != 0);
    CHECK(fb__parse_duration("", &s) != 0);
    CHECK(fb__parse_duration("3x", &s) != 0);
    /* Bounded: an absurd timeout is an error, not "detection off". */
    CHECK_RC(fb__parse_duration_in("30d", 1e-3, 30 * 86400.0, &s), 0);
    CHECK_EQ_DBL(s, 2592000);
    CHECK_RC(fb__parse_duration_in("99999999999999999h", 1e-3, 30 * 86400.0, &s),
             -ERANGE);
    CHECK_RC(fb__parse_duration_in("0", 1e-3, 30 * 86400.0, &s), -ERANGE);
    CHECK_RC(fb__parse_duration_in("0s", 0, 10, &s), 0);
    CHECK_RC(fb__parse_duration_in("-5s", 0, 10, &s), -EINVAL);
    CHECK_RC(fb__parse_duration_in("abc", 0, 10, &s), -EINVAL);
    uint64_t b;
    CHECK_RC(fb__parse_size("64k", &b), 0);
    CHECK_EQ_U64(b, 65536);
    CHECK_RC(fb__parse_size("1.5G", &b), 0);
    CHECK_EQ_U64(b, 1610612736ull);
    CHECK_RC(fb__parse_size("2GiB", &b), 0);
    CHECK_EQ_U64(b, 2147483648ull);
    CHECK(fb__parse_size("12q", &b) != 0);
    long long v;
    CHECK_RC(fb__parse_int("42", 0, 100, &v), 0);
    CHECK_EQ_INT(v, 42);
    CHECK(fb__parse_int("420", 0, 100, &v) != 0);
    CHECK(fb__parse_int("4x", 0, 100, &v) != 0);
}

static void test_inject(void)
{
    fb__inject_plan p;
    char err[256];
    CHECK_RC(fb__inject_parse("kill:rank=1,step=40;hang:rank=*,after=2.5s,attempt=any;"
                              "exit:rank=3,step=9,code=7;slow:rank=0,step=1,factor=3",
                              &p, err, sizeof err), 0);
    CHECK_EQ_INT(p.count, 4);
    CHECK_EQ_STR(fb__inject_kind_name(p.faults[0].kind), "kill");
    CHECK_EQ_INT(p.faults[0].rank, 1);
    CHECK_EQ_U64(p.faults[0].step, 40);
    CHECK_EQ_INT(p.faults[0].attempt, 0);
    CHECK_EQ_INT(p.faults[1].rank, -1);
    CHECK_EQ_INT(p.faults[1].attempt, -1);
    CHECK_EQ_INT(p.faults[1].has_after, 1);
    CHECK_EQ_DBL(p.faults[1].after_s, 2.5);
    CHECK_EQ_INT(p.faults[2].code, 7);
    CHECK_EQ_DBL(p.faults[3].factor, 3.0);
    struct { const char *spec, *msg; } bad[] = {
        {"boom:rank=1,step=2", "unknown fault kind 'boom'"},
        {"kill:step=2", "needs rank=N"},
        {"kill:rank=1", "exactly one of step=N or after=DURATION"},
        {"kill:rank=1,step=2,after=1s", "exactly one of"},
        {"exit:rank=1,after=1s", "after= works for kill, hang and segv"},
        {"kill:rank=x,step=2", "bad value 'x' for 'rank'"},
        {"kill:rank=1,step=2,colour=red", "unknown key 'colour'"},
        {"slow:rank=1,step=2,factor=0.5", "bad value '0.5' for 'factor'"},
        {"kill:rank=1,step", "is not key=value"},
        {"", "empty fault spec"},
        {"kill:rank=1,rank=2,step=3", "key 'rank' given twice"},
        {"kill:rank=1,step=3,step=4", "key 'step' given twice"},
        {"slow:rank=1,step=3,factor=2,factor=3", "key 'factor' given twice"},
        {"kill:rank=1,after=99999999999999h", "bad value '99999999999999h' for 'after'"},
        {"kill:rank=1,step=2,tensor=w1", "unknown key 'tensor'"},
        {"flip:rank=1,step=2,tensor=", "bad value '' for 'tensor'"},
        {"flip:rank=1,step=2,tensor=a,tensor=b", "key 'tensor' given twice"},
        {"flip:rank=1,after=1s", "after= works for kill, hang and segv"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        CHECK_RC(fb__inject_parse(bad[k].spec, &p, err, sizeof err), -EINVAL);
        CHECKF(strstr(err, bad[k].msg), "inject '%s': message '%s' lacks '%s'",
               bad[k].spec, err, bad[k].msg);
    }
    /* flip: the tensor is optional; a name too long for a record is refused. */
    CHECK_RC(fb__inject_parse("flip:rank=2,step=25,tensor=adam.m.w1;flip:rank=0,step=3",
                              &p, err, sizeof err), 0);
    CHECK_EQ_STR(fb__inject_kind_name(p.faults[0].kind), "flip");
    CHECK_EQ_STR(p.faults[0].tensor, "adam.m.w1");
    CHECK_EQ_STR(p.faults[1].tensor, "");
    char longspec[200];
    snprintf(longspec, sizeof longspec, "flip:rank=0,step=1,tensor=%0*d", 60, 0);
    CHECK_RC(fb__inject_parse(longspec, &p, err, sizeof err), -EINVAL);
    /* A fault for a rank the job does not have would never fire. */
    CHECK_RC(fb__inject_parse("kill:rank=5,step=3", &p, err, sizeof err), 0);
    CHECK_RC(fb__inject_check_job(&p, 1, 3, err, sizeof err), -EINVAL);
    CHECKF(strstr(err, "rank 5") && strstr(err, "1 rank"), "message: %s", err);
    CHECK_RC(fb__inject_check_job(&p, 6, 3, err, sizeof err), 0);
    CHECK_RC(fb__inject_parse("hang:rank=*,step=3", &p, err, sizeof err), 0);
    CHECK_RC(fb__inject_check_job(&p, 1, 3, err, sizeof err), 0);
    /* Nor would one for an attempt past --max-restarts. */
    CHECK_RC(fb__inject_parse("kill:rank=0,step=3,attempt=4", &p, err, sizeof err), 0);
    CHECK_RC(fb__inject_check_job(&p, 1, 3, err, sizeof err), -EINVAL);
    CHECKF(strstr(err, "attempt 4") && strstr(err, "--max-restarts 3"), "message: %s", err);
    CHECK_RC(fb__inject_check_job(&p, 1, 4, err, sizeof err), 0);
    CHECK_RC(fb__inject_parse("kill:rank=0,step=3,attempt=*", &p, err, sizeof err), 0);
    CHECK_RC(fb__inject_check_job(&p, 1, 0, err, sizeof err), 0);
}

/* fb__write_file_replace never syncs (lateness.prom, rewritten on the
 * detection loop, must not wait on a slow file system): in a child whose
 * fsync, fdatasync and syncfs fail with EIO (seccomp), it still replaces
 * the file whole, where fb__write_file_atomic fails. */
static void test_replace_unsynced(const char *dir)
{
    char path[300];
    snprintf(path, sizeof path, "%s/replaced", dir);
    pid_t pid = fork();
    if (pid == 0) {
        struct sock_filter f[] = {
            BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
            BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_fsync, 3, 0),
            BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_fdatasync, 2, 0),
            BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_syncfs, 1, 0),
            BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
            BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EIO),
        };
        struct sock_fprog prog = {.len = sizeof f / sizeof f[0], .filter = f};
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) ||
            prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog))
            _exit(3);
        if (fb__write_file_atomic(path, "old", 3) != -EIO)
            _exit(4); /* the filter does not bite: the test proves nothing */
        if (fb__write_file_replace(path, "new", 3) || fb__write_file_replace(path, "newer", 5))
            _exit(5);
        _exit(0);
    }
    int st = 0;
    CHECK(pid > 0 && waitpid(pid, &st, 0) == pid);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %#x (3: no seccomp, "
           "4: fsync not failing, 5: the replace synced)", st);
    char *buf = NULL;
    size_t len = 0;
    CHECK_RC(fb__read_file(path, 4096, &buf, &len), 0);
    CHECKF(len == 5 && !memcmp(buf, "newer", 5), "replaced file '%.*s'", (int)len,
           buf ? buf : "");
    free(buf);
    unlink(path);
}

/* Files from outside: a FIFO or a directory in place of a file is refused
 * at once, never waited on; control bytes never reach a terminal. */
static void test_files(void)
{
    char dir[] = "/tmp/fb-test-common-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    check_tmpdir(dir);
    char fifo[256], reg[256];
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    snprintf(reg, sizeof reg, "%s/reg", dir);
    CHECKF(mkfifo(fifo, 0600) == 0, "mkfifo %s: %s", fifo, strerror(errno));
    char *buf = NULL;
    size_t len = 0;
    CHECK_RC(fb__read_file(fifo, 4096, &buf, &len), FB_ENOTREG);
    CHECK_RC(fb__read_file(dir, 4096, &buf, &len), FB_ENOTREG);
    CHECK_RC(fb__open_regular("/dev/null", 0), FB_ENOTREG);
    CHECK_RC(fb__write_file_atomic(reg, "abc", 3), 0);
    CHECK_RC(fb__read_file(reg, 4096, &buf, &len), 0);
    CHECK_EQ_U64(len, 3);
    CHECK_EQ_STR(buf, "abc");
    free(buf);
    int fd = fb__open_regular(reg, 0);
    CHECK(fd >= 0 && !(fcntl(fd, F_GETFL) & O_NONBLOCK));
    if (fd >= 0)
        close(fd);
    CHECK(strcmp(fb_strerror(FB_ENOTREG), "unknown error") != 0);
    test_replace_unsynced(dir);
    /* The atomic write's temporary file is never one planted beside it:
     * a symlink at the old predictable name (PATH.tmp.PID) is left alone
     * and its target untouched; a FIFO (or a device) at PATH is refused,
     * not replaced; a symlink at PATH is replaced, never followed. */
    {
        char victim[300], planted[300], link[300];
        snprintf(victim, sizeof victim, "%s/victim", dir);
        snprintf(planted, sizeof planted, "%s.tmp.%d", reg, (int)getpid());
        snprintf(link, sizeof link, "%s/link", dir);
        CHECK_RC(fb__write_file_atomic(victim, "precious", 8), 0);
        CHECK(symlink(victim, planted) == 0);
        CHECK_RC(fb__write_file_atomic(reg, "abc", 3), 0);
        CHECK_RC(fb__read_file(victim, 4096, &buf, &len), 0);
        CHECKF(len == 8 && !memcmp(buf, "precious", 8), "victim now '%s'", buf);
        free(buf);
        struct stat st;
        CHECK(lstat(planted, &st) == 0 && S_ISLNK(st.st_mode));
        CHECK_RC(fb__write_file_atomic(fifo, "x", 1), FB_ENOTREG);
        CHECK(lstat(fifo, &st) == 0 && S_ISFIFO(st.st_mode));
        CHECK(symlink(victim, link) == 0);
        CHECK_RC(fb__write_file_atomic(link, "xyz", 3), 0);
        mode_t um = umask(022);
        CHECK(lstat(link, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0777) == 0644);
        umask(077); /* the supervisor's: its files 0600 (0644 ignored it) */
        CHECK_RC(fb__write_file_atomic(link, "xyz", 3), 0);
        CHECK(lstat(link, &st) == 0 && (st.st_mode & 0777) == 0600);
        umask(um);
        CHECK_RC(fb__read_file(victim, 4096, &buf, &len), 0);
        CHECK(len == 8);
        free(buf);
        /* A log someone replaced: a FIFO (the open would wait for a
         * reader for good) or a symlink at the path is removed and a
         * regular file made in its place, the symlink's target untouched;
         * a regular file is appended to. */
        char log[300];
        snprintf(log, sizeof log, "%s/log", dir);
        CHECK(mkfifo(log, 0600) == 0);
        alarm(10); /* a blocked open fails the test instead of hanging it */
        fd = fb__open_append_regular(log, 0644);
        CHECKF(fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode), "fd %d", fd);
        CHECK(fd < 0 || (fcntl(fd, F_GETFL) & (O_APPEND | O_NONBLOCK)) == O_APPEND);
        CHECK(fd < 0 || write(fd, "a", 1) == 1);
        if (fd >= 0)
            close(fd);
        fd = fb__open_append_regular(log, 0644);
        CHECK(fd < 0 || write(fd, "b", 1) == 1);
        if (fd >= 0)
            close(fd);
        CHECK_RC(fb__read_file(log, 4096, &buf, &len), 0);
        CHECK(len == 2 && !memcmp(buf, "ab", 2));
        free(buf);
        unlink(log);
        CHECK(symlink(victim, log) == 0);
        fd = fb__open_append_regular(log, 0644);
        CHECK(fd >= 0 && lstat(log, &st) == 0 && S_ISREG(st.st_mode));
        if (fd >= 0)
            close(fd);
        alarm(0);
        CHECK_RC(fb__read_file(victim, 4096, &buf, &len), 0);
        CHECK(len == 8);
        free(buf);
        unlink(log);
        /* fb__rm_rf removes a symlink inside the tree, never what it
         * names; a tree deeper than 64 levels is refused past them */
        char tree[300], path[4096];
        snprintf(tree, sizeof tree, "%s/tree", dir);
        snprintf(path, sizeof path, "%s/a", tree);
        CHECK(fb__mkdir_p(path, 0700) == 0);
        snprintf(path, sizeof path, "%s/a/s", tree);
        CHECK(symlink(dir, path) == 0);
        CHECK_RC(fb__rm_rf(tree), 0);
        CHECK(lstat(tree, &st) != 0 && lstat(victim, &st) == 0);
        int at = snprintf(path, sizeof path, "%s", tree);
        for (int i = 0; i < 70; i++)
            at += snprintf(path + at, sizeof path - (size_t)at, "/d");
        CHECK(fb__mkdir_p(path, 0700) == 0);
        CHECK_RC(fb__rm_rf(tree), -ELOOP);
        CHECK(lstat(tree, &st) == 0);
        path[strlen(tree) + 2 * 40] = '\0'; /* 40 levels below tree: one deep enough */
        CHECK_RC(fb__rm_rf(path), 0);
        CHECK_RC(fb__rm_rf(tree), 0);
        CHECK(lstat(tree, &st) != 0);
        unlink(planted);
        unlink(link);
        unlink(victim);
    }
    /* The error table: dense, FB_ELAST_ one past its last code, and every
     * code named; the version string is the header's. */
    CHECK_EQ_INT(FB_ELAST_, FB_ENOTOURS - 1);
    for (int c = FB__ERRNO_BASE; c > FB_ELAST_; c--)
        CHECKF(strcmp(fb_strerror(c), "unknown error"), "code %d", c);
    CHECK_EQ_STR(fb_strerror(FB_ELAST_), "unknown error");
    CHECK_EQ_STR(fb_version(), FB_VERSION_STRING);
    char v[32];
    snprintf(v, sizeof v, "%d.%d.%d", FB_VERSION_MAJOR, FB_VERSION_MINOR,
             FB_VERSION_PATCH);
    CHECK_EQ_STR(fb_version(), v);
    /* The head of a log: whole when it fits (exactly the bound too), else
     * cut after the last newline within the bound; a first line longer
     * than the bound gives nothing rather than part of a line. */
    int cut = -1;
    CHECK_RC(fb__read_file_head(reg, 3, &buf, &len, &cut), 0);
    CHECK(len == 3 && cut == 0 && !strcmp(buf, "abc"));
    free(buf);
    CHECK_RC(fb__write_file_atomic(reg, "one\ntwo\nthree\n", 14), 0);
    CHECK_RC(fb__read_file_head(reg, 12, &buf, &len, &cut), 0);
    CHECK(len == 8 && cut == 1 && !strcmp(buf, "one\ntwo\n"));
    free(buf);
    CHECK_RC(fb__read_file_head(reg, 14, &buf, &len, &cut), 0);
    CHECK(len == 14 && cut == 0);
    free(buf);
    CHECK_RC(fb__read_file_head(reg, 2, &buf, &len, &cut), 0);
    CHECK(len == 0 && cut == 1 && buf[0] == '\0');
    free(buf);
    CHECK_RC(fb__read_file_head(reg, 12, &buf, NULL, NULL), 0); /* both optional */
    CHECK(!strcmp(buf, "one\ntwo\n"));
    free(buf);
    CHECK_RC(fb__read_file_head(fifo, 4096, &buf, &len, &cut), FB_ENOTREG);
    /* fb__read_file's bound holds below 4 KiB, and a file of exactly the
     * bound fits (both were wrong: a 14-byte file passed a bound of 13,
     * and one of 4,096 bytes failed a bound of 4,096). */
    CHECK_RC(fb__read_file(reg, 13, &buf, &len), FB_ETOOBIG);
    buf = NULL;
    CHECK_RC(fb__read_file(reg, 14, &buf, &len), 0);
    CHECK(buf && len == 14);
    free(buf);
    {
        char page[4096];
        memset(page, 'x', sizeof page);
        CHECK_RC(fb__write_file_atomic(reg, page, sizeof page), 0);
        buf = NULL;
        CHECK_RC(fb__read_file(reg, 4096, &buf, &len), 0);
        CHECK(buf && len == 4096 && buf[4096] == '\0');
        free(buf);
        CHECK_RC(fb__read_file(reg, 4095, &buf, &len), FB_ETOOBIG);
    }
    {
        /* Past the first 4 KiB the buffer grows, for both: 1,000 lines of
         * 10 bytes, the head cut within a bound that is not a line's end. */
        char big[10000];
        for (int i = 0; i < 1000; i++)
            memcpy(big + 10 * i, "123456789\n", 10);
        CHECK_RC(fb__write_file_atomic(reg, big, sizeof big), 0);
        CHECK_RC(fb__read_file(reg, 10000, &buf, &len), 0);
        CHECK(len == 10000 && !memcmp(buf, big, len) && buf[len] == '\0');
        free(buf);
        CHECK_RC(fb__read_file(reg, 9999, &buf, &len), FB_ETOOBIG);
        CHECK_RC(fb__read_file_head(reg, 9005, &buf, &len, &cut), 0);
        CHECK(len == 9000 && cut == 1 && buf[len] == '\0' && !memcmp(buf, big, len));
        free(buf);
        CHECK_RC(fb__read_file_head(reg, 20000, &buf, &len, &cut), 0);
        CHECK(len == 10000 && cut == 0);
        free(buf);
        CHECK_RC(fb__read_file(reg, SIZE_MAX, &buf, &len), -EINVAL);
    }
    unlink(fifo);
    unlink(reg);
    rmdir(dir);

    char out[16];
    CHECK_EQ_STR(fb__safe_text(out, sizeof out, "a\033[2Jb\tc\x7f"), "a?[2Jb\tc?");
    CHECK_EQ_STR(fb__safe_text(out, 4, "abcdef"), "abc");
    CHECK_EQ_STR(fb__safe_text(out, sizeof out, NULL), "");
    /* C1 CSI as a UTF-8 character and as a lone 8-bit byte; valid UTF-8
     * (e-acute, a 4-byte emoji) passes; no character is cut at the end. */
    CHECK_EQ_STR(fb__safe_text(out, sizeof out, "a\xc2\x9b" "2J\x9b" "b"), "a?2J?b");
    CHECK_EQ_STR(fb__safe_text(out, sizeof out, "\xc3\xa9\xf0\x9f\x98\x80"),
                 "\xc3\xa9\xf0\x9f\x98\x80");
    CHECK_EQ_STR(fb__safe_text(out, 3, "a\xc3\xa9"), "a");
    CHECK_EQ_STR(fb__safe_text(out, sizeof out, "\xed\xa0\x80\xc0\xaf\xff"), "??????");
}

/* Text into HTML or XML: markup escaped, controls and bytes that are not
 * UTF-8 as U+FFFD, valid characters as they are (report's pages, sim's
 * SVG, which wrote a byte that is not UTF-8 as it came). */
static void test_markup(void)
{
    char *got = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&got, &n);
    CHECK(f != NULL);
    if (!f)
        return;
    fb__markup_text(f, "a<b>&\"c'\td\ne\x01\x7f\xff\xc2\x9b\xc3\xa9\xf0\x9f\x98\x80");
    fb__markup_text(f, NULL);
    fb__markup_text(f, "|\xed\xa0\x80|\xe2\x82");
    fclose(f);
    CHECK_EQ_STR(got, "a&lt;b&gt;&amp;&quot;c&#39;\td\ne&#xFFFD;&#xFFFD;&#xFFFD;&#xFFFD;"
                      "\xc3\xa9\xf0\x9f\x98\x80|&#xFFFD;&#xFFFD;&#xFFFD;|&#xFFFD;&#xFFFD;");
    free(got);
}

/* The run directory's layout (src/common/rundir.h): the names the
 * supervisor writes and the tools look for. */
static void test_rundir(void)
{
    char dir[] = "/tmp/fb-test-rundir-XXXXXX", p[512], q[512], got[512];
    CHECK(mkdtemp(dir) != NULL);
    check_tmpdir(dir);
    CHECK_RC(fb__rundir_path(p, sizeof p, "r", FB__RUNDIR_JOURNAL, 0), 0);
    CHECK_EQ_STR(p, "r/journal.sqlite");
    CHECK_RC(fb__rundir_path(p, sizeof p, "r", FB__RUNDIR_CKPT, 0), 0);
    CHECK_EQ_STR(p, "r/checkpoints");
    CHECK_RC(fb__rundir_path(p, sizeof p, "r", FB__RUNDIR_LOGS, 0), 0);
    CHECK_EQ_STR(p, "r/logs");
    CHECK_RC(fb__rundir_path(p, sizeof p, "r", FB__RUNDIR_FR, 0), 0);
    CHECK_EQ_STR(p, "r/fr");
    CHECK_RC(fb__rundir_path(p, sizeof p, "r", FB__RUNDIR_FR_ATTEMPT, 12), 0);
    CHECK_EQ_STR(p, "r/fr/attempt-12");
    CHECK_RC(fb__rundir_path(p, sizeof p, "r", FB__RUNDIR_FR_TORCH, 3), 0);
    CHECK_EQ_STR(p, "r/fr/torch/attempt-3");
    CHECK_RC(fb__rundir_path(p, sizeof p, "r", FB__RUNDIR_MPIRUN_LOG, 0), 0);
    CHECK_EQ_STR(p, "r/logs/mpirun.log");
    CHECK_RC(fb__rundir_path(p, sizeof p, "r", FB__RUNDIR_MPIRUN_OUT, 2), 0);
    CHECK_EQ_STR(p, "r/logs/mpirun-attempt-2");
    CHECK_RC(fb__rundir_path(p, sizeof p, "r", FB__RUNDIR_SLURM_LOGS, 0), 0);
    CHECK_EQ_STR(p, "r/logs/slurm-attempt-0");
    /* no run: the part as messages name it, inside the run */
    CHECK_RC(fb__rundir_path(p, sizeof p, NULL, FB__RUNDIR_MPIRUN_LOG, 0), 0);
    CHECK_EQ_STR(p, "logs/mpirun.log");
    CHECK_RC(fb__rundir_path(p, sizeof p, NULL, FB__RUNDIR_FR_TORCH, 7), 0);
    CHECK_EQ_STR(p, "fr/torch/attempt-7");
    CHECK_RC(fb__rundir_fr_path(p, sizeof p, "x/fr", FB__RUNDIR_FR_TORCH, 3), 0);
    CHECK_EQ_STR(p, "x/fr/torch/attempt-3");
    CHECK_RC(fb__rundir_fr_path(p, sizeof p, "x/fr", FB__RUNDIR_CKPT, 3), -EINVAL);
    CHECK_RC(fb__rundir_path(p, 12, "r", FB__RUNDIR_FR_ATTEMPT, 12), -ENAMETOOLONG);

    /* a run: its journal a file, its other parts directories */
    char run[256], fr[300], logs[300];
    snprintf(run, sizeof run, "%s/run", dir);
    snprintf(fr, sizeof fr, "%s/fr", run);
    snprintf(logs, sizeof logs, "%s/logs/a/b", run);
    CHECK_RC(fb__mkdir_p(logs, 0700), 0);
    CHECK_RC(fb__mkdir_p(fr, 0700), 0);
    CHECK(!fb__rundir_has(run, FB__RUNDIR_JOURNAL, 0, p, sizeof p));
    CHECK(!fb__rundir_enclosing(logs, got, sizeof got)); /* no journal yet */
    CHECK_RC(fb__rundir_path(p, sizeof p, run, FB__RUNDIR_JOURNAL, 0), 0);
    CHECK_RC(fb__write_file_atomic(p, "", 0), 0);
    CHECK(fb__rundir_has(run, FB__RUNDIR_JOURNAL, 0, q, sizeof q));
    CHECK_EQ_STR(q, p);
    CHECK(fb__rundir_has(run, FB__RUNDIR_FR, 0, q, sizeof q));
    CHECK(!fb__rundir_has(run, FB__RUNDIR_CKPT, 0, q, sizeof q));
    CHECK(!fb__rundir_has(run, FB__RUNDIR_MPIRUN_LOG, 0, q, sizeof q));
    CHECK_RC(fb__rundir_path(p, sizeof p, run, FB__RUNDIR_MPIRUN_LOG, 0), 0);
    CHECK_RC(fb__write_file_atomic(p, "x", 1), 0); /* a file, as the journal */
    CHECK(fb__rundir_has(run, FB__RUNDIR_MPIRUN_LOG, 0, q, sizeof q));
    snprintf(p, sizeof p, "%s/checkpoints", run); /* a file, not a directory */
    CHECK_RC(fb__write_file_atomic(p, "x", 1), 0);
    CHECK(!fb__rundir_has(run, FB__RUNDIR_CKPT, 0, q, sizeof q));

    /* its attempts: the highest number, directories only, whole names */
    int count = -1;
    CHECK_EQ_INT((int)fb__rundir_newest_attempt(fr, &count), -1);
    CHECK_EQ_INT(count, 0);
    const char *dirs[] = {"attempt-2", "attempt-10", "attempt-9", "attempt-x",
                          "attempt-11x", "attempt--3", "xattempt-50",
                          "attempt-99999999999999999999999"};
    for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
        snprintf(p, sizeof p, "%s/%s", fr, dirs[i]);
        CHECK_RC(fb__mkdir_p(p, 0700), 0);
    }
    snprintf(p, sizeof p, "%s/attempt-40", fr); /* a file */
    CHECK_RC(fb__write_file_atomic(p, "", 0), 0);
    CHECK_EQ_INT((int)fb__rundir_newest_attempt(fr, &count), 10);
    CHECK_EQ_INT(count, 3);
    snprintf(p, sizeof p, "%s/nothere", fr);
    CHECK_EQ_INT((int)fb__rundir_newest_attempt(p, &count), -1);
    CHECK_EQ_INT(count, 0);

    /* the run a path is inside: the nearest parent with a journal, from a
     * path as written, "." and ".." included */
    CHECK(fb__rundir_enclosing(logs, got, sizeof got));
    CHECK_EQ_STR(got, run);
    CHECK(!fb__rundir_enclosing(run, got, sizeof got));
    CHECK(!fb__rundir_enclosing("/", got, sizeof got));
    char cwd[512];
    CHECK(getcwd(cwd, sizeof cwd) != NULL);
    CHECK(chdir(logs) == 0);
    got[0] = '\0';
    CHECK(fb__rundir_enclosing(".", got, sizeof got));
    CHECK_EQ_STR(got, run);
    CHECK(fb__rundir_enclosing("..", got, sizeof got));
    CHECK_EQ_STR(got, run);
    CHECK(!fb__rundir_enclosing("nothere", got, sizeof got));
    CHECK(!fb__rundir_enclosing(".", got, 8)); /* does not fit */
    CHECK(chdir(cwd) == 0);

    /* where the runs are: right below, in runs/, around */
    fb__rundir_where *w = malloc(sizeof *w);
    CHECK(w != NULL);
    if (!w) {
        fb__rm_rf(dir);
        return;
    }
    fb__rundir_where_find(dir, w); /* DIR holds run/ */
    CHECK_EQ_INT(w->runs, 1);
    CHECK_EQ_STR(w->below, dir);
    CHECK_EQ_STR(w->newest, run);
    char say[1024], want[1024];
    CHECK_EQ_INT(fb__rundir_where_say(w, dir, say, sizeof say), FB__RUNDIR_WHERE_BELOW);
    snprintf(want, sizeof want, "it holds 1 run directory (the newest %s)", run);
    CHECK_EQ_STR(say, want);
    char runs[300], r2[320];
    snprintf(runs, sizeof runs, "%s/runs", run);  /* a second run, in run/runs/, newer */
    snprintf(r2, sizeof r2, "%s/b", runs);
    CHECK_RC(fb__mkdir_p(r2, 0700), 0);
    snprintf(p, sizeof p, "%s/journal.sqlite", r2);
    CHECK_RC(fb__write_file_atomic(p, "", 0), 0);
    fb__rundir_where_find(logs, w);                /* inside run */
    CHECK_EQ_INT(w->runs, 0);
    CHECK_EQ_STR(w->inside, run);
    CHECK_EQ_INT(fb__rundir_where_say(w, logs, say, sizeof say), FB__RUNDIR_WHERE_INSIDE);
    snprintf(want, sizeof want, "it is inside the run directory %s", run);
    CHECK_EQ_STR(say, want);
    fb__rundir_where_find(runs, w);                /* b right below */
    CHECK_EQ_INT(w->runs, 1);
    CHECK_EQ_STR(w->newest, r2);
    snprintf(p, sizeof p, "%s/logs", run);         /* run/logs/runs/b: in runs/ */
    snprintf(q, sizeof q, "%s/logs/runs/c", run);
    CHECK_RC(fb__mkdir_p(q, 0700), 0);
    snprintf(got, sizeof got, "%s/journal.sqlite", q);
    CHECK_RC(fb__write_file_atomic(got, "", 0), 0);
    fb__rundir_where_find(p, w);
    CHECK_EQ_INT(w->runs, 1);
    snprintf(got, sizeof got, "%s/runs", p);
    CHECK_EQ_STR(w->below, got);
    CHECK_EQ_STR(w->newest, q);
    CHECK_EQ_INT(fb__rundir_where_say(w, p, say, sizeof say), FB__RUNDIR_WHERE_BELOW);
    snprintf(want, sizeof want, "%s holds 1 run directory (the newest %s)", got, q);
    CHECK_EQ_STR(say, want);
    fb__rundir_where_find("/nonexistent-fb-dir", w);
    CHECK_EQ_INT(w->runs, 0);
    CHECK_EQ_STR(w->inside, "");
    CHECK_EQ_INT(fb__rundir_where_say(w, "/nonexistent-fb-dir", say, sizeof say), 0);
    CHECK_EQ_STR(say, "");
    free(w);
    CHECK_RC(fb__rm_rf(dir), 0);
}

/* Another thread's message while the main thread keeps its own. */
static void *say_elsewhere(void *arg)
{
    (void)arg;
    fb__say("from another thread\n");
    return NULL;
}

/* libfirebreak's messages (lib/lib.h): one line each on stderr, or kept
 * for a caller (the Python binding) on the thread that asked. */
static void test_say(void)
{
    char path[] = "/tmp/fb-test-say-XXXXXX";
    int fd = mkstemp(path), saved = dup(2);
    CHECK(fd >= 0 && saved >= 0);
    fflush(stderr);
    dup2(fd, 2);
    fb__say("to stderr %d\n", 1); /* the trailing newline is not doubled */
    fb__say_to_keeper("for a keeper only"); /* none here: nowhere */
    fb__say_buf b;
    fb__say_keep(&b);
    fb__say("kept %s", "one");
    fb__say_to_keeper("kept two\n");
    pthread_t t;
    CHECK(pthread_create(&t, NULL, say_elsewhere, NULL) == 0);
    pthread_join(t, NULL);
    fb__say_keep(NULL);
    fb__say("to stderr %d", 2);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    CHECK_EQ_STR(b.text, "kept one\nkept two");
    CHECK_EQ_U64(b.len, strlen(b.text));
    char *got = NULL;
    size_t len = 0;
    CHECK_RC(fb__read_file(path, 4096, &got, &len), 0);
    CHECK_EQ_STR(got ? got : "", "firebreak: to stderr 1\nfirebreak: from another "
                                 "thread\nfirebreak: to stderr 2\n");
    free(got);
    close(fd);
    unlink(path);

    /* more than fits: whole messages, then "..." once, and the end */
    char line[300];
    memset(line, 'x', sizeof line - 1);
    line[sizeof line - 1] = '\0';
    fb__say_keep(&b);
    for (int i = 0; i < 20; i++)
        fb__say("%d %s", i, line);
    fb__say_keep(NULL);
    CHECK(b.cut && b.len == strlen(b.text) && b.len < sizeof b.text);
    CHECK(b.len >= 4 && !strcmp(b.text + b.len - 4, "\n..."));
    CHECK(!strncmp(b.text, "0 xxx", 5) && strstr(b.text, "\n5 xxx") && !strstr(b.text, "\n6 x"));
    /* a message longer than a line's bound is cut to it, not lost */
    char big[1500];
    memset(big, 'y', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    fb__say_keep(&b);
    fb__say("%s", big);
    fb__say_keep(NULL);
    CHECK(!b.cut && b.len == 1023 && b.text[0] == 'y');
}

/* Liveness by a held flock (fb__write_file_atomic_held): seen while held, by a pid
 * file naming a pid that is gone too (a pid of another pid namespace),
 * and no more once released. */
static void test_lock_liveness(void)
{
    char dir[] = "/tmp/fb-test-lock-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char pidfile[256];
    snprintf(pidfile, sizeof pidfile, "%s/pid", dir);
    /* pid 2^22+1 is past pid_max's ceiling: no such process here */
    CHECK_RC(fb__write_file_atomic(pidfile, "4194305\n", 8), 0);
    CHECK(fb__pid_file_gone(pidfile) == 1);
    CHECK(!fb__lock_held(pidfile));
    int fd = -1;
    CHECK_RC(fb__write_file_atomic_held(pidfile, "4194305\n", 8, &fd), 0);
    CHECK(fd >= 0);
    pid_t child = fork();
    if (child == 0) /* another process: the lock is seen from there */
        _exit(fb__lock_held(pidfile) && fb__pid_file_gone(pidfile) == 0 ? 0 : 1);
    int st = 0;
    CHECK(child > 0 && waitpid(child, &st, 0) == child && WIFEXITED(st) &&
          WEXITSTATUS(st) == 0);
    int again = fd; /* written again: the old descriptor is closed */
    CHECK_RC(fb__write_file_atomic_held(pidfile, "4194305\n", 8, &again), 0);
    CHECK(again >= 0 && fb__lock_held(pidfile));
    close(again);
    CHECK(!fb__lock_held(pidfile));
    CHECK(fb__pid_file_gone(pidfile) == 1);
    CHECK(!fb__lock_held("/dev/null") && !fb__lock_held(dir));
    fd = -1; /* a directory at the name: refused, nothing held */
    CHECK(fb__write_file_atomic_held(dir, "x", 1, &fd) == FB_ENOTREG && fd == -1);
    unlink(pidfile);
    rmdir(dir);
}

int main(void)
{
    test_files();
    test_lock_liveness();
    test_rundir();
    test_json();
    test_jsonw();
    test_units();
    test_inject();
    test_markup();
    test_say();
    if (failures)
        fprintf(stderr, "%d check(s) failed\n", failures);
    else
        printf("common: all checks passed\n");
    return failures ? 1 : 0;
}
