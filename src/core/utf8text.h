/* utf8text.h: text made fit for JSON: the bytes that are not UTF-8 replaced, and text cut
 * to a byte budget without splitting a character.
 *
 * Text from outside (a --name typed in a Latin-1 terminal, a file name, the raw bytes of a
 * URL) may be any bytes, but JSON is UTF-8 and jansson writes no string that is not, and a
 * cut by bytes (snprintf's "%.200s") can split a character. Well-formed is RFC 3629's
 * UTF-8, as jansson reads it: no overlong forms, no surrogates (U+D800..U+DFFF), nothing
 * above U+10FFFF. Everything works on the bytes in place and allocates nothing. Not here:
 * decoding code points, normalization, U+FFFD as the replacement (serve's token stream
 * uses it; a '?' keeps the text's length, so fixed buffers stay large enough). */
#ifndef LB_CORE_UTF8TEXT_H
#define LB_CORE_UTF8TEXT_H

#include <stddef.h>

/* The length of the well-formed character at p[0..n) (n >= 1): 1 to 4; 0 when the bytes
 * there start none (a continuation byte, 0xc0, 0xc1, 0xf5..0xff, or a byte after the first
 * that is out of range); -1 when p[0..n) is the beginning of one that the end cuts short. */
int lb_utf8text_char_len(const char *p, size_t n);

/* Makes the NUL-terminated text UTF-8 in place: each byte that starts no well-formed
 * character becomes '?' (a character cut short by the end of text starts none). The
 * length does not change. Returns text. */
char *lb_utf8text_repair(char *text);

/* The length of the longest prefix of the NUL-terminated text that has at most max_bytes
 * bytes and ends between characters: a well-formed character is kept whole or dropped
 * whole, a byte that starts none counts as one. Cut text with it ("%.*s", or a NUL
 * written there). */
size_t lb_utf8text_cut_len(const char *text, size_t max_bytes);

#endif
