/*
 * test_peer.c -- the peer tier's two node-side parts (src/supervisor/peer.c)
 * on loopback, without a cluster:
 *   - a watcher's receiver (fb__peer_start): shards sent with fbr1 land in
 *     <mem_dir>/peer, verified by its scrub after they arrived, it says
 *     what it holds as `fbw1 peer` lines (one per run of consecutive
 *     ranks); a shard corrupted in the sender's memory arrives, the scrub
 *     drops it, and no line says the node holds it;
 *   - under --memory-ckpt-max, a copy that would not fit beside what the
 *     node holds (own steps, peer copies, the receive pool) is refused;
 *   - `fbw1 drop` (fb__peer_drop_older): the older steps leave node
 *     memory, own shards and peer copies;
 *   - `firebreak watch --mem-fetch` (fb__peer_fetch_here): node "a" sends
 *     rank 1's shard of a step from its memory to node "b", which stores it
 *     in its peer directory; a plan naming a shard that is not there fails.
 *   - two senders at once: the second is served while the first's
 *     connection is open (a node is the peer of K others);
 *   - a sender meeting a step dropped meanwhile: quiet (debug) on the
 *     lane of the node's newest step, said on the named steps' lane;
 *   - the idle-priority scrub starved of CPU holds up none of the node's
 *     other work;
 *   - under --memory-ckpt-max, 8 senders at once never take the node past
 *     its cap (one reservation for all the receiver's slots); those
 *     refused are answered -ENOSPC;
 *   - a peer that takes the connection and never reads it: the copy is
 *     given up once no byte moved for the stall limit, and said; a
 *     sender that stops writing, the same at the receiver;
 * And the choice of each node's peers (fb__peer_ring, fb__peer_place: K
 * of them, by failure domain).
 * Both "nodes" share this host's /dev/shm/fb.<job>.mem, which is what the
 * peer directory keeps apart.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../check.h"
#include "ckpt/replicate.h"
#include "ckpt/store.h"
#include "ckpt/tier.h"
#include "common/util.h"
#include "supervisor/sup.h"
#include "supervisor/watcher.h"

static char job[64], mem[4200], peer[4200], lines[8192];
static size_t nlines;
static pthread_mutex_t lines_mu = PTHREAD_MUTEX_INITIALIZER; /* lines, nlines */

/* Steps first..last of a 2-rank job in dir, saved by the engine, each
 * shard a tensor of n floats. */
static void save_range(const char *dir, uint64_t first, uint64_t last, int64_t n)
{
    float *w = malloc((size_t)n * sizeof *w);
    CHECK(w != NULL);
    if (!w)
        return;
    for (int rank = 0; rank < 2; rank++) {
        for (int64_t i = 0; i < n; i++)
            w[i] = (float)(i * (rank + 1));
        fb_ckpt_options o;
        fb_ckpt_options_init(&o);
        o.dir = dir;
        o.rank = rank;
        o.world_size = 2;
        o.async = 0;
        fb_ckpt *ck = NULL;
        CHECK_RC(fb_ckpt_open(&ck, &o), 0);
        if (!ck)
            return;
        CHECK_RC(fb_ckpt_register(ck, "w", FB_DTYPE_F32, 1, (int64_t[]){n}, w), 0);
        for (uint64_t s = first; s <= last; s++)
            CHECK_RC(fb_ckpt_save(ck, s), 0);
        fb_ckpt_close(ck);
    }
    free(w);
}

/* Steps 7, 8 and 9, 16 KiB a shard. */
static void save_steps(const char *dir)
{
    save_range(dir, 7, 9, 4096);
}

/* The receiver's lines, collected (its own thread writes them). */
static void collect(FILE *out, const fb__fbw1_msg *m)
{
    (void)out;
    char line[FB__FBW1_LINE_MAX + 2];
    int n = fb__fbw1_format(m, line, sizeof line);
    pthread_mutex_lock(&lines_mu);
    if (n > 0 && nlines + (size_t)n < sizeof lines) {
        memcpy(lines + nlines, line, (size_t)n);
        nlines += (size_t)n;
        lines[nlines] = '\0';
    }
    pthread_mutex_unlock(&lines_mu);
}

/* Whether a receiver wrote a line containing want; wait up to ms for it. */
static int said(const char *want, int ms)
{
    for (int i = 0;; i++) {
        pthread_mutex_lock(&lines_mu);
        int found = strstr(lines, want) != NULL;
        pthread_mutex_unlock(&lines_mu);
        if (found || i >= ms / 10)
            return found;
        usleep(10000);
    }
}

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
          getsockname(fd, (struct sockaddr *)&a, &len) == 0);
    close(fd);
    return ntohs(a.sin_port);
}

/* Connect to port on loopback from source address 127.0.0.src (0: the
 * kernel's choice): the receiver serves at most 4 connections of one
 * source at once, so senders that stand for several nodes differ. */
