/*
 * test_diag.c -- the root-cause classifier (src/diag) over fixture sets
 * of real-looking evidence (tests/diag/data: kernel logs in /dev/kmsg's
 * record format, ranks' last lines, a health verdict), the kernel-log
 * line rules, the bounded scan, and the stored form of the answer.
 *
 *   test_diag DATA_DIR
 *
 * The fixture cases are one table (`fixtures`): each names its files, the
 * incident's facts, and the category, component and rule expected.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "diag/diag.h"
#include "../check.h"

static const char *data_dir;

/* The window every fixture's kernel log is scanned over (since boot):
 * 4700 s to 5010 s; the incident is at about 5000 s. */
#define FROM_US 4700000000ull
#define TO_US 5010000000ull

static char *slurp(const char *name)
{
    if (!name)
        return NULL;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", data_dir, name);
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        failures++;
        return NULL;
    }
    static char buf[8][65536];
    static int next;
    char *b = buf[next++ % 8];
    size_t n = fread(b, 1, sizeof buf[0] - 1, f);
    b[n] = '\0';
    fclose(f);
    return b;
}

typedef struct fixture {
    const char *name;
    const char *kind, *kmsg, *last, *health, *injected, *detail;
    int signal, exit_code, ckpt_code, pid;
    const char *category, *component, *rule;
} fixture;

/* The cases, the only list. */
static const fixture fixtures[] = {
    {"xid79_then_crash", "crash", "xid79.kmsg", "xid79.last", NULL, NULL, NULL,
     6, -1, 0, 48213, "GPU", "Faulty GPU", "kernel_log"},
    {"xid79_dmesg_then_crash", "crash", "xid79.dmesg", "xid79.last", NULL, NULL,
     NULL, 6, -1, 0, 48213, "GPU", "Faulty GPU", "kernel_log"},
    {"oom_kill", "crash", "oom.kmsg", NULL, NULL, NULL, NULL,
     9, -1, 0, 48213, "Dependency", "Host out of memory", "kernel_log"},
    {"nccl_network_error", "error_exit", NULL, "nccl.last", NULL, NULL, NULL,
     0, 1, 0, 0, "Network", "Network switch/cable", "log"},
    {"ecc_xid48", "crash", "xid48.kmsg", NULL, NULL, NULL, NULL,
     6, -1, 0, 0, "GPU", "GPU HBM3 memory", "kernel_log"},
    {"ecc_xid63", "crash", "xid63.kmsg", NULL, NULL, NULL, NULL,
     6, -1, 0, 0, "GPU", "GPU HBM3 memory", "kernel_log"},
    {"ecc_xid94", "error_exit", "xid94.kmsg", NULL, NULL, NULL, NULL,
     0, 1, 0, 0, "GPU", "GPU HBM3 memory", "kernel_log"},
    {"python_traceback", "error_exit", NULL, "traceback.last", NULL, NULL, NULL,
     0, 1, 0, 0, "Dependency", "Software bug", "log"},
    {"python_syntax_error", "error_exit", NULL, "syntax.last", NULL, NULL, NULL,
     0, 1, 0, 0, "Dependency", "Software bug", "log"},
    {"python_no_such_script", "error_exit", NULL, "noscript.last", NULL, NULL, NULL,
     0, 2, 0, 0, "Dependency", "Software bug", "log"},
    {"cuda_out_of_memory", "error_exit", NULL, "cuda_oom.last", NULL, NULL, NULL,
     0, 1, 0, 0, "Dependency", "GPU out of memory", "log"},
    {"disk_full_traceback", "error_exit", NULL, "diskfull.last", NULL, NULL, NULL,
     0, 1, 0, 0, "Dependency", "Storage full", "log"},
    {"disk_full_ckpt_failed", "save_failed", NULL, NULL, NULL, NULL,
     "rank 0 could not save checkpoint 40", 0, -1, -28, 0,
     "Dependency", "Storage full", "storage"},
    {"machine_check", "crash", "mce.kmsg", NULL, NULL, NULL, NULL,
     9, -1, 0, 0, "Host", "CPU", "kernel_log"},
    {"edac_uncorrectable", "crash", "edac.kmsg", NULL, NULL, NULL, NULL,
     7, -1, 0, 0, "Host", "System memory", "kernel_log"},
    {"killed_ib_port_down", "crash", NULL, NULL, "health_ib.json", NULL, NULL,
     9, -1, 0, 0, "Host", "NIC", "health"},
    {"killed_no_evidence", "crash", NULL, NULL, NULL, NULL, NULL,
     9, -1, 0, 0, "Unknown", "Unknown", "signal"},
    {"xid_outside_window", "crash", "old_xid.kmsg", NULL, NULL, NULL, NULL,
     9, -1, 0, 0, "Unknown", "Unknown", "signal"},
    {"injected_kill", "crash", NULL, NULL, NULL, "kill:rank=1,step=30", NULL,
     9, -1, 0, 0, "Unknown", "Unknown", "injected"},
    {"injected_kill_on_xid79", "crash", "xid79.kmsg", NULL, NULL,
     "kill:rank=1,step=30", NULL, 9, -1, 0, 0, "Unknown", "Unknown", "injected"},
    {"injected_segv", "crash", NULL, NULL, NULL, "segv:rank=0,step=50", NULL,
     11, -1, 0, 0, "Dependency", "Software bug", "injected"},
    {"sdc_mismatch", "sdc", NULL, NULL, NULL, NULL,
     "rank 1 disagrees with the majority on tensor w1 (piece 3) at step 25",
     0, -1, 0, 0, "GPU", "Silent data corruption", "kind"},
    {"injected_flip", "sdc", NULL, NULL, NULL, "flip:rank=1,step=25,tensor=w1", NULL,
     0, -1, 0, 0, "GPU", "Silent data corruption", "injected"},
};

