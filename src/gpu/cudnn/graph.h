/* graph.h: what the cuDNN modules (gpu/cudnn/attn.c, gpu/cudnn/gelu.c) and bench/'s cuDNN
 * probe build on: cuDNN 9 loaded with dlopen once per process (llmbench never links it), a
 * small builder of backend operation graphs, execution plans and their execution.
 * Implemented in gpu/cudnn/graph.c; only in builds with cuDNN's headers (LB_HAVE_CUDNN).
 *
 * A graph is a list of backend descriptors built with a sticky error: every helper does
 * nothing once a call has failed, so a graph reads as the sequence of its operations and
 * is checked once at the end. Tensors carry unique ids: the ones bound at execution (the
 * caller's, below DNN_UID_VIRTUAL) and virtual intermediates numbered from there. A
 * graph's plans are the engine configurations of cuDNN's heuristic (mode A) that finalise,
 * up to the number the caller asks for; with more than one, the first run outside a
 * stream capture times them all on its own buffers and keeps the fastest. */
#ifndef LB_GPU_CUDNN_GRAPH_H
#define LB_GPU_CUDNN_GRAPH_H

#include <cuda_runtime.h>
#include <cudnn_graph.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"
#include "gpu/dtype.h"

typedef cudnnBackendDescriptor_t dnn_desc;

/* the subset of cuDNN's C API used, with the signatures of cudnn_graph.h */
typedef struct {
    void *lib; /* NULL: not loaded */
    size_t version;
    cudnnStatus_t (*create)(cudnnHandle_t *);
    cudnnStatus_t (*destroy)(cudnnHandle_t);
    cudnnStatus_t (*set_stream)(cudnnHandle_t, cudaStream_t);
    const char *(*error_string)(cudnnStatus_t);
    void (*last_error)(char *, size_t);
    cudnnStatus_t (*make)(cudnnBackendDescriptorType_t, dnn_desc *);
    cudnnStatus_t (*drop)(dnn_desc);
    cudnnStatus_t (*finalize)(dnn_desc);
    cudnnStatus_t (*set)(dnn_desc, cudnnBackendAttributeName_t, cudnnBackendAttributeType_t,
                         int64_t, const void *);
    cudnnStatus_t (*get)(dnn_desc, cudnnBackendAttributeName_t, cudnnBackendAttributeType_t,
                         int64_t, int64_t *, void *);
    cudnnStatus_t (*execute)(cudnnHandle_t, dnn_desc, dnn_desc);
} dnn_api;

extern dnn_api dnn;

/* Loads cuDNN once per process. LB_ERR_UNSUPPORTED with the reason when it is absent or
 * lacks the backend API. */
lb_status dnn_load(lb_err *err);

#define DNN_MAX_DESC    160
#define DNN_MAX_OPS     40
#define DNN_UID_VIRTUAL 100

enum { DNN_VIRTUAL = 1, DNN_BY_VALUE = 2 }; /* tensor flags */

typedef struct {
    dnn_desc made[DNN_MAX_DESC]; /* every descriptor of the graph, destroyed together */
    int n_made;
    dnn_desc ops[DNN_MAX_OPS];
    int n_ops;
    int64_t next_virtual; /* start at DNN_UID_VIRTUAL */
    lb_status st;
    lb_err *err;
} dnn_graph;

/* Records the first failure: the call, cuDNN's status and its last error message. */
bool dnn_ok(dnn_graph *g, cudnnStatus_t s, const char *what);
dnn_desc dnn_make(dnn_graph *g, cudnnBackendDescriptorType_t type);
void dnn_set(dnn_graph *g, dnn_desc d, cudnnBackendAttributeName_t name,
             cudnnBackendAttributeType_t type, int64_t n, const void *v);
void dnn_set_desc(dnn_graph *g, dnn_desc d, cudnnBackendAttributeName_t name, dnn_desc v);
void dnn_finalize(dnn_graph *g, dnn_desc d, const char *what);
/* Destroys every descriptor of g. */
void dnn_graph_free(dnn_graph *g);

/* A tensor of `rank` (at most 4) dimensions; uid 0 makes a virtual one with the next free
 * id. */
dnn_desc dnn_tensor(dnn_graph *g, int64_t uid, cudnnDataType_t type, int rank, const int64_t *dims,
                    const int64_t *strides, unsigned flags);
/* A matrix as [1, rows, cols] with the given row and column strides (3-d: cuDNN's matmul
 * fusions find no engine for 4-d ones). */
dnn_desc dnn_matrix(dnn_graph *g, int64_t uid, cudnnDataType_t type, int64_t rows, int64_t cols,
                    int64_t row_stride, int64_t col_stride, unsigned flags);
/* A virtual intermediate [d0,d1,d2,d3], packed row-major. */
dnn_desc dnn_inner(dnn_graph *g, cudnnDataType_t type, int64_t d0, int64_t d1, int64_t d2,
                   int64_t d3);
/* A scalar passed by value in the variant pack (a host float). */
dnn_desc dnn_scalar(dnn_graph *g, int64_t uid);
cudnnDataType_t dnn_type(lb_gpu_dtype dt); /* bf16 or fp16 */

/* y = mode(x[, b]) computed in type prec; cond feeds BINARY_SELECT (y = cond ? x : b); axis
 * is GEN_INDEX's (-1: none). */
void dnn_pointwise(dnn_graph *g, cudnnPointwiseMode_t mode, cudnnDataType_t prec, dnn_desc x,
                   dnn_desc b, dnn_desc cond, dnn_desc y, int64_t axis);
/* dx = the derivative of a pointwise mode's forward at x, times dy (a *_BWD mode, fp32) */
void dnn_pointwise_bwd(dnn_graph *g, cudnnPointwiseMode_t mode, dnn_desc dy, dnn_desc x,
                       dnn_desc dx);
/* fp32 arithmetic, the common case */
void dnn_fp32_op(dnn_graph *g, cudnnPointwiseMode_t mode, dnn_desc x, dnn_desc b, dnn_desc y);
/* y = x seen through y's dimensions and strides (a transpose) */
void dnn_reshape(dnn_graph *g, dnn_desc x, dnn_desc y);
/* c = a b over the last two dimensions, fp32 accumulation */
void dnn_matmul(dnn_graph *g, dnn_desc a, dnn_desc b, dnn_desc c);
/* y = reduce(x) over the dimensions where y is smaller */
void dnn_reduction(dnn_graph *g, cudnnReduceTensorOp_t mode, dnn_desc x, dnn_desc y);

#define DNN_MAX_PLANS 8

/* A graph's execution plans (plan[0] runs once one is left) and their workspace bytes. */
typedef struct {
    dnn_desc plan[DNN_MAX_PLANS];
    int64_t ws[DNN_MAX_PLANS];
    int n;
    const char *name;
} dnn_plans;

/* Plans of g's operations, at most max_plans; LB_ERR_UNSUPPORTED where none finalises.
 * The graph's descriptors may go afterwards; the caller frees ps with dnn_plans_free. */
lb_status dnn_plans_build(dnn_graph *g, cudnnHandle_t h, int max_plans, const char *name,
                          dnn_plans *ps);
void dnn_plans_free(dnn_plans *ps);
/* The most workspace any of ps's plans needs. */
size_t dnn_plans_workspace_bytes(const dnn_plans *ps);
/* Binds n ids to pointers and runs ps's plan on stream s (tuning first, as above). */
lb_status dnn_plans_run(dnn_plans *ps, cudnnHandle_t h, int n, const int64_t *uids, void **ptrs,
                        void *ws, cudaStream_t s, lb_err *err);

#endif
