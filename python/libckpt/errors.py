"""Exceptions raised by the libckpt binding.

Every failure reported by libckpt becomes a :class:`CkptError` (or a subclass chosen by the
CKPT_E_* code) whose message is libckpt's own detailed message (``ckpt_errmsg()``), which names
the file, tensor or step concerned.  ``err.code`` is the positive CKPT_E_* code and ``err.name``
its short name (``ckpt_strerror()``).
"""

CKPT_E_IO = 1
CKPT_E_NOMEM = 2
CKPT_E_INVAL = 3
CKPT_E_CORRUPT = 4
CKPT_E_CHECKSUM = 5
CKPT_E_VERSION = 6
CKPT_E_UNSUPPORTED = 7
CKPT_E_BUSY = 8
CKPT_E_NOSPC = 9
CKPT_E_NOTFOUND = 10
CKPT_E_EXISTS = 11
CKPT_E_STATE = 12
CKPT_E_PERM = 13
CKPT_E_CANCELED = 14


class CkptError(Exception):
    """Base class of every libckpt error.  Attributes: ``code`` (CKPT_E_*), ``name``, ``message``."""

    code = 0

    def __init__(self, message, code=None, name=None):
        super().__init__(message)
        if code is not None:
            self.code = code
        self.name = name or type(self).__name__
        self.message = message


class CkptIOError(CkptError):
    """A read, write, fsync or rename failed (CKPT_E_IO)."""
    code = CKPT_E_IO


class CkptMemoryError(CkptError, MemoryError):
    """Out of memory (CKPT_E_NOMEM)."""
    code = CKPT_E_NOMEM


class InvalidArgumentError(CkptError, ValueError):
    """Invalid argument (CKPT_E_INVAL)."""
    code = CKPT_E_INVAL


class MismatchError(InvalidArgumentError):
    """The binding's check: a target tensor's shape, dtype or container does not match the checkpoint."""


class CorruptError(CkptError):
    """An on-disk structure is malformed (CKPT_E_CORRUPT)."""
    code = CKPT_E_CORRUPT


class ChecksumError(CorruptError):
    """A checksum or chunk digest does not match its data (CKPT_E_CHECKSUM)."""
    code = CKPT_E_CHECKSUM


class VersionError(CkptError):
    """The on-disk format version (or the library's version) is not supported (CKPT_E_VERSION)."""
    code = CKPT_E_VERSION


class UnsupportedError(CkptError):
    """The operation or memory type is not supported here (CKPT_E_UNSUPPORTED)."""
    code = CKPT_E_UNSUPPORTED


class BusyError(CkptError):
    """Another writer holds the store's lock (CKPT_E_BUSY)."""
    code = CKPT_E_BUSY


class NoSpaceError(CkptError):
    """No space left on the device (CKPT_E_NOSPC)."""
    code = CKPT_E_NOSPC


class NotFoundError(CkptError, LookupError):
    """No such store, checkpoint, tensor or key (CKPT_E_NOTFOUND)."""
    code = CKPT_E_NOTFOUND


class ExistsError(CkptError):
    """A checkpoint for that step already exists (CKPT_E_EXISTS)."""
    code = CKPT_E_EXISTS


class StateError(CkptError):
    """The call is not valid in the object's current state (CKPT_E_STATE)."""
    code = CKPT_E_STATE


class PermissionDeniedError(CkptError):
    """Permission denied, or a write to a read-only store (CKPT_E_PERM)."""
    code = CKPT_E_PERM


class CanceledError(CkptError):
    """The operation was aborted (CKPT_E_CANCELED)."""
    code = CKPT_E_CANCELED


class LibraryNotFoundError(ImportError):
    """libckpt.so could not be found or loaded; the message lists where it was looked for."""


_BY_CODE = {c.code: c for c in (
    CkptIOError, CkptMemoryError, InvalidArgumentError, CorruptError, ChecksumError, VersionError,
    UnsupportedError, BusyError, NoSpaceError, NotFoundError, ExistsError, StateError,
    PermissionDeniedError, CanceledError)}


def error_class(code):
    """Returns the exception class for a CKPT_E_* code (positive or negative)."""
    return _BY_CODE.get(abs(int(code)), CkptError)
