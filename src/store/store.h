/* store.h: the results database, one SQLite file that never loses a run.
 *
 * A run is written twice: lb_store_run_begin records it as `running` with its config and
 * provenance before any work starts, and lb_store_run_finish writes its raw samples,
 * summary metrics, final status and end time in one transaction. A crash between the two
 * leaves the run visible as `running`; a half-written finish is never visible. Reading
 * gives a run back as the lb_result (core/result.h) it was stored from, or exports runs
 * as JSON or CSV with every raw sample, so every summary metric can be recomputed.
 *
 * The schema is versioned with PRAGMA user_version and upgraded by forward migrations
 * when a database is opened; a database written by a newer llmbench is refused, never
 * rewritten. The layout is in docs/STORE.md. This module stores what it is given:
 * it does not compute metrics, and it does not redact (core/provenance.c hides secrets
 * before they reach a result). Only the CLI, sweep and report layers use it; workloads
 * never do (DESIGN.md). One lb_store is used by one thread at a time; several processes
 * may share a file (WAL mode, busy timeout). */
#ifndef LB_STORE_STORE_H
#define LB_STORE_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/result.h"
#include "core/status.h"

#define LB_STORE_SCHEMA_VERSION 1 /* the newest schema this build reads and writes */
#define LB_STORE_PATH_BYTES     4096

typedef struct lb_store lb_store;

/* Where the database is: path_or_null (--db) if not NULL, else $LLMBENCH_DB, else
 * $XDG_DATA_HOME/llmbench/results.db, else $HOME/.local/share/llmbench/results.db. Empty
 * variables count as unset. Writes the path into out (out_bytes >= LB_STORE_PATH_BYTES is
 * always enough); creates nothing. */
lb_status lb_store_resolve_path(const char *path_or_null, char *out, size_t out_bytes, lb_err *err);

/* Before a job whose end writes the database (the ranks of a multi-rank run wait for rank
 * 0 meanwhile): the folders lb_store_open would make are made, and the folder takes new
 * files (SQLite's -wal and -shm too) and the file, where it is, is one that can be
 * written. Takes no lock, so it never waits on another writer. LB_ERR_IO naming the path
 * otherwise. */
lb_status lb_store_check_path(const char *path_or_null, lb_err *err);

/* Opens (creating it and its parent folders when missing) and upgrades the database at
 * lb_store_resolve_path(path_or_null). A path lb_store_check_path refuses (a folder, a
 * read-only file, folder or mount) is its LB_ERR_IO. Another program's SQLite file (schema
 * version 0 with tables) is LB_ERR_DB naming the path, left as it was. *out is owned by the
 * caller: lb_store_close. */
lb_status lb_store_open(const char *path_or_null, lb_store **out, lb_err *err);
/* Opens the database read-only, for commands that only read: nothing is created,
 * upgraded or written (no folders, no WAL switch), and a database left in WAL mode with
 * read-only -wal and -shm files is read as it is. A missing file is LB_ERR_DB naming the
 * path; so is a file of another or an older schema version. */
lb_status lb_store_open_read(const char *path_or_null, lb_store **out, lb_err *err);
void lb_store_close(lb_store *s); /* accepts NULL */
const char *lb_store_path(const lb_store *s);

/* Records r as a new `running` run: kind, name, tags, config, provenance and start time
 * (r->start_wall_s, or now when it is 0). Writes the new id into *run_id (-1 on failure).
 * Waits for the write lock as lb_store_run_finish does, except that SIGINT or SIGTERM
 * (core/signals.h) ends the wait at once: LB_ERR_INTERRUPTED, nothing stored. A signal that
 * arrived before does not stop a begin that finds the lock free. */
lb_status lb_store_run_begin(lb_store *s, const lb_result *r, int64_t *run_id, lb_err *err);

/* Completes a run begun with lb_store_run_begin, in one transaction: every series with
 * its samples, every metric, r->status (ok, failed or interrupted; not running),
 * r->failure, the end time (r->end_wall_s, or now when it is 0), and the final name, tags,
 * config and provenance. A run that is not `running` any more is refused. While another
 * process holds the write lock the write is tried again, for at most $LLMBENCH_DB_WAIT_S
 * seconds (default 120) in all; then it fails naming the wait. A signal does not end this
 * wait: an interrupted run's samples are stored all the same. */
lb_status lb_store_run_finish(lb_store *s, int64_t run_id, const lb_result *r, lb_err *err);

/* LB_OK when r gives its start and end (start_wall_s and end_wall_s, seconds since the
 * epoch, above 0), else LB_ERR_USAGE naming the field: a begin or finish without a time
 * takes now, which for a run stored later would make it the newest of its history. */
lb_status lb_store_check_times(const lb_result *r, lb_err *err);

