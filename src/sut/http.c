/* http.c: libcurl multi + epoll + timerfd event loop behind http.h.
 *
 * One epoll set holds libcurl's sockets and one timerfd. The timerfd is armed at the
 * earlier of libcurl's own timers and (caller's deadline - spin_ns), with nanosecond
 * precision, so the thread sleeps until just before it must act and then polls; a plain
 * millisecond poll timeout would make every scheduled send up to a millisecond late.
 * Transfers ("xfers") are pooled with their easy handles and buffers.
 *
 * Shards: libcurl's connection cache costs time in proportion to the connections it
 * holds on every transfer (finding an idle connection walks the host's list; removing a
 * finished transfer walks the whole cache), so one multi handle with thousands of
 * connections spends most of its time there (measured: 42,000 requests/s with 64 in
 * flight, 5,100 with 4,096). The client therefore runs several multi handles of at most
 * SHARD_CONNECTIONS connections each, all on the one epoll set, and gives each transfer
 * to the shard with the fewest in flight for its replica; connections opened before a
 * run are spread the same way, so each shard finds them idle where it needs them.
 *
 * Parked sockets: libcurl asks to stop watching a socket when a transfer ends on a
 * kept-alive connection and to watch it again when the connection is reused, two
 * epoll_ctl calls per request. A connection socket that was watched for input only stays
 * in the epoll set instead ("parked", in the client's own per-socket table), and the next
 * request on it costs no call. An idle connection gets no data, so a parked socket is
 * quiet until the server closes it (or sends stray bytes): then it leaves the set for
 * real (level-triggered, it would be reported again and again) and libcurl, which checks
 * an idle connection before it reuses it, finds it closed by itself. The table is kept
 * true by libcurl's socket callbacks: a socket is only parked when libcurl created it (the
 * sockopt callback) and closes it through the client (the close callback: the kernel
 * drops a closed socket from the set, and its number may come back as a new socket).
 * Not done: libcurl 7.88 also polls a connection before reusing it and once after
 * sending a request (two poll calls per request); it has no option to skip either. */
#include "sut/http.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/provenance.h"
#include "core/signals.h"
#include "sut/sse.h"

#define MAX_EVENT_BYTES   (4u << 20)  /* one SSE event or line */
#define MAX_BODY_BYTES    (64u << 20) /* a whole non-streamed answer */
#define MAX_ERROR_BODY    512         /* kept of an error answer, for the detail */
#define PRECONNECT_WINDOW 256         /* connections being opened at once before a run */
#define SHARD_CONNECTIONS 64          /* connections one multi handle is sized for */
#define MAX_KEYS          64          /* replicas told apart when choosing a shard */
#define TIMER_TAG         UINT64_MAX  /* epoll data of the timerfd */
#define MAX_EVENTS        64          /* taken from epoll at a time */
#define DONE_GRACE_NS     100000000LL /* after [DONE], for the body's end to come */

typedef struct lb_http_client lb_http_client;

typedef struct {
    CURLM *multi;
    lb_http_client *c;
    uint32_t index;
    int64_t deadline_ns;     /* libcurl's timer for this multi, -1 when none */
    uint32_t load[MAX_KEYS]; /* transfers in flight here, per replica */
} shard;

/* What the client knows of one socket of libcurl's, indexed by its number. */
typedef struct {
    uint32_t events; /* EPOLLIN/EPOLLOUT it is registered for, 0: not in the epoll set */
    uint32_t shard;  /* the shard whose tag it is registered with */
    bool ours;       /* libcurl made it a connection socket and closes it through on_close */
    bool parked;     /* libcurl stopped watching it (idle connection); still in the set */
} sock_state;

typedef struct xfer {
    CURL *easy;
    lb_http_client *c;
    shard *sh; /* where it runs while in use */
    int key;   /* its replica, for the shard's load */
    struct xfer *next_free;
    struct xfer *next_done; /* in the client's list of transfers that saw [DONE] */
    bool in_use;
    lb_http_request req;
    int64_t start_ns, first_ns, event_ns;
    int64_t done_ns;   /* when [DONE] arrived */
    bool headers_seen; /* status and content type looked at */
    bool as_body;      /* collect the answer as a body (not streamed, or an error) */
    bool saw_done;
    bool listed_done; /* in the client's list of transfers that saw [DONE] */
    lb_qerr parse_error;
    char parse_detail[120];
    int http_status;
    int64_t prompt_tokens, completion_tokens;
    int32_t n_chunks;
    lb_sse_parser sse;
    char *buf; /* body */
    size_t len, cap;
    char *text; /* generated text (keep_text) */
    size_t text_len, text_cap;
    char *reasoning; /* generated reasoning text (keep_text) */
    size_t reasoning_len, reasoning_cap;
} xfer;

