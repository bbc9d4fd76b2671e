/* scenario_opt.c: the shared scenario and data options (scenario_opt.h). */
#include "cli/scenario_opt.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/file.h"
#include "core/log.h"
#include "loadgen/early_stop.h"
#include "loadgen/mlperf_log.h"

/* --percentiles 75,99.5: levels strictly between 0 and 100, at most LB_MAX_USER_PCTL,
 * each once, no empty item (a trailing comma). A level's metric names carry its tag
 * (lb_loadgen_pctl_tag: six significant digits, p99_5), so a level whose tag is a fixed
 * level's (99.0000001 is p99) or another given level's is refused: its figures would be
 * stored under the other level's names. Refused rather than tagged exactly, so that the
 * stored names stay short and the same from run to run; six digits tell apart any two
 * levels that a latency sample can. */
static lb_status parse_percentiles(const char *command, const char *text, lb_loadgen_params *p) {
    const char *s = text;
    p->n_user_pctl = 0;
    while (*s) {
        char *end;
        errno = 0;
        double v = strtod(s, &end);
        bool repeated = false;
        for (int i = 0; i < p->n_user_pctl; i++)
            repeated = repeated || p->user_pctl[i] == v;
        if (end == s || errno != 0 || !(v > 0 && v < 100) || (*end != ',' && *end != '\0') ||
            (*end == ',' && end[1] == '\0') || repeated || p->n_user_pctl == LB_MAX_USER_PCTL)
            return lb_args_usage_error(command,
                                       "--percentiles expects up to %d different levels between "
                                       "0 and 100 separated by commas (\"75,99.5\"), got '%s'",
                                       LB_MAX_USER_PCTL, text);
        char tag[24], other[24];
        lb_loadgen_pctl_tag(v, tag, sizeof tag);
        for (int i = 0; i < LB_N_PCTL + p->n_user_pctl; i++) {
            double w = i < LB_N_PCTL ? lb_loadgen_pctl_levels[i] : p->user_pctl[i - LB_N_PCTL];
            lb_loadgen_pctl_tag(w, other, sizeof other);
            if (strcmp(tag, other) == 0)
                return lb_args_usage_error(
                    command,
                    "--percentiles '%s': %.*s is reported as %s, the name of %s level %g; give "
                    "levels that differ from each other and from 50, 90, 95, 97, 99 and 99.9 "
                    "(always reported) within six significant digits",
                    text, (int)(end - s), s, tag, i < LB_N_PCTL ? "the fixed" : "the given", w);
        }
        p->user_pctl[p->n_user_pctl++] = v;
        s = *end ? end + 1 : end;
    }
    return LB_OK;
}

/* --slo ttft_ms=X,tpot_ms=Y: each key at most once, no empty item, the whole text whatever
 * its length. */
static lb_status parse_slo(const char *command, const char *text, lb_constraints *c) {
    const size_t len = strlen(text);
    if (len == 0 || text[0] == ',' || text[len - 1] == ',' || strstr(text, ",,") != NULL)
        return lb_args_usage_error(command,
                                   "--slo expects ttft_ms=X,tpot_ms=Y without empty items, got "
                                   "'%s'",
                                   text);
    char *buf = strdup(text);
    if (buf == NULL) {
        fprintf(stderr, "llmbench %s: out of memory\n", command);
        return LB_ERR_NOMEM;
    }
    lb_status st = LB_OK;
    double ttft = 0, tpot = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok && st == LB_OK;
         tok = strtok_r(NULL, ",", &save)) {
        double v;
        char key[16], tail;
        if (sscanf(tok, "%15[a-z_]=%lf%c", key, &v, &tail) != 2 || !(v > 0) ||
            (strcmp(key, "ttft_ms") != 0 && strcmp(key, "tpot_ms") != 0))
            st = lb_args_usage_error(command,
                                     "--slo expects ttft_ms=X,tpot_ms=Y with positive "
                                     "milliseconds, got '%s'",
                                     text);
        else if ((strcmp(key, "ttft_ms") == 0 ? ttft : tpot) > 0)
            st = lb_args_usage_error(command,
                                     "--slo '%s' gives %s twice: give each of ttft_ms and tpot_ms "
                                     "at most once",
                                     text, key);
        else
            *(strcmp(key, "ttft_ms") == 0 ? &ttft : &tpot) = v;
    }
    free(buf);
    if (st != LB_OK) return st;
    if (ttft > 0) c->slo_ttft_ms = ttft;
    if (tpot > 0) c->slo_tpot_ms = tpot;
    return LB_OK;
}

