/* cmd_selftest.c: `llmbench selftest`: every GPU kernel, forward and backward, and a whole
 * training step against the CPU reference on this machine's GPU (selftest/selftest.h). Prints
 * the table (or --json) and exits 1 when any row fails or the GPU cannot be used. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/result.h"
#include "selftest/selftest.h"

int lb_cmd_selftest(int argc, char **argv) {
    int64_t device = 0, seed = 0;
    bool no_model = false, no_kernels = false, failed_only = false, no_progress = false;
    const char *only = NULL;
    const lb_arg_spec specs[] = {
        {"--device", LB_ARG_INT, &device, "N", "CUDA device ordinal (default 0)", 0, 1024, NULL},
        {"--seed", LB_ARG_INT, &seed, "S",
         "seed of the random inputs, as a run prints it (default: from the clock)", 1, 9e18, NULL},
        {"--only", LB_ARG_STRING, &only, "OP",
         "only ops whose name starts with OP (attention, rope.fwd, nf4_quantize, ...; "
         "engine.llama3.1-8b: the engine at that size)",
         0, 0, NULL},
        {"--no-model", LB_ARG_FLAG, &no_model, NULL, "skip the whole-step and 10-step checks", 0, 0,
         NULL},
        {"--no-kernels", LB_ARG_FLAG, &no_kernels, NULL, "skip the per-kernel checks", 0, 0, NULL},
        {"--failed", LB_ARG_FLAG, &failed_only, NULL, "print only failed rows", 0, 0, NULL},
        {"--no-progress", LB_ARG_FLAG, &no_progress, NULL, "no progress line on stderr", 0, 0,
         NULL},
    };
    const lb_cli_command cmd = {
        .command = "selftest",
        LB_ARG_SPECS(specs),
        .usage = "[options]",
        .summary = "Checks every GPU kernel, forward and backward, in fp32, fp16 and bf16 against "
                   "the CPU reference on fresh random inputs, then one training step (loss and "
                   "every gradient) and the losses of 10 AdamW steps of small GPT-2 and Llama "
                   "models. Prints op, shape, precision, err/tol (pass <= 1; model rows: "
                   "relative L2 error over its bound) and the max absolute error; exits 1 on "
                   "any failure.",
    };
    lb_args a;
    int rc = lb_args_parse(&cmd, argc, argv, &a);
    if (rc != LB_ARGS_GO_ON) return rc;
    if (no_model && no_kernels) {
        lb_args_usage_error("selftest", "--no-model with --no-kernels leaves nothing to check: "
                                        "give at most one of them");
        return 2;
    }
    if (failed_only && a.common.json) {
        lb_args_usage_error("selftest", "--failed shortens the table, and --json prints every row "
                                        "with its \"pass\": give at most one of them");
        return 2;
    }
    lb_selftest_params p = lb_selftest_default_params();
    p.device = (int)device;
    p.seed = (uint64_t)seed;
    p.only = only;
    p.progress = !no_progress;
    p.model = !no_model;
    p.kernels = !no_kernels;
    lb_selftest_report rep;
    lb_err err = {{0}};
    lb_status st = lb_selftest_run(&p, &rep, &err);
    if (st == LB_OK && rep.n == 0 && only != NULL) {
        /* a selftest that checked nothing has not passed */
        lb_selftest_report_free(&rep);
        lb_args_usage_error(
            "selftest",
            "--only %s matches no check%s: give the start of an op's name as the "
            "table prints it (attention, model, ...)",
            only, no_model || no_kernels ? " that runs with --no-model or --no-kernels" : "");
        return 2;
    }
    if (a.common.json) {
        json_t *rows = json_array();
        for (size_t i = 0; i < rep.n; i++) {
            const lb_selftest_row *r = &rep.rows[i];
            json_array_append_new(rows,
                                  json_pack("{s:s, s:s, s:s, s:o, s:o, s:b}", "op", r->op, "shape",
                                            r->shape, "precision", r->precision, "err_over_tol",
                                            lb_result_json_number(r->err_ratio), "max_abs_err",
                                            lb_result_json_number(r->max_abs), "pass", r->pass));
        }
        json_t *doc = json_pack("{s:o, s:I, s:i, s:s}", "rows", rows, "seed", (json_int_t)rep.seed,
                                "failed", rep.n_failed, "error", st == LB_OK ? "" : err.msg);
        json_dumpf(doc, stdout, JSON_INDENT(2));
        printf("\n");
        json_decref(doc);
    } else if (rep.n > 0 || st == LB_OK) {
        printf("%-24s %-28s %-5s %10s %11s %s\n", "op", "shape", "prec", "err/tol", "max_abs",
               "result");
        for (size_t i = 0; i < rep.n; i++) {
            const lb_selftest_row *r = &rep.rows[i];
            if (failed_only && r->pass) continue;
            printf("%-24s %-28s %-5s %10.3g %11.3g %s\n", r->op, r->shape, r->precision,
                   r->err_ratio, r->max_abs, r->pass ? "pass" : "FAIL");
        }
        printf("%zu checks, %d failed (seed %llu)\n", rep.n, rep.n_failed,
               (unsigned long long)rep.seed);
    }
    if (st != LB_OK) fprintf(stderr, "llmbench selftest: %s\n", err.msg);
    int failed = rep.n_failed;
    lb_selftest_report_free(&rep);
    if (st != LB_OK)
        return lb_status_exit_code(st == LB_ERR_USAGE || st == LB_ERR_INTERRUPTED ? st
                                                                                  : LB_ERR_RUNTIME);
    return failed > 0 ? 1 : 0;
}
