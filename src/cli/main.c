/* main.c: llmbench's entry point: dispatch to a subcommand, --help and --version.
 *
 * Only this file and the cmd_*.c files decide exit codes. Signals are installed here so
 * that every long-running command sees SIGINT/SIGTERM as a flag (core/signals.h). */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "core/signals.h"
#include "core/version.h"

typedef struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
} command;

static const command commands[] = {
    {"run", lb_cmd_run, "the default suite for this machine (CPU, and the GPU when present)"},
    {"train", lb_cmd_train, "training benchmark: GPT-2 and Llama, CPU or CUDA, fp32/fp16/bf16"},
    {"env", lb_cmd_env, "what this machine is: CPU, memory, GPUs, driver, CUDA, NCCL, MPI"},
    {"results", lb_cmd_results,
     "stored runs: list, show ID, export [ID...] as JSON, CSV or OpenMetrics"},
    {"serve", lb_cmd_serve,
     "OpenAI-compatible HTTP server: the built-in engine or synthetic tokens"},
    {"rouge", lb_cmd_rouge,
     "ROUGE accuracy of generated summaries, checked against MLPerf targets"},
    {"load", lb_cmd_load, "MLPerf-style load against OpenAI-compatible servers (replicas)"},
    {"infer", lb_cmd_infer, "MLPerf-style inference benchmark on the built-in engine, in process"},
    {"tokenize", lb_cmd_tokenize, "token counts (or ids) of text files with a BPE vocabulary"},
    {"comm", lb_cmd_comm,
     "collective bandwidth and correctness (nccl-tests' job) over NCCL or MPI"},
    {"doctor", lb_cmd_doctor, "does NCCL work on this node or job, and which setting makes it"},
    {"selftest", lb_cmd_selftest,
     "every GPU kernel and a whole training step against the CPU reference"},
    {"compare", lb_cmd_compare, "runs, repeats or sweeps B against A: faster, slower or no change"},
    {"history", lb_cmd_history, "a benchmark's runs over time, change points and regressions"},
    {"report", lb_cmd_report, "HTML and Markdown report with charts of stored runs or sweeps"},
    {"schedule", lb_cmd_schedule,
     "recurring runs: crontab line, systemd timer, Kubernetes CronJob"},
    {"sweep", lb_cmd_sweep,
     "an experiment matrix from a YAML/JSON file: crossed axes, repeats, resume"},
};

static void print_help(void) {
    printf("llmbench %s: benchmarks for LLM training and inference on GPU clusters\n\n"
           "usage: llmbench <command> [options]\n       llmbench <command> --help\n\n"
           "commands:\n",
           lb_version_string);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        printf("  %-10s %s\n", commands[i].name, commands[i].summary);
    printf("\noptions:\n  --help     this help\n  --version  version and git commit\n");
}

int main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        print_help();
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("llmbench %s (commit %s)\n", lb_version_string, lb_version_commit);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        if (strcmp(argv[1], commands[i].name) == 0) {
            lb_signals_install();
            return commands[i].fn(argc - 1, argv + 1);
        }
    }
    fprintf(stderr, "llmbench: unknown command '%s' (see 'llmbench --help' for the list)\n",
            argv[1]);
    return 2;
}
