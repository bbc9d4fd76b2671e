/* facts.c: the node's facts for `llmbench doctor` (see facts.h): /sys readers, NVML, and
 * the checks of NCCL settings against what exists. */
#include "doctor/facts.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu/devinfo.h"
#include "gpu/nvml/nvml.h"

/* The first line of root/path, trimmed; false when it cannot be read. */
static bool read_line(const char *dir, const char *name, char *buf, size_t cap) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path) return false;
    FILE *f = fopen(path, "r");
    if (f == NULL) return false;
    bool ok = fgets(buf, (int)cap, f) != NULL;
    fclose(f);
    if (!ok) return false;
    buf[strcspn(buf, "\n")] = '\0';
    return true;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Entries of a directory, sorted, without "." and ".."; *n set. Caller frees each and the
 * array. */
static char **list_dir(const char *path, int *n) {
    *n = 0;
    DIR *d = opendir(path);
    if (d == NULL) return NULL;
    char **names = NULL;
    int cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            char **grown = realloc(names, (size_t)cap * sizeof *names);
            if (grown == NULL) break;
            names = grown;
        }
        names[(*n)++] = strdup(e->d_name);
    }
    closedir(d);
    if (names != NULL) qsort(names, (size_t)*n, sizeof *names, cmp_str);
    return names;
}

