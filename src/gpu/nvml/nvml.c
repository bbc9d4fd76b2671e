/* nvml.c: the dlopen'ed subset of NVML that llmbench uses.
 *
 * The function signatures below follow NVML's public C API (nvml.h); only opaque handles
 * and plain integers cross it, so no NVML header is needed at build time. */
#include "gpu/nvml/nvml.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

typedef void *nvml_device;
typedef struct {
    unsigned long long total, free, used;
} nvml_memory;
typedef struct {
    unsigned int gpu, memory;
} nvml_utilization;
typedef union {
    double d;
    unsigned int ui;
    unsigned long ul;
    unsigned long long ull;
    signed long long sll;
    signed int si;
    unsigned short us;
} nvml_value;
typedef struct {
    unsigned long long time_us;
    nvml_value value;
} nvml_buffered_sample;
typedef struct { /* nvmlPciInfo_t (v3) */
    char bus_id_legacy[16];
    unsigned int domain, bus, device, pci_device_id, pci_subsystem_id;
    char bus_id[32];
} nvml_pci;

#define NVML_SUCCESS                  0
#define NVML_CLOCK_SM                 1
#define NVML_TEMPERATURE_GPU          0
#define NVML_TOTAL_POWER_SAMPLES      0
#define NVML_GPU_UTILIZATION_SAMPLES  1
#define NVML_CLOCK_MEM                2
#define NVML_MEMORY_ERROR_UNCORRECTED 1
#define NVML_VOLATILE_ECC             0
#define NVML_NVLINK_MAX_LINKS         18
#define NVML_P2P_CAPS_INDEX_NVLINK    2
#define NVML_P2P_STATUS_OK            0
#define NVML_BUFFERED_MAX             512 /* the driver keeps ~120 power readings (2.4 s at 20 ms) */

static struct {
    void *lib;
    int refs;
    int (*init)(void);
    int (*shutdown)(void);
    int (*count)(unsigned int *);
    int (*handle)(unsigned int, nvml_device *);
    int (*name)(nvml_device, char *, unsigned int);
    int (*memory)(nvml_device, nvml_memory *);
    int (*driver)(char *, unsigned int);
    int (*util)(nvml_device, nvml_utilization *);
    int (*power)(nvml_device, unsigned int *);
    int (*energy)(nvml_device, unsigned long long *);
    int (*clock)(nvml_device, int, unsigned int *);
    int (*limit)(nvml_device, unsigned int *);
    int (*temp)(nvml_device, int, unsigned int *);
    int (*reasons)(nvml_device, unsigned long long *);
    int (*samples)(nvml_device, int, unsigned long long, int *, unsigned int *,
                   nvml_buffered_sample *);
    int (*cuda_driver)(int *);
    int (*pci)(nvml_device, nvml_pci *);
    int (*pcie_gen)(nvml_device, unsigned int *);
    int (*pcie_width)(nvml_device, unsigned int *);
    int (*pcie_max_gen)(nvml_device, unsigned int *);
    int (*pcie_max_width)(nvml_device, unsigned int *);
    int (*ecc)(nvml_device, int, int, unsigned long long *);
    int (*max_clock)(nvml_device, int, unsigned int *);
    int (*nvlink_state)(nvml_device, unsigned int, int *);
    int (*nvlink_remote)(nvml_device, unsigned int, nvml_pci *);
    int (*p2p_status)(nvml_device, nvml_device, int, int *);
    int (*by_pci)(const char *, nvml_device *);
} g_nvml;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

