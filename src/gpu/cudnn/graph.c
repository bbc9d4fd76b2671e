/* graph.c: gpu/cudnn/graph.h, the loader, graph builder and plans the cuDNN modules
 * share. Not here: any particular graph (gpu/cudnn/attn.c, gpu/cudnn/gelu.c). */
#if defined(LB_HAVE_CUDA) && defined(LB_HAVE_CUDNN)

#include "gpu/cudnn/graph.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "gpu/cudnn/attn.h"
#include "gpu/timing.h"

lb_cudnn_api lb_cudnn;

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static char g_why[160];

static void load(void) {
    void *lib = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        snprintf(g_why, sizeof g_why,
                 "cuDNN 9 not found (libcudnn.so.9 is not on the library path)");
        return;
    }
#define LOAD(field, sym) *(void **)(&lb_cudnn.field) = dlsym(lib, sym)
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
    if (!lb_cudnn.create || !lb_cudnn.destroy || !lb_cudnn.set_stream || !lb_cudnn.error_string ||
        !lb_cudnn.last_error || !lb_cudnn.make || !lb_cudnn.drop || !lb_cudnn.finalize ||
        !lb_cudnn.set || !lb_cudnn.get || !lb_cudnn.execute || !version) {
        snprintf(g_why, sizeof g_why, "libcudnn.so.9 lacks the backend graph API");
        dlclose(lib);
        memset(&lb_cudnn, 0, sizeof lb_cudnn);
        return;
    }
    lb_cudnn.version = version();
    lb_cudnn.lib = lib;
}

lb_status lb_cudnn_load(lb_err *err) {
    pthread_once(&g_once, load);
    if (lb_cudnn.lib == NULL) return lb_fail(err, LB_ERR_UNSUPPORTED, "%s", g_why);
    return LB_OK;
}

size_t lb_cudnn_version(void) {
    return lb_cudnn.version;
}

/* ---- graph builder ---------------------------------------------------------------------- */

bool lb_cudnn_ok(lb_cudnn_graph *g, cudnnStatus_t s, const char *what) {
    if (g->st != LB_OK) return false;
    if (s == CUDNN_STATUS_SUCCESS) return true;
    char detail[300] = "";
    lb_cudnn.last_error(detail, sizeof detail);
    g->st = lb_fail(g->err, s == CUDNN_STATUS_NOT_SUPPORTED ? LB_ERR_UNSUPPORTED : LB_ERR_DEVICE,
                    "cuDNN %s failed: %s (%d)%s%s", what, lb_cudnn.error_string(s), (int)s,
                    detail[0] ? ": " : "", detail);
    return false;
}

lb_cudnn_desc lb_cudnn_make(lb_cudnn_graph *g, cudnnBackendDescriptorType_t type) {
    if (g->st != LB_OK) return NULL;
    if (g->n_made == LB_CUDNN_MAX_DESC) {
        g->st = lb_fail(g->err, LB_ERR_RUNTIME, "cuDNN graph exceeds %d descriptors",
                        LB_CUDNN_MAX_DESC);
        return NULL;
    }
    lb_cudnn_desc d = NULL;
    if (!lb_cudnn_ok(g, lb_cudnn.make(type, &d), "descriptor creation")) return NULL;
    return g->made[g->n_made++] = d;
}

void lb_cudnn_set(lb_cudnn_graph *g, lb_cudnn_desc d, cudnnBackendAttributeName_t name,
                  cudnnBackendAttributeType_t type, int64_t n, const void *v) {
    if (g->st == LB_OK) lb_cudnn_ok(g, lb_cudnn.set(d, name, type, n, v), "attribute setting");
}

void lb_cudnn_finalize(lb_cudnn_graph *g, lb_cudnn_desc d, const char *what) {
    if (g->st == LB_OK) lb_cudnn_ok(g, lb_cudnn.finalize(d), what);
}

void lb_cudnn_set_desc(lb_cudnn_graph *g, lb_cudnn_desc d, cudnnBackendAttributeName_t name,
                       lb_cudnn_desc v) {
    lb_cudnn_set(g, d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v);
}

