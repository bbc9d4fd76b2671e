/* test_loadgen_metrics.c: the summary computed from hand-made query records (TTFT from
 * the scheduled time, TPOT, failures, goodput, the MLPerf verdict, where token counts come
 * from) and its text form. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "loadgen/metrics.h"
#include "loadgen/summary.h"
#include "test_util.h"

#define MS 1000000LL

static lb_query done_query(int64_t sched_ms, int64_t sent_us, int64_t first_ms, int64_t done_ms,
                           int32_t tokens) {
    return (lb_query){.scheduled_ns = sched_ms * MS,
                      .sent_ns = sent_us * 1000,
                      .first_ns = first_ms * MS,
                      .done_ns = done_ms * MS,
                      .output_tokens = tokens,
                      .input_tokens = 10,
                      .counted = LB_TOKENS_USAGE,
                      .issued = true,
                      .finished = true,
                      .scheduled_send = true,
                      .attempts = 1};
}

static lb_loadgen_summary setup(lb_scenario sc) {
    lb_loadgen_summary s;
    memset(&s, 0, sizeof s);
    s.scenario = sc;
    s.mode = LB_MODE_PERFORMANCE;
    s.constraints = lb_loadgen_constraints_default();
    s.n_samples = 3;
    s.streamed = true;
    return s;
}

static void test_metrics_ttft_from_scheduled_and_tpot_formula(void **state) {
    (void)state;
    lb_query q[3] = {
        done_query(0, 1000, 101, 201, 11),    /* TTFT 101, TPOT (201-101)/10 = 10 */
        done_query(100, 100500, 150, 250, 6), /* TTFT 50, TPOT (250-150)/5 = 20 */
        {.scheduled_ns = 200 * MS,
         .sent_ns = 200 * MS,
         .done_ns = 300 * MS,
         .issued = true,
         .finished = true,
         .error = LB_QERR_TIMEOUT,
         .attempts = 3},
    };
    float gaps[] = {10.0f, 10.0f, 30.0f};
    q[0].n_gaps = 2;
    q[1].gap0 = 2;
    q[1].n_gaps = 1;
    lb_loadgen_summary s = setup(LB_SCENARIO_OFFLINE);
    s.constraints.slo_ttft_ms = 60;
    assert_int_equal(lb_loadgen_summarize(q, 3, gaps, NULL, 0, &s), LB_OK);
    assert_int_equal(s.issued, 3);
    assert_int_equal(s.completed, 2);
    assert_int_equal(s.failed, 1);
    assert_int_equal(s.failures[LB_QERR_TIMEOUT], 1);
    assert_int_equal(s.retries, 2);
    assert_float_equal(s.duration_s, 0.3, 1e-12);
    assert_float_equal(s.samples_per_s, 2 / 0.3, 1e-9);
    assert_int_equal(s.output_tokens, 17);
    assert_float_equal(s.output_tok_per_s, 17 / 0.3, 1e-9);
    assert_float_equal(s.total_tok_per_s, 37 / 0.3, 1e-9);
    assert_string_equal(s.token_source, "usage");
    assert_float_equal(s.ttft_ms.min, 50, 1e-9);
    assert_float_equal(s.ttft_ms.max, 101, 1e-9);
    assert_float_equal(s.ttft_ms.p[0], 101, 1e-9); /* LoadGen's p50 of 2: the sample at 1 */
    assert_float_equal(s.tpot_ms.mean, 15, 1e-9);
    assert_float_equal(s.latency_ms.max, 201, 1e-9);
    assert_float_equal(s.queue_ms.min, 0.5, 1e-9);
    assert_float_equal(s.queue_ms.max, 1.0, 1e-9);
    assert_float_equal(s.itl_ms.p[0], 10, 1e-6);
    assert_float_equal(s.itl_ms.max, 30, 1e-6);
    assert_int_equal(s.good, 1);
    assert_float_equal(s.goodput_per_s, 1 / 0.3, 1e-9);
    assert_false(s.no_failures);
    assert_false(s.valid);
    assert_non_null(strstr(s.reasons, "1 of 3 queries did not complete (timeout 1)"));
}

