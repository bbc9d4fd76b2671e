/* test_serve.c: the OpenAI-compatible server (serve/server.h) over the synthetic source,
 * exercised with real HTTP on 127.0.0.1 through libcurl, in process. */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/clock.h"
#include "serve/server.h"
#include "serve/synthetic.h"

#define MAX_EVENTS 512

/* ---- a small client ---- */

typedef struct {
    CURLcode rc;
    long status;
    char *body;
    size_t len, cap;
    int64_t t0_ns;
    size_t scan; /* SSE: bytes already split into events */
    int n_events;
    char *events[MAX_EVENTS];    /* data payloads, in order */
    double event_ms[MAX_EVENTS]; /* when each event was complete, ms after the send */
} reply;

static size_t on_data(char *data, size_t size, size_t nmemb, void *cls) {
    reply *r = cls;
    size_t n = size * nmemb;
    if (r->len + n + 1 > r->cap) {
        r->cap = (r->len + n + 1) * 2;
        r->body = realloc(r->body, r->cap);
    }
    memcpy(r->body + r->len, data, n);
    r->len += n;
    r->body[r->len] = '\0';
    double ms = (double)(lb_clock_now_ns() - r->t0_ns) / 1e6;
    char *end;
    while ((end = strstr(r->body + r->scan, "\n\n")) != NULL) {
        const char *ev = r->body + r->scan;
        if (strncmp(ev, "data: ", 6) == 0 && r->n_events < MAX_EVENTS) {
            r->events[r->n_events] = strndup(ev + 6, (size_t)(end - ev - 6));
            r->event_ms[r->n_events++] = ms;
        }
        r->scan = (size_t)(end - r->body) + 2;
    }
    return n;
}

static void reply_free(reply *r) {
    free(r->body);
    for (int i = 0; i < r->n_events; i++)
        free(r->events[i]);
    memset(r, 0, sizeof *r);
}

static CURL *make_request(int port, const char *method, const char *path, const char *body,
                          reply *out, long timeout_ms) {
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
    CURL *c = curl_easy_init();
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, out);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    if (body) curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    out->t0_ns = lb_clock_now_ns();
    return c;
}

static void http(int port, const char *method, const char *path, const char *body, reply *out,
                 long timeout_ms) {
    memset(out, 0, sizeof *out);
    CURL *c = make_request(port, method, path, body, out, timeout_ms);
    out->rc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &out->status);
    curl_easy_cleanup(c);
}

static void post(int port, const char *path, const char *body, reply *out) {
    http(port, "POST", path, body, out, 10000);
}

/* ---- a server per test ---- */

typedef struct {
    lb_token_source src;
    lb_server *srv;
    int port;
} fixture;

static void start(fixture *f, double ttft_ms, double tpot_ms, lb_fault_mode fault, double rate,
                  uint64_t seed) {
    lb_synthetic_params sp = lb_synthetic_default_params();
    sp.ttft_ms = ttft_ms;
    sp.tpot_ms = tpot_ms;
    lb_err err = {{0}};
    assert_int_equal(lb_synthetic_init(&sp, &f->src, &err), LB_OK);
    lb_server_params p = lb_server_default_params();
    p.port = 0;
    p.threads = 2;
    p.max_tokens = 64;
    p.fault = fault;
    p.fault_rate = rate;
    p.seed = seed;
    lb_status st = lb_server_start(&p, &f->src, &f->srv, &err);
    if (st != LB_OK) fail_msg("server did not start: %s", err.msg);
    f->port = lb_server_port(f->srv);
    assert_true(f->port > 0);
}

static void stop(fixture *f) {
    lb_server_free(f->srv);
    lb_synthetic_free(&f->src);
}

static json_t *parse(const char *text) {
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    if (!j) fail_msg("not JSON (%s): %s", je.text, text);
    return j;
}

static int64_t get_int(json_t *j, const char *path1, const char *path2) {
    json_t *v = json_object_get(j, path1);
    if (path2) v = json_object_get(v, path2);
    assert_true(json_is_integer(v));
    return json_integer_value(v);
}

static int count_words(const char *s) {
    return (int)lb_synthetic_count_words(s, strlen(s));
}

/* ---- tests ---- */

/* A 240 KB body arrives in many pieces and outgrows the request's inline buffer. */
static void test_serve_large_prompt_counts_every_word(void **state) {
    (void)state;
    enum { WORDS = 40000 };
    fixture f;
    start(&f, 0, 0, LB_FAULT_NONE, 0, 1);
    size_t cap = WORDS * 6 + 64;
    char *body = malloc(cap);
    size_t n = (size_t)snprintf(body, cap, "{\"max_tokens\":2,\"prompt\":\"");
    for (int i = 0; i < WORDS; i++)
        n += (size_t)snprintf(body + n, cap - n, "w%d ", i % 100);
    snprintf(body + n, cap - n, "\"}");
    reply r;
    post(f.port, "/v1/completions", body, &r);
    assert_int_equal(r.status, 200);
    json_t *j = parse(r.body);
    assert_int_equal(get_int(j, "usage", "prompt_tokens"), WORDS);
    assert_int_equal(get_int(j, "usage", "completion_tokens"), 2);
    json_decref(j);
    reply_free(&r);
    free(body);
    stop(&f);
}

static void test_serve_completion_body_has_text_and_usage(void **state) {
    (void)state;
    fixture f;
    start(&f, 0, 0, LB_FAULT_NONE, 0, 1);
    reply r;
    post(f.port, "/v1/completions",
         "{\"model\":\"m-1\",\"prompt\":\"one two  three\\nfour\",\"max_tokens\":5,"
         "\"temperature\":0.7}",
         &r);
    assert_int_equal(r.rc, CURLE_OK);
    assert_int_equal(r.status, 200);
    json_t *j = parse(r.body);
    assert_string_equal(json_string_value(json_object_get(j, "object")), "text_completion");
    assert_string_equal(json_string_value(json_object_get(j, "model")), "m-1");
    json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
    const char *text = json_string_value(json_object_get(c0, "text"));
    assert_non_null(text);
    assert_int_equal(count_words(text), 5);
    assert_memory_equal(text, "tok", 3);
    assert_string_equal(json_string_value(json_object_get(c0, "finish_reason")), "length");
    assert_int_equal(get_int(j, "usage", "prompt_tokens"), 4);
    assert_int_equal(get_int(j, "usage", "completion_tokens"), 5);
    assert_int_equal(get_int(j, "usage", "total_tokens"), 9);
    json_decref(j);
    reply_free(&r);
    stop(&f);
}

static void test_serve_chat_body_has_message_and_usage(void **state) {
    (void)state;
    fixture f;
    start(&f, 0, 0, LB_FAULT_NONE, 0, 1);
    reply r;
    post(f.port, "/v1/chat/completions",
         "{\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},"
         "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hello there you\"}]}],"
         "\"max_tokens\":50,\"max_completion_tokens\":3}",
         &r);
    assert_int_equal(r.status, 200);
    json_t *j = parse(r.body);
    assert_string_equal(json_string_value(json_object_get(j, "object")), "chat.completion");
    assert_string_equal(json_string_value(json_object_get(j, "model")), "synthetic");
    json_t *msg = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message");
    assert_string_equal(json_string_value(json_object_get(msg, "role")), "assistant");
    assert_int_equal(count_words(json_string_value(json_object_get(msg, "content"))), 3);
    assert_int_equal(get_int(j, "usage", "prompt_tokens"), 5);
    assert_int_equal(get_int(j, "usage", "completion_tokens"), 3);
    json_decref(j);
    reply_free(&r);
    stop(&f);
}

/* A max_tokens above the server's limit was cut to it without a word: the client took an
 * answer of 64 tokens, finish_reason "length", for the 1000 it asked for. It is refused
 * (400) saying what the limit is, as OpenAI and vLLM refuse more than fits. */
static void test_serve_max_tokens_defaults_to_16_and_more_than_the_limit_is_refused(void **state) {
    (void)state;
    fixture f;
    start(&f, 0, 0, LB_FAULT_NONE, 0, 1);
    reply r;
    post(f.port, "/v1/completions", "{\"prompt\":\"x\"}", &r);
    json_t *j = parse(r.body);
    assert_int_equal(get_int(j, "usage", "completion_tokens"), 16);
    json_decref(j);
    reply_free(&r);
    post(f.port, "/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":64}", &r);
    j = parse(r.body);
    assert_int_equal(get_int(j, "usage", "completion_tokens"), 64); /* the fixture's limit */
    json_decref(j);
    reply_free(&r);
    post(f.port, "/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":1000}", &r);
    assert_int_equal(r.status, 400);
    if (strstr(r.body, "'max_tokens' is 1000, more than the 64 output tokens this server allows "
                       "a request (serve --max-tokens): ask for at most 64") == NULL)
        fail_msg("the limit is not named: %s", r.body);
    reply_free(&r);
    post(f.port, "/v1/chat/completions",
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_completion_tokens\":65}", &r);
    assert_int_equal(r.status, 400);
    if (strstr(r.body, "'max_completion_tokens' is 65, more than the 64") == NULL)
        fail_msg("the field is not named: %s", r.body);
    reply_free(&r);
    stop(&f);
}

