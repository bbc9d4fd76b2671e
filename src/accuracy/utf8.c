/* utf8.c: UTF-8 decoding by the RFC 3629 table, and Python's whitespace set. */
#include "accuracy/utf8.h"

size_t lb_utf8_decode(const char *s, size_t n, uint32_t *cp) {
    const unsigned char *u = (const unsigned char *)s;
    *cp = LB_UTF8_INVALID;
    if (u[0] < 0x80) {
        *cp = u[0];
        return 1;
    }
    size_t len;
    uint32_t v, min;
    if (u[0] >= 0xC2 && u[0] <= 0xDF) {
        len = 2, v = u[0] & 0x1Fu, min = 0x80;
    } else if (u[0] >= 0xE0 && u[0] <= 0xEF) {
        len = 3, v = u[0] & 0x0Fu, min = 0x800;
    } else if (u[0] >= 0xF0 && u[0] <= 0xF4) {
        len = 4, v = u[0] & 0x07u, min = 0x10000;
    } else {
        return 1;
    }
    if (n < len) return 1;
    for (size_t i = 1; i < len; i++) {
        if ((u[i] & 0xC0) != 0x80) return 1;
        v = (v << 6) | (u[i] & 0x3Fu);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 1;
    *cp = v;
    return len;
}

int64_t lb_utf8_count(const char *s, size_t n) {
    int64_t chars = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        i += lb_utf8_decode(s + i, n - i, &cp);
        chars++;
    }
    return chars;
}

bool lb_utf8_is_space(uint32_t cp) {
    if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F);
    switch (cp) {
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000: return true;
    default: return cp >= 0x2000 && cp <= 0x200A;
    }
}
