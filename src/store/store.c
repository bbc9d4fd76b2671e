/* store.c: the SQLite results database behind store.h.
 *
 * Design: a run row is inserted as `running` when work starts and completed by one
 * BEGIN IMMEDIATE transaction when it ends, so a reader sees either the begun run or the
 * whole finished one. Raw samples go into a WITHOUT ROWID table keyed (run, series number,
 * index) through one prepared statement, which keeps a million samples to about a second;
 * series names live once in the series table. Durability is chosen over speed
 * (synchronous=FULL): a run commits twice, so the fsyncs cost nothing measurable. The
 * schema grows only by appending to `migrations`; each step runs in its own transaction
 * together with its user_version bump. Not here: metric computation, redaction, printing. */
#include "store/store.h"

#include <errno.h>
#include <math.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/file.h"
#include "core/signals.h"
#include "core/utf8text.h"
#include "core/version.h"

struct lb_store {
    sqlite3 *db;
    char path[LB_STORE_PATH_BYTES];
    double write_wait_s;   /* how long a run's final write waits for the lock, seconds */
    int busy_timeout_ms;   /* how long one statement waits for a lock, milliseconds */
    int64_t busy_since_ns; /* when the statement now waiting began to wait (lb_clock_now_ns) */
    bool stop_at_signal;   /* the write under way stops waiting at SIGINT/SIGTERM */
};

#define BUSY_TIMEOUT_MS    10000
#define DEFAULT_WRITE_WAIT 120.0 /* seconds; LLMBENCH_DB_WAIT_S overrides */

/* migrations[v] upgrades schema version v to v + 1. Append only; never edit a shipped
 * step. Times are seconds since the epoch; JSON columns hold compact JSON text. */
static const char *const migrations[] = {
    /* 0 -> 1: runs, their metrics, series and raw samples. */
    "CREATE TABLE runs ("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  kind TEXT NOT NULL,"
    "  name TEXT NOT NULL,"
    "  tags TEXT NOT NULL DEFAULT '[]',"
    "  start_wall_s REAL NOT NULL,"
    "  end_wall_s REAL,"
    "  status TEXT NOT NULL CHECK (status IN ('running', 'ok', 'failed', 'interrupted')),"
    "  failure TEXT NOT NULL DEFAULT '',"
    "  config TEXT NOT NULL DEFAULT '{}',"
    "  provenance TEXT NOT NULL DEFAULT '{}');"
    "CREATE INDEX runs_by_kind ON runs (kind, id);"
    "CREATE INDEX runs_by_status ON runs (status, id);"
    "CREATE TABLE metrics ("
    "  run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,"
    "  name TEXT NOT NULL,"
    "  value REAL,"
    "  unit TEXT NOT NULL DEFAULT '',"
    "  UNIQUE (run_id, name));"
    "CREATE TABLE series ("
    "  run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,"
    "  series_no INTEGER NOT NULL,"
    "  name TEXT NOT NULL,"
    "  unit TEXT NOT NULL DEFAULT '',"
    "  n INTEGER NOT NULL,"
    "  PRIMARY KEY (run_id, series_no),"
    "  UNIQUE (run_id, name));"
    "CREATE TABLE samples ("
    "  run_id INTEGER NOT NULL,"
    "  series_no INTEGER NOT NULL,"
    "  idx INTEGER NOT NULL,"
    "  value REAL,"
    "  PRIMARY KEY (run_id, series_no, idx),"
    "  FOREIGN KEY (run_id, series_no) REFERENCES series (run_id, series_no) ON DELETE CASCADE"
    ") WITHOUT ROWID;",
};
_Static_assert(sizeof migrations / sizeof migrations[0] == LB_STORE_SCHEMA_VERSION,
               "one migration per schema version");

/* ---- errors and small helpers ---- */

static lb_status db_fail(const lb_store *s, lb_err *err, const char *what) {
    return lb_fail(err, LB_ERR_DB, "results database %s: %s: %s", s->path, what,
                   sqlite3_errmsg(s->db));
}

static lb_status exec(lb_store *s, const char *sql, lb_err *err) {
    char *msg = NULL;
    if (sqlite3_exec(s->db, sql, NULL, NULL, &msg) == SQLITE_OK) return LB_OK;
    lb_status st = lb_fail(err, LB_ERR_DB, "results database %s: %s", s->path,
                           msg ? msg : sqlite3_errmsg(s->db));
    sqlite3_free(msg);
    return st;
}

static lb_status prepare(lb_store *s, const char *sql, sqlite3_stmt **stmt, lb_err *err) {
    if (sqlite3_prepare_v2(s->db, sql, -1, stmt, NULL) == SQLITE_OK) return LB_OK;
    *stmt = NULL;
    return db_fail(s, err, "cannot prepare a statement");
}

static void rollback(lb_store *s) {
    sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
}

/* NaN has no SQL form: it is stored as NULL and read back as NaN. */
static void bind_real(sqlite3_stmt *st, int col, double v) {
    if (isnan(v))
        sqlite3_bind_null(st, col);
    else
        sqlite3_bind_double(st, col, v);
}

static double column_real(sqlite3_stmt *st, int col) {
    return sqlite3_column_type(st, col) == SQLITE_NULL ? NAN : sqlite3_column_double(st, col);
}

static const char *column_text(sqlite3_stmt *st, int col) {
    const unsigned char *t = sqlite3_column_text(st, col);
    return t ? (const char *)t : "";
}

