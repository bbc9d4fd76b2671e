/* cmd_run.c: `llmbench run`: the default suite for this machine.
 *
 * What is present decides what runs: every machine trains a small GPT-2 and a small
 * Llama configuration on the CPU reference; a machine with a CUDA GPU also trains GPT-2
 * 124M on it and runs a short Offline inference benchmark on the built-in engine (random
 * llama3.2-1b weights, 256 prompts of 512 tokens, 64 output tokens each); a machine with two
 * or more GPUs also runs a scaling benchmark (`llmbench train --scaling 1,N`: GPT-2 124M on
 * one and on all N GPUs at ZeRO 1, stored as one group), `llmbench comm all_reduce` over
 * all of them (8 B to 1 GiB) and `llmbench doctor`'s single-node check, each as a child
 * process that prints its own report (train and comm store their runs). Each benchmark is its own
 * stored run; the command ends with one table of all of them and their run ids, a line per training
 * and inference run comparing it with its benchmark's history on this machine (history/history.h),
 * and a report of those runs (report/report.h) whose path the summary names. A benchmark that fails
 * does not stop the others; the exit code is 1 if any failed, 130 if interrupted. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/engine_opt.h"
#include "cli/output.h"
#include "cli/runctl.h"
#include "core/file.h"
#include "core/proc.h"
#include "core/signals.h"
#include "gpu/devinfo.h"
#include "history/bench.h"
#include "history/history.h"
#include "history/select.h"
#include "infer/infer.h"
#include "report/report.h"
#include "store/store.h"
#include "train/train.h"

#define MAX_ROWS 8 /* the suite's runs, the inference run and the scaling group's */

typedef struct {
    const char *model;
    lb_device_kind device;
    lb_precision precision;
    int64_t batch, seq, steps, warmup;
} suite_item;

/* 100 timed steps after 10 (1-3 s each): shorter windows caught CPU frequency changes and
 * a GPU's clocks settling under its power limit (the drift warning of train.c). */
static const suite_item cpu_suite[] = {
    {"gpt2-tiny", LB_DEVICE_CPU, LB_PREC_FP32, 8, 32, 100, 10},
    {"llama-tiny", LB_DEVICE_CPU, LB_PREC_FP32, 8, 64, 100, 10},
};

static const suite_item gpu_suite[] = {
    {"gpt2-124m", LB_DEVICE_CUDA, LB_PREC_BF16, 16, 1024, 100, 10},
};

typedef struct {
    lb_train_params params;
} item_ctx;

static lb_status work(void *ctx, lb_result *r, lb_err *err) {
    return lb_train_run(&((item_ctx *)ctx)->params, r, err);
}

/* Runs one item as a stored run; returns its status and fills *out (caller frees). */
static lb_status run_item(const lb_cli_common *common, int argc, char **argv, const suite_item *it,
                          bool progress, lb_result **out, int64_t *run_id) {
    item_ctx ctx = {.params = lb_train_default_params()};
    lb_train_params *p = &ctx.params;
    p->model = it->model;
    p->device = it->device;
    p->precision = it->precision;
    p->batch = it->batch;
    p->seq = it->seq;
    p->steps = it->steps;
    p->warmup = it->warmup;
    p->progress = progress;
    char name[128];
    snprintf(name, sizeof name, "%s-%s-%s", it->model,
             it->device == LB_DEVICE_CUDA ? "cuda" : "cpu", lb_precision_name(it->precision));
    lb_result *r = lb_result_new("train", name);
    *out = r;
    if (r == NULL) return LB_ERR_NOMEM;
    json_array_append_new(r->tags, json_string("suite"));
    lb_err err = {{0}};
    lb_train_params resolved = *p;
    lb_model_config cfg;
    if (lb_train_resolve(&resolved, &cfg, &err) == LB_OK) /* else the run fails saying why */
        lb_train_record_config(&resolved, &cfg, r);
    lb_status st = lb_runctl_run(common, argc, argv, r, work, &ctx, run_id, &err);
    if (st != LB_OK) fprintf(stderr, "llmbench run: %s: %s\n", name, err.msg);
    return st;
}

