/* comm.h: collectives over a group of ranks, one interface with two backends.
 *
 * NCCL moves device buffers on a CUDA stream the caller chooses; MPI moves host buffers
 * (CI has no GPU, and a rank without a GPU uses it too). Both take the same calls in
 * NCCL's shape: element counts, a dtype, an op, in-place when the send and receive
 * buffers are the ones NCCL names in-place (all_gather: send == recv + rank * count;
 * reduce_scatter: send + rank * count == recv; the others: send == recv).
 *
 * Overlap (what data-parallel training builds on): with NCCL every call only enqueues
 * work on `stream` and returns; compute on another stream runs meanwhile, and an event or
 * lb_comm_sync orders the two. Calls between lb_comm_group_start and lb_comm_group_end
 * are fused into one launch (a bucket's reduce_scatter and all_gather, an all_to_all's
 * sends and receives). With MPI a call completes before it returns, except inside a group,
 * where every call is started at once and lb_comm_group_end waits for all of them.
 *
 * Nothing waits forever. Creating a communicator has a deadline (setup_timeout_s); every
 * call has one (op_timeout_s) counted from the call. With NCCL a watchdog thread polls for
 * asynchronous errors and for work enqueued longer ago than the deadline, and aborts the
 * communicator, which ends every kernel of it; with MPI the wait itself is bounded, and
 * the ranks that timed out tell each other, so the error names the ranks that never
 * arrived. After a failure the communicator is broken: every later call returns the
 * first error again (one sentence naming rank, host, GPU, collective, size, and NCCL's
 * error with its last warning), and the process must end; with MPI lb_boot_free then
 * aborts the job instead of finalising it.
 *
 * Not here: how ranks find each other (comm/boot.h), starting processes (comm/launch.h),
 * timing and checking (commbench/). */
#ifndef LB_COMM_COMM_H
#define LB_COMM_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "comm/boot.h"
#include "core/status.h"

typedef enum {
    LB_COMM_INT8 = 0,
    LB_COMM_UINT8,
    LB_COMM_INT32,
    LB_COMM_UINT32,
    LB_COMM_INT64,
    LB_COMM_UINT64,
    LB_COMM_FP16,
    LB_COMM_FP32,
    LB_COMM_FP64,
    LB_COMM_BF16,
    LB_COMM_N_DTYPES,
} lb_comm_dtype;

/* nccl-tests' names, as `-d` takes them */
#define LB_COMM_DTYPE_CHOICES "int8|uint8|int32|uint32|int64|uint64|half|float|double|bfloat16"

typedef enum {
    LB_COMM_SUM = 0,
    LB_COMM_AVG,
    LB_COMM_MAX,
    LB_COMM_MIN,
    LB_COMM_N_OPS,
} lb_comm_op;

#define LB_COMM_OP_CHOICES "sum|avg|max|min"

typedef enum {
    LB_COMM_BACKEND_MPI = 0, /* host buffers */
    LB_COMM_BACKEND_NCCL,    /* device buffers */
} lb_comm_backend;

size_t lb_comm_dtype_bytes(lb_comm_dtype t);
const char *lb_comm_dtype_name(lb_comm_dtype t); /* "float", "bfloat16", ... */
/* Parses nccl-tests' names and the aliases fp32, fp16, bf16, fp64; -1 when unknown. */
int lb_comm_dtype_parse(const char *name, lb_comm_dtype *out);
bool lb_comm_dtype_is_float(lb_comm_dtype t);
const char *lb_comm_op_name(lb_comm_op op);
int lb_comm_op_parse(const char *name, lb_comm_op *out);
const char *lb_comm_backend_name(lb_comm_backend b);
/* Whether this build has the backend (NCCL: a CUDA build with nccl.h; MPI: Open MPI). */
bool lb_comm_backend_built(lb_comm_backend b);

/* Element i of a buffer of type t as a double, and a double stored as type t (rounded to
 * nearest, ties to even, for fp16 and bf16; integers truncated). Host memory. */
double lb_comm_value_get(const void *buf, lb_comm_dtype t, size_t i);
void lb_comm_value_set(void *buf, lb_comm_dtype t, size_t i, double v);

typedef struct {
    lb_comm_backend backend;
    int device;             /* NCCL: CUDA device ordinal; -1: the local rank (default) */
    double setup_timeout_s; /* creating the communicator and its first connections, s */
    double op_timeout_s;    /* each call, from the call to its completion, s */
} lb_comm_params;

lb_comm_params lb_comm_default_params(void);