static void copy_text(char *dst, size_t cap, const char *src) {
    size_t n = strlen(src);
    if (n >= cap) n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

/* The JSON columns of a run, as compact text (malloc'd; run_json_free frees them). */
typedef struct {
    char *tags, *config, *provenance;
} run_json;

static void run_json_free(run_json *j) {
    free(j->tags);
    free(j->config);
    free(j->provenance);
}

/* A NULL member is encoded as an empty array or object. */
static lb_status run_json_encode(const lb_result *r, run_json *j, lb_err *err) {
    j->tags = r->tags ? json_dumps(r->tags, JSON_COMPACT) : strdup("[]");
    j->config = r->config ? json_dumps(r->config, JSON_COMPACT) : strdup("{}");
    j->provenance = r->provenance ? json_dumps(r->provenance, JSON_COMPACT) : strdup("{}");
    if (j->tags && j->config && j->provenance) return LB_OK;
    run_json_free(j);
    return lb_fail(err, LB_ERR_NOMEM, "no memory to encode run '%s'", r->name);
}

/* ---- path and opening ---- */

static lb_status format_path(char *out, size_t out_bytes, lb_err *err, const char *a,
                             const char *b) {
    int n = snprintf(out, out_bytes, "%s%s", a, b);
    if (n < 0 || (size_t)n >= out_bytes)
        return lb_fail(err, LB_ERR_USAGE, "results database path '%s%s' is too long", a, b);
    return LB_OK;
}

static const char *nonempty_env(const char *name) {
    const char *v = getenv(name);
    return v && v[0] ? v : NULL;
}

lb_status lb_store_resolve_path(const char *path_or_null, char *out, size_t out_bytes,
                                lb_err *err) {
    if (path_or_null && path_or_null[0]) return format_path(out, out_bytes, err, path_or_null, "");
    const char *env = nonempty_env("LLMBENCH_DB");
    if (env) return format_path(out, out_bytes, err, env, "");
    /* The XDG base directory spec ignores a relative XDG_DATA_HOME. */
    const char *xdg = nonempty_env("XDG_DATA_HOME");
    if (xdg && xdg[0] == '/') return format_path(out, out_bytes, err, xdg, "/llmbench/results.db");
    const char *home = nonempty_env("HOME");
    if (home) return format_path(out, out_bytes, err, home, "/.local/share/llmbench/results.db");
    return lb_fail(err, LB_ERR_USAGE,
                   "no place for the results database: none of --db, LLMBENCH_DB, "
                   "XDG_DATA_HOME or HOME is set (give --db PATH)");
}

/* LLMBENCH_DB_WAIT_S when it is a number of seconds >= 0, else the default. */
static double write_wait_s(void) {
    const char *v = nonempty_env("LLMBENCH_DB_WAIT_S");
    char *end = NULL;
    double w = v ? strtod(v, &end) : NAN;
    return v && *end == '\0' && w >= 0 && w < 1e6 ? w : DEFAULT_WRITE_WAIT;
}

/* SQLite's busy handler: waits in steps of at most 10 ms for s->busy_timeout_ms, and no
 * longer once a signal arrived (core/signals.h) during a write that stops at one, so that
 * Ctrl-C ends the wait at once rather than after the timeout. */
static int busy_wait(void *ctx, int n_calls) {
    lb_store *s = ctx;
    int64_t now = lb_clock_now_ns();
    if (n_calls == 0) s->busy_since_ns = now;
    if (s->stop_at_signal && lb_signals_interrupted()) return 0;
    int64_t left_ns = (int64_t)s->busy_timeout_ms * 1000000 - (now - s->busy_since_ns);
    if (left_ns <= 0) return 0;
    int64_t step_ns = n_calls < 10 ? 1000000 : 10000000;
    nanosleep(&(struct timespec){.tv_nsec = (long)(left_ns < step_ns ? left_ns : step_ns)}, NULL);
    return 1;
}

static void set_busy_timeout(lb_store *s, int timeout_ms) {
    s->busy_timeout_ms = timeout_ms;
    sqlite3_busy_handler(s->db, busy_wait, s);
}

/* mkdir -p of the folder holding path; new folders are private (0700, as XDG asks). */
static lb_status make_parents(const char *path, lb_err *err) {
    char dir[LB_STORE_PATH_BYTES];
    copy_text(dir, sizeof dir, path);
    char *slash = strrchr(dir, '/');
    if (slash == NULL || slash == dir) return LB_OK;
    *slash = '\0';
    for (char *p = dir + 1;; p++) {
        bool end = *p == '\0';
        if (*p != '/' && !end) continue;
        *p = '\0';
        if (mkdir(dir, 0700) != 0 && errno != EEXIST)
            return lb_fail(err, LB_ERR_IO, "cannot create folder %s for the results database: %s",
                           dir, strerror(errno));
        if (end) break;
        *p = '/';
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return lb_fail(err, LB_ERR_IO, "%s is not a folder, so it cannot hold the results database",
                       dir);
    return LB_OK;
}

lb_status lb_store_check_path(const char *path_or_null, lb_err *err) {
    char path[LB_STORE_PATH_BYTES], dir[LB_STORE_PATH_BYTES];
    LB_TRY(lb_store_resolve_path(path_or_null, path, sizeof path, err));
    LB_TRY(make_parents(path, err));
    copy_text(dir, sizeof dir, path);
    char *slash = strrchr(dir, '/');
    if (slash == NULL)
        copy_text(dir, sizeof dir, ".");
    else
        slash[slash == dir ? 1 : 0] = '\0'; /* "/x" keeps "/" */
    struct stat st;
    bool exists = stat(path, &st) == 0;
    if (exists && S_ISDIR(st.st_mode))
        return lb_fail(err, LB_ERR_IO,
                       "results database %s is a folder: give --db the path of a file, such as "
                       "%s/results.db",
                       path, path);
    if (exists && !S_ISREG(st.st_mode))
        return lb_fail(err, LB_ERR_IO,
                       "results database %s is not a regular file: give --db the path of a file",
                       path);
    if (access(dir, W_OK | X_OK) != 0 || (exists && access(path, R_OK | W_OK) != 0))
        return lb_fail(err, LB_ERR_IO,
                       "cannot write the results database %s: %s (choose a writable place with "
                       "--db)",
                       path, strerror(errno));
    return LB_OK;
}

static lb_status read_user_version(lb_store *s, int *version, lb_err *err) {
    sqlite3_stmt *st;
    LB_TRY(prepare(s, "PRAGMA user_version", &st, err));
    int rc = sqlite3_step(st);
    *version = rc == SQLITE_ROW ? sqlite3_column_int(st, 0) : 0;
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW) return db_fail(s, err, "cannot read the schema version");
    return LB_OK;
}

static lb_status refuse_newer(const lb_store *s, int version, lb_err *err) {
    return lb_fail(err, LB_ERR_DB,
                   "results database %s has schema version %d: it was written by a newer "
                   "llmbench; this llmbench %s reads schema versions up to %d (upgrade "
                   "llmbench, or choose another file with --db)",
                   s->path, version, lb_version_string, LB_STORE_SCHEMA_VERSION);
}

/* LB_ERR_DB when a file of schema version 0 holds tables or indexes: it is another
 * program's SQLite database (a migration adds llmbench's tables and its version together),
 * which gets no llmbench tables and keeps its journal mode. One statement, so the version
 * and the schema are read from one snapshot while another process may be migrating. */
static lb_status refuse_foreign(lb_store *s, lb_err *err) {
    sqlite3_stmt *st;
    LB_TRY(prepare(s,
                   "SELECT user_version, (SELECT count(*) FROM sqlite_master) "
                   "FROM pragma_user_version",
                   &st, err));
    int rc = sqlite3_step(st);
    int version = rc == SQLITE_ROW ? sqlite3_column_int(st, 0) : 0;
    int64_t n_objects = rc == SQLITE_ROW ? sqlite3_column_int64(st, 1) : 0;
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW) return db_fail(s, err, "cannot read the schema");
    if (version != 0 || n_objects == 0) return LB_OK;
    return lb_fail(err, LB_ERR_DB,
                   "%s is not an llmbench results database: it is another program's SQLite "
                   "database (%lld tables and indexes, schema version 0), and llmbench writes "
                   "nothing into it (choose another file with --db)",
                   s->path, (long long)n_objects);
}

