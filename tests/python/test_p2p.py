#!/usr/bin/python3
"""Tagged point-to-point through the Python binding: blocking and
non-blocking send/recv around a ring, tags keeping messages apart,
messages to oneself, groups that make exchanges in both directions safe
(nested ones too), and non-blocking receives posted before the matching
sends."""
import harness as h

np = h.need("numpy")
import xcoll  # noqa: E402


def test_ring_blocking(comm):
    r, n = comm.rank, comm.size
    right, left = (r + 1) % n, (r - 1) % n
    out = np.arange(1000, dtype=np.float64) + r
    inb = np.zeros(1000, np.float64)
    if r % 2 == 0:
        comm.send(out, right, tag=5)
        comm.recv(inb, left, tag=5)
    else:
        comm.recv(inb, left, tag=5)
        comm.send(out, right, tag=5)
    h.eq(inb, np.arange(1000, dtype=np.float64) + left, "ring blocking")


def test_ring_nonblocking(comm):
    r, n = comm.rank, comm.size
    right, left = (r + 1) % n, (r - 1) % n
    for size in (0, 1, 4096, 300000):
        out = (np.arange(size) * 3 + r).astype(np.int32)
        inb = np.full(size, -1, np.int32)
        rq = comm.irecv(inb, left, tag=1)
        sq = comm.isend(out, right, tag=1)
        xcoll.wait_all([sq, rq])
        h.eq(inb, (np.arange(size) * 3 + left).astype(np.int32),
             f"ring nonblocking size={size}")


def test_tags(comm):
    """Two messages to the same peer with different tags, received in the
    opposite order: matched by tag, not by arrival."""
    r, n = comm.rank, comm.size
    right, left = (r + 1) % n, (r - 1) % n
    a = np.full(10, 100 + r, np.int64)
    b = np.full(20, 200 + r, np.int64)
    sa = comm.isend(a, right, tag=7)
    sb = comm.isend(b, right, tag=9)
    gb = np.zeros(20, np.int64)
    ga = np.zeros(10, np.int64)
    comm.recv(gb, left, tag=9)
    comm.recv(ga, left, tag=7)
    xcoll.wait_all([sa, sb])
    h.eq(ga, np.full(10, 100 + left, np.int64), "tag 7")
    h.eq(gb, np.full(20, 200 + left, np.int64), "tag 9")


def test_posting_order(comm):
    """Same (peer, tag): messages are matched in posting order."""
    r, n = comm.rank, comm.size
    right, left = (r + 1) % n, (r - 1) % n
    sends = [comm.isend(np.array([i, r], np.int32), right, tag=3)
             for i in range(8)]
    got = [np.zeros(2, np.int32) for _ in range(8)]
    reqs = [comm.irecv(g, left, tag=3) for g in got]
    xcoll.wait_all(reqs + sends)
    for i, g in enumerate(got):
        h.eq(g, np.array([i, left], np.int32), f"message #{i}")


def test_any_source(comm):
    """Rank 0 receives one message from every rank (itself included) with
    ANY_SOURCE; each request's .source names its sender, each sender once."""
    r, n = comm.rank, comm.size
    sq = comm.isend(np.array([r, 10 * r], np.int64), 0, tag=13)
    if r == 0:
        got = [np.zeros(2, np.int64) for _ in range(n)]
        reqs = [comm.irecv(g, xcoll.ANY_SOURCE, tag=13) for g in got]
        xcoll.wait_all(reqs)
        srcs = [q.source for q in reqs]
        h.check(sorted(srcs) == list(range(n)), f"every sender once: {srcs}")
        for q, g in zip(reqs, got):
            h.eq(g, np.array([q.source, 10 * q.source], np.int64),
                 f"payload from {q.source}")
    sq.wait()
    h.check(sq.source == -1, "a send has no source")
    # blocking, around the ring
    inb = np.zeros(3, np.int32)
    sq = comm.isend(np.full(3, r, np.int32), (r + 1) % n, tag=14)
    comm.recv(inb, xcoll.ANY_SOURCE, tag=14)
    sq.wait()
    h.eq(inb, np.full(3, (r - 1) % n, np.int32), "blocking any-source recv")


def test_self(comm):
    out = np.arange(50, dtype=np.uint8)
    inb = np.zeros(50, np.uint8)
    rq = comm.irecv(inb, comm.rank, tag=11)
    comm.send(out, comm.rank, tag=11)
    rq.wait()
    h.eq(inb, out, "message to oneself")


def test_group_exchange(comm):
    """Every rank sends to and receives from every other rank with blocking
    calls inside a group: they only post; leaving the group waits."""
    r, n = comm.rank, comm.size
    big = 1 << 18   # 2 MiB each way: would not fit any socket buffer
    got = {p: np.zeros(big, np.float64) for p in range(n) if p != r}
    with xcoll.group():
        for p in range(n):
            if p != r:
                comm.send(np.full(big, r * 10 + p, np.float64), p, tag=2)
                comm.recv(got[p], p, tag=2)
    for p, g in got.items():
        h.eq(g, np.full(big, p * 10 + r, np.float64), f"from {p}")


def test_nested_group(comm):
    """An inner group's calls run when the outermost group ends (the inner
    xc_group_end runs nothing): their buffers stay acquired until then."""
    r, n = comm.rank, comm.size
    right, left = (r + 1) % n, (r - 1) % n
    b = bytearray(4096)
    with xcoll.group():
        with xcoll.group():
            comm.recv(b, left, tag=6)
        comm.send(bytes([r + 1]) * 4096, right, tag=6)
        h.raises(BufferError, lambda: b.extend(b"x"),
                 "resize after the inner group, the outer one still open")
    h.eq(bytes(b), bytes([left + 1]) * 4096, "received at the outer end")
    b.extend(b"x")                      # released by the outer end


def test_dtype_override(comm):
    """dtype= reinterprets the bytes: bf16 through a uint16 buffer."""
    r, n = comm.rank, comm.size
    right, left = (r + 1) % n, (r - 1) % n
    out = np.arange(8, dtype=np.uint16) + r
    inb = np.zeros(8, np.uint16)
    xcoll.wait_all([comm.irecv(inb, left, tag=4, dtype=xcoll.BFLOAT16),
                    comm.isend(out, right, tag=4, dtype="bf16")])
    h.eq(inb, np.arange(8, dtype=np.uint16) + left, "bf16 bytes")


if __name__ == "__main__":
    h.main([test_ring_blocking, test_ring_nonblocking, test_tags,
            test_posting_order, test_self, test_group_exchange,
            test_nested_group, test_dtype_override], xcoll.init_env())
