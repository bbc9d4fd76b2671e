/* stem.h: the Porter stemmer as NLTK's PorterStemmer() stems, in its default
 * NLTK_EXTENSIONS mode (NLTK 3.8), which is what rouge_score uses with use_stemmer=True.
 *
 * The design idea: one pass per step of Porter's 1980 paper over a byte buffer that only
 * shrinks, with NLTK's deviations from the paper folded into the steps: the pool of
 * irregular forms (skies -> sky, dying -> die, news -> news ...), words of one or two
 * letters left alone, "ies"/"ied" on four-letter words giving "ie", step 1c's y -> i only
 * after a consonant that is not the first letter, step 2's "alli" tried first and
 * re-entered, "fulli" and "logi" rules, and the two-letter vowel-consonant *o condition.
 *
 * What it does not do: Unicode or case folding. A byte is a letter, and only a, e, i, o, u
 * (and y after a consonant) are vowels. Callers pass lower-case words made of [a-z0-9]
 * (rouge tokens), for which the result is byte-for-byte NLTK's (tests/test_stem.c checks
 * a large word list against NLTK). */
#ifndef LB_ACCURACY_STEM_H
#define LB_ACCURACY_STEM_H

#include <stddef.h>

/* Stems word[0..len) into out, which must hold len + 1 bytes (a stem is never longer than
 * its word); writes a terminating NUL and returns the stem's length. word and out may be
 * the same buffer. */
size_t lb_stem_word(const char *word, size_t len, char *out);

#endif
