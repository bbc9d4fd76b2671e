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
    double power_limit_w;     /* the limit the driver enforces now */
    uint64_t energy_mj;       /* total since driver load, millijoules */
    uint32_t sm_clock_mhz;
    uint32_t temp_c;          /* GPU die */
    uint64_t clock_reasons;   /* why clocks are below their maximum: LB_NVML_CLOCKS_* bits */
    bool has_util, has_mem, has_power, has_power_limit, has_energy, has_clock, has_temp,
        has_reasons;
} lb_nvml_sample;

/* Clock event reasons (NVML's nvmlClocksEventReason* bits) */
#define LB_NVML_CLOCKS_IDLE 0x1ull
#define LB_NVML_CLOCKS_SW_POWER_CAP 0x4ull
#define LB_NVML_CLOCKS_HW_SLOWDOWN 0x8ull
#define LB_NVML_CLOCKS_SW_THERMAL 0x20ull
#define LB_NVML_CLOCKS_HW_THERMAL 0x40ull
#define LB_NVML_CLOCKS_HW_POWER_BRAKE 0x80ull
/* held down by the power limit, by temperature (or an external slowdown signal) */
#define LB_NVML_CLOCKS_POWER (LB_NVML_CLOCKS_SW_POWER_CAP | LB_NVML_CLOCKS_HW_POWER_BRAKE)
#define LB_NVML_CLOCKS_THERMAL \
    (LB_NVML_CLOCKS_SW_THERMAL | LB_NVML_CLOCKS_HW_THERMAL | LB_NVML_CLOCKS_HW_SLOWDOWN)

/* Loads libnvidia-ml.so.1 and initialises it; false (with a reason) when absent. */
bool lb_nvml_open(char *why, size_t why_len);
void lb_nvml_close(void);
int lb_nvml_device_count(void);
bool lb_nvml_device_name(int index, char *name, size_t len);
bool lb_nvml_device_memory(int index, uint64_t *total_bytes, uint64_t *used_bytes);
bool lb_nvml_driver_version(char *version, size_t len);
bool lb_nvml_sample_device(int index, lb_nvml_sample *out);

#endif
