/* check.h: one family of check macros for CUDA, cuBLAS(Lt) and NCCL calls.
 *
 * Every call into a GPU library goes through LB_CHECK_GEN (ggml's CUDA_CHECK_GEN idea):
 * on failure it writes one sentence naming the library, its error string and code, the
 * expression as written, the enclosing function, file and line into the caller's lb_err,
 * and returns from the enclosing function with LB_ERR_DEVICE (LB_ERR_NOMEM for an
 * allocation failure). Kernel launches are checked with LB_CUDA_LAUNCH_TRY right after the
 * launch. The header compiles in C and in CUDA C++; it is only usable where the CUDA
 * headers are (LB_HAVE_CUDA builds). It does not synchronise: an asynchronous kernel fault
 * surfaces at the next checked call. */
#ifndef LB_GPU_CHECK_H
#define LB_GPU_CHECK_H

#ifdef __cplusplus
extern "C" {
#endif

#include "core/status.h"

/* Writes the sentence described above into err and returns the status for lib/code. */
lb_status lb_gpu_fail_at(lb_err *err, const char *lib, int code, const char *what, const char *expr,
                         const char *func, const char *file, int line);

#ifdef __cplusplus
}
#endif

#define LB_CHECK_GEN(err, expr, type, ok, what_fn, lib)                                            \
    do {                                                                                           \
        type lb_chk_ = (expr);                                                                     \
        if (lb_chk_ != (ok))                                                                       \
            return lb_gpu_fail_at((err), (lib), (int)lb_chk_, what_fn(lb_chk_), #expr, __func__,   \
                                  __FILE__, __LINE__);                                             \
    } while (0)

#define LB_CUDA_TRY(err, expr)                                                                     \
    LB_CHECK_GEN(err, expr, cudaError_t, cudaSuccess, cudaGetErrorString, "CUDA")
#define LB_CUBLAS_TRY(err, expr)                                                                   \
    LB_CHECK_GEN(err, expr, cublasStatus_t, CUBLAS_STATUS_SUCCESS, cublasLtGetStatusString,        \
                 "cuBLASLt")
#define LB_NCCL_TRY(err, expr)                                                                     \
    LB_CHECK_GEN(err, expr, ncclResult_t, ncclSuccess, ncclGetErrorString, "NCCL")
/* After a kernel launch: a bad configuration shows here, a fault at the next sync. */
#define LB_CUDA_LAUNCH_TRY(err) LB_CUDA_TRY(err, cudaGetLastError())

#endif
