/* attention.cu: attention's dispatch (attention.cuh) and the kernels its variants share.
 *
 * Which variant runs, listed once here (attention_impl.cuh names their files):
 *   fp16/bf16, HD 64, not LB_ATTN_SCALAR:  forward mma.sync; backward on warpgroup MMAs
 *                                          under LB_ATTN_AUTO where the device runs sm_90a
 *                                          code (lb_attention_wgmma), else mma.sync
 *   any other type at HD 64, or LB_ATTN_SCALAR at HD 64:  CUDA-core fp32 tiles (simt)
 *   HD 8, 16, 32, 128:                     scalar, one row a thread
 * Shared kernels: the backward's first pass, D = rowsum(dout * out), which also clears the
 * HD-64 dQ accumulator, and the HD-64 backwards' last pass, which scales, rounds and
 * un-permutes that accumulator into dqkv (with dbias, its column sums too). */
#include "kernels/attention_impl.cuh"

#define DQ_ROWS 128 /* dQ store: rows a block */

/* dqkv's query part = scale * dq_acc: dq_acc holds column c (c < 8) of a 16-column group at
 * 4 (c / 2) + c % 2 and column 8 + c at 4 (c / 2) + 2 + c % 2, the order in which the
 * tensor-core backward's lane t holds columns 2t, 2t+1, 8+2t, 9+2t (the tiled backward
 * follows it). Any storage type. Block (16, 16): x over 16
 * column groups (grid.y picks which), y over the block's DQ_ROWS rows (grid.x). With
 * dbias, the block also adds its column sums of that part (fp32, before rounding) into
 * dbias[0, NH*HDM): per thread in registers, then over y in shared memory, one atomic a
 * column. */
template <typename T>
static __global__ void attn_dq_store_kernel(T *dqkv, float *dbias, const float *dq_acc, int64_t BT,
                                            int NH, int NKV, float scale) {
    __shared__ float part[16][16][17]; /* [y][column in group][x] */
    int ng = NH * HDM / 16, cg = blockIdx.y * 16 + threadIdx.x;
    int64_t W = (int64_t)(NH + 2 * NKV) * HDM;
    float sum[16];
#pragma unroll
    for (int k = 0; k < 16; k++)
        sum[k] = 0.0f;
    if (cg < ng) {
        int64_t r1 = min(BT, (int64_t)(blockIdx.x + 1) * DQ_ROWS);
#pragma unroll 2
        for (int64_t r = (int64_t)blockIdx.x * DQ_ROWS + threadIdx.y; r < r1; r += 16) {
            const float4 *src = (const float4 *)(dq_acc + (r * ng + cg) * 16);
            float f[16];
#pragma unroll
            for (int t = 0; t < 4; t++) {
                float4 v = src[t];
                sum[2 * t] += v.x, sum[2 * t + 1] += v.y;
                sum[8 + 2 * t] += v.z, sum[9 + 2 * t] += v.w;
                f[2 * t] = v.x * scale, f[2 * t + 1] = v.y * scale;
                f[8 + 2 * t] = v.z * scale, f[9 + 2 * t] = v.w * scale;
            }
            lb_st8(dqkv + r * W + cg * 16, f);
            lb_st8(dqkv + r * W + cg * 16 + 8, f + 8);
        }
    }
    if (dbias == NULL) return;
#pragma unroll
    for (int k = 0; k < 16; k++)
        part[threadIdx.y][k][threadIdx.x] = sum[k];
    __syncthreads();
    int tid = threadIdx.y * 16 + threadIdx.x, col = blockIdx.y * 256 + tid;
    if (col >= NH * HDM) return;
    float s = 0.0f;
#pragma unroll
    for (int y = 0; y < 16; y++)
        s += part[y][tid % 16][tid / 16];
    atomicAdd(dbias + col, s * scale);
}

/* D[b,h,t] = sum_d dout * out: one thread per 8 elements, HD/8 adjacent lanes per row
 * (HD a multiple of 8, at most 256); also clears those elements of the HD-64
 * backward's dQ accumulator [B,T,NH,HD] when there is one. */
template <typename T>
static __global__ void attn_dsum_kernel(float *Dsum, float *dq_acc, const T *dout, const T *out,
                                        int64_t rows, int T_, int NH, int HD) {
    int cpr = HD / 8; /* a power of two dividing 32 */
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, row = i / cpr;
    float s = 0.0f;
    if (row < rows) {
        float a[8], o[8];
        lb_ld8(a, dout + i * 8);
        lb_ld8(o, out + i * 8);
#pragma unroll
        for (int k = 0; k < 8; k++)
            s += a[k] * o[k];
        if (dq_acc) {
            float4 z = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            ((float4 *)(dq_acc + i * 8))[0] = z;
            ((float4 *)(dq_acc + i * 8))[1] = z;
        }
    }
    for (int o = cpr / 2; o > 0; o >>= 1)
        s += __shfl_xor_sync(0xffffffffu, s, o);
    if (row < rows && i % cpr == 0) {
        int h = (int)(row % NH);
        int64_t bt = row / NH;
        Dsum[((bt / T_) * NH + h) * T_ + bt % T_] = s;
    }
}

