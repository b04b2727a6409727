"""torch.distributed backend "xcoll".

    import torch.distributed as dist
    import xcoll.torch                      # registers the backend
    dist.init_process_group("xcoll", ...)   # any init_method torch supports

A ``ProcessGroup`` written in Python (PyTorch 1.13 lets Python subclass
it; docs/python.md has the measurement that chose this over a C++
extension).  Each operation is issued non-blocking on an xcoll
communicator and returned as a ``Work``: xcoll's progress thread advances
it while the caller computes, ``wait()`` drives it in the caller, and
``get_future()`` is completed by a per-group completion thread that waits
on the requests in issue order -- so DDP's bucketed all-reduces proceed
while backward computes.  A synchronous torch call (``dist.all_reduce(t)``
without ``async_op``), which waits at once anyway, gets xcoll's blocking
function instead (``_caller_waits``).

Rendezvous goes through the c10d store torch hands the backend
(``xc_comm_init_store``), so every init_method works (env://, tcp://,
file://, a Store object).  Each group gets its own xcoll communicator.

Tensors: CPU, dense; any dtype of the table in docs/python.md (bool as
uint8 with logical reductions, complex as pairs of reals for sum/avg).
Non-contiguous tensors are staged through a contiguous copy.
"""
import collections
import os
import sys
import threading
import time
import weakref
from datetime import timedelta

import torch
import torch.distributed as dist

from . import _errors, _lib
from ._buffer import DType, Op
from ._comm import init_store

__all__ = ["ProcessGroupXcoll", "create_process_group"]

BACKEND_NAME = "xcoll"

_Work = getattr(dist, "_Work", None) or dist.Work
_ProcessGroup = dist.ProcessGroup
_RedOpType = dist.ReduceOp.RedOpType

# ------------------------------------------------------------------ dtypes
_DTYPES = {
    torch.float32: DType.FLOAT32, torch.float64: DType.FLOAT64,
    torch.float16: DType.FLOAT16, torch.bfloat16: DType.BFLOAT16,
    torch.int8: DType.INT8, torch.uint8: DType.UINT8,
    torch.int16: DType.INT16, torch.int32: DType.INT32,
    torch.int64: DType.INT64, torch.bool: DType.UINT8,
    torch.complex64: DType.FLOAT32, torch.complex128: DType.FLOAT64,
}
if hasattr(torch, "complex32"):
    _DTYPES[torch.complex32] = DType.FLOAT16

_OPS = {
    _RedOpType.SUM: Op.SUM, _RedOpType.AVG: Op.AVG,
    _RedOpType.PRODUCT: Op.PROD, _RedOpType.MIN: Op.MIN,
    _RedOpType.MAX: Op.MAX, _RedOpType.BAND: Op.BAND,
    _RedOpType.BOR: Op.BOR, _RedOpType.BXOR: Op.BXOR,
}
# bool is uint8 holding 0/1: "sum" is logical or, "product" logical and.
_BOOL_OPS = {Op.SUM: Op.MAX, Op.PROD: Op.MIN, Op.MIN: Op.MIN, Op.MAX: Op.MAX,
             Op.BAND: Op.BAND, Op.BOR: Op.BOR, Op.BXOR: Op.BXOR}


_STRIDED = torch.strided


def _xdtype(t):
    if not t.is_cpu:
        raise RuntimeError(f"xcoll: only CPU tensors are supported "
                           f"(got a tensor on {t.device})")
    if t.layout != _STRIDED:
        raise RuntimeError(f"xcoll: only dense tensors are supported "
                           f"(got layout {t.layout})")
    try:
        return _DTYPES[t.dtype]
    except KeyError:
        raise RuntimeError(f"xcoll: unsupported tensor dtype {t.dtype}") \
            from None


def _count(t):
    return t.numel() * (2 if t.is_complex() else 1)


_XOP_CACHE = {}


def _xop(reduce_op, t):
    """xcoll op for a c10d ReduceOp on tensors like `t`; RuntimeError
    where the reduction has no meaning for the dtype."""
    kind = getattr(reduce_op, "op", reduce_op)   # ReduceOp -> RedOpType
    key = (kind, t.dtype)
    op = _XOP_CACHE.get(key)
    if op is None:
        op = _XOP_CACHE[key] = _xop_uncached(kind, t)
    return op