bool lb_nvml_open(char *why, size_t why_len) {
    pthread_mutex_lock(&g_lock);
    bool ok = true;
    if (g_nvml.refs == 0) {
        void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
        if (lib == NULL) {
            snprintf(why, why_len, "NVML not found (libnvidia-ml.so.1: no NVIDIA driver)");
            ok = false;
        } else {
#define LOAD(field, sym) *(void **)(&g_nvml.field) = dlsym(lib, sym)
            LOAD(init, "nvmlInit_v2");
            LOAD(shutdown, "nvmlShutdown");
            LOAD(count, "nvmlDeviceGetCount_v2");
            LOAD(handle, "nvmlDeviceGetHandleByIndex_v2");
            LOAD(name, "nvmlDeviceGetName");
            LOAD(memory, "nvmlDeviceGetMemoryInfo");
            LOAD(driver, "nvmlSystemGetDriverVersion");
            LOAD(util, "nvmlDeviceGetUtilizationRates");
            LOAD(power, "nvmlDeviceGetPowerUsage");
            LOAD(energy, "nvmlDeviceGetTotalEnergyConsumption");
            LOAD(clock, "nvmlDeviceGetClockInfo");
            LOAD(limit, "nvmlDeviceGetEnforcedPowerLimit");
            LOAD(temp, "nvmlDeviceGetTemperature");
            LOAD(reasons, "nvmlDeviceGetCurrentClocksEventReasons");
            LOAD(samples, "nvmlDeviceGetSamples");
            LOAD(cuda_driver, "nvmlSystemGetCudaDriverVersion_v2");
            LOAD(pci, "nvmlDeviceGetPciInfo_v3");
            LOAD(pcie_gen, "nvmlDeviceGetCurrPcieLinkGeneration");
            LOAD(pcie_width, "nvmlDeviceGetCurrPcieLinkWidth");
            LOAD(pcie_max_gen, "nvmlDeviceGetMaxPcieLinkGeneration");
            LOAD(pcie_max_width, "nvmlDeviceGetMaxPcieLinkWidth");
            LOAD(ecc, "nvmlDeviceGetTotalEccErrors");
            LOAD(max_clock, "nvmlDeviceGetMaxClockInfo");
            LOAD(nvlink_state, "nvmlDeviceGetNvLinkState");
            LOAD(nvlink_remote, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
            LOAD(p2p_status, "nvmlDeviceGetP2PStatus");
            LOAD(by_pci, "nvmlDeviceGetHandleByPciBusId_v2");
            if (g_nvml.reasons == NULL) /* drivers before the rename */
                LOAD(reasons, "nvmlDeviceGetCurrentClocksThrottleReasons");
#undef LOAD
            if (g_nvml.init == NULL || g_nvml.count == NULL || g_nvml.handle == NULL ||
                g_nvml.init() != NVML_SUCCESS) {
                snprintf(why, why_len, "NVML present but failed to initialise");
                dlclose(lib);
                memset(&g_nvml, 0, sizeof g_nvml);
                ok = false;
            } else {
                g_nvml.lib = lib;
            }
        }
    }
    if (ok) g_nvml.refs++;
    pthread_mutex_unlock(&g_lock);
    return ok;
}

void lb_nvml_close(void) {
    pthread_mutex_lock(&g_lock);
    if (g_nvml.refs > 0 && --g_nvml.refs == 0) {
        if (g_nvml.shutdown) g_nvml.shutdown();
        dlclose(g_nvml.lib);
        memset(&g_nvml, 0, sizeof g_nvml);
    }
    pthread_mutex_unlock(&g_lock);
}

static bool device(int index, nvml_device *dev) {
    return g_nvml.lib != NULL && g_nvml.handle((unsigned)index, dev) == NVML_SUCCESS;
}

int lb_nvml_device_count(void) {
    unsigned int n = 0;
    if (g_nvml.lib == NULL || g_nvml.count(&n) != NVML_SUCCESS) return 0;
    return (int)n;
}

bool lb_nvml_device_name(int index, char *name, size_t len) {
    nvml_device d;
    return device(index, &d) && g_nvml.name && g_nvml.name(d, name, (unsigned)len) == NVML_SUCCESS;
}

bool lb_nvml_device_memory(int index, uint64_t *total_bytes, uint64_t *used_bytes) {
    nvml_device d;
    nvml_memory m;
    if (!device(index, &d) || g_nvml.memory == NULL || g_nvml.memory(d, &m) != NVML_SUCCESS)
        return false;
    if (total_bytes) *total_bytes = m.total;
    if (used_bytes) *used_bytes = m.used;
    return true;
}

bool lb_nvml_driver_version(char *version, size_t len) {
    return g_nvml.lib != NULL && g_nvml.driver &&
           g_nvml.driver(version, (unsigned)len) == NVML_SUCCESS;
}

bool lb_nvml_sample_device(int index, lb_nvml_sample *out) {
    memset(out, 0, sizeof *out);
    nvml_device d;
    if (!device(index, &d)) return false;
    nvml_utilization u;
    if (g_nvml.util && g_nvml.util(d, &u) == NVML_SUCCESS) {
        out->gpu_util_pct = u.gpu;
        out->has_util = true;
    }
    nvml_memory m;
    if (g_nvml.memory && g_nvml.memory(d, &m) == NVML_SUCCESS) {
        out->mem_used_bytes = m.used;
        out->has_mem = true;
    }
    unsigned int mw;
    if (g_nvml.power && g_nvml.power(d, &mw) == NVML_SUCCESS) {
        out->power_w = mw / 1000.0;
        out->has_power = true;
    }
    unsigned long long mj;
    if (g_nvml.energy && g_nvml.energy(d, &mj) == NVML_SUCCESS) {
        out->energy_mj = mj;
        out->has_energy = true;
    }
    unsigned int mhz;
    if (g_nvml.clock && g_nvml.clock(d, NVML_CLOCK_SM, &mhz) == NVML_SUCCESS) {
        out->sm_clock_mhz = mhz;
        out->has_clock = true;
    }
    if (g_nvml.limit && g_nvml.limit(d, &mw) == NVML_SUCCESS) {
        out->power_limit_w = mw / 1000.0;
        out->has_power_limit = true;
    }
    unsigned int deg;
    if (g_nvml.temp && g_nvml.temp(d, NVML_TEMPERATURE_GPU, &deg) == NVML_SUCCESS) {
        out->temp_c = deg;
        out->has_temp = true;
    }
    unsigned long long why;
    if (g_nvml.reasons && g_nvml.reasons(d, &why) == NVML_SUCCESS) {
        out->clock_reasons = why;
        out->has_reasons = true;
    }
    return true;
}

/* nvmlValueType_t: double, unsigned int, unsigned long, unsigned long long, signed long
 * long, signed int, unsigned short */
static double value_of(const nvml_value *v, int type) {
    switch (type) {
    case 0: return v->d;
    case 1: return v->ui;
    case 2: return (double)v->ul;
    case 3: return (double)v->ull;
    case 4: return (double)v->sll;
    case 5: return v->si;
    case 6: return v->us;
    }
    return 0.0;
}

int lb_nvml_buffered(int index, lb_nvml_buffer which, uint64_t since_us, lb_nvml_reading *out,
                     int max) {
    nvml_device d;
    if (!device(index, &d) || g_nvml.samples == NULL || max <= 0) return 0;
    static nvml_buffered_sample buf[NVML_BUFFERED_MAX];
    static pthread_mutex_t buf_lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&buf_lock);
    int type = 0, n = 0;
    unsigned int count = NVML_BUFFERED_MAX;
    int kind =
        which == LB_NVML_POWER_READINGS ? NVML_TOTAL_POWER_SAMPLES : NVML_GPU_UTILIZATION_SAMPLES;
    if (g_nvml.samples(d, kind, since_us, &type, &count, buf) == NVML_SUCCESS) {
        /* the newest `max` readings, oldest first */
        unsigned int first = count > (unsigned)max ? count - (unsigned)max : 0;
        for (unsigned int i = first; i < count; i++) {
            double v = value_of(&buf[i].value, type);
            out[n].t_us = buf[i].time_us;
            out[n].value = which == LB_NVML_POWER_READINGS ? v / 1000.0 : v;
            n++;
        }
    }
    pthread_mutex_unlock(&buf_lock);
    return n;
}

