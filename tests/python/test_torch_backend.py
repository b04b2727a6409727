#!/usr/bin/python3
"""The torch.distributed backend "xcoll", beyond what PyTorch's own suite
checks (tests/python/torch_suite.py runs that): every dtype x reduction
with its documented meaning (bool logical, complex as pairs, integer
average truncating, a RuntimeError where an op has no meaning), every
collective including the two gloo lacks (reduce_scatter_tensor,
all_gather_into_tensor) and uneven all-to-all, non-contiguous tensors,
work objects that progress while the caller computes, futures, waits
with a timeout, subgroups, re-initialisation through other init methods,
and DDP giving the same parameters as DDP over gloo.  Run by xcoll-run on
N ranks."""
import os
import time
from datetime import timedelta

import harness as h

np = h.need("numpy")
torch = h.need("torch", "(apt-get install python3-torch)")
import torch.distributed as dist  # noqa: E402

import xcoll.torch  # noqa: E402,F401

R = dist.ReduceOp
RANK = int(os.environ["XCOLL_RANK"])
WS = int(os.environ["XCOLL_SIZE"])
PORT = int(os.environ["XCOLL_ADDR"].rsplit(":", 1)[1])


def from_rank0(make):
    """A value rank 0 makes (bytes, <= 256), given to every rank through
    a throwaway xcoll communicator."""
    import xcoll
    c = xcoll.init_env()
    buf = np.zeros(257, np.uint8)
    if RANK == 0:
        b = make()
        buf[0] = len(b)
        buf[1:1 + len(b)] = list(b)
    c.bcast(buf)
    c.close()
    return bytes(buf[1:1 + buf[0]])


def free_port():
    return str(h.free_port()).encode()


def init(method="file"):
    if method == "file":
        url = from_rank0(lambda: f"file:///tmp/xcoll-torch-test-{PORT}-"
                         f"{time.time_ns()}".encode()).decode()
    elif method == "tcp":
        url = f"tcp://127.0.0.1:{from_rank0(free_port).decode()}"
    else:
        os.environ.update(MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=from_rank0(free_port).decode())
        url = "env://"
    dist.init_process_group("xcoll", init_method=url, rank=RANK,
                            world_size=WS, timeout=timedelta(seconds=60))
    return url


def values(rank, n, dtype, small=False):
    hi = 3 if small else 20
    v = (torch.arange(n) * 3 + rank * 7) % hi + 1
    if dtype == torch.bool:
        return (v + rank) % 2 == 0
    if dtype.is_complex:
        return torch.complex(v.double(), -v.double() * 2).to(dtype)
    return v.to(dtype)


def reference(op, xs):
    dt = xs[0].dtype
    if dt == torch.bool:
        s = torch.stack(xs)
        return {R.SUM: s.any(0), R.MAX: s.any(0), R.PRODUCT: s.all(0),
                R.MIN: s.all(0), R.BAND: s.all(0), R.BOR: s.any(0),
                R.BXOR: (s.sum(0) % 2) == 1}[op]
    wide = torch.stack([x.to(torch.complex128 if dt.is_complex else
                             torch.float64 if dt.is_floating_point
                             else torch.int64) for x in xs])
    if op == R.SUM:
        r = wide.sum(0)
    elif op == R.PRODUCT:
        r = wide.prod(0)
    elif op == R.MIN:
        r = wide.min(0).values
    elif op == R.MAX:
        r = wide.max(0).values
    elif op == R.AVG:
        r = wide.sum(0) / len(xs)
        if not (dt.is_floating_point or dt.is_complex):
            r = torch.trunc(r)
    else:
        f = {R.BAND: torch.bitwise_and, R.BOR: torch.bitwise_or,
             R.BXOR: torch.bitwise_xor}[op]
        r = wide[0]
        for x in wide[1:]:
            r = f(r, x)
    return r.to(dt)


DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16,
          torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64,
          torch.bool, torch.complex64, torch.complex128]
OPS = [R.SUM, R.PRODUCT, R.MIN, R.MAX, R.AVG, R.BAND, R.BOR, R.BXOR]


def meaningful(dt, op):
    if dt == torch.bool:
        return op != R.AVG
    if dt.is_complex:
        return op in (R.SUM, R.AVG)
    if dt.is_floating_point:
        return op not in (R.BAND, R.BOR, R.BXOR)
    return True


