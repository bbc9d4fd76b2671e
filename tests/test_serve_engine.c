/* test_serve_engine.c: the server over the built-in engine's token source
 * (serve/engine_source.h) with the CPU engine, through real HTTP on 127.0.0.1: refused
 * requests, id prompts, chat roles, end of sequence, special and long tokens, the drain, the
 * request's sampling fields (checked, used, seeded per request), the advice of a refusal, a
 * random preset's special ids, and waiting streams woken rather than polled. */
#include <curl/curl.h>
#include <jansson.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "cli/commands.h"
#include "core/clock.h"
#include "core/signals.h"
#include "engine/engine.h"
#include "hf_fixture.h"
#include "model/config.h"
#include "model/hf_tokenizer.h"
#include "model/model.h"
#include "serve/engine_source.h"
#include "serve/server.h"
#include "test_util.h"

/* POSTs body to path; returns the status, out gets the response body. */
static long post_to(int port, const char *path, const char *body, lb_test_body *out) {
    char url[96];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
    memset(out, 0, sizeof *out);
    CURL *c = curl_easy_init();
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, lb_test_keep);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, out);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 20000L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    assert_int_equal(curl_easy_perform(c), CURLE_OK);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(c);
    return status;
}

static long post(int port, const char *body, lb_test_body *out) {
    return post_to(port, "/v1/completions", body, out);
}

typedef struct {
    lb_engine *engine;
    lb_tokenizer *tok;
    lb_token_source src;
    lb_server *srv;
    int port;
} fixture;

/* The engine behind the server: cfg with w's weights on the CPU, tok_file's tokenizer,
 * end-of-sequence ids eos[0..n_eos), bos_id before a text prompt (-1: none). */
static void start_engine_bos(fixture *f, const lb_weights *w, int64_t kv_tokens,
                             const char *tok_file, const int32_t *eos, int n_eos, int32_t bos_id) {
    memset(f, 0, sizeof *f);
    lb_err err = {{0}};
    lb_engine_params p = lb_engine_default_params();
    p.device = LB_ENGINE_CPU;
    p.max_seqs = 4;
    p.step_tokens = 64;
    p.kv_tokens = kv_tokens;
    assert_int_equal(lb_engine_open(&f->engine, &p, w, &err), LB_OK);
    assert_int_equal(lb_hf_tokenizer_load(&f->tok, tok_file, NULL, &err), LB_OK);
    lb_engine_source_params ep = {.engine = f->engine,
                                  .tok = f->tok,
                                  .bos_id = bos_id,
                                  .eos_ids = eos,
                                  .n_eos = n_eos,
                                  .sampling = lb_sample_default()}; /* greedy */
    ep.sampling.seed = 1;
    assert_int_equal(lb_engine_source_init(&ep, &f->src, &err), LB_OK);
    lb_server_params sp = lb_server_default_params();
    sp.port = 0;
    sp.threads = 2;
    if (lb_server_start(&sp, &f->src, &f->srv, &err) != LB_OK)
        fail_msg("server did not start: %s", err.msg);
    f->port = lb_server_port(f->srv);
}

static void start_engine(fixture *f, const lb_weights *w, int64_t kv_tokens, const char *tok_file,
                         const int32_t *eos, int n_eos) {
    start_engine_bos(f, w, kv_tokens, tok_file, eos, n_eos, -1);
}

/* llama-tiny (a vocabulary of 128 ids) on the CPU behind GPT-2's tokenizer: every prompt
 * of ordinary text has ids the engine refuses once the request has been accepted. */
static void start(fixture *f) {
    lb_err err = {{0}};
    lb_weights w = {.seed = 1};
    assert_int_equal(lb_model_config_preset("llama-tiny", &w.cfg, &err), LB_OK);
    start_engine(f, &w, 0, LB_TEST_FIXTURES "/tokenizer/gpt2.tiktoken", NULL, 0);
}

/* Weights that make the engine answer every prompt with one token, over and over: every
 * embedding is all ones and the layers add nothing (zero matrices), so the final norm
 * gives all ones whatever came before, and only the head's row of that token is not zero. */
typedef struct {
    int32_t token;
} one_token;

static void read_one_token(void *ctx, const lb_param_tensor *t, lb_gpu_dtype dt, void *dst) {
    assert_int_equal(dt, LB_DT_F32);
    const one_token *o = ctx;
    float *x = dst;
    bool ones = t->ndim == 1 || strcmp(t->name, "wte") == 0;
    for (int64_t i = 0; i < t->numel; i++)
        x[i] = ones ? 1.0f : 0.0f;
    if (strcmp(t->name, "lm_head") == 0)
        for (int64_t c = 0; c < t->shape[1]; c++)
            x[o->token * t->shape[1] + c] = 1.0f;
}

/* llama-tiny's shape, scaled by `scale` (wider, deeper, a longer context), with GPT-2's
 * vocabulary, saying `token` after every prompt. */
static lb_weights one_token_weights(one_token *o, int scale) {
    lb_err err = {{0}};
    lb_weights w = {.ctx = o, .read = read_one_token};
    assert_int_equal(lb_model_config_preset("llama-tiny", &w.cfg, &err), LB_OK);
    w.cfg.vocab_size = 50257;
    w.cfg.d_model *= scale;
    w.cfg.d_ff *= scale;
    w.cfg.n_layer *= scale;
    w.cfg.max_seq *= scale * scale * scale;
    return w;
}

static void stop(fixture *f) {
    lb_server_free(f->srv);
    lb_engine_source_free(&f->src);
    lb_tokenizer_free(f->tok);
    lb_engine_close(f->engine);
}

/* A refused request was a complete answer of 0 tokens (usage, [DONE]): a load generator
 * counted it as done. It is an error event that ends the stream. */
