/* test_http_client.c: the HTTP client's event loop (sut/http.c) against a small server
 * written here that closes a keep-alive connection once it has been idle for
 * IDLE_CLOSE_MS, as many servers do. The client keeps the sockets of idle connections in
 * its epoll set; these tests check that kept-alive connections are reused, that idle
 * connections the server closes cost the client no CPU time, and that the next requests
 * succeed on new connections. A second server sends streams that end without their
 * last blank line; a third sends [DONE] and then holds the stream open or closes the
 * connection; a fourth streams a reasoning model's thinking before its answer; a fifth
 * redirects, refuses with Retry-After or compresses a stream unasked; a sixth closes a
 * kept-alive connection as the next request arrives. Listeners that never accept time out
 * connects and requests. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/clock.h"
#include "sut/http.h"
#include "test_util.h"

#define IDLE_CLOSE_MS 200 /* the server closes a connection idle this long */
#define MAX_CONNS     16
#define N_REQUESTS    4

static const char BODY[] =
    "{\"choices\":[{\"text\":\"hi\"}],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}";

typedef struct {
    int fd;
    size_t len;
    char buf[4096];
    int64_t idle_since_ns;
} conn;

/* Answers one request at the start of c->buf if it is all there; returns 0 when not. */
static int answer_one(conn *c) {
    c->buf[c->len] = '\0';
    char *end = strstr(c->buf, "\r\n\r\n");
    if (end == NULL) return 0;
    size_t body = 0;
    char *cl = strcasestr(c->buf, "content-length:");
    if (cl != NULL && cl < end) body = strtoul(cl + 15, NULL, 10);
    size_t total = (size_t)(end + 4 - c->buf) + body;
    if (c->len < total) return 0;
    char out[512];
    int n = snprintf(out, sizeof out,
                     "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n\r\n%s",
                     strlen(BODY), BODY);
    if (write(c->fd, out, (size_t)n) != n) return -1;
    memmove(c->buf, c->buf + total, c->len - total);
    c->len -= total;
    c->idle_since_ns = lb_clock_now_ns();
    return 1;
}

/* The server child: keep-alive HTTP/1.1, every request answered with BODY, connections
 * closed after IDLE_CLOSE_MS without a request. Runs until killed. */
static void serve_closing_idle(int lfd) {
    conn cs[MAX_CONNS];
    int n = 0;
    for (;;) {
        struct pollfd pf[MAX_CONNS + 1];
        for (int i = 0; i < n; i++)
            pf[i] = (struct pollfd){.fd = cs[i].fd, .events = POLLIN};
        pf[n] = (struct pollfd){.fd = lfd, .events = POLLIN};
        poll(pf, (nfds_t)n + 1, 10);
        int64_t now = lb_clock_now_ns();
        for (int i = n - 1; i >= 0; i--) {
            bool drop = false;
            if (pf[i].revents) {
                ssize_t r = read(cs[i].fd, cs[i].buf + cs[i].len, sizeof cs[i].buf - 1 - cs[i].len);
                if (r <= 0)
                    drop = true;
                else
                    cs[i].len += (size_t)r;
                int a;
                while (!drop && (a = answer_one(&cs[i])) != 0)
                    drop = a < 0;
            }
            if (cs[i].len == 0 && now - cs[i].idle_since_ns > IDLE_CLOSE_MS * 1000000LL)
                drop = true;
            if (drop) {
                close(cs[i].fd);
                cs[i] = cs[--n];
            }
        }
        if ((pf[n].revents & POLLIN) && n < MAX_CONNS) {
            int fd = accept(lfd, NULL, NULL);
            if (fd >= 0) cs[n++] = (conn){.fd = fd, .idle_since_ns = lb_clock_now_ns()};
        }
    }
}

typedef struct {
    int ok, failed, new_connections;
} tally;

static void on_done(void *user, const lb_http_outcome *o) {
    tally *t = user;
    if (o->error == LB_QERR_NONE && o->http_status == 200 && o->completion_tokens == 1)
        t->ok++;
    else
        t->failed++;
    t->new_connections += o->new_connection;
}

