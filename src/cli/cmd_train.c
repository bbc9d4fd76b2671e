/* cmd_train.c: `llmbench train`: parse options, refuse what cannot work before anything
 * runs, run the training workload as one stored run, print its summary. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/output.h"
#include "cli/runctl.h"
#include "train/train.h"

/* Parses "cpu", "cuda" or "cuda:N". */
static lb_status parse_device(const char *s, lb_train_params *p) {
    if (strcmp(s, "cpu") == 0) {
        p->device = LB_DEVICE_CPU;
        return LB_OK;
    }
    if (strncmp(s, "cuda", 4) == 0) {
        p->device = LB_DEVICE_CUDA;
        p->device_index = 0;
        if (s[4] == '\0') return LB_OK;
        char *end = NULL;
        long idx = s[4] == ':' ? strtol(s + 5, &end, 10) : -1;
        if (s[4] == ':' && end != s + 5 && *end == '\0' && idx >= 0 && idx < 1024) {
            p->device_index = (int)idx;
            return LB_OK;
        }
    }
    return lb_args_usage_error("train", "option --device expects cpu, cuda or cuda:N, got '%s'", s);
}

typedef struct {
    lb_train_params params;
} train_ctx;

static lb_status work(void *ctx, lb_result *r, lb_err *err) {
    return lb_train_run(&((train_ctx *)ctx)->params, r, err);
}

