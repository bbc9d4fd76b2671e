/* test_store.c: the results database: round trip, interrupted and unfinished runs,
 * schema versions, filters, path resolution and exports. Each test uses its own
 * temporary folder and database. */
/* cmocka.h needs these four first. */
/* clang-format off */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
/* clang-format on */

#include <math.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include "core/rng.h"
#include "core/signals.h"
#include "core/stats.h"
#include "store/store.h"
#include "test_util.h"

typedef struct {
    char dir[256];
    char db[300];
    lb_store *store;
} fixture;

static int setup(void **state) {
    fixture *f = calloc(1, sizeof *f);
    lb_test_tmpdir(f->dir, sizeof f->dir);
    assert_true(f->dir[0] != '\0');
    snprintf(f->db, sizeof f->db, "%s/sub/dir/results.db", f->dir);
    lb_err err = {{0}};
    if (lb_store_open(f->db, &f->store, &err) != LB_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    *state = f;
    return 0;
}

static int teardown(void **state) {
    fixture *f = *state;
    lb_store_close(f->store);
    lb_test_rmtree(f->dir);
    free(f);
    return 0;
}

/* A result with awkward values: fractions that print inexactly, tiny and huge magnitudes,
 * negative zero, NaN and infinity, and random step times. */
static lb_result *make_result(const char *name, size_t n_steps, uint64_t seed) {
    lb_result *r = lb_result_new("train", name);
    json_array_append_new(r->tags, json_string("nightly"));
    json_object_set_new(r->config, "model", json_string("gpt2-tiny"));
    json_object_set_new(r->config, "batch", json_integer(4));
    json_object_set_new(r->config, "lr", json_real(3e-4));
    json_object_set_new(r->provenance, "hostname", json_string("node-7"));
    lb_result_set_metric(r, "tok_per_s", 0.1 + 0.2, "tok/s");
    lb_result_set_metric(r, "tiny", 4.9e-324, "");
    lb_result_set_metric(r, "huge", 1.7976931348623157e308, "B");
    lb_result_set_metric(r, "missing", NAN, "ms");
    lb_series *step = lb_result_series(r, "step_ms", "ms");
    lb_rng rng;
    lb_rng_seed(&rng, seed);
    for (size_t i = 0; i < n_steps; i++)
        lb_result_series_push(step, 10.0 + lb_rng_normal(&rng));
    lb_series *loss = lb_result_series(r, "loss", "nats");
    lb_result_series_push(loss, -0.0);
    lb_result_series_push(loss, INFINITY);
    lb_result_series_push(loss, NAN);
    lb_result_series_push(loss, 1.0 / 3.0);
    lb_result_series(r, "empty", "");
    return r;
}

/* Exact equality, NaN equal to NaN. (SQLite keeps a whole REAL as an integer, so -0.0
 * reads back as 0.0: equal, not bitwise equal.) */
static void assert_same_double(double a, double b) {
    if (isnan(a) && isnan(b)) return;
    if (a != b) fail_msg("%.17g != %.17g", a, b);
}

static void assert_same_result(const lb_result *a, const lb_result *b) {
    assert_string_equal(a->kind, b->kind);
    assert_string_equal(a->name, b->name);
    assert_true(json_equal(a->tags, b->tags));
    assert_true(json_equal(a->config, b->config));
    assert_true(json_equal(a->provenance, b->provenance));
    assert_int_equal(a->status, b->status);
    assert_string_equal(a->failure, b->failure);
    assert_int_equal(a->n_metrics, b->n_metrics);
    for (size_t i = 0; i < a->n_metrics; i++) {
        assert_string_equal(a->metrics[i].name, b->metrics[i].name);
        assert_string_equal(a->metrics[i].unit, b->metrics[i].unit);
        assert_same_double(a->metrics[i].value, b->metrics[i].value);
    }
    assert_int_equal(a->n_series, b->n_series);
    for (size_t i = 0; i < a->n_series; i++) {
        assert_string_equal(a->series[i].name, b->series[i].name);
        assert_string_equal(a->series[i].unit, b->series[i].unit);
        assert_int_equal(a->series[i].n, b->series[i].n);
        for (size_t k = 0; k < a->series[i].n; k++)
            assert_same_double(a->series[i].values[k], b->series[i].values[k]);
    }
}

static int64_t store_run(lb_store *s, lb_result *r, lb_run_status status) {
    lb_err err = {{0}};
    int64_t id = -1;
    assert_int_equal(lb_store_run_begin(s, r, &id, &err), LB_OK);
    assert_true(id > 0);
    r->status = status;
    if (status == LB_RUN_FAILED) snprintf(r->failure, sizeof r->failure, "out of memory");
    assert_int_equal(lb_store_run_finish(s, id, r, &err), LB_OK);
    return id;
}

static void test_store_round_trip_keeps_values_exact(void **state) {
    fixture *f = *state;
    lb_result *r = make_result("gpt2-tiny-cpu", 1000, 1);
    r->start_wall_s = 1767225600.25;
    r->end_wall_s = 1767225660.5;
    int64_t id = store_run(f->store, r, LB_RUN_OK);

    lb_result *back = NULL;
    lb_err err = {{0}};
    assert_int_equal(lb_store_run_load(f->store, id, &back, &err), LB_OK);
    assert_same_result(r, back);
    assert_same_double(back->start_wall_s, 1767225600.25);
    assert_same_double(back->end_wall_s, 1767225660.5);
    lb_result_free(back);

    /* The same values survive a close and reopen. */
    lb_store_close(f->store);
    assert_int_equal(lb_store_open(f->db, &f->store, &err), LB_OK);
    assert_int_equal(lb_store_run_load(f->store, id, &back, &err), LB_OK);
    assert_same_result(r, back);
    lb_result_free(back);
    lb_result_free(r);
}

static void test_store_interrupted_run_is_marked_and_keeps_samples(void **state) {
    fixture *f = *state;
    lb_result *r = make_result("cut-short", 37, 2);
    snprintf(r->failure, sizeof r->failure, "interrupted by SIGINT");
    int64_t id = store_run(f->store, r, LB_RUN_INTERRUPTED);

    lb_result *back = NULL;
    lb_err err = {{0}};
    assert_int_equal(lb_store_run_load(f->store, id, &back, &err), LB_OK);
    assert_int_equal(back->status, LB_RUN_INTERRUPTED);
    assert_string_equal(back->failure, "interrupted by SIGINT");
    const lb_series *step = lb_result_find_series(back, "step_ms");
    assert_non_null(step);
    assert_int_equal(step->n, 37);
    assert_same_double(step->values[36], r->series[0].values[36]);
    lb_result_free(back);
    lb_result_free(r);
}

static void test_store_unfinished_run_lists_as_running(void **state) {
    fixture *f = *state;
    lb_result *r = make_result("crashed", 5, 3);
    int64_t id = -1;
    lb_err err = {{0}};
    assert_int_equal(lb_store_run_begin(f->store, r, &id, &err), LB_OK);
    lb_store_close(f->store); /* as a crash would: no finish */
    assert_int_equal(lb_store_open(f->db, &f->store, &err), LB_OK);

    lb_store_run_info *runs = NULL;
    size_t n = 0;
    assert_int_equal(lb_store_list(f->store, NULL, &runs, &n, &err), LB_OK);
    assert_int_equal(n, 1);
    assert_int_equal(runs[0].id, id);
    assert_int_equal(runs[0].status, LB_RUN_RUNNING);
    assert_string_equal(runs[0].name, "crashed");
    assert_true(isnan(runs[0].end_wall_s));
    assert_int_equal(runs[0].n_samples, 0);
    free(runs);

    lb_result *back = NULL;
    assert_int_equal(lb_store_run_load(f->store, id, &back, &err), LB_OK);
    assert_int_equal(back->status, LB_RUN_RUNNING);
    assert_true(json_equal(back->config, r->config));
    lb_result_free(back);
    lb_result_free(r);
}

/* A name and failure that are not UTF-8 (Latin-1 bytes, a stray byte) read back as UTF-8,
 * each bad byte a '?', so they can be written as JSON; UTF-8 stays as it is. */
static void test_store_text_that_is_not_utf8_reads_back_as_utf8(void **state) {
    fixture *f = *state;
    lb_result *r = make_result("caf\xe9 \xc3\xa9 \xed\xa0\x80 \xe2\x82", 2, 5);
    snprintf(r->failure, sizeof r->failure, "cannot read /data/\xff\xfe.txt");
    int64_t id = store_run(f->store, r, LB_RUN_INTERRUPTED);
    lb_result_free(r);
    const char *want = "caf? \xc3\xa9 ??? ??";
    lb_store_run_info *runs = NULL;
    size_t n = 0;
    lb_err err = {{0}};
    assert_int_equal(lb_store_list(f->store, NULL, &runs, &n, &err), LB_OK);
    assert_int_equal(n, 1);
    assert_string_equal(runs[0].name, want);
    assert_string_equal(runs[0].failure, "cannot read /data/??.txt");
    free(runs);
    lb_result *back = NULL;
    assert_int_equal(lb_store_run_load(f->store, id, &back, &err), LB_OK);
    assert_string_equal(back->name, want);
    assert_string_equal(back->failure, "cannot read /data/??.txt");
    json_t *doc = lb_result_to_json(back);
    assert_non_null(doc);
    json_decref(doc);
    lb_result_free(back);
}

static void test_store_finished_run_is_not_rewritten(void **state) {
    fixture *f = *state;
    lb_result *r = make_result("once", 3, 4);
    int64_t id = store_run(f->store, r, LB_RUN_OK);
    lb_err err = {{0}};
    r->status = LB_RUN_FAILED;
    assert_int_equal(lb_store_run_finish(f->store, id, r, &err), LB_ERR_DB);
    assert_non_null(strstr(err.msg, "already finished"));
    assert_int_equal(lb_store_run_finish(f->store, id + 100, r, &err), LB_ERR_DB);
    assert_non_null(strstr(err.msg, "no run"));
    r->status = LB_RUN_RUNNING;
    assert_int_equal(lb_store_run_finish(f->store, id, r, &err), LB_ERR_RUNTIME);

    lb_result *back = NULL;
    assert_int_equal(lb_store_run_load(f->store, id, &back, &err), LB_OK);
    assert_int_equal(back->status, LB_RUN_OK);
    assert_int_equal(back->series[0].n, 3);
    lb_result_free(back);
    lb_result_free(r);
}

static void test_store_list_filters_newest_first(void **state) {
    fixture *f = *state;
    int64_t ids[4];
    const char *kinds[] = {"train", "infer", "train", "train"};
    const lb_run_status statuses[] = {LB_RUN_OK, LB_RUN_OK, LB_RUN_FAILED, LB_RUN_OK};
    for (int i = 0; i < 4; i++) {
        lb_result *r = make_result("r", 10, (uint64_t)i);
        snprintf(r->kind, sizeof r->kind, "%s", kinds[i]);
        ids[i] = store_run(f->store, r, statuses[i]);
        lb_result_free(r);
    }
    lb_err err = {{0}};
    lb_store_run_info *runs = NULL;
    size_t n = 0;
    lb_store_filter flt = lb_store_default_filter();
    assert_int_equal(lb_store_list(f->store, &flt, &runs, &n, &err), LB_OK);
    assert_int_equal(n, 4);
    for (int i = 0; i < 4; i++)
        assert_int_equal(runs[i].id, ids[3 - i]);
    assert_int_equal(runs[0].n_samples, 10 + 4);
    free(runs);

    flt.kind = "train";
    assert_int_equal(lb_store_list(f->store, &flt, &runs, &n, &err), LB_OK);
    assert_int_equal(n, 3);
    free(runs);

    flt.status = LB_RUN_FAILED;
    assert_int_equal(lb_store_list(f->store, &flt, &runs, &n, &err), LB_OK);
    assert_int_equal(n, 1);
    assert_int_equal(runs[0].id, ids[2]);
    assert_string_equal(runs[0].failure, "out of memory");
    free(runs);

    flt = lb_store_default_filter();
    flt.limit = 2;
    assert_int_equal(lb_store_list(f->store, &flt, &runs, &n, &err), LB_OK);
    assert_int_equal(n, 2);
    assert_int_equal(runs[0].id, ids[3]);
    assert_int_equal(runs[1].id, ids[2]);
    free(runs);
}

static void set_user_version(const char *path, int version) {
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    char sql[64];
    snprintf(sql, sizeof sql, "PRAGMA user_version = %d", version);
    assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
}

static void test_store_newer_schema_is_refused(void **state) {
    fixture *f = *state;
    lb_store_close(f->store);
    f->store = NULL;
    set_user_version(f->db, LB_STORE_SCHEMA_VERSION + 41);
    lb_err err = {{0}};
    lb_store *s = NULL;
    assert_int_equal(lb_store_open(f->db, &s, &err), LB_ERR_DB);
    assert_null(s);
    assert_non_null(strstr(err.msg, "newer llmbench"));
    assert_non_null(strstr(err.msg, "schema version 42"));
    assert_non_null(strstr(err.msg, "up to 1"));
    assert_non_null(strstr(err.msg, f->db));
}

/* journal_mode of the database at path, as SQLite reports it. */
static void expect_journal_mode(const char *path, const char *want) {
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(st, 0), want);
    sqlite3_finalize(st);
    sqlite3_close(db);
}

