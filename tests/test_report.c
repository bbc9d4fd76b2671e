/* test_report.c: `llmbench report` as a person sees it. A sweep of short CPU training runs
 * is reported; the page is rendered by headless Chromium (Debian's package) to a PNG and
 * to its parsed DOM: the page loads whole with no console error, the throughput chart has
 * one bar per configuration, and every loss curve has one point per timed step. Bad input
 * (no runs, unknown runs, no --out) is refused with exit 2. Without Chromium the browser
 * part is skipped and says so; the files are still checked. */
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <regex.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "core/signals.h"
#include "core/utf8text.h"
#include "history/select.h"
#include "report/report.h"
#include "report/svg.h"
#include "store/store.h"
#include "test_util.h"

#define STEPS 6

static char g_dir[64], g_db[128];
static char out[1 << 21], err[1 << 16];

static int run(const char *const *args) {
    return lb_test_run(args, out, sizeof out, err, sizeof err);
}

static size_t count(const char *text, const char *needle) {
    size_t n = 0;
    for (const char *p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

/* Every <polyline> of the chart titled `title`: data-n and the pairs in points agree, and
 * equal want. Returns the number of lines checked. */
static size_t check_lines(const char *page, const char *title, size_t want) {
    const char *chart = strstr(page, title);
    assert_non_null(chart);
    const char *end = strstr(chart, "</svg>");
    assert_non_null(end);
    size_t lines = 0;
    for (const char *p = chart; (p = strstr(p, "<polyline")) != NULL && p < end; p++) {
        const char *dn = strstr(p, "data-n=\"");
        const char *pts = strstr(p, "points=\"");
        assert_non_null(dn);
        assert_non_null(pts);
        size_t n = (size_t)strtoul(dn + 8, NULL, 10), pairs = 0;
        for (const char *q = pts + 8; *q != '"'; q++)
            pairs += *q == ',';
        assert_int_equal(n, pairs);
        assert_int_equal(n, want);
        lines++;
    }
    return lines;
}

static void check_page(const char *page, const char *what) {
    if (strstr(page, "<footer id=\"end\">") == NULL) fail_msg("%s: the page is not whole", what);
    /* throughput: one bar per configuration (2 cells) */
    const char *bars = strstr(page, "tokens_per_s per configuration");
    assert_non_null(bars);
    const char *bars_end = strstr(bars, "</svg>");
    size_t n_bars = 0;
    for (const char *p = bars; (p = strstr(p, "class=\"bar\"")) != NULL && p < bars_end; p++)
        n_bars++;
    assert_int_equal(n_bars, 2);
    assert_int_equal(check_lines(page, "training loss per step", STEPS), 2);
    assert_int_equal(check_lines(page, "step time per step", STEPS), 2);
    assert_true(count(page, "class=\"chart\"") >= 5);
}

static void test_report_renders_in_chromium_with_a_mark_per_datum(void **state) {
    (void)state;
    char matrix[160], dir[160], html[200], png[200];
    snprintf(matrix, sizeof matrix, "%s/m.yaml", g_dir);
    snprintf(dir, sizeof dir, "%s/rep", g_dir);
    snprintf(html, sizeof html, "%s/report.html", dir);
    snprintf(png, sizeof png, "%s/report.png", dir);
    char text[256];
    snprintf(text, sizeof text,
             "name: rep\ncommand: train\nrepeats: 2\noptions: {model: gpt2-tiny, device: cpu, "
             "seq: 16, steps: %d, warmup: 1}\naxes: {batch: [1, 2]}\n",
             STEPS);
    assert_true(lb_test_write_file(matrix, text));
    int rc = run((const char *[]){"sweep", matrix, "--db", g_db, NULL});
    if (rc != 0) fail_msg("sweep exit %d: %s", rc, err);
    rc = run((const char *[]){"report", "rep", "--out", dir, "--title", "Sweep <rep>", "--db", g_db,
                              NULL});
    if (rc != 0) fail_msg("report exit %d: %s", rc, err);
    char *page = lb_test_read_file(html, NULL);
    assert_non_null(page);
    check_page(page, "report.html");
    assert_non_null(strstr(page, "Sweep &lt;rep&gt;")); /* the title, escaped */
    /* a finding of the axis, with its figure */
    assert_true(strstr(page, "batch=2 gives") != NULL || strstr(page, "batch=2 costs") != NULL);
    assert_null(strstr(page, "<script"));
    free(page);
    char *md = NULL;
    char md_path[200], svg_path[200];
    snprintf(md_path, sizeof md_path, "%s/report.md", dir);
    snprintf(svg_path, sizeof svg_path, "%s/chart-1.svg", dir);
    assert_non_null(md = lb_test_read_file(md_path, NULL));
    assert_non_null(strstr(md, "| batch=1 | 2 |"));
    assert_non_null(strstr(md, "![train: tokens_per_s per configuration"));
    free(md);
    char *svg = lb_test_read_file(svg_path, NULL);
    assert_non_null(svg);
    free(svg);

    if (system("command -v chromium >/dev/null 2>&1") != 0) {
        fprintf(stderr, "chromium is not installed: the page was not rendered\n");
        skip();
    }
    char cmd[1024], dom_path[200], log_path[200];
    snprintf(dom_path, sizeof dom_path, "%s/dom.html", g_dir);
    snprintf(log_path, sizeof log_path, "%s/chromium.log", g_dir);
    snprintf(cmd, sizeof cmd,
             "chromium --headless --no-sandbox --disable-gpu --hide-scrollbars "
             "--enable-logging=stderr --v=0 --dump-dom file://%s > %s 2> %s",
             html, dom_path, log_path);
    assert_int_equal(system(cmd), 0);
    char *dom = lb_test_read_file(dom_path, NULL);
    assert_non_null(dom);
    check_page(dom, "Chromium's DOM");
    free(dom);
    char *log = lb_test_read_file(log_path, NULL);
    if (log && strstr(log, ":CONSOLE(")) fail_msg("console messages: %s", log);
    free(log);
    snprintf(cmd, sizeof cmd,
             "chromium --headless --no-sandbox --disable-gpu --hide-scrollbars "
             "--window-size=1100,3000 --screenshot=%s file://%s > /dev/null 2>&1",
             png, html);
    assert_int_equal(system(cmd), 0);
    size_t n = 0;
    char *img = lb_test_read_file(png, &n);
    assert_non_null(img);
    assert_true(n > 20000);
    assert_memory_equal(img, "\x89PNG\r\n\x1a\n", 8);
    free(img);
}

/* A time window groups the repeats of a configuration (one benchmark) together. */
static void test_report_since_groups_runs_by_benchmark(void **state) {
    (void)state;
    char dir[160], md_path[200];
    snprintf(dir, sizeof dir, "%s/recent", g_dir);
    snprintf(md_path, sizeof md_path, "%s/report.md", dir);
    int rc = run((const char *[]){"report", "--since", "1", "--out", dir, "--db", g_db, NULL});
    if (rc != 0) fail_msg("exit %d: %s", rc, err);
    char *md = lb_test_read_file(md_path, NULL);
    assert_non_null(md);
    /* the sweep's two cells, two repeats each */
    assert_int_equal(count(md, "| gpt2-tiny-cpu-fp32 ["), 2);
    assert_int_equal(count(md, "] | 2 |"), 2);
    free(md);
}

/* `llmbench run` ends with each run against its history and the report's path. */
static void test_run_ends_with_history_and_report(void **state) {
    (void)state;
    char db[160];
    snprintf(db, sizeof db, "%s/suite/results.db", g_dir);
    int rc = run((const char *[]){"run", "--cpu-only", "--steps", "3", "--db", db, NULL});
    if (rc != 0) fail_msg("exit %d: %s", rc, err);
    assert_int_equal(count(out, ": no change point in 1 runs of tokens_per_s"), 2);
    /* The table's FLOP rate of each run carries the SI prefix that keeps it below 1000. */
    regex_t re;
    assert_int_equal(
        regcomp(&re, " ([0-9]+)\\.[0-9][0-9] [kMGTPE]?FLOP/s$", REG_EXTENDED | REG_NEWLINE), 0);
    int rates = 0;
    regmatch_t m[2];
    for (const char *p = out; regexec(&re, p, 2, m, 0) == 0; p += m[0].rm_eo) {
        long whole = strtol(p + m[1].rm_so, NULL, 10);
        if (whole >= 1000 || (whole < 1 && strncmp(p + m[0].rm_so, " 0.00 ", 6) != 0))
            fail_msg("FLOP rate '%.*s'", (int)(m[0].rm_eo - m[0].rm_so), p + m[0].rm_so);
        rates++;
    }
    regfree(&re);
    assert_int_equal(rates, 2);
    const char *line = strstr(out, "report: ");
    assert_non_null(line);
    char path[256];
    assert_int_equal(sscanf(line, "report: %255s", path), 1);
    char want[200];
    snprintf(want, sizeof want, "%s/suite/reports/run-1/report.html", g_dir);
    assert_string_equal(path, want);
    char *page = lb_test_read_file(path, NULL);
    assert_non_null(page);
    assert_non_null(strstr(page, "llama-tiny"));
    free(page);
    /* each benchmark of the suite a configuration of its own, not one group of repeats */
    snprintf(path, sizeof path, "%s/suite/reports/run-1/report.md", g_dir);
    char *md = lb_test_read_file(path, NULL);
    assert_non_null(md);
    if (strstr(md, "| gpt2-tiny-cpu-fp32 (run 1) | 1 |") == NULL ||
        strstr(md, "| llama-tiny-cpu-fp32 (run 2) | 1 |") == NULL)
        fail_msg("report.md: %s", md);
    free(md);
}

static void test_report_bad_input_exits_2(void **state) {
    (void)state;
    char dir[160];
    snprintf(dir, sizeof dir, "%s/bad", g_dir);
    assert_int_equal(run((const char *[]){"report", "999999", "--out", dir, "--db", g_db, NULL}),
                     2);
    assert_non_null(strstr(err, "run 999999 does not exist"));
    assert_int_equal(run((const char *[]){"report", "nosweep", "--out", dir, "--db", g_db, NULL}),
                     2);
    assert_int_equal(run((const char *[]){"report", "rep", "--db", g_db, NULL}), 2);
    assert_non_null(strstr(err, "--out DIR is required"));
    assert_int_equal(run((const char *[]){"report", "--out", dir, "--db", g_db, NULL}), 2);
    assert_non_null(strstr(err, "name the runs"));
}

static void test_report_json_names_its_files_as_json_strings(void **state) {
    (void)state;
    char dir[160], html[200];
    snprintf(dir, sizeof dir, "%s/a \"quoted\" \\ folder", g_dir);
    snprintf(html, sizeof html, "%s/report.html", dir);
    char matrix[160];
    snprintf(matrix, sizeof matrix, "%s/j.yaml", g_dir);
    assert_true(lb_test_write_file(matrix, "name: jrep\ncommand: train\noptions: {model: "
                                           "gpt2-tiny, device: cpu, seq: 16, steps: 2}\n"));
    int rc = run((const char *[]){"sweep", matrix, "--db", g_db, NULL});
    if (rc != 0) fail_msg("sweep exit %d: %s", rc, err);
    rc = run((const char *[]){"report", "jrep", "--out", dir, "--json", "--db", g_db, NULL});
    if (rc != 0) fail_msg("report exit %d: %s", rc, err);
    json_error_t jerr;
    json_t *doc = json_loads(out, 0, &jerr);
    if (doc == NULL) fail_msg("not JSON (%s): %s", jerr.text, out);
    assert_string_equal(json_string_value(json_object_get(doc, "html")), html);
    json_decref(doc);
    assert_int_equal(access(html, F_OK), 0);
    /* written again where an older, longer report left more charts: those are removed */
    int n = 0;
    char chart[240];
    do
        snprintf(chart, sizeof chart, "%s/chart-%d.svg", dir, ++n);
    while (access(chart, F_OK) == 0);
    assert_true(n > 1);
    for (int k = n; k < n + 2; k++) {
        snprintf(chart, sizeof chart, "%s/chart-%d.svg", dir, k);
        assert_true(lb_test_write_file(chart, "<svg/>"));
    }
    rc = run((const char *[]){"report", "jrep", "--out", dir, "--db", g_db, NULL});
    if (rc != 0) fail_msg("report exit %d: %s", rc, err);
    snprintf(chart, sizeof chart, "%s/chart-%d.svg", dir, n - 1);
    assert_int_equal(access(chart, F_OK), 0);
    for (int k = n; k < n + 2; k++) {
        snprintf(chart, sizeof chart, "%s/chart-%d.svg", dir, k);
        assert_int_equal(access(chart, F_OK), -1);
    }
}

/* A run named with Markdown's and HTML's special characters and a line break: report.md
 * shows the name as text in one table row, opening no HTML tag, code span, emphasis, link
 * or new row, and leaves what cannot open one (snake_case, a lone [k]) as it is. */
static void test_report_markdown_shows_names_as_text(void **state) {
    (void)state;
    char db[160], dir[160], md_path[200];
    snprintf(db, sizeof db, "%s/names.db", g_dir);
    snprintf(dir, sizeof dir, "%s/names", g_dir);
    snprintf(md_path, sizeof md_path, "%s/report.md", dir);
    lb_result *r = lb_result_new(
        "train", "a|b\n<script>alert(1)</script> &amp; `x` \\ *e* _u_ snake_case [t](u) [k]");
    lb_result_set_metric(r, "tokens_per_s", 10.0, "tok/s");
    int64_t id = lb_test_store_ok(db, r);
    assert_true(id > 0);
    char id_text[24];
    snprintf(id_text, sizeof id_text, "%lld", (long long)id);
    int rc = run(
        (const char *[]){"report", id_text, "--out", dir, "--title", "T <b>", "--db", db, NULL});
    if (rc != 0) fail_msg("report exit %d: %s", rc, err);
    char *md = lb_test_read_file(md_path, NULL);
    assert_non_null(md);
    for (const char *p = strchr(md, '<'); p != NULL; p = strchr(p + 1, '<'))
        if (p[-1] != '\\') fail_msg("an HTML tag in report.md: %.40s", p);
    if (strstr(md, " | train | a\\|b \\<script>alert(1)\\</script> \\&amp; \\`x\\` \\\\ "
                   "\\*e\\* \\_u\\_ snake_case [t\\](u) [k] | ") == NULL ||
        strncmp(md, "# T \\<b>\n", 9) != 0)
        fail_msg("report.md: %s", md);
    free(md);
}

/* A run named twice, as an id, in a list of repeats and through --since, is reported once:
 * one configuration of one run, one provenance row; a list naming it twice is labelled by
 * the run once. */
static void test_report_counts_a_run_named_twice_once(void **state) {
    (void)state;
    char db[160], dir[160], md_path[200];
    snprintf(db, sizeof db, "%s/twice.db", g_dir);
    snprintf(dir, sizeof dir, "%s/twice", g_dir);
    snprintf(md_path, sizeof md_path, "%s/report.md", dir);
    lb_result *r = lb_result_new("train", "once");
    lb_result_set_metric(r, "tokens_per_s", 10.0, "tok/s");
    int64_t id = lb_test_store_ok(db, r);
    assert_true(id > 0);
    char one[24], two[48];
    snprintf(one, sizeof one, "%lld", (long long)id);
    snprintf(two, sizeof two, "%lld,%lld", (long long)id, (long long)id);
    int rc = run(
        (const char *[]){"report", one, two, one, "--since", "1", "--out", dir, "--db", db, NULL});
    if (rc != 0) fail_msg("report exit %d: %s", rc, err);
    char *md = lb_test_read_file(md_path, NULL);
    assert_non_null(md);
    char row[64];
    snprintf(row, sizeof row, "\n| %s | train | once |", one);
    if (strstr(md, "\n1 runs in 1 configurations;") == NULL || count(md, row) != 1)
        fail_msg("report.md: %s", md);
    free(md);
    /* the list of repeats alone: its configuration is named by the one run it kept */
    rc = run((const char *[]){"report", two, "--out", dir, "--db", db, NULL});
    if (rc != 0) fail_msg("report exit %d: %s", rc, err);
    md = lb_test_read_file(md_path, NULL);
    assert_non_null(md);
    snprintf(row, sizeof row, "\n| %s | 1 |", one);
    if (strstr(md, row) == NULL || strstr(md, two) != NULL) fail_msg("report.md: %s", md);
    free(md);
}

/* Stores an ok train run named name whose tokens_per_s is tok_per_s; ranks 0 leaves the
 * rank count out. Returns its id. */
static int64_t store_train(const char *db, const char *name, int batch, int ranks,
                           double tok_per_s) {
    lb_result *r = lb_result_new("train", name);
    json_object_set_new(r->config, "batch", json_integer(batch));
    if (ranks > 0) json_object_set_new(r->config, "ranks", json_integer(ranks));
    lb_result_set_metric(r, "tokens_per_s", tok_per_s, "tok/s");
    int64_t id = lb_test_store_ok(db, r);
    assert_true(id > 0);
    return id;
}

/* Stores r as a run that ended with status; frees r. Returns its id. */
static int64_t store_ended(const char *db, lb_result *r, lb_run_status status) {
    lb_store *s = NULL;
    lb_err e = {{0}};
    int64_t id = -1;
    assert_int_equal(lb_store_open(db, &s, &e), LB_OK);
    assert_int_equal(lb_store_run_begin(s, r, &id, &e), LB_OK);
    r->status = status;
    assert_int_equal(lb_store_run_finish(s, id, r, &e), LB_OK);
    lb_result_free(r);
    lb_store_close(s);
    return id;
}

/* Configurations whose median throughput is 0 (every request failed, a stalled rank) get
 * findings with the values themselves, never a ratio to zero ("infx", "inf%"). */
static void test_report_findings_never_divide_by_a_zero_median(void **state) {
    (void)state;
    char db[160], dir[160], md_path[200];
    snprintf(db, sizeof db, "%s/zero.db", g_dir);
    snprintf(dir, sizeof dir, "%s/zero", g_dir);
    snprintf(md_path, sizeof md_path, "%s/report.md", dir);
    char fast[24], stalled[24], flaky[80], one[24], two[24];
    snprintf(fast, sizeof fast, "%lld", (long long)store_train(db, "fast", 1, 0, 100.0));
    snprintf(stalled, sizeof stalled, "%lld", (long long)store_train(db, "stalled", 2, 0, 0.0));
    int64_t f0 = store_train(db, "flaky", 3, 0, 0.0), f1 = store_train(db, "flaky", 3, 0, 0.0),
            f2 = store_train(db, "flaky", 3, 0, 5.0); /* median 0, spread 5 */
    snprintf(flaky, sizeof flaky, "%lld,%lld,%lld", (long long)f0, (long long)f1, (long long)f2);
    snprintf(one, sizeof one, "%lld", (long long)store_train(db, "scaled", 4, 1, 0.0));
    snprintf(two, sizeof two, "%lld", (long long)store_train(db, "scaled", 4, 2, 10.0));
    int rc = run(
        (const char *[]){"report", fast, stalled, flaky, one, two, "--out", dir, "--db", db, NULL});
    if (rc != 0) fail_msg("report exit %d: %s", rc, err);
    char *md = lb_test_read_file(md_path, NULL);
    assert_non_null(md);
    char worst[80];
    snprintf(worst, sizeof worst, "- Best tokens_per_s: %s at ", fast);
    const char *best = strstr(md, worst);
    if (best == NULL) fail_msg("report.md: %s", md);
    snprintf(worst, sizeof worst, "; the worst: %s at 0", stalled);
    const char *nl = strchr(best, '\n'), *w = strstr(best, worst);
    if (w == NULL || w > nl) fail_msg("finding: %.*s", (int)(nl - best), best);
    assert_non_null(
        strstr(md, "- scaled: no scaling efficiency, as 1 rank measured a tokens_per_s of 0.\n"));
    assert_null(strstr(md, "Repeats vary")); /* the only repeats have median 0 */
    const char *ratios[] = {"infx", "inf%", "nanx", "nan%"};
    for (size_t i = 0; i < sizeof ratios / sizeof ratios[0]; i++)
        if (strstr(md, ratios[i]) != NULL) fail_msg("'%s' in report.md: %s", ratios[i], md);
    free(md);
}

/* A list of ids of two benchmarks (batch 1 and batch 2) is one configuration whose figures
 * pool both: a finding says so, naming the runs and what differs. */
static void test_report_says_when_a_configuration_mixes_benchmarks(void **state) {
    (void)state;
    char db[160], dir[160], md_path[200], ids[64], want[256];
    snprintf(db, sizeof db, "%s/mixed.db", g_dir);
    snprintf(dir, sizeof dir, "%s/mixed", g_dir);
    snprintf(md_path, sizeof md_path, "%s/report.md", dir);
    long long a = (long long)store_train(db, "small", 1, 0, 10.0);
    long long b = (long long)store_train(db, "large", 2, 0, 20.0);
    snprintf(ids, sizeof ids, "%lld,%lld", a, b);
    int rc = run((const char *[]){"report", ids, "--out", dir, "--db", db, NULL});
    if (rc != 0) fail_msg("report exit %d: %s", rc, err);
    char *md = lb_test_read_file(md_path, NULL);
    assert_non_null(md);
    snprintf(want, sizeof want,
             "- Configuration %s mixes benchmarks: runs %lld and %lld differ in batch 1 -> 2; "
             "its figures pool them.\n",
             ids, a, b);
    if (strstr(md, want) == NULL) fail_msg("report.md lacks '%s': %s", want, md);
    free(md);
    /* repeats of one benchmark are not called mixed */
    snprintf(ids, sizeof ids, "%lld,%lld", a, (long long)store_train(db, "small", 1, 0, 11.0));
    rc = run((const char *[]){"report", ids, "--out", dir, "--db", db, NULL});
    if (rc != 0) fail_msg("report exit %d: %s", rc, err);
    md = lb_test_read_file(md_path, NULL);
    assert_non_null(md);
    if (strstr(md, "mixes benchmarks") != NULL) fail_msg("report.md: %s", md);
    free(md);
}

/* Stores an ok train run of sweep's cell label (its two tags) with batch and tok_per_s. */
static void store_cell(const char *db, const char *sweep, const char *label, int batch,
                       double tok_per_s) {
    lb_result *r = lb_result_new("train", sweep);
    char tag[64];
    snprintf(tag, sizeof tag, "sweep:%s", sweep);
    json_array_append_new(r->tags, json_string(tag));
    snprintf(tag, sizeof tag, "sweep-cell:%s", label);
    json_array_append_new(r->tags, json_string(tag));
    json_object_set_new(r->config, "batch", json_integer(batch));
    lb_result_set_metric(r, "tokens_per_s", tok_per_s, "tok/s");
    assert_true(lb_test_store_ok(db, r) > 0);
}

/* Two sweeps with the same cells in one report: each configuration is named by its sweep,
 * and an axis' effect is computed for each sweep within it, never from a cell of the other.
 * One sweep alone keeps its cells' labels. */
static void test_report_of_two_sweeps_names_cells_by_sweep(void **state) {
    (void)state;
    char db[160], dir[160], md_path[200];
    snprintf(db, sizeof db, "%s/two.db", g_dir);
    snprintf(dir, sizeof dir, "%s/two", g_dir);
    snprintf(md_path, sizeof md_path, "%s/report.md", dir);
    store_cell(db, "mon", "batch=1", 1, 100.0);
    store_cell(db, "mon", "batch=2", 2, 200.0);
    store_cell(db, "tue", "batch=1", 1, 100.0);
    store_cell(db, "tue", "batch=2", 2, 400.0);
    int rc = run((const char *[]){"report", "mon", "tue", "--out", dir, "--db", db, NULL});
    if (rc != 0) fail_msg("report exit %d: %s", rc, err);
    char *md = lb_test_read_file(md_path, NULL);
    assert_non_null(md);
    const char *rows[] = {"\n| mon: batch=1 | 1 |", "\n| mon: batch=2 | 1 |",
                          "\n| tue: batch=1 | 1 |", "\n| tue: batch=2 | 1 |"};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        if (strstr(md, rows[i]) == NULL) fail_msg("report.md lacks '%s': %s", rows[i], md);
    /* mon's batch=2 against mon's batch=1 alone: 2x, not over tue's cells too */
    if (strstr(md, "- mon: batch=2 gives 2.00x the tokens_per_s of mon: batch=1 (geometric mean "
                   "over 1 matched configurations).\n") == NULL)
        fail_msg("report.md: %s", md);
    /* and tue's within tue */
    if (strstr(md, "- tue: batch=2 gives 4.00x the tokens_per_s of tue: batch=1 (geometric mean "
                   "over 1 matched configurations).\n") == NULL)
        fail_msg("report.md: %s", md);
    free(md);
    rc = run((const char *[]){"report", "mon", "--out", dir, "--db", db, NULL});
    if (rc != 0) fail_msg("report exit %d: %s", rc, err);
    md = lb_test_read_file(md_path, NULL);
    assert_non_null(md);
    if (strstr(md, "\n| batch=1 | 1 |") == NULL || strstr(md, "mon: ") != NULL)
        fail_msg("report.md: %s", md);
    free(md);
}

/* No staging folder (.report-*) is left in dir. */
static void assert_no_staging_folder(const char *dir) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        if (strncmp(e->d_name, ".report-", 8) == 0) fail_msg("%s/%s left behind", dir, e->d_name);
    closedir(d);
}

/* A report that cannot be written whole fails and leaves the folder's earlier report as it
 * was: no new Markdown beside the old page, and no staging folder left behind. Here a title
 * of 30,000 characters (once in report.md, twice in report.html) under a file size limit of
 * 45,000 bytes: report.md could be written, the page not. */
static void test_report_failed_write_leaves_the_earlier_report(void **state) {
    (void)state;
    char db[160], dir[160], md_path[200], html_path[200], id[24];
    static char title[30001];
    snprintf(db, sizeof db, "%s/half.db", g_dir);
    snprintf(dir, sizeof dir, "%s/half", g_dir);
    snprintf(md_path, sizeof md_path, "%s/report.md", dir);
    snprintf(html_path, sizeof html_path, "%s/report.html", dir);
    snprintf(id, sizeof id, "%lld", (long long)store_train(db, "half", 1, 0, 10.0));
    int rc = run((const char *[]){"report", id, "--out", dir, "--db", db, "--title", "old", NULL});
    if (rc != 0) fail_msg("report exit %d: %s", rc, err);
    char *old_md = lb_test_read_file(md_path, NULL), *old_html = lb_test_read_file(html_path, NULL);
    assert_non_null(old_md);
    assert_non_null(old_html);
    memset(title, 'x', sizeof title - 1);
    struct rlimit was, limit = {.rlim_cur = 45000};
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &was), 0);
    limit.rlim_max = was.rlim_max;
    void (*xfsz)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &limit), 0);
    rc = run((const char *[]){"report", id, "--out", dir, "--db", db, "--title", title, NULL});
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &was), 0);
    signal(SIGXFSZ, xfsz);
    if (rc != 1 || strstr(err, "File too large") == NULL) fail_msg("report exit %d: %s", rc, err);
    char *md = lb_test_read_file(md_path, NULL), *html = lb_test_read_file(html_path, NULL);
    assert_non_null(md);
    assert_non_null(html);
    assert_string_equal(md, old_md);
    assert_string_equal(html, old_html);
    free(md), free(html), free(old_md), free(old_html);
    assert_no_staging_folder(dir);
}

