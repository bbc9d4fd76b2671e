/* ptx.cuh: the inline-PTX tensor-core helpers llmbench's kernels and bench/ probes share.
 *
 * mma.sync m16n8k16 (row.col) with fp32 accumulation, fragment conventions, lane = 4g + t:
 *   A (16x16): a0 = (g, 2t..2t+1), a1 = (g+8, 2t..), a2 = (g, 2t+8..), a3 = (g+8, 2t+8..)
 *   B (16x8, k x n): b0 = (k 2t..2t+1, n g), b1 = (k 2t+8.., n g)
 *   C (16x8): c0,c1 = (g, 2t..2t+1), c2,c3 = (g+8, 2t..2t+1)
 * so two adjacent C tiles of a product are exactly the A fragment of the next one
 * (afrag_from_c). ldmatrix.x4 (.trans for operands stored [k][n]) and cp.async copies.
 *
 * Hopper's warpgroup MMA (wgmma.mma_async, sm_90a): one warpgroup (4 warps) multiplies a
 * 64-row A by B into an fp32 accumulator laid out per warp as mma.sync's C (warp w: rows
 * 16w..16w+15). Operands in shared memory are described, not loaded (wg_desc): the
 * core-matrix layout without swizzle, 8 rows x 16 bytes per 128-byte core matrix.
 * bench/wgmma_probe.cu checks these descriptors and the accumulator layout on a GPU. The
 * wgmma instructions are emitted only when compiling for sm_90a (LB_WGMMA); elsewhere
 * they compile to nothing, and callers keep such code from running (a kernel that uses
 * them checks LB_WGMMA, launchers ask lb_attention_wgmma()).
 *
 * Device code only, every helper inline; no launch, no state. */
#ifndef LB_KERNELS_PTX_CUH
#define LB_KERNELS_PTX_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

/* ------------------------------------------------------------------------------------ */
/* mma.sync, ldmatrix, cp.async                                                          */

template <typename T> struct mma_op;
template <> struct mma_op<__nv_bfloat16> {
    static __device__ __forceinline__ void run(float c[4], const uint32_t a[4], uint32_t b0,
                                               uint32_t b1) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                     "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
        __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<uint32_t *>(&v);
    }
};
template <> struct mma_op<__half> {
    static __device__ __forceinline__ void run(float c[4], const uint32_t a[4], uint32_t b0,
                                               uint32_t b1) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
                     "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
        __half2 v = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<uint32_t *>(&v);
    }
};

/* Two adjacent 16x8 accumulator tiles (columns 0-7 and 8-15 of a 16-wide step) as the A
 * fragment of the next product, rounded to T. */
template <typename T>
__device__ __forceinline__ void afrag_from_c(uint32_t a[4], const float c0[4], const float c1[4]) {
    a[0] = mma_op<T>::pack(c0[0], c0[1]);
    a[1] = mma_op<T>::pack(c0[2], c0[3]);
    a[2] = mma_op<T>::pack(c1[0], c1[1]);
    a[3] = mma_op<T>::pack(c1[2], c1[3]);
}

__device__ __forceinline__ void ldsm_x4(uint32_t r[4], const void *p) {
    uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t r[4], const void *p) {
    uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

/* Asynchronous global -> shared copies; an invalid source copies nothing and zero-fills. */
__device__ __forceinline__ void cp_async16(void *dst, const void *src, bool valid) {
    uint32_t d = (uint32_t)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src),
                 "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async4(void *dst, const void *src, bool valid) {
    uint32_t d = (uint32_t)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src),
                 "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n");
}
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/* ------------------------------------------------------------------------------------ */
/* warpgroup MMA (sm_90a)                                                                */

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define LB_WGMMA 1
#endif

/* descriptor of a core-matrix operand at smem: leading byte offset (between cores
 * adjacent along k), stride byte offset (along m or n); no swizzle, base offset 0 */
__device__ __forceinline__ uint64_t wg_desc(const void *smem, int lbo, int sbo) {
    uint32_t a = (uint32_t)__cvta_generic_to_shared(smem);
    return (uint64_t)((a & 0x3FFFF) >> 4) | ((uint64_t)(lbo >> 4) << 16) |
           ((uint64_t)(sbo >> 4) << 32);
}

