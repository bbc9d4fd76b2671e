/* attention.cuh: causal scaled-dot-product attention with grouped-query heads, forward and
 * backward, that never materialises the T x T score matrix (C-callable).
 *
 * Layouts as model/ref_ops.h: qkv [B,T,(NH+2*NKV)*HD] (q heads, k heads, v heads per
 * token), out [B,T,NH*HD]; query head h reads kv head h / (NH/NKV); scores scaled by
 * 1/sqrt(HD). Instead of the reference's probabilities the forward keeps the row
 * log-sum-exp lse [B,NH,T] (fp32, natural log), from which backward recomputes them.
 * Backward OVERWRITES dqkv (every element of it: q, k and v parts). With dbias (fp32
 * [(NH+2*NKV)*HD], may be NULL) it also ADDS dqkv's column sums into dbias, the gradient
 * of a bias added to qkv: the HD-64 paths sum inside their kernels (fp32 values before
 * rounding to dqkv's type), so dqkv is not read again; the scalar path runs a separate
 * reduction over dqkv.
 *
 * Three implementations behind one interface. The tensor-core one (fp16/bf16, HD 64) is a
 * flash-attention style kernel with mma.sync m16n8k16 and fp32 accumulation: forward per
 * 128-query block with an online softmax in registers; backward as one kernel per 64-key
 * block (dK, dV over all query heads of the group, dQ added into an fp32 accumulator
 * with atomics) and a pass that rounds dQ into dqkv, both recomputing the probabilities
 * from lse. The CUDA-core tiled one (HD 64 otherwise: fp32, or LB_ATTN_SCALAR) has the same
 * structure with fp32 (IEEE, no TF32) products of 64 x 64 tiles in shared memory, a 4 x 4
 * register block a thread, as an SGEMM. The scalar one (any type, HD 8/16/32/128) is one
 * thread per query row (forward, dQ) or per key row (dK, dV). */
#ifndef LB_KERNELS_ATTENTION_CUH
#define LB_KERNELS_ATTENTION_CUH

#include <cuda_runtime.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#include <stdbool.h>

#include "core/status.h"
#include "gpu/dtype.h"

typedef enum {
    LB_ATTN_AUTO = 0, /* tensor cores where supported (warpgroup MMAs on sm_90), else CUDA cores */
    LB_ATTN_SCALAR,   /* always CUDA cores: tiled at HD 64, one row a thread else (tests) */
    LB_ATTN_MMA_SYNC, /* tensor cores through mma.sync only, as before sm_90 (tests) */
} lb_gpu_attn_impl;

/* Whether LB_ATTN_AUTO runs the 16-bit HD-64 backward on warpgroup MMAs on the current
 * device: this binary carries sm_90a code and the device runs it. */
bool lb_gpu_attention_wgmma(void);

/* Device scratch backward needs: D = rowsum(dout * out) [B,NH,T] (fp32). */
size_t lb_gpu_attention_scratch_bytes(int B, int T, int NH, int HD);

lb_status lb_gpu_attention_forward(void *out, float *lse, const void *qkv, int B, int T, int NH,
                                   int NKV, int HD, lb_gpu_dtype dt, lb_gpu_attn_impl impl,
                                   cudaStream_t s, lb_err *err);
lb_status lb_gpu_attention_backward(void *dqkv, float *dbias, void *scratch, const void *dout,
                                    const void *qkv, const void *out, const float *lse, int B,
                                    int T, int NH, int NKV, int HD, lb_gpu_dtype dt,
                                    lb_gpu_attn_impl impl, cudaStream_t s, lb_err *err);

#ifdef __cplusplus
}
#endif

#endif
