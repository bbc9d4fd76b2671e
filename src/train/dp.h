/* dp.h: data-parallel training of the CPU reference model (model/model.h) over comm/comm.h
 * with host buffers (the MPI backend), ZeRO stages 0-3: the logic the GPU path follows,
 * tested in CI with `mpirun -np 4` on CPUs.
 *
 * Every rank runs forward and backward on its own micro-batches; the model's unit hook
 * (model.h) tells this module when a unit's parameters are about to be read and when a
 * bucket's gradients are complete (train/zero.h's plan). By stage:
 *   0: each bucket's gradient is all-reduced (averaged) in place as soon as backward
 *      completes it, on the last micro-batch of the step; AdamW runs on every rank over
 *      all parameters;
 *   1: each bucket's gradient is reduce-scattered into this rank's shard on the last
 *      micro-batch; AdamW updates only the shard (fp32 master copy, m and v of the shard
 *      alone); the updated pieces are all-gathered into every rank's parameters;
 *   2: as 1, but every micro-batch's bucket is reduce-scattered as soon as it is complete
 *      and the full gradient of that bucket is cleared: only the shard accumulates;
 *   3: as 2, and parameters live only as shards between uses: a unit's parameters are
 *      all-gathered before its forward and again before its backward (a tied head gathers
 *      wte too) and overwritten with NaN after it, so a read outside its window shows.
 * Gradients are averaged over ranks by the collectives and over micro-batches after the
 * last one; the global norm for clipping is the sum of every rank's squares of its shard
 * (stage 0: its pieces of the full gradient) all-reduced in fp64, so it and the loss
 * (all-reduced likewise) are the same on every rank. Collectives block (MPI): on the CPU
 * nothing overlaps, and the time inside them is all exposed. Traffic is counted as a ring
 * would send it (zero.h's lb_zero_ring_bytes).
 *
 * With a NULL communicator (one rank) the same steps run with copies for collectives. A
 * model with adapters on a frozen base (model/lora.h) trains its adapters alone the same
 * way at every stage: they are the flat array that is bucketed and sharded (one unit a
 * layer, layer-major, every element decayed), the frozen base stays whole on every rank
 * and sends nothing.
 */
#ifndef LB_TRAIN_DP_H
#define LB_TRAIN_DP_H

#include <stdint.h>

#include "comm/comm.h"
#include "core/status.h"
#include "model/model.h"
#include "train/zero.h"

typedef struct {
    lb_zero_stage stage;
    int64_t bucket_elems; /* the most elements a gradient bucket holds; stage 3 ignores it */
    int grad_accum;       /* micro-batches per optimizer step, >= 1 */
} lb_dp_params;

typedef struct {
    float loss;        /* mean cross-entropy over every rank's micro-batches, nats */
    float grad_norm;   /* global L2 norm of the averaged gradient before clipping */
    double comm_ms;    /* time inside collectives during the step, ms */
    double sent_bytes; /* bytes this rank sent, ring accounting */
} lb_dp_step_info;

typedef struct lb_dp lb_dp;

/* Plans the buckets and allocates the shards for model m (kept, not owned) on
 * communicator c (NULL: one rank). Under stage 3 the model's parameters become NaN until
 * gathered. *out is the caller's (lb_dp_free). LB_ERR_NOMEM. */
lb_status lb_dp_init(lb_dp **out, lb_model *m, lb_comm *c, const lb_dp_params *p, lb_err *err);
void lb_dp_free(lb_dp *d); /* NULL is fine; removes the model's hook */

/* One optimizer step (step counts from 1) over grad_accum micro-batches: micro-batch k's
 * B x T inputs and targets start at inputs + k B T and targets + k B T. Collective.
 * Fails with the communicator's error (LB_ERR_COMM) when a collective fails. */
lb_status lb_dp_step(lb_dp *d, const int32_t *inputs, const int32_t *targets, int B, int T,
                     const lb_adamw_params *opt, int step, lb_dp_step_info *info, lb_err *err);

/* Makes the model's parameters whole on every rank (stage 3 keeps them only as shards
 * between steps; other stages have them whole already). Collective. */
lb_status lb_dp_gather_params(lb_dp *d, lb_err *err);

/* Elements of this rank's shard, padding included (the whole padded array for one rank). */
int64_t lb_dp_shard_elems(const lb_dp *d);

#endif
