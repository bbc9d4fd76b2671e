/* selftest.c: kernel and model checks against the CPU reference (selftest/selftest.h).
 *
 * A check allocates its device buffers through a small context that frees them at the
 * end and remembers the first CUDA failure, so each check reads as: make inputs, run the
 * reference, run the kernel, compare. */
#include "selftest/selftest.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/log.h"
#include "core/progress.h"
#include "core/rng.h"
#include "core/signals.h"

lb_selftest_params lb_selftest_default_params(void) {
    lb_selftest_params p = {
        .device = 0, .seed = 0, .kernels = true, .model = true, .only = NULL, .progress = true};
    return p;
}

void lb_selftest_report_free(lb_selftest_report *rep) {
    if (rep == NULL) return;
    free(rep->rows);
    memset(rep, 0, sizeof *rep);
}

#ifndef LB_HAVE_CUDA

lb_status lb_selftest_run(const lb_selftest_params *p, lb_selftest_report *rep, lb_err *err) {
    (void)p;
    memset(rep, 0, sizeof *rep);
    return lb_fail(err, LB_ERR_UNSUPPORTED,
                   "this llmbench was built without CUDA: no GPU kernels to test");
}

#else

#include <cuda_runtime.h>

#include "engine/engine.h"
#include "gpu/blas/matmul.h"
#include "gpu/blas/slices.cuh"
#include "gpu/blas/slices.h"
#include "gpu/blas/tf32.cuh"
#include "gpu/blas/tf32.h"
#include "gpu/check.h"
#include "gpu/cudnn/attn.h"
#include "gpu/cudnn/gelu.h"
#include "gpu/graph.cuh"
#include "kernels/act.cuh"
#include "kernels/adamw.cuh"
#include "kernels/attention.cuh"
#include "kernels/embed.cuh"
#include "kernels/gemv.cuh"
#include "kernels/logits.cuh"
#include "kernels/loss.cuh"
#include "kernels/nf4.cuh"
#include "kernels/norm.cuh"
#include "kernels/paged.cuh"
#include "kernels/rope.cuh"
#include "model/lora.h"
#include "model/model.h"
#include "model/model_gpu.h"
#include "model/nf4.h"
#include "model/ref.h"

#define BIG_ENGINE        "engine.llama3.1-8b" /* --only that runs the engine at Llama 3.1 8B's size */

typedef struct {
    lb_gpu_dtype dt;
    lb_precision prec;
    const char *name;
    double atol, rtol;           /* per element, kernels */
    double model_rel;            /* relative L2 bound, whole model */
    lb_blas_fp32_mode fp32_mode; /* how the model's fp32 products run */
} prec_t;

static const prec_t PRECS[3] = {
    {LB_DT_F32, LB_PREC_FP32, "fp32", 1e-4, 2e-3, 2e-3},
    {LB_DT_F16, LB_PREC_FP16, "fp16", 2e-3, 1e-2, 2e-2},
    {LB_DT_BF16, LB_PREC_BF16, "bf16", 1e-2, 4e-2, 6e-2},
};
/* fp32 with 3xTF32 products: fp32's tolerances, the mode's own label */
static const prec_t SPLIT = {LB_DT_F32, LB_PREC_FP32, "3xtf32",           1e-4,
                             2e-3,      2e-3,         LB_BLAS_FP32_3XTF32};
/* fp32 with int8 digit-plane products, and with each product the faster way: the same */
static const prec_t CUT = {LB_DT_F32, LB_PREC_FP32, "int8", 1e-4, 2e-3, 2e-3, LB_BLAS_FP32_INT8};
static const prec_t AUTO = {LB_DT_F32, LB_PREC_FP32, "auto", 1e-4, 2e-3, 2e-3, LB_BLAS_FP32_AUTO};

/* matmul.accuracy bound on |d - ref| / (sum_k |a b| + |beta c| + |bias|) against an fp64
 * reference: fp32 products stay near 1e-7; one TF32 pass (2^-11 per term) lands near
 * 5e-4 / sqrt(k), above it for every k the check uses. */
#define FP32_SCALED_BOUND 4e-6

#define MAX_BUFS 64

typedef struct {
    void *bufs[MAX_BUFS];
    int n;
    lb_status st;
    lb_err *err;
    lb_rng rng;
    lb_selftest_report *rep;
    const lb_selftest_params *p;
    bool dnn_noted; /* cuDNN's absence has been said once */
    lb_progress prog;
} ctx;

static void *dev(ctx *c, size_t bytes) {
    if (c->st != LB_OK) return NULL;
    void *ptr = NULL;
    cudaError_t e = cudaMalloc(&ptr, bytes > 0 ? bytes : 4);
    if (e != cudaSuccess || c->n == MAX_BUFS) {
        c->st = lb_gpu_fail_at(c->err, "CUDA", (int)e, cudaGetErrorString(e), "cudaMalloc",
                               __func__, __FILE__, __LINE__);
        return NULL;
    }
    cudaMemset(ptr, 0, bytes);
    c->bufs[c->n++] = ptr;
    return ptr;
}

static void release(ctx *c) {
    cudaDeviceSynchronize();
    for (int i = 0; i < c->n; i++)
        cudaFree(c->bufs[i]);
    c->n = 0;
}

static void check(ctx *c, lb_status st) {
    if (c->st == LB_OK && st != LB_OK) c->st = st;
}

static void check_cuda(ctx *c, cudaError_t e, const char *what) {
    if (c->st == LB_OK && e != cudaSuccess)
        c->st = lb_gpu_fail_at(c->err, "CUDA", (int)e, cudaGetErrorString(e), what, __func__,
                               __FILE__, __LINE__);
}

static float *hnew(size_t n) {
    return calloc(n > 0 ? n : 1, sizeof(float));
}

static void randn(ctx *c, float *x, size_t n, float scale) {
    for (size_t i = 0; i < n; i++)
        x[i] = scale * (float)lb_rng_normal(&c->rng);
}

/* Host fp32 -> device buffer of type dt; host is rounded to dt in place. */
static void *up(ctx *c, float *host, size_t n, lb_gpu_dtype dt) {
    float *f = dev(c, n * 4);
    void *d = dt == LB_DT_F32 ? f : dev(c, n * lb_dtype_bytes(dt));
    if (c->st != LB_OK) return NULL;
    check_cuda(c, cudaMemcpy(f, host, n * 4, cudaMemcpyHostToDevice), "cudaMemcpy up");
    if (dt != LB_DT_F32) {
        check(c, lb_act_convert(d, dt, f, LB_DT_F32, (int64_t)n, 0, c->err));
        check(c, lb_act_convert(f, LB_DT_F32, d, dt, (int64_t)n, 0, c->err));
        check_cuda(c, cudaMemcpy(host, f, n * 4, cudaMemcpyDeviceToHost), "cudaMemcpy round");
    }
    return d;
}

static void down(ctx *c, float *host, const void *d, size_t n, lb_gpu_dtype dt) {
    if (c->st != LB_OK) return;
    if (dt == LB_DT_F32) {
        check_cuda(c, cudaMemcpy(host, d, n * 4, cudaMemcpyDeviceToHost), "cudaMemcpy down");
        return;
    }
    float *f = dev(c, n * 4);
    if (c->st != LB_OK) return;
    check(c, lb_act_convert(f, LB_DT_F32, d, dt, (int64_t)n, 0, c->err));
    check_cuda(c, cudaMemcpy(host, f, n * 4, cudaMemcpyDeviceToHost), "cudaMemcpy down");
}

static void *upi(ctx *c, const int32_t *host, size_t n) {
    void *d = dev(c, n * 4);
    if (d) check_cuda(c, cudaMemcpy(d, host, n * 4, cudaMemcpyHostToDevice), "cudaMemcpy ids");
    return d;
}

/* Whether --only keeps a row of op (its name starts with it; BIG_ENGINE keeps its check's). */
static bool row_wanted(const ctx *c, const char *op) {
    const char *only = c->p->only;
    return only == NULL || strcmp(only, BIG_ENGINE) == 0 || strncmp(op, only, strlen(only)) == 0;
}

/* A new row of the report; NULL when --only leaves it out, when a signal ended the run
 * (c->st says so, and the checks after it run no further), or without host memory. */
static lb_selftest_row *add_row(ctx *c, const char *op, const char *shape, const char *prec) {
    if (lb_signals_interrupted() && c->st == LB_OK)
        c->st = lb_fail(c->err, LB_ERR_INTERRUPTED, "interrupted after %zu checks", c->rep->n);
    if (c->st == LB_ERR_INTERRUPTED || !row_wanted(c, op)) return NULL;
    lb_selftest_report *r = c->rep;
    if (r->n == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 64;
        lb_selftest_row *nr = realloc(r->rows, cap * sizeof *nr);
        if (nr == NULL) return NULL;
        r->rows = nr;
        r->cap = cap;
    }
    lb_selftest_row *row = &r->rows[r->n++];
    memset(row, 0, sizeof *row);
    snprintf(row->op, sizeof row->op, "%s", op);
    snprintf(row->shape, sizeof row->shape, "%s", shape);
    snprintf(row->precision, sizeof row->precision, "%s", prec);
    lb_progress_update(&c->prog, false, "selftest: %zu checks, %d failed; %s %s", r->n, r->n_failed,
                       op, prec);
    return row;
}

/* Differences of gpu from ref: the largest |gpu - ref| / (slack (atol + rtol |ref|)), the
 * largest |gpu - ref| and the relative L2 error; NaN anywhere makes the ratios infinite. */
typedef struct {
    double worst, max_abs, rel_l2;
} diff_t;

static diff_t differences(const prec_t *pr, double slack, const float *gpu, const float *ref,
                          size_t n) {
    diff_t r = {0};
    double num = 0.0, den = 0.0;
    bool nan = false;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)gpu[i] - (double)ref[i]);
        if (isnan(d)) nan = true;
        double ratio = d / (slack * (pr->atol + pr->rtol * fabs((double)ref[i])));
        if (ratio > r.worst) r.worst = ratio;
        if (d > r.max_abs) r.max_abs = d;
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    r.rel_l2 = sqrt(num) / (sqrt(den) + 1e-30);
    if (nan) r.worst = r.rel_l2 = r.max_abs = INFINITY;
    return r;
}

/* One result row; a failed one is counted. */
static void record(ctx *c, const char *op, const char *shape, const char *prec, double ratio,
                   double max_abs, bool pass) {
    lb_selftest_row *row = add_row(c, op, shape, prec);
    if (row == NULL) return;
    row->err_ratio = ratio;
    row->max_abs = max_abs;
    row->pass = pass;
    if (!pass) c->rep->n_failed++;
}

/* Element-wise comparison; a NaN anywhere fails. */
static void compare(ctx *c, const char *op, const char *shape, const prec_t *pr, const float *gpu,
                    const float *ref, size_t n) {
    if (c->st != LB_OK) return;
    diff_t d = differences(pr, 1.0, gpu, ref, n);
    record(c, op, shape, pr->name, d.worst, d.max_abs, d.worst <= 1.0);
}

/* Relative L2 comparison against a bound. */
static void compare_l2(ctx *c, const char *op, const char *shape, const prec_t *pr, double bound,
                       const float *gpu, const float *ref, size_t n) {
    diff_t d = differences(pr, 1.0, gpu, ref, n);
    record(c, op, shape, pr->name, d.rel_l2 / bound, d.max_abs, d.rel_l2 <= bound);
}

/* 16-bit kernels whose outputs sum many products of operands rounded to 16 bits (P and
 * dS in the attention backward), which the fp32 reference does not round: the relative L2
 * error against `bound`, and each element against the per-element tolerance widened by
 * `slack`, since single elements' rounding errors reach about twice their usual share
 * (bf16, B2 T100: 0.37-0.53 of the tolerance typically, 1.03 in one seed of many). A
 * localised fault (a row, a head, a mask) still fails the element check by far. The
 * ratio is the larger of the two, so 1 is the limit for both. */
static void compare_rounded(ctx *c, const char *op, const char *shape, const prec_t *pr,
                            double bound, double slack, const float *gpu, const float *ref,
                            size_t n) {
    diff_t d = differences(pr, slack, gpu, ref, n);
    double l2 = d.rel_l2 / bound;
    double ratio = l2 > d.worst ? l2 : d.worst;
    record(c, op, shape, pr->name, ratio, d.max_abs, ratio <= 1.0);
}

/* out[c] = sum over rows r < n of x[r * cols + c] (double accumulation) */
static void column_sums(float *out, const float *x, int64_t n, int cols) {
    for (int c = 0; c < cols; c++) {
        double acc = 0.0;
        for (int64_t r = 0; r < n; r++)
            acc += x[r * cols + c];
        out[c] = (float)acc;
    }
}

/* Whether --only asks for a check group (its rows' names start with the group's: "rope" for
 * rope.fwd, "nf4" for nf4_quantize): the group's name starts with it ("att"), or it names
 * rows inside the group ("rope.fwd", "nf4_dequantize"; row_wanted keeps those rows). */
static bool wanted(ctx *c, const char *group) {
    const char *only = c->p->only;
    if (only == NULL) return true;
    if (strcmp(only, BIG_ENGINE) == 0) return false; /* that check alone */
    size_t n = strlen(only), g = strlen(group);
    return strncmp(group, only, n) == 0 ||
           (strncmp(only, group, g) == 0 && (only[g] == '.' || only[g] == '_'));
}

/* ---- kernels ----------------------------------------------------------------------------- */

static void check_embed(ctx *c, const prec_t *pr, int B, int T, int C, int V, bool pos) {
    char shape[56];
    snprintf(shape, sizeof shape, "B%d T%d C%d V%d%s", B, T, C, V, pos ? " +pos" : "");
    size_t n = (size_t)B * T * C;
    float *wte = hnew((size_t)V * C), *wpe = hnew((size_t)T * C), *out = hnew(n), *ref = hnew(n);
    int32_t *ids = malloc(sizeof(int32_t) * B * T);
    for (int i = 0; i < B * T; i++)
        ids[i] = (int32_t)lb_rng_below(&c->rng, (uint64_t)V);
    randn(c, wte, (size_t)V * C, 1.0f);
    randn(c, wpe, (size_t)T * C, 1.0f);
    void *d_wte = up(c, wte, (size_t)V * C, pr->dt), *d_wpe = up(c, wpe, (size_t)T * C, pr->dt);
    void *d_ids = upi(c, ids, (size_t)B * T), *d_out = dev(c, n * lb_dtype_bytes(pr->dt));
    if (c->st == LB_OK) {
        if (pos)
            lb_ref_encoder_forward(ref, ids, wte, wpe, B, T, C);
        else
            lb_ref_embedding_forward(ref, ids, wte, B, T, C);
        check(c, lb_embed_forward(d_out, d_ids, d_wte, pos ? d_wpe : NULL, B, T, C, pr->dt, 0,
                                  c->err));
        down(c, out, d_out, n, pr->dt);
        compare(c, "embed.fwd", shape, pr, out, ref, n);
    }
    release(c);
    free(wte), free(wpe), free(out), free(ref), free(ids);
}

/* The sorted backward (every data-parallel rank adds all ranks' rows): scale x the
 * reference gradients added to nonzero ones (the averaged head's) in an element range
 * that starts and ends inside rows, gradients of type gt, and bitwise the same sums on a
 * second run (its order is the ids', not the scheduling's: V below B x T repeats tokens
 * many times). */
