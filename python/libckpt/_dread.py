"""Reading multi-rank checkpoints: Store.restore with Shard / DTensor targets (any split and world
size; collective with a group) and the consolidated Store.load of a multi-rank checkpoint, over
ckpt_dist_reader_* (each box reads only the chunks under it)."""

import contextlib
import ctypes

from . import _lib as L
from . import _restore as R
from . import _select as S
from . import _tree as T
from . import dist as D
from ._common import _step_arg, order_after_current
from ._target import _alloc, _check_target
from .errors import (CkptError, CkptIOError, CkptMemoryError, CorruptError, MismatchError,
                     NotFoundError, UnsupportedError, error_class)


class _View:
    """A checkpoint's global tensors, as _restore.Plan reads a checkpoint (names, find, tensor).
    step may be L.STEP_LATEST where the library has ckpt_dist_reader_checkpoint: self.step is
    then the step that open resolved it to."""

    def __init__(self, store, step):
        out = ctypes.c_void_p()
        with store._lock:
            L.check(D.lib().ckpt_dist_reader_open(store._handle(), step, ctypes.byref(out)))
        self.ptr, self.step, self._names = out.value, step, None
        if L.has("ckpt_dist_reader_checkpoint"):
            inf = L.Info()
            L.load().ckpt_reader_info(self.base(), ctypes.byref(inf))
            self.step = inf.step

    def base(self):
        """The checkpoint reader this view reads through (the view's: not to be closed)."""
        return L.load().ckpt_dist_reader_checkpoint(self.ptr)

    def __enter__(self):
        return self

    def __exit__(self, *a):
        D.lib().ckpt_dist_reader_close(self.ptr)
        self.ptr = None

    def world(self):
        return D.lib().ckpt_dist_reader_world_size(self.ptr)

    def tensor(self, i):
        ti = L.TensorInfo()
        L.check(D.lib().ckpt_dist_reader_tensor(self.ptr, i, ctypes.byref(ti)))
        return L.tensor_dict(ti)

    def names(self):
        if self._names is None:
            n = D.lib().ckpt_dist_reader_tensor_count(self.ptr)
            self._names = {self.tensor(i)["name"]: i for i in range(n)}
        return self._names

    def find(self, name):
        idx = self.names().get(name)
        if idx is None:
            raise NotFoundError(f"no tensor {name!r} in checkpoint {self.step}",
                                code=NotFoundError.code, name="not found")
        return idx


def multi_rank(r):
    """True for a checkpoint (an open store._Reader) saved by several ranks (format version 2)."""
    return L.load().ckpt_reader_get_meta(r.ptr, D.DIST_WORLD_KEY.encode()) is not None


_box_mem_fn = None


def _box_mem():
    """ckpt_dist_reader_restore_box_mem (a box into host or CUDA memory) with its prototype, or
    None in a libckpt without it."""
    global _box_mem_fn
    if _box_mem_fn is None:
        f = getattr(D.lib(), "ckpt_dist_reader_restore_box_mem", None)
        if f is not None:
            u64p = ctypes.POINTER(ctypes.c_uint64)
            f.restype = ctypes.c_int
            f.argtypes = [ctypes.c_void_p, ctypes.c_size_t, u64p, u64p, ctypes.c_int,
                          ctypes.c_void_p, u64p, ctypes.c_uint64]
        _box_mem_fn = f or False
    return _box_mem_fn or None


def _fill_cuda(v, idx, x, offa, lena, shape, n):
    """Reads the box into CUDA tensor x in place (libckpt stages it through pinned memory): True,
    or False when x's layout or this libckpt (no box_mem, no CUDA provider) does not allow it."""
    fn = _box_mem()
    st = x.stride()
    if fn is None or not all(s > 0 for s, d in zip(st, shape) if d > 1):
        return False
    import torch
    es = x.element_size()
    # pending work on x runs first: the copies follow torch's current stream
    order_after_current(v.base(), {x.device.index})
    if x.is_contiguous():
        strides, size = None, n * es
    else:
        strides, size = D._u64s(st), (sum((d - 1) * s for s, d in zip(st, shape)) + 1) * es
    try:
        L.check(fn(v.ptr, idx, offa, lena, x.device.index, x.data_ptr(), strides, size))
    except UnsupportedError:
        return False  # no CUDA provider in libckpt: staged on the host by the caller
    return True


