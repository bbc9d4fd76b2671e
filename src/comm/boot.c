/* boot.c: launcher detection and the control plane (a duplicate of MPI_COMM_WORLD of its
 * own, so that none of its collectives can meet another layer's, or a TCP star around
 * rank 0). Every wait is a poll with the deadline left, so a rank that never comes turns
 * into an error naming it instead of a hang. */
#include "comm/boot.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifdef LB_HAVE_MPI
#include <mpi.h>
#endif

#include "core/clock.h"
#include "core/signals.h"

#define BOOT_MAGIC        0x6c62626du /* "lbbm": its hello names where rank and world came from */
#define BOOT_DEFAULT_PORT 29500
#define BOOT_STOP_TAG     0x6c62             /* MPI: a rank's stop notice to rank 0 */
#define BOOT_HELLO_NS     (5 * 1000000000LL) /* rank 0 waits this long for a peer's hello */
#define BOOT_ATTEMPT_NS   (5 * 1000000000LL) /* one connection attempt to one address */
/* TCP: what a peer sends rank 0 after the rendezvous starts with one of these bytes */
#define BOOT_DATA 'D' /* a gather's bytes follow */
#define BOOT_STOP 'S' /* a stop notice, alone */

typedef struct {
    uint32_t magic;
    int32_t rank, world;
    int32_t source; /* lb_boot_source: the variables rank and world were read from */
    char host[64];
} hello_msg;

typedef struct {
    int32_t ok;     /* 1, or 0 with status and why */
    int32_t status; /* rank 0's lb_status: a rendezvous that failed, or a signal, ends alike */
    int32_t local_rank, local_size;
    char why[256];
} reply_msg;

struct lb_boot {
    lb_boot_source source;
    int rank, size, local_rank, local_size;
    char host[64];
    double timeout_s;
    bool broken;
    bool mpi_inited;
    bool stop_sent;     /* this rank told rank 0 of its signal */
    int stop_rank;      /* rank 0: the lowest rank whose stop notice arrived, -1: none */
    int stops_received; /* rank 0, MPI: stop notices received */
    int *fds;           /* TCP: rank 0 holds one per peer (index = rank), a peer holds fds[0] */
#ifdef LB_HAVE_MPI
    MPI_Comm ctrl; /* MPI: the control plane's communicator, when ctrl_made */
    bool ctrl_made;
#endif
};

/* ---- small helpers ---- */

static int64_t deadline_after(double s) {
    return lb_clock_now_ns() + (int64_t)(s * 1e9);
}

static int ms_left(int64_t deadline_ns) {
    int64_t left = (deadline_ns - lb_clock_now_ns()) / 1000000;
    return left < 0 ? 0 : left > 1000 ? 1000 : (int)left;
}

static const char *env_or(const char *name, const char *fallback) {
    const char *v = getenv(name);
    return v != NULL && v[0] != '\0' ? v : fallback;
}

/* Parses a non-negative decimal int (at most 2^24) from a variable's value; -1 when absent,
 * -2 when not such a number. */
static int parse_int(const char *v) {
    if (v == NULL || v[0] == '\0') return -1;
    char *end = NULL;
    long x = strtol(v, &end, 10);
    if (*end != '\0' || x < 0 || x > 1 << 24) return -2;
    return (int)x;
}

static int env_int(const char *name) {
    return parse_int(getenv(name));
}

/* The rendezvous gives way to SIGINT/SIGTERM (core/signals.h): nothing of the job has run
 * yet, so a Ctrl-C ends it at once rather than after --setup-timeout. Later control-plane
 * calls do not: they are how the ranks agree to stop after a signal. */
static lb_status interrupted(const char *what, lb_err *err) {
    return lb_fail(err, LB_ERR_INTERRUPTED, "%s: interrupted by a signal before every rank joined",
                   what);
}

/* Writes or reads exactly n bytes before the deadline (joining: during the rendezvous, which
 * a signal ends). */
static lb_status io_wait(int fd, void *buf, size_t n, bool writing, int64_t deadline, bool joining,
                         const char *what, lb_err *err) {
    char *p = buf;
    while (n > 0) {
        if (joining && lb_signals_interrupted()) return interrupted(what, err);
        struct pollfd pfd = {.fd = fd, .events = writing ? POLLOUT : POLLIN};
        int ms = ms_left(deadline);
        int pr = poll(&pfd, 1, ms);
        if (pr < 0 && errno == EINTR) continue;
        if (pr == 0) {
            if (ms == 0)
                return lb_fail(err, LB_ERR_COMM, "%s: no answer within the deadline", what);
            continue;
        }
        ssize_t k = writing ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
        if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (k <= 0)
            return lb_fail(err, LB_ERR_COMM, "%s: connection %s", what,
                           k == 0 ? "closed by the other side" : strerror(errno));
        p += k;
        n -= (size_t)k;
    }
    return LB_OK;
}

