/* server.h: an OpenAI-compatible HTTP server over a token source (`llmbench serve`).
 *
 * Endpoints: POST /v1/completions, POST /v1/chat/completions, GET /v1/models,
 * GET /health, GET /metrics (the counters below and latency histograms, in Prometheus text
 * or, when the scraper accepts it, OpenMetrics: serve/server_metrics.h). A completion request is
 * answered whole (one JSON body with usage) or, with "stream": true, as server-sent events in
 * OpenAI's chunk format: one chunk per token (and, when the source ends before max_tokens,
 * one more with finish_reason "stop"; a token the source marks as ending the request, the
 * end-of-sequence token, says "stop" itself, even as the last one max_tokens allows), a
 * usage chunk with empty choices when
 * stream_options.include_usage is true, then "data: [DONE]". The output length is the request's
 * max_tokens (chat: max_completion_tokens first), 16 when absent (params.max_tokens if less); a
 * max_tokens above params.max_tokens is refused (400), never cut short; the token source
 * (serve/token_source.h) counts prompt tokens and times every token.
 *
 * Design: libmicrohttpd with a pool of poll() worker threads. A token that is not due yet
 * never blocks a thread: the connection is suspended and a timer thread resumes it when
 * the token is due (serve/server_timer.h), so thousands of slow streams share a few threads,
 * and with zero delays every due token of a request goes out in one write.
 *
 * Faults (params.fault) make a seeded fraction of completion requests fail in one way, so
 * a client's error handling can be tested: see lb_fault_mode. Malformed requests get 4xx
 * with an OpenAI-style error body {"error":{"message","type","param","code"}}.
 *
 * Limits keep hostile or broken clients from starving the others: at most
 * connection_limit connections; one that sends no request for idle_timeout_s, or takes
 * longer than read_timeout_s to send a request's head and body, is closed
 * (serve/server_guard.h); request bodies held in memory at once are bounded by
 * body_memory_bytes (a request that would pass it is answered 503 before its body is
 * read), each body by 64 MiB (413).
 *
 * A completion prompt is a string, an array of token ids (handed to the source as ids,
 * never as text), or a batch: an array of strings or id arrays, one choice each, answered
 * whole only. Sampling fields (temperature, top_p, top_k, seed, ignore_eos) are checked
 * and handed to the token source (the engine's uses them, the synthetic one ignores them).
 * It does not honour n > 1, logprobs, echo, best_of or suffix (refused), other sampling
 * fields (min_p, penalties, logit_bias: accepted and ignored), nor TLS. */
#ifndef LB_SERVE_SERVER_H
#define LB_SERVE_SERVER_H

#include <stdint.h>

#include "core/status.h"
#include "serve/token_source.h"

typedef enum {
    LB_FAULT_NONE = 0,
    LB_FAULT_DROP,     /* close the connection mid-response: HTTP framing left incomplete */
    LB_FAULT_STALL,    /* stop sending mid-response and hold the connection open */
    LB_FAULT_BAD_JSON, /* streamed: one chunk is not JSON; whole: the body is cut short */
    LB_FAULT_500,      /* HTTP 500 with an OpenAI-style error body */
    LB_FAULT_TRUNCATE, /* end cleanly after half the tokens: no usage, no [DONE] */
} lb_fault_mode;

/* "none", "drop", "stall", "bad-json", "500", "truncate". */
const char *lb_server_fault_mode_name(lb_fault_mode mode);
/* The mode of that name, or -1. */
int lb_server_fault_mode_parse(const char *name);

/* The longest model id served (params.model, a request's "model"), bytes. */
#define LB_SERVER_MODEL_MAX_BYTES 256

typedef struct {
    const char *host;           /* address to listen on: "127.0.0.1", "0.0.0.0", "::1" */
    int port;                   /* TCP port; 0 picks a free one (see lb_server_port) */
    int threads;                /* worker threads; 0 = online CPU cores */
    int64_t max_tokens;         /* most output tokens a request may ask for, tokens */
    int64_t default_max_tokens; /* output tokens when a request names none, tokens */
    const char *model;          /* id listed by /v1/models, echoed when a request has none:
                                   1 to LB_SERVER_MODEL_MAX_BYTES bytes; bytes that are not
                                   UTF-8 are served as '?' (the answers are JSON) */
    lb_fault_mode fault;        /* LB_FAULT_NONE for a well-behaved server */
    double fault_rate;          /* fraction of completion requests that fail, 0..1 */
    uint64_t seed;              /* which requests fail: request k fails iff a generator
                                   seeded by (seed, k) draws below fault_rate */
    unsigned connection_limit;  /* open connections at most; more are closed when accepted */
    double idle_timeout_s;      /* a connection without a request this long is closed, s */
    double read_timeout_s;      /* a request's head and body must arrive within this, s */
    size_t body_memory_bytes;   /* request bodies held at once, over all connections, bytes */
} lb_server_params;

lb_server_params lb_server_default_params(void);

/* Counters since start. A completion request is counted in requests, then ends in
 * exactly one of completed, faults, aborted or (answered 4xx) client_errors; client_errors
 * also counts 4xx answers on other paths (404, 405). */
typedef struct {
    uint64_t requests;      /* completion requests received */
    uint64_t streamed;      /* of which asked for a stream */
    uint64_t completed;     /* answered in full, as asked */
    uint64_t faults;        /* given the configured fault */
    uint64_t client_errors; /* answered 4xx (malformed), on any path */
    uint64_t aborted;       /* ended early otherwise (client gone, shutdown, server error) */
    uint64_t tokens;        /* output tokens, over all completion requests: a stream's as
                               sent, a whole answer's when its body is queued (one cut by a
                               drop or bad-json fault, or whose client left during the
                               write, counted all the same; none of one that ended in an
                               error instead) */
    uint64_t in_flight;     /* completion requests not yet ended */
    uint64_t idle_closed;   /* connections closed after idle_timeout_s without a request */
    uint64_t slow_closed;   /* connections closed for a request not in after read_timeout_s */
    uint64_t busy;          /* requests refused with 503: bodies over body_memory_bytes */
    uint64_t malformed;     /* requests refused for their head (serve/server_accept.h) */
    uint64_t over_limit;    /* connections refused at the connection limit (503) */
} lb_server_stats;

typedef struct lb_server lb_server;

/* Starts listening and serving on worker threads; returns once the socket is bound.
 * src must outlive the server. */
lb_status lb_server_start(const lb_server_params *params, const lb_token_source *src,
                          lb_server **out, lb_err *err);

/* The bound TCP port (the chosen one when params.port was 0). */
int lb_server_port(const lb_server *s);

void lb_server_get_stats(const lb_server *s, lb_server_stats *out);

/* Stops accepting connections, sends every in-flight request's remaining tokens at once
 * (stalled ones are closed), waits up to drain_s seconds for them to end, then closes
 * every connection and stops the threads. In flight are also the requests whose head had
 * arrived whole (on a new connection or a kept-alive one): they are answered; a connection
 * without one is closed. The counters stay readable. Idempotent. */
void lb_server_shutdown(lb_server *s, double drain_s);

/* Shuts down (drain 0 s) if still running and frees. Accepts NULL. */
void lb_server_free(lb_server *s);

#endif
