/* gelu.h: GPT-2's MLP input product with its GELU through cuDNN's fused matmul
 * engines: aux = A B^T + bias (the pre-activation) and D = gelu_tanh(aux), in one kernel.
 *
 * The same operation and results as gpu/blas/matmul.h's LB_EPI_GELU_AUX_BIAS product with
 * trans_b: A [m,k] row-major with row stride lda, B [n,k] (the weights), bias [n], D and
 * aux [m,n] with row stride n, or with cols stored transposed ([n,m], row stride m; ~7%
 * slower at GPT-2's shape), all fp16 or bf16, fp32 accumulation, D and aux rounded once
 * each. On the H200 cuDNN's runtime-fused kernel runs GPT-2's 16384 x 3072 x 768 product
 * ~10% faster than cuBLASLt's GELU epilogue; its dGELU is slower, so the backward stays
 * with cuBLASLt (docs/PERFORMANCE.md, "What was tried: products"). The plans are cuDNN's
 * heuristic's configurations, timed on the first run (gpu/cudnn/graph.h). Like gpu/cudnn/attn.h,
 * cuDNN is loaded with dlopen; without it (or its headers at build time) every call answers
 * LB_ERR_UNSUPPORTED. */
#ifndef LB_GPU_CUDNN_GELU_H
#define LB_GPU_CUDNN_GELU_H

#include <cuda_runtime.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "core/status.h"
#include "gpu/dtype.h"

typedef struct lb_cudnn_gelu lb_cudnn_gelu;

/* Builds the plans for one shape on the current device. LB_ERR_UNSUPPORTED, with the
 * reason in err, when cuDNN is absent or has no engine for it. *out is the caller's, freed
 * with lb_cudnn_gelu_free. */
lb_status lb_cudnn_gelu_init(lb_cudnn_gelu **out, int64_t m, int64_t n, int64_t k, int64_t lda,
                             bool cols, lb_gpu_dtype dt, lb_err *err);
void lb_cudnn_gelu_free(lb_cudnn_gelu *g);

/* Device scratch a run needs (0 when none; a 256-byte aligned pointer otherwise). */
size_t lb_cudnn_gelu_workspace_bytes(const lb_cudnn_gelu *g);

lb_status lb_cudnn_gelu_forward(lb_cudnn_gelu *g, void *d, void *aux, const void *a, const void *b,
                                const void *bias, void *workspace, cudaStream_t s, lb_err *err);

#ifdef __cplusplus
}
#endif

#endif
