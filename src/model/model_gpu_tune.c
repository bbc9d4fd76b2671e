/* model_gpu_tune.c: the GPU transformer's run-time choices, timed on the first step
 * (model/model_gpu.h).
 *
 * Where two implementations of one piece of a step are both correct, the faster on this
 * device, at this shape, runs: each direction of attention (llmbench's kernels or cuDNN's,
 * under --attention auto) and GPT-2's MLP input product with its GELU (cuBLASLt's epilogue
 * or cuDNN's runtime-fused product). Each is timed on the first layer's real buffers
 * during the first step (gpu/timing.h: one untimed run, then the mean of CHOICE_REPS),
 * kept for the run, and reported by name. What it does not choose: cuBLASLt's algorithms
 * (gpu/blas/matmul.h tunes those per product). */
#ifdef LB_HAVE_CUDA

#include "core/log.h"
#include "gpu/timing.h"
#include "model/model_gpu_impl.h"

#define CHOICE_REPS 5 /* timed runs behind each run-time choice */

/* one run of one direction of attention on a layer's buffers (attn_time's lb_gpu_timed_run) */
typedef struct {
    lb_model_gpu *m;
    bool backward, dnn;
    const qkv_bias_grad *bg;
    void *qkv, *out;
    float *lse;
} attn_run;

static lb_status run_attn(void *ctx, lb_err *err) {
    attn_run *a = ctx;
    return a->backward
               ? lb_model_gpu_attn_backward(a->m, a->dnn, a->bg, a->qkv, a->out, a->lse, err)
               : lb_model_gpu_attn_forward(a->m, a->dnn, a->out, a->lse, a->qkv, err);
}

/* Milliseconds a run of one direction takes on this layer's buffers (gpu/timing.h). Its
 * outputs are overwritten; the caller runs the chosen one after. */
static lb_status attn_time(lb_model_gpu *m, bool backward, bool dnn, const qkv_bias_grad *bg,
                           void *qkv, void *out, float *lse, float *ms, lb_err *err) {
    qkv_bias_grad trial = bg ? *bg : (qkv_bias_grad){0};
    trial.dbias = m->trial_dbias;
    attn_run a = {m, backward, dnn, bg ? &trial : NULL, qkv, out, lse};
    return lb_gpu_time_runs(m->stream, CHOICE_REPS, run_attn, &a, ms, err);
}

lb_status lb_model_gpu_attn_choose(lb_model_gpu *m, bool backward, const qkv_bias_grad *bg,
                                   void *qkv, void *out, float *lse, lb_err *err) {
    float own, dnn;
    LB_TRY(attn_time(m, backward, false, bg, qkv, out, lse, &own, err));
    LB_TRY(attn_time(m, backward, true, bg, qkv, out, lse, &dnn, err));
    m->attn_src[backward] = dnn < own ? LB_GPU_ATTN_CUDNN : LB_GPU_ATTN_BUILTIN;
    LB_INFO("attention %s: cuDNN %.3f ms, built-in %.3f ms a layer: %s",
            backward ? "backward" : "forward", dnn, own, dnn < own ? "cuDNN" : "built-in");
    return LB_OK;
}

typedef struct {
    lb_model_gpu *m;
    bool dnn;
    const lb_blas_gemm *g;
} gelu_run;

static lb_status run_gelu(void *ctx, lb_err *err) {
    gelu_run *r = ctx;
    return lb_model_gpu_gelu_forward(r->m, r->dnn, r->g, err);
}

/* Each product tunes itself on its untimed first run. */
lb_status lb_model_gpu_gelu_choose(lb_model_gpu *m, const lb_blas_gemm *g, lb_err *err) {
    float ms[2];
    for (int dnn = 0; dnn < 2; dnn++) {
        gelu_run r = {m, dnn == 1, g};
        LB_TRY(lb_gpu_time_runs(m->stream, CHOICE_REPS, run_gelu, &r, &ms[dnn], err));
    }
    m->gelu_src = ms[1] < ms[0] ? LB_GELU_PRODUCT_CUDNN : LB_GELU_PRODUCT_CUBLASLT;
    LB_INFO("MLP input product with GELU: cuDNN %.1f us, cuBLASLt %.1f us: %s", 1e3f * ms[1],
            1e3f * ms[0], m->gelu_src == LB_GELU_PRODUCT_CUDNN ? "cuDNN" : "cuBLASLt");
    return LB_OK;
}

const char *lb_model_gpu_attention(const lb_model_gpu *m, bool backward) {
    lb_gpu_attn_choice s = m->attn_src[backward];
    return s == LB_GPU_ATTN_AUTO ? "untimed" : lb_gpu_attn_choice_name(s);
}

const char *lb_model_gpu_gelu_product(const lb_model_gpu *m) {
    if (!fuse_gelu(m)) return "unfused";
    return m->gelu_src == LB_GELU_PRODUCT_AUTO    ? "untimed"
           : m->gelu_src == LB_GELU_PRODUCT_CUDNN ? "cudnn"
                                                  : "cublaslt";
}

#endif
