/* clock.c: thin wrappers over clock_gettime. */
#include "core/clock.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <time.h>

int64_t lb_clock_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

double lb_clock_wall_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void lb_clock_format_iso(double wall_s, char *buf, size_t buf_len) {
    /* rounded to the millisecond as a whole: the fraction of a double near 1.7e9 s holds
     * .123 as .12299990654, which truncation would print as .122 */
    double ms_total = nearbyint(wall_s * 1000.0);
    bool shown = fabs(ms_total) < 1e17; /* false for NaN and infinities too */
    time_t secs = shown ? (time_t)floor(ms_total / 1000.0) : 0;
    struct tm tm;
    if (!shown || gmtime_r(&secs, &tm) == NULL) {
        snprintf(buf, buf_len, "-");
        return;
    }
    char date[48];
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf, buf_len, "%s.%03dZ", date, (int)(ms_total - (double)secs * 1000.0));
}
