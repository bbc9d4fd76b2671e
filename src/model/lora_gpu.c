/* lora_gpu.c: LoRA adapters and the frozen NF4 base on the device (lora_gpu.h).
 *
 * Every adapter product is a cuBLASLt call of gpu/blas/matmul.h on the model's handle and
 * stream; the base's NF4 projections are dequantised by kernels/nf4.cuh into one scratch
 * just before the product that reads them (forward, and the backward's input gradient),
 * so only one fused tensor is ever held in the working type. AdamW runs over all adapter
 * tensors as one segment (all 2-D, all decayed) with the model's optimizer kernels. Not
 * here: the base products, which tensor a product reads (model_gpu.c decides). */
#ifdef LB_HAVE_CUDA

#include "model/lora_gpu.h"

#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/check.h"
#include "kernels/act.cuh"
#include "kernels/nf4.cuh"
#include "model/nf4.h"

struct lb_lora_gpu {
    lb_model_config cfg;
    lb_lora_config lc;
    lb_lora_offsets off;
    lb_param_offsets po;
    float scale;
    int64_t BT;
    lb_gpu_dtype dt;
    size_t es;
    lb_lora_gpu_external ext;
    float *master, *grads, *m, *v; /* fp32 [off.total]; NULL where external */
    void *work;                    /* working copy (== master in fp32 with its own optimizer) */
    float **layer_grads;           /* [L]: where layer l's gradient slots are */
    void **layer_work;             /* [L]: where layer l's working copy is */
    void *u, *du;                  /* [L, targets, BT, r], [BT, max_group r] */
    int max_group;                 /* most chosen targets on one base tensor */
    int64_t *seg_start;
    int32_t *seg_flags;
    /* NF4 base: per layer and target, codes (rounded up to 16 bytes), 8-bit absmax, scales
     * and a mean; absmax_tmp holds one projection's exact absmax while it is quantised */
    bool nf4;
    int64_t mat_numel; /* elements of one layer's four matrices */
    int64_t code_at[LB_LORA_N_TARGETS], aq_at[LB_LORA_N_TARGETS], sc_at[LB_LORA_N_TARGETS];
    int64_t code_layer, aq_layer, sc_layer; /* per-layer strides */
    uint8_t *codes;
    int8_t *aq;
    float *scales, *means, *absmax_tmp;
    void *wdq;     /* the widest fused matrix in the working type */
    int64_t wdq_n; /* its elements */
};

static lb_nf4_gpu_code nf4_code(void) {
    lb_nf4_gpu_code c;
    memcpy(c.v, lb_nf4_code, sizeof c.v);
    return c;
}

static bool has(const lb_lora_gpu *l, lb_lora_target t) {
    return (lb_lora_all_targets(l->cfg.family) >> t) & 1u;
}

/* The chosen targets on base tensor `which`, in target order, into ts; how many. Their A
 * are stacked (model/lora.h's layout) into one [n r, in] matrix at the first one's. */
static int group_of(const lb_lora_gpu *l, lb_lora_tensor which, int ts[LB_LORA_N_TARGETS]) {
    int n = 0;
    for (int t = 0; t < LB_LORA_N_TARGETS; t++)
        if (l->off.a[t] >= 0 && lb_lora_projection(&l->cfg, (lb_lora_target)t).tensor == which)
            ts[n++] = t;
    return n;
}