def _fill_range(v, idx, t, offset):
    """Reads elements [offset, offset + t's numel) of global tensor idx, in row-major order, into
    t (a FlatShard's tensor): straight into contiguous CPU memory, else through a host buffer."""
    n = 1
    for s in t.shape:
        n *= int(s)
    if n == 0:
        return
    fn = D.range_fn("ckpt_dist_reader_restore_range")
    if T.is_np_array(t):
        import numpy as np
        if t.flags.c_contiguous and t.flags.writeable and (t.dtype.isnative or t.itemsize == 1):
            L.check(fn(v.ptr, idx, offset, n, L.MEM_HOST, t.__array_interface__["data"][0],
                       t.nbytes))
            return
        tmp = np.empty(t.shape, t.dtype.newbyteorder("="))
        _fill_range(v, idx, tmp, offset)
        np.copyto(t, tmp)
        return
    import torch
    x = t.detach()
    if x.device.type == "cpu" and x.is_contiguous():
        L.check(fn(v.ptr, idx, offset, n, L.MEM_HOST, x.data_ptr(), n * x.element_size()))
        return
    tmp = torch.empty(tuple(x.shape), dtype=x.dtype, pin_memory=x.device.type == "cuda")
    _fill_range(v, idx, tmp, offset)
    with torch.no_grad():
        x.copy_(tmp)


def _fill(v, idx, t, off):
    """Reads the box of global tensor idx at `off` with t's extent into t (torch or numpy, any
    device or layout): straight into contiguous (or positively strided) CPU or CUDA memory, else
    through a contiguous host buffer. off ("F", offset): the flattened range at offset."""
    if off and off[0] == "F":
        _fill_range(v, idx, t, off[1])
        return
    shape = tuple(int(s) for s in t.shape)
    n = 1
    for s in shape:
        n *= s
    if n == 0:
        return
    lb = D.lib()
    offa, lena = D._u64s(off), D._u64s(shape)
    if T.is_np_array(t):
        import numpy as np
        if t.flags.c_contiguous and t.flags.writeable and (t.dtype.isnative or t.itemsize == 1):
            L.check(lb.ckpt_dist_reader_restore_box(v.ptr, idx, offa, lena,
                                                    t.__array_interface__["data"][0], t.nbytes))
            return
        tmp = np.empty(shape, t.dtype.newbyteorder("="))
        _fill(v, idx, tmp, off)
        np.copyto(t, tmp)
        return
    import torch
    x = t.detach()
    es = x.element_size()
    if x.device.type == "cuda" and _fill_cuda(v, idx, x, offa, lena, shape, n):
        return
    if x.device.type == "cpu" and x.is_contiguous():
        L.check(lb.ckpt_dist_reader_restore_box(v.ptr, idx, offa, lena, x.data_ptr(), n * es))
        return
    st = x.stride()
    if x.device.type == "cpu" and all(s > 0 for s, d in zip(st, shape) if d > 1):
        # a column block of a matrix, a transposed view: written in place, element by element
        span = sum((d - 1) * s for s, d in zip(st, shape)) + 1
        L.check(lb.ckpt_dist_reader_restore_box_strided(v.ptr, idx, offa, lena, x.data_ptr(),
                                                        D._u64s(st), span * es))
        return
    tmp = torch.empty(shape, dtype=x.dtype, pin_memory=x.device.type == "cuda")
    _fill(v, idx, tmp, off)
    with torch.no_grad():
        x.copy_(tmp)