/* Sends N_REQUESTS at once and serves the client until they are all answered. */
static void send_round(lb_http_client *c, const char *url, tally *t) {
    *t = (tally){0};
    lb_err err;
    for (int i = 0; i < N_REQUESTS; i++) {
        lb_http_request req = {.tag = (uint64_t)i, .body = "{}", .body_len = 2};
        assert_int_equal(lb_http_submit(c, url, &req, &err), LB_OK);
    }
    int64_t give_up = lb_clock_now_ns() + 5000000000LL;
    while (lb_http_inflight(c) > 0 && lb_clock_now_ns() < give_up)
        lb_http_run(c, lb_clock_now_ns() + 10000000);
    assert_int_equal(lb_http_inflight(c), 0);
}

/* A child process serving the listening loopback socket with serve; *port is its port.
 * The caller kills the child when done. */
static pid_t start_server(void (*serve)(int lfd), int *port) {
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(lfd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof a;
    assert_int_equal(bind(lfd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(lfd, 64), 0);
    assert_int_equal(getsockname(lfd, (struct sockaddr *)&a, &alen), 0);
    *port = ntohs(a.sin_port);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        lb_test_die_with_parent();
        serve(lfd);
        _exit(0);
    }
    close(lfd);
    return pid;
}

static int64_t thread_cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void test_http_idle_connections_closed_by_the_server_cost_no_cpu(void **state) {
    (void)state;
    int port = 0;
    pid_t pid = start_server(serve_closing_idle, &port);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/completions", port);

    lb_http_params p = lb_http_default_params();
    p.stream = false;
    p.timeout_ms = 5000;
    p.max_connections = 8;
    lb_http_callbacks cb = {.on_done = on_done};
    tally t;
    lb_http_client *c = NULL;
    lb_err err;
    assert_int_equal(lb_http_init(&c, &p, &cb, &t, &err), LB_OK);

    send_round(c, url, &t);
    assert_int_equal(t.ok, N_REQUESTS);
    assert_int_equal(t.new_connections, N_REQUESTS);
    /* at once again: the same connections, whose sockets stayed registered meanwhile */
    send_round(c, url, &t);
    assert_int_equal(t.ok, N_REQUESTS);
    assert_int_equal(t.new_connections, 0);

    /* idle while the server closes them: the closed sockets must not keep the loop busy
     * (a level-triggered socket left in the set would be reported again and again) */
    int64_t cpu0 = thread_cpu_ns(), until = lb_clock_now_ns() + 3 * IDLE_CLOSE_MS * 1000000LL;
    while (lb_clock_now_ns() < until)
        lb_http_run(c, until);
    int64_t cpu_ns = thread_cpu_ns() - cpu0;
    assert_true(cpu_ns < 60000000); /* of 600 ms: a busy loop takes most of it */

    send_round(c, url, &t);
    assert_int_equal(t.ok, N_REQUESTS);
    assert_int_equal(t.failed, 0);
    assert_int_equal(t.new_connections, N_REQUESTS);

    lb_http_free(c);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

/* ---- streams that end without their last blank line ---- */

#define TOKEN_EVENT "data: {\"choices\":[{\"text\":\"tok \"}]}\n\n"
#define USAGE_EVENT                                                                                \
    "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}\n\n"

/* The streams served by path: each ends its body cleanly (Content-Length, then close). */
static const struct {
    const char *path, *body;
} streams[] = {
    {"/no-blank-line", TOKEN_EVENT TOKEN_EVENT USAGE_EVENT "data: [DONE]\n"},
    {"/no-line-end", TOKEN_EVENT TOKEN_EVENT USAGE_EVENT "data: [DONE]"},
    {"/crlf-no-blank-line", TOKEN_EVENT TOKEN_EVENT USAGE_EVENT "data: [DONE]\r\n"},
    {"/last-token-no-blank-line", TOKEN_EVENT USAGE_EVENT "data: {\"choices\":[{\"text\":\"x\"}]}"},
    {"/cut-mid-event", TOKEN_EVENT TOKEN_EVENT "data: {\"choi"},
    {"/no-done", TOKEN_EVENT TOKEN_EVENT USAGE_EVENT},
};

/* Reads the whole request on c->fd into c->buf (closing with input unread would reset
 * the connection); returns the end of its head, NULL when none came. */
static char *read_request(conn *c) {
    char *end = NULL;
    size_t want = sizeof c->buf - 1;
    while (c->len < want) {
        ssize_t r = read(c->fd, c->buf + c->len, sizeof c->buf - 1 - c->len);
        if (r <= 0) break;
        c->len += (size_t)r;
        c->buf[c->len] = '\0';
        if (end == NULL && (end = strstr(c->buf, "\r\n\r\n")) != NULL) {
            char *cl = strcasestr(c->buf, "content-length:");
            want = (size_t)(end + 4 - c->buf) + (cl && cl < end ? strtoul(cl + 15, NULL, 10) : 0);
        }
    }
    return end;
}

/* The server child: one request per connection, answered with the stream its path names. */
static void serve_streams(int lfd) {
    for (;;) {
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0) continue;
        conn c = {.fd = fd};
        char *end = read_request(&c);
        const char *body = "";
        for (size_t i = 0; end != NULL && i < sizeof streams / sizeof streams[0]; i++) {
            size_t n = strlen(streams[i].path);
            if (strncmp(c.buf + 5, streams[i].path, n) == 0 && c.buf[5 + n] == ' ')
                body = streams[i].body;
        }
        char out[2048];
        int n = snprintf(out, sizeof out,
                         "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                         "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
                         strlen(body), body);
        if (write(fd, out, (size_t)n) != n) _exit(1);
        close(fd);
    }
}

typedef struct {
    lb_qerr error;
    int http_status;
    int64_t completion_tokens;
    int32_t n_chunks, tokens_heard;
    char detail[160];
    bool new_connection;
    int64_t latency_ns;  /* done_ns - start_ns */
    int64_t first_ns;    /* first_ns - start_ns */
    int64_t reported_ns; /* on_done's call - done_ns */
    char text[64];       /* the kept text, when the client keeps it */
    char reasoning[64];  /* the kept reasoning text, when the client keeps it */
} stream_seen;

static void stream_on_token(void *user, uint64_t tag, int64_t t_ns) {
    (void)tag, (void)t_ns;
    ((stream_seen *)user)->tokens_heard++;
}

static void stream_on_done(void *user, const lb_http_outcome *o) {
    stream_seen *s = user;
    s->error = o->error;
    s->http_status = o->http_status;
    s->completion_tokens = o->completion_tokens;
    s->n_chunks = o->n_chunks;
    snprintf(s->detail, sizeof s->detail, "%s", o->detail);
    s->new_connection = o->new_connection;
    s->latency_ns = o->done_ns - o->start_ns;
    s->first_ns = o->first_ns - o->start_ns;
    snprintf(s->text, sizeof s->text, "%.*s", o->text ? (int)o->text_len : 0,
             o->text ? o->text : "");
    snprintf(s->reasoning, sizeof s->reasoning, "%.*s", o->reasoning ? (int)o->reasoning_len : 0,
             o->reasoning ? o->reasoning : "");
    s->reported_ns = lb_clock_now_ns() - o->done_ns;
}

static stream_seen fetch_stream(lb_http_client *c, stream_seen *seen, const char *base,
                                const char *path) {
    char url[128];
    snprintf(url, sizeof url, "%s%s", base, path);
    *seen = (stream_seen){.error = LB_QERR_COUNT};
    lb_http_request req = {.body = "{}", .body_len = 2};
    lb_err err;
    assert_int_equal(lb_http_submit(c, url, &req, &err), LB_OK);
    int64_t give_up = lb_clock_now_ns() + 5000000000LL;
    while (lb_http_inflight(c) > 0 && lb_clock_now_ns() < give_up)
        lb_http_run(c, lb_clock_now_ns() + 10000000);
    assert_int_equal(lb_http_inflight(c), 0);
    return *seen;
}

/* A client whose callbacks fill seen, against the server serve runs in a child (none when
 * serve is NULL), with params p; rig_close ends both. */
typedef struct {
    pid_t pid;
    char base[64];
    lb_http_client *c;
    stream_seen seen;
} stream_rig;

static void rig_open(stream_rig *r, void (*serve)(int lfd), const lb_http_params *p) {
    int port = 0;
    r->pid = serve != NULL ? start_server(serve, &port) : -1;
    snprintf(r->base, sizeof r->base, "http://127.0.0.1:%d", port);
    lb_http_callbacks cb = {.on_token = stream_on_token, .on_done = stream_on_done};
    r->c = NULL;
    lb_err err;
    assert_int_equal(lb_http_init(&r->c, p, &cb, &r->seen, &err), LB_OK);
}

static void rig_close(stream_rig *r) {
    lb_http_free(r->c);
    if (r->pid > 0) {
        kill(r->pid, SIGKILL);
        waitpid(r->pid, NULL, 0);
    }
}

/* A stream whose body ends cleanly right after its last event, without the blank line
 * that would dispatch it ("data: [DONE]\n", or no line end at all), is complete: its
 * [DONE], usage and last token count. Data cut mid-line is bad JSON; a stream with every
 * event whole but no [DONE] is still truncated. */
static void test_http_stream_ending_without_its_last_blank_line_completes(void **state) {
    (void)state;
    lb_http_params p = lb_http_default_params();
    p.timeout_ms = 5000;
    p.max_connections = 4;
    stream_rig r;
    rig_open(&r, serve_streams, &p);

    const char *complete[] = {"/no-blank-line", "/no-line-end", "/crlf-no-blank-line"};
    for (size_t i = 0; i < 3; i++) {
        stream_seen s = fetch_stream(r.c, &r.seen, r.base, complete[i]);
        if (s.error != LB_QERR_NONE) fail_msg("%s: %s", complete[i], s.detail);
        assert_int_equal(s.completion_tokens, 2);
        assert_int_equal(s.n_chunks, 2);
        assert_int_equal(s.tokens_heard, 2);
    }
    /* the last token's event is dispatched (and heard) before the stream is judged */
    stream_seen s = fetch_stream(r.c, &r.seen, r.base, "/last-token-no-blank-line");
    assert_int_equal(s.error, LB_QERR_TRUNCATED);
    assert_int_equal(s.n_chunks, 2);
    assert_int_equal(s.tokens_heard, 2);
    s = fetch_stream(r.c, &r.seen, r.base, "/cut-mid-event");
    assert_int_equal(s.error, LB_QERR_BAD_JSON);
    assert_non_null(strstr(s.detail, "{\"choi"));
    s = fetch_stream(r.c, &r.seen, r.base, "/no-done");
    assert_int_equal(s.error, LB_QERR_TRUNCATED);
    assert_int_equal(s.n_chunks, 2);

    rig_close(&r);
}

/* ---- a stream held open after [DONE] ---- */

#define DONE_STREAM TOKEN_EVENT TOKEN_EVENT USAGE_EVENT "data: [DONE]\n\n"

/* The server child: keep-alive HTTP/1.1, one connection at a time, every request answered
 * with DONE_STREAM as one chunk. On /whole the chunked body's end follows in the same
 * write; on /hold it never comes, and the connection stays open until the client closes
 * it; on /drop it never comes either, and the server closes the connection at once. */
static void serve_done_then_hold(int lfd) {
    for (;;) {
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0) continue;
        conn c = {.fd = fd};
        for (;;) {
            char *end = NULL;
            while ((end = strstr(c.buf, "\r\n\r\n")) == NULL) {
                ssize_t r = read(fd, c.buf + c.len, sizeof c.buf - 1 - c.len);
                if (r <= 0) break;
                c.len += (size_t)r;
                c.buf[c.len] = '\0';
            }
            if (end == NULL) break; /* the client closed the connection */
            char *cl = strcasestr(c.buf, "content-length:");
            size_t total =
                (size_t)(end + 4 - c.buf) + (cl && cl < end ? strtoul(cl + 15, NULL, 10) : 0);
            while (c.len < total) {
                ssize_t r = read(fd, c.buf + c.len, sizeof c.buf - 1 - c.len);
                if (r <= 0) _exit(1);
                c.len += (size_t)r;
            }
            bool hold = strncmp(c.buf, "POST /hold ", 11) == 0;
            bool drop = strncmp(c.buf, "POST /drop ", 11) == 0;
            memmove(c.buf, c.buf + total, c.len - total);
            c.len -= total;
            c.buf[c.len] = '\0';
            char out[2048];
            int n = snprintf(out, sizeof out,
                             "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                             "Transfer-Encoding: chunked\r\n\r\n%zx\r\n%s\r\n%s",
                             strlen(DONE_STREAM), DONE_STREAM, hold || drop ? "" : "0\r\n\r\n");
            if (write(fd, out, (size_t)n) != n || drop) break;
        }
        close(fd);
    }
}

