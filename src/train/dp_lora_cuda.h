/* dp_lora_cuda.h: data-parallel fine-tuning of the GPU model with adapters on a frozen base
 * (model/model_gpu.h with params.lora) over NCCL (comm/comm.h, device buffers).
 *
 * The base is frozen and the same on every rank (the same seed or the same model
 * directory), so the adapters' fp32 gradients are all that travels. They are laid out
 * layer by layer (model/lora.h), and backward finishes them from the last layer down: when
 * the model's gradient hook says layer l is done, the layers finished since the last
 * all-reduce form one contiguous range, and once that range holds bucket_bytes (or layer 0
 * is done) an event on the model's stream makes the communication stream wait and the
 * range is all-reduced (averaged) there in one call while the model's stream computes the
 * layers below. After layer 0's range the model's stream waits for the communication
 * stream, so AdamW sees the same gradients on every rank and keeps the adapters identical
 * (the global norm, the clip and fp16's skip decision agree everywhere). Steps run kernel
 * by kernel (model_gpu.h's no_graph).
 *
 * Per step, three of train/dp_steps_cuda.h's events: the first range's start and the last
 * range's end on the communication stream, and the end of backward's compute on the
 * model's stream. Not here: ZeRO stages (train.c refuses them with adapters), the full
 * training of train/dp_cuda.h. Only in CUDA builds with NCCL. */
#ifndef LB_TRAIN_DP_LORA_CUDA_H
#define LB_TRAIN_DP_LORA_CUDA_H

#include <stdint.h>

#include "comm/comm.h"
#include "core/status.h"
#include "model/model_gpu.h"

typedef struct lb_dp_lora_cuda lb_dp_lora_cuda;

/* For model m with adapters (LB_ERR_USAGE otherwise) on n_layer layers: creates the
 * communication stream and n_steps steps' events (train/dp_steps_cuda.h) and sets the model's
 * gradient hook. m and c are kept, not owned. Free with lb_dp_lora_cuda_free (NULL-safe), which
 * removes the hook. */
lb_status lb_dp_lora_cuda_init(lb_dp_lora_cuda **out, lb_model_gpu *m, int n_layer, lb_comm *c,
                               double bucket_bytes, int64_t n_steps, lb_err *err);
void lb_dp_lora_cuda_free(lb_dp_lora_cuda *d);

/* The step whose events the next backward records (0 .. n_steps - 1). */
void lb_dp_lora_cuda_begin_step(lb_dp_lora_cuda *d, int64_t step);

/* After the device finished step `step`: its communication time and the part of it that
 * compute did not hide, ms; and the bytes this rank sent in it (ring accounting, counted
 * range by range). */
lb_status lb_dp_lora_cuda_step_times(lb_dp_lora_cuda *d, int64_t step, double *comm_ms,
                                     double *exposed_ms, lb_err *err);
double lb_dp_lora_cuda_sent_bytes(const lb_dp_lora_cuda *d, int64_t step);

#endif
