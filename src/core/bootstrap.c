/*
 * bootstrap.c -- creating a communicator from a rendezvous store, and the
 * launcher environment conventions.
 *
 * Every rank listens on its chosen address, publishes (address, node
 * identity) under "xc/<gen>/rank/<r>", reads everybody's entry, and the
 * ranks connect pairwise (mesh.c).  Rank 0 draws the communicator's random
 * 64-bit id and publishes it first; it authenticates every connection.
 * <gen> counts the communicators this rank created through the same
 * built-in store address, so a job may create several in turn over one
 * launcher-hosted store.  Caller-owned stores get no <gen>: the caller
 * prefixes keys per communicator (as c10d does).
 */
#include "comm.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define XC__INFO_MAGIC 0x58434933u /* "XCI3" */

typedef struct rank_info {
    uint32_t magic;
    int32_t rank, size;
    uint32_t pad;
    uint64_t uid;
    uint64_t nonce; /* this process's draw: another one under the same key is a duplicate */
    struct sockaddr_storage addr;
    char node[XC__NODEID_LEN];
    xc__cpumask_t cpus;
} rank_info_t;

/* Generation counters per built-in store address (a few distinct addresses
 * per process at most). */
static pthread_mutex_t g_gen_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    char addr[160];
    int gen;
} g_gens[64];

static int next_gen(const char *store_addr, int rank, int size)
{
    /* Keyed by rank too, so that threads acting as ranks of one job (tests,
     * some frameworks) count like separate processes would. */
    char addr[128];
    snprintf(addr, sizeof addr, "%d/%d/%s", rank, size, store_addr);
    pthread_mutex_lock(&g_gen_mu);
    int gen = 0, i;
    for (i = 0; i < 64 && g_gens[i].addr[0]; i++)
        if (!strcmp(g_gens[i].addr, addr)) break;
    if (i < 64) {
        if (!g_gens[i].addr[0]) snprintf(g_gens[i].addr, sizeof g_gens[i].addr, "%s", addr);
        gen = g_gens[i].gen++;
    }
    pthread_mutex_unlock(&g_gen_mu);
    return gen;
}

/* A store's non-zero result as a code: the built-in stores return an
 * xc_result_t, callers' stores anything (then: a system failure). */
static xc_result_t store_code(int r)
{
    return r < 0 && r >= XC_ERR_INTERNAL ? (xc_result_t)r : XC_ERR_SYSTEM;
}

/* `other`, an entry of this communicator under this rank's key with
 * another draw: a second process was started with this rank. */
static xc_result_t duplicate_rank(const rank_info_t *other, int rank)
{
    char a[XC__ADDRSTR_LEN], node[XC__NODEID_LEN];
    xc__addr_str(&other->addr, a, sizeof a);
    memcpy(node, other->node, sizeof node);
    node[sizeof node - 1] = 0;
    return xc__err(XC_ERR_MISMATCH,
                   "rank %d: another process joined this communicator as rank %d too (it "
                   "listens at %s, node \"%s\"): two processes were started with the same rank",
                   rank, rank, a, node);
}

static xc_result_t store_get(const xc_store_t *st, const char *key, void *buf, size_t cap,
                             uint64_t deadline_ns, const char *what)
{
    size_t len = 0;
    int ms = xc__poll_ms_left(deadline_ns);
    uint64_t t0 = xc__now_ns();
    /* (At least 1 ms: 0 may mean "no timeout" to a store -- c10d names zero
     * kNoTimeout -- though torch 1.13's TCPStore.wait raised at once here.) */
    int r = st->get(st->ctx, key, buf, cap, &len, ms < 0 ? 1 << 30 : ms < 1 ? 1 : ms);
    if (r != 0) {
        /* Built-in stores return an xc_result_t; callers' stores any
         * non-zero -- a timeout if it waited (nearly) all it was given:
         * its clock (CLOCK_REALTIME, say) may run a little ahead of ours,
         * and a lonely rank once read XC_ERR_SYSTEM that way. */
        uint64_t now = xc__now_ns(), slack = 2000000;
        int waited = ms >= 0 && now - t0 + slack >= (uint64_t)ms * 1000000ull;
        xc_result_t rc = store_code(r);
        if (rc == XC_ERR_SYSTEM && r != XC_ERR_SYSTEM && (now >= deadline_ns || waited))
            rc = XC_ERR_TIMEOUT;
        if (rc == XC_ERR_PEER_LOST) /* not the awaited rank's fault */
            return xc__err(rc, "the rendezvous store went away while this rank waited for "
                           "store key \"%s\" (its host -- rank 0, or the launcher -- exited or "
                           "failed): %s", key, xc__tls_error());
        return xc__err(rc, "%s (store key \"%s\"): %s%s", what, key, xc__tls_error(),
                       xc__auth_hint());
    }
    if (len != cap)
        return xc__err(XC_ERR_PROTOCOL, "store key \"%s\" holds %zu bytes, expected %zu "
                       "(another program or xcoll version uses this store?)", key, len, cap);
    return XC_OK;
}