/* A folder named report.html in the output folder, which no page can be renamed over: the
 * report fails before it moves any file, so the earlier charts and report.md stay as they
 * were, and no staging folder is left behind. */
static void test_report_refuses_a_folder_in_place_of_its_page(void **state) {
    (void)state;
    char db[160], dir[160], chart_path[200], md_path[200], html_path[200], id[24];
    snprintf(db, sizeof db, "%s/blocked.db", g_dir);
    snprintf(dir, sizeof dir, "%s/blocked", g_dir);
    snprintf(chart_path, sizeof chart_path, "%s/chart-1.svg", dir);
    snprintf(md_path, sizeof md_path, "%s/report.md", dir);
    snprintf(html_path, sizeof html_path, "%s/report.html", dir);
    snprintf(id, sizeof id, "%lld", (long long)store_train(db, "old", 1, 0, 10.0));
    int rc = run((const char *[]){"report", id, "--out", dir, "--db", db, NULL});
    if (rc != 0) fail_msg("report exit %d: %s", rc, err);
    char *old_chart = lb_test_read_file(chart_path, NULL),
         *old_md = lb_test_read_file(md_path, NULL);
    assert_non_null(old_chart);
    assert_non_null(old_md);
    assert_int_equal(unlink(html_path), 0);
    assert_int_equal(mkdir(html_path, 0755), 0);
    snprintf(id, sizeof id, "%lld", (long long)store_train(db, "new", 2, 0, 20.0));
    rc = run((const char *[]){"report", id, "--out", dir, "--db", db, NULL});
    if (rc == 0 || strstr(err, "report.html is a folder") == NULL || count(err, "\n") != 1)
        fail_msg("report exit %d: %s", rc, err);
    char *chart = lb_test_read_file(chart_path, NULL), *md = lb_test_read_file(md_path, NULL);
    assert_non_null(chart);
    assert_non_null(md);
    assert_string_equal(chart, old_chart);
    assert_string_equal(md, old_md);
    free(chart), free(md), free(old_chart), free(old_md);
    assert_no_staging_folder(dir);
}

