/* fuzz_dataset.c: the load generator's dataset parsers (loadgen/dataset.h) on arbitrary
 * bytes: every input goes through the cnn_eval, JSONL and ShareGPT parsers alike, so one
 * corpus of all three formats feeds all three.
 *
 * A refused dataset must be empty and its message must name the file; an accepted one has
 * at least one sample, every prompt present, non-empty and NUL-terminated, a token count
 * unknown (-1) or at least 1, the format's fields as dataset.h promises (cnn: the MLPerf
 * template around the article and 128 output tokens; JSONL: max_tokens 0 or within
 * [1, 1000000]; ShareGPT: a reference for every prompt). */
#include <string.h>

#include "fuzz.h"
#include "loadgen/dataset.h"

static void check_refused(const lb_dataset *d, const lb_err *err) {
    FUZZ_CHECK(d->n == 0 && d->samples == NULL);
    FUZZ_CHECK(strstr(err->msg, "fuzz.json") != NULL);
}

static void check_samples(const lb_dataset *d) {
    FUZZ_CHECK(d->n > 0 && d->samples != NULL);
    for (size_t i = 0; i < d->n; i++) {
        const lb_sample *s = &d->samples[i];
        FUZZ_CHECK(s->prompt != NULL);
        fuzz_touch(s->prompt, strlen(s->prompt) + 1);
        if (s->reference) fuzz_touch(s->reference, strlen(s->reference) + 1);
        FUZZ_CHECK(s->prompt[0] != '\0');                          /* no server takes "" */
        FUZZ_CHECK(s->input_tokens == -1 || s->input_tokens >= 1); /* tok_input: not [] */
        FUZZ_CHECK(s->max_tokens >= 0 && s->max_tokens <= 1000000);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *buf = (const char *)data;
    lb_dataset d;
    lb_err err = {{0}};

    if (lb_dataset_parse_cnn(buf, size, "fuzz.json", &d, &err) == LB_OK) {
        check_samples(&d);
        FUZZ_CHECK(strcmp(d.format, "cnn") == 0);
        static const char tmpl[] = LB_CNN_PROMPT_TEMPLATE;
        const size_t head = (size_t)(strstr(tmpl, "{input}") - tmpl);
        for (size_t i = 0; i < d.n; i++) {
            FUZZ_CHECK(strncmp(d.samples[i].prompt, tmpl, head) == 0);
            FUZZ_CHECK(d.samples[i].max_tokens == LB_CNN_MAX_TOKENS);
        }
        lb_dataset_free(&d);
        FUZZ_CHECK(d.n == 0 && d.samples == NULL);
    } else {
        check_refused(&d, &err);
    }

    if (lb_dataset_parse_jsonl(buf, size, "fuzz.json", &d, &err) == LB_OK) {
        check_samples(&d);
        FUZZ_CHECK(strcmp(d.format, "jsonl") == 0);
        size_t lines = 1;
        for (size_t i = 0; i < size; i++)
            lines += buf[i] == '\n';
        FUZZ_CHECK(d.n <= lines);
        for (size_t i = 0; i < d.n; i++)
            FUZZ_CHECK(d.samples[i].input_tokens == -1);
        lb_dataset_free(&d);
    } else {
        check_refused(&d, &err);
    }

    if (lb_dataset_parse_sharegpt(buf, size, "fuzz.json", &d, &err) == LB_OK) {
        check_samples(&d);
        FUZZ_CHECK(strcmp(d.format, "sharegpt") == 0);
        for (size_t i = 0; i < d.n; i++)
            FUZZ_CHECK(d.samples[i].reference != NULL);
        lb_dataset_free(&d);
    } else {
        check_refused(&d, &err);
    }

    if (lb_dataset_parse_sharegpt_turns(buf, size, "fuzz.json", &d, &err) == LB_OK) {
        check_samples(&d);
        for (size_t i = 0; i < d.n; i++) { /* chains go forward, histories are pairs */
            FUZZ_CHECK(d.samples[i].next_turn < 0 || (size_t)d.samples[i].next_turn > i);
            FUZZ_CHECK(d.samples[i].n_history % 2 == 0);
            FUZZ_CHECK(d.samples[i].follow_up == (d.samples[i].n_history > 0));
        }
        lb_dataset_free(&d);
    } else {
        check_refused(&d, &err);
    }
    return 0;
}