/* The queries a run plans up front (Offline, Server: the whole schedule) are held in
 * memory with 32-bit indices: a plan over LB_LOADGEN_MAX_QUERIES is refused before
 * anything runs, naming where its rate, duration and count came from. Server plans
 * about qps x min_duration arrivals (fewer by qps x ramp_up / 2 with a ramp-up), at least
 * min_queries; a sweep's highest rate counts, and a search's start rate (a trial at a
 * higher rate over the limit fails then, in lb_loadgen_run_sut). */
static lb_status check_plan_size(const char *command, const lb_scenario_opt *o,
                                 const lb_loadgen_params *p) {
    if (p->scenario != LB_SCENARIO_OFFLINE && p->scenario != LB_SCENARIO_SERVER) return LB_OK;
    if (p->mode == LB_MODE_ACCURACY) return LB_OK; /* every sample once */
    double rate = p->qps, d = p->min_duration_s, r = p->ramp_up_s;
    const char *rate_opt = o->qps > 0 ? "--qps" : "target_qps (config files)";
    for (size_t i = 0; i < o->run.n_rates; i++)
        if (o->run.rates[i] > rate) rate = o->run.rates[i], rate_opt = "--sweep-qps";
    if (o->run.search_qps > 0) rate = o->run.search_qps, rate_opt = "--search-qps";
    double timed = 0;
    if (p->scenario == LB_SCENARIO_SERVER)
        timed = rate * (r <= 0 ? d : d >= r ? d - r / 2 : d * d / (2 * r));
    const double max = (double)LB_LOADGEN_MAX_QUERIES;
    if (timed > max && timed >= (double)p->min_queries)
        return lb_args_usage_error(
            command,
            "%s %g x %s %g s plans about %.3g queries, more than the %.0f one run may hold in "
            "memory: give a lower rate or a shorter duration (rate x seconds at most %.0f)",
            rate_opt, rate, o->min_duration >= 0 ? "--min-duration" : "min_duration (config files)",
            d, timed, max, max);
    if ((double)p->min_queries > max)
        return lb_args_usage_error(
            command,
            "%s %lld plans more queries than the %.0f one run may hold in memory: give "
            "at most %.0f",
            o->min_queries > 0 ? "--min-queries" : "min_query_count (config files)",
            (long long)p->min_queries, max, max);
    return LB_OK;
}

/* A search's trials at low rates issue --min-queries queries (or the dataset's); under
 * latency bounds, fewer than early stopping needs with no late query at all make every
 * trial INVALID, and the search halves its rate to the end. */
static void warn_short_search(const char *command, const lb_scenario_opt *o,
                              const lb_loadgen_params *p) {
    const lb_constraints *c = &p->constraints;
    int64_t issued = p->min_queries > 0 ? p->min_queries : o->synthetic;
    if (!(o->run.search_qps > 0) || issued <= 0 || (c->ttft_limit_ms <= 0 && c->tpot_limit_ms <= 0))
        return;
    int64_t need = lb_early_stop_min_passing(0, c->percentile / 100.0, c->confidence);
    if (issued < need)
        LB_WARN("%s --search-qps: a trial at a low rate issues %lld queries, fewer than the %lld "
                "that early stopping needs at p%g even with no late query, so such trials are "
                "INVALID whatever their latencies: give --min-queries %lld or more",
                command, (long long)issued, (long long)need, c->percentile, (long long)need);
}

/* Reads --mlperf-conf then --user-conf (either may be NULL) for the model key (LoadGen's
 * spelling: llama3.1-8b is llama3_1-8b) and the scenario. */
