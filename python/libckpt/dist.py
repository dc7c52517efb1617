"""Multi-rank checkpoints from torch.distributed: Shard leaves, collective save / save_async /
restore over a process group, and the consolidated load of a multi-rank checkpoint (libckpt's
save with a communicator and its global-tensor reader; docs/format.md, version 2).

Which collectives run where (the rule every rank follows):
- libckpt's collectives (ckpt_comm: allgather, broadcast, barrier) and the binding's own small
  exchanges (plan, outcome) run on a *dedicated gloo group* over the ranks of the caller's group
  (DistGroup, made once per group with new_group(backend="gloo")), never on the caller's group
  itself: a save_async commit runs them on a background thread, and torch.distributed does not
  order collectives issued on one group from two threads (ranks could pair the training
  thread's all_reduce with our allgather).  On a group of its own they cannot meet.
- On that group the binding issues its collectives from one thread at a time per process, in
  program order: a multi-rank save, restore or wait on a Store first waits for the multi-rank save
  still in flight on it.  As long as every rank calls save / save_async / restore in the same
  order (as collectives must be called), every rank issues the same collectives in the same
  order.
- Timeouts: the dedicated group gets the caller's group's timeout (or DistGroup(timeout=...)), so a
  dead or hung rank makes every other rank raise within that time.
"""

import ctypes
import datetime
import importlib
import operator
import os
import socket
import threading
import time

from . import _lib as L
from . import _tree as T
from .errors import CkptIOError, InvalidArgumentError, UnsupportedError

LOCAL = object()  # group=libckpt.LOCAL: this process alone, even under an initialized group
DIST_WORLD_KEY = "ckpt.dist.world"

_u64s = L.u64s


# The largest extent or byte size a torch tensor or numpy array can have (their sizes are signed
# 64-bit), which is below what libckpt takes (unsigned 64-bit; ctypes would wrap larger numbers
# and negative ones without a word: -1 became 2^64 - 1).
MAX_EXTENT = (1 << 63) - 1


def _bad(msg):
    return InvalidArgumentError(msg, code=InvalidArgumentError.code, name="invalid argument")


def _ints(what, field, vals):
    try:
        return tuple(operator.index(v) for v in vals)
    except TypeError as e:
        raise _bad(f"{what}: {field} must be a sequence of integers ({e})") from None


def check_box(what, shape, global_shape, offset, itemsize):
    """Raises InvalidArgumentError (libckpt's CKPT_E_INVAL) naming `what` and the dimension
    unless the box of `shape` at `offset` lies inside `global_shape`, every number is an extent a
    tensor can have, and the global tensor's byte size fits in one (so that loading it can
    allocate it)."""
    nd = len(shape)
    if len(global_shape) != nd or len(offset) != nd or nd > 32:
        raise _bad(f"{what}: a {nd}-d tensor needs a {nd}-d global_shape and offset, at most 32 "
                   f"(got {list(global_shape)} and {list(offset)})")
    total = itemsize
    for d, (n, gd, od) in enumerate(zip(shape, global_shape, offset)):
        if not 0 <= gd <= MAX_EXTENT:
            raise _bad(f"{what}: dimension {d}: global extent {gd} is not between 0 and 2^63 - 1")
        if od < 0 or od + n > gd:
            raise _bad(f"{what}: dimension {d}: the box [{od}, {od + n}) lies outside the global "
                       f"extent {gd}")
        total *= gd
    if total > MAX_EXTENT:
        raise _bad(f"{what}: global shape {list(global_shape)} is {total} bytes, more than a "
                   f"tensor can hold (2^63 - 1)")