static void run_fixture(const fixture *f)
{
    char klog[16384] = "";
    if (f->kmsg) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", data_dir, f->kmsg);
        int n = fb__diag_kmsg_scan(path, FROM_US, TO_US, klog, sizeof klog);
        CHECKF(n >= 0, "%s: scan %s: %d", f->name, path, n);
    }
    fb__diag_evidence ev = {
        .kind = f->kind, .injected = f->injected, .detail = f->detail,
        .last_lines = slurp(f->last), .health = slurp(f->health),
        .kernel_log = klog[0] ? klog : NULL, .signal = f->signal,
        .has_exit_code = f->exit_code >= 0, .exit_code = f->exit_code,
        .ckpt_code = f->ckpt_code, .pid = f->pid,
    };
    fb__diag_class c;
    fb__diag_classify(&ev, &c);
    if (strcmp(c.category, f->category) || strcmp(c.component, f->component) ||
        strcmp(c.decided_by, f->rule)) {
        fprintf(stderr, "%s: got %s / %s by %s (%s), expected %s / %s by %s\n",
                f->name, c.category, c.component, c.decided_by, c.evidence,
                f->category, f->component, f->rule);
        failures++;
    }
    CHECKF(c.injected == (f->injected != NULL), "%s: injected %d", f->name,
           c.injected);
    /* the program's own failures: no evidence against the node */
    int own = !strcmp(f->component, "Software bug") ||
              !strcmp(f->component, "Dependency") ||
              !strcmp(f->component, "GPU out of memory");
    CHECKF(c.programs_own == own, "%s: programs_own %d", f->name,
           c.programs_own);
    /* An injection over real evidence still shows that evidence. */
    if (f->injected && f->kmsg)
        CHECKF(strstr(c.evidence, "also: kernel log") != NULL, "%s: %s",
               f->name, c.evidence);
    /* Stored and read back: the same answer, the rule kept. */
    char stored[1200];
    fb__diag_format_stored(&c, stored, sizeof stored);
    fb__diag_evidence back = {.kind = f->kind, .category = c.category,
                              .component = c.component, .evidence = stored};
    fb__diag_class c2;
    fb__diag_classify(&back, &c2);
    CHECK_EQ_STR(c2.category, c.category);
    CHECK_EQ_STR(c2.component, c.component);
    CHECK_EQ_STR(c2.decided_by, c.decided_by);
    CHECK_EQ_STR(c2.evidence, c.evidence);
    CHECK_EQ_INT(c2.injected, c.injected);
    CHECK_EQ_INT(c2.programs_own, c.programs_own);
}

