/* model_gpu.h: the whole transformer of model/model.h on one CUDA device: forward,
 * backward and the AdamW step, for fp32, fp16 (dynamic loss scaling) and bf16.
 *
 * Everything lives in one device arena (gpu/arena.h) laid out once for a fixed (B, T):
 * fp32 master weights, the fp16/bf16 working copy, fp32 gradients and AdamW moments (all in
 * the parameter layout of model/config.h), the activations every backward step needs
 * (per-layer tensors stacked [L, ...]) and one layer's worth of activation gradients.
 * With recompute, the norm outputs and the MLP activation are kept for one layer only
 * and rebuilt from the saved residuals and statistics during backward. Matrix products go
 * through cuBLASLt (gpu/blas/matmul.h) with the residual add fused in (beta = 1); the logits are
 * kept in the activation type, with the vocabulary padded to a multiple of 64 in the row
 * stride, and the fused cross-entropy overwrites them with their gradient. In fp32 with
 * the 3xTF32 mode the arena also holds the split scratch, sized for the step's largest
 * product (the output head's, over the logits gradient).
 * A step is enqueued on the model's stream without any host synchronisation: the loss of
 * each step goes to a device slot the caller reads when it wants. Not here: data loading,
 * timing, multi-GPU. Only in CUDA builds (it needs the CUDA headers).
 *
 * Implemented in model_gpu.c (layout, forward, backward, optimizer), model_gpu_tune.c (the
 * choices timed on the first step: whose attention kernels, whose GELU product) and
 * model_gpu_graph.c (a training step as a CUDA graph), sharing model_gpu_impl.h.
 *
 * Fine-tuning (params.lora.rank > 0): the base is frozen and kept in the working type only
 * (no fp32 master, gradients or moments for it), its projections in NF4 with
 * params.lora.quant, dequantised just before each product that reads them; backward runs
 * no weight-gradient product of the base; the adapters (model/lora_gpu.h) add their
 * products at each chosen projection and AdamW updates them alone. Setting the base up
 * (init_weights, load_params) borrows one fp32 buffer outside the arena, the size of the
 * largest layer matrix, and frees it before returning. */
#ifndef LB_MODEL_MODEL_GPU_H
#define LB_MODEL_MODEL_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/precision.h"
#include "core/status.h"
#include "gpu/arena.h"
#include "gpu/blas/matmul.h"
#include "kernels/adamw.cuh"
#include "model/attn_choice.h"
#include "model/config.h"
#include "model/lora.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Who runs GPT-2's MLP input product with its GELU in 16-bit modes. */
typedef enum {
    LB_GELU_PRODUCT_AUTO = 0, /* the faster of the two, timed on the first step */
    LB_GELU_PRODUCT_CUBLASLT, /* cuBLASLt's GELU epilogue */
    LB_GELU_PRODUCT_CUDNN,    /* cuDNN's runtime-fused product where it runs (tests) */
} lb_gelu_product;

typedef struct {
    int B, T; /* batch and sequence the arena is laid out for */
    lb_precision precision;
    bool recompute;              /* rebuild norm outputs and MLP activations in backward */
    lb_blas_fp32_mode fp32_mode; /* how fp32 products run (gpu/blas/matmul.h); ignored in 16-bit */
    bool gemm_heuristic_only; /* cuBLASLt's first heuristic algorithm, no timing (gpu/blas/matmul.h)
                               */
    lb_gpu_attn_choice attention; /* whose attention kernels (model/attn_choice.h) */
    bool attn_scalar;             /* always the CUDA-core attention kernels (tests) */
    bool no_fused_gelu;           /* GELU as separate kernels, not cuBLASLt epilogues (tests) */
    lb_gelu_product gelu_product; /* GPT-2's fused GELU product */
    int max_loss_slots;           /* device slots for per-step mean losses */
    lb_lora_config lora;          /* rank 0: every parameter trains; else LoRA adapters on a
                                   * frozen base, its projections in NF4 with lora.quant
                                   * (model/lora_gpu.h) */
    bool no_graph;                /* every step kernel by kernel, never as a CUDA graph
                                   * (tests) */
    bool external_optimizer;      /* no fp32 master, moments or optimizer pass: the caller
                                   * keeps them (a ZeRO shard) and writes the working copy */
    bool external_grads;          /* no gradient array: every unit's gradient slots are where
                                   * lb_model_gpu_bind_grads points them */
    bool external_params;         /* no working copy either (with both the above): every
                                   * unit's parameters are where lb_model_gpu_bind_params points
                                   * them, bound by the parameter hook before each use */
    /* With adapters the three apply to the adapters (what trains), never to the frozen base,
     * which stays the model's: see "Data parallelism" below. */
} lb_model_gpu_params;

