/* commbench.c: the nccl-tests job on comm.h (see commbench.h for what is measured).
 *
 * Inputs follow one pattern known to every rank: element i of rank r's logical input is
 * ((7i + 13r + 3) mod 11), minus 5 for signed and floating types, so sums over up to 25
 * ranks are exact in every type (bf16 included) and each output element's expected value
 * can be computed on the host from its index alone; an integer sum beyond its type's range
 * (uint8 from 51 ranks) wraps, as NCCL's does, and so does the expected value
 * (lb_commbench_reduce_pattern). Before each row the ranks agree whether
 * to go on (comm/boot.h's lb_boot_agree_stop), so a run interrupted on any one rank ends on
 * every rank at the same row. */
#include "commbench/commbench.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef LB_HAVE_CUDA
#include <cuda_runtime.h>

#include "gpu/check.h"
#endif

#include "core/clock.h"
#include "core/signals.h"
#include "core/stats.h"
#include "gpu/devinfo.h"
#include "gpu/nvml/nvml.h"

static const char *const coll_names[LB_BENCH_N_COLLS] = {
    "all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "alltoall", "sendrecv"};

const char *lb_commbench_coll_name(lb_bench_coll c) {
    return coll_names[c];
}

int lb_commbench_coll_parse(const char *name, lb_bench_coll *out) {
    for (int i = 0; i < LB_BENCH_N_COLLS; i++)
        if (strcmp(name, coll_names[i]) == 0) {
            *out = (lb_bench_coll)i;
            return 0;
        }
    return -1;
}

double lb_commbench_busbw_factor(lb_bench_coll c, int n) {
    switch (c) {
    case LB_BENCH_ALL_REDUCE: return 2.0 * (n - 1) / n;
    case LB_BENCH_ALL_GATHER:
    case LB_BENCH_REDUCE_SCATTER:
    case LB_BENCH_ALLTOALL: return (double)(n - 1) / n;
    default: return 1.0;
    }
}

lb_commbench_params lb_commbench_default_params(void) {
    lb_commbench_params p = {
        .min_bytes = 8,
        .max_bytes = 128 << 20,
        .factor = 2,
        .dtype = LB_COMM_FP32,
        .op = LB_COMM_SUM,
        .root = 0,
        .warmup = 5,
        .iters = 20,
        .place = LB_PLACE_BOTH,
        .check = true,
        .matrix_bytes = 64 << 20,
        .comm = lb_comm_default_params(),
    };
    p.colls[LB_BENCH_ALL_REDUCE] = true;
    return p;
}

lb_status lb_commbench_validate(const lb_commbench_params *p, lb_err *err) {
    size_t es = lb_comm_dtype_bytes(p->dtype);
    bool any = false;
    for (int i = 0; i < LB_BENCH_N_COLLS; i++)
        any |= p->colls[i];
    if (!any) return lb_fail(err, LB_ERR_USAGE, "no collective chosen");
    if (p->min_bytes < 1 || p->max_bytes < p->min_bytes)
        return lb_fail(err, LB_ERR_USAGE,
                       "-b %lld -e %lld: expected 1 <= minimum size <= maximum size",
                       (long long)p->min_bytes, (long long)p->max_bytes);
    if (p->min_bytes % (int64_t)es != 0 || p->max_bytes % (int64_t)es != 0)
        return lb_fail(err, LB_ERR_USAGE,
                       "-b %lld -e %lld: sizes must be whole %s elements (multiples of %zu bytes)",
                       (long long)p->min_bytes, (long long)p->max_bytes,
                       lb_comm_dtype_name(p->dtype), es);
    if (p->colls[LB_BENCH_SENDRECV] && p->place == LB_PLACE_IN_PLACE)
        return lb_fail(err, LB_ERR_USAGE,
                       "--place in: sendrecv has no in-place form; use --place out or both");
    if (!(p->factor > 1) && p->min_bytes != p->max_bytes)
        return lb_fail(err, LB_ERR_USAGE, "-f %g: the size factor must be above 1", p->factor);
    if (p->matrix_bytes % (int64_t)es != 0 || p->matrix_bytes < (int64_t)es)
        return lb_fail(err, LB_ERR_USAGE,
                       "--matrix %lld: expected whole %s elements (a positive multiple of %zu "
                       "bytes)",
                       (long long)p->matrix_bytes, lb_comm_dtype_name(p->dtype), es);
    return LB_OK;
}

/* ---- buffers: device memory for NCCL, host memory for MPI ---- */

typedef struct {
    bool device;
    void *stream;
    size_t bytes;
    void *send, *recv; /* bytes each */
    void *host;        /* bytes: staging for inputs and the check */
    int64_t *marks_ns; /* host timing: iters + 1 */
#ifdef LB_HAVE_CUDA
    cudaEvent_t *events; /* device timing: iters + 1 */
#endif
    int n_marks;
} bufs;

static void bufs_free(bufs *b) {
#ifdef LB_HAVE_CUDA
    if (b->device) {
        cudaFree(b->send);
        cudaFree(b->recv);
        for (int i = 0; b->events != NULL && i < b->n_marks; i++)
            if (b->events[i] != NULL) cudaEventDestroy(b->events[i]);
        free(b->events);
        if (b->stream != NULL) cudaStreamDestroy((cudaStream_t)b->stream);
    }
#endif
    if (!b->device) {
        free(b->send);
        free(b->recv);
    }
    free(b->host);
    free(b->marks_ns);
}

static lb_status bufs_init(bufs *b, bool device, size_t bytes, int n_marks, lb_err *err) {
    memset(b, 0, sizeof *b);
    b->device = device;
    b->bytes = bytes;
    b->n_marks = n_marks;
    b->host = malloc(bytes);
    b->marks_ns = calloc((size_t)n_marks, sizeof *b->marks_ns);
    if (b->host == NULL || b->marks_ns == NULL)
        return lb_fail(err, LB_ERR_NOMEM, "out of host memory for %zu-byte buffers", bytes);
    if (!device) {
        b->send = malloc(bytes);
        b->recv = malloc(bytes);
        if (b->send == NULL || b->recv == NULL)
            return lb_fail(err, LB_ERR_NOMEM, "out of host memory for two %zu-byte buffers", bytes);
        return LB_OK;
    }
#ifdef LB_HAVE_CUDA
    cudaStream_t s;
    LB_CUDA_TRY(err, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    b->stream = s;
    LB_CUDA_TRY(err, cudaMalloc(&b->send, bytes));
    LB_CUDA_TRY(err, cudaMalloc(&b->recv, bytes));
    b->events = calloc((size_t)n_marks, sizeof *b->events);
    if (b->events == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n_marks; i++)
        LB_CUDA_TRY(err, cudaEventCreate(&b->events[i]));
    return LB_OK;
#else
    return lb_fail(err, LB_ERR_UNSUPPORTED, "device buffers need a CUDA build");
#endif
}

/* Between host staging and the benchmark's buffers (device ones: the direction from
 * unified addressing), ordered on the benchmark's stream and finished on return. A plain
 * cudaMemcpy from pageable memory may return before its DMA lands, and the collectives'
 * non-blocking stream does not wait for it: a check then reads inputs half written. */
static lb_status copy(bufs *b, void *dst, const void *src, size_t bytes, lb_err *err) {
    if (!b->device) {
        memcpy(dst, src, bytes);
        return LB_OK;
    }
#ifdef LB_HAVE_CUDA
    LB_CUDA_TRY(err, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, (cudaStream_t)b->stream));
    LB_CUDA_TRY(err, cudaStreamSynchronize((cudaStream_t)b->stream));
#endif
    return LB_OK;
}

static lb_status mark(bufs *b, int i, lb_err *err) {
    if (!b->device) {
        b->marks_ns[i] = lb_clock_now_ns();
        return LB_OK;
    }
#ifdef LB_HAVE_CUDA
    LB_CUDA_TRY(err, cudaEventRecord(b->events[i], (cudaStream_t)b->stream));
#endif
    return LB_OK;
}

/* Microseconds between mark i and mark i + 1 (after the stream was synchronised). */
static lb_status between(bufs *b, int i, double *us, lb_err *err) {
    if (!b->device) {
        *us = (double)(b->marks_ns[i + 1] - b->marks_ns[i]) / 1e3;
        return LB_OK;
    }
#ifdef LB_HAVE_CUDA
    float ms = 0;
    LB_CUDA_TRY(err, cudaEventElapsedTime(&ms, b->events[i], b->events[i + 1]));
    *us = ms * 1e3;
#endif
    return LB_OK;
}

/* ---- one call of a collective ---- */

static bool is_unsigned(lb_comm_dtype t) {
    return t == LB_COMM_UINT8 || t == LB_COMM_UINT32 || t == LB_COMM_UINT64;
}

static int64_t pattern(int rank, size_t i, lb_comm_dtype t) {
    int64_t v = (int64_t)((i * 7 + (size_t)rank * 13 + 3) % 11);
    return is_unsigned(t) ? v : v - 5;
}

/* Element counts of one row: what each rank sends and receives, and the per-rank unit. */
typedef struct {
    size_t unit;               /* the count the comm.h call takes */
    size_t send_n, recv_n;     /* elements in each buffer */
    size_t bytes, shown_count; /* nccl-tests' size and count columns */
} shape;

static shape shape_of(lb_bench_coll c, size_t total, int n, size_t es) {
    shape s = {0};
    switch (c) {
    case LB_BENCH_ALL_GATHER:
        s.unit = total / (size_t)n;
        s.send_n = s.unit;
        s.recv_n = s.unit * (size_t)n;
        break;
    case LB_BENCH_REDUCE_SCATTER:
        s.unit = total / (size_t)n;
        s.send_n = s.unit * (size_t)n;
        s.recv_n = s.unit;
        break;
    case LB_BENCH_ALLTOALL:
        s.unit = total / (size_t)n;
        s.send_n = s.recv_n = s.unit * (size_t)n;
        break;
    default: s.unit = s.send_n = s.recv_n = total; break;
    }
    /* nccl-tests' size is the larger buffer, its count the call's count (per rank, or per
     * peer for alltoall) */
    s.shown_count = s.unit;
    s.bytes = (s.send_n > s.recv_n ? s.send_n : s.recv_n) * es;
    return s;
}

typedef struct {
    lb_comm *c;
    const lb_commbench_params *p;
    int rank, n;
    bufs b;
} bench;

/* Where send and recv point for a placement. */
static void pointers(bench *B, lb_bench_coll coll, const shape *s, bool inplace, void **send,
                     void **recv) {
    size_t es = lb_comm_dtype_bytes(B->p->dtype);
    *send = B->b.send;
    *recv = B->b.recv;
    if (!inplace) return;
    *send = *recv;
    if (coll == LB_BENCH_ALL_GATHER) *send = (char *)*recv + (size_t)B->rank * s->unit * es;
    if (coll == LB_BENCH_REDUCE_SCATTER) {
        *send = B->b.recv;
        *recv = (char *)B->b.recv + (size_t)B->rank * s->unit * es;
    }
}

static lb_status call(bench *B, lb_bench_coll coll, const shape *s, void *send, void *recv,
                      lb_err *err) {
    const lb_commbench_params *p = B->p;
    lb_comm *c = B->c;
    void *st = B->b.stream;
    switch (coll) {
    case LB_BENCH_ALL_REDUCE:
        return lb_comm_all_reduce(c, send, recv, s->unit, p->dtype, p->op, st, err);
    case LB_BENCH_ALL_GATHER: return lb_comm_all_gather(c, send, recv, s->unit, p->dtype, st, err);
    case LB_BENCH_REDUCE_SCATTER:
        return lb_comm_reduce_scatter(c, send, recv, s->unit, p->dtype, p->op, st, err);
    case LB_BENCH_BROADCAST:
        return lb_comm_broadcast(c, send, recv, s->unit, p->dtype, p->root, st, err);
    case LB_BENCH_REDUCE:
        return lb_comm_reduce(c, send, recv, s->unit, p->dtype, p->op, p->root, st, err);
    case LB_BENCH_ALLTOALL: return lb_comm_all_to_all(c, send, recv, s->unit, p->dtype, st, err);
    case LB_BENCH_SENDRECV: {
        int next = (B->rank + 1) % B->n, prev = (B->rank + B->n - 1) % B->n;
        LB_TRY(lb_comm_group_start(c, err));
        lb_status a = lb_comm_send(c, send, s->unit, p->dtype, next, st, err);
        if (a == LB_OK) a = lb_comm_recv(c, recv, s->unit, p->dtype, prev, st, err);
        lb_status e = lb_comm_group_end(c, a == LB_OK ? err : NULL);
        return a != LB_OK ? a : e;
    }
    default: return LB_OK;
    }
}

/* acc as an integer of type t holds it: modulo 2^bits, read signed in the signed types. */
static int64_t wrap(lb_comm_dtype t, int64_t acc) {
    size_t bits = 8 * lb_comm_dtype_bytes(t);
    if (bits >= 64) return acc;
    uint64_t u = (uint64_t)acc & ((UINT64_C(1) << bits) - 1);
    if (!is_unsigned(t) && u >> (bits - 1)) return (int64_t)u - (INT64_C(1) << bits);
    return (int64_t)u;
}

double lb_commbench_reduce_pattern(lb_comm_dtype t, lb_comm_op op, int n, size_t i) {
    if (lb_comm_dtype_is_float(t)) {
        double acc = (double)pattern(0, i, t);
        for (int r = 1; r < n; r++) {
            double v = (double)pattern(r, i, t);
            acc = op == LB_COMM_MAX ? fmax(acc, v) : op == LB_COMM_MIN ? fmin(acc, v) : acc + v;
        }
        return op == LB_COMM_AVG ? acc / n : acc;
    }
    int64_t acc = pattern(0, i, t);
    for (int r = 1; r < n; r++) {
        int64_t v = pattern(r, i, t);
        acc = op == LB_COMM_MAX   ? (v > acc ? v : acc)
              : op == LB_COMM_MIN ? (v < acc ? v : acc)
                                  : acc + v;
    }
    acc = wrap(t, acc);
    return (double)(op == LB_COMM_AVG ? acc / n : acc);
}

/* The value element i of this rank's output must hold. */
static double expected(bench *B, lb_bench_coll coll, const shape *s, size_t i) {
    const lb_commbench_params *p = B->p;
    lb_comm_dtype t = p->dtype;
    int n = B->n;
    size_t src_i = i;
    switch (coll) {
    case LB_BENCH_ALL_GATHER: return (double)pattern((int)(i / s->unit), i % s->unit, t);
    case LB_BENCH_BROADCAST: return (double)pattern(p->root, i, t);
    case LB_BENCH_ALLTOALL:
        return (double)pattern((int)(i / s->unit), (size_t)B->rank * s->unit + i % s->unit, t);
    case LB_BENCH_SENDRECV: return (double)pattern((B->rank + n - 1) % n, i, t);
    case LB_BENCH_REDUCE_SCATTER: src_i = (size_t)B->rank * s->unit + i; break;
    default: break;
    }
    return lb_commbench_reduce_pattern(t, p->op, n, src_i);
}

static double tolerance(const lb_commbench_params *p, int n, double want) {
    if (p->op != LB_COMM_AVG) return 0;
    double eps = p->dtype == LB_COMM_BF16   ? 0x1p-7
                 : p->dtype == LB_COMM_FP16 ? 0x1p-10
                 : p->dtype == LB_COMM_FP32 ? 0x1p-23
                 : p->dtype == LB_COMM_FP64 ? 0x1p-52
                                            : 1;
    return eps < 1 ? n * eps * fmax(1, fabs(want)) : 1;
}

/* Fresh inputs, one call, every output element compared. */
static lb_status check(bench *B, lb_bench_coll coll, const shape *s, bool inplace, int64_t *wrong,
                       lb_err *err) {
    lb_comm_dtype t = B->p->dtype;
    size_t es = lb_comm_dtype_bytes(t);
    void *send, *recv;
    pointers(B, coll, s, inplace, &send, &recv);
    /* recv is first filled with a value no output element may have (0xff bytes: NaN in
     * floats, the largest unsigned integer; 0x7f bytes in signed integers, where 0xff bytes are
     * -1, an input value): it may still hold the right answer from an earlier call, which a
     * call that writes nothing (an in-place all_gather's other blocks) would pass off as its
     * own */
    bool signed_int = !lb_comm_dtype_is_float(t) && !is_unsigned(t);
    memset(B->b.host, signed_int ? 0x7f : 0xff, s->recv_n * es);
    LB_TRY(copy(&B->b, recv, B->b.host, s->recv_n * es, err));
    /* the send buffer holds this rank's pattern (in place it lies inside recv) */
    for (size_t i = 0; i < s->send_n; i++)
        lb_comm_value_set(B->b.host, t, i, (double)pattern(B->rank, i, t));
    LB_TRY(copy(&B->b, send, B->b.host, s->send_n * es, err));
    LB_TRY(call(B, coll, s, send, recv, err));
    LB_TRY(lb_comm_sync(B->c, B->b.stream, err));
    *wrong = 0;
    if (coll == LB_BENCH_REDUCE && B->rank != B->p->root) return LB_OK;
    LB_TRY(copy(&B->b, B->b.host, recv, s->recv_n * es, err));
    int64_t bad = 0;
    for (size_t i = 0; i < s->recv_n; i++) {
        double want = expected(B, coll, s, i), got = lb_comm_value_get(B->b.host, t, i);
        if (!(fabs(got - want) <= tolerance(B->p, B->n, want))) bad++;
    }
    *wrong = bad;
    return LB_OK;
}

/* Timed calls; fills per-iteration times (us). */
static lb_status timed(bench *B, lb_bench_coll coll, const shape *s, bool inplace, double *iter_us,
                       lb_err *err) {
    void *send, *recv;
    pointers(B, coll, s, inplace, &send, &recv);
    for (int64_t i = 0; i < B->p->warmup; i++)
        LB_TRY(call(B, coll, s, send, recv, err));
    LB_TRY(lb_comm_barrier(B->c, B->b.stream, err));
    int iters = (int)B->p->iters;
    LB_TRY(mark(&B->b, 0, err));
    for (int i = 0; i < iters; i++) {
        LB_TRY(call(B, coll, s, send, recv, err));
        LB_TRY(mark(&B->b, i + 1, err));
    }
    LB_TRY(lb_comm_sync(B->c, B->b.stream, err));
    for (int i = 0; i < iters; i++)
        LB_TRY(between(&B->b, i, &iter_us[i], err));
    return LB_OK;
}

/* What a rank sends rank 0 for one cell: its per-iteration times, then its wrong count. */
static size_t cell_doubles(const lb_commbench_params *p) {
    return (size_t)p->iters + 1;
}

/* On rank 0: the cell from every rank's numbers, series into r. */
static void fill_cell(const lb_commbench_params *p, int nb, const double *all, const int *member,
                      lb_bench_coll coll, const shape *s, const char *place, lb_bench_cell *cell,
                      lb_result *r, int n_comm) {
    size_t k = cell_doubles(p);
    int iters = (int)p->iters;
    double *slowest = calloc((size_t)iters, sizeof *slowest);
    double worst_mean = 0;
    int64_t wrong = 0;
    bool checked = p->check;
    for (int q = 0; q < nb; q++) {
        if (!member[q]) continue;
        const double *mine = all + (size_t)q * k;
        double mean = lb_stats_mean(mine, (size_t)iters);
        worst_mean = fmax(worst_mean, mean);
        for (int i = 0; slowest != NULL && i < iters; i++)
            slowest[i] = fmax(slowest[i], mine[i]);
        wrong += (int64_t)mine[iters];
        if (r != NULL) {
            char name[LB_NAME_BYTES];
            snprintf(name, sizeof name, "%s.%zu.%s.r%d", lb_commbench_coll_name(coll), s->bytes,
                     place, q);
            lb_series *se = lb_result_series(r, name, "us");
            for (int i = 0; se != NULL && i < iters; i++)
                lb_result_series_push(se, mine[i]);
        }
    }
    cell->ran = true;
    cell->time_us = worst_mean;
    cell->algbw_gbps = worst_mean > 0 ? (double)s->bytes / (worst_mean * 1e3) : 0;
    cell->busbw_gbps = cell->algbw_gbps * lb_commbench_busbw_factor(coll, n_comm);
    cell->p50_us = slowest ? lb_stats_percentile(slowest, (size_t)iters, 50) : NAN;
    cell->p99_us = slowest ? lb_stats_percentile(slowest, (size_t)iters, 99) : NAN;
    cell->wrong = checked ? wrong : -1;
    free(slowest);
    if (r == NULL) return;
    static const struct {
        const char *name, *unit;
        size_t off;
    } m[] = {{"time_us", "us", offsetof(lb_bench_cell, time_us)},
             {"algbw", "GB/s", offsetof(lb_bench_cell, algbw_gbps)},
             {"busbw", "GB/s", offsetof(lb_bench_cell, busbw_gbps)},
             {"p50_us", "us", offsetof(lb_bench_cell, p50_us)},
             {"p99_us", "us", offsetof(lb_bench_cell, p99_us)}};
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) {
        char name[LB_NAME_BYTES];
        snprintf(name, sizeof name, "%s.%zu.%s.%s", lb_commbench_coll_name(coll), s->bytes, place,
                 m[i].name);
        lb_result_set_metric(r, name, *(const double *)((const char *)cell + m[i].off), m[i].unit);
    }
    if (checked) {
        char name[LB_NAME_BYTES];
        snprintf(name, sizeof name, "%s.%zu.%s.wrong", lb_commbench_coll_name(coll), s->bytes,
                 place);
        lb_result_set_metric(r, name, (double)cell->wrong, "elements");
    }
}