/* Counts by usage and by streamed pieces add up; one count that is unknown makes the
 * token rates unknown (NaN) instead of low, and its query has no TPOT. */
static void test_metrics_unknown_token_counts_make_token_rates_unknown(void **state) {
    (void)state;
    lb_query q[3] = {done_query(0, 0, 10, 110, 11), done_query(0, 0, 10, 60, 6),
                     done_query(0, 0, 100, 100, -1)};
    q[1].counted = LB_TOKENS_CHUNKS;
    lb_loadgen_summary s = setup(LB_SCENARIO_OFFLINE);
    assert_int_equal(lb_loadgen_summarize(q, 2, NULL, NULL, 0, &s), LB_OK);
    assert_string_equal(s.token_source, "usage+chunks");
    assert_int_equal(s.output_tokens, 17);
    assert_float_equal(s.output_tok_per_s, 17 / 0.11, 1e-9);
    q[2].counted = LB_TOKENS_UNKNOWN;
    assert_int_equal(lb_loadgen_summarize(q, 3, NULL, NULL, 0, &s), LB_OK);
    assert_string_equal(s.token_source, "usage+chunks+unknown");
    assert_int_equal(s.counted[LB_TOKENS_USAGE], 1);
    assert_int_equal(s.counted[LB_TOKENS_CHUNKS], 1);
    assert_int_equal(s.counted[LB_TOKENS_UNKNOWN], 1);
    assert_int_equal(s.output_tokens, 17);
    assert_true(isnan(s.output_tok_per_s));
    assert_true(isnan(s.total_tok_per_s));
    assert_int_equal(s.tpot_ms.n, 2);
}
static void test_metrics_server_bound_exceeded_is_invalid_with_reason(void **state) {
    (void)state;
    lb_query q[10];
    for (int i = 0; i < 10; i++)
        q[i] = done_query(i * 100, i * 100000, i * 100 + 3000, i * 100 + 3500, 11);
    lb_loadgen_summary s = setup(LB_SCENARIO_SERVER);
    lb_err err;
    assert_int_equal(lb_loadgen_constraints_for_model("llama3.1-8b", &s.constraints, &err), LB_OK);
    assert_float_equal(s.constraints.ttft_limit_ms, 2000, 0);
    assert_float_equal(s.constraints.tpot_limit_ms, 100, 0);
    assert_int_equal(lb_loadgen_summarize(q, 10, NULL, NULL, 0, &s), LB_OK);
    assert_false(s.perf_ok);
    assert_true(s.no_failures);
    assert_false(s.early_stop_ok);
    assert_int_equal(s.es_ttft.t, 10);
    assert_false(s.valid);
    assert_non_null(strstr(s.reasons, "TTFT 3000.0 ms exceeds the 2000 ms bound"));
    assert_null(strstr(s.reasons, "TPOT 50"));
    assert_float_equal(s.scheduled_qps, 9 / 0.9, 1e-9);
    assert_float_equal(s.mlperf_samples_per_s, 9 / 4.4, 1e-9);
}

/* As LoadGen (results.cc): the bounds are judged on the sorted sample at floor(n p), not an
 * interpolation (TTFTs 1..100 ms: p99 is 100 ms, which a 99.5 ms bound refuses, where
 * numpy's 99.01 ms would pass), and the completed rates divide by the done time of the
 * last-scheduled query, not of the last to finish. */
