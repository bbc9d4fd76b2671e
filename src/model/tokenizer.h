/* tokenizer.h: byte-level BPE of the tiktoken kind (GPT-2, Llama 3): text to token ids,
 * ids to text, and a count-only fast path for the load generator.
 *
 * The vocabulary is a tiktoken ranks file: one "base64(token bytes) rank" pair a line (the
 * format of Llama 3's tokenizer.model and of tiktoken's *.tiktoken files); a token's rank
 * is its id and its merge priority (a Hugging Face tokenizer.json becomes one in
 * model/hf_tokenizer.h). Encoding: special-token text, when the vocabulary has
 * special tokens, becomes one id each (the leftmost first, the longest of those starting at
 * one byte, as Hugging Face matches added tokens, lb_tok_added_flag's ways included); the rest is
 * cut into pieces by the family's pre-split regular expression (PCRE2, JIT-compiled); a piece that
 * is a token is its id, any other is merged from single bytes, always joining the adjacent pair
 * whose concatenation has the lowest rank (the leftmost of equals), as tiktoken does. Bytes that
 * are not valid UTF-8 match no part of the expression: each run of them is a piece of its own, so
 * every input encodes and decodes back to the same bytes.
 *
 * A loaded tokenizer is read-only: any number of threads may encode, count and decode with
 * it at once. Not here: training, SentencePiece (Llama 2) vocabularies, other pre-split
 * expressions (cl100k_base shares Llama 3's up to spelling; o200k_base has its own), bos and
 * eos insertion (callers add ids), normalisation. */
#ifndef LB_MODEL_TOKENIZER_H
#define LB_MODEL_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

/* The pre-split regular expression. */
typedef enum {
    LB_TOK_PATTERN_AUTO,   /* chosen from the vocabulary: GPT-2's when a token holds four
                              digits in a row (its numbers are not cut into threes), else
                              Llama 3's */
    LB_TOK_PATTERN_LLAMA3, /* Meta's Llama 3 tokenizer.py: contractions in any case, letters
                              with one leading non-letter, digits in threes, newlines apart */
    LB_TOK_PATTERN_GPT2,   /* tiktoken's gpt2 / r50k_base / p50k_base */
} lb_tok_pattern;

/* The special tokens, numbered from the largest rank + 1 and written "<|name|>". */
typedef enum {
    LB_TOK_SPECIAL_AUTO,   /* the pattern's family's, when that next id is where the family
                              puts them (128000 for Llama 3, 50256 for GPT-2), else none */
    LB_TOK_SPECIAL_NONE,   /* none: "<|eot_id|>" in a text is ordinary text */
    LB_TOK_SPECIAL_LLAMA3, /* Llama 3.1's 256: <|begin_of_text|>, <|end_of_text|>, ...,
                              <|eot_id|>, <|python_tag|>, reserved 3..247 */
    LB_TOK_SPECIAL_GPT2,   /* <|endoftext|> */
    LB_TOK_SPECIAL_LIST,   /* the params' list, with its own texts and ids (tokenizer.json's
                              added tokens) */
} lb_tok_special;

/* How a listed special token is matched (tokenizer.json's AddedToken fields), bits of
 * lb_tokenizer_params.special_match; none set: verbatim, wherever it stands. */
typedef enum {
    LB_TOK_ADDED_LSTRIP = 1,      /* also takes the whitespace (White_Space) just before it */
    LB_TOK_ADDED_RSTRIP = 2,      /* also takes the whitespace just after it */
    LB_TOK_ADDED_SINGLE_WORD = 4, /* matches only where no word character (Unicode's \w:
                                     Alphabetic, marks, decimal digits, connector punctuation,
                                     joiners) touches it on either side */
    LB_TOK_ADDED_NORMALIZED = 8,  /* matched in a second pass, in the text the others left
                                     (Hugging Face matches tokens marked "normalized" after
                                     the others, on the normalized text) */
} lb_tok_added_flag;