/* Brings the schema to LB_STORE_SCHEMA_VERSION, one step per transaction. The version is
 * read first without a lock: a current schema takes no write lock, so opening never waits
 * on a writer (a finish that holds the lock longer than the busy timeout would fail another
 * run's start). An older one is re-read under the write lock, so two processes opening an
 * old file migrate it once. */
static lb_status migrate(lb_store *s, lb_err *err) {
    int version;
    LB_TRY(read_user_version(s, &version, err));
    if (version == LB_STORE_SCHEMA_VERSION) return LB_OK;
    for (;;) {
        LB_TRY(exec(s, "BEGIN IMMEDIATE", err));
        lb_status st = read_user_version(s, &version, err);
        if (st == LB_OK && version > LB_STORE_SCHEMA_VERSION) st = refuse_newer(s, version, err);
        if (st != LB_OK || version == LB_STORE_SCHEMA_VERSION) {
            rollback(s);
            return st;
        }
        char bump[64];
        snprintf(bump, sizeof bump, "PRAGMA user_version = %d", version + 1);
        st = exec(s, migrations[version], err);
        if (st == LB_OK) st = exec(s, bump, err);
        if (st == LB_OK) st = exec(s, "COMMIT", err);
        if (st != LB_OK) {
            rollback(s);
            return st;
        }
    }
}

lb_status lb_store_open(const char *path_or_null, lb_store **out, lb_err *err) {
    *out = NULL;
    lb_store *s = calloc(1, sizeof *s);
    if (s == NULL) return lb_fail(err, LB_ERR_NOMEM, "no memory to open the results database");
    lb_status st = lb_store_resolve_path(path_or_null, s->path, sizeof s->path, err);
    /* A folder, or a file or folder that cannot be written (a read-only mount), is named as
     * such here; SQLite would say "unable to open database file" at the first read. */
    if (st == LB_OK) st = lb_store_check_path(s->path, err);
    if (st != LB_OK) {
        free(s);
        return st;
    }
    if (sqlite3_open_v2(s->path, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) !=
        SQLITE_OK) {
        st = db_fail(s, err, "cannot open");
        lb_store_close(s);
        return st;
    }
    sqlite3_extended_result_codes(s->db, 1);
    s->write_wait_s = write_wait_s();
    set_busy_timeout(s, s->write_wait_s * 1000 < BUSY_TIMEOUT_MS ? (int)(s->write_wait_s * 1000)
                                                                 : BUSY_TIMEOUT_MS);
    /* The version is checked before anything (WAL included) changes the file. */
    int version = 0;
    st = read_user_version(s, &version, err);
    if (st == LB_OK && version > LB_STORE_SCHEMA_VERSION) st = refuse_newer(s, version, err);
    if (st == LB_OK && version == 0) st = refuse_foreign(s, err);
    if (st == LB_OK)
        st = exec(s,
                  "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; "
                  "PRAGMA foreign_keys = ON",
                  err);
    if (st == LB_OK) st = migrate(s, err);
    if (st != LB_OK) {
        lb_store_close(s);
        return st;
    }
    *out = s;
    return LB_OK;
}

