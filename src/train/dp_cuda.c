/* dp_cuda.c: ZeRO stage 0 over NCCL for the GPU model, buckets all-reduced on a
 * communication stream while backward goes on (see dp_cuda.h). */
#ifdef LB_HAVE_CUDA

#include "train/dp_cuda.h"

#include <cuda_runtime.h>
#include <stdbool.h>
#include <stdlib.h>

#include "gpu/check.h"
#include "train/zero.h"

struct lb_dp_cuda {
    lb_model_gpu *m;
    lb_comm *c;
    cudaStream_t model_stream, comm_stream;
    lb_zero_plan plan;
    lb_param_tensor *tensors; /* the layout, in flat order */
    int n_tensors;
    lb_gpu_dtype *grad_type; /* [n_tensors] */
    cudaEvent_t ready;       /* on the model's stream: a bucket's gradients are written */
    cudaEvent_t *ev;         /* [n_steps][3]: comm start, comm end, compute end */
    int64_t n_steps, step;
    bool started; /* this step's first bucket has begun */
    double sent_bytes;
};

enum { EV_COMM_START = 0, EV_COMM_END, EV_COMPUTE_END, EV_N };

static lb_comm_dtype comm_type(lb_gpu_dtype t) {
    return t == LB_DT_F32 ? LB_COMM_FP32 : t == LB_DT_F16 ? LB_COMM_FP16 : LB_COMM_BF16;
}

/* Bucket b's tensors, all-reduced in place on the communication stream as one group. */
static lb_status all_reduce_bucket(lb_dp_cuda *d, int b, lb_err *err) {
    const lb_zero_bucket *k = &d->plan.buckets[b];
    float *grads = lb_model_gpu_grads(d->m);
    LB_TRY(lb_comm_group_start(d->c, err));
    lb_status st = LB_OK;
    for (int i = 0; i < d->n_tensors && st == LB_OK; i++) {
        const lb_param_tensor *t = &d->tensors[i];
        if (t->offset < k->start || t->offset >= k->end) continue;
        st = lb_comm_all_reduce(d->c, grads + t->offset, grads + t->offset, (size_t)t->numel,
                                comm_type(d->grad_type[i]), LB_COMM_AVG, d->comm_stream, err);
    }
    lb_status end = lb_comm_group_end(d->c, st == LB_OK ? err : NULL);
    return st != LB_OK ? st : end;
}

static lb_status on_grads(void *ctx, int unit, lb_err *err) {
    lb_dp_cuda *d = ctx;
    int b = d->plan.bucket_of_unit[unit];
    cudaEvent_t *ev = d->ev + d->step * EV_N;
    bool last = unit == 0;
    if (last) LB_CUDA_TRY(err, cudaEventRecord(ev[EV_COMPUTE_END], d->model_stream));
    if (d->plan.buckets[b].unit_lo == unit) {
        LB_CUDA_TRY(err, cudaEventRecord(d->ready, d->model_stream));
        LB_CUDA_TRY(err, cudaStreamWaitEvent(d->comm_stream, d->ready, 0));
        if (!d->started) LB_CUDA_TRY(err, cudaEventRecord(ev[EV_COMM_START], d->comm_stream));
        d->started = true;
        LB_TRY(all_reduce_bucket(d, b, err));
    }
    if (!last) return LB_OK;
    /* the optimizer waits for every bucket */
    LB_CUDA_TRY(err, cudaEventRecord(ev[EV_COMM_END], d->comm_stream));
    LB_CUDA_TRY(err, cudaStreamWaitEvent(d->model_stream, ev[EV_COMM_END], 0));
    return LB_OK;
}

void lb_dp_cuda_free(lb_dp_cuda *d) {
    if (d == NULL) return;
    if (d->m != NULL) lb_model_gpu_set_grad_hook(d->m, NULL, NULL);
    if (d->comm_stream != NULL) cudaStreamSynchronize(d->comm_stream);
    for (int64_t i = 0; d->ev != NULL && i < d->n_steps * EV_N; i++)
        if (d->ev[i] != NULL) cudaEventDestroy(d->ev[i]);
    if (d->ready != NULL) cudaEventDestroy(d->ready);
    if (d->comm_stream != NULL) cudaStreamDestroy(d->comm_stream);
    lb_zero_plan_free(&d->plan);
    free(d->ev);
    free(d->tensors);
    free(d->grad_type);
    free(d);
}

