/* server_accept.h: the first look at every request head of `llmbench serve`, before
 * libmicrohttpd reads it.
 *
 * One thread accepts connections on the server's listening socket and waits, without
 * reading them away, for the first request's head (recv with MSG_PEEK, woken by
 * edge-triggered epoll as bytes arrive). A well-formed head (serve/http_head.h) hands the
 * connection, its bytes still unread, to libmicrohttpd (params.hand); a malformed one gets
 * one response with an OpenAI-style JSON error and the connection is closed; so does a
 * connection past the connection limit (503). A connection that sends nothing for the idle
 * timeout is closed; one whose first head is not complete after the read timeout gets 408.
 *
 * Between requests a kept-alive connection comes back here (lb_server_accept_watch): the
 * server suspends it in libmicrohttpd when a request has ended and nothing of the next one
 * has been read (a connection where libmicrohttpd read some of it ahead is closed after the
 * answer instead, serve/server.c), and this thread looks at the next head the same way. A
 * well-formed one resumes the connection (params.resume); a malformed or late one is
 * refused as above, and the connection goes back to libmicrohttpd with its socket replaced
 * by one at end of input, so the library closes it without reading or answering anything
 * (its own answers are HTML, and in 0.9.75 a bad Content-Length gets two response heads). A
 * watched connection has the deadlines of a new one, from the time it came back.
 *
 * Internal to serve/server.c. */
#ifndef LB_SERVE_SERVER_ACCEPT_H
#define LB_SERVE_SERVER_ACCEPT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "core/status.h"

typedef struct {
    int listen_fd;            /* bound and listening, non-blocking; closed by stop */
    double idle_timeout_s;    /* nothing sent this long: closed; <= 0 never */
    double read_timeout_s;    /* first head not in this long after its first byte: 408 */
    unsigned max_connections; /* connections being looked at plus open ones */
    /* Takes over a connection whose first request head is well-formed; false when it
     * refused it (and closed fd). */
    bool (*hand)(void *ctx, int fd, const struct sockaddr *addr, socklen_t addr_len);
    /* Gives a watched connection back (lb_server_accept_watch); called from this thread. */
    void (*resume)(void *ctx, void *conn);
    unsigned (*open_connections)(void *ctx); /* connections the HTTP library holds now */
    void *ctx;
} lb_server_accept_params;

typedef struct lb_server_acceptor lb_server_acceptor;

lb_status lb_server_accept_start(const lb_server_accept_params *p, lb_server_acceptor **out,
                                 lb_err *err);

/* Watches the kept-alive connection conn on socket fd (suspended by the caller) until its
 * next request head has arrived, then gives it back through params.resume, as the header
 * above says. Thread-safe. False when the acceptor has stopped: the caller resumes conn. */
bool lb_server_accept_watch(lb_server_acceptor *a, int fd, void *conn);

/* Takes fd, a descriptor of a connection whose last answer has been written: ends its
 * output, reads its input away until the client closes or a second has passed, then closes
 * fd, so that unread input does not make the kernel reset the connection (discarding the
 * answer's unsent end) when the socket is closed. Thread-safe. False when the acceptor has
 * stopped (fd is left to the caller). */
bool lb_server_accept_linger(lb_server_acceptor *a, int fd);

/* Stops accepting and watching: joins the thread, closes the listening socket, hands over
 * (or gives back) every connection whose request head is all in, closes every other one
 * not yet handed over and gives every other watched one back closed. Accepts NULL. */
void lb_server_accept_stop(lb_server_acceptor *a);
/* Frees a stopped acceptor once nothing calls lb_server_accept_watch. Accepts NULL. */
void lb_server_accept_free(lb_server_acceptor *a);

typedef struct {
    uint64_t malformed;  /* requests refused for their head (400, 411, 413, 431, 501, 505) */
    uint64_t over_limit; /* connections refused for the connection limit (503) */
    uint64_t idle;       /* closed for sending nothing */
    uint64_t slow;       /* refused for a head not in within the read timeout (408) */
} lb_server_accept_stats;

void lb_server_accept_stats_get(const lb_server_acceptor *a, lb_server_accept_stats *out);

#endif
