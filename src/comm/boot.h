/* boot.h: how the ranks of a job find each other, and a small control plane between them.
 *
 * Rank and world size come from, in this order:
 *   1. MPI, when the process was started by mpirun, mpiexec or `srun --mpi=pmix` (their
 *      variables OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_RANK are seen) and llmbench was built
 *      with MPI: MPI_Init, and the control plane is MPI_COMM_WORLD;
 *   2. the torchrun variables RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT that
 *      torchrun, Kubernetes Indexed Jobs, JobSet and PyTorchJob set (and `--gpus N`, which
 *      starts its workers with them: comm/launch.h), when RANK and WORLD_SIZE are both set:
 *      they are the nearer launcher's (`srun torchrun ...` gives every worker srun's
 *      SLURM_PROCID too, which counts nodes, not workers);
 *   3. Slurm's variables without MPI (SLURM_PROCID, SLURM_STEP_NUM_TASKS), for Slurm builds
 *      without PMIx: the rendezvous is at MASTER_ADDR (default SLURM_LAUNCH_NODE_IPADDR,
 *      the node srun ran on) and MASTER_PORT (default 29500);
 *   4. otherwise one rank alone (RANK or WORLD_SIZE alone, without Slurm's variables, is
 *      refused, naming both).
 * Without MPI the control plane is TCP: rank 0 listens on MASTER_PORT, every other rank
 * connects to MASTER_ADDR:MASTER_PORT (retrying until the deadline, since rank 0 may start
 * last) and says its rank and world size; rank 0 answers once all have come. A world size
 * that differs between ranks, a rank twice, or an address that cannot be reached before
 * the deadline is a usage error naming the address, the port and the ranks concerned. A
 * connection attempt never outlives the deadline (one that is never answered included); a
 * connection that says nothing for 5 s is dropped by rank 0; SIGINT/SIGTERM (core/signals.h)
 * ends the rendezvous at once with LB_ERR_INTERRUPTED, on every rank that rank 0 answers.
 *
 * The control plane carries small messages (NCCL's unique id, every rank's results and
 * node facts) from and to rank 0, the coordinator; it is not for bulk data (comm/comm.h).
 * Every call is collective and bounded by the deadline given to lb_boot_init. */
#ifndef LB_COMM_BOOT_H
#define LB_COMM_BOOT_H

#include <stdbool.h>
#include <stddef.h>

#include "core/status.h"

typedef enum {
    LB_BOOT_SINGLE = 0, /* no launcher: rank 0 of 1 */
    LB_BOOT_MPI,
    LB_BOOT_SLURM,
    LB_BOOT_TORCHRUN,
} lb_boot_source;

typedef struct lb_boot lb_boot;

/* Detects the launcher and joins the job; timeout_s bounds the rendezvous and every later
 * control-plane call. *out is owned by the caller (lb_boot_free). */
lb_status lb_boot_init(double timeout_s, lb_boot **out, lb_err *err);
/* The rank this process's launcher names in the environment, as lb_boot_init reads it, before
 * any joining; -1 when none does (one process alone). For what only one process of a job that
 * never formed should print. */
int lb_boot_env_rank(void);
/* The world size this process's launcher names in the environment, read as lb_boot_env_rank
 * reads the rank (under `srun --mpi=pmix`, Slurm's task count); 1 when none does, or names
 * no count from 1 to 2^24. For what is checked before the job forms, such as a token shard
 * every rank reads from. */
int lb_boot_env_size(void);
/* Leaves the job: MPI_Finalize, or MPI_Abort when lb_boot_mark_broken was called (a
 * collective that never completed would make MPI_Finalize wait forever). NULL is fine. */
void lb_boot_free(lb_boot *b);

lb_boot_source lb_boot_source_of(const lb_boot *b);
const char *lb_boot_source_name(lb_boot_source s); /* "single", "mpi", "slurm", "torchrun" */
int lb_boot_rank(const lb_boot *b);
int lb_boot_size(const lb_boot *b);
int lb_boot_local_rank(const lb_boot *b); /* among the ranks on this host */
/* The CUDA device this rank uses of the `visible` it sees: its local rank, or 0 where it
 * sees exactly one (a launcher that gives each task its own GPU: srun --gpus-per-task=1,
 * CUDA_VISIBLE_DEVICES set per rank). */
int lb_boot_device(const lb_boot *b, int visible);
int lb_boot_local_size(const lb_boot *b);
const char *lb_boot_host(const lb_boot *b);
/* The control plane's deadline, s. */
double lb_boot_timeout_s(const lb_boot *b);
/* Sets the deadline of the control-plane calls after it, s: for a phase where a rank may
 * wait on another's longer work (the doctor's probes). */
void lb_boot_set_timeout_s(lb_boot *b, double timeout_s);
/* A communicator of this job failed: leave it with MPI_Abort rather than MPI_Finalize. */
void lb_boot_mark_broken(lb_boot *b);
/* The ranks whose process is gone, as far as this rank can see without waiting: over TCP a
 * closed control connection (rank 0 sees every peer's, a peer rank 0's; a process that
 * dies closes its sockets). Writes "rank 1" or "ranks 1, 3" into text (empty when none)
 * and returns their count; under MPI or alone always 0. Safe beside other calls. */
int lb_boot_gone(const lb_boot *b, char *text, size_t cap);

/* Rank 0's bytes into every rank's buf. */
lb_status lb_boot_bcast(lb_boot *b, void *buf, size_t bytes, lb_err *err);
/* Every rank's bytes (the same count on every rank) into rank 0's all (size * bytes,
 * in rank order); all is ignored elsewhere. */
lb_status lb_boot_gather(lb_boot *b, const void *mine, size_t bytes, void *all, lb_err *err);
/* Variable-size gather: rank 0 receives a malloc'd array of size strings (NUL-terminated
 * copies of each rank's text), which it frees with lb_boot_strings_free; NULL elsewhere. */
lb_status lb_boot_gather_text(lb_boot *b, const char *mine, char ***all, lb_err *err);
void lb_boot_strings_free(char **all, int n);
/* Rank 0's judgement of every rank's text, on every rank: the texts are gathered, judge
 * runs on rank 0 over all of them (all[q] is rank q's; its status and err's message are
 * the verdict), and the verdict is broadcast; every rank returns it (LB_OK: the ranks
 * agree), or the gather's or broadcast's failure. Collective. */
typedef lb_status (*lb_boot_judge)(char *const *all, int n, void *ctx, lb_err *err);
lb_status lb_boot_agree(lb_boot *b, const char *mine, lb_boot_judge judge, void *ctx, lb_err *err);
/* Every rank has reached it. */
lb_status lb_boot_barrier(lb_boot *b, lb_err *err);

/* Whether a loop that every rank runs step by step goes on, so that a signal that reached
 * any one rank ends all of them at the same step. Collective, once a step: a rank other
 * than 0 whose `mine` is set tells rank 0 without waiting (TCP: a byte of its own kind on
 * its control connection; MPI: a message of its own tag), once a process; rank 0 names the lowest
 * rank it has heard from (0 when `mine` is set on it) and broadcasts that. *who is that
 * rank on every rank, -1 to go on. A notice that arrives after rank 0 decided a step counts
 * at the next one, so the ranks stop at most a step after the signal. */
lb_status lb_boot_agree_stop(lb_boot *b, bool mine, int *who, lb_err *err);

#endif
