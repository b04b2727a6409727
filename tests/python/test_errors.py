#!/usr/bin/python3
"""xcoll's errors reach Python as exceptions carrying the library's code,
name and message: invalid arguments, mismatched operations, timeouts,
abort from another thread, a poisoned communicator, failed creation, and
a peer that dies.  Each failure is provoked on a child communicator (split
from the job's), so the job's own communicator stays usable."""
import os
import threading
import time

import harness as h

np = h.need("numpy")
import xcoll  # noqa: E402


def child(comm, **cfg):
    c = comm.split(0, **cfg)
    # Every rank out of the split before anyone provokes an error on the
    # child: a rank still finishing the child's set-up (or any earlier
    # operation on it) would get the error there instead, the child being
    # poisoned under it.  The barrier is on the parent, which stays healthy.
    comm.barrier()
    return c


def test_invalid(comm):
    e = h.raises(xcoll.InvalidArgument,
                 lambda: comm.bcast(np.zeros(3), root=comm.size + 3),
                 "root out of range")
    h.eq((e.code, e.name), (-1, "XC_ERR_INVALID"), "code and name")
    h.check("xc_bcast" in e.message and "root" in e.message,
            f"library's message: {e.message!r}")
    h.check(str(e).startswith("XC_ERR_INVALID: "), f"str: {e}")
    h.raises(xcoll.InvalidArgument,
             lambda: comm.send(np.zeros(1), 0, tag=-1), "negative tag")
    h.raises(xcoll.InvalidArgument,
             lambda: comm.recv(np.zeros(1), comm.size, tag=0), "bad peer")
    h.check(comm.status() is None, "invalid arguments do not poison")


def test_mismatch(comm):
    if comm.size < 2:
        return
    c = child(comm, timeout_ms=20000)
    n = 10 + comm.rank            # every rank a different count
    e = h.raises(xcoll.Mismatch, lambda: c.allreduce(np.ones(n, np.float32)),
                 "different counts")
    h.eq((e.code, e.name), (-7, "XC_ERR_MISMATCH"), "code and name")
    h.check("rank" in e.message, f"message names ranks: {e.message!r}")
    # poisoned: every later operation fails the same way, at once
    e2 = h.raises(xcoll.Mismatch, lambda: c.barrier(), "after poisoning")
    h.check(isinstance(c.status(), xcoll.Mismatch), "status() is the error")
    h.raises(xcoll.Mismatch, lambda: c.iallreduce(np.ones(2)), "issue fails")
    h.check(e2.message, "poisoned message")
    comm.barrier()      # all saw the mismatch before anyone destroys
    c.close()


def test_timeout(comm):
    c = child(comm, timeout_ms=300)
    t0 = time.monotonic()
    req = c.irecv(np.zeros(4), c.rank, tag=99)     # nobody sends it
    e = h.raises(xcoll.Timeout, req.wait, "receive nobody sends")
    took = time.monotonic() - t0
    h.eq((e.code, e.name), (-5, "XC_ERR_TIMEOUT"), "code and name")
    h.check(isinstance(e, TimeoutError), "also a built-in TimeoutError")
    h.check(0.25 < took < 10, f"timed out after {took:.2f}s (deadline 0.3)")
    h.raises(xcoll.Timeout, req.wait, "wait again: same result")
    h.check(req.exception is e or isinstance(req.exception, xcoll.Timeout),
            "request keeps its error")
    c.close()
    comm.barrier()


def test_abort(comm):
    c = child(comm, timeout_ms=60000)
    buf = np.zeros(8)
    req = c.irecv(buf, c.rank, tag=1)              # never matched
    threading.Timer(0.2, c.abort).start()
    e = h.raises(xcoll.Aborted, req.wait, "abort from another thread")
    h.eq((e.code, e.name), (-6, "XC_ERR_ABORTED"), "code and name")
    c.close()
    comm.barrier()


def test_revoke(comm):
    """Rank 0 revokes while every rank (rank 0 too) waits in a receive
    nobody sends: all get Revoked naming rank 0; shrink gives every rank."""
    c = child(comm, timeout_ms=60000)
    buf = np.zeros(8)
    req = c.irecv(buf, c.rank, tag=2)              # never matched
    if c.rank == 0:
        threading.Timer(0.2, c.revoke).start()
    e = h.raises(xcoll.Revoked, req.wait, "revoked by rank 0")
    h.eq((e.code, e.name), (-13, "XC_ERR_REVOKED"), "code and name")
    h.check("rank 0 revoked" in e.message, f"message names the rank: {e.message!r}")
    new = c.shrink()
    h.eq(new.size, c.size, "shrink after a revoke keeps every rank")
    x = np.array([1], np.int64)
    new.allreduce(x)
    h.eq(int(x[0]), c.size, "the shrunk communicator works")
    new.close()
    c.close()
    comm.barrier()


def test_creation_errors(comm):
    e = h.raises(xcoll.InvalidArgument,
                 lambda: xcoll.init(0, 0, "127.0.0.1:1"), "size 0")
    h.check("size" in e.message, f"message: {e.message!r}")
    h.raises(xcoll.InvalidArgument, lambda: xcoll.init(3, 2, "file:/tmp"),
             "rank >= size")

    class Broken:
        def set(self, key, value):
            raise OSError("store is down")

        def get(self, key, timeout_ms):
            raise OSError("store is down")
    e = h.raises(xcoll.Error, lambda: xcoll.init_store(0, 2, Broken(),
                                                       timeout_ms=1000),
                 "store callbacks failing")
    h.check(isinstance(e.__cause__, OSError),
            f"the store's own exception is chained: {e.__cause__!r}")


def test_peer_lost(comm):
    """The last rank dies in the middle of the job; the others get
    PeerLost (or Timeout), not a hang.  Last test of the program."""
    if comm.size < 2:
        return
    c = child(comm, timeout_ms=30000)
    c.allreduce(np.ones(4))
    if c.rank == c.size - 1:
        # Let the others return from that all-reduce first: a rank leaving
        # while a peer is still inside a collective that already has every
        # contribution can fail that peer too (see docs/python.md).
        time.sleep(0.5)
        os._exit(0)                # dies without destroying anything
    t0 = time.monotonic()
    e = h.raises(xcoll.Error, lambda: [c.allreduce(np.ones(4))
                                       for _ in range(100)], "peer died")
    h.check(isinstance(e, (xcoll.PeerLost, xcoll.Timeout)),
            f"PeerLost or Timeout, got {type(e).__name__}: {e}")
    h.check(time.monotonic() - t0 < 25, "reported promptly")
    if isinstance(e, xcoll.PeerLost):
        h.eq(e.code, -4, "code")
        h.check(str(c.size - 1) in e.message, f"names the rank: {e.message}")


if __name__ == "__main__":
    import sys
    comm = xcoll.init_env()
    if sys.argv[1:] == ["peer_lost"]:
        # the job's communicator dies with the rank: no final barrier
        h.main([test_peer_lost], comm, final_barrier=False)
    h.main([test_invalid, test_mismatch, test_timeout, test_abort, test_revoke,
            test_creation_errors], comm)