static void test_metrics_server_follows_loadgens_percentile_and_final_query(void **state) {
    (void)state;
    enum { N = 100 };
    lb_query q[N];
    for (int i = 0; i < N; i++)
        q[i] = done_query(i * 10, i * 10000, i * 10 + (i + 1), i * 10 + (i + 1) + 50, 6);
    q[40].done_ns = 5000 * MS; /* finishes after the last-scheduled query (done at 1.14 s) */
    lb_loadgen_summary s = setup(LB_SCENARIO_SERVER);
    s.constraints.ttft_limit_ms = 99.5;
    assert_int_equal(lb_loadgen_summarize(q, N, NULL, NULL, 0, &s), LB_OK);
    assert_float_equal(s.ttft_ms.p[4], 100, 0);
    assert_false(s.perf_ok);
    assert_non_null(strstr(s.reasons, "p99 TTFT 100.0 ms exceeds the 100 ms bound"));
    assert_float_equal(s.duration_s, 5.0, 1e-12);
    assert_float_equal(s.final_done_s, 1.14, 1e-12);
    assert_float_equal(s.mlperf_samples_per_s, 99 / 1.14, 1e-9);
    assert_float_equal(s.mlperf_tok_per_s, 600 / 1.14, 1e-9);
    assert_float_equal(s.output_tok_per_s, 600 / 5.0, 1e-9);
    s.constraints.ttft_limit_ms = 100;
    assert_int_equal(lb_loadgen_summarize(q, N, NULL, NULL, 0, &s), LB_OK);
    assert_true(s.perf_ok);
}

/* Both of the Server summary's "Completed tokens per second" lines are LoadGen's
 * token_count / final_query_all_samples_done_time (results.cc LogSummary): one figure,
 * not the headline's and another over the last completion of any query. */
static void test_metrics_server_summary_completed_tokens_lines_agree(void **state) {
    (void)state;
    enum { N = 100 };
    lb_query q[N];
    for (int i = 0; i < N; i++)
        q[i] = done_query(i * 10, i * 10000, i * 10 + 5, i * 10 + 55, 6);
    q[40].done_ns = 5000 * MS; /* ends after the last-scheduled query (done at 1.045 s) */
    lb_loadgen_summary s = setup(LB_SCENARIO_SERVER);
    assert_int_equal(lb_loadgen_summarize(q, N, NULL, NULL, 0, &s), LB_OK);
    assert_float_equal(s.mlperf_tok_per_s, 600 / 1.045, 1e-9);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    lb_loadgen_summary_write(f, &s, "t");
    fclose(f);
    assert_non_null(strstr(text, "Completed tokens per second: 574.16\n"));
    assert_non_null(strstr(text, "Completed tokens per second                 : 574.16\n"));
    assert_null(strstr(text, "Completed tokens per second                 : 120.00\n"));
    free(text);
}

/* Every query failed: no completed samples a second, not a negative count. */
static void test_metrics_no_completion_is_zero_a_second(void **state) {
    (void)state;
    lb_query q[4];
    for (int i = 0; i < 4; i++) {
        q[i] = done_query(i * 10, i * 10000, i * 10 + 5, i * 10 + 50, 11);
        q[i].error = LB_QERR_TIMEOUT;
    }
    lb_loadgen_summary s = setup(LB_SCENARIO_SERVER);
    assert_int_equal(lb_loadgen_summarize(q, 4, NULL, NULL, 0, &s), LB_OK);
    assert_float_equal(s.mlperf_samples_per_s, 0, 0);
    s = setup(LB_SCENARIO_SINGLE_STREAM);
    assert_int_equal(lb_loadgen_summarize(q, 4, NULL, NULL, 0, &s), LB_OK);
    assert_float_equal(s.mlperf_samples_per_s, 0, 0);
}

/* A closed loop's verdict is the latency estimate at its percentile (90): the needed count
 * stored is that estimate's, h(1) + 1 = 64, not Server's p99 662. */
static void test_metrics_closed_loop_needs_what_its_estimate_needs(void **state) {
    (void)state;
    enum { N = 100 };
    lb_query q[N];
    for (int i = 0; i < N; i++)
        q[i] = done_query(i * 100, i * 100000, i * 100 + 5, i * 100 + 50, 11);
    lb_loadgen_summary s = setup(LB_SCENARIO_SINGLE_STREAM);
    s.constraints.percentile = 90;
    assert_int_equal(lb_loadgen_summarize(q, N, NULL, NULL, 0, &s), LB_OK);
    assert_true(s.early_stop_ok);
    assert_int_equal(s.es_latency.needed, 64);
    assert_float_equal(s.target_latency_ms, 50, 1e-9);
    lb_result *r = lb_result_new("load", "t");
    assert_int_equal(lb_loadgen_summary_to_result(&s, r), LB_OK);
    assert_float_equal(lb_result_metric(r, "early_stop_needed_queries"), 64, 0);
    lb_result_free(r);
}

