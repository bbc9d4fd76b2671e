/* server.c: the OpenAI-compatible HTTP server behind server.h, on libmicrohttpd.
 *
 * One request object per completion request holds everything the request needs: the
 * body (inline up to 4 KiB), the pre-formatted JSON head shared by all its chunks
 * ({"id":..,"object":..,"created":..,"model":..,) and the token source's state, so a
 * request costs one allocation plus libmicrohttpd's own. Chunks are assembled with
 * memcpy around that head, never through a JSON library; only the request body is
 * parsed with jansson. Counters are relaxed atomics; no lock is taken on the hot path
 * except inside libmicrohttpd and, for delayed tokens, the timer's.
 *
 * A request is owned by its connection (released in the completion callback) and, while
 * a callback response reads from it, by that response too (released in the response's
 * free callback). Both run on the connection's worker thread, so the count is plain.
 *
 * Flow: headers -> request object; body pieces -> appended; last call -> parse, start
 * the token source, draw the fault. Streamed: a callback response whose reader writes
 * every due token as one SSE event and, when none is due, parks the connection until the
 * next one is (server_timer.h). Whole: the access handler pulls tokens the same way,
 * parking between them, and queues the body when the last one is in. */
#include "serve/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <jansson.h>
#include <limits.h>
#include <linux/tcp.h>
#include <math.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/log.h"
#include "core/result.h"
#include "core/rng.h"
#include "core/utf8text.h"
#include "serve/http_head.h"
#include "serve/server_accept.h"
#include "serve/server_guard.h"
#include "serve/server_metrics.h"
#include "serve/server_timer.h"

#define BODY_INLINE_BYTES 4096
#define BODY_MAX_BYTES    LB_HTTP_BODY_MAX
#define MODEL_MAX_BYTES   LB_SERVER_MODEL_MAX_BYTES
/* The head's fixed part is at most 111 bytes ("chatcmpl-" + 20-digit index, the longest
 * object name, a 20-character time); the model name escapes to at most 6 bytes a byte. */
#define HEAD_FIXED_MAX_BYTES 111
#define HEAD_BYTES           (MODEL_MAX_BYTES * 6 + 160)
_Static_assert(HEAD_BYTES >= HEAD_FIXED_MAX_BYTES + MODEL_MAX_BYTES * 6 + 2,
               "the head buffer must hold the longest head");
/* `stop`: at most STOP_MAX sequences of at most STOP_MAX_BYTES bytes. Text that may be
 * the start of a stop sequence is held back, so one event carries at most a token and
 * what was held. */
#define STOP_MAX             4
#define STOP_MAX_BYTES       32
#define PIECE_MAX_BYTES      (LB_TOKEN_TEXT_MAX_BYTES + STOP_MAX_BYTES)
#define TOKEN_JSON_MAX_BYTES (PIECE_MAX_BYTES * 6)
#define BATCH_MAX            128 /* prompts in one completion request */
#define ERROR_MSG_MAX_BYTES  511 /* an error body's message, before JSON escapes */
/* An SSE event is "data: " + head + at most this many bytes. */
#define EVENT_TAIL_BYTES   (TOKEN_JSON_MAX_BYTES + 192)
#define EVENT_BYTES        (6 + HEAD_BYTES + EVENT_TAIL_BYTES)
#define STREAM_BLOCK_BYTES (16 * 1024)
#define DRAIN_POLL_NS      2000000

typedef enum {
    ROUTE_NONE,
    ROUTE_COMPLETIONS,
    ROUTE_CHAT,
    ROUTE_MODELS,
    ROUTE_HEALTH,
    ROUTE_METRICS,
} route;

typedef enum {
    OUT_TOKENS, /* sending token events */
    OUT_USAGE,  /* the usage event is next */
    OUT_DONE,   /* "data: [DONE]" is next */
    OUT_END,    /* end the HTTP response cleanly */
    OUT_ABORT,  /* close the connection */
} out_state;

typedef struct {
    char *p;
    size_t len, cap;
    bool heap; /* p was allocated here (else it points into the request) */
} sbuf;

struct lb_server {
    lb_server_params p;
    char model[MODEL_MAX_BYTES + 1];
    const lb_token_source *src;
    struct MHD_Daemon *daemon;
    lb_server_acceptor *acceptor;
    lb_server_accept_stats accepted; /* the acceptor's counters once it has stopped */
    lb_server_timer *timer;
    lb_server_guard *guard;
    struct MHD_Response *models_resp[2]; /* [1]: with Connection: close */
    struct MHD_Response *health_resp[2];
    int port;
    bool shut_down;
    atomic_bool started;
    atomic_bool draining;
    atomic_uint_fast64_t next_index;
    atomic_uint_fast64_t requests, streamed, completed, faults, client_errors, aborted, tokens,
        in_flight, busy;
    /* Requests a shutdown waits for besides those in flight, whose heads the acceptor found:
     * on connections handed to libmicrohttpd and not yet started there, or on started ones
     * (head_due) that have not read them yet. */
    atomic_uint_fast64_t handed, mhd_started, heads_due;
    atomic_size_t body_bytes;         /* request bodies held (reserved) now */
    lb_server_latency duration, ttft; /* serve/server_metrics.h */
};

/* One prompt of a request: text in the request's body or token ids in its ids. */
typedef struct {
    size_t at, len; /* where it starts and its length: bytes of body, or ids */
    bool ids;       /* token ids */
} prompt_part;

typedef struct {
    lb_server *srv;
    struct MHD_Connection *conn;
    int refs;
    bool chat;
    bool parsed; /* body read and accepted: the source has started */
    bool stream, include_usage;
    bool faulted, fault_fired;
    bool too_large;
    bool too_busy;     /* the body would pass the server's memory budget: 503 */
    bool ok;           /* answered in full, as asked */
    bool client_error; /* answered 4xx */
    out_state out;
    lb_server_timer_waker waker; /* the source's wake-ups (token_source.h's wake) */
    int64_t arrival_ns;
    uint64_t index;
    int64_t max_tokens, prompt_tokens, sent, fault_at;
    /* the request's sampling fields, checked */
    lb_token_sampling sampling;
    int64_t choice_sent;   /* tokens of the current choice */
    int n_prompts, choice; /* a batch of prompts: one choice each, answered in turn */
    prompt_part one;       /* the prompt, when there is one */
    prompt_part *parts;    /* a batch's [n_prompts] prompts; NULL: one */
    int32_t *ids;          /* the token ids of the prompts given as ids */
    size_t n_ids;
    lb_token_message *msgs; /* a chat's [n_msgs] messages, contents in body */
    size_t n_msgs;
    char stop[STOP_MAX][STOP_MAX_BYTES];
    uint8_t stop_len[STOP_MAX];
    uint8_t n_stop, held_len;
    bool stopped; /* a stop sequence or the source (end of sequence) ended the current choice */
    char held[STOP_MAX_BYTES]; /* text held back: it may begin a stop sequence */
    size_t drop_at;       /* drop fault, whole body: bytes sent before the connection is closed */
    size_t body_reserved; /* bytes of the server's body budget this request holds */
    sbuf body;            /* the request body, then the prompt text */
    sbuf resp;            /* the whole (non-streamed) response body */
    size_t head_len;
    char head[HEAD_BYTES];
    char body_inline[BODY_INLINE_BYTES];
    max_align_t stream_state[]; /* the token source's per-request state */
} request;

static const char *const fault_names[] = {"none", "drop", "stall", "bad-json", "500", "truncate"};

const char *lb_server_fault_mode_name(lb_fault_mode mode) {
    if ((unsigned)mode >= sizeof fault_names / sizeof fault_names[0]) return "?";
    return fault_names[mode];
}

int lb_server_fault_mode_parse(const char *name) {
    for (size_t i = 0; i < sizeof fault_names / sizeof fault_names[0]; i++)
        if (strcmp(name, fault_names[i]) == 0) return (int)i;
    return -1;
}

lb_server_params lb_server_default_params(void) {
    return (lb_server_params){
        .host = "127.0.0.1",
        .port = 8000,
        .threads = 0,
        .max_tokens = 4096,
        .default_max_tokens = 16,
        .model = "synthetic",
        .fault = LB_FAULT_NONE,
        .fault_rate = 1.0,
        .seed = 1,
        .connection_limit = 65536,
        .idle_timeout_s = 30.0,
        .read_timeout_s = 30.0,
        .body_memory_bytes = (size_t)256 << 20,
    };
}

/* ---- byte writers: the caller guarantees room ---- */

static char *put(char *p, const char *s, size_t n) {
    memcpy(p, s, n);
    return p + n;
}

#define PUT_LIT(p, lit) put((p), (lit), sizeof(lit) - 1)

/* Writes s[0..n) as the inside of a JSON string: at most 6 n bytes. */
static char *put_json(char *p, const char *s, size_t n) {
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            *p++ = '\\';
            *p++ = (char)c;
        } else if (c == '\n') {
            p = PUT_LIT(p, "\\n");
        } else if (c == '\t') {
            p = PUT_LIT(p, "\\t");
        } else if (c == '\r') {
            p = PUT_LIT(p, "\\r");
        } else if (c < 0x20) {
            p = PUT_LIT(p, "\\u00");
            *p++ = hex[c >> 4];
            *p++ = hex[c & 15];
        } else {
            *p++ = (char)c;
        }
    }
    return p;
}

static char *put_i64(char *p, int64_t v) {
    char tmp[24];
    int n = snprintf(tmp, sizeof tmp, "%lld", (long long)v);
    return put(p, tmp, (size_t)n);
}

static bool sbuf_reserve(sbuf *b, size_t extra) {
    if (b->len + extra <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra)
        cap *= 2;
    char *p = b->heap ? realloc(b->p, cap) : malloc(cap);
    if (!p) return false;
    if (!b->heap && b->len > 0) memcpy(p, b->p, b->len);
    b->p = p;
    b->cap = cap;
    b->heap = true;
    return true;
}

static bool sbuf_append(sbuf *b, const char *s, size_t n) {
    if (!sbuf_reserve(b, n)) return false;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    return true;
}

