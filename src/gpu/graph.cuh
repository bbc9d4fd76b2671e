/* graph.cuh: edits of a captured CUDA graph before it is instantiated. C-callable.
 * Not here: the capture itself (model/model_gpu.c). */
#ifndef LB_GPU_GRAPH_CUH
#define LB_GPU_GRAPH_CUH

#include <cuda_runtime.h>
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

#ifdef __cplusplus
}
#endif

#endif
