"""CheckpointManager: save every N steps, keep the last K, one save in flight at a time."""

import threading

from .dist import LOCAL
from .errors import CkptError
from .store import Store


class CheckpointManager:
    """Saves a training state at a fixed interval of steps and keeps a bounded number of them.

    CheckpointManager(path, save_interval_steps=1, max_to_keep=None, keep_period=None,
                      async_save=True, **store_options)

    - save(step, state, force=False) saves when `step` is a multiple of save_interval_steps (or
      force) and returns whether it did.  It returns once the state was copied out (the caller's
      tensors may change); with async_save the hashing and writing go on in the background.  A
      new save first waits for the previous one to be durable, then applies the retention.
    - Retention (after each save is durable): the newest max_to_keep checkpoints are kept, plus
      every step that is a multiple of keep_period; the others are pruned.  None keeps all.
    - The error of a background save is raised by the next call (save, restore, latest_step,
      all_steps, wait_until_finished, close): it is never lost.
    - last_durable: the SaveStats of the newest save known to be durable (None before).
    - The store is created when missing (this is the save side); store_options go to Store.
    - One writer per store: a manager's saves and prunes hold the store's writer lock, so a
      second manager (or ckptctl import/prune/gc) on the same store is refused with BusyError
      naming the first ("process N on host H (save since T) is writing to it") while the first
      saves.  lock_wait=SECONDS (a Store option) makes it wait up to that long for the lock
      instead; two managers taking turns each wait for the other's save and prune.
    `state` may hold modules, optimizers and schedulers themselves (Store.save, Store.restore).
    """

    def __init__(self, path, save_interval_steps=1, max_to_keep=None, keep_period=None,
                 async_save=True, **store_options):
        if int(save_interval_steps) < 1:
            raise ValueError(f"save_interval_steps must be >= 1, got {save_interval_steps!r}")
        if max_to_keep is not None and int(max_to_keep) < 1:
            raise ValueError(f"max_to_keep must be >= 1 or None, got {max_to_keep!r}")
        if keep_period is not None and int(keep_period) < 1:
            raise ValueError(f"keep_period must be >= 1 or None, got {keep_period!r}")
        store_options.setdefault("create", True)
        self.store = Store(path, **store_options)
        self.save_interval_steps = int(save_interval_steps)
        self.max_to_keep = None if max_to_keep is None else int(max_to_keep)
        self.keep_period = None if keep_period is None else int(keep_period)
        self.async_save = bool(async_save)
        self._pending = None    # the SaveHandle in flight
        self.last_durable = None  # SaveStats of the newest save known durable
        self._error = None      # a background save's error not raised yet
        self._lock = threading.RLock()

    # ------------------------------------------------------------------ state of the saves
    def _reap(self, block):
        """Finishes the save in flight (waiting when block), then applies the retention. Any
        error is kept and raised by _raise()."""
        h = self._pending
        if h is None or (not block and not h.done()):
            return
        self._pending = None
        try:
            self.last_durable = h.wait()
        except CkptError as e:
            self._error = self._error or e
            return
        self._retain()

    def _raise(self):
        if self._error is not None:
            e, self._error = self._error, None
            raise e

    def _retain(self):
        # prune takes the writer lock: called only when no save of this manager is in flight
        if self.max_to_keep is None:
            return
        try:
            self.store.prune(keep_last=self.max_to_keep, keep_every=self.keep_period or 0)
        except CkptError as e:
            self._error = self._error or e

    # ------------------------------------------------------------------ API
    def should_save(self, step):
        return int(step) % self.save_interval_steps == 0

    def save(self, step, state, force=False, metadata=None):
        """Saves `state` as checkpoint `step` if the step is due (or force); returns True when a
        save was started.  Raises the error of the previous save, if it failed."""
        with self._lock:
            self._reap(block=False)
            self._raise()
            if not force and not self.should_save(step):
                return False
            self._reap(block=True)  # one save in flight: the previous must be durable
            self._raise()
            # single-process checkpoints, even under torch.distributed: its retention (prune)
            # is not collective (multi-rank: Store.save(..., group=G), python/README.md)
            h = self.store.save_async(state, step, metadata=metadata, group=LOCAL)
            self._pending = h
            if self.async_save:
                try:
                    h.wait_snapshot()  # the caller's tensors may change when save() returns
                except CkptError:
                    pass  # the same error is raised by h.wait() in _reap
            self._reap(block=not self.async_save)
            self._raise()
            return True

    def wait_until_finished(self):
        """Waits for the save in flight to be durable (and the retention applied); raises its error."""
        with self._lock:
            self._reap(block=True)
            self._raise()

    def latest_step(self):
        """The newest durable checkpoint's step, or None."""
        with self._lock:
            self._reap(block=False)
            self._raise()
            return self.store.latest_step()

    def all_steps(self):
        """The steps of the durable checkpoints, ascending."""
        with self._lock:
            self._reap(block=False)
            self._raise()
            return self.store.steps()

    def restore(self, state, step=None, strict=True):
        """Restores `state` from checkpoint `step` (None: the latest) as Store.restore does;
        returns the step.  A save in flight is waited for first, so the latest is the newest."""
        with self._lock:
            self._reap(block=True)
            self._raise()
            return self.store.restore(state, "latest" if step is None else step, strict=strict,
                                      group=LOCAL)

    def close(self):
        """Waits for the save in flight, applies the retention, closes the store; raises the
        first error not raised yet."""
        with self._lock:
            try:
                self._reap(block=True)
            finally:
                self.store.close()
            self._raise()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            self.close()
        except CkptError:
            if exc_type is None:
                raise

    def __repr__(self):
        return (f"<libckpt.CheckpointManager {self.store.path!r} every {self.save_interval_steps}"
                f" keep {self.max_to_keep}>")