static void sbuf_free(sbuf *b) {
    if (b->heap) free(b->p);
    *b = (sbuf){0};
}

/* ---- responses ---- */

static int64_t now_ns(const lb_server *s) {
    return atomic_load_explicit(&s->draining, memory_order_relaxed) ? INT64_MAX : lb_clock_now_ns();
}

static void count(atomic_uint_fast64_t *c, uint64_t n) {
    atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

static bool answer_closes(lb_server *s, struct MHD_Connection *c);

static enum MHD_Result queue(lb_server *s, struct MHD_Connection *c, unsigned code,
                             struct MHD_Response *resp, const char *content_type) {
    if (!resp) return MHD_NO;
    if (content_type) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    if (answer_closes(s, c)) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result ret = MHD_queue_response(c, code, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* An OpenAI-style error: {"error":{"message":..,"type":..,"param":null,"code":null}}. The
 * message may quote the request (a URL's raw bytes, a field name): it is cut to
 * ERROR_MSG_MAX_BYTES between characters and its bytes that are not UTF-8 become '?', so
 * that a strict JSON client can read the body. */
static enum MHD_Result vreply_error(lb_server *s, struct MHD_Connection *c, unsigned code,
                                    const char *allow, const char *fmt, va_list ap) {
    char msg[ERROR_MSG_MAX_BYTES + 4]; /* + 3: the character that crosses the cut, seen whole */
    if (vsnprintf(msg, sizeof msg, fmt, ap) < 0) msg[0] = '\0';
    size_t len = lb_utf8text_cut_len(msg, ERROR_MSG_MAX_BYTES);
    msg[len] = '\0';
    lb_utf8text_repair(msg);
    char body[ERROR_MSG_MAX_BYTES * 6 + 128];
    char *p = PUT_LIT(body, "{\"error\":{\"message\":\"");
    p = put_json(p, msg, len);
    p = PUT_LIT(p, "\",\"type\":\"");
    p = code >= 500 ? PUT_LIT(p, "server_error") : PUT_LIT(p, "invalid_request_error");
    p = PUT_LIT(p, "\",\"param\":null,\"code\":null}}");
    if (code >= 400 && code < 500) count(&s->client_errors, 1);
    struct MHD_Response *resp =
        MHD_create_response_from_buffer((size_t)(p - body), body, MHD_RESPMEM_MUST_COPY);
    if (resp && allow) MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow);
    return queue(s, c, code, resp, "application/json");
}

static enum MHD_Result reply_error(lb_server *s, struct MHD_Connection *c, unsigned code,
                                   const char *allow, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static enum MHD_Result reply_error(lb_server *s, struct MHD_Connection *c, unsigned code,
                                   const char *allow, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    enum MHD_Result ret = vreply_error(s, c, code, allow, fmt, ap);
    va_end(ap);
    return ret;
}

/* ---- request lifetime ---- */

/* What the server keeps of a connection (libmicrohttpd's socket context). */
typedef struct {
    lb_guarded_conn *guard; /* its deadlines (serve/server_guard.h) */
    int fd;
    uint64_t ended_bytes; /* input of the requests answered on it, bytes */
    bool http10;          /* the current request is HTTP/1.0 */
    bool first_call;      /* the access handler's first call for the current request */
    bool closing;         /* the answer queued ends the connection */
    bool head_due;        /* the acceptor found a request head that has not been read yet */
} conn_ctx;

static conn_ctx *conn_of(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* Counts (due) or uncounts the request head the acceptor found on cc: a shutdown waits for
 * these requests as for those in flight. */
static void head_due(lb_server *s, conn_ctx *cc, bool due) {
    if (cc == NULL || cc->head_due == due) return;
    cc->head_due = due;
    if (due)
        atomic_fetch_add(&s->heads_due, 1);
    else
        atomic_fetch_sub(&s->heads_due, 1);
}

/* The connection's deadline record. */
static lb_guarded_conn *guarded(struct MHD_Connection *c) {
    conn_ctx *cc = conn_of(c);
    return cc ? cc->guard : NULL;
}

/* What the headers say about the body's length and the connection. */
typedef struct {
    int n_lengths;
    const char *length; /* the first Content-Length */
    bool lengths_differ;
    bool transfer_encoding;
    bool close, keep_alive; /* Connection: close, Connection: keep-alive */
} body_framing;

/* Whether the comma-separated list value holds token (case-insensitive). */
static bool has_token(const char *value, const char *token) {
    size_t n = strlen(token);
    for (const char *p = value; *p;) {
        p += strspn(p, " \t,");
        size_t len = strcspn(p, ",");
        while (len > 0 && (p[len - 1] == ' ' || p[len - 1] == '\t'))
            len--;
        if (len == n && strncasecmp(p, token, n) == 0) return true;
        p += strcspn(p, ",");
    }
    return false;
}

static enum MHD_Result read_framing(void *cls, enum MHD_ValueKind kind, const char *key,
                                    const char *value) {
    (void)kind;
    body_framing *f = cls;
    if (value == NULL) return MHD_YES;
    if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) == 0) {
        if (f->n_lengths++ == 0)
            f->length = value;
        else if (strcmp(f->length, value) != 0)
            f->lengths_differ = true;
    } else if (strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) == 0) {
        f->transfer_encoding = true;
    } else if (strcasecmp(key, MHD_HTTP_HEADER_CONNECTION) == 0) {
        f->close |= has_token(value, "close");
        f->keep_alive |= has_token(value, "keep-alive");
    }
    return MHD_YES;
}

/* The bytes of fd's input that the process has read: the kernel's count of bytes received
 * less those waiting unread, at one instant (the unread count, taken before and after, did
 * not change: only the thread calling this reads fd). False when it cannot be known. */
static bool input_read(int fd, uint64_t *out) {
    for (int tries = 0; tries < 8; tries++) {
        int before = 0, after = 0;
        struct tcp_info ti;
        socklen_t ti_len = sizeof ti;
        if (ioctl(fd, FIONREAD, &before) != 0 ||
            getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &ti_len) != 0 ||
            ti_len <
                offsetof(struct tcp_info, tcpi_bytes_received) + sizeof ti.tcpi_bytes_received ||
            ioctl(fd, FIONREAD, &after) != 0)
            return false;
        if (before == after) {
            *out = ti.tcpi_bytes_received - (uint64_t)after;
            return true;
        }
    }
    return false;
}

/* Whether the answer being queued on c ends the connection; recorded in its conn_ctx.
 * libmicrohttpd closes after an answer queued on the access handler's first call (before
 * the request was read to its end). This server closes while draining, and when
 * libmicrohttpd has read input past the current request: a client that sent the next
 * request before this answer (pipelined) left it in the library's buffer, where the
 * library would parse it unchecked (serve/server_accept.h), so it is never parsed: the
 * connection ends after this answer and the client sends the rest again on a new one.
 * Past the request: the bytes the process has read are more than those of the requests
 * answered on the connection, this one included (head size and Content-Length; a chunked
 * body never gets here). libmicrohttpd reads no input from a request read to its end
 * until its answer has been sent, so what this finds holds until the request ends. */
static bool answer_closes(lb_server *s, struct MHD_Connection *c) {
    bool draining = atomic_load_explicit(&s->draining, memory_order_relaxed);
    conn_ctx *cc = conn_of(c);
    if (cc == NULL) return draining;
    if (cc->first_call) {
        cc->closing = true;
        return true;
    }
    body_framing f = {0};
    MHD_get_connection_values(c, MHD_HEADER_KIND, read_framing, &f);
    const union MHD_ConnectionInfo *head =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
    uint64_t taken = 0;
    if (head != NULL)
        cc->ended_bytes += head->header_size + (f.length ? strtoull(f.length, NULL, 10) : 0);
    cc->closing =
        draining || head == NULL || !input_read(cc->fd, &taken) || taken != cc->ended_bytes;
    return cc->closing;
}

/* Whether a request that ended well leaves its connection open with the next request's
 * bytes all unread in the socket, so that the acceptor can look at its head first. Open:
 * the answer did not end it (answer_closes) and, by libmicrohttpd's rule for the answers
 * this server sends, HTTP/1.1 unless the request says close, HTTP/1.0 when it asks for
 * keep-alive. Unread: answer_closes ended every connection where the library read ahead. */
static bool next_request_unread(lb_server *s, struct MHD_Connection *c) {
    conn_ctx *cc = conn_of(c);
    if (cc == NULL || cc->closing || atomic_load(&s->draining)) return false;
    body_framing f = {0};
    MHD_get_connection_values(c, MHD_HEADER_KIND, read_framing, &f);
    return cc->http10 ? f.keep_alive && !f.close : !f.close;
}

static request *request_new(lb_server *s, struct MHD_Connection *c, bool chat) {
    /* Zero only the fields and the source's state, not the buffers (6 KiB) in between. */
    request *r = malloc(sizeof *r + s->src->stream_bytes);
    if (!r) return NULL;
    memset(r, 0, offsetof(request, head));
    memset(r->stream_state, 0, s->src->stream_bytes);
    r->srv = s;
    r->conn = c;
    r->refs = 1;
    r->chat = chat;
    r->arrival_ns = lb_clock_now_ns();
    r->index = atomic_fetch_add_explicit(&s->next_index, 1, memory_order_relaxed);
    r->body = (sbuf){.p = r->body_inline, .cap = sizeof r->body_inline};
    count(&s->requests, 1);
    count(&s->in_flight, 1);
    return r;
}

static void request_release(void *cls) {
    request *r = cls;
    if (--r->refs > 0) return;
    lb_server *s = r->srv;
    if (r->parsed && s->src->done) s->src->done(s->src->ctx, r->stream_state);
    atomic_fetch_sub(&s->body_bytes, r->body_reserved);
    sbuf_free(&r->body);
    sbuf_free(&r->resp);
    free(r->parts);
    free(r->msgs);
    free(r->ids);
    free(r);
    atomic_fetch_sub_explicit(&s->in_flight, 1, memory_order_relaxed);
}

/* A request has ended. A connection kept open is suspended and watched by the acceptor
 * until the next request's head is in and checked (serve/server_accept.h). One its answer
 * ends lingers there: libmicrohttpd closes its descriptor, and the acceptor reads away the
 * input the client sent on (requests after it, the rest of a body) before closing its own. */
static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    lb_server *s = cls;
    lb_server_guard_phase(s->guard, guarded(c), LB_CONN_WAITING);
    conn_ctx *cc = conn_of(c);
    if (toe == MHD_REQUEST_TERMINATED_COMPLETED_OK && cc != NULL && cc->closing) {
        int fd = fcntl(cc->fd, F_DUPFD_CLOEXEC, 0);
        if (fd >= 0 && !lb_server_accept_linger(s->acceptor, fd)) close(fd);
    } else if (toe == MHD_REQUEST_TERMINATED_COMPLETED_OK && next_request_unread(s, c)) {
        MHD_suspend_connection(c);
        lb_server_guard_phase(s->guard, guarded(c), LB_CONN_WATCHED);
        if (!lb_server_accept_watch(s->acceptor, conn_of(c)->fd, c)) {
            lb_server_guard_phase(s->guard, guarded(c), LB_CONN_WAITING);
            MHD_resume_connection(c);
        }
    }
    request *r = *con_cls;
    if (!r) return;
    *con_cls = NULL;
    if (r->client_error || r->too_busy) {
        /* counted when answered */
    } else if (r->faulted) {
        count(&s->faults, 1);
    } else if (r->ok && toe == MHD_REQUEST_TERMINATED_COMPLETED_OK) {
        count(&s->completed, 1);
        lb_server_metrics_observe(&s->duration, lb_clock_now_ns() - r->arrival_ns);
    } else {
        count(&s->aborted, 1);
    }
    if (r->stream) count(&s->tokens, (uint64_t)r->sent); /* whole: counted when queued */
    request_release(r);
}