struct lb_http_client {
    shard *shards;
    uint32_t n_shards;
    int epfd, tfd;
    int64_t armed_ns; /* what the timerfd is set to, -1 when disarmed */
    /* Events taken from epoll and not served yet, in order: a run that must return for a
     * due send leaves them here and the next run serves them first, so every ready socket
     * waits its turn (epoll would otherwise report the left ones again behind all the
     * others, and under load a socket could wait for hundreds of milliseconds). */
    struct epoll_event ev[MAX_EVENTS];
    int ev_next, ev_n;
    sock_state *socks; /* by socket number */
    size_t n_socks;
    lb_http_params p;
    lb_http_callbacks cb;
    void *user;
    struct curl_slist *headers;
    xfer **all; /* every xfer ever made */
    size_t n_all, cap_all;
    xfer *free_list;
    xfer *done_list; /* saw [DONE]; may still be running (end_after_done) */
    size_t inflight;
    int finished;
    CURL **openers; /* lb_http_preconnect's transfers still running (NULL: ended) */
    int64_t n_openers, running_openers, opened;
};

const char *lb_http_qerr_name(lb_qerr e) {
    static const char *const names[LB_QERR_COUNT] = {
        "none",     "connect",  "timeout",      "dropped",    "truncated",   "bad_sse", "bad_json",
        "http_4xx", "http_5xx", "server_error", "no_replica", "interrupted", "other",   "redirect"};
    return (unsigned)e < LB_QERR_COUNT ? names[e] : "unknown";
}

lb_http_params lb_http_default_params(void) {
    return (lb_http_params){
        .api = LB_API_COMPLETIONS,
        .stream = true,
        .keep_text = false,
        .timeout_ms = 600000,
        .connect_timeout_ms = 10000,
        .api_key = NULL,
        .max_connections = 1024,
        .spin_ns = 150000,
    };
}

static int grow(char **buf, size_t *cap, size_t need) {
    if (need <= *cap) return 0;
    size_t ncap = *cap ? *cap : 1024;
    while (ncap < need)
        ncap *= 2;
    char *b = realloc(*buf, ncap);
    if (b == NULL) return -1;
    *buf = b;
    *cap = ncap;
    return 0;
}

/* Appends s[0..n) to the NUL-terminated text buf[0..*len). Returns non-zero on no memory. */
static int append_text(char **buf, size_t *len, size_t *cap, const char *s, size_t n) {
    if (grow(buf, cap, *len + n + 1) != 0) return -1;
    memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = '\0';
    return 0;
}

static void set_parse_error(xfer *x, lb_qerr e, const char *fmt, const char *data, size_t len) {
    if (x->parse_error != LB_QERR_NONE) return;
    x->parse_error = e;
    char shown[48];
    size_t n = len < sizeof shown - 1 ? len : sizeof shown - 1;
    for (size_t i = 0; i < n; i++)
        shown[i] = (data[i] >= 32 && data[i] < 127) ? data[i] : '?';
    shown[n] = '\0';
    snprintf(x->parse_detail, sizeof x->parse_detail, fmt, shown);
}

/* Takes in one parsed piece (streamed event or whole body). Returns non-zero to stop. */
static int take_piece(xfer *x, const lb_openai_piece *piece) {
    if (piece->error != NULL) {
        set_parse_error(x, LB_QERR_SERVER_ERROR, "server error: %s", piece->error,
                        strlen(piece->error));
        return 1;
    }
    if (piece->prompt_tokens >= 0) x->prompt_tokens = piece->prompt_tokens;
    if (piece->completion_tokens >= 0) x->completion_tokens = piece->completion_tokens;
    if (piece->text_len > 0 || piece->reasoning_len > 0) {
        x->n_chunks++;
        if (x->first_ns == 0) x->first_ns = x->event_ns;
        if (x->c->p.keep_text &&
            (append_text(&x->text, &x->text_len, &x->text_cap, piece->text, piece->text_len) != 0 ||
             append_text(&x->reasoning, &x->reasoning_len, &x->reasoning_cap, piece->reasoning,
                         piece->reasoning_len) != 0))
            return 1;
    }
    return 0;
}

static int on_event(void *ud, const char *data, size_t len) {
    xfer *x = ud;
    if (x->saw_done) return 0;
    lb_openai_piece piece;
    if (lb_openai_parse(x->c->p.api, true, data, len, &piece) != LB_OK) {
        set_parse_error(x, LB_QERR_BAD_JSON, "event data is not a completion chunk: '%s'", data,
                        len);
        return 1;
    }
    if (piece.done) {
        x->saw_done = true;
        x->done_ns = x->event_ns;
        if (!x->listed_done) {
            x->listed_done = true;
            x->next_done = x->c->done_list;
            x->c->done_list = x;
        }
        return 0;
    }
    int stop = take_piece(x, &piece);
    bool token = piece.text_len > 0 || piece.reasoning_len > 0;
    lb_openai_piece_clear(&piece);
    if (!stop && token && x->c->cb.on_token) x->c->cb.on_token(x->c->user, x->req.tag, x->event_ns);
    return stop;
}