/* A report written over an earlier one keeps its files' permissions: a page made readable by
 * all stays so under a umask of 077, which a new file would get 0600 from. */
static void test_report_replaced_page_keeps_its_mode(void **state) {
    (void)state;
    char db[160], dir[160], html_path[200], id[24];
    snprintf(db, sizeof db, "%s/mode.db", g_dir);
    snprintf(dir, sizeof dir, "%s/mode", g_dir);
    snprintf(html_path, sizeof html_path, "%s/report.html", dir);
    snprintf(id, sizeof id, "%lld", (long long)store_train(db, "mode", 1, 0, 10.0));
    mode_t was = umask(077);
    int rc = run((const char *[]){"report", id, "--out", dir, "--db", db, NULL});
    if (rc != 0) fail_msg("report exit %d: %s", rc, err);
    assert_int_equal(chmod(html_path, 0644), 0);
    rc = run((const char *[]){"report", id, "--out", dir, "--db", db, NULL});
    umask(was);
    if (rc != 0) fail_msg("report exit %d: %s", rc, err);
    struct stat st;
    assert_int_equal(stat(html_path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0644);
}

/* The chart of lines as SVG text in buf; the alarm fails the test (SIGALRM) where drawing
 * never ends. */
static void draw_lines(char *buf, size_t cap, const lb_svg_line *line) {
    FILE *f = fmemopen(buf, cap, "w");
    assert_non_null(f);
    alarm(20);
    lb_svg_lines(f, "t", "x", "y", line, 1, NULL, 0, false);
    alarm(0);
    assert_int_equal(fclose(f), 0);
}

/* Values one rounding apart (0.1 + 0.2 and 0.3), and one point too large for +1 to move it:
 * each chart is drawn whole with a handful of ticks, not an endless tick loop. */
static void test_report_chart_of_nearly_equal_values_ends(void **state) {
    (void)state;
    static char svg[1 << 16];
    double x[] = {0.0, 1.0}, y[] = {0.1 + 0.2, 0.3}, huge_x[] = {1e17};
    assert_true(y[0] != y[1]);
    const lb_svg_line lines[] = {{"close", x, y, 2}, {"huge", huge_x, y, 1}};
    for (size_t i = 0; i < 2; i++) {
        draw_lines(svg, sizeof svg, &lines[i]);
        size_t len = strlen(svg);
        assert_true(len > 7 && strcmp(svg + len - 7, "</svg>\n") == 0);
        size_t y_ticks = count(svg, "text-anchor=\"end\""),
               x_ticks = count(svg, "text-anchor=\"middle\"");
        if (y_ticks < 2 || y_ticks > 12 || x_ticks < 2 || x_ticks > 13)
            fail_msg("%s: %zu y ticks, %zu x ticks", lines[i].name, y_ticks, x_ticks);
        assert_null(strstr(svg, "nan"));
        assert_null(strstr(svg, "inf"));
    }
}

/* A label with control characters (a run's name) leaves the chart well-formed XML, which
 * has no form for them, with its markup characters escaped. */
static void test_report_chart_with_control_characters_is_xml(void **state) {
    (void)state;
    char *svg = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&svg, &len);
    assert_non_null(f);
    const char *labels[] = {"run\x01\x1b[2J<b>&\"\t"};
    const double v[] = {1.0};
    lb_svg_bars(f, "t\x7f\x02", "y", labels, v, NULL, NULL, 1);
    assert_int_equal(fclose(f), 0);
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)svg[i] < 0x20 && strchr("\t\n\r", svg[i]) == NULL)
            fail_msg("control character 0x%02x at byte %zu: %s", svg[i], i, svg);
    assert_non_null(strstr(svg, "run??[2J&lt;b&gt;&amp;&quot;\t"));
    free(svg);
}

