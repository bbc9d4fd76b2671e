/* tokenizer_opt.h: the tokenizer options that `load` and `tokenize` share: --tokenizer FILE
 * (a tiktoken ranks file or a Hugging Face tokenizer.json), --tokenizer-pattern and
 * --tokenizer-special, with one help text
 * and one way of opening what they name. */
#ifndef LB_CLI_TOKENIZER_OPT_H
#define LB_CLI_TOKENIZER_OPT_H

#include "cli/args.h"
#include "model/tokenizer.h"

typedef struct {
    const char *path;    /* --tokenizer FILE, NULL when not given */
    const char *pattern; /* --tokenizer-pattern: auto|llama3|gpt2 */
    const char *special; /* --tokenizer-special: auto|none|llama3|gpt2 */
} lb_tokenizer_opt;

#define LB_TOKENIZER_OPT_DEFAULT                                                                   \
    { NULL, "auto", "auto" }

/* Three lb_arg_spec rows filling *opt (an lb_tokenizer_opt). */
/* clang-format off */
#define LB_TOKENIZER_ARG_SPECS(opt)                                                          \
    {"--tokenizer", LB_ARG_STRING, &(opt)->path, "FILE",                                     \
     "count tokens with this BPE vocabulary: tiktoken's ranks format (Llama 3's "            \
     "tokenizer.model, *.tiktoken) or a Hugging Face tokenizer.json (byte-level BPE merged " \
     "in id order: GPT-2, Llama 3)", 0, 0, NULL},                                            \
    {"--tokenizer-pattern", LB_ARG_CHOICE, &(opt)->pattern, NULL,                            \
     "ranks file: pre-split expression (default auto: gpt2 when a token holds four digits " \
     "in a row, else llama3; a tokenizer.json names its own)", 0, 0, "auto|llama3|gpt2"},    \
    {"--tokenizer-special", LB_ARG_CHOICE, &(opt)->special, NULL,                            \
     "ranks file: special tokens (default auto: the pattern's family when the ranks end "    \
     "where it starts them, 128000 or 50256; a tokenizer.json's are its added tokens)", 0, 0, \
     "auto|none|llama3|gpt2"}
/* clang-format on */

/* Loads what opt names; opt->path must be set. */
lb_status lb_tokenizer_opt_open(const lb_tokenizer_opt *opt, lb_tokenizer **out, lb_err *err);

/* One line for people: "FILE: 128000 ranks + 256 special (llama3), pattern llama3 (PCRE2
 * JIT)". */
void lb_tokenizer_opt_describe(const lb_tokenizer_opt *opt, const lb_tokenizer *tok, char *buf,
                               size_t cap);

#endif
