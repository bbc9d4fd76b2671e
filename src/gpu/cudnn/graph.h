/* graph.h: what the cuDNN modules (gpu/cudnn/attn.c, gpu/cudnn/gelu.c) and bench/'s cuDNN
 * probe build on: cuDNN 9 loaded with dlopen once per process (llmbench never links it), a
 * small builder of backend operation graphs, execution plans and their execution.
 * Implemented in gpu/cudnn/graph.c; only in builds with cuDNN's headers (LB_HAVE_CUDNN).
 *
 * A graph is a list of backend descriptors built with a sticky error: every helper does
 * nothing once a call has failed, so a graph reads as the sequence of its operations and
 * is checked once at the end. Tensors carry unique ids: the ones bound at execution (the
 * caller's, below LB_CUDNN_UID_VIRTUAL) and virtual intermediates numbered from there. A
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

typedef cudnnBackendDescriptor_t lb_cudnn_desc;

/* the subset of cuDNN's C API used, with the signatures of cudnn_graph.h */
typedef struct {
    void *lib; /* NULL: not loaded */
    size_t version;
    cudnnStatus_t (*create)(cudnnHandle_t *);
    cudnnStatus_t (*destroy)(cudnnHandle_t);
    cudnnStatus_t (*set_stream)(cudnnHandle_t, cudaStream_t);
    const char *(*error_string)(cudnnStatus_t);
    void (*last_error)(char *, size_t);
    cudnnStatus_t (*make)(cudnnBackendDescriptorType_t, lb_cudnn_desc *);
    cudnnStatus_t (*drop)(lb_cudnn_desc);
    cudnnStatus_t (*finalize)(lb_cudnn_desc);
    cudnnStatus_t (*set)(lb_cudnn_desc, cudnnBackendAttributeName_t, cudnnBackendAttributeType_t,
                         int64_t, const void *);
    cudnnStatus_t (*get)(lb_cudnn_desc, cudnnBackendAttributeName_t, cudnnBackendAttributeType_t,
                         int64_t, int64_t *, void *);
    cudnnStatus_t (*execute)(cudnnHandle_t, lb_cudnn_desc, lb_cudnn_desc);
} lb_cudnn_api;

extern lb_cudnn_api lb_cudnn;

/* Loads cuDNN once per process. LB_ERR_UNSUPPORTED with the reason when it is absent or
 * lacks the backend API. */
lb_status lb_cudnn_load(lb_err *err);

#define LB_CUDNN_MAX_DESC    160
#define LB_CUDNN_MAX_OPS     40
#define LB_CUDNN_UID_VIRTUAL 100

enum { LB_CUDNN_VIRTUAL = 1, LB_CUDNN_BY_VALUE = 2 }; /* tensor flags */

typedef struct {
    lb_cudnn_desc made[LB_CUDNN_MAX_DESC]; /* every descriptor of the graph, destroyed together */
    int n_made;
    lb_cudnn_desc ops[LB_CUDNN_MAX_OPS];
    int n_ops;
    int64_t next_virtual; /* start at LB_CUDNN_UID_VIRTUAL */
    lb_status st;
    lb_err *err;
} lb_cudnn_graph;

/* Records the first failure: the call, cuDNN's status and its last error message. */
bool lb_cudnn_ok(lb_cudnn_graph *g, cudnnStatus_t s, const char *what);
lb_cudnn_desc lb_cudnn_make(lb_cudnn_graph *g, cudnnBackendDescriptorType_t type);
void lb_cudnn_set(lb_cudnn_graph *g, lb_cudnn_desc d, cudnnBackendAttributeName_t name,
                  cudnnBackendAttributeType_t type, int64_t n, const void *v);
void lb_cudnn_set_desc(lb_cudnn_graph *g, lb_cudnn_desc d, cudnnBackendAttributeName_t name,
                       lb_cudnn_desc v);
void lb_cudnn_finalize(lb_cudnn_graph *g, lb_cudnn_desc d, const char *what);
/* Destroys every descriptor of g. */
void lb_cudnn_graph_free(lb_cudnn_graph *g);

/* A tensor of `rank` (at most 4) dimensions; uid 0 makes a virtual one with the next free
 * id. */
