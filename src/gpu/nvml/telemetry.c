/* telemetry.c: the NVML sampling thread (gpu/nvml/telemetry.h). The thread sleeps on a
 * condition variable with a deadline, so stop() wakes it at once instead of waiting out a
 * period. Each poll also collects the driver's buffered power and utilisation readings
 * that are newer than the last it collected. */
#include "gpu/nvml/telemetry.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "core/log.h"

/* A growable array of readings. */
typedef struct {
    lb_gpu_treading *v;
    size_t n, cap;
    uint64_t last_us; /* the newest reading's driver time: the next fetch starts after it */
} readings;

struct lb_gpu_telemetry {
    int device;
    int period_ms;
    bool nvml_open;
    int64_t t0_ns;
    double wall0_s; /* the realtime clock at t0_ns: the driver's readings' time base */
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool stop;
    lb_gpu_tsample *samples;
    size_t n, cap;
    readings power, util;
};

/* Appends the driver's readings of `which` newer than r->last_us (lock held). */
static void fetch_readings(lb_gpu_telemetry *t, lb_nvml_buffer which, readings *r) {
    lb_nvml_reading buf[256];
    int got = lb_nvml_buffered(t->device, which, r->last_us, buf, 256);
    for (int i = 0; i < got; i++) {
        if (buf[i].t_us <= r->last_us) continue;
        if (r->n == r->cap) {
            size_t cap = r->cap ? 2 * r->cap : 256;
            lb_gpu_treading *nv = realloc(r->v, cap * sizeof *nv);
            if (nv == NULL) return;
            r->v = nv;
            r->cap = cap;
        }
        r->v[r->n++] = (lb_gpu_treading){(double)buf[i].t_us * 1e-6 - t->wall0_s, buf[i].value};
        r->last_us = buf[i].t_us;
    }
}

static void take_sample(lb_gpu_telemetry *t) {
    lb_gpu_tsample s;
    memset(&s, 0, sizeof s);
    s.t_s = (double)(lb_clock_now_ns() - t->t0_ns) * 1e-9;
    if (!t->nvml_open || t->device < 0 || !lb_nvml_sample_device(t->device, &s.s)) return;
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
    fetch_readings(t, LB_NVML_POWER_READINGS, &t->power);
    fetch_readings(t, LB_NVML_UTIL_READINGS, &t->util);
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
        while (!t->stop && rc != ETIMEDOUT)
            rc = pthread_cond_timedwait(&t->cond, &t->lock, &dl);
        bool stop = t->stop;
        pthread_mutex_unlock(&t->lock);
        if (stop) break;
        take_sample(t);
    }
    return NULL;
}

/* Closes NVML (if this telemetry opened it) and frees everything of t. */
static void telemetry_free(lb_gpu_telemetry *t) {
    if (t->nvml_open) lb_nvml_close();
    pthread_mutex_destroy(&t->lock);
    pthread_cond_destroy(&t->cond);
    free(t->samples);
    free(t->power.v);
    free(t->util.v);
    free(t);
}