/* [DONE] ends the answer: a server that sends it and then holds the stream open (the
 * request used to wait for its timeout and fail as one) has the query complete after the
 * client's short grace for the body's end (100 ms), timed at [DONE], its connection closed
 * by the client; a stream whose end comes with [DONE] keeps its connection. */
static void test_http_stream_held_open_after_done_completes_at_done(void **state) {
    (void)state;
    lb_http_params p = lb_http_default_params();
    p.timeout_ms = 2000;
    p.max_connections = 4;
    stream_rig r;
    rig_open(&r, serve_done_then_hold, &p);

    for (int i = 0; i < 2; i++) {
        int64_t t0 = lb_clock_now_ns();
        stream_seen s = fetch_stream(r.c, &r.seen, r.base, "/hold");
        if (s.error != LB_QERR_NONE) fail_msg("/hold: %s", s.detail);
        assert_true(lb_clock_now_ns() - t0 < 1000000000LL);
        assert_true(s.latency_ns > 0 && s.latency_ns < 1000000000LL);
        assert_true(s.reported_ns >= 90000000LL); /* timed at [DONE], not at the end */
        assert_int_equal(s.completion_tokens, 2);
        assert_int_equal(s.n_chunks, 2);
        assert_int_equal(s.tokens_heard, 2);
        /* the held connection was closed: the next request needs a new one (the server
         * takes one connection at a time, so this one is only answered once it is) */
        assert_true(s.new_connection);
    }
    stream_seen s = fetch_stream(r.c, &r.seen, r.base, "/whole");
    if (s.error != LB_QERR_NONE) fail_msg("/whole: %s", s.detail);
    assert_int_equal(s.completion_tokens, 2);
    s = fetch_stream(r.c, &r.seen, r.base, "/whole");
    if (s.error != LB_QERR_NONE) fail_msg("/whole: %s", s.detail);
    assert_int_equal(s.n_chunks, 2);
    assert_false(s.new_connection);

    rig_close(&r);
}

