/* signals.h: SIGINT/SIGTERM become a flag that long loops poll.
 *
 * The handler only sets a flag (async-signal-safe); workloads check lb_signals_interrupted()
 * between steps or queries and return LB_ERR_INTERRUPTED, so the CLI can store what was
 * measured before exiting with 130. A second signal while the first is being handled
 * exits at once. */
#ifndef LB_CORE_SIGNALS_H
#define LB_CORE_SIGNALS_H

#include <stdbool.h>

void lb_signals_install(void);
bool lb_signals_interrupted(void);
int lb_signals_received(void);    /* the signal received, 0 if none */
void lb_signals_reset(void);      /* for tests */
void lb_signals_raise(int signo); /* sets the flag as if signo arrived (tests, drivers) */

#endif
