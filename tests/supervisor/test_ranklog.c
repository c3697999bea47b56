/*
 * test_ranklog.c -- the last lines of a rank's log (src/supervisor/
 * ranklog.c), quoted in the rank's incident:
 *
 *  - this attempt's lines only, at most FB__RANK_LOG_LINES, a cut first
 *    line dropped;
 *  - a NUL byte the rank wrote does not hide the lines after it (it
 *    became the end of the text, and the last lines were lost);
 *  - an empty line just before the last 12 is not a 13th;
 *  - a FIFO in the log's place does not hang the reader (it opened it
 *    blocking: the supervisor waited for a writer that never came).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../check.h"
#include "supervisor/ranklog.h"

/* text: a string literal, NULs included. */
#define TAIL_OF(text, cut, want) tail_of(text, sizeof text - 1, cut, want)

static void tail_of(const char *text, size_t n, int cut, const char *want)
{
    char buf[512];
    memcpy(buf, text, n);
    size_t len = fb__rank_log_tail_text(buf, n, cut);
    CHECK_EQ_STR(buf, want);
    CHECK_EQ_INT(len, strlen(want));
}

int main(void)
{
    TAIL_OF("old\n" FB__RANK_LOG_MARK "1, rank 0 ===\nA\nB\n", 0,
            FB__RANK_LOG_MARK "1, rank 0 ===\nA\nB\n");
    TAIL_OF("ment\nA\nB", 1, "A\nB");
    TAIL_OF("ment only", 1, "ment only");
    char many[256] = "";
    for (int i = 0; i < 20; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many), "l%d\n", i);
    tail_of(many, strlen(many), 0,
            "l8\nl9\nl10\nl11\nl12\nl13\nl14\nl15\nl16\nl17\nl18\nl19\n");
    /* An empty line first, then the cap's 12: the empty one is dropped
     * (it was kept, 13 lines; found by fuzz/sup_rank_log.c). */
    TAIL_OF("\nl1\nl2\nl3\nl4\nl5\nl6\nl7\nl8\nl9\nl10\nl11\nl12\n", 0,
            "l1\nl2\nl3\nl4\nl5\nl6\nl7\nl8\nl9\nl10\nl11\nl12\n");
    /* A NUL in the output: the lines after it are the last lines. */
    TAIL_OF("junk \0\001 here\nstep 40\nSegmentation fault\n", 0,
            "junk ?\001 here\nstep 40\nSegmentation fault\n");

    char dir[] = "/tmp/fb-ranklog-XXXXXX", path[64];
    CHECK(mkdtemp(dir) != NULL);
    check_tmpdir(dir);
    snprintf(path, sizeof path, "%s/rank-0.log", dir);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs("partial line\n", f);
        for (int i = 0; i < 3000; i++)
            fprintf(f, "line %d\n", i);
        fclose(f);
    }
    char buf[100];
    fb__rank_log_tail(path, buf, sizeof buf);
    CHECK_EQ_STR(buf, "line 2991\nline 2992\nline 2993\nline 2994\nline 2995\n"
                      "line 2996\nline 2997\nline 2998\nline 2999\n");
    /* A FIFO in its place (ctest's timeout catches a hang). */
    unlink(path);
    CHECK_EQ_INT(mkfifo(path, 0600), 0);
    strcpy(buf, "x");
    fb__rank_log_tail(path, buf, sizeof buf);
    CHECK_EQ_STR(buf, "");
    unlink(path);
    fb__rank_log_tail(path, buf, sizeof buf); /* gone */
    CHECK_EQ_STR(buf, "");
    rmdir(dir);
    return failures != 0;
}