static void check_embed_sorted(ctx *c, const prec_t *pr, lb_gpu_dtype gt, int B, int T, int C,
                               int V) {
    char shape[64];
    snprintf(shape, sizeof shape, "B%d T%d C%d V%d, %s gradients", B, T, C, V,
             gt == LB_DT_F32 ? "fp32" : "16-bit");
    int n = B * T;
    size_t nte = (size_t)V * C, npe = (size_t)T * C;
    int64_t wlo = C / 2 + 1, whi = (int64_t)nte - C / 2 - 3, plo = 3, phi = (int64_t)npe - 5;
    size_t gs = lb_dtype_bytes(gt);
    float scale = 0.5f;
    float *dout = hnew((size_t)n * C), *head = hnew(nte), *pos = hnew(npe);
    float *rte = hnew(nte), *rpe = hnew(npe), *gte = hnew(nte), *gpe = hnew(npe);
    float *again = hnew(nte);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n);
    for (int i = 0; i < n; i++)
        ids[i] = (int32_t)lb_rng_below(&c->rng, (uint64_t)V);
    randn(c, dout, (size_t)n * C, 1.0f);
    randn(c, head, nte, 1.0f);
    randn(c, pos, npe, 1.0f);
    void *d_dout = up(c, dout, (size_t)n * C, pr->dt), *d_ids = upi(c, ids, (size_t)n);
    /* the starting gradients in gt (rounded on the host too) */
    void *d_head = up(c, head + wlo, (size_t)(whi - wlo), gt);
    void *d_pos = up(c, pos + plo, (size_t)(phi - plo), gt);
    size_t tmp_bytes = lb_embed_sort_bytes(n, V);
    void *d_tmp = dev(c, tmp_bytes);
    int32_t *d_keys = dev(c, (size_t)n * 4), *d_rows = dev(c, (size_t)n * 4);
    void *d_te = dev(c, nte * gs), *d_pe = dev(c, npe * gs);
    if (c->st == LB_OK) {
        lb_ref_encoder_backward(rte, rpe, dout, ids, B, T, C);
        for (size_t i = 0; i < nte; i++)
            rte[i] = head[i] + scale * rte[i];
        for (size_t i = 0; i < npe; i++)
            rpe[i] = pos[i] + scale * rpe[i];
        check(c, lb_embed_sort_ids(d_keys, d_rows, d_ids, n, V, d_tmp, tmp_bytes, 0, c->err));
        for (int run = 0; run < 2 && c->st == LB_OK; run++) {
            check_cuda(c,
                       cudaMemcpy(d_te, d_head, (size_t)(whi - wlo) * gs, cudaMemcpyDeviceToDevice),
                       "cudaMemcpy head");
            check_cuda(c,
                       cudaMemcpy(d_pe, d_pos, (size_t)(phi - plo) * gs, cudaMemcpyDeviceToDevice),
                       "cudaMemcpy pos");
            check(c, lb_embed_backward_sorted(d_te, wlo, whi, d_pe, plo, phi, d_dout, d_keys,
                                              d_rows, B, T, C, scale, pr->dt, gt, 0, c->err));
            down(c, run == 0 ? gte : again, d_te, (size_t)(whi - wlo), gt);
        }
        down(c, gpe, d_pe, (size_t)(phi - plo), gt);
        compare(c, "embed.bwd.sorted.dwte", shape, pr, gte, rte + wlo, (size_t)(whi - wlo));
        compare(c, "embed.bwd.sorted.dwpe", shape, pr, gpe, rpe + plo, (size_t)(phi - plo));
        bool same = memcmp(gte, again, (size_t)(whi - wlo) * 4) == 0;
        if (c->st == LB_OK)
            record(c, "embed.bwd.sorted.repeat", shape, pr->name, same ? 0.0 : INFINITY, 0.0, same);
    }
    release(c);
    free(dout), free(head), free(pos), free(rte), free(rpe), free(gte), free(gpe), free(again),
        free(ids);
}

static void check_norm(ctx *c, const prec_t *pr, int N, int C, bool layer) {
    char shape[56];
    snprintf(shape, sizeof shape, "N%d C%d", N, C);
    size_t n = (size_t)N * C;
    float *x = hnew(n), *w = hnew(C), *b = hnew(C), *dout = hnew(n);
    float *ref = hnew(n), *out = hnew(n), *mean = hnew(N), *rstd = hnew(N);
    float *dx = hnew(n), *dw = hnew(C), *db = hnew(C), *gdx = hnew(n), *gdw = hnew(C),
          *gdb = hnew(C);
    float *ds = hnew(C), *gds = hnew(C);
    randn(c, x, n, 2.0f);
    for (size_t i = 0; i < n; i++)
        x[i] += 0.5f;
    randn(c, w, C, 1.0f);
    randn(c, b, C, 1.0f);
    randn(c, dout, n, 1.0f);
    randn(c, dx, n, 1.0f); /* the residual gradient the backward adds to */
    void *d_x = up(c, x, n, pr->dt), *d_w = up(c, w, C, pr->dt), *d_b = up(c, b, C, pr->dt);
    void *d_dout = up(c, dout, n, pr->dt), *d_out = dev(c, n * lb_dtype_bytes(pr->dt));
    void *d_dx = up(c, dx, n, pr->dt);
    float *d_mean = dev(c, N * 4), *d_rstd = dev(c, N * 4), *d_dw = dev(c, C * 4),
          *d_db = dev(c, C * 4);
    float *d_ds = dev(c, C * 4);
    const char *fw = layer ? "layernorm.fwd" : "rmsnorm.fwd";
    if (c->st == LB_OK) {
        if (layer) {
            lb_ref_layernorm_forward(ref, mean, rstd, x, w, b, 1, N, C, 1e-5f);
            check(c, lb_norm_layernorm_forward(d_out, C, d_mean, d_rstd, d_x, d_w, d_b, N, C, 1e-5f,
                                               pr->dt, 0, c->err));
            lb_ref_layernorm_backward(dx, dw, db, dout, x, w, mean, rstd, 1, N, C);
        } else {
            lb_ref_rmsnorm_forward(ref, rstd, x, w, 1, N, C, 1e-5f);
            check(c,
                  lb_norm_rmsnorm_forward(d_out, d_rstd, d_x, d_w, N, C, 1e-5f, pr->dt, 0, c->err));
            lb_ref_rmsnorm_backward(dx, dw, dout, x, w, rstd, 1, N, C);
        }
        down(c, out, d_out, n, pr->dt);
        compare(c, fw, shape, pr, out, ref, n);
        /* backward from the GPU's own statistics (they are checked through the output) */
        if (layer)
            check(c, lb_norm_layernorm_backward(d_dx, d_dw, d_db, d_ds, d_dout, d_x, d_w, d_mean,
                                                d_rstd, N, C, pr->dt, 0, c->err));
        else
            check(c, lb_norm_rmsnorm_backward(d_dx, d_dw, d_ds, d_dout, d_x, d_w, d_rstd, N, C,
                                              pr->dt, 0, c->err));
        down(c, gdx, d_dx, n, pr->dt);
        down(c, gdw, d_dw, C, LB_DT_F32);
        compare(c, layer ? "layernorm.bwd.dinp" : "rmsnorm.bwd.dinp", shape, pr, gdx, dx, n);
        compare(c, layer ? "layernorm.bwd.dweight" : "rmsnorm.bwd.dweight", shape, pr, gdw, dw, C);
        /* dsum: the column sums of the residual gradient it wrote */
        column_sums(ds, dx, N, C);
        down(c, gds, d_ds, C, LB_DT_F32);
        compare(c, layer ? "layernorm.bwd.dsum" : "rmsnorm.bwd.dsum", shape, pr, gds, ds, C);
        if (layer) {
            down(c, gdb, d_db, C, LB_DT_F32);
            compare(c, "layernorm.bwd.dbias", shape, pr, gdb, db, C);
        }
        /* recompute gives the forward's output */
        check(c, lb_norm_recompute(d_dx, C, d_x, d_w, layer ? d_b : NULL, layer ? d_mean : NULL,
                                   d_rstd, N, C, pr->dt, 0, c->err));
        down(c, gdx, d_dx, n, pr->dt);
        compare(c, layer ? "layernorm.recompute" : "rmsnorm.recompute", shape, pr, gdx, ref, n);
    }
    release(c);
    free(x), free(w), free(b), free(dout), free(ref), free(out), free(mean), free(rstd);
    free(dx), free(dw), free(db), free(gdx), free(gdw), free(gdb), free(ds), free(gds);
}

/* dst [cols, rows] = src [rows, cols] transposed */
static void transpose(float *dst, const float *src, size_t rows, size_t cols) {
    for (size_t r = 0; r < rows; r++)
        for (size_t j = 0; j < cols; j++)
            dst[j * rows + r] = src[r * cols + j];
}

/* The device matrix d [rows, cols] (with cols_major, stored [cols, rows]) into host out
 * [rows, cols]; tmp is scratch of the same size. */
static void down_matrix(ctx *c, float *out, float *tmp, const void *d, size_t rows, size_t cols,
                        bool cols_major, lb_gpu_dtype dt) {
    down(c, cols_major ? tmp : out, d, rows * cols, dt);
    if (cols_major) transpose(out, tmp, cols, rows);
}

/* cuDNN's GELU product (gpu/cudnn/gelu.h) on check_matmul's problem g (an
 * LB_EPI_GELU_AUX_BIAS product with trans_b), with its outputs stored as g's and
 * transposed ("cols"), poisoned first: D against gelu, aux against the pre-activation pre.
 * Without cuDNN, one note a run and no rows. */
static void check_gelu_cudnn(ctx *c, const prec_t *pr, const char *shape, const lb_blas_gemm *g,
                             const float *gelu, const float *pre, float *out) {
    size_t no = (size_t)g->m * g->n;
    float *tmp = hnew(no);
    for (int cols = 0; cols < 2 && c->st == LB_OK; cols++) {
        lb_cudnn_gelu *p = NULL;
        lb_err why;
        if (lb_cudnn_gelu_init(&p, g->m, g->n, g->k, g->lda, cols, pr->dt, &why) != LB_OK) {
            if (!c->dnn_noted) LB_WARN("selftest: cuDNN's kernels not checked: %s", why.msg);
            c->dnn_noted = true;
            break;
        }
        char label[64];
        snprintf(label, sizeof label, "%s%s", shape, cols ? " cols" : "");
        size_t ws = lb_cudnn_gelu_workspace_bytes(p);
        void *d_ws = ws > 0 ? dev(c, ws) : NULL;
        check_cuda(c, cudaMemset(g->d, 0xff, no * lb_dtype_bytes(pr->dt)), "poison D");
        check_cuda(c, cudaMemset(g->aux, 0xff, no * lb_dtype_bytes(pr->dt)), "poison aux");
        check(c, lb_cudnn_gelu_forward(p, g->d, g->aux, g->a, g->b, g->bias, d_ws, 0, c->err));
        down_matrix(c, out, tmp, g->d, (size_t)g->m, (size_t)g->n, cols, pr->dt);
        compare(c, "matmul.fwd+bias+gelu.cudnn", label, pr, out, gelu, no);
        down_matrix(c, out, tmp, g->aux, (size_t)g->m, (size_t)g->n, cols, pr->dt);
        compare(c, "matmul.fwd.gelu_aux.cudnn", label, pr, out, pre, no);
        lb_cudnn_gelu_free(p);
    }
    free(tmp);
}

static void check_matmul(ctx *c, const prec_t *pr, lb_blas *blas, int N, int IC, int OC) {
    char shape[56];
    snprintf(shape, sizeof shape, "N%d IC%d OC%d", N, IC, OC);
    size_t ni = (size_t)N * IC, no = (size_t)N * OC, nw = (size_t)OC * IC;
    float *x = hnew(ni), *w = hnew(nw), *b = hnew(OC), *dout = hnew(no), *ref = hnew(no),
          *out = hnew(no);
    float *dx = hnew(ni), *dw = hnew(nw), *db = hnew(OC), *gdx = hnew(ni), *gdw = hnew(nw),
          *gdb = hnew(OC);
    randn(c, x, ni, 1.0f);
    randn(c, w, nw, 0.1f);
    randn(c, b, OC, 1.0f);
    randn(c, dout, no, 1.0f);
    size_t es = lb_dtype_bytes(pr->dt);
    void *d_x = up(c, x, ni, pr->dt), *d_w = up(c, w, nw, pr->dt), *d_b = up(c, b, OC, pr->dt);
    void *d_dout = up(c, dout, no, pr->dt), *d_out = dev(c, no * es), *d_dx = dev(c, ni * es);
    float *d_dw = dev(c, nw * 4), *d_db = dev(c, OC * 4);
    if (c->st == LB_OK) {
        lb_ref_matmul_forward(ref, x, w, b, 1, N, IC, OC);
        lb_blas_gemm g = {.m = N,
                          .n = OC,
                          .k = IC,
                          .a = d_x,
                          .lda = IC,
                          .b = d_w,
                          .ldb = IC,
                          .trans_b = true,
                          .ab_type = pr->dt,
                          .d = d_out,
                          .ldd = OC,
                          .d_type = pr->dt,
                          .alpha = 1.0f,
                          .epilogue = LB_EPI_BIAS,
                          .bias = d_b};
        check(c, lb_blas_gemm_run(blas, &g, NULL, c->err));
        down(c, out, d_out, no, pr->dt);
        compare(c, "matmul.fwd+bias", shape, pr, out, ref, no);
        check(c, lb_ref_matmul_backward(dx, dw, db, dout, x, w, 1, N, IC, OC, c->err));
        lb_blas_gemm gi = {.m = N,
                           .n = IC,
                           .k = OC,
                           .a = d_dout,
                           .lda = OC,
                           .b = d_w,
                           .ldb = IC,
                           .ab_type = pr->dt,
                           .d = d_dx,
                           .ldd = IC,
                           .d_type = pr->dt,
                           .alpha = 1.0f};
        check(c, lb_blas_gemm_run(blas, &gi, NULL, c->err));
        lb_blas_gemm gw = {.m = OC,
                           .n = IC,
                           .k = N,
                           .a = d_dout,
                           .lda = OC,
                           .trans_a = true,
                           .b = d_x,
                           .ldb = IC,
                           .ab_type = pr->dt,
                           .c = d_dw,
                           .d = d_dw,
                           .ldd = IC,
                           .d_type = LB_DT_F32,
                           .alpha = 1.0f,
                           .beta = 1.0f};
        check(c, lb_blas_gemm_run(blas, &gw, NULL, c->err));
        check(c, lb_act_bias_backward(d_db, d_dout, N, OC, OC, pr->dt, 0, c->err));
        down(c, gdx, d_dx, ni, pr->dt);
        down(c, gdw, d_dw, nw, LB_DT_F32);
        down(c, gdb, d_db, OC, LB_DT_F32);
        compare(c, "matmul.bwd.dinp", shape, pr, gdx, dx, ni);
        compare(c, "matmul.bwd.dweight", shape, pr, gdw, dw, nw);
        compare(c, "matmul.bwd.dbias", shape, pr, gdb, db, OC);
        /* GELU epilogues: forward D = gelu(x W^T + b) with aux = pre-activation; backward
         * D = (dout W) * gelu'(aux) */
        float *gelu = hnew(no), *dpre = hnew(ni);
        lb_ref_gelu_forward(gelu, ref, (int64_t)no);
        void *d_aux = dev(c, no * es);
        g.epilogue = LB_EPI_GELU_AUX_BIAS, g.aux = d_aux;
        check(c, lb_blas_gemm_run(blas, &g, NULL, c->err));
        down(c, out, d_out, no, pr->dt);
        compare(c, "matmul.fwd+bias+gelu", shape, pr, out, gelu, no);
        down(c, out, d_aux, no, pr->dt);
        compare(c, "matmul.fwd.gelu_aux", shape, pr, out, ref, no);
        if (pr->dt != LB_DT_F32) check_gelu_cudnn(c, pr, shape, &g, gelu, ref, out);
        if (IC == OC) { /* DGELU needs aux shaped like D: [N, IC] */
            float *pre = hnew(ni);
            randn(c, pre, ni, 1.5f);
            void *d_pre = up(c, pre, ni, pr->dt);
            lb_ref_gelu_backward(dpre, pre, dx, (int64_t)ni);
            gi.epilogue = LB_EPI_DGELU, gi.aux = d_pre;
            check(c, lb_blas_gemm_run(blas, &gi, NULL, c->err));
            down(c, gdx, d_dx, ni, pr->dt);
            compare(c, "matmul.bwd.dgelu", shape, pr, gdx, dpre, ni);
            /* the same with the gradient and aux feature-major: D^T = W^T dout^T */
            float *pre_t = hnew(ni);
            transpose(pre_t, pre, (size_t)N, (size_t)IC);
            lb_blas_gemm gt = {.m = IC,
                               .n = N,
                               .k = OC,
                               .a = d_w,
                               .lda = IC,
                               .trans_a = true,
                               .b = d_dout,
                               .ldb = OC,
                               .trans_b = true,
                               .ab_type = pr->dt,
                               .d = d_dx,
                               .ldd = N,
                               .d_type = pr->dt,
                               .alpha = 1.0f,
                               .epilogue = LB_EPI_DGELU,
                               .aux = up(c, pre_t, ni, pr->dt)};
            if (c->st == LB_OK) check(c, lb_blas_gemm_run(blas, &gt, NULL, c->err));
            down_matrix(c, gdx, pre_t, d_dx, (size_t)N, (size_t)IC, true, pr->dt);
            char label[64];
            snprintf(label, sizeof label, "%s cols", shape);
            compare(c, "matmul.bwd.dgelu", label, pr, gdx, dpre, ni);
            free(pre), free(pre_t);
        }
        free(gelu), free(dpre);
    }
    release(c);
    free(x), free(w), free(b), free(dout), free(ref), free(out), free(dx), free(dw), free(db),
        free(gdx), free(gdw), free(gdb);
}