/* Create a communicator through `st`, by `deadline` (the creation's one
 * deadline: reaching the store counts against it too).  `prefix`
 * namespaces the keys.  `look`: the store is a built-in one, whose get
 * may time out harmlessly -- a caller's may not survive it (a c10d
 * TCPStore's next request hung after a timed-out wait: its answer came
 * later and was read as the next one's). */
static xc_result_t init_store(xc_comm_t **out, int rank, int size, const xc_store_t *st,
                              const char *prefix, const struct sockaddr_storage *hint,
                              const xc__config_t *cfg, xc__store_server_t *srv,
                              uint64_t deadline, int look)
{
    xc_comm_t *c = NULL;
    int lfd = -1;
    struct sockaddr_storage *addrs = NULL;
    char(*ids)[XC__NODEID_LEN] = NULL;
    xc__cpumask_t *cpus = NULL;
    xc_result_t rc;
    char key[160];

    XC_CHECK_GOTO(xc__comm_alloc(rank, size, cfg, &c), rc, fail);
    c->store_srv = srv;
    srv = NULL;
    xc__log_set_rank(rank);
    addrs = calloc((size_t)size, sizeof *addrs);
    ids = calloc((size_t)size, sizeof *ids);
    cpus = calloc((size_t)size, sizeof *cpus);
    if (!addrs || !ids || !cpus) {
        rc = xc__err(XC_ERR_NOMEM, "out of memory");
        goto fail;
    }
    XC_CHECK_GOTO(xc__pick_local_addr(cfg->ifname, hint, &c->my_addr), rc, fail);
    XC_CHECK_GOTO(xc__listen(&c->my_addr, &lfd, &c->my_addr), rc, fail);

    snprintf(key, sizeof key, "%suid", prefix);
    if (rank == 0) {
        while (c->uid == 0) c->uid = xc__random64();
        int r = st->set(st->ctx, key, &c->uid, sizeof c->uid);
        if (r != 0) {
            rc = xc__err(store_code(r), "rank 0: cannot publish to the store: %s",
                         xc__tls_error());
            goto fail;
        }
    } else {
        XC_CHECK_GOTO(store_get(st, key, &c->uid, sizeof c->uid, deadline,
                                "rank 0 did not publish the communicator id in time"),
                      rc, fail);
    }
    rank_info_t me = {.magic = XC__INFO_MAGIC, .rank = rank, .size = size, .uid = c->uid,
                      .nonce = xc__random64(), .addr = c->my_addr};
    xc__node_id(cfg, me.node);
    xc__cpumask_self(&me.cpus);
    snprintf(key, sizeof key, "%srank/%d", prefix, rank);
    if (rank != 0 && look) {
        /* This rank's key already holds an entry of this communicator (a
         * look of 1 ms): another process joined as this rank first.
         * (Rank 0 cannot tell a duplicate from a stale entry here -- a
         * second rank 0 draws its own id -- nor can a caller's store be
         * looked into: they are checked only when the entry is read
         * back.) */
        rank_info_t prior;
        size_t len = 0;
        if (st->get(st->ctx, key, &prior, sizeof prior, &len, 1) == 0 && len == sizeof prior &&
            prior.magic == XC__INFO_MAGIC && prior.rank == rank && prior.uid == c->uid) {
            rc = duplicate_rank(&prior, rank);
            goto fail;
        }
    }
    int sr = st->set(st->ctx, key, &me, sizeof me);
    if (sr != 0) {
        rc = xc__err(store_code(sr), "rank %d: cannot publish to the store: %s", rank,
                     xc__tls_error());
        goto fail;
    }
    for (int j = 0; j < size; j++) {
        rank_info_t info;
        char what[96];
        snprintf(what, sizeof what, "rank %d did not join within %d ms", j, cfg->timeout_ms);
        snprintf(key, sizeof key, "%srank/%d", prefix, j);
        XC_CHECK_GOTO(store_get(st, key, &info, sizeof info, deadline, what), rc, fail);
        if (info.magic != XC__INFO_MAGIC || info.rank != j) {
            rc = xc__err(XC_ERR_PROTOCOL, "store key \"%s\" holds foreign data", key);
            goto fail;
        }
        if (info.size != size) {
            rc = xc__err(XC_ERR_MISMATCH, "rank %d was started with size %d, rank %d with size %d",
                         j, info.size, rank, size);
            goto fail;
        }
        if (j == rank && info.nonce != me.nonce && info.uid == c->uid) {
            rc = duplicate_rank(&info, rank); /* it wrote after this rank */
            goto fail;
        }
        if (info.uid != c->uid) {
            rc = xc__err(XC_ERR_MISMATCH,
                         "rank %d belongs to another communicator (stale store entries? "
                         "use a fresh store or prefix per communicator)", j);
            goto fail;
        }
        addrs[j] = info.addr;
        memcpy(ids[j], info.node, XC__NODEID_LEN);
        ids[j][XC__NODEID_LEN - 1] = 0;
        cpus[j] = info.cpus;
    }
    xc__comm_set_nodes(c, ids, cpus); /* mesh_connect needs the nodes */
    XC_CHECK_GOTO(xc__mesh_connect(c, lfd, addrs, deadline), rc, fail);
    close(lfd);
    lfd = -1;
    free(addrs);
    free(ids);
    free(cpus);
    addrs = NULL;
    ids = NULL;
    cpus = NULL;
    {
        char a[XC__ADDRSTR_LEN];
        xc__addr_str(&c->my_addr, a, sizeof a);
        XC_INFO("rank %d/%d on %s, node %d/%d, local rank %d/%d", rank, size, a, c->node,
                c->nnodes, c->local_rank, c->local_size);
    }
    XC_CHECK_GOTO(xc__comm_start(c), rc, fail_started);
    *out = c;
    return XC_OK;
fail_started:
    {
        /* The thread runs: destroy tears it down; keep the message.  The
         * store closes at once (as below), not released by destroy. */
        char msg[XC__ERRMSG_LEN];
        snprintf(msg, sizeof msg, "%s", xc__tls_error());
        xc__store_server_t *own = c->store_srv;
        c->store_srv = NULL;
        xc_comm_destroy(c);
        xc__store_server_stop(own);
        return xc__err(rc, "%s", msg);
    }
fail:
    if (lfd >= 0) close(lfd);
    free(addrs);
    free(ids);
    free(cpus);
    /* A failed creation closes the store at once: the others waiting on
     * it learn it now (released, it would serve them until their deadline). */
    if (c) srv = c->store_srv, c->store_srv = NULL;
    xc__store_server_stop(srv);
    xc__comm_free(c);
    return rc;
}