lb_status lb_store_open_read(const char *path_or_null, lb_store **out, lb_err *err) {
    *out = NULL;
    lb_store *s = calloc(1, sizeof *s);
    if (s == NULL) return lb_fail(err, LB_ERR_NOMEM, "no memory to open the results database");
    lb_status st = lb_store_resolve_path(path_or_null, s->path, sizeof s->path, err);
    struct stat sb;
    if (st == LB_OK && stat(s->path, &sb) != 0)
        st = lb_fail(err, LB_ERR_DB, "no results database at %s: %s (a run stores one there)",
                     s->path, strerror(errno));
    else if (st == LB_OK && !S_ISREG(sb.st_mode))
        st = lb_fail(err, LB_ERR_DB, "%s is not a results database file", s->path);
    if (st != LB_OK) {
        free(s);
        return st;
    }
    /* Opened for writing where it may be, only so that SQLite removes the -wal and -shm
     * files it needs when it is done (a read-only connection leaves them behind), with
     * query_only on: no statement of this connection can change the file. Where the file
     * or its folder is read-only, read-only. */
    if (sqlite3_open_v2(s->path, &s->db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK) {
        sqlite3_close(s->db);
        s->db = NULL;
        if (sqlite3_open_v2(s->path, &s->db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
            st = db_fail(s, err, "cannot open");
            lb_store_close(s);
            return st;
        }
    }
    sqlite3_extended_result_codes(s->db, 1);
    set_busy_timeout(s, BUSY_TIMEOUT_MS);
    int version = 0;
    st = exec(s, "PRAGMA query_only = 1", err);
    if (st == LB_OK) st = read_user_version(s, &version, err);
    if (st == LB_OK && version > LB_STORE_SCHEMA_VERSION) st = refuse_newer(s, version, err);
    if (st == LB_OK && version == 0)
        st = lb_fail(err, LB_ERR_DB, "%s is not an llmbench results database (schema version 0)",
                     s->path);
    else if (st == LB_OK && version < LB_STORE_SCHEMA_VERSION)
        st = lb_fail(err, LB_ERR_DB,
                     "results database %s has schema version %d: a run stored with this "
                     "llmbench upgrades it to %d, reading never does",
                     s->path, version, LB_STORE_SCHEMA_VERSION);
    if (st != LB_OK) {
        lb_store_close(s);
        return st;
    }
    *out = s;
    return LB_OK;
}

void lb_store_close(lb_store *s) {
    if (s == NULL) return;
    sqlite3_close(s->db);
    free(s);
}

const char *lb_store_path(const lb_store *s) {
    return s->path;
}

/* ---- writing ---- */

/* The INSERT of a new `running` run, inside the caller's transaction. */
static lb_status insert_run(lb_store *s, const lb_result *r, int64_t *run_id, lb_err *err) {
    run_json j;
    LB_TRY(run_json_encode(r, &j, err));
    sqlite3_stmt *st = NULL;
    lb_status status = prepare(s,
                               "INSERT INTO runs (kind, name, tags, start_wall_s, status, config, "
                               "provenance) VALUES (?, ?, ?, ?, 'running', ?, ?)",
                               &st, err);
    if (status == LB_OK) {
        sqlite3_bind_text(st, 1, r->kind, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, r->name, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 3, j.tags, -1, SQLITE_STATIC);
        sqlite3_bind_double(st, 4, r->start_wall_s > 0 ? r->start_wall_s : lb_clock_wall_s());
        sqlite3_bind_text(st, 5, j.config, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 6, j.provenance, -1, SQLITE_STATIC);
        if (sqlite3_step(st) != SQLITE_DONE)
            status = db_fail(s, err, "cannot record the start of a run");
        else
            *run_id = sqlite3_last_insert_rowid(s->db);
    }
    sqlite3_finalize(st);
    run_json_free(&j);
    return status;
}

static lb_status check_running(lb_store *s, int64_t run_id, lb_err *err) {
    sqlite3_stmt *st;
    LB_TRY(prepare(s, "SELECT status FROM runs WHERE id = ?", &st, err));
    sqlite3_bind_int64(st, 1, run_id);
    int rc = sqlite3_step(st);
    lb_status status = LB_OK;
    if (rc == SQLITE_DONE)
        status = lb_fail(err, LB_ERR_DB, "results database %s has no run %lld to finish", s->path,
                         (long long)run_id);
    else if (rc != SQLITE_ROW)
        status = db_fail(s, err, "cannot read a run");
    else if (strcmp(column_text(st, 0), "running") != 0)
        status = lb_fail(err, LB_ERR_DB, "run %lld is already finished (%s); it is not rewritten",
                         (long long)run_id, column_text(st, 0));
    sqlite3_finalize(st);
    return status;
}

static lb_status write_series(lb_store *s, int64_t run_id, const lb_result *r, lb_err *err) {
    sqlite3_stmt *head = NULL, *sample = NULL;
    lb_status status = prepare(s,
                               "INSERT INTO series (run_id, series_no, name, unit, n) "
                               "VALUES (?, ?, ?, ?, ?)",
                               &head, err);
    if (status == LB_OK)
        status =
            prepare(s, "INSERT INTO samples (run_id, series_no, idx, value) VALUES (?, ?, ?, ?)",
                    &sample, err);
    for (size_t i = 0; status == LB_OK && i < r->n_series; i++) {
        const lb_series *ser = &r->series[i];
        sqlite3_bind_int64(head, 1, run_id);
        sqlite3_bind_int64(head, 2, (int64_t)i);
        sqlite3_bind_text(head, 3, ser->name, -1, SQLITE_STATIC);
        sqlite3_bind_text(head, 4, ser->unit, -1, SQLITE_STATIC);
        sqlite3_bind_int64(head, 5, (int64_t)ser->n);
        if (sqlite3_step(head) != SQLITE_DONE) status = db_fail(s, err, "cannot write a series");
        sqlite3_reset(head);
        sqlite3_bind_int64(sample, 1, run_id);
        sqlite3_bind_int64(sample, 2, (int64_t)i);
        for (size_t k = 0; status == LB_OK && k < ser->n; k++) {
            sqlite3_bind_int64(sample, 3, (int64_t)k);
            bind_real(sample, 4, ser->values[k]);
            if (sqlite3_step(sample) != SQLITE_DONE)
                status = db_fail(s, err, "cannot write a sample");
            sqlite3_reset(sample);
        }
    }
    sqlite3_finalize(head);
    sqlite3_finalize(sample);
    return status;
}

static lb_status write_metrics(lb_store *s, int64_t run_id, const lb_result *r, lb_err *err) {
    sqlite3_stmt *st;
    LB_TRY(prepare(s, "INSERT INTO metrics (run_id, name, value, unit) VALUES (?, ?, ?, ?)", &st,
                   err));
    lb_status status = LB_OK;
    for (size_t i = 0; status == LB_OK && i < r->n_metrics; i++) {
        sqlite3_bind_int64(st, 1, run_id);
        sqlite3_bind_text(st, 2, r->metrics[i].name, -1, SQLITE_STATIC);
        bind_real(st, 3, r->metrics[i].value);
        sqlite3_bind_text(st, 4, r->metrics[i].unit, -1, SQLITE_STATIC);
        if (sqlite3_step(st) != SQLITE_DONE) status = db_fail(s, err, "cannot write a metric");
        sqlite3_reset(st);
    }
    sqlite3_finalize(st);
    return status;
}

static lb_status write_outcome(lb_store *s, int64_t run_id, const lb_result *r, lb_err *err) {
    run_json j;
    LB_TRY(run_json_encode(r, &j, err));
    sqlite3_stmt *st = NULL;
    lb_status status = prepare(s,
                               "UPDATE runs SET name = ?, tags = ?, config = ?, provenance = ?, "
                               "status = ?, failure = ?, end_wall_s = ? WHERE id = ?",
                               &st, err);
    if (status == LB_OK) {
        sqlite3_bind_text(st, 1, r->name, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, j.tags, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 3, j.config, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 4, j.provenance, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 5, lb_result_status_name(r->status), -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 6, r->failure, -1, SQLITE_STATIC);
        sqlite3_bind_double(st, 7, r->end_wall_s > 0 ? r->end_wall_s : lb_clock_wall_s());
        sqlite3_bind_int64(st, 8, run_id);
        if (sqlite3_step(st) != SQLITE_DONE)
            status = db_fail(s, err, "cannot record the end of a run");
    }
    sqlite3_finalize(st);
    run_json_free(&j);
    return status;
}

/* The write lock was held by another connection (or it held back a checkpoint). */
static bool is_busy(const lb_store *s) {
    int code = sqlite3_extended_errcode(s->db) & 0xff;
    return code == SQLITE_BUSY || code == SQLITE_LOCKED;
}

/* One write of a run: what write_with_wait runs inside its transaction. */
typedef struct {
    const lb_result *r;
    int64_t run_id;       /* begin: the new run; finish: the run begun; import: stored or found */
    const char *once_tag; /* import: the tag that a stored copy carries; NULL: none looked for */
    bool stored;          /* import: r was written (no run carried once_tag) */
} final_write;

static lb_status begin_body(lb_store *s, final_write *w, lb_err *err) {
    return insert_run(s, w->r, &w->run_id, err);
}

static lb_status finish_body(lb_store *s, final_write *w, lb_err *err) {
    LB_TRY(check_running(s, w->run_id, err));
    LB_TRY(write_series(s, w->run_id, w->r, err));
    LB_TRY(write_metrics(s, w->run_id, w->r, err));
    return write_outcome(s, w->run_id, w->r, err);
}

static lb_status import_body(lb_store *s, final_write *w, lb_err *err) {
    w->stored = false;
    w->run_id = -1;
    if (w->once_tag) {
        lb_store_filter f = lb_store_default_filter();
        f.tag = w->once_tag;
        f.limit = 1;
        lb_store_run_info *found = NULL;
        size_t n_found = 0;
        LB_TRY(lb_store_list(s, &f, &found, &n_found, err));
        if (n_found > 0) w->run_id = found[0].id;
        free(found);
        if (n_found > 0) return LB_OK;
    }
    LB_TRY(insert_run(s, w->r, &w->run_id, err));
    LB_TRY(finish_body(s, w, err));
    if (lb_signals_interrupted())
        return lb_fail(err, LB_ERR_INTERRUPTED,
                       "interrupted before the run was committed: nothing of it was stored");
    w->stored = true;
    return LB_OK;
}

/* Runs body in one BEGIN IMMEDIATE transaction, so a body that failed for the lock is
 * rolled back whole and run again. Each attempt waits out the busy timeout; a lock held
 * longer (another run's finish or import, a backup) is waited for again until
 * s->write_wait_s is over. With stop_at_signal, a signal (core/signals.h) ends the wait at
 * once with LB_ERR_INTERRUPTED and nothing written; without it the wait goes on, as a
 * finish must store an interrupted run's samples. */
static lb_status write_with_wait(lb_store *s,
                                 lb_status (*body)(lb_store *, final_write *, lb_err *),
                                 final_write *w, bool stop_at_signal, lb_err *err) {
    int64_t deadline = lb_clock_now_ns() + (int64_t)(s->write_wait_s * 1e9);
    s->stop_at_signal = stop_at_signal;
    lb_status status;
    for (int attempt = 1;; attempt++) {
        status = exec(s, "BEGIN IMMEDIATE", err);
        if (status == LB_OK) status = body(s, w, err);
        if (status == LB_OK) status = exec(s, "COMMIT", err);
        if (status == LB_OK) break;
        bool busy = is_busy(s);
        rollback(s);
        if (!busy) break;
        if (stop_at_signal && lb_signals_interrupted()) {
            status = lb_fail(err, LB_ERR_INTERRUPTED,
                             "interrupted while waiting for results database %s, locked by "
                             "another process: nothing was stored",
                             s->path);
            break;
        }
        if (lb_clock_now_ns() >= deadline) {
            status = lb_fail(err, LB_ERR_DB,
                             "results database %s stayed locked by another process for %g s "
                             "(%d attempt%s): try again once that process is done, or set "
                             "LLMBENCH_DB_WAIT_S to wait longer",
                             s->path, s->write_wait_s, attempt, attempt == 1 ? "" : "s");
            break;
        }
        nanosleep(&(struct timespec){.tv_nsec = 100000000}, NULL);
    }
    s->stop_at_signal = false;
    return status;
}

/* LB_OK when r may end a run: ok, failed or interrupted. */
static lb_status check_final_status(const lb_result *r, const char *what, lb_err *err) {
    if (r->status != LB_RUN_RUNNING &&
        lb_result_status_parse(lb_result_status_name(r->status)) >= 0)
        return LB_OK;
    return lb_fail(err, LB_ERR_RUNTIME,
                   "%s cannot be finished with status '%s': expected ok, failed or interrupted",
                   what, lb_result_status_name(r->status));
}

lb_status lb_store_run_begin(lb_store *s, const lb_result *r, int64_t *run_id, lb_err *err) {
    final_write w = {.r = r, .run_id = -1};
    lb_status status = write_with_wait(s, begin_body, &w, true, err);
    *run_id = status == LB_OK ? w.run_id : -1;
    return status;
}

lb_status lb_store_run_finish(lb_store *s, int64_t run_id, const lb_result *r, lb_err *err) {
    char what[64];
    snprintf(what, sizeof what, "run %lld", (long long)run_id);
    LB_TRY(check_final_status(r, what, err));
    final_write w = {.r = r, .run_id = run_id};
    return write_with_wait(s, finish_body, &w, false, err);
}

lb_status lb_store_check_times(const lb_result *r, lb_err *err) {
    const struct {
        const char *field;
        double wall_s;
    } times[] = {{"start_wall_s", r->start_wall_s}, {"end_wall_s", r->end_wall_s}};
    for (size_t i = 0; i < sizeof times / sizeof times[0]; i++) {
        if (isfinite(times[i].wall_s) && times[i].wall_s > 0) continue;
        char given[32] = "null";
        if (!isnan(times[i].wall_s)) snprintf(given, sizeof given, "%.17g", times[i].wall_s);
        return lb_fail(err, LB_ERR_USAGE,
                       "\"%s\" is %s: a run without its start and end (seconds since the "
                       "epoch) cannot be placed in history",
                       times[i].field, given);
    }
    return LB_OK;
}

lb_status lb_store_run_import(lb_store *s, const lb_result *r, const char *once_tag,
                              int64_t *run_id, bool *stored, lb_err *err) {
    *run_id = -1;
    *stored = false;
    LB_TRY(check_final_status(r, "an imported run", err));
    LB_TRY(lb_store_check_times(r, err));
    final_write w = {.r = r, .once_tag = once_tag};
    LB_TRY(write_with_wait(s, import_body, &w, true, err));
    *run_id = w.run_id;
    *stored = w.stored;
    return LB_OK;
}

lb_status lb_store_run_mark(lb_store *s, int64_t run_id, lb_run_status run_status,
                            const char *reason, lb_err *err) {
    sqlite3_stmt *st;
    LB_TRY(prepare(s,
                   "UPDATE runs SET status = ?, failure = ?, end_wall_s = ? "
                   "WHERE id = ? AND status = 'running'",
                   &st, err));
    sqlite3_bind_text(st, 1, lb_result_status_name(run_status), -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, reason, -1, SQLITE_STATIC);
    sqlite3_bind_double(st, 3, lb_clock_wall_s());
    sqlite3_bind_int64(st, 4, run_id);
    lb_status status = LB_OK;
    if (sqlite3_step(st) != SQLITE_DONE)
        status = db_fail(s, err, "cannot mark the run's end");
    else if (sqlite3_changes(s->db) != 1)
        status = lb_fail(err, LB_ERR_DB, "results database %s has no running run %lld", s->path,
                         (long long)run_id);
    sqlite3_finalize(st);
    return status;
}

/* ---- a result kept aside ---- */

static lb_status write_result_json(FILE *out, void *ctx, lb_err *err) {
    json_t *doc = lb_result_to_json(ctx);
    if (doc == NULL) return lb_fail(err, LB_ERR_NOMEM, "no memory to encode the result");
    int rc = json_dumpf(doc, out, JSON_COMPACT);
    fputc('\n', out);
    json_decref(doc);
    return rc == 0 ? LB_OK
                   : lb_fail(err, LB_ERR_IO, "cannot write the result: %s", strerror(errno));
}

lb_status lb_store_keep_aside(const lb_store *s, int64_t run_id, const lb_result *r, char *path,
                              size_t path_bytes, lb_err *err) {
    char stamp[64];
    snprintf(stamp, sizeof stamp, "unstored-run-%lld-%ld.json", (long long)run_id,
             (long)lb_clock_wall_s());
    /* Beside the database first, then the user's state folder (a full disk under the
     * database may leave room elsewhere). */
    lb_err first = {{0}};
    char dir[LB_STORE_PATH_BYTES];
    lb_status st = format_path(dir, sizeof dir, &first, s->path, ".");
    if (st == LB_OK) st = format_path(path, path_bytes, &first, dir, stamp);
    if (st == LB_OK) st = lb_file_write_atomic_with(path, write_result_json, (void *)r, &first);
    if (st == LB_OK) return LB_OK;
    const char *xdg = nonempty_env("XDG_STATE_HOME"), *home = nonempty_env("HOME");
    if (xdg && xdg[0] == '/')
        st = format_path(dir, sizeof dir, err, xdg, "/llmbench/");
    else if (home)
        st = format_path(dir, sizeof dir, err, home, "/.local/state/llmbench/");
    else
        return lb_fail(err, LB_ERR_IO, "%s (and neither XDG_STATE_HOME nor HOME is set)",
                       first.msg);
    if (st == LB_OK) st = format_path(path, path_bytes, err, dir, stamp);
    if (st == LB_OK) st = make_parents(path, err);
    if (st == LB_OK) st = lb_file_write_atomic_with(path, write_result_json, (void *)r, err);
    if (st != LB_OK) {
        char second[LB_ERR_MSG_BYTES];
        snprintf(second, sizeof second, "%s", err->msg);
        lb_fail(err, st, "%s; %s", first.msg, second);
        path[0] = '\0';
    }
    return st;
}

/* ---- reading ---- */

lb_store_filter lb_store_default_filter(void) {
    return (lb_store_filter){.kind = NULL, .status = -1, .limit = 0};
}

/* Frees the tags of list[0..n-1] while each is a string of its own (lb_store_list's rows
 * before pack_tags). */
static void free_row_tags(lb_store_run_info *list, size_t n) {
    for (size_t i = 0; i < n; i++)
        free((char *)list[i].tags);
}

/* Replaces *list (n rows, each with tags of its own) with one block holding the rows and
 * then their tags' text, so that one free() releases the list. */
static lb_status pack_tags(lb_store_run_info **list, size_t n, lb_err *err) {
    size_t text_bytes = 0;
    for (size_t i = 0; i < n; i++)
        text_bytes += strlen((*list)[i].tags) + 1;
    lb_store_run_info *block = malloc(n * sizeof *block + text_bytes);
    if (block == NULL) return lb_fail(err, LB_ERR_NOMEM, "no memory to list runs");
    memcpy(block, *list, n * sizeof *block);
    char *text = (char *)(block + n);
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(block[i].tags) + 1;
        memcpy(text, block[i].tags, len);
        block[i].tags = text;
        text += len;
    }
    free_row_tags(*list, n);
    free(*list);
    *list = block;
    return LB_OK;
}

lb_status lb_store_list(lb_store *s, const lb_store_filter *f, lb_store_run_info **out, size_t *n,
                        lb_err *err) {
    *out = NULL;
    *n = 0;
    lb_store_filter all = lb_store_default_filter();
    if (f == NULL) f = &all;
    sqlite3_stmt *st;
    LB_TRY(prepare(s,
                   "SELECT id, kind, name, status, failure, start_wall_s, end_wall_s, "
                   "(SELECT coalesce(sum(n), 0) FROM series WHERE series.run_id = runs.id), "
                   "(SELECT value FROM metrics WHERE metrics.run_id = runs.id AND "
                   "metrics.name = 'valid'), tags "
                   "FROM runs WHERE (?1 IS NULL OR kind = ?1) AND (?2 IS NULL OR status = ?2) "
                   "AND (?4 IS NULL OR EXISTS (SELECT 1 FROM json_each(runs.tags) "
                   "WHERE json_each.value = ?4)) ORDER BY id DESC LIMIT ?3",
                   &st, err));
    if (f->kind) sqlite3_bind_text(st, 1, f->kind, -1, SQLITE_STATIC);
    if (f->status >= 0)
        sqlite3_bind_text(st, 2, lb_result_status_name(f->status), -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, f->limit > 0 ? f->limit : -1);
    if (f->tag) sqlite3_bind_text(st, 4, f->tag, -1, SQLITE_STATIC);
    lb_status status = LB_OK;
    size_t cap = 0;
    int rc;
    while (status == LB_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (*n == cap) {
            cap = cap ? 2 * cap : 32;
            lb_store_run_info *grown = realloc(*out, cap * sizeof *grown);
            if (grown == NULL) {
                status = lb_fail(err, LB_ERR_NOMEM, "no memory to list runs");
                break;
            }
            *out = grown;
        }
        lb_store_run_info *info = &(*out)[(*n)++];
        info->id = sqlite3_column_int64(st, 0);
        copy_text(info->kind, sizeof info->kind, column_text(st, 1));
        copy_text(info->name, sizeof info->name, column_text(st, 2));
        int run_status = lb_result_status_parse(column_text(st, 3));
        info->status = run_status < 0 ? LB_RUN_FAILED : (lb_run_status)run_status;
        copy_text(info->failure, sizeof info->failure, column_text(st, 4));
        /* A name or failure is stored as it came (--name in a Latin-1 terminal, a path in a
         * message), but jansson writes no string that is not UTF-8: `results list --json`
         * would drop such a run and export would fail on it. */
        lb_utf8text_repair(info->kind);
        lb_utf8text_repair(info->name);
        lb_utf8text_repair(info->failure);
        info->start_wall_s = column_real(st, 5);
        info->end_wall_s = column_real(st, 6);
        info->n_samples = sqlite3_column_int64(st, 7);
        info->valid =
            sqlite3_column_type(st, 8) == SQLITE_NULL ? -1 : sqlite3_column_double(st, 8) != 0;
        info->tags = strdup(column_text(st, 9));
        if (info->tags == NULL) status = lb_fail(err, LB_ERR_NOMEM, "no memory to list runs");
    }
    if (status == LB_OK && rc != SQLITE_DONE) status = db_fail(s, err, "cannot list runs");
    sqlite3_finalize(st);
    if (status == LB_OK && *n > 0) status = pack_tags(out, *n, err);
    if (status != LB_OK) {
        free_row_tags(*out, *n);
        free(*out);
        *out = NULL;
        *n = 0;
    }
    return status;
}

lb_status lb_store_run_exists(lb_store *s, int64_t id, bool *exists, lb_err *err) {
    sqlite3_stmt *st;
    LB_TRY(prepare(s, "SELECT 1 FROM runs WHERE id = ?", &st, err));
    sqlite3_bind_int64(st, 1, id);
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) return db_fail(s, err, "cannot look up a run");
    *exists = rc == SQLITE_ROW;
    return LB_OK;
}