/* The split kernel against the host rule, bit for bit, on a strided matrix with special
 * values (infinities, NaN, the largest finite values, subnormals, rounding ties). */
static void check_tf32_split(ctx *c, int rows, int cols, int ld_src, int ld_dst) {
    char shape[56];
    snprintf(shape, sizeof shape, "%dx%d ld %d->%d", rows, cols, ld_src, ld_dst);
    size_t ns = (size_t)rows * ld_src, nd = (size_t)rows * ld_dst;
    float *x = hnew(ns), *hi = hnew(nd), *lo = hnew(nd);
    randn(c, x, ns, 1.0f);
    for (size_t i = 0; i < ns; i++)
        x[i] = ldexpf(x[i], (int)lb_rng_below(&c->rng, 60) - 30);
    const float special[] = {INFINITY,           -INFINITY, NAN,     3.4028235e38f,
                             -3.4028235e38f,     1e-40f,    -3e-39f, 1.0f + 0x1p-11f,
                             -(1.0f + 0x1p-11f), 0.0f};
    for (int i = 0; i < (int)(sizeof special / sizeof special[0]); i++)
        x[(size_t)(i % rows) * ld_src + (size_t)(i * 3 % cols)] = special[i];
    float *d_x = up(c, x, ns, LB_DT_F32), *d_hi = dev(c, nd * 4), *d_lo = dev(c, nd * 4);
    if (c->st == LB_OK) {
        check(c, lb_gpu_tf32_split(d_hi, d_lo, ld_dst, d_x, ld_src, rows, cols, 0, c->err));
        down(c, hi, d_hi, nd, LB_DT_F32);
        down(c, lo, d_lo, nd, LB_DT_F32);
        int64_t wrong = 0;
        for (int r = 0; r < rows; r++)
            for (int k = 0; k < cols; k++) {
                float h, l, gh = hi[(size_t)r * ld_dst + k], gl = lo[(size_t)r * ld_dst + k];
                lb_tf32_split(x[(size_t)r * ld_src + k], &h, &l);
                if (memcmp(&h, &gh, 4) != 0 || memcmp(&l, &gl, 4) != 0) wrong++;
            }
        if (c->st == LB_OK)
            record(c, "tf32.split", shape, "fp32", (double)wrong, (double)wrong, wrong == 0);
    }
    release(c);
    free(x), free(hi), free(lo);
}

/* The digit-plane cut against the host rule, byte for byte, both ways a row can lie in
 * memory (along it, or down a column of a padded matrix), with special values: a row
 * with an infinity, one with NaN, one of zeros, the largest finite values, subnormals. */
static void check_slices_cut(ctx *c, int rows, int k, int ld, bool k_contig) {
    char shape[56];
    snprintf(shape, sizeof shape, "%d rows of %d, ld %d, %s", rows, k, ld,
             k_contig ? "along" : "down");
    const int s = LB_SLICES;
    int64_t kp = (k + 15) / 16 * 16;
    size_t ns = (size_t)(k_contig ? rows : k) * ld, nd = (size_t)rows * s * kp;
    float *x = hnew(ns);
    int8_t *got = malloc(nd), *want = calloc(nd, 1);
    uint32_t *amax = malloc((size_t)rows * 4);
    randn(c, x, ns, 1.0f);
    for (size_t i = 0; i < ns; i++)
        x[i] = ldexpf(x[i], (int)lb_rng_below(&c->rng, 40) - 20);
#define AT(r, p) x[k_contig ? (size_t)(r)*ld + (p) : (size_t)(p)*ld + (r)]
    AT(1, 2) = INFINITY, AT(2, 0) = NAN, AT(4, k - 1) = -3.4028235e38f, AT(5, 1) = 1e-40f;
    for (int p = 0; p < k; p++)
        AT(3, p) = 0.0f, AT(6, p) = p % 2 ? -3e-39f : 1e-45f;
    void *d_x = up(c, x, ns, LB_DT_F32), *d_dst = dev(c, nd), *d_amax = dev(c, (size_t)rows * 4);
    if (c->st == LB_OK) {
        check_cuda(c, cudaMemset(d_amax, 0, (size_t)rows * 4), "cudaMemset amax");
        check(c, lb_gpu_slices_cut(d_dst, d_amax, d_x, ld, k_contig, rows, k, kp, !k_contig, 0,
                                   c->err));
        check_cuda(c, cudaMemcpy(got, d_dst, nd, cudaMemcpyDeviceToHost), "cudaMemcpy planes");
        check_cuda(c, cudaMemcpy(amax, d_amax, (size_t)rows * 4, cudaMemcpyDeviceToHost),
                   "cudaMemcpy amax");
    }
    if (c->st == LB_OK) {
        int64_t wrong = 0;
        for (int r = 0; r < rows; r++) {
            uint32_t mb = 0, u; /* the largest |x| by bit pattern, as the rule orders them */
            for (int p = 0; p < k; p++) {
                memcpy(&u, &AT(r, p), 4);
                if ((u & 0x7fffffffu) > mb) mb = u & 0x7fffffffu;
            }
            wrong += amax[r] != mb;
            float m;
            memcpy(&m, &mb, 4);
            int32_t e = lb_slice_exponent(m);
            for (int p = 0; p < k && e != LB_SLICE_NONFINITE; p++) {
                int8_t d[LB_SLICES];
                lb_slice_digits(lb_slice_scaled(AT(r, p), e), s, d);
                for (int i = 0; i < s; i++)
                    want[(size_t)r * s * kp + (size_t)(k_contig ? i : s - 1 - i) * kp + p] = d[i];
            }
        }
#undef AT
        for (size_t i = 0; i < nd; i++)
            wrong += got[i] != want[i];
        record(c, "int8.cut", shape, "fp32", (double)wrong, (double)wrong, wrong == 0);
    }
    release(c);
    free(x), free(got), free(want), free(amax);
}

/* A chain of memset nodes: one larger than the limit, which stays, then 1-, 2- and 4-byte
 * elements (one pitched 2-D) over parts of it, replaced by kernel nodes (gpu/graph.cuh), so
 * a replacement that ran out of order shows. The bytes after the graph ran against the same
 * sets done on the host; err/tol counts wrong bytes (and a wrong count of replaced nodes). */
static void check_graph_memsets(ctx *c) {
    enum { BYTES = 8192, LIMIT = 4096 };
    struct cudaMemsetParams set[] = {
        {.pitch = 0, .value = 0x77, .elementSize = 1, .width = LIMIT + 1, .height = 1},
        {.pitch = 0, .value = 0xab, .elementSize = 1, .width = 1000, .height = 1},
        {.pitch = 1024, .value = 0x1234, .elementSize = 2, .width = 300, .height = 3},
        {.pitch = 0, .value = 0xdeadbeef, .elementSize = 4, .width = 1, .height = 1}};
    const size_t at[] = {0, 16, 1100, 4092}; /* byte offsets */
    const int n_sets = (int)(sizeof set / sizeof set[0]);
    unsigned char *host = malloc(BYTES), *back = malloc(BYTES);
    unsigned char *d = dev(c, BYTES);
    cudaGraph_t g = NULL;
    cudaGraphExec_t ge = NULL;
    int replaced = -1;
    if (host != NULL && back != NULL && c->st == LB_OK) {
        for (size_t i = 0; i < BYTES; i++)
            host[i] = (unsigned char)lb_rng_below(&c->rng, 256);
        check_cuda(c, cudaMemcpy(d, host, BYTES, cudaMemcpyHostToDevice), "upload");
        check_cuda(c, cudaGraphCreate(&g, 0), "cudaGraphCreate");
        cudaGraphNode_t prev = NULL;
        for (int k = 0; k < n_sets && c->st == LB_OK; k++) {
            set[k].dst = d + at[k];
            for (size_t r = 0; r < set[k].height; r++)
                for (size_t i = 0; i < set[k].width; i++)
                    for (unsigned b = 0; b < set[k].elementSize; b++)
                        host[at[k] + r * set[k].pitch + i * set[k].elementSize + b] =
                            (unsigned char)(set[k].value >> (8 * b)); /* little-endian */
            cudaGraphNode_t node;
            check_cuda(c,
                       cudaGraphAddMemsetNode(&node, g, prev ? &prev : NULL, prev ? 1 : 0, &set[k]),
                       "cudaGraphAddMemsetNode");
            prev = node;
        }
        if (c->st == LB_OK) check(c, lb_gpu_graph_memsets_to_kernels(g, LIMIT, &replaced, c->err));
        check_cuda(c, c->st == LB_OK ? cudaGraphInstantiate(&ge, g, 0) : cudaSuccess,
                   "instantiate");
        check_cuda(c, c->st == LB_OK ? cudaGraphLaunch(ge, 0) : cudaSuccess, "cudaGraphLaunch");
        check_cuda(
            c, c->st == LB_OK ? cudaMemcpy(back, d, BYTES, cudaMemcpyDeviceToHost) : cudaSuccess,
            "download");
    }
    if (ge) cudaGraphExecDestroy(ge);
    if (g) cudaGraphDestroy(g);
    if (c->st == LB_OK) {
        int64_t wrong = replaced == n_sets - 1 ? 0 : 1;
        for (size_t i = 0; i < BYTES; i++)
            wrong += host[i] != back[i];
        record(c, "graph.memsets", "4 nodes, 3 replaced", "-", (double)wrong, (double)wrong,
               wrong == 0);
    }
    release(c);
    free(host), free(back);
}

/* One fp32 product with strides, transposes, alpha, bias and (accumulate) beta against an
 * fp64 reference, scaled by the magnitudes summed (see FP32_SCALED_BOUND). */
static void check_matmul_accuracy(ctx *c, const char *label, lb_blas *blas, int m, int n, int k,
                                  bool ta, bool tb, int pad, bool accumulate) {
    char shape[56];
    snprintf(shape, sizeof shape, "m%d n%d k%d %c%c +%d%s", m, n, k, ta ? 'T' : 'N', tb ? 'T' : 'N',
             pad, accumulate ? " beta1" : "");
    int ra = ta ? k : m, ca = ta ? m : k, rb = tb ? n : k, cb = tb ? k : n;
    int lda = ca + pad, ldb = cb + pad, ldd = n + pad;
    size_t na = (size_t)ra * lda, nb = (size_t)rb * ldb, nd = (size_t)m * ldd;
    float *a = hnew(na), *b = hnew(nb), *d0 = hnew(nd), *d = hnew(nd), *bias = hnew(n);
    randn(c, a, na, 1.0f);
    randn(c, b, nb, 1.0f);
    randn(c, d0, nd, 4.0f);
    randn(c, bias, n, 1.0f);
    const float alpha = 0.75f, beta = accumulate ? 1.0f : 0.0f;
    float *d_a = up(c, a, na, LB_DT_F32), *d_b = up(c, b, nb, LB_DT_F32);
    float *d_d = up(c, d0, nd, LB_DT_F32), *d_bias = up(c, bias, n, LB_DT_F32);
    if (c->st == LB_OK) {
        lb_blas_gemm g = {.m = m,
                          .n = n,
                          .k = k,
                          .a = d_a,
                          .lda = lda,
                          .trans_a = ta,
                          .b = d_b,
                          .ldb = ldb,
                          .trans_b = tb,
                          .ab_type = LB_DT_F32,
                          .c = accumulate ? d_d : NULL,
                          .d = d_d,
                          .ldd = ldd,
                          .d_type = LB_DT_F32,
                          .alpha = alpha,
                          .beta = beta,
                          .epilogue = LB_EPI_BIAS,
                          .bias = d_bias};
        check(c, lb_blas_gemm_run(blas, &g, NULL, c->err));
        down(c, d, d_d, nd, LB_DT_F32);
    }
    if (c->st == LB_OK) {
        double worst = 0.0;
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) {
                double ref = 0.0, scale = 0.0;
                for (int q = 0; q < k; q++) {
                    double x = ta ? a[(size_t)q * lda + i] : a[(size_t)i * lda + q];
                    double y = tb ? b[(size_t)j * ldb + q] : b[(size_t)q * ldb + j];
                    ref += x * y;
                    scale += fabs(x * y);
                }
                double cin = beta * d0[(size_t)i * ldd + j];
                ref = alpha * ref + cin + bias[j];
                scale = alpha * scale + fabs(cin) + fabs(bias[j]);
                double e = fabs(d[(size_t)i * ldd + j] - ref) / (scale + 1e-30);
                if (!(e <= worst)) worst = e; /* NaN sticks */
            }
        record(c, "matmul.accuracy", shape, label,
               isnan(worst) ? INFINITY : worst / FP32_SCALED_BOUND, worst,
               worst <= FP32_SCALED_BOUND);
    }
    release(c);
    free(a), free(b), free(d0), free(d), free(bias);
}

/* The accuracy shapes: odd sizes, every transpose pair, padded strides, accumulation, and
 * the model's k range (64 to 1024). */
static void check_matmul_accuracy_set(ctx *c, const char *label, lb_blas *blas) {
    check_matmul_accuracy(c, label, blas, 33, 17, 45, false, false, 0, false);
    check_matmul_accuracy(c, label, blas, 96, 200, 64, false, true, 0, false);
    check_matmul_accuracy(c, label, blas, 130, 70, 257, true, false, 3, true);
    check_matmul_accuracy(c, label, blas, 64, 96, 1024, true, true, 5, true);
    check_matmul_accuracy(c, label, blas, 256, 192, 768, false, true, 4, true);
}

/* Whether the attention backward's dK and dV sum enough terms (T keys' worth of queries
 * for each of the NH/NKV heads sharing them) that the fp16/bf16 rounding of P and dS,
 * which the fp32 reference does not have, lets single elements brush the per-element
 * bound; the relative L2 error is the meaningful measure there. */
static bool long_sums(int T, int NH, int NKV) {
    return (int64_t)T * (NH / NKV) >= 512;
}

/* One attention shape, forward and backward, against the reference: the kernels
 * lb_attention_* pick for impl, or with dnn cuDNN's fused ones (gpu/cudnn/attn.h),
 * whose lse must also equal the built-in forward's (the two directions mix) and which
 * leave the qkv bias gradient to the caller. */
