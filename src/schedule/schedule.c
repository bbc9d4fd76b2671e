/* schedule.c: crontab lines, systemd user units and CronJob manifests (schedule.h). */
#include "schedule/schedule.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/file.h"
#include "core/log.h"
#include "core/proc.h"
#include "core/signals.h"
#include "core/utf8text.h"

#define MARKER "# llmbench schedule "

lb_schedule_entry lb_schedule_default_entry(void) {
    return (lb_schedule_entry){.days = "daily",
                               .threshold_pct = 3.0,
                               .image = "llmbench:latest",
                               .gpus = 1,
                               .pvc = "llmbench-results"};
}

lb_status lb_schedule_parse_at(const char *text, int *hour, int *minute, lb_err *err) {
    bool shape = strlen(text) == 5 && text[2] == ':';
    for (int i = 0; shape && i < 5; i++)
        shape = i == 2 || isdigit((unsigned char)text[i]);
    int h = shape ? 10 * (text[0] - '0') + (text[1] - '0') : -1;
    int m = shape ? 10 * (text[3] - '0') + (text[4] - '0') : -1;
    if (!shape || h > 23 || m > 59) {
        char shown[LB_ERR_MSG_BYTES];
        snprintf(shown, sizeof shown, "%s", text);
        return lb_fail(err, LB_ERR_USAGE,
                       "--at expects HH:MM, two digits each, from 00:00 to 23:59; got '%s'",
                       lb_status_printable(shown));
    }
    *hour = h;
    *minute = m;
    return LB_OK;
}

static const char *const day_names[] = {"sun", "mon", "tue", "wed", "thu", "fri", "sat"};
static const char *const systemd_days[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};

/* The days as cron's day-of-week field and systemd's weekday list ("" for every day). */
static lb_status days_fields(const char *days, char *cron, size_t cron_cap, char *sd, size_t sd_cap,
                             lb_err *err) {
    if (strcmp(days, "daily") == 0) {
        snprintf(cron, cron_cap, "*");
        snprintf(sd, sd_cap, "%s", "");
        return LB_OK;
    }
    if (strcmp(days, "weekdays") == 0) days = "mon,tue,wed,thu,fri";
    if (strcmp(days, "weekends") == 0) days = "sat,sun";
    size_t cl = 0, sl = 0;
    unsigned seen = 0; /* each day once: at most 7 names fit the fields */
    cron[0] = sd[0] = '\0';
    for (const char *p = days; *p;) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        int d = -1;
        for (int i = 0; i < 7; i++)
            if (n == 3 && strncasecmp(p, day_names[i], 3) == 0) d = i;
        if (d < 0)
            return lb_fail(err, LB_ERR_USAGE,
                           "--days expects daily, weekdays, weekends or day names such as "
                           "mon,wed,fri; got '%s'",
                           days);
        if (seen & (1u << d))
            return lb_fail(err, LB_ERR_USAGE, "--days names %s twice: give each day once",
                           day_names[d]);
        seen |= 1u << d;
        cl += (size_t)snprintf(cron + cl, cron_cap - cl, "%s%d", cl ? "," : "", d);
        sl += (size_t)snprintf(sd + sl, sd_cap - sl, "%s%s", sl ? "," : "", systemd_days[d]);
        p = comma ? comma + 1 : p + n;
    }
    return LB_OK;
}

