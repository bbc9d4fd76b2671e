/* attn.c: cuDNN's fused attention through its backend graph API (gpu/cudnn/attn.h),
 * built with gpu/cudnn/graph.h's builder; the tensors bound at execution are UID_*.
 * The graphs are the ones cuDNN 9 recognises as flash attention (its fused engines match this
 * pattern of products, pointwise operations and reductions): scale times Q K^T, a causal
 * mask from generated row and column indices, the softmax with its log-sum-exp, P V; the
 * backward recomputes P from the log-sum-exp. A plan is the first engine configuration of
 * cuDNN's heuristic (mode A) that finalises (the fastest wherever timed: docs/PERFORMANCE.md,
 * "What was tried: attention"). Each call binds the ids to this layer's pointers and executes the
 * plan on the caller's stream. */
#ifdef LB_HAVE_CUDA

#include "gpu/cudnn/attn.h"

#ifndef LB_HAVE_CUDNN

lb_status lb_cudnn_attn_init(lb_cudnn_attn **out, int B, int T, int NH, int NKV, int HD,
                             lb_gpu_dtype dt, bool backward, lb_err *err) {
    *out = NULL;
    return lb_fail(err, LB_ERR_UNSUPPORTED, "this build has no cuDNN headers");
}
void lb_cudnn_attn_free(lb_cudnn_attn *a) {}
size_t lb_cudnn_attn_workspace_bytes(const lb_cudnn_attn *a) {
    return 0;
}
size_t lb_cudnn_version(void) {
    return 0;
}
lb_status lb_cudnn_attn_forward(lb_cudnn_attn *a, void *out, float *lse, const void *qkv,
                                void *workspace, cudaStream_t s, lb_err *err) {
    return lb_fail(err, LB_ERR_UNSUPPORTED, "this build has no cuDNN headers");
}
lb_status lb_cudnn_attn_backward(lb_cudnn_attn *a, void *dqkv, const void *dout, const void *qkv,
                                 const void *out, const float *lse, void *workspace, cudaStream_t s,
                                 lb_err *err) {
    return lb_fail(err, LB_ERR_UNSUPPORTED, "this build has no cuDNN headers");
}

#else

#include <math.h>
#include <stdlib.h>

#include "gpu/cudnn/graph.h"

enum {
    UID_Q = 1,
    UID_K,
    UID_V,
    UID_O,
    UID_STATS,
    UID_SCALE,
    UID_NEG_INF,
    UID_ONE,
    UID_DO,
    UID_DQ,
    UID_DK,
    UID_DV,
    UID_ROWSUM,
    UID_DQ_ACC
};

struct lb_cudnn_attn {
    int B, T, NH, NKV, HD;
    lb_gpu_dtype dt;
    cudnnHandle_t handle;
    lb_cudnn_plans fwd, bwd; /* bwd: none when built without a backward */
    bool backward;
    float scale, neg_inf, one; /* the by-value scalars */
};

typedef struct {
    int64_t dims[4], strides[4];
} view;

/* H heads [B, H, T, HD] of rows W elements wide */
static view heads(const lb_cudnn_attn *a, int H, int64_t W) {
    view v = {{a->B, H, a->T, a->HD}, {(int64_t)a->T * W, a->HD, W, 1}};
    return v;
}

/* the last two dimensions swapped */
static view transposed(view v) {
    view t = {{v.dims[0], v.dims[1], v.dims[3], v.dims[2]},
              {v.strides[0], v.strides[1], v.strides[3], v.strides[2]}};
    return t;
}

/* The causal mask over scores s [B,NH,T,T] (fp32): keys after the query become -inf. */
static lb_cudnn_desc causal(lb_cudnn_graph *g, const lb_cudnn_attn *a, lb_cudnn_desc s) {
    int64_t B = a->B, H = a->NH, T = a->T;
    lb_cudnn_desc row = lb_cudnn_inner(g, CUDNN_DATA_INT32, B, H, T, T),
                  col = lb_cudnn_inner(g, CUDNN_DATA_INT32, B, H, T, T);
    lb_cudnn_pointwise(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, s, NULL, NULL, row, 2);
    lb_cudnn_pointwise(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, s, NULL, NULL, col, 3);
    lb_cudnn_desc keep = lb_cudnn_inner(g, CUDNN_DATA_BOOLEAN, B, H, T, T),
                  masked = lb_cudnn_inner(g, CUDNN_DATA_FLOAT, B, H, T, T);
    lb_cudnn_pointwise(g, CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, row, col, NULL, keep, -1);
    lb_cudnn_pointwise(g, CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, s,
                       lb_cudnn_scalar(g, UID_NEG_INF), keep, masked, -1);
    return masked;
}

