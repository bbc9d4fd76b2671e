/* test_core.c: the utilities under every command: child processes, wall-clock times in
 * ISO form, the last line of a child's log, log lines and the metrics exposition text. */
/* cmocka.h needs these four first. */
/* clang-format off */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
/* clang-format on */

#include <math.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/file.h"
#include "core/log.h"
#include "core/metrics_text.h"
#include "core/proc.h"
#include "test_util.h"

static char dir[64], unused_db[128];
LB_TEST_DIR_DB_FIXTURE(dir, unused_db)

static void test_proc_a_program_that_cannot_start_is_an_error_with_the_reason(void **state) {
    (void)state;
    char missing[128];
    snprintf(missing, sizeof missing, "%s/no such program", dir);
    const char *argv[] = {missing, NULL};
    lb_proc_spec spec = {.argv = argv, .stderr_path = "/dev/null"};
    int code = -1;
    lb_err e = {{0}};
    assert_int_equal(lb_proc_run(&spec, &code, &e), LB_ERR_RUNTIME);
    assert_non_null(strstr(e.msg, missing));
    assert_non_null(strstr(e.msg, "No such file or directory"));
    assert_int_equal(code, -1);
    /* the child was waited for: no zombie left */
    assert_int_equal(waitpid(-1, NULL, WNOHANG), -1);
}

static void test_proc_an_output_file_that_cannot_be_made_is_an_error(void **state) {
    (void)state;
    char bad[128];
    snprintf(bad, sizeof bad, "%s/missing folder/log", dir);
    const char *argv[] = {"/bin/true", NULL};
    lb_proc_spec spec = {.argv = argv, .stderr_path = bad};
    int code = -1;
    lb_err e = {{0}};
    assert_int_equal(lb_proc_run(&spec, &code, &e), LB_ERR_RUNTIME);
    assert_non_null(strstr(e.msg, bad));
}

static void test_proc_a_program_s_own_exit_code_127_is_its_exit_code(void **state) {
    (void)state;
    const char *argv[] = {"/bin/sh", "-c", "exit 127", NULL};
    lb_proc_spec spec = {.argv = argv};
    int code = -1;
    lb_err e = {{0}};
    assert_int_equal(lb_proc_run(&spec, &code, &e), LB_OK);
    assert_int_equal(code, 127);
}

/* With this process's stdout and stderr closed, the pipe that reports a failed start would
 * take fd 1 or 2, which the child's redirections replace: a child whose stdout goes to its
 * stderr then wrote its output into the report (read as a failed start) or filled it (a
 * hang). Run in a child of the test, which closes both and exits 0 when the program ran. */
static void test_proc_runs_with_stdout_and_stderr_closed(void **state) {
    (void)state;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        alarm(20);
        close(1);
        close(2);
        const char *argv[] = {"/bin/sh", "-c", "head -c 200000 /dev/zero; exit 5", NULL};
        lb_proc_spec spec = {.argv = argv, .stdout_to_stderr = true};
        int code = -1;
        lb_err e = {{0}};
        _exit(lb_proc_run(&spec, &code, &e) == LB_OK && code == 5 ? 0 : 1);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

static void expect_iso(double wall_s, const char *want) {
    char buf[40];
    lb_clock_format_iso(wall_s, buf, sizeof buf);
    assert_string_equal(buf, want);
}

static void test_clock_iso_times_round_to_the_millisecond(void **state) {
    (void)state;
    expect_iso(1700000000.123, "2023-11-14T22:13:20.123Z");
    expect_iso(1700000000.9996, "2023-11-14T22:13:21.000Z");
    expect_iso(0.0, "1970-01-01T00:00:00.000Z");
    expect_iso(-1.5, "1969-12-31T23:59:58.500Z");
    expect_iso(NAN, "-");
    expect_iso(INFINITY, "-");
}

static void test_file_last_line_is_found_past_a_nul_byte(void **state) {
    (void)state;
    char path[128], line[64];
    snprintf(path, sizeof path, "%s/child.log", dir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    static const char log[] = "start\0garbage\nllmbench train: out of memory\n\n";
    fwrite(log, 1, sizeof log - 1, f);
    fclose(f);
    lb_file_last_line(path, line, sizeof line);
    assert_string_equal(line, "llmbench train: out of memory");
}

static void test_log_writes_one_line_whatever_the_text_holds(void **state) {
    (void)state;
    char path[128];
    snprintf(path, sizeof path, "%s/stderr", dir);
    fflush(stderr);
    int saved = dup(STDERR_FILENO);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(saved >= 0 && fd >= 0);
    dup2(fd, STDERR_FILENO);
    close(fd);
    lb_log(LB_LOG_WARN, "query 3 failed: %s", "HTTP 500:\nllmbench: error: forged\x1b[2J");
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    char *text = lb_test_read_file(path, NULL);
    assert_non_null(text);
    assert_string_equal(
        text, "llmbench: warning: query 3 failed: HTTP 500:?llmbench: error: forged?[2J\n");
    free(text);
}

static void test_metrics_histogram_numbers_read_back_as_the_same_double(void **state) {
    (void)state;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    const double bounds[] = {0.005, 1, 1234567, 1234568};
    const uint64_t counts[] = {1, 2, 3, 4, 5};
    lb_metrics_text_histogram(f, "latency_seconds", "", bounds, counts, 4, 15000000.123);
    fclose(f);
    assert_string_equal(text, "llmbench_latency_seconds_bucket{le=\"0.005\"} 1\n"
                              "llmbench_latency_seconds_bucket{le=\"1.0\"} 3\n"
                              "llmbench_latency_seconds_bucket{le=\"1234567.0\"} 6\n"
                              "llmbench_latency_seconds_bucket{le=\"1234568.0\"} 10\n"
                              "llmbench_latency_seconds_bucket{le=\"+Inf\"} 15\n"
                              "llmbench_latency_seconds_sum 15000000.123\n"
                              "llmbench_latency_seconds_count 15\n");
    free(text);
}

static void test_metrics_histogram_sum_not_finite_is_spelt_as_the_format_wants(void **state) {
    (void)state;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    const double bounds[] = {1};
    const uint64_t counts[] = {0, 1};
    lb_metrics_text_histogram(f, "x", "a=\"b\"", bounds, counts, 1, INFINITY);
    fclose(f);
    assert_non_null(strstr(text, "llmbench_x_sum{a=\"b\"} +Inf\n"));
    free(text);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_proc_a_program_that_cannot_start_is_an_error_with_the_reason),
        cmocka_unit_test(test_proc_an_output_file_that_cannot_be_made_is_an_error),
        cmocka_unit_test(test_proc_a_program_s_own_exit_code_127_is_its_exit_code),
        cmocka_unit_test(test_proc_runs_with_stdout_and_stderr_closed),
        cmocka_unit_test(test_clock_iso_times_round_to_the_millisecond),
        cmocka_unit_test(test_file_last_line_is_found_past_a_nul_byte),
        cmocka_unit_test(test_log_writes_one_line_whatever_the_text_holds),
        cmocka_unit_test(test_metrics_histogram_numbers_read_back_as_the_same_double),
        cmocka_unit_test(test_metrics_histogram_sum_not_finite_is_spelt_as_the_format_wants),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
