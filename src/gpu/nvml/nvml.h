/* nvml.h: NVIDIA's management library, loaded with dlopen at run time.
 *
 * llmbench never links libnvidia-ml: a machine without the driver still runs every CPU
 * command, and the CI build needs no driver. lb_nvml_open() loads the library once; every
 * query then answers false when NVML or the value is unavailable, and callers report the
 * value as missing rather than failing. Used for provenance (names, memory, driver) and
 * for the telemetry sampler during timed GPU steps. */
#ifndef LB_GPU_NVML_NVML_H
#define LB_GPU_NVML_NVML_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    double gpu_util_pct; /* percent of time a kernel was running */
    uint64_t mem_used_bytes;
    double power_w;
    double power_limit_w; /* the limit the driver enforces now */
    uint64_t energy_mj;   /* total since driver load, millijoules */
    uint32_t sm_clock_mhz;
    uint32_t temp_c;        /* GPU die */
    uint64_t clock_reasons; /* why clocks are below their maximum: LB_NVML_CLOCKS_* bits */
    bool has_util, has_mem, has_power, has_power_limit, has_energy, has_clock, has_temp,
        has_reasons;
} lb_nvml_sample;

/* Clock event reasons (NVML's nvmlClocksEventReason* bits) */
#define LB_NVML_CLOCKS_IDLE           0x1ull
#define LB_NVML_CLOCKS_SW_POWER_CAP   0x4ull
#define LB_NVML_CLOCKS_HW_SLOWDOWN    0x8ull
#define LB_NVML_CLOCKS_SW_THERMAL     0x20ull
#define LB_NVML_CLOCKS_HW_THERMAL     0x40ull
#define LB_NVML_CLOCKS_HW_POWER_BRAKE 0x80ull
/* held down by the power limit, by temperature (or an external slowdown signal) */
#define LB_NVML_CLOCKS_POWER (LB_NVML_CLOCKS_SW_POWER_CAP | LB_NVML_CLOCKS_HW_POWER_BRAKE)
#define LB_NVML_CLOCKS_THERMAL                                                                     \
    (LB_NVML_CLOCKS_SW_THERMAL | LB_NVML_CLOCKS_HW_THERMAL | LB_NVML_CLOCKS_HW_SLOWDOWN)

/* Loads libnvidia-ml.so.1 and initialises it; false (with a reason) when absent. */
bool lb_nvml_open(char *why, size_t why_len);
void lb_nvml_close(void);
int lb_nvml_device_count(void);
bool lb_nvml_device_name(int index, char *name, size_t len);
bool lb_nvml_device_memory(int index, uint64_t *total_bytes, uint64_t *used_bytes);
bool lb_nvml_driver_version(char *version, size_t len);
bool lb_nvml_sample_device(int index, lb_nvml_sample *out);

/* The driver's own buffered readings, finer than polling: power every ~20 ms (W), and
 * GPU utilisation every ~1/6 s (percent of the time since its previous reading that a
 * kernel ran), each stamped with the realtime clock in microseconds. The driver keeps
 * only the last seconds of them (~120 power readings), so a sampler fetches them as it
 * goes. */
typedef struct {
    uint64_t t_us; /* realtime clock (gettimeofday), microseconds */
    double value;
} lb_nvml_reading;
typedef enum { LB_NVML_POWER_READINGS, LB_NVML_UTIL_READINGS } lb_nvml_buffer;
/* Readings of `which` newer than since_us, oldest first: the newest `max` of them.
 * Returns how many (0 when NVML, the device or the readings are unavailable). */
int lb_nvml_buffered(int index, lb_nvml_buffer which, uint64_t since_us, lb_nvml_reading *out,
                     int max);

/* What decides how fast a GPU talks to others: its PCI address, PCIe link now and at most,
 * uncorrected ECC errors since boot, maximum clocks, and each active NVLink's far end. */
typedef struct {
    char bus_id[32]; /* "00000000:1B:00.0" */
    unsigned int pcie_gen, pcie_width, pcie_max_gen, pcie_max_width;
    unsigned long long ecc_uncorrected;
    unsigned int sm_clock_max_mhz, mem_clock_max_mhz;
    int n_nvlinks;            /* active links */
    char nvlink_peer[18][32]; /* each active link's far end (PCI address; "" unknown) */
    bool has_pcie, has_ecc;
} lb_nvml_links;

bool lb_nvml_device_links(int index, lb_nvml_links *out);
/* The CUDA version the driver supports (12040 = 12.4). */
bool lb_nvml_cuda_driver_version(int *version);
/* Whether two PCI addresses name the same function ("0000:1b:00.0" = "00000000:1B:00.0"). */
bool lb_nvml_same_pci(const char *a, const char *b);
/* NVML's index of the GPU at a PCI address (CUDA's ordinals may differ); -1 if none. */
int lb_nvml_index_of_pci(const char *bus_id);
/* NVLinks between two GPUs of this host: the links of the first whose far end is the
 * second, or, when they meet through NVSwitches (far ends are switches) and NVML says
 * they are NVLink peers, all of the first's active links (nvidia-smi topo's NV18 on an
 * HGX board); 0 when they talk over PCIe; -1 when NVML cannot tell. */
int lb_nvml_nvlinks_between(const char *bus_a, const char *bus_b);

#endif
