/*
 * http.c -- the agent's HTTP side through libmicrohttpd: GET /metrics (the
 * exposition text the sampler prepared) and GET / (a short page).  Nothing
 * else: other methods 405, other paths 404, no path reaches the
 * filesystem, requests are bounded by the connection memory limit, and the
 * listener binds loopback unless told otherwise.  Without libmicrohttpd
 * (FB_HAVE_MHD unset) this file compiles to a stub that says so.
 *
 * Connections are capped (MAX_CONNECTIONS), and the cap cannot be held by
 * clients that connect and stall ("GET /met" and nothing more): a
 * connection must finish its request headers within HEADER_TIMEOUT_S of
 * its last activity, and when a new connection would go over the cap, the
 * connection idle the longest -- one with no request being answered: a
 * partial request (headers or body still coming) or a keep-alive between
 * requests -- is shut down to
 * make room.  So a scrape is always served, however many idle sockets
 * one peer holds.  The callbacks all run on libmicrohttpd's one internal
 * polling thread; the connection list is only touched there.
 */
#include "agent/agent.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

int fb__http_parse_listen(const char *listen, struct sockaddr_in *sa,
                          char *err, size_t err_size)
{
    char host[64];
    long long p;
    const char *colon = strrchr(listen, ':');
    if (!colon || (size_t)(colon - listen) >= sizeof host ||
        fb__parse_int(colon + 1, 0, 65535, &p)) {
        snprintf(err, err_size, "--listen '%s': want ADDRESS:PORT, e.g. "
                 "127.0.0.1:9400 (IPv4)", listen);
        return -EINVAL;
    }
    memcpy(host, listen, (size_t)(colon - listen));
    host[colon - listen] = '\0';
    memset(sa, 0, sizeof *sa);
    sa->sin_family = AF_INET;
    sa->sin_port = htons((uint16_t)p);
    if (!*host)
        snprintf(host, sizeof host, "127.0.0.1");
    if (inet_pton(AF_INET, host, &sa->sin_addr) != 1) {
        snprintf(err, err_size, "--listen '%s': '%s' is not an IPv4 address",
                 listen, host);
        return -EINVAL;
    }
    return 0;
}

#ifdef FB_HAVE_MHD
#include <microhttpd.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <sys/socket.h>

#define REQUEST_MEMORY_LIMIT 8192 /* bytes per connection, headers included */
#define MAX_CONNECTIONS 64
/* libmicrohttpd's own cap is higher, so that a new connection reaches
 * on_connection, which evicts an idle one to stay within MAX_CONNECTIONS. */
#define MHD_CONNECTIONS (2 * MAX_CONNECTIONS)
#define HEADER_TIMEOUT_S 3 /* inactivity before a connection is closed */

/* One TCP connection (libmicrohttpd's socket context). */
typedef struct conn {
    struct conn *prev, *next;
    struct MHD_Connection *c;
    uint64_t idle_since_ns; /* accepted, or its last request answered */
    uint64_t busy_since_ns; /* when its request being answered came   */
    int busy;               /* a request is complete: being answered */
    int evicted;            /* shut down, waiting for libmicrohttpd's close */
} conn;

struct fb__http {
    struct MHD_Daemon *d;
    char *(*get)(void *, size_t *);
    void *ctx;
    _Atomic uint64_t requests;
    _Atomic uint64_t evictions;
    conn *conns; /* live connections, newest first */
    int nlive;   /* in conns and not evicted */
};

/* The connection to make room with: the one idle the longest, else the
 * one busy the longest.  A client that pipelines requests and never reads
 * the answers keeps its connection busy for good: 64 of them held every
 * slot, and each scrape was refused until libmicrohttpd's timeout.  An
 * answer a real scraper reads is sent in milliseconds. */
