/* main.c: llmbench's entry point: dispatch to a subcommand, --help and --version.
 *
 * Only this file and the cmd_*.c files decide exit codes; a command that ends well but whose
 * output stdout did not take whole (a full disk, a closed pipe) exits 1 here. Signals are installed
 * here so that every long-running command sees SIGINT/SIGTERM as a flag (core/signals.h). */
#include <errno.h>
#include <stdbool.h>
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
    printf("\noptions:\n  --help     this help (llmbench help <command>: that command's)\n"
           "  --version  version and git commit\n");
}

/* code, unless it is 0 and stdout did not take all that was printed (a full disk, a closed
 * pipe): then 1, with a line on stderr, so that no one takes part of the output for all. */
static int check_stdout(const char *name, int code) {
    if (code != 0) return code;
    errno = 0;
    const bool flushed = fflush(stdout) == 0;
    if (flushed && !ferror(stdout)) return code;
    /* the flush's own errno; an earlier write's error was not kept */
    fprintf(stderr, "llmbench %s: cannot write the output%s%s\n", name,
            !flushed && errno ? ": " : "", !flushed && errno ? strerror(errno) : "");
    return 1;
}

int main(int argc, char **argv) {
    /* `llmbench help`, `help help`, `help --help`: the commands */
    bool help_itself = argc == 3 && strcmp(argv[1], "help") == 0 &&
                       (strcmp(argv[2], "help") == 0 || strcmp(argv[2], "--help") == 0 ||
                        strcmp(argv[2], "-h") == 0);
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        (strcmp(argv[1], "help") == 0 && argc == 2) || help_itself) {
        print_help();
        return check_stdout("--help", 0);
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("llmbench %s (commit %s)\n", lb_version_string, lb_version_commit);
        return check_stdout("--version", 0);
    }
    /* `llmbench help COMMAND` is `llmbench COMMAND --help` */
    int sub_argc = argc - 1;
    char **sub_argv = argv + 1; /* a command may read sub_argv[-1]: the whole command line */
    char *help_argv[] = {argv[0], argc > 2 ? argv[2] : NULL, "--help", NULL};
    if (strcmp(argv[1], "help") == 0) {
        if (argc > 3) {
            fprintf(stderr, "llmbench help: unexpected argument '%s': it takes one command name\n",
                    argv[3]);
            return 2;
        }
        sub_argc = 2, sub_argv = help_argv + 1;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        if (strcmp(sub_argv[0], commands[i].name) == 0) {
            lb_signals_install();
            return check_stdout(commands[i].name, commands[i].fn(sub_argc, sub_argv));
        }
    }
    if (sub_argv[0][0] == '-')
        fprintf(stderr,
                "llmbench: unknown option '%s': options go after the command "
                "(llmbench <command> [options]; see 'llmbench --help')\n",
                sub_argv[0]);
    else
        fprintf(stderr, "llmbench: unknown command '%s' (see 'llmbench --help' for the list)\n",
                sub_argv[0]);
    return 2;
}
