"""Buffers: any object exporting the buffer protocol, and xcoll dtypes.

A buffer handed to a collective is *acquired* with PyObject_GetBuffer
(C-contiguous, writable when xcoll writes into it) and stays acquired until
the operation completes, exactly as the C API asks: a bytearray cannot be
resized, a numpy array's memory cannot be freed while xcoll uses it.
Releasing happens when the request completes (or the blocking call
returns).

The element type comes from the buffer's format ('f' -> fp32, 'e' -> fp16,
'Zd' -> complex128 as pairs of fp64, ...) unless the caller names one
(needed for bfloat16, which the buffer protocol cannot describe).
"""
import ctypes
import enum

from . import _errors, _lib


class DType(enum.IntEnum):
    """xc_dtype_t."""
    INT8 = 0
    UINT8 = 1
    INT16 = 2
    UINT16 = 3
    INT32 = 4
    UINT32 = 5
    INT64 = 6
    UINT64 = 7
    FLOAT16 = 8
    BFLOAT16 = 9
    FLOAT32 = 10
    FLOAT64 = 11


class Op(enum.IntEnum):
    """xc_op_t."""
    SUM = 0
    PROD = 1
    MIN = 2
    MAX = 3
    AVG = 4
    BAND = 5
    BOR = 6
    BXOR = 7


_SIZES = {d: _lib.dtype_size(d) for d in DType}

# Names accepted for dtype= (xcoll's own, numpy's, torch's).
_DTYPE_NAMES = {}
for _d in DType:
    _DTYPE_NAMES[_d.name.lower()] = _d
    _DTYPE_NAMES[_lib.dtype_name(_d).decode()] = _d   # "fp32", "bf16", ...
_DTYPE_NAMES.update({"half": DType.FLOAT16, "float": DType.FLOAT32,
                     "double": DType.FLOAT64, "bfloat16": DType.BFLOAT16,
                     "bool": DType.UINT8, "byte": DType.UINT8,
                     "char": DType.INT8, "short": DType.INT16,
                     "int": DType.INT32, "long": DType.INT64})

_OP_NAMES = {o.name.lower(): o for o in Op}
_OP_NAMES.update({"product": Op.PROD, "mean": Op.AVG, "and": Op.BAND,
                  "or": Op.BOR, "xor": Op.BXOR})

# struct-module format characters (native sizes on LP64 Linux).
_FORMATS = {
    "b": DType.INT8, "B": DType.UINT8, "c": DType.UINT8,
    "h": DType.INT16, "H": DType.UINT16, "i": DType.INT32, "I": DType.UINT32,
    "l": DType.INT64, "L": DType.UINT64, "q": DType.INT64, "Q": DType.UINT64,
    "n": DType.INT64, "N": DType.UINT64,
    "e": DType.FLOAT16, "f": DType.FLOAT32, "d": DType.FLOAT64,
    "Zf": DType.FLOAT32, "Zd": DType.FLOAT64,   # complex: pairs of reals
}


def dtype_of(spec):
    """Turn a dtype spec (DType, int, name, numpy dtype or type, torch
    dtype) into a DType."""
    if isinstance(spec, DType):
        return spec
    if isinstance(spec, int) and not isinstance(spec, bool):
        return DType(spec)
    name = getattr(spec, "name", None)   # numpy dtype
    if name is None and isinstance(spec, type):
        name = spec.__name__             # numpy scalar type (np.float32)
    if name is None:
        name = str(spec)                 # "fp32", torch.float32
    key = name.lower().replace("torch.", "").replace("numpy.", "")
    if key in _DTYPE_NAMES:
        return _DTYPE_NAMES[key]
    raise _errors.invalid(f"unknown dtype {spec!r}")


def op_of(spec):
    if isinstance(spec, Op):
        return spec
    if isinstance(spec, int) and not isinstance(spec, bool):
        return Op(spec)
    if isinstance(spec, str) and spec.lower() in _OP_NAMES:
        return _OP_NAMES[spec.lower()]
    raise _errors.invalid(f"unknown reduction op {spec!r}")