static conn *victim(fb__http *h)
{
    conn *idle = NULL, *busy = NULL;
    for (conn *k = h->conns; k; k = k->next) {
        if (k->evicted)
            continue;
        if (!k->busy && (!idle || k->idle_since_ns <= idle->idle_since_ns))
            idle = k;
        if (k->busy && (!busy || k->busy_since_ns <= busy->busy_since_ns))
            busy = k;
    }
    return idle ? idle : busy;
}

/* Shut the socket down; libmicrohttpd sees the end of the stream on its
 * next poll and closes the connection (NOTIFY_CLOSED frees the entry). */
static void evict(fb__http *h, conn *k)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(k->c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (ci)
        shutdown(ci->connect_fd, SHUT_RDWR);
    k->evicted = 1;
    h->nlive--;
    atomic_fetch_add_explicit(&h->evictions, 1, memory_order_relaxed);
}

static void on_connection(void *cls, struct MHD_Connection *c,
                          void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    fb__http *h = cls;
    conn *k = *socket_context;
    if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        if (!k)
            return;
        if (!k->evicted)
            h->nlive--;
        if (k->prev)
            k->prev->next = k->next;
        else
            h->conns = k->next;
        if (k->next)
            k->next->prev = k->prev;
        free(k);
        *socket_context = NULL;
        return;
    }
    /* NOTIFY_STARTED: make room first, so the newcomer is never the one
     * evicted. */
    if (h->nlive >= MAX_CONNECTIONS) {
        conn *v = victim(h);
        if (v)
            evict(h, v);
    }
    k = calloc(1, sizeof *k);
    if (!k) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (ci)
            shutdown(ci->connect_fd, SHUT_RDWR);
        return;
    }
    k->c = c;
    k->idle_since_ns = fb__now_ns();
    k->next = h->conns;
    if (h->conns)
        h->conns->prev = k;
    h->conns = k;
    h->nlive++;
    *socket_context = k;
    if (h->nlive > MAX_CONNECTIONS)
        evict(h, k);
}

/* libmicrohttpd's messages (a client gone mid-request, an evicted
 * connection) on stderr, at most LOG_BURST a minute: clients must not be
 * able to flood the node's log. */
#define LOG_BURST 10
static void http_log(void *cls, const char *fmt, va_list ap)
{
    static uint64_t window_ns;
    static unsigned in_window, dropped;
    (void)cls;
    uint64_t now = fb__now_ns();
    if (now - window_ns > 60000000000ull) {
        if (dropped)
            fprintf(stderr, "firebreak agent: http: %u more messages "
                    "suppressed\n", dropped);
        window_ns = now;
        in_window = dropped = 0;
    }
    if (in_window++ >= LOG_BURST) {
        dropped++;
        return;
    }
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    msg[strcspn(msg, "\n")] = '\0';
    fprintf(stderr, "firebreak agent: http: %s\n", msg);
}

static conn *conn_of(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* A request was answered (or abandoned): its connection is idle again. */
static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)con_cls;
    (void)toe;
    conn *k = conn_of(c);
    if (k) {
        k->busy = 0;
        k->idle_since_ns = fb__now_ns();
    }
}

