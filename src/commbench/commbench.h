/* commbench.h: `llmbench comm`, the nccl-tests job: collective bandwidth and correctness.
 *
 * For each collective and each size from min_bytes to max_bytes (times factor), every
 * rank runs warm-up calls, then `iters` timed calls back to back, out-of-place and
 * in-place, then one more call on fresh inputs, into outputs first filled with a value no
 * output may hold (0xff bytes; 0x7f bytes in signed integers), whose every output element is
 * compared with the value it must have (#wrong). Sizes follow nccl-tests: the size of a row is the
 * whole buffer (all_gather: what each rank receives; reduce_scatter: what each rank sends;
 * alltoall: each buffer), rounded down to a whole number of elements per rank where the collective
 * splits it (a size that rounds to the previous row's makes no second row); its count is the call's
 * (per rank, per peer for alltoall). algbw = size / time; busbw = algbw x nccl-tests' factor
 * (all_reduce 2(n-1)/n; reduce_scatter, all_gather, alltoall (n-1)/n; broadcast, reduce, sendrecv
 * 1). A row's time is the slowest rank's mean; p50 and p99 are over iterations of the slowest
 * rank's time of that iteration. GPU work is timed with CUDA events on the benchmark's stream, host
 * buffers (MPI) with the monotonic clock.
 *
 * Rank 0 coordinates: it gathers every rank's per-iteration times and wrong counts over
 * the control plane (and, when a rank fails, that rank's sentence with its host, which every
 * rank then returns) and alone fills the result (one series per rank, row and placement;
 * metrics per row). Under NCCL a rank without a GPU does not join the communicator and only
 * coordinates. With `matrix`, each ordered pair of ranks also sends matrix_bytes from one to
 * the other while the rest wait, and each rank reports how many NVLinks join its GPU to each
 * other GPU on its host (NVML), so a slow pair is named with its link. */
#ifndef LB_COMMBENCH_COMMBENCH_H
#define LB_COMMBENCH_COMMBENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "comm/boot.h"
#include "comm/comm.h"
#include "core/result.h"
#include "core/status.h"

typedef enum {
    LB_BENCH_ALL_REDUCE = 0,
    LB_BENCH_ALL_GATHER,
    LB_BENCH_REDUCE_SCATTER,
    LB_BENCH_BROADCAST,
    LB_BENCH_REDUCE,
    LB_BENCH_ALLTOALL,
    LB_BENCH_SENDRECV,
    LB_BENCH_N_COLLS,
} lb_bench_coll;

/* nccl-tests' names: all_reduce, all_gather, reduce_scatter, broadcast, reduce, alltoall,
 * sendrecv */
const char *lb_commbench_coll_name(lb_bench_coll c);
int lb_commbench_coll_parse(const char *name, lb_bench_coll *out);
/* nccl-tests' bus bandwidth factor for n ranks. */
double lb_commbench_busbw_factor(lb_bench_coll c, int n);

typedef enum {
    LB_PLACE_BOTH = 0,
    LB_PLACE_OUT_OF_PLACE,
    LB_PLACE_IN_PLACE,
} lb_bench_place;

typedef struct {
    bool ran;
    double time_us; /* slowest rank's mean per call */
    double algbw_gbps, busbw_gbps;
    double p50_us, p99_us;
    int64_t wrong; /* elements that differ from the expected value, every rank's summed; -1
                      when not checked */
} lb_bench_cell;

typedef struct {
    lb_bench_coll coll;
    size_t bytes, count; /* count: the call's count (all_gather, reduce_scatter: per rank;
                            alltoall: per peer), nccl-tests' "count" column */
    lb_comm_dtype dtype;
    lb_comm_op op;
    int root;
    lb_bench_cell oop, ip;
} lb_bench_row;

typedef struct {
    bool colls[LB_BENCH_N_COLLS];
    int64_t min_bytes, max_bytes;
    double factor; /* > 1 */
    lb_comm_dtype dtype;
    lb_comm_op op;
    int root;
    int64_t warmup, iters;
    lb_bench_place place;
    bool check;
    bool matrix;
    int64_t matrix_bytes;
    lb_comm_params comm;
    /* called on rank 0 after each row (for progress and nccl-tests' table); may be NULL */
    void (*on_row)(void *ctx, const lb_bench_row *row);
    void *on_row_ctx;
} lb_commbench_params;

lb_commbench_params lb_commbench_default_params(void);

/* Refuses what can be refused before anything runs (sizes not a multiple of the element
 * size, min above max, factor <= 1, no collective, sendrecv in place only): LB_ERR_USAGE
 * naming the option. */
lb_status lb_commbench_validate(const lb_commbench_params *p, lb_err *err);

/* Which ranks of boot take part (collective, over the control plane): every rank under
 * MPI; under NCCL those that see a GPU (the others only coordinate). member (lb_boot_size
 * entries, or NULL) receives 1 for each rank that does, on every rank; *n how many do. */
lb_status lb_commbench_members(lb_boot *boot, const lb_commbench_params *p, int32_t *member, int *n,
                               lb_err *err);

/* Refuses what the number of ranks taking part (n) decides: a root that is none of them, a
 * largest size that leaves all_gather, reduce_scatter or alltoall less than one element per
 * rank (their smaller sizes are skipped: run_rows). LB_ERR_USAGE naming the option. */
lb_status lb_commbench_validate_ranks(const lb_commbench_params *p, int n, lb_err *err);

/* Element i of the n ranks' inputs (commbench.c's pattern) reduced with op as NCCL computes
 * it in type t, which the check expects of a reducing collective's output: in the integer
 * types a sum wraps modulo 2^bits as the type does, and avg is that sum, read signed in the
 * signed types, divided by n with the quotient truncated toward zero (NCCL's ncclAvg on
 * integers; comm.h's MPI backend gives the same); in the float types the exact value, avg the
 * exact sum over n. */
double lb_commbench_reduce_pattern(lb_comm_dtype t, lb_comm_op op, int n, size_t i);

/* Runs the benchmark on every rank of boot (a collective call). On rank 0, r receives the
 * config, series and metrics; elsewhere r may be NULL. Returns LB_ERR_INTERRUPTED on
 * SIGINT (on any rank: checked before each row and each sender of the pair matrix) with the
 * rows done so far in r. */
lb_status lb_commbench_run(lb_boot *boot, const lb_commbench_params *p, lb_result *r, lb_err *err);

#endif
