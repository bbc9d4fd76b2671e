/* train_impl.h: what the CPU path (train.c) and the CUDA path (train_cuda.c) of the
 * training workload share: the per-step records of every rank and how rank 0 stores them. */
#ifndef LB_TRAIN_TRAIN_IMPL_H
#define LB_TRAIN_TRAIN_IMPL_H

#include <stdint.h>

#include "core/result.h"
#include "core/status.h"
#include "train/train.h"

/* One step of one rank: rec[step * LB_REC_N + field]. */
enum {
    LB_REC_MS = 0,     /* the step, ms */
    LB_REC_COMM_MS,    /* inside collectives, ms */
    LB_REC_EXPOSED_MS, /* of that, not hidden behind compute, ms */
    LB_REC_SENT,       /* bytes sent, ring accounting (train/zero.h) */
    LB_REC_LOSS,       /* this rank's mean loss, nats */
    LB_REC_NORM,       /* global gradient norm; NaN where the path does not read it */
    LB_REC_N
};

/* Collective over p->boot's ranks: rank 0 gathers every rank's records of `done` steps and
 * pushes the series of docs/METRICS.md into r: per rank step_ms.rQ, comm_ms.rQ,
 * comm_exposed_ms.rQ, sent_bytes.rQ (with several ranks), per step the slowest rank's
 * step_ms, comm_ms, comm_exposed_ms, sent_bytes, the mean over ranks of loss, and
 * grad_norm (warm-up steps into warmup_* series). st is how the steps ended: after a
 * failed collective (anything but LB_OK, LB_ERR_INTERRUPTED, LB_ERR_RUNTIME) the control
 * plane is not trusted and rank 0 stores its own records only. Returns st, or the gather's
 * or memory failure when st was LB_OK. */
lb_status lb_train_store_steps(const lb_train_params *p, lb_result *r, const double *rec,
                               int64_t done, lb_status st, lb_err *err);

/* Collective, after the last step of a run that went well: every rank hashes its n
 * parameters (FNV-1a over their bytes) and rank 0 compares. Data-parallel ranks must end
 * with the same bits; rank 0 records `replicas_identical` (1 or 0) and LB_ERR_RUNTIME
 * names the first rank that differs. One rank: LB_OK, nothing recorded. */
lb_status lb_train_check_replicas(const lb_train_params *p, const float *params, int64_t n,
                                  lb_result *r, lb_err *err);

/* Collective, before each step: LB_ERR_INTERRUPTED on every rank once a signal reached
 * any of them (lb_boot_agree_stop; the sentence names that rank and the steps done of
 * total), LB_OK otherwise, so every rank stops at the same step. */
lb_status lb_train_check_interrupt(const lb_train_params *p, int64_t step, int64_t total,
                                   lb_err *err);

/* Memory per rank by formula (train/memory.h) into r: zero_state_bytes_formula and, in a
 * GPU run (after its peak_device_bytes, which it is set beside), zero_extra_bytes_formula,
 * activation_bytes_formula, memory_formula_bytes and peak_over_memory_formula. With
 * adapters (GPU runs only): base_bytes_formula and adapter_state_bytes_formula in place of
 * the two ZeRO terms. err may be NULL. */
lb_status lb_train_memory_metrics(const lb_train_params *p, const lb_model_config *cfg,
                                  lb_result *r, lb_err *err);

/* With p->save_params, rank 0 writes the n_params fp32 params (the whole model, every
 * shard gathered) there as safetensors (model/safetensors.h); other ranks and runs without
 * it: LB_OK at once. */
lb_status lb_train_save_params(const lb_train_params *p, const lb_model_config *cfg,
                               const float *params, lb_err *err);

#endif
