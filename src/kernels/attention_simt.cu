/* attention_simt.cu: attention on CUDA cores in fp32 tiles (HD 64: fp32 storage, or any
 * storage under LB_ATTN_SCALAR).
 *
 * The blocks, grids and dQ accumulator of the tensor-core path, with each 64 x 64 product
 * an SGEMM-style register tiling: 256 threads, a 4 x 4 block of outputs each, operands as
 * fp32 in shared memory with padded rows (float4 reads without bank conflicts).
 * Probabilities and dS pass through shared memory between the products. It uses no TF32
 * and no tensor-core instruction: fp32 (IEEE) arithmetic throughout. */
#include "kernels/attention_impl.cuh"

static __device__ __forceinline__ void zero4x4(float x[4][4]) {
#pragma unroll
    for (int i = 0; i < 4; i++)
        x[i][0] = x[i][1] = x[i][2] = x[i][3] = 0.0f;
}

#define TB  64  /* rows (queries or keys) of a tile */
#define TLD 68  /* row stride of Q, K, V, dO tiles in floats: rows 8 apart share banks */
#define PLD 80  /* row stride of P and dS tiles: rows 1 apart land 16 banks apart */
#define TT  256 /* threads a block, a 16 x 16 grid (ty = tid / 16, tx = tid % 16) */

/* Rows [row0, row0+TB) of a [*, ld] matrix (HDM columns from g) as fp32 into s[TB][TLD];
 * rows at or past n_rows become zero. */
template <typename T>
__device__ __forceinline__ void tile_f32(float *s, const T *g, int64_t ld, int row0, int n_rows) {
    constexpr int VPR = HDM / 8;
    for (int i = threadIdx.x; i < TB * VPR; i += TT) {
        int r = i / VPR, c = (i % VPR) * 8;
        float f[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
        if (row0 + r < n_rows) lb_ld8(f, g + (int64_t)(row0 + r) * ld + c);
        lb_st8(s + r * TLD + c, f);
    }
}

/* acc[i][j] += dot(A row ra + 16 i, B row rb + 16 j) over HDM for [TB][TLD] tiles A, B:
 * a 4 x 4 block of A B^T whose A rows are shared by a half-warp (broadcast) and whose B
 * rows, 16 apart, fall in distinct 16-byte bank groups. */
__device__ __forceinline__ void tile_abt(float acc[4][4], const float *A, int ra, const float *B,
                                         int rb) {
#pragma unroll
    for (int d = 0; d < HDM; d += 4) {
        float4 b[4];
#pragma unroll
        for (int j = 0; j < 4; j++)
            b[j] = *(const float4 *)(B + (rb + 16 * j) * TLD + d);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float4 a = *(const float4 *)(A + (ra + 16 * i) * TLD + d);
#pragma unroll
            for (int j = 0; j < 4; j++) {
                acc[i][j] = fmaf(a.x, b[j].x, acc[i][j]);
                acc[i][j] = fmaf(a.y, b[j].y, acc[i][j]);
                acc[i][j] = fmaf(a.z, b[j].z, acc[i][j]);
                acc[i][j] = fmaf(a.w, b[j].w, acc[i][j]);
            }
        }
    }
}

/* acc[i][c] += sum_k P[ra + 16 i][k] S[k][4 tx + c] over TB keys for P [TB][PLD] and
 * S [TB][TLD]: the product of a probability (or dS) tile with a value-like tile, each
 * thread four rows of P (broadcast in a half-warp) and four adjacent columns of S. */
__device__ __forceinline__ void tile_ps(float acc[4][4], const float *P, int ra, const float *S,
                                        int tx) {
#pragma unroll 4
    for (int k = 0; k < TB; k += 4) {
        float4 p[4], v[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            p[i] = *(const float4 *)(P + (ra + 16 * i) * PLD + k);
            v[i] = *(const float4 *)(S + (k + i) * TLD + 4 * tx);
        }
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float pk[4] = {p[i].x, p[i].y, p[i].z, p[i].w};
#pragma unroll
            for (int kk = 0; kk < 4; kk++) {
                acc[i][0] = fmaf(pk[kk], v[kk].x, acc[i][0]);
                acc[i][1] = fmaf(pk[kk], v[kk].y, acc[i][1]);
                acc[i][2] = fmaf(pk[kk], v[kk].z, acc[i][2]);
                acc[i][3] = fmaf(pk[kk], v[kk].w, acc[i][3]);
            }
        }
    }
}