typedef struct lb_model_gpu lb_model_gpu;

/* Sizes the arena, allocates it on the current device and creates the stream and the
 * cuBLASLt handle; in fp16/bf16 (unless p->attention is BUILTIN) also cuDNN's attention
 * plans, whose absence is an error only when p->attention is CUDNN. Out of memory:
 * LB_ERR_NOMEM naming needed and free bytes and suggesting a smaller --batch or
 * --recompute. Weights are uninitialised. */
lb_status lb_model_gpu_init(lb_model_gpu **out, const lb_model_config *cfg,
                            const lb_model_gpu_params *p, lb_err *err);
/* What lb_model_gpu_init would allocate, without allocating or touching the device (cuDNN's
 * workspace left out): state_bytes for parameters, gradients and optimizer state (the arena's
 * "param." and "opt." pieces), other_bytes for the rest (activations, their gradients,
 * workspace). Not for adapters on a frozen base (LB_ERR_USAGE). */
lb_status lb_model_gpu_plan_bytes(const lb_model_config *cfg, const lb_model_gpu_params *p,
                                  double *state_bytes, double *other_bytes, lb_err *err);
void lb_model_gpu_free(lb_model_gpu *m);

/* GPT-2 style initialisation on the device (normal(0, 0.02), residual projections
 * 0.02/sqrt(2L), biases 0, norm weights 1), the same rule as the CPU reference, drawn by a
 * counter-based generator: same seed, same weights, but not the CPU's numbers. With
 * external_optimizer only the working copy is drawn (through a device buffer of the largest
 * layer matrix, outside the arena, freed before returning). */
lb_status lb_model_gpu_init_weights(lb_model_gpu *m, uint64_t seed, lb_err *err);
/* A source of fp32 parameter values: read writes tensor t's t->numel values (layout of
 * model/config.h) into dst, host memory. */
typedef struct {
    void (*read)(void *ctx, const lb_param_tensor *t, float *dst);
    void *ctx;
} lb_model_gpu_source;
/* Every parameter from src, tensor by tensor through one host buffer as large as the
 * largest tensor (master and working copy; with adapters the frozen base, its projections
 * in NF4 when asked; with external_optimizer the working copy alone, none with
 * external_params: the caller's shard holds the rest); resets AdamW. */
lb_status lb_model_gpu_load_params(lb_model_gpu *m, const lb_model_gpu_source *src, lb_err *err);
/* The same from n_params fp32 host parameters in the layout. */
lb_status lb_model_gpu_set_params(lb_model_gpu *m, const float *host, lb_err *err);
/* With adapters: A and B from the host (layout of model/lora.h; fp32), or drawn from seed
 * by lb_lora_init's rule; AdamW moments reset. Their fp32 weights (with external_optimizer
 * the working copy widened) or gradients out (synchronises). LB_ERR_USAGE on a model
 * without adapters, or for what is external. */
lb_status lb_model_gpu_set_lora(lb_model_gpu *m, const float *host, lb_err *err);
lb_status lb_model_gpu_init_lora(lb_model_gpu *m, uint64_t seed, lb_err *err);
lb_status lb_model_gpu_get_lora(lb_model_gpu *m, float *host, bool grads, lb_err *err);
/* With adapters, how many adapter parameters there are; without, 0. */
int64_t lb_model_gpu_lora_n_params(const lb_model_gpu *m);
/* Device bytes the arena holds for the frozen base, the adapters (weights, working copy,
 * gradients), their optimizer state and the activations (saved ones, one layer's
 * gradients, the adapters' intermediates). */
typedef struct {
    double base, adapters, optimizer, activations;
} lb_model_gpu_memory;
lb_model_gpu_memory lb_model_gpu_memory_parts(const lb_model_gpu *m);
/* Copies the fp32 master parameters or gradients out (synchronises); adapters on a frozen
 * base: LB_ERR_USAGE. With external_optimizer the parameters are the working copy widened to
 * fp32; with external_grads the gradients are LB_ERR_USAGE. */
lb_status lb_model_gpu_get_params(lb_model_gpu *m, float *host, lb_err *err);
lb_status lb_model_gpu_get_grads(lb_model_gpu *m, float *host, lb_err *err);

/* Enqueues forward + backward of one batch (inputs/targets: B*T host token ids, copied
 * through pinned memory) and writes the mean loss to slot `slot`. Gradients are zeroed
 * first. Under fp16 they carry the loss scale (loss_scale of lb_model_gpu_read_optstate). */
lb_status lb_model_gpu_forward_backward(lb_model_gpu *m, const int32_t *inputs,
                                        const int32_t *targets, int slot, lb_err *err);