static void look_at_headers(xfer *x) {
    long code = 0;
    curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &code);
    x->http_status = (int)code;
    x->headers_seen = true;
    x->as_body = !x->c->p.stream || code < 200 || code >= 300;
    if (!x->as_body) {
        const char *ct = NULL;
        curl_easy_getinfo(x->easy, CURLINFO_CONTENT_TYPE, &ct);
        if (ct != NULL && strncasecmp(ct, "text/event-stream", 17) != 0) x->as_body = true;
    }
}

/* Records the parser's own failure (lb_sse_feed's or lb_sse_finish's rc); on_event records
 * its own. */
static void sse_failed(xfer *x, int rc) {
    if (rc == LB_SSE_TOO_LARGE) set_parse_error(x, LB_QERR_BAD_SSE, "event over 4 MiB%s", "", 0);
    if (rc == LB_SSE_NOMEM) set_parse_error(x, LB_QERR_OTHER, "out of memory%s", "", 0);
}

static size_t on_write(char *ptr, size_t size, size_t nmemb, void *ud) {
    xfer *x = ud;
    size_t n = size * nmemb;
    if (!x->headers_seen) look_at_headers(x);
    if (x->as_body) {
        bool error = x->http_status < 200 || x->http_status >= 300;
        size_t limit = error ? MAX_ERROR_BODY : MAX_BODY_BYTES;
        size_t take = x->len + n > limit ? (x->len < limit ? limit - x->len : 0) : n;
        if (!error && take < n) {
            set_parse_error(x, LB_QERR_BAD_JSON, "answer larger than 64 MiB%s", "", 0);
            return 0;
        }
        if (take > 0 && append_text(&x->buf, &x->len, &x->cap, ptr, take) != 0) return 0;
        return n;
    }
    x->event_ns = lb_clock_now_ns();
    int rc = lb_sse_feed(&x->sse, ptr, n, on_event, x);
    sse_failed(x, rc);
    return rc == 0 ? n : 0;
}

/* Drops the events taken from epoll for socket s and not served yet: its number may be
 * reused at once. */
static void forget_pending(lb_http_client *c, curl_socket_t s) {
    for (int i = c->ev_next; i < c->ev_n; i++)
        if (c->ev[i].data.u64 != TIMER_TAG && (int)(uint32_t)c->ev[i].data.u64 == s)
            c->ev[i].events = 0;
}

static int on_socket(CURL *easy, curl_socket_t s, int what, void *userp, void *socketp) {
    (void)easy, (void)socketp;
    shard *sh = userp;
    lb_http_client *c = sh->c;
    sock_state *st = s >= 0 && (size_t)s < c->n_socks && c->socks[s].ours ? &c->socks[s] : NULL;
    if (what == CURL_POLL_REMOVE) {
        forget_pending(c, s);
        if (st != NULL && st->events == EPOLLIN) { /* an idle connection from now on */
            st->parked = true;
            return 0;
        }
        epoll_ctl(c->epfd, EPOLL_CTL_DEL, s, NULL);
        /* not parkable (a connect attempt, which libcurl may close without on_close): the
         * table forgets it */
        if (st != NULL) *st = (sock_state){0};
        return 0;
    }
    struct epoll_event ev = {.events = 0, .data.u64 = (uint64_t)sh->index << 32 | (uint32_t)s};
    if (what & CURL_POLL_IN) ev.events |= EPOLLIN;
    if (what & CURL_POLL_OUT) ev.events |= EPOLLOUT;
    if (st == NULL) { /* a socket libcurl did not make through on_sockopt: no state */
        if (epoll_ctl(c->epfd, EPOLL_CTL_MOD, s, &ev) != 0 && errno == ENOENT)
            epoll_ctl(c->epfd, EPOLL_CTL_ADD, s, &ev);
        return 0;
    }
    st->parked = false;
    if (st->events == ev.events && st->shard == sh->index) return 0; /* as registered */
    if (st->events == 0) {
        if (epoll_ctl(c->epfd, EPOLL_CTL_ADD, s, &ev) != 0 && errno == EEXIST)
            epoll_ctl(c->epfd, EPOLL_CTL_MOD, s, &ev);
    } else if (epoll_ctl(c->epfd, EPOLL_CTL_MOD, s, &ev) != 0 && errno == ENOENT) {
        /* closed behind the table's back and its number reused: no longer ours */
        epoll_ctl(c->epfd, EPOLL_CTL_ADD, s, &ev);
        st->ours = false;
    }
    st->events = ev.events;
    st->shard = sh->index;
    return 0;
}

/* libcurl made s for a connection: from now on the table follows it until on_close. */
static int on_sockopt(void *clientp, curl_socket_t s, curlsocktype purpose) {
    lb_http_client *c = clientp;
    if (purpose != CURLSOCKTYPE_IPCXN || s < 0) return CURL_SOCKOPT_OK;
    if ((size_t)s >= c->n_socks) {
        size_t n = c->n_socks ? c->n_socks : 256;
        while (n <= (size_t)s)
            n *= 2;
        sock_state *t = realloc(c->socks, n * sizeof *t);
        if (t == NULL) return CURL_SOCKOPT_ERROR;
        memset(t + c->n_socks, 0, (n - c->n_socks) * sizeof *t);
        c->socks = t;
        c->n_socks = n;
    }
    c->socks[s] = (sock_state){.ours = true};
    return CURL_SOCKOPT_OK;
}