static void test_store_old_schema_is_migrated(void **state) {
    fixture *f = *state;
    lb_store_close(f->store);
    f->store = NULL;
    char path[320];
    snprintf(path, sizeof path, "%s/empty.db", f->dir);
    set_user_version(path, 0); /* a version-0 file: no tables yet */
    lb_err err = {{0}};
    assert_int_equal(lb_store_open(path, &f->store, &err), LB_OK);
    lb_store_close(f->store);
    f->store = NULL;
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(st, 0), LB_STORE_SCHEMA_VERSION);
    sqlite3_finalize(st);
    sqlite3_close(db);
    expect_journal_mode(path, "wal");
}

static void test_store_rejects_a_file_that_is_not_a_database(void **state) {
    fixture *f = *state;
    char path[320];
    snprintf(path, sizeof path, "%s/notes.db", f->dir);
    assert_true(lb_test_write_file(path, "plain text, not even close to an SQLite header\n"));
    lb_err err = {{0}};
    lb_store *s = NULL;
    assert_int_equal(lb_store_open(path, &s, &err), LB_ERR_DB);
    assert_null(s);
    assert_non_null(strstr(err.msg, path));
}

/* --db naming another program's SQLite file (schema version 0 with tables of its own): it
 * is refused, and neither gets llmbench's tables nor is switched to WAL. */
