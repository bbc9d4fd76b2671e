/* devinfo.c: GPU facts from NVML and the CUDA runtime. */
#include "gpu/devinfo.h"

#include <stdio.h>

#include "gpu/nvml/nvml.h"
#ifdef LB_HAVE_CUDA
#include <cuda_runtime.h>
#endif
#ifdef LB_HAVE_NCCL
#include <nccl.h>
#endif

int lb_devinfo_cuda_device_count(void) {
#ifdef LB_HAVE_CUDA
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
#else
    return 0;
#endif
}

void lb_devinfo_add(json_t *p) {
    char why[128];
    json_t *gpus = json_array();
    if (lb_nvml_open(why, sizeof why)) {
        char driver[96];
        if (lb_nvml_driver_version(driver, sizeof driver))
            json_object_set_new(p, "driver", json_string(driver));
        int n = lb_nvml_device_count();
        for (int i = 0; i < n; i++) {
            char name[128] = "unknown";
            uint64_t total = 0;
            lb_nvml_device_name(i, name, sizeof name);
            lb_nvml_device_memory(i, &total, NULL);
            json_array_append_new(gpus, json_pack("{s:i, s:s, s:I}", "index", i, "name", name,
                                                  "mem_bytes", (json_int_t)total));
        }
        lb_nvml_close();
    } else {
        json_object_set_new(p, "nvml", json_string(why));
    }
    json_object_set_new(p, "gpus", gpus);
#ifdef LB_HAVE_CUDA
    int rt = 0;
    char ver[32];
    if (cudaRuntimeGetVersion(&rt) == cudaSuccess) {
        snprintf(ver, sizeof ver, "%d.%d", rt / 1000, (rt % 1000) / 10);
        json_object_set_new(p, "cuda_runtime", json_string(ver));
    }
    json_object_set_new(p, "cuda_devices", json_integer(lb_devinfo_cuda_device_count()));
#else
    json_object_set_new(p, "cuda_runtime", json_null());
#endif
#ifdef LB_HAVE_NCCL
    int nv = 0;
    if (ncclGetVersion(&nv) == ncclSuccess) {
        snprintf(ver, sizeof ver, "%d.%d.%d", nv / 10000, (nv % 10000) / 100, nv % 100);
        json_object_set_new(p, "nccl", json_string(ver));
    }
#else
    json_object_set_new(p, "nccl", json_null());
#endif
}