/* scale * Q K^T [B,NH,T,T] (fp32) */
static lb_cudnn_desc scores(lb_cudnn_graph *g, const lb_cudnn_attn *a, lb_cudnn_desc q,
                            lb_cudnn_desc kt) {
    int64_t B = a->B, H = a->NH, T = a->T;
    lb_cudnn_desc s = lb_cudnn_inner(g, CUDNN_DATA_FLOAT, B, H, T, T),
                  ss = lb_cudnn_inner(g, CUDNN_DATA_FLOAT, B, H, T, T);
    lb_cudnn_matmul(g, q, kt, s);
    lb_cudnn_fp32_op(g, CUDNN_POINTWISE_MUL, s, lb_cudnn_scalar(g, UID_SCALE), ss);
    return ss;
}

/* [B,H,T,T] seen as [B,H,T(keys),T(queries)], in type t */
static lb_cudnn_desc transpose_tt(lb_cudnn_graph *g, const lb_cudnn_attn *a, cudnnDataType_t t,
                                  lb_cudnn_desc x) {
    int64_t B = a->B, H = a->NH, T = a->T;
    const int64_t dims[4] = {B, H, T, T}, strides[4] = {H * T * T, T * T, 1, T};
    lb_cudnn_desc y = lb_cudnn_tensor(g, 0, t, 4, dims, strides, LB_CUDNN_VIRTUAL);
    lb_cudnn_reshape(g, x, y);
    return y;
}

/* The bound tensors of both graphs: views of qkv (or dqkv), out (or dout) and lse. */
typedef struct {
    view q, k, kt, v, vt, o, stats;
} views;

static views make_views(const lb_cudnn_attn *a) {
    int64_t W = (int64_t)(a->NH + 2 * a->NKV) * a->HD, H = a->NH, T = a->T;
    views v = {.q = heads(a, a->NH, W),
               .k = heads(a, a->NKV, W),
               .o = heads(a, a->NH, H * a->HD),
               .stats = {{a->B, H, T, 1}, {H * T, T, 1, 1}}};
    v.v = v.k;
    v.kt = transposed(v.k);
    v.vt = transposed(v.v);
    return v;
}

static lb_status build_forward(lb_cudnn_attn *a, lb_err *err) {
    lb_cudnn_graph g = {.next_virtual = LB_CUDNN_UID_VIRTUAL, .err = err};
    cudnnDataType_t t = lb_cudnn_type(a->dt), f = CUDNN_DATA_FLOAT;
    int64_t B = a->B, H = a->NH, T = a->T;
    views w = make_views(a);
    lb_cudnn_desc q = lb_cudnn_tensor(&g, UID_Q, t, 4, w.q.dims, w.q.strides, 0);
    lb_cudnn_desc kt = lb_cudnn_tensor(&g, UID_K, t, 4, w.kt.dims, w.kt.strides, 0);
    lb_cudnn_desc v = lb_cudnn_tensor(&g, UID_V, t, 4, w.v.dims, w.v.strides, 0);
    lb_cudnn_desc o = lb_cudnn_tensor(&g, UID_O, t, 4, w.o.dims, w.o.strides, 0);
    lb_cudnn_desc stats = lb_cudnn_tensor(&g, UID_STATS, f, 4, w.stats.dims, w.stats.strides, 0);
    lb_cudnn_desc s = causal(&g, a, scores(&g, a, q, kt));
    /* softmax with its statistics: lse = max + log(sum exp(s - max)), P = exp(s - max) / sum */
    lb_cudnn_desc mx = lb_cudnn_inner(&g, f, B, H, T, 1), d = lb_cudnn_inner(&g, f, B, H, T, T),
                  e = lb_cudnn_inner(&g, f, B, H, T, T);
    lb_cudnn_desc sum = lb_cudnn_inner(&g, f, B, H, T, 1), lg = lb_cudnn_inner(&g, f, B, H, T, 1);
    lb_cudnn_desc p = lb_cudnn_inner(&g, t, B, H, T, T);
    lb_cudnn_reduction(&g, CUDNN_REDUCE_TENSOR_MAX, s, mx);
    lb_cudnn_fp32_op(&g, CUDNN_POINTWISE_SUB, s, mx, d);
    lb_cudnn_fp32_op(&g, CUDNN_POINTWISE_EXP, d, NULL, e);
    lb_cudnn_reduction(&g, CUDNN_REDUCE_TENSOR_ADD, e, sum);
    lb_cudnn_fp32_op(&g, CUDNN_POINTWISE_LOG, sum, NULL, lg);
    lb_cudnn_fp32_op(&g, CUDNN_POINTWISE_ADD, mx, lg, stats);
    lb_cudnn_fp32_op(&g, CUDNN_POINTWISE_DIV, e, sum, p);
    lb_cudnn_matmul(&g, p, v, o);
    lb_status st = g.st == LB_OK
                       ? lb_cudnn_plans_build(&g, a->handle, 1, "attention forward graph", &a->fwd)
                       : g.st;
    lb_cudnn_graph_free(&g);
    return st;
}