def _xop_uncached(kind, t):
    op = _OPS.get(kind)
    if op is None:
        raise RuntimeError(f"xcoll: reduction {kind} is not supported")
    if t.dtype == torch.bool:
        if op == Op.AVG:
            raise RuntimeError("xcoll: ReduceOp.AVG has no meaning for bool "
                               "tensors")
        return _BOOL_OPS[op]
    if t.is_complex() and op not in (Op.SUM, Op.AVG):
        raise RuntimeError(f"xcoll: {kind} has no meaning for complex "
                           f"tensors (only SUM and AVG)")
    if t.is_floating_point() or t.is_complex():
        if op in (Op.BAND, Op.BOR, Op.BXOR):
            raise RuntimeError(f"xcoll: bitwise {kind} has no meaning for "
                               f"{t.dtype} tensors")
    return op


# The fast path of allreduce: dtypes whose elements xcoll reduces as they
# are, and the (op, dtype) pairs that have a meaning for them.
_PLAIN_DTYPES = {k: v for k, v in _DTYPES.items()
                 if k != torch.bool and not k.is_complex}
_FLOAT_XDTYPES = (DType.FLOAT16, DType.BFLOAT16, DType.FLOAT32, DType.FLOAT64)
_PLAIN_OPS = {(k, x): o for k, o in _OPS.items() for x in set(_PLAIN_DTYPES.values())
              if not (x in _FLOAT_XDTYPES and o in (Op.BAND, Op.BOR, Op.BXOR))}
_RED_SUM = _RedOpType.SUM

# all_gather into a list: from this block size (bytes per rank) one
# broadcast per rank straight into the outputs beats an all-gather into a
# staging buffer followed by the copy out (measured, docs/python.md).
_BCAST_GATHER_MIN = 1 << 20


def _single(tensors, what):
    if len(tensors) != 1:
        raise RuntimeError(f"xcoll: {what} takes exactly one tensor per rank "
                           f"(got {len(tensors)}; multi-device lists are "
                           f"not supported on CPU)")
    return tensors[0]


def _staged(t, out):
    """(contiguous tensor to hand xcoll, finisher copying it back to `t`
    when `out` and a copy was needed)."""
    _xdtype(t)
    if t.is_contiguous():
        return t, None
    c = t.contiguous()
    return c, ((lambda: t.copy_(c)) if out else None)


def _chain(*fns):
    fns = [f for f in fns if f is not None]
    if not fns:
        return None
    if len(fns) == 1:
        return fns[0]

    def run():
        for f in fns:
            f()
    return run


def _unflatten_into(flat, outputs):
    off = 0
    for o in outputs:
        n = o.numel()
        o.copy_(flat[off:off + n].view_as(o))
        off += n


# -------------------------------------------------- synchronous callers
# torch's synchronous collectives (dist.all_reduce(t) without async_op)
# issue, then call work.wait() at once.  For them the blocking C call is
# used instead of xc_i* + wait: the waiting caller drives the operation
# itself, without waking xcoll's progress thread for an operation nobody
# else needs to advance (docs/python.md has the measurement).  The caller
# is recognised exactly -- by the code object of the torch function whose
# frame sits just above the ProcessGroup method, and its async_op local.
def _sync_codes():
    import torch.distributed.distributed_c10d as c10d
    codes = {}
    for name in ("all_reduce", "broadcast", "reduce", "all_gather",
                 "all_gather_into_tensor", "_all_gather_base",
                 "reduce_scatter", "reduce_scatter_tensor",
                 "_reduce_scatter_base", "all_to_all_single", "all_to_all",
                 "gather", "scatter", "barrier", "all_reduce_coalesced",
                 "all_gather_coalesced", "all_reduce_multigpu",
                 "broadcast_multigpu"):
        fn = getattr(c10d, name, None)
        code = getattr(fn, "__code__", None)
        if code is not None and "async_op" in code.co_varnames:
            codes[code] = "async_op"
    for name in ("send", "recv"):                 # always blocking
        code = getattr(getattr(c10d, name, None), "__code__", None)
        if code is not None:
            codes[code] = None
    return codes


_SYNC_CODES = _sync_codes()


def _caller_waits():
    """True when the torch function that called the ProcessGroup method
    is synchronous (it will wait on the work before returning)."""
    f = sys._getframe(2)
    for _ in range(3):      # _issue <- [helper <-] method <- torch function
        if f is None:
            return False
        flag = _SYNC_CODES.get(f.f_code, 0)
        if flag != 0:
            return flag is None or not f.f_locals.get(flag, True)
        f = f.f_back
    return False


# xc_iX -> xc_X (ctypes functions are unhashable: keyed by id)
_BLOCKING = {id(getattr(_lib, "i" + n)): getattr(_lib, n) for n in (
    "allreduce", "bcast", "reduce", "allgather", "reduce_scatter",
    "alltoall", "alltoallv", "barrier", "send", "recv")}


