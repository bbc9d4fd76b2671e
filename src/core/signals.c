/* signals.c: the interrupt flag behind signals.h. */
#include "core/signals.h"

#include <signal.h>
#include <stddef.h>
#include <unistd.h>

static volatile sig_atomic_t g_signal = 0;

static void on_signal(int signo) {
    if (g_signal != 0) _exit(128 + signo);
    g_signal = signo;
}

void lb_signals_install(void) {
    struct sigaction sa;
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
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
