/* graph.cuh: a step (training, or the engine's decode) captured as a CUDA graph, and the
 * edits of a captured graph before it is instantiated. C-callable. */
#ifndef LB_GPU_GRAPH_CUH
#define LB_GPU_GRAPH_CUH

#include <cuda_runtime.h>
#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "core/status.h"

/* Replaces every memset node of g that sets at most max_bytes (width x height x element
 * size) by a kernel node writing the same values, with the same dependencies and dependents.
 * cuBLASLt and cuDNN set a few bytes of their workspace before most of their kernels; in a
 * captured training step each such memset node between two kernels left ~3.3 us of idle
 * GPU around its ~0.9 us, where two kernels back to back leave ~0.3-0.6 us (docs/PERFORMANCE.md,
 * "What was tried: the step"). Memsets whose edges carry data (programmatic dependencies) are left
 * alone. g stays valid if this fails part way: a memset node goes only after its replacement has
 * all of its edges (until then both write the same bytes). *replaced counts the nodes replaced. */
lb_status lb_gpu_graph_memsets_to_kernels(cudaGraph_t g, size_t max_bytes, int *replaced,
                                          lb_err *err);

/* Memset nodes up to this size become kernel nodes in a captured step: cuBLASLt's and
 * cuDNN's (4 to 1,536 bytes) and the bias-gradient clears (9-12 KB); not the large clears. */
#define LB_GPU_GRAPH_FILL_MAX_BYTES 65536

/* Enqueues a step's work on the stream it is given (and on streams it forks from it and joins
 * back to it). */
typedef lb_status (*lb_gpu_graph_body)(void *ctx, cudaStream_t s, lb_err *err);

/* What body enqueues on s, captured (thread-local mode; nothing of it runs), its memsets of at
 * most LB_GPU_GRAPH_FILL_MAX_BYTES turned into kernel nodes, and instantiated into *exec; the
 * graph itself into *graph when graph is not NULL (the caller destroys it: its nodes name
 * those of *exec for cudaGraphExec*SetParams calls), else destroyed here. A capture the driver
 * refuses, or body's failure during it, is no error of this call: it returns false, *exec (and
 * *graph) NULL, why naming the reason, and the device state as before. */
bool lb_gpu_graph_capture(cudaStream_t s, lb_gpu_graph_body body, void *ctx, cudaGraph_t *graph,
                          cudaGraphExec_t *exec, char *why, size_t why_cap);

#ifdef __cplusplus
}
#endif

#endif
