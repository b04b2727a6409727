"""Communicators and requests: the Python face of xcoll.h.

Every collective exists blocking (``comm.allreduce``) and non-blocking
(``comm.iallreduce`` returning a :class:`Request`).  Buffers are any
objects with the buffer protocol (numpy arrays, bytearray, array.array,
memoryview slices); a non-blocking call keeps them acquired until its
request completes.  In-place operation is spelled as in C, by passing
overlapping views (or by leaving the receive buffer out where noted).

Threads: the C rule holds -- calls on one communicator must not run
concurrently from several threads (requests may be waited on from any
thread).  ctypes releases the GIL inside every call.
"""
import ctypes
import threading

from . import _errors, _lib
from ._buffer import Buffer, DType, Op, dtype_of, reduction_op

_check = _errors.check

# What each operation in flight reads or writes, keyed by its request
# handle: (Buffers, other objects), until the library is done with it.
# Reachable from here, the Buffers are never finalized (released) by the
# garbage collector under a pending operation, not even when its Request
# is caught in a reference cycle.
_inflight = {}

# Requests dropped while still pending, as (handle, comm); reaped whenever
# a request is made.  Appended without the lock (list.append is atomic),
# and the lock is reentrant: a finalizer may run anywhere, inside _reap's
# locked section too (the entries that one has taken are out of the list).
_orphans = []
_orphans_lock = threading.RLock()


def _free(h):
    """xc_request_free, then release what the operation held.  Its entry
    goes first: a new request may reuse the handle once it is freed."""
    bufs, _ = _inflight.pop(h, ((), None))
    _lib.request_free(h)
    for b in bufs:
        b.release()


def _reap(comm=None, blocking=True):
    """Free the orphans that completed (and all of `comm`'s: it is gone).
    The lock covers the list only: freeing drops references (maybe a
    Comm's last, whose __del__ reaps too), so it runs after the release.
    A finalizer passes blocking=False."""
    if not _orphans or not _orphans_lock.acquire(blocking):
        return
    over, pending = [], []
    try:
        while _orphans:
            o = _orphans.pop()
            done = ctypes.c_int(0)
            _lib.request_test(o[0], ctypes.byref(done))
            (over if done.value or o[1] is comm else pending).append(o)
        _orphans.extend(pending)
    finally:
        _orphans_lock.release()
    for h, _ in over:
        _free(h)


class Request:
    """A pending operation.  ``wait()`` blocks until it completes (raising
    its error), ``test()`` returns whether it has, without blocking.  Both
    may be called again after completion (same outcome).  ``result`` is
    the operation's output object (the receive buffer) once complete."""

    __slots__ = ("_h", "_comm", "_out", "_finish", "_exc", "_lock",
                 "_done", "_source", "__weakref__")

    def __init__(self, handle, comm, bufs, out, finish=None, keep=None):
        self._h = handle
        self._comm = comm        # keeps the communicator alive
        if bufs or keep is not None:
            # Buffers, released at completion; other objects xcoll uses
            # until then
            _inflight[handle] = (bufs, keep)
        self._out = out
        self._finish = finish
        self._exc = None
        self._done = False
        self._source = -1
        self._lock = threading.Lock()

    def _complete(self, rc):
        # Called with the lock held, once, when the C request is done.
        if rc != 0:
            self._exc = _errors._make(rc, _lib.last_error().decode(
                errors="replace"))
        self._source = _lib.request_source(self._h)
        _free(self._h)
        self._h = None
        if self._exc is None and self._finish is not None:
            try:
                self._finish()
            except BaseException as e:  # surfaced by wait()
                self._exc = e
        self._finish = None
        self._done = True

    def wait(self):
        """Block until complete; raise its error, else return ``result``."""
        if not self._done:
            with self._lock:
                if not self._done:
                    self._complete(_lib.request_wait(self._h))
        if self._exc is not None:
            raise self._exc
        return self._out

    def test(self):
        """True when complete (raising its error if it failed)."""
        if not self._done:
            if not self._lock.acquire(blocking=False):
                return False        # another thread is waiting on it
            try:
                if not self._done:
                    done = ctypes.c_int(0)
                    rc = _lib.request_test(self._h, ctypes.byref(done))
                    if not done.value:
                        return False
                    self._complete(rc)
            finally:
                self._lock.release()
        if self._exc is not None:
            raise self._exc
        return True

    @property
    def done(self):
        """Whether wait()/test() has seen the request complete."""
        return self._done

    @property
    def result(self):
        return self._out

    @property
    def source(self):
        """The rank a completed receive came from (who sent what an
        ``ANY_SOURCE`` receive took); -1 for other requests and before
        completion."""
        return self._source

    @property
    def exception(self):
        """The error it completed with (None if pending or successful)."""
        return self._exc

    def __del__(self):
        h = getattr(self, "_h", None)
        if h is not None:
            try:
                _orphans.append((h, self._comm))   # see _orphans: no lock
            except Exception:  # noqa: BLE001 -- interpreter shutting down
                pass


