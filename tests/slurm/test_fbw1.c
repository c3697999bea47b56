/*
 * test_fbw1.c -- the fbw1 watcher protocol (src/supervisor/fbw1.h), its
 * one formatter and one parser:
 *   - samples/valid.txt: every line parses; samples/invalid.txt: every
 *     line is rejected;
 *   - round trip: every message kind, with values at its bounds, formatted
 *     and parsed back gives the same message;
 *   - the formatter refuses what the parser would refuse, and writes
 *     control bytes of free text as '?';
 *   - hostile lines (over-long, missing or extra fields, control bytes,
 *     bad numbers, NULs) are rejected, and a run of random and mutated
 *     lines never crashes and keeps the invariants (fuzz/fbw1_line.c
 *     fuzzes the same functions).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "supervisor/fbw1.h"
#include "../check.h"

static void each_line(const char *path, int want_ok)
{
    FILE *f = fopen(path, "r");
    CHECKF(f != NULL, "cannot open %s", path);
    if (!f)
        return;
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        size_t len = strcspn(line, "\n");
        fb__fbw1_msg m;
        int rc = fb__fbw1_parse(line, len, 8, &m);
        CHECKF(want_ok ? rc == 0 : rc == -EINVAL, "%s: '%.*s' gave %d", path,
               (int)len, line, rc);
        n++;
    }
    fclose(f);
    CHECKF(n > 5, "%s: only %d lines", path, n);
}

/* Field by field, naming the first that differs with both values. */
static int msg_eq(const fb__fbw1_msg *a, const fb__fbw1_msg *b, const char *what)
{
#define EQ_INT(f)                                                              \
    if (a->f != b->f) {                                                        \
        fprintf(stderr, "%s: " #f " %lld != %lld\n", what, (long long)a->f,    \
                (long long)b->f);                                              \
        return 0;                                                              \
    }
#define EQ_STR(f)                                                              \
    if (strcmp(a->f, b->f)) {                                                  \
        fprintf(stderr, "%s: " #f " '%s' != '%s'\n", what, a->f, b->f);        \
        return 0;                                                              \
    }
    EQ_INT(kind) EQ_STR(node) EQ_STR(host) EQ_INT(nodeid) EQ_INT(pid) EQ_INT(rank)
    EQ_INT(step) EQ_INT(phase) EQ_INT(age_ms) EQ_INT(how) EQ_INT(code)
    EQ_INT(verdict) EQ_STR(reason) EQ_INT(rep_idx) EQ_INT(rep_kind)
    EQ_INT(rep_code) EQ_INT(rep_step) EQ_INT(rep_bytes) EQ_INT(rep_v1)
    EQ_INT(rep_v2) EQ_INT(rep_wall_ns) EQ_STR(rep_text) EQ_INT(attempt) EQ_INT(count)
    EQ_INT(nkeep) EQ_INT(keep[0]) EQ_INT(keep[1])
#undef EQ_INT
#undef EQ_STR
    return 1;
}

/* Format m, check it is one line within bounds, parse it back: equal. */
static void round_trip(const fb__fbw1_msg *m, int max_rank, const char *what)
{
    char line[FB__FBW1_LINE_MAX + 2];
    fb__fbw1_msg back;
    int n = fb__fbw1_format(m, line, sizeof line);
    CHECKF(n > 1, "%s: format gave %d", what, n);
    if (n <= 1)
        return;
    CHECKF((size_t)n == strlen(line) && line[n - 1] == '\n' &&
           memchr(line, '\n', (size_t)n - 1) == NULL && n - 1 <= FB__FBW1_LINE_MAX,
           "%s: not one line: '%s'", what, line);
    int rc = fb__fbw1_parse(line, (size_t)n - 1, max_rank, &back);
    CHECKF(rc == 0, "%s: '%.*s' did not parse back (%d)", what, n - 1, line, rc);
    CHECKF(rc != 0 || msg_eq(m, &back, what), "%s: '%.*s' came back different",
           what, n - 1, line);
}

static fb__fbw1_msg msg(fb__fbw1_kind kind)
{
    fb__fbw1_msg m;
    memset(&m, 0, sizeof m);
    m.kind = kind;
    return m;
}

/* A message whose one field is a step (drop, send): a step, the largest,
 * and -1 refused. */
static void step_round_trips(fb__fbw1_kind kind, const char *what)
{
    char name[64], nope[64];
    fb__fbw1_msg m = msg(kind);
    m.step = 35;
    round_trip(&m, 1, what);
    m.step = FB__FBW1_STEP_MAX;
    snprintf(name, sizeof name, "%s at its bound", what);
    round_trip(&m, 1, name);
    m.step = -1;
    CHECKF(fb__fbw1_format(&m, nope, sizeof nope) == -EINVAL, "%s: step -1 formatted",
           what);
}

static void test_round_trips(void)
{
    fb__fbw1_msg m = msg(FB_FBW1_HELLO);
    snprintf(m.node, sizeof m.node, "gpu-node-17.cluster_a");
    m.nodeid = 3;
    m.pid = 4242;
    round_trip(&m, 8, "hello");
    snprintf(m.host, sizeof m.host, "gpu-node-17.cluster.example");
    round_trip(&m, 8, "hello with its host");
    m.nodeid = FB__FBW1_NODEID_MAX;
    m.pid = INT32_MAX;
    memset(m.node, 'n', FB__FBW1_NODE_MAX - 1);
    m.node[FB__FBW1_NODE_MAX - 1] = '\0';
    round_trip(&m, 8, "hello at its bounds");

    m = msg(FB_FBW1_ATTACH);
    m.rank = 7;
    m.pid = 1;
    round_trip(&m, 8, "attach");

    m = msg(FB_FBW1_BEAT);
    m.rank = 0;
    m.step = -1;
    round_trip(&m, 1, "beat before the first step");
    m.rank = 8191;
    m.step = INT64_MAX;
    m.phase = FB__FBW1_PHASE_MAX;
    m.age_ms = INT64_MAX;
    round_trip(&m, 8192, "beat at its bounds");

    static const fb__fbw1_end_how hows[] = {FB_FBW1_END_EXIT, FB_FBW1_END_SIGNAL,
                                            FB_FBW1_END_FINALIZED, FB_FBW1_END_VANISHED};
    for (size_t i = 0; i < sizeof hows / sizeof hows[0]; i++) {
        m = msg(FB_FBW1_END);
        m.rank = 3;
        m.how = hows[i];
        m.code = hows[i] == FB_FBW1_END_SIGNAL ? 9 : hows[i] == FB_FBW1_END_EXIT ? -255 : 0;
        round_trip(&m, 4, fb__fbw1_end_how_name(hows[i]));
    }

    static const fb__fbw1_verdict verdicts[] = {FB_FBW1_OK, FB_FBW1_WARN, FB_FBW1_FAIL,
                                                FB_FBW1_ERROR};
    for (size_t i = 0; i < sizeof verdicts / sizeof verdicts[0]; i++) {
        m = msg(FB_FBW1_HEALTH);
        m.verdict = verdicts[i];
        snprintf(m.node, sizeof m.node, "node3");
        snprintf(m.reason, sizeof m.reason, " firebreak: two  spaces, UTF-8 \xc3\xa9 ");
        round_trip(&m, 1, fb__fbw1_verdict_name(verdicts[i]));
    }
    m.reason[0] = '\0';
    round_trip(&m, 1, "health without a reason");
    memset(m.reason, 'r', sizeof m.reason - 1);
    m.reason[sizeof m.reason - 1] = '\0';
    memset(m.node, 'n', FB__FBW1_NODE_MAX - 1);
    m.node[FB__FBW1_NODE_MAX - 1] = '\0';
    round_trip(&m, 1, "health at its bounds");

    m = msg(FB_FBW1_BYE);
    snprintf(m.node, sizeof m.node, "node4");
    round_trip(&m, 1, "bye");
    m.kind = FB_FBW1_ALIVE;
    round_trip(&m, 1, "alive");
    m.node[0] = '\0';
    char nope[64];
    CHECK_RC(fb__fbw1_format(&m, nope, sizeof nope), -EINVAL);

    m = msg(FB_FBW1_SNAP);
    m.attempt = 3;
    round_trip(&m, 1, "snap");
    m.attempt = FB__FBW1_ATTEMPT_MAX;
    round_trip(&m, 1, "snap at its bound");
    m.attempt = FB__FBW1_ATTEMPT_MAX + 1;
    CHECK_RC(fb__fbw1_format(&m, nope, sizeof nope), -EINVAL);
    m = msg(FB_FBW1_SNAPPED);
    snprintf(m.node, sizeof m.node, "node2");
    m.attempt = 1;
    m.count = 0;
    round_trip(&m, 1, "snapped, nothing written");
    m.count = FB__FBW1_COUNT_MAX;
    round_trip(&m, 1, "snapped at its bound");
    m.count = FB__FBW1_COUNT_MAX + 1;
    CHECK_RC(fb__fbw1_format(&m, nope, sizeof nope), -EINVAL);

    m = msg(FB_FBW1_PEER);
    snprintf(m.node, sizeof m.node, "node3");
    m.step = 35;
    m.rank = 2;
    m.count = 2;
    round_trip(&m, 4, "peer");
    m.step = FB__FBW1_STEP_MAX;
    m.rank = 0;
    m.count = 8192;
    round_trip(&m, 8192, "peer at its bounds");
    m.count = 0;
    CHECK_RC(fb__fbw1_format(&m, nope, sizeof nope), -EINVAL);
    m.count = 1;
    m.step = FB__FBW1_STEP_MAX + 1;
    CHECK_RC(fb__fbw1_format(&m, nope, sizeof nope), -EINVAL);
    step_round_trips(FB_FBW1_DROP, "drop");
    m = msg(FB_FBW1_DROP);
    m.step = 35; /* older steps kept: the newest safe one, the one in flight */
    m.nkeep = 1;
    m.keep[0] = 20;
    round_trip(&m, 1, "drop, one kept");
    m.nkeep = 2;
    m.keep[1] = 0;
    round_trip(&m, 1, "drop, two kept");
    m.step = FB__FBW1_STEP_MAX;
    m.keep[0] = FB__FBW1_STEP_MAX - 1;
    round_trip(&m, 1, "drop, kept at its bound");
    m.keep[0] = m.step; /* a kept step is older */
    CHECK_RC(fb__fbw1_format(&m, nope, sizeof nope), -EINVAL);
    m.keep[0] = -1;
    CHECK_RC(fb__fbw1_format(&m, nope, sizeof nope), -EINVAL);
    m.keep[0] = 1;
    m.nkeep = FB__FBW1_DROP_KEEP_MAX + 1;
    CHECK_RC(fb__fbw1_format(&m, nope, sizeof nope), -EINVAL);
    step_round_trips(FB_FBW1_SEND, "send");
    m = msg(FB_FBW1_KEEP);
    round_trip(&m, 1, "keep");

    m = msg(FB_FBW1_REPORT);
    m.rank = 2;
    m.rep_idx = 41;
    m.rep_kind = 7;
    m.rep_code = -4004;
    m.rep_step = 60;
    m.rep_wall_ns = 1764500000000000000ll;
    snprintf(m.rep_text, sizeof m.rep_text, "checkpoint 60 rejected: hash mismatch");
    round_trip(&m, 3, "report");
    m.rep_text[0] = '\0';
    round_trip(&m, 3, "report without text");
    m.rank = 0;
    m.rep_idx = m.rep_step = m.rep_bytes = m.rep_v1 = m.rep_v2 = m.rep_wall_ns = INT64_MAX;
    m.rep_kind = FB__FBW1_REPORT_KIND_MAX;
    m.rep_code = INT32_MIN;
    memset(m.rep_text, 't', sizeof m.rep_text - 1);
    m.rep_text[sizeof m.rep_text - 1] = '\0';
    round_trip(&m, 1, "report at its bounds");
}

static int fmt(const fb__fbw1_msg *m)
{
    char line[FB__FBW1_LINE_MAX + 2];
    return fb__fbw1_format(m, line, sizeof line);
}

static void test_format_refuses(void)
{
    fb__fbw1_msg m = msg(FB_FBW1_BEAT);
    m.phase = FB__FBW1_PHASE_MAX + 1;
    CHECK_RC(fmt(&m), -EINVAL);
    m.phase = 0;
    m.step = -2;
    CHECK_RC(fmt(&m), -EINVAL);
    m.step = 0;
    m.rank = -1;
    CHECK_RC(fmt(&m), -EINVAL);
    m = msg(FB_FBW1_END);
    m.how = FB_FBW1_END_EXIT;
    m.code = 256;
    CHECK_RC(fmt(&m), -EINVAL);
    m.code = 0;
    m.how = 0;
    CHECK_RC(fmt(&m), -EINVAL);
    m = msg(FB_FBW1_HELLO);
    snprintf(m.node, sizeof m.node, "node/3");
    m.pid = 1;
    CHECK_RC(fmt(&m), -EINVAL);
    snprintf(m.node, sizeof m.node, "node3");
    m.nodeid = FB__FBW1_NODEID_MAX + 1;
    CHECK_RC(fmt(&m), -EINVAL);
    m.nodeid = 0;
    m.pid = 0;
    CHECK_RC(fmt(&m), -EINVAL);
    m = msg(FB_FBW1_HEALTH);
    snprintf(m.node, sizeof m.node, "node3");
    CHECK_RC(fmt(&m), -EINVAL); /* no verdict */
    m = msg(FB_FBW1_REPORT);
    m.rep_kind = FB__FBW1_REPORT_KIND_MAX + 1;
    CHECK_RC(fmt(&m), -EINVAL);
    m.rep_kind = 0;
    m.rep_v1 = -1; /* a uint64 above INT64_MAX, cast */
    CHECK_RC(fmt(&m), -EINVAL);
    m = msg(0);
    CHECK_RC(fmt(&m), -EINVAL);
    m = msg(FB_FBW1_BYE);
    snprintf(m.node, sizeof m.node, "node3");
    char small[10];
    CHECK_RC(fb__fbw1_format(&m, small, sizeof small), -EMSGSIZE);
    CHECK_RC(fb__fbw1_format(&m, small, 0), -EMSGSIZE);

    /* Control bytes in free text go out as '?', and come back so. */
    m = msg(FB_FBW1_REPORT);
    snprintf(m.rep_text, sizeof m.rep_text, "a\tb\x1b[31mc\rd\x7f");
    char line[FB__FBW1_LINE_MAX + 2];
    int n = fb__fbw1_format(&m, line, sizeof line);
    CHECKF(n > 0 && strstr(line, " a?b?[31mc?d?\n"), "cleaned text: '%s'", line);
    fb__fbw1_msg back;
    CHECK_RC(fb__fbw1_parse(line, (size_t)n - 1, 1, &back), 0);
    CHECKF(!strcmp(back.rep_text, "a?b?[31mc?d?"), "text back: '%s'", back.rep_text);
}

static int parse(const char *l, int max_rank)
{
    fb__fbw1_msg m;
    return fb__fbw1_parse(l, strlen(l), max_rank, &m);
}

static void test_hostile(void)
{
    fb__fbw1_msg m;
    const char *l = "fbw1 end 3 signal 9";
    CHECKF(fb__fbw1_parse(l, strlen(l), 4, &m) == 0 && m.kind == FB_FBW1_END &&
           m.rank == 3 && m.how == FB_FBW1_END_SIGNAL && m.code == 9, "end fields");
    CHECK_RC(parse(l, 3), -EINVAL); /* rank == max_rank */
    CHECK_RC(parse(l, 0), -EINVAL);
    l = "fbw1 health node3 fail firebreak: a b  c";
    CHECKF(fb__fbw1_parse(l, strlen(l), 1, &m) == 0 && m.verdict == FB_FBW1_FAIL &&
           !strcmp(m.reason, "firebreak: a b  c") && !strcmp(m.node, "node3"),
           "reason kept whole");
    char nul[] = "fbw1 bye no\0de3";
    CHECK_RC(fb__fbw1_parse(nul, sizeof nul - 1, 1, &m), -EINVAL);
    CHECK_RC(fb__fbw1_parse("", 0, 1, &m), -EINVAL);
    CHECKF(m.kind == 0, "a rejected line leaves a cleared message");

    /* Length: FB__FBW1_LINE_MAX bytes is a line, one more is not. */
    char big[FB__FBW1_LINE_MAX + 2];
    memset(big, 'r', sizeof big);
    memcpy(big, "fbw1 health node3 ok ", 21);
    CHECK_RC(fb__fbw1_parse(big, FB__FBW1_LINE_MAX, 1, &m), 0);
    CHECK_RC(fb__fbw1_parse(big, FB__FBW1_LINE_MAX + 1, 1, &m), -EINVAL);
    CHECK_RC(fb__fbw1_parse(big, sizeof big, 1, &m), -EINVAL);

    /* Control bytes anywhere: in a text field, in a number, at the end. */
    static const char *const ctl[] = {
        "fbw1 health node3 ok reason\x1b[2J", "fbw1 beat 1 \t2 0 0",
        "fbw1 bye node3\r", "fbw1 report 0 0 2 0 30 0 0 0 0 bell\a",
        "fbw1 attach 1 2\x7f", "fbw1\x01 bye node3",
    };
    for (size_t i = 0; i < sizeof ctl / sizeof ctl[0]; i++)
        CHECKF(parse(ctl[i], 8) == -EINVAL, "control byte accepted in line %zu", i);

    /* Missing and extra fields of every kind. */
    static const char *const fields[] = {
        "fbw1 hello node3 2", "fbw1 hello node3 2 42 h7 8", "fbw1 attach 1",
        "fbw1 hello node3 2 42 h/7", "fbw1 hello node3 2 42 ",
        "fbw1 attach 1 2 3", "fbw1 beat 1 2 3", "fbw1 beat 1 2 3 4 5",
        "fbw1 end 1 exit", "fbw1 end 1 exit 0 0", "fbw1 health node3",
        "fbw1 bye", "fbw1 bye node3 node4", "fbw1 report 0 0 2 0 30 0 0 0",
        "fbw1 alive", "fbw1 alive node3 node4", "fbw1 alive node/3",
        "fbw1 snap", "fbw1 snap 1 2", "fbw1 snap -1", "fbw1 snap 1000001",
        "fbw1 snapped node2 1", "fbw1 snapped node2 1 2 3", "fbw1 snapped node/2 1 2",
        "fbw1 snapped node2 1 1025", "fbw1 snapped node2 -1 2", "fbw1 snap 1 ",
        "fbw1 peer node3 35 2", "fbw1 peer node3 35 2 2 2", "fbw1 peer node/3 35 2 2",
        "fbw1 peer node3 35 2 0", "fbw1 peer node3 35 6 3", "fbw1 peer node3 35 8 1",
        "fbw1 peer node3 -1 2 2", "fbw1 peer node3 10000000000 2 2",
        "fbw1 drop", "fbw1 drop 1 2", "fbw1 drop -1", "fbw1 drop 10000000000",
        "fbw1 drop 9 9", "fbw1 drop 9 10", "fbw1 drop 9 -1", "fbw1 drop 9 1 2 3",
        "fbw1 drop 9 x", "fbw1 drop 9 1 ", "fbw1 drop 0 0",
        "fbw1 send", "fbw1 send 1 2", "fbw1 send -1", "fbw1 send 10000000000",
        "fbw1 send x",
        "fbw1 keep 1", "fbw1 keep ", "fbw1 keepx",
        "fbw1 hello  node3 2 42", "fbw1 attach 1  2", "fbw1 beat 1 2 3 4 ",
        "fbw1 nope 1 2", "fbw2 bye node3", "fbw1", "fbw1 ",
    };
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        CHECKF(parse(fields[i], 8) == -EINVAL, "'%s' accepted", fields[i]);

    /* Numbers: plain decimal within bounds only. */
    static const char *const nums[] = {
        "+1", "0x1", "1e3", "1.0", "-", "--1", "1-", "9223372036854775808",
        "99999999999999999999", "-2", "",
    };
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
        char line[128];
        snprintf(line, sizeof line, "fbw1 beat 1 %s 0 0", nums[i]);
        CHECKF(parse(line, 8) == -EINVAL, "'%s' accepted", line);
        snprintf(line, sizeof line, "fbw1 attach 1 %s", nums[i]);
        CHECKF(parse(line, 8) == -EINVAL, "'%s' accepted", line);
    }
    CHECK_RC(parse("fbw1 beat 1 9223372036854775807 0 0", 8), 0);
    CHECK_RC(parse("fbw1 attach 1 2147483648", 8), -EINVAL);

    char name[80];
    memset(name, 'n', sizeof name);
    name[64] = '\0';
    CHECKF(!fb__fbw1_node_name_ok(name), "64-character node name accepted");
    name[63] = '\0';
    CHECKF(fb__fbw1_node_name_ok(name), "63-character node name rejected");
    CHECKF(!fb__fbw1_node_name_ok(""), "empty node name accepted");

    l = "fbw1 report 3 41 2 0 120 65536 1500000 4200000 1764500000000000000 shard rank 3";
    CHECKF(fb__fbw1_parse(l, strlen(l), 4, &m) == 0 && m.kind == FB_FBW1_REPORT &&
           m.rank == 3 && m.rep_idx == 41 && m.rep_kind == 2 && m.rep_step == 120 &&
           m.rep_bytes == 65536 && m.rep_v1 == 1500000 && m.rep_v2 == 4200000 &&
           !strcmp(m.rep_text, "shard rank 3"), "report line fields");
}

