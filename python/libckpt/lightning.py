"""libckpt as Lightning's CheckpointIO: Trainer(plugins=[LibckptCheckpointIO()]) saves every
checkpoint Lightning writes (ModelCheckpoint's, trainer.save_checkpoint's) into a libckpt store,
incremental and crash-safe, and resumes from it (trainer.fit(ckpt_path=...)); it works under
Lightning's AsyncCheckpointIO (which clones the tensors, then saves on its thread).

Lightning keeps working with file paths (ModelCheckpoint's top-k, "last", removal): at each path
this plugin writes a small pointer file (JSON: the step, and the store relative to the pointer's
directory), after the checkpoint it names is durable, atomically (temporary file, fsync, rename,
directory fsync).  A pointer is read in the plugin's store (its store argument, or libckpt.store
beside the file), so a run directory copied with its store reads the copy; an older pointer
naming another store by an absolute path is read in the plugin's store too, with a warning.  The
checkpoints themselves are the store's steps 0, 1, 2, ... in save order, each with the metadata
entries "lightning.file" (the file name; also "lightning.path", as older versions wrote it),
"lightning.global_step" and "lightning.epoch" (Lightning's counters, when the checkpoint has
them), which `ckptctl list` shows.  remove_checkpoint removes the pointer, then the step.

    from libckpt.lightning import LibckptCheckpointIO
    trainer = L.Trainer(plugins=[LibckptCheckpointIO()])            # store: <dirpath>/libckpt.store
    trainer = L.Trainer(plugins=[AsyncCheckpointIO(LibckptCheckpointIO("/nvme/ckpt"))])
"""

import json
import os
import threading
import warnings

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

POINTER_FORMAT = "libckpt-lightning-pointer/2"  # "store": relative to the pointer's directory
_OLD_FORMATS = ("libckpt-lightning-pointer/1",)    # "store": an absolute path
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


def _metadata(checkpoint, path):
    """The step's metadata: Lightning's file name and counters, for `ckptctl list` to show."""
    name = os.path.basename(path)
    meta = {"lightning.file": name, "lightning.path": name}
    for key in ("global_step", "epoch"):
        v = checkpoint.get(key) if isinstance(checkpoint, dict) else None
        if isinstance(v, int) and not isinstance(v, bool):
            meta[f"lightning.{key}"] = str(v)
    return meta


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
            st.save(checkpoint, step, metadata=_metadata(checkpoint, path), group=_dist.LOCAL)
            rel = os.path.relpath(store, os.path.dirname(os.path.abspath(path)))
            _write_atomic(path, json.dumps({"format": POINTER_FORMAT, "store": rel,
                                            "step": step}).encode() + b"\n")
            if old is not None and old[1] in st.steps():
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
            ok = isinstance(p, dict) and p.get("format") in (POINTER_FORMAT,) + _OLD_FORMATS
        except ValueError:
            ok = False
        if not ok or not isinstance(p.get("step"), int) or not isinstance(p.get("store"), str):
            raise CorruptError(f"{path} is not a libckpt pointer file (written by "
                               f"LibckptCheckpointIO); a torch.save checkpoint loads with "
                               f"Lightning's default TorchCheckpointIO")
        # The plugin's store, not the one the pointer names: a run directory copied with its
        # store must read the copy. Pointers store it relative (only a check); older ones by an
        # absolute path, which is said when it is not this store.
        store = self._store_for(path)
        named = p["store"]
        if os.path.isabs(named) and os.path.normpath(named) != os.path.normpath(store):
            warnings.warn(f"libckpt: {path} names store {named} (an absolute path, as libckpt's "
                          f"older pointers do); reading step {p['step']} in this plugin's store "
                          f"{store}", UserWarning, stacklevel=3)
        return store, p["step"]

    def load_checkpoint(self, path, map_location=None, weights_only=None):
        """The checkpoint dict the pointer at path names (every chunk verified as it is read).
        A step the store no longer holds (pruned) raises NotFoundError naming the file and it."""
        store, step = self._pointer(path)
        with Store(store, read_only=True, **self._opts) as st:
            steps = st.steps()
            if step not in steps:
                have = f"its steps are {steps[:8]}{' ...' if len(steps) > 8 else ''}" if steps \
                    else "it holds no checkpoint"
                raise NotFoundError(f"{path} points to step {step} of store {store}, which the "
                                    f"store no longer holds (pruned or deleted; {have})")
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