/* One training step: the batch copied in as above, then forward + backward (mean loss to
 * slot `slot`) and clip + AdamW + loss-scale update with p. The first call runs kernel by
 * kernel (it prepares and times every cuBLASLt product, waiting on the device); the
 * second captures the step's work as a CUDA graph, which it and every later call launch
 * at once (recaptured when p changes). Where capture is refused, every step runs kernel
 * by kernel, with the same results. */
lb_status lb_model_gpu_train_step(lb_model_gpu *m, const int32_t *inputs, const int32_t *targets,
                                  int slot, const lb_gpu_adamw_params *p, lb_err *err);
/* One of the n_micro micro-batches that make one step (gradient accumulation, and every
 * step whose optimizer or gradients live outside the model): the batch copied in as above,
 * forward + backward (mean loss to slot `slot`) with the loss gradient divided by n_micro,
 * so that the micro-batches' gradients summed are the gradient of the step's mean loss.
 * Micro-batch 0 clears the gradients first, later ones add to them (matrix gradients add in
 * their 16-bit working type, as their products write them); with external_grads nothing is
 * cleared and every micro-batch writes afresh into the bound slots (the caller accumulates).
 * After the last one, the optimizer runs with p unless p is NULL. Kernel by kernel, never
 * a graph. LB_ERR_USAGE for a micro index outside 0..n_micro-1, or p with
 * external_optimizer. */
lb_status lb_model_gpu_train_micro(lb_model_gpu *m, const int32_t *inputs, const int32_t *targets,
                                   int slot, int micro, int n_micro, const lb_gpu_adamw_params *p,
                                   lb_err *err);
/* The parts of lb_model_gpu_train_micro for a caller that captures a step as a CUDA graph
 * (train/dp_cuda.h): lb_model_gpu_upload copies the batch in (through the pinned buffer the
 * copy before does not use, waiting for it while in flight; slot is checked); then
 * lb_model_gpu_micro enqueues the rest, the mean loss written to a scratch slot past the
 * last, and waits on nothing but on the first step (which prepares and times the products);
 * lb_model_gpu_keep_loss copies that loss into slot `slot` on the model's stream. */
lb_status lb_model_gpu_upload(lb_model_gpu *m, const int32_t *inputs, const int32_t *targets,
                              int slot, lb_err *err);
lb_status lb_model_gpu_micro(lb_model_gpu *m, int micro, int n_micro, const lb_gpu_adamw_params *p,
                             lb_err *err);
lb_status lb_model_gpu_keep_loss(lb_model_gpu *m, int slot, lb_err *err);
/* Whether train steps are launched as a CUDA graph now. */
bool lb_model_gpu_uses_graph(const lb_model_gpu *m);
/* Whose attention kernels run forward (backward = false) or backward: "cudnn", "builtin",
 * or "untimed" while AUTO has not yet timed that direction (before the first step). */
const char *lb_model_gpu_attention(const lb_model_gpu *m, bool backward);
/* Who runs GPT-2's MLP input product with its GELU in 16-bit modes: "cudnn", "cublaslt",
 * "untimed" before the first step, or "unfused" (Llama, fp32: the activation is a kernel of
 * its own). */
const char *lb_model_gpu_gelu_product(const lb_model_gpu *m);

/* Data parallelism. What trains is every parameter, or with adapters the adapters alone
 * (model/lora.h's layout, layer l's adapters in unit 1 + l, nothing in units 0 and L + 1,
 * all gradients fp32): lb_model_gpu_grads, _grad_type, _bind_grads, _bind_params and
 * _working speak of that array. Backward calls the hook on the host after enqueuing the last kernel
 * that writes a unit's gradients (units of train/zero.h: L + 1 the final norm and head
 * first, then 1 + l for layer l downwards, 0 the embeddings last), so it can enqueue that
 * unit's collectives behind them; a failure it returns ends the step. NULL: none. */
typedef lb_status (*lb_model_gpu_grad_hook)(void *ctx, int unit, lb_err *err);
void lb_model_gpu_set_grad_hook(lb_model_gpu *m, lb_model_gpu_grad_hook fn, void *ctx);
/* With on, backward leaves the embedding's weight gradients to its grad hook: it skips the
 * embedding backward, so wte's and wpe's slots hold only what it writes there otherwise (a
 * tied head's gradient; nothing), and reports unit 0 done with the rows that make them in
 * place: lb_model_gpu_embed_rows gives the gradient of the embedding's output (B x T x C
 * of lb_model_gpu_dtype, device memory the next backward writes again) and *ids the
 * micro-batch's token ids (B x T int32, on the device until the next upload). */
