/* adamw.cuh: the optimizer step over all parameters at once (C-callable).
 *
 * Gradients, fp32 master weights and the AdamW moments are each one flat array in the
 * layout of model/config.h. One step is three launches with no host synchronisation:
 * lb_adamw_grad_sumsq adds the squared gradients into a device accumulator; lb_adamw
 * reads it, forms the global norm (divided by the loss scale), the clip multiplier
 * (torch's clip_grad_norm_: min(1, max/(norm + 1e-6))) and, in fp16 mode, skips the
 * whole step when the norm is not finite; lb_adamw_finish updates the dynamic loss
 * scale (halve on overflow, double after `growth_interval` good steps, as torch's
 * GradScaler), counts skipped steps and steps taken, records the norm and clears the
 * accumulator. Weight decay applies per tensor, from a segment table (start offsets,
 * ascending, and flags each) kept on the device. The gradients are fp32 or, in fp16/bf16
 * modes, one array of the working type (lb_gpu_segments.dense16), which both passes widen
 * to fp32. The master weights are written back to the working copy (fp16/bf16) in the
 * same pass. */
#ifndef LB_KERNELS_ADAMW_CUH
#define LB_KERNELS_ADAMW_CUH

#include <cuda_runtime.h>
#include <stdbool.h>
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

/* Whether a and b are the same settings (a captured step holds them). */
bool lb_adamw_params_same(const lb_gpu_adamw_params *a, const lb_gpu_adamw_params *b);

/* bits of a segment's flags */
#define LB_SEG_DECAY 1 /* weight decay applies */
/* padding, no parameter: its gradient is read as 0 and left out of the norm, whatever the
 * array holds there */
#define LB_SEG_PAD 2

/* The parameters as tensors: device arrays start [n_seg] (first elements, ascending,
 * start[0] = 0) and flags [n_seg] (LB_SEG_* bits), n elements in all. dense16: every
 * gradient is of the 16-bit working type, element e at ((dt *)grads)[e] (a ZeRO shard's
 * reduce-scattered gradient), whatever the flags say. */
typedef struct {
    const int64_t *start;
    const int32_t *flags;
    int n_seg;
    int64_t n;
    bool dense16;
} lb_gpu_segments;

/* Parameters [start, end) whose working copy lives apart (a padded copy of the output
 * head, which the products read): lb_adamw writes theirs to dst (type dt, element
 * start at dst[0]) instead of params_lp, or in fp32 mode besides master. */
typedef struct {
    void *dst;
    int64_t start, end;
} lb_gpu_lp_apart;

/* dt: the working type (that of dense16 gradients) */
lb_status lb_adamw_grad_sumsq(lb_gpu_optstate *st, const void *grads, lb_gpu_dtype dt,
                              const lb_gpu_segments *sg, cudaStream_t s, lb_err *err);
/* Elements [lo, hi) of the sg->n updated (all: 0, sg->n; lo a multiple of 4, and hi too
 * unless it is sg->n), so that one step's update may go in several launches, each range
 * once, before lb_adamw_finish. params_lp (type dt) may be NULL (fp32 mode: master is the
 * working copy); apart may be NULL (no parameter's working copy lives apart). */
lb_status lb_adamw(float *master, void *params_lp, const lb_gpu_lp_apart *apart, lb_gpu_dtype dt,
                   const void *grads, float *m, float *v, const lb_gpu_segments *sg, int64_t lo,
                   int64_t hi, const lb_gpu_adamw_params *p, lb_gpu_optstate *st, cudaStream_t s,
                   lb_err *err);
lb_status lb_adamw_finish(lb_gpu_optstate *st, const lb_gpu_adamw_params *p, cudaStream_t s,
                          lb_err *err);

/* A run of fp32 gradients into a dense buffer of the working type (the model's small
 * tensors' sums into their gradient slots): elements [slot, slot + n) of the source to
 * [dense, dense + n) of the buffer. */
typedef struct {
    int64_t slot, dense, n;
} lb_adamw_grad_run;

/* One launch for all runs (device table runs[n_runs]; longest: the largest n, which sizes
 * the grid): each run's gradients written to dst in type dt. */
lb_status lb_adamw_pack_grads(void *dst, const float *src, const lb_adamw_grad_run *runs,
                              int n_runs, int64_t longest, lb_gpu_dtype dt, cudaStream_t s,
                              lb_err *err);

#ifdef __cplusplus
}
#endif

#endif
