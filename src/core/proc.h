/* proc.h: run this program (or another) as a child process and wait for it.
 *
 * The sweep runs each cell and a scheduled job runs its command by starting llmbench
 * again with the command's own options, so a cell is exactly what the user would get
 * typing that command. The child gets its own process group, so a Ctrl-C at the terminal
 * reaches only the parent, which passes one SIGINT on (a second one would make the child
 * exit without storing its run); it dies with SIGTERM when the parent dies. Not here:
 * shells, pipes between children, or reading a child's output while it runs. */
#ifndef LB_CORE_PROC_H
#define LB_CORE_PROC_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "core/status.h"

/* The path of the running program (/proc/self/exe) into out. */
lb_status lb_proc_self_exe(char *out, size_t out_bytes, lb_err *err);

/* What a child is started with. */
typedef struct {
    const char *const *argv; /* argv[0] is the program's path; NULL-terminated */
    const char *const *env;  /* "NAME=VALUE" set in the child only (a bare "NAME" removes
                              * NAME); NULL-terminated or NULL */
    const char *stdout_path; /* the child's stdout goes to this file (truncated); NULL: ours */
    const char *stderr_path; /* the same for stderr; NULL: ours */
    bool stdout_to_stderr;   /* the child's stdout goes where its stderr goes (stdout_path
                              * NULL): our stdout keeps only our own output */
} lb_proc_spec;

/* A child's environment, made before fork (between fork and exec a child may call only
 * async-signal-safe functions: setenv and putenv take a lock that another thread may hold
 * at the fork, and the child would wait for it forever): ours with env's entries in place
 * of those of the same name, a later entry of env winning over an earlier one, a bare
 * "NAME" removing NAME. env is NULL-terminated, or NULL. The array is malloc'd and the
 * caller frees it (free(), the array only); its strings are environ's and env's, borrowed
 * (env must outlive it). NULL when out of memory. */
char **lb_proc_environment(const char *const *env);

/* SIGCHLD as the caller had it, kept while children are waited for. */
typedef struct {
    struct sigaction caller;
    bool changed; /* whether lb_proc_sigchld_reset changed it */
} lb_proc_sigchld;

/* A process that ignores SIGCHLD (SIG_IGN, or SA_NOCLDWAIT; an ignored SIGCHLD stays
 * ignored through exec, so some supervisors hand it on) has its children reaped by the
 * kernel: waitpid never gets their statuses (ECHILD). Call this before starting children to
 * be waited for: it keeps the caller's disposition in *saved and makes SIGCHLD the default
 * (a handler of the caller's stays, without SA_NOCLDWAIT); the children inherit that. Call
 * lb_proc_sigchld_restore(saved) once they were waited for. Process-wide: two threads
 * that start children at once must not interleave these pairs. */
void lb_proc_sigchld_reset(lb_proc_sigchld *saved);
void lb_proc_sigchld_restore(const lb_proc_sigchld *saved);

/* Starts the child, waits for it, and writes its exit code (128 + signal when a signal
 * ended it) into *exit_code; a caller that ignores SIGCHLD gets it too (SIGCHLD is the
 * default while the child lives, lb_proc_sigchld_reset). While it runs, an interrupt seen by
 * this process (core/signals.h) is passed on to it once as SIGINT. A child that cannot be
 * started is LB_ERR_RUNTIME with the reason. */
lb_status lb_proc_run(const lb_proc_spec *spec, int *exit_code, lb_err *err);

/* How lb_proc_sh_word writes a word. */
typedef enum {
    LB_PROC_SH_BARE_PLAIN, /* bare when it holds only characters no shell reads specially */
    LB_PROC_SH_IN_CRONTAB, /* quoted, and each '%' escaped as cron needs before sh reads it */
} lb_proc_sh_mode;

/* Writes word to f as one word of an sh command line: in single quotes, a ' written '\''
 * (LB_PROC_SH_BARE_PLAIN: as it is when nothing in it needs quotes). In a crontab line cron
 * reads first: '\%' becomes '%', any other backslash escapes the character after it (both
 * kept), and an unescaped '%' ends the command; a backslash of the word right before a '%'
 * would pair with the '\' written for it, so the quotes are closed and opened again ('')
 * between the two, and sh joins the pieces into one word. */
void lb_proc_sh_word(FILE *f, const char *word, lb_proc_sh_mode mode);

#endif