def wait_all(requests):
    """Wait for every request; raise the first error after all finished."""
    first = None
    for r in requests:
        try:
            r.wait()
        except Exception as e:  # noqa: BLE001 -- re-raised below
            if first is None:
                first = e
    if first is not None:
        raise first


# ------------------------------------------------------------------ groups
_tls = threading.local()


class group:
    """``with xcoll.group(): comm.send(...); comm.recv(...)`` --
    xc_group_start/xc_group_end: the blocking point-to-point calls inside
    only post; leaving the block waits for all of them (so exchanges in
    both directions cannot deadlock) and raises the first error.  Per
    thread, nestable."""

    def __enter__(self):
        stack = getattr(_tls, "groups", None)
        if stack is None:
            stack = _tls.groups = []
        _check(_lib.group_start())
        stack.append([])
        return self

    def __exit__(self, et, ev, tb):
        bufs = _tls.groups.pop()
        rc = _lib.group_end()
        msg = _lib.last_error().decode(errors="replace") if rc else ""
        if _tls.groups:
            # nested: xc_group_end ran nothing, the outermost one will
            _tls.groups[-1].extend(bufs)
        else:
            for b in bufs:
                b.release()
        if rc and et is None:
            raise _errors._make(rc, msg)
        return False


def _in_group():
    stack = getattr(_tls, "groups", None)
    return stack[-1] if stack else None


# ------------------------------------------------------------------ config
def _config(timeout_ms=None, progress_thread=None, socket_ifname=None,
            node_id=None):
    if timeout_ms is None and progress_thread is None and \
            socket_ifname is None and node_id is None:
        return None
    cfg = _lib.Config(ctypes.sizeof(_lib.Config), -1, -1, None, None)
    if timeout_ms is not None:
        cfg.timeout_ms = int(timeout_ms)
    if progress_thread is not None:
        cfg.progress_thread = 1 if progress_thread else 0
    if socket_ifname is not None:
        cfg.socket_ifname = socket_ifname.encode()
    if node_id is not None:
        cfg.node_id = node_id.encode()
    return ctypes.byref(cfg), cfg


def _cfgp(kw):
    c = _config(**kw)
    return (None, None) if c is None else c


class _StoreAdapter:
    """Wraps a Python store for xc_comm_init_store.

    The store needs ``set(key: str, value: bytes)`` and
    ``get(key: str, timeout_ms: int) -> bytes`` (blocking until the key
    exists; raising, or returning None, on timeout); ``wait(keys,
    timeout_ms)`` is used when present."""

    def __init__(self, store):
        self.store = store
        self.error = None
        self.c = _lib.Store()
        self.c.size = ctypes.sizeof(_lib.Store)
        self.c.ctx = None
        self._set = _lib.STORE_SET(self._cb_set)
        self._get = _lib.STORE_GET(self._cb_get)
        self.c.set = self._set
        self.c.get = self._get
        if hasattr(store, "wait"):
            self._wait = _lib.STORE_WAIT(self._cb_wait)
            self.c.wait = self._wait

    def _cb_set(self, ctx, key, val, n):
        try:
            self.store.set(key.decode(), ctypes.string_at(val, n))
            return 0
        except BaseException as e:  # noqa: BLE001 -- becomes a C error
            self.error = e
            return 1

    def _cb_get(self, ctx, key, buf, cap, lenp, timeout_ms):
        try:
            v = self.store.get(key.decode(), int(timeout_ms))
            if v is None:
                return 1
            self.error = None  # an earlier miss (a look) is not the cause
            v = bytes(v)
            ctypes.memmove(buf, v, min(len(v), cap))
            lenp[0] = len(v)
            return 0
        except BaseException as e:  # noqa: BLE001
            self.error = e
            return 1

    def _cb_wait(self, ctx, keys, n, timeout_ms):
        try:
            self.store.wait([keys[i].decode() for i in range(n)],
                            int(timeout_ms))
            return 0
        except BaseException as e:  # noqa: BLE001
            self.error = e
            return 1


