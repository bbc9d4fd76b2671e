/* loss.cu: fused softmax cross-entropy (loss.cuh). One block per row, read once and
 * written once: each thread loads its 16-byte vectors i = tid, tid + blockDim, ... and
 * keeps the first RV of them in registers and the vectors beyond RV * blockDim in shared
 * memory (as many as two blocks an SM leave room for: all of a GPT-2 row, 50,257 bf16;
 * 61% of a Llama 3 row, 128,256, on an H100/H200, the rest read again, likely from L2).
 * Pass 1 keeps a running (max, sum of exp) over the vectors beyond (loaded before any is
 * held, so several are in flight), then over the held ones, merged across the block;
 * pass 2 writes the gradient over the logits from registers and shared memory, and zeros
 * in the padding columns [V, ld) so a product over the padded width sees no garbage.
 * RV comes from the row width: long rows run 512 threads x 8 vectors (two blocks an SM,
 * so one block's loads overlap the other's exp work; one block of 1,024 holding a whole
 * row was no faster, nor was one persistent block an SM streaming the next row into
 * shared memory while it worked on the current one).
 * The arithmetic is kept to one multiply-add and one exponential (base 2) an element a
 * pass: at GPT-2 16x1024 on the H200 the kernel was bound by it, not by memory (0.99 ms
 * against 0.78 ms for a copy of the same bytes; 0.87 ms with the leaner arithmetic, 0.82
 * with the vectors beyond kept in shared memory instead of read again). */
#include "gpu/common.cuh"
#include "kernels/loss.cuh"

#define XENT_THREADS 512

/* Elements per 16-byte vector. Rows start 16-byte aligned when ld is a multiple of 8. */
template <typename T> struct vec16 { static constexpr int N = 16 / sizeof(T); };

/* (m, sum) of exp(x - m) merged with (m2, s2) */
__device__ __forceinline__ void lse_merge(float &m, float &sum, float m2, float s2) {
    float mm = fmaxf(m, m2);
    if (mm == -INFINITY) return;
    sum = (m == -INFINITY ? 0.0f : sum * lb_exp2((m - mm) * LB_LOG2E)) +
          (m2 == -INFINITY ? 0.0f : s2 * lb_exp2((m2 - mm) * LB_LOG2E));
    m = mm;
}

/* The block's merged (m, sum), in every thread: one barrier. scratch holds 64 floats and
 * must not be written again before the caller's next barrier. */
__device__ __forceinline__ void block_lse(float &m, float &sum, float *scratch) {
    for (int o = 16; o > 0; o >>= 1)
        lse_merge(m, sum, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, sum, o));
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    if (lane == 0) scratch[warp] = m, scratch[32 + warp] = sum;
    __syncthreads();
    m = lane < nw ? scratch[lane] : -INFINITY;
    sum = lane < nw ? scratch[32 + lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1)
        lse_merge(m, sum, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, sum, o));
}

/* Folds vector raw into the running (m, sum) of exp(x - m): one multiply-add and one
 * exponential an element (base 2). */
template <typename T> __device__ __forceinline__ void xent_online(uint4 raw, float &m, float &sum) {
    const T *e = (const T *)&raw;
    float vmax = -INFINITY;
#pragma unroll
    for (int j = 0; j < vec16<T>::N; j++)
        vmax = fmaxf(vmax, lb_to_f(e[j]));
    if (vmax > m) {
        sum *= lb_exp2((m - vmax) * LB_LOG2E);
        m = vmax;
    }
    float ml = m * LB_LOG2E;
#pragma unroll
    for (int j = 0; j < vec16<T>::N; j++)
        sum += lb_exp2(fmaf(lb_to_f(e[j]), LB_LOG2E, -ml));
}

/* The gradient's constants for a row with merged (m, sum): softmax(x) * dloss =
 * 2^(x log2 e - c), and the target's element (softmax - 1) * dloss. */
struct xent_row {
    float c, dloss;
    int tgt;
    __device__ xent_row(float m, float sum, float dl, int t)
        : c(m * LB_LOG2E + log2f(sum) - log2f(dl)), dloss(dl), tgt(t) {}
    __device__ float q(float x) const {
        return lb_exp2(fmaf(x, LB_LOG2E, -c));
    } /* softmax * dloss */
    __device__ float grad(float x, int col) const { return col == tgt ? q(x) - dloss : q(x); }
};

/* Overwrites vector raw (columns c0..) with its gradient: one multiply-add and one
 * exponential an element; the target's column, in one vector of the row, is fixed after. */
template <typename T>
__device__ __forceinline__ void xent_grad(uint4 &raw, int c0, const xent_row &r) {
    T *e = (T *)&raw;
    float g[vec16<T>::N];
#pragma unroll
    for (int j = 0; j < vec16<T>::N; j++)
        g[j] = r.q(lb_to_f(e[j]));
    if (r.tgt - c0 >= 0 && r.tgt - c0 < vec16<T>::N)
#pragma unroll
        for (int j = 0; j < vec16<T>::N; j++)
            if (c0 + j == r.tgt) g[j] -= r.dloss;
#pragma unroll
    for (int j = 0; j < vec16<T>::N; j++)
        e[j] = lb_from_f<T>(g[j]);
}