static void test_serve_engine_refused_request_streams_an_error(void **state) {
    (void)state;
    fixture f;
    start(&f);
    lb_test_body t;
    long status = post(f.port,
                       "{\"prompt\":\"hello world friends\",\"max_tokens\":8,\"stream\":true,"
                       "\"stream_options\":{\"include_usage\":true}}",
                       &t);
    assert_int_equal(status, 200);
    assert_non_null(t.p);
    assert_null(strstr(t.p, "[DONE]"));
    assert_null(strstr(t.p, "\"usage\""));
    const char *ev = strstr(t.p, "data: {\"error\":");
    if (ev == NULL) fail_msg("no error event in: %s", t.p);
    json_error_t je;
    json_t *j = json_loads(ev + 6, JSON_DISABLE_EOF_CHECK, &je);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(json_object_get(j, "error"), "message")),
                        "the engine refused the request");
    json_decref(j);
    free(t.p);
    stop(&f);
}

static void test_serve_engine_refused_request_whole_is_500(void **state) {
    (void)state;
    fixture f;
    start(&f);
    lb_test_body t;
    long status = post(f.port, "{\"prompt\":\"hello world friends\",\"max_tokens\":8}", &t);
    assert_int_equal(status, 500);
    assert_non_null(t.p);
    assert_non_null(strstr(t.p, "the engine refused the request"));
    assert_null(strstr(t.p, "\"usage\""));
    free(t.p);
    stop(&f);
}

/* The usage count `name` of an answer. */
static json_int_t usage_of(const json_t *j, const char *name) {
    return json_integer_value(json_object_get(json_object_get(j, "usage"), name));
}

/* A prompt of token ids reached the engine as the text "1 2 3 ", tokenized again: other
 * tokens (GPT-2's ids of digits and spaces, which llama-tiny's 128-id vocabulary refuses:
 * a 500) and other counts. The ids go to the engine as they are, one choice per id array
 * of a batch; an id outside the model's vocabulary is a 400 naming it. */
static void test_serve_engine_token_id_prompt_reaches_the_engine_as_ids(void **state) {
    (void)state;
    fixture f;
    start(&f);
    lb_test_body t;
    assert_int_equal(post(f.port, "{\"prompt\":[1,2,3],\"max_tokens\":2}", &t), 200);
    json_t *j = json_loads(t.p, 0, NULL);
    if (j == NULL) fail_msg("not JSON: %s", t.p);
    assert_int_equal(usage_of(j, "prompt_tokens"), 3);
    assert_int_equal(usage_of(j, "completion_tokens"), 2);
    json_decref(j);
    free(t.p);

    assert_int_equal(post(f.port, "{\"prompt\":[[1,2],[3]],\"max_tokens\":2}", &t), 200);
    j = json_loads(t.p, 0, NULL);
    if (j == NULL) fail_msg("not JSON: %s", t.p);
    assert_int_equal(json_array_size(json_object_get(j, "choices")), 2);
    assert_int_equal(usage_of(j, "prompt_tokens"), 3);
    assert_int_equal(usage_of(j, "completion_tokens"), 4);
    json_decref(j);
    free(t.p);

    assert_int_equal(post(f.port, "{\"prompt\":[1,128,3],\"max_tokens\":2}", &t), 400);
    if (strstr(t.p, "token id 128 (position 1 of the prompt)") == NULL)
        fail_msg("the id is not named: %s", t.p);
    free(t.p);
    assert_int_equal(post(f.port, "{\"prompt\":[[1,2],[3,200]],\"max_tokens\":2}", &t), 400);
    if (strstr(t.p, "'prompt'[1]: token id 200 (position 1 of the prompt)") == NULL)
        fail_msg("the id is not named: %s", t.p);
    free(t.p);
    stop(&f);
}

/* The choices of answer j (whole or one event) that say finish_reason `why`. */
static int finishing(const json_t *j, const char *why) {
    int n = 0;
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(j, "choices"), i, c) {
        const char *fr = json_string_value(json_object_get(c, "finish_reason"));
        n += fr != NULL && strcmp(fr, why) == 0;
    }
    return n;
}

/* An end-of-sequence token that came as the last token max_tokens allowed ended the
 * answer with finish_reason "length"; generation ended on the end of sequence: "stop", as
 * OpenAI and vLLM say, whole and streamed, the token counted. */
static void test_serve_engine_eos_as_the_last_allowed_token_finishes_with_stop(void **state) {
    (void)state;
    one_token o = {50256}; /* GPT-2's <|endoftext|> */
    lb_weights w = one_token_weights(&o, 1);
    fixture f;
    const int32_t eos = 50256;
    start_engine(&f, &w, 0, LB_TEST_FIXTURES "/tokenizer/gpt2.tiktoken", &eos, 1);
    static const char *const whole[] = {"{\"prompt\":\"hello\",\"max_tokens\":1}",
                                        "{\"prompt\":\"hello\",\"max_tokens\":3}"};
    for (int k = 0; k < 2; k++) {
        lb_test_body t;
        assert_int_equal(post(f.port, whole[k], &t), 200);
        json_t *j = json_loads(t.p, 0, NULL);
        if (j == NULL) fail_msg("not JSON: %s", t.p);
        if (finishing(j, "stop") != 1) fail_msg("not finished by \"stop\": %s", t.p);
        assert_string_equal(json_string_value(json_object_get(
                                json_array_get(json_object_get(j, "choices"), 0), "text")),
                            "");
        assert_int_equal(usage_of(j, "completion_tokens"), 1);
        json_decref(j);
        free(t.p);
    }
    static const char *const streamed[] = {"{\"prompt\":\"hello\",\"max_tokens\":1,\"stream\":true,"
                                           "\"stream_options\":{\"include_usage\":true}}",
                                           "{\"prompt\":\"hello\",\"max_tokens\":3,\"stream\":true,"
                                           "\"stream_options\":{\"include_usage\":true}}"};
    for (int k = 0; k < 2; k++) {
        lb_test_body t;
        assert_int_equal(post(f.port, streamed[k], &t), 200);
        int stops = 0, lengths = 0;
        json_int_t completion = -1;
        for (const char *ev = strstr(t.p, "data: {"); ev != NULL; ev = strstr(ev + 1, "data: {")) {
            json_t *e = json_loads(ev + 6, JSON_DISABLE_EOF_CHECK, NULL);
            assert_non_null(e);
            stops += finishing(e, "stop");
            lengths += finishing(e, "length");
            if (json_object_get(e, "usage") != NULL) completion = usage_of(e, "completion_tokens");
            json_decref(e);
        }
        if (stops != 1 || lengths != 0) fail_msg("not finished by \"stop\": %s", t.p);
        assert_int_equal(completion, 1);
        assert_non_null(strstr(t.p, "data: [DONE]"));
        free(t.p);
    }
    stop(&f);
}

