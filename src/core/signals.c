/* signals.c: the interrupt flag behind signals.h. The handler sets the flag (and so
 * interrupts blocking calls, which long loops rely on to notice it at once); a second
 * signal wakes a thread of ours through a semaphore (sem_post is async-signal-safe), which
 * runs the last words, where any library may be used, and exits. */
#include "core/signals.h"

#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stddef.h>
#include <unistd.h>

static volatile sig_atomic_t g_signal = 0, g_second = 0;
static sem_t g_wake;
static bool g_watching;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static void (*g_last_words)(void *ctx, int signo);
static void *g_last_words_ctx;

static void on_signal(int signo, siginfo_t *si, void *context) {
    (void)context;
    if (g_signal == 0) {
        g_signal = signo;
        return;
    }
    /* the parent's copy of a signal that may have reached us too (lb_signals_pass_on) */
    if (si != NULL && si->si_code == SI_QUEUE && si->si_pid == getppid()) return;
    if (!g_watching) _exit(128 + signo);
    g_second = signo;
    sem_post(&g_wake);
}

static void *watch_signals(void *arg) {
    sem_t *started = arg;
    sem_post(started);
    while (sem_wait(&g_wake) != 0) {
    }
    pthread_mutex_lock(&g_lock);
    if (g_last_words) g_last_words(g_last_words_ctx, (int)g_second);
    _exit(128 + (int)g_second);
    return NULL;
}

void lb_signals_install(void) {
    sem_init(&g_wake, 0, 0);
    sem_t started;
    sem_init(&started, 0, 0);
    pthread_t thread;
    if (pthread_create(&thread, NULL, watch_signals, &started) == 0) {
        pthread_detach(thread);
        /* Running before anything else happens: a process that exits at once does not
         * exit with the thread half made (which LeakSanitizer reported as a leak). */
        while (sem_wait(&started) != 0) {
        }
        g_watching = true;
    }
    sem_destroy(&started);
    struct sigaction sa;
    sa.sa_sigaction = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGPIPE, &sa, NULL);
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

void lb_signals_pass_on(int pid) {
    if (g_signal == SIGINT || g_signal == SIGTERM) /* a SIGPIPE is this process's own output */
        sigqueue((pid_t)pid, (int)g_signal, (union sigval){.sival_int = 0});
}
