/* cmd_train.c: `llmbench train`: parse options, refuse what cannot work before anything
 * runs, run the training workload as one stored run, print its summary.
 *
 * On several ranks (mpirun, srun, torchrun variables, or --gpus N, which starts N local
 * workers of this command) every rank parses and resolves the same options, the ranks
 * agree that they did (train.h's lb_train_agree) before anything runs, and rank 0 alone
 * stores the run, holding every rank's series, and prints it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/output.h"
#include "cli/runctl.h"
#include "cli/workers.h"
#include "comm/boot.h"
#include "gpu/devinfo.h"
#include "store/store.h"
#include "train/train.h"

/* Parses "cpu", "cuda" or "cuda:N"; a build without CUDA refuses the last two, as a
 * request it cannot serve. */
static lb_status parse_device(const char *s, lb_train_params *p) {
    if (strcmp(s, "cpu") == 0) {
        p->device = LB_DEVICE_CPU;
        return LB_OK;
    }
    char *end = NULL;
    long idx = strncmp(s, "cuda:", 5) == 0 ? strtol(s + 5, &end, 10) : 0;
    if (strcmp(s, "cuda") != 0 &&
        (end == NULL || end == s + 5 || *end != '\0' || idx < 0 || idx >= 1024))
        return lb_args_usage_error("train", "option --device expects cpu, cuda or cuda:N, got '%s'",
                                   s);
#ifndef LB_HAVE_CUDA
    return lb_args_usage_error(
        "train", "--device %s: this llmbench was built without CUDA; use --device cpu", s);
#else
    p->device = LB_DEVICE_CUDA;
    p->device_index = (int)idx;
    return LB_OK;
#endif
}

typedef struct {
    lb_train_params params;
} train_ctx;

/* A metric of a result's JSON document; NAN when absent. */
static double json_metric(const json_t *run, const char *name) {
    size_t i;
    const json_t *m;
    json_array_foreach(json_object_get(run, "metrics"), i, m) {
        if (strcmp(json_string_value(json_object_get(m, "name")), name) == 0)
            return json_real_value(json_object_get(m, "value"));
    }
    return NAN;
}

#define SCALING_MAX_GPUS 4096 /* as --gpus */

/* Parses "1,2,4": GPU counts from 1, increasing, at most SCALING_MAX_GPUS, at most `max` of
 * them; 0 on success, else 2 after the usage line. Checks the list alone, not this machine:
 * run_scaling holds the counts against the GPUs present. */
static int parse_counts(const char *list, int *n_out, int *counts, int max) {
    int n = 0;
    for (const char *c = list; *c != '\0';) {
        char *end = NULL;
        long v = strtol(c, &end, 10);
        const char *why = end == c || *c < '0' || *c > '9' ? "expected a number at each comma"
                          : v < 1 || v > SCALING_MAX_GPUS ? "a GPU count must be between 1 and 4096"
                          : n == 0 && v != 1              ? "the first count must be 1, the base"
                          : n > 0 && v <= counts[n - 1] ? "each count must be above the one before"
                                                        : NULL;
        if (why != NULL)
            return lb_status_exit_code(lb_args_usage_error(
                "train", "--scaling %s: %s; give increasing GPU counts from 1, such as 1,2,4", list,
                why));
        if (n == max)
            return lb_status_exit_code(
                lb_args_usage_error("train", "--scaling %s: at most %d GPU counts", list, max));
        counts[n++] = (int)v;
        c = *end == ',' ? end + 1 : end;
        if ((*end != ',' && *end != '\0') || (*end == ',' && *c == '\0'))
            return lb_status_exit_code(lb_args_usage_error(
                "train",
                "--scaling %s: expected a number at each comma; give increasing GPU "
                "counts from 1, such as 1,2,4",
                list));
    }
    *n_out = n;
    return 0;
}

int lb_cli_train_scaling_child(int argc, char **argv, const char *group, const char *base,
                               char **child) {
    int k = 0;
    for (int i = -1; i < argc; i++) {
        if (strcmp(argv[i], "--scaling") == 0) {
            i++;
            continue;
        }
        if (strncmp(argv[i], "--scaling=", 10) != 0) child[k++] = argv[i];
    }
    child[k++] = "--json";
    child[k++] = "--tag";
    child[k++] = (char *)group;
    if (base[0] != '\0') {
        child[k++] = "--base-tok-per-s";
        child[k++] = (char *)base;
    }
    child[k] = NULL;
    return k;
}

