/* cudnn_attn.c: cuDNN's fused attention through its backend graph API (gpu/cudnn/attn.h),
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
                             lb_gpu_dtype dt, lb_err *err) {
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
    dnn_plans fwd, bwd;
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
static dnn_desc causal(dnn_graph *g, const lb_cudnn_attn *a, dnn_desc s) {
    int64_t B = a->B, H = a->NH, T = a->T;
    dnn_desc row = dnn_inner(g, CUDNN_DATA_INT32, B, H, T, T),
             col = dnn_inner(g, CUDNN_DATA_INT32, B, H, T, T);
    dnn_pointwise(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, s, NULL, NULL, row, 2);
    dnn_pointwise(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, s, NULL, NULL, col, 3);
    dnn_desc keep = dnn_inner(g, CUDNN_DATA_BOOLEAN, B, H, T, T),
             masked = dnn_inner(g, CUDNN_DATA_FLOAT, B, H, T, T);
    dnn_pointwise(g, CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, row, col, NULL, keep, -1);
    dnn_pointwise(g, CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, s, dnn_scalar(g, UID_NEG_INF),
                  keep, masked, -1);
    return masked;
}

/* scale * Q K^T [B,NH,T,T] (fp32) */
static dnn_desc scores(dnn_graph *g, const lb_cudnn_attn *a, dnn_desc q, dnn_desc kt) {
    int64_t B = a->B, H = a->NH, T = a->T;
    dnn_desc s = dnn_inner(g, CUDNN_DATA_FLOAT, B, H, T, T),
             ss = dnn_inner(g, CUDNN_DATA_FLOAT, B, H, T, T);
    dnn_matmul(g, q, kt, s);
    dnn_fp32_op(g, CUDNN_POINTWISE_MUL, s, dnn_scalar(g, UID_SCALE), ss);
    return ss;
}

