/* comm.c: the interface's common half: dtypes and ops, argument checks, and dispatch to a
 * backend. A broken communicator refuses every call with its first error, so a failure
 * deep in a training step surfaces with the sentence that names its cause. */
#include "comm/comm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_impl.h"

static const struct {
    const char *name, *alias;
    size_t bytes;
} dtypes[LB_COMM_N_DTYPES] = {
    [LB_COMM_INT8] = {"int8", "i8", 1},     [LB_COMM_UINT8] = {"uint8", "u8", 1},
    [LB_COMM_INT32] = {"int32", "i32", 4},  [LB_COMM_UINT32] = {"uint32", "u32", 4},
    [LB_COMM_INT64] = {"int64", "i64", 8},  [LB_COMM_UINT64] = {"uint64", "u64", 8},
    [LB_COMM_FP16] = {"half", "fp16", 2},   [LB_COMM_FP32] = {"float", "fp32", 4},
    [LB_COMM_FP64] = {"double", "fp64", 8}, [LB_COMM_BF16] = {"bfloat16", "bf16", 2},
};

static const char *const op_names[LB_COMM_N_OPS] = {"sum", "avg", "max", "min"};

size_t lb_comm_dtype_bytes(lb_comm_dtype t) {
    return dtypes[t].bytes;
}
const char *lb_comm_dtype_name(lb_comm_dtype t) {
    return dtypes[t].name;
}
int lb_comm_dtype_parse(const char *name, lb_comm_dtype *out) {
    for (int i = 0; i < LB_COMM_N_DTYPES; i++)
        if (strcmp(name, dtypes[i].name) == 0 || strcmp(name, dtypes[i].alias) == 0) {
            *out = (lb_comm_dtype)i;
            return 0;
        }
    return -1;
}
bool lb_comm_dtype_is_float(lb_comm_dtype t) {
    return t == LB_COMM_FP16 || t == LB_COMM_FP32 || t == LB_COMM_FP64 || t == LB_COMM_BF16;
}
const char *lb_comm_op_name(lb_comm_op op) {
    return op_names[op];
}
int lb_comm_op_parse(const char *name, lb_comm_op *out) {
    for (int i = 0; i < LB_COMM_N_OPS; i++)
        if (strcmp(name, op_names[i]) == 0) {
            *out = (lb_comm_op)i;
            return 0;
        }
    return -1;
}
const char *lb_comm_backend_name(lb_comm_backend b) {
    return b == LB_COMM_BACKEND_NCCL ? "nccl" : "mpi";
}

bool lb_comm_backend_built(lb_comm_backend b) {
#ifdef LB_HAVE_NCCL
    if (b == LB_COMM_BACKEND_NCCL) return true;
#endif
#ifdef LB_HAVE_MPI
    if (b == LB_COMM_BACKEND_MPI) return true;
#endif
    return false;
}

/* ---- 16-bit floats on the host ---- */

static float bits_to_float(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static uint32_t float_to_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static uint16_t float_to_bf16(float f) {
    uint32_t u = float_to_bits(f);
    if (isnan(f)) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fff + ((u >> 16) & 1); /* round to nearest, ties to even */
    return (uint16_t)(u >> 16);
}
static float bf16_to_float(uint16_t h) {
    return bits_to_float((uint32_t)h << 16);
}

static float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (exp == 0x1f) return bits_to_float(sign | 0x7f800000 | (man << 13));
    if (exp == 0) {
        float v = ldexpf((float)man, -24);
        return sign ? -v : v;
    }
    return bits_to_float(sign | ((exp + 112) << 23) | (man << 13));
}
static uint16_t float_to_half(float f) {
    uint32_t u = float_to_bits(f), sign = (u >> 16) & 0x8000;
    float a = fabsf(f);
    if (isnan(f)) return (uint16_t)(sign | 0x7e00);
    if (a >= 65520.0f) return (uint16_t)(sign | 0x7c00); /* rounds to infinity */
    if (a < 6.103515625e-05f) {                          /* subnormal: multiples of 2^-24 */
        float q = nearbyintf(a * 16777216.0f);
        return (uint16_t)(sign | (uint32_t)q);
    }
    uint32_t m = float_to_bits(a);
    uint32_t exp = (m >> 23) - 112, man = m & 0x7fffff;
    uint32_t h = (exp << 10) | (man >> 13), rest = man & 0x1fff;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) h++; /* carries into the exponent */
    return (uint16_t)(sign | h);
}

