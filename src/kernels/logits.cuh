/* logits.cuh: the last steps of an inference forward (C-callable): gathering the rows
 * whose logits are wanted, and the greedy choice of each row (the first largest logit,
 * as engine/sample.h's lb_sample_argmax). */
#ifndef LB_KERNELS_LOGITS_CUH
#define LB_KERNELS_LOGITS_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "core/status.h"
#include "gpu/dtype.h"

/* out[r, 0..C) = in[idx[r], 0..C) for r < n (type dt; idx on the device). */
lb_status lb_logits_gather_rows(void *out, const void *in, const int32_t *idx, int n, int C,
                                lb_gpu_dtype dt, cudaStream_t s, lb_err *err);
/* Rows of at most LB_ARGMAX_SPLIT_ROWS take LB_ARGMAX_PARTS blocks each (with scratch:
 * a counter a row, then each part's value and index). */
#define LB_ARGMAX_SPLIT_ROWS    8
#define LB_ARGMAX_PARTS         64
#define LB_ARGMAX_SCRATCH_BYTES (LB_ARGMAX_SPLIT_ROWS * (1 + 2 * LB_ARGMAX_PARTS) * 4)

/* out[r] = the first index of the largest of logits[r, 0..V) (fp32), r < n. With scratch
 * (LB_ARGMAX_SCRATCH_BYTES, zero before the first call; each call leaves it zero; one call
 * at a time), rows of at most LB_ARGMAX_SPLIT_ROWS are spread over many blocks each;
 * scratch NULL: one block a row. */
lb_status lb_logits_argmax(int32_t *out, const float *logits, int n, int V, void *scratch,
                           cudaStream_t s, lb_err *err);

#ifdef __cplusplus
}
#endif

#endif
