/*
 * ranklog.c -- the last lines of a rank's log (ranklog.h).  The reading of
 * the file and the choice of lines are apart, so the choice is a pure
 * function over bytes with a fuzz target (fuzz/sup_rank_log.c).
 */
#include "supervisor/ranklog.h"

#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"

size_t fb__rank_log_tail_text(char *buf, size_t n, int cut)
{
    buf[n] = '\0';
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (buf[i] == '\0')
            buf[i] = '?';
    char *start = buf;
    if (cut) {
        char *nl = strchr(buf, '\n');
        if (nl)
            start = nl + 1;
    }
    /* Only this attempt's output: from its marker line on. */
    for (char *mk = start; (mk = strstr(mk, FB__RANK_LOG_MARK)); mk++)
        if (mk == buf || mk[-1] == '\n')
            start = mk;
    /* The newlines before the last byte, from the end: after the
     * FB__RANK_LOG_LINES-th of them, that many lines are left. */
    int lines = 0;
    for (size_t i = n - 1; i > (size_t)(start - buf);) {
        i--;
        if (buf[i] == '\n' && ++lines == FB__RANK_LOG_LINES) {
            start = buf + i + 1;
            break;
        }
    }
    size_t len = n - (size_t)(start - buf);
    memmove(buf, start, len + 1);
    return len;
}

void fb__rank_log_tail(const char *path, char *buf, size_t size)
{
    if (size == 0)
        return;
    buf[0] = '\0';
    if (size < 2)
        return;
    int fd = fb__open_regular(path, 0);
    if (fd < 0)
        return;
    struct stat st;
    if (fstat(fd, &st) == 0) {
        size_t want = size - 1;
        off_t off = st.st_size > (off_t)want ? st.st_size - (off_t)want : 0;
        ssize_t n = pread(fd, buf, want, off);
        if (n > 0)
            fb__rank_log_tail_text(buf, (size_t)n, off > 0);
    }
    close(fd);
}
