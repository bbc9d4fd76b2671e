/* comm_mpi.c: the MPI backend of comm.h: host buffers, every call started as a
 * non-blocking MPI operation and waited for with a deadline.
 *
 * NCCL's semantics on MPI's calls: fp16 and bf16 are 2-byte MPI types with their own
 * reduction functions (arithmetic in float, rounded back), avg is a sum divided on arrival,
 * and where NCCL's in-place layout differs from MPI_IN_PLACE (reduce_scatter, all_to_all)
 * the result goes through a scratch buffer. When a wait passes its deadline, each rank
 * that gave up tells every other rank so on a duplicate communicator, and listens a short
 * while for the same word from them: the ranks that stay silent are the ones named as never
 * having arrived. Counts above INT_MAX are refused (MPI's int counts). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_impl.h"

#ifdef LB_HAVE_MPI
#include <limits.h>
#include <mpi.h>
#include <time.h>

#include "core/clock.h"

#define TAG_P2P   7
#define TAG_STUCK 8

typedef struct {
    void *copy_to; /* after completion: copy scratch here (NULL: none) */
    void *divide;  /* then divide these elements by the size (avg; NULL: none) */
    void *scratch; /* owned: freed after completion */
    size_t count;  /* elements of copy_to and divide */
    lb_comm_dtype dtype;
} post_action;

typedef struct {
    MPI_Comm comm, ctrl;
    MPI_Request *reqs;
    post_action *posts;
    size_t n, cap;
    int64_t deadline_ns; /* of the wait in progress */
    char what[160];      /* the call being waited for, or "group of N calls" */
} mpi_state;

static MPI_Datatype type_f16 = MPI_DATATYPE_NULL, type_bf16 = MPI_DATATYPE_NULL;
static MPI_Op op16[LB_COMM_N_OPS];

/* Reduction of 2-byte floats: which format is told by the datatype handle. */
static void reduce16(void *in, void *inout, int *len, MPI_Datatype *dt, lb_comm_op op) {
    lb_comm_dtype t = *dt == type_bf16 ? LB_COMM_BF16 : LB_COMM_FP16;
    for (int i = 0; i < *len; i++) {
        double a = lb_comm_value_get(in, t, (size_t)i), b = lb_comm_value_get(inout, t, (size_t)i);
        double r = op == LB_COMM_MAX   ? (a > b ? a : b)
                   : op == LB_COMM_MIN ? (a < b ? a : b)
                                       : a + b;
        lb_comm_value_set(inout, t, (size_t)i, (float)r);
    }
}
static void sum16(void *in, void *inout, int *len, MPI_Datatype *dt) {
    reduce16(in, inout, len, dt, LB_COMM_SUM);
}
static void max16(void *in, void *inout, int *len, MPI_Datatype *dt) {
    reduce16(in, inout, len, dt, LB_COMM_MAX);
}
static void min16(void *in, void *inout, int *len, MPI_Datatype *dt) {
    reduce16(in, inout, len, dt, LB_COMM_MIN);
}

static void make_types(void) {
    if (type_f16 != MPI_DATATYPE_NULL) return;
    MPI_Type_contiguous(1, MPI_UINT16_T, &type_f16);
    MPI_Type_commit(&type_f16);
    MPI_Type_contiguous(1, MPI_UINT16_T, &type_bf16);
    MPI_Type_commit(&type_bf16);
    MPI_Op_create(sum16, 1, &op16[LB_COMM_SUM]);
    op16[LB_COMM_AVG] = op16[LB_COMM_SUM];
    MPI_Op_create(max16, 1, &op16[LB_COMM_MAX]);
    MPI_Op_create(min16, 1, &op16[LB_COMM_MIN]);
}