/* The backward's own fp32 tensors at the start of its workspace: the rows of dO o O
 * [B,NH,T,1], then the dQ accumulator [B,NH,T,HD]; cuDNN's plan workspace after them. */
static size_t rowsum_bytes(const lb_cudnn_attn *a) {
    return ((size_t)a->B * a->NH * a->T * 4 + 255) / 256 * 256;
}
static size_t dq_acc_bytes(const lb_cudnn_attn *a) {
    return ((size_t)a->B * a->NH * a->T * a->HD * 4 + 255) / 256 * 256;
}

/* out = a_t b over [B,NH,...] products; summed over each group of query heads under GQA */
static void group_sum(lb_cudnn_graph *g, const lb_cudnn_attn *a, lb_cudnn_desc a_t, lb_cudnn_desc b,
                      lb_cudnn_desc out) {
    if (a->NKV == a->NH) {
        lb_cudnn_matmul(g, a_t, b, out);
        return;
    }
    lb_cudnn_desc full = lb_cudnn_inner(g, lb_cudnn_type(a->dt), a->B, a->NH, a->T, a->HD);
    lb_cudnn_matmul(g, a_t, b, full);
    lb_cudnn_reduction(g, CUDNN_REDUCE_TENSOR_ADD, full, out);
}

static lb_status build_backward(lb_cudnn_attn *a, lb_err *err) {
    lb_cudnn_graph g = {.next_virtual = LB_CUDNN_UID_VIRTUAL, .err = err};
    cudnnDataType_t t = lb_cudnn_type(a->dt), f = CUDNN_DATA_FLOAT;
    int64_t B = a->B, H = a->NH, T = a->T, HD = a->HD;
    views w = make_views(a);
    lb_cudnn_desc q = lb_cudnn_tensor(&g, UID_Q, t, 4, w.q.dims, w.q.strides, 0);
    lb_cudnn_desc kt = lb_cudnn_tensor(&g, UID_K, t, 4, w.kt.dims, w.kt.strides, 0);
    lb_cudnn_desc vt = lb_cudnn_tensor(&g, UID_V, t, 4, w.vt.dims, w.vt.strides, 0);
    lb_cudnn_desc o = lb_cudnn_tensor(&g, UID_O, t, 4, w.o.dims, w.o.strides, 0);
    lb_cudnn_desc d_o = lb_cudnn_tensor(&g, UID_DO, t, 4, w.o.dims, w.o.strides, 0);
    lb_cudnn_desc stats = lb_cudnn_tensor(&g, UID_STATS, f, 4, w.stats.dims, w.stats.strides, 0);
    lb_cudnn_desc dq = lb_cudnn_tensor(&g, UID_DQ, t, 4, w.q.dims, w.q.strides, 0);
    lb_cudnn_desc dk = lb_cudnn_tensor(&g, UID_DK, t, 4, w.k.dims, w.k.strides, 0);
    lb_cudnn_desc dv = lb_cudnn_tensor(&g, UID_DV, t, 4, w.v.dims, w.v.strides, 0);
    const int64_t rdims[4] = {B, H, T, 1}, rstr[4] = {H * T, T, 1, 1};
    const int64_t qdims[4] = {B, H, T, HD}, qstr[4] = {H * T * HD, T * HD, HD, 1};
    lb_cudnn_desc rowsum = lb_cudnn_tensor(&g, UID_ROWSUM, f, 4, rdims, rstr, 0);
    lb_cudnn_desc dq_acc = lb_cudnn_tensor(&g, UID_DQ_ACC, f, 4, qdims, qstr, 0);
    /* rowsum(dO o O) */
    lb_cudnn_desc prod = lb_cudnn_inner(&g, f, B, H, T, HD), rs = lb_cudnn_inner(&g, f, B, H, T, 1);
    lb_cudnn_fp32_op(&g, CUDNN_POINTWISE_MUL, d_o, o, prod);
    lb_cudnn_reduction(&g, CUDNN_REDUCE_TENSOR_ADD, prod, rs);
    lb_cudnn_fp32_op(&g, CUDNN_POINTWISE_MUL, rs, lb_cudnn_scalar(&g, UID_ONE), rowsum);
    /* P = exp(scale Q K^T - lse), masked */
    lb_cudnn_desc shifted = lb_cudnn_inner(&g, f, B, H, T, T),
                  p = lb_cudnn_inner(&g, f, B, H, T, T);
    lb_cudnn_fp32_op(&g, CUDNN_POINTWISE_SUB, scores(&g, a, q, kt), stats, shifted);
    lb_cudnn_fp32_op(&g, CUDNN_POINTWISE_EXP, causal(&g, a, shifted), NULL, p);
    /* dV = P^T dO */
    group_sum(&g, a, transpose_tt(&g, a, t, p), d_o, dv);
    /* dS = scale P o (dO V^T - rowsum) */
    lb_cudnn_desc dp = lb_cudnn_inner(&g, f, B, H, T, T), diff = lb_cudnn_inner(&g, f, B, H, T, T);
    lb_cudnn_desc pd = lb_cudnn_inner(&g, f, B, H, T, T), ds = lb_cudnn_inner(&g, f, B, H, T, T);
    lb_cudnn_matmul(&g, d_o, vt, dp);
    lb_cudnn_fp32_op(&g, CUDNN_POINTWISE_SUB, dp, rowsum, diff);
    lb_cudnn_fp32_op(&g, CUDNN_POINTWISE_MUL, diff, p, pd);
    lb_cudnn_fp32_op(&g, CUDNN_POINTWISE_MUL, pd, lb_cudnn_scalar(&g, UID_SCALE), ds);
    /* dK = dS^T Q */
    group_sum(&g, a, transpose_tt(&g, a, t, ds), q, dk);
    /* dQ = dS K, accumulated in fp32, then rounded into dqkv */
    lb_cudnn_desc k = lb_cudnn_tensor(&g, 0, f, 4, w.k.dims, w.k.strides, LB_CUDNN_VIRTUAL);
    lb_cudnn_reshape(&g, kt, k);
    lb_cudnn_matmul(&g, ds, k, dq_acc);
    lb_cudnn_fp32_op(&g, CUDNN_POINTWISE_IDENTITY, dq_acc, NULL, dq);
    lb_status st = g.st == LB_OK
                       ? lb_cudnn_plans_build(&g, a->handle, 1, "attention backward graph", &a->bwd)
                       : g.st;
    lb_cudnn_graph_free(&g);
    return st;
}

