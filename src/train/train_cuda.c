/* train_cuda.c: the CUDA path of `llmbench train` (train_cuda.h).
 *
 * The loop enqueues each step (batch copy, forward, backward, AdamW) on the model's stream
 * without waiting for it, with a CUDA event before and after every step; the host only
 * blocks when the double-buffered pinned batch it is about to refill is still in flight.
 * Step times are the event intervals (device time of the step, launch gaps included);
 * losses are read back once at the end. An NVML sampler (gpu/nvml/telemetry.h) runs during
 * the timed steps only. MFU = tokens/s x FLOPs/token (model/config.h) over the dense peak
 * of gpu/nvml/peak.h for the precision (fp32: the TF32 rate with --tf32, a third of it with
 * --fp32-matmul 3xtf32, whose products take three TF32 passes, the int8 rate over the
 * int8 multiply-adds an fp32 one takes with --fp32-matmul int8, the larger of the plain
 * and int8 rates with the default auto), or --peak-tflops. The
 * timed steps sit between cudaProfilerStart and cudaProfilerStop, so a profiler started
 * with collection off (ncu --profile-from-start off) sees them and not the warm-up, where
 * cuBLASLt algorithms are timed. With several ranks (or --zero 1-3) the data-parallel layer
 * (train/dp_cuda.h) runs the stage over the job's NCCL communicator during backward (with
 * adapters, over the adapters alone: they are what trains and what ZeRO shards), every
 * rank's step records go to rank 0 (train_impl.h), and a step of one micro-batch is its
 * whole train step (a CUDA graph from the second on, as on one rank); with --grad-accum K a
 * step is K micro-batches of batch / K, kernel by kernel. Before anything is allocated,
 * lb_train_cuda_check_fit holds the memory formula against the GPU's free memory. A build
 * without CUDA refuses. */
#include "train/train_cuda.h"

#ifndef LB_HAVE_CUDA

lb_status lb_train_cuda_run(const lb_train_params *p, const lb_model_config *cfg,
                            const lb_hf_model *hf, lb_data_loader *data, lb_result *r,
                            lb_err *err) {
    (void)p, (void)cfg, (void)hf, (void)data, (void)r;
    return lb_fail(err, LB_ERR_UNSUPPORTED,
                   "--device cuda was asked but this llmbench was built without CUDA");
}

lb_status lb_train_cuda_check_fit(const lb_train_params *p, const lb_model_config *cfg,
                                  lb_err *err) {
    (void)p, (void)cfg, (void)err;
    return LB_OK;
}

#else

#include <cuda_profiler_api.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/log.h"
#include "core/progress.h"
#include "core/signals.h"
#include "gpu/check.h"
#include "gpu/cudnn/attn.h"
#include "gpu/nvml/peak.h"
#include "gpu/nvml/telemetry.h"
#include "model/model_gpu.h"
#include "train/dp_cuda.h"
#include "train/train_impl.h"

typedef struct {
    lb_model_gpu *m;
    cudaEvent_t *ev; /* 2 per step */
    float *losses;
    int32_t *inputs, *targets;
    lb_comm *comm; /* several ranks: NCCL over the job; else NULL */
    lb_dp_cuda *dp;
} run_state;

static void state_free(run_state *s, int64_t n_events) {
    lb_dp_cuda_free(s->dp);
    lb_comm_free(s->comm);
    lb_model_gpu_free(s->m);
    if (s->ev)
        for (int64_t i = 0; i < n_events; i++)
            if (s->ev[i]) cudaEventDestroy(s->ev[i]);
    free(s->ev);
    free(s->losses);
    free(s->inputs);
    free(s->targets);
}