/* Replaces *slot with the JSON parsed from text. */
static lb_status load_json(json_t **slot, const char *text, int64_t id, const char *what,
                           lb_err *err) {
    json_error_t jerr;
    json_t *v = json_loads(text, 0, &jerr);
    if (v == NULL)
        return lb_fail(err, LB_ERR_FORMAT, "run %lld: stored %s is not valid JSON: %s",
                       (long long)id, what, jerr.text);
    json_decref(*slot);
    *slot = v;
    return LB_OK;
}

static lb_status load_run_row(lb_store *s, int64_t id, lb_result **out, lb_err *err) {
    sqlite3_stmt *st;
    LB_TRY(prepare(s,
                   "SELECT kind, name, tags, start_wall_s, end_wall_s, status, failure, config, "
                   "provenance FROM runs WHERE id = ?",
                   &st, err));
    sqlite3_bind_int64(st, 1, id);
    int rc = sqlite3_step(st);
    lb_status status = LB_OK;
    lb_result *r = NULL;
    if (rc == SQLITE_DONE)
        status =
            lb_fail(err, LB_ERR_DB, "no run %lld in results database %s", (long long)id, s->path);
    else if (rc != SQLITE_ROW)
        status = db_fail(s, err, "cannot read a run");
    else if ((r = lb_result_new(column_text(st, 0), column_text(st, 1))) == NULL)
        status = lb_fail(err, LB_ERR_NOMEM, "no memory to load run %lld", (long long)id);
    if (status == LB_OK) {
        r->start_wall_s = column_real(st, 3);
        r->end_wall_s = column_real(st, 4);
        int run_status = lb_result_status_parse(column_text(st, 5));
        r->status = run_status < 0 ? LB_RUN_FAILED : (lb_run_status)run_status;
        copy_text(r->failure, sizeof r->failure, column_text(st, 6));
        lb_utf8text_repair(r->kind); /* as lb_store_list does */
        lb_utf8text_repair(r->name);
        lb_utf8text_repair(r->failure);
        status = load_json(&r->tags, column_text(st, 2), id, "tags", err);
        if (status == LB_OK) status = load_json(&r->config, column_text(st, 7), id, "config", err);
        if (status == LB_OK)
            status = load_json(&r->provenance, column_text(st, 8), id, "provenance", err);
    }
    sqlite3_finalize(st);
    if (status != LB_OK) {
        lb_result_free(r);
        return status;
    }
    *out = r;
    return LB_OK;
}