# ---------------------------------------------------------------------------------- leaves
class Shard:
    """A state leaf saying "this tensor is this rank's box of a global tensor": `tensor` (torch or
    NumPy, this rank's piece) sits at `offset` of a global tensor of `global_shape`.  The boxes
    of all ranks must tile the global tensor (boxes held by several ranks are saved once).  As a
    restore target, the box is read from the checkpoint into `tensor`, whatever the split of the
    save."""

    _libckpt_box = True  # what _restore.merge takes as a tensor target

    def __init__(self, tensor, global_shape, offset):
        if not (T.is_torch_tensor(tensor) or T.is_np_array(tensor)):
            raise TypeError(f"Shard: expected a torch tensor or numpy array, got "
                            f"{type(tensor).__name__}")
        shape = tuple(int(s) for s in tensor.shape)
        g, o = _ints("Shard", "global_shape", global_shape), _ints("Shard", "offset", offset)
        itemsize = tensor.element_size() if T.is_torch_tensor(tensor) else tensor.itemsize
        check_box("Shard", shape, g, o, itemsize)
        self.tensor, self.global_shape, self.offset = tensor, g, o

    def __repr__(self):
        return (f"libckpt.Shard({type(self.tensor).__name__} {list(self.tensor.shape)}, "
                f"global_shape={list(self.global_shape)}, offset={list(self.offset)})")

    @classmethod
    def from_dtensor(cls, dt):
        """The Shard a DTensor is on this rank (its local tensor and its box); UnsupportedError
        when this torch has no DTensor.  Save and restore take DTensor leaves as they are."""
        local, g, off = dtensor_box(dt)
        return cls(local, g, off)


class FlatShard:
    """A state leaf saying "this rank holds elements [offset, offset + numel) of a global tensor
    of `global_shape`, in row-major order": a flattened range, as FSDP1's flat parameters and
    Megatron's distributed optimizer hold their state.  `tensor` (torch or NumPy, any shape; its
    elements in row-major order are the range's) holds them.  The ranks' ranges (and Shard boxes)
    must tile the global tensor; a range several ranks hold alike is saved once.  libckpt saves
    a range as the at most 2 * ndim - 1 boxes it is made of (ckpt_save_add of a range), so the
    checkpoint loads, exports and reshards like any sharded tensor.  As a restore target, the
    range is read into `tensor`, whatever split of ranges or boxes saved it."""

    _libckpt_box = True  # what _restore.merge takes as a tensor target

    def __init__(self, tensor, global_shape, offset):
        if not (T.is_torch_tensor(tensor) or T.is_np_array(tensor)):
            raise TypeError(f"FlatShard: expected a torch tensor or numpy array, got "
                            f"{type(tensor).__name__}")
        g = _ints("FlatShard", "global_shape", global_shape)
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise _bad(f"FlatShard: offset must be a whole number >= 0, got {offset!r}")
        numel, vol = 1, 1
        for s in tensor.shape:
            numel *= int(s)
        for s in g:
            vol *= s
        if offset + numel > vol:
            raise _bad(f"FlatShard: elements [{offset}, {offset + numel}) lie outside the global "
                       f"tensor's {vol} (global_shape {list(g)})")
        self.tensor, self.global_shape, self.offset = tensor, g, offset

    @property
    def numel(self):
        n = 1
        for s in self.tensor.shape:
            n *= int(s)
        return n

    def __repr__(self):
        return (f"libckpt.FlatShard({type(self.tensor).__name__} {list(self.tensor.shape)}, "
                f"global_shape={list(self.global_shape)}, offset={self.offset})")


FLAT = "F"  # the third member of a Leaf.box that is a flattened range: (global shape, offset, FLAT)


def dtensor_module():
    """torch.distributed.tensor (torch >= 2.4) or torch.distributed._tensor (2.0 - 2.3), or None."""
    for name in ("torch.distributed.tensor", "torch.distributed._tensor"):
        try:
            m = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(m, "DTensor"):
            return m
    return None


def require_dtensor():
    m = dtensor_module()
    if m is None:
        import torch
        raise UnsupportedError(
            f"DTensor is not available in torch {torch.__version__} (neither "
            f"torch.distributed.tensor nor torch.distributed._tensor has DTensor; it needs torch "
            f"2.x): use libckpt.Shard(tensor, global_shape=..., offset=...) leaves instead",
            code=UnsupportedError.code, name="unsupported")
    return m


def is_dtensor(x):
    # by name first: a state full of tensors must not import torch.distributed.tensor per leaf
    if type(x).__name__ != "DTensor" or not T.is_torch_tensor(x):
        return False
    m = dtensor_module()
    return m is not None and isinstance(x, m.DTensor)


