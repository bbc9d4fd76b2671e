/* server_accept.c: the acceptor behind server_accept.h: one thread, one epoll set (the
 * listening socket level-triggered, connections edge-triggered), a list of the connections
 * it holds (new ones not yet handed over, kept-alive ones watched between requests, ended
 * ones read to their end: lb_server_accept_linger),
 * checked for deadlines every 100 ms. The list is under a mutex: workers add watched
 * connections to it. */
#include "serve/server_accept.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "serve/http_head.h"

#define TICK_MS              100
#define CLOSING_NS           1000000000LL /* after an error response: wait this long for EOF */
#define ERROR_RESPONSE_BYTES 1024

typedef struct pending {
    struct pending *prev, *next;
    int fd;
    struct sockaddr_storage addr;
    socklen_t addr_len;
    int64_t opened_ns, first_byte_ns; /* first_byte_ns: 0 until a byte arrived */
    int64_t closing_until_ns;         /* > 0: an error was sent; read until EOF or then */
    void *conn;                       /* watched: libmicrohttpd's connection; NULL: new */
} pending;

struct lb_server_acceptor {
    lb_server_accept_params p;
    int epfd, stopfd;
    pthread_t thread;
    pthread_mutex_t lock; /* the list, n_new and stopped */
    pending *head;
    unsigned n_new; /* new and lingering connections in the list (watched: the library's) */
    bool stopped;
    char peek[LB_HTTP_HEAD_MAX];
    atomic_uint_fast64_t malformed, over_limit, idle, slow;
};

static char listen_tag, stop_tag; /* epoll data of the two sockets that are not pending */

static void unlink_pending(lb_server_acceptor *a, pending *c) {
    if (c->prev)
        c->prev->next = c->next;
    else
        a->head = c->next;
    if (c->next) c->next->prev = c->prev;
    if (c->conn == NULL) a->n_new--;
}

/* Replaces the socket under fd by one whose peer has closed: the client's connection is
 * closed, and libmicrohttpd, reading fd, finds the end of the input and closes it. */
static void detach(int fd) {
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, pair) != 0) {
        shutdown(fd, SHUT_RDWR); /* the library reads the end of input, or what came after */
        return;
    }
    close(pair[1]);
    dup3(pair[0], fd, O_CLOEXEC);
    close(pair[0]);
}

