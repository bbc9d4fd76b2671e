/* ladder.c: building doctor's ladder from a node's facts, and climbing it (ladder.h). */
#include "doctor/ladder.h"

#include <stdio.h>
#include <string.h>

#include "core/signals.h"
#include "doctor/facts.h"

static void add_set(lb_doctor_rung *r, const char *name, const char *value) {
    for (int i = 0; i < r->n_unset && i < LB_RUNG_MAX_CHANGES;
         i++) /* setting it again overrides a removal */
        if (strcmp(r->unset[i], name) == 0) r->unset[i][0] = '\0';
    if (r->n_set < LB_RUNG_MAX_CHANGES)
        snprintf(r->set[r->n_set++], sizeof r->set[0], "%s=%s", name, value);
}

static void add_unset(lb_doctor_rung *r, const char *name) {
    if (r->n_unset < LB_RUNG_MAX_CHANGES)
        snprintf(r->unset[r->n_unset++], sizeof r->unset[0], "%s", name);
}

static bool env_is(const json_t *env, const char *name, const char *value) {
    const char *v = json_string_value(json_object_get(env, name));
    return v != NULL && (value == NULL || strcmp(v, value) == 0);
}

/* Whether a problem sentence is about this variable. */
static bool problem_about(const json_t *problems, const char *name) {
    size_t i;
    json_t *p;
    json_array_foreach(problems, i, p) {
        const char *s = json_string_value(p);
        if (s != NULL && strncmp(s, name, strlen(name)) == 0 && s[strlen(name)] == '=') return true;
    }
    return false;
}

static lb_doctor_rung *push(lb_doctor_rung *rungs, int *n, int max, const lb_doctor_rung *base,
                            const char *fmt, const char *arg) {
    if (*n >= max) return NULL;
    lb_doctor_rung *r = &rungs[(*n)++];
    *r = *base;
    snprintf(r->name, sizeof r->name, fmt, arg);
    return r;
}

int lb_doctor_ladder(const json_t *facts, bool multi_node, lb_doctor_rung *rungs, int max) {
    const json_t *env = json_object_get(facts, "env");
    const json_t *problems = json_object_get(facts, "env_problems");
    int n = 0;
    lb_doctor_rung base = {0};
    push(rungs, &n, max, &base, "%sas found", "");
    static const char *const naming[] = {"NCCL_SOCKET_IFNAME", "NCCL_IB_HCA"};
    bool fixed = false;
    for (size_t i = 0; i < sizeof naming / sizeof naming[0]; i++)
        if (problem_about(problems, naming[i])) {
            add_unset(&base, naming[i]);
            fixed = true;
        }
    if (fixed) push(rungs, &n, max, &base, "%swithout the settings that name nothing here", "");
    /* transports switched off by hand, switched back on one by one (a *_DISABLE=0 switches
     * nothing off: removing it would probe the same settings again) */
    lb_doctor_rung undo = base;
    static const char *const offs[] = {"NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_NET_GDR_LEVEL",
                                       "NCCL_IB_DISABLE"};
    int removed = 0;
    for (size_t i = 0; i < sizeof offs / sizeof offs[0]; i++) {
        if (!env_is(env, offs[i], NULL) ||
            (strstr(offs[i], "_DISABLE") != NULL && env_is(env, offs[i], "0")))
            continue;
        add_unset(&undo, offs[i]);
        lb_doctor_rung *r = push(rungs, &n, max, &undo, "%s", "");
        if (r == NULL) break;
        snprintf(r->name, sizeof r->name, "%s removed%s", offs[i],
                 removed++ > 0 ? " (and the above)" : "");
    }
    /* InfiniBand / RoCE */
    size_t i;
    json_t *port;
    bool have_ib = false;
    json_array_foreach(json_object_get(facts, "ib"), i, port) {
        have_ib = true;
        int gid = lb_doctor_gid_index(port);
        if (gid < 0 || env_is(env, "NCCL_IB_GID_INDEX", NULL)) continue;
        char v[16], name[96];
        snprintf(v, sizeof v, "%d", gid);
        snprintf(name, sizeof name, "NCCL_IB_GID_INDEX=%d (RoCE v2 on %s)", gid,
                 json_string_value(json_object_get(port, "device")));
        lb_doctor_rung *r = push(rungs, &n, max, &base, "%s", name);
        if (r != NULL) add_set(r, "NCCL_IB_GID_INDEX", v);
        break;
    }
    if (have_ib) {
        lb_doctor_rung *r = push(rungs, &n, max, &base, "%s", "NCCL_CROSS_NIC=0");
        if (r != NULL) add_set(r, "NCCL_CROSS_NIC", "0");
    }
    /* the socket transport on each interface that is up and has an address */
    json_t *iface;
    json_array_foreach(json_object_get(facts, "net"), i, iface) {
        const char *name = json_string_value(json_object_get(iface, "name"));
        bool loop = json_is_true(json_object_get(iface, "loopback"));
        const char *state = json_string_value(json_object_get(iface, "operstate"));
        if (name == NULL || (loop && multi_node) ||
            json_array_size(json_object_get(iface, "addresses")) == 0)
            continue;
        if (!loop && state != NULL && strcmp(state, "up") != 0 && strcmp(state, "unknown") != 0)
            continue;
        char label[128], exact[80];
        snprintf(label, sizeof label, "InfiniBand off, sockets on %s", name);
        snprintf(exact, sizeof exact, "=%s", name);
        lb_doctor_rung *r = push(rungs, &n, max, &base, "%s", label);
        if (r == NULL) break;
        add_set(r, "NCCL_IB_DISABLE", "1");
        add_set(r, "NCCL_SOCKET_IFNAME", exact);
    }
    static const struct {
        const char *name, *value;
    } singles[] = {
        {"NCCL_P2P_DISABLE", "1"}, {"NCCL_SHM_DISABLE", "1"}, {"NCCL_NET_GDR_LEVEL", "0"}};
    for (size_t k = 0; k < sizeof singles / sizeof singles[0]; k++) {
        if (env_is(env, singles[k].name, singles[k].value)) continue;
        char label[96];
        snprintf(label, sizeof label, "%s=%s", singles[k].name, singles[k].value);
        lb_doctor_rung *r = push(rungs, &n, max, &base, "%s", label);
        if (r != NULL) add_set(r, singles[k].name, singles[k].value);
    }
    return n;
}