static void check_attention(ctx *c, const prec_t *pr, int B, int T, int NH, int NKV, int HD,
                            lb_gpu_attn_impl impl, lb_cudnn_attn *dnn) {
    char shape[56];
    /* tensor cores (mma.sync, with the backward on warpgroup MMAs where the device has
     * them: "mma+wgmma"), CUDA-core tiles, one row a thread, or cuDNN */
    bool tc = HD == 64 && impl != LB_ATTN_SCALAR && pr->dt != LB_DT_F32;
    const char *path = dnn                                            ? "cudnn"
                       : HD != 64                                     ? "scalar"
                       : !tc                                          ? "simt"
                       : impl == LB_ATTN_AUTO && lb_attention_wgmma() ? "mma+wgmma"
                                                                      : "mma";
    snprintf(shape, sizeof shape, "B%d T%d H%d/%d D%d %s", B, T, NH, NKV, HD, path);
    int W = (NH + 2 * NKV) * HD;
    size_t nq = (size_t)B * T * W, no = (size_t)B * T * NH * HD, na = (size_t)B * NH * T * T;
    size_t nl = (size_t)B * NH * T;
    float *qkv = hnew(nq), *dout = hnew(no), *ref = hnew(no), *att = hnew(na), *out = hnew(no);
    float *dqkv = hnew(nq), *gdqkv = hnew(nq), *db0 = hnew(W), *db = hnew(W), *gdb = hnew(W);
    float *lse = hnew(nl), *lse_own = hnew(nl);
    randn(c, qkv, nq, 1.0f);
    randn(c, dout, no, 1.0f);
    randn(c, db0, W, 1.0f);
    size_t es = lb_dtype_bytes(pr->dt);
    void *d_qkv = up(c, qkv, nq, pr->dt), *d_dout = up(c, dout, no, pr->dt);
    void *d_out = dev(c, no * es), *d_dqkv = dev(c, nq * es);
    float *d_lse = dev(c, nl * 4);
    void *d_scr =
        dev(c, dnn ? lb_cudnn_attn_workspace_bytes(dnn) : lb_attention_scratch_bytes(B, T, NH, HD));
    float *d_db = up(c, db0, W, LB_DT_F32); /* the bias gradient's column sums add to it */
    if (c->st == LB_OK) {
        /* every element must be written: outputs (and cuDNN's workspace, its dQ
         * accumulator among it) start as NaN */
        check_cuda(c, cudaMemset(d_dqkv, 0xff, nq * es), "poison dqkv");
        check_cuda(c, cudaMemset(d_out, 0xff, no * es), "poison out");
        check_cuda(c, cudaMemset(d_lse, 0xff, nl * 4), "poison lse");
        if (dnn)
            check_cuda(c, cudaMemset(d_scr, 0xff, lb_cudnn_attn_workspace_bytes(dnn)),
                       "poison workspace");
        check(c, lb_ref_attention_forward(ref, att, qkv, B, T, NH, NKV, HD, c->err));
        if (dnn)
            check(c, lb_cudnn_attn_forward(dnn, d_out, d_lse, d_qkv, d_scr, 0, c->err));
        else
            check(c, lb_attention_forward(d_out, d_lse, d_qkv, B, T, NH, NKV, HD, pr->dt, impl, 0,
                                          c->err));
        down(c, out, d_out, no, pr->dt);
        compare(c, "attention.fwd", shape, pr, out, ref, no);
        if (dnn) {
            void *d_own = dev(c, no * es);
            float *d_lse_own = dev(c, nl * 4);
            check(c, lb_attention_forward(d_own, d_lse_own, d_qkv, B, T, NH, NKV, HD, pr->dt,
                                          LB_ATTN_AUTO, 0, c->err));
            down(c, lse, d_lse, nl, LB_DT_F32);
            down(c, lse_own, d_lse_own, nl, LB_DT_F32);
            compare(c, "attention.lse", shape, pr, lse, lse_own, nl);
        }
        check(c, lb_ref_attention_backward(dqkv, dout, qkv, att, B, T, NH, NKV, HD, c->err));
        if (dnn)
            check(c, lb_cudnn_attn_backward(dnn, d_dqkv, d_dout, d_qkv, d_out, d_lse, d_scr, 0,
                                            c->err));
        else
            check(c, lb_attention_backward(d_dqkv, d_db, d_scr, d_dout, d_qkv, d_out, d_lse, B, T,
                                           NH, NKV, HD, pr->dt, impl, 0, c->err));
        down(c, gdqkv, d_dqkv, nq, pr->dt);
        down(c, gdb, d_db, W, LB_DT_F32);
        if (long_sums(T, NH, NKV))
            compare_l2(c, "attention.bwd", shape, pr, pr->rtol / 4, gdqkv, dqkv, nq);
        else if (pr->dt != LB_DT_F32)
            compare_rounded(c, "attention.bwd", shape, pr, pr->rtol / 4, 2.0, gdqkv, dqkv, nq);
        else
            compare(c, "attention.bwd", shape, pr, gdqkv, dqkv, nq);
        /* the qkv bias gradient: db0 + column sums of dqkv (sums of B*T rounded terms) */
        if (c->st == LB_OK && !dnn) {
            column_sums(db, dqkv, (int64_t)B * T, W);
            for (int i = 0; i < W; i++)
                db[i] += db0[i];
            compare_l2(c, "attention.bwd.dbias", shape, pr, pr->rtol / 4, gdb, db, W);
        }
    }
    release(c);
    free(qkv), free(dout), free(ref), free(att), free(out), free(dqkv), free(gdqkv);
    free(db0), free(db), free(gdb), free(lse), free(lse_own);
}

/* check_attention through cuDNN's plans for the shape. Without cuDNN on the machine there
 * is nothing to check: one note a run, no rows. */
static void check_attention_cudnn(ctx *c, const prec_t *pr, int B, int T, int NH, int NKV, int HD) {
    if (c->st != LB_OK) return;
    lb_cudnn_attn *a = NULL;
    lb_err why;
    if (lb_cudnn_attn_init(&a, B, T, NH, NKV, HD, pr->dt, true, &why) != LB_OK) {
        if (!c->dnn_noted) LB_WARN("selftest: cuDNN's kernels not checked: %s", why.msg);
        c->dnn_noted = true;
        return;
    }
    check_attention(c, pr, B, T, NH, NKV, HD, LB_ATTN_AUTO, a);
    lb_cudnn_attn_free(a);
}

static void check_rope(ctx *c, const prec_t *pr, int B, int T, int NH, int NKV, int HD) {
    char shape[56];
    snprintf(shape, sizeof shape, "B%d T%d H%d/%d D%d llama3", B, T, NH, NKV, HD);
    lb_model_config cfg;
    lb_err e2;
    if (lb_model_config_preset("llama3.2-1b", &cfg, &e2) != LB_OK) return;
    cfg.d_model = NH * HD, cfg.n_head = NH, cfg.n_kv_head = NKV;
    int W = (NH + 2 * NKV) * HD;
    size_t n = (size_t)B * T * W;
    float *x = hnew(n), *ref = hnew(n), *out = hnew(n), *freq = hnew(HD / 2);
    randn(c, x, n, 1.0f);
    lb_ref_rope_freqs(&cfg, freq);
    void *d_x = up(c, x, n, pr->dt);
    float *d_f = dev(c, (size_t)HD / 2 * 4), *d_cs = dev(c, (size_t)T * HD * 4);
    if (c->st == LB_OK) {
        check_cuda(c, cudaMemcpy(d_f, freq, (size_t)HD / 2 * 4, cudaMemcpyHostToDevice), "freqs");
        check(c, lb_rope_table(d_cs, d_f, T, HD, 0, c->err));
        lb_ref_rope_forward(ref, x, freq, B, T, NH, NKV, HD);
        check(c, lb_rope_forward(d_x, d_cs, B, T, NH, NKV, HD, pr->dt, 0, c->err));
        down(c, out, d_x, n, pr->dt);
        compare(c, "rope.fwd", shape, pr, out, ref, n);
        /* backward: R^T applied to the forward output gives the input back in the ref */
        lb_ref_rope_backward(ref, out, freq, B, T, NH, NKV, HD);
        check(c, lb_rope_backward(d_x, d_cs, B, T, NH, NKV, HD, pr->dt, 0, c->err));
        down(c, out, d_x, n, pr->dt);
        compare(c, "rope.bwd", shape, pr, out, ref, n);
    }
    release(c);
    free(x), free(ref), free(out), free(freq);
}

static void check_act(ctx *c, const prec_t *pr, int N, int F) {
    char shape[56];
    snprintf(shape, sizeof shape, "N%d F%d", N, F);
    size_t n = (size_t)N * F, n2 = 2 * n;
    float *x = hnew(n2), *dout = hnew(n), *ref = hnew(n2), *out = hnew(n2), *dref = hnew(n2);
    randn(c, x, n2, 2.0f);
    randn(c, dout, n, 1.0f);
    size_t es = lb_dtype_bytes(pr->dt);
    void *d_x = up(c, x, n2, pr->dt), *d_dout = up(c, dout, n, pr->dt);
    void *d_out = dev(c, n2 * es), *d_din = dev(c, n2 * es);
    if (c->st == LB_OK) {
        lb_ref_gelu_forward(ref, x, (int64_t)n);
        check(c, lb_act_gelu_forward(d_out, d_x, (int64_t)n, pr->dt, 0, c->err));
        down(c, out, d_out, n, pr->dt);
        compare(c, "gelu.fwd", shape, pr, out, ref, n);
        memset(dref, 0, n2 * 4);
        lb_ref_gelu_backward(dref, x, dout, (int64_t)n);
        check(c, lb_act_gelu_backward(d_din, d_x, d_dout, (int64_t)n, pr->dt, 0, c->err));
        down(c, out, d_din, n, pr->dt);
        compare(c, "gelu.bwd", shape, pr, out, dref, n);
        lb_ref_swiglu_forward(ref, x, 1, N, F);
        check(c, lb_act_swiglu_forward(d_out, d_x, N, F, pr->dt, 0, c->err));
        down(c, out, d_out, n, pr->dt);
        compare(c, "swiglu.fwd", shape, pr, out, ref, n);
        memset(dref, 0, n2 * 4);
        lb_ref_swiglu_backward(dref, dout, x, 1, N, F);
        check(c, lb_act_swiglu_backward(d_din, d_dout, d_x, N, F, pr->dt, 0, c->err));
        down(c, out, d_din, n2, pr->dt);
        compare(c, "swiglu.bwd", shape, pr, out, dref, n2);
    }
    release(c);
    free(x), free(dout), free(ref), free(out), free(dref);
}

static void check_xent(ctx *c, const prec_t *pr, int N, int V) {
    char shape[56];
    int ld = (V + 63) / 64 * 64;
    snprintf(shape, sizeof shape, "N%d V%d ld%d", N, V, ld);
    size_t n = (size_t)N * ld;
    float *logits = hnew(n), *packed = hnew((size_t)N * V), *probs = hnew((size_t)N * V);
    float *losses = hnew(N), *glosses = hnew(N), *dref = hnew((size_t)N * V), *gd = hnew(n);
    float *dpad = hnew(n);
    int32_t *tg = malloc(sizeof(int32_t) * N);
    randn(c, logits, n, 3.0f); /* the padding columns too: they must come back 0 */
    for (int i = 0; i < N; i++)
        tg[i] = (int32_t)lb_rng_below(&c->rng, (uint64_t)V);
    void *d_logits = up(c, logits, n, pr->dt), *d_tg = upi(c, tg, N);
    float *d_losses = dev(c, (size_t)N * 4);
    if (c->st == LB_OK) {
        for (int r = 0; r < N; r++)
            memcpy(packed + (size_t)r * V, logits + (size_t)r * ld, (size_t)V * 4);
        lb_ref_softmax_crossentropy_forward(losses, probs, packed, tg, 1, N, V);
        lb_ref_softmax_crossentropy_backward(dref, probs, tg, 1.0f / N, 1, N, V);
        check(c, lb_loss_softmax_xent(d_logits, d_losses, d_tg, N, V, ld, 1.0f / N, NULL, 1, pr->dt,
                                      0, c->err));
        down(c, glosses, d_losses, N, LB_DT_F32);
        down(c, gd, d_logits, n, pr->dt);
        for (int r = 0; r < N; r++)
            memcpy(dpad + (size_t)r * ld, dref + (size_t)r * V, (size_t)V * 4);
        compare(c, "softmax_xent.loss", shape, pr, glosses, losses, N);
        /* the gradient over the padded rows is O(1/N): compare it scaled back to O(1) */
        for (size_t i = 0; i < n; i++)
            gd[i] *= N, dpad[i] *= N;
        compare(c, "softmax_xent.dlogits", shape, pr, gd, dpad, n);
    }
    release(c);
    free(logits), free(packed), free(probs), free(losses), free(glosses), free(dref), free(gd),
        free(dpad), free(tg);
}

static lb_nf4_gpu_code nf4_code(void) {
    lb_nf4_gpu_code code;
    memcpy(code.v, lb_nf4_code, sizeof code.v);
    return code;
}

/* Gaussian weights whose scale changes every 640 (so blocks and groups differ). */
static void nf4_weights(ctx *c, float *w, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        /* every 37th block of 64 so small that 1 / absmax is infinite, a zero at its start */
        bool tiny = (i / 64) % 37 == 3;
        double s = tiny ? 1e-39 : 0.02 * (1.0 + 9.0 * ((i / 640) % 2));
        w[i] = tiny && i % 64 == 0 ? 0.0f : (float)(s * lb_rng_normal(&c->rng));
    }
}

/* The device quantiser against model/nf4.c on the same fp32 weights: every code index and
 * the mean equal; an 8-bit absmax may differ by one step where the means' last bits differ
 * (tree against sequential sums), nowhere by more. Ratio: mismatched codes + absmax values
 * off by more than one step + mean's relative difference over 1e-6. */
static void check_nf4_quantize(ctx *c, int64_t n) {
    if (c->st != LB_OK) return;
    lb_nf4_tensor q;
    lb_nf4_alloc(&q, n);
    float *w = hnew((size_t)n);
    const int64_t nb = lb_nf4_blocks(n), ng = lb_nf4_groups(n), nc = lb_nf4_code_bytes(n);
    uint8_t *codes = malloc((size_t)nc);
    int8_t *aq = malloc((size_t)nb);
    float *sc = hnew((size_t)ng), mean = 0.0f;
    if (!q.codes || !w || !codes || !aq || !sc) {
        c->st = lb_fail(c->err, LB_ERR_NOMEM, "no host memory for the NF4 check");
    } else {
        nf4_weights(c, w, n);
        lb_nf4_quantize(&q, w);
        float *dw = up(c, w, (size_t)n, LB_DT_F32);
        uint8_t *dcodes = dev(c, (size_t)nc);
        float *dabs = dev(c, (size_t)nb * 4), *dsc = dev(c, (size_t)ng * 4), *dmean = dev(c, 4);
        int8_t *daq = dev(c, (size_t)nb);
        if (c->st == LB_OK) {
            check(c, lb_nf4_gpu_quantize(dcodes, dabs, dw, n, nf4_code(), 0, c->err));
            check(c, lb_nf4_gpu_double_quantize(daq, dsc, dmean, dabs, nb, 0, c->err));
            check_cuda(c, cudaMemcpy(codes, dcodes, (size_t)nc, cudaMemcpyDeviceToHost), "codes");
            check_cuda(c, cudaMemcpy(aq, daq, (size_t)nb, cudaMemcpyDeviceToHost), "absmax");
            check_cuda(c, cudaMemcpy(sc, dsc, (size_t)ng * 4, cudaMemcpyDeviceToHost), "scale");
            check_cuda(c, cudaMemcpy(&mean, dmean, 4, cudaMemcpyDeviceToHost), "mean");
        }
        if (c->st == LB_OK) {
            int64_t bad_codes = 0, far = 0;
            for (int64_t i = 0; i < nc; i++)
                bad_codes += codes[i] != q.codes[i];
            for (int64_t j = 0; j < nb; j++)
                far += abs((int)aq[j] - (int)q.absmax_q[j]) > 1;
            double mean_rel = fabs((double)mean - q.absmax_mean) / q.absmax_mean;
            double ratio = (double)(bad_codes + far) + mean_rel / 1e-6;
            char shape[64];
            snprintf(shape, sizeof shape, "n=%lld", (long long)n);
            record(c, "nf4_quantize", shape, "fp32", ratio, mean_rel,
                   bad_codes == 0 && far == 0 && mean_rel <= 1e-6);
        }
    }
    lb_nf4_free(&q);
    free(w);
    free(codes);
    free(aq);
    free(sc);
    release(c);
}

