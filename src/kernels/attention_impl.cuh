/* attention_impl.cuh: what attention's variants share (attention.cu dispatches to them).
 *
 * The variants, each in its own file:
 *   attention_mma.cu     tensor cores through mma.sync (fp16/bf16, HD 64): forward, and the
 *                        backward on GPUs before sm_90 and under LB_ATTN_MMA_SYNC
 *   attention_wgmma.cu   the 16-bit HD-64 backward on Hopper's warpgroup MMAs (sm_90a)
 *   attention_simt.cu    CUDA-core fp32 tiles (HD 64: fp32, or LB_ATTN_SCALAR)
 *   attention_scalar.cu  one thread per row (any type, HD 8, 16, 32, 128)
 * The HD-64 backwards (mma, wgmma, simt) add dQ into one fp32 accumulator [B,T,NH,HD]
 * whose 16-column groups are permuted (lane t's columns 2t, 2t+1, 8+2t, 9+2t adjacent);
 * attention.cu clears it with the D = rowsum(dout * out) pass before and stores it into
 * dqkv after. Launchers here launch their variant's kernels only; they check nothing the
 * dispatcher checked (head counts, head size, type). */
#ifndef LB_KERNELS_ATTENTION_IMPL_CUH
#define LB_KERNELS_ATTENTION_IMPL_CUH

#include "gpu/common.cuh"
#include "kernels/attention.cuh"
#include "kernels/ptx.cuh"

#define LN2 0.6931471805599453f
#define HDM 64 /* the head size of the tensor-core and CUDA-core tiled paths */

/* forward: out, lse from qkv (layouts of attention.cuh) */
lb_status lb_attention_mma_forward(void *out, float *lse, const void *qkv, int B, int T, int NH,
                                   int NKV, lb_gpu_dtype dt, cudaStream_t s, lb_err *err);
lb_status lb_attention_simt_forward(void *out, float *lse, const void *qkv, int B, int T, int NH,
                                    int NKV, lb_gpu_dtype dt, cudaStream_t s, lb_err *err);
lb_status lb_attention_scalar_forward(void *out, float *lse, const void *qkv, int B, int T, int NH,
                                      int NKV, int HD, lb_gpu_dtype dt, cudaStream_t s,
                                      lb_err *err);

/* HD-64 backward kernels: dK and dV (and their dbias columns) into dqkv, dQ added into the
 * cleared accumulator dq_acc; Dsum is D [B,NH,T] */
lb_status lb_attention_mma_backward(void *dqkv, float *dbias, const float *Dsum, float *dq_acc,
                                    const void *dout, const void *qkv, const float *lse, int B,
                                    int T, int NH, int NKV, lb_gpu_dtype dt, cudaStream_t s,
                                    lb_err *err);
lb_status lb_attention_wgmma_backward(void *dqkv, float *dbias, const float *Dsum, float *dq_acc,
                                      const void *dout, const void *qkv, const float *lse, int B,
                                      int T, int NH, int NKV, lb_gpu_dtype dt, cudaStream_t s,
                                      lb_err *err);
lb_status lb_attention_simt_backward(void *dqkv, float *dbias, const float *Dsum, float *dq_acc,
                                     const void *dout, const void *qkv, const float *lse, int B,
                                     int T, int NH, int NKV, lb_gpu_dtype dt, cudaStream_t s,
                                     lb_err *err);
/* the scalar backward: all of dqkv (and dbias, by a separate reduction over dqkv) */
lb_status lb_attention_scalar_backward(void *dqkv, float *dbias, const float *Dsum,
                                       const void *dout, const void *qkv, const float *lse, int B,
                                       int T, int NH, int NKV, int HD, lb_gpu_dtype dt,
                                       cudaStream_t s, lb_err *err);

/* Starts copying the lse and Dsum of NQ queries from q0 (one head's rows of both, from
 * row0) into sL[NQ] and sD[NQ] by the block's first 2 NQ threads; queries at or past T_
 * copy nothing (zero). */
template <int NQ>
__device__ __forceinline__ void rowstats_async(float *sL, float *sD, const float *lse,
                                               const float *Dsum, int64_t row0, int q0, int T_) {
    int i = threadIdx.x;
    if (i < 2 * NQ) {
        int r = i & (NQ - 1), q = q0 + r;
        const float *src = (i < NQ ? lse : Dsum) + row0;
        cp_async4((i < NQ ? sL : sD) + r, src + (q < T_ ? q : 0), q < T_);
    }
}

/* dS = P o (dP - D) in place, for the 8 column tiles of a transposed (key-major) score
 * fragment: d holds dP^T, p the probabilities P^T, cD the query rows' D = rowsum(dO o O)
 * (thread t of a quad owns query columns 2t and 2t + 1 of each tile). */
static __device__ __forceinline__ void softmax_grad8(float d[8][4], const float p[8][4],
                                                     const float *cD, int t) {
#pragma unroll
    for (int nt = 0; nt < 8; nt++) {
        float2 D = *(const float2 *)(cD + nt * 8 + 2 * t);
        d[nt][0] = p[nt][0] * (d[nt][0] - D.x);
        d[nt][1] = p[nt][1] * (d[nt][1] - D.y);
        d[nt][2] = p[nt][2] * (d[nt][2] - D.x);
        d[nt][3] = p[nt][3] * (d[nt][3] - D.y);
    }
}
static __device__ __forceinline__ void zero8x4(float x[8][4]) {
#pragma unroll
    for (int i = 0; i < 8; i++)
        x[i][0] = x[i][1] = x[i][2] = x[i][3] = 0.0f;
}

