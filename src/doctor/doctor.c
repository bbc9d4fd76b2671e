/* doctor.c: facts across ranks, the all_reduce check and the ladder (doctor.h).
 *
 * Rank 0 drives the climb; before each probe the ranks agree whether a signal reached any
 * of them, rank 0 sends every rank the rung (a fixed-size struct) over the control plane,
 * each rank with a GPU starts its worker with that environment, and rank 0 gathers each
 * rank's outcome (with whether a signal came during it). The probe workers form their own
 * job through the torchrun variables: rank 0 of it runs where the first rank with a GPU
 * runs (127.0.0.1 when every rank shares one host). */
#include "doctor/doctor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm.h"
#include "comm/launch.h"
#include "commbench/commbench.h"
#include "core/clock.h"
#include "core/progress.h"
#include "core/signals.h"
#include "doctor/facts.h"
#include "gpu/devinfo.h"

lb_doctor_params lb_doctor_default_params(void) {
    return (lb_doctor_params){
        .setup_timeout_s = 20, .op_timeout_s = 10, .probe_bytes = 32 << 20, .progress = true};
}

double lb_doctor_probe_deadline_s(const lb_doctor_params *p) {
    return 3 * p->setup_timeout_s + 2 * p->op_timeout_s + 30;
}

double lb_doctor_good_gbps(const json_t *facts, bool multi_node, int gpus) {
    if (gpus < 2) return 0;
    double best = 0;
    size_t i;
    json_t *o;
    if (multi_node) {
        json_array_foreach(json_object_get(facts, "net"), i, o) {
            if (json_is_true(json_object_get(o, "loopback"))) continue;
            best = fmax(best, (double)json_integer_value(json_object_get(o, "speed_mbps")) / 8000);
        }
        json_array_foreach(json_object_get(facts, "ib"), i, o) {
            const char *rate = json_string_value(json_object_get(o, "rate"));
            if (rate != NULL) best = fmax(best, atof(rate) / 8); /* "200 Gb/sec (4X HDR)" */
        }
        return best / 10;
    }
    double slowest = INFINITY;
    json_array_foreach(json_object_get(facts, "gpus"), i, o) {
        size_t links = json_array_size(json_object_get(o, "nvlinks"));
        const json_t *pcie = json_object_get(o, "pcie");
        double gbps = 0;
        if (links > 0)
            gbps = 25.0 * (double)links;
        else if (pcie != NULL) {
            /* per lane after encoding: gen3 0.985, gen4 1.97, gen5 3.94 GB/s; the current
             * generation of an idle GPU is often gen1 */
            json_int_t gen = json_integer_value(json_object_get(pcie, "max_gen"));
            json_int_t width = json_integer_value(json_object_get(pcie, "max_width"));
            if (gen <= 0) gen = json_integer_value(json_object_get(pcie, "gen"));
            if (width <= 0) width = json_integer_value(json_object_get(pcie, "width"));
            gbps = 0.985 * pow(2, (double)gen - 3) * (double)width;
        }
        if (gbps > 0) slowest = fmin(slowest, gbps);
    }
    return isfinite(slowest) ? slowest / 10 : 0;
}

int lb_doctor_probe_ranks(json_t *const *facts, int n, int32_t *probe_rank) {
    int k = 0;
    for (int r = 0; r < n; r++)
        probe_rank[r] =
            json_integer_value(json_object_get(facts[r], "cuda_devices")) > 0 ? k++ : -1;
    return k;
}

json_t *lb_doctor_ladder_facts(json_t *const *facts, int n, int ref) {
    json_t *out = json_copy(facts[ref]);
    json_t *problems = json_array();
    for (int r = 0; r < n; r++)
        if (json_integer_value(json_object_get(facts[r], "cuda_devices")) > 0)
            json_array_extend(problems, json_object_get(facts[r], "env_problems"));
    json_object_set_new(out, "env_problems", problems);
    return out;
}

/* ---- the probe worker ---- */

