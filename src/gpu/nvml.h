/* nvml.h: NVIDIA's management library, loaded with dlopen at run time.
 *
 * llmbench never links libnvidia-ml: a machine without the driver still runs every CPU
 * command, and the CI build needs no driver. lb_nvml_open() loads the library once; every
 * query then answers false when NVML or the value is unavailable, and callers report the
 * value as missing rather than failing. Used for provenance (names, memory, driver) and
 * for the telemetry sampler during timed GPU steps. */
#ifndef LB_GPU_NVML_H
#define LB_GPU_NVML_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    double gpu_util_pct;      /* percent of time a kernel was running */
    uint64_t mem_used_bytes;
    double power_w;
    uint64_t energy_mj;       /* total since driver load, millijoules */
    uint32_t sm_clock_mhz;
    bool has_util, has_mem, has_power, has_energy, has_clock;
} lb_nvml_sample;

/* Loads libnvidia-ml.so.1 and initialises it; false (with a reason) when absent. */
bool lb_nvml_open(char *why, size_t why_len);
void lb_nvml_close(void);
int lb_nvml_device_count(void);
bool lb_nvml_device_name(int index, char *name, size_t len);
bool lb_nvml_device_memory(int index, uint64_t *total_bytes, uint64_t *used_bytes);
bool lb_nvml_driver_version(char *version, size_t len);
bool lb_nvml_sample_device(int index, lb_nvml_sample *out);

#endif
