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

dnn_api dnn;

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static char g_why[160];

static void load(void) {
    void *lib = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        snprintf(g_why, sizeof g_why,
                 "cuDNN 9 not found (libcudnn.so.9 is not on the library path)");
        return;
    }
#define LOAD(field, sym) *(void **)(&dnn.field) = dlsym(lib, sym)
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
    if (!dnn.create || !dnn.destroy || !dnn.set_stream || !dnn.error_string || !dnn.last_error ||
        !dnn.make || !dnn.drop || !dnn.finalize || !dnn.set || !dnn.get || !dnn.execute ||
        !version) {
        snprintf(g_why, sizeof g_why, "libcudnn.so.9 lacks the backend graph API");
        dlclose(lib);
        memset(&dnn, 0, sizeof dnn);
        return;
    }
    dnn.version = version();
    dnn.lib = lib;
}

lb_status dnn_load(lb_err *err) {
    pthread_once(&g_once, load);
    if (dnn.lib == NULL) return lb_fail(err, LB_ERR_UNSUPPORTED, "%s", g_why);
    return LB_OK;
}

size_t lb_cudnn_version(void) {
    return dnn.version;
}

/* ---- graph builder ---------------------------------------------------------------------- */

bool dnn_ok(dnn_graph *g, cudnnStatus_t s, const char *what) {
    if (g->st != LB_OK) return false;
    if (s == CUDNN_STATUS_SUCCESS) return true;
    char detail[300] = "";
    dnn.last_error(detail, sizeof detail);
    g->st = lb_fail(g->err, s == CUDNN_STATUS_NOT_SUPPORTED ? LB_ERR_UNSUPPORTED : LB_ERR_DEVICE,
                    "cuDNN %s failed: %s (%d)%s%s", what, dnn.error_string(s), (int)s,
                    detail[0] ? ": " : "", detail);
    return false;
}

dnn_desc dnn_make(dnn_graph *g, cudnnBackendDescriptorType_t type) {
    if (g->st != LB_OK) return NULL;
    if (g->n_made == DNN_MAX_DESC) {
        g->st = lb_fail(g->err, LB_ERR_RUNTIME, "cuDNN graph exceeds %d descriptors", DNN_MAX_DESC);
        return NULL;
    }
    dnn_desc d = NULL;
    if (!dnn_ok(g, dnn.make(type, &d), "descriptor creation")) return NULL;
    return g->made[g->n_made++] = d;
}

void dnn_set(dnn_graph *g, dnn_desc d, cudnnBackendAttributeName_t name,
             cudnnBackendAttributeType_t type, int64_t n, const void *v) {
    if (g->st == LB_OK) dnn_ok(g, dnn.set(d, name, type, n, v), "attribute setting");
}

void dnn_finalize(dnn_graph *g, dnn_desc d, const char *what) {
    if (g->st == LB_OK) dnn_ok(g, dnn.finalize(d), what);
}

void dnn_set_desc(dnn_graph *g, dnn_desc d, cudnnBackendAttributeName_t name, dnn_desc v) {
    dnn_set(g, d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v);
}