static xc_result_t check_rank_size(int rank, int size)
{
    if (size < 1) return xc__err(XC_ERR_INVALID, "size must be >= 1 (got %d)", size);
    if (rank < 0 || rank >= size)
        return xc__err(XC_ERR_INVALID, "rank must be in [0, %d) (got %d)", size, rank);
    return XC_OK;
}

xc_result_t xc_comm_init_store(xc_comm_t **comm, int rank, int size, const xc_store_t *store,
                               const xc_config_t *ucfg)
{
    if (!comm) return xc__err(XC_ERR_INVALID, "xc_comm_init_store: comm is NULL");
    *comm = NULL;
    if (!store || !store->set || !store->get)
        return xc__err(XC_ERR_INVALID, "xc_comm_init_store: store and its set/get callbacks are required");
    if (store->size < offsetof(xc_store_t, wait))
        return xc__err(XC_ERR_INVALID, "xc_comm_init_store: store->size must be sizeof(xc_store_t)");
    XC_CHECK(check_rank_size(rank, size));
    xc__config_t cfg;
    XC_CHECK(xc__config_resolve(ucfg, &cfg));
    return init_store(comm, rank, size, store, "xc/", NULL, &cfg, NULL,
                      xc__deadline_ns(cfg.timeout_ms), 0);
}


