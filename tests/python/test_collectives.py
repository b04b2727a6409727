#!/usr/bin/python3
"""Every collective of the Python binding on numpy arrays, blocking and
non-blocking, in place and out of place, every dtype (bf16 through uint16
buffers with dtype=) and every reduction, checked against a reference
computed from what each rank contributed.  Run by xcoll-run on N ranks."""
import harness as h

np = h.need("numpy")
import xcoll  # noqa: E402

D = xcoll.DType
NP = {D.INT8: np.int8, D.UINT8: np.uint8, D.INT16: np.int16,
      D.UINT16: np.uint16, D.INT32: np.int32, D.UINT32: np.uint32,
      D.INT64: np.int64, D.UINT64: np.uint64, D.FLOAT16: np.float16,
      D.FLOAT32: np.float32, D.FLOAT64: np.float64}
INTS = [D.INT8, D.UINT8, D.INT16, D.UINT16, D.INT32, D.UINT32, D.INT64,
        D.UINT64]
FLOATS = [D.FLOAT16, D.BFLOAT16, D.FLOAT32, D.FLOAT64]
ALL_OPS = list(xcoll.Op)
FLOAT_OPS = [xcoll.SUM, xcoll.PROD, xcoll.MIN, xcoll.MAX, xcoll.AVG]
COUNTS = [1, 1000, 70001]   # 70001 fp64: larger than a shared-memory slot


def bf16_encode(x):
    """float values (exact in bf16) -> uint16 bf16 bit patterns."""
    return (np.asarray(x, np.float32).view(np.uint32) >> 16).astype(np.uint16)


def bf16_decode(u):
    return (np.asarray(u, np.uint16).astype(np.uint32) << 16).view(np.float32)


def values(rank, n, op, seed=0):
    """Small positive integers, a function of (rank, index): every sum,
    product and average below is exact in every dtype (bf16 included)."""
    i = np.arange(n, dtype=np.int64)
    hi = 3 if op == xcoll.PROD else 30
    return (rank * 7 + i * 3 + seed) % hi + 1


def make(dt, v):
    if dt == D.BFLOAT16:
        return bf16_encode(v.astype(np.float32))
    return v.astype(NP[dt])


def as_float(dt, a):
    return bf16_decode(a) if dt == D.BFLOAT16 else a


def reference(dt, op, arrays):
    """op over ranks, in the dtype's own arithmetic (integers wrap)."""
    if dt == D.BFLOAT16 or dt in (D.FLOAT16, D.FLOAT32, D.FLOAT64):
        xs = np.stack([as_float(dt, a).astype(np.float64) for a in arrays])
        r = {xcoll.SUM: xs.sum(0), xcoll.PROD: xs.prod(0),
             xcoll.MIN: xs.min(0), xcoll.MAX: xs.max(0),
             xcoll.AVG: xs.sum(0) / len(arrays)}[op]
        return make(dt, r) if dt == D.BFLOAT16 else r.astype(NP[dt])
    xs = np.stack(arrays)
    with np.errstate(over="ignore"):
        if op == xcoll.SUM:
            return np.add.reduce(xs, 0, dtype=xs.dtype)
        if op == xcoll.PROD:
            return np.multiply.reduce(xs, 0, dtype=xs.dtype)
        if op == xcoll.AVG:
            s = np.add.reduce(xs, 0, dtype=xs.dtype).astype(np.int64)
            return (np.trunc(s / len(arrays))).astype(xs.dtype)
    return {xcoll.MIN: lambda: xs.min(0), xcoll.MAX: lambda: xs.max(0),
            xcoll.BAND: lambda: np.bitwise_and.reduce(xs, 0),
            xcoll.BOR: lambda: np.bitwise_or.reduce(xs, 0),
            xcoll.BXOR: lambda: np.bitwise_xor.reduce(xs, 0)}[op]()


def cases(count_limit=None):
    for dt in INTS + FLOATS:
        for op in (ALL_OPS if dt in INTS else FLOAT_OPS):
            for n in COUNTS:
                # the largest count for a few representatives only
                if n == COUNTS[-1] and dt not in (D.FLOAT32, D.BFLOAT16,
                                                  D.INT64):
                    continue
                yield dt, op, n