def _ckpt_dtype(t):
    if T.is_torch_tensor(t):
        return T.torch_dtypes().get(t.dtype)
    return T.np_dtypes().get(t.dtype.name)


def _job(v, name, obj, step):
    """(index, tensor to fill, offsets) for a restore target, checked against the checkpoint."""
    idx = v.find(name)
    ti = v.tensor(idx)
    if isinstance(obj, D.FlatShard):
        if _ckpt_dtype(obj.tensor) != ti["ckpt_dtype"]:
            raise MismatchError(f"tensor {name!r}: dtype mismatch: checkpoint {step} has "
                                f"{ti['dtype']}, the target range is {obj.tensor.dtype} (no "
                                f"conversion is made)")
        if tuple(obj.global_shape) != tuple(ti["shape"]):
            raise MismatchError(f"tensor {name!r}: global shape mismatch: checkpoint {step} has "
                                f"{list(ti['shape'])}, the target range says "
                                f"{list(obj.global_shape)}")
        return idx, obj.tensor, ("F", obj.offset)
    if isinstance(obj, D.Shard) or D.is_dtensor(obj):
        t, g, off = (obj.tensor, obj.global_shape, obj.offset) if isinstance(obj, D.Shard) \
            else D.dtensor_box(obj)
        if _ckpt_dtype(t) != ti["ckpt_dtype"]:
            raise MismatchError(f"tensor {name!r}: dtype mismatch: checkpoint {step} has "
                                f"{ti['dtype']}, the target shard is {t.dtype} (no conversion is "
                                f"made)")
        if tuple(g) != tuple(ti["shape"]):
            raise MismatchError(f"tensor {name!r}: global shape mismatch: checkpoint {step} has "
                                f"{list(ti['shape'])}, the target shard says {list(g)}")
        return idx, t, tuple(off)
    _check_target(name, ti, obj, step)
    return idx, obj, (0,) * len(ti["shape"])


class _Restore:
    """One restore in two phases, so that a group checks every rank's targets before any rank
    writes: plan() (every check; what the checkpoint holds that state lacks), then fill()."""

    def __init__(self, tree, v, state, strict):
        """tree: the checkpoint's saved structure (None: another tool's); v: its open _View,
        which stays the caller's to close."""
        self.tree, self.v, self.step = tree, v, v.step
        self.state, self.strict = state, strict
        self.plan, self.jobs = None, []

    def check(self):
        """Plans and checks; returns the saved entries this state has no place for."""
        v = self.v
        plan = self.plan = R.Plan(v, lambda kind, ti: _alloc(kind, ti, None), self.strict)
        R.merge(self.state, R.NOTREE if self.tree is None else self.tree, [], plan, apply=False)
        self.jobs = [_job(v, name, obj, self.step) for name, obj in plan.found]
        self.jobs += [(idx, obj, (0,) * len(ti["shape"])) for idx, ti, obj in plan.fresh]
        if self.tree is None:
            used = {n for n, _ in plan.found} | {ti["name"] for _, ti, _ in plan.fresh}
            plan.dropped += [n for n in v.names() if n not in used]
        return sorted(set(plan.dropped))

    def fill(self, dropped):
        res = self.fill_reads(dropped)
        self.apply()
        return res

    def fill_reads(self, dropped, skip=()):
        """The strict check and every read but those of the entries in skip (indices another
        rank of the node reads for this one)."""
        plan = self.plan
        plan.dropped = list(dropped)
        dropped = R.finish(plan, self.strict, self.step)
        for idx, t, off in self.jobs:
            if idx not in skip:
                _fill(self.v, idx, t, off)
        return R.RestoreResult(self.step, dropped)

    def apply(self):
        """What follows the reads: Stateful objects loaded, non-tensor values merged."""
        R.load_stateful(self.plan, self.strict)
        if self.tree is not None:
            R.merge(self.state, self.tree, [], self.plan, apply=True)

    def whole(self):
        """The global tensors this rank restores whole, into one target each (the entries a
        node's ranks may read once and share): their indices, ascending."""
        seen, whole = {}, set()
        for idx, t, off in self.jobs:
            seen[idx] = seen.get(idx, 0) + 1
            shape = tuple(self.v.tensor(idx)["shape"])
            n = _numel(t.shape)
            if off and off[0] == "F":
                ok = off[1] == 0 and n == _numel(shape)
            else:
                ok = tuple(int(x) for x in t.shape) == shape and not any(off)
            if ok and n > 0:
                whole.add(idx)
        return sorted(i for i in whole if seen[i] == 1)