template <typename T, int RV>
static __global__ void __launch_bounds__(XENT_THREADS, 2)
    xent_kernel(T *logits, float *losses, const int32_t *targets, int V, int64_t ld, float dloss,
                const float *dloss_scale, int write_grad, int vec, int kept) {
    constexpr int NV = vec16<T>::N;
    __shared__ float scratch[64];
    extern __shared__ uint4 beyond[]; /* [kept]: the vectors from RV * XENT_THREADS on */
    int64_t row = blockIdx.x;
    T *x = logits + row * ld;
    int nvec = vec ? V / NV : 0; /* whole vectors inside [0, V) */
    float m = -INFINITY, sum = 0.0f;
#pragma unroll 4
    for (int i = threadIdx.x + RV * XENT_THREADS; i < nvec; i += XENT_THREADS) {
        uint4 raw = *(const uint4 *)(x + (int64_t)i * NV);
        if (i - RV * XENT_THREADS < kept) beyond[i - RV * XENT_THREADS] = raw;
        xent_online<T>(raw, m, sum);
    }
    uint4 held[RV];
#pragma unroll
    for (int k = 0; k < RV; k++) {
        int i = threadIdx.x + k * XENT_THREADS;
        if (i < nvec) held[k] = *(const uint4 *)(x + (int64_t)i * NV);
    }
#pragma unroll
    for (int k = 0; k < RV; k++)
        if (threadIdx.x + k * XENT_THREADS < nvec) xent_online<T>(held[k], m, sum);
    for (int i = nvec * NV + threadIdx.x; i < V; i += XENT_THREADS)
        lse_merge(m, sum, lb_to_f(x[i]), 1.0f);
    int tgt = targets[row];
    float xt =
        lb_to_f(x[tgt]); /* before any thread overwrites it: the merge's barrier is between */
    block_lse(m, sum, scratch);
    if (threadIdx.x == 0) losses[row] = m + logf(sum) - xt;
    if (!write_grad) return;
    xent_row r(m, sum, dloss_scale ? dloss * *dloss_scale : dloss, tgt);
#pragma unroll
    for (int k = 0; k < RV; k++) {
        /* opaque to the compiler: no fp32 copies of the vector kept from pass 1 (bf16 spilled) */
        asm volatile("" : "+r"(held[k].x), "+r"(held[k].y), "+r"(held[k].z), "+r"(held[k].w));
        int i = threadIdx.x + k * XENT_THREADS;
        if (i < nvec) {
            xent_grad<T>(held[k], i * NV, r);
            *(uint4 *)(x + (int64_t)i * NV) = held[k];
        }
    }
#pragma unroll 4
    for (int i = threadIdx.x + RV * XENT_THREADS; i < nvec; i += XENT_THREADS) {
        int k = i - RV * XENT_THREADS;
        uint4 raw = k < kept ? beyond[k] : *(const uint4 *)(x + (int64_t)i * NV);
        xent_grad<T>(raw, i * NV, r);
        *(uint4 *)(x + (int64_t)i * NV) = raw;
    }
    for (int i = nvec * NV + threadIdx.x; i < V; i += XENT_THREADS)
        x[i] = lb_from_f<T>(r.grad(lb_to_f(x[i]), i));
    for (int64_t i = V + threadIdx.x; i < ld; i += XENT_THREADS)
        x[i] = lb_from_f<T>(0.0f);
}

static __global__ void mean_kernel(float *mean, const float *x, int64_t n) {
    __shared__ float scratch[32];
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        s += x[i];
    s = lb_block_sum(s, scratch);
    if (threadIdx.x == 0) *mean = s / (float)n;
}

/* Launches the kernel holding RV vectors a thread, with as many of the vectors beyond them
 * in shared memory as two blocks an SM leave room for. */
template <typename T, int RV>
static lb_status launch_xent(T *logits, float *losses, const int32_t *targets, int64_t N, int V,
                             int64_t ld, float dloss, const float *dloss_scale, int write_grad,
                             int vec, cudaStream_t s, lb_err *err) {
    int beyond = vec ? V / vec16<T>::N - RV * XENT_THREADS : 0;
    int kept = 0;
    if (beyond > 0) {
        int dev = 0, per_sm = 0;
        LB_CUDA_TRY(err, cudaGetDevice(&dev));
        LB_CUDA_TRY(
            err, cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
        int room = (per_sm / 2 - 2048) / 16; /* vectors: half an SM, less static and reserved */
        kept = beyond < room ? beyond : room > 0 ? room : 0;
        LB_CUDA_TRY(err,
                    cudaFuncSetAttribute(xent_kernel<T, RV>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, kept * 16));
    }
    xent_kernel<T, RV><<<(unsigned)N, XENT_THREADS, (size_t)kept * 16, s>>>(
        logits, losses, targets, V, ld, dloss, dloss_scale, write_grad, vec, kept);
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}

extern "C" lb_status lb_loss_softmax_xent(void *logits, float *losses, const int32_t *targets,
                                          int64_t N, int V, int64_t ld, float dloss,
                                          const float *dloss_scale, int dlogits_out,
                                          lb_gpu_dtype dt, cudaStream_t s, lb_err *err) {
    LB_DISPATCH_DTYPE(
        dt, E, int vec = (uintptr_t)logits % 16 == 0 && (ld * (int64_t)sizeof(E)) % 16 == 0;
        if (V / vec16<E>::N <= XENT_THREADS * 4) return launch_xent<E, 4>(
            (E *)logits, losses, targets, N, V, ld, dloss, dloss_scale, dlogits_out, vec, s, err);
        return launch_xent<E, 8>((E *)logits, losses, targets, N, V, ld, dloss, dloss_scale,
                                 dlogits_out, vec, s, err));
    return LB_OK;
}

extern "C" lb_status lb_loss_mean(float *mean, const float *x, int64_t n, cudaStream_t s,
                                  lb_err *err) {
    mean_kernel<<<1, 1024, 0, s>>>(mean, x, n);
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}