static void test_store_another_program_s_database_is_refused_untouched(void **state) {
    fixture *f = *state;
    char path[320];
    snprintf(path, sizeof path, "%s/places.sqlite", f->dir);
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db,
                                  "CREATE TABLE bookmarks (url TEXT);"
                                  "INSERT INTO bookmarks VALUES ('https://example.org/')",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(db);
    lb_err err = {{0}};
    lb_store *s = NULL;
    assert_int_equal(lb_store_open(path, &s, &err), LB_ERR_DB);
    assert_null(s);
    assert_non_null(strstr(err.msg, path));
    assert_non_null(strstr(err.msg, "not an llmbench results database"));
    assert_non_null(strstr(err.msg, "--db"));
    expect_journal_mode(path, "delete");
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    sqlite3_stmt *st;
    assert_int_equal(
        sqlite3_prepare_v2(db, "SELECT group_concat(name) FROM sqlite_master", -1, &st, NULL),
        SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(st, 0), "bookmarks");
    sqlite3_finalize(st);
    sqlite3_close(db);
}

static void test_store_path_follows_db_env_then_xdg_then_home(void **state) {
    fixture *f = *state;
    char path[LB_STORE_PATH_BYTES], want[LB_STORE_PATH_BYTES];
    lb_err err = {{0}};
    setenv("LLMBENCH_DB", "/x/env.db", 1);
    setenv("XDG_DATA_HOME", "/x/data", 1);
    setenv("HOME", "/x/home", 1);
    assert_int_equal(lb_store_resolve_path("/x/flag.db", path, sizeof path, &err), LB_OK);
    assert_string_equal(path, "/x/flag.db");
    assert_int_equal(lb_store_resolve_path(NULL, path, sizeof path, &err), LB_OK);
    assert_string_equal(path, "/x/env.db");
    setenv("LLMBENCH_DB", "", 1);
    assert_int_equal(lb_store_resolve_path(NULL, path, sizeof path, &err), LB_OK);
    assert_string_equal(path, "/x/data/llmbench/results.db");
    setenv("XDG_DATA_HOME", "relative/data", 1); /* ignored, as the XDG spec asks */
    assert_int_equal(lb_store_resolve_path(NULL, path, sizeof path, &err), LB_OK);
    assert_string_equal(path, "/x/home/.local/share/llmbench/results.db");
    unsetenv("HOME");
    unsetenv("XDG_DATA_HOME");
    unsetenv("LLMBENCH_DB");
    assert_int_equal(lb_store_resolve_path(NULL, path, sizeof path, &err), LB_ERR_USAGE);
    assert_non_null(strstr(err.msg, "--db"));

    /* Opening creates the missing parent folders. */
    setenv("XDG_DATA_HOME", f->dir, 1);
    lb_store *s = NULL;
    assert_int_equal(lb_store_open(NULL, &s, &err), LB_OK);
    snprintf(want, sizeof want, "%s/llmbench/results.db", f->dir);
    assert_string_equal(lb_store_path(s), want);
    struct stat st;
    assert_int_equal(stat(want, &st), 0);
    lb_store_close(s);
    unsetenv("XDG_DATA_HOME");
}

