/* zero.h: the arithmetic of data-parallel training with ZeRO: which elements of the flat
 * parameter array travel together (buckets), how each bucket is padded and cut into one
 * equal piece per rank (the shards), and the memory and traffic ZeRO's paper gives for
 * each stage.
 *
 * The flat array (model/config.h's layout) is cut into units, contiguous ranges that one
 * part of the model reads and writes: unit 0 the embeddings (wte, wpe), unit 1 + l layer
 * l, unit L + 1 the final norm and an untied output head. Forward walks the units upwards,
 * backward downwards, so a unit's gradient is complete when backward leaves it (a tied
 * head also writes wte's gradient, which unit 0 completes last). A bucket is a run of
 * consecutive whole units holding up to bucket_elems elements (a larger unit is a bucket
 * alone); under ZeRO 3 every unit is its own bucket, since parameters are gathered unit by
 * unit. A bucket is complete in backward when its lowest unit is.
 *
 * Collectives need the same count on every rank, so each bucket's length is rounded up to
 * a multiple of ranks x align elements (align keeps every piece's start aligned for vector
 * loads on a GPU); the padded length cut into `ranks` equal pieces gives piece b of rank r
 * the elements [start + r * piece, start + (r + 1) * piece), clipped to the bucket's real
 * end (the last ranks' pieces may be part padding or only padding). A rank's shard is its
 * pieces of every bucket, one after the other: shard_offset says where bucket b's piece
 * starts in it, the same on every rank.
 *
 * Not here: moving bytes (train/dp.h over comm/comm.h), the optimizer. */
#ifndef LB_TRAIN_ZERO_H
#define LB_TRAIN_ZERO_H

#include <stdbool.h>
#include <stdint.h>

#include "core/precision.h"
#include "core/status.h"
#include "model/config.h"

typedef enum {
    LB_ZERO_0 = 0, /* gradients all-reduced; every rank holds everything */
    LB_ZERO_1,     /* optimizer state sharded */
    LB_ZERO_2,     /* gradients sharded too */
    LB_ZERO_3,     /* parameters sharded too */
} lb_zero_stage;

typedef struct {
    int64_t start, end;   /* elements [start, end) of the flat array */
    int64_t padded;       /* end - start rounded up to a multiple of ranks x align */
    int64_t piece;        /* padded / ranks: every rank's share */
    int64_t shard_offset; /* where this bucket's piece starts in a rank's shard */
    int unit_lo, unit_hi; /* the units it holds, inclusive */
} lb_zero_bucket;

typedef struct {
    int ranks;
    int n_units;
    int64_t *unit_start; /* [n_units + 1]: unit u is [unit_start[u], unit_start[u + 1]); owned */
    int n_buckets;
    lb_zero_bucket *buckets; /* [n_buckets] in flat order; owned */
    int *bucket_of_unit;     /* [n_units]; owned */
    int64_t shard_elems;     /* sum of the pieces: one rank's shard, padding included */
    int64_t max_padded;      /* the largest padded bucket, elements */
} lb_zero_plan;

/* Units of a model's flat array: writes n_layer + 3 boundaries into bounds (unit u is
 * [bounds[u], bounds[u + 1])) and returns the number of units, n_layer + 2. */
int lb_zero_model_units(const lb_model_config *cfg, int64_t *bounds);

/* Plans buckets over the units given by bounds[0..n_units] (increasing, bounds[0] = 0).
 * bucket_elems: the most elements a bucket holds (0: one unit a bucket); ranks >= 1;
 * align >= 1. LB_ERR_USAGE for nonsense arguments, LB_ERR_NOMEM. Free with
 * lb_zero_plan_free (NULL-safe, also after a failed init). */
lb_status lb_zero_plan_init(lb_zero_plan *p, const int64_t *bounds, int n_units,
                            int64_t bucket_elems, int ranks, int64_t align, lb_err *err);
void lb_zero_plan_free(lb_zero_plan *p);

/* Stages 1-2: the elements of the one buffer the last bucket goes through where its padding
 * runs past the flat array's end (its reduce-scatter's source at stage 1, its gather's
 * destination at stages 1-2); every other bucket is reduce-scattered from and gathered into
 * the array in place, its padding reading or writing the next bucket's first elements. 0
 * when none does, and at stages 0 and 3. Stages 2-3 reduce-scatter from the buckets'
 * gradient buffers. */
int64_t lb_zero_send_elems(const lb_zero_plan *p, lb_zero_stage s);

/* Stages 2-3: the gradient buffers (elements, padded) of the buckets after the first, in
 * two by parity: out[i] the largest of buckets b >= 1 with b % 2 == i (0: none). */
void lb_zero_other_slots(const lb_zero_plan *p, int64_t out[2]);

/* Whether each micro-batch's reduce-scatter is added into an fp32 gradient (stages 2-3
 * with several micro-batches a step) rather than written once a step in the reduce type. */
bool lb_zero_adds(lb_zero_stage s, int64_t grad_accum);

/* Whether an untied embedding's gradient travels as every rank's rows (several ranks,
 * every parameter training, at any stage): one micro-batch a step and the embeddings a
 * bucket alone. */
