/* cmd_results.c: `llmbench results list|show|export|import`: read the results store, and add
 * results exported elsewhere.
 *
 * list: stored runs, newest first, filtered by kind and status. show ID: one run's
 * config, provenance summary, metrics and series (names and sample counts; the samples
 * themselves come out through export). export [ID...]: runs with every raw sample as JSON
 * or CSV (store/store.h defines both), on stdout or into a file that appears whole or not
 * at all (temporary file, fsync, rename). import FILE: stores a result that a run kept in
 * a file when its final write failed (store.h's lb_store_keep_aside), or each run of a JSON
 * export, once: a result imported before is named, not stored again (unless --again). Exit codes: 2
 * for bad usage (unknown subcommand or option, a malformed or missing ID), 1 when a run is not
 * found, the database cannot be read or the output cannot be written, 130 when interrupted (an
 * export stops between runs and writes nothing, an import stops before committing the run it
 * stores, waiting for FILE's content or the write lock included, keeping only the runs stored
 * before; core/signals.h: a second signal ends any subcommand at once), 0
 * otherwise. list, show and export open the database read-only: they never create, upgrade or
 * write it. */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/output.h"
#include "core/clock.h"
#include "core/file.h"
#include "core/signals.h"
#include "core/utf8text.h"
#include "history/bench.h"
#include "history/openmetrics.h"
#include "store/store.h"

#define MAX_EXPORT_IDS 1024

/* "llmbench results show: <sentence>" on stderr; returns the exit code for status. */
static int report_failure(const char *command, lb_status status, const lb_err *err) {
    fprintf(stderr, "llmbench %s: %s\n", command, err->msg);
    return lb_status_exit_code(status);
}

/* A run id is a positive decimal integer; anything else is a usage error naming it. */
static lb_status parse_id(const char *command, const char *text, int64_t *id) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (isdigit((unsigned char)text[0]) && *end == '\0' && errno == ERANGE)
        return lb_args_usage_error(command, "run ID '%s' is out of range: IDs are at most %lld",
                                   text, LLONG_MAX);
    if (!isdigit((unsigned char)text[0]) || errno != 0 || *end != '\0' || v <= 0)
        return lb_args_usage_error(command,
                                   "malformed run ID '%s': expected a positive integer such as "
                                   "12, as shown by 'llmbench results list'",
                                   text);
    *id = (int64_t)v;
    return LB_OK;
}

static void format_time(double wall_s, char *buf, size_t cap) {
    if (isnan(wall_s))
        snprintf(buf, cap, "-");
    else
        lb_clock_format_iso(wall_s, buf, cap);
}

static void format_duration(double start_s, double end_s, char *buf, size_t cap) {
    if (isnan(start_s) || isnan(end_s))
        snprintf(buf, cap, "-");
    else
        snprintf(buf, cap, "%.1f s", end_s - start_s);
}

/* text into buf with every control character (below 0x20, and DEL) written as \n, \t,
 * \r or \xHH, so a stored name cannot move the cursor, clear the screen or forge a line
 * of the table. */
static const char *printable(const char *text, char *buf, size_t cap) {
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)text; *p && n + 5 < cap; p++) {
        if (*p >= 0x20 && *p != 0x7f) {
            buf[n++] = (char)*p;
            continue;
        }
        const char *esc = *p == '\n' ? "\\n" : *p == '\t' ? "\\t" : *p == '\r' ? "\\r" : NULL;
        n += esc ? (size_t)snprintf(buf + n, cap - n, "%s", esc)
                 : (size_t)snprintf(buf + n, cap - n, "\\x%02x", *p);
    }
    buf[n] = '\0';
    return buf;
}

/* Stored text of any length (a config value, a command line) on stdout as printable()
 * writes it. */
static void put_printable(const char *text) {
    size_t cap = 4 * strlen(text) + 6;
    char *buf = malloc(cap);
    fputs(buf ? printable(text, buf, cap) : "?", stdout);
    free(buf);
}

/* JSON has no NaN: an unknown time is null. */
static json_t *json_time(double wall_s) {
    return isnan(wall_s) ? json_null() : json_real(wall_s);
}

/* The database's path as a JSON string. A path is bytes and JSON text is UTF-8 (jansson
 * makes no string of other bytes, and the document holding it would not be printed at
 * all): each byte that starts no UTF-8 character reads '?', as in stored names. */
