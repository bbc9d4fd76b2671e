/* embed.cu: embedding kernels (embed.cuh). One thread per output element (eight in the
 * forward when rows allow 16-byte accesses); the gather is coalesced along C. The sorted
 * backward orders rows by token with CUB's stable radix sort. */
/* no NVTX ranges from CUB: they would add NVTX's symbols to the library */
#define CCCL_DISABLE_NVTX
#include <cub/device/device_radix_sort.cuh>

#include "gpu/common.cuh"
#include "kernels/embed.cuh"

template <typename T>
static __global__ void embed_forward_kernel(T *out, const int32_t *inp, const T *wte, const T *wpe,
                                            int T_, int C, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t bt = i / C;
        int c = (int)(i % C);
        int t = (int)(bt % T_);
        float v = lb_to_f(wte[(int64_t)inp[bt] * C + c]);
        if (wpe) v += lb_to_f(wpe[(int64_t)t * C + c]);
        out[i] = lb_from_f<T>(v);
    }
}

/* Eight channels a step with 16-byte accesses (C a multiple of 8, every row 16-byte
 * aligned): the scalar kernel's per-element index arithmetic held it at a quarter of the
 * memory rate. */
template <typename T>
static __global__ void embed_forward_vec_kernel(T *out, const int32_t *inp, const T *wte,
                                                const T *wpe, int T_, int C, int64_t n8) {
    int c8 = C / 8;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n8;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t bt = i / c8;
        int c = (int)(i % c8) * 8;
        float v[8], p[8];
        lb_ld8(v, wte + (int64_t)inp[bt] * C + c);
        if (wpe) {
            lb_ld8(p, wpe + (int64_t)(bt % T_) * C + c);
#pragma unroll
            for (int k = 0; k < 8; k++)
                v[k] += p[k];
        }
        lb_st8(out + bt * C + c, v);
    }
}

/* dwpe[i - lo] += scale x the sum over the batch of dout at (t, c) = i, for i in [lo, hi),
 * in batch order (dwpe of type G, the sum in fp32). */
template <typename T, typename G>
static __global__ void embed_backward_wpe_kernel(G *dwpe, const T *dout, int B, int T_, int C,
                                                 float scale, int64_t lo, int64_t hi) {
    int64_t i = lo + blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= hi) return;
    float acc = 0.0f;
    for (int b = 0; b < B; b++)
        acc += lb_to_f(dout[(int64_t)b * T_ * C + i]);
    dwpe[i - lo] = lb_from_f<G>(lb_to_f(dwpe[i - lo]) + scale * acc);
}

/* One block a sorted position: the first position of each token sums that token's rows in
 * sorted order (column by column) into dwte's row, within [lo, hi); the others return. */
template <typename T, typename G>
static __global__ void embed_backward_sorted_kernel(G *dwte, const T *dout, const int32_t *keys,
                                                    const int32_t *rows, int n, int C, float scale,
                                                    int64_t lo, int64_t hi) {
    int i = blockIdx.x;
    int32_t key = keys[i];
    if (i > 0 && keys[i - 1] == key) return;
    int64_t row = (int64_t)key * C;
    if (row + C <= lo || row >= hi) return;
    int end = i + 1;
    while (end < n && keys[end] == key)
        end++;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        int64_t e = row + c;
        if (e < lo || e >= hi) continue;
        float acc = 0.0f;
        /* unrolled, the loads of several rows are in flight at once; the sum keeps its order */
#pragma unroll 8
        for (int j = i; j < end; j++)
            acc += lb_to_f(dout[(int64_t)rows[j] * C + c]);
        dwte[e - lo] = lb_from_f<G>(lb_to_f(dwte[e - lo]) + scale * acc);
    }
}

static __global__ void iota_kernel(int32_t *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = i;
}

