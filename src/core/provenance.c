/* provenance.c: host facts, library versions and the filtered environment. */
#include "core/provenance.h"

#include <curl/curl.h>
#include <microhttpd.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "core/utf8text.h"
#include "core/version.h"

extern char **environ;

static const char *const recorded_prefixes[] = {"CUDA_",   "NCCL_",  "OMP_", "LLMBENCH_",
                                                "MASTER_", "SLURM_", NULL};
static const char *const recorded_names[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", NULL};
/* Words of a name (split at anything but letters and digits) that mark its value secret.
 * KEY also counts as the end of a word (APIKEY); TOKEN does not (MAX_TOKENS, TOKENIZER). */
static const char *const secret_words[] = {"KEY",  "TOKEN", "SECRET",     "PASSWORD",    "PASSWD",
                                           "PASS", "AUTH",  "CREDENTIAL", "CREDENTIALS", NULL};

/* llmbench's own options whose names hold such a word but whose values are no secret: an
 * MLPerf benchmark key and the name of the variable that holds the API key. */
static const char *const plain_options[] = {"--model-key", "--api-key-env", NULL};

bool lb_provenance_env_is_recorded(const char *name) {
    for (int i = 0; recorded_prefixes[i]; i++)
        if (strncmp(name, recorded_prefixes[i], strlen(recorded_prefixes[i])) == 0) return true;
    for (int i = 0; recorded_names[i]; i++)
        if (strcmp(name, recorded_names[i]) == 0) return true;
    return false;
}

static bool is_word_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

bool lb_provenance_env_is_secret(const char *name) {
    for (const char *p = name; *p;) {
        if (!is_word_char(*p)) {
            p++;
            continue;
        }
        size_t n = 0;
        while (is_word_char(p[n]))
            n++;
        for (int i = 0; secret_words[i]; i++) {
            size_t w = strlen(secret_words[i]);
            if (n == w && strncasecmp(p, secret_words[i], w) == 0) return true;
        }
        if (n > 3 && strncasecmp(p + n - 3, "KEY", 3) == 0) return true;
        p += n;
    }
    return false;
}

static bool option_is_secret(const char *name) {
    for (int i = 0; plain_options[i]; i++)
        if (strcmp(name, plain_options[i]) == 0) return false;
    return lb_provenance_env_is_secret(name);
}

void lb_provenance_mask_url(const char *text, char *out, size_t cap) {
    size_t n = 0;
    const char *p = text;
    while (*p && n + 1 < cap) {
        const char *scheme_end = strstr(p, "://");
        const char *at = NULL;
        if (scheme_end != NULL) {
            const char *auth = scheme_end + 3;
            size_t len = strcspn(auth, "/?#");
            for (const char *q = auth; q < auth + len; q++)
                if (*q == '@') at = q;
        }
        const char *copy_to = at ? scheme_end + 3 : p + strlen(p);
        while (p < copy_to && n + 1 < cap)
            out[n++] = *p++;
        if (at == NULL) break;
        for (const char *m = "***"; *m && n + 1 < cap; m++)
            out[n++] = *m;
        p = at; /* the '@' and the host follow */
    }
    out[n] = '\0';
}

/* Value of the first line "key<sep>value" in a text file, trimmed; false if absent. */
static bool read_keyed_line(const char *path, const char *key, char sep, char *out, size_t len) {
    FILE *f = fopen(path, "r");
    if (f == NULL) return false;
    char line[512];
    bool found = false;
    size_t key_len = strlen(key);
    while (!found && fgets(line, sizeof line, f)) {
        if (strncmp(line, key, key_len) != 0) continue;
        char *p = strchr(line + key_len, sep);
        if (p == NULL) continue;
        p++;
        while (*p == ' ' || *p == '\t' || *p == '"')
            p++;
        size_t n = strcspn(p, "\"\n");
        if (n >= len) n = len - 1;
        memcpy(out, p, n);
        out[n] = '\0';
        found = true;
    }
    fclose(f);
    return found;
}

long long lb_provenance_host_mem_bytes(void) {
    char v[64];
    if (!read_keyed_line("/proc/meminfo", "MemTotal", ':', v, sizeof v)) return 0;
    return atoll(v) * 1024LL;
}

long long lb_provenance_peak_rss_bytes(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (long long)ru.ru_maxrss * 1024LL;
}

static json_t *library_versions(void) {
    char pcre[64] = "";
    pcre2_config(PCRE2_CONFIG_VERSION, pcre);
    return json_pack("{s:s, s:s, s:s, s:s, s:s}", "sqlite", sqlite3_libversion(), "jansson",
                     JANSSON_VERSION, "libcurl", curl_version_info(CURLVERSION_NOW)->version,
                     "libmicrohttpd", MHD_get_version(), "pcre2", pcre);
}

static json_t *recorded_env(void) {
    json_t *env = json_object();
    for (char **e = environ; e && *e; e++) {
        const char *eq = strchr(*e, '=');
        if (eq == NULL) continue;
        char name[256];
        size_t n = (size_t)(eq - *e);
        if (n >= sizeof name) continue;
        memcpy(name, *e, n);
        name[n] = '\0';
        if (!lb_provenance_env_is_recorded(name)) continue;
        char value[4096];
        lb_provenance_mask_url(eq + 1, value, sizeof value);
        /* a name or value that is not UTF-8 would be left out: JSON holds no such string */
        const char *kept = lb_provenance_env_is_secret(name) ? "***" : lb_utf8text_repair(value);
        json_object_set_new(env, lb_utf8text_repair(name), json_string(kept));
    }
    return env;
}

json_t *lb_provenance_collect(int argc, char **argv) {
    json_t *p = json_object();
    char host[256] = "unknown";
    gethostname(host, sizeof host - 1);
    /* what the host says of itself is not always UTF-8, and jansson makes no string of it */
    json_object_set_new(p, "hostname", json_string(lb_utf8text_repair(host)));

    char os[256] = "unknown";
    read_keyed_line("/etc/os-release", "PRETTY_NAME", '=', os, sizeof os);
    json_object_set_new(p, "os", json_string(lb_utf8text_repair(os)));
    struct utsname u;
    if (uname(&u) == 0) {
        json_object_set_new(p, "kernel", json_string(lb_utf8text_repair(u.release)));
        json_object_set_new(p, "arch", json_string(lb_utf8text_repair(u.machine)));
    }
    char cpu[256] = "unknown";
    read_keyed_line("/proc/cpuinfo", "model name", ':', cpu, sizeof cpu);
    json_object_set_new(p, "cpu_model", json_string(lb_utf8text_repair(cpu)));
    json_object_set_new(p, "cpu_cores", json_integer(sysconf(_SC_NPROCESSORS_ONLN)));
    json_object_set_new(p, "host_mem_bytes", json_integer(lb_provenance_host_mem_bytes()));
    json_object_set_new(p, "llmbench_version", json_string(lb_version_string));
    json_object_set_new(p, "llmbench_commit", json_string(lb_version_commit));

    json_t *cmd = json_array();
    bool hide_next = false;
    for (int i = 0; argv != NULL && i < argc; i++) {
        /* A secret may also travel on the command line, as --api-key=VALUE or as
         * --api-key VALUE: keep the option's name, hide the value. */
        char arg[4096];
        lb_provenance_mask_url(argv[i], arg, sizeof arg);
        if (hide_next) {
            hide_next = false;
            json_array_append_new(cmd, json_string("***"));
            continue;
        }
        const char *eq = strchr(arg, '=');
        char name[128];
        size_t n = eq ? (size_t)(eq - arg) : strlen(arg);
        if (arg[0] == '-' && n < sizeof name) {
            memcpy(name, arg, n);
            name[n] = '\0';
            if (option_is_secret(name)) {
                if (eq == NULL) {
                    hide_next = true;
                } else {
                    char masked[160];
                    snprintf(masked, sizeof masked, "%s=***", name);
                    json_array_append_new(cmd, json_string(masked));
                    continue;
                }
            }
        }
        /* an argument that is not UTF-8 (a Latin-1 file name) would be left out */
        json_array_append_new(cmd, json_string(lb_utf8text_repair(arg)));
    }
    json_object_set_new(p, "command_line", cmd);
    json_object_set_new(p, "libraries", library_versions());
    json_object_set_new(p, "env", recorded_env());
    return p;
}
