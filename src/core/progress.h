/* progress.h: one progress line on stderr for anything that takes more than a moment.
 *
 * On a terminal the line is redrawn in place (carriage return) at most every 200 ms, cut
 * short of the terminal's last column so that it never wraps; when stderr is a file or
 * pipe, a full line is written at most every 5 s, so logs stay readable. Quiet mode (-q) or
 * a disabled progress prints nothing. The caller formats the text; this module only
 * rate-limits, draws and clears it. On a terminal the line drawn is registered with
 * core/log.h, which clears it around a log message and draws it again after. */
#ifndef LB_CORE_PROGRESS_H
#define LB_CORE_PROGRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    bool enabled;
    bool tty;
    int64_t last_ns;
    int last_len;
} lb_progress;

void lb_progress_init(lb_progress *p, bool enabled);
/* Draws the line if enough time has passed since the last one (or force is set). */
void lb_progress_update(lb_progress *p, bool force, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Ends the line (a newline on a terminal, so later output starts on a clean line). */
void lb_progress_done(lb_progress *p);

/* Seconds until `left` items are done at rate_per_s items a second (0 when none are left);
 * NaN when the rate is not known (not positive, not finite). */
double lb_progress_eta_s(double left, double rate_per_s);
/* The time left for people: "42 s", "12 min 05 s", "3 h 07 min"; "> 10000 h" beyond that;
 * "?" when eta_s is NaN, infinite or negative. */
void lb_progress_format_eta(char *buf, size_t cap, double eta_s);

#endif
