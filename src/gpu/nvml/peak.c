/* peak.c: the dense peak table (gpu/nvml/peak.h). Figures from NVIDIA's datasheets (dense =
 * half the "with sparsity" figure). H100 NVL and H200 NVL are the 400 W-class PCIe cards;
 * an "H100 80GB HBM3" is the SXM part. */
#include "gpu/nvml/peak.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#include "gpu/blas/slices.h"

typedef struct {
    const char *needle; /* substring of the device name */
    lb_peak_entry e;
} row;

/* Most specific needles first. */
static const row table[] = {
    {"H200 NVL", {"H200 NVL", 60.0, 417.5, 835.5, 1671.0}},
    {"H200", {"H200 SXM", 67.0, 494.7, 989.4, 1979.0}},
    {"H100 NVL", {"H100 NVL", 60.0, 417.5, 835.5, 1671.0}},
    {"H100 PCIe", {"H100 PCIe", 51.0, 378.0, 756.5, 1513.0}},
    {"H100", {"H100 SXM", 67.0, 494.7, 989.4, 1979.0}},
    {"A100", {"A100", 19.5, 156.0, 312.0, 624.0}},
    {"A30", {"A30", 10.3, 82.0, 165.0, 330.0}},
    {"L40S", {"L40S", 91.6, 183.0, 362.05, 733.0}},
    {"A10", {"A10", 31.2, 62.5, 125.0, 250.0}},
    {"L4", {"L4", 30.3, 60.0, 121.0, 242.5}},
};

const lb_peak_entry *lb_peak_lookup(const char *device_name) {
    if (device_name == NULL) return NULL;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        const char *hit = strstr(device_name, table[i].needle);
        if (hit == NULL) continue;
        /* the needle must end the name or be followed by a separator ("A10" vs "A100",
         * "L4" vs "L40") */
        char next = hit[strlen(table[i].needle)];
        if (next == '\0' || next == ' ' || next == '-' || next == '_') return &table[i].e;
    }
    return NULL;
}

double lb_peak_flops(const lb_peak_entry *e, lb_peak_kind kind) {
    if (e == NULL) return 0.0;
    switch (kind) {
    case LB_PEAK_FP32: return e->fp32_tflops * 1e12;
    case LB_PEAK_TF32: return e->tf32_tflops * 1e12;
    case LB_PEAK_3XTF32: return e->tf32_tflops * 1e12 / 3.0;
    case LB_PEAK_BF16: return e->bf16_tflops * 1e12;
    case LB_PEAK_INT8_FP32: return e->int8_tops * 1e12 / (LB_SLICES * (LB_SLICES + 1) / 2);
    case LB_PEAK_FP32_AUTO:
        return fmax(lb_peak_flops(e, LB_PEAK_FP32), lb_peak_flops(e, LB_PEAK_INT8_FP32));
    }
    return 0.0;
}

double lb_peak_mfu(double achieved, double peak) {
    if (!(peak > 0.0)) return NAN;
    return achieved / peak;
}
