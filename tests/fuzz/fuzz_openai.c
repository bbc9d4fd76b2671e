/* fuzz_openai.c: the OpenAI-compatible response parser (sut/openai.h) on arbitrary
 * bytes, as a whole response body and as one streamed event's data, for both APIs.
 *
 * Accepted: the text is a NUL-free string of the stated length inside the JSON tree, token
 * counts are -1 or non-negative, an error message is readable; a whole body never parses
 * as "[DONE]". Refused: the piece is cleared (no tree kept). Clearing twice is safe. */
#include <string.h>

#include "fuzz.h"
#include "sut/openai.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *s = (const char *)data;
    for (int api = LB_API_COMPLETIONS; api <= LB_API_CHAT; api++) {
        for (int streamed = 0; streamed <= 1; streamed++) {
            lb_openai_piece piece;
            lb_status st = lb_openai_parse((lb_api)api, streamed, s, size, &piece);
            if (st == LB_OK) {
                FUZZ_CHECK(piece.text != NULL && strlen(piece.text) == piece.text_len);
                FUZZ_CHECK(piece.prompt_tokens >= -1 && piece.completion_tokens >= -1);
                if (piece.error) fuzz_touch(piece.error, strlen(piece.error) + 1);
                if (piece.done) FUZZ_CHECK(streamed && size == 6 && piece.root == NULL);
                if (!piece.done) FUZZ_CHECK(piece.root != NULL);
            } else {
                FUZZ_CHECK(st == LB_ERR_FORMAT);
                FUZZ_CHECK(piece.root == NULL && !piece.done && piece.error == NULL);
            }
            lb_openai_piece_clear(&piece);
            lb_openai_piece_clear(&piece);
        }
    }
    return 0;
}