/* A special token the model generates (here GPT-2's <|endoftext|> where it is not the
 * end of the sequence) counts as a completion token and writes no text, as vLLM's
 * skip_special_tokens does by default. */
static void test_serve_engine_special_tokens_count_but_write_no_text(void **state) {
    (void)state;
    one_token o = {50256};
    lb_weights w = one_token_weights(&o, 1);
    fixture f;
    start_engine(&f, &w, 0, LB_TEST_FIXTURES "/tokenizer/gpt2.tiktoken", NULL, 0);
    lb_test_body t;
    assert_int_equal(post(f.port, "{\"prompt\":\"hello\",\"max_tokens\":3}", &t), 200);
    json_t *j = json_loads(t.p, 0, NULL);
    if (j == NULL) fail_msg("not JSON: %s", t.p);
    assert_string_equal(json_string_value(json_object_get(
                            json_array_get(json_object_get(j, "choices"), 0), "text")),
                        "");
    assert_int_equal(usage_of(j, "completion_tokens"), 3);
    assert_int_equal(finishing(j, "length"), 1);
    json_decref(j);
    free(t.p);
    stop(&f);
}

/* The text of token id under f's tokenizer (caller frees). */
static char *token_text(const fixture *f, uint32_t id, size_t *len) {
    char *text = NULL;
    lb_err err;
    assert_int_equal(lb_tokenizer_decode(f->tok, &id, 1, &text, len, &err), LB_OK);
    return text;
}

/* GPT-2's id 35496 is 128 bytes of text, twice what one pull of the token source held:
 * the rest came as a token of its own at the end (completion_tokens max_tokens + 1, an
 * event after the one saying "length"), and a run of such tokens lost text. */
static void test_serve_engine_long_token_text_is_whole_and_counted_once(void **state) {
    (void)state;
    one_token o = {35496};
    lb_weights w = one_token_weights(&o, 1);
    fixture f;
    start_engine(&f, &w, 0, LB_TEST_FIXTURES "/tokenizer/gpt2.tiktoken", NULL, 0);
    size_t len = 0;
    char *one = token_text(&f, 35496, &len);
    assert_int_equal(len, 128);
    char want[8 * 128 + 1];
    for (int i = 0; i < 8; i++)
        memcpy(want + (size_t)i * len, one, len);
    want[8 * len] = '\0';
    free(one);

    lb_test_body t;
    assert_int_equal(post(f.port, "{\"prompt\":\"hello\",\"max_tokens\":8}", &t), 200);
    json_t *j = json_loads(t.p, 0, NULL);
    assert_non_null(j);
    json_t *choice = json_array_get(json_object_get(j, "choices"), 0);
    assert_string_equal(json_string_value(json_object_get(choice, "text")), want);
    assert_string_equal(json_string_value(json_object_get(choice, "finish_reason")), "length");
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(j, "usage"), "completion_tokens")), 8);
    json_decref(j);
    free(t.p);

    assert_int_equal(post(f.port,
                          "{\"prompt\":\"hello\",\"max_tokens\":8,\"stream\":true,"
                          "\"stream_options\":{\"include_usage\":true}}",
                          &t),
                     200);
    size_t got_len = 0, events = 0;
    char got[sizeof want];
    for (const char *ev = strstr(t.p, "data: {"); ev != NULL; ev = strstr(ev + 1, "data: {")) {
        json_t *e = json_loads(ev + 6, JSON_DISABLE_EOF_CHECK, NULL);
        assert_non_null(e);
        json_t *c = json_array_get(json_object_get(e, "choices"), 0);
        if (c != NULL) {
            const char *x = json_string_value(json_object_get(c, "text"));
            assert_true(got_len + strlen(x) < sizeof got);
            memcpy(got + got_len, x, strlen(x));
            got_len += strlen(x);
            events++;
        } else {
            assert_int_equal(json_integer_value(
                                 json_object_get(json_object_get(e, "usage"), "completion_tokens")),
                             8);
        }
        json_decref(e);
    }
    got[got_len] = '\0';
    assert_string_equal(got, want);
    assert_int_equal(events, 8);
    free(t.p);
    stop(&f);
}

/* The text and completion tokens of answer t (whole, one choice); frees t. */
static char *answer_text(lb_test_body *t, json_int_t *completion) {
    json_t *j = json_loads(t->p, 0, NULL);
    if (j == NULL) fail_msg("not JSON: %s", t->p);
    const char *x = json_string_value(
        json_object_get(json_array_get(json_object_get(j, "choices"), 0), "text"));
    assert_non_null(x);
    char *out = strdup(x);
    if (completion) *completion = usage_of(j, "completion_tokens");
    json_decref(j);
    free(t->p);
    return out;
}

