/* test_loadgen_mlperf_log.c: LoadGen's files. Config files: the lookup order (exact,
 * *.scenario, model.*, *.*), a later file overriding, malformed lines refused with file
 * and line. The detail and accuracy logs, read back by parsers written from LoadGen's
 * documented formats (":::MLLOG " + one JSON object with key, value, time_ms, namespace,
 * event_type, metadata; a JSON array of {seq_id, qsl_idx, data, token_count}, data the
 * response bytes in hex), and the summary's "key : value" lines. */
#include <jansson.h>
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
#include "loadgen/mlperf_log.h"
#include "loadgen/summary.h"

static void test_mlperf_conf_lookup_order_and_override(void **state) {
    (void)state;
    const char *mlperf = "# comment\n"
                         "*.*.min_duration = 600000\n"
                         "*.Server.min_duration = 300000   # a trailing comment\n"
                         "llama3_1-8b.*.min_query_count = 13368\n"
                         "*.*.min_query_count = 100\n"
                         "llama3_1-8b.Server.ttft_latency = 2000\n"
                         "*.Server.ttft_latency = 10\n"
                         "gptj.Server.tpot_latency = 5\n"
                         "*.*.schedule_rng_seed = 18209322760996052031\n"
                         "*.Offline.target_qps = 7\n"
                         "\n"
                         "*.*.some_key_llmbench_does_not_read = 3\n";
    lb_mlperf_settings s = {0};
    lb_err err = {""};
    assert_int_equal(
        lb_mlperf_log_conf_apply(mlperf, "mlperf.conf", "llama3_1-8b", "Server", &s, &err), LB_OK);
    assert_true(s.has_min_duration);
    assert_float_equal(s.min_duration_ms, 300000, 0); /* *.Server before *.* */
    assert_int_equal(s.min_query_count, 13368);       /* model.* before *.* */
    assert_float_equal(s.ttft_latency_ms, 2000, 0);   /* exact before *.Server */
    assert_false(s.has_tpot);                         /* another model's */
    assert_false(s.has_target_qps);                   /* another scenario's */
    assert_true(s.schedule_seed == UINT64_C(18209322760996052031));
    /* user.conf after mlperf.conf: its wildcard wins over mlperf.conf's exact entry. */
    const char *user = "*.*.ttft_latency = 500\n*.Server.target_qps = 12.5\n";
    assert_int_equal(lb_mlperf_log_conf_apply(user, "user.conf", "llama3_1-8b", "Server", &s, &err),
                     LB_OK);
    assert_float_equal(s.ttft_latency_ms, 500, 0);
    assert_float_equal(s.target_qps, 12.5, 0);
    assert_float_equal(s.min_duration_ms, 300000, 0);

    assert_int_equal(lb_mlperf_log_conf_apply("*.*.min_duration = 1\nmin_duration = 5\n", "u.conf",
                                              NULL, "Server", &s, &err),
                     LB_ERR_USAGE);
    assert_non_null(strstr(err.msg, "u.conf:2: expected 'model.scenario.key = value'"));
    assert_int_equal(lb_mlperf_log_conf_apply("*.*.min_query_count = many\n", "u.conf", NULL,
                                              "Server", &s, &err),
                     LB_ERR_USAGE);
    assert_non_null(strstr(err.msg, "u.conf:1: min_query_count = 'many' is not"));
    /* a count is whole; the percentile a fraction of 100 that LoadGen can use (not 100) */
    assert_int_equal(
        lb_mlperf_log_conf_apply("*.*.min_query_count = 1.5\n", "u.conf", NULL, "Server", &s, &err),
        LB_ERR_USAGE);
    assert_non_null(strstr(err.msg, "is not a non-negative integer below 2^63"));
    assert_int_equal(lb_mlperf_log_conf_apply("*.*.target_latency_percentile = 100\n", "u.conf",
                                              NULL, "Server", &s, &err),
                     LB_ERR_USAGE);
    assert_non_null(strstr(err.msg, "is not a number above 0 and below 100"));
}

static lb_loadgen_summary a_summary(void) {
    lb_loadgen_summary s;
    memset(&s, 0, sizeof s);
    s.scenario = LB_SCENARIO_SERVER;
    s.mode = LB_MODE_PERFORMANCE;
    s.constraints = lb_loadgen_constraints_default();
    s.constraints.ttft_limit_ms = 2000;
    s.constraints.tpot_limit_ms = 100;
    s.target_qps = 8;
    s.min_duration_s = 600;
    s.min_queries = 13368;
    s.sample_seed = LB_MLPERF_SAMPLE_INDEX_SEED;
    s.schedule_seed = LB_MLPERF_SCHEDULE_SEED;
    s.qsl_seed = LB_MLPERF_QSL_SEED;
    s.n_samples = 13368;
    s.issued = s.completed = 5000;
    s.valid = false;
    s.perf_ok = s.min_queries_ok = s.early_stop_ok = true;
    snprintf(s.reasons, sizeof s.reasons, "ran 599.1 s of the 600.0 s minimum");
    snprintf(s.warnings, sizeof s.warnings, "first \"warning\"\nsecond warning");
    s.n_warnings = 2;
    s.mlperf_samples_per_s = 7.95;
    s.scheduled_qps = 8.01;
    s.output_tok_per_s = 1017.6;
    s.mlperf_tok_per_s = 1019.3; /* the final query's done time, not the last done */
    s.ttft_ms = (lb_dist){.n = 3, .min = 10, .max = 30, .mean = 20};
    for (int i = 0; i < LB_N_PCTL; i++)
        s.ttft_ms.p[i] = 20 + i;
    s.tpot_ms = (lb_dist){.n = 0, .min = NAN, .max = NAN, .mean = NAN};
    for (int i = 0; i < LB_N_PCTL; i++)
        s.tpot_ms.p[i] = NAN;
    s.latency_ms = s.ttft_ms;
    return s;
}

