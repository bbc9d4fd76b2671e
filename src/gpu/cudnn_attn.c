/* cudnn_attn.c: cuDNN's fused attention through its backend graph API (gpu/cudnn_attn.h).
 *
 * A graph is a list of backend descriptors built by a small builder with a sticky error:
 * every helper does nothing once a call has failed, so a graph reads as the sequence of
 * its operations and is checked once at the end. Tensors carry unique ids: the ones bound
 * at execution (UID_*) and virtual intermediates numbered from UID_VIRTUAL. The graphs
 * are the ones cuDNN 9 recognises as flash attention (its fused engines match this
 * pattern of products, pointwise operations and reductions): scale times Q K^T, a causal
 * mask from generated row and column indices, the softmax with its log-sum-exp, P V; the
 * backward recomputes P from the log-sum-exp. A plan is the first engine configuration of
 * cuDNN's heuristic (mode A) that finalises. Each call builds a variant pack binding the
 * ids to this layer's pointers, then executes the plan on the caller's stream. */
#ifdef LB_HAVE_CUDA

#include "gpu/cudnn_attn.h"

#ifndef LB_HAVE_CUDNN

lb_status lb_cudnn_attn_init(lb_cudnn_attn **out, int B, int T, int NH, int NKV, int HD,
                             lb_gpu_dtype dt, lb_err *err) {
    *out = NULL;
    return lb_fail(err, LB_ERR_UNSUPPORTED, "this build has no cuDNN headers");
}
void lb_cudnn_attn_free(lb_cudnn_attn *a) {}
size_t lb_cudnn_attn_workspace_bytes(const lb_cudnn_attn *a) { return 0; }
size_t lb_cudnn_version(void) { return 0; }
lb_status lb_cudnn_attn_forward(lb_cudnn_attn *a, void *out, float *lse, const void *qkv,
                                void *workspace, cudaStream_t s, lb_err *err) {
    return lb_fail(err, LB_ERR_UNSUPPORTED, "this build has no cuDNN headers");
}
lb_status lb_cudnn_attn_backward(lb_cudnn_attn *a, void *dqkv, const void *dout,
                                 const void *qkv, const void *out, const float *lse,
                                 void *workspace, cudaStream_t s, lb_err *err) {
    return lb_fail(err, LB_ERR_UNSUPPORTED, "this build has no cuDNN headers");
}

#else

#include <cudnn_graph.h>
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef cudnnBackendDescriptor_t desc;

/* the subset of cuDNN's C API used here, with the signatures of cudnn_graph.h */
static struct {
    void *lib;
    size_t version;
    cudnnStatus_t (*create)(cudnnHandle_t *);
    cudnnStatus_t (*destroy)(cudnnHandle_t);
    cudnnStatus_t (*set_stream)(cudnnHandle_t, cudaStream_t);
    const char *(*error_string)(cudnnStatus_t);
    void (*last_error)(char *, size_t);
    cudnnStatus_t (*make)(cudnnBackendDescriptorType_t, desc *);
    cudnnStatus_t (*drop)(desc);
    cudnnStatus_t (*finalize)(desc);
    cudnnStatus_t (*set)(desc, cudnnBackendAttributeName_t, cudnnBackendAttributeType_t, int64_t,
                         const void *);
    cudnnStatus_t (*get)(desc, cudnnBackendAttributeName_t, cudnnBackendAttributeType_t, int64_t,
                         int64_t *, void *);
    cudnnStatus_t (*execute)(cudnnHandle_t, desc, desc);
} g_dnn;

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static char g_why[160];

static void load(void) {
    void *lib = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        snprintf(g_why, sizeof g_why, "cuDNN 9 not found (libcudnn.so.9 is not on the library path)");
        return;
    }
#define LOAD(field, sym) *(void **)(&g_dnn.field) = dlsym(lib, sym)
    LOAD(create, "cudnnCreate");
    LOAD(destroy, "cudnnDestroy");
    LOAD(set_stream, "cudnnSetStream");
    LOAD(error_string, "cudnnGetErrorString");
    LOAD(last_error, "cudnnGetLastErrorString");
    LOAD(make, "cudnnBackendCreateDescriptor");
    LOAD(drop, "cudnnBackendDestroyDescriptor");
    LOAD(finalize, "cudnnBackendFinalize");
    LOAD(set, "cudnnBackendSetAttribute");
    LOAD(get, "cudnnBackendGetAttribute");
    LOAD(execute, "cudnnBackendExecute");
