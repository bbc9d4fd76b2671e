/* sweep.c: checking, running, resuming and aggregating a matrix (sweep.h). */
#include "sweep/sweep.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/file.h"
#include "core/proc.h"
#include "core/signals.h"
#include "core/stats.h"
#include "core/utf8text.h"
#include "history/bench.h"

/* The most bytes of a cell's label a one-line message shows: the rest of the sentence (the
 * repeat, the command's reason) must still fit the error buffer. */
#define SHOWN_LABEL_BYTES 160

/* printf arguments "%.*s%s" of a label in a message: cut between characters, with "..." */
#define SHOWN_LABEL(label)                                                                         \
    (int)lb_utf8text_cut_len(label, SHOWN_LABEL_BYTES), label,                                     \
        strlen(label) > SHOWN_LABEL_BYTES ? "..." : ""

lb_sweep_params lb_sweep_default_params(void) {
    return (lb_sweep_params){.exe = NULL,
                             .db_path = NULL,
                             .check_env = NULL,
                             .check_inputs_env = NULL,
                             .log_path = "/dev/null",
                             .progress = true};
}

/* The last line of the child's stderr without "llmbench CMD: " and the " (see ...)" tail,
 * cut between characters and made UTF-8: it goes into the sweep's JSON (a failure's reason),
 * which holds no other text. */
static void child_sentence(const char *log_path, const char *command, char *out, size_t cap) {
    /* the last non-empty line: the command's final word on why it stopped */
    char text[LB_ERR_MSG_BYTES];
    lb_file_last_line(log_path, text, sizeof text);
    char *line = text, prefix[64];
    snprintf(prefix, sizeof prefix, "llmbench %s: ", command);
    if (strncmp(line, prefix, strlen(prefix)) == 0) line += strlen(prefix);
    char *see = strstr(line, " (see 'llmbench");
    if (see) *see = '\0';
    snprintf(out, cap, "%.*s", (int)lb_utf8text_cut_len(line, cap - 1), line);
    lb_utf8text_repair(out);
}

/* The cell's whole label: a new string the caller frees, NULL when out of memory. */
static char *cell_label(const lb_sweep_matrix *m, size_t cell) {
    size_t bytes = lb_sweep_cell_label(m, cell, NULL, 0) + 1;
    char *label = malloc(bytes);
    if (label != NULL) lb_sweep_cell_label(m, cell, label, bytes);
    return label;
}

lb_status lb_sweep_lock(const lb_sweep_matrix *m, const char *db_path, int *fd, lb_err *err) {
    *fd = -1;
    LB_TRY(lb_store_check_path(db_path, err));
    size_t bytes = strlen(db_path) + strlen(m->name) + sizeof ".sweep-.lock";
    char *path = malloc(bytes);
    if (path == NULL) return lb_fail(err, LB_ERR_NOMEM, "no memory for the sweep's lock");
    snprintf(path, bytes, "%s.sweep-%s.lock", db_path, m->name);
    /* inherited by the cells: a cell outliving a killed sweep holds it until it ends */
    int lock = open(path, O_RDWR | O_CREAT, 0644);
    lb_status st = LB_OK;
    if (lock < 0)
        st = lb_fail(err, LB_ERR_IO, "cannot open the lock %s: %s", path, strerror(errno));
    else if (flock(lock, LOCK_EX | LOCK_NB) != 0) {
        st = errno == EWOULDBLOCK
                 ? lb_fail(err, LB_ERR_RUNTIME,
                           "sweep '%s' is already running on %s (another process holds %s): "
                           "wait for it to end, then run this again to resume",
                           m->name, db_path, path)
                 : lb_fail(err, LB_ERR_IO, "cannot lock %s: %s", path, strerror(errno));
        close(lock);
    } else {
        *fd = lock;
    }
    free(path);
    return st;
}

void lb_sweep_unlock(int fd) {
    if (fd >= 0) close(fd);
}