static void test_metrics_server_run_long_enough_is_valid(void **state) {
    (void)state;
    enum { N = 500 };
    lb_query *q = calloc(N, sizeof *q);
    for (int i = 0; i < N; i++)
        q[i] = done_query(i * 10, i * 10000, i * 10 + 200, i * 10 + 700, 51);
    lb_loadgen_summary s = setup(LB_SCENARIO_SERVER);
    lb_err err;
    assert_int_equal(
        lb_loadgen_constraints_for_model("llama3.1-8b-interactive", &s.constraints, &err), LB_OK);
    s.min_duration_s = 4.0;
    s.min_queries = 500;
    assert_int_equal(lb_loadgen_summarize(q, N, NULL, NULL, 0, &s), LB_OK);
    assert_true(s.perf_ok);       /* TTFT 200 <= 500, TPOT 10 <= 30 */
    assert_true(s.early_stop_ok); /* 0 misses: 459 queries needed */
    assert_int_equal(s.es_ttft.needed, 459);
    assert_true(s.min_duration_ok); /* last scheduled at 4.99 s */
    assert_true(s.min_queries_ok);
    assert_true(s.valid);
    assert_string_equal(s.reasons, "");
    s.min_duration_s = 10.0;
    assert_int_equal(lb_loadgen_summarize(q, N, NULL, NULL, 0, &s), LB_OK);
    assert_false(s.valid);
    assert_non_null(strstr(s.reasons, "raise --min-duration"));

    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    lb_loadgen_summary_write(f, &s, "test-sut");
    fclose(f);
    assert_non_null(strstr(text,
                           "================================================\nMLPerf Results "
                           "Summary\n================================================\n"
                           "SUT name : test-sut\nScenario : Server\nMode     : PerformanceOnly\n"));
    assert_non_null(strstr(text, "Result is : INVALID\n"));
    assert_non_null(strstr(text, "  Min duration satisfied : NO\n"));
    assert_non_null(strstr(text, "TTFT Early Stopping Result:\n * Run successful.\n"));
    assert_non_null(strstr(text, "50.00 percentile first token latency (ns)   : 200000000\n"));
    assert_non_null(strstr(text, "ttft_latency (ns): 500000000\n"));
    assert_non_null(strstr(text, "performance_sample_count : 3\n"));
    free(text);
    free(q);
}

/* Usage first, then the tokenizer on the generated text, then the streamed pieces, else
 * unknown; the summary names every source used, in that order. */
static void test_metrics_output_tokens_from_usage_else_tokenizer_else_chunks(void **state) {
    (void)state;
    lb_tokenizer *tok = lb_test_gpt2_tokenizer();
    assert_non_null(tok);
    lb_err err = {{0}};
    const char *text = "Hello world! The answer is 42.";
    size_t len = strlen(text);
    lb_query q[5];
    for (int i = 0; i < 5; i++) {
        q[i] = done_query(0, 0, 10, 20, 0);
        q[i].n_chunks = 5;
    }
    assert_int_equal(lb_loadgen_query_count_output(&q[0], 7, true, tok, text, len, NULL, 0, &err),
                     LB_OK);
    assert_int_equal(q[0].output_tokens, 7);
    assert_int_equal(q[0].counted, LB_TOKENS_USAGE);
    /* Hello| world|!| The| answer| is| 42|. */
    assert_int_equal(lb_loadgen_query_count_output(&q[1], -1, false, tok, text, len, NULL, 0, &err),
                     LB_OK);
    assert_int_equal(q[1].output_tokens, 8);
    assert_int_equal(q[1].counted, LB_TOKENS_TOKENIZER);
    assert_int_equal(lb_loadgen_query_count_output(&q[2], -1, true, NULL, text, len, NULL, 0, &err),
                     LB_OK);
    assert_int_equal(q[2].output_tokens, 5);
    assert_int_equal(q[2].counted, LB_TOKENS_CHUNKS);
    assert_int_equal(lb_loadgen_query_count_output(&q[3], -1, true, tok, NULL, 0, NULL, 0, &err),
                     LB_OK);
    assert_int_equal(q[3].counted, LB_TOKENS_CHUNKS);
    assert_int_equal(
        lb_loadgen_query_count_output(&q[4], -1, false, NULL, text, len, NULL, 0, &err), LB_OK);
    assert_int_equal(q[4].output_tokens, -1);
    assert_int_equal(q[4].counted, LB_TOKENS_UNKNOWN);

    lb_loadgen_summary s = setup(LB_SCENARIO_OFFLINE);
    assert_int_equal(lb_loadgen_summarize(q, 3, NULL, NULL, 0, &s), LB_OK);
    assert_int_equal(s.output_tokens, 7 + 8 + 5);
    assert_string_equal(s.token_source, "usage+tokenizer+chunks");
    assert_int_equal(s.counted[LB_TOKENS_TOKENIZER], 1);
    assert_true(isfinite(s.output_tok_per_s));
    assert_int_equal(lb_loadgen_summarize(&q[1], 1, NULL, NULL, 0, &s), LB_OK);
    assert_string_equal(s.token_source, "tokenizer");
    lb_tokenizer_free(tok);
}