static int connect_from(int port, int src)
{
    for (int i = 0; i < 50; i++) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        struct sockaddr_in from = {.sin_family = AF_INET};
        from.sin_addr.s_addr = htonl(INADDR_LOOPBACK + (uint32_t)src - 1);
        if (fd >= 0 && (!src || !bind(fd, (struct sockaddr *)&from, sizeof from)) &&
            connect(fd, (struct sockaddr *)&a, sizeof a) == 0) {
            /* bounded: a port taken meanwhile by another program never
             * answers, and must fail the test, not hang it */
            struct timeval tv = {.tv_sec = 20};
            (void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
            (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
            return fd;
        }
        if (fd >= 0)
            close(fd);
        usleep(20000);
    }
    return -1;
}

static int connect_port(int port)
{
    return connect_from(port, 0);
}

static int has_shard(const char *dir, uint64_t step, int rank)
{
    char p[4300];
    return !fb__ckpt_shard_path(p, sizeof p, dir, step, rank) && access(p, F_OK) == 0;
}

static int verifies(const char *dir, uint64_t step, int rank)
{
    char p[4300], why[1024] = "";
    int rc = fb__ckpt_shard_path(p, sizeof p, dir, step, rank);
    if (!rc)
        rc = fb__ckpt_verify_shard(p, step, rank, why, sizeof why);
    if (rc)
        fprintf(stderr, "%s: %s\n", p, why);
    return rc == 0;
}

/* Send steps of ranks [rank0, rank0+n) from mem to the receiver; wait for
 * its line about the last one. */
static void send_step(int port, uint64_t step, int rank0, int n, const char *want)
{
    char why[1024] = "";
    int fd = connect_port(port);
    CHECK(fd >= 0);
    if (fd < 0)
        return;
    CHECK_RC(fb__repl_send_step(fd, mem, step, rank0, n, why, sizeof why), 0);
    close(fd);
    CHECKF(said(want, 20000), "no '%s' in:\n%s", want, lines);
}

/* Step 9 rank 0, corrupted in the sender's memory: the receiver answers
 * it as arrived (its hashes are the scrub's), the scrub drops it, and no
 * `fbw1 peer` line ever says the node holds it. */
static void corrupted_copy(int port)
{
    char p[4300], why[1024] = "";
    fb__ckpt_shard_path(p, sizeof p, mem, 9, 0);
    int fd = open(p, O_RDWR);
    struct stat st;
    unsigned char b = 0;
    CHECK(fd >= 0 && fstat(fd, &st) == 0 && pread(fd, &b, 1, st.st_size - 1) == 1);
    b ^= 0x5a;
    CHECK(fd >= 0 && pwrite(fd, &b, 1, st.st_size - 1) == 1);
    if (fd >= 0)
        close(fd);
    fd = connect_port(port);
    CHECK(fd >= 0);
    if (fd < 0)
        return;
    CHECK_RC(fb__repl_send_step(fd, mem, 9, 0, 1, why, sizeof why), 0);
    close(fd);
    char arrived[4300], claimed[4300];
    snprintf(arrived, sizeof arrived, "%s/step-0000000009/.rank-00000.arrived", peer);
    snprintf(claimed, sizeof claimed, "%s/step-0000000009/.rank-00000.scrub", peer);
    int i = 0;
    while (i++ < 2000 && (!access(arrived, F_OK) || !access(claimed, F_OK)))
        usleep(10000);
    CHECKF(access(arrived, F_OK) && access(claimed, F_OK), "the scrub left %s waiting",
           arrived);
    usleep(200000); /* a line it would write comes after the rename (the teller) */
    CHECK(!has_shard(peer, 9, 0));
    CHECKF(!said("fbw1 peer node2 9 0", 0),
           "a corrupted copy reported:\n%s", lines);
}

/* Node2's receiver of the 2-rank job on port; NULL (checked) if none. */
static fb__peer *start_receiver(int port)
{
    fb__peer_opts o = {.mem_dir = mem, .node = "node2", .port = port, .world = 2,
                       .rank0 = 0, .nranks = 2, .emit = collect};
    fb__peer *p = NULL;
    CHECK_RC(fb__peer_start(&p, &o), 0);
    return p;
}

static void receiver(void)
{
    int port = free_port();
    fb__peer *p = start_receiver(port);
    if (!p)
        return;
    send_step(port, 7, 0, 1, "fbw1 peer node2 7 0 1\n");
    send_step(port, 7, 1, 1, "fbw1 peer node2 7 0 2\n"); /* the run grew */
    CHECK(has_shard(peer, 7, 0) && has_shard(peer, 7, 1));
    CHECK(verifies(peer, 7, 1));
    send_step(port, 8, 0, 2, "fbw1 peer node2 8 0 2\n");
    send_step(port, 9, 1, 1, "fbw1 peer node2 9 1 1\n");
    CHECK(has_shard(peer, 7, 1) && has_shard(peer, 8, 1) && has_shard(peer, 9, 1));
    corrupted_copy(port);
    fb__peer_stop(p); /* joins its threads: nothing left running */
}

/* Under --memory-ckpt-max (FIREBREAK_CKPT_MEM_MAX) with no room left on
 * the node (own steps and peer copies fill it): a copy is refused, the
 * sender told -ENOSPC, nothing of it lands and no `fbw1 peer` line says
 * it is held. */
static void capped(void)
{
    char cmd[4400], out[64] = "";
    snprintf(cmd, sizeof cmd, "du -s -B1 '%s' | cut -f1", mem);
    FILE *f = popen(cmd, "r");
    CHECK(f && fgets(out, sizeof out, f));
    if (f)
        pclose(f);
    long long held = atoll(out);
    CHECKF(held > 0, "du of %s: '%s'", mem, out);
    snprintf(out, sizeof out, "%lld", held + 4096);
    setenv("FIREBREAK_CKPT_MEM_MAX", out, 1);
    int port = free_port();
    fb__peer_opts o = {.mem_dir = mem, .node = "node2", .port = port, .world = 2,
                       .rank0 = 0, .nranks = 2, .emit = collect};
    fb__peer *p = NULL;
    CHECK_RC(fb__peer_start(&p, &o), 0);
    int fd = p ? connect_port(port) : -1;
    char why[1024] = "";
    CHECK(fd >= 0);
    if (fd >= 0) {
        CHECK_RC(fb__repl_send_step(fd, mem, 9, 0, 1, why, sizeof why), -ENOSPC);
        close(fd);
    }
    fb__peer_stop(p);
    unsetenv("FIREBREAK_CKPT_MEM_MAX");
    CHECK(!has_shard(peer, 9, 0));
    CHECKF(!said("fbw1 peer node2 9 0", 0), "a refused copy reported:\n%s",
           lines);
}

/* The run's key (replicate.h): a receiver takes shards only after this
 * run's key.  Another key, or a shard before any key, is answered
 * -EACCES, the connection ends and nothing lands.  The key comes from
 * FIREBREAK_PEER_KEY, which is then removed; the tests after this one
 * send and receive under test_key (a sender and a receiver in one process
 * share it), and those that write fbr1 by hand begin with send_key. */
static unsigned char test_key[FB__REPL_KEY_BYTES];

static void send_key(int fd)
{
    unsigned char msg[FB__REPL_KEY_MSG_BYTES];
    memcpy(msg, "FBK1", 4);
    memcpy(msg + 4, test_key, sizeof test_key);
    CHECK(write(fd, msg, sizeof msg) == (ssize_t)sizeof msg);
}

static void keyed(void)
{
    setenv("FIREBREAK_PEER_KEY", "not hex", 1);
    CHECK_RC(fb__repl_key_from_env(), -EINVAL);
    char hex[2 * FB__REPL_KEY_BYTES + 1];
    CHECK_RC(fb__repl_key_new_hex(hex), 0);
    CHECK(strlen(hex) == 64);
    setenv("FIREBREAK_PEER_KEY", hex, 1);
    const char *held = getenv("FIREBREAK_PEER_KEY");
    CHECK_RC(fb__repl_key_from_env(), 0);
    CHECK(getenv("FIREBREAK_PEER_KEY") == NULL);
    /* overwritten where it was, not only unset: the environment block
     * itself is what /proc/PID/environ shows */
    CHECKF(held && strspn(held, "0") == 64, "the key left in the environment: %s", held);
    int port = free_port();
    fb__peer *p = start_receiver(port);
    if (!p)
        return;
    unsigned char msg[FB__REPL_KEY_MSG_BYTES], ack[4];
    fb__repl_header h = {.rank = 0, .step = 9, .bytes = 4096};
    for (int c = 0; c < 2; c++) { /* another key; a header before any key */
        int fd = connect_port(port);
        CHECK(fd >= 0);
        if (fd < 0)
            continue;
        memset(msg, 0x5a, sizeof msg);
        if (c == 0)
            memcpy(msg, "FBK1", 4);
        else
            fb__repl_header_encode(&h, msg);
        size_t n = c == 0 ? sizeof msg : FB__REPL_HEADER_BYTES;
        CHECK(write(fd, msg, n) == (ssize_t)n);
        CHECKF(read(fd, ack, sizeof ack) == 4 && (int32_t)(ack[0] | ack[1] << 8 |
               ack[2] << 16 | (uint32_t)ack[3] << 24) == -EACCES,
               "case %d: not refused", c);
        CHECKF(read(fd, ack, 1) == 0, "case %d: the connection goes on", c);
        close(fd);
    }
    fb__peer_stop(p);
    CHECK(!has_shard(peer, 9, 0));
    CHECKF(!said("fbw1 peer node2 9 0", 0), "a copy under another key reported:\n%s",
           lines);
    memset(test_key, 0x33, sizeof test_key);
    fb__repl_set_key(test_key);
}

static void fetch(void)
{
    int port = free_port();
    char plan[256];
    snprintf(plan, sizeof plan, "1:a:m:b:127.0.0.1");
    fb__rm_rf(peer);
    pid_t child = fork();
    if (child == 0)
        _exit(fb__peer_fetch_here(job, "b", port, 2, 8, plan, 10000, stderr));
    CHECK_RC(fb__peer_fetch_here(job, "a", port, 2, 8, plan, 10000, stderr), 0);
    int status = -1;
    CHECK(waitpid(child, &status, 0) == child);
    CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0, "node b's status %d", status);
    CHECK(has_shard(peer, 8, 1) && !has_shard(peer, 8, 0));
    CHECK(verifies(peer, 8, 1));

    /* A shard the source does not have: both sides say it failed. */
    port = free_port();
    snprintf(plan, sizeof plan, "0:a:m:b:127.0.0.1");
    child = fork();
    if (child == 0)
        _exit(fb__peer_fetch_here(job, "b", port, 2, 5, plan, 2000, stderr));
    CHECK_RC(fb__peer_fetch_here(job, "a", port, 2, 5, plan, 2000, stderr), 1);
    CHECK(waitpid(child, &status, 0) == child);
    CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 1, "node b's status %d", status);

    /* Plans that are not plans. */
    static const char *const bad[] = {"", "1:a:m:b", "2:a:m:b:x", "1:a:x:b:x",
                                      "1:a:m:a:x", "1:a/b:m:b:x", "-1:a:m:b:x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECKF(fb__peer_fetch_here(job, "a", port, 2, 8, bad[i], 100, stderr) == 2,
               "plan '%s' accepted", bad[i]);
}

