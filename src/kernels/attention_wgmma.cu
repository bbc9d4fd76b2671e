/* attention_wgmma.cu: the 16-bit HD-64 attention backward on Hopper's warpgroup MMAs.
 *
 * Same blocks' work as attention_mma.cu's backward (dK, dV in registers, dQ into
 * attention.cu's fp32 accumulator in its permuted layout) on wgmma.mma_async (ptx.cuh):
 * scores become the next product's A fragments in registers as in the mma.sync kernels
 * (afrag_from_c) and dQ leaves in their permuted accumulator layout. Tiles are kept in the
 * core-matrix layout without swizzle (8 rows x 16 bytes per 128-byte core matrix, cores
 * along a row 128 bytes apart, 8-row blocks 1024 bytes apart); bench/wgmma_probe.cu
 * checked the descriptors on an H200. Compiled only for sm_90a (__CUDA_ARCH_FEAT_SM90_ALL);
 * elsewhere the kernel is empty and lb_attention_wgmma() keeps the dispatcher away
 * from it. Not done: a wgmma forward (the mma.sync forward serves every GPU). */
#include "kernels/attention_impl.cuh"

#define CM_TILE 4096 /* elements of a 64 x 64 core-matrix tile */

/* Starts copying rows [row0, row0+64) x HDM columns of a [*, ld] matrix into a 64 x 64
 * core-matrix tile with the block's NT threads: thread i takes 16-byte chunk c = i % 8 of
 * row r = i / 8 (and of the rows NT / 8, 2 NT / 8, ... below it), which lands at byte
 * (r / 8) 1024 + 128 c + 16 (r % 8). A warp reads four whole 128-byte rows, four L2 lines
 * (eight rows of half a line each, conflict-free in shared memory, take twice the L2
 * requests, and L2 request throughput bounds the attention kernels), at the price of
 * 8-way bank conflicts on the shared-memory writes. Rows at or past n_rows become zero. */
template <int NT, typename T>
__device__ __forceinline__ void tile_async_cm(T *s, const T *g, int64_t ld, int row0, int n_rows) {
    static_assert(NT % 64 == 0 && NT <= 512, "whole 8-row blocks a pass");
    int i = threadIdx.x, c = i % 8, r = row0 + i / 8;
    const T *p = g + (int64_t)r * ld + 8 * c;
    char *d = (char *)s + (i / 64) * 1024 + 128 * c + 16 * (i / 8 % 8);
    int64_t step = (int64_t)(NT / 8) * ld;
#pragma unroll
    for (int k = 0; k < 512 / NT; k++, r += NT / 8, p += step)
        cp_async16(d + k * (NT / 64) * 1024, r < n_rows ? p : g, r < n_rows);
}

/* Writes 1 where this binary's code for the device has the wgmma kernel, else 0. */
static __global__ void wgmma_present_kernel(int *flag) {
#ifdef LB_WGMMA
    *flag = 1;
#else
    *flag = 0;
#endif
}

#define WK      128 /* wgmma backward: keys per block, 64 per warpgroup */
#define WBQ     64  /* wgmma backward: queries per tile */
#define WSTAGES 3   /* wgmma backward: Q / dO / lse / D stages in flight */

/* Backward with warpgroup MMAs (sm_90a): one block per 128 keys of one kv head, two
 * warpgroups of 64 keys each, dK and dV in registers over every 64-query tile of every
 * query head of the group. Tiles are in the core-matrix layout (tile_async_cm); Q,
 * dO, lse and D stream through a two-stage cp.async pipeline. Per tile a warpgroup issues
 * S^T = K Q^T and dP^T = V dO^T (shared operands), turns S^T into P^T while dP^T is still
 * running, issues dV += P^T dO, forms dS^T while that runs, issues dK += dS^T Q, and
 * stores dS^T to shared memory; after a block barrier each warpgroup forms half of the
 * tile's dQ (dS K over the block's 128 keys, 32 of the 64 columns) and adds it into the
 * fp32 accumulator of attn_bwd_mma_kernel (same permuted layout) while the next tile's
 * products run. dS^T is double-buffered, so the reads of one tile's dQ overlap the
 * writes of the next. A warpgroup whose keys all lie after the tile's queries skips the
 * tile's products. */
