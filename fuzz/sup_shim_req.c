/*
 * sup_shim_req.c -- libFuzzer target for the shim server's reader of one
 * request (fb__shim_req_parse, src/supervisor/proc.c).  Only the
 * supervisor writes to the server's socket, but the reader is bounded all
 * the same: any bytes are refused or split within them.  Byte 0 is the
 * number of descriptors that came with the message (0-6: one more than a
 * request may carry), the rest the message.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "supervisor/proc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* s is a NUL-ended string inside [buf, buf + n): its length + 1. */
static size_t inside(const char *s, const char *buf, size_t n)
{
    if (!s || s < buf || s >= buf + n)
        __builtin_trap();
    const char *z = memchr(s, '\0', (size_t)(buf + n - s));
    if (!z)
        __builtin_trap();
    return (size_t)(z - s) + 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int nfd = data[0] % 7;
    size_t n = size - 1;
    char *buf = malloc(n ? n : 1); /* exactly n: a read past it is caught */
    if (!buf)
        return 0;
    memcpy(buf, data + 1, n);
    fb__spawn sp;
    uint32_t flags;
    int rc = fb__shim_req_parse(buf, n, nfd, &sp, &flags);
    if (rc == 0) {
        /* Every string inside the message, and they and the header are all
         * of it; one descriptor per descriptor flag; argv not empty. */
        size_t used = 5 * sizeof(uint32_t), argc = 0;
        for (; sp.argv[argc]; argc++)
            used += inside(sp.argv[argc], buf, n);
        for (size_t i = 0; sp.envp[i]; i++)
            used += inside(sp.envp[i], buf, n);
        if (sp.cwd)
            used += inside(sp.cwd, buf, n);
        if (sp.path)
            used += inside(sp.path, buf, n);
        int fds = 0;
        for (uint32_t f = (flags & 0xff) >> 3; f; f >>= 1)
            fds += (int)(f & 1);
        if (argc < 1 || used != n || fds != nfd || (flags & ~(uint32_t)0x1ff) ||
            !!(flags & 4) != !!sp.cwd || !!(flags & 256) != !!sp.path ||
            sp.standby != !!(flags & 1) ||
            sp.exec_ahead != !!(flags & 2))
            __builtin_trap();
        free((void *)sp.argv);
    } else if (sp.argv) {
        __builtin_trap(); /* nothing is handed out from a refused request */
    }
    free(buf);
    return 0;
}
