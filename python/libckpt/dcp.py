"""libckpt as the storage of torch.distributed.checkpoint (DCP): dcp.save, dcp.async_save and
dcp.load of any state dict DCP takes (FSDP2 / DTensor, plain tensors, other objects) go into a
libckpt store, so a DCP user gets incremental, digest-verified, crash-safe saves by passing a
writer and a reader:

    from libckpt.dcp import LibckptStorageWriter, LibckptStorageReader
    dcp.save(state, storage_writer=LibckptStorageWriter("/nvme/ckpt"), checkpoint_id="/nvme/ckpt/step-100")
    dcp.load(state, storage_reader=LibckptStorageReader("/nvme/ckpt"), checkpoint_id="/nvme/ckpt/step-100")

What DCP writes becomes one libckpt multi-rank checkpoint (docs/format.md, version 2) of the step:
each write item is a shard of the global tensor named by its FQN (a BYTE_IO item, a 1-d uint8
tensor of its bytes), and DCP's Metadata (its global plan: sizes, chunks, planner data) is the
checkpoint's metadata entry "dcp.metadata".  ckptctl lists, verifies, prunes and exports it as
any other multi-rank checkpoint; DCP's resharding works on load because every read item is a box
of a global tensor (ckpt_dist_reader_restore_box reads only the chunks under it, re-hashing each).

How DCP's protocol maps onto libckpt's multi-rank save (include/ckpt.h, ckpt_dist_*):
- DCP coordinates with its own collectives; this module issues none.  The coordinator begins its
  part in prepare_global_plan (ckpt_dist_save_begin on rank 0 claims the step and clears what a
  dead save of it left) before DCP scatters the plan, so every other rank begins its part (in
  write_data) after that claim.
- libckpt's communicator (ckpt_comm) is carried by DCP's messages: the begin exchange agrees
  locally (DCP already agreed the step: the coordinator chose it and sent it in the plan); at
  commit each rank's part message (its part's size, checksum and outcome) goes back to the
  coordinator in its write results, and rank 0's commit thread waits in the allgather until
  finish() hands it every rank's message.  So the global manifest is written by finish() and
  only there: a save that dies before finish() leaves parts that gc collects, never a checkpoint.
- Ranks other than 0 finish their part at once (their broadcast reports success locally; rank 0's
  outcome reaches them as DCP's exception).  Each save opens the store anew, so that a dedup index
  never names chunks of a save whose commit failed.

Reads the messages' first field (int32 rc, then the text at byte 32 of a part message), which is
how lib/dist/dist.c lays out struct part_msg.

async_save: LibckptStorageWriter is also DCP's AsyncStager (BlockingAsyncStager, as
FileSystemWriter is): dcp.async_save copies the state into host memory (cached between saves)
and returns; hashing, writing and the commit run on DCP's thread.
"""

import base64
import ctypes
import dataclasses
import io
import os
import pickle
import re
import threading
import time
import uuid
import zlib

try:
    import torch
    from torch.distributed.checkpoint.metadata import Metadata, MetadataIndex, StorageMeta
    from torch.distributed.checkpoint.planner import LoadItemType, WriteItemType
    from torch.distributed.checkpoint.staging import BlockingAsyncStager
    from torch.distributed.checkpoint.storage import StorageReader, StorageWriter, WriteResult
    from torch.futures import Future
except ImportError as _e:  # Debian 12's torch 1.13 has an older DCP without these
    try:
        import torch as _t
        _ver = _t.__version__
    except ImportError:
        _ver = "none"
    raise ImportError(f"libckpt.dcp needs torch 2.6 or later (torch.distributed.checkpoint with "
                      f"StorageWriter.reset, staging and DTensor); this is torch {_ver} ({_e}). "
                      f"libckpt.Store, CheckpointManager and libckpt.Shard work on torch 1.13") from None