static void free_list(char **names, int n) {
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

json_t *lb_doctor_read_net(const char *root) {
    json_t *out = json_array();
    char base[1024];
    snprintf(base, sizeof base, "%s/sys/class/net", root);
    int n = 0;
    char **names = list_dir(base, &n);
    for (int i = 0; i < n; i++) {
        char dir[1200], v[256];
        snprintf(dir, sizeof dir, "%s/%s", base, names[i]);
        json_t *o = json_pack("{s:s}", "name", names[i]);
        if (read_line(dir, "operstate", v, sizeof v))
            json_object_set_new(o, "operstate", json_string(v));
        if (read_line(dir, "mtu", v, sizeof v))
            json_object_set_new(o, "mtu", json_integer(atoi(v)));
        /* speed reads -1 or fails (EINVAL) on links without one */
        if (read_line(dir, "speed", v, sizeof v) && atoi(v) > 0)
            json_object_set_new(o, "speed_mbps", json_integer(atoi(v)));
        if (read_line(dir, "address", v, sizeof v)) json_object_set_new(o, "mac", json_string(v));
        /* type 772 is ARPHRD_LOOPBACK */
        bool loop = read_line(dir, "type", v, sizeof v) && atoi(v) == 772;
        json_object_set_new(o, "loopback", json_boolean(loop));
        json_array_append_new(out, o);
    }
    free_list(names, n);
    return out;
}

json_t *lb_doctor_read_ib(const char *root) {
    json_t *out = json_array();
    char base[1024];
    snprintf(base, sizeof base, "%s/sys/class/infiniband", root);
    int nd = 0;
    char **devs = list_dir(base, &nd);
    for (int d = 0; d < nd; d++) {
        char ports_dir[1200];
        snprintf(ports_dir, sizeof ports_dir, "%s/%s/ports", base, devs[d]);
        int np = 0;
        char **ports = list_dir(ports_dir, &np);
        for (int p = 0; p < np; p++) {
            char dir[1400], v[256];
            snprintf(dir, sizeof dir, "%s/%s", ports_dir, ports[p]);
            json_t *o = json_pack("{s:s, s:i}", "device", devs[d], "port", atoi(ports[p]));
            if (read_line(dir, "state", v, sizeof v))
                json_object_set_new(o, "state", json_string(v));
            if (read_line(dir, "rate", v, sizeof v)) json_object_set_new(o, "rate", json_string(v));
            if (read_line(dir, "link_layer", v, sizeof v))
                json_object_set_new(o, "link_layer", json_string(v));
            json_t *gids = json_array();
            char gid_dir[1500];
            snprintf(gid_dir, sizeof gid_dir, "%s/gids", dir);
            int ng = 0;
            char **idx = list_dir(gid_dir, &ng);
            /* numeric order, not the directory's string order */
            for (int want = 0, seen = 0; seen < ng && want < 4096; want++) {
                char name[16];
                snprintf(name, sizeof name, "%d", want);
                bool present = false;
                for (int k = 0; k < ng && !present; k++)
                    present = strcmp(idx[k], name) == 0;
                if (!present) continue;
                seen++;
                if (!read_line(gid_dir, name, v, sizeof v)) continue;
                if (strspn(v, "0:") == strlen(v)) continue; /* unused entry */
                json_t *g = json_pack("{s:i, s:s}", "index", want, "gid", v);
                char attr[1600], t[64];
                snprintf(attr, sizeof attr, "%s/gid_attrs/types", dir);
                if (read_line(attr, name, t, sizeof t))
                    json_object_set_new(g, "type", json_string(t));
                snprintf(attr, sizeof attr, "%s/gid_attrs/ndevs", dir);
                if (read_line(attr, name, t, sizeof t))
                    json_object_set_new(g, "ndev", json_string(t));
                json_array_append_new(gids, g);
            }
            free_list(idx, ng);
            json_object_set_new(o, "gids", gids);
            json_array_append_new(out, o);
        }
        free_list(ports, np);
    }
    free_list(devs, nd);
    return out;
}

void lb_doctor_add_addresses(json_t *net) {
    struct ifaddrs *ifa = NULL;
    if (getifaddrs(&ifa) != 0) return;
    size_t i;
    json_t *o;
    json_array_foreach(net, i, o) {
        json_t *addrs = json_array();
        const char *name = json_string_value(json_object_get(o, "name"));
        for (struct ifaddrs *a = ifa; a != NULL; a = a->ifa_next) {
            if (a->ifa_addr == NULL || strcmp(a->ifa_name, name) != 0) continue;
            char text[INET6_ADDRSTRLEN] = "";
            if (a->ifa_addr->sa_family == AF_INET)
                inet_ntop(AF_INET, &((struct sockaddr_in *)a->ifa_addr)->sin_addr, text,
                          sizeof text);
            else if (a->ifa_addr->sa_family == AF_INET6)
                inet_ntop(AF_INET6, &((struct sockaddr_in6 *)a->ifa_addr)->sin6_addr, text,
                          sizeof text);
            if (text[0] != '\0') json_array_append_new(addrs, json_string(text));
        }
        json_object_set_new(o, "addresses", addrs);
    }
    freeifaddrs(ifa);
}

int lb_doctor_gid_index(const json_t *port) {
    int any_v2 = -1;
    size_t i;
    json_t *g;
    json_array_foreach(json_object_get(port, "gids"), i, g) {
        const char *type = json_string_value(json_object_get(g, "type"));
        const char *gid = json_string_value(json_object_get(g, "gid"));
        if (type == NULL || strstr(type, "v2") == NULL || gid == NULL) continue;
        int index = (int)json_integer_value(json_object_get(g, "index"));
        /* an IPv4-mapped address: 0000:0000:0000:0000:0000:ffff:xxxx:xxxx */
        if (strncmp(gid, "0000:0000:0000:0000:0000:ffff:", 30) == 0) return index;
        if (any_v2 < 0) any_v2 = index;
    }
    return any_v2;
}

/* Whether NCCL's list (prefixes, '=' exact, '^' exclude) selects any of names. */
static bool list_selects(const char *spec, const char *const *names, int n) {
    bool exclude = spec[0] == '^', exact = false;
    if (exclude) spec++;
    if (spec[0] == '=') {
        exact = true;
        spec++;
    }
    char buf[512];
    snprintf(buf, sizeof buf, "%s", spec);
    for (int k = 0; k < n; k++) {
        bool matched = false;
        char *save = NULL;
        char copy[512];
        snprintf(copy, sizeof copy, "%s", buf);
        for (char *tok = strtok_r(copy, ",", &save); tok != NULL && !matched;
             tok = strtok_r(NULL, ",", &save)) {
            tok[strcspn(tok, ":")] = '\0'; /* NCCL_IB_HCA's ":port" */
            matched = exact ? strcmp(names[k], tok) == 0 : strncmp(names[k], tok, strlen(tok)) == 0;
        }
        if (matched != exclude) return true;
    }
    return false;
}

static void names_of(const json_t *arr, const char *key, const char **names, int *n, int max,
                     char *joined, size_t cap) {
    size_t i, used = 0;
    json_t *o;
    *n = 0;
    joined[0] = '\0';
    json_array_foreach(arr, i, o) {
        const char *name = json_string_value(json_object_get(o, key));
        bool dup = false;
        for (int k = 0; k < *n && !dup; k++)
            dup = strcmp(names[k], name) == 0;
        if (name == NULL || dup || *n >= max) continue;
        names[(*n)++] = name;
        if (used < cap)
            used += (size_t)snprintf(joined + used, cap - used, "%s%s", used ? ", " : "", name);
    }
}

json_t *lb_doctor_env_problems(const json_t *net, const json_t *ib, const char *socket_ifname,
                               const char *ib_hca) {
    json_t *out = json_array();
    const char *names[256];
    int n = 0;
    char joined[512], msg[1024];
    if (socket_ifname != NULL && socket_ifname[0] != '\0') {
        names_of(net, "name", names, &n, 256, joined, sizeof joined);
        if (!list_selects(socket_ifname, names, n)) {
            snprintf(msg, sizeof msg,
                     "NCCL_SOCKET_IFNAME=%s selects no network interface here (interfaces: %s)",
                     socket_ifname, n ? joined : "none");
            json_array_append_new(out, json_string(msg));
        }
    }
    if (ib_hca != NULL && ib_hca[0] != '\0') {
        names_of(ib, "device", names, &n, 256, joined, sizeof joined);
        if (!list_selects(ib_hca, names, n)) {
            snprintf(msg, sizeof msg,
                     "NCCL_IB_HCA=%s selects no InfiniBand/RoCE device here (devices: %s)", ib_hca,
                     n ? joined : "none");
            json_array_append_new(out, json_string(msg));
        }
    }
    return out;
}

static json_t *gpu_facts(void) {
    json_t *gpus = json_array();
    char why[128];
    if (!lb_nvml_open(why, sizeof why)) return gpus;
    for (int i = 0; i < lb_nvml_device_count(); i++) {
        char name[128] = "unknown";
        uint64_t mem = 0;
        lb_nvml_device_name(i, name, sizeof name);
        lb_nvml_device_memory(i, &mem, NULL);
        json_t *g =
            json_pack("{s:i, s:s, s:I}", "index", i, "name", name, "mem_bytes", (json_int_t)mem);
        lb_nvml_links l;
        if (lb_nvml_device_links(i, &l)) {
            json_object_set_new(g, "pci", json_string(l.bus_id));
            if (l.has_pcie)
                json_object_set_new(g, "pcie",
                                    json_pack("{s:i, s:i, s:i, s:i}", "gen", l.pcie_gen, "width",
                                              l.pcie_width, "max_gen", l.pcie_max_gen, "max_width",
                                              l.pcie_max_width));
            if (l.has_ecc)
                json_object_set_new(g, "ecc_uncorrected",
                                    json_integer((json_int_t)l.ecc_uncorrected));
            json_object_set_new(g, "sm_clock_max_mhz", json_integer(l.sm_clock_max_mhz));
            json_object_set_new(g, "mem_clock_max_mhz", json_integer(l.mem_clock_max_mhz));
            json_t *peers = json_array();
            for (int k = 0; k < l.n_nvlinks; k++)
                json_array_append_new(peers, json_string(l.nvlink_peer[k]));
            json_object_set_new(g, "nvlinks", peers);
        }
        lb_nvml_sample s;
        if (lb_nvml_sample_device(i, &s)) {
            if (s.has_clock) json_object_set_new(g, "sm_clock_mhz", json_integer(s.sm_clock_mhz));
            if (s.has_reasons)
                json_object_set_new(g, "clock_reasons", json_integer((json_int_t)s.clock_reasons));
            if (s.has_temp) json_object_set_new(g, "temp_c", json_integer(s.temp_c));
        }
        json_array_append_new(gpus, g);
    }
    lb_nvml_close();
    return gpus;
}

json_t *lb_doctor_node_facts(void) {
    json_t *f = json_object();
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    json_object_set_new(f, "host", json_string(host));
    json_t *dev = json_object();
    lb_devinfo_add(dev);
    json_object_set(f, "driver", json_object_get(dev, "driver"));
    json_object_set(f, "cuda_runtime", json_object_get(dev, "cuda_runtime"));
    json_object_set(f, "nccl", json_object_get(dev, "nccl"));
    json_decref(dev);
    char why[128];
    if (lb_nvml_open(why, sizeof why)) {
        int v = 0;
        if (lb_nvml_cuda_driver_version(&v)) {
            char s[32];
            snprintf(s, sizeof s, "%d.%d", v / 1000, (v % 1000) / 10);
            json_object_set_new(f, "cuda_driver", json_string(s));
        }
        lb_nvml_close();
    }
    json_object_set_new(f, "gpus", gpu_facts());
    json_t *net = lb_doctor_read_net("");
    lb_doctor_add_addresses(net);
    json_t *ib = lb_doctor_read_ib("");
    json_t *env = json_object();
    extern char **environ;
    for (char **e = environ; *e != NULL; e++) {
        if (strncmp(*e, "NCCL_", 5) != 0) continue;
        const char *eq = strchr(*e, '=');
        if (eq == NULL) continue;
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)(eq - *e), *e);
        json_object_set_new(env, name, json_string(eq + 1));
    }
    json_object_set_new(
        f, "env_problems",
        lb_doctor_env_problems(net, ib, getenv("NCCL_SOCKET_IFNAME"), getenv("NCCL_IB_HCA")));
    json_object_set_new(f, "net", net);
    json_object_set_new(f, "ib", ib);
    json_object_set_new(f, "env", env);
    return f;
}