def _numel(shape):
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _bytes_read(v):
    st = L.Stats()
    L.load().ckpt_reader_stats(v.base(), ctypes.byref(st))
    return int(st.bytes_read)


def node_key():
    """This process's node, as the ranks of a group compare it: host name and boot id (two
    containers of one host with one name are still two kernels only if their boot ids differ)."""
    import socket
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()}/{boot}"


class _Share:
    """Replicated entries read once per node: of the global tensors that every
    rank of a node restores whole, each is read (and verified) by one rank of the node, the
    largest first to the least loaded rank so that the node's reads run in parallel, and
    broadcast to the others over the node's gloo group.  Every rank computes the same plan from
    the exchanged checks."""

    def __init__(self, dg, v, nodes, wholes):
        me = nodes[dg.rank]
        self.members = [r for r in range(dg.size) if nodes[r] == me]
        order = []
        for n in nodes:
            if n not in order:
                order.append(n)
        self.nodes = [[r for r in range(dg.size) if nodes[r] == n] for n in order]
        common = set(wholes[self.members[0]])
        for r in self.members[1:]:
            common &= set(wholes[r])
        sizes = {i: v.tensor(i)["nbytes"] for i in common} if len(self.members) > 1 else {}
        load = dict.fromkeys(self.members, 0)
        self.reader = {}
        for i in sorted(sizes, key=lambda i: (-sizes[i], i)):
            r = min(self.members, key=lambda m: (load[m], m))
            self.reader[i] = r
            load[r] += sizes[i]
        self.sizes = sizes
        self.names = {i: v.tensor(i)["name"] for i in sizes}
        self.pg = None

    def active(self):
        return bool(self.reader)

    def skip(self, rank):
        """The entries rank receives instead of reading."""
        return {i for i, r in self.reader.items() if r != rank}

    def broadcast(self, dg, jobs, what):
        """Sends this rank's entries to the node's other ranks and receives theirs, entry by entry
        in index order (the same on every rank).  Returns the bytes received."""
        import torch.distributed as dist
        targets = {idx: t for idx, t, _ in jobs}
        got = 0
        for i in sorted(self.reader):
            src = self.reader[i]
            t = targets[i]
            buf, back = _wire(t, src == dg.rank)
            dg._run(f"{what}: sharing global tensor {self.names[i]!r} from rank {src}",
                    lambda: dist.broadcast(buf, src=dg.ranks[src], group=self.pg))
            if src != dg.rank:
                back()
                got += self.sizes[i]
        return got


def _wire(t, sending):
    """A contiguous CPU uint8 tensor over the bytes of target t (a torch tensor or numpy array, in
    native byte order) to broadcast, and what copies a received one into t (nothing when the
    tensor is t's own memory)."""
    import torch
    if T.is_np_array(t):
        import numpy as np
        native = t.dtype.newbyteorder("=")
        if t.flags.c_contiguous and t.flags.writeable and (t.dtype.isnative or t.itemsize == 1):
            return torch.from_numpy(t.reshape(-1).view(np.uint8)), lambda: None
        a = np.ascontiguousarray(t, dtype=native) if sending else np.empty(t.shape, native)
        return (torch.from_numpy(a.reshape(-1).view(np.uint8)),
                lambda: np.copyto(t, a))
    x = t.detach()
    if x.device.type == "cpu" and x.is_contiguous():
        return x.reshape(-1).view(torch.uint8), lambda: None
    tmp = x.contiguous().cpu() if sending else torch.empty(tuple(x.shape), dtype=x.dtype)

    def back():
        with torch.no_grad():
            x.copy_(tmp)
    return tmp.reshape(-1).view(torch.uint8), back


