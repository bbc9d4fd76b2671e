/* sse.h: an incremental parser of Server-Sent Events (the text/event-stream format that
 * OpenAI-compatible servers stream completions in).
 *
 * Bytes arrive in arbitrary pieces (a piece may end inside a line, inside "\r\n", inside
 * a UTF-8 character); the parser keeps the unfinished line and calls back once per
 * complete event with the event's data (several data: lines joined by "\n", as the
 * format says). It follows the WHATWG rules for line ends (\n, \r\n, \r), comments (":"),
 * the optional space after the colon and a leading byte order mark (dropped); fields other than
 * data (event, id, retry) are ignored. It does not interpret the data: openai.h does. An event
 * larger than the configured limit is an error, so a server streaming garbage cannot grow memory
 * without bound. */
#ifndef LB_SUT_SSE_H
#define LB_SUT_SSE_H

#include <stdbool.h>
#include <stddef.h>

/* Called once per complete event that had at least one data line. Returns 0 to go on,
 * non-zero to stop parsing (lb_sse_feed then returns that value). */
typedef int (*lb_sse_event_fn)(void *user, const char *data, size_t len);

typedef struct {
    char *line; /* the unfinished line (owned) */
    size_t line_len, line_cap;
    char *data; /* the data of the event being assembled (owned) */
    size_t data_len, data_cap;
    bool has_data;    /* at least one data: line in the current event */
    bool skip_lf;     /* the previous piece ended with \r: a leading \n belongs to it */
    bool at_start;    /* no line taken yet: a leading UTF-8 byte order mark is dropped */
    size_t max_bytes; /* limit on one line and on one event's data */
} lb_sse_parser;

#define LB_SSE_TOO_LARGE (-1)
#define LB_SSE_NOMEM     (-2)

void lb_sse_init(lb_sse_parser *p, size_t max_bytes);
/* Forgets any partial line or event (for reuse on a new stream); keeps the buffers. */
void lb_sse_reset(lb_sse_parser *p);
void lb_sse_free(lb_sse_parser *p);

/* Parses bytes[0..n). Returns 0, the callback's non-zero value, LB_SSE_TOO_LARGE or
 * LB_SSE_NOMEM. */
int lb_sse_feed(lb_sse_parser *p, const char *bytes, size_t n, lb_sse_event_fn fn, void *user);

/* True when bytes of an unfinished line or event are buffered (a stream that ends now
 * was cut short, or left out its last blank line). */
bool lb_sse_pending(const lb_sse_parser *p);

/* The stream ended cleanly (its HTTP framing complete): the unfinished last line ends
 * here and an event still waiting for its blank line is dispatched. The WHATWG rules drop
 * such an event, but a server that ends its body there has sent all it meant to (often
 * "data: [DONE]" without the blank line); data cut mid-line fails in the caller's parse
 * of it instead. Returns as lb_sse_feed. */
int lb_sse_finish(lb_sse_parser *p, lb_sse_event_fn fn, void *user);

#endif
