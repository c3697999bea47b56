/*
 * check_text.h -- what the fuzz targets ask of text a reader took from
 * outside input: NUL-terminated within its buffer, and safe to print (no
 * control byte but tab; fb__safe_text's promise).
 */
#ifndef FB_FUZZ_CHECK_TEXT_H
#define FB_FUZZ_CHECK_TEXT_H

#include <stddef.h>
#include <string.h>

static inline void fuzz_check_text(const char *s, size_t cap)
{
    if (!memchr(s, '\0', cap))
        __builtin_trap();
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if ((*p < 0x20 && *p != '\t') || *p == 0x7f)
            __builtin_trap();
}

#endif