if tuple(int(x) for x in re.findall(r"\d+", torch.__version__)[:2]) < (2, 6):
    raise ImportError(f"libckpt.dcp needs torch 2.6 or later; this is torch {torch.__version__}. "
                      f"libckpt.Store, CheckpointManager and libckpt.Shard work on it")

from . import _dread
from . import _lib as L
from . import _tree as T
from . import dist as D
from ._target import _alloc
from .errors import CkptIOError, CorruptError, InvalidArgumentError, StateError, UnsupportedError
from .store import Store

__all__ = ["LibckptStorageWriter", "LibckptStorageReader", "resolve_checkpoint_id", "METADATA_KEY"]

METADATA_KEY = "dcp.metadata"  # zlib-compressed pickle of DCP's Metadata, base64
_STEP_RE = re.compile(r"^(?:step[-_]?)?(\d+)$")
_PART_FQN = "__libckpt_part__"  # the write result that carries a rank's part message


def _is_store(path):
    return os.path.isfile(os.path.join(path, "store"))  # the store header (docs/format.md)


def resolve_checkpoint_id(checkpoint_id, step=None):
    """(store path, step or None) for a DCP checkpoint_id: a store path ("/ckpt": the step is the
    next one for a save, the newest for a load); a store path plus step, as DCP users name one
    checkpoint ("/ckpt/step-100", "/ckpt/step_100", "/ckpt/100": the last component names the step
    unless the path is itself a store); or a tuple (path, step).  `step` given here wins."""
    if isinstance(checkpoint_id, tuple):
        if len(checkpoint_id) != 2:
            raise ValueError(f"libckpt.dcp: checkpoint_id tuple must be (store path, step), got "
                             f"{checkpoint_id!r}")
        checkpoint_id, tstep = checkpoint_id
        step = tstep if step is None else step
    path = os.path.normpath(os.fspath(checkpoint_id))
    if step is None and not _is_store(path):
        m = _STEP_RE.match(os.path.basename(path))
        if m:
            return os.path.dirname(path) or ".", int(m.group(1))
    if step is not None and (isinstance(step, bool) or not isinstance(step, int) or step < 0):
        raise ValueError(f"libckpt.dcp: step must be an int >= 0, got {step!r}")
    return path, step


@dataclasses.dataclass(frozen=True)
class _Plan:
    """SavePlan.storage_data: where a rank's part goes."""
    rank: int
    world: int
    step: int
    save_id: str


@dataclasses.dataclass(frozen=True)
class _Item:
    """WriteResult.storage_data (and Metadata.storage_data) of one item: the libckpt global
    tensor that holds it ("tensor": its chunk is the box at the item's offset; "bytes": uint8)."""
    name: str
    kind: str


@dataclasses.dataclass(frozen=True)
class _Part:
    """The extra WriteResult of each rank: its part's message for rank 0's commit."""
    rank: int
    world: int
    step: int
    save_id: str
    msg: bytes


def _msg_rc(msg):
    return int.from_bytes(msg[:4], "little", signed=True) if msg and len(msg) >= 4 else -CkptIOError.code


def _msg_text(msg):
    return msg[32:].split(b"\0", 1)[0].decode(errors="replace") if msg else ""