static lb_status io_all(int fd, void *buf, size_t n, bool writing, int64_t deadline,
                        const char *what, lb_err *err) {
    return io_wait(fd, buf, n, writing, deadline, false, what, err);
}

/* ---- TCP rendezvous ---- */

static int listen_on(int port, char *why, size_t why_len) {
    int families[2] = {AF_INET6, AF_INET};
    for (int i = 0; i < 2; i++) {
        int fd = socket(families[i], SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) continue;
        int one = 1, zero = 0;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        int rc;
        if (families[i] == AF_INET6) {
            setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
            struct sockaddr_in6 a = {.sin6_family = AF_INET6,
                                     .sin6_port = htons((uint16_t)port),
                                     .sin6_addr = in6addr_any};
            rc = bind(fd, (struct sockaddr *)&a, sizeof a);
        } else {
            struct sockaddr_in a = {.sin_family = AF_INET,
                                    .sin_port = htons((uint16_t)port),
                                    .sin_addr.s_addr = htonl(INADDR_ANY)};
            rc = bind(fd, (struct sockaddr *)&a, sizeof a);
        }
        if (rc == 0 && listen(fd, 1024) == 0) return fd;
        snprintf(why, why_len, "%s", strerror(errno));
        close(fd);
    }
    return -1;
}

/* One connection attempt to ai before the deadline: a connect that the far side never
 * answers (a firewall that drops, a host that is down, a full accept queue) would block for
 * the kernel's SYN retries, minutes past the deadline. -1 with why, -2 on a signal. */
