/* signals.c: the interrupt flag behind signals.h, set by a thread that waits for the
 * signals (sigwait) instead of a handler, so that the last words may use any library. */
#include "core/signals.h"

#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stddef.h>
#include <unistd.h>

static volatile sig_atomic_t g_signal = 0;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static void (*g_last_words)(void *ctx, int signo);
static void *g_last_words_ctx;

typedef struct {
    sigset_t set;
    sem_t started;
} watch_args;

static void *watch_signals(void *arg) {
    watch_args *w = arg;
    const sigset_t *set = &w->set;
    sem_post(&w->started);
    for (;;) {
        int signo = 0;
        if (sigwait(set, &signo) != 0) continue;
        if (g_signal == 0) {
            g_signal = signo;
            continue;
        }
        pthread_mutex_lock(&g_lock);
        if (g_last_words) g_last_words(g_last_words_ctx, signo);
        _exit(128 + signo);
    }
    return NULL;
}

void lb_signals_install(void) {
    static watch_args w;
    sigemptyset(&w.set);
    sigaddset(&w.set, SIGINT);
    sigaddset(&w.set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &w.set, NULL);
    sem_init(&w.started, 0, 0);
    pthread_t thread;
    if (pthread_create(&thread, NULL, watch_signals, &w) == 0) {
        pthread_detach(thread);
        /* Running before anything else happens: a process that exits at once does not
         * exit with the thread half made (which LeakSanitizer reported as a leak). */
        while (sem_wait(&w.started) != 0) {
        }
    } else {
        pthread_sigmask(SIG_UNBLOCK, &w.set, NULL); /* no thread: default action, as before */
    }
}

void lb_signals_set_last_words(void (*fn)(void *ctx, int signo), void *ctx) {
    pthread_mutex_lock(&g_lock);
    g_last_words = fn;
    g_last_words_ctx = ctx;
    pthread_mutex_unlock(&g_lock);
}

bool lb_signals_interrupted(void) {
    return g_signal != 0;
}

int lb_signals_received(void) {
    return (int)g_signal;
}

void lb_signals_reset(void) {
    g_signal = 0;
}

void lb_signals_raise(int signo) {
    g_signal = signo;
}
