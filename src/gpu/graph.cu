/* graph.cu: see graph.cuh. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/graph.cuh"

/* CUDA 13 gave these calls the edge-data arguments of 12.3's _v2 variants */
#if CUDART_VERSION >= 13000
#define node_dependencies cudaGraphNodeGetDependencies
#define node_dependents   cudaGraphNodeGetDependentNodes
#define add_dependencies  cudaGraphAddDependencies
#else
#define node_dependencies cudaGraphNodeGetDependencies_v2
#define node_dependents   cudaGraphNodeGetDependentNodes_v2
#define add_dependencies  cudaGraphAddDependencies_v2
#endif

/* The values of a memset node: width elements of esize (1, 2 or 4) bytes in each of height
 * rows pitch bytes apart, every element `value` (its low esize bytes). */
static __global__ void fill_kernel(char *dst, size_t pitch, unsigned int value, unsigned int esize,
                                   size_t width, size_t height) {
    size_t n = width * height;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        char *p = dst + (i / width) * pitch + (i % width) * esize;
        if (esize == 4)
            *(unsigned int *)p = value;
        else if (esize == 2)
            *(unsigned short *)p = (unsigned short)value;
        else
            *p = (char)value;
    }
}

static bool plain_edges(const cudaGraphEdgeData *e, size_t n) {
    static const cudaGraphEdgeData zero = {};
    for (size_t i = 0; i < n; i++)
        if (memcmp(&e[i], &zero, sizeof zero) != 0) return false;
    return true;
}

/* The node's incoming (in = true) or outgoing edges' other ends, in *nodes (caller frees);
 * false where they cannot be read or carry edge data. */
static bool edges_of(cudaGraphNode_t node, bool in, cudaGraphNode_t **nodes, size_t *n) {
    *nodes = NULL;
    *n = 0;
    cudaError_t e =
        in ? node_dependencies(node, NULL, NULL, n) : node_dependents(node, NULL, NULL, n);
    if (e != cudaSuccess) return false;
    if (*n == 0) return true;
    cudaGraphEdgeData *data = (cudaGraphEdgeData *)calloc(*n, sizeof *data);
    *nodes = (cudaGraphNode_t *)calloc(*n, sizeof **nodes);
    bool ok = data && *nodes;
    if (ok) {
        e = in ? node_dependencies(node, *nodes, data, n) : node_dependents(node, *nodes, data, n);
        ok = e == cudaSuccess && plain_edges(data, *n);
    }
    free(data);
    return ok;
}

/* A kernel node writing mp's values after deps and before outs; false on a CUDA error. */
static bool add_fill(cudaGraph_t g, const struct cudaMemsetParams *mp, const cudaGraphNode_t *deps,
                     size_t nd, const cudaGraphNode_t *outs, size_t no) {
    char *dst = (char *)mp->dst;
    size_t pitch = mp->pitch, width = mp->width, height = mp->height;
    unsigned int value = mp->value, esize = mp->elementSize;
    void *args[] = {&dst, &pitch, &value, &esize, &width, &height};
    struct cudaKernelNodeParams kp = {};
    kp.func = (void *)fill_kernel;
    kp.blockDim = dim3(256);
    size_t blocks = (width * height + 255) / 256;
    kp.gridDim = dim3((unsigned int)(blocks < 1024 ? blocks : 1024));
    kp.kernelParams = args;
    cudaGraphNode_t k;
    if (cudaGraphAddKernelNode(&k, g, deps, nd, &kp) != cudaSuccess) return false;
    if (no == 0) return true;
    cudaGraphNode_t *from = (cudaGraphNode_t *)calloc(no, sizeof *from);
    if (from == NULL) return false;
    for (size_t i = 0; i < no; i++)
        from[i] = k;
    bool ok = add_dependencies(g, from, outs, NULL, no) == cudaSuccess;
    free(from);
    return ok;
}

/* One memset node replaced: 0 done, 1 left alone (too large, or edges with data), -1 a CUDA
 * error (the graph still valid). */
static int replace(cudaGraph_t g, cudaGraphNode_t node, size_t max_bytes) {
    struct cudaMemsetParams mp;
    if (cudaGraphMemsetNodeGetParams(node, &mp) != cudaSuccess) return -1;
    size_t bytes = mp.width * mp.height * mp.elementSize;
    if (bytes > max_bytes || bytes == 0) return 1;
    cudaGraphNode_t *deps = NULL, *outs = NULL;
    size_t nd = 0, no = 0;
    int rc = 1;
    if (edges_of(node, true, &deps, &nd) && edges_of(node, false, &outs, &no))
        rc = add_fill(g, &mp, deps, nd, outs, no) && cudaGraphDestroyNode(node) == cudaSuccess ? 0
                                                                                               : -1;
    free(deps);
    free(outs);
    return rc;
}

extern "C" lb_status lb_gpu_graph_memsets_to_kernels(cudaGraph_t g, size_t max_bytes, int *replaced,
                                                     lb_err *err) {
    *replaced = 0;
    size_t n = 0;
    if (cudaGraphGetNodes(g, NULL, &n) != cudaSuccess)
        return lb_fail(err, LB_ERR_DEVICE, "cudaGraphGetNodes failed");
    cudaGraphNode_t *nodes = (cudaGraphNode_t *)calloc(n ? n : 1, sizeof *nodes);
    if (nodes == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of memory listing graph nodes");
    lb_status st = LB_OK;
    if (cudaGraphGetNodes(g, nodes, &n) != cudaSuccess)
        st = lb_fail(err, LB_ERR_DEVICE, "cudaGraphGetNodes failed");
    for (size_t i = 0; i < n && st == LB_OK; i++) {
        enum cudaGraphNodeType type;
        if (cudaGraphNodeGetType(nodes[i], &type) != cudaSuccess || type != cudaGraphNodeTypeMemset)
            continue;
        int rc = replace(g, nodes[i], max_bytes);
        if (rc == 0)
            (*replaced)++;
        else if (rc < 0)
            st = lb_fail(err, LB_ERR_DEVICE, "replacing a memset node: %s",
                         cudaGetErrorString(cudaGetLastError()));
    }
    free(nodes);
    return st;
}

extern "C" bool lb_gpu_graph_capture(cudaStream_t s, lb_gpu_graph_body body, void *ctx,
                                     cudaGraph_t *graph, cudaGraphExec_t *exec, char *why,
                                     size_t why_cap) {
    lb_err e;
    cudaGraph_t g = NULL;
    *exec = NULL;
    if (graph) *graph = NULL;
    why[0] = '\0';
    if (cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
        snprintf(why, why_cap, "stream capture could not begin");
    } else {
        lb_status st = body(ctx, s, &e);
        cudaError_t ce = cudaStreamEndCapture(s, &g);
        if (st != LB_OK)
            snprintf(why, why_cap, "%s", e.msg);
        else if (ce != cudaSuccess)
            snprintf(why, why_cap, "%s", cudaGetErrorString(ce));
    }
    if (why[0] == '\0') {
        /* a failure leaves a valid graph, with the rest of them as memsets */
        int replaced = 0;
        lb_gpu_graph_memsets_to_kernels(g, LB_GPU_GRAPH_FILL_MAX_BYTES, &replaced, &e);
        if (cudaGraphInstantiate(exec, g, 0) != cudaSuccess) {
            *exec = NULL;
            snprintf(why, why_cap, "the graph could not be instantiated");
        }
    }
    const bool ok = why[0] == '\0';
    if (ok && graph != NULL)
        *graph = g;
    else if (g)
        cudaGraphDestroy(g);
    if (!ok) cudaGetLastError();
    return ok;
}