int lb_cli_run_scaling_args(int gpus, int64_t steps, const char *db, const char *tag, char *buf,
                            char **argv) {
    const suite_item *it = &gpu_suite[0];
    int n = 0;
    char *counts = buf, *nsteps = buf + 24, *nwarm = buf + 44;
    snprintf(counts, 24, "1,%d", gpus);
    snprintf(nsteps, 20, "%lld", (long long)(steps > 0 ? steps : it->steps));
    snprintf(nwarm, 20, "%lld", (long long)it->warmup);
    const char *fixed[] = {"llmbench", "train",   "--scaling",   counts, "--zero",   "1",
                           "--model",  it->model, "--precision", "bf16", "--batch",  "16",
                           "--seq",    "1024",    "--steps",     nsteps, "--warmup", nwarm};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        argv[n++] = (char *)fixed[i];
    argv[n++] = "--tag", argv[n++] = (char *)tag;
    if (db != NULL) argv[n++] = "--db", argv[n++] = (char *)db;
    argv[n] = NULL;
    return n;
}

typedef struct {
    lb_infer_params p;
    lb_dataset ds;
    lb_loadgen_report rep;
} infer_ctx;

static lb_status infer_work(void *ctx, lb_result *r, lb_err *err) {
    infer_ctx *c = ctx;
    return lb_infer_run(&c->p, &c->ds, r, &c->rep, err);
}

/* The suite's inference benchmark as a stored run (see the file comment). */
static lb_status run_infer(const lb_cli_common *common, int argc, char **argv, lb_result **out,
                           int64_t *run_id) {
    const char *name = "llama3.2-1b-gpu-Offline";
    lb_result *r = lb_result_new("infer", name);
    *out = r;
    if (r == NULL) return LB_ERR_NOMEM;
    json_array_append_new(r->tags, json_string("suite"));
    infer_ctx c;
    memset(&c, 0, sizeof c);
    c.p.lg = lb_loadgen_default_params();
    c.p.lg.scenario = LB_SCENARIO_OFFLINE;
    c.p.lg.max_tokens = 64;
    c.p.lg.request.ignore_eos = true;
    c.p.lg.dataset_path = "synthetic";
    c.p.bos_id = -1;
    c.p.sampling = lb_sample_default();
    lb_dataset_synthetic_params sp = lb_dataset_synthetic_default_params();
    sp.n_samples = 256;
    sp.input = (lb_len_dist){LB_LEN_FIXED, 512, 0};
    sp.output = (lb_len_dist){LB_LEN_FIXED, 64, 0};
    lb_engine_opt eo = LB_ENGINE_OPT_DEFAULT;
    eo.random = "llama3.2-1b";
    eo.max_ctx = 1024;
    lb_engine_setup es;
    lb_err err = {{0}};
    lb_status st = lb_dataset_synthetic(&sp, &c.ds, &err);
    if (st == LB_OK && (st = lb_engine_opt_open(&eo, NULL, &es, &err)) == LB_OK) {
        c.p.engine = es.engine;
        c.p.sut_name = es.name;
        st = lb_runctl_run(common, argc, argv, r, infer_work, &c, run_id, &err);
        lb_engine_opt_close(&es);
    }
    if (st != LB_OK) fprintf(stderr, "llmbench run: %s: %s\n", name, err.msg);
    lb_loadgen_report_free(&c.rep);
    lb_dataset_free(&c.ds);
    return st;
}