static void ring(void)
{
    int to[5];
    const char *none[4] = {NULL, NULL, NULL, NULL};
    fb__peer_ring(none, 4, to); /* no domains: the next node */
    CHECK(to[0] == 1 && to[1] == 2 && to[2] == 3 && to[3] == 0);
    fb__peer_ring(none, 1, to);
    CHECK_EQ_INT(to[0], -1);
    /* Two racks: never a copy in its own rack while another rack exists. */
    const char *racks[4] = {"a", "a", "b", "b"};
    fb__peer_ring(racks, 4, to);
    CHECK(to[0] == 2 && to[1] == 2 && to[2] == 0 && to[3] == 0);
    const char *one[3] = {"a", "a", "a"};  /* one rack: the next node */
    fb__peer_ring(one, 3, to);
    CHECK(to[0] == 1 && to[1] == 2 && to[2] == 0);
    const char *mixed[5] = {"a", "", "a", NULL, "a"};
    fb__peer_ring(mixed, 5, to);
    CHECK(to[0] == 1 && to[1] == 2 && to[2] == 3 && to[3] == 4 && to[4] == 1);

    char d[16];
    CHECK_RC(fb__peer_domain_of("node1=r1,node2=r1,node3=r2", "node3", d, sizeof d), 0);
    CHECK_EQ_STR(d, "r2");
    CHECK_RC(fb__peer_domain_of("node1=r1,node10=r9", "node1", d, sizeof d), 0);
    CHECK_EQ_STR(d, "r1");
    CHECK_RC(fb__peer_domain_of("node1=r1", "node4", d, sizeof d), 0);
    CHECK_EQ_STR(d, "");
    CHECK_RC(fb__peer_domain_of(NULL, "node4", d, sizeof d), 0);
    CHECK_EQ_STR(d, "");
    static const char *const bad[] = {"node1", "node1=", "=r1", "node1=r1,,node2=r2",
                                      "node1=a-domain-name-too-long"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECKF(fb__peer_domain_of(bad[i], "node1", d, sizeof d) == -EINVAL,
               "'%s' accepted", bad[i]);
}

/* K > 1 (--peer-copies): the next K nodes outside each node's domain,
 * each once; fewer where there are not K (-1 after them). */
static void placement(void)
{
    int to[4 * 3];
    const char *none[4] = {NULL, NULL, NULL, NULL};
    CHECK_EQ_INT(fb__peer_place(none, 4, 2, to), 0);
    static const int next2[8] = {1, 2, 2, 3, 3, 0, 0, 1};
    CHECK(!memcmp(to, next2, sizeof next2));
    CHECK_EQ_INT(fb__peer_place(none, 4, 3, to), 0); /* every other node */
    static const int all3[12] = {1, 2, 3, 2, 3, 0, 3, 0, 1, 0, 1, 2};
    CHECK(!memcmp(to, all3, sizeof all3));
    /* n = 2: one other node, whatever K asks. */
    CHECK_EQ_INT(fb__peer_place(none, 2, 1, to), 0);
    CHECK(to[0] == 1 && to[1] == 0);
    CHECK_EQ_INT(fb__peer_place(none, 2, 2, to), 2);
    CHECK(to[0] == 1 && to[1] == -1 && to[2] == 0 && to[3] == -1);
    /* Two racks of two, K = 2: only two nodes outside each rack. */
    const char *racks[4] = {"a", "a", "b", "b"};
    CHECK_EQ_INT(fb__peer_place(racks, 4, 2, to), 0);
    static const int cross[8] = {2, 3, 2, 3, 0, 1, 0, 1};
    CHECK(!memcmp(to, cross, sizeof cross));
    /* K larger than possible: three in rack a, one in b; a's nodes have
     * one node outside (node 3), node 3 has three. */
    const char *three[4] = {"a", "a", "a", "b"};
    CHECK_EQ_INT(fb__peer_place(three, 4, 2, to), 3);
    static const int few[8] = {3, -1, 3, -1, 3, -1, 0, 1};
    CHECK(!memcmp(to, few, sizeof few));
    /* Three racks of two, K = 2: the copies in two other racks, not both
     * in the next one. */
    const char *six[6] = {"a", "a", "b", "b", "c", "c"};
    int to6[12];
    CHECK_EQ_INT(fb__peer_place(six, 6, 2, to6), 0);
    static const int spread[12] = {2, 4, 2, 4, 4, 0, 4, 0, 0, 2, 0, 2};
    CHECKF(!memcmp(to6, spread, sizeof spread), "node 0: %d %d, node 2: %d %d", to6[0],
           to6[1], to6[4], to6[5]);
    /* K = 3 there: the third where room is left, outside its own rack. */
    int to63[18];
    CHECK_EQ_INT(fb__peer_place(six, 6, 3, to63), 0);
    CHECK(to63[0] == 2 && to63[1] == 4 && to63[2] == 3);
    /* All one domain: the domains say nothing, the next nodes. */
    const char *one[4] = {"a", "a", "a", "a"};
    CHECK_EQ_INT(fb__peer_place(one, 4, 2, to), 0);
    CHECK(!memcmp(to, next2, sizeof next2));
    /* K = 0: nothing placed, nobody short. */
    CHECK_EQ_INT(fb__peer_place(none, 4, 0, to), 0);
}

/* `watch --peers`: each node's entry, K addresses joined by '+'. */
static void peers_list(void)
{
    char to[FB__PEERS_ENTRY_MAX], addr[FB__PEER_COPIES_MAX][FB__FBW1_NODE_MAX];
    CHECK_RC(fb__fbw1_peers_entry("node2,node3,-", 0, to, sizeof to), 0);
    CHECK_EQ_STR(to, "node2"); /* the single-address form */
    CHECK_RC(fb__fbw1_peers_entry("node2,node3,-", 2, to, sizeof to), 0);
    CHECK_EQ_STR(to, "");
    CHECK_RC(fb__fbw1_peers_entry("node2+node3,10.0.0.3+node1,node1+node2", 1, to,
                                  sizeof to), 0);
    CHECK_EQ_STR(to, "10.0.0.3+node1");
    CHECK_EQ_INT(fb__fbw1_peers_split(to, addr), 2);
    CHECK_EQ_STR(addr[0], "10.0.0.3");
    CHECK_EQ_STR(addr[1], "node1");
    CHECK_EQ_INT(fb__fbw1_peers_split("a+b+c+d+e+f+g+h", addr), 8);
    static const char *const bad[] = {"", "a,,b", "a+", "+a", "a++b", "a b", "a/b,c",
                                      "a+b+c+d+e+f+g+h+i"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECKF(fb__fbw1_peers_entry(bad[i], 0, to, sizeof to) == -EINVAL,
               "--peers '%s' accepted", bad[i]);
    CHECK_EQ_INT(fb__fbw1_peers_entry("abcdef", 0, to, 4), -EINVAL); /* no room */
}

/* Two senders at once (a node is the peer of K others): while the first
 * holds its connection open, not yet sending, the second's step is taken
 * in and answered within its 3 s, and reported held. */
static void two_senders(void)
{
    int port = free_port();
    fb__peer_opts o = {.mem_dir = mem, .node = "node2", .port = port, .world = 2,
                       .rank0 = 0, .nranks = 2, .emit = collect};
    fb__peer *p = NULL;
    nlines = 0; /* no receiver writes now */
    lines[0] = '\0';
    CHECK_RC(fb__peer_start(&p, &o), 0);
    if (!p)
        return;
    int first = connect_port(port);
    CHECK(first >= 0);
    usleep(100000); /* accepted: a slot waits on it */
    int fd = connect_port(port);
    CHECK(fd >= 0);
    if (fd >= 0) {
        struct timeval tv = {.tv_sec = 3};
        char why[1024] = "";
        (void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        CHECK_RC(fb__repl_send_step(fd, mem, 9, 1, 1, why, sizeof why), 0);
        close(fd);
    }
    CHECKF(said("fbw1 peer node2 9 1 1\n", 20000),
           "the second sender's copy not reported:\n%s", lines);
    CHECK(verifies(peer, 9, 1));
    if (first >= 0)
        close(first);
    fb__peer_stop(p); /* every slot's thread joined, its pool removed */
    char rx1[4300];
    snprintf(rx1, sizeof rx1, "%s/.rx-1", peer);
    CHECKF(access(rx1, F_OK) != 0, "%s left behind", rx1);
}

static void drop(void)
{
    CHECK(has_shard(mem, 7, 0) && has_shard(mem, 8, 0) && has_shard(peer, 8, 1));
    /* kept: step 8 (still the newest one that outlives a node's loss),
     * in node memory and as a peer copy; 7 goes */
    const long long keep[] = {8};
    CHECK_EQ_INT(fb__peer_drop_older(mem, 2, 9, keep, 1), 1); /* mem 7 */
    CHECK(!has_shard(mem, 7, 0) && has_shard(mem, 8, 0) && has_shard(peer, 8, 1));
    CHECK_EQ_INT(fb__peer_drop_older(mem, 2, 9, NULL, 0), 2); /* mem 8; peer 8 */
    CHECK(!has_shard(mem, 8, 0) && !has_shard(mem, 8, 1) && !has_shard(peer, 8, 1));
    CHECK(has_shard(mem, 9, 0) && has_shard(mem, 9, 1));
    CHECK_EQ_INT(fb__peer_drop_older(mem, 2, 9, NULL, 0), 0);
}

/* The lines of `path` containing want, and of them those containing also. */
static int count_lines(const char *path, const char *want, const char *also, int *with)
{
    char line[2048];
    int n = 0;
    *with = 0;
    FILE *f = fopen(path, "r");
    while (f && fgets(line, sizeof line, f))
        if (strstr(line, want)) {
            n++;
            *with += also && strstr(line, also) != NULL;
        }
    if (f)
        fclose(f);
    return n;
}

/* stderr into a new file named from path's template (filled): the saved
 * stderr for stderr_back, or -1 (checked, stderr as it was). */
static int stderr_to(char *path)
{
    int fd = mkstemp(path), saved = fd >= 0 ? dup(2) : -1;
    CHECK(fd >= 0 && saved >= 0);
    if (saved >= 0) {
        fflush(stderr);
        dup2(fd, 2);
    }
    if (fd >= 0)
        close(fd);
    return saved;
}

static void stderr_back(int saved)
{
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
}

/* A step the supervisor dropped before its copy went: said only at debug
 * level (FIREBREAK_WATCH_DEBUG) when the lane of the node's newest step
 * meets it, said always when a named step is missing.  The node sends to
 * itself (its own receiver on loopback); stderr goes to a file meanwhile. */
static void dropped_quiet(void)
{
    char path[] = "/tmp/fb-peer-stderr.XXXXXX";
    int saved = stderr_to(path);
    if (saved < 0)
        return;
    int port = free_port();
    fb__peer_opts o = {.mem_dir = mem, .node = "self", .port = port, .to = "127.0.0.1",
                       .world = 2, .rank0 = 0, .nranks = 2, .emit = collect};
    fb__peer *p = NULL;
    int rc = fb__peer_start(&p, &o);
    int with = 0, loud = 0, quiet = 0;
    if (p) {
        /* step 5 is not in node memory (dropped): first the newest's lane,
         * then named, which waits for the first to end and then fails */
        fb__peer_offer(p, 5, 0);
        usleep(300000);
        fb__peer_offer(p, 5, 1);
        for (int i = 0; i < 500 && !count_lines(path, "peer copy of step 5", NULL, &with); i++)
            usleep(10000);
        usleep(200000);
        loud = count_lines(path, "peer copy of step 5", "debug", &with);
        fb__peer_stop(p);
    }
    /* With FIREBREAK_WATCH_DEBUG the newest's lane says it, as debug. */
    setenv("FIREBREAK_WATCH_DEBUG", "1", 1);
    p = NULL;
    int rc2 = fb__peer_start(&p, &o);
    if (p) {
        fb__peer_offer(p, 4, 0);
        for (int i = 0; i < 500 && !count_lines(path, "peer copy of step 4", NULL, &with); i++)
            usleep(10000);
        quiet = count_lines(path, "peer copy of step 4", "debug: ", &with) == 1 && with == 1;
        fb__peer_stop(p);
    }
    unsetenv("FIREBREAK_WATCH_DEBUG");
    stderr_back(saved);
    CHECK_RC(rc, 0);
    CHECK_RC(rc2, 0);
    count_lines(path, "peer copy of step 5", "debug", &with);
    CHECKF(loud == 1 && with == 0, "step 5: %d lines (%d debug), want the named lane's "
           "alone", loud, with);
    CHECKF(quiet, "step 4: no debug line with FIREBREAK_WATCH_DEBUG");
    if (failures) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "cat %s >&2", path);
        (void)system(cmd);
    }
    unlink(path);
}

/* The scrub runs at idle priority: on a node busy training it may get no
 * CPU for seconds.  Meanwhile the watcher's own calls must not wait for it
 * (an offer of the node's newest step; its `alive` lines), nor its stop
 * (Slurm's KillWait, 2 s on the test cluster, runs from the SIGTERM: the
 * node's memory must be removed by then): stood for by a test hook that
 * holds the scrub 3 s after it woke, blind to the stop as a thread given
 * no CPU is (FIREBREAK_TEST_PEER_SCRUB_STALL_MS, FB_TEST_HOOKS builds).
 * The scrub left running ends by itself after its 3 s and frees the
 * handle, while the cases after this one run (ASan: no use after free, no
 * leak). */
static void scrub_starved(void)
{
#ifdef FB_TEST_HOOKS
    setenv("FIREBREAK_TEST_PEER_SCRUB_STALL_MS", "3000", 1);
    int port = free_port();
    fb__peer_opts o = {.mem_dir = mem, .node = "node2", .port = port, .to = "127.0.0.1",
                       .world = 2, .rank0 = 0, .nranks = 2, .emit = collect};
    fb__peer *p = NULL;
    CHECK_RC(fb__peer_start(&p, &o), 0);
    usleep(300000); /* the scrub's first pass has begun: it is held */
    unsetenv("FIREBREAK_TEST_PEER_SCRUB_STALL_MS");
    if (!p)
        return;
    uint64_t t0 = fb__now_ns();
    for (int i = 0; i < 5; i++)
        fb__peer_offer(p, 9 + i, i & 1);
    double ms = (double)(fb__now_ns() - t0) / 1e6;
    CHECKF(ms < 1500, "offers waited %.0f ms for the starved scrub", ms);
    uint64_t t1 = fb__now_ns();
    fb__peer_stop(p); /* the held scrub is not waited for */
    double stop_ms = (double)(fb__now_ns() - t1) / 1e6;
    CHECKF(stop_ms < 1000, "the stop waited %.0f ms for the starved scrub", stop_ms);
#endif
}

/* The bytes allocated under dir, as the node's cap counts them (tmpfs
 * blocks), each file once: a file renamed while the walk goes (a shard
 * from its pool or temporary name to its step) may be met twice. */
#define WALK_FILES_MAX 4096
static __thread ino_t walk_ino[WALK_FILES_MAX];
static __thread int walk_n;
static __thread uint64_t walk_bytes;

static int walk_add(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)path, (void)ftw;
    if (flag != FTW_F)
        return 0;
    for (int i = 0; i < walk_n; i++)
        if (walk_ino[i] == st->st_ino)
            return 0;
    if (walk_n < WALK_FILES_MAX)
        walk_ino[walk_n++] = st->st_ino;
    walk_bytes += (uint64_t)st->st_blocks * 512;
    return 0;
}

