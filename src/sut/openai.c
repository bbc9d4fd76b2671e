/* openai.c: request bodies and response parsing for the OpenAI-compatible API. */
#include "sut/openai.h"

#include <stdlib.h>
#include <string.h>

const char *lb_openai_api_name(lb_api api) {
    return api == LB_API_CHAT ? "chat" : "completions";
}

int lb_openai_api_parse(const char *name) {
    if (strcmp(name, "completions") == 0) return LB_API_COMPLETIONS;
    if (strcmp(name, "chat") == 0) return LB_API_CHAT;
    return -1;
}

const char *lb_openai_api_path(lb_api api) {
    return api == LB_API_CHAT ? "/v1/chat/completions" : "/v1/completions";
}

char *lb_openai_body(const lb_openai_request *req, const char *const *history, size_t n_history,
                     const char *prompt, int32_t max_tokens, size_t *len) {
    json_t *o = json_object();
    if (req->model) json_object_set_new(o, "model", json_string(req->model));
    if (req->api == LB_API_CHAT) {
        json_t *msgs = json_array();
        for (size_t i = 0; i < n_history; i++)
            json_array_append_new(msgs,
                                  json_pack("{s:s, s:s}", "role", i % 2 ? "assistant" : "user",
                                            "content", history[i]));
        json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "user", "content", prompt));
        json_object_set_new(o, "messages", msgs);
    } else
        json_object_set_new(o, "prompt", json_string(prompt));
    json_object_set_new(o, "max_tokens", json_integer(max_tokens));
    json_object_set_new(o, "temperature", json_real(req->temperature));
    if (req->ignore_eos) json_object_set_new(o, "ignore_eos", json_true());
    if (req->stream) {
        json_object_set_new(o, "stream", json_true());
        json_object_set_new(o, "stream_options", json_pack("{s:b}", "include_usage", 1));
    }
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (s != NULL) *len = strlen(s);
    return s;
}

void lb_openai_piece_clear(lb_openai_piece *p) {
    json_decref(p->root);
    *p = (lb_openai_piece){
        .text = "", .reasoning = "", .prompt_tokens = -1, .completion_tokens = -1};
}

/* The value of the four hex digits at s, -1 when they are not. */
static long hex4(const char *s) {
    long v = 0;
    for (int i = 0; i < 4; i++) {
        int c = s[i], d = c >= '0' && c <= '9'   ? c - '0'
                          : c >= 'a' && c <= 'f' ? c - 'a' + 10
                          : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                                 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* Replaces each \u escape of a lone UTF-16 surrogate in s[0..len) by \ufffd (of the same length):
 * JSON's grammar allows them (a server that cuts a text between the halves of a pair sends
 * one per piece) but jansson refuses the whole document. Returns whether one was. */
static bool replace_lone_surrogates(char *s, size_t len) {
    bool replaced = false;
    for (size_t i = 0; i + 6 <= len; i++) {
        if (s[i] != '\\') continue;
        if (s[i + 1] != 'u') { /* another escape (\\, \n, ...): its second byte is skipped */
            i++;
            continue;
        }
        long u = hex4(s + i + 2);
        if (u < 0xD800 || u > 0xDFFF) continue;
        long next = i + 12 <= len && s[i + 6] == '\\' && s[i + 7] == 'u' ? hex4(s + i + 8) : -1;
        if (u <= 0xDBFF && next >= 0xDC00 && next <= 0xDFFF) { /* a whole pair */
            i += 11;
            continue;
        }
        memcpy(s + i + 2, "fffd", 4);
        replaced = true;
        i += 5;
    }
    return replaced;
}

/* Parses data as JSON, a NUL byte (\u0000) kept in strings with their length (a token may
 * decode to one) and a lone surrogate read as U+FFFD. NULL when it is no JSON. */
static json_t *load_json(const char *data, size_t len) {
    json_t *root = json_loadb(data, len, JSON_ALLOW_NUL, NULL);
    if (root != NULL || memmem(data, len, "\\u", 2) == NULL) return root;
    char *copy = malloc(len);
    if (copy == NULL) return NULL;
    memcpy(copy, data, len);
    if (replace_lone_surrogates(copy, len)) root = json_loadb(copy, len, JSON_ALLOW_NUL, NULL);
    free(copy);
    return root;
}

static int64_t usage_count(json_t *usage, const char *key) {
    json_t *v = json_object_get(usage, key);
    return json_is_integer(v) && json_integer_value(v) >= 0 ? (int64_t)json_integer_value(v) : -1;
}

lb_status lb_openai_parse(lb_api api, bool streamed, const char *data, size_t len,
                          lb_openai_piece *out) {
    *out = (lb_openai_piece){
        .text = "", .reasoning = "", .prompt_tokens = -1, .completion_tokens = -1};
    if (streamed && len == 6 && memcmp(data, "[DONE]", 6) == 0) {
        out->done = true;
        return LB_OK;
    }
    json_t *root = load_json(data, len);
    if (!json_is_object(root)) {
        json_decref(root);
        return LB_ERR_FORMAT;
    }
    out->root = root;
    json_t *error = json_object_get(root, "error");
    if (error != NULL && !json_is_null(error)) {
        const char *msg = json_string_value(json_object_get(error, "message"));
        if (msg == NULL) msg = json_string_value(error);
        out->error = msg ? msg : "error without a message";
        return LB_OK;
    }
    json_t *choices = json_object_get(root, "choices");
    json_t *usage = json_object_get(root, "usage");
    if (!json_is_array(choices) || (!streamed && json_array_size(choices) == 0)) {
        lb_openai_piece_clear(out);
        return LB_ERR_FORMAT;
    }
    if (json_is_object(usage)) {
        out->prompt_tokens = usage_count(usage, "prompt_tokens");
        out->completion_tokens = usage_count(usage, "completion_tokens");
    }
    json_t *c0 = json_array_get(choices, 0);
    if (c0 == NULL) return LB_OK; /* the usage-only event */
    if (!json_is_object(c0)) {
        lb_openai_piece_clear(out);
        return LB_ERR_FORMAT;
    }
    json_t *text;
    if (api == LB_API_CHAT) {
        json_t *msg = json_object_get(c0, streamed ? "delta" : "message");
        text = json_object_get(msg, "content");
        json_t *reasoning = json_object_get(msg, "reasoning_content");
        if (!json_is_string(reasoning)) reasoning = json_object_get(msg, "reasoning");
        if (json_is_string(reasoning)) {
            out->reasoning = json_string_value(reasoning);
            out->reasoning_len = json_string_length(reasoning);
        }
    } else
        text = json_object_get(c0, "text");
    if (json_is_string(text)) {
        out->text = json_string_value(text);
        out->text_len = json_string_length(text);
    } else if (text != NULL && !json_is_null(text)) {
        lb_openai_piece_clear(out);
        return LB_ERR_FORMAT;
    }
    return LB_OK;
}