/* libcurl closes a connection socket: closing drops it from the epoll set. */
static int on_close(void *clientp, curl_socket_t s) {
    lb_http_client *c = clientp;
    if (s >= 0 && (size_t)s < c->n_socks) c->socks[s] = (sock_state){0};
    forget_pending(c, s);
    return close(s);
}

static int on_timer(CURLM *multi, long timeout_ms, void *userp) {
    (void)multi;
    shard *sh = userp;
    sh->deadline_ns = timeout_ms < 0 ? -1 : lb_clock_now_ns() + (int64_t)timeout_ms * 1000000;
    return 0;
}

static lb_qerr map_curl(CURLcode rc) {
    switch (rc) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST: return LB_QERR_CONNECT;
    case CURLE_OPERATION_TIMEDOUT: return LB_QERR_TIMEOUT;
    case CURLE_GOT_NOTHING:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_PARTIAL_FILE: return LB_QERR_DROPPED;
    default: return LB_QERR_OTHER;
    }
}

/* A 3xx answer fails the query with where the server sent it (its password masked), so
 * the user can give that URL as the endpoint. */
static void describe_redirect(xfer *x, lb_http_outcome *o) {
    o->error = LB_QERR_REDIRECT;
    char *to = NULL;
    if (curl_easy_getinfo(x->easy, CURLINFO_REDIRECT_URL, &to) != CURLE_OK || to == NULL) {
        snprintf(o->detail, sizeof o->detail, "redirected (%d) without a Location", x->http_status);
        return;
    }
    char shown[sizeof o->detail];
    lb_provenance_mask_url(to, shown, sizeof shown);
    size_t n = strlen(shown);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)shown[i] < 32 || (unsigned char)shown[i] >= 127) shown[i] = '?';
    /* the URL's room in the detail (160 bytes) beside the rest, the precisions below */
    if (n > 100) /* cut: the advice would name half a URL */
        snprintf(o->detail, sizeof o->detail, "redirected (%d) to %.100s...", x->http_status,
                 shown);
    else
        snprintf(o->detail, sizeof o->detail, "redirected (%d) to %.100s: give --endpoint that URL",
                 x->http_status, shown);
}

/* Decides how the transfer went; fills o. */
static void classify(xfer *x, CURLcode rc, lb_http_outcome *o) {
    lb_http_client *c = x->c;
    if (!x->headers_seen) look_at_headers(x);
    o->http_status = x->http_status;
    bool error_status = x->http_status < 200 || x->http_status >= 300;
    if (x->parse_error != LB_QERR_NONE) {
        o->error = x->parse_error;
        snprintf(o->detail, sizeof o->detail, "%s", x->parse_detail);
        return;
    }
    /* after [DONE] the answer is whole: a connection that breaks or a timeout that strikes
     * before the body's end takes nothing from it */
    if (rc != CURLE_OK && !x->saw_done) {
        o->error = map_curl(rc);
        /* libcurl times out a connect that does not finish in time alike: with the request
         * never sent, the server was not reached */
        if (o->error == LB_QERR_TIMEOUT && o->sent_ns == o->start_ns) {
            o->error = LB_QERR_CONNECT;
            snprintf(o->detail, sizeof o->detail, "no connection in time: %s",
                     curl_easy_strerror(rc));
            return;
        }
        snprintf(o->detail, sizeof o->detail, "%s", curl_easy_strerror(rc));
        return;
    }
    if (x->http_status >= 300 && x->http_status < 400) {
        describe_redirect(x, o);
        return;
    }
    if (error_status) {
        o->error = x->http_status >= 500   ? LB_QERR_HTTP_5XX
                   : x->http_status >= 400 ? LB_QERR_HTTP_4XX
                                           : LB_QERR_OTHER;
        size_t n = x->len < 100 ? x->len : 100;
        for (size_t i = 0; i < n; i++)
            if (x->buf[i] < 32 || x->buf[i] >= 127) x->buf[i] = ' ';
        /* a server shedding load (429, 503) may say when to come back: not waited for (a
         * benchmark measures the server as it answers), but said */
        char after[40] = "";
        curl_off_t after_s = 0;
        if (curl_easy_getinfo(x->easy, CURLINFO_RETRY_AFTER, &after_s) == CURLE_OK && after_s > 0)
            snprintf(after, sizeof after, " (Retry-After %lld s)", (long long)after_s);
        snprintf(o->detail, sizeof o->detail, "HTTP %d%s: %.*s", x->http_status, after, (int)n,
                 n ? x->buf : "");
        return;
    }
    if (!x->as_body) {
        x->event_ns = o->done_ns;
        /* a last event without its blank line (on_event may report a token, timed at
         * the end) */
        sse_failed(x, lb_sse_finish(&x->sse, on_event, x));
        if (x->parse_error != LB_QERR_NONE) {
            o->error = x->parse_error;
            snprintf(o->detail, sizeof o->detail, "%s", x->parse_detail);
        } else if (!x->saw_done) {
            o->error = LB_QERR_TRUNCATED;
            snprintf(o->detail, sizeof o->detail,
                     "stream ended without [DONE] after %d text events", x->n_chunks);
        }
        return;
    }
    /* A whole body: the non-streamed answer, or a streamed request answered without SSE. */
    lb_openai_piece piece;
    if (lb_openai_parse(c->p.api, false, x->buf ? x->buf : "", x->len, &piece) != LB_OK) {
        set_parse_error(x, c->p.stream ? LB_QERR_BAD_SSE : LB_QERR_BAD_JSON,
                        c->p.stream ? "not an event stream: '%s'"
                                    : "body is not a completion: '%s'",
                        x->buf ? x->buf : "", x->len);
        o->error = x->parse_error;
        snprintf(o->detail, sizeof o->detail, "%s", x->parse_detail);
        return;
    }
    x->event_ns = o->done_ns;
    take_piece(x, &piece);
    x->n_chunks = 0; /* a whole answer has no streamed pieces to count tokens by */
    lb_openai_piece_clear(&piece);
    if (x->parse_error != LB_QERR_NONE) {
        o->error = x->parse_error;
        snprintf(o->detail, sizeof o->detail, "%s", x->parse_detail);
    } else if (c->p.stream) {
        o->error = LB_QERR_BAD_SSE;
        snprintf(o->detail, sizeof o->detail, "a streamed request was answered with one body");
    }
}