static lb_status set_device_metrics(const lb_train_params *p, const lb_model_config *cfg,
                                    run_state *s, const lb_gpu_telemetry_summary *tel,
                                    double timed_s, int64_t timed_steps, lb_result *r,
                                    lb_err *err) {
    const lb_gpu_arena *a = lb_model_gpu_arena(s->m);
    const lb_gpu_arena *da = s->dp != NULL ? lb_dp_cuda_arena(s->dp) : NULL;
    double dp_bytes = da != NULL ? (double)da->used_bytes : 0;
    LB_TRY(lb_result_set_metric(r, "peak_device_bytes", (double)a->used_bytes + dp_bytes, "bytes"));
    LB_TRY(lb_train_memory_metrics(p, cfg, r, err));
    if (p->lora_rank > 0) {
        /* at ZeRO 1-3 the shard's master, m and v are optimizer state, the rest of the data
         * parallel layer's arena (gradient shard, buffers) the adapters' */
        lb_model_gpu_memory mem = lb_model_gpu_memory_parts(s->m);
        double dp_opt = da != NULL ? (double)(lb_gpu_arena_bytes_with_prefix(da, "zero.m") +
                                              lb_gpu_arena_bytes_with_prefix(da, "zero.v"))
                                   : 0;
        LB_TRY(lb_result_set_metric(r, "base_bytes", mem.base, "bytes"));
        LB_TRY(lb_result_set_metric(r, "adapter_bytes", mem.adapters + dp_bytes - dp_opt, "bytes"));
        LB_TRY(lb_result_set_metric(r, "optimizer_bytes", mem.optimizer + dp_opt, "bytes"));
        LB_TRY(lb_result_set_metric(r, "activation_bytes", mem.activations, "bytes"));
    }
    LB_TRY(lb_result_set_metric(r, "driver_peak_device_bytes", (double)a->driver_used_peak_bytes,
                                "bytes"));
    struct cudaDeviceProp prop;
    LB_CUDA_TRY(err, cudaGetDeviceProperties(&prop, p->device_index));
    json_object_set_new(r->config, "device_name", json_string(prop.name));
    bool graph = lb_model_gpu_uses_graph(s->m) || (s->dp != NULL && lb_dp_cuda_uses_graph(s->dp));
    json_object_set_new(r->config, "cuda_graph", json_boolean(graph));
    json_object_set_new(r->config, "attention_forward",
                        json_string(lb_model_gpu_attention(s->m, false)));
    json_object_set_new(r->config, "attention_backward",
                        json_string(lb_model_gpu_attention(s->m, true)));
    json_object_set_new(r->config, "gelu_product", json_string(lb_model_gpu_gelu_product(s->m)));
    if (lb_cudnn_version() > 0) /* loaded: attention or the GELU product may run on it */
        json_object_set_new(r->config, "cudnn_version",
                            json_integer((json_int_t)lb_cudnn_version()));
    lb_peak_kind kind = p->precision != LB_PREC_FP32            ? LB_PEAK_BF16
                        : p->fp32_matmul == LB_BLAS_FP32_TF32   ? LB_PEAK_TF32
                        : p->fp32_matmul == LB_BLAS_FP32_3XTF32 ? LB_PEAK_3XTF32
                        : p->fp32_matmul == LB_BLAS_FP32_INT8   ? LB_PEAK_INT8_FP32
                        : p->fp32_matmul == LB_BLAS_FP32_AUTO   ? LB_PEAK_FP32_AUTO
                                                                : LB_PEAK_FP32;
    double peak =
        p->peak_tflops > 0 ? p->peak_tflops * 1e12 : lb_peak_flops(lb_peak_lookup(prop.name), kind);
    double tokens = (double)p->batch * (double)p->seq * (double)timed_steps;
    if (timed_s > 0 && peak > 0) {
        double achieved = tokens / timed_s * lb_train_flops_per_token(p, cfg);
        LB_TRY(lb_result_set_metric(r, "peak_tflops", peak / 1e12, "TFLOP/s"));
        LB_TRY(lb_result_set_metric(r, "mfu", lb_peak_mfu(achieved, peak), "ratio"));
    } else if (peak <= 0) {
        LB_WARN("no dense peak known for '%s': give --peak-tflops to get MFU", prop.name);
    }
    if (tel->has_util)
        LB_TRY(lb_result_set_metric(r, "gpu_util_mean_pct", tel->mean_util_pct, "%"));
    if (tel->has_power) LB_TRY(lb_result_set_metric(r, "gpu_power_mean_w", tel->mean_power_w, "W"));
    if (tel->has_clock)
        LB_TRY(lb_result_set_metric(r, "sm_clock_mean_mhz", tel->mean_sm_clock_mhz, "MHz"));
    if (tel->has_power_limit)
        LB_TRY(lb_result_set_metric(r, "gpu_power_limit_w", tel->power_limit_w, "W"));
    if (tel->has_temp) LB_TRY(lb_result_set_metric(r, "gpu_temp_max_c", tel->max_temp_c, "C"));
    if (tel->has_reasons) {
        LB_TRY(lb_result_set_metric(r, "clock_power_capped_pct", tel->power_capped_pct, "%"));
        LB_TRY(lb_result_set_metric(r, "clock_thermal_pct", tel->thermal_pct, "%"));
    }
    if (tel->has_mem)
        LB_TRY(lb_result_set_metric(r, "nvml_peak_mem_bytes", tel->peak_mem_bytes, "bytes"));
    if (tel->has_energy && tokens > 0) {
        LB_TRY(lb_result_set_metric(r, "energy_j", tel->energy_j, "J"));
        LB_TRY(lb_result_set_metric(r, "energy_j_per_token", tel->energy_j / tokens, "J/token"));
    }
    LB_TRY(lb_result_set_metric(r, "telemetry_samples", (double)tel->n_samples, "samples"));
    lb_gpu_optstate os;
    LB_TRY(lb_model_gpu_read_optstate(s->m, &os, err));
    LB_TRY(lb_result_set_metric(r, "skipped_steps", (double)os.skipped, "steps"));
    if (p->precision == LB_PREC_FP16)
        LB_TRY(lb_result_set_metric(r, "loss_scale_final", os.loss_scale, "x"));
    return LB_OK;
}

