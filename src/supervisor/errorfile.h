/*
 * errorfile.h -- reading the JSON that PyTorch's @record leaves in
 * TORCHELASTIC_ERROR_FILE (errorfile.c; the format is described there).
 */
#ifndef FB_SUPERVISOR_ERRORFILE_H
#define FB_SUPERVISOR_ERRORFILE_H

#include <stddef.h>

#define FB__SUP_ERROR_FILE_MAX (256 * 1024)

/* The exception's message (its first line) and the user's frame ("FILE:LINE
 * in FUNC": the innermost outside site-packages and dist-packages, else the
 * innermost; "" without a traceback), both made safe for a terminal
 * (fb__safe_text) and NUL-terminated, from the file at path (a regular
 * file, not a link, at most FB__SUP_ERROR_FILE_MAX bytes) or from text.
 * 0, -errno, FB_ENOTREG, FB_ETOOBIG or FB_EFORMAT (not JSON, or no
 * message); msg and where are "" on an error. */
int fb__sup_error_file_read(const char *path, char *msg, size_t msize, char *where,
                            size_t wsize);
int fb__sup_error_file_parse(const char *text, size_t len, char *msg, size_t msize,
                             char *where, size_t wsize);

#endif
