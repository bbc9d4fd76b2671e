/* file.c: lb_file_read, lb_file_write_atomic, lb_file_last_line, lb_file_check_writable,
 * lb_file_check_folder, lb_file_mkdirs. */
#include "core/file.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/signals.h"

lb_status lb_file_read(const char *path, char **buf, size_t *n, lb_err *err) {
    *buf = NULL;
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (f == NULL) return lb_fail(err, LB_ERR_USAGE, "cannot read %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
        fclose(f);
        return lb_fail(err, LB_ERR_USAGE, "cannot read %s: it is a folder; give a file", path);
    }
    size_t cap = 1 << 16, len = 0;
    char *b = malloc(cap);
    int read_errno = 0;
    while (b != NULL) {
        errno = 0;
        len += fread(b + len, 1, cap - 1 - len, f);
        if (ferror(f)) {
            /* a signal that arrived while a pipe or terminal had nothing yet: read on, unless
             * it was an interrupt (core/signals.h) */
            if (errno == EINTR && !lb_signals_interrupted()) {
                clearerr(f);
                continue;
            }
            read_errno = errno;
            break;
        }
        if (len < cap - 1) break;
        char *bigger = realloc(b, cap * 2);
        if (bigger == NULL) free(b);
        b = bigger;
        cap *= 2;
    }
    fclose(f);
    if (b == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of memory reading %s", path);
    if (read_errno != 0) {
        free(b);
        if (read_errno == EINTR)
            return lb_fail(err, LB_ERR_INTERRUPTED, "interrupted while reading %s", path);
        return lb_fail(err, LB_ERR_IO, "cannot read %s: %s", path, strerror(read_errno));
    }
    b[len] = '\0';
    *buf = b;
    *n = len;
    return LB_OK;
}

lb_status lb_file_write_atomic_with(const char *path, lb_file_writer write, void *ctx,
                                    lb_err *err) {
    char tmp[4200];
    if (snprintf(tmp, sizeof tmp, "%s.tmp-XXXXXX", path) >= (int)sizeof tmp)
        return lb_fail(err, LB_ERR_USAGE, "output path '%s' is too long", path);
    int fd = mkstemp(tmp);
    if (fd < 0)
        return lb_fail(err, LB_ERR_IO, "cannot create a file next to %s: %s", path,
                       strerror(errno));
    /* A file it replaces keeps its permissions (a collector that reads it as another user
     * still can); a new one gets those a plain new file would. */
    struct stat old;
    mode_t mask = umask(0);
    umask(mask);
    fchmod(fd, stat(path, &old) == 0 ? old.st_mode & 0777 : 0666 & ~mask);
    FILE *out = fdopen(fd, "w");
    if (out == NULL) {
        close(fd);
        unlink(tmp);
        return lb_fail(err, LB_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    }
    lb_status st = write(out, ctx, err);
    if (st == LB_OK && (fflush(out) != 0 || ferror(out) || fsync(fileno(out)) != 0))
        st = lb_fail(err, LB_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    if (fclose(out) != 0 && st == LB_OK)
        st = lb_fail(err, LB_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    if (st == LB_OK && rename(tmp, path) != 0)
        st = lb_fail(err, LB_ERR_IO, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
    if (st != LB_OK) unlink(tmp);
    return st;
}

typedef struct {
    const char *data;
    size_t len;
} buffer;

static lb_status write_buffer(FILE *out, void *ctx, lb_err *err) {
    (void)err;
    const buffer *b = ctx;
    fwrite(b->data, 1, b->len, out); /* a short write shows as ferror, checked by the caller */
    return LB_OK;
}

lb_status lb_file_write_atomic(const char *path, const char *data, size_t len, lb_err *err) {
    buffer b = {.data = data, .len = len};
    return lb_file_write_atomic_with(path, write_buffer, &b, err);
}

void lb_file_last_line(const char *path, char *out, size_t cap) {
    char *text = NULL;
    size_t len = 0;
    out[0] = '\0';
    if (lb_file_read(path, &text, &len, NULL) != LB_OK) return;
    while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == '\r'))
        text[--len] = '\0';
    /* from the end by length: a NUL byte before it (a crash's garbage) ends no search */
    const char *nl = memrchr(text, '\n', len);
    const char *line = nl ? nl + 1 : text;
    snprintf(out, cap, "%.*s", (int)(text + len - line), line);
    free(text);
}

lb_status lb_file_check_writable(const char *option, const char *path, lb_err *err) {
    char dir[4096];
    if (snprintf(dir, sizeof dir, "%s", path) >= (int)sizeof dir)
        return lb_fail(err, LB_ERR_USAGE, "%s %s: the path is too long", option, path);
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return lb_fail(err, LB_ERR_USAGE, "%s %s is a folder: give a file name", option, path);
    char *slash = strrchr(dir, '/');
    if (slash == NULL)
        snprintf(dir, sizeof dir, ".");
    else
        slash[slash == dir ? 1 : 0] = '\0'; /* "/x" keeps "/" */
    if (access(dir, W_OK | X_OK) != 0)
        return lb_fail(err, LB_ERR_USAGE, "%s %s: cannot create a file in folder %s: %s", option,
                       path, dir, strerror(errno));
    return LB_OK;
}

lb_status lb_file_check_folder(const char *option, const char *dir, lb_err *err) {
    struct stat st;
    if (stat(dir, &st) == 0 && !S_ISDIR(st.st_mode))
        return lb_fail(err, LB_ERR_USAGE, "%s %s is a file: give a folder (made if missing)",
                       option, dir);
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return lb_fail(err, LB_ERR_USAGE, "%s %s: cannot create the folder: %s", option, dir,
                       strerror(errno));
    if (access(dir, W_OK | X_OK) != 0)
        return lb_fail(err, LB_ERR_USAGE, "%s %s: cannot write into the folder: %s", option, dir,
                       strerror(errno));
    return LB_OK;
}

lb_status lb_file_mkdirs(const char *dir, unsigned mode, lb_err *err) {
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf)
        return lb_fail(err, LB_ERR_IO, "folder path %s is too long", dir);
    for (char *p = buf + 1;; p++) {
        bool end = *p == '\0';
        if (*p != '/' && !end) continue;
        *p = '\0';
        if (mkdir(buf, (mode_t)mode) != 0 && errno != EEXIST)
            return lb_fail(err, LB_ERR_IO, "cannot create folder %s: %s", buf, strerror(errno));
        if (end) break;
        *p = '/';
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return lb_fail(err, LB_ERR_USAGE, "%s is not a folder", dir);
    return LB_OK;
}
