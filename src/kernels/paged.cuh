/* paged.cuh: the paged key/value cache of the inference engine (C-callable): storing a
 * step's keys and values, and attention over the cache (model/ref.h's
 * lb_ref_paged_attention is the reference).
 *
 * The cache holds per layer k_cache and v_cache [n_blocks, block_size, NKV, HD] of type
 * dt; a token's place is its slot, block * block_size + row. Attention runs one block of
 * four warps per (token, kv head): the query heads that share the kv head are scored
 * together, each warp walks a quarter of the token's context 32 keys at a time (a key
 * per lane) with an online softmax, and the warps' partial results are merged at the end.
 * The same kernel serves prefill chunks and decodes (every token attends to positions
 * 0..pos of its sequence). HD 64 or 128; 1, 2, 4 or 8 query heads per kv head. For fp16
 * and bf16 over blocks of a multiple of 16 tokens the warps score 16 keys at a time on
 * tensor cores instead (mma.sync; the probabilities rounded to the type for the product
 * with the values, the softmax sums in fp32): paged.cu says how.
 *
 * A decode batch has too few (token, kv head) pairs to fill the GPU (batch 1 of
 * Llama-3.1-8B: 8 blocks), so the context can be split (flash-decoding): n_split blocks
 * per pair each take a contiguous share of the keys and write their normalised output
 * and log-sum-exp to scratch, and a second kernel merges the shares. The split count is
 * the caller's (fixed per launch, so a captured graph serves any context length);
 * lb_paged_splits gives the one that fills the GPU. The store and attention kernels are
 * launched programmatically dependent on the kernel before them (gpu/common.cuh). */
#ifndef LB_KERNELS_PAGED_CUH
#define LB_KERNELS_PAGED_CUH

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "core/status.h"
#include "gpu/dtype.h"

/* k and v of token i (columns NH*HD.. of qkv [N, (NH+2*NKV)*HD]) to slot[i]. With a RoPE
 * table cs (kernels/rope.cuh's) the token's q and k heads are rotated first, in place, to
 * its position pos[i] (as lb_rope_forward rotates position t), and the rotated k is
 * stored; cs NULL: no rotation (pos unread). HD a multiple of 16. */
lb_status lb_paged_kv_store(void *k_cache, void *v_cache, void *qkv, const float *cs,
                            const int32_t *pos, const int32_t *slot, int N, int NH, int NKV, int HD,
                            lb_gpu_dtype dt, cudaStream_t s, lb_err *err);

#define LB_PAGED_MAX_SPLITS 16

/* Splits of each context that give N tokens of NKV kv heads about two blocks per SM
 * (1 when N * NKV fills the n_sm SMs already; at most LB_PAGED_MAX_SPLITS). */
int lb_paged_splits(int N, int NKV, int n_sm);

/* Device scratch lb_paged_attention needs for n_split splits (0 when n_split is 1). */
size_t lb_paged_scratch_bytes(int N, int NH, int HD, int n_split);

/* out [N, NH*HD] = attention of token i (sequence seq_of[i], position pos[i]) over the
 * cache, as lb_ref_paged_attention, each context split n_split ways (1 to
 * LB_PAGED_MAX_SPLITS; scratch of lb_paged_scratch_bytes when more than 1). Every pointer
 * is device memory. */
lb_status lb_paged_attention(void *out, void *scratch, int n_split, const void *qkv,
                             const void *k_cache, const void *v_cache, const int32_t *block_table,
                             int max_blocks, const int32_t *seq_of, const int32_t *pos, int N,
                             int NH, int NKV, int HD, int block_size, lb_gpu_dtype dt,
                             cudaStream_t s, lb_err *err);

#ifdef __cplusplus
}
#endif

#endif
