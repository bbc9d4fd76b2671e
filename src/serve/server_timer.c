/* server_timer.c: the min-heap and thread behind server_timer.h.
 *
 * One mutex guards the heap. A connection is suspended while that mutex is held and only
 * then becomes visible in the heap, so the timer thread can never resume a connection
 * before it is suspended. The thread pops every due entry under the mutex and resumes
 * them after releasing it (MHD_resume_connection takes libmicrohttpd's own lock), so the
 * two locks are never held together in the opposite order. The thread is woken only when
 * a new entry becomes due earlier than the time it sleeps until. A wait is an entry due at
 * INT64_MAX that knows its waker; a wake finds it by a look through the heap (the
 * connections parked, a few hundred) and makes it due now. */
#include "serve/server_timer.h"

#include <microhttpd.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "core/clock.h"

#define RESUME_BATCH 256

typedef struct {
    int64_t due_ns;
    struct MHD_Connection *conn;
    lb_server_timer_waker *waker; /* a wait's; NULL: a due time's */
} entry;

struct lb_server_timer {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    entry *heap;
    size_t n, cap;
    int64_t sleep_until_ns; /* the thread's wake-up time; INT64_MAX when waiting untimed */
    bool resuming;          /* the thread is resuming a popped batch, lock released */
    bool draining;
    bool stop;
};

static void sift_up(entry *h, size_t i) {
    entry e = h[i];
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (h[parent].due_ns <= e.due_ns) break;
        h[i] = h[parent];
        i = parent;
    }
    h[i] = e;
}

static void sift_down(entry *h, size_t n, size_t i) {
    entry e = h[i];
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= n) break;
        if (child + 1 < n && h[child + 1].due_ns < h[child].due_ns) child++;
        if (e.due_ns <= h[child].due_ns) break;
        h[i] = h[child];
        i = child;
    }
    h[i] = e;
}

static struct MHD_Connection *pop(lb_server_timer *t) {
    struct MHD_Connection *c = t->heap[0].conn;
    if (t->heap[0].waker != NULL) t->heap[0].waker->parked = false;
    t->heap[0] = t->heap[--t->n];
    if (t->n > 0) sift_down(t->heap, t->n, 0);
    return c;
}

static struct timespec to_timespec(int64_t ns) {
    return (struct timespec){.tv_sec = (time_t)(ns / 1000000000),
                             .tv_nsec = (long)(ns % 1000000000)};
}