/* Every rank's status after a step: LB_OK everywhere, or the failure (this rank's own
 * sentence, or the first failed rank's, gathered from it with its host: on a job of many
 * nodes its stderr is elsewhere). Keeps all ranks on the same path. */
static lb_status agree(lb_boot *boot, lb_status mine, lb_err *err) {
    int nb = lb_boot_size(boot), me = lb_boot_rank(boot);
    int32_t code = (int32_t)mine, *all = me == 0 ? calloc((size_t)nb, 4) : NULL;
    int32_t verdict[2] = {0, -1}; /* status, first failed rank */
    lb_err plane_err = {{0}};     /* a failed rank's control-plane error, apart from its own */
    lb_err *plane = mine != LB_OK ? &plane_err : err;
    lb_status st = lb_boot_gather(boot, &code, sizeof code, all, plane);
    for (int q = 0; st == LB_OK && all != NULL && q < nb; q++)
        if (all[q] != LB_OK && verdict[1] < 0) {
            verdict[0] = all[q];
            verdict[1] = q;
        }
    free(all);
    if (st == LB_OK) st = lb_boot_bcast(boot, verdict, sizeof verdict, plane);
    char said[LB_ERR_MSG_BYTES] = "";
    if (st == LB_OK && verdict[0] != LB_OK) {
        char text[LB_ERR_MSG_BYTES + 320] = "", **texts = NULL;
        if (mine != LB_OK)
            snprintf(text, sizeof text, "rank %d (%.255s): %s", me, lb_boot_host(boot), err->msg);
        st = lb_boot_gather_text(boot, text, &texts, plane);
        if (st == LB_OK && texts != NULL) snprintf(said, sizeof said, "%s", texts[verdict[1]]);
        lb_boot_strings_free(texts, texts != NULL ? nb : 0);
        if (st == LB_OK) st = lb_boot_bcast(boot, said, sizeof said, plane);
    }
    if (mine != LB_OK) {
        /* a rank that died shows here: its control-plane connection is closed */
        size_t used = strlen(err->msg);
        if (st != LB_OK && used + 8 < sizeof err->msg)
            snprintf(err->msg + used, sizeof err->msg - used, "; then %.*s",
                     (int)(sizeof err->msg - used - 8), plane_err.msg);
        return mine;
    }
    if (st != LB_OK) return st;
    if (verdict[0] == LB_OK) return LB_OK;
    return lb_fail(err, (lb_status)verdict[0], "%s", said);
}

