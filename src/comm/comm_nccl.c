/* comm_nccl.c: the NCCL backend of comm.h: device buffers, communicators created with a
 * deadline, and a watchdog thread.
 *
 * Two communicators: the first is created non-blocking, so its creation (every rank's
 * arrival, the first connections) can be polled under the set-up deadline and aborted;
 * the one that carries the calls is split from it as a blocking communicator. A
 * non-blocking communicator launches every call from a fresh thread and answers
 * ncclInProgress (NCCL's group.cc), which cost about 290 us a call on an H200 pair, ten
 * times torch.distributed's small-message latency; the blocking one launches in the
 * caller's thread and is still aborted by the watchdog from its own thread.
 *
 * Every call enqueues on the caller's stream and returns. Calls are watched through CUDA
 * events: one is recorded after a call when the previous one is done or over a millisecond
 * old, so the cost stays off the small-message path while a hung call is still seen. The
 * watchdog polls the oldest event and ncclCommGetAsyncError; when an event is older than
 * the deadline or NCCL reports an error, it aborts the communicator (NCCL's kernels see
 * the abort flag and end, so a waiting stream returns) and keeps one sentence naming rank,
 * host, GPU, the call, NCCL's error and ncclGetLastError's last warning. The calling
 * thread picks the sentence up at its next call or sync. Calls enqueued while their stream
 * is captured into a CUDA graph are not watched (nothing runs then); each launch of the
 * graph is, through lb_comm_watch. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_impl.h"

#ifdef LB_HAVE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "core/clock.h"
#include "gpu/check.h"

#define N_SLOTS           64
#define RECORD_EVERY_NS   1000000
#define WATCH_INTERVAL_US 1000

typedef struct {
    cudaEvent_t ev;
    int64_t t_ns;
    char what[160];
} watch_slot;

typedef struct {
    ncclComm_t setup; /* non-blocking: created under the deadline */
    ncclComm_t comm;  /* blocking, split from setup; NULL until the split is done */
    ncclComm_t calls; /* what carries the calls: comm, or setup when the split failed */
    int64_t split_deadline_ns;
    char gpu[96]; /* "GPU 1 (0000:1b:00.0)" */
    pthread_t thread;
    bool thread_started;
    pthread_mutex_t mu;
    watch_slot slots[N_SLOTS];
    int head, n;
    int64_t last_record_ns;
    atomic_bool stop, aborted;
    char abort_msg[LB_ERR_MSG_BYTES];
    void *stream; /* the stream of the last call inside a group */
    void *scratch;
    size_t scratch_bytes;
    int32_t *one; /* device int for barrier */
} nccl_state;

static ncclDataType_t nccl_type(lb_comm_dtype t) {
    static const ncclDataType_t map[LB_COMM_N_DTYPES] = {
        [LB_COMM_INT8] = ncclInt8,     [LB_COMM_UINT8] = ncclUint8,  [LB_COMM_INT32] = ncclInt32,
        [LB_COMM_UINT32] = ncclUint32, [LB_COMM_INT64] = ncclInt64,  [LB_COMM_UINT64] = ncclUint64,
        [LB_COMM_FP16] = ncclFloat16,  [LB_COMM_FP32] = ncclFloat32, [LB_COMM_FP64] = ncclFloat64,
        [LB_COMM_BF16] = ncclBfloat16,
    };
    return map[t];
}

static ncclRedOp_t nccl_op(lb_comm_op op) {
    return op == LB_COMM_AVG   ? ncclAvg
           : op == LB_COMM_MAX ? ncclMax
           : op == LB_COMM_MIN ? ncclMin
                               : ncclSum;
}