/* A reasoning model's thinking is generated: the tokenizer counts it with the answer, so
 * TPOT is the time per token of both, and an answer that is all thinking is not 0 tokens;
 * without a tokenizer the streamed pieces (thinking included) count. */
static void test_metrics_tokenizer_counts_the_thinking_with_the_answer(void **state) {
    (void)state;
    lb_tokenizer *tok = lb_test_gpt2_tokenizer();
    assert_non_null(tok);
    lb_err err = {{0}};
    const char *answer = "Hello world!", *thinking = "The answer is 42.";
    lb_query q[3];
    for (int i = 0; i < 3; i++) {
        q[i] = done_query(0, 0, 10, 80, 0);
        q[i].n_chunks = 6;
    }
    /* Hello| world|! and The| answer| is| 42|. */
    assert_int_equal(lb_loadgen_query_count_output(&q[0], -1, true, tok, answer, strlen(answer),
                                                   thinking, strlen(thinking), &err),
                     LB_OK);
    assert_int_equal(q[0].output_tokens, 3 + 5);
    assert_int_equal(q[0].counted, LB_TOKENS_TOKENIZER);
    assert_int_equal(lb_loadgen_query_count_output(&q[1], -1, true, tok, "", 0, thinking,
                                                   strlen(thinking), &err),
                     LB_OK);
    assert_int_equal(q[1].output_tokens, 5);
    assert_int_equal(lb_loadgen_query_count_output(&q[2], -1, true, NULL, answer, strlen(answer),
                                                   thinking, strlen(thinking), &err),
                     LB_OK);
    assert_int_equal(q[2].output_tokens, 6);
    assert_int_equal(q[2].counted, LB_TOKENS_CHUNKS);
    lb_loadgen_summary s = setup(LB_SCENARIO_OFFLINE);
    assert_int_equal(lb_loadgen_summarize(q, 1, NULL, NULL, 0, &s), LB_OK);
    assert_float_equal(s.tpot_ms.mean, (80.0 - 10.0) / (8 - 1), 1e-9); /* not 70 / 2 */
    lb_tokenizer_free(tok);
}

/* Whole answers: TTFT, TPOT and ITL are not measured (NaN, no samples), not the latency
 * and 0; a Server run with latency bounds cannot be VALID on them, and says why. */