/* --scaling: the same training on each GPU count in turn, each a run of its own started by
 * --gpus N's local launcher and tagged with one group name; every count after 1 gets the
 * one-GPU run's tokens/s (--base-tok-per-s), so its run stores its scaling efficiency.
 * Prints a line per count (with --json, every run's document in one array). */
static int run_scaling(const char *list, int argc, char **argv, bool json_out, double grace_s) {
    int counts[16], n = 0, present = lb_devinfo_cuda_device_count();
    if (parse_counts(list, &n, counts, 16) != 0) return 2;
    if (present == 0)
        return lb_status_exit_code(lb_args_usage_error(
            "train", "--scaling %s runs on GPUs and this machine has no usable GPU", list));
    if (counts[n - 1] > present)
        return lb_status_exit_code(
            lb_args_usage_error("train",
                                "--scaling %s: %d GPUs asked but this machine has %d: give counts "
                                "of at most %d",
                                list, counts[n - 1], present, present));
    char group[64], base[32] = "";
    lb_train_scaling_group(group, sizeof group);
    char **child = calloc((size_t)argc + 8, sizeof *child);
    if (child == NULL) return 1;
    if (json_out)
        printf("[\n");
    else
        printf("# scaling group %s\n#  gpus        tok/s    tok/s/gpu  efficiency   run\n", group);
    int code = 0;
    for (int c = 0; c < n && code == 0; c++) {
        lb_cli_train_scaling_child(argc, argv, group, base, child);
        char path[] = "/tmp/llmbench-scalingXXXXXX";
        int fd = mkstemp(path);
        if (fd < 0) {
            code = 1;
            break;
        }
        unlink(path);
        code = lb_cli_run_workers("train", counts[c], child, fd, grace_s);
        FILE *f = fdopen(fd, "r");
        json_t *run = NULL;
        if (f != NULL) {
            rewind(f);
            run = json_loadf(f, JSON_DISABLE_EOF_CHECK, NULL);
            fclose(f);
        }
        double tok = json_metric(run, "tokens_per_s"), eff = json_metric(run, "scaling_efficiency");
        if (c == 0 && tok > 0) snprintf(base, sizeof base, "%.17g", tok);
        if (json_out && run != NULL) {
            char *doc = json_dumps(run, JSON_INDENT(2));
            printf("%s%s\n", c > 0 ? "," : "", doc ? doc : "null");
            free(doc);
        } else if (run != NULL) {
            printf("  %5d  %11.0f  %11.0f  %10.3f  %4lld\n", counts[c], tok, tok / counts[c],
                   c == 0 ? 1.0 : eff, (long long)json_integer_value(json_object_get(run, "id")));
        }
        json_decref(run);
        if (code == 0 && c == 0 && base[0] == '\0') code = 1; /* no tokens/s to scale against */
    }
    if (json_out) printf("]\n");
    free(child);
    return code < 0 ? 1 : code;
}

static lb_status work(void *ctx, lb_result *r, lb_err *err) {
    return lb_train_run(&((train_ctx *)ctx)->params, r, err);
}

/* --gpus N refused: its count, then why */
#define LAUNCH_ON_CPUS                                                                             \
    "--gpus %lld starts one worker per GPU and %s; on CPUs start the ranks with mpirun -np N "     \
    "and --device cpu"

