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
#include "hf_fixture.h"
#include "model/model.h"
#include "test_util.h"

typedef struct {
    pid_t pid;
    int out_fd, err_fd; /* the child's stdout and stderr */
} child;

static child spawn(const char *const *args) {
    child ch = {0};
    ch.pid = lb_test_spawn(LB_TEST_BIN, args, &ch.out_fd, &ch.err_fd);
    assert_true(ch.pid > 0);
    return ch;
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

static long post_keep(int port, const char *path, const char *json, lb_test_body *b) {
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
    CURL *c = curl_easy_init();
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, json);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, lb_test_keep);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, b);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, b ? 60000L : 5000L);
    long status = 0;
    if (curl_easy_perform(c) == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(c);
    return status;
}

static long post(int port, const char *json) {
    return post_keep(port, "/v1/completions", json, NULL);
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

/* GET path with an Accept header (NULL: none) into b; returns the status, the content type
 * into type. */
static long get_keep(int port, const char *path, const char *accept, lb_test_body *b, char *type,
                     size_t type_cap) {
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
    CURL *c = curl_easy_init();
    struct curl_slist *h = NULL;
    if (accept) {
        char line[160];
        snprintf(line, sizeof line, "Accept: %s", accept);
        h = curl_slist_append(h, line);
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    }
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, lb_test_keep);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, b);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 5000L);
    long status = 0;
    if (curl_easy_perform(c) == CURLE_OK) {
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
        char *ct = NULL;
        curl_easy_getinfo(c, CURLINFO_CONTENT_TYPE, &ct);
        snprintf(type, type_cap, "%s", ct ? ct : "");
    }
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return status;
}

/* Parses text with Debian's python3-prometheus-client (the Prometheus text parser, or the
 * OpenMetrics one) and checks that the named samples have the values given, as
 * "name[sorted label items]=value;..." (python's repr of the items). Returns the
 * parser's exit status (0 when every sample matched). */
static int parse_with_prometheus_client(const char *text, bool openmetrics, const char *want) {
    char path[] = "/tmp/lbtest-metricsXXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    setenv("LB_METRICS_WANT", want, 1);
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 -c \"import os, sys\n"
             "from prometheus_client%s.parser import text_string_to_metric_families as p\n"
             "got = {s.name + repr(sorted(s.labels.items())): s.value\n"
             "       for f in p(open('%s').read()) for s in f.samples}\n"
             "want = os.environ['LB_METRICS_WANT'].split(';')\n"
             "bad = [w for w in want if got.get(w.rsplit('=', 1)[0]) != "
             "float(w.rsplit('=', 1)[1])]\n"
             "print(bad, got) if bad else None\n"
             "sys.exit(1 if bad else 0)\"",
             openmetrics ? ".openmetrics" : "", path);
    int rc = system(cmd);
    unlink(path);
    return rc;
}

/* /metrics: the counters and histograms, in Prometheus text and, when asked, OpenMetrics,
 * as Prometheus' own client library reads them. */