/* Forward: one block per 64 queries of one head, thread (ty, tx) owning the scores of
 * queries ty + 16 i and keys tx + 16 j of each 64-key tile, so a query row's maximum and
 * sum are shuffles among 16 lanes; the probabilities go through shared memory into
 * O += P V, where the thread owns the same four queries and columns 4 tx..4 tx+3. */
template <typename T>
static __global__ void __launch_bounds__(TT, 3)
    attn_fwd_simt_kernel(T *out, float *lse, const T *qkv, int B, int T_, int NH, int NKV) {
    extern __shared__ __align__(16) float fsm[];
    float *sQ = fsm, *sK = sQ + TB * TLD, *sV = sK + TB * TLD, *sP = sV + TB * TLD;
    fwd_tile<T> ft = fwd_tile_of(qkv, TB, B, T_, NH, NKV);
    int q0 = ft.q0, h = ft.h, b = ft.b;
    const T *base = ft.base, *gK = ft.gK, *gV = ft.gV;
    int64_t W = (int64_t)(NH + 2 * NKV) * HDM;
    int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const float sl2 = rsqrtf((float)HDM) * LB_LOG2E;

    tile_f32(sQ, base + h * HDM, W, q0, T_);
    float o[4][4], m[4], l[4];
    zero4x4(o);
#pragma unroll
    for (int i = 0; i < 4; i++)
        m[i] = -INFINITY, l[i] = 0.0f;
    for (int k0 = 0; k0 <= q0; k0 += TB) {
        __syncthreads(); /* the last tile's K, V and P are read */
        tile_f32(sK, gK, W, k0, T_);
        tile_f32(sV, gV, W, k0, T_);
        __syncthreads();
        float s[4][4];
        zero4x4(s);
        tile_abt(s, sQ, ty, sK, tx);
        bool edge = k0 == q0 || k0 + TB > T_; /* the diagonal or the sequence end */
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float mx = -INFINITY;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                int key = k0 + tx + 16 * j;
                s[i][j] *= sl2;
                if (edge && (key > q0 + ty + 16 * i || key >= T_)) s[i][j] = -INFINITY;
                mx = fmaxf(mx, s[i][j]);
            }
#pragma unroll
            for (int o2 = 1; o2 < 16; o2 <<= 1)
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o2));
            float mnew = fmaxf(m[i], mx), ms = mnew == -INFINITY ? 0.0f : mnew;
            float corr = lb_exp2(m[i] - ms), sum = 0.0f;
            m[i] = mnew;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                float p = lb_exp2(s[i][j] - ms);
                sum += p;
                sP[(ty + 16 * i) * PLD + tx + 16 * j] = p;
            }
            l[i] = l[i] * corr + sum;
#pragma unroll
            for (int c = 0; c < 4; c++)
                o[i][c] *= corr;
        }
        __syncthreads();
        tile_ps(o, sP, ty, sV, tx);
    }
    int64_t ldo = (int64_t)NH * HDM;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        float li = l[i];
#pragma unroll
        for (int o2 = 1; o2 < 16; o2 <<= 1)
            li += __shfl_xor_sync(0xffffffffu, li, o2);
        int q = q0 + ty + 16 * i;
        if (q >= T_) continue;
        float inv = 1.0f / li, f[4] = {o[i][0] * inv, o[i][1] * inv, o[i][2] * inv, o[i][3] * inv};
        lb_st4(out + ((int64_t)b * T_ + q) * ldo + h * HDM + 4 * tx, f);
        if (tx == 0) lse[((int64_t)b * NH + h) * T_ + q] = m[i] * LN2 + logf(li);
    }
}

/* Backward: one block per 64 keys of one kv head, over every 64-query tile at or past the
 * diagonal of every query head of the group. Thread (ty, tx) forms the transposed scores
 * S^T and dP^T = V dO^T for keys ty + 16 i and queries tx + 16 j, recomputes P^T from
 * lse, and writes P^T to shared memory; then, owning keys ty + 16 i and columns 4 tx..,
 * it adds P^T dO to dV, replaces P^T by dS^T (one buffer: 88.5 KB of shared memory a
 * block fits the 99 KB limit of sm_86/89), adds dS^T Q to dK (dK, dV stay in registers
 * until the end), and,
 * owning queries 4 ty..4 ty+3 and the columns {2t, 2t+1, 8+2t, 9+2t} of 16-column group
 * g (tx = 4g + t), forms the tile's dS K and adds it into dq_acc in attn_dq_store_kernel's
 * permuted order with four-float reductions. */
