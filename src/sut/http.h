/* http.h: a non-blocking HTTP client for OpenAI-compatible servers, on one thread.
 *
 * Built on the libcurl multi interface driven by our own epoll set
 * (curl_multi_socket_action): sockets and libcurl's timer are registered through its
 * callbacks, so the cost of one wake-up does not grow with the number of transfers in
 * flight. lb_http_run() serves the network until a deadline and returns early when a
 * transfer finishes, which lets the caller's scheduler send the next request on time;
 * the last ~spin_ns before the deadline are spent polling instead of sleeping, because
 * a sleeping poll wakes up to a millisecond late. Easy handles are recycled and libcurl's
 * connection cache keeps connections open between requests.
 *
 * Every transfer ends in exactly one on_done call with an outcome: completed, or failed
 * with one reason from lb_qerr (HTTP status, refused connection, timeout, dropped or
 * truncated stream, malformed SSE or JSON, a redirect). Redirects are never followed: a
 * second request per query would be measured as the query's latency, and a benchmark
 * must not move to another server behind the user's back; the failure names the
 * Location. Streamed responses are parsed as they arrive (sse.h, openai.h) and every
 * piece of generated text (a reasoning model's thinking included: its tokens are
 * generated like the answer's) is reported with its arrival time. This module knows
 * nothing of replicas or retries (pool.h) nor of scenarios
 * (loadgen/). The API key is sent as a header and never logged. */
#ifndef LB_SUT_HTTP_H
#define LB_SUT_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "sut/openai.h"

typedef enum {
    LB_QERR_NONE = 0,
    LB_QERR_CONNECT,      /* connection refused, unreachable or not made in time */
    LB_QERR_TIMEOUT,      /* no complete answer within --timeout of a request sent */
    LB_QERR_DROPPED,      /* the connection closed or broke before the answer was complete */
    LB_QERR_TRUNCATED,    /* the answer ended cleanly but short: a stream without [DONE] */
    LB_QERR_BAD_SSE,      /* not an event stream, or an event over the size limit */
    LB_QERR_BAD_JSON,     /* an event's data or the body is not a completion in JSON */
    LB_QERR_HTTP_4XX,     /* the server refused the request */
    LB_QERR_HTTP_5XX,     /* the server failed */
    LB_QERR_SERVER_ERROR, /* an {"error": ...} object inside a 200 answer */
    LB_QERR_NO_REPLICA,   /* every replica was out of rotation */
    LB_QERR_INTERRUPTED,  /* still in flight when the drain time after SIGINT ran out */
    LB_QERR_OTHER,        /* any other transport failure (detail says which) */
    LB_QERR_REDIRECT,     /* a 3xx answer: not followed; detail names the status and Location */
    LB_QERR_COUNT
} lb_qerr;

/* Stable short name ("timeout", "http_5xx", ...). */
const char *lb_http_qerr_name(lb_qerr e);

typedef struct {
    lb_api api;
    bool stream;        /* SSE streaming with usage */
    bool keep_text;     /* collect the generated text: the answer (accuracy mode) and the
                           reasoning beside it (to count the tokens of both) */
    int64_t timeout_ms; /* per request, 0 = none */
    int64_t connect_timeout_ms;
    const char *api_key;     /* sent as "Authorization: Bearer ..."; NULL for none */
    int64_t max_connections; /* connection cache size (open connections kept) */
    int64_t spin_ns;         /* busy-poll window before a deadline */
} lb_http_params;

lb_http_params lb_http_default_params(void);

/* One request as its owner describes it. The body must stay valid until on_done. */
typedef struct {
    uint64_t tag;        /* the owner's id (query index) */
    int replica;         /* the owner's replica index */
    int attempt;         /* 0 for the first try */
    uint64_t tried_mask; /* replicas already tried (bit i = replica i) */
    const char *body;
    size_t body_len;
} lb_http_request;

typedef struct {
    lb_http_request req;
    lb_qerr error;
    int http_status;           /* 0 when no answer */
    char detail[160];          /* the failure in words ("" when ok) */
    int64_t start_ns;          /* handed to libcurl */
    int64_t sent_ns;           /* the request was written (start + libcurl's pretransfer) */
    int64_t first_ns;          /* first generated text (streamed), else the end */
    int64_t done_ns;           /* transfer finished */
    int64_t prompt_tokens;     /* usage; -1 when the server did not say */
    int64_t completion_tokens; /* usage; -1 when the server did not say */
    int32_t n_chunks;          /* streamed pieces that carried text (answer or reasoning) */
    bool new_connection;       /* the transfer had to open a connection (none was idle) */
    const char *text; /* generated text (the answer, without reasoning) when keep_text, else
                         NULL; valid in on_done */
    size_t text_len;
    const char *reasoning; /* a reasoning model's thinking (chat pieces' or a whole chat
                              answer's) when keep_text, else NULL; valid in on_done */
    size_t reasoning_len;
    const uint32_t *token_ids; /* the generated token ids where the SUT has them (an
                                  in-process engine), else NULL; valid in on_done */
    size_t n_token_ids;
} lb_http_outcome;

typedef struct {
    /* A piece of generated text arrived at t_ns (streamed only). */
    void (*on_token)(void *user, uint64_t tag, int64_t t_ns);
    /* The transfer ended (the outcome is valid during the call only). */
    void (*on_done)(void *user, const lb_http_outcome *o);
} lb_http_callbacks;

typedef struct lb_http_client lb_http_client;

lb_status lb_http_init(lb_http_client **out, const lb_http_params *p, const lb_http_callbacks *cb,
                       void *user, lb_err *err);
void lb_http_free(lb_http_client *c);

/* Starts a POST of req->body to url (copied). Returns LB_ERR_NOMEM or LB_ERR_RUNTIME when
 * libcurl refuses; network failures come later through on_done. */
lb_status lb_http_submit(lb_http_client *c, const char *url, const lb_http_request *req,
                         lb_err *err);

/* Serves the network until until_ns (lb_clock_now_ns time) or until at least one
 * transfer finished, whichever comes first. Returns the number of transfers finished. */
int lb_http_run(lb_http_client *c, int64_t until_ns);

size_t lb_http_inflight(const lb_http_client *c);

/* Opens up to n connections to url's server before a run, so that requests sent on a
 * schedule find one idle instead of waiting for TCP set-up: n GET requests of url, all at
 * once (so each needs its own connection), whose answers (any HTTP status) are dropped;
 * the connections stay in libcurl's cache, which must hold n (max_connections). Waits
 * until every one has ended (at most the connect timeout plus 5 s) or SIGINT/SIGTERM
 * came (core/signals.h; the rest are dropped) and sets *opened to the number that got an
 * answer. No callback is called. Fails only when libcurl refuses to start them. */
lb_status lb_http_preconnect(lb_http_client *c, const char *url, int64_t n, int64_t *opened,
                             lb_err *err);

/* Ends every transfer in flight with `why` (each gets its on_done). */
void lb_http_abort_all(lb_http_client *c, lb_qerr why);

#endif