template <typename T>
static __global__ void __launch_bounds__(256, 1)
    attn_bwd_wgmma_kernel(T *dqkv, float *dbias, float *dq_acc, const T *dout, const T *qkv,
                          const float *lse, const float *Dsum, int B, int T_, int NH, int NKV) {
#ifdef LB_WGMMA
    /* 16-byte alignment is all the unswizzled descriptors need */
    extern __shared__ __align__(16) unsigned char smem[];
    T *sK = (T *)smem, *sV = sK + 2 * CM_TILE, *sQ = sV + 2 * CM_TILE;
    T *sdO = sQ + WSTAGES * CM_TILE, *sdS = sdO + WSTAGES * CM_TILE; /* two dS^T buffers */
    float *sL = (float *)(sdS + 4 * CM_TILE), *sD = sL + WSTAGES * WBQ;
    int rest = blockIdx.x % (NKV * B);
    int kvh = rest % NKV, b = rest / NKV, G = NH / NKV;
    int64_t W = (int64_t)(NH + 2 * NKV) * HDM, ldo = (int64_t)NH * HDM;
    const T *base = qkv + (int64_t)b * T_ * W;
    int k0 = (int)(blockIdx.x / (NKV * B)) * WK;
    int nq = (T_ - k0 + WBQ - 1) / WBQ, n_it = G * nq;
    int wg = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
    int g = lane >> 2, t = lane & 3;
    int kw0 = k0 + 64 * wg;
    int key[2] = {kw0 + 16 * warp + g, kw0 + 16 * warp + g + 8};
    const float scale = rsqrtf((float)HDM), sl2 = scale * LB_LOG2E;
    /* descriptors of the shared operands: K-major (k steps 256 bytes apart) for the
     * products over the head dimension, MN-major (k steps 2048 bytes apart) for the
     * products over queries or keys; a stage of Q or dO is 8 KiB on, a dS^T buffer 16 KiB */
    const uint64_t dKw = wg_desc(sK + wg * CM_TILE, 128, 1024),
                   dVw = wg_desc(sV + wg * CM_TILE, 128, 1024);
    const uint64_t dQk = wg_desc(sQ, 128, 1024), dOk = wg_desc(sdO, 128, 1024);
    const uint64_t dQn = wg_desc(sQ, 1024, 128), dOn = wg_desc(sdO, 1024, 128);
    const uint64_t dSt = wg_desc(sdS, 1024, 128), dKn = wg_desc(sK, 1024, 128) + 32 * wg;
    constexpr int STAGE = CM_TILE * sizeof(T) >> 4, K16 = 256 >> 4, R16 = 2048 >> 4;

    for (int half = 0; half < 2; half++) {
        tile_async_cm<256>(sK + half * CM_TILE, base + (NH + kvh) * HDM, W, k0 + 64 * half, T_);
        tile_async_cm<256>(sV + half * CM_TILE, base + (NH + NKV + kvh) * HDM, W, k0 + 64 * half,
                           T_);
    }
    /* the query stream: tile `it` is query head kvh G + it / nq, queries from
     * k0 + (it % nq) WBQ, tracked as counters (a division by nq costs ~25 instructions) */
    struct qtile {
        int h, q0;
    };
    auto next = [&](qtile p) {
        p.q0 += WBQ;
        if (p.q0 >= T_) p.q0 = k0, p.h++;
        return p;
    };
    /* a tile of the stream into stage buffer buf; past the end (h past the group) an empty
     * group, so that waiting for all but the newest group always means tile it is in */
    auto issue = [&](qtile p, int buf) {
        if (p.h >= (kvh + 1) * G) {
            cp_async_commit();
            return;
        }
        int h = p.h, q0 = p.q0;
        tile_async_cm<256>(sQ + buf * CM_TILE, base + h * HDM, W, q0, T_);
        tile_async_cm<256>(sdO + buf * CM_TILE, dout + (int64_t)b * T_ * ldo + h * HDM, ldo, q0,
                           T_);
        rowstats_async<WBQ>(sL + buf * WBQ, sD + buf * WBQ, lse, Dsum, ((int64_t)b * NH + h) * T_,
                            q0, T_);
        cp_async_commit();
    };
    qtile cur = {kvh * G, k0}, prev = cur, ahead = next(cur);
    issue(cur, 0);
    issue(ahead, 1);

    float dk[8][4], dv[8][4], dq[4][4];
    zero8x4(dk);
    zero8x4(dv);
    /* dQ of tile `it` (64 queries x the 32 columns from 32 wg) = dS K over the 16-key groups
     * that have a query at or after them: 4 (the tile on the block's diagonal) or 8 */
    auto dq_issue = [&](int q0, int parity) {
        uint64_t a = dSt + parity * 2 * STAGE;
        wg_fence();
        /* one of two fixed-length chains, each committed on its own path (a commit after
         * the paths join costs ptxas an extra empty wgmma) */
        if (q0 - k0 >= WBQ) {
#pragma unroll
            for (int ks = 0; ks < WK / 16; ks++)
                wg_op<T>::ss_tt(dq, a + R16 * ks, dKn + R16 * ks, ks > 0);
            wg_commit();
        } else {
#pragma unroll
            for (int ks = 0; ks < WK / 32; ks++)
                wg_op<T>::ss_tt(dq, a + R16 * ks, dKn + R16 * ks, ks > 0);
            wg_commit();
        }
    };
    /* adds that dQ into dq_acc (permuted columns, as attn_bwd_mma_kernel) */
    auto dq_add = [&](int h, int q0) {
        dq_red_rows(dq_acc, dq, b, q0 + 16 * warp + g, T_, NH, h, 32 * wg);
    };
    for (int it = 0, buf = 0; it < n_it; it++, buf = buf == WSTAGES - 1 ? 0 : buf + 1) {
        cp_async_wait<1>();
        fence_async_shared();
        /* tile it is in; both warpgroups are done with tile it-1's Q and dO and have stored
         * tile it-1's dS^T */
        __syncthreads();
        int q0 = cur.q0;
        const float *cL = sL + buf * WBQ, *cD = sD + buf * WBQ;
        /* groups, oldest first: S^T, dP^T, dQ of tile it-1, dV, dK. A warpgroup whose keys
         * all follow the tile's queries computes zeros here: a branch around wgmma on the
         * warpgroup index would make ptxas serialise every wgmma of the kernel */
        float st[8][4], dp[8][4];
        uint32_t pa[4][4], sa[4][4];
        wg_pin(st);
        wg_pin(dp);
        wg_fence();
#pragma unroll
        for (int ks = 0; ks < HDM / 16; ks++)
            wg_op<T>::ss(st, dKw + K16 * ks, dQk + buf * STAGE + K16 * ks, ks > 0);
        wg_commit();
#pragma unroll
        for (int ks = 0; ks < HDM / 16; ks++)
            wg_op<T>::ss(dp, dVw + K16 * ks, dOk + buf * STAGE + K16 * ks, ks > 0);
        wg_commit();
        if (it > 0)
            dq_issue(prev.q0, (it - 1) & 1);
        else
            wg_commit();
        /* tile it + 2 into the stage tile it - 1 used, while the products run */
        ahead = next(ahead);
        issue(ahead, buf == 0 ? WSTAGES - 1 : buf - 1);
        wg_wait<2>(); /* S^T */
        wg_pin(st);
        if (q0 < kw0 + 63) { /* keys after queries: masked */
#pragma unroll
            for (int nt = 0; nt < 8; nt++) {
                float2 L = *(const float2 *)(cL + nt * 8 + 2 * t);
                float nl[2] = {-L.x * LB_LOG2E, -L.y * LB_LOG2E};
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int q = q0 + nt * 8 + 2 * t + (e & 1);
                    float p = lb_exp2(fmaf(st[nt][e], sl2, nl[e & 1]));
                    st[nt][e] = q < key[e >> 1] ? 0.0f : p;
                }
            }
        } else {
#pragma unroll
            for (int nt = 0; nt < 8; nt++) {
                float2 L = *(const float2 *)(cL + nt * 8 + 2 * t);
                float nl[2] = {-L.x * LB_LOG2E, -L.y * LB_LOG2E};
#pragma unroll
                for (int e = 0; e < 4; e++)
                    st[nt][e] = lb_exp2(fmaf(st[nt][e], sl2, nl[e & 1]));
            }
        }
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
            afrag_from_c<T>(pa[kk], st[2 * kk], st[2 * kk + 1]);
        wg_pin(dv);
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < 4; kk++) /* dV += P^T dO */
            wg_op<T>::rs_tb(dv, pa[kk], dOn + buf * STAGE + R16 * kk);
        wg_commit();
        wg_wait<2>(); /* dP^T */
        wg_pin(dp);
        softmax_grad8(dp, st, cD, t);
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
            afrag_from_c<T>(sa[kk], dp[2 * kk], dp[2 * kk + 1]);
        wg_pin(dk);
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < 4; kk++) /* dK += dS^T Q (scale applied at the end) */
            wg_op<T>::rs_tb(dk, sa[kk], dQn + buf * STAGE + R16 * kk);
        wg_commit();
        { /* dS^T rows of this warp into the tile's buffer (lane: row g, columns 2t..) */
            char *p = (char *)(sdS + (it & 1) * 2 * CM_TILE) + (8 * wg + 2 * warp) * 1024 + g * 16 +
                      4 * t;
#pragma unroll
            for (int kk = 0; kk < 4; kk++) {
                *(uint32_t *)(p + 256 * kk) = sa[kk][0];
                *(uint32_t *)(p + 1024 + 256 * kk) = sa[kk][1];
                *(uint32_t *)(p + 128 + 256 * kk) = sa[kk][2];
                *(uint32_t *)(p + 1152 + 256 * kk) = sa[kk][3];
            }
        }
        wg_wait<2>(); /* dQ of tile it-1 */
        wg_pin(dq);
        if (it > 0) dq_add(prev.h, prev.q0);
        prev = cur;
        cur = next(cur);
        wg_wait<0>(); /* dV, dK: this tile's Q and dO are free for the next prefetch */
        wg_pin(dv);
        wg_pin(dk);
        wg_pin_a(pa);
        wg_pin_a(sa);
    }
    fence_async_shared();
    __syncthreads(); /* the last tile's dS^T from both warpgroups */
    dq_issue(prev.q0, (n_it - 1) & 1);
    wg_wait<0>();
    wg_pin(dq);
    dq_add(prev.h, prev.q0);
    store_dkv<8>(dqkv, dbias, smem, dk, dv, key, b, T_, NH, NKV, kvh, scale);
