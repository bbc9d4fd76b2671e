/* pool.c: replica choice, retries and ejection on top of one http client (pool.h). */
#include "sut/pool.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/provenance.h"

struct lb_pool {
    lb_pool_params p;
    lb_pool_callbacks cb;
    void *user;
    lb_http_client *http;
    lb_replica *replicas;
    size_t n;
    size_t next; /* round-robin start for ties */
};

lb_pool_params lb_pool_default_params(void) {
    return (lb_pool_params){
        .endpoints = NULL,
        .n_endpoints = 0,
        .http = lb_http_default_params(),
        .retries = 2,
        .eject_after = 5,
    };
}

/* Where the path the endpoint names starts ("/v1/" followed by more than slashes, as in
 * ".../v1/completions"), NULL when it names none ("http://host:8000/v1/" is a base). */
static const char *named_path(const char *endpoint) {
    size_t n = strlen(endpoint);
    while (n > 0 && endpoint[n - 1] == '/')
        n--;
    return memmem(endpoint, n, "/v1/", 4);
}

/* Length of the endpoint's base ("http://host:8000"): up to the path it names, else
 * without trailing "/" and a last "/v1". */
static size_t base_len(const char *endpoint) {
    const char *v1 = named_path(endpoint);
    if (v1 != NULL) return (size_t)(v1 - endpoint);
    size_t n = strlen(endpoint);
    while (n > 0 && endpoint[n - 1] == '/')
        n--;
    if (n >= 3 && memcmp(endpoint + n - 3, "/v1", 3) == 0) n -= 3;
    return n;
}

size_t lb_pool_endpoint_url(const char *endpoint, lb_api api, char *buf, size_t buf_len) {
    int n = named_path(endpoint) != NULL ? snprintf(buf, buf_len, "%s", endpoint)
                                         : snprintf(buf, buf_len, "%.*s%s", (int)base_len(endpoint),
                                                    endpoint, lb_openai_api_path(api));
    return n < 0 ? buf_len : (size_t)n;
}

#define ENDPOINT_EXAMPLE "such as http://127.0.0.1:8000 or https://[::1]:8443/v1"

