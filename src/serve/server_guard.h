/* server_guard.h: deadlines for the connections of `llmbench serve`, so that idle or
 * half-sent connections cannot hold the server's descriptors and memory for ever.
 *
 * Every connection is in one phase: WAITING for a request (since it opened or since its
 * last response ended), READING one (since its request line arrived, until its body is
 * in), ANSWERING it, or WATCHED between requests by the acceptor (serve/server_accept.h,
 * which keeps that phase's deadlines). A connection WAITING longer than the idle timeout, or
 * READING longer than the read timeout (head and body together: a client that sends one
 * byte a second gets no more time than one that sends nothing), is shut down; ANSWERING has
 * no deadline here (a stream may last long; libmicrohttpd's own timeout catches a client
 * that stops reading). A thread checks every connection ten times a second and ends an overdue one
 * with shutdown(2) on its socket, which libmicrohttpd's worker then sees as a closed
 * connection and cleans up as usual; the socket stays open (and its number unused by
 * anything else) until the worker reports the connection closed, which takes the same
 * lock.
 *
 * Internal to serve/server.c, which calls it from libmicrohttpd's callbacks. */
#ifndef LB_SERVE_SERVER_GUARD_H
#define LB_SERVE_SERVER_GUARD_H

#include <stdint.h>

#include "core/status.h"

typedef struct lb_server_guard lb_server_guard;
typedef struct lb_guarded_conn lb_guarded_conn;

typedef enum {
    LB_CONN_WAITING,   /* for a request: the idle timeout runs */
    LB_CONN_READING,   /* a request's head and body: the read timeout runs */
    LB_CONN_ANSWERING, /* no deadline */
    LB_CONN_WATCHED,   /* between requests, held by serve/server_accept.h: its deadlines */
} lb_conn_phase;

/* Starts the checking thread. A timeout <= 0 never expires. */
lb_status lb_server_guard_init(double idle_timeout_s, double read_timeout_s, lb_server_guard **out,
                               lb_err *err);
/* Stops the thread and frees; every connection must have been closed. Accepts NULL. */
void lb_server_guard_free(lb_server_guard *g);

/* A new connection on socket fd, WAITING from now; NULL when out of memory (the connection
 * then has no deadline). */
lb_guarded_conn *lb_server_guard_open(lb_server_guard *g, int fd);
/* The connection is closed: forget it (before its socket is closed). Accepts NULL. */
void lb_server_guard_close(lb_server_guard *g, lb_guarded_conn *c);
/* The connection enters phase, from now. Accepts NULL. */
void lb_server_guard_phase(lb_server_guard *g, lb_guarded_conn *c, lb_conn_phase phase);

/* Connections ended for being idle and for being slow to send a request, so far. */
uint64_t lb_server_guard_idle_closed(const lb_server_guard *g);
uint64_t lb_server_guard_slow_closed(const lb_server_guard *g);

#endif