void lb_model_gpu_defer_embed(lb_model_gpu *m, bool on);
const void *lb_model_gpu_embed_rows(const lb_model_gpu *m, const int32_t **ids, int *B, int *T);
/* The gradients: one device array in the parameter layout, every element of
 * lb_model_gpu_grad_type (the working type; fp32 for adapters), NULL with external_grads. */
void *lb_model_gpu_grads(lb_model_gpu *m);
lb_gpu_dtype lb_model_gpu_grad_type(const lb_model_gpu *m);
/* Points unit u's gradient slots (train/zero.h's units; the unit's part of the layout, from
 * the unit's first element, in lb_model_gpu_grad_type) at `slots`, device memory the caller
 * owns; NULL: back to the model's own array. Backward writes a unit's slots only while it
 * is in that unit (its 1-D tensors' once at its end, from fp32 sums the model keeps) and,
 * with a tied head, unit 0's wte slots before anything else: a binding must hold from
 * then until the grad hook reports the unit done. Takes effect for the kernels enqueued
 * after the call. */
void lb_model_gpu_bind_grads(lb_model_gpu *m, int unit, void *slots);

/* Points unit u's working copy (the unit's part of the layout from its first element, in
 * lb_model_gpu_dtype) at `working`, device memory the caller owns (external_params). The
 * output head's products read V_pad = V rounded up to 64 rows: the rows after the head
 * must be readable and finite (their logits are ignored). Takes effect for the kernels
 * enqueued after the call. */
void lb_model_gpu_bind_params(lb_model_gpu *m, int unit, void *working);
/* Called on the host before the model enqueues kernels that read unit u's parameters, in
 * forward (backward false) and backward, so the hook can bind them (and make the model's
 * stream wait for them). Per micro-batch the units come in this order: forward 0, 1 ... L,
 * L + 1 and, with a tied head, 0 again (the head); backward the head's unit (tied: 0, then
 * L + 1; else L + 1), then L ... 1 (the embedding backward reads no parameters). Kernels of
 * a use are enqueued before the next call. A failure it returns ends the step. NULL: none. */
typedef lb_status (*lb_model_gpu_param_hook)(void *ctx, int unit, bool backward, lb_err *err);
void lb_model_gpu_set_param_hook(lb_model_gpu *m, lb_model_gpu_param_hook fn, void *ctx);

/* The working copy the products read: n_params values of lb_model_gpu_dtype in the
 * parameter layout, device memory the model owns (NULL with external_params). A caller that writes
 * it (external_optimizer) calls lb_model_gpu_working_written after, on the model's stream, so the
 * model refreshes what it derives from it (the padded output head). */
void *lb_model_gpu_working(lb_model_gpu *m);
lb_gpu_dtype lb_model_gpu_dtype(const lb_model_gpu *m);
lb_status lb_model_gpu_working_written(lb_model_gpu *m, lb_err *err);
/* Whether the output head's working copy lives apart (the padded copy its products read):
 * then true and *out set as lb_adamw's apart, so an optimizer that writes the whole working
 * copy writes that head too and needs no lb_model_gpu_working_written; else false. */
bool lb_model_gpu_head_apart(lb_model_gpu *m, lb_gpu_lp_apart *out);
/* The initial fp32 values lb_model_gpu_init_weights gives elements [lo, hi) of the flat
 * parameter array, written to device memory dst (the caller's), on the model's stream: a
 * shard of the master weights drawn without the whole. */
lb_status lb_model_gpu_draw_params(lb_model_gpu *m, float *dst, int64_t lo, int64_t hi,
                                   uint64_t seed, lb_err *err);
/* The optimizer state on the device (loss scale, norm accumulator, counters), which an
 * external optimizer updates with kernels/adamw.cuh. */
lb_gpu_optstate *lb_model_gpu_optstate(lb_model_gpu *m);

/* Waits for the stream and copies n slots of mean losses out. */
lb_status lb_model_gpu_read_losses(lb_model_gpu *m, float *host, int n, lb_err *err);
/* Waits for the stream and copies the optimizer state out. */
lb_status lb_model_gpu_read_optstate(lb_model_gpu *m, lb_gpu_optstate *out, lb_err *err);
lb_status lb_model_gpu_sync(lb_model_gpu *m, lb_err *err);

/* The stream (a cudaStream_t) steps run on, for events. */
void *lb_model_gpu_stream(lb_model_gpu *m);
const lb_gpu_arena *lb_model_gpu_arena(const lb_model_gpu *m);
int64_t lb_model_gpu_n_params(const lb_model_gpu *m);

#ifdef __cplusplus
}
#endif

#endif
