/* dp_cuda.h: data-parallel training of the GPU model (model/model_gpu.h) over NCCL
 * (comm/comm.h, device buffers): ZeRO stage 0 with bucketed overlap.
 *
 * The model's gradient hook says when backward has enqueued a unit's last gradient kernel;
 * when that completes a bucket (train/zero.h's plan: buckets of --bucket-mb over the units,
 * complete when their lowest unit is), an event on the model's stream makes the
 * communication stream wait for it, and the bucket's gradients are all-reduced (averaged)
 * there, one call per tensor in the type its slot holds (fp32, or the packed 16-bit
 * working type), fused into one NCCL group per bucket; the model's stream computes the
 * next layers meanwhile. After the embeddings' bucket the model's stream waits for the
 * communication stream before the optimizer, which then sees the same gradients on every
 * rank, so the global norm, the clip and fp16's skip decision agree everywhere. Steps run
 * kernel by kernel (model_gpu.h's no_graph): the collectives are not captured into the
 * step's CUDA graph.
 *
 * Per step, three events: the first bucket's start and the last bucket's end on the
 * communication stream (communication time: all of it, hidden or not) and the end of
 * backward's compute on the model's stream (the part after it until the last bucket's end
 * is what compute did not hide).
 *
 * Not here: ZeRO stages 1-3 on the GPU (train.c refuses them there), gradient
 * accumulation on the GPU. Only in CUDA builds with NCCL. */
#ifndef LB_TRAIN_DP_CUDA_H
#define LB_TRAIN_DP_CUDA_H

#include <stdint.h>

#include "comm/comm.h"
#include "core/status.h"
#include "model/model_gpu.h"

typedef struct lb_dp_cuda lb_dp_cuda;

/* Plans the buckets (bucket_bytes of gradient each at most), creates the communication
 * stream and n_steps x 3 events, and sets the model's gradient hook. m and c are kept, not
 * owned. Free with lb_dp_cuda_free (NULL-safe), which removes the hook. */
lb_status lb_dp_cuda_init(lb_dp_cuda **out, lb_model_gpu *m, const lb_model_config *cfg, lb_comm *c,
                          double bucket_bytes, int64_t n_steps, lb_err *err);
void lb_dp_cuda_free(lb_dp_cuda *d);

/* The step whose events the next backward records (0 .. n_steps - 1). */
void lb_dp_cuda_begin_step(lb_dp_cuda *d, int64_t step);

/* After the device finished step `step`: its communication time and the part of it that
 * compute did not hide, ms, and the bytes this rank sent (ring accounting). */
lb_status lb_dp_cuda_step_times(lb_dp_cuda *d, int64_t step, double *comm_ms, double *exposed_ms,
                                lb_err *err);
double lb_dp_cuda_sent_bytes(const lb_dp_cuda *d);

#endif
