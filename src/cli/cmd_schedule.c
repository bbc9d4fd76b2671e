/* cmd_schedule.c: `llmbench schedule add|list|remove|exec`: recurring runs as a crontab
 * line, a systemd user timer or a printed Kubernetes CronJob (schedule/schedule.h), and
 * the job those entries start (schedule/job.h). */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/runctl.h"
#include "core/file.h"
#include "core/proc.h"
#include "core/utf8text.h"
#include "schedule/job.h"
#include "schedule/schedule.h"
#include "store/store.h"

static lb_schedule_backend parse_backend(const char *s) {
    return strcmp(s, "systemd") == 0      ? LB_SCHEDULE_SYSTEMD
           : strcmp(s, "kubernetes") == 0 ? LB_SCHEDULE_KUBERNETES
                                          : LB_SCHEDULE_CRON;
}

/* path itself when absolute, else the current folder joined with it in buf. */
static const char *absolute(const char *path, char *buf, size_t cap) {
    char cwd[4096];
    if (path[0] == '/' || getcwd(cwd, sizeof cwd) == NULL) return path;
    snprintf(buf, cap, "%s/%s", cwd, path);
    return buf;
}

/* Offers the command to schedule to its own option parser in check-only mode (args.h's
 * LB_ARGS_CHECK_ENV, as the sweep does), so a typo is refused now, with the command's own
 * sentence, rather than failing at every scheduled time. */
static lb_status check_command(const char *exe, const lb_schedule_entry *e, lb_err *err) {
    const char **argv = calloc(e->argc + 2, sizeof *argv);
    if (argv == NULL) return lb_fail(err, LB_ERR_NOMEM, "no memory to check the command");
    argv[0] = exe;
    for (size_t i = 0; i < e->argc; i++)
        argv[i + 1] = e->argv[i];
    char log_path[] = "/tmp/llmbench-schedule-XXXXXX";
    int fd = mkstemp(log_path);
    if (fd < 0) {
        free(argv);
        return lb_fail(err, LB_ERR_IO, "cannot make a temporary file in /tmp: %s", strerror(errno));
    }
    close(fd);
    const char *env[] = {LB_ARGS_CHECK_ENV "=1", NULL};
    lb_proc_spec spec = {
        .argv = argv, .env = env, .stdout_path = "/dev/null", .stderr_path = log_path};
    int code = 0;
    lb_status st = lb_proc_run(&spec, &code, err);
    free(argv);
    if (st == LB_OK && code != 0) {
        char why[LB_ERR_MSG_BYTES];
        lb_file_last_line(log_path, why, sizeof why);
        st = lb_fail(err, LB_ERR_USAGE, "not scheduled, the command is refused: %s",
                     why[0] ? why : "it exits with an error when its options are checked");
    }
    unlink(log_path);
    return st;
}

/* The CronJob as {"name", "backend", "at", "days", "manifest"} for --json. */
static void print_cronjob_json(const lb_schedule_entry *e) {
    char *text = NULL, at[8];
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (f != NULL) {
        lb_schedule_print_cronjob(f, e);
        fclose(f);
    }
    snprintf(at, sizeof at, "%02d:%02d", e->hour, e->minute);
    json_t *doc = json_pack("{s:s, s:s, s:s, s:s, s:s}", "name", e->name, "backend", "kubernetes",
                            "at", at, "days", e->days, "manifest", text ? text : "");
    json_dumpf(doc, stdout, JSON_INDENT(2));
    printf("\n");
    json_decref(doc);
    free(text);
}

static int fail(const char *sub, const lb_err *err, lb_status st) {
    fprintf(stderr, "llmbench schedule %s: %s\n", sub, err->msg);
    return lb_status_exit_code(st);
}

