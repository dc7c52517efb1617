"""Multi-rank saves (Store.save / save_async with a group): the plan exchanged between ranks, the
part each rank adds (ckpt_dist_save_*), and the collective commit, in the foreground or on a
background thread (DistSaveHandle).  See dist.py for the collective rules."""

import ctypes
import json
import threading

from . import _lib as L
from . import _tree as T
from . import dist as D
from ._common import _stats
from .errors import CkptError, CkptIOError, InvalidArgumentError, MismatchError, error_class

_MISSING = object()


def _entries(leaves):
    """What this rank holds, as the other ranks need to know it: (name, 'S' shard | 'T' whole
    tensor, dtype, local shape, global shape, offsets)."""
    out = []
    for lf in leaves:
        if lf.box is not None:
            # a Shard changed after it was made, or a DTensor's box: checked here, by name,
            # before ctypes could wrap a number libckpt cannot take
            what = f"tensor {lf.name!r}"
            g, o = D._ints(what, "global shape", lf.box[0]), D._ints(what, "offset", lf.box[1])
            D.check_box(what, lf.shape, g, o, lf.obj.element_size() if lf.kind == "torch"
                        else lf.obj.itemsize)
            out.append((lf.name, "S", lf.dtype, lf.shape, g, o))
        else:
            out.append((lf.name, "T", lf.dtype, lf.shape, None, None))
    return out


def _ranks(rs):
    return ", ".join(str(r) for r in rs)


def plan(me, gathered):
    """From every rank's entries: {name: action} for rank `me`.  ('S',): add the shard; ('skip',):
    another rank adds the same box; ('R', replica, nreplicas): a whole tensor several ranks hold
    (one rank alone: 1 replica, that rank's).  Deterministic, so that a bad plan raises the same
    error on every rank without another exchange."""
    holders = {}
    for r, g in enumerate(gathered):
        for e in g[1]:
            holders.setdefault(e[0], []).append((r, e))
    mine = {}
    for name, hs in holders.items():
        kinds = {e[1] for _, e in hs}
        if len(kinds) > 1:
            raise InvalidArgumentError(
                f"tensor {name!r}: a Shard on rank(s) {_ranks(r for r, e in hs if e[1] == 'S')} "
                f"but a whole tensor on rank(s) {_ranks(r for r, e in hs if e[1] == 'T')}")
        if len({e[2] for _, e in hs}) > 1:
            raise MismatchError(f"tensor {name!r}: the ranks' dtypes differ (" + ", ".join(
                f"rank {r}: {L.dtype_name(e[2])}" for r, e in hs) + ")")
        if kinds == {"S"}:
            if len({e[4] for _, e in hs}) > 1:
                raise MismatchError(f"tensor {name!r}: the ranks' global shapes differ (" +
                                    ", ".join(f"rank {r}: {list(e[4])}" for r, e in hs) + ")")
            whole = all(not any(e[5]) and tuple(e[3]) == tuple(e[4]) for _, e in hs)
            if whole and len(hs) > 1:  # a replicated DTensor: saved once, the work split
                rs = [r for r, _ in hs]
                if me in rs:
                    mine[name] = ("R", rs.index(me), len(rs))
                continue
            seen = set()
            for r, e in hs:
                box = (e[5], tuple(e[3]))
                if r == me:
                    mine[name] = ("skip",) if box in seen else ("S",)
                seen.add(box)  # the same box on several ranks (replicated shards): saved once
        else:
            if len({tuple(e[3]) for _, e in hs}) > 1:
                raise MismatchError(f"tensor {name!r}: held whole by several ranks with different "
                                    f"shapes (" + ", ".join(f"rank {r}: {list(e[3])}"
                                                            for r, e in hs) + ")")
            rs = [r for r, _ in hs]
            if me in rs:
                mine[name] = ("R", rs.index(me), len(rs))
    return mine