/* The GPU models of a node's facts, joined ("NVIDIA H100 80GB HBM3 x2"). */
static void gpu_models(const json_t *f, char *buf, size_t cap) {
    size_t i, used = 0;
    json_t *g;
    buf[0] = '\0';
    const char *last = NULL;
    int run = 0;
    json_array_foreach(json_object_get(f, "gpus"), i, g) {
        const char *name = json_string_value(json_object_get(g, "name"));
        if (last != NULL && name != NULL && strcmp(name, last) == 0) {
            run++;
            continue;
        }
        if (last != NULL && used < cap)
            used +=
                (size_t)snprintf(buf + used, cap - used, "%s%s x%d", used ? ", " : "", last, run);
        last = name;
        run = 1;
    }
    if (last != NULL && used < cap)
        snprintf(buf + used, cap - used, "%s%s x%d", used ? ", " : "", last, run);
}

/* Whether a node's facts show a GPU: CUDA sees one, or NVML lists one (a driver too old for
 * the CUDA runtime leaves CUDA seeing none, and that node must be compared). */
static bool has_gpu(const json_t *f) {
    return json_integer_value(json_object_get(f, "cuda_devices")) > 0 ||
           json_array_size(json_object_get(f, "gpus")) > 0;
}

static const char *host_of(const json_t *f) {
    const char *h = json_string_value(json_object_get(f, "host"));
    return h ? h : "?";
}