static lb_status check_value(const lb_sweep_matrix *m, const lb_sweep_params *p,
                             const char *section, const lb_sweep_key *k, const lb_sweep_value *v,
                             lb_err *err) {
    const char *argv[6] = {p->exe, m->command, k->flag, NULL, NULL, NULL};
    if (v->kind == LB_SWEEP_VALUE_TEXT) argv[3] = v->text;
    const char *env[] = {p->check_env, NULL};
    lb_proc_spec spec = {
        .argv = argv, .env = env, .stdout_path = "/dev/null", .stderr_path = p->log_path};
    int code = 0;
    LB_TRY(lb_proc_run(&spec, &code, err));
    if (lb_signals_interrupted())
        return lb_fail(err, LB_ERR_INTERRUPTED, "interrupted while checking %s", m->path);
    if (code == 0) return LB_OK;
    char why[LB_ERR_MSG_BYTES];
    child_sentence(p->log_path, m->command, why, sizeof why);
    return lb_fail(err, code == 2 ? LB_ERR_USAGE : LB_ERR_RUNTIME, "%s:%d: key '%s.%s': %s",
                   m->path, v->line, section, k->key,
                   why[0] ? why : "refused by the command (exit code without a message)");
}

/* A cell's command line: the program, the command, the cell's options, --db PATH. The
 * caller frees *argv and *cell_argv (which *argv points into). */
static lb_status cell_command(const lb_sweep_matrix *m, const lb_sweep_params *p, size_t cell,
                              const char ***argv, char ***cell_argv, lb_err *err) {
    size_t cell_argc = 0;
    LB_TRY(lb_sweep_cell_args(m, cell, cell_argv, &cell_argc, err));
    const char **a = calloc(cell_argc + 5, sizeof *a);
    if (a == NULL) {
        free(*cell_argv);
        *cell_argv = NULL;
        return lb_fail(err, LB_ERR_NOMEM, "no memory to start a cell");
    }
    size_t n = 0;
    a[n++] = p->exe;
    a[n++] = m->command;
    for (size_t i = 0; i < cell_argc; i++)
        a[n++] = (*cell_argv)[i];
    a[n++] = "--db";
    a[n++] = p->db_path;
    a[n] = NULL;
    *argv = a;
    return LB_OK;
}

/* Offers a cell's whole command line to the command in input-checking mode. */
static lb_status check_cell(const lb_sweep_matrix *m, const lb_sweep_params *p, size_t cell,
                            lb_err *err) {
    const char **argv = NULL;
    char **cell_argv = NULL;
    LB_TRY(cell_command(m, p, cell, &argv, &cell_argv, err));
    const char *env[] = {p->check_inputs_env, NULL};
    lb_proc_spec spec = {
        .argv = argv, .env = env, .stdout_path = "/dev/null", .stderr_path = p->log_path};
    int code = 0;
    lb_status st = lb_proc_run(&spec, &code, err);
    free(argv);
    free(cell_argv);
    LB_TRY(st);
    if (lb_signals_interrupted())
        return lb_fail(err, LB_ERR_INTERRUPTED, "interrupted while checking %s", m->path);
    if (code == 0) return LB_OK;
    char why[LB_ERR_MSG_BYTES], *label = cell_label(m, cell);
    if (label == NULL) return lb_fail(err, LB_ERR_NOMEM, "no memory for a cell's label");
    child_sentence(p->log_path, m->command, why, sizeof why);
    st = lb_fail(err, code == 2 ? LB_ERR_USAGE : LB_ERR_RUNTIME, "%s: cell %.*s%s: %s", m->path,
                 SHOWN_LABEL(label),
                 why[0] ? why : "refused by the command (exit code without a message)");
    free(label);
    return st;
}

lb_status lb_sweep_check(const lb_sweep_matrix *m, const lb_sweep_params *p, lb_err *err) {
    for (size_t o = 0; o < m->n_options; o++)
        for (size_t v = 0; v < m->options[o].n_values; v++)
            LB_TRY(check_value(m, p, "options", &m->options[o], &m->options[o].values[v], err));
    for (size_t a = 0; a < m->n_axes; a++)
        for (size_t v = 0; v < m->axes[a].n_values; v++)
            LB_TRY(check_value(m, p, "axes", &m->axes[a], &m->axes[a].values[v], err));
    for (size_t cell = 0; p->check_inputs_env != NULL && cell < m->n_cells; cell++)
        LB_TRY(check_cell(m, p, cell, err));
    return LB_OK;
}