/* The device dequantiser against lb_nf4_dequantize on one CPU-quantised tensor, written
 * in each working type. */
static void check_nf4_dequantize(ctx *c, const prec_t *pr, int64_t n) {
    if (c->st != LB_OK) return;
    lb_nf4_tensor q;
    lb_nf4_alloc(&q, n);
    float *w = hnew((size_t)n), *ref = hnew((size_t)n), *got = hnew((size_t)n);
    if (!q.codes || !w || !ref || !got) {
        c->st = lb_fail(c->err, LB_ERR_NOMEM, "no host memory for the NF4 check");
    } else {
        nf4_weights(c, w, n);
        lb_nf4_quantize(&q, w);
        lb_nf4_dequantize(&q, ref);
        const int64_t nb = lb_nf4_blocks(n), ng = lb_nf4_groups(n), nc = lb_nf4_code_bytes(n);
        uint8_t *dcodes = dev(c, (size_t)nc);
        int8_t *daq = dev(c, (size_t)nb);
        float *dsc = dev(c, (size_t)ng * 4), *dmean = dev(c, 4);
        void *out = dev(c, (size_t)n * lb_dtype_bytes(pr->dt));
        if (c->st == LB_OK) {
            check_cuda(c, cudaMemcpy(dcodes, q.codes, (size_t)nc, cudaMemcpyHostToDevice), "up");
            check_cuda(c, cudaMemcpy(daq, q.absmax_q, (size_t)nb, cudaMemcpyHostToDevice), "up");
            check_cuda(c, cudaMemcpy(dsc, q.scale, (size_t)ng * 4, cudaMemcpyHostToDevice), "up");
            check_cuda(c, cudaMemcpy(dmean, &q.absmax_mean, 4, cudaMemcpyHostToDevice), "up");
            check(c, lb_nf4_gpu_dequantize(out, pr->dt, dcodes, daq, dsc, dmean, n, nf4_code(), 0,
                                           c->err));
            down(c, got, out, (size_t)n, pr->dt);
        }
        char shape[64];
        snprintf(shape, sizeof shape, "n=%lld", (long long)n);
        compare(c, "nf4_dequantize", shape, pr, got, ref, (size_t)n);
    }
    lb_nf4_free(&q);
    free(w);
    free(ref);
    free(got);
    release(c);
}

/* Three runs of fp32 sums written into a buffer of the working type in another order than
 * theirs (as the model writes its 1-D tensors' gradients into their slots): each value where
 * its run puts it, elements outside the runs left alone. */
static void check_grad_pack(ctx *c, const prec_t *pr) {
    const int64_t n[3] = {1000, 3001, 777}, slot[3] = {0, 1000, 4001}, dense[3] = {778, 1778, 0};
    const int64_t total = 4779; /* element 777 is no run's */
    float *x = hnew(total), *ref = hnew(total), *got = hnew(total);
    randn(c, x, total, 1.0f);
    randn(c, ref, total, 1.0f);
    float *d_src = up(c, x, total, LB_DT_F32);
    void *d_dense = up(c, ref, total, pr->dt); /* what lies outside the runs */
    lb_adamw_grad_run runs[3];
    for (int t = 0; t < 3; t++) {
        runs[t] = (lb_adamw_grad_run){.slot = slot[t], .dense = dense[t], .n = n[t]};
        memcpy(ref + dense[t], x + slot[t], (size_t)n[t] * 4);
    }
    lb_adamw_grad_run *d_runs = dev(c, sizeof runs);
    if (c->st == LB_OK) {
        check_cuda(c, cudaMemcpy(d_runs, runs, sizeof runs, cudaMemcpyHostToDevice), "runs");
        check(c, lb_adamw_pack_grads(d_dense, d_src, d_runs, 3, n[1], pr->dt, 0, c->err));
        down(c, got, d_dense, total, pr->dt);
        compare(c, "grad_pack", "3 runs", pr, got, ref, total);
    }
    release(c);
    free(x), free(ref), free(got);
}

/* The gradients fp32, or in fp16/bf16 runs one array of the working type (dense16). */
static void check_adamw(ctx *c, const prec_t *pr, int64_t n, bool dense16) {
    dense16 = dense16 && pr->dt != LB_DT_F32;
    char shape[56];
    snprintf(shape, sizeof shape, "n%lld 3 tensors, padding%s", (long long)n,
             dense16 ? ", 16-bit gradients" : "");
    float *w = hnew(n), *g = hnew(n), *m = hnew(n), *v = hnew(n), *gw = hnew(n), *gm = hnew(n);
    randn(c, w, n, 1.0f);
    randn(c, g, n, 1.0f);
    /* the middle tensor starting at an odd element (element by element), the third aligned,
     * then padding from an odd element: its gradients (random here) in no norm, its
     * parameters and its moments (zero, as a shard's padding has them) left as they are */
    int64_t starts[4] = {0, n / 3, n / 2, n - 14};
    int32_t flags[4] = {LB_SEG_DECAY, 0, LB_SEG_DECAY, LB_SEG_PAD};
    randn(c, m, n, 0.1f);
    for (int64_t i = 0; i < n; i++)
        v[i] = 0.01f * (float)lb_rng_uniform(&c->rng);
    for (int64_t i = starts[3]; i < n; i++)
        m[i] = v[i] = 0.0f;
    float *d_w = up(c, w, n, LB_DT_F32);
    void *d_g = up(c, g, n, dense16 ? pr->dt : LB_DT_F32); /* rounds g on the host too */
    float *d_m = up(c, m, n, LB_DT_F32), *d_v = up(c, v, n, LB_DT_F32);
    void *d_lp = pr->dt == LB_DT_F32 ? NULL : dev(c, n * lb_dtype_bytes(pr->dt));
    /* a range whose working copy lives apart (as a padded output head's does): from a
     * 4-aligned element in fp16/bf16 (16-byte stores), an unaligned one in fp32, to an
     * unaligned end */
    int64_t a0 = pr->dt == LB_DT_F32 ? 5 : 8, a1 = n / 4 + 3;
    void *d_apart = dev(c, (size_t)(a1 - a0) * lb_dtype_bytes(pr->dt));
    lb_gpu_lp_apart apart = {d_apart, a0, a1};
    int64_t *d_s = dev(c, sizeof starts);
    int32_t *d_flags = dev(c, sizeof flags);
    lb_gpu_optstate *d_st = dev(c, sizeof(lb_gpu_optstate));
    if (c->st == LB_OK) {
        lb_gpu_optstate st;
        memset(&st, 0, sizeof st);
        st.loss_scale = 1.0f;
        st.step = 4; /* the step taken is the 5th */
        check_cuda(c, cudaMemcpy(d_s, starts, sizeof starts, cudaMemcpyHostToDevice), "segs");
        check_cuda(c, cudaMemcpy(d_flags, flags, sizeof flags, cudaMemcpyHostToDevice), "segs");
        check_cuda(c, cudaMemcpy(d_st, &st, sizeof st, cudaMemcpyHostToDevice), "state");
        lb_gpu_adamw_params ap = {.lr = 1e-3f,
                                  .beta1 = 0.9f,
                                  .beta2 = 0.95f,
                                  .eps = 1e-8f,
                                  .weight_decay = 0.1f,
                                  .grad_clip = 1.0f,
                                  .growth_interval = 2000};
        lb_gpu_segments sg = {d_s, d_flags, 4, n, dense16};
        check(c, lb_adamw_grad_sumsq(d_st, d_g, pr->dt, &sg, 0, c->err));
        /* the update in two launches, cut at a multiple of 4 inside the first tensor */
        int64_t cut = n / 12 * 4;
        check(c, lb_adamw(d_w, d_lp, &apart, pr->dt, d_g, d_m, d_v, &sg, cut, n, &ap, d_st, 0,
                          c->err));
        check(c, lb_adamw(d_w, d_lp, &apart, pr->dt, d_g, d_m, d_v, &sg, 0, cut, &ap, d_st, 0,
                          c->err));
        check(c, lb_adamw_finish(d_st, &ap, 0, c->err));
        double norm = sqrt(lb_ref_sum_squares(g, starts[3]));
        float clip = lb_ref_clip_scale(norm, 1.0f);
        for (int s = 0; s < 3; s++) {
            int64_t a = starts[s], b = starts[s + 1];
            lb_ref_adamw_update(w + a, g + a, m + a, v + a, b - a, 1e-3f, 0.9f, 0.95f, 1e-8f,
                                (flags[s] & LB_SEG_DECAY) ? 0.1f : 0.0f, clip, 5);
        }
        down(c, gw, d_w, n, LB_DT_F32);
        down(c, gm, d_m, n, LB_DT_F32);
        compare(c, "adamw.param", shape, &PRECS[0], gw, w, n);
        compare(c, "adamw.m", shape, &PRECS[0], gm, m, n);
        /* the working copy: params_lp outside the range, the range from its own copy */
        if (d_lp) down(c, gm, d_lp, n, pr->dt);
        down(c, gm + a0, d_apart, (size_t)(a1 - a0), pr->dt);
        if (d_lp)
            compare(c, "adamw.working_copy", shape, pr, gm, w, n);
        else
            compare(c, "adamw.working_copy_apart", shape, pr, gm + a0, w + a0, (size_t)(a1 - a0));
        check_cuda(c, cudaMemcpy(&st, d_st, sizeof st, cudaMemcpyDeviceToHost), "state");
        float ref_norm = (float)norm;
        float gnorm = st.last_norm;
        compare(c, "adamw.grad_norm", shape, &PRECS[0], &gnorm, &ref_norm, 1);
    }
    release(c);
    free(w), free(g), free(m), free(v), free(gw), free(gm);
}

/* ---- whole model --------------------------------------------------------------------------- */

/* One forward and backward of the reference and of the GPU model (loss slot 0) on one
 * batch: the reference's loss to *ref_loss, the GPU's to gloss[0], its optimizer state
 * (loss scale) to *st. Gradients stay in each model. */
static void forward_backward_both(ctx *c, lb_model *cpu, lb_model_gpu *gm, const int32_t *in,
                                  const int32_t *tg, int B, int T, float *ref_loss, float *gloss,
                                  lb_gpu_optstate *st) {
    check(c, lb_model_forward(cpu, in, tg, B, T, ref_loss, c->err));
    lb_model_zero_grad(cpu);
    if (c->st == LB_OK) check(c, lb_model_backward(cpu, c->err));
    if (c->st == LB_OK) check(c, lb_model_gpu_forward_backward(gm, in, tg, 0, c->err));
    if (c->st == LB_OK) check(c, lb_model_gpu_read_optstate(gm, st, c->err));
    if (c->st == LB_OK) check(c, lb_model_gpu_read_losses(gm, gloss, 1, c->err));
}

/* n AdamW steps (lr 1e-3, the defaults otherwise) of the reference and of the GPU model
 * (loss slots 1..n) on one batch: the reference's losses into rloss[0..n-1], the GPU's
 * slots 0..n into gloss. A step the GPU skips (fp16 gradients that overflowed under the
 * loss scale) the reference skips too, so both take the same updates; returns how many. */
static int train_both(ctx *c, lb_model *cpu, lb_model_gpu *gm, const int32_t *in, const int32_t *tg,
                      int B, int T, int n, float *rloss, float *gloss) {
    lb_adamw_params ap = lb_model_adamw_default_params();
    ap.lr = 1e-3f;
    lb_gpu_adamw_params gap = {.lr = ap.lr,
                               .beta1 = ap.beta1,
                               .beta2 = ap.beta2,
                               .eps = ap.eps,
                               .weight_decay = ap.weight_decay,
                               .grad_clip = ap.grad_clip};
    int taken = 0, skipped = 0;
    for (int s = 0; s < n && c->st == LB_OK; s++) {
        check(c, lb_model_forward(cpu, in, tg, B, T, &rloss[s], c->err));
        lb_model_zero_grad(cpu);
        if (c->st == LB_OK) check(c, lb_model_backward(cpu, c->err));
        if (c->st == LB_OK) check(c, lb_model_gpu_train_step(gm, in, tg, s + 1, &gap, c->err));
        lb_gpu_optstate st;
        if (c->st == LB_OK) check(c, lb_model_gpu_read_optstate(gm, &st, c->err));
        if (c->st != LB_OK) break;
        if (st.skipped == skipped) lb_model_adamw_step(cpu, &ap, ++taken, NULL);
        skipped = st.skipped;
    }
    if (c->st == LB_OK) check(c, lb_model_gpu_read_losses(gm, gloss, n + 1, c->err));
    return skipped;
}

/* Each 1-D tensor's gradient (biases, norm weights) by its own relative L2 error, the worst
 * of them as one row: a fault in one small tensor (a bias gradient summed apart from the
 * kernels, or derived from another's) would vanish in the whole model's L2. */
static void compare_vector_grads(ctx *c, const char *shape, const prec_t *pr,
                                 const lb_model_config *cfg, const float *gpu, const float *ref) {
    int n = lb_model_param_layout(cfg, NULL, 0);
    lb_param_tensor *t = malloc((size_t)n * sizeof *t);
    if (t == NULL) {
        c->st = lb_fail(c->err, LB_ERR_NOMEM, "no host memory for the parameter layout");
        return;
    }
    lb_model_param_layout(cfg, t, n);
    diff_t worst = {0};
    for (int i = 0; i < n; i++) {
        if (t[i].ndim != 1) continue;
        diff_t d = differences(pr, 1.0, gpu + t[i].offset, ref + t[i].offset, (size_t)t[i].numel);
        if (!(d.rel_l2 <= worst.rel_l2)) worst = d;
    }
    free(t);
    double ratio = worst.rel_l2 / pr->model_rel;
    record(c, "model.vector_grads", shape, pr->name, ratio, worst.max_abs, ratio <= 1.0);
}

/* gelu: lb_model_gpu_params.gelu_product (GPT-2's fused GELU product, cuDNN's where it
 * runs with the MLP's hidden activations feature-major, or cuBLASLt's); the rows name the
 * one that ran */
static void check_model(ctx *c, const prec_t *pr, const lb_model_config *cfg, int B, int T,
                        bool recompute, bool plain, lb_gelu_product gelu) {
    char shape[96];
    snprintf(shape, sizeof shape, "%s B%d T%d%s%s", cfg->name, B, T, recompute ? " recomp" : "",
             plain ? " plain" : "");
    lb_model cpu;
    lb_err e2;
    if (lb_model_init(&cpu, cfg, B, T, lb_rng_next(&c->rng), &e2) != LB_OK) {
        c->st = lb_fail(c->err, LB_ERR_NOMEM, "CPU reference model: %s", e2.msg);
        return;
    }
    int64_t np = cpu.n_params;
    enum { STEPS = 10 };
    lb_model_gpu_params gp = {.B = B,
                              .T = T,
                              .precision = pr->prec,
                              .max_loss_slots = STEPS + 1,
                              .recompute = recompute,
                              .attn_scalar = plain,
                              .no_fused_gelu = plain,
                              .gelu_product = gelu,
                              .fp32_mode = pr->fp32_mode};
    lb_model_gpu *gm = NULL;
    float *grads = hnew(np);
    int32_t *in = malloc(sizeof(int32_t) * B * T), *tg = malloc(sizeof(int32_t) * B * T);
    for (int i = 0; i < B * T; i++) {
        in[i] = (int32_t)lb_rng_below(&c->rng, (uint64_t)cfg->vocab_size);
        tg[i] = (int32_t)lb_rng_below(&c->rng, (uint64_t)cfg->vocab_size);
    }
    check(c, lb_model_gpu_init(&gm, cfg, &gp, c->err));
    if (c->st == LB_OK) check(c, lb_model_gpu_set_params(gm, cpu.params, c->err));
    float ref_loss = 0.0f, gloss[STEPS + 1], rloss[STEPS + 1];
    if (c->st == LB_OK) {
        lb_gpu_optstate st;
        forward_backward_both(c, &cpu, gm, in, tg, B, T, &ref_loss, gloss, &st);
        if (c->st == LB_OK) check(c, lb_model_gpu_get_grads(gm, grads, c->err));
        const char *gp_name = lb_model_gpu_gelu_product(gm);
        if (strcmp(gp_name, "unfused") != 0)
            snprintf(shape + strlen(shape), sizeof shape - strlen(shape), " gelu %s", gp_name);
        if (c->st == LB_OK) {
            for (int64_t i = 0; i < np; i++)
                grads[i] /= st.loss_scale;
            compare_l2(c, "model.loss", shape, pr, pr->model_rel / 10, gloss, &ref_loss, 1);
            compare_l2(c, "model.grads", shape, pr, pr->model_rel, grads, cpu.grads, (size_t)np);
            compare_vector_grads(c, shape, pr, cfg, grads, cpu.grads);
        }
    }
    if (c->st == LB_OK) {
        int skipped = train_both(c, &cpu, gm, in, tg, B, T, STEPS, rloss, gloss);
        /* steps 2-10 replay a CUDA graph unless capture was refused: the row says which, and
         * how many steps fp16's loss scaling skipped */
        char label[96];
        snprintf(label, sizeof label, "%s%s", shape, lb_model_gpu_uses_graph(gm) ? " graph" : "");
        if (skipped > 0)
            snprintf(label + strlen(label), sizeof label - strlen(label), " %d skipped", skipped);
        if (c->st == LB_OK)
            compare_l2(c, "model.10step_losses", label, pr, pr->model_rel / 2, gloss + 1, rloss,
                       STEPS);
    }
    lb_model_gpu_free(gm);
    lb_model_free(&cpu);
    free(grads), free(in), free(tg);
}