/* ---- the kernel-log line rules ---- */

static const struct {
    const char *line;
    fb__kline_kind kind;
    int xid, pid;
    const char *name;
} lines[] = {
    {"NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus.",
     FB__KLINE_XID, 79, 0, ""},
    {"NVRM: Xid (0000:3b:00): 48, An uncorrectable double bit error",
     FB__KLINE_XID, 48, 0, ""},
    {"NVRM: Xid (PCI:0000:3b:00", FB__KLINE_NONE, -1, 0, ""},
    {"Out of memory: Killed process 4242 (python3) total-vm:1kB",
     FB__KLINE_OOM_KILL, -1, 4242, "python3"},
    {"Memory cgroup out of memory: Killed process 77 (pt_main_thread) total-vm:1kB",
     FB__KLINE_OOM_KILL, -1, 77, "pt_main_thread"},
    {"Out of memory: Kill process 99 (java) score 900 or sacrifice child",
     FB__KLINE_OOM_KILL, -1, 99, "java"},
    {"oom-kill:constraint=CONSTRAINT_NONE,task=python3,pid=4242,uid=0",
     FB__KLINE_OOM_KILL, -1, 4242, "python3"},
    {"Out of memory: Killed process (unterminated", FB__KLINE_OOM_KILL, -1, 0, ""},
    {"mce: [Hardware Error]: Machine check events logged", FB__KLINE_MCE, -1, 0, ""},
    {"EDAC MC0: 1 UE memory read error on DIMM#0", FB__KLINE_EDAC_UE, -1, 0, ""},
    {"EDAC MC0: 1 CE memory read error on DIMM#0", FB__KLINE_NONE, -1, 0, ""},
    {"nvme nvme0: I/O 12 QID 3 timeout, aborting", FB__KLINE_NVME, -1, 0, ""},
    {"mlx5_core 0000:17:00.0: mlx5_health: fatal error detected", FB__KLINE_NIC, -1, 0, ""},
    {"python3 invoked oom-killer: gfp_mask=0x0", FB__KLINE_NONE, -1, 0, ""},
    {"[4999.100000] EDAC MC1: 1 UE memory read error", FB__KLINE_EDAC_UE, -1, 0, ""},
    {"[12.5] oom-kill:constraint=CONSTRAINT_NONE,task=x,pid=3", FB__KLINE_OOM_KILL, -1, 3, "x"},
    {"", FB__KLINE_NONE, -1, 0, ""},
};

static void test_lines(void)
{
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
        fb__kline k;
        fb__kline_kind got = fb__diag_kernel_line(lines[i].line,
                                                  strlen(lines[i].line), &k);
        CHECKF(got == lines[i].kind, "'%s': kind %s, expected %s", lines[i].line,
               fb__diag_kline_name(got), fb__diag_kline_name(lines[i].kind));
        CHECK_EQ_INT(k.xid, lines[i].xid);
        CHECK_EQ_INT(k.pid, lines[i].pid);
        CHECK_EQ_STR(k.name, lines[i].name);
    }
    /* Within its length only: the XID line cut before its number. */
    const char *l = lines[0].line;
    fb__kline k;
    CHECK_EQ_INT(fb__diag_kernel_line(l, strlen("NVRM: Xid (PCI:0000:3b:00): "), &k),
                 FB__KLINE_NONE);
}