static void sleep_us(long us) {
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

/* The sentence of an NCCL failure, with NCCL's last warning line. */
static lb_status nccl_fail(lb_comm *c, nccl_state *s, ncclResult_t r, const char *what,
                           lb_err *err) {
    ncclComm_t any = s->comm != NULL ? s->comm : s->setup;
    const char *last = any != NULL ? ncclGetLastError(any) : ncclGetLastError(NULL);
    return lb_fail(err, LB_ERR_COMM, "rank %d (%s, %s): %s failed: NCCL %s%s%s", c->rank,
                   lb_boot_host(c->boot), s->gpu, what, ncclGetErrorString(r),
                   last != NULL && last[0] ? "; last NCCL warning: " : "",
                   last != NULL ? last : "");
}

/* Waits while a communicator answers ncclInProgress: the non-blocking set-up one, or the
 * calls after a failed split. Aborts it after timeout_s. */
static lb_status wait_ready(lb_comm *c, nccl_state *s, ncclComm_t comm, double timeout_s,
                            const char *what, lb_err *err) {
    int64_t deadline = lb_clock_now_ns() + (int64_t)(timeout_s * 1e9);
    for (long polls = 0;; polls++) {
        ncclResult_t r = ncclSuccess;
        ncclCommGetAsyncError(comm, &r);
        if (r == ncclSuccess) return LB_OK;
        if (r != ncclInProgress) return nccl_fail(c, s, r, what, err);
        if (lb_clock_now_ns() > deadline) {
            const char *last = ncclGetLastError(comm);
            lb_fail(err, LB_ERR_COMM, "rank %d (%s, %s): %s was not done within %.0f s%s%s",
                    c->rank, lb_boot_host(c->boot), s->gpu, what, timeout_s,
                    last && last[0] ? "; last NCCL warning: " : "", last ? last : "");
            ncclCommAbort(comm);
            if (comm == s->setup) s->setup = NULL;
            return LB_ERR_COMM;
        }
        if (polls > 20000) sleep_us(50);
    }
}

static void *watchdog(void *arg) {
    lb_comm *c = arg;
    nccl_state *s = c->impl;
    cudaSetDevice(c->device);
    while (!atomic_load(&s->stop)) {
        char msg[LB_ERR_MSG_BYTES] = "";
        pthread_mutex_lock(&s->mu);
        while (s->n > 0) {
            watch_slot *w = &s->slots[s->head];
            cudaError_t q = cudaEventQuery(w->ev);
            if (q == cudaSuccess) {
                s->head = (s->head + 1) % N_SLOTS;
                s->n--;
                continue;
            }
            double age_s = (double)(lb_clock_now_ns() - w->t_ns) / 1e9;
            if (q != cudaErrorNotReady)
                snprintf(msg, sizeof msg, "rank %d (%s, %s): %s failed on the GPU: CUDA %s",
                         c->rank, lb_boot_host(c->boot), s->gpu, w->what, cudaGetErrorString(q));
            else if (age_s > c->params.op_timeout_s)
                snprintf(msg, sizeof msg,
                         "rank %d (%s, %s): %s did not complete within %.1f s (--comm-timeout); "
                         "a peer never arrived or the transport stalled",
                         c->rank, lb_boot_host(c->boot), s->gpu, w->what, c->params.op_timeout_s);
            break;
        }
        const char *oldest = s->n > 0 ? s->slots[s->head].what : "the last call";
        ncclComm_t watched = s->comm != NULL ? s->comm : s->setup;
        if (s->calls == NULL && msg[0] == '\0' && lb_clock_now_ns() > s->split_deadline_ns)
            snprintf(msg, sizeof msg,
                     "rank %d (%s, %s): splitting the NCCL communicator was not done within "
                     "%.0f s (--setup-timeout)",
                     c->rank, lb_boot_host(c->boot), s->gpu, c->params.setup_timeout_s);
        ncclResult_t ar = ncclSuccess;
        ncclCommGetAsyncError(watched, &ar);
        if (msg[0] == '\0' && ar != ncclSuccess && ar != ncclInProgress)
            snprintf(msg, sizeof msg, "rank %d (%s, %s): %s failed: NCCL %s", c->rank,
                     lb_boot_host(c->boot), s->gpu, oldest, ncclGetErrorString(ar));
        pthread_mutex_unlock(&s->mu);
        if (msg[0] != '\0') {
            char gone[200];
            if (lb_boot_gone(c->boot, gone, sizeof gone) > 0) {
                size_t used = strlen(msg);
                snprintf(msg + used, sizeof msg - used, "; %s gone (control connection closed)",
                         gone);
            }
            const char *last = ncclGetLastError(watched);
            if (last != NULL && last[0] != '\0') {
                size_t used = strlen(msg);
                snprintf(msg + used, sizeof msg - used, "; last NCCL warning: %s", last);
            }
            snprintf(s->abort_msg, sizeof s->abort_msg, "%s", msg);
            atomic_store(&s->aborted, true);
            if (s->comm != NULL) ncclCommAbort(s->comm);
            ncclCommAbort(s->setup);
            return NULL;
        }
        sleep_us(WATCH_INTERVAL_US);
    }
    return NULL;
}

static lb_status check_aborted(lb_comm *c, nccl_state *s, lb_err *err) {
    if (!atomic_load(&s->aborted)) return LB_OK;
    return lb_fail(err, LB_ERR_COMM, "%s", s->abort_msg);
}

/* Records a watch event after the call k (NULL: what) just enqueued on stream, when it is
 * due or `always`; none while the stream is captured into a CUDA graph, where a recorded
 * event would stand for nothing that runs (the graph's launch is watched, lb_comm_watch). */
static lb_status watch(lb_comm *c, nccl_state *s, void *stream, const lb_coll_call *k,
                       const char *what, bool always, lb_err *err) {
    enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    LB_CUDA_TRY(err, cudaStreamIsCapturing((cudaStream_t)stream, &cs));
    if (cs != cudaStreamCaptureStatusNone) return LB_OK;
    int64_t now = lb_clock_now_ns();
    pthread_mutex_lock(&s->mu);
    bool due = always || s->n == 0 || now - s->last_record_ns >= RECORD_EVERY_NS;
    if (due && s->n < N_SLOTS) {
        watch_slot *w = &s->slots[(s->head + s->n) % N_SLOTS];
        cudaError_t e = cudaEventRecord(w->ev, (cudaStream_t)stream);
        if (e == cudaSuccess) {
            w->t_ns = now;
            if (k != NULL)
                lb_comm_coll_describe(c, k, w->what, sizeof w->what);
            else
                snprintf(w->what, sizeof w->what, "%s", what);
            s->n++;
            s->last_record_ns = now;
        }
        pthread_mutex_unlock(&s->mu);
        LB_CUDA_TRY(err, e);
        return LB_OK;
    }
    pthread_mutex_unlock(&s->mu);
    return LB_OK;
}

static lb_status enqueue(lb_comm *c, nccl_state *s, const lb_coll_call *k, lb_err *err) {
    ncclDataType_t t = nccl_type(k->dtype);
    ncclRedOp_t op = nccl_op(k->op);
    cudaStream_t st = (cudaStream_t)k->stream;
    size_t es = lb_comm_dtype_bytes(k->dtype), n = (size_t)c->size;
    ncclResult_t r = ncclSuccess;
    switch (k->kind) {
    case LB_COLL_ALL_REDUCE:
        r = ncclAllReduce(k->send, k->recv, k->count, t, op, s->calls, st);
        break;
    case LB_COLL_REDUCE:
        r = ncclReduce(k->send, k->recv, k->count, t, op, k->root, s->calls, st);
        break;
    case LB_COLL_BROADCAST:
        r = ncclBroadcast(k->send, k->recv, k->count, t, k->root, s->calls, st);
        break;
    case LB_COLL_REDUCE_SCATTER:
        r = ncclReduceScatter(k->send, k->recv, k->count, t, op, s->calls, st);
        break;
    case LB_COLL_ALL_GATHER: r = ncclAllGather(k->send, k->recv, k->count, t, s->calls, st); break;
    case LB_COLL_ALL_TO_ALL: {
        const char *src = k->send;
        size_t bytes = n * k->count * es;
        if (k->send == k->recv) { /* NCCL's send/recv pairs must not overlap: go via scratch */
            if (s->scratch_bytes < bytes) {
                cudaFree(s->scratch);
                s->scratch = NULL;
                s->scratch_bytes = 0;
                LB_CUDA_TRY(err, cudaMalloc(&s->scratch, bytes));
                s->scratch_bytes = bytes;
            }
            LB_CUDA_TRY(err,
                        cudaMemcpyAsync(s->scratch, k->send, bytes, cudaMemcpyDeviceToDevice, st));
            src = s->scratch;
        }
        r = ncclGroupStart();
        for (size_t p = 0; p < n && r == ncclSuccess; p++) {
            r = ncclSend(src + p * k->count * es, k->count, t, (int)p, s->calls, st);
            if (r == ncclSuccess)
                r = ncclRecv((char *)k->recv + p * k->count * es, k->count, t, (int)p, s->calls,
                             st);
        }
        ncclResult_t e = ncclGroupEnd();
        if (r == ncclSuccess) r = e;
        break;
    }
    case LB_COLL_SEND: r = ncclSend(k->send, k->count, t, k->root, s->calls, st); break;
    case LB_COLL_RECV: r = ncclRecv(k->recv, k->count, t, k->root, s->calls, st); break;
    case LB_COLL_BARRIER:
        r = ncclAllReduce(s->one, s->one, 1, ncclInt32, ncclSum, s->calls, st);
        break;
    }
    if (r != ncclSuccess && r != ncclInProgress) {
        char what[160];
        lb_comm_coll_describe(c, k, what, sizeof what);
        return nccl_fail(c, s, r, what, err);
    }
    if (r == ncclInProgress && c->group_depth == 0) { /* the non-blocking fallback */
        char what[160];
        lb_comm_coll_describe(c, k, what, sizeof what);
        LB_TRY(wait_ready(c, s, s->calls, c->params.op_timeout_s, what, err));
    }
    if (c->group_depth > 0) {
        s->stream = k->stream;
        return LB_OK;
    }
    LB_TRY(watch(c, s, k->stream, k, NULL, false, err));
    if (k->kind == LB_COLL_BARRIER) return lb_comm_sync(c, k->stream, err);
    return LB_OK;
}

static lb_status nccl_call(lb_comm *c, const lb_coll_call *k, lb_err *err) {
    nccl_state *s = c->impl;
    LB_TRY(check_aborted(c, s, err));
    return enqueue(c, s, k, err);
}

static lb_status nccl_group_start(lb_comm *c, lb_err *err) {
    nccl_state *s = c->impl;
    LB_TRY(check_aborted(c, s, err));
    ncclResult_t r = ncclGroupStart();
    return r == ncclSuccess ? LB_OK : nccl_fail(c, s, r, "ncclGroupStart", err);
}

static lb_status nccl_group_end(lb_comm *c, lb_err *err) {
    nccl_state *s = c->impl;
    char what[96];
    snprintf(what, sizeof what, "group ending at call #%llu", (unsigned long long)c->seq);
    ncclResult_t r = ncclGroupEnd();
    if (r == ncclInProgress)
        LB_TRY(wait_ready(c, s, s->calls, c->params.op_timeout_s, what, err));
    else if (r != ncclSuccess)
        return nccl_fail(c, s, r, what, err);
    return watch(c, s, s->stream, NULL, what, false, err);
}

static lb_status nccl_watch(lb_comm *c, void *stream, const char *what, lb_err *err) {
    nccl_state *s = c->impl;
    LB_TRY(check_aborted(c, s, err));
    return watch(c, s, stream, NULL, what, true, err);
}

static lb_status nccl_sync(lb_comm *c, void *stream, lb_err *err) {
    nccl_state *s = c->impl;
    for (long spins = 0;; spins++) {
        cudaError_t q = cudaStreamQuery((cudaStream_t)stream);
        if (q == cudaSuccess) break;
        LB_TRY(check_aborted(c, s, err));
        if (q != cudaErrorNotReady) LB_CUDA_TRY(err, q);
        if (spins > 20000) sleep_us(50);
    }
    return check_aborted(c, s, err);
}

static void nccl_free(lb_comm *c) {
    nccl_state *s = c->impl;
    if (s == NULL) return;
    if (s->thread_started) {
        atomic_store(&s->stop, true);
        pthread_join(s->thread, NULL);
    }
    if (!atomic_load(&s->aborted)) {
        if (c->broken) {
            if (s->comm != NULL) ncclCommAbort(s->comm);
            if (s->setup != NULL) ncclCommAbort(s->setup);
        } else {
            if (s->comm != NULL && ncclCommFinalize(s->comm) == ncclSuccess)
                ncclCommDestroy(s->comm);
            lb_err ignored;
            if (s->setup != NULL && ncclCommFinalize(s->setup) != ncclInternalError &&
                wait_ready(c, s, s->setup, c->params.setup_timeout_s, "ncclCommFinalize",
                           &ignored) == LB_OK)
                ncclCommDestroy(s->setup);
        }
    }
    for (int i = 0; i < N_SLOTS; i++)
        if (s->slots[i].ev != NULL) cudaEventDestroy(s->slots[i].ev);
    cudaFree(s->scratch);
    cudaFree(s->one);
    pthread_mutex_destroy(&s->mu);
    free(s);
    c->impl = NULL;
}

int lb_comm_nccl_local_gpus(void) {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

static const lb_comm_ops nccl_ops = {nccl_call, nccl_group_start, nccl_group_end,
                                     nccl_sync, nccl_watch,       nccl_free};

typedef struct {
    int32_t ok;
    ncclUniqueId id;
    char why[256];
} id_msg;

/* Every rank's join flag: 1 joins, 0 coordinates only, -1 joins but has no GPU for it. */
static lb_status exchange_flags(lb_boot *b, int32_t mine, int32_t *flags, lb_err *err) {
    LB_TRY(lb_boot_gather(b, &mine, sizeof mine, flags, err));
    return lb_boot_bcast(b, flags, (size_t)lb_boot_size(b) * sizeof *flags, err);
}

lb_status lb_comm_nccl_init(lb_comm *c, bool join, lb_err *err) {
    lb_boot *b = c->boot;
    int nb = lb_boot_size(b), me = lb_boot_rank(b), gpus = 0;
    if (cudaGetDeviceCount(&gpus) != cudaSuccess) gpus = 0;
    int dev = c->params.device >= 0 ? c->params.device : lb_boot_device(b, gpus);
    int32_t mine = !join ? 0 : dev < gpus ? 1 : -1;
    int32_t *flags = calloc((size_t)nb, sizeof *flags);
    id_msg *ids = calloc((size_t)nb, sizeof *ids);
    lb_status st = flags == NULL || ids == NULL ? lb_fail(err, LB_ERR_NOMEM, "out of memory")
                                                : exchange_flags(b, mine, flags, err);
    int first = -1, m = 0, my = -1, bad = -1;
    for (int r = 0; st == LB_OK && r < nb; r++) {
        if (flags[r] < 0 && bad < 0) bad = r;
        if (flags[r] == 0) continue;
        if (first < 0) first = r;
        if (r == me) my = m;
        m++;
    }
    /* every rank sees the same flags, so these refusals are the same on every rank */
    if (st == LB_OK && bad == me)
        st = lb_fail(err, LB_ERR_USAGE,
                     "rank %d on %s is local rank %d there, but the node has %d GPU(s): start "
                     "at most one rank per GPU on each node",
                     me, lb_boot_host(b), dev, gpus);
    else if (st == LB_OK && bad >= 0)
        st = lb_fail(err, LB_ERR_USAGE,
                     "rank %d has no GPU of its own (more ranks than GPUs on its node): start at "
                     "most one rank per GPU on each node",
                     bad);
    else if (st == LB_OK && first < 0)
        st = lb_fail(err, LB_ERR_USAGE,
                     "no rank has a GPU: NCCL needs at least one; use --backend mpi");
    /* the first member makes the id; rank 0 (maybe a coordinator without a GPU) collects it
     * and hands it on, with a word on whether it could be made */
    id_msg msg = {0};
    if (st == LB_OK && me == first) {
        ncclResult_t r = ncclGetUniqueId(&msg.id);
        msg.ok = r == ncclSuccess;
        if (!msg.ok)
            snprintf(msg.why, sizeof msg.why, "rank %d (%s): ncclGetUniqueId failed: %s; %s", me,
                     lb_boot_host(b), ncclGetErrorString(r), ncclGetLastError(NULL));
    }
    if (st == LB_OK) st = lb_boot_gather(b, &msg, sizeof msg, ids, err);
    if (st == LB_OK && me == 0) msg = ids[first];
    if (st == LB_OK) st = lb_boot_bcast(b, &msg, sizeof msg, err);
    if (st == LB_OK && !msg.ok) st = lb_fail(err, LB_ERR_COMM, "%s", msg.why);
    free(flags);
    free(ids);
    if (st != LB_OK || !join) return st;
    ncclUniqueId id = msg.id;

    nccl_state *s = calloc(1, sizeof *s);
    if (s == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&s->mu, NULL);
    c->ops = &nccl_ops;
    c->impl = s;
    c->rank = my;
    c->size = m;
    c->device = dev;
    char bus[32] = "";
    cudaDeviceGetPCIBusId(bus, sizeof bus, dev);
    snprintf(s->gpu, sizeof s->gpu, "GPU %d (%s)", dev, bus);
    LB_CUDA_TRY(err, cudaSetDevice(dev));
    for (int i = 0; i < N_SLOTS; i++)
        LB_CUDA_TRY(err, cudaEventCreateWithFlags(&s->slots[i].ev, cudaEventDisableTiming));
    LB_CUDA_TRY(err, cudaMalloc((void **)&s->one, sizeof *s->one));
    LB_CUDA_TRY(err, cudaMemset(s->one, 0, sizeof *s->one));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t r = ncclCommInitRankConfig(&s->setup, m, id, my, &config);
    char what[96];
    snprintf(what, sizeof what, "creating the NCCL communicator of %d ranks", m);
    if (r != ncclSuccess && r != ncclInProgress) return nccl_fail(c, s, r, what, err);
    LB_TRY(wait_ready(c, s, s->setup, c->params.setup_timeout_s, what, err));
    /* the watchdog runs from here: it aborts a split that outlives the set-up deadline */
    s->split_deadline_ns = lb_clock_now_ns() + (int64_t)(c->params.setup_timeout_s * 1e9);
    if (pthread_create(&s->thread, NULL, watchdog, c) != 0)
        return lb_fail(err, LB_ERR_RUNTIME, "cannot start the NCCL watchdog thread");
    s->thread_started = true;
    ncclConfig_t blocking = NCCL_CONFIG_INITIALIZER;
    blocking.blocking = 1;
    /* with a non-blocking parent the split runs on NCCL's thread, which writes s->comm
     * once the new communicator is ready */
    r = ncclCommSplit(s->setup, 0, my, &s->comm, &blocking);
    lb_status split = r == ncclSuccess || r == ncclInProgress ? LB_OK : LB_ERR_COMM;
    while (split == LB_OK) {
        ncclComm_t done = __atomic_load_n(&s->comm, __ATOMIC_ACQUIRE);
        ncclResult_t pr = ncclSuccess, cr = ncclInProgress;
        ncclCommGetAsyncError(s->setup, &pr);
        if (done != NULL) ncclCommGetAsyncError(done, &cr);
        if (done != NULL && cr == ncclSuccess && pr != ncclInProgress) break;
        if ((pr != ncclSuccess && pr != ncclInProgress) ||
            (cr != ncclSuccess && cr != ncclInProgress))
            split = LB_ERR_COMM;
        LB_TRY(check_aborted(c, s, err)); /* the watchdog's set-up deadline */
        sleep_us(100);
    }
    pthread_mutex_lock(&s->mu);
    if (split == LB_OK) {
        s->calls = s->comm;
    } else { /* calls go through the non-blocking communicator, each polled to its end */
        s->comm = NULL;
        s->calls = s->setup;
    }
    pthread_mutex_unlock(&s->mu);
    if (split != LB_OK)
        fprintf(stderr,
                "llmbench: rank %d: splitting a blocking NCCL communicator failed (%s); calls go "
                "through the non-blocking one (slower for small messages)\n",
                c->rank, ncclGetLastError(s->setup));
    return LB_OK;
}

#else

int lb_comm_nccl_local_gpus(void) {
    return 0;
}

lb_status lb_comm_nccl_init(lb_comm *c, bool join, lb_err *err) {
    return lb_fail(err, LB_ERR_UNSUPPORTED,
                   "this llmbench was built without NCCL (no CUDA toolkit with nccl.h): use "
                   "--backend mpi or rebuild with CUDA");
}

#endif