static lb_status load_metrics(lb_store *s, int64_t id, lb_result *r, lb_err *err) {
    sqlite3_stmt *st;
    LB_TRY(prepare(s, "SELECT name, value, unit FROM metrics WHERE run_id = ? ORDER BY rowid", &st,
                   err));
    sqlite3_bind_int64(st, 1, id);
    lb_status status = LB_OK;
    int rc;
    while (status == LB_OK && (rc = sqlite3_step(st)) == SQLITE_ROW)
        if (lb_result_set_metric(r, column_text(st, 0), column_real(st, 1), column_text(st, 2)) !=
            LB_OK)
            status = lb_fail(err, LB_ERR_NOMEM, "no memory to load run %lld", (long long)id);
    if (status == LB_OK && rc != SQLITE_DONE) status = db_fail(s, err, "cannot read metrics");
    sqlite3_finalize(st);
    return status;
}

static lb_status load_samples(lb_store *s, int64_t id, int64_t series_no, lb_series *ser, int64_t n,
                              lb_err *err) {
    if (n > 0) {
        double *values = realloc(ser->values, (size_t)n * sizeof *values);
        if (values == NULL)
            return lb_fail(err, LB_ERR_NOMEM, "no memory for %lld samples of run %lld",
                           (long long)n, (long long)id);
        ser->values = values;
        ser->cap = (size_t)n;
    }
    sqlite3_stmt *st;
    LB_TRY(prepare(s, "SELECT value FROM samples WHERE run_id = ? AND series_no = ? ORDER BY idx",
                   &st, err));
    sqlite3_bind_int64(st, 1, id);
    sqlite3_bind_int64(st, 2, series_no);
    lb_status status = LB_OK;
    int rc;
    while (status == LB_OK && (rc = sqlite3_step(st)) == SQLITE_ROW)
        if (lb_result_series_push(ser, column_real(st, 0)) != LB_OK)
            status = lb_fail(err, LB_ERR_NOMEM, "no memory to load run %lld", (long long)id);
    if (status == LB_OK && rc != SQLITE_DONE) status = db_fail(s, err, "cannot read samples");
    sqlite3_finalize(st);
    return status;
}