dnn_desc dnn_tensor(dnn_graph *g, int64_t uid, cudnnDataType_t type, int rank, const int64_t *dims,
                    const int64_t *strides, unsigned flags) {
    dnn_desc t = dnn_make(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    int64_t id = uid != 0 ? uid : g->next_virtual++, align = 16;
    bool virt = (flags & DNN_VIRTUAL) != 0, by_value = (flags & DNN_BY_VALUE) != 0;
    dnn_set(g, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &id);
    dnn_set(g, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
    dnn_set(g, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, rank, dims);
    dnn_set(g, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, rank, strides);
    dnn_set(g, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
    dnn_set(g, t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt);
    if (by_value) dnn_set(g, t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
    dnn_finalize(g, t, "tensor finalisation");
    return t;
}

dnn_desc dnn_matrix(dnn_graph *g, int64_t uid, cudnnDataType_t type, int64_t rows, int64_t cols,
                    int64_t row_stride, int64_t col_stride, unsigned flags) {
    const int64_t dims[3] = {1, rows, cols}, strides[3] = {rows * cols, row_stride, col_stride};
    return dnn_tensor(g, uid, type, 3, dims, strides, flags);
}

dnn_desc dnn_inner(dnn_graph *g, cudnnDataType_t type, int64_t d0, int64_t d1, int64_t d2,
                   int64_t d3) {
    const int64_t dims[4] = {d0, d1, d2, d3}, strides[4] = {d1 * d2 * d3, d2 * d3, d3, 1};
    return dnn_tensor(g, 0, type, 4, dims, strides, DNN_VIRTUAL);
}

dnn_desc dnn_scalar(dnn_graph *g, int64_t uid) {
    const int64_t one[4] = {1, 1, 1, 1};
    return dnn_tensor(g, uid, CUDNN_DATA_FLOAT, 4, one, one, DNN_BY_VALUE);
}

static void add_op(dnn_graph *g, dnn_desc op, const char *what) {
    dnn_finalize(g, op, what);
    if (g->st != LB_OK) return;
    if (g->n_ops == DNN_MAX_OPS) {
        g->st = lb_fail(g->err, LB_ERR_RUNTIME, "cuDNN graph exceeds %d operations", DNN_MAX_OPS);
        return;
    }
    g->ops[g->n_ops++] = op;
}

/* A pointwise operation of mode computed in prec (its tensors are set by the caller). */
static dnn_desc pointwise_op(dnn_graph *g, cudnnPointwiseMode_t mode, cudnnDataType_t prec,
                             int64_t axis) {
    dnn_desc pw = dnn_make(g, CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    dnn_set(g, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    dnn_set(g, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    if (axis >= 0) dnn_set(g, pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    dnn_finalize(g, pw, "pointwise finalisation");
    dnn_desc op = dnn_make(g, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    dnn_set_desc(g, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw);
    return op;
}

void dnn_pointwise(dnn_graph *g, cudnnPointwiseMode_t mode, cudnnDataType_t prec, dnn_desc x,
                   dnn_desc b, dnn_desc cond, dnn_desc y, int64_t axis) {
    dnn_desc op = pointwise_op(g, mode, prec, axis);
    const float one = 1.0f;
    dnn_set_desc(g, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
    if (b) dnn_set_desc(g, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b);
    if (cond) dnn_set_desc(g, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, cond);
    dnn_set_desc(g, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
    dnn_set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one);
    dnn_set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one);
    add_op(g, op, "pointwise operation");
}

void dnn_pointwise_bwd(dnn_graph *g, cudnnPointwiseMode_t mode, dnn_desc dy, dnn_desc x,
                       dnn_desc dx) {
    dnn_desc op = pointwise_op(g, mode, CUDNN_DATA_FLOAT, -1);
    dnn_set_desc(g, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
    dnn_set_desc(g, op, CUDNN_ATTR_OPERATION_POINTWISE_DYDESC, dy);
    dnn_set_desc(g, op, CUDNN_ATTR_OPERATION_POINTWISE_DXDESC, dx);
    add_op(g, op, "pointwise backward operation");
}

void dnn_fp32_op(dnn_graph *g, cudnnPointwiseMode_t mode, dnn_desc x, dnn_desc b, dnn_desc y) {
    dnn_pointwise(g, mode, CUDNN_DATA_FLOAT, x, b, NULL, y, -1);
}

void dnn_reshape(dnn_graph *g, dnn_desc x, dnn_desc y) {
    dnn_desc op = dnn_make(g, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    dnn_set_desc(g, op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x);
    dnn_set_desc(g, op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y);
    add_op(g, op, "reshape operation");
}

void dnn_matmul(dnn_graph *g, dnn_desc a, dnn_desc b, dnn_desc c) {
    dnn_desc mm = dnn_make(g, CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    dnn_set(g, mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    dnn_finalize(g, mm, "matmul finalisation");
    dnn_desc op = dnn_make(g, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    dnn_set_desc(g, op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, a);
    dnn_set_desc(g, op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, b);
    dnn_set_desc(g, op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, c);
    dnn_set_desc(g, op, CUDNN_ATTR_OPERATION_MATMUL_DESC, mm);
    add_op(g, op, "matmul operation");
}

void dnn_reduction(dnn_graph *g, cudnnReduceTensorOp_t mode, dnn_desc x, dnn_desc y) {
    dnn_desc rd = dnn_make(g, CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    dnn_set(g, rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode);
    dnn_set(g, rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    dnn_finalize(g, rd, "reduction finalisation");
    dnn_desc op = dnn_make(g, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    dnn_set_desc(g, op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x);
    dnn_set_desc(g, op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y);
    dnn_set_desc(g, op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, rd);
    add_op(g, op, "reduction operation");
}

void dnn_graph_free(dnn_graph *g) {
    for (int i = g->n_made - 1; i >= 0; i--)
        dnn.drop(g->made[i]);
    g->n_made = g->n_ops = 0;
}

cudnnDataType_t dnn_type(lb_gpu_dtype dt) {
    return dt == LB_DT_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
}

/* ---- plans ------------------------------------------------------------------------------ */

lb_status dnn_plans_build(dnn_graph *g, cudnnHandle_t h, int max_plans, const char *name,
                          dnn_plans *ps) {
    *ps = (dnn_plans){.name = name};
    if (max_plans > DNN_MAX_PLANS) max_plans = DNN_MAX_PLANS;
    dnn_desc opg = dnn_make(g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    dnn_set(g, opg, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
    dnn_set(g, opg, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, g->n_ops, g->ops);
    dnn_finalize(g, opg, name);
    dnn_desc heur = dnn_make(g, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    dnn_set_desc(g, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, opg);
    dnn_set(g, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    dnn_finalize(g, heur, "engine heuristic");
    int64_t n = 0;
    if (g->st == LB_OK)
        dnn_ok(g,
               dnn.get(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n,
                       NULL),
               "heuristic result count");
    if (g->st != LB_OK) return g->st;
    if (n <= 0)
        return g->st = lb_fail(g->err, LB_ERR_UNSUPPORTED, "cuDNN has no engine for the %s", name);
    /* the heuristic's order is not the speed order: look at twice as many as kept */
    if (n > 2 * DNN_MAX_PLANS) n = 2 * DNN_MAX_PLANS;
    dnn_desc cfg[2 * DNN_MAX_PLANS];
    for (int64_t i = 0; i < n; i++)
        cfg[i] = dnn_make(g, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    int64_t got = 0;
    if (g->st == LB_OK)
        dnn_ok(g,
               dnn.get(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n, &got,
                       cfg),
               "heuristic results");
    cudnnStatus_t last = CUDNN_STATUS_NOT_SUPPORTED;
    for (int64_t i = 0; g->st == LB_OK && i < got && ps->n < max_plans; i++) {
        dnn_desc p = NULL;
        if (dnn.make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &p) != CUDNN_STATUS_SUCCESS) break;
        last = dnn.set(p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
        if (last == CUDNN_STATUS_SUCCESS)
            last = dnn.set(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                           CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg[i]);
        if (last == CUDNN_STATUS_SUCCESS) last = dnn.finalize(p);
        int64_t bytes = 0, cnt = 0;
        if (last == CUDNN_STATUS_SUCCESS)
            last = dnn.get(p, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &cnt,
                           &bytes);
        if (last != CUDNN_STATUS_SUCCESS) {
            dnn.drop(p);
            continue;
        }
        ps->plan[ps->n] = p, ps->ws[ps->n] = bytes;
        ps->n++;
    }
    if (g->st == LB_OK && ps->n == 0) dnn_ok(g, last, name);
    return g->st;
}

void dnn_plans_free(dnn_plans *ps) {
    for (int i = 0; i < ps->n; i++)
        dnn.drop(ps->plan[i]);
    ps->n = 0;
}

size_t dnn_plans_workspace_bytes(const dnn_plans *ps) {
    int64_t most = 0;
    for (int i = 0; i < ps->n; i++)
        if (ps->ws[i] > most) most = ps->ws[i];
    return (size_t)most;
}

static lb_status execute(dnn_desc plan, cudnnHandle_t h, int n, const int64_t *uids, void **ptrs,
                         void *ws, cudaStream_t s, lb_err *err) {
    dnn_graph g = {.err = err};
    dnn_ok(&g, dnn.set_stream(h, s), "stream setting");
    dnn_desc vp = dnn_make(&g, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    dnn_set(&g, vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids);
    dnn_set(&g, vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs);
    dnn_set(&g, vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
    dnn_finalize(&g, vp, "variant pack");
    if (g.st == LB_OK) dnn_ok(&g, dnn.execute(h, plan, vp), "execution");
    dnn_graph_free(&g);
    return g.st;
}

#define TUNE_REPS 3

/* one plan's run with one binding (tune's lb_gpu_timed_run) */
typedef struct {
    dnn_desc plan;
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
static lb_status tune(dnn_plans *ps, cudnnHandle_t h, int n, const int64_t *uids, void **ptrs,
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
        if (i != best) dnn.drop(ps->plan[i]);
    ps->plan[0] = ps->plan[best], ps->ws[0] = ps->ws[best];
    ps->n = 1;
    return LB_OK;
}

lb_status dnn_plans_run(dnn_plans *ps, cudnnHandle_t h, int n, const int64_t *uids, void **ptrs,
                        void *ws, cudaStream_t s, lb_err *err) {
    enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    if (ps->n > 1 && cudaStreamIsCapturing(s, &cap) == cudaSuccess &&
        cap == cudaStreamCaptureStatusNone)
        LB_TRY(tune(ps, h, n, uids, ptrs, ws, s, err));
    return execute(ps->plan[0], h, n, uids, ptrs, ws, s, err);
}

#endif
