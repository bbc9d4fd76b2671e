/* test_cli_results.c: `llmbench results list|show|export` as a user runs them: exit
 * codes, one-line errors naming the bad input, and the documents printed or written. The
 * database is a temporary one named by LLMBENCH_DB, filled through store/store.h. */
/* cmocka.h needs these four first. */
/* clang-format off */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
/* clang-format on */

#include <dirent.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include "cli/commands.h"
#include "core/clock.h"
#include "core/signals.h"
#include "store/store.h"
#include "test_util.h"

static char out[1 << 20], err[1 << 16];
static char dir[256], db[300];
static int64_t ok_id, running_id;

static int run(const char *const *args) {
    return lb_test_run(args, out, sizeof out, err, sizeof err);
}

/* The exit code is want and stderr is one line containing needle. */
static void expect_error(const char *const *args, int want, const char *needle) {
    assert_int_equal(run(args), want);
    if (strstr(err, needle) == NULL) fail_msg("stderr '%s' lacks '%s'", err, needle);
    assert_non_null(strchr(err, '\n'));
    assert_null(strchr(strchr(err, '\n') + 1, '\n'));
}

/* Two runs: a finished training run with samples and metrics, then one left running. */
static int setup(void **state) {
    (void)state;
    lb_test_tmpdir(dir, sizeof dir);
    snprintf(db, sizeof db, "%s/results.db", dir);
    setenv("LLMBENCH_DB", db, 1);
    lb_store *s = NULL;
    lb_err e = {{0}};
    if (lb_store_open(NULL, &s, &e) != LB_OK) return -1;
    lb_result *r = lb_result_new("train", "gpt2-tiny-cpu-fp32");
    json_object_set_new(r->config, "batch", json_integer(4));
    json_object_set_new(r->provenance, "hostname", json_string("node-7"));
    lb_series *step = lb_result_series(r, "step_ms", "ms");
    for (int i = 0; i < 20; i++)
        lb_result_series_push(step, 100.0 + i);
    lb_result_set_metric(r, "tok_per_s", 1234.5, "tok/s");
    lb_status st = lb_store_run_begin(s, r, &ok_id, &e);
    r->status = LB_RUN_OK;
    if (st == LB_OK) st = lb_store_run_finish(s, ok_id, r, &e);
    lb_result_free(r);
    r = lb_result_new("infer", "crashed-run");
    if (st == LB_OK) st = lb_store_run_begin(s, r, &running_id, &e);
    lb_result_free(r);
    lb_store_close(s);
    return st == LB_OK ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    lb_test_rmtree(dir);
    unsetenv("LLMBENCH_DB");
    return 0;
}

static void test_cli_results_without_subcommand_exits_2(void **state) {
    (void)state;
    expect_error((const char *[]){"results", NULL}, 2, "expected list, show, export or import");
}

static void test_cli_results_unknown_subcommand_exits_2_naming_it(void **state) {
    (void)state;
    expect_error((const char *[]){"results", "frobnicate", NULL}, 2, "'frobnicate'");
}

static void test_cli_results_malformed_id_exits_2_naming_it(void **state) {
    (void)state;
    expect_error((const char *[]){"results", "show", "abc", NULL}, 2, "malformed run ID 'abc'");
    expect_error((const char *[]){"results", "show", "12x", NULL}, 2, "'12x'");
    expect_error((const char *[]){"results", "show", "0", NULL}, 2, "positive integer");
    expect_error((const char *[]){"results", "export", "1", "two", NULL}, 2, "'two'");
    expect_error((const char *[]){"results", "show", "99999999999999999999", NULL}, 2,
                 "run ID '99999999999999999999' is out of range: IDs are at most "
                 "9223372036854775807");
}

static void test_cli_results_show_without_id_exits_2(void **state) {
    (void)state;
    expect_error((const char *[]){"results", "show", NULL}, 2, "missing run ID");
}

static void test_cli_results_unknown_id_exits_1_naming_it(void **state) {
    (void)state;
    expect_error((const char *[]){"results", "show", "999", NULL}, 1, "no run 999");
    expect_error((const char *[]){"results", "export", "999", NULL}, 1, "no run 999");
    assert_string_equal(out, "");
}

static void test_cli_results_bad_format_exits_2_naming_it(void **state) {
    (void)state;
    expect_error((const char *[]){"results", "export", "--format", "xml", NULL}, 2, "'xml'");
    assert_non_null(strstr(err, "json|csv"));
}

static void test_cli_results_bad_list_options_exit_2(void **state) {
    (void)state;
    expect_error((const char *[]){"results", "list", "--status", "done", NULL}, 2, "'done'");
    expect_error((const char *[]){"results", "list", "--limit", "-3", NULL}, 2, "--limit");
}

static void test_cli_results_list_shows_running_run_first(void **state) {
    (void)state;
    assert_int_equal(run((const char *[]){"results", "list", "--json", NULL}), 0);
    json_error_t je;
    json_t *doc = json_loads(out, 0, &je);
    assert_non_null(doc);
    assert_string_equal(json_string_value(json_object_get(doc, "db")), db);
    json_t *runs = json_object_get(doc, "runs");
    assert_int_equal(json_array_size(runs), 2);
    json_t *first = json_array_get(runs, 0), *second = json_array_get(runs, 1);
    assert_int_equal(json_integer_value(json_object_get(first, "id")), running_id);
    assert_string_equal(json_string_value(json_object_get(first, "status")), "running");
    assert_true(json_is_null(json_object_get(first, "end_wall_s")));
    assert_int_equal(json_integer_value(json_object_get(second, "n_samples")), 20);
    json_decref(doc);

    assert_int_equal(run((const char *[]){"results", "list", "--status", "ok", NULL}), 0);
    assert_non_null(strstr(out, "gpt2-tiny-cpu-fp32"));
    assert_null(strstr(out, "crashed-run"));
    assert_int_equal(run((const char *[]){"results", "list", "--kind", "infer", NULL}), 0);
    assert_non_null(strstr(out, "running"));
    assert_null(strstr(out, "gpt2-tiny-cpu-fp32"));
}