/* The text of each tick label of the chart in svg whose <text> carries anchor (the y axis'
 * "end", the x axis' "middle"): up to cap labels into labels. Returns their number. */
static size_t tick_labels(const char *svg, const char *anchor, char labels[][32], size_t cap) {
    char needle[64];
    snprintf(needle, sizeof needle, "text-anchor=\"%s\">", anchor);
    size_t n = 0;
    for (const char *p = svg; (p = strstr(p, needle)) != NULL && n < cap; p++) {
        const char *t = p + strlen(needle), *end = strchr(t, '<');
        if (end - t < 32) snprintf(labels[n++], 32, "%.*s", (int)(end - t), t);
    }
    return n;
}

/* Ticks a few hundred apart on values near 1.2 million, and x ticks that step across zero:
 * each tick label differs from the others (not five times "1.2e+06"), and the tick at zero
 * reads 0, not a rounding error such as -2.78e-17. */
static void test_report_tick_labels_tell_ticks_apart(void **state) {
    (void)state;
    static char svg[1 << 16];
    double x[] = {-0.3, 0.3}, y[] = {1200000.0, 1200400.0};
    const lb_svg_line line = {"near", x, y, 2};
    draw_lines(svg, sizeof svg, &line);
    char labels[16][32];
    const char *anchors[] = {"end", "middle"};
    for (size_t a = 0; a < 2; a++) {
        size_t n = tick_labels(svg, anchors[a], labels, 16);
        if (a == 1) n--; /* the x axis' own label */
        assert_true(n >= 3);
        for (size_t i = 0; i < n; i++) {
            if (strchr(labels[i], 'e') != NULL && strstr(labels[i], "e+06") == NULL)
                fail_msg("tick label '%s': %s", labels[i], svg);
            for (size_t j = 0; j < i; j++)
                if (strcmp(labels[i], labels[j]) == 0)
                    fail_msg("two ticks labelled '%s': %s", labels[i], svg);
        }
    }
    assert_non_null(strstr(svg, "text-anchor=\"middle\">0</text>"));
}