static uint64_t held_bytes(const char *dir)
{
    walk_n = 0;
    walk_bytes = 0;
    (void)nftw(dir, walk_add, 16, FTW_PHYS);
    return walk_bytes;
}

/* The most held under mem while `sampling` (a thread of its own). */
static volatile int sampling;
static uint64_t sampled_max;

static void *sampler(void *arg)
{
    (void)arg;
    while (sampling) {
        uint64_t b = held_bytes(mem);
        if (b > sampled_max)
            sampled_max = b;
        usleep(1000);
    }
    return NULL;
}

#define CAP_SENDERS 8 /* every slot of the receiver at once */

typedef struct cap_sender {
    const char *src;
    int port, rc;
    uint64_t step;
    int rank, from;              /* from: its source, 127.0.0.from */
    pthread_barrier_t *go;
} cap_sender;

static void *cap_send(void *arg)
{
    cap_sender *c = arg;
    char why[1024] = "";
    int fd = connect_from(c->port, c->from);
    pthread_barrier_wait(c->go);
    c->rc = fd < 0 ? -ECONNREFUSED
                   : fb__repl_send_step(fd, c->src, c->step, c->rank, 1, why, sizeof why);
    if (fd >= 0)
        close(fd);
    return NULL;
}

/* Under --memory-ckpt-max, 8 senders at once (a slot each) into a node
 * with room for 3 shards and a half: the node never holds more than its
 * cap, while they send nor after, and those refused are answered
 * -ENOSPC.  Each slot's pool used to check the cap alone, so all 8 saw
 * room and the node took 8; the window between the check and the
 * allocation is widened by a test hook (FIREBREAK_TEST_PEER_CAP_DELAY_MS,
 * FB_TEST_HOOKS builds), as a large shard's allocation would. */
