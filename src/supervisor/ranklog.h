/*
 * ranklog.h -- the last lines of a rank's log (ranklog.c), quoted in the
 * incident the rank's failure makes (journal, classifier).  The log is the
 * rank's output: any bytes.
 */
#ifndef FB_SUPERVISOR_RANKLOG_H
#define FB_SUPERVISOR_RANKLOG_H

#include <stddef.h>

/* Lines kept at most. */
#define FB__RANK_LOG_LINES 12
/* The line launch.c writes at the start of each attempt's output. */
#define FB__RANK_LOG_MARK "=== firebreak: attempt "

/* The tail of the log at path in buf: its last size - 1 bytes at most,
 * then fb__rank_log_tail_text over them (cut when the file is longer).
 * The file must be a regular file (fb__open_regular: a FIFO a rank put in
 * its place cannot hang the supervisor).  buf is "" when the file cannot
 * be read. */
void fb__rank_log_tail(const char *path, char *buf, size_t size);

/* In place over the n bytes of buf (buf has room for n + 1): keeps whole
 * lines (when `cut`, the first line is a fragment and is dropped if a
 * newline follows it), only this attempt's (from the last line that
 * starts with FB__RANK_LOG_MARK), and at most FB__RANK_LOG_LINES of them.
 * A NUL byte the rank wrote becomes '?', so the lines after it are kept.
 * The result is a suffix of the (NUL-free) input, NUL-terminated; returns
 * its length. */
size_t fb__rank_log_tail_text(char *buf, size_t n, int cut);

#endif