class _Comm:
    """ckpt_comm carried by DCP's own messages (the module docstring says how)."""

    def __init__(self, rank, size, timeout):
        self.rank, self.size, self.timeout = rank, size, timeout
        self.phase = "begin"
        self.mine = None             # this rank's part message (the commit allgather's input)
        self.entered = threading.Event()
        self.released = threading.Event()
        self.gathered = None         # rank 0: every rank's message, in rank order
        self.fail = None             # why the commit was given up
        self._msg = ctypes.create_string_buffer(1024)
        self._cbs = (D.AG_FN(self._allgather), D.BC_FN(self._broadcast), D.BAR_FN(self._barrier),
                     D.ERR_FN(self._errmsg))
        self.struct = D.CommStruct(rank, size, None, *self._cbs)

    def _error(self, text):
        self._msg.value = text.encode(errors="replace")[:1023]
        return -CkptIOError.code

    def _allgather(self, _ctx, inp, n, out):
        try:
            if self.phase == "begin":
                self.phase = "commit"
                for i in range(self.size):  # agreed already: DCP's plan carries the step
                    ctypes.memmove(out + i * n, inp, n)
                return 0
            self.mine = ctypes.string_at(inp, n)
            self.entered.set()
            if self.rank != 0:
                ctypes.memset(out, 0, n * self.size)  # read by rank 0 only
                return 0
            if not self.released.wait(self.timeout):
                self.fail = f"finish() did not come within {self.timeout} s"
            if self.fail is not None:
                return self._error(f"DCP save given up: {self.fail}")
            if len(self.gathered) != n * self.size:
                return self._error(f"DCP save: {len(self.gathered)} bytes of part messages, "
                                   f"expected {n * self.size} (libckpt versions differ?)")
            ctypes.memmove(out, self.gathered, n * self.size)
            return 0
        except Exception as e:  # noqa: BLE001  an exception must not cross into C
            return self._error(f"DCP save: {e}")

    def _broadcast(self, _ctx, buf, n, root):
        if self.rank != root:
            ctypes.memset(buf, 0, n)  # rank 0's outcome comes back as DCP's exception
        return 0

    def _barrier(self, _ctx):
        return 0

    def _errmsg(self, _ctx):
        return ctypes.addressof(self._msg) if self._msg.value else None


def _dtype(t, fqn):
    dt = T.torch_dtypes().get(t.dtype)
    if dt is None:
        raise UnsupportedError(f"DCP item {fqn!r}: libckpt has no dtype for {t.dtype}")
    return dt


class _Where:
    """The store and step of a writer or reader, from its path or DCP's checkpoint_id."""

    def _set_where(self, path, step):
        self._step_arg = step
        self._path, self._step = (None, step) if path is None else resolve_checkpoint_id(path, step)

    def _reset_where(self, checkpoint_id):
        if checkpoint_id:
            self._path, self._step = resolve_checkpoint_id(checkpoint_id, self._step_arg)

    @property
    def checkpoint_id(self):
        return self._path if self._step is None else f"{self._path}/step-{self._step}"

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        """True for a store path, a store path plus step, or (store, step), of an existing store."""
        try:
            path, _ = resolve_checkpoint_id(checkpoint_id)
        except (TypeError, ValueError):
            return False
        return _is_store(path)


class _Part0:
    """Rank 0's part, begun in prepare_global_plan and committed by finish()."""

    def __init__(self, store, comm, ptr, step, world, save_id):
        self.store, self.comm, self.ptr = store, comm, ptr
        self.step, self.world, self.save_id = step, world, save_id
        self.submitted = False
        self.metadata = None


