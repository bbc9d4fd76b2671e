/* dp_cuda.h: data-parallel training of the GPU model (model/model_gpu.h) over NCCL
 * (comm/comm.h, device buffers): ZeRO stages 0-3 with bucketed overlap and parameter
 * prefetch, and gradient accumulation.
 *
 * The model's gradient hook says when backward has enqueued a unit's last gradient kernel;
 * when that completes a bucket (train/zero.h's plan: buckets of --bucket-mb over the units,
 * complete when their lowest unit is), an event on the model's stream makes the
 * communication stream wait for it, and the bucket goes out there while the model's stream
 * computes the next layers:
 * The model keeps every gradient in its gradient type (the working type; adapters fp32),
 * one dense array in the parameter layout, so a bucket is one contiguous run:
 *   0: its gradients all-reduced (averaged) in place, one call; the model's own AdamW then
 *      runs on everything.
 *   1: its gradients reduce-scattered (averaged) on the communication stream straight from
 *      the model's gradient array into this rank's gradient shard in the working type (the
 *      bucket's padding is the next bucket's first elements, whose sums land in the shard's
 *      padding, which the optimizer leaves out; only a last bucket whose padding would run
 *      past the array is copied into a buffer first) (at stages 2-3 with several
 *      micro-batches a step the shard's gradient is fp32: the first micro-batch's piece is
 *      widened into it, later ones are added; nothing is cleared). The model keeps
 *      no master weights or moments (external_optimizer): AdamW runs here on the shard (fp32
 *      master, m and v of the shard only, kernels/adamw.cuh with a segment table in shard
 *      coordinates; one launch a bucket's piece), writes the shard's 16-bit working copy, and
 *      every bucket's pieces are all-gathered, once updated, straight into the model's
 *      working copy (only a last bucket whose padding would run past its end goes through
 *      a buffer) on the communication stream, bucket after bucket in the order the next
 *      forward reads them, an event after each: the
 *      parameter hook makes the model's stream wait for a unit's bucket before the next
 *      step's first forward reads it (and refreshes the padded head once its bucket is
 *      in), so the gather of later buckets runs beside the forward of earlier ones. The
 *      run's last step waits for its whole gather.
 *   2: as 1, and the model keeps no gradient array either (external_grads): each bucket's
 *      gradients are written into one of three bucket buffers (the embeddings' bucket has
 *      its own, since a tied head writes wte's gradient first of all; the others take
 *      turns in two by parity, each as large as the largest padded bucket of its turn),
 *      bound to the model's units and cleared when the bucket before theirs is sent, and
 *      reduce-scattered straight from there: the bucket that takes a buffer next waits
 *      for that collective, which had a bucket's compute to finish.
 *   3: as 2 with one unit a bucket, and the model keeps no working copy either
 *      (external_params): its parameter hook says before each use of a unit's parameters
 *      (forward 0 ... L + 1, a tied head's 0; backward the head's unit, L + 1 ... 1) and the
 *      unit's pieces of the 16-bit working copy shard are all-gathered on the communication
 *      stream into one of three gather buffers, which the model's stream waits for and the
 *      unit's tensors are bound to; meanwhile the next use's unit is gathered into another
 *      (prefetch), into the buffer whose last use is longest past once the model's stream
 *      has passed it. The first buffer holds the largest unit, the other two the largest
 *      layer; a unit larger than a layer (the embeddings, an untied head) goes into the
 *      first alone and layers into the other two. Parameters live only as shards: the
 *      optimizer updates the shard and the next step gathers again. Peak memory: the shard
 *      (16 bytes a parameter over N, 18 with an fp32 gradient), the gather buffers, three
 *      bucket gradient buffers in the working type, activations.
 * An untied embedding's gradient (several ranks, every parameter training, one micro-batch
 * a step, the embeddings a bucket alone) travels as rows: the model leaves its
 * embedding backward out (lb_model_gpu_defer_embed); at backward's first hook every rank's
 * token ids are all-gathered and sorted on the communication stream; at the last hook
 * every rank's gradient rows of the embedding's output are all-gathered, the first layer's
 * bucket is sent behind them (held back since its hook), and each rank adds, on the
 * model's stream beside that collective, the embedding's gradients over all the rows,
 * averaged, where it keeps them (kernels/embed.cuh's sorted backward: the same bits on
 * every rank); at stages 2-3 the embeddings' bucket then has no gradient buffer. Elsewhere
 * (a tied head's gradient fills wte whole) the embeddings' bucket travels dense, complete
 * after the embedding backward.
 * With --grad-accum K the model adds K micro-batches' gradients (stages 0 and 1: the
 * collectives run on the last one); at stage 2 every micro-batch's buckets are
 * reduce-scattered and the shard adds them. After the embeddings' bucket of the last
 * micro-batch the model's stream waits for the communication stream. The global norm is
 * every rank's sum of squares of its shard all-reduced in fp64, so the clip and fp16's skip
 * decision (kernels/adamw.cuh) are the same on every rank.
 *
 * A step of one micro-batch (lb_dp_cuda_train_step) runs as one CUDA graph from the second
 * on, as the one-GPU step does (model/model_gpu_graph.c): the first runs kernel by kernel
 * (it prepares and times every product), the second is captured on the model's stream with
 * the communication stream forked from it through events and joined back (the collectives
 * are NCCL calls captured into the graph; the batch upload, the copy of the loss into its
 * slot, and stages 1-2's gather stay outside), and every later step launches it, recaptured
 * when the optimizer settings change. The gather runs after the graph on the communication
 * stream, so the next step's forward (inside its graph) waits for its buckets through event
 * wait nodes, as kernel by kernel. A wait on an event a step before recorded, which the
 * capture could not hold, is left out where the step's own order already implies it. Each
 * launch points the graph's records of the step's timing events at its own step's, adds
 * the bytes its collectives send, and is watched under the communication deadline as one
 * call (comm/comm.h's lb_comm_watch). A capture the driver refuses is no error: an INFO
 * line, and every step runs kernel by kernel with the same results. With --grad-accum K > 1
 * steps run kernel by kernel (lb_dp_cuda_begin_micro and lb_dp_cuda_optimizer around the
 * model's micro-batches).
 *
 * With one rank (c NULL) at stages 1-3, every parameter training, the shard is the whole
 * model and nothing travels: the model keeps its gradients and working copy
 * (external_optimizer only), this layer keeps the fp32 master weights (in fp32 the model's
 * working copy is the master) and moments in the flat layout, and the optimizer is the
 * model's own three launches over them: the sum of squares and AdamW read the model's
 * gradients and AdamW writes the working copy and the padded head in place. No hook, no copy, no
 * gather. Adapters on one rank run the code of several ranks with copies for collectives.
 *
 * Fine-tuning (params.lora): what trains is the model's adapters on a frozen base, and they
 * are all that this layer sees: their flat array (model/lora.h's layout) in one unit a layer
 * (the model's unit 1 + l; the embeddings and the head have none), each layer's adapters
 * one decayed tensor, their gradients fp32 and reduced in fp32 at every stage (as stage 0
 * all-reduces them), the working copy gathered in the working type. The model keeps, by
 * stage, no master or moments of its adapters (1-3), no gradient array for them (2-3), no
 * working copy of them (3): the shard and the buffers here hold them, and the shard's
 * master weights are drawn on the host by lb_lora_init's rule. The frozen base is the
 * model's, whole on every rank, and never travels.
 *
 * Per step, seven events: the first bucket's start and the last bucket's end on the
 * communication stream (all of backward's communication, hidden or not), the end of
 * backward's compute on the model's stream (what follows it until the last bucket's end is
 * what compute did not hide), around the parameter all-gather of stages 1-2 on the
 * communication stream, and around the model's stream's wait, before the step's forward,
 * for the first bucket of the step before's gather (what of the gather was exposed; later
 * buckets arrive behind the forward of the units before them, and waits for them are not
 * timed).
 *
 * Only in CUDA builds with NCCL. */
