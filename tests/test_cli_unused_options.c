/* test_cli_unused_options.c: an option that a command line would not use is refused with
 * exit 2 and one line naming it, never ignored: serve's engine options with --synthetic and
 * its synthetic timing with the engine, --gpu and --gpu-memory-fraction with --device cpu,
 * --weight-seed with --model DIR, tokenize's --repeat with --ids, load's search, tokenizer
 * and prefix options without the option they shape and --max-inflight outside Offline and
 * Server. And serve --random
 * without a tokenizer is refused before the engine is opened. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "test_util.h"

static char out[8192], err[8192];

/* Runs llmbench with args (without argv[0]) for at most 30 s: a server that accepted what
 * it should refuse would run until killed, and is then killed and the test fails. Returns
 * the exit code with stdout and stderr in out and err. */
static int run_bounded(const char *const *args) {
    const char *argv[64] = {LB_TEST_BIN};
    for (int i = 0; args[i] != NULL && i < 62; i++)
        argv[i + 1] = args[i];
    int out_fd = -1, err_fd = -1;
    pid_t pid = lb_test_spawn(LB_TEST_BIN, argv, &out_fd, &err_fd);
    assert_true(pid > 0);
    int status = 0;
    bool exited = false;
    for (int waited_ms = 0; waited_ms < 30000 && !exited; waited_ms += 10) {
        exited = waitpid(pid, &status, WNOHANG) == pid;
        if (!exited) nanosleep(&(struct timespec){.tv_nsec = 10000000}, NULL);
    }
    if (!exited) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    lb_test_slurp(out_fd, out, sizeof out);
    lb_test_slurp(err_fd, err, sizeof err);
    close(out_fd);
    close(err_fd);
    if (!exited) fail_msg("still running after 30 s; stdout: %s", out);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* Runs args; expects exit 2, nothing on stdout and one line on stderr holding each of the
 * NULL-terminated wanted strings. */
static void expect_refused(const char *const *args, ...) {
    int rc = run_bounded(args);
    if (rc != 2) fail_msg("exit %d, want 2; stderr: %s", rc, err);
    assert_string_equal(out, "");
    const char *nl = strchr(err, '\n');
    if (nl == NULL || nl[1] != '\0') fail_msg("stderr is not one line: '%s'", err);
    va_list ap;
    va_start(ap, args);
    for (const char *want = va_arg(ap, const char *); want; want = va_arg(ap, const char *))
        if (strstr(err, want) == NULL) fail_msg("stderr lacks '%s': '%s'", want, err);
    va_end(ap);
}

static void test_serve_synthetic_refuses_engine_options(void **state) {
    (void)state;
    expect_refused((const char *[]){"serve", "--synthetic", "--port", "0", "--device", "cpu", NULL},
                   "--device is an option of the engine", "--synthetic", NULL);
    expect_refused(
        (const char *[]){"serve", "--synthetic", "--port", "0", "--temperature", "0.7", NULL},
        "--temperature", NULL);
    expect_refused((const char *[]){"serve", "--synthetic", "--port", "0", "--tokenizer",
                                    LB_TEST_FIXTURES "/tokenizer/gpt2.tiktoken", NULL},
                   "--tokenizer", NULL);
    expect_refused((const char *[]){"serve", "--synthetic", "--port", "0", "--max-seqs", "4", NULL},
                   "--max-seqs", NULL);
}

static void test_serve_engine_refuses_synthetic_timing(void **state) {
    (void)state;
    expect_refused((const char *[]){"serve", "--random", "llama-tiny", "--device", "cpu",
                                    "--tokenizer", LB_TEST_FIXTURES "/tokenizer/gpt2.tiktoken",
                                    "--port", "0", "--tpot-ms", "5", NULL},
                   "--tpot-ms", "--synthetic", NULL);
    expect_refused((const char *[]){"serve", "--random", "llama-tiny", "--device", "cpu",
                                    "--tokenizer", LB_TEST_FIXTURES "/tokenizer/gpt2.tiktoken",
                                    "--port", "0", "--slots", "2", NULL},
                   "--slots", NULL);
}

static void test_serve_random_without_tokenizer_is_refused_up_front(void **state) {
    (void)state;
    expect_refused(
        (const char *[]){"serve", "--random", "llama-tiny", "--device", "cpu", "--port", "0", NULL},
        "--random llama-tiny has no tokenizer", "--tokenizer FILE", NULL);
}

static void test_cpu_engine_refuses_gpu_options(void **state) {
    (void)state;
    expect_refused((const char *[]){"infer", "--random", "llama-tiny", "--device", "cpu", "--gpu",
                                    "1", "--synthetic", "1", NULL},
                   "--gpu is for the GPU", "--device cpu", NULL);
    expect_refused((const char *[]){"infer", "--random", "llama-tiny", "--device", "cpu",
                                    "--gpu-memory-fraction", "0.5", "--synthetic", "1", NULL},
                   "--gpu-memory-fraction", NULL);
    expect_refused((const char *[]){"infer", "--model", "/nonexistent", "--device", "cpu",
                                    "--weight-seed", "3", "--synthetic", "1", NULL},
                   "--weight-seed", NULL);
}

static void test_tokenize_ids_refuses_repeat(void **state) {
    (void)state;
    char path[] = "/tmp/lbtest-idsXXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "hello world", 11), 11);
    close(fd);
    expect_refused((const char *[]){"tokenize", "--tokenizer",
                                    LB_TEST_FIXTURES "/tokenizer/gpt2.tiktoken", "--ids",
                                    "--repeat", "3", path, NULL},
                   "--repeat", "--ids", NULL);
    unlink(path);
}

static void test_load_refuses_options_its_run_would_not_use(void **state) {
    (void)state;
    /* the usage is judged before any connection: no server is needed */
    expect_refused((const char *[]){"load", "--endpoint", "http://127.0.0.1:1", "--synthetic", "2",
                                    "--search-trials", "3", NULL},
                   "--search-trials", "--search-qps", NULL);
    expect_refused((const char *[]){"load", "--endpoint", "http://127.0.0.1:1", "--synthetic", "2",
                                    "--search-tolerance", "0.2", NULL},
                   "--search-tolerance", NULL);
    expect_refused((const char *[]){"load", "--endpoint", "http://127.0.0.1:1", "--synthetic", "2",
                                    "--tokenizer-pattern", "gpt2", NULL},
                   "--tokenizer-pattern", "--tokenizer FILE", NULL);
    expect_refused((const char *[]){"load", "--endpoint", "http://127.0.0.1:1", "--synthetic", "2",
                                    "--prefix-count", "3", NULL},
                   "--prefix-count 3", "--prefix-len", NULL);
    expect_refused((const char *[]){"load", "--endpoint", "http://127.0.0.1:1", "--synthetic", "2",
                                    "--concurrency", "2", "--max-inflight", "8", NULL},
                   "--max-inflight", "--concurrency N", NULL);
    expect_refused((const char *[]){"infer", "--random", "llama-tiny", "--device", "cpu",
                                    "--synthetic", "2", "--search-trials", "3", NULL},
                   "--search-trials", NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_serve_synthetic_refuses_engine_options),
        cmocka_unit_test(test_serve_engine_refuses_synthetic_timing),
        cmocka_unit_test(test_serve_random_without_tokenizer_is_refused_up_front),
        cmocka_unit_test(test_cpu_engine_refuses_gpu_options),
        cmocka_unit_test(test_tokenize_ids_refuses_repeat),
        cmocka_unit_test(test_load_refuses_options_its_run_would_not_use),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
