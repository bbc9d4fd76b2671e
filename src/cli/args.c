/* args.c: the table-driven option parser behind args.h. */
#include "cli/args.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"

lb_status lb_args_usage_error(const char *command, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "llmbench %s: %s (see 'llmbench %s --help')\n", command, msg, command);
    return LB_ERR_USAGE;
}

static bool has_range(const lb_arg_spec *s) {
    return !(s->min == 0.0 && s->max == 0.0);
}

static bool choice_ok(const char *choices, const char *value) {
    size_t len = strlen(value);
    for (const char *p = choices; *p;) {
        const char *bar = strchr(p, '|');
        size_t n = bar ? (size_t)(bar - p) : strlen(p);
        if (n == len && strncmp(p, value, n) == 0) return true;
        if (!bar) break;
        p = bar + 1;
    }
    return false;
}

static lb_status set_value(const lb_cli_command *cmd, const lb_arg_spec *s, const char *value) {
    char *end = NULL;
    errno = 0;
    switch (s->type) {
    case LB_ARG_FLAG: break;
    case LB_ARG_INT: {
        long long v = strtoll(value, &end, 10);
        if (errno != 0 || end == value || *end != '\0')
            return lb_args_usage_error(cmd->command, "option %s expects an integer, got '%s'",
                                       s->name, value);
        if (has_range(s) && ((double)v < s->min || (double)v > s->max))
            return lb_args_usage_error(cmd->command,
                                       "option %s must be between %.0f and %.0f, got %lld", s->name,
                                       s->min, s->max, v);
        *(int64_t *)s->dest = (int64_t)v;
        break;
    }
    case LB_ARG_DOUBLE: {
        double v = strtod(value, &end);
        if (errno != 0 || end == value || *end != '\0' || !isfinite(v))
            return lb_args_usage_error(cmd->command, "option %s expects a number, got '%s'",
                                       s->name, value);
        if (has_range(s) && (v < s->min || v > s->max))
            return lb_args_usage_error(cmd->command, "option %s must be between %g and %g, got %g",
                                       s->name, s->min, s->max, v);
        *(double *)s->dest = v;
        break;
    }
    case LB_ARG_STRING:
        if (value[0] == '\0')
            return lb_args_usage_error(cmd->command, "option %s expects a non-empty value",
                                       s->name);
        *(const char **)s->dest = value;
        break;
    case LB_ARG_CHOICE:
        if (!choice_ok(s->choices, value))
            return lb_args_usage_error(cmd->command, "option %s expects one of %s, got '%s'",
                                       s->name, s->choices, value);
        *(const char **)s->dest = value;
        break;
    case LB_ARG_LIST: {
        lb_arg_list *list = s->dest;
        if (list->n >= LB_ARG_LIST_MAX)
            return lb_args_usage_error(cmd->command, "option %s may be given at most %d times",
                                       s->name, LB_ARG_LIST_MAX);
        list->items[list->n++] = value;
        break;
    }
    }
    return LB_OK;
}

void lb_args_print_help(const lb_cli_command *cmd) {
    printf("usage: llmbench %s %s\n\n%s\n\noptions:\n", cmd->command, cmd->usage, cmd->summary);
    for (int i = 0; i < cmd->n_specs; i++) {
        const lb_arg_spec *s = &cmd->specs[i];
        char left[256]; /* an option with its choices, however many */
        if (s->type == LB_ARG_FLAG)
            snprintf(left, sizeof left, "%s", s->name);
        else if (s->type == LB_ARG_CHOICE)
            snprintf(left, sizeof left, "%s %s", s->name, s->choices);
        else
            snprintf(left, sizeof left, "%s %s", s->name, s->metavar ? s->metavar : "VALUE");
        printf("  %-28s %s\n", left, s->help);
    }
    printf("  %-28s %s\n", "--json", "print the result as one JSON document on stdout");
    if (cmd->uses_db)
        printf("  %-28s %s\n", "--db PATH",
               "results database (default $LLMBENCH_DB, else $XDG_DATA_HOME/llmbench/results.db)");
    printf("  %-28s %s\n", "-v, -vv, -q", "more or less logging on stderr");
    printf("  %-28s %s\n", "-h, --help", "show this help");
}

/* An argument past the command's max_positional, refused naming the limit. */
static lb_status refuse_argument(const lb_cli_command *cmd, const char *arg) {
    if (cmd->max_positional == 0)
        return lb_args_usage_error(cmd->command, "unexpected argument '%s': it takes options only",
                                   arg);
    return lb_args_usage_error(cmd->command,
                               "unexpected argument '%s': it takes at most %d argument%s", arg,
                               cmd->max_positional, cmd->max_positional == 1 ? "" : "s");
}