/* Random bytes and mutated valid lines: no crash (ASan runs this too), a
 * parsed message keeps its invariants and survives a second round trip. */
static void test_random(void)
{
    static const char *const seeds[] = {
        "fbw1 hello node3 2 4242", "fbw1 hello node3 2 4242 node3.example", "fbw1 attach 7 31337", "fbw1 beat 7 120 1 35",
        "fbw1 end 3 signal 11", "fbw1 health node3 fail reason here", "fbw1 bye node3", "fbw1 alive node3",
        "fbw1 report 0 17 7 -4004 60 0 0 0 1764500000000000000 checkpoint 60",
    };
    uint64_t x = 0x9e3779b97f4a7c15ull;
    int parsed = 0;
    for (int it = 0; it < 200000; it++) {
        char line[FB__FBW1_LINE_MAX + 64];
        size_t len;
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        if (it % 4 == 0) {
            len = x % sizeof line;
            for (size_t i = 0; i < len; i++) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                line[i] = (char)(x & 0xff);
            }
        } else {
            const char *s = seeds[x % (sizeof seeds / sizeof seeds[0])];
            len = strlen(s);
            memcpy(line, s, len);
            for (int k = 0; k < 1 + (int)(x >> 60) % 3; k++) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                size_t at = x % (len + 1);
                char c = "0123456789- \t\x1b-+xfbw1"[(x >> 32) % 22];
                if (at < len && (x >> 40) % 2)
                    line[at] = c;
                else if (len + 1 < sizeof line) {
                    memmove(line + at + 1, line + at, len - at);
                    line[at] = c;
                    len++;
                }
            }
        }
        fb__fbw1_msg m;
        int max_rank = 1 + (int)(x % 16);
        if (fb__fbw1_parse(line, len, max_rank, &m) != 0)
            continue;
        parsed++;
        CHECKF(memchr(m.node, '\0', sizeof m.node) && memchr(m.reason, '\0', sizeof m.reason) &&
               memchr(m.rep_text, '\0', sizeof m.rep_text), "unterminated text");
        CHECKF(m.rank >= 0 && m.rank < max_rank, "rank %d, max %d", m.rank, max_rank);
        round_trip(&m, max_rank, "a random line, parsed");
        if (failures > 20)
            break;
    }
    CHECKF(parsed > 1000, "only %d random lines parsed: the mutations are too wild", parsed);
}

