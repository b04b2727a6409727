#!/usr/bin/python3
"""The binding's buffers: any object with the buffer protocol (bytearray,
array.array, memoryview slices, bytes for sending), dtypes inferred from
the buffer format (complex as pairs of reals), what is rejected and why,
and buffers held for as long as a non-blocking operation uses them."""
import array
import gc

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


if __name__ == "__main__":
    h.main([test_python_buffers, test_slices_in_place,
            test_multidim_and_complex, test_rejected, test_held_while_pending,
            test_dropped_request], xcoll.init_env())
