/* dp_lora_cuda.c: the adapters' gradients all-reduced by ranges of layers on a
 * communication stream while backward goes on (see dp_lora_cuda.h). */
#ifdef LB_HAVE_CUDA

#include "train/dp_lora_cuda.h"

#include <cuda_runtime.h>
#include <stdbool.h>
#include <stdlib.h>

#include "gpu/check.h"
#include "train/dp_steps_cuda.h"
#include "train/zero.h"

struct lb_dp_lora_cuda {
    lb_model_gpu *m;
    lb_comm *c;
    cudaStream_t model_stream, comm_stream;
    float *grads;        /* the adapters' gradients, layer-major */
    int64_t layer_numel; /* elements of one layer's adapters */
    int n_layer;
    int64_t bucket_layers;  /* layers an all-reduce waits for, >= 1 */
    int pending_hi;         /* the highest finished layer not yet sent; -1: none */
    cudaEvent_t ready;      /* on the model's stream: a range's gradients are written */
    lb_dp_steps_cuda steps; /* events and sent bytes a step */
    int64_t step;
    bool started; /* this step's first range has begun */
};

/* Layers lo .. pending_hi, all-reduced in place on the communication stream behind the
 * kernels that wrote them. */
static lb_status send_range(lb_dp_lora_cuda *d, int lo, lb_err *err) {
    cudaEvent_t *ev = lb_dp_steps_cuda_events(&d->steps, d->step);
    LB_CUDA_TRY(err, cudaEventRecord(d->ready, d->model_stream));
    LB_CUDA_TRY(err, cudaStreamWaitEvent(d->comm_stream, d->ready, 0));
    if (!d->started) LB_CUDA_TRY(err, cudaEventRecord(ev[LB_DP_EV_COMM_START], d->comm_stream));
    d->started = true;
    float *g = d->grads + (size_t)lo * (size_t)d->layer_numel;
    size_t n = (size_t)(d->pending_hi - lo + 1) * (size_t)d->layer_numel;
    d->pending_hi = -1;
    d->steps.sent[d->step] +=
        lb_zero_ring_bytes(LB_ZERO_ALL_REDUCE, 4.0 * (double)n, lb_comm_size(d->c));
    return lb_comm_all_reduce(d->c, g, g, n, LB_COMM_FP32, LB_COMM_AVG, d->comm_stream, err);
}

/* Units of model_gpu.h: 1 + l is layer l; the head (L + 1) has no adapters and a frozen
 * embedding (0) reports nothing, so layer 0 is the last. */
static lb_status on_grads(void *ctx, int unit, lb_err *err) {
    lb_dp_lora_cuda *d = ctx;
    int l = unit - 1;
    if (l < 0 || l >= d->n_layer) return LB_OK;
    if (d->pending_hi < 0) d->pending_hi = l;
    if (l > 0 && d->pending_hi - l + 1 < d->bucket_layers) return LB_OK;
    cudaEvent_t *ev = lb_dp_steps_cuda_events(&d->steps, d->step);
    if (l == 0) LB_CUDA_TRY(err, cudaEventRecord(ev[LB_DP_EV_COMPUTE_END], d->model_stream));
    LB_TRY(send_range(d, l, err));
    if (l > 0) return LB_OK;
    /* the optimizer waits for every range */
    LB_CUDA_TRY(err, cudaEventRecord(ev[LB_DP_EV_COMM_END], d->comm_stream));
    LB_CUDA_TRY(err, cudaStreamWaitEvent(d->model_stream, ev[LB_DP_EV_COMM_END], 0));
    return LB_OK;
}

void lb_dp_lora_cuda_free(lb_dp_lora_cuda *d) {
    if (d == NULL) return;
    if (d->m != NULL) lb_model_gpu_set_grad_hook(d->m, NULL, NULL);
    if (d->comm_stream != NULL) cudaStreamSynchronize(d->comm_stream);
    lb_dp_steps_cuda_free(&d->steps);
    if (d->ready != NULL) cudaEventDestroy(d->ready);
    if (d->comm_stream != NULL) cudaStreamDestroy(d->comm_stream);
    free(d);
}

lb_status lb_dp_lora_cuda_init(lb_dp_lora_cuda **out, lb_model_gpu *m, int n_layer, lb_comm *c,
                               double bucket_bytes, int64_t n_steps, lb_err *err) {
    *out = NULL;
    int64_t layer_numel = 0;
    float *grads = lb_model_gpu_lora_grads(m, &layer_numel);
    if (grads == NULL)
        return lb_fail(err, LB_ERR_USAGE, "adapter data parallelism: the model has no adapters");
    lb_dp_lora_cuda *d = calloc(1, sizeof *d);
    if (d == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of host memory");
    d->m = m;
    d->c = c;
    d->grads = grads;
    d->layer_numel = layer_numel;
    d->n_layer = n_layer;
    d->pending_hi = -1;
    d->model_stream = (cudaStream_t)lb_model_gpu_stream(m);
    double layer_bytes = 4.0 * (double)layer_numel;
    d->bucket_layers = layer_bytes > 0 ? (int64_t)(bucket_bytes / layer_bytes) : 1;
    if (d->bucket_layers < 1) d->bucket_layers = 1;
    lb_status st = lb_dp_steps_cuda_init(&d->steps, n_steps, err);
    if (st == LB_OK &&
        cudaStreamCreateWithFlags(&d->comm_stream, cudaStreamNonBlocking) != cudaSuccess)
        st = lb_fail(err, LB_ERR_DEVICE, "could not create the communication stream");
    if (st == LB_OK && cudaEventCreateWithFlags(&d->ready, cudaEventDisableTiming) != cudaSuccess)
        st = lb_fail(err, LB_ERR_DEVICE, "could not create a CUDA event");
    if (st != LB_OK) {
        lb_dp_lora_cuda_free(d);
        return st;
    }
    lb_model_gpu_set_grad_hook(m, on_grads, d);
    *out = d;
    return LB_OK;
}

void lb_dp_lora_cuda_begin_step(lb_dp_lora_cuda *d, int64_t step) {
    d->step = step;
    d->started = false;
    d->pending_hi = -1;
}

lb_status lb_dp_lora_cuda_step_times(lb_dp_lora_cuda *d, int64_t step, double *comm_ms,
                                     double *exposed_ms, lb_err *err) {
    return lb_dp_steps_cuda_times(&d->steps, step, false, comm_ms, exposed_ms, err);
}

double lb_dp_lora_cuda_sent_bytes(const lb_dp_lora_cuda *d, int64_t step) {
    return d->steps.sent[step];
}

#endif