lb_status lb_lora_gpu_new(lb_lora_gpu **out, const lb_model_config *cfg, const lb_lora_config *lc,
                          int64_t BT, lb_gpu_dtype dt, const lb_lora_gpu_external *ext,
                          lb_err *err) {
    *out = NULL;
    LB_TRY(lb_lora_config_check(lc, cfg, err));
    lb_lora_gpu *l = calloc(1, sizeof *l);
    if (l != NULL) {
        l->layer_grads = calloc((size_t)cfg->n_layer, sizeof *l->layer_grads);
        l->layer_work = calloc((size_t)cfg->n_layer, sizeof *l->layer_work);
    }
    if (!l || !l->layer_grads || !l->layer_work) {
        lb_lora_gpu_free(l);
        return lb_fail(err, LB_ERR_NOMEM, "no host memory for the adapters");
    }
    l->ext = *ext;
    l->cfg = *cfg;
    l->lc = *lc;
    lb_lora_offsets_compute(cfg, lc, &l->off);
    lb_model_param_offsets(cfg, &l->po);
    l->scale = lc->alpha / (float)lc->rank;
    l->BT = BT;
    l->dt = dt;
    l->es = lb_dtype_bytes(dt);
    l->nf4 = lc->quant == LB_QUANT_NF4;
    const int64_t C = cfg->d_model;
    l->mat_numel = (int64_t)lb_model_qkv_dim(cfg) * C + C * C +
                   (int64_t)lb_model_mlp_in_dim(cfg) * C + C * cfg->d_ff;
    int64_t code = 0, aq = 0, sc = 0;
    for (int t = 0; t < LB_LORA_N_TARGETS; t++) {
        l->code_at[t] = l->aq_at[t] = l->sc_at[t] = -1;
        if (!has(l, (lb_lora_target)t)) continue;
        lb_lora_proj p = lb_lora_projection(cfg, (lb_lora_target)t);
        int64_t n = (int64_t)p.in * p.out;
        l->code_at[t] = code, l->aq_at[t] = aq, l->sc_at[t] = sc;
        code += (lb_nf4_code_bytes(n) + 15) / 16 * 16;
        aq += lb_nf4_blocks(n);
        sc += lb_nf4_groups(n);
        int64_t fused = (int64_t)p.ld_out * p.in;
        if (fused > l->wdq_n) l->wdq_n = fused;
    }
    l->code_layer = code, l->aq_layer = aq, l->sc_layer = sc;
    for (int w = LB_LORA_IN_QKV; w <= LB_LORA_IN_MLP_OUT; w++) {
        int ts[LB_LORA_N_TARGETS], n = group_of(l, (lb_lora_tensor)w, ts);
        if (n > l->max_group) l->max_group = n;
    }
    *out = l;
    return LB_OK;
}

void lb_lora_gpu_free(lb_lora_gpu *l) {
    if (l == NULL) return;
    free(l->layer_grads);
    free(l->layer_work);
    free(l);
}

#define TAKE(ptr, name, bytes)                                                                     \
    do {                                                                                           \
        void *tmp_;                                                                                \
        LB_TRY(lb_gpu_arena_alloc(a, name, (size_t)(bytes), &tmp_, err));                          \
        *(void **)&(ptr) = tmp_;                                                                   \
    } while (0)

lb_status lb_lora_gpu_carve(lb_lora_gpu *l, lb_gpu_arena *a, lb_err *err) {
    const size_t n = (size_t)l->off.total, r = (size_t)l->lc.rank, BT = (size_t)l->BT;
    const size_t L = (size_t)l->cfg.n_layer;
    const bool own_opt = !l->ext.external_optimizer;
    if (own_opt) TAKE(l->master, "lora.master", n * 4);
    if (!l->ext.external_grads) TAKE(l->grads, "lora.grad", n * 4);
    if (l->ext.external_work)
        l->work = NULL;
    else if (l->dt != LB_DT_F32 || !own_opt)
        TAKE(l->work, "lora.work", n * l->es);
    else
        l->work = l->master;
    if (own_opt) {
        TAKE(l->m, "opt.lora_m", n * 4);
        TAKE(l->v, "opt.lora_v", n * 4);
        TAKE(l->seg_start, "opt.lora_seg_start", 8);
        TAKE(l->seg_flags, "opt.lora_seg_flags", 4);
    }
    for (int layer = 0; layer < l->cfg.n_layer; layer++) {
        lb_lora_gpu_bind_grads(l, layer, NULL);
        lb_lora_gpu_bind_work(l, layer, NULL);
    }
    TAKE(l->u, "act.lora_u", L * LB_LORA_N_TARGETS * BT * r * l->es);
    TAKE(l->du, "grad.lora_du", BT * (size_t)l->max_group * r * l->es);
    if (l->nf4) {
        TAKE(l->codes, "param.nf4_codes", L * (size_t)l->code_layer);
        TAKE(l->aq, "param.nf4_absmax", L * (size_t)l->aq_layer);
        TAKE(l->scales, "param.nf4_scales", L * (size_t)l->sc_layer * 4);
        TAKE(l->means, "param.nf4_means", L * LB_LORA_N_TARGETS * 4);
        TAKE(l->absmax_tmp, "scratch.nf4_absmax", (size_t)lb_nf4_blocks(l->wdq_n) * 4);
        TAKE(l->wdq, "scratch.nf4_dequantised", (size_t)l->wdq_n * l->es);
    }
    return LB_OK;
}