static json_t *json_db_path(const lb_store *s) {
    char path[LB_STORE_PATH_BYTES];
    snprintf(path, sizeof path, "%s", lb_store_path(s));
    return json_string(lb_utf8text_repair(path));
}

static lb_status open_store(const char *command, const lb_cli_common *common, lb_store **s,
                            int *exit_code) {
    lb_err err = {{0}};
    lb_status st = lb_store_open_read(common->db_path, s, &err);
    if (st != LB_OK) *exit_code = report_failure(command, st, &err);
    return st;
}

/* ---- list ---- */

/* The stored tags text as JSON (an empty array where it does not parse). */
static json_t *tags_json(const char *text) {
    json_t *j = json_loads(text, 0, NULL);
    return j != NULL ? j : json_array();
}

/* more: the store holds more runs than the n listed (--limit cut them). */
static void print_list_json(const lb_store *s, const lb_store_run_info *runs, size_t n, bool more) {
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(
            arr, json_pack("{s:I, s:s, s:s, s:s, s:o, s:s, s:o, s:o, s:I, s:o}", "id",
                           (json_int_t)runs[i].id, "kind", runs[i].kind, "name", runs[i].name,
                           "status", lb_result_status_name(runs[i].status), "valid",
                           runs[i].valid < 0 ? json_null() : json_boolean(runs[i].valid), "failure",
                           runs[i].failure, "start_wall_s", json_time(runs[i].start_wall_s),
                           "end_wall_s", json_time(runs[i].end_wall_s), "n_samples",
                           (json_int_t)runs[i].n_samples, "tags", tags_json(runs[i].tags)));
    json_t *doc = json_pack("{s:o, s:o, s:b}", "db", json_db_path(s), "runs", arr, "more", more);
    json_dumpf(doc, stdout, JSON_INDENT(2));
    printf("\n");
    json_decref(doc);
}

/* more: the store holds more runs than the n listed (--limit cut them). */
static void print_list_table(const lb_store *s, const lb_store_filter *f,
                             const lb_store_run_info *runs, size_t n, bool more) {
    if (n == 0 && (f->kind != NULL || f->status >= 0)) {
        char kind[64 * 4];
        printf("no runs%s%s%s%s%s in %s\n", f->kind ? " of kind '" : "",
               f->kind ? printable(f->kind, kind, sizeof kind) : "", f->kind ? "'" : "",
               f->status >= 0 ? " with status " : "",
               f->status >= 0 ? lb_result_status_name((lb_run_status)f->status) : "",
               lb_store_path(s));
        return;
    }
    if (n == 0) {
        printf("no runs in %s\n", lb_store_path(s));
        return;
    }
    printf("%-6s %-11s %-8s %-8s %-24s %10s %9s  %s\n", "ID", "STATUS", "RESULT", "KIND", "START",
           "DURATION", "SAMPLES", "NAME");
    for (size_t i = 0; i < n; i++) {
        char start[40], duration[32], kind[sizeof runs[i].kind * 4], name[sizeof runs[i].name * 4];
        format_time(runs[i].start_wall_s, start, sizeof start);
        format_duration(runs[i].start_wall_s, runs[i].end_wall_s, duration, sizeof duration);
        const char *verdict = runs[i].valid < 0 ? "-" : runs[i].valid ? "VALID" : "INVALID";
        printf("%-6" PRId64 " %-11s %-8s %-8s %-24s %10s %9" PRId64 "  %s", runs[i].id,
               lb_result_status_name(runs[i].status), verdict,
               printable(runs[i].kind, kind, sizeof kind), start, duration, runs[i].n_samples,
               printable(runs[i].name, name, sizeof name));
        if (strcmp(runs[i].tags, "[]") != 0) {
            printf(" ");
            put_printable(runs[i].tags);
        }
        printf("\n");
    }
    if (more) printf("(the %zu newest runs; --limit 0 lists all)\n", n);
}