static int cmd_add(int argc, char **argv) {
    lb_schedule_entry e = lb_schedule_default_entry();
    const char *at = NULL, *backend = "cron";
    int64_t gpus = e.gpus;
    const lb_arg_spec specs[] = {
        {"--at", LB_ARG_STRING, &at, "HH:MM",
         "time of day to run, two digits each (07:05), this machine's local time (UTC for "
         "kubernetes: the CronJob's timeZone is Etc/UTC) (required)"},
        {"--days", LB_ARG_STRING, &e.days, "DAYS",
         "daily (default), weekdays, weekends or day names: mon,wed,fri"},
        {"--backend", LB_ARG_CHOICE, &backend, NULL,
         "cron (default: a line in your crontab), systemd (user timer) or kubernetes (print a "
         "CronJob)",
         0, 0, LB_SCHEDULE_BACKEND_CHOICES},
        {"--report", LB_ARG_STRING, &e.report_dir, "DIR", "write a report of each run into DIR"},
        {"--threshold", LB_ARG_DOUBLE, &e.threshold_pct, "PCT",
         "smallest change called a regression, in percent (default 3)", 0, 1000},
        {"--image", LB_ARG_STRING, &e.image, "IMAGE",
         "kubernetes: container image (default llmbench:latest)"},
        {"--gpus", LB_ARG_INT, &gpus, "N", "kubernetes: nvidia.com/gpu per pod (default 1)", 0,
         1024},
        {"--pvc", LB_ARG_STRING, &e.pvc, "CLAIM",
         "kubernetes: claim holding the results database (default llmbench-results)"},
    };
    const lb_cli_command cmd = {
        .command = "schedule add",
        .uses_db = true,
        .usage = "NAME --at HH:MM [options] -- <llmbench command and options>",
        .summary = "Installs a recurring run of an llmbench command. The entry runs 'llmbench "
                   "schedule exec NAME -- <command>': one scheduled run at a time (a lock next to "
                   "the database), the runs tagged schedule:NAME, each compared with its "
                   "benchmark's history, a report when --report is given, and exit 1 when the "
                   "command failed or a history regressed.\n\n"
                   "example: llmbench schedule add nightly --at 19:00 -- train --model gpt2-124m "
                   "--device cuda --precision bf16",
        LB_ARG_SPECS(specs),
        .min_positional = 1,
        .max_positional = LB_ARGS_MAX_POSITIONAL,
    };
    lb_args a;
    int rc = lb_args_parse(&cmd, argc, argv, &a);
    if (rc != LB_ARGS_GO_ON) return rc;
    lb_err err = {{0}};
    lb_status st = LB_OK;
    if (at == NULL) st = lb_fail(&err, LB_ERR_USAGE, "--at HH:MM is required");
    if (st == LB_OK) st = lb_schedule_parse_at(at, &e.hour, &e.minute, &err);
    char exe[4096], db[LB_STORE_PATH_BYTES];
    e.name = a.pos[0];
    e.argv = (const char *const *)&a.pos[1];
    e.argc = (size_t)a.n_pos - 1;
    e.gpus = (int)gpus;
    lb_schedule_backend b = parse_backend(backend);
    if (st == LB_OK) st = lb_schedule_check(&e, b, &err);
    if (st == LB_OK) st = lb_proc_self_exe(exe, sizeof exe, &err);
    if (st == LB_OK && e.argc > 0) st = check_command(exe, &e, &err);
    if (st == LB_OK) st = lb_store_resolve_path(a.common.db_path, db, sizeof db, &err);
    if (st != LB_OK) return fail("add", &err, st);
    if (b == LB_SCHEDULE_KUBERNETES) { /* paths are the container's */
        if (a.common.json)
            print_cronjob_json(&e);
        else
            lb_schedule_print_cronjob(stdout, &e);
        return 0;
    }
    /* cron and systemd start jobs in another folder: relative paths are made absolute */
    char db_abs[8200], report_abs[8200];
    e.exe = exe;
    e.db_path = absolute(db, db_abs, sizeof db_abs);
    if (e.report_dir) e.report_dir = absolute(e.report_dir, report_abs, sizeof report_abs);
    char note[1024];
    st = lb_schedule_add(&e, b, note, sizeof note, &err);
    if (st != LB_OK) return fail("add", &err, st);
    if (a.common.json) {
        char hhmm[8];
        snprintf(hhmm, sizeof hhmm, "%02d:%02d", e.hour, e.minute);
        /* the note names the unit's path, which may be in another encoding than JSON's */
        json_t *doc = json_pack("{s:s, s:s, s:s, s:s, s:s}", "name", e.name, "backend", backend,
                                "at", hhmm, "days", e.days, "note", lb_utf8text_repair(note));
        json_dumpf(doc, stdout, JSON_INDENT(2));
        printf("\n");
        json_decref(doc);
    } else
        printf("scheduled %s at %02d:%02d (%s) with %s%s%s\n", e.name, e.hour, e.minute, e.days,
               backend, note[0] ? ": " : "", note);
    return 0;
}

static int cmd_remove(int argc, char **argv) {
    const char *backend = "cron";
    const lb_arg_spec specs[] = {
        {"--backend", LB_ARG_CHOICE, &backend, NULL,
         "where the entry is: cron (default) or systemd", 0, 0, "cron|systemd"},
    };
    const lb_cli_command cmd = {
        .command = "schedule remove",
        .usage = "NAME [options]",
        .summary = "Removes a scheduled run added with 'llmbench schedule add'.",
        LB_ARG_SPECS(specs),
        .min_positional = 1,
        .max_positional = 1,
    };
    lb_args a;
    int rc = lb_args_parse(&cmd, argc, argv, &a);
    if (rc != LB_ARGS_GO_ON) return rc;
    lb_err err = {{0}};
    lb_status st = lb_schedule_remove(a.pos[0], parse_backend(backend), &err);
    if (st != LB_OK) return fail("remove", &err, st);
    if (a.common.json) {
        json_t *doc =
            json_pack("{s:s, s:s, s:b}", "name", a.pos[0], "backend", backend, "removed", 1);
        json_dumpf(doc, stdout, JSON_INDENT(2));
        printf("\n");
        json_decref(doc);
    } else
        printf("removed %s from %s\n", a.pos[0], backend);
    return 0;
}