/* LoRA on a frozen base (bf16 or NF4 projections) against the CPU reference: the loss and
 * the adapters' gradients of one forward and backward (B random, so both A and B have
 * gradients), then five AdamW steps' losses (adapters only). With NF4 the CPU's base is the
 * round trip of the same weights (lb_lora_quantize_base); the GPU quantises them itself, so
 * its codes are the ones the nf4_quantize rows check. */
static void check_lora_model(ctx *c, const prec_t *pr, const lb_model_config *cfg, int B, int T,
                             lb_quant_kind quant, const char *targets) {
    char shape[96];
    snprintf(shape, sizeof shape, "%s B%d T%d r8 %s%s", cfg->name, B, T, targets,
             quant == LB_QUANT_NF4 ? " nf4" : "");
    lb_model cpu;
    lb_lora ad;
    lb_err e2;
    lb_lora_config lc = {8, 16.0f, 0, quant};
    memset(&ad, 0, sizeof ad);
    if (lb_lora_targets_parse(targets, cfg->family, &lc.targets, &e2) != LB_OK ||
        lb_model_init(&cpu, cfg, B, T, lb_rng_next(&c->rng), &e2) != LB_OK) {
        c->st = lb_fail(c->err, LB_ERR_RUNTIME, "LoRA reference: %s", e2.msg);
        return;
    }
    enum { STEPS = 5 };
    lb_model_gpu_params gp = {.B = B,
                              .T = T,
                              .precision = pr->prec,
                              .max_loss_slots = STEPS + 1,
                              .fp32_mode = pr->fp32_mode,
                              .lora = lc};
    lb_model_gpu *gm = NULL;
    float *base = hnew((size_t)cpu.n_params), *grads = NULL;
    int32_t *in = malloc(sizeof(int32_t) * B * T), *tg = malloc(sizeof(int32_t) * B * T);
    for (int i = 0; i < B * T; i++) {
        in[i] = (int32_t)lb_rng_below(&c->rng, (uint64_t)cfg->vocab_size);
        tg[i] = (int32_t)lb_rng_below(&c->rng, (uint64_t)cfg->vocab_size);
    }
    memcpy(base, cpu.params, (size_t)cpu.n_params * 4);
    check(c, lb_lora_init(&ad, cfg, &lc, (int64_t)B * T, lb_rng_next(&c->rng), c->err));
    if (c->st == LB_OK) {
        randn(c, ad.params, (size_t)ad.off.total, 0.05f);
        grads = hnew((size_t)ad.off.total);
        if (quant == LB_QUANT_NF4) check(c, lb_lora_quantize_base(cfg, cpu.params, c->err));
        check(c, lb_model_attach_lora(&cpu, &ad, c->err));
    }
    if (c->st == LB_OK) check(c, lb_model_gpu_init(&gm, cfg, &gp, c->err));
    if (c->st == LB_OK) check(c, lb_model_gpu_set_params(gm, base, c->err));
    if (c->st == LB_OK) check(c, lb_model_gpu_set_lora(gm, ad.params, c->err));
    float ref_loss = 0.0f, gloss[STEPS + 1], rloss[STEPS];
    if (c->st == LB_OK) {
        lb_gpu_optstate st;
        forward_backward_both(c, &cpu, gm, in, tg, B, T, &ref_loss, gloss, &st);
        if (c->st == LB_OK) check(c, lb_model_gpu_get_lora(gm, grads, true, c->err));
        if (c->st == LB_OK) {
            for (int64_t i = 0; i < ad.off.total; i++)
                grads[i] /= st.loss_scale;
            compare_l2(c, "lora.loss", shape, pr, pr->model_rel / 10, gloss, &ref_loss, 1);
            compare_l2(c, "lora.grads", shape, pr, pr->model_rel, grads, ad.grads,
                       (size_t)ad.off.total);
        }
    }
    if (c->st == LB_OK) {
        int skipped = train_both(c, &cpu, gm, in, tg, B, T, STEPS, rloss, gloss);
        if (skipped > 0)
            snprintf(shape + strlen(shape), sizeof shape - strlen(shape), " %d skipped", skipped);
        if (c->st == LB_OK)
            compare_l2(c, "lora.5step_losses", shape, pr, pr->model_rel / 2, gloss + 1, rloss,
                       STEPS);
    }
    lb_model_gpu_free(gm);
    lb_model_free(&cpu);
    lb_lora_free(&ad);
    free(base), free(grads), free(in), free(tg);
}

/* A GPT-2 and a Llama test model with head size 64, so the tensor-core attention runs too;
 * vocabulary sizes not multiples of 64 exercise the padded logits. */
/* ---- inference engine ---------------------------------------------------------------- */

/* The paged cache: sequences of lens[] tokens in blocks of bs handed out in a random
 * order; the last min(chunk, len) tokens of each are the batch (a decode when chunk is 1,
 * else a prefill chunk). The batch's keys and values are stored by slot
 * (lb_paged_kv_store, checked exactly against the reference's copy; with rope, its q and k
 * rotated to their positions by llama3's RoPE first, the keys checked against
 * lb_ref_rope_positions' within the tolerance), then every batch token attends over its
 * sequence (lb_paged_attention against lb_ref_paged_attention). */
static void check_paged(ctx *c, const prec_t *pr, int NH, int NKV, int HD, int bs, const int *lens,
                        int n_seq, int chunk, int n_split, bool rope) {
    char shape[72];
    int n_tok = 0, n_blocks = 0, max_len = 0;
    for (int s = 0; s < n_seq; s++) {
        n_tok += lens[s] < chunk ? lens[s] : chunk;
        n_blocks += (lens[s] + bs - 1) / bs;
        if (lens[s] > max_len) max_len = lens[s];
    }
    snprintf(shape, sizeof shape, "H%d/%d D%d bs%d len<=%d x%d chunk%d split%d%s", NH, NKV, HD, bs,
             max_len, n_seq, chunk, n_split, rope ? " rope" : "");
    const int max_blocks = (max_len + bs - 1) / bs, QW = (NH + 2 * NKV) * HD;
    const size_t row = (size_t)NKV * HD, cache_n = (size_t)n_blocks * bs * row;
    int32_t *table = calloc((size_t)n_seq * max_blocks, 4), *perm = malloc((size_t)n_blocks * 4);
    int32_t *seq_of = malloc((size_t)n_tok * 4), *pos = malloc((size_t)n_tok * 4);
    int32_t *slot = malloc((size_t)n_tok * 4);
    float *kc = hnew(cache_n), *vc = hnew(cache_n), *qkv = hnew((size_t)n_tok * QW);
    float *ref = hnew((size_t)n_tok * NH * HD), *out = hnew((size_t)n_tok * NH * HD);
    float *kc_out = hnew(cache_n);
    for (int b = 0; b < n_blocks; b++)
        perm[b] = b;
    for (int b = n_blocks - 1; b > 0; b--) {
        int j = (int)lb_rng_below(&c->rng, (uint64_t)b + 1), t = perm[b];
        perm[b] = perm[j], perm[j] = t;
    }
    for (int s = 0, next = 0, i = 0; s < n_seq; s++) {
        for (int b = 0; b < (lens[s] + bs - 1) / bs; b++)
            table[s * max_blocks + b] = perm[next++];
        int take = lens[s] < chunk ? lens[s] : chunk;
        for (int k = lens[s] - take; k < lens[s]; k++, i++) {
            seq_of[i] = s, pos[i] = k;
            slot[i] = table[s * max_blocks + k / bs] * bs + k % bs;
        }
    }
    randn(c, kc, cache_n, 1.0f);
    randn(c, vc, cache_n, 1.0f);
    randn(c, qkv, (size_t)n_tok * QW, 1.0f);
    for (int i = 0; i < n_tok; i++) /* the batch's slots hold nothing before the store */
        for (size_t e = 0; e < row; e++)
            kc[(size_t)slot[i] * row + e] = vc[(size_t)slot[i] * row + e] = 0.0f;
    void *d_k = up(c, kc, cache_n, pr->dt), *d_v = up(c, vc, cache_n, pr->dt);
    void *d_qkv = up(c, qkv, (size_t)n_tok * QW, pr->dt);
    void *d_out = dev(c, (size_t)n_tok * NH * HD * lb_dtype_bytes(pr->dt));
    int32_t *d_table = upi(c, table, (size_t)n_seq * max_blocks), *d_seq = upi(c, seq_of, n_tok);
    int32_t *d_pos = upi(c, pos, n_tok), *d_slot = upi(c, slot, n_tok);
    void *d_scr = n_split > 1 ? dev(c, lb_paged_scratch_bytes(n_tok, NH, HD, n_split)) : NULL;
    float *freq = hnew((size_t)HD / 2), *d_f = rope ? dev(c, (size_t)HD / 2 * 4) : NULL;
    float *d_cs = rope ? dev(c, (size_t)max_len * HD * 4) : NULL;
    lb_model_config cfg;
    lb_err e2;
    if (rope && lb_model_config_preset("llama3.1-8b", &cfg, &e2) != LB_OK) c->st = LB_ERR_USAGE;
    if (c->st == LB_OK && rope) {
        cfg.d_model = NH * HD, cfg.n_head = NH, cfg.n_kv_head = NKV;
        lb_ref_rope_freqs(&cfg, freq);
        check_cuda(c, cudaMemcpy(d_f, freq, (size_t)HD / 2 * 4, cudaMemcpyHostToDevice), "freqs");
        check(c, lb_rope_table(d_cs, d_f, max_len, HD, 0, c->err));
        lb_ref_rope_positions(qkv, pos, freq, n_tok, NH, NKV, HD);
    }
    if (c->st == LB_OK) {
        for (int i = 0; i < n_tok; i++) {
            memcpy(kc + (size_t)slot[i] * row, qkv + (size_t)i * QW + NH * HD, row * 4);
            memcpy(vc + (size_t)slot[i] * row, qkv + (size_t)i * QW + (NH + NKV) * HD, row * 4);
        }
        check(c, lb_ref_paged_attention(ref, qkv, kc, vc, table, max_blocks, seq_of, pos, n_tok, NH,
                                        NKV, HD, bs, c->err));
        check(c, lb_paged_kv_store(d_k, d_v, d_qkv, d_cs, d_pos, d_slot, n_tok, NH, NKV, HD, pr->dt,
                                   0, c->err));
        check(c, lb_paged_attention(d_out, d_scr, n_split, d_qkv, d_k, d_v, d_table, max_blocks,
                                    d_seq, d_pos, n_tok, NH, NKV, HD, bs, pr->dt, 0, c->err));
        down(c, kc_out, d_k, cache_n, pr->dt);
        if (rope) {
            compare(c, "paged.kv_store", shape, pr, kc_out, kc, cache_n);
        } else {
            double worst = 0;
            for (size_t e = 0; e < cache_n; e++)
                if (kc_out[e] != kc[e]) worst = INFINITY;
            record(c, "paged.kv_store", shape, pr->name, worst, worst, worst == 0);
        }
        down(c, out, d_out, (size_t)n_tok * NH * HD, pr->dt);
        compare(c, "paged.attention", shape, pr, out, ref, (size_t)n_tok * NH * HD);
    }
    release(c);
    free(table), free(perm), free(seq_of), free(pos), free(slot);
    free(kc), free(vc), free(qkv), free(ref), free(out), free(kc_out), free(freq);
}

/* A few rows against weights read once (lb_gemv), with and without the residual, out in
 * the inputs' type or in fp32 (the head's logits), K split over `split` warps, with the
 * RMSNorm before it (norm) and the SwiGLU after it (swiglu: OC is twice the output's
 * width) inside it, against sums in double of the rows normalised and rounded as the norm
 * kernel's output (its gate and up sums rounded as the product's output under SwiGLU). */
static void check_gemv(ctx *c, const prec_t *pr, int M, int K, int OC, bool res, bool f32_out,
                       int split, bool norm, bool swiglu) {
    char shape[72];
    snprintf(shape, sizeof shape, "M%d K%d OC%d split%d%s%s%s%s", M, K, OC, split,
             res ? " +res" : "", f32_out ? " out fp32" : "", norm ? " norm" : "",
             swiglu ? " swiglu" : "");
    const int NO = swiglu ? OC / 2 : OC;
    const size_t nx = (size_t)M * K, nw = (size_t)OC * K, ny = (size_t)M * NO;
    float *x = hnew(nx), *xn = hnew(nx), *w = hnew(nw), *nwt = hnew((size_t)K);
    float *r = hnew(ny), *ref = hnew(ny), *out = hnew(ny), *sums = hnew((size_t)M * OC);
    randn(c, x, nx, 1.0f);
    randn(c, w, nw, 0.1f);
    randn(c, r, ny, 1.0f);
    for (int k = 0; k < K; k++)
        nwt[k] = 1.0f + 0.1f * (float)lb_rng_normal(&c->rng);
    const lb_gpu_dtype yt = f32_out ? LB_DT_F32 : pr->dt;
    void *d_x = up(c, x, nx, pr->dt), *d_w = up(c, w, nw, pr->dt);
    void *d_nw = norm ? up(c, nwt, (size_t)K, pr->dt) : NULL;
    void *d_r = res ? up(c, r, ny, pr->dt) : NULL, *d_y = dev(c, ny * lb_dtype_bytes(yt));
    if (c->st == LB_OK) {
        memcpy(xn, x, nx * sizeof *x);
        if (norm) {
            for (int m = 0; m < M; m++) {
                double ss = 0;
                for (int k = 0; k < K; k++)
                    ss += (double)x[(size_t)m * K + k] * x[(size_t)m * K + k];
                const float rstd = (float)(1.0 / sqrt(ss / K + 1e-5));
                for (int k = 0; k < K; k++)
                    xn[(size_t)m * K + k] = x[(size_t)m * K + k] * rstd * nwt[k];
            }
            up(c, xn, nx, pr->dt); /* rounded as the norm kernel's output */
        }
        for (int m = 0; m < M; m++)
            for (int n = 0; n < OC; n++) {
                double sum = 0.0;
                for (int k = 0; k < K; k++)
                    sum += (double)xn[(size_t)m * K + k] * w[(size_t)n * K + k];
                sums[(size_t)m * OC + n] = (float)sum;
            }
        if (swiglu) up(c, sums, (size_t)M * OC, pr->dt);
        for (int m = 0; m < M; m++)
            for (int n = 0; n < NO; n++) {
                const size_t i = (size_t)m * NO + n;
                if (swiglu) {
                    const double g = sums[(size_t)m * OC + n], u = sums[(size_t)m * OC + NO + n];
                    ref[i] = (float)(g / (1.0 + exp(-g)) * u);
                } else {
                    ref[i] = sums[i] + (res ? r[i] : 0.0f);
                }
            }
        const lb_gemv_opts o = {.split = split, .norm_w = d_nw, .eps = 1e-5f, .swiglu = swiglu};
        check(c, lb_gemv(d_y, yt, d_x, d_w, d_r, M, K, OC, &o, pr->dt, 0, c->err));
        down(c, out, d_y, ny, yt);
        compare(c, "gemv", shape, pr, out, ref, ny);
    }
    release(c);
    free(x), free(xn), free(w), free(nwt), free(r), free(ref), free(out), free(sums);
}