static void recycle(xfer *x) {
    lb_http_client *c = x->c;
    x->in_use = false;
    x->next_free = c->free_list;
    c->free_list = x;
}

static void finish(xfer *x, CURLcode rc) {
    lb_http_client *c = x->c;
    lb_http_outcome o = {.req = x->req, .error = LB_QERR_NONE, .start_ns = x->start_ns};
    o.done_ns = lb_clock_now_ns();
    curl_off_t pre_us = 0;
    if (curl_easy_getinfo(x->easy, CURLINFO_PRETRANSFER_TIME_T, &pre_us) == CURLE_OK && pre_us > 0)
        o.sent_ns = x->start_ns + (int64_t)pre_us * 1000;
    else
        o.sent_ns = x->start_ns;
    long connects = 0;
    o.new_connection =
        curl_easy_getinfo(x->easy, CURLINFO_NUM_CONNECTS, &connects) == CURLE_OK && connects > 0;
    classify(x, rc, &o);
    curl_multi_remove_handle(x->sh->multi, x->easy);
    x->sh->load[x->key]--;
    c->inflight--;
    c->finished++;
    if (x->saw_done) o.done_ns = x->done_ns;
    o.first_ns = x->first_ns ? x->first_ns : o.done_ns;
    o.prompt_tokens = x->prompt_tokens;
    o.completion_tokens = x->completion_tokens;
    o.n_chunks = x->n_chunks;
    o.text = c->p.keep_text ? (x->text ? x->text : "") : NULL;
    o.text_len = x->text_len;
    o.reasoning = c->p.keep_text ? (x->reasoning ? x->reasoning : "") : NULL;
    o.reasoning_len = x->reasoning_len;
    /* The callback may submit a retry: this xfer goes back to the pool only afterwards,
     * so o.text stays valid during the call. */
    c->cb.on_done(c->user, &o);
    recycle(x);
}

static void drain_done(shard *sh) {
    lb_http_client *c = sh->c;
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(sh->multi, &left)) != NULL) {
        if (m->msg != CURLMSG_DONE) continue;
        xfer *x = NULL;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&x);
        if (x == NULL) { /* a connection opener of lb_http_preconnect */
            c->opened += m->data.result == CURLE_OK;
            for (int64_t i = 0; i < c->n_openers; i++)
                if (c->openers[i] == m->easy_handle) {
                    curl_multi_remove_handle(sh->multi, m->easy_handle);
                    curl_easy_cleanup(m->easy_handle);
                    c->openers[i] = NULL;
                    c->running_openers--;
                    break;
                }
            continue;
        }
        finish(x, m->data.result);
    }
}

/* [DONE] is the answer's end: a transfer that saw it and that libcurl has not ended
 * DONE_GRACE_NS later (the server holds the stream open) completes then, timed at [DONE],
 * and removing it closes its connection. The grace lets the body's end, which servers
 * often write after [DONE] on its own, end the transfer cleanly and keep the connection.
 * Returns the earliest end still to come, -1 when none. */
static int64_t end_after_done(lb_http_client *c) {
    int64_t next = -1, now = lb_clock_now_ns();
    xfer **link = &c->done_list;
    while (*link != NULL) {
        xfer *x = *link;
        bool running = x->in_use && x->saw_done;
        int64_t at = x->done_ns + DONE_GRACE_NS;
        if (running && now < at) {
            if (next < 0 || at < next) next = at;
            link = &x->next_done;
            continue;
        }
        *link = x->next_done;
        x->listed_done = false;
        if (running) finish(x, CURLE_OK);
    }
    return next;
}

