#!/usr/bin/python3
"""Creating communicators from Python: from the launcher's environment,
with explicit rank/size over a TCP store hosted by rank 0 and over a file
store, through a store written in Python (xc_comm_init_store callbacks),
and how the package finds libxcoll (XCOLL_LIBRARY)."""
import os
import shutil
import subprocess
import sys
import time

import harness as h

np = h.need("numpy")
import xcoll  # noqa: E402


def job_dir(comm, name):
    port = os.environ["XCOLL_ADDR"].rsplit(":", 1)[1]
    d = f"/tmp/xcoll-pytest-{port}-{name}"
    if comm.rank == 0:
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
    comm.barrier()
    return d


def works(c, comm, what):
    h.eq((c.rank, c.size), (comm.rank, comm.size), f"{what}: rank, size")
    x = np.array([c.rank + 1], np.int64)
    c.allreduce(x)
    h.eq(int(x[0]), c.size * (c.size + 1) // 2, f"{what}: all-reduce")
    c.close()
    c.close()   # idempotent


def test_env(comm):
    works(xcoll.init_env(), comm, "init_env")


def test_tcp_store_on_rank0(comm):
    port = np.zeros(1, np.int32)
    if comm.rank == 0:
        port[0] = h.free_port()
    comm.bcast(port, root=0)
    ext = os.environ.pop("XCOLL_STORE_EXTERNAL", None)   # rank 0 hosts
    try:
        c = xcoll.init(comm.rank, comm.size, f"127.0.0.1:{int(port[0])}")
    finally:
        if ext is not None:
            os.environ["XCOLL_STORE_EXTERNAL"] = ext
    works(c, comm, "init host:port")


def test_file_store(comm):
    d = job_dir(comm, "file")
    works(xcoll.init(comm.rank, comm.size, "file:" + d), comm, "init file:")
    comm.barrier()
    if comm.rank == 0:
        shutil.rmtree(d, ignore_errors=True)


class DirStore:
    """A store in Python: one file per key in a shared directory."""

    def __init__(self, d):
        self.d = d
        self.calls = {"set": 0, "get": 0}

    def _p(self, key):
        return os.path.join(self.d, key.replace("/", "%"))

    def set(self, key, value):
        self.calls["set"] += 1
        tmp = self._p(key) + f".tmp{os.getpid()}"
        with open(tmp, "wb") as f:
            f.write(value)
        os.rename(tmp, self._p(key))

    def get(self, key, timeout_ms):
        self.calls["get"] += 1
        end = time.monotonic() + timeout_ms / 1000
        while True:
            try:
                with open(self._p(key), "rb") as f:
                    return f.read()
            except FileNotFoundError:
                if time.monotonic() > end:
                    return None      # timeout
                time.sleep(0.002)


def test_python_store(comm):
    d = job_dir(comm, "pystore")
    st = DirStore(d)
    c = xcoll.init_store(comm.rank, comm.size, st, timeout_ms=30000)
    h.check(st.calls["set"] >= 1 and st.calls["get"] >= comm.size - 1,
            f"the callbacks were used: {st.calls}")
    works(c, comm, "init_store")
    comm.barrier()
    if comm.rank == 0:
        shutil.rmtree(d, ignore_errors=True)


def test_store_timeout(comm):
    """A store that never has the key: creation times out with
    XC_ERR_TIMEOUT instead of hanging (rank 1 of 2 waits for rank 0)."""
    d = job_dir(comm, "empty")
    t0 = time.monotonic()
    e = h.raises(xcoll.Timeout, lambda: xcoll.init_store(
        1, 2, DirStore(d), timeout_ms=300), "nobody else joins")
    h.check(time.monotonic() - t0 < 10, "prompt")
    h.check("rank 0" in e.message, f"message: {e.message!r}")


def run_import(env):
    code = "import xcoll; print(xcoll.library_path, xcoll.__version__)"
    return subprocess.run([sys.executable, "-c", code], env=env,
                          capture_output=True, text=True, timeout=60)


def test_library_location(comm):
    if comm.rank != 0:
        return
    env = dict(os.environ, PYTHONPATH=os.path.dirname(
        os.path.dirname(xcoll.__file__)))
    p = run_import(dict(env, XCOLL_LIBRARY="/nonexistent/libxcoll.so"))
    h.check(p.returncode != 0 and "ImportError" in p.stderr and
            "XCOLL_LIBRARY" in p.stderr,
            f"a wrong XCOLL_LIBRARY is an ImportError naming it: {p.stderr}")
    real = os.path.realpath(xcoll.library_path)
    p = run_import(dict(env, XCOLL_LIBRARY=real))
    h.check(p.returncode == 0 and p.stdout.split()[0] == real,
            f"XCOLL_LIBRARY is used: {p.stdout} {p.stderr}")
    p = run_import(dict(env, XCOLL_LIBRARY=os.path.dirname(real)))
    h.check(p.returncode == 0, f"XCOLL_LIBRARY may be a directory: {p.stderr}")


if __name__ == "__main__":
    h.main([test_env, test_tcp_store_on_rank0, test_file_store,
            test_python_store, test_store_timeout, test_library_location],
           xcoll.init_env())
