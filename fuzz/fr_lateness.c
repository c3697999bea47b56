/*
 * fr_lateness.c -- libFuzzer target for the live lateness analysis
 * (src/fr/lateness.c), which reads rings that ranks write: any bytes in
 * the slots, any head.
 *
 * Input: byte 0 the world size (1 + low 3 bits) and, when bit 7 is set,
 * "make every slot's seq consistent" (so the fuzzed fields reach the
 * analysis instead of failing the sequence check); byte 1 the budget;
 * bytes 2..9 the head; the rest the ring area (the largest power of two
 * of 128-byte slots that fits).  Every rank is fed the same area.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fr/fr.h"
#include "fr/ring.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 10 + 2 * FB__SEG_FR_ENTRY_SIZE)
        return 0;
    int world = 1 + (data[0] & 7), fix = data[0] & 0x80;
    uint32_t budget = data[1];
    uint64_t head;
    memcpy(&head, data + 2, sizeof head);
    uint32_t cap = 2;
    while ((size_t)cap * 2 * FB__SEG_FR_ENTRY_SIZE <= size - 10 && cap < (1u << 12))
        cap *= 2;
    fb__fr_event *area = aligned_alloc(64, (size_t)cap * FB__SEG_FR_ENTRY_SIZE);
    fb__fr_late *t = NULL;
    if (!area || fb__fr_late_new(&t, world, NULL)) {
        free(area);
        return 0;
    }
    memcpy(area, data + 10, (size_t)cap * FB__SEG_FR_ENTRY_SIZE);
    uint32_t comm = fb__fr_comm_slots(cap), slots = fb__fr_ring_slots(cap);
    if (fix) {
        head %= 4 * (uint64_t)slots + 1;
        for (uint64_t i = head > slots ? head - slots : 0; i < head; i++)
            atomic_store(&area[comm + i % slots].seq, i + 1);
    }
    for (int pass = 0; pass < 3; pass++) {
        for (int k = 0; k < world; k++)
            fb__fr_late_feed_ring(t, k, area, cap, head, (uint64_t)pass << 20,
                                  budget);
        int changed[8];
        fb__fr_late_update(t, pass * 0.1, changed, 8);
    }
    fb__fr_late_window w;
    int flagged;
    for (int k = 0; k <= world; k++)
        fb__fr_late_get(t, k, &w, &flagged);
    fb__fr_late_free(t);
    free(area);
    return 0;
}
