/*
 * errorfile.c -- the traceback a PyTorch rank leaves in
 * TORCHELASTIC_ERROR_FILE.
 *
 * torchrun's contract: each rank gets its own TORCHELASTIC_ERROR_FILE, and
 * `torch.distributed.elastic.multiprocessing.errors.record` writes the
 * exception of a failing rank there before it exits, as
 *
 *   {"message": {"message": "ValueError: ...",
 *                "extraInfo": {"py_callstack": "Traceback ...\n  File
 *                              \"t.py\", line 3, in step\n ...",
 *                              "timestamp": "..."}}}
 *
 * (older torch: "message" a string).  The supervisor sets the path per
 * rank and attempt (launch.c) and, when a rank fails, reads it here: a
 * regular file, not a link, at most FB__SUP_ERROR_FILE_MAX bytes, through
 * the bounded JSON parser.  The file comes from the rank, so everything in
 * it is outside input.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/json.h"
#include "common/util.h"
#include "supervisor/sup.h"

int fb__sup_error_file_path(const fb__sup *s, int rank, char *buf, size_t size)
{
    return fb__fmt(buf, size, "%s/error-attempt-%d-rank-%d.json", s->logs_dir,
                   s->attempt, rank);
}

/* The innermost frame of a Python traceback outside site-packages and
 * dist-packages (the user's code; else the innermost at all), as
 * "FILE:LINE in FUNC". */
static void user_frame(const char *tb, char *where, size_t size)
{
    const char *best = NULL, *any = NULL;
    for (const char *p = tb; (p = strstr(p, "File \"")); p += 6) {
        const char *end = strchr(p + 6, '\n');
        size_t l = end ? (size_t)(end - p) : strlen(p);
        any = p;
        const char *q = memchr(p + 6, '"', l - 6);
        if (!q)
            continue;
        char file[PATH_MAX];
        size_t fl = (size_t)(q - (p + 6));
        if (fl >= sizeof file)
            continue;
        memcpy(file, p + 6, fl);
        file[fl] = '\0';
        if (!strstr(file, "/site-packages/") && !strstr(file, "/dist-packages/"))
            best = p;
    }
    const char *p = best ? best : any;
    where[0] = '\0';
    if (!p)
        return;
    /* File "F", line N, in FUNC */
    const char *q = strchr(p + 6, '"');
    long line = -1;
    const char *fn = NULL;
    size_t fnl = 0;
    const char *eol = strchr(p, '\n');
    if (!eol)
        eol = p + strlen(p);
    if (q && q < eol) {
        const char *ln = strstr(q, ", line ");
        if (ln && ln < eol)
            line = strtol(ln + 7, NULL, 10);
        const char *in = strstr(q, ", in ");
        if (in && in < eol) {
            fn = in + 5;
            fnl = (size_t)(eol - fn);
        }
        snprintf(where, size, "%.*s:%ld%s%.*s", (int)(q - (p + 6)), p + 6, line,
                 fn ? " in " : "", (int)fnl, fn ? fn : "");
    }
}

int fb__sup_error_file_parse(const char *text, size_t len, char *msg, size_t msize,
                             char *where, size_t wsize)
{
    msg[0] = where[0] = '\0';
    fb__json_limits lim = {.max_input = FB__SUP_ERROR_FILE_MAX, .max_depth = 16,
                           .max_nodes = 4096};
    fb__json_doc *doc = NULL;
    int rc = fb__json_parse(text, len, &lim, &doc, NULL, 0);
    if (rc)
        return rc;
    const fb__json *m = fb__json_get(fb__json_root(doc), "message");
    const char *s = fb__json_as_str(m);
    const char *tb = NULL;
    if (!s) {
        s = fb__json_as_str(fb__json_get(m, "message"));
        tb = fb__json_as_str(fb__json_get(fb__json_get(m, "extraInfo"), "py_callstack"));
    }
    if (!s) {
        rc = FB_EFORMAT;
        goto out;
    }
    /* one line: the message's first */
    size_t l = strcspn(s, "\n");
    char line[512];
    snprintf(line, sizeof line, "%.*s", (int)(l < sizeof line ? l : sizeof line - 1), s);
    fb__safe_text(msg, msize, line);
    if (tb) {
        char w[PATH_MAX + 256];
        user_frame(tb, w, sizeof w);
        fb__safe_text(where, wsize, w);
    }
out:
    fb__json_free(doc);
    return rc;
}

int fb__sup_error_file_read(const char *path, char *msg, size_t msize, char *where,
                            size_t wsize)
{
    msg[0] = where[0] = '\0';
    int fd = fb__open_regular(path, O_NOFOLLOW);
    if (fd < 0)
        return fd;
    char *buf = malloc(FB__SUP_ERROR_FILE_MAX + 1);
    int rc = 0;
    size_t len = 0;
    if (!buf) {
        rc = -ENOMEM;
        goto out;
    }
    for (;;) {
        ssize_t n = read(fd, buf + len, FB__SUP_ERROR_FILE_MAX + 1 - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = -errno;
            goto out;
        }
        if (n == 0)
            break;
        len += (size_t)n;
        if (len > FB__SUP_ERROR_FILE_MAX) {
            rc = FB_ETOOBIG;
            goto out;
        }
    }
    rc = fb__sup_error_file_parse(buf, len, msg, msize, where, wsize);
out:
    free(buf);
    close(fd);
    return rc;
}
