/* utf8.h: the few UTF-8 facts ROUGE needs: decode one character, count characters, and
 * Python's idea of whitespace.
 *
 * MLPerf's scorer works on Python str, so lengths are code points and str.strip() /
 * Punkt's \s use Unicode whitespace. Malformed bytes (which a Python str cannot hold)
 * decode as one character each with code point LB_UTF8_INVALID, so every byte sequence
 * has a defined length. No normalisation, no case tables. */
#ifndef LB_ACCURACY_UTF8_H
#define LB_ACCURACY_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LB_UTF8_INVALID 0xFFFFFFFFu

/* Decodes the character at s[0..n), n >= 1; writes its code point (LB_UTF8_INVALID for a
 * malformed sequence, overlong form or surrogate) and returns its byte length (1 for a
 * malformed byte). */
size_t lb_utf8_decode(const char *s, size_t n, uint32_t *cp);

/* Characters (code points) in s[0..n). */
int64_t lb_utf8_count(const char *s, size_t n);

/* Python's str.isspace() for one code point. */
bool lb_utf8_is_space(uint32_t cp);

#endif