def _create(fn, *args, **kw):
    handle = _lib.comm_p()
    cfgp, keep = _cfgp(kw)
    rc = fn(ctypes.byref(handle), *args, cfgp)
    del keep
    _check(rc)
    return Comm._wrap(handle.value)


def init_env(**config):
    """xc_comm_init_env: rank, size and rendezvous from the launcher's
    environment (xcoll-run, torchrun, Slurm, Open MPI, MPICH).  Keyword
    arguments: timeout_ms, progress_thread, socket_ifname, node_id."""
    return _create(_lib.comm_init_env, **config)


def init(rank, size, addr, **config):
    """xc_comm_init: explicit rank and size; addr "host:port" (rank 0 hosts
    the store unless XCOLL_STORE_EXTERNAL=1) or "file:/shared/dir"."""
    return _create(_lib.comm_init, int(rank), int(size), addr.encode(),
                   **config)


def init_store(rank, size, store, **config):
    """xc_comm_init_store: rendezvous through a caller's store (see
    _StoreAdapter for what it must provide)."""
    ad = _StoreAdapter(store)
    handle = _lib.comm_p()
    cfgp, keep = _cfgp(config)
    rc = _lib.comm_init_store(ctypes.byref(handle), int(rank), int(size),
                              ctypes.byref(ad.c), cfgp)
    del keep
    if rc != 0:
        err = _errors._make(rc, _lib.last_error().decode(errors="replace"))
        if ad.error is not None:
            raise err from ad.error
        raise err
    return Comm._wrap(handle.value)


# ------------------------------------------------------------------ Comm
def _same_dtype(a, b, what):
    if a.dtype != b.dtype:
        raise _errors.invalid(
            f"{what}: send and receive buffers have different dtypes "
            f"({a.dtype.name} and {b.dtype.name}); pass dtype=")