lb_status lb_doctor_climb(const lb_doctor_rung *rungs, int n, double good_gbps,
                          lb_doctor_probe_fn probe, void *ctx, lb_doctor_probe *results,
                          int *chosen, lb_doctor_verdict *verdict, lb_err *err) {
    *chosen = -1;
    *verdict = LB_DOCTOR_BROKEN;
    memset(results, 0, (size_t)n * sizeof *results);
    for (int i = 0; i < n; i++) {
        if (lb_signals_interrupted())
            return lb_fail(err, LB_ERR_INTERRUPTED, "interrupted before the probe of \"%s\"",
                           rungs[i].name);
        LB_TRY(probe(ctx, &rungs[i], &results[i], err));
        /* a signal ends the probe's workers too: what they reported says nothing of NCCL */
        if (lb_signals_interrupted()) {
            memset(&results[i], 0, sizeof results[i]);
            return lb_fail(err, LB_ERR_INTERRUPTED, "interrupted during the probe of \"%s\"",
                           rungs[i].name);
        }
        results[i].ran = true;
        if (!results[i].ok) continue;
        if (results[i].busbw_gbps >= good_gbps) {
            *chosen = i;
            *verdict = i == 0 ? LB_DOCTOR_WORKS_AS_FOUND : LB_DOCTOR_FIXED;
            return LB_OK;
        }
        if (*chosen < 0 || results[i].busbw_gbps > results[*chosen].busbw_gbps) *chosen = i;
    }
    if (*chosen >= 0) *verdict = LB_DOCTOR_SLOW;
    return LB_OK;
}

void lb_doctor_export_line(const lb_doctor_rung *rung, char *buf, size_t cap) {
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < rung->n_set && used < cap; i++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%s", i == 0 ? "export " : " ",
                                 rung->set[i]);
    bool first = true;
    for (int i = 0; i < rung->n_unset && used < cap; i++) {
        if (rung->unset[i][0] == '\0') continue;
        used += (size_t)snprintf(buf + used, cap - used, "%s%s",
                                 first ? (used ? "; unset " : "unset ") : " ", rung->unset[i]);
        first = false;
    }
}