lb_status lb_http_init(lb_http_client **out, const lb_http_params *p, const lb_http_callbacks *cb,
                       void *user, lb_err *err) {
    *out = NULL;
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return lb_fail(err, LB_ERR_RUNTIME, "libcurl failed to initialize");
    lb_http_client *c = calloc(1, sizeof *c);
    if (c == NULL) {
        curl_global_cleanup();
        return lb_fail(err, LB_ERR_NOMEM, "out of memory for the HTTP client");
    }
    c->p = *p;
    c->cb = *cb;
    c->user = user;
    c->armed_ns = -1;
    c->epfd = epoll_create1(EPOLL_CLOEXEC);
    c->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    int64_t most = p->max_connections > 0 ? p->max_connections : 1;
    c->n_shards = (uint32_t)((most + SHARD_CONNECTIONS - 1) / SHARD_CONNECTIONS);
    c->shards = calloc(c->n_shards, sizeof *c->shards);
    bool shards_ok = c->shards != NULL;
    for (uint32_t i = 0; shards_ok && i < c->n_shards; i++) {
        shard *sh = &c->shards[i];
        sh->c = c;
        sh->index = i;
        sh->deadline_ns = -1;
        if ((sh->multi = curl_multi_init()) == NULL) {
            shards_ok = false;
            break;
        }
        curl_multi_setopt(sh->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
        curl_multi_setopt(sh->multi, CURLMOPT_SOCKETDATA, sh);
        curl_multi_setopt(sh->multi, CURLMOPT_TIMERFUNCTION, on_timer);
        curl_multi_setopt(sh->multi, CURLMOPT_TIMERDATA, sh);
        /* room beyond its share for the imbalance of retries and several replicas */
        curl_multi_setopt(sh->multi, CURLMOPT_MAXCONNECTS, (long)(2 * SHARD_CONNECTIONS));
    }
    c->headers = curl_slist_append(NULL, "Content-Type: application/json");
    c->headers = curl_slist_append(c->headers, "Expect:");
    c->headers = curl_slist_append(c->headers, p->stream ? "Accept: text/event-stream"
                                                         : "Accept: application/json");
    if (p->api_key != NULL) {
        char *h = NULL;
        if (asprintf(&h, "Authorization: Bearer %s", p->api_key) > 0) {
            c->headers = curl_slist_append(c->headers, h);
            memset(h, 0, strlen(h));
            free(h);
        }
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = TIMER_TAG};
    if (c->epfd < 0 || c->tfd < 0 || !shards_ok || c->headers == NULL ||
        epoll_ctl(c->epfd, EPOLL_CTL_ADD, c->tfd, &ev) != 0) {
        lb_http_free(c);
        return lb_fail(err, LB_ERR_RUNTIME, "cannot set up the HTTP event loop: %s",
                       strerror(errno));
    }
    *out = c;
    return LB_OK;
}

void lb_http_free(lb_http_client *c) {
    if (c == NULL) return;
    for (size_t i = 0; i < c->n_all; i++) {
        xfer *x = c->all[i];
        if (x->in_use) curl_multi_remove_handle(x->sh->multi, x->easy);
        curl_easy_cleanup(x->easy);
        lb_sse_free(&x->sse);
        free(x->buf);
        free(x->text);
        free(x->reasoning);
        free(x);
    }
    free(c->all);
    for (uint32_t i = 0; c->shards != NULL && i < c->n_shards; i++)
        if (c->shards[i].multi) curl_multi_cleanup(c->shards[i].multi);
    free(c->shards);
    if (c->headers) {
        for (struct curl_slist *h = c->headers; h; h = h->next)
            memset(h->data, 0, strlen(h->data));
        curl_slist_free_all(c->headers);
    }
    if (c->epfd >= 0) close(c->epfd);
    if (c->tfd >= 0) close(c->tfd);
    free(c->socks);
    free(c);
    curl_global_cleanup();
}

/* The options every easy handle of the client shares: the ones libcurl compares when it
 * looks for an idle connection to reuse, so the connections lb_http_preconnect opens are
 * the ones requests find. */
static void set_transport(lb_http_client *c, CURL *e) {
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, c->headers);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)c->p.connect_timeout_ms);
    curl_easy_setopt(e, CURLOPT_SOCKOPTFUNCTION, on_sockopt);
    curl_easy_setopt(e, CURLOPT_SOCKOPTDATA, c);
    curl_easy_setopt(e, CURLOPT_CLOSESOCKETFUNCTION, on_close);
    curl_easy_setopt(e, CURLOPT_CLOSESOCKETDATA, c);
    /* Servers speak HTTP: no other protocol of libcurl's (file://, ftp://, ...) is ever used,
     * whatever a URL says. */
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    /* Redirects are not followed (libcurl's default, said here): the request sent again
     * would be measured as the query's latency, each time; classify() fails the query with
     * the Location instead. */
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
    /* No compression is asked for (a proxy compressing a stream would hold its pieces
     * back), but a server that compresses anyway (Content-Encoding: gzip, deflate, br,
     * zstd) is decoded: without this option libcurl hands over the compressed bytes. */
    curl_easy_setopt(e, CURLOPT_ACCEPT_ENCODING, "identity");
}