static void test_serve_prompt_arrays_count_every_part(void **state) {
    (void)state;
    fixture f;
    start(&f, 0, 0, LB_FAULT_NONE, 0, 1);
    reply r;
    post(f.port, "/v1/completions", "{\"prompt\":[\"a b\",\"c\"],\"max_tokens\":1}", &r);
    json_t *j = parse(r.body);
    assert_int_equal(get_int(j, "usage", "prompt_tokens"), 3);
    json_decref(j);
    reply_free(&r);
    post(f.port, "/v1/completions", "{\"prompt\":[101,7,9,12],\"max_tokens\":1}", &r);
    j = parse(r.body);
    assert_int_equal(get_int(j, "usage", "prompt_tokens"), 4);
    json_decref(j);
    reply_free(&r);
    post(f.port, "/v1/completions", "{\"prompt\":[[1,2],[3]],\"max_tokens\":1}", &r);
    j = parse(r.body);
    assert_int_equal(json_array_size(json_object_get(j, "choices")), 2);
    assert_int_equal(get_int(j, "usage", "prompt_tokens"), 3);
    json_decref(j);
    reply_free(&r);
    stop(&f);
}

/* Token ids went to the source as decimal text, so an id no vocabulary has (negative,
 * past 2^31) or an empty id array was served as a prompt; each is a 400 now, the first
 * two naming the id. */
static void test_serve_prompt_ids_must_be_token_ids(void **state) {
    (void)state;
    fixture f;
    start(&f, 0, 0, LB_FAULT_NONE, 0, 1);
    static const struct {
        const char *body, *says;
    } cases[] = {
        {"{\"prompt\":[1,-1,3]}", "'prompt' holds -1, which is not a token id"},
        {"{\"prompt\":[[1],[2147483648]]}", "'prompt' holds 2147483648, which is not a token id"},
        {"{\"prompt\":[[1],[]]}", "a token id array in 'prompt' must not be empty"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        reply r;
        post(f.port, "/v1/completions", cases[i].body, &r);
        if (r.status != 400 || strstr(r.body, cases[i].says) == NULL)
            fail_msg("%s: status %ld, %s", cases[i].body, r.status, r.body);
        reply_free(&r);
    }
    stop(&f);
}

/* Checks a streamed completion: n token events of one word each, the usage event when
 * asked for, [DONE] last; returns the streamed text (caller frees). */
static char *check_stream(const reply *r, int n, bool chat, bool usage) {
    assert_int_equal(r->rc, CURLE_OK);
    assert_int_equal(r->status, 200);
    assert_int_equal(r->n_events, n + (usage ? 1 : 0) + 1);
    assert_string_equal(r->events[r->n_events - 1], "[DONE]");
    char *text = calloc(1, 64 * (size_t)n + 1);
    for (int i = 0; i < n; i++) {
        json_t *j = parse(r->events[i]);
        assert_string_equal(json_string_value(json_object_get(j, "object")),
                            chat ? "chat.completion.chunk" : "text_completion");
        json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
        const char *tok =
            chat ? json_string_value(json_object_get(json_object_get(c0, "delta"), "content"))
                 : json_string_value(json_object_get(c0, "text"));
        assert_non_null(tok);
        assert_int_equal(count_words(tok), 1);
        strcat(text, tok);
        json_t *fr = json_object_get(c0, "finish_reason");
        if (i == n - 1)
            assert_string_equal(json_string_value(fr), "length");
        else
            assert_true(json_is_null(fr));
        json_decref(j);
    }
    if (usage) {
        json_t *j = parse(r->events[n]);
        assert_int_equal(json_array_size(json_object_get(j, "choices")), 0);
        assert_int_equal(get_int(j, "usage", "completion_tokens"), n);
        json_decref(j);
    }
    return text;
}

static void test_serve_stream_sends_one_chunk_per_token_then_usage_then_done(void **state) {
    (void)state;
    fixture f;
    start(&f, 0, 0, LB_FAULT_NONE, 0, 1);
    reply r;
    post(f.port, "/v1/completions",
         "{\"prompt\":\"same prompt\",\"max_tokens\":7,\"stream\":true,"
         "\"stream_options\":{\"include_usage\":true}}",
         &r);
    char *streamed = check_stream(&r, 7, false, true);
    json_t *u = parse(r.events[7]);
    assert_int_equal(get_int(u, "usage", "prompt_tokens"), 2);
    json_decref(u);
    reply_free(&r);
    /* The same prompt, not streamed, gives the same text. */
    post(f.port, "/v1/completions", "{\"prompt\":\"same prompt\",\"max_tokens\":7}", &r);
    json_t *j = parse(r.body);
    assert_string_equal(json_string_value(json_object_get(
                            json_array_get(json_object_get(j, "choices"), 0), "text")),
                        streamed);
    json_decref(j);
    free(streamed);
    reply_free(&r);
    stop(&f);
}

static void test_serve_chat_stream_without_usage_ends_with_done(void **state) {
    (void)state;
    fixture f;
    start(&f, 0, 0, LB_FAULT_NONE, 0, 1);
    reply r;
    post(f.port, "/v1/chat/completions",
         "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":4,"
         "\"stream\":true}",
         &r);
    free(check_stream(&r, 4, true, false));
    json_t *first = parse(r.events[0]);
    json_t *delta = json_object_get(json_array_get(json_object_get(first, "choices"), 0), "delta");
    assert_string_equal(json_string_value(json_object_get(delta, "role")), "assistant");
    json_decref(first);
    reply_free(&r);
    stop(&f);
}

/* One timed request (streamed or whole, 11 tokens at --ttft-ms 50 --tpot-ms 10). Fails
 * at once when a token comes before its due time; returns false when one came too late
 * (a loaded machine: the caller tries again). */
static bool timed_request(int port, bool stream) {
    reply r;
    post(port, "/v1/completions",
         stream ? "{\"prompt\":\"t\",\"max_tokens\":11,\"stream\":true}"
                : "{\"prompt\":\"t\",\"max_tokens\":11}",
         &r);
    assert_int_equal(r.status, 200);
    bool in_time;
    if (stream) {
        free(check_stream(&r, 11, false, false));
        /* Token i is due 50 + 10 i ms after arrival. */
        for (int i = 0; i < 11; i++)
            if (r.event_ms[i] < 50.0 + 10.0 * i - 1.0)
                fail_msg("token %d came %.1f ms after the send, before it was due", i,
                         r.event_ms[i]);
        in_time = r.event_ms[0] <= 70.0 && r.event_ms[10] <= 175.0;
        if (!in_time)
            fprintf(stderr, "late: first token at %.1f ms, last at %.1f ms\n", r.event_ms[0],
                    r.event_ms[10]);
    } else {
        /* A whole response comes when its last token is due: 150 ms. */
        double total_ms = (double)(lb_clock_now_ns() - r.t0_ns) / 1e6;
        if (total_ms < 149.0) fail_msg("whole response after %.1f ms, before it was due", total_ms);
        in_time = total_ms <= 190.0;
        if (!in_time) fprintf(stderr, "late: whole response at %.1f ms\n", total_ms);
    }
    reply_free(&r);
    return in_time;
}

/* Never early; late by at most 20 ms (first token) and 25 ms (last), in one of 3 tries. */
static void test_serve_stream_timing_follows_ttft_and_tpot(void **state) {
    (void)state;
    fixture f;
    start(&f, 50, 10, LB_FAULT_NONE, 0, 1);
    for (int stream = 0; stream < 2; stream++) {
        bool in_time = false;
        for (int attempt = 0; attempt < 3 && !in_time; attempt++)
            in_time = timed_request(f.port, stream);
        if (!in_time) fail_msg("%s response late 3 times", stream ? "streamed" : "whole");
    }
    stop(&f);
}

/* 200 streams of 16 tokens, 20 ms apart, on 2 server threads: if a delay held a thread,
 * they would take 200 * 300 ms / 2 = 30 s; parked connections finish in about 300 ms. */
static void test_serve_delays_do_not_block_threads(void **state) {
    (void)state;
    enum { N = 200 };
    fixture f;
    start(&f, 0, 20, LB_FAULT_NONE, 0, 1);
    CURLM *m = curl_multi_init();
    curl_multi_setopt(m, CURLMOPT_MAX_TOTAL_CONNECTIONS, (long)N);
    reply *rs = calloc(N, sizeof *rs);
    CURL *hs[N];
    int64_t t0 = lb_clock_now_ns();
    for (int i = 0; i < N; i++) {
        hs[i] = make_request(f.port, "POST", "/v1/completions",
                             "{\"prompt\":\"p\",\"max_tokens\":16,\"stream\":true}", &rs[i], 20000);
        curl_multi_add_handle(m, hs[i]);
    }
    int running = 1;
    while (running) {
        curl_multi_perform(m, &running);
        if (running) curl_multi_poll(m, NULL, 0, 100, NULL);
    }
    double wall_ms = (double)(lb_clock_now_ns() - t0) / 1e6;
    CURLMsg *msg;
    int left, ok = 0;
    while ((msg = curl_multi_info_read(m, &left)) != NULL)
        if (msg->msg == CURLMSG_DONE && msg->data.result == CURLE_OK) ok++;
    assert_int_equal(ok, N);
    for (int i = 0; i < N; i++) {
        assert_int_equal(rs[i].n_events, 17);
        curl_multi_remove_handle(m, hs[i]);
        curl_easy_cleanup(hs[i]);
        reply_free(&rs[i]);
    }
    free(rs);
    curl_multi_cleanup(m);
    assert_true(wall_ms >= 300.0);
    assert_true(wall_ms < 3000.0);
    lb_server_stats st;
    lb_server_shutdown(f.srv, 2.0); /* the counters are final once it returns */
    lb_server_get_stats(f.srv, &st);
    assert_int_equal(st.completed, N);
    assert_int_equal(st.tokens, N * 16);
    stop(&f);
}

static void test_serve_rejects_malformed_requests_with_openai_errors(void **state) {
    (void)state;
    fixture f;
    start(&f, 0, 0, LB_FAULT_NONE, 0, 1);
    struct {
        const char *method, *path, *body;
        long status;
    } cases[] = {
        {"POST", "/v1/completions", "{\"prompt\":", 400},
        {"POST", "/v1/completions", "[1,2]", 400},
        {"POST", "/v1/completions", "{\"max_tokens\":3}", 400},
        {"POST", "/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":0}", 400},
        {"POST", "/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":\"9\"}", 400},
        {"POST", "/v1/completions", "{\"prompt\":[\"a\",3]}", 400},
        {"POST", "/v1/completions", "{\"prompt\":\"x\",\"n\":2}", 400},
        {"POST", "/v1/chat/completions", "{\"prompt\":\"x\"}", 400},
        {"POST", "/v1/chat/completions", "{\"messages\":[]}", 400},
        {"GET", "/v1/completions", NULL, 405},
        {"POST", "/v1/models", "{}", 405},
        {"GET", "/v2/anything", NULL, 404},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        reply r;
        http(f.port, cases[i].method, cases[i].path, cases[i].body, &r, 5000);
        if (r.status != cases[i].status)
            fail_msg("case %zu (%s %s %s): status %ld, expected %ld", i, cases[i].method,
                     cases[i].path, cases[i].body ? cases[i].body : "", r.status, cases[i].status);
        json_t *j = parse(r.body);
        const char *msg =
            json_string_value(json_object_get(json_object_get(j, "error"), "message"));
        assert_non_null(msg);
        assert_true(strlen(msg) > 10);
        json_decref(j);
        reply_free(&r);
    }
    lb_server_stats st;
    lb_server_shutdown(f.srv, 2.0); /* the counters are final once it returns */
    lb_server_get_stats(f.srv, &st);
    assert_int_equal(st.client_errors, sizeof cases / sizeof cases[0]);
    assert_int_equal(st.completed, 0);
    stop(&f);
}

/* Also: the connection of a GET stays open for the next request. */
static void test_serve_lists_models_and_reports_health(void **state) {
    (void)state;
    fixture f;
    start(&f, 0, 0, LB_FAULT_NONE, 0, 1);
    reply r;
    http(f.port, "GET", "/v1/models", NULL, &r, 5000);
    assert_int_equal(r.status, 200);
    json_t *j = parse(r.body);
    assert_string_equal(
        json_string_value(json_object_get(json_array_get(json_object_get(j, "data"), 0), "id")),
        "synthetic");
    json_decref(j);
    reply_free(&r);
    http(f.port, "GET", "/health", NULL, &r, 5000);
    assert_int_equal(r.status, 200);
    reply_free(&r);
    /* A GET leaves its connection open: the next request on the handle reuses it. */
    CURL *c = make_request(f.port, "GET", "/v1/models", NULL, &r, 5000);
    assert_int_equal(curl_easy_perform(c), CURLE_OK);
    reply_free(&r);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &r);
    curl_easy_setopt(c, CURLOPT_URL, "http://127.0.0.1/health");
    curl_easy_setopt(c, CURLOPT_PORT, (long)f.port);
    assert_int_equal(curl_easy_perform(c), CURLE_OK);
    long connects = -1;
    curl_easy_getinfo(c, CURLINFO_NUM_CONNECTS, &connects);
    assert_int_equal(connects, 0);
    curl_easy_cleanup(c);
    reply_free(&r);
    stop(&f);
}