def dtensor_box(dt):
    """(local tensor, global shape, offsets) of a DTensor on this rank: Shard(dim) placements
    split as torch does (chunks of ceil(n / mesh size)), Replicate keeps the dimension whole;
    Partial (pending reductions) is refused."""
    m = require_dtensor()
    if not isinstance(dt, m.DTensor):
        raise TypeError(f"expected a DTensor, got {type(dt).__name__}")
    # the local tensor itself (to_local() may return a view through autograd): restore fills it
    local = getattr(dt, "_local_tensor", None)
    local = dt.to_local() if local is None else local
    g = tuple(int(s) for s in dt.shape)
    for p in dt.placements:
        if not (p.is_shard() or p.is_replicate()):
            raise UnsupportedError(f"DTensor with placement {p}: only Shard(dim) and Replicate "
                                   f"are saved (reduce a Partial first)",
                                   code=UnsupportedError.code, name="unsupported")
    try:  # torch's own computation, where this torch has it
        from torch.distributed.tensor._utils import compute_local_shape_and_global_offset as f
    except ImportError:
        try:
            from torch.distributed._tensor._utils import compute_local_shape_and_global_offset as f
        except ImportError:
            f = None
    if f is not None:
        _, off = f(dt.shape, dt.device_mesh, dt.placements)
        off = tuple(int(o) for o in off)
    else:
        mesh = dt.device_mesh
        off, _ = placement_box(g, [mesh.size(i) for i in range(mesh.ndim)],
                               mesh.get_coordinate(), dt.placements)
    if len(off) != len(g):
        raise UnsupportedError(f"DTensor of shape {list(g)}: cannot place its local tensor",
                               code=UnsupportedError.code, name="unsupported")
    return local, g, off