/* One placement of one row on every rank; rank 0 gathers. */
static lb_status run_cell(bench *B, lb_boot *boot, const int32_t *member, lb_bench_coll coll,
                          const shape *s, bool inplace, lb_bench_cell *cell, lb_result *r,
                          lb_err *err) {
    const lb_commbench_params *p = B->p;
    size_t k = cell_doubles(p);
    int nb = lb_boot_size(boot);
    double *mine = calloc(k, sizeof *mine);
    double *all = lb_boot_rank(boot) == 0 ? calloc(k * (size_t)nb, sizeof *all) : NULL;
    lb_status st = mine == NULL || (lb_boot_rank(boot) == 0 && all == NULL)
                       ? lb_fail(err, LB_ERR_NOMEM, "out of memory")
                       : LB_OK;
    if (st == LB_OK && B->c != NULL) {
        st = timed(B, coll, s, inplace, mine, err);
        int64_t wrong = 0;
        if (st == LB_OK && p->check) st = check(B, coll, s, inplace, &wrong, err);
        mine[k - 1] = (double)wrong;
    }
    st = agree(boot, st, err);
    if (st == LB_OK) st = lb_boot_gather(boot, mine, k * sizeof *mine, all, err);
    if (st == LB_OK && all != NULL)
        fill_cell(p, nb, all, member, coll, s, inplace ? "ip" : "oop", cell, r, B->n);
    free(mine);
    free(all);
    return st;
}