/* A server that sends [DONE] and then closes the connection without the chunked body's
 * end has sent the whole answer: the query completes, its tokens and usage counted (it
 * used to fail as dropped). */
static void test_http_stream_dropped_after_done_completes(void **state) {
    (void)state;
    lb_http_params p = lb_http_default_params();
    p.timeout_ms = 2000;
    p.max_connections = 4;
    stream_rig r;
    rig_open(&r, serve_done_then_hold, &p);
    for (int i = 0; i < 2; i++) {
        stream_seen s = fetch_stream(r.c, &r.seen, r.base, "/drop");
        if (s.error != LB_QERR_NONE) fail_msg("/drop: %s", s.detail);
        assert_int_equal(s.completion_tokens, 2);
        assert_int_equal(s.n_chunks, 2);
        assert_int_equal(s.tokens_heard, 2);
        assert_true(s.new_connection);
    }
    rig_close(&r);
}

/* ---- connections not made in time ---- */

/* A loopback listener that never accepts, on *port: with `fill` connections made to it
 * first its queue is full, and the kernel ignores the next connect (it never completes);
 * with none, connects complete and requests are never answered. */
static int silent_listener(int backlog, int fill, int *port, int *filled) {
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(lfd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof a;
    assert_int_equal(bind(lfd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(lfd, backlog), 0);
    assert_int_equal(getsockname(lfd, (struct sockaddr *)&a, &alen), 0);
    *port = ntohs(a.sin_port);
    for (int i = 0; i < fill; i++) {
        filled[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        assert_true(filled[i] >= 0);
        connect(filled[i], (struct sockaddr *)&a, sizeof a);
    }
    usleep(100000); /* the handshakes of those that the queue takes */
    return lfd;
}

/* A connect that does not complete within the connect timeout fails as "connect" (the
 * server was not reached; it used to say "timeout", which names --timeout); a request
 * sent on a connection and not answered in time is still a timeout. */
static void test_http_connect_not_made_in_time_is_a_connect_failure(void **state) {
    (void)state;
    int full_port = 0, mute_port = 0, filled[4];
    int full = silent_listener(0, 4, &full_port, filled);
    int mute = silent_listener(8, 0, &mute_port, NULL);
    lb_http_params p = lb_http_default_params();
    p.connect_timeout_ms = 300;
    p.timeout_ms = 600;
    p.max_connections = 4;
    stream_rig r;
    rig_open(&r, NULL, &p);
    snprintf(r.base, sizeof r.base, "http://127.0.0.1:%d", full_port);
    stream_seen s = fetch_stream(r.c, &r.seen, r.base, "/v1/completions");
    if (s.error != LB_QERR_CONNECT) fail_msg("%s: %s", lb_http_qerr_name(s.error), s.detail);
    assert_true(s.latency_ns < 550000000LL); /* the connect timeout, not the request's */
    snprintf(r.base, sizeof r.base, "http://127.0.0.1:%d", mute_port);
    s = fetch_stream(r.c, &r.seen, r.base, "/v1/completions");
    if (s.error != LB_QERR_TIMEOUT) fail_msg("%s: %s", lb_http_qerr_name(s.error), s.detail);
    assert_true(s.latency_ns >= 550000000LL);
    rig_close(&r);
    for (int i = 0; i < 4; i++)
        close(filled[i]);
    close(full);
    close(mute);
}

/* ---- a reasoning model's stream ---- */

#define REASONING_MS 300 /* the server thinks this long before the answer */

/* The server child: each request answered (Connection: close) with two chat chunks of
 * reasoning, as vLLM sends a reasoning model's thinking, then after REASONING_MS two of
 * the answer, the usage and [DONE]. */
static void serve_reasoning(int lfd) {
    for (;;) {
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0) continue;
        conn c = {.fd = fd};
        char *end = NULL;
        while ((end = strstr(c.buf, "\r\n\r\n")) == NULL) {
            ssize_t r = read(fd, c.buf + c.len, sizeof c.buf - 1 - c.len);
            if (r <= 0) break;
            c.len += (size_t)r;
            c.buf[c.len] = '\0';
        }
        char *cl = end ? strcasestr(c.buf, "content-length:") : NULL;
        size_t total =
            end ? (size_t)(end + 4 - c.buf) + (cl && cl < end ? strtoul(cl + 15, NULL, 10) : 0) : 0;
        while (c.len < total) {
            ssize_t r = read(fd, c.buf + c.len, sizeof c.buf - 1 - c.len);
            if (r <= 0) break;
            c.len += (size_t)r;
        }
        static const char head[] =
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
            "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n"
            "data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"Hmm\"}}]}\n\n"
            "data: {\"choices\":[{\"delta\":{\"reasoning\":\", yes\",\"content\":null}}]}\n\n";
        static const char tail[] =
            "data: {\"choices\":[{\"delta\":{\"content\":\"Paris\"}}]}\n\n"
            "data: {\"choices\":[{\"delta\":{\"content\":\".\"}}]}\n\n"
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}\n\n"
            "data: [DONE]\n\n";
        if (write(fd, head, sizeof head - 1) != (ssize_t)(sizeof head - 1)) _exit(1);
        usleep(REASONING_MS * 1000);
        if (write(fd, tail, sizeof tail - 1) != (ssize_t)(sizeof tail - 1)) _exit(1);
        close(fd);
    }
}

/* A reasoning model's thinking is generated text: its first piece is the first token
 * (it used to be the answer's, REASONING_MS later) and every piece is heard and counted;
 * the kept text is the answer alone, the thinking kept beside it (for a tokenizer to count),
 * afresh for each request. */
static void test_http_reasoning_pieces_are_tokens_but_not_the_answer(void **state) {
    (void)state;
    lb_http_params p = lb_http_default_params();
    p.api = LB_API_CHAT;
    p.keep_text = true;
    p.timeout_ms = 5000;
    p.max_connections = 4;
    stream_rig r;
    rig_open(&r, serve_reasoning, &p);
    stream_seen s = fetch_stream(r.c, &r.seen, r.base, "/v1/chat/completions");
    if (s.error != LB_QERR_NONE) fail_msg("%s", s.detail);
    assert_int_equal(s.tokens_heard, 4);
    assert_int_equal(s.n_chunks, 4);
    assert_int_equal(s.completion_tokens, 4);
    assert_string_equal(s.text, "Paris.");
    assert_string_equal(s.reasoning, "Hmm, yes");
    assert_true(s.latency_ns >= REASONING_MS * 1000000LL);
    assert_true(s.first_ns > 0 && s.first_ns < REASONING_MS * 1000000LL);
    s = fetch_stream(r.c, &r.seen, r.base, "/v1/chat/completions");
    if (s.error != LB_QERR_NONE) fail_msg("%s", s.detail);
    assert_string_equal(s.text, "Paris.");
    assert_string_equal(s.reasoning, "Hmm, yes");
    rig_close(&r);
}

/* ---- answers a benchmark must not take at face value ---- */

/* DONE_STREAM compressed with gzip (Python's gzip.compress, mtime 0). */
static const char GZIP_STREAM[] =
    "\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\x03\x4b\x49\x2c\x49\xb4\x52\xa8\x56\x4a\xce\xc8\xcf"
    "\x4c\x4e\x2d\x56\xb2\x8a\xae\x56\x2a\x49\xad\x28\x51\xb2\x52\x2a\xc9\xcf\x56\x50\xaa\x8d"
    "\xad\xe5\xe2\x4a\x21\x4f\x51\xac\x8e\x52\x69\x71\x62\x7a\xaa\x92\x55\xb5\x52\x41\x51\x7e"
    "\x6e\x41\x49\x3c\x50\x79\x6a\x1e\x50\xce\x58\x47\x29\x19\x28\x90\x93\x5a\x92\x99\x9f\x07"
    "\x17\x35\xaa\x85\x9b\x13\xed\xe2\xef\xe7\x1a\xcb\xc5\x05\x00\x35\xf3\x4d\xfc\xa0\x00\x00"
    "\x00";

/* The answers served by path: a status line and headers, then the body. */
static const struct {
    const char *path, *head, *body;
    size_t body_len;
} odd[] = {
    {"/moved", "HTTP/1.1 308 Permanent Redirect\r\nLocation: /v1/completions/\r\n", "", 0},
    {"/moved-away",
     "HTTP/1.1 301 Moved Permanently\r\nContent-Type: text/html\r\n"
     "Location: http://user:secret@elsewhere.invalid:8000/v1/completions\r\n",
     "<html>moved</html>", 18},
    {"/busy", "HTTP/1.1 429 Too Many Requests\r\nRetry-After: 7\r\n", "{\"error\":\"slow down\"}",
     21},
    {"/gzip", "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Encoding: gzip\r\n",
     GZIP_STREAM, sizeof GZIP_STREAM - 1},
};

/* The server child: one request per connection, answered as its path says. */
static void serve_odd(int lfd) {
    for (;;) {
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0) continue;
        conn c = {.fd = fd};
        char *end = read_request(&c);
        for (size_t i = 0; end != NULL && i < sizeof odd / sizeof odd[0]; i++) {
            size_t n = strlen(odd[i].path);
            if (strncmp(c.buf + 5, odd[i].path, n) != 0 || c.buf[5 + n] != ' ') continue;
            char out[1024];
            int h = snprintf(out, sizeof out, "%sContent-Length: %zu\r\nConnection: close\r\n\r\n",
                             odd[i].head, odd[i].body_len);
            memcpy(out + h, odd[i].body, odd[i].body_len);
            if (write(fd, out, (size_t)h + odd[i].body_len) != h + (ssize_t)odd[i].body_len)
                _exit(1);
        }
        close(fd);
    }
}