static void run_tag(const lb_sweep_matrix *m, size_t cell, int64_t repeat, char *out, size_t cap) {
    snprintf(out, cap, "sweep-run:%s/%016" PRIx64 "/r%" PRId64, m->name,
             lb_sweep_cell_fingerprint(m, cell), repeat);
}

/* The id of the newest run in the store, 0 when it holds none. Run ids are autoincrement
 * (docs/STORE.md): a run begun later, by any process, has a larger one, whatever the clock
 * does meanwhile. */
static lb_status last_run_id(lb_store *store, int64_t *id, lb_err *err) {
    lb_store_filter f = lb_store_default_filter();
    f.limit = 1;
    lb_store_run_info *list = NULL;
    size_t n = 0;
    LB_TRY(lb_store_list(store, &f, &list, &n, err));
    *id = n > 0 ? list[0].id : 0;
    free(list);
    return LB_OK;
}

/* The newest run carrying tag (status -1: any) if it was begun after run after_id (0: any
 * run), or id -1. */
static lb_status newest_tagged(lb_store *store, const char *tag, int status, int64_t after_id,
                               lb_store_run_info *info, lb_err *err) {
    lb_store_filter f = lb_store_default_filter();
    f.tag = tag;
    f.status = status;
    f.limit = 1;
    lb_store_run_info *list = NULL;
    size_t n = 0;
    LB_TRY(lb_store_list(store, &f, &list, &n, err));
    info->id = -1;
    if (n > 0 && list[0].id > after_id) {
        *info = list[0];
        info->tags = NULL; /* the text lives in the list's block, freed next */
    }
    free(list);
    return LB_OK;
}

/* Runs one cell x repeat; *ok false with reason when it failed. Only a run begun after the
 * child started is its own: one that stores nothing (refused, killed, no database) is
 * failed with its last line or exit code, never credited with an earlier attempt's run. */
static lb_status run_one(const lb_sweep_matrix *m, const lb_sweep_params *p, lb_store *store,
                         size_t cell, int64_t repeat, const char *label, const char *tag,
                         lb_store_run_info *info, bool *ok, char *reason, size_t reason_cap,
                         lb_err *err) {
    /* the sweep's own tags (a schedule's) go on to its cells, after the sweep's three */
    const char *inherited = p->tags_env ? getenv(p->tags_env) : NULL;
    if (inherited == NULL) inherited = "";
    size_t bytes = strlen(p->tags_env) + strlen(m->name) + strlen(label) + strlen(tag) +
                   strlen(inherited) + sizeof "=sweep:\nsweep-cell:\n\n";
    char *tags = malloc(bytes);
    if (tags == NULL) return lb_fail(err, LB_ERR_NOMEM, "no memory for the tags of a cell");
    snprintf(tags, bytes, "%s=sweep:%s\nsweep-cell:%s\n%s%s%s", p->tags_env, m->name, label, tag,
             inherited[0] ? "\n" : "", inherited);
    int64_t before = 0;
    const char **argv = NULL;
    char **cell_argv = NULL;
    lb_status st = last_run_id(store, &before, err);
    if (st == LB_OK) st = cell_command(m, p, cell, &argv, &cell_argv, err);
    const char *env[] = {tags, NULL};
    lb_proc_spec spec = {
        .argv = argv, .env = env, .stdout_path = "/dev/null", .stderr_path = p->log_path};
    int code = 0;
    lb_err why = {{0}};
    bool tried = st == LB_OK;
    if (tried && (st = lb_proc_run(&spec, &code, &why)) != LB_OK && st != LB_ERR_RUNTIME)
        lb_fail(err, st, "%s", why.msg);
    free(argv);
    free(cell_argv);
    free(tags);
    /* a process that does not start (its arguments or tags past the system's limits) fails
     * its cell alone, as one that stops does */
    if (tried && st == LB_ERR_RUNTIME) {
        *ok = false;
        snprintf(reason, reason_cap, "%.*s", (int)lb_utf8text_cut_len(why.msg, reason_cap - 1),
                 why.msg);
        lb_utf8text_repair(reason);
        return lb_signals_interrupted() ? LB_ERR_INTERRUPTED : LB_OK;
    }
    LB_TRY(st);
    LB_TRY(newest_tagged(store, tag, -1, before, info, err));
    /* exit 3: completed and stored ok, but its MLPerf-style verdict is INVALID */
    *ok = (code == 0 || code == 3) && info->id >= 0 && info->status == LB_RUN_OK;
    if (code == 130 || lb_signals_interrupted()) return LB_ERR_INTERRUPTED;
    if (*ok) return LB_OK;
    if (info->id >= 0 && info->failure[0])
        snprintf(reason, reason_cap, "%.*s",
                 (int)lb_utf8text_cut_len(info->failure, reason_cap - 1), info->failure);
    else
        child_sentence(p->log_path, m->command, reason, reason_cap);
    if (reason[0] == '\0')
        snprintf(reason, reason_cap, "exit code %d%s", code,
                 info->id >= 0 ? "" : " without a stored run");
    return LB_OK;
}

