/* cmd_comm.c: `llmbench comm`: the nccl-tests job (commbench/commbench.h) on every rank of
 * the job, started by mpirun, srun, torchrun variables, or here with --gpus N.
 *
 * Options take nccl-tests' letters (-b -e -f -d -o -r -w -n -c) so its users' command lines
 * carry over. Rank 0 prints nccl-tests' table as rows complete (or one JSON document at
 * the end) and stores the run; the other ranks print only their own errors. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/output.h"
#include "cli/runctl.h"
#include "cli/workers.h"
#include "comm/boot.h"
#include "comm/comm.h"
#include "commbench/commbench.h"
#include "gpu/devinfo.h"
#include "store/store.h"

/* The one form of -b, -e and --matrix: digits, then optionally K, M or G (either case; binary
 * multiples, as nccl-tests reads them), then optionally B. Anything else (0x10, 1e3, 1.5K, a
 * space, a sign) is refused rather than read as some other size. */
#define SIZE_FORMS                                                                                 \
    "digits, then optionally K, M or G (x1024, x1024^2, x1024^3), then optionally B: 8, 8B, 64K, " \
    "64KB, 256M, 1G"
#define SIZE_MOST_G 1024 /* the largest size, in G: more than any GPU holds */

/* value as bytes into *bytes; a malformed or too large value is a usage error naming option. */
static lb_status parse_size(const char *option, const char *value, int64_t *bytes) {
    const int64_t most = (int64_t)SIZE_MOST_G << 30;
    int64_t n = 0;
    const char *c = value;
    for (; *c >= '0' && *c <= '9'; c++)
        n = n > most ? n : n * 10 + (*c - '0');
    bool digits = c > value;
    int shift = *c == 'K' || *c == 'k'   ? 10
                : *c == 'M' || *c == 'm' ? 20
                : *c == 'G' || *c == 'g' ? 30
                                         : 0;
    if (shift > 0) c++;
    if (*c == 'B') c++;
    if (!digits || *c != '\0')
        return lb_args_usage_error("comm", "option %s expects a size in bytes (%s), got '%s'",
                                   option, SIZE_FORMS, value);
    if (n > most >> shift)
        return lb_args_usage_error("comm", "option %s must be at most %dG, got '%s'", option,
                                   SIZE_MOST_G, value);
    *bytes = n << shift;
    return LB_OK;
}

typedef struct {
    lb_boot *boot;
    lb_commbench_params params;
} comm_ctx;

static lb_status work(void *ctx, lb_result *r, lb_err *err) {
    comm_ctx *c = ctx;
    return lb_commbench_run(c->boot, &c->params, r, err);
}

typedef struct {
    int last_coll;
    int n_ranks;
} printer;

static void print_cell(const lb_bench_cell *c) {
    if (!c->ran) {
        printf("  %7s  %6s  %6s  %6s", "N/A", "N/A", "N/A", "N/A");
        return;
    }
    char wrong[24];
    if (c->wrong < 0)
        snprintf(wrong, sizeof wrong, "N/A");
    else
        snprintf(wrong, sizeof wrong, "%lld", (long long)c->wrong);
    printf("  %7.*f  %6.2f  %6.2f  %6s", c->time_us < 10000 ? 2 : 1, c->time_us, c->algbw_gbps,
           c->busbw_gbps, wrong);
}

static void print_row(void *ctx, const lb_bench_row *row) {
    printer *pr = ctx;
    if ((int)row->coll != pr->last_coll) {
        pr->last_coll = (int)row->coll;
        printf("#\n# Collective: %s\n", lb_commbench_coll_name(row->coll));
        printf("#%51s  %-31s  %-31s  %s\n", "", "           out-of-place", "             in-place",
               "     out-of-place       in-place");
        printf("#%11s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %7s  "
               "%7s  %7s\n",
               "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time",
               "algbw", "busbw", "#wrong", "p50", "p99", "p50", "p99");
        printf("#%11s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %7s  "
               "%7s  %7s\n",
               "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
               "(GB/s)", "", "(us)", "(us)", "(us)", "(us)");
    }
    bool reduces = row->coll == LB_BENCH_ALL_REDUCE || row->coll == LB_BENCH_REDUCE ||
                   row->coll == LB_BENCH_REDUCE_SCATTER;
    bool rooted = row->coll == LB_BENCH_BROADCAST || row->coll == LB_BENCH_REDUCE;
    printf("%12zu  %12zu  %8s  %6s  %6d", row->bytes, row->count, lb_comm_dtype_name(row->dtype),
           reduces ? lb_comm_op_name(row->op) : "none", rooted ? row->root : -1);
    print_cell(&row->oop);
    print_cell(&row->ip);
    const lb_bench_cell *cells[2] = {&row->oop, &row->ip};
    for (int k = 0; k < 2; k++) {
        if (cells[k]->ran)
            printf("  %7.2f  %7.2f", cells[k]->p50_us, cells[k]->p99_us);
        else
            printf("  %7s  %7s", "N/A", "N/A");
    }
    printf("\n");
    fflush(stdout);
}

