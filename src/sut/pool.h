/* pool.h: a set of replicas of one model behind one submit call.
 *
 * Each request goes to the replica in rotation with the fewest requests in flight (ties
 * go round-robin), so a slow GPU simply gets fewer requests than a fast one. A request
 * that fails is sent again, to a replica it has not tried yet when there is one, up to
 * `retries` more times; its owner hears of every retry (to restart its token clock) and
 * of exactly one final outcome. An answer that refuses the request itself (HTTP 400, 413,
 * 422: every replica of the model would) is final at once and no failure of its replica.
 * A replica that fails `eject_after` requests in a row (those refusals and attempts ended
 * by lb_pool_abort_all with LB_QERR_INTERRUPTED not counted) is taken out
 * of rotation and the reason kept for the summary; the last replica in rotation is never
 * taken out, so a run against one broken server still ends with every sample failed with
 * its own reason instead of "no replica". Nothing is re-admitted during a run. */
#ifndef LB_SUT_POOL_H
#define LB_SUT_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sut/http.h"

#define LB_POOL_MAX_REPLICAS 64

typedef struct {
    const char *const *endpoints; /* base URLs ("http://host:8000") or full URLs */
    size_t n_endpoints;
    lb_http_params http;
    int64_t retries;     /* further attempts after a failure */
    int64_t eject_after; /* consecutive failures that take a replica out; 0 = never */
} lb_pool_params;

lb_pool_params lb_pool_default_params(void);

typedef struct {
    char url[512];   /* where requests go, user and password included */
    char shown[512]; /* url as printed and stored: user and password masked */
    int64_t inflight;
    int64_t sent;      /* attempts sent here */
    int64_t completed; /* attempts that completed here */
    int64_t failed;    /* attempts that failed here */
    int64_t consecutive_failures;
    bool ejected;
    char eject_reason[200];
} lb_replica;

typedef struct {
    void (*on_token)(void *user, uint64_t tag, int64_t t_ns);
    /* An attempt failed and the request was sent again. */
    void (*on_retry)(void *user, uint64_t tag, const lb_http_outcome *failed);
    /* The final outcome (attempt counts retries). */
    void (*on_done)(void *user, const lb_http_outcome *o);
} lb_pool_callbacks;

typedef struct lb_pool lb_pool;

lb_status lb_pool_init(lb_pool **out, const lb_pool_params *p, const lb_pool_callbacks *cb,
                       void *user, lb_err *err);
void lb_pool_free(lb_pool *pool);

/* Sends a request (body stays owned by the caller until on_done). When no replica is in
 * rotation the request ends at once with LB_QERR_NO_REPLICA through on_done. */
lb_status lb_pool_submit(lb_pool *pool, uint64_t tag, const char *body, size_t body_len,
                         lb_err *err);

/* Opens n connections before a run, spread evenly over the replicas in rotation (GET
 * <base>/v1/models, lb_http_preconnect); *opened counts those that got an answer. */
lb_status lb_pool_preconnect(lb_pool *pool, int64_t n, int64_t *opened, lb_err *err);

/* lb_http_run on the pool's client. */
int lb_pool_run(lb_pool *pool, int64_t until_ns);
size_t lb_pool_inflight(const lb_pool *pool);
void lb_pool_abort_all(lb_pool *pool, lb_qerr why);

const lb_replica *lb_pool_replicas(const lb_pool *pool, size_t *n);

/* The URL a request is posted to: an endpoint that names a path (contains "/v1/" with more
 * than slashes after it, ".../v1/completions") is kept, otherwise the API path is appended
 * (trailing "/" and a last "/v1" are dropped first: "http://host:8000/v1/" posts to
 * http://host:8000/v1/completions). Returns the URL's length; buf_len or more means it
 * was cut. */
size_t lb_pool_endpoint_url(const char *endpoint, lb_api api, char *buf, size_t buf_len);

/* Checks an endpoint before a run: an http:// or https:// URL with a host, a port (when
 * given) from 1 to 65535, no query or fragment (the API path goes after the endpoint's),
 * and short enough for lb_replica.url with the API path. LB_ERR_USAGE with what is wrong
 * in err, which does not repeat the URL (it may hold a password). lb_pool_init checks
 * every endpoint with it. */
lb_status lb_pool_check_endpoint(const char *endpoint, lb_err *err);

#endif