static void cap_several_senders(void)
{
#ifdef FB_TEST_HOOKS
    char src[4200], srcjob[80], v[32], p[4300];
    snprintf(srcjob, sizeof srcjob, "%ssrc", job);
    CHECK_RC(fb__ckpt_mem_dir_path(src, sizeof src, srcjob), 0);
    CHECK(mkdir(src, 0700) == 0);
    save_range(src, 20, 23, 64 << 10); /* 8 shards of 256 KiB */
    uint64_t shard = 0;
    for (int i = 0; i < CAP_SENDERS; i++) {
        struct stat st;
        CHECK(!fb__ckpt_shard_path(p, sizeof p, src, 20 + (uint64_t)i / 2, i % 2) &&
              stat(p, &st) == 0);
        if ((uint64_t)st.st_blocks * 512 > shard)
            shard = (uint64_t)st.st_blocks * 512;
    }
    uint64_t held0 = held_bytes(mem), cap = held0 + 3 * shard + shard / 2;
    snprintf(v, sizeof v, "%llu", (unsigned long long)cap);
    setenv("FIREBREAK_CKPT_MEM_MAX", v, 1);
    setenv("FIREBREAK_TEST_PEER_CAP_DELAY_MS", "300", 1);
    int port = free_port();
    fb__peer_opts o = {.mem_dir = mem, .node = "node2", .port = port, .world = 2,
                       .rank0 = 0, .nranks = 2, .emit = collect};
    fb__peer *pr = NULL;
    CHECK_RC(fb__peer_start(&pr, &o), 0);
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, CAP_SENDERS);
    cap_sender c[CAP_SENDERS];
    pthread_t th[CAP_SENDERS], samp;
    sampled_max = 0;
    sampling = 1;
    CHECK(pthread_create(&samp, NULL, sampler, NULL) == 0);
    for (int i = 0; i < CAP_SENDERS; i++) {
        c[i] = (cap_sender){.src = src, .port = port, .rc = 1,
                            .step = 20 + (uint64_t)i / 2, .rank = i % 2,
                            .from = 10 + i, .go = &go};
        CHECK(pthread_create(&th[i], NULL, cap_send, &c[i]) == 0);
    }
    int ok = 0, refused = 0;
    for (int i = 0; i < CAP_SENDERS; i++) {
        pthread_join(th[i], NULL);
        ok += c[i].rc == 0;
        refused += c[i].rc == -ENOSPC;
        CHECKF(c[i].rc == 0 || c[i].rc == -ENOSPC, "step %llu rank %d: %s",
               (unsigned long long)c[i].step, c[i].rank, fb_strerror(c[i].rc));
    }
    usleep(500000); /* each slot refills its pool after its connection */
    uint64_t end = held_bytes(mem);
    sampling = 0;
    pthread_join(samp, NULL);
    fb__peer_stop(pr);
    pthread_barrier_destroy(&go);
    unsetenv("FIREBREAK_TEST_PEER_CAP_DELAY_MS");
    unsetenv("FIREBREAK_CKPT_MEM_MAX");
    CHECKF(sampled_max <= cap && end <= cap, "the node held up to %llu bytes, %llu at "
           "the end, over its cap of %llu (%llu before, shards of %llu)",
           (unsigned long long)sampled_max, (unsigned long long)end,
           (unsigned long long)cap, (unsigned long long)held0, (unsigned long long)shard);
    CHECKF(ok >= 1 && ok <= 3 && ok + refused == CAP_SENDERS, "%d shards taken, %d "
           "refused (-ENOSPC), of %d; room for 3", ok, refused, CAP_SENDERS);
    for (uint64_t s = 20; s <= 23; s++) {
        CHECK(!fb__ckpt_step_path(p, sizeof p, peer, s));
        fb__rm_rf(p);
    }
    fb__ckpt_mem_dir_remove(src);