static void set_config(lb_result *r, const lb_commbench_params *p, lb_boot *boot, int n) {
    json_t *colls = json_array();
    for (int i = 0; i < LB_BENCH_N_COLLS; i++)
        if (p->colls[i]) json_array_append_new(colls, json_string(coll_names[i]));
    static const char *const places[] = {"both", "out-of-place", "in-place"};
    json_t *cfg = json_pack(
        "{s:o, s:I, s:I, s:f, s:s, s:s, s:i, s:I, s:I, s:s, s:b, s:s, s:i, s:i, s:s, s:f, s:f}",
        "collectives", colls, "min_bytes", (json_int_t)p->min_bytes, "max_bytes",
        (json_int_t)p->max_bytes, "factor", p->factor, "dtype", lb_comm_dtype_name(p->dtype), "op",
        lb_comm_op_name(p->op), "root", p->root, "warmup", (json_int_t)p->warmup, "iters",
        (json_int_t)p->iters, "place", places[p->place], "check", p->check, "backend",
        lb_comm_backend_name(p->comm.backend), "ranks", lb_boot_size(boot), "comm_ranks", n,
        "launcher", lb_boot_source_name(lb_boot_source_of(boot)), "setup_timeout_s",
        p->comm.setup_timeout_s, "op_timeout_s", p->comm.op_timeout_s);
    json_object_update(r->config, cfg);
    json_decref(cfg);
}

