"""Shared helpers of the binding's tests (tests/python/test_*.py).

Each test program runs as N real processes under xcoll-run
(``xcoll-run -n N /usr/bin/python3 tests/python/test_x.py``): every rank
runs the same checks in the same order.  ``eq``/``close`` print both
values and the rank on failure; ``main`` runs the test functions, prints
one line per test on rank 0, and exits non-zero if any check failed
(77 = skipped, with the reason, when numpy -- or torch for the torch
tests -- is missing).
"""
import os
import sys
import time
import traceback

_here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(_here)),
                                "python"))

SKIP = 77


def need(module, why=""):
    """Import `module` or exit 77 saying why the test is skipped."""
    try:
        return __import__(module)
    except ImportError as e:
        print(f"SKIP: {module} is not installed ({e}) {why}".rstrip())
        sys.exit(SKIP)


class CheckFailed(AssertionError):
    pass


def _rank():
    return os.environ.get("XCOLL_RANK", "?")


def check(cond, what):
    if not cond:
        raise CheckFailed(f"rank {_rank()}: {what}")


def eq(actual, expected, what=""):
    """Equality of scalars, sequences or numpy arrays (exact)."""
    np = sys.modules.get("numpy")
    if np is not None and (isinstance(actual, np.ndarray) or
                           isinstance(expected, np.ndarray)):
        a, e = np.asarray(actual), np.asarray(expected)
        ok = a.shape == e.shape and a.dtype == e.dtype and \
            np.array_equal(a, e, equal_nan=a.dtype.kind in "fc")
        if not ok:
            bad = "" if a.shape != e.shape else \
                f" first difference at {np.argwhere(a != e)[:1].tolist()}"
            raise CheckFailed(
                f"rank {_rank()}: {what}: got {a.dtype}{list(a.shape)} "
                f"{a.ravel()[:8]} expected {e.dtype}{list(e.shape)} "
                f"{e.ravel()[:8]}{bad}")
        return
    if actual != expected:
        raise CheckFailed(f"rank {_rank()}: {what}: got {actual!r} "
                          f"expected {expected!r}")


def close(actual, expected, rtol, what=""):
    import numpy as np
    a = np.asarray(actual, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    if a.shape != e.shape or not np.allclose(a, e, rtol=rtol, atol=rtol):
        raise CheckFailed(f"rank {_rank()}: {what}: got {a.ravel()[:8]} "
                          f"expected {e.ravel()[:8]} (rtol {rtol})")


def raises(exc_type, fn, what=""):
    """Run fn, check it raises exc_type; return the exception."""
    try:
        fn()
    except exc_type as e:
        return e
    except Exception as e:  # noqa: BLE001
        raise CheckFailed(f"rank {_rank()}: {what}: raised "
                          f"{type(e).__name__}: {e}, expected "
                          f"{exc_type.__name__}") from e
    raise CheckFailed(f"rank {_rank()}: {what}: did not raise "
                      f"{exc_type.__name__}")


def free_port():
    """A loopback TCP port that bound a moment ago, for a server started
    later (as tests/util/free_port.h does for the C tests): drawn at
    random from below the kernel's ephemeral range, where no bind(0) or
    outgoing connection of a concurrent test can take it in between."""
    import random
    import socket
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        lo = 32768
    first = max(1024, lo - 16384)
    candidates = ([random.randrange(first, lo) for _ in range(64)]
                  if lo - first >= 1024 else []) + [0]
    for port in candidates:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise OSError("no free loopback port")


def main(tests, comm=None, final_barrier=True):
    """Run the test functions (each takes `comm`) in order on every rank;
    stop at the first failure (the other ranks then fail too, by timeout
    or lost peer, instead of waiting for a rank that left the sequence).
    A healthy run ends with a barrier and destroys `comm`."""
    rank = int(os.environ.get("XCOLL_RANK", "0"))
    only = os.environ.get("XCOLL_TEST_ONLY")   # a substring, for debugging
    for fn in tests:
        name = fn.__name__
        if only and only not in name:
            continue
        t0 = time.perf_counter()
        try:
            fn(comm)
        except Exception:  # noqa: BLE001 -- reported
            print(f"FAIL {name}\n{traceback.format_exc()}", flush=True)
            sys.stdout.flush()
            os._exit(1)   # do not wait for peers in atexit handlers
        if rank == 0:
            print(f"ok   {name} ({(time.perf_counter() - t0) * 1e3:.0f} ms)",
                  flush=True)
    if comm is not None and final_barrier:
        comm.barrier()
        comm.close()
    sys.exit(0)