static lb_status load_series(lb_store *s, int64_t id, lb_result *r, lb_err *err) {
    sqlite3_stmt *st;
    LB_TRY(prepare(s,
                   "SELECT series_no, name, unit, n FROM series WHERE run_id = ? "
                   "ORDER BY series_no",
                   &st, err));
    sqlite3_bind_int64(st, 1, id);
    lb_status status = LB_OK;
    int rc;
    while (status == LB_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        lb_series *ser = lb_result_series(r, column_text(st, 1), column_text(st, 2));
        if (ser == NULL)
            status = lb_fail(err, LB_ERR_NOMEM, "no memory to load run %lld", (long long)id);
        else
            status = load_samples(s, id, sqlite3_column_int64(st, 0), ser,
                                  sqlite3_column_int64(st, 3), err);
    }
    if (status == LB_OK && rc != SQLITE_DONE) status = db_fail(s, err, "cannot read series");
    sqlite3_finalize(st);
    return status;
}

/* A run with its metrics, and its series when with_series. */
static lb_status load_run(lb_store *s, int64_t id, bool with_series, lb_result **out, lb_err *err) {
    *out = NULL;
    lb_result *r = NULL;
    /* One read transaction, so a concurrent finish is seen whole or not at all. */
    LB_TRY(exec(s, "BEGIN", err));
    lb_status status = load_run_row(s, id, &r, err);
    if (status == LB_OK) status = load_metrics(s, id, r, err);
    if (status == LB_OK && with_series) status = load_series(s, id, r, err);
    rollback(s);
    if (status != LB_OK) {
        lb_result_free(r);
        return status;
    }
    *out = r;
    return LB_OK;
}

