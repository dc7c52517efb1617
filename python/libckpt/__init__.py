"""libckpt: incremental, content-addressed, crash-safe, asynchronous checkpoints of PyTorch and
NumPy state, over libckpt.so (ctypes; nothing to compile).

    import libckpt
    with libckpt.Store("/nvme/ckpt") as store:
        h = store.save_async({"model": model.state_dict(), "optim": opt.state_dict(),
                              "step": step}, step)
        h.wait_snapshot()          # from here the tensors may change
        ...
        stats = h.wait()           # durable and visible
        state = store.load()       # nested dict of new CPU tensors, scalars with their types

See python/README.md.
"""

from ._lib import library_path, STEP_LATEST
from .errors import (BusyError, CanceledError, ChecksumError, CkptError, CkptIOError,
                     CkptMemoryError, CorruptError, ExistsError, InvalidArgumentError,
                     LibraryNotFoundError, MismatchError, NoSpaceError, NotFoundError,
                     PermissionDeniedError, StateError, UnsupportedError, VersionError)
from .store import SaveHandle, SaveStats, Store, TensorSlice
from ._restore import PartialRestoreWarning, RestoreResult
from .manager import CheckpointManager

__version__ = "0.1.0"


def library_version():
    """The version of the loaded libckpt.so ("MAJOR.MINOR.PATCH")."""
    from . import _lib
    return _lib.load().ckpt_version().decode()


__all__ = ["Store", "SaveHandle", "SaveStats", "CheckpointManager", "RestoreResult", "TensorSlice",
           "PartialRestoreWarning", "library_path", "library_version", "STEP_LATEST",
           "CkptError", "CkptIOError", "CkptMemoryError", "InvalidArgumentError", "MismatchError",
           "CorruptError", "ChecksumError", "VersionError", "UnsupportedError", "BusyError",
           "NoSpaceError", "NotFoundError", "ExistsError", "StateError", "PermissionDeniedError",
           "CanceledError", "LibraryNotFoundError"]
