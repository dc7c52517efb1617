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
of a global tensor (ckpt_reader_read of a box reads only the chunks under it, re-hashing each).

How DCP's protocol maps onto libckpt's multi-rank save (include/ckpt.h, ckpt_save_* with a
communicator):
- The save's collectives run on libckpt's own gloo group over DCP's process group (the writer's
  process_group; libckpt.dist_group), made on the main thread by reset().  Every rank opens
  the store (creating it and its parent directories when missing: of ranks creating it at once,
  one header wins), rank 0 picks the step, and one exchange of every rank's outcome makes a
  failure on any rank raise on all, naming it; every rank then begins its part collectively
  (ckpt_save_begin: rank 0 claims the step; a step that exists, or a busy one, raises on
  every rank before anything is written).
- The part is begun with CKPT_SAVE_THREADED | CKPT_SAVE_DEFER: it is hashed, written and made
  durable in libckpt's pipeline, and the collective commit then waits on libckpt's thread for
  ckpt_save_release.  Ranks other than 0 release in write_data; rank 0 in finish(), after
  setting DCP's Metadata (metadata entry set after submit) and checking every rank's part.  So
  the global manifest is written by finish() and only there: a save that fails or dies before
  finish() leaves parts that gc collects, never a checkpoint, and every rank's commit learns the
  real outcome (a failure or a give-up is released as an error, which fails every rank).
- dcp.save: write_data begins the part and adds the items of DCP's plan (DCP deduplicated the
  replicated ones); it returns once they are copied.
- dcp.async_save: the writer is DCP's AsyncStager.  stage() begins the part and snapshots the
  whole state into the store's pinned pool (no copy of the state: host and CUDA tensors, the
  fence on torch's current stream, as libckpt's own save_async), named as DCP's default planner
  names them, and saved once across ranks (DTensor boxes split among their replicas, plain
  tensors whole by one rank each, objects by rank 0); it returns when the copy is done.  DCP's
  plan, made later on its thread from a copy of the state's containers, is checked in finish()
  against what the ranks staged.  The pool grows to the state at the first stage() unless
  the store option pool_size bounds it.  stage_in_pool=False stages with a host copy instead.