/* llama-tiny's answer to the prompt of ids 1 2 3 with the given sampling fields. */
static char *sampled(const fixture *f, const char *fields) {
    char body[256];
    snprintf(body, sizeof body, "{\"prompt\":[1,2,3],\"max_tokens\":24%s}", fields);
    lb_test_body t;
    assert_int_equal(post(f->port, body, &t), 200);
    return answer_text(&t, NULL);
}

/* Every request was sampled with the server's own options (greedy here) and seed: a
 * request's temperature and seed changed nothing, and identical prompts without a seed
 * got identical text. Now the request's fields are used; without a seed, request k of
 * the server draws from its seed + k, so a fresh server repeats the same run. */
static void test_serve_engine_samples_with_the_request_fields(void **state) {
    (void)state;
    char *first[2];
    for (int run = 0; run < 2; run++) {
        fixture f;
        start(&f);
        char *a = sampled(&f, ",\"temperature\":1.0,\"seed\":11");
        char *b = sampled(&f, ",\"temperature\":1.0,\"seed\":12");
        char *a2 = sampled(&f, ",\"temperature\":1,\"seed\":11,\"top_k\":-1,\"top_p\":1");
        if (strcmp(a, b) == 0) fail_msg("seeds 11 and 12 gave the same text: %s", a);
        assert_string_equal(a, a2);
        /* top_k 1 is greedy whatever the temperature and seed */
        char *g = sampled(&f, "");
        char *k1 = sampled(&f, ",\"temperature\":1.5,\"top_k\":1,\"seed\":5");
        assert_string_equal(g, k1);
        if (strcmp(a, g) == 0 && strcmp(b, g) == 0) fail_msg("temperature 1 decoded greedily");
        /* no seed: each request its own, the same for the same order on a fresh server */
        char *n1 = sampled(&f, ",\"temperature\":1.0,\"seed\":null");
        char *n2 = sampled(&f, ",\"temperature\":1.0");
        if (strcmp(n1, n2) == 0) fail_msg("two requests without a seed gave the same text: %s", n1);
        if (run == 0) {
            first[0] = n1;
            first[1] = n2;
        } else {
            assert_string_equal(first[0], n1);
            assert_string_equal(first[1], n2);
            free(first[0]);
            free(first[1]);
            free(n1);
            free(n2);
        }
        free(a);
        free(b);
        free(a2);
        free(g);
        free(k1);
        stop(&f);
    }
}

/* A request's ignore_eos (what `llmbench load --ignore-eos` sends) was ignored unless the
 * server had --ignore-eos: the answer stopped at the end-of-sequence token. */
static void test_serve_engine_request_ignore_eos_generates_max_tokens(void **state) {
    (void)state;
    one_token o = {50256};
    lb_weights w = one_token_weights(&o, 1);
    fixture f;
    const int32_t eos = 50256;
    start_engine(&f, &w, 0, LB_TEST_FIXTURES "/tokenizer/gpt2.tiktoken", &eos, 1);
    lb_test_body t;
    json_int_t n = 0;
    assert_int_equal(post(f.port, "{\"prompt\":\"hello\",\"max_tokens\":5}", &t), 200);
    free(answer_text(&t, &n));
    assert_int_equal(n, 1);
    assert_int_equal(
        post(f.port, "{\"prompt\":\"hello\",\"max_tokens\":5,\"ignore_eos\":true}", &t), 200);
    free(answer_text(&t, &n));
    assert_int_equal(n, 5);
    assert_int_equal(
        post(f.port, "{\"prompt\":\"hello\",\"max_tokens\":5,\"ignore_eos\":false,\"seed\":3}", &t),
        200);
    free(answer_text(&t, &n));
    assert_int_equal(n, 1);
    stop(&f);
}

/* The wake-ups a request got, and those after its done(). */
typedef struct {
    atomic_int woken, after_done;
    atomic_bool done;
} wake_count;

static void count_wake(void *ctx) {
    wake_count *w = ctx;
    atomic_fetch_add(&w->woken, 1);
    if (atomic_load(&w->done)) atomic_fetch_add(&w->after_done, 1);
}

/* A request the server ends while the engine has steps of it left (a stop string, a client
 * gone): done() came while the engine thread stepped, and the step's token woke the request
 * the server had freed (the sanitizer build caught the use after free). After done() no
 * wake may come (token_source.h). */
static void test_serve_engine_no_wake_after_done(void **state) {
    (void)state;
    one_token o = {1000};
    lb_weights w = one_token_weights(&o, 2);
    fixture f;
    start_engine(&f, &w, 0, LB_TEST_FIXTURES "/tokenizer/gpt2.tiktoken", NULL, 0);
    for (int i = 0; i < 4; i++) {
        wake_count wc = {0};
        void *stream = calloc(1, f.src.stream_bytes);
        lb_token_request req = {.prompt = "hello",
                                .prompt_len = 5,
                                .max_tokens = 400,
                                .arrival_ns = lb_clock_now_ns(),
                                .wake = count_wake,
                                .wake_ctx = &wc};
        int64_t prompt_tokens = 0;
        lb_err err;
        assert_int_equal(f.src.start(f.src.ctx, &req, stream, &prompt_tokens, &err), LB_OK);
        char text[LB_TOKEN_TEXT_MAX_BYTES];
        size_t len = 0;
        int64_t due = 0;
        lb_token_state st;
        while ((st = f.src.next(f.src.ctx, stream, lb_clock_now_ns(), text, &len, &due)) ==
               LB_TOKEN_LATER)
            usleep(100);
        assert_int_equal(st, LB_TOKEN_READY); /* the first token; the engine steps on */
        f.src.done(f.src.ctx, stream);
        atomic_store(&wc.done, true);
        /* the step under way when done() came ends (its forward counted, then its tokens
         * sampled and handed out), and the request is cancelled before the next */
        const int64_t steps = lb_engine_get_info(f.engine)->steps;
        for (int k = 0; k < 100 && lb_engine_get_info(f.engine)->steps == steps; k++)
            usleep(10 * 1000);
        usleep(100 * 1000);
        assert_true(atomic_load(&wc.woken) >= 1);
        assert_int_equal(atomic_load(&wc.after_done), 0);
        free(stream);
    }
    stop(&f);
}