static xfer *new_xfer(lb_http_client *c) {
    if (c->n_all == c->cap_all) {
        size_t cap = c->cap_all ? c->cap_all * 2 : 64;
        xfer **a = realloc(c->all, cap * sizeof *a);
        if (a == NULL) return NULL;
        c->all = a;
        c->cap_all = cap;
    }
    xfer *x = calloc(1, sizeof *x);
    if (x == NULL) return NULL;
    x->easy = curl_easy_init();
    if (x->easy == NULL) {
        free(x);
        return NULL;
    }
    x->c = c;
    lb_sse_init(&x->sse, MAX_EVENT_BYTES);
    CURL *e = x->easy;
    curl_easy_setopt(e, CURLOPT_PRIVATE, x);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
    set_transport(c, e);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)c->p.timeout_ms);
    c->all[c->n_all++] = x;
    return x;
}

lb_status lb_http_submit(lb_http_client *c, const char *url, const lb_http_request *req,
                         lb_err *err) {
    xfer *x = c->free_list;
    if (x != NULL)
        c->free_list = x->next_free;
    else if ((x = new_xfer(c)) == NULL)
        return lb_fail(err, LB_ERR_NOMEM, "out of memory for a new HTTP transfer");
    x->in_use = true;
    x->req = *req;
    x->first_ns = x->event_ns = x->done_ns = 0;
    x->headers_seen = x->as_body = x->saw_done = false;
    x->parse_error = LB_QERR_NONE;
    x->parse_detail[0] = '\0';
    x->http_status = 0;
    x->prompt_tokens = x->completion_tokens = -1;
    x->n_chunks = 0;
    x->len = 0;
    x->text_len = x->reasoning_len = 0;
    lb_sse_reset(&x->sse);
    curl_easy_setopt(x->easy, CURLOPT_URL, url);
    curl_easy_setopt(x->easy, CURLOPT_POSTFIELDS, req->body);
    curl_easy_setopt(x->easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->body_len);
    x->key = req->replica >= 0 && req->replica < MAX_KEYS ? req->replica : 0;
    x->sh = &c->shards[0];
    for (uint32_t i = 1; i < c->n_shards; i++)
        if (c->shards[i].load[x->key] < x->sh->load[x->key]) x->sh = &c->shards[i];
    x->start_ns = lb_clock_now_ns();
    CURLMcode mc = curl_multi_add_handle(x->sh->multi, x->easy);
    if (mc != CURLM_OK) {
        recycle(x);
        return lb_fail(err, LB_ERR_RUNTIME, "libcurl refused a transfer: %s",
                       curl_multi_strerror(mc));
    }
    x->sh->load[x->key]++;
    c->inflight++;
    return LB_OK;
}

static void arm(lb_http_client *c, int64_t at_ns) {
    if (at_ns == c->armed_ns) return;
    struct itimerspec its = {.it_interval = {0, 0},
                             .it_value = {at_ns / 1000000000, at_ns % 1000000000}};
    timerfd_settime(c->tfd, TFD_TIMER_ABSTIME, &its, NULL);
    c->armed_ns = at_ns;
}

/* Runs libcurl's timers that are due; returns the earliest one still pending (-1: none). */
static int64_t run_timers(lb_http_client *c) {
    int64_t next = -1, now = lb_clock_now_ns();
    for (uint32_t i = 0; i < c->n_shards; i++) {
        shard *sh = &c->shards[i];
        if (sh->deadline_ns >= 0 && now >= sh->deadline_ns) {
            int running;
            sh->deadline_ns = -1;
            curl_multi_socket_action(sh->multi, CURL_SOCKET_TIMEOUT, 0, &running);
            drain_done(sh);
            now = lb_clock_now_ns();
        }
        if (sh->deadline_ns >= 0 && (next < 0 || sh->deadline_ns < next)) next = sh->deadline_ns;
    }
    return next;
}