#undef LOAD
    size_t (*version)(void) = (size_t(*)(void))dlsym(lib, "cudnnGetVersion");
    if (!g_dnn.create || !g_dnn.destroy || !g_dnn.set_stream || !g_dnn.error_string ||
        !g_dnn.last_error || !g_dnn.make || !g_dnn.drop || !g_dnn.finalize || !g_dnn.set ||
        !g_dnn.get || !g_dnn.execute || !version) {
        snprintf(g_why, sizeof g_why, "libcudnn.so.9 lacks the backend graph API");
        dlclose(lib);
        memset(&g_dnn, 0, sizeof g_dnn);
        return;
    }
    g_dnn.version = version();
    g_dnn.lib = lib;
}

size_t lb_cudnn_version(void) { return g_dnn.version; }

/* ------------------------------------------------------------------------------------ */
/* graph builder                                                                         */

#define MAX_DESC 160
#define MAX_OPS 40

enum { TENSOR_VIRTUAL = 1, TENSOR_BY_VALUE = 2 };

typedef struct {
    desc made[MAX_DESC]; /* every descriptor of the graph, destroyed together */
    int n_made;
    desc ops[MAX_OPS];
    int n_ops;
    int64_t next_virtual;
    lb_status st;
    lb_err *err;
} graph;

/* Records the first failure: the call, cuDNN's status and its last error message. */
static bool ok(graph *g, cudnnStatus_t s, const char *what) {
    if (g->st != LB_OK) return false;
    if (s == CUDNN_STATUS_SUCCESS) return true;
    char detail[300] = "";
    g_dnn.last_error(detail, sizeof detail);
    g->st = lb_fail(g->err, s == CUDNN_STATUS_NOT_SUPPORTED ? LB_ERR_UNSUPPORTED : LB_ERR_DEVICE,
                    "cuDNN %s failed: %s (%d)%s%s", what, g_dnn.error_string(s), (int)s,
                    detail[0] ? ": " : "", detail);
    return false;
}

static desc make(graph *g, cudnnBackendDescriptorType_t type) {
    if (g->st != LB_OK) return NULL;
    if (g->n_made == MAX_DESC) {
        g->st = lb_fail(g->err, LB_ERR_RUNTIME, "cuDNN graph exceeds %d descriptors", MAX_DESC);
        return NULL;
    }
    desc d = NULL;
    if (!ok(g, g_dnn.make(type, &d), "descriptor creation")) return NULL;
    return g->made[g->n_made++] = d;
}

static void set(graph *g, desc d, cudnnBackendAttributeName_t name,
                cudnnBackendAttributeType_t type, int64_t n, const void *v) {
    if (g->st == LB_OK) ok(g, g_dnn.set(d, name, type, n, v), "attribute setting");
}

static void finalize(graph *g, desc d, const char *what) {
    if (g->st == LB_OK) ok(g, g_dnn.finalize(d), what);
}

static void set_desc(graph *g, desc d, cudnnBackendAttributeName_t name, desc v) {
    set(g, d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v);
}

