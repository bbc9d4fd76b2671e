/* cmd_doctor.c: `llmbench doctor`: node facts, cross-rank comparison, the all_reduce check
 * and the ladder of NCCL settings (doctor/doctor.h); prints the report or --json. Exit 0
 * when NCCL works as found (or there is nothing to check: no GPU and no MPI ranks), 1 when
 * only a changed setting works or nothing does, 2 usage, 130 interrupted. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "comm/boot.h"
#include "doctor/doctor.h"

static void print_gpu(const json_t *g) {
    printf("  GPU %lld %s, %.1f GiB", (long long)json_integer_value(json_object_get(g, "index")),
           json_string_value(json_object_get(g, "name")),
           (double)json_integer_value(json_object_get(g, "mem_bytes")) / (1 << 30));
    const json_t *pcie = json_object_get(g, "pcie");
    if (pcie)
        printf(", PCIe gen%lld x%lld (max gen%lld x%lld)",
               (long long)json_integer_value(json_object_get(pcie, "gen")),
               (long long)json_integer_value(json_object_get(pcie, "width")),
               (long long)json_integer_value(json_object_get(pcie, "max_gen")),
               (long long)json_integer_value(json_object_get(pcie, "max_width")));
    printf(", %zu NVLink(s)", json_array_size(json_object_get(g, "nvlinks")));
    if (json_object_get(g, "ecc_uncorrected"))
        printf(", %lld uncorrected ECC error(s)",
               (long long)json_integer_value(json_object_get(g, "ecc_uncorrected")));
    if (json_object_get(g, "sm_clock_mhz"))
        printf(", SM %lld/%lld MHz",
               (long long)json_integer_value(json_object_get(g, "sm_clock_mhz")),
               (long long)json_integer_value(json_object_get(g, "sm_clock_max_mhz")));
    if (json_object_get(g, "clock_reasons"))
        printf(", clock reasons 0x%llx",
               (unsigned long long)json_integer_value(json_object_get(g, "clock_reasons")));
    printf("\n");
}

static const char *str_or(const json_t *o, const char *key, const char *fallback) {
    const char *v = json_string_value(json_object_get(o, key));
    return v ? v : fallback;
}

static void print_report(const json_t *rep) {
    printf("llmbench doctor: %lld rank(s), started as %s\n",
           (long long)json_integer_value(json_object_get(rep, "ranks_count")),
           str_or(rep, "launcher", "?"));
    size_t i, k;
    json_t *f, *o;
    json_array_foreach(json_object_get(rep, "ranks"), i, f) {
        printf("rank %zu on %s: driver %s, CUDA %s (runtime %s), NCCL %s\n", i,
               str_or(f, "host", "?"), str_or(f, "driver", "none"),
               str_or(f, "cuda_driver", "none"), str_or(f, "cuda_runtime", "none"),
               str_or(f, "nccl", "none"));
        json_array_foreach(json_object_get(f, "gpus"), k, o) print_gpu(o);
        printf("  network:");
        json_array_foreach(json_object_get(f, "net"), k, o) {
            printf(" %s (%s", str_or(o, "name", "?"), str_or(o, "operstate", "?"));
            size_t a;
            json_t *addr;
            json_array_foreach(json_object_get(o, "addresses"), a, addr)
                printf(", %s", json_string_value(addr));
            if (json_object_get(o, "speed_mbps"))
                printf(", %lld Mb/s",
                       (long long)json_integer_value(json_object_get(o, "speed_mbps")));
            printf(")");
        }
        printf("\n  InfiniBand/RoCE:%s", json_array_size(json_object_get(f, "ib")) ? "" : " none");
        json_array_foreach(json_object_get(f, "ib"), k, o)
            printf(" %s:%lld (%s, %s, %s, %zu GIDs)", str_or(o, "device", "?"),
                   (long long)json_integer_value(json_object_get(o, "port")),
                   str_or(o, "state", "?"), str_or(o, "rate", "?"), str_or(o, "link_layer", "?"),
                   json_array_size(json_object_get(o, "gids")));
        printf("\n");
        const json_t *env = json_object_get(f, "env");
        if (json_object_size(env) > 0) {
            printf("  NCCL settings:");
            const char *key;
            json_t *v;
            json_object_foreach((json_t *)env, key, v) printf(" %s=%s", key, json_string_value(v));
            printf("\n");
        }
    }
    json_array_foreach(json_object_get(rep, "problems"), i, o)
        printf("problem: %s\n", json_string_value(o));
    if (json_array_size(json_object_get(rep, "ranks")) == 1)
        printf("one rank: no other to compare its driver, CUDA, NCCL and GPU models with\n");
    else if (json_array_size(json_object_get(rep, "mismatches")) == 0)
        printf("ranks agree on driver, CUDA, NCCL and GPU models\n");
    json_array_foreach(json_object_get(rep, "mismatches"), i, o)
        printf("mismatch: %s\n", json_string_value(o));
    const json_t *check = json_object_get(rep, "check");
    const json_t *rungs = json_object_get(check, "rungs");
    if (rungs == NULL) {
        printf("check: %s", str_or(check, "how", "none"));
        if (json_object_get(check, "ok"))
            printf(": %s in %.2f s%s%s",
                   json_is_true(json_object_get(check, "ok")) ? "ok" : "FAILED",
                   json_real_value(json_object_get(check, "seconds")),
                   *str_or(check, "error", "") ? ": " : "", str_or(check, "error", ""));
        printf("\n");
        return;
    }
    long long gpus = json_integer_value(json_object_get(check, "gpus"));
    printf("check: NCCL all_reduce of %lld bytes on %lld GPU(s); ",
           (long long)json_integer_value(json_object_get(check, "bytes")), gpus);
    if (gpus < 2)
        printf("judged by success alone (one GPU moves nothing: its bus bandwidth is 0)\n");
    else
        printf("good above %.1f GB/s bus bandwidth (a tenth of what the links allow)\n",
               json_real_value(json_object_get(check, "good_gbps")));
    printf("  %-52s %-8s %12s %8s\n", "setting", "result", "busbw GB/s", "time s");
    json_array_foreach(rungs, i, o) {
        if (!json_is_true(json_object_get(o, "ran"))) continue;
        bool ok = json_is_true(json_object_get(o, "ok"));
        printf("  %-52s %-8s %12.2f %8.2f", str_or(o, "name", "?"), ok ? "ok" : "FAILED",
               json_real_value(json_object_get(o, "busbw_gbps")),
               json_real_value(json_object_get(o, "seconds")));
        if (!ok) printf("  %s", str_or(o, "error", ""));
        printf("\n");
    }
    printf("verdict: NCCL %s\n", str_or(check, "verdict", "?"));
    long long chosen = json_integer_value(json_object_get(check, "chosen"));
    if (chosen > 0) {
        const json_t *r = json_array_get(rungs, (size_t)chosen);
        printf("use: %s\n", str_or(r, "export", ""));
    }
}

/* --json where no report was made (the job could not start or gather): the error alone. */
static void print_json_error(const char *msg, int exit_code) {
    json_t *o = json_pack("{s:s, s:i}", "error", msg, "exit_code", exit_code);
    json_dumpf(o, stdout, JSON_INDENT(2));
    printf("\n");
    json_decref(o);
}