lb_status lb_lora_gpu_upload_tables(lb_lora_gpu *l, void *stream, lb_err *err) {
    if (l->seg_start == NULL) return LB_OK; /* an external optimizer keeps its own */
    const int64_t start = 0;
    const int32_t flags = LB_SEG_DECAY;
    cudaStream_t s = (cudaStream_t)stream;
    LB_CUDA_TRY(err, cudaMemcpyAsync(l->seg_start, &start, 8, cudaMemcpyHostToDevice, s));
    LB_CUDA_TRY(err, cudaMemcpyAsync(l->seg_flags, &flags, 4, cudaMemcpyHostToDevice, s));
    return cudaStreamSynchronize(s) == cudaSuccess
               ? LB_OK
               : lb_fail(err, LB_ERR_DEVICE, "could not copy the adapters' table to the device");
}

int64_t lb_lora_gpu_n_params(const lb_lora_gpu *l) {
    return l->off.total;
}

float *lb_lora_gpu_grads(lb_lora_gpu *l, int64_t *layer_numel) {
    *layer_numel = l->off.layer_numel;
    return l->grads;
}

void *lb_lora_gpu_work(lb_lora_gpu *l) {
    return l->work;
}

void lb_lora_gpu_bind_grads(lb_lora_gpu *l, int layer, float *slots) {
    l->layer_grads[layer] = slots != NULL      ? slots
                            : l->grads != NULL ? l->grads + layer * l->off.layer_numel
                                               : NULL;
}

void lb_lora_gpu_bind_work(lb_lora_gpu *l, int layer, void *work) {
    l->layer_work[layer] = work != NULL ? work
                           : l->work != NULL
                               ? (char *)l->work + (size_t)(layer * l->off.layer_numel) * l->es
                               : NULL;
}

bool lb_lora_gpu_nf4(const lb_lora_gpu *l) {
    return l->nf4;
}

int64_t lb_lora_gpu_base_elems(const lb_lora_gpu *l) {
    return l->po.total - (l->nf4 ? l->cfg.n_layer * l->mat_numel : 0);
}

/* The layer matrix whose layer-relative offset is rel, or -1. */
static int matrix_at(const lb_lora_gpu *l, int64_t rel) {
    const lb_layer_offsets *o = &l->po.layer;
    return rel == o->qkv_w        ? LB_LORA_IN_QKV
           : rel == o->attn_out_w ? LB_LORA_IN_ATTN_OUT
           : rel == o->mlp_in_w   ? LB_LORA_IN_MLP_IN
           : rel == o->mlp_out_w  ? LB_LORA_IN_MLP_OUT
                                  : -1;
}

