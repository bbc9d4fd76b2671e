/* log.c: the single stderr logger behind log.h. */
#include "core/log.h"

#include <stdarg.h>
#include <stdio.h>

#include "core/status.h"

static lb_log_level g_level = LB_LOG_WARN;

void lb_log_set_level(lb_log_level level) {
    g_level = level;
}

lb_log_level lb_log_get_level(void) {
    return g_level;
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
    fprintf(stderr, "llmbench: %s: %s\n", names[level], line);
}