/* A redirect is not followed (it would be timed as the query's latency): the query fails
 * as a redirect that names the status and the absolute Location, its password masked, and
 * says what to do; a redirect to another host is not taken either (it would fail to
 * connect: elsewhere.invalid does not resolve). */
static void test_http_redirect_fails_naming_the_location(void **state) {
    (void)state;
    lb_http_params p = lb_http_default_params();
    p.timeout_ms = 5000;
    p.max_connections = 4;
    stream_rig r;
    rig_open(&r, serve_odd, &p);
    stream_seen s = fetch_stream(r.c, &r.seen, r.base, "/moved");
    assert_int_equal(s.error, LB_QERR_REDIRECT);
    assert_int_equal(s.http_status, 308);
    char want[160];
    snprintf(want, sizeof want, "redirected (308) to %s/v1/completions/: give --endpoint that URL",
             r.base);
    assert_string_equal(s.detail, want);
    s = fetch_stream(r.c, &r.seen, r.base, "/moved-away");
    assert_int_equal(s.error, LB_QERR_REDIRECT);
    assert_int_equal(s.http_status, 301);
    assert_string_equal(s.detail, "redirected (301) to http://***@elsewhere.invalid:8000/"
                                  "v1/completions: give --endpoint that URL");
    assert_string_equal(lb_http_qerr_name(LB_QERR_REDIRECT), "redirect");
    /* a refusal that says when to come back says it in the detail */
    s = fetch_stream(r.c, &r.seen, r.base, "/busy");
    assert_int_equal(s.error, LB_QERR_HTTP_4XX);
    assert_string_equal(s.detail, "HTTP 429 (Retry-After 7 s): {\"error\":\"slow down\"}");
    p.stream = false;
    lb_http_free(r.c);
    lb_http_callbacks cb = {.on_token = stream_on_token, .on_done = stream_on_done};
    lb_err err;
    assert_int_equal(lb_http_init(&r.c, &p, &cb, &r.seen, &err), LB_OK);
    s = fetch_stream(r.c, &r.seen, r.base, "/moved");
    assert_int_equal(s.error, LB_QERR_REDIRECT);
    assert_string_equal(s.detail, want);
    rig_close(&r);
}

