/* engine_impl.h: what the engine asks of a backend (engine.c drives, cpu.c and gpu.c
 * compute).
 *
 * A step is one batch of tokens from many sequences: token i is tokens[i] of sequence
 * seq_of[i] at position pos[i]; its keys and values go into the cache at that position
 * (block_table row seq_of[i], the blocks in position order) before attention reads the
 * positions 0..pos[i]. Logits are wanted for n_out of the tokens (the last of each
 * sequence that samples): the backend writes each one's argmax, and the whole row of
 * logits (fp32, host) where out_full says so (for sampling that is not greedy). */
#ifndef LB_ENGINE_ENGINE_IMPL_H
#define LB_ENGINE_ENGINE_IMPL_H

#include <stdint.h>

#include "core/status.h"
#include "engine/engine.h"

typedef struct {
    int32_t n_tokens;
    const int32_t *tokens, *pos, *seq_of; /* [n_tokens] */
    int32_t n_seqs;
    const int32_t *block_table; /* [n_seqs, max_blocks] */
    int32_t max_blocks;
    int32_t n_out;
    const int32_t *out_token; /* [n_out] indices into the tokens */
    const uint8_t *out_full;  /* [n_out] 1: write the row to logits */
} lb_engine_batch;

typedef struct lb_backend lb_backend;
struct lb_backend {
    const char *name;
    int64_t weight_bytes, kv_bytes;
    int32_t n_blocks;   /* the cache's blocks (the backend sized them) */
    int64_t prepare_ns; /* spent in forwards preparing a kind of step the first time */
    /* One forward: argmax [n_out]; logits [n_out, V] rows written where out_full. */
    lb_status (*forward)(lb_backend *b, const lb_engine_batch *batch, int32_t *argmax,
                         float *logits, lb_err *err);
    /* Prepares every kind of step up to max_prompt prompt tokens (engine.h's
     * lb_engine_warmup); NULL: nothing to prepare. */
    lb_status (*warmup)(lb_backend *b, int32_t max_prompt, lb_err *err);
    /* Copies layout tensor t of the backend's weights into dst as dt. */
    void (*read)(lb_backend *b, const lb_param_tensor *t, lb_gpu_dtype dt, void *dst);
    void (*close)(lb_backend *b);
};

/* max_tokens: the most tokens one forward carries; max_seqs: sequences; p->max_ctx is
 * resolved, and so is p->kv_tokens for the CPU (its blocks fit an int32_t). */
lb_status lb_engine_cpu_open(lb_backend **out, const lb_weights *w, const lb_engine_params *p,
                             lb_err *err);
/* LB_ERR_UNSUPPORTED in a build without CUDA or on a machine without a GPU. */
lb_status lb_engine_gpu_open(lb_backend **out, const lb_weights *w, const lb_engine_params *p,
                             lb_err *err);

/* Random weights of the layout tensor t, as the CPU makes them (normal(0, 0.02) for
 * matrices, 1 for norm weights; a generator per tensor seeded from seed and the tensor's
 * place), in fp32. */
void lb_engine_random_tensor(const lb_model_config *cfg, const lb_param_tensor *t, uint64_t seed,
                             float *dst);

#endif
