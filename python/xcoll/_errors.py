"""xcoll's result codes as Python exceptions.

Every failing call raises a subclass of :class:`Error` chosen by the code;
the exception carries ``code`` (the negative xc_result_t value), ``name``
(``"XC_ERR_TIMEOUT"``) and ``message`` (the library's detail, from
xc_last_error() on the calling thread, or the binding's own check).  Some
also derive from the matching built-in (ValueError, MemoryError,
TimeoutError, NotImplementedError) so generic handlers still catch them.
"""
import builtins

from . import _lib


class Error(RuntimeError):
    """A failing xcoll call.  ``code``, ``name``, ``message`` describe it."""

    code = -10

    def __init__(self, code, message=""):
        self.code = int(code)
        self.name = _lib.err_name(self.code).decode()
        self.message = message or _lib.strerror(self.code).decode()
        super().__init__(f"{self.name}: {self.message}")

    def __reduce__(self):  # picklable (multiprocessing, torch futures)
        return (_make, (self.code, self.message))


class InvalidArgument(Error, ValueError):
    """XC_ERR_INVALID"""


class NoMemory(Error, MemoryError):
    """XC_ERR_NOMEM"""


class SystemCallError(Error):
    """XC_ERR_SYSTEM"""


class PeerLost(Error, ConnectionError):
    """XC_ERR_PEER_LOST: a peer rank died or closed its connection."""


class Timeout(Error, builtins.TimeoutError):
    """XC_ERR_TIMEOUT"""


class Aborted(Error):
    """XC_ERR_ABORTED"""


class Mismatch(Error):
    """XC_ERR_MISMATCH: ranks issued different operations."""


class ProtocolError(Error):
    """XC_ERR_PROTOCOL"""


class Unsupported(Error, NotImplementedError):
    """XC_ERR_UNSUPPORTED"""


class InternalError(Error):
    """XC_ERR_INTERNAL"""


class NotFound(Error, LookupError):
    """XC_ERR_NOT_FOUND (nothing to load: no complete checkpoint)"""


class Corrupt(Error):
    """XC_ERR_CORRUPT (stored data failed verification)"""


class Revoked(Error):
    """XC_ERR_REVOKED: a rank revoked the communicator (shrink or close it)."""


OK, ERR_INVALID, ERR_NOMEM, ERR_SYSTEM, ERR_PEER_LOST, ERR_TIMEOUT, \
    ERR_ABORTED, ERR_MISMATCH, ERR_PROTOCOL, ERR_UNSUPPORTED, ERR_INTERNAL, \
    ERR_NOT_FOUND, ERR_CORRUPT, ERR_REVOKED = \
    0, -1, -2, -3, -4, -5, -6, -7, -8, -9, -10, -11, -12, -13

_BY_CODE = {
    ERR_INVALID: InvalidArgument, ERR_NOMEM: NoMemory,
    ERR_SYSTEM: SystemCallError, ERR_PEER_LOST: PeerLost,
    ERR_TIMEOUT: Timeout, ERR_ABORTED: Aborted, ERR_MISMATCH: Mismatch,
    ERR_PROTOCOL: ProtocolError, ERR_UNSUPPORTED: Unsupported,
    ERR_INTERNAL: InternalError, ERR_NOT_FOUND: NotFound, ERR_CORRUPT: Corrupt,
    ERR_REVOKED: Revoked,
}


def _make(code, message=""):
    return _BY_CODE.get(int(code), Error)(code, message)


def check(rc):
    """Raise the exception for a non-zero result of the call just made on
    this thread (its detail is that thread's xc_last_error())."""
    if rc != 0:
        raise _make(rc, _lib.last_error().decode(errors="replace"))


def invalid(message):
    """The binding's own argument checks fail like the library's do."""
    return InvalidArgument(ERR_INVALID, message)
