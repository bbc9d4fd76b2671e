/* cmd_load.c: `llmbench load`: MLPerf-style load against OpenAI-compatible servers.
 *
 * Turns options into lb_loadgen_params and a dataset, runs lb_loadgen_run, prints the
 * MLPerf-style summary (or JSON with --json), and with --out DIR writes summary.txt,
 * detail.json and, in accuracy mode, generated.jsonl. The progress line is drawn here
 * through core/progress.h. The API key is read from the environment variable named by
 * --api-key-env and handed to the HTTP client only; the recorded config holds the
 * variable's name. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/output.h"
#include "cli/runctl.h"
#include "cli/tokenizer_opt.h"
#include "core/clock.h"
#include "core/file.h"
#include "core/log.h"
#include "core/progress.h"
#include "core/provenance.h"
#include "core/result.h"
#include "core/version.h"
#include "loadgen/loadgen.h"
#include "loadgen/mlperf_log.h"
#include "loadgen/summary.h"

/* What the progress line says besides the counts: which rate of a sweep runs. */
typedef struct {
    lb_progress prog;
    char label[64]; /* "" or " [rate 2/3: 20 q/s]" */
} progress_ctx;

/* The loadgen calls this every progress tick; core/progress.h rate-limits and draws. */
static void print_progress(void *user, const lb_loadgen_progress *p) {
    progress_ctx *pc = user;
    char label[80];
    snprintf(label, sizeof label, "load%s", pc->label);
    lb_output_loadgen_progress(&pc->prog, label, p);
}

typedef struct {
    const lb_loadgen_params *p;
    const lb_dataset *ds;
    lb_loadgen_report rep;
} load_work;

static lb_status do_load(void *ctx, lb_result *r, lb_err *err) {
    load_work *w = ctx;
    return lb_loadgen_run(w->p, w->ds, r, &w->rep, err);
}

#define MAX_SWEEP 32

static lb_status parse_sweep(const char *text, double *rates, size_t *n) {
    const char *s = text;
    *n = 0;
    while (*s) {
        char *end;
        errno = 0;
        double v = strtod(s, &end);
        if (end == s || errno != 0 || !(v > 0) || (*end != ',' && *end != '\0') || *n == MAX_SWEEP)
            return lb_args_usage_error("load",
                                       "--sweep-qps expects up to %d positive rates separated "
                                       "by commas (\"1,2,4\"), got '%s'",
                                       MAX_SWEEP, text);
        rates[(*n)++] = v;
        s = *end ? end + 1 : end;
    }
    return *n ? LB_OK : lb_args_usage_error("load", "--sweep-qps expects at least one rate");
}

/* --percentiles 75,99.5: levels strictly between 0 and 100, at most LB_MAX_USER_PCTL. */
static lb_status parse_percentiles(const char *text, lb_loadgen_params *p) {
    const char *s = text;
    p->n_user_pctl = 0;
    while (*s) {
        char *end;
        errno = 0;
        double v = strtod(s, &end);
        if (end == s || errno != 0 || !(v > 0 && v < 100) || (*end != ',' && *end != '\0') ||
            p->n_user_pctl == LB_MAX_USER_PCTL)
            return lb_args_usage_error("load",
                                       "--percentiles expects up to %d levels between 0 and 100 "
                                       "separated by commas (\"75,99.5\"), got '%s'",
                                       LB_MAX_USER_PCTL, text);
        p->user_pctl[p->n_user_pctl++] = v;
        s = *end ? end + 1 : end;
    }
    return LB_OK;
}

static lb_status parse_slo(const char *text, lb_constraints *c) {
    char buf[128];
    snprintf(buf, sizeof buf, "%s", text);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        double v;
        char key[16], tail;
        if (sscanf(tok, "%15[a-z_]=%lf%c", key, &v, &tail) != 2 || !(v > 0) ||
            (strcmp(key, "ttft_ms") != 0 && strcmp(key, "tpot_ms") != 0))
            return lb_args_usage_error("load",
                                       "--slo expects ttft_ms=X,tpot_ms=Y with positive "
                                       "milliseconds, got '%s'",
                                       text);
        if (strcmp(key, "ttft_ms") == 0)
            c->slo_ttft_ms = v;
        else
            c->slo_tpot_ms = v;
    }
    return LB_OK;
}