/* The ":::MLLOG" lines as a key -> value object (the last value of a repeated key wins,
 * as MLPerf's log parser keeps it); fails on a line that is not LoadGen's format. */
static json_t *parse_detail(const char *text, int *n_messages) {
    json_t *kv = json_object();
    *n_messages = 0;
    for (const char *p = text; *p;) {
        size_t len = strcspn(p, "\n");
        char *line = strndup(p, len);
        p += len + (p[len] == '\n');
        if (strncmp(line, ":::MLLOG ", 9) != 0) fail_msg("not an MLLOG line: %s", line);
        json_error_t je;
        json_t *j = json_loads(line + 9, JSON_DECODE_INT_AS_REAL, &je); /* uint64 seeds */
        if (j == NULL) fail_msg("not JSON: %s (%s)", line, je.text);
        assert_true(json_is_string(json_object_get(j, "key")));
        assert_non_null(json_object_get(j, "value"));
        assert_true(json_is_number(json_object_get(j, "time_ms")));
        assert_string_equal(json_string_value(json_object_get(j, "namespace")), "mlperf::logging");
        assert_string_equal(json_string_value(json_object_get(j, "event_type")), "POINT_IN_TIME");
        assert_true(json_is_object(json_object_get(j, "metadata")));
        const char *key = json_string_value(json_object_get(j, "key"));
        if (strcmp(key, "generic_message") == 0) (*n_messages)++;
        json_object_set(kv, key, json_object_get(j, "value"));
        json_decref(j);
        free(line);
    }
    return kv;
}

static void test_mlperf_detail_log_reads_back_with_loadgen_keys(void **state) {
    (void)state;
    lb_loadgen_summary s = a_summary();
    lb_mlperf_detail_info info = {
        .sut_name = "http://gpu1:8000, model \"m\"", .version = "test", .start_wall_s = 1e9};
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    lb_mlperf_log_detail_write(f, &s, &info);
    fclose(f);
    int messages = 0;
    json_t *kv = parse_detail(text, &messages);
    assert_int_equal(messages, 2);
    assert_string_equal(json_string_value(json_object_get(kv, "result_validity")), "INVALID");
    assert_string_equal(json_string_value(json_object_get(kv, "effective_scenario")), "Server");
    assert_string_equal(json_string_value(json_object_get(kv, "sut_name")),
                        "http://gpu1:8000, model \"m\"");
    assert_string_equal(json_string_value(json_object_get(kv, "test_datetime")),
                        "2001-09-09T01:46:40Z");
    assert_true(json_is_false(json_object_get(kv, "result_min_duration_met")));
    assert_true(json_is_true(json_object_get(kv, "early_stopping_met")));
    assert_float_equal(json_number_value(json_object_get(kv, "result_completed_samples_per_sec")),
                       7.95, 0);
    assert_float_equal(json_number_value(json_object_get(kv, "result_scheduled_samples_per_sec")),
                       8.01, 0);
    assert_float_equal(json_number_value(json_object_get(kv, "result_completed_tokens_per_second")),
                       1019.3, 0);
    assert_float_equal(json_number_value(json_object_get(kv, "effective_min_duration_ms")), 600000,
                       0);
    assert_float_equal(json_number_value(json_object_get(kv, "effective_ttft_latency")), 2000000000,
                       0);
    assert_float_equal(json_number_value(json_object_get(kv, "effective_performance_sample_count")),
                       13368, 0);
    /* Seeds above 2^63 are written exactly (jansson reads them as reals). */
    assert_non_null(strstr(text, "\"effective_schedule_rng_seed\", \"value\": "
                                 "18209322760996052031,"));
    assert_float_equal(
        json_number_value(json_object_get(kv, "result_first_token_99.00_percentile_latency_ns")),
        24000000, 0);
    assert_float_equal(
        json_number_value(json_object_get(kv, "result_first_token_99.90_percentile_latency_ns")),
        25000000, 0);
    /* TPOT not measured: null, not 0. */
    assert_true(json_is_null(json_object_get(kv, "result_time_to_output_token_mean")));
    json_decref(kv);
    free(text);
}

/* LoadGen logs target_latency_percentile as the fraction its settings hold (0.99, 0.9),
 * and MLPerf's tools read it so: the percentile key they look up is
 * "result_%.2f_percentile_latency_ns" of the value times 100. */