/* A 4-d tensor; uid 0 makes a virtual one with the next free id. */
static desc tensor(graph *g, int64_t uid, cudnnDataType_t type, const int64_t dims[4],
                   const int64_t strides[4], unsigned flags) {
    desc t = make(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    int64_t id = uid != 0 ? uid : g->next_virtual++, align = 16;
    bool virt = (flags & TENSOR_VIRTUAL) != 0, by_value = (flags & TENSOR_BY_VALUE) != 0;
    set(g, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &id);
    set(g, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
    set(g, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims);
    set(g, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides);
    set(g, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
    set(g, t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt);
    if (by_value) set(g, t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
    finalize(g, t, "tensor finalisation");
    return t;
}

/* A virtual intermediate [d0,d1,d2,d3], packed row-major. */
static desc inner(graph *g, cudnnDataType_t type, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
    const int64_t dims[4] = {d0, d1, d2, d3}, strides[4] = {d1 * d2 * d3, d2 * d3, d3, 1};
    return tensor(g, 0, type, dims, strides, TENSOR_VIRTUAL);
}

/* A scalar passed by value in the variant pack (a host float). */
static desc scalar(graph *g, int64_t uid) {
    const int64_t one[4] = {1, 1, 1, 1};
    return tensor(g, uid, CUDNN_DATA_FLOAT, one, one, TENSOR_BY_VALUE);
}

static void add_op(graph *g, desc op, const char *what) {
    finalize(g, op, what);
    if (g->st != LB_OK) return;
    if (g->n_ops == MAX_OPS) {
        g->st = lb_fail(g->err, LB_ERR_RUNTIME, "cuDNN graph exceeds %d operations", MAX_OPS);
        return;
    }
    g->ops[g->n_ops++] = op;
}

/* y = mode(x[, b]) computed in type prec; cond feeds BINARY_SELECT (y = cond ? x : b); axis
 * is GEN_INDEX's (-1: none). */
static void pointwise(graph *g, cudnnPointwiseMode_t mode, cudnnDataType_t prec, desc x, desc b,
                      desc cond, desc y, int64_t axis) {
    desc pw = make(g, CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    set(g, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    set(g, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    if (axis >= 0) set(g, pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    finalize(g, pw, "pointwise finalisation");
    desc op = make(g, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    const float one = 1.0f;
    set_desc(g, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw);
    set_desc(g, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
    if (b) set_desc(g, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b);
    if (cond) set_desc(g, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, cond);
    set_desc(g, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
    set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one);
    set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one);
    add_op(g, op, "pointwise operation");
}

/* fp32 arithmetic, the common case */
static void fp32_op(graph *g, cudnnPointwiseMode_t mode, desc x, desc b, desc y) {
    pointwise(g, mode, CUDNN_DATA_FLOAT, x, b, NULL, y, -1);
}

/* y = x seen through y's dimensions and strides (a transpose) */
static void reshape(graph *g, desc x, desc y) {
    desc op = make(g, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    set_desc(g, op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x);
    set_desc(g, op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y);
    add_op(g, op, "reshape operation");
}

/* c = a b over the last two dimensions, fp32 accumulation */
static void matmul(graph *g, desc a, desc b, desc c) {
    desc mm = make(g, CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    set(g, mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    finalize(g, mm, "matmul finalisation");
    desc op = make(g, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    set_desc(g, op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, a);
    set_desc(g, op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, b);
    set_desc(g, op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, c);
    set_desc(g, op, CUDNN_ATTR_OPERATION_MATMUL_DESC, mm);
    add_op(g, op, "matmul operation");
}

/* y = reduce(x) over the dimensions where y is smaller */
static void reduction(graph *g, cudnnReduceTensorOp_t mode, desc x, desc y) {
    desc rd = make(g, CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    set(g, rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode);
    set(g, rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    finalize(g, rd, "reduction finalisation");
    desc op = make(g, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    set_desc(g, op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x);
    set_desc(g, op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y);
    set_desc(g, op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, rd);
    add_op(g, op, "reduction operation");
}

static void graph_free(graph *g) {
    for (int i = g->n_made - 1; i >= 0; i--) g_dnn.drop(g->made[i]);
    g->n_made = g->n_ops = 0;
}

/* The first configuration of the heuristic's list that finalises into a plan (which the
 * caller destroys), and its workspace bytes. The graph's descriptors may go afterwards. */
static lb_status build_plan(graph *g, cudnnHandle_t h, desc *plan, int64_t *ws, const char *name) {
    *plan = NULL;
    desc opg = make(g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    set(g, opg, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
    set(g, opg, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, g->n_ops, g->ops);
    finalize(g, opg, name);
    desc heur = make(g, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    set_desc(g, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, opg);
    set(g, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    finalize(g, heur, "engine heuristic");
    int64_t n = 0;
    if (g->st == LB_OK)
        ok(g, g_dnn.get(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n,
                        NULL), "heuristic result count");
    if (g->st != LB_OK) return g->st;
    if (n <= 0)
        return g->st = lb_fail(g->err, LB_ERR_UNSUPPORTED, "cuDNN has no engine for the %s", name);
    if (n > 8) n = 8;
    desc cfg[8];
    for (int64_t i = 0; i < n; i++) cfg[i] = make(g, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    int64_t got = 0;
    if (g->st == LB_OK)
        ok(g, g_dnn.get(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n, &got,
                        cfg), "heuristic results");
    cudnnStatus_t last = CUDNN_STATUS_NOT_SUPPORTED;
    for (int64_t i = 0; g->st == LB_OK && i < got; i++) {
        desc p = NULL;
        if (g_dnn.make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &p) != CUDNN_STATUS_SUCCESS) break;
        last = g_dnn.set(p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
        if (last == CUDNN_STATUS_SUCCESS)
            last = g_dnn.set(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                             CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg[i]);
        if (last == CUDNN_STATUS_SUCCESS) last = g_dnn.finalize(p);
        int64_t bytes = 0, cnt = 0;
        if (last == CUDNN_STATUS_SUCCESS)
            last = g_dnn.get(p, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                             &cnt, &bytes);
        if (last == CUDNN_STATUS_SUCCESS) {
            *plan = p, *ws = bytes;
            return LB_OK;
        }
        g_dnn.drop(p);
    }
    if (g->st == LB_OK) ok(g, last, name);
    return g->st;
}

/* ------------------------------------------------------------------------------------ */
/* attention graphs                                                                      */

enum { UID_Q = 1, UID_K, UID_V, UID_O, UID_STATS, UID_SCALE, UID_NEG_INF, UID_ONE, UID_DO,
       UID_DQ, UID_DK, UID_DV, UID_ROWSUM, UID_DQ_ACC, UID_VIRTUAL = 100 };

struct lb_cudnn_attn {
    int B, T, NH, NKV, HD;
    lb_gpu_dtype dt;
    cudnnHandle_t handle;
    desc fwd, bwd;
    int64_t fwd_ws, bwd_ws;
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

static cudnnDataType_t dnn_type(lb_gpu_dtype dt) {
    return dt == LB_DT_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
}

/* The causal mask over scores s [B,NH,T,T] (fp32): keys after the query become -inf. */
static desc causal(graph *g, const lb_cudnn_attn *a, desc s) {
    int64_t B = a->B, H = a->NH, T = a->T;
    desc row = inner(g, CUDNN_DATA_INT32, B, H, T, T), col = inner(g, CUDNN_DATA_INT32, B, H, T, T);
    pointwise(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, s, NULL, NULL, row, 2);
    pointwise(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, s, NULL, NULL, col, 3);
    desc keep = inner(g, CUDNN_DATA_BOOLEAN, B, H, T, T), masked = inner(g, CUDNN_DATA_FLOAT, B, H, T, T);
    pointwise(g, CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, row, col, NULL, keep, -1);
    pointwise(g, CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, s, scalar(g, UID_NEG_INF), keep,
              masked, -1);
    return masked;
}

/* scale * Q K^T [B,NH,T,T] (fp32) */
static desc scores(graph *g, const lb_cudnn_attn *a, desc q, desc kt) {
    int64_t B = a->B, H = a->NH, T = a->T;
    desc s = inner(g, CUDNN_DATA_FLOAT, B, H, T, T), ss = inner(g, CUDNN_DATA_FLOAT, B, H, T, T);
    matmul(g, q, kt, s);
    fp32_op(g, CUDNN_POINTWISE_MUL, s, scalar(g, UID_SCALE), ss);
    return ss;
}

/* [B,H,T,T] seen as [B,H,T(keys),T(queries)], in type t */
static desc transpose_tt(graph *g, const lb_cudnn_attn *a, cudnnDataType_t t, desc x) {
    int64_t B = a->B, H = a->NH, T = a->T;
    const int64_t dims[4] = {B, H, T, T}, strides[4] = {H * T * T, T * T, 1, T};
    desc y = tensor(g, 0, t, dims, strides, TENSOR_VIRTUAL);
    reshape(g, x, y);
    return y;
}

/* The bound tensors of both graphs: views of qkv (or dqkv), out (or dout) and lse. */
typedef struct {
    view q, k, kt, v, vt, o, stats;
} views;

static views make_views(const lb_cudnn_attn *a) {
    int64_t W = (int64_t)(a->NH + 2 * a->NKV) * a->HD, H = a->NH, T = a->T;
    views v = {.q = heads(a, a->NH, W), .k = heads(a, a->NKV, W), .o = heads(a, a->NH, H * a->HD),
               .stats = {{a->B, H, T, 1}, {H * T, T, 1, 1}}};
    v.v = v.k;
    v.kt = transposed(v.k);
    v.vt = transposed(v.v);
    return v;
}

static lb_status build_forward(lb_cudnn_attn *a, lb_err *err) {
    graph g = {.next_virtual = UID_VIRTUAL, .err = err};
    cudnnDataType_t t = dnn_type(a->dt), f = CUDNN_DATA_FLOAT;
    int64_t B = a->B, H = a->NH, T = a->T;
    views w = make_views(a);
    desc q = tensor(&g, UID_Q, t, w.q.dims, w.q.strides, 0);
    desc kt = tensor(&g, UID_K, t, w.kt.dims, w.kt.strides, 0);
    desc v = tensor(&g, UID_V, t, w.v.dims, w.v.strides, 0);
    desc o = tensor(&g, UID_O, t, w.o.dims, w.o.strides, 0);
    desc stats = tensor(&g, UID_STATS, f, w.stats.dims, w.stats.strides, 0);
    desc s = causal(&g, a, scores(&g, a, q, kt));
    /* softmax with its statistics: lse = max + log(sum exp(s - max)), P = exp(s - max) / sum */
    desc mx = inner(&g, f, B, H, T, 1), d = inner(&g, f, B, H, T, T), e = inner(&g, f, B, H, T, T);
    desc sum = inner(&g, f, B, H, T, 1), lg = inner(&g, f, B, H, T, 1);
    desc p = inner(&g, t, B, H, T, T);
    reduction(&g, CUDNN_REDUCE_TENSOR_MAX, s, mx);
    fp32_op(&g, CUDNN_POINTWISE_SUB, s, mx, d);
    fp32_op(&g, CUDNN_POINTWISE_EXP, d, NULL, e);
    reduction(&g, CUDNN_REDUCE_TENSOR_ADD, e, sum);
    fp32_op(&g, CUDNN_POINTWISE_LOG, sum, NULL, lg);
    fp32_op(&g, CUDNN_POINTWISE_ADD, mx, lg, stats);
    fp32_op(&g, CUDNN_POINTWISE_DIV, e, sum, p);
    matmul(&g, p, v, o);
    lb_status st = g.st == LB_OK ? build_plan(&g, a->handle, &a->fwd, &a->fwd_ws, "attention forward graph")
                                 : g.st;
    graph_free(&g);
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
static void group_sum(graph *g, const lb_cudnn_attn *a, desc a_t, desc b, desc out) {
    if (a->NKV == a->NH) {
        matmul(g, a_t, b, out);
        return;
    }
    desc full = inner(g, dnn_type(a->dt), a->B, a->NH, a->T, a->HD);
    matmul(g, a_t, b, full);
    reduction(g, CUDNN_REDUCE_TENSOR_ADD, full, out);
}

static lb_status build_backward(lb_cudnn_attn *a, lb_err *err) {
    graph g = {.next_virtual = UID_VIRTUAL, .err = err};
    cudnnDataType_t t = dnn_type(a->dt), f = CUDNN_DATA_FLOAT;
    int64_t B = a->B, H = a->NH, T = a->T, HD = a->HD;
    views w = make_views(a);
    desc q = tensor(&g, UID_Q, t, w.q.dims, w.q.strides, 0);
    desc kt = tensor(&g, UID_K, t, w.kt.dims, w.kt.strides, 0);
    desc vt = tensor(&g, UID_V, t, w.vt.dims, w.vt.strides, 0);
    desc o = tensor(&g, UID_O, t, w.o.dims, w.o.strides, 0);
    desc d_o = tensor(&g, UID_DO, t, w.o.dims, w.o.strides, 0);
    desc stats = tensor(&g, UID_STATS, f, w.stats.dims, w.stats.strides, 0);
    desc dq = tensor(&g, UID_DQ, t, w.q.dims, w.q.strides, 0);
    desc dk = tensor(&g, UID_DK, t, w.k.dims, w.k.strides, 0);
    desc dv = tensor(&g, UID_DV, t, w.v.dims, w.v.strides, 0);
    const int64_t rdims[4] = {B, H, T, 1}, rstr[4] = {H * T, T, 1, 1};
    const int64_t qdims[4] = {B, H, T, HD}, qstr[4] = {H * T * HD, T * HD, HD, 1};
    desc rowsum = tensor(&g, UID_ROWSUM, f, rdims, rstr, 0);
    desc dq_acc = tensor(&g, UID_DQ_ACC, f, qdims, qstr, 0);
    /* rowsum(dO o O) */
    desc prod = inner(&g, f, B, H, T, HD), rs = inner(&g, f, B, H, T, 1);
    fp32_op(&g, CUDNN_POINTWISE_MUL, d_o, o, prod);
    reduction(&g, CUDNN_REDUCE_TENSOR_ADD, prod, rs);
    fp32_op(&g, CUDNN_POINTWISE_MUL, rs, scalar(&g, UID_ONE), rowsum);
    /* P = exp(scale Q K^T - lse), masked */
    desc shifted = inner(&g, f, B, H, T, T), p = inner(&g, f, B, H, T, T);
    fp32_op(&g, CUDNN_POINTWISE_SUB, scores(&g, a, q, kt), stats, shifted);
    fp32_op(&g, CUDNN_POINTWISE_EXP, causal(&g, a, shifted), NULL, p);
    /* dV = P^T dO */
    group_sum(&g, a, transpose_tt(&g, a, t, p), d_o, dv);
    /* dS = scale P o (dO V^T - rowsum) */
    desc dp = inner(&g, f, B, H, T, T), diff = inner(&g, f, B, H, T, T);
    desc pd = inner(&g, f, B, H, T, T), ds = inner(&g, f, B, H, T, T);
    matmul(&g, d_o, vt, dp);
    fp32_op(&g, CUDNN_POINTWISE_SUB, dp, rowsum, diff);
    fp32_op(&g, CUDNN_POINTWISE_MUL, diff, p, pd);
    fp32_op(&g, CUDNN_POINTWISE_MUL, pd, scalar(&g, UID_SCALE), ds);
    /* dK = dS^T Q */
    group_sum(&g, a, transpose_tt(&g, a, t, ds), q, dk);
    /* dQ = dS K, accumulated in fp32, then rounded into dqkv */
    desc k = tensor(&g, 0, f, w.k.dims, w.k.strides, TENSOR_VIRTUAL);
    reshape(&g, kt, k);
    matmul(&g, ds, k, dq_acc);
    fp32_op(&g, CUDNN_POINTWISE_IDENTITY, dq_acc, NULL, dq);
    lb_status st = g.st == LB_OK ? build_plan(&g, a->handle, &a->bwd, &a->bwd_ws,
                                              "attention backward graph")
                                 : g.st;
    graph_free(&g);
    return st;
}

lb_status lb_cudnn_attn_init(lb_cudnn_attn **out, int B, int T, int NH, int NKV, int HD,
                             lb_gpu_dtype dt, lb_err *err) {
    *out = NULL;
    pthread_once(&g_once, load);
    if (g_dnn.lib == NULL) return lb_fail(err, LB_ERR_UNSUPPORTED, "%s", g_why);
    if (dt != LB_DT_BF16 && dt != LB_DT_F16)
        return lb_fail(err, LB_ERR_UNSUPPORTED, "cuDNN attention runs fp16 and bf16 only");
    if (NKV <= 0 || NH % NKV != 0)
        return lb_fail(err, LB_ERR_UNSUPPORTED, "attention needs n_head (%d) divisible by "
                       "n_kv_head (%d)", NH, NKV);
    lb_cudnn_attn *a = calloc(1, sizeof *a);
    if (a == NULL) return lb_fail(err, LB_ERR_NOMEM, "no host memory for cuDNN attention");
    *a = (lb_cudnn_attn){.B = B, .T = T, .NH = NH, .NKV = NKV, .HD = HD, .dt = dt,
                         .scale = 1.0f / sqrtf((float)HD), .neg_inf = -INFINITY, .one = 1.0f};
    cudnnStatus_t s = g_dnn.create(&a->handle);
    lb_status st = s == CUDNN_STATUS_SUCCESS
                       ? LB_OK
                       : lb_fail(err, LB_ERR_UNSUPPORTED, "cuDNN could not start: %s (%d)",
                                 g_dnn.error_string(s), (int)s);
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
    if (a->fwd) g_dnn.drop(a->fwd);
    if (a->bwd) g_dnn.drop(a->bwd);
    if (a->handle) g_dnn.destroy(a->handle);
    free(a);
}

size_t lb_cudnn_attn_workspace_bytes(const lb_cudnn_attn *a) {
    size_t fwd = (size_t)a->fwd_ws, bwd = rowsum_bytes(a) + dq_acc_bytes(a) + (size_t)a->bwd_ws;
    return ((fwd > bwd ? fwd : bwd) + 255) / 256 * 256;
}

/* Binds n ids to pointers and runs the plan on stream s. */
static lb_status execute(lb_cudnn_attn *a, desc plan, int n, const int64_t *uids, void **ptrs,
                         void *ws, cudaStream_t s, lb_err *err) {
    graph g = {.err = err};
    ok(&g, g_dnn.set_stream(a->handle, s), "stream setting");
    desc vp = make(&g, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    set(&g, vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids);
    set(&g, vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs);
    set(&g, vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
    finalize(&g, vp, "variant pack");
    if (g.st == LB_OK) ok(&g, g_dnn.execute(a->handle, plan, vp), "execution");
    graph_free(&g);
    return g.st;
}

/* pointer to the first q, k and v head of a qkv-shaped buffer */
static void *head_at(const lb_cudnn_attn *a, const void *base, int head) {
    return (char *)base + (size_t)head * a->HD * lb_dtype_bytes(a->dt);
}

lb_status lb_cudnn_attn_forward(lb_cudnn_attn *a, void *out, float *lse, const void *qkv,
                                void *workspace, cudaStream_t s, lb_err *err) {
    const int64_t uids[] = {UID_Q, UID_K, UID_V, UID_O, UID_STATS, UID_SCALE, UID_NEG_INF};
    void *ptrs[] = {head_at(a, qkv, 0), head_at(a, qkv, a->NH), head_at(a, qkv, a->NH + a->NKV),
                    out, lse, &a->scale, &a->neg_inf};
    return execute(a, a->fwd, 7, uids, ptrs, workspace, s, err);
}

lb_status lb_cudnn_attn_backward(lb_cudnn_attn *a, void *dqkv, const void *dout,
                                 const void *qkv, const void *out, const float *lse,
                                 void *workspace, cudaStream_t s, lb_err *err) {
    char *ws = workspace;
    const int64_t uids[] = {UID_Q, UID_K, UID_V, UID_O, UID_DO, UID_STATS, UID_DQ, UID_DK,
                            UID_DV, UID_ROWSUM, UID_DQ_ACC, UID_SCALE, UID_NEG_INF, UID_ONE};
    void *ptrs[] = {head_at(a, qkv, 0), head_at(a, qkv, a->NH), head_at(a, qkv, a->NH + a->NKV),
                    (void *)out, (void *)dout, (void *)lse, head_at(a, dqkv, 0),
                    head_at(a, dqkv, a->NH), head_at(a, dqkv, a->NH + a->NKV), ws,
                    ws + rowsum_bytes(a), &a->scale, &a->neg_inf, &a->one};
    return execute(a, a->bwd, 14, uids, ptrs, ws + rowsum_bytes(a) + dq_acc_bytes(a), s, err);
}

#endif /* LB_HAVE_CUDNN */
#endif /* LB_HAVE_CUDA */