# ------------------------------------------------------------------ store
class _C10dStore:
    """xcoll's store callbacks over a c10d Store (a PrefixStore from torch).
    Each communicator created through the same store gets a fresh key
    prefix from a per-rank counter, so stale keys of an earlier group of
    the same name can never be read."""

    def __init__(self, store, rank):
        gen = store.add(f"xcoll/gen/{rank}", 1)
        self.store = store
        self.prefix = f"xcoll/{gen}/"

    def set(self, key, value):
        self.store.set(self.prefix + key, value)

    def get(self, key, timeout_ms):
        k = self.prefix + key
        self.store.wait([k], timedelta(milliseconds=timeout_ms))
        return self.store.get(k)

    def wait(self, keys, timeout_ms):
        self.store.wait([self.prefix + k for k in keys],
                        timedelta(milliseconds=timeout_ms))


# ------------------------------------------------------------------ work
class _Completer:
    """One thread per group that waits on requests whose futures somebody
    asked for (DDP) and completes those futures, in issue order."""

    def __init__(self, name):
        self._q = collections.deque()
        self._cv = threading.Condition()
        self._stop = False
        self._t = threading.Thread(target=self._run, name=name, daemon=True)
        self._t.start()

    def put(self, work):
        with self._cv:
            self._q.append(work)
            self._cv.notify()

    def _run(self):
        while True:
            with self._cv:
                while not self._q and not self._stop:
                    self._cv.wait()
                if not self._q:
                    return
                w = self._q.popleft()
            w._settle_future()

    def stop(self):
        with self._cv:
            self._stop = True
            self._cv.notify()
        if threading.current_thread() is not self._t:
            self._t.join(timeout=10)


class _ReqGroup:
    """Several xcoll requests behaving as one (wait/test/done/exception)."""

    __slots__ = ("reqs",)

    def __init__(self, reqs):
        self.reqs = reqs

    def wait(self):
        first = None
        for r in self.reqs:
            try:
                r.wait()
            except BaseException as e:  # noqa: BLE001 -- re-raised below
                first = first or e
        if first is not None:
            raise first

    def test(self):
        return all([r.test() for r in self.reqs])

    @property
    def done(self):
        return all(r.done for r in self.reqs)

    @property
    def exception(self):
        for r in self.reqs:
            if r.exception is not None:
                return r.exception
        return None


class _XcollWork(_Work):
    """c10d Work over an xcoll Request or _ReqGroup (None: complete)."""

    def __init__(self, pg, req, outputs, source=-1):
        super().__init__()
        self._pg = pg
        self._req = req
        self._outputs = outputs
        self._source = source
        self._fut = None
        self._fut_lock = threading.RLock()
        # C++ callers (DDP's reducer, _broadcast_coalesced) hold this Work
        # only through its C++ half; keep the Python half alive until the
        # operation is over, or their wait()/getFuture() would miss the
        # Python overrides.
        if req is not None:
            pg._live.add(self)

    def _finished(self):
        self._pg._live.discard(self)
        if self._req is not None:
            for r in getattr(self._req, "reqs", (self._req,)):
                self._pg._pending.pop(id(r), None)

    def wait(self, timeout=None):
        if self._req is not None:
            if timeout:     # timedelta(0) is c10d's "no timeout"
                self._poll(timeout)
            try:
                self._req.wait()
            finally:
                self._finished()
        return True

    def _poll(self, timeout):
        """Return once the operation is over; raise as c10d does if
        `timeout` (a timedelta) runs out first, leaving it pending."""
        end = time.monotonic() + timeout.total_seconds()
        pause = 1e-4
        while not self.is_completed():
            if time.monotonic() >= end:
                raise RuntimeError(f"xcoll: Operation timed out after "
                                   f"{timeout} in Work.wait() (it is still "
                                   f"pending)")
            time.sleep(pause)
            pause = min(2 * pause, 0.01)

    def is_completed(self):
        if self._req is None:
            return True
        try:
            done = self._req.test()
        except _errors.Error:
            done = True
        if done:
            self._finished()
        return done

    def is_success(self):
        return self.is_completed() and (
            self._req is None or self._req.exception is None)

    def exception(self):
        return None if self._req is None else self._req.exception

    def result(self):
        self.wait()
        return self._outputs

    def source_rank(self):
        if self._source is None:    # an any-source receive: its sender
            self.wait()
            return self._req.source
        return self._source

    def _source_rank(self):
        return self.source_rank()

    def synchronize(self):
        pass

    def get_future(self):
        with self._fut_lock:
            if self._fut is None:
                self._fut = torch.futures.Future()
                if self._req is None or self._req.done:
                    self._settle_future()
                else:
                    self._pg._completer().put(self)
            return self._fut

    def _settle_future(self):
        try:
            if self._req is not None:
                self._req.wait()
        except BaseException as e:  # noqa: BLE001 -- handed to the future
            self._fut.set_exception(e)
        else:
            self._fut.set_result(self._outputs)
        finally:
            self._finished()


