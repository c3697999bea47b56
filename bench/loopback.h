/*
 * loopback.h -- the two ends of a TCP connection on this host's loopback,
 * for the benchmarks that move bytes between two processes or threads
 * (bench_repl, bench_tiers).
 */
#ifndef FB_BENCH_LOOPBACK_H
#define FB_BENCH_LOOPBACK_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

/* A listening socket on 127.0.0.1, its port in *port; -1 on failure. */
static inline int bench_listen_loopback(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, 4) ||
        getsockname(fd, (struct sockaddr *)&a, &len)) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    *port = ntohs(a.sin_port);
    return fd;
}

/* A connection to 127.0.0.1:port; -1 on failure. */
static inline int bench_connect_loopback(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a)) {
        close(fd);
        fd = -1;
    }
    return fd;
}

#endif