def test_identity(_):
    h.eq(dist.get_backend(), "xcoll", "get_backend")
    h.eq(dist.Backend.XCOLL, "XCOLL", "Backend.XCOLL")
    h.eq(dist.Backend("xcoll"), "xcoll", "Backend('xcoll')")
    h.eq(dist.group.WORLD.name(), "xcoll", "ProcessGroup.name()")
    h.eq((dist.get_rank(), dist.get_world_size()), (RANK, WS), "rank/size")


def test_all_reduce_dtypes_ops(_):
    for dt in DTYPES:
        for op in OPS:
            what = f"all_reduce {dt} {op}"
            small = op == R.PRODUCT
            xs = [values(q, 37, dt, small) for q in range(WS)]
            t = xs[RANK].clone()
            if not meaningful(dt, op):
                e = h.raises((RuntimeError, ValueError),
                             lambda: dist.all_reduce(t, op=op), what)
                h.check("support" in str(e) or "meaning" in str(e),
                        f"{what}: says why: {e}")
                continue
            dist.all_reduce(t, op=op)
            exp = reference(op, xs)
            if op == R.AVG and (dt.is_floating_point or dt.is_complex):
                tol = 1e-2 if dt in (torch.float16, torch.bfloat16) else 1e-6
                h.check(torch.allclose(t.to(torch.complex128),
                                       exp.to(torch.complex128),
                                       rtol=tol, atol=tol),
                        f"{what}: {t[:4]} vs {exp[:4]}")
            else:
                h.check(torch.equal(t, exp), f"{what}: {t[:6]} vs {exp[:6]}")
    # torch's own meaning of complex: the same as for the real pairs
    c = torch.full((3,), 1 + 1j, dtype=torch.complex64) * (RANK + 1)
    dist.all_reduce(c)
    h.eq(c.tolist(), [complex(1, 1) * WS * (WS + 1) / 2] * 3, "complex sum")