static MPI_Datatype mpi_type(lb_comm_dtype t) {
    switch (t) {
    case LB_COMM_INT8: return MPI_INT8_T;
    case LB_COMM_UINT8: return MPI_UINT8_T;
    case LB_COMM_INT32: return MPI_INT32_T;
    case LB_COMM_UINT32: return MPI_UINT32_T;
    case LB_COMM_INT64: return MPI_INT64_T;
    case LB_COMM_UINT64: return MPI_UINT64_T;
    case LB_COMM_FP16: return type_f16;
    case LB_COMM_FP32: return MPI_FLOAT;
    case LB_COMM_FP64: return MPI_DOUBLE;
    case LB_COMM_BF16: return type_bf16;
    default: return MPI_DATATYPE_NULL;
    }
}

static MPI_Op mpi_op(lb_comm_dtype t, lb_comm_op op) {
    if (t == LB_COMM_FP16 || t == LB_COMM_BF16) return op16[op];
    return op == LB_COMM_MAX ? MPI_MAX : op == LB_COMM_MIN ? MPI_MIN : MPI_SUM;
}

static void sleep_us(long us) {
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

/* Appends a request slot; returns it (NULL on no memory). */
static post_action *push(mpi_state *s, MPI_Request **req) {
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 16;
        MPI_Request *r = realloc(s->reqs, cap * sizeof *r);
        if (r != NULL) s->reqs = r;
        post_action *p = realloc(s->posts, cap * sizeof *p);
        if (p != NULL) s->posts = p;
        if (r == NULL || p == NULL) return NULL;
        s->cap = cap;
    }
    *req = &s->reqs[s->n];
    post_action *p = &s->posts[s->n++];
    memset(p, 0, sizeof *p);
    return p;
}

static void run_posts(lb_comm *c, mpi_state *s) {
    for (size_t i = 0; i < s->n; i++) {
        post_action *p = &s->posts[i];
        size_t bytes = p->count * lb_comm_dtype_bytes(p->dtype);
        if (p->copy_to != NULL) memcpy(p->copy_to, p->scratch, bytes);
        if (p->divide != NULL)
            for (size_t k = 0; k < p->count; k++) {
                double v = lb_comm_value_get(p->divide, p->dtype, k) / c->size;
                lb_comm_value_set(p->divide, p->dtype, k, v);
            }
        free(p->scratch);
    }
    s->n = 0;
}

/* After a deadline: tell every rank, hear who else is waiting, name the silent ones. */
static lb_status name_missing(lb_comm *c, mpi_state *s, lb_err *err) {
    int64_t seq = (int64_t)c->seq;
    MPI_Request *sends = calloc((size_t)c->size, sizeof *sends);
    char *heard = calloc((size_t)c->size, 1);
    for (int r = 0; sends != NULL && r < c->size; r++)
        if (r != c->rank) MPI_Isend(&seq, 1, MPI_INT64_T, r, TAG_STUCK, s->ctrl, &sends[r]);
    double grace_s = c->params.op_timeout_s < 2 ? c->params.op_timeout_s : 2;
    int64_t until = lb_clock_now_ns() + (int64_t)((grace_s > 0.5 ? grace_s : 0.5) * 1e9);
    int n_heard = 0;
    while (heard != NULL && n_heard < c->size - 1 && lb_clock_now_ns() < until) {
        int flag = 0;
        MPI_Status stt;
        MPI_Iprobe(MPI_ANY_SOURCE, TAG_STUCK, s->ctrl, &flag, &stt);
        if (!flag) {
            sleep_us(1000);
            continue;
        }
        int64_t theirs;
        MPI_Recv(&theirs, 1, MPI_INT64_T, stt.MPI_SOURCE, TAG_STUCK, s->ctrl, MPI_STATUS_IGNORE);
        if (!heard[stt.MPI_SOURCE]) n_heard++;
        heard[stt.MPI_SOURCE] = 1;
    }
    char missing[160] = "";
    size_t used = 0;
    for (int r = 0; heard != NULL && r < c->size; r++)
        if (r != c->rank && !heard[r] && used < sizeof missing - 16)
            used += (size_t)snprintf(missing + used, sizeof missing - used, "%s%d",
                                     used ? ", " : "", r);
    free(heard);
    free(sends); /* the requests stay pending: the job ends with MPI_Abort */
    if (used > 0)
        return lb_fail(err, LB_ERR_COMM,
                       "%s did not complete within %.1f s on rank %d (%s): rank(s) %s never "
                       "arrived",
                       s->what, c->params.op_timeout_s, c->rank, lb_boot_host(c->boot), missing);
    return lb_fail(err, LB_ERR_COMM,
                   "%s did not complete within %.1f s on rank %d (%s), though every rank was "
                   "waiting in it",
                   s->what, c->params.op_timeout_s, c->rank, lb_boot_host(c->boot));
}