/* Where a forward block of `rows` queries works, in a 1-D grid in order of decreasing
 * work (every head's last query tile first): its first query, head and batch, batch b's
 * qkv rows and the key and value columns of the head's kv head there. */
template <typename T> struct fwd_tile {
    int q0, h, b;
    const T *base, *gK, *gV;
};
template <typename T>
__device__ __forceinline__ fwd_tile<T> fwd_tile_of(const T *qkv, int rows, int B, int T_, int NH,
                                                   int NKV) {
    int rest = blockIdx.x % (NH * B), h = rest % NH, b = rest / NH, kvh = h / (NH / NKV);
    int qt = (T_ + rows - 1) / rows - 1 - (int)(blockIdx.x / (NH * B));
    const T *base = qkv + (int64_t)b * T_ * (NH + 2 * NKV) * HDM;
    return {qt * rows, h, b, base, base + (NH + kvh) * HDM, base + (NH + NKV + kvh) * HDM};
}

/* The bias gradient's key and value columns from a backward block of NW warps whose
 * lanes hold dK and dV rows key[0], key[1] in accumulator layout: the block's column sums
 * (fp32, keys past T_ left out, dK times scale) over the lane's two rows, the warp's
 * eight row groups (shuffles) and the warps (shared memory, whose tiles the block is done
 * with), then one atomic a column. */
template <int NW>
__device__ __forceinline__ void
bias_kv_sums(float *dbias, unsigned char *smem, const float dk[8][4], const float dv[8][4],
             const int key[2], int T_, int NH, int NKV, int kvh, float scale) {
    static_assert(NW * 32 >= 2 * HDM, "one thread a key or value column");
    float *part = (float *)smem; /* [NW][2 * HDM] */
    int warp = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
    __syncthreads();
#pragma unroll
    for (int d = 0; d < 8; d++) {
#pragma unroll
        for (int e = 0; e < 2; e++) {
            float sk = 0.0f, sv = 0.0f;
#pragma unroll
            for (int i = 0; i < 2; i++)
                if (key[i] < T_) sk += dk[d][2 * i + e], sv += dv[d][2 * i + e];
#pragma unroll
            for (int o = 4; o < 32; o <<= 1) {
                sk += __shfl_xor_sync(0xffffffffu, sk, o);
                sv += __shfl_xor_sync(0xffffffffu, sv, o);
            }
            if (g == 0) {
                part[warp * 2 * HDM + d * 8 + 2 * t + e] = sk * scale;
                part[warp * 2 * HDM + HDM + d * 8 + 2 * t + e] = sv;
            }
        }
    }
    __syncthreads();
    int c = threadIdx.x;
    if (c >= 2 * HDM) return;
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < NW; w++)
        sum += part[w * 2 * HDM + c];
    atomicAdd(dbias + (c < HDM ? (NH + kvh) * HDM + c : (NH + NKV + kvh) * HDM + c - HDM), sum);
}

/* dq_acc += a lane's dQ rows q, q + 8 (accumulator layout, NT 8-column tiles from column
 * c0; rows at or past T_ left out). dq_acc keeps each row's 16-column groups permuted
 * (attn_dq_store_kernel) so that the lane's four values of a row and group (columns 2t,
 * 2t+1, 8+2t, 9+2t) are adjacent: one 16-byte vector reduction each on sm_90. */
template <int NT>
__device__ __forceinline__ void dq_red_rows(float *dq_acc, const float (&dq)[NT][4], int b, int q,
                                            int T_, int NH, int h, int c0) {
    int t = threadIdx.x & 3;
#pragma unroll
    for (int i = 0; i < 2; i++) {
        if (q + 8 * i >= T_) continue;
        float *row = dq_acc + (((int64_t)b * T_ + q + 8 * i) * NH + h) * HDM + c0 + 4 * t;
#pragma unroll
        for (int dp = 0; dp < NT / 2; dp++)
            red_add4(row + dp * 16, make_float4(dq[2 * dp][2 * i], dq[2 * dp][2 * i + 1],
                                                dq[2 * dp + 1][2 * i], dq[2 * dp + 1][2 * i + 1]));
    }
}

/* A backward block's end: the lane's dK (times scale) and dV rows key[0], key[1] into
 * dqkv (keys past T_ left out), then, with dbias, their column sums into it. */
template <int NW, typename T>
__device__ __forceinline__ void
store_dkv(T *dqkv, float *dbias, unsigned char *smem, const float dk[8][4], const float dv[8][4],
          const int key[2], int b, int T_, int NH, int NKV, int kvh, float scale) {
    int64_t W = (int64_t)(NH + 2 * NKV) * HDM;
    int t = threadIdx.x & 3;
#pragma unroll
    for (int i = 0; i < 2; i++) {
        if (key[i] >= T_) continue;
        T *row = dqkv + ((int64_t)b * T_ + key[i]) * W;
#pragma unroll
        for (int d = 0; d < 8; d++) {
            *(uint32_t *)(row + (NH + kvh) * HDM + d * 8 + 2 * t) =
                mma_op<T>::pack(dk[d][2 * i] * scale, dk[d][2 * i + 1] * scale);
            *(uint32_t *)(row + (NH + NKV + kvh) * HDM + d * 8 + 2 * t) =
                mma_op<T>::pack(dv[d][2 * i], dv[d][2 * i + 1]);
        }
    }
    if (dbias != NULL) bias_kv_sums<NW>(dbias, smem, dk, dv, key, T_, NH, NKV, kvh, scale);
}

#endif