double lb_comm_value_get(const void *buf, lb_comm_dtype t, size_t i) {
    switch (t) {
    case LB_COMM_INT8: return ((const int8_t *)buf)[i];
    case LB_COMM_UINT8: return ((const uint8_t *)buf)[i];
    case LB_COMM_INT32: return ((const int32_t *)buf)[i];
    case LB_COMM_UINT32: return ((const uint32_t *)buf)[i];
    case LB_COMM_INT64: return (double)((const int64_t *)buf)[i];
    case LB_COMM_UINT64: return (double)((const uint64_t *)buf)[i];
    case LB_COMM_FP16: return half_to_float(((const uint16_t *)buf)[i]);
    case LB_COMM_FP32: return ((const float *)buf)[i];
    case LB_COMM_FP64: return ((const double *)buf)[i];
    case LB_COMM_BF16: return bf16_to_float(((const uint16_t *)buf)[i]);
    default: return NAN;
    }
}

void lb_comm_value_set(void *buf, lb_comm_dtype t, size_t i, double v) {
    switch (t) {
    case LB_COMM_INT8: ((int8_t *)buf)[i] = (int8_t)v; break;
    case LB_COMM_UINT8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
    case LB_COMM_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case LB_COMM_UINT32: ((uint32_t *)buf)[i] = (uint32_t)v; break;
    case LB_COMM_INT64: ((int64_t *)buf)[i] = (int64_t)v; break;
    case LB_COMM_UINT64: ((uint64_t *)buf)[i] = (uint64_t)v; break;
    case LB_COMM_FP16: ((uint16_t *)buf)[i] = float_to_half((float)v); break;
    case LB_COMM_FP32: ((float *)buf)[i] = (float)v; break;
    case LB_COMM_FP64: ((double *)buf)[i] = v; break;
    case LB_COMM_BF16: ((uint16_t *)buf)[i] = float_to_bf16((float)v); break;
    default: break;
    }
}

/* ---- communicator ---- */

lb_comm_params lb_comm_default_params(void) {
    return (lb_comm_params){
        .backend = LB_COMM_BACKEND_MPI,
        .device = -1,
        .setup_timeout_s = 120,
        .op_timeout_s = 300,
    };
}