lb_cudnn_desc lb_cudnn_tensor(lb_cudnn_graph *g, int64_t uid, cudnnDataType_t type, int rank,
                              const int64_t *dims, const int64_t *strides, unsigned flags);
/* A matrix as [1, rows, cols] with the given row and column strides (3-d: cuDNN's matmul
 * fusions find no engine for 4-d ones). */
lb_cudnn_desc lb_cudnn_matrix(lb_cudnn_graph *g, int64_t uid, cudnnDataType_t type, int64_t rows,
                              int64_t cols, int64_t row_stride, int64_t col_stride, unsigned flags);
/* A virtual intermediate [d0,d1,d2,d3], packed row-major. */
lb_cudnn_desc lb_cudnn_inner(lb_cudnn_graph *g, cudnnDataType_t type, int64_t d0, int64_t d1,
                             int64_t d2, int64_t d3);
/* A scalar passed by value in the variant pack (a host float). */
lb_cudnn_desc lb_cudnn_scalar(lb_cudnn_graph *g, int64_t uid);
cudnnDataType_t lb_cudnn_type(lb_gpu_dtype dt); /* bf16 or fp16 */

/* y = mode(x[, b]) computed in type prec; cond feeds BINARY_SELECT (y = cond ? x : b); axis
 * is GEN_INDEX's (-1: none). */
void lb_cudnn_pointwise(lb_cudnn_graph *g, cudnnPointwiseMode_t mode, cudnnDataType_t prec,
                        lb_cudnn_desc x, lb_cudnn_desc b, lb_cudnn_desc cond, lb_cudnn_desc y,
                        int64_t axis);
/* dx = the derivative of a pointwise mode's forward at x, times dy (a *_BWD mode, fp32) */
void lb_cudnn_pointwise_bwd(lb_cudnn_graph *g, cudnnPointwiseMode_t mode, lb_cudnn_desc dy,
                            lb_cudnn_desc x, lb_cudnn_desc dx);
/* fp32 arithmetic, the common case */
void lb_cudnn_fp32_op(lb_cudnn_graph *g, cudnnPointwiseMode_t mode, lb_cudnn_desc x,
                      lb_cudnn_desc b, lb_cudnn_desc y);
/* y = x seen through y's dimensions and strides (a transpose) */
void lb_cudnn_reshape(lb_cudnn_graph *g, lb_cudnn_desc x, lb_cudnn_desc y);
/* c = a b over the last two dimensions, fp32 accumulation */
void lb_cudnn_matmul(lb_cudnn_graph *g, lb_cudnn_desc a, lb_cudnn_desc b, lb_cudnn_desc c);
/* y = reduce(x) over the dimensions where y is smaller */
void lb_cudnn_reduction(lb_cudnn_graph *g, cudnnReduceTensorOp_t mode, lb_cudnn_desc x,
                        lb_cudnn_desc y);

#define LB_CUDNN_MAX_PLANS 8

/* A graph's execution plans (plan[0] runs once one is left) and their workspace bytes. */
typedef struct {
    lb_cudnn_desc plan[LB_CUDNN_MAX_PLANS];
    int64_t ws[LB_CUDNN_MAX_PLANS];
    int n;
    const char *name;
} lb_cudnn_plans;

/* Plans of g's operations, at most max_plans; LB_ERR_UNSUPPORTED where none finalises.
 * The graph's descriptors may go afterwards; the caller frees ps with lb_cudnn_plans_free. */
lb_status lb_cudnn_plans_build(lb_cudnn_graph *g, cudnnHandle_t h, int max_plans, const char *name,
                               lb_cudnn_plans *ps);
void lb_cudnn_plans_free(lb_cudnn_plans *ps);
/* The most workspace any of ps's plans needs. */
size_t lb_cudnn_plans_workspace_bytes(const lb_cudnn_plans *ps);
/* Binds n ids to pointers and runs ps's plan on stream s (tuning first, as above). */
lb_status lb_cudnn_plans_run(lb_cudnn_plans *ps, cudnnHandle_t h, int n, const int64_t *uids,
                             void **ptrs, void *ws, cudaStream_t s, lb_err *err);

#endif
