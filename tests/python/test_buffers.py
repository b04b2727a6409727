#!/usr/bin/python3
"""The binding's buffers: any object with the buffer protocol (bytearray,
array.array, memoryview slices, bytes for sending), dtypes inferred from
the buffer format (complex as pairs of reals, for SUM and AVG), what is
rejected and why, and buffers held for as long as a non-blocking operation
uses them (its request dropped, or collected in a cycle, too)."""
import array
import gc
import threading
import time
import weakref

import harness as h

np = h.need("numpy")
import xcoll  # noqa: E402


def test_python_buffers(comm):
    n = comm.size
    tot = n * (n - 1) // 2
    b = bytearray([comm.rank] * 16)
    comm.allreduce(b)                       # format 'B' -> uint8
    h.eq(bytes(b), bytes([tot] * 16), "bytearray in place")
    a = array.array("d", [comm.rank + 0.5] * 5)
    out = array.array("d", [0.0] * 5)
    comm.allreduce(a, out, op=xcoll.MAX)
    h.eq(list(out), [n - 0.5] * 5, "array.array('d') max")
    q = array.array("q", [comm.rank] * 3)
    comm.iallreduce(memoryview(q)).wait()
    h.eq(list(q), [tot] * 3, "memoryview of array.array('q')")
    # bytes are read-only: fine as a send buffer
    recv = bytearray(4 * n)
    comm.allgather(bytes([comm.rank] * 4), recv)
    h.eq(bytes(recv), b"".join(bytes([q] * 4) for q in range(n)),
         "allgather from bytes")


def test_slices_in_place(comm):
    """Views of one array give the C API's in-place spellings."""
    n, r = comm.size, comm.rank
    x = np.arange(4 * n, dtype=np.float32) + 100 * r
    comm.allgather(x[4 * r:4 * r + 4].copy(), x)   # out of place into x
    exp = np.concatenate([np.arange(4 * q, 4 * q + 4, dtype=np.float32) +
                          100 * q for q in range(n)])
    h.eq(x, exp, "allgather into an array")
    m = memoryview(x)
    comm.reduce_scatter(m, m[4 * r:4 * r + 4])     # in place through views
    # every rank contributes the same gathered array: slice r is n * exp
    h.eq(x[4 * r:4 * r + 4], (exp * n)[4 * r:4 * r + 4],
         "reduce_scatter in place via memoryview slices")