static int results_list(int argc, char **argv) {
    const char *kind = NULL, *status = NULL;
    int64_t limit = 50;
    const lb_arg_spec specs[] = {
        {"--kind", LB_ARG_STRING, &kind, "KIND", "only runs of this kind (train, infer, ...)", 0, 0,
         NULL},
        {"--status", LB_ARG_CHOICE, &status, NULL, "only runs with this status", 0, 0,
         "running|ok|failed|interrupted"},
        {"--limit", LB_ARG_INT, &limit, "N",
         "at most N runs, newest first; 0: all (default 50); with --json, \"more\" is true when "
         "it left runs out",
         0, 1e12, NULL},
    };
    const lb_cli_command cmd = {
        .command = "results list",
        .uses_db = true,
        .usage = "[options]",
        .summary = "Lists stored runs, newest first: id, status, result (VALID or INVALID "
                   "for runs with an MLPerf-style verdict, else -), kind, start time, duration, "
                   "number of raw samples, name and tags. A run still marked running was "
                   "either in progress or ended by a crash.",
        LB_ARG_SPECS(specs),
    };
    lb_args a;
    int rc = lb_args_parse(&cmd, argc, argv, &a);
    if (rc != LB_ARGS_GO_ON) return rc;

    int code = 0;
    lb_store *s = NULL;
    if (open_store(cmd.command, &a.common, &s, &code) != LB_OK) return code;
    lb_store_filter filter = lb_store_default_filter();
    filter.kind = kind;
    filter.status = status ? lb_result_status_parse(status) : -1;
    filter.limit = limit > 0 ? limit + 1 : 0; /* one more tells whether --limit cut any */
    lb_store_run_info *runs = NULL;
    size_t n = 0;
    lb_err err = {{0}};
    lb_status st = lb_store_list(s, &filter, &runs, &n, &err);
    bool more = limit > 0 && (int64_t)n > limit;
    if (more) n = (size_t)limit;
    if (st != LB_OK)
        code = report_failure(cmd.command, st, &err);
    else if (a.common.json)
        print_list_json(s, runs, n, more);
    else
        print_list_table(s, &filter, runs, n, more);
    free(runs);
    lb_store_close(s);
    return code;
}

/* ---- show ---- */

/* Numbers with 15 significant digits, so 3e-4 reads 0.0003, not its exact binary value;
 * strings bare, their control characters escaped as in names. */
static void print_json_value(const char *key, const json_t *v, int indent) {
    char *text = json_is_string(v)
                     ? NULL
                     : json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(15));
    char k[1024];
    printf("%*s%-20s ", indent, "", printable(key, k, sizeof k));
    put_printable(text ? text : json_string_value(v));
    printf("\n");
    free(text);
}

static const char *prov_text(const json_t *prov, const char *key) {
    const char *v = json_string_value(json_object_get(prov, key));
    return v ? v : "?";
}

static void print_provenance_summary(const json_t *prov) {
    printf("provenance:\n  %-20s ", "host");
    put_printable(prov_text(prov, "hostname"));
    printf("\n  %-20s ", "os");
    put_printable(prov_text(prov, "os"));
    printf(", kernel ");
    put_printable(prov_text(prov, "kernel"));
    printf("\n  %-20s ", "cpu");
    put_printable(prov_text(prov, "cpu_model"));
    printf(" (%" JSON_INTEGER_FORMAT " cores)\n  %-20s ",
           json_integer_value(json_object_get(prov, "cpu_cores")), "gpus");
    const json_t *gpus = json_object_get(prov, "gpus");
    if (json_array_size(gpus) == 0) printf("none");
    size_t i;
    const json_t *g;
    json_array_foreach(gpus, i, g) {
        const char *name = json_string_value(json_object_get(g, "name"));
        printf("%s", i ? ", " : "");
        put_printable(name ? name : "?");
    }
    printf("\n  %-20s ", "llmbench");
    put_printable(prov_text(prov, "llmbench_version"));
    printf(" (commit ");
    put_printable(prov_text(prov, "llmbench_commit"));
    printf(")\n  %-20s", "command");
    const json_t *arg;
    json_array_foreach(json_object_get(prov, "command_line"), i, arg) {
        printf(" ");
        put_printable(json_string_value(arg) ? json_string_value(arg) : "?");
    }
    printf("\n");
}