static void *timer_main(void *arg) {
    lb_server_timer *t = arg;
    struct MHD_Connection *batch[RESUME_BATCH];
    pthread_mutex_lock(&t->mu);
    for (;;) {
        int64_t now = lb_clock_now_ns();
        size_t nb = 0;
        while (t->n > 0 && nb < RESUME_BATCH && (t->draining || t->heap[0].due_ns <= now))
            batch[nb++] = pop(t);
        if (nb > 0) {
            t->resuming = true;
            pthread_mutex_unlock(&t->mu);
            for (size_t i = 0; i < nb; i++)
                MHD_resume_connection(batch[i]);
            pthread_mutex_lock(&t->mu);
            t->resuming = false;
            continue;
        }
        if (t->stop) break;
        if (t->n == 0 || t->heap[0].due_ns == INT64_MAX) {
            t->sleep_until_ns = INT64_MAX;
            pthread_cond_wait(&t->cv, &t->mu);
        } else {
            t->sleep_until_ns = t->heap[0].due_ns;
            struct timespec ts = to_timespec(t->sleep_until_ns);
            pthread_cond_timedwait(&t->cv, &t->mu, &ts);
        }
        t->sleep_until_ns = 0; /* awake: pushes need not signal */
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

lb_status lb_server_timer_init(lb_server_timer **out, lb_err *err) {
    *out = NULL;
    lb_server_timer *t = calloc(1, sizeof *t);
    if (!t) return lb_fail(err, LB_ERR_NOMEM, "no memory for the server timer");
    t->cap = 1024;
    t->heap = malloc(t->cap * sizeof *t->heap);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&t->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&t->mu, NULL);
    if (!t->heap || pthread_create(&t->thread, NULL, timer_main, t) != 0) {
        pthread_cond_destroy(&t->cv);
        pthread_mutex_destroy(&t->mu);
        free(t->heap);
        free(t);
        return lb_fail(err, LB_ERR_RUNTIME, "could not start the server timer thread");
    }
    *out = t;
    return LB_OK;
}

/* Under mu: suspends conn and enters it at due_ns; false when draining or out of memory.
 * Sets *wake when the thread must be woken. */
static bool park(lb_server_timer *t, struct MHD_Connection *conn, int64_t due_ns,
                 lb_server_timer_waker *w, bool *wake) {
    *wake = false;
    if (t->draining) return false;
    if (t->n == t->cap) {
        entry *grown = realloc(t->heap, 2 * t->cap * sizeof *grown);
        if (!grown) return false;
        t->heap = grown;
        t->cap *= 2;
    }
    MHD_suspend_connection(conn);
    t->heap[t->n] = (entry){.due_ns = due_ns, .conn = conn, .waker = w};
    sift_up(t->heap, t->n++);
    *wake = t->heap[0].conn == conn && due_ns < t->sleep_until_ns;
    return true;
}

bool lb_server_timer_suspend(lb_server_timer *t, struct MHD_Connection *conn, int64_t due_ns) {
    bool wake;
    pthread_mutex_lock(&t->mu);
    bool parked = park(t, conn, due_ns, NULL, &wake);
    pthread_mutex_unlock(&t->mu);
    if (wake) pthread_cond_signal(&t->cv);
    return parked;
}

lb_server_timer_park lb_server_timer_wait(lb_server_timer *t, struct MHD_Connection *conn,
                                          lb_server_timer_waker *w) {
    lb_server_timer_park out = LB_SERVER_TIMER_WOKEN;
    bool wake = false;
    pthread_mutex_lock(&t->mu);
    if (w->pending) {
        w->pending = false;
    } else if (park(t, conn, INT64_MAX, w, &wake)) {
        w->parked = true;
        out = LB_SERVER_TIMER_PARKED;
    } else {
        out = LB_SERVER_TIMER_DRAINING;
    }
    pthread_mutex_unlock(&t->mu);
    if (wake) pthread_cond_signal(&t->cv);
    return out;
}

void lb_server_timer_wake(lb_server_timer *t, lb_server_timer_waker *w) {
    bool wake = false;
    pthread_mutex_lock(&t->mu);
    if (!w->parked) {
        w->pending = true;
    } else {
        /* due now: to the top of the heap, where the thread finds it */
        size_t i = 0;
        while (t->heap[i].waker != w)
            i++;
        t->heap[i].due_ns = 0;
        sift_up(t->heap, i);
        wake = t->sleep_until_ns != 0;
    }
    pthread_mutex_unlock(&t->mu);
    if (wake) pthread_cond_signal(&t->cv);
}

void lb_server_timer_drain(lb_server_timer *t) {
    pthread_mutex_lock(&t->mu);
    t->draining = true;
    pthread_cond_signal(&t->cv);
    /* Returns only when every connection was handed back to libmicrohttpd. */
    while (t->n > 0 || t->resuming) {
        pthread_mutex_unlock(&t->mu);
        nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
        pthread_mutex_lock(&t->mu);
    }
    pthread_mutex_unlock(&t->mu);
}

void lb_server_timer_free(lb_server_timer *t) {
    if (!t) return;
    pthread_mutex_lock(&t->mu);
    t->draining = true;
    t->stop = true;
    pthread_mutex_unlock(&t->mu);
    pthread_cond_signal(&t->cv);
    pthread_join(t->thread, NULL);
    pthread_cond_destroy(&t->cv);
    pthread_mutex_destroy(&t->mu);
    free(t->heap);
    free(t);
}