static int cmd_list(int argc, char **argv) {
    const lb_cli_command cmd = {
        .command = "schedule list",
        .usage = "[options]",
        .summary = "Lists the scheduled runs of your crontab and of your systemd user timers.",
    };
    lb_args a;
    int rc = lb_args_parse(&cmd, argc, argv, &a);
    if (rc != LB_ARGS_GO_ON) return rc;
    lb_err err = {{0}};
    lb_status st = lb_schedule_list(stdout, a.common.json, &err);
    return st == LB_OK ? 0 : fail("list", &err, st);
}

static int cmd_exec(int argc, char **argv) {
    lb_schedule_job j = {.threshold_pct = 3.0, .tags_env = LB_RUNCTL_TAGS_ENV};
    const lb_arg_spec specs[] = {
        {"--report", LB_ARG_STRING, &j.report_dir, "DIR", "write a report of the runs into DIR"},
        {"--threshold", LB_ARG_DOUBLE, &j.threshold_pct, "PCT",
         "smallest change called a regression, in percent (default 3)", 0, 1000},
    };
    const lb_cli_command cmd = {
        .command = "schedule exec",
        .uses_db = true,
        .usage = "NAME [options] -- <llmbench command and options>",
        .summary = "The job a scheduled entry runs (also by hand): takes the schedule lock, runs "
                   "the command with its runs tagged schedule:NAME, compares each with its "
                   "benchmark's history and writes a report with --report. Exit 0: ran, no "
                   "regression (also when the command completed with an INVALID verdict, exit "
                   "3, which is said); 1: the command failed, a history regressed, or another "
                   "scheduled run holds the lock; 2: bad usage; 130: interrupted (Ctrl-C is "
                   "passed on to the command; no history checked, no report written).",
        LB_ARG_SPECS(specs),
        .min_positional = 2,
        .max_positional = LB_ARGS_MAX_POSITIONAL,
    };
    lb_args a;
    int rc = lb_args_parse(&cmd, argc, argv, &a);
    if (rc != LB_ARGS_GO_ON) return rc;
    if (a.common.json) /* stdout is the command's own, then one line per run */
        return lb_status_exit_code(lb_args_usage_error(
            cmd.command, "--json does not apply: the job's output is the command's own, then "
                         "one line per stored run"));
    char exe[4096], db[LB_STORE_PATH_BYTES];
    lb_err err = {{0}};
    lb_status st = lb_proc_self_exe(exe, sizeof exe, &err);
    if (st == LB_OK) st = lb_store_resolve_path(a.common.db_path, db, sizeof db, &err);
    if (st != LB_OK) return fail("exec", &err, st);
    j.name = a.pos[0];
    j.exe = exe;
    j.db_path = db;
    j.argv = (const char *const *)&a.pos[1];
    j.argc = (size_t)a.n_pos - 1;
    lb_schedule_outcome o;
    st = lb_schedule_exec(&j, stdout, &o, &err);
    if (st != LB_OK) return fail("exec", &err, st);
    /* exit 3 is a completed run whose verdict is INVALID: said, not a failure of the job */
    if (o.command_exit != 0)
        fprintf(stderr, "llmbench schedule exec: %s: the command exited with %d%s\n", j.name,
                o.command_exit, o.command_exit == 3 ? " (completed, INVALID)" : "");
    return (o.command_exit != 0 && o.command_exit != 3) || o.regression ? 1 : 0;
}

int lb_cmd_schedule(int argc, char **argv) {
    static const struct {
        const char *name;
        int (*fn)(int, char **);
    } subs[] = {{"add", cmd_add}, {"list", cmd_list}, {"remove", cmd_remove}, {"exec", cmd_exec}};
    if (argc < 2)
        return lb_status_exit_code(lb_args_usage_error(
            "schedule", "missing subcommand: expected add, list, remove or exec"));
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++)
        if (strcmp(argv[1], subs[i].name) == 0) return subs[i].fn(argc - 1, argv + 1);
    if (strcmp(argv[1], "--help") != 0 && strcmp(argv[1], "-h") != 0)
        return lb_status_exit_code(lb_args_usage_error(
            "schedule", "unknown subcommand '%s': expected add, list, remove or exec", argv[1]));
    printf("usage: llmbench schedule add NAME --at HH:MM [options] -- <command>\n"
           "       llmbench schedule list\n"
           "       llmbench schedule remove NAME [--backend cron|systemd]\n"
           "       llmbench schedule exec NAME [options] -- <command>\n"
           "(llmbench schedule <sub> --help for each)\n");
    return 0;
}
