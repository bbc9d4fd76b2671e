/* embed.cuh: token (and learned position) embeddings, forward and backward.
 * C-callable; tensors as in model/ref.h. Activations have type dt, parameters `wte`,
 * `wpe` have type dt too (the working copy). wpe may be NULL (Llama). Backward runs over
 * rows sorted by token id: each token's rows are summed in an order fixed by the ids alone
 * (every device computes the same bits, so data-parallel ranks that add all ranks' rows
 * agree, train/dp_cuda.h), and dwpe by a per-(t,c) loop over the batch. */
#ifndef LB_KERNELS_EMBED_CUH
#define LB_KERNELS_EMBED_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "core/status.h"
#include "gpu/dtype.h"

lb_status lb_embed_forward(void *out, const int32_t *inp, const void *wte, const void *wpe, int B,
                           int T, int C, lb_gpu_dtype dt, cudaStream_t s, lb_err *err);
/* The sorted backward over n = B x T rows: lb_embed_sort_ids orders the ids (int32 below V)
 * stably, the sorted ids into keys and each one's row index into rows, with tmp of
 * lb_embed_sort_bytes(n, V) bytes as scratch (no allocation: capturable in a CUDA graph).
 * lb_embed_backward_sorted then adds scale x the embedding's weight gradients of those rows
 * (dout: B x T x C of type dt) to the elements of wte in [wte_lo, wte_hi) (element e of the
 * V x C table at dwte[e - wte_lo]) and, when dwpe is non-NULL, of wpe in [wpe_lo, wpe_hi)
 * (T x C, at dwpe[e - wpe_lo]), gradients of type dt_grad: each token's rows summed in
 * fp32 in row order, each (t, c) of wpe over the batch in order, once into each element,
 * so the result does not depend on the device's scheduling. */
size_t lb_embed_sort_bytes(int n, int V);
lb_status lb_embed_sort_ids(int32_t *keys, int32_t *rows, const int32_t *ids, int n, int V,
                            void *tmp, size_t tmp_bytes, cudaStream_t s, lb_err *err);
lb_status lb_embed_backward_sorted(void *dwte, int64_t wte_lo, int64_t wte_hi, void *dwpe,
                                   int64_t wpe_lo, int64_t wpe_hi, const void *dout,
                                   const int32_t *keys, const int32_t *rows, int B, int T, int C,
                                   float scale, lb_gpu_dtype dt, lb_gpu_dtype dt_grad,
                                   cudaStream_t s, lb_err *err);

#ifdef __cplusplus
}
#endif

#endif
