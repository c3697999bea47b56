/*
 * segment_guard.h -- keeps a reader alive when a rank truncates the
 * segment file it is reading (segment_guard.c; docs/segment.md, "Readers").
 *
 * tmpfs files cannot be sealed against shrinking, and a load from a page
 * of a MAP_SHARED mapping that lies past the end of the file raises
 * SIGBUS.  Readers register each read-only mapping here; a SIGBUS whose
 * address lies inside one replaces the lost pages with zero pages, marks
 * the mapping lost, and lets the load run again.  Any other SIGBUS goes
 * to whoever had the signal before (the default action: a core dump).
 *
 * Only the reader side (fb__seg_open_as) uses this: the handler is
 * installed on the first registration, never in a rank, so the library
 * does not take a training program's SIGBUS.
 */
#ifndef FB_LIB_SEGMENT_GUARD_H
#define FB_LIB_SEGMENT_GUARD_H

#include <stddef.h>
#include <stdint.h>

/* Most mappings guarded at once (the supervisor maps one per local rank). */
#define FB__SEG_GUARD_MAX (1u << 17)

/* Guard [base, base + size) (page-aligned base, a PROT_READ mapping);
 * installs the SIGBUS handler the first time.  *slot receives the handle
 * for the calls below.  0, -ENOSPC when FB__SEG_GUARD_MAX mappings are
 * guarded already, or -errno (the registry's mmap, sigaction). */
int fb__seg_guard_add(const void *base, size_t size, uint32_t *slot);

/* Stop guarding slot's mapping; call before munmap. */
void fb__seg_guard_remove(uint32_t slot);

/* 0 while every page of slot's mapping was readable; otherwise 1 and
 * *offset receives the lowest offset from which the guard replaced the
 * mapping with zeros (the file had shrunk below it). */
int fb__seg_guard_lost(uint32_t slot, uint64_t *offset);

#endif
