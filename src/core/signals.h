/* signals.h: SIGINT/SIGTERM become a flag that long loops poll, and so does SIGPIPE (the
 * reader of our output went away, as `llmbench train | head` does): the run stops as on
 * Ctrl-C, where the default action would kill it and leave its stored run `running`.
 *
 * The handler only sets a flag (async-signal-safe, and it interrupts blocking calls);
 * workloads check lb_signals_interrupted() between steps or queries and return
 * LB_ERR_INTERRUPTED, so the CLI can store what was measured before exiting with 130. A
 * second signal exits at once (128 + its number), after the last words registered with
 * lb_signals_set_last_words, which a thread of ours runs (woken by the handler through a
 * semaphore): the stored-run lifecycle uses them to mark its run interrupted, so that no
 * run is left `running` by a Ctrl-C. */
#ifndef LB_CORE_SIGNALS_H
#define LB_CORE_SIGNALS_H

#include <stdbool.h>

void lb_signals_install(void);

/* fn(ctx, signo) runs on the signal thread when a second signal arrives, before the
 * process exits; NULL removes it. Returns once no earlier fn is running. */
void lb_signals_set_last_words(void (*fn)(void *ctx, int signo), void *ctx);
bool lb_signals_interrupted(void);
int lb_signals_received(void);    /* the signal received, 0 if none */
void lb_signals_reset(void);      /* for tests */
void lb_signals_raise(int signo); /* sets the flag as if signo arrived (tests, drivers) */
/* Sends the SIGINT or SIGTERM received (another, or none: nothing; a SIGPIPE concerns this
 * process's own output) to child process pid as a copy: its handler
 * takes it as a first signal, never as the second that exits at once, since the child may
 * have received the same signal itself (a Ctrl-C reaches a terminal's whole process group;
 * `kill PID` or a container's stop only the one process). A launcher passes on what
 * reached it this way. */
void lb_signals_pass_on(int pid);

#endif
