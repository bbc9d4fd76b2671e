/* cmd_tokenize.c: `llmbench tokenize --tokenizer FILE TEXTFILE...`: token counts of text
 * files with a tiktoken-style vocabulary (model/tokenizer.h), the ids with --ids, and the
 * speed of the count path the load generator uses with --repeat.
 *
 * Each file is read whole and counted as one text, bytes as they are (invalid UTF-8 passes
 * through). With --repeat N the count runs N times on one thread and the median time gives
 * tok/s and MB/s. Nothing is stored: counting tokens is a calculation, not a run. */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/tokenizer_opt.h"
#include "core/clock.h"
#include "core/file.h"
#include "core/signals.h"
#include "core/stats.h"
#include "core/utf8text.h"

static lb_status print_ids(FILE *out, const lb_tokenizer *tok, const char *text, size_t n,
                           json_t *rec, lb_err *err) {
    uint32_t *ids = NULL;
    size_t n_ids = 0;
    LB_TRY(lb_tokenizer_encode(tok, text, n, &ids, &n_ids, err));
    json_t *arr = rec ? json_array() : NULL;
    for (size_t i = 0; i < n_ids; i++) {
        if (arr)
            json_array_append_new(arr, json_integer(ids[i]));
        else
            fprintf(out, i ? " %u" : "%u", ids[i]);
    }
    if (arr)
        json_object_set_new(rec, "ids", arr);
    else
        fprintf(out, "\n");
    free(ids);
    return LB_OK;
}

/* LB_ERR_INTERRUPTED naming path when SIGINT or SIGTERM arrived, else LB_OK. */
static lb_status check_interrupted(const char *path, lb_err *err) {
    if (!lb_signals_interrupted()) return LB_OK;
    return lb_fail(err, LB_ERR_INTERRUPTED, "interrupted by a signal at %s; nothing is printed",
                   path);
}

/* Counts text `repeat` times; writes the count and the median seconds. A signal stops it
 * between two counts (path names the text in the message). */