static void test_serve_cli_metrics_count_requests_tokens_and_latencies(void **state) {
    (void)state;
    const char *const args[] = {LB_TEST_BIN, "serve", "--synthetic", "--port",     "0",
                                "--threads", "2",     "--model",     "tiny \"m\"", NULL};
    child ch;
    int port = start_serve(&ch, args, false);
    for (int i = 0; i < 3; i++)
        assert_int_equal(post(port, "{\"prompt\":\"a b\",\"max_tokens\":3}"), 200);
    for (int i = 0; i < 2; i++)
        assert_int_equal(post(port, "{\"prompt\":\"a b\",\"max_tokens\":5,\"stream\":true}"), 200);
    assert_int_equal(post(port, "{\"prompt\":"), 400);
    /* a client has its whole answer a moment before the server's completion callback
     * counts the request done: read until nothing is in flight (5 s at most) */
    lb_test_body b = {0};
    char type[128];
    const char *idle = "llmbench_serve_in_flight_requests{model=\"tiny \\\"m\\\"\"} 0\n";
    for (int64_t until = lb_clock_now_ns() + 5000000000LL;;) {
        assert_int_equal(get_keep(port, "/metrics", NULL, &b, type, sizeof type), 200);
        if (strstr(b.p, idle) != NULL || lb_clock_now_ns() > until) break;
        free(b.p);
        b = (lb_test_body){0};
        nanosleep(&(struct timespec){.tv_nsec = 10000000}, NULL);
    }
    assert_string_equal(type, "text/plain; version=0.0.4; charset=utf-8");
    const char *lines[] = {
        "# TYPE llmbench_serve_requests_total counter\n",
        "llmbench_serve_requests_total{model=\"tiny \\\"m\\\"\"} 6\n",
        "llmbench_serve_streamed_requests_total{model=\"tiny \\\"m\\\"\"} 2\n",
        "llmbench_serve_completed_requests_total{model=\"tiny \\\"m\\\"\"} 5\n",
        "llmbench_serve_client_errors_total{model=\"tiny \\\"m\\\"\"} 1\n",
        "llmbench_serve_output_tokens_total{model=\"tiny \\\"m\\\"\"} 19\n",
        "llmbench_serve_in_flight_requests{model=\"tiny \\\"m\\\"\"} 0\n",
        "# TYPE llmbench_serve_request_duration_seconds histogram\n",
        "llmbench_serve_request_duration_seconds_bucket{model=\"tiny \\\"m\\\"\",le=\"+Inf\"} 5\n",
        "llmbench_serve_request_duration_seconds_count{model=\"tiny \\\"m\\\"\"} 5\n",
        "llmbench_serve_time_to_first_token_seconds_count{model=\"tiny \\\"m\\\"\"} 2\n",
    };
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++)
        if (strstr(b.p, lines[i]) == NULL) fail_msg("/metrics lacks '%s':\n%s", lines[i], b.p);
    assert_null(strstr(b.p, "# EOF"));
    assert_null(strstr(b.p, "# UNIT"));
    static const char want[] =
        "llmbench_serve_requests_total[('model', 'tiny \"m\"')]=6;"
        "llmbench_serve_output_tokens_total[('model', 'tiny \"m\"')]=19;"
        "llmbench_serve_request_duration_seconds_count[('model', 'tiny \"m\"')]=5;"
        "llmbench_serve_time_to_first_token_seconds_bucket[('le', '+Inf'), ('model', 'tiny "
        "\"m\"')]=2;"
        "llmbench_serve_closed_connections_total[('model', 'tiny \"m\"'), ('reason', 'idle')]=0";
    if (system("/usr/bin/python3 -c 'import prometheus_client' 2>/dev/null") != 0)
        fail_msg("python3-prometheus-client (deps/apt-packages.txt) is not installed");
    assert_int_equal(parse_with_prometheus_client(b.p, false, want), 0);
    free(b.p);

    lb_test_body om = {0};
    assert_int_equal(get_keep(port, "/metrics",
                              "application/openmetrics-text; version=1.0.0,text/plain;q=0.5", &om,
                              type, sizeof type),
                     200);
    assert_string_equal(type, "application/openmetrics-text; version=1.0.0; charset=utf-8");
    assert_non_null(strstr(om.p, "# TYPE llmbench_serve_requests counter\n"));
    assert_non_null(strstr(om.p, "# UNIT llmbench_serve_request_duration_seconds seconds\n"));
    assert_non_null(strstr(om.p, "\n# EOF\n"));
    assert_int_equal(parse_with_prometheus_client(om.p, true, want), 0);
    free(om.p);
    kill(ch.pid, SIGTERM);
    assert_int_equal(wait_exit(ch.pid, 10000), 0);
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

static void test_serve_cli_without_a_token_source_says_which_and_exits_2(void **state) {
    (void)state;
    const char *const args[] = {LB_TEST_BIN, "serve", "--port", "0", NULL};
    check_usage_error(args, "--random PRESET");
    const char *const bad[] = {LB_TEST_BIN, "serve", "--model", "/nonexistent",
                               "--device",  "cpu",   NULL};
    check_usage_error(bad, "/nonexistent: no config.json");
}