#endif
}

/*
 * Eight connections that trickle a byte every 400 ms (each wait well under
 * the stall limit, 10 s), from 8 addresses, hold every receiving slot: half inside a header,
 * half inside a shard of 1 MiB whose header came whole.  A real sender
 * queued behind them is served once the receiver gives them up by its
 * deadlines (a header within 5 s, a shard within 5 s plus 1 s per 16
 * MiB), in about 5 s, not when they stop (15 s here; never, in the
 * reviewer's slow-loris).
 */
#define PEER_SLOTS 8 /* the receiver's (PEER_RX_SLOTS) */
#define TRICKLERS PEER_SLOTS
static volatile int trickling;

static void *trickle(void *arg)
{
    const int *fds = arg;
    unsigned char hb[FB__REPL_HEADER_BYTES];
    fb__repl_header_encode(&(fb__repl_header){.rank = 0, .step = 30, .bytes = 1 << 20},
                           hb);
    for (int i = 0; i < TRICKLERS / 2; i++)
        if (fds[i] >= 0) {
            send_key(fds[i]);
            (void)!write(fds[i], hb, sizeof hb);
        }
    uint64_t end = fb__now_ns() + 15000000000ull;
    for (size_t k = 0; trickling && fb__now_ns() < end; k++) {
        for (int i = 0; i < TRICKLERS; i++)
            if (fds[i] >= 0)
                (void)!send(fds[i], i < TRICKLERS / 2 ? (const void *)"" : hb + k % 24,
                            1, MSG_NOSIGNAL);
        usleep(400000);
    }
    return NULL;
}

/* A receiver on *port with PEER_SLOTS connections to it in fds, from
 * 127.0.0.src, or src, src+1, ... (each its own); NULL if none. */
static fb__peer *receiver_held(int *port, int fds[PEER_SLOTS], int src, int each_own)
{
    *port = free_port();
    fb__peer *p = start_receiver(*port);
    for (int i = 0; p && i < PEER_SLOTS; i++)
        CHECK((fds[i] = connect_from(*port, src + (each_own ? i : 0))) >= 0);
    return p;
}