/* The qkv product with RoPE and the KV store inside lb_gemv (its kv option) against the
 * same product without it followed by lb_paged_kv_store: q, k, v rows of M tokens, the
 * first `rows` of them at random positions under T into distinct random slots of a cache
 * of 64, the rest left unrotated and unstored; the rows and both caches compared. */
static void check_gemv_kv(ctx *c, const prec_t *pr, int M, int rows, int NH, int NKV, int HD,
                          int split, bool norm) {
    char shape[80];
    snprintf(shape, sizeof shape, "M%d rows%d H%d/%d D%d split%d%s kv", M, rows, NH, NKV, HD, split,
             norm ? " norm" : "");
    enum { K = 512, T = 4096, SLOTS = 64 };
    const int OC = (NH + 2 * NKV) * HD;
    const size_t nx = (size_t)M * K, nw = (size_t)OC * K, ny = (size_t)M * OC;
    const size_t cache = (size_t)SLOTS * NKV * HD;
    float *x = hnew(nx), *w = hnew(nw), *nwt = hnew(K), *freq = hnew((size_t)HD / 2);
    float *ref = hnew(ny), *out = hnew(ny), *kref = hnew(cache), *kout = hnew(cache);
    int32_t pos[LB_GEMV_MAX_ROWS], slot[LB_GEMV_MAX_ROWS];
    randn(c, x, nx, 1.0f);
    randn(c, w, nw, 0.1f);
    for (int k = 0; k < K; k++)
        nwt[k] = 1.0f + 0.1f * (float)lb_rng_normal(&c->rng);
    for (int i = 0; i < HD / 2; i++)
        freq[i] = powf(10000.0f, -2.0f * (float)i / (float)HD);
    for (int i = 0; i < M; i++) {
        pos[i] = (int32_t)lb_rng_below(&c->rng, T);
        slot[i] = i * (SLOTS / LB_GEMV_MAX_ROWS) + (int32_t)lb_rng_below(&c->rng, 8);
    }
    void *d_x = up(c, x, nx, pr->dt), *d_w = up(c, w, nw, pr->dt);
    void *d_nw = norm ? up(c, nwt, K, pr->dt) : NULL;
    const size_t eb = lb_dtype_bytes(pr->dt);
    void *d_y = dev(c, ny * eb), *d_ref = dev(c, ny * eb);
    void *d_kc = dev(c, cache * eb), *d_vc = dev(c, cache * eb);
    void *d_kr = dev(c, cache * eb), *d_vr = dev(c, cache * eb);
    float *d_f = dev(c, (size_t)HD / 2 * 4), *d_cs = dev(c, (size_t)T * HD * 4);
    int32_t *d_pos = upi(c, pos, (size_t)M), *d_slot = upi(c, slot, (size_t)M);
    if (c->st == LB_OK) {
        check_cuda(c, cudaMemcpy(d_f, freq, (size_t)HD / 2 * 4, cudaMemcpyHostToDevice), "freqs");
        check(c, lb_rope_table(d_cs, d_f, T, HD, 0, c->err));
        const lb_gemv_kv kv = {.k_cache = d_kc,
                               .v_cache = d_vc,
                               .cs = d_cs,
                               .pos = d_pos,
                               .slot = d_slot,
                               .rows = rows,
                               .n_head = NH,
                               .n_kv_head = NKV,
                               .head_dim = HD};
        lb_gemv_opts o = {.split = split, .norm_w = d_nw, .eps = 1e-5f};
        check(c, lb_gemv(d_ref, pr->dt, d_x, d_w, NULL, M, K, OC, &o, pr->dt, 0, c->err));
        check(c, lb_paged_kv_store(d_kr, d_vr, d_ref, d_cs, d_pos, d_slot, rows, NH, NKV, HD,
                                   pr->dt, 0, c->err));
        o.kv = &kv;
        check(c, lb_gemv(d_y, pr->dt, d_x, d_w, NULL, M, K, OC, &o, pr->dt, 0, c->err));
        down(c, out, d_y, ny, pr->dt);
        down(c, ref, d_ref, ny, pr->dt);
        compare(c, "gemv.kv_rows", shape, pr, out, ref, ny);
        down(c, kout, d_kc, cache, pr->dt);
        down(c, kref, d_kr, cache, pr->dt);
        compare(c, "gemv.kv_k", shape, pr, kout, kref, cache);
        down(c, kout, d_vc, cache, pr->dt);
        down(c, kref, d_vr, cache, pr->dt);
        compare(c, "gemv.kv_v", shape, pr, kout, kref, cache);
    }
    release(c);
    free(x), free(w), free(nwt), free(freq), free(ref), free(out), free(kref), free(kout);
}

/* RoPE of a batch of tokens at their own positions (a mixed batch of sequences), as the
 * engine rotates them: inside lb_paged_kv_store (token i to slot i of a scratch cache). */
static void check_rope_positions(ctx *c, const prec_t *pr, int N, int NH, int NKV, int HD, int T) {
    char shape[56];
    snprintf(shape, sizeof shape, "N%d H%d/%d D%d pos<%d llama3", N, NH, NKV, HD, T);
    lb_model_config cfg;
    lb_err e2;
    if (lb_model_config_preset("llama3.1-8b", &cfg, &e2) != LB_OK) return;
    cfg.d_model = NH * HD, cfg.n_head = NH, cfg.n_kv_head = NKV;
    size_t n = (size_t)N * (NH + 2 * NKV) * HD;
    float *x = hnew(n), *out = hnew(n), *freq = hnew(HD / 2);
    int32_t *pos = malloc((size_t)N * 4);
    for (int i = 0; i < N; i++)
        pos[i] = (int32_t)lb_rng_below(&c->rng, (uint64_t)T);
    randn(c, x, n, 1.0f);
    lb_ref_rope_freqs(&cfg, freq);
    void *d_x = up(c, x, n, pr->dt);
    float *d_f = dev(c, (size_t)HD / 2 * 4), *d_cs = dev(c, (size_t)T * HD * 4);
    int32_t *d_pos = upi(c, pos, N), *slot = malloc((size_t)N * 4);
    for (int i = 0; i < N; i++)
        slot[i] = i;
    int32_t *d_slot = upi(c, slot, N);
    void *d_kc = dev(c, (size_t)N * NKV * HD * lb_dtype_bytes(pr->dt));
    void *d_vc = dev(c, (size_t)N * NKV * HD * lb_dtype_bytes(pr->dt));
    if (c->st == LB_OK) {
        check_cuda(c, cudaMemcpy(d_f, freq, (size_t)HD / 2 * 4, cudaMemcpyHostToDevice), "freqs");
        check(c, lb_rope_table(d_cs, d_f, T, HD, 0, c->err));
        lb_ref_rope_positions(x, pos, freq, N, NH, NKV, HD);
        check(c, lb_paged_kv_store(d_kc, d_vc, d_x, d_cs, d_pos, d_slot, N, NH, NKV, HD, pr->dt, 0,
                                   c->err));
        down(c, out, d_x, n, pr->dt);
        compare(c, "rope.positions", shape, pr, out, x, n);
    }
    release(c);
    free(x), free(out), free(freq), free(pos), free(slot);
}

/* Greedy choice of rows of logits, ties to the first index, a NaN never chosen over a
 * number (one in each row, at index 0 in every other row; the last row all NaN, whose
 * choice is index 0); with scratch (rows of at most LB_ARGMAX_SPLIT_ROWS over many blocks
 * each) twice, the logits negated the second time (wrong where the first call left the
 * scratch's counters dirty). */
static void check_argmax(ctx *c, int n, int V, bool scratch) {
    char shape[56];
    snprintf(shape, sizeof shape, "rows%d V%d%s", n, V, scratch ? " scratch" : "");
    float *x = hnew((size_t)n * V);
    randn(c, x, (size_t)n * V, 1.0f);
    for (int r = 0; r < n; r++) { /* a tie: the first of two equal maxima wins */
        int a = (int)lb_rng_below(&c->rng, (uint64_t)V / 2);
        x[(size_t)r * V + a] = x[(size_t)r * V + V - 1 - a] = 100.0f;
        const int mid = V / 2 + (V / 2 == V - 1 - a); /* neither maximum */
        x[(size_t)r * V + (r % 2 == 0 && a != 0 ? 0 : mid)] = NAN;
    }
    for (int v = 0; n > 1 && v < V; v++)
        x[(size_t)(n - 1) * V + v] = NAN;
    float *d_x = dev(c, (size_t)n * V * 4);
    void *d_s = scratch ? dev(c, LB_ARGMAX_SCRATCH_BYTES) : NULL; /* zero */
    int32_t *d_o = dev(c, (size_t)n * 4), *o = malloc((size_t)n * 4);
    int wrong = 0;
    for (int pass = 0; pass < (scratch ? 2 : 1) && c->st == LB_OK; pass++) {
        if (pass == 1)
            for (size_t e = 0; e < (size_t)n * V; e++)
                x[e] = -x[e];
        check_cuda(c, cudaMemcpy(d_x, x, (size_t)n * V * 4, cudaMemcpyHostToDevice), "logits");
        check(c, lb_logits_argmax(d_o, d_x, n, V, d_s, 0, c->err));
        check_cuda(c, cudaMemcpy(o, d_o, (size_t)n * 4, cudaMemcpyDeviceToHost), "argmax");
        for (int r = 0; r < n && c->st == LB_OK; r++)
            wrong += o[r] != lb_sample_argmax(x + (size_t)r * V, V);
    }
    if (c->st == LB_OK) record(c, "sample.argmax", shape, "fp32", wrong, wrong, wrong == 0);
    release(c);
    free(x), free(o);
}

/* The whole engine: random bf16 weights made on the GPU, read back into a CPU engine (the
 * fp32 reference over the very same weights). Logits of a prompt (relative L2 against the
 * bf16 model bound), then n_gen greedy tokens from the GPU engine's paged decode, each
 * checked against the CPU's logits over the GPU's sequence: the same token, or one whose
 * logit is within twice the largest logit error of the prompt check below the best (a
 * near-tie that bf16 may break either way). The GPU engine is warmed up first
 * (lb_engine_warmup), so these steps run the graphs and plans it prepared. */
static void check_engine(ctx *c, const lb_model_config *cfg, const char *label, int n_prompt,
                         int n_gen) {
    if (c->st != LB_OK) return;
    const prec_t *pr = &PRECS[2];
    char shape[56];
    snprintf(shape, sizeof shape, "%s prompt%d gen%d", label, n_prompt, n_gen);
    lb_engine_params ep = lb_engine_default_params();
    ep.max_seqs = 64;
    ep.step_tokens = 256;
    ep.max_ctx = 256;
    ep.kv_tokens = 2048;
    ep.device_index = c->p->device;
    lb_weights w = {.cfg = *cfg, .seed = c->rep->seed};
    lb_engine *g = NULL, *h = NULL;
    lb_status st = lb_engine_open(&g, &ep, &w, c->err);
    /* the steps below then run the decode graphs and prefill plans the warm-up made */
    if (st == LB_OK) st = lb_engine_warmup(g, n_prompt, c->err);
    lb_weights wg = g ? lb_engine_weights(g) : w;
    ep.device = LB_ENGINE_CPU;
    ep.kv_tokens = 512;
    if (st == LB_OK) st = lb_engine_open(&h, &ep, &wg, c->err);
    const int V = cfg->vocab_size, n_all = n_prompt + n_gen;
    int32_t *ids = malloc((size_t)n_all * 4);
    float *lg = malloc((size_t)n_all * V * 4), *lc = malloc((size_t)n_all * V * 4);
    for (int i = 0; i < n_prompt; i++)
        ids[i] = (int32_t)lb_rng_below(&c->rng, (uint64_t)V);
    if (st == LB_OK) st = lb_engine_logits(g, ids, n_prompt, lg, c->err);
    if (st == LB_OK) st = lb_engine_logits(h, ids, n_prompt, lc, c->err);
    diff_t d = {0};
    if (st == LB_OK) {
        d = differences(pr, 1.0, lg, lc, (size_t)n_prompt * V);
        record(c, "engine.logits", shape, pr->name, d.rel_l2 / pr->model_rel, d.rel_l2,
               d.rel_l2 <= pr->model_rel);
        lb_engine_request rq = {.sampling = lb_sample_default(), .max_tokens = n_gen};
        int64_t id;
        int got = 0;
        st = lb_engine_submit(g, ids, n_prompt, &rq, &id, c->err);
        while (st == LB_OK && lb_engine_pending(g) > 0) {
            const lb_engine_event *ev;
            int32_t n;
            st = lb_engine_step(g, &ev, &n, c->err);
            for (int32_t k = 0; k < n && got < n_gen; k++)
                ids[n_prompt + got++] = ev[k].token;
        }
        if (st == LB_OK) st = lb_engine_logits(h, ids, n_all - 1, lc, c->err);
        int off = 0;
        for (int k = 0; st == LB_OK && k < n_gen; k++) {
            const float *row = lc + (size_t)(n_prompt - 1 + k) * V;
            int best = lb_sample_argmax(row, V);
            if (ids[n_prompt + k] != best && row[best] - row[ids[n_prompt + k]] > 2 * d.max_abs)
                off++;
        }
        if (st == LB_OK)
            record(c, "engine.greedy", shape, pr->name, off, off, off == 0 && got == n_gen);
    }
    if (st != LB_OK) check(c, st);
    lb_engine_close(h);
    lb_engine_close(g);
    free(ids), free(lg), free(lc);
}

static void test_configs(lb_model_config *gpt, lb_model_config *llama) {
    lb_err e;
    lb_model_config_preset("gpt2-tiny", gpt, &e);
    snprintf(gpt->name, sizeof gpt->name, "gpt2-test");
    gpt->vocab_size = 500, gpt->max_seq = 128, gpt->n_layer = 2, gpt->n_head = 4;
    gpt->n_kv_head = 4, gpt->d_model = 256, gpt->d_ff = 1024;
    lb_model_config_preset("llama-tiny", llama, &e);
    snprintf(llama->name, sizeof llama->name, "llama-test");
    llama->vocab_size = 300, llama->max_seq = 128, llama->n_layer = 2, llama->n_head = 4;
    llama->n_kv_head = 2, llama->d_model = 256, llama->d_ff = 344;
}