bool lb_nvml_cuda_driver_version(int *version) {
    return g_nvml.lib != NULL && g_nvml.cuda_driver && g_nvml.cuda_driver(version) == NVML_SUCCESS;
}

bool lb_nvml_same_pci(const char *a, const char *b) {
    unsigned da, ba, va, fa, db, bb, vb, fb;
    if (sscanf(a, "%x:%x:%x.%x", &da, &ba, &va, &fa) != 4) return false;
    if (sscanf(b, "%x:%x:%x.%x", &db, &bb, &vb, &fb) != 4) return false;
    return da == db && ba == bb && va == vb && fa == fb;
}

bool lb_nvml_device_links(int index, lb_nvml_links *out) {
    memset(out, 0, sizeof *out);
    nvml_device d;
    if (!device(index, &d)) return false;
    nvml_pci pci;
    if (g_nvml.pci && g_nvml.pci(d, &pci) == NVML_SUCCESS)
        snprintf(out->bus_id, sizeof out->bus_id, "%s", pci.bus_id);
    out->has_pcie = g_nvml.pcie_gen && g_nvml.pcie_width &&
                    g_nvml.pcie_gen(d, &out->pcie_gen) == NVML_SUCCESS &&
                    g_nvml.pcie_width(d, &out->pcie_width) == NVML_SUCCESS;
    if (g_nvml.pcie_max_gen) g_nvml.pcie_max_gen(d, &out->pcie_max_gen);
    if (g_nvml.pcie_max_width) g_nvml.pcie_max_width(d, &out->pcie_max_width);
    out->has_ecc = g_nvml.ecc && g_nvml.ecc(d, NVML_MEMORY_ERROR_UNCORRECTED, NVML_VOLATILE_ECC,
                                            &out->ecc_uncorrected) == NVML_SUCCESS;
    if (g_nvml.max_clock) {
        g_nvml.max_clock(d, NVML_CLOCK_SM, &out->sm_clock_max_mhz);
        g_nvml.max_clock(d, NVML_CLOCK_MEM, &out->mem_clock_max_mhz);
    }
    for (unsigned l = 0; g_nvml.nvlink_state && l < NVML_NVLINK_MAX_LINKS; l++) {
        int active = 0;
        if (g_nvml.nvlink_state(d, l, &active) != NVML_SUCCESS || !active) continue;
        nvml_pci remote;
        if (g_nvml.nvlink_remote && g_nvml.nvlink_remote(d, l, &remote) == NVML_SUCCESS)
            snprintf(out->nvlink_peer[out->n_nvlinks], sizeof out->nvlink_peer[0], "%s",
                     remote.bus_id);
        out->n_nvlinks++;
    }
    return true;
}

