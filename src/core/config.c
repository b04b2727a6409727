/*
 * config.c -- the XCOLL_* table and its resolution: caller's xc_config_t
 * field (when set) > environment variable > built-in default.
 */
#include "config.h"
#include "../transport/shm.h"       /* XC__SHM_ROT_MAX */
#include "../transport/transport.h" /* XC__MAX_STREAMS */

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Defaults.  The timeout matches PyTorch's default process-group timeout. */
#define XC__DEFAULT_TIMEOUT_MS (30 * 60 * 1000)
/* Waiting (engine.c): -1 = chosen when the node is known (xc__comm_set_wait):
 * spin 20 us then yield 200 us; with more ranks on the node than cores,
 * no spin and 2 ms of yielding. */
#define XC__DEFAULT_SPIN_US (-1)
#define XC__DEFAULT_YIELD_US (-1)
/* Liveness (docs/fault-tolerance.md): a heartbeat a second from every
 * rank's progress thread; a peer silent for a minute is lost -- far above
 * scheduling hiccups, far below the half-hour operation deadline. */
#define XC__DEFAULT_HEARTBEAT_MS 1000
#define XC__DEFAULT_LIVENESS_MS 60000
/* TCP buffers: see docs/tcp.md for the measurements behind the choice. */
#define XC__DEFAULT_SOCKET_BUF_KB 4096

xc_result_t xc__env_int(const char *name, long lo, long hi, long *out)
{
    const char *s = getenv(name);
    if (!s || !*s) return XC_OK;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi)
        return xc__err(XC_ERR_INVALID, "%s=\"%s\": expected an integer in [%ld, %ld]",
                       name, s, lo, hi);
    *out = v;
    return XC_OK;
}

static void copy_str(char *dst, size_t cap, const char *src)
{
    size_t n = strlen(src);
    if (n >= cap) n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = 0;
}

/* Does the caller's struct (of size `size`) contain field ending at `end`? */
#define XC__HAS_FIELD(user, field)                                             \
    ((user)->size >= offsetof(xc_config_t, field) + sizeof((user)->field))

xc_result_t xc__config_override(const xc_config_t *user, xc__config_t *c)
{
    if (!user) return XC_OK;
    if (user->size < sizeof(size_t) || user->size > 4096)
        return xc__err(XC_ERR_INVALID,
                       "config: size %zu is not sizeof(xc_config_t) (use XC_CONFIG_INIT)",
                       user->size);
    if (XC__HAS_FIELD(user, timeout_ms) && user->timeout_ms >= 0)
        c->timeout_ms = user->timeout_ms;
    if (XC__HAS_FIELD(user, progress_thread) && user->progress_thread >= 0)
        c->progress_thread = user->progress_thread ? 1 : 0;
    if (XC__HAS_FIELD(user, socket_ifname) && user->socket_ifname)
        copy_str(c->ifname, sizeof c->ifname, user->socket_ifname);
    if (XC__HAS_FIELD(user, node_id) && user->node_id)
        copy_str(c->node_id, sizeof c->node_id, user->node_id);
    return XC_OK;
}