/* The pair matrix from r's metrics: each pair's GB/s (receiver's clock) and its link; nothing
 * when it was not measured (a run interrupted or failed before it). */
static void print_matrix(const lb_result *r) {
    if (isnan(lb_result_metric(r, "matrix.0.0.nvlinks"))) return;
    char name[64];
    int n;
    for (n = 1;; n++) {
        snprintf(name, sizeof name, "matrix.%d.0.nvlinks", n);
        if (isnan(lb_result_metric(r, name))) break;
    }
    printf("# send/recv of each pair, GB/s (link: NVn = n NVLinks, PCIe, net = another host, ? = "
           "no GPU or no NVML)\n");
    printf("# %8s", "from\\to");
    for (int b = 0; b < n; b++)
        printf("  %14d", b);
    printf("\n");
    for (int a = 0; a < n; a++) {
        printf("# %8d", a);
        for (int b = 0; b < n; b++) {
            if (a == b) {
                printf("  %14s", "-");
                continue;
            }
            snprintf(name, sizeof name, "matrix.%d.%d.gbps", a, b);
            double gbps = lb_result_metric(r, name);
            snprintf(name, sizeof name, "matrix.%d.%d.nvlinks", a, b);
            double links = lb_result_metric(r, name);
            char link[16];
            if (links > 0)
                snprintf(link, sizeof link, "NV%.0f", links);
            else
                snprintf(link, sizeof link, "%s", links == 0 ? "PCIe" : links == -2 ? "net" : "?");
            printf("  %8.1f %5s", gbps, link);
        }
        printf("\n");
    }
}

/* This rank's options that every rank must share, one "OPTION VALUE" a line, values as
 * parsed (-b 1K and -b 1024 agree). --setup-timeout, --db and the output options are rank 0's
 * or the rank's own. */
static void options_text(const lb_commbench_params *p, const char *backend, char *buf, size_t cap) {
    char colls[256] = "", matrix[32] = "(none)";
    size_t used = 0;
    for (int k = 0; k < LB_BENCH_N_COLLS && used < sizeof colls; k++)
        if (p->colls[k])
            used += (size_t)snprintf(colls + used, sizeof colls - used, "%s%s", used ? "," : "",
                                     lb_commbench_coll_name((lb_bench_coll)k));
    if (p->matrix) snprintf(matrix, sizeof matrix, "%lld", (long long)p->matrix_bytes);
    const char *place = p->place == LB_PLACE_OUT_OF_PLACE ? "out"
                        : p->place == LB_PLACE_IN_PLACE   ? "in"
                                                          : "both";
    snprintf(buf, cap,
             "collectives %s\n-b %lld\n-e %lld\n-f %.17g\n-d %s\n-o %s\n-r %d\n-w %lld\n"
             "-n %lld\n-c %d\n--place %s\n--backend %s\n--matrix %s\n--comm-timeout %.17g\n",
             colls, (long long)p->min_bytes, (long long)p->max_bytes, p->factor,
             lb_comm_dtype_name(p->dtype), lb_comm_op_name(p->op), p->root, (long long)p->warmup,
             (long long)p->iters, p->check ? 1 : 0, place, backend, matrix, p->comm.op_timeout_s);
}

/* Rank 0: the first line of theirs that differs from mine (options_text's), as a sentence. */
static lb_status judge_options(const char *mine, const char *theirs, int rank, lb_err *err) {
    const char *b = theirs;
    for (const char *a = mine; *a != '\0'; a += strcspn(a, "\n") + 1) {
        size_t la = strcspn(a, "\n"), lb = strcspn(b, "\n");
        if (la != lb || memcmp(a, b, la) != 0)
            return lb_fail(err, LB_ERR_USAGE,
                           "rank %d was started with %.*s where rank 0 has %.*s: every rank needs "
                           "the same options",
                           rank, (int)lb, b, (int)la, a);
        b += b[lb] == '\n' ? lb + 1 : lb;
    }
    if (*b != '\0') /* a line rank 0 lacks: another build of llmbench */
        return lb_fail(err, LB_ERR_USAGE,
                       "rank %d was started with %.*s, an option rank 0 does not have: every "
                       "rank needs the same llmbench and options",
                       rank, (int)strcspn(b, "\n"), b);
    return LB_OK;
}