# ------------------------------------------------------------------ group
class ProcessGroupXcoll(_ProcessGroup):
    """A c10d ProcessGroup running every collective on an xcoll
    communicator (created through `store`, torch's prefix store)."""

    def __init__(self, store, rank, size, timeout=timedelta(minutes=30)):
        super().__init__(rank, size)
        cfg = {}
        if "XCOLL_TIMEOUT_MS" not in os.environ and timeout is not None:
            ms = int(timeout.total_seconds() * 1000)
            cfg["timeout_ms"] = ms if 0 < ms < 2**31 else -1
        self._comm = init_store(rank, size, _C10dStore(store, rank), **cfg)
        self._issue_lock = threading.Lock()  # one caller at a time (C rule)
        self._live = set()
        self._holder = [None]   # the completion thread, made on first use
        self._completer_lock = threading.Lock()
        # Requests issued non-blocking and not yet seen complete, held
        # outside the group's reference cycles so that the finalizer still
        # sees them when the group is collected.
        self._pending = {}
        self._done_work = _XcollWork(self, None, [])
        self._pool = {}
        self._pool_bytes = 0
        # When torch drops the group (destroy_process_group) or at exit.
        weakref.finalize(self, _shutdown, self._comm, self._holder,
                         self._pending)

    def _completer(self):
        with self._completer_lock:
            if self._holder[0] is None:
                self._holder[0] = _Completer(
                    f"xcoll-completer-r{self.rank()}")
            return self._holder[0]

    # -- c10d's identity ---------------------------------------------------
    def getBackendName(self):
        return BACKEND_NAME

    def _get_backend_name(self):
        return BACKEND_NAME

    def name(self):
        return BACKEND_NAME

    @property
    def comm(self):
        """The underlying xcoll.Comm."""
        return self._comm

    # -- staging buffers ---------------------------------------------------
    # Operations on lists of tensors (all_gather, all_to_all, gather, ...)
    # go through one contiguous buffer.  A fresh torch.empty of tens of
    # megabytes costs its page faults on every call (64 MiB all_gather on
    # 2 ranks: 55 ms with fresh buffers, against 15 ms for the collective
    # itself), so buffers are reused: returned here when their operation
    # completes, at most _POOL_BYTES kept.
    _POOL_BYTES = 256 << 20

    def _stage(self, numel, dtype):
        lst = self._pool.get((numel, dtype))
        if lst:
            buf = lst.pop()
            self._pool_bytes -= buf.numel() * buf.element_size()
            return buf
        return torch.empty(numel, dtype=dtype)

    def _unstage(self, *bufs):
        for b in bufs:
            nb = b.numel() * b.element_size()
            if self._pool_bytes + nb <= self._POOL_BYTES:
                self._pool.setdefault((b.numel(), b.dtype), []).append(b)
                self._pool_bytes += nb

    def _flat(self, tensors, dtype):
        """A staged 1-D tensor holding `tensors` back to back."""
        buf = self._stage(sum(t.numel() for t in tensors), dtype)
        if tensors:
            torch.cat([t.reshape(-1) for t in tensors], out=buf)
        return buf

    # -- issuing -----------------------------------------------------------
    def _issue(self, fn, args, keep, outputs, finish=None, source=-1,
               staged=()):
        """Issue fn(*args) (an xc_i* function), blocking when the torch
        caller is synchronous -- unless `source` is None (an any-source
        receive: its sender is known only from the request).  On success
        `finish` runs, then the `staged` buffers go back to the pool."""
        if staged:
            finish = _chain(finish, lambda: self._unstage(*staged))
        if source is not None and _caller_waits():
            with self._issue_lock:
                rc = _BLOCKING[id(fn)](*args, self._comm.handle)
            if rc:
                _errors.check(rc)
            if finish is not None:
                finish()
            # The caller only waits on it and drops it (that is how it was
            # recognised): one completed work serves every such call.
            return self._done_work
        with self._issue_lock:
            req = self._comm._iraw(fn, args, keep=keep, finish=finish)
        if len(self._pending) >= 4096:
            self._prune()
        self._pending[id(req)] = req
        return _XcollWork(self, req, outputs, source)

    def _issue_all(self, calls, keep, outputs):
        """Issue several xc_i* calls as one work (always non-blocking: they
        overlap each other)."""
        reqs = []
        with self._issue_lock:
            for fn, args in calls:
                reqs.append(self._comm._iraw(fn, args, keep=keep))
        for r in reqs:
            self._pending[id(r)] = r
        return _XcollWork(self, _ReqGroup(reqs), outputs)

    def _prune(self):
        """Forget works nobody waits on once they are complete (fire and
        forget isend, say): test them all."""
        for w in list(self._live):
            w.is_completed()
        for k, r in list(self._pending.items()):
            try:
                done = r.test()
            except Exception:  # noqa: BLE001 -- failed is complete
                done = True
            if done:
                self._pending.pop(k, None)

    def allreduce(self, tensors, opts=None):
        # The common case first, with as little Python as possible (it is
        # the per-call overhead measured in docs/python.md): one dense,
        # contiguous CPU tensor of a plain dtype.
        if len(tensors) == 1:
            t = tensors[0]
            xdt = _PLAIN_DTYPES.get(t.dtype)
            if xdt is not None and t.is_cpu and t.layout == _STRIDED and \
                    t.is_contiguous():
                op = _PLAIN_OPS.get(
                    (_RED_SUM if opts is None else opts.reduceOp.op, xdt))
                if op is not None:
                    p = t.data_ptr()
                    return self._issue(_lib.iallreduce,
                                       (p, p, t.numel(), xdt, op), tensors,
                                       tensors)
        t = _single(tensors, "allreduce")
        op = _xop(_opt(opts, "reduceOp"), t)
        c, fin = _staged(t, True)
        return self._issue(_lib.iallreduce,
                           (c.data_ptr(), c.data_ptr(), _count(c),
                            _xdtype(c), op), (t, c), tensors, fin)

    def allreduce_coalesced(self, tensors, opts=None):
        if not tensors:
            return _XcollWork(self, None, tensors)
        dt = tensors[0].dtype
        if any(t.dtype != dt for t in tensors):
            raise RuntimeError("xcoll: allreduce_coalesced needs tensors of "
                               "one dtype")
        op = _xop(_opt(opts, "reduceOp"), tensors[0])
        for t in tensors:
            _xdtype(t)
        flat = self._flat(tensors, dt)
        return self._issue(_lib.iallreduce,
                           (flat.data_ptr(), flat.data_ptr(), _count(flat),
                            _xdtype(flat), op), (tensors, flat), tensors,
                           lambda: _unflatten_into(flat, tensors), staged=(flat,))

    def broadcast(self, tensors, opts=None):
        t = _single(tensors, "broadcast")
        root = _opt(opts, "rootRank", 0)
        c, fin = _staged(t, True)
        return self._issue(_lib.ibcast,
                           (c.data_ptr(), _count(c), _xdtype(c), root),
                           (t, c), tensors, fin)

    def reduce(self, tensors, opts=None):
        t = _single(tensors, "reduce")
        root = _opt(opts, "rootRank", 0)
        op = _xop(_opt(opts, "reduceOp"), t)
        c, fin = _staged(t, self.rank() == root)
        rbuf = c.data_ptr() if self.rank() == root else None
        return self._issue(_lib.ireduce,
                           (c.data_ptr(), rbuf, _count(c), _xdtype(c), op,
                            root), (t, c), tensors, fin)

    def _allgather_base(self, output, input, opts=None):
        if output.dtype != input.dtype:
            raise RuntimeError("xcoll: all_gather_into_tensor needs output "
                               "and input of one dtype")
        if output.numel() != input.numel() * self.size():
            raise RuntimeError(
                f"xcoll: all_gather_into_tensor output must have "
                f"{self.size()} x {input.numel()} elements, not "
                f"{output.numel()}")
        i, _ = _staged(input, False)
        o, fin = _staged(output, True)
        return self._issue(_lib.iallgather,
                           (i.data_ptr(), o.data_ptr(), _count(i),
                            _xdtype(i)), (input, i, output, o), [output], fin)

    def allgather(self, output_lists, inputs, opts=None):
        t = _single(inputs, "allgather")
        outs = _single(output_lists, "allgather output list")
        if len(outs) != self.size():
            raise RuntimeError(f"xcoll: all_gather needs {self.size()} "
                               f"output tensors, got {len(outs)}")
        for o in outs:
            _xdtype(o)
            if o.dtype != t.dtype:
                raise RuntimeError("xcoll: all_gather output and input "
                                   "dtypes differ")
        i, _ = _staged(t, False)
        n = _count(i)
        if all(_count(o) == n for o in outs) and \
                n * i.element_size() >= _BCAST_GATHER_MIN and \
                all(o.is_contiguous() for o in outs):
            # Large blocks: one broadcast per rank straight into the output
            # tensors, instead of an all-gather into a staging buffer and a
            # copy of everything out of it (64 MiB on 4 ranks: 34 against
            # 57 ms).
            me = outs[self.rank()]
            me.copy_(i.view_as(me))
            xdt = _xdtype(i)
            return self._issue_all(
                [(_lib.ibcast, (o.data_ptr(), n, xdt, q))
                 for q, o in enumerate(outs)], (t, i, outs), output_lists)
        if all(_count(o) == n for o in outs):
            flat = self._stage(i.numel() * self.size(), i.dtype)
            return self._issue(_lib.iallgather,
                               (i.data_ptr(), flat.data_ptr(), n,
                                _xdtype(i)), (t, i, flat), output_lists,
                               lambda: _unflatten_into(flat, outs),
                               staged=(flat,))
        # Uneven sizes: an all-to-all-v sending the same block to everyone.
        counts = [o.numel() for o in outs]
        flat = self._stage(sum(counts), i.dtype)
        return self._alltoallv(i, [i.numel()] * self.size(), [0] * self.size(),
                               flat, counts, _prefix(counts), (t, outs),
                               output_lists,
                               lambda: _unflatten_into(flat, outs),
                               staged=(flat,))

    def allgather_coalesced(self, output_lists, inputs, opts=None):
        if len(output_lists) != self.size():
            raise RuntimeError(f"xcoll: all_gather_coalesced needs "
                               f"{self.size()} output lists")
        dt = inputs[0].dtype if inputs else torch.float32
        for t in inputs:
            _xdtype(t)
        flat_in = self._flat(inputs, dt)
        n = _count(flat_in)
        flat = self._stage(flat_in.numel() * self.size(), flat_in.dtype)

        def finish():
            per = flat.view(self.size(), -1)
            for r, outs in enumerate(output_lists):
                _unflatten_into(per[r], outs)
        return self._issue(_lib.iallgather,
                           (flat_in.data_ptr(), flat.data_ptr(), n,
                            _xdtype(flat_in)), (inputs, flat_in, flat),
                           output_lists, finish, staged=(flat_in, flat))

    def _reduce_scatter_base(self, output, input, opts=None):
        op = _xop(_opt(opts, "reduceOp"), input)
        if output.dtype != input.dtype:
            raise RuntimeError("xcoll: reduce_scatter_tensor needs output and "
                               "input of one dtype")
        if input.numel() != output.numel() * self.size():
            raise RuntimeError(
                f"xcoll: reduce_scatter_tensor input must have "
                f"{self.size()} x {output.numel()} elements, not "
                f"{input.numel()}")
        i, _ = _staged(input, False)
        o, fin = _staged(output, True)
        return self._issue(_lib.ireduce_scatter,
                           (i.data_ptr(), o.data_ptr(), _count(o),
                            _xdtype(o), op), (input, i, output, o), [output],
                           fin)

    def reduce_scatter(self, outputs, input_lists, opts=None):
        out = _single(outputs, "reduce_scatter")
        ins = _single(input_lists, "reduce_scatter input list")
        if len(ins) != self.size():
            raise RuntimeError(f"xcoll: reduce_scatter needs {self.size()} "
                               f"input tensors, got {len(ins)}")
        op = _xop(_opt(opts, "reduceOp"), out)
        for t in ins:
            _xdtype(t)
            if t.dtype != out.dtype:
                raise RuntimeError("xcoll: reduce_scatter output and input "
                                   "dtypes differ")
        flat = self._flat(ins, out.dtype)
        n = _count(out)
        if all(_count(t) == n for t in ins):
            o, fin = _staged(out, True)
            return self._issue(_lib.ireduce_scatter,
                               (flat.data_ptr(), o.data_ptr(), n,
                                _xdtype(o), op), (ins, flat, out, o),
                               outputs, fin, staged=(flat,))
        # Uneven sizes: all-reduce everything, keep this rank's block.
        start = sum(t.numel() for t in ins[:self.rank()])

        def finish():
            out.copy_(flat[start:start + out.numel()].view_as(out))
        return self._issue(_lib.iallreduce,
                           (flat.data_ptr(), flat.data_ptr(), _count(flat),
                            _xdtype(flat), op), (ins, flat, out), outputs,
                           finish, staged=(flat,))

    def _alltoallv(self, send, sc, sd, recv, rc, rd, keep, outputs, finish,
                   staged=()):
        n = self.size()
        A = _lib.c_size_t * n
        scale = 2 if send.is_complex() else 1
        sc, sd, rc, rd = ([x * scale for x in v] for v in (sc, sd, rc, rd))
        return self._issue(_lib.ialltoallv,
                           (send.data_ptr(), A(*sc), A(*sd), recv.data_ptr(),
                            A(*rc), A(*rd), _xdtype(send)),
                           (keep, send, recv), outputs, finish,
                           staged=staged)

    def alltoall_base(self, output, input, output_split_sizes,
                      input_split_sizes, opts=None):
        if output.dtype != input.dtype:
            raise RuntimeError("xcoll: all_to_all_single needs output and "
                               "input of one dtype")
        n = self.size()
        i, _ = _staged(input, False)
        o, fin = _staged(output, True)
        if not output_split_sizes and not input_split_sizes:
            if i.numel() != o.numel() or i.numel() % n:
                raise RuntimeError(
                    f"xcoll: all_to_all_single needs input and output of "
                    f"one size, divisible by {n} (got {i.numel()} and "
                    f"{o.numel()})")
            return self._issue(_lib.ialltoall,
                               (i.data_ptr(), o.data_ptr(), _count(i) // n,
                                _xdtype(i)), (input, i, output, o),
                               [output], fin)
        sc = _splits(input, input_split_sizes, n, "input")
        rc = _splits(output, output_split_sizes, n, "output")
        return self._alltoallv(i, sc, _prefix(sc), o, rc, _prefix(rc),
                               (input, output), [output], fin)

    def alltoall(self, outputs, inputs, opts=None):
        n = self.size()
        if len(outputs) != n or len(inputs) != n:
            raise RuntimeError(f"xcoll: all_to_all needs {n} input and {n} "
                               f"output tensors")
        dt = inputs[0].dtype
        for t in list(inputs) + list(outputs):
            _xdtype(t)
            if t.dtype != dt:
                raise RuntimeError("xcoll: all_to_all tensors must share "
                                   "one dtype")
        flat_in = self._flat(inputs, dt)
        flat_out = self._stage(sum(t.numel() for t in outputs), dt)
        sc = [t.numel() for t in inputs]
        rc = [t.numel() for t in outputs]
        return self._alltoallv(flat_in, sc, _prefix(sc), flat_out, rc,
                               _prefix(rc), (inputs, outputs), outputs,
                               lambda: _unflatten_into(flat_out, outputs),
                               staged=(flat_in, flat_out))

    def gather(self, output_lists, inputs, opts=None):
        t = _single(inputs, "gather")
        root = _opt(opts, "rootRank", 0)
        n = self.size()
        i, _ = _staged(t, False)
        cnt = i.numel()
        sc = [cnt if j == root else 0 for j in range(n)]
        if self.rank() == root:
            outs = _single(output_lists, "gather output list")
            if len(outs) != n:
                raise RuntimeError(f"xcoll: gather needs {n} output tensors "
                                   f"on the root, got {len(outs)}")
            for o in outs:
                if o.dtype != t.dtype or o.numel() != cnt:
                    raise RuntimeError("xcoll: gather outputs must match the "
                                       "input's dtype and size")
            flat = self._stage(cnt * n, t.dtype)
            return self._alltoallv(i, sc, [0] * n, flat, [cnt] * n,
                                   [cnt * j for j in range(n)], (t, outs),
                                   output_lists,
                                   lambda: _unflatten_into(flat, outs),
                                   staged=(flat,))
        if output_lists and any(len(x) for x in output_lists):
            raise RuntimeError("xcoll: gather takes no output list on "
                               "non-root ranks")
        dummy = torch.empty(1, dtype=t.dtype)
        return self._alltoallv(i, sc, [0] * n, dummy, [0] * n, [0] * n, t,
                               output_lists, None)

    def scatter(self, outputs, input_lists, opts=None):
        out = _single(outputs, "scatter")
        root = _opt(opts, "rootRank", 0)
        n = self.size()
        o, fin = _staged(out, True)
        cnt = o.numel()
        rc = [cnt if j == root else 0 for j in range(n)]
        if self.rank() == root:
            ins = _single(input_lists, "scatter input list")
            if len(ins) != n:
                raise RuntimeError(f"xcoll: scatter needs {n} input tensors "
                                   f"on the root, got {len(ins)}")
            for t in ins:
                _xdtype(t)
                if t.dtype != out.dtype or t.numel() != cnt:
                    raise RuntimeError("xcoll: scatter inputs must match the "
                                       "output's dtype and size")
            flat = self._flat(ins, out.dtype)
            return self._alltoallv(flat, [cnt] * n,
                                   [cnt * j for j in range(n)], o, rc,
                                   [0] * n, (ins, out), outputs, fin,
                                   staged=(flat,))
        if input_lists and any(len(x) for x in input_lists):
            raise RuntimeError("xcoll: scatter takes no input list on "
                               "non-root ranks")
        dummy = torch.empty(1, dtype=out.dtype)
        return self._alltoallv(dummy, [0] * n, [0] * n, o, rc, [0] * n, out,
                               outputs, fin)

    def barrier(self, opts=None):
        return self._issue(_lib.ibarrier, (), None, [])

    def send(self, tensors, dst, tag=0):
        t = _single(tensors, "send")
        c, _ = _staged(t, False)
        return self._issue(_lib.isend, (c.data_ptr(), _count(c), _xdtype(c),
                                        dst, _tag(tag)), (t, c), tensors)

    def recv(self, tensors, src, tag=0):
        t = _single(tensors, "recv")
        c, fin = _staged(t, True)
        return self._issue(_lib.irecv, (c.data_ptr(), _count(c), _xdtype(c),
                                        src, _tag(tag)), (t, c), tensors,
                           fin, source=src)

    def recv_anysource(self, tensors, tag=0):
        t = _single(tensors, "recv")
        c, fin = _staged(t, True)
        return self._issue(_lib.irecv, (c.data_ptr(), _count(c), _xdtype(c),
                                        -1, _tag(tag)), (t, c), tensors,
                           fin, source=None)

    # batch_isend_irecv brackets its operations with these: xcoll's
    # non-blocking send/recv need no batching to avoid deadlock.
    def _start_coalescing(self):
        pass

    def _end_coalescing(self, reqs):
        pass

    def monitored_barrier(self, timeout=None, wait_all_ranks=False):
        raise RuntimeError("xcoll: monitored_barrier is not supported")