/* Each ok run against its history, then the report of the runs; its path into html. */
static lb_status history_and_report(const lb_cli_common *common, const int64_t *ids, size_t n,
                                    const lb_result *const *results, const char *report_dir,
                                    char *html, size_t html_bytes, lb_err *err) {
    lb_store *s = NULL;
    LB_TRY(lb_store_open(common->db_path, &s, err));
    char dir[LB_STORE_PATH_BYTES + 64];
    lb_status st = LB_OK;
    FILE *f = common->json ? stderr : stdout;
    /* each run its own configuration in the report, labelled by its name (one list of ids
     * would be read as repeats of one configuration) */
    lb_run_set set = {0};
    for (size_t i = 0; i < n && st == LB_OK; i++) {
        size_t n_keys = 0;
        if (results[i] == NULL || results[i]->status != LB_RUN_OK) continue;
        if (lb_bench_key_metrics(results[i]->kind, &n_keys) == NULL) continue; /* no history */
        bool regressed = false;
        st = lb_history_check_run(s, ids[i], 3.0, f, &regressed, err);
        char spec[24];
        snprintf(spec, sizeof spec, "%lld", (long long)ids[i]);
        lb_run_set one = {0};
        if (st == LB_OK) st = lb_select_runs(s, spec, &one, err);
        if (st == LB_OK)
            snprintf(one.groups[0].label, sizeof one.groups[0].label, "%s (run %lld)",
                     results[i]->name, (long long)ids[i]);
        if (st == LB_OK) st = lb_select_take(&set, &one, err);
        lb_select_free(&one);
    }
    if (st == LB_OK && set.n_groups > 0 && report_dir == NULL) { /* beside the database */
        snprintf(dir, sizeof dir, "%s", lb_store_path(s));
        char *slash = strrchr(dir, '/');
        size_t at = slash ? (size_t)(slash - dir) + 1 : 0;
        snprintf(dir + at, sizeof dir - at, "reports/run-%lld", (long long)ids[0]);
        report_dir = dir;
    }
    if (st == LB_OK && set.n_groups > 0) {
        lb_report_params p = lb_report_default_params();
        p.out_dir = report_dir;
        p.title = "llmbench run";
        st = lb_report_write(s, &set, &p, html, html_bytes, err);
    }
    lb_select_free(&set);
    lb_store_close(s);
    return st;
}

/* The runs a child stored with `tag` (the scaling group's), oldest first, at most cap of
 * them into results and ids; their count. Read failures leave them out (the child's own
 * output named its runs). */
static size_t load_tagged(const lb_cli_common *common, const char *tag, lb_result **results,
                          int64_t *ids, size_t cap) {
    lb_store *s = NULL;
    lb_err err = {{0}};
    lb_store_filter f = lb_store_default_filter();
    f.tag = tag;
    lb_store_run_info *runs = NULL;
    size_t n_runs = 0, k = 0;
    if (lb_store_open(common->db_path, &s, &err) == LB_OK &&
        lb_store_list(s, &f, &runs, &n_runs, &err) == LB_OK)
        for (size_t i = n_runs; i-- > 0 && k < cap;) /* newest first: from the end */
            if (lb_store_run_load_summary(s, runs[i].id, &results[k], &err) == LB_OK)
                ids[k++] = runs[i].id;
    free(runs);
    lb_store_close(s);
    return k;
}

/* A table cell: v in fmt, or "n/a" (as the rate column) where the run has no such figure (an
 * inference run has no steps or loss). */
static void cell(char *buf, size_t cap, const char *fmt, double v) {
    if (isfinite(v))
        snprintf(buf, cap, fmt, v);
    else
        snprintf(buf, cap, "n/a");
}

/* Runs this program with args (args[0] stands for it; NULL-terminated) as a child
 * (core/proc.h: a signal that reached us is passed on, the child waited for), its stdout on
 * our stderr when quiet_stdout (stdout then holds only our JSON); returns its exit code.
 * /proc/self/exe starts this very program even when its file was replaced since. */
static int run_self(char **args, bool quiet_stdout) {
    char *name = args[0];
    args[0] = "/proc/self/exe";
    lb_proc_spec spec = {.argv = (const char *const *)args, .stdout_to_stderr = quiet_stdout};
    int code = 1;
    lb_err err;
    lb_status st = lb_proc_run(&spec, &code, &err);
    args[0] = name;
    if (st != LB_OK) fprintf(stderr, "llmbench run: %s\n", err.msg);
    return st == LB_OK ? code : 1;
}

/* A step run as a child, by its exit code: ok, interrupted (130) or `failed`. */
static const char *child_status(int code, const char *failed) {
    return code == 0 ? "ok" : code == 130 ? "interrupted" : failed;
}

