"""libckpt as Lightning's CheckpointIO: Trainer(plugins=[LibckptCheckpointIO()]) saves every
checkpoint Lightning writes (ModelCheckpoint's, trainer.save_checkpoint's) into a libckpt store,
incremental and crash-safe, and resumes from it (trainer.fit(ckpt_path=...)); it works under
Lightning's AsyncCheckpointIO (which clones the tensors, then saves on its thread).

Lightning keeps working with file paths (ModelCheckpoint's top-k, "last", removal): at each path
this plugin writes a small pointer file (JSON: the store and the step), after the checkpoint it
names is durable, atomically (temporary file, fsync, rename, directory fsync).  The checkpoints
themselves are the store's steps 0, 1, 2, ... in save order, each with the metadata entry
"lightning.path" (the file name).  remove_checkpoint removes the pointer, then the step.

    from libckpt.lightning import LibckptCheckpointIO
    trainer = L.Trainer(plugins=[LibckptCheckpointIO()])            # store: <dirpath>/libckpt.store
    trainer = L.Trainer(plugins=[AsyncCheckpointIO(LibckptCheckpointIO("/nvme/ckpt"))])
"""

import json
import os
import threading

try:
    from lightning.fabric.plugins.io.checkpoint_io import CheckpointIO
except ImportError:
    try:
        from lightning_fabric.plugins.io.checkpoint_io import CheckpointIO
    except ImportError as _e:
        raise ImportError(f"libckpt.lightning needs Lightning 2.x (lightning or lightning_fabric): "
                          f"{_e}") from None

from . import dist as _dist
from .errors import CorruptError, NotFoundError
from .store import Store

__all__ = ["LibckptCheckpointIO", "POINTER_FORMAT"]

POINTER_FORMAT = "libckpt-lightning-pointer/1"
_DEFAULT_STORE = "libckpt.store"  # beside the checkpoint files when no store is given


def _write_atomic(path, data):
    d = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(d, f".{os.path.basename(path)}.tmp{os.getpid()}.{threading.get_ident()}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LibckptCheckpointIO(CheckpointIO):
    """LibckptCheckpointIO(store=None, lock_wait=60, **store_options).

    store: the libckpt store (created if missing); None: `libckpt.store` in the directory of
    each checkpoint path.  lock_wait: seconds a save or removal waits for the store's writer lock
    (another save of this plugin in flight).  store_options go to libckpt.Store."""

    def __init__(self, store=None, lock_wait=60.0, **store_options):
        super().__init__()
        self._store = None if store is None else os.path.abspath(os.fspath(store))
        self._lock_wait = lock_wait
        self._opts = store_options
        self._mu = threading.Lock()  # one save at a time per plugin: steps are taken in order

    def _store_for(self, path):
        return self._store or os.path.join(os.path.dirname(os.path.abspath(path)), _DEFAULT_STORE)

    def save_checkpoint(self, checkpoint, path, storage_options=None):
        """Saves Lightning's checkpoint dict as the store's next step; then the pointer at path."""
        if storage_options is not None:
            raise TypeError("LibckptCheckpointIO.save_checkpoint takes no storage_options (got "
                            f"{storage_options!r})")
        path = os.fspath(path)
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        store = self._store_for(path)
        try:
            old = self._pointer(path)  # a path saved again (last.ckpt): its old step goes after
        except (NotFoundError, CorruptError):
            old = None
        with self._mu, Store(store, create=True, lock_wait=self._lock_wait, **self._opts) as st:
            latest = st.latest_step()
            step = 0 if latest is None else latest + 1
            # this process alone, also under DDP: Lightning calls it on global rank 0 only
            st.save(checkpoint, step, metadata={"lightning.path": os.path.basename(path)},
                    group=_dist.LOCAL)
            _write_atomic(path, json.dumps({"format": POINTER_FORMAT, "store": store,
                                            "step": step}).encode() + b"\n")
            if old is not None and old[0] == store and old[1] in st.steps():
                st.delete(old[1], newest=True)

    def _pointer(self, path):
        path = os.fspath(path)
        try:
            with open(path, "rb") as f:
                head = f.read(4096)
        except FileNotFoundError:
            raise NotFoundError(f"checkpoint {path} does not exist") from None
        try:
            p = json.loads(head)
            ok = isinstance(p, dict) and p.get("format") == POINTER_FORMAT
        except ValueError:
            ok = False
        if not ok or not isinstance(p.get("step"), int) or not isinstance(p.get("store"), str):
            raise CorruptError(f"{path} is not a libckpt pointer file (written by "
                               f"LibckptCheckpointIO); a torch.save checkpoint loads with "
                               f"Lightning's default TorchCheckpointIO")
        return p["store"], p["step"]

    def load_checkpoint(self, path, map_location=None, weights_only=None):
        """The checkpoint dict the pointer at path names (every chunk verified as it is read)."""
        store, step = self._pointer(path)
        with Store(store, read_only=True, **self._opts) as st:
            return st.load(step, map_location=map_location)

    def remove_checkpoint(self, path):
        """Removes the pointer at path, then its step (and the chunks only it used)."""
        try:
            store, step = self._pointer(path)
        except NotFoundError:
            return
        os.unlink(path)
        with self._mu, Store(store, lock_wait=self._lock_wait, **self._opts) as st:
            if step in st.steps():
                st.delete(step, newest=True)
