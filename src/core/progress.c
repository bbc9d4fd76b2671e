/* progress.c: the rate-limited progress line behind progress.h. */
#include "core/progress.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/log.h"
#include "core/utf8text.h"

#define TTY_INTERVAL_NS  200000000LL
#define FILE_INTERVAL_NS 5000000000LL
#define ETA_MAX_H        10000

void lb_progress_init(lb_progress *p, bool enabled) {
    p->enabled = enabled && lb_log_get_level() > LB_LOG_ERROR;
    p->tty = isatty(STDERR_FILENO) == 1;
    p->last_ns = 0;
    p->last_len = 0;
}

void lb_progress_update(lb_progress *p, bool force, const char *fmt, ...) {
    if (!p->enabled) return;
    int64_t now = lb_clock_now_ns();
    int64_t interval = p->tty ? TTY_INTERVAL_NS : FILE_INTERVAL_NS;
    if (!force && p->last_ns != 0 && now - p->last_ns < interval) return;
    if (p->last_ns == 0 && !force) {
        /* the first call only starts the clock: short work prints nothing */
        p->last_ns = now;
        return;
    }
    p->last_ns = now;
    char line[256];
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (len < 0) return;
    if (p->tty) {
        /* a line wider than the terminal wraps, and the carriage return then redraws only
         * its last row: cut it short of the last column, between characters */
        struct winsize ws;
        size_t max = sizeof line - 1;
        if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 && ws.ws_col - 1u < max)
            max = ws.ws_col - 1u;
        len = (int)lb_utf8text_cut_len(line, max);
        line[len] = '\0';
        int wide = p->last_len < (int)max ? p->last_len : (int)max; /* a narrowed terminal */
        int pad = wide > len ? wide - len : 0;
        flockfile(stderr);
        fprintf(stderr, "\r%s%*s", line, pad, "");
        lb_log_set_live_line(line); /* a log line now clears it and draws it again */
        funlockfile(stderr);
        p->last_len = len;
    } else {
        fprintf(stderr, "%s\n", line);
    }
    fflush(stderr);
}

void lb_progress_done(lb_progress *p) {
    if (p->enabled && p->tty && p->last_len > 0) {
        flockfile(stderr);
        fprintf(stderr, "\n");
        lb_log_set_live_line(NULL);
        funlockfile(stderr);
        p->last_len = 0;
    }
}

double lb_progress_eta_s(double left, double rate_per_s) {
    if (!(rate_per_s > 0) || !isfinite(rate_per_s) || !isfinite(left)) return NAN;
    return left > 0 ? left / rate_per_s : 0.0;
}

void lb_progress_format_eta(char *buf, size_t cap, double eta_s) {
    if (!isfinite(eta_s) || eta_s < 0) {
        snprintf(buf, cap, "?");
        return;
    }
    if (eta_s >= ETA_MAX_H * 3600.0) {
        snprintf(buf, cap, "> %d h", ETA_MAX_H);
        return;
    }
    long long s = llround(eta_s);
    if (s < 60)
        snprintf(buf, cap, "%lld s", s);
    else if (s < 3600)
        snprintf(buf, cap, "%lld min %02lld s", s / 60, s % 60);
    else
        snprintf(buf, cap, "%lld h %02lld min", s / 3600, s / 60 % 60);
}
