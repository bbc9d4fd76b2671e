/* attention_scalar.cu: attention one row a thread (any storage type; HD 8, 16, 32, 128).
 *
 * The forward and dQ run one thread per query row, dK and dV one thread per key row, with
 * the other side's rows staged in shared memory; fp32 arithmetic. The head sizes the
 * tiled paths do not serve (they need HD 64) and the test models' small heads. With dbias
 * the bias gradient is a separate reduction over dqkv. */
#include "kernels/act.cuh"
#include "kernels/attention_impl.cuh"

#define SQ 64 /* queries (or keys) per block, one per thread */
#define SK 32 /* keys (or queries) staged in shared memory at a time */

template <typename T, int HD>
static __global__ void attn_fwd_scalar_kernel(T *out, float *lse, const T *qkv, int T_, int NH,
                                              int NKV) {
    __shared__ float sK[SK][HD], sV[SK][HD];
    int h = blockIdx.y, b = blockIdx.z, kvh = h / (NH / NKV);
    int64_t W = (int64_t)(NH + 2 * NKV) * HD;
    const T *base = qkv + (int64_t)b * T_ * W;
    int q0 = (gridDim.x - 1 - blockIdx.x) * SQ, qi = q0 + threadIdx.x;
    const float scale = rsqrtf((float)HD);
    float q[HD], acc[HD];
    float m = -INFINITY, l = 0.0f;
#pragma unroll
    for (int d = 0; d < HD; d++) {
        q[d] = qi < T_ ? lb_to_f(base[(int64_t)qi * W + h * HD + d]) * scale : 0.0f;
        acc[d] = 0.0f;
    }
    int kend = min(q0 + SQ, T_);
    for (int k0 = 0; k0 < kend; k0 += SK) {
        __syncthreads();
        for (int i = threadIdx.x; i < SK * HD; i += blockDim.x) {
            int r = i / HD, d = i % HD, key = k0 + r;
            sK[r][d] = key < T_ ? lb_to_f(base[(int64_t)key * W + (NH + kvh) * HD + d]) : 0.0f;
            sV[r][d] =
                key < T_ ? lb_to_f(base[(int64_t)key * W + (NH + NKV + kvh) * HD + d]) : 0.0f;
        }
        __syncthreads();
        if (qi >= T_) continue;
        for (int j = 0; j < SK && k0 + j <= qi; j++) {
            float s = 0.0f;
#pragma unroll
            for (int d = 0; d < HD; d++)
                s += q[d] * sK[j][d];
            if (s > m) {
                float c = __expf(m - s);
                l *= c;
#pragma unroll
                for (int d = 0; d < HD; d++)
                    acc[d] *= c;
                m = s;
            }
            float p = __expf(s - m);
            l += p;
#pragma unroll
            for (int d = 0; d < HD; d++)
                acc[d] += p * sV[j][d];
        }
    }
    if (qi >= T_) return;
    T *o = out + ((int64_t)b * T_ + qi) * NH * HD + h * HD;
#pragma unroll
    for (int d = 0; d < HD; d++)
        o[d] = lb_from_f<T>(acc[d] / l);
    lse[((int64_t)b * NH + h) * T_ + qi] = m + logf(l);
}