/* ---- the scan ---- */

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static void test_scan(void)
{
    char dir[] = "/tmp/test_diag.XXXXXX", path[256], buf[16384];
    CHECK(mkdtemp(dir) != NULL);
    check_tmpdir(dir);
    snprintf(path, sizeof path, "%s/kmsg", dir);
    /* 40 XIDs in the window, malformed and continuation lines between, one
     * outside: the newest 32 are kept, in order. */
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f)
        return;
    fprintf(f, "3,1,100000000,-;NVRM: Xid (PCI:0000:3b:00): 79, too early\n");
    for (int i = 0; i < 40; i++)
        fprintf(f, "3,%d,%llu,-;NVRM: Xid (PCI:0000:3b:00): %d, x\x01y\n"
                   " DEVICE=+pci:0000:3b:00.0\nnot a record\n", i + 2,
                4800000000ull + (unsigned long long)i * 1000000ull, 100 + i);
    fprintf(f, "6,99,4900000000,-;an ordinary line\n");
    fclose(f);
    int n = fb__diag_kmsg_scan(path, FROM_US, TO_US, buf, sizeof buf);
    CHECK_EQ_INT(n, FB__DIAG_KLINES_MAX);
    CHECKF(strstr(buf, ": 107, ") == NULL && strstr(buf, ": 108, ") != NULL &&
           strstr(buf, ": 139, ") != NULL, "%s", buf);
    CHECKF(strstr(buf, "[4808.000000] NVRM") == buf + strcspn(buf, "[") &&
           strstr(buf, "x?y") != NULL, "%s", buf);
    CHECK(strstr(buf, "too early") == NULL && strstr(buf, "ordinary") == NULL);
    /* A small buffer: whole lines only. */
    char small[100];
    n = fb__diag_kmsg_scan(path, FROM_US, TO_US, small, sizeof small);
    CHECK_EQ_INT(n, FB__DIAG_KLINES_MAX);
    CHECKF(strlen(small) < sizeof small && small[strlen(small) - 1] == '\n',
           "'%s'", small);
    /* A line longer than the reader's buffer, then a good one. */
    f = fopen(path, "w");
    if (f) {
        fprintf(f, "3,1,4800000000,-;");
        for (int i = 0; i < 40000; i++)
            fputc('A', f);
        fprintf(f, "\n3,2,4800000001,-;NVRM: Xid (PCI:0000:3b:00): 48, x\n");
        fclose(f);
    }
    n = fb__diag_kmsg_scan(path, FROM_US, TO_US, buf, sizeof buf);
    CHECKF(n == 1 && strstr(buf, ": 48, x"), "%d '%s'", n, buf);
    /* dmesg lines mixed with records; malformed stamps are not lines. */
    write_file(path, "[ 4800.000001] NVRM: Xid (PCI:0000:3b:00): 79, a\n"
                     "[4800.5] NVRM: Xid (PCI:0000:3b:00): 48, short stamp\n"
                     "[ 4800.0000011] NVRM: Xid (PCI:0000:3b:00): 48, long stamp\n"
                     "[ 100.000000] NVRM: Xid (PCI:0000:3b:00): 48, too early\n"
                     "3,7,4801000000,-;NVRM: Xid (PCI:0000:3b:00): 94, b\n"
                     "[ 4802.000000] Out of memory: Killed process 9 (x) y");
    n = fb__diag_kmsg_scan(path, FROM_US, TO_US, buf, sizeof buf);
    CHECKF(n == 3 && strstr(buf, "[4800.000001] NVRM: Xid (PCI:0000:3b:00): 79, a\n") &&
           strstr(buf, ": 94, b") && strstr(buf, "[4802.000000] Out of memory") &&
           !strstr(buf, "stamp") && !strstr(buf, "early"), "%d '%s'", n, buf);
    /* Nothing there; a FIFO refused at once; a missing file. */
    write_file(path, "");
    CHECK_EQ_INT(fb__diag_kmsg_scan(path, 0, ~0ull, buf, sizeof buf), 0);
    CHECK_EQ_STR(buf, "");
    snprintf(path, sizeof path, "%s/fifo", dir);
    CHECK(mkfifo(path, 0600) == 0);
    CHECK_RC(fb__diag_kmsg_scan(path, 0, ~0ull, buf, sizeof buf), FB_ENOTREG);
    unlink(path);
    snprintf(path, sizeof path, "%s/none", dir);
    CHECK_RC(fb__diag_kmsg_scan(path, 0, ~0ull, buf, sizeof buf), -ENOENT);
    snprintf(path, sizeof path, "%s/kmsg", dir);
    unlink(path);
    rmdir(dir);
}

/* ---- rules with nothing else ---- */

