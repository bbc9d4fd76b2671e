/* server_timer.h: parks HTTP connections until a given time, without holding a thread.
 *
 * The server calls lb_server_timer_suspend from a libmicrohttpd callback when the next
 * token of a request is not due yet: the connection is suspended (MHD_suspend_connection)
 * and entered in a min-heap ordered by due time. One timer thread sleeps until the
 * earliest due time and resumes every connection that has come due; libmicrohttpd then
 * calls the server back on the connection's own worker thread. A due time of INT64_MAX
 * parks a connection until the timer drains (the stall fault).
 *
 * A connection may also be parked until woken (lb_server_timer_wait): a thread that makes
 * what the connection waits for (the engine's) calls lb_server_timer_wake, which resumes it
 * now, or, when it is not parked yet, makes its next wait return at once, so no wake-up is
 * lost between the caller's look and its parking.
 *
 * Draining (server shutdown) resumes every parked connection at once and refuses new
 * parking, so the caller goes on as if everything were due; libmicrohttpd must not be
 * stopped while a connection is suspended, and after lb_server_timer_drain none is.
 *
 * Internal to serve/server.c. */
#ifndef LB_SERVE_SERVER_TIMER_H
#define LB_SERVE_SERVER_TIMER_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"

struct MHD_Connection;
typedef struct lb_server_timer lb_server_timer;

/* Starts the timer thread. *out is freed with lb_server_timer_free. */
lb_status lb_server_timer_init(lb_server_timer **out, lb_err *err);

/* Suspends conn and resumes it at due_ns (monotonic ns). Call only from a libmicrohttpd
 * access handler or content reader callback of conn. Returns false, with conn not
 * suspended, when the timer is draining (or out of memory): the caller must then go on
 * without waiting. */
bool lb_server_timer_suspend(lb_server_timer *t, struct MHD_Connection *conn, int64_t due_ns);

/* The wake-up of one request, zeroed before its first wait; it must live as long as the
 * request's connection may be parked on it. Guarded by the timer's lock. */
typedef struct {
    bool parked;  /* its connection waits in the heap */
    bool pending; /* woken while not parked: the next wait returns at once */
} lb_server_timer_waker;

typedef enum {
    LB_SERVER_TIMER_PARKED,   /* suspended until woken or drained */
    LB_SERVER_TIMER_WOKEN,    /* not suspended: a wake came since the last wait */
    LB_SERVER_TIMER_DRAINING, /* not suspended: the timer drains (or is out of memory) */
} lb_server_timer_park;

/* Suspends conn until lb_server_timer_wake on w, or the drain. Call as
 * lb_server_timer_suspend. */
lb_server_timer_park lb_server_timer_wait(lb_server_timer *t, struct MHD_Connection *conn,
                                          lb_server_timer_waker *w);

/* Resumes the connection waiting on w now; when none waits, its next wait returns WOKEN.
 * Any thread may call it. */
void lb_server_timer_wake(lb_server_timer *t, lb_server_timer_waker *w);

/* Resumes every parked connection now, returning once all are handed back to
 * libmicrohttpd, and refuses parking from then on. */
void lb_server_timer_drain(lb_server_timer *t);

/* Drains, stops the thread and frees. Accepts NULL. */
void lb_server_timer_free(lb_server_timer *t);

#endif
