/* dp_steps_cuda.h: what the GPU data-parallel layer (train/dp_cuda.h) keeps per step for
 * the records: seven timing events and the bytes this rank sent.
 *
 * The events of a step: the first collective's start and the last one's end on the
 * communication stream (all of backward's communication, hidden or not), the end of
 * backward's compute on the model's stream (what follows it until the last end is what
 * compute did not hide), around the parameter all-gather after the optimizer on the
 * communication stream (ZeRO 1-2), and around the model's stream's wait, before the step's
 * forward, for the first bucket of the previous step's all-gather (ZeRO 1-2: what of that
 * gather the step waited for). The layer records those it has and counts its sent bytes
 * (ring accounting, train/zero.h) into sent[step].
 *
 * Only in CUDA builds. */
#ifndef LB_TRAIN_DP_STEPS_CUDA_H
#define LB_TRAIN_DP_STEPS_CUDA_H

#include <cuda_runtime.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"

enum {
    LB_DP_EV_COMM_START = 0,
    LB_DP_EV_COMM_END,
    LB_DP_EV_COMPUTE_END,
    LB_DP_EV_GATHER_START,
    LB_DP_EV_GATHER_END,
    LB_DP_EV_WAIT_START,
    LB_DP_EV_WAIT_END,
    LB_DP_EV_N
};

typedef struct {
    cudaEvent_t *ev; /* [n_steps][LB_DP_EV_N] */
    double *sent;    /* [n_steps]: bytes this rank sent */
    int64_t n_steps;
} lb_dp_steps_cuda;

/* Creates n_steps steps' events and zeroed byte counts; on failure frees what it made.
 * Free with lb_dp_steps_cuda_free (a zeroed s is safe). */
lb_status lb_dp_steps_cuda_init(lb_dp_steps_cuda *s, int64_t n_steps, lb_err *err);
void lb_dp_steps_cuda_free(lb_dp_steps_cuda *s);

/* Step `step`'s LB_DP_EV_N events. */
cudaEvent_t *lb_dp_steps_cuda_events(const lb_dp_steps_cuda *s, int64_t step);

/* After the device finished step `step`: its communication time and the part of it that
 * compute did not hide, ms; with gather, the all-gather's time is added to the first and
 * the wait for it to the second. */
lb_status lb_dp_steps_cuda_times(const lb_dp_steps_cuda *s, int64_t step, bool gather,
                                 double *comm_ms, double *exposed_ms, lb_err *err);

#endif