#ifndef LB_TRAIN_DP_CUDA_H
#define LB_TRAIN_DP_CUDA_H

#include <stdint.h>

#include "comm/comm.h"
#include "core/status.h"
#include "gpu/arena.h"
#include "model/lora.h"
#include "model/model_gpu.h"
#include "train/zero.h"

typedef struct lb_dp_cuda lb_dp_cuda;

typedef struct {
    lb_zero_stage stage;            /* 0-3 */
    double bucket_bytes;            /* most gradient bytes a bucket holds */
    int grad_accum;                 /* micro-batches a step */
    int64_t n_steps;                /* steps whose events are kept */
    uint64_t seed;                  /* stages 1-3: the shard's master weights are drawn from it */
    const lb_lora_config *lora;     /* NULL: every parameter trains; else the model's adapters
                                     * of this configuration alone (read at init) */
    const lb_model_gpu_source *src; /* NULL: stages 1-3 draw the shard from seed; else every
                                     * parameter is read from it (a model directory; read at
                                     * init; not with lora) */
    bool no_graph;                  /* every step kernel by kernel (tests) */
} lb_dp_cuda_params;

/* What the model must keep out of its arena at this stage over `ranks` ranks, training its
 * adapters (lora) or every parameter: sets gp's external_optimizer (1-3), external_grads
 * (2-3) and external_params (3), the last two not for one rank training every parameter. */