lb_status lb_pool_check_endpoint(const char *endpoint, lb_err *err) {
    char url[sizeof((lb_replica *)NULL)->url];
    if (lb_pool_endpoint_url(endpoint, LB_API_CHAT, url, sizeof url) >= sizeof url)
        return lb_fail(err, LB_ERR_USAGE, "is too long: requests go to URLs under %zu bytes",
                       sizeof url);
    CURLU *h = curl_url();
    if (h == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of memory checking a URL");
    lb_status st = LB_OK;
    char *scheme = NULL, *port = NULL, *query = NULL, *fragment = NULL;
    CURLUcode rc = curl_url_set(h, CURLUPART_URL, endpoint, 0);
    if (rc == CURLUE_OK) curl_url_get(h, CURLUPART_SCHEME, &scheme, 0);
    if (rc == CURLUE_UNSUPPORTED_SCHEME ||
        (rc == CURLUE_OK && strcmp(scheme, "http") != 0 && strcmp(scheme, "https") != 0))
        st = lb_fail(err, LB_ERR_USAGE, "is not an http:// or https:// URL (" ENDPOINT_EXAMPLE ")");
    else if (rc != CURLUE_OK)
        st = lb_fail(err, LB_ERR_USAGE, "is not a valid URL: %s (" ENDPOINT_EXAMPLE ")",
                     curl_url_strerror(rc));
    else if (curl_url_get(h, CURLUPART_PORT, &port, 0) == CURLUE_OK && strtol(port, NULL, 10) == 0)
        st = lb_fail(err, LB_ERR_USAGE, "has port 0: a server's port is 1 to 65535");
    else if (curl_url_get(h, CURLUPART_QUERY, &query, 0) == CURLUE_OK ||
             curl_url_get(h, CURLUPART_FRAGMENT, &fragment, 0) == CURLUE_OK)
        st = lb_fail(err, LB_ERR_USAGE,
                     "has a query or fragment ('?', '#'), which the API path cannot follow: give "
                     "the server's base URL or the API's full path (" ENDPOINT_EXAMPLE ")");
    curl_free(scheme);
    curl_free(port);
    curl_free(query);
    curl_free(fragment);
    curl_url_cleanup(h);
    return st;
}

static size_t in_rotation(const lb_pool *pool) {
    size_t k = 0;
    for (size_t i = 0; i < pool->n; i++)
        k += !pool->replicas[i].ejected;
    return k;
}

/* Fewest in flight among replicas in rotation, preferring ones not in `avoid`; -1 when
 * none is in rotation. */
static int pick(lb_pool *pool, uint64_t avoid) {
    int best = -1, best_avoided = 1;
    for (size_t k = 0; k < pool->n; k++) {
        size_t i = (pool->next + k) % pool->n;
        const lb_replica *r = &pool->replicas[i];
        if (r->ejected) continue;
        int avoided = (avoid >> i) & 1;
        if (best < 0 || avoided < best_avoided ||
            (avoided == best_avoided && r->inflight < pool->replicas[best].inflight)) {
            best = (int)i;
            best_avoided = avoided;
        }
    }
    pool->next = (pool->next + 1) % pool->n;
    return best;
}

static lb_status send_to(lb_pool *pool, int replica, const lb_http_request *req, lb_err *err) {
    lb_replica *r = &pool->replicas[replica];
    lb_http_request q = *req;
    q.replica = replica;
    q.tried_mask |= (uint64_t)1 << replica;
    LB_TRY(lb_http_submit(pool->http, r->url, &q, err));
    r->inflight++;
    r->sent++;
    return LB_OK;
}

static void end_without_replica(lb_pool *pool, const lb_http_request *req, lb_qerr why,
                                const char *detail) {
    lb_http_outcome o = {.req = *req, .error = why, .prompt_tokens = -1, .completion_tokens = -1};
    o.start_ns = o.sent_ns = o.first_ns = o.done_ns = 0;
    snprintf(o.detail, sizeof o.detail, "%.*s", (int)sizeof o.detail - 1, detail); /* cut */
    pool->cb.on_done(pool->user, &o);
}

static void on_token(void *user, uint64_t tag, int64_t t_ns) {
    lb_pool *pool = user;
    if (pool->cb.on_token) pool->cb.on_token(pool->user, tag, t_ns);
}

/* Whether the answer refuses the request itself (400 bad request, 413 too large, 422
 * unprocessable: a prompt too long for the model, a field out of range), which every
 * replica of one model refuses alike. Other 4xx answers (401/403 a key the replica does
 * not take, 404 a path or model it does not serve, 429 its limit) are the replica's. */
static bool refuses_request(const lb_http_outcome *o) {
    return o->error == LB_QERR_HTTP_4XX &&
           (o->http_status == 400 || o->http_status == 413 || o->http_status == 422);
}

static void on_done(void *user, const lb_http_outcome *o) {
    lb_pool *pool = user;
    lb_replica *r = &pool->replicas[o->req.replica];
    r->inflight--;
    if (o->error == LB_QERR_NONE) {
        r->completed++;
        r->consecutive_failures = 0;
        pool->cb.on_done(pool->user, o);
        return;
    }
    r->failed++;
    /* the request refused, not the replica failing: neither counted against it nor sent
     * again (another replica would refuse it too) */
    if (refuses_request(o)) {
        pool->cb.on_done(pool->user, o);
        return;
    }
    /* the run stopped, not the replica: no count against it */
    if (o->error != LB_QERR_INTERRUPTED) r->consecutive_failures++;
    if (pool->p.eject_after > 0 && !r->ejected && r->consecutive_failures >= pool->p.eject_after &&
        in_rotation(pool) > 1) {
        r->ejected = true;
        snprintf(r->eject_reason, sizeof r->eject_reason, "%lld failures in a row, last: %s (%s)",
                 (long long)r->consecutive_failures, lb_http_qerr_name(o->error), o->detail);
        LB_WARN("replica %s taken out of rotation: %s", r->shown, r->eject_reason);
    }
    if (o->error == LB_QERR_INTERRUPTED || o->req.attempt >= pool->p.retries) {
        pool->cb.on_done(pool->user, o);
        return;
    }
    int next = pick(pool, o->req.tried_mask);
    if (next < 0) {
        pool->cb.on_done(pool->user, o);
        return;
    }
    if (pool->cb.on_retry) pool->cb.on_retry(pool->user, o->req.tag, o);
    lb_http_request again = o->req;
    again.attempt++;
    lb_err err;
    if (send_to(pool, next, &again, &err) != LB_OK)
        end_without_replica(pool, &again, LB_QERR_OTHER, err.msg);
}

lb_status lb_pool_init(lb_pool **out, const lb_pool_params *p, const lb_pool_callbacks *cb,
                       void *user, lb_err *err) {
    *out = NULL;
    if (p->n_endpoints == 0 || p->n_endpoints > LB_POOL_MAX_REPLICAS)
        return lb_fail(err, LB_ERR_USAGE, "the replica pool needs 1 to %d endpoints, got %zu",
                       LB_POOL_MAX_REPLICAS, p->n_endpoints);
    lb_pool *pool = calloc(1, sizeof *pool);
    lb_replica *reps = calloc(p->n_endpoints, sizeof *reps);
    if (pool == NULL || reps == NULL) {
        free(pool);
        free(reps);
        return lb_fail(err, LB_ERR_NOMEM, "out of memory for the replica pool");
    }
    pool->p = *p;
    pool->cb = *cb;
    pool->user = user;
    pool->replicas = reps;
    pool->n = p->n_endpoints;
    for (size_t i = 0; i < pool->n; i++) {
        lb_err why;
        lb_status st = lb_pool_check_endpoint(p->endpoints[i], &why);
        if (st != LB_OK) {
            char shown[sizeof reps[i].shown];
            lb_provenance_mask_url(p->endpoints[i], shown, sizeof shown);
            lb_pool_free(pool);
            return lb_fail(err, st, "endpoint '%s' %s", shown, why.msg);
        }
        lb_pool_endpoint_url(p->endpoints[i], p->http.api, reps[i].url, sizeof reps[i].url);
        lb_provenance_mask_url(reps[i].url, reps[i].shown, sizeof reps[i].shown);
    }
    lb_http_callbacks hcb = {.on_token = on_token, .on_done = on_done};
    lb_status st = lb_http_init(&pool->http, &p->http, &hcb, pool, err);
    if (st != LB_OK) {
        lb_pool_free(pool);
        return st;
    }
    *out = pool;
    return LB_OK;
}

void lb_pool_free(lb_pool *pool) {
    if (pool == NULL) return;
    lb_http_free(pool->http);
    free(pool->replicas);
    free(pool);
}

lb_status lb_pool_submit(lb_pool *pool, uint64_t tag, const char *body, size_t body_len,
                         lb_err *err) {
    lb_http_request req = {.tag = tag,
                           .replica = -1,
                           .attempt = 0,
                           .tried_mask = 0,
                           .body = body,
                           .body_len = body_len};
    int r = pick(pool, 0);
    if (r < 0) {
        end_without_replica(pool, &req, LB_QERR_NO_REPLICA, "every replica is out of rotation");
        return LB_OK;
    }
    return send_to(pool, r, &req, err);
}

lb_status lb_pool_preconnect(lb_pool *pool, int64_t n, int64_t *opened, lb_err *err) {
    *opened = 0;
    size_t k = in_rotation(pool);
    if (n <= 0 || k == 0) return LB_OK;
    int64_t each = (n + (int64_t)k - 1) / (int64_t)k;
    for (size_t i = 0; i < pool->n; i++) {
        if (pool->replicas[i].ejected) continue;
        char url[sizeof pool->replicas[i].url];
        const char *ep = pool->p.endpoints[i];
        snprintf(url, sizeof url, "%.*s/v1/models", (int)base_len(ep), ep);
        int64_t got = 0;
        LB_TRY(lb_http_preconnect(pool->http, url, each, &got, err));
        *opened += got;
    }
    return LB_OK;
}

int lb_pool_run(lb_pool *pool, int64_t until_ns) {
    return lb_http_run(pool->http, until_ns);
}

size_t lb_pool_inflight(const lb_pool *pool) {
    return lb_http_inflight(pool->http);
}

void lb_pool_abort_all(lb_pool *pool, lb_qerr why) {
    lb_http_abort_all(pool->http, why);
}

const lb_replica *lb_pool_replicas(const lb_pool *pool, size_t *n) {
    *n = pool->n;
    return pool->replicas;
}