/* A bar of a negative value hangs from the zero line (SVG has no negative height: a
 * browser draws no such bar and logs an error), and a positive one stands on it. */
static void test_report_negative_bar_hangs_below_zero(void **state) {
    (void)state;
    char *svg = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&svg, &len);
    assert_non_null(f);
    const char *labels[] = {"down", "up"};
    const double v[] = {-5.0, 10.0}, lo[] = {-6.0, 9.0}, hi[] = {-4.0, 11.0};
    lb_svg_bars(f, "t", "y", labels, v, lo, hi, 2);
    assert_int_equal(fclose(f), 0);
    assert_null(strstr(svg, "height=\"-"));
    double y[2], h[2];
    const char *p = svg;
    for (size_t i = 0; i < 2; i++) {
        p = strstr(p, "<rect class=\"bar\"");
        assert_non_null(p);
        assert_int_equal(sscanf(p,
                                "<rect class=\"bar\" x=\"%*f\" y=\"%lf\" width=\"%*f\" "
                                "height=\"%lf\"",
                                y + i, h + i),
                         2);
        p++;
    }
    assert_true(fabs(y[0] - (y[1] + h[1])) < 0.11); /* down starts where up ends: zero */
    assert_true(fabs(h[0] * 2 - h[1]) < 0.11);
    assert_true(y[0] + h[0] < 340 - 76); /* above the chart's bottom edge */
    free(svg);
}

/* A line of one point (one timed step, one query) shows a dot, which its polyline alone
 * does not, in the middle of the x axis; a value of 0 gets an axis around it of round
 * ticks, not of +-1e-09. */
static void test_report_line_of_one_point_shows_a_dot(void **state) {
    (void)state;
    static char svg[1 << 16];
    double x[] = {0.0}, y[] = {0.0};
    const lb_svg_line line = {"one", x, y, 1};
    draw_lines(svg, sizeof svg, &line);
    assert_int_equal(count(svg, "class=\"point\""), 1);
    double cx = 0;
    assert_int_equal(sscanf(strstr(svg, "class=\"point\""), "class=\"point\" cx=\"%lf\"", &cx), 1);
    assert_true(fabs(cx - (78 + (760 - 78 - 24) / 2.0)) < 0.11);
    assert_null(strstr(svg, "e-09"));
    double two_x[] = {0.0, 1.0}, two_y[] = {1.0, 2.0};
    const lb_svg_line two = {"two", two_x, two_y, 2};
    draw_lines(svg, sizeof svg, &two);
    assert_int_equal(count(svg, "class=\"point\""), 0);
}

/* A label that is not UTF-8 (a Latin-1 name, a name cut inside a character) leaves the
 * chart well-formed XML: each byte that starts no character is '?', whole characters stay. */