static lb_status time_count(const lb_tokenizer *tok, const char *path, const char *text, size_t n,
                            int repeat, int64_t *tokens, double *median_s, lb_err *err) {
    double *s = malloc((size_t)repeat * sizeof *s);
    if (s == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of memory");
    lb_status st = LB_OK;
    int done = 0;
    while (done < repeat && (st = check_interrupted(path, err)) == LB_OK) {
        int64_t t0 = lb_clock_now_ns();
        st = lb_tokenizer_count(tok, text, n, tokens, err);
        s[done++] = (double)(lb_clock_now_ns() - t0) * 1e-9;
        if (st != LB_OK) break;
    }
    *median_s = lb_stats_median(s, (size_t)done);
    free(s);
    return st;
}

int lb_cmd_tokenize(int argc, char **argv) {
    lb_tokenizer_opt topt = LB_TOKENIZER_OPT_DEFAULT;
    bool ids = false;
    int64_t repeat = 1;
    const lb_arg_spec specs[] = {
        LB_TOKENIZER_ARG_SPECS(&topt),
        {"--ids", LB_ARG_FLAG, &ids, NULL, "print each file's token ids instead of its count", 0, 0,
         NULL},
        {"--repeat", LB_ARG_INT, &repeat, "N",
         "count each file N times and report the median time (default 1)", 1, 1000000, NULL},
    };
    const lb_cli_command cmd = {
        .command = "tokenize",
        .usage = "--tokenizer FILE [options] TEXTFILE...",
        .summary = "Counts the tokens of each text file (read whole, as one text) with a "
                   "byte-level BPE vocabulary (tiktoken's ranks format or a Hugging Face "
                   "tokenizer.json), as `load --tokenizer` counts generated texts, and reports "
                   "the count's speed on one thread; --ids prints the ids instead. Exit "
                   "status: 0, 1 a file that cannot be read, 2 bad usage or a malformed "
                   "tokenizer file, 130 interrupted (nothing printed).",
        LB_ARG_SPECS(specs),
        .min_positional = 1,
        .max_positional = LB_ARGS_MAX_POSITIONAL,
    };
    lb_args a;
    int rc = lb_args_parse(&cmd, argc, argv, &a);
    if (rc != LB_ARGS_GO_ON) return rc;
    if (topt.path == NULL)
        return lb_status_exit_code(lb_args_usage_error("tokenize", "--tokenizer FILE is required"));
    if (ids && repeat != 1)
        return lb_status_exit_code(lb_args_usage_error(
            "tokenize", "--repeat times the count, and --ids prints the ids once, untimed: give "
                        "one of them"));

    lb_err err = {{0}};
    lb_tokenizer *tok = NULL;
    lb_status st = lb_tokenizer_opt_open(&topt, &tok, &err);
    if (st != LB_OK) {
        fprintf(stderr, "llmbench tokenize: %s\n", err.msg);
        return lb_status_exit_code(st == LB_ERR_FORMAT ? LB_ERR_USAGE : st);
    }
    char about[512];
    lb_tokenizer_opt_describe(&topt, tok, about, sizeof about);
    json_t *doc = a.common.json ? json_object() : NULL, *files = json_array();
    /* A path need not be UTF-8 and jansson writes no string that is not: the JSON names
     * its bytes that are not as '?' (the table prints them as they are). */
    if (doc) json_object_set_new(doc, "tokenizer", json_string(lb_utf8text_repair(about)));
    /* The table is kept until every file is done: a file that fails prints only its error. */
    char *table = NULL;
    size_t table_len = 0;
    FILE *out = open_memstream(&table, &table_len);
    if (out == NULL) st = lb_fail(&err, LB_ERR_NOMEM, "out of memory");
    if (out && !doc && !ids) fprintf(out, "tokenizer %s\n", about);
    for (int i = 0; i < a.n_pos && st == LB_OK; i++) {
        char *text = NULL;
        size_t n = 0;
        st = check_interrupted(a.pos[i], &err);
        if (st == LB_OK) st = lb_file_read(a.pos[i], &text, &n, &err);
        if (st != LB_OK) break;
        json_t *rec = doc ? json_object() : NULL;
        char *path = rec ? strdup(a.pos[i]) : NULL;
        if (path) json_object_set_new(rec, "path", json_string(lb_utf8text_repair(path)));
        free(path);
        if (rec) json_object_set_new(rec, "bytes", json_integer((json_int_t)n));
        if (ids) {
            st = print_ids(out, tok, text, n, rec, &err);
        } else {
            int64_t tokens = 0;
            double sec = 0;
            st = time_count(tok, a.pos[i], text, n, (int)repeat, &tokens, &sec, &err);
            double tok_per_s = sec > 0 ? (double)tokens / sec : 0;
            if (rec) {
                json_object_set_new(rec, "tokens", json_integer(tokens));
                json_object_set_new(rec, "count_s_median", json_real(sec));
                json_object_set_new(rec, "repeats", json_integer(repeat));
                json_object_set_new(rec, "tok_per_s", json_real(tok_per_s));
            } else if (st == LB_OK) {
                fprintf(out,
                        "%s: %" PRId64 " tokens, %zu bytes; count %.3g s (median of %" PRId64
                        "), %.2f M tok/s, %.1f MB/s on one thread\n",
                        a.pos[i], tokens, n, sec, repeat, tok_per_s / 1e6,
                        sec > 0 ? (double)n / sec / 1e6 : 0);
            }
        }
        if (rec) json_array_append_new(files, rec);
        free(text);
    }
    if (out) fclose(out);
    if (!doc && st == LB_OK) fwrite(table, 1, table_len, stdout);
    free(table);
    if (doc && st == LB_OK) {
        json_object_set_new(doc, "files", files);
        json_dumpf(doc, stdout, JSON_INDENT(2));
        printf("\n");
    } else {
        json_decref(files);
    }
    json_decref(doc);
    lb_tokenizer_free(tok);
    /* the message names a file, whose path may hold a newline */
    if (st != LB_OK) fprintf(stderr, "llmbench tokenize: %s\n", lb_status_printable(err.msg));
    return lb_status_exit_code(st);
}