static void print_show_text(int64_t id, const lb_result *r) {
    char start[40], end[40], duration[32];
    format_time(r->start_wall_s, start, sizeof start);
    format_time(r->end_wall_s, end, sizeof end);
    format_duration(r->start_wall_s, r->end_wall_s, duration, sizeof duration);
    char name[sizeof r->name * 4], kind[sizeof r->kind * 4], failure[sizeof r->failure * 4];
    printf("run %" PRId64 ": %s (%s)\n", id, printable(r->name, name, sizeof name),
           printable(r->kind, kind, sizeof kind));
    printf("  %-20s %s\n", "status", lb_result_status_name(r->status));
    if (r->failure[0])
        printf("  %-20s %s\n", "failure", printable(r->failure, failure, sizeof failure));
    printf("  %-20s %s\n  %-20s %s\n  %-20s %s\n", "started", start, "ended", end, "duration",
           duration);
    char *tags = json_dumps(r->tags, JSON_COMPACT); /* escapes all control characters but DEL */
    printf("  %-20s ", "tags");
    put_printable(tags ? tags : "[]");
    printf("\n");
    free(tags);

    printf("config:\n");
    const char *key;
    json_t *v;
    json_object_foreach(r->config, key, v) print_json_value(key, v, 2);
    print_provenance_summary(r->provenance);

    printf("metrics:\n");
    if (r->n_metrics == 0) printf("  none\n");
    for (size_t i = 0; i < r->n_metrics; i++) {
        char value[64], unit[LB_UNIT_BYTES * 4], metric[LB_NAME_BYTES * 4];
        lb_output_format_value(value, sizeof value, r->metrics[i].value,
                               printable(r->metrics[i].unit, unit, sizeof unit));
        printf("  %-32s %s\n", printable(r->metrics[i].name, metric, sizeof metric), value);
    }
    printf("series (raw samples: 'llmbench results export %" PRId64 "'):\n", id);
    if (r->n_series == 0) printf("  none\n");
    for (size_t i = 0; i < r->n_series; i++) {
        char series[LB_NAME_BYTES * 4], unit[LB_UNIT_BYTES * 4];
        printf("  %-32s %10zu samples  %s\n", printable(r->series[i].name, series, sizeof series),
               r->series[i].n, printable(r->series[i].unit, unit, sizeof unit));
    }
}

/* The show view as JSON: the whole result with its id, but each series as its unit and
 * sample count (export gives the samples). */
static void print_show_json(int64_t id, const lb_result *r) {
    json_t *body = lb_result_to_json(r);
    json_t *series = json_object();
    for (size_t i = 0; i < r->n_series; i++)
        json_object_set_new(
            series, r->series[i].name,
            json_pack("{s:s, s:I}", "unit", r->series[i].unit, "n", (json_int_t)r->series[i].n));
    json_object_set_new(body, "series", series);
    json_t *doc = json_pack("{s:I}", "id", (json_int_t)id);
    json_object_update(doc, body);
    json_dumpf(doc, stdout, JSON_INDENT(2));
    printf("\n");
    json_decref(body);
    json_decref(doc);
}

static int results_show(int argc, char **argv) {
    const lb_cli_command cmd = {
        .command = "results show",
        .uses_db = true,
        .usage = "ID [options]",
        .summary = "Shows one stored run: status, times, config, where it ran, its summary "
                   "metrics and its series of raw samples (names and counts). Exit code 2 for "
                   "a malformed ID, 1 when no run has this ID.",
        .specs = NULL,
        .n_specs = 0,
        .max_positional = 1,
    };
    lb_args a;
    int rc = lb_args_parse(&cmd, argc, argv, &a);
    if (rc != LB_ARGS_GO_ON) return rc;
    if (a.n_pos == 0)
        return lb_status_exit_code(lb_args_usage_error(
            cmd.command, "missing run ID: expected one ID such as 12, as shown by "
                         "'llmbench results list'"));
    int64_t id = 0;
    if (parse_id(cmd.command, a.pos[0], &id) != LB_OK) return 2;

    int code = 0;
    lb_store *s = NULL;
    if (open_store(cmd.command, &a.common, &s, &code) != LB_OK) return code;
    lb_result *r = NULL;
    lb_err err = {{0}};
    lb_status st = lb_store_run_load(s, id, &r, &err);
    if (st != LB_OK)
        code = report_failure(cmd.command, st, &err);
    else if (a.common.json)
        print_show_json(id, r);
    else
        print_show_text(id, r);
    lb_result_free(r);
    lb_store_close(s);
    return code;
}

/* ---- export ---- */

/* What an export writes: the store's runs, or with openmetrics the benchmarks' newest
 * values. */
typedef struct {
    lb_store *s;
    const int64_t *ids;
    size_t n_ids;
    lb_store_format format;
    bool openmetrics;
} export_job;