xc_result_t xc_comm_init(xc_comm_t **comm, int rank, int size, const char *addr,
                         const xc_config_t *ucfg)
{
    if (!comm) return xc__err(XC_ERR_INVALID, "xc_comm_init: comm is NULL");
    *comm = NULL;
    if (!addr || !*addr)
        return xc__err(XC_ERR_INVALID, "xc_comm_init: addr is empty (want \"host:port\" or \"file:/dir\")");
    XC_CHECK(check_rank_size(rank, size));
    xc__config_t cfg;
    XC_CHECK(xc__config_resolve(ucfg, &cfg));
    uint64_t deadline = xc__deadline_ns(cfg.timeout_ms);
    char prefix[48];
    snprintf(prefix, sizeof prefix, "xc/%d/", next_gen(addr, rank, size));

    if (!strncmp(addr, "file:", 5)) {
        xc_store_t st;
        XC_CHECK(xc__file_store_open(addr + 5, &st));
        xc_result_t rc = init_store(comm, rank, size, &st, prefix, NULL, &cfg, NULL, deadline, 1);
        xc__file_store_close(&st);
        return rc;
    }
    char host[256];
    int port;
    XC_CHECK(xc__parse_hostport(addr, "rendezvous address", host, sizeof host, &port));
    xc__store_server_t *srv = NULL;
    long external = 0;
    XC_CHECK(xc__env_int("XCOLL_STORE_EXTERNAL", 0, 1, &external));
    if (rank == 0 && !external) {
        int bound;
        /* A loopback address means a job on this machine: listen on it
         * only.  Otherwise listen on every interface, as c10d does: the
         * name of the host may resolve to a loopback alias here (Debian
         * maps the hostname to 127.0.1.1) yet to a routable address on the
         * other nodes. */
        const char *bind_host = xc__host_is_loopback(host) ? host : NULL;
        if (xc__store_server_start(bind_host, port, &cfg.auth, &srv, &bound) != XC_OK) {
            /* Hosted by a live communicator of this process (keys are
             * namespaced per creation): use it as a client.  Anyone
             * else's -- another job, a foreign service -- is not ours to
             * join: the two jobs' keys would mix. */
            if (!xc__store_server_hosted(port))
                return xc__err(XC_ERR_SYSTEM, "rank 0: cannot host the rendezvous store at %s: "
                               "%s (another job or service holds the port: choose a free "
                               "one, or set XCOLL_STORE_EXTERNAL=1 where a launcher hosts "
                               "the store)", addr, xc__tls_error());
            XC_INFO("the store at %s is hosted by another communicator of this process; "
                    "connecting as a client", addr);
            srv = NULL;
        }
    }
    xc_store_t st;
    struct sockaddr_storage local;
    xc_result_t rc = xc__tcp_store_open(host, port, xc__poll_ms_left(deadline), &cfg.auth, &st,
                                        &local);
    if (rc != XC_OK) {
        xc__store_server_stop(srv);
        return xc__err(rc, "rank %d: cannot reach the rendezvous store at %s: %s", rank, addr,
                       xc__tls_error());
    }
    /* This rank's address for its peers is the one it reached the store
     * from -- unless that is a loopback alias of a name that is not a
     * loopback spelling (rank 0 reaching its own store by the host's
     * name): peers on other machines could not connect to it, so an
     * interface's address is chosen instead. */
    const struct sockaddr_storage *hint = &local;
    if (xc__addr_is_loopback(&local) && !xc__host_is_loopback(host)) {
        XC_INFO("rank %d reached the store at %s over loopback: advertising an interface's "
                "address instead", rank, addr);
        hint = NULL;
    }
    rc = init_store(comm, rank, size, &st, prefix, hint, &cfg, srv, deadline, 1);
    xc__tcp_store_close(&st);
    return rc;
}

/* First pair of variables that is set wins. */
static xc_result_t env_rank_size(int *rank, int *size)
{
    static const char *pairs[][2] = {{"XCOLL_RANK", "XCOLL_SIZE"},
                                     {"RANK", "WORLD_SIZE"},
                                     {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                     {"PMI_RANK", "PMI_SIZE"},
                                     {"SLURM_PROCID", "SLURM_NTASKS"}};
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        if (!getenv(pairs[i][0]) || !getenv(pairs[i][1])) continue;
        long r = -1, s = -1;
        XC_CHECK(xc__env_int(pairs[i][0], 0, 1 << 24, &r));
        XC_CHECK(xc__env_int(pairs[i][1], 1, 1 << 24, &s));
        *rank = (int)r;
        *size = (int)s;
        return XC_OK;
    }
    return xc__err(XC_ERR_INVALID,
                   "no rank/size in the environment: set XCOLL_RANK/XCOLL_SIZE or launch "
                   "with xcoll-run, torchrun (RANK/WORLD_SIZE), mpirun or srun");
}

xc_result_t xc_comm_init_env(xc_comm_t **comm, const xc_config_t *ucfg)
{
    if (!comm) return xc__err(XC_ERR_INVALID, "xc_comm_init_env: comm is NULL");
    *comm = NULL;
    int rank = -1, size = 0;
    XC_CHECK(env_rank_size(&rank, &size));
    const char *addr = getenv("XCOLL_ADDR");
    char buf[300];
    if (!addr || !*addr) {
        const char *ma = getenv("MASTER_ADDR"), *mp = getenv("MASTER_PORT");
        if (!ma || !*ma)
            return xc__err(XC_ERR_INVALID,
                           "no rendezvous address: set XCOLL_ADDR=host:port (or file:/dir) "
                           "or MASTER_ADDR/MASTER_PORT");
        snprintf(buf, sizeof buf, strchr(ma, ':') ? "[%s]:%s" : "%s:%s", ma,
                 mp && *mp ? mp : "29500");
        addr = buf;
    }
    return xc_comm_init(comm, rank, size, addr, ucfg);
}