static char *export_text(lb_store *s, const int64_t *ids, size_t n, lb_store_format fmt,
                         lb_status want) {
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    lb_err err = {{0}};
    assert_int_equal(lb_store_export(s, ids, n, fmt, out, &err), want);
    fclose(out);
    return buf;
}

/* Ctrl-C stops an export (of a store that may take minutes) before its next run. */
static void test_store_export_stops_on_ctrl_c(void **state) {
    fixture *f = *state;
    lb_result *a = make_result("a", 3, 5);
    store_run(f->store, a, LB_RUN_OK);
    lb_result_free(a);
    lb_signals_raise(SIGINT);
    char *text = export_text(f->store, NULL, 0, LB_STORE_FORMAT_CSV, LB_ERR_INTERRUPTED);
    lb_signals_reset();
    assert_null(strstr(text, ",sample,"));
    free(text);
    text = export_text(f->store, NULL, 0, LB_STORE_FORMAT_CSV, LB_OK);
    assert_non_null(strstr(text, ",sample,"));
    free(text);
}

static void test_store_json_export_round_trips(void **state) {
    fixture *f = *state;
    lb_result *a = make_result("a", 200, 5), *b = make_result("b", 3, 6);
    int64_t ida = store_run(f->store, a, LB_RUN_OK);
    int64_t idb = store_run(f->store, b, LB_RUN_FAILED);

    char *text = export_text(f->store, NULL, 0, LB_STORE_FORMAT_JSON, LB_OK);
    json_error_t jerr;
    json_t *doc = json_loads(text, 0, &jerr);
    assert_non_null(doc);
    assert_int_equal(json_array_size(doc), 2);
    json_t *ja = json_array_get(doc, 0), *jb = json_array_get(doc, 1);
    assert_int_equal(json_integer_value(json_object_get(ja, "id")), ida);
    assert_int_equal(json_integer_value(json_object_get(jb, "id")), idb);
    assert_string_equal(json_string_value(json_object_get(jb, "status")), "failed");
    assert_string_equal(json_string_value(json_object_get(jb, "failure")), "out of memory");
    assert_true(json_equal(json_object_get(ja, "config"), a->config));
    json_t *steps =
        json_object_get(json_object_get(json_object_get(ja, "series"), "step_ms"), "values");
    assert_int_equal(json_array_size(steps), 200);
    for (size_t k = 0; k < 200; k++)
        assert_same_double(json_real_value(json_array_get(steps, k)), a->series[0].values[k]);
    json_t *metric = json_array_get(json_object_get(ja, "metrics"), 0);
    assert_same_double(json_real_value(json_object_get(metric, "value")), 0.1 + 0.2);
    json_decref(doc);
    free(text);

    /* Selected ids only, in the order given. */
    int64_t one[] = {idb};
    text = export_text(f->store, one, 1, LB_STORE_FORMAT_JSON, LB_OK);
    doc = json_loads(text, 0, &jerr);
    assert_int_equal(json_array_size(doc), 1);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(doc, 0), "id")), idb);
    json_decref(doc);
    free(text);
    lb_result_free(a);
    lb_result_free(b);
}