lb_status lb_sweep_plan(const lb_sweep_matrix *m, lb_store *store, json_t **out, lb_err *err) {
    *out = json_array();
    if (*out == NULL) return lb_fail(err, LB_ERR_NOMEM, "no memory for the plan");
    for (size_t cell = 0; cell < m->n_cells; cell++) {
        char *label = cell_label(m, cell), **argv = NULL;
        size_t argc = 0;
        lb_status st = label ? lb_sweep_cell_args(m, cell, &argv, &argc, err)
                             : lb_fail(err, LB_ERR_NOMEM, "no memory for a cell's label");
        json_t *args = json_array();
        for (size_t i = 0; st == LB_OK && i < argc; i++)
            json_array_append_new(args, json_string(argv[i]));
        free(argv);
        for (int64_t r = 1; st == LB_OK && r <= m->repeats; r++) {
            char tag[320];
            run_tag(m, cell, r, tag, sizeof tag);
            lb_store_run_info info = {.id = -1};
            if (store != NULL) st = newest_tagged(store, tag, LB_RUN_OK, 0, &info, err);
            if (st == LB_OK)
                json_array_append_new(
                    *out,
                    json_pack("{s:I, s:s, s:I, s:o, s:O}", "cell", (json_int_t)cell, "label", label,
                              "repeat", (json_int_t)r, "run",
                              info.id >= 0 ? json_integer(info.id) : json_null(), "args", args));
        }
        json_decref(args);
        free(label);
        if (st != LB_OK) {
            json_decref(*out);
            *out = NULL;
            return st;
        }
    }
    return LB_OK;
}

