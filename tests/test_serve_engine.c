/* test_serve_engine.c: the server over the built-in engine's token source
 * (serve/engine_source.h) with the CPU engine, through real HTTP on 127.0.0.1. */
#include <curl/curl.h>
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/engine.h"
#include "model/config.h"
#include "model/hf_tokenizer.h"
#include "serve/engine_source.h"
#include "serve/server.h"
#include "test_util.h"

static long post(int port, const char *body, lb_test_body *out) {
    char url[96];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/completions", port);
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

typedef struct {
    lb_engine *engine;
    lb_tokenizer *tok;
    lb_token_source src;
    lb_server *srv;
    int port;
} fixture;

/* llama-tiny (a vocabulary of 128 ids) on the CPU behind GPT-2's tokenizer: every prompt
 * of ordinary text has ids the engine refuses once the request has been accepted. */
static void start(fixture *f) {
    memset(f, 0, sizeof *f);
    lb_err err = {{0}};
    lb_weights w = {.seed = 1};
    assert_int_equal(lb_model_config_preset("llama-tiny", &w.cfg, &err), LB_OK);
    lb_engine_params p = lb_engine_default_params();
    p.device = LB_ENGINE_CPU;
    p.max_seqs = 4;
    p.step_tokens = 64;
    assert_int_equal(lb_engine_open(&f->engine, &p, &w, &err), LB_OK);
    assert_int_equal(
        lb_hf_tokenizer_load(&f->tok, LB_TEST_FIXTURES "/tokenizer/gpt2.tiktoken", NULL, &err),
        LB_OK);
    lb_engine_source_params ep = {.engine = f->engine, .tok = f->tok, .bos_id = -1};
    assert_int_equal(lb_engine_source_init(&ep, &f->src, &err), LB_OK);
    lb_server_params sp = lb_server_default_params();
    sp.port = 0;
    sp.threads = 2;
    if (lb_server_start(&sp, &f->src, &f->srv, &err) != LB_OK)
        fail_msg("server did not start: %s", err.msg);
    f->port = lb_server_port(f->srv);
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

int main(void) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_serve_engine_refused_request_streams_an_error),
        cmocka_unit_test(test_serve_engine_refused_request_whole_is_500),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