static void test_store_export_of_unknown_id_writes_nothing(void **state) {
    fixture *f = *state;
    lb_result *a = make_result("a", 2, 7);
    int64_t ida = store_run(f->store, a, LB_RUN_OK);
    int64_t ids[] = {ida, ida + 9};
    char *text = export_text(f->store, ids, 2, LB_STORE_FORMAT_CSV, LB_ERR_DB);
    assert_string_equal(text, "");
    free(text);
    lb_result_free(a);
}

/* Splits one CSV line of unquoted fields; returns the field count. */
static int split_csv(char *line, char **fields, int max) {
    int n = 0;
    for (char *p = line; n < max;) {
        fields[n++] = p;
        char *comma = strchr(p, ',');
        if (comma == NULL) break;
        *comma = '\0';
        p = comma + 1;
    }
    return n;
}

static void test_store_csv_export_has_every_sample_and_metric(void **state) {
    fixture *f = *state;
    lb_result *a = make_result("a", 50, 8);
    int64_t id = store_run(f->store, a, LB_RUN_OK);
    char *text = export_text(f->store, NULL, 0, LB_STORE_FORMAT_CSV, LB_OK);

    char *save = NULL;
    char *line = strtok_r(text, "\n", &save);
    assert_string_equal(line, "run_id,kind,name,status,record,series_or_metric,index,value,unit");
    size_t n_config = 0, n_metric = 0, n_step = 0, n_loss = 0;
    double steps[50];
    while ((line = strtok_r(NULL, "\n", &save)) != NULL) {
        char *c[10] = {0};
        assert_int_equal(split_csv(line, c, 10), 9);
        assert_int_equal(strtoll(c[0], NULL, 10), id);
        assert_string_equal(c[1], "train");
        assert_string_equal(c[3], "ok");
        if (strcmp(c[4], "config") == 0) {
            n_config++;
        } else if (strcmp(c[4], "metric") == 0) {
            double want = lb_result_metric(a, c[5]);
            if (isnan(want))
                assert_string_equal(c[7], "");
            else
                assert_same_double(strtod(c[7], NULL), want);
            n_metric++;
        } else if (strcmp(c[5], "step_ms") == 0) {
            assert_string_equal(c[4], "sample");
            size_t k = (size_t)strtoull(c[6], NULL, 10);
            assert_int_equal(k, n_step);
            assert_same_double(strtod(c[7], NULL), a->series[0].values[k]);
            assert_string_equal(c[8], "ms");
            steps[n_step++] = strtod(c[7], NULL);
        } else {
            assert_string_equal(c[5], "loss");
            n_loss++;
        }
    }
    assert_int_equal(n_config, 3);
    assert_int_equal(n_metric, 4);
    assert_int_equal(n_step, 50);
    assert_int_equal(n_loss, 4);
    /* A summary recomputed from the exported samples equals the one from the originals. */
    assert_same_double(lb_stats_median(steps, 50), lb_stats_median(a->series[0].values, 50));
    assert_same_double(lb_stats_std(steps, 50), lb_stats_std(a->series[0].values, 50));
    free(text);
    lb_result_free(a);
}