static void test_report_chart_text_is_utf8(void **state) {
    (void)state;
    char *svg = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&svg, &len);
    assert_non_null(f);
    const char *labels[] = {"caf\xe9 \xe6\xa8\xa1\xe5\x9e"};
    const double v[] = {1.0};
    lb_svg_bars(f, "t", "y", labels, v, NULL, NULL, 1);
    assert_int_equal(fclose(f), 0);
    for (size_t i = 0; i < len;) {
        int k = lb_utf8text_char_len(svg + i, len - i);
        if (k <= 0) fail_msg("not UTF-8 at byte %zu: %s", i, svg + i);
        i += (size_t)k;
    }
    assert_non_null(strstr(svg, ">caf? \xe6\xa8\xa1?\?</text>"));
    free(svg);
}

/* A configuration of more than 256 repeats (a month of nightly runs through --since): its
 * figures count every run, the last one's maximum included. */
static void test_report_figures_count_every_repeat(void **state) {
    (void)state;
    char db[160], dir[160], md_path[200];
    static char ids[300 * 12];
    snprintf(db, sizeof db, "%s/many.db", g_dir);
    snprintf(dir, sizeof dir, "%s/many", g_dir);
    snprintf(md_path, sizeof md_path, "%s/report.md", dir);
    size_t len = 0;
    for (int i = 0; i < 300; i++)
        len += (size_t)snprintf(ids + len, sizeof ids - len, "%s%lld", i ? "," : "",
                                (long long)store_train(db, "many", 1, 0, i == 299 ? 20.0 : 10.0));
    int rc = run((const char *[]){"report", ids, "--out", dir, "--db", db, NULL});
    if (rc != 0) fail_msg("report exit %d: %s", rc, err);
    char *md = lb_test_read_file(md_path, NULL);
    assert_non_null(md);
    if (strstr(md, " | 300 | 10 tok/s (10 tok/s - 20 tok/s) |") == NULL)
        fail_msg("report.md: %s", md);
    free(md);
}

/* A chart that leaves configurations out says how many it drew, in both documents: 260
 * configurations in the bar chart (256 drawn), 18 with a loss curve (8 lines drawn), 9
 * scaling families (8 drawn, every one a finding). */
static void test_report_chart_says_how_many_configurations_it_drew(void **state) {
    (void)state;
    char db[160], dir[160], md_path[200], html_path[200];
    snprintf(db, sizeof db, "%s/crowd.db", g_dir);
    snprintf(dir, sizeof dir, "%s/crowd", g_dir);
    snprintf(md_path, sizeof md_path, "%s/report.md", dir);
    snprintf(html_path, sizeof html_path, "%s/report.html", dir);
    for (int i = 0; i < 260; i++) {
        int family = i / 2 + 1, ranks = i % 2 + 1;
        lb_result *r = lb_result_new("train", "crowd");
        json_object_set_new(r->config, "batch", json_integer(family));
        if (i < 18)
            json_object_set_new(r->config, "ranks", json_integer(ranks));
        else
            json_object_set_new(r->config, "seq", json_integer(i));
        lb_result_set_metric(r, "tokens_per_s", 10.0 * ranks, "tok/s");
        if (i < 18) {
            lb_series *loss = lb_result_series(r, "loss", "");
            for (int k = 0; k < 3; k++)
                assert_int_equal(lb_result_series_push(loss, 3.0 - k), LB_OK);
        }
        assert_true(lb_test_store_ok(db, r) > 0);
    }
    int rc = run((const char *[]){"report", "--since", "1", "--out", dir, "--db", db, NULL});
    if (rc != 0) fail_msg("report exit %d: %s", rc, err);
    const char *captions[] = {"256 of 260 configurations drawn.", "8 of 18 configurations drawn.",
                              "8 of 9 configurations drawn."};
    char *md = lb_test_read_file(md_path, NULL), *html = lb_test_read_file(html_path, NULL);
    assert_non_null(md);
    assert_non_null(html);
    for (int c = 0; c < 3; c++) {
        char fig[96];
        snprintf(fig, sizeof fig, "<figcaption>%s</figcaption>", captions[c]);
        if (count(md, captions[c]) != 1 || count(html, fig) != 1)
            fail_msg("no caption '%s' in report.md: %s", captions[c], md);
    }
    assert_int_equal(count(md, ": 2 ranks scale at 100% of 1 rank's throughput per rank."), 9);
    free(md);
    free(html);
}

/* A sweep of more rates than the QPS chart draws says how many it drew. */
static void test_report_qps_chart_says_how_many_rates_it_drew(void **state) {
    (void)state;
    char db[160], dir[160], md_path[200];
    snprintf(db, sizeof db, "%s/rates.db", g_dir);
    snprintf(dir, sizeof dir, "%s/rates", g_dir);
    snprintf(md_path, sizeof md_path, "%s/report.md", dir);
    lb_result *r = lb_result_new("load", "rates");
    for (int i = 0; i < 300; i++) {
        char name[64];
        snprintf(name, sizeof name, "qps%d/target_qps", i);
        lb_result_set_metric(r, name, i + 1.0, "queries/s");
        snprintf(name, sizeof name, "qps%d/ttft_p99_ms", i);
        lb_result_set_metric(r, name, 10.0 + i, "ms");
        snprintf(name, sizeof name, "qps%d/tpot_p99_ms", i);
        lb_result_set_metric(r, name, 5.0, "ms");
    }
    int64_t id = lb_test_store_ok(db, r);
    assert_true(id > 0);
    char one[24];
    snprintf(one, sizeof one, "%lld", (long long)id);
    int rc = run((const char *[]){"report", one, "--out", dir, "--db", db, NULL});
    if (rc != 0) fail_msg("report exit %d: %s", rc, err);
    char *md = lb_test_read_file(md_path, NULL);
    assert_non_null(md);
    if (count(md, "\n256 of 300 rates drawn.\n") != 1) fail_msg("report.md: %s", md);
    free(md);
}

/* A Ctrl-C while the report is made (the history of a large database takes a while) stops
 * it: LB_ERR_INTERRUPTED, the folder's earlier report as it was, no staging folder left. */
static void test_report_interrupted_leaves_the_earlier_report(void **state) {
    (void)state;
    char db[160], dir[160], md_path[200], id[24];
    snprintf(db, sizeof db, "%s/intr.db", g_dir);
    snprintf(dir, sizeof dir, "%s/intr", g_dir);
    snprintf(md_path, sizeof md_path, "%s/report.md", dir);
    snprintf(id, sizeof id, "%lld", (long long)store_train(db, "intr", 1, 0, 10.0));
    int rc = run((const char *[]){"report", id, "--out", dir, "--db", db, "--title", "old", NULL});
    if (rc != 0) fail_msg("report exit %d: %s", rc, err);
    char *old_md = lb_test_read_file(md_path, NULL);
    assert_non_null(old_md);
    lb_store *s = NULL;
    lb_err e = {{0}};
    lb_run_set set = {0};
    assert_int_equal(lb_store_open_read(db, &s, &e), LB_OK);
    assert_int_equal(lb_select_runs(s, id, &set, &e), LB_OK);
    lb_report_params p = lb_report_default_params();
    p.out_dir = dir;
    p.title = "new";
    char html[256] = "";
    lb_signals_raise(SIGINT);
    lb_status st = lb_report_write(s, &set, &p, html, sizeof html, &e);
    lb_signals_reset();
    lb_select_free(&set);
    lb_store_close(s);
    assert_int_equal(st, LB_ERR_INTERRUPTED);
    assert_non_null(strstr(e.msg, "interrupted"));
    char *md = lb_test_read_file(md_path, NULL);
    assert_non_null(md);
    assert_string_equal(md, old_md);
    free(md), free(old_md);
    assert_no_staging_folder(dir);
}

/* Runs that failed or were interrupted, named by id: the finding says which and how they
 * ended, and the provenance table gives each run's status. */
