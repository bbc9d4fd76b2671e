/* loadrun.c: the runs of load and infer (loadrun.h): store, print, --out, exit status.
 *
 * The --out files are LoadGen's (mlperf_log_summary.txt, mlperf_log_detail.txt,
 * mlperf_log_accuracy.json in accuracy mode), requests.jsonl, summary.csv,
 * llmbench_result.json and, in accuracy mode, generated.jsonl; each is written whole or
 * not at all (core/file.h). */
#include "cli/loadrun.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/output.h"
#include "cli/runctl.h"
#include "core/file.h"
#include "core/log.h"
#include "core/progress.h"
#include "core/result.h"
#include "core/version.h"
#include "loadgen/mlperf_log.h"
#include "loadgen/summary.h"

/* What the progress line says besides the counts: which rate of a sweep or search runs. */
typedef struct {
    lb_progress prog;
    const char *command;
    char label[96]; /* "" or " [rate 2/3: 20 q/s]" */
} progress_ctx;

/* The loadgen calls this every progress tick; core/progress.h rate-limits and draws. */
static void print_progress(void *user, const lb_loadgen_progress *p) {
    progress_ctx *pc = user;
    char label[128];
    snprintf(label, sizeof label, "%s%s", pc->command, pc->label);
    lb_output_loadgen_progress(&pc->prog, label, p);
}

typedef struct {
    const lb_loadrun_params *lp;
    lb_loadgen_report rep;
} run_work;

static lb_status do_run(void *ctx, lb_result *r, lb_err *err) {
    run_work *w = ctx;
    return w->lp->run(w->lp->run_user, r, &w->rep, err);
}

/* A rate of --sweep-qps lies where one of --qps or --search-qps must, queries/s. */
#define RATE_MIN 1e-6
#define RATE_MAX 1e9

static lb_status parse_rates(const char *command, const char *text, double *rates, size_t *n) {
    const char *s = text;
    *n = 0;
    while (*s) {
        char *end;
        errno = 0;
        double v = strtod(s, &end);
        if (end == s || errno != 0 || !(v >= RATE_MIN && v <= RATE_MAX) ||
            (*end != ',' && *end != '\0') || (*end == ',' && end[1] == '\0') ||
            *n == LB_LOADRUN_MAX_RATES)
            return lb_args_usage_error(command,
                                       "--sweep-qps expects up to %d rates from %g to %g "
                                       "queries/s separated by commas (\"1,2,4\"), got '%s'",
                                       LB_LOADRUN_MAX_RATES, RATE_MIN, RATE_MAX, text);
        /* each rate names its --out folder (qps%g) and its table row: once each */
        char name[32], other[32];
        snprintf(name, sizeof name, "%g", v);
        for (size_t i = 0; i < *n; i++) {
            snprintf(other, sizeof other, "%g", rates[i]);
            if (strcmp(name, other) == 0)
                return lb_args_usage_error(command,
                                           "--sweep-qps '%s' gives the rate %s twice (its runs "
                                           "would share one --out folder, qps%s): give each rate "
                                           "once, differing within six significant digits",
                                           text, name, name);
        }
        rates[(*n)++] = v;
        s = *end ? end + 1 : end;
    }
    return *n ? LB_OK : lb_args_usage_error(command, "--sweep-qps expects at least one rate");
}

bool lb_loadrun_opts_rated(const lb_loadrun_opts *o) {
    return o->sweep != NULL || o->search_qps > 0;
}

lb_status lb_loadrun_opts_check(const char *command, lb_loadrun_opts *o, double qps,
                                const char *scenario) {
    if ((qps > 0) + (o->sweep != NULL) + (o->search_qps > 0) > 1)
        return lb_args_usage_error(command,
                                   "give one of --qps R, --sweep-qps R1,R2,.. and --search-qps R");
    if ((qps > 0 || lb_loadrun_opts_rated(o)) && strcmp(scenario, "server") != 0)
        return lb_args_usage_error(
            command, "--qps, --sweep-qps and --search-qps apply to --scenario server only, not %s",
            scenario);
    const lb_loadrun_opts d = LB_LOADRUN_OPTS_DEFAULT;
    if (!(o->search_qps > 0) &&
        (o->search_tol != d.search_tol || o->search_trials != d.search_trials))
        return lb_args_usage_error(command, "%s shapes a search: give --search-qps R with it",
                                   o->search_tol != d.search_tol ? "--search-tolerance"
                                                                 : "--search-trials");
    if (o->sweep != NULL) return parse_rates(command, o->sweep, o->rates, &o->n_rates);
    return LB_OK;
}

