/* test_serve_hostile.c: `llmbench serve` against hostile and broken clients on loopback:
 * idle and half-sent connections under a low open-file limit, a client that sends one byte
 * at a time, half-sent bodies that would pass the memory budget, and malformed framing.
 * Every error a client is sent must be one response with an OpenAI-style JSON body. */
/* cmocka.h needs these four first. */
/* clang-format off */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
/* clang-format on */

#include <arpa/inet.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>

#include "core/clock.h"
#include "test_util.h"

typedef struct {
    pid_t pid;
    int port;
    int err_fd;
} server;

/* Starts `llmbench serve --synthetic --port 0 ARGS` under `ulimit -n nofile` (0: as is). */
static server start(int nofile, const char *args) {
    char cmd[1024], limit[48] = "";
    if (nofile) snprintf(limit, sizeof limit, "ulimit -n %d && ", nofile);
    snprintf(cmd, sizeof cmd, "%sexec %s serve --synthetic --port 0 --threads 2 %s", limit,
             LB_TEST_BIN, args);
    const char *argv[] = {"sh", "-c", cmd, NULL};
    int out_fd = -1, err_fd = -1;
    pid_t pid = lb_test_spawn("/bin/sh", argv, &out_fd, &err_fd);
    assert_true(pid > 0);
    char line[128] = "";
    FILE *f = fdopen(out_fd, "r");
    assert_non_null(fgets(line, sizeof line, f));
    fclose(f);
    const char *colon = strrchr(line, ':');
    assert_non_null(colon);
    return (server){.pid = pid, .port = atoi(colon + 1), .err_fd = err_fd};
}

/* Stops the server with SIGINT and returns its counters line from stderr. */
static void stop(server *s, char *counters, size_t cap) {
    kill(s->pid, SIGINT);
    waitpid(s->pid, NULL, 0);
    lb_test_slurp(s->err_fd, counters, cap);
    close(s->err_fd);
}

static int connect_to(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Reads what the server sends until it closes or timeout_ms pass; returns the bytes read
 * and sets *closed when the server closed the connection. */
static size_t read_reply(int fd, char *buf, size_t cap, int timeout_ms, bool *closed) {
    size_t n = 0;
    *closed = false;
    int64_t deadline = lb_clock_now_ns() + (int64_t)timeout_ms * 1000000;
    while (n + 1 < cap) {
        int left = (int)((deadline - lb_clock_now_ns()) / 1000000);
        if (left <= 0) break;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, left) <= 0) break;
        ssize_t r = recv(fd, buf + n, cap - 1 - n, 0);
        if (r <= 0) {
            *closed = true;
            break;
        }
        n += (size_t)r;
    }
    buf[n] = '\0';
    return n;
}

/* One exchange on a fresh connection: sends req, reads the reply for up to timeout_ms. */
static void exchange(int port, const char *req, size_t req_len, char *buf, size_t cap,
                     int timeout_ms, bool *closed) {
    int fd = connect_to(port);
    assert_true(fd >= 0);
    assert_int_equal(send(fd, req, req_len, MSG_NOSIGNAL), (ssize_t)req_len);
    read_reply(fd, buf, cap, timeout_ms, closed);
    close(fd);
}

/* buf is exactly one HTTP response with status `status` and an OpenAI-style error body. */
static void expect_json_error(const char *buf, int status) {
    char want[32];
    snprintf(want, sizeof want, "HTTP/1.1 %d ", status);
    if (strncmp(buf, want, strlen(want)) != 0) fail_msg("not a %d response: '%.300s'", status, buf);
    if (strstr(buf + 1, "HTTP/1.1 ") != NULL) fail_msg("two response heads: '%.600s'", buf);
    const char *body = strstr(buf, "\r\n\r\n");
    assert_non_null(body);
    json_t *j = json_loads(body + 4, 0, NULL);
    if (j == NULL) fail_msg("body is not JSON: '%.300s'", body + 4);
    assert_non_null(json_string_value(json_object_get(json_object_get(j, "error"), "message")));
    json_decref(j);
}