/* The next size: times factor, whole elements, always growing. */
static int64_t next_size(int64_t size, double factor, size_t es) {
    int64_t next = (int64_t)((double)size * factor);
    next -= next % (int64_t)es;
    return next > size ? next : size + (int64_t)es;
}

/* Whether a signal reached any rank (collective over the control plane, every rank gets
 * the same answer): LB_ERR_INTERRUPTED naming that rank and what was to run next. */
static lb_status stop_if_interrupted(lb_boot *boot, const char *next, lb_err *err) {
    int who = -1;
    LB_TRY(lb_boot_agree_stop(boot, lb_signals_interrupted(), &who, err));
    if (who >= 0 && lb_boot_size(boot) > 1)
        return lb_fail(err, LB_ERR_INTERRUPTED, "interrupted (a signal reached rank %d) before %s",
                       who, next);
    if (who >= 0) return lb_fail(err, LB_ERR_INTERRUPTED, "interrupted before %s", next);
    return LB_OK;
}

static lb_status run_rows(bench *B, lb_boot *boot, const int32_t *member, lb_result *r,
                          double *bw_sum, int *bw_n, int64_t *wrong_total, lb_err *err) {
    const lb_commbench_params *p = B->p;
    size_t es = lb_comm_dtype_bytes(p->dtype);
    for (int ci = 0; ci < LB_BENCH_N_COLLS; ci++) {
        if (!p->colls[ci]) continue;
        lb_bench_coll coll = (lb_bench_coll)ci;
        /* sizes that round to the same per-rank count make one row; those below one element
         * per rank (all_gather, reduce_scatter, alltoall) round to 0 bytes and make none */
        size_t last_bytes = 0;
        for (int64_t size = p->min_bytes; size <= p->max_bytes;
             size = next_size(size, p->factor, es)) {
            char next[64];
            snprintf(next, sizeof next, "%s of %lld bytes", lb_commbench_coll_name(coll),
                     (long long)size);
            LB_TRY(stop_if_interrupted(boot, next, err));
            shape s = shape_of(coll, (size_t)size / es, B->n, es);
            if (s.bytes == last_bytes) continue;
            last_bytes = s.bytes;
            lb_bench_row row = {.coll = coll,
                                .bytes = s.bytes,
                                .count = s.shown_count,
                                .dtype = p->dtype,
                                .op = p->op,
                                .root = p->root};
            if (p->place != LB_PLACE_IN_PLACE)
                LB_TRY(run_cell(B, boot, member, coll, &s, false, &row.oop, r, err));
            if (p->place != LB_PLACE_OUT_OF_PLACE && coll != LB_BENCH_SENDRECV)
                LB_TRY(run_cell(B, boot, member, coll, &s, true, &row.ip, r, err));
            if (lb_boot_rank(boot) != 0) continue;
            const lb_bench_cell *cells[2] = {&row.oop, &row.ip};
            for (int k = 0; k < 2; k++) {
                if (!cells[k]->ran) continue;
                *bw_sum += cells[k]->busbw_gbps;
                (*bw_n)++;
                if (cells[k]->wrong > 0) *wrong_total += cells[k]->wrong;
            }
            if (p->on_row != NULL) p->on_row(p->on_row_ctx, &row);
            if (p->max_bytes == p->min_bytes) break;
        }
    }
    return LB_OK;
}