lb_status lb_selftest_run(const lb_selftest_params *p, lb_selftest_report *rep, lb_err *err) {
    memset(rep, 0, sizeof *rep);
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        cudaGetLastError();
        return lb_fail(err, LB_ERR_UNSUPPORTED, "no CUDA device: the selftest needs an NVIDIA GPU");
    }
    if (p->device < 0 || p->device >= n)
        return lb_fail(err, LB_ERR_USAGE, "--device %d: this machine has CUDA devices 0..%d",
                       p->device, n - 1);
    LB_CUDA_TRY(err, cudaSetDevice(p->device));
    ctx c;
    memset(&c, 0, sizeof c);
    c.err = err;
    c.rep = rep;
    c.p = p;
    lb_progress_init(&c.prog, p->progress);
    rep->seed = p->seed ? p->seed : (uint64_t)lb_clock_now_ns();
    lb_rng_seed(&c.rng, rep->seed);
    /* four handles (plain fp32, 3xTF32, int8 planes, the faster of plain and int8 per
     * problem) sharing one workspace and one scratch, which outlive the per-check releases */
    lb_blas *blas = NULL, *split = NULL, *cut = NULL, *faster = NULL;
    size_t split_bytes = lb_blas_gemm_scratch_bytes(LB_BLAS_FP32_3XTF32, 1024, 1024, 1024);
    size_t cut_bytes = lb_blas_gemm_scratch_bytes(LB_BLAS_FP32_INT8, 1024, 1024, 1024);
    if (cut_bytes > split_bytes) split_bytes = cut_bytes;
    void *ws = NULL, *scratch = NULL;
    check_cuda(&c, cudaMalloc(&ws, LB_BLAS_WORKSPACE_BYTES), "cudaMalloc workspace");
    check_cuda(&c, cudaMalloc(&scratch, split_bytes), "cudaMalloc split scratch");
    lb_blas_params bp = lb_blas_default_params();
    bp.workspace = ws, bp.workspace_bytes = LB_BLAS_WORKSPACE_BYTES;
    if (c.st == LB_OK) check(&c, lb_blas_init(&blas, &bp, err));
    bp.fp32_mode = LB_BLAS_FP32_3XTF32, bp.split_scratch = scratch,
    bp.split_scratch_bytes = split_bytes;
    if (c.st == LB_OK) check(&c, lb_blas_init(&split, &bp, err));
    bp.fp32_mode = LB_BLAS_FP32_INT8;
    if (c.st == LB_OK) check(&c, lb_blas_init(&cut, &bp, err));
    bp.fp32_mode = LB_BLAS_FP32_AUTO;
    if (c.st == LB_OK) check(&c, lb_blas_init(&faster, &bp, err));
    for (int k = 0; p->kernels && k < 3 && c.st == LB_OK; k++) {
        const prec_t *pr = &PRECS[k];
        if (wanted(&c, "embed")) {
            check_embed(&c, pr, 2, 64, 96, 100, true);
            check_embed(&c, pr, 3, 17, 64, 50, false);
            check_embed(&c, pr, 2, 9, 20, 30, true); /* C not a multiple of 8: scalar */
            check_embed_sorted(&c, pr, LB_DT_F32, 4, 256, 96, 37);
            check_embed_sorted(&c, pr, LB_DT_F32, 2, 300, 20, 1000);
            if (pr->dt != LB_DT_F32) check_embed_sorted(&c, pr, pr->dt, 4, 256, 96, 37);
        }
        if (wanted(&c, "layernorm")) {
            check_norm(&c, pr, 130, 96, true);
            check_norm(&c, pr, 16, 2048, true);
            check_norm(&c, pr, 600, 768, true);
            check_norm(&c, pr, 40, 100, true); /* not a multiple of 8: scalar kernels */
        }
        if (wanted(&c, "rmsnorm")) {
            check_norm(&c, pr, 130, 96, false);
            check_norm(&c, pr, 16, 2048, false);
            check_norm(&c, pr, 600, 768, false);
            check_norm(&c, pr, 40, 100, false);    /* not a multiple of 8: scalar kernels */
            check_norm(&c, pr, 3, 4096, false);    /* wide rows: a block a row forward */
            check_norm(&c, pr, 2, 2056, false);    /* a partly filled last vector a thread */
            check_norm(&c, pr, 2000, 4096, false); /* backward: blocks walk several rows */
            check_norm(&c, pr, 300, 6152, false);  /* four vectors a thread: the last, thread 0 */
        }
        if (wanted(&c, "matmul")) {
            check_matmul(&c, pr, blas, 96, 64, 200);
            check_matmul(&c, pr, blas, 64, 256, 56);
            check_matmul(&c, pr, blas, 128, 192, 192);
            if (pr->dt == LB_DT_F32) { /* the same checks with the other fp32 products */
                for (int v = 0; v < 3; v++) {
                    const prec_t *alt = v == 0 ? &SPLIT : v == 1 ? &CUT : &AUTO;
                    lb_blas *h = v == 0 ? split : v == 1 ? cut : faster;
                    check_matmul(&c, alt, h, 96, 64, 200);
                    check_matmul(&c, alt, h, 64, 256, 56);
                    check_matmul(&c, alt, h, 128, 192, 192);
                    check_matmul(&c, alt, h, 37, 61, 29);
                }
                check_matmul_accuracy_set(&c, pr->name, blas);
                check_matmul_accuracy_set(&c, SPLIT.name, split);
                check_matmul_accuracy_set(&c, CUT.name, cut);
                check_matmul_accuracy_set(&c, AUTO.name, faster);
            }
        }
        if (pr->dt == LB_DT_F32 && wanted(&c, "graph")) check_graph_memsets(&c);
        if (pr->dt == LB_DT_F32 && wanted(&c, "tf32")) {
            check_tf32_split(&c, 37, 61, 61, 64);
            check_tf32_split(&c, 64, 128, 132, 128);
            check_tf32_split(&c, 5, 3, 7, 4);
        }
        if (pr->dt == LB_DT_F32 && wanted(&c, "int8")) {
            check_slices_cut(&c, 40, 100, 103, true);
            check_slices_cut(&c, 40, 100, 45, false);
            check_slices_cut(&c, 70, 300, 80, false);
        }
        if (wanted(&c, "attention")) {
            /* with warpgroup MMAs on this device, the mma.sync kernels of older GPUs too */
            int n_impl = pr->dt != LB_DT_F32 && lb_attention_wgmma() ? 2 : 1;
            for (int ik = 0; ik < n_impl; ik++) {
                lb_gpu_attn_impl impl = ik == 0 ? LB_ATTN_AUTO : LB_ATTN_MMA_SYNC;
                check_attention(&c, pr, 2, 100, 4, 4, 64, impl, NULL);
                check_attention(&c, pr, 1, 130, 8, 2, 64, impl, NULL);
                check_attention(&c, pr, 1, 77, 4, 2, 64, impl, NULL);
                check_attention(&c, pr, 1, 256, 2, 2, 64, impl, NULL);
                check_attention(&c, pr, 1, 1000, 2, 1, 64, impl, NULL);
            }
            if (pr->dt != LB_DT_F32) {
                check_attention_cudnn(&c, pr, 2, 100, 4, 4, 64);
                check_attention_cudnn(&c, pr, 1, 130, 8, 2, 64);
                check_attention_cudnn(&c, pr, 1, 1000, 2, 1, 64);
            }
            check_attention(&c, pr, 2, 100, 4, 4, 64, LB_ATTN_SCALAR, NULL);
            check_attention(&c, pr, 2, 40, 4, 2, 16, LB_ATTN_SCALAR, NULL);
            check_attention(&c, pr, 1, 33, 2, 1, 128, LB_ATTN_SCALAR, NULL);
        }
        if (wanted(&c, "rope")) {
            check_rope(&c, pr, 2, 50, 4, 2, 64);
            check_rope(&c, pr, 1, 9, 2, 1, 8); /* head size not a multiple of 16: pair kernel */
        }
        if (wanted(&c, "gelu") || wanted(&c, "swiglu")) {
            check_act(&c, pr, 50, 96);
            check_act(&c, pr, 7, 20); /* d_ff not a multiple of 8: scalar SwiGLU */
        }
        if (wanted(&c, "softmax_xent")) {
            check_xent(&c, pr, 64, 1000);
            check_xent(&c, pr, 8, 50257);
            check_xent(&c, pr, 4, 128256); /* Llama 3 vocabulary: a row partly read twice */
        }
        if (wanted(&c, "nf4")) {
            if (pr->dt == LB_DT_F32) {
                check_nf4_quantize(&c, 4096 * 344);                 /* 86 groups */
                check_nf4_quantize(&c, 64 * 256 * 2 + 64 * 5 + 40); /* partial block, group */
            }
            check_nf4_dequantize(&c, pr, 4096 * 344);
            check_nf4_dequantize(&c, pr, 64 * 256 * 3 + 8);
        }
        if (wanted(&c, "grad_pack")) check_grad_pack(&c, pr);
        if (wanted(&c, "adamw")) {
            check_adamw(&c, pr, 10001, false);
            check_adamw(&c, pr, 5000001, false); /* threads take several vectors, across segments */
            if (pr->dt != LB_DT_F32) check_adamw(&c, pr, 10001, true);
        }
        if (wanted(&c, "paged")) {
            const int dec[] = {1, 15, 16, 17, 100, 1000}, pre[] = {33, 200, 16}, one[] = {8192};
            check_paged(&c, pr, 32, 8, 128, 16, dec, 6, 1, 1, false);  /* decodes, block edges */
            check_paged(&c, pr, 32, 8, 128, 16, pre, 3, 40, 1, false); /* prefill chunks */
            check_paged(&c, pr, 8, 8, 64, 16, pre, 3, 7, 1, false);    /* no grouping, size 64 */
            check_paged(&c, pr, 8, 1, 128, 32, one, 1, 3, 1, false);   /* 8k, one kv head */
            /* contexts split over blocks (flash-decoding): decodes, splits left empty by
             * short contexts, the most splits over 8k */
            check_paged(&c, pr, 32, 8, 128, 16, dec, 6, 1, 5, false);
            check_paged(&c, pr, 8, 8, 64, 16, pre, 3, 7, 3, false);
            check_paged(&c, pr, 8, 1, 128, 32, one, 1, 3, LB_PAGED_MAX_SPLITS, false);
            /* RoPE inside the store (the engine's way): decodes, prefill chunks */
            check_paged(&c, pr, 32, 8, 128, 16, dec, 6, 1, 5, true);
            check_paged(&c, pr, 8, 2, 64, 16, pre, 3, 40, 1, true);
        }
        if (wanted(&c, "gemv")) {
            check_gemv(&c, pr, 1, 4096, 200, false, false, 1, false, false);
            check_gemv(&c, pr, 3, 512, 96, true, false, 2, false, false);
            check_gemv(&c, pr, 8, 1024, 77, false, true, 1, false, false); /* the head */
            /* K split over warps (part of the warps idle at 8), the norm inside (with fp32
             * logits), the SwiGLU, both (mlp_in of a decode step) */
            check_gemv(&c, pr, 2, 4096, 130, true, false, 4, false, false);
            check_gemv(&c, pr, 5, 1024, 40, false, false, 8, false, false);
            check_gemv(&c, pr, 1, 4096, 96, false, true, 2, true, false);
            check_gemv(&c, pr, 3, 2048, 160, false, false, 1, true, false);
            check_gemv(&c, pr, 4, 1024, 128, false, false, 2, false, true);
            check_gemv(&c, pr, 1, 4096, 256, false, false, 4, true, true);
            check_gemv(&c, pr, 2, 512, 64, false, false, 8, true, true);
            /* RoPE and the KV store inside (the engine's qkv at a decode bucket): every split
             * that has pairs, padded rows left out, a norm beside it, head size 64 and 128 */
            check_gemv_kv(&c, pr, 1, 1, 32, 8, 128, 4, true);
            check_gemv_kv(&c, pr, 4, 3, 8, 2, 64, 2, false);
            check_gemv_kv(&c, pr, 8, 8, 4, 4, 128, 1, true);
        }
        /* fp32 angles pos * inv_freq are off by up to pos * 2^-24 radians (the table is
         * fp32, as HF's rotary embedding): past about 2k positions that exceeds fp32's
         * tolerance against the double reference, so fp32 checks 1k and 16-bit types 8k */
        if (wanted(&c, "rope"))
            check_rope_positions(&c, pr, 37, 8, 2, 128, pr->dt == LB_DT_F32 ? 1024 : 8192);
    }
    if (p->kernels && wanted(&c, "sample")) {
        check_argmax(&c, 5, 128256, false);
        check_argmax(&c, 1, 128256, true); /* the engine's head at a decode step */
        check_argmax(&c, 8, 1001, true);   /* a row not of whole 16-byte pieces */
        check_argmax(&c, 9, 5000, true);   /* more rows than spread: one block each */
    }
    if (p->model && wanted(&c, "engine")) {
        /* head size 64, 4 query heads a kv head, llama3 RoPE */
        lb_model_config small;
        lb_err e;
        lb_model_config_preset("llama3.2-1b", &small, &e);
        small.vocab_size = 1000, small.n_layer = 2, small.d_model = 512, small.n_head = 8;
        small.n_kv_head = 2, small.d_ff = 1024, small.max_seq = 256;
        check_engine(&c, &small, "llama-small", 40, 16);
    }
    if (p->model && p->only != NULL && strcmp(p->only, BIG_ENGINE) == 0) {
        lb_model_config big;
        lb_err e;
        lb_model_config_preset("llama3.1-8b", &big, &e);
        check_engine(&c, &big, "llama3.1-8b", 16, 8);
    }
    if (p->model && wanted(&c, "model")) {
        lb_model_config gpt, llama, tiny_g, tiny_l;
        test_configs(&gpt, &llama);
        lb_err e;
        lb_model_config_preset("gpt2-tiny", &tiny_g, &e);
        lb_model_config_preset("llama-tiny", &tiny_l, &e);
        for (int k = 0; k < 3 && c.st == LB_OK; k++) {
            check_model(&c, &PRECS[k], &gpt, 2, 128, false, false, LB_GELU_PRODUCT_CUDNN);
            check_model(&c, &PRECS[k], &gpt, 2, 128, true, false, LB_GELU_PRODUCT_CUDNN);
            check_model(&c, &PRECS[k], &gpt, 2, 128, false, true, LB_GELU_PRODUCT_AUTO);
            check_model(&c, &PRECS[k], &llama, 2, 128, false, false, LB_GELU_PRODUCT_AUTO);
            check_model(&c, &PRECS[k], &llama, 2, 128, true, false, LB_GELU_PRODUCT_AUTO);
            check_model(&c, &PRECS[k], &tiny_g, 4, 32, false, false, LB_GELU_PRODUCT_CUBLASLT);
            check_model(&c, &PRECS[k], &tiny_l, 3, 20, false, false, LB_GELU_PRODUCT_AUTO);
        }
        if (c.st == LB_OK)
            check_model(&c, &SPLIT, &gpt, 2, 128, false, false, LB_GELU_PRODUCT_AUTO);
        if (c.st == LB_OK)
            check_model(&c, &SPLIT, &llama, 2, 128, false, false, LB_GELU_PRODUCT_AUTO);
        if (c.st == LB_OK) check_model(&c, &CUT, &gpt, 2, 128, false, false, LB_GELU_PRODUCT_AUTO);
        if (c.st == LB_OK)
            check_model(&c, &CUT, &llama, 2, 128, false, false, LB_GELU_PRODUCT_AUTO);
        if (c.st == LB_OK) check_model(&c, &AUTO, &gpt, 2, 128, false, false, LB_GELU_PRODUCT_AUTO);
        if (c.st == LB_OK)
            check_model(&c, &AUTO, &llama, 2, 128, false, false, LB_GELU_PRODUCT_AUTO);
    }
    if (p->model && wanted(&c, "lora")) {
        lb_model_config gpt, llama;
        test_configs(&gpt, &llama);
        for (int k = 0; k < 3 && c.st == LB_OK; k++) {
            check_lora_model(&c, &PRECS[k], &llama, 2, 128, LB_QUANT_NONE, "all");
            check_lora_model(&c, &PRECS[k], &gpt, 2, 128, LB_QUANT_NONE, "q,v,o,down");
            if (PRECS[k].dt != LB_DT_F32) {
                check_lora_model(&c, &PRECS[k], &llama, 2, 128, LB_QUANT_NF4, "all");
                check_lora_model(&c, &PRECS[k], &gpt, 2, 128, LB_QUANT_NF4, "all");
            }
        }
    }
    lb_blas_free(blas);
    lb_blas_free(split);
    lb_blas_free(cut);
    lb_blas_free(faster);
    cudaDeviceSynchronize();
    if (ws) cudaFree(ws);
    if (scratch) cudaFree(scratch);
    release(&c);
    lb_progress_done(&c.prog);
    return c.st;
}

#endif