def _merge(a, b):
    """Rank a's structure with rank b's entries added (a's value wins where both have one)."""
    if not (isinstance(a, dict) and isinstance(b, dict)) or a.get("t") != b.get("t"):
        return a
    t = a.get("t")
    out = dict(a)
    if t in ("dict", "odict"):
        items = [list(kv) for kv in a["v"]]
        at = {json.dumps(k, sort_keys=True): i for i, (k, _) in enumerate(items)}
        for k, v in b["v"]:
            kk = json.dumps(k, sort_keys=True)
            if kk in at:
                items[at[kk]][1] = _merge(items[at[kk]][1], v)
            else:
                at[kk] = len(items)
                items.append([k, v])
        out["v"] = items
    elif t == "stateful":
        out["v"] = _merge(a["v"], b["v"])
    elif t in ("list", "tuple") and len(a["v"]) == len(b["v"]):
        out["v"] = [_merge(x, y) for x, y in zip(a["v"], b["v"])]
    return out


def merge_trees(trees):
    """The global structure (rank 0 stores it): the union of every rank's entries."""
    out = _MISSING
    for t in trees:
        out = t if out is _MISSING else _merge(out, t)
    return out


def _snapshot(leaves):
    """save_async: libckpt's multi-rank commit copies the tensors during the commit itself, which
    runs on the background thread; the caller may change its tensors as soon as save_async
    returns, so the binding copies them first (memory: one copy of this rank's state)."""
    events = []
    for lf in leaves:
        if not lf.nbytes:
            continue
        if T.is_torch_tensor(lf.obj):
            lf.obj = lf.obj.clone()
            lf.ptr = lf.obj.data_ptr()
        else:
            lf.obj = lf.obj.copy(order="C")
            lf.ptr = lf.obj.__array_interface__["data"][0]
    for d in sorted({lf.mem for lf in leaves if lf.mem >= 0}):
        import torch
        ev = torch.cuda.Event()
        ev.record(torch.cuda.current_stream(d))
        events.append(ev)
    return events


def _prepare(state, step, dg):
    """Flattens this rank's state and exchanges the plan; raises on every rank alike."""
    local, item = None, None
    try:
        tree, leaves = T.flatten(state, leaf_hook=D._leaf_hook)
        item = ["ok", step, _entries(leaves), tree]
    except Exception as e:  # noqa: BLE001  reported to the other ranks, then raised here
        local, item = e, ["error", f"{type(e).__name__}: {e}"]
    gathered = dg.gather_object(item, f"checkpoint {step}: exchanging the plan")
    if local is not None:
        raise local
    bad = [(r, g[1]) for r, g in enumerate(gathered) if g[0] == "error"]
    if bad:
        raise InvalidArgumentError(f"checkpoint {step}: rank {bad[0][0]} could not prepare its "
                                   f"state: {bad[0][1]}")
    steps = [g[1] for g in gathered]
    if len(set(steps)) > 1:
        raise InvalidArgumentError(f"checkpoint {step}: the ranks save different steps (" +
                                   ", ".join(f"rank {r}: {s}" for r, s in enumerate(steps)) + ")")
    gathered = [g[1:] for g in gathered]
    return tree, leaves, gathered


def _add(lb, d, dg, leaves, mine, meta, keep):
    for lf in leaves:
        act = mine.get(lf.name, ("skip",))
        shape = D._u64s(lf.shape)
        keep.append(shape)
        if act[0] == "S":
            g, o = D._u64s(lf.box[0]), D._u64s(lf.box[1])
            keep += [g, o]
            rc = lb.ckpt_dist_save_add_shard(d, lf.name.encode(), lf.dtype, len(lf.shape), g, o,
                                             shape, lf.mem, lf.ptr)
        elif act[0] == "R":
            rc = lb.ckpt_dist_save_add_replicated(d, lf.name.encode(), lf.dtype, len(lf.shape),
                                                  shape, act[1], act[2], lf.mem, lf.ptr)
        else:
            continue
        L.check(rc, f"tensor {lf.name!r}")
    if dg.rank == 0:  # the global manifest keeps rank 0's metadata
        for k, v in meta.items():
            L.check(lb.ckpt_dist_save_set_meta(d, k.encode(), v.encode()), f"metadata {k!r}")