/* Sampling fields of the wrong type or out of range were accepted (and ignored): each is
 * a 400 naming the field, what it may be and the value it got. */
static void test_serve_engine_refuses_bad_sampling_fields(void **state) {
    (void)state;
    fixture f;
    start(&f);
    static const struct {
        const char *field, *want;
    } bad[] = {
        {"\"temperature\":-1", "'temperature' must be a number >= 0 (0 is greedy), got -1"},
        {"\"temperature\":-0.25", "'temperature' must be a number >= 0 (0 is greedy), got -0.25"},
        {"\"temperature\":\"hot\"",
         "'temperature' must be a number >= 0 (0 is greedy), got a string"},
        {"\"temperature\":true", "'temperature' must be a number >= 0 (0 is greedy), got true"},
        {"\"top_p\":0", "'top_p' must be a number in (0, 1] (1: no cut), got 0"},
        {"\"top_p\":1.5", "'top_p' must be a number in (0, 1] (1: no cut), got 1.5"},
        {"\"top_p\":1.0000000000000002",
         "'top_p' must be a number in (0, 1] (1: no cut), got 1.0000000000000002"},
        {"\"top_p\":[0.5]", "'top_p' must be a number in (0, 1] (1: no cut), got an array"},
        {"\"top_k\":\"x\"", "'top_k' must be an integer: -1 or 0 (no cut) or >= 1, got a string"},
        {"\"top_k\":-2", "'top_k' must be an integer: -1 or 0 (no cut) or >= 1, got -2"},
        {"\"top_k\":2.5", "'top_k' must be an integer: -1 or 0 (no cut) or >= 1, got 2.5"},
        {"\"seed\":1.5", "'seed' must be an integer (-2^63 to 2^63 - 1), got 1.5"},
        {"\"seed\":\"3\"", "'seed' must be an integer (-2^63 to 2^63 - 1), got a string"},
        {"\"seed\":{}", "'seed' must be an integer (-2^63 to 2^63 - 1), got an object"},
        {"\"ignore_eos\":1", "'ignore_eos' must be true or false, got 1"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char body[256];
        snprintf(body, sizeof body, "{\"prompt\":[1,2,3],\"max_tokens\":2,%s}", bad[i].field);
        lb_test_body t;
        const long status = post(f.port, body, &t);
        if (status != 400 || t.p == NULL || strstr(t.p, bad[i].want) == NULL)
            fail_msg("%s: %ld %s", bad[i].field, status, t.p ? t.p : "");
        free(t.p);
    }
    /* the edges of the ranges, and null, are accepted */
    static const char *const good[] = {"\"temperature\":0,\"top_p\":1,\"top_k\":0",
                                       "\"temperature\":2.5,\"top_p\":1e-9,\"top_k\":1",
                                       "\"temperature\":null,\"top_p\":null,\"top_k\":null,"
                                       "\"seed\":null,\"ignore_eos\":null",
                                       "\"seed\":-7,\"top_k\":10000000000"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        char body[256];
        snprintf(body, sizeof body, "{\"prompt\":[1,2,3],\"max_tokens\":2,%s}", good[i]);
        lb_test_body t;
        const long status = post(f.port, body, &t);
        if (status != 200) fail_msg("%s: %ld %s", good[i], status, t.p ? t.p : "");
        free(t.p);
    }
    stop(&f);
}

/* A streamed request on a thread of its own: first_bytes is set once its first event is
 * in. */
typedef struct {
    int port;
    atomic_bool first_bytes;
    lb_test_body body;
    CURLcode rc;
} streamer;

static size_t keep_and_flag(char *p, size_t size, size_t n, void *arg) {
    streamer *s = arg;
    atomic_store(&s->first_bytes, true);
    return lb_test_keep(p, size, n, &s->body);
}

static void *stream_request(void *arg) {
    streamer *s = arg;
    char url[96];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/completions", s->port);
    CURL *c = curl_easy_init();
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, keep_and_flag);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, s);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 600000L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS,
                     "{\"prompt\":\"hello\",\"max_tokens\":4000,\"stream\":true}");
    s->rc = curl_easy_perform(c);
    curl_easy_cleanup(c);
    return NULL;
}

/* Ctrl-C with a long request in flight: the server's drain asked the engine source again
 * and again (spinning) until the engine had generated every token, minutes past --drain.
 * Past the deadline that lb_engine_source_drain gives, the request fails at once. */
static void test_serve_engine_drain_ends_unfinished_requests_at_the_deadline(void **state) {
    (void)state;
    one_token o = {11};
    lb_weights w = one_token_weights(&o, 4); /* 4000 tokens: a minute or more on the CPU */
    fixture f;
    start_engine(&f, &w, 4096, LB_TEST_FIXTURES "/tokenizer/gpt2.tiktoken", NULL, 0);
    streamer s = {.port = f.port};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, stream_request, &s), 0);
    for (int64_t until = lb_clock_now_ns() + 60000000000LL;
         !atomic_load(&s.first_bytes) && lb_clock_now_ns() < until;)
        nanosleep(&(struct timespec){.tv_nsec = 10000000}, NULL);
    assert_true(atomic_load(&s.first_bytes));
    const int64_t t0 = lb_clock_now_ns();
    lb_engine_source_drain(&f.src, t0 + 100000000LL);
    lb_server_shutdown(f.srv, 30.0);
    const double took_s = (double)(lb_clock_now_ns() - t0) / 1e9;
    pthread_join(th, NULL);
    assert_int_equal(s.rc, CURLE_OK);
    if (took_s > 10.0) fail_msg("the drain took %.1f s", took_s);
    assert_non_null(strstr(s.body.p, "the server shut down before the request finished"));
    assert_null(strstr(s.body.p, "[DONE]"));
    free(s.body.p);
    stop(&f);
}

