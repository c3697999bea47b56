/*
 * http_get.c -- N sequential HTTP GETs, a new connection each (as a
 * scraper without keep-alive does); prints the latency distribution.
 * usage: http_get PORT PATH N     (127.0.0.1)
 * Output: one line "n=.. bytes=.. median_us=.. p99_us=.. mean_us=..".
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One request; returns the bytes received, -1 on error. */
static long get(int port, const char *req, size_t req_len)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((unsigned short)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa)) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    if (write(fd, req, req_len) != (ssize_t)req_len) {
        close(fd);
        return -1;
    }
    char buf[65536];
    long total = 0;
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0)
        total += n;
    close(fd);
    return strncmp(buf, "HTTP/1.", 7) == 0 || total > 0 ? total : -1;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: http_get PORT PATH N\n");
        return 2;
    }
    int port = atoi(argv[1]), n = atoi(argv[3]);
    char req[512];
    int len = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                       "Connection: close\r\n\r\n", argv[2]);
    double *lat = malloc(sizeof *lat * (size_t)(n > 0 ? n : 1));
    long bytes = 0;
    if (!lat || n <= 0 || len <= 0)
        return 2;
    for (int i = 0; i < n; i++) {
        double t0 = now_us();
        long b = get(port, req, (size_t)len);
        lat[i] = now_us() - t0;
        if (b < 0) {
            fprintf(stderr, "http_get: request %d failed\n", i);
            return 1;
        }
        bytes = b;
    }
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += lat[i];
    qsort(lat, (size_t)n, sizeof *lat, cmp);
    printf("n=%d bytes=%ld median_us=%.1f p99_us=%.1f mean_us=%.1f\n", n, bytes,
           lat[n / 2], lat[(n * 99) / 100], sum / n);
    free(lat);
    return 0;
}
