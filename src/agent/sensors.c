/*
 * sensors.c -- host sensors from sysfs: thermal zones, hwmon temperatures
 * and power meters, RAPL energy counters (with their wrap-around).  Found
 * once at start-up; each sample re-reads the files (a sysfs read returns
 * the current value).  Paths are under the --root fixture tree when given.
 */
#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/agent.h"
#include "agent/sensors.h"
#include "common/util.h"
#include "health/parse.h"

#define VALUE_MAX 4096

static void read_name(const char *path, char *out, size_t size)
{
    char *buf;
    size_t len;
    if (fb__read_file(path, VALUE_MAX, &buf, &len)) {
        snprintf(out, size, "?");
        return;
    }
    size_t n = strcspn(buf, "\n");
    snprintf(out, size, "%.*s", (int)n, buf);
    for (char *p = out; *p; p++)
        if ((unsigned char)*p < 0x20)
            *p = '?';
    free(buf);
}

static fb__host_sensor *add(fb__host_sensor *s, int *n, char kind,
                            const char *sensor, const char *type,
                            const char *path)
{
    if (*n >= FB__AGENT_MAX_SENSORS)
        return NULL;
    fb__host_sensor *h = &s[(*n)++];
    memset(h, 0, sizeof *h);
    h->kind = kind;
    snprintf(h->sensor, sizeof h->sensor, "%s", sensor);
    snprintf(h->type, sizeof h->type, "%s", type);
    snprintf(h->path, sizeof h->path, "%s", path);
    return h;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorted entries of dir starting with prefix (at most 256). */
static int list(const char *dir, const char *prefix, char names[][64])
{
    DIR *d = opendir(dir);
    char *ptrs[256];
    int n = 0;
    if (!d)
        return 0;
    struct dirent *e;
    static char tmp[256][64];
    while ((e = readdir(d)) && n < 256) {
        if (e->d_name[0] == '.' || strncmp(e->d_name, prefix, strlen(prefix)) ||
            strlen(e->d_name) >= 64)
            continue;
        snprintf(tmp[n], 64, "%s", e->d_name);
        ptrs[n] = tmp[n];
        n++;
    }
    closedir(d);
    qsort(ptrs, (size_t)n, sizeof *ptrs, cmp_names);
    for (int i = 0; i < n; i++)
        memcpy(names[i], ptrs[i], 64);
    return n;
}

/* Whether hwmon power channel file f (power2_input) is a supply's output
 * side: its label (power2_label: "pout1", "Output Power") says "out".  A
 * PSU's monitor shows both sides of one power; the node's is the input. */
static int supply_output(const char *hdir, const char *f)
{
    char path[1024], label[64];
    snprintf(path, sizeof path, "%s/%.*s_label", hdir, (int)strcspn(f, "_"), f);
    if (access(path, F_OK))
        return 0;
    read_name(path, label, sizeof label);
    for (char *c = label; *c; c++)
        *c = (char)tolower((unsigned char)*c);
    return strstr(label, "out") != NULL;
}

int fb__sensors_discover(const char *root, fb__host_sensor *s)
{
    static char names[256][64], files[256][64];
    char dir[512], path[1024], type[64], sensor[64];
    int n = 0;
    if (!root)
        root = "";
    snprintf(dir, sizeof dir, "%s/sys/class/thermal", root);
    int nz = list(dir, "thermal_zone", names);
    for (int i = 0; i < nz; i++) {
        snprintf(path, sizeof path, "%s/%s/type", dir, names[i]);
        read_name(path, type, sizeof type);
        snprintf(path, sizeof path, "%s/%s/temp", dir, names[i]);
        add(s, &n, 't', names[i], type, path);
    }
    snprintf(dir, sizeof dir, "%s/sys/class/hwmon", root);
    int nh = list(dir, "hwmon", names);
    for (int i = 0; i < nh; i++) {
        char hdir[640];
        snprintf(hdir, sizeof hdir, "%s/%s", dir, names[i]);
        snprintf(path, sizeof path, "%s/name", hdir);
        read_name(path, type, sizeof type);
        int nf = list(hdir, "", files);
        for (int j = 0; j < nf; j++) {
            const char *f = files[j];
            size_t fl = strlen(f);
            char kind = 0;
            if (!strncmp(f, "temp", 4) && fl > 10 && !strcmp(f + fl - 6, "_input"))
                kind = 't';
            else if (!strncmp(f, "power", 5) &&
                     ((fl > 8 && !strcmp(f + fl - 8, "_average")) ||
                      (fl > 6 && !strcmp(f + fl - 6, "_input"))))
                kind = 'p';
            if (!kind)
                continue;
            /* A power channel with both files (power1_average and
             * power1_input) is one sensor, its average taken: two would
             * be one series twice and the node meter counted twice. */
            if (kind == 'p' && !strcmp(f + fl - 6, "_input")) {
                char avg[64];
                int dup = 0;
                snprintf(avg, sizeof avg, "%.*s_average", (int)(fl - 6), f);
                for (int k = 0; k < nf && !dup; k++)
                    dup = !strcmp(files[k], avg);
                if (dup)
                    continue;
            }
            snprintf(sensor, sizeof sensor, "%s/%.*s", names[i],
                     (int)strcspn(f, "_"), f);
            snprintf(path, sizeof path, "%s/%s", hdir, f);
            fb__host_sensor *h = add(s, &n, kind, sensor, type, path);
            if (h && kind == 'p')
                h->output = supply_output(hdir, f);
        }
    }
    snprintf(dir, sizeof dir, "%s/sys/class/powercap", root);
    int nr = list(dir, "intel-rapl:", names);
    for (int i = 0; i < nr; i++) {
        int64_t max;
        snprintf(path, sizeof path, "%s/%s/name", dir, names[i]);
        read_name(path, type, sizeof type);
        snprintf(path, sizeof path, "%s/%s/max_energy_range_uj", dir, names[i]);
        if (fb__sysfs_read_i64(path, &max) || max <= 0)
            max = 0;
        snprintf(path, sizeof path, "%s/%s/energy_uj", dir, names[i]);
        fb__host_sensor *h = add(s, &n, 'e', names[i], type, path);
        if (h)
            h->max_uj = (uint64_t)max;
    }
    return n;
}

void fb__sensors_sample(fb__host_sensor *s, int n)
{
    uint64_t now = fb__now_ns();
    for (int i = 0; i < n; i++) {
        fb__host_sensor *h = &s[i];
        int64_t v;
        h->ok = fb__sysfs_read_i64(h->path, &v) == 0;
        if (!h->ok)
            continue;
        switch (h->kind) {
        case 't':
            /* reject what no sensor can mean: below -100 C, above 250 C */
            h->ok = v > -100000 && v < 250000;
            h->value = v / 1000.0;
            break;
        case 'p':
            h->ok = v >= 0 && v < 100000000000ll; /* < 100 kW */
            h->value = v / 1e6;
            break;
        case 'e': {
            uint64_t uj = v < 0 ? 0 : (uint64_t)v;
            if (h->prev_ns && now > h->prev_ns) {
                uint64_t d = uj >= h->prev_uj ? uj - h->prev_uj
                             : h->max_uj > h->prev_uj ? h->max_uj - h->prev_uj + uj
                                                      : 0; /* wrapped */
                h->power_w = (double)d / 1e6 / ((now - h->prev_ns) / 1e9);
                h->rated = 1;
            }
            h->prev_uj = uj;
            h->prev_ns = now;
            h->value = uj / 1e6;
            break;
        }
        }
    }
}
