/* fuzz_stem.c: the Porter stemmer (accuracy/stem.h) on arbitrary bytes and on the same
 * bytes folded onto a-z (the words ROUGE actually passes).
 *
 * Must hold: the stem is no longer than the word and NUL-terminated at its length;
 * stemming in place gives the same stem as stemming into another buffer; words of one or
 * two letters are left alone; a word of a-z stems to a word of a-z. Words are capped at
 * 256 bytes (ROUGE tokens are words). */
#include <stdbool.h>
#include <string.h>

#include "accuracy/stem.h"
#include "fuzz.h"

/* out and inplace are separate blocks of exactly len + 1 bytes, so a write past the
 * stem's room is a sanitizer report. */
static void check_word(const char *word, size_t len) {
    char *out = malloc(len + 1), *inplace = malloc(len + 1);
    FUZZ_CHECK(out != NULL && inplace != NULL);
    memset(out, 0x55, len + 1);
    size_t n = lb_stem_word(word, len, out);
    FUZZ_CHECK(n <= len && out[n] == '\0');
    if (len <= 2) FUZZ_CHECK(n == len && memcmp(out, word, len) == 0);
    memcpy(inplace, word, len);
    size_t m = lb_stem_word(inplace, len, inplace);
    FUZZ_CHECK(m == n && memcmp(inplace, out, n + 1) == 0);
    bool letters = true;
    for (size_t i = 0; i < len; i++)
        letters = letters && word[i] >= 'a' && word[i] <= 'z';
    for (size_t i = 0; i < n && letters; i++)
        FUZZ_CHECK(out[i] >= 'a' && out[i] <= 'z');
    free(out);
    free(inplace);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 256) return 0;
    char *word = malloc(size + 1);
    FUZZ_CHECK(word != NULL);
    memcpy(word, data, size);
    check_word(word, size);
    for (size_t i = 0; i < size; i++)
        word[i] = (char)('a' + data[i] % 26);
    check_word(word, size);
    free(word);
    return 0;
}
