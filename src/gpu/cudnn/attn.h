/* attn.h: causal attention through cuDNN's fused flash-attention engines.
 *
 * The same operation, layouts and results as kernels/attention.cuh (qkv [B,T,(NH+2*NKV)*HD],
 * out [B,T,NH*HD], lse [B,NH,T] fp32 natural-log log-sum-exp of the scaled scores, dqkv
 * overwritten whole), for fp16 and bf16, run by cuDNN 9's fused attention kernels. The
 * operation graphs (scores, scale, causal mask, softmax with its statistics, the second
 * product; and the backward's) are built with cuDNN's backend graph API over strided views
 * of the interleaved qkv buffer, so nothing is copied. llmbench never links cuDNN:
 * libcudnn.so.9 is loaded with dlopen on first use, so a machine without it keeps the
 * built-in kernels; the build needs only cuDNN's headers (LB_HAVE_CUDNN), and without them
 * every call answers LB_ERR_UNSUPPORTED. Both directions interoperate with the built-in
 * kernels (same lse), so a caller may take each from whichever is faster. Unlike
 * kernels/attention.cuh's backward this one does not sum a qkv bias gradient. */
#ifndef LB_GPU_CUDNN_ATTN_H
#define LB_GPU_CUDNN_ATTN_H

#include <cuda_runtime.h>
#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "core/status.h"
#include "gpu/dtype.h"

typedef struct lb_cudnn_attn lb_cudnn_attn;

/* Loads cuDNN (once per process) and builds the forward execution plan for one shape on
 * the current device, and the backward's with `backward` (without it,
 * lb_cudnn_attn_backward refuses). LB_ERR_UNSUPPORTED, with the reason in err, when the
 * library is absent or older than 9, or has no engine for the shape or type. *out is the
 * caller's, freed with lb_cudnn_attn_free. */
lb_status lb_cudnn_attn_init(lb_cudnn_attn **out, int B, int T, int NH, int NKV, int HD,
                             lb_gpu_dtype dt, bool backward, lb_err *err);
void lb_cudnn_attn_free(lb_cudnn_attn *a);

/* Device scratch either direction needs (at least 256 bytes; 256-byte aligned pointer). */
size_t lb_cudnn_attn_workspace_bytes(const lb_cudnn_attn *a);

/* The version of the cuDNN an lb_cudnn_attn_init or lb_cudnn_gelu_init (gpu/cudnn/gelu.h)
 * loaded, as cudnnGetVersion() reports it (e.g. 91900); 0 while none is loaded (never
 * asked for, or not found). Loads nothing. */
size_t lb_cudnn_version(void);

lb_status lb_cudnn_attn_forward(lb_cudnn_attn *a, void *out, float *lse, const void *qkv,
                                void *workspace, cudaStream_t s, lb_err *err);
lb_status lb_cudnn_attn_backward(lb_cudnn_attn *a, void *dqkv, const void *dout, const void *qkv,
                                 const void *out, const float *lse, void *workspace, cudaStream_t s,
                                 lb_err *err);

#ifdef __cplusplus
}
#endif

#endif
