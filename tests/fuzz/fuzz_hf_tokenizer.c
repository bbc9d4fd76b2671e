/* fuzz_hf_tokenizer.c: lb_hf_tokenizer_parse (model/hf_tokenizer.h) on arbitrary bytes.
 *
 * A refused tokenizer.json must name the file and leave nothing behind; an accepted one
 * must encode a fixed text (letters, digits, spaces, newlines, a special-token spelling,
 * bytes that are not UTF-8) to ids that decode back to exactly that text. */
#include <string.h>

#include "fuzz.h"
#include "model/hf_tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    lb_tokenizer *tok = NULL;
    lb_err err = {{0}};
    if (lb_hf_tokenizer_parse(&tok, (const char *)data, size, "fuzz/tokenizer.json", &err) !=
        LB_OK) {
        FUZZ_CHECK(tok == NULL);
        FUZZ_CHECK(strstr(err.msg, "fuzz/tokenizer.json") != NULL);
        return 0;
    }
    static const char text[] = "Hello, world 12345\n\n  it's <|eot_id|> \xff\xfe ok";
    uint32_t *ids = NULL;
    size_t n = 0;
    FUZZ_CHECK(lb_tokenizer_encode(tok, text, sizeof text - 1, &ids, &n, &err) == LB_OK);
    char *back = NULL;
    size_t len = 0;
    FUZZ_CHECK(lb_tokenizer_decode(tok, ids, n, &back, &len, &err) == LB_OK);
    FUZZ_CHECK(len == sizeof text - 1 && memcmp(back, text, len) == 0);
    free(back);
    free(ids);
    lb_tokenizer_free(tok);
    return 0;
}
