/* test_deploy.c: the files of deploy/ carry what they must, read by a YAML parser
 * (libyaml), not by grep: the serve replicas' command, GPU request and Service; the load
 * Job against that Service; the Indexed Job's torchrun variables and GPU request; the
 * nightly CronJob equal to what `schedule add --backend kubernetes` prints; the Dockerfile's
 * two stages; the Slurm script's syntax (bash -n) and directives. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <yaml.h>

#include <cmocka.h>

#include "test_util.h"

#define DEPLOY LB_TEST_FIXTURES "/../../deploy"

static char out[1 << 20], err[1 << 16];

typedef struct {
    yaml_document_t docs[4];
    int n;
} yaml_file;

static void load(const char *name, yaml_file *y) {
    char path[512];
    snprintf(path, sizeof path, DEPLOY "/%s", name);
    size_t n = 0;
    char *text = lb_test_read_file(path, &n);
    if (text == NULL) fail_msg("cannot read %s", path);
    yaml_parser_t parser;
    assert_true(yaml_parser_initialize(&parser));
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, n);
    y->n = 0;
    for (;;) {
        assert_true(y->n < 4);
        if (!yaml_parser_load(&parser, &y->docs[y->n]))
            fail_msg("%s: %s at line %zu", name, parser.problem, parser.problem_mark.line + 1);
        if (yaml_document_get_root_node(&y->docs[y->n]) == NULL) {
            yaml_document_delete(&y->docs[y->n]);
            break;
        }
        y->n++;
    }
    yaml_parser_delete(&parser);
    free(text);
}

static void unload(yaml_file *y) {
    for (int i = 0; i < y->n; i++)
        yaml_document_delete(&y->docs[i]);
}

/* Undoes "~1" -> "/" in place (JSON Pointer's escape, for keys like nvidia.com/gpu). */
static void unescape(char *k) {
    char *o = k;
    for (char *p = k; *p; p++) {
        if (p[0] == '~' && p[1] == '1') {
            *o++ = '/';
            p++;
        } else {
            *o++ = *p;
        }
    }
    *o = '\0';
}

/* The node at a path of mapping keys and sequence indices ("0") from the root. */
static yaml_node_t *at(yaml_document_t *d, const char *path) {
    yaml_node_t *n = yaml_document_get_root_node(d);
    char buf[512];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *save = NULL, *k = strtok_r(buf, "/", &save); k && n;
         k = strtok_r(NULL, "/", &save)) {
        yaml_node_t *next = NULL;
        unescape(k);
        if (n->type == YAML_MAPPING_NODE) {
            for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top;
                 p++)
                if (strcmp((char *)yaml_document_get_node(d, p->key)->data.scalar.value, k) == 0)
                    next = yaml_document_get_node(d, p->value);
        } else if (n->type == YAML_SEQUENCE_NODE) {
            size_t i = (size_t)atoi(k);
            if (n->data.sequence.items.start + i < n->data.sequence.items.top)
                next = yaml_document_get_node(d, n->data.sequence.items.start[i]);
        }
        n = next;
    }
    return n;
}

static const char *str(yaml_document_t *d, const char *path) {
    yaml_node_t *n = at(d, path);
    if (n == NULL || n->type != YAML_SCALAR_NODE) fail_msg("no scalar at %s", path);
    return (const char *)n->data.scalar.value;
}

/* The container's command as one space-separated line. */
static void command_line(yaml_document_t *d, const char *container, char *buf, size_t cap) {
    char path[256];
    snprintf(path, sizeof path, "%s/command", container);
    yaml_node_t *c = at(d, path);
    assert_non_null(c);
    assert_int_equal(c->type, YAML_SEQUENCE_NODE);
    size_t len = 0;
    buf[0] = '\0';
    for (yaml_node_item_t *i = c->data.sequence.items.start; i < c->data.sequence.items.top; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%s", len ? " " : "",
                                (char *)yaml_document_get_node(d, *i)->data.scalar.value);
}

static bool has_env(yaml_document_t *d, const char *container, const char *name) {
    for (int i = 0; i < 16; i++) {
        char path[256];
        snprintf(path, sizeof path, "%s/env/%d/name", container, i);
        yaml_node_t *n = at(d, path);
        if (n == NULL) return false;
        if (strcmp((char *)n->data.scalar.value, name) == 0) return true;
    }
    return false;
}

static void test_deploy_serve_replicas_and_service(void **state) {
    (void)state;
    yaml_file y;
    load("k8s/serve.yaml", &y);
    assert_int_equal(y.n, 2);
    yaml_document_t *dep = &y.docs[0], *svc = &y.docs[1];
    assert_string_equal(str(dep, "kind"), "Deployment");
    const char *c = "spec/template/spec/containers/0";
    char cmd[512];
    command_line(dep, c, cmd, sizeof cmd);
    assert_non_null(strstr(cmd, "llmbench serve "));
    assert_non_null(strstr(cmd, "--port 8000"));
    assert_string_equal(
        str(dep, "spec/template/spec/containers/0/resources/limits/nvidia.com~1gpu"), "1");
    assert_string_equal(str(svc, "kind"), "Service");
    assert_string_equal(str(svc, "spec/selector/app"),
                        str(dep, "spec/template/metadata/labels/app"));
    assert_string_equal(str(svc, "spec/ports/0/port"), "8000");
    unload(&y);
}