static void test_metrics_no_stream_latencies_are_not_measured(void **state) {
    (void)state;
    enum { N = 600 };
    lb_query *q = calloc(N, sizeof *q);
    for (int i = 0; i < N; i++)
        q[i] = done_query(i * 10, i * 10000, i * 10 + 200, i * 10 + 700, 51);
    lb_loadgen_summary s = setup(LB_SCENARIO_SERVER);
    lb_err err;
    assert_int_equal(lb_loadgen_constraints_for_model("llama3.1-8b", &s.constraints, &err), LB_OK);
    assert_int_equal(lb_loadgen_summarize(q, N, NULL, NULL, 0, &s), LB_OK);
    assert_true(s.valid); /* streamed: the same records meet the bounds */
    s.streamed = false;
    s.constraints.slo_ttft_ms = 1000;
    assert_int_equal(lb_loadgen_summarize(q, N, NULL, NULL, 0, &s), LB_OK);
    assert_int_equal(s.ttft_ms.n, 0);
    assert_int_equal(s.tpot_ms.n, 0);
    assert_int_equal(s.itl_ms.n, 0);
    assert_true(isnan(s.ttft_ms.p[4]));
    assert_int_equal(s.latency_ms.n, N);
    assert_true(isnan(s.goodput_per_s));
    assert_false(s.perf_ok);
    assert_false(s.valid);
    assert_non_null(strstr(s.reasons, "TTFT and TPOT are not measured with whole answers"));
    assert_non_null(strstr(s.warnings, "not measured with whole answers (--no-stream)"));
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    lb_loadgen_summary_write(f, &s, "t");
    fclose(f);
    assert_non_null(strstr(text, "Min First Token latency (ns)                : not measured\n"));
    assert_null(strstr(text, "percentile first token latency"));
    assert_null(strstr(text, "No warnings encountered"));
    free(text);
    free(q);
}

/* Whole answers have no TTFT or TPOT, so the summary's early stopping results on them say
 * so: SingleStream printed "Would discard -1 highest latency queries" and an estimate of
 * -1 ns for TTFT, and Server "Run successful." under an early stopping it had failed. */
static void test_metrics_no_stream_early_stopping_results_say_not_measured(void **state) {
    (void)state;
    enum { N = 100 };
    lb_query *q = calloc(N, sizeof *q);
    for (int i = 0; i < N; i++)
        q[i] = done_query(i * 10, i * 10000, i * 10 + 2, i * 10 + 7, 5);
    for (int k = 0; k < 2; k++) {
        lb_loadgen_summary s = setup(k == 0 ? LB_SCENARIO_SINGLE_STREAM : LB_SCENARIO_SERVER);
        s.streamed = false;
        s.constraints.percentile = k == 0 ? 90 : 99;
        s.constraints.ttft_limit_ms = 2000;
        s.constraints.tpot_limit_ms = 100;
        assert_int_equal(lb_loadgen_summarize(q, N, NULL, NULL, 0, &s), LB_OK);
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        lb_loadgen_summary_write(f, &s, "t");
        fclose(f);
        const char *ttft = strstr(text, "TTFT Early Stopping Result:\n");
        assert_non_null(ttft);
        assert_non_null(strstr(ttft, "Result:\n * Not measured: whole answers (--no-stream)"));
        assert_null(strstr(text, "Would discard -1"));
        assert_null(strstr(text, "estimate: -1"));
        assert_null(strstr(text, "Run successful."));
        if (k == 0) /* the latency estimate is measured all the same */
            assert_non_null(strstr(text, "Early Stopping Result:\n * Processed at least 64"));
        else
            assert_non_null(
                strstr(text, "TPOT Early Stopping Result:\n * Not measured: whole answers"));
        free(text);
    }
    free(q);
}

/* Goodput with a TPOT objective: a one-token answer has no TPOT, so only its TTFT judges
 * it; a two-token answer over the TPOT bound is not good. */
static void test_metrics_goodput_with_tpot_slo_and_one_token_answers(void **state) {
    (void)state;
    lb_query q[3] = {
        done_query(0, 0, 50, 50, 1),   /* one token, TTFT 50: good */
        done_query(0, 0, 50, 150, 2),  /* TPOT 100 > 40: not good */
        done_query(0, 0, 300, 300, 1), /* one token, TTFT 300 > 200: not good */
    };
    lb_loadgen_summary s = setup(LB_SCENARIO_OFFLINE);
    s.constraints.slo_ttft_ms = 200;
    s.constraints.slo_tpot_ms = 40;
    assert_int_equal(lb_loadgen_summarize(q, 3, NULL, NULL, 0, &s), LB_OK);
    assert_int_equal(s.good, 1);
    assert_float_equal(s.goodput_per_s, 1 / 0.3, 1e-9);
    assert_int_equal(s.tpot_ms.n, 1);
}

