/*
 * test_health_parse.c -- the kernel-log, XID and sysfs parsers on known
 * inputs (good, truncated, hostile), then every fixture file through the
 * fuzz targets' input functions so they stay compiled and crash-free.
 */
#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "firebreak/firebreak.h"
#include "health/health.h"
#include "health/parse.h"
#include "../check.h"

int fb__fuzz_health_kmsg(const uint8_t *data, size_t size);
int fb__fuzz_health_sysfs(const uint8_t *data, size_t size);

static void test_kmsg(void)
{
    fb__kmsg_record r;
    const char *line = "4,1234,86100000000,-;NVRM: Xid (PCI:0000:48:00): 79, "
                       "pid=1, name=x, GPU has fallen off the bus.\n rest";
    CHECK_EQ_INT(fb__kmsg_parse(line, strlen(line), &r), 0);
    CHECK_EQ_INT(r.prio, 4);
    CHECK_EQ_INT(r.seq, 1234);
    CHECK_EQ_INT(r.usec, 86100000000ull);
    CHECK_EQ_INT(strncmp(r.text, "NVRM: Xid", 9), 0);
    CHECK(strchr(r.text, '\n') == NULL);
    /* newer kernels may add fields after the flags */
    const char *more = "6,5,10,c,extra;hello";
    CHECK_EQ_INT(fb__kmsg_parse(more, strlen(more), &r), 0);
    CHECK_EQ_STR(r.text, "hello");
    static const char *bad[] = {"", " SUBSYSTEM=pci", "4,1,2", "4,1,2-;x",
                                "a,1,2,-;x", "4,,2,-;x",
                                "4,1,99999999999999999999999,-;x",
                                "4,1,2,-\n;x", "9999,1,2,-;x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_RC(fb__kmsg_parse(bad[i], strlen(bad[i]), &r), FB_EFORMAT);
    /* length is honoured: no read past it */
    CHECK_RC(fb__kmsg_parse(line, 5, &r), FB_EFORMAT);
}

static void test_xid(void)
{
    fb__xid_event ev;
    fb__xid_info info;
    const char *t = "NVRM: Xid (PCI:0000:2b:00): 79, pid=9, name=p, GPU has "
                    "fallen off the bus.";
    CHECK_EQ_INT(fb__xid_parse(t, strlen(t), &ev), 1);
    CHECK_EQ_INT(ev.xid, 79);
    CHECK_EQ_STR(ev.pci, "0000:2b:00");
    fb__xid_lookup(&ev, &info);
    CHECK_EQ_INT(info.status, FB_HEALTH_FAIL);
    CHECK_EQ_STR(info.component, "Faulty GPU");
    const char *old = "NVRM: Xid (0000:2b:00): 13, Graphics Exception";
    CHECK_EQ_INT(fb__xid_parse(old, strlen(old), &ev), 1);
    CHECK_EQ_INT(ev.xid, 13);
    fb__xid_lookup(&ev, &info);
    CHECK_EQ_INT(info.status, FB_HEALTH_OK);
    CHECK_EQ_STR(info.category, NULL);
    const char *rec = "NVRM: Xid (PCI:0000:88:00): 154, GPU recovery action "
                      "changed from 0x0 (None) to 0x1 (GPU Reset Required)";
    CHECK_EQ_INT(fb__xid_parse(rec, strlen(rec), &ev), 1);
    CHECK_EQ_INT(ev.action, 1);
    CHECK_EQ_STR(ev.action_name, "GPU Reset Required");
    fb__xid_lookup(&ev, &info);
    CHECK_EQ_INT(info.status, FB_HEALTH_FAIL);
    const char *none = "NVRM: Xid (PCI:0000:88:00): 154, GPU recovery action "
                       "changed from 0x1 (GPU Reset Required) to 0x0 (None)";
    CHECK_EQ_INT(fb__xid_parse(none, strlen(none), &ev), 1);
    CHECK_EQ_INT(ev.action, 0);
    fb__xid_lookup(&ev, &info);
    CHECK_EQ_INT(info.status, FB_HEALTH_OK);
    CHECK_EQ_INT(fb__xid_parse("kernel: eth0 up", 15, &ev), 0);
    /* Only the driver's line, which begins with it: the kernel's segfault
     * line quoting a process that named itself so is no XID */
    const char *forged = "NVRM: Xid (0)79[4242]: segfault at 0 ip 0000000000401136";
    CHECK_EQ_INT(fb__xid_parse(forged, strlen(forged), &ev), FB_EFORMAT);
    static const char *shapes[] = {"NVRM: Xid (0:0)79, x", "NVRM: Xid (0:0): 79[1]: x",
                                   "NVRM: Xid (0): 79, x"};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        CHECKF(fb__xid_parse(shapes[i], strlen(shapes[i]), &ev) == FB_EFORMAT, "%s", shapes[i]);
    const char *bare = "NVRM: Xid (PCI:0000:2b:00): 79";
    CHECK_EQ_INT(fb__xid_parse(bare, strlen(bare), &ev), 1);
    const char *quoted = "traps: NVRM: Xid (0)79[4242] general protection fault";
    CHECK_EQ_INT(fb__xid_parse(quoted, strlen(quoted), &ev), 0);
    const char *in_seg = "a.out[1]: NVRM: Xid (PCI:0000:2b:00): 79, pid=1, GPU has fallen";
    CHECK_EQ_INT(fb__xid_parse(in_seg, strlen(in_seg), &ev), 0);
    const char *blank = "  NVRM: Xid (PCI:0000:2b:00): 79, pid=1";
    CHECK_EQ_INT(fb__xid_parse(blank, strlen(blank), &ev), 1);
    static const char *bad[] = {"NVRM: Xid (PCI:0000:2b:00 79", "NVRM: Xid (): 79",
                                "NVRM: Xid (PCI:zz): 79", "NVRM: Xid (PCI:0000:2b:00): x",
                                "NVRM: Xid (PCI:0000:2b:00): 99999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_RC(fb__xid_parse(bad[i], strlen(bad[i]), &ev), FB_EFORMAT);
}

static void test_sysfs(void)
{
    int64_t v;
    uint64_t total;
    int st;
    CHECK_EQ_INT(fb__sysfs_parse_i64("42\n", 3, &v), 0);
    CHECK_EQ_INT(v, 42);
    CHECK_EQ_INT(fb__sysfs_parse_i64(" -5 ", 4, &v), 0);
    CHECK_EQ_INT(v, -5);
    CHECK_RC(fb__sysfs_parse_i64("", 0, &v), FB_EFORMAT);
    CHECK_RC(fb__sysfs_parse_i64("4x", 2, &v), FB_EFORMAT);
    CHECK_RC(fb__sysfs_parse_i64("99999999999999999999", 20, &v), FB_EFORMAT);
    CHECK_RC(fb__sysfs_parse_i64("-", 1, &v), FB_EFORMAT);
    const char *aer = "RxErr 1\nBadTLP 2\nTOTAL_ERR_COR 3\n";
    CHECK_EQ_INT(fb__aer_parse(aer, strlen(aer), &total), 0);
    CHECK_EQ_INT(total, 3);
    const char *aer2 = "RxErr 1\nBadTLP 2\n";
    CHECK_EQ_INT(fb__aer_parse(aer2, strlen(aer2), &total), 0);
    CHECK_EQ_INT(total, 3);
    CHECK_RC(fb__aer_parse("RxErr zero\n", 11, &total), FB_EFORMAT);
    CHECK_RC(fb__aer_parse("", 0, &total), FB_EFORMAT);
    CHECK_EQ_INT(fb__ib_state_parse("4: ACTIVE\n", 10, &st), 0);
    CHECK_EQ_INT(st, 4);
    CHECK_RC(fb__ib_state_parse("ACTIVE", 6, &st), FB_EFORMAT);
    CHECK_RC(fb__ib_state_parse("7: ?", 4, &st), FB_EFORMAT);
}

static int feed(const char *path, const struct stat *sb, int flag,
                struct FTW *ftw)
{
    (void)sb;
    (void)ftw;
    if (flag != FTW_F)
        return 0;
    char *buf;
    size_t len;
    if (fb__read_file(path, 1 << 20, &buf, &len) == 0) {
        fb__fuzz_health_kmsg((const uint8_t *)buf, len);
        fb__fuzz_health_sysfs((const uint8_t *)buf, len);
        free(buf);
    }
    return 0;
}

int main(int argc, char **argv)
{
    test_kmsg();
    test_xid();
    test_sysfs();
    if (argc > 1 && nftw(argv[1], feed, 16, FTW_PHYS)) {
        fprintf(stderr, "cannot walk %s\n", argv[1]);
        failures++;
    }
    if (failures)
        fprintf(stderr, "%d checks failed\n", failures);
    else
        printf("health parsers: all checks passed\n");
    return failures ? 1 : 0;
}