def test_multidim_and_complex(comm):
    n = comm.size
    m = np.ones((3, 5), np.int16) * (comm.rank + 1)
    comm.allreduce(m)
    h.eq(m, np.full((3, 5), n * (n + 1) // 2, np.int16), "2-D array")
    c = np.full(4, 1 + 2j, np.complex128) * (comm.rank + 1)
    comm.allreduce(c)                       # 'Zd' -> pairs of fp64, sum
    s = n * (n + 1) // 2
    h.eq(c, np.full(4, s * (1 + 2j), np.complex128), "complex128 sum")
    c64 = np.full(4, 2 - 1j, np.complex64)
    comm.allreduce(c64, op=xcoll.AVG)
    h.eq(c64, np.full(4, 2 - 1j, np.complex64), "complex64 avg")
    # pairs of reals get no other reduction right: rejected on every rank
    for op in (xcoll.PROD, xcoll.MIN, xcoll.MAX, xcoll.BAND, xcoll.BOR,
               xcoll.BXOR):
        for what, fn in [
            ("allreduce", lambda: comm.allreduce(c, op=op)),
            ("iallreduce", lambda: comm.iallreduce(c64, op=op)),
            ("reduce", lambda: comm.reduce(c, np.zeros_like(c), op=op)),
            ("reduce_scatter", lambda: comm.reduce_scatter(
                np.zeros(n, np.complex64), np.zeros(1, np.complex64),
                op=op))]:
            e = h.raises(xcoll.InvalidArgument, fn,
                         f"complex {what} {op.name}")
            h.check("complex" in e.message, f"says why: {e}")
    y = np.zeros(2, np.complex128)
    comm.allreduce(y, op=xcoll.PROD, dtype=xcoll.FLOAT64)   # asked for
    h.eq(y, np.zeros(2, np.complex128), "complex buffer as fp64, by dtype=")
    comm.allreduce(c)
    h.eq(c, np.full(4, n * s * (1 + 2j), np.complex128), "usable after")


def test_rejected(comm):
    x = np.zeros(10, np.float32)
    for what, fn in [
        ("non-contiguous", lambda: comm.allreduce(x[::2])),
        ("Fortran order", lambda: comm.allreduce(np.zeros((3, 4), order="F"))),
        ("read-only receive", lambda: comm.allreduce(x, b"\0" * 40)),
        ("read-only in place", lambda: comm.bcast(b"\0" * 8)),
        ("big-endian", lambda: comm.allreduce(np.zeros(4, ">f4"))),
        ("bool without dtype", lambda: comm.allreduce(np.zeros(4, bool))),
        ("not a buffer", lambda: comm.allreduce([1.0, 2.0])),
        ("partial element", lambda: comm.allreduce(bytearray(6),
                                                   dtype=xcoll.FLOAT32)),
        ("receive too small", lambda: comm.allreduce(x, np.zeros(9, np.float32))),
        ("dtypes differ", lambda: comm.allreduce(x, np.zeros(10, np.int32))),
        ("allgather size", lambda: comm.allgather(x, np.zeros(10, np.float32))
         if comm.size > 1 else comm.allgather(x, np.zeros(11, np.float32))),
        ("unknown op", lambda: comm.allreduce(x, op="median")),
        ("unknown dtype", lambda: comm.allreduce(x, dtype="fp8")),
    ]:
        e = h.raises(xcoll.InvalidArgument, fn, what)
        h.eq(e.code, -1, f"{what}: code")
        h.eq(e.name, "XC_ERR_INVALID", f"{what}: name")
        h.check(isinstance(e, ValueError), f"{what}: also a ValueError")
    # nothing was issued: the communicator is still in step
    y = np.ones(3, np.int32)
    comm.allreduce(y)
    h.eq(y, np.full(3, comm.size, np.int32), "usable after rejections")


def test_held_while_pending(comm):
    """A bytearray cannot be resized while a receive into it is pending;
    after wait() it can."""
    r, n = comm.rank, comm.size
    right, left = (r + 1) % n, (r - 1) % n
    buf = bytearray(64)
    req = comm.irecv(buf, left, tag=21)
    h.raises(BufferError, lambda: buf.extend(b"x"), "resize while pending")
    comm.send(bytes([r]) * 64, right, tag=21)
    req.wait()
    buf.extend(b"x")
    h.eq(bytes(buf[:64]), bytes([left]) * 64, "received")


def test_dropped_request(comm):
    """A request dropped before completion keeps its buffers until the
    library is done with them; the operation still completes."""
    r, n = comm.rank, comm.size
    right, left = (r + 1) % n, (r - 1) % n
    buf = bytearray(32)
    comm.irecv(buf, left, tag=22)   # dropped at once
    gc.collect()
    h.raises(BufferError, lambda: buf.extend(b"x"), "held after drop")
    comm.send(bytes([r + 1]) * 32, right, tag=22)
    comm.barrier()
    comm.ibarrier().wait()          # issuing reaps finished orphans
    buf.extend(b"x")                # released by now
    h.eq(bytes(buf[:32]), bytes([left + 1]) * 32, "dropped receive landed")


def test_request_in_cycle(comm):
    """A pending request caught in a reference cycle: the garbage collector
    finalizes it, yet its buffer stays alive and acquired until the
    receive is over and reaped."""
    r, n = comm.rank, comm.size
    right, left = (r + 1) % n, (r - 1) % n
    a = np.zeros(1 << 20)
    w = weakref.ref(a)
    q = comm.irecv(a, left, tag=23)
    cycle = [q]
    cycle.append(cycle)
    del a, q, cycle
    gc.collect()
    h.check(w() is not None, "receive buffer freed under a pending receive")
    comm.send(np.full(1 << 20, r + 1.0), right, tag=23)
    a = w()
    for _ in range(3000):               # lands (xcoll's progress thread)
        if (a == left + 1).all():
            break
        time.sleep(0.01)
    h.eq(a, np.full(1 << 20, left + 1.0), "received into the dropped buffer")
    del a
    reap_until(comm, lambda: w() is None, "buffer released when reaped")


def test_reap_drops_comm(comm):
    """Reaping frees a dropped request whose Comm was dropped too: the
    Comm's finalizer (destroy, then reap its orphans) runs within the
    reaper and must not wait for the reaper's lock (it did while other
    orphans were left: a hang)."""
    r, n = comm.rank, comm.size
    right, left = (r + 1) % n, (r - 1) % n
    child = comm.split(0)
    wc = weakref.ref(child)
    child.irecv(bytearray(4), left, tag=1)   # dropped, pending
    buf = bytearray(8)
    comm.irecv(buf, left, tag=24)       # dropped, unmatched for now
    child.send(bytes(4), right, tag=1)  # the child's receives can complete
    del child                           # its orphan holds it
    comm.barrier()
    t = threading.Thread(target=reap_until, daemon=True,
                         args=(comm, lambda: wc() is None, "child reaped"))
    t.start()
    t.join(60)
    h.check(not t.is_alive(), "reaping the child's orphan hung")
    h.check(wc() is None, "the dropped child was destroyed")
    h.raises(BufferError, lambda: buf.extend(b"x"), "irecv still holds it")
    comm.send(bytes([r + 1]) * 8, right, tag=24)
    reap_until(comm, lambda: resizable(buf), "receive reaped once matched")
    h.eq(bytes(buf[:8]), bytes([left + 1]) * 8, "received")


def resizable(b):
    """Whether nothing holds bytearray b's buffer (it can grow)."""
    try:
        b.append(0)
    except BufferError:
        return False
    b.pop()
    return True


def reap_until(comm, cond, what):
    """Issue requests (each reaps the completed orphans) until cond() is
    true on every rank: all ranks issue as many."""
    for _ in range(3000):
        ok = np.array([cond()], np.int32)
        comm.iallreduce(ok, op=xcoll.MIN).wait()
        if ok[0]:
            return
        time.sleep(0.01)
    h.check(False, f"{what}: not within 30 s")


if __name__ == "__main__":
    h.main([test_python_buffers, test_slices_in_place,
            test_multidim_and_complex, test_rejected, test_held_while_pending,
            test_dropped_request, test_request_in_cycle,
            test_reap_drops_comm], xcoll.init_env())