json_t *lb_doctor_compare(json_t *const *facts, int n) {
    json_t *out = json_array();
    char msg[1200];
    /* GPU facts are compared with the first rank that has a GPU; a rank without one (a
     * CPU-only head node) has none to compare */
    int ref = -1;
    for (int r = 0; r < n && ref < 0; r++)
        if (has_gpu(facts[r])) ref = r;
    for (int r = 0; ref >= 0 && r < n; r++)
        if (!has_gpu(facts[r])) {
            snprintf(msg, sizeof msg,
                     "rank %d (%s) has no GPU: left out of the driver, CUDA, NCCL and GPU model "
                     "comparisons",
                     r, host_of(facts[r]));
            json_array_append_new(out, json_string(msg));
        }
    /* facts of a GPU's node (a head node only coordinates: it loads no NCCL of the job's) */
    static const char *const keys[] = {"driver", "cuda_driver", "cuda_runtime", "nccl"};
    for (size_t k = 0; ref >= 0 && k < sizeof keys / sizeof keys[0]; k++) {
        const char *first = json_string_value(json_object_get(facts[ref], keys[k]));
        for (int r = 0; r < n; r++) {
            if (r == ref || !has_gpu(facts[r])) continue;
            const char *v = json_string_value(json_object_get(facts[r], keys[k]));
            if ((first == NULL) == (v == NULL) && (first == NULL || strcmp(first, v) == 0))
                continue;
            snprintf(msg, sizeof msg, "%s differs: rank %d (%s) has %s, rank %d (%s) has %s",
                     keys[k], ref, host_of(facts[ref]), first ? first : "none", r,
                     host_of(facts[r]), v ? v : "none");
            json_array_append_new(out, json_string(msg));
        }
    }
    char m0[512], mr[512];
    if (ref >= 0) gpu_models(facts[ref], m0, sizeof m0);
    for (int r = 0; ref >= 0 && r < n; r++) {
        if (r == ref || !has_gpu(facts[r])) continue;
        gpu_models(facts[r], mr, sizeof mr);
        if (strcmp(m0, mr) == 0) continue;
        snprintf(msg, sizeof msg, "GPU models differ: rank %d has %s, rank %d has %s", ref,
                 m0[0] ? m0 : "none", r, mr[0] ? mr : "none");
        json_array_append_new(out, json_string(msg));
    }
    return out;
}
