"""Loading libxcoll and declaring its C API for ctypes.

The shared library is looked up, first found wins, in:

1. ``$XCOLL_LIBRARY`` -- a path to the ``.so`` file itself (or to a
   directory holding ``libxcoll.so*``);
2. next to this package: ``xcoll/libxcoll.so*`` or ``xcoll/lib/libxcoll.so*``
   (a wheel or an install that copies the library in);
3. the build tree of a source checkout: ``<checkout>/build/libxcoll.so*``
   (this file lives in ``<checkout>/python/xcoll/``);
4. the system's search path (``ldconfig``, ``LD_LIBRARY_PATH``), as
   ``libxcoll.so.0`` after ``cmake --install``.

After loading, the library's version (``xc_version()``) must match the API
this binding was written for (0.1: same major and minor while the major is
0, then same major and a minor at least ours), else ImportError.

Every foreign function is declared with argtypes/restype here and nowhere
else.  Calls go through ``ctypes.CDLL``, which releases the GIL for the
duration of each call, so a blocking collective never stalls other Python
threads.
"""
import ctypes
import ctypes.util
import glob
import os

# The API this binding was written against (include/xcoll.h).
API_MAJOR, API_MINOR = 0, 1

_here = os.path.dirname(os.path.abspath(__file__))


def _candidates():
    env = os.environ.get("XCOLL_LIBRARY")
    if env:
        if os.path.isdir(env):
            yield from sorted(glob.glob(os.path.join(env, "libxcoll.so*")))
        yield env
        return  # an explicit choice is not second-guessed
    for d in (_here, os.path.join(_here, "lib"),
              os.path.join(os.path.dirname(os.path.dirname(_here)), "build")):
        for name in ("libxcoll.so", "libxcoll.so.0"):
            p = os.path.join(d, name)
            if os.path.exists(p):
                yield p
    found = ctypes.util.find_library("xcoll")
    if found:
        yield found
    yield "libxcoll.so.0"


def _load():
    errors = []
    for path in _candidates():
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            errors.append(f"{path}: {e}")
    raise ImportError(
        "xcoll: cannot load libxcoll (set XCOLL_LIBRARY to the path of "
        "libxcoll.so, or build the C library in <checkout>/build, or "
        "install it); tried:\n  " + "\n  ".join(errors))


lib, path = _load()

# --------------------------------------------------------------- types
c_int, c_uint, c_size_t, c_void_p, c_char_p = (
    ctypes.c_int, ctypes.c_uint, ctypes.c_size_t, ctypes.c_void_p,
    ctypes.c_char_p)
P = ctypes.POINTER


class Config(ctypes.Structure):
    """xc_config_t (fields appended only; `size` tells the library)."""
    _fields_ = [("size", c_size_t), ("timeout_ms", c_int),
                ("progress_thread", c_int), ("socket_ifname", c_char_p),
                ("node_id", c_char_p)]


STORE_SET = ctypes.CFUNCTYPE(c_int, c_void_p, c_char_p, c_void_p, c_size_t)
STORE_GET = ctypes.CFUNCTYPE(c_int, c_void_p, c_char_p, c_void_p, c_size_t,
                             P(c_size_t), c_int)
STORE_WAIT = ctypes.CFUNCTYPE(c_int, c_void_p, P(c_char_p), c_size_t, c_int)


class Store(ctypes.Structure):
    """xc_store_t."""
    _fields_ = [("size", c_size_t), ("ctx", c_void_p), ("set", STORE_SET),
                ("get", STORE_GET), ("wait", STORE_WAIT)]


COLL_COUNT, TRANSPORT_COUNT, STATS_MAX_ALGOS = 10, 3, 64


class Stats(ctypes.Structure):
    """xc_stats_t."""
    _fields_ = [("size", c_size_t),
                ("ops", ctypes.c_uint64 * COLL_COUNT),
                ("bytes_sent", ctypes.c_uint64 * TRANSPORT_COUNT),
                ("bytes_recv", ctypes.c_uint64 * TRANSPORT_COUNT),
                ("msgs_sent", ctypes.c_uint64 * TRANSPORT_COUNT),
                ("algo_ops", ctypes.c_uint64 * STATS_MAX_ALGOS),
                ("express_bias_grants", ctypes.c_uint64),
                ("express_bias_revokes", ctypes.c_uint64),
                ("single_copy_bytes", ctypes.c_uint64),
                ("express_ops", ctypes.c_uint64),
                ("express_resumed", ctypes.c_uint64),
                ("express_p2p", ctypes.c_uint64)]


comm_p = c_void_p   # xc_comm_t *
req_p = c_void_p    # xc_request_t *
R = c_int           # xc_result_t