int64_t lb_lora_gpu_base_index(const lb_lora_gpu *l, int64_t off) {
    const lb_param_offsets *po = &l->po;
    const int64_t end = po->layers + l->cfg.n_layer * po->layer_numel;
    if (!l->nf4 || off < po->layers) return off;
    if (off >= end) return off - l->cfg.n_layer * l->mat_numel;
    const int64_t layer = (off - po->layers) / po->layer_numel;
    const int64_t rel = (off - po->layers) % po->layer_numel;
    const lb_layer_offsets *o = &po->layer;
    const int64_t C = l->cfg.d_model;
    const int64_t mats[4][2] = {{o->qkv_w, (int64_t)lb_model_qkv_dim(&l->cfg) * C},
                                {o->attn_out_w, C * C},
                                {o->mlp_in_w, (int64_t)lb_model_mlp_in_dim(&l->cfg) * C},
                                {o->mlp_out_w, C * l->cfg.d_ff}};
    int64_t before = 0;
    for (int i = 0; i < 4; i++)
        if (mats[i][0] < rel) before += mats[i][1];
    return po->layers + layer * (po->layer_numel - l->mat_numel) + rel - before;
}

lb_status lb_lora_gpu_base_set(lb_lora_gpu *l, void *base, int64_t off, int64_t numel,
                               const float *src, void *stream, lb_err *err) {
    const lb_param_offsets *po = &l->po;
    const int64_t end = po->layers + l->cfg.n_layer * po->layer_numel;
    int which = -1;
    int64_t layer = 0;
    if (l->nf4 && off >= po->layers && off < end) {
        layer = (off - po->layers) / po->layer_numel;
        which = matrix_at(l, (off - po->layers) % po->layer_numel);
    }
    if (which < 0)
        return lb_act_convert((char *)base + (size_t)lb_lora_gpu_base_index(l, off) * l->es, l->dt,
                              src, LB_DT_F32, numel, stream, err);
    for (int t = 0; t < LB_LORA_N_TARGETS; t++) {
        lb_lora_proj p = lb_lora_projection(&l->cfg, (lb_lora_target)t);
        if (!has(l, (lb_lora_target)t) || (int)p.tensor != which) continue;
        const int64_t n = (int64_t)p.in * p.out;
        uint8_t *codes = l->codes + layer * l->code_layer + l->code_at[t];
        int8_t *aq = l->aq + layer * l->aq_layer + l->aq_at[t];
        float *sc = l->scales + layer * l->sc_layer + l->sc_at[t];
        float *mean = l->means + layer * LB_LORA_N_TARGETS + t;
        LB_TRY(lb_nf4_gpu_quantize(codes, l->absmax_tmp, src + (int64_t)p.row0 * p.in, n,
                                   nf4_code(), stream, err));
        LB_TRY(
            lb_nf4_gpu_double_quantize(aq, sc, mean, l->absmax_tmp, lb_nf4_blocks(n), stream, err));
    }
    return LB_OK;
}

lb_status lb_lora_gpu_base_weight(lb_lora_gpu *l, void *base, int layer, int64_t rel,
                                  const void **w, void *stream, lb_err *err) {
    int which = matrix_at(l, rel);
    if (!l->nf4 || which < 0) {
        *w = (char *)base +
             (size_t)lb_lora_gpu_base_index(l, l->po.layers + layer * l->po.layer_numel + rel) *
                 l->es;
        return LB_OK;
    }
    for (int t = 0; t < LB_LORA_N_TARGETS; t++) {
        lb_lora_proj p = lb_lora_projection(&l->cfg, (lb_lora_target)t);
        if (!has(l, (lb_lora_target)t) || (int)p.tensor != which) continue;
        LB_TRY(lb_nf4_gpu_dequantize((char *)l->wdq + (size_t)p.row0 * p.in * l->es, l->dt,
                                     l->codes + layer * l->code_layer + l->code_at[t],
                                     l->aq + layer * l->aq_layer + l->aq_at[t],
                                     l->scales + layer * l->sc_layer + l->sc_at[t],
                                     l->means + layer * LB_LORA_N_TARGETS + t,
                                     (int64_t)p.in * p.out, nf4_code(), stream, err));
    }
    *w = l->wdq;
    return LB_OK;
}

/* LB_ERR_USAGE when the piece `what` is kept outside (NULL). */
static lb_status need(const void *piece, const char *what, lb_err *err) {
    if (piece != NULL) return LB_OK;
    return lb_fail(err, LB_ERR_USAGE, "the adapters' %s live in a ZeRO shard, not here", what);
}