static lb_status write_export(FILE *out, void *ctx, lb_err *err) {
    export_job *j = ctx;
    return j->openmetrics ? lb_openmetrics_write(j->s, 3.0, out, err)
                          : lb_store_export(j->s, j->ids, j->n_ids, j->format, out, err);
}

/* The export on stdout, written there only once it is complete: it goes to an anonymous
 * temporary file first, so a failure midway prints nothing but the error. */
static lb_status export_to_stdout(export_job *j, lb_err *err) {
    FILE *tmp = tmpfile();
    if (tmp == NULL)
        return lb_fail(err, LB_ERR_IO, "cannot create a temporary file for the export: %s",
                       strerror(errno));
    lb_status st = write_export(tmp, j, err);
    if (st == LB_OK && fseek(tmp, 0, SEEK_SET) != 0)
        st = lb_fail(err, LB_ERR_IO, "cannot read back the export: %s", strerror(errno));
    char buf[1 << 16];
    size_t n;
    while (st == LB_OK && (n = fread(buf, 1, sizeof buf, tmp)) > 0)
        if (fwrite(buf, 1, n, stdout) != n)
            st = lb_fail(err, LB_ERR_IO, "cannot write the export: %s", strerror(errno));
    if (st == LB_OK && (ferror(tmp) || fflush(stdout) != 0))
        st = lb_fail(err, LB_ERR_IO, "cannot write the export: %s", strerror(errno));
    fclose(tmp);
    return st;
}

/* LB_ERR_USAGE when --out names the database or a file SQLite keeps beside it (-wal, -shm,
 * -journal): the rename that puts the export in place would replace it. A link given as
 * --out is not followed (the rename replaces the link, not its target); the database's
 * path is, as SQLite opens what it points to. */
static lb_status check_out_is_not_db(const char *out_path, const lb_store *s, lb_err *err) {
    struct stat out_st;
    if (lstat(out_path, &out_st) != 0) return LB_OK;
    /* SQLite keeps its side files beside the database's real path, a link followed */
    char real[PATH_MAX];
    const char *db = realpath(lb_store_path(s), real) != NULL ? real : lb_store_path(s);
    static const char *const companions[] = {"", "-wal", "-shm", "-journal"};
    for (size_t i = 0; i < sizeof companions / sizeof companions[0]; i++) {
        char file[PATH_MAX + 16];
        snprintf(file, sizeof file, "%s%s", db, companions[i]);
        struct stat db_st;
        if (stat(file, &db_st) == 0 && db_st.st_dev == out_st.st_dev &&
            db_st.st_ino == out_st.st_ino)
            return lb_fail(err, LB_ERR_USAGE,
                           "--out %s is the results database%s %s: the export would replace "
                           "it; give another file",
                           out_path, i ? "'s file" : "", file);
    }
    return LB_OK;
}