static enum MHD_Result reply_request_error(request *r, unsigned code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static enum MHD_Result reply_request_error(request *r, unsigned code, const char *fmt, ...) {
    r->client_error = code >= 400 && code < 500;
    va_list ap;
    va_start(ap, fmt);
    enum MHD_Result ret = vreply_error(r->srv, r->conn, code, NULL, fmt, ap);
    va_end(ap);
    return ret;
}

/* ---- request parsing ---- */

static bool is_set(const json_t *v) {
    return v && !json_is_null(v);
}

/* Refuses a field's value: r->head gets `rule`, then ", got " and the value, a number or
 * true/false as sent, anything else by its type. Returns r->head. */
static const char *refuse_value(request *r, const char *rule, const json_t *v) {
    char got[32];
    switch (json_typeof(v)) {
    case JSON_INTEGER: snprintf(got, sizeof got, "%lld", (long long)json_integer_value(v)); break;
    case JSON_REAL: /* %.15g reads as people write; %.17g where that is not the same number */
        snprintf(got, sizeof got, "%.15g", json_real_value(v));
        if (strtod(got, NULL) != json_real_value(v))
            snprintf(got, sizeof got, "%.17g", json_real_value(v));
        if (strspn(got, "-0123456789") == strlen(got)) /* 1.0 is not the integer 1 */
            strcat(got, ".0");
        break;
    case JSON_TRUE: snprintf(got, sizeof got, "true"); break;
    case JSON_FALSE: snprintf(got, sizeof got, "false"); break;
    default: snprintf(got, sizeof got, "%s", lb_result_json_kind(v)); break;
    }
    snprintf(r->head, sizeof r->head, "%s, got %s", rule, got);
    return r->head;
}

/* A prompt of text: appended to r->body, *part says where. */
static const char *text_add(request *r, const json_t *text, prompt_part *part) {
    *part = (prompt_part){.at = r->body.len, .len = json_string_length(text)};
    return sbuf_append(&r->body, json_string_value(text), part->len) ? NULL : "out of memory";
}

/* A prompt of token ids (a non-empty JSON array of ids in 0..INT32_MAX): appended to
 * r->ids, *part says where. */
static const char *ids_add(request *r, const json_t *ids, prompt_part *part) {
    size_t n = json_array_size(ids);
    if (n == 0) return "a token id array in 'prompt' must not be empty";
    int32_t *grown = realloc(r->ids, (r->n_ids + n) * sizeof *grown);
    if (grown == NULL) return "out of memory";
    r->ids = grown;
    *part = (prompt_part){.at = r->n_ids, .len = n, .ids = true};
    size_t i;
    json_t *v;
    json_array_foreach(ids, i, v) {
        if (!json_is_integer(v)) return "'prompt' array must hold only strings or only token ids";
        json_int_t id = json_integer_value(v);
        if (id < 0 || id > INT32_MAX) {
            snprintf(r->head, sizeof r->head,
                     "'prompt' holds %lld, which is not a token id (0..2147483647)", (long long)id);
            return r->head;
        }
        r->ids[r->n_ids++] = (int32_t)id;
    }
    return NULL;
}

/* Collects the prompt of a completion request: a string or an array of token ids is one
 * prompt (r->one); an array of strings or of id arrays is a batch (one choice a prompt,
 * r->parts). Text goes to r->body, ids to r->ids. */
static const char *read_prompt(request *r, const json_t *prompt) {
    if (!prompt) return "missing field 'prompt'";
    r->n_prompts = 1;
    if (json_is_string(prompt)) return text_add(r, prompt, &r->one);
    if (!json_is_array(prompt) || json_array_size(prompt) == 0)
        return "'prompt' must be a string, an array of token ids, or a non-empty array of "
               "prompts (strings or token id arrays)";
    if (json_is_integer(json_array_get(prompt, 0))) return ids_add(r, prompt, &r->one);
    size_t n = json_array_size(prompt);
    if (n > BATCH_MAX) return "'prompt' holds more than 128 prompts";
    r->parts = malloc(n * sizeof *r->parts);
    if (r->parts == NULL) return "out of memory";
    size_t i;
    json_t *v;
    json_array_foreach(prompt, i, v) {
        const char *why = json_is_string(v) ? text_add(r, v, &r->parts[i])
                          : json_is_array(v)
                              ? ids_add(r, v, &r->parts[i])
                              : "'prompt' array must hold only strings, only token ids or only "
                                "id arrays";
        if (why) return why;
    }
    r->n_prompts = (int)n;
    return NULL;
}

/* The role of message i of a chat request, one of those a chat template knows; NULL with
 * why in r->head for none or another. */
static const char *read_role(request *r, size_t i, const json_t *role) {
    static const char *const roles[] = {"system", "user", "assistant"};
    static const char accepted[] = "the accepted roles are 'system', 'user' and 'assistant'";
    if (!is_set(role)) {
        snprintf(r->head, sizeof r->head, "'messages'[%zu] has no 'role': %s", i, accepted);
        return NULL;
    }
    if (!json_is_string(role)) {
        snprintf(r->head, sizeof r->head, "'messages'[%zu] has a 'role' that is %s: %s", i,
                 lb_result_json_kind(role), accepted);
        return NULL;
    }
    for (size_t k = 0; k < sizeof roles / sizeof roles[0]; k++)
        if (strcmp(json_string_value(role), roles[k]) == 0) return roles[k];
    const char *v = json_string_value(role);
    snprintf(r->head, sizeof r->head, "'messages'[%zu] has the role '%.*s': %s", i,
             (int)lb_utf8text_cut_len(v, 64), v, accepted);
    return NULL;
}

/* Collects the messages of a chat request: their contents into r->body, one newline
 * between messages and between the text parts of one, and each with its role into
 * r->msgs. */
static const char *read_messages(request *r, const json_t *messages) {
    if (!messages) return "missing field 'messages'";
    if (!json_is_array(messages) || json_array_size(messages) == 0)
        return "'messages' must be a non-empty array of message objects";
    r->n_msgs = json_array_size(messages);
    r->msgs = malloc(r->n_msgs * sizeof *r->msgs);
    if (r->msgs == NULL) return "out of memory";
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m) {
        if (!json_is_object(m)) return "every entry of 'messages' must be an object";
        const char *role = read_role(r, i, json_object_get(m, "role"));
        if (role == NULL) return r->head;
        if (i > 0 && !sbuf_append(&r->body, "\n", 1)) return "out of memory";
        const size_t at = r->body.len;
        const json_t *content = json_object_get(m, "content");
        if (json_is_string(content)) {
            if (!sbuf_append(&r->body, json_string_value(content), json_string_length(content)))
                return "out of memory";
        } else if (json_is_array(content)) {
            size_t k, n_text = 0;
            json_t *part;
            json_array_foreach(content, k, part) {
                const json_t *text = json_object_get(part, "text");
                if (!json_is_string(text)) continue;
                if ((n_text++ > 0 && !sbuf_append(&r->body, "\n", 1)) ||
                    !sbuf_append(&r->body, json_string_value(text), json_string_length(text)))
                    return "out of memory";
            }
        } else if (is_set(content)) {
            return "message 'content' must be a string or an array of content parts";
        }
        r->msgs[i] = (lb_token_message){.role = role, .content_len = r->body.len - at};
    }
    /* the body holds every content now: one newline apart */
    size_t at = 0;
    for (size_t k = 0; k < r->n_msgs; k++) {
        r->msgs[k].content = r->body.p + at;
        at += r->msgs[k].content_len + 1;
    }
    return NULL;
}

/* Reads a request's fields into r and formats its JSON head. Returns NULL or why the
 * request is malformed. */
/* The fields a request may carry; any other is refused by name. temperature, top_p,
 * top_k, seed and ignore_eos are checked and handed to the source (read_sampling); the
 * penalties, min_p, logit_bias and user are accepted and not used. */
static const char *const known_fields[] = {
    "model",
    "prompt",
    "messages",
    "max_tokens",
    "max_completion_tokens",
    "stream",
    "stream_options",
    "n",
    "stop",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "logit_bias",
    "user",
    "ignore_eos",
    "logprobs",
    "top_logprobs",
    "echo",
    "best_of",
    "suffix",
};