/* A collective choice of backend for every rank of boot: NCCL when this build has it and
 * any rank sees a GPU, MPI otherwise. */
lb_status lb_comm_pick_backend(lb_boot *boot, lb_comm_backend *out, lb_err *err);

typedef struct lb_comm lb_comm;

/* Collective over every rank of boot: each rank says whether it joins (with NCCL a rank
 * without a GPU may only coordinate; with MPI every rank joins). The joining ranks form the
 * communicator, numbered in boot's rank order; *out is NULL on a rank that did not join. NCCL's
 * unique id travels over boot's control plane. LB_ERR_USAGE when this rank's node has fewer GPUs
 * than the ranks that join on it (the message says how many), LB_ERR_UNSUPPORTED when this build
 * lacks the backend, LB_ERR_COMM on a deadline or NCCL failure. */
lb_status lb_comm_init(lb_boot *boot, const lb_comm_params *p, bool join, lb_comm **out,
                       lb_err *err);
/* Destroys the communicator (aborts it when broken). NULL is fine. */
void lb_comm_free(lb_comm *c);

int lb_comm_rank(const lb_comm *c);
int lb_comm_size(const lb_comm *c);
lb_comm_backend lb_comm_backend_of(const lb_comm *c);
/* The CUDA device the communicator uses (-1 for MPI). */
int lb_comm_device(const lb_comm *c);
/* True once a call failed or timed out; the first error is then in *err of every call. */
bool lb_comm_broken(const lb_comm *c);

/* The operations. Counts are elements; `stream` is a cudaStream_t (NULL: the legacy
 * default stream) and is ignored by MPI. */
lb_status lb_comm_all_reduce(lb_comm *c, const void *send, void *recv, size_t count,
                             lb_comm_dtype t, lb_comm_op op, void *stream, lb_err *err);
/* recv (count elements) on root only; send == recv is in-place on root. */
lb_status lb_comm_reduce(lb_comm *c, const void *send, void *recv, size_t count, lb_comm_dtype t,
                         lb_comm_op op, int root, void *stream, lb_err *err);
/* root's send (count elements) into every rank's recv. */
lb_status lb_comm_broadcast(lb_comm *c, const void *send, void *recv, size_t count, lb_comm_dtype t,
                            int root, void *stream, lb_err *err);
/* send holds size * recv_count elements; rank r receives the reduction of block r. */
lb_status lb_comm_reduce_scatter(lb_comm *c, const void *send, void *recv, size_t recv_count,
                                 lb_comm_dtype t, lb_comm_op op, void *stream, lb_err *err);
/* recv holds size * send_count elements: block r is rank r's send. */
lb_status lb_comm_all_gather(lb_comm *c, const void *send, void *recv, size_t send_count,
                             lb_comm_dtype t, void *stream, lb_err *err);
/* send and recv hold size blocks of count elements: block p of send goes to rank p and
 * arrives as block r (this rank) of p's recv. */
lb_status lb_comm_all_to_all(lb_comm *c, const void *send, void *recv, size_t count,
                             lb_comm_dtype t, void *stream, lb_err *err);
/* Point to point: a send must meet the peer's recv of the same count; a rank that sends
 * and receives at once groups the two. */
lb_status lb_comm_send(lb_comm *c, const void *buf, size_t count, lb_comm_dtype t, int peer,
                       void *stream, lb_err *err);
lb_status lb_comm_recv(lb_comm *c, void *buf, size_t count, lb_comm_dtype t, int peer, void *stream,
                       lb_err *err);
/* Every rank has reached this call and everything before it on stream is done. */
lb_status lb_comm_barrier(lb_comm *c, void *stream, lb_err *err);

/* Calls between start and end are fused (NCCL) or started together (MPI); groups nest. */
lb_status lb_comm_group_start(lb_comm *c, lb_err *err);
lb_status lb_comm_group_end(lb_comm *c, lb_err *err);

/* Waits until the work enqueued on stream is done (NCCL) under the watchdog's deadline;
 * LB_OK at once for MPI. Fails with the communicator's error when it broke. */
lb_status lb_comm_sync(lb_comm *c, void *stream, lb_err *err);

/* Calls enqueued while their stream is captured into a CUDA graph run nothing then and are not
 * watched; the work enqueued on stream since (a launch of such a graph, named by what) is
 * watched as one call under op_timeout_s instead (NCCL: a hang aborts the communicator and
 * the next call or sync fails with it). LB_OK at once for MPI. */
lb_status lb_comm_watch(lb_comm *c, void *stream, const char *what, lb_err *err);

#endif