static int results_export(int argc, char **argv) {
    const char *format = "json", *out_path = NULL;
    const lb_arg_spec specs[] = {
        {"--format", LB_ARG_CHOICE, &format, NULL, "output format (default json)", 0, 0,
         "json|csv|openmetrics"},
        {"--out", LB_ARG_STRING, &out_path, "FILE",
         "write into FILE (replaced whole, never half-written) instead of stdout", 0, 0, NULL},
    };
    const lb_cli_command cmd = {
        .command = "results export",
        .uses_db = true,
        .usage = "[ID...] [options]",
        .summary = "Exports runs (no ID: every run, oldest first) with their config, "
                   "provenance, summary metrics and every raw sample, so each metric can be "
                   "recomputed. json: an array of runs. csv: one value per row, columns "
                   "run_id,kind,name,status,record,series_or_metric,index,value,unit, record "
                   "being config, metric or sample. openmetrics: no IDs; the newest ok value "
                   "of each benchmark's key metrics as gauges labelled by the benchmark's "
                   "identity, and llmbench_regression per benchmark, for Prometheus' textfile "
                   "collector (with --out the file is replaced atomically). An ID given twice "
                   "is exported once. Exit code 2 for a malformed ID or an --out FILE that is a "
                   "folder, whose folder is missing or that is the database itself, 1 when an "
                   "ID is not found (nothing is written then), 130 when interrupted (nothing is "
                   "written then either). --json is --format json.",
        LB_ARG_SPECS(specs),
        .max_positional = MAX_EXPORT_IDS,
    };
    lb_args a;
    int rc = lb_args_parse(&cmd, argc, argv, &a);
    if (rc != LB_ARGS_GO_ON) return rc;
    if (a.common.json && strcmp(format, "json") != 0)
        return lb_status_exit_code(lb_args_usage_error(
            cmd.command,
            "--json and --format %s contradict: the output is chosen with --format "
            "json|csv|openmetrics (--json is --format json)",
            format));
    bool om = strcmp(format, "openmetrics") == 0;
    if (om && a.n_pos > 0)
        return lb_status_exit_code(lb_args_usage_error(
            cmd.command,
            "--format openmetrics takes no IDs (it gives the newest run of every benchmark)"));
    /* each run once, in the order first named: a repeated ID would repeat its samples */
    static int64_t ids[MAX_EXPORT_IDS];
    size_t n_ids = 0;
    for (int i = 0; i < a.n_pos; i++) {
        if (parse_id(cmd.command, a.pos[i], &ids[n_ids]) != LB_OK) return 2;
        size_t k = 0;
        while (ids[k] != ids[n_ids])
            k++;
        n_ids += k == n_ids;
    }
    lb_err err = {{0}};
    lb_status st = out_path ? lb_file_check_writable("--out", out_path, &err) : LB_OK;
    if (st != LB_OK) return report_failure(cmd.command, st, &err);

    int code = 0;
    lb_store *s = NULL;
    if (open_store(cmd.command, &a.common, &s, &code) != LB_OK) return code;
    lb_store_format fmt = strcmp(format, "csv") == 0 ? LB_STORE_FORMAT_CSV : LB_STORE_FORMAT_JSON;
    export_job job = {.s = s, .ids = ids, .n_ids = n_ids, .format = fmt, .openmetrics = om};
    st = out_path ? check_out_is_not_db(out_path, s, &err) : LB_OK;
    if (st == LB_OK)
        st = out_path ? lb_file_write_atomic_with(out_path, write_export, &job, &err)
                      : export_to_stdout(&job, &err);
    if (st != LB_OK) code = report_failure(cmd.command, st, &err);
    lb_store_close(s);
    return code;
}

/* ---- import ---- */

/* The tag an imported result carries: "imported:" and 16 hex digits of the FNV-1a 64 hash
 * of the document in one canonical form (compact, keys sorted), so that the same result is
 * known again whatever file it comes from and however that file is laid out. */
static lb_status import_tag(const json_t *doc, const char *what, char *tag, size_t cap,
                            lb_err *err) {
    char *canonical = json_dumps(doc, JSON_COMPACT | JSON_SORT_KEYS);
    if (canonical == NULL) return lb_fail(err, LB_ERR_NOMEM, "no memory to read %s", what);
    snprintf(tag, cap, "imported:%016llx",
             (unsigned long long)lb_bench_fnv(LB_FNV_OFFSET, canonical));
    free(canonical);
    return LB_OK;
}

/* One run of an import file, read and ready to store: its result (owned, NULL until read),
 * its import_tag, and what names it in messages ("FILE", or "run 3 of FILE" for an element
 * of an export's array). */
typedef struct {
    lb_result *r;
    char tag[32];
    char what[LB_ERR_MSG_BYTES / 2];
} import_run;

/* Reads doc, one document of lb_result_to_json's shape, into run->r and run->tag. A
 * document that is not a finished result is LB_ERR_USAGE naming run->what. */
static lb_status import_read(const json_t *doc, import_run *run, lb_err *err) {
    lb_status st = lb_result_from_json(doc, run->what, &run->r, err);
    if (st == LB_OK) st = import_tag(doc, run->what, run->tag, sizeof run->tag, err);
    if (st == LB_ERR_FORMAT) st = LB_ERR_USAGE;
    if (st == LB_OK && run->r->status == LB_RUN_RUNNING)
        st = lb_fail(err, LB_ERR_USAGE, "%s holds a run that never ended (status running)",
                     run->what);
    if (st == LB_OK && lb_store_check_times(run->r, err) != LB_OK) {
        char why[LB_ERR_MSG_BYTES];
        snprintf(why, sizeof why, "%s", err->msg);
        st = lb_fail(err, LB_ERR_USAGE, "%s: %s", run->what, why);
    }
    return st;
}

/* Stores run->r as a new run tagged with run->tag (lb_store_run_import); *id receives its id
 * and *stored is true. When a run already carries that tag and again is false, nothing is
 * written: *id is that run (the newest such) and *stored is false. The look-up and the
 * write are one transaction, so of two imports of one result at the same moment one stores
 * it and the other names it; a write that fails leaves no run behind. */