/* The parser proper; *help_shown is set when --help was printed. */
static lb_status parse(const lb_cli_command *cmd, int argc, char **argv, lb_cli_common *common,
                       const char **positional, int *n_positional, bool *help_shown) {
    *help_shown = false;
    *n_positional = 0;
    common->json = false;
    common->db_path = NULL;
    common->verbosity = 0;
    bool only_positional = false;
    /* each single-value option's value as given, to refuse a second, different one (a
     * composed command line, a sweep's options: which one counts would be a guess) */
    const char *given[LB_ARGS_MAX_SPECS] = {0};
    if (cmd->n_specs > LB_ARGS_MAX_SPECS)
        return lb_args_usage_error(cmd->command, "more than %d options defined", LB_ARGS_MAX_SPECS);
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        /* No option is named by a digit, so "-1" here is an argument (an option's own value,
         * as in --limit -3, was taken with the option): the command says what is wrong with
         * it, where "unknown option" would mislead. */
        bool negative_number = arg[0] == '-' && isdigit((unsigned char)arg[1]);
        if (only_positional || arg[0] != '-' || strcmp(arg, "-") == 0 || negative_number) {
            if (*n_positional >= cmd->max_positional) return refuse_argument(cmd, arg);
            positional[(*n_positional)++] = arg;
            continue;
        }
        if (strcmp(arg, "--") == 0) {
            only_positional = true;
            continue;
        }
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            lb_args_print_help(cmd);
            *help_shown = true;
            return LB_OK;
        }
        if (strcmp(arg, "-v") == 0) {
            common->verbosity = 1;
            continue;
        }
        if (strcmp(arg, "-vv") == 0) {
            common->verbosity = 2;
            continue;
        }
        if (strcmp(arg, "-q") == 0) {
            common->verbosity = -1;
            continue;
        }
        if (strcmp(arg, "--json") == 0) {
            common->json = true;
            continue;
        }

        char name[64];
        const char *eq = strchr(arg, '=');
        size_t name_len = eq ? (size_t)(eq - arg) : strlen(arg);
        if (name_len >= sizeof name) name_len = sizeof name - 1;
        memcpy(name, arg, name_len);
        name[name_len] = '\0';
        const char *value = eq ? eq + 1 : NULL;

        if (strcmp(name, "--db") == 0 && !cmd->uses_db)
            return lb_args_usage_error(cmd->command,
                                       "option --db does not apply: this command stores and reads "
                                       "no results");
        if (strcmp(name, "--db") == 0) {
            if (value == NULL) {
                if (i + 1 >= argc)
                    return lb_args_usage_error(cmd->command, "option --db expects a PATH");
                value = argv[++i];
            }
            if (value[0] == '\0')
                return lb_args_usage_error(cmd->command, "option --db expects a non-empty PATH");
            common->db_path = value;
            continue;
        }
        const lb_arg_spec *spec = NULL;
        for (int k = 0; k < cmd->n_specs; k++)
            if (strcmp(cmd->specs[k].name, name) == 0) spec = &cmd->specs[k];
        if (spec == NULL) return lb_args_usage_error(cmd->command, "unknown option '%s'", name);
        if (spec->type == LB_ARG_FLAG) {
            if (value != NULL)
                return lb_args_usage_error(cmd->command, "option %s takes no value", spec->name);
            *(bool *)spec->dest = true;
            continue;
        }
        if (value == NULL) {
            if (i + 1 >= argc)
                return lb_args_usage_error(cmd->command, "option %s expects a value (%s)",
                                           spec->name,
                                           spec->type == LB_ARG_CHOICE ? spec->choices
                                           : spec->metavar             ? spec->metavar
                                                                       : "VALUE");
            value = argv[++i];
        }
        const int k = (int)(spec - cmd->specs);
        if (spec->type != LB_ARG_LIST && given[k] != NULL && strcmp(given[k], value) != 0)
            return lb_args_usage_error(cmd->command,
                                       "option %s given twice ('%s', then '%s'): give it once",
                                       spec->name, given[k], value);
        given[k] = value;
        LB_TRY(set_value(cmd, spec, value));
    }
    if (*n_positional < cmd->min_positional)
        return lb_args_usage_error(cmd->command, "expected %s", cmd->usage);
    lb_log_set_level(common->verbosity < 0    ? LB_LOG_ERROR
                     : common->verbosity == 0 ? LB_LOG_WARN
                     : common->verbosity == 1 ? LB_LOG_INFO
                                              : LB_LOG_DEBUG);
    return LB_OK;
}

int lb_args_parse(const lb_cli_command *cmd, int argc, char **argv, lb_args *out) {
    bool help = false;
    lb_status st = parse(cmd, argc, argv, &out->common, out->pos, &out->n_pos, &help);
    if (st != LB_OK) return lb_status_exit_code(st);
    const char *check = getenv(LB_ARGS_CHECK_ENV);
    if (help) return 0;
    if (check == NULL || check[0] == '\0') return LB_ARGS_GO_ON;
    return cmd->checks_inputs && lb_args_checking_inputs() ? LB_ARGS_GO_ON : 0;
}

bool lb_args_checking_inputs(void) {
    const char *check = getenv(LB_ARGS_CHECK_ENV);
    return check != NULL && strcmp(check, LB_ARGS_CHECK_INPUTS) == 0;
}
