/* log.h: leveled logging to stderr.
 *
 * One global level set by the CLI (-q, -v, -vv). Messages are single lines prefixed with
 * the level (control bytes in the text, newlines included, are written as '?'); stdout
 * stays clean for tables and --json. Not thread-buffered: each call writes under stdio's
 * lock on stderr, which keeps it whole. A progress line live on the terminal
 * (core/progress.h) is cleared before a message and drawn again after it, so the message
 * starts on a clean line and the progress line stays the last one. */
#ifndef LB_CORE_LOG_H
#define LB_CORE_LOG_H

typedef enum {
    LB_LOG_ERROR = 0,
    LB_LOG_WARN = 1,
    LB_LOG_INFO = 2,
    LB_LOG_DEBUG = 3,
} lb_log_level;

void lb_log_set_level(lb_log_level level);
lb_log_level lb_log_get_level(void);
void lb_log(lb_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The progress line now drawn on the terminal without a newline (copied, cut to 255 bytes),
 * or NULL once it has ended. core/progress.c calls it with stderr locked (flockfile). */
void lb_log_set_live_line(const char *line);

#define LB_ERROR(...) lb_log(LB_LOG_ERROR, __VA_ARGS__)
#define LB_WARN(...)  lb_log(LB_LOG_WARN, __VA_ARGS__)
#define LB_INFO(...)  lb_log(LB_LOG_INFO, __VA_ARGS__)
#define LB_DEBUG(...) lb_log(LB_LOG_DEBUG, __VA_ARGS__)

#endif