static lb_status import_store(lb_store *s, import_run *run, bool again, int64_t *id, bool *stored,
                              lb_err *err) {
    *id = -1;
    *stored = false;
    if (json_array_append_new(run->r->tags, json_string(run->tag)) != 0)
        return lb_fail(err, LB_ERR_NOMEM, "no memory to tag the run imported from %s", run->what);
    lb_status st = lb_store_run_import(s, run->r, again ? NULL : run->tag, id, stored, err);
    if (st != LB_OK) {
        char why[LB_ERR_MSG_BYTES];
        snprintf(why, sizeof why, "%s", err->msg);
        lb_fail(err, st, "%s was not stored: %s", run->what, why);
    }
    return st;
}

/* The runs in the file at path: one document (a kept-aside result) or an array of them (an
 * export's JSON, each element carrying the id it had there). *runs (n of them; free each
 * r, then the array) is every run read, or NULL on failure: a file with one bad run stores
 * none. *is_array tells which of the two the file holds. */
static lb_status import_read_file(const char *path, import_run **runs, size_t *n, bool *is_array,
                                  lb_err *err) {
    *runs = NULL;
    *n = 0;
    char *text = NULL;
    size_t len = 0;
    LB_TRY(lb_file_read(path, &text, &len, err));
    json_error_t jerr;
    json_t *doc = json_loadb(text, len, 0, &jerr);
    free(text);
    if (doc == NULL)
        return lb_fail(err, LB_ERR_USAGE, "%s: line %d: not JSON: %s", path, jerr.line, jerr.text);
    *is_array = json_is_array(doc);
    size_t count = *is_array ? json_array_size(doc) : 1;
    import_run *all = calloc(count ? count : 1, sizeof *all);
    lb_status st = all ? LB_OK : lb_fail(err, LB_ERR_NOMEM, "no memory to read %s", path);
    for (size_t i = 0; st == LB_OK && i < count; i++) {
        const json_t *el = *is_array ? json_array_get(doc, i) : doc;
        json_int_t source_id = json_integer_value(json_object_get(el, "id"));
        if (!*is_array)
            snprintf(all[i].what, sizeof all[i].what, "%s", path);
        else if (source_id > 0)
            snprintf(all[i].what, sizeof all[i].what, "run %" JSON_INTEGER_FORMAT " of %s",
                     source_id, path);
        else
            snprintf(all[i].what, sizeof all[i].what, "element %zu of %s", i + 1, path);
        st = import_read(el, &all[i], err);
    }
    json_decref(doc);
    if (st != LB_OK) {
        for (size_t i = 0; all && i < count; i++)
            lb_result_free(all[i].r);
        free(all);
        return st;
    }
    *runs = all;
    *n = count;
    return LB_OK;
}

