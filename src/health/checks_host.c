/*
 * checks_host.c -- host-side checks from the kernel log and sysfs: XIDs,
 * EDAC memory errors, InfiniBand ports, PCIe AER, thermal zones, and free
 * space in /dev/shm and the checkpoint directory.  Paths go through
 * fb__health_path so a fixture tree can stand in for the real one; entries
 * that are symbolic links on a real system are plain directories there, so
 * everything is opened by path (stat follows links) and never by d_type.
 *
 * A sysfs value is read bounded (4 KiB for a number, 64 KiB for a text
 * file) and only from a regular file (fb__read_file: a FIFO cannot hang
 * us).  A file that is absent is no evidence (not every device has every
 * counter); one that is there but oversized, not a number (garbage, NUL
 * bytes), a FIFO or a device, or unreadable makes its check "unknown"
 * with the file named -- it can never read as ok.  A definite failure
 * elsewhere in the same check still fails it.
 */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "common/util.h"
#include "firebreak/firebreak.h"
#include "health/health.h"
#include "health/parse.h"

#define SYSFS_MAX 65536
#define XID_DISTINCT_MAX 64
#define MAX_ENTRIES 4096

/* Why a sysfs file could not be used, for the evidence. */
static const char *why_unusable(int rc)
{
    switch (rc) {
    case FB_EFORMAT: return "not a value (garbage or NUL bytes)";
    case FB_ETOOBIG: return "oversized for a sysfs value";
    default: return fb_strerror(rc); /* FB_ENOTREG: a FIFO, device, dir */
    }
}

/* Read a small sysfs file under the root.  0, -errno or FB_ETOOBIG. */
static int read_small(const fb__health_opts *o, const char *abs_path,
                      char **buf, size_t *len)
{
    char path[4096];
    int rc = fb__health_path(o, path, sizeof path, abs_path);
    if (rc)
        return rc;
    return fb__read_file(path, SYSFS_MAX, buf, len);
}

/* Read an integer file; 0, -errno or FB_EFORMAT. */
static int read_i64(const fb__health_opts *o, const char *abs_path,
                    int64_t *v)
{
    char path[4096];
    int rc = fb__health_path(o, path, sizeof path, abs_path);
    return rc ? rc : fb__sysfs_read_i64(path, v);
}

/* Sorted names of a directory's entries starting with `prefix`. */
static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static char **list_dir(const fb__health_opts *o, const char *abs_path,
                       const char *prefix, size_t *count)
{
    char path[4096];
    *count = 0;
    if (fb__health_path(o, path, sizeof path, abs_path))
        return NULL;
    DIR *d = opendir(path);
    if (!d)
        return NULL;
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < MAX_ENTRIES) {
        if (e->d_name[0] == '.' || strncmp(e->d_name, prefix, strlen(prefix)))
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            char **nn = realloc(names, cap * sizeof *nn);
            if (!nn)
                break;
            names = nn;
        }
        if (!(names[n] = strdup(e->d_name)))
            break;
        n++;
    }
    closedir(d);
    if (n)
        qsort(names, n, sizeof *names, cmp_str);
    *count = n;
    return names;
}