static void test_store_csv_quotes_names_with_commas(void **state) {
    fixture *f = *state;
    lb_result *a = lb_result_new("train", "batch 4, \"fast\"");
    lb_result_set_metric(a, "x", 1.0, "");
    store_run(f->store, a, LB_RUN_OK);
    char *text = export_text(f->store, NULL, 0, LB_STORE_FORMAT_CSV, LB_OK);
    assert_non_null(strstr(text, "\"batch 4, \"\"fast\"\"\""));
    free(text);
    lb_result_free(a);
}

/* An infinite value has no CSV form that reads back as itself in every tool: the CSV
 * export leaves its field empty, as it does NaN's and as the JSON export writes null. */
static void test_store_csv_writes_non_finite_values_as_empty_fields(void **state) {
    fixture *f = *state;
    lb_result *a = lb_result_new("train", "overflow");
    lb_result_set_metric(a, "up", INFINITY, "");
    lb_result_set_metric(a, "down", -INFINITY, "");
    lb_result_set_metric(a, "missing", NAN, "");
    lb_result_series_push(lb_result_series(a, "loss", "nats"), INFINITY);
    int64_t id = store_run(f->store, a, LB_RUN_OK);
    char *text = export_text(f->store, NULL, 0, LB_STORE_FORMAT_CSV, LB_OK);
    const char *rows[] = {",metric,up,,,\n", ",metric,down,,,\n", ",metric,missing,,,\n",
                          ",sample,loss,0,,nats\n"};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        if (strstr(text, rows[i]) == NULL) fail_msg("CSV lacks '%s': %s", rows[i], text);
    assert_null(strstr(text, "inf"));
    free(text);
    int64_t one[] = {id};
    text = export_text(f->store, one, 1, LB_STORE_FORMAT_JSON, LB_OK);
    json_t *doc = json_loads(text, 0, NULL);
    assert_non_null(doc);
    json_t *metrics = json_object_get(json_array_get(doc, 0), "metrics");
    for (size_t i = 0; i < 3; i++)
        assert_true(json_is_null(json_object_get(json_array_get(metrics, i), "value")));
    json_decref(doc);
    free(text);
    lb_result_free(a);
}