/* A server that compresses a stream nobody asked it to compress (Content-Encoding: gzip
 * without Accept-Encoding) is decoded: the events, tokens and usage come through. */
static void test_http_compressed_stream_is_decoded(void **state) {
    (void)state;
    lb_http_params p = lb_http_default_params();
    p.timeout_ms = 5000;
    p.max_connections = 4;
    stream_rig r;
    rig_open(&r, serve_odd, &p);
    stream_seen s = fetch_stream(r.c, &r.seen, r.base, "/gzip");
    if (s.error != LB_QERR_NONE) fail_msg("%s: %s", lb_http_qerr_name(s.error), s.detail);
    assert_int_equal(s.completion_tokens, 2);
    assert_int_equal(s.n_chunks, 2);
    assert_int_equal(s.tokens_heard, 2);
    rig_close(&r);
}

/* The server child: one connection at a time; its first request is answered with
 * DONE_STREAM and the connection kept alive, and the next one is read and the connection
 * closed without an answer, as a server whose idle timeout strikes just as a request
 * arrives does. */
static void serve_closing_at_the_second_request(int lfd) {
    for (;;) {
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0) continue;
        conn c = {.fd = fd};
        if (read_request(&c) != NULL) {
            const char *body = DONE_STREAM;
            char out[1024];
            int n = snprintf(out, sizeof out,
                             "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                             "Content-Length: %zu\r\n\r\n%s",
                             strlen(body), body);
            if (write(fd, out, (size_t)n) != n) _exit(1);
            c = (conn){.fd = fd};
            read_request(&c);
        }
        close(fd);
    }
}

