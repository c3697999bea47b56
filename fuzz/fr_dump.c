/*
 * fr_dump.c -- libFuzzer target for the flight-recorder dump loader and
 * the analysis behind `firebreak fr analyze`: one input is one rank's file
 * (a firebreak ring, a PyTorch JSON or pickle dump), read through a memfd
 * the way the tool reads a file.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fr/fr.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int fd = memfd_create("nccl_trace_rank_3", MFD_CLOEXEC);
    if (fd < 0)
        return 0;
    if (write(fd, data, size) != (ssize_t)size) {
        close(fd);
        return 0;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    const char *paths[1] = {path};
    fb__fr_result *res = NULL;
    char err[512];
    if (fb__fr_analyze_paths(paths, 1, &res, err, sizeof err) == 0) {
        fb__jsonw w;
        fb__jsonw_init(&w);
        fb__fr_result_json(res, &w);
        fb__jsonw_free(&w);
        char line[256];
        fb__fr_summary(res, line, sizeof line);
        fb__fr_result_free(res);
    }
    close(fd);
    return 0;
}