/* A request past the context was refused naming the limit only: the client could not tell
 * how many tokens it may ask for, nor that a prompt alone was too long. The 400 says what
 * would fit (llama-tiny: a context of 64 tokens). */
static void test_serve_engine_refusal_past_the_context_says_what_fits(void **state) {
    (void)state;
    fixture f;
    start(&f);
    lb_test_body t;
    assert_int_equal(post(f.port, "{\"prompt\":[1,2,3],\"max_tokens\":62}", &t), 400);
    if (strstr(t.p, "the prompt's 3 tokens and max_tokens 62 exceed the engine's limit of 64 "
                    "tokens: ask for at most 61 tokens or shorten the prompt by at least 1 "
                    "token\"") == NULL)
        fail_msg("no room named: %s", t.p);
    free(t.p);
    json_int_t n = 0;
    assert_int_equal(post(f.port, "{\"prompt\":[1,2,3],\"max_tokens\":61}", &t), 200);
    free(answer_text(&t, &n));
    assert_int_equal(n, 61);
    char body[512];
    int o = snprintf(body, sizeof body, "{\"prompt\":[1");
    for (int i = 1; i < 64; i++)
        o += snprintf(body + o, sizeof body - (size_t)o, ",%d", i % 100);
    snprintf(body + o, sizeof body - (size_t)o, "],\"max_tokens\":1}");
    assert_int_equal(post(f.port, body, &t), 400);
    if (strstr(t.p, "the prompt's 64 tokens leave no room for output within the engine's limit "
                    "of 64 tokens (prompt and max_tokens together): shorten the prompt by at "
                    "least 1 token\"") == NULL)
        fail_msg("the prompt is not named too long: %s", t.p);
    free(t.p);
    stop(&f);
}

/* The cut a 400's message advises ("shorten the prompt by at least K tokens"). */
static long advised_cut(const char *body) {
    const char *at = strstr(body, "shorten the prompt by at least ");
    if (at == NULL) fail_msg("no cut of the prompt advised: %s", body);
    return strtol(at + strlen("shorten the prompt by at least "), NULL, 10);
}

/* n_words words "w" as one text, one GPT-2 token each, into buf. */
static const char *words(char *buf, size_t cap, long n_words) {
    size_t o = 0;
    for (long i = 0; i < n_words && o + 3 < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, i ? " w" : "w");
    buf[o] = '\0';
    return buf;
}

/* The refusal of a prompt too long said "shorten the prompt to at most N tokens" with N
 * counting the bos token and the chat format's tokens, which the client does not write: a
 * client that cut its text to N tokens still did not fit. The advice is now a cut of the
 * client's own text, and a prompt cut by it fits (llama-tiny's context of 64 tokens with a
 * bos; eight times that for a chat). */
static void test_serve_engine_advised_cut_of_a_long_prompt_fits(void **state) {
    (void)state;
    one_token o = {1000};
    lb_weights w = one_token_weights(&o, 1);
    fixture f;
    start_engine_bos(&f, &w, 0, LB_TEST_FIXTURES "/tokenizer/gpt2.tiktoken", NULL, 0, 50256);
    char text[8192], body[9000];
    int64_t n = 0;
    lb_err err;
    words(text, sizeof text, 70);
    assert_int_equal(lb_tokenizer_count(f.tok, text, strlen(text), &n, &err), LB_OK);
    assert_int_equal(n, 70);
    lb_test_body t;
    /* the prompt alone: 70 words and the bos */
    snprintf(body, sizeof body, "{\"prompt\":\"%s\",\"max_tokens\":1}", text);
    assert_int_equal(post(f.port, body, &t), 400);
    if (strstr(t.p, "the prompt's 71 tokens (the bos token included) leave no room") == NULL)
        fail_msg("the bos token is not said to count: %s", t.p);
    long cut = advised_cut(t.p);
    free(t.p);
    snprintf(body, sizeof body, "{\"prompt\":\"%s\",\"max_tokens\":1}",
             words(text, sizeof text, 70 - cut));
    if (post(f.port, body, &t) != 200) fail_msg("cut by %ld, still refused: %s", cut, t.p);
    free(t.p);
    /* the prompt and max_tokens together: 10 words, the bos and 60 */
    snprintf(body, sizeof body, "{\"prompt\":\"%s\",\"max_tokens\":60}",
             words(text, sizeof text, 10));
    assert_int_equal(post(f.port, body, &t), 400);
    cut = advised_cut(t.p);
    free(t.p);
    snprintf(body, sizeof body, "{\"prompt\":\"%s\",\"max_tokens\":60}",
             words(text, sizeof text, 10 - cut));
    if (post(f.port, body, &t) != 200) fail_msg("cut by %ld, still refused: %s", cut, t.p);
    free(t.p);
    stop(&f);

    w = one_token_weights(&o, 2);
    start_engine(&f, &w, 0, LB_TEST_FIXTURES "/tokenizer/gpt2.tiktoken", NULL, 0);
    snprintf(body, sizeof body,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}],\"max_tokens\":1}",
             words(text, sizeof text, 600));
    assert_int_equal(post_to(f.port, "/v1/chat/completions", body, &t), 400);
    if (strstr(t.p, "(the chat format's tokens included) leave no room") == NULL)
        fail_msg("the chat format's tokens are not said to count: %s", t.p);
    cut = advised_cut(t.p);
    free(t.p);
    snprintf(body, sizeof body,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}],\"max_tokens\":1}",
             words(text, sizeof text, 600 - cut));
    if (post_to(f.port, "/v1/chat/completions", body, &t) != 200)
        fail_msg("cut by %ld, still refused: %s", cut, t.p);
    free(t.p);
    /* a cut past the client's own 3 tokens (the rest is the format's) is no advice */
    const char *three = "{\"messages\":[{\"role\":\"user\",\"content\":\"w w w\"}],"
                        "\"max_tokens\":%d}";
    snprintf(body, sizeof body, three, 1);
    assert_int_equal(post_to(f.port, "/v1/chat/completions", body, &t), 200);
    json_t *j = json_loads(t.p, 0, NULL);
    const json_int_t total = usage_of(j, "prompt_tokens");
    json_decref(j);
    free(t.p);
    assert_true(total > 3);
    snprintf(body, sizeof body, three, (int)(512 - total + 5));
    assert_int_equal(post_to(f.port, "/v1/chat/completions", body, &t), 400);
    char ask[64];
    snprintf(ask, sizeof ask, "ask for at most %d tokens", (int)(512 - total));
    if (strstr(t.p, ask) == NULL || strstr(t.p, "shorten") != NULL)
        fail_msg("not only a smaller max_tokens advised: %s", t.p);
    free(t.p);
    stop(&f);
}

