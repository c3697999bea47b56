/*
 * kmsg.c -- reading kernel-log records from /dev/kmsg or from a plain file
 * in the same record format (see parse.h).  The health check reads the log
 * since boot once; the agent keeps a reader open and takes what is new at
 * each sample.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "firebreak/firebreak.h"
#include "health/parse.h"

int fb__kmsg_open(fb__kmsg_reader *k, const char *path)
{
    memset(k, 0, sizeof *k);
    k->fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (k->fd < 0)
        return -errno;
    struct stat st;
    int rc = fstat(k->fd, &st) ? -errno
             : S_ISCHR(st.st_mode) || S_ISREG(st.st_mode) ? 0 : FB_ENOTREG;
    if (rc) {
        close(k->fd);
        k->fd = -1;
        return rc;
    }
    k->is_dev = S_ISCHR(st.st_mode);
    return 0;
}

void fb__kmsg_close(fb__kmsg_reader *k)
{
    if (k->fd >= 0)
        close(k->fd);
    k->fd = -1;
}

/* Parse one line into rec; 1 when it is a record. */
static int take(fb__kmsg_reader *k, const char *line, size_t len,
                fb__kmsg_record *rec)
{
    if (len == 0 || line[0] == ' ')
        return 0; /* empty, or a " KEY=value" continuation */
    if (fb__kmsg_parse(line, len, rec)) {
        k->malformed++;
        return 0;
    }
    k->records++;
    return 1;
}

int fb__kmsg_next(fb__kmsg_reader *k, fb__kmsg_record *rec, int final)
{
    if (k->is_dev) {
        for (;;) {
            ssize_t n = read(k->fd, k->buf, sizeof k->buf - 1);
            if (n < 0) {
                if (errno == EINTR)
                    continue;
                if (errno == EPIPE) { /* overwritten before we read it */
                    k->lost++;
                    continue;
                }
                return errno == EAGAIN ? 0 : -errno;
            }
            if (n == 0)
                return 0;
            if (take(k, k->buf, (size_t)n, rec))
                return 1;
        }
    }
    for (;;) {
        char *start = k->buf + k->pos;
        char *nl = memchr(start, '\n', k->len - k->pos);
        if (nl) {
            size_t n = (size_t)(nl - start);
            k->pos += n + 1;
            if (k->skipping) { /* the end of a line too long: dropped */
                k->skipping = 0;
                continue;
            }
            if (take(k, start, n, rec))
                return 1;
            continue;
        }
        if (k->skipping)
            k->pos = k->len; /* still inside it: none of it is kept */
        /* no full line left: keep the partial one, read more */
        if (k->pos) {
            memmove(k->buf, start, k->len - k->pos);
            k->len -= k->pos;
            k->pos = 0;
        }
        if (k->len == sizeof k->buf) { /* a line longer than the buffer */
            k->malformed++;
            k->len = 0;
            k->skipping = 1;
        }
        ssize_t n = 0;
        if (k->file_bytes >= FB__KMSG_FILE_MAX)
            k->truncated = 1; /* read as if the file ended here */
        else
            n = read(k->fd, k->buf + k->len, sizeof k->buf - k->len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return errno == EAGAIN ? 0 : -errno;
        if (n == 0) {
            if (final && k->len && !k->skipping) {
                size_t len = k->len;
                k->len = 0;
                return take(k, k->buf, len, rec);
            }
            return 0;
        }
        k->len += (size_t)n;
        k->file_bytes += (uint64_t)n;
    }
}
