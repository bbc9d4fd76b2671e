/* lora_gpu.h: LoRA adapters and the frozen (optionally NF4) base on one CUDA device, the
 * part of fine-tuning that the GPU transformer (model_gpu.c) calls at its projections.
 *
 * What the device holds, carved from the model's arena by lb_lora_gpu_carve (names in
 * brackets, so memory by part is a prefix sum of lb_gpu_arena): the adapters' fp32 master
 * weights and gradients [lora.], their working copy in the compute type, the AdamW moments
 * [opt.lora_], the rank-r intermediates u = x A^T of every layer and target and one
 * layer's du [act.lora_u, grad.lora_du]; with NF4, every projection's codes, 8-bit absmax
 * values, scales and mean [param.nf4] and one scratch for the widest fused base tensor
 * dequantised [scratch.nf4]. The frozen base's other tensors stay in the model's working
 * copy; lb_lora_gpu_base_index maps the parameter layout onto that copy when the
 * projections live in NF4 (compact, no room for them).
 *
 * Products (gpu/blas/matmul.h) for the chosen targets 1..n of the tensor at hand (q, k, v
 * of qkv; gate, up of the MLP input; one target elsewhere), x [BT, in] the base product's
 * input, y its output (rows ldy wide; target i's columns start at its row0). The targets'
 * A are stacked [A_1; ..; A_n] (model/lora.h's layout), so what reads x or writes dx is
 * one product for the whole tensor, not one a target:
 *   forward:  [u_1 .. u_n] = x [A_1; ..; A_n]^T;  per i: y_i = res_i + s u_i B_i^T
 *   backward: per i: dB_i = s dy_i^T u_i (fp32), du_i = s dy_i B_i;
 *             [dA_1; ..; dA_n] = du^T x (fp32);  dx = du [A_1; ..; A_n]
 * and then the base product adds into y or dx.
 * The base gets no weight-gradient product. Not here: the base products themselves (the
 * model's), data parallelism (train/dp_cuda.h). Only in CUDA builds. */
#ifndef LB_MODEL_LORA_GPU_H
#define LB_MODEL_LORA_GPU_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"
#include "gpu/arena.h"
#include "gpu/blas/matmul.h"
#include "gpu/dtype.h"
#include "kernels/adamw.cuh"
#include "model/config.h"
#include "model/lora.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lb_lora_gpu lb_lora_gpu;

/* What a ZeRO stage keeps out of the adapters' pieces (train/dp_cuda.h): the caller binds
 * each layer's gradient slots or working copy (lb_lora_gpu_bind_grads, _bind_work). */
typedef struct {
    bool external_optimizer; /* no fp32 master, moments or optimizer pass (a ZeRO shard) */
    bool external_grads;     /* no gradient array */
    bool external_work;      /* no working copy */
} lb_lora_gpu_external;

/* Host-side state for adapters of config lc on model cfg, for BT tokens a step in working
 * type dt, keeping out what ext says. Nothing on the device until lb_lora_gpu_carve. */
lb_status lb_lora_gpu_new(lb_lora_gpu **out, const lb_model_config *cfg, const lb_lora_config *lc,
                          int64_t BT, lb_gpu_dtype dt, const lb_lora_gpu_external *ext,
                          lb_err *err);
void lb_lora_gpu_free(lb_lora_gpu *l);
/* Carves the device pieces above from a (sizing or real) arena. */
lb_status lb_lora_gpu_carve(lb_lora_gpu *l, lb_gpu_arena *a, lb_err *err);
/* After carving on the real arena: the optimizer's segment table to the device, ordered on
 * `stream` (a cudaStream_t) and finished on return. */
lb_status lb_lora_gpu_upload_tables(lb_lora_gpu *l, void *stream, lb_err *err);

/* Elements of the model's working copy of the frozen base: every parameter, or without
 * the projections when they live in NF4. */
int64_t lb_lora_gpu_base_elems(const lb_lora_gpu *l);
/* Index in that working copy of parameter-layout offset off (not inside a projection
 * stored in NF4). */
int64_t lb_lora_gpu_base_index(const lb_lora_gpu *l, int64_t off);
/* Whether the base's projections live in NF4. */
bool lb_lora_gpu_nf4(const lb_lora_gpu *l);