/* dK, dV: one thread per key; query rows of every head of the group staged in shared. */
template <typename T, int HD>
static __global__ void attn_bwd_kv_scalar_kernel(T *dqkv, const T *dout, const T *qkv,
                                                 const float *lse, const float *Dsum, int T_,
                                                 int NH, int NKV) {
    extern __shared__ float sh[];
    float *sk = sh, *sv = sk + SQ * (HD + 1); /* own rows, padded */
    float *sq = sv + SQ * (HD + 1), *sdo = sq + SK * HD, *sl = sdo + SK * HD, *sd = sl + SK;
    int kvh = blockIdx.y, b = blockIdx.z, G = NH / NKV;
    int64_t W = (int64_t)(NH + 2 * NKV) * HD, ldo = (int64_t)NH * HD;
    const T *base = qkv + (int64_t)b * T_ * W;
    int k0 = blockIdx.x * SQ, kj = k0 + threadIdx.x;
    const float scale = rsqrtf((float)HD);
    for (int d = 0; d < HD; d++) {
        sk[threadIdx.x * (HD + 1) + d] =
            kj < T_ ? lb_to_f(base[(int64_t)kj * W + (NH + kvh) * HD + d]) : 0.0f;
        sv[threadIdx.x * (HD + 1) + d] =
            kj < T_ ? lb_to_f(base[(int64_t)kj * W + (NH + NKV + kvh) * HD + d]) : 0.0f;
    }
    float dk[HD], dv[HD];
#pragma unroll
    for (int d = 0; d < HD; d++)
        dk[d] = dv[d] = 0.0f;
    const float *myk = sk + threadIdx.x * (HD + 1), *myv = sv + threadIdx.x * (HD + 1);
    for (int hh = 0; hh < G; hh++) {
        int h = kvh * G + hh;
        for (int qs = k0; qs < T_; qs += SK) {
            __syncthreads();
            for (int i = threadIdx.x; i < SK * HD; i += blockDim.x) {
                int r = i / HD, d = i % HD, q = qs + r;
                sq[i] = q < T_ ? lb_to_f(base[(int64_t)q * W + h * HD + d]) : 0.0f;
                sdo[i] = q < T_ ? lb_to_f(dout[((int64_t)b * T_ + q) * ldo + h * HD + d]) : 0.0f;
            }
            for (int i = threadIdx.x; i < SK; i += blockDim.x) {
                int q = qs + i;
                sl[i] = q < T_ ? lse[((int64_t)b * NH + h) * T_ + q] : INFINITY;
                sd[i] = q < T_ ? Dsum[((int64_t)b * NH + h) * T_ + q] : 0.0f;
            }
            __syncthreads();
            if (kj >= T_) continue;
            for (int r = 0; r < SK; r++) {
                if (qs + r < kj) continue;
                const float *qr = sq + r * HD, *dor = sdo + r * HD;
                float s = 0.0f, dp = 0.0f;
#pragma unroll
                for (int d = 0; d < HD; d++) {
                    s += qr[d] * myk[d];
                    dp += dor[d] * myv[d];
                }
                float p = __expf(s * scale - sl[r]);
                float ds = p * (dp - sd[r]) * scale;
#pragma unroll
                for (int d = 0; d < HD; d++) {
                    dv[d] += p * dor[d];
                    dk[d] += ds * qr[d];
                }
            }
        }
    }
    if (kj >= T_) return;
    T *row = dqkv + ((int64_t)b * T_ + kj) * W;
#pragma unroll
    for (int d = 0; d < HD; d++) {
        row[(NH + kvh) * HD + d] = lb_from_f<T>(dk[d]);
        row[(NH + NKV + kvh) * HD + d] = lb_from_f<T>(dv[d]);
    }
}

/* dQ: one thread per query. */
template <typename T, int HD>
static __global__ void attn_bwd_q_scalar_kernel(T *dqkv, const T *dout, const T *qkv,
                                                const float *lse, const float *Dsum, int T_, int NH,
                                                int NKV) {
    extern __shared__ float sh[];
    float *sdo = sh, *sk = sdo + SQ * (HD + 1), *sv = sk + SK * HD;
    int h = blockIdx.y, b = blockIdx.z, kvh = h / (NH / NKV);
    int64_t W = (int64_t)(NH + 2 * NKV) * HD, ldo = (int64_t)NH * HD;
    const T *base = qkv + (int64_t)b * T_ * W;
    int q0 = (gridDim.x - 1 - blockIdx.x) * SQ, qi = q0 + threadIdx.x;
    const float scale = rsqrtf((float)HD);
    float q[HD], dq[HD];
    float *mydo = sdo + threadIdx.x * (HD + 1);
#pragma unroll
    for (int d = 0; d < HD; d++) {
        q[d] = qi < T_ ? lb_to_f(base[(int64_t)qi * W + h * HD + d]) : 0.0f;
        mydo[d] = qi < T_ ? lb_to_f(dout[((int64_t)b * T_ + qi) * ldo + h * HD + d]) : 0.0f;
        dq[d] = 0.0f;
    }
    float L = qi < T_ ? lse[((int64_t)b * NH + h) * T_ + qi] : 0.0f;
    float Dq = qi < T_ ? Dsum[((int64_t)b * NH + h) * T_ + qi] : 0.0f;
    int kend = min(q0 + SQ, T_);
    for (int k0 = 0; k0 < kend; k0 += SK) {
        __syncthreads();
        for (int i = threadIdx.x; i < SK * HD; i += blockDim.x) {
            int r = i / HD, d = i % HD, key = k0 + r;
            sk[i] = key < T_ ? lb_to_f(base[(int64_t)key * W + (NH + kvh) * HD + d]) : 0.0f;
            sv[i] = key < T_ ? lb_to_f(base[(int64_t)key * W + (NH + NKV + kvh) * HD + d]) : 0.0f;
        }
        __syncthreads();
        if (qi >= T_) continue;
        for (int j = 0; j < SK && k0 + j <= qi; j++) {
            float s = 0.0f, dp = 0.0f;
#pragma unroll
            for (int d = 0; d < HD; d++) {
                s += q[d] * sk[j * HD + d];
                dp += mydo[d] * sv[j * HD + d];
            }
            float p = __expf(s * scale - L);
            float ds = p * (dp - Dq) * scale;
#pragma unroll
            for (int d = 0; d < HD; d++)
                dq[d] += ds * sk[j * HD + d];
        }
    }
    if (qi >= T_) return;
    T *row = dqkv + ((int64_t)b * T_ + qi) * W + h * HD;
#pragma unroll
    for (int d = 0; d < HD; d++)
        row[d] = lb_from_f<T>(dq[d]);
}