/* A model id that is not UTF-8 (a Latin-1 "caf\xe9") is served as '?': /v1/models and
 * the completions stay JSON a strict client reads. */
static void test_serve_model_id_that_is_not_utf8_is_served_as_json(void **state) {
    (void)state;
    lb_synthetic_params sp = lb_synthetic_default_params();
    lb_err err = {{0}};
    fixture f;
    assert_int_equal(lb_synthetic_init(&sp, &f.src, &err), LB_OK);
    lb_server_params p = lb_server_default_params();
    p.port = 0;
    p.threads = 1;
    p.model = "caf\xe9";
    if (lb_server_start(&p, &f.src, &f.srv, &err) != LB_OK) fail_msg("start: %s", err.msg);
    f.port = lb_server_port(f.srv);
    reply r;
    http(f.port, "GET", "/v1/models", NULL, &r, 5000);
    assert_int_equal(r.status, 200);
    json_t *j = parse(r.body);
    assert_string_equal(
        json_string_value(json_object_get(json_array_get(json_object_get(j, "data"), 0), "id")),
        "caf?");
    json_decref(j);
    reply_free(&r);
    post(f.port, "/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":2}", &r);
    assert_int_equal(r.status, 200);
    j = parse(r.body);
    assert_string_equal(json_string_value(json_object_get(j, "model")), "caf?");
    json_decref(j);
    reply_free(&r);
    stop(&f);
}

/* A GET that carries a body (some clients send "{}") is answered, not dropped unanswered. */
static void test_serve_answers_gets_that_carry_a_body(void **state) {
    (void)state;
    fixture f;
    start(&f, 0, 0, LB_FAULT_NONE, 0, 1);
    static const char *const paths[] = {"/health", "/v1/models", "/metrics"};
    static const char *const want[] = {"{\"status\":\"ok\"}", "\"id\":\"synthetic\"",
                                       "serve_requests_total"};
    for (int i = 0; i < 3; i++) {
        reply r;
        http(f.port, "GET", paths[i], "{}", &r, 5000);
        if (r.rc != CURLE_OK || r.status != 200 || r.body == NULL || !strstr(r.body, want[i]))
            fail_msg("GET %s with a body: curl %d, status %ld, body '%s'", paths[i], (int)r.rc,
                     r.status, r.body ? r.body : "");
        reply_free(&r);
    }
    stop(&f);
}

static void test_serve_keeps_connections_alive(void **state) {
    (void)state;
    fixture f;
    start(&f, 0, 0, LB_FAULT_NONE, 0, 1);
    reply r = {0};
    CURL *c = make_request(f.port, "POST", "/v1/completions", "{\"prompt\":\"a\"}", &r, 5000);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(curl_easy_perform(c), CURLE_OK);
        long new_connections = -1;
        curl_easy_getinfo(c, CURLINFO_NUM_CONNECTS, &new_connections);
        assert_int_equal(new_connections, i == 0 ? 1 : 0);
    }
    curl_easy_cleanup(c);
    reply_free(&r);
    stop(&f);
}

/* The longest model name, all control characters (6 bytes each once escaped), comes back
 * intact in every chunk; one byte more is refused. */
static void test_serve_echoes_the_longest_model_name(void **state) {
    (void)state;
    fixture f;
    start(&f, 0, 0, LB_FAULT_NONE, 0, 1);
    for (int len = 256; len <= 257; len++) {
        char body[4096];
        size_t n = (size_t)snprintf(body, sizeof body, "{\"model\":\"");
        for (int i = 0; i < len; i++)
            n += (size_t)snprintf(body + n, sizeof body - n, "\\u0001");
        snprintf(body + n, sizeof body - n,
                 "\",\"prompt\":\"m\",\"max_tokens\":3,\"stream\":true,"
                 "\"stream_options\":{\"include_usage\":true}}");
        reply r;
        post(f.port, "/v1/completions", body, &r);
        if (len == 257) {
            assert_int_equal(r.status, 400);
        } else {
            free(check_stream(&r, 3, false, true));
            for (int i = 0; i < 4; i++) {
                json_t *j = parse(r.events[i]);
                const char *model = json_string_value(json_object_get(j, "model"));
                assert_int_equal(strlen(model), 256);
                assert_int_equal(model[255], 1);
                json_decref(j);
            }
        }
        reply_free(&r);
    }
    stop(&f);
}