void lb_loadrun_opts_apply(const lb_loadrun_opts *o, const char *default_name,
                           lb_loadrun_params *lp) {
    lp->name = o->name ? o->name : default_name;
    lp->tags = (const char *const *)o->tags.items;
    lp->n_tags = o->tags.n;
    lp->out_dir = o->out_dir;
    lp->rates = o->sweep ? o->rates : NULL;
    lp->n_rates = o->n_rates;
    if (o->search_qps > 0) {
        lp->search = lb_search_default_params(o->search_qps);
        lp->search.rel_tol = o->search_tol;
        lp->search.max_trials = (int)o->search_trials;
    }
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

/* mlperf_log_accuracy.json: every sample's answer as token ids, the way MLPerf's LLM
 * evaluation scripts read them: the SUT's own ids where it gives them (the engine), else
 * the answer's text encoded with tok (the served model's tokenizer, --tokenizer). */
static lb_status write_accuracy_log(FILE *f, const lb_loadgen_report *rep, const lb_tokenizer *tok,
                                    lb_err *err) {
    lb_mlperf_answer *a = calloc(rep->n_texts ? rep->n_texts : 1, sizeof *a);
    uint32_t **owned = calloc(rep->n_texts ? rep->n_texts : 1, sizeof *owned);
    if (a == NULL || owned == NULL) {
        free(a);
        free(owned);
        return lb_fail(err, LB_ERR_NOMEM, "out of memory for the accuracy log");
    }
    lb_status st = LB_OK;
    size_t n = 0;
    for (size_t i = 0; i < rep->n_texts && st == LB_OK; i++) {
        const uint32_t *ids = rep->ids ? rep->ids[i] : NULL;
        size_t n_ids = ids ? rep->n_ids[i] : 0;
        if (ids == NULL && (rep->texts[i] == NULL || tok == NULL))
            continue; /* a failed sample has no answer */
        if (ids == NULL) {
            st = lb_tokenizer_encode(tok, rep->texts[i], strlen(rep->texts[i]), &owned[n], &n_ids,
                                     err);
            ids = owned[n];
        }
        a[n++] = (lb_mlperf_answer){
            .seq_id = (int64_t)i, .qsl_idx = (int64_t)i, .ids = ids, .n_ids = n_ids};
    }
    if (st == LB_OK) lb_mlperf_log_accuracy_write(f, a, n);
    for (size_t i = 0; i < n; i++)
        free(owned[i]);
    free(owned);
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
            json_object_set_new(o, cols[k], lb_result_json_number(v));
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
lb_status lb_loadrun_check_out_dir(const char *command, const char *dir) {
    lb_err err = {{0}};
    if (lb_file_check_folder("--out", dir, &err) != LB_OK)
        return lb_args_usage_error(command, "%s", err.msg);
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

/* generated.jsonl: a line a sample with its text (null where it failed) and reference.
 * The SUT's texts are UTF-8 (infer/ makes the engine's so); one that is not, or no memory,
 * fails the file rather than leave an empty line for ROUGE to score. */
static lb_status out_generated(FILE *f, void *ctx, lb_err *err) {
    const out_files *o = ctx;
    for (size_t i = 0; i < o->rep->n_texts; i++) {
        json_t *line = json_pack("{s:I, s:s?, s:s?}", "sample", (json_int_t)i, "text",
                                 o->rep->texts[i], "reference", o->ds->samples[i].reference);
        int rc = line ? json_dumpf(line, f, JSON_COMPACT) : -1;
        json_decref(line);
        if (rc != 0)
            return lb_fail(err, LB_ERR_FORMAT,
                           "generated.jsonl: sample %zu: its text or reference cannot be "
                           "written as JSON (not UTF-8, or out of memory)",
                           i);
        fputc('\n', f);
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
    bool has_ids = rep->ids != NULL && tok == NULL;
    for (size_t i = 0; has_ids && i < rep->n_texts; i++)
        has_ids = rep->texts[i] == NULL || rep->ids[i] != NULL;
    bool accuracy_log = rep->n_texts > 0 && (tok != NULL || has_ids);
    if (rep->n_texts > 0 && !accuracy_log)
        LB_WARN("--out: no mlperf_log_accuracy.json: it holds the answers' token ids, and an "
                "HTTP server sends text: give --tokenizer (the served model's) to encode it");
    out_files o = {.r = r, .run_id = run_id, .rep = rep, .ds = ds, .info = info, .tok = tok};
    const struct {
        const char *name;
        lb_file_writer write;
        bool wanted;
    } files[] = {
        {"mlperf_log_summary.txt", out_summary, rep->summarized},
        {"mlperf_log_detail.txt", out_detail, rep->summarized},
        {"mlperf_log_accuracy.json", out_accuracy, accuracy_log},
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

/* One row of the --sweep-qps or --search-qps table. */
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
    fprintf(f, "QPS %s %s: %zu rate%s\n", strncmp(sweep_tag, "search", 6) == 0 ? "search" : "sweep",
            sweep_tag, n, n == 1 ? "" : "s");
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

int lb_loadrun(const lb_loadrun_params *lp) {
    lb_loadgen_params *p = lp->p;
    const char *cmd = lp->command;
    bool searching = lp->search.start_qps > 0, grouped = lp->rates != NULL || searching;
    progress_ctx pc = {.command = cmd, .label = ""};
    lb_progress_init(&pc.prog, lp->common->verbosity >= 0);
    p->progress = print_progress;
    p->progress_user = &pc;
    /* A sweep's or search's runs carry one tag that groups them: sweep:<start time>-<pid>. */
    char group_tag[64] = "";
    if (grouped) {
        time_t now = time(NULL);
        struct tm tm;
        gmtime_r(&now, &tm);
        char when[32];
        strftime(when, sizeof when, "%Y%m%dT%H%M%SZ", &tm);
        snprintf(group_tag, sizeof group_tag, "%s:%s-%ld", searching ? "search" : "sweep", when,
                 (long)getpid());
    }
    lb_search search;
    if (searching) lb_search_init(&search, &lp->search);
    size_t n_planned = searching ? (size_t)lp->search.max_trials : lp->rates ? lp->n_rates : 1;
    sweep_row *rows = calloc(n_planned ? n_planned : 1, sizeof *rows);
    if (rows == NULL) {
        fprintf(stderr, "llmbench %s: out of memory\n", cmd);
        return 1;
    }
    size_t n_rows = 0;
    json_t *doc = grouped && lp->common->json ? json_array() : NULL;
    bool any_failed = false, any_invalid = false, none_ran = true, any_ok = false;
    lb_status last = LB_OK;
    for (size_t k = 0; k < n_planned && last != LB_ERR_INTERRUPTED; k++) {
        double rate = p->qps;
        if (searching && !lb_search_next(&search, &rate)) break;
        if (lp->rates != NULL) rate = lp->rates[k];
        p->qps = rate;
        if (searching)
            snprintf(pc.label, sizeof pc.label, " [search trial %zu: %g q/s]", k + 1, rate);
        else if (grouped)
            snprintf(pc.label, sizeof pc.label, " [rate %zu/%zu: %g q/s]", k + 1, n_planned, rate);
        lb_result *r = lb_result_new(cmd, lp->name);
        for (int i = 0; i < lp->n_tags; i++)
            lb_result_add_tag(r, lp->tags[i], strlen(lp->tags[i]));
        if (grouped) json_array_append_new(r->tags, json_string(group_tag));
        json_decref(r->config);
        r->config = lb_loadgen_config_json(p, lp->ds);
        run_work w = {.lp = lp};
        int64_t run_id = -1;
        lb_err err = {""};
        lb_status st = lb_runctl_run(lp->common, lp->argc, lp->argv, r, do_run, &w, &run_id, &err);
        lb_progress_done(&pc.prog);
        if (!w.rep.summarized) {
            fprintf(stderr, "llmbench %s: %s\n", cmd, err.msg);
        } else {
            none_ran = false;
            json_t *rj = lp->common->json ? run_json(r, run_id, &w.rep) : NULL;
            if (lp->common->json && rj == NULL) { /* never an empty --json with exit 0 */
                fprintf(stderr,
                        "llmbench %s: the run cannot be written as JSON (a string not UTF-8, or "
                        "out of memory)\n",
                        cmd);
                st = LB_ERR_FORMAT;
            } else if (rj != NULL && doc != NULL) {
                json_array_append_new(doc, rj);
            } else if (rj != NULL) {
                doc = rj;
            } else if (!grouped) {
                lb_loadgen_summary_write(stdout, &w.rep.summary, lp->sut_name);
            }
            if (lp->out_dir != NULL) {
                char dir[4096];
                if (grouped && mkdir(lp->out_dir, 0777) != 0 && errno != EEXIST) {
                    LB_ERROR("--out %s: cannot create the directory: %s", lp->out_dir,
                             strerror(errno));
                    st = LB_ERR_IO;
                }
                snprintf(dir, sizeof dir, grouped ? "%s/qps%g" : "%s", lp->out_dir, rate);
                lb_mlperf_detail_info info = {.sut_name = lp->sut_name,
                                              .version = lb_version_string,
                                              .start_wall_s = r->start_wall_s};
                if (st != LB_ERR_IO &&
                    write_out(dir, r, run_id, &w.rep, lp->ds, &info, lp->tok) != LB_OK &&
                    st == LB_OK)
                    st = LB_ERR_IO;
            }
            /* the system under test named: the line may be all a script's log keeps (a
             * failed --out has said why itself) */
            if (st != LB_OK && err.msg[0] != '\0')
                fprintf(stderr, "llmbench %s: %s: %s\n", cmd, lp->sut_name, err.msg);
            any_invalid |= st == LB_OK && !w.rep.summary.valid;
        }
        rows[k] = sweep_row_of(rate, run_id, r, &w.rep);
        any_ok |= rows[k].status == LB_RUN_OK;
        /* a search's trial that failed (too many failed queries at that rate) is one
         * more rate that is not VALID; a sweep reports it as failed */
        if (searching && st == LB_ERR_RUNTIME) st = LB_OK;
        any_failed |= st != LB_OK && st != LB_ERR_INTERRUPTED;
        if (st != LB_OK) last = st;
        n_rows = k + 1;
        bool measured = w.rep.summarized;
        if (searching)
            lb_search_report(&search, rate, rows[k].status == LB_RUN_OK && rows[k].valid);
        lb_loadgen_report_free(&w.rep);
        lb_result_free(r);
        if (!measured) break; /* nothing could run (the store, memory): neither can the rest */
    }
    if (grouped && !lp->common->json) print_sweep_table(stdout, group_tag, rows, n_rows);
    double best = highest_valid(rows, n_rows);
    if (grouped && lp->common->json)
        doc = json_pack("{s:s, s:o, s:o}", searching ? "search" : "sweep", group_tag,
                        "highest_valid_qps", isnan(best) ? json_null() : json_real(best), "runs",
                        doc);
    if (doc != NULL) {
        json_dumpf(doc, stdout, JSON_INDENT(1));
        printf("\n");
        json_decref(doc);
    }
    free(rows);
    /* The exit rule (README): interrupted 130, failed 1, INVALID 3, else 0; a search that
     * found a VALID rate succeeded, one that found none is INVALID, one whose every trial
     * failed (nothing answering) failed. */
    if (last == LB_ERR_INTERRUPTED) return lb_status_exit_code(last);
    if (any_failed || none_ran) return lb_status_exit_code(last != LB_OK ? last : LB_ERR_RUNTIME);
    if (searching && !any_ok) return lb_status_exit_code(LB_ERR_RUNTIME); /* every trial failed */
    if (searching) return isnan(best) ? LB_EXIT_INVALID : 0;
    return any_invalid ? LB_EXIT_INVALID : 0;
}
