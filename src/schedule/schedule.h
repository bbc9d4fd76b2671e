/* schedule.h: recurring runs as a crontab line, a systemd user timer or a Kubernetes
 * CronJob, and the job those entries start.
 *
 * An entry runs `llmbench schedule exec NAME [--report DIR] [--threshold PCT] --db DB --
 * <command and options>` at HH:MM on the chosen days. The crontab line is kept between a
 * marker comment naming it ("# llmbench schedule NAME") and is added and removed through
 * crontab(1) itself, every other line untouched (the line after the marker goes with it
 * only while it is still the job llmbench wrote there). The systemd timer is a pair of
 * user units llmbench-NAME.service (Type=oneshot) and llmbench-NAME.timer (OnCalendar,
 * Persistent) in $XDG_CONFIG_HOME/systemd/user (else ~/.config/systemd/user). The CronJob
 * is printed, not applied: concurrencyPolicy Forbid, the GPUs as nvidia.com/gpu limits,
 * the database on a persistent volume claim, every value quoted as a YAML string. No word,
 * path or value of an entry may hold a control character (lb_schedule_check).
 *
 * The job (schedule/job.h) takes an exclusive lock next to the database so two scheduled
 * runs never overlap (a second one exits at once), runs the command as its own process
 * tagged "schedule:NAME", compares the run with its benchmark's history, optionally writes
 * a report, and returns whether it regressed. Not here: parsing the command's options
 * (the command does that when it runs). */
#ifndef LB_SCHEDULE_SCHEDULE_H
#define LB_SCHEDULE_SCHEDULE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "core/status.h"

typedef enum {
    LB_SCHEDULE_CRON,
    LB_SCHEDULE_SYSTEMD,
    LB_SCHEDULE_KUBERNETES,
} lb_schedule_backend;

#define LB_SCHEDULE_BACKEND_CHOICES "cron|systemd|kubernetes"

typedef struct {
    const char *name;        /* letters, digits, '-', '_' */
    int hour, minute;        /* when, local time of the machine (UTC for Kubernetes) */
    const char *days;        /* "daily", "weekdays", "weekends" or names: "mon,wed,fri" */
    const char *exe;         /* llmbench's absolute path (cron, systemd) */
    const char *db_path;     /* the results database (resolved) */
    const char *report_dir;  /* NULL: no report */
    double threshold_pct;    /* regression threshold */
    const char *const *argv; /* the llmbench command and its options */
    size_t argc;
    const char *image; /* Kubernetes: container image */
    int gpus;          /* Kubernetes: nvidia.com/gpu per pod */
    const char *pvc;   /* Kubernetes: claim holding the database */
} lb_schedule_entry;

lb_schedule_entry lb_schedule_default_entry(void);

/* The most words a scheduled command may have (its entry is written from a fixed list). */
#define LB_SCHEDULE_MAX_ARGS 64

/* Parses "HH:MM" into *hour, *minute; LB_ERR_USAGE naming the text otherwise. */
lb_status lb_schedule_parse_at(const char *text, int *hour, int *minute, lb_err *err);
/* Checks a schedule name: 1 to 64 letters, digits, '-' or '_', for Kubernetes also a valid
 * object name (lowercase letters, digits and '-', at most 43, starting and ending with a
 * letter or digit); LB_ERR_USAGE naming it. `schedule exec` checks its NAME with it too. */
lb_status lb_schedule_check_name(const char *name, lb_schedule_backend b, lb_err *err);
/* Checks the name (lb_schedule_check_name), a days value (each day once), the command (at
 * most LB_SCHEDULE_MAX_ARGS words; a sweep must run with --again, or it would run only
 * once) and that no word, path or value of e holds a control character (a newline would
 * end the crontab line or the unit file's line; NULL ones are not checked) and, for
 * Kubernetes, that each is UTF-8 (the CronJob is YAML); LB_ERR_USAGE naming what is wrong. */
lb_status lb_schedule_check(const lb_schedule_entry *e, lb_schedule_backend b, lb_err *err);

/* Installs e (replacing an entry of the same name). The systemd backend writes the units,
 * then asks systemctl --user to reload and enable the timer; when there is no user manager
 * the units stay written and *note says how to enable them (note may be NULL). */
lb_status lb_schedule_add(const lb_schedule_entry *e, lb_schedule_backend b, char *note,
                          size_t note_bytes, lb_err *err);

/* Removes entry name from the backend; LB_ERR_USAGE when there is none or name is one add
 * refuses (lb_schedule_check_name). */
lb_status lb_schedule_remove(const char *name, lb_schedule_backend b, lb_err *err);

/* Lists the entries of the crontab and of the systemd user folder: "cron NAME line" and
 * "systemd NAME OnCalendar", one a line, to f; with json an array whose texts are made
 * UTF-8 (a byte of a path in another encoding as '?'). */
lb_status lb_schedule_list(FILE *f, bool json, lb_err *err);

/* Prints e as a Kubernetes CronJob manifest; every value from e but the GPU count is a
 * double-quoted YAML string ("2024", "on" or "null" stay strings). */
void lb_schedule_print_cronjob(FILE *f, const lb_schedule_entry *e);

/* The systemd folder for user units (created when create is true). */
lb_status lb_schedule_unit_dir(char *out, size_t out_bytes, bool create, lb_err *err);

#endif