lb_status lb_lora_gpu_set(lb_lora_gpu *l, const float *host, void *stream, lb_err *err) {
    LB_TRY(need(l->master, "master weights", err));
    LB_CUDA_TRY(err, cudaMemcpyAsync(l->master, host, (size_t)l->off.total * 4,
                                     cudaMemcpyHostToDevice, (cudaStream_t)stream));
    if (l->dt == LB_DT_F32) return LB_OK;
    return lb_act_convert(l->work, l->dt, l->master, LB_DT_F32, l->off.total, stream, err);
}

lb_status lb_lora_gpu_init_weights(lb_lora_gpu *l, uint64_t seed, void *stream, lb_err *err) {
    lb_lora host;
    LB_TRY(lb_lora_init(&host, &l->cfg, &l->lc, 1, seed, err));
    lb_status st = lb_lora_gpu_set(l, host.params, stream, err);
    if (st == LB_OK && cudaStreamSynchronize((cudaStream_t)stream) != cudaSuccess)
        st = lb_fail(err, LB_ERR_DEVICE, "could not copy the adapters to the device");
    lb_lora_free(&host);
    return st;
}

lb_status lb_lora_gpu_get(lb_lora_gpu *l, float *host, bool grads, void *stream, lb_err *err) {
    if (!grads && l->master == NULL && l->work != NULL) { /* the working copy, widened */
        float *wide = NULL;
        if (cudaMalloc((void **)&wide, (size_t)l->off.total * 4) != cudaSuccess) {
            cudaGetLastError();
            return lb_fail(err, LB_ERR_NOMEM, "no device memory to widen the adapters");
        }
        lb_status st = lb_act_convert(wide, LB_DT_F32, l->work, l->dt, l->off.total, stream, err);
        if (st == LB_OK &&
            cudaMemcpyAsync(host, wide, (size_t)l->off.total * 4, cudaMemcpyDeviceToHost,
                            (cudaStream_t)stream) != cudaSuccess)
            st = lb_fail(err, LB_ERR_DEVICE, "could not copy the adapters out");
        if (cudaStreamSynchronize((cudaStream_t)stream) != cudaSuccess && st == LB_OK)
            st = lb_fail(err, LB_ERR_DEVICE, "widening the adapters failed");
        cudaFree(wide);
        return st;
    }
    LB_TRY(need(grads ? (void *)l->grads : (void *)l->master,
                grads ? "gradients" : "master weights", err));
    LB_CUDA_TRY(err, cudaMemcpyAsync(host, grads ? l->grads : l->master, (size_t)l->off.total * 4,
                                     cudaMemcpyDeviceToHost, (cudaStream_t)stream));
    return LB_OK;
}

lb_status lb_lora_gpu_reset_moments(lb_lora_gpu *l, void *stream, lb_err *err) {
    if (l->m == NULL) return LB_OK; /* an external optimizer keeps its own */
    LB_CUDA_TRY(err, cudaMemsetAsync(l->m, 0, (size_t)l->off.total * 4, (cudaStream_t)stream));
    LB_CUDA_TRY(err, cudaMemsetAsync(l->v, 0, (size_t)l->off.total * 4, (cudaStream_t)stream));
    return LB_OK;
}

/* Pointers of target t's adapters in layer `layer`. */
typedef struct {
    lb_lora_proj p;
    const void *a, *b; /* working copies */
    float *ga, *gb;    /* fp32 gradients */
} adapter;

static adapter adapter_at(lb_lora_gpu *l, int layer, int t) {
    adapter r;
    r.p = lb_lora_projection(&l->cfg, (lb_lora_target)t);
    r.a = (char *)l->layer_work[layer] + (size_t)l->off.a[t] * l->es;
    r.b = (char *)l->layer_work[layer] + (size_t)l->off.b[t] * l->es;
    r.ga = l->layer_grads[layer] + l->off.a[t];
    r.gb = l->layer_grads[layer] + l->off.b[t];
    return r;
}