static void test_mlperf_detail_log_percentile_is_a_fraction(void **state) {
    (void)state;
    lb_loadgen_summary s = a_summary();
    s.scenario = LB_SCENARIO_SINGLE_STREAM;
    s.constraints.percentile = 90;
    lb_mlperf_detail_info info = {.sut_name = "sut", .version = "test", .start_wall_s = 1e9};
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    lb_mlperf_log_detail_write(f, &s, &info);
    fclose(f);
    int messages = 0;
    json_t *kv = parse_detail(text, &messages);
    double eff = json_number_value(json_object_get(kv, "effective_target_latency_percentile"));
    assert_float_equal(eff, 0.9, 1e-12);
    assert_float_equal(
        json_number_value(json_object_get(kv, "requested_target_latency_percentile")), 0.9, 1e-12);
    char key[64];
    snprintf(key, sizeof key, "result_%.2f_percentile_latency_ns", eff * 100);
    assert_float_equal(json_number_value(json_object_get(kv, key)), 21000000, 0);
    json_decref(kv);
    free(text);
}

static void test_mlperf_accuracy_log_holds_token_ids_in_hex(void **state) {
    (void)state;
    uint32_t a_ids[] = {1, 128000, 0xDEADBEEF}, b_ids[] = {42};
    lb_mlperf_answer ans[] = {{.seq_id = 0, .qsl_idx = 7, .ids = a_ids, .n_ids = 3},
                              {.seq_id = 1, .qsl_idx = 2, .ids = b_ids, .n_ids = 1}};
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    lb_mlperf_log_accuracy_write(f, ans, 2);
    fclose(f);
    json_error_t je;
    json_t *arr = json_loads(text, 0, &je);
    if (arr == NULL) fail_msg("not JSON: %s", je.text);
    assert_int_equal(json_array_size(arr), 2);
    json_t *e = json_array_get(arr, 0);
    assert_int_equal(json_integer_value(json_object_get(e, "qsl_idx")), 7);
    assert_int_equal(json_integer_value(json_object_get(e, "token_count")), 3);
    const char *hex = json_string_value(json_object_get(e, "data"));
    assert_int_equal(strlen(hex), 24);
    /* Decoded as numpy's int32 little-endian array would be. */
    for (int k = 0; k < 3; k++) {
        uint32_t v = 0;
        for (int b = 0; b < 4; b++) {
            unsigned byte;
            assert_int_equal(sscanf(hex + 8 * k + 2 * b, "%2X", &byte), 1);
            v |= (uint32_t)byte << (8 * b);
        }
        assert_int_equal(v, a_ids[k]);
    }
    assert_string_equal(json_string_value(json_object_get(json_array_get(arr, 1), "data")),
                        "2A000000");
    json_decref(arr);
    free(text);
}

/* The summary's sections are LoadGen's "key : value" lines; its checker reads them so. */
static void test_mlperf_summary_lines_are_key_colon_value(void **state) {
    (void)state;
    lb_loadgen_summary s = a_summary();
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    lb_loadgen_summary_write(f, &s, "sut");
    fclose(f);
    const char *params = strstr(text, "Test Parameters Used\n");
    assert_non_null(params);
    params = strchr(strchr(params, '\n') + 1, '\n') + 1; /* past the rule */
    int n = 0;
    bool seen_seed = false;
    for (const char *p = params; *p && *p != '\n';) {
        size_t l = strcspn(p, "\n");
        char *line = strndup(p, l);
        p += l + 1;
        char *colon = strstr(line, " : ");
        if (colon == NULL) colon = strstr(line, ": ");
        if (colon == NULL) fail_msg("not 'key : value': %s", line);
        if (strncmp(line, "schedule_rng_seed : 18209322760996052031", 40) == 0) seen_seed = true;
        n++;
        free(line);
    }
    assert_true(n >= 20);
    assert_true(seen_seed);
    assert_non_null(strstr(text, "Result is : INVALID\n"));
    free(text);
}

/* "Test Parameters Used" carries the seeds the run used, the QSL's included (it printed
 * 0 whatever the seed), and the performance set's size. */
static void test_mlperf_summary_carries_the_seeds_used(void **state) {
    (void)state;
    lb_loadgen_summary s = a_summary();
    s.sample_seed = 43;
    s.schedule_seed = 44;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    lb_loadgen_summary_write(f, &s, "sut");
    fclose(f);
    assert_non_null(strstr(text, "\nqsl_rng_seed : 1780908523862526354\n"));
    assert_non_null(strstr(text, "\nsample_index_rng_seed : 43\n"));
    assert_non_null(strstr(text, "\nschedule_rng_seed : 44\n"));
    free(text);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mlperf_conf_lookup_order_and_override),
        cmocka_unit_test(test_mlperf_detail_log_reads_back_with_loadgen_keys),
        cmocka_unit_test(test_mlperf_detail_log_percentile_is_a_fraction),
        cmocka_unit_test(test_mlperf_accuracy_log_holds_token_ids_in_hex),
        cmocka_unit_test(test_mlperf_summary_lines_are_key_colon_value),
        cmocka_unit_test(test_mlperf_summary_carries_the_seeds_used),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
