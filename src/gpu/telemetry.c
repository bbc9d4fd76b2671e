/* telemetry.c: the NVML sampling thread (gpu/telemetry.h). The thread sleeps on a
 * condition variable with a deadline, so stop() wakes it at once instead of waiting out a
 * period. */
#include "gpu/telemetry.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"

struct lb_gpu_telemetry {
    int device;
    int period_ms;
    bool nvml_open;
    int64_t t0_ns;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool stop;
    lb_gpu_tsample *samples;
    size_t n, cap;
};

static void take_sample(lb_gpu_telemetry *t) {
    lb_gpu_tsample s;
    memset(&s, 0, sizeof s);
    s.t_s = (double)(lb_clock_now_ns() - t->t0_ns) * 1e-9;
    if (!t->nvml_open || !lb_nvml_sample_device(t->device, &s.s)) return;
    pthread_mutex_lock(&t->lock);
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 256;
        lb_gpu_tsample *np = realloc(t->samples, cap * sizeof *np);
        if (np == NULL) {
            pthread_mutex_unlock(&t->lock);
            return;
        }
        t->samples = np;
        t->cap = cap;
    }
    t->samples[t->n++] = s;
    pthread_mutex_unlock(&t->lock);
}

static void *sampler_main(void *arg) {
    lb_gpu_telemetry *t = arg;
    for (;;) {
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        dl.tv_nsec += (long)t->period_ms * 1000000L;
        while (dl.tv_nsec >= 1000000000L) {
            dl.tv_nsec -= 1000000000L;
            dl.tv_sec++;
        }
        pthread_mutex_lock(&t->lock);
        int rc = 0;
        while (!t->stop && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&t->cond, &t->lock, &dl);
        bool stop = t->stop;
        pthread_mutex_unlock(&t->lock);
        if (stop) break;
        take_sample(t);
    }
    return NULL;
}

lb_gpu_telemetry *lb_gpu_telemetry_start(int device_index, int period_ms) {
    lb_gpu_telemetry *t = calloc(1, sizeof *t);
    if (t == NULL) return NULL;
    char why[128];
    t->device = device_index;
    t->period_ms = period_ms > 0 ? period_ms : 100;
    t->nvml_open = lb_nvml_open(why, sizeof why);
    t->t0_ns = lb_clock_now_ns();
    pthread_mutex_init(&t->lock, NULL);
    pthread_cond_init(&t->cond, NULL);
    take_sample(t);
    if (pthread_create(&t->thread, NULL, sampler_main, t) != 0) {
        if (t->nvml_open) lb_nvml_close();
        pthread_mutex_destroy(&t->lock);
        pthread_cond_destroy(&t->cond);
        free(t->samples);
        free(t);
        return NULL;
    }
    return t;
}

void lb_gpu_telemetry_summarize(const lb_gpu_tsample *s, size_t n, lb_gpu_telemetry_summary *out) {
    memset(out, 0, sizeof *out);
    out->n_samples = n;
    if (n == 0) return;
    out->duration_s = s[n - 1].t_s - s[0].t_s;
    size_t nu = 0, np = 0, nc = 0, nr = 0;
    double power_integral = 0.0;
    for (size_t i = 0; i < n; i++) {
        const lb_nvml_sample *x = &s[i].s;
        if (x->has_util) {
            out->mean_util_pct += x->gpu_util_pct;
            nu++;
        }
        if (x->has_mem && (double)x->mem_used_bytes > out->peak_mem_bytes) {
            out->peak_mem_bytes = (double)x->mem_used_bytes;
            out->has_mem = true;
        }
        if (x->has_power) {
            out->mean_power_w += x->power_w;
            np++;
            if (i > 0 && s[i - 1].s.has_power)
                power_integral += 0.5 * (x->power_w + s[i - 1].s.power_w) * (s[i].t_s - s[i - 1].t_s);
        }
        if (x->has_clock) {
            out->mean_sm_clock_mhz += x->sm_clock_mhz;
            nc++;
        }
        if (x->has_power_limit) out->power_limit_w = x->power_limit_w, out->has_power_limit = true;
        if (x->has_temp && (!out->has_temp || x->temp_c > out->max_temp_c))
            out->max_temp_c = x->temp_c, out->has_temp = true;
        if (x->has_reasons) {
            out->power_capped_pct += (x->clock_reasons & LB_NVML_CLOCKS_POWER) ? 1.0 : 0.0;
            out->thermal_pct += (x->clock_reasons & LB_NVML_CLOCKS_THERMAL) ? 1.0 : 0.0;
            nr++;
        }
    }
    if (nr) {
        out->power_capped_pct *= 100.0 / (double)nr;
        out->thermal_pct *= 100.0 / (double)nr;
        out->has_reasons = true;
    }
    if (nu) out->mean_util_pct /= (double)nu, out->has_util = true;
    if (np) out->mean_power_w /= (double)np, out->has_power = true;
    if (nc) out->mean_sm_clock_mhz /= (double)nc, out->has_clock = true;
    if (n >= 2 && s[0].s.has_energy && s[n - 1].s.has_energy &&
        s[n - 1].s.energy_mj >= s[0].s.energy_mj) {
        out->energy_j = (double)(s[n - 1].s.energy_mj - s[0].s.energy_mj) / 1000.0;
        out->has_energy = true;
    } else if (np >= 2) {
        out->energy_j = power_integral;
        out->has_energy = true;
    }
}

void lb_gpu_telemetry_stop(lb_gpu_telemetry *t, lb_gpu_telemetry_summary *out,
                           lb_gpu_tsample **samples, size_t *n_samples) {
    if (samples) *samples = NULL;
    if (n_samples) *n_samples = 0;
    if (t == NULL) {
        memset(out, 0, sizeof *out);
        return;
    }
    pthread_mutex_lock(&t->lock);
    t->stop = true;
    pthread_cond_signal(&t->cond);
    pthread_mutex_unlock(&t->lock);
    pthread_join(t->thread, NULL);
    take_sample(t);
    lb_gpu_telemetry_summarize(t->samples, t->n, out);
    if (samples && t->n > 0) {
        *samples = malloc(t->n * sizeof **samples);
        if (*samples) {
            memcpy(*samples, t->samples, t->n * sizeof **samples);
            *n_samples = t->n;
        }
    }
    if (t->nvml_open) lb_nvml_close();
    pthread_mutex_destroy(&t->lock);
    pthread_cond_destroy(&t->cond);
    free(t->samples);
    free(t);
}
