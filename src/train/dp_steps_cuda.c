/* dp_steps_cuda.c: the GPU data-parallel layers' per-step events and sent bytes (see
 * dp_steps_cuda.h). */
#ifdef LB_HAVE_CUDA

#include "train/dp_steps_cuda.h"

#include <stdlib.h>

#include "gpu/check.h"

lb_status lb_dp_steps_cuda_init(lb_dp_steps_cuda *s, int64_t n_steps, lb_err *err) {
    s->n_steps = n_steps;
    s->ev = calloc((size_t)(n_steps * LB_DP_EV_N), sizeof *s->ev);
    s->sent = calloc((size_t)n_steps, sizeof *s->sent);
    lb_status st = LB_OK;
    if (s->ev == NULL || s->sent == NULL)
        st = lb_fail(err, LB_ERR_NOMEM, "out of host memory for %lld steps' events",
                     (long long)n_steps);
    for (int64_t i = 0; st == LB_OK && i < n_steps * LB_DP_EV_N; i++)
        if (cudaEventCreate(&s->ev[i]) != cudaSuccess)
            st = lb_fail(err, LB_ERR_DEVICE, "could not create CUDA events");
    if (st != LB_OK) lb_dp_steps_cuda_free(s);
    return st;
}

void lb_dp_steps_cuda_free(lb_dp_steps_cuda *s) {
    for (int64_t i = 0; s->ev != NULL && i < s->n_steps * LB_DP_EV_N; i++)
        if (s->ev[i] != NULL) cudaEventDestroy(s->ev[i]);
    free(s->ev);
    free(s->sent);
    s->ev = NULL;
    s->sent = NULL;
}

cudaEvent_t *lb_dp_steps_cuda_events(const lb_dp_steps_cuda *s, int64_t step) {
    return s->ev + step * LB_DP_EV_N;
}

lb_status lb_dp_steps_cuda_times(const lb_dp_steps_cuda *s, int64_t step, bool gather,
                                 double *comm_ms, double *exposed_ms, lb_err *err) {
    cudaEvent_t *ev = lb_dp_steps_cuda_events(s, step);
    float all = 0, open = 0, gathered = 0, waited = 0;
    LB_CUDA_TRY(err, cudaEventElapsedTime(&all, ev[LB_DP_EV_COMM_START], ev[LB_DP_EV_COMM_END]));
    LB_CUDA_TRY(err, cudaEventElapsedTime(&open, ev[LB_DP_EV_COMPUTE_END], ev[LB_DP_EV_COMM_END]));
    if (gather) {
        LB_CUDA_TRY(err, cudaEventElapsedTime(&gathered, ev[LB_DP_EV_GATHER_START],
                                              ev[LB_DP_EV_GATHER_END]));
        LB_CUDA_TRY(err,
                    cudaEventElapsedTime(&waited, ev[LB_DP_EV_WAIT_START], ev[LB_DP_EV_WAIT_END]));
    }
    *comm_ms = all + gathered;
    *exposed_ms = (open > 0 ? open : 0) + (waited > 0 ? waited : 0);
    return LB_OK;
}

#endif