class LibckptStorageWriter(_Where, StorageWriter, BlockingAsyncStager):
    """DCP StorageWriter into a libckpt store (module docstring).

    LibckptStorageWriter(path=None, *, step=None, timeout=1800, cache_staged_state_dict=True,
                         **store_options)

    path: the store (created if missing; or a checkpoint_id as resolve_checkpoint_id takes it);
    dcp.save's checkpoint_id replaces it.  step: the checkpoint's step (default: from the
    checkpoint_id, else the newest step + 1).  timeout: seconds rank 0's commit waits for finish()
    after its part is durable.  store_options go to libckpt.Store (chunk_size, compress, ...:
    every rank must open the store alike).  A step that has a checkpoint already raises
    ExistsError (a multi-rank checkpoint is never replaced).  One save at a time per writer:
    wait for async_save's future before the next save through the same writer (a save whose
    finish() never came, after a failure on some rank, is given up by the next reset(), close()
    or the writer's end)."""

    def __init__(self, path=None, *, step=None, timeout=1800.0, cache_staged_state_dict=True,
                 **store_options):
        StorageWriter.__init__(self)
        BlockingAsyncStager.__init__(self, cache_staged_state_dict=cache_staged_state_dict)
        self._set_where(path, step)
        self._timeout = float(timeout)
        self._opts = store_options
        self._rank = None
        self._part0 = None
        self.save_id = uuid.uuid4().hex
        self.last_stats = None  # this rank's SaveStats of the last save (bytes written, ...)

    # -------------------------------------------------------------- DCP's calls, in order
    def reset(self, checkpoint_id=None):
        self._abandon("a new save began before the previous one's finish()")
        self._reset_where(checkpoint_id)
        self.save_id = uuid.uuid4().hex

    def set_up_storage_writer(self, is_coordinator, *args, **kwargs):
        if not kwargs.get("use_collectives", True):
            raise UnsupportedError("libckpt.dcp: use_collectives=False is not supported (a "
                                   "libckpt checkpoint is committed once, by the coordinator)")
        if self._path is None:
            raise InvalidArgumentError("libckpt.dcp: no store: give LibckptStorageWriter(path) or "
                                       "dcp.save(checkpoint_id=...)")
        self._rank = kwargs.get("rank")

    def storage_meta(self):
        return StorageMeta(checkpoint_id=self._path, save_id=self.save_id)

    def prepare_local_plan(self, plan):
        return plan

    def prepare_global_plan(self, plans):
        world = len(plans)
        store = Store(self._path, create=True, **self._opts)
        try:
            step = self._step
            if step is None:
                latest = store.latest_step()
                step = 0 if latest is None else latest + 1
            comm = _Comm(0, world, self._timeout)
            out = ctypes.c_void_p()
            with store._lock:
                rc = D.lib().ckpt_dist_save_begin(store._handle(), ctypes.byref(comm.struct), step,
                                                  ctypes.byref(out))
            L.check(rc, f"DCP save of step {step} into {self._path}")
        except BaseException:
            store.close()
            raise
        self._part0 = _Part0(store, comm, out.value, step, world, self.save_id)
        return [dataclasses.replace(p, storage_data=_Plan(i, world, step, self.save_id))
                for i, p in enumerate(plans)]

    def write_data(self, plan, planner):
        sp = plan.storage_data
        if not isinstance(sp, _Plan):
            raise StateError("libckpt.dcp: the plan was not made by LibckptStorageWriter's "
                             "prepare_global_plan")
        if sp.rank == 0:
            results, msg = self._write_rank0(sp, plan, planner)
        else:
            results, msg = self._write_other(sp, plan, planner)
        results.append(WriteResult(index=MetadataIndex(f"{_PART_FQN}/{sp.rank}"), size_in_bytes=0,
                                   storage_data=_Part(sp.rank, sp.world, sp.step, sp.save_id, msg)))
        fut = Future()
        fut.set_result(results)
        return fut

    def finish(self, metadata, results):
        p = self._part0
        if p is None or not p.submitted:
            raise StateError("libckpt.dcp: finish() without this writer's write_data on rank 0")
        try:
            msgs = {}
            for wl in results:
                for wr in wl:
                    sd = wr.storage_data
                    if isinstance(sd, _Part):
                        if (sd.step, sd.world, sd.save_id) != (p.step, p.world, p.save_id):
                            raise StateError(f"libckpt.dcp: rank {sd.rank} wrote step {sd.step} of "
                                             f"{sd.world} ranks (save {sd.save_id}), rank 0 step "
                                             f"{p.step} of {p.world} ({p.save_id})")
                        msgs[sd.rank] = sd.msg
            if sorted(msgs) != list(range(p.world)):
                raise StateError(f"libckpt.dcp: part messages of ranks {sorted(msgs)}, expected "
                                 f"0..{p.world - 1}")
            if metadata is not p.metadata and (p.metadata is None or metadata.state_dict_metadata
                                               != p.metadata.state_dict_metadata):
                raise StateError("libckpt.dcp: finish() got other metadata than the planner held "
                                 "in write_data (a planner that changes it is not supported)")
        except BaseException as e:
            self._abandon(str(e))
            raise
        p.comm.gathered = b"".join(msgs[r] for r in range(p.world))
        p.comm.released.set()
        self._part0 = None
        try:
            self.last_stats = self._wait(p)
        finally:
            p.store.close()
        metadata.storage_data = _storage_data(results)

    # -------------------------------------------------------------- the parts
    def _add_items(self, ptr, plan, planner):
        """Adds every item of the plan to the part at ptr; returns (results, tensors to keep)."""
        lb = D.lib()
        results, keep = [], []
        for item in plan.items:
            fqn = item.index.fqn
            if item.type == WriteItemType.BYTE_IO:
                data = planner.resolve_data(item).getvalue()
                t = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else None
                gshape, off, lshape = (len(data),), (0,), (len(data),)
                kind, dt, nbytes = "bytes", L.U8, len(data)
            else:
                t = planner.resolve_data(item).detach()
                t = t.to("cpu").contiguous() if t.device.type != "cpu" else t.contiguous()
                ch = item.tensor_data.chunk
                gshape, off, lshape = tuple(item.tensor_data.size), tuple(ch.offsets), tuple(ch.sizes)
                if tuple(t.shape) != lshape:
                    raise InvalidArgumentError(f"DCP item {fqn!r}: data of shape {list(t.shape)} "
                                               f"for a chunk of {list(lshape)}")
                kind, dt, nbytes = "tensor", _dtype(t, fqn), t.numel() * t.element_size()
            if nbytes:  # an empty chunk (an uneven split's last rank) holds nothing to save
                rc = lb.ckpt_dist_save_add_shard(ptr, fqn.encode(), dt, len(gshape),
                                                 D._u64s(gshape), D._u64s(off), D._u64s(lshape),
                                                 L.MEM_HOST, t.data_ptr())
                L.check(rc, f"DCP item {fqn!r}")
                keep.append(t)
            results.append(WriteResult(index=item.index, size_in_bytes=nbytes,
                                       storage_data=_Item(fqn, kind)))
        return results, keep

    def _write_rank0(self, sp, plan, planner):
        p = self._part0
        if p is None or p.step != sp.step or p.save_id != sp.save_id:
            raise StateError("libckpt.dcp: rank 0's part was not begun by prepare_global_plan")
        lb = D.lib()
        try:
            results, keep = self._add_items(p.ptr, plan, planner)
            md = getattr(planner, "metadata", None)
            if not isinstance(md, Metadata):
                raise UnsupportedError("libckpt.dcp: the save planner keeps no global Metadata "
                                       "(planner.metadata, as DefaultSavePlanner has)")
            p.metadata = md
            L.check(lb.ckpt_dist_save_set_meta(p.ptr, METADATA_KEY.encode(), _pack(md)),
                    "DCP metadata")
            rc = lb.ckpt_dist_save_submit(p.ptr, D.THREADED)
            p.submitted = True
            L.check(rc, f"DCP save of step {p.step}")
        except BaseException as e:
            self._abandon(f"rank 0 failed: {e}")
            raise
        # the part is durable (or failed) when the commit thread enters the exchange
        deadline = time.monotonic() + self._timeout
        while not p.comm.entered.wait(0.05):
            if D.lib().ckpt_dist_save_poll(p.ptr) == 1:  # ended before the exchange
                self._abandon("rank 0's commit ended before its part's exchange")
                raise CkptIOError(f"DCP save of step {p.step}: rank 0's commit ended early")
            if time.monotonic() > deadline:
                self._abandon("rank 0's part did not finish in time")
                raise CkptIOError(f"DCP save of step {p.step}: rank 0's part took over "
                                  f"{self._timeout} s")
        del keep
        if _msg_rc(p.comm.mine):
            text = _msg_text(p.comm.mine)
            self._abandon("rank 0's part failed")
            raise L.make_error(_msg_rc(p.comm.mine), f"DCP save of step {p.step}, rank 0: {text}")
        return results, p.comm.mine

    def _write_other(self, sp, plan, planner):
        lb = D.lib()
        with Store(self._path, **self._opts) as store:
            comm = _Comm(sp.rank, sp.world, self._timeout)
            out = ctypes.c_void_p()
            with store._lock:
                L.check(lb.ckpt_dist_save_begin(store._handle(), ctypes.byref(comm.struct),
                                                sp.step, ctypes.byref(out)),
                        f"DCP save of step {sp.step}, rank {sp.rank}")
            try:
                results, keep = self._add_items(out.value, plan, planner)
            except BaseException:
                comm.fail = "this rank failed"
                lb.ckpt_dist_save_abort(out.value)
                raise
            st = L.Stats()
            rc = lb.ckpt_dist_save_commit(out.value, ctypes.byref(st))
            del keep
            if rc < 0 or _msg_rc(comm.mine):
                raise L.make_error(rc if rc < 0 else _msg_rc(comm.mine),
                                   f"DCP save of step {sp.step}, rank {sp.rank}: {_msg_text(comm.mine)}")
            self.last_stats = L.stats_dict(st)
        return results, comm.mine

    def _wait(self, p):
        st = L.Stats()
        rc = D.lib().ckpt_dist_save_wait(p.ptr, ctypes.byref(st))
        L.check(rc, f"DCP checkpoint {p.step} in {self._path}")
        return L.stats_dict(st)

    def _abandon(self, why):
        """Gives up rank 0's part (no checkpoint is made; its packs are garbage for gc)."""
        p, self._part0 = self._part0, None
        if p is None:
            return
        p.comm.fail = why
        p.comm.released.set()
        try:
            if p.submitted:
                try:
                    self._wait(p)
                except Exception:  # noqa: BLE001  the failure is what we asked for
                    pass
            else:
                D.lib().ckpt_dist_save_abort(p.ptr)
        finally:
            p.store.close()

    def stage(self, state_dict):
        """AsyncStager.stage: a copy of state_dict in host memory (pinned where CUDA is available:
        BlockingAsyncStager pins always, which fails without a GPU), into the buffers of the
        previous call when cache_staged_state_dict and the state has the same structure."""
        from torch.distributed._state_dict_utils import _copy_state_dict, _create_cpu_state_dict
        if self.state_dict_cache is None or not self.cache_staged_state_dict:
            cache = _create_cpu_state_dict(state_dict, pin_memory=torch.cuda.is_available())
            if not self.cache_staged_state_dict:
                return _copy_state_dict(state_dict, cache)
            self.state_dict_cache = cache
        return _copy_state_dict(state_dict, self.state_dict_cache)

    def close(self):
        """Gives up a save whose finish() never came, and frees the staging cache."""
        self._abandon("the writer was closed")
        BlockingAsyncStager.close(self)

    def __del__(self):
        try:
            self._abandon("the writer was dropped")
        except Exception:  # noqa: BLE001
            pass


