"""Result types and argument checks shared by the one-process path (store.py) and the multi-rank
one (_dsave.py, _dread.py). Below all three, so that neither imports the other's private helpers
(no circle among the package's modules: tests/install/t-modgraph.sh)."""

import ctypes
import dataclasses
import time

from . import _lib as L
from . import _tree as T
from .errors import NotFoundError


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
    this thread."""
    if not devices:
        return
    import torch
    streams = [torch.cuda.current_stream(d) for d in sorted(devices)]
    primary = streams[0]
    for st in streams[1:]:
        ev = torch.cuda.Event()
        ev.record(st)
        primary.wait_event(ev)
    L.check(L.load().ckpt_reader_after_stream(reader_ptr, primary.cuda_stream),
            "ordering the restore after the current CUDA stream")


def region(offset=0, count=0, offsets=None, lengths=None, strides=None, comm=None, root=0):
    """A ckpt_region (what ckpt_reader_read reads of a tensor): elements [offset, offset +
    count), or the box at offsets of lengths (strides: of the destination, in elements), or with
    comm (a ckpt_comm) the whole tensor read by rank root of it and broadcast to the others."""
    g = L.Region(offset=offset, count=count, root=root)
    if offsets is not None:
        g.offsets, g.lengths = L.u64s(offsets), L.u64s(lengths)
    if strides is not None:
        g.strides = L.u64s(strides)
    if comm is not None:
        g.comm = ctypes.pointer(comm)
    return g


class Reader:
    """An open ckpt_reader of one checkpoint: its global tensors (a multi-rank checkpoint's
    tensors whole, whatever split saved them; a one-process checkpoint's as saved), or with
    as_saved its tensors as saved (a multi-rank checkpoint's every piece, as `ckptctl show`
    lists them).  step may be L.STEP_LATEST: self.step is the step the open resolved it to."""

    def __init__(self, store, step, as_saved=False):
        out = ctypes.c_void_p()
        with store._lock:
            L.check(L.load().ckpt_reader_open(store._handle(), step,
                                              L.READ_AS_SAVED if as_saved else 0,
                                              ctypes.byref(out)))
        self.ptr = out.value
        self._names = None
        inf = L.Info()
        rc = L.load().ckpt_reader_info(self.ptr, ctypes.byref(inf))
        if rc < 0:
            self.close()
            L.check(rc, "reader info")
        self._info = L.info_dict(inf)
        self.step = inf.step

    def close(self):
        if self.ptr is not None:
            L.load().ckpt_reader_close(self.ptr)
            self.ptr = None

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()

    def info(self):
        return dict(self._info)

    def world(self):
        """The number of ranks that saved it (1: one process)."""
        return L.load().ckpt_reader_world_size(self.ptr)

    def count(self):
        return L.load().ckpt_reader_tensor_count(self.ptr)

    def tensor(self, i):
        ti = L.TensorInfo()
        L.check(L.load().ckpt_reader_tensor(self.ptr, i, ctypes.byref(ti)))
        return L.tensor_dict(ti)

    def names(self):
        """{name: index} of every tensor (one pass, instead of ckpt_reader_find's linear search
        per name)."""
        if self._names is None:
            self._names = {self.tensor(i)["name"]: i for i in range(self.count())}
        return self._names

    def find(self, name):
        idx = self.names().get(name)
        if idx is None:
            raise NotFoundError(f"no tensor {name!r} in checkpoint {self.step}",
                                code=NotFoundError.code, name="not found")
        return idx

    def get_meta(self, key):
        """The value (str) of metadata key, or None."""
        v = L.load().ckpt_reader_get_meta(self.ptr, key.encode())
        return None if v is None else v.decode()

    def meta(self):
        lib = L.load()
        out = {}
        for i in range(lib.ckpt_reader_meta_count(self.ptr)):
            k, v = ctypes.c_char_p(), ctypes.c_char_p()
            L.check(lib.ckpt_reader_meta(self.ptr, i, ctypes.byref(k), ctypes.byref(v)))
            out[k.value.decode()] = v.value.decode()
        return out

    def tree(self):
        v = self.get_meta(T.META_KEY)
        return T.loads(v) if v is not None else None

    def old_names(self):
        """True for a checkpoint an older binding saved (a description, no libckpt.names): its
        names escape the dots of keys ("model.fc1%2Eweight")."""
        return self.get_meta(T.META_KEY) is not None and self.get_meta(T.NAMES_KEY) is None

    def multi_rank(self):
        """True for a checkpoint saved by several ranks (format version 2), or with a
        communicator of one rank (a DCP save without torch.distributed)."""
        return self.get_meta("ckpt.dist.world") is not None

    def read(self, index, dst, size, region=None, mem=L.MEM_HOST):
        """ckpt_reader_read: region (a ckpt_region; None: the whole tensor) of tensor index into
        dst (an address in memory mem) of size bytes; raises the library's error."""
        L.check(L.load().ckpt_reader_read(self.ptr, index, None if region is None
                                          else ctypes.byref(region), mem, dst, size))

    def bytes_read(self):
        """Bytes read from pack files through this reader so far (ckpt_reader_stats)."""
        st = L.Stats()
        L.check(L.load().ckpt_reader_stats(self.ptr, ctypes.byref(st)))
        return int(st.bytes_read)