/* The intermediates of a group in layer `layer`: [BT, n r], in the slots of its targets
 * (consecutive target numbers from its first one). */
static void *group_u(const lb_lora_gpu *l, int layer, int first) {
    return (char *)l->u +
           ((size_t)layer * LB_LORA_N_TARGETS + (size_t)first) * (size_t)l->BT * l->lc.rank * l->es;
}

/* Columns [c0, c1) of y (rows ldy) = those of res (same rows), or zeros where res is NULL. */
static lb_status fill_columns(lb_lora_gpu *l, void *y, int64_t ldy, const void *res, int64_t c0,
                              int64_t c1, void *stream, lb_err *err) {
    if (c1 <= c0) return LB_OK;
    const size_t pitch = (size_t)ldy * l->es, w = (size_t)(c1 - c0) * l->es;
    char *dst = (char *)y + (size_t)c0 * l->es;
    cudaStream_t s = (cudaStream_t)stream;
    if (res != NULL)
        LB_CUDA_TRY(err, cudaMemcpy2DAsync(dst, pitch, (const char *)res + (size_t)c0 * l->es,
                                           pitch, w, (size_t)l->BT, cudaMemcpyDeviceToDevice, s));
    else
        LB_CUDA_TRY(err, cudaMemset2DAsync(dst, pitch, 0, w, (size_t)l->BT, s));
    return LB_OK;
}

lb_status lb_lora_gpu_forward(lb_lora_gpu *l, lb_blas *blas, int layer, lb_lora_tensor which,
                              void *y, int64_t ldy, const void **res, const void *x, int64_t ldx,
                              void *stream, lb_err *err) {
    const int r = l->lc.rank;
    int ts[LB_LORA_N_TARGETS];
    const int n = group_of(l, which, ts);
    if (n == 0) return LB_OK;
    const adapter first = adapter_at(l, layer, ts[0]);
    const int64_t ldu = (int64_t)n * r;
    char *u = group_u(l, layer, ts[0]);
    lb_blas_gemm g = {.m = l->BT,
                      .n = ldu,
                      .k = first.p.in,
                      .a = x,
                      .lda = ldx,
                      .b = first.a,
                      .ldb = first.p.in,
                      .trans_b = true,
                      .ab_type = l->dt,
                      .d = u,
                      .ldd = ldu,
                      .d_type = l->dt,
                      .alpha = 1.0f};
    LB_TRY(lb_blas_gemm_run(blas, &g, stream, err)); /* [u_1 .. u_n] = x [A_1; ..; A_n]^T */
    int64_t done = 0; /* columns of y written so far (targets in row order) */
    for (int i = 0; i < n; i++) {
        adapter ad = adapter_at(l, layer, ts[i]);
        LB_TRY(fill_columns(l, y, ldy, *res, done, ad.p.row0, stream, err));
        void *ys = (char *)y + (size_t)ad.p.row0 * l->es;
        lb_blas_gemm h = {.m = l->BT,
                          .n = ad.p.out,
                          .k = r,
                          .a = u + (size_t)i * r * l->es,
                          .lda = ldu,
                          .b = ad.b,
                          .ldb = r,
                          .trans_b = true,
                          .ab_type = l->dt,
                          .c = *res != NULL ? (const char *)*res + (size_t)ad.p.row0 * l->es : NULL,
                          .d = ys,
                          .ldd = ldy,
                          .d_type = l->dt,
                          .alpha = l->scale,
                          .beta = 1.0f};
        LB_TRY(lb_blas_gemm_run(blas, &h, stream, err)); /* y_i = res_i + s u_i B_i^T */
        done = ad.p.row0 + ad.p.out;
    }
    LB_TRY(fill_columns(l, y, ldy, *res, done, first.p.ld_out, stream, err));
    *res = y;
    return LB_OK;
}

