/* peak.h: dense peak FLOP/s of NVIDIA GPUs per precision, and MFU.
 *
 * The table holds the vendors' published dense (not 2:4 sparse) figures for the SXM/PCIe
 * parts named below; a GPU is matched by substrings of its CUDA/NVML name, most specific
 * first (so "H100 NVL" is not read as an H100 SXM, nor an A100 as an A10). fp32 without
 * TF32 counts the plain FP32 rate; fp32 with TF32 the TF32 tensor rate; fp32 by the 3xTF32 split a
 * third of it (each product is three TF32 products); fp32 by int8 digit planes the int8 tensor rate
 * over the number of int8 multiply-adds each fp32 one takes (S (S + 1) / 2 for S digits,
 * gpu/blas/slices.h); fp32 with each product the faster of the two (the default) the larger of
 * those rates; fp16 and bf16 the 16-bit tensor rate. A GPU not in the table has no peak (0) and MFU
 * is then reported only when the user gives --peak-tflops. Not here: clocks (figures are at boost
 * clock). */
#ifndef LB_GPU_NVML_PEAK_H
#define LB_GPU_NVML_PEAK_H

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    LB_PEAK_FP32 = 0,  /* plain fp32 (CUDA cores) */
    LB_PEAK_TF32,      /* fp32 storage, TF32 tensor cores */
    LB_PEAK_3XTF32,    /* fp32 products as three TF32 passes (near-fp32 error): TF32 rate / 3 */
    LB_PEAK_BF16,      /* bf16 and fp16 tensor cores, fp32 accumulate */
    LB_PEAK_INT8_FP32, /* fp32 products as int8 digit planes: int8 rate / S (S + 1) / 2 */
    LB_PEAK_FP32_AUTO, /* fp32 products either way, each the faster: the larger of the two */
} lb_peak_kind;

typedef struct {
    const char *model;                            /* our label: "H100 SXM" */
    double fp32_tflops, tf32_tflops, bf16_tflops; /* dense, TFLOP/s */
    double int8_tops;                             /* dense, TOP/s */
} lb_peak_entry;

/* Finds the table entry for a device name such as "NVIDIA H100 80GB HBM3"; NULL when
 * unknown. The pointer is to static storage. */
const lb_peak_entry *lb_peak_lookup(const char *device_name);
/* Dense peak in FLOP/s of this entry for kind; 0 for NULL. */
double lb_peak_flops(const lb_peak_entry *e, lb_peak_kind kind);
/* Model FLOPs utilisation: achieved / peak (both FLOP/s); NaN when peak <= 0. */
double lb_peak_mfu(double achieved_flops_per_s, double peak_flops_per_s);

#ifdef __cplusplus
}
#endif

#endif
