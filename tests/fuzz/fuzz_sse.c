/* fuzz_sse.c: the server-sent events parser (sut/sse.h) on arbitrary byte streams,
 * each event's data then through the streamed OpenAI chunk parser (sut/openai.h), as
 * the load generator's HTTP client chains them.
 *
 * The stream is fed twice: whole, and cut into pieces whose sizes come from the input's
 * own bytes (so a cut falls inside "\r\n", inside a field name or a UTF-8 character).
 * Where line buffering makes no difference (no line longer than the limit) the two must
 * produce the same events; every event's data is NUL-terminated, within the limit, and
 * holds no line end that the format forbids (only the "\n" joining data lines). */
#include <string.h>

#include "fuzz.h"
#include "sut/openai.h"
#include "sut/sse.h"

#define MAX_EVENT_BYTES 512

typedef struct {
    uint64_t hash; /* of every event's length and bytes, in order */
    size_t events;
} event_log;

static int on_event(void *user, const char *data, size_t len) {
    event_log *log = user;
    FUZZ_CHECK(len <= MAX_EVENT_BYTES);
    FUZZ_CHECK(data[len] == '\0');
    FUZZ_CHECK(memchr(data, '\r', len) == NULL);
    uint64_t h = log->hash ^ (len * 0x9e3779b97f4a7c15u);
    for (size_t i = 0; i < len; i++)
        h = (h ^ (uint8_t)data[i]) * 0x100000001b3u;
    log->hash = h;
    log->events++;
    for (int api = LB_API_COMPLETIONS; api <= LB_API_CHAT; api++) {
        lb_openai_piece piece;
        if (lb_openai_parse((lb_api)api, true, data, len, &piece) == LB_OK) {
            FUZZ_CHECK(piece.text != NULL && strlen(piece.text) == piece.text_len);
            FUZZ_CHECK(piece.prompt_tokens >= -1 && piece.completion_tokens >= -1);
            if (piece.error) fuzz_touch(piece.error, strlen(piece.error) + 1);
        } else {
            FUZZ_CHECK(piece.root == NULL && !piece.done);
        }
        lb_openai_piece_clear(&piece);
    }
    return 0;
}

/* True when some line of the stream is longer than the limit, counting every line end
 * the parser knows (\n, \r, \r\n). */
static bool has_long_line(const uint8_t *s, size_t n) {
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\n' || s[i] == '\r') {
            run = 0;
        } else if (++run > MAX_EVENT_BYTES) {
            return true;
        }
    }
    return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *s = (const char *)data;
    lb_sse_parser p;
    lb_sse_init(&p, MAX_EVENT_BYTES);
    event_log whole = {0}, pieces = {0};
    int rc_whole = lb_sse_feed(&p, s, size, on_event, &whole);
    FUZZ_CHECK(rc_whole == 0 || rc_whole == LB_SSE_TOO_LARGE);

    lb_sse_reset(&p);
    FUZZ_CHECK(!lb_sse_pending(&p));
    int rc_pieces = 0;
    for (size_t pos = 0, k = 0; pos < size && rc_pieces == 0; k++) {
        size_t cut = 1 + data[k % size] % 7;
        if (cut > size - pos) cut = size - pos;
        rc_pieces = lb_sse_feed(&p, s + pos, cut, on_event, &pieces);
        pos += cut;
    }
    FUZZ_CHECK(rc_pieces == 0 || rc_pieces == LB_SSE_TOO_LARGE);
    if (!has_long_line(data, size)) {
        FUZZ_CHECK(rc_whole == rc_pieces);
        FUZZ_CHECK(whole.events == pieces.events && whole.hash == pieces.hash);
    }
    lb_sse_free(&p);
    return 0;
}