int lb_cmd_doctor(int argc, char **argv) {
    lb_doctor_params p = lb_doctor_default_params();
    bool probe = false, no_progress = false;
    const lb_arg_spec specs[] = {
        {"--setup-timeout", LB_ARG_DOUBLE, &p.setup_timeout_s, "S",
         "deadline of each probe's rendezvous and communicator (default 20)", 0.1, 1e5},
        {"--comm-timeout", LB_ARG_DOUBLE, &p.op_timeout_s, "S",
         "deadline of each probe's all_reduce (default 10)", 0.1, 1e5},
        {"--probe-bytes", LB_ARG_INT, &p.probe_bytes, "B",
         "size of the probe all_reduce (default 33554432)", 4, 1e12},
        {"--probe", LB_ARG_FLAG, &probe, NULL,
         "run as one of the probe's workers (started by doctor itself)"},
        {"--no-progress", LB_ARG_FLAG, &no_progress, NULL, "no progress line on stderr"},
    };
    const lb_cli_command cmd = {
        .command = "doctor",
        .usage = "[options]",
        .summary =
            "Checks this node (or every node of an mpirun, srun or torchrun job) for what "
            "decides whether NCCL works: driver, CUDA and NCCL versions, each GPU (memory, ECC "
            "errors, clocks and their limits, PCIe link, NVLinks), network interfaces, "
            "InfiniBand/RoCE ports with their GID tables, NCCL settings that name nothing; "
            "compares the ranks; runs one small all_reduce with a deadline and, if it fails or "
            "is far below what the links allow, a ladder of NCCL settings, each in fresh "
            "processes (ended, as a failed rung, after 3 x --setup-timeout + 2 x "
            "--comm-timeout + 30 s), and prints the first that works and the export line to "
            "use. Exit 0: "
            "works as found (or nothing to check: no GPU and no MPI ranks); 1: only a changed "
            "setting works, or nothing does; 2: bad usage; 130: interrupted.",
        LB_ARG_SPECS(specs),
    };
    lb_args a;
    int rc = lb_args_parse(&cmd, argc, argv, &a);
    if (rc != LB_ARGS_GO_ON) return rc;
    p.progress = !no_progress;
    if (p.probe_bytes % 4 != 0)
        return lb_status_exit_code(lb_args_usage_error(
            "doctor", "--probe-bytes %lld: expected a multiple of 4 (float elements)",
            (long long)p.probe_bytes));
    lb_boot *boot = NULL;
    lb_err err = {{0}};
    lb_status st = lb_boot_init(p.setup_timeout_s, &boot, &err);
    if (st != LB_OK) {
        if (!probe) fprintf(stderr, "llmbench doctor: %s\n", err.msg);
        /* one document for the job: the process its launcher calls rank 0 prints it */
        if (!probe && a.common.json && lb_boot_env_rank() <= 0)
            print_json_error(err.msg, lb_status_exit_code(st));
        return lb_status_exit_code(st);
    }
    if (probe) {
        st = lb_doctor_probe_worker(boot, &p, &err);
        lb_boot_free(boot);
        return lb_status_exit_code(st);
    }
    json_t *report = NULL;
    lb_doctor_verdict verdict = LB_DOCTOR_BROKEN;
    st = lb_doctor_run(boot, &p, &report, &verdict, &err);
    int rank = lb_boot_rank(boot);
    int code = st != LB_OK                                        ? lb_status_exit_code(st)
               : rank == 0 && verdict != LB_DOCTOR_WORKS_AS_FOUND ? 1
                                                                  : 0;
    if (report != NULL && a.common.json) {
        json_object_set_new(report, "exit_code", json_integer(code));
        json_dumpf(report, stdout, JSON_INDENT(2));
        printf("\n");
    } else if (report != NULL) {
        print_report(report);
    } else if (st != LB_OK && rank == 0 && a.common.json) {
        print_json_error(err.msg, code);
    }
    json_decref(report);
    if (st != LB_OK) fprintf(stderr, "llmbench doctor: rank %d: %s\n", rank, err.msg);
    lb_boot_free(boot);
    return code;
}
