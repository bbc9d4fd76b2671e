/* doctor.h: `llmbench doctor`: does NCCL work here, and if not, which setting makes it.
 *
 * Every rank of the job (any launcher of comm/boot.h, or one rank alone) collects its node's
 * facts (doctor/facts.h); rank 0 gathers them and names what differs between nodes. Then the
 * check: with GPUs, one small all_reduce through NCCL in fresh worker processes (one per
 * GPU: `llmbench doctor --probe`, started with comm/launch.h, each with the rung's
 * environment, since NCCL reads most settings once per process), with deadlines; if it
 * fails or its bus bandwidth is below a tenth of what the links allow (NVLink count x 25
 * GB/s, else the PCIe link at its maximum, else the fastest network port; with one GPU only
 * success counts), the ladder (doctor/ladder.h) is climbed. Without GPUs, ranks started by MPI run
 * the all_reduce over the MPI backend; with neither, nothing is checked (verdict "not checked").
 *
 * The report is one JSON object on rank 0 ("ranks": each rank's facts, "mismatches",
 * "problems", "check": {how, good_gbps, rungs: [...], chosen, verdict, export}); rank 0
 * prints it. A climb stopped by a signal or a lost rank judges nothing: verdict "not
 * judged", chosen -1, and the check's "error" says why. */
#ifndef LB_DOCTOR_DOCTOR_H
#define LB_DOCTOR_DOCTOR_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

#include "comm/boot.h"
#include "core/status.h"
#include "doctor/ladder.h"

typedef struct {
    double setup_timeout_s; /* each probe's rendezvous and communicator creation, s */
    double op_timeout_s;    /* each probe's all_reduce, s */
    int64_t probe_bytes;    /* the all_reduce's size */
    bool progress;          /* rank 0: a progress line on stderr, the rung being probed */
} lb_doctor_params;

lb_doctor_params lb_doctor_default_params(void);

/* The overall deadline of one probe's workers (comm/launch.h's deadline_s), s: what their own
 * deadlines allow (the rendezvous, the communicator's creation and its end: setup_timeout_s
 * each; the all_reduce: op_timeout_s, twice) and 30 s for what none of them covers (process
 * and CUDA start-up). A rung whose workers overran it failed, with that reason. */
double lb_doctor_probe_deadline_s(const lb_doctor_params *p);

/* Runs the doctor on every rank of boot (collective). On rank 0 *report receives the
 * report (caller frees) and *verdict the check's outcome; NULL elsewhere. */
lb_status lb_doctor_run(lb_boot *boot, const lb_doctor_params *p, json_t **report,
                        lb_doctor_verdict *verdict, lb_err *err);

/* One rank's part of a probe across ranks (in llmbench: its probe workers, with the rung's
 * environment, meeting on port): what it gave into *out and its workers' exit code into
 * *code. Returns false when this rank started none (a rank without a GPU). */
typedef bool (*lb_doctor_part_fn)(void *ctx, const lb_doctor_rung *rung, int port,
                                  lb_doctor_probe *out, int *code);

/* The climb (ladder.h) across the ranks of boot, called by every rank. Rank 0 climbs rungs
 * (n of them, results, *chosen, *verdict as lb_doctor_climb); before each probe it sends
 * every rank the rung, each rank runs its part and rank 0 gathers them: a probe's outcome
 * is result_rank's part, failed where any rank's workers failed. The other ranks follow
 * (their rungs, results, chosen and verdict are not used) and return LB_OK at the end. A
 * signal on any rank (core/signals.h) before or during a probe stops the climb on every
 * rank with LB_ERR_INTERRUPTED (the ranks agree before each probe, as commbench does before
 * each row, and each part's gather says whether one came during it): that probe is not
 * counted as ran and nothing is judged (*chosen -1). part_s is the longest one rank's part
 * may take (its workers' deadline): during the climb the control plane's deadline grows by
 * it, as each gather and word waits for the slowest part. */
lb_status lb_doctor_climb_across(lb_boot *boot, int result_rank, lb_doctor_part_fn part, void *ctx,
                                 double part_s, const lb_doctor_rung *rungs, int n,
                                 double good_gbps, lb_doctor_probe *results, int *chosen,
                                 lb_doctor_verdict *verdict, lb_err *err);

/* The probe worker (`llmbench doctor --probe`): one all_reduce of p->probe_bytes over NCCL
 * among the ranks of boot; rank 0 prints {"ok", "busbw_gbps", "error"} as one line. */
lb_status lb_doctor_probe_worker(lb_boot *boot, const lb_doctor_params *p, lb_err *err);

/* Reads the probe worker's line from its stdout f, which holds whatever else it printed
 * (NCCL_DEBUG writes there): the last line that is a JSON object with a boolean "ok" sets
 * out's ok, busbw_gbps and error. False, out untouched, when there is none. */
bool lb_doctor_read_probe(FILE *f, lb_doctor_probe *out);

/* The facts the ladder is built from: a copy of facts[ref] (caller frees) whose
 * "env_problems" holds those of every rank with a GPU, so that a setting naming nothing on
 * any node that starts a probe worker is removed from the rungs on every node. */
json_t *lb_doctor_ladder_facts(json_t *const *facts, int n, int ref);

/* The bar of a probe over gpus GPUs (GB/s): a tenth of the bandwidth the links of a node's
 * facts allow, PCIe at its maximum generation and width (an idle link trains down); 0 when
 * unknown, and for one GPU, whose all_reduce moves nothing (busbw factor 0): then success
 * alone is judged. */
double lb_doctor_good_gbps(const json_t *facts, bool multi_node, int gpus);

/* The probe job's ranks from every rank's facts: probe_rank[r] is rank r's index among the
 * ranks whose "cuda_devices" is above 0 (-1 for a rank without a GPU, which starts no
 * worker). Returns the probe job's size. */
int lb_doctor_probe_ranks(json_t *const *facts, int n, int32_t *probe_rank);

#endif
