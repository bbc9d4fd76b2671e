/* args.h: declarative option parsing for every subcommand.
 *
 * A command lists its options once, in an lb_arg_spec table; the same table parses argv,
 * checks values (type and range) and prints --help, so the help text can never drift from
 * what the code accepts. Options take "--name value" or "--name=value"; a word of a dash
 * and a digit ("-1") is an argument, never an option (no option is named so), and an
 * argument past max_positional is refused naming that limit. An option that takes one value,
given twice with two different values, is refused (a list option repeats by design; the
same value twice is one). The options every command
 * shares (-v, -q, --json, --help) are handled here, and --db for the commands that use the
 * results database (a command that stores nothing refuses it). A bad argument is one line
 * on stderr naming the command, the option, what was given and what is expected; the
 * parser then returns LB_ERR_USAGE (exit 2). */
#ifndef LB_CLI_ARGS_H
#define LB_CLI_ARGS_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"

typedef enum {
    LB_ARG_FLAG,   /* bool*: present or not */
    LB_ARG_INT,    /* int64_t*, checked against [min, max] */
    LB_ARG_DOUBLE, /* double*, checked against [min, max] */
    LB_ARG_STRING, /* const char** pointing into argv */
    LB_ARG_CHOICE, /* const char**: one of the '|'-separated words in choices */
    LB_ARG_LIST,   /* lb_arg_list*: the option may repeat; each value is kept */
} lb_arg_type;

#define LB_ARG_LIST_MAX   64
#define LB_ARGS_MAX_SPECS 256 /* options one command may define */

typedef struct {
    int n;
    const char *items[LB_ARG_LIST_MAX];
} lb_arg_list;

typedef struct {
    const char *name; /* "--batch" */
    lb_arg_type type;
    void *dest;
    const char *metavar; /* "B" (shown in help) */
    const char *help;    /* one line; the default is part of it */
    double min, max;     /* for INT and DOUBLE; both 0 means no range check */
    const char *choices; /* for CHOICE: "fp32|fp16|bf16" */
} lb_arg_spec;

typedef struct {
    bool json;           /* --json: one JSON document on stdout */
    const char *db_path; /* --db PATH, NULL when not given */
    int verbosity;       /* -q: -1, default 0, -v: 1, -vv: 2 */
} lb_cli_common;

typedef struct {
    const char *command; /* "train", "results export" */
    const char *usage;   /* "[options]" or "ID" */
    const char *summary; /* one paragraph for --help */
    const lb_arg_spec *specs;
    int n_specs;
    int min_positional, max_positional;
    bool uses_db;       /* takes --db PATH: it stores runs or reads them; else --db is refused */
    bool checks_inputs; /* with LB_ARGS_CHECK_ENV=LB_ARGS_CHECK_INPUTS it goes on to check
                         * its inputs (lb_args_checking_inputs) */
} lb_cli_command;

#define LB_ARGS_MAX_POSITIONAL 1024
#define LB_ARGS_GO_ON          (-1)

/* What a command line parsed into: the shared options and the positional arguments
 * (pointers into argv). */
typedef struct {
    lb_cli_common common;
    const char *pos[LB_ARGS_MAX_POSITIONAL];
    int n_pos;
} lb_args;

/* Fills .specs and .n_specs of an lb_cli_command from a spec array. */
#define LB_ARG_SPECS(array) .specs = (array), .n_specs = (int)(sizeof(array) / sizeof((array)[0]))

/* Parses argv[1..argc-1] (argv[0] is the command word) into *out and applies the
 * verbosity to the logger. Returns LB_ARGS_GO_ON when the command should run, or the exit
 * code to return at once: 0 after printing --help, 2 after printing a usage error.
 * With LB_ARGS_CHECK_ENV set (non-empty) in the environment it returns 0 instead of
 * LB_ARGS_GO_ON: the command line was only checked. `llmbench sweep` and `schedule add`
 * start each option or command line this way, so the command's own table judges it
 * before anything runs. With the variable set to LB_ARGS_CHECK_INPUTS, a command that
 * sets checks_inputs gets LB_ARGS_GO_ON and lb_args_checking_inputs() true: it goes on to
 * the checks of its inputs that do not depend on the machine (a model's name, a data
 * file, options that contradict each other), then exits 0 or with its usage error,
 * measuring and storing nothing; the sweep checks each cell's whole command line so. */
#define LB_ARGS_CHECK_ENV    "LLMBENCH_CHECK_ARGS"
#define LB_ARGS_CHECK_INPUTS "inputs"
int lb_args_parse(const lb_cli_command *cmd, int argc, char **argv, lb_args *out);

/* True when LB_ARGS_CHECK_ENV is LB_ARGS_CHECK_INPUTS (see lb_args_parse). */
bool lb_args_checking_inputs(void);

void lb_args_print_help(const lb_cli_command *cmd);

/* Prints "llmbench <command>: <message>" on stderr and returns LB_ERR_USAGE. */
lb_status lb_args_usage_error(const char *command, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