/* ---- faults: each is seen by a client as the failure it stands for ---- */

static const char STREAM8[] = "{\"prompt\":\"f\",\"max_tokens\":8,\"stream\":true,"
                              "\"stream_options\":{\"include_usage\":true}}";
static const char WHOLE8[] = "{\"prompt\":\"f\",\"max_tokens\":8}";

/* A source that wraps the synthetic one and, for a prompt starting with "hold", keeps the
 * server thread busy for HOLD_MS inside start(): the way to make many requests arrive
 * while the thread cannot look. */
#define HOLD_MS 200
static lb_status holding_start(void *ctx, const lb_token_request *req, void *stream,
                               int64_t *prompt_tokens, lb_err *err) {
    const lb_token_source *inner = ctx;
    if (req->prompt_len >= 4 && memcmp(req->prompt, "hold", 4) == 0)
        nanosleep(&(struct timespec){.tv_nsec = HOLD_MS * 1000000L}, NULL);
    return inner->start(inner->ctx, req, stream, prompt_tokens, err);
}
static lb_token_state holding_next(void *ctx, void *stream, int64_t now_ns, char *text, size_t *len,
                                   int64_t *due_ns) {
    const lb_token_source *inner = ctx;
    return inner->next(inner->ctx, stream, now_ns, text, len, due_ns);
}
static void holding_done(void *ctx, void *stream) {
    const lb_token_source *inner = ctx;
    inner->done(inner->ctx, stream);
}

/* A source that wraps the synthetic one and, for a prompt starting with "fail", fails the
 * request after FAIL_AFTER tokens, as the engine does one it ends at a shutdown. */
#define FAIL_AFTER 3
typedef struct {
    int64_t given;
    bool fail;
    max_align_t inner[];
} failing_stream;
static lb_status failing_start(void *ctx, const lb_token_request *req, void *stream,
                               int64_t *prompt_tokens, lb_err *err) {
    const lb_token_source *inner = ctx;
    failing_stream *fs = stream;
    fs->fail = req->prompt_len >= 4 && memcmp(req->prompt, "fail", 4) == 0;
    return inner->start(inner->ctx, req, fs->inner, prompt_tokens, err);
}
static lb_token_state failing_next(void *ctx, void *stream, int64_t now_ns, char *text, size_t *len,
                                   int64_t *due_ns) {
    const lb_token_source *inner = ctx;
    failing_stream *fs = stream;
    if (fs->fail && fs->given == FAIL_AFTER) {
        *len = strlen("the source failed");
        memcpy(text, "the source failed", *len);
        return LB_TOKEN_FAILED;
    }
    lb_token_state st = inner->next(inner->ctx, fs->inner, now_ns, text, len, due_ns);
    if (st == LB_TOKEN_READY) fs->given++;
    return st;
}
static void failing_done(void *ctx, void *stream) {
    const lb_token_source *inner = ctx;
    inner->done(inner->ctx, ((failing_stream *)stream)->inner);
}

/* serve_output_tokens counts the tokens sent: a whole answer that became an error (500)
 * sent none of those generated before, a stream sent each in its event. */
