/* timing.c: gpu/timing.h. */
#include "gpu/timing.h"

#ifdef LB_HAVE_CUDA

#include <cuda_runtime.h>

lb_status lb_gpu_time_runs(void *stream, int reps, lb_gpu_timed_run run, void *ctx, float *ms,
                           lb_err *err) {
    cudaStream_t s = (cudaStream_t)stream;
    cudaEvent_t ev[2] = {NULL, NULL};
    lb_status st = LB_OK;
    if (cudaEventCreate(&ev[0]) != cudaSuccess || cudaEventCreate(&ev[1]) != cudaSuccess)
        st = lb_fail(err, LB_ERR_DEVICE, "could not create CUDA events for a timing");
    for (int r = 0; st == LB_OK && r <= reps; r++) {
        if (r == 1 && cudaEventRecord(ev[0], s) != cudaSuccess)
            st = lb_fail(err, LB_ERR_DEVICE, "could not record a CUDA event");
        if (st == LB_OK) st = run(ctx, err);
    }
    if (st == LB_OK &&
        (cudaEventRecord(ev[1], s) != cudaSuccess || cudaEventSynchronize(ev[1]) != cudaSuccess ||
         cudaEventElapsedTime(ms, ev[0], ev[1]) != cudaSuccess))
        st = lb_fail(err, LB_ERR_DEVICE, "a timing failed: %s",
                     cudaGetErrorString(cudaGetLastError()));
    if (ev[0]) cudaEventDestroy(ev[0]);
    if (ev[1]) cudaEventDestroy(ev[1]);
    if (st == LB_OK) *ms /= (float)reps;
    return st;
}

#endif
