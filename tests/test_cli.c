/* test_cli.c: the command line's contract: exit codes and one-line errors that name the
 * bad input. */
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "test_util.h"

static char out[1 << 16], err[1 << 16];

static int run(const char *const *args) {
    return lb_test_run(args, out, sizeof out, err, sizeof err);
}

static void expect_usage_error(const char *const *args, const char *needle) {
    assert_int_equal(run(args), 2);
    if (strstr(err, needle) == NULL) fail_msg("stderr '%s' lacks '%s'", err, needle);
    /* one line */
    assert_non_null(strchr(err, '\n'));
    assert_null(strchr(strchr(err, '\n') + 1, '\n'));
}

static void test_cli_unknown_command_exits_2_naming_it(void **state) {
    (void)state;
    expect_usage_error((const char *[]){"frobnicate", NULL}, "'frobnicate'");
}

static void test_cli_unknown_option_exits_2_naming_it(void **state) {
    (void)state;
    expect_usage_error((const char *[]){"env", "--bogus", NULL}, "'--bogus'");
}

static void test_cli_no_command_prints_help_and_exits_2(void **state) {
    (void)state;
    assert_int_equal(run((const char *[]){NULL}), 2);
    assert_non_null(strstr(out, "usage: llmbench <command>"));
}

static void test_cli_version_names_version_and_commit(void **state) {
    (void)state;
    assert_int_equal(run((const char *[]){"--version", NULL}), 0);
    assert_non_null(strstr(out, "llmbench 0."));
    assert_non_null(strstr(out, "(commit "));
}

static void test_cli_env_json_is_one_document(void **state) {
    (void)state;
    assert_int_equal(run((const char *[]){"env", "--json", NULL}), 0);
    json_error_t je;
    json_t *doc = json_loads(out, 0, &je);
    assert_non_null(doc);
    assert_non_null(json_object_get(doc, "cpu_cores"));
    assert_non_null(json_object_get(doc, "gpus"));
    json_decref(doc);
}

static void test_cli_command_help_lists_its_options(void **state) {
    (void)state;
    assert_int_equal(run((const char *[]){"env", "--help", NULL}), 0);
    assert_non_null(strstr(out, "usage: llmbench env"));
    assert_non_null(strstr(out, "--json"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cli_unknown_command_exits_2_naming_it),
        cmocka_unit_test(test_cli_unknown_option_exits_2_naming_it),
        cmocka_unit_test(test_cli_no_command_prints_help_and_exits_2),
        cmocka_unit_test(test_cli_version_names_version_and_commit),
        cmocka_unit_test(test_cli_env_json_is_one_document),
        cmocka_unit_test(test_cli_command_help_lists_its_options),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
