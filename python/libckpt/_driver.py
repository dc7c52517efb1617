"""The one driver of libckpt's C lifecycles, below every user of them: SaveDriver drives one save
(ckpt_save_begin, add, metadata, submit, release, fence, wait or abort) for Store's one-process
saves, the multi-rank saves of _dsave.py and the DCP writer; SaveHandle is the handle on one in
flight (Store.save_async's, and DistSaveHandle); ReadDriver drives one reader (ckpt_reader_open,
its tensors and metadata, ckpt_reader_read of a region, read_all, verify, close) for Store's
loads and restores, _dread.py's multi-rank reads and the DCP reader.  CheckpointManager and the
Lightning CheckpointIO reach them through Store.

Failures reach the other ranks one way, by what a failure comes after:
- after begin (a rank that cannot add its tensors, a snapshot that failed, a planner DCP runs
  after the data is written): the rank gives its part up (SaveDriver.give_up: released with the
  error into the collective commit, CKPT_SAVE_DEFER), and every rank's wait() raises the
  library's message naming that rank and carrying its text;
- where every rank must raise at once (before a collective begin, a DCP staging that must not go
  on into DCP's plan): agree() exchanges every rank's outcome(), and each raises its own error or
  raise_first()'s, naming the first failing rank; a save begun meanwhile is then dropped by every
  rank without collectives (abort(local=True))."""

import ctypes
import threading
import time

from . import _lib as L
from . import _tree as T
from ._common import SaveStats
from .errors import CkptError, CkptIOError, NotFoundError, error_class


# ---------------------------------------------------------------------------------- outcomes
def outcome(err):
    """What a rank tells the others of its part: None (it went well) or (code, "Type: text")."""
    return None if err is None else (getattr(err, "code", 0) or 0, f"{type(err).__name__}: {err}")


def raise_first(what, outs):
    """Raises the error of the first rank whose outcome (outs, in rank order) is a failure."""
    bad = [(r, o) for r, o in enumerate(outs) if o is not None]
    if bad:
        r, (code, msg) = bad[0]
        cls = error_class(code) if code else CkptError
        raise cls(f"{what}: rank {r} failed: {msg}", code=code or CkptIOError.code,
                  name=L.load().ckpt_strerror(code or CkptIOError.code).decode())


def agree(dg, err, what, doing=None, value=None):
    """Every rank's (outcome of err, value) over DistGroup dg (None: this process alone), the
    exchange described as what and doing: raises err here, or the first failing rank's error
    (prefixed with what); else returns every rank's value, in rank order."""
    mine = (outcome(err), value)
    outs = [mine] if dg is None else dg.gather_object(mine, f"{what}: {doing}" if doing else what)
    if err is not None:
        raise err
    raise_first(what, [o[0] for o in outs])
    return [o[1] for o in outs]


def cuda_streams(devices):
    """torch's current stream of each CUDA device (indexes), the first ordered after the others'
    work by events: (that stream, {device: stream}), or (None, {}) without devices."""
    devs = sorted({d for d in devices if d >= 0})
    if not devs:
        return None, {}
    import torch
    streams = {d: torch.cuda.current_stream(d) for d in devs}
    primary = streams[devs[0]]
    for d in devs[1:]:
        ev = torch.cuda.Event()
        ev.record(streams[d])
        primary.wait_event(ev)
    return primary, streams