lb_status lb_store_run_load(lb_store *s, int64_t id, lb_result **out, lb_err *err) {
    return load_run(s, id, true, out, err);
}

lb_status lb_store_run_load_summary(lb_store *s, int64_t id, lb_result **out, lb_err *err) {
    return load_run(s, id, false, out, err);
}

/* ---- export ---- */

/* Shortest of %.15g, %.16g, %.17g that reads back as the same double; "" for NaN and the
 * infinities, as the JSON export writes them null. */
static void format_exact(char *buf, size_t cap, double v) {
    if (!isfinite(v)) {
        buf[0] = '\0';
        return;
    }
    for (int digits = 15; digits <= 17; digits++) {
        snprintf(buf, cap, "%.*g", digits, v);
        if (strtod(buf, NULL) == v) return;
    }
}

/* One CSV field, quoted (RFC 4180) only when it holds a comma, quote or line break. */
static void csv_field(FILE *out, const char *text) {
    if (strpbrk(text, ",\"\r\n") == NULL) {
        fputs(text, out);
        return;
    }
    fputc('"', out);
    for (const char *p = text; *p; p++) {
        if (*p == '"') fputc('"', out);
        fputc(*p, out);
    }
    fputc('"', out);
}

static void csv_row(FILE *out, int64_t id, const lb_result *r, const char *record, const char *key,
                    const char *index, const char *value, const char *unit) {
    fprintf(out, "%lld,", (long long)id);
    csv_field(out, r->kind);
    fputc(',', out);
    csv_field(out, r->name);
    fprintf(out, ",%s,%s,", lb_result_status_name(r->status), record);
    csv_field(out, key);
    fprintf(out, ",%s,", index);
    csv_field(out, value);
    fputc(',', out);
    csv_field(out, unit);
    fputc('\n', out);
}

/* CSV rows of one run: its config keys (value as JSON text, strings bare), its metrics,
 * then every sample. */
static void write_csv_run(FILE *out, int64_t id, const lb_result *r) {
    const char *key;
    json_t *v;
    json_object_foreach(r->config, key, v) {
        char *text = json_is_string(v) ? NULL : json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        csv_row(out, id, r, "config", key, "", text ? text : json_string_value(v), "");
        free(text);
    }
    char num[32];
    for (size_t i = 0; i < r->n_metrics; i++) {
        format_exact(num, sizeof num, r->metrics[i].value);
        csv_row(out, id, r, "metric", r->metrics[i].name, "", num, r->metrics[i].unit);
    }
    for (size_t i = 0; i < r->n_series; i++) {
        const lb_series *ser = &r->series[i];
        char index[24];
        for (size_t k = 0; k < ser->n; k++) {
            snprintf(index, sizeof index, "%zu", k);
            format_exact(num, sizeof num, ser->values[k]);
            csv_row(out, id, r, "sample", ser->name, index, num, ser->unit);
        }
    }
}

static lb_status write_json_run(FILE *out, int64_t id, const lb_result *r, bool first,
                                lb_err *err) {
    json_t *body = lb_result_to_json(r);
    json_t *run = json_pack("{s:I}", "id", (json_int_t)id);
    if (body == NULL || run == NULL || json_object_update(run, body) != 0) {
        json_decref(body);
        json_decref(run);
        return lb_fail(err, LB_ERR_NOMEM, "no memory to export run %lld", (long long)id);
    }
    fputs(first ? "\n" : ",\n", out);
    json_dumpf(run, out, JSON_COMPACT);
    json_decref(body);
    json_decref(run);
    return LB_OK;
}

static lb_status all_run_ids(lb_store *s, int64_t **ids, size_t *n, lb_err *err) {
    *ids = NULL;
    *n = 0;
    sqlite3_stmt *st;
    LB_TRY(prepare(s, "SELECT id FROM runs ORDER BY id", &st, err));
    lb_status status = LB_OK;
    size_t cap = 0;
    int rc;
    while (status == LB_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (*n == cap) {
            cap = cap ? 2 * cap : 64;
            int64_t *grown = realloc(*ids, cap * sizeof *grown);
            if (grown == NULL) {
                status = lb_fail(err, LB_ERR_NOMEM, "no memory to list runs");
                break;
            }
            *ids = grown;
        }
        (*ids)[(*n)++] = sqlite3_column_int64(st, 0);
    }
    if (status == LB_OK && rc != SQLITE_DONE) status = db_fail(s, err, "cannot list runs");
    sqlite3_finalize(st);
    return status;
}

lb_status lb_store_export(lb_store *s, const int64_t *ids, size_t n_ids, lb_store_format format,
                          FILE *out, lb_err *err) {
    int64_t *every = NULL;
    if (n_ids == 0) {
        LB_TRY(all_run_ids(s, &every, &n_ids, err));
        ids = every;
    }
    lb_status status = LB_OK;
    for (size_t i = 0; status == LB_OK && i < n_ids; i++) {
        bool exists = false;
        status = lb_store_run_exists(s, ids[i], &exists, err);
        if (status == LB_OK && !exists)
            status = lb_fail(err, LB_ERR_DB, "no run %lld in results database %s",
                             (long long)ids[i], s->path);
    }
    if (status == LB_OK)
        fputs(format == LB_STORE_FORMAT_JSON
                  ? "["
                  : "run_id,kind,name,status,record,series_or_metric,index,value,unit\n",
              out);
    for (size_t i = 0; status == LB_OK && i < n_ids; i++) {
        if (lb_signals_interrupted()) {
            status = lb_fail(err, LB_ERR_INTERRUPTED, "export interrupted after %zu of %zu runs", i,
                             n_ids);
            break;
        }
        lb_result *r;
        status = lb_store_run_load(s, ids[i], &r, err);
        if (status != LB_OK) break;
        if (format == LB_STORE_FORMAT_JSON)
            status = write_json_run(out, ids[i], r, i == 0, err);
        else
            write_csv_run(out, ids[i], r);
        lb_result_free(r);
    }
    if (status == LB_OK && format == LB_STORE_FORMAT_JSON) fputs("\n]\n", out);
    free(every);
    if (status == LB_OK && (fflush(out) != 0 || ferror(out)))
        status = lb_fail(err, LB_ERR_IO, "cannot write the export: %s", strerror(errno));
    return status;
}
