/* rope.cu: RoPE kernels (rope.cuh). The angles t * inv_freq are formed once per model in
 * fp32 and their sine and cosine taken with the accurate (range-reduced) functions, since
 * angles reach thousands of radians at long positions; the rotation kernels read that
 * table. Head sizes that are multiples of 16 rotate eight pairs per thread with 16-byte
 * accesses; others one pair per thread. */
#include "gpu/common.cuh"
#include "kernels/rope.cuh"

static __global__ void rope_table_kernel(float *cs, const float *inv_freq, int T_, int half) {
    int64_t n = (int64_t)T_ * half;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float sn, c;
        sincosf((float)(i / half) * inv_freq[i % half], &sn, &c);
        cs[2 * i] = c;
        cs[2 * i + 1] = sn;
    }
}

/* One pair per thread. */
template <typename T>
static __global__ void rope_kernel(T *qkv, const float *cs, int64_t BT, int T_, int NH, int NKV,
                                   int HD, float sign) {
    int half = HD / 2, heads = NH + NKV; /* rotated heads: q then k */
    int64_t n = BT * heads * half;
    int width = (NH + 2 * NKV) * HD;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int j = (int)(i % half);
        int64_t r = i / half;
        int h = (int)(r % heads);
        int64_t bt = r / heads;
        const float *e = cs + 2 * ((bt % T_) * half + j);
        float c = e[0], sn = sign * e[1];
        T *x = qkv + bt * width + (int64_t)h * HD;
        float a = lb_to_f(x[j]), b = lb_to_f(x[j + half]);
        x[j] = lb_from_f<T>(a * c - b * sn);
        x[j + half] = lb_from_f<T>(b * c + a * sn);
    }
}

/* Eight pairs per thread (HD a multiple of 16). */
template <typename T>
static __global__ void rope_vec_kernel(T *qkv, const float *cs, int64_t BT, int T_, int NH, int NKV,
                                       int HD, float sign) {
    int half = HD / 2, per_head = half / 8, heads = NH + NKV;
    int64_t n = BT * heads * per_head;
    int width = (NH + 2 * NKV) * HD;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int j = (int)(i % per_head) * 8;
        int64_t r = i / per_head;
        int h = (int)(r % heads);
        int64_t bt = r / heads;
        const float4 *e = (const float4 *)(cs + 2 * ((bt % T_) * half + j));
        T *x = qkv + bt * width + (int64_t)h * HD;
        float a[8], b[8], oa[8], ob[8];
        lb_ld8(a, x + j);
        lb_ld8(b, x + j + half);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            float4 v = e[k]; /* cos, sin of pair 2k, then of pair 2k + 1 */
            float s0 = sign * v.y, s1 = sign * v.w;
            oa[2 * k] = a[2 * k] * v.x - b[2 * k] * s0;
            ob[2 * k] = b[2 * k] * v.x + a[2 * k] * s0;
            oa[2 * k + 1] = a[2 * k + 1] * v.z - b[2 * k + 1] * s1;
            ob[2 * k + 1] = b[2 * k + 1] * v.z + a[2 * k + 1] * s1;
        }
        lb_st8(x + j, oa);
        lb_st8(x + j + half, ob);
    }
}

extern "C" lb_status lb_rope_table(float *cs, const float *inv_freq, int T, int HD, cudaStream_t s,
                                   lb_err *err) {
    rope_table_kernel<<<lb_grid_cap((int64_t)T * (HD / 2), 256), 256, 0, s>>>(cs, inv_freq, T,
                                                                              HD / 2);
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}

static lb_status launch(void *qkv, const float *cs, int B, int T, int NH, int NKV, int HD,
                        lb_gpu_dtype dt, float sign, cudaStream_t s, lb_err *err) {
    int64_t pairs = (int64_t)B * T * (NH + NKV) * (HD / 2);
    if (HD % 16 == 0) {
        LB_DISPATCH_DTYPE(dt, E,
                          rope_vec_kernel<E><<<lb_grid_cap(pairs / 8, 256), 256, 0, s>>>(
                              (E *)qkv, cs, (int64_t)B * T, T, NH, NKV, HD, sign));
    } else {
        LB_DISPATCH_DTYPE(dt, E,
                          rope_kernel<E><<<lb_grid_cap(pairs, 256), 256, 0, s>>>(
                              (E *)qkv, cs, (int64_t)B * T, T, NH, NKV, HD, sign));
    }
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}

extern "C" lb_status lb_rope_forward(void *qkv, const float *cs, int B, int T, int NH, int NKV,
                                     int HD, lb_gpu_dtype dt, cudaStream_t s, lb_err *err) {
    return launch(qkv, cs, B, T, NH, NKV, HD, dt, 1.0f, s, err);
}

extern "C" lb_status lb_rope_backward(void *dqkv, const float *cs, int B, int T, int NH, int NKV,
                                      int HD, lb_gpu_dtype dt, cudaStream_t s, lb_err *err) {
    return launch(dqkv, cs, B, T, NH, NKV, HD, dt, -1.0f, s, err);
}
