/* http_head.c: the request-head check behind http_head.h. One pass over the bytes, line by
 * line; nothing is allocated and nothing is copied. */
#include "serve/http_head.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* tchar of RFC 9110: the characters of a method or a field name. */
static bool is_tchar(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

/* Field values may hold visible characters, spaces, tabs and bytes >= 0x80 (obs-text). */
static bool is_value_char(unsigned char c) {
    return c == '\t' || (c >= 0x20 && c != 0x7f);
}

/* The end of the line starting at p (the '\n'), or NULL when it has not arrived. */
static const char *line_end(const char *p, const char *end) {
    return memchr(p, '\n', (size_t)(end - p));
}

/* Checks the request line [p, eol) without its line ending. */
static int check_request_line(const char *p, const char *eol, const char **why) {
    const char *sp1 = memchr(p, ' ', (size_t)(eol - p));
    if (sp1 == NULL || sp1 == p) {
        *why = "malformed request line: expected METHOD TARGET HTTP/1.1";
        return 400;
    }
    for (const char *q = p; q < sp1; q++)
        if (!is_tchar((unsigned char)*q)) {
            *why = "malformed request line: the method holds a character a method may not";
            return 400;
        }
    const char *target = sp1 + 1;
    const char *sp2 = memchr(target, ' ', (size_t)(eol - target));
    if (sp2 == NULL || sp2 == target) {
        *why = "malformed request line: expected METHOD TARGET HTTP/1.1";
        return 400;
    }
    for (const char *q = target; q < sp2; q++)
        if ((unsigned char)*q <= 0x20 || (unsigned char)*q == 0x7f) {
            *why = "malformed request line: the target holds a control character";
            return 400;
        }
    const char *version = sp2 + 1;
    size_t vlen = (size_t)(eol - version);
    bool digits = vlen == 8 && version[5] >= '0' && version[5] <= '9' && version[6] == '.' &&
                  version[7] >= '0' && version[7] <= '9';
    if (!digits || memcmp(version, "HTTP/", 5) != 0) {
        *why = "malformed request line: expected METHOD TARGET HTTP/1.1";
        return 400;
    }
    if (version[5] != '1' || (version[7] != '0' && version[7] != '1')) {
        *why = "HTTP version not supported: this server speaks HTTP/1.0 and HTTP/1.1";
        return 505;
    }
    return LB_HTTP_HEAD_OK;
}

/* [v, v_end) with the spaces and tabs around it removed. */
static void trim(const char **v, const char **v_end) {
    while (*v < *v_end && (**v == ' ' || **v == '\t'))
        (*v)++;
    while (*v_end > *v && ((*v_end)[-1] == ' ' || (*v_end)[-1] == '\t'))
        (*v_end)--;
}

static bool field_is(const char *name, size_t n, const char *want) {
    return n == strlen(want) && strncasecmp(name, want, n) == 0;
}

int lb_http_head_check(const char *buf, size_t len, size_t *head_len, const char **why) {
    *head_len = 0;
    *why = NULL;
    const char *end = buf + len;
    const char *eol = line_end(buf, end);
    if (eol == NULL) {
        if (len >= LB_HTTP_HEAD_MAX) {
            *why = "the request line is too long";
            return 431;
        }
        return LB_HTTP_HEAD_MORE;
    }
    const char *line_stop = eol > buf && eol[-1] == '\r' ? eol - 1 : eol;
    int verdict = check_request_line(buf, line_stop, why);
    if (verdict != LB_HTTP_HEAD_OK) return verdict;

    const char *length = NULL, *length_end = NULL;
    bool transfer_encoding = false;
    int fields = 0;
    for (const char *p = eol + 1;;) {
        eol = line_end(p, end);
        if (eol == NULL) {
            if (len >= LB_HTTP_HEAD_MAX) {
                *why = "the request head is larger than 16384 bytes";
                return 431;
            }
            return LB_HTTP_HEAD_MORE;
        }
        if ((size_t)(eol + 1 - buf) > LB_HTTP_HEAD_MAX) {
            *why = "the request head is larger than 16384 bytes";
            return 431;
        }
        line_stop = eol > p && eol[-1] == '\r' ? eol - 1 : eol;
        if (line_stop == p) { /* the blank line: the head is complete */
            if (transfer_encoding) {
                *why = "a request body must come with Content-Length (chunked request bodies "
                       "are not accepted)";
                return 411;
            }
            *head_len = (size_t)(eol + 1 - buf);
            return LB_HTTP_HEAD_OK;
        }
        if (++fields > LB_HTTP_FIELDS_MAX) {
            *why = "the request head has more than 100 header fields";
            return 431;
        }
        if (*p == ' ' || *p == '\t') {
            *why = "a header line is folded onto the next (obsolete line folding)";
            return 400;
        }
        const char *colon = memchr(p, ':', (size_t)(line_stop - p));
        if (colon == NULL || colon == p) {
            *why = "malformed header line: expected NAME: VALUE";
            return 400;
        }
        for (const char *q = p; q < colon; q++)
            if (!is_tchar((unsigned char)*q)) {
                *why = "malformed header line: the name holds a character a name may not";
                return 400;
            }
        const char *v = colon + 1, *v_end = line_stop;
        for (const char *q = v; q < v_end; q++)
            if (!is_value_char((unsigned char)*q)) {
                *why = "malformed header line: the value holds a control character";
                return 400;
            }
        trim(&v, &v_end);
        size_t name_len = (size_t)(colon - p);
        if (field_is(p, name_len, "Content-Length")) {
            size_t n = (size_t)(v_end - v), digits = 0;
            while (digits < n && v[digits] >= '0' && v[digits] <= '9')
                digits++;
            if (n == 0 || digits < n) {
                *why = "Content-Length is not a number of bytes (digits only)";
                return 400;
            }
            if (n > 19) {
                *why = "the request body is larger than 67108864 bytes";
                return 413;
            }
            if (length != NULL &&
                ((size_t)(length_end - length) != n || memcmp(length, v, n) != 0)) {
                *why = "the request's body length is ambiguous: two different Content-Length "
                       "headers";
                return 400;
            }
            unsigned long long bytes = 0;
            for (const char *q = v; q < v_end; q++)
                bytes = bytes * 10 + (unsigned long long)(*q - '0');
            if (bytes > LB_HTTP_BODY_MAX) {
                *why = "the request body is larger than 67108864 bytes";
                return 413;
            }
            length = v;
            length_end = v_end;
        } else if (field_is(p, name_len, "Transfer-Encoding")) {
            if (!field_is(v, (size_t)(v_end - v), "chunked")) {
                *why = "Transfer-Encoding other than chunked is not supported";
                return 501;
            }
            transfer_encoding = true;
        }
        if (length != NULL && transfer_encoding) {
            *why = "the request's body length is ambiguous: both Content-Length and "
                   "Transfer-Encoding";
            return 400;
        }
        p = eol + 1;
    }
}

static const char *reason_phrase(int status) {
    switch (status) {
    case 400: return "Bad Request";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 431: return "Request Header Fields Too Large";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Error";
    }
}

size_t lb_http_head_error_response(int status, const char *why, char *out, size_t cap) {
    char body[640];
    int body_len = snprintf(body, sizeof body,
                            "{\"error\":{\"message\":\"%s\",\"type\":\"%s\",\"param\":null,"
                            "\"code\":null}}",
                            why, status >= 500 ? "server_error" : "invalid_request_error");
    if (body_len < 0 || (size_t)body_len >= sizeof body) return 0;
    int n = snprintf(out, cap,
                     "HTTP/1.1 %d %s\r\nConnection: close\r\nContent-Type: application/json\r\n"
                     "Content-Length: %d\r\n\r\n%s",
                     status, reason_phrase(status), body_len, body);
    return n < 0 || (size_t)n >= cap ? 0 : (size_t)n;
}
