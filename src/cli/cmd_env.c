/* cmd_env.c: `llmbench env`: print what this machine is (the provenance every run
 * carries), as a table or as JSON. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "comm/comminfo.h"
#include "core/provenance.h"
#include "core/status.h"
#include "gpu/devinfo.h"

/* One key: an object or a list of objects (each GPU) as an indented block, a byte count
 * with its GiB beside it, a string as its text, anything else as its JSON text. */
static void print_value(const char *key, json_t *v, int indent) {
    if (json_is_object(v)) {
        printf("%*s%s:\n", indent, "", key);
        const char *k;
        json_t *sub;
        json_object_foreach(v, k, sub) print_value(k, sub, indent + 2);
        return;
    }
    if (json_is_array(v) && json_array_size(v) > 0 && json_is_object(json_array_get(v, 0))) {
        size_t i;
        json_t *item;
        json_array_foreach(v, i, item) {
            char name[64];
            snprintf(name, sizeof name, "%s[%zu]", key, i);
            print_value(name, item, indent);
        }
        return;
    }
    size_t len = strlen(key);
    if (json_is_integer(v) && len > 6 && strcmp(key + len - 6, "_bytes") == 0) {
        printf("%*s%-18s %lld (%.1f GiB)\n", indent, "", key, (long long)json_integer_value(v),
               (double)json_integer_value(v) / (1024.0 * 1024.0 * 1024.0));
        return;
    }
    /* a string as it is, its control characters as '?' (an environment variable's newline
     * or terminal escape would break the table or reach the terminal) */
    char *text = json_is_string(v) ? strdup(json_string_value(v))
                                   : json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    printf("%*s%-18s %s\n", indent, "", key, text ? lb_status_printable(text) : "");
    free(text);
}

int lb_cmd_env(int argc, char **argv) {
    static const lb_cli_command cmd = {
        .command = "env",
        .usage = "[options]",
        .summary = "Prints what this machine is: host, OS, CPU, memory, GPUs, driver, CUDA "
                   "runtime, NCCL, MPI, library versions and the recorded environment.",
        .specs = NULL,
        .n_specs = 0,
    };
    lb_args a;
    int rc = lb_args_parse(&cmd, argc, argv, &a);
    if (rc != LB_ARGS_GO_ON) return rc;
    json_t *p = lb_provenance_collect(0, NULL);
    json_object_del(p, "command_line"); /* a run's, not the machine's */
    lb_devinfo_add(p);
    lb_comminfo_add(p);
    if (a.common.json) {
        json_dumpf(p, stdout, JSON_INDENT(2));
        printf("\n");
    } else {
        const char *k;
        json_t *v;
        json_object_foreach(p, k, v) print_value(k, v, 0);
    }
    json_decref(p);
    return 0;
}