static void test_rules(void)
{
    fb__diag_class c;
    fb__diag_evidence ev = {.kind = "interrupted"};
    fb__diag_classify(&ev, &c);
    CHECK_EQ_STR(c.category, "Planned");
    /* An OOM kill of another process with the rank killed is not the
     * rank's; it is still shown. */
    ev = (fb__diag_evidence){.kind = "crash", .signal = 9, .pid = 5,
        .kernel_log = "[1.0] Out of memory: Killed process 6 (other) x\n"};
    fb__diag_classify(&ev, &c);
    CHECK_EQ_STR(c.decided_by, "signal");
    CHECKF(strstr(c.evidence, "also: kernel log: '[1.0] Out of memory") != NULL,
           "%s", c.evidence);
    /* An application XID is weaker than a failing health check. */
    ev = (fb__diag_evidence){.kind = "crash", .signal = 11,
        .kernel_log = "[1.0] NVRM: Xid (PCI:0000:3b:00): 13, Graphics Exception\n",
        .health = "{\"checks\":[{\"name\":\"gpu2.ecc\",\"status\":\"fail\","
                  "\"component\":\"GPU HBM3 memory\"}]}"};
    fb__diag_classify(&ev, &c);
    CHECK_EQ_STR(c.component, "GPU HBM3 memory");
    ev.health = NULL;
    fb__diag_classify(&ev, &c);
    CHECK_EQ_STR(c.component, "Software bug");
    /* as people read it: the component only where it is not the category */
    char text[128];
    fb__diag_cause_text(&c, text, sizeof text);
    CHECK_EQ_STR(text, "Dependency / Software bug");
    fb__diag_class u = {.category = "Unknown", .component = "Unknown", .injected = 1};
    fb__diag_cause_text(&u, text, sizeof text);
    CHECK_EQ_STR(text, "Unknown (injected)");
    u.category = "GPU";
    u.component = "Faulty GPU";
    fb__diag_cause_text(&u, text, sizeof text);
    CHECK_EQ_STR(text, "GPU (injected) / Faulty GPU");
    CHECK_EQ_STR(c.decided_by, "kernel_log");
    /* A stored evidence without the rule prefix (an older journal). */
    ev = (fb__diag_evidence){.kind = "crash", .category = "Host",
                             .component = "SSD", .evidence = "[byx] odd"};
    fb__diag_classify(&ev, &c);
    CHECK_EQ_STR(c.decided_by, "supervisor");
    CHECK_EQ_STR(c.evidence, "[byx] odd");
    /* a rule we do not know stays in the text; one we know is taken out */
    ev.evidence = "[by moon] odd";
    fb__diag_classify(&ev, &c);
    CHECK_EQ_STR(c.decided_by, "supervisor");
    CHECK_EQ_STR(c.evidence, "[by moon] odd");
    ev.evidence = "[by health]";
    fb__diag_classify(&ev, &c);
    CHECK_EQ_STR(c.decided_by, "health");
    CHECK_EQ_STR(c.evidence, "");
    ev.evidence = "[by supervisor] said so";
    fb__diag_classify(&ev, &c);
    CHECK_EQ_STR(c.decided_by, "supervisor");
    CHECK_EQ_STR(c.evidence, "said so");
    /* Python's errors before the program runs are quoted; a line that only
     * looks like one (no `File "` before it) is not evidence. */
    ev = (fb__diag_evidence){.kind = "error_exit", .has_exit_code = 1, .exit_code = 1,
                             .last_lines = slurp("syntax.last")};
    fb__diag_classify(&ev, &c);
    CHECKF(strstr(c.evidence, "'SyntaxError: '(' was never closed'") != NULL, "%s",
           c.evidence);
    ev.last_lines = slurp("noscript.last");
    fb__diag_classify(&ev, &c);
    CHECKF(strstr(c.evidence, "can't open file '/home/me/trian.py'") != NULL, "%s",
           c.evidence);
    ev.last_lines = "step 3\nSyntaxError: a message the program printed\n";
    fb__diag_classify(&ev, &c);
    CHECK_EQ_STR(c.decided_by, "exit_code");
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_diag DATA_DIR\n");
        return 2;
    }
    data_dir = argv[1];
    for (size_t i = 0; i < sizeof fixtures / sizeof fixtures[0]; i++)
        run_fixture(&fixtures[i]);
    test_lines();
    test_scan();
    test_rules();
    if (!failures)
        printf("diag_unit: ok (%zu fixtures)\n", sizeof fixtures / sizeof fixtures[0]);
    return failures != 0;
}