/* The line splitter both ends read with: lines cut across reads come
 * whole, an over-long line is skipped to its end, never delivered. */
static char got_lines[8][FB__FBW1_LINE_MAX + 1];
static int ngot;

static void collect(void *ctx, const char *line, size_t n)
{
    (void)ctx;
    if (ngot < 8)
        snprintf(got_lines[ngot], sizeof got_lines[ngot], "%.*s", (int)n, line);
    ngot++;
}

static void test_lines(void)
{
    static char buf[2 * FB__FBW1_LINE_MAX];
    int dropping = 0;
    size_t len = 0;
    const char *parts[] = {"fbw1 snap 1\nfbw1 sna", "pped node2 1 4\n", "fbw1 al"};
    for (size_t i = 0; i < 3; i++) {
        size_t n = strlen(parts[i]);
        memcpy(buf + len, parts[i], n);
        len = fb__fbw1_lines(buf, len + n, &dropping, collect, NULL);
    }
    CHECKF(ngot == 2 && !strcmp(got_lines[0], "fbw1 snap 1") &&
           !strcmp(got_lines[1], "fbw1 snapped node2 1 4") && len == 7 && !dropping,
           "lines across reads: %d lines, %zu left", ngot, len);
    /* Over-long: the rest of the line is skipped, the next one is read. */
    len = 0;
    ngot = 0;
    memset(buf, 'x', FB__FBW1_LINE_MAX);
    len = fb__fbw1_lines(buf, FB__FBW1_LINE_MAX, &dropping, collect, NULL);
    CHECKF(len == 0 && dropping, "over-long line kept (%zu)", len);
    memcpy(buf, "xxxx\nfbw1 bye node1\n", 20);
    len = fb__fbw1_lines(buf, 20, &dropping, collect, NULL);
    CHECKF(ngot == 1 && !strcmp(got_lines[0], "fbw1 bye node1") && len == 0 && !dropping,
           "after an over-long line: %d lines '%s'", ngot, got_lines[0]);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_fbw1 SAMPLES_DIR\n");
        return 2;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/valid.txt", argv[1]);
    each_line(path, 1);
    snprintf(path, sizeof path, "%s/invalid.txt", argv[1]);
    each_line(path, 0);
    test_round_trips();
    test_format_refuses();
    test_hostile();
    test_random();
    test_lines();
    if (failures)
        return 1;
    printf("ok: fbw1 format and parse\n");
    return 0;
}