/* The frozen base from fp32 device values of the parameter tensor at layout offset off
 * (numel elements, src may be overwritten): converted into the working copy `base`, or
 * for a projection matrix under NF4 quantised (a fused tensor's row blocks each on their
 * own). */
lb_status lb_lora_gpu_base_set(lb_lora_gpu *l, void *base, int64_t off, int64_t numel,
                               const float *src, void *stream, lb_err *err);
/* The layer matrix at layer-relative offset rel of layer `layer` as its product reads it:
 * in the working copy (base), or dequantised into the NF4 scratch. */
lb_status lb_lora_gpu_base_weight(lb_lora_gpu *l, void *base, int layer, int64_t rel,
                                  const void **w, void *stream, lb_err *err);

/* Adapters from host fp32 values in the layout of model/lora.h (master and working copy);
 * the AdamW moments are the caller's to reset. LB_ERR_USAGE with an external optimizer. */
lb_status lb_lora_gpu_set(lb_lora_gpu *l, const float *host, void *stream, lb_err *err);
/* Adapters (A uniform in +-1/sqrt(in) from seed, B zero: lb_lora_init's rule and numbers). */
lb_status lb_lora_gpu_init_weights(lb_lora_gpu *l, uint64_t seed, void *stream, lb_err *err);
/* Host copies of the fp32 adapter weights or gradients (caller synchronises the stream);
 * with an external optimizer the weights are the working copy widened to fp32;
 * LB_ERR_USAGE where what is asked for is external. */
lb_status lb_lora_gpu_get(lb_lora_gpu *l, float *host, bool grads, void *stream, lb_err *err);
lb_status lb_lora_gpu_reset_moments(lb_lora_gpu *l, void *stream, lb_err *err);

/* The adapters on the base tensor `which` of layer `layer`; see above. x rows ldx apart.
 * Runs BEFORE the base product, which then adds into y (beta 1): with adapters on the
 * tensor, y = *res + the adapters' outputs in every column (*res, rows ldy like y, is the
 * residual the base product would have added, NULL for none: zeros) and *res becomes y;
 * without, nothing happens. The adapters' output is written once instead of read and
 * written again after the base product. */
lb_status lb_lora_gpu_forward(lb_lora_gpu *l, lb_blas *blas, int layer, lb_lora_tensor which,
                              void *y, int64_t ldy, const void **res, const void *x, int64_t ldx,
                              void *stream, lb_err *err);
/* dy rows ldy apart; dx (rows `in` wide) is written with du A, before the base's
 * input-gradient product, which then adds into it (*wrote_dx true); NULL: no input
 * gradient. The adapters' gradients are written, or with accumulate added to what their
 * slots hold (the micro-batches of one step). */
lb_status lb_lora_gpu_backward(lb_lora_gpu *l, lb_blas *blas, int layer, lb_lora_tensor which,
                               void *dx, bool *wrote_dx, const void *dy, int64_t ldy, const void *x,
                               int64_t ldx, bool accumulate, void *stream, lb_err *err);
/* Clip by the adapters' global norm and one AdamW step over them; st is the model's
 * optimizer state (its loss scale divides the gradients in fp16). LB_ERR_USAGE with an
 * external optimizer. */
lb_status lb_lora_gpu_optimizer(lb_lora_gpu *l, const lb_gpu_adamw_params *p, lb_gpu_optstate *st,
                                void *stream, lb_err *err);
int64_t lb_lora_gpu_n_params(const lb_lora_gpu *l);
/* The adapters' fp32 gradients on the device, layer-major: layer l's layer_numel elements
 * start at l * layer_numel (model/lora.h's layout); NULL when external. */
float *lb_lora_gpu_grads(lb_lora_gpu *l, int64_t *layer_numel);
/* Their working copy in the working type, the same layout; NULL when external. */
void *lb_lora_gpu_work(lb_lora_gpu *l);
/* Points layer `layer`'s gradient slots (its layer_numel fp32 elements) or working copy at
 * device memory the caller owns; NULL: back to the adapters' own arrays. Takes effect for
 * the products enqueued after the call. */
void lb_lora_gpu_bind_grads(lb_lora_gpu *l, int layer, float *slots);
void lb_lora_gpu_bind_work(lb_lora_gpu *l, int layer, void *work);

#ifdef __cplusplus
}
#endif

#endif
