/* nvml_probe.c: probe. How often do NVML's readings change, and what do its buffered
 * samples hold? Polls device 0 every POLL_MS for SECONDS seconds (run it beside a GPU
 * load), printing each change of the energy counter, the power reading and the
 * utilisation rate with the wall time; then prints the driver's buffered GPU-utilisation
 * and power samples (nvmlDeviceGetSamples) of the same period with their timestamps.
 *
 * build: cc -O2 -o nvml_probe bench/nvml_probe.c -ldl
 * usage: nvml_probe [SECONDS] */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define POLL_MS 5

typedef void *dev_t_;
typedef struct {
    unsigned int gpu, memory;
} util_t;
typedef union {
    double d;
    unsigned int ui;
    unsigned long ul;
    unsigned long long ull;
    signed long long sll;
} value_t;
typedef struct {
    unsigned long long ts;
    value_t v;
} sample_t;

static double now_s(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return tv.tv_sec + tv.tv_usec * 1e-6;
}

int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 5.0;
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (!lib) {
        fprintf(stderr, "no NVML\n");
        return 1;
    }
    int (*init)(void) = (int (*)(void))dlsym(lib, "nvmlInit_v2");
    int (*handle)(unsigned, dev_t_ *) = (int (*)(unsigned, dev_t_ *))dlsym(lib, "nvmlDeviceGetHandleByIndex_v2");
    int (*energy)(dev_t_, unsigned long long *) = (int (*)(dev_t_, unsigned long long *))dlsym(lib, "nvmlDeviceGetTotalEnergyConsumption");
    int (*power)(dev_t_, unsigned *) = (int (*)(dev_t_, unsigned *))dlsym(lib, "nvmlDeviceGetPowerUsage");
    int (*util)(dev_t_, util_t *) = (int (*)(dev_t_, util_t *))dlsym(lib, "nvmlDeviceGetUtilizationRates");
    int (*samples)(dev_t_, int, unsigned long long, int *, unsigned *, sample_t *) =
        (int (*)(dev_t_, int, unsigned long long, int *, unsigned *, sample_t *))dlsym(lib, "nvmlDeviceGetSamples");
    dev_t_ d;
    if (init() != 0 || handle(0, &d) != 0) {
        fprintf(stderr, "NVML init failed\n");
        return 1;
    }
    double t0 = now_s();
    unsigned long long start_us = (unsigned long long)(t0 * 1e6);
    unsigned long long e_last = 0;
    unsigned p_last = 0, u_last = 101;
    int n_e = 0, n_p = 0, n_u = 0;
    while (now_s() - t0 < secs) {
        unsigned long long e = 0;
        unsigned p = 0;
        util_t u = {0, 0};
        energy(d, &e);
        power(d, &p);
        util(d, &u);
        double t = now_s() - t0;
        if (e != e_last) printf("%8.3f energy %llu mJ (+%llu)\n", t, e, e_last ? e - e_last : 0), e_last = e, n_e++;
        if (p != p_last) printf("%8.3f power %.1f W\n", t, p / 1000.0), p_last = p, n_p++;
        if (u.gpu != u_last) printf("%8.3f util %u%%\n", t, u.gpu), u_last = u.gpu, n_u++;
        usleep(POLL_MS * 1000);
    }
    printf("changes in %.1f s: energy %d, power %d, util %d\n", secs, n_e, n_p, n_u);
    static const char *names[] = {"power (mW)", "gpu util (%)"};
    static const int types[] = {0, 1}; /* NVML_TOTAL_POWER_SAMPLES, NVML_GPU_UTILIZATION_SAMPLES */
    for (int k = 0; k < 2; k++) {
        int vt = 0;
        unsigned n = 0;
        int rc = samples(d, types[k], start_us, &vt, &n, NULL);
        printf("buffered %s: rc %d, %u samples, value type %d\n", names[k], rc, n, vt);
        if (rc != 0 || n == 0) continue;
        sample_t *s = calloc(n, sizeof *s);
        rc = samples(d, types[k], start_us, &vt, &n, s);
        for (unsigned i = 0; i < n; i++) {
            double v = vt == 0 ? s[i].v.d : vt == 1 ? (double)s[i].v.ui : vt == 2 ? (double)s[i].v.ul : (double)s[i].v.ull;
            printf("  %8.3f %.1f\n", s[i].ts * 1e-6 - t0, v);
        }
        free(s);
    }
    return 0;
}