/* A kept-alive connection the server closes as the next request arrives, with no byte of
 * an answer, costs that request nothing: it is sent again on a new connection. */
static void test_http_request_on_a_connection_closed_under_it_is_sent_again(void **state) {
    (void)state;
    lb_http_params p = lb_http_default_params();
    p.timeout_ms = 5000;
    p.max_connections = 4;
    stream_rig r;
    rig_open(&r, serve_closing_at_the_second_request, &p);
    for (int i = 0; i < 3; i++) {
        stream_seen s = fetch_stream(r.c, &r.seen, r.base, "/v1/completions");
        if (s.error != LB_QERR_NONE)
            fail_msg("%d: %s: %s", i, lb_http_qerr_name(s.error), s.detail);
        assert_int_equal(s.completion_tokens, 2);
        assert_true(s.new_connection);
    }
    rig_close(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_http_idle_connections_closed_by_the_server_cost_no_cpu),
        cmocka_unit_test(test_http_stream_ending_without_its_last_blank_line_completes),
        cmocka_unit_test(test_http_stream_held_open_after_done_completes_at_done),
        cmocka_unit_test(test_http_stream_dropped_after_done_completes),
        cmocka_unit_test(test_http_reasoning_pieces_are_tokens_but_not_the_answer),
        cmocka_unit_test(test_http_connect_not_made_in_time_is_a_connect_failure),
        cmocka_unit_test(test_http_redirect_fails_naming_the_location),
        cmocka_unit_test(test_http_compressed_stream_is_decoded),
        cmocka_unit_test(test_http_request_on_a_connection_closed_under_it_is_sent_again),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