typedef struct {
    lb_tok_pattern pattern;           /* pre-split expression (default AUTO) */
    lb_tok_special special;           /* special tokens (default AUTO) */
    const char *const *special_texts; /* LIST: [n_special_list] texts, matched verbatim */
    const uint32_t *special_ids;      /* LIST: [n_special_list] their ids, none a rank */
    const bool *special_flags;        /* LIST: [n_special_list] whether each is special in
                                         Hugging Face's sense (added tokens may not be);
                                         NULL: every one is */
    const unsigned *special_match;    /* LIST: [n_special_list] lb_tok_added_flag bits of
                                         each; NULL: none */
    size_t n_special_list;
} lb_tokenizer_params;

/* What a loaded tokenizer holds. */
typedef struct {
    lb_tok_pattern pattern; /* the expression in use (never AUTO) */
    lb_tok_special special; /* the special tokens in use (never AUTO) */
    size_t n_ranks;         /* tokens in the ranks file */
    size_t n_special;       /* special tokens added */
    uint32_t max_id;        /* the largest id of either kind */
    int jit;                /* 1 when PCRE2 compiled the expression to machine code */
} lb_tokenizer_info;

typedef struct lb_tokenizer lb_tokenizer;

lb_tokenizer_params lb_tokenizer_default_params(void);

/* "auto", "llama3", "gpt2" (also "r50k", "p50k") to a pattern; a bad name is a usage error
 * that lists the good ones. */
lb_status lb_tokenizer_pattern_parse(const char *name, lb_tok_pattern *out, lb_err *err);
const char *lb_tokenizer_pattern_name(lb_tok_pattern pattern);
/* "auto", "none", "llama3", "gpt2" to a set of special tokens; likewise. */
lb_status lb_tokenizer_special_parse(const char *name, lb_tok_special *out, lb_err *err);
const char *lb_tokenizer_special_name(lb_tok_special special);

/* Reads a ranks file. *out is the caller's, freed with lb_tokenizer_free. A malformed file is
 * refused with its name and line (bad base64, a missing or bad rank, a repeated token or rank), as
 * is one that leaves any of the 256 bytes without a rank. */
lb_status lb_tokenizer_load(lb_tokenizer **out, const char *path, const lb_tokenizer_params *params,
                            lb_err *err);
/* The same from bytes in memory; name stands for the file in messages. */
lb_status lb_tokenizer_parse(lb_tokenizer **out, const char *bytes, size_t n, const char *name,
                             const lb_tokenizer_params *params, lb_err *err);
void lb_tokenizer_free(lb_tokenizer *tok);

const lb_tokenizer_info *lb_tokenizer_get_info(const lb_tokenizer *tok);

/* The number of tokens text[0..len) encodes to, without storing them. Fails only when
 * memory runs out or PCRE2 reports an error. */
lb_status lb_tokenizer_count(const lb_tokenizer *tok, const char *text, size_t len,
                             int64_t *n_tokens, lb_err *err);

/* The ids of text[0..len): *ids is malloc'd (NULL when *n_ids is 0), the caller frees it. */
lb_status lb_tokenizer_encode(const lb_tokenizer *tok, const char *text, size_t len, uint32_t **ids,
                              size_t *n_ids, lb_err *err);

/* Whether id is one of the vocabulary's special tokens (<|eot_id|>, a tokenizer.json's added
 * tokens marked special; an added token that is not is matched verbatim but is no special
 * token here): what a decoder that skips them, as Hugging Face's skip_special_tokens does,
 * leaves out of a text. */
bool lb_tokenizer_is_special(const lb_tokenizer *tok, uint32_t id);

/* The bytes of ids[0..n_ids) joined: *text is malloc'd and NUL-terminated (the bytes may hold
 * other NULs; *len is their count), the caller frees it. An id outside the vocabulary is a
 * usage error naming it. */
lb_status lb_tokenizer_decode(const lb_tokenizer *tok, const uint32_t *ids, size_t n_ids,
                              char **text, size_t *len, lb_err *err);

#endif
