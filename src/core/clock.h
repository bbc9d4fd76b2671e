/* clock.h: time sources. Monotonic nanoseconds for measuring, wall-clock seconds for
 * labelling (run start and end), and ISO-8601 formatting of the latter. */
#ifndef LB_CORE_CLOCK_H
#define LB_CORE_CLOCK_H

#include <stddef.h>
#include <stdint.h>

int64_t lb_clock_now_ns(void); /* CLOCK_MONOTONIC, ns */
double lb_clock_wall_s(void);  /* CLOCK_REALTIME, seconds since the epoch */
/* Formats wall-clock seconds, rounded to the millisecond, as "2026-11-21T07:08:09.123Z"
 * into buf (>= 32 bytes); "-" for a time that is not finite or no calendar can show. */
void lb_clock_format_iso(double wall_s, char *buf, size_t buf_len);

#endif
