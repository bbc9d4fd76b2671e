/* test_serve_cli.c: `llmbench serve` as a program: the port line, serving, exit codes,
 * signals and the counters printed on exit. */
#include <curl/curl.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
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

#include "core/clock.h"
#include "test_util.h"

typedef struct {
    pid_t pid;
    int out_fd, err_fd; /* the child's stdout and stderr */
} child;

static child spawn(const char *const *args) {
    int out[2], err[2];
    assert_int_equal(pipe(out), 0);
    assert_int_equal(pipe(err), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        lb_test_die_with_parent();
        dup2(out[1], 1);
        dup2(err[1], 2);
        close(out[0]);
        close(err[0]);
        execv(LB_TEST_BIN, (char *const *)args);
        _exit(127);
    }
    close(out[1]);
    close(err[1]);
    return (child){.pid = pid, .out_fd = out[0], .err_fd = err[0]};
}

/* Reads fd until EOF or timeout_ms, into buf (NUL-terminated); stops after the first
 * newline when one_line. */
static size_t read_fd(int fd, char *buf, size_t cap, int timeout_ms, bool one_line) {
    size_t len = 0;
    int64_t deadline = lb_clock_now_ns() + (int64_t)timeout_ms * 1000000;
    while (len + 1 < cap) {
        int left_ms = (int)((deadline - lb_clock_now_ns()) / 1000000);
        if (left_ms <= 0) break;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, left_ms) <= 0) break;
        ssize_t n = read(fd, buf + len, one_line ? 1 : cap - 1 - len);
        if (n <= 0) break;
        len += (size_t)n;
        if (one_line && buf[len - 1] == '\n') break;
    }
    buf[len] = '\0';
    return len;
}

/* Waits for the child's exit for up to timeout_ms; returns its exit code, -1 on timeout
 * (the child is then killed). */
static int wait_exit(pid_t pid, int timeout_ms) {
    for (int waited = 0; waited < timeout_ms; waited += 10) {
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid)
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        nanosleep(&(struct timespec){.tv_nsec = 10000000}, NULL);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
}

static size_t discard(char *d, size_t s, size_t n, void *u) {
    (void)d;
    (void)u;
    return s * n;
}

static long post(int port, const char *body) {
    char url[96];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/completions", port);
    CURL *c = curl_easy_init();
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 5000L);
    long status = 0;
    if (curl_easy_perform(c) == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(c);
    return status;
}

/* Starts `serve` on port 0 and returns the port from its first line (on stderr with
 * --json, whose stdout holds only the JSON document). */
static int start_serve(child *ch, const char *const *args, bool json) {
    *ch = spawn(args);
    char line[256];
    read_fd(json ? ch->err_fd : ch->out_fd, line, sizeof line, 10000, true);
    int port = 0;
    if (sscanf(line, "listening on http://127.0.0.1:%d", &port) != 1)
        fail_msg("first line is not 'listening on http://127.0.0.1:PORT': '%s'", line);
    assert_true(port > 0 && port < 65536);
    return port;
}

static void check_stops_on(int signo) {
    const char *const args[] = {LB_TEST_BIN, "serve", "--synthetic", "--port", "0",
                                "--threads", "2",     "--json",      NULL};
    child ch;
    int port = start_serve(&ch, args, true);
    assert_int_equal(post(port, "{\"prompt\":\"a b\",\"max_tokens\":3}"), 200);
    assert_int_equal(post(port, "{\"prompt\":\"a b\",\"max_tokens\":4,\"stream\":true}"), 200);
    assert_int_equal(post(port, "{\"prompt\":"), 400);
    kill(ch.pid, signo);
    assert_int_equal(wait_exit(ch.pid, 10000), 0);
    char out[1024];
    read_fd(ch.out_fd, out, sizeof out, 2000, false);
    json_error_t je;
    json_t *j = json_loads(out, 0, &je); /* the whole of stdout: one document */
    if (!j) fail_msg("stdout is not one JSON document (%s): '%s'", je.text, out);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", port);
    assert_string_equal(json_string_value(json_object_get(j, "url")), url);
    assert_int_equal(json_integer_value(json_object_get(j, "requests")), 3);
    assert_int_equal(json_integer_value(json_object_get(j, "streamed")), 1);
    assert_int_equal(json_integer_value(json_object_get(j, "completed")), 2);
    assert_int_equal(json_integer_value(json_object_get(j, "client_errors")), 1);
    assert_int_equal(json_integer_value(json_object_get(j, "tokens")), 7);
    json_decref(j);
    close(ch.out_fd);
    close(ch.err_fd);
}

static void test_serve_cli_prints_port_and_exits_0_on_sigterm(void **state) {
    (void)state;
    check_stops_on(SIGTERM);
}

static void test_serve_cli_exits_0_on_sigint(void **state) {
    (void)state;
    check_stops_on(SIGINT);
}

static void test_serve_cli_prints_counters_on_stderr(void **state) {
    (void)state;
    const char *const args[] = {LB_TEST_BIN, "serve", "--synthetic", "--port", "0",
                                "--threads", "1",     "--fault",     "500",    NULL};
    child ch;
    int port = start_serve(&ch, args, false);
    assert_int_equal(post(port, "{\"prompt\":\"x\"}"), 500);
    kill(ch.pid, SIGTERM);
    assert_int_equal(wait_exit(ch.pid, 10000), 0);
    char err[2048];
    read_fd(ch.err_fd, err, sizeof err, 2000, false);
    assert_non_null(strstr(err, "1 completion requests"));
    assert_non_null(strstr(err, "1 faults"));
    close(ch.out_fd);
    close(ch.err_fd);
}

static void check_usage_error(const char *const *args, const char *expected) {
    child ch = spawn(args);
    assert_int_equal(wait_exit(ch.pid, 10000), 2);
    char err[2048];
    read_fd(ch.err_fd, err, sizeof err, 2000, false);
    if (!strstr(err, expected)) fail_msg("stderr lacks '%s': '%s'", expected, err);
    close(ch.out_fd);
    close(ch.err_fd);
}

static void test_serve_cli_without_synthetic_says_engine_missing_and_exits_2(void **state) {
    (void)state;
    const char *const args[] = {LB_TEST_BIN, "serve", "--port", "0", NULL};
    check_usage_error(args, "not available");
}

static void test_serve_cli_rejects_bad_options_with_exit_2(void **state) {
    (void)state;
    const char *const fault[] = {LB_TEST_BIN, "serve", "--synthetic", "--fault", "explode", NULL};
    check_usage_error(fault, "--fault");
    const char *const rate[] = {LB_TEST_BIN, "serve", "--synthetic", "--fault-rate", "1.5", NULL};
    check_usage_error(rate, "--fault-rate");
    const char *const port[] = {LB_TEST_BIN, "serve", "--synthetic", "--port", "70000", NULL};
    check_usage_error(port, "--port");
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_serve_cli_prints_port_and_exits_0_on_sigterm),
        cmocka_unit_test(test_serve_cli_exits_0_on_sigint),
        cmocka_unit_test(test_serve_cli_prints_counters_on_stderr),
        cmocka_unit_test(test_serve_cli_without_synthetic_says_engine_missing_and_exits_2),
        cmocka_unit_test(test_serve_cli_rejects_bad_options_with_exit_2),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return failed;
}