static void test_serve_tokens_count_only_what_was_sent(void **state) {
    (void)state;
    fixture f;
    lb_synthetic_params sp = lb_synthetic_default_params();
    lb_err err = {{0}};
    assert_int_equal(lb_synthetic_init(&sp, &f.src, &err), LB_OK);
    lb_token_source failing = {.name = "failing",
                               .ctx = &f.src,
                               .stream_bytes = sizeof(failing_stream) + f.src.stream_bytes,
                               .start = failing_start,
                               .next = failing_next,
                               .done = failing_done};
    lb_server_params p = lb_server_default_params();
    p.port = 0;
    p.threads = 1;
    if (lb_server_start(&p, &failing, &f.srv, &err) != LB_OK)
        fail_msg("server did not start: %s", err.msg);
    f.port = lb_server_port(f.srv);
    reply r;
    post(f.port, "/v1/completions", "{\"prompt\":\"fail\",\"max_tokens\":8}", &r);
    assert_int_equal(r.status, 500);
    reply_free(&r);
    post(f.port, "/v1/completions", "{\"prompt\":\"fail\",\"max_tokens\":8,\"stream\":true}", &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(r.n_events, FAIL_AFTER + 1); /* the tokens, then the error */
    reply_free(&r);
    post(f.port, "/v1/completions", "{\"prompt\":\"ok\",\"max_tokens\":5}", &r);
    assert_int_equal(r.status, 200);
    reply_free(&r);
    lb_server_shutdown(f.srv, 1.0); /* every request has ended */
    lb_server_stats st;
    lb_server_get_stats(f.srv, &st);
    assert_int_equal(st.aborted, 2);
    assert_int_equal(st.completed, 1);
    assert_int_equal(st.tokens, FAIL_AFTER + 5);
    stop(&f);
}

static int connect_to(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    return fd;
}

static void send_post(int fd, const char *body) {
    char req[256];
    int n = snprintf(req, sizeof req,
                     "POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: "
                     "application/json\r\nContent-Length: %zu\r\n\r\n%s",
                     strlen(body), body);
    assert_int_equal(write(fd, req, (size_t)n), n);
}

/* Connections opened together past --max-connections each get an answer (200, or 503 past
 * the limit), and the server then shuts down: the acceptor let them in before
 * libmicrohttpd counted the ones handed to it, libmicrohttpd refused one at its own limit
 * and its thread hung (no answer, and shutdown waited on it forever). */
static void test_serve_answers_connections_that_come_together_past_its_limit(void **state) {
    (void)state;
    enum { N = 6 };
    const int threads[] = {1, 4}, limits[] = {1, 4};
    for (int k = 0; k < 2; k++) {
        lb_synthetic_params sp = lb_synthetic_default_params();
        lb_err err = {{0}};
        fixture f;
        assert_int_equal(lb_synthetic_init(&sp, &f.src, &err), LB_OK);
        lb_server_params p = lb_server_default_params();
        p.port = 0;
        p.threads = threads[k];
        p.connection_limit = (unsigned)limits[k];
        if (lb_server_start(&p, &f.src, &f.srv, &err) != LB_OK) fail_msg("start: %s", err.msg);
        f.port = lb_server_port(f.srv);
        int fds[N];
        for (int i = 0; i < N; i++)
            fds[i] = connect_to(f.port);
        static const char req[] = "GET /health HTTP/1.1\r\nHost: t\r\n\r\n";
        for (int i = 0; i < N; i++)
            (void)!write(fds[i], req, sizeof req - 1);
        int ok = 0, answered = 0;
        for (int i = 0; i < N; i++) {
            struct timeval tv = {.tv_sec = 5};
            setsockopt(fds[i], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
            char buf[512];
            ssize_t n = read(fds[i], buf, sizeof buf - 1);
            buf[n > 0 ? n : 0] = '\0';
            ok += strncmp(buf, "HTTP/1.1 200", 12) == 0;
            answered +=
                strncmp(buf, "HTTP/1.1 200", 12) == 0 || strncmp(buf, "HTTP/1.1 503", 12) == 0;
            close(fds[i]);
        }
        if (answered != N || ok < limits[k])
            fail_msg("%d threads, limit %d: %d of %d answered, %d with 200", threads[k], limits[k],
                     answered, N, ok);
        int64_t t0 = lb_clock_now_ns();
        stop(&f);
        assert_true(lb_clock_now_ns() - t0 < 10000000000LL);
    }
}

/* 128 requests that arrive together on 128 open connections to one worker thread are all
 * answered at once. libmicrohttpd's epoll loop takes 128 events a call and, after a full
 * batch, waits again with the blocking timeout: a worker that found exactly 128 ready
 * connections slept until some other event came (here: forever). */
static void test_serve_answers_128_requests_that_arrive_together(void **state) {
    (void)state;
    enum { N = 128 };
    fixture f;
    lb_synthetic_params sp = lb_synthetic_default_params();
    lb_err err = {{0}};
    assert_int_equal(lb_synthetic_init(&sp, &f.src, &err), LB_OK);
    lb_token_source holding = {.name = "holding",
                               .ctx = &f.src,
                               .stream_bytes = f.src.stream_bytes,
                               .start = holding_start,
                               .next = holding_next,
                               .done = holding_done};
    lb_server_params p = lb_server_default_params();
    p.port = 0;
    p.threads = 1;
    if (lb_server_start(&p, &holding, &f.srv, &err) != LB_OK)
        fail_msg("server did not start: %s", err.msg);
    int port = lb_server_port(f.srv);
    int fds[N], holder = connect_to(port);
    for (int i = 0; i < N; i++)
        fds[i] = connect_to(port);
    nanosleep(&(struct timespec){.tv_nsec = 50000000L}, NULL); /* all accepted, idle */
    send_post(holder, "{\"prompt\":\"hold\",\"max_tokens\":2}");
    nanosleep(&(struct timespec){.tv_nsec = 20000000L}, NULL); /* the thread is held */
    for (int i = 0; i < N; i++)
        send_post(fds[i], "{\"prompt\":\"x\",\"max_tokens\":2}");
    struct pollfd pf[N];
    for (int i = 0; i < N; i++)
        pf[i] = (struct pollfd){.fd = fds[i], .events = POLLIN};
    int answered = 0;
    int64_t deadline = lb_clock_now_ns() + 3000000000LL;
    while (answered < N && lb_clock_now_ns() < deadline) {
        if (poll(pf, N, 100) <= 0) continue;
        for (int i = 0; i < N; i++) {
            if (pf[i].fd < 0 || !(pf[i].revents & POLLIN)) continue;
            char buf[2048];
            ssize_t got = read(fds[i], buf, sizeof buf - 1);
            assert_true(got > 12);
            buf[got] = '\0';
            assert_non_null(strstr(buf, "HTTP/1.1 200"));
            pf[i].fd = -1; /* poll skips it from now on */
            answered++;
        }
    }
    assert_int_equal(answered, N);
    for (int i = 0; i < N; i++)
        close(fds[i]);
    close(holder);
    stop(&f);
}

static void test_serve_fault_drop_cuts_the_connection(void **state) {
    (void)state;
    fixture f;
    start(&f, 0, 0, LB_FAULT_DROP, 1.0, 1);
    reply r;
    post(f.port, "/v1/completions", STREAM8, &r);
    assert_true(r.rc == CURLE_PARTIAL_FILE || r.rc == CURLE_RECV_ERROR);
    assert_int_equal(r.n_events, 4); /* half the tokens, then nothing */
    reply_free(&r);
    post(f.port, "/v1/completions", WHOLE8, &r);
    assert_int_equal(r.rc, CURLE_PARTIAL_FILE);
    assert_int_equal(r.status, 200);
    reply_free(&r);
    lb_server_stats st;
    lb_server_shutdown(f.srv, 2.0); /* the counters are final once it returns */
    lb_server_get_stats(f.srv, &st);
    assert_int_equal(st.faults, 2);
    assert_int_equal(st.completed, 0);
    stop(&f);
}

static void test_serve_fault_stall_holds_the_connection_until_shutdown(void **state) {
    (void)state;
    fixture f;
    start(&f, 0, 0, LB_FAULT_STALL, 1.0, 1);
    reply r;
    http(f.port, "POST", "/v1/completions", STREAM8, &r, 400);
    assert_int_equal(r.rc, CURLE_OPERATION_TIMEDOUT);
    assert_int_equal(r.n_events, 4);
    reply_free(&r);
    http(f.port, "POST", "/v1/completions", WHOLE8, &r, 400);
    assert_int_equal(r.rc, CURLE_OPERATION_TIMEDOUT);
    assert_int_equal(r.len, 0);
    reply_free(&r);
    /* Parked connections are let go at shutdown: it does not wait for them. */
    int64_t t0 = lb_clock_now_ns();
    lb_server_shutdown(f.srv, 5.0);
    assert_true(lb_clock_now_ns() - t0 < 1000000000);
    lb_server_stats st;
    lb_server_get_stats(f.srv, &st);
    assert_int_equal(st.faults, 2);
    assert_int_equal(st.in_flight, 0);
    stop(&f);
}

static void test_serve_fault_bad_json_sends_unparseable_data(void **state) {
    (void)state;
    fixture f;
    start(&f, 0, 0, LB_FAULT_BAD_JSON, 1.0, 1);
    reply r;
    post(f.port, "/v1/completions", STREAM8, &r);
    assert_int_equal(r.rc, CURLE_OK);
    assert_int_equal(r.n_events, 4 + 1 + 4 + 1 + 1); /* tokens, bad, tokens, usage, DONE */
    json_error_t je;
    for (int i = 0; i < r.n_events - 1; i++) {
        json_t *j = json_loads(r.events[i], 0, &je);
        if (i == 4)
            assert_null(j);
        else
            assert_non_null(j);
        json_decref(j);
    }
    reply_free(&r);
    post(f.port, "/v1/completions", WHOLE8, &r);
    assert_int_equal(r.rc, CURLE_OK);
    assert_int_equal(r.status, 200);
    assert_true(r.len > 20);
    assert_null(json_loads(r.body, 0, &je));
    reply_free(&r);
    stop(&f);
}

static void test_serve_fault_500_answers_with_an_error_body(void **state) {
    (void)state;
    fixture f;
    start(&f, 0, 0, LB_FAULT_500, 1.0, 1);
    const char *bodies[] = {STREAM8, WHOLE8};
    for (int i = 0; i < 2; i++) {
        reply r;
        post(f.port, "/v1/completions", bodies[i], &r);
        assert_int_equal(r.rc, CURLE_OK);
        assert_int_equal(r.status, 500);
        json_t *j = parse(r.body);
        json_t *e = json_object_get(j, "error");
        assert_non_null(json_string_value(json_object_get(e, "message")));
        assert_string_equal(json_string_value(json_object_get(e, "type")), "server_error");
        json_decref(j);
        reply_free(&r);
    }
    stop(&f);
}

static void test_serve_fault_truncate_ends_cleanly_without_usage_or_done(void **state) {
    (void)state;
    fixture f;
    start(&f, 0, 0, LB_FAULT_TRUNCATE, 1.0, 1);
    reply r;
    post(f.port, "/v1/completions", STREAM8, &r);
    assert_int_equal(r.rc, CURLE_OK);
    assert_int_equal(r.n_events, 4);
    for (int i = 0; i < 4; i++) {
        json_t *j = parse(r.events[i]);
        assert_null(json_object_get(j, "usage"));
        json_decref(j);
    }
    reply_free(&r);
    post(f.port, "/v1/completions", WHOLE8, &r);
    assert_int_equal(r.status, 200);
    json_t *j = parse(r.body);
    assert_null(json_object_get(j, "usage"));
    const char *text = json_string_value(
        json_object_get(json_array_get(json_object_get(j, "choices"), 0), "text"));
    assert_int_equal(count_words(text), 4);
    json_decref(j);
    reply_free(&r);
    stop(&f);
}

/* Which of 100 requests fail: about the rate, and the same for the same seed. */
static void fault_pattern(double rate, uint64_t seed, char *pattern, int n) {
    fixture f;
    start(&f, 0, 0, LB_FAULT_500, rate, seed);
    for (int i = 0; i < n; i++) {
        reply r;
        post(f.port, "/v1/completions", "{\"prompt\":\"r\",\"max_tokens\":1}", &r);
        assert_true(r.status == 200 || r.status == 500);
        pattern[i] = r.status == 500 ? 'F' : '.';
        reply_free(&r);
    }
    pattern[n] = '\0';
    lb_server_stats st;
    lb_server_shutdown(f.srv, 2.0); /* the counters are final once it returns */
    lb_server_get_stats(f.srv, &st);
    int faults = 0;
    for (int i = 0; i < n; i++)
        faults += pattern[i] == 'F';
    assert_int_equal(st.faults, faults);
    assert_int_equal(st.completed, n - faults);
    stop(&f);
}

static void test_serve_fault_rate_picks_a_repeatable_fraction(void **state) {
    (void)state;
    enum { N = 100 };
    char a[N + 1], b[N + 1], c[N + 1], none[N + 1];
    fault_pattern(0.3, 7, a, N);
    fault_pattern(0.3, 7, b, N);
    fault_pattern(0.3, 8, c, N);
    fault_pattern(0.0, 7, none, N);
    assert_string_equal(a, b);
    assert_string_not_equal(a, c);
    int faults = 0;
    for (int i = 0; i < N; i++)
        faults += a[i] == 'F';
    assert_in_range(faults, 15, 45); /* binomial(100, 0.3): mean 30, sd 4.6 */
    assert_null(strchr(none, 'F'));
}

/* Clients that give up while their connection is parked, mixed with stalled and normal
 * requests: every request is accounted for once, none is left behind, and (under the
 * sanitizers) no request is used after it was freed. */
static void test_serve_survives_clients_leaving_midstream(void **state) {
    (void)state;
    enum { N = 120 };
    fixture f;
    start(&f, 0, 5, LB_FAULT_STALL, 0.3, 5); /* 32 tokens: 155 ms each */
    CURLM *m = curl_multi_init();
    reply *rs = calloc(N, sizeof *rs);
    CURL *hs[N];
    for (int i = 0; i < N; i++) {
        hs[i] = make_request(f.port, "POST", "/v1/completions",
                             i % 2 ? "{\"prompt\":\"p\",\"max_tokens\":32,\"stream\":true}"
                                   : "{\"prompt\":\"p\",\"max_tokens\":32}",
                             &rs[i], i % 3 == 0 ? 60 : 2000);
        curl_multi_add_handle(m, hs[i]);
    }
    int running = 1;
    while (running) {
        curl_multi_perform(m, &running);
        if (running) curl_multi_poll(m, NULL, 0, 50, NULL);
    }
    int ok = 0;
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(m, &left)) != NULL)
        if (msg->msg == CURLMSG_DONE && msg->data.result == CURLE_OK) ok++;
    for (int i = 0; i < N; i++) {
        curl_multi_remove_handle(m, hs[i]);
        curl_easy_cleanup(hs[i]);
        reply_free(&rs[i]);
    }
    free(rs);
    curl_multi_cleanup(m);
    lb_server_stats st;
    lb_server_shutdown(f.srv, 2.0);
    lb_server_get_stats(f.srv, &st);
    assert_int_equal(st.requests, N);
    assert_int_equal(st.completed + st.faults + st.aborted, N);
    /* A client gone while its connection was parked is only noticed if a later write
     * fails: a whole response that fits the socket buffer still counts as completed. */
    assert_true(st.completed >= (uint64_t)ok);
    assert_true(st.faults > 0);
    assert_true(st.aborted > 0); /* the 60 ms clients */
    assert_int_equal(st.in_flight, 0);
    stop(&f);
}