/* Refuses what this server cannot do, naming the field: log probabilities, echo, best_of,
 * suffix (fill-in), and fields it does not know. */
static const char *check_fields(request *r, const json_t *root) {
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)root, key, v) {
        bool known = false;
        for (size_t i = 0; i < sizeof known_fields / sizeof known_fields[0] && !known; i++)
            known = strcmp(key, known_fields[i]) == 0;
        if (!known) {
            snprintf(r->head, sizeof r->head,
                     "unknown field '%.*s': this server does not implement it",
                     (int)lb_utf8text_cut_len(key, 200), key);
            return r->head;
        }
    }
    v = json_object_get(root, "logprobs");
    if (is_set(v) && !json_is_false(v))
        return "'logprobs' is not supported: this server returns no log probabilities";
    if (is_set(json_object_get(root, "top_logprobs")))
        return "'top_logprobs' is not supported: this server returns no log probabilities";
    if (json_is_true(json_object_get(root, "echo")))
        return "'echo' is not supported: the prompt is not returned with the completion";
    v = json_object_get(root, "best_of");
    if (is_set(v) && !(json_is_integer(v) && json_integer_value(v) == 1))
        return refuse_value(r, "only 'best_of' = 1 is supported", v);
    if (is_set(json_object_get(root, "suffix"))) return "'suffix' (fill-in) is not supported";
    return NULL;
}

/* `stop`: a string or an array of up to 4 non-empty strings of at most 32 bytes. */
static const char *read_stop(request *r, const json_t *v) {
    r->n_stop = 0;
    if (!is_set(v)) return NULL;
    const json_t *one[1] = {v};
    size_t n = json_is_array(v) ? json_array_size(v) : 1;
    if (!json_is_string(v) && !json_is_array(v))
        return refuse_value(r, "'stop' must be a string or an array of strings", v);
    if (n > STOP_MAX) return "'stop' holds more than 4 sequences";
    for (size_t i = 0; i < n; i++) {
        const json_t *x = json_is_array(v) ? json_array_get(v, i) : one[0];
        static const char rule[] = "every 'stop' sequence must be a string of 1 to 32 bytes";
        if (!json_is_string(x)) return refuse_value(r, rule, x);
        if (json_string_length(x) == 0 || json_string_length(x) > STOP_MAX_BYTES) {
            snprintf(r->head, sizeof r->head, "%s, got %zu bytes", rule, json_string_length(x));
            return r->head;
        }
        memcpy(r->stop[i], json_string_value(x), json_string_length(x));
        r->stop_len[i] = (uint8_t)json_string_length(x);
    }
    r->n_stop = (uint8_t)n;
    return NULL;
}

/* The sampling fields the source gets (lb_token_sampling), in vLLM's ranges: temperature
 * >= 0 with no upper bound (OpenAI documents 0 to 2; vLLM takes more), top_p in (0, 1],
 * top_k -1 or 0 (no cut) or >= 1, seed any integer, ignore_eos a boolean. A field that is
 * absent or null is left to the source; a wrong type or value is refused naming the field,
 * its range and the value given. */
static const char *read_sampling(request *r, const json_t *root) {
    lb_token_sampling *q = &r->sampling;
    const json_t *v = json_object_get(root, "temperature");
    if (is_set(v)) {
        const double t = json_number_value(v);
        if (!json_is_number(v) || !(t >= 0))
            return refuse_value(r, "'temperature' must be a number >= 0 (0 is greedy)", v);
        q->temperature = t > FLT_MAX ? FLT_MAX : (float)t;
        q->has_temperature = true;
    }
    v = json_object_get(root, "top_p");
    if (is_set(v)) {
        const double p = json_number_value(v);
        if (!json_is_number(v) || !(p > 0 && p <= 1))
            return refuse_value(r, "'top_p' must be a number in (0, 1] (1: no cut)", v);
        q->top_p = (float)p;
        q->has_top_p = true;
    }
    v = json_object_get(root, "top_k");
    if (is_set(v)) {
        if (!json_is_integer(v) || json_integer_value(v) < -1)
            return refuse_value(r, "'top_k' must be an integer: -1 or 0 (no cut) or >= 1", v);
        const json_int_t k = json_integer_value(v);
        q->top_k = k > INT32_MAX ? INT32_MAX : (int32_t)k;
        q->has_top_k = true;
    }
    v = json_object_get(root, "seed");
    if (is_set(v)) {
        if (!json_is_integer(v))
            return refuse_value(r, "'seed' must be an integer (-2^63 to 2^63 - 1)", v);
        q->seed = (uint64_t)json_integer_value(v);
        q->has_seed = true;
    }
    v = json_object_get(root, "ignore_eos");
    if (is_set(v)) {
        if (!json_is_boolean(v)) return refuse_value(r, "'ignore_eos' must be true or false", v);
        q->ignore_eos = json_is_true(v);
        q->has_ignore_eos = true;
    }
    return NULL;
}

static const char *read_request(request *r, const json_t *root) {
    const lb_server *s = r->srv;
    if (!json_is_object(root)) return "the request body must be a JSON object";
    const char *bad = check_fields(r, root);
    if (bad) return bad;
    if ((bad = read_stop(r, json_object_get(root, "stop"))) != NULL) return bad;
    const char *model = s->model;
    size_t model_len = strlen(model);
    const json_t *v = json_object_get(root, "model");
    if (is_set(v)) {
        if (!json_is_string(v)) return refuse_value(r, "'model' must be a string", v);
        model = json_string_value(v);
        model_len = json_string_length(v);
        if (model_len > MODEL_MAX_BYTES) return "'model' is longer than 256 bytes";
    }
    r->max_tokens =
        s->p.default_max_tokens < s->p.max_tokens ? s->p.default_max_tokens : s->p.max_tokens;
    v = r->chat ? json_object_get(root, "max_completion_tokens") : NULL;
    const char *max_name = "max_completion_tokens";
    const char *max_rule = "'max_completion_tokens' must be an integer >= 1";
    if (!is_set(v)) {
        v = json_object_get(root, "max_tokens");
        max_name = "max_tokens";
        max_rule = "'max_tokens' must be an integer >= 1";
    }
    if (is_set(v)) {
        if (!json_is_integer(v) || json_integer_value(v) < 1) return refuse_value(r, max_rule, v);
        r->max_tokens = json_integer_value(v);
    }
    /* more than the server allows is refused, as OpenAI and vLLM refuse more than fits, not
     * cut short: a client would take the shorter answer for the one it asked for */
    if (r->max_tokens > s->p.max_tokens) {
        snprintf(r->head, sizeof r->head,
                 "'%s' is %lld, more than the %lld output tokens this server allows a request "
                 "(serve --max-tokens): ask for at most %lld",
                 max_name, (long long)r->max_tokens, (long long)s->p.max_tokens,
                 (long long)s->p.max_tokens);
        return r->head;
    }
    if ((bad = read_sampling(r, root)) != NULL) return bad;
    v = json_object_get(root, "n");
    if (is_set(v) && !(json_is_integer(v) && json_integer_value(v) == 1))
        return refuse_value(r, "only 'n' = 1 is supported", v);
    v = json_object_get(root, "stream");
    if (is_set(v) && !json_is_boolean(v))
        return refuse_value(r, "'stream' must be true or false", v);
    r->stream = json_is_true(v);
    v = json_object_get(root, "stream_options");
    if (is_set(v)) {
        if (!json_is_object(v)) return refuse_value(r, "'stream_options' must be an object", v);
        const json_t *u = json_object_get(v, "include_usage");
        if (is_set(u) && !json_is_boolean(u))
            return refuse_value(r, "'stream_options.include_usage' must be true or false", u);
        r->include_usage = json_is_true(u);
    }
    r->body.len = 0; /* the raw body is parsed: its buffer now collects the prompt */
    const char *why = r->chat ? read_messages(r, json_object_get(root, "messages"))
                              : read_prompt(r, json_object_get(root, "prompt"));
    if (why) return why;
    if (r->chat) {
        r->n_prompts = 1;
        r->one = (prompt_part){.len = r->body.len};
    }
    if (r->n_prompts > 1 && r->stream)
        return "a batch of prompts is answered whole only: set 'stream' false or send one "
               "prompt per request";

    const char *object = !r->chat    ? "text_completion"
                         : r->stream ? "chat.completion.chunk"
                                     : "chat.completion";
    int n = snprintf(r->head, sizeof r->head,
                     "{\"id\":\"%s-%llu\",\"object\":\"%s\",\"created\":%lld,\"model\":\"",
                     r->chat ? "chatcmpl" : "cmpl", (unsigned long long)r->index, object,
                     (long long)time(NULL));
    char *p = put_json(r->head + n, model, model_len);
    p = PUT_LIT(p, "\",");
    r->head_len = (size_t)(p - r->head);
    return NULL;
}

static bool draw_fault(const lb_server *s, uint64_t index) {
    if (s->p.fault == LB_FAULT_NONE) return false;
    lb_rng g;
    lb_rng_seed(&g, s->p.seed + index * 0x9E3779B97F4A7C15ULL);
    return lb_rng_uniform(&g) < s->p.fault_rate;
}

/* ---- stop sequences ---- */

/* Passes a token's text through the stop sequences: out gets what may be sent now (at
 * most PIECE_MAX_BYTES). Text that may begin a stop sequence is held back until the next
 * token shows whether it does; `last` (no token follows) releases it. A match ends the
 * choice: out ends before the sequence and r->stopped is set. */
