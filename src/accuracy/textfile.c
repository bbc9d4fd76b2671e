/* textfile.c: the three layouts of textfile.h, read whole and checked record by record. */
#include "accuracy/textfile.h"

#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accuracy/utf8.h"
#include "core/file.h"
#include "core/result.h"

static const char *const pred_fields[] = {"prediction", "text", "output"};
static const char *const ref_fields[] = {"reference", "text", "output"};

static lb_status push(lb_textfile *f, size_t *cap, const char *s, size_t len, lb_err *err) {
    if (f->n == *cap) {
        size_t c = *cap ? *cap * 2 : 1024;
        char **t = realloc(f->texts, c * sizeof *t);
        if (t == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of memory reading texts");
        f->texts = t;
        *cap = c;
    }
    char *copy = malloc(len + 1);
    if (copy == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of memory reading texts");
    memcpy(copy, s, len);
    copy[len] = '\0';
    f->texts[f->n++] = copy;
    return LB_OK;
}

/* The text of one JSON record; on a bad record writes why into why[] and returns NULL. */
static const char *record_text(const json_t *rec, lb_textfile_role role, size_t *len, char *why,
                               size_t why_cap) {
    if (json_is_string(rec)) {
        *len = json_string_length(rec);
        return json_string_value(rec);
    }
    if (!json_is_object(rec)) {
        snprintf(why, why_cap, "a record must be a JSON string or object, got %s",
                 lb_result_json_kind(rec));
        return NULL;
    }
    const char *const *fields = role == LB_TEXTFILE_PREDICTIONS ? pred_fields : ref_fields;
    for (int i = 0; i < 3; i++) {
        const json_t *v = json_object_get(rec, fields[i]);
        if (v == NULL) continue;
        if (!json_is_string(v)) {
            snprintf(why, why_cap, "field \"%s\" is %s, expected a string", fields[i],
                     lb_result_json_kind(v));
            return NULL;
        }
        *len = json_string_length(v);
        return json_string_value(v);
    }
    snprintf(why, why_cap, "object has none of the fields \"%s\", \"%s\", \"%s\"", fields[0],
             fields[1], fields[2]);
    return NULL;
}

/* The next line of buf[*pos..n) without its "\n"; false at the end. */
static bool next_line(const char *buf, size_t n, size_t *pos, const char **line, size_t *len) {
    if (*pos >= n) return false;
    const char *nl = memchr(buf + *pos, '\n', n - *pos);
    size_t end = nl ? (size_t)(nl - buf) : n;
    *line = buf + *pos;
    *len = end - *pos;
    *pos = end + 1;
    return true;
}

static lb_status read_jsonl(const char *path, const char *buf, size_t n, lb_textfile_role role,
                            lb_textfile *f, size_t *cap, lb_err *err) {
    const char *line;
    size_t len, pos = 0;
    for (size_t line_no = 1; next_line(buf, n, &pos, &line, &len); line_no++) {
        const char *nul = memchr(line, '\0', len);
        if (nul != NULL)
            return lb_fail(err, LB_ERR_USAGE,
                           "%s:%zu: NUL byte at byte %zu of the line (texts must be UTF-8)", path,
                           line_no, (size_t)(nul - line) + 1);
        size_t k = 0;
        while (k < len && strchr(" \t\r\f\v", line[k]) != NULL)
            k++;
        if (k == len) continue;
        json_error_t je;
        json_t *rec = json_loadb(line, len, JSON_DECODE_ANY, &je);
        if (rec == NULL)
            return lb_fail(err, LB_ERR_USAGE,
                           "%s:%zu: not valid JSON: %s (a file that starts with '{' or '\"' "
                           "is JSON Lines: one JSON record per line)",
                           path, line_no, je.text);
        char why[160];
        size_t text_len = 0;
        const char *text = record_text(rec, role, &text_len, why, sizeof why);
        lb_status st = text ? push(f, cap, text, text_len, err)
                            : lb_fail(err, LB_ERR_USAGE, "%s:%zu: %s", path, line_no, why);
        json_decref(rec);
        LB_TRY(st);
    }
    return LB_OK;
}

static lb_status read_json_array(const char *path, const char *buf, size_t n, lb_textfile_role role,
                                 lb_textfile *f, size_t *cap, lb_err *err) {
    json_error_t je;
    json_t *doc = json_loadb(buf, n, 0, &je);
    if (doc == NULL)
        return lb_fail(err, LB_ERR_USAGE, "%s:%d: not valid JSON: %s", path, je.line, je.text);
    lb_status st = LB_OK;
    if (!json_is_array(doc))
        st = lb_fail(err, LB_ERR_USAGE, "%s: expected a JSON array of records, got %s", path,
                     lb_result_json_kind(doc));
    for (size_t i = 0; st == LB_OK && i < json_array_size(doc); i++) {
        char why[160];
        size_t text_len = 0;
        const char *text = record_text(json_array_get(doc, i), role, &text_len, why, sizeof why);
        st = text ? push(f, cap, text, text_len, err)
                  : lb_fail(err, LB_ERR_USAGE, "%s: record %zu of the array: %s", path, i + 1, why);
    }
    json_decref(doc);
    return st;
}

static lb_status read_lines(const char *path, const char *buf, size_t n, lb_textfile *f,
                            size_t *cap, lb_err *err) {
    const char *line;
    size_t len, pos = 0;
    for (size_t line_no = 1; next_line(buf, n, &pos, &line, &len); line_no++) {
        if (len > 0 && line[len - 1] == '\r') len--;
        for (size_t k = 0; k < len;) {
            uint32_t cp;
            size_t step = lb_utf8_decode(line + k, len - k, &cp);
            if (cp == LB_UTF8_INVALID || cp == 0)
                return lb_fail(err, LB_ERR_USAGE,
                               "%s:%zu: %s at byte %zu of the line (texts "
                               "must be UTF-8)",
                               path, line_no, cp == 0 ? "NUL byte" : "invalid UTF-8", k + 1);
            k += step;
        }
        LB_TRY(push(f, cap, line, len, err));
    }
    return LB_OK;
}

lb_status lb_textfile_read(const char *path, lb_textfile_role role, lb_textfile *out, lb_err *err) {
    memset(out, 0, sizeof *out);
    char *buf = NULL;
    size_t n = 0;
    LB_TRY(lb_file_read(path, &buf, &n, err));
    lb_status st = lb_textfile_parse(buf, n, path, role, out, err);
    free(buf);
    return st;
}

lb_status lb_textfile_parse(const char *buf, size_t n, const char *name, lb_textfile_role role,
                            lb_textfile *out, lb_err *err) {
    memset(out, 0, sizeof *out);
    if (n >= 3 && memcmp(buf, "\xEF\xBB\xBF", 3) == 0) { /* a UTF-8 byte order mark */
        buf += 3;
        n -= 3;
    }
    size_t first = 0;
    while (first < n && strchr(" \t\r\n\f\v", buf[first]) != NULL && buf[first] != '\0')
        first++;
    char c = first < n ? buf[first] : '\0';
    size_t text_cap = 0;
    lb_status st;
    if (c == '{' || c == '"') {
        out->format = "jsonl";
        st = read_jsonl(name, buf, n, role, out, &text_cap, err);
    } else if (c == '[') {
        out->format = "json";
        st = read_json_array(name, buf, n, role, out, &text_cap, err);
    } else {
        out->format = "lines";
        st = read_lines(name, buf, n, out, &text_cap, err);
    }
    if (st != LB_OK) lb_textfile_free(out);
    return st;
}

void lb_textfile_free(lb_textfile *f) {
    if (f == NULL) return;
    for (size_t i = 0; i < f->n; i++)
        free(f->texts[i]);
    free(f->texts);
    f->texts = NULL;
    f->n = 0;
}
