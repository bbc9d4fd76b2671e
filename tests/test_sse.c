/* test_sse.c: the SSE parser at every split point, line-end variants and limits, and the
 * OpenAI chunk and body parser. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sut/openai.h"
#include "sut/sse.h"

typedef struct {
    char events[16][256];
    int n;
} collected;

static int collect(void *user, const char *data, size_t len) {
    collected *c = user;
    if (c->n < 16 && len < 256) {
        memcpy(c->events[c->n], data, len);
        c->events[c->n][len] = '\0';
    }
    c->n++;
    return 0;
}

static const char stream[] = ": keep-alive comment\r\n"
                             "data: {\"choices\":[{\"text\":\"Hel\"}]}\r\n\r\n"
                             "event: message\n"
                             "data:{\"choices\":[{\"text\":\"lo\"}]}\n\n"
                             "id: 7\r"
                             "data: line one\r"
                             "data: line two\r\r"
                             "data\n\n"
                             "data: [DONE]\n\n";

static void check_events(const collected *c) {
    assert_int_equal(c->n, 5);
    assert_string_equal(c->events[0], "{\"choices\":[{\"text\":\"Hel\"}]}");
    assert_string_equal(c->events[1], "{\"choices\":[{\"text\":\"lo\"}]}");
    assert_string_equal(c->events[2], "line one\nline two");
    assert_string_equal(c->events[3], "");
    assert_string_equal(c->events[4], "[DONE]");
}

static void test_sse_same_events_for_every_split_point(void **state) {
    (void)state;
    size_t n = strlen(stream);
    for (size_t cut1 = 0; cut1 <= n; cut1++) {
        for (size_t cut2 = cut1; cut2 <= n; cut2 += 7) {
            lb_sse_parser p;
            lb_sse_init(&p, 1 << 16);
            collected c = {.n = 0};
            assert_int_equal(lb_sse_feed(&p, stream, cut1, collect, &c), 0);
            assert_int_equal(lb_sse_feed(&p, stream + cut1, cut2 - cut1, collect, &c), 0);
            assert_int_equal(lb_sse_feed(&p, stream + cut2, n - cut2, collect, &c), 0);
            check_events(&c);
            assert_false(lb_sse_pending(&p));
            lb_sse_free(&p);
        }
    }
}

/* A stream may open with a UTF-8 byte order mark (the format says to drop it): the first
 * event is still a data event, wherever the pieces are cut. */
static void test_sse_leading_byte_order_mark_is_dropped(void **state) {
    (void)state;
    static const char bom_stream[] = "\xEF\xBB\xBF"
                                     "data: {\"choices\":[{\"text\":\"Hel\"}]}\n\n"
                                     "data: [DONE]\n\n";
    size_t n = strlen(bom_stream);
    for (size_t cut1 = 0; cut1 <= n; cut1++) {
        for (size_t cut2 = cut1; cut2 <= n; cut2++) {
            lb_sse_parser p;
            lb_sse_init(&p, 1 << 16);
            collected c = {.n = 0};
            assert_int_equal(lb_sse_feed(&p, bom_stream, cut1, collect, &c), 0);
            assert_int_equal(lb_sse_feed(&p, bom_stream + cut1, cut2 - cut1, collect, &c), 0);
            assert_int_equal(lb_sse_feed(&p, bom_stream + cut2, n - cut2, collect, &c), 0);
            assert_int_equal(c.n, 2);
            assert_string_equal(c.events[0], "{\"choices\":[{\"text\":\"Hel\"}]}");
            assert_string_equal(c.events[1], "[DONE]");
            /* only the stream's first bytes: a reset starts a new stream */
            lb_sse_reset(&p);
            c.n = 0;
            assert_int_equal(lb_sse_feed(&p, bom_stream, n, collect, &c), 0);
            assert_int_equal(c.n, 2);
            lb_sse_free(&p);
        }
    }
}

static void test_sse_byte_by_byte(void **state) {
    (void)state;
    lb_sse_parser p;
    lb_sse_init(&p, 1 << 16);
    collected c = {.n = 0};
    for (size_t i = 0; stream[i]; i++)
        assert_int_equal(lb_sse_feed(&p, stream + i, 1, collect, &c), 0);
    check_events(&c);
    lb_sse_free(&p);
}