/* lb_boot_judge: the first rank whose options differ from rank 0's. */
static lb_status judge_ranks_options(char *const *all, int n, void *ctx, lb_err *err) {
    (void)ctx;
    for (int q = 1; q < n; q++)
        LB_TRY(judge_options(all[0], all[q], q, err));
    return LB_OK;
}

/* Every rank runs the same rows with the same calls, or the collectives of one row meet
 * another's and the job waits until --comm-timeout, then blames a rank that did nothing
 * wrong: rank 0 compares every rank's options with its own before anything runs, and the
 * first that differs stops every rank, named with its value on both ranks. */
static lb_status agree_options(lb_boot *boot, const char *mine, lb_err *err) {
    if (lb_boot_size(boot) == 1) return LB_OK;
    return lb_boot_agree(boot, mine, judge_ranks_options, NULL, err);
}

int lb_cmd_comm(int argc, char **argv) {
    const char *min_s = "8", *max_s = "128M", *dtype_s = "float", *op_s = "sum";
    const char *place_s = "both", *backend_s = "auto", *matrix_s = NULL;
    int64_t root = 0, warmup = 5, iters = 20, check = 1, gpus = 0;
    double factor = 2, comm_timeout = 300, setup_timeout = 120;
    const lb_arg_spec specs[] = {
        {"-b", LB_ARG_STRING, &min_s, "SIZE",
         "smallest size in bytes: digits, then optionally K, M or G (x1024), then optionally B "
         "(default 8)"},
        {"-e", LB_ARG_STRING, &max_s, "SIZE", "largest size (default 128M)"},
        {"-f", LB_ARG_DOUBLE, &factor, "F", "size factor between rows (default 2)", 1, 1024},
        {"-d", LB_ARG_CHOICE, &dtype_s, NULL, "element type (default float)", 0, 0,
         LB_COMM_DTYPE_CHOICES "|fp32|fp16|bf16|fp64"},
        {"-o", LB_ARG_CHOICE, &op_s, NULL, "reduction (default sum)", 0, 0, LB_COMM_OP_CHOICES},
        {"-r", LB_ARG_INT, &root, "R", "root of broadcast and reduce (default 0)", 0, 1 << 20},
        {"-w", LB_ARG_INT, &warmup, "W", "warm-up calls per size (default 5)", 0, 1e6},
        {"-n", LB_ARG_INT, &iters, "N", "timed calls per size (default 20)", 1, 1e6},
        {"-c", LB_ARG_INT, &check, "0|1", "check every element of one more call (default 1)", 0, 1},
        {"--place", LB_ARG_CHOICE, &place_s, NULL, "out-of-place, in-place or both (default both)",
         0, 0, "both|out|in"},
        {"--backend", LB_ARG_CHOICE, &backend_s, NULL,
         "nccl (device buffers), mpi (host buffers), auto: nccl when a rank has a GPU", 0, 0,
         "auto|nccl|mpi"},
        {"--gpus", LB_ARG_INT, &gpus, "N",
         "start N local workers, one per GPU (default: the launcher's ranks)", 1, 4096},
        {"--comm-timeout", LB_ARG_DOUBLE, &comm_timeout, "S",
         "deadline of each collective before the job is aborted (default 300)", 0.1, 1e6},
        {"--setup-timeout", LB_ARG_DOUBLE, &setup_timeout, "S",
         "deadline of the rendezvous and communicator creation (default 120)", 0.1, 1e6},
        {"--matrix", LB_ARG_STRING, &matrix_s, "SIZE",
         "also time each ordered pair of ranks sending SIZE bytes, with NVML's link of each pair"},
    };
    const lb_cli_command cmd = {
        .command = "comm",
        .uses_db = true,
        .usage = "[COLLECTIVE ...] [options]",
        .summary =
            "Collective bandwidth and correctness, the nccl-tests job: for each COLLECTIVE "
            "(all_reduce, all_gather, reduce_scatter, broadcast, reduce, alltoall, sendrecv; "
            "default all_reduce; 'all' for every one) and each size from -b to -e by -f, the "
            "time, algbw and busbw (nccl-tests' factors), #wrong (every element checked) and "
            "the p50/p99 of the timed calls, out-of-place and in-place, in nccl-tests' columns "
            "(all_gather, reduce_scatter and alltoall from one element per rank up). "
            "Runs on every rank of an mpirun, srun or torchrun job, or on N local GPUs with "
            "--gpus N. Rank 0 prints and stores one run holding every rank's times. Exit status: "
            "0 every row ran and no element was wrong, 1 failed (#wrong above 0 on any row, a "
            "rank's error, a collective past --comm-timeout), 2 bad usage (ranks started with "
            "different options included), 130 interrupted.",
        LB_ARG_SPECS(specs),
        .min_positional = 0,
        .max_positional = LB_BENCH_N_COLLS + 1,
    };
    lb_args a;
    int rc = lb_args_parse(&cmd, argc, argv, &a);
    if (rc != LB_ARGS_GO_ON) return rc;

    comm_ctx ctx = {.params = lb_commbench_default_params()};
    lb_commbench_params *p = &ctx.params;
    if (a.n_pos > 0) p->colls[LB_BENCH_ALL_REDUCE] = false;
    bool all = false;
    for (int i = 0; i < a.n_pos; i++) {
        lb_bench_coll c;
        if (strcmp(a.pos[i], "all") == 0) {
            all = true;
            for (int k = 0; k < LB_BENCH_N_COLLS; k++)
                p->colls[k] = true;
        } else if (lb_commbench_coll_parse(a.pos[i], &c) == 0) {
            p->colls[c] = true;
        } else {
            return lb_status_exit_code(lb_args_usage_error(
                "comm",
                "unknown collective '%s' (expected all_reduce, all_gather, reduce_scatter, "
                "broadcast, reduce, alltoall, sendrecv or all)",
                a.pos[i]));
        }
    }
    lb_status st = parse_size("-b", min_s, &p->min_bytes);
    if (st == LB_OK) st = parse_size("-e", max_s, &p->max_bytes);
    if (st == LB_OK && matrix_s != NULL) {
        p->matrix = true;
        st = parse_size("--matrix", matrix_s, &p->matrix_bytes);
    }
    if (st != LB_OK) return lb_status_exit_code(st);
    lb_comm_dtype_parse(dtype_s, &p->dtype);
    lb_comm_op_parse(op_s, &p->op);
    p->factor = factor;
    p->root = (int)root;
    p->warmup = warmup;
    p->iters = iters;
    p->check = check != 0;
    p->place = strcmp(place_s, "out") == 0  ? LB_PLACE_OUT_OF_PLACE
               : strcmp(place_s, "in") == 0 ? LB_PLACE_IN_PLACE
                                            : LB_PLACE_BOTH;
    /* 'all' in place: every collective that has an in-place form */
    if (all && p->place == LB_PLACE_IN_PLACE) p->colls[LB_BENCH_SENDRECV] = false;
    p->comm.op_timeout_s = comm_timeout;
    p->comm.setup_timeout_s = setup_timeout;
    lb_err err = {{0}};
    if (lb_commbench_validate(p, &err) != LB_OK)
        return lb_status_exit_code(lb_args_usage_error("comm", "%s", err.msg));

    if (gpus > 0 && !lb_cli_is_worker())
        /* main passes argv + 1: argv - 1 is the program's whole command line */
        return lb_cli_run_workers("comm", gpus, argv - 1, -1, comm_timeout + 5);

    st = lb_boot_init(setup_timeout, &ctx.boot, &err);
    if (st != LB_OK) {
        fprintf(stderr, "llmbench comm: %s\n", err.msg);
        return lb_status_exit_code(st);
    }
    int rank = lb_boot_rank(ctx.boot);
    char options[1024];
    options_text(p, backend_s, options, sizeof options);
    st = agree_options(ctx.boot, options, &err);
    /* refusals every rank reaches alike, before anything is stored */
    lb_comm_backend usable = LB_COMM_BACKEND_MPI;
    if (st == LB_OK) st = lb_comm_pick_backend(ctx.boot, &usable, &err);
    p->comm.backend = strcmp(backend_s, "auto") == 0   ? usable
                      : strcmp(backend_s, "nccl") == 0 ? LB_COMM_BACKEND_NCCL
                                                       : LB_COMM_BACKEND_MPI;
    if (st == LB_OK && p->comm.backend == LB_COMM_BACKEND_NCCL && usable != LB_COMM_BACKEND_NCCL)
        st = lb_fail(&err, LB_ERR_USAGE,
                     "--backend nccl: no rank sees a GPU%s; use --backend mpi under mpirun",
                     lb_comm_backend_built(LB_COMM_BACKEND_NCCL)
                         ? ""
                         : " (this llmbench was built without NCCL)");
    else if (st == LB_OK && p->comm.backend == LB_COMM_BACKEND_MPI &&
             lb_boot_source_of(ctx.boot) != LB_BOOT_MPI)
        st = lb_fail(&err, LB_ERR_USAGE,
                     "no GPU here, and the MPI backend (host buffers) needs ranks started by "
                     "mpirun or srun --mpi=pmix: run `mpirun -np N llmbench comm ...`");
    int members = 0;
    if (st == LB_OK) st = lb_commbench_members(ctx.boot, p, NULL, &members, &err);
    if (st == LB_OK) st = lb_commbench_validate_ranks(p, members, &err);
    if (st == LB_OK && lb_boot_size(ctx.boot) > 1) {
        /* the results database rank 0 will write, checked now: a path it cannot use stops
         * every rank here, not rank 0 alone while the others wait for it in the benchmark */
        int32_t opened = 1;
        if (rank == 0) {
            st = lb_store_check_path(a.common.db_path, &err);
            opened = st == LB_OK;
        }
        lb_status sent = lb_boot_bcast(ctx.boot, &opened, sizeof opened, &err);
        if (st == LB_OK) st = sent;
        if (st == LB_OK && !opened) /* a rank other than 0: rank 0 says why */
            st = lb_fail(&err, LB_ERR_USAGE, "rank 0 cannot open the results database");
    }
    if (st != LB_OK) {
        if (rank == 0 || st != LB_ERR_USAGE) fprintf(stderr, "llmbench comm: %s\n", err.msg);
        lb_boot_free(ctx.boot);
        return lb_status_exit_code(st);
    }

    printer pr = {.last_coll = -1, .n_ranks = lb_boot_size(ctx.boot)};
    if (rank == 0 && !a.common.json) {
        p->on_row = print_row;
        p->on_row_ctx = &pr;
        printf("# llmbench comm: %d rank(s) started by %s, backend %s, %s %s, warm-up %lld, "
               "iterations %lld\n",
               lb_boot_size(ctx.boot), lb_boot_source_name(lb_boot_source_of(ctx.boot)),
               lb_comm_backend_name(p->comm.backend), lb_comm_dtype_name(p->dtype),
               lb_comm_op_name(p->op), (long long)warmup, (long long)iters);
    }
    lb_result *r = NULL;
    int64_t run_id = -1;
    if (st == LB_OK && rank == 0) {
        char name[128];
        snprintf(name, sizeof name, "comm-%s-%s-%dranks", lb_comm_backend_name(p->comm.backend),
                 lb_comm_dtype_name(p->dtype), lb_boot_size(ctx.boot));
        r = lb_result_new("comm", name);
        if (r == NULL)
            st = lb_fail(&err, LB_ERR_NOMEM, "out of memory");
        else
            st = lb_runctl_run(&a.common, argc + 1, argv - 1, r, work, &ctx, &run_id, &err);
    } else if (st == LB_OK) {
        st = lb_commbench_run(ctx.boot, p, NULL, &err);
    }
    if (rank == 0 && r != NULL) {
        if (a.common.json) {
            lb_output_result_json(stdout, r, run_id);
        } else if (r->n_metrics > 0) {
            double wrong = lb_result_metric(r, "wrong_total");
            if (!p->check)
                printf("# Out of bounds values : N/A (-c 0: not checked)\n");
            else
                printf("# Out of bounds values : %.0f %s\n", isnan(wrong) ? 0 : wrong,
                       wrong > 0 ? "FAILED" : "OK");
            printf("# Avg bus bandwidth    : %g\n#\n", lb_result_metric(r, "avg_busbw"));
            if (p->matrix) print_matrix(r);
        }
    }
    /* an interrupted job says why once, on rank 0 (every rank stopped at the same row) */
    if (st != LB_OK && (st != LB_ERR_INTERRUPTED || rank == 0))
        fprintf(stderr, "llmbench comm: rank %d: %s\n", rank, err.msg);
    lb_result_free(r);
    fflush(stdout);
    lb_boot_free(ctx.boot);
    return lb_status_exit_code(st);
}