static bool use_mma(lb_gpu_dtype dt, int HD, lb_gpu_attn_impl impl) {
    return impl != LB_ATTN_SCALAR && dt != LB_DT_F32 && HD == HDM;
}

/* Scratch: D [B,NH,T] fp32, rounded up to 256 bytes, then the dQ accumulator [B,T,NH,HD]. */
static size_t dsum_bytes(int B, int T, int NH) {
    return ((size_t)B * NH * T * sizeof(float) + 255) / 256 * 256;
}

extern "C" size_t lb_attention_scratch_bytes(int B, int T, int NH, int HD) {
    return dsum_bytes(B, T, NH) + (size_t)B * T * NH * HD * sizeof(float);
}

/* dqkv's query part (and dbias's) from the dQ accumulator the HD-64 backward kernels fill */
template <typename T>
static lb_status dq_store(void *dqkv, float *dbias, const float *dq_acc, int B, int T_, int NH,
                          int NKV, cudaStream_t s, lb_err *err) {
    int64_t BT = (int64_t)B * T_;
    dim3 grid((unsigned)((BT + DQ_ROWS - 1) / DQ_ROWS), (unsigned)((NH * HDM / 16 + 15) / 16));
    attn_dq_store_kernel<T>
        <<<grid, dim3(16, 16), 0, s>>>((T *)dqkv, dbias, dq_acc, BT, NH, NKV, rsqrtf((float)HDM));
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}

static lb_status check_heads(int NH, int NKV, int HD, lb_err *err) {
    if (NKV <= 0 || NH % NKV != 0)
        return lb_fail(err, LB_ERR_UNSUPPORTED,
                       "attention needs n_head (%d) divisible by "
                       "n_kv_head (%d)",
                       NH, NKV);
    if (HD != 8 && HD != 16 && HD != 32 && HD != 64 && HD != 128)
        return lb_fail(err, LB_ERR_UNSUPPORTED,
                       "attention supports head sizes 8, 16, 32, 64 and 128, not %d", HD);
    return LB_OK;
}

extern "C" lb_status lb_attention_forward(void *out, float *lse, const void *qkv, int B, int T,
                                          int NH, int NKV, int HD, lb_gpu_dtype dt,
                                          lb_gpu_attn_impl impl, cudaStream_t s, lb_err *err) {
    LB_TRY(check_heads(NH, NKV, HD, err));
    if (use_mma(dt, HD, impl))
        return lb_attention_mma_forward(out, lse, qkv, B, T, NH, NKV, dt, s, err);
    if (HD == HDM) return lb_attention_simt_forward(out, lse, qkv, B, T, NH, NKV, dt, s, err);
    return lb_attention_scalar_forward(out, lse, qkv, B, T, NH, NKV, HD, dt, s, err);
}

extern "C" lb_status lb_attention_backward(void *dqkv, float *dbias, void *scratch,
                                           const void *dout, const void *qkv, const void *out,
                                           const float *lse, int B, int T, int NH, int NKV, int HD,
                                           lb_gpu_dtype dt, lb_gpu_attn_impl impl, cudaStream_t s,
                                           lb_err *err) {
    LB_TRY(check_heads(NH, NKV, HD, err));
    float *Dsum = (float *)scratch;
    bool mma = use_mma(dt, HD, impl);
    float *dq_acc = HD == HDM ? (float *)((char *)scratch + dsum_bytes(B, T, NH)) : NULL;
    int64_t rows = (int64_t)B * T * NH;
    LB_DISPATCH_DTYPE(dt, E,
                      attn_dsum_kernel<E><<<lb_blocks(rows * (HD / 8), 256), 256, 0, s>>>(
                          Dsum, dq_acc, (const E *)dout, (const E *)out, rows, T, NH, HD));
    LB_CUDA_LAUNCH_TRY(err);
    if (HD != HDM)
        return lb_attention_scalar_backward(dqkv, dbias, Dsum, dout, qkv, lse, B, T, NH, NKV, HD,
                                            dt, s, err);
    if (mma && impl == LB_ATTN_AUTO && lb_attention_wgmma())
        LB_TRY(lb_attention_wgmma_backward(dqkv, dbias, Dsum, dq_acc, dout, qkv, lse, B, T, NH, NKV,
                                           dt, s, err));
    else if (mma)
        LB_TRY(lb_attention_mma_backward(dqkv, dbias, Dsum, dq_acc, dout, qkv, lse, B, T, NH, NKV,
                                         dt, s, err));
    else
        LB_TRY(lb_attention_simt_backward(dqkv, dbias, Dsum, dq_acc, dout, qkv, lse, B, T, NH, NKV,
                                          dt, s, err));
    LB_DISPATCH_DTYPE(dt, E, return (dq_store<E>(dqkv, dbias, dq_acc, B, T, NH, NKV, s, err)));
    return LB_OK;
}
