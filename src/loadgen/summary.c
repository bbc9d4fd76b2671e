/* summary.c: the mlperf_log_summary.txt-style text writer (summary.h). */
#include "loadgen/summary.h"

#include <math.h>
#include <string.h>

#include "accuracy/rouge.h"

#define RULE "================================================\n"

static long long ns_of(double ms) {
    return isfinite(ms) ? llround(ms * 1e6) : -1;
}

static const char *yes(bool b) {
    return b ? "Yes" : "NO";
}

/* "Min latency (ns) : ..." and the percentiles, MLPerf's labels; a distribution with no
 * sample is one line saying so. */
static void dist_ns(FILE *f, const lb_dist *d, const char *min_label, const char *max_label,
                    const char *mean_label, const char *pct_label) {
    if (d->n == 0) {
        fprintf(f, "%s: not measured\n", min_label);
        return;
    }
    fprintf(f, "%s: %lld\n", min_label, ns_of(d->min));
    fprintf(f, "%s: %lld\n", max_label, ns_of(d->max));
    fprintf(f, "%s: %lld\n", mean_label, ns_of(d->mean));
    for (int i = 0; i < LB_N_PCTL; i++)
        fprintf(f, "%.2f percentile %s: %lld\n", lb_loadgen_pctl_levels[i], pct_label,
                ns_of(d->p[i]));
}

/* One row of the per-request table: mean, std, p50, p90, p99 and the chosen levels;
 * scale turns the stored unit into the printed one (ms -> ns: 1e6). */
static void table_row(FILE *f, const lb_loadgen_summary *s, const char *label, const lb_dist *d,
                      double scale) {
    fprintf(f, "%-28s", label);
    if (d->n == 0) {
        fprintf(f, " not measured\n");
        return;
    }
    const double v[] = {d->mean, d->std, d->p[0], d->p[1], d->p[4]};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        fprintf(f, " %14.1f", v[i] * scale);
    for (int i = 0; i < s->n_user_pctl; i++)
        fprintf(f, " %14.1f", d->user_p[i] * scale);
    fprintf(f, "\n");
}

static void request_table(FILE *f, const lb_loadgen_summary *s) {
    fprintf(f, "\n%-28s %14s %14s %14s %14s %14s", "Per request", "mean", "std", "p50", "p90",
            "p99");
    for (int i = 0; i < s->n_user_pctl; i++) {
        char tag[24];
        lb_loadgen_pctl_tag(s->user_pctl[i], tag, sizeof tag);
        fprintf(f, " %14s", tag);
    }
    fprintf(f, "\n");
    table_row(f, s, "TTFT (ns)", &s->ttft_ms, 1e6);
    table_row(f, s, "Time to second token (ns)", &s->ttst_ms, 1e6);
    table_row(f, s, "TPOT (ns)", &s->tpot_ms, 1e6);
    table_row(f, s, "Inter-token latency (ns)", &s->itl_ms, 1e6);
    table_row(f, s, "Latency (ns)", &s->latency_ms, 1e6);
    table_row(f, s, "Output tokens/s per user", &s->user_tok_per_s, 1);
    table_row(f, s, "Input tokens", &s->input_len, 1);
    table_row(f, s, "Output tokens", &s->output_len, 1);
}

static void early_stop_server(FILE *f, const lb_early_stop *e) {
    if (e->ok)
        fprintf(f, " * Run successful.\n");
    else
        fprintf(f,
                " * Run unsuccessful.\n * Processed %lld queries.\n * Would need to run at least "
                "%lld more queries,\n with the run being successful if every additional\n query "
                "were under latency.\n",
                (long long)e->n, (long long)(e->needed - e->n));
}

static void early_stop_estimate(FILE *f, const lb_early_stop *e, double pct) {
    if (!e->ok) {
        fprintf(f,
                " * Only processed %lld queries.\n * Need to process at least %lld queries for "
                "early stopping.\n",
                (long long)e->n, (long long)e->needed);
        return;
    }
    fprintf(f,
            " * Processed at least %lld queries (%lld).\n * Would discard %lld highest latency "
            "queries.\n * Early stopping %.0fth percentile estimate: %lld\n",
            (long long)e->needed, (long long)e->n, (long long)(e->t - 1), pct, ns_of(e->estimate));
}