def reduction_op(spec, bufs, what):
    """op_of(spec), checked against the buffers it reduces: complex numbers
    have no order and no bits, and their product is not the pairs'."""
    op = op_of(spec)
    if op not in (Op.SUM, Op.AVG) and any(b.complex for b in bufs):
        raise _errors.invalid(f"{what}: {op.name} has no meaning for complex "
                              f"buffers (only SUM and AVG)")
    return op


# --------------------------------------------------------------- Py_buffer
class _PyBuffer(ctypes.Structure):
    _fields_ = [("buf", ctypes.c_void_p), ("obj", ctypes.c_void_p),
                ("len", ctypes.c_ssize_t), ("itemsize", ctypes.c_ssize_t),
                ("readonly", ctypes.c_int), ("ndim", ctypes.c_int),
                ("format", ctypes.c_char_p),
                ("shape", ctypes.c_void_p), ("strides", ctypes.c_void_p),
                ("suboffsets", ctypes.c_void_p),
                ("internal", ctypes.c_void_p)]


_GetBuffer = ctypes.pythonapi.PyObject_GetBuffer
_GetBuffer.argtypes = [ctypes.py_object, ctypes.POINTER(_PyBuffer),
                       ctypes.c_int]
_GetBuffer.restype = ctypes.c_int
_ReleaseBuffer = ctypes.pythonapi.PyBuffer_Release
_ReleaseBuffer.argtypes = [ctypes.POINTER(_PyBuffer)]
_ReleaseBuffer.restype = None

_PyBUF_WRITABLE, _PyBUF_FORMAT, _PyBUF_C_CONTIGUOUS = 0x1, 0x4, 0x38


class Buffer:
    """An acquired buffer: ``ptr``, ``nbytes``, ``dtype``, ``count``.

    Construct with the object, whether xcoll writes into it, and an
    optional dtype override.  ``release()`` is idempotent.
    """

    __slots__ = ("obj", "ptr", "nbytes", "dtype", "count", "complex",
                 "_view")

    def __init__(self, obj, writable, dtype=None, what="buffer"):
        self._view = None
        view = _PyBuffer()
        flags = _PyBUF_C_CONTIGUOUS | _PyBUF_FORMAT | (
            _PyBUF_WRITABLE if writable else 0)
        try:
            _GetBuffer(obj, ctypes.byref(view), flags)
        except (BufferError, TypeError, ValueError) as e:
            if writable and isinstance(e, BufferError):
                msg = f"{what} must be a writable C-contiguous buffer ({e})"
            else:
                msg = f"{what} must support the buffer protocol and be " \
                      f"C-contiguous ({e})"
            raise _errors.invalid(msg) from None
        self.obj = obj
        self._view = view
        self.ptr = view.buf
        self.nbytes = view.len
        # complex by its format ('Zf', 'Zd'): reduced as pairs of reals,
        # which only SUM and AVG get right (dtype= reinterprets on purpose)
        self.complex = False
        try:
            if dtype is None:
                fmt = (view.format or b"B").decode().lstrip("@=<")
                if fmt not in _FORMATS:
                    raise _errors.invalid(
                        f"{what}: no xcoll dtype for buffer format "
                        f"{fmt!r}; pass dtype=")
                self.dtype = _FORMATS[fmt]
                self.complex = fmt.startswith("Z")
            else:
                self.dtype = dtype_of(dtype)
            size = _SIZES[self.dtype]
            if self.nbytes % size:
                raise _errors.invalid(
                    f"{what}: {self.nbytes} bytes is not a whole number of "
                    f"{_lib.dtype_name(self.dtype).decode()} elements")
            self.count = self.nbytes // size
        except BaseException:
            self.release()
            raise

    def release(self):
        if self._view is not None:
            _ReleaseBuffer(ctypes.byref(self._view))
            self._view = None
            self.obj = None

    def __del__(self):
        if self._view is not None:
            self.release()


def elem_size(dtype):
    return _SIZES[dtype]
