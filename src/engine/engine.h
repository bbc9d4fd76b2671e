/* engine.h: the inference engine: a Llama-family model generating for many requests at
 * once over a paged KV cache (continuous batching, chunked prefill, preemption; sched.h).
 *
 * One engine is driven by one thread: lb_engine_submit adds requests at any time,
 * lb_engine_step runs one scheduler step (one forward over the planned prefill chunks
 * and decodes, then sampling) and reports the tokens it produced. Two backends run the
 * same steps: the CPU reference (fp32, model/ref.h; for tests and machines without a
 * GPU) and the GPU (bf16 weights and cache, cuBLASLt products, the kernels of
 * kernels/paged.cuh, cuDNN's attention for prompts, decode steps as CUDA graphs: gpu.c),
 * chosen by lb_engine_params.device. A GPU engine sizes its cache from the device memory
 * left after the weights (gpu_memory_fraction of the total).
 *
 * Weights come from an lb_weights source: a Hugging Face directory (model/hf_model.h),
 * or random weights of a preset's shape (normal(0, 0.02) matrices, norm weights 1), made
 * on the device by the GPU backend so that no file or host pass is needed.
 *
 * Not here: tensor parallelism, speculative decoding, prefix caching, stop strings (the
 * caller sees every token and may cancel). */
#ifndef LB_ENGINE_ENGINE_H
#define LB_ENGINE_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "engine/sample.h"
#include "gpu/dtype.h"
#include "model/config.h"

typedef enum { LB_ENGINE_CPU = 0, LB_ENGINE_GPU } lb_engine_device;

/* Where the weights come from. read == NULL: random weights from seed. */
typedef struct {
    lb_model_config cfg;
    void *ctx;
    /* Copies layout tensor t (lb_model_param_layout of cfg) as dt into dst (host memory). */
    void (*read)(void *ctx, const lb_param_tensor *t, lb_gpu_dtype dt, void *dst);
    uint64_t seed; /* random weights */
} lb_weights;

typedef struct {
    lb_engine_device device;
    int32_t block_size;         /* tokens per KV block */
    int32_t max_seqs;           /* sequences in one step */
    int32_t step_tokens;        /* tokens computed in one step (chunked prefill budget) */
    int32_t max_ctx;            /* longest request (prompt + output); 0: the model's, at
                                   most 8192 */
    int64_t kv_tokens;          /* cache capacity in tokens; 0: from memory (GPU) or
                                   max_seqs * max_ctx (CPU) */
    double gpu_memory_fraction; /* of the device's memory the engine may hold in all */
    int device_index;           /* CUDA device */
} lb_engine_params;

lb_engine_params lb_engine_default_params(void);

typedef enum {
    LB_FINISH_NONE = 0, /* more tokens follow */
    LB_FINISH_LENGTH,   /* max_tokens reached */
    LB_FINISH_STOP,     /* an end-of-sequence token (included in the output) */
} lb_finish;

/* One token a step produced. */
typedef struct {
    int64_t id;     /* the request */
    int32_t token;  /* the generated token */
    lb_finish done; /* whether the request ended with this token */
} lb_engine_event;

#define LB_ENGINE_MAX_EOS 8 /* end-of-sequence ids a request may name */

typedef struct {
    lb_sampling sampling;
    int32_t max_tokens;     /* tokens to generate, >= 1 */
    bool ignore_eos;        /* generate max_tokens whatever comes */
    const int32_t *eos_ids; /* [n_eos] end-of-sequence ids (copied at submit) */
    int n_eos;              /* at most LB_ENGINE_MAX_EOS */
} lb_engine_request;

/* The bos and end-of-sequence ids of cfg's family where its vocabulary holds them, for
 * weights that name none (random weights of a preset's shape): a Llama model's are Llama 3's,
 * bos <|begin_of_text|> 128000, eos <|end_of_text|>, <|eom_id|> and <|eot_id|> (128001,
 * 128008, 128009, as Llama 3.1 Instruct's generation_config.json: <|eot_id|> ends a chat
 * turn). Otherwise (a smaller vocabulary: mistral-7b, the tiny presets; GPT-2, which the
 * engine does not run) *bos_id is -1 and *n_eos 0. eos_ids holds LB_ENGINE_MAX_EOS ids. */