static void test_sse_cut_stream_leaves_pending_bytes(void **state) {
    (void)state;
    lb_sse_parser p;
    lb_sse_init(&p, 1 << 16);
    collected c = {.n = 0};
    const char *cut = "data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: {\"choi";
    assert_int_equal(lb_sse_feed(&p, cut, strlen(cut), collect, &c), 0);
    assert_int_equal(c.n, 1);
    assert_true(lb_sse_pending(&p));
    lb_sse_reset(&p);
    assert_false(lb_sse_pending(&p));
    /* An event with its data line but no blank line yet is pending too. */
    assert_int_equal(lb_sse_feed(&p, "data: x\n", 8, collect, &c), 0);
    assert_true(lb_sse_pending(&p));
    lb_sse_free(&p);
}

static void test_sse_event_over_limit_is_an_error(void **state) {
    (void)state;
    lb_sse_parser p;
    lb_sse_init(&p, 64);
    collected c = {.n = 0};
    char big[200];
    memset(big, 'x', sizeof big);
    assert_int_equal(lb_sse_feed(&p, "data: ", 6, collect, &c), 0);
    assert_int_equal(lb_sse_feed(&p, big, sizeof big, collect, &c), LB_SSE_TOO_LARGE);
    lb_sse_free(&p);
    lb_sse_init(&p, 64);
    /* Many data lines adding up past the limit. */
    int rc = 0;
    for (int i = 0; i < 20 && rc == 0; i++)
        rc = lb_sse_feed(&p, "data: 0123456789\n", 17, collect, &c);
    assert_int_equal(rc, LB_SSE_TOO_LARGE);
    assert_int_equal(c.n, 0);
    lb_sse_free(&p);
}

static int stop_at_second(void *user, const char *data, size_t len) {
    (void)data;
    (void)len;
    int *n = user;
    return ++*n == 2 ? 42 : 0;
}

static void test_sse_callback_can_stop_parsing(void **state) {
    (void)state;
    lb_sse_parser p;
    lb_sse_init(&p, 1 << 10);
    int n = 0;
    assert_int_equal(lb_sse_feed(&p, "data: a\n\ndata: b\n\ndata: c\n\n", 27, stop_at_second, &n),
                     42);
    assert_int_equal(n, 2);
    lb_sse_free(&p);
}

