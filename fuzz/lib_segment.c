/*
 * lib_segment.c -- libFuzzer target for the segment reader, the way the
 * supervisor, the node watcher and `firebreak fr` use it: a segment image
 * is built from the input in a memfd, attached with the real reader
 * (fb__seg_open_as), then changed again through the file while mapped --
 * the rank rewriting its header after the checks, or truncating the file
 * under the mapping (the SIGBUS guard) -- and every reader function runs
 * over it: check, progress and end-record loads, report
 * reads, SDC record reads (minor 2), the fr area, and the flight-recorder
 * ring loader.
 *
 * Input: byte 0 picks the image: bit 0 clear = a valid template (small
 * ring) with patches applied, set = the input itself is the image; bit 1
 * set = after the second patch, the next two bytes (x 64) give a size the
 * file is truncated to.  Patches are
 * records {u16 offset/8, u8 len, len bytes}; a record with len 0 splits
 * the ones applied before attach from the ones applied after.
 */
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fr/model.h"
#include "lib/segment.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FR_CAP 64
#define SDC_CAP 16
#define SDC_OFFSET \
    (FB__SEG_HEADER_SIZE + FB__SEG_REPORT_CAPACITY * sizeof(fb__seg_report) + \
     FR_CAP * FB__SEG_FR_ENTRY_SIZE)
#define IMAGE_SIZE (SDC_OFFSET + SDC_CAP * sizeof(fb__seg_sdc))

static void template(unsigned char *img)
{
    memset(img, 0, IMAGE_SIZE);
    fb__seg_header *h = (fb__seg_header *)img;
    h->magic = FB__SEG_MAGIC;
    h->version_major = FB__SEG_VERSION_MAJOR;
    h->version_minor = FB__SEG_VERSION_MINOR;
    h->total_size = IMAGE_SIZE;
    h->header_size = FB__SEG_HEADER_SIZE;
    h->report_offset = FB__SEG_HEADER_SIZE;
    h->report_capacity = FB__SEG_REPORT_CAPACITY;
    h->fr_entry_size = FB__SEG_FR_ENTRY_SIZE;
    h->fr_offset = FB__SEG_HEADER_SIZE + FB__SEG_REPORT_CAPACITY * sizeof(fb__seg_report);
    h->fr_capacity = FR_CAP;
    h->world_size = 2;
    memcpy(h->job_id, "fuzz", 5);
    /* Three reports, so reads get past the sequence checks. */
    fb__seg_report *r = (fb__seg_report *)(img + FB__SEG_HEADER_SIZE);
    for (int i = 0; i < 3; i++) {
        r[i].seq = (uint64_t)i + 1;
        r[i].kind = FB__REPORT_NOTE;
        memcpy(r[i].text, "note", 5);
    }
    h->report_head = 3;
    /* Two SDC records. */
    h->sdc_offset = SDC_OFFSET;
    h->sdc_capacity = SDC_CAP;
    fb__seg_sdc *sd = (fb__seg_sdc *)(img + SDC_OFFSET);
    for (int i = 0; i < 2; i++) {
        sd[i].seq = (uint64_t)i + 1;
        sd[i].step = 7;
        sd[i].length = 64;
        memcpy(sd[i].name, "w1", 3);
    }
    h->sdc_head = 2;
}

/* Apply patch records from *p until a len-0 record or the end. */
static void patch(int fd, const uint8_t **p, const uint8_t *end, size_t img_size)
{
    while (end - *p >= 3) {
        size_t off = (size_t)((*p)[0] | (*p)[1] << 8) * 8;
        size_t len = (*p)[2];
        *p += 3;
        if (len == 0)
            return;
        if ((size_t)(end - *p) < len)
            len = (size_t)(end - *p);
        if (off < img_size) {
            size_t n = len < img_size - off ? len : img_size - off;
            if (pwrite(fd, *p, n, (off_t)off) != (ssize_t)n)
                return;
        }
        *p += len;
    }
}

static void read_all(fb__seg *seg, const char *path, int fd,
                     const uint8_t **p, const uint8_t *end, size_t img_size,
                     int shrink)
{
    char why[128];
    uint64_t sink = 0;
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1)
            patch(fd, p, end, img_size); /* the rank writes after attach */
        if (pass == 1 && shrink && end - *p >= 2) {
            size_t to = (size_t)((*p)[0] | (*p)[1] << 8) * 64;
            *p += 2;
            if (ftruncate(fd, (off_t)(to < img_size ? to : img_size)))
                return;
        }
        fb__seg_check(seg, why, sizeof why);
        const fb__seg_identity *id = fb__seg_ident(seg);
        fb__seg_header *h = fb__seg_hdr(seg);
        sink += atomic_load(&h->steps_done) + atomic_load(&h->step) +
                atomic_load(&h->phase) + atomic_load(&h->heartbeat_mono_ns) +
                atomic_load(&h->end_kind) + (uint64_t)atomic_load(&h->end_code) +
                atomic_load(&h->inject_kind) + id->pid + id->rank;
        uint32_t budget = id->report_capacity + 1;
        for (uint64_t idx = 0; budget-- > 0;) {
            fb__seg_report rep;
            int got = fb__seg_read_report(seg, idx, &rep);
            if (got == 0)
                break;
            if (got > 0)
                sink += strlen(rep.text) + rep.kind;
            idx++;
        }
        budget = id->sdc_capacity + 1;
        for (uint64_t idx = 0; budget-- > 0;) {
            fb__seg_sdc rec;
            int got = fb__seg_read_sdc(seg, idx, &rec);
            if (got == 0)
                break;
            if (got > 0)
                sink += strlen(rec.name) + rec.hash + rec.step;
            idx++;
        }
        sink += fb__seg_sdc_head(seg);
        uint32_t cap;
        const unsigned char *area = fb__seg_fr_area(seg, &cap);
        if (area)
            sink += area[(size_t)cap * FB__SEG_FR_ENTRY_SIZE - 1];
        fb__fr_model m;
        char err[256];
        fb__fr_model_init(&m);
        fb__fr_load_ring(&m, path, err, sizeof err);
        fb__fr_model_free(&m);
    }
    if (sink == 42)
        fputc(' ', stderr);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > (1u << 20))
        return 0;
    int fd = memfd_create("fb.fuzz.0.0", MFD_CLOEXEC);
    if (fd < 0)
        return 0;
    const uint8_t *p = data + 1, *end = data + size;
    size_t img_size;
    if (data[0] & 1) {
        img_size = size - 1;
        p = end;
        if (write(fd, data + 1, img_size) != (ssize_t)img_size)
            goto out;
    } else {
        static unsigned char img[IMAGE_SIZE];
        template(img);
        img_size = IMAGE_SIZE;
        if (write(fd, img, img_size) != (ssize_t)img_size)
            goto out;
        patch(fd, &p, end, img_size);
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    fb__seg *seg = NULL;
    if (fb__seg_open_as(&seg, path, FB__SEG_ANY_OWNER, NULL) == 0) {
        read_all(seg, path, fd, &p, end, img_size, data[0] & 2);
        fb__seg_close(seg);
    }
out:
    close(fd);
    return 0;
}
