/* dataset.h: the samples a load run sends: prompts, optional references, per-sample
 * output lengths.
 *
 * Four sources: MLPerf llama3.1-8b cnn_eval.json (a JSON array of {input, tok_input,
 * output}; the prompt is the MLPerf summarization template around `input`), JSONL with
 * `prompt` (and optional `reference`, `max_tokens`), ShareGPT JSON (the first human turn
 * is the prompt, the next assistant turn the reference; a conversation that does not open
 * with a non-empty human turn and a reply is skipped and counted), and synthetic prompts
 * whose input and output lengths follow a seeded distribution, in words or (with a
 * tokenizer) in tokens, optionally after one of a few shared prefixes (vLLM's prefix
 * repetition). Every parser takes a buffer, so it can be fuzzed and tested without files,
 * and refuses a malformed dataset with one sentence naming the file, the record and the
 * field (an empty JSONL prompt included: no server takes one). lb_dataset_load skips a
 * file's leading UTF-8 byte order mark. Token counts are known where the file carries them
 * (tok_input), the generator chose them (synthetic), or a tokenizer counted them. */
#ifndef LB_LOADGEN_DATASET_H
#define LB_LOADGEN_DATASET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/rng.h"
#include "core/status.h"
#include "model/tokenizer.h"

typedef struct {
    char *prompt;         /* the text sent, template applied (owned) */
    char *reference;      /* expected output for accuracy, NULL when none (owned) */
    int32_t max_tokens;   /* output tokens asked for this sample; 0 = the run's default */
    int32_t input_tokens; /* prompt length in tokens when known, else -1 */
    char **history;       /* multi-turn: the conversation's earlier turns, user and assistant
                             in turn, before this user turn (owned); NULL for a first turn */
    size_t n_history;
    int32_t next_turn; /* multi-turn: the sample of the conversation's next turn; -1 none */
    bool follow_up;    /* multi-turn: not a conversation's first turn (sent only after the
                          turn before it ends) */
} lb_sample;

typedef struct {
    lb_sample *samples; /* owned */
    size_t n;
    char format[16]; /* "cnn", "jsonl", "sharegpt", "sharegpt-turns", "synthetic" */
    size_t skipped;  /* ShareGPT conversations without a human turn and a reply */
    bool multi_turn; /* samples are conversation turns (next_turn, follow_up, history) */
} lb_dataset;

/* The MLPerf llama3.1-8b prompt template; "{input}" is replaced by the article. */
#define LB_CNN_PROMPT_TEMPLATE                                                                     \
    "Summarize the following news article in 128 tokens. Please output the summary only, "         \
    "without any other text.\n\nArticle:\n{input}\n\nSummary:"
#define LB_CNN_MAX_TOKENS 128

/* Parsers of a whole file held in buf[0..len). `name` labels errors (the file path).
 * On success *out owns its samples (lb_dataset_free); on failure *out is empty. cnn_eval's
 * tok_input holds token ids: a value that is not an integer from 0 to INT32_MAX is refused
 * with the record, its place in the array and the value. */
lb_status lb_dataset_parse_cnn(const char *buf, size_t len, const char *name, lb_dataset *out,
                               lb_err *err);
lb_status lb_dataset_parse_jsonl(const char *buf, size_t len, const char *name, lb_dataset *out,
                                 lb_err *err);
lb_status lb_dataset_parse_sharegpt(const char *buf, size_t len, const char *name, lb_dataset *out,
                                    lb_err *err);
/* ShareGPT as conversations: every user turn that has a reply is a sample whose history
 * is the turns before it (the dataset's own replies), sent as successive chat requests. */
lb_status lb_dataset_parse_sharegpt_turns(const char *buf, size_t len, const char *name,
                                          lb_dataset *out, lb_err *err);

#define LB_LEN_MAX 10000000 /* the longest length a distribution may give, words or tokens */

typedef enum {
    LB_LEN_FIXED = 0, /* a */
    LB_LEN_UNIFORM,   /* integers in [a, b] */
    LB_LEN_NORMAL,    /* mean a, standard deviation b, rounded, within [1, LB_LEN_MAX] */
} lb_len_kind;

typedef struct {
    lb_len_kind kind;
    double a, b;
} lb_len_dist;

/* Parses "fixed:N", "uniform:LO:HI" or "normal:MEAN:STD" (or a bare "N"); N, LO and HI are
 * whole numbers; a number above LB_LEN_MAX is refused, never cut down. */
lb_status lb_dataset_len_dist_parse(const char *text, lb_len_dist *out, lb_err *err);
/* One draw, always >= 1. */
int32_t lb_dataset_len_dist_draw(const lb_len_dist *d, lb_rng *rng);

typedef struct {
    size_t n_samples;   /* prompts to generate */
    lb_len_dist input;  /* prompt length after the prefix: words, or tokens with tok */
    lb_len_dist output; /* max_tokens asked for each prompt */
    uint64_t seed;
    const lb_tokenizer *tok; /* NULL: lengths in words (about one token each); else in
                                tokens: words are added while their tokens fit, and each
                                prompt's input_tokens is tok's count of it */
    int32_t prefix_len;      /* a shared prefix this long (words or tokens) before each
                                prompt (prefix caches); 0: none */
    size_t n_prefixes;       /* distinct prefixes, used in turn (sample i: i mod n) */
} lb_dataset_synthetic_params;

lb_dataset_synthetic_params lb_dataset_synthetic_default_params(void);
lb_status lb_dataset_synthetic(const lb_dataset_synthetic_params *p, lb_dataset *out, lb_err *err);

/* Reads a file and parses it as `format` ("cnn", "jsonl", "sharegpt", "sharegpt-turns", or
 * "auto": .jsonl, or a record at the top level, is JSONL; a JSON array whose first record
 * has a "conversations" key, wherever it stands in the record, is ShareGPT; any other is
 * read as cnn_eval). */
lb_status lb_dataset_load(const char *path, const char *format, lb_dataset *out, lb_err *err);

/* Counts every prompt with tok where the dataset carries no token count (JSONL, ShareGPT,
 * a cnn_eval record without tok_input) or only an estimate (synthetic made without a
 * tokenizer: one per word); cnn_eval.json's tok_input is kept. */
lb_status lb_dataset_count_tokens(lb_dataset *d, const lb_tokenizer *tok, lb_err *err);

void lb_dataset_free(lb_dataset *d);

#endif