/* The GPU model's parameters for p (and the data-parallel layer's demands at p's stage). */
static lb_model_gpu_params model_params(const lb_train_params *p, int64_t total) {
    const int K = (int)p->grad_accum;
    lb_model_gpu_params gp = {.B = (int)(p->batch / K),
                              .T = (int)p->seq,
                              .precision = p->precision,
                              .recompute = p->recompute,
                              .fp32_mode = p->fp32_matmul,
                              .gemm_heuristic_only = p->gemm_heuristic_only,
                              .attention = p->attention,
                              .max_loss_slots = (int)(total * K),
                              .no_graph = p->no_graph};
    if (lb_train_ranks(p) > 1 || p->zero > 0)
        lb_dp_cuda_model_params((lb_zero_stage)p->zero, lb_train_ranks(p), p->lora_rank > 0, &gp);
    return gp;
}

lb_status lb_train_cuda_check_fit(const lb_train_params *p, const lb_model_config *cfg,
                                  lb_err *err) {
    size_t free_bytes = 0, total_bytes = 0;
    LB_CUDA_TRY(err, cudaSetDevice(p->device_index));
    LB_CUDA_TRY(err, cudaMemGetInfo(&free_bytes, &total_bytes));
    return lb_train_check_fit(p, cfg, lb_train_ranks(p), (double)free_bytes, err);
}

/* Several ranks: the NCCL communicator (before the model, so its memory is not the
 * arena's to count) and the bucketed all-reduce behind backward. */
static lb_status data_parallel_init(const lb_train_params *p, run_state *s, lb_err *err) {
    lb_comm_params cp = lb_comm_default_params();
    cp.backend = LB_COMM_BACKEND_NCCL;
    cp.device = p->device_index;
    cp.op_timeout_s = p->comm_timeout_s;
    cp.setup_timeout_s = lb_boot_timeout_s(p->boot);
    return lb_comm_init(p->boot, &cp, true, &s->comm, err);
}