/* Ends a connection held here: a new one is closed, a watched one given back closed. */
static void close_pending(lb_server_acceptor *a, pending *c) {
    epoll_ctl(a->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    unlink_pending(a, c);
    if (c->conn != NULL) {
        detach(c->fd);
        a->p.resume(a->p.ctx, c->conn);
    } else {
        close(c->fd);
    }
    free(c);
}

/* Sends an error response, then waits (closing) for the client to finish sending, so that
 * closing does not reset the connection before the client has read the response. */
static void refuse(lb_server_acceptor *a, pending *c, int status, const char *why) {
    char response[ERROR_RESPONSE_BYTES];
    size_t n = lb_http_head_error_response(status, why, response, sizeof response);
    if (n > 0) (void)!send(c->fd, response, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    shutdown(c->fd, SHUT_WR);
    c->closing_until_ns = lb_clock_now_ns() + CLOSING_NS;
    (void)a;
}

/* A connection whose request head is all in goes to libmicrohttpd: a new one handed over,
 * a watched one given back. */
static void hand_over(lb_server_acceptor *a, pending *c) {
    epoll_ctl(a->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    unlink_pending(a, c);
    if (c->conn != NULL)
        a->p.resume(a->p.ctx, c->conn);
    else
        a->p.hand(a->p.ctx, c->fd, (const struct sockaddr *)&c->addr, c->addr_len);
    free(c);
}

static void on_readable(lb_server_acceptor *a, pending *c, bool peer_done) {
    if (c->closing_until_ns > 0) { /* discard until EOF */
        char sink[4096];
        ssize_t r;
        while ((r = recv(c->fd, sink, sizeof sink, MSG_DONTWAIT)) > 0) {
        }
        if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) close_pending(a, c);
        return;
    }
    ssize_t n = recv(c->fd, a->peek, sizeof a->peek, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        close_pending(a, c); /* the client went away */
        return;
    }
    if (n < 0) return;
    if (c->first_byte_ns == 0) c->first_byte_ns = lb_clock_now_ns();
    size_t head_len = 0;
    const char *why = NULL;
    int verdict = lb_http_head_check(a->peek, (size_t)n, &head_len, &why);
    if (verdict == LB_HTTP_HEAD_MORE) {
        if (!peer_done) return;
        atomic_fetch_add(&a->malformed, 1); /* the client stopped sending mid-head */
        refuse(a, c, 400, "the request head ended before its blank line");
        on_readable(a, c, peer_done);
        return;
    }
    if (verdict != LB_HTTP_HEAD_OK) {
        atomic_fetch_add(&a->malformed, 1);
        refuse(a, c, verdict, why);
        on_readable(a, c, peer_done); /* what the client already sent is read away now */
        return;
    }
    hand_over(a, c);
}

static void accept_all(lb_server_acceptor *a) {
    for (;;) {
        pending *c = calloc(1, sizeof *c);
        if (c == NULL) return;
        c->addr_len = sizeof c->addr;
        c->fd = accept4(a->p.listen_fd, (struct sockaddr *)&c->addr, &c->addr_len,
                        SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (c->fd < 0) {
            int e = errno;
            free(c);
            /* Out of descriptors: let the ones in use end before trying again. */
            if (e == EMFILE || e == ENFILE)
                nanosleep(&(struct timespec){.tv_nsec = 10000000}, NULL);
            return;
        }
        c->opened_ns = lb_clock_now_ns();
        c->next = a->head;
        if (a->head) a->head->prev = c;
        a->head = c;
        a->n_new++;
        if (a->n_new + a->p.open_connections(a->p.ctx) > a->p.max_connections) {
            atomic_fetch_add(&a->over_limit, 1);
            char response[ERROR_RESPONSE_BYTES];
            size_t n = lb_http_head_error_response(
                503, "the server has as many connections as it allows (serve --max-connections)",
                response, sizeof response);
            (void)!send(c->fd, response, n, MSG_NOSIGNAL | MSG_DONTWAIT);
            close(c->fd);
            unlink_pending(a, c);
            free(c);
            continue;
        }
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | EPOLLET, .data.ptr = c};
        if (epoll_ctl(a->epfd, EPOLL_CTL_ADD, c->fd, &ev) != 0) {
            close(c->fd);
            unlink_pending(a, c);
            free(c);
            continue;
        }
        on_readable(a, c, false); /* bytes that came with the connection */
    }
}

static void check_deadlines(lb_server_acceptor *a) {
    int64_t now = lb_clock_now_ns();
    int64_t idle_ns = a->p.idle_timeout_s > 0 ? (int64_t)(a->p.idle_timeout_s * 1e9) : 0;
    int64_t read_ns = a->p.read_timeout_s > 0 ? (int64_t)(a->p.read_timeout_s * 1e9) : 0;
    for (pending *c = a->head, *next; c; c = next) {
        next = c->next;
        if (c->closing_until_ns > 0) {
            if (now > c->closing_until_ns) close_pending(a, c);
        } else if (c->first_byte_ns == 0) {
            if (idle_ns > 0 && now - c->opened_ns > idle_ns) {
                atomic_fetch_add(&a->idle, 1);
                close_pending(a, c);
            }
        } else if (read_ns > 0 && now - c->first_byte_ns > read_ns) {
            atomic_fetch_add(&a->slow, 1);
            refuse(a, c, 408,
                   "the request head did not arrive within the read timeout "
                   "(serve --read-timeout)");
        }
    }
}

static void *accept_main(void *arg) {
    lb_server_acceptor *a = arg;
    struct epoll_event evs[64];
    int64_t next_check = lb_clock_now_ns();
    for (;;) {
        int n = epoll_wait(a->epfd, evs, 64, TICK_MS);
        pthread_mutex_lock(&a->lock);
        for (int i = 0; i < n; i++) {
            if (evs[i].data.ptr == &stop_tag) {
                pthread_mutex_unlock(&a->lock);
                return NULL;
            }
            if (evs[i].data.ptr == &listen_tag)
                accept_all(a);
            else
                on_readable(a, evs[i].data.ptr, (evs[i].events & (EPOLLRDHUP | EPOLLHUP)) != 0);
        }
        if (lb_clock_now_ns() >= next_check) {
            check_deadlines(a);
            next_check = lb_clock_now_ns() + (int64_t)TICK_MS * 1000000;
        }
        pthread_mutex_unlock(&a->lock);
    }
}

lb_status lb_server_accept_start(const lb_server_accept_params *p, lb_server_acceptor **out,
                                 lb_err *err) {
    *out = NULL;
    lb_server_acceptor *a = calloc(1, sizeof *a);
    if (a == NULL) return lb_fail(err, LB_ERR_NOMEM, "no memory for the acceptor");
    a->p = *p;
    pthread_mutex_init(&a->lock, NULL);
    a->epfd = epoll_create1(EPOLL_CLOEXEC);
    a->stopfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    struct epoll_event lev = {.events = EPOLLIN, .data.ptr = &listen_tag};
    struct epoll_event sev = {.events = EPOLLIN, .data.ptr = &stop_tag};
    *out = a; /* before the first connection is handed over: its requests watch through it */
    bool ok = a->epfd >= 0 && a->stopfd >= 0 &&
              epoll_ctl(a->epfd, EPOLL_CTL_ADD, p->listen_fd, &lev) == 0 &&
              epoll_ctl(a->epfd, EPOLL_CTL_ADD, a->stopfd, &sev) == 0 &&
              pthread_create(&a->thread, NULL, accept_main, a) == 0;
    if (!ok) {
        int e = errno;
        if (a->epfd >= 0) close(a->epfd);
        if (a->stopfd >= 0) close(a->stopfd);
        pthread_mutex_destroy(&a->lock);
        free(a);
        *out = NULL;
        return lb_fail(err, LB_ERR_RUNTIME, "cannot start the server's acceptor: %s", strerror(e));
    }
    return LB_OK;
}

bool lb_server_accept_watch(lb_server_acceptor *a, int fd, void *conn) {
    pending *c = calloc(1, sizeof *c);
    if (c == NULL) return false;
    c->fd = fd;
    c->conn = conn;
    c->opened_ns = lb_clock_now_ns();
    pthread_mutex_lock(&a->lock);
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | EPOLLET, .data.ptr = c};
    bool ok = !a->stopped && epoll_ctl(a->epfd, EPOLL_CTL_ADD, fd, &ev) == 0;
    if (ok) {
        c->next = a->head;
        if (a->head) a->head->prev = c;
        a->head = c;
    }
    pthread_mutex_unlock(&a->lock);
    if (!ok) free(c);
    return ok;
}

bool lb_server_accept_linger(lb_server_acceptor *a, int fd) {
    pending *c = calloc(1, sizeof *c);
    if (c == NULL) return false;
    c->fd = fd;
    c->opened_ns = lb_clock_now_ns();
    c->first_byte_ns = c->opened_ns;
    c->closing_until_ns = c->opened_ns + CLOSING_NS;
    pthread_mutex_lock(&a->lock);
    /* Added, a socket with input waiting is reported readable at once. */
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | EPOLLET, .data.ptr = c};
    bool ok = !a->stopped && epoll_ctl(a->epfd, EPOLL_CTL_ADD, fd, &ev) == 0;
    if (ok) {
        shutdown(fd, SHUT_WR);
        c->next = a->head;
        if (a->head) a->head->prev = c;
        a->head = c;
        a->n_new++;
    }
    pthread_mutex_unlock(&a->lock);
    if (!ok) free(c);
    return ok;
}

