/* log.c: the single stderr logger behind log.h, and the live progress line it writes
 * around. */
#include "core/log.h"

#include <stdarg.h>
#include <stdio.h>

#include "core/status.h"

static lb_log_level g_level = LB_LOG_WARN;
/* the live progress line; guarded by stderr's stdio lock */
static char g_live[256];
static int g_live_len;

void lb_log_set_level(lb_log_level level) {
    g_level = level;
}

lb_log_level lb_log_get_level(void) {
    return g_level;
}

void lb_log_set_live_line(const char *line) {
    flockfile(stderr);
    g_live_len = line != NULL ? snprintf(g_live, sizeof g_live, "%s", line) : 0;
    if (g_live_len > (int)sizeof g_live - 1) g_live_len = (int)sizeof g_live - 1;
    funlockfile(stderr);
}

void lb_log(lb_log_level level, const char *fmt, ...) {
    static const char *const names[] = {"error", "warning", "info", "debug"};
    if (level > g_level) return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    /* one line whatever the text holds: a newline in a path or a server's reply would
     * start a line that does not say it is ours, an escape byte would reach the terminal */
    lb_status_printable(line);
    flockfile(stderr);
    /* the progress line blanked (it is never wider than the terminal) and the cursor back at
     * its start, the message, then the progress line again below it */
    if (g_live_len > 0) fprintf(stderr, "\r%*s\r", g_live_len, "");
    fprintf(stderr, "llmbench: %s: %s\n", names[level], line);
    if (g_live_len > 0) {
        fputs(g_live, stderr);
        fflush(stderr);
    }
    funlockfile(stderr);
}
