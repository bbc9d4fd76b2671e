/* nvml_probe.c: probe. How often do NVML's polled values change, and what do the driver's
 * buffered readings hold? Polls device 0 every POLL_MS for SECONDS seconds (run it beside
 * a GPU load) through llmbench's NVML loader (src/gpu/nvml/nvml.c), printing each change of the
 * energy counter, the power value and the utilisation rate with the time; then the
 * buffered power and utilisation readings (lb_nvml_buffered) of the same period.
 *
 * build: cc -O2 -Isrc -o nvml_probe bench/nvml_probe.c src/gpu/nvml/nvml.c -ldl -lpthread
 * usage: nvml_probe [SECONDS] */
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>
#include <unistd.h>

#include "gpu/nvml/nvml.h"

#define POLL_MS      5
#define MAX_READINGS 4096

static double now_s(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return tv.tv_sec + tv.tv_usec * 1e-6;
}

int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 5.0;
    char why[256];
    if (!lb_nvml_open(why, sizeof why)) {
        fprintf(stderr, "nvml_probe: %s\n", why);
        return 1;
    }
    double t0 = now_s();
    uint64_t start_us = (uint64_t)(t0 * 1e6);
    uint64_t e_last = 0;
    double p_last = -1, u_last = -1;
    int n_e = 0, n_p = 0, n_u = 0;
    while (now_s() - t0 < secs) {
        lb_nvml_sample s;
        if (!lb_nvml_sample_device(0, &s)) break;
        double t = now_s() - t0;
        if (s.has_energy && s.energy_mj != e_last) {
            printf("%8.3f energy %llu mJ (+%llu)\n", t, (unsigned long long)s.energy_mj,
                   (unsigned long long)(e_last ? s.energy_mj - e_last : 0));
            e_last = s.energy_mj, n_e++;
        }
        if (s.has_power && s.power_w != p_last)
            printf("%8.3f power %.1f W\n", t, s.power_w), p_last = s.power_w, n_p++;
        if (s.has_util && s.gpu_util_pct != u_last)
            printf("%8.3f util %.0f%%\n", t, s.gpu_util_pct), u_last = s.gpu_util_pct, n_u++;
        usleep(POLL_MS * 1000);
    }
    printf("changes in %.1f s: energy %d, power %d, util %d\n", secs, n_e, n_p, n_u);
    static const char *names[] = {"power (W)", "gpu util (%)"};
    static lb_nvml_reading r[MAX_READINGS];
    for (int k = 0; k < 2; k++) {
        int n = lb_nvml_buffered(0, k == 0 ? LB_NVML_POWER_READINGS : LB_NVML_UTIL_READINGS,
                                 start_us, r, MAX_READINGS);
        printf("buffered %s: %d readings\n", names[k], n);
        for (int i = 0; i < n; i++)
            printf("  %8.3f %.1f\n", r[i].t_us * 1e-6 - t0, r[i].value);
    }
    lb_nvml_close();
    return 0;
}
