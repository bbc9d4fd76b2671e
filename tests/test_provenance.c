/* test_provenance.c: the recorded environment is filtered and secrets never leave. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/provenance.h"

static void test_provenance_secrets_are_redacted(void **state) {
    (void)state;
    setenv("LLMBENCH_API_KEY", "hunter2-env", 1);
    setenv("NCCL_IB_PASSWORD", "hunter2-nccl", 1);
    setenv("SLURM_JOB_TOKEN", "hunter2-slurm", 1);
    setenv("NCCL_DEBUG", "INFO", 1);
    char *argv[] = {"llmbench", "load",       "--api-key=hunter2-argv", "--model",
                    "m",        "--hf-token", "hunter2-spaced"};
    json_t *p = lb_provenance_collect(7, argv);
    char *text = json_dumps(p, JSON_COMPACT);
    assert_null(strstr(text, "hunter2"));
    json_t *env = json_object_get(p, "env");
    assert_string_equal(json_string_value(json_object_get(env, "LLMBENCH_API_KEY")), "***");
    assert_string_equal(json_string_value(json_object_get(env, "NCCL_IB_PASSWORD")), "***");
    assert_string_equal(json_string_value(json_object_get(env, "SLURM_JOB_TOKEN")), "***");
    assert_string_equal(json_string_value(json_object_get(env, "NCCL_DEBUG")), "INFO");
    json_t *cmd = json_object_get(p, "command_line");
    assert_string_equal(json_string_value(json_array_get(cmd, 2)), "--api-key=***");
    assert_string_equal(json_string_value(json_array_get(cmd, 4)), "m");
    assert_string_equal(json_string_value(json_array_get(cmd, 5)), "--hf-token");
    assert_string_equal(json_string_value(json_array_get(cmd, 6)), "***");
    free(text);
    json_decref(p);
}

static void test_provenance_masks_secret_words_not_names_that_contain_them(void **state) {
    (void)state;
    setenv("NCCL_IB_PASS", "hunter2-pass", 1);
    setenv("SLURM_AUTH", "hunter2-auth", 1);
    setenv("LLMBENCH_CREDENTIALS", "hunter2-cred", 1);
    setenv("LLMBENCH_APIKEY", "hunter2-apikey", 1);
    setenv("LLMBENCH_MAX_TOKENS", "512", 1);
    setenv("LLMBENCH_PROXY", "http://carol:hunter2-url@proxy:3128/", 1);
    char *argv[] = {"llmbench",      "load",
                    "--model-key",   "llama3.1-8b",
                    "--max-tokens",  "64",
                    "--tokenizer",   "tok.model",
                    "--endpoint",    "http://bob:hunter2-arg@gpu1:8000/v1",
                    "--api-key-env", "MY_KEY_VAR"};
    json_t *p = lb_provenance_collect(12, argv);
    char *text = json_dumps(p, JSON_COMPACT);
    assert_null(strstr(text, "hunter2"));
    json_t *env = json_object_get(p, "env");
    assert_string_equal(json_string_value(json_object_get(env, "NCCL_IB_PASS")), "***");
    assert_string_equal(json_string_value(json_object_get(env, "SLURM_AUTH")), "***");
    assert_string_equal(json_string_value(json_object_get(env, "LLMBENCH_CREDENTIALS")), "***");
    assert_string_equal(json_string_value(json_object_get(env, "LLMBENCH_APIKEY")), "***");
    assert_string_equal(json_string_value(json_object_get(env, "LLMBENCH_MAX_TOKENS")), "512");
    assert_string_equal(json_string_value(json_object_get(env, "LLMBENCH_PROXY")),
                        "http://***@proxy:3128/");
    json_t *cmd = json_object_get(p, "command_line");
    assert_string_equal(json_string_value(json_array_get(cmd, 3)), "llama3.1-8b");
    assert_string_equal(json_string_value(json_array_get(cmd, 5)), "64");
    assert_string_equal(json_string_value(json_array_get(cmd, 7)), "tok.model");
    assert_string_equal(json_string_value(json_array_get(cmd, 9)), "http://***@gpu1:8000/v1");
    assert_string_equal(json_string_value(json_array_get(cmd, 11)), "MY_KEY_VAR");
    free(text);
    json_decref(p);
    char out[64];
    lb_provenance_mask_url("a http://u@h/x@y and https://v:w@k?q=@", out, sizeof out);
    assert_string_equal(out, "a http://***@h/x@y and https://***@k?q=@");
    lb_provenance_mask_url("no url here", out, sizeof out);
    assert_string_equal(out, "no url here");
    /* an argument that is not UTF-8 (a Latin-1 file name) is kept, its byte as '?' */
    char *latin1[] = {"llmbench", "infer", "--dataset", "donn\xe9.jsonl"};
    p = lb_provenance_collect(4, latin1);
    cmd = json_object_get(p, "command_line");
    assert_int_equal(json_array_size(cmd), 4);
    assert_string_equal(json_string_value(json_array_get(cmd, 3)), "donn?.jsonl");
    json_decref(p);
}

static void test_provenance_records_only_run_shaping_variables(void **state) {
    (void)state;
    setenv("HOME_GROWN_VAR", "x", 1);
    setenv("OMP_NUM_THREADS", "3", 1);
    setenv("RANK", "0", 1);
    setenv("RANKING", "no", 1);
    json_t *p = lb_provenance_collect(0, NULL);
    json_t *env = json_object_get(p, "env");
    assert_null(json_object_get(env, "HOME_GROWN_VAR"));
    assert_null(json_object_get(env, "RANKING"));
    assert_string_equal(json_string_value(json_object_get(env, "OMP_NUM_THREADS")), "3");
    assert_string_equal(json_string_value(json_object_get(env, "RANK")), "0");
    assert_true(json_integer_value(json_object_get(p, "cpu_cores")) >= 1);
    assert_true(json_integer_value(json_object_get(p, "host_mem_bytes")) > 0);
    assert_non_null(json_string_value(json_object_get(p, "hostname")));
    assert_non_null(json_object_get(json_object_get(p, "libraries"), "sqlite"));
    json_decref(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_provenance_secrets_are_redacted),
        cmocka_unit_test(test_provenance_masks_secret_words_not_names_that_contain_them),
        cmocka_unit_test(test_provenance_records_only_run_shaping_variables),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
