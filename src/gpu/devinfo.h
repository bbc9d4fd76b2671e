/* devinfo.h: what this machine's GPU stack is, for provenance and `llmbench env`.
 *
 * Adds to a provenance object: "gpus" (name, memory, from NVML), "driver", "cuda_runtime"
 * and "cuda_devices" (from the CUDA runtime, when built with CUDA), "nccl" (when built
 * with NCCL). Missing pieces are absent keys or nulls, never errors. */
#ifndef LB_GPU_DEVINFO_H
#define LB_GPU_DEVINFO_H

#include <jansson.h>

void lb_devinfo_add(json_t *provenance);
/* Number of CUDA devices usable by this process (0 without CUDA or without a GPU). */
int lb_devinfo_cuda_device_count(void);

#endif