lb_status lb_doctor_probe_worker(lb_boot *boot, const lb_doctor_params *p, lb_err *err) {
    lb_commbench_params b = lb_commbench_default_params();
    b.min_bytes = b.max_bytes = p->probe_bytes;
    b.warmup = 3;
    b.iters = 10;
    b.place = LB_PLACE_OUT_OF_PLACE;
    b.comm.backend = LB_COMM_BACKEND_NCCL;
    b.comm.setup_timeout_s = p->setup_timeout_s;
    b.comm.op_timeout_s = p->op_timeout_s;
    lb_result *r = lb_boot_rank(boot) == 0 ? lb_result_new("comm", "doctor-probe") : NULL;
    lb_status st = lb_commbench_run(boot, &b, r, err);
    if (r != NULL) {
        char name[64];
        snprintf(name, sizeof name, "all_reduce.%lld.oop.busbw", (long long)p->probe_bytes);
        json_t *line = json_pack("{s:b, s:f, s:s}", "ok", st == LB_OK, "busbw_gbps",
                                 st == LB_OK ? lb_result_metric(r, name) : 0.0, "error",
                                 st == LB_OK ? "" : err->msg);
        char *text = json_dumps(line, JSON_COMPACT);
        printf("%s\n", text);
        fflush(stdout);
        free(text);
        json_decref(line);
        lb_result_free(r);
    }
    return st;
}

bool lb_doctor_read_probe(FILE *f, lb_doctor_probe *out) {
    char *line = NULL;
    size_t cap = 0;
    bool found = false;
    while (getline(&line, &cap, f) >= 0) {
        if (line[0] != '{') continue;
        json_t *j = json_loads(line, JSON_DISABLE_EOF_CHECK, NULL);
        if (json_is_boolean(json_object_get(j, "ok"))) {
            out->ok = json_is_true(json_object_get(j, "ok"));
            out->busbw_gbps = json_number_value(json_object_get(j, "busbw_gbps"));
            snprintf(out->error, sizeof out->error, "%s",
                     json_string_value(json_object_get(j, "error")) ?: "");
            found = true;
        }
        json_decref(j);
    }
    free(line);
    return found;
}

/* ---- probes from the ladder ---- */

typedef struct {
    lb_boot *boot;
    const lb_doctor_params *p;
    int first_gpu_rank, gpu_ranks; /* multi-rank jobs: who starts a worker */
    int probe_rank;                /* this rank's rank in the probe job (-1: no GPU) */
    int local_gpus;
    char master[256];
    lb_progress prog; /* rank 0: the rung being probed (each may take up to its deadlines) */
    int tried;
} probe_ctx;

/* This rank's part of a probe (lb_doctor_part_fn): start the workers with the rung's
 * environment, wait. */
static bool probe_here(void *ctx, const lb_doctor_rung *rung, int port, lb_doctor_probe *res,
                       int *code) {
    probe_ctx *c = ctx;
    if (lb_boot_rank(c->boot) == 0)
        lb_progress_update(&c->prog, true, "doctor: probe %d, %s", ++c->tried, rung->name);
    bool single = lb_boot_size(c->boot) == 1;
    if (!single && c->local_gpus == 0) return false;
    char *env[LB_RUNG_MAX_CHANGES + 2];
    int ne = 0;
    env[ne++] = "LLMBENCH_WORKER=1";
    for (int i = 0; i < rung->n_set; i++)
        env[ne++] = (char *)rung->set[i];
    env[ne] = NULL;
    const char *unset[LB_RUNG_MAX_CHANGES + 1];
    int nu = 0;
    for (int i = 0; i < rung->n_unset; i++)
        if (rung->unset[i][0] != '\0') unset[nu++] = rung->unset[i];
    unset[nu] = NULL;
    char setup[32], op[32], bytes[32];
    snprintf(setup, sizeof setup, "%g", c->p->setup_timeout_s);
    snprintf(op, sizeof op, "%g", c->p->op_timeout_s);
    snprintf(bytes, sizeof bytes, "%lld", (long long)c->p->probe_bytes);
    char *argv[] = {
        "llmbench",      "doctor", "--probe", "--setup-timeout", setup, "--comm-timeout", op,
        "--probe-bytes", bytes,    NULL};
    char path[] = "/tmp/llmbench-probe-XXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0) unlink(path);
    lb_launch_params lp = {
        .n = single ? (c->local_gpus > 0 ? c->local_gpus : 1) : 1,
        .argv = argv,
        .env = (const char *const *)env,
        .unset = unset,
        .rank0_stdout = fd,
        .grace_s = 2,
        .deadline_s = lb_doctor_probe_deadline_s(c->p),
        .first_rank = single ? 0 : c->probe_rank,
        .world = single ? 0 : c->gpu_ranks,
        .master_addr = c->master,
        .master_port = port,
    };
    lb_err err = {{0}};
    int64_t t0 = lb_clock_now_ns();
    *code = lb_launch_local(&lp, &err);
    res->seconds = (double)(lb_clock_now_ns() - t0) / 1e9;
    FILE *f = fd >= 0 ? fdopen(fd, "r") : NULL;
    if (f != NULL) {
        rewind(f);
        if (lb_doctor_read_probe(f, res)) res->ok = res->ok && *code == 0;
        fclose(f);
    } else if (fd >= 0) {
        close(fd);
    }
    /* not started, or overran its deadline (after its line, perhaps): the launcher's reason */
    if (*code < 0) snprintf(res->error, sizeof res->error, "%s", err.msg);
    if (!res->ok && res->error[0] == '\0')
        snprintf(res->error, sizeof res->error,
                 "the probe workers ended with exit code %d before reporting", *code);
    return true;
}

