/* fuzz_http.c: the HTTP request path of `llmbench serve`: the check of a request's head
 * (serve/http_head.h) on the input, then the input sent as a client would, on a loopback
 * connection, to a server started once in this process (synthetic tokens, no delays, at
 * most 8 tokens a request), which reads it through its acceptor, libmicrohttpd and its own
 * request parser.
 *
 * Invariants. The head check's verdict is one of its documented values and does not depend
 * on how much of the input has arrived: a prefix gets MORE or the same verdict, and a well-
 * formed head's verdict is the same over the head alone; the error response built for a
 * refusal is one HTTP response whose body is an OpenAI-style JSON error. The server answers
 * each input (closed after it is sent) with nothing or with bytes that begin as an HTTP/1.1
 * response; when the head check refused the input, that response is the JSON error. */
#include <arpa/inet.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/clock.h"
#include "fuzz.h"
#include "serve/http_head.h"
#include "serve/server.h"
#include "serve/synthetic.h"

static bool is_verdict(int v) {
    return v == LB_HTTP_HEAD_MORE || v == LB_HTTP_HEAD_OK || v == 400 || v == 411 || v == 413 ||
           v == 431 || v == 501 || v == 505;
}

/* The body of the HTTP response in r[0..n) is {"error":{"message":...}}. */
static void check_json_error(const char *r, size_t n) {
    FUZZ_CHECK(n > 9 && memcmp(r, "HTTP/1.1 ", 9) == 0);
    const char *body = memmem(r, n, "\r\n\r\n", 4);
    FUZZ_CHECK(body != NULL);
    body += 4;
    json_t *j = json_loadb(body, n - (size_t)(body - r), JSON_DISABLE_EOF_CHECK, NULL);
    FUZZ_CHECK(j != NULL);
    FUZZ_CHECK(json_string_value(json_object_get(json_object_get(j, "error"), "message")));
    json_decref(j);
}

static void check_head(const char *data, size_t size, int *verdict) {
    size_t head_len = 0;
    const char *why = NULL;
    int v = lb_http_head_check(data, size, &head_len, &why);
    FUZZ_CHECK(is_verdict(v));
    *verdict = v;
    if (v == LB_HTTP_HEAD_OK) {
        FUZZ_CHECK(head_len >= 2 && head_len <= size && data[head_len - 1] == '\n');
        size_t again = 0;
        FUZZ_CHECK(lb_http_head_check(data, head_len, &again, &why) == LB_HTTP_HEAD_OK);
        FUZZ_CHECK(again == head_len);
    } else if (v != LB_HTTP_HEAD_MORE) {
        FUZZ_CHECK(why != NULL);
        char response[1024];
        size_t n = lb_http_head_error_response(v, why, response, sizeof response);
        FUZZ_CHECK(n > 0);
        check_json_error(response, n);
    }
    /* A prefix (cut where the input's first byte says) knows no more than the whole. */
    size_t cut = size > 0 ? (uint8_t)data[0] * size / 256 : 0;
    const char *why_cut = NULL;
    int vc = lb_http_head_check(data, cut, &head_len, &why_cut);
    FUZZ_CHECK(vc == LB_HTTP_HEAD_MORE || vc == v);
}

static int server_port(void) {
    static lb_server *srv;
    static lb_token_source src;
    if (srv == NULL) {
        lb_synthetic_params sp = lb_synthetic_default_params();
        lb_server_params p = lb_server_default_params();
        p.port = 0;
        p.threads = 2;
        p.max_tokens = 8;
        p.read_timeout_s = 2;
        lb_err err = {{0}};
        FUZZ_CHECK(lb_synthetic_init(&sp, &src, &err) == LB_OK);
        FUZZ_CHECK(lb_server_start(&p, &src, &srv, &err) == LB_OK);
    }
    return lb_server_port(srv);
}

/* Sends the input on a new connection, ends the sending side, reads the answer until the
 * server closes or 2 s pass. */
static size_t exchange(const char *data, size_t size, char *reply, size_t cap) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)server_port())};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    FUZZ_CHECK(fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0);
    for (size_t sent = 0; sent < size;) {
        ssize_t w = send(fd, data + sent, size - sent, MSG_NOSIGNAL);
        if (w <= 0) break; /* the server may refuse before reading everything */
        sent += (size_t)w;
    }
    shutdown(fd, SHUT_WR);
    size_t n = 0;
    int64_t deadline = lb_clock_now_ns() + 2000000000LL;
    while (n + 1 < cap) {
        int left = (int)((deadline - lb_clock_now_ns()) / 1000000);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (left <= 0 || poll(&p, 1, left) <= 0) break;
        ssize_t r = recv(fd, reply + n, cap - 1 - n, 0);
        if (r <= 0) break;
        n += (size_t)r;
    }
    close(fd);
    reply[n] = '\0';
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *text = (const char *)data;
    int verdict = LB_HTTP_HEAD_MORE;
    check_head(text, size, &verdict);
    static char reply[1 << 16];
    size_t n = exchange(text, size, reply, sizeof reply);
    if (n > 0) FUZZ_CHECK(n >= 9 && memcmp(reply, "HTTP/1.", 7) == 0);
    if (verdict != LB_HTTP_HEAD_OK && verdict != LB_HTTP_HEAD_MORE) check_json_error(reply, n);
    return 0;
}
