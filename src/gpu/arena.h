/* arena.h: every device byte of a run comes from one cudaMalloc, carved into named pieces.
 *
 * The idea is llm.c's malloc_and_point_parameters: a user lays its buffers out twice with
 * the same code, first into a sizing arena (no device memory; it only adds up aligned
 * sizes, so the need is known before anything is allocated and an out-of-memory message
 * can say how much was needed against how much was free), then into a real arena of
 * exactly that size. Each piece keeps its name, offset and size, so peak device bytes by
 * our own accounting are exact; lb_gpu_arena_sample_driver() adds the driver's view
 * (cudaMemGetInfo: total minus free, which also counts the CUDA context, cuBLAS and other
 * processes). Pieces are never freed one by one: the arena is freed as a whole. The arena
 * is not thread-safe. Sizing works without a GPU (and without CUDA), which the CPU tests
 * use; the real arena needs a CUDA build. */
#ifndef LB_GPU_ARENA_H
#define LB_GPU_ARENA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "core/status.h"

#define LB_GPU_ARENA_ALIGN 256 /* bytes: every piece starts on this boundary */

typedef struct {
    char name[48];
    size_t offset; /* bytes from the arena's base */
    size_t bytes;  /* as asked, before alignment */
} lb_gpu_piece;

typedef struct {
    bool sizing;           /* true: no device memory, pointers are NULL */
    unsigned char *base;   /* device memory (NULL when sizing) */
    size_t capacity_bytes; /* size of the one allocation (0 when sizing) */
    size_t used_bytes;     /* aligned bytes handed out so far */
    lb_gpu_piece *pieces;  /* owned */
    size_t n_pieces, cap_pieces;
    size_t driver_used_peak_bytes; /* largest total-minus-free seen by sample_driver */
    size_t driver_total_bytes;
} lb_gpu_arena;

/* A sizing arena: allocations only count. Never fails. */
void lb_gpu_arena_init_sizing(lb_gpu_arena *a);
/* One cudaMalloc of capacity_bytes on the current device. On failure: LB_ERR_NOMEM with
 * "needed X GiB, Y GiB free of Z GiB" and `hint` (e.g. "try a smaller --batch or
 * --recompute"; may be NULL) in err. */
lb_status lb_gpu_arena_init(lb_gpu_arena *a, size_t capacity_bytes, const char *hint, lb_err *err);
/* Frees the device memory and the piece table; a NULL or zeroed arena is fine. */
void lb_gpu_arena_free(lb_gpu_arena *a);

/* Carves `bytes` named `name` (copied, truncated to 47 chars). *out is the device pointer
 * (NULL in a sizing arena). LB_ERR_NOMEM when the piece does not fit (a real arena sized
 * with different code than it is filled with). */
lb_status lb_gpu_arena_alloc(lb_gpu_arena *a, const char *name, size_t bytes, void **out,
                             lb_err *err);

/* Reads cudaMemGetInfo and raises driver_used_peak_bytes; no-op without CUDA. */
void lb_gpu_arena_sample_driver(lb_gpu_arena *a);

/* Bytes of the pieces whose name starts with prefix (all pieces for ""). */
size_t lb_gpu_arena_bytes_with_prefix(const lb_gpu_arena *a, const char *prefix);

#ifdef __cplusplus
}
#endif

#endif