# ---------------------------------------------------------------------------------- saving
class SaveDriver:
    """One C save of checkpoint `step` into `store`, begun when made (collectively when comm, a
    dist._Comm or the DCP writer's one-rank comm, is given: every rank of it begins alike).  A
    save with a communicator is begun CKPT_SAVE_THREADED | CKPT_SAVE_DEFER: its collective commit
    runs on libckpt's thread once released (release(), or give_up() with a failure).  `what`
    prefixes the library's messages.  Its keep list holds what the C save points into (tensors,
    descriptors) until the snapshot is done."""

    def __init__(self, store, step, comm=None, what=None):
        self.store, self.step, self.comm = store, step, comm
        self.keep = []
        self.streams = {}
        self.submitted = self.released = False
        self._opts = None
        if comm is not None:
            self._opts = L.SaveOptions(comm=ctypes.pointer(comm.struct),
                                       flags=L.SAVE_THREADED | L.SAVE_DEFER)
        out = ctypes.c_void_p()
        with store._lock:
            rc = L.load().ckpt_save_begin(store._handle(), step, None if self._opts is None
                                          else ctypes.byref(self._opts), ctypes.byref(out))
        L.check(rc, what)
        self.ptr = out.value

    def add(self, name, dtype, shape, mem, data, global_shape=None, offsets=None, offset=0,
            count=0, replica=0, nreplicas=1, what=None):
        """ckpt_save_add of one tensor (shape), or of a box (global_shape and offsets) or a flat
        range (global_shape, offset and count) of a global tensor held by nreplicas ranks."""
        t = L.Tensor(name=name.encode(), dtype=dtype, ndim=len(shape), shape=L.u64s(shape),
                     mem=mem, data=data, offset=offset, count=count, replica=replica,
                     nreplicas=nreplicas)
        if global_shape is not None:
            t.ndim, t.global_shape = len(global_shape), L.u64s(global_shape)
        if offsets is not None:
            t.offsets = L.u64s(offsets)
        self.keep.append(t)
        with self.store._lock:
            L.check(L.load().ckpt_save_add(self.ptr, ctypes.byref(t)), what)

    def set_meta(self, key, value, what=None):
        with self.store._lock:
            L.check(L.load().ckpt_save_set_meta(self.ptr, key.encode(), value.encode()), what)

    def add_tag(self, tag):
        with self.store._lock:
            L.check(L.load().ckpt_save_add_tag(self.ptr, tag.encode()), f"tag {tag!r}")

    def order_after(self, mems):
        """CUDA tensors (mems: their memories, CUDA device indexes >= 0): the copies follow the
        work queued on torch's current stream of each device (one stream orders them, the
        others join it by event), which fence() later makes wait for the snapshot."""
        primary, self.streams = cuda_streams(mems)
        if primary is not None:
            with self.store._lock:
                L.check(L.load().ckpt_save_after_stream(self.ptr, primary.cuda_stream),
                        "ordering the copies")

    def submit(self):
        """ckpt_save_submit; returns its code (a failed submit of a multi-rank save still goes on
        to the commit: the other ranks learn of it there)."""
        with self.store._lock:
            self.submitted = True
            return L.load().ckpt_save_submit(self.ptr)

    def release(self, rc=0, why=None):
        """Lets a multi-rank save's commit go on: rc 0 with this rank's part as it is, or a
        negative CKPT_E_* code and why to fail the save on every rank.  Once."""
        if self.comm is not None and not self.released:
            self.released = True
            L.load().ckpt_save_release(self.ptr, rc, why.encode(errors="replace")[:220]
                                       if why else None)

    def give_up(self, err):
        """This rank fails the save: a multi-rank part is submitted (when it was not) and released
        with err's code and text, so that every rank's wait() raises it naming this rank; a
        one-process save is aborted.  err: an exception or a text."""
        if self.comm is None:
            self.abort()
            return
        if isinstance(err, str):
            code, text = CkptIOError.code, err
        else:
            code = getattr(err, "code", 0) or CkptIOError.code
            text = str(err) if isinstance(err, CkptError) else f"{type(err).__name__}: {err}"
        if not self.submitted:
            self.submit()
        self.release(-abs(code), text)

    def abort(self, local=False):
        """ckpt_save_abort. local: every rank knows the save failed (an exchange said so), so the
        communicator's calls fail at once instead of exchanging."""
        if self.ptr is None:
            return
        if local and self.comm is not None:
            self.comm.local_fail = True
        with self.store._lock:
            L.load().ckpt_save_abort(self.ptr)
        self.ptr, self.keep = None, []

    def fence(self):
        """Makes torch's current CUDA streams of the save's devices wait for the snapshot without
        blocking this thread; returns the error of a fence that failed, else None."""
        for dv, st in self.streams.items():
            rc = L.load().ckpt_save_fence(self.ptr, st.cuda_stream)
            if rc < 0:
                return L.make_error(rc, f"checkpoint {self.step}: fence on cuda:{dv}")
        return None

    def wait_snapshot(self):
        """ckpt_save_wait_snapshot's code; once done, the tensors are the caller's again."""
        rc = L.load().ckpt_save_wait_snapshot(self.ptr)
        if rc >= 0:
            self.keep = []
        return rc

    def poll(self):
        return self.ptr is None or L.load().ckpt_save_poll(self.ptr) == 1

    def wait(self, what=None):
        """ckpt_save_wait, which frees the save: (stats dict, None) or (None, the error)."""
        st = L.Stats()
        rc = L.load().ckpt_save_wait(self.ptr, ctypes.byref(st))
        self.ptr, self.keep, self.comm, self._opts = None, [], None, None
        if rc < 0:
            return None, L.make_error(rc, what)
        return L.stats_dict(st), None