void lb_loadgen_summary_write(FILE *f, const lb_loadgen_summary *s, const char *sut_name) {
    const lb_constraints *c = &s->constraints;
    bool server = s->scenario == LB_SCENARIO_SERVER;
    bool offline = s->scenario == LB_SCENARIO_OFFLINE;
    fprintf(f, RULE "MLPerf Results Summary\n" RULE);
    fprintf(f, "SUT name : %s\n", sut_name);
    fprintf(f, "Scenario : %s\n", lb_loadgen_scenario_name(s->scenario));
    fprintf(f, "Mode     : %s\n", lb_loadgen_mode_name(s->mode));
    if (server) {
        fprintf(f, "Completed samples per second    : %.2f\n", s->mlperf_samples_per_s);
        fprintf(f, "Completed tokens per second: %.2f\n", s->mlperf_tok_per_s);
    } else if (offline) {
        fprintf(f, "Samples per second: %g\n", s->samples_per_s);
        fprintf(f, "Tokens per second: %g\n", s->output_tok_per_s);
    } else {
        fprintf(f, "%.0fth percentile latency (ns) : %lld\n", c->percentile,
                ns_of(s->target_latency_ms));
        fprintf(f, "%.0fth first token percentile latency (ns) : %lld\n", c->percentile,
                ns_of(s->target_ttft_ms));
    }
    fprintf(f, "Result is : %s\n", s->valid ? "VALID" : "INVALID");
    if (server) fprintf(f, "  Performance constraints satisfied : %s\n", yes(s->perf_ok));
    fprintf(f, "  Min duration satisfied : %s\n", yes(s->min_duration_ok));
    fprintf(f, "  Min queries satisfied : %s\n", yes(s->min_queries_ok));
    fprintf(f, "  Early stopping satisfied: %s\n", yes(s->early_stop_ok));
    fprintf(f, "  Every query completed : %s\n", yes(s->no_failures));
    if (!s->valid) fprintf(f, "Recommendations:\n * %s\n", s->reasons);
    /* whole answers have no TTFT or TPOT: no early stopping result on them either */
    const char *unmeasured = " * Not measured: whole answers (--no-stream) have no TTFT or TPOT.\n";
    if (server && s->mode == LB_MODE_PERFORMANCE) {
        fprintf(f, "TTFT Early Stopping Result:\n");
        if (s->streamed)
            early_stop_server(f, &s->es_ttft);
        else
            fputs(unmeasured, f);
        fprintf(f, "TPOT Early Stopping Result:\n");
        if (s->streamed)
            early_stop_server(f, &s->es_tpot);
        else
            fputs(unmeasured, f);
    } else if (!offline && s->mode == LB_MODE_PERFORMANCE) {
        fprintf(f, "Early Stopping Result:\n");
        early_stop_estimate(f, &s->es_latency, c->percentile);
        fprintf(f, "TTFT Early Stopping Result:\n");
        if (s->streamed)
            early_stop_estimate(f, &s->es_ttft, c->percentile);
        else
            fputs(unmeasured, f);
    }

    fprintf(f, "\n" RULE "Additional Stats\n" RULE);
    if (server) {
        fprintf(f, "Scheduled samples per second : %.2f\n", s->scheduled_qps);
    } else if (!offline) {
        fprintf(f, "QPS w/ loadgen overhead         : %.2f\n", s->mlperf_samples_per_s);
        fprintf(f, "QPS w/o loadgen overhead        : %.2f\n",
                s->latency_ms.mean > 0
                    ? (double)(s->concurrency ? s->concurrency : 1) * 1e3 / s->latency_ms.mean
                    : NAN);
    }
    fprintf(f, "\n");
    dist_ns(f, &s->latency_ms, "Min latency (ns)                ",
            "Max latency (ns)                ", "Mean latency (ns)               ",
            "latency (ns)   ");
    fprintf(f, "\n");
    if (server) /* LoadGen prints the headline's figure again here */
        fprintf(f, "Completed tokens per second                 : %.2f\n", s->mlperf_tok_per_s);
    dist_ns(f, &s->ttft_ms, "Min First Token latency (ns)                ",
            "Max First Token latency (ns)                ",
            "Mean First Token latency (ns)               ", "first token latency (ns)   ");
    fprintf(f, "\n");
    dist_ns(f, &s->tpot_ms, "Min Time to Output Token (ns)                ",
            "Max Time to Output Token (ns)                ",
            "Mean Time to Output Token (ns)               ", "time to output token (ns)   ");

    fprintf(f, "\n" RULE "llmbench Stats\n" RULE);
    fprintf(f, "Issued queries : %lld\n", (long long)s->issued);
    fprintf(f, "Completed queries : %lld\n", (long long)s->completed);
    fprintf(f, "Failed queries : %lld\n", (long long)s->failed);
    for (int e = 1; e < LB_QERR_COUNT; e++)
        if (s->failures[e] > 0)
            fprintf(f, "  %s : %lld\n", lb_http_qerr_name((lb_qerr)e), (long long)s->failures[e]);
    fprintf(f, "Retries : %lld\n", (long long)s->retries);
    for (int e = 1; e < LB_QERR_COUNT; e++)
        if (s->resent[e] > 0)
            fprintf(f, "  resent after %s : %lld\n", lb_http_qerr_name((lb_qerr)e),
                    (long long)s->resent[e]);
    fprintf(f, "Duration (s) : %.3f\n", s->duration_s);
    fprintf(f, "Samples per second : %.2f\n", s->samples_per_s);
    const int64_t *n = s->counted;
    fprintf(f,
            "Output tokens : %lld (counted from %s: usage %lld, tokenizer %lld, streamed "
            "chunks %lld, unknown %lld queries)\n",
            (long long)s->output_tokens, s->token_source, (long long)n[LB_TOKENS_USAGE],
            (long long)n[LB_TOKENS_TOKENIZER], (long long)n[LB_TOKENS_CHUNKS],
            (long long)n[LB_TOKENS_UNKNOWN]);
    if (n[LB_TOKENS_UNKNOWN] > 0)
        fprintf(f, "Output tokens per second : unknown (%lld whole answers without usage)\n",
                (long long)n[LB_TOKENS_UNKNOWN]);
    else
        fprintf(f, "Output tokens per second : %.2f\n", s->output_tok_per_s);
    if (isfinite(s->total_tok_per_s))
        fprintf(f, "Total tokens per second : %.2f\n", s->total_tok_per_s);
    else
        fprintf(f, "Total tokens per second : unknown (%s lengths not reported)\n",
                n[LB_TOKENS_UNKNOWN] > 0 ? "answer" : "prompt");
    if ((c->slo_ttft_ms > 0 || c->slo_tpot_ms > 0) && isfinite(s->goodput_per_s))
        fprintf(f,
                "Goodput (samples/s with TTFT <= %lld ns, TPOT <= %lld ns) : %.2f (%lld "
                "queries)\n",
                ns_of(c->slo_ttft_ms), ns_of(c->slo_tpot_ms), s->goodput_per_s, (long long)s->good);
    else if (c->slo_ttft_ms > 0 || c->slo_tpot_ms > 0)
        fprintf(f, "Goodput : not measured (the SLO bounds TTFT or TPOT)\n");
    if (s->has_rouge)
        fprintf(
            f,
            "ROUGE (F x 100) : rouge1 %.4f, rouge2 %.4f, rougeL %.4f, rougeLsum %.4f\n"
            "gen_len : %lld characters, gen_num : %lld\nAccuracy targets (MLPerf llama3.1-8b) "
            ": %s\n",
            lb_rouge_round(s->rouge[0]), lb_rouge_round(s->rouge[1]), lb_rouge_round(s->rouge[2]),
            lb_rouge_round(s->rouge[3]), (long long)s->gen_len, (long long)s->gen_num,
            !s->rouge_checked ? "not applied (they hold for the full 13,368-sample cnn_eval set)"
            : s->rouge_pass   ? "PASS"
                              : "FAIL");
    request_table(f, s);
    fprintf(f, "\n");
    dist_ns(f, &s->itl_ms, "Min inter-token latency (ns)    ", "Max inter-token latency (ns)    ",
            "Mean inter-token latency (ns)   ", "inter-token latency (ns)   ");
    fprintf(f, "\n");
    dist_ns(f, &s->queue_ms, "Min queueing delay (ns)         ", "Max queueing delay (ns)         ",
            "Mean queueing delay (ns)        ", "queueing delay (ns)   ");
    if (s->send_lag_ms.n > 0) {
        fprintf(f, "\nSend lag (sent - scheduled) p50 / p99 / max (ns) : %lld / %lld / %lld\n",
                ns_of(s->send_lag_ms.p[0]), ns_of(s->send_lag_ms.p[4]), ns_of(s->send_lag_ms.max));
        fprintf(
            f, "Hand-over lag (to libcurl - scheduled) p50 / p99 / max (ns) : %lld / %lld / %lld\n",
            ns_of(s->handover_lag_ms.p[0]), ns_of(s->handover_lag_ms.p[4]),
            ns_of(s->handover_lag_ms.max));
    }
    fprintf(f, "Connections opened before the run / by queries : %lld / %lld\n",
            (long long)s->preconnected, (long long)s->new_connections);
    fprintf(f, "\nReplicas : %zu\n", s->n_replicas);
    for (size_t i = 0; i < s->n_replicas; i++) {
        const lb_replica *r = &s->replicas[i];
        fprintf(f, "  [%zu] %s : sent %lld, completed %lld, failed %lld%s%s\n", i, r->shown,
                (long long)r->sent, (long long)r->completed, (long long)r->failed,
                r->ejected ? ", OUT OF ROTATION: " : "", r->ejected ? r->eject_reason : "");
    }

    fprintf(f, "\n" RULE "Test Parameters Used\n" RULE);
    fprintf(f, "samples_per_query : 1\n");
    fprintf(f, "target_qps : %g\n", s->target_qps);
    fprintf(f, "ttft_latency (ns): %lld\n", ns_of(c->ttft_limit_ms));
    fprintf(f, "tpot_latency (ns): %lld\n", ns_of(c->tpot_limit_ms));
    fprintf(f, "max_async_queries : %lld\n",
            (long long)(s->concurrency ? s->concurrency : s->max_inflight));
    fprintf(f, "min_duration (ms): %lld\n", llround(s->min_duration_s * 1e3));
    fprintf(f, "max_duration (ms): 0\n");
    fprintf(f, "min_query_count : %lld\n", (long long)s->min_queries);
    fprintf(f, "max_query_count : 0\n");
    fprintf(f, "qsl_rng_seed : %llu\n", (unsigned long long)s->qsl_seed);
    fprintf(f, "sample_index_rng_seed : %llu\n", (unsigned long long)s->sample_seed);
    fprintf(f, "schedule_rng_seed : %llu\n", (unsigned long long)s->schedule_seed);
    fprintf(f, "accuracy_log_rng_seed : 0\n");
    fprintf(f, "accuracy_log_probability : 0\n");
    fprintf(f, "accuracy_log_sampling_target : 0\n");
    fprintf(f, "print_timestamps : 0\n");
    fprintf(f, "performance_issue_unique : 0\n");
    fprintf(f, "performance_issue_same : 0\n");
    fprintf(f, "performance_issue_same_index : 0\n");
    fprintf(f, "performance_sample_count : %zu\n", s->n_samples);
    if (s->n_warnings == 0) {
        fprintf(f, "\nNo warnings encountered during test.\n\n");
    } else {
        fprintf(f, "\n%d warning%s encountered during test:\n", s->n_warnings,
                s->n_warnings == 1 ? "" : "s");
        for (const char *w = s->warnings; *w;) {
            size_t len = strcspn(w, "\n");
            fprintf(f, " * %.*s\n", (int)len, w);
            w += len + (w[len] == '\n');
        }
        fprintf(f, "\n");
    }
    if (s->failed > 0)
        fprintf(f, "%lld errors encountered during test.\n", (long long)s->failed);
    else
        fprintf(f, "No errors encountered during test.\n");
}