/* ---- shutdown ---- */

typedef struct {
    int port;
    reply r;
} client_job;

static void *client_main(void *arg) {
    client_job *job = arg;
    post(job->port, "/v1/completions", "{\"prompt\":\"s\",\"max_tokens\":60,\"stream\":true}",
         &job->r);
    return NULL;
}

static void test_serve_shutdown_finishes_inflight_streams(void **state) {
    (void)state;
    fixture f;
    start(&f, 0, 50, LB_FAULT_NONE, 0, 1); /* 60 tokens: 3 s if left alone */
    client_job job = {.port = f.port};
    pthread_t th;
    pthread_create(&th, NULL, client_main, &job);
    nanosleep(&(struct timespec){.tv_nsec = 300000000}, NULL);
    int64_t t0 = lb_clock_now_ns();
    lb_server_shutdown(f.srv, 5.0);
    double shutdown_ms = (double)(lb_clock_now_ns() - t0) / 1e6;
    pthread_join(th, NULL);
    assert_true(shutdown_ms < 1000.0);
    free(check_stream(&job.r, 60, false, false));
    reply_free(&job.r);
    lb_server_stats st;
    lb_server_get_stats(f.srv, &st);
    assert_int_equal(st.completed, 1);
    assert_int_equal(st.tokens, 60);
    /* Nothing listens any more. */
    reply r;
    post(f.port, "/v1/completions", WHOLE8, &r);
    assert_int_equal(r.rc, CURLE_COULDNT_CONNECT);
    reply_free(&r);
    stop(&f);
}

/* A request that was all sent before the shutdown began is answered, on a connection that
 * has just been accepted or on one kept alive after an earlier request: its head may still
 * wait for the acceptor's look, or be with libmicrohttpd and not yet read. Both were closed
 * unanswered. */
static void test_serve_shutdown_answers_requests_sent_before_it(void **state) {
    (void)state;
    for (int round = 0; round < 100; round++) {
        fixture f;
        start(&f, 0, 0, LB_FAULT_NONE, 0, 1);
        int fd = connect_to(f.port);
        char buf[4096];
        if (round % 2 == 1) { /* a first request, so that the second finds the connection kept */
            send_post(fd, "{\"prompt\":\"x\",\"max_tokens\":2}");
            ssize_t got = read(fd, buf, sizeof buf - 1);
            assert_true(got > 0);
            buf[got] = '\0';
            assert_non_null(strstr(buf, "HTTP/1.1 200"));
        }
        nanosleep(&(struct timespec){.tv_nsec = 10000000L}, NULL); /* accepted or watched */
        send_post(fd, "{\"prompt\":\"y\",\"max_tokens\":2}");
        lb_server_shutdown(f.srv, 5.0);
        size_t n = 0;
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        while (n + 1 < sizeof buf && poll(&pf, 1, 2000) > 0) {
            ssize_t got = read(fd, buf + n, sizeof buf - 1 - n);
            if (got <= 0) break;
            n += (size_t)got;
        }
        buf[n] = '\0';
        if (strstr(buf, "HTTP/1.1 200") == NULL || strstr(buf, "\"completion_tokens\":2") == NULL)
            fail_msg("round %d: the request sent before the shutdown got '%s'", round, buf);
        close(fd);
        stop(&f);
    }
}

/* The answer to one raw request on a connection of its own (Connection: close), into buf. */
static void raw_request(int port, const char *req, char *buf, size_t cap) {
    int fd = connect_to(port);
    assert_int_equal(write(fd, req, strlen(req)), (ssize_t)strlen(req));
    size_t n = 0;
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    while (n + 1 < cap && poll(&pf, 1, 5000) > 0) {
        ssize_t got = read(fd, buf + n, cap - 1 - n);
        if (got <= 0) break;
        n += (size_t)got;
    }
    buf[n] = '\0';
    close(fd);
}

/* A request target in absolute form ("POST http://HOST:PORT/v1/completions HTTP/1.1"), which
 * RFC 9112 section 3.2.2 says a server must accept, got 404: it is served by its path (of
 * the http scheme only). */
static void test_serve_absolute_form_target_is_served_by_its_path(void **state) {
    (void)state;
    fixture f;
    start(&f, 0, 0, LB_FAULT_NONE, 0, 1);
    char req[512], buf[4096];
    const char body[] = "{\"prompt\":\"x\",\"max_tokens\":3}";
    snprintf(req, sizeof req,
             "POST http://127.0.0.1:%d/v1/completions HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
             "Connection: close\r\nContent-Length: %zu\r\n\r\n%s",
             f.port, f.port, strlen(body), body);
    raw_request(f.port, req, buf, sizeof buf);
    if (strncmp(buf, "HTTP/1.1 200", 12) != 0 || strstr(buf, "\"completion_tokens\":3") == NULL)
        fail_msg("absolute-form POST: '%s'", buf);
    raw_request(f.port,
                "GET HTTP://example.com/health HTTP/1.1\r\nHost: example.com\r\n"
                "Connection: close\r\n\r\n",
                buf, sizeof buf);
    if (strncmp(buf, "HTTP/1.1 200", 12) != 0) fail_msg("absolute-form GET: '%s'", buf);
    /* no path: "/", which is no endpoint; another scheme: not this server's */
    const char *const not_found[] = {"GET http://example.com HTTP/1.1\r\nHost: example.com\r\n"
                                     "Connection: close\r\n\r\n",
                                     "GET https://example.com/health HTTP/1.1\r\nHost: "
                                     "example.com\r\nConnection: close\r\n\r\n"};
    for (size_t i = 0; i < 2; i++) {
        raw_request(f.port, not_found[i], buf, sizeof buf);
        if (strncmp(buf, "HTTP/1.1 404", 12) != 0) fail_msg("'%s' got '%s'", not_found[i], buf);
    }
    stop(&f);
}

static const char *choice_text(json_t *j, size_t i) {
    return json_string_value(
        json_object_get(json_array_get(json_object_get(j, "choices"), i), "text"));
}

static const char *choice_finish(json_t *j, size_t i) {
    return json_string_value(
        json_object_get(json_array_get(json_object_get(j, "choices"), i), "finish_reason"));
}

/* `stop`: the text ends before the first stop sequence, also one that spans two tokens,
 * finish_reason is "stop", streamed or whole; the tokens up to the stopping one are
 * counted. */