static bool health_ok(int port, int timeout_ms) {
    static const char req[] = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    int fd = connect_to(port);
    if (fd < 0) return false;
    char buf[1024];
    bool closed;
    send(fd, req, sizeof req - 1, MSG_NOSIGNAL);
    read_reply(fd, buf, sizeof buf, timeout_ms, &closed);
    close(fd);
    return strstr(buf, "HTTP/1.1 200") != NULL && strstr(buf, "{\"status\":\"ok\"}") != NULL;
}

static void test_serve_idle_connections_under_a_low_fd_limit_do_not_lock_clients_out(void **state) {
    (void)state;
    server s = start(256, "--idle-timeout 1");
    enum { N = 300 };
    int fds[N];
    for (int i = 0; i < N; i++)
        fds[i] = connect_to(s.port);
    /* The idle ones are closed after a second; then a client is served. */
    int64_t t0 = lb_clock_now_ns();
    bool ok = false;
    while (!ok && lb_clock_now_ns() - t0 < 5000000000LL)
        ok = health_ok(s.port, 500);
    double waited_s = (double)(lb_clock_now_ns() - t0) / 1e9;
    for (int i = 0; i < N; i++)
        if (fds[i] >= 0) close(fds[i]);
    char counters[2048];
    stop(&s, counters, sizeof counters);
    if (!ok) fail_msg("no client served within 5 s: %s", counters);
    print_message("served after %.2f s; %s", waited_s, counters);
    assert_true(waited_s < 3.0);
    assert_non_null(strstr(counters, "connections closed idle "));
    assert_null(strstr(counters, "connections closed idle 0,"));
}

static void test_serve_closes_a_request_sent_one_byte_at_a_time(void **state) {
    (void)state;
    server s = start(0, "--read-timeout 1 --idle-timeout 10");
    static const char req[] =
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 30\r\n"
        "X-Padding: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n";
    int fd = connect_to(s.port);
    assert_true(fd >= 0);
    /* The request line at once (its arrival starts the read deadline), then the rest. */
    size_t line = strlen("POST /v1/completions HTTP/1.1\r\n");
    assert_int_equal(send(fd, req, line, MSG_NOSIGNAL), (ssize_t)line);
    int64_t t0 = lb_clock_now_ns();
    bool closed = false;
    for (size_t i = line; i < sizeof req - 1 && !closed; i++) {
        if (send(fd, req + i, 1, MSG_NOSIGNAL) != 1) break;
        char buf[256];
        read_reply(fd, buf, sizeof buf, 100, &closed);
    }
    double held_s = (double)(lb_clock_now_ns() - t0) / 1e9;
    close(fd);
    char counters[2048];
    stop(&s, counters, sizeof counters);
    assert_true(closed);
    print_message("trickling client closed after %.2f s\n", held_s);
    assert_true(held_s < 2.5);
    assert_non_null(strstr(counters, "slow 1;"));
}

