/* test_provenance.c: the recorded environment is filtered and secrets never leave; what
 * the host and the environment say that is not UTF-8 is kept, its bytes as '?' (the host
 * name and OS name are set in a user namespace of the test's own; where none can be made
 * that test is skipped). */
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/provenance.h"
#include "test_skip.h"

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

/* A recorded variable whose name or value is not UTF-8 (a Latin-1 value) is kept, each
 * byte that starts no character as '?': jansson makes no string of such bytes. */
static void test_provenance_env_that_is_not_utf8_is_kept_repaired(void **state) {
    (void)state;
    setenv("LLMBENCH_LABEL", "caf\xe9 cr\xe8me", 1);
    setenv("NCCL_\xe9T\xe9", "on", 1);
    json_t *p = lb_provenance_collect(0, NULL);
    json_t *env = json_object_get(p, "env");
    const char *label = json_string_value(json_object_get(env, "LLMBENCH_LABEL"));
    const char *named = json_string_value(json_object_get(env, "NCCL_?T?"));
    assert_non_null(label);
    assert_string_equal(label, "caf? cr?me");
    assert_non_null(named);
    assert_string_equal(named, "on");
    json_decref(p);
    unsetenv("LLMBENCH_LABEL");
    unsetenv("NCCL_\xe9T\xe9");
}

/* In a child with user, host-name and mount namespaces of its own: the host name set to
 * Latin-1 bytes and /etc/os-release covered by a file whose PRETTY_NAME is, provenance
 * collected. 0 when both are kept repaired, 1 (saying what came) when not, 77 when the
 * namespaces cannot be made. */
static int host_facts_in_a_namespace(const char *os_release) {
    if (unshare(CLONE_NEWUSER | CLONE_NEWUTS | CLONE_NEWNS) != 0) return 77;
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
        mount(os_release, "/etc/os-release", NULL, MS_BIND, NULL) != 0 ||
        sethostname("node-\xe9", 6) != 0)
        return 77;
    json_t *p = lb_provenance_collect(0, NULL);
    const char *host = json_string_value(json_object_get(p, "hostname"));
    const char *os = json_string_value(json_object_get(p, "os"));
    bool ok = host && os && strcmp(host, "node-?") == 0 && strcmp(os, "Caf? Linux 1") == 0;
    if (!ok) fprintf(stderr, "hostname %s, os %s\n", host ? host : "missing", os ? os : "missing");
    json_decref(p);
    return ok ? 0 : 1;
}

static void test_provenance_host_and_os_names_that_are_not_utf8_are_kept(void **state) {
    (void)state;
    char os_release[] = "/tmp/lbtest-os-release-XXXXXX";
    int fd = mkstemp(os_release);
    assert_true(fd >= 0);
    const char text[] = "NAME=Caf\xe9\nPRETTY_NAME=\"Caf\xe9 Linux 1\"\n";
    assert_int_equal(write(fd, text, sizeof text - 1), (ssize_t)(sizeof text - 1));
    close(fd);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) _exit(host_facts_in_a_namespace(os_release));
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    unlink(os_release);
    assert_true(WIFEXITED(status));
    LB_TEST_SKIP_UNLESS(WEXITSTATUS(status) != 77,
                        "no user namespace to set a host name and cover /etc/os-release in");
    assert_int_equal(WEXITSTATUS(status), 0);
}

int main(int argc, char **argv) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_provenance_secrets_are_redacted),
        cmocka_unit_test(test_provenance_masks_secret_words_not_names_that_contain_them),
        cmocka_unit_test(test_provenance_records_only_run_shaping_variables),
        cmocka_unit_test(test_provenance_env_that_is_not_utf8_is_kept_repaired),
        cmocka_unit_test(test_provenance_host_and_os_names_that_are_not_utf8_are_kept),
    };
    return lb_test_main(tests, sizeof tests / sizeof tests[0], NULL, NULL, argc, argv);
}
