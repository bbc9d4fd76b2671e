/* logits.cu: row gathering (launched programmatically dependent on the kernel before it,
 * gpu/common.cuh) and greedy choice (logits.cuh). The argmax is one block per
 * row: each thread keeps its best (value, index) over 16-byte loads, four in flight (where
 * the row is 16-byte aligned), a shared-memory tree keeps the larger value, the smaller
 * index on ties. */
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

static __global__ void argmax_rows_kernel(int32_t *out, const float *logits, int V) {
    __shared__ float sv[ARGMAX_THREADS];
    __shared__ int si[ARGMAX_THREADS];
    const float *row = logits + (int64_t)blockIdx.x * V;
    float best = -INFINITY;
    int bi = V;
    const int V4 = V % 4 == 0 && (uintptr_t)row % 16 == 0 ? V / 4 : 0;
#pragma unroll 4
    for (int c = threadIdx.x; c < V4; c += blockDim.x) {
        const float4 q = __ldg((const float4 *)row + c);
        const float e[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int j = 0; j < 4; j++)
            if (bi == V || e[j] > best) {
                best = e[j];
                bi = 4 * c + j;
            }
    }
    for (int v = 4 * V4 + threadIdx.x; v < V; v += blockDim.x)
        if (bi == V || row[v] > best) {
            best = row[v];
            bi = v;
        }
    sv[threadIdx.x] = best;
    si[threadIdx.x] = bi;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
        if (threadIdx.x < w) {
            float ov = sv[threadIdx.x + w];
            int oi = si[threadIdx.x + w];
            if (oi < V && (si[threadIdx.x] == V || ov > sv[threadIdx.x] ||
                           (ov == sv[threadIdx.x] && oi < si[threadIdx.x]))) {
                sv[threadIdx.x] = ov;
                si[threadIdx.x] = oi;
            }
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = si[0];
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
                                      cudaStream_t s, lb_err *err) {
    if (n == 0) return LB_OK;
    argmax_rows_kernel<<<n, ARGMAX_THREADS, 0, s>>>(out, logits, V);
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}
