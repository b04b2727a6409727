/*
 * test_reduce.c -- the specification of xc_reduce, for every root.
 *
 * The root's recvbuf receives the reduction over all ranks of sendbuf; in
 * place on the root is sendbuf == recvbuf.  recvbuf "is used on root only":
 * the other ranks pass NULL (in the in-place variant) or a poisoned buffer
 * (out of place) that must come back untouched.  Every rank's sendbuf is
 * unchanged except the root's in place.  --full runs every root for every
 * dtype x op x count (roots 0 and size-1 only at the big count); --quick
 * rotates the root from case to case so every root is exercised with a
 * spread of dtypes and ops.
 *
 * Stream: 3000 back-to-back int32 sums, roots rotating, 4 B to 800 B (the
 * flagged lines' express path up to 664 B, ring entries in the slots
 * past it), in place on the root every third, each checked exactly.
 */
#include "harness.h"

static void run_case(xc_dtype_t dt, xc_op_t op, size_t count, int inplace,
                     int root)
{
    h_case_t c = h_case("reduce", dt, op, count, inplace, root);
    h_announce(&c);
    size_t bytes = count * xc_dtype_size(dt);
    int is_root = H.rank == root;
    char *send = h_alloc(bytes);
    char *recv = NULL;
    if (is_root) recv = inplace ? send : h_alloc(bytes);
    else if (!inplace) recv = h_alloc(bytes);
    h_fill(&c, send, count, H.rank, 0);

    H_CHECK(H.comm, xc_reduce(send, recv, count, dt, op, root, H.comm));
    H.issued[XC_COLL_REDUCE]++;

    if (is_root) {
        h_check_reduced(&c, recv, count, 0, "root recvbuf");
        h_check_guard(&c, recv, bytes, "root recvbuf");
    } else if (recv) {
        h_check_untouched(&c, recv, bytes + H_GUARD,
                          "non-root recvbuf (root only)");
    }
    if (!(is_root && inplace)) {
        h_check_copy(&c, send, count, H.rank, 0, "sendbuf (must not change)");
        h_check_guard(&c, send, bytes, "sendbuf");
    }
    if (recv != send) h_free(recv);
    h_free(send);
}

static void run_rejects(void)
{
    float a[8] = {0}, b[8] = {0};
    H_EXPECT_RC(H.comm, XC_ERR_INVALID,
                xc_reduce(a, b, 4, XC_FLOAT32, XC_SUM, H.size, H.comm));
    H_EXPECT_RC(H.comm, XC_ERR_INVALID,
                xc_reduce(a, b, 4, XC_FLOAT32, XC_SUM, -1, H.comm));
    H_EXPECT_RC(H.comm, XC_ERR_INVALID,
                xc_reduce(a, b, 4, XC_FLOAT16, XC_BAND, 0, H.comm));
    H_EQ_INT("xc_comm_status after rejected calls", xc_comm_status(H.comm),
             XC_OK);
}

static void run_stream(void)
{
    int32_t in[201], out[201];
    for (int it = 0; it < 3000; it++) {
        int root = it % H.size, inplace = it % 3 == 0 && H.rank == root;
        size_t n = 1 + (size_t)(it * 7) % 200;
        for (size_t i = 0; i <= n; i++) in[i] = (H.rank + 1) * (it + (int)i), out[i] = -1;
        int32_t *dst = inplace ? in : out;
        H_CHECK(H.comm, xc_reduce(in, H.rank == root ? dst : NULL, n, XC_INT32, XC_SUM, root,
                                  H.comm));
        H.issued[XC_COLL_REDUCE]++;
        int32_t tri = H.size * (H.size + 1) / 2;
        for (size_t i = 0; i < n && H.rank == root; i++)
            H_EQ_INT("stream reduce", dst[i], tri * (it + (int)i));
        H_EQ_INT("stream reduce: past the count", dst[n],
                 inplace ? (H.rank + 1) * (it + (int)n) : -1);
    }
}

int main(int argc, char **argv)
{
    h_init(argc, argv);
    run_rejects();
    if (H.size >= 2) run_stream();
    int rotating_root = 0;
    for (h_cell_t c = {0}; h_next_cell(&c, 1);)
        for (int inplace = 0; inplace <= 1; inplace++) {
            if (H.full) {
                /* Every root; at the big count (which exercises chunking,
                 * not root logic) the first and last. */
                for (int root = 0; root < H.size; root++)
                    if (c.count < H_BIG_COUNT || root == 0 || root == H.size - 1)
                        run_case(c.dt, c.op, c.count, inplace, root);
            } else {
                run_case(c.dt, c.op, c.count, inplace, rotating_root);
                rotating_root = (rotating_root + 1) % H.size;
            }
        }
    h_check_stats(H.comm, H.base_ops, H.issued, "world");
    return h_finish();
}