/* A run's tags come back whole from the list, however long: a sweep's and a schedule's
 * tags together pass 255 bytes. */
static void test_store_list_gives_long_tags_whole(void **state) {
    fixture *f = *state;
    char *want[3];
    for (int i = 0; i < 3; i++) {
        lb_result *r = lb_result_new("train", "tagged");
        for (int k = 0; k < 10 * i; k++) {
            char tag[128];
            snprintf(tag, sizeof tag, "sweep-run:%d/%0100d", k, k);
            json_array_append_new(r->tags, json_string(tag));
        }
        store_run(f->store, r, LB_RUN_OK);
        want[i] = json_dumps(r->tags, JSON_COMPACT);
        lb_result_free(r);
    }
    lb_store_run_info *runs = NULL;
    size_t n = 0;
    lb_err err = {{0}};
    assert_int_equal(lb_store_list(f->store, NULL, &runs, &n, &err), LB_OK);
    assert_int_equal(n, 3);
    assert_true(strlen(want[2]) > 2000);
    for (int i = 0; i < 3; i++) {
        assert_string_equal(runs[2 - i].tags, want[i]);
        free(want[i]);
    }
    free(runs);
}

/* Writers in separate processes share one file: every run of every writer is stored
 * whole (the busy timeout and BEGIN IMMEDIATE serialize them). */
static void test_store_concurrent_writers_lose_no_run(void **state) {
    fixture *f = *state;
    enum { WRITERS = 4, RUNS = 10, SAMPLES = 2000 };
    pid_t pids[WRITERS];
    for (int w = 0; w < WRITERS; w++) {
        pids[w] = fork();
        assert_true(pids[w] >= 0);
        if (pids[w] > 0) continue;
        lb_store *s = NULL;
        lb_err err = {{0}};
        int bad = lb_store_open(f->db, &s, &err) != LB_OK;
        for (int i = 0; !bad && i < RUNS; i++) {
            lb_result *r = make_result("writer", SAMPLES, (uint64_t)(w * RUNS + i));
            int64_t id;
            r->status = LB_RUN_OK;
            bad = lb_store_run_begin(s, r, &id, &err) != LB_OK ||
                  lb_store_run_finish(s, id, r, &err) != LB_OK;
            lb_result_free(r);
        }
        if (bad) fprintf(stderr, "writer %d: %s\n", w, err.msg);
        lb_store_close(s);
        _exit(bad);
    }
    for (int w = 0; w < WRITERS; w++) {
        int status = 0;
        assert_int_equal(waitpid(pids[w], &status, 0), pids[w]);
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 0);
    }
    lb_store_run_info *runs = NULL;
    size_t n = 0;
    lb_err err = {{0}};
    lb_store_filter flt = lb_store_default_filter();
    flt.status = LB_RUN_OK;
    assert_int_equal(lb_store_list(f->store, &flt, &runs, &n, &err), LB_OK);
    assert_int_equal(n, WRITERS * RUNS);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(runs[i].n_samples, SAMPLES + 4);
    free(runs);
}