class SaveHandle:
    """A save in flight (Store.save_async): wait_snapshot() returns once every tensor has been
    copied out of the caller's memory (they may then change); wait() returns the SaveStats once
    the checkpoint is durable and visible, or raises the save's error; done() tells whether it
    finished.  The handle keeps every tensor of the state alive until the snapshot is done."""

    def __init__(self, store, drv, t0):
        self._store, self._drv, self.step, self._t0 = store, drv, drv.step, t0
        self._lock = threading.Lock()
        self._snapshot_done = False
        self._stats = self._error = None
        self.snapshot_time = None  # seconds from save_async's start to the end of wait_snapshot

    @property
    def _ptr(self):
        """The C save while it is not finished, else None."""
        return None if self._drv is None else self._drv.ptr

    def wait_snapshot(self):
        """Blocks until the snapshot is done (the tensors may then change). Raises the save's error."""
        with self._lock:
            if self._snapshot_done or self._ptr is None:
                if self._error is not None:
                    raise self._error
                return
            rc = self._drv.wait_snapshot()
            if rc < 0:
                self._error = L.make_error(rc)
                raise self._error
            self._snapshot_done = True
            self.snapshot_time = time.perf_counter() - self._t0

    def done(self):
        """True once the save finished, successfully or not (then wait() returns at once)."""
        with self._lock:
            return self._ptr is None or self._drv.poll()

    def _finish(self):
        if self._ptr is None:
            return
        stats, err = self._drv.wait()
        if self.snapshot_time is None:
            self.snapshot_time = time.perf_counter() - self._t0
        if err is not None:
            if self._error is None:
                self._error = err
        else:
            self._stats = SaveStats(**stats)

    def join(self):
        """Waits for the save without raising (its wait() does)."""
        with self._lock:
            self._finish()

    def wait(self):
        """Waits until the checkpoint is durable and visible; returns its SaveStats, or raises."""
        with self._lock:
            self._finish()
        store = self._store
        if store is not None:
            store._forget(self)
        if self._error is not None:
            raise self._error
        return self._stats


# ---------------------------------------------------------------------------------- reading
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


class ReadDriver:
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

    def order_after(self, devices):
        """Later reads into CUDA memory of devices (indexes) follow torch's current stream of
        each (ckpt_reader_after_stream; one stream orders them, the others join it by event),
        so that pending work on the targets runs first without blocking this thread."""
        primary, _ = cuda_streams(devices)
        if primary is not None:
            L.check(L.load().ckpt_reader_after_stream(self.ptr, primary.cuda_stream),
                    "ordering the restore after the current CUDA stream")

    def read(self, index, dst, size, region=None, mem=L.MEM_HOST):
        """ckpt_reader_read: region (a ckpt_region; None: the whole tensor) of tensor index into
        dst (an address in memory mem) of size bytes; raises the library's error."""
        L.check(L.load().ckpt_reader_read(self.ptr, index, None if region is None
                                          else ctypes.byref(region), mem, dst, size))

    def read_all(self, dst_for):
        """ckpt_reader_read_all: every tensor whole, in parallel, into dst_for(index) = (address,
        memory) or None to skip it."""
        def cb(index, _info, mem, _arg):
            d = dst_for(index)
            if d is None:
                return None
            mem[0] = d[1]
            return d[0]
        fn = L.DST_FN(cb)
        L.check(L.load().ckpt_reader_read_all(self.ptr, fn, None))

    def verify(self):
        """ckpt_reader_verify: the damages found (dicts; empty: intact)."""
        damages = []

        def on_damage(d, _arg):
            d = d.contents
            damages.append({"step": d.step, "tensor": d.tensor.decode() if d.tensor else None,
                            "chunk": d.chunk, "offset": d.offset,
                            "file": d.file.decode() if d.file else None, "error": d.error,
                            "message": d.message.decode() if d.message else ""})
        cb = L.DAMAGE_FN(on_damage)
        L.check(L.load().ckpt_reader_verify(self.ptr, None, cb, L.NO_PROGRESS, None), "verify")
        return damages

    def bytes_read(self):
        """Bytes read from pack files through this reader so far (ckpt_reader_stats)."""
        st = L.Stats()
        L.check(L.load().ckpt_reader_stats(self.ptr, ctypes.byref(st)))
        return int(st.bytes_read)