static const char index_html[] =
    "<!doctype html><html><head><title>firebreak agent</title></head>"
    "<body><h1>firebreak agent</h1><p>Prometheus metrics: "
    "<a href=\"/metrics\">/metrics</a></p></body></html>\n";

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status,
                             const char *type, void *body, size_t len,
                             enum MHD_ResponseMemoryMode mode)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body, mode);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, "Content-Type", type);
    if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
        MHD_add_response_header(r, "Allow", "GET, HEAD");
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c,
                              const char *url, const char *method,
                              const char *version, const char *upload_data,
                              size_t *upload_size, void **con_cls)
{
    fb__http *h = cls;
    static int first;
    (void)version;
    (void)upload_data;
    if (*con_cls == NULL) { /* headers only so far: answer on the next call */
        *con_cls = &first;
        return MHD_YES;
    }
    if (*upload_size) { /* a body: not accepted, drop it */
        *upload_size = 0;
        return MHD_YES;
    }
    /* The request is complete and answered now: only from here on is the
     * connection busy (a body trickled in slowly leaves it evictable). */
    conn *k = conn_of(c);
    if (k && !k->busy) {
        k->busy = 1;
        k->busy_since_ns = fb__now_ns();
    }
    atomic_fetch_add_explicit(&h->requests, 1, memory_order_relaxed);
    static char not_allowed[] = "method not allowed\n";
    static char not_found[] = "not found: try /metrics\n";
    if (strcmp(method, "GET") && strcmp(method, "HEAD"))
        return reply(c, MHD_HTTP_METHOD_NOT_ALLOWED, "text/plain", not_allowed,
                     sizeof not_allowed - 1, MHD_RESPMEM_PERSISTENT);
    if (!strcmp(url, "/metrics")) {
        size_t len = 0;
        char *text = h->get(h->ctx, &len);
        if (!text)
            return MHD_NO;
        return reply(c, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8",
                     text, len, MHD_RESPMEM_MUST_FREE);
    }
    if (!strcmp(url, "/"))
        return reply(c, MHD_HTTP_OK, "text/html; charset=utf-8",
                     (void *)index_html, sizeof index_html - 1,
                     MHD_RESPMEM_PERSISTENT);
    return reply(c, MHD_HTTP_NOT_FOUND, "text/plain", not_found,
                 sizeof not_found - 1, MHD_RESPMEM_PERSISTENT);
}

int fb__http_start(fb__http **out, const char *listen,
                   char *(*get_metrics)(void *ctx, size_t *len), void *ctx,
                   int *port, char *err, size_t err_size)
{
    struct sockaddr_in sa;
    *out = NULL;
    int rc = fb__http_parse_listen(listen, &sa, err, err_size);
    if (rc)
        return rc;
    fb__http *h = calloc(1, sizeof *h);
    if (!h)
        return -ENOMEM;
    h->get = get_metrics;
    h->ctx = ctx;
    /* One internal polling thread (poll or epoll, not select's 1024 fds):
     * the connection list needs no lock. */
    h->d = MHD_start_daemon(
        MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG, ntohs(sa.sin_port),
        NULL, NULL, handle, h, MHD_OPTION_EXTERNAL_LOGGER, http_log, NULL,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)REQUEST_MEMORY_LIMIT,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)MHD_CONNECTIONS,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)HEADER_TIMEOUT_S,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, h,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, h, MHD_OPTION_END);
    if (!h->d) {
        snprintf(err, err_size, "cannot listen on %s (address in use, or not "
                 "an address of this host?)", listen);
        free(h);
        return -EADDRINUSE;
    }
    const union MHD_DaemonInfo *info =
        MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    *port = info ? (int)info->port : (int)ntohs(sa.sin_port);
    *out = h;
    return 0;
}

void fb__http_stop(fb__http *h)
{
    if (!h)
        return;
    MHD_stop_daemon(h->d);
    free(h);
}

uint64_t fb__http_requests(const fb__http *h)
{
    return h ? atomic_load_explicit(&((fb__http *)h)->requests,
                                    memory_order_relaxed) : 0;
}

int fb__http_available(void)
{
    return 1;
}

#else /* no libmicrohttpd */

int fb__http_start(fb__http **out, const char *listen,
                   char *(*get_metrics)(void *ctx, size_t *len), void *ctx,
                   int *port, char *err, size_t err_size)
{
    (void)listen;
    (void)get_metrics;
    (void)ctx;
    *out = NULL;
    *port = 0;
    snprintf(err, err_size, "built without libmicrohttpd: /metrics is not "
             "available (install libmicrohttpd-dev and rebuild, or run with "
             "--listen none to only record samples)");
    return -ENOTSUP;
}

void fb__http_stop(fb__http *h)
{
    (void)h;
}

uint64_t fb__http_requests(const fb__http *h)
{
    (void)h;
    return 0;
}

int fb__http_available(void)
{
    return 0;
}

#endif