xc_result_t xc__config_resolve(const xc_config_t *user, xc__config_t *c)
{
    memset(c, 0, sizeof *c);
    long v;
    v = XC__DEFAULT_TIMEOUT_MS;
    XC_CHECK(xc__env_int("XCOLL_TIMEOUT_MS", -1, 1L << 30, &v));
    c->timeout_ms = (int)v;
    v = 1;
    XC_CHECK(xc__env_int("XCOLL_PROGRESS_THREAD", 0, 1, &v));
    c->progress_thread = (int)v;
    v = XC__DEFAULT_SPIN_US;
    XC_CHECK(xc__env_int("XCOLL_SPIN_US", 0, 10000000, &v));
    c->spin_us = (int)v;
    v = XC__DEFAULT_YIELD_US;
    XC_CHECK(xc__env_int("XCOLL_YIELD_US", 0, 10000000, &v));
    c->yield_us = (int)v;
    v = XC__DEFAULT_HEARTBEAT_MS;
    XC_CHECK(xc__env_int("XCOLL_HEARTBEAT_MS", 0, 3600000, &v));
    c->heartbeat_ms = (int)v;
    v = XC__DEFAULT_LIVENESS_MS;
    XC_CHECK(xc__env_int("XCOLL_LIVENESS_MS", 0, 1L << 30, &v));
    c->liveness_ms = (int)v;
    if (c->liveness_ms > 0 && c->heartbeat_ms > 0 && c->liveness_ms < 3 * c->heartbeat_ms)
        return xc__err(XC_ERR_INVALID,
                       "XCOLL_LIVENESS_MS=%d must be at least 3 x XCOLL_HEARTBEAT_MS=%d "
                       "(or 0: no liveness check)", c->liveness_ms, c->heartbeat_ms);
    v = 1;
    XC_CHECK(xc__env_int("XCOLL_SHM", 0, 1, &v));
    c->shm = (int)v;
    v = 256;
    XC_CHECK(xc__env_int("XCOLL_SHM_SLOT_KB", 4, 1 << 20, &v));
    c->shm_slot_kb = (int)v;
    v = -1; /* unset: xc__shm_rot_for chooses */
    XC_CHECK(xc__env_int("XCOLL_SHM_SLOT_ROT", 1, XC__SHM_ROT_MAX, &v));
    c->shm_slot_rot = (int)v;
    v = 64;
    XC_CHECK(xc__env_int("XCOLL_SHM_CMA_MIN_KB", 0, 1 << 30, &v));
    c->shm_cma_min_kb = (int)v;
    v = -1; /* chosen when the node is known (xc__comm_set_wait) */
    XC_CHECK(xc__env_int("XCOLL_SHM_P2P_CMA_MIN_KB", -1, 1 << 30, &v));
    c->shm_p2p_cma_min_kb = (int)v;
    v = -1;
    XC_CHECK(xc__env_int("XCOLL_SHM_CMA_MAX_KB", -1, 1 << 30, &v));
    c->shm_cma_max_kb = (int)v;
    v = -1;
    XC_CHECK(xc__env_int("XCOLL_SHM_NT", -1, 1, &v));
    c->shm_nt = (int)v;
    v = 64;
    XC_CHECK(xc__env_int("XCOLL_SHM_CHAN_KB", 0, 1 << 16, &v));
    c->shm_chan_kb = (int)v;
    v = 4;
    XC_CHECK(xc__env_int("XCOLL_SHM_PROMOTE", 0, 1 << 20, &v));
    c->shm_promote = (int)v;
    long huge = 1; /* XCOLL_HUGEPAGES=0: no huge pages from the library at all */
    XC_CHECK(xc__env_int("XCOLL_HUGEPAGES", 0, 1, &huge));
    if (!huge) c->shm_promote = 0;
    v = -1;
    XC_CHECK(xc__env_int("XCOLL_NODE_CROWDED", -1, 1, &v));
    c->node_crowded = (int)v;
    v = -1;
    XC_CHECK(xc__env_int("XCOLL_SHM_COOP", -1, 1, &v));
    c->shm_coop = (int)v;
    v = 1;
    XC_CHECK(xc__env_int("XCOLL_SHM_MEMBARRIER", 0, 1, &v));
    c->shm_membarrier = (int)v;
    v = 1;
    XC_CHECK(xc__env_int("XCOLL_EXPRESS_BIAS", 0, 1, &v));
    c->express_bias = (int)v;
    v = 0;
    XC_CHECK(xc__env_int("XCOLL_DETERMINISTIC", 0, 1, &v));
    c->deterministic = (int)v;
    v = 1;
    XC_CHECK(xc__env_int("XCOLL_SOCKETS_PER_PEER", 1, XC__MAX_STREAMS, &v));
    c->sockets_per_peer = (int)v;
    v = XC__DEFAULT_SOCKET_BUF_KB;
    XC_CHECK(xc__env_int("XCOLL_SOCKET_BUF_KB", 0, 1 << 20, &v));
    c->socket_buf_kb = (int)v;
    const char *s = getenv("XCOLL_SOCKET_IFNAME");
    if (s) copy_str(c->ifname, sizeof c->ifname, s);
    s = getenv("XCOLL_NODE_ID");
    if (s) copy_str(c->node_id, sizeof c->node_id, s);
    XC_CHECK(xc__auth_conf_env(&c->auth));
    return xc__config_override(user, c);
}