/* Rank-local records of the finished steps, ms from the events. */
static lb_status fill_records(const lb_train_params *p, run_state *s, int64_t done, double *rec,
                              double *timed_s, int64_t *timed, lb_err *err) {
    for (int64_t i = 0; i < done; i++) {
        float ms = 0.0f;
        LB_CUDA_TRY(err, cudaEventElapsedTime(&ms, s->ev[2 * i], s->ev[2 * i + 1]));
        double *mine = rec + (size_t)i * LB_REC_N;
        mine[LB_REC_MS] = ms;
        double loss = 0; /* the step's: the mean of its micro-batches' */
        for (int64_t k = 0; k < p->grad_accum; k++)
            loss += s->losses[i * p->grad_accum + k];
        mine[LB_REC_LOSS] = loss / (double)p->grad_accum;
        mine[LB_REC_NORM] = NAN; /* kept on the device */
        if (s->dp != NULL) {
            LB_TRY(lb_dp_cuda_step_times(s->dp, i, &mine[LB_REC_COMM_MS], &mine[LB_REC_EXPOSED_MS],
                                         err));
            mine[LB_REC_SENT] = lb_dp_cuda_sent_bytes(s->dp, i);
        }
        if (i >= p->warmup) *timed_s += ms / 1e3, (*timed)++;
    }
    return LB_OK;
}

/* After the run: every rank's parameters as its products read them (ZeRO 0: the fp32
 * master; 1-2: the working copy each rank gathered; 3: the master shards gathered; with
 * adapters the adapters alone, the base being frozen) hashed and compared (train_impl.h),
 * and with --save-params the fp32 master weights (shards gathered) written by rank 0. */