def check_reduced(dt, op, got, exp, what):
    if op == xcoll.AVG and dt in FLOATS:
        tol = 1e-2 if dt in (D.FLOAT16, D.BFLOAT16) else 1e-6
        h.close(as_float(dt, got), as_float(dt, exp), tol, what)
    else:
        h.eq(got, exp, what)


def test_allreduce(comm):
    r, n_ranks = comm.rank, comm.size
    for dt, op, n in cases():
        arrays = [make(dt, values(q, n, op)) for q in range(n_ranks)]
        exp = reference(dt, op, arrays)
        for mode in ("out", "inplace", "nb-out", "nb-inplace"):
            send = arrays[r].copy()
            what = f"allreduce {dt.name} {op.name} n={n} {mode}"
            kw = {"op": op, "dtype": dt}
            if mode == "out":
                recv = np.zeros_like(send)
                res = comm.allreduce(send, recv, **kw)
                h.check(res is recv, f"{what}: returns recvbuf")
                h.eq(send, arrays[r], f"{what}: sendbuf untouched")
            elif mode == "inplace":
                recv = comm.allreduce(send, **kw)
            elif mode == "nb-out":
                recv = np.zeros_like(send)
                req = comm.iallreduce(send, recv, **kw)
                h.check(req.wait() is recv, f"{what}: wait() returns recvbuf")
                h.check(req.test() and req.done, f"{what}: test after wait")
            else:
                req = comm.iallreduce(send, **kw)
                while not req.test():
                    pass
                recv = req.result
            check_reduced(dt, op, recv, exp, what)


def test_reduce(comm):
    r, n_ranks = comm.rank, comm.size
    for dt, op, n in cases():
        if n > 1000:
            continue
        arrays = [make(dt, values(q, n, op, 1)) for q in range(n_ranks)]
        exp = reference(dt, op, arrays)
        root = (n + op) % n_ranks
        send = arrays[r].copy()
        what = f"reduce {dt.name} {op.name} n={n} root={root}"
        if (dt + op) % 2:   # out of place, non-blocking
            recv = np.zeros_like(send) if r == root else None
            comm.ireduce(send, recv, op=op, root=root, dtype=dt).wait()
        else:               # in place on the root, blocking
            recv = send
            comm.reduce(send, op=op, root=root, dtype=dt)
        if r == root:
            check_reduced(dt, op, recv, exp, what)
        else:
            h.eq(send, arrays[r], f"{what}: non-root sendbuf untouched")


def test_reduce_scatter(comm):
    r, n_ranks = comm.rank, comm.size
    for dt, op, n in cases():
        if n > 1000:
            n = 20000
        arrays = [make(dt, values(q, n * n_ranks, op, 2))
                  for q in range(n_ranks)]
        exp = reference(dt, op, arrays)[r * n:(r + 1) * n]
        what = f"reduce_scatter {dt.name} {op.name} n={n}"
        send = arrays[r].copy()
        recv = np.zeros(n, send.dtype)
        comm.reduce_scatter(send, recv, op=op, dtype=dt)
        check_reduced(dt, op, recv, exp, what)
        # in place: recvbuf is this rank's slice of sendbuf
        send = arrays[r].copy()
        comm.ireduce_scatter(send, send[r * n:(r + 1) * n], op=op,
                             dtype=dt).wait()
        check_reduced(dt, op, send[r * n:(r + 1) * n], exp, what + " inplace")


def test_allgather(comm):
    r, n_ranks = comm.rank, comm.size
    for dt in INTS + FLOATS:
        for n in (0, 1, 333, 70001):
            mine = make(dt, values(r, n, xcoll.SUM, 3))
            exp = np.concatenate([make(dt, values(q, n, xcoll.SUM, 3))
                                  for q in range(n_ranks)])
            recv = np.zeros(n * n_ranks, mine.dtype)
            comm.allgather(mine, recv, dtype=dt)
            h.eq(recv, exp, f"allgather {dt.name} n={n}")
            # in place: sendbuf is slice `rank` of recvbuf
            recv = np.zeros(n * n_ranks, mine.dtype)
            recv[r * n:(r + 1) * n] = mine
            comm.iallgather(recv[r * n:(r + 1) * n], recv, dtype=dt).wait()
            h.eq(recv, exp, f"allgather {dt.name} n={n} inplace")


