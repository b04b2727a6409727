#!/usr/bin/python3
"""Per-call overhead of the torch.distributed backend, by layer.

Run as N local ranks:

    build/xcoll-run -n 2 /usr/bin/python3 bench/torch_overhead.py [--cpp] [--iters N]
    build/xcoll-run -n 1 /usr/bin/python3 bench/torch_overhead.py --cpp --cpu

(one rank, CPU time: the software cost per call of each layer, which load
from elsewhere on the machine hardly changes)

Times dist.all_reduce (blocking) of an 8-byte tensor (and larger ones) on
groups that differ only in the layer under torch:

  numpy          xcoll's Python binding alone (comm.allreduce, blocking)
  numpy-nb       the same, iallreduce + wait
  xcoll          the "xcoll" backend: Python ProcessGroup (python/xcoll/torch.py)
  null-py        a Python ProcessGroup that communicates nothing (its floor)
  xcoll-cpp      (--cpp) a minimal C++ ProcessGroup over xcoll
                 (bench/torch_cpp_proto.cpp, built here with libtorch-dev)
  null-cpp       (--cpp) a C++ ProcessGroup that communicates nothing
  gloo           PyTorch's gloo

The difference xcoll - xcoll-cpp is what a C++ extension would save per
call; docs/python.md records the numbers that chose the Python group.
"""
import argparse
import os
import statistics
import sys
import time
from datetime import timedelta

_here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(_here), "python"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import xcoll  # noqa: E402
import xcoll.torch as xt  # noqa: E402

_keep = []


class NullPG(xt.ProcessGroupXcoll):
    """Python ProcessGroup that returns completed works at once."""

    def __init__(self, store, rank, size, timeout):  # noqa: D401
        dist.ProcessGroup.__init__(self, rank, size)
        self._live = set()

    def getBackendName(self):
        return "xnull"

    def allreduce(self, tensors, opts=None):
        return xt._XcollWork(self, None, tensors)

    def barrier(self, opts=None):
        return xt._XcollWork(self, None, [])


def build_cpp():
    from torch.utils.cpp_extension import load
    root = os.path.dirname(_here)
    bdir = os.path.join(root, "build", "torch_cpp_proto")
    os.makedirs(bdir, exist_ok=True)
    return load(name="xcoll_torch_cpp_proto",
                sources=[os.path.join(_here, "torch_cpp_proto.cpp")],
                extra_include_paths=[os.path.join(root, "include")],
                extra_ldflags=[f"-L{os.path.join(root, 'build')}", "-lxcoll",
                               f"-Wl,-rpath,{os.path.join(root, 'build')}"],
                build_directory=bdir, verbose=False)


CLOCK = time.perf_counter


def time_all(variants, iters, sync, reps=7):
    """Median over `reps` rounds of us per call; the variants are
    interleaved round by round so that load from elsewhere on the machine
    hits them alike."""
    times = {k: [] for k in variants}
    for fn in variants.values():
        for _ in range(max(10, iters // 20)):
            fn()
    for _ in range(reps):
        for k, fn in variants.items():
            sync()
            t0 = CLOCK()
            for _ in range(iters):
                fn()
            times[k].append((CLOCK() - t0) / iters * 1e6)
    return {k: statistics.median(v) for k, v in times.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cpp", action="store_true")
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--sizes", default="8,65536,1048576")
    ap.add_argument("--cpu", action="store_true",
                    help="CPU time of the calling thread instead of wall "
                    "time (with -n 1: the per-call software cost, little "
                    "disturbed by other load on the machine)")
    a = ap.parse_args()
    global CLOCK
    if a.cpu:
        CLOCK = time.thread_time
    rank, size = int(os.environ["XCOLL_RANK"]), int(os.environ["XCOLL_SIZE"])
    torch.set_num_threads(1)
    dist.Backend.register_backend("xnull", NullPG)
    ext = build_cpp() if a.cpp else None
    if ext is not None:
        def mk_cpp(store, r, n, timeout):
            comm = xcoll.init_store(r, n, xt._C10dStore(store, r))
            _keep.append(comm)
            return ext.XcollCppPG(r, n, comm.handle)
        dist.Backend.register_backend("xcpp", mk_cpp)
        dist.Backend.register_backend(
            "nullcpp", lambda s, r, n, t: ext.NullCppPG(r, n))
    # a file store named after this job's xcoll-run store port (unique
    # while the job runs): no second TCP port to pick
    port = os.environ["XCOLL_ADDR"].rsplit(":", 1)[1]
    dist.init_process_group("gloo", init_method=f"file:///tmp/xcoll-bench-{port}",
                            rank=rank, world_size=size,
                            timeout=timedelta(seconds=120))
    groups = {"xcoll": dist.new_group(backend="xcoll"),
              "null-py": dist.new_group(backend="xnull"),
              "gloo": None}
    if ext is not None:
        groups["xcoll-cpp"] = dist.new_group(backend="xcpp")
        groups["null-cpp"] = dist.new_group(backend="nullcpp")
    comm = xcoll.init_env()
    rows = []
    for nbytes in [int(s) for s in a.sizes.split(",")]:
        n = max(1, nbytes // 4)
        iters = max(20, min(a.iters, a.iters * 8192 // max(nbytes, 8192)))
        x = np.ones(n, np.float32)
        t = torch.ones(n)
        variants = {"numpy": lambda: comm.allreduce(x),
                    "numpy-nb": lambda: comm.iallreduce(x).wait()}
        for name, g in groups.items():
            variants[name] = (lambda g: lambda: dist.all_reduce(t, group=g))(g)
        rows.append((nbytes, time_all(variants, iters, comm.barrier)))
    if rank == 0:
        names = list(rows[0][1])
        print(f"# {size} ranks, fp32 sum all-reduce through dist.all_reduce, "
              f"median of 7 interleaved runs, us per call "
              f"({'CPU time of the caller' if a.cpu else 'wall time'})")
        print("bytes    " + "".join(f"{k:>11}" for k in names))
        for nbytes, res in rows:
            print(f"{nbytes:<9}" + "".join(f"{res[k]:11.1f}" for k in names))
    comm.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