def test_collectives(_):
    n = 6
    mine = torch.arange(n, dtype=torch.float32) + 10 * RANK
    every = [torch.arange(n, dtype=torch.float32) + 10 * q for q in range(WS)]
    # broadcast / reduce
    for root in range(WS):
        t = mine.clone()
        dist.broadcast(t, src=root)
        h.check(torch.equal(t, every[root]), f"broadcast root {root}")
        t = mine.clone()
        dist.reduce(t, dst=root, op=R.MAX)
        if RANK == root:
            h.check(torch.equal(t, every[-1]), f"reduce root {root}")
    # all_gather: list, into tensor
    out = [torch.empty(n) for _ in range(WS)]
    dist.all_gather(out, mine)
    h.check(all(torch.equal(a, b) for a, b in zip(out, every)), "all_gather")
    flat = torch.empty(WS * n)
    dist.all_gather_into_tensor(flat, mine)
    h.check(torch.equal(flat, torch.cat(every)), "all_gather_into_tensor")
    # large blocks (one broadcast per rank into the list), sync and async
    big = 300000                         # 1.2 MB per rank
    out = [torch.empty(big) for _ in range(WS)]
    dist.all_gather(out, torch.arange(big, dtype=torch.float32) + RANK)
    h.check(all(torch.equal(o, torch.arange(big, dtype=torch.float32) + q)
                for q, o in enumerate(out)), "all_gather large blocks")
    out = [torch.empty(big, dtype=torch.float64) for _ in range(WS)]
    w = dist.all_gather(out, torch.full((big,), float(RANK), dtype=torch.float64),
                        async_op=True)
    w.wait()
    h.check(all(torch.equal(o, torch.full((big,), float(q), dtype=torch.float64))
                for q, o in enumerate(out)), "all_gather large blocks async")
    # uneven all_gather (list of different sizes)
    sizes = [q + 1 for q in range(WS)]
    out = [torch.empty(s, dtype=torch.int64) for s in sizes]
    dist.all_gather(out, torch.full((RANK + 1,), RANK, dtype=torch.int64))
    h.check(all(torch.equal(o, torch.full((q + 1,), q, dtype=torch.int64))
                for q, o in enumerate(out)), f"uneven all_gather {out}")
    # reduce_scatter: list, tensor, uneven list
    ins = [torch.full((n,), float(RANK + j)) for j in range(WS)]
    o = torch.empty(n)
    dist.reduce_scatter(o, ins)
    exp = sum(float(q + RANK) for q in range(WS))
    h.check(torch.equal(o, torch.full((n,), exp)), f"reduce_scatter {o}")
    o = torch.empty(n)
    dist.reduce_scatter_tensor(o, torch.cat(ins))
    h.check(torch.equal(o, torch.full((n,), exp)), "reduce_scatter_tensor")
    ins = [torch.full((j + 1,), float(RANK + j)) for j in range(WS)]
    o = torch.empty(RANK + 1)
    dist.reduce_scatter(o, ins)
    h.check(torch.equal(o, torch.full((RANK + 1,), exp)),
            f"uneven reduce_scatter {o}")
    # all_to_all_single: even and uneven splits (2-D, split along rows)
    t = torch.arange(WS * 2 * 3).view(WS * 2, 3) + 1000 * RANK
    o = torch.empty_like(t)
    dist.all_to_all_single(o, t)
    exp = torch.cat([(torch.arange(WS * 2 * 3).view(WS * 2, 3) +
                      1000 * q)[2 * RANK:2 * RANK + 2] for q in range(WS)])
    h.check(torch.equal(o, exp), "all_to_all_single even")
    in_splits = [(RANK + j) % 3 for j in range(WS)]
    out_splits = [(q + RANK) % 3 for q in range(WS)]
    t = torch.cat([torch.full((s, 2), RANK * 10 + j)
                   for j, s in enumerate(in_splits)])
    o = torch.empty(sum(out_splits), 2, dtype=t.dtype)
    dist.all_to_all_single(o, t, out_splits, in_splits)
    exp = torch.cat([torch.full((s, 2), q * 10 + RANK)
                     for q, s in enumerate(out_splits)]).to(t.dtype)
    h.check(torch.equal(o, exp), f"all_to_all_single uneven {o}")
    # all_to_all (lists)
    ins = [torch.full((j + 1,), RANK * 10 + j) for j in range(WS)]
    outs = [torch.empty(RANK + 1, dtype=torch.int64) for _ in range(WS)]
    dist.all_to_all(outs, ins)
    h.check(all(torch.equal(o, torch.full((RANK + 1,), q * 10 + RANK))
                for q, o in enumerate(outs)), f"all_to_all {outs}")
    # gather / scatter
    root = WS - 1
    g = [torch.empty(n) for _ in range(WS)] if RANK == root else None
    dist.gather(mine, g, dst=root)
    if RANK == root:
        h.check(all(torch.equal(a, b) for a, b in zip(g, every)), "gather")
    o = torch.empty(n)
    dist.scatter(o, every if RANK == 0 else None, src=0)
    h.check(torch.equal(o, every[RANK]), "scatter")
    # coalesced forms
    a, b = torch.ones(3) * RANK, torch.ones(2, dtype=torch.float32) * 2
    dist.all_reduce_coalesced([a, b])
    h.check(torch.equal(a, torch.ones(3) * sum(range(WS))) and
            torch.equal(b, torch.ones(2) * 2 * WS), "all_reduce_coalesced")
    outs = [[torch.empty(2), torch.empty(1)] for _ in range(WS)]
    dist.all_gather_coalesced(outs, [torch.ones(2) * RANK, torch.ones(1) * -RANK])
    h.check(all(torch.equal(outs[q][0], torch.ones(2) * q) and
                torch.equal(outs[q][1], torch.ones(1) * -q)
                for q in range(WS)), "all_gather_coalesced")
    dist.barrier()


def test_objects(_):
    obj = [{"rank": RANK, "s": "x" * RANK}]
    out = [None] * WS
    dist.all_gather_object(out, obj[0])
    h.eq(out, [{"rank": q, "s": "x" * q} for q in range(WS)],
         "all_gather_object")
    lst = [RANK, "hello"] if RANK == 0 else [None, None]
    dist.broadcast_object_list(lst, src=0)
    h.eq(lst, [0, "hello"], "broadcast_object_list")