# --------------------------------------------------------------- prototypes
_PROTOS = {
    "xc_version": (c_uint, []),
    "xc_version_string": (c_char_p, []),
    "xc_strerror": (c_char_p, [c_int]),
    "xc_err_name": (c_char_p, [c_int]),
    "xc_last_error": (c_char_p, []),
    "xc_dtype_size": (c_size_t, [c_int]),
    "xc_dtype_name": (c_char_p, [c_int]),
    "xc_op_name": (c_char_p, [c_int]),
    "xc_comm_init_env": (R, [P(comm_p), P(Config)]),
    "xc_comm_init": (R, [P(comm_p), c_int, c_int, c_char_p, P(Config)]),
    "xc_comm_init_store": (R, [P(comm_p), c_int, c_int, P(Store), P(Config)]),
    "xc_comm_split": (R, [comm_p, c_int, c_int, P(comm_p), P(Config)]),
    "xc_comm_shrink": (R, [comm_p, P(comm_p)]),
    "xc_comm_destroy": (R, [comm_p]),
    "xc_comm_abort": (R, [comm_p]),
    "xc_comm_revoke": (R, [comm_p]),
    "xc_comm_rank": (c_int, [comm_p]),
    "xc_comm_size": (c_int, [comm_p]),
    "xc_comm_local_rank": (c_int, [comm_p]),
    "xc_comm_local_size": (c_int, [comm_p]),
    "xc_comm_node": (c_int, [comm_p]),
    "xc_comm_node_count": (c_int, [comm_p]),
    "xc_comm_last_error": (c_char_p, [comm_p]),
    "xc_comm_status": (R, [comm_p]),
    "xc_request_wait": (R, [req_p]),
    "xc_request_test": (R, [req_p, P(c_int)]),
    "xc_request_free": (None, [req_p]),
    "xc_request_waitall": (R, [P(req_p), c_size_t]),
    "xc_request_source": (c_int, [req_p]),
    "xc_allreduce": (R, [c_void_p, c_void_p, c_size_t, c_int, c_int, comm_p]),
    "xc_iallreduce": (R, [c_void_p, c_void_p, c_size_t, c_int, c_int, comm_p,
                          P(req_p)]),
    "xc_reduce_scatter": (R, [c_void_p, c_void_p, c_size_t, c_int, c_int,
                              comm_p]),
    "xc_ireduce_scatter": (R, [c_void_p, c_void_p, c_size_t, c_int, c_int,
                               comm_p, P(req_p)]),
    "xc_allgather": (R, [c_void_p, c_void_p, c_size_t, c_int, comm_p]),
    "xc_iallgather": (R, [c_void_p, c_void_p, c_size_t, c_int, comm_p,
                          P(req_p)]),
    "xc_reduce": (R, [c_void_p, c_void_p, c_size_t, c_int, c_int, c_int,
                      comm_p]),
    "xc_ireduce": (R, [c_void_p, c_void_p, c_size_t, c_int, c_int, c_int,
                       comm_p, P(req_p)]),
    "xc_bcast": (R, [c_void_p, c_size_t, c_int, c_int, comm_p]),
    "xc_ibcast": (R, [c_void_p, c_size_t, c_int, c_int, comm_p, P(req_p)]),
    "xc_alltoall": (R, [c_void_p, c_void_p, c_size_t, c_int, comm_p]),
    "xc_ialltoall": (R, [c_void_p, c_void_p, c_size_t, c_int, comm_p,
                         P(req_p)]),
    "xc_alltoallv": (R, [c_void_p, P(c_size_t), P(c_size_t), c_void_p,
                         P(c_size_t), P(c_size_t), c_int, comm_p]),
    "xc_ialltoallv": (R, [c_void_p, P(c_size_t), P(c_size_t), c_void_p,
                          P(c_size_t), P(c_size_t), c_int, comm_p, P(req_p)]),
    "xc_barrier": (R, [comm_p]),
    "xc_ibarrier": (R, [comm_p, P(req_p)]),
    "xc_send": (R, [c_void_p, c_size_t, c_int, c_int, c_int, comm_p]),
    "xc_recv": (R, [c_void_p, c_size_t, c_int, c_int, c_int, comm_p]),
    "xc_isend": (R, [c_void_p, c_size_t, c_int, c_int, c_int, comm_p,
                     P(req_p)]),
    "xc_irecv": (R, [c_void_p, c_size_t, c_int, c_int, c_int, comm_p,
                     P(req_p)]),
    "xc_group_start": (R, []),
    "xc_group_end": (R, []),
    "xc_comm_stats": (R, [comm_p, P(Stats)]),
    "xc_coll_name": (c_char_p, [c_int]),
    "xc_transport_name": (c_char_p, [c_int]),
    "xc_algo_name": (c_char_p, [c_int]),
}

for _name, (_res, _args) in _PROTOS.items():
    _f = getattr(lib, _name)
    _f.restype = _res
    _f.argtypes = _args
    globals()[_name[3:]] = _f   # xc_allreduce -> _lib.allreduce

# --------------------------------------------------------------- version
VERSION = lib.xc_version()
VERSION_STRING = lib.xc_version_string().decode()
_maj, _min = VERSION >> 16, (VERSION >> 8) & 0xFF
if _maj != API_MAJOR or (_min != API_MINOR if API_MAJOR == 0 else _min < API_MINOR):
    raise ImportError(
        f"xcoll: {path} is libxcoll {VERSION_STRING}, but this binding was "
        f"written for the {API_MAJOR}.{API_MINOR} API; point XCOLL_LIBRARY "
        f"at a matching library")
