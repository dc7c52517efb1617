"""Result types and argument checks shared by the one-process path (store.py) and the multi-rank
one (_dsave.py, _dread.py). Below all three, so that neither imports the other's private helpers
(no circle among the package's modules: tests/install/t-modgraph.sh)."""

import dataclasses

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