/* The note that --limit cut the list appears only when it did: two runs fill --limit 2. */
static void test_cli_results_list_says_limit_cut_it_only_when_it_did(void **state) {
    (void)state;
    assert_int_equal(run((const char *[]){"results", "list", "--limit", "2", NULL}), 0);
    assert_non_null(strstr(out, "crashed-run"));
    assert_non_null(strstr(out, "gpt2-tiny-cpu-fp32"));
    assert_null(strstr(out, "--limit 0 lists all"));
    assert_int_equal(run((const char *[]){"results", "list", "--limit", "1", NULL}), 0);
    assert_non_null(strstr(out, "crashed-run"));
    assert_null(strstr(out, "gpt2-tiny-cpu-fp32"));
    assert_non_null(strstr(out, "\n(the 1 newest runs; --limit 0 lists all)\n"));
    assert_int_equal(run((const char *[]){"results", "list", "--limit", "1", "--json", NULL}), 0);
    json_t *doc = json_loads(out, 0, NULL);
    assert_non_null(doc);
    assert_int_equal(json_array_size(json_object_get(doc, "runs")), 1);
    assert_true(json_is_true(json_object_get(doc, "more")));
    json_decref(doc);
    assert_int_equal(run((const char *[]){"results", "list", "--limit", "2", "--json", NULL}), 0);
    doc = json_loads(out, 0, NULL);
    assert_non_null(doc);
    assert_int_equal(json_array_size(json_object_get(doc, "runs")), 2);
    assert_true(json_is_false(json_object_get(doc, "more")));
    json_decref(doc);
}

/* A sweep's and a schedule's tags together pass 255 bytes: list gives every tag, whole. */
static void test_cli_results_list_gives_long_tags_whole(void **state) {
    (void)state;
    char tags[3][128];
    lb_result *r = lb_result_new("train", "tagged");
    for (int i = 0; i < 3; i++) {
        snprintf(tags[i], sizeof tags[i], "sweep-run:%d/%0100d", i, i);
        json_array_append_new(r->tags, json_string(tags[i]));
    }
    assert_true(lb_test_store_ok(db, r) > 0);
    assert_int_equal(run((const char *[]){"results", "list", "--json", NULL}), 0);
    json_t *doc = json_loads(out, 0, NULL);
    assert_non_null(doc);
    json_t *got = json_object_get(json_array_get(json_object_get(doc, "runs"), 0), "tags");
    assert_int_equal(json_array_size(got), 3);
    for (size_t i = 0; i < 3; i++)
        assert_string_equal(json_string_value(json_array_get(got, i)), tags[i]);
    json_decref(doc);
    assert_int_equal(run((const char *[]){"results", "list", NULL}), 0);
    char want[512];
    snprintf(want, sizeof want, " tagged [\"%s\",\"%s\",\"%s\"]\n", tags[0], tags[1], tags[2]);
    if (strstr(out, want) == NULL) fail_msg("stdout lacks %s: %s", want, out);
}

/* Output that stdout does not take whole (here a full device) is a failure, not exit 0
 * with part of a list. */
static void test_cli_results_output_that_cannot_be_written_exits_1(void **state) {
    (void)state;
    char id[24], errpath[320];
    snprintf(id, sizeof id, "%lld", (long long)ok_id);
    snprintf(errpath, sizeof errpath, "%s/stderr", dir);
    const char *commands[] = {"list", "list --json", "show", "show --json"};
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        bool show = strncmp(commands[i], "show", 4) == 0;
        assert_int_equal(lb_test_shell("%s results %s %s >/dev/full 2>%s", LB_TEST_BIN, commands[i],
                                       show ? id : "", errpath),
                         1);
        char *text = lb_test_read_file(errpath, NULL);
        assert_non_null(text);
        if (strstr(text, "cannot write the output: No space left on device\n") == NULL)
            fail_msg("%s: stderr '%s'", commands[i], text);
        free(text);
    }
}

static void test_cli_results_show_prints_metrics_and_series(void **state) {
    (void)state;
    char id[24];
    snprintf(id, sizeof id, "%lld", (long long)ok_id);
    assert_int_equal(run((const char *[]){"results", "show", id, NULL}), 0);
    assert_non_null(strstr(out, "tok_per_s"));
    assert_non_null(strstr(out, "1234.5"));
    assert_non_null(strstr(out, "node-7"));
    assert_non_null(strstr(out, "step_ms"));
    assert_non_null(strstr(out, "20 samples"));

    assert_int_equal(run((const char *[]){"results", "show", id, "--json", NULL}), 0);
    json_error_t je;
    json_t *doc = json_loads(out, 0, &je);
    assert_non_null(doc);
    assert_int_equal(json_integer_value(json_object_get(doc, "id")), ok_id);
    json_t *step = json_object_get(json_object_get(doc, "series"), "step_ms");
    assert_int_equal(json_integer_value(json_object_get(step, "n")), 20);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(doc, "config"), "batch")),
                     4);
    json_decref(doc);
}