/* ---- the climb across ranks ---- */

/* What a rank tells rank 0 after its part of a probe. */
typedef struct {
    int32_t started, code, interrupted;
    lb_doctor_probe result;
} part_msg;

/* What rank 0 sends before each probe: the rung, the end of the climb, or that a signal
 * reached rank `stop` (then every rank stops). */
typedef struct {
    int32_t go, port, stop;
    lb_doctor_rung rung;
} probe_cmd;

typedef struct {
    lb_boot *boot;
    int result_rank;
    lb_doctor_part_fn part;
    void *ctx;
    int stopped_by; /* rank 0: a rank whose signal a probe's gather reported, -1 */
    bool told_end;  /* rank 0: the others know the climb is over */
} across;

/* LB_ERR_INTERRUPTED before or during (when) the probe of rung, naming the rank the signal
 * reached when there are several. */
static lb_status interrupted(const across *a, int who, const char *when, const lb_doctor_rung *rung,
                             lb_err *err) {
    if (lb_boot_size(a->boot) > 1)
        return lb_fail(err, LB_ERR_INTERRUPTED,
                       "interrupted (a signal reached rank %d) %s the probe of \"%s\"", who, when,
                       rung->name);
    return lb_fail(err, LB_ERR_INTERRUPTED, "interrupted %s the probe of \"%s\"", when, rung->name);
}

/* Every rank, before each probe and at the end of the climb: whether a signal reached any
 * rank (agreed as commbench does before each row, and from the last probe's gather), then
 * rank 0's word (cmd, on rank 0 filled here but for the rung). */
static lb_status agree_next(across *a, probe_cmd *cmd, lb_err *err) {
    int who = -1;
    LB_TRY(lb_boot_agree_stop(a->boot, lb_signals_interrupted(), &who, err));
    if (lb_boot_rank(a->boot) == 0) {
        cmd->stop = who >= 0 ? who : a->stopped_by;
        if (cmd->stop >= 0) cmd->go = 0;
        if (cmd->go) cmd->port = lb_launch_free_port();
    }
    LB_TRY(lb_boot_bcast(a->boot, cmd, sizeof *cmd, err));
    if (cmd->stop >= 0 || !cmd->go) a->told_end = true;
    if (cmd->stop >= 0)
        return lb_fail(err, LB_ERR_INTERRUPTED,
                       "interrupted (a signal reached rank %d): the climb stopped", cmd->stop);
    return LB_OK;
}

/* This rank's part of the probe of cmd's rung; all parts into all on rank 0. */
static lb_status probe_part(across *a, const probe_cmd *cmd, part_msg *all, lb_err *err) {
    part_msg mine = {0};
    mine.started = a->part(a->ctx, &cmd->rung, cmd->port, &mine.result, &mine.code);
    mine.interrupted = lb_signals_interrupted();
    return lb_boot_gather(a->boot, &mine, sizeof mine, all, err);
}