static int connect_one(const struct addrinfo *ai, int64_t deadline, char *why, size_t why_len) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0) {
        snprintf(why, why_len, "%s", strerror(errno));
        return -1;
    }
    int rc = connect(fd, ai->ai_addr, ai->ai_addrlen), e = rc == 0 ? 0 : errno;
    while (e == EINPROGRESS || e == EINTR) {
        if (lb_signals_interrupted()) {
            close(fd);
            return -2;
        }
        struct pollfd pfd = {.fd = fd, .events = POLLOUT};
        int ms = ms_left(deadline);
        int pr = poll(&pfd, 1, ms);
        if (pr < 0) {
            e = errno;
            if (e == EINTR) continue;
            break;
        }
        if (pr == 0) {
            if (ms > 0) continue;
            e = ETIMEDOUT;
            break;
        }
        socklen_t len = sizeof e;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &len) != 0) e = errno;
    }
    if (e != 0) {
        snprintf(why, why_len, "%s", strerror(e));
        close(fd);
        return -1;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

/* Connects to addr:port, retrying until the deadline; -2 on a signal. */
static int connect_to(const char *addr, int port, int64_t deadline, char *why, size_t why_len) {
    char port_s[16];
    snprintf(port_s, sizeof port_s, "%d", port);
    snprintf(why, why_len, "no attempt made");
    for (;;) {
        if (lb_signals_interrupted()) return -2;
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
        int gai = getaddrinfo(addr, port_s, &hints, &res);
        if (gai != 0) {
            snprintf(why, why_len, "%s", gai_strerror(gai));
        } else {
            for (struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
                /* an attempt gets BOOT_ATTEMPT_NS at most: an address that never answers
                 * (filtered IPv6 of a dual-stack host) leaves time for the next one */
                int64_t by = lb_clock_now_ns() + BOOT_ATTEMPT_NS;
                int fd = connect_one(ai, by < deadline ? by : deadline, why, why_len);
                if (fd >= 0 || fd == -2) {
                    freeaddrinfo(res);
                    return fd;
                }
            }
            freeaddrinfo(res);
        }
        if (lb_clock_now_ns() >= deadline) return -1;
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

/* The variables a rank's number and the world size were read from: Slurm's, or those of
 * torchrun and of the --gpus launcher's workers. */
static const char *rank_var(int32_t source) {
    return source == LB_BOOT_SLURM ? "SLURM_PROCID" : "RANK";
}
static const char *world_var(int32_t source) {
    return source == LB_BOOT_SLURM ? "SLURM_STEP_NUM_TASKS" : "WORLD_SIZE";
}

static lb_status tcp_rendezvous(lb_boot *b, const char *addr, int port, lb_err *err) {
    int64_t deadline = deadline_after(b->timeout_s);
    char why[128] = "";
    b->fds = calloc((size_t)b->size, sizeof *b->fds);
    if (b->fds == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of memory for %d ranks", b->size);
    for (int i = 0; i < b->size; i++)
        b->fds[i] = -1;
    if (b->rank != 0) {
        int fd = connect_to(addr, port, deadline, why, sizeof why);
        char what[160];
        snprintf(what, sizeof what,
                 "rank %d: rendezvous with rank 0 at MASTER_ADDR=%s MASTER_PORT=%d", b->rank, addr,
                 port);
        if (fd == -2) return interrupted(what, err);
        if (fd < 0)
            return lb_fail(err, LB_ERR_USAGE,
                           "rank %d could not reach rank 0 at MASTER_ADDR=%s MASTER_PORT=%d within "
                           "%.0f s (%s); MASTER_ADDR must name the host of rank 0",
                           b->rank, addr, port, b->timeout_s, why);
        b->fds[0] = fd;
        hello_msg h = {.magic = BOOT_MAGIC, .rank = b->rank, .world = b->size, .source = b->source};
        snprintf(h.host, sizeof h.host, "%s", b->host);
        LB_TRY(io_wait(fd, &h, sizeof h, true, deadline, true, what, err));
        reply_msg r;
        LB_TRY(io_wait(fd, &r, sizeof r, false, deadline, true, what, err));
        r.why[sizeof r.why - 1] = '\0';
        if (!r.ok)
            return lb_fail(err, r.status > 0 ? (lb_status)r.status : LB_ERR_USAGE, "%s", r.why);
        b->local_rank = r.local_rank;
        b->local_size = r.local_size;
        return LB_OK;
    }
    int lfd = listen_on(port, why, sizeof why);
    if (lfd < 0)
        return lb_fail(err, LB_ERR_USAGE, "rank 0 cannot listen on MASTER_PORT=%d (%s)", port, why);
    char(*hosts)[64] = calloc((size_t)b->size, sizeof *hosts);
    if (hosts == NULL) {
        close(lfd);
        return lb_fail(err, LB_ERR_NOMEM, "out of memory for %d ranks", b->size);
    }
    snprintf(hosts[0], sizeof hosts[0], "%s", b->host);
    lb_status st = LB_OK;
    char bad[384] = ""; /* a peer is sent its first 255 bytes */
    int joined = 1;
    while (joined < b->size && st == LB_OK) {
        struct pollfd pfd = {.fd = lfd, .events = POLLIN};
        int ms = ms_left(deadline);
        if (lb_signals_interrupted()) {
            char what[160];
            snprintf(what, sizeof what, "rank 0 (MASTER_PORT=%d on %s, %d of %d ranks joined)",
                     port, b->host, joined, b->size);
            st = interrupted(what, err);
            break;
        }
        if (ms == 0) {
            char missing[160] = "";
            size_t used = 0;
            for (int r = 1; r < b->size && used < sizeof missing - 16; r++)
                if (b->fds[r] < 0)
                    used += (size_t)snprintf(missing + used, sizeof missing - used, "%s%d",
                                             used ? ", " : "", r);
            st = lb_fail(err, LB_ERR_COMM,
                         "rank 0 (MASTER_PORT=%d on %s): %d of %d ranks joined within %.0f s; "
                         "missing rank(s) %s",
                         port, b->host, joined, b->size, b->timeout_s, missing);
            break;
        }
        if (poll(&pfd, 1, ms) <= 0) continue;
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) continue;
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        hello_msg h;
        lb_err ignored;
        /* a rank says hello as soon as it connects; a connection that says nothing (a health
         * check, a port scanner) is dropped soon rather than keep the ranks queued behind it
         * waiting until the deadline */
        int64_t hello_by = lb_clock_now_ns() + BOOT_HELLO_NS;
        if (io_wait(fd, &h, sizeof h, false, hello_by < deadline ? hello_by : deadline, true,
                    "hello", &ignored) != LB_OK ||
            h.magic != BOOT_MAGIC) {
            close(fd); /* not one of ours: a port scanner, a stale peer */
            continue;
        }
        h.host[sizeof h.host - 1] = '\0';
        if (h.world != b->size)
            snprintf(bad, sizeof bad,
                     "the world size differs between ranks: rank %d on %s has %s=%d, rank 0 on %s "
                     "has %s=%d; every rank must be started with the same world size",
                     (int)h.rank, h.host, world_var(h.source), (int)h.world, b->host,
                     world_var(b->source), b->size);
        else if (h.rank <= 0 || h.rank >= b->size || b->fds[h.rank] >= 0)
            snprintf(
                bad, sizeof bad, "%s=%d (from %s) is %s; each rank from 1 to %d must join once",
                rank_var(h.source), (int)h.rank, h.host,
                h.rank <= 0 || h.rank >= b->size ? "out of range" : "taken twice", b->size - 1);
        if (bad[0] != '\0') {
            reply_msg r = {.ok = 0, .status = LB_ERR_USAGE};
            snprintf(r.why, sizeof r.why, "%.255s", bad);
            io_all(fd, &r, sizeof r, true, deadline, "reply", &ignored);
            close(fd);
            st = lb_fail(err, LB_ERR_USAGE, "%s", bad);
            break;
        }
        b->fds[h.rank] = fd;
        snprintf(hosts[h.rank], sizeof hosts[h.rank], "%s", h.host);
        joined++;
    }
    close(lfd);
    for (int r = 0; r < b->size; r++) {
        int lr = 0, ls = 0;
        for (int q = 0; q < b->size; q++) {
            if (strcmp(hosts[q], hosts[r]) != 0) continue;
            if (q < r) lr++;
            ls++;
        }
        if (r == 0) {
            b->local_rank = lr;
            b->local_size = ls;
            continue;
        }
        if (b->fds[r] < 0) continue;
        reply_msg m = {.ok = st == LB_OK, .status = st, .local_rank = lr, .local_size = ls};
        if (st != LB_OK) snprintf(m.why, sizeof m.why, "%.255s", bad[0] ? bad : err->msg);
        lb_err ignored;
        io_all(b->fds[r], &m, sizeof m, true, deadline, "reply", &ignored);
    }
    free(hosts);
    return st;
}

/* ---- detection ---- */

static bool launched_by_mpi(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") != NULL || getenv("PMI_SIZE") != NULL ||
           getenv("PMIX_RANK") != NULL;
}

/* RANK and WORLD_SIZE both set: they come from the launcher nearest this process, so they
 * win over Slurm's. Under `srun torchrun --nproc-per-node 8`, SLURM_PROCID counts srun's
 * tasks (one a node) while RANK counts torchrun's workers; the `--gpus N` workers of a Slurm
 * task likewise. */
static bool torchrun_set(void) {
    return env_or("RANK", NULL) != NULL && env_or("WORLD_SIZE", NULL) != NULL;
}

/* Slurm's rank and task count, and not torchrun's pair: lb_boot_init's third way. */
static bool slurm_set(void) {
    return !torchrun_set() && getenv("SLURM_PROCID") != NULL &&
           getenv("SLURM_STEP_NUM_TASKS") != NULL;
}

/* Of one value read three ways, the one lb_boot_init would read, in its order: MPI's, then
 * Slurm's unless torchrun's pair is set, then torchrun's. */
static const char *by_launcher(const char *mpi, const char *slurm, const char *torchrun) {
    return launched_by_mpi() ? mpi : slurm_set() ? slurm : torchrun;
}

int lb_boot_env_rank(void) {
    int r = parse_int(
        by_launcher(env_or("OMPI_COMM_WORLD_RANK", env_or("PMIX_RANK", env_or("PMI_RANK", NULL))),
                    getenv("SLURM_PROCID"), getenv("RANK")));
    return r >= 0 ? r : -1;
}

int lb_boot_env_size(void) {
    /* under `srun --mpi=pmix` the tasks are counted by Slurm's variables alone */
    const char *slurm =
        env_or("SLURM_STEP_NUM_TASKS", env_or("SLURM_NTASKS", env_or("SLURM_NPROCS", NULL)));
    int n = parse_int(by_launcher(env_or("OMPI_COMM_WORLD_SIZE", env_or("PMI_SIZE", slurm)),
                                  getenv("SLURM_STEP_NUM_TASKS"), getenv("WORLD_SIZE")));
    return n >= 1 ? n : 1;
}

#ifdef LB_HAVE_MPI
static lb_status mpi_join(lb_boot *b, lb_err *err) {
    int inited = 0, provided = 0;
    MPI_Initialized(&inited);
    if (!inited && MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
        return lb_fail(err, LB_ERR_COMM, "MPI_Init failed on %s", b->host);
    b->mpi_inited = !inited;
    MPI_Comm_rank(MPI_COMM_WORLD, &b->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &b->size);
    if (MPI_Comm_dup(MPI_COMM_WORLD, &b->ctrl) != MPI_SUCCESS)
        return lb_fail(err, LB_ERR_COMM, "rank %d on %s: MPI_Comm_dup failed", b->rank, b->host);
    b->ctrl_made = true;
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, b->rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &b->local_rank);
    MPI_Comm_size(node, &b->local_size);
    MPI_Comm_free(&node);
    return LB_OK;
}

/* Waits for one MPI request before the control plane's deadline. */
static lb_status mpi_wait(lb_boot *b, MPI_Request *req, const char *what, lb_err *err) {
    int64_t deadline = deadline_after(b->timeout_s);
    for (int spins = 0;; spins++) {
        int done = 0;
        MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (done) return LB_OK;
        if (lb_clock_now_ns() > deadline) {
            b->broken = true;
            return lb_fail(err, LB_ERR_COMM,
                           "rank %d on %s: control-plane %s did not complete within %.0f s",
                           b->rank, b->host, what, b->timeout_s);
        }
        if (spins > 1000) {
            struct timespec ts = {0, 50 * 1000};
            nanosleep(&ts, NULL);
        }
    }
}
#endif

static void note_stop(lb_boot *b, int r) {
    if (b->stop_rank < 0 || r < b->stop_rank) b->stop_rank = r;
}

/* Rank 0: receives the stop notices that have arrived and keeps the lowest rank among them
 * in stop_rank. Never waits. */
static void collect_stop_notices(lb_boot *b) {
    if (b->rank != 0 || b->size == 1) return;
#ifdef LB_HAVE_MPI
    if (b->source == LB_BOOT_MPI) {
        for (int flag = 1; flag;) {
            MPI_Status s;
            MPI_Iprobe(MPI_ANY_SOURCE, BOOT_STOP_TAG, b->ctrl, &flag, &s);
            if (!flag) break;
            char c;
            MPI_Recv(&c, 1, MPI_BYTE, s.MPI_SOURCE, BOOT_STOP_TAG, b->ctrl, MPI_STATUS_IGNORE);
            note_stop(b, s.MPI_SOURCE);
            b->stops_received++;
        }
        return;
    }
#endif
    /* a notice behind a gather's bytes that rank 0 has not read yet waits for that read */
    char c;
    for (int r = 1; b->fds != NULL && r < b->size; r++)
        while (b->fds[r] >= 0 && recv(b->fds[r], &c, 1, MSG_PEEK | MSG_DONTWAIT) == 1 &&
               c == BOOT_STOP && recv(b->fds[r], &c, 1, MSG_DONTWAIT) == 1)
            note_stop(b, r);
}

lb_status lb_boot_init(double timeout_s, lb_boot **out, lb_err *err) {
    *out = NULL;
    lb_boot *b = calloc(1, sizeof *b);
    if (b == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of memory");
    b->timeout_s = timeout_s;
    b->size = 1;
    b->local_size = 1;
    b->stop_rank = -1;
    gethostname(b->host, sizeof b->host - 1);
    lb_status st = LB_OK;
    const char *addr = NULL;
    int port = -1;
    if (launched_by_mpi()) {
#ifdef LB_HAVE_MPI
        b->source = LB_BOOT_MPI;
        st = mpi_join(b, err);
#else
        st = lb_fail(err, LB_ERR_UNSUPPORTED,
                     "started by an MPI launcher, but this llmbench was built without MPI; "
                     "rebuild with Open MPI (libopenmpi-dev) or start it with torchrun variables");
#endif
    } else if (slurm_set()) {
        b->source = LB_BOOT_SLURM;
        b->rank = env_int("SLURM_PROCID");
        b->size = env_int("SLURM_STEP_NUM_TASKS");
        addr = env_or("MASTER_ADDR", env_or("SLURM_LAUNCH_NODE_IPADDR", NULL));
        port = getenv("MASTER_PORT") ? env_int("MASTER_PORT") : BOOT_DEFAULT_PORT;
        if (b->rank < 0 || b->size < 1 || b->rank >= b->size)
            st = lb_fail(err, LB_ERR_USAGE,
                         "SLURM_PROCID=%s and SLURM_STEP_NUM_TASKS=%s: expected 0 <= PROCID < "
                         "NUM_TASKS",
                         env_or("SLURM_PROCID", ""), env_or("SLURM_STEP_NUM_TASKS", ""));
        else if (addr == NULL && b->size > 1) /* one task alone meets nobody */
            st = lb_fail(err, LB_ERR_USAGE,
                         "under Slurm without MPI, MASTER_ADDR (or SLURM_LAUNCH_NODE_IPADDR) must "
                         "name the host of rank 0");
    } else if (getenv("RANK") != NULL || getenv("WORLD_SIZE") != NULL) {
        b->source = LB_BOOT_TORCHRUN;
        b->rank = env_int("RANK");
        b->size = env_int("WORLD_SIZE");
        addr = env_or("MASTER_ADDR", NULL);
        port = env_int("MASTER_PORT");
        if (b->rank < 0 || b->size < 1 || b->rank >= b->size)
            st = lb_fail(err, LB_ERR_USAGE,
                         "RANK=%s WORLD_SIZE=%s: expected integers with 0 <= RANK < WORLD_SIZE",
                         env_or("RANK", "(unset)"), env_or("WORLD_SIZE", "(unset)"));
        else if (b->size > 1 && (addr == NULL || port < 1 || port > 65535))
            st = lb_fail(err, LB_ERR_USAGE,
                         "MASTER_ADDR=%s MASTER_PORT=%s: with RANK and WORLD_SIZE set, "
                         "MASTER_ADDR must name rank 0's host and MASTER_PORT be a port 1-65535",
                         env_or("MASTER_ADDR", "(unset)"), env_or("MASTER_PORT", "(unset)"));
    }
    if (st == LB_OK && addr != NULL && b->size > 1) {
        if (port < 1 || port > 65535)
            st = lb_fail(err, LB_ERR_USAGE, "MASTER_PORT=%s: expected a port 1-65535",
                         env_or("MASTER_PORT", ""));
        else
            st = tcp_rendezvous(b, addr, port, err);
    }
    if (st != LB_OK) {
        lb_boot_free(b);
        return st;
    }
    *out = b;
    return LB_OK;
}

#ifdef LB_HAVE_MPI
/* A notice sent after rank 0's last look may still be in flight, and MPI_Finalize wants
 * every send matched: the ranks sum the notices they sent, and rank 0 receives the rest.
 * Rank 0 waits under the deadline (a rank that never comes aborts the job, as a rank left
 * behind by a failure before the workload would hang it); the others wait for rank 0. */
static void receive_late_stop_notices(lb_boot *b) {
    if (b->size == 1 || b->broken) return;
    int sent = b->stop_sent ? 1 : 0, total = 0;
    MPI_Request req;
    lb_err ignored;
    MPI_Ireduce(&sent, &total, 1, MPI_INT, MPI_SUM, 0, b->ctrl, &req);
    if (b->rank != 0) { /* as long as rank 0 takes to store the run, as MPI_Finalize would */
        MPI_Wait(&req, MPI_STATUS_IGNORE);
        return;
    }
    if (mpi_wait(b, &req, "count of stop notices", &ignored) != LB_OK) return; /* broken */
    if (total > b->size - 1) total = b->size - 1;
    for (; b->stops_received < total; b->stops_received++) {
        char c;
        MPI_Irecv(&c, 1, MPI_BYTE, MPI_ANY_SOURCE, BOOT_STOP_TAG, b->ctrl, &req);
        if (mpi_wait(b, &req, "late stop notice", &ignored) != LB_OK) return; /* broken */
    }
}
#endif

void lb_boot_free(lb_boot *b) {
    if (b == NULL) return;
    if (b->fds != NULL)
        for (int i = 0; i < b->size; i++)
            if (b->fds[i] >= 0) close(b->fds[i]);
    free(b->fds);
#ifdef LB_HAVE_MPI
    if (b->source == LB_BOOT_MPI) {
        if (b->mpi_inited && b->ctrl_made) receive_late_stop_notices(b);
        if (b->broken) {
            fflush(stdout);
            fflush(stderr);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        if (b->ctrl_made) MPI_Comm_free(&b->ctrl);
        if (b->mpi_inited) MPI_Finalize();
    }
#endif
    free(b);
}

lb_boot_source lb_boot_source_of(const lb_boot *b) {
    return b->source;
}
const char *lb_boot_source_name(lb_boot_source s) {
    static const char *const names[] = {"single", "mpi", "slurm", "torchrun"};
    return names[s];
}
int lb_boot_rank(const lb_boot *b) {
    return b->rank;
}
int lb_boot_size(const lb_boot *b) {
    return b->size;
}
int lb_boot_local_rank(const lb_boot *b) {
    return b->local_rank;
}
int lb_boot_device(const lb_boot *b, int visible) {
    return visible == 1 ? 0 : b->local_rank;
}
int lb_boot_local_size(const lb_boot *b) {
    return b->local_size;
}
const char *lb_boot_host(const lb_boot *b) {
    return b->host;
}
double lb_boot_timeout_s(const lb_boot *b) {
    return b->timeout_s;
}

void lb_boot_set_timeout_s(lb_boot *b, double timeout_s) {
    b->timeout_s = timeout_s;
}
/* The peer behind fd closed its end: a hang-up, or end of stream with nothing unread. */
static bool closed(int fd) {
    struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLHUP | POLLRDHUP | POLLERR)) return true;
    char c;
    return recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

int lb_boot_gone(const lb_boot *b, char *text, size_t cap) {
    int n = 0;
    char list[256] = "";
    size_t used = 0;
    for (int r = 0; b->fds != NULL && r < b->size; r++) {
        if (r == b->rank || b->fds[r] < 0 || !closed(b->fds[r])) continue;
        if (used < sizeof list)
            used += (size_t)snprintf(list + used, sizeof list - used, "%s%d", n ? ", " : "", r);
        n++;
    }
    if (cap > 0) snprintf(text, cap, "%s%s", n == 0 ? "" : n == 1 ? "rank " : "ranks ", list);
    return n;
}

void lb_boot_mark_broken(lb_boot *b) {
    b->broken = true;
}

/* ---- control plane ---- */

/* Over TCP a peer's messages to rank 0 (a gather's bytes, a stop notice) each start with a
 * byte that says which, so a notice may go at any time between them without a wait. */

lb_status lb_boot_bcast(lb_boot *b, void *buf, size_t bytes, lb_err *err) {
    if (b->size == 1) return LB_OK;
#ifdef LB_HAVE_MPI
    if (b->source == LB_BOOT_MPI) {
        MPI_Request req;
        MPI_Ibcast(buf, (int)bytes, MPI_BYTE, 0, b->ctrl, &req);
        return mpi_wait(b, &req, "broadcast", err);
    }
#endif
    int64_t deadline = deadline_after(b->timeout_s);
    char what[96];
    if (b->rank != 0) {
        snprintf(what, sizeof what, "rank %d: broadcast from rank 0", b->rank);
        return io_all(b->fds[0], buf, bytes, false, deadline, what, err);
    }
    for (int r = 1; r < b->size; r++) {
        snprintf(what, sizeof what, "rank 0: broadcast to rank %d", r);
        LB_TRY(io_all(b->fds[r], buf, bytes, true, deadline, what, err));
    }
    return LB_OK;
}

lb_status lb_boot_gather(lb_boot *b, const void *mine, size_t bytes, void *all, lb_err *err) {
    if (b->rank == 0) memcpy(all, mine, bytes);
    if (b->size == 1) return LB_OK;
#ifdef LB_HAVE_MPI
    if (b->source == LB_BOOT_MPI) {
        MPI_Request req;
        MPI_Igather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, 0, b->ctrl, &req);
        return mpi_wait(b, &req, "gather", err);
    }
#endif
    int64_t deadline = deadline_after(b->timeout_s);
    char what[96];
    if (b->rank != 0) {
        snprintf(what, sizeof what, "rank %d: gather to rank 0", b->rank);
        LB_TRY(io_all(b->fds[0], &(char){BOOT_DATA}, 1, true, deadline, what, err));
        return io_all(b->fds[0], (void *)mine, bytes, true, deadline, what, err);
    }
    for (int r = 1; r < b->size; r++) {
        snprintf(what, sizeof what, "rank 0: gather from rank %d", r);
        char kind = BOOT_STOP;
        while (kind == BOOT_STOP) { /* stop notices sent before this gather's bytes */
            LB_TRY(io_all(b->fds[r], &kind, 1, false, deadline, what, err));
            if (kind == BOOT_STOP) note_stop(b, r);
        }
        if (kind != BOOT_DATA)
            return lb_fail(err, LB_ERR_COMM, "%s: unexpected byte %d on the control connection",
                           what, kind);
        LB_TRY(
            io_all(b->fds[r], (char *)all + (size_t)r * bytes, bytes, false, deadline, what, err));
    }
    return LB_OK;
}

void lb_boot_strings_free(char **all, int n) {
    if (all == NULL) return;
    for (int i = 0; i < n; i++)
        free(all[i]);
    free(all);
}

lb_status lb_boot_gather_text(lb_boot *b, const char *mine, char ***all, lb_err *err) {
    *all = NULL;
    uint64_t len = strlen(mine) + 1, *lens = NULL;
    char *flat = NULL;
    int n = b->size;
    if (b->rank == 0 && (lens = calloc((size_t)n, sizeof *lens)) == NULL)
        return lb_fail(err, LB_ERR_NOMEM, "out of memory");
    lb_status st = lb_boot_gather(b, &len, sizeof len, lens, err);
    /* every rank pads its text to the longest one, so one fixed-size gather carries all */
    uint64_t max = len;
    if (st == LB_OK && b->rank == 0)
        for (int i = 0; i < n; i++)
            max = lens[i] > max ? lens[i] : max;
    if (st == LB_OK) st = lb_boot_bcast(b, &max, sizeof max, err);
    char *padded = st == LB_OK ? calloc(1, max) : NULL;
    if (st == LB_OK && padded == NULL) st = lb_fail(err, LB_ERR_NOMEM, "out of memory");
    if (st == LB_OK && b->rank == 0 && (flat = malloc((size_t)n * max)) == NULL)
        st = lb_fail(err, LB_ERR_NOMEM, "out of memory");
    if (st == LB_OK) {
        memcpy(padded, mine, len);
        st = lb_boot_gather(b, padded, max, flat, err);
    }
    if (st == LB_OK && b->rank == 0) {
        char **out = calloc((size_t)n, sizeof *out);
        for (int i = 0; out != NULL && i < n; i++)
            out[i] = strndup(flat + (size_t)i * max, max);
        *all = out;
        if (out == NULL) st = lb_fail(err, LB_ERR_NOMEM, "out of memory");
    }
    free(padded);
    free(flat);
    free(lens);
    return st;
}

lb_status lb_boot_agree(lb_boot *b, const char *mine, lb_boot_judge judge, void *ctx, lb_err *err) {
    char **all = NULL;
    lb_err gerr = {{0}};
    lb_status st = lb_boot_gather_text(b, mine, &all, &gerr);
    struct {
        int32_t status;
        char msg[LB_ERR_MSG_BYTES];
    } verdict = {0};
    if (st == LB_OK && all != NULL) {
        lb_err v = {{0}};
        verdict.status = (int32_t)judge(all, b->size, ctx, &v);
        memcpy(verdict.msg, v.msg, sizeof verdict.msg);
    }
    lb_boot_strings_free(all, b->size);
    if (st == LB_OK) st = lb_boot_bcast(b, &verdict, sizeof verdict, &gerr);
    if (st != LB_OK) return lb_fail(err, st, "%s", gerr.msg);
    if (verdict.status == LB_OK) return LB_OK;
    return lb_fail(err, (lb_status)verdict.status, "%s", verdict.msg);
}

lb_status lb_boot_barrier(lb_boot *b, lb_err *err) {
    char one = 1, *all = NULL;
    if (b->rank == 0 && (all = malloc((size_t)b->size)) == NULL)
        return lb_fail(err, LB_ERR_NOMEM, "out of memory");
    lb_status st = lb_boot_gather(b, &one, 1, all, err);
    if (st == LB_OK) st = lb_boot_bcast(b, &one, 1, err);
    free(all);
    return st;
}

lb_status lb_boot_agree_stop(lb_boot *b, bool mine, int *who, lb_err *err) {
    *who = -1;
    if (b->size == 1) {
        *who = mine ? 0 : -1;
        return LB_OK;
    }
    if (mine && b->rank != 0 && !b->stop_sent) {
#ifdef LB_HAVE_MPI
        if (b->source == LB_BOOT_MPI) {
            static const char one = 1;
            MPI_Request req;
            MPI_Isend(&one, 1, MPI_BYTE, 0, BOOT_STOP_TAG, b->ctrl, &req);
            MPI_Request_free(&req);
            b->stop_sent = true;
        }
#endif
        /* a full send buffer (rank 0 not yet through a large gather): again next step */
        if (b->fds != NULL && b->fds[0] >= 0)
            b->stop_sent = send(b->fds[0], &(char){BOOT_STOP}, 1, MSG_DONTWAIT | MSG_NOSIGNAL) == 1;
    }
    int32_t first = -1;
    if (b->rank == 0) {
        collect_stop_notices(b);
        first = mine ? 0 : b->stop_rank;
    }
    LB_TRY(lb_boot_bcast(b, &first, sizeof first, err));
    *who = (int)first;
    return LB_OK;
}