static size_t stop_filter(request *r, const char *tok, size_t len, bool last, char *out) {
    size_t m = r->held_len;
    memcpy(out, r->held, m);
    memcpy(out + m, tok, len);
    m += len;
    r->held_len = 0;
    if (r->n_stop == 0) return m;
    size_t cut = m;
    for (int k = 0; k < r->n_stop; k++) {
        const char *at = memmem(out, m, r->stop[k], r->stop_len[k]);
        if (at != NULL && (size_t)(at - out) < cut) {
            cut = (size_t)(at - out);
            r->stopped = true;
        }
    }
    if (r->stopped || last) return cut;
    size_t keep = 0; /* the longest end of out that begins a stop sequence */
    for (int k = 0; k < r->n_stop; k++)
        for (size_t l = r->stop_len[k] - 1u < m ? r->stop_len[k] - 1u : m; l > keep; l--)
            if (memcmp(out + m - l, r->stop[k], l) == 0) {
                keep = l;
                break;
            }
    memcpy(r->held, out + m - keep, keep);
    r->held_len = (uint8_t)keep;
    return m - keep;
}

/* ---- SSE events; each at most 6 + head_len + EVENT_TAIL_BYTES bytes ---- */

static size_t write_token_event(const request *r, char *w, const char *tok, size_t len) {
    char *p = PUT_LIT(w, "data: ");
    p = put(p, r->head, r->head_len);
    if (r->chat) {
        p = PUT_LIT(p, "\"choices\":[{\"index\":0,\"delta\":{");
        if (r->sent == 0) p = PUT_LIT(p, "\"role\":\"assistant\",");
        p = PUT_LIT(p, "\"content\":\"");
        p = put_json(p, tok, len);
        p = PUT_LIT(p, "\"},\"logprobs\":null,\"finish_reason\":");
    } else {
        p = PUT_LIT(p, "\"choices\":[{\"index\":0,\"text\":\"");
        p = put_json(p, tok, len);
        p = PUT_LIT(p, "\",\"logprobs\":null,\"finish_reason\":");
    }
    p = r->stopped                     ? PUT_LIT(p, "\"stop\"")
        : r->sent + 1 == r->max_tokens ? PUT_LIT(p, "\"length\"")
                                       : PUT_LIT(p, "null");
    p = PUT_LIT(p, "}]}\n\n");
    return (size_t)(p - w);
}

static char *put_usage(char *p, const request *r) {
    p = PUT_LIT(p, "\"usage\":{\"prompt_tokens\":");
    p = put_i64(p, r->prompt_tokens);
    p = PUT_LIT(p, ",\"completion_tokens\":");
    p = put_i64(p, r->sent);
    p = PUT_LIT(p, ",\"total_tokens\":");
    p = put_i64(p, r->prompt_tokens + r->sent);
    return PUT_LIT(p, "}}");
}

static size_t write_usage_event(const request *r, char *w) {
    char *p = PUT_LIT(w, "data: ");
    p = put(p, r->head, r->head_len);
    p = PUT_LIT(p, "\"choices\":[],");
    p = put_usage(p, r);
    p = PUT_LIT(p, "\n\n");
    return (size_t)(p - w);
}

/* The token source failed the request: an OpenAI-style error as the stream's last event
 * (no usage, no [DONE]), so a client counts the request as failed, not as complete. */
static size_t write_error_event(char *w, const char *why, size_t len) {
    char *p = PUT_LIT(w, "data: {\"error\":{\"message\":\"");
    p = put_json(p, why, len);
    p = PUT_LIT(p, "\",\"type\":\"server_error\",\"param\":null,\"code\":null}}\n\n");
    return (size_t)(p - w);
}

/* token_source.h's wake of a request. */
static void wake_request(void *ctx) {
    request *r = ctx;
    lb_server_timer_wake(r->srv->timer, &r->waker);
}

/* Parks the request's connection until due_ns, or until the source wakes it when due_ns
 * is INT64_MAX (LB_TOKEN_LATER's answer). */
static lb_server_timer_park park_until(request *r, int64_t due_ns) {
    if (due_ns == INT64_MAX) return lb_server_timer_wait(r->srv->timer, r->conn, &r->waker);
    return lb_server_timer_suspend(r->srv->timer, r->conn, due_ns) ? LB_SERVER_TIMER_PARKED
                                                                   : LB_SERVER_TIMER_DRAINING;
}

/* The bad-json fault: an event whose data stops in the middle of the object. */
static size_t write_bad_event(const request *r, char *w) {
    char *p = PUT_LIT(w, "data: ");
    p = put(p, r->head, r->head_len);
    p = PUT_LIT(p, "\"choices\":[{\"index\":0,\"text\":\n\n");
    return (size_t)(p - w);
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    request *r = cls;
    lb_server *s = r->srv;
    const lb_token_source *src = s->src;
    const size_t bound = 6 + r->head_len + EVENT_TAIL_BYTES;
    int64_t now = now_ns(s);
    size_t used = 0;
    char spare[EVENT_BYTES];
    for (;;) {
        if (used > 0 && max - used < bound) return (ssize_t)used;
        char *w = max - used >= bound ? buf + used : spare;
        size_t n = 0;
        switch (r->out) {
        case OUT_TOKENS:
            if (r->faulted && r->sent == r->fault_at && !r->fault_fired) {
                if (s->p.fault == LB_FAULT_DROP) {
                    r->out = OUT_ABORT;
                    continue;
                }
                if (s->p.fault == LB_FAULT_TRUNCATE) {
                    r->out = OUT_END;
                    continue;
                }
                if (s->p.fault == LB_FAULT_STALL) {
                    if (used > 0) return (ssize_t)used;
                    if (lb_server_timer_suspend(s->timer, r->conn, INT64_MAX)) return 0;
                    r->out = OUT_ABORT; /* draining: a stalled stream is closed */
                    continue;
                }
                n = write_bad_event(r, w);
                r->fault_fired = true;
                break;
            }
            char tok[LB_TOKEN_TEXT_MAX_BYTES], piece[PIECE_MAX_BYTES];
            size_t len = 0;
            int64_t due = 0;
            lb_token_state st = src->next(src->ctx, r->stream_state, now, tok, &len, &due);
            if (st == LB_TOKEN_END && r->sent < r->max_tokens) {
                /* The source ended early (end of sequence): no event said why yet. One
                 * last event, with the text held back, ends the choice as "stop". */
                r->stopped = true;
                n = write_token_event(r, w, r->held, r->held_len);
                r->held_len = 0;
                r->out = r->include_usage ? OUT_USAGE : OUT_DONE;
                break;
            }
            if (st == LB_TOKEN_END) {
                r->out = r->include_usage ? OUT_USAGE : OUT_DONE;
                continue;
            }
            if (st == LB_TOKEN_FAILED) {
                n = write_error_event(w, tok, len);
                r->out = OUT_END;
                break;
            }
            if (st == LB_TOKEN_LATER) {
                if (used > 0) return (ssize_t)used;
                lb_server_timer_park parked = park_until(r, due);
                if (parked == LB_SERVER_TIMER_PARKED) return 0;
                if (parked == LB_SERVER_TIMER_DRAINING) now = INT64_MAX; /* everything is due */
                continue;
            }
            const bool eos = st == LB_TOKEN_STOP;
            size_t plen = stop_filter(r, tok, len, eos || r->sent + 1 == r->max_tokens, piece);
            r->stopped |= eos;
            n = write_token_event(r, w, piece, plen);
            if (r->sent == 0)
                lb_server_metrics_observe(&s->ttft, lb_clock_now_ns() - r->arrival_ns);
            r->sent++;
            if (r->stopped) r->out = r->include_usage ? OUT_USAGE : OUT_DONE;
            break;
        case OUT_USAGE:
            n = write_usage_event(r, w);
            r->out = OUT_DONE;
            break;
        case OUT_DONE:
            n = (size_t)(PUT_LIT(w, "data: [DONE]\n\n") - w);
            r->out = OUT_END;
            r->ok = !r->faulted;
            break;
        case OUT_END: return used > 0 ? (ssize_t)used : MHD_CONTENT_READER_END_OF_STREAM;
        case OUT_ABORT: return used > 0 ? (ssize_t)used : MHD_CONTENT_READER_END_WITH_ERROR;
        }
        if (w == spare) { /* only when used == 0 and the buffer is smaller than the bound */
            if (n > max) {
                LB_WARN("serve: a %zu-byte event does not fit the %zu-byte send buffer", n, max);
                r->ok = false;
                r->out = OUT_ABORT;
                return MHD_CONTENT_READER_END_WITH_ERROR;
            }
            memcpy(buf, spare, n);
        }
        used += n;
    }
}

static enum MHD_Result start_stream(request *r) {
    struct MHD_Response *resp = MHD_create_response_from_callback(
        MHD_SIZE_UNKNOWN, STREAM_BLOCK_BYTES, stream_reader, r, request_release);
    if (!resp) return MHD_NO;
    r->refs++;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    return queue(r->srv, r->conn, MHD_HTTP_OK, resp, "text/event-stream");
}

/* ---- whole (non-streamed) responses ---- */

static ssize_t drop_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    request *r = cls;
    if (pos >= r->drop_at) return MHD_CONTENT_READER_END_WITH_ERROR;
    size_t n = r->drop_at - (size_t)pos < max ? r->drop_at - (size_t)pos : max;
    memcpy(buf, r->resp.p + pos, n);
    return (ssize_t)n;
}

static enum MHD_Result finish_whole(request *r) {
    lb_server *s = r->srv;
    if (!sbuf_reserve(&r->resp, 256)) return MHD_NO;
    char *p = r->resp.p + r->resp.len;
    p = r->chat ? PUT_LIT(p, "\"},\"logprobs\":null,\"finish_reason\":")
                : PUT_LIT(p, "\",\"logprobs\":null,\"finish_reason\":");
    p = !r->stopped && r->choice_sent == r->max_tokens ? PUT_LIT(p, "\"length\"}]")
                                                       : PUT_LIT(p, "\"stop\"}]");
    if (r->faulted && s->p.fault == LB_FAULT_TRUNCATE) {
        p = PUT_LIT(p, "}");
    } else {
        p = PUT_LIT(p, ",");
        p = put_usage(p, r);
    }
    r->resp.len = (size_t)(p - r->resp.p);
    r->ok = !r->faulted;
    count(&s->tokens, (uint64_t)r->sent); /* a body that says no error carries them */
    struct MHD_Response *resp;
    if (r->faulted && s->p.fault == LB_FAULT_DROP) {
        r->drop_at = r->resp.len / 2;
        resp =
            MHD_create_response_from_callback(r->resp.len, 4096, drop_reader, r, request_release);
        if (resp) r->refs++;
    } else {
        size_t len = r->faulted && s->p.fault == LB_FAULT_BAD_JSON ? r->resp.len / 2 : r->resp.len;
        resp = MHD_create_response_from_buffer(len, r->resp.p, MHD_RESPMEM_MUST_FREE);
        if (resp) r->resp = (sbuf){0}; /* now libmicrohttpd's to free */
    }
    return queue(s, r->conn, MHD_HTTP_OK, resp, "application/json");
}

