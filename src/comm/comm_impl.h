/* comm_impl.h: what a backend of comm.h provides (comm_mpi.c, comm_nccl.c), and the
 * communicator fields they share. Private to src/comm/. */
#ifndef LB_COMM_COMM_IMPL_H
#define LB_COMM_COMM_IMPL_H

#include "comm/comm.h"

typedef enum {
    LB_COLL_ALL_REDUCE = 0,
    LB_COLL_REDUCE,
    LB_COLL_BROADCAST,
    LB_COLL_REDUCE_SCATTER,
    LB_COLL_ALL_GATHER,
    LB_COLL_ALL_TO_ALL,
    LB_COLL_SEND,
    LB_COLL_RECV,
    LB_COLL_BARRIER,
} lb_coll_kind;

/* One call as the backends see it: count is the per-rank count the header names. */
typedef struct {
    lb_coll_kind kind;
    const void *send;
    void *recv;
    size_t count;
    lb_comm_dtype dtype;
    lb_comm_op op;
    int root; /* reduce, broadcast: the root; send, recv: the peer */
    void *stream;
} lb_coll_call;

typedef struct {
    lb_status (*call)(lb_comm *c, const lb_coll_call *call, lb_err *err);
    lb_status (*group_start)(lb_comm *c, lb_err *err);
    lb_status (*group_end)(lb_comm *c, lb_err *err);
    lb_status (*sync)(lb_comm *c, void *stream, lb_err *err);
    /* NULL: nothing is watched (lb_comm_watch) */
    lb_status (*watch)(lb_comm *c, void *stream, const char *what, lb_err *err);
    void (*free)(lb_comm *c);
} lb_comm_ops;

struct lb_comm {
    const lb_comm_ops *ops;
    lb_comm_backend backend;
    lb_boot *boot;
    int rank, size, device;
    lb_comm_params params;
    int group_depth;
    uint64_t seq; /* calls made, for error messages */
    bool broken;
    lb_err first_error; /* the error that broke it */
    void *impl;         /* the backend's own state */
};

const char *lb_comm_coll_name(lb_coll_kind k);
/* "all_reduce #12 (1048576 x bfloat16 sum)" for error messages. */
void lb_comm_coll_describe(const lb_comm *c, const lb_coll_call *call, char *buf, size_t cap);
/* Marks the communicator broken with err's sentence (the first one is kept). */
void lb_comm_mark_broken(lb_comm *c, const lb_err *err);

lb_status lb_comm_mpi_init(lb_comm *c, lb_err *err);
lb_status lb_comm_nccl_init(lb_comm *c, bool join, lb_err *err);
/* GPUs this process can use through NCCL: 0 in a build without NCCL. */
int lb_comm_nccl_local_gpus(void);

#endif
