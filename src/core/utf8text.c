/* utf8text.c: well-formed UTF-8 checked a character at a time, behind utf8text.h.
 *
 * The lead byte gives the length; the range of the second byte is what excludes overlong
 * forms (after 0xe0 and 0xf0), surrogates (after 0xed) and code points above U+10FFFF
 * (after 0xf4), the way RFC 3629's table of well-formed sequences does; every later byte
 * is a plain continuation byte. No table, no decoding: the callers need lengths only. */
#include "core/utf8text.h"

#include <string.h>

int lb_utf8text_char_len(const char *p, size_t n) {
    const unsigned char *s = (const unsigned char *)p;
    unsigned c = s[0];
    int need = c < 0x80                 ? 1
               : c >= 0xc2 && c <= 0xdf ? 2
               : c >= 0xe0 && c <= 0xef ? 3
               : c >= 0xf0 && c <= 0xf4 ? 4
                                        : 0;
    unsigned lo = c == 0xe0 ? 0xa0 : c == 0xf0 ? 0x90 : 0x80;
    unsigned hi = c == 0xed ? 0x9f : c == 0xf4 ? 0x8f : 0xbf;
    for (int k = 1; k < need; k++) {
        if ((size_t)k >= n) return -1;
        if (s[k] < (k == 1 ? lo : 0x80) || s[k] > (k == 1 ? hi : 0xbf)) return 0;
    }
    return need;
}

char *lb_utf8text_repair(char *text) {
    size_t n = strlen(text);
    for (size_t i = 0; i < n;) {
        int k = lb_utf8text_char_len(text + i, n - i);
        if (k > 0)
            i += (size_t)k;
        else
            text[i++] = '?';
    }
    return text;
}

size_t lb_utf8text_cut_len(const char *text, size_t max_bytes) {
    size_t n = strlen(text), i = 0;
    while (i < n) {
        int k = lb_utf8text_char_len(text + i, n - i);
        size_t w = k > 0 ? (size_t)k : 1;
        if (w > max_bytes - i) break;
        i += w;
    }
    return i;
}