def test_p2p(_):
    right, left = (RANK + 1) % WS, (RANK - 1) % WS
    t = torch.arange(5.0) + RANK
    r = torch.empty(5)
    if WS == 1:
        return
    if RANK % 2 == 0:
        dist.send(t, right, tag=3)
        dist.recv(r, left, tag=3)
    else:
        dist.recv(r, left, tag=3)
        dist.send(t, right, tag=3)
    h.check(torch.equal(r, torch.arange(5.0) + left), "send/recv")
    r = torch.empty(5)
    ops = [dist.P2POp(dist.isend, t, right), dist.P2POp(dist.irecv, r, left)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    h.check(torch.equal(r, torch.arange(5.0) + left), "batch_isend_irecv")
    # From any source: every other rank sends its rank to rank 0 on tag 7;
    # dist.recv without src returns who sent each.
    if RANK == 0:
        seen = []
        for _ in range(WS - 1):
            r1 = torch.empty(1)
            src = dist.recv(r1, tag=7)
            h.check(r1.item() == src, f"recv from any source: payload of {src}")
            seen.append(src)
        h.check(sorted(seen) == list(range(1, WS)), f"every sender once: {seen}")
    else:
        dist.send(torch.tensor([float(RANK)]), 0, tag=7)


def test_non_contiguous(_):
    base = torch.arange(24, dtype=torch.float32).view(4, 6) * (RANK + 1)
    t = base.t()                        # not contiguous
    dist.all_reduce(t)
    h.check(torch.equal(t, torch.arange(24.).view(4, 6).t() *
                        (WS * (WS + 1) / 2)), "all_reduce of a transpose")
    t = (torch.arange(12.) + RANK)[::2]
    dist.broadcast(t, src=0)
    h.check(torch.equal(t, torch.arange(12.)[::2]), "broadcast strided")


def test_errors(_):
    e = h.raises(RuntimeError, lambda: dist.all_reduce(
        torch.ones(3), op=R.BXOR), "bitwise on float")
    h.check("bitwise" in str(e), f"message: {e}")
    sp = torch.sparse_coo_tensor([[0]], [1.0], (3,))
    h.raises(RuntimeError, lambda: dist.all_reduce(sp), "sparse")
    h.raises(RuntimeError, lambda: dist.send(torch.ones(1), (RANK + 1) % WS,
                                             tag=-2), "negative tag")
    # still in step afterwards
    t = torch.ones(1)
    dist.all_reduce(t)
    h.eq(t.item(), float(WS), "usable after errors")


def test_async_overlap(_):
    """An async all_reduce completes while this rank computes, before
    anyone waits on it: the work is done by xcoll's progress thread."""
    t = torch.ones(1 << 21)      # 8 MiB
    dist.barrier()
    w = dist.all_reduce(t, async_op=True)
    a = torch.rand(200, 200)
    end = time.perf_counter() + 0.3
    while time.perf_counter() < end:
        a = torch.tanh(a @ a)
    done = w.is_completed()
    w.wait()
    h.check(torch.equal(t, torch.full((1 << 21,), float(WS))), "result")
    h.check(done, "an 8 MiB all_reduce did not complete during 300 ms of "
            "compute without a wait")


def test_sync_calls_block(_):
    """Synchronous torch calls use xcoll's blocking form (no progress-thread
    hand-off); async_op=True and C++ callers get the non-blocking one."""
    import xcoll._lib as lib
    import xcoll.torch as xt
    key = id(lib.iallreduce)
    calls = []
    orig = xt._BLOCKING[key]
    xt._BLOCKING[key] = lambda *a: calls.append(1) or orig(*a)
    try:
        t = torch.ones(3)
        dist.all_reduce(t)
        h.eq(len(calls), 1, "dist.all_reduce(t): blocking call")
        w = dist.all_reduce(t, async_op=True)
        h.eq(len(calls), 1, "async_op=True: not the blocking call")
        w.wait()
        dist.all_reduce(t, async_op=False)
        h.eq(len(calls), 2, "async_op=False: blocking call")
        dist.group.WORLD.allreduce([t]).wait()   # direct: non-blocking
        h.eq(len(calls), 2, "ProcessGroup.allreduce: not blocking")
        h.check(torch.equal(t, torch.full((3,), float(WS ** 4))), "results")
    finally:
        xt._BLOCKING[key] = orig


def test_futures(_):
    t = torch.ones(4) * (RANK + 1)
    fut = dist.all_reduce(t, async_op=True).get_future()
    chained = fut.then(lambda f: f.value()[0] * 2)
    v = chained.wait()
    h.check(torch.equal(v, torch.full((4,), WS * (WS + 1.0))),
            f"future then(): {v}")
    h.check(isinstance(fut.value(), list), "value is the list of outputs")
    works = [dist.all_reduce(torch.ones(2), async_op=True) for _ in range(8)]
    futs = torch.futures.collect_all([w.get_future() for w in works])
    h.eq(len(futs.wait()), 8, "collect_all")


def test_wait_timeout(_):
    """Work.wait(timeout) gives up with a RuntimeError naming the timeout
    when it runs out; the operation stays pending and completes later."""
    if WS == 1:
        return
    right, left = (RANK + 1) % WS, (RANK - 1) % WS
    r = torch.zeros(4)
    w = dist.irecv(r, left, tag=9)      # its send comes after the waits
    limit = timedelta(milliseconds=200)
    t0 = time.monotonic()
    e = h.raises(RuntimeError, lambda: w.wait(timeout=limit),
                 "wait with a timeout")
    took = time.monotonic() - t0
    h.check("timed out" in str(e) and str(limit) in str(e), f"message: {e}")
    h.check(0.2 <= took < 10, f"gave up after {took:.2f} s")
    h.check(not w.is_completed(), "still pending")
    dist.barrier()                      # every rank's wait gave up
    dist.send(torch.full((4,), RANK + 1.0), right, tag=9)
    h.check(w.wait(timeout=timedelta(seconds=30)), "completes")
    h.check(torch.equal(r, torch.full((4,), left + 1.0)), "received")


def test_subgroups(_):
    if WS < 2:
        return
    g = dist.new_group([0, 1])
    t = torch.ones(2) * (RANK + 1)
    if RANK in (0, 1):
        dist.all_reduce(t, group=g)
        h.check(torch.equal(t, torch.full((2,), 3.0)), "subgroup all_reduce")
        h.eq(dist.get_backend(g), "xcoll", "subgroup backend")
    odd = dist.new_group([q for q in range(WS) if q % 2])
    evens = dist.new_group([q for q in range(WS) if q % 2 == 0])
    mine = odd if RANK % 2 else evens
    t = torch.ones(1)
    dist.all_reduce(t, group=mine)
    h.eq(t.item(), float(len([q for q in range(WS) if q % 2 == RANK % 2])),
         "disjoint subgroups")


def test_ddp_matches_gloo(_):
    """The same model trained with DDP over xcoll and over gloo (same seed,
    different data per rank) ends with the same parameters; and replicas
    agree bit for bit across ranks."""
    gloo = dist.new_group(backend="gloo")

    def train(group):
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 8))
        ddp = torch.nn.parallel.DistributedDataParallel(
            m, process_group=group, bucket_cap_mb=0.002)  # several buckets
        opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
        g = torch.Generator().manual_seed(100 + RANK)
        losses = []
        for _ in range(10):
            x = torch.randn(16, 32, generator=g)
            loss = ddp(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return torch.cat([p.detach().reshape(-1) for p in m.parameters()]), \
            losses
    px, lx = train(None)
    pg, lg = train(gloo)
    h.check(torch.allclose(px, pg, rtol=1e-5, atol=1e-6),
            f"xcoll vs gloo parameters differ by {(px - pg).abs().max()}")
    h.check(max(abs(a - b) for a, b in zip(lx, lg)) < 1e-5,
            f"loss curves differ: {lx} vs {lg}")
    every = [torch.empty_like(px) for _ in range(WS)]
    dist.all_gather(every, px)
    h.check(all(torch.equal(e, px) for e in every),
            "replicas differ across ranks")


def test_reinit(_):
    """destroy_process_group, then init again through tcp:// and env://
    (each a fresh store) -- and subgroups again."""
    import gc
    for method in ("tcp", "env"):
        # a receive nobody will ever match must not hold the group's
        # destruction until its deadline (60 s here)
        dangling = dist.irecv(torch.empty(1), src=RANK, tag=777)
        t0 = time.monotonic()
        dist.destroy_process_group()
        del dangling
        gc.collect()
        h.check(time.monotonic() - t0 < 20, "destroy with a pending receive")
        init(method)
        t = torch.ones(3)
        dist.all_reduce(t)
        h.check(torch.equal(t, torch.full((3,), float(WS))), method)
        g = dist.new_group(list(range(WS)))
        dist.all_reduce(t, group=g)
        h.check(torch.equal(t, torch.full((3,), float(WS * WS))),
                f"{method}: new_group")


if __name__ == "__main__":
    import warnings
    warnings.filterwarnings("ignore", "torch.distributed.all_.*_coalesced")
    torch.set_num_threads(1)
    init("file")
    h.main([test_identity, test_all_reduce_dtypes_ops, test_collectives,
            test_objects, test_p2p, test_non_contiguous, test_errors,
            test_async_overlap, test_sync_calls_block, test_futures,
            test_wait_timeout, test_subgroups,
            test_ddp_matches_gloo, test_reinit])