static void test_openai_parses_completion_chat_usage_done_and_errors(void **state) {
    (void)state;
    lb_openai_piece piece;
    const char *c1 =
        "{\"id\":\"x\",\"choices\":[{\"index\":0,\"text\":\" world\",\"finish_reason\":null}]}";
    assert_int_equal(lb_openai_parse(LB_API_COMPLETIONS, true, c1, strlen(c1), &piece), LB_OK);
    assert_int_equal(piece.text_len, 6);
    assert_string_equal(piece.text, " world");
    assert_int_equal(piece.completion_tokens, -1);
    lb_openai_piece_clear(&piece);

    /* a NUL byte in a token's text (escaped by the server) is text like any other */
    const char *nul = "{\"choices\":[{\"text\":\"a\\u0000b\"}]}";
    assert_int_equal(lb_openai_parse(LB_API_COMPLETIONS, true, nul, strlen(nul), &piece), LB_OK);
    assert_int_equal(piece.text_len, 3);
    assert_memory_equal(piece.text, "a\0b", 3);
    lb_openai_piece_clear(&piece);

    const char *c2 = "{\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}";
    assert_int_equal(lb_openai_parse(LB_API_CHAT, true, c2, strlen(c2), &piece), LB_OK);
    assert_string_equal(piece.text, "Hi");
    lb_openai_piece_clear(&piece);

    const char *role = "{\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}";
    assert_int_equal(lb_openai_parse(LB_API_CHAT, true, role, strlen(role), &piece), LB_OK);
    assert_int_equal(piece.text_len, 0);
    lb_openai_piece_clear(&piece);

    const char *u = "{\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":34}}";
    assert_int_equal(lb_openai_parse(LB_API_COMPLETIONS, true, u, strlen(u), &piece), LB_OK);
    assert_int_equal(piece.prompt_tokens, 12);
    assert_int_equal(piece.completion_tokens, 34);
    assert_int_equal(piece.text_len, 0);
    lb_openai_piece_clear(&piece);

    assert_int_equal(lb_openai_parse(LB_API_COMPLETIONS, true, "[DONE]", 6, &piece), LB_OK);
    assert_true(piece.done);
    lb_openai_piece_clear(&piece);

    const char *e = "{\"error\":{\"message\":\"model overloaded\",\"code\":503}}";
    assert_int_equal(lb_openai_parse(LB_API_COMPLETIONS, true, e, strlen(e), &piece), LB_OK);
    assert_string_equal(piece.error, "model overloaded");
    lb_openai_piece_clear(&piece);

    assert_int_equal(lb_openai_parse(LB_API_COMPLETIONS, true, "{nope", 5, &piece), LB_ERR_FORMAT);
    assert_null(piece.root);
    assert_int_equal(lb_openai_parse(LB_API_COMPLETIONS, true, "[1,2]", 5, &piece), LB_ERR_FORMAT);
    assert_int_equal(
        lb_openai_parse(LB_API_COMPLETIONS, true, "{\"choices\":[{\"text\":5}]}", 24, &piece),
        LB_ERR_FORMAT);
    /* A whole answer needs at least one choice. */
    assert_int_equal(lb_openai_parse(LB_API_COMPLETIONS, false, "{\"choices\":[]}", 14, &piece),
                     LB_ERR_FORMAT);
    const char *body =
        "{\"choices\":[{\"message\":{\"role\":\"assistant\",\"content\":\"Done.\"}}],"
        "\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}";
    assert_int_equal(lb_openai_parse(LB_API_CHAT, false, body, strlen(body), &piece), LB_OK);
    assert_string_equal(piece.text, "Done.");
    assert_int_equal(piece.completion_tokens, 2);
    lb_openai_piece_clear(&piece);
}

/* Text as a JSON escape: a surrogate pair is one character; a lone surrogate (a server that
 * cut a text between the halves of a pair) is U+FFFD, the rest of the piece kept, where it
 * used to fail the whole request as bad JSON. */
static void test_openai_surrogate_pairs_and_lone_surrogates(void **state) {
    (void)state;
    static const struct {
        const char *data, *text;
    } cases[] = {
        {"{\"choices\":[{\"text\":\"\\ud83d\\ude00\"}]}", "\xF0\x9F\x98\x80"},
        {"{\"choices\":[{\"text\":\"\\uD83D\"}]}", "\xEF\xBF\xBD"},
        {"{\"choices\":[{\"text\":\"\\ude00x\"}]}", "\xEF\xBF\xBDx"},
        {"{\"choices\":[{\"text\":\"a\\ud83d\\ud83d\\ude00\"}]}", "a\xEF\xBF\xBD\xF0\x9F\x98\x80"},
        /* an escaped backslash before "ud83d" is no escape of a surrogate */
        {"{\"choices\":[{\"text\":\"\\\\ud83d\\ud83d\"}]}", "\\ud83d\xEF\xBF\xBD"},
        {"{\"choices\":[{\"text\":\"\\ud83d\"}],\"usage\":{\"prompt_tokens\":1,"
         "\"completion_tokens\":1}}",
         "\xEF\xBF\xBD"},
    };
    lb_openai_piece piece;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *d = cases[i].data;
        if (lb_openai_parse(LB_API_COMPLETIONS, true, d, strlen(d), &piece) != LB_OK)
            fail_msg("refused: %s", d);
        assert_int_equal(piece.text_len, strlen(cases[i].text));
        assert_memory_equal(piece.text, cases[i].text, piece.text_len);
        lb_openai_piece_clear(&piece);
    }
    const char *chat = "{\"choices\":[{\"delta\":{\"content\":\"\\udbff\"}}]}";
    assert_int_equal(lb_openai_parse(LB_API_CHAT, true, chat, strlen(chat), &piece), LB_OK);
    assert_string_equal(piece.text, "\xEF\xBF\xBD");
    lb_openai_piece_clear(&piece);
    /* still no JSON without its closing brace */
    const char *cut = "{\"choices\":[{\"text\":\"\\ud83d\"}]";
    assert_int_equal(lb_openai_parse(LB_API_COMPLETIONS, true, cut, strlen(cut), &piece),
                     LB_ERR_FORMAT);
    assert_null(piece.root);
}