#endif
}

/* Asked once per process: a probe kernel reports whether its code here is sm_90a's. */
extern "C" bool lb_attention_wgmma(void) {
    static int ready = -1;
    if (ready >= 0) return ready == 1;
    int *d = NULL, flag = 0;
    ready = cudaMalloc(&d, sizeof flag) == cudaSuccess;
    if (ready) {
        wgmma_present_kernel<<<1, 1>>>(d);
        ready =
            cudaMemcpy(&flag, d, sizeof flag, cudaMemcpyDeviceToHost) == cudaSuccess && flag == 1;
    }
    if (d) cudaFree(d);
    cudaGetLastError();
    return ready == 1;
}

template <typename T>
static lb_status bwd_wgmma(void *dqkv, float *dbias, const float *Dsum, float *dq_acc,
                           const void *dout, const void *qkv, const float *lse, int B, int T_,
                           int NH, int NKV, cudaStream_t s, lb_err *err) {
    /* K, V (128 rows), the Q and dO stages, two dS^T buffers; lse and D stages */
    size_t smem = (8 + 2 * WSTAGES) * CM_TILE * sizeof(T) + 2 * WSTAGES * WBQ * sizeof(float);
    LB_CUDA_TRY(err, cudaFuncSetAttribute(attn_bwd_wgmma_kernel<T>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    unsigned blocks = (unsigned)((T_ + WK - 1) / WK) * (unsigned)NKV * (unsigned)B;
    attn_bwd_wgmma_kernel<T><<<blocks, 256, smem, s>>>((T *)dqkv, dbias, dq_acc, (const T *)dout,
                                                       (const T *)qkv, lse, Dsum, B, T_, NH, NKV);
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}

lb_status lb_attention_wgmma_backward(void *dqkv, float *dbias, const float *Dsum, float *dq_acc,
                                      const void *dout, const void *qkv, const float *lse, int B,
                                      int T, int NH, int NKV, lb_gpu_dtype dt, cudaStream_t s,
                                      lb_err *err) {
    if (dt == LB_DT_BF16)
        return bwd_wgmma<__nv_bfloat16>(dqkv, dbias, Dsum, dq_acc, dout, qkv, lse, B, T, NH, NKV, s,
                                        err);
    return bwd_wgmma<__half>(dqkv, dbias, Dsum, dq_acc, dout, qkv, lse, B, T, NH, NKV, s, err);
}
