/* attention.cuh: causal scaled-dot-product attention with grouped-query heads, forward and
 * backward, that never materialises the T x T score matrix (C-callable).
 *
 * Layouts as model/ref.h: qkv [B,T,(NH+2*NKV)*HD] (q heads, k heads, v heads per
 * token), out [B,T,NH*HD]; query head h reads kv head h / (NH/NKV); scores scaled by
 * 1/sqrt(HD). Instead of the reference's probabilities the forward keeps the row
 * log-sum-exp lse [B,NH,T] (fp32, natural log), from which backward recomputes them.
 * Backward OVERWRITES dqkv (every element of it: q, k and v parts). With dbias (fp32
 * [(NH+2*NKV)*HD], may be NULL) it also ADDS dqkv's column sums into dbias, the gradient
 * of a bias added to qkv: the HD-64 paths sum inside their kernels (fp32 values before
 * rounding to dqkv's type), so dqkv is not read again; the scalar path runs a separate
 * reduction over dqkv.
 *
 * Four implementations behind one interface, one file each, chosen in attention.cu:
 * tensor cores through mma.sync m16n8k16 (attention_mma.cu: fp16/bf16, HD 64; a
 * flash-attention style forward per 128-query block with an online softmax in registers,
 * a backward per 64-key block), the backward on Hopper's warpgroup MMAs
 * (attention_wgmma.cu: the same case on a device running sm_90a code, LB_ATTN_AUTO),
 * CUDA-core fp32 tiles (attention_simt.cu: HD 64 otherwise, i.e. fp32 or LB_ATTN_SCALAR;
 * IEEE fp32 products of 64 x 64 tiles in shared memory, no TF32), and one thread a row
 * (attention_scalar.cu: any type, HD 8/16/32/128). The HD-64 backwards compute dK and dV
 * per key block and add dQ into an fp32 accumulator with atomics, so dQ's last bits can
 * vary between runs; all recompute the probabilities from lse. */
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
bool lb_attention_wgmma(void);

/* Device scratch backward needs: D = rowsum(dout * out) [B,NH,T] (fp32). */
size_t lb_attention_scratch_bytes(int B, int T, int NH, int HD);

lb_status lb_attention_forward(void *out, float *lse, const void *qkv, int B, int T, int NH,
                               int NKV, int HD, lb_gpu_dtype dt, lb_gpu_attn_impl impl,
                               cudaStream_t s, lb_err *err);
lb_status lb_attention_backward(void *dqkv, float *dbias, void *scratch, const void *dout,
                                const void *qkv, const void *out, const float *lse, int B, int T,
                                int NH, int NKV, int HD, lb_gpu_dtype dt, lb_gpu_attn_impl impl,
                                cudaStream_t s, lb_err *err);

#ifdef __cplusplus
}
#endif

#endif