int lb_cmd_train(int argc, char **argv) {
    train_ctx ctx = {.params = lb_train_default_params()};
    lb_train_params *p = &ctx.params;
    const char *device = NULL, *precision = "fp32", *name = NULL, *fp32_matmul = NULL;
    const char *attention = NULL, *quant = NULL;
    bool tf32 = false;
    int64_t seed = (int64_t)p->seed;
    bool no_progress = false;
    int64_t zero = 0, gpus = 0;
    const char *scaling = NULL;
    double setup_timeout = 120;
    lb_arg_list tags = {0};
    const lb_arg_spec specs[] = {
        {"--model", LB_ARG_STRING, &p->model, "NAME|DIR",
         "model preset, random weights of its shape (default gpt2-124m; the models above), or a "
         "Hugging Face Llama/Mistral directory (config.json, safetensors): its weights"},
        {"--device", LB_ARG_STRING, &device, "DEV",
         "cpu, cuda or cuda:N (default: cuda if a GPU is present, else cpu)"},
        {"--batch", LB_ARG_INT, &p->batch, "B", "sequences per step and rank (default 4)", 1,
         1 << 20},
        {"--seq", LB_ARG_INT, &p->seq, "T",
         "tokens per sequence (default 64, or the model's context when shorter)", 1, 1 << 24},
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
        {"--zero", LB_ARG_INT, &zero, "0-3",
         "ZeRO stage over data-parallel ranks: 0 = gradients all-reduced; 1 = optimizer state "
         "sharded; 2 = gradients sharded too; 3 = parameters sharded too, gathered per layer "
         "(default 0; with --lora-rank the adapters' state is what is sharded, the frozen base "
         "whole on every rank)",
         0, 3},
        {"--grad-accum", LB_ARG_INT, &p->grad_accum, "K",
         "split each step's batch into K micro-batches whose gradients add up (default 1)", 1,
         1 << 20},
        {"--gpus", LB_ARG_INT, &gpus, "N",
         "start N local workers, one per GPU (default: the launcher's ranks: mpirun, srun or "
         "torchrun variables; --batch is per rank)",
         1, 4096},
        {"--scaling", LB_ARG_STRING, &scaling, "LIST",
         "run on each GPU count of LIST in turn (such as 1,2,4), one stored run each, tagged as "
         "one group, with scaling efficiency against the 1-GPU run"},
        {"--save-params", LB_ARG_STRING, &p->save_params, "FILE",
         "after the last step, write the fp32 parameters (every rank's shards gathered) to FILE "
         "as safetensors, one tensor per name of the model's layout"},
        {"--bucket-mb", LB_ARG_DOUBLE, &p->bucket_mib, "MIB",
         "most gradient data a communication bucket holds, MiB (default 50)", 0, 1 << 20},
        {"--base-tok-per-s", LB_ARG_DOUBLE, &p->base_tok_per_s, "X",
         "tokens/s of this configuration on one rank: adds scaling efficiency", 0, 1e15},
        {"--comm-timeout", LB_ARG_DOUBLE, &p->comm_timeout_s, "S",
         "deadline of each collective before the job stops (default 300)", 0.1, 1e6},
        {"--setup-timeout", LB_ARG_DOUBLE, &setup_timeout, "S",
         "deadline of the ranks' rendezvous (default 120)", 0.1, 1e6},
        {"--peak-tflops", LB_ARG_DOUBLE, &p->peak_tflops, "X",
         "dense peak TFLOP/s for MFU when the GPU is not in the table", 1e-3, 1e6},
        {"--hour-cost", LB_ARG_DOUBLE, &p->hour_cost, "X",
         "price per hour of the hardware the run uses (this machine; with several ranks, all "
         "of theirs), any currency: adds cost_per_1k_samples and cost_per_1m_tokens",
         1e-9, 1e9},
        {"--gpu-hour-price", LB_ARG_DOUBLE, &p->gpu_hour_price, "X",
         "price of one GPU per hour, any currency: the run costs X times its GPUs (so each "
         "run of --scaling its own); instead of --hour-cost",
         1e-9, 1e9},
        {"--name", LB_ARG_STRING, &name, "NAME",
         "name of the stored run (default MODEL-DEVICE-PRECISION, on N ranks with "
         "-xN-zeroSTAGE after it)"},
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
        .uses_db = true,
        .checks_inputs = true,
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
    p->zero = (int)zero;

    if (gpus > 0 && p->device == LB_DEVICE_CPU && !lb_cli_is_worker())
        return lb_status_exit_code(lb_args_usage_error("train", LAUNCH_ON_CPUS, (long long)gpus,
                                                       "--device cpu uses none"));
    if (scaling != NULL && gpus > 0 && !lb_cli_is_worker())
        return lb_status_exit_code(lb_args_usage_error(
            "train", "--scaling %s chooses the GPU counts: give it without --gpus", scaling));
    /* the ranks this command line starts, else those its launcher's environment names */
    int ranks = gpus > 0 ? (int)gpus : lb_boot_env_size();
    if (scaling != NULL && !lb_cli_is_worker()) { /* the list, before the machine is asked */
        int counts[16], n = 0;
        if (parse_counts(scaling, &n, counts, 16) != 0) return 2;
        ranks = counts[n - 1];
        if (p->base_tok_per_s > 0)
            return lb_status_exit_code(lb_args_usage_error(
                "train",
                "--scaling %s measures the one-GPU tokens/s its runs scale against: give it "
                "without --base-tok-per-s",
                scaling));
        if (p->device == LB_DEVICE_CPU)
            return lb_status_exit_code(lb_args_usage_error(
                "train",
                "--scaling %s starts one worker per GPU and --device cpu uses none: on CPUs "
                "start the ranks with mpirun -np N",
                scaling));
    }
    if (lb_args_checking_inputs()) {
        lb_err err = {{0}};
        lb_status st = lb_train_check_inputs(p, ranks, &err);
        if (st == LB_OK) return 0;
        fprintf(stderr, "llmbench train: %s\n", err.msg);
        return st == LB_ERR_NOMEM ? 1 : 2; /* whatever refused, it is the input */
    }
    if (scaling != NULL && !lb_cli_is_worker())
        return run_scaling(scaling, argc, argv, a.common.json, p->comm_timeout_s + 5);
    if (gpus > 0 && !lb_cli_is_worker()) {
        if (lb_devinfo_cuda_device_count() == 0)
            return lb_status_exit_code(lb_args_usage_error("train", LAUNCH_ON_CPUS, (long long)gpus,
                                                           "this machine has no usable GPU"));
        /* main passes argv + 1: argv - 1 is the program's whole command line */
        return lb_cli_run_workers("train", gpus, argv - 1, -1, p->comm_timeout_s + 5);
    }

    lb_err err = {{0}};
    lb_boot *boot = NULL;
    lb_status st = lb_boot_init(setup_timeout, &boot, &err);
    if (st != LB_OK) {
        fprintf(stderr, "llmbench train: %s\n", err.msg);
        return lb_status_exit_code(st);
    }
    p->boot = boot;
    int rank = lb_boot_rank(boot);
    if (lb_boot_size(boot) > 1 && p->device != LB_DEVICE_CPU) /* one GPU a rank */
        p->device_index = lb_boot_device(boot, lb_devinfo_cuda_device_count());
    lb_model_config cfg;
    lb_status local = lb_train_resolve(p, &cfg, &err);
    if (local == LB_OK && rank == 0 && lb_boot_size(boot) > 1) {
        /* the results database rank 0 will write, checked now: a path it cannot use stops
         * every rank here, not rank 0 alone while the others wait for it in the run */
        local = lb_store_check_path(a.common.db_path, &err);
    }
    st = lb_train_agree(p, &cfg, local, &err);
    if (st != LB_OK) {
        if (rank == 0) fprintf(stderr, "llmbench train: %s\n", err.msg);
        lb_boot_free(boot);
        if (st == LB_ERR_USAGE || st == LB_ERR_FORMAT || st == LB_ERR_IO) return 2;
        return lb_status_exit_code(st);
    }
    char run_name[128];
    if (name == NULL) {
        snprintf(run_name, sizeof run_name, "%s-%s-%s", cfg.name,
                 p->device == LB_DEVICE_CUDA ? "cuda" : "cpu", lb_precision_name(p->precision));
        if (lb_boot_size(boot) > 1)
            snprintf(run_name + strlen(run_name), sizeof run_name - strlen(run_name), "-x%d-zero%d",
                     lb_boot_size(boot), p->zero);
        name = run_name;
    }
    lb_result *r = lb_result_new("train", name);
    if (r == NULL) {
        fprintf(stderr, "llmbench train: out of memory\n");
        lb_boot_free(boot);
        return 1;
    }
    for (int i = 0; i < tags.n; i++)
        lb_result_add_tag(r, tags.items[i], strlen(tags.items[i]));
    lb_train_record_config(p, &cfg, r); /* stored when the run begins */
    int64_t run_id = -1;
    if (rank == 0) {
        /* main passes argv + 1: argv - 1 is the program's whole command line */
        st = lb_runctl_run(&a.common, argc + 1, argv - 1, r, work, &ctx, &run_id, &err);
        /* Only what was measured is a result: nothing when the run could not start. */
        if (r->status != LB_RUN_RUNNING) {
            if (a.common.json)
                lb_output_result_json(stdout, r, run_id);
            else
                lb_output_result_table(stdout, r, run_id);
        }
    } else {
        st = lb_train_run(p, r, &err);
    }
    if (st != LB_OK && rank != 0 && st != LB_ERR_INTERRUPTED)
        fprintf(stderr, "llmbench train: rank %d: %s\n", rank, err.msg);
    if (st == LB_ERR_COMM && rank != 0) {
        /* Rank 0 records how the job ended. Leaving after a failed collective aborts the job
         * (comm/boot.h), so give rank 0 the time to reach its own deadline and store the run
         * first; its abort ends this wait sooner. */
        struct timespec wait = {.tv_sec = (time_t)p->comm_timeout_s + 5};
        nanosleep(&wait, NULL);
    }
    if (st != LB_OK && lb_boot_size(boot) == 1)
        fprintf(stderr, "llmbench train: %s\n", err.msg);
    else if (st != LB_OK && rank == 0)
        fprintf(stderr, "llmbench train: rank 0: %s\n", err.msg);
    lb_result_free(r);
    fflush(stdout);
    lb_boot_free(boot);
    return lb_status_exit_code(st);
}