lb_status lb_sweep_run(const lb_sweep_matrix *m, const lb_sweep_params *p, lb_store *store,
                       lb_result *agg, lb_err *err) {
    json_t *failures = json_array();
    if (failures == NULL) return lb_fail(err, LB_ERR_NOMEM, "no memory for the sweep");
    size_t total = m->n_cells * (size_t)m->repeats, k = 0;
    int64_t before = 0; /* --again: the table holds the runs begun after this one */
    /* a round of --again is not resumed: run again, --again starts every cell anew */
    const char *resume = p->again ? "run it again without --again to finish with the runs "
                                    "stored (with --again every cell runs anew)"
                                  : "run the same command again to resume";
    lb_status st = last_run_id(store, &before, err);
    for (size_t cell = 0; cell < m->n_cells && st == LB_OK; cell++) {
        char *label = cell_label(m, cell);
        if (label == NULL) st = lb_fail(err, LB_ERR_NOMEM, "no memory for a cell's label");
        for (int64_t r = 1; r <= m->repeats && st == LB_OK; r++) {
            k++;
            char tag[320];
            run_tag(m, cell, r, tag, sizeof tag);
            lb_store_run_info info = {.id = -1};
            if (!p->again && (st = newest_tagged(store, tag, LB_RUN_OK, 0, &info, err)) != LB_OK)
                break;
            if (info.id >= 0) {
                if (p->progress)
                    fprintf(stderr,
                            "sweep %s [%zu/%zu] %s repeat %" PRId64
                            ": stored before as run %" PRId64 "\n",
                            m->name, k, total, label, r, info.id);
                continue;
            }
            if (lb_signals_interrupted()) {
                st = lb_fail(err, LB_ERR_INTERRUPTED,
                             "interrupted before cell %.*s%s repeat %" PRId64 "; %s",
                             SHOWN_LABEL(label), r, resume);
                break;
            }
            if (p->progress)
                fprintf(stderr, "sweep %s [%zu/%zu] %s repeat %" PRId64 "/%" PRId64 ": running\n",
                        m->name, k, total, label, r, m->repeats);
            double t0 = lb_clock_wall_s();
            bool ok = false;
            char reason[LB_ERR_MSG_BYTES] = "";
            st = run_one(m, p, store, cell, r, label, tag, &info, &ok, reason, sizeof reason, err);
            if (st == LB_ERR_INTERRUPTED)
                lb_fail(err, st, "interrupted at cell %.*s%s repeat %" PRId64 "; %s",
                        SHOWN_LABEL(label), r, resume);
            if (st != LB_OK) break;
            if (p->progress) {
                char stored[48] = "no run stored";
                if (info.id >= 0) snprintf(stored, sizeof stored, "run %" PRId64, info.id);
                fprintf(stderr, "sweep %s [%zu/%zu] %s repeat %" PRId64 ": %s %s (%.1f s)%s%s\n",
                        m->name, k, total, label, r, ok ? "ok," : "FAILED,", stored,
                        lb_clock_wall_s() - t0, ok ? "" : ": ", ok ? "" : reason);
            }
            if (!ok)
                json_array_append_new(failures,
                                      json_pack("{s:I, s:I, s:o, s:s}", "cell", (json_int_t)cell,
                                                "repeat", (json_int_t)r, "run",
                                                info.id >= 0 ? json_integer(info.id) : json_null(),
                                                "reason", reason));
        }
        free(label);
    }
    if (st == LB_OK) st = lb_sweep_aggregate(m, store, p->again ? before : 0, failures, agg, err);
    json_decref(failures);
    if (st == LB_OK && agg->status != LB_RUN_OK)
        st = lb_fail(err, LB_ERR_RUNTIME, "%s", agg->failure);
    return st;
}

static json_t *keys_json(const lb_sweep_key *keys, size_t n) {
    json_t *o = json_object();
    for (size_t i = 0; i < n; i++) {
        json_t *vals = json_array();
        for (size_t v = 0; v < keys[i].n_values; v++)
            json_array_append_new(vals, json_string(keys[i].values[v].text));
        json_object_set_new(o, keys[i].key, vals);
    }
    return o;
}

/* Adds c<K>/<metric>/<stat> for each key metric over the cell's runs. */
static lb_status add_cell_stats(lb_result *agg, size_t cell, lb_result *const *runs, size_t n_runs,
                                const char *kind) {
    size_t n_keys = 0;
    const lb_key_metric *keys = lb_bench_key_metrics(kind, &n_keys);
    double *v = malloc((n_runs ? n_runs : 1) * sizeof *v);
    if (v == NULL) return LB_ERR_NOMEM;
    for (size_t k = 0; k < n_keys; k++) {
        size_t n = 0;
        const char *unit = "";
        for (size_t i = 0; i < n_runs; i++) {
            double x = lb_result_metric(runs[i], keys[k].metric);
            if (isnan(x)) continue;
            v[n++] = x;
            for (size_t j = 0; j < runs[i]->n_metrics; j++)
                if (strcmp(runs[i]->metrics[j].name, keys[k].metric) == 0)
                    unit = runs[i]->metrics[j].unit;
        }
        if (n == 0) continue;
        lb_stats_summary s = lb_stats_summarize(v, n);
        const struct {
            const char *stat;
            double value;
        } stats[] = {{"median", s.median}, {"std", s.std}, {"min", s.min}, {"max", s.max}};
        char name[LB_NAME_BYTES];
        for (size_t j = 0; j < sizeof stats / sizeof stats[0]; j++) {
            snprintf(name, sizeof name, "c%zu/%s/%s", cell, keys[k].metric, stats[j].stat);
            lb_status st = lb_result_set_metric(agg, name, stats[j].value, unit);
            if (st != LB_OK) {
                free(v);
                return st;
            }
        }
        snprintf(name, sizeof name, "c%zu/%s/n", cell, keys[k].metric);
        lb_status st = lb_result_set_metric(agg, name, (double)n, "runs");
        if (st != LB_OK) {
            free(v);
            return st;
        }
    }
    free(v);
    return LB_OK;
}

