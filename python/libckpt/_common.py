"""Result types and argument checks shared by the one-process path (store.py) and the multi-rank
one (_dsave.py, _dread.py). Below all three, so that neither imports the other's private helpers
(no circle among the package's modules: tests/install/t-modgraph.sh)."""

import dataclasses
import time

from . import _lib as L


@dataclasses.dataclass
class SaveStats:
    """Statistics of one save (libckpt's ckpt_stats)."""
    step: int
    tensors: int
    logical_bytes: int
    chunks: int
    chunks_new: int
    chunks_reused: int
    bytes_hashed: int
    bytes_stored: int
    bytes_written: int
    bytes_read: int
    seconds: float
    snapshot_seconds: float
    persist_seconds: float
    wait_seconds: float
    pool_bytes: int
    pool_peak: int
    threads: int
    data_dirs: int
    direct_io: bool
    engine: str
    gpu: str

    def as_dict(self):
        return dataclasses.asdict(self)


def _stats(st):
    return SaveStats(**L.stats_dict(st))


def _step_arg(step, allow_latest=True):
    if step is None or step == "latest":
        if not allow_latest:
            raise ValueError("a save needs an explicit step")
        return L.STEP_LATEST
    if isinstance(step, bool) or not isinstance(step, int):
        try:
            import operator
            step = operator.index(step)  # numpy ints, 0-d integer tensors
        except TypeError:
            raise TypeError(f"step must be an int or 'latest', got {step!r}") from None
    if step < 0 or step >= L.STEP_LATEST:
        raise ValueError(f"step {step} is out of range (0 to 2**64-2)")
    return step


class _SnapshotWait:
    """wait_snapshot() shared by SaveHandle (store.py) and DistSaveHandle (_dsave.py): the
    subclass has _lock, _ptr (None once waited for), _snapshot_done, _error, _keep, _t0 and
    snapshot_time, and its _c_wait_snapshot(ptr) calls the library."""

    def wait_snapshot(self):
        """Blocks until the snapshot is done (the tensors may then change). Raises the save's error."""
        with self._lock:
            if self._snapshot_done or self._ptr is None:
                if self._error is not None:
                    raise self._error
                return
            rc = self._c_wait_snapshot(self._ptr)
            if rc < 0:
                self._error = L.make_error(rc)
                raise self._error
            self._snapshot_done = True
            self.snapshot_time = time.perf_counter() - self._t0
            self._keep = None


def order_after_current(reader_ptr, devices):
    """CUDA restore targets on devices (indexes): the reader's copies (ckpt_reader_after_stream)
    follow torch's current stream of each, one stream ordering them and the others joining it
    by event as a save does, so that pending work on the targets runs first without blocking
    this thread. A libckpt without ckpt_reader_after_stream: those streams are synchronized."""
    if not devices:
        return
    import torch
    streams = [torch.cuda.current_stream(d) for d in sorted(devices)]
    if not L.has("ckpt_reader_after_stream"):
        for st in streams:
            st.synchronize()
        return
    primary = streams[0]
    for st in streams[1:]:
        ev = torch.cuda.Event()
        ev.record(st)
        primary.wait_event(ev)
    L.check(L.load().ckpt_reader_after_stream(reader_ptr, primary.cuda_stream),
            "ordering the restore after the current CUDA stream")