lb_status lb_cudnn_attn_init(lb_cudnn_attn **out, int B, int T, int NH, int NKV, int HD,
                             lb_gpu_dtype dt, bool backward, lb_err *err) {
    *out = NULL;
    LB_TRY(lb_cudnn_load(err));
    if (dt != LB_DT_BF16 && dt != LB_DT_F16)
        return lb_fail(err, LB_ERR_UNSUPPORTED, "cuDNN attention runs fp16 and bf16 only");
    if (NKV <= 0 || NH % NKV != 0)
        return lb_fail(err, LB_ERR_UNSUPPORTED,
                       "attention needs n_head (%d) divisible by "
                       "n_kv_head (%d)",
                       NH, NKV);
    lb_cudnn_attn *a = calloc(1, sizeof *a);
    if (a == NULL) return lb_fail(err, LB_ERR_NOMEM, "no host memory for cuDNN attention");
    *a = (lb_cudnn_attn){.B = B,
                         .T = T,
                         .NH = NH,
                         .NKV = NKV,
                         .HD = HD,
                         .dt = dt,
                         .backward = backward,
                         .scale = 1.0f / sqrtf((float)HD),
                         .neg_inf = -INFINITY,
                         .one = 1.0f};
    cudnnStatus_t s = lb_cudnn.create(&a->handle);
    lb_status st = s == CUDNN_STATUS_SUCCESS
                       ? LB_OK
                       : lb_fail(err, LB_ERR_UNSUPPORTED, "cuDNN could not start: %s (%d)",
                                 lb_cudnn.error_string(s), (int)s);
    if (st == LB_OK) st = build_forward(a, err);
    if (st == LB_OK && backward) st = build_backward(a, err);
    if (st != LB_OK) {
        lb_cudnn_attn_free(a);
        return st;
    }
    *out = a;
    return LB_OK;
}