static void test_deploy_load_job_targets_the_service(void **state) {
    (void)state;
    yaml_file y;
    load("k8s/load-job.yaml", &y);
    assert_string_equal(str(&y.docs[0], "kind"), "Job");
    char cmd[512];
    command_line(&y.docs[0], "spec/template/spec/containers/0", cmd, sizeof cmd);
    assert_non_null(strstr(cmd, "llmbench load --endpoint http://llmbench-serve:8000"));
    assert_true(has_env(&y.docs[0], "spec/template/spec/containers/0", "LLMBENCH_DB"));
    unload(&y);
}

static void test_deploy_indexed_job_carries_torchrun_variables(void **state) {
    (void)state;
    yaml_file y;
    load("k8s/train-indexed-job.yaml", &y);
    assert_int_equal(y.n, 2);
    yaml_document_t *job = &y.docs[1];
    assert_string_equal(str(job, "spec/completionMode"), "Indexed");
    const char *c = "spec/template/spec/containers/0";
    const char *vars[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"};
    for (size_t i = 0; i < 5; i++)
        if (!has_env(job, c, vars[i])) fail_msg("no %s", vars[i]);
    assert_non_null(
        strstr(str(job, "spec/template/spec/containers/0/env/0/valueFrom/fieldRef/fieldPath"),
               "job-completion-index"));
    assert_string_equal(str(job, "spec/template/spec/containers/0/env/1/value"),
                        str(job, "spec/completions"));
    assert_string_equal(
        str(job, "spec/template/spec/containers/0/resources/limits/nvidia.com~1gpu"), "8");
    char cmd[512];
    command_line(job, c, cmd, sizeof cmd);
    assert_non_null(strstr(cmd, "llmbench train "));
    unload(&y);
}

static void test_deploy_cronjob_is_what_schedule_prints(void **state) {
    (void)state;
    const char *args[] = {"schedule",   "add",    "nightly", "--at", "19:00", "--backend",
                          "kubernetes", "--gpus", "1",       "--",   "run",   NULL};
    assert_int_equal(lb_test_run(args, out, sizeof out, err, sizeof err), 0);
    char *file = lb_test_read_file(DEPLOY "/k8s/cronjob.yaml", NULL);
    assert_non_null(file);
    assert_string_equal(file, out);
    free(file);
    yaml_file y;
    load("k8s/cronjob.yaml", &y);
    assert_string_equal(str(&y.docs[0], "spec/concurrencyPolicy"), "Forbid");
    assert_string_equal(
        str(&y.docs[0],
            "spec/jobTemplate/spec/template/spec/containers/0/resources/limits/nvidia.com~1gpu"),
        "1");
    unload(&y);
}

static void test_deploy_dockerfile_and_slurm_script(void **state) {
    (void)state;
    char *df = lb_test_read_file(DEPLOY "/Dockerfile", NULL);
    assert_non_null(df);
    size_t froms = 0;
    const char *runtime = NULL;
    for (char *line = df; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
        if (strncmp(line, "FROM ", 5) == 0) {
            froms++;
            if (froms == 2) runtime = line;
        }
    assert_int_equal(froms, 2);
    assert_non_null(strstr(df, "-devel-"));
    assert_non_null(runtime);
    assert_true(strncmp(runtime, "FROM nvidia/cuda:", 17) == 0 && strstr(runtime, "-runtime-"));
    assert_non_null(strstr(df, "COPY --from=build /usr/local/bin/llmbench"));
    assert_non_null(strstr(df, "ENTRYPOINT [\"llmbench\"]"));
    free(df);
    assert_int_equal(system("bash -n " DEPLOY "/slurm/train.sbatch"), 0);
    char *sb = lb_test_read_file(DEPLOY "/slurm/train.sbatch", NULL);
    assert_non_null(sb);
    assert_non_null(strstr(sb, "\n#SBATCH --nodes="));
    assert_non_null(strstr(sb, "\n#SBATCH --gpus-per-node="));
    assert_non_null(strstr(sb, "\nsrun "));
    assert_non_null(strstr(sb, "MASTER_ADDR="));
    free(sb);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_deploy_serve_replicas_and_service),
        cmocka_unit_test(test_deploy_load_job_targets_the_service),
        cmocka_unit_test(test_deploy_indexed_job_carries_torchrun_variables),
        cmocka_unit_test(test_deploy_cronjob_is_what_schedule_prints),
        cmocka_unit_test(test_deploy_dockerfile_and_slurm_script),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
