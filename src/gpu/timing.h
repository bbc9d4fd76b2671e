/* timing.h: how long a GPU operation takes, as the run-time choices measure it (the
 * attention implementation per direction, IEEE or int8 per fp32 product): one untimed run
 * (which may prepare or tune), then the mean of `reps` runs between two CUDA events on the
 * stream. The host waits for the last event. Not here: cuBLASLt's candidate timing, which
 * skips candidates that fail (gpu/blas/matmul.c). */
#ifndef LB_GPU_TIMING_H
#define LB_GPU_TIMING_H

#include "core/status.h"

/* one run of the operation on the stream the caller times */
typedef lb_status (*lb_gpu_timed_run)(void *ctx, lb_err *err);

/* *ms = mean milliseconds of one run(ctx) on `stream` (a cudaStream_t), measured as above */
lb_status lb_gpu_time_runs(void *stream, int reps, lb_gpu_timed_run run, void *ctx, float *ms,
                           lb_err *err);

#endif