static lb_status read_conf_files(const char *command, const char *mlperf_conf,
                                 const char *user_conf, const char *model_key, lb_scenario scenario,
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
        const char *option = i == 0 ? "--mlperf-conf" : "--user-conf";
        /* a file that was there but could not be read fails the run, not the command line */
        if (st == LB_ERR_IO || st == LB_ERR_NOMEM || st == LB_ERR_INTERRUPTED) {
            fprintf(stderr, "llmbench %s: %s: %s\n", command, option, err.msg);
            return st;
        }
        if (st != LB_OK) return lb_args_usage_error(command, "%s: %s", option, err.msg);
    }
    return LB_OK;
}

lb_status lb_scenario_opt_apply(const char *command, lb_scenario_opt *o, lb_loadgen_params *p) {
    lb_status st;
    if ((o->dataset == NULL) == (o->synthetic == 0))
        return lb_args_usage_error(command, "give exactly one of --dataset FILE and --synthetic N");
    lb_len_dist dist;
    lb_err err = {""};
    if (o->synthetic > 0 &&
        (lb_dataset_len_dist_parse(o->in_len, &dist, &err) != LB_OK ||
         (o->out_len && lb_dataset_len_dist_parse(o->out_len, &dist, &err) != LB_OK)))
        return lb_args_usage_error(command, "%s", err.msg);
    bool rated = lb_loadrun_opts_rated(&o->run); /* rates come from a list or a search */
    if ((o->qps > 0 || rated) && o->concurrency > 0)
        return lb_args_usage_error(
            command, "--qps, --sweep-qps and --search-qps set the Server scenario's arrival "
                     "rate and --concurrency a closed loop: give one of them");
    const char *scenario = o->scenario;
    if (scenario == NULL)
        scenario = (o->qps > 0 || rated) ? "server"
                   : o->concurrency > 0  ? "concurrency"
                                         : "offline";
    LB_TRY(lb_loadrun_opts_check(command, &o->run, o->qps, scenario));
    if ((o->burstiness != 1 || o->ramp_up > 0) && strcmp(scenario, "server") != 0)
        return lb_args_usage_error(
            command, "--burstiness and --ramp-up shape the Server scenario's arrivals, not %s",
            scenario);
    if (o->concurrency > 0 && strcmp(scenario, "concurrency") != 0)
        return lb_args_usage_error(
            command, "--concurrency applies to --scenario concurrency only, not %s", scenario);
    p->scenario = strcmp(scenario, "server") == 0         ? LB_SCENARIO_SERVER
                  : strcmp(scenario, "singlestream") == 0 ? LB_SCENARIO_SINGLE_STREAM
                  : strcmp(scenario, "concurrency") == 0  ? LB_SCENARIO_CONCURRENCY
                                                          : LB_SCENARIO_OFFLINE;
    lb_mlperf_settings conf = {0};
    LB_TRY(
        read_conf_files(command, o->mlperf_conf, o->user_conf, o->model_key, p->scenario, &conf));
    double qps = o->qps;
    if (p->scenario == LB_SCENARIO_SERVER && qps <= 0 && !rated && conf.has_target_qps)
        qps = conf.target_qps;
    if (p->scenario == LB_SCENARIO_SERVER && !(qps > 0) && !rated)
        return lb_args_usage_error(command, "--scenario server needs --qps R, --sweep-qps, "
                                            "--search-qps or a target_qps in --user-conf");
    if (p->scenario == LB_SCENARIO_CONCURRENCY && o->concurrency <= 0)
        return lb_args_usage_error(command, "--scenario concurrency needs --concurrency N");
    p->mode = strcmp(o->mode, "accuracy") == 0 ? LB_MODE_ACCURACY : LB_MODE_PERFORMANCE;
    p->qps = qps;
    p->burstiness = o->burstiness;
    p->ramp_up_s = o->ramp_up;
    p->concurrency = o->concurrency;
    p->min_duration_s = o->min_duration >= 0    ? o->min_duration
                        : conf.has_min_duration ? conf.min_duration_ms / 1e3
                                                : 0;
    p->min_queries =
        o->min_queries == 0 && conf.has_min_query_count ? conf.min_query_count : o->min_queries;
    p->max_failed = o->run.max_failed;
    p->warmup_queries = o->warmup;
    if (o->seed >= 0) {
        p->sample_seed = (uint64_t)o->seed;
        p->schedule_seed = (uint64_t)o->seed + 1000003;
    } else {
        p->sample_seed = conf.has_sample_seed ? conf.sample_seed : LB_MLPERF_SAMPLE_INDEX_SEED;
        p->schedule_seed = conf.has_schedule_seed ? conf.schedule_seed : LB_MLPERF_SCHEDULE_SEED;
    }
    p->qsl_seed = conf.has_qsl_seed ? conf.qsl_seed : LB_MLPERF_QSL_SEED;
    p->performance_sample_count = conf.has_sample_count ? conf.sample_count : 0;
    p->max_tokens = (int32_t)o->max_tokens;
    p->drain_s = o->drain_s;
    if (o->model_key &&
        lb_loadgen_constraints_for_model(o->model_key, &p->constraints, &err) != LB_OK)
        return lb_args_usage_error(command, "%s", err.msg);
    if (conf.has_ttft) p->constraints.ttft_limit_ms = conf.ttft_latency_ms;
    if (conf.has_tpot) p->constraints.tpot_limit_ms = conf.tpot_latency_ms;
    /* MLPerf's target latency percentile: Server 99, SingleStream 90 (closed loops here) */
    if (p->scenario != LB_SCENARIO_SERVER) p->constraints.percentile = 90;
    if (conf.has_percentile) p->constraints.percentile = conf.percentile;
    if (o->ttft_limit >= 0) p->constraints.ttft_limit_ms = o->ttft_limit;
    if (o->tpot_limit >= 0) p->constraints.tpot_limit_ms = o->tpot_limit;
    if (o->slo && (st = parse_slo(command, o->slo, &p->constraints)) != LB_OK) return st;
    if (o->percentiles && (st = parse_percentiles(command, o->percentiles, p)) != LB_OK) return st;
    LB_TRY(check_plan_size(command, o, p));
    warn_short_search(command, o, p);
    p->model_key = o->model_key;
    p->request.ignore_eos = o->ignore_eos;
    p->request.temperature = o->temperature;
    return LB_OK;
}