/* Starts the token source on prompt k of the request (the whole body when it holds one);
 * its prompt tokens add to the request's. */
static lb_status start_choice(request *r, int k, lb_err *err) {
    lb_server *s = r->srv;
    const prompt_part *pp = r->parts ? &r->parts[k] : &r->one;
    lb_token_request tr = {
        .prompt = pp->ids ? NULL : r->body.p + pp->at,
        .prompt_len = pp->ids ? 0 : pp->len,
        .ids = pp->ids ? r->ids + pp->at : NULL,
        .n_ids = pp->ids ? pp->len : 0,
        .max_tokens = r->max_tokens,
        .arrival_ns = r->arrival_ns,
        .chat = r->chat,
        .messages = r->msgs,
        .n_messages = r->n_msgs,
        .sampling = r->sampling,
        .wake = wake_request,
        .wake_ctx = r,
    };
    int64_t tokens = 0;
    LB_TRY(s->src->start(s->src->ctx, &tr, r->stream_state, &tokens, err));
    r->prompt_tokens += tokens;
    r->choice = k;
    r->choice_sent = 0;
    r->stopped = false;
    r->held_len = 0;
    return LB_OK;
}

/* A batch: closes the choice just generated and starts the next one, whose tokens are
 * due on the same clock (from the request's arrival), so the choices take the time of
 * one. */
static lb_status next_choice(request *r, lb_err *err) {
    lb_server *s = r->srv;
    if (!sbuf_reserve(&r->resp, 96)) return lb_fail(err, LB_ERR_NOMEM, "out of memory");
    char *p = r->resp.p + r->resp.len;
    p = PUT_LIT(p, "\",\"logprobs\":null,\"finish_reason\":");
    p = !r->stopped && r->choice_sent == r->max_tokens ? PUT_LIT(p, "\"length\"},")
                                                       : PUT_LIT(p, "\"stop\"},");
    p = PUT_LIT(p, "{\"index\":");
    p = put_i64(p, r->choice + 1);
    p = PUT_LIT(p, ",\"text\":\"");
    r->resp.len = (size_t)(p - r->resp.p);
    if (s->src->done) s->src->done(s->src->ctx, r->stream_state);
    lb_status st = start_choice(r, r->choice + 1, err);
    if (st != LB_OK) r->parsed = false; /* nothing started to end */
    return st;
}

/* Pulls every due token into the body; parks the connection until the next one is due
 * (libmicrohttpd calls the access handler again on resume) or finishes the body. */
static enum MHD_Result generate_whole(request *r) {
    lb_server *s = r->srv;
    const lb_token_source *src = s->src;
    int64_t now = now_ns(s);
    for (;;) {
        if (r->faulted && r->sent == r->fault_at) {
            if (s->p.fault == LB_FAULT_STALL)
                return lb_server_timer_suspend(s->timer, r->conn, INT64_MAX) ? MHD_YES : MHD_NO;
            if (s->p.fault == LB_FAULT_TRUNCATE) break;
        }
        if (!sbuf_reserve(&r->resp, TOKEN_JSON_MAX_BYTES)) return MHD_NO;
        char tok[LB_TOKEN_TEXT_MAX_BYTES], piece[PIECE_MAX_BYTES];
        size_t len = 0;
        int64_t due = 0;
        lb_token_state st =
            r->stopped ? LB_TOKEN_END : src->next(src->ctx, r->stream_state, now, tok, &len, &due);
        if (st == LB_TOKEN_LATER) {
            lb_server_timer_park parked = park_until(r, due);
            if (parked == LB_SERVER_TIMER_PARKED) return MHD_YES;
            if (parked == LB_SERVER_TIMER_DRAINING) now = INT64_MAX;
            continue;
        }
        if (st == LB_TOKEN_FAILED)
            return reply_error(s, r->conn, MHD_HTTP_INTERNAL_SERVER_ERROR, NULL, "%.*s", (int)len,
                               tok);
        if (st == LB_TOKEN_END) {
            size_t plen = stop_filter(r, "", 0, true, piece); /* what was held */
            r->resp.len = (size_t)(put_json(r->resp.p + r->resp.len, piece, plen) - r->resp.p);
            if (r->choice + 1 >= r->n_prompts) break;
            lb_err err = {{0}};
            lb_status started = next_choice(r, &err);
            if (started == LB_ERR_USAGE) /* a prompt the source can never serve */
                return reply_request_error(r, MHD_HTTP_BAD_REQUEST, "'prompt'[%d]: %s",
                                           r->choice + 1, err.msg);
            if (started != LB_OK) {
                LB_WARN("serve: the token source failed: %s", err.msg);
                return MHD_NO;
            }
            continue;
        }
        const bool eos = st == LB_TOKEN_STOP;
        size_t plen = stop_filter(r, tok, len, eos || r->choice_sent + 1 == r->max_tokens, piece);
        r->stopped |= eos;
        r->resp.len = (size_t)(put_json(r->resp.p + r->resp.len, piece, plen) - r->resp.p);
        r->sent++;
        r->choice_sent++;
    }
    return finish_whole(r);
}

/* The body is in: parse it, start the token source, then answer or start generating. */
static enum MHD_Result begin(request *r) {
    lb_server *s = r->srv;
    if (r->too_large)
        return reply_request_error(r, MHD_HTTP_CONTENT_TOO_LARGE,
                                   "the request body is larger than %zu bytes", BODY_MAX_BYTES);
    if (r->too_busy)
        return reply_request_error(r, MHD_HTTP_SERVICE_UNAVAILABLE,
                                   "the server holds as many request bodies as its memory budget "
                                   "allows (%zu bytes, serve --max-body-memory): try again later",
                                   s->p.body_memory_bytes);
    json_error_t je;
    json_t *root = json_loadb(r->body.p, r->body.len, 0, &je);
    if (!root)
        return reply_request_error(r, MHD_HTTP_BAD_REQUEST,
                                   "the request body is not valid JSON: %s (line %d, column %d)",
                                   je.text, je.line, je.column);
    const char *why = read_request(r, root);
    json_decref(root);
    if (why) return reply_request_error(r, MHD_HTTP_BAD_REQUEST, "%s", why);
    if (r->stream) count(&s->streamed, 1);

    lb_err err = {{0}};
    lb_status started = start_choice(r, 0, &err);
    if (started == LB_ERR_USAGE) /* a request the source can never serve (too long) */
        return reply_request_error(r, MHD_HTTP_BAD_REQUEST, "%s", err.msg);
    if (started != LB_OK)
        return reply_error(s, r->conn, MHD_HTTP_INTERNAL_SERVER_ERROR, NULL,
                           "the token source failed: %s", err.msg);
    r->parsed = true;
    if (draw_fault(s, r->index)) {
        r->faulted = true;
        r->fault_at = r->max_tokens / 2;
        if (s->p.fault == LB_FAULT_500)
            return reply_error(s, r->conn, MHD_HTTP_INTERNAL_SERVER_ERROR, NULL,
                               "synthetic fault: internal server error");
    }
    if (r->stream) return start_stream(r);

    if (!sbuf_reserve(&r->resp, r->head_len + 128 + (size_t)r->max_tokens * 12)) return MHD_NO;
    char *p = put(r->resp.p, r->head, r->head_len);
    p = r->chat ? PUT_LIT(p, "\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\","
                             "\"content\":\"")
                : PUT_LIT(p, "\"choices\":[{\"index\":0,\"text\":\"");
    r->resp.len = (size_t)(p - r->resp.p);
    return generate_whole(r);
}

/* ---- routing ---- */

/* The path of a request target: of an absolute-form target ("http://HOST:PORT/PATH", RFC
 * 9112 section 3.2.2, which a server must accept), its path ("/" when it has none); an
 * origin-form target is its path. Another scheme is no target of this server. */
static const char *target_path(const char *url) {
    if (strncasecmp(url, "http://", 7) != 0) return url;
    const char *path = strchr(url + 7, '/');
    return path != NULL ? path : "/";
}

static route route_of(const char *target) {
    const char *url = target_path(target);
    if (strcmp(url, "/v1/completions") == 0) return ROUTE_COMPLETIONS;
    if (strcmp(url, "/v1/chat/completions") == 0) return ROUTE_CHAT;
    if (strcmp(url, "/v1/models") == 0) return ROUTE_MODELS;
    if (strcmp(url, "/health") == 0) return ROUTE_HEALTH;
    if (strcmp(url, "/metrics") == 0) return ROUTE_METRICS;
    return ROUTE_NONE;
}

/* A shared answer (resp[0], or resp[1] with Connection: close when it ends the connection). */
static enum MHD_Result reply_shared(lb_server *s, struct MHD_Connection *c,
                                    struct MHD_Response *const resp[2]) {
    return MHD_queue_response(c, MHD_HTTP_OK, resp[answer_closes(s, c)]);
}

/* The *con_cls of a GET /v1/models or /health between the call that saw its headers and
 * the one that ends the request: libmicrohttpd closes the connection after a response
 * queued before the request was read to its end, so GETs are answered on the second call
 * and their connections stay open for the requests that follow. */
static char models_pending, health_pending, metrics_pending;

/* GET /metrics: the counters and histograms now, in OpenMetrics when the scraper accepts
 * it, else in Prometheus text. */
