/* engine_opt.h: the options that `infer` and `serve --model` share to open the built-in
 * engine (engine/engine.h): where the weights come from (--model DIR or --random
 * PRESET), where it runs (--device, --gpu) and how it batches (--max-seqs, --step-tokens,
 * --block-size, --max-ctx, --kv-tokens, --gpu-memory-fraction), with one help text and
 * one way of opening what they name: the directory is read and checked before the GPU is
 * touched, its tokenizer loaded, its eos and bos ids kept. */
#ifndef LB_CLI_ENGINE_OPT_H
#define LB_CLI_ENGINE_OPT_H

#include <stdbool.h>
#include <stdint.h>

#include "cli/args.h"
#include "engine/engine.h"
#include "model/hf_model.h"
#include "model/tokenizer.h"

typedef struct {
    const char *model_dir; /* --model DIR */
    const char *random;    /* --random PRESET */
    const char *device;    /* gpu|cpu */
    int64_t gpu, max_seqs, step_tokens, block_size, max_ctx, kv_tokens, weight_seed;
    double mem_fraction;
} lb_engine_opt;

#define LB_ENGINE_OPT_DEFAULT                                                                      \
    { NULL, NULL, "gpu", 0, 256, 8192, 16, 0, 0, 1, 0.9 }

/* clang-format off */
#define LB_ENGINE_ARG_SPECS(o)                                                                   \
    {"--random", LB_ARG_STRING, &(o)->random, "PRESET",                                      \
     "random weights of a preset's shape (llama3.1-8b, llama3.2-1b, mistral-7b, ...), drawn "  \
     "where the engine runs: speed without downloading weights", 0, 0, NULL},                 \
    {"--device", LB_ARG_CHOICE, &(o)->device, NULL,                                          \
     "where the engine runs (default gpu; cpu: the fp32 reference, slow)", 0, 0, "gpu|cpu"},  \
    {"--gpu", LB_ARG_INT, &(o)->gpu, "N", "CUDA device (default 0)", 0, 1024, NULL},          \
    {"--max-seqs", LB_ARG_INT, &(o)->max_seqs, "N",                                          \
     "sequences in one engine step (default 256)", 1, 65536, NULL},                           \
    {"--step-tokens", LB_ARG_INT, &(o)->step_tokens, "N",                                    \
     "tokens in one engine step: decodes plus prefill chunks (default 8192)", 1, 1 << 20,    \
     NULL},                                                                                   \
    {"--block-size", LB_ARG_INT, &(o)->block_size, "N",                                      \
     "tokens per KV-cache block (default 16)", 1, 4096, NULL},                                \
    {"--max-ctx", LB_ARG_INT, &(o)->max_ctx, "N",                                            \
     "longest request, prompt + output (default: the model's, at most 8192)", 2, 1 << 24,   \
     NULL},                                                                                   \
    {"--kv-tokens", LB_ARG_INT, &(o)->kv_tokens, "N",                                        \
     "KV-cache capacity in tokens (default: the GPU memory left; CPU: max-seqs x max-ctx)",  \
     1, 1e12, NULL},                                                                          \
    {"--gpu-memory-fraction", LB_ARG_DOUBLE, &(o)->mem_fraction, "F",                        \
     "share of the GPU's memory the engine may fill, cache included (default 0.9)", 0.05, 1, \
     NULL},                                                                                   \
    {"--weight-seed", LB_ARG_INT, &(o)->weight_seed, "N",                                    \
     "seed of --random weights (default 1)", 0, 1e18, NULL}
/* clang-format on */

/* The first option of o besides --model that is set away from its default, spelt as on
 * the command line ("--device"), or NULL when none is: a command that runs without the
 * engine (serve --synthetic) refuses it rather than ignoring it. */
const char *lb_engine_opt_first_set(const lb_engine_opt *o);

/* What lb_engine_opt_open sets up; lb_engine_opt_close frees it. */
typedef struct {
    lb_hf_model hf;    /* --model: the directory */
    lb_engine *engine; /* owned */
    lb_tokenizer *tok; /* the model's, or --tokenizer's; NULL when neither */
    int32_t bos_id;    /* -1: none */
    int32_t eos_ids[LB_HF_MAX_EOS];
    int n_eos;
    char name[160]; /* "llama3.1-8b (random) on gpu" */
    char model_name[64];
} lb_engine_setup;

/* Opens what o names (exactly one of --model and --random, else LB_ERR_USAGE).
 * tokenizer_path, when not NULL, replaces the model's tokenizer (and is the only one
 * --random has; with it a Llama 3 preset gets its family's bos and eos ids,
 * engine.h's lb_engine_family_ids). Bad input is LB_ERR_USAGE with err naming it, checked before
 * anything is read: --gpu and --gpu-memory-fraction with --device cpu are refused, not ignored. */
lb_status lb_engine_opt_open(const lb_engine_opt *o, const char *tokenizer_path, lb_engine_setup *s,
                             lb_err *err);
void lb_engine_opt_close(lb_engine_setup *s);

#endif