static int count_entries(const char *path) {
    DIR *d = opendir(path);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

static void test_cli_results_export_out_replaces_file_whole(void **state) {
    (void)state;
    char path[320];
    snprintf(path, sizeof path, "%s/export.json", dir);
    assert_true(lb_test_write_file(path, "old contents"));
    int before = count_entries(dir);
    assert_int_equal(run((const char *[]){"results", "export", "--out", path, NULL}), 0);
    assert_int_equal(count_entries(dir), before); /* no temporary file left behind */
    char *text = lb_test_read_file(path, NULL);
    json_error_t je;
    json_t *doc = json_loads(text, 0, &je);
    assert_non_null(doc);
    assert_int_equal(json_array_size(doc), 2);
    json_t *values = json_object_get(
        json_object_get(json_object_get(json_array_get(doc, 0), "series"), "step_ms"), "values");
    assert_int_equal(json_array_size(values), 20);
    assert_true(json_real_value(json_array_get(values, 19)) == 119.0);
    json_decref(doc);
    free(text);

    /* An unknown ID fails before anything is written: the old file stays as it was. */
    expect_error(
        (const char *[]){"results", "export", "1", "77", "--format", "csv", "--out", path, NULL}, 1,
        "no run 77");
    assert_int_equal(count_entries(dir), before);
    text = lb_test_read_file(path, NULL);
    assert_non_null(strstr(text, "\"step_ms\""));
    free(text);
}

/* The file --out replaces keeps its permissions: under umask 077 a textfile collector's
 * 0644 file stays readable by the collector. A new file gets 0666 less the umask. */
static void test_cli_results_export_out_keeps_the_replaced_file_s_mode(void **state) {
    (void)state;
    char path[320], fresh[320];
    snprintf(path, sizeof path, "%s/llmbench.prom", dir);
    snprintf(fresh, sizeof fresh, "%s/new.prom", dir);
    assert_true(lb_test_write_file(path, "old contents"));
    assert_int_equal(chmod(path, 0644), 0);
    mode_t mask = umask(077);
    int rc =
        run((const char *[]){"results", "export", "--format", "openmetrics", "--out", path, NULL});
    int rc_fresh = run((const char *[]){"results", "export", "--out", fresh, NULL});
    umask(mask);
    assert_int_equal(rc, 0);
    assert_int_equal(rc_fresh, 0);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0644);
    char *text = lb_test_read_file(path, NULL);
    assert_non_null(strstr(text, "# EOF"));
    free(text);
    assert_int_equal(stat(fresh, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
}

static void test_cli_results_export_out_that_cannot_be_a_file_exits_2(void **state) {
    (void)state;
    expect_error((const char *[]){"results", "export", "--out", dir, NULL}, 2, "is a folder");
    assert_non_null(strstr(err, "--out"));
    char missing[320];
    snprintf(missing, sizeof missing, "%s/typo/x.json", dir);
    expect_error((const char *[]){"results", "export", "--out", missing, NULL}, 2,
                 "cannot create a file in folder");
    assert_string_equal(out, "");
}

/* The rename that puts an export in place would replace the database itself. */
static void test_cli_results_export_out_refuses_the_database(void **state) {
    (void)state;
    const char *formats[] = {"json", "csv", "openmetrics"};
    for (size_t i = 0; i < 3; i++) {
        expect_error(
            (const char *[]){"results", "export", "--format", formats[i], "--out", db, NULL}, 2,
            "is the results database");
        assert_non_null(strstr(err, "--out"));
    }
    char link[320];
    snprintf(link, sizeof link, "%s/link.db", dir);
    assert_int_equal(symlink(db, link), 0);
    expect_error((const char *[]){"results", "export", "--db", link, "--out", db, NULL}, 2,
                 "is the results database");
    /* through the link, the side files are those beside the database it names */
    char wal[340];
    snprintf(wal, sizeof wal, "%s-wal", db);
    bool made = access(wal, F_OK) != 0;
    if (made) fclose(fopen(wal, "w"));
    expect_error((const char *[]){"results", "export", "--db", link, "--out", wal, NULL}, 2,
                 "is the results database's file");
    if (made) unlink(wal);
    assert_int_equal(run((const char *[]){"results", "list", "--json", NULL}), 0);
    json_t *doc = json_loads(out, 0, NULL);
    assert_non_null(doc);
    assert_int_equal(json_array_size(json_object_get(doc, "runs")), 2);
    json_decref(doc);
}

static void test_cli_results_export_csv_to_stdout(void **state) {
    (void)state;
    char id[24];
    snprintf(id, sizeof id, "%lld", (long long)ok_id);
    assert_int_equal(run((const char *[]){"results", "export", id, "--format", "csv", NULL}), 0);
    assert_non_null(
        strstr(out, "run_id,kind,name,status,record,series_or_metric,index,value,unit\n"));
    char row[128];
    snprintf(row, sizeof row, "%s,train,gpt2-tiny-cpu-fp32,ok,sample,step_ms,19,119,ms\n", id);
    assert_non_null(strstr(out, row));
    snprintf(row, sizeof row, "%s,train,gpt2-tiny-cpu-fp32,ok,metric,tok_per_s,,1234.5,tok/s\n",
             id);
    assert_non_null(strstr(out, row));
}

/* --json is --format json; with another --format it is refused, not silently dropped. */
static void test_cli_results_export_json_is_format_json_and_refused_with_another(void **state) {
    (void)state;
    assert_int_equal(run((const char *[]){"results", "export", "--json", NULL}), 0);
    json_t *doc = json_loads(out, 0, NULL);
    assert_non_null(doc);
    assert_int_equal(json_array_size(doc), 2);
    json_decref(doc);
    const char *formats[] = {"csv", "openmetrics"};
    for (size_t i = 0; i < 2; i++) {
        expect_error((const char *[]){"results", "export", "--format", formats[i], "--json", NULL},
                     2, "--json and --format");
        assert_non_null(strstr(err, formats[i]));
        assert_non_null(strstr(err, "--format json|csv|openmetrics"));
        assert_string_equal(out, "");
    }
}

static void test_cli_results_export_of_an_id_given_twice_has_it_once(void **state) {
    (void)state;
    char id[24];
    snprintf(id, sizeof id, "%lld", (long long)ok_id);
    assert_int_equal(run((const char *[]){"results", "export", id, id, NULL}), 0);
    json_error_t je;
    json_t *doc = json_loads(out, 0, &je);
    assert_non_null(doc);
    assert_int_equal(json_array_size(doc), 1);
    json_decref(doc);
    assert_int_equal(run((const char *[]){"results", "export", id, "--format", "csv", id, NULL}),
                     0);
    const char *row = strstr(out, ",sample,step_ms,19,");
    assert_non_null(row);
    assert_null(strstr(row + 1, ",sample,step_ms,19,"));
}

static void test_cli_results_newer_database_exits_1_saying_so(void **state) {
    (void)state;
    sqlite3 *h;
    assert_int_equal(sqlite3_open(db, &h), SQLITE_OK);
    assert_int_equal(sqlite3_exec(h, "PRAGMA user_version = 99", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(h);
    expect_error((const char *[]){"results", "list", NULL}, 1, "newer llmbench");
    assert_non_null(strstr(err, "schema version 99"));
}

static void test_cli_results_read_commands_never_create_a_database(void **state) {
    (void)state;
    char missing[400];
    snprintf(missing, sizeof missing, "%s/typo/x.db", dir);
    expect_error((const char *[]){"results", "list", "--db", missing, NULL}, 1,
                 "no results database at");
    assert_non_null(strstr(err, missing));
    expect_error((const char *[]){"results", "export", "--db", missing, NULL}, 1, missing);
    expect_error((const char *[]){"results", "show", "1", "--db", missing, NULL}, 1, missing);
    char typo[300];
    snprintf(typo, sizeof typo, "%s/typo", dir);
    assert_int_equal(access(typo, F_OK), -1);
}

static void test_cli_results_export_that_fails_midway_prints_nothing(void **state) {
    (void)state;
    sqlite3 *h;
    assert_int_equal(sqlite3_open(db, &h), SQLITE_OK);
    char sql[128];
    snprintf(sql, sizeof sql, "UPDATE runs SET config = '{' WHERE id = %lld",
             (long long)running_id);
    assert_int_equal(sqlite3_exec(h, sql, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(h);
    char a[24], b[24];
    snprintf(a, sizeof a, "%lld", (long long)ok_id);
    snprintf(b, sizeof b, "%lld", (long long)running_id);
    expect_error((const char *[]){"results", "export", a, b, NULL}, 1, "not valid JSON");
    assert_string_equal(out, "");
    expect_error((const char *[]){"results", "export", a, b, "--format", "csv", NULL}, 1,
                 "not valid JSON");
    assert_string_equal(out, "");
}

/* The overview and the help of the subcommands that stop at a Ctrl-C name exit code 130, as
 * every other command's help does. */
static void test_cli_results_help_names_the_interrupted_exit_code(void **state) {
    (void)state;
    assert_int_equal(run((const char *[]){"results", "--help", NULL}), 0);
    if (strstr(out, "130 interrupted") == NULL) fail_msg("results --help:\n%s", out);
    const char *subs[] = {"export", "import"};
    for (size_t i = 0; i < 2; i++) {
        assert_int_equal(run((const char *[]){"results", subs[i], "--help", NULL}), 0);
        for (char *c = out; *c; c++) /* the summary is wrapped */
            if (*c == '\n') *c = ' ';
        if (strstr(out, "130 when interrupted") == NULL)
            fail_msg("results %s --help:\n%s", subs[i], out);
    }
}

/* An import waiting for its FILE (a FIFO) stops at a Ctrl-C with 130, as its help says,
 * and stores nothing. */
static void test_cli_results_import_interrupted_while_reading_exits_130(void **state) {
    (void)state;
    char fifo[320];
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    const char *argv[] = {LB_TEST_BIN, "results", "import", fifo, NULL};
    int out_fd = -1, err_fd = -1;
    pid_t pid = lb_test_spawn(LB_TEST_BIN, argv, &out_fd, &err_fd);
    assert_true(pid > 0);
    int w = -1; /* opens once the import opened it (no reader yet: ENXIO) */
    for (int i = 0; i < 3000 && w < 0; i++)
        if ((w = open(fifo, O_WRONLY | O_NONBLOCK)) < 0) usleep(10 * 1000);
    if (w < 0) kill(pid, SIGKILL);
    assert_true(w >= 0);
    char wchan_path[64], wchan[64] = "";
    snprintf(wchan_path, sizeof wchan_path, "/proc/%d/wchan", (int)pid);
    for (int i = 0; i < 200 && strstr(wchan, "pipe") == NULL; i++) {
        usleep(10 * 1000);
        FILE *f = fopen(wchan_path, "r");
        if (f != NULL) {
            if (fgets(wchan, sizeof wchan, f) == NULL) wchan[0] = '\0';
            fclose(f);
        }
    }
    kill(pid, SIGINT);
    int status = 0;
    waitpid(pid, &status, 0);
    close(w);
    lb_test_slurp(err_fd, err, sizeof err);
    close(out_fd);
    close(err_fd);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 130);
    if (strstr(err, "interrupted while reading") == NULL) fail_msg("stderr: %s", err);
    assert_int_equal(run((const char *[]){"results", "list", NULL}), 0);
    assert_null(strstr(out, "imported"));
}

static void test_cli_results_list_escapes_control_characters_in_names(void **state) {
    (void)state;
    lb_store *s = NULL;
    lb_err e = {{0}};
    assert_int_equal(lb_store_open(db, &s, &e), LB_OK);
    lb_result *r = lb_result_new("train", "evil\n99     ok   \x1b[2Jname\x7f");
    int64_t id = 0;
    assert_int_equal(lb_store_run_begin(s, r, &id, &e), LB_OK);
    lb_result_free(r);
    lb_store_close(s);
    assert_int_equal(run((const char *[]){"results", "list", NULL}), 0);
    assert_null(strchr(out, '\x1b'));
    assert_null(strchr(out, '\x7f'));
    assert_non_null(strstr(out, "evil\\n99     ok   \\x1b[2Jname\\x7f\n"));
    char id_text[24];
    snprintf(id_text, sizeof id_text, "%lld", (long long)id);
    assert_int_equal(run((const char *[]){"results", "show", id_text, NULL}), 0);
    assert_null(strchr(out, '\x1b'));
    assert_non_null(strstr(out, "evil\\n99"));
}

/* Config values, where the run ran and how it was started are stored text like its name:
 * show prints their control characters escaped, so none reaches the terminal. */
static void
test_cli_results_show_escapes_control_characters_in_config_and_provenance(void **state) {
    (void)state;
    lb_result *r = lb_result_new("train", "plain");
    json_object_set_new(r->config, "data\x1b[1m", json_string("x\x1b[2Jy"));
    json_object_set_new(r->provenance, "hostname", json_string("node\r\x1b[K"));
    json_object_set_new(r->provenance, "command_line",
                        json_pack("[s, s, s]", "llmbench", "--name", "\x1b]0;title\x07"));
    json_object_set_new(r->provenance, "gpus", json_pack("[{s:s}]", "name", "H100\x1b[8m"));
    lb_result_set_metric(r, "evil\x1b[31m", 1.0, "u\x1b");
    lb_series *ser = lb_result_series(r, "s\x1b[0m", "ms\x1b");
    lb_result_series_push(ser, 1.0);
    json_array_append_new(r->tags, json_string("tag\x7f"));
    int64_t id = lb_test_store_ok(db, r);
    assert_true(id > 0);
    char id_text[24];
    snprintf(id_text, sizeof id_text, "%lld", (long long)id);
    assert_int_equal(run((const char *[]){"results", "show", id_text, NULL}), 0);
    if (strpbrk(out, "\x1b\x07\r\x7f") != NULL) fail_msg("stdout: %s", out);
    const char *want[] = {"data\\x1b[1m", "x\\x1b[2Jy",          "node\\r\\x1b[K",
                          "H100\\x1b[8m", " \\x1b]0;title\\x07", "evil\\x1b[31m",
                          "s\\x1b[0m",    "[\"tag\\x7f\"]"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (strstr(out, want[i]) == NULL) fail_msg("stdout lacks %s: %s", want[i], out);
}

static void test_cli_results_show_prints_numbers_for_people(void **state) {
    (void)state;
    lb_result *r = lb_result_new("train", "numbers");
    json_object_set_new(r->config, "lr", json_real(0.0003));
    lb_result_set_metric(r, "peak_host_mem_bytes", 173175000, "bytes");
    lb_result_set_metric(r, "achieved_gflops", 482964.79, "GFLOP/s");
    int64_t id = lb_test_store_ok(db, r);
    assert_true(id > 0);
    char id_text[24];
    snprintf(id_text, sizeof id_text, "%lld", (long long)id);
    assert_int_equal(run((const char *[]){"results", "show", id_text, NULL}), 0);
    assert_non_null(strstr(out, " 0.0003\n"));
    assert_non_null(strstr(out, "165.15 MiB"));
    assert_non_null(strstr(out, "482.96 TFLOP/s"));
    assert_null(strstr(out, "e+08"));
}

static void test_cli_results_list_with_no_match_names_the_filter(void **state) {
    (void)state;
    assert_int_equal(run((const char *[]){"results", "list", "--kind", "tarin", NULL}), 0);
    if (strstr(out, "no runs of kind 'tarin' in ") == NULL) fail_msg("stdout: %s", out);
    assert_int_equal(run((const char *[]){"results", "list", "--status", "failed", NULL}), 0);
    if (strstr(out, "no runs with status failed in ") == NULL) fail_msg("stdout: %s", out);
}

/* Writes a finished training result (lb_result_to_json's document, indented by `indent`)
 * to dir/name; the path goes into path. */
static void write_result_file(const char *name, int indent, char *path, size_t cap) {
    snprintf(path, cap, "%s/%s", dir, name);
    lb_result *r = lb_result_new("train", "from-elsewhere");
    r->status = LB_RUN_OK;
    r->start_wall_s = 1.7e9;
    r->end_wall_s = 1.7e9 + 60;
    lb_series *step = lb_result_series(r, "step_ms", "ms");
    for (int i = 0; i < 5; i++)
        lb_result_series_push(step, 50.0 + i);
    lb_result_set_metric(r, "tokens_per_s", 999.0, "tok/s");
    json_t *doc = lb_result_to_json(r);
    assert_int_equal(json_dump_file(doc, path, indent ? JSON_INDENT(indent) : JSON_COMPACT), 0);
    json_decref(doc);
    lb_result_free(r);
}

static size_t count_runs(int status) {
    lb_store *s = NULL;
    lb_err e = {{0}};
    assert_int_equal(lb_store_open_read(db, &s, &e), LB_OK);
    lb_store_filter f = lb_store_default_filter();
    f.status = status;
    lb_store_run_info *list = NULL;
    size_t n = 0;
    assert_int_equal(lb_store_list(s, &f, &list, &n, &e), LB_OK);
    free(list);
    lb_store_close(s);
    return n;
}

/* A run whose start or end is null cannot be placed in history (stored with the import's
 * time, an old run would pass for the newest): the import is refused, exit 2, naming the
 * file and the field, and nothing is stored. */
static void test_cli_results_import_of_a_run_without_its_times_exits_2(void **state) {
    (void)state;
    const char *fields[] = {"start_wall_s", "end_wall_s"};
    for (size_t i = 0; i < 2; i++) {
        char path[320], want[64];
        write_result_file("undated.json", 0, path, sizeof path);
        json_t *doc = json_load_file(path, 0, NULL);
        assert_non_null(doc);
        json_object_set_new(doc, fields[i], json_null());
        assert_int_equal(json_dump_file(doc, path, JSON_COMPACT), 0);
        json_decref(doc);
        size_t before = count_runs(-1);
        expect_error((const char *[]){"results", "import", path, NULL}, 2, path);
        snprintf(want, sizeof want, "\"%s\" is null", fields[i]);
        if (strstr(err, want) == NULL) fail_msg("stderr '%s' lacks '%s'", err, want);
        assert_int_equal(count_runs(-1), before);
    }
    /* an array whose second run has no start stores none of it, its first run included */
    char one[320], arr[352];
    write_result_file("dated.json", 0, one, sizeof one);
    json_t *a = json_load_file(one, 0, NULL), *b = json_deep_copy(a);
    assert_true(a && b);
    json_object_set_new(b, "start_wall_s", json_null());
    json_t *both = json_pack("[o, o]", a, b);
    snprintf(arr, sizeof arr, "%s.array", one);
    assert_int_equal(json_dump_file(both, arr, JSON_COMPACT), 0);
    json_decref(both);
    size_t before = count_runs(-1);
    expect_error((const char *[]){"results", "import", arr, NULL}, 2, "element 2 of");
    assert_int_equal(count_runs(-1), before);
}

/* Importing the same result twice (the same file, or a copy laid out otherwise) stores it
 * once and names the run that holds it; --again stores another. */
static void test_cli_results_import_of_the_same_result_twice_stores_it_once(void **state) {
    (void)state;
    char path[320], copy[320];
    write_result_file("kept.json", 0, path, sizeof path);
    write_result_file("copy.json", 4, copy, sizeof copy);
    assert_int_equal(run((const char *[]){"results", "import", path, NULL}), 0);
    long long first = 0;
    assert_int_equal(sscanf(strstr(out, "as run "), "as run %lld", &first), 1);
    size_t before = count_runs(-1);

    assert_int_equal(run((const char *[]){"results", "import", path, NULL}), 0);
    char want[128];
    snprintf(want, sizeof want, "was imported before, as run %lld in ", first);
    if (strstr(out, want) == NULL) fail_msg("stdout: %s", out);
    assert_int_equal(run((const char *[]){"results", "import", copy, "--json", NULL}), 0);
    json_t *doc = json_loads(out, 0, NULL);
    assert_non_null(doc);
    assert_int_equal(json_integer_value(json_object_get(doc, "id")), first);
    assert_true(json_is_false(json_object_get(doc, "stored")));
    json_decref(doc);
    assert_int_equal(count_runs(-1), before);

    assert_int_equal(run((const char *[]){"results", "import", path, "--again", "--json", NULL}),
                     0);
    doc = json_loads(out, 0, NULL);
    assert_non_null(doc);
    assert_true(json_integer_value(json_object_get(doc, "id")) > first);
    assert_true(json_is_true(json_object_get(doc, "stored")));
    json_decref(doc);
    assert_int_equal(count_runs(-1), before + 1);
}

/* When the database refuses the import's write (a trigger stands in for a full disk),
 * nothing of the run is left, neither `running` nor `failed`, and it does not count as
 * imported: once the database takes writes again, the import stores it. */
static void test_cli_results_import_whose_write_fails_leaves_no_run(void **state) {
    (void)state;
    char path[320];
    write_result_file("kept.json", 0, path, sizeof path);
    sqlite3 *h;
    assert_int_equal(sqlite3_open(db, &h), SQLITE_OK);
    assert_int_equal(sqlite3_exec(h,
                                  "CREATE TRIGGER full BEFORE INSERT ON metrics BEGIN SELECT "
                                  "RAISE(ABORT, 'database or disk is full'); END",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    size_t before = count_runs(-1);
    expect_error((const char *[]){"results", "import", path, NULL}, 1, "was not stored");
    assert_non_null(strstr(err, path));
    assert_non_null(strstr(err, "disk is full"));
    assert_int_equal(count_runs(-1), before);
    assert_string_equal(out, "");

    assert_int_equal(sqlite3_exec(h, "DROP TRIGGER full", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(h);
    assert_int_equal(run((const char *[]){"results", "import", path, NULL}), 0);
    assert_non_null(strstr(out, "stored "));
    assert_int_equal(count_runs(-1), before + 1);
}

/* Several `results import` of one file at the same moment, into a database of their own,
 * in rounds: the importers of a round wait on one pipe and start together when it closes.
 * In every round exactly one of them stores the result and the others name the run that
 * holds it. */
static void test_cli_results_imports_at_once_store_the_result_once(void **state) {
    (void)state;
    enum { ROUNDS = 40, IMPORTERS = 4 };
    char path[320];
    write_result_file("kept.json", 0, path, sizeof path);
    for (int round = 0; round < ROUNDS; round++) {
        char race_db[320];
        snprintf(race_db, sizeof race_db, "%s/race-%d.db", dir, round);
        lb_store *s = NULL;
        lb_err e = {{0}};
        assert_int_equal(lb_store_open(race_db, &s, &e), LB_OK);
        lb_store_close(s);
        int gate[2];
        assert_int_equal(pipe(gate), 0);
        pid_t pid[IMPORTERS];
        int out_fd[IMPORTERS];
        for (int k = 0; k < IMPORTERS; k++) {
            int pipe_out[2];
            assert_int_equal(pipe(pipe_out), 0);
            pid[k] = fork();
            assert_true(pid[k] >= 0);
            if (pid[k] == 0) {
                lb_test_die_with_parent();
                dup2(pipe_out[1], 1);
                close(pipe_out[0]);
                close(gate[1]);
                char c;
                (void)!read(gate[0], &c, 1);
                execl(LB_TEST_BIN, LB_TEST_BIN, "results", "import", path, "--db", race_db,
                      (char *)NULL);
                _exit(127);
            }
            close(pipe_out[1]);
            out_fd[k] = pipe_out[0];
        }
        close(gate[0]);
        close(gate[1]);
        char said[IMPORTERS][1024];
        long long stored_as = 0, named[IMPORTERS];
        int n_stored = 0, n_named = 0;
        for (int k = 0; k < IMPORTERS; k++) {
            lb_test_slurp(out_fd[k], said[k], sizeof said[k]);
            close(out_fd[k]);
            int status = 0;
            assert_int_equal(waitpid(pid[k], &status, 0), pid[k]);
            assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
            const char *as = strstr(said[k], "as run ");
            assert_non_null(as);
            if (strncmp(said[k], "stored ", 7) == 0) {
                n_stored++;
                assert_int_equal(sscanf(as, "as run %lld", &stored_as), 1);
            } else {
                assert_non_null(strstr(said[k], "was imported before, as run "));
                assert_int_equal(sscanf(as, "as run %lld", &named[n_named++]), 1);
            }
        }
        if (n_stored != 1)
            fail_msg("round %d: %d of %d imports stored the result; the first said: %s", round,
                     n_stored, IMPORTERS, said[0]);
        for (int k = 0; k < n_named; k++)
            assert_int_equal(named[k], stored_as);
    }
}

/* Stored run id of the database at path (the caller frees it). */
static lb_result *load_run(const char *path, int64_t id) {
    lb_store *s = NULL;
    lb_err e = {{0}};
    assert_int_equal(lb_store_open_read(path, &s, &e), LB_OK);
    lb_result *r = NULL;
    assert_int_equal(lb_store_run_load(s, id, &r, &e), LB_OK);
    lb_store_close(s);
    return r;
}

/* Runs leave one database through `results export --format json` and enter a fresh one
 * through `results import`, each element of the export one run with the same metrics and
 * samples; importing the file again stores nothing and names the runs that hold them. */
static void test_cli_results_import_of_an_export_moves_its_runs_once(void **state) {
    (void)state;
    /* a second finished run beside ok_id (the one left running cannot move: it never ended) */
    lb_result *r = lb_result_new("comm", "all-reduce");
    lb_result_set_metric(r, "avg_busbw", 40.5, "GB/s");
    lb_result_set_metric(r, "wrong_total", 0, "count");
    int64_t second = lb_test_store_ok(db, r);
    assert_true(second > 0);

    char path[320], fresh[320], a[24], b[24];
    snprintf(path, sizeof path, "%s/moved.json", dir);
    snprintf(fresh, sizeof fresh, "%s/fresh.db", dir);
    snprintf(a, sizeof a, "%lld", (long long)ok_id);
    snprintf(b, sizeof b, "%lld", (long long)second);
    assert_int_equal(run((const char *[]){"results", "export", a, b, "--out", path, NULL}), 0);
    int rc = run((const char *[]){"results", "import", path, "--db", fresh, "--json", NULL});
    if (rc != 0) fail_msg("exit %d: %s", rc, err);
    json_t *doc = json_loads(out, 0, NULL);
    assert_int_equal(json_array_size(doc), 2);
    const int64_t source[2] = {ok_id, second};
    int64_t moved[2];
    for (size_t i = 0; i < 2; i++) {
        json_t *one = json_array_get(doc, i);
        assert_true(json_is_true(json_object_get(one, "stored")));
        moved[i] = json_integer_value(json_object_get(one, "id"));
        lb_result *was = load_run(db, source[i]), *is = load_run(fresh, moved[i]);
        assert_string_equal(is->name, was->name);
        assert_int_equal(is->status, LB_RUN_OK);
        assert_int_equal(is->n_metrics, was->n_metrics);
        for (size_t k = 0; k < was->n_metrics; k++)
            assert_float_equal(lb_result_metric(is, was->metrics[k].name), was->metrics[k].value,
                               0.0);
        assert_int_equal(is->n_series, was->n_series);
        for (size_t k = 0; k < was->n_series; k++)
            assert_int_equal(lb_result_find_series(is, was->series[k].name)->n, was->series[k].n);
        lb_result_free(was);
        lb_result_free(is);
    }
    json_decref(doc);

    rc = run((const char *[]){"results", "import", path, "--db", fresh, NULL});
    if (rc != 0) fail_msg("exit %d: %s", rc, err);
    for (size_t i = 0; i < 2; i++) {
        char want[512];
        snprintf(want, sizeof want, "run %lld of %s was imported before, as run %lld in ",
                 (long long)source[i], path, (long long)moved[i]);
        if (strstr(out, want) == NULL) fail_msg("stdout lacks '%s': %s", want, out);
    }
    assert_true(strncmp(out, "stored ", 7) != 0 && strstr(out, "\nstored ") == NULL);
    lb_store *s = NULL;
    lb_err e = {{0}};
    assert_int_equal(lb_store_open_read(fresh, &s, &e), LB_OK);
    lb_store_filter f = lb_store_default_filter();
    lb_store_run_info *list = NULL;
    size_t n = 0;
    assert_int_equal(lb_store_list(s, &f, &list, &n, &e), LB_OK);
    assert_int_equal(n, 2);
    free(list);
    lb_store_close(s);
}

/* Whether process pid has path open (a link of /proc/PID/fd names it). */
static bool holds_open(pid_t pid, const char *path) {
    char dir_path[64];
    snprintf(dir_path, sizeof dir_path, "/proc/%d/fd", (int)pid);
    DIR *d = opendir(dir_path);
    bool found = false;
    for (struct dirent *de; d != NULL && !found && (de = readdir(d)) != NULL;) {
        char link[384], target[4096];
        snprintf(link, sizeof link, "%s/%s", dir_path, de->d_name);
        ssize_t n = readlink(link, target, sizeof target - 1);
        if (n <= 0) continue;
        target[n] = '\0';
        found = strcmp(target, path) == 0;
    }
    if (d != NULL) closedir(d);
    return found;
}

/* An import waiting for another process's write lock (LLMBENCH_DB_WAIT_S=60) stops at a
 * Ctrl-C at once: exit 130, one line naming the file and saying nothing was stored, and
 * nothing is. */
static void test_cli_results_import_waiting_for_the_lock_stops_at_ctrl_c(void **state) {
    (void)state;
    char path[320];
    write_result_file("kept.json", 0, path, sizeof path);
    size_t before = count_runs(-1);
    sqlite3 *h = NULL;
    assert_int_equal(sqlite3_open(db, &h), SQLITE_OK);
    assert_int_equal(sqlite3_exec(h, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
    setenv("LLMBENCH_DB_WAIT_S", "60", 1);
    const char *argv[] = {LB_TEST_BIN, "results", "import", path, NULL};
    int out_fd = -1, err_fd = -1;
    pid_t pid = lb_test_spawn(LB_TEST_BIN, argv, &out_fd, &err_fd);
    unsetenv("LLMBENCH_DB_WAIT_S");
    assert_true(pid > 0);
    /* once the import has the database open (its signal handling long set up), it waits
     * for the lock: a signal before then would end a process not yet listening */
    bool opened = false;
    for (int i = 0; i < 1000 && !opened; i++) {
        usleep(10 * 1000);
        opened = holds_open(pid, db);
    }
    assert_true(opened);
    usleep(200 * 1000);
    int64_t t0 = lb_clock_now_ns();
    kill(pid, SIGINT);
    int status = 0;
    pid_t ended = 0;
    while ((ended = waitpid(pid, &status, WNOHANG)) == 0 && lb_clock_now_ns() - t0 < 3000000000)
        usleep(10 * 1000);
    double took_s = (lb_clock_now_ns() - t0) * 1e-9;
    assert_int_equal(sqlite3_exec(h, "ROLLBACK", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(h);
    if (ended == 0) assert_int_equal(waitpid(pid, &status, 0), pid);
    lb_test_slurp(out_fd, out, sizeof out);
    lb_test_slurp(err_fd, err, sizeof err);
    close(out_fd);
    close(err_fd);
    if (took_s >= 2.0) fail_msg("the import ended %.1f s after SIGINT; stderr: %s", took_s, err);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 130);
    char want[1024];
    snprintf(want, sizeof want,
             "llmbench results import: %s was not stored: interrupted while waiting for "
             "results database %s, locked by another process: nothing was stored\n",
             path, db);
    assert_string_equal(err, want);
    assert_string_equal(out, "");
    assert_int_equal(count_runs(-1), before);
}

/* A Ctrl-C that came once FILE was read stops the import before its next run (here the
 * first) with 130, storing nothing; without it the same call stores both runs. */
static void test_cli_results_import_after_ctrl_c_stores_nothing(void **state) {
    (void)state;
    char one[320], arr[352];
    write_result_file("kept.json", 0, one, sizeof one);
    json_t *a = json_load_file(one, 0, NULL), *b = json_deep_copy(a);
    assert_true(a && b);
    json_object_set_new(b, "name", json_string("other"));
    json_t *both = json_pack("[o, o]", a, b);
    snprintf(arr, sizeof arr, "%s.array", one);
    assert_int_equal(json_dump_file(both, arr, JSON_COMPACT), 0);
    json_decref(both);
    size_t before = count_runs(-1);
    char *args[] = {"results", "import", arr, NULL};
    lb_signals_raise(SIGINT);
    int code = lb_cmd_results(3, args);
    lb_signals_reset();
    assert_int_equal(code, 130);
    assert_int_equal(count_runs(-1), before);
    assert_int_equal(lb_cmd_results(3, args), 0);
    assert_int_equal(count_runs(-1), before + 2);
}

/* A database whose path is not UTF-8 (a Latin-1 folder name): list --json and import
 * --json print a whole document, the path's odd byte as '?'. */
static void test_cli_results_json_names_a_database_path_that_is_not_utf8(void **state) {
    (void)state;
    char latin[320];
    snprintf(latin, sizeof latin, "%s/r\xe9sults.db", dir);
    assert_int_equal(rename(db, latin), 0);
    char want[320];
    snprintf(want, sizeof want, "%s/r?sults.db", dir);
    assert_int_equal(run((const char *[]){"results", "list", "--json", "--db", latin, NULL}), 0);
    json_t *doc = json_loads(out, 0, NULL);
    if (doc == NULL) fail_msg("not JSON: '%s'", out);
    assert_string_equal(json_string_value(json_object_get(doc, "db")), want);
    assert_int_equal(json_array_size(json_object_get(doc, "runs")), 2);
    json_decref(doc);
    char path[320];
    write_result_file("kept.json", 0, path, sizeof path);
    assert_int_equal(
        run((const char *[]){"results", "import", path, "--json", "--db", latin, NULL}), 0);
    doc = json_loads(out, 0, NULL);
    if (doc == NULL) fail_msg("not JSON: '%s'", out);
    assert_string_equal(json_string_value(json_object_get(doc, "db")), want);
    assert_true(json_is_true(json_object_get(doc, "stored")));
    json_decref(doc);
}

int main(void) {
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_cli_results_without_subcommand_exits_2),
        T(test_cli_results_unknown_subcommand_exits_2_naming_it),
        T(test_cli_results_malformed_id_exits_2_naming_it),
        T(test_cli_results_show_without_id_exits_2),
        T(test_cli_results_unknown_id_exits_1_naming_it),
        T(test_cli_results_bad_format_exits_2_naming_it),
        T(test_cli_results_bad_list_options_exit_2),
        T(test_cli_results_list_shows_running_run_first),
        T(test_cli_results_list_says_limit_cut_it_only_when_it_did),
        T(test_cli_results_list_gives_long_tags_whole),
        T(test_cli_results_output_that_cannot_be_written_exits_1),
        T(test_cli_results_show_prints_metrics_and_series),
        T(test_cli_results_export_out_replaces_file_whole),
        T(test_cli_results_export_out_keeps_the_replaced_file_s_mode),
        T(test_cli_results_export_out_that_cannot_be_a_file_exits_2),
        T(test_cli_results_export_out_refuses_the_database),
        T(test_cli_results_export_csv_to_stdout),
        T(test_cli_results_export_json_is_format_json_and_refused_with_another),
        T(test_cli_results_export_of_an_id_given_twice_has_it_once),
        T(test_cli_results_newer_database_exits_1_saying_so),
        T(test_cli_results_read_commands_never_create_a_database),
        T(test_cli_results_export_that_fails_midway_prints_nothing),
        T(test_cli_results_help_names_the_interrupted_exit_code),
        T(test_cli_results_import_interrupted_while_reading_exits_130),
        T(test_cli_results_list_escapes_control_characters_in_names),
        T(test_cli_results_show_escapes_control_characters_in_config_and_provenance),
        T(test_cli_results_show_prints_numbers_for_people),
        T(test_cli_results_list_with_no_match_names_the_filter),
        T(test_cli_results_import_of_the_same_result_twice_stores_it_once),
        T(test_cli_results_import_whose_write_fails_leaves_no_run),
        T(test_cli_results_import_of_a_run_without_its_times_exits_2),
        T(test_cli_results_imports_at_once_store_the_result_once),
        T(test_cli_results_import_of_an_export_moves_its_runs_once),
        T(test_cli_results_json_names_a_database_path_that_is_not_utf8),
        T(test_cli_results_import_waiting_for_the_lock_stops_at_ctrl_c),
        T(test_cli_results_import_after_ctrl_c_stores_nothing),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
