#!/usr/bin/python3
"""DDP training with backend "xcoll" beside "gloo" and beside no_sync.

    build/xcoll-run -n 2 /usr/bin/python3 bench/torch_ddp.py \
        [--model comm|compute] [--steps 20] [--rounds 3] [--bucket-mb 25] \
        [--keep-grads] [--bucket-view] [--keep-memory] \
        [--widths W0,W1,... --batch B]

Two models:
  comm     a 25M-parameter fp32 MLP (1024-4096-4096-1024), batch 1: the
           backward is short and 100 MB of gradients must be all-reduced
           every step -- communication-bound;
  compute  a 1.3M-parameter MLP (256-1024-1024-10), batch 512:
           compute-bound.
Three jobs run in the same processes, from the same initial weights and on
the same data: DDP over xcoll, DDP over gloo, and DDP over xcoll inside
no_sync() (no gradient communication at all).  Their steps alternate in
rounds so that load from elsewhere on the machine hits all three alike.

Reported (rank 0): median step time of each, the gradients' all-reduce
alone over xcoll (one flat tensor, blocking: what the step would add if
nothing were hidden), xcoll/gloo, xcoll/no_sync,
and the largest relative difference between the xcoll and gloo loss
curves (identical data and seeds; only the order of floating-point sums
differs).  Exit status 1 if that difference exceeds --tol.
"""
import argparse
import ctypes
import os
import statistics
import sys
import time
from datetime import timedelta

_here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(_here), "python"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import xcoll.torch  # noqa: E402,F401

MODELS = {
    "comm": ([1024, 4096, 4096, 1024], 1),
    "compute": ([256, 1024, 1024, 10], 512),
}


def build(widths):
    torch.manual_seed(0)
    layers = []
    for a, b in zip(widths, widths[1:]):
        layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1])


class Job:
    def __init__(self, name, widths, group, bucket_mb, sync=True,
                 bucket_view=False, set_to_none=True):
        self.name, self.sync, self.set_to_none = name, sync, set_to_none
        self.model = DDP(build(widths), process_group=group,
                         bucket_cap_mb=bucket_mb,
                         gradient_as_bucket_view=bucket_view)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=1e-3)
        self.gen = torch.Generator().manual_seed(1000 + dist.get_rank())
        self.times, self.losses = [], []

    def step(self, widths, batch):
        x = torch.randn(batch, widths[0], generator=self.gen)
        y = torch.randn(batch, widths[-1], generator=self.gen)
        t0 = time.perf_counter()
        loss = torch.nn.functional.mse_loss(self.model(x), y)
        self.opt.zero_grad(set_to_none=self.set_to_none)
        if self.sync:
            loss.backward()
        else:
            with self.model.no_sync():
                loss.backward()
        self.opt.step()
        self.times.append(time.perf_counter() - t0)
        self.losses.append(loss.item())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=list(MODELS), default="comm")
    ap.add_argument("--widths", help="layer widths instead of the model's, "
                    "comma separated (e.g. 256,1024,1024,1024,256)")
    ap.add_argument("--batch", type=int, help="batch per rank instead of the model's")
    ap.add_argument("--steps", type=int, default=10, help="per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--bucket-mb", type=float, default=25)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--bucket-view", action="store_true",
                    help="DDP(gradient_as_bucket_view=True) for every job: "
                         "gradients live in the buckets, no copy in or out")
    ap.add_argument("--keep-grads", action="store_true",
                    help="zero_grad(set_to_none=False) (PyTorch 1.13's "
                         "default): gradients are zeroed, not freed and "
                         "re-allocated (and re-faulted) every step")
    ap.add_argument("--keep-memory", action="store_true",
                    help="glibc malloc keeps freed memory for reuse "
                         "(mallopt M_MMAP_THRESHOLD and M_TRIM_THRESHOLD "
                         "1 GiB, what jemalloc and tcmalloc do by default): "
                         "the gradients set_to_none frees are not "
                         "re-faulted page by page every step")
    a = ap.parse_args()
    if a.keep_memory:
        libc = ctypes.CDLL("libc.so.6")
        M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
        if not (libc.mallopt(M_MMAP_THRESHOLD, 1 << 30) and
                libc.mallopt(M_TRIM_THRESHOLD, 1 << 30)):
            sys.exit("torch_ddp.py: mallopt failed")
    rank, n = int(os.environ["XCOLL_RANK"]), int(os.environ["XCOLL_SIZE"])
    torch.set_num_threads(a.threads)
    # a file store named after this job's xcoll-run store port (unique
    # while the job runs): no second TCP port to pick
    port = os.environ["XCOLL_ADDR"].rsplit(":", 1)[1]
    dist.init_process_group("gloo", init_method=f"file:///tmp/xcoll-bench-{port}",
                            rank=rank, world_size=n,
                            timeout=timedelta(seconds=600))
    xg = dist.new_group(backend="xcoll")
    widths, batch = MODELS[a.model]
    if a.widths:
        widths = [int(w) for w in a.widths.split(",")]
    if a.batch:
        batch = a.batch
    kw = dict(bucket_view=a.bucket_view, set_to_none=not a.keep_grads)
    jobs = [Job("xcoll", widths, xg, a.bucket_mb, **kw),
            Job("gloo", widths, None, a.bucket_mb, **kw),
            Job("no_sync", widths, xg, a.bucket_mb, sync=False, **kw)]
    for j in jobs:
        for _ in range(a.warmup):
            j.step(widths, batch)
        j.times.clear()
    for _ in range(a.rounds):
        for j in jobs:
            dist.barrier()
            for _ in range(a.steps):
                j.step(widths, batch)
    med = {j.name: statistics.median(j.times) * 1e3 for j in jobs}
    nparams = sum(p.numel() for p in jobs[0].model.parameters())
    # The gradients' all-reduce on its own (one flat fp32 tensor of every
    # parameter, over xcoll, blocking, median of 5): what a step would add
    # if none of it were hidden behind backward.
    flat = torch.zeros(nparams)
    alone = []
    for i in range(6):
        dist.barrier(group=xg)
        t0 = time.perf_counter()
        dist.all_reduce(flat, group=xg)
        if i:
            alone.append(time.perf_counter() - t0)
    t_alone = torch.tensor([statistics.median(alone) * 1e3])
    dist.all_reduce(t_alone, op=dist.ReduceOp.MAX, group=xg)
    lx, lg = jobs[0].losses, jobs[1].losses
    diff = max(abs(p - q) / max(abs(q), 1e-12) for p, q in zip(lx, lg))
    if rank == 0:
        name = a.model if not a.widths else "-".join(map(str, widths))
        print(f"| {name} ({nparams / 1e6:.1f}M params, batch {batch}) | "
              f"{n} | {med['xcoll']:.1f} | {med['gloo']:.1f} | "
              f"{med['no_sync']:.1f} | {t_alone.item():.1f} | "
              f"{med['xcoll'] / med['gloo']:.2f} | "
              f"{med['xcoll'] / med['no_sync']:.2f} | {diff:.1e} |",
              flush=True)
    dist.destroy_process_group()
    sys.exit(0 if diff <= a.tol else 1)


if __name__ == "__main__":
    main()