def _shutdown(comm, holder, pending_reqs):
    """Destroy the group's communicator.  An operation still pending then
    (a receive nobody will match, a dropped work) would hold
    xc_comm_destroy until its deadline: abort the communicator first."""
    from . import _comm as cm

    def pending(r):
        try:
            return not r.test()
        except Exception:  # noqa: BLE001 -- failed: not pending
            return False
    stuck = any(pending(r) for r in list(pending_reqs.values()))
    pending_reqs.clear()
    with cm._orphans_lock:      # no reaper frees the listed ones meanwhile
        for h, c in list(cm._orphans):
            if c is comm:
                done = cm.ctypes.c_int(0)
                _lib.request_test(h, cm.ctypes.byref(done))
                stuck = stuck or not done.value
    if stuck:
        comm.abort()
    if holder[0] is not None:
        holder[0].stop()
    comm.close()


def _opt(opts, name, default=None):
    if opts is None:
        if name == "reduceOp":
            return dist.ReduceOp.SUM
        return default
    return getattr(opts, name)


def _tag(tag):
    if tag < 0:
        raise RuntimeError(f"xcoll: tags must be >= 0 (got {tag})")
    return tag


def _prefix(counts):
    out, acc = [], 0
    for c in counts:
        out.append(acc)
        acc += c
    return out


def _splits(t, sizes, n, what):
    """Element counts per rank of an all_to_all_single split along dim 0."""
    rows = t.size(0) if t.dim() else 1
    inner = t.numel() // rows if rows else 0
    if not sizes:
        if rows % n:
            raise RuntimeError(f"xcoll: all_to_all_single {what} has {rows} "
                               f"rows, not divisible by {n}")
        sizes = [rows // n] * n
    if len(sizes) != n or sum(sizes) != rows:
        raise RuntimeError(f"xcoll: all_to_all_single {what} split sizes "
                           f"{list(sizes)} do not cover its {rows} rows for "
                           f"{n} ranks")
    return [s * inner for s in sizes]


def create_process_group(store, rank, size, timeout):
    """The creator function c10d calls (Backend.register_backend)."""
    return ProcessGroupXcoll(store, rank, size, timeout)


def _register():
    if BACKEND_NAME.upper() in getattr(dist.Backend, "_plugins", {}):
        return
    dist.Backend.register_backend(BACKEND_NAME, create_process_group)


_register()
