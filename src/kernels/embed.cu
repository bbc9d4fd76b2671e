/* embed.cu: embedding kernels (embed.cuh). One thread per output element (eight in the
 * forward when rows allow 16-byte accesses); the gather is coalesced along C. */
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

template <typename T>
static __global__ void embed_backward_wte_kernel(float *dwte, const T *dout, const int32_t *inp,
                                                 int C, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t bt = i / C;
        int c = (int)(i % C);
        atomicAdd(&dwte[(int64_t)inp[bt] * C + c], lb_to_f(dout[i]));
    }
}

template <typename T>
static __global__ void embed_backward_wpe_kernel(float *dwpe, const T *dout, int B, int T_, int C) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= (int64_t)T_ * C) return;
    float acc = 0.0f;
    for (int b = 0; b < B; b++)
        acc += lb_to_f(dout[(int64_t)b * T_ * C + i]);
    dwpe[i] += acc;
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

extern "C" lb_status lb_embed_backward(float *dwte, float *dwpe, const void *dout,
                                       const int32_t *inp, int B, int T, int C, lb_gpu_dtype dt,
                                       cudaStream_t s, lb_err *err) {
    int64_t n = (int64_t)B * T * C;
    LB_DISPATCH_DTYPE(dt, E,
                      embed_backward_wte_kernel<E>
                      <<<lb_grid_cap(n, 256), 256, 0, s>>>(dwte, (const E *)dout, inp, C, n));
    LB_CUDA_LAUNCH_TRY(err);
    if (dwpe != NULL) {
        LB_DISPATCH_DTYPE(
            dt, E,
            embed_backward_wpe_kernel<E>
            <<<lb_blocks((int64_t)T * C, 256), 256, 0, s>>>(dwpe, (const E *)dout, B, T, C));
        LB_CUDA_LAUNCH_TRY(err);
    }
    return LB_OK;
}