static void test_serve_stop_sequences_end_the_answer(void **state) {
    (void)state;
    fixture f;
    start(&f, 0, 0, LB_FAULT_NONE, 0, 1);
    reply r;
    post(f.port, "/v1/completions", "{\"prompt\":\"p q\",\"max_tokens\":6}", &r);
    json_t *j = parse(r.body);
    char full[512];
    snprintf(full, sizeof full, "%s", choice_text(j, 0));
    json_decref(j);
    reply_free(&r);
    /* A stop sequence across tokens 2 and 3: the last 2 bytes of token 2 ("N ") and the
     * first 3 of token 3. */
    const char *t3 = full;
    for (int k = 0; k < 2; k++)
        t3 = strchr(t3, ' ') + 1;
    char seq[8];
    snprintf(seq, sizeof seq, "%.5s", t3 - 2);
    size_t want_len = (size_t)(t3 - 2 - full);
    char body[256];
    snprintf(body, sizeof body, "{\"prompt\":\"p q\",\"max_tokens\":6,\"stop\":[\"zzz\",\"%s\"]}",
             seq);
    post(f.port, "/v1/completions", body, &r);
    assert_int_equal(r.status, 200);
    j = parse(r.body);
    assert_int_equal(strlen(choice_text(j, 0)), want_len);
    assert_memory_equal(choice_text(j, 0), full, want_len);
    assert_string_equal(choice_finish(j, 0), "stop");
    assert_int_equal(get_int(j, "usage", "completion_tokens"), 3);
    json_decref(j);
    reply_free(&r);
    snprintf(body, sizeof body,
             "{\"prompt\":\"p q\",\"max_tokens\":6,\"stop\":\"%s\",\"stream\":true,"
             "\"stream_options\":{\"include_usage\":true}}",
             seq);
    post(f.port, "/v1/completions", body, &r);
    assert_int_equal(r.n_events, 3 + 2); /* three token events, usage, [DONE] */
    char streamed[512] = "";
    for (int i = 0; i < 3; i++) {
        j = parse(r.events[i]);
        strcat(streamed, choice_text(j, 0));
        if (i == 2) assert_string_equal(choice_finish(j, 0), "stop");
        json_decref(j);
    }
    assert_int_equal(strlen(streamed), want_len);
    assert_memory_equal(streamed, full, want_len);
    j = parse(r.events[3]);
    assert_int_equal(get_int(j, "usage", "completion_tokens"), 3);
    json_decref(j);
    reply_free(&r);
    post(f.port, "/v1/completions", "{\"prompt\":\"p\",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}",
         &r);
    assert_int_equal(r.status, 400);
    assert_non_null(strstr(r.body, "'stop' holds more than 4 sequences"));
    reply_free(&r);
    stop(&f);
}

/* A source that ends after EARLY_END tokens whatever max_tokens says, as the engine does at
 * an end-of-sequence token: the synthetic one, asked for fewer. */
#define EARLY_END 3
static lb_status early_start(void *ctx, const lb_token_request *req, void *stream,
                             int64_t *prompt_tokens, lb_err *err) {
    const lb_token_source *inner = ctx;
    lb_token_request fewer = *req;
    if (fewer.max_tokens > EARLY_END) fewer.max_tokens = EARLY_END;
    return inner->start(inner->ctx, &fewer, stream, prompt_tokens, err);
}

/* A stream that ends before max_tokens says why: its last chunk has finish_reason "stop"
 * (it had none: every chunk said null, so a client could not tell an end of sequence
 * from a cut), and the usage counts the tokens sent; completions and chat alike. */
static void test_serve_stream_ended_by_the_source_finishes_with_stop(void **state) {
    (void)state;
    fixture f;
    lb_synthetic_params sp = lb_synthetic_default_params();
    lb_err err = {{0}};
    assert_int_equal(lb_synthetic_init(&sp, &f.src, &err), LB_OK);
    lb_token_source early = {.name = "early",
                             .ctx = &f.src,
                             .stream_bytes = f.src.stream_bytes,
                             .start = early_start,
                             .next = holding_next,
                             .done = holding_done};
    lb_server_params p = lb_server_default_params();
    p.port = 0;
    p.threads = 2;
    if (lb_server_start(&p, &early, &f.srv, &err) != LB_OK)
        fail_msg("server did not start: %s", err.msg);
    static const char *const paths[] = {"/v1/completions", "/v1/chat/completions"};
    static const char *const bodies[] = {
        "{\"prompt\":\"p\",\"max_tokens\":8,\"stream\":true,"
        "\"stream_options\":{\"include_usage\":true}}",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"p\"}],\"max_tokens\":8,\"stream\":true,"
        "\"stream_options\":{\"include_usage\":true}}"};
    for (int k = 0; k < 2; k++) {
        reply r;
        post(lb_server_port(f.srv), paths[k], bodies[k], &r);
        assert_int_equal(r.status, 200);
        assert_true(r.n_events >= EARLY_END + 2);
        assert_string_equal(r.events[r.n_events - 1], "[DONE]");
        int last = r.n_events - 3; /* the last event with a choice: before usage and [DONE] */
        for (int i = 0; i <= last; i++) {
            json_t *j = parse(r.events[i]);
            json_t *fr =
                json_object_get(json_array_get(json_object_get(j, "choices"), 0), "finish_reason");
            if (i == last && !json_is_string(fr)) fail_msg("no finish_reason in %s", r.events[i]);
            if (i == last)
                assert_string_equal(json_string_value(fr), "stop");
            else
                assert_true(json_is_null(fr));
            json_decref(j);
        }
        json_t *u = parse(r.events[r.n_events - 2]);
        assert_int_equal(json_array_size(json_object_get(u, "choices")), 0);
        assert_int_equal(get_int(u, "usage", "completion_tokens"), EARLY_END);
        json_decref(u);
        reply_free(&r);
    }
    stop(&f);
}

/* A batch of prompts gets one choice a prompt, each as long as asked and as a request of
 * its own prompt would get; streamed batches are refused by name. */
static void test_serve_prompt_batch_gets_one_choice_a_prompt(void **state) {
    (void)state;
    fixture f;
    start(&f, 0, 0, LB_FAULT_NONE, 0, 1);
    reply r;
    post(f.port, "/v1/completions", "{\"prompt\":\"c d e\",\"max_tokens\":3}", &r);
    json_t *j = parse(r.body);
    char alone[256];
    snprintf(alone, sizeof alone, "%s", choice_text(j, 0));
    json_decref(j);
    reply_free(&r);
    post(f.port, "/v1/completions", "{\"prompt\":[\"a b\",\"c d e\",[5,6]],\"max_tokens\":3}", &r);
    assert_int_equal(r.status, 200);
    j = parse(r.body);
    json_t *choices = json_object_get(j, "choices");
    assert_int_equal(json_array_size(choices), 3);
    for (size_t i = 0; i < 3; i++) {
        json_t *c = json_array_get(choices, i);
        assert_int_equal(json_integer_value(json_object_get(c, "index")), (json_int_t)i);
        assert_int_equal(count_words(choice_text(j, i)), 3);
        assert_string_equal(choice_finish(j, i), "length");
    }
    assert_string_equal(choice_text(j, 1), alone);
    assert_int_equal(get_int(j, "usage", "prompt_tokens"), 2 + 3 + 2);
    assert_int_equal(get_int(j, "usage", "completion_tokens"), 9);
    json_decref(j);
    reply_free(&r);
    post(f.port, "/v1/completions", "{\"prompt\":[\"a\",\"b\"],\"stream\":true}", &r);
    assert_int_equal(r.status, 400);
    assert_non_null(strstr(r.body, "a batch of prompts is answered whole only"));
    reply_free(&r);
    stop(&f);
}