/* The load generator behind its schedule and attempts sent again are warnings, with the
 * figures; a failed attempt that was resent counts by its reason. */
static void test_metrics_lag_and_resent_attempts_are_warnings(void **state) {
    (void)state;
    enum { N = 100 };
    lb_query q[N];
    for (int i = 0; i < N; i++) {
        q[i] = done_query(i, i * 1000, i + 20, i + 40, 5);
        q[i].handover_ns = q[i].sent_ns;
    }
    lb_loadgen_summary s = setup(LB_SCENARIO_SERVER);
    assert_int_equal(lb_loadgen_summarize(q, N, NULL, NULL, 0, &s), LB_OK);
    assert_int_equal(s.n_warnings, 0);
    assert_string_equal(s.warnings, "");
    for (int i = 90; i < N; i++) /* 10% of the sends 300 ms late */
        q[i].sent_ns = q[i].handover_ns = q[i].scheduled_ns + 300 * MS;
    q[7].attempts = 3;
    uint8_t resent[] = {LB_QERR_DROPPED, LB_QERR_HTTP_5XX};
    assert_int_equal(lb_loadgen_summarize(q, N, NULL, resent, 2, &s), LB_OK);
    assert_int_equal(s.resent[LB_QERR_DROPPED], 1);
    assert_int_equal(s.resent[LB_QERR_HTTP_5XX], 1);
    assert_int_equal(s.retries, 2);
    assert_int_equal(s.failed, 0);
    assert_int_equal(s.n_warnings, 2);
    assert_non_null(strstr(s.warnings, "fell behind its schedule: queries were handed to the "
                                       "HTTP client 300.0 ms late at p99"));
    assert_non_null(strstr(s.warnings, "2 attempts failed and were sent again (dropped 1, "
                                       "http_5xx 1)"));
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    lb_loadgen_summary_write(f, &s, "t");
    fclose(f);
    assert_non_null(strstr(text, "2 warnings encountered during test:\n * the load generator"));
    assert_non_null(strstr(text, "  resent after dropped : 1\n"));
    free(text);
}

static void test_metrics_unknown_model_key_lists_known_ones(void **state) {
    (void)state;
    lb_constraints c;
    lb_err err = {""};
    assert_int_equal(lb_loadgen_constraints_for_model("gpt-9", &c, &err), LB_ERR_USAGE);
    assert_non_null(strstr(err.msg, "gpt-9"));
    assert_non_null(strstr(err.msg, "llama3.1-8b-interactive"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_metrics_ttft_from_scheduled_and_tpot_formula),
        cmocka_unit_test(test_metrics_unknown_token_counts_make_token_rates_unknown),
        cmocka_unit_test(test_metrics_server_bound_exceeded_is_invalid_with_reason),
        cmocka_unit_test(test_metrics_server_follows_loadgens_percentile_and_final_query),
        cmocka_unit_test(test_metrics_server_summary_completed_tokens_lines_agree),
        cmocka_unit_test(test_metrics_no_completion_is_zero_a_second),
        cmocka_unit_test(test_metrics_closed_loop_needs_what_its_estimate_needs),
        cmocka_unit_test(test_metrics_server_run_long_enough_is_valid),
        cmocka_unit_test(test_metrics_output_tokens_from_usage_else_tokenizer_else_chunks),
        cmocka_unit_test(test_metrics_tokenizer_counts_the_thinking_with_the_answer),
        cmocka_unit_test(test_metrics_no_stream_latencies_are_not_measured),
        cmocka_unit_test(test_metrics_no_stream_early_stopping_results_say_not_measured),
        cmocka_unit_test(test_metrics_goodput_with_tpot_slo_and_one_token_answers),
        cmocka_unit_test(test_metrics_lag_and_resent_attempts_are_warnings),
        cmocka_unit_test(test_metrics_unknown_model_key_lists_known_ones),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