template <typename T>
static __global__ void __launch_bounds__(TT, 2)
    attn_bwd_simt_kernel(T *dqkv, float *dbias, float *dq_acc, const T *dout, const T *qkv,
                         const float *lse, const float *Dsum, int B, int T_, int NH, int NKV) {
    extern __shared__ __align__(16) float fsm[];
    float *sK = fsm, *sV = sK + TB * TLD, *sQ = sV + TB * TLD, *sdO = sQ + TB * TLD;
    float *sS = sdO + TB * TLD, *sL = sS + TB * PLD, *sD = sL + TB; /* sS: P^T, then dS^T */
    /* a 1-D grid in order of decreasing work: every head's first key block first */
    int rest = blockIdx.x % (NKV * B);
    int kvh = rest % NKV, b = rest / NKV, G = NH / NKV;
    int64_t W = (int64_t)(NH + 2 * NKV) * HDM, ldo = (int64_t)NH * HDM;
    const T *base = qkv + (int64_t)b * T_ * W;
    int k0 = (int)(blockIdx.x / (NKV * B)) * TB;
    int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const float scale = rsqrtf((float)HDM), sl2 = scale * LB_LOG2E;
    const int dcol = 16 * (tx >> 2) + 2 * (tx & 3); /* dQ columns dcol, +1, +8, +9 */

    tile_f32(sK, base + (NH + kvh) * HDM, W, k0, T_);
    tile_f32(sV, base + (NH + NKV + kvh) * HDM, W, k0, T_);
    float dk[4][4], dv[4][4];
    zero4x4(dk);
    zero4x4(dv);
    for (int hh = 0; hh < G; hh++) {
        int h = kvh * G + hh;
        for (int q0 = k0; q0 < T_; q0 += TB) {
            __syncthreads(); /* the last tile's Q, dO and dS^T are read */
            tile_f32(sQ, base + h * HDM, W, q0, T_);
            tile_f32(sdO, dout + (int64_t)b * T_ * ldo + h * HDM, ldo, q0, T_);
            if (threadIdx.x < TB) {
                int q = q0 + threadIdx.x;
                int64_t r = ((int64_t)b * NH + h) * T_ + q;
                sL[threadIdx.x] = q < T_ ? lse[r] * LB_LOG2E : INFINITY; /* P = 0 past T */
                sD[threadIdx.x] = q < T_ ? Dsum[r] : 0.0f;
            }
            __syncthreads();
            /* S^T, then P^T into shared memory (re-read there by this thread for dS^T,
             * which keeps registers for dP^T) */
            float acc[4][4];
            zero4x4(acc);
            tile_abt(acc, sK, ty, sQ, tx);
            bool diag = q0 == k0;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                int qj = tx + 16 * j;
                float L = sL[qj];
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    float pij = lb_exp2(fmaf(acc[i][j], sl2, -L));
                    sS[(ty + 16 * i) * PLD + qj] = diag && qj < ty + 16 * i ? 0.0f : pij;
                }
            }
            zero4x4(acc);
            tile_abt(acc, sV, ty, sdO, tx); /* dP^T */
            __syncthreads();
            tile_ps(dv, sS, ty, sdO, tx); /* dV += P^T dO */
            __syncthreads();              /* P^T is read: dS^T takes its place */
#pragma unroll
            for (int j = 0; j < 4; j++) {
                int qj = tx + 16 * j;
                float D = sD[qj];
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    int e = (ty + 16 * i) * PLD + qj;
                    sS[e] = sS[e] * (acc[i][j] - D);
                }
            }
            __syncthreads();
            tile_ps(dk, sS, ty, sQ, tx); /* dK += dS^T Q (scaled at the end) */
            float dq[4][4];
            zero4x4(dq);
#pragma unroll 4
            for (int k = 0; k < TB; k++) {
                float4 a = *(const float4 *)(sS + k * PLD + 4 * ty);
                float2 k01 = *(const float2 *)(sK + k * TLD + dcol);
                float2 k89 = *(const float2 *)(sK + k * TLD + dcol + 8);
                float av[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    dq[i][0] = fmaf(av[i], k01.x, dq[i][0]);
                    dq[i][1] = fmaf(av[i], k01.y, dq[i][1]);
                    dq[i][2] = fmaf(av[i], k89.x, dq[i][2]);
                    dq[i][3] = fmaf(av[i], k89.y, dq[i][3]);
                }
            }