def placement_box(global_shape, mesh_sizes, coord, placements):
    """(offsets, lengths) of the box that mesh coordinate `coord` holds of a tensor of
    global_shape under placements (one per mesh dimension): Shard(d) splits dimension d as
    torch.chunk does (chunks of ceil(n / k), the last ones shorter or empty), nested in mesh
    order; Replicate keeps it whole."""
    off, lens = [0] * len(global_shape), [int(n) for n in global_shape]
    for i, p in enumerate(placements):
        if p.is_shard():
            d, k = p.dim, mesh_sizes[i]
            chunk = -(-lens[d] // k)
            start = min(coord[i] * chunk, lens[d])
            off[d] += start
            lens[d] = min(start + chunk, lens[d]) - start
    return tuple(off), tuple(lens)


def _leaf_hook(x):
    if isinstance(x, Shard):
        return x.tensor, (x.global_shape, x.offset)
    if isinstance(x, FlatShard):
        return x.tensor, (x.global_shape, x.offset, FLAT)
    if is_dtensor(x):
        local, g, off = dtensor_box(x)
        return local, (g, off)
    return None


def holds_boxes(state):
    """True when state has a Shard, FlatShard or DTensor leaf anywhere (plain containers only)."""
    if isinstance(state, (Shard, FlatShard)) or is_dtensor(state):
        return True
    if isinstance(state, dict):
        return any(holds_boxes(v) for v in state.values())
    if isinstance(state, (list, tuple)):
        return any(holds_boxes(v) for v in state)
    return False


# ---------------------------------------------------------------------------------- the group
_groups = {}
_groups_lock = threading.Lock()


def _group_timeout(pg):
    """The timeout of a torch process group, where this torch tells it (else torch's default)."""
    import torch
    for get in (lambda: pg.options._timeout,  # torch 1.x
                lambda: pg._get_backend(torch.device("cpu")).options._timeout,  # 2.x, gloo
                lambda: pg._get_backend(torch.device("cuda")).options._timeout):  # 2.x, NCCL
        try:
            t = get()
            if isinstance(t, datetime.timedelta):
                return t
        except Exception:  # noqa: BLE001  attribute layout differs between torch versions
            pass
    import torch.distributed.distributed_c10d as c10d
    return c10d.default_pg_timeout


def _proc_start(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except OSError:
        return None, None
    fields = s[s.rindex(")") + 2:].split()
    return fields[0], fields[19]  # state, starttime


class DistGroup:
    """libckpt's own gloo group over the ranks of a torch.distributed group (see the module's
    docstring for why).  Creating one is collective over the *default* group (new_group's rule):
    every process calls it, in the same order.  Store.save/restore(group=G) make one for G on
    first use; with several subgroups call libckpt.dist_group(G) on every process first."""

    def __init__(self, group=None, timeout=None):
        import torch.distributed as dist
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError("libckpt: a multi-rank save or restore needs torch.distributed to be "
                               "initialized (init_process_group), or pass group=libckpt.LOCAL")
        base = dist.group.WORLD if group is None else group
        self.ranks = list(dist.get_process_group_ranks(base))
        self.timeout = timeout if timeout is not None else _group_timeout(base)
        try:
            self.pg = dist.new_group(ranks=self.ranks, timeout=self.timeout, backend="gloo")
        except Exception as e:  # noqa: BLE001  gloo raises RuntimeError ("Wait timeout")
            raise CkptIOError(
                f"libckpt, rank {dist.get_rank()}: making libckpt's gloo group over ranks "
                f"{self.ranks} failed ({' '.join(str(e).split())[:300]}): new_group is "
                f"collective over the default group, every process must reach it (their first "
                f"multi-rank save or restore, or libckpt.dist_group) within the timeout",
                code=CkptIOError.code, name="I/O error") from e
        self.rank = dist.get_rank(self.pg)
        self.size = dist.get_world_size(self.pg)
        self.peers = None  # (host, pid, start time) of every rank, for naming a dead one
        _, start = _proc_start(os.getpid())
        self.peers = self.gather_object((socket.gethostname(), os.getpid(), start), "joining")

    def _run(self, what, fn):
        try:
            return fn()
        except Exception as e:  # noqa: BLE001  gloo raises RuntimeError for every failure
            raise CkptIOError(f"libckpt, rank {self.rank} of {self.size}: {what}: "
                              f"{self.describe(e)}", code=CkptIOError.code, name="I/O error") from e

    def gather_object(self, obj, what):
        import torch.distributed as dist
        out = [None] * self.size
        self._run(what, lambda: dist.all_gather_object(out, obj, group=self.pg))
        return out

    def gather_bytes(self, data, what):
        """Every rank's bytes (all of one length on every rank), in rank order: one all_gather
        of a small tensor, where gather_object costs two and the pickling."""
        import torch
        import torch.distributed as dist
        t = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        outs = [torch.empty_like(t) for _ in range(self.size)]
        self._run(what, lambda: dist.all_gather(outs, t, group=self.pg))
        return [bytes(o.numpy()) for o in outs]

    def broadcast_object(self, obj, what, root=0):
        import torch.distributed as dist
        box = [obj]
        self._run(what, lambda: dist.broadcast_object_list(box, src=self.ranks[root],
                                                           group=self.pg))
        return box[0]

    def node_group(self, nodes, mine):
        """The gloo group over the ranks of this process's node (nodes: every node's ranks, as
        indices in this group, lists in one order on every rank; mine: this node's), for
        broadcasts within the node; this group itself when the node holds all its ranks.  Made
        on first use and kept.  Collective over the node's ranks only (new_group with
        use_local_synchronization), or, with a torch that lacks it, over every process of the
        default group (each node's group made by every rank, in order) when this group spans
        it.  None where neither is possible (the caller then reads without sharing)."""
        import inspect
        import torch.distributed as dist
        if len(mine) == self.size:
            return self.pg
        key = tuple(mine)
        cache = self.__dict__.setdefault("_node_pgs", {})
        if key in cache:
            return cache[key]
        local = "use_local_synchronization" in inspect.signature(dist.new_group).parameters
        if not local and sorted(self.ranks) != list(range(dist.get_world_size())):
            return None

        def make(members):
            ranks = [self.ranks[r] for r in members]
            if local:
                return dist.new_group(ranks=ranks, timeout=self.timeout, backend="gloo",
                                      use_local_synchronization=True)
            return dist.new_group(ranks=ranks, timeout=self.timeout, backend="gloo")

        def run():
            if local:
                return make(mine)
            pgs = [make(m) for m in nodes]  # every rank makes every node's, in one order
            return pgs[[tuple(m) for m in nodes].index(key)]
        cache[key] = self._run("making the group of this node's ranks", run)
        return cache[key]

    def dead_peers(self, wait=5.0):
        """Ranks on this host whose process is gone (exited, or a zombie).  A peer's sockets
        close before it becomes a zombie, so a rank that sees the failure first polls briefly;
        ranks on other hosts cannot be checked here."""
        host = socket.gethostname()
        deadline = time.monotonic() + wait
        while True:
            dead = []
            for r, (h, pid, start) in enumerate(self.peers or ()):
                if r == self.rank or h != host:
                    continue
                st, s = _proc_start(pid)
                if st is None or st in "ZX" or s != start:
                    dead.append((r, pid))
            if dead or time.monotonic() >= deadline:
                return dead
            time.sleep(0.05)

    def describe(self, exc):
        """A collective failed: which rank is gone (when it is on this host), and why."""
        text = " ".join(str(exc).split())[:600] or type(exc).__name__
        dead = self.dead_peers()
        t = int(self.timeout.total_seconds())
        if dead:
            names = ", ".join(f"rank {r} (pid {p})" for r, p in dead)
            return f"{names} of {self.size} died ({text})"
        remote = any(h != socket.gethostname() for h, _, _ in self.peers or ())
        return (f"a collective over libckpt's group failed or timed out (group timeout {t} s; "
                f"{'a rank on another host may have failed; ' if remote else ''}{text})")


def dist_group(group=None, timeout=None):
    """The DistGroup libckpt uses for `group` (None: the default group), made on first use."""
    import torch.distributed as dist
    key = dist.group.WORLD if group is None else group
    with _groups_lock:
        dg = _groups.get(id(key))
        if dg is None or dg[0] is not key:
            dg = (key, DistGroup(group, timeout))
            _groups[id(key)] = dg
        return dg[1]


def resolve_group(group):
    """The DistGroup for a Store call's group argument, or None for a single-process call."""
    if group is LOCAL:
        return None
    if isinstance(group, DistGroup):
        return group
    if group is None:
        try:
            import torch.distributed as dist
        except ImportError:
            return None
        if not (dist.is_available() and dist.is_initialized()):
            return None
    return dist_group(group)


# ---------------------------------------------------------------------------------- ckpt_comm
class _Comm:
    """ckpt_comm over a DistGroup (or over the sub-group pg of its ranks `members`, indices in
    it: a node's ranks): the library calls these from its commit thread (CKPT_SAVE_THREADED),
    from the thread in wait(), or in a collective read."""

    def __init__(self, dg, pg=None, members=None):
        self.dg = dg
        self.pg = dg.pg if pg is None else pg
        self.ranks = dg.ranks if members is None else [dg.ranks[m] for m in members]
        rank = dg.rank if members is None else list(members).index(dg.rank)
        self.local_fail = False  # abort without collectives: every rank already knows
        self._msg = ctypes.create_string_buffer(1024)
        self._cbs = (L.AG_FN(self._allgather), L.BC_FN(self._broadcast), L.BAR_FN(self._barrier),
                     L.ERR_FN(self._errmsg))
        self.struct = L.Comm(rank=rank, size=len(self.ranks), ctx=None, allgather=self._cbs[0],
                             broadcast=self._cbs[1], barrier=self._cbs[2], errmsg=self._cbs[3])

    def _fail(self, exc):
        msg = self.dg.describe(exc) if not isinstance(exc, str) else exc
        self._msg.value = msg.encode(errors="replace")[:1023]
        return -CkptIOError.code

    def _allgather(self, _ctx, inp, n, out):
        if self.local_fail:
            return self._fail("the save was given up on every rank (see the first failure)")
        try:
            import torch
            import torch.distributed as dist
            t = torch.empty(n, dtype=torch.uint8)
            ctypes.memmove(t.data_ptr(), inp, n)
            outs = [torch.empty(n, dtype=torch.uint8) for _ in range(len(self.ranks))]
            dist.all_gather(outs, t, group=self.pg)
            for i, o in enumerate(outs):
                ctypes.memmove(out + i * n, o.data_ptr(), n)
            return 0
        except Exception as e:  # noqa: BLE001  an exception must not cross into C
            return self._fail(e)

    def _broadcast(self, _ctx, buf, n, root):
        if self.local_fail:
            return self._fail("the save was given up on every rank")
        try:
            import torch
            import torch.distributed as dist
            if n == 0:
                return 0
            # the bytes in place (a collective read's destination): no copy in or out
            t = torch.frombuffer((ctypes.c_uint8 * n).from_address(buf), dtype=torch.uint8)
            dist.broadcast(t, src=self.ranks[root], group=self.pg)
            return 0
        except Exception as e:  # noqa: BLE001
            return self._fail(e)

    def _barrier(self, _ctx):
        if self.local_fail:
            return self._fail("the save was given up on every rank")
        try:
            import torch.distributed as dist
            dist.barrier(group=self.pg)
            return 0
        except Exception as e:  # noqa: BLE001
            return self._fail(e)

    def _errmsg(self, _ctx):
        return ctypes.addressof(self._msg) if self._msg.value else None