/* Opening a database whose schema is current takes no write lock: while another connection
 * holds a write transaction longer than the busy timeout (0.2 s here), a second open for
 * writing succeeds at once and can read, so one run's long finish never fails another's
 * start. */
static void test_store_open_of_a_current_schema_takes_no_write_lock(void **state) {
    fixture *f = *state;
    sqlite3 *holder;
    assert_int_equal(sqlite3_open(f->db, &holder), SQLITE_OK);
    assert_int_equal(sqlite3_exec(holder,
                                  "BEGIN IMMEDIATE; INSERT INTO runs (kind, name, tags, "
                                  "start_wall_s, status, config, provenance) VALUES ('train', "
                                  "'held', '[]', 1, 'running', '{}', '{}')",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    setenv("LLMBENCH_DB_WAIT_S", "0.2", 1);
    lb_store *s = NULL;
    lb_err err = {{0}};
    lb_status st = lb_store_open(f->db, &s, &err);
    unsetenv("LLMBENCH_DB_WAIT_S");
    if (st != LB_OK) fail_msg("open while another connection writes: %s", err.msg);
    lb_store_run_info *runs = NULL;
    size_t n = 7;
    assert_int_equal(lb_store_list(s, NULL, &runs, &n, &err), LB_OK);
    assert_int_equal(n, 0); /* the held insert is not committed */
    free(runs);
    lb_store_close(s);
    assert_int_equal(sqlite3_exec(holder, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(holder);
}

/* --db naming a folder: one line that says it is a folder and which file to give, not
 * SQLite's "unable to open database file"; nothing is created inside it. */
static void test_store_open_of_a_folder_names_it_and_the_file_to_give(void **state) {
    fixture *f = *state;
    char folder[320];
    snprintf(folder, sizeof folder, "%s/runs", f->dir);
    assert_int_equal(mkdir(folder, 0700), 0);
    lb_store *s = NULL;
    lb_err err = {{0}};
    assert_int_equal(lb_store_open(folder, &s, &err), LB_ERR_IO);
    assert_null(s);
    char want[1024];
    snprintf(want, sizeof want,
             "results database %s is a folder: give --db the path of a file, such as "
             "%s/results.db",
             folder, folder);
    assert_string_equal(err.msg, want);
    char inside[400];
    snprintf(inside, sizeof inside, "%s/results.db", folder);
    struct stat sb;
    assert_int_equal(stat(inside, &sb), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_store_round_trip_keeps_values_exact, setup, teardown),
        cmocka_unit_test_setup_teardown(test_store_interrupted_run_is_marked_and_keeps_samples,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_store_unfinished_run_lists_as_running, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_store_export_stops_on_ctrl_c, setup, teardown),
        cmocka_unit_test_setup_teardown(test_store_text_that_is_not_utf8_reads_back_as_utf8, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_store_finished_run_is_not_rewritten, setup, teardown),
        cmocka_unit_test_setup_teardown(test_store_list_filters_newest_first, setup, teardown),
        cmocka_unit_test_setup_teardown(test_store_newer_schema_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_store_old_schema_is_migrated, setup, teardown),
        cmocka_unit_test_setup_teardown(test_store_rejects_a_file_that_is_not_a_database, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_store_another_program_s_database_is_refused_untouched,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_store_path_follows_db_env_then_xdg_then_home, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_store_json_export_round_trips, setup, teardown),
        cmocka_unit_test_setup_teardown(test_store_export_of_unknown_id_writes_nothing, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_store_csv_export_has_every_sample_and_metric, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_store_csv_quotes_names_with_commas, setup, teardown),
        cmocka_unit_test_setup_teardown(test_store_csv_writes_non_finite_values_as_empty_fields,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_store_list_gives_long_tags_whole, setup, teardown),
        cmocka_unit_test_setup_teardown(test_store_concurrent_writers_lose_no_run, setup, teardown),
        cmocka_unit_test_setup_teardown(test_store_open_of_a_current_schema_takes_no_write_lock,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_store_open_of_a_folder_names_it_and_the_file_to_give,
                                        setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