static void test_serve_cli_generates_with_the_engine_on_a_model_directory(void **state) {
    (void)state;
    char dir[64];
    lb_test_tmpdir(dir, sizeof dir);
    lb_model_config cfg = lb_fixture_config();
    lb_model m;
    lb_err err;
    assert_int_equal(lb_model_init(&m, &cfg, 1, 1, 5, &err), LB_OK);
    lb_fixture_write_dir(dir, &cfg, m.params, true, false);
    lb_model_free(&m);
    const char *const args[] = {LB_TEST_BIN,    "serve", "--model",    dir, "--device",      "cpu",
                                "--port",       "0",     "--max-seqs", "4", "--step-tokens", "32",
                                "--ignore-eos", NULL};
    child ch;
    int port = start_serve(&ch, args, false);
    lb_test_body b = {0};
    assert_int_equal(
        post_keep(port, "/v1/completions", "{\"prompt\":\"hello world\",\"max_tokens\":6}", &b),
        200);
    json_t *j = json_loads(b.p, 0, NULL);
    assert_non_null(j);
    json_t *usage = json_object_get(j, "usage");
    assert_int_equal(json_integer_value(json_object_get(usage, "prompt_tokens")), 3);
    assert_int_equal(json_integer_value(json_object_get(usage, "completion_tokens")), 6);
    const char *text = json_string_value(
        json_object_get(json_array_get(json_object_get(j, "choices"), 0), "text"));
    assert_non_null(text);
    assert_true(strlen(text) > 0);
    json_decref(j);
    /* the same prompt again: greedy, the same text */
    char first[512];
    snprintf(first, sizeof first, "%s", b.p);
    free(b.p);
    b = (lb_test_body){0};
    assert_int_equal(
        post_keep(port, "/v1/completions", "{\"prompt\":\"hello world\",\"max_tokens\":6}", &b),
        200);
    j = json_loads(b.p, 0, NULL);
    const char *again = json_string_value(
        json_object_get(json_array_get(json_object_get(j, "choices"), 0), "text"));
    json_t *j1 = json_loads(first, 0, NULL);
    assert_string_equal(again, json_string_value(json_object_get(
                                   json_array_get(json_object_get(j1, "choices"), 0), "text")));
    json_decref(j);
    json_decref(j1);
    free(b.p);
    /* longer than the context (64): a 400 naming the limit */
    b = (lb_test_body){0};
    assert_int_equal(
        post_keep(port, "/v1/completions", "{\"prompt\":\"hello\",\"max_tokens\":100}", &b), 400);
    assert_non_null(strstr(b.p, "limit of 64 tokens"));
    free(b.p);
    /* chat */
    b = (lb_test_body){0};
    assert_int_equal(post_keep(port, "/v1/chat/completions",
                               "{\"messages\":[{\"role\":\"user\",\"content\":\"hello\"}],"
                               "\"max_tokens\":3}",
                               &b),
                     200);
    assert_non_null(strstr(b.p, "\"completion_tokens\":3"));
    free(b.p);
    kill(ch.pid, SIGTERM);
    assert_int_equal(wait_exit(ch.pid, 20000), 0);
    close(ch.out_fd);
    close(ch.err_fd);
    lb_test_rmtree(dir);
}

/* The engine's requests were cut to --max-tokens (default 4096) whatever its context: with
 * a context of 8192, a max_tokens of 9000 got 4096 tokens and "length", where vLLM answers
 * 400 for more than fits. Without --max-tokens the engine's context is the only limit, and
 * a request past it is refused saying what fits. */
static void test_serve_cli_engine_max_tokens_is_limited_by_the_context_only(void **state) {
    (void)state;
    char dir[64];
    lb_test_tmpdir(dir, sizeof dir);
    lb_model_config cfg = lb_fixture_config();
    cfg.max_seq = 8192;
    lb_model m;
    lb_err err;
    assert_int_equal(lb_model_init(&m, &cfg, 1, 1, 5, &err), LB_OK);
    lb_fixture_write_dir(dir, &cfg, m.params, true, false);
    lb_model_free(&m);
    const char *const args[] = {LB_TEST_BIN,     "serve",  "--model",     dir,          "--device",
                                "cpu",           "--port", "0",           "--max-seqs", "1",
                                "--step-tokens", "32",     "--kv-tokens", "8192",       NULL};
    child ch;
    int port = start_serve(&ch, args, false);
    lb_test_body b = {0};
    assert_int_equal(
        post_keep(port, "/v1/completions", "{\"prompt\":\"hello\",\"max_tokens\":9000}", &b), 400);
    if (strstr(b.p, "the prompt's 2 tokens (the bos token included) and max_tokens 9000 exceed "
                    "the engine's limit of 8192 tokens: ask for at most 8190 tokens") == NULL)
        fail_msg("not refused by the context: %s", b.p);
    free(b.p);
    kill(ch.pid, SIGTERM);
    assert_int_equal(wait_exit(ch.pid, 20000), 0);
    close(ch.out_fd);
    close(ch.err_fd);

    /* --max-tokens below the context is a limit of its own, refused by the server */
    const char *const capped[] = {
        LB_TEST_BIN,  "serve", "--model",       dir,  "--device",    "cpu",  "--port",       "0",
        "--max-seqs", "1",     "--step-tokens", "32", "--kv-tokens", "8192", "--max-tokens", "100",
        NULL};
    port = start_serve(&ch, capped, false);
    b = (lb_test_body){0};
    assert_int_equal(
        post_keep(port, "/v1/completions", "{\"prompt\":\"hello\",\"max_tokens\":101}", &b), 400);
    if (strstr(b.p, "'max_tokens' is 101, more than the 100 output tokens this server allows") ==
        NULL)
        fail_msg("not refused by --max-tokens: %s", b.p);
    free(b.p);
    kill(ch.pid, SIGTERM);
    assert_int_equal(wait_exit(ch.pid, 20000), 0);
    close(ch.out_fd);
    close(ch.err_fd);
    lb_test_rmtree(dir);
}

