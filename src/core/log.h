/* log.h: leveled logging to stderr.
 *
 * One global level set by the CLI (-q, -v, -vv). Messages are single lines prefixed with
 * the level (control bytes in the text, newlines included, are written as '?'); stdout
 * stays clean for tables and --json. Not thread-buffered: each call is
 * one fprintf, which stdio keeps whole. */
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

#define LB_ERROR(...) lb_log(LB_LOG_ERROR, __VA_ARGS__)
#define LB_WARN(...)  lb_log(LB_LOG_WARN, __VA_ARGS__)
#define LB_INFO(...)  lb_log(LB_LOG_INFO, __VA_ARGS__)
#define LB_DEBUG(...) lb_log(LB_LOG_DEBUG, __VA_ARGS__)

#endif