/* Stores r, a result that has ended (ok, failed or interrupted), as a new run: its begin
 * and its finish in one transaction, so no reader sees it running and a failed write
 * leaves nothing. When once_tag is not NULL and a stored run carries that tag, nothing is
 * written: *run_id is that run (the newest such) and *stored false; else *run_id is the new
 * run and *stored true. r should carry once_tag among its tags, so that it is found next
 * time. r must give its start and end (r->start_wall_s and r->end_wall_s, seconds since
 * the epoch, above 0): where it does not, nothing is written and the result is LB_ERR_USAGE
 * naming the field, as a run of unknown date cannot take its place in history. The look-up
 * and the write hold the write lock together: of several processes storing results with the
 * same once_tag, exactly one stores. Waits for the lock as lb_store_run_begin does: SIGINT or
 * SIGTERM (core/signals.h) ends the wait, or comes before the commit, as LB_ERR_INTERRUPTED
 * with nothing written. */
lb_status lb_store_run_import(lb_store *s, const lb_result *r, const char *once_tag,
                              int64_t *run_id, bool *stored, lb_err *err);

/* Ends a `running` run with run_status (failed or interrupted), reason and the end time
 * now, nothing else: what is left to do when its finish could not be written (a full disk
 * may still take a one-row update) or its process must exit at once (a second Ctrl-C). */
lb_status lb_store_run_mark(lb_store *s, int64_t run_id, lb_run_status run_status,
                            const char *reason, lb_err *err);

/* Keeps a result whose finish could not be written: the whole of r (lb_result_to_json, one
 * line) goes, written atomically, to a new file beside the database
 * (DB.unstored-run-ID-TIME.json), or where that cannot be written, into
 * $XDG_STATE_HOME/llmbench/ (default ~/.local/state/llmbench/). The file's path goes into
 * path (path_bytes >= LB_STORE_PATH_BYTES + 64). `llmbench results import FILE` stores it
 * later as a new run. */
lb_status lb_store_keep_aside(const lb_store *s, int64_t run_id, const lb_result *r, char *path,
                              size_t path_bytes, lb_err *err);

/* Which runs lb_store_list returns. */
typedef struct {
    const char *kind; /* only runs of this kind; NULL: every kind */
    int status;       /* only runs with this lb_run_status; -1: every status */
    int64_t limit;    /* at most this many runs; 0: no limit */
    const char *tag;  /* only runs that carry this tag (exact match); NULL: any */
} lb_store_filter;

lb_store_filter lb_store_default_filter(void);

/* One line of `results list`. */
typedef struct {
    int64_t id;
    char kind[16];
    char name[128];
    lb_run_status status;
    char failure[LB_ERR_MSG_BYTES];
    double start_wall_s; /* seconds since the epoch */
    double end_wall_s;   /* seconds since the epoch; NaN while running */
    int64_t n_samples;   /* raw samples over every series */
    int valid;           /* its `valid` metric (an MLPerf-style verdict): 1, 0; -1 none */
    const char *tags;    /* its tags as compact JSON ("[]" when none), whole; in the list's
                          * allocation, so valid as long as the list */
} lb_store_run_info;

/* Runs matching f (NULL: every run), newest first. *out is one malloc'd block, the array
 * followed by the tags' text, that the caller frees with free() (NULL when *n is 0). */
lb_status lb_store_list(lb_store *s, const lb_store_filter *f, lb_store_run_info **out, size_t *n,
                        lb_err *err);

/* True in *exists when a run with this id is stored. */
lb_status lb_store_run_exists(lb_store *s, int64_t id, bool *exists, lb_err *err);

/* Loads run `id` into a new lb_result with everything stored (caller frees it with
 * lb_result_free). A missing id is LB_ERR_DB with a sentence naming the id. Its kind, name
 * and failure read back as UTF-8, each stored byte that is not as '?' (so are
 * lb_store_list's), so that they can be written as JSON. */
lb_status lb_store_run_load(lb_store *s, int64_t id, lb_result **out, lb_err *err);

/* The same without the series: kind, name, tags, config, provenance, status, times and
 * metrics only, so scanning many runs (histories, OpenMetrics) reads no raw samples. */
lb_status lb_store_run_load_summary(lb_store *s, int64_t id, lb_result **out, lb_err *err);

typedef enum {
    LB_STORE_FORMAT_JSON, /* an array of lb_result_to_json objects, each with "id" */
    LB_STORE_FORMAT_CSV,  /* long format, one value per row: see docs/STORE.md */
} lb_store_format;

/* Writes runs ids[0..n_ids-1] (n_ids == 0: every run, oldest first) to out. Every id is
 * checked before the first byte is written; one run is in memory at a time. Once SIGINT or
 * SIGTERM arrived (core/signals.h) it stops before the next run with LB_ERR_INTERRUPTED,
 * out then holding part of the export. */
lb_status lb_store_export(lb_store *s, const int64_t *ids, size_t n_ids, lb_store_format format,
                          FILE *out, lb_err *err);

#endif