static enum MHD_Result reply_metrics(lb_server *s, struct MHD_Connection *c) {
    const char *accept = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_ACCEPT);
    lb_metrics_text_format format = accept && strstr(accept, "application/openmetrics-text")
                                        ? LB_METRICS_TEXT_OPENMETRICS
                                        : LB_METRICS_TEXT_PROMETHEUS;
    lb_server_stats st;
    lb_server_get_stats(s, &st);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (f == NULL) return MHD_NO;
    lb_server_metrics_write(f, format, s->model, &st, &s->duration, &s->ttft);
    fclose(f);
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
    if (resp == NULL) free(text);
    return queue(s, c, MHD_HTTP_OK, resp, lb_metrics_text_content_type(format));
}

/* ---- connections and their limits ---- */

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
    lb_server *s = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        /* counted as started only once its head is counted as due (lb_server_shutdown) */
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        conn_ctx *cc = ci ? calloc(1, sizeof *cc) : NULL;
        if (cc) {
            cc->fd = ci->connect_fd;
            cc->guard = lb_server_guard_open(s->guard, cc->fd);
            head_due(s, cc, true); /* the acceptor hands over a connection with its head */
        }
        *socket_context = cc;
        atomic_fetch_add(&s->mhd_started, 1);
    } else if (*socket_context) {
        conn_ctx *cc = *socket_context;
        head_due(s, cc, false);
        lb_server_guard_close(s->guard, cc->guard);
        free(cc);
        *socket_context = NULL;
    }
}

/* libmicrohttpd read a request line: the request's read deadline starts. */
static void *on_request_line(void *cls, const char *uri, struct MHD_Connection *c) {
    (void)uri;
    lb_server *s = cls;
    lb_server_guard_phase(s->guard, guarded(c), LB_CONN_READING);
    return NULL;
}

/* Takes n bytes of the server's budget for request bodies; false when it has not got them. */
static bool reserve_body(lb_server *s, size_t n) {
    size_t before = atomic_fetch_add(&s->body_bytes, n);
    if (before + n <= s->p.body_memory_bytes) return true;
    atomic_fetch_sub(&s->body_bytes, n);
    return false;
}

/* A completion request's headers are in: refuse an ambiguous or too large body, or one the
 * memory budget cannot hold, before it is read; else start the request. */
static enum MHD_Result accept_completion(lb_server *s, struct MHD_Connection *c, bool chat,
                                         void **con_cls) {
    body_framing f = {0};
    MHD_get_connection_values(c, MHD_HEADER_KIND, read_framing, &f);
    if (f.lengths_differ || (f.n_lengths > 0 && f.transfer_encoding))
        return reply_error(s, c, MHD_HTTP_BAD_REQUEST, NULL,
                           "the request's body length is ambiguous: %s",
                           f.lengths_differ ? "two different Content-Length headers"
                                            : "both Content-Length and Transfer-Encoding");
    if (f.transfer_encoding)
        return reply_error(s, c, MHD_HTTP_LENGTH_REQUIRED, NULL,
                           "a request body must come with Content-Length (chunked request "
                           "bodies are not accepted)");
    unsigned long long length = f.length ? strtoull(f.length, NULL, 10) : 0;
    if (length > BODY_MAX_BYTES)
        return reply_error(s, c, MHD_HTTP_CONTENT_TOO_LARGE, NULL,
                           "the request body (%llu bytes) is larger than %zu bytes", length,
                           BODY_MAX_BYTES);
    if (length > 0 && !reserve_body(s, (size_t)length)) {
        count(&s->busy, 1);
        return reply_error(s, c, MHD_HTTP_SERVICE_UNAVAILABLE, NULL,
                           "the server holds as many request bodies as its memory budget allows "
                           "(%zu bytes, serve --max-body-memory): try again later",
                           s->p.body_memory_bytes);
    }
    request *r = request_new(s, c, chat);
    if (!r) {
        atomic_fetch_sub(&s->body_bytes, (size_t)length);
        return MHD_NO;
    }
    r->body_reserved = (size_t)length;
    *con_cls = r;
    /* One allocation of the announced size: growing by doubling would hold up to twice the
     * budget's count. */
    if (length > r->body.cap) {
        char *p = malloc((size_t)length);
        if (!p) return MHD_NO;
        r->body = (sbuf){.p = p, .cap = (size_t)length, .heap = true};
    }
    return MHD_YES;
}

/* A piece of a body: kept while it fits the body's limit and the budget, else dropped (the
 * request is then answered 413 or 503 when its body has ended). */
static enum MHD_Result take_body(request *r, const char *data, size_t n) {
    lb_server *s = r->srv;
    if (r->too_large || r->too_busy) return MHD_YES;
    if (r->body.len + n > BODY_MAX_BYTES) {
        r->too_large = true;
        return MHD_YES;
    }
    if (r->body.len + n > r->body_reserved) { /* chunked, or longer than announced */
        size_t extra = r->body.len + n - r->body_reserved;
        if (!reserve_body(s, extra)) {
            r->too_busy = true;
            count(&s->busy, 1);
            return MHD_YES;
        }
        r->body_reserved += extra;
    }
    return sbuf_append(&r->body, data, n) ? MHD_YES : MHD_NO;
}

/* The first call of a request, its head read: answers it or says what comes next. */
static enum MHD_Result route_request(lb_server *s, struct MHD_Connection *c, const char *url,
                                     const char *method, void **con_cls) {
    route rt = route_of(url);
    bool get = strcmp(method, MHD_HTTP_METHOD_GET) == 0;
    bool post = strcmp(method, MHD_HTTP_METHOD_POST) == 0;
    switch (rt) {
    case ROUTE_NONE:
        return reply_error(s, c, MHD_HTTP_NOT_FOUND, NULL,
                           "no such endpoint: %s %s (served: POST /v1/completions, POST "
                           "/v1/chat/completions, GET /v1/models, GET /health, GET /metrics)",
                           method, url);
    case ROUTE_MODELS:
    case ROUTE_HEALTH:
    case ROUTE_METRICS:
        /* HEAD: libmicrohttpd sends the GET answer's head without its body. */
        if (!get && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
            return reply_error(s, c, MHD_HTTP_METHOD_NOT_ALLOWED, "GET, HEAD",
                               "%s %s is not allowed: use GET", method, url);
        *con_cls = rt == ROUTE_MODELS   ? (void *)&models_pending
                   : rt == ROUTE_HEALTH ? (void *)&health_pending
                                        : (void *)&metrics_pending;
        return MHD_YES;
    case ROUTE_COMPLETIONS:
    case ROUTE_CHAT:
        if (!post)
            return reply_error(s, c, MHD_HTTP_METHOD_NOT_ALLOWED, "POST",
                               "%s %s is not allowed: use POST", method, url);
        return accept_completion(s, c, rt == ROUTE_CHAT, con_cls);
    }
    return MHD_NO;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls) {
    lb_server *s = cls;
    conn_ctx *cc = conn_of(c);
    if (cc) {
        cc->http10 = strcmp(version, MHD_HTTP_VERSION_1_0) == 0;
        cc->first_call = *con_cls == NULL;
    }
    const bool pending_get =
        *con_cls == &metrics_pending || *con_cls == &models_pending || *con_cls == &health_pending;
    if (pending_get && *upload_data_size > 0) { /* a GET's body means nothing: read away */
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (*con_cls == &metrics_pending) {
        *con_cls = NULL;
        lb_server_guard_phase(s->guard, guarded(c), LB_CONN_ANSWERING);
        return reply_metrics(s, c);
    }
    if (pending_get) {
        struct MHD_Response *const *resp =
            *con_cls == &models_pending ? s->models_resp : s->health_resp;
        *con_cls = NULL;
        lb_server_guard_phase(s->guard, guarded(c), LB_CONN_ANSWERING);
        return reply_shared(s, c, resp);
    }
    request *r = *con_cls;
    if (!r) {
        enum MHD_Result ret = route_request(s, c, url, method, con_cls);
        head_due(s, cc, false); /* read, and counted in flight when it is a completion */
        return ret;
    }
    if (*upload_data_size > 0) {
        enum MHD_Result ret = take_body(r, upload_data, *upload_data_size);
        *upload_data_size = 0;
        return ret;
    }
    if (r->parsed) return generate_whole(r);
    lb_server_guard_phase(s->guard, guarded(c), LB_CONN_ANSWERING);
    return begin(r);
}

/* ---- start and stop ---- */

static void on_mhd_log(void *cls, const char *fmt, va_list ap) {
    lb_server *s = cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
        msg[--n] = '\0';
    /* Before the socket is up a message explains a failed start; later ones are about
     * single connections (a client that went away) and only interest -vv. */
    lb_log(atomic_load(&s->started) ? LB_LOG_DEBUG : LB_LOG_WARN, "serve: libmicrohttpd: %s", msg);
}

/* resp[0] answers text; resp[1] too, with Connection: close. False when out of memory. */
static bool shared_json(const char *text, struct MHD_Response *resp[2]) {
    for (int i = 0; i < 2; i++) {
        resp[i] =
            MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_MUST_COPY);
        if (resp[i] == NULL) return false;
        MHD_add_response_header(resp[i], MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
        if (i == 1) MHD_add_response_header(resp[i], MHD_HTTP_HEADER_CONNECTION, "close");
    }
    return true;
}

static lb_status build_shared_responses(lb_server *s, lb_err *err) {
    char text[HEAD_BYTES + 256];
    char *p = PUT_LIT(text, "{\"object\":\"list\",\"data\":[{\"id\":\"");
    p = put_json(p, s->model, strlen(s->model));
    p = PUT_LIT(p, "\",\"object\":\"model\",\"created\":");
    p = put_i64(p, (int64_t)time(NULL));
    p = PUT_LIT(p, ",\"owned_by\":\"llmbench\"}]}");
    *p = '\0';
    if (!shared_json(text, s->models_resp) || !shared_json("{\"status\":\"ok\"}", s->health_resp))
        return lb_fail(err, LB_ERR_NOMEM, "no memory for the server's responses");
    return LB_OK;
}

/* The listening socket (non-blocking, backlog 4096); -1 with errno set when it cannot be. */
static int open_listener(const struct addrinfo *ai) {
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd >= 0 && setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0 &&
        bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 4096) == 0)
        return fd;
    int e = errno;
    if (fd >= 0) close(fd);
    errno = e;
    return -1;
}