lb_status lb_sweep_aggregate(const lb_sweep_matrix *m, lb_store *store, int64_t after_id,
                             json_t *failures, lb_result *agg, lb_err *err) {
    lb_result **runs = calloc((size_t)m->repeats, sizeof *runs);
    if (runs == NULL) return lb_fail(err, LB_ERR_NOMEM, "no memory for the sweep's table");
    char sweep_tag[160];
    snprintf(sweep_tag, sizeof sweep_tag, "sweep:%s", m->name);
    json_array_append_new(agg->tags, json_string(sweep_tag));
    json_t *cells = json_array();
    json_object_set_new(agg->config, "file", json_string(m->path));
    json_object_set_new(agg->config, "command", json_string(m->command));
    json_object_set_new(agg->config, "repeats", json_integer(m->repeats));
    json_object_set_new(agg->config, "options", keys_json(m->options, m->n_options));
    json_object_set_new(agg->config, "axes", keys_json(m->axes, m->n_axes));
    json_object_set_new(agg->config, "cells", cells);
    size_t missing = 0;
    lb_status st = LB_OK;
    size_t idx[LB_SWEEP_MAX_AXES];
    for (size_t cell = 0; cell < m->n_cells && st == LB_OK; cell++) {
        char fp[17], *label = cell_label(m, cell);
        if (label == NULL) {
            st = lb_fail(err, LB_ERR_NOMEM, "no memory for a cell's label");
            break;
        }
        snprintf(fp, sizeof fp, "%016" PRIx64, lb_sweep_cell_fingerprint(m, cell));
        json_t *axes = json_object(), *ids = json_array(), *failed = json_array();
        lb_sweep_cell_index(m, cell, idx);
        for (size_t a = 0; a < m->n_axes; a++)
            json_object_set_new(axes, m->axes[a].key, json_string(m->axes[a].values[idx[a]].text));
        size_t n_runs = 0;
        for (int64_t r = 1; r <= m->repeats && st == LB_OK; r++) {
            char tag[320];
            run_tag(m, cell, r, tag, sizeof tag);
            lb_store_run_info info;
            if ((st = newest_tagged(store, tag, LB_RUN_OK, after_id, &info, err)) != LB_OK) break;
            if (info.id < 0) {
                missing++;
                continue;
            }
            if ((st = lb_store_run_load(store, info.id, &runs[n_runs], err)) != LB_OK) break;
            n_runs++;
            json_array_append_new(ids, json_integer(info.id));
        }
        size_t i;
        json_t *f;
        json_array_foreach(failures, i, f) {
            if ((size_t)json_integer_value(json_object_get(f, "cell")) == cell)
                json_array_append(failed, f);
        }
        json_array_append_new(cells, json_pack("{s:I, s:s, s:s, s:o, s:o, s:o}", "cell",
                                               (json_int_t)cell, "label", label, "fingerprint", fp,
                                               "axes", axes, "runs", ids, "failed", failed));
        free(label);
        if (st == LB_OK && add_cell_stats(agg, cell, runs, n_runs, m->command) != LB_OK)
            st = lb_fail(err, LB_ERR_NOMEM, "no memory for the sweep's table");
        for (size_t j = 0; j < n_runs; j++) {
            lb_result_free(runs[j]);
            runs[j] = NULL;
        }
    }
    free(runs);
    if (st != LB_OK) return st;
    size_t total = m->n_cells * (size_t)m->repeats;
    agg->status = missing == 0 ? LB_RUN_OK : LB_RUN_FAILED;
    if (missing > 0)
        snprintf(agg->failure, sizeof agg->failure,
                 "%zu of %zu cell runs have no ok run stored (%zu failed in this sweep)", missing,
                 total, json_array_size(failures));
    return LB_OK;
}