def _storage_data(results):
    return {wr.index: wr.storage_data for wl in results for wr in wl
            if not isinstance(wr.storage_data, _Part)}


def _pack(md):
    return base64.b64encode(zlib.compress(pickle.dumps(md, protocol=4), 3))


def _unpack(text, where):
    try:
        return pickle.loads(zlib.decompress(base64.b64decode(text)))
    except Exception as e:  # noqa: BLE001
        raise CorruptError(f"{where}: metadata {METADATA_KEY!r} does not decode ({e})") from None


class LibckptStorageReader(_Where, StorageReader):
    """DCP StorageReader of a libckpt store (module docstring).

    LibckptStorageReader(path=None, *, step=None, **store_options): path or dcp.load's
    checkpoint_id as resolve_checkpoint_id takes it (a store: its newest checkpoint).  Every
    chunk read is re-hashed: a damaged one raises ChecksumError (DCP wraps it in its
    CheckpointException), never loads."""

    def __init__(self, path=None, *, step=None, **store_options):
        super().__init__()
        self._set_where(path, step)
        self._opts = store_options
        self.load_id = uuid.uuid4().hex

    def reset(self, checkpoint_id=None):
        self._reset_where(checkpoint_id)
        self.load_id = uuid.uuid4().hex

    def _store(self):
        if self._path is None:
            raise InvalidArgumentError("libckpt.dcp: no store: give LibckptStorageReader(path) or "
                                       "dcp.load(checkpoint_id=...)")
        return Store(self._path, read_only=True, **self._opts)

    def read_metadata(self, *args, **kwargs):
        with self._store() as store:
            step = "latest" if self._step is None else self._step
            with store._open_reader(step) as r:
                text = L.load().ckpt_reader_get_meta(r.ptr, METADATA_KEY.encode())
                resolved = r.step
        where = f"checkpoint {resolved} of {self._path}"
        if text is None:
            raise UnsupportedError(f"{where} was not written by DCP (no {METADATA_KEY!r}: load it "
                                   f"with libckpt.Store.load or restore)")
        md = _unpack(text, where)
        if getattr(md, "storage_meta", None) is None:
            md.storage_meta = StorageMeta()
        md.storage_meta.load_id = self.load_id
        # the step this load reads, the same on every rank whatever commits meanwhile
        md.storage_data = {"libckpt.step": resolved}
        return md

    def set_up_storage_reader(self, metadata, is_coordinator, *args, **kwargs):
        sd = metadata.storage_data
        if not isinstance(sd, dict) or "libckpt.step" not in sd:
            raise StateError("libckpt.dcp: metadata not read by LibckptStorageReader")
        self._resolved = sd["libckpt.step"]

    def prepare_local_plan(self, plan):
        return plan

    def prepare_global_plan(self, plans):
        return plans

    def read_data(self, plan, planner):
        with self._store() as store, _dread._View(store, self._resolved) as v:
            for req in plan.items:
                _read_item(v, req, planner)
        fut = Future()
        fut.set_result(None)
        return fut


