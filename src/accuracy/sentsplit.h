/* sentsplit.h: MLPerf's text postprocessing before ROUGE, without NLTK: strip the text
 * and put each sentence on its own line ("\n".join(nltk.sent_tokenize(text.strip()))).
 *
 * The design idea: Punkt's decisions for English news text reduce mostly to a few rules,
 * applied where a run of '.', '?' or '!' (with any closing quotes or brackets after it) is
 * followed by whitespace:
 *   - '?' or '!' in the run: a sentence ends;
 *   - an ellipsis ("..", "..."): ends only if the next word starts with a capital;
 *   - a single '.' after a known abbreviation ("Mr", "U.S", "Jan", "e.g" ...): ends only if
 *     the next word is a frequent sentence starter written with a capital ("The", "He" ...);
 *     "No." only counts as an abbreviation before a number;
 *   - after an initial (one letter): never ends;
 *   - after a number: ends unless the next word starts in lower case;
 *   - after any other word, and after a word of more than 64 bytes: ends.
 * At an end, the whitespace run becomes one "\n", as joining Punkt's sentences does; all
 * other characters (line breaks inside a sentence too) are kept.
 *
 * What it does not do: Punkt's learned parameters (its abbreviation list, collocations and
 * orthographic statistics from the training corpus). Where Punkt decides differently, only
 * ROUGE-Lsum (and gen_len, by the collapsed whitespace) can change; docs/ACCURACY.md
 * says how much. */
#ifndef LB_ACCURACY_SENTSPLIT_H
#define LB_ACCURACY_SENTSPLIT_H

#include <stddef.h>

/* Returns the stripped text with one sentence per line, NUL-terminated, in a new buffer
 * the caller frees (never longer than n bytes plus the NUL); *out_len receives its length.
 * NULL when out of memory. */
char *lb_sentsplit_lines(const char *text, size_t n, size_t *out_len);

#endif
