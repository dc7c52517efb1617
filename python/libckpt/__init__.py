"""libckpt: incremental, content-addressed, crash-safe, asynchronous checkpoints of PyTorch and
NumPy state, over libckpt.so (ctypes; nothing to compile).

    import libckpt
    state = {"model": model, "optim": opt, "sched": sched}   # objects with state_dict()
    with libckpt.CheckpointManager("/nvme/ckpt", save_interval_steps=100, max_to_keep=3) as mgr:
        if mgr.latest_step() is not None:
            mgr.restore(state)     # load_state_dict() on each, a fresh optimizer included
        for step in range(...):
            ...
            mgr.save(step, state)  # when due; returns once the tensors are copied

    libckpt.Store(path, create=True) is the lower level: save / save_async / load / restore /
    get_slice / list / verify / prune.  See python/README.md.
"""

from ._lib import library_path, STEP_LATEST
from .errors import (BusyError, CanceledError, ChecksumError, CkptError, CkptIOError,
                     CkptMemoryError, CorruptError, ExistsError, InvalidArgumentError,
                     LibraryNotFoundError, MismatchError, NoSpaceError, NotFoundError,
                     PermissionDeniedError, StateError, UnsupportedError, VersionError)
from .store import SaveHandle, SaveStats, Store, TensorSlice
from ._restore import DamagedCheckpointWarning, PartialRestoreWarning, RestoreResult
from .manager import CheckpointManager
from .dist import LOCAL, DistGroup, FlatShard, Shard, dist_group, dtensor_module
from ._dsave import DistSaveHandle

__version__ = "0.1.0"


def library_version():
    """The version of the loaded libckpt.so ("MAJOR.MINOR.PATCH")."""
    from . import _lib
    return _lib.load().ckpt_version().decode()


__all__ = ["Store", "SaveHandle", "SaveStats", "CheckpointManager", "RestoreResult", "TensorSlice",
           "PartialRestoreWarning", "DamagedCheckpointWarning", "library_path", "library_version", "STEP_LATEST",
           "CkptError", "CkptIOError", "CkptMemoryError", "InvalidArgumentError", "MismatchError",
           "CorruptError", "ChecksumError", "VersionError", "UnsupportedError", "BusyError",
           "NoSpaceError", "NotFoundError", "ExistsError", "StateError", "PermissionDeniedError",
           "CanceledError", "LibraryNotFoundError", "Shard", "FlatShard", "LOCAL", "DistGroup", "dist_group",
           "DistSaveHandle", "dtensor_module"]