def save_async(store, state, step, meta, dg, background=True):
    """Store.save_async / save with a group: returns a DistSaveHandle (committing in the
    background, or already committed when background is False)."""
    lb = D.lib()
    store._dist_wait()
    tree, leaves, gathered = _prepare(state, step, dg)
    mine = plan(dg.rank, gathered)
    meta = dict(meta)
    meta[T.META_KEY] = T.dumps(merge_trees([g[2] for g in gathered]))
    comm = D._Comm(dg)
    keep = [leaves, comm]
    d, err, events = None, None, []
    try:  # every local failure goes to the exchange below: the other ranks must hear of it
        events = _snapshot(leaves) if background else []
        with store._lock:
            out = ctypes.c_void_p()
            rc = lb.ckpt_dist_save_begin(store._handle(), ctypes.byref(comm.struct), step,
                                         ctypes.byref(out))
            if rc < 0:
                raise L.make_error(rc, f"checkpoint {step}, rank {dg.rank}")
            d = out.value
            _add(lb, d, dg, leaves, mine, meta, keep)
    except Exception as e:  # noqa: BLE001  raised below, after the exchange
        err = e
    mine_out = None
    if err is not None:
        text = str(err) if isinstance(err, CkptError) else f"{type(err).__name__}: {err}"
        mine_out = (getattr(err, "code", 0) or CkptIOError.code, text)
    errs = dg.gather_object(mine_out, f"checkpoint {step}: exchanging the outcome of adding "
                                      f"the tensors")
    failed = [(r, e) for r, e in enumerate(errs) if e is not None]
    if failed:
        if d is not None:
            comm.local_fail = True  # every rank knows already: no collective in the abort
            with store._lock:
                lb.ckpt_dist_save_abort(d)
        if err is not None:
            raise err
        r, (code, msg) = failed[0]
        raise error_class(code)(f"checkpoint {step}: rank {r} failed: {msg}", code=code,
                                name=L.load().ckpt_strerror(code).decode())
    h = DistSaveHandle(store, d, step, keep, events, [lf.mem for lf in leaves if lf.mem >= 0])
    store._dist_started(h)
    if background:
        h._thread = threading.Thread(target=h._run, name=f"libckpt-commit-{step}")
        h._thread.start()
    else:
        h._run()
    return h


class DistSaveHandle:
    """A multi-rank save in flight (Store.save_async with a group).  The commit (this rank's part,
    then the collective commit of the global manifest) runs on a background thread.  wait():
    this rank's SaveStats once the global checkpoint is durable and visible, or the error, on
    every rank alike (the failing rank is named).  wait_snapshot() returns at once: save_async
    copied the tensors.  done(): True once it finished."""

    def __init__(self, store, d, step, keep, events, devs):
        self._store, self._d, self.step = store, d, step
        self._keep, self._events, self._devs = keep, events, devs
        self._done = threading.Event()
        self._thread = None
        self._stats = self._error = None
        self.snapshot_time = 0.0

    def _run(self):
        try:
            for ev in self._events:
                ev.synchronize()  # the clones are complete
            if not self._events and self._devs:
                import torch
                for dv in sorted(set(self._devs)):
                    torch.cuda.current_stream(dv).synchronize()
            st = L.Stats()
            with self._store._lock:
                rc = D.lib().ckpt_dist_save_commit(self._d, ctypes.byref(st))
            self._d = None
            if rc < 0:
                self._error = L.make_error(rc)  # on this thread: ckpt_errmsg is per thread
            else:
                self._stats = _stats(st)
        except BaseException as e:  # noqa: BLE001  handed to wait()
            self._error = e
            if self._d is not None:  # never reached the commit: the others' commit names us
                D.lib().ckpt_dist_save_abort(self._d)
                self._d = None
        finally:
            self._keep = self._events = None
            self._done.set()

    def wait_snapshot(self):
        if self._done.is_set() and self._error is not None:
            raise self._error

    def done(self):
        return self._done.is_set()

    def join(self):
        """Waits for the commit without raising (the next multi-rank call on the store)."""
        t = self._thread
        if t is not None:
            t.join()
        self._done.wait()

    def wait(self):
        self.join()
        store = self._store
        if store is not None:
            store._forget(self)
        if self._error is not None:
            raise self._error
        return self._stats

    def __repr__(self):
        return f"<libckpt.DistSaveHandle step={self.step} {'done' if self.done() else 'running'}>"