static void free_list(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

/* ---- kernel log ---- */

typedef struct {
    fb__xid_event ev;
    unsigned count;
    uint64_t last_usec;
} xid_seen;

void fb__health_check_kernel_log(const fb__health_opts *o, fb__health_result *r)
{
    char path[4096];
    fb__kmsg_reader *k = malloc(sizeof *k);
    xid_seen *seen = calloc(XID_DISTINCT_MAX, sizeof *seen);
    size_t nseen = 0;
    unsigned dropped = 0, bad_xid = 0;
    if (!k || !seen || fb__health_path(o, path, sizeof path, "/dev/kmsg")) {
        fb__health_add(r, "kernel.xid", FB_HEALTH_SKIPPED, NULL, NULL, NULL,
                       "out of memory or path too long");
        goto out;
    }
    int rc = fb__kmsg_open(k, path);
    if (rc) {
        if (rc == FB_ENOTREG) /* a FIFO or directory: not a kernel log */
            fb__health_add(r, "kernel.xid", FB_HEALTH_UNKNOWN, NULL, NULL,
                           NULL, "cannot decide: the kernel log %s: %s",
                           path, fb_strerror(rc));
        else
            fb__health_add(r, "kernel.xid", FB_HEALTH_SKIPPED, NULL, NULL,
                           NULL, "cannot read the kernel log %s: %s%s", path,
                           fb_strerror(rc), rc == -EACCES || rc == -EPERM
                               ? " (run as root)" : "");
        free(k);
        k = NULL;
        goto out;
    }
    uint64_t cutoff_usec = 0;
    if (o->since_s > 0) {
        char *buf;
        size_t len;
        double up;
        if (read_small(o, "/proc/uptime", &buf, &len) == 0) {
            if (sscanf(buf, "%lf", &up) == 1 && up > o->since_s)
                cutoff_usec = (uint64_t)((up - o->since_s) * 1e6);
            free(buf);
        }
    }
    fb__kmsg_record rec;
    while ((rc = fb__kmsg_next(k, &rec, 1)) == 1) {
        fb__xid_event ev;
        if (rec.usec < cutoff_usec || !fb__kmsg_is_kernel(&rec))
            continue;
        int x = fb__xid_parse(rec.text, strlen(rec.text), &ev);
        if (x < 0)
            bad_xid++;
        if (x != 1)
            continue;
        size_t i;
        for (i = 0; i < nseen; i++)
            if (seen[i].ev.xid == ev.xid && !strcmp(seen[i].ev.pci, ev.pci))
                break;
        if (i == nseen) {
            if (nseen == XID_DISTINCT_MAX) {
                dropped++;
                continue;
            }
            nseen++;
        }
        if (ev.xid != 154 || rec.usec >= seen[i].last_usec)
            seen[i].ev = ev; /* keep the newest recovery action */
        seen[i].count++;
        seen[i].last_usec = rec.usec;
    }
    char notes[200] = "";
    if (k->malformed || bad_xid || dropped || rc < 0)
        snprintf(notes, sizeof notes, " (%llu malformed records, %u malformed "
                 "XID lines, %u XIDs past the %d distinct kept%s%s)",
                 (unsigned long long)k->malformed, bad_xid, dropped,
                 XID_DISTINCT_MAX, rc < 0 ? "; read error: " : "",
                 rc < 0 ? strerror(-rc) : "");
    if (!nseen && k->truncated)
        fb__health_add(r, "kernel.xid", FB_HEALTH_UNKNOWN, NULL, NULL, NULL,
                       "cannot decide: the kernel log %s is larger than %llu "
                       "MiB; no NVIDIA XID in the first %llu records%s", path,
                       FB__KMSG_FILE_MAX >> 20,
                       (unsigned long long)k->records, notes);
    else if (!nseen)
        fb__health_add(r, "kernel.xid", FB_HEALTH_OK, NULL, NULL, NULL,
                       "no NVIDIA XID in %llu kernel log records%s%s",
                       (unsigned long long)k->records,
                       cutoff_usec ? " (within --since)" : " since boot",
                       notes);
    for (size_t i = 0; i < nseen; i++) {
        fb__xid_info info;
        char name[64];
        fb__xid_lookup(&seen[i].ev, &info);
        snprintf(name, sizeof name, "kernel.xid%d.%s", seen[i].ev.xid,
                 seen[i].ev.pci);
        char action_note[64] = "";
        if (seen[i].ev.xid == 154 && seen[i].ev.action >= 0)
            snprintf(action_note, sizeof action_note, " -> action %lld (%s)",
                     seen[i].ev.action, seen[i].ev.action_name);
        fb__health_add(r, name, (fb__health_status)info.status, info.category,
                       info.component, info.action,
                       "XID %d on PCI %s: %s%s; %ux, last at %.3f s after "
                       "boot: \"%s\"%s", seen[i].ev.xid, seen[i].ev.pci,
                       info.meaning, action_note, seen[i].count,
                       seen[i].last_usec / 1e6, seen[i].ev.msg, notes);
    }
out:
    if (k)
        fb__kmsg_close(k);
    free(k);
    free(seen);
}

/* ---- EDAC ---- */

static void check_edac(const fb__health_opts *o, fb__health_result *r)
{
    size_t n;
    char **mcs = list_dir(o, "/sys/devices/system/edac/mc", "mc", &n);
    int64_t ce_total = 0, ue_total = 0;
    int read_any = 0, bad = 0;
    char bad_note[700] = "";
    for (size_t i = 0; i < n; i++) {
        static const char *const files[] = {"ce_count", "ue_count"};
        for (int k = 0; k < 2; k++) {
            char p[512];
            int64_t v;
            snprintf(p, sizeof p, "/sys/devices/system/edac/mc/%s/%s", mcs[i],
                     files[k]);
            int rc = read_i64(o, p, &v);
            if (rc == -ENOENT)
                continue;
            if (rc || v < 0) {
                if (!bad++)
                    snprintf(bad_note, sizeof bad_note, "%s: %s", p,
                             rc ? why_unusable(rc) : "negative count");
                continue;
            }
            *(k ? &ue_total : &ce_total) += v;
            read_any = 1;
        }
    }
    free_list(mcs, n);
    if (ue_total)
        fb__health_add(r, "host.edac", FB_HEALTH_FAIL, "Host", "System memory",
                       "drain the node and replace the DIMM (edac-util -v "
                       "names it)", "%lld uncorrectable and %lld correctable "
                       "memory errors over %zu memory controllers%s%s",
                       (long long)ue_total, (long long)ce_total, n,
                       bad ? "; also unreadable: " : "", bad_note);
    else if (bad)
        fb__health_add(r, "host.edac", FB_HEALTH_UNKNOWN, NULL, NULL,
                       "check the EDAC driver", "cannot decide: %d EDAC "
                       "counter file%s unusable, e.g. %s", bad,
                       bad == 1 ? "" : "s", bad_note);
    else if (!read_any)
        fb__health_add(r, "host.edac", FB_HEALTH_SKIPPED, NULL, NULL, NULL,
                       "no EDAC memory controllers (no EDAC driver loaded)");
    else if (ce_total)
        fb__health_add(r, "host.edac", FB_HEALTH_WARN, "Host", "System memory",
                       "watch the correctable error count; replace the DIMM "
                       "if it grows", "%lld correctable memory errors over "
                       "%zu memory controllers", (long long)ce_total, n);
    else
        fb__health_add(r, "host.edac", FB_HEALTH_OK, NULL, NULL, NULL,
                       "no memory errors over %zu memory controllers", n);
}

/* ---- InfiniBand ---- */

static void check_ib_port(const fb__health_opts *o, fb__health_result *r,
                          const char *dev, const char *port)
{
    static const char *counters[] = {"symbol_error", "link_downed",
                                     "port_rcv_errors", "link_error_recovery",
                                     "port_xmit_discards"};
    char p[600], name[64], *buf;
    size_t len;
    int state = -1;
    snprintf(name, sizeof name, "ib.%s.%s", dev, port);
    snprintf(p, sizeof p, "/sys/class/infiniband/%s/ports/%s/state", dev, port);
    int rc = read_small(o, p, &buf, &len);
    if (rc == 0) {
        rc = fb__ib_state_parse(buf, len, &state);
        free(buf);
    }
    if (rc) { /* a port without a readable state: cannot say it is up */
        fb__health_add(r, name, FB_HEALTH_UNKNOWN, NULL, NULL,
                       "check the HCA driver", "cannot decide: %s: %s", p,
                       why_unusable(rc));
        return;
    }
    char errs[300] = "", bad_note[700] = "";
    size_t off = 0;
    int64_t total_errs = 0;
    for (size_t i = 0; i < sizeof counters / sizeof counters[0]; i++) {
        int64_t v;
        snprintf(p, sizeof p, "/sys/class/infiniband/%s/ports/%s/counters/%s",
                 dev, port, counters[i]);
        rc = read_i64(o, p, &v);
        if (rc && rc != -ENOENT && !bad_note[0])
            snprintf(bad_note, sizeof bad_note, "%s: %s", p, why_unusable(rc));
        if (rc || v <= 0)
            continue;
        total_errs += v;
        int w = snprintf(errs + off, sizeof errs - off, "%s%s=%lld",
                         off ? " " : "", counters[i], (long long)v);
        if (w > 0 && (size_t)w < sizeof errs - off)
            off += (size_t)w;
    }
    if (state != 4)
        fb__health_add(r, name, FB_HEALTH_FAIL, "Network", "Network switch/cable",
                       "check the cable and the switch port; drain the node",
                       "%s port %s is not active (state %d)%s%s", dev, port,
                       state, off ? "; " : "", errs);
    else if (bad_note[0])
        fb__health_add(r, name, FB_HEALTH_UNKNOWN, NULL, NULL,
                       "check the HCA driver", "cannot decide: %s port %s "
                       "active, but %s%s%s", dev, port, bad_note,
                       off ? "; errors: " : "", errs);
    else if (total_errs)
        fb__health_add(r, name, FB_HEALTH_WARN, "Network", "Network switch/cable",
                       "watch the counters; reseat or replace the cable if "
                       "they grow", "%s port %s active with errors: %s", dev,
                       port, errs);
    else
        fb__health_add(r, name, FB_HEALTH_OK, NULL, NULL, NULL,
                       "%s port %s active, no errors", dev, port);
}

static void check_ib(const fb__health_opts *o, fb__health_result *r)
{
    size_t n;
    char **devs = list_dir(o, "/sys/class/infiniband", "", &n);
    size_t ports = 0;
    for (size_t i = 0; i < n; i++) {
        char p[512];
        size_t np;
        snprintf(p, sizeof p, "/sys/class/infiniband/%s/ports", devs[i]);
        char **pl = list_dir(o, p, "", &np);
        for (size_t j = 0; j < np; j++)
            check_ib_port(o, r, devs[i], pl[j]);
        ports += np;
        free_list(pl, np);
    }
    free_list(devs, n);
    if (!ports)
        fb__health_add(r, "ib", FB_HEALTH_SKIPPED, NULL, NULL, NULL,
                       "no InfiniBand ports");
}

/* ---- PCIe AER ---- */

static void check_aer(const fb__health_opts *o, fb__health_result *r)
{
    size_t n, with_aer = 0;
    char **devs = list_dir(o, "/sys/bus/pci/devices", "", &n);
    for (size_t i = 0; i < n; i++) {
        static const char *kinds[] = {"fatal", "nonfatal", "correctable"};
        uint64_t counts[3] = {0, 0, 0};
        int have = 0;
        char bad_note[700] = "";
        for (int k = 0; k < 3; k++) {
            char p[512], *buf;
            size_t len;
            snprintf(p, sizeof p, "/sys/bus/pci/devices/%s/aer_dev_%s",
                     devs[i], kinds[k]);
            int rc = read_small(o, p, &buf, &len);
            if (rc == -ENOENT)
                continue;
            have = 1;
            if (rc == 0) {
                rc = fb__aer_parse(buf, len, &counts[k]);
                free(buf);
            }
            if (rc && !bad_note[0])
                snprintf(bad_note, sizeof bad_note, "%s: %s", p,
                         why_unusable(rc));
        }
        if (!have)
            continue;
        with_aer++;
        char name[64];
        snprintf(name, sizeof name, "pcie.aer.%s", devs[i]);
        if (bad_note[0] && !counts[0])
            fb__health_add(r, name, FB_HEALTH_UNKNOWN, NULL, NULL,
                           "check the PCIe AER driver",
                           "cannot decide: %s", bad_note);
        else if (counts[0])
            fb__health_add(r, name, FB_HEALTH_FAIL, "Host", "IO expansion board",
                           "drain the node; reseat or replace the device",
                           "%s: %llu fatal, %llu non-fatal, %llu correctable "
                           "PCIe errors", devs[i],
                           (unsigned long long)counts[0],
                           (unsigned long long)counts[1],
                           (unsigned long long)counts[2]);
        else if (counts[1])
            fb__health_add(r, name, FB_HEALTH_WARN, "Host", "IO expansion board",
                           "watch the counters; reseat the device if they grow",
                           "%s: %llu non-fatal, %llu correctable PCIe errors",
                           devs[i], (unsigned long long)counts[1],
                           (unsigned long long)counts[2]);
    }
    free_list(devs, n);
    if (!with_aer)
        fb__health_add(r, "pcie.aer", FB_HEALTH_SKIPPED, NULL, NULL, NULL,
                       "no PCIe devices report AER counters");
    else
        fb__health_add(r, "pcie.aer", FB_HEALTH_OK, NULL, NULL, NULL,
                       "%zu PCIe devices report AER counters", with_aer);
}

/* ---- thermal zones ---- */

#define HOST_TEMP_WARN_MC 90000
#define HOST_TEMP_FAIL_MC 100000

static void check_thermal(const fb__health_opts *o, fb__health_result *r)
{
    size_t n;
    char **zones = list_dir(o, "/sys/class/thermal", "thermal_zone", &n);
    for (size_t i = 0; i < n; i++) {
        char p[512], type[64] = "?", name[96], *buf;
        size_t len;
        int64_t mc, crit = 0;
        snprintf(p, sizeof p, "/sys/class/thermal/%s/type", zones[i]);
        if (read_small(o, p, &buf, &len) == 0) {
            snprintf(type, sizeof type, "%.*s", (int)strcspn(buf, "\n"), buf);
            free(buf);
        }
        /* the zone's critical trip point, when it declares one */
        for (int t = 0; t < 16; t++) {
            snprintf(p, sizeof p, "/sys/class/thermal/%s/trip_point_%d_type",
                     zones[i], t);
            if (read_small(o, p, &buf, &len))
                break;
            int is_crit = !strncmp(buf, "critical", 8);
            free(buf);
            snprintf(p, sizeof p, "/sys/class/thermal/%s/trip_point_%d_temp",
                     zones[i], t);
            if (is_crit && read_i64(o, p, &crit))
                crit = 0;
        }
        snprintf(name, sizeof name, "host.thermal.%s", zones[i]);
        snprintf(p, sizeof p, "/sys/class/thermal/%s/temp", zones[i]);
        int rc = read_i64(o, p, &mc);
        int64_t fail_at = crit > 0 ? crit : HOST_TEMP_FAIL_MC;
        int64_t warn_at = crit > 0 ? crit - 10000 : HOST_TEMP_WARN_MC;
        if (rc == -ENOENT)
            fb__health_add(r, name, FB_HEALTH_SKIPPED, NULL, NULL, NULL,
                           "%s (%s): %s", p, type, fb_strerror(rc));
        else if (rc)
            fb__health_add(r, name, FB_HEALTH_UNKNOWN, NULL, NULL,
                           "check the thermal sensor",
                           "cannot decide: %s (%s): %s", p, type,
                           why_unusable(rc));
        else if (mc < -50000 || mc > 200000)
            fb__health_add(r, name, FB_HEALTH_WARN, "Host", "Server chassis",
                           "check the thermal sensor",
                           "%s (%s): absurd temperature %.1f C", zones[i], type,
                           mc / 1000.0);
        else if (mc >= fail_at)
            fb__health_add(r, name, FB_HEALTH_FAIL, "Host", "Server chassis",
                           "drain the node; check fans and airflow",
                           "%s (%s): %.1f C, at or above %.1f C", zones[i],
                           type, mc / 1000.0, fail_at / 1000.0);
        else if (mc >= warn_at)
            fb__health_add(r, name, FB_HEALTH_WARN, "Host", "Server chassis",
                           "check fans and airflow",
                           "%s (%s): %.1f C, warn at %.1f C", zones[i], type,
                           mc / 1000.0, warn_at / 1000.0);
        else
            fb__health_add(r, name, FB_HEALTH_OK, NULL, NULL, NULL,
                           "%s (%s): %.1f C", zones[i], type, mc / 1000.0);
    }
    free_list(zones, n);
    if (!n)
        fb__health_add(r, "host.thermal", FB_HEALTH_SKIPPED, NULL, NULL, NULL,
                       "no thermal zones");
}

/* ---- free space ---- */

static void check_space(const fb__health_opts *o, fb__health_result *r,
                        const char *name, const char *path, const char *what)
{
    struct statvfs sv;
    struct stat st;
    if (statvfs(path, &sv)) {
        fb__health_add(r, name, FB_HEALTH_WARN, "Host", "SSD",
                       "check that the directory exists and is mounted",
                       "%s %s: %s", what, path, strerror(errno));
        return;
    }
    /* A file's free space is its file system's: true, and not what was
     * asked (a mistyped --ckpt-dir passed as "ok"). */
    if (stat(path, &st) == 0 && !S_ISDIR(st.st_mode)) {
        fb__health_add(r, name, FB_HEALTH_WARN, "Host", "SSD",
                       "give the directory itself",
                       "%s %s: not a directory", what, path);
        return;
    }
    uint64_t avail = (uint64_t)sv.f_bavail * sv.f_frsize;
    uint64_t total = (uint64_t)sv.f_blocks * sv.f_frsize;
    double pct = total ? 100.0 * (double)avail / (double)total : 0;
    if (avail < o->min_free_bytes)
        fb__health_add(r, name, FB_HEALTH_FAIL, "Host", "SSD",
                       "free space (old checkpoints, stale /dev/shm segments: "
                       "firebreak run cleans its own)",
                       "%s %s: %.2f GiB free (%.1f%%), below %.2f GiB", what,
                       path, avail / 1073741824.0, pct,
                       o->min_free_bytes / 1073741824.0);
    else if (pct < 5.0)
        fb__health_add(r, name, FB_HEALTH_WARN, "Host", "SSD", "free space",
                       "%s %s: %.2f GiB free (%.1f%%)", what, path,
                       avail / 1073741824.0, pct);
    else
        fb__health_add(r, name, FB_HEALTH_OK, NULL, NULL, NULL,
                       "%s %s: %.2f GiB free (%.1f%%)", what, path,
                       avail / 1073741824.0, pct);
}

void fb__health_check_host(const fb__health_opts *o, fb__health_result *r)
{
    char shm[4096];
    check_edac(o, r);
    check_ib(o, r);
    check_aer(o, r);
    check_thermal(o, r);
    if (fb__health_path(o, shm, sizeof shm, "/dev/shm") == 0)
        check_space(o, r, "disk.shm", shm, "node memory");
    if (o->ckpt_dir)
        check_space(o, r, "disk.ckpt", o->ckpt_dir, "checkpoint directory");
}