void lb_server_accept_stop(lb_server_acceptor *a) {
    if (a == NULL) return;
    pthread_mutex_lock(&a->lock);
    bool was_stopped = a->stopped;
    a->stopped = true;
    pthread_mutex_unlock(&a->lock);
    if (was_stopped) return;
    uint64_t one = 1;
    (void)!write(a->stopfd, &one, sizeof one);
    pthread_join(a->thread, NULL);
    /* A request whose head is all in was sent before the stop: it is served (the caller
     * drains it); the rest are closed. */
    while (a->head) {
        pending *c = a->head;
        ssize_t n = c->closing_until_ns > 0
                        ? -1
                        : recv(c->fd, a->peek, sizeof a->peek, MSG_PEEK | MSG_DONTWAIT);
        size_t head_len = 0;
        const char *why = NULL;
        if (n > 0 && lb_http_head_check(a->peek, (size_t)n, &head_len, &why) == LB_HTTP_HEAD_OK)
            hand_over(a, c);
        else
            close_pending(a, c);
    }
    close(a->p.listen_fd);
}

void lb_server_accept_free(lb_server_acceptor *a) {
    if (a == NULL) return;
    lb_server_accept_stop(a);
    close(a->stopfd);
    close(a->epfd);
    pthread_mutex_destroy(&a->lock);
    free(a);
}

void lb_server_accept_stats_get(const lb_server_acceptor *a, lb_server_accept_stats *out) {
    lb_server_acceptor *m = (lb_server_acceptor *)a; /* atomic loads need a non-const object */
    *out = (lb_server_accept_stats){
        .malformed = atomic_load(&m->malformed),
        .over_limit = atomic_load(&m->over_limit),
        .idle = atomic_load(&m->idle),
        .slow = atomic_load(&m->slow),
    };
}