#define WG_ACC(d)                                                                                  \
    "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]),      \
        "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),  \
        "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]),  \
        "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),  \
        "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]),  \
        "+f"(d[7][2]), "+f"(d[7][3])
#define WG_D                                                                                       \
    "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,"      \
    "%24,%25,%26,%27,%28,%29,%30,%31}"
/* the PTX of one m64n64k16 product for the element type E ("bf16" or "f16"):
 * SS: d (+)= A B^T, both K-major in shared memory, scale_d 0 overwrites d;
 * RS: d += A B, A from registers (mma.sync's A fragment per warp), B N-major in shared */
#define WG_SS(E)                                                                                   \
    "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\nwgmma.mma_async.sync.aligned.m64n64k16.f32." E      \
    "." E " " WG_D ", %32, %33, p, 1, 1, 0, 0;\n}\n"
#define WG_RS(E)                                                                                   \
    "wgmma.mma_async.sync.aligned.m64n64k16.f32." E "." E " " WG_D                                 \
    ", {%32,%33,%34,%35}, %36, 1, 1, 1, 1;\n"
#define WG_ACC16(d)                                                                                \
    "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]),      \
        "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),  \
        "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3])
/* SS m64n32k16 with both operands MN-major in shared memory (A transposed, B N-major):
 * d (+)= A B for A stored [k][m] and B stored [k][n] */
#define WG_SS_TT(E)                                                                                \
    "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\nwgmma.mma_async.sync.aligned.m64n32k16.f32." E      \
    "." E                                                                                          \
    " {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, %16, %17, p, 1, 1, 1, 1;\n}\n"

/* wg_op<T>: the products above for T's PTX type name E */
template <typename T> struct wg_op;
#ifdef LB_WGMMA
#define WG_ASM(...) asm volatile(__VA_ARGS__)
#else
#define WG_ASM(...)
#endif
#define WG_OP(T, E)                                                                                \
    template <> struct wg_op<T> {                                                                  \
        static __device__ __forceinline__ void ss(float d[8][4], uint64_t da, uint64_t db,         \
                                                  int scale_d) {                                   \
            WG_ASM(WG_SS(E) : WG_ACC(d) : "l"(da), "l"(db), "r"(scale_d));                         \
        }                                                                                          \
        static __device__ __forceinline__ void rs_tb(float d[8][4], const uint32_t a[4],           \
                                                     uint64_t db) {                                \
            WG_ASM(WG_RS(E) : WG_ACC(d) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));    \
        }                                                                                          \
        static __device__ __forceinline__ void ss_tt(float d[4][4], uint64_t da, uint64_t db,      \
                                                     int scale_d) {                                \
            WG_ASM(WG_SS_TT(E) : WG_ACC16(d) : "l"(da), "l"(db), "r"(scale_d));                    \
        }                                                                                          \
    };
WG_OP(__nv_bfloat16, "bf16")
WG_OP(__half, "f16")

__device__ __forceinline__ void wg_fence() {
#ifdef LB_WGMMA
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wg_commit() {
#ifdef LB_WGMMA
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
/* waits until at most N of this warpgroup's committed groups are still running */
template <int N> __device__ __forceinline__ void wg_wait() {
#ifdef LB_WGMMA
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
/* shared-memory writes of the generic proxy (cp.async) made visible to wgmma's reads */
__device__ __forceinline__ void fence_async_shared() {
#ifdef LB_WGMMA
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
/* keeps the compiler from moving accumulator registers inside a wgmma pipeline stage
 * (ptxas serialises the wgmmas otherwise) */
template <int N> __device__ __forceinline__ void wg_pin(float (&d)[N][4]) {
#pragma unroll
    for (int i = 0; i < N; i++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            asm volatile("" : "+f"(d[i][e])::"memory");
}
/* the same for A fragments a register-sourced wgmma may still be reading */
__device__ __forceinline__ void wg_pin_a(uint32_t a[4][4]) {
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            asm volatile("" : "+r"(a[i][e])::"memory");
}

#endif