/* `serve --random PRESET` served with no bos and no end-of-sequence ids: prompts lacked the
 * bos every Llama 3 prompt starts with, and generation never stopped at <|eot_id|>. A
 * preset with text (a tokenizer) gets its family's ids where its vocabulary holds them. */
static void test_serve_engine_random_preset_has_its_familys_special_ids(void **state) {
    (void)state;
    const struct {
        const char *preset;
        int32_t bos;
        int n_eos;
        int32_t eos[3];
    } cases[] = {
        {"llama3.1-8b", 128000, 3, {128001, 128008, 128009}},
        {"llama3.2-1b", 128000, 3, {128001, 128008, 128009}},
        {"gpt2-124m", -1, 0, {0}},  /* a family the engine does not run */
        {"mistral-7b", -1, 0, {0}}, /* 32000 ids: Llama 3's are not among them */
        {"llama-tiny", -1, 0, {0}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        lb_model_config cfg;
        lb_err err;
        assert_int_equal(lb_model_config_preset(cases[i].preset, &cfg, &err), LB_OK);
        int32_t bos = 7, eos[LB_ENGINE_MAX_EOS];
        int n_eos = 7;
        lb_engine_family_ids(&cfg, &bos, eos, &n_eos);
        assert_int_equal(bos, cases[i].bos);
        assert_int_equal(n_eos, cases[i].n_eos);
        for (int k = 0; k < n_eos; k++)
            assert_int_equal(eos[k], cases[i].eos[k]);
    }
}

/* A token source that counts the next() calls of the one it stands for. */
typedef struct {
    lb_token_source inner;
    atomic_long calls;
} counting_source;

static lb_status counting_start(void *ctx, const lb_token_request *req, void *stream,
                                int64_t *prompt_tokens, lb_err *err) {
    counting_source *c = ctx;
    return c->inner.start(c->inner.ctx, req, stream, prompt_tokens, err);
}

static lb_token_state counting_next(void *ctx, void *stream, int64_t now_ns, char *text,
                                    size_t *len, int64_t *due_ns) {
    counting_source *c = ctx;
    atomic_fetch_add(&c->calls, 1);
    return c->inner.next(c->inner.ctx, stream, now_ns, text, len, due_ns);
}

static void counting_done(void *ctx, void *stream) {
    counting_source *c = ctx;
    c->inner.done(c->inner.ctx, stream);
}

typedef struct {
    int port;
    const char *body;
    long status;
    json_int_t tokens;
} waiting_job;

static void *waiting_post(void *arg) {
    waiting_job *j = arg;
    lb_test_body t;
    j->status = post(j->port, j->body, &t);
    free(answer_text(&t, &j->tokens));
    return NULL;
}

/* A request waiting for its next token, in the engine's queue or between steps, asked the
 * engine source again every millisecond: 60 waiting streams cost a core. The engine thread
 * now wakes a stream when it has something, so the source is asked about twice a token (the
 * token, then the wait), however long the steps take. Six requests on an engine of four
 * sequences: two wait in the queue and are still served. */
static void test_serve_engine_waiting_requests_are_woken_not_polled(void **state) {
    (void)state;
    one_token o = {1000};
    lb_weights w = one_token_weights(&o, 2);
    fixture f;
    start_engine(&f, &w, 0, LB_TEST_FIXTURES "/tokenizer/gpt2.tiktoken", NULL, 0);
    lb_server_free(f.srv);
    counting_source c = {.inner = f.src};
    lb_token_source wrapped = f.src;
    wrapped.ctx = &c;
    wrapped.start = counting_start;
    wrapped.next = counting_next;
    wrapped.done = counting_done;
    lb_server_params sp = lb_server_default_params();
    sp.port = 0;
    sp.threads = 2;
    lb_err err;
    if (lb_server_start(&sp, &wrapped, &f.srv, &err) != LB_OK) fail_msg("%s", err.msg);
    enum { N = 6, TOKENS = 12 };
    waiting_job jobs[N];
    pthread_t th[N];
    int64_t t0 = lb_clock_now_ns();
    for (int i = 0; i < N; i++) {
        jobs[i] = (waiting_job){.port = lb_server_port(f.srv),
                                .body = "{\"prompt\":[1,2,3],\"max_tokens\":12}"};
        assert_int_equal(pthread_create(&th[i], NULL, waiting_post, &jobs[i]), 0);
    }
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(jobs[i].status, 200);
        assert_int_equal(jobs[i].tokens, TOKENS);
    }
    double ms = (double)(lb_clock_now_ns() - t0) / 1e6;
    long calls = atomic_load(&c.calls);
    if (calls > 3 * N * TOKENS + 4 * N)
        fail_msg("%ld next() calls for %d tokens in %.0f ms", calls, N * TOKENS, ms);
    stop(&f);
}