static lb_status wait_all(lb_comm *c, mpi_state *s, lb_err *err) {
    for (long spins = 0;; spins++) {
        int done = 0;
        if (MPI_Testall((int)s->n, s->reqs, &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS)
            return lb_fail(err, LB_ERR_COMM, "%s failed in MPI on rank %d (%s)", s->what, c->rank,
                           lb_boot_host(c->boot));
        if (done) {
            run_posts(c, s);
            return LB_OK;
        }
        if (lb_clock_now_ns() > s->deadline_ns) return name_missing(c, s, err);
        if (spins > 2000) sleep_us(20);
    }
}

static lb_status start(lb_comm *c, mpi_state *s, const lb_coll_call *k, lb_err *err) {
    size_t es = lb_comm_dtype_bytes(k->dtype), n = (size_t)c->size;
    if (k->count > INT_MAX || (k->kind == LB_COLL_ALL_TO_ALL && k->count * n > INT_MAX))
        return lb_fail(err, LB_ERR_UNSUPPORTED,
                       "%s of %zu elements: the MPI backend takes at most %d per call",
                       lb_comm_coll_name(k->kind), k->count, INT_MAX);
    int cnt = (int)k->count;
    MPI_Datatype t = mpi_type(k->dtype);
    MPI_Op op = mpi_op(k->dtype, k->op);
    MPI_Request *req;
    post_action *p = push(s, &req);
    if (p == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of memory");
    p->dtype = k->dtype;
    p->count = k->count;
    bool avg = k->op == LB_COMM_AVG;
    int rc = MPI_SUCCESS;
    switch (k->kind) {
    case LB_COLL_ALL_REDUCE:
        rc = MPI_Iallreduce(k->send == k->recv ? MPI_IN_PLACE : k->send, k->recv, cnt, t, op,
                            s->comm, req);
        if (avg) p->divide = k->recv;
        break;
    case LB_COLL_REDUCE: {
        bool root = c->rank == k->root;
        const void *sb = root && k->send == k->recv ? MPI_IN_PLACE : k->send;
        rc = MPI_Ireduce(sb, k->recv, cnt, t, op, k->root, s->comm, req);
        if (avg && root) p->divide = k->recv;
        break;
    }
    case LB_COLL_BROADCAST:
        if (c->rank == k->root && k->send != k->recv) memcpy(k->recv, k->send, k->count * es);
        rc = MPI_Ibcast(k->recv, cnt, t, k->root, s->comm, req);
        break;
    case LB_COLL_REDUCE_SCATTER: {
        void *dst = k->recv;
        if ((const char *)k->send + (size_t)c->rank * k->count * es == (const char *)k->recv) {
            if ((p->scratch = malloc(k->count * es + 1)) == NULL)
                return lb_fail(err, LB_ERR_NOMEM, "out of memory");
            p->copy_to = k->recv;
            dst = p->scratch;
        }
        rc = MPI_Ireduce_scatter_block(k->send, dst, cnt, t, op, s->comm, req);
        if (avg) p->divide = k->recv;
        break;
    }
    case LB_COLL_ALL_GATHER: {
        bool inplace =
            (const char *)k->recv + (size_t)c->rank * k->count * es == (const char *)k->send;
        rc =
            MPI_Iallgather(inplace ? MPI_IN_PLACE : k->send, cnt, t, k->recv, cnt, t, s->comm, req);
        break;
    }
    case LB_COLL_ALL_TO_ALL: {
        const void *src = k->send;
        if (k->send == k->recv) {
            if ((p->scratch = malloc(n * k->count * es + 1)) == NULL)
                return lb_fail(err, LB_ERR_NOMEM, "out of memory");
            memcpy(p->scratch, k->send, n * k->count * es);
            src = p->scratch;
        }
        rc = MPI_Ialltoall(src, cnt, t, k->recv, cnt, t, s->comm, req);
        break;
    }
    case LB_COLL_SEND: rc = MPI_Isend(k->send, cnt, t, k->root, TAG_P2P, s->comm, req); break;
    case LB_COLL_RECV: rc = MPI_Irecv(k->recv, cnt, t, k->root, TAG_P2P, s->comm, req); break;
    case LB_COLL_BARRIER: rc = MPI_Ibarrier(s->comm, req); break;
    }
    if (rc != MPI_SUCCESS)
        return lb_fail(err, LB_ERR_COMM, "%s could not be started in MPI on rank %d (%s)",
                       lb_comm_coll_name(k->kind), c->rank, lb_boot_host(c->boot));
    return LB_OK;
}

static lb_status mpi_call(lb_comm *c, const lb_coll_call *k, lb_err *err) {
    mpi_state *s = c->impl;
    if (c->group_depth == 0) {
        s->deadline_ns = lb_clock_now_ns() + (int64_t)(c->params.op_timeout_s * 1e9);
        lb_comm_coll_describe(c, k, s->what, sizeof s->what);
    }
    LB_TRY(start(c, s, k, err));
    return c->group_depth == 0 ? wait_all(c, s, err) : LB_OK;
}

static lb_status mpi_group_start(lb_comm *c, lb_err *err) {
    return LB_OK;
}

static lb_status mpi_group_end(lb_comm *c, lb_err *err) {
    mpi_state *s = c->impl;
    s->deadline_ns = lb_clock_now_ns() + (int64_t)(c->params.op_timeout_s * 1e9);
    snprintf(s->what, sizeof s->what, "group of %zu calls ending at #%llu", s->n,
             (unsigned long long)c->seq);
    return wait_all(c, s, err);
}

static lb_status mpi_sync(lb_comm *c, void *stream, lb_err *err) {
    return LB_OK;
}

static void mpi_free(lb_comm *c) {
    mpi_state *s = c->impl;
    if (s == NULL) return;
    if (!c->broken) {
        run_posts(c, s);
        MPI_Comm_free(&s->ctrl);
        MPI_Comm_free(&s->comm);
    } else {
        for (size_t i = 0; i < s->n; i++)
            free(s->posts[i].scratch);
    }
    free(s->reqs);
    free(s->posts);
    free(s);
    c->impl = NULL;
}

static const lb_comm_ops mpi_ops = {mpi_call, mpi_group_start, mpi_group_end, mpi_sync,
                                    NULL,     mpi_free};

lb_status lb_comm_mpi_init(lb_comm *c, lb_err *err) {
    if (lb_boot_source_of(c->boot) != LB_BOOT_MPI)
        return lb_fail(err, LB_ERR_USAGE,
                       "the MPI backend needs ranks started by mpirun or srun --mpi=pmix (this "
                       "job was started as '%s'); use --backend nccl or an MPI launcher",
                       lb_boot_source_name(lb_boot_source_of(c->boot)));
    make_types();
    mpi_state *s = calloc(1, sizeof *s);
    if (s == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of memory");
    c->ops = &mpi_ops;
    c->impl = s;
    MPI_Comm_dup(MPI_COMM_WORLD, &s->comm);
    MPI_Comm_dup(MPI_COMM_WORLD, &s->ctrl);
    MPI_Comm_rank(s->comm, &c->rank);
    MPI_Comm_size(s->comm, &c->size);
    return LB_OK;
}

#else

lb_status lb_comm_mpi_init(lb_comm *c, lb_err *err) {
    return lb_fail(err, LB_ERR_UNSUPPORTED,
                   "this llmbench was built without MPI: install libopenmpi-dev and rebuild");
}

#endif