static void test_serve_half_sent_bodies_beyond_the_budget_get_503(void **state) {
    (void)state;
    server s = start(0, "--max-body-memory 1");
    /* Two bodies of 600 KiB announced, neither sent: the second would pass 1 MiB. */
    static const char head[] = "POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                               "Content-Length: 614400\r\n\r\n{\"prompt\":\"";
    int first = connect_to(s.port);
    assert_int_equal(send(first, head, sizeof head - 1, MSG_NOSIGNAL), (ssize_t)sizeof head - 1);
    char buf[4096];
    bool closed;
    read_reply(first, buf, sizeof buf, 300, &closed);
    assert_string_equal(buf, ""); /* waits for its body */
    exchange(s.port, head, sizeof head - 1, buf, sizeof buf, 2000, &closed);
    expect_json_error(buf, 503);
    assert_non_null(strstr(buf, "--max-body-memory"));
    close(first);
    /* With the first gone its share is free again. */
    usleep(200 * 1000);
    static const char small[] = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 30\r\n"
                                "\r\n{\"prompt\":\"hi\",\"max_tokens\":2}";
    exchange(s.port, small, sizeof small - 1, buf, sizeof buf, 2000, &closed);
    assert_non_null(strstr(buf, "HTTP/1.1 200"));
    char counters[2048];
    stop(&s, counters, sizeof counters);
    assert_non_null(strstr(counters, "1 refused for the body memory budget"));
}

static void test_serve_framing_errors_get_one_json_error(void **state) {
    (void)state;
    server s = start(0, "");
    char buf[8192];
    bool closed;
    static const char two_lengths[] = "POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                                      "Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}";
    exchange(s.port, two_lengths, sizeof two_lengths - 1, buf, sizeof buf, 1000, &closed);
    expect_json_error(buf, 400);
    assert_non_null(strstr(buf, "two different Content-Length"));
    static const char both[] = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
                               "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n";
    exchange(s.port, both, sizeof both - 1, buf, sizeof buf, 1000, &closed);
    expect_json_error(buf, 400);
    static const char negative[] = "POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                                   "Content-Length: -5\r\n\r\n";
    exchange(s.port, negative, sizeof negative - 1, buf, sizeof buf, 1000, &closed);
    expect_json_error(buf, 400);
    assert_true(closed);
    static const char chunked[] = "POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                                  "Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n";
    exchange(s.port, chunked, sizeof chunked - 1, buf, sizeof buf, 1000, &closed);
    expect_json_error(buf, 411);
    /* 100 header fields are served. */
    char fields[2048];
    int n = snprintf(fields, sizeof fields, "GET /health HTTP/1.1\r\n");
    for (int i = 0; i < 100; i++)
        n += snprintf(fields + n, sizeof fields - (size_t)n, "a%d:b\r\n", i);
    n += snprintf(fields + n, sizeof fields - (size_t)n, "\r\n");
    exchange(s.port, fields, (size_t)n, buf, sizeof buf, 500, &closed);
    assert_non_null(strstr(buf, "{\"status\":\"ok\"}"));
    static const char huge[] = "POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                               "Content-Length: 99999999999999999999\r\n\r\n";
    exchange(s.port, huge, sizeof huge - 1, buf, sizeof buf, 1000, &closed);
    expect_json_error(buf, 413);
    static const char garbage[] = "GARBAGE\r\n";
    exchange(s.port, garbage, sizeof garbage - 1, buf, sizeof buf, 1000, &closed);
    expect_json_error(buf, 400);
    assert_true(closed); /* answered and closed at once, not left open */
    static const char version[] = "GET /health HTTP/2.0\r\n\r\n";
    exchange(s.port, version, sizeof version - 1, buf, sizeof buf, 1000, &closed);
    expect_json_error(buf, 505);
    static const char head_health[] = "HEAD /health HTTP/1.1\r\nHost: x\r\n\r\n";
    exchange(s.port, head_health, sizeof head_health - 1, buf, sizeof buf, 500, &closed);
    assert_non_null(strstr(buf, "HTTP/1.1 200"));
    assert_null(strstr(buf, "{\"status\""));
    static const char put_health[] = "PUT /health HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n";
    exchange(s.port, put_health, sizeof put_health - 1, buf, sizeof buf, 1000, &closed);
    expect_json_error(buf, 405);
    assert_non_null(strstr(buf, "Allow: GET, HEAD"));
    char counters[2048];
    stop(&s, counters, sizeof counters);
}

/* A kept-alive connection: a GET answered, then `bad` on the same connection gets one JSON
 * error with `status` and the connection is closed. */
static void expect_refused_after_a_good_request(int port, const char *bad, int status) {
    static const char good[] = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    int fd = connect_to(port);
    assert_true(fd >= 0);
    char buf[8192];
    bool closed;
    assert_int_equal(send(fd, good, sizeof good - 1, MSG_NOSIGNAL), (ssize_t)sizeof good - 1);
    read_reply(fd, buf, sizeof buf, 300, &closed);
    if (strstr(buf, "HTTP/1.1 200") == NULL || closed)
        fail_msg("the first request: '%.300s' (closed %d)", buf, closed);
    assert_int_equal(send(fd, bad, strlen(bad), MSG_NOSIGNAL), (ssize_t)strlen(bad));
    read_reply(fd, buf, sizeof buf, 2000, &closed);
    close(fd);
    expect_json_error(buf, status);
    if (!closed) fail_msg("the connection stayed open after '%.60s'", bad);
}