lb_status lb_scenario_opt_dataset(const char *command, const lb_scenario_opt *o,
                                  const lb_tokenizer *tok, int32_t prefix_len, size_t n_prefixes,
                                  lb_loadgen_params *p, lb_dataset *ds) {
    lb_err err = {""};
    lb_status st;
    if (o->synthetic > 0) {
        lb_dataset_synthetic_params sp = lb_dataset_synthetic_default_params();
        sp.n_samples = (size_t)o->synthetic;
        sp.seed = o->seed >= 0 ? (uint64_t)o->seed : 1;
        sp.tok = tok;
        sp.prefix_len = prefix_len;
        sp.n_prefixes = n_prefixes;
        char fixed[32];
        snprintf(fixed, sizeof fixed, "fixed:%lld", (long long)o->max_tokens);
        if (lb_dataset_len_dist_parse(o->in_len, &sp.input, &err) != LB_OK ||
            lb_dataset_len_dist_parse(o->out_len ? o->out_len : fixed, &sp.output, &err) != LB_OK)
            return lb_args_usage_error(command, "%s", err.msg);
        st = lb_dataset_synthetic(&sp, ds, &err);
        p->dataset_path = "synthetic";
    } else {
        st = lb_dataset_load(o->dataset, o->format, ds, &err);
        p->dataset_path = o->dataset;
        if (st == LB_OK && tok != NULL && (st = lb_dataset_count_tokens(ds, tok, &err)) != LB_OK)
            lb_dataset_free(ds);
    }
    if (st != LB_OK) {
        fprintf(stderr, "llmbench %s: %s%s\n", command, o->dataset ? "--dataset: " : "", err.msg);
        return st == LB_ERR_FORMAT ? LB_ERR_USAGE : st;
    }
    if (ds->skipped > 0)
        LB_WARN("dataset %s: %zu records without a prompt and a reply were skipped",
                p->dataset_path, ds->skipped);
    return LB_OK;
}