def restore_local(r, v, state, strict):
    """Restores state from an open checkpoint (single- or multi-rank: store._Reader r and its
    _View v) on this process alone."""
    rs = _Restore(r.tree(), v, state, strict)
    return rs.fill(rs.check())


def _raise_remote(what, outs):
    bad = [(r, o) for r, o in enumerate(outs) if o is not None]
    if bad:
        r, (code, msg) = bad[0]
        cls = error_class(code) if code else CkptError
        raise cls(f"{what}: rank {r} failed: {msg}", code=code or CkptIOError.code,
                  name=L.load().ckpt_strerror(code or CkptIOError.code).decode())


def _outcome(err):
    return None if err is None else (getattr(err, "code", 0) or 0, f"{type(err).__name__}: {err}")


def restore(store, state, step, strict, dg, share=True):
    """Store.restore with a group: every rank restores the same checkpoint (rank 0 resolves
    'latest'); every rank's targets are checked before any rank writes; an entry counts as left
    out (strict) only when no rank restores it; a failure on any rank raises on every rank,
    naming it.  The same collectives run on every rank whatever fails."""
    _step_arg(step)  # a bad argument raises alike on every rank, before any collective
    store._dist_wait()
    with contextlib.ExitStack() as opened:
        return _restore_group(store, opened, state, step, strict, dg, share)


def _restore_group(store, opened, state, step, strict, dg, share):
    """restore() once the checkpoints it opens are closed by opened (an ExitStack). Rank 0's
    open resolves 'latest' and stays the checkpoint it restores (a second open by the step
    could find it pruned meanwhile); the other ranks open the step it broadcasts."""
    s, rv = None, None
    if dg.rank == 0:
        try:
            rv = opened.enter_context(store._open_checkpoint(step, boxes=True))
            s = ("ok", rv[1].step)
        except Exception as e:  # noqa: BLE001  every rank raises it
            s = ("err", getattr(e, "code", 0) or 0, f"{type(e).__name__}: {e}")
    s = dg.broadcast_object(s, "restore: agreeing on the step")
    if s[0] == "err":
        _raise_remote("restore", [(s[1], s[2])])
    what = f"restore of checkpoint {s[1]}"
    rs, err, mine, whole = None, None, [], []
    try:
        if rv is None:
            rv = opened.enter_context(store._open_checkpoint(s[1], boxes=True))
        rs = _Restore(rv[0].tree(), rv[1], state, strict)
        mine = rs.check()
        whole = rs.whole() if share else []
    except Exception as e:  # noqa: BLE001  reported to the other ranks, then raised here
        err = e
    outs = dg.gather_object((_outcome(err), mine, node_key(), whole),
                            f"{what}: exchanging the checks")
    if err is not None:
        raise err
    _raise_remote(what, [o[0] for o in outs])
    left = set(mine)
    for o in outs:
        left &= set(o[1])
    sh = _Share(dg, rs.v, [o[2] for o in outs], [o[3] for o in outs]) if share else None
    if sh is not None and sh.active():
        sh.pg = dg.node_group(sh.nodes, sh.members)  # collective over the node (or all) ranks
    if sh is not None and (sh.pg is None or not sh.active()):
        sh = None
    before, got = _bytes_read(rs.v), 0
    try:
        # raises (strict) alike on every rank; a read fails on the rank that reads it
        rs.fill_reads(sorted(left), sh.skip(dg.rank) if sh else ())
    except Exception as e:  # noqa: BLE001
        err = e
    if sh is not None:
        # the reading rank's failure (a damaged chunk) raises on every rank, before any
        # rank waits for a broadcast that would never come
        outs = dg.gather_object(_outcome(err), f"{what}: exchanging the reads")
        if err is not None:
            raise err
        _raise_remote(what, outs)
    try:
        if sh is not None:
            got = sh.broadcast(dg, rs.jobs, what)
        rs.apply()
    except Exception as e:  # noqa: BLE001
        err = e
    done = _bytes_read(rs.v) - before
    outs = dg.gather_object((_outcome(err), done), f"{what}: exchanging the outcome")
    if err is not None:
        raise err
    _raise_remote(what, [o[0] for o in outs])
    mine_read = sum(1 for r in sh.reader.values() if r == dg.rank) if sh else 0
    return R.RestoreResult(rs.step, mine, stats={
        "bytes_read": done, "bytes_read_per_rank": [o[1] for o in outs], "bytes_received": got,
        "shared_entries": len(sh.reader) if sh else 0, "entries_read_for_node": mine_read})