/* A connection the acceptor watched goes back to libmicrohttpd. */
static void resume_watched(void *ctx, void *conn) {
    lb_server *s = ctx;
    lb_server_guard_phase(s->guard, guarded(conn), LB_CONN_WAITING);
    head_due(s, conn_of(conn), true);
    MHD_resume_connection(conn);
}

/* The acceptor's hand-over: libmicrohttpd closes fd itself when it refuses it. */
static bool hand_to_mhd(void *ctx, int fd, const struct sockaddr *addr, socklen_t addr_len) {
    lb_server *s = ctx;
    if (MHD_add_connection(s->daemon, fd, addr, addr_len) != MHD_YES) return false;
    atomic_fetch_add(&s->handed, 1);
    return true;
}

static unsigned open_connections(void *ctx) {
    lb_server *s = ctx;
    const union MHD_DaemonInfo *info =
        MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
    return info ? info->num_connections : 0;
}

lb_status lb_server_start(const lb_server_params *params, const lb_token_source *src,
                          lb_server **out, lb_err *err) {
    *out = NULL;
    if (!params->model || !params->model[0] || strlen(params->model) > MODEL_MAX_BYTES)
        return lb_fail(err, LB_ERR_USAGE, "the model name must be 1 to %d bytes", MODEL_MAX_BYTES);
    if (params->port < 0 || params->port > 65535)
        return lb_fail(err, LB_ERR_USAGE, "port %d is outside 0..65535", params->port);
    if (!(params->fault_rate >= 0.0 && params->fault_rate <= 1.0))
        return lb_fail(err, LB_ERR_USAGE, "fault rate %g is outside 0..1", params->fault_rate);
    if (params->max_tokens < 1 || params->default_max_tokens < 1)
        return lb_fail(err, LB_ERR_USAGE, "the token limits must be >= 1");

    char port_text[8];
    snprintf(port_text, sizeof port_text, "%d", params->port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    int gai = getaddrinfo(params->host, port_text, &hints, &ai);
    if (gai != 0)
        return lb_fail(err, LB_ERR_USAGE, "cannot listen on host '%s': %s", params->host,
                       gai_strerror(gai));

    lb_server *s = calloc(1, sizeof *s);
    if (!s) {
        freeaddrinfo(ai);
        return lb_fail(err, LB_ERR_NOMEM, "no memory for the server");
    }
    s->p = *params;
    memcpy(s->model, params->model, strlen(params->model) + 1);
    lb_utf8text_repair(s->model); /* a name from a Latin-1 terminal or file name */
    s->p.model = s->model;
    s->p.host = NULL; /* not kept */
    s->src = src;
    lb_status st = build_shared_responses(s, err);
    if (st == LB_OK) st = lb_server_timer_init(&s->timer, err);
    if (st == LB_OK)
        st = lb_server_guard_init(params->idle_timeout_s, params->read_timeout_s, &s->guard, err);
    if (st != LB_OK) {
        freeaddrinfo(ai);
        lb_server_free(s);
        return st;
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    unsigned threads =
        params->threads > 0 ? (unsigned)params->threads : (unsigned)(cores > 0 ? cores : 1);
    /* poll(), not epoll: libmicrohttpd's epoll loop (seen in 0.9.75) fetches 128 events
     * a call and, after a full batch, waits again with the blocking timeout, so a worker
     * that finds exactly 128 (256, ...) connections ready sleeps with them unserved until
     * some other event comes: tens of ms under load, forever when the client waits.
     * poll() costs O(connections of the thread) a wake-up, small next to the requests. */
    /* libmicrohttpd's own timeout (whole seconds, 0 = none) ends a connection that stops
     * reading its answer; the guard handles the rest. */
    unsigned idle_timeout =
        params->idle_timeout_s > 0 ? (unsigned)ceil(params->idle_timeout_s) : 0u;
    unsigned flags = MHD_USE_POLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    /* One thread is no pool: libmicrohttpd warns when given a pool size below 2. */
    struct MHD_OptionItem pool[] = {
        {threads > 1 ? MHD_OPTION_THREAD_POOL_SIZE : MHD_OPTION_END, (intptr_t)threads, NULL},
        {MHD_OPTION_END, 0, NULL},
    };
    /* The acceptor holds the connections to connection_limit (503 past it), but counts a
     * handed-over connection only once libmicrohttpd has taken it, so connections that
     * come together may pass it; libmicrohttpd, which splits its own limit over its
     * threads, would refuse one of those, and 0.9.75 then hangs that thread. Its limit
     * leaves room for them. */
    const unsigned n_threads = threads > 1 ? (unsigned)threads : 1u;
    const unsigned mhd_limit = params->connection_limit > (UINT_MAX - 1024) / (2 * n_threads)
                                   ? UINT_MAX
                                   : 2 * n_threads * params->connection_limit + 1024;
    int listen_fd = open_listener(ai);
    int listen_errno = errno;
    freeaddrinfo(ai);
    if (listen_fd < 0) {
        lb_server_free(s);
        return lb_fail(err, LB_ERR_IO, "could not listen on %s port %d: %s%s", params->host,
                       params->port, strerror(listen_errno),
                       listen_errno == EADDRINUSE ? " (another process has it: give another "
                                                    "--port, or --port 0 for a free one)"
                       : listen_errno == EACCES   ? " (ports below 1024 need privileges: give "
                                                    "--port 1024 or above, or 0 for a free one)"
                                                  : "");
    }
    s->daemon = MHD_start_daemon(
        flags | MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ITC, 0, NULL, NULL, on_request, s,
        MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, s, MHD_OPTION_ARRAY, pool,
        MHD_OPTION_CONNECTION_LIMIT, mhd_limit, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, s, MHD_OPTION_URI_LOG_CALLBACK,
        on_request_line, s, MHD_OPTION_CONNECTION_TIMEOUT, idle_timeout, MHD_OPTION_END);
    if (!s->daemon) {
        close(listen_fd);
        lb_server_free(s);
        return lb_fail(err, LB_ERR_RUNTIME,
                       "libmicrohttpd could not start (the warning above says why)");
    }
    struct sockaddr_storage bound;
    socklen_t bound_len = sizeof bound;
    getsockname(listen_fd, (struct sockaddr *)&bound, &bound_len);
    s->port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                                : ((struct sockaddr_in *)&bound)->sin_port);
    lb_server_accept_params ap = {
        .listen_fd = listen_fd,
        .idle_timeout_s = params->idle_timeout_s,
        .read_timeout_s = params->read_timeout_s,
        .max_connections = params->connection_limit,
        .hand = hand_to_mhd,
        .resume = resume_watched,
        .open_connections = open_connections,
        .ctx = s,
    };
    st = lb_server_accept_start(&ap, &s->acceptor, err);
    if (st != LB_OK) {
        close(listen_fd);
        lb_server_free(s);
        return st;
    }
    atomic_store(&s->started, true);
    LB_INFO("serve: %u worker threads, port %d, fault %s at rate %g", threads, s->port,
            lb_server_fault_mode_name(params->fault), params->fault_rate);
    *out = s;
    return LB_OK;
}

int lb_server_port(const lb_server *s) {
    return s->port;
}

void lb_server_get_stats(const lb_server *s, lb_server_stats *out) {
    lb_server *m = (lb_server *)s; /* atomic loads need a non-const object in C11 */
    *out = (lb_server_stats){
        .requests = atomic_load(&m->requests),
        .streamed = atomic_load(&m->streamed),
        .completed = atomic_load(&m->completed),
        .faults = atomic_load(&m->faults),
        .client_errors = atomic_load(&m->client_errors),
        .aborted = atomic_load(&m->aborted),
        .tokens = atomic_load(&m->tokens),
        .in_flight = atomic_load(&m->in_flight),
        .idle_closed = m->guard ? lb_server_guard_idle_closed(m->guard) : 0,
        .slow_closed = m->guard ? lb_server_guard_slow_closed(m->guard) : 0,
        .busy = atomic_load(&m->busy),
    };
    lb_server_accept_stats a = m->accepted;
    if (m->acceptor) lb_server_accept_stats_get(m->acceptor, &a);
    out->idle_closed += a.idle;
    out->slow_closed += a.slow;
    out->malformed = a.malformed;
    out->over_limit = a.over_limit;
}

void lb_server_shutdown(lb_server *s, double drain_s) {
    if (!s || s->shut_down) return;
    s->shut_down = true;
    if (s->daemon) {
        lb_server_accept_stop(s->acceptor); /* no new connections, none watched */
        lb_server_accept_stats_get(s->acceptor, &s->accepted);
        atomic_store(&s->draining, true);
        lb_server_timer_drain(s->timer);
        int64_t deadline = lb_clock_now_ns() + (int64_t)(drain_s * 1e9);
        /* A request moves from handed to due to in flight, counted in the next place before
         * it leaves the last: looked at in that order, none is missed. */
        while ((atomic_load(&s->mhd_started) < atomic_load(&s->handed) ||
                atomic_load(&s->heads_due) > 0 || atomic_load(&s->in_flight) > 0) &&
               lb_clock_now_ns() < deadline)
            nanosleep(&(struct timespec){.tv_nsec = DRAIN_POLL_NS}, NULL);
        MHD_stop_daemon(s->daemon);
        s->daemon = NULL;
        lb_server_accept_free(s->acceptor);
        s->acceptor = NULL;
    }
    lb_server_timer_free(s->timer);
    s->timer = NULL;
}

void lb_server_free(lb_server *s) {
    if (!s) return;
    lb_server_shutdown(s, 0.0);
    for (int i = 0; i < 2; i++) {
        if (s->models_resp[i]) MHD_destroy_response(s->models_resp[i]);
        if (s->health_resp[i]) MHD_destroy_response(s->health_resp[i]);
    }
    lb_server_guard_free(s->guard);
    free(s);
}