lb_status lb_comm_pick_backend(lb_boot *boot, lb_comm_backend *out, lb_err *err) {
    int32_t mine = lb_comm_nccl_local_gpus() > 0, any = 0;
    int n = lb_boot_size(boot);
    int32_t *all = lb_boot_rank(boot) == 0 ? calloc((size_t)n, sizeof *all) : NULL;
    if (lb_boot_rank(boot) == 0 && all == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of memory");
    lb_status st = lb_boot_gather(boot, &mine, sizeof mine, all, err);
    for (int i = 0; st == LB_OK && all != NULL && i < n; i++)
        any |= all[i];
    free(all);
    if (st == LB_OK) st = lb_boot_bcast(boot, &any, sizeof any, err);
    *out = any ? LB_COMM_BACKEND_NCCL : LB_COMM_BACKEND_MPI;
    return st;
}

const char *lb_comm_coll_name(lb_coll_kind k) {
    static const char *const names[] = {"all_reduce",     "reduce",     "broadcast",
                                        "reduce_scatter", "all_gather", "all_to_all",
                                        "send",           "recv",       "barrier"};
    return names[k];
}

void lb_comm_coll_describe(const lb_comm *c, const lb_coll_call *call, char *buf, size_t cap) {
    bool reduces = call->kind == LB_COLL_ALL_REDUCE || call->kind == LB_COLL_REDUCE ||
                   call->kind == LB_COLL_REDUCE_SCATTER;
    if (call->kind == LB_COLL_BARRIER)
        snprintf(buf, cap, "barrier #%llu", (unsigned long long)c->seq);
    else
        snprintf(buf, cap, "%s #%llu (%zu x %s%s%s, %zu bytes)", lb_comm_coll_name(call->kind),
                 (unsigned long long)c->seq, call->count, lb_comm_dtype_name(call->dtype),
                 reduces ? " " : "", reduces ? lb_comm_op_name(call->op) : "",
                 call->count * lb_comm_dtype_bytes(call->dtype));
}

void lb_comm_mark_broken(lb_comm *c, const lb_err *err) {
    if (c->broken) return;
    c->broken = true;
    c->first_error = *err;
    if (c->backend == LB_COMM_BACKEND_MPI) lb_boot_mark_broken(c->boot);
}

lb_status lb_comm_init(lb_boot *boot, const lb_comm_params *p, bool join, lb_comm **out,
                       lb_err *err) {
    *out = NULL;
    lb_comm *c = calloc(1, sizeof *c);
    if (c == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of memory");
    c->boot = boot;
    c->params = *p;
    c->backend = p->backend;
    c->device = -1;
    lb_status st = p->backend == LB_COMM_BACKEND_NCCL ? lb_comm_nccl_init(c, join, err)
                                                      : lb_comm_mpi_init(c, err);
    /* MPI: every rank joins (a rank without a GPU moves host buffers like the others) */
    if (st != LB_OK || (!join && p->backend == LB_COMM_BACKEND_NCCL)) {
        if (c->ops != NULL) c->ops->free(c);
        free(c);
        return st;
    }
    *out = c;
    return LB_OK;
}

void lb_comm_free(lb_comm *c) {
    if (c == NULL) return;
    c->ops->free(c);
    free(c);
}

int lb_comm_rank(const lb_comm *c) {
    return c->rank;
}
int lb_comm_size(const lb_comm *c) {
    return c->size;
}
lb_comm_backend lb_comm_backend_of(const lb_comm *c) {
    return c->backend;
}
int lb_comm_device(const lb_comm *c) {
    return c->device;
}
bool lb_comm_broken(const lb_comm *c) {
    return c->broken;
}

static lb_status refuse_if_broken(lb_comm *c, lb_err *err) {
    if (!c->broken) return LB_OK;
    if (err != NULL) *err = c->first_error;
    return LB_ERR_COMM;
}

static lb_status dispatch(lb_comm *c, const lb_coll_call *call, lb_err *err) {
    LB_TRY(refuse_if_broken(c, err));
    bool rooted = call->kind == LB_COLL_REDUCE || call->kind == LB_COLL_BROADCAST ||
                  call->kind == LB_COLL_SEND || call->kind == LB_COLL_RECV;
    if (rooted && (call->root < 0 || call->root >= c->size))
        return lb_fail(err, LB_ERR_USAGE, "%s: %s %d is not a rank of this communicator (0-%d)",
                       lb_comm_coll_name(call->kind),
                       call->kind == LB_COLL_SEND || call->kind == LB_COLL_RECV ? "peer" : "root",
                       call->root, c->size - 1);
    if ((call->kind == LB_COLL_SEND || call->kind == LB_COLL_RECV) && call->root == c->rank)
        return lb_fail(err, LB_ERR_USAGE, "%s: rank %d cannot be its own peer",
                       lb_comm_coll_name(call->kind), c->rank);
    c->seq++;
    lb_status st = c->ops->call(c, call, err);
    if (st == LB_ERR_COMM) lb_comm_mark_broken(c, err);
    return st;
}

#define CALL(...) dispatch(c, &(lb_coll_call){__VA_ARGS__}, err)

lb_status lb_comm_all_reduce(lb_comm *c, const void *send, void *recv, size_t count,
                             lb_comm_dtype t, lb_comm_op op, void *stream, lb_err *err) {
    return CALL(LB_COLL_ALL_REDUCE, send, recv, count, t, op, 0, stream);
}
lb_status lb_comm_reduce(lb_comm *c, const void *send, void *recv, size_t count, lb_comm_dtype t,
                         lb_comm_op op, int root, void *stream, lb_err *err) {
    return CALL(LB_COLL_REDUCE, send, recv, count, t, op, root, stream);
}
lb_status lb_comm_broadcast(lb_comm *c, const void *send, void *recv, size_t count, lb_comm_dtype t,
                            int root, void *stream, lb_err *err) {
    return CALL(LB_COLL_BROADCAST, send, recv, count, t, LB_COMM_SUM, root, stream);
}
lb_status lb_comm_reduce_scatter(lb_comm *c, const void *send, void *recv, size_t recv_count,
                                 lb_comm_dtype t, lb_comm_op op, void *stream, lb_err *err) {
    return CALL(LB_COLL_REDUCE_SCATTER, send, recv, recv_count, t, op, 0, stream);
}
lb_status lb_comm_all_gather(lb_comm *c, const void *send, void *recv, size_t send_count,
                             lb_comm_dtype t, void *stream, lb_err *err) {
    return CALL(LB_COLL_ALL_GATHER, send, recv, send_count, t, LB_COMM_SUM, 0, stream);
}
lb_status lb_comm_all_to_all(lb_comm *c, const void *send, void *recv, size_t count,
                             lb_comm_dtype t, void *stream, lb_err *err) {
    return CALL(LB_COLL_ALL_TO_ALL, send, recv, count, t, LB_COMM_SUM, 0, stream);
}
lb_status lb_comm_send(lb_comm *c, const void *buf, size_t count, lb_comm_dtype t, int peer,
                       void *stream, lb_err *err) {
    return CALL(LB_COLL_SEND, buf, NULL, count, t, LB_COMM_SUM, peer, stream);
}
lb_status lb_comm_recv(lb_comm *c, void *buf, size_t count, lb_comm_dtype t, int peer, void *stream,
                       lb_err *err) {
    return CALL(LB_COLL_RECV, NULL, buf, count, t, LB_COMM_SUM, peer, stream);
}
lb_status lb_comm_barrier(lb_comm *c, void *stream, lb_err *err) {
    return CALL(LB_COLL_BARRIER, NULL, NULL, 0, LB_COMM_UINT8, LB_COMM_SUM, 0, stream);
}

lb_status lb_comm_group_start(lb_comm *c, lb_err *err) {
    LB_TRY(refuse_if_broken(c, err));
    if (c->group_depth++ > 0) return LB_OK;
    return c->ops->group_start(c, err);
}

lb_status lb_comm_group_end(lb_comm *c, lb_err *err) {
    if (c->group_depth == 0)
        return lb_fail(err, LB_ERR_USAGE, "lb_comm_group_end without lb_comm_group_start");
    if (--c->group_depth > 0) return refuse_if_broken(c, err);
    LB_TRY(refuse_if_broken(c, err));
    lb_status st = c->ops->group_end(c, err);
    if (st == LB_ERR_COMM) lb_comm_mark_broken(c, err);
    return st;
}

lb_status lb_comm_watch(lb_comm *c, void *stream, const char *what, lb_err *err) {
    LB_TRY(refuse_if_broken(c, err));
    if (c->ops->watch == NULL) return LB_OK;
    lb_status st = c->ops->watch(c, stream, what, err);
    if (st == LB_ERR_COMM) lb_comm_mark_broken(c, err);
    return st;
}

lb_status lb_comm_sync(lb_comm *c, void *stream, lb_err *err) {
    LB_TRY(refuse_if_broken(c, err));
    lb_status st = c->ops->sync(c, stream, err);
    if (st == LB_ERR_COMM) lb_comm_mark_broken(c, err);
    return st;
}