def alloc_checked(kind, ti, device, step):
    """_alloc for global tensor ti of checkpoint step, its shape checked first: an extent or a
    byte size no torch tensor or numpy array can have is CorruptError (a crafted checkpoint; it
    used to come back as torch's or numpy's own TypeError, ValueError or RuntimeError), and an
    allocation that fails is CkptMemoryError, both naming the tensor."""
    name, shape = ti["name"], tuple(ti["shape"])
    for d, n in enumerate(shape):
        if n > D.MAX_EXTENT:
            raise CorruptError(f"checkpoint {step}: global tensor {name!r}: dimension {d} is "
                               f"{n}, more than a tensor can have (2^63 - 1)",
                               code=CorruptError.code, name="corrupt data")
    if ti["nbytes"] > D.MAX_EXTENT:
        raise CorruptError(f"checkpoint {step}: global tensor {name!r} of shape {list(shape)} is "
                           f"{ti['nbytes']} bytes, more than a tensor can hold (2^63 - 1)",
                           code=CorruptError.code, name="corrupt data")
    try:
        return _alloc(kind, ti, device)
    except (MemoryError, RuntimeError) as e:  # torch: RuntimeError "can't allocate memory"
        raise CkptMemoryError(f"checkpoint {step}: global tensor {name!r}: cannot allocate its "
                              f"{ti['nbytes']} bytes (shape {list(shape)}): "
                              f"{' '.join(str(e).split())[:200]}", code=CkptMemoryError.code,
                              name="out of memory") from e


def load(r, v, device, keys, map_location):
    """Store.load of an open multi-rank checkpoint (store._Reader r and its _View v): the saved
    structure with every Shard leaf as its global tensor, assembled from all ranks' pieces."""
    pres = S.prefixes(keys) if keys is not None else None
    tree = r.tree()
    cache, targets, locs = {}, [], {}

    def tensor_for(kind, name, saved="cpu"):
        if name in cache:
            return cache[name]
        idx = v.find(name)
        ti = v.tensor(idx)
        dev = S.location(map_location, device, saved) if kind == "torch" else None
        obj = alloc_checked(kind, ti, dev, r.step)
        targets.append((idx, obj))
        cache[name] = obj
        locs[id(obj)] = saved
        return obj

    if tree is None:
        names = list(v.names())
        state = {n: tensor_for("torch" if T.torch_mod() else "numpy", n)
                 for n in (names if pres is None else S.select_flat(names, pres))}
    else:
        state = T.build(tree if pres is None else S.select(tree, pres), tensor_for)
    for idx, obj in targets:
        _fill(v, idx, obj, (0,) * len(obj.shape))
    if map_location is not None and S.location(map_location, None, "cpu") is None:
        state = S.apply_callable(state, map_location, locs)
    return state