def _read_item(v, req, planner):
    """One ReadItem: its bytes to planner.load_bytes, or its box into planner's tensor."""
    fqn = req.storage_index.fqn
    if req.type == LoadItemType.BYTE_IO:
        data = b""
        if fqn in v.names():
            idx = v.find(fqn)
            buf = torch.empty(v.tensor(idx)["nbytes"], dtype=torch.uint8)
            _dread._fill(v, idx, buf, (0,))
            data = buf.numpy().tobytes()
        planner.load_bytes(req, io.BytesIO(data))
        return
    target = planner.resolve_tensor(req).detach()
    lengths = tuple(int(x) for x in req.lengths)
    if tuple(target.shape) != lengths:
        raise InvalidArgumentError(f"DCP item {fqn!r}: target of shape {list(target.shape)} for a "
                                   f"read of {list(lengths)}")
    if target.numel():
        idx = v.find(fqn)
        ti = v.tensor(idx)
        off = tuple(int(a) + int(b) for a, b in zip(req.storage_index.offset, req.storage_offsets))
        if T.torch_dtypes().get(target.dtype) == ti["ckpt_dtype"]:
            _dread._fill(v, idx, target, off)
        else:  # a target of another dtype: read as saved, then convert as torch's copy_ does
            tmp = _alloc("torch", dict(ti, shape=lengths), None)
            _dread._fill(v, idx, tmp, off)
            with torch.no_grad():
                target.copy_(tmp)
    planner.commit_tensor(req, target)