/* Rank 0's probe (lb_doctor_probe_fn): every rank's part, the probe failed where any
 * rank's workers failed; a signal on any rank before or during it stops the climb. */
static lb_status probe_all(void *ctx, const lb_doctor_rung *rung, lb_doctor_probe *out,
                           lb_err *err) {
    across *a = ctx;
    probe_cmd cmd = {.go = 1, .rung = *rung};
    lb_status st = agree_next(a, &cmd, err);
    if (st == LB_ERR_INTERRUPTED) return interrupted(a, cmd.stop, "before", rung, err);
    LB_TRY(st);
    int n = lb_boot_size(a->boot);
    part_msg *all = calloc((size_t)n, sizeof *all);
    if (all == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of memory");
    st = probe_part(a, &cmd, all, err);
    for (int r = 0; r < n && st == LB_OK && a->stopped_by < 0; r++)
        if (all[r].interrupted) a->stopped_by = r;
    if (st == LB_OK && a->stopped_by >= 0) st = interrupted(a, a->stopped_by, "during", rung, err);
    if (st == LB_OK) {
        *out = all[a->result_rank].result;
        for (int r = 0; r < n && out->ok; r++)
            if (all[r].started && all[r].code < 0) {
                out->ok = false;
                snprintf(out->error, sizeof out->error, "rank %d: %.480s", r, all[r].result.error);
            } else if (all[r].started && all[r].code != 0) {
                out->ok = false;
                snprintf(out->error, sizeof out->error, "rank %d's probe worker ended with code %d",
                         r, all[r].code);
            }
    }
    free(all);
    return st;
}

/* A rank other than 0: each rung's part, until rank 0's word says the climb ended. */
static lb_status follow(across *a, lb_err *err) {
    for (;;) {
        probe_cmd cmd;
        LB_TRY(agree_next(a, &cmd, err));
        if (!cmd.go) return LB_OK;
        LB_TRY(probe_part(a, &cmd, NULL, err));
    }
}

lb_status lb_doctor_climb_across(lb_boot *boot, int result_rank, lb_doctor_part_fn part, void *ctx,
                                 double part_s, const lb_doctor_rung *rungs, int n,
                                 double good_gbps, lb_doctor_probe *results, int *chosen,
                                 lb_doctor_verdict *verdict, lb_err *err) {
    across a = {
        .boot = boot, .result_rank = result_rank, .part = part, .ctx = ctx, .stopped_by = -1};
    /* every rank waits at each gather and word for the slowest part */
    const double control_s = lb_boot_timeout_s(boot);
    lb_boot_set_timeout_s(boot, control_s + part_s);
    if (lb_boot_rank(boot) != 0) {
        lb_status st = follow(&a, err);
        lb_boot_set_timeout_s(boot, control_s);
        return st;
    }
    lb_status st =
        lb_doctor_climb(rungs, n, good_gbps, probe_all, &a, results, chosen, verdict, err);
    /* the others wait for the next word: the end, or that a signal stopped the climb */
    if (!a.told_end) {
        probe_cmd done = {.go = 0};
        lb_err end_err = {{0}};
        lb_status end = agree_next(&a, &done, &end_err);
        if (st == LB_OK && end != LB_OK) st = lb_fail(err, end, "%s", end_err.msg);
    }
    if (st == LB_ERR_INTERRUPTED) *chosen = -1; /* nothing judged */
    lb_boot_set_timeout_s(boot, control_s);
    return st;
}

/* ---- the check without GPUs: an all_reduce over MPI ---- */

static json_t *mpi_check(lb_boot *boot, const lb_doctor_params *p, lb_err *err, lb_status *st) {
    lb_comm_params cp = lb_comm_default_params();
    cp.backend = LB_COMM_BACKEND_MPI;
    cp.op_timeout_s = p->op_timeout_s;
    lb_comm *c = NULL;
    int64_t t0 = lb_clock_now_ns();
    *st = lb_comm_init(boot, &cp, true, &c, err);
    int32_t mine = lb_boot_rank(boot) + 1, sum = 0;
    if (*st == LB_OK)
        *st = lb_comm_all_reduce(c, &mine, &sum, 1, LB_COMM_INT32, LB_COMM_SUM, NULL, err);
    int n = lb_boot_size(boot);
    bool ok = *st == LB_OK && sum == n * (n + 1) / 2;
    json_t *out = json_pack("{s:s, s:b, s:f, s:s}", "how", "mpi all_reduce (no GPU)", "ok", ok,
                            "seconds", (double)(lb_clock_now_ns() - t0) / 1e9, "error",
                            *st == LB_OK ? (ok ? "" : "wrong sum") : err->msg);
    lb_comm_free(c);
    return out;
}

static const char *verdict_name(lb_doctor_verdict v) {
    static const char *const names[] = {"works as found", "works with a changed setting",
                                        "works only slowly", "nothing works"};
    return names[v];
}

lb_status lb_doctor_run(lb_boot *boot, const lb_doctor_params *p, json_t **report,
                        lb_doctor_verdict *verdict, lb_err *err) {
    *report = NULL;
    int me = lb_boot_rank(boot), n = lb_boot_size(boot);
    int64_t t0 = lb_clock_now_ns();
    json_t *facts = lb_doctor_node_facts();
    int local_gpus = lb_devinfo_cuda_device_count();
    json_object_set_new(facts, "cuda_devices", json_integer(local_gpus));
    char *text = json_dumps(facts, JSON_COMPACT);
    char **all = NULL;
    lb_status st = lb_boot_gather_text(boot, text ? text : "{}", &all, err);
    free(text);
    json_decref(facts);
    if (st != LB_OK) return st;

    /* who has GPUs, each one's rank in the probe job, and where its rank 0 runs */
    probe_ctx c = {.boot = boot, .p = p, .first_gpu_rank = -1, .local_gpus = local_gpus};
    json_t *ranks = json_array();
    json_t **fv = me == 0 ? calloc((size_t)n, sizeof *fv) : NULL; /* borrowed from ranks */
    int32_t *probe_rank = calloc((size_t)n, sizeof *probe_rank);
    char hosts_differ = 0;
    if (probe_rank == NULL || (me == 0 && fv == NULL)) {
        lb_boot_strings_free(all, me == 0 ? n : 0);
        json_decref(ranks);
        free(fv);
        free(probe_rank);
        return lb_fail(err, LB_ERR_NOMEM, "out of memory");
    }
    if (me == 0) {
        for (int r = 0; r < n; r++) {
            json_t *f = json_loads(all[r], 0, NULL);
            json_array_append_new(ranks, f ? f : json_object());
            fv[r] = json_array_get(ranks, (size_t)r);
        }
        lb_doctor_probe_ranks(fv, n, probe_rank);
        const char *h0 = json_string_value(json_object_get(fv[0], "host"));
        for (int r = 0; r < n; r++) {
            const char *h = json_string_value(json_object_get(fv[r], "host"));
            if (h0 && h && strcmp(h0, h) != 0) hosts_differ = 1;
            if (probe_rank[r] == 0) snprintf(c.master, sizeof c.master, "%s", h ? h : "127.0.0.1");
        }
        if (!hosts_differ) snprintf(c.master, sizeof c.master, "127.0.0.1");
    }
    lb_boot_strings_free(all, me == 0 ? n : 0);
    st = lb_boot_bcast(boot, c.master, sizeof c.master, err);
    if (st == LB_OK) st = lb_boot_bcast(boot, probe_rank, (size_t)n * sizeof *probe_rank, err);
    if (st != LB_OK) {
        json_decref(ranks);
        free(fv);
        free(probe_rank);
        return st;
    }
    for (int r = 0; r < n; r++)
        if (probe_rank[r] >= 0) {
            if (c.first_gpu_rank < 0) c.first_gpu_rank = r;
            c.gpu_ranks++;
        }
    c.probe_rank = probe_rank[me];
    free(probe_rank);

    lb_doctor_verdict v = LB_DOCTOR_WORKS_AS_FOUND;
    json_t *check = NULL;
    if (c.first_gpu_rank < 0) {
        if (lb_boot_source_of(boot) == LB_BOOT_MPI && n > 1) {
            lb_status cst;
            check = mpi_check(boot, p, err, &cst);
            if (!json_is_true(json_object_get(check, "ok"))) v = LB_DOCTOR_BROKEN;
        } else {
            check = json_pack("{s:s, s:s}", "how", "none: no GPU, and no MPI ranks to check",
                              "verdict", "not checked");
        }
    } else if (me != 0) {
        int chosen;
        st = lb_doctor_climb_across(boot, c.first_gpu_rank, probe_here, &c,
                                    lb_doctor_probe_deadline_s(p), NULL, 0, 0, NULL, &chosen, &v,
                                    err);
    } else {
        json_t *f0 = json_array_get(ranks, (size_t)c.first_gpu_rank);
        json_t *lf = lb_doctor_ladder_facts(fv, n, c.first_gpu_rank);
        bool multi = hosts_differ;
        lb_doctor_rung rungs[LB_LADDER_MAX];
        lb_doctor_probe results[LB_LADDER_MAX];
        int nr = lb_doctor_ladder(lf, multi, rungs, LB_LADDER_MAX), chosen = -1;
        json_decref(lf);
        int gpus = n == 1 ? local_gpus : c.gpu_ranks;
        double good = lb_doctor_good_gbps(f0, multi, gpus);
        lb_progress_init(&c.prog, p->progress);
        st = lb_doctor_climb_across(boot, n == 1 ? 0 : c.first_gpu_rank, probe_here, &c,
                                    lb_doctor_probe_deadline_s(p), rungs, nr, good, results,
                                    &chosen, &v, err);
        lb_progress_done(&c.prog);
        json_t *tried = json_array();
        for (int i = 0; i < nr; i++) {
            char line[1024];
            lb_doctor_export_line(&rungs[i], line, sizeof line);
            json_t *o = json_pack("{s:s, s:s, s:b}", "name", rungs[i].name, "export", line, "ran",
                                  results[i].ran);
            if (results[i].ran) {
                json_object_set_new(o, "ok", json_boolean(results[i].ok));
                json_object_set_new(o, "busbw_gbps", json_real(results[i].busbw_gbps));
                json_object_set_new(o, "seconds", json_real(results[i].seconds));
                json_object_set_new(o, "error", json_string(results[i].error));
            }
            json_array_append_new(tried, o);
        }
        /* a climb that stopped (a signal, a rank lost) judged nothing */
        if (st != LB_OK) chosen = -1;
        char line[1024] = "";
        if (chosen >= 0) lb_doctor_export_line(&rungs[chosen], line, sizeof line);
        check = json_pack("{s:s, s:i, s:I, s:f, s:o, s:i, s:s, s:s}", "how", "nccl all_reduce",
                          "gpus", gpus, "bytes", (json_int_t)p->probe_bytes, "good_gbps", good,
                          "rungs", tried, "chosen", chosen, "verdict",
                          st == LB_OK ? verdict_name(v) : "not judged", "export", line);
        if (st != LB_OK) json_object_set_new(check, "error", json_string(err->msg));
    }
    if (me != 0) {
        json_decref(ranks);
        json_decref(check);
        return st;
    }
    json_t *problems = json_array();
    size_t i;
    json_t *f;
    json_array_foreach(ranks, i, f) {
        size_t k;
        json_t *pr;
        json_array_foreach(json_object_get(f, "env_problems"), k, pr) {
            char msg[1200];
            snprintf(msg, sizeof msg, "rank %zu (%s): %s", i,
                     json_string_value(json_object_get(f, "host")), json_string_value(pr));
            json_array_append_new(problems, json_string(msg));
        }
    }
    json_t *mismatches = lb_doctor_compare(fv, n);
    free(fv);
    if (check != NULL && json_object_get(check, "verdict") == NULL)
        json_object_set_new(check, "verdict", json_string(verdict_name(v)));
    *report = json_pack("{s:i, s:s, s:o, s:o, s:o, s:o, s:f}", "ranks_count", n, "launcher",
                        lb_boot_source_name(lb_boot_source_of(boot)), "ranks", ranks, "mismatches",
                        mismatches, "problems", problems, "check", check ? check : json_object(),
                        "seconds", (double)(lb_clock_now_ns() - t0) / 1e9);
    *verdict = v;
    return st;
}