lb_status lb_lora_gpu_backward(lb_lora_gpu *l, lb_blas *blas, int layer, lb_lora_tensor which,
                               void *dx, bool *wrote_dx, const void *dy, int64_t ldy, const void *x,
                               int64_t ldx, bool accumulate, void *stream, lb_err *err) {
    *wrote_dx = false;
    const int r = l->lc.rank;
    int ts[LB_LORA_N_TARGETS];
    const int n = group_of(l, which, ts);
    if (n == 0) return LB_OK;
    const adapter first = adapter_at(l, layer, ts[0]);
    const int64_t ldu = (int64_t)n * r;
    const char *u = group_u(l, layer, ts[0]);
    for (int i = 0; i < n; i++) {
        adapter ad = adapter_at(l, layer, ts[i]);
        const void *dys = (const char *)dy + (size_t)ad.p.row0 * l->es;
        /* dB_i = s dy_i^T u_i */
        lb_blas_gemm g = {.m = ad.p.out,
                          .n = r,
                          .k = l->BT,
                          .a = dys,
                          .lda = ldy,
                          .trans_a = true,
                          .b = u + (size_t)i * r * l->es,
                          .ldb = ldu,
                          .ab_type = l->dt,
                          .d = ad.gb,
                          .ldd = r,
                          .d_type = LB_DT_F32,
                          .alpha = l->scale};
        if (accumulate) g.c = g.d, g.beta = 1.0f;
        LB_TRY(lb_blas_gemm_run(blas, &g, stream, err));
        /* du_i = s dy_i B_i, columns i r .. (i + 1) r - 1 of du */
        g = (lb_blas_gemm){.m = l->BT,
                           .n = r,
                           .k = ad.p.out,
                           .a = dys,
                           .lda = ldy,
                           .b = ad.b,
                           .ldb = r,
                           .ab_type = l->dt,
                           .d = (char *)l->du + (size_t)i * r * l->es,
                           .ldd = ldu,
                           .d_type = l->dt,
                           .alpha = l->scale};
        LB_TRY(lb_blas_gemm_run(blas, &g, stream, err));
    }
    /* [dA_1; ..; dA_n] = du^T x */
    lb_blas_gemm g = {.m = ldu,
                      .n = first.p.in,
                      .k = l->BT,
                      .a = l->du,
                      .lda = ldu,
                      .trans_a = true,
                      .b = x,
                      .ldb = ldx,
                      .ab_type = l->dt,
                      .d = first.ga,
                      .ldd = first.p.in,
                      .d_type = LB_DT_F32,
                      .alpha = 1.0f};
    if (accumulate) g.c = g.d, g.beta = 1.0f;
    LB_TRY(lb_blas_gemm_run(blas, &g, stream, err));
    if (dx == NULL) return LB_OK;
    /* dx = du [A_1; ..; A_n] */
    g = (lb_blas_gemm){.m = l->BT,
                       .n = first.p.in,
                       .k = ldu,
                       .a = l->du,
                       .lda = ldu,
                       .b = first.a,
                       .ldb = first.p.in,
                       .ab_type = l->dt,
                       .d = dx,
                       .ldd = first.p.in,
                       .d_type = l->dt,
                       .alpha = 1.0f};
    LB_TRY(lb_blas_gemm_run(blas, &g, stream, err));
    *wrote_dx = true;
    return LB_OK;
}

lb_status lb_lora_gpu_optimizer(lb_lora_gpu *l, const lb_gpu_adamw_params *p, lb_gpu_optstate *st,
                                void *stream, lb_err *err) {
    LB_TRY(need(l->master, "master weights and moments", err));
    lb_gpu_segments sg = {l->seg_start, l->seg_flags, 1, l->off.total};
    LB_TRY(lb_adamw_grad_sumsq(st, l->grads, l->dt, &sg, (cudaStream_t)stream, err));
    LB_TRY(lb_adamw(l->master, l->dt == LB_DT_F32 ? NULL : l->work, NULL, l->dt, l->grads, l->m,
                    l->v, &sg, 0, sg.n, p, st, (cudaStream_t)stream, err));
    return lb_adamw_finish(st, p, (cudaStream_t)stream, err);
}

#endif
