/* file.h: whole files in and out: reading a file of outside input (texts, datasets,
 * vocabularies) into memory, and writing a file that appears whole or not at all.
 *
 * The file is read with stdio into one growing buffer, so pipes and /dev/stdin work too.
 * A file that cannot be opened or read is the user's input at fault: LB_ERR_USAGE, with
 * the path and the system's reason. Writing goes to a temporary file beside the target,
 * synced and renamed over it, so a reader (a browser, a scraper, systemd) never sees half
 * a file. Not here: mapping, streaming. */
#ifndef LB_CORE_FILE_H
#define LB_CORE_FILE_H

#include <stddef.h>

#include "core/status.h"

/* Reads all of path: *buf is malloc'd, NUL-terminated (the bytes may hold other NULs; *n
 * counts them, not the terminator), the caller frees it. On failure *buf is NULL. */
lb_status lb_file_read(const char *path, char **buf, size_t *n, lb_err *err);

/* Creates or replaces path with data[0..len-1] through "path.tmp" (synced, renamed). A
 * failure leaves path as it was: LB_ERR_IO naming the file. */
lb_status lb_file_write_atomic(const char *path, const char *data, size_t len, lb_err *err);

/* mkdir -p: dir and every missing parent, with mode. LB_ERR_IO naming the folder that
 * could not be made; LB_ERR_USAGE when dir exists and is not a folder. */
lb_status lb_file_mkdirs(const char *dir, unsigned mode, lb_err *err);

#endif