static void test_report_names_the_runs_that_did_not_end_ok(void **state) {
    (void)state;
    char db[160], dir[160], md_path[200], ids[80], want[160];
    snprintf(db, sizeof db, "%s/failed.db", g_dir);
    snprintf(dir, sizeof dir, "%s/failed", g_dir);
    snprintf(md_path, sizeof md_path, "%s/report.md", dir);
    long long ok = (long long)store_train(db, "good", 1, 0, 10.0), bad[2];
    const lb_run_status ends[] = {LB_RUN_FAILED, LB_RUN_INTERRUPTED};
    for (size_t i = 0; i < 2; i++) {
        lb_result *r = lb_result_new("train", "bad");
        lb_result_set_metric(r, "tokens_per_s", 5.0, "tok/s");
        bad[i] = (long long)store_ended(db, r, ends[i]);
    }
    snprintf(ids, sizeof ids, "%lld", ok);
    char one[24], two[24];
    snprintf(one, sizeof one, "%lld", bad[0]);
    snprintf(two, sizeof two, "%lld", bad[1]);
    int rc = run((const char *[]){"report", ids, one, two, "--out", dir, "--db", db, NULL});
    if (rc != 0) fail_msg("report exit %d: %s", rc, err);
    char *md = lb_test_read_file(md_path, NULL);
    assert_non_null(md);
    snprintf(want, sizeof want, "- 2 of 3 runs did not end ok (run %lld failed, %lld interrupted)",
             bad[0], bad[1]);
    if (strstr(md, want) == NULL) fail_msg("report.md lacks '%s': %s", want, md);
    snprintf(want, sizeof want, "\n| %lld | train | bad | failed | ", bad[0]);
    if (strstr(md, want) == NULL) fail_msg("report.md lacks '%s': %s", want, md);
    snprintf(want, sizeof want, "\n| %lld | train | good | ok | ", ok);
    if (strstr(md, want) == NULL) fail_msg("report.md lacks '%s': %s", want, md);
    free(md);
}

/* A run that failed or was interrupted is left out of its configuration's figures: repeats
 * "failed,ok" show the ok run's throughput and loss curve only, with the runs column saying
 * how many were ok; a configuration with no ok run says so in place of figures. */
static void test_report_figures_leave_out_runs_that_did_not_end_ok(void **state) {
    (void)state;
    char db[160], dir[160], md_path[200], html_path[200], pair[48], lone[24], want[160];
    snprintf(db, sizeof db, "%s/okonly.db", g_dir);
    snprintf(dir, sizeof dir, "%s/okonly", g_dir);
    snprintf(md_path, sizeof md_path, "%s/report.md", dir);
    snprintf(html_path, sizeof html_path, "%s/report.html", dir);
    int64_t ids[3];
    const double tok[] = {1000.0, 10.0, 7.0};
    const size_t steps[] = {2, 3, 4};
    const lb_run_status ends[] = {LB_RUN_FAILED, LB_RUN_OK, LB_RUN_INTERRUPTED};
    for (int i = 0; i < 3; i++) {
        lb_result *r = lb_result_new("train", i < 2 ? "pair" : "lone");
        json_object_set_new(r->config, "batch", json_integer(i < 2 ? 1 : 2));
        lb_result_set_metric(r, "tokens_per_s", tok[i], "tok/s");
        lb_series *loss = lb_result_series(r, "loss", "");
        for (size_t k = 0; k < steps[i]; k++)
            assert_int_equal(lb_result_series_push(loss, 3.0 - (double)k), LB_OK);
        ids[i] = store_ended(db, r, ends[i]);
    }
    snprintf(pair, sizeof pair, "%lld,%lld", (long long)ids[0], (long long)ids[1]);
    snprintf(lone, sizeof lone, "%lld", (long long)ids[2]);
    int rc = run((const char *[]){"report", pair, lone, "--out", dir, "--db", db, NULL});
    if (rc != 0) fail_msg("report exit %d: %s", rc, err);
    char *md = lb_test_read_file(md_path, NULL), *html = lb_test_read_file(html_path, NULL);
    assert_non_null(md);
    assert_non_null(html);
    snprintf(want, sizeof want, "\n| %s | 2 (1 ok) | 10 tok/s |", pair);
    if (strstr(md, want) == NULL) fail_msg("report.md lacks '%s': %s", want, md);
    snprintf(want, sizeof want, "\n| %s | 1 (0 ok) | no ok run |", lone);
    if (strstr(md, want) == NULL) fail_msg("report.md lacks '%s': %s", want, md);
    assert_non_null(strstr(md, "what they measured is left out of the tables and charts."));
    assert_null(strstr(md, "1000 tok/s"));
    snprintf(want, sizeof want, "\n- tokens_per_s: %s at 10 tok/s.\n", pair);
    if (strstr(md, want) == NULL) fail_msg("report.md lacks '%s': %s", want, md);
    /* one loss curve: the ok run's three steps */
    assert_int_equal(check_lines(html, "training loss per step", 3), 1);
    free(md), free(html);
}

/* More runs that did not end ok than the finding can name: it names the first ones whole and
 * says how many more there are. */
static void test_report_counts_the_failed_runs_it_does_not_name(void **state) {
    (void)state;
    char db[160], dir[160], md_path[200];
    static char ids[40 * 12];
    snprintf(db, sizeof db, "%s/manyfail.db", g_dir);
    snprintf(dir, sizeof dir, "%s/manyfail", g_dir);
    snprintf(md_path, sizeof md_path, "%s/report.md", dir);
    size_t len = 0;
    for (int i = 0; i < 40; i++) {
        lb_result *r = lb_result_new("train", "manyfail");
        lb_result_set_metric(r, "tokens_per_s", 5.0, "tok/s");
        len += (size_t)snprintf(ids + len, sizeof ids - len, "%s%lld", i ? "," : "",
                                (long long)store_ended(db, r, LB_RUN_INTERRUPTED));
    }
    int rc = run((const char *[]){"report", ids, "--out", dir, "--db", db, NULL});
    if (rc != 0) fail_msg("report exit %d: %s", rc, err);
    char *md = lb_test_read_file(md_path, NULL);
    assert_non_null(md);
    const char *f = strstr(md, "- 40 of 40 runs did not end ok (run ");
    assert_non_null(f);
    const char *more = strstr(f, " more); what they measured is left out");
    if (more == NULL) fail_msg("report.md: %s", md);
    const char *and = more;
    while (and > f && strncmp(and, " and ", 5) != 0)
        and--;
    size_t n_more = (size_t)strtoul(and+5, NULL, 10);
    size_t named = 0;
    for (const char *p = f; p < and; p++)
        named += strncmp(p, " interrupted", 12) == 0;
    assert_true(n_more > 0);
    assert_int_equal(named + n_more, 40);
    free(md);
}

/* A family of scaling runs with more rank counts than a line holds: a finding says how many
 * configurations it shows, those of the fewest ranks, and each of them gets its finding. */
static void test_report_scaling_says_how_many_rank_counts_it_shows(void **state) {
    (void)state;
    char db[160], dir[160], md_path[200];
    snprintf(db, sizeof db, "%s/wide.db", g_dir);
    snprintf(dir, sizeof dir, "%s/wide", g_dir);
    snprintf(md_path, sizeof md_path, "%s/report.md", dir);
    for (int ranks = 34; ranks >= 1; ranks--) /* the smallest counts come last */
        store_train(db, "wide", 1, ranks, 10.0 * ranks);
    int rc = run((const char *[]){"report", "--since", "1", "--out", dir, "--db", db, NULL});
    if (rc != 0) fail_msg("report exit %d: %s", rc, err);
    char *md = lb_test_read_file(md_path, NULL);
    assert_non_null(md);
    if (strstr(md, "- wide: 32 of its 34 configurations shown, those of the fewest ranks (up to "
                   "32).\n") == NULL)
        fail_msg("report.md: %s", md);
    assert_int_equal(count(md, "ranks scale at 100% of 1 rank's throughput per rank."), 31);
    assert_non_null(strstr(md, "- wide: 32 ranks scale"));
    assert_null(strstr(md, "- wide: 33 ranks scale"));
    free(md);
}