static void raise_fd_limit(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

/* Reads --mlperf-conf then --user-conf (either may be NULL) for the model key (LoadGen's
 * spelling: llama3.1-8b is llama3_1-8b) and the scenario. */
static lb_status read_conf_files(const char *mlperf_conf, const char *user_conf,
                                 const char *model_key, lb_scenario scenario,
                                 lb_mlperf_settings *out) {
    char model[64] = "";
    for (size_t i = 0; model_key != NULL && model_key[i] && i + 1 < sizeof model; i++)
        model[i] = model_key[i] == '.' ? '_' : model_key[i];
    const char *sc =
        scenario == LB_SCENARIO_CONCURRENCY ? NULL : lb_loadgen_scenario_name(scenario);
    const char *paths[2] = {mlperf_conf, user_conf};
    for (int i = 0; i < 2; i++) {
        if (paths[i] == NULL) continue;
        char *text = NULL;
        size_t len = 0;
        lb_err err;
        lb_status st = lb_file_read(paths[i], &text, &len, &err);
        if (st == LB_OK)
            st = lb_mlperf_log_conf_apply(text, paths[i], model_key ? model : NULL, sc, out, &err);
        free(text);
        if (st != LB_OK) return lb_args_usage_error("load", "%s", err.msg);
    }
    return LB_OK;
}

static json_t *verdict_json(const lb_loadgen_summary *s) {
    return json_pack("{s:s, s:f, s:b, s:s, s:s, s:b, s:b, s:b, s:b, s:b, s:i, s:s}", "scenario",
                     lb_loadgen_scenario_name(s->scenario), "target_qps", s->target_qps, "valid",
                     s->valid, "reasons", s->reasons, "token_source", s->token_source,
                     "performance_constraints", s->perf_ok, "min_duration", s->min_duration_ok,
                     "min_queries", s->min_queries_ok, "early_stopping", s->early_stop_ok,
                     "every_query_completed", s->no_failures, "n_warnings", s->n_warnings,
                     "warnings", s->warnings);
}

/* The run as one JSON object: the stored result, its id and its verdict. */
static json_t *run_json(const lb_result *r, int64_t run_id, const lb_loadgen_report *rep) {
    json_t *j = lb_result_to_json(r);
    json_object_set_new(j, "id", run_id >= 0 ? json_integer(run_id) : json_null());
    if (rep->summarized) json_object_set_new(j, "verdict", verdict_json(&rep->summary));
    return j;
}

/* mlperf_log_accuracy.json: every sample's answer as token ids (the tokenizer's), the
 * way MLPerf's LLM evaluation scripts read them. */
static lb_status write_accuracy_log(FILE *f, const lb_loadgen_report *rep, const lb_tokenizer *tok,
                                    lb_err *err) {
    lb_mlperf_answer *a = calloc(rep->n_texts ? rep->n_texts : 1, sizeof *a);
    if (a == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of memory for the accuracy log");
    lb_status st = LB_OK;
    size_t n = 0;
    for (size_t i = 0; i < rep->n_texts && st == LB_OK; i++) {
        if (rep->texts[i] == NULL) continue; /* a failed sample has no answer */
        uint32_t *ids = NULL;
        size_t n_ids = 0;
        st = lb_tokenizer_encode(tok, rep->texts[i], strlen(rep->texts[i]), &ids, &n_ids, err);
        a[n++] = (lb_mlperf_answer){
            .seq_id = (int64_t)i, .qsl_idx = (int64_t)i, .ids = ids, .n_ids = n_ids};
    }
    if (st == LB_OK) lb_mlperf_log_accuracy_write(f, a, n);
    for (size_t i = 0; i < n; i++)
        free((void *)a[i].ids);
    free(a);
    return st;
}

/* requests.jsonl: one object a query with its timestamps, figures and every token's time
 * (first_token_s plus the running sums of its gaps), from the stored series. */
static void write_requests(FILE *f, const lb_result *r) {
    static const char *const cols[] = {
        "sample",      "status",     "http_status",   "replica",      "attempts",
        "scheduled_s", "sent_s",     "first_token_s", "done_s",       "ttft_ms",
        "tpot_ms",     "latency_ms", "input_tokens",  "output_tokens"};
    enum { N = sizeof cols / sizeof cols[0] };
    const lb_series *c[N];
    for (size_t k = 0; k < N; k++)
        c[k] = lb_result_find_series(r, cols[k]);
    const lb_series *ngaps = lb_result_find_series(r, "token_gaps");
    const lb_series *gaps = lb_result_find_series(r, "token_gap_ms");
    if (ngaps == NULL || gaps == NULL || c[0] == NULL) return;
    size_t g = 0;
    for (size_t i = 0; i < c[0]->n; i++) {
        json_t *o = json_pack("{s:I}", "query", (json_int_t)i);
        for (size_t k = 0; k < N; k++) {
            double v = c[k] != NULL && i < c[k]->n ? c[k]->values[i] : NAN;
            json_object_set_new(o, cols[k], isfinite(v) ? json_real(v) : json_null());
        }
        const lb_series *st = c[1];
        json_object_set_new(o, "error", json_string(lb_http_qerr_name((lb_qerr)st->values[i])));
        json_t *times = json_array();
        double t = c[7]->values[i];
        size_t n_gaps = (size_t)ngaps->values[i];
        if (isfinite(t)) json_array_append_new(times, json_real(t));
        for (size_t k = 0; k < n_gaps && g < gaps->n; k++, g++) {
            t += gaps->values[g] / 1e3;
            if (isfinite(t)) json_array_append_new(times, json_real(t));
        }
        json_object_set_new(o, "token_times_s", times);
        json_dumpf(o, f, JSON_COMPACT);
        fputc('\n', f);
        json_decref(o);
    }
}

/* summary.csv: metric,value,unit, one stored metric a row (empty value: not measured). */
static void write_summary_csv(FILE *f, const lb_result *r) {
    fprintf(f, "metric,value,unit\n");
    for (size_t i = 0; i < r->n_metrics; i++) {
        const lb_metric *m = &r->metrics[i];
        if (isfinite(m->value))
            fprintf(f, "%s,%.17g,%s\n", m->name, m->value, m->unit);
        else
            fprintf(f, "%s,,%s\n", m->name, m->unit);
    }
}

/* --out DIR before the run: the folder exists (made now when missing) and can be written
 * into, so a bad --out costs no run. */
static lb_status check_out_dir(const char *dir) {
    struct stat st;
    if (stat(dir, &st) == 0 && !S_ISDIR(st.st_mode))
        return lb_args_usage_error("load", "--out %s is a file: give a folder (made if missing)",
                                   dir);
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return lb_args_usage_error("load", "--out %s: cannot create the folder: %s", dir,
                                   strerror(errno));
    if (access(dir, W_OK | X_OK) != 0)
        return lb_args_usage_error("load", "--out %s: cannot write into the folder: %s", dir,
                                   strerror(errno));
    return LB_OK;
}

/* What the files of --out are written from. */
typedef struct {
    const lb_result *r;
    int64_t run_id;
    const lb_loadgen_report *rep;
    const lb_dataset *ds;
    const lb_mlperf_detail_info *info;
    const lb_tokenizer *tok;
} out_files;

static lb_status out_summary(FILE *f, void *ctx, lb_err *err) {
    (void)err;
    const out_files *o = ctx;
    lb_loadgen_summary_write(f, &o->rep->summary, o->info->sut_name);
    return LB_OK;
}

static lb_status out_detail(FILE *f, void *ctx, lb_err *err) {
    (void)err;
    const out_files *o = ctx;
    lb_mlperf_log_detail_write(f, &o->rep->summary, o->info);
    return LB_OK;
}

static lb_status out_accuracy(FILE *f, void *ctx, lb_err *err) {
    const out_files *o = ctx;
    return write_accuracy_log(f, o->rep, o->tok, err);
}

static lb_status out_requests(FILE *f, void *ctx, lb_err *err) {
    (void)err;
    write_requests(f, ((const out_files *)ctx)->r);
    return LB_OK;
}

static lb_status out_summary_csv(FILE *f, void *ctx, lb_err *err) {
    (void)err;
    write_summary_csv(f, ((const out_files *)ctx)->r);
    return LB_OK;
}

static lb_status out_result(FILE *f, void *ctx, lb_err *err) {
    const out_files *o = ctx;
    json_t *j = run_json(o->r, o->run_id, o->rep);
    int rc = json_dumpf(j, f, JSON_INDENT(1));
    json_decref(j);
    return rc == 0 ? LB_OK : lb_fail(err, LB_ERR_NOMEM, "cannot encode llmbench_result.json");
}

static lb_status out_generated(FILE *f, void *ctx, lb_err *err) {
    (void)err;
    const out_files *o = ctx;
    for (size_t i = 0; i < o->rep->n_texts; i++) {
        json_t *line = json_pack("{s:I, s:s?, s:s?}", "sample", (json_int_t)i, "text",
                                 o->rep->texts[i], "reference", o->ds->samples[i].reference);
        json_dumpf(line, f, JSON_COMPACT);
        fputc('\n', f);
        json_decref(line);
    }
    return LB_OK;
}

/* The files of --out DIR (checked, and made, before the run), each written whole or not
 * at all (core/file.h). */
static lb_status write_out(const char *dir, const lb_result *r, int64_t run_id,
                           const lb_loadgen_report *rep, const lb_dataset *ds,
                           const lb_mlperf_detail_info *info, const lb_tokenizer *tok) {
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) { /* a sweep's folder per rate */
        LB_ERROR("--out %s: cannot create the directory: %s", dir, strerror(errno));
        return LB_ERR_IO;
    }
    if (rep->n_texts > 0 && tok == NULL)
        LB_WARN("--out: no mlperf_log_accuracy.json: it holds token ids, which need "
                "--tokenizer");
    out_files o = {.r = r, .run_id = run_id, .rep = rep, .ds = ds, .info = info, .tok = tok};
    const struct {
        const char *name;
        lb_file_writer write;
        bool wanted;
    } files[] = {
        {"mlperf_log_summary.txt", out_summary, rep->summarized},
        {"mlperf_log_detail.txt", out_detail, rep->summarized},
        {"mlperf_log_accuracy.json", out_accuracy, rep->n_texts > 0 && tok != NULL},
        {"requests.jsonl", out_requests, true},
        {"summary.csv", out_summary_csv, true},
        {"llmbench_result.json", out_result, true},
        {"generated.jsonl", out_generated, rep->n_texts > 0},
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        if (!files[i].wanted) continue;
        char path[4096 + 64];
        snprintf(path, sizeof path, "%s/%s", dir, files[i].name);
        lb_err err = {{0}};
        lb_status st = lb_file_write_atomic_with(path, files[i].write, &o, &err);
        if (st != LB_OK) {
            LB_ERROR("--out: %s", err.msg);
            return st;
        }
    }
    return LB_OK;
}

/* One row of the --sweep-qps table. */
typedef struct {
    double qps;
    int64_t run_id;
    lb_run_status status;
    bool summarized, valid;
    double samples_per_s, out_tok_per_s, goodput_per_s;
    double ttft_p50, ttft_p99, tpot_p50, tpot_p99; /* ms */
} sweep_row;

static sweep_row sweep_row_of(double qps, int64_t run_id, const lb_result *r,
                              const lb_loadgen_report *rep) {
    sweep_row row = {.qps = qps, .run_id = run_id, .status = r->status};
    row.summarized = rep->summarized;
    if (!rep->summarized) return row;
    const lb_loadgen_summary *s = &rep->summary;
    row.valid = s->valid;
    row.samples_per_s = s->samples_per_s;
    row.out_tok_per_s = s->output_tok_per_s;
    row.goodput_per_s = s->goodput_per_s;
    row.ttft_p50 = s->ttft_ms.p[0];
    row.ttft_p99 = s->ttft_ms.p[4];
    row.tpot_p50 = s->tpot_ms.p[0];
    row.tpot_p99 = s->tpot_ms.p[4];
    return row;
}

/* The highest rate whose run is stored ok and VALID; NaN when none. */
static double highest_valid(const sweep_row *rows, size_t n) {
    double best = NAN;
    for (size_t i = 0; i < n; i++)
        if (rows[i].status == LB_RUN_OK && rows[i].valid && !(rows[i].qps <= best))
            best = rows[i].qps;
    return best;
}

/* The rate against the figures, and the highest rate whose run is VALID. */
static void print_sweep_table(FILE *f, const char *sweep_tag, const sweep_row *rows, size_t n) {
    fprintf(f, "QPS sweep %s: %zu rate%s\n", sweep_tag, n, n == 1 ? "" : "s");
    fprintf(f, "%10s %6s %10s %11s %10s %10s %10s %10s %10s  %s\n", "target q/s", "run",
            "samples/s", "out tok/s", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", "goodput/s",
            "result");
    fprintf(f, "%10s %6s %10s %11s %10s %10s %10s %10s %10s\n", "", "", "", "", "ms", "ms", "ms",
            "ms", "");
    for (size_t i = 0; i < n; i++) {
        const sweep_row *w = &rows[i];
        const char *verdict = w->status == LB_RUN_FAILED        ? "FAILED"
                              : w->status == LB_RUN_INTERRUPTED ? "INTERRUPTED"
                              : w->valid                        ? "VALID"
                                                                : "INVALID";
        fprintf(f, "%10g %6lld %10.2f %11.1f %10.1f %10.1f %10.2f %10.2f %10.2f  %s\n", w->qps,
                (long long)w->run_id, w->samples_per_s, w->out_tok_per_s, w->ttft_p50, w->ttft_p99,
                w->tpot_p50, w->tpot_p99, w->goodput_per_s, verdict);
    }
    double best = highest_valid(rows, n);
    if (isnan(best))
        fprintf(f, "No rate gave a VALID run.\n");
    else
        fprintf(f, "Highest VALID rate: %g queries/s\n", best);
}

int lb_cmd_load(int argc, char **argv) {
    lb_loadgen_params p = lb_loadgen_default_params();
    lb_arg_list endpoints = {0};
    const char *scenario = NULL, *mode = "performance", *api = "completions", *model = NULL;
    const char *api_key_env = NULL, *dataset = NULL, *format = "auto", *sweep = NULL;
    const char *model_key = NULL, *slo = NULL, *out_dir = NULL, *in_len = "fixed:128";
    const char *out_len = NULL, *name = NULL;
    lb_arg_list tags = {0};
    int64_t synthetic = 0, min_queries = 0, max_inflight = 1024, seed = -1, retries = 2, warmup = 0;
    int64_t max_failed = 0, prefix_len = 0, prefix_count = 0;
    int64_t eject_after = 5, concurrency = 0, max_tokens = 128, preconnect = -1;
    double qps = 0, min_duration = -1, timeout_s = 600, drain_s = 10, temperature = 0;
    const char *mlperf_conf = NULL, *user_conf = NULL, *percentiles = NULL;
    double ttft_limit = -1, tpot_limit = -1, burstiness = 1, ramp_up = 0;
    bool no_stream = false, ignore_eos = false;
    lb_tokenizer_opt topt = LB_TOKENIZER_OPT_DEFAULT;
    const lb_arg_spec specs[] = {
        {"--endpoint", LB_ARG_LIST, &endpoints, "URL",
         "server base URL (http://host:8000); repeat for replicas", 0, 0, NULL},
        {"--api", LB_ARG_CHOICE, &api, NULL, "OpenAI API (default completions)", 0, 0,
         "completions|chat"},
        {"--model", LB_ARG_STRING, &model, "NAME", "model name sent in each request", 0, 0, NULL},
        {"--api-key-env", LB_ARG_STRING, &api_key_env, "VAR",
         "environment variable holding the API key (sent as Bearer; never stored)", 0, 0, NULL},
        {"--scenario", LB_ARG_CHOICE, &scenario, NULL,
         "default: server with --qps/--sweep-qps, concurrency with --concurrency, else offline", 0,
         0, "offline|server|singlestream|concurrency"},
        {"--mode", LB_ARG_CHOICE, &mode, NULL, "default performance", 0, 0, "performance|accuracy"},
        {"--qps", LB_ARG_DOUBLE, &qps, "R",
         "Server: arrival rate, queries/s (Poisson unless --burstiness)", 1e-6, 1e9, NULL},
        {"--sweep-qps", LB_ARG_STRING, &sweep, "R1,R2,..",
         "Server: one stored run per rate, in turn, then a table of rate against the figures", 0, 0,
         NULL},
        {"--burstiness", LB_ARG_DOUBLE, &burstiness, "B",
         "Server: gaps between arrivals from a gamma distribution of shape B and mean 1/qps "
         "(1 = Poisson, the default; below 1 burstier, above 1 more even)",
         0.001, 1000, NULL},
        {"--ramp-up", LB_ARG_DOUBLE, &ramp_up, "S",
         "Server: the arrival rate rises linearly from 0 to --qps over the first S seconds", 0, 1e7,
         NULL},
        {"--concurrency", LB_ARG_INT, &concurrency, "N", "closed loop with N queries in flight", 1,
         1e6, NULL},
        {"--dataset", LB_ARG_STRING, &dataset, "FILE",
         "cnn_eval.json, a .jsonl with prompt, or ShareGPT JSON (its conversations: "
         "--dataset-format sharegpt-turns)",
         0, 0, NULL},
        {"--dataset-format", LB_ARG_CHOICE, &format, NULL,
         "default auto; sharegpt-turns: every turn of each conversation, sent as successive "
         "chat requests with the conversation so far (needs --api chat)",
         0, 0, "auto|cnn|jsonl|sharegpt|sharegpt-turns"},
        {"--synthetic", LB_ARG_INT, &synthetic, "N", "N synthetic prompts instead of --dataset", 1,
         1e8, NULL},
        {"--input-len", LB_ARG_STRING, &in_len, "DIST",
         "synthetic prompt length, in words or with --tokenizer in tokens: "
         "fixed:N|uniform:A:B|normal:M:S (default fixed:128)",
         0, 0, NULL},
        {"--prefix-len", LB_ARG_INT, &prefix_len, "N",
         "synthetic: a shared prefix of N words (tokens with --tokenizer) before each prompt, "
         "for prefix caches (default 0)",
         0, 1e7, NULL},
        {"--prefix-count", LB_ARG_INT, &prefix_count, "K",
         "synthetic: K distinct prefixes, used in turn (default 1)", 0, 1e6, NULL},
        {"--output-len", LB_ARG_STRING, &out_len, "DIST",
         "synthetic max_tokens distribution (default fixed:--max-tokens)", 0, 0, NULL},
        {"--max-tokens", LB_ARG_INT, &max_tokens, "N",
         "output tokens when the dataset does not say (default 128)", 1, 1e7, NULL},
        {"--min-duration", LB_ARG_DOUBLE, &min_duration, "S",
         "run at least S seconds (default: the config files' min_duration, else 0)", 0, 1e7, NULL},
        {"--min-queries", LB_ARG_INT, &min_queries, "N",
         "issue at least N queries (default: the dataset size)", 1, 1e9, NULL},
        {"--max-inflight", LB_ARG_INT, &max_inflight, "N",
         "Offline/Server: at most N queries in flight (default 1024)", 1, 1e7, NULL},
        {"--preconnect", LB_ARG_INT, &preconnect, "N",
         "open N connections before the run (GET /v1/models) so sends on schedule need no TCP "
         "set-up; 0 = none (default: as many as may be in flight, for Server at most one "
         "second of arrivals but 64)",
         0, 1e6, NULL},
        {"--warmup", LB_ARG_INT, &warmup, "N",
         "send N unrecorded queries first to warm the server up (default 0)", 0, 1e9, NULL},
        {"--seed", LB_ARG_INT, &seed, "N",
         "sample order and arrival seed (default: MLPerf's official sample_index_rng_seed and "
         "schedule_rng_seed, or the config files'); also the synthetic prompts' (default 1)",
         0, 1e18, NULL},
        {"--model-key", LB_ARG_STRING, &model_key, "KEY",
         "MLPerf latency bounds: llama3.1-8b, llama3.1-8b-interactive, ...", 0, 0, NULL},
        {"--ttft-limit-ms", LB_ARG_DOUBLE, &ttft_limit, "MS", "Server p99 TTFT bound (overrides)",
         0, 1e9, NULL},
        {"--tpot-limit-ms", LB_ARG_DOUBLE, &tpot_limit, "MS", "Server p99 TPOT bound (overrides)",
         0, 1e9, NULL},
        {"--mlperf-conf", LB_ARG_STRING, &mlperf_conf, "FILE",
         "LoadGen's mlperf.conf: min_duration, min_query_count, target_qps, ttft_latency, "
         "tpot_latency, target_latency_percentile and the seeds for --model-key and the "
         "scenario (options given here override)",
         0, 0, NULL},
        {"--user-conf", LB_ARG_STRING, &user_conf, "FILE",
         "LoadGen's user.conf, read after --mlperf-conf (its values win)", 0, 0, NULL},
        {"--percentiles", LB_ARG_STRING, &percentiles, "P1,P2,..",
         "report these percentiles too (\"75,99.5\"; always: 50, 90, 95, 97, 99, 99.9)", 0, 0,
         NULL},
        {"--slo", LB_ARG_STRING, &slo, "ttft_ms=X,tpot_ms=Y", "goodput objective", 0, 0, NULL},
        {"--timeout", LB_ARG_DOUBLE, &timeout_s, "S", "per request (default 600)", 0.001, 1e6,
         NULL},
        {"--retries", LB_ARG_INT, &retries, "N",
         "resend a failed request up to N times (default 2)", 0, 100, NULL},
        {"--max-failed", LB_ARG_INT, &max_failed, "N",
         "queries that may fail after their retries before the run is stored as failed "
         "(default 0)",
         0, 1e12, NULL},
        {"--eject-after", LB_ARG_INT, &eject_after, "N",
         "take a replica out after N failures in a row; 0 never (default 5)", 0, 1e9, NULL},
        {"--drain", LB_ARG_DOUBLE, &drain_s, "S",
         "after Ctrl-C wait S s for in-flight (default 10)", 0, 1e6, NULL},
        {"--no-stream", LB_ARG_FLAG, &no_stream, NULL, "ask for whole answers instead of SSE", 0, 0,
         NULL},
        {"--ignore-eos", LB_ARG_FLAG, &ignore_eos, NULL, "ask for exactly max_tokens (vLLM)", 0, 0,
         NULL},
        {"--temperature", LB_ARG_DOUBLE, &temperature, "T", "sampling temperature (default 0)", 0,
         100, NULL},
        {"--out", LB_ARG_STRING, &out_dir, "DIR",
         "write LoadGen's mlperf_log_summary.txt, mlperf_log_detail.txt (accuracy mode with "
         "--tokenizer: mlperf_log_accuracy.json), requests.jsonl (a line per query, token "
         "times included), summary.csv, llmbench_result.json (accuracy mode: generated.jsonl) "
         "there; a sweep writes one folder per rate (qps<R>)",
         0, 0, NULL},
        {"--name", LB_ARG_STRING, &name, "NAME",
         "name of the stored run (default: the model name, else \"load\")", 0, 0, NULL},
        {"--tag", LB_ARG_LIST, &tags, "TAG", "a tag for the stored run (repeatable)", 0, 0, NULL},
        LB_TOKENIZER_ARG_SPECS(&topt),
    };
    const lb_cli_command cmd = {
        .command = "load",
        .uses_db = true,
        LB_ARG_SPECS(specs),
        .usage = "--endpoint URL [--endpoint URL ...] (--dataset FILE | --synthetic N) [options]",
        .summary =
            "MLPerf-style load (Offline, Server, SingleStream, fixed concurrency, QPS sweep) "
            "against OpenAI-compatible servers; every request to the replica with the "
            "fewest in flight; TTFT, TPOT, ITL, latency, throughput, goodput, VALID or "
            "INVALID with reasons. Exit status: 0 VALID, 3 completed but INVALID (stored ok), "
            "1 failed (no query completed, or more than --max-failed failed; stored failed), "
            "2 bad usage, 130 interrupted.",
    };
    lb_args a;
    int rc = lb_args_parse(&cmd, argc, argv, &a);
    if (rc != LB_ARGS_GO_ON) return rc;
    lb_status st;

    if (endpoints.n == 0)
        return lb_status_exit_code(lb_args_usage_error("load", "give at least one --endpoint URL"));
    for (int i = 0; i < endpoints.n; i++) {
        const char *e = endpoints.items[i];
        if (strncasecmp(e, "http://", 7) != 0 && strncasecmp(e, "https://", 8) != 0) {
            char shown[1024];
            lb_provenance_mask_url(e, shown, sizeof shown);
            return lb_status_exit_code(lb_args_usage_error(
                "load",
                "--endpoint '%s' is not an http:// or https:// URL (such as http://host:8000)",
                shown));
        }
    }
    if ((dataset == NULL) == (synthetic == 0))
        return lb_status_exit_code(
            lb_args_usage_error("load", "give exactly one of --dataset FILE and --synthetic N"));
    if (qps > 0 && sweep)
        return lb_status_exit_code(
            lb_args_usage_error("load", "give --qps R or --sweep-qps R1,R2,.., not both"));
    if ((qps > 0 || sweep) && concurrency > 0)
        return lb_status_exit_code(lb_args_usage_error(
            "load", "--qps and --sweep-qps set the Server scenario's arrival rate and "
                    "--concurrency a closed loop: give one of them"));
    if (scenario == NULL)
        scenario = (qps > 0 || sweep) ? "server" : concurrency > 0 ? "concurrency" : "offline";
    if ((qps > 0 || sweep) && strcmp(scenario, "server") != 0)
        return lb_status_exit_code(lb_args_usage_error(
            "load", "--qps and --sweep-qps apply to --scenario server only, not %s", scenario));
    if ((burstiness != 1 || ramp_up > 0) && strcmp(scenario, "server") != 0)
        return lb_status_exit_code(lb_args_usage_error(
            "load", "--burstiness and --ramp-up shape the Server scenario's arrivals, not %s",
            scenario));
    if (concurrency > 0 && strcmp(scenario, "concurrency") != 0)
        return lb_status_exit_code(lb_args_usage_error(
            "load", "--concurrency applies to --scenario concurrency only, not %s", scenario));
    p.scenario = strcmp(scenario, "server") == 0         ? LB_SCENARIO_SERVER
                 : strcmp(scenario, "singlestream") == 0 ? LB_SCENARIO_SINGLE_STREAM
                 : strcmp(scenario, "concurrency") == 0  ? LB_SCENARIO_CONCURRENCY
                                                         : LB_SCENARIO_OFFLINE;
    lb_mlperf_settings conf = {0};
    if ((st = read_conf_files(mlperf_conf, user_conf, model_key, p.scenario, &conf)) != LB_OK)
        return lb_status_exit_code(st);
    if (p.scenario == LB_SCENARIO_SERVER && qps <= 0 && sweep == NULL && conf.has_target_qps)
        qps = conf.target_qps;
    if (p.scenario == LB_SCENARIO_SERVER && !(qps > 0) && sweep == NULL)
        return lb_status_exit_code(lb_args_usage_error(
            "load", "--scenario server needs --qps R, --sweep-qps or a target_qps in --user-conf"));
    if (min_duration < 0) min_duration = conf.has_min_duration ? conf.min_duration_ms / 1e3 : 0;
    if (min_queries == 0 && conf.has_min_query_count) min_queries = conf.min_query_count;
    if (p.scenario == LB_SCENARIO_CONCURRENCY && concurrency <= 0)
        return lb_status_exit_code(
            lb_args_usage_error("load", "--scenario concurrency needs --concurrency N"));
    double rates[MAX_SWEEP] = {qps};
    size_t n_rates = 1;
    if (sweep && (st = parse_sweep(sweep, rates, &n_rates)) != LB_OK)
        return lb_status_exit_code(st);
    p.mode = strcmp(mode, "accuracy") == 0 ? LB_MODE_ACCURACY : LB_MODE_PERFORMANCE;
    p.qps = qps;
    p.burstiness = burstiness;
    p.ramp_up_s = ramp_up;
    p.concurrency = concurrency;
    p.min_duration_s = min_duration;
    p.min_queries = min_queries;
    p.max_inflight = max_inflight;
    p.max_failed = max_failed;
    p.warmup_queries = warmup;
    p.preconnect = preconnect;
    if (seed >= 0) {
        p.sample_seed = (uint64_t)seed;
        p.schedule_seed = (uint64_t)seed + 1000003;
    } else {
        p.sample_seed = conf.has_sample_seed ? conf.sample_seed : LB_MLPERF_SAMPLE_INDEX_SEED;
        p.schedule_seed = conf.has_schedule_seed ? conf.schedule_seed : LB_MLPERF_SCHEDULE_SEED;
    }
    uint64_t qsl_seed = conf.has_qsl_seed ? conf.qsl_seed : LB_MLPERF_QSL_SEED;
    p.max_tokens = (int32_t)max_tokens;
    p.drain_s = drain_s;
    lb_err err = {""};
    if (model_key && lb_loadgen_constraints_for_model(model_key, &p.constraints, &err) != LB_OK)
        return lb_status_exit_code(lb_args_usage_error("load", "%s", err.msg));
    if (conf.has_ttft) p.constraints.ttft_limit_ms = conf.ttft_latency_ms;
    if (conf.has_tpot) p.constraints.tpot_limit_ms = conf.tpot_latency_ms;
    if (conf.has_percentile) p.constraints.percentile = conf.percentile;
    if (ttft_limit >= 0) p.constraints.ttft_limit_ms = ttft_limit;
    if (tpot_limit >= 0) p.constraints.tpot_limit_ms = tpot_limit;
    if (slo && (st = parse_slo(slo, &p.constraints)) != LB_OK) return lb_status_exit_code(st);
    if (percentiles && (st = parse_percentiles(percentiles, &p)) != LB_OK)
        return lb_status_exit_code(st);
    p.model_key = model_key;
    p.request.api = (lb_api)lb_openai_api_parse(api);
    p.request.model = model;
    p.request.stream = !no_stream;
    p.request.ignore_eos = ignore_eos;
    p.request.temperature = temperature;
    p.pool.endpoints = endpoints.items;
    p.pool.n_endpoints = (size_t)endpoints.n;
    p.pool.retries = retries;
    p.pool.eject_after = eject_after;
    p.pool.http.timeout_ms = (int64_t)(timeout_s * 1000.0);
    if (api_key_env != NULL) {
        const char *key = getenv(api_key_env);
        if (key == NULL || key[0] == '\0')
            return lb_status_exit_code(lb_args_usage_error(
                "load", "--api-key-env %s: that environment variable is not set", api_key_env));
        p.pool.http.api_key = key;
        p.api_key_env = api_key_env;
    }

    /* The tokenizer first: synthetic prompts are sized with it, answers without usage and
     * the other datasets' prompts (before t0) are counted with it. */
    lb_tokenizer *tok = NULL;
    if (topt.path != NULL) {
        if ((st = lb_tokenizer_opt_open(&topt, &tok, &err)) != LB_OK) {
            fprintf(stderr, "llmbench load: %s\n", err.msg);
            return lb_status_exit_code(st == LB_ERR_FORMAT ? LB_ERR_USAGE : st);
        }
        p.tokenizer = tok;
        p.tokenizer_path = topt.path;
    }
    if (synthetic == 0 && (prefix_len > 0 || prefix_count > 0)) {
        lb_tokenizer_free(tok);
        return lb_status_exit_code(lb_args_usage_error(
            "load", "--prefix-len and --prefix-count shape --synthetic prompts only"));
    }
    if (strcmp(format, "sharegpt-turns") == 0 && p.request.api != LB_API_CHAT) {
        lb_tokenizer_free(tok);
        return lb_status_exit_code(lb_args_usage_error(
            "load", "--dataset-format sharegpt-turns sends conversations: give --api chat"));
    }
    lb_dataset ds;
    if (synthetic > 0) {
        lb_dataset_synthetic_params sp = lb_dataset_synthetic_default_params();
        sp.n_samples = (size_t)synthetic;
        sp.seed = seed >= 0 ? (uint64_t)seed : 1;
        sp.tok = tok;
        sp.prefix_len = (int32_t)prefix_len;
        sp.n_prefixes = (size_t)prefix_count;
        char fixed[32];
        snprintf(fixed, sizeof fixed, "fixed:%lld", (long long)max_tokens);
        if (out_len == NULL) out_len = fixed;
        if (lb_dataset_len_dist_parse(in_len, &sp.input, &err) != LB_OK ||
            lb_dataset_len_dist_parse(out_len, &sp.output, &err) != LB_OK) {
            lb_tokenizer_free(tok);
            return lb_status_exit_code(lb_args_usage_error("load", "%s", err.msg));
        }
        st = lb_dataset_synthetic(&sp, &ds, &err);
        p.dataset_path = "synthetic";
    } else {
        st = lb_dataset_load(dataset, format, &ds, &err);
        p.dataset_path = dataset;
        if (st == LB_OK && tok != NULL) st = lb_dataset_count_tokens(&ds, tok, &err);
    }
    if (st != LB_OK) {
        fprintf(stderr, "llmbench load: %s\n", err.msg);
        lb_tokenizer_free(tok);
        return lb_status_exit_code(st == LB_ERR_FORMAT ? LB_ERR_USAGE : st);
    }
    if (ds.skipped > 0)
        LB_WARN("dataset %s: %zu records without a prompt and a reply were skipped", p.dataset_path,
                ds.skipped);
    if (out_dir != NULL && (st = check_out_dir(out_dir)) != LB_OK) {
        lb_tokenizer_free(tok);
        lb_dataset_free(&ds);
        return lb_status_exit_code(st);
    }
    raise_fd_limit();
    if (preconnect > lb_loadgen_connection_room()) {
        lb_tokenizer_free(tok);
        lb_dataset_free(&ds);
        return lb_status_exit_code(lb_args_usage_error(
            "load",
            "--preconnect %lld is more than the open-file limit leaves room for: 0 to %lld here "
            "(raise it with ulimit -n)",
            (long long)preconnect, (long long)lb_loadgen_connection_room()));
    }
    progress_ctx pc = {.label = ""};
    lb_progress_init(&pc.prog, a.common.verbosity >= 0);
    p.progress = print_progress;
    p.progress_user = &pc;
    char sut[1200], first[1024];
    lb_provenance_mask_url(endpoints.items[0], first, sizeof first);
    snprintf(sut, sizeof sut, "%s%s%s%s", first, endpoints.n > 1 ? " and other replicas" : "",
             model ? ", model " : "", model ? model : "");
    /* A sweep's runs carry one tag that groups them: sweep:<start time>-<pid>. */
    char sweep_tag[64] = "";
    if (sweep) {
        time_t now = time(NULL);
        struct tm tm;
        gmtime_r(&now, &tm);
        char when[32];
        strftime(when, sizeof when, "%Y%m%dT%H%M%SZ", &tm);
        snprintf(sweep_tag, sizeof sweep_tag, "sweep:%s-%ld", when, (long)getpid());
    }
    sweep_row rows[MAX_SWEEP];
    size_t n_rows = 0;
    json_t *doc = sweep && a.common.json ? json_array() : NULL;
    bool any_failed = false, any_invalid = false;
    lb_status last = LB_OK;
    for (size_t k = 0; k < n_rates && last != LB_ERR_INTERRUPTED; k++) {
        p.qps = rates[k];
        if (sweep)
            snprintf(pc.label, sizeof pc.label, " [rate %zu/%zu: %g q/s]", k + 1, n_rates,
                     rates[k]);
        lb_result *r = lb_result_new("load", name ? name : model ? model : "load");
        for (int i = 0; i < tags.n; i++)
            json_array_append_new(r->tags, json_string(tags.items[i]));
        if (sweep) json_array_append_new(r->tags, json_string(sweep_tag));
        load_work w = {.p = &p, .ds = &ds};
        json_decref(r->config);
        r->config = lb_loadgen_config_json(&p, &ds);
        int64_t run_id = -1;
        /* runctl records main's command line: this argv starts one word after main's. */
        st = lb_runctl_run(&a.common, argc + 1, argv - 1, r, do_load, &w, &run_id, &err);
        lb_progress_done(&pc.prog);
        if (!w.rep.summarized) {
            fprintf(stderr, "llmbench load: %s\n", err.msg);
        } else {
            if (a.common.json && doc != NULL)
                json_array_append_new(doc, run_json(r, run_id, &w.rep));
            else if (a.common.json)
                doc = run_json(r, run_id, &w.rep);
            else if (!sweep)
                lb_loadgen_summary_write(stdout, &w.rep.summary, sut);
            if (out_dir != NULL) {
                char dir[4096];
                if (sweep && mkdir(out_dir, 0777) != 0 && errno != EEXIST) {
                    LB_ERROR("--out %s: cannot create the directory: %s", out_dir, strerror(errno));
                    st = LB_ERR_IO;
                }
                snprintf(dir, sizeof dir, sweep ? "%s/qps%g" : "%s", out_dir, rates[k]);
                lb_mlperf_detail_info info = {.sut_name = sut,
                                              .version = lb_version_string,
                                              .start_wall_s = r->start_wall_s,
                                              .qsl_seed = qsl_seed};
                if (st != LB_ERR_IO &&
                    write_out(dir, r, run_id, &w.rep, &ds, &info, tok) != LB_OK && st == LB_OK)
                    st = LB_ERR_IO;
            }
            if (st != LB_OK) fprintf(stderr, "llmbench load: %s\n", err.msg);
            any_invalid |= st == LB_OK && !w.rep.summary.valid;
        }
        rows[k] = sweep_row_of(rates[k], run_id, r, &w.rep);
        any_failed |= st != LB_OK && st != LB_ERR_INTERRUPTED;
        if (st != LB_OK) last = st;
        n_rows = k + 1;
        bool measured = w.rep.summarized;
        lb_loadgen_report_free(&w.rep);
        lb_result_free(r);
        if (!measured) break; /* nothing could run (the store, memory): neither can the rest */
    }
    if (sweep && !a.common.json) print_sweep_table(stdout, sweep_tag, rows, n_rows);
    if (sweep && a.common.json) {
        double best = highest_valid(rows, n_rows);
        doc = json_pack("{s:s, s:o, s:o}", "sweep", sweep_tag, "highest_valid_qps",
                        isnan(best) ? json_null() : json_real(best), "runs", doc);
    }
    if (doc != NULL) {
        json_dumpf(doc, stdout, JSON_INDENT(1));
        printf("\n");
        json_decref(doc);
    }
    lb_dataset_free(&ds);
    lb_tokenizer_free(tok);
    /* The exit rule (README): interrupted 130, failed 1, INVALID 3, else 0. */
    if (last == LB_ERR_INTERRUPTED) return lb_status_exit_code(last);
    if (any_failed) return lb_status_exit_code(last);
    return any_invalid ? LB_EXIT_INVALID : 0;
}