static lb_status finish_params(const lb_train_params *p, const lb_model_config *cfg, run_state *s,
                               lb_result *r, lb_err *err) {
    if (lb_train_ranks(p) <= 1 && p->save_params == NULL) return LB_OK;
    const bool lora = p->lora_rank > 0; /* train.c refuses --save-params with adapters */
    int64_t n = lora ? lb_model_gpu_lora_n_params(s->m) : lb_model_gpu_n_params(s->m);
    float *host = malloc((size_t)n * sizeof *host);
    if (host == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of host memory for the parameters");
    const bool shards_only = p->zero == 3;
    lb_status st = shards_only ? lb_dp_cuda_get_params(s->dp, host, err)
                   : lora      ? lb_model_gpu_get_lora(s->m, host, false, err)
                               : lb_model_gpu_get_params(s->m, host, err);
    if (st == LB_OK) st = lb_train_check_replicas(p, host, n, r, err);
    if (st == LB_OK && p->save_params != NULL && s->dp != NULL && !shards_only)
        st = lb_dp_cuda_get_params(s->dp, host, err);
    if (st == LB_OK) st = lb_train_save_params(p, cfg, host, err);
    free(host);
    return st;
}

/* One step: its K micro-batches (each rank its part of each), then the optimizer: the
 * model's, or at ZeRO 1-3 the shard's. One micro-batch is the model's whole train step, or
 * with the data-parallel layer its (each a CUDA graph from the second step on). */
static lb_status enqueue_step(const lb_train_params *p, run_state *s, lb_data_loader *data,
                              int64_t step, const lb_gpu_adamw_params *ap, lb_err *err) {
    const int K = (int)p->grad_accum, ranks = lb_train_ranks(p), rank = lb_train_rank(p);
    const bool shard_opt = p->zero > 0;
    if (s->dp != NULL) lb_dp_cuda_begin_step(s->dp, step);
    if (s->dp != NULL && K == 1) {
        lb_data_next_part(data, rank, ranks, s->inputs, s->targets);
        return lb_dp_cuda_train_step(s->dp, s->inputs, s->targets, (int)step, ap, err);
    }
    for (int k = 0; k < K; k++) {
        lb_data_next_part(data, rank, ranks, s->inputs, s->targets);
        int slot = (int)(step * K + k);
        if (s->dp != NULL) LB_TRY(lb_dp_cuda_begin_micro(s->dp, k, err));
        if (K == 1 && !shard_opt)
            LB_TRY(lb_model_gpu_train_step(s->m, s->inputs, s->targets, slot, ap, err));
        else
            LB_TRY(lb_model_gpu_train_micro(s->m, s->inputs, s->targets, slot, k, K,
                                            shard_opt ? NULL : ap, err));
    }
    return s->dp != NULL ? lb_dp_cuda_optimizer(s->dp, ap, err) : LB_OK;
}

static void read_hf(void *ctx, const lb_param_tensor *t, float *dst) {
    lb_hf_model_read(ctx, t, LB_DT_F32, dst);
}

lb_status lb_train_cuda_run(const lb_train_params *p, const lb_model_config *cfg,
                            const lb_hf_model *hf, lb_data_loader *data, lb_result *r,
                            lb_err *err) {
    LB_CUDA_TRY(err, cudaSetDevice(p->device_index));
    int64_t total = p->warmup + p->steps;
    if (total > INT32_MAX / 2)
        return lb_fail(err, LB_ERR_USAGE, "too many steps: %lld", (long long)total);
    const int K = (int)p->grad_accum;
    if (total * K > INT32_MAX / 2)
        return lb_fail(err, LB_ERR_USAGE, "too many micro-batches: %lld", (long long)(total * K));
    size_t BT = (size_t)(p->batch / K) * (size_t)p->seq;
    run_state s;
    memset(&s, 0, sizeof s);
    const int ranks = lb_train_ranks(p), rank = lb_train_rank(p);
    const lb_zero_stage stage = (lb_zero_stage)p->zero;
    /* one rank at stage 0 needs no data-parallel layer; one rank at 1-3 runs it with copies
     * for collectives (a shard that is the whole model) */
    const bool dp = ranks > 1 || stage > LB_ZERO_0;
    if (ranks > 1) LB_TRY(data_parallel_init(p, &s, err));
    lb_model_gpu_params gp = model_params(p, total);
    lb_status st = p->lora_rank > 0 ? lb_train_lora_config(p, cfg, &gp.lora, err) : LB_OK;
    if (st == LB_OK) st = lb_model_gpu_init(&s.m, cfg, &gp, err);
    lb_model_gpu_source src = {read_hf, (void *)hf};
    if (st == LB_OK)
        st = hf ? lb_model_gpu_load_params(s.m, &src, err)
                : lb_model_gpu_init_weights(s.m, p->seed, err);
    /* adapters: at stages 1-3 the data-parallel layer draws them into its shard */
    const bool lora = p->lora_rank > 0;
    if (st == LB_OK && lora && stage == LB_ZERO_0)
        st = lb_model_gpu_init_lora(s.m, p->seed ^ LB_LORA_SEED_SALT, err);
    lb_dp_cuda_params dpp = {.stage = stage,
                             .bucket_bytes = p->bucket_mib * 1024 * 1024,
                             .grad_accum = K,
                             .n_steps = total,
                             .seed = lora ? p->seed ^ LB_LORA_SEED_SALT : p->seed,
                             .lora = lora ? &gp.lora : NULL,
                             .src = hf != NULL && !lora ? &src : NULL,
                             .no_graph = p->no_graph};
    if (st == LB_OK && dp) st = lb_dp_cuda_init(&s.dp, s.m, cfg, s.comm, &dpp, err);
    s.ev = calloc((size_t)(2 * total), sizeof *s.ev);
    s.losses = calloc((size_t)(total * K), sizeof *s.losses);
    s.inputs = malloc(BT * sizeof *s.inputs);
    s.targets = malloc(BT * sizeof *s.targets);
    if (st == LB_OK && (!s.ev || !s.losses || !s.inputs || !s.targets))
        st = lb_fail(err, LB_ERR_NOMEM, "out of host memory for %lld steps", (long long)total);
    for (int64_t i = 0; st == LB_OK && i < 2 * total; i++)
        if (cudaEventCreate(&s.ev[i]) != cudaSuccess)
            st = lb_fail(err, LB_ERR_DEVICE, "could not create CUDA events");
    if (st != LB_OK) {
        state_free(&s, 2 * total);
        return st;
    }

    lb_gpu_adamw_params ap = {.lr = (float)p->lr,
                              .beta1 = (float)p->beta1,
                              .beta2 = (float)p->beta2,
                              .eps = (float)p->eps,
                              .weight_decay = (float)p->weight_decay,
                              .grad_clip = (float)p->grad_clip,
                              .growth_interval = 2000};
    cudaStream_t stream = (cudaStream_t)lb_model_gpu_stream(s.m);
    lb_progress prog;
    lb_progress_init(&prog, p->progress && rank == 0);
    lb_gpu_telemetry *tel = NULL;
    int64_t done = 0;
    int64_t loop_ns = lb_clock_now_ns(); /* the steps' rate so far gives the ETA */
    for (int64_t step = 0; step < total; step++) {
        if ((st = lb_train_check_interrupt(p, step, total, err)) != LB_OK) break;
        if (step == p->warmup) {
            if (lb_model_gpu_sync(s.m, err) != LB_OK) break;
            char bus_id[32] = "";
            (void)cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, p->device_index);
            tel = lb_gpu_telemetry_start(bus_id, 100);
            cudaProfilerStart();
            /* every rank starts the timed steps together: a rank still opening NVML would
             * hold the others' first collective, and the first timed step with it */
            if (ranks > 1 && (st = lb_boot_barrier(p->boot, err)) != LB_OK) break;
        }
        if (cudaEventRecord(s.ev[2 * step], stream) != cudaSuccess) {
            st = lb_fail(err, LB_ERR_DEVICE, "cudaEventRecord failed");
            break;
        }
        st = enqueue_step(p, &s, data, step, &ap, err);
        if (st == LB_OK && cudaEventRecord(s.ev[2 * step + 1], stream) != cudaSuccess)
            st = lb_fail(err, LB_ERR_DEVICE, "cudaEventRecord failed");
        if (st != LB_OK) break;
        done = step + 1;
        /* Steps are queued ahead of the GPU only as far as its queue holds, so after the
         * first few the host's pace is the GPU's. */
        char eta[32];
        lb_progress_format_eta(
            eta, sizeof eta,
            lb_progress_eta_s((double)(total - done),
                              (double)done * 1e9 / (double)(lb_clock_now_ns() - loop_ns)));
        lb_progress_update(&prog, false, "train %s cuda: step %lld/%lld%s queued, ETA %s",
                           cfg->name, (long long)done, (long long)total,
                           step < p->warmup ? " (warm-up)" : "", eta);
    }
    lb_status sync = lb_model_gpu_sync(s.m, st == LB_OK ? err : NULL);
    if (st == LB_OK) st = sync;
    cudaProfilerStop();
    lb_gpu_telemetry_summary ts;
    lb_gpu_telemetry_stop(tel, &ts, NULL, NULL);
    lb_progress_done(&prog);
    lb_gpu_arena_sample_driver((lb_gpu_arena *)lb_model_gpu_arena(s.m));
    double timed_s = 0.0;
    int64_t timed = 0;
    double *rec = calloc((size_t)(done > 0 ? done : 1) * LB_REC_N, sizeof *rec);
    if (rec == NULL && st == LB_OK) st = lb_fail(err, LB_ERR_NOMEM, "out of host memory");
    if (rec != NULL && done > 0 && sync == LB_OK &&
        lb_model_gpu_read_losses(s.m, s.losses, (int)(done * K), err) == LB_OK &&
        fill_records(p, &s, done, rec, &timed_s, &timed, err) == LB_OK) {
        for (int64_t i = 0; i < done * K && st == LB_OK; i++)
            if (!isfinite(s.losses[i]))
                st = lb_fail(err, LB_ERR_RUNTIME, "loss is %f at step %lld: training diverged",
                             s.losses[i], (long long)(i / K));
        lb_status mst =
            set_device_metrics(p, cfg, &s, &ts, timed_s, timed, r, st == LB_OK ? err : NULL);
        if (st == LB_OK) st = mst;
    } else {
        done = 0;
    }
    if (st == LB_OK) st = finish_params(p, cfg, &s, r, err);
    if (rec != NULL) st = lb_train_store_steps(p, r, rec, done, st, err);
    free(rec);
    state_free(&s, 2 * total);
    return st;
}

#endif