#pragma unroll
            for (int i = 0; i < 4; i++) {
                int q = q0 + 4 * ty + i;
                if (q < T_)
                    red_add4(dq_acc + (((int64_t)b * T_ + q) * NH + h) * HDM + 4 * tx,
                             make_float4(dq[i][0], dq[i][1], dq[i][2], dq[i][3]));
            }
        }
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        int key = k0 + ty + 16 * i;
        if (key >= T_) continue;
        T *row = dqkv + ((int64_t)b * T_ + key) * W + 4 * tx;
        float fk[4] = {dk[i][0] * scale, dk[i][1] * scale, dk[i][2] * scale, dk[i][3] * scale};
        lb_st4(row + (NH + kvh) * HDM, fk);
        lb_st4(row + (NH + NKV + kvh) * HDM, dv[i]);
    }
    if (dbias == NULL) return;
    /* the bias gradient's key and value columns: this block's column sums of dK and dV
     * (fp32, keys past T_ left out), over the thread's four keys, the two rows of a warp
     * (a shuffle) and the eight warps (shared memory), then one atomic a column */
    float *part = fsm; /* [8][2 * HDM]: the tiles are done with */
    __syncthreads();
#pragma unroll
    for (int c = 0; c < 4; c++) {
        float sk = 0.0f, sv = 0.0f;
#pragma unroll
        for (int i = 0; i < 4; i++)
            if (k0 + ty + 16 * i < T_) sk += dk[i][c], sv += dv[i][c];
        sk += __shfl_xor_sync(0xffffffffu, sk, 16);
        sv += __shfl_xor_sync(0xffffffffu, sv, 16);
        if ((ty & 1) == 0) {
            part[(ty >> 1) * 2 * HDM + 4 * tx + c] = sk * scale;
            part[(ty >> 1) * 2 * HDM + HDM + 4 * tx + c] = sv;
        }
    }
    __syncthreads();
    int c = threadIdx.x;
    if (c >= 2 * HDM) return;
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < TT / 32; w++)
        sum += part[w * 2 * HDM + c];
    atomicAdd(dbias + (c < HDM ? (NH + kvh) * HDM + c : (NH + NKV + kvh) * HDM + c - HDM), sum);
}

template <typename T>
static lb_status fwd_simt(void *out, float *lse, const void *qkv, int B, int T_, int NH, int NKV,
                          cudaStream_t s, lb_err *err) {
    size_t smem = (size_t)(3 * TB * TLD + TB * PLD) * sizeof(float);
    LB_CUDA_TRY(err, cudaFuncSetAttribute(attn_fwd_simt_kernel<T>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    unsigned blocks = (unsigned)((T_ + TB - 1) / TB) * (unsigned)NH * (unsigned)B;
    attn_fwd_simt_kernel<T><<<blocks, TT, smem, s>>>((T *)out, lse, (const T *)qkv, B, T_, NH, NKV);
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}

lb_status lb_attention_simt_forward(void *out, float *lse, const void *qkv, int B, int T, int NH,
                                    int NKV, lb_gpu_dtype dt, cudaStream_t s, lb_err *err) {
    LB_DISPATCH_DTYPE(dt, E, return (fwd_simt<E>(out, lse, qkv, B, T, NH, NKV, s, err)));
    return LB_OK;
}

template <typename T>
static lb_status bwd_simt(void *dqkv, float *dbias, const float *Dsum, float *dq_acc,
                          const void *dout, const void *qkv, const float *lse, int B, int T_,
                          int NH, int NKV, cudaStream_t s, lb_err *err) {
    size_t smem = (size_t)(4 * TB * TLD + TB * PLD + 2 * TB) * sizeof(float); /* 88.5 KB */
    LB_CUDA_TRY(err, cudaFuncSetAttribute(attn_bwd_simt_kernel<T>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    unsigned blocks = (unsigned)((T_ + TB - 1) / TB) * (unsigned)NKV * (unsigned)B;
    attn_bwd_simt_kernel<T><<<blocks, TT, smem, s>>>((T *)dqkv, dbias, dq_acc, (const T *)dout,
                                                     (const T *)qkv, lse, Dsum, B, T_, NH, NKV);
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}

lb_status lb_attention_simt_backward(void *dqkv, float *dbias, const float *Dsum, float *dq_acc,
                                     const void *dout, const void *qkv, const float *lse, int B,
                                     int T, int NH, int NKV, lb_gpu_dtype dt, cudaStream_t s,
                                     lb_err *err) {
    LB_DISPATCH_DTYPE(
        dt, E,
        return (bwd_simt<E>(dqkv, dbias, Dsum, dq_acc, dout, qkv, lse, B, T, NH, NKV, s, err)));
    return LB_OK;
}
