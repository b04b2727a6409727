#!/usr/bin/python3
"""Collectives through torch.distributed: backend "xcoll" beside "gloo",
measured side by side in one job.

    build/xcoll-run -n 2 /usr/bin/python3 bench/torch_collectives.py \
        [--ops all_reduce,broadcast,all_gather,all_to_all,reduce_scatter] \
        [--min 8] [--max 64M] [--factor 8] [--reps 5]

Both groups live in the same processes (default group gloo, plus
dist.new_group(backend="xcoll")); at each size the backends alternate
round by round, so load from elsewhere on the machine hits both alike.
Per (op, size): median over rounds of the mean time per synchronous call
(us), the bus bandwidth (nccl-tests conventions), and xcoll's speed-up.
Gloo in torch 1.13 has no reduce_scatter: xcoll only there.
"""
import argparse
import os
import statistics
import sys
import time
from datetime import timedelta

_here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(_here), "python"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import xcoll.torch  # noqa: E402,F401


def size_arg(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * mult[s[-1]] if s[-1] in mult else int(s)


def busbw_factor(op, n):
    return {"all_reduce": 2 * (n - 1) / n, "broadcast": 1.0,
            "all_gather": (n - 1) / n, "reduce_scatter": (n - 1) / n,
            "all_to_all": (n - 1) / n}[op]


def make_call(op, nbytes, group, n, rank):
    """A closure doing one synchronous collective of `nbytes` (the bus
    size: total for all_gather/reduce_scatter/all_to_all outputs)."""
    elems = max(1, nbytes // 4)
    if op == "all_reduce":
        t = torch.ones(elems)
        return lambda: dist.all_reduce(t, group=group)
    if op == "broadcast":
        t = torch.ones(elems)
        return lambda: dist.broadcast(t, 0, group=group)
    per = max(1, elems // n)
    if op == "all_gather":
        out = [torch.empty(per) for _ in range(n)]
        t = torch.ones(per)
        return lambda: dist.all_gather(out, t, group=group)
    if op == "reduce_scatter":
        out = torch.empty(per)
        t = torch.ones(per * n)
        return lambda: dist.reduce_scatter_tensor(out, t, group=group)
    if op == "all_to_all":
        t = torch.ones(per * n)
        out = torch.empty(per * n)
        return lambda: dist.all_to_all_single(out, t, group=group)
    raise ValueError(op)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", default="all_reduce,broadcast,all_gather,"
                    "all_to_all,reduce_scatter")
    ap.add_argument("--min", type=size_arg, default=8)
    ap.add_argument("--max", type=size_arg, default=64 << 20)
    ap.add_argument("--factor", type=int, default=8)
    ap.add_argument("--sizes", help="explicit list, e.g. 8,1K,64K,1M,64M "
                    "(instead of --min/--max/--factor)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--budget", type=float, default=0.15,
                    help="seconds per (backend, size, round)")
    a = ap.parse_args()
    rank, n = int(os.environ["XCOLL_RANK"]), int(os.environ["XCOLL_SIZE"])
    torch.set_num_threads(1)
    # a file store named after this job's xcoll-run store port (unique
    # while the job runs): no second TCP port to pick
    port = os.environ["XCOLL_ADDR"].rsplit(":", 1)[1]
    dist.init_process_group("gloo", init_method=f"file:///tmp/xcoll-bench-{port}",
                            rank=rank, world_size=n,
                            timeout=timedelta(seconds=600))
    groups = {"xcoll": dist.new_group(backend="xcoll"), "gloo": None}
    sizes = []
    s = a.min
    while s <= a.max:
        sizes.append(s)
        s *= a.factor
    if a.sizes:
        sizes = [size_arg(x) for x in a.sizes.split(",")]
    if rank == 0:
        print(f"# torch {torch.__version__}, {n} ranks, one torch thread per "
              f"rank, median of {a.reps} interleaved rounds; time per call "
              f"in us, busbw in GB/s; load average "
              f"{os.getloadavg()[0]:.1f}")
        print(f"| op | bytes | xcoll us | gloo us | xcoll busbw | gloo busbw "
              f"| speed-up |")
        print("|---|---:|---:|---:|---:|---:|---:|")
    for op in a.ops.split(","):
        for nbytes in sizes:
            backends = ["xcoll"] + (["gloo"] if op != "reduce_scatter" else [])
            calls = {b: make_call(op, nbytes, groups[b], n, rank)
                     for b in backends}
            for c in calls.values():     # warm-up, and sets iteration counts
                c()
            # iteration counts from 5 timed calls on rank 0 (every rank
            # must make the same number of calls)
            iters = {}
            for b, c in calls.items():
                dist.barrier()
                t0 = time.perf_counter()
                for _ in range(5):
                    c()
                per = (time.perf_counter() - t0) / 5
                cnt = torch.tensor([max(3, min(20000,
                                               int(a.budget / per)))])
                dist.broadcast(cnt, 0)
                iters[b] = int(cnt.item())
            times = {b: [] for b in backends}
            for _ in range(a.reps):
                for b, c in calls.items():
                    dist.barrier()
                    t0 = time.perf_counter()
                    for _ in range(iters[b]):
                        c()
                    times[b].append((time.perf_counter() - t0) / iters[b])
            med = {b: statistics.median(v) for b, v in times.items()}
            if rank == 0:
                bw = {b: nbytes * busbw_factor(op, n) / med[b] / 1e9
                      for b in med}
                g = med.get("gloo")
                print(f"| {op} | {nbytes} | {med['xcoll'] * 1e6:.1f} | "
                      f"{g * 1e6 if g else float('nan'):.1f} | "
                      f"{bw['xcoll']:.2f} | "
                      f"{bw.get('gloo', float('nan')):.2f} | "
                      f"{(g / med['xcoll']) if g else float('nan'):.1f}x |",
                      flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