int lb_cmd_train(int argc, char **argv) {
    train_ctx ctx = {.params = lb_train_default_params()};
    lb_train_params *p = &ctx.params;
    const char *device = NULL, *precision = "fp32", *name = NULL, *fp32_matmul = NULL;
    const char *attention = NULL, *quant = NULL;
    bool tf32 = false;
    int64_t seed = (int64_t)p->seed;
    bool no_progress = false;
    lb_arg_list tags = {0};
    const lb_arg_spec specs[] = {
        {"--model", LB_ARG_STRING, &p->model, "NAME",
         "model preset (default gpt2-124m; see below)"},
        {"--device", LB_ARG_STRING, &device, "DEV",
         "cpu, cuda or cuda:N (default: cuda if a GPU is present, else cpu)"},
        {"--batch", LB_ARG_INT, &p->batch, "B", "sequences per step (default 4)", 1, 1 << 20},
        {"--seq", LB_ARG_INT, &p->seq, "T", "tokens per sequence (default 64)", 1, 1 << 24},
        {"--steps", LB_ARG_INT, &p->steps, "N", "timed steps (default 20)", 1, 1e9},
        {"--warmup", LB_ARG_INT, &p->warmup, "W", "untimed warm-up steps before them (default 3)",
         0, 1e9},
        {"--precision", LB_ARG_CHOICE, &precision, NULL,
         "compute precision (default fp32; the CPU computes fp32 only)", 0, 0,
         LB_PRECISION_CHOICES},
        {"--lr", LB_ARG_DOUBLE, &p->lr, "X", "AdamW learning rate (default 3e-4)", 1e-12, 10},
        {"--weight-decay", LB_ARG_DOUBLE, &p->weight_decay, "X",
         "AdamW weight decay on 2-D weights (default 0.1)", 0, 10},
        {"--grad-clip", LB_ARG_DOUBLE, &p->grad_clip, "X",
         "global gradient-norm clip, 0 = off (default 1.0)", 0, 1e9},
        {"--data", LB_ARG_STRING, &p->data, "SRC",
         "synthetic (default), repeat (one batch every step) or FILE.bin (llm.c token shard)"},
        {"--seed", LB_ARG_INT, &seed, "S", "seed of weights and synthetic data (default 1337)", 0,
         9.2e18},
        {"--tf32", LB_ARG_FLAG, &tf32, NULL,
         "CUDA fp32: matrix products in one TF32 tensor-core pass (same as --fp32-matmul tf32)"},
        {"--fp32-matmul", LB_ARG_CHOICE, &fp32_matmul, NULL,
         "CUDA fp32 matrix products: auto = each product the faster of ieee and int8, timed on the "
         "first step (default); ieee = fp32 on CUDA cores; tf32 = one TF32 pass, relative error "
         "~1e-5 to 4e-5; 3xtf32 = each operand split into a TF32 head and tail and three TF32 "
         "passes: error close to fp32's (~2^-22 relative; up to ~2.5e-6 over very long sums), more "
         "device memory for the split copies; int8 = each operand cut into 5 signed 7-bit digits "
         "under a power of two per row, the digit products summed exactly on int8 tensor cores and "
         "rounded once: fp32's error or less unless a row spans a very wide range, more device "
         "memory for the digit planes",
         0, 0, LB_BLAS_FP32_MODE_CHOICES},
        {"--recompute", LB_ARG_FLAG, &p->recompute, NULL,
         "CUDA: recompute activations in backward to save memory"},
        {"--gemm-heuristic-only", LB_ARG_FLAG, &p->gemm_heuristic_only, NULL,
         "CUDA: take cuBLASLt's first heuristic algorithm for each product instead of timing its "
         "candidates (the same algorithms in every run)"},
        {"--attention", LB_ARG_CHOICE, &attention, NULL,
         "CUDA fp16/bf16 attention kernels: auto = for each direction the faster of llmbench's and "
         "cuDNN's (timed on the first step; llmbench's where cuDNN 9 is not installed); builtin = "
         "llmbench's; cudnn = cuDNN's fused flash attention, an error where it is not available",
         0, 0, LB_GPU_ATTN_CHOICES},
        {"--lora-rank", LB_ARG_INT, &p->lora_rank, "R",
         "fine-tune LoRA adapters of rank R on a frozen base instead of training every "
         "parameter (default 0: off)",
         1, 1 << 20},
        {"--lora-alpha", LB_ARG_DOUBLE, &p->lora_alpha, "A",
         "adapter scale alpha / rank (default 16)", 1e-6, 1e6},
        {"--lora-targets", LB_ARG_STRING, &p->lora_targets, "LIST",
         "projections that get adapters: comma-separated from q,k,v,o,gate,up,down, or all "
         "(default all; GPT-2 has no gate)"},
        {"--quant", LB_ARG_CHOICE, &quant, NULL,
         "the frozen base's projections: none (default) or nf4 (QLoRA: 4-bit NormalFloat, "
         "blocks of 64, double-quantised absmax; needs --lora-rank, and bf16 or fp16 on cuda)",
         0, 0, LB_QUANT_CHOICES},
        {"--peak-tflops", LB_ARG_DOUBLE, &p->peak_tflops, "X",
         "dense peak TFLOP/s for MFU when the GPU is not in the table", 1e-3, 1e6},
        {"--hour-cost", LB_ARG_DOUBLE, &p->hour_cost, "X",
         "price of this machine per hour, any currency: adds cost_per_1k_samples", 1e-9, 1e9},
        {"--name", LB_ARG_STRING, &name, "NAME",
         "name of the stored run (default MODEL-DEVICE-PRECISION)"},
        {"--tag", LB_ARG_LIST, &tags, "TAG", "a tag for the stored run (repeatable)"},
        {"--no-progress", LB_ARG_FLAG, &no_progress, NULL, "no progress line on stderr"},
    };
    static char summary[1024];
    const char *const *names = lb_model_preset_names();
    int len = snprintf(summary, sizeof summary,
                       "Training benchmark: W warm-up steps, then N timed steps of forward, "
                       "backward and AdamW on batches of B x T tokens. Stores every step's time "
                       "and loss and prints tokens/s, step time, loss, memory and FLOP rate.\n\n"
                       "models:");
    for (int i = 0; names[i] && len < (int)sizeof summary - 40; i++)
        len += snprintf(summary + len, sizeof summary - (size_t)len, " %s", names[i]);
    const lb_cli_command cmd = {
        .command = "train",
        .usage = "[options]",
        .summary = summary,
        LB_ARG_SPECS(specs),
    };
    lb_args a;
    int rc = lb_args_parse(&cmd, argc, argv, &a);
    if (rc != LB_ARGS_GO_ON) return rc;
    if (device != NULL && parse_device(device, p) != LB_OK) return 2;
    lb_precision_parse(precision, &p->precision);
    if (fp32_matmul != NULL) lb_blas_fp32_mode_parse(fp32_matmul, &p->fp32_matmul);
    if (attention != NULL) lb_gpu_attn_choice_parse(attention, &p->attention);
    if (quant != NULL) lb_lora_quant_parse(quant, &p->quant, NULL);
    if (tf32 && fp32_matmul != NULL && p->fp32_matmul != LB_BLAS_FP32_TF32) {
        lb_args_usage_error("train", "--tf32 contradicts --fp32-matmul %s: give one of them",
                            fp32_matmul);
        return 2;
    }
    if (tf32) p->fp32_matmul = LB_BLAS_FP32_TF32;
    p->seed = (uint64_t)seed;
    p->progress = !no_progress;

    lb_err err = {{0}};
    lb_model_config cfg;
    lb_status st = lb_train_resolve(p, &cfg, &err);
    if (st != LB_OK) {
        if (st == LB_ERR_USAGE || st == LB_ERR_FORMAT || st == LB_ERR_IO) {
            fprintf(stderr, "llmbench train: %s\n", err.msg);
            return 2;
        }
        fprintf(stderr, "llmbench train: %s\n", err.msg);
        return lb_status_exit_code(st);
    }
    char run_name[128];
    if (name == NULL) {
        snprintf(run_name, sizeof run_name, "%s-%s-%s", cfg.name,
                 p->device == LB_DEVICE_CUDA ? "cuda" : "cpu", lb_precision_name(p->precision));
        name = run_name;
    }
    lb_result *r = lb_result_new("train", name);
    if (r == NULL) {
        fprintf(stderr, "llmbench train: out of memory\n");
        return 1;
    }
    for (int i = 0; i < tags.n; i++)
        json_array_append_new(r->tags, json_string(tags.items[i]));
    int64_t run_id = -1;
    /* main passes argv + 1: argv - 1 is the program's whole command line */
    st = lb_runctl_run(&a.common, argc + 1, argv - 1, r, work, &ctx, &run_id, &err);
    if (a.common.json)
        lb_output_result_json(stdout, r, run_id);
    else
        lb_output_result_table(stdout, r, run_id);
    if (st != LB_OK) fprintf(stderr, "llmbench train: %s\n", err.msg);
    lb_result_free(r);
    return lb_status_exit_code(st);
}