/* A chat piece of a reasoning model's thinking (vLLM's and SGLang's reasoning_content, newer
 * vLLM's reasoning; in a stream's delta or a whole answer's message) says how much it
 * carries, apart from the answer's text; the completions API has none. */
static void test_openai_reasoning_is_counted_apart_from_the_answer(void **state) {
    (void)state;
    static const struct {
        lb_api api;
        bool streamed;
        const char *data;
        size_t reasoning_len;
        const char *text;
    } cases[] = {
        {LB_API_CHAT, true, "{\"choices\":[{\"delta\":{\"reasoning_content\":\"Let me\"}}]}", 6,
         ""},
        {LB_API_CHAT, true, "{\"choices\":[{\"delta\":{\"reasoning\":\"so\",\"content\":null}}]}",
         2, ""},
        {LB_API_CHAT, true,
         "{\"choices\":[{\"delta\":{\"reasoning_content\":null,\"reasoning\":\"x\",\"content\":"
         "\"A\"}}]}",
         1, "A"},
        {LB_API_CHAT, true, "{\"choices\":[{\"delta\":{\"content\":\"A\"}}]}", 0, "A"},
        {LB_API_COMPLETIONS, true, "{\"choices\":[{\"text\":\"A\",\"reasoning_content\":\"x\"}]}",
         0, "A"},
        {LB_API_CHAT, false,
         "{\"choices\":[{\"message\":{\"reasoning_content\":\"think\",\"content\":\"A\"}}]}", 5,
         "A"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        lb_openai_piece piece;
        const char *d = cases[i].data;
        if (lb_openai_parse(cases[i].api, cases[i].streamed, d, strlen(d), &piece) != LB_OK)
            fail_msg("refused: %s", d);
        assert_int_equal(piece.reasoning_len, cases[i].reasoning_len);
        assert_string_equal(piece.text, cases[i].text);
        lb_openai_piece_clear(&piece);
    }
}

static void test_openai_body_asks_for_usage_when_streaming(void **state) {
    (void)state;
    lb_openai_request req = {.api = LB_API_CHAT, .model = "m", .stream = true, .temperature = 0};
    size_t len = 0;
    char *b = lb_openai_body(&req, NULL, 0, "Say \"hi\"", 16, &len);
    assert_non_null(b);
    assert_int_equal(len, strlen(b));
    json_t *j = json_loads(b, 0, NULL);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "model")), "m");
    assert_int_equal(json_integer_value(json_object_get(j, "max_tokens")), 16);
    assert_true(json_is_true(json_object_get(j, "stream")));
    assert_true(
        json_is_true(json_object_get(json_object_get(j, "stream_options"), "include_usage")));
    json_t *msg = json_array_get(json_object_get(j, "messages"), 0);
    assert_string_equal(json_string_value(json_object_get(msg, "content")), "Say \"hi\"");
    json_decref(j);
    free(b);
    req.api = LB_API_COMPLETIONS;
    req.stream = false;
    b = lb_openai_body(&req, NULL, 0, "p", 1, &len);
    j = json_loads(b, 0, NULL);
    assert_string_equal(json_string_value(json_object_get(j, "prompt")), "p");
    assert_null(json_object_get(j, "stream"));
    json_decref(j);
    free(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sse_same_events_for_every_split_point),
        cmocka_unit_test(test_sse_leading_byte_order_mark_is_dropped),
        cmocka_unit_test(test_sse_byte_by_byte),
        cmocka_unit_test(test_sse_cut_stream_leaves_pending_bytes),
        cmocka_unit_test(test_sse_event_over_limit_is_an_error),
        cmocka_unit_test(test_sse_callback_can_stop_parsing),
        cmocka_unit_test(test_openai_parses_completion_chat_usage_done_and_errors),
        cmocka_unit_test(test_openai_surrogate_pairs_and_lone_surrogates),
        cmocka_unit_test(test_openai_reasoning_is_counted_apart_from_the_answer),
        cmocka_unit_test(test_openai_body_asks_for_usage_when_streaming),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
