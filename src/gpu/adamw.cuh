/* adamw.cuh: the optimizer step over all parameters at once (C-callable).
 *
 * Gradients, fp32 master weights and the AdamW moments are each one flat array in the
 * layout of model/config.h. One step is three launches with no host synchronisation:
 * lb_gpu_grad_sumsq adds the squared gradients into a device accumulator; lb_gpu_adamw
 * reads it, forms the global norm (divided by the loss scale), the clip multiplier
 * (torch's clip_grad_norm_: min(1, max/(norm + 1e-6))) and, in fp16 mode, skips the
 * whole step when the norm is not finite; lb_gpu_opt_finish updates the dynamic loss
 * scale (halve on overflow, double after `growth_interval` good steps, as torch's
 * GradScaler), counts skipped steps and steps taken, records the norm and clears the
 * accumulator. Weight decay applies per tensor, from a segment table (start offsets,
 * ascending, and a decay flag each) kept on the device. The master weights are written
 * back to the working copy (fp16/bf16) in the same pass. */
#ifndef LB_GPU_ADAMW_CUH
#define LB_GPU_ADAMW_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "core/status.h"
#include "gpu/dtype.h"


/* Lives in device memory; the host initialises it and reads it back to report. */
typedef struct {
    double sumsq;       /* accumulator of the current step */
    float loss_scale;   /* 1 unless dynamic loss scaling */
    float last_norm;    /* global norm of the last step (unscaled), NaN/inf on overflow */
    int32_t step;       /* optimizer steps taken (bias correction uses step + 1) */
    int32_t good_steps; /* consecutive finite steps since the scale last changed */
    int32_t skipped;    /* steps skipped because of non-finite gradients */
    int32_t pad;
} lb_gpu_optstate;

typedef struct {
    float lr, beta1, beta2, eps, weight_decay;
    float grad_clip;     /* <= 0: no clipping */
    int dynamic_scaling; /* 1 in fp16 mode */
    int growth_interval; /* good steps before the scale doubles (2000) */
} lb_gpu_adamw_params;

lb_status lb_gpu_grad_sumsq(lb_gpu_optstate *st, const float *grads, int64_t n, cudaStream_t s,
                            lb_err *err);
/* seg_start [n_seg] ascending (first 0), seg_decay [n_seg] 0/1, both device arrays.
 * params_lp (type dt) may be NULL (fp32 mode: master is the working copy). */
lb_status lb_gpu_adamw(float *master, void *params_lp, lb_gpu_dtype dt, const float *grads,
                       float *m, float *v, int64_t n, const int64_t *seg_start,
                       const int32_t *seg_decay, int n_seg, const lb_gpu_adamw_params *p,
                       lb_gpu_optstate *st, cudaStream_t s, lb_err *err);
lb_status lb_gpu_opt_finish(lb_gpu_optstate *st, const lb_gpu_adamw_params *p, cudaStream_t s,
                            lb_err *err);

#ifdef __cplusplus
}
#endif

#endif