class Comm:
    """A communicator.  Create with init_env(), init(), init_store() or
    split(); destroy with close() (or a with-block)."""

    __slots__ = ("_h", "_life", "rank", "size", "__weakref__")

    @classmethod
    def _wrap(cls, h):
        self = object.__new__(cls)
        self._h = h
        # close() and abort() (any thread) take it: an abort never runs on
        # a handle that close() is destroying
        self._life = threading.Lock()
        self.rank = _lib.comm_rank(h)
        self.size = _lib.comm_size(h)
        return self

    def __init__(self):
        raise TypeError("use xcoll.init_env(), init(), init_store() or "
                        "comm.split()")

    # -- lifetime --------------------------------------------------------
    @property
    def handle(self):
        """The xc_comm_t * as an int (for other bindings)."""
        if self._h is None:
            raise _errors.invalid("communicator was destroyed")
        return self._h

    def close(self):
        """xc_comm_destroy (idempotent).  Pending operations get until
        their deadline, then fail with Aborted."""
        self._close(True)

    def _close(self, reap_blocking):
        life = getattr(self, "_life", None)
        if life is None:
            h, self._h = getattr(self, "_h", None), None
        else:
            with life:
                h, self._h = self._h, None
        if h is not None:
            rc = _lib.comm_destroy(h)
            _reap(self, reap_blocking)
            _check(rc)

    destroy = close

    def abort(self):
        """xc_comm_abort: fail every pending and future operation, here
        and on the peers.  Any thread."""
        with self._life:
            if self._h is not None:
                _check(_lib.comm_abort(self._h))

    def revoke(self):
        """xc_comm_revoke: every pending and future operation fails with
        Revoked on every rank; then shrink() or close().  Any thread."""
        with self._life:
            if self._h is not None:
                _check(_lib.comm_revoke(self._h))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            # a finalizer never waits for the orphans' lock (it may run on
            # the thread holding it): a later reap frees what it leaves
            self._close(False)
        except Exception:  # noqa: BLE001 -- nothing to report to at GC
            pass

    def split(self, color, key=0, **config):
        """xc_comm_split; color None (or XC_COLOR_NONE = -1) takes part
        without joining, and gets None back."""
        child = _lib.comm_p()
        cfgp, keep = _cfgp(config)
        _check(_lib.comm_split(self.handle, -1 if color is None else int(color),
                               int(key), ctypes.byref(child), cfgp))
        del keep
        return Comm._wrap(child.value) if child.value else None

    def shrink(self):
        """xc_comm_shrink: after a failure (PeerLost, Revoked, Aborted, Timeout),
        every surviving rank calls it; returns a new Comm of the survivors,
        renumbered in old-rank order.  This communicator stays poisoned:
        close() it afterwards."""
        child = _lib.comm_p()
        _check(_lib.comm_shrink(self.handle, ctypes.byref(child)))
        return Comm._wrap(child.value)

    # -- queries ----------------------------------------------------------
    @property
    def local_rank(self):
        return _lib.comm_local_rank(self.handle)

    @property
    def local_size(self):
        return _lib.comm_local_size(self.handle)

    @property
    def node(self):
        return _lib.comm_node(self.handle)

    @property
    def node_count(self):
        return _lib.comm_node_count(self.handle)

    @property
    def last_error(self):
        return _lib.comm_last_error(self.handle).decode(errors="replace")

    def status(self):
        """None when healthy, else the exception that poisoned it."""
        rc = _lib.comm_status(self.handle)
        return None if rc == 0 else _errors._make(rc, self.last_error)

    def stats(self):
        """xc_comm_stats as a dict of dicts keyed by names."""
        st = _lib.Stats()
        st.size = ctypes.sizeof(st)
        _check(_lib.comm_stats(self.handle, ctypes.byref(st)))
        coll = [_lib.coll_name(i).decode() for i in range(_lib.COLL_COUNT)]
        tr = [_lib.transport_name(i).decode()
              for i in range(_lib.TRANSPORT_COUNT)]
        algos = {}
        for i in range(_lib.STATS_MAX_ALGOS):
            if st.algo_ops[i]:
                n = _lib.algo_name(i)
                algos[n.decode() if n else str(i)] = st.algo_ops[i]
        return {"ops": dict(zip(coll, st.ops)),
                "bytes_sent": dict(zip(tr, st.bytes_sent)),
                "bytes_recv": dict(zip(tr, st.bytes_recv)),
                "msgs_sent": dict(zip(tr, st.msgs_sent)),
                "algo_ops": algos,
                "express_bias": {"grants": st.express_bias_grants,
                                 "revokes": st.express_bias_revokes},
                "single_copy_bytes": st.single_copy_bytes,
                "express": {"ops": st.express_ops, "resumed": st.express_resumed,
                            "p2p": st.express_p2p}}

    def __repr__(self):
        if self._h is None:
            return "<xcoll.Comm destroyed>"
        return f"<xcoll.Comm rank {self.rank} of {self.size}>"

    # -- issuing ---------------------------------------------------------
    def _run(self, blocking, bufs, out, fn, args, ifn):
        """Blocking: call fn(*args, comm) and release; else ifn(*args,
        comm, &req) and hand the buffers to a Request."""
        h = self.handle
        if blocking:
            grp = _in_group()
            try:
                rc = fn(*args, h)
            except BaseException:
                for b in bufs:
                    b.release()
                raise
            if grp is not None and fn in (_lib.send, _lib.recv):
                grp.extend(bufs)    # posted only: held until group end
            else:
                for b in bufs:
                    b.release()
            _check(rc)
            return out
        _reap()
        req = _lib.req_p()
        rc = ifn(*args, h, ctypes.byref(req))
        if rc != 0:
            for b in bufs:
                b.release()
            _check(rc)
        return Request(req.value, self, bufs, out)

    def _iraw(self, ifn, args, keep=None, out=None, finish=None):
        """Issue ifn(*args, comm, &req) on raw pointers (the torch backend's
        path: no buffer protocol); `keep` stays referenced until the
        request completes, then `finish()` runs once on success."""
        if _orphans:
            _reap()
        req = _lib.req_p()
        _check(ifn(*args, self.handle, ctypes.byref(req)))
        return Request(req.value, self, (), out, finish, keep)

    def _allreduce(self, blocking, sendbuf, recvbuf, op, dtype):
        s = Buffer(sendbuf, recvbuf is None, dtype, "sendbuf")
        if recvbuf is None:
            r, bufs, out = s, [s], sendbuf
        else:
            r = Buffer(recvbuf, True, dtype, "recvbuf")
            bufs, out = [s, r], recvbuf
            _same_dtype(s, r, "allreduce")
            if r.count != s.count:
                _release(bufs)
                raise _errors.invalid(
                    f"allreduce: recvbuf holds {r.count} elements, sendbuf "
                    f"{s.count}")
        op = _op_or_release(bufs, op, "allreduce")
        return self._run(blocking, bufs, out, _lib.allreduce,
                         (s.ptr, r.ptr, s.count, s.dtype, op),
                         _lib.iallreduce)

    def allreduce(self, sendbuf, recvbuf=None, op=Op.SUM, dtype=None):
        """recvbuf[i] = op over ranks of sendbuf[i]; without recvbuf, in
        place in sendbuf.  Returns the buffer holding the result."""
        return self._allreduce(True, sendbuf, recvbuf, op, dtype)

    def iallreduce(self, sendbuf, recvbuf=None, op=Op.SUM, dtype=None):
        return self._allreduce(False, sendbuf, recvbuf, op, dtype)

    def _reduce_scatter(self, blocking, sendbuf, recvbuf, op, dtype):
        s = Buffer(sendbuf, False, dtype, "sendbuf")
        r = Buffer(recvbuf, True, dtype, "recvbuf")
        bufs = [s, r]
        _check_or_release(bufs, s.dtype == r.dtype, "reduce_scatter: send "
                          "and receive buffers have different dtypes")
        _check_or_release(bufs, s.count == r.count * self.size,
                          f"reduce_scatter: sendbuf must hold size * "
                          f"recvcount = {self.size} * {r.count} elements, "
                          f"not {s.count}")
        op = _op_or_release(bufs, op, "reduce_scatter")
        return self._run(blocking, bufs, recvbuf, _lib.reduce_scatter,
                         (s.ptr, r.ptr, r.count, s.dtype, op),
                         _lib.ireduce_scatter)

    def reduce_scatter(self, sendbuf, recvbuf, op=Op.SUM, dtype=None):
        """sendbuf holds size * len(recvbuf) elements; this rank receives
        the reduction of slice `rank`.  In place: recvbuf is that slice of
        sendbuf (a view of the same memory)."""
        return self._reduce_scatter(True, sendbuf, recvbuf, op, dtype)

    def ireduce_scatter(self, sendbuf, recvbuf, op=Op.SUM, dtype=None):
        return self._reduce_scatter(False, sendbuf, recvbuf, op, dtype)

    def _allgather(self, blocking, sendbuf, recvbuf, dtype):
        s = Buffer(sendbuf, False, dtype, "sendbuf")
        r = Buffer(recvbuf, True, dtype, "recvbuf")
        bufs = [s, r]
        _check_or_release(bufs, s.dtype == r.dtype, "allgather: send and "
                          "receive buffers have different dtypes")
        _check_or_release(bufs, r.count == s.count * self.size,
                          f"allgather: recvbuf must hold size * sendcount = "
                          f"{self.size} * {s.count} elements, not {r.count}")
        return self._run(blocking, bufs, recvbuf, _lib.allgather,
                         (s.ptr, r.ptr, s.count, s.dtype), _lib.iallgather)

    def allgather(self, sendbuf, recvbuf, dtype=None):
        """recvbuf = concatenation of every rank's sendbuf.  In place:
        sendbuf is slice `rank` of recvbuf."""
        return self._allgather(True, sendbuf, recvbuf, dtype)

    def iallgather(self, sendbuf, recvbuf, dtype=None):
        return self._allgather(False, sendbuf, recvbuf, dtype)

    def _reduce(self, blocking, sendbuf, recvbuf, op, root, dtype):
        root = int(root)
        inplace = recvbuf is None and self.rank == root
        s = Buffer(sendbuf, inplace, dtype, "sendbuf")
        if inplace:
            r, bufs, out = s, [s], sendbuf
        elif recvbuf is None:
            r, bufs, out = None, [s], None
        else:
            r = Buffer(recvbuf, True, dtype, "recvbuf")
            bufs, out = [s, r], recvbuf
            _check_or_release(bufs, s.dtype == r.dtype and
                              s.count == r.count, "reduce: recvbuf must "
                              "have sendbuf's dtype and length")
        op = _op_or_release(bufs, op, "reduce")
        return self._run(blocking, bufs, out, _lib.reduce,
                         (s.ptr, r.ptr if r else None, s.count, s.dtype,
                          op, root), _lib.ireduce)

    def reduce(self, sendbuf, recvbuf=None, op=Op.SUM, root=0, dtype=None):
        """Reduction to `root`.  recvbuf is used on root only; on root,
        without recvbuf, in place in sendbuf."""
        return self._reduce(True, sendbuf, recvbuf, op, root, dtype)

    def ireduce(self, sendbuf, recvbuf=None, op=Op.SUM, root=0, dtype=None):
        return self._reduce(False, sendbuf, recvbuf, op, root, dtype)

    def _bcast(self, blocking, buf, root, dtype):
        b = Buffer(buf, True, dtype, "buf")
        return self._run(blocking, [b], buf, _lib.bcast,
                         (b.ptr, b.count, b.dtype, int(root)), _lib.ibcast)

    def bcast(self, buf, root=0, dtype=None):
        """`buf` of root is copied into `buf` of every rank."""
        return self._bcast(True, buf, root, dtype)

    def ibcast(self, buf, root=0, dtype=None):
        return self._bcast(False, buf, root, dtype)

    broadcast, ibroadcast = bcast, ibcast

    def _alltoall(self, blocking, sendbuf, recvbuf, dtype):
        s = Buffer(sendbuf, recvbuf is None, dtype, "sendbuf")
        if recvbuf is None:
            r, bufs, out = s, [s], sendbuf
        else:
            r = Buffer(recvbuf, True, dtype, "recvbuf")
            bufs, out = [s, r], recvbuf
        _check_or_release(bufs, s.dtype == r.dtype and s.count == r.count
                          and s.count % self.size == 0,
                          f"alltoall: send and receive buffers must have "
                          f"one dtype and one length, a multiple of "
                          f"{self.size}")
        return self._run(blocking, bufs, out, _lib.alltoall,
                         (s.ptr, r.ptr, s.count // self.size, s.dtype),
                         _lib.ialltoall)

    def alltoall(self, sendbuf, recvbuf=None, dtype=None):
        """Block j of sendbuf (len/size elements) goes to rank j and lands
        as block `rank` of its recvbuf; without recvbuf, in place."""
        return self._alltoall(True, sendbuf, recvbuf, dtype)

    def ialltoall(self, sendbuf, recvbuf=None, dtype=None):
        return self._alltoall(False, sendbuf, recvbuf, dtype)

    def _alltoallv(self, blocking, sendbuf, sendcounts, recvbuf, recvcounts,
                   sdispls, rdispls, dtype):
        n = self.size
        arrs = []
        for name, v in (("sendcounts", sendcounts), ("recvcounts", recvcounts)):
            v = list(v)
            if len(v) != n or any(c < 0 for c in v):
                raise _errors.invalid(f"alltoallv: {name} must be {n} "
                                      f"non-negative counts")
            arrs.append(v)
        for counts, d, name in ((arrs[0], sdispls, "sdispls"),
                                (arrs[1], rdispls, "rdispls")):
            if d is None:
                d, acc = [], 0
                for c in counts:
                    d.append(acc)
                    acc += c
            d = list(d)
            if len(d) != n or any(x < 0 for x in d):
                raise _errors.invalid(f"alltoallv: {name} must be {n} "
                                      f"non-negative displacements")
            arrs.append(d)
        sc, rc, sd, rd = arrs
        s = Buffer(sendbuf, False, dtype, "sendbuf")
        r = Buffer(recvbuf, True, dtype, "recvbuf")
        bufs = [s, r]
        _check_or_release(bufs, s.dtype == r.dtype, "alltoallv: send and "
                          "receive buffers have different dtypes")
        _check_or_release(bufs, all(d + c <= s.count for c, d in zip(sc, sd))
                          and all(d + c <= r.count for c, d in zip(rc, rd)),
                          "alltoallv: counts and displacements run past "
                          "the end of a buffer")
        A = _lib.c_size_t * n
        return self._run(blocking, bufs, recvbuf, _lib.alltoallv,
                         (s.ptr, A(*sc), A(*sd), r.ptr, A(*rc), A(*rd),
                          s.dtype), _lib.ialltoallv)

    def alltoallv(self, sendbuf, sendcounts, recvbuf, recvcounts,
                  sdispls=None, rdispls=None, dtype=None):
        """sendcounts[j] elements from sendbuf[sdispls[j]:] go to rank j,
        which receives them at recvbuf[rdispls[i]:] (expecting
        recvcounts[i]).  Displacements default to packed prefix sums."""
        return self._alltoallv(True, sendbuf, sendcounts, recvbuf,
                               recvcounts, sdispls, rdispls, dtype)

    def ialltoallv(self, sendbuf, sendcounts, recvbuf, recvcounts,
                   sdispls=None, rdispls=None, dtype=None):
        return self._alltoallv(False, sendbuf, sendcounts, recvbuf,
                               recvcounts, sdispls, rdispls, dtype)

    def barrier(self):
        _check(_lib.barrier(self.handle))

    def ibarrier(self):
        return self._run(False, [], None, None, (), _lib.ibarrier)

    def _p2p(self, blocking, send, buf, peer, tag, dtype):
        b = Buffer(buf, not send, dtype, "buf")
        fn, ifn = (_lib.send, _lib.isend) if send else (_lib.recv, _lib.irecv)
        return self._run(blocking, [b], buf, fn,
                         (b.ptr, b.count, b.dtype, int(peer), int(tag)), ifn)

    def send(self, buf, peer, tag=0, dtype=None):
        """Tagged send; completes when buf may be reused."""
        return self._p2p(True, True, buf, peer, tag, dtype)

    def recv(self, buf, peer, tag=0, dtype=None):
        """Tagged receive into buf (same count and dtype as the send).
        ``peer=ANY_SOURCE`` takes the first message on the tag from any
        rank; ``irecv(...).wait()`` then ``.source`` tells which."""
        return self._p2p(True, False, buf, peer, tag, dtype)

    def isend(self, buf, peer, tag=0, dtype=None):
        return self._p2p(False, True, buf, peer, tag, dtype)

    def irecv(self, buf, peer, tag=0, dtype=None):
        return self._p2p(False, False, buf, peer, tag, dtype)


def _release(bufs):
    for b in bufs:
        b.release()


def _check_or_release(bufs, ok, msg):
    if not ok:
        _release(bufs)
        raise _errors.invalid(msg)


def _op_or_release(bufs, op, what):
    """The op, checked against the buffers (released if it is rejected)."""
    try:
        return reduction_op(op, bufs, what)
    except _errors.Error:
        _release(bufs)
        raise