def test_bcast(comm):
    r, n_ranks = comm.rank, comm.size
    for dt in INTS + FLOATS:
        for n in (1, 777, 100000):
            for root in range(n_ranks):
                exp = make(dt, values(root, n, xcoll.SUM, 4))
                buf = exp.copy() if r == root else np.zeros_like(exp)
                if root % 2:
                    comm.ibcast(buf, root=root, dtype=dt).wait()
                else:
                    comm.bcast(buf, root=root, dtype=dt)
                h.eq(buf, exp, f"bcast {dt.name} n={n} root={root}")


def test_alltoall(comm):
    r, n_ranks = comm.rank, comm.size
    for dt in (D.INT8, D.UINT16, D.INT32, D.INT64, D.FLOAT16, D.BFLOAT16,
               D.FLOAT64):
        for n in (1, 100, 30000):
            def block(src, dst):
                return make(dt, values(src * 31 + dst, n, xcoll.SUM, 5))
            send = np.concatenate([block(r, j) for j in range(n_ranks)])
            exp = np.concatenate([block(i, r) for i in range(n_ranks)])
            recv = np.zeros_like(send)
            comm.alltoall(send, recv, dtype=dt)
            h.eq(recv, exp, f"alltoall {dt.name} n={n}")
            comm.ialltoall(send, dtype=dt).wait()      # in place
            h.eq(send, exp, f"alltoall {dt.name} n={n} inplace")


def test_alltoallv(comm):
    r, n_ranks = comm.rank, comm.size

    def cnt(src, dst):       # uneven, some empty
        return (src * 3 + dst * 5) % 4 * 111

    def block(src, dst):
        return values(src * 17 + dst, cnt(src, dst), xcoll.SUM, 6)
    for dt in (D.UINT8, D.INT32, D.FLOAT32, D.FLOAT64):
        sc = [cnt(r, j) for j in range(n_ranks)]
        rc = [cnt(i, r) for i in range(n_ranks)]
        send = make(dt, np.concatenate([block(r, j) for j in range(n_ranks)]))
        exp = make(dt, np.concatenate([block(i, r) for i in range(n_ranks)]))
        recv = np.zeros(sum(rc), send.dtype)
        comm.alltoallv(send, sc, recv, rc, dtype=dt)
        h.eq(recv, exp, f"alltoallv {dt.name} packed")
        # explicit displacements: receive blocks in reverse rank order
        rd, acc = [0] * n_ranks, 0
        for i in reversed(range(n_ranks)):
            rd[i] = acc
            acc += rc[i]
        recv = np.zeros(sum(rc), send.dtype)
        comm.ialltoallv(send, sc, recv, rc, rdispls=rd, dtype=dt).wait()
        exp_rev = make(dt, np.concatenate(
            [block(i, r) for i in reversed(range(n_ranks))]))
        h.eq(recv, exp_rev, f"alltoallv {dt.name} reversed displacements")


def test_barrier(comm):
    import time
    # rank 0 arrives late; nobody may leave the barrier before it arrives
    t0 = time.time()
    if comm.rank == 0:
        time.sleep(0.2)
    stamp = np.array([time.time()], np.float64)
    comm.barrier()
    left = time.time()
    arrivals = np.zeros(comm.size, np.float64)
    comm.allgather(stamp, arrivals)
    h.check(left >= arrivals.max() - 0.005,
            f"barrier left at {left - t0:.3f}s before the last arrival at "
            f"{arrivals.max() - t0:.3f}s")
    reqs = [comm.ibarrier() for _ in range(5)]
    xcoll.wait_all(reqs)
    h.check(all(q.done for q in reqs), "ibarrier: all complete")


