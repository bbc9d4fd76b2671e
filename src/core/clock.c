/* clock.c: thin wrappers over clock_gettime. */
#include "core/clock.h"

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
    time_t secs = (time_t)wall_s;
    int ms = (int)((wall_s - (double)secs) * 1000.0);
    struct tm tm;
    gmtime_r(&secs, &tm);
    char date[24];
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf, buf_len, "%s.%03dZ", date, ms);
}