int lb_cmd_run(int argc, char **argv) {
    bool cpu_only = false, no_report = false, no_progress = false;
    const char *report_dir = NULL;
    int64_t steps = 0;
    const lb_arg_spec specs[] = {
        {"--steps", LB_ARG_INT, &steps, "N",
         "timed steps of each benchmark (default 100, after 10 warm-up steps)", 1, 1e9},
        {"--cpu-only", LB_ARG_FLAG, &cpu_only, NULL,
         "skip the GPU benchmarks even when a GPU is present"},
        {"--report", LB_ARG_STRING, &report_dir, "DIR",
         "write the report here (default: reports/run-ID beside the results database)"},
        {"--no-report", LB_ARG_FLAG, &no_report, NULL, "no history check and no report"},
        {"--no-progress", LB_ARG_FLAG, &no_progress, NULL, "no progress line on stderr"},
    };
    const lb_cli_command cmd = {
        .command = "run",
        .uses_db = true,
        .usage = "[options]",
        .summary = "The default suite for this machine: a short training benchmark of a small "
                   "GPT-2 and a small Llama configuration on the CPU, and GPT-2 124M in bf16 and "
                   "an Offline inference benchmark of the built-in engine (random llama3.2-1b "
                   "weights) on the GPU when one is present; with two or more GPUs also a "
                   "scaling run (GPT-2 124M on 1 and all GPUs at ZeRO 1, one stored group), "
                   "`llmbench comm all_reduce` over all of them (8 B to 1 GiB) and `llmbench "
                   "doctor`. Every benchmark is stored as its own run; a summary table with the "
                   "run ids, a comparison of each training and inference run with this "
                   "machine's history of its benchmark, and the path of a report of those runs "
                   "end the output.",
        LB_ARG_SPECS(specs),
    };
    lb_args a;
    int rc = lb_args_parse(&cmd, argc, argv, &a);
    if (rc != LB_ARGS_GO_ON) return rc;
    if (report_dir != NULL && no_report)
        return lb_status_exit_code(lb_args_usage_error(
            "run",
            "--report %s names where the report goes and --no-report asks for none: give "
            "one of them",
            report_dir));
    if (report_dir != NULL) { /* a bad folder costs no suite */
        lb_err err = {{0}};
        if (lb_file_check_folder("--report", report_dir, &err) != LB_OK)
            return lb_status_exit_code(lb_args_usage_error("run", "%s", err.msg));
    }

    suite_item items[8];
    size_t n = 0;
    for (size_t i = 0; i < sizeof cpu_suite / sizeof cpu_suite[0]; i++)
        items[n++] = cpu_suite[i];
    int gpus = lb_devinfo_cuda_device_count();
    if (!cpu_only && gpus > 0)
        for (size_t i = 0; i < sizeof gpu_suite / sizeof gpu_suite[0]; i++)
            items[n++] = gpu_suite[i];
    for (size_t i = 0; steps > 0 && i < n; i++)
        items[i].steps = steps;
    if (gpus == 0 && !a.common.json && a.common.verbosity >= 0)
        fprintf(stderr, "llmbench run: no CUDA GPU found: running the CPU suite only\n");

    lb_result *results[MAX_ROWS] = {0};
    int64_t ids[MAX_ROWS];
    for (size_t i = 0; i < MAX_ROWS; i++)
        ids[i] = -1; /* not stored */
    int exit_code = 0;
    for (size_t i = 0; i < n; i++) {
        /* main passes argv + 1: argv - 1 is the program's whole command line */
        lb_status s =
            run_item(&a.common, argc + 1, argv - 1, &items[i], !no_progress, &results[i], &ids[i]);
        if (s == LB_ERR_INTERRUPTED || lb_signals_interrupted()) {
            exit_code = 130;
            n = i + 1;
            break;
        }
        if (s != LB_OK) exit_code = 1;
    }
    if (exit_code != 130 && !cpu_only && gpus > 0) {
        lb_status s = run_infer(&a.common, argc + 1, argv - 1, &results[n], &ids[n]);
        n++;
        if (s == LB_ERR_INTERRUPTED || lb_signals_interrupted())
            exit_code = 130;
        else if (s != LB_OK)
            exit_code = 1;
    }

    /* two or more GPUs: scaling over them, the collectives and NCCL's health, as their own
     * commands */
    int comm_code = -1, doctor_code = -1, scaling_code = -1;
    if (!cpu_only && gpus >= 2 && exit_code != 130 && !lb_signals_interrupted()) {
        /* the scaling group's runs carry a tag of this suite's, so that its table and report
         * hold them too */
        char buf[64], *scaling_args[24], tag[48];
        snprintf(tag, sizeof tag, "run-suite-%lld", (long long)ids[0]);
        lb_cli_run_scaling_args(gpus, steps, a.common.db_path, tag, buf, scaling_args);
        scaling_code = run_self(scaling_args, a.common.json);
        if (ids[0] >= 0) /* a tag of the first stored run's id names this suite alone */
            n += load_tagged(&a.common, tag, results + n, ids + n, MAX_ROWS - n);
        if (scaling_code == 130 || lb_signals_interrupted()) exit_code = 130;
    }
    if (!cpu_only && gpus >= 2 && exit_code != 130 && !lb_signals_interrupted()) {
        char n_gpus[16];
        snprintf(n_gpus, sizeof n_gpus, "%d", gpus);
        char *comm_args[16] = {"llmbench", "comm", "all_reduce", "--gpus", n_gpus, "-b",
                               "8",        "-e",   "1G",         "-f",     "2"};
        int k = 11;
        if (a.common.db_path != NULL) {
            comm_args[k++] = "--db";
            comm_args[k++] = (char *)a.common.db_path;
        }
        comm_args[k] = NULL;
        comm_code = run_self(comm_args, a.common.json);
        if (comm_code == 130 || lb_signals_interrupted()) {
            exit_code = 130; /* and no doctor after an interrupted comm */
        } else {
            char *doctor_args[] = {"llmbench", "doctor", NULL};
            doctor_code = run_self(doctor_args, a.common.json);
            if (doctor_code == 130 || lb_signals_interrupted()) exit_code = 130;
        }
        if (exit_code != 130 && (comm_code > 0 || doctor_code > 0 || scaling_code > 0))
            exit_code = exit_code ? exit_code : 1;
    }

    if (a.common.json) {
        json_t *arr = json_array();
        for (size_t i = 0; i < n; i++) {
            if (results[i] == NULL || results[i]->status == LB_RUN_RUNNING) continue;
            json_t *doc = lb_result_to_json(results[i]);
            json_object_set_new(doc, "id", ids[i] >= 0 ? json_integer(ids[i]) : json_null());
            json_array_append_new(arr, doc);
        }
        json_dumpf(arr, stdout, JSON_INDENT(2));
        fputc('\n', stdout);
        json_decref(arr);
    } else {
        printf("\n%-6s %-24s %-12s %12s %14s %11s %14s\n", "run", "benchmark", "status", "tokens/s",
               "step ms (p50)", "final loss", "FLOP rate");
        for (size_t i = 0; i < n; i++) {
            const lb_result *r = results[i];
            if (r == NULL || r->status == LB_RUN_RUNNING) continue;
            bool infer = strcmp(r->kind, "infer") == 0; /* output tokens, no steps or loss */
            char rate[32], tps[32], step[32], loss[32];
            lb_output_format_value(rate, sizeof rate, lb_result_metric(r, "achieved_gflops"),
                                   "GFLOP/s");
            cell(tps, sizeof tps, "%.1f",
                 lb_result_metric(r, infer ? "output_tok_per_s" : "tokens_per_s"));
            cell(step, sizeof step, "%.3f", lb_result_metric(r, "step_ms_median"));
            cell(loss, sizeof loss, "%.4f", lb_result_metric(r, "final_loss"));
            printf("%-6lld %-24s %-12s %12s %14s %11s %14s\n", (long long)ids[i], r->name,
                   lb_result_status_name(r->status), tps, step, loss, rate);
        }
        if (scaling_code >= 0)
            printf("%-6s %-24s %-12s\n", "-", "train --scaling (ZeRO 1)",
                   child_status(scaling_code, "failed"));
        if (comm_code >= 0)
            printf("%-6s %-24s %-12s\n", "-", "comm all_reduce", child_status(comm_code, "failed"));
        if (doctor_code >= 0)
            printf("%-6s %-24s %-12s\n", "-", "doctor", child_status(doctor_code, "needs a fix"));
        printf("\nEach run's raw samples: llmbench results show ID; all of them: llmbench results "
               "export --format json\n");
    }
    if (!no_report && exit_code != 130) {
        char html[LB_STORE_PATH_BYTES + 128] = "";
        lb_err err = {{0}};
        if (history_and_report(&a.common, ids, n, (const lb_result *const *)results, report_dir,
                               html, sizeof html, &err) != LB_OK) {
            fprintf(stderr, "llmbench run: %s\n", err.msg);
            exit_code = 1;
        } else if (html[0]) {
            fprintf(a.common.json ? stderr : stdout, "report: %s\n", html);
        }
    }
    for (size_t i = 0; i < n; i++)
        lb_result_free(results[i]);
    return exit_code;
}
