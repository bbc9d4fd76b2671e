/* telemetry.h: a background thread that samples NVML while GPU work is timed.
 *
 * lb_gpu_telemetry_start() opens NVML, takes a first sample and starts a thread that
 * samples every period_ms (50-100 ms is the intended range); lb_gpu_telemetry_stop()
 * takes a last sample, joins the thread and summarises the window between the first and
 * last samples. NVML's polled power and utilisation are trailing averages over up to a
 * second, so a timed run shorter than a few seconds would read them low (they reach back
 * into the idle set-up before it). Each poll therefore also collects the driver's own
 * buffered readings (power every ~20 ms; utilisation every ~1/6 s, each the share of
 * the time since the one before), and the summary takes mean power and utilisation from
 * those that fall inside the window, energy as that mean power times the window. Where
 * the driver has no such readings the polled values stand: energy is then the
 * difference of the driver's energy counter between the first and last samples (it moves
 * every ~100 ms), or the trapezoid integral of the power samples. The clock event
 * reasons say why the SM clock ran below its maximum: the share of samples held down by
 * the power limit, and by temperature, tells a slow run on a hot or power-capped GPU from
 * slow code. Without NVML the sampler starts anyway and the summary says nothing was
 * measured (has_* false): telemetry never fails a run. The GPU is named by its PCI
 * address, not by an ordinal: NVML numbers every GPU of the host, while CUDA numbers only
 * those CUDA_VISIBLE_DEVICES leaves (as Slurm and Kubernetes set it), so CUDA's device 0
 * may be NVML's device 3. Samples are kept (at 100 ms, an hour is 36k samples) so a
 * caller can store them as series. */
#ifndef LB_GPU_NVML_TELEMETRY_H
#define LB_GPU_NVML_TELEMETRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpu/nvml/nvml.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    double t_s; /* seconds since start */
    lb_nvml_sample s;
} lb_gpu_tsample;

/* One of the driver's buffered readings on the samples' clock. */
typedef struct {
    double t_s; /* seconds since start */
    double value;
} lb_gpu_treading;

/* What a summary is made from. */
typedef struct {
    const lb_gpu_tsample
        *samples; /* polled, the first at the window's start, the last at its end */
    size_t n_samples;
    const lb_gpu_treading *power; /* the driver's power readings (W), in time order */
    size_t n_power;
    const lb_gpu_treading *util; /* the driver's utilisation readings (%), in time order */
    size_t n_util;
} lb_gpu_telemetry_data;

typedef struct {
    size_t n_samples;
    size_t n_power_readings; /* the driver's power readings inside the window */
    double duration_s;
    double mean_util_pct;  /* the driver's readings in the window, else the polled mean */
    double peak_mem_bytes; /* largest memory-used sample */
    double mean_power_w;
    double energy_j; /* over the sampled window */
    double mean_sm_clock_mhz;
    double power_limit_w; /* the last sample's enforced limit */
    double max_temp_c;
    double power_capped_pct; /* samples whose clocks the power limit held down */
    double thermal_pct;      /* samples whose clocks temperature held down */
    bool has_util, has_mem, has_power, has_energy, has_clock, has_power_limit, has_temp,
        has_reasons;
    bool util_from_readings; /* mean_util_pct from the driver's readings, not polls */
} lb_gpu_telemetry_summary;

typedef struct lb_gpu_telemetry lb_gpu_telemetry;

/* Starts sampling the GPU at PCI address pci_bus_id (cudaDeviceGetPCIBusId's form; an
 * address NVML does not know gives no samples). Returns NULL only when the host is out of
 * memory or cannot start a thread. Caller stops it with lb_gpu_telemetry_stop. */
lb_gpu_telemetry *lb_gpu_telemetry_start(const char *pci_bus_id, int period_ms);
/* Takes the last sample, joins the thread, fills *out, and frees t (NULL is fine: *out is
 * then all zero). If samples/n_samples are non-NULL they receive a malloc'ed copy of the
 * samples that the caller frees. */
void lb_gpu_telemetry_stop(lb_gpu_telemetry *t, lb_gpu_telemetry_summary *out,
                           lb_gpu_tsample **samples, size_t *n_samples);

/* The summary of the data (used by stop; exposed for tests). */
void lb_gpu_telemetry_summarize(const lb_gpu_telemetry_data *d, lb_gpu_telemetry_summary *out);

#ifdef __cplusplus
}
#endif

#endif
