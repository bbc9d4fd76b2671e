/* loss.cuh: fused softmax + cross-entropy, forward and backward in one pass (C-callable).
 *
 * logits [N, V] (row stride ld >= V, type dt) are read once for the row's max and sum of
 * exponentials (online, fp32) and kept in registers and shared memory (a whole GPT-2 row;
 * the rest of a longer row is read again) to write dlogits = (softmax - onehot(target)) * dloss IN
 * PLACE over the logits: no fp32 copy of the logits or of the probabilities
 * ever exists. losses[N] (fp32) = logsumexp - logit[target]. dloss is d(loss)/d(losses[r])
 * times the loss scale (1/N for the mean, times S under fp16 loss scaling). With
 * dlogits_out == 0 only the losses are written (evaluation); with it, the padding columns
 * [V, ld) are set to zero. dloss_scale, when not NULL,
 * is a device scalar (the dynamic loss scale) that multiplies dloss. */
#ifndef LB_KERNELS_LOSS_CUH
#define LB_KERNELS_LOSS_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "core/status.h"
#include "gpu/dtype.h"

lb_status lb_loss_softmax_xent(void *logits, float *losses, const int32_t *targets, int64_t N,
                               int V, int64_t ld, float dloss, const float *dloss_scale,
                               int dlogits_out, lb_gpu_dtype dt, cudaStream_t s, lb_err *err);
/* *mean = mean of x[0..n-1] (fp32 device scalar), one block, deterministic. */
lb_status lb_loss_mean(float *mean, const float *x, int64_t n, cudaStream_t s, lb_err *err);

#ifdef __cplusplus
}
#endif

#endif