"""

import base64
import ctypes
import dataclasses
import datetime
import io
import os
import pickle
import re
import sys
import threading
import time
import uuid
import warnings
import zlib

try:
    import torch
    from torch.distributed.checkpoint.metadata import Metadata, MetadataIndex, StorageMeta
    from torch.distributed.checkpoint.planner import LoadItemType, WriteItemType
    from torch.distributed.checkpoint.staging import AsyncStager
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
from ._driver import SaveDriver, agree
from . import _tree as T
from . import dist as D
from ._target import _alloc
from .errors import CorruptError, InvalidArgumentError, StateError, UnsupportedError
from .store import Store

__all__ = ["LibckptStorageWriter", "LibckptStorageReader", "resolve_checkpoint_id", "METADATA_KEY"]

METADATA_KEY = "dcp.metadata"  # zlib-compressed pickle of DCP's Metadata, base64
_STEP_RE = re.compile(r"^(?:step[-_]?)?(\d+)$")
_PART_FQN = "__libckpt_part__"  # the write result that carries a rank's part


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
    save_id: str


@dataclasses.dataclass(frozen=True)
class _Item:
    """WriteResult.storage_data (and Metadata.storage_data) of one item: the libckpt global
    tensor that holds it ("tensor": its chunk is the box at the item's offset; "bytes": uint8)."""
    name: str
    kind: str


@dataclasses.dataclass(frozen=True)
class _Part:
    """The extra WriteResult of each rank: the step of its part, and (staged saves) the items
    it holds, for finish() to check that the plan's items are all saved."""
    rank: int
    world: int
    step: int
    save_id: str
    held: frozenset


class _SoloComm:
    """ckpt_comm of a save without torch.distributed: one rank, nothing to exchange."""

    def __init__(self):
        self._cbs = (L.AG_FN(self._allgather), L.BC_FN(lambda _c, _b, _n, _r: 0),
                     L.BAR_FN(lambda _c: 0), L.ERR_FN(lambda _c: None))
        self.struct = L.Comm(rank=0, size=1, ctx=None, allgather=self._cbs[0],
                             broadcast=self._cbs[1], barrier=self._cbs[2], errmsg=self._cbs[3])
        self.local_fail = False

    @staticmethod
    def _allgather(_ctx, inp, n, out):
        ctypes.memmove(out, inp, n)
        return 0


def _dtype(t, fqn):
    dt = T.torch_dtypes().get(t.dtype)
    if dt is None:
        raise UnsupportedError(f"DCP item {fqn!r}: libckpt has no dtype for {t.dtype}")
    return dt


def _mem(t):
    return L.MEM_HOST if t.device.type == "cpu" else (t.device.index or 0)


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


class _Save:
    """This rank's part of one DCP save: begun (collectively) by stage() or write_data(),
    deferred (CKPT_SAVE_DEFER), released by finish() on rank 0 and by write_data() on the
    others, then waited for."""

    def __init__(self, drv, rank, world):
        self.drv = drv            # the C save (a SaveDriver with the ranks' communicator)
        self.step, self.rank, self.world = drv.step, rank, world
        self.staged = False
        self.held = frozenset()   # (fqn, offsets) of the items this rank's part holds
        self.mems = set()         # the memories of the part's tensors (CUDA devices >= 0)
        self.metadata = None      # rank 0: the planner's Metadata seen in write_data
        self.where = None         # staged: (store, step argument) of the save
        self.reset_seen = False   # staged: DCP's thread reset the writer for it


def _freeze(obj):
    """The containers of a state dict copied (its leaves shared): DCP plans a staged save from
    it later, on its thread, while training goes on changing the original dicts."""
    if isinstance(obj, dict):
        out = type(obj).__new__(type(obj))
        try:
            out.__init__()
        except TypeError:
            out = {}
        for k, v in obj.items():
            out[k] = _freeze(v)
        return out
    if isinstance(obj, list):
        return [_freeze(v) for v in obj]
    return obj


def _replica(dt):
    """(replica, nreplicas) of a DTensor's local box: its coordinate along the mesh dimensions
    that Replicate it (all holders of one box agree on the box; each has its own index)."""
    mesh = dt.device_mesh
    coord = mesh.get_coordinate()
    replica, n = 0, 1
    for i, p in enumerate(dt.placements):
        if p.is_replicate():
            replica = replica * mesh.size(i) + coord[i]
            n *= mesh.size(i)
    return replica, n


def _assign(items, world):
    """Plain tensors (replicated on every rank, as DCP assumes): each saved whole by one rank,
    the largest first to the least loaded, the same on every rank (sorted by size, then name)."""
    load = [0] * world
    owner = {}
    for nbytes, fqn in sorted(items, key=lambda x: (-x[0], x[1])):
        r = min(range(world), key=lambda k: (load[k], k))
        owner[fqn] = r
        load[r] += nbytes
    return owner


class LibckptStorageWriter(_Where, StorageWriter, AsyncStager):
    """DCP StorageWriter into a libckpt store (module docstring).

    LibckptStorageWriter(path=None, *, step=None, timeout=None, process_group=None,
                         stage_in_pool=True, **store_options)

    path: the store (created, with its parent directories, by the first save when missing; or
    a checkpoint_id as resolve_checkpoint_id takes it);
    dcp.save's checkpoint_id replaces it.  step: the checkpoint's step (default: from the
    checkpoint_id, else the newest step + 1).  process_group: the group dcp.save is given (None:
    the default group); libckpt's own gloo group over it carries the save's collectives.
    timeout: of those collectives (default: the group's).  stage_in_pool: dcp.async_save's
    staging snapshots the state into the store's pinned pool (no copy of the state): the pool
    grows at the first async_save to hold this rank's tensors, as DCP's own stager holds a copy
    of them, and is kept; with store option pool_size it stays that size instead, and a state
    larger blocks until the pool drains to disk.  False copies the state into host memory
    first, as DCP's default stager does.
    store_options go to libckpt.Store (chunk_size, compress, pool_size ...: every rank must open
    the store alike).  A step that has a checkpoint already raises ExistsError on every rank (a
    multi-rank checkpoint is never replaced).  One save at a time per writer: wait for
    async_save's future before the next save through the same writer."""

    def __init__(self, path=None, *, step=None, timeout=None, process_group=None,
                 stage_in_pool=True, cache_staged_state_dict=False, **store_options):
        StorageWriter.__init__(self)
        self._set_where(path, step)
        self._timeout = None if timeout is None else datetime.timedelta(seconds=float(timeout))
        self._group = process_group
        self._pool = bool(stage_in_pool)
        self._cache = cache_staged_state_dict
        self._cache_sd = None
        self._opts = store_options
        self._store = None
        self._dg = None
        self._async_pg = None    # async_group
        self._warned_group = False
        self._cur = None      # the save in flight (_Save)
        self._last = None     # a save released, still to be waited for
        self.save_id = uuid.uuid4().hex
        self._stats = None

    # -------------------------------------------------------------- the group and the store
    def _group_of(self):
        """libckpt's gloo group (made on the main thread: reset() runs there), or None."""
        import torch.distributed as dist
        if self._dg is None and dist.is_available() and dist.is_initialized():
            self._dg = D.dist_group(self._group, self._timeout)
        return self._dg

    @property
    def async_group(self):
        """A gloo process group over the writer's ranks, of its own, for dcp.async_save's
        collectives: dcp.async_save(..., process_group=writer.async_group).  DCP runs an async
        save's plan and commit collectives on its thread, on the group async_save is given
        (None: the default group); training's collectives on that group at the same time
        mismatch (gloo aborts the process), hence DCP's rule that an async save gets a group of
        its own.  Made at first use, on every rank of the writer's group alike (collective)."""
        if self._async_pg is None:
            dg = self._group_of()
            if dg is None:
                return None
            import inspect
            import torch.distributed as dist
            kw = {}
            if len(dg.ranks) != dist.get_world_size() and \
                    "use_local_synchronization" in inspect.signature(dist.new_group).parameters:
                kw["use_local_synchronization"] = True  # a subgroup: only its ranks make it
            self._async_pg = dist.new_group(ranks=dg.ranks, timeout=dg.timeout, backend="gloo",
                                            **kw)
        return self._async_pg

    def _check_async_group(self, dg):
        """stage() is async_save's: the group async_save got must span the writer's ranks (else
        raises, on every rank alike), and should not be the default group (a warning, once)."""
        pg, depth = _async_save_group()
        if pg is _UNKNOWN or dg is None or dg.size == 1:
            return
        import torch.distributed as dist
        if pg is None or pg is dist.group.WORLD or pg is dist.distributed_c10d._get_default_group():
            if not self._warned_group:
                self._warned_group = True
                warnings.warn(
                    "libckpt.dcp: dcp.async_save was given no process_group: DCP's collectives "
                    "for this save run on the default group from DCP's thread, while training "
                    "runs its own on it, which mismatch (gloo aborts the process). An async save "
                    "needs a process group of its own (DCP's rule): pass "
                    "dcp.async_save(..., process_group=writer.async_group)", UserWarning,
                    stacklevel=depth + 2)  # the line that called dcp.async_save
            return
        ranks = list(dist.get_process_group_ranks(pg))
        if ranks != list(dg.ranks):
            raise InvalidArgumentError(
                f"libckpt.dcp: dcp.async_save's process_group spans ranks {ranks[:16]}, the "
                f"writer's {list(dg.ranks)[:16]}: pass process_group=writer.async_group (give "
                f"LibckptStorageWriter(process_group=G) the group of the ranks that save)")

    def _open_store(self):
        """The writer's store, opened, or created with its parent directories when missing: on
        every rank (its header is link()ed, so of ranks creating it at once one header wins and
        the others open it; docs/format.md), so that no rank waits for another to create it."""
        if self._store is not None and os.path.abspath(self._store.path) == os.path.abspath(self._path):
            return self._store
        if self._store is not None:
            self._store.close()
            self._store = None
        self._store = Store(self._path, create=True, **self._opts)
        return self._store

    def _agree(self, dg, prepare=None):
        """Every rank opens (or creates) the store and runs prepare(store) (stage(): the pool);
        rank 0 picks the step.  One exchange carries every rank's outcome, so a failure on any
        rank raises on every rank, naming the rank and its error (not as a rank that died)."""
        rank = 0 if dg is None else dg.rank
        step, err = None, None
        try:
            store = self._open_store()
            if prepare is not None:
                prepare(store)
            step = self._step
            if rank == 0 and step is None:
                latest = store.latest_step()
                step = 0 if latest is None else latest + 1
        except Exception as e:  # noqa: BLE001  the others must hear of it
            err = e
        return agree(dg, err, f"DCP save into {self._path}", "opening the store", step)[0]

    def _begin(self, prepare=None):
        """Collective: this rank's part of the next step begun (rank 0 claims it); prepare:
        as _agree's."""
        self._join_last()
        dg = self._group_of()
        step = self._agree(dg, prepare)
        comm = _SoloComm() if dg is None else D._Comm(dg)
        rank, world = (0, 1) if dg is None else (dg.rank, dg.size)
        drv = SaveDriver(self._store, step, comm,
                         f"DCP save of step {step} into {self._path}, rank {rank}")
        return _Save(drv, rank, world)

    def _submit(self, sv, add, exchange=True):
        """add() adds this rank's tensors; then every rank learns every rank's outcome (a
        failing rank fails all, each raising, and every rank drops its part), and the part is
        submitted and its snapshot awaited.  exchange=False (write_data, whose failure DCP
        gathers and raises on every rank itself): no exchange; a failing rank gives its part up,
        so that the commit fails on every rank as well, and raises."""
        err = None
        try:
            with self._store._lock:
                add()
                sv.drv.order_after(sv.mems)
        except Exception as e:  # noqa: BLE001  raised below, after the exchange
            err = e
        if not exchange and err is not None:
            self._cur = sv
            self._give_up(f"{type(err).__name__}: {err}", join=False)
            raise err
        if exchange:
            try:
                agree(self._dg, err, f"DCP save of step {sv.step}", "exchanging the adds")
            except BaseException:
                sv.drv.abort(local=True)  # every rank knows: the abort exchanges nothing
                raise
        rc = sv.drv.submit()
        self._cur = sv
        if rc >= 0:
            rc = sv.drv.wait_snapshot()
        sv.drv.keep = []
        if rc < 0:
            e = L.make_error(rc, f"DCP save of step {sv.step}, rank {sv.rank}")
            # the other ranks go on into DCP's plan: the commit fails once they release
            self._give_up(str(e), join=False)
            raise e

    def _wait(self, sv):
        stats, err = sv.drv.wait(f"DCP checkpoint {sv.step} in {self._path}")
        if err is not None:
            raise err
        self._stats = stats
        return stats

    @property
    def last_stats(self):
        """This rank's SaveStats of the last save (bytes written, ...), or None.  On ranks
        other than 0 the commit ends after dcp.save returns: this waits for it."""
        self._join_last()
        return self._stats

    def _join_last(self):
        """Waits for the previous save's commit (its outcome reached the caller through DCP)."""
        sv, self._last = self._last, None
        if sv is not None and sv.drv.ptr is not None:
            try:
                self._wait(sv)
            except Exception:  # noqa: BLE001  DCP raised it already, on every rank
                pass

    def _give_up(self, why, join=True):
        """The save in flight fails on every rank (released with an error); no checkpoint.
        join: wait for its commit (else the next save or close() does)."""
        sv, self._cur = self._cur, None
        if sv is None:
            return
        sv.drv.give_up(f"DCP save given up: {why}")
        self._join_last()
        self._last = sv
        if join:
            self._join_last()

    def reserve(self, size=None):
        """Opens the writer's store (created, with its parents, when missing) and allocates its
        pinned pool now, as Store.reserve (size: bytes, or a state: its tensor bytes and two
        I/O buffers), so that the first save does not pay for it.  Returns the pool's size."""
        if self._path is None:
            raise InvalidArgumentError("libckpt.dcp: no store: give LibckptStorageWriter(path)")
        self._group_of()
        return self._open_store().reserve(size)

    # -------------------------------------------------------------- DCP's calls, in order
    def reset(self, checkpoint_id=None):
        sv = self._cur
        before = (self._path, self._step)
        self._reset_where(checkpoint_id)
        if sv is not None and sv.staged and not sv.reset_seen and \
                (self._path, self._step) == sv.where == before:
            # dcp.async_save's thread: its save() resets the writer it staged with
            sv.reset_seen = True
            return
        self._give_up("a new save began before the previous one's finish()")
        self._join_last()
        self.save_id = uuid.uuid4().hex
        if self._path is not None:
            self._group_of()

    def set_up_storage_writer(self, is_coordinator, *args, **kwargs):
        if not kwargs.get("use_collectives", True):
            raise UnsupportedError("libckpt.dcp: use_collectives=False is not supported (a "
                                   "libckpt checkpoint is committed once, by the coordinator)")
        if self._path is None:
            raise InvalidArgumentError("libckpt.dcp: no store: give LibckptStorageWriter(path) or "
                                       "dcp.save(checkpoint_id=...)")

    def storage_meta(self):
        return StorageMeta(checkpoint_id=self._path, save_id=self.save_id)

    def prepare_local_plan(self, plan):
        return plan

    def prepare_global_plan(self, plans):
        world = len(plans)
        return [dataclasses.replace(p, storage_data=_Plan(i, world, self.save_id))
                for i, p in enumerate(plans)]

    def write_data(self, plan, planner):
        sp = plan.storage_data
        if not isinstance(sp, _Plan):
            raise StateError("libckpt.dcp: the plan was not made by LibckptStorageWriter's "
                             "prepare_global_plan")
        try:
            sv = self._cur
            if sv is None:  # dcp.save, or a stager of DCP's own: the plan's items, now
                sv = self._begin()
                self._submit(sv, lambda: self._add_plan(sv, plan, planner), exchange=False)
            if (sv.rank, sv.world) != (sp.rank, sp.world):
                raise StateError(f"libckpt.dcp: DCP's rank {sp.rank} of {sp.world} is libckpt's "
                                 f"rank {sv.rank} of {sv.world} (give LibckptStorageWriter the "
                                 f"process_group that dcp.save is given)")
            results = [self._result(item) for item in plan.items]
            if sv.rank == 0:
                md = getattr(planner, "metadata", None)
                if not isinstance(md, Metadata):
                    raise UnsupportedError("libckpt.dcp: the save planner keeps no global Metadata "
                                           "(planner.metadata, as DefaultSavePlanner has)")
                sv.metadata = md
            else:  # rank 0's finish() decides; this rank's part goes to the exchange now
                sv.drv.release()
                self._cur, self._last = None, sv
        except BaseException as e:
            self._give_up(f"rank {sp.rank}: {e}")
            raise
        results.append(WriteResult(index=MetadataIndex(f"{_PART_FQN}/{sp.rank}"), size_in_bytes=0,
                                   storage_data=_Part(sp.rank, sp.world, sv.step, sp.save_id,
                                                      sv.held if sv.staged else frozenset())))
        fut = Future()
        fut.set_result(results)
        return fut

    def finish(self, metadata, results):
        sv = self._cur
        if sv is None or sv.rank != 0:
            raise StateError("libckpt.dcp: finish() without this writer's write_data on rank 0")
        try:
            parts = {}
            for wl in results:
                for wr in wl:
                    sd = wr.storage_data
                    if isinstance(sd, _Part):
                        if (sd.step, sd.world) != (sv.step, sv.world):
                            raise StateError(f"libckpt.dcp: rank {sd.rank} wrote step {sd.step} of "
                                             f"{sd.world} ranks, rank 0 step {sv.step} of "
                                             f"{sv.world}")
                        parts[sd.rank] = sd
            if sorted(parts) != list(range(sv.world)):
                raise StateError(f"libckpt.dcp: parts of ranks {sorted(parts)}, expected "
                                 f"0..{sv.world - 1}")
            if metadata is not sv.metadata and (sv.metadata is None or metadata.state_dict_metadata
                                                != sv.metadata.state_dict_metadata):
                raise StateError("libckpt.dcp: finish() got other metadata than the planner held "
                                 "in write_data (a planner that changes it is not supported)")
            if sv.staged:
                _check_held(metadata, frozenset().union(*(p.held for p in parts.values())))
            metadata.storage_data = _storage_data(results)
            sv.drv.set_meta(METADATA_KEY, _pack(metadata).decode(), "DCP metadata")
        except BaseException as e:
            self._give_up(str(e))
            raise
        sv.drv.release()
        self._cur = None
        self._wait(sv)

    # -------------------------------------------------------------- the parts
    def _result(self, item):
        fqn = item.index.fqn
        if item.type == WriteItemType.BYTE_IO:
            return WriteResult(index=item.index, size_in_bytes=0,
                               storage_data=_Item(fqn, "bytes"))
        nbytes = _numel(item.tensor_data.chunk.sizes) * item.tensor_data.properties.dtype.itemsize
        return WriteResult(index=item.index, size_in_bytes=nbytes, storage_data=_Item(fqn, "tensor"))

    def _add(self, sv, fqn, t, gshape, off, replica=0, nreplicas=1):
        """One box of global tensor fqn from tensor t (contiguous; kept until the snapshot)."""
        lshape = tuple(t.shape)
        if not t.numel():  # an empty chunk (an uneven split's last rank) holds nothing
            return
        sv.drv.add(fqn, _dtype(t, fqn), lshape, _mem(t), t.data_ptr(), global_shape=gshape,
                   offsets=off, replica=replica, nreplicas=nreplicas, what=f"DCP item {fqn!r}")
        sv.drv.keep.append(t)
        sv.mems.add(_mem(t))

    def _bytes(self, sv, fqn, data):
        import torch
        t = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.empty(0)
        self._add(sv, fqn, t, (len(data),), (0,))

    def _add_plan(self, sv, plan, planner):
        """dcp.save: the items DCP's plan gives this rank (already deduplicated by DCP)."""
        for item in plan.items:
            fqn = item.index.fqn
            if item.type == WriteItemType.BYTE_IO:
                self._bytes(sv, fqn, planner.resolve_data(item).getvalue())
                continue
            t = planner.resolve_data(item).detach()
            t = t.to("cpu").contiguous() if t.device.type != "cpu" else t.contiguous()
            ch = item.tensor_data.chunk
            if tuple(t.shape) != tuple(ch.sizes):
                raise InvalidArgumentError(f"DCP item {fqn!r}: data of shape {list(t.shape)} "
                                           f"for a chunk of {list(ch.sizes)}")
            self._add(sv, fqn, t, tuple(item.tensor_data.size), tuple(ch.offsets))

    def _add_staged(self, sv, state_dict):
        """dcp.async_save's staging: every item of this rank's state, as DCP's default planner
        names them (its create_local_plan), saved once across ranks: a DTensor's box by its
        replicas in turn (ckpt_save_add with nreplicas splits it), a plain tensor whole by
        one rank (_assign), an object (BYTE_IO) by rank 0."""
        from torch.distributed.checkpoint.default_planner import DefaultSavePlanner
        planner = DefaultSavePlanner()
        planner.set_up_planner(state_dict, None, sv.rank == 0)
        items = planner.create_local_plan().items
        plain = [(item.tensor_data.properties.dtype.itemsize * _numel(item.tensor_data.size),
                  item.index.fqn) for item in items if item.type == WriteItemType.TENSOR]
        owner = _assign(plain, sv.world)
        held = set()
        dm = D.dtensor_module()
        for item in items:
            fqn = item.index.fqn
            if item.type == WriteItemType.BYTE_IO:
                if sv.rank == 0:
                    self._bytes(sv, fqn, planner.resolve_data(item).getvalue())
                held.add((fqn, None))
                continue
            ch = item.tensor_data.chunk
            key = (fqn, tuple(int(o) for o in ch.offsets))
            held.add(key)
            if item.type == WriteItemType.TENSOR and owner[fqn] != sv.rank:
                continue
            obj = planner.state_dict[fqn]
            replica, n = (0, 1)
            if dm is not None and isinstance(obj, dm.DTensor):
                replica, n = _replica(obj)
            t = planner.resolve_data(item).detach()
            if not t.is_contiguous():
                t = t.contiguous()  # a copy: the pool takes contiguous boxes
            if tuple(t.shape) != tuple(ch.sizes):
                raise InvalidArgumentError(f"DCP item {fqn!r}: data of shape {list(t.shape)} "
                                           f"for a chunk of {list(ch.sizes)}")
            self._add(sv, fqn, t, tuple(item.tensor_data.size), key[1], replica, n)
        sv.held = frozenset(held)
        sv.staged = True

    # -------------------------------------------------------------- async_save's staging
    @property
    def should_synchronize_after_execute(self):
        return False

    def synchronize_staging(self):
        pass

    def stage(self, state_dict):
        """AsyncStager.stage (dcp.async_save, on every rank at once): begins this rank's part,
        snapshots the state into the store's pinned pool (host and CUDA tensors, on torch's
        current streams), and returns once the copy is done; hashing, writing and the commit go
        on in libckpt's pipeline and DCP's thread.  With stage_in_pool=False: a copy in host
        memory (cached between saves with cache_staged_state_dict), as DCP's default."""
        self._check_async_group(self._group_of())
        if not self._pool:
            from torch.distributed._state_dict_utils import _copy_state_dict, _create_cpu_state_dict
            if self._cache_sd is None or not self._cache:
                cache = _create_cpu_state_dict(state_dict, pin_memory=torch.cuda.is_available())
                if not self._cache:
                    return _copy_state_dict(state_dict, cache)
                self._cache_sd = cache
            return _copy_state_dict(state_dict, self._cache_sd)
        self._give_up("a new save was staged before the previous one's finish()")
        prepare = None
        if "pool_size" not in self._opts:
            # DCP's own stager holds a host copy of the state; the pool grows to hold it as
            # well (once: it is kept), so that async_save blocks for the copy only, not until
            # a default-sized pool drains to disk. A pool_size given bounds it instead.
            self._join_last()  # a pool is replaced only with no save in flight
            prepare = lambda store: store.reserve(state_dict)  # noqa: E731
        sv = self._begin(prepare)
        sv.where = (self._path, self._step)
        self._submit(sv, lambda: self._add_staged(sv, state_dict))
        return _freeze(state_dict)

    def close(self):
        """Gives up a save whose finish() never came, waits for the last commit, closes the
        store."""
        self._give_up("the writer was closed")
        self._join_last()
        if self._store is not None:
            self._store.close()
            self._store = None
        self._cache_sd = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass


_UNKNOWN = object()


def _async_save_group():
    """(the process_group that dcp.async_save was given, read from its frame: stage() is called
    from it, on the main thread, before DCP's thread starts; how many frames above the caller
    it is), or (_UNKNOWN, 0) when no dcp.async_save is found within a few frames."""
    f = sys._getframe(1)
    for depth in range(12):
        if f is None:
            break
        if f.f_code.co_name == "async_save" and \
                f.f_globals.get("__name__", "").startswith("torch.distributed.checkpoint"):
            return f.f_locals.get("process_group", _UNKNOWN), depth
        f = f.f_back
    return _UNKNOWN, 0


def _numel(size):
    n = 1
    for x in size:
        n *= int(x)
    return n


def _check_held(metadata, held):
    """Every chunk of DCP's metadata is in some rank's staged part (a planner other than
    DefaultSavePlanner may name items otherwise: then the save fails, naming one)."""
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata
    for fqn, md in metadata.state_dict_metadata.items():
        if isinstance(md, BytesStorageMetadata):
            keys = [(fqn, None)]
        else:
            keys = [(fqn, tuple(int(o) for o in c.offsets)) for c in md.chunks]
        for k in keys:
            if k not in held:
                raise UnsupportedError(f"libckpt.dcp: DCP's plan has item {k[0]!r} (offsets "
                                       f"{list(k[1] or ())}) that the staging did not save: a "
                                       f"planner other than DefaultSavePlanner? use "
                                       f"LibckptStorageWriter(stage_in_pool=False) with it")


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
                text = r.get_meta(METADATA_KEY)
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
        with self._store() as store, store._open_reader(self._resolved, as_saved=False) as v:
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
