/* server_guard.c: the connection deadlines behind server_guard.h: a list under one mutex
 * (taken when a connection opens or closes) and a thread that walks it every 100 ms. A
 * phase change, a few times per request, is one atomic store of the phase and its start
 * packed into one word, so the checker never sees a new phase with an old start. */
#include "serve/server_guard.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

#include "core/clock.h"

#define CHECK_PERIOD_NS 100000000

struct lb_guarded_conn {
    lb_guarded_conn *prev, *next;
    int fd;
    atomic_uint_fast64_t state; /* since_ns << 2 | phase (monotonic ns fit in 62 bits) */
    bool ended;                 /* shut down by the guard: not again */
};

static uint64_t pack(lb_conn_phase phase, int64_t since_ns) {
    return (uint64_t)since_ns << 2 | (uint64_t)phase;
}

struct lb_server_guard {
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_t thread;
    bool stop;
    lb_guarded_conn *head;
    int64_t idle_ns, read_ns; /* 0: never */
    atomic_uint_fast64_t idle_closed, slow_closed;
};

static void check_all(lb_server_guard *g, int64_t now) {
    for (lb_guarded_conn *c = g->head; c; c = c->next) {
        if (c->ended) continue;
        uint64_t state = atomic_load_explicit(&c->state, memory_order_relaxed);
        lb_conn_phase phase = (lb_conn_phase)(state & 3);
        int64_t since_ns = (int64_t)(state >> 2);
        int64_t limit = phase == LB_CONN_WAITING   ? g->idle_ns
                        : phase == LB_CONN_READING ? g->read_ns
                                                   : 0;
        if (limit <= 0 || now - since_ns <= limit) continue;
        shutdown(c->fd, SHUT_RDWR);
        c->ended = true;
        atomic_fetch_add(phase == LB_CONN_WAITING ? &g->idle_closed : &g->slow_closed, 1);
    }
}

static void *guard_main(void *arg) {
    lb_server_guard *g = arg;
    pthread_mutex_lock(&g->lock);
    while (!g->stop) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += CHECK_PERIOD_NS;
        if (until.tv_nsec >= 1000000000) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&g->wake, &g->lock, &until);
        if (!g->stop) check_all(g, lb_clock_now_ns());
    }
    pthread_mutex_unlock(&g->lock);
    return NULL;
}

static int64_t to_ns(double s) {
    return s > 0 ? (int64_t)(s * 1e9) : 0;
}

lb_status lb_server_guard_init(double idle_timeout_s, double read_timeout_s, lb_server_guard **out,
                               lb_err *err) {
    *out = NULL;
    lb_server_guard *g = calloc(1, sizeof *g);
    if (!g) return lb_fail(err, LB_ERR_NOMEM, "no memory for the connection guard");
    g->idle_ns = to_ns(idle_timeout_s);
    g->read_ns = to_ns(read_timeout_s);
    pthread_mutex_init(&g->lock, NULL);
    pthread_cond_init(&g->wake, NULL);
    if (pthread_create(&g->thread, NULL, guard_main, g) != 0) {
        pthread_cond_destroy(&g->wake);
        pthread_mutex_destroy(&g->lock);
        free(g);
        return lb_fail(err, LB_ERR_RUNTIME, "cannot start the connection guard's thread");
    }
    *out = g;
    return LB_OK;
}

void lb_server_guard_free(lb_server_guard *g) {
    if (!g) return;
    pthread_mutex_lock(&g->lock);
    g->stop = true;
    pthread_cond_signal(&g->wake);
    pthread_mutex_unlock(&g->lock);
    pthread_join(g->thread, NULL);
    while (g->head) {
        lb_guarded_conn *c = g->head;
        g->head = c->next;
        free(c);
    }
    pthread_cond_destroy(&g->wake);
    pthread_mutex_destroy(&g->lock);
    free(g);
}

lb_guarded_conn *lb_server_guard_open(lb_server_guard *g, int fd) {
    lb_guarded_conn *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->fd = fd;
    atomic_init(&c->state, pack(LB_CONN_WAITING, lb_clock_now_ns()));
    pthread_mutex_lock(&g->lock);
    c->next = g->head;
    if (g->head) g->head->prev = c;
    g->head = c;
    pthread_mutex_unlock(&g->lock);
    return c;
}

void lb_server_guard_close(lb_server_guard *g, lb_guarded_conn *c) {
    if (!c) return;
    pthread_mutex_lock(&g->lock);
    if (c->prev)
        c->prev->next = c->next;
    else
        g->head = c->next;
    if (c->next) c->next->prev = c->prev;
    pthread_mutex_unlock(&g->lock);
    free(c);
}

void lb_server_guard_phase(lb_server_guard *g, lb_guarded_conn *c, lb_conn_phase phase) {
    (void)g;
    if (!c) return;
    atomic_store_explicit(&c->state, pack(phase, lb_clock_now_ns()), memory_order_relaxed);
}

uint64_t lb_server_guard_idle_closed(const lb_server_guard *g) {
    return atomic_load(&((lb_server_guard *)g)->idle_closed);
}

uint64_t lb_server_guard_slow_closed(const lb_server_guard *g) {
    return atomic_load(&((lb_server_guard *)g)->slow_closed);
}