lb_status lb_schedule_check_name(const char *n, lb_schedule_backend b, lb_err *err) {
    char shown[LB_ERR_MSG_BYTES]; /* control characters as '?': the message is one line */
    snprintf(shown, sizeof shown, "%s", n ? n : "");
    lb_status_printable(shown);
    if (n == NULL || n[0] == '\0' || strlen(n) > 64 ||
        strspn(n, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") != strlen(n))
        return lb_fail(err, LB_ERR_USAGE,
                       "schedule name '%s' must be 1 to 64 letters, digits, '-' or '_'", shown);
    /* the CronJob llmbench-NAME: an RFC 1123 name of at most 52 characters, NAME a label
     * value (starts and ends with a letter or digit) */
    size_t len = strlen(n);
    if (b == LB_SCHEDULE_KUBERNETES &&
        (len > 43 || strspn(n, "abcdefghijklmnopqrstuvwxyz0123456789-") != len || n[0] == '-' ||
         n[len - 1] == '-'))
        return lb_fail(err, LB_ERR_USAGE,
                       "schedule name '%s' is not a Kubernetes name: give 1 to 43 lowercase "
                       "letters, digits or '-', starting and ending with a letter or digit",
                       n);
    return LB_OK;
}

/* LB_ERR_USAGE when text (NULL: not given) holds a control character other than a tab: a
 * newline or a carriage return would end the crontab line or the unit's ExecStart line
 * there, and the others are no part of a path or an option (a tab, inside the quotes every
 * word gets, is kept as it is). With utf8 (a CronJob, which is YAML), also when text is
 * not UTF-8: YAML is, and a byte of another encoding has no escape that keeps it. */
static lb_status check_text(const char *what, const char *text, bool utf8, lb_err *err) {
    char shown[LB_ERR_MSG_BYTES];
    snprintf(shown, sizeof shown, "%s", text ? text : "");
    for (const char *p = text; p && *p; p++)
        if (((unsigned char)*p < 0x20 && *p != '\t') || *p == 0x7f)
            return lb_fail(err, LB_ERR_USAGE,
                           "%s '%s' holds a control character (shown as '?'), which would break "
                           "the schedule's entry: give it without newlines or other control "
                           "characters",
                           what, lb_status_printable(shown));
    for (size_t i = 0, n = text && utf8 ? strlen(text) : 0; i < n;) {
        int k = lb_utf8text_char_len(text + i, n - i);
        if (k <= 0)
            return lb_fail(err, LB_ERR_USAGE,
                           "%s '%s' is not UTF-8 text (its other bytes shown as '?'), which a "
                           "CronJob's YAML must be: give it in UTF-8",
                           what, lb_utf8text_repair(shown));
        i += (size_t)k;
    }
    return LB_OK;
}

lb_status lb_schedule_check(const lb_schedule_entry *e, lb_schedule_backend b, lb_err *err) {
    LB_TRY(lb_schedule_check_name(e->name, b, err));
    char cron[64], sd[64];
    LB_TRY(days_fields(e->days, cron, sizeof cron, sd, sizeof sd, err));
    if (e->argc == 0)
        return lb_fail(
            err, LB_ERR_USAGE,
            "no command to schedule: give it after '--', e.g. -- train --model gpt2-124m");
    if (e->argc > LB_SCHEDULE_MAX_ARGS)
        return lb_fail(err, LB_ERR_USAGE,
                       "the command to schedule has %zu words; a schedule holds at most %d",
                       e->argc, LB_SCHEDULE_MAX_ARGS);
    const bool yaml = b == LB_SCHEDULE_KUBERNETES;
    LB_TRY(check_text("llmbench's path", e->exe, yaml, err));
    LB_TRY(check_text("the database path", e->db_path, yaml, err));
    LB_TRY(check_text("--report", e->report_dir, yaml, err));
    LB_TRY(check_text("--image", e->image, yaml, err));
    LB_TRY(check_text("--pvc", e->pvc, yaml, err));
    for (size_t i = 0; i < e->argc; i++) {
        char what[48];
        snprintf(what, sizeof what, "the command's word %zu", i + 1);
        LB_TRY(check_text(what, e->argv[i], yaml, err));
    }
    if (strcmp(e->argv[0], "sweep") == 0) {
        bool again = false;
        for (size_t i = 1; i < e->argc; i++)
            again |= strcmp(e->argv[i], "--again") == 0;
        if (!again)
            return lb_fail(err, LB_ERR_USAGE,
                           "a scheduled sweep needs --again: without it every run after the "
                           "first finds each cell stored and runs nothing");
    }
    return LB_OK;
}

/* ---- quoting ---- */

/* One word of an ExecStart line: double-quoted, with systemd's specifiers escaped. */
static void sd_quote(FILE *f, const char *s) {
    fputc('"', f);
    for (const char *p = s; *p; p++) {
        if (*p == '"' || *p == '\\') fputc('\\', f);
        if (*p == '%') fputc('%', f);
        if (*p == '$') fputc('$', f);
        fputc(*p, f);
    }
    fputc('"', f);
}

/* One YAML scalar, double-quoted so that it is always a string (never a number, bool or
 * null such as 2024, on or ~), with '\', '"' and control characters escaped, the C1 ones
 * (U+0080 to U+009F, which YAML does not allow as they are) included. */
static void yaml_quote(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20 || *p == 0x7f)
            fprintf(f, "\\x%02x", *p);
        else if (*p == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f)
            fprintf(f, "\\x%02x", *++p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

/* The job's words: exe schedule exec NAME [--report DIR] --threshold X --db DB -- argv...
 * (at most 11 + LB_SCHEDULE_MAX_ARGS). */
static size_t job_words(const lb_schedule_entry *e, const char **w, char *thr, size_t thr_cap) {
    size_t n = 0;
    w[n++] = e->exe;
    w[n++] = "schedule";
    w[n++] = "exec";
    w[n++] = e->name;
    if (e->report_dir) {
        w[n++] = "--report";
        w[n++] = e->report_dir;
    }
    snprintf(thr, thr_cap, "%g", e->threshold_pct);
    w[n++] = "--threshold";
    w[n++] = thr;
    w[n++] = "--db";
    w[n++] = e->db_path;
    w[n++] = "--";
    for (size_t i = 0; i < e->argc; i++)
        w[n++] = e->argv[i];
    return n;
}

/* ---- cron ---- */

/* Runs crontab with args; stdin from text (NULL: none), stdout into *out (may be NULL). */
static lb_status run_crontab(const char *const *args, const char *text, char **out, int *code,
                             lb_err *err) {
    char in_path[] = "/tmp/llmbench-cron-inXXXXXX", out_path[] = "/tmp/llmbench-cron-outXXXXXX";
    int in_fd = mkstemp(in_path), out_fd = mkstemp(out_path);
    if (in_fd < 0 || out_fd < 0) {
        if (in_fd >= 0) close(in_fd), unlink(in_path);
        if (out_fd >= 0) close(out_fd), unlink(out_path);
        return lb_fail(err, LB_ERR_IO, "cannot make a temporary file in /tmp: %s", strerror(errno));
    }
    if (text && write(in_fd, text, strlen(text)) != (ssize_t)strlen(text)) {
        close(in_fd), close(out_fd), unlink(in_path), unlink(out_path);
        return lb_fail(err, LB_ERR_IO, "cannot write %s", in_path);
    }
    close(in_fd);
    close(out_fd);
    lb_proc_sigchld caller; /* a caller ignoring SIGCHLD would lose crontab's status */
    lb_proc_sigchld_reset(&caller);
    pid_t pid = fork();
    if (pid == 0) {
        if (freopen(in_path, "r", stdin) == NULL || freopen(out_path, "w", stdout) == NULL)
            _exit(127);
        /* reading: "no crontab for USER" is an empty table here, not a line for the user */
        if (out != NULL && freopen("/dev/null", "w", stderr) == NULL) _exit(127);
        execvp("crontab", (char *const *)args);
        _exit(127);
    }
    int status = 0;
    pid_t waited = pid;
    int why = errno; /* fork's, or waitpid's below */
    if (pid > 0)
        while ((waited = waitpid(pid, &status, 0)) < 0 && (why = errno) == EINTR) {
        }
    lb_proc_sigchld_restore(&caller);
    if (pid < 0 || waited < 0) {
        unlink(in_path), unlink(out_path);
        return lb_fail(err, LB_ERR_RUNTIME, "cannot run crontab: %s", strerror(why));
    }
    *code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    lb_status st = LB_OK;
    if (*code == 127)
        st = lb_fail(err, LB_ERR_UNSUPPORTED,
                     "crontab(1) is not installed (Debian: apt-get install cron)");
    size_t len = 0;
    if (st == LB_OK && out && lb_file_read(out_path, out, &len, err) != LB_OK) st = LB_ERR_IO;
    unlink(in_path), unlink(out_path);
    return st;
}

/* The current crontab, malloc'd: empty when there is none (crontab -l exits 1, printing
 * nothing on stdout and "no crontab for USER" on stderr). Any other failure, a crontab -l
 * killed by Ctrl-C among them, is an error and never an empty table: the table written
 * from it would lose every line of the user's. */
static lb_status crontab_read(char **text, lb_err *err) {
    const char *args[] = {"crontab", "-l", NULL};
    int code = 0;
    LB_TRY(run_crontab(args, NULL, text, &code, err));
    lb_status st = LB_OK;
    if (lb_signals_interrupted())
        st = lb_fail(err, LB_ERR_INTERRUPTED, "interrupted: the crontab is left as it was");
    else if (code != 0 && !(code == 1 && (*text)[0] == '\0'))
        st = lb_fail(err, LB_ERR_RUNTIME,
                     "crontab -l failed (%s %d): the table could not be read, so it is left "
                     "as it was",
                     code > 128 ? "signal" : "exit", code > 128 ? code - 128 : code);
    if (st != LB_OK) {
        free(*text);
        *text = NULL;
    }
    return st;
}

static lb_status crontab_write(const char *text, lb_err *err) {
    const char *args[] = {"crontab", "-", NULL};
    int code = 0;
    LB_TRY(run_crontab(args, text, NULL, &code, err));
    if (code != 0)
        return lb_fail(err, LB_ERR_RUNTIME, "crontab refused the new table (exit %d)", code);
    return LB_OK;
}

/* text without the marker line of name and, when it is the job cron_add wrote there (it
 * runs 'schedule' 'exec' 'NAME'), the line after it: a job line the user deleted or edited
 * away leaves the user's next line in place. *found says whether the marker was there. The
 * result is malloc'd. */
static char *crontab_without(const char *text, const char *name, bool *found) {
    char marker[128], job[128];
    snprintf(marker, sizeof marker, MARKER "%s", name);
    snprintf(job, sizeof job, "'schedule' 'exec' '%s'", name);
    char *out = malloc(strlen(text) + 2), *o = out;
    if (out == NULL) return NULL;
    *found = false;
    bool skip_next = false;
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p + 1) : strlen(p);
        size_t body = nl ? n - 1 : n;
        bool is_marker = body == strlen(marker) && strncmp(p, marker, body) == 0;
        if (is_marker) {
            *found = true;
            skip_next = true;
        } else if (skip_next && memmem(p, body, job, strlen(job)) != NULL) {
            skip_next = false;
        } else {
            skip_next = false;
            memcpy(o, p, n);
            o += n;
        }
        p += n;
    }
    *o = '\0';
    return out;
}

static lb_status cron_add(const lb_schedule_entry *e, lb_err *err) {
    char cron_days[64], sd[64], thr[32];
    LB_TRY(days_fields(e->days, cron_days, sizeof cron_days, sd, sizeof sd, err));
    char *current = NULL;
    LB_TRY(crontab_read(&current, err));
    bool found = false;
    char *rest = crontab_without(current, e->name, &found);
    free(current);
    if (rest == NULL) return lb_fail(err, LB_ERR_NOMEM, "no memory for the crontab");
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (f == NULL) {
        free(rest);
        return lb_fail(err, LB_ERR_NOMEM, "no memory for the crontab");
    }
    fputs(rest, f);
    if (len == 0 && rest[0] && rest[strlen(rest) - 1] != '\n') fputc('\n', f);
    fprintf(f, MARKER "%s\n%d %d * * %s", e->name, e->minute, e->hour, cron_days);
    const char *w[LB_SCHEDULE_MAX_ARGS + 16];
    size_t n = job_words(e, w, thr, sizeof thr);
    for (size_t i = 0; i < n; i++) {
        fputc(' ', f);
        lb_proc_sh_word(f, w[i], LB_PROC_SH_IN_CRONTAB);
    }
    fputc('\n', f);
    fclose(f);
    free(rest);
    lb_status st = crontab_write(text, err);
    free(text);
    return st;
}

static lb_status cron_remove(const char *name, lb_err *err) {
    char *current = NULL;
    LB_TRY(crontab_read(&current, err));
    bool found = false;
    char *rest = crontab_without(current, name, &found);
    free(current);
    if (rest == NULL) return lb_fail(err, LB_ERR_NOMEM, "no memory for the crontab");
    lb_status st =
        found ? crontab_write(rest, err)
              : lb_fail(err, LB_ERR_USAGE,
                        "no crontab entry named '%s' (see 'llmbench schedule list')", name);
    free(rest);
    return st;
}

/* ---- systemd ---- */

lb_status lb_schedule_unit_dir(char *out, size_t out_bytes, bool create, lb_err *err) {
    const char *xdg = getenv("XDG_CONFIG_HOME"), *home = getenv("HOME");
    if (xdg && xdg[0] == '/')
        snprintf(out, out_bytes, "%s/systemd/user", xdg);
    else if (home && home[0])
        snprintf(out, out_bytes, "%s/.config/systemd/user", home);
    else
        return lb_fail(err, LB_ERR_USAGE,
                       "neither XDG_CONFIG_HOME nor HOME is set: no place for systemd user units");
    return create ? lb_file_mkdirs(out, 0755, err) : LB_OK;
}

/* Runs systemctl --user with args; true when it exited 0. */
static bool systemctl_user(const char *a, const char *b) {
    const char *argv[] = {"/bin/systemctl", "--user", a, b, NULL};
    if (access(argv[0], X_OK) != 0) return false;
    lb_proc_spec spec = {.argv = argv, .stdout_path = "/dev/null", .stderr_path = "/dev/null"};
    int code = 1;
    return lb_proc_run(&spec, &code, NULL) == LB_OK && code == 0;
}

static lb_status systemd_add(const lb_schedule_entry *e, char *note, size_t note_bytes,
                             lb_err *err) {
    char cron_days[64], sd_days[64], dir[4096], path[4200], thr[32];
    LB_TRY(days_fields(e->days, cron_days, sizeof cron_days, sd_days, sizeof sd_days, err));
    LB_TRY(lb_schedule_unit_dir(dir, sizeof dir, true, err));
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (f == NULL) return lb_fail(err, LB_ERR_NOMEM, "no memory for the unit");
    fprintf(
        f,
        "# written by llmbench schedule add %s\n[Unit]\nDescription=llmbench scheduled run %s\n\n"
        "[Service]\nType=oneshot\nExecStart=",
        e->name, e->name);
    const char *w[LB_SCHEDULE_MAX_ARGS + 16];
    size_t n = job_words(e, w, thr, sizeof thr);
    for (size_t i = 0; i < n; i++) {
        if (i) fputc(' ', f);
        sd_quote(f, w[i]);
    }
    fputs("\n", f);
    fclose(f);
    char service[4200], kept[4224];
    snprintf(service, sizeof service, "%s/llmbench-%s.service", dir, e->name);
    /* the service this one replaces, kept as a second name and renamed back should the
     * timer not be written: a rename needs no room, where a rewrite would on a full disk */
    snprintf(kept, sizeof kept, "%s.replaced", service);
    const bool had = access(service, F_OK) == 0;
    unlink(kept);
    lb_status st = LB_OK;
    if (had && link(service, kept) != 0)
        st =
            lb_fail(err, LB_ERR_IO, "cannot link %s to %s, which keeps it while it is replaced: %s",
                    service, kept, strerror(errno));
    if (st == LB_OK) st = lb_file_write_atomic(service, text, len, err);
    free(text);
    if (st != LB_OK) {
        if (had) unlink(kept);
        return st;
    }
    char timer[1024];
    snprintf(
        timer, sizeof timer,
        "# written by llmbench schedule add %s\n[Unit]\nDescription=llmbench scheduled run %s\n\n"
        "[Timer]\nOnCalendar=%s%s*-*-* %02d:%02d:00\nPersistent=true\n"
        "Unit=llmbench-%s.service\n\n[Install]\nWantedBy=timers.target\n",
        e->name, e->name, sd_days, sd_days[0] ? " " : "", e->hour, e->minute, e->name);
    snprintf(path, sizeof path, "%s/llmbench-%s.timer", dir, e->name);
    st = lb_file_write_atomic(path, timer, strlen(timer), err);
    if (st != LB_OK) { /* the service as it was: the one replaced, or none */
        if (had ? rename(kept, service) != 0 : unlink(service) != 0)
            LB_WARN("could not put back %s as it was", service);
        return st;
    }
    if (had) unlink(kept);
    char unit[128];
    snprintf(unit, sizeof unit, "llmbench-%s.timer", e->name);
    bool enabled = systemctl_user("daemon-reload", NULL) && systemctl_user("enable", unit) &&
                   systemctl_user("start", unit);
    if (note)
        snprintf(note, note_bytes,
                 enabled ? "enabled %s"
                         : "wrote %s; no systemd user manager answered, so enable "
                           "it with: systemctl --user daemon-reload && systemctl "
                           "--user enable --now %s",
                 enabled ? unit : path, unit);
    return LB_OK;
}

static lb_status systemd_remove(const char *name, lb_err *err) {
    char dir[4096], path[4400], unit[128];
    LB_TRY(lb_schedule_unit_dir(dir, sizeof dir, false, err));
    snprintf(unit, sizeof unit, "llmbench-%s.timer", name);
    snprintf(path, sizeof path, "%s/%s", dir, unit);
    if (access(path, F_OK) != 0)
        return lb_fail(err, LB_ERR_USAGE, "no systemd timer named '%s' in %s", name, dir);
    systemctl_user("disable", unit);
    systemctl_user("stop", unit);
    unlink(path);
    snprintf(path, sizeof path, "%s/llmbench-%s.service", dir, name);
    unlink(path);
    systemctl_user("daemon-reload", NULL);
    return LB_OK;
}

/* ---- public ---- */

lb_status lb_schedule_add(const lb_schedule_entry *e, lb_schedule_backend b, char *note,
                          size_t note_bytes, lb_err *err) {
    LB_TRY(lb_schedule_check(e, b, err));
    if (note && note_bytes) note[0] = '\0';
    switch (b) {
    case LB_SCHEDULE_CRON: return cron_add(e, err);
    case LB_SCHEDULE_SYSTEMD: return systemd_add(e, note, note_bytes, err);
    case LB_SCHEDULE_KUBERNETES: break;
    }
    return lb_fail(err, LB_ERR_USAGE,
                   "a Kubernetes CronJob is printed, not installed: use --print");
}

lb_status lb_schedule_remove(const char *name, lb_schedule_backend b, lb_err *err) {
    /* a name add refuses is no entry: said as one line, never a path built from it */
    LB_TRY(lb_schedule_check_name(name, LB_SCHEDULE_CRON, err));
    if (b == LB_SCHEDULE_CRON) return cron_remove(name, err);
    if (b == LB_SCHEDULE_SYSTEMD) return systemd_remove(name, err);
    return lb_fail(err, LB_ERR_USAGE,
                   "a Kubernetes CronJob is removed with kubectl delete cronjob llmbench-%s", name);
}

lb_status lb_schedule_list(FILE *f, bool json, lb_err *err) {
    json_t *arr = json ? json_array() : NULL;
    char *text = NULL;
    lb_status st = crontab_read(&text, err);
    if (st == LB_ERR_UNSUPPORTED) { /* no cron here: list the timers only */
        st = LB_OK;
        text = NULL;
    }
    if (st != LB_OK) {
        json_decref(arr);
        return st;
    }
    for (const char *p = text; p && *p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        if (strncmp(p, MARKER, strlen(MARKER)) == 0 && nl) {
            char name[128];
            snprintf(name, sizeof name, "%.*s", (int)(n - strlen(MARKER)), p + strlen(MARKER));
            const char *line = nl + 1, *end = strchr(line, '\n');
            size_t ln = end ? (size_t)(end - line) : strlen(line);
            if (arr) { /* JSON is UTF-8: the bytes of a path in another encoding as '?' */
                char *entry = strndup(line, ln);
                if (entry == NULL) {
                    free(text);
                    json_decref(arr);
                    return lb_fail(err, LB_ERR_NOMEM, "no memory to list the schedules");
                }
                json_array_append_new(arr, json_pack("{s:s, s:s, s:s}", "backend", "cron", "name",
                                                     lb_utf8text_repair(name), "entry",
                                                     lb_utf8text_repair(entry)));
                free(entry);
            } else
                fprintf(f, "cron     %-20s %.*s\n", name, (int)ln, line);
        }
        p = nl ? nl + 1 : p + n;
    }
    free(text);
    char dir[4096];
    DIR *dp = lb_schedule_unit_dir(dir, sizeof dir, false, NULL) == LB_OK ? opendir(dir) : NULL;
    for (struct dirent *de; dp && (de = readdir(dp)) != NULL;) {
        size_t len = strlen(de->d_name);
        if (strncmp(de->d_name, "llmbench-", 9) != 0 || len < 15 ||
            strcmp(de->d_name + len - 6, ".timer") != 0)
            continue;
        char name[256], path[4400], *unit = NULL, calendar[128] = "?";
        snprintf(name, sizeof name, "%.*s", (int)(len - 15), de->d_name + 9);
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        size_t n = 0;
        if (lb_file_read(path, &unit, &n, NULL) == LB_OK) {
            const char *c = strstr(unit, "OnCalendar=");
            if (c) snprintf(calendar, sizeof calendar, "%.*s", (int)strcspn(c + 11, "\n"), c + 11);
            free(unit);
        }
        if (arr)
            json_array_append_new(arr, json_pack("{s:s, s:s, s:s}", "backend", "systemd", "name",
                                                 lb_utf8text_repair(name), "entry",
                                                 lb_utf8text_repair(calendar)));
        else
            fprintf(f, "systemd  %-20s OnCalendar=%s\n", name, calendar);
    }
    if (dp) closedir(dp);
    if (arr) {
        json_dumpf(arr, f, JSON_INDENT(2));
        fputc('\n', f);
        json_decref(arr);
    }
    return LB_OK;
}

void lb_schedule_print_cronjob(FILE *f, const lb_schedule_entry *e) {
    char cron_days[64] = "*", sd[64], thr[32], object[96];
    days_fields(e->days, cron_days, sizeof cron_days, sd, sizeof sd, NULL);
    lb_schedule_entry k = *e;
    k.exe = "llmbench";
    k.db_path = "/data/results.db";
    const char *w[LB_SCHEDULE_MAX_ARGS + 16];
    size_t n = job_words(&k, w, thr, sizeof thr);
    snprintf(object, sizeof object, "llmbench-%s", e->name);
    fprintf(f,
            "# llmbench schedule add %s --backend kubernetes: a CronJob (kubectl apply -f FILE)\n"
            "apiVersion: batch/v1\nkind: CronJob\nmetadata:\n  name: ",
            e->name);
    yaml_quote(f, object);
    fputs("\n  labels: {app: llmbench, llmbench-schedule: ", f);
    yaml_quote(f, e->name);
    fprintf(f,
            "}\nspec:\n  schedule: \"%d %d * * %s\"\n  timeZone: \"Etc/UTC\"\n"
            "  concurrencyPolicy: Forbid\n  successfulJobsHistoryLimit: 7\n"
            "  failedJobsHistoryLimit: 7\n  jobTemplate:\n    spec:\n      backoffLimit: 0\n"
            "      template:\n        metadata:\n          labels: {app: llmbench, "
            "llmbench-schedule: ",
            e->minute, e->hour, cron_days);
    yaml_quote(f, e->name);
    fputs("}\n        spec:\n          restartPolicy: Never\n          containers:\n"
          "            - name: llmbench\n              image: ",
          f);
    yaml_quote(f, e->image);
    fputs("\n              command:\n", f);
    for (size_t i = 0; i < n; i++) {
        fputs("                - ", f);
        yaml_quote(f, w[i]);
        fputc('\n', f);
    }
    fprintf(f,
            "              env:\n                - {name: LLMBENCH_DB, value: /data/results.db}\n"
            "              resources:\n                limits: {nvidia.com/gpu: %d}\n"
            "              volumeMounts:\n                - {name: results, mountPath: /data}\n"
            "          volumes:\n            - name: results\n"
            "              persistentVolumeClaim: {claimName: ",
            e->gpus);
    yaml_quote(f, e->pvc);
    fputs("}\n", f);
}
