/* sse.c: the event-stream line machine behind sse.h.
 *
 * Fast path: a piece that holds whole lines is scanned in place with memchr and only the
 * data payloads are copied; only a line cut at a piece boundary is buffered. */
#include "sut/sse.h"

#include <stdlib.h>
#include <string.h>

void lb_sse_init(lb_sse_parser *p, size_t max_bytes) {
    memset(p, 0, sizeof *p);
    p->max_bytes = max_bytes;
    p->at_start = true;
}

void lb_sse_reset(lb_sse_parser *p) {
    p->line_len = 0;
    p->data_len = 0;
    p->has_data = false;
    p->skip_lf = false;
    p->at_start = true;
}

void lb_sse_free(lb_sse_parser *p) {
    if (p == NULL) return;
    free(p->line);
    free(p->data);
    memset(p, 0, sizeof *p);
}

bool lb_sse_pending(const lb_sse_parser *p) {
    return p->line_len > 0 || p->has_data;
}

static int reserve(char **buf, size_t *cap, size_t need) {
    if (need <= *cap) return 0;
    size_t ncap = *cap ? *cap : 256;
    while (ncap < need)
        ncap *= 2;
    char *b = realloc(*buf, ncap);
    if (b == NULL) return LB_SSE_NOMEM;
    *buf = b;
    *cap = ncap;
    return 0;
}

/* One complete line (without its end). An empty line dispatches the event. */
static int on_line(lb_sse_parser *p, const char *s, size_t n, lb_sse_event_fn fn, void *user) {
    if (p->at_start) {
        p->at_start = false;
        if (n >= 3 && memcmp(s, "\xEF\xBB\xBF", 3) == 0) {
            s += 3;
            n -= 3;
        }
    }
    if (n == 0) {
        if (!p->has_data) return 0;
        p->has_data = false;
        size_t len = p->data_len;
        p->data_len = 0;
        int rc = reserve(&p->data, &p->data_cap, len + 1);
        if (rc) return rc;
        p->data[len] = '\0';
        return fn(user, p->data, len);
    }
    if (s[0] == ':') return 0; /* comment */
    const char *colon = memchr(s, ':', n);
    size_t name_len = colon ? (size_t)(colon - s) : n;
    if (name_len != 4 || memcmp(s, "data", 4) != 0) return 0;
    const char *v = colon ? colon + 1 : s + n;
    size_t vlen = (size_t)(s + n - v);
    if (vlen > 0 && v[0] == ' ') {
        v++;
        vlen--;
    }
    size_t need = p->data_len + (p->has_data ? 1 : 0) + vlen;
    if (need > p->max_bytes) return LB_SSE_TOO_LARGE;
    int rc = reserve(&p->data, &p->data_cap, need + 1);
    if (rc) return rc;
    if (p->has_data) p->data[p->data_len++] = '\n';
    memcpy(p->data + p->data_len, v, vlen);
    p->data_len += vlen;
    p->has_data = true;
    return 0;
}

int lb_sse_feed(lb_sse_parser *p, const char *bytes, size_t n, lb_sse_event_fn fn, void *user) {
    size_t pos = 0;
    if (p->skip_lf && n > 0) {
        if (bytes[0] == '\n') pos = 1;
        p->skip_lf = false;
    }
    while (pos < n) {
        /* The next line end: \n or \r, whichever comes first. */
        const char *start = bytes + pos;
        size_t left = n - pos;
        const char *lf = memchr(start, '\n', left);
        const char *cr = memchr(start, '\r', lf ? (size_t)(lf - start) : left);
        const char *eol = cr ? cr : lf;
        if (eol == NULL) {
            if (p->line_len + left > p->max_bytes) return LB_SSE_TOO_LARGE;
            int rc = reserve(&p->line, &p->line_cap, p->line_len + left);
            if (rc) return rc;
            memcpy(p->line + p->line_len, start, left);
            p->line_len += left;
            return 0;
        }
        size_t seg = (size_t)(eol - start);
        int rc;
        if (p->line_len > 0) {
            if (p->line_len + seg > p->max_bytes) return LB_SSE_TOO_LARGE;
            rc = reserve(&p->line, &p->line_cap, p->line_len + seg);
            if (rc) return rc;
            memcpy(p->line + p->line_len, start, seg);
            size_t len = p->line_len + seg;
            p->line_len = 0;
            rc = on_line(p, p->line, len, fn, user);
        } else {
            rc = on_line(p, start, seg, fn, user);
        }
        pos += seg + 1;
        if (*eol == '\r') {
            if (pos < n) {
                if (bytes[pos] == '\n') pos++;
            } else {
                p->skip_lf = true;
            }
        }
        if (rc) return rc;
    }
    return 0;
}

int lb_sse_finish(lb_sse_parser *p, lb_sse_event_fn fn, void *user) {
    p->skip_lf = false;
    size_t len = p->line_len;
    p->line_len = 0;
    int rc = len > 0 ? on_line(p, p->line, len, fn, user) : 0;
    return rc ? rc : on_line(p, "", 0, fn, user);
}