static void tricklers(void)
{
    save_range(mem, 40, 40, 4096);
    int port, fds[TRICKLERS];
    fb__peer *p = receiver_held(&port, fds, 20, 1);
    if (!p)
        return;
    usleep(300000); /* each in a slot */
    pthread_t th;
    trickling = 1;
    CHECK(pthread_create(&th, NULL, trickle, fds) == 0);
    char why[1024] = "";
    int fd = connect_port(port), rc = -ECONNREFUSED;
    uint64_t t0 = fb__now_ns();
    if (fd >= 0)
        rc = fb__repl_send_step(fd, mem, 40, 0, 2, why, sizeof why);
    double took_s = (double)(fb__now_ns() - t0) / 1e9;
    if (fd >= 0)
        close(fd);
    trickling = 0;
    pthread_join(th, NULL);
    for (int i = 0; i < TRICKLERS; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    fb__peer_stop(p);
    CHECKF(rc == 0 && took_s < 9.0, "a sender behind %d tricklers: %s after %.1f s (%s)",
           TRICKLERS, fb_strerror(rc), took_s, why);
}

/*
 * One source takes at most 4 of the 8 receiving slots: 8 idle connections
 * from 127.0.0.30 (the 5th on closed at once), and a sender from
 * 127.0.0.31 is served at once, not when the receiver gives the idle ones
 * up (5 s, their header's deadline).  Step 40 is tricklers'.
 */
static void one_source(void)
{
    int port, fds[PEER_SLOTS];
    fb__peer *p = receiver_held(&port, fds, 30, 0);
    if (!p)
        return;
    uint64_t t0 = fb__now_ns();
    char why[1024] = "", end = 1;
    struct pollfd last = {.fd = fds[PEER_SLOTS - 1], .events = POLLIN};
    int closed = last.fd >= 0 && poll(&last, 1, 1000) == 1 && read(last.fd, &end, 1) == 0;
    int fd = connect_from(port, 31), rc = -ECONNREFUSED;
    if (fd >= 0)
        rc = fb__repl_send_step(fd, mem, 40, 0, 2, why, sizeof why);
    double took_s = (double)(fb__now_ns() - t0) / 1e9;
    if (fd >= 0)
        close(fd);
    for (int i = 0; i < PEER_SLOTS; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    fb__peer_stop(p);
    CHECKF(rc == 0 && took_s < 2.0, "a sender beside %d idle connections of one "
           "source: %s after %.1f s (%s)", PEER_SLOTS, fb_strerror(rc), took_s, why);
    CHECKF(closed, "the %dth connection of one source was not closed", PEER_SLOTS);
}

/* A dead peer: a listener on a free port whose accept queue is full, so
 * the kernel drops the SYNs of further connects (as a node that is gone
 * answers none).  The listener's fd; fill[] the connects that filled it. */
#define BLACKHOLE_FILL 3
static int blackhole(int *port, int fill[BLACKHOLE_FILL])
{
    *port = free_port();
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)*port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    (void)setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    CHECK(lfd >= 0 && bind(lfd, (struct sockaddr *)&a, sizeof a) == 0 &&
          listen(lfd, 0) == 0);
    for (int i = 0; i < BLACKHOLE_FILL; i++) {
        fill[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fill[i] >= 0)
            (void)connect(fill[i], (struct sockaddr *)&a, sizeof a);
    }
    usleep(100000);
    return lfd;
}

static void blackhole_close(int lfd, int fill[BLACKHOLE_FILL])
{
    for (int i = 0; i < BLACKHOLE_FILL; i++)
        if (fill[i] >= 0)
            close(fill[i]);
    if (lfd >= 0)
        close(lfd);
}

/* Wait up to ms for child to exit: the seconds it took after t0, or -1
 * (then it is killed). */
static double exits_within(pid_t child, uint64_t t0, int ms)
{
    int status;
    for (int i = 0; i <= ms / 10; i++) {
        if (waitpid(child, &status, WNOHANG) == child)
            return (double)(fb__now_ns() - t0) / 1e9;
        usleep(10000);
    }
    kill(child, SIGKILL);
    waitpid(child, &status, 0);
    return -1;
}

/*
 * Deadlines where the watcher connects and serves:
 *   - `watch --mem-fetch --timeout 1s` receiving, with one client that
 *     trickles a byte every 0.4 s: it ends at its timeout (the trickler
 *     kept it 40 s past a 5 s timeout);
 *   - `watch --mem-fetch --timeout 1s` sending to a dead peer: it ends at
 *     its timeout (connect() waited out the SYN retries, 134 s);
 *   - a watcher whose sender is connecting to a dead peer stops within
 *     2 s, 0.1 s here (its stop joined the sender, 132 s, past Slurm's
 *     KillWait).
 * Each in a child, killed after 10 s: the test fails, it does not wait.
 */
static void deadlines(void)
{
    /* The trickled fetch. */
    int port = free_port();
    uint64_t t0 = fb__now_ns();
    pid_t child = fork();
    if (child == 0)
        _exit(fb__peer_fetch_here(job, "b", port, 2, 8, "1:a:m:b:127.0.0.1", 1000,
                                  stderr));
    int c = connect_port(port);
    siginfo_t si = {0};
    for (int i = 0; c >= 0 && i < 25; i++) {
        if (!waitid(P_PID, (id_t)child, &si, WEXITED | WNOHANG | WNOWAIT) && si.si_pid)
            break; /* it ended (left for exits_within to reap) */
        (void)!send(c, "F", 1, MSG_NOSIGNAL);
        usleep(400000);
    }
    double took = exits_within(child, t0, 10000);
    if (c >= 0)
        close(c);
    CHECKF(took >= 0 && took < 3.0, "--mem-fetch --timeout 1s with a trickling client: "
           "%.1f s (-1: still running after 10 s)", took);

    /* The fetch to a dead peer. */
    int fill[BLACKHOLE_FILL], lfd = blackhole(&port, fill);
    t0 = fb__now_ns();
    child = fork();
    if (child == 0)
        _exit(fb__peer_fetch_here(job, "a", port, 2, 40, "1:a:m:b:127.0.0.1", 1000,
                                  stderr));
    took = exits_within(child, t0, 10000);
    CHECKF(took >= 0 && took < 3.0, "--mem-fetch --timeout 1s to a dead peer: %.1f s "
           "(-1: still running after 10 s)", took);

    /* A watcher's stop while its sender connects to the dead peer. */
    child = fork();
    if (child == 0) {
        fb__peer_opts o = {.mem_dir = mem, .node = "a", .port = port, .to = "127.0.0.1",
                           .world = 2, .rank0 = 0, .nranks = 1, .emit = collect};
        fb__peer *snd = NULL;
        if (fb__peer_start(&snd, &o))
            _exit(2);
        fb__peer_offer(snd, 40, 1);
        usleep(500000);
        uint64_t s0 = fb__now_ns();
        fb__peer_stop(snd);
        double stop_s = (double)(fb__now_ns() - s0) / 1e9;
        fprintf(stderr, "the stop took %.2f s\n", stop_s);
        _exit(stop_s < 2.0 ? 0 : 1);
    }
    t0 = fb__now_ns();
    took = exits_within(child, t0, 10000);
    CHECKF(took >= 0 && took < 4.0, "a watcher stopped while connecting to a dead peer: "
           "%.1f s (-1: still running after 10 s)", took);
    blackhole_close(lfd, fill);
}

/*
 * A line per rejected connection, rate limited: 200 connections with a
 * header that is not valid (rank 131072) into a receiver leave at most
 * FB__REPL_LOG_BURST lines on its stderr (one each before: 76,087 such
 * connections in 10 s wrote 7.2 MB to a watcher's log).  And the limit's
 * policy on its own clock: the burst, then silence, then the count left
 * out said with the first line of the next minute.
 */
#define FLOOD_CONNS 200
static void log_flood(void)
{
    fb__repl_log_limit l = {0};
    unsigned before = 0, said = 0;
    uint64_t t = 1000;
    for (int i = 0; i < 25; i++)
        said += (unsigned)fb__repl_log_allow(&l, t + (uint64_t)i, &before);
    CHECKF(said == FB__REPL_LOG_BURST, "%u of 25 lines said in a minute", said);
    CHECK(fb__repl_log_allow(&l, t + FB__REPL_LOG_WINDOW_NS, &before) == 1);
    CHECKF(before == 25 - FB__REPL_LOG_BURST, "the next minute says %u left out", before);

    char path[] = "/tmp/fb-peer-flood.XXXXXX";
    int saved = stderr_to(path);
    if (saved < 0)
        return;
    int port = free_port();
    fb__peer *p = start_receiver(port);
    unsigned char bad[FB__REPL_HEADER_BYTES] = "FBR1\0\0\2\0";
    for (int i = 0; p && i < FLOOD_CONNS; i++) {
        int c = connect_port(port);
        if (c < 0)
            continue;
        send_key(c);
        (void)!write(c, bad, sizeof bad);
        shutdown(c, SHUT_WR);
        char sink[16];
        (void)!read(c, sink, sizeof sink); /* its end: the receiver is done */
        close(c);
    }
    fb__peer_stop(p);
    stderr_back(saved);
    int with = 0;
    int n = count_lines(path, "peer copy into", NULL, &with);
    CHECKF(n <= FB__REPL_LOG_BURST, "%d connections not fbr1: %d lines said "
           "(at most %d)", FLOOD_CONNS, n, FB__REPL_LOG_BURST);
    unlink(path);
}

/*
 * Headers alone (24 bytes each, a step's shard of 8 MiB claimed, then the
 * connection closed) into a receive pool, each connection followed by
 * its refill, as a receiving slot does: the pool allocates nothing for
 * shards that never came.  The size used to be noted from the header, and
 * the refill allocated a file per header, kept for the watcher's life (a
 * 24-byte header claiming 256 GiB made the node allocate it).
 */
#define HEADER_ONLY_CONNS 8
static void header_only_pool(void)
{
    char dir[4300], why[1024] = "";
    snprintf(dir, sizeof dir, "%s/hdronly", mem);
    CHECK(mkdir(dir, 0700) == 0);
    fb__repl_pool *pool = NULL;
    CHECK_RC(fb__repl_pool_open(&pool, dir, why, sizeof why), 0);
    if (!pool)
        return;
    for (int i = 0; i < HEADER_ONLY_CONNS; i++) {
        int sv[2];
        CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
        send_key(sv[1]);
        unsigned char hb[FB__REPL_HEADER_BYTES];
        fb__repl_header_encode(&(fb__repl_header){.rank = 0, .step = 5,
                                                  .bytes = 8ull << 20}, hb);
        CHECK(write(sv[1], hb, sizeof hb) == (ssize_t)sizeof hb);
        close(sv[1]);
        fb__repl_stats st = {0};
        CHECK(fb__repl_serve_pool(sv[0], dir, 1ull << 30, pool, FB__REPL_DEFER_VERIFY,
                                  &st, why, sizeof why) != 0);
        close(sv[0]);
        CHECK(fb__repl_pool_refill(pool, why, sizeof why) >= 0);
    }
    uint64_t bytes = 0, held = held_bytes(dir);
    size_t files = fb__repl_pool_files(pool, &bytes);
    fb__repl_pool_close(pool);
    CHECKF(held < (1u << 20) && files == 0, "after %d header-only connections the "
           "pool holds %zu files of %llu bytes, %llu allocated under %s",
           HEADER_ONLY_CONNS, files, (unsigned long long)bytes,
           (unsigned long long)held, dir);
    fb__rm_rf(dir);
}

/* The first line of path containing want, waiting up to ms for it; 1 if
 * found (line filled). */
static int wait_line(const char *path, const char *want, int ms, char *line, size_t size)
{
    for (int i = 0; i <= ms / 10; i++) {
        FILE *f = fopen(path, "r");
        int found = 0;
        while (f && !found && fgets(line, (int)size, f))
            found = strstr(line, want) != NULL;
        if (f)
            fclose(f);
        if (found)
            return 1;
        usleep(10000);
    }
    line[0] = '\0';
    return 0;
}

/*
 * A peer that takes the connection and stops reading (a hung or
 * SIGSTOPped watcher: the kernel still completes the connection, nobody
 * reads it): the sender's copy fails once no byte moved for the stall
 * limit, said naming the peer and the seconds, not after the 60 s the
 * socket's I/O limit used to be.  And the other way, a sender that stops
 * writing inside a header: the receiver gives its slot up by the same
 * rule, and says so.  The limit is 1 s here (FIREBREAK_TEST_PEER_STALL_MS,
 * FB_TEST_HOOKS builds; PEER_STALL_S is 10 s); the shard (16 MiB) is
 * larger than what the sockets' buffers take in, so the sender stalls
 * inside sendfile.
 */
static void stalled_peer(void)
{
#ifdef FB_TEST_HOOKS
    char src[4200], srcjob[80], path[] = "/tmp/fb-peer-stall.XXXXXX", line[2048];
    snprintf(srcjob, sizeof srcjob, "%sbig", job);
    CHECK_RC(fb__ckpt_mem_dir_path(src, sizeof src, srcjob), 0);
    CHECK(mkdir(src, 0700) == 0);
    save_range(src, 30, 30, 4 << 20);
    int port = free_port(), lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK(lfd >= 0 && bind(lfd, (struct sockaddr *)&a, sizeof a) == 0 &&
          listen(lfd, 4) == 0);
    int fd = mkstemp(path), saved = dup(2);
    CHECK(fd >= 0 && saved >= 0);
    if (fd < 0 || saved < 0 || lfd < 0)
        return;
    fflush(stderr);
    dup2(fd, 2);
    setenv("FIREBREAK_TEST_PEER_STALL_MS", "1000", 1);
    /* The sender: node "a" copies its step 30 to the stalled peer. */
    fb__peer_opts o = {.mem_dir = src, .node = "a", .port = port, .to = "127.0.0.1",
                       .world = 2, .rank0 = 0, .nranks = 1, .emit = collect};
    fb__peer *snd = NULL, *rcv = NULL;
    int rc = fb__peer_start(&snd, &o);
    uint64_t t0 = fb__now_ns();
    if (snd)
        fb__peer_offer(snd, 30, 1);
    int tx = wait_line(path, "peer copy of step 30 to 127.0.0.1", 8000, line, sizeof line);
    double tx_s = (double)(fb__now_ns() - t0) / 1e9;
    char tx_line[2048];
    snprintf(tx_line, sizeof tx_line, "%s", line);
    /* The receiver: node2 takes a connection that stops inside a header. */
    int rport = free_port();
    fb__peer_opts ro = {.mem_dir = mem, .node = "node2", .port = rport, .world = 2,
                        .rank0 = 0, .nranks = 2, .emit = collect};
    int rc2 = fb__peer_start(&rcv, &ro);
    int c = rcv ? connect_port(rport) : -1;
    t0 = fb__now_ns();
    int rx = c >= 0 && write(c, "FBR1\0\0\0\0\0\0", 10) == 10 &&
             wait_line(path, "the sender stalled", 8000, line, sizeof line);
    double rx_s = (double)(fb__now_ns() - t0) / 1e9;
    if (c >= 0)
        close(c);
    fb__peer_stop(rcv);
    fb__peer_stop(snd);
    unsetenv("FIREBREAK_TEST_PEER_STALL_MS");
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    close(fd);
    close(lfd);
    CHECK_RC(rc, 0);
    CHECK_RC(rc2, 0);
    CHECKF(tx && strstr(tx_line, "stalled, no byte moved for 1 s") && tx_s >= 0.9 &&
           tx_s < 4.0, "sender: after %.2f s: '%s'", tx_s, tx_line);
    CHECKF(rx && strstr(line, "no byte moved for 1 s") && rx_s >= 0.9 && rx_s < 4.0,
           "receiver: after %.2f s: '%s'", rx_s, line);
    if (failures) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "cat %s >&2", path);
        (void)system(cmd);
    }
    unlink(path);
    fb__ckpt_mem_dir_remove(src);
#endif
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    snprintf(job, sizeof job, "peertest%d", (int)getpid());
    CHECK_RC(fb__ckpt_mem_dir_path(mem, sizeof mem, job), 0);
    CHECK_RC(fb__peer_dir_path(peer, sizeof peer, mem), 0);
    CHECK(mkdir(mem, 0700) == 0);
    ring();
    placement();
    peers_list();
    save_steps(mem);
    receiver();
    capped();
    keyed();
    fetch();
    drop();
    two_senders();
    dropped_quiet();
    scrub_starved();
    cap_several_senders();
    stalled_peer();
    header_only_pool();
    tricklers();
    one_source();
    deadlines();
    log_flood();
    fb__ckpt_mem_dir_remove(mem);
    return failures != 0;
}