bool lb_zero_rows(const lb_zero_plan *p, const lb_model_config *cfg, int64_t grad_accum);

/* Stage 3's three gather buffers (one unit a bucket): size[1] and size[2] hold the largest
 * of the layers' units, size[0] the largest unit of all; the head unit (-1: none) needs
 * head_pad elements after it (the rows its products read past V). A unit that needs more
 * than size[1] is gathered into buffer 0 alone (lb_zero_gather_big). */
typedef struct {
    int64_t size[3];
    int head_unit;
    int64_t head_pad;
} lb_zero_gathers;

/* The gathers of plan p whose layers are units [lo, hi). */
void lb_zero_gather_sizes(const lb_zero_plan *p, int lo, int hi, int head_unit, int64_t head_pad,
                          lb_zero_gathers *out);
/* The same for a model's plan (lb_zero_model_units): layers 1 ... L, the head in unit 0
 * (tied) or L + 1; with adapters every unit is a layer and none holds a head. */
void lb_zero_model_gathers(const lb_zero_plan *p, const lb_model_config *cfg, bool adapters,
                           lb_zero_gathers *out);
/* Whether unit u goes into buffer 0 alone. */
bool lb_zero_gather_big(const lb_zero_plan *p, const lb_zero_gathers *g, int u);

/* Rank r's piece of bucket b in flat coordinates, clipped to the bucket's real end:
 * [*lo, *hi), empty (lo == hi) when the piece is all padding. */
void lb_zero_piece(const lb_zero_plan *p, int b, int rank, int64_t *lo, int64_t *hi);

/* What a shard segment holds. */
typedef enum {
    LB_ZERO_SEG_PLAIN, /* parameters without weight decay */
    LB_ZERO_SEG_DECAY, /* parameters with weight decay */
    LB_ZERO_SEG_PAD,   /* a piece's padding: whatever its gradient holds is no parameter's */
} lb_zero_seg;

/* The optimizer's view of rank's shard: segments in shard coordinates (ascending, the first
 * at 0), one where each tensor's part of each of the rank's pieces starts and one where a
 * piece's padding starts; kind[i] says what segment i holds. t: the n_tensors tensors of the
 * flat array in flat order (model/config.h's layout). Writes at most cap segments into start
 * and kind (both may be NULL with cap 0) and returns how many there are. */
int lb_zero_shard_segments(const lb_zero_plan *p, int rank, const lb_param_tensor *t, int n_tensors,
                           int64_t *start, lb_zero_seg *kind, int cap);

/* Bytes a rank holds for parameters, gradients and optimizer state at this stage, the
 * formulas of ZeRO's paper (Rajbhandari et al. 2020) for n_params parameters over ranks:
 * with k_p, k_g, k_o bytes per parameter for parameters, gradients and optimizer state
 * (fp32: 4, 4, 8 (m, v); fp16/bf16 mixed precision: 2, 2, 12 (fp32 master, m, v)),
 * stage 0 (k_p + k_g + k_o) P, 1 (k_p + k_g) P + k_o P / N, 2 k_p P + (k_g + k_o) P / N,
 * 3 (k_p + k_g + k_o) P / N: 16P, 4P + 12P/N, 2P + 14P/N, 16P/N in 16-bit precision.
 * Activations and workspace are not in it. */
double lb_zero_state_bytes(lb_zero_stage s, lb_precision prec, double n_params, int ranks);

/* Bytes one rank sends per optimizer step by the formula, ring algorithms assumed:
 * stages 0-2 move the gradients and the parameters once each (all-reduce = reduce-scatter
 * + all-gather), 2 (N - 1) / N x P x b; stage 3 gathers the parameters twice (forward and
 * backward) and reduce-scatters the gradients, 3 (N - 1) / N x P x b, with b the bytes of
 * the working precision (4 fp32, 2 fp16/bf16). 0 for one rank. */
double lb_zero_traffic_bytes(lb_zero_stage s, lb_precision prec, double n_params, int ranks);

/* The same for n adapters on a frozen base (their gradients fp32 whatever the precision,
 * their working copy in prec's working type of b bytes): stage 0 all-reduces the
 * gradients, 2 (N - 1) / N x 4n; stages 1-2 reduce-scatter them and all-gather the working
 * copy, (N - 1) / N x (4 + b) n; stage 3 gathers it twice, (N - 1) / N x (4 + 2b) n. One
 * micro-batch a step (stages 2-3 send again for every further one). 0 for one rank. */
double lb_zero_adapter_traffic_bytes(lb_zero_stage s, lb_precision prec, double n, int ranks);

typedef enum {
    LB_ZERO_ALL_REDUCE = 0,
    LB_ZERO_REDUCE_SCATTER,
    LB_ZERO_ALL_GATHER,
} lb_zero_coll;

/* Bytes one rank sends for one collective over a buffer of `bytes` (the whole buffer:
 * all-reduce's, reduce-scatter's input, all-gather's output) in a ring: all-reduce
 * 2 (N - 1) / N x bytes, the others (N - 1) / N x bytes. */
double lb_zero_ring_bytes(lb_zero_coll c, double bytes, int ranks);

#endif
