/* dataset.h: the samples a load run sends: prompts, optional references, per-sample
 * output lengths.
 *
 * Four sources: MLPerf llama3.1-8b cnn_eval.json (a JSON array of {input, tok_input,
 * output}; the prompt is the MLPerf summarization template around `input`), JSONL with
 * `prompt` (and optional `reference`, `max_tokens`), ShareGPT JSON (the first human turn
 * is the prompt, the next assistant turn the reference), and synthetic prompts whose
 * input and output lengths follow a seeded distribution. Every parser takes a buffer, so
 * it can be fuzzed and tested without files, and refuses a malformed dataset with one
 * sentence naming the file, the record and the field. Nothing here tokenizes: token
 * counts are known only where the file carries them (tok_input) or the generator chose
 * them (synthetic). */
#ifndef LB_LOADGEN_DATASET_H
#define LB_LOADGEN_DATASET_H

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
} lb_sample;

typedef struct {
    lb_sample *samples; /* owned */
    size_t n;
    char format[16]; /* "cnn", "jsonl", "sharegpt", "synthetic" */
    size_t skipped;  /* ShareGPT conversations without a human turn and a reply */
} lb_dataset;

/* The MLPerf llama3.1-8b prompt template; "{input}" is replaced by the article. */
#define LB_CNN_PROMPT_TEMPLATE                                                                     \
    "Summarize the following news article in 128 tokens. Please output the summary only, "         \
    "without any other text.\n\nArticle:\n{input}\n\nSummary:"
#define LB_CNN_MAX_TOKENS 128

/* Parsers of a whole file held in buf[0..len). `name` labels errors (the file path).
 * On success *out owns its samples (lb_dataset_free); on failure *out is empty. */
lb_status lb_dataset_parse_cnn(const char *buf, size_t len, const char *name, lb_dataset *out,
                               lb_err *err);
lb_status lb_dataset_parse_jsonl(const char *buf, size_t len, const char *name, lb_dataset *out,
                                 lb_err *err);
lb_status lb_dataset_parse_sharegpt(const char *buf, size_t len, const char *name, lb_dataset *out,
                                    lb_err *err);

typedef enum {
    LB_LEN_FIXED = 0, /* a */
    LB_LEN_UNIFORM,   /* integers in [a, b] */
    LB_LEN_NORMAL,    /* mean a, standard deviation b, rounded, at least 1 */
} lb_len_kind;

typedef struct {
    lb_len_kind kind;
    double a, b;
} lb_len_dist;

/* Parses "fixed:N", "uniform:LO:HI" or "normal:MEAN:STD" (or a bare "N"). */
lb_status lb_dataset_len_dist_parse(const char *text, lb_len_dist *out, lb_err *err);
/* One draw, always >= 1. */
int32_t lb_dataset_len_dist_draw(const lb_len_dist *d, lb_rng *rng);

typedef struct {
    size_t n_samples;   /* prompts to generate */
    lb_len_dist input;  /* prompt length in words (about one token each) */
    lb_len_dist output; /* max_tokens asked for each prompt */
    uint64_t seed;
} lb_dataset_synthetic_params;

lb_dataset_synthetic_params lb_dataset_synthetic_default_params(void);
lb_status lb_dataset_synthetic(const lb_dataset_synthetic_params *p, lb_dataset *out, lb_err *err);

/* Reads a file and parses it as `format` ("cnn", "jsonl", "sharegpt", or "auto": .jsonl
 * is JSONL; a JSON array whose first record has "conversations" is ShareGPT, one with
 * "input" is cnn_eval). */
lb_status lb_dataset_load(const char *path, const char *format, lb_dataset *out, lb_err *err);

/* Counts every prompt with tok where the dataset carries no token count (JSONL, ShareGPT)
 * or only an estimate (synthetic: one per word); cnn_eval.json's tok_input is kept. */
lb_status lb_dataset_count_tokens(lb_dataset *d, const lb_tokenizer *tok, lb_err *err);

void lb_dataset_free(lb_dataset *d);

#endif
