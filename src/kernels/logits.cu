/* logits.cu: row gathering and greedy choice (logits.cuh), both launched programmatically
 * dependent on the kernel before them (gpu/common.cuh). The argmax is one block per row,
 * or with scratch for a few rows LB_ARGMAX_PARTS blocks per row: each thread keeps its best
 * (value, index) over 16-byte loads (where the row is 16-byte aligned), a shared-memory
 * tree keeps the larger value, the smaller index on ties; the parts' bests go to the
 * scratch, and the last part of a row to finish (a counter per row, left at zero again)
 * takes the best of them the same way. */
#include "gpu/common.cuh"
#include "kernels/logits.cuh"

template <typename T>
static __global__ void gather_rows_kernel(T *out, const T *in, const int32_t *idx, int n, int C) {
    const int64_t total = (int64_t)n * C;
    lb_pdl_trigger();
    lb_pdl_wait();
    for (int64_t x = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; x < total;
         x += (int64_t)gridDim.x * blockDim.x)
        out[x] = in[(int64_t)idx[x / C] * C + x % C];
}

#define ARGMAX_THREADS 512

/* The better of (v, i) and (ov, oi) into (v, i): the larger value, the smaller index on
 * ties; index V is none. A NaN is below every number (-inf too), as lb_sample_argmax
 * has it: chosen only from a row of NaNs, the first then. */
static __device__ __forceinline__ void argmax_keep(float &v, int &i, float ov, int oi, int V) {
    const bool on = isnan(ov), vn = isnan(v);
    const bool better = on == vn ? ov > v || ((ov == v || on) && oi < i) : vn;
    if (oi < V && (i == V || better)) v = ov, i = oi;
}

/* The block's best of its threads' (best, bi) into (sv[0], si[0]). */
static __device__ void argmax_block(float *sv, int *si, float best, int bi, int V) {
    sv[threadIdx.x] = best;
    si[threadIdx.x] = bi;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
        if (threadIdx.x < w) {
            float v = sv[threadIdx.x];
            int i = si[threadIdx.x];
            argmax_keep(v, i, sv[threadIdx.x + w], si[threadIdx.x + w], V);
            sv[threadIdx.x] = v, si[threadIdx.x] = i;
        }
        __syncthreads();
    }
}

/* Block (part, row) of gridDim.x parts: the best of the row's part-th stretch (whole
 * float4s where the row is 16-byte aligned, the rest in the last part); with one part,
 * the row's into out, else into the scratch (pv, pi), and the part that counts itself
 * last there (cnt, left at zero again) writes the best of the parts. */
static __global__ void argmax_rows_kernel(int32_t *out, const float *logits, int V, float *pv,
                                          int *pi, int *cnt) {
    __shared__ float sv[ARGMAX_THREADS];
    __shared__ int si[ARGMAX_THREADS];
    __shared__ bool last;
    const int row_i = blockIdx.y, parts = gridDim.x, part = blockIdx.x;
    const float *row = logits + (int64_t)row_i * V;
    lb_pdl_trigger();
    lb_pdl_wait();
    float best = -INFINITY;
    int bi = V;
    const int V4 = V % 4 == 0 && (uintptr_t)row % 16 == 0 ? V / 4 : 0;
    const int per = (V4 + parts - 1) / parts, c0 = part * per, c1 = min(V4, c0 + per);
#pragma unroll 4
    for (int c = c0 + threadIdx.x; c < c1; c += blockDim.x) {
        const float4 q = __ldcg((const float4 *)row + c);
        const float e[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int j = 0; j < 4; j++)
            argmax_keep(best, bi, e[j], 4 * c + j, V);
    }
    if (part == parts - 1)
        for (int v = 4 * V4 + threadIdx.x; v < V; v += blockDim.x)
            argmax_keep(best, bi, row[v], v, V);
    argmax_block(sv, si, best, bi, V);
    if (parts == 1) {
        if (threadIdx.x == 0) out[row_i] = si[0];
        return;
    }
    if (threadIdx.x == 0) {
        pv[row_i * parts + part] = sv[0];
        pi[row_i * parts + part] = si[0];
        __threadfence(); /* this part's best visible before the count says so */
        last = atomicAdd(cnt + row_i, 1) == parts - 1;
        if (last) cnt[row_i] = 0;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    best = -INFINITY, bi = V;
    for (int p = threadIdx.x; p < parts; p += blockDim.x)
        argmax_keep(best, bi, __ldcg(pv + row_i * parts + p), __ldcg(pi + row_i * parts + p), V);
    argmax_block(sv, si, best, bi, V);
    if (threadIdx.x == 0) out[row_i] = si[0];
}

extern "C" lb_status lb_logits_gather_rows(void *out, const void *in, const int32_t *idx, int n,
                                           int C, lb_gpu_dtype dt, cudaStream_t s, lb_err *err) {
    if (n == 0) return LB_OK;
    LB_DISPATCH_DTYPE(dt, E,
                      lb_launch_pdl(gather_rows_kernel<E>, lb_grid_cap((int64_t)n * C, 256), 256, 0,
                                    s, (E *)out, (const E *)in, idx, n, C));
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}

extern "C" lb_status lb_logits_argmax(int32_t *out, const float *logits, int n, int V,
                                      void *scratch, cudaStream_t s, lb_err *err) {
    if (n == 0) return LB_OK;
    const bool split = scratch != NULL && n <= LB_ARGMAX_SPLIT_ROWS;
    int *cnt = (int *)scratch;
    float *pv = split ? (float *)(cnt + LB_ARGMAX_SPLIT_ROWS) : NULL;
    int *pi = split ? (int *)(pv + LB_ARGMAX_SPLIT_ROWS * LB_ARGMAX_PARTS) : NULL;
    lb_launch_pdl(argmax_rows_kernel, dim3(split ? LB_ARGMAX_PARTS : 1, (unsigned)n),
                  ARGMAX_THREADS, 0, s, out, logits, V, pv, pi, cnt);
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}