int lb_nvml_index_of_pci(const char *bus_id) {
    for (int i = 0; i < lb_nvml_device_count(); i++) {
        lb_nvml_links l;
        if (lb_nvml_device_links(i, &l) && lb_nvml_same_pci(l.bus_id, bus_id)) return i;
    }
    return -1;
}

int lb_nvml_nvlinks_between(const char *bus_a, const char *bus_b) {
    int ia = lb_nvml_index_of_pci(bus_a), ib = lb_nvml_index_of_pci(bus_b);
    nvml_device a, b;
    lb_nvml_links la;
    if (ia < 0 || ib < 0 || !device(ia, &a) || !device(ib, &b) || !lb_nvml_device_links(ia, &la))
        return -1;
    int direct = 0;
    for (int l = 0; l < la.n_nvlinks; l++)
        direct += lb_nvml_same_pci(la.nvlink_peer[l], bus_b);
    if (direct > 0) return direct;
    /* through NVSwitches every link's far end is a switch: the pair talks over all of them */
    int status = -1;
    if (g_nvml.p2p_status &&
        g_nvml.p2p_status(a, b, NVML_P2P_CAPS_INDEX_NVLINK, &status) == NVML_SUCCESS &&
        status == NVML_P2P_STATUS_OK)
        return la.n_nvlinks;
    return 0;
}