/* Fields the server cannot honour are refused with a 400 naming them, never ignored. */
static void test_serve_refuses_logprobs_echo_and_unknown_fields(void **state) {
    (void)state;
    fixture f;
    start(&f, 0, 0, LB_FAULT_NONE, 0, 1);
    static const struct {
        const char *path, *body, *needle;
    } cases[] = {
        {"/v1/completions", "{\"prompt\":\"a\",\"logprobs\":2}", "'logprobs' is not supported"},
        {"/v1/chat/completions",
         "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],"
         "\"logprobs\":true}",
         "'logprobs' is not supported"},
        {"/v1/completions", "{\"prompt\":\"a\",\"echo\":true}", "'echo' is not supported"},
        {"/v1/completions", "{\"prompt\":\"a\",\"best_of\":3}", "'best_of'"},
        {"/v1/completions", "{\"prompt\":\"a\",\"suffix\":\"z\"}", "'suffix'"},
        {"/v1/completions", "{\"prompt\":\"a\",\"tools\":[]}", "unknown field 'tools'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        reply r;
        post(f.port, cases[i].path, cases[i].body, &r);
        if (r.status != 400 || strstr(r.body, cases[i].needle) == NULL)
            fail_msg("%s: %ld %s", cases[i].body, r.status, r.body);
        reply_free(&r);
    }
    /* What does apply is accepted: false logprobs, echo false, sampling fields. */
    reply r;
    post(f.port, "/v1/completions",
         "{\"prompt\":\"a\",\"logprobs\":null,\"echo\":false,\"temperature\":0.7,\"seed\":3,"
         "\"ignore_eos\":true,\"max_tokens\":2}",
         &r);
    assert_int_equal(r.status, 200);
    reply_free(&r);
    stop(&f);
}

/* A field refused for its value names the value it got: a number or true/false as sent,
 * anything else by its type. max_completion_tokens is refused under its own name. */
static void test_serve_refusals_name_the_value_given(void **state) {
    (void)state;
    fixture f;
    start(&f, 0, 0, LB_FAULT_NONE, 0, 1);
    static const struct {
        const char *path, *body, *want;
    } cases[] = {
        {"/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":0}",
         "'max_tokens' must be an integer >= 1, got 0"},
        {"/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":\"9\"}",
         "'max_tokens' must be an integer >= 1, got a string"},
        {"/v1/chat/completions",
         "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"max_completion_tokens\":-3}",
         "'max_completion_tokens' must be an integer >= 1, got -3"},
        /* a chat message's role is one a chat template knows, as OpenAI's and vLLM's */
        {"/v1/chat/completions", "{\"messages\":[{\"content\":\"a\"}]}",
         "'messages'[0] has no 'role': the accepted roles are 'system', 'user' and 'assistant'"},
        {"/v1/chat/completions",
         "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"tool\",\"content\":"
         "\"b\"}]}",
         "'messages'[1] has the role 'tool': the accepted roles are 'system', 'user' and "
         "'assistant'"},
        {"/v1/chat/completions",
         "{\"messages\":[{\"role\":\"system\",\"content\":\"a\"},{\"role\":\"user\"},"
         "{\"role\":\"banana\",\"content\":\"b\"}]}",
         "'messages'[2] has the role 'banana': the accepted roles are 'system', 'user' and "
         "'assistant'"},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":5,\"content\":\"a\"}]}",
         "'messages'[0] has a 'role' that is an integer: the accepted roles are 'system', "
         "'user' and 'assistant'"},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":null,\"content\":\"a\"}]}",
         "'messages'[0] has no 'role': the accepted roles are 'system', 'user' and 'assistant'"},
        {"/v1/completions", "{\"prompt\":\"a\",\"n\":2}", "only 'n' = 1 is supported, got 2"},
        /* a number with a fraction is not the integer it equals: said as sent */
        {"/v1/completions", "{\"prompt\":\"a\",\"n\":1.0}", "only 'n' = 1 is supported, got 1.0"},
        {"/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":16.0}",
         "'max_tokens' must be an integer >= 1, got 16.0"},
        {"/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":-2.0}",
         "'max_tokens' must be an integer >= 1, got -2.0"},
        {"/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":1e20}",
         "'max_tokens' must be an integer >= 1, got 1e+20"},
        {"/v1/completions", "{\"prompt\":\"a\",\"best_of\":3}",
         "only 'best_of' = 1 is supported, got 3"},
        {"/v1/completions", "{\"prompt\":\"a\",\"stream\":\"yes\"}",
         "'stream' must be true or false, got a string"},
        {"/v1/completions", "{\"prompt\":\"a\",\"stream_options\":[]}",
         "'stream_options' must be an object, got an array"},
        {"/v1/completions",
         "{\"prompt\":\"a\",\"stream\":true,\"stream_options\":{\"include_usage\":\"true\"}}",
         "'stream_options.include_usage' must be true or false, got a string"},
        {"/v1/completions",
         "{\"prompt\":\"a\",\"stream\":true,\"stream_options\":{\"include_usage\":1}}",
         "'stream_options.include_usage' must be true or false, got 1"},
        {"/v1/completions", "{\"prompt\":\"a\",\"model\":5}", "'model' must be a string, got 5"},
        {"/v1/completions", "{\"prompt\":\"a\",\"stop\":false}",
         "'stop' must be a string or an array of strings, got false"},
        {"/v1/completions", "{\"prompt\":\"a\",\"stop\":[\"x\",7]}",
         "every 'stop' sequence must be a string of 1 to 32 bytes, got 7"},
        {"/v1/completions", "{\"prompt\":\"a\",\"stop\":\"\"}",
         "every 'stop' sequence must be a string of 1 to 32 bytes, got 0 bytes"},
        {"/v1/completions", "{\"prompt\":\"a\",\"stop\":\"123456789012345678901234567890123\"}",
         "every 'stop' sequence must be a string of 1 to 32 bytes, got 33 bytes"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        reply r;
        post(f.port, cases[i].path, cases[i].body, &r);
        json_t *j = parse(r.body);
        const char *msg =
            json_string_value(json_object_get(json_object_get(j, "error"), "message"));
        if (r.status != 400 || msg == NULL || strcmp(msg, cases[i].want) != 0)
            fail_msg("%s: %ld %s", cases[i].body, r.status, r.body);
        json_decref(j);
        reply_free(&r);
    }
    stop(&f);
}

/* An error body that quotes the request stays JSON a strict client reads: the raw bytes
 * 0xff 0xfe of a path are '?', and an unknown field's name is cut between characters. */
static void test_serve_error_bodies_are_utf8_json(void **state) {
    (void)state;
    fixture f;
    start(&f, 0, 0, LB_FAULT_NONE, 0, 1);
    reply r;
    http(f.port, "GET", "/v2/caf\xff\xfe", NULL, &r, 5000);
    assert_int_equal(r.status, 404);
    json_t *j = parse(r.body);
    const char *msg = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
    if (msg == NULL || strstr(msg, "GET /v2/caf?? (served:") == NULL)
        fail_msg("404 message: %s", r.body);
    json_decref(j);
    reply_free(&r);

    /* 199 bytes of 'x' and an e-acute across the 200-byte cut */
    char name[206], body[300];
    memset(name, 'x', 199);
    memcpy(name + 199, "\xc3\xa9zz", 5);
    snprintf(body, sizeof body, "{\"prompt\":\"a\",\"%s\":1}", name);
    post(f.port, "/v1/completions", body, &r);
    assert_int_equal(r.status, 400);
    j = parse(r.body);
    msg = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
    char want[240];
    snprintf(want, sizeof want, "unknown field '%.199s': ", name);
    if (msg == NULL || strncmp(msg, want, strlen(want)) != 0) fail_msg("400 message: %s", r.body);
    json_decref(j);
    reply_free(&r);
    stop(&f);
}

int main(void) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_serve_completion_body_has_text_and_usage),
        cmocka_unit_test(test_serve_chat_body_has_message_and_usage),
        cmocka_unit_test(test_serve_max_tokens_defaults_to_16_and_more_than_the_limit_is_refused),
        cmocka_unit_test(test_serve_absolute_form_target_is_served_by_its_path),
        cmocka_unit_test(test_serve_prompt_arrays_count_every_part),
        cmocka_unit_test(test_serve_prompt_ids_must_be_token_ids),
        cmocka_unit_test(test_serve_stop_sequences_end_the_answer),
        cmocka_unit_test(test_serve_stream_ended_by_the_source_finishes_with_stop),
        cmocka_unit_test(test_serve_prompt_batch_gets_one_choice_a_prompt),
        cmocka_unit_test(test_serve_refuses_logprobs_echo_and_unknown_fields),
        cmocka_unit_test(test_serve_refusals_name_the_value_given),
        cmocka_unit_test(test_serve_error_bodies_are_utf8_json),
        cmocka_unit_test(test_serve_large_prompt_counts_every_word),
        cmocka_unit_test(test_serve_stream_sends_one_chunk_per_token_then_usage_then_done),
        cmocka_unit_test(test_serve_chat_stream_without_usage_ends_with_done),
        cmocka_unit_test(test_serve_stream_timing_follows_ttft_and_tpot),
        cmocka_unit_test(test_serve_delays_do_not_block_threads),
        cmocka_unit_test(test_serve_rejects_malformed_requests_with_openai_errors),
        cmocka_unit_test(test_serve_lists_models_and_reports_health),
        cmocka_unit_test(test_serve_answers_gets_that_carry_a_body),
        cmocka_unit_test(test_serve_model_id_that_is_not_utf8_is_served_as_json),
        cmocka_unit_test(test_serve_keeps_connections_alive),
        cmocka_unit_test(test_serve_answers_connections_that_come_together_past_its_limit),
        cmocka_unit_test(test_serve_answers_128_requests_that_arrive_together),
        cmocka_unit_test(test_serve_tokens_count_only_what_was_sent),
        cmocka_unit_test(test_serve_echoes_the_longest_model_name),
        cmocka_unit_test(test_serve_fault_drop_cuts_the_connection),
        cmocka_unit_test(test_serve_fault_stall_holds_the_connection_until_shutdown),
        cmocka_unit_test(test_serve_fault_bad_json_sends_unparseable_data),
        cmocka_unit_test(test_serve_fault_500_answers_with_an_error_body),
        cmocka_unit_test(test_serve_fault_truncate_ends_cleanly_without_usage_or_done),
        cmocka_unit_test(test_serve_fault_rate_picks_a_repeatable_fraction),
        cmocka_unit_test(test_serve_survives_clients_leaving_midstream),
        cmocka_unit_test(test_serve_shutdown_finishes_inflight_streams),
        cmocka_unit_test(test_serve_shutdown_answers_requests_sent_before_it),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return failed;
}