extern "C" lb_status lb_embed_forward(void *out, const int32_t *inp, const void *wte,
                                      const void *wpe, int B, int T, int C, lb_gpu_dtype dt,
                                      cudaStream_t s, lb_err *err) {
    int64_t n = (int64_t)B * T * C;
    if (C % 8 == 0 && ((uintptr_t)out | (uintptr_t)wte | (uintptr_t)wpe) % 16 == 0) {
        LB_DISPATCH_DTYPE(dt, E,
                          embed_forward_vec_kernel<E><<<lb_grid_cap(n / 8, 256), 256, 0, s>>>(
                              (E *)out, inp, (const E *)wte, (const E *)wpe, T, C, n / 8));
    } else {
        LB_DISPATCH_DTYPE(dt, E,
                          embed_forward_kernel<E><<<lb_grid_cap(n, 256), 256, 0, s>>>(
                              (E *)out, inp, (const E *)wte, (const E *)wpe, T, C, n));
    }
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}

/* The row indices' bytes before CUB's scratch, kept 256-byte aligned. */
static size_t index_bytes(int n) {
    return ((size_t)n * sizeof(int32_t) + 255) / 256 * 256;
}

/* Bits that hold every id below V. */
static int id_bits(int V) {
    int bits = 1;
    while (bits < 31 && (1 << bits) < V)
        bits++;
    return bits;
}

extern "C" size_t lb_embed_sort_bytes(int n, int V) {
    size_t bytes = 0;
    cub::DeviceRadixSort::SortPairs(NULL, bytes, (const uint32_t *)NULL, (uint32_t *)NULL,
                                    (const int32_t *)NULL, (int32_t *)NULL, n, 0, id_bits(V));
    return bytes + index_bytes(n);
}

extern "C" lb_status lb_embed_sort_ids(int32_t *keys, int32_t *rows, const int32_t *ids, int n,
                                       int V, void *tmp, size_t tmp_bytes, cudaStream_t s,
                                       lb_err *err) {
    int32_t *index = (int32_t *)tmp;
    size_t sort_bytes = tmp_bytes - index_bytes(n);
    void *sort_tmp = (char *)tmp + index_bytes(n);
    iota_kernel<<<lb_blocks(n, 256), 256, 0, s>>>(index, n);
    LB_CUDA_LAUNCH_TRY(err);
    /* ids are below V: as unsigned keys of id_bits(V) bits they sort as they compare */
    LB_CUDA_TRY(err, cub::DeviceRadixSort::SortPairs(sort_tmp, sort_bytes, (const uint32_t *)ids,
                                                     (uint32_t *)keys, index, rows, n, 0,
                                                     id_bits(V), s));
    return LB_OK;
}

extern "C" lb_status lb_embed_backward_sorted(void *dwte, int64_t wte_lo, int64_t wte_hi,
                                              void *dwpe, int64_t wpe_lo, int64_t wpe_hi,
                                              const void *dout, const int32_t *keys,
                                              const int32_t *rows, int B, int T, int C, float scale,
                                              lb_gpu_dtype dt, lb_gpu_dtype dt_grad, cudaStream_t s,
                                              lb_err *err) {
    int n = B * T;
    if (wte_lo < wte_hi) {
        LB_DISPATCH_DTYPE(dt, E,
                          LB_DISPATCH_DTYPE(dt_grad, G,
                                            embed_backward_sorted_kernel<E, G>
                                            <<<n, 256, 0, s>>>((G *)dwte, (const E *)dout, keys,
                                                               rows, n, C, scale, wte_lo, wte_hi)));
        LB_CUDA_LAUNCH_TRY(err);
    }
    if (dwpe != NULL && wpe_lo < wpe_hi) {
        LB_DISPATCH_DTYPE(
            dt, E,
            LB_DISPATCH_DTYPE(dt_grad, G,
                              embed_backward_wpe_kernel<E, G>
                              <<<lb_blocks(wpe_hi - wpe_lo, 256), 256, 0, s>>>(
                                  (G *)dwpe, (const E *)dout, B, T, C, scale, wpe_lo, wpe_hi)));
        LB_CUDA_LAUNCH_TRY(err);
    }
    return LB_OK;
}