void lb_engine_family_ids(const lb_model_config *cfg, int32_t *bos_id, int32_t *eos_ids,
                          int *n_eos);

/* What an engine is, for reports. */
typedef struct {
    const char *backend;  /* "cpu" or "gpu" */
    int64_t weight_bytes; /* the weights as the backend holds them */
    int64_t kv_tokens;    /* cache capacity */
    int64_t kv_bytes;     /* its memory */
    int32_t block_size, max_seqs, step_tokens, max_ctx;
    int64_t steps, preemptions, forward_tokens;
    /* where the steps' wall time went: steps carrying prompt tokens (prefill chunks, with
     * the decodes beside them) and steps of decodes only, each whole (forward, sampling);
     * prepare_ns is the part of both the backend spent preparing what a kind of step needs
     * the first time (attention plans, timing the decode products, capturing graphs) */
    int64_t prefill_steps, decode_steps;
    int64_t prefill_ns, decode_ns, prepare_ns;
} lb_engine_info;

typedef struct lb_engine lb_engine;

/* Loads the weights into the backend and sizes the cache. Not enough memory for the
 * weights: LB_ERR_NOMEM saying needed and free. Caller frees with lb_engine_close. */
lb_status lb_engine_open(lb_engine **out, const lb_engine_params *p, const lb_weights *w,
                         lb_err *err);
void lb_engine_close(lb_engine *e);
const lb_engine_info *lb_engine_get_info(const lb_engine *e);
const lb_model_config *lb_engine_config(const lb_engine *e);

/* Prepares, before any request, what the first steps of each kind would prepare while
 * they are timed (GPU: the decode graph of every batch bucket up to max_seqs, with its
 * products timed; the prefill attention plans of prompt chunks up to max_prompt tokens).
 * The engine must be idle; nothing of it changes but that preparation (info's prepare_ns
 * does not count it); its time is logged (info). The CPU backend has nothing to prepare. */
lb_status lb_engine_warmup(lb_engine *e, int32_t max_prompt, lb_err *err);

/* Queues a request (prompt[0..n) copied). *id names it in events. A request that could
 * never fit (context, whole cache) or names more than LB_ENGINE_MAX_EOS end-of-sequence ids
 * is LB_ERR_USAGE naming the limit. */
lb_status lb_engine_submit(lb_engine *e, const int32_t *prompt, int32_t n,
                           const lb_engine_request *r, int64_t *id, lb_err *err);
/* Ends a request early (its blocks are freed); unknown ids are ignored. */
void lb_engine_cancel(lb_engine *e, int64_t id);
/* Requests queued or running. */
int32_t lb_engine_pending(const lb_engine *e);
/* Runs one step. *events (owned by the engine, valid until the next call) gets the
 * tokens produced, *n_events their count (0 when a step only prefilled). */
lb_status lb_engine_step(lb_engine *e, const lb_engine_event **events, int32_t *n_events,
                         lb_err *err);
/* Free KV blocks and all blocks (every block is free again when nothing is pending). */
void lb_engine_kv_blocks(const lb_engine *e, int32_t *n_free, int32_t *n_total);

/* Logits of one forward over prompt[0..n) alone, at positions 0..n-1, of every position
 * (out [n, V] fp32, host): the check of a backend against model.h's CPU reference. The
 * engine must be idle; the blocks used are freed again. */
lb_status lb_engine_logits(lb_engine *e, const int32_t *prompt, int32_t n, float *out, lb_err *err);

/* A source reading the weights of an open engine (its backend's copy, converted): lets a
 * CPU engine run the very weights a GPU engine made. Valid while e is open. */
lb_weights lb_engine_weights(lb_engine *e);

#endif