void lb_dp_cuda_model_params(lb_zero_stage stage, int ranks, bool lora, lb_model_gpu_params *gp);

/* Plans the buckets, lays out and allocates this rank's shard and buffers (one arena of
 * its own), creates the communication stream and events, draws the shard's master weights
 * (stages 1-3; at 1-2 the model's working copy must hold lb_model_gpu_init_weights' of the
 * same seed, or with src lb_model_gpu_load_params' of it; adapters: drawn here, the
 * model's working copy of them too; one rank with every parameter training: the working copy
 * is written from them) and, but for that one rank, sets the model's gradient hook (and at
 * stages 1-3 its parameter hook). m and
 * c are kept, not owned; c may be NULL with one rank at stages 1-3. Free with
 * lb_dp_cuda_free (NULL-safe), which removes the hooks and bindings. */
lb_status lb_dp_cuda_init(lb_dp_cuda **out, lb_model_gpu *m, const lb_model_config *cfg, lb_comm *c,
                          const lb_dp_cuda_params *p, lb_err *err);
void lb_dp_cuda_free(lb_dp_cuda *d);

/* The step whose events the next micro-batches record (0 .. n_steps - 1). */
void lb_dp_cuda_begin_step(lb_dp_cuda *d, int64_t step);
/* Before micro-batch `micro` of the step is enqueued: stages 2-3 bind and clear the first
 * bucket buffers; stage 3 makes the communication stream wait for the model's (the step's
 * gathers read the shard the optimizer before wrote). */
lb_status lb_dp_cuda_begin_micro(lb_dp_cuda *d, int micro, lb_err *err);
/* After the step's last micro-batch, stages 1-3: AdamW on the shard with p, then (1-2, with
 * several ranks) the all-gather of the updated working copy on the communication stream.
 * Stage 0: nothing (the model's optimizer ran). */
lb_status lb_dp_cuda_optimizer(lb_dp_cuda *d, const lb_gpu_adamw_params *p, lb_err *err);
/* A whole step of one micro-batch (grad_accum 1; after lb_dp_cuda_begin_step): the batch
 * (host token ids) copied in, forward and backward with this stage's collectives, the
 * optimizer with p (the model's at stage 0), the mean loss to slot `slot`, stages 1-2's
 * gather; as a CUDA graph from the second call on (above). */
lb_status lb_dp_cuda_train_step(lb_dp_cuda *d, const int32_t *inputs, const int32_t *targets,
                                int slot, const lb_gpu_adamw_params *p, lb_err *err);
/* Whether steps are launched as a CUDA graph now. */
bool lb_dp_cuda_uses_graph(const lb_dp_cuda *d);

/* After the device finished step `step`: its communication time and the part of it that
 * compute did not hide, ms (stage 3: of its gathers, only those after backward's compute
 * count as exposed), and the bytes this rank sent in it (ring accounting, counted call by
 * call); one rank: 0. */
lb_status lb_dp_cuda_step_times(lb_dp_cuda *d, int64_t step, double *comm_ms, double *exposed_ms,
                                lb_err *err);
double lb_dp_cuda_sent_bytes(const lb_dp_cuda *d, int64_t step);
/* Collective: the fp32 master weights of what trains (the whole model, or the adapters) into
 * host (the flat layout), at stages 1-3 every rank's shard gathered (through a device buffer of the
 * largest bucket, outside the arena); synchronises. */
lb_status lb_dp_cuda_get_params(lb_dp_cuda *d, float *host, lb_err *err);
/* This layer's own arena (shard, buffers; stages 1-3), its pieces named "zero.": master,
 * m, v (the optimizer state), grad, work, seg_*, send, piece, bucket_grad, gather. */
const lb_gpu_arena *lb_dp_cuda_arena(const lb_dp_cuda *d);

#endif
