/*
 * split.c -- xc_comm_split: sub-communicators (TP/DP/PP groups).
 *
 * Collective over the parent: every rank contributes (color, key, listening
 * address) through an all-gather on the parent; ranks of one color order
 * themselves by (key, parent rank) and connect pairwise exactly as at
 * creation, authenticated with an id derived from the parent's id, the
 * split's sequence number and the color (so no two children share one).
 * Node identities come from the parent, so no store is needed.
 *
 * xc__comm_build, the tail that turns (members' listening addresses, node
 * identities, CPU masks, id) into a started communicator, is shared with
 * xc_comm_shrink (shrink.c).
 */
#include "comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct split_info {
    int32_t color, key;
    int32_t err; /* this rank cannot take part: its error code (0: it can) */
    struct sockaddr_storage addr;
    xc__cpumask_t cpus;
} split_info_t;

typedef struct member {
    int key, prank;
} member_t;

static int member_cmp(const void *a, const void *b)
{
    const member_t *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return x->prank < y->prank ? -1 : x->prank > y->prank;
}

/* splitmix64: a well-mixed child id from (parent id, split number, color). */
uint64_t xc__mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}
#define mix xc__mix64

xc_result_t xc__comm_build(const xc__config_t *cfg, uint64_t uid, int rank, int size,
                           const struct sockaddr_storage *my_addr, int lfd,
                           const struct sockaddr_storage *addrs, char (*ids)[XC__NODEID_LEN],
                           const xc__cpumask_t *cpus, uint64_t deadline_ns, xc_comm_t **out)
{
    xc_comm_t *c = NULL;
    XC_CHECK(xc__comm_alloc(rank, size, cfg, &c));
    c->uid = uid ? uid : 1;
    c->my_addr = *my_addr;
    xc__comm_set_nodes(c, ids, cpus); /* mesh_connect needs the nodes */
    xc_result_t rc = xc__mesh_connect(c, lfd, addrs, deadline_ns);
    if (rc != XC_OK) {
        xc__comm_free(c);
        return rc;
    }
    rc = xc__comm_start(c);
    if (rc != XC_OK) {
        char msg[XC__ERRMSG_LEN];
        memcpy(msg, xc__tls_error(), sizeof msg);
        xc_comm_destroy(c);
        return xc__err(rc, "%s", msg);
    }
    *out = c;
    return XC_OK;
}

xc_result_t xc_comm_split(xc_comm_t *parent, int color, int key, xc_comm_t **child,
                          const xc_config_t *ucfg)
{
    if (!child) return xc__comm_fail(parent, xc__err(XC_ERR_INVALID, "xc_comm_split: child is NULL"));
    *child = NULL;
    if (!parent) return xc__err(XC_ERR_INVALID, "xc_comm_split: parent is NULL");
    /* From here every rank joins the all-gather, also one that cannot take
     * part (a bad color or configuration, no memory, no socket): it says so
     * there, and every rank fails the split naming it -- none is left
     * waiting in the all-gather, nor pairs its next call with the others'
     * split. */
    xc__config_t cfg = parent->cfg;
    xc_result_t local = color < 0 && color != XC_COLOR_NONE
                            ? xc__err(XC_ERR_INVALID, "xc_comm_split: color must be >= 0 or "
                                      "XC_COLOR_NONE (got %d)", color)
                            : xc__config_override(ucfg, &cfg);
    int n = parent->size;
    xc_result_t rc = XC_OK;
    int lfd = -1;
    split_info_t *all = calloc((size_t)n, sizeof *all);
    member_t *mem = calloc((size_t)n, sizeof *mem);
    struct sockaddr_storage *addrs = calloc((size_t)n, sizeof *addrs);
    char(*ids)[XC__NODEID_LEN] = calloc((size_t)n, sizeof *ids);
    xc__cpumask_t *cpus = calloc((size_t)n, sizeof *cpus);
    uint64_t split_no = (uint64_t)parent->split_count++;
    if (!all) { /* not even the all-gather: the parent fails on every rank */
        xc__comm_poison_now(parent, XC_ERR_NOMEM, XC__POISON_LOCAL,
                            "rank %d ran out of memory in xc_comm_split", parent->rank);
        rc = xc__err(XC_ERR_NOMEM, "xc_comm_split: out of memory");
        goto out;
    }
    if (local == XC_OK && (!mem || !addrs || !ids || !cpus))
        local = xc__err(XC_ERR_NOMEM, "xc_comm_split: out of memory");
    split_info_t me = {.color = color, .key = key};
    xc__cpumask_self(&me.cpus);
    if (local == XC_OK && color != XC_COLOR_NONE)
        local = xc__listen(&parent->my_addr, &lfd, &me.addr);
    char why[XC__ERRMSG_LEN] = "";
    if (local != XC_OK) snprintf(why, sizeof why, "%s", xc__tls_error());
    me.err = local;
    XC_CHECK_GOTO(xc_allgather(&me, all, sizeof me, XC_UINT8, parent), rc, out);
    /* This rank's own failure first, else the first rank's that failed. */
    int bad = local != XC_OK ? parent->rank : -1;
    for (int r = 0; r < n && bad < 0; r++)
        if (all[r].err) bad = r;
    if (bad == parent->rank) {
        rc = xc__err(local, "%s", why);
        goto out;
    }
    if (bad >= 0) {
        xc_result_t e =
            xc__wire_code_ok(all[bad].err) ? (xc_result_t)all[bad].err : XC_ERR_INTERNAL;
        rc = xc__err(e, "xc_comm_split: rank %d could not take part (%s): no communicator was made",
                     bad, xc_err_name(e));
        goto out;
    }
    if (color == XC_COLOR_NONE) goto out;

    int size = 0, rank = -1;
    for (int r = 0; r < n; r++)
        if (all[r].color == color) mem[size++] = (member_t){all[r].key, r};
    qsort(mem, (size_t)size, sizeof *mem, member_cmp);
    for (int i = 0; i < size; i++) {
        if (mem[i].prank == parent->rank) rank = i;
        addrs[i] = all[mem[i].prank].addr;
        /* Parent node indices stand in for node identities. */
        snprintf(ids[i], XC__NODEID_LEN, "%d", parent->node_of[mem[i].prank]);
    }
    uint64_t uid = mix(parent->uid ^ mix(split_no * 0x100000001ull + (uint64_t)color));
    for (int i = 0; i < size; i++) cpus[i] = all[mem[i].prank].cpus;
    rc = xc__comm_build(&cfg, uid, rank, size, &parent->my_addr, lfd, addrs, ids, cpus,
                        xc__deadline_ns(cfg.timeout_ms), child);
out:
    if (lfd >= 0) close(lfd);
    free(all);
    free(mem);
    free(addrs);
    free(ids);
    free(cpus);
    return xc__comm_fail(parent, rc);
}