lb_status lb_dp_cuda_init(lb_dp_cuda **out, lb_model_gpu *m, const lb_model_config *cfg, lb_comm *c,
                          double bucket_bytes, int64_t n_steps, lb_err *err) {
    *out = NULL;
    lb_dp_cuda *d = calloc(1, sizeof *d);
    if (d == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of host memory");
    d->m = m;
    d->c = c;
    d->n_steps = n_steps;
    d->model_stream = (cudaStream_t)lb_model_gpu_stream(m);
    d->n_tensors = lb_model_param_layout(cfg, NULL, 0);
    d->tensors = calloc((size_t)d->n_tensors, sizeof *d->tensors);
    d->grad_type = calloc((size_t)d->n_tensors, sizeof *d->grad_type);
    d->ev = calloc((size_t)(n_steps * EV_N), sizeof *d->ev);
    int64_t *bounds = malloc(((size_t)cfg->n_layer + 3) * sizeof *bounds);
    lb_status st = LB_OK;
    if (!d->tensors || !d->grad_type || !d->ev || !bounds)
        st = lb_fail(err, LB_ERR_NOMEM, "out of host memory for %lld steps' events",
                     (long long)n_steps);
    if (st == LB_OK) {
        lb_model_param_layout(cfg, d->tensors, d->n_tensors);
        double elem_bytes = 4;
        for (int i = 0; i < d->n_tensors; i++) {
            d->grad_type[i] = lb_model_gpu_grad_type(m, &d->tensors[i]);
            double b = (double)lb_dtype_bytes(d->grad_type[i]);
            d->sent_bytes += lb_zero_ring_bytes(LB_ZERO_ALL_REDUCE, (double)d->tensors[i].numel * b,
                                                lb_comm_size(c));
            if (b < elem_bytes) elem_bytes = b;
        }
        int n_units = lb_zero_model_units(cfg, bounds);
        st = lb_zero_plan_init(&d->plan, bounds, n_units, (int64_t)(bucket_bytes / elem_bytes), 1,
                               1, err);
    }
    free(bounds);
    if (st == LB_OK &&
        cudaStreamCreateWithFlags(&d->comm_stream, cudaStreamNonBlocking) != cudaSuccess)
        st = lb_fail(err, LB_ERR_DEVICE, "could not create the communication stream");
    if (st == LB_OK && cudaEventCreateWithFlags(&d->ready, cudaEventDisableTiming) != cudaSuccess)
        st = lb_fail(err, LB_ERR_DEVICE, "could not create a CUDA event");
    for (int64_t i = 0; st == LB_OK && i < n_steps * EV_N; i++)
        if (cudaEventCreate(&d->ev[i]) != cudaSuccess)
            st = lb_fail(err, LB_ERR_DEVICE, "could not create CUDA events");
    if (st != LB_OK) {
        lb_dp_cuda_free(d);
        return st;
    }
    lb_model_gpu_set_grad_hook(m, on_grads, d);
    *out = d;
    return LB_OK;
}

void lb_dp_cuda_begin_step(lb_dp_cuda *d, int64_t step) {
    d->step = step;
    d->started = false;
}

lb_status lb_dp_cuda_step_times(lb_dp_cuda *d, int64_t step, double *comm_ms, double *exposed_ms,
                                lb_err *err) {
    cudaEvent_t *ev = d->ev + step * EV_N;
    float all = 0, open = 0;
    LB_CUDA_TRY(err, cudaEventElapsedTime(&all, ev[EV_COMM_START], ev[EV_COMM_END]));
    LB_CUDA_TRY(err, cudaEventElapsedTime(&open, ev[EV_COMPUTE_END], ev[EV_COMM_END]));
    *comm_ms = all;
    *exposed_ms = open > 0 ? open : 0;
    return LB_OK;
}

double lb_dp_cuda_sent_bytes(const lb_dp_cuda *d) {
    return d->sent_bytes;
}

#endif