template <typename T, int HD>
static lb_status fwd_scalar(void *out, float *lse, const void *qkv, int B, int T_, int NH, int NKV,
                            cudaStream_t s, lb_err *err) {
    dim3 grid((unsigned)((T_ + SQ - 1) / SQ), (unsigned)NH, (unsigned)B);
    attn_fwd_scalar_kernel<T, HD><<<grid, SQ, 0, s>>>((T *)out, lse, (const T *)qkv, T_, NH, NKV);
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}

template <typename T, int HD>
static lb_status bwd_scalar(void *dqkv, float *dbias, const float *Dsum, const void *dout,
                            const void *qkv, const float *lse, int B, int T_, int NH, int NKV,
                            lb_gpu_dtype dt, cudaStream_t s, lb_err *err) {
    size_t smem_kv = (2 * SQ * (HD + 1) + 2 * SK * HD + 2 * SK) * sizeof(float);
    size_t smem_q = (SQ * (HD + 1) + 2 * SK * HD) * sizeof(float);
    LB_CUDA_TRY(err,
                cudaFuncSetAttribute(attn_bwd_kv_scalar_kernel<T, HD>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_kv));
    LB_CUDA_TRY(err,
                cudaFuncSetAttribute(attn_bwd_q_scalar_kernel<T, HD>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_q));
    unsigned nt = (unsigned)((T_ + SQ - 1) / SQ);
    attn_bwd_kv_scalar_kernel<T, HD><<<dim3(nt, (unsigned)NKV, (unsigned)B), SQ, smem_kv, s>>>(
        (T *)dqkv, (const T *)dout, (const T *)qkv, lse, Dsum, T_, NH, NKV);
    LB_CUDA_LAUNCH_TRY(err);
    attn_bwd_q_scalar_kernel<T, HD><<<dim3(nt, (unsigned)NH, (unsigned)B), SQ, smem_q, s>>>(
        (T *)dqkv, (const T *)dout, (const T *)qkv, lse, Dsum, T_, NH, NKV);
    LB_CUDA_LAUNCH_TRY(err);
    if (dbias == NULL) return LB_OK;
    int64_t W = (int64_t)(NH + 2 * NKV) * HD; /* a separate reduction over dqkv */
    return lb_act_bias_backward(dbias, dqkv, (int64_t)B * T_, (int)W, W, dt, s, err);
}

#define HD_DISPATCH(HD, ...)                                                                       \
    switch (HD) {                                                                                  \
    case 8: {                                                                                      \
        constexpr int HDC = 8;                                                                     \
        __VA_ARGS__;                                                                               \
    } break;                                                                                       \
    case 16: {                                                                                     \
        constexpr int HDC = 16;                                                                    \
        __VA_ARGS__;                                                                               \
    } break;                                                                                       \
    case 32: {                                                                                     \
        constexpr int HDC = 32;                                                                    \
        __VA_ARGS__;                                                                               \
    } break;                                                                                       \
    case 128: {                                                                                    \
        constexpr int HDC = 128;                                                                   \
        __VA_ARGS__;                                                                               \
    } break;                                                                                       \
    default:                                                                                       \
        return lb_fail(err, LB_ERR_UNSUPPORTED,                                                    \
                       "scalar attention supports head sizes 8, 16, 32 and 128, not %d", HD);      \
    }

lb_status lb_attention_scalar_forward(void *out, float *lse, const void *qkv, int B, int T, int NH,
                                      int NKV, int HD, lb_gpu_dtype dt, cudaStream_t s,
                                      lb_err *err) {
    HD_DISPATCH(HD, LB_DISPATCH_DTYPE(
                        dt, E, return (fwd_scalar<E, HDC>(out, lse, qkv, B, T, NH, NKV, s, err))));
    return LB_OK;
}

lb_status lb_attention_scalar_backward(void *dqkv, float *dbias, const float *Dsum,
                                       const void *dout, const void *qkv, const float *lse, int B,
                                       int T, int NH, int NKV, int HD, lb_gpu_dtype dt,
                                       cudaStream_t s, lb_err *err) {
    HD_DISPATCH(HD, LB_DISPATCH_DTYPE(dt, E,
                                      return (bwd_scalar<E, HDC>(dqkv, dbias, Dsum, dout, qkv, lse,
                                                                 B, T, NH, NKV, dt, s, err))));
    return LB_OK;
}
