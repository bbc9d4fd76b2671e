/* signals.c: the interrupt flag behind signals.h, set by a thread that waits for the
 * signals (sigwait) instead of a handler, so that the last words may use any library. */
#include "core/signals.h"

#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <unistd.h>

static volatile sig_atomic_t g_signal = 0;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static void (*g_last_words)(void *ctx, int signo);
static void *g_last_words_ctx;

static void *watch_signals(void *arg) {
    const sigset_t *set = arg;
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
    static sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    pthread_t thread;
    if (pthread_create(&thread, NULL, watch_signals, &set) == 0)
        pthread_detach(thread);
    else
        pthread_sigmask(SIG_UNBLOCK, &set, NULL); /* no thread: default action, as before */
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