static void test_serve_malformed_second_requests_get_one_json_error(void **state) {
    (void)state;
    server s = start(0, "");
    expect_refused_after_a_good_request(s.port, "GARBAGE\r\n", 400);
    expect_refused_after_a_good_request(s.port, "GARBAGE\r\n\r\n", 400);
    expect_refused_after_a_good_request(
        s.port, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n", 400);
    expect_refused_after_a_good_request(s.port,
                                        "POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                                        "Content-Length: 99999999999999999999\r\n\r\n",
                                        413);
    expect_refused_after_a_good_request(s.port,
                                        "POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                                        "Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
                                        400);
    expect_refused_after_a_good_request(s.port, "GET /health HTTP/2.0\r\n\r\n", 505);
    expect_refused_after_a_good_request(s.port, "GET /health HTTP/1.1\r\nno colon here\r\n\r\n",
                                        400);
    expect_refused_after_a_good_request(
        s.port, "POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 501);
    char big[20000];
    int n = snprintf(big, sizeof big, "GET /health HTTP/1.1\r\nX-Big: ");
    memset(big + n, 'a', sizeof big - (size_t)n - 5);
    memcpy(big + sizeof big - 5, "\r\n\r\n", 5);
    expect_refused_after_a_good_request(s.port, big, 431);
    /* More header fields than libmicrohttpd has memory for (it would answer 431 in HTML). */
    n = snprintf(big, sizeof big, "GET /health HTTP/1.1\r\n");
    for (int i = 0; i < 3000; i++)
        n += snprintf(big + n, sizeof big - (size_t)n, "a:b\r\n");
    snprintf(big + n, sizeof big - (size_t)n, "\r\n");
    expect_refused_after_a_good_request(s.port, big, 431);
    /* A chunked body (libmicrohttpd would answer a broken one in HTML). */
    expect_refused_after_a_good_request(s.port,
                                        "POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                                        "Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
                                        411);
    char counters[2048];
    stop(&s, counters, sizeof counters);
    if (strstr(counters, "11 for a malformed") == NULL) fail_msg("counters: %s", counters);
}

/* A kept-alive connection serves HEAD and GET in turn. */
static void test_serve_keeps_a_connection_alive_for_head_and_get_requests(void **state) {
    (void)state;
    server s = start(0, "");
    int fd = connect_to(s.port);
    assert_true(fd >= 0);
    char buf[8192];
    bool closed;
    static const char head[] = "HEAD /health HTTP/1.1\r\nHost: x\r\n\r\n";
    static const char get[] = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    for (int i = 0; i < 3; i++) {
        assert_int_equal(send(fd, head, sizeof head - 1, MSG_NOSIGNAL), (ssize_t)sizeof head - 1);
        read_reply(fd, buf, sizeof buf, 300, &closed);
        assert_false(closed);
        if (strncmp(buf, "HTTP/1.1 200", 12) != 0 || strstr(buf, "{\"status\"") != NULL)
            fail_msg("HEAD: '%.300s'", buf);
        assert_int_equal(send(fd, get, sizeof get - 1, MSG_NOSIGNAL), (ssize_t)sizeof get - 1);
        read_reply(fd, buf, sizeof buf, 300, &closed);
        assert_false(closed);
        if (strstr(buf, "{\"status\":\"ok\"}") == NULL) fail_msg("GET: '%.300s'", buf);
    }
    close(fd);
    /* A client that ends its side after its request gets the answer, then the end. */
    fd = connect_to(s.port);
    assert_int_equal(send(fd, get, sizeof get - 1, MSG_NOSIGNAL), (ssize_t)sizeof get - 1);
    shutdown(fd, SHUT_WR);
    read_reply(fd, buf, sizeof buf, 1000, &closed);
    assert_true(closed);
    if (strstr(buf, "{\"status\":\"ok\"}") == NULL) fail_msg("half-closed: '%.300s'", buf);
    close(fd);
    /* HTTP/1.0 asking for keep-alive is kept alive, and its later heads are checked too. */
    static const char get10[] = "GET /health HTTP/1.0\r\nConnection: keep-alive\r\n\r\n";
    fd = connect_to(s.port);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(send(fd, get10, sizeof get10 - 1, MSG_NOSIGNAL),
                         (ssize_t)sizeof get10 - 1);
        read_reply(fd, buf, sizeof buf, 300, &closed);
        assert_false(closed);
        if (strstr(buf, "{\"status\":\"ok\"}") == NULL) fail_msg("HTTP/1.0: '%.300s'", buf);
    }
    assert_int_equal(send(fd, "GARBAGE\r\n", 9, MSG_NOSIGNAL), 9);
    read_reply(fd, buf, sizeof buf, 1000, &closed);
    close(fd);
    expect_json_error(buf, 400);
    assert_true(closed);
    char counters[2048];
    stop(&s, counters, sizeof counters);
}

/* Sends first and next in one write (libmicrohttpd reads both at once): the answer is
 * exactly one response to first, with status `status`, Connection: close, then the end of
 * the connection; next is never answered (no second head, no HTML). */
static void expect_read_ahead_closed(int port, const char *first, const char *next, int status) {
    char req[4096];
    int n = snprintf(req, sizeof req, "%s%s", first, next);
    int fd = connect_to(port);
    assert_true(fd >= 0);
    assert_int_equal(send(fd, req, (size_t)n, MSG_NOSIGNAL), n);
    char buf[8192];
    bool closed;
    read_reply(fd, buf, sizeof buf, 2000, &closed);
    close(fd);
    char want[32];
    snprintf(want, sizeof want, "HTTP/1.1 %d ", status);
    if (strncmp(buf, want, strlen(want)) != 0 || strstr(buf + 1, "HTTP/1.1 ") != NULL ||
        strstr(buf, "<html") != NULL || strstr(buf, "\r\nConnection: close\r\n") == NULL)
        fail_msg("after '%.40s' pipelined with '%.40s': '%.600s'", first, next, buf);
    if (!closed) fail_msg("the connection stayed open after '%.40s'", next);
}

/* Requests a client pipelines (sends before the previous answer): those libmicrohttpd has
 * read ahead are never parsed (the connection ends after the answer before them); those
 * still unread when an answer ends have their heads checked like any later request. */
static void test_serve_never_parses_pipelined_requests_unchecked(void **state) {
    (void)state;
    server s = start(0, "--tpot-ms 40");
    static const char health[] = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    static const char post[] = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 30\r\n"
                               "\r\n{\"prompt\":\"hi\",\"max_tokens\":1}";
    expect_read_ahead_closed(s.port, health, "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n", 200);
    expect_read_ahead_closed(
        s.port, health, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
        200);
    expect_read_ahead_closed(s.port, health, "GARBAGE\r\n\r\n", 200);
    expect_read_ahead_closed(s.port, post, "GET /health HTTP/2.0\r\n\r\n", 200);
    expect_read_ahead_closed(s.port, post, post, 200);
    expect_read_ahead_closed(s.port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", health, 200);
    expect_read_ahead_closed(s.port, "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n", health, 404);
    /* The next request sent while a streamed answer is under way is not read ahead: it is
     * checked when the answer has ended, and a malformed one gets one JSON error. */
    static const char stream[] =
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 45\r\n"
        "\r\n{\"prompt\":\"hi\",\"max_tokens\":16,\"stream\":true}";
    int fd = connect_to(s.port);
    assert_true(fd >= 0);
    assert_int_equal(send(fd, stream, sizeof stream - 1, MSG_NOSIGNAL), (ssize_t)sizeof stream - 1);
    char buf[8192] = "", rest[8192];
    bool closed = false;
    size_t got = 0; /* until the first token is in (all 16 take 600 ms) */
    for (int i = 0; i < 40 && !closed && strstr(buf, "data: ") == NULL; i++)
        got += read_reply(fd, buf + got, sizeof buf - got, 50, &closed);
    if (strncmp(buf, "HTTP/1.1 200", 12) != 0 || strstr(buf, "[DONE]") != NULL)
        fail_msg("the stream's start: '%.300s'", buf);
    static const char bad[] =
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n";
    assert_int_equal(send(fd, bad, sizeof bad - 1, MSG_NOSIGNAL), (ssize_t)sizeof bad - 1);
    read_reply(fd, rest, sizeof rest, 3000, &closed);
    close(fd);
    const char *done = strstr(rest, "data: [DONE]");
    const char *error = strstr(rest, "HTTP/1.1 ");
    if (done == NULL || error == NULL || error < done) fail_msg("after the stream: '%.600s'", rest);
    expect_json_error(error, 400);
    assert_true(closed);
    char counters[2048];
    stop(&s, counters, sizeof counters);
    if (strstr(counters, "1 for a malformed") == NULL) fail_msg("counters: %s", counters);
}

/* A client that pipelined much more than libmicrohttpd read ahead, reading slowly, still
 * gets the whole answer before the close: the input left unread is read away first, so
 * closing the socket does not reset the connection and drop the answer's unsent end. */
static void test_serve_closing_after_read_ahead_keeps_the_whole_answer(void **state) {
    (void)state;
    server s = start(0, "");
    /* One request, then the head and most of the body of the next, in one stream. */
    static char req[2 << 20];
    int n = snprintf(req, sizeof req,
                     "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 33\r\n\r\n"
                     "{\"prompt\":\"hi\",\"max_tokens\":4000}"
                     "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n\r\n",
                     sizeof req);
    memset(req + n, 'a', sizeof req - (size_t)n);
    int fd = connect_to(s.port);
    assert_true(fd >= 0);
    int small = 4096;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    size_t sent = 0;
    for (int64_t end = lb_clock_now_ns() + 1000000000;
         sent < sizeof req && lb_clock_now_ns() < end;) {
        ssize_t r = send(fd, req + sent, sizeof req - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (r > 0)
            sent += (size_t)r;
        else
            usleep(10 * 1000);
    }
    usleep(300 * 1000); /* the answer waits in the server's socket */
    static char buf[1 << 16];
    bool closed;
    size_t got = read_reply(fd, buf, sizeof buf, 3000, &closed);
    close(fd);
    const char *length = strstr(buf, "Content-Length: ");
    const char *body = strstr(buf, "\r\n\r\n");
    const char *close_field = strstr(buf, "\r\nConnection: close\r\n");
    if (strncmp(buf, "HTTP/1.1 200", 12) != 0 || length == NULL || body == NULL ||
        close_field == NULL || close_field > body)
        fail_msg("the answer: '%.300s'", buf);
    size_t want = strtoul(length + 16, NULL, 10);
    if (got - (size_t)(body + 4 - buf) != want)
        fail_msg("%zu of the answer's %zu body bytes before the close (%zu bytes sent)",
                 got - (size_t)(body + 4 - buf), want, sent);
    assert_true(closed);
    char counters[2048];
    stop(&s, counters, sizeof counters);
}

/* An answer queued before its request was read to its end (here 404 on the head) ends the
 * connection in libmicrohttpd; the server does not also watch it for a next request (it
 * would count it idle when the idle timeout passes). */
static void test_serve_does_not_watch_a_connection_answered_on_its_head(void **state) {
    (void)state;
    server s = start(0, "--idle-timeout 1");
    static const char nope[] = "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n";
    int fd = connect_to(s.port);
    assert_true(fd >= 0);
    assert_int_equal(send(fd, nope, sizeof nope - 1, MSG_NOSIGNAL), (ssize_t)sizeof nope - 1);
    char buf[4096];
    bool closed;
    read_reply(fd, buf, sizeof buf, 2000, &closed);
    expect_json_error(buf, 404);
    assert_true(closed);
    usleep(1500 * 1000); /* past the idle timeout, this end still open */
    close(fd);
    char counters[2048];
    stop(&s, counters, sizeof counters);
    if (strstr(counters, "idle 0,") == NULL) fail_msg("counters: %s", counters);
}

/* Between requests a kept-alive connection keeps its deadlines: idle, it is closed; a next
 * head that does not arrive in time gets 408. */
static void test_serve_kept_alive_connections_keep_their_deadlines(void **state) {
    (void)state;
    server s = start(0, "--idle-timeout 1 --read-timeout 1");
    static const char good[] = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    char buf[4096];
    bool closed;
    int fd = connect_to(s.port);
    assert_int_equal(send(fd, good, sizeof good - 1, MSG_NOSIGNAL), (ssize_t)sizeof good - 1);
    int64_t t0 = lb_clock_now_ns();
    read_reply(fd, buf, sizeof buf, 3000, &closed);
    double idle_s = (double)(lb_clock_now_ns() - t0) / 1e9;
    close(fd);
    assert_non_null(strstr(buf, "HTTP/1.1 200"));
    assert_true(closed);
    if (idle_s < 0.9 || idle_s > 2.5) fail_msg("closed after %.2f s idle", idle_s);

    fd = connect_to(s.port);
    assert_int_equal(send(fd, good, sizeof good - 1, MSG_NOSIGNAL), (ssize_t)sizeof good - 1);
    read_reply(fd, buf, sizeof buf, 300, &closed);
    assert_false(closed);
    static const char part[] = "POST /v1/completions HTTP/1.1\r\nHost: x\r\n";
    assert_int_equal(send(fd, part, sizeof part - 1, MSG_NOSIGNAL), (ssize_t)sizeof part - 1);
    read_reply(fd, buf, sizeof buf, 3000, &closed);
    close(fd);
    expect_json_error(buf, 408);
    assert_true(closed);
    char counters[2048];
    stop(&s, counters, sizeof counters);
    if (strstr(counters, "idle 1, slow 1;") == NULL) fail_msg("counters: %s", counters);
}

static void test_serve_first_request_head_not_in_within_the_read_timeout_gets_408(void **state) {
    (void)state;
    server s = start(0, "--read-timeout 1");
    static const char part[] = "POST /v1/completions HTTP/1.1\r\nHost: x\r\n";
    char buf[4096];
    bool closed;
    int64_t t0 = lb_clock_now_ns();
    exchange(s.port, part, sizeof part - 1, buf, sizeof buf, 3000, &closed);
    double took_s = (double)(lb_clock_now_ns() - t0) / 1e9;
    expect_json_error(buf, 408);
    assert_true(closed);
    assert_true(took_s < 2.0);
    char counters[2048];
    stop(&s, counters, sizeof counters);
    assert_non_null(strstr(counters, "slow 1;"));
}

static void test_serve_on_a_port_in_use_says_so(void **state) {
    (void)state;
    server s = start(0, "");
    char port[16], errbuf[1024];
    snprintf(port, sizeof port, "%d", s.port);
    const char *args[] = {"serve", "--synthetic", "--port", port, NULL};
    assert_int_equal(lb_test_run(args, NULL, 0, errbuf, sizeof errbuf), 1);
    char want[192]; /* what is wrong, then what would be right */
    snprintf(want, sizeof want,
             "could not listen on 127.0.0.1 port %d: Address already in use (another process "
             "has it: give another --port, or --port 0 for a free one)\n",
             s.port);
    if (strstr(errbuf, want) == NULL) fail_msg("stderr: %s", errbuf);
    char counters[2048];
    stop(&s, counters, sizeof counters);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_serve_idle_connections_under_a_low_fd_limit_do_not_lock_clients_out),
        cmocka_unit_test(test_serve_closes_a_request_sent_one_byte_at_a_time),
        cmocka_unit_test(test_serve_half_sent_bodies_beyond_the_budget_get_503),
        cmocka_unit_test(test_serve_framing_errors_get_one_json_error),
        cmocka_unit_test(test_serve_malformed_second_requests_get_one_json_error),
        cmocka_unit_test(test_serve_keeps_a_connection_alive_for_head_and_get_requests),
        cmocka_unit_test(test_serve_never_parses_pipelined_requests_unchecked),
        cmocka_unit_test(test_serve_closing_after_read_ahead_keeps_the_whole_answer),
        cmocka_unit_test(test_serve_does_not_watch_a_connection_answered_on_its_head),
        cmocka_unit_test(test_serve_kept_alive_connections_keep_their_deadlines),
        cmocka_unit_test(test_serve_first_request_head_not_in_within_the_read_timeout_gets_408),
        cmocka_unit_test(test_serve_on_a_port_in_use_says_so),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
