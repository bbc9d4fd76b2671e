/* telemetry.h: a background thread that samples NVML while GPU work is timed.
 *
 * lb_gpu_telemetry_start() opens NVML, takes a first sample and starts a thread that
 * samples every period_ms (50-100 ms is the intended range: NVML's utilisation counter
 * itself averages over a window of that order); lb_gpu_telemetry_stop() takes a last
 * sample, joins the thread and summarises. Energy is the difference of the driver's
 * energy counter between the first and last samples when the GPU has one, otherwise the
 * trapezoid integral of the power samples. The clock event reasons say why the SM clock
 * ran below its maximum: the share of samples held down by the power limit, and by
 * temperature, tells a slow run on a hot or power-capped GPU from slow code. Without NVML the sampler starts anyway and the
 * summary says nothing was measured (has_* false): telemetry never fails a run. The NVML
 * device index is the CUDA ordinal; with CUDA_VISIBLE_DEVICES remapping them it may name
 * another GPU (noted in the summary's device_name). Samples are kept (at 100 ms, an hour
 * is 36k samples) so a caller can store them as series. */
#ifndef LB_GPU_TELEMETRY_H
#define LB_GPU_TELEMETRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpu/nvml.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    double t_s; /* seconds since start */
    lb_nvml_sample s;
} lb_gpu_tsample;

typedef struct {
    size_t n_samples;
    double duration_s;
    double mean_util_pct;   /* mean of utilisation samples */
    double peak_mem_bytes;  /* largest memory-used sample */
    double mean_power_w;
    double energy_j;        /* over the sampled window */
    double mean_sm_clock_mhz;
    double power_limit_w;    /* the last sample's enforced limit */
    double max_temp_c;
    double power_capped_pct; /* samples whose clocks the power limit held down */
    double thermal_pct;      /* samples whose clocks temperature held down */
    bool has_util, has_mem, has_power, has_energy, has_clock, has_power_limit, has_temp,
        has_reasons;
} lb_gpu_telemetry_summary;

typedef struct lb_gpu_telemetry lb_gpu_telemetry;

/* Starts sampling device `device_index`. Returns NULL only when the host is out of
 * memory or cannot start a thread. Caller stops it with lb_gpu_telemetry_stop. */
lb_gpu_telemetry *lb_gpu_telemetry_start(int device_index, int period_ms);
/* Takes the last sample, joins the thread, fills *out, and frees t (NULL is fine: *out is
 * then all zero). If samples/n_samples are non-NULL they receive a malloc'ed copy of the
 * samples that the caller frees. */
void lb_gpu_telemetry_stop(lb_gpu_telemetry *t, lb_gpu_telemetry_summary *out,
                           lb_gpu_tsample **samples, size_t *n_samples);

/* The summary of a sample array (used by stop; exposed for tests). */
void lb_gpu_telemetry_summarize(const lb_gpu_tsample *s, size_t n, lb_gpu_telemetry_summary *out);

#ifdef __cplusplus
}
#endif

#endif