int lb_http_run(lb_http_client *c, int64_t until_ns) {
    c->finished = 0;
    for (;;) {
        int64_t timer_ns = run_timers(c), held_ns = end_after_done(c);
        if (held_ns >= 0 && (timer_ns < 0 || held_ns < timer_ns)) timer_ns = held_ns;
        int64_t now = lb_clock_now_ns();
        if (c->finished > 0 || now >= until_ns) return c->finished;
        if (c->ev_next == c->ev_n) {
            int64_t wake = until_ns - c->p.spin_ns;
            if (timer_ns >= 0 && timer_ns < wake) wake = timer_ns;
            int timeout = 0;
            if (wake > now) {
                arm(c, wake);
                timeout = -1;
            }
            int n = epoll_wait(c->epfd, c->ev, MAX_EVENTS, timeout);
            c->ev_next = 0;
            c->ev_n = n > 0 ? n : 0;
        }
        while (c->ev_next < c->ev_n) {
            const struct epoll_event *e = &c->ev[c->ev_next++];
            if (e->events == 0) continue; /* its socket was closed meanwhile */
            if (e->data.u64 == TIMER_TAG) {
                uint64_t ticks;
                if (read(c->tfd, &ticks, sizeof ticks) < 0) ticks = 0;
                c->armed_ns = -1;
                continue;
            }
            shard *sh = &c->shards[e->data.u64 >> 32];
            int fd = (int)(uint32_t)e->data.u64;
            if ((size_t)fd < c->n_socks && c->socks[fd].parked) {
                /* an idle connection closed by the server, or stray bytes: out of the
                 * set; libcurl checks the connection before it reuses it */
                epoll_ctl(c->epfd, EPOLL_CTL_DEL, fd, NULL);
                c->socks[fd] = (sock_state){.ours = true};
                continue;
            }
            int flags = 0, running;
            if (e->events & (EPOLLIN | EPOLLHUP | EPOLLRDHUP)) flags |= CURL_CSELECT_IN;
            if (e->events & EPOLLOUT) flags |= CURL_CSELECT_OUT;
            if (e->events & EPOLLERR) flags |= CURL_CSELECT_ERR;
            curl_multi_socket_action(sh->multi, fd, flags, &running);
            drain_done(sh);
            /* A send is due: the rest wait here for the next run. */
            if (lb_clock_now_ns() >= until_ns) break;
        }
    }
}

size_t lb_http_inflight(const lb_http_client *c) {
    return c->inflight;
}

void lb_http_abort_all(lb_http_client *c, lb_qerr why) {
    for (size_t i = 0; i < c->n_all; i++) {
        xfer *x = c->all[i];
        if (!x->in_use) continue;
        curl_multi_remove_handle(x->sh->multi, x->easy);
        x->sh->load[x->key]--;
        c->inflight--;
        lb_http_outcome o = {.req = x->req,
                             .error = why,
                             .http_status = x->http_status,
                             .start_ns = x->start_ns,
                             .sent_ns = x->start_ns};
        o.done_ns = lb_clock_now_ns();
        o.first_ns = x->first_ns ? x->first_ns : o.done_ns;
        o.prompt_tokens = o.completion_tokens = -1;
        o.n_chunks = x->n_chunks;
        snprintf(o.detail, sizeof o.detail, "still in flight when the run stopped");
        x->in_use = false; /* on_done must not see it as abortable again */
        c->cb.on_done(c->user, &o);
        x->next_free = c->free_list;
        c->free_list = x;
    }
}

static size_t discard(char *ptr, size_t size, size_t nmemb, void *ud) {
    (void)ptr, (void)ud;
    return size * nmemb;
}

lb_status lb_http_preconnect(lb_http_client *c, const char *url, int64_t n, int64_t *opened,
                             lb_err *err) {
    *opened = 0;
    if (n <= 0) return LB_OK;
    c->openers = calloc((size_t)n, sizeof *c->openers);
    if (c->openers == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of memory opening connections");
    c->n_openers = c->running_openers = c->opened = 0;
    /* At most PRECONNECT_WINDOW connects at once: libcurl starts every due connect in one
     * call, which for tens of thousands takes tens of seconds and cannot be interrupted. */
    bool stalled = false;
    while ((c->n_openers < n || c->running_openers > 0) && !lb_signals_interrupted()) {
        while (c->n_openers < n && c->running_openers < PRECONNECT_WINDOW && !stalled) {
            int64_t i = c->n_openers;
            shard *sh = &c->shards[i % c->n_shards]; /* spread evenly */
            CURL *e = curl_easy_init();
            if (e == NULL) {
                stalled = true;
                break;
            }
            curl_easy_setopt(e, CURLOPT_URL, url);
            curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
            curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, discard);
            set_transport(c, e);
            curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)c->p.connect_timeout_ms + 5000L);
            if (curl_multi_add_handle(sh->multi, e) != CURLM_OK) {
                curl_easy_cleanup(e);
                stalled = true;
                break;
            }
            c->openers[c->n_openers++] = e;
            c->running_openers++;
        }
        if (stalled && c->running_openers == 0) break;
        lb_http_run(c, lb_clock_now_ns() + 10000000);
    }
    int64_t started = lb_signals_interrupted() ? n : c->n_openers; /* interrupted: not a failure */
    for (int64_t i = 0; i < c->n_openers; i++) /* interrupted: the rest are dropped */
        if (c->openers[i] != NULL) {
            curl_multi_remove_handle(c->shards[i % c->n_shards].multi, c->openers[i]);
            curl_easy_cleanup(c->openers[i]);
        }
    free(c->openers);
    c->openers = NULL;
    c->n_openers = c->running_openers = 0;
    *opened = c->opened;
    if (started < n)
        return lb_fail(err, LB_ERR_NOMEM, "libcurl could start only %lld of %lld connections",
                       (long long)started, (long long)n);
    return LB_OK;
}
