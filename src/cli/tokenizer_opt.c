/* tokenizer_opt.c: opening the tokenizer that --tokenizer and its companions name. */
#include "cli/tokenizer_opt.h"

#include <stdio.h>

#include "model/hf_tokenizer.h"

lb_status lb_tokenizer_opt_open(const lb_tokenizer_opt *opt, lb_tokenizer **out, lb_err *err) {
    lb_tokenizer_params p = lb_tokenizer_default_params();
    LB_TRY(lb_tokenizer_pattern_parse(opt->pattern, &p.pattern, err));
    LB_TRY(lb_tokenizer_special_parse(opt->special, &p.special, err));
    lb_status st = lb_hf_tokenizer_load(out, opt->path, &p, err);
    if (st != LB_OK) { /* the message names the file; the option is said here */
        lb_err why = *err;
        /* it may quote the file's bytes: a newline or an escape there would break the line */
        lb_fail(err, st, "--tokenizer: %s", lb_status_printable(why.msg));
    }
    return st;
}

void lb_tokenizer_opt_describe(const lb_tokenizer_opt *opt, const lb_tokenizer *tok, char *buf,
                               size_t cap) {
    const lb_tokenizer_info *in = lb_tokenizer_get_info(tok);
    snprintf(buf, cap, "%s: %zu ranks + %zu special (%s), pattern %s%s", opt->path, in->n_ranks,
             in->n_special, lb_tokenizer_special_name(in->special),
             lb_tokenizer_pattern_name(in->pattern), in->jit ? " (PCRE2 JIT)" : "");
}