/* This rank's GPU's NVLinks to each member's GPU on the same host (NVML; 0 for other
 * hosts, -1 when unknown), from every member's PCI address gathered over the control plane. */
static lb_status nvlinks_to_peers(bench *B, lb_boot *boot, const int32_t *member, double *links,
                                  lb_err *err) {
    typedef struct {
        char bus[32], host[64];
    } where;
    int nb = lb_boot_size(boot);
    where me = {{0}}, *all = calloc((size_t)nb, sizeof *all);
    if (all == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of memory");
    snprintf(me.host, sizeof me.host, "%s", lb_boot_host(boot));
#ifdef LB_HAVE_CUDA
    if (B->c != NULL && B->b.device)
        cudaDeviceGetPCIBusId(me.bus, sizeof me.bus, lb_comm_device(B->c));
#endif
    lb_status st = lb_boot_gather(boot, &me, sizeof me, all, err);
    if (st == LB_OK) st = lb_boot_bcast(boot, all, (size_t)nb * sizeof *all, err);
    char why[128];
    bool nvml = st == LB_OK && me.bus[0] != '\0' && lb_nvml_open(why, sizeof why);
    for (int q = 0, k = 0; st == LB_OK && q < nb; q++) {
        if (!member[q]) continue;
        bool here = strcmp(all[q].host, me.host) == 0;
        /* -2: another host; -1: unknown */
        links[k++] = !here                           ? -2
                     : nvml && all[q].bus[0] != '\0' ? lb_nvml_nvlinks_between(me.bus, all[q].bus)
                                                     : -1;
    }
    if (nvml) lb_nvml_close();
    free(all);
    return st;
}

/* Each ordered pair (a, b) of members: a sends matrix_bytes to b `warmup` times, then
 * `iters` times while the others wait; b times the latter. Rank 0 stores matrix.A.B.gbps and
 * matrix.A.B.nvlinks. Before each sender's pairs the ranks agree whether to go on, as before
 * each row. */
static lb_status run_matrix(bench *B, lb_boot *boot, const int32_t *member, lb_result *r,
                            lb_err *err) {
    const lb_commbench_params *p = B->p;
    int n = B->n, nb = lb_boot_size(boot);
    size_t count = (size_t)p->matrix_bytes / lb_comm_dtype_bytes(p->dtype);
    size_t k = 2 * (size_t)n;
    double *mine = calloc(k, sizeof *mine), *all = calloc(k * (size_t)nb, sizeof *all);
    if (mine == NULL || all == NULL) {
        free(mine);
        free(all);
        return lb_fail(err, LB_ERR_NOMEM, "out of memory");
    }
    lb_status st = LB_OK;
    for (int a = 0; st == LB_OK && a < n; a++) {
        char next[64];
        snprintf(next, sizeof next, "the pair matrix's sends from rank %d", a);
        st = stop_if_interrupted(boot, next, err);
        if (st != LB_OK) break;
        for (int b = 0; st == LB_OK && B->c != NULL && b < n; b++) {
            if (a == b) continue;
            st = lb_comm_barrier(B->c, B->b.stream, err);
            if (st != LB_OK || (B->rank != a && B->rank != b)) continue;
            for (int64_t i = 0; st == LB_OK && i < p->warmup + p->iters; i++) {
                /* The pair's first transfers set up its connection: marked after warm-up. */
                if (i == p->warmup && B->rank == b) st = mark(&B->b, 0, err);
                if (st == LB_OK)
                    st = B->rank == a
                             ? lb_comm_send(B->c, B->b.send, count, p->dtype, b, B->b.stream, err)
                             : lb_comm_recv(B->c, B->b.recv, count, p->dtype, a, B->b.stream, err);
            }
            if (st == LB_OK && B->rank == b) st = mark(&B->b, 1, err);
            if (st == LB_OK) st = lb_comm_sync(B->c, B->b.stream, err);
            double us = 0;
            if (st == LB_OK && B->rank == b) st = between(&B->b, 0, &us, err);
            if (st == LB_OK && B->rank == b)
                mine[a] =
                    (double)count * lb_comm_dtype_bytes(p->dtype) * (double)p->iters / (us * 1e3);
        }
        st = agree(boot, st, err);
    }
    if (st == LB_OK) st = nvlinks_to_peers(B, boot, member, mine + n, err);
    if (st == LB_OK) st = lb_boot_gather(boot, mine, k * sizeof *mine, all, err);
    for (int q = 0, to = 0; st == LB_OK && r != NULL && q < nb; q++) {
        if (!member[q]) continue;
        for (int from = 0; from < n; from++) {
            char name[LB_NAME_BYTES];
            const double *row = all + (size_t)q * k;
            if (from != to) {
                snprintf(name, sizeof name, "matrix.%d.%d.gbps", from, to);
                lb_result_set_metric(r, name, row[from], "GB/s");
            }
            snprintf(name, sizeof name, "matrix.%d.%d.nvlinks", to, from);
            lb_result_set_metric(r, name, row[n + from], "links");
        }
        to++;
    }
    free(mine);
    free(all);
    return st;
}

lb_status lb_commbench_members(lb_boot *boot, const lb_commbench_params *p, int32_t *member, int *n,
                               lb_err *err) {
    int nb = lb_boot_size(boot);
    int32_t me = p->comm.backend != LB_COMM_BACKEND_NCCL || lb_devinfo_cuda_device_count() > 0;
    int32_t *all = member != NULL ? member : calloc((size_t)nb, sizeof *all);
    if (all == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of memory");
    lb_status st = lb_boot_gather(boot, &me, sizeof me, all, err);
    if (st == LB_OK) st = lb_boot_bcast(boot, all, (size_t)nb * sizeof *all, err);
    *n = 0;
    for (int q = 0; st == LB_OK && q < nb; q++)
        *n += all[q] != 0;
    if (all != member) free(all);
    return st;
}

lb_status lb_commbench_validate_ranks(const lb_commbench_params *p, int n, lb_err *err) {
    if (p->root >= n)
        return lb_fail(err, LB_ERR_USAGE,
                       "-r %d: the root must be one of the %d ranks that take part", p->root, n);
    size_t es = lb_comm_dtype_bytes(p->dtype);
    static const lb_bench_coll split[] = {LB_BENCH_ALL_GATHER, LB_BENCH_REDUCE_SCATTER,
                                          LB_BENCH_ALLTOALL};
    for (size_t i = 0; i < sizeof split / sizeof split[0]; i++)
        if (p->colls[split[i]] && (size_t)p->max_bytes / es < (size_t)n)
            return lb_fail(err, LB_ERR_USAGE,
                           "-e %lld: %s over %d ranks needs at least %zu bytes (one %s per rank)",
                           (long long)p->max_bytes, coll_names[split[i]], n, es * (size_t)n,
                           lb_comm_dtype_name(p->dtype));
    return LB_OK;
}

lb_status lb_commbench_run(lb_boot *boot, const lb_commbench_params *p, lb_result *r, lb_err *err) {
    LB_TRY(lb_commbench_validate(p, err));
    bool nccl = p->comm.backend == LB_COMM_BACKEND_NCCL;
    int nb = lb_boot_size(boot), n = 0;
    int32_t *member = calloc((size_t)nb, sizeof *member);
    if (member == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of memory");
    lb_status st = lb_commbench_members(boot, p, member, &n, err);
    if (st == LB_OK) st = lb_commbench_validate_ranks(p, n, err);
    lb_comm *c = NULL;
    if (st == LB_OK) st = lb_comm_init(boot, &p->comm, member[lb_boot_rank(boot)] != 0, &c, err);
    if (st != LB_OK) {
        free(member);
        return st;
    }
    bench B = {.c = c, .p = p, .rank = c ? lb_comm_rank(c) : -1, .n = n};
    if (r != NULL) set_config(r, p, boot, B.n);
    lb_status alloc = LB_OK;
    if (c != NULL) {
#ifdef LB_HAVE_CUDA
        if (nccl) cudaSetDevice(lb_comm_device(c));
#endif
        size_t bytes = (size_t)(p->max_bytes > p->matrix_bytes || !p->matrix ? p->max_bytes
                                                                             : p->matrix_bytes) +
                       lb_comm_dtype_bytes(p->dtype);
        alloc = bufs_init(&B.b, nccl, bytes, (int)p->iters + 1, err);
    }
    st = agree(boot, alloc, err);
    double bw_sum = 0;
    int bw_n = 0;
    int64_t wrong_total = 0;
    if (st == LB_OK) st = run_rows(&B, boot, member, r, &bw_sum, &bw_n, &wrong_total, err);
    if (st == LB_OK && p->matrix) st = run_matrix(&B, boot, member, r, err);
    if (r != NULL && bw_n > 0) {
        lb_result_set_metric(r, "avg_busbw", bw_sum / bw_n, "GB/s");
        if (p->check) lb_result_set_metric(r, "wrong_total", (double)wrong_total, "elements");
    }
    if (c != NULL) bufs_free(&B.b);
    free(member);
    if (st == LB_OK && p->check && wrong_total > 0)
        st = lb_fail(err, LB_ERR_RUNTIME, "%lld elements were wrong (see the #wrong columns)",
                     (long long)wrong_total);
    lb_comm_free(c);
    return st;
}
