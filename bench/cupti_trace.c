/* cupti_trace.c: a CUPTI activity tracer loaded into any CUDA program with LD_PRELOAD
 * (libcupti_trace.so, built by `make bench`; the machine needs libcupti.so.13 on its loader
 * path). It records, for the whole run, every kernel (concurrent kernel activity: device,
 * stream, start, end, grid, block, name), memcpy and memset (device, stream, start, end,
 * bytes) and every CUDA runtime call (thread, start, end, name), and writes them per
 * process to $LB_TRACE_DIR/cupti.PID.tsv (default /tmp), one record a line:
 *   K dev stream start end corr grid block name
 *   M dev stream start end corr bytes copykind
 *   S dev stream start end corr bytes
 *   A tid start end corr name
 * Times are CUPTI's nanoseconds, one clock for the host and every device of the process;
 * corr ties a kernel or copy to the runtime call that launched it. llmbench train brackets
 * its timed steps with cudaProfilerStart and cudaProfilerStop, so those two A records mark
 * the window to read (bench/trace_summary.py); records are flushed after cudaProfilerStop
 * and at exit. Kernel names are demangled when the process has __cxa_demangle. */
#include <cupti.h>
#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BUFFER_BYTES (8u << 20)

typedef char *(*demangle_fn)(const char *, char *, size_t *, int *);

static FILE *g_out;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static demangle_fn g_demangle;
static CUpti_SubscriberHandle g_sub;

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    *buffer = aligned_alloc(8, BUFFER_BYTES);
    *size = *buffer != NULL ? BUFFER_BYTES : 0;
    *max_records = 0;
}

/* A kernel's name, demangled where possible; *owned says whether to free it. */
static const char *kernel_name(const char *mangled, char **owned) {
    *owned = NULL;
    if (mangled == NULL) return "?";
    if (g_demangle == NULL) g_demangle = (demangle_fn)dlsym(RTLD_DEFAULT, "__cxa_demangle");
    int status = -1;
    if (g_demangle != NULL) *owned = g_demangle(mangled, NULL, NULL, &status);
    if (*owned == NULL || status != 0) return mangled;
    /* a tab or newline would break the line */
    for (char *c = *owned; *c; c++)
        if (*c == '\t' || *c == '\n') *c = ' ';
    return *owned;
}

static void write_record(CUpti_Activity *r) {
    switch (r->kind) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
    case CUPTI_ACTIVITY_KIND_KERNEL: {
        CUpti_ActivityKernel10 *k = (CUpti_ActivityKernel10 *)r;
        char *owned;
        const char *name = kernel_name(k->name, &owned);
        fprintf(g_out, "K\t%u\t%u\t%" PRIu64 "\t%" PRIu64 "\t%u\t%dx%dx%d\t%dx%dx%d\t%s\n",
                k->deviceId, k->streamId, k->start, k->end, k->correlationId, k->gridX, k->gridY,
                k->gridZ, k->blockX, k->blockY, k->blockZ, name);
        free(owned);
        break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
        CUpti_ActivityMemcpy6 *m = (CUpti_ActivityMemcpy6 *)r;
        fprintf(g_out, "M\t%u\t%u\t%" PRIu64 "\t%" PRIu64 "\t%u\t%" PRIu64 "\t%u\n", m->deviceId,
                m->streamId, m->start, m->end, m->correlationId, m->bytes, (unsigned)m->copyKind);
        break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
        CUpti_ActivityMemset4 *m = (CUpti_ActivityMemset4 *)r;
        fprintf(g_out, "S\t%u\t%u\t%" PRIu64 "\t%" PRIu64 "\t%u\t%" PRIu64 "\n", m->deviceId,
                m->streamId, m->start, m->end, m->correlationId, m->bytes);
        break;
    }
    case CUPTI_ACTIVITY_KIND_RUNTIME: {
        CUpti_ActivityAPI *a = (CUpti_ActivityAPI *)r;
        const char *name = NULL;
        if (cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API, a->cbid, &name) != CUPTI_SUCCESS ||
            name == NULL)
            name = "?";
        fprintf(g_out, "A\t%u\t%" PRIu64 "\t%" PRIu64 "\t%u\t%s\n", a->threadId, a->start, a->end,
                a->correlationId, name);
        break;
    }
    default: break;
    }
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
                                      size_t valid) {
    (void)ctx, (void)stream, (void)size;
    CUpti_Activity *r = NULL;
    pthread_mutex_lock(&g_mu);
    while (g_out != NULL && cuptiActivityGetNextRecord(buffer, valid, &r) == CUPTI_SUCCESS)
        write_record(r);
    size_t dropped = 0;
    if (g_out != NULL &&
        cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS && dropped > 0)
        fprintf(g_out, "D\t%zu\n", dropped);
    pthread_mutex_unlock(&g_mu);
    free(buffer);
}

/* After cudaProfilerStop: the window's records out now (a worker may end without exit). */
static void CUPTIAPI on_api(void *user, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                            const void *data) {
    (void)user;
    const CUpti_CallbackData *cb = data;
    if (domain == CUPTI_CB_DOMAIN_RUNTIME_API &&
        cbid == CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStop_v4000 &&
        cb->callbackSite == CUPTI_API_EXIT)
        cuptiActivityFlushAll(0);
}

static void warn(const char *what, CUptiResult r) {
    const char *s = NULL;
    cuptiGetResultString(r, &s);
    fprintf(stderr, "cupti_trace: %s failed: %s\n", what, s != NULL ? s : "?");
}

__attribute__((constructor)) static void trace_start(void) {
    const char *dir = getenv("LB_TRACE_DIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/cupti.%ld.tsv", dir != NULL && dir[0] ? dir : "/tmp",
             (long)getpid());
    g_out = fopen(path, "w");
    if (g_out == NULL) {
        fprintf(stderr, "cupti_trace: cannot write %s\n", path);
        return;
    }
    static const CUpti_ActivityKind kinds[] = {
        CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
        CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_RUNTIME};
    CUptiResult r = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
    if (r != CUPTI_SUCCESS) warn("cuptiActivityRegisterCallbacks", r);
    for (size_t i = 0; r == CUPTI_SUCCESS && i < sizeof kinds / sizeof kinds[0]; i++)
        if ((r = cuptiActivityEnable(kinds[i])) != CUPTI_SUCCESS) warn("cuptiActivityEnable", r);
    if (cuptiSubscribe(&g_sub, on_api, NULL) == CUPTI_SUCCESS)
        cuptiEnableCallback(1, g_sub, CUPTI_CB_DOMAIN_RUNTIME_API,
                            CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStop_v4000);
}

__attribute__((destructor)) static void trace_end(void) {
    if (g_out == NULL) return;
    cuptiActivityFlushAll(1);
    pthread_mutex_lock(&g_mu);
    fclose(g_out);
    g_out = NULL;
    pthread_mutex_unlock(&g_mu);
}