/* Runs of more benchmarks than the report looks up histories for: a line says how many of
 * them it drew. */
static void test_report_says_how_many_histories_it_drew(void **state) {
    (void)state;
    char db[160], dir[160], md_path[200];
    snprintf(db, sizeof db, "%s/benches.db", g_dir);
    snprintf(dir, sizeof dir, "%s/benches", g_dir);
    snprintf(md_path, sizeof md_path, "%s/report.md", dir);
    for (int batch = 1; batch <= 5; batch++)
        for (int i = 0; i < 2; i++)
            store_train(db, "bench", batch, 0, 10.0 * batch);
    int rc = run((const char *[]){"report", "--since", "1", "--out", dir, "--db", db, NULL});
    if (rc != 0) fail_msg("report exit %d: %s", rc, err);
    char *md = lb_test_read_file(md_path, NULL);
    assert_non_null(md);
    if (strstr(md, "\nHistory drawn for the first 4 of the 5 benchmarks of these runs.\n") == NULL)
        fail_msg("report.md: %s", md);
    assert_int_equal(count(md, "](chart-"), 1 + 4); /* the bars, 4 histories */
    free(md);
}

/* A series drawn through fewer points than it has says how many: a loss curve of 12,000
 * steps (every 3rd of them) and a TTFT CDF of 1,000 values (500 quantiles). */
static void test_report_thinned_lines_say_how_many_points_they_draw(void **state) {
    (void)state;
    char db[160], dir[160], md_path[200];
    snprintf(db, sizeof db, "%s/long.db", g_dir);
    snprintf(dir, sizeof dir, "%s/long", g_dir);
    snprintf(md_path, sizeof md_path, "%s/report.md", dir);
    lb_result *r = lb_result_new("train", "long");
    lb_result_set_metric(r, "tokens_per_s", 10.0, "tok/s");
    lb_series *loss = lb_result_series(r, "loss", "");
    for (int k = 0; k < 12000; k++)
        assert_int_equal(lb_result_series_push(loss, 3.0 - k * 1e-4), LB_OK);
    int64_t train_id = lb_test_store_ok(db, r);
    r = lb_result_new("load", "cdf");
    lb_result_set_metric(r, "output_tok_per_s", 10.0, "tok/s");
    lb_series *ttft = lb_result_series(r, "ttft_ms", "ms");
    for (int k = 0; k < 1000; k++)
        assert_int_equal(lb_result_series_push(ttft, 1.0 + k), LB_OK);
    int64_t load_id = lb_test_store_ok(db, r);
    char a[24], b[24];
    snprintf(a, sizeof a, "%lld", (long long)train_id);
    snprintf(b, sizeof b, "%lld", (long long)load_id);
    int rc = run((const char *[]){"report", a, b, "--out", dir, "--db", db, NULL});
    if (rc != 0) fail_msg("report exit %d: %s", rc, err);
    char *md = lb_test_read_file(md_path, NULL);
    assert_non_null(md);
    if (count(md, "\nThe longest line: 4000 of its 12000 values drawn (every k-th).\n") != 1 ||
        count(md, "\nThe largest CDF: 500 of its 1000 values drawn (as quantiles).\n") != 1)
        fail_msg("report.md: %s", md);
    free(md);
}

/* --out naming a file that exists: a one-line usage error (exit 2) naming it and what to
 * give instead, the file as it was; --out naming a folder no file can be made in: a
 * one-line error naming it (exit 1), nothing written. */
static void test_report_out_that_cannot_hold_a_report_is_one_line(void **state) {
    (void)state;
    char db[160], file[160], id[24];
    snprintf(db, sizeof db, "%s/outs.db", g_dir);
    snprintf(file, sizeof file, "%s/report.html", g_dir);
    snprintf(id, sizeof id, "%lld", (long long)store_train(db, "outs", 1, 0, 10.0));
    assert_true(lb_test_write_file(file, "mine"));
    int rc = run((const char *[]){"report", id, "--out", file, "--db", db, NULL});
    char want[300];
    snprintf(want, sizeof want,
             "llmbench report: --out %s is a file, not a folder: name a folder (created when "
             "missing) for report.html, report.md and the charts\n",
             file);
    if (rc != 2 || strcmp(err, want) != 0) fail_msg("report exit %d: %s", rc, err);
    char *kept = lb_test_read_file(file, NULL);
    assert_non_null(kept);
    assert_string_equal(kept, "mine");
    free(kept);
    rc = run((const char *[]){"report", id, "--out", "/sys", "--db", db, NULL}); /* even root */
    if (rc != 1 || count(err, "\n") != 1 ||
        strncmp(err, "llmbench report: --out /sys: cannot write a report there (", 58) != 0)
        fail_msg("report exit %d: %s", rc, err);
    struct stat st;
    assert_int_not_equal(stat("/sys/report.html", &st), 0);
}

LB_TEST_DIR_DB_FIXTURE(g_dir, g_db)

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_report_renders_in_chromium_with_a_mark_per_datum),
        cmocka_unit_test(test_report_since_groups_runs_by_benchmark),
        cmocka_unit_test(test_run_ends_with_history_and_report),
        cmocka_unit_test(test_report_bad_input_exits_2),
        cmocka_unit_test(test_report_json_names_its_files_as_json_strings),
        cmocka_unit_test(test_report_chart_of_nearly_equal_values_ends),
        cmocka_unit_test(test_report_markdown_shows_names_as_text),
        cmocka_unit_test(test_report_chart_with_control_characters_is_xml),
        cmocka_unit_test(test_report_counts_a_run_named_twice_once),
        cmocka_unit_test(test_report_findings_never_divide_by_a_zero_median),
        cmocka_unit_test(test_report_says_when_a_configuration_mixes_benchmarks),
        cmocka_unit_test(test_report_failed_write_leaves_the_earlier_report),
        cmocka_unit_test(test_report_of_two_sweeps_names_cells_by_sweep),
        cmocka_unit_test(test_report_refuses_a_folder_in_place_of_its_page),
        cmocka_unit_test(test_report_replaced_page_keeps_its_mode),
        cmocka_unit_test(test_report_tick_labels_tell_ticks_apart),
        cmocka_unit_test(test_report_negative_bar_hangs_below_zero),
        cmocka_unit_test(test_report_line_of_one_point_shows_a_dot),
        cmocka_unit_test(test_report_chart_text_is_utf8),
        cmocka_unit_test(test_report_figures_count_every_repeat),
        cmocka_unit_test(test_report_interrupted_leaves_the_earlier_report),
        cmocka_unit_test(test_report_names_the_runs_that_did_not_end_ok),
        cmocka_unit_test(test_report_chart_says_how_many_configurations_it_drew),
        cmocka_unit_test(test_report_qps_chart_says_how_many_rates_it_drew),
        cmocka_unit_test(test_report_figures_leave_out_runs_that_did_not_end_ok),
        cmocka_unit_test(test_report_counts_the_failed_runs_it_does_not_name),
        cmocka_unit_test(test_report_scaling_says_how_many_rank_counts_it_shows),
        cmocka_unit_test(test_report_says_how_many_histories_it_drew),
        cmocka_unit_test(test_report_thinned_lines_say_how_many_points_they_draw),
        cmocka_unit_test(test_report_out_that_cannot_hold_a_report_is_one_line),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
