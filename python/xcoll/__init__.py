"""xcoll -- collective communication for distributed training on CPUs.

A thin ctypes binding over libxcoll (no compiler needed): communicators
from the launcher's environment, every collective blocking and
non-blocking, on numpy arrays or any buffer-protocol object; errors raise
:class:`xcoll.Error` subclasses carrying xcoll's code and message.

    import numpy as np, xcoll
    comm = xcoll.init_env()             # xcoll-run, torchrun, srun, mpirun
    x = np.ones(1024, np.float32)
    comm.allreduce(x, op=xcoll.SUM)     # in place
    req = comm.iallgather(x, out := np.empty(comm.size * 1024, np.float32))
    ...                                 # compute while it runs
    req.wait()
    comm.close()

``import xcoll.torch`` registers the torch.distributed backend "xcoll"
(see docs/python.md); so does ``import xcoll`` when torch is already
imported (torch itself is never imported by ``import xcoll``).
"""
import sys as _sys

from . import _lib
from ._buffer import Buffer, DType, Op, dtype_of, op_of
from ._comm import (Comm, Request, group, init, init_env, init_store,
                    wait_all)
from ._errors import (Aborted, Corrupt, Error, InternalError,
                      InvalidArgument, Mismatch, NoMemory, NotFound, PeerLost,
                      ProtocolError, Revoked, SystemCallError, Timeout,
                      Unsupported)

__version__ = _lib.VERSION_STRING
library_path = _lib.path

SUM, PROD, MIN, MAX, AVG, BAND, BOR, BXOR = (
    Op.SUM, Op.PROD, Op.MIN, Op.MAX, Op.AVG, Op.BAND, Op.BOR, Op.BXOR)
(INT8, UINT8, INT16, UINT16, INT32, UINT32, INT64, UINT64, FLOAT16, BFLOAT16,
 FLOAT32, FLOAT64) = tuple(DType)
COLOR_NONE = -1
ANY_SOURCE = -1     # recv/irecv from whichever rank sends first


if "torch.distributed" in _sys.modules:
    from . import torch as _torch_backend  # noqa: F401 -- registers "xcoll"


def version():
    """(major, minor, patch) of the loaded libxcoll."""
    v = _lib.VERSION
    return (v >> 16, (v >> 8) & 0xFF, v & 0xFF)


__all__ = [
    "Comm", "Request", "Buffer", "DType", "Op", "group", "init", "init_env",
    "init_store", "wait_all", "dtype_of", "op_of", "version", "Error",
    "InvalidArgument", "NoMemory", "SystemCallError", "PeerLost", "Timeout",
    "Aborted", "Mismatch", "ProtocolError", "Unsupported", "InternalError",
    "NotFound", "Corrupt", "Revoked",
    "SUM", "PROD", "MIN", "MAX", "AVG", "BAND", "BOR", "BXOR", "COLOR_NONE",
    "ANY_SOURCE",
    "INT8", "UINT8", "INT16", "UINT16", "INT32", "UINT32", "INT64", "UINT64",
    "FLOAT16", "BFLOAT16", "FLOAT32", "FLOAT64",
]