/* [B,H,T,T] seen as [B,H,T(keys),T(queries)], in type t */
static dnn_desc transpose_tt(dnn_graph *g, const lb_cudnn_attn *a, cudnnDataType_t t, dnn_desc x) {
    int64_t B = a->B, H = a->NH, T = a->T;
    const int64_t dims[4] = {B, H, T, T}, strides[4] = {H * T * T, T * T, 1, T};
    dnn_desc y = dnn_tensor(g, 0, t, 4, dims, strides, DNN_VIRTUAL);
    dnn_reshape(g, x, y);
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
    dnn_graph g = {.next_virtual = DNN_UID_VIRTUAL, .err = err};
    cudnnDataType_t t = dnn_type(a->dt), f = CUDNN_DATA_FLOAT;
    int64_t B = a->B, H = a->NH, T = a->T;
    views w = make_views(a);
    dnn_desc q = dnn_tensor(&g, UID_Q, t, 4, w.q.dims, w.q.strides, 0);
    dnn_desc kt = dnn_tensor(&g, UID_K, t, 4, w.kt.dims, w.kt.strides, 0);
    dnn_desc v = dnn_tensor(&g, UID_V, t, 4, w.v.dims, w.v.strides, 0);
    dnn_desc o = dnn_tensor(&g, UID_O, t, 4, w.o.dims, w.o.strides, 0);
    dnn_desc stats = dnn_tensor(&g, UID_STATS, f, 4, w.stats.dims, w.stats.strides, 0);
    dnn_desc s = causal(&g, a, scores(&g, a, q, kt));
    /* softmax with its statistics: lse = max + log(sum exp(s - max)), P = exp(s - max) / sum */
    dnn_desc mx = dnn_inner(&g, f, B, H, T, 1), d = dnn_inner(&g, f, B, H, T, T),
             e = dnn_inner(&g, f, B, H, T, T);
    dnn_desc sum = dnn_inner(&g, f, B, H, T, 1), lg = dnn_inner(&g, f, B, H, T, 1);
    dnn_desc p = dnn_inner(&g, t, B, H, T, T);
    dnn_reduction(&g, CUDNN_REDUCE_TENSOR_MAX, s, mx);
    dnn_fp32_op(&g, CUDNN_POINTWISE_SUB, s, mx, d);
    dnn_fp32_op(&g, CUDNN_POINTWISE_EXP, d, NULL, e);
    dnn_reduction(&g, CUDNN_REDUCE_TENSOR_ADD, e, sum);
    dnn_fp32_op(&g, CUDNN_POINTWISE_LOG, sum, NULL, lg);
    dnn_fp32_op(&g, CUDNN_POINTWISE_ADD, mx, lg, stats);
    dnn_fp32_op(&g, CUDNN_POINTWISE_DIV, e, sum, p);
    dnn_matmul(&g, p, v, o);
    lb_status st = g.st == LB_OK
                       ? dnn_plans_build(&g, a->handle, 1, "attention forward graph", &a->fwd)
                       : g.st;
    dnn_graph_free(&g);
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
static void group_sum(dnn_graph *g, const lb_cudnn_attn *a, dnn_desc a_t, dnn_desc b,
                      dnn_desc out) {
    if (a->NKV == a->NH) {
        dnn_matmul(g, a_t, b, out);
        return;
    }
    dnn_desc full = dnn_inner(g, dnn_type(a->dt), a->B, a->NH, a->T, a->HD);
    dnn_matmul(g, a_t, b, full);
    dnn_reduction(g, CUDNN_REDUCE_TENSOR_ADD, full, out);
}

static lb_status build_backward(lb_cudnn_attn *a, lb_err *err) {
    dnn_graph g = {.next_virtual = DNN_UID_VIRTUAL, .err = err};
    cudnnDataType_t t = dnn_type(a->dt), f = CUDNN_DATA_FLOAT;
    int64_t B = a->B, H = a->NH, T = a->T, HD = a->HD;
    views w = make_views(a);
    dnn_desc q = dnn_tensor(&g, UID_Q, t, 4, w.q.dims, w.q.strides, 0);
    dnn_desc kt = dnn_tensor(&g, UID_K, t, 4, w.kt.dims, w.kt.strides, 0);
    dnn_desc vt = dnn_tensor(&g, UID_V, t, 4, w.vt.dims, w.vt.strides, 0);
    dnn_desc o = dnn_tensor(&g, UID_O, t, 4, w.o.dims, w.o.strides, 0);
    dnn_desc d_o = dnn_tensor(&g, UID_DO, t, 4, w.o.dims, w.o.strides, 0);
    dnn_desc stats = dnn_tensor(&g, UID_STATS, f, 4, w.stats.dims, w.stats.strides, 0);
    dnn_desc dq = dnn_tensor(&g, UID_DQ, t, 4, w.q.dims, w.q.strides, 0);
    dnn_desc dk = dnn_tensor(&g, UID_DK, t, 4, w.k.dims, w.k.strides, 0);
    dnn_desc dv = dnn_tensor(&g, UID_DV, t, 4, w.v.dims, w.v.strides, 0);
    const int64_t rdims[4] = {B, H, T, 1}, rstr[4] = {H * T, T, 1, 1};
    const int64_t qdims[4] = {B, H, T, HD}, qstr[4] = {H * T * HD, T * HD, HD, 1};
    dnn_desc rowsum = dnn_tensor(&g, UID_ROWSUM, f, 4, rdims, rstr, 0);
    dnn_desc dq_acc = dnn_tensor(&g, UID_DQ_ACC, f, 4, qdims, qstr, 0);
    /* rowsum(dO o O) */
    dnn_desc prod = dnn_inner(&g, f, B, H, T, HD), rs = dnn_inner(&g, f, B, H, T, 1);
    dnn_fp32_op(&g, CUDNN_POINTWISE_MUL, d_o, o, prod);
    dnn_reduction(&g, CUDNN_REDUCE_TENSOR_ADD, prod, rs);
    dnn_fp32_op(&g, CUDNN_POINTWISE_MUL, rs, dnn_scalar(&g, UID_ONE), rowsum);
    /* P = exp(scale Q K^T - lse), masked */
    dnn_desc shifted = dnn_inner(&g, f, B, H, T, T), p = dnn_inner(&g, f, B, H, T, T);
    dnn_fp32_op(&g, CUDNN_POINTWISE_SUB, scores(&g, a, q, kt), stats, shifted);
    dnn_fp32_op(&g, CUDNN_POINTWISE_EXP, causal(&g, a, shifted), NULL, p);
    /* dV = P^T dO */
    group_sum(&g, a, transpose_tt(&g, a, t, p), d_o, dv);
    /* dS = scale P o (dO V^T - rowsum) */
    dnn_desc dp = dnn_inner(&g, f, B, H, T, T), diff = dnn_inner(&g, f, B, H, T, T);
    dnn_desc pd = dnn_inner(&g, f, B, H, T, T), ds = dnn_inner(&g, f, B, H, T, T);
    dnn_matmul(&g, d_o, vt, dp);
    dnn_fp32_op(&g, CUDNN_POINTWISE_SUB, dp, rowsum, diff);
    dnn_fp32_op(&g, CUDNN_POINTWISE_MUL, diff, p, pd);
    dnn_fp32_op(&g, CUDNN_POINTWISE_MUL, pd, dnn_scalar(&g, UID_SCALE), ds);
    /* dK = dS^T Q */
    group_sum(&g, a, transpose_tt(&g, a, t, ds), q, dk);
    /* dQ = dS K, accumulated in fp32, then rounded into dqkv */
    dnn_desc k = dnn_tensor(&g, 0, f, 4, w.k.dims, w.k.strides, DNN_VIRTUAL);
    dnn_reshape(&g, kt, k);
    dnn_matmul(&g, ds, k, dq_acc);
    dnn_fp32_op(&g, CUDNN_POINTWISE_IDENTITY, dq_acc, NULL, dq);
    lb_status st = g.st == LB_OK
                       ? dnn_plans_build(&g, a->handle, 1, "attention backward graph", &a->bwd)
                       : g.st;
    dnn_graph_free(&g);
    return st;
}

lb_status lb_cudnn_attn_init(lb_cudnn_attn **out, int B, int T, int NH, int NKV, int HD,
                             lb_gpu_dtype dt, lb_err *err) {
    *out = NULL;
    LB_TRY(dnn_load(err));
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
                         .scale = 1.0f / sqrtf((float)HD),
                         .neg_inf = -INFINITY,
                         .one = 1.0f};
    cudnnStatus_t s = dnn.create(&a->handle);
    lb_status st = s == CUDNN_STATUS_SUCCESS
                       ? LB_OK
                       : lb_fail(err, LB_ERR_UNSUPPORTED, "cuDNN could not start: %s (%d)",
                                 dnn.error_string(s), (int)s);
    if (st == LB_OK) st = build_forward(a, err);
    if (st == LB_OK) st = build_backward(a, err);
    if (st != LB_OK) {
        lb_cudnn_attn_free(a);
        return st;
    }
    *out = a;
    return LB_OK;
}

void lb_cudnn_attn_free(lb_cudnn_attn *a) {
    if (a == NULL) return;
    dnn_plans_free(&a->fwd);
    dnn_plans_free(&a->bwd);
    if (a->handle) dnn.destroy(a->handle);
    free(a);
}

size_t lb_cudnn_attn_workspace_bytes(const lb_cudnn_attn *a) {
    size_t fwd = dnn_plans_workspace_bytes(&a->fwd);
    size_t bwd = rowsum_bytes(a) + dq_acc_bytes(a) + dnn_plans_workspace_bytes(&a->bwd);
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
    return dnn_plans_run(&a->fwd, a->handle, 7, uids, ptrs, workspace, s, err);
}

lb_status lb_cudnn_attn_backward(lb_cudnn_attn *a, void *dqkv, const void *dout, const void *qkv,
                                 const void *out, const float *lse, void *workspace, cudaStream_t s,
                                 lb_err *err) {
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
    return dnn_plans_run(&a->bwd, a->handle, 14, uids, ptrs, ws + rowsum_bytes(a) + dq_acc_bytes(a),
                         s, err);
}

#endif /* LB_HAVE_CUDNN */
#endif /* LB_HAVE_CUDA */