/* The prompt tokens of msgs[0..n) in Llama 3's chat format under f's tokenizer. */
static json_int_t chat_tokens(const fixture *f, const lb_chat_message *msgs, size_t n) {
    char *text = NULL;
    size_t len = 0, n_ids = 0;
    uint32_t *ids = NULL;
    lb_err err;
    assert_int_equal(lb_hf_tokenizer_chat_llama3(msgs, n, &text, &len, &err), LB_OK);
    assert_int_equal(lb_tokenizer_encode(f->tok, text, len, &ids, &n_ids, &err), LB_OK);
    free(text);
    free(ids);
    return (json_int_t)n_ids;
}

/* The messages of a chat request reached the engine as one user message of their contents
 * joined by newlines: a system prompt and an assistant turn were read as the user's text,
 * and the prompt's tokens were not those vLLM builds for the same messages. Each message
 * is now under its own role's header. */
static void test_serve_engine_chat_messages_keep_their_roles(void **state) {
    (void)state;
    one_token o = {1000};
    lb_weights w = one_token_weights(&o, 2);
    fixture f;
    start_engine(&f, &w, 0, LB_TEST_FIXTURES "/tokenizer/gpt2.tiktoken", NULL, 0);
    const lb_chat_message two[] = {{"system", "be brief", 8}, {"user", "hello there", 11}};
    const lb_chat_message four[] = {{"system", "be brief", 8},
                                    {"user", "hi", 2},
                                    {"assistant", "hello", 5},
                                    {"user", "again", 5}};
    const struct {
        const char *body;
        const lb_chat_message *msgs;
        size_t n;
    } cases[] = {
        {"{\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},"
         "{\"role\":\"user\",\"content\":\"hello there\"}],\"max_tokens\":1}",
         two, 2},
        {"{\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},"
         "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hi\"}]},"
         "{\"role\":\"assistant\",\"content\":\"hello\"},"
         "{\"role\":\"user\",\"content\":\"again\"}],\"max_tokens\":1}",
         four, 4},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        lb_test_body t;
        assert_int_equal(post_to(f.port, "/v1/chat/completions", cases[i].body, &t), 200);
        json_t *j = json_loads(t.p, 0, NULL);
        if (j == NULL) fail_msg("not JSON: %s", t.p);
        assert_int_equal(usage_of(j, "prompt_tokens"), chat_tokens(&f, cases[i].msgs, cases[i].n));
        json_decref(j);
        free(t.p);
    }
    /* the joined contents as one user message: what the old prompt was, and not the same */
    const lb_chat_message joined = {"user", "be brief\nhello there", 20};
    assert_true(chat_tokens(&f, two, 2) != chat_tokens(&f, &joined, 1));
    stop(&f);
}

/* A Ctrl-C while the engine loaded (minutes for a large model on a GPU) was kept until the
 * load ended; then the server opened its port, printed "listening" and drained at once,
 * exit 0, as if it had served. It stops before the port opens: exit 130. */
static void test_serve_engine_signal_while_loading_stops_before_the_port_opens(void **state) {
    (void)state;
    char dir[64];
    lb_test_tmpdir(dir, sizeof dir);
    lb_model_config cfg = lb_fixture_config();
    lb_model m;
    lb_err err;
    assert_int_equal(lb_model_init(&m, &cfg, 1, 1, 5, &err), LB_OK);
    lb_fixture_write_dir(dir, &cfg, m.params, true, false);
    lb_model_free(&m);
    char *argv[] = {"serve",  "--model", dir,       "--device", "cpu",
                    "--port", "0",       "--drain", "0",        NULL};
    lb_signals_raise(SIGINT);
    const int rc = lb_cmd_serve((int)(sizeof argv / sizeof argv[0]) - 1, argv);
    lb_signals_reset();
    assert_int_equal(rc, 130);
    lb_test_rmtree(dir);
}

int main(void) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_serve_engine_refused_request_streams_an_error),
        cmocka_unit_test(test_serve_engine_refused_request_whole_is_500),
        cmocka_unit_test(test_serve_engine_token_id_prompt_reaches_the_engine_as_ids),
        cmocka_unit_test(test_serve_engine_eos_as_the_last_allowed_token_finishes_with_stop),
        cmocka_unit_test(test_serve_engine_special_tokens_count_but_write_no_text),
        cmocka_unit_test(test_serve_engine_long_token_text_is_whole_and_counted_once),
        cmocka_unit_test(test_serve_engine_samples_with_the_request_fields),
        cmocka_unit_test(test_serve_engine_request_ignore_eos_generates_max_tokens),
        cmocka_unit_test(test_serve_engine_refuses_bad_sampling_fields),
        cmocka_unit_test(test_serve_engine_drain_ends_unfinished_requests_at_the_deadline),
        cmocka_unit_test(test_serve_engine_refusal_past_the_context_says_what_fits),
        cmocka_unit_test(test_serve_engine_advised_cut_of_a_long_prompt_fits),
        cmocka_unit_test(test_serve_engine_random_preset_has_its_familys_special_ids),
        cmocka_unit_test(test_serve_engine_waiting_requests_are_woken_not_polled),
        cmocka_unit_test(test_serve_engine_chat_messages_keep_their_roles),
        cmocka_unit_test(test_serve_engine_signal_while_loading_stops_before_the_port_opens),
        cmocka_unit_test(test_serve_engine_no_wake_after_done),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
