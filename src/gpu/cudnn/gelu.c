/* gelu.c: gpu/cudnn/gelu.h. One graph: a product, a bias addition and the GELU, the
 * pre-activation a second output taken from a virtual fp32 tensor (cuDNN's runtime fusion
 * writes it beside the GELU in the same epilogue). Tensors are 3-d [1, rows, columns], the
 * shape cuDNN's matmul fusions take. */
#ifdef LB_HAVE_CUDA

#include "gpu/cudnn/gelu.h"

#ifndef LB_HAVE_CUDNN

lb_status lb_cudnn_gelu_init(lb_cudnn_gelu **out, int64_t m, int64_t n, int64_t k, int64_t lda,
                             bool cols, lb_gpu_dtype dt, lb_err *err) {
    *out = NULL;
    return lb_fail(err, LB_ERR_UNSUPPORTED, "this build has no cuDNN headers");
}
void lb_cudnn_gelu_free(lb_cudnn_gelu *g) {}
size_t lb_cudnn_gelu_workspace_bytes(const lb_cudnn_gelu *g) {
    return 0;
}
lb_status lb_cudnn_gelu_forward(lb_cudnn_gelu *g, void *d, void *aux, const void *a, const void *b,
                                const void *bias, void *workspace, cudaStream_t s, lb_err *err) {
    return lb_fail(err, LB_ERR_UNSUPPORTED, "this build has no cuDNN headers");
}

#else

#include <stdlib.h>

#include "gpu/cudnn/graph.h"

enum { UID_A = 1, UID_B, UID_BIAS, UID_AUX, UID_D };

/* plans kept for the first run's timing: cuDNN's first choice is not its fastest here */
#define GELU_PLANS 8

struct lb_cudnn_gelu {
    cudnnHandle_t handle;
    lb_cudnn_plans plans;
};

lb_status lb_cudnn_gelu_init(lb_cudnn_gelu **out, int64_t m, int64_t n, int64_t k, int64_t lda,
                             bool cols, lb_gpu_dtype dt, lb_err *err) {
    *out = NULL;
    LB_TRY(lb_cudnn_load(err));
    if (dt != LB_DT_BF16 && dt != LB_DT_F16)
        return lb_fail(err, LB_ERR_UNSUPPORTED, "cuDNN's GELU product runs fp16 and bf16 only");
    lb_cudnn_gelu *p = calloc(1, sizeof *p);
    if (p == NULL) return lb_fail(err, LB_ERR_NOMEM, "no host memory for cuDNN's GELU product");
    cudnnStatus_t s = lb_cudnn.create(&p->handle);
    if (s != CUDNN_STATUS_SUCCESS) {
        free(p);
        return lb_fail(err, LB_ERR_UNSUPPORTED, "cuDNN could not start: %s (%d)",
                       lb_cudnn.error_string(s), (int)s);
    }
    cudnnDataType_t t = lb_cudnn_type(dt), f = CUDNN_DATA_FLOAT;
    lb_cudnn_graph g = {.next_virtual = LB_CUDNN_UID_VIRTUAL, .err = err};
    lb_cudnn_desc a = lb_cudnn_matrix(&g, UID_A, t, m, k, lda, 1, 0);
    lb_cudnn_desc b = lb_cudnn_matrix(&g, UID_B, t, k, n, 1, k, 0); /* B [n,k] read as [k,n] */
    lb_cudnn_desc bias = lb_cudnn_matrix(&g, UID_BIAS, t, 1, n, n, 1, 0);
    lb_cudnn_desc prod = lb_cudnn_matrix(&g, 0, f, m, n, n, 1, LB_CUDNN_VIRTUAL);
    lb_cudnn_desc pre = lb_cudnn_matrix(&g, 0, f, m, n, n, 1, LB_CUDNN_VIRTUAL);
    int64_t rs = cols ? 1 : n, cs = cols ? m : 1; /* the outputs' strides */
    lb_cudnn_desc aux = lb_cudnn_matrix(&g, UID_AUX, t, m, n, rs, cs, 0),
                  d = lb_cudnn_matrix(&g, UID_D, t, m, n, rs, cs, 0);
    lb_cudnn_matmul(&g, a, b, prod);
    lb_cudnn_fp32_op(&g, CUDNN_POINTWISE_ADD, prod, bias, pre);
    lb_cudnn_fp32_op(&g, CUDNN_POINTWISE_IDENTITY, pre, NULL, aux);
    lb_cudnn_fp32_op(&g, CUDNN_POINTWISE_GELU_APPROX_TANH_FWD, pre, NULL, d);
    lb_status st = g.st == LB_OK ? lb_cudnn_plans_build(&g, p->handle, GELU_PLANS,
                                                        "GELU product graph", &p->plans)
                                 : g.st;
    lb_cudnn_graph_free(&g);
    if (st != LB_OK) {
        lb_cudnn_gelu_free(p);
        return st;
    }
    *out = p;
    return LB_OK;
}

void lb_cudnn_gelu_free(lb_cudnn_gelu *g) {
    if (g == NULL) return;
    lb_cudnn_plans_free(&g->plans);
    if (g->handle) lb_cudnn.destroy(g->handle);
    free(g);
}

size_t lb_cudnn_gelu_workspace_bytes(const lb_cudnn_gelu *g) {
    return lb_cudnn_plans_workspace_bytes(&g->plans);
}

lb_status lb_cudnn_gelu_forward(lb_cudnn_gelu *g, void *d, void *aux, const void *a, const void *b,
                                const void *bias, void *workspace, cudaStream_t s, lb_err *err) {
    const int64_t uids[] = {UID_A, UID_B, UID_BIAS, UID_AUX, UID_D};
    void *ptrs[] = {(void *)a, (void *)b, (void *)bias, aux, d};
    return lb_cudnn_plans_run(&g->plans, g->handle, 5, uids, ptrs, workspace, s, err);
}

#endif /* LB_HAVE_CUDNN */
#endif /* LB_HAVE_CUDA */