def test_many_outstanding(comm):
    """Many non-blocking operations in flight, waited in reverse order:
    each completes with its own result (issue order is kept)."""
    n_ranks = comm.size
    bufs = [np.full(64 + i, comm.rank + i, np.int32) for i in range(40)]
    reqs = [comm.iallreduce(b) for b in bufs]
    for i in reversed(range(40)):
        reqs[i].wait()
        exp = sum(q + i for q in range(n_ranks))
        h.eq(bufs[i], np.full(64 + i, exp, np.int32), f"outstanding #{i}")


def test_overlap(comm):
    """A non-blocking all-reduce progresses while this thread computes
    (xcoll's progress thread): it is found complete at the first test()
    after the compute, without any wait."""
    x = np.ones(1 << 20, np.float32)
    comm.barrier()
    req = comm.iallreduce(x)
    import time
    a = np.random.default_rng(0).random((100, 100))
    t_end = time.perf_counter() + 0.3
    while time.perf_counter() < t_end:   # 300 ms without any xcoll call
        a = a @ a
        a /= np.abs(a).max()
    done = req.test()
    req.wait()
    h.eq(x, np.full(1 << 20, comm.size, np.float32), "overlap result")
    h.check(done, "a 4 MiB all-reduce did not progress during 300 ms of "
            "compute (no progress thread?)")


def test_split(comm):
    r, n_ranks = comm.rank, comm.size
    color = r % 2
    sub = comm.split(color, key=-r)        # reversed order in the child
    members = [q for q in range(n_ranks) if q % 2 == color]
    h.eq(sub.size, len(members), "split size")
    h.eq(sub.rank, len(members) - 1 - members.index(r), "split rank (key)")
    x = np.array([r], np.int64)
    sub.allreduce(x)
    h.eq(int(x[0]), sum(members), "allreduce on the child")
    sub.close()
    none = comm.split(None if r == 0 else 0)
    h.check((none is None) == (r == 0), "COLOR_NONE gets no communicator")
    if none is not None:
        h.eq(none.size, n_ranks - 1, "split without rank 0")
        none.close()


def test_queries(comm):
    h.check(0 <= comm.rank < comm.size, "rank in range")
    h.eq(comm.local_size, comm.size, "one node: local size")
    h.eq(comm.node_count, 1, "one node")
    h.check(comm.status() is None, "healthy communicator")
    st = comm.stats()
    h.check(st["ops"]["allreduce"] > 0, f"stats count all-reduces: {st}")
    eb = st["express_bias"]
    h.check(0 <= eb["revokes"] <= eb["grants"],
            f"stats count express-bias grants and revocations: {eb}")
    ex = st["express"]
    h.check(ex["ops"] >= 0 and ex["resumed"] >= 0 and ex["p2p"] >= 0 and
            ex["ops"] + ex["resumed"] + ex["p2p"] <= sum(st["ops"].values()),
            f"stats count express calls within the operations: {ex}")
    h.eq(xcoll.version()[:2], (0, 1), "library version")
    h.check(xcoll.library_path, "library path known")


def test_shrink(comm):
    """Shrinking a healthy communicator (a copy: it stays poisoned)."""
    r = comm.rank
    old = comm.split(0)
    x = np.array([1], np.int64)
    old.allreduce(x)                        # every rank is here
    new = old.shrink()                      # no failure: the same ranks
    h.eq((new.rank, new.size), (r, comm.size), "shrink without a failure")
    y = np.array([r], np.int64)
    new.allreduce(y)
    h.eq(int(y[0]), sum(range(comm.size)), "allreduce on the shrunk communicator")
    h.check(isinstance(old.status(), xcoll.Aborted), "the old communicator stays poisoned")
    new.close()
    old.close()


if __name__ == "__main__":
    comm = xcoll.init_env()
    h.main([test_allreduce, test_reduce, test_reduce_scatter, test_allgather,
            test_bcast, test_alltoall, test_alltoallv, test_barrier,
            test_many_outstanding, test_overlap, test_split, test_queries,
            test_shrink],
           comm)