lb_cudnn_desc lb_cudnn_tensor(lb_cudnn_graph *g, int64_t uid, cudnnDataType_t type, int rank,
                              const int64_t *dims, const int64_t *strides, unsigned flags) {
    lb_cudnn_desc t = lb_cudnn_make(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    int64_t id = uid != 0 ? uid : g->next_virtual++, align = 16;
    bool virt = (flags & LB_CUDNN_VIRTUAL) != 0, by_value = (flags & LB_CUDNN_BY_VALUE) != 0;
    lb_cudnn_set(g, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &id);
    lb_cudnn_set(g, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
    lb_cudnn_set(g, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, rank, dims);
    lb_cudnn_set(g, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, rank, strides);
    lb_cudnn_set(g, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
    lb_cudnn_set(g, t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt);
    if (by_value)
        lb_cudnn_set(g, t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
    lb_cudnn_finalize(g, t, "tensor finalisation");
    return t;
}

lb_cudnn_desc lb_cudnn_matrix(lb_cudnn_graph *g, int64_t uid, cudnnDataType_t type, int64_t rows,
                              int64_t cols, int64_t row_stride, int64_t col_stride,
                              unsigned flags) {
    const int64_t dims[3] = {1, rows, cols}, strides[3] = {rows * cols, row_stride, col_stride};
    return lb_cudnn_tensor(g, uid, type, 3, dims, strides, flags);
}

lb_cudnn_desc lb_cudnn_inner(lb_cudnn_graph *g, cudnnDataType_t type, int64_t d0, int64_t d1,
                             int64_t d2, int64_t d3) {
    const int64_t dims[4] = {d0, d1, d2, d3}, strides[4] = {d1 * d2 * d3, d2 * d3, d3, 1};
    return lb_cudnn_tensor(g, 0, type, 4, dims, strides, LB_CUDNN_VIRTUAL);
}

lb_cudnn_desc lb_cudnn_scalar(lb_cudnn_graph *g, int64_t uid) {
    const int64_t one[4] = {1, 1, 1, 1};
    return lb_cudnn_tensor(g, uid, CUDNN_DATA_FLOAT, 4, one, one, LB_CUDNN_BY_VALUE);
}

static void add_op(lb_cudnn_graph *g, lb_cudnn_desc op, const char *what) {
    lb_cudnn_finalize(g, op, what);
    if (g->st != LB_OK) return;
    if (g->n_ops == LB_CUDNN_MAX_OPS) {
        g->st =
            lb_fail(g->err, LB_ERR_RUNTIME, "cuDNN graph exceeds %d operations", LB_CUDNN_MAX_OPS);
        return;
    }
    g->ops[g->n_ops++] = op;
}

/* A pointwise operation of mode computed in prec (its tensors are set by the caller). */
static lb_cudnn_desc pointwise_op(lb_cudnn_graph *g, cudnnPointwiseMode_t mode,
                                  cudnnDataType_t prec, int64_t axis) {
    lb_cudnn_desc pw = lb_cudnn_make(g, CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    lb_cudnn_set(g, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    lb_cudnn_set(g, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    if (axis >= 0) lb_cudnn_set(g, pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    lb_cudnn_finalize(g, pw, "pointwise finalisation");
    lb_cudnn_desc op = lb_cudnn_make(g, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    lb_cudnn_set_desc(g, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw);
    return op;
}

void lb_cudnn_pointwise(lb_cudnn_graph *g, cudnnPointwiseMode_t mode, cudnnDataType_t prec,
                        lb_cudnn_desc x, lb_cudnn_desc b, lb_cudnn_desc cond, lb_cudnn_desc y,
                        int64_t axis) {
    lb_cudnn_desc op = pointwise_op(g, mode, prec, axis);
    const float one = 1.0f;
    lb_cudnn_set_desc(g, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
    if (b) lb_cudnn_set_desc(g, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b);
    if (cond) lb_cudnn_set_desc(g, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, cond);
    lb_cudnn_set_desc(g, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
    lb_cudnn_set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one);
    lb_cudnn_set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one);
    add_op(g, op, "pointwise operation");
}

void lb_cudnn_pointwise_bwd(lb_cudnn_graph *g, cudnnPointwiseMode_t mode, lb_cudnn_desc dy,
                            lb_cudnn_desc x, lb_cudnn_desc dx) {
    lb_cudnn_desc op = pointwise_op(g, mode, CUDNN_DATA_FLOAT, -1);
    lb_cudnn_set_desc(g, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
    lb_cudnn_set_desc(g, op, CUDNN_ATTR_OPERATION_POINTWISE_DYDESC, dy);
    lb_cudnn_set_desc(g, op, CUDNN_ATTR_OPERATION_POINTWISE_DXDESC, dx);
    add_op(g, op, "pointwise backward operation");
}

void lb_cudnn_fp32_op(lb_cudnn_graph *g, cudnnPointwiseMode_t mode, lb_cudnn_desc x,
                      lb_cudnn_desc b, lb_cudnn_desc y) {
    lb_cudnn_pointwise(g, mode, CUDNN_DATA_FLOAT, x, b, NULL, y, -1);
}

void lb_cudnn_reshape(lb_cudnn_graph *g, lb_cudnn_desc x, lb_cudnn_desc y) {
    lb_cudnn_desc op = lb_cudnn_make(g, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    lb_cudnn_set_desc(g, op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x);
    lb_cudnn_set_desc(g, op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y);
    add_op(g, op, "reshape operation");
}

void lb_cudnn_matmul(lb_cudnn_graph *g, lb_cudnn_desc a, lb_cudnn_desc b, lb_cudnn_desc c) {
    lb_cudnn_desc mm = lb_cudnn_make(g, CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    lb_cudnn_set(g, mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    lb_cudnn_finalize(g, mm, "matmul finalisation");
    lb_cudnn_desc op = lb_cudnn_make(g, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    lb_cudnn_set_desc(g, op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, a);
    lb_cudnn_set_desc(g, op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, b);
    lb_cudnn_set_desc(g, op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, c);
    lb_cudnn_set_desc(g, op, CUDNN_ATTR_OPERATION_MATMUL_DESC, mm);
    add_op(g, op, "matmul operation");
}

void lb_cudnn_reduction(lb_cudnn_graph *g, cudnnReduceTensorOp_t mode, lb_cudnn_desc x,
                        lb_cudnn_desc y) {
    lb_cudnn_desc rd = lb_cudnn_make(g, CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    lb_cudnn_set(g, rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1,
                 &mode);
    lb_cudnn_set(g, rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    lb_cudnn_finalize(g, rd, "reduction finalisation");
    lb_cudnn_desc op = lb_cudnn_make(g, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    lb_cudnn_set_desc(g, op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x);
    lb_cudnn_set_desc(g, op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y);
    lb_cudnn_set_desc(g, op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, rd);
    add_op(g, op, "reduction operation");
}

void lb_cudnn_graph_free(lb_cudnn_graph *g) {
    for (int i = g->n_made - 1; i >= 0; i--)
        lb_cudnn.drop(g->made[i]);
    g->n_made = g->n_ops = 0;
}

cudnnDataType_t lb_cudnn_type(lb_gpu_dtype dt) {
    return dt == LB_DT_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
}

/* ---- plans ------------------------------------------------------------------------------ */

lb_status lb_cudnn_plans_build(lb_cudnn_graph *g, cudnnHandle_t h, int max_plans, const char *name,
                               lb_cudnn_plans *ps) {
    *ps = (lb_cudnn_plans){.name = name};
    if (max_plans > LB_CUDNN_MAX_PLANS) max_plans = LB_CUDNN_MAX_PLANS;
    lb_cudnn_desc opg = lb_cudnn_make(g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    lb_cudnn_set(g, opg, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
    lb_cudnn_set(g, opg, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, g->n_ops,
                 g->ops);
    lb_cudnn_finalize(g, opg, name);
    lb_cudnn_desc heur = lb_cudnn_make(g, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    lb_cudnn_set_desc(g, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, opg);
    lb_cudnn_set(g, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    lb_cudnn_finalize(g, heur, "engine heuristic");
    int64_t n = 0;
    if (g->st == LB_OK)
        lb_cudnn_ok(g,
                    lb_cudnn.get(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                 0, &n, NULL),
                    "heuristic result count");
    if (g->st != LB_OK) return g->st;
    if (n <= 0)
        return g->st = lb_fail(g->err, LB_ERR_UNSUPPORTED, "cuDNN has no engine for the %s", name);
    /* the heuristic's order is not the speed order: look at twice as many as kept */
    if (n > 2 * LB_CUDNN_MAX_PLANS) n = 2 * LB_CUDNN_MAX_PLANS;
    lb_cudnn_desc cfg[2 * LB_CUDNN_MAX_PLANS];
    for (int64_t i = 0; i < n; i++)
        cfg[i] = lb_cudnn_make(g, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    int64_t got = 0;
    if (g->st == LB_OK)
        lb_cudnn_ok(g,
                    lb_cudnn.get(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                 n, &got, cfg),
                    "heuristic results");
    cudnnStatus_t last = CUDNN_STATUS_NOT_SUPPORTED;
    for (int64_t i = 0; g->st == LB_OK && i < got && ps->n < max_plans; i++) {
        lb_cudnn_desc p = NULL;
        if (lb_cudnn.make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &p) != CUDNN_STATUS_SUCCESS)
            break;
        last = lb_cudnn.set(p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
        if (last == CUDNN_STATUS_SUCCESS)
            last = lb_cudnn.set(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg[i]);
        if (last == CUDNN_STATUS_SUCCESS) last = lb_cudnn.finalize(p);
        int64_t bytes = 0, cnt = 0;
        if (last == CUDNN_STATUS_SUCCESS)
            last = lb_cudnn.get(p, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                                &cnt, &bytes);
        if (last != CUDNN_STATUS_SUCCESS) {
            lb_cudnn.drop(p);
            continue;
        }
        ps->plan[ps->n] = p, ps->ws[ps->n] = bytes;
        ps->n++;
    }
    if (g->st == LB_OK && ps->n == 0) lb_cudnn_ok(g, last, name);
    return g->st;
}

void lb_cudnn_plans_free(lb_cudnn_plans *ps) {
    for (int i = 0; i < ps->n; i++)
        lb_cudnn.drop(ps->plan[i]);
    ps->n = 0;
}

size_t lb_cudnn_plans_workspace_bytes(const lb_cudnn_plans *ps) {
    int64_t most = 0;
    for (int i = 0; i < ps->n; i++)
        if (ps->ws[i] > most) most = ps->ws[i];
    return (size_t)most;
}

static lb_status execute(lb_cudnn_desc plan, cudnnHandle_t h, int n, const int64_t *uids,
                         void **ptrs, void *ws, cudaStream_t s, lb_err *err) {
    lb_cudnn_graph g = {.err = err};
    lb_cudnn_ok(&g, lb_cudnn.set_stream(h, s), "stream setting");
    lb_cudnn_desc vp = lb_cudnn_make(&g, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    lb_cudnn_set(&g, vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids);
    lb_cudnn_set(&g, vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs);
    lb_cudnn_set(&g, vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
    lb_cudnn_finalize(&g, vp, "variant pack");
    if (g.st == LB_OK) lb_cudnn_ok(&g, lb_cudnn.execute(h, plan, vp), "execution");
    lb_cudnn_graph_free(&g);
    return g.st;
}

#define TUNE_REPS 3

/* one plan's run with one binding (tune's lb_gpu_timed_run) */
typedef struct {
    lb_cudnn_desc plan;
    cudnnHandle_t h;
    int n;
    const int64_t *uids;
    void **ptrs, *ws;
    cudaStream_t s;
} plan_run;

static lb_status run_plan(void *ctx, lb_err *err) {
    plan_run *r = ctx;
    return execute(r->plan, r->h, r->n, r->uids, r->ptrs, r->ws, r->s, err);
}

/* Times each plan on these buffers (gpu/timing.h) and keeps the fastest as the only one. A
 * plan that fails to run is dropped; a sticky device fault is the caller's error. */
static lb_status tune(lb_cudnn_plans *ps, cudnnHandle_t h, int n, const int64_t *uids, void **ptrs,
                      void *ws, cudaStream_t s, lb_err *err) {
    int best = -1;
    float best_ms = 0.0f;
    for (int i = 0; i < ps->n; i++) {
        plan_run r = {ps->plan[i], h, n, uids, ptrs, ws, s};
        lb_err why;
        float ms = 0.0f;
        lb_status st = lb_gpu_time_runs(s, TUNE_REPS, run_plan, &r, &ms, &why);
        cudaError_t e = cudaStreamSynchronize(s);
        if (e != cudaSuccess)
            return lb_fail(err, LB_ERR_DEVICE, "timing cuDNN's %s plans: %s", ps->name,
                           cudaGetErrorString(e));
        if (st != LB_OK) {
            LB_DEBUG("cuDNN %s: plan %d does not run here: %s", ps->name, i, why.msg);
            continue;
        }
        if (best < 0 || ms < best_ms) best = i, best_ms = ms;
        LB_DEBUG("cuDNN %s: plan %d of %d, %.1f us", ps->name, i, ps->n, 1e3 * ms);
    }
    if (best < 0)
        return lb_fail(err, LB_ERR_UNSUPPORTED, "none of cuDNN's %s plans runs here", ps->name);
    for (int i = 0; i < ps->n; i++)
        if (i != best) lb_cudnn.drop(ps->plan[i]);
    ps->plan[0] = ps->plan[best], ps->ws[0] = ps->ws[best];
    ps->n = 1;
    return LB_OK;
}

lb_status lb_cudnn_plans_run(lb_cudnn_plans *ps, cudnnHandle_t h, int n, const int64_t *uids,
                             void **ptrs, void *ws, cudaStream_t s, lb_err *err) {
    enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    if (ps->n > 1 && cudaStreamIsCapturing(s, &cap) == cudaSuccess &&
        cap == cudaStreamCaptureStatusNone)
        LB_TRY(tune(ps, h, n, uids, ptrs, ws, s, err));
    return execute(ps->plan[0], h, n, uids, ptrs, ws, s, err);
}

#endif
