/* gemv.cuh: products of a few rows against a weight matrix that is read once, the
 * products of a decode step at small batches (C-callable):
 * y[m, n] = sum_k x[m, k] W[n, k] (+ res[m, n]) for m < M, n < OC, with x [M, K], W
 * [OC, K] and res [M, OC] row-major of one type, y of type y_type, fp32 sums.
 *
 * A warp (or `split` warps, each taking every split-th stretch of K) computes one output
 * column n for all M rows: it streams W's row n in 16-byte loads, eight a lane (under
 * SwiGLU four of each of two rows) in two halves, each loaded again as soon as it is
 * summed (so loads are in flight while the other half is summed), and takes x's rows from
 * L1 (or shared memory); the lanes' sums meet by shuffles, the warps' through shared
 * memory. Two neighbours of the product can run inside it:
 * - RMSNorm of x's rows first (norm_w, eps: kernels/norm.cuh's forward, its output
 *   rounded to the inputs' type as that kernel's is): every block normalises the M rows
 *   into shared memory (M * K elements, at most LB_GEMV_NORM_BYTES);
 * - SwiGLU after (swiglu): W's OC rows are the gate's OC/2 then the up projection's, and
 *   y [M, OC/2] is silu(gate) * up of the two products, each rounded to the inputs' type
 *   first (as kernels/act.cuh's SwiGLU reads them);
 * - the KV store after (kv, y the qkv rows of a layer, y's type): as kernels/paged.cuh's
 *   lb_paged_kv_store with a RoPE table, q and k rotated in y and k and v stored in the
 *   cache, for the first kv->rows rows (the others are y only, unrotated). A block's
 *   columns are then pairs of a rotation (dimensions d and d + HD/2 of a head), so that
 *   it rotates them itself; at least two columns a block (a split of 1, 2 or 4).
 * The kernel is launched programmatically dependent on the one before it
 * (gpu/common.cuh): it reads its first half of weights while that one finishes and the
 * second right after it ends, while x's rows come.
 * The bound is the weights' bytes over the memory bandwidth, where cuBLASLt's kernels at
 * a handful of rows reach less of it (bench/engine_probe measures both; the engine times
 * both, and each split, per product and keeps the fastest). Not here: more than
 * LB_GEMV_MAX_ROWS rows, K not a multiple of 256, pointers not 16-byte aligned
 * (lb_gemv_fits says which). */
#ifndef LB_KERNELS_GEMV_CUH
#define LB_KERNELS_GEMV_CUH

#include <cuda_runtime.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "core/status.h"
#include "gpu/dtype.h"

#define LB_GEMV_MAX_ROWS   8
#define LB_GEMV_NORM_BYTES 40960 /* with the kernel's own, under 48 KiB a block */

/* Where lb_gemv stores k and v (the kv option). */
typedef struct {
    void *k_cache, *v_cache;   /* [slots, n_kv_head, head_dim] of the inputs' type */
    const float *cs;           /* the RoPE table (kernels/rope.cuh's) */
    const int32_t *pos, *slot; /* [rows]: each row's position and cache slot */
    int rows;                  /* rows stored, at most M */
    int n_head, n_kv_head, head_dim;
} lb_gemv_kv;

/* How lb_gemv runs a product; NULL: one warp a column, nothing fused. */
typedef struct {
    int split;            /* warps that share a column: 1, 2, 4 or 8 */
    const void *norm_w;   /* not NULL: x's rows RMS-normalised with these [K] weights first */
    float eps;            /* the norm's epsilon */
    bool swiglu;          /* y [M, OC/2] = silu(gate) * up of W's two halves (no res) */
    const lb_gemv_kv *kv; /* not NULL: RoPE and the KV store after (y in the inputs' type) */
} lb_gemv_opts;

/* Whether lb_gemv runs this problem. */
bool lb_gemv_fits(int M, int64_t K, int64_t OC, const void *x, const void *w, const void *res,
                  lb_gpu_dtype dt, const lb_gemv_opts *o);

/* y = x W^T (+ res) as above, with o's fusions; res may be NULL, and may not be y.
 * LB_ERR_UNSUPPORTED where lb_gemv_fits says no. */
lb_status lb_gemv(void *y, lb_gpu_dtype y_type, const void *x, const void *w, const void *res,
                  int M, int64_t K, int64_t OC, const lb_gemv_opts *o, lb_gpu_dtype dt,
                  cudaStream_t s, lb_err *err);

#ifdef __cplusplus
}
#endif

#endif