/* --help says what the code does: a request without max_tokens gets 16 or the smaller
 * --max-tokens; a connection past --max-connections gets a 503 before it is closed. */
static void test_serve_cli_help_matches_the_defaults_served(void **state) {
    (void)state;
    char out[16384], err[1024];
    const char *const help[] = {"serve", "--help", NULL};
    assert_int_equal(lb_test_run(help, out, sizeof out, err, sizeof err), 0);
    if (strstr(out, "a request without max_tokens gets 16, or N when N is less") == NULL ||
        strstr(out, "one more is answered 503 and closed") == NULL)
        fail_msg("--help: %s", out);
    const char *const args[] = {LB_TEST_BIN, "serve", "--synthetic",  "--port", "0",
                                "--threads", "1",     "--max-tokens", "8",      NULL};
    child ch;
    int port = start_serve(&ch, args, false);
    lb_test_body b = {0};
    assert_int_equal(post_keep(port, "/v1/completions", "{\"prompt\":\"a\"}", &b), 200);
    json_t *j = json_loads(b.p, 0, NULL);
    assert_non_null(j);
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(j, "usage"), "completion_tokens")), 8);
    json_decref(j);
    free(b.p);
    kill(ch.pid, SIGTERM);
    assert_int_equal(wait_exit(ch.pid, 10000), 0);
    close(ch.out_fd);
    close(ch.err_fd);
}

static void test_serve_cli_rejects_bad_options_with_exit_2(void **state) {
    (void)state;
    const char *const fault[] = {LB_TEST_BIN, "serve", "--synthetic", "--fault", "explode", NULL};
    check_usage_error(fault, "--fault");
    const char *const rate[] = {LB_TEST_BIN, "serve", "--synthetic", "--fault-rate", "1.5", NULL};
    check_usage_error(rate, "--fault-rate");
    const char *const port[] = {LB_TEST_BIN, "serve", "--synthetic", "--port", "70000", NULL};
    check_usage_error(port, "--port");
    /* a model id too long to serve is refused by its option, before anything starts */
    char id[301];
    memset(id, 'm', 300);
    id[300] = '\0';
    const char *const model[] = {LB_TEST_BIN, "serve", "--synthetic", "--port", "0",
                                 "--model",   id,      NULL};
    check_usage_error(model, "--model is 300 bytes long, and a model id is at most 256");
    const char *const served[] = {LB_TEST_BIN,     "serve", "--random",    "llama3.2-1b",
                                  "--device",      "cpu",   "--tokenizer", "/nonexistent",
                                  "--served-name", id,      NULL};
    check_usage_error(served, "--served-name is 300 bytes long");
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_serve_cli_prints_port_and_exits_0_on_sigterm),
        cmocka_unit_test(test_serve_cli_exits_0_on_sigint),
        cmocka_unit_test(test_serve_cli_prints_counters_on_stderr),
        cmocka_unit_test(test_serve_cli_metrics_count_requests_tokens_and_latencies),
        cmocka_unit_test(test_serve_cli_without_a_token_source_says_which_and_exits_2),
        cmocka_unit_test(test_serve_cli_generates_with_the_engine_on_a_model_directory),
        cmocka_unit_test(test_serve_cli_engine_max_tokens_is_limited_by_the_context_only),
        cmocka_unit_test(test_serve_cli_rejects_bad_options_with_exit_2),
        cmocka_unit_test(test_serve_cli_help_matches_the_defaults_served),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return failed;
}
