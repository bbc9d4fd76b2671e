/* http_head.h: checks the head of an HTTP/1.1 request (request line and header fields)
 * before `llmbench serve` lets libmicrohttpd read it.
 *
 * libmicrohttpd answers the malformed requests it finds itself, with HTML bodies (and, in
 * 0.9.75, for a bad Content-Length, with two response heads). The server's look at each
 * request's bytes before the library reads them (serve/server_accept.h) runs this check
 * instead, so such a request gets one response with an OpenAI-style JSON error. It accepts what a
 * careful server accepts (RFC 9112): METHOD SP request-target SP HTTP/1.0 or HTTP/1.1, header lines
 * of token ":" value without control characters and without line folding, at most one
 * Content-Length value (digits only, at most LB_HTTP_BODY_MAX bytes), no Content-Length
 * together with Transfer-Encoding, at most LB_HTTP_FIELDS_MAX header fields (more would
 * pass libmicrohttpd's memory for a connection, which it answers itself), and no
 * Transfer-Encoding: a body comes with Content-Length (chunked: 411, as libmicrohttpd
 * answers a broken chunked body itself; any other coding: 501). A pure
 * function of its bytes: the fuzz target tests/fuzz/fuzz_http_head.c drives it. */
#ifndef LB_SERVE_HTTP_HEAD_H
#define LB_SERVE_HTTP_HEAD_H

#include <stddef.h>

#define LB_HTTP_BODY_MAX   ((size_t)64 << 20) /* the largest request body served, bytes */
#define LB_HTTP_HEAD_MAX   16384              /* the longest request head, bytes */
#define LB_HTTP_FIELDS_MAX 100                /* header fields in a request head at most */
#define LB_HTTP_HEAD_MORE  0                  /* no verdict yet: the head has not ended */
#define LB_HTTP_HEAD_OK    200

/* The verdict on buf[0..len), the first bytes of a request: LB_HTTP_HEAD_MORE while the head
 * has not ended (and nothing in it is wrong yet), LB_HTTP_HEAD_OK for a well-formed head
 * (*head_len = its length with the blank line), or the HTTP status to refuse it with (400,
 * 411, 413, 431, 501, 505) and a sentence in why (static text). */
int lb_http_head_check(const char *buf, size_t len, size_t *head_len, const char **why);

/* A whole HTTP/1.1 response refusing a request: status, JSON body
 * {"error":{"message":why,...}}, Connection: close. Writes at most cap bytes into out and
 * returns the length (0 when cap is too small). why must hold no '"' or '\\'. */
size_t lb_http_head_error_response(int status, const char *why, char *out, size_t cap);

#endif