lb_gpu_telemetry *lb_gpu_telemetry_start(const char *pci_bus_id, int period_ms) {
    lb_gpu_telemetry *t = calloc(1, sizeof *t);
    if (t == NULL) return NULL;
    char why[128];
    t->period_ms = period_ms > 0 ? period_ms : 100;
    t->nvml_open = lb_nvml_open(why, sizeof why);
    t->device = t->nvml_open ? lb_nvml_index_of_pci(pci_bus_id) : -1;
    t->t0_ns = lb_clock_now_ns();
    t->wall0_s = lb_clock_wall_s();
    /* power from the start on; utilisation from a little before, so that the first
     * reading inside the window has its predecessor (a reading covers the time since) */
    t->power.last_us = (uint64_t)(t->wall0_s * 1e6);
    t->util.last_us = t->power.last_us - 2000000u;
    pthread_mutex_init(&t->lock, NULL);
    pthread_cond_init(&t->cond, NULL);
    take_sample(t);
    if (pthread_create(&t->thread, NULL, sampler_main, t) != 0) {
        telemetry_free(t);
        return NULL;
    }
    return t;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Mean utilisation over [w0, w1] from the driver's readings, each the share of the time
 * since the one before (at most the median spacing before it: the driver skips readings
 * while idle). Readings wholly inside the window count alone when there are any; else
 * each reading touching it is weighted by its overlap. False when none touches it. */
static bool window_util(const lb_gpu_treading *u, size_t n, double w0, double w1, double *out) {
    if (n < 2) return false;
    double *gap = malloc((n - 1) * sizeof *gap);
    if (gap == NULL) return false;
    for (size_t i = 1; i < n; i++)
        gap[i - 1] = u[i].t_s - u[i - 1].t_s;
    qsort(gap, n - 1, sizeof *gap, cmp_double);
    double period = gap[(n - 1) / 2];
    free(gap);
    double inside = 0.0, weighted = 0.0, weight = 0.0;
    size_t n_inside = 0;
    for (size_t i = 0; i < n; i++) {
        double from = u[i].t_s - period;
        if (i > 0 && u[i - 1].t_s > from) from = u[i - 1].t_s;
        if (from >= w0 && u[i].t_s <= w1) inside += u[i].value, n_inside++;
        double lo = from > w0 ? from : w0, hi = u[i].t_s < w1 ? u[i].t_s : w1;
        if (hi > lo) weighted += (hi - lo) * u[i].value, weight += hi - lo;
    }
    if (n_inside > 0)
        *out = inside / (double)n_inside;
    else if (weight > 0.0)
        *out = weighted / weight;
    else
        return false;
    return true;
}

void lb_gpu_telemetry_summarize(const lb_gpu_telemetry_data *d, lb_gpu_telemetry_summary *out) {
    memset(out, 0, sizeof *out);
    const lb_gpu_tsample *s = d->samples;
    size_t n = d->n_samples;
    out->n_samples = n;
    if (n == 0) return;
    double w0 = s[0].t_s, w1 = s[n - 1].t_s;
    out->duration_s = w1 - w0;
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
                power_integral +=
                    0.5 * (x->power_w + s[i - 1].s.power_w) * (s[i].t_s - s[i - 1].t_s);
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
    /* The driver's buffered readings, where there are any in the window, replace the
     * polled power and utilisation: those are trailing averages over up to a second that
     * reach back before the window (a short timed run read low). Energy then follows
     * from their mean power, as the energy counter only moves every ~100 ms. */
    double psum = 0.0;
    for (size_t i = 0; i < d->n_power; i++)
        if (d->power[i].t_s >= w0 && d->power[i].t_s <= w1)
            psum += d->power[i].value, out->n_power_readings++;
    if (out->n_power_readings >= 2 && out->duration_s > 0.0) {
        out->mean_power_w = psum / (double)out->n_power_readings;
        out->energy_j = out->mean_power_w * out->duration_s;
        out->has_power = out->has_energy = true;
    }
    double util;
    if (window_util(d->util, d->n_util, w0, w1, &util)) {
        out->mean_util_pct = util;
        out->has_util = out->util_from_readings = true;
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
    lb_gpu_telemetry_data d = {t->samples, t->n, t->power.v, t->power.n, t->util.v, t->util.n};
    lb_gpu_telemetry_summarize(&d, out);
    if (t->n >= 2 && t->samples[0].s.has_energy && t->samples[t->n - 1].s.has_energy)
        LB_DEBUG("telemetry: %zu polls over %.3f s; %zu of %zu power readings in the window "
                 "(mean %.1f W, %.1f J), energy counter %.1f J; utilisation %.1f%% (%s)",
                 t->n, out->duration_s, out->n_power_readings, t->power.n, out->mean_power_w,
                 out->energy_j,
                 (double)(t->samples[t->n - 1].s.energy_mj - t->samples[0].s.energy_mj) / 1000.0,
                 out->mean_util_pct, out->util_from_readings ? "driver's readings" : "polled");
    if (samples && t->n > 0) {
        *samples = malloc(t->n * sizeof **samples);
        if (*samples) {
            memcpy(*samples, t->samples, t->n * sizeof **samples);
            *n_samples = t->n;
        }
    }
    telemetry_free(t);
}
