/* sentsplit.c: the rule-based stand-in for nltk.sent_tokenize described in sentsplit.h.
 *
 * One forward pass copies the stripped text; only at a candidate sentence end does it look
 * back at the word before the punctuation (bounded by ASCII whitespace, as Punkt's
 * "word before" is) and forward at the next word. The look-back stops after MAX_WORD_BYTES:
 * text whose words are separated by other whitespace (no-break spaces) would otherwise be
 * read back to its start at every period. */
#include "accuracy/sentsplit.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "accuracy/utf8.h"

static const char *const abbreviations[] = {
    "mr",   "mrs",  "ms",   "dr",   "prof", "st",   "jr",   "sr",     "sen",  "rep",   "gov",
    "gen",  "col",  "lt",   "sgt",  "capt", "cmdr", "adm",  "maj",    "rev",  "hon",   "pres",
    "supt", "det",  "insp", "mt",   "ft",   "ave",  "blvd", "rd",     "no",   "nos",   "vs",
    "etc",  "inc",  "corp", "co",   "ltd",  "bros", "dept", "approx", "jan",  "feb",   "mar",
    "apr",  "jun",  "jul",  "aug",  "sep",  "sept", "oct",  "nov",    "dec",  "calif", "fla",
    "conn", "ariz", "colo", "mich", "minn", "okla", "tenn", "tex",    "penn", "wis",
};

/* Words that, capitalised after an abbreviation, start a new sentence. */
static const char *const sentence_starters[] = {
    "the",  "he",    "she", "it",  "they",  "we",  "i",     "but",  "in",    "this",
    "that", "there", "his", "her", "their", "its", "after", "when", "while", "if",
    "a",    "an",    "and", "as",  "at",    "on",  "for",   "some", "many",  "one",
};

/* A longer word before a '.' is an ordinary word: every abbreviation, initial, dotted
 * abbreviation and number of real text is shorter. */
#define MAX_WORD_BYTES 64

static bool in_list(const char *const *list, size_t n, const char *word) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(list[i], word) == 0) return true;
    return false;
}

static bool is_ascii_space(char c) {
    return c == ' ' || (c >= '\t' && c <= '\r');
}
static bool is_upper(char c) {
    return c >= 'A' && c <= 'Z';
}
static bool is_lower(char c) {
    return c >= 'a' && c <= 'z';
}
static bool is_digit(char c) {
    return c >= '0' && c <= '9';
}
static bool is_alpha(char c) {
    return is_upper(c) || is_lower(c);
}
static char to_lower(char c) {
    return is_upper(c) ? (char)(c - 'A' + 'a') : c;
}

/* Lower-cases s[0..n) into out (cap bytes); false when it does not fit. */
static bool lower_copy(const char *s, size_t n, char *out, size_t cap) {
    if (n + 1 > cap) return false;
    for (size_t i = 0; i < n; i++)
        out[i] = to_lower(s[i]);
    out[n] = '\0';
    return true;
}

/* "u.s", "e.g", "d.c": letters separated by single periods. */
static bool is_dotted_letters(const char *s, size_t n) {
    if (n < 3) return false;
    for (size_t i = 0; i < n; i++)
        if ((i % 2 == 0) != is_alpha(s[i]) || (i % 2 == 1 && s[i] != '.')) return false;
    return n % 2 == 1;
}

static bool is_number(const char *s, size_t n) {
    bool digit = false;
    for (size_t i = 0; i < n; i++) {
        if (is_digit(s[i]))
            digit = true;
        else if (s[i] != ',' && s[i] != '.' && s[i] != '-')
            return false;
    }
    return digit;
}

/* The next word starts at t[w] (not whitespace); is it a capitalised sentence starter? */
static bool next_is_starter(const char *t, size_t w, size_t e) {
    size_t n = 0;
    while (w + n < e && is_alpha(t[w + n]))
        n++;
    char word[16];
    return n > 0 && is_upper(t[w]) && lower_copy(t + w, n, word, sizeof word) &&
           in_list(sentence_starters, sizeof sentence_starters / sizeof sentence_starters[0], word);
}

/* Decides a candidate end: the punctuation run is t[p .. p+run_len), the text starts at b,
 * the next word at w, the text ends at e. */
static bool ends_sentence(const char *t, size_t b, size_t p, size_t run_len, bool question,
                          size_t w, size_t e) {
    if (question) return true;
    if (run_len >= 2) return is_upper(t[w]);
    size_t ps = p, lo = p - b > MAX_WORD_BYTES ? p - MAX_WORD_BYTES : b;
    while (ps > lo && !is_ascii_space(t[ps - 1]))
        ps--;
    if (ps > b && !is_ascii_space(t[ps - 1])) return true; /* longer than MAX_WORD_BYTES */
    while (ps < p && strchr("\"'([{`", t[ps]) != NULL)
        ps++;
    size_t n = p - ps;
    const char *word = t + ps;
    if (n == 0) return true;
    if (is_number(word, n)) return !is_lower(t[w]);
    if (n == 1 && is_alpha(word[0])) return false;
    char low[16];
    bool abbreviation =
        is_dotted_letters(word, n) ||
        (lower_copy(word, n, low, sizeof low) &&
         in_list(abbreviations, sizeof abbreviations / sizeof abbreviations[0], low));
    if (!abbreviation) return true;
    if (n == 2 && strcmp(low, "no") == 0 && !is_digit(t[w])) return true;
    return next_is_starter(t, w, e);
}

static bool is_closer(const char *t, size_t q, size_t e, size_t *len) {
    if (strchr("\"')]}", t[q]) != NULL && t[q] != '\0') {
        *len = 1;
        return true;
    }
    /* U+2019 and U+201D, the closing curly quotes */
    if (q + 3 <= e && (unsigned char)t[q] == 0xE2 && (unsigned char)t[q + 1] == 0x80 &&
        ((unsigned char)t[q + 2] == 0x99 || (unsigned char)t[q + 2] == 0x9D)) {
        *len = 3;
        return true;
    }
    return false;
}

/* End of the whitespace run that starts at i. */
static size_t skip_space(const char *t, size_t i, size_t e) {
    while (i < e) {
        uint32_t cp;
        size_t len = lb_utf8_decode(t + i, e - i, &cp);
        if (!lb_utf8_is_space(cp)) break;
        i += len;
    }
    return i;
}

char *lb_sentsplit_lines(const char *t, size_t n, size_t *out_len) {
    size_t b = skip_space(t, 0, n), e = b;
    for (size_t i = b; i < n;) { /* e: end of the last non-space character */
        uint32_t cp;
        i += lb_utf8_decode(t + i, n - i, &cp);
        if (!lb_utf8_is_space(cp)) e = i;
    }
    char *out = malloc(e - b + 1);
    if (out == NULL) return NULL;
    size_t o = 0;
    for (size_t i = b; i < e;) {
        if (t[i] != '.' && t[i] != '?' && t[i] != '!') {
            out[o++] = t[i++];
            continue;
        }
        size_t p = i, q = i, len;
        bool question = false;
        while (q < e && (t[q] == '.' || t[q] == '?' || t[q] == '!'))
            question |= t[q++] != '.';
        size_t run_len = q - p;
        while (q < e && is_closer(t, q, e, &len))
            q += len;
        size_t w = skip_space(t, q, e);
        memcpy(out + o, t + p, q - p);
        o += q - p;
        if (w > q && w < e && ends_sentence(t, b, p, run_len, question, w, e)) {
            out[o++] = '\n';
            i = w;
        } else {
            i = q;
        }
    }
    out[o] = '\0';
    *out_len = o;
    return out;
}