void lb_cudnn_attn_free(lb_cudnn_attn *a) {
    if (a == NULL) return;
    lb_cudnn_plans_free(&a->fwd);
    lb_cudnn_plans_free(&a->bwd);
    if (a->handle) lb_cudnn.destroy(a->handle);
    free(a);
}

size_t lb_cudnn_attn_workspace_bytes(const lb_cudnn_attn *a) {
    size_t fwd = lb_cudnn_plans_workspace_bytes(&a->fwd);
    size_t bwd = a->backward
                     ? rowsum_bytes(a) + dq_acc_bytes(a) + lb_cudnn_plans_workspace_bytes(&a->bwd)
                     : 0;
    return ((fwd > bwd ? fwd : bwd) + 255) / 256 * 256;
}

/* pointer to the first q, k and v head of a qkv-shaped buffer */
static void *head_at(const lb_cudnn_attn *a, const void *base, int head) {
    return (char *)base + (size_t)head * a->HD * lb_dtype_bytes(a->dt);
}

lb_status lb_cudnn_attn_forward(lb_cudnn_attn *a, void *out, float *lse, const void *qkv,
                                void *workspace, cudaStream_t s, lb_err *err) {
    const int64_t uids[] = {UID_Q, UID_K, UID_V, UID_O, UID_STATS, UID_SCALE, UID_NEG_INF};
    void *ptrs[] = {head_at(a, qkv, 0),
                    head_at(a, qkv, a->NH),
                    head_at(a, qkv, a->NH + a->NKV),
                    out,
                    lse,
                    &a->scale,
                    &a->neg_inf};
    return lb_cudnn_plans_run(&a->fwd, a->handle, 7, uids, ptrs, workspace, s, err);
}

lb_status lb_cudnn_attn_backward(lb_cudnn_attn *a, void *dqkv, const void *dout, const void *qkv,
                                 const void *out, const float *lse, void *workspace, cudaStream_t s,
                                 lb_err *err) {
    if (!a->backward)
        return lb_fail(err, LB_ERR_USAGE, "cuDNN attention was built without its backward");
    char *ws = workspace;
    const int64_t uids[] = {UID_Q,      UID_K,     UID_V,       UID_O,  UID_DO,
                            UID_STATS,  UID_DQ,    UID_DK,      UID_DV, UID_ROWSUM,
                            UID_DQ_ACC, UID_SCALE, UID_NEG_INF, UID_ONE};
    void *ptrs[] = {head_at(a, qkv, 0),
                    head_at(a, qkv, a->NH),
                    head_at(a, qkv, a->NH + a->NKV),
                    (void *)out,
                    (void *)dout,
                    (void *)lse,
                    head_at(a, dqkv, 0),
                    head_at(a, dqkv, a->NH),
                    head_at(a, dqkv, a->NH + a->NKV),
                    ws,
                    ws + rowsum_bytes(a),
                    &a->scale,
                    &a->neg_inf,
                    &a->one};
    return lb_cudnn_plans_run(&a->bwd, a->handle, 14, uids, ptrs,
                              ws + rowsum_bytes(a) + dq_acc_bytes(a), s, err);
}

#endif /* LB_HAVE_CUDNN */
#endif /* LB_HAVE_CUDA */
