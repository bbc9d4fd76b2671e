/* test_report.c: `llmbench report` as a person sees it. A sweep of short CPU training runs
 * is reported; the page is rendered by headless Chromium (Debian's package) to a PNG and
 * to its parsed DOM: the page loads whole with no console error, the throughput chart has
 * one bar per configuration, and every loss curve has one point per timed step. Bad input
 * (no runs, unknown runs, no --out) is refused with exit 2. Without Chromium the browser
 * part is skipped and says so; the files are still checked. */
#include <jansson.h>
#include <regex.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

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

LB_TEST_DIR_DB_FIXTURE(g_dir, g_db)

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_report_renders_in_chromium_with_a_mark_per_datum),
        cmocka_unit_test(test_report_since_groups_runs_by_benchmark),
        cmocka_unit_test(test_run_ends_with_history_and_report),
        cmocka_unit_test(test_report_bad_input_exits_2),
        cmocka_unit_test(test_report_json_names_its_files_as_json_strings),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