static int results_import(int argc, char **argv) {
    bool again = false;
    const lb_arg_spec specs[] = {
        {"--again", LB_ARG_FLAG, &again, NULL,
         "store FILE's runs even when they were imported before (as more runs)", 0, 0},
    };
    const lb_cli_command cmd = {
        .command = "results import",
        .uses_db = true,
        .usage = "FILE [options]",
        .summary = "Stores the runs in FILE as new runs: a result a run wrote beside the "
                   "database (or in $XDG_STATE_HOME/llmbench) when its final write failed, as "
                   "its error message says, or the array of runs that 'llmbench results export "
                   "--format json' writes (each element one run), so runs move between "
                   "databases. Prints one line per run with its new id (--json: {id, db, "
                   "stored} for one result, an array of {id, stored} for an export). A run "
                   "imported before (the same document, from any file) is not stored again: "
                   "the run that holds it is named; --again stores it once more. Each run is "
                   "tagged imported:HASH. Exit code 0 when every run was stored or already "
                   "there, 2 when FILE cannot be read or one of its runs is not a result "
                   "(nothing is stored then), 1 when the database refuses a run (nothing of "
                   "that run is stored, and the runs after it are not tried), 130 when "
                   "interrupted: while waiting for FILE's content (a pipe or FIFO) nothing is "
                   "stored; later the run being stored (waiting for another process's write "
                   "lock included) is not, nor are the runs after it, and the runs before it "
                   "stay stored.",
        LB_ARG_SPECS(specs),
        .min_positional = 1,
        .max_positional = 1,
    };
    lb_args a;
    int rc = lb_args_parse(&cmd, argc, argv, &a);
    if (rc != LB_ARGS_GO_ON) return rc;
    lb_store *s = NULL;
    lb_err err = {{0}};
    import_run *runs = NULL;
    size_t n = 0, done = 0;
    bool is_array = false;
    lb_status st = import_read_file(a.pos[0], &runs, &n, &is_array, &err);
    if (st == LB_OK) st = lb_store_open(a.common.db_path, &s, &err);
    bool opened = st == LB_OK;
    json_t *report = json_array();
    for (; st == LB_OK && done < n; done++) {
        int64_t id = -1;
        bool stored = false;
        st = lb_signals_interrupted() ? lb_fail(&err, LB_ERR_INTERRUPTED,
                                                "interrupted: %s was not stored", runs[done].what)
                                      : import_store(s, &runs[done], again, &id, &stored, &err);
        if (st != LB_OK) break;
        json_array_append_new(report,
                              json_pack("{s:I, s:b}", "id", (json_int_t)id, "stored", stored));
        if (!a.common.json && stored)
            printf("stored %s as run %" PRId64 " in %s\n", runs[done].what, id, lb_store_path(s));
        else if (!a.common.json)
            printf("%s was imported before, as run %" PRId64 " in %s: not stored again "
                   "(--again stores it once more)\n",
                   runs[done].what, id, lb_store_path(s));
    }
    if (st == LB_OK && n == 0 && !a.common.json)
        printf("%s holds no runs: nothing stored in %s\n", a.pos[0], lb_store_path(s));
    if (st != LB_OK && opened && done + 1 < n) {
        char why[LB_ERR_MSG_BYTES];
        snprintf(why, sizeof why, "%s", err.msg);
        lb_fail(&err, st, "%s; the runs after it (%zu) were not tried", why, n - done - 1);
    }
    /* the runs handled before a refusal are in the database: their ids still come out */
    if (a.common.json && (st == LB_OK || (is_array && opened))) {
        json_t *doc = report;
        if (!is_array) {
            doc = json_array_get(report, 0);
            json_object_set_new(doc, "db", json_db_path(s));
        }
        json_dumpf(doc, stdout, JSON_INDENT(2));
        printf("\n");
    }
    json_decref(report);
    for (size_t i = 0; i < n; i++)
        lb_result_free(runs[i].r);
    free(runs);
    lb_store_close(s);
    return st == LB_OK ? 0 : report_failure(cmd.command, st, &err);
}

/* ---- dispatch ---- */

static void print_overview(void) {
    printf("usage: llmbench results list [--kind K] [--status S] [--limit N] [--json]\n"
           "       llmbench results show ID [--json]\n"
           "       llmbench results export [ID...] [--format json|csv|openmetrics] [--out FILE]\n"
           "       llmbench results import FILE [--again]\n\n"
           "Reads the results store (--db PATH, else $LLMBENCH_DB, else "
           "$XDG_DATA_HOME/llmbench/results.db,\nelse ~/.local/share/llmbench/results.db).\n"
           "'llmbench results <subcommand> --help' describes each. Exit codes: 0 ok, 1 run not\n"
           "found, database unreadable or output unwritable, 2 bad usage (including a malformed\n"
           "ID), 130 interrupted (an export stops at the first Ctrl-C and writes nothing, an\n"
           "import before the run it stores is committed; a second Ctrl-C ends any\n"
           "subcommand at once).\n");
}

int lb_cmd_results(int argc, char **argv) {
    if (argc < 2)
        return lb_status_exit_code(lb_args_usage_error(
            "results", "missing subcommand: expected list, show, export or import"));
    const char *sub = argv[1];
    if (strcmp(sub, "--help") == 0 || strcmp(sub, "-h") == 0) {
        print_overview();
        return 0;
    }
    if (strcmp(sub, "list") == 0) return results_list(argc - 1, argv + 1);
    if (strcmp(sub, "show") == 0) return results_show(argc - 1, argv + 1);
    if (strcmp(sub, "export") == 0) return results_export(argc - 1, argv + 1);
    if (strcmp(sub, "import") == 0) return results_import(argc - 1, argv + 1);
    return lb_status_exit_code(lb_args_usage_error(
        "results", "unknown subcommand '%s': expected list, show, export or import", sub));
}
