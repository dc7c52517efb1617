"""Multi-rank saves (Store.save / save_async with a group): the plan exchanged between ranks, the
part each rank adds (ckpt_save_* with a communicator), and the collective commit, in the foreground or on a
background thread (DistSaveHandle).  See dist.py for the collective rules."""

import ctypes
import hashlib
import json
import pickle
import threading
import time

from . import _lib as L
from . import _tree as T
from . import dist as D
from ._common import _SnapshotWait, _stats
from .errors import CkptError, CkptIOError, InvalidArgumentError, MismatchError, error_class

_MISSING = object()


def _entries(leaves):
    """What this rank holds, as the other ranks need to know it: (name, 'S' shard | 'F'
    flattened range | 'T' whole tensor, dtype, local shape, global shape, offsets); a range's
    local shape is (numel,) and its offsets (offset,)."""
    out = []
    for lf in leaves:
        if lf.box is not None and len(lf.box) == 3:  # a FlatShard, checked when it was made
            numel = 1
            for s in lf.shape:
                numel *= s
            out.append((lf.name, "F", lf.dtype, (numel,), tuple(lf.box[0]), (lf.box[1],)))
        elif lf.box is not None:
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
    """From every rank's entries: {name: action} for rank `me`.  ('S', replica, nreplicas): add
    the shard, whose box nreplicas ranks hold alike (hybrid sharding: each holder writes about
    1/nreplicas of it; 1 when this rank alone holds it); ('F', replica, nreplicas): the same for
    a flattened range (ranges and boxes of one tensor mix); ('R', replica, nreplicas): a whole
    tensor several ranks hold (one rank alone: 1 replica, that rank's).  Deterministic, so that
    a bad plan raises the same error on every rank without another exchange."""
    holders = {}
    for r, g in enumerate(gathered):
        for e in g[1]:
            holders.setdefault(e[0], []).append((r, e))
    mine = {}
    for name, hs in holders.items():
        kinds = {e[1] for _, e in hs}
        if len(kinds) > 1 and "T" in kinds:
            raise InvalidArgumentError(
                f"tensor {name!r}: a Shard on rank(s) "
                f"{_ranks(r for r, e in hs if e[1] != 'T')} but a whole tensor on rank(s) "
                f"{_ranks(r for r, e in hs if e[1] == 'T')}")
        if len({e[2] for _, e in hs}) > 1:
            raise MismatchError(f"tensor {name!r}: the ranks' dtypes differ (" + ", ".join(
                f"rank {r}: {L.dtype_name(e[2])}" for r, e in hs) + ")")
        if "T" not in kinds:
            if len({e[4] for _, e in hs}) > 1:
                raise MismatchError(f"tensor {name!r}: the ranks' global shapes differ (" +
                                    ", ".join(f"rank {r}: {list(e[4])}" for r, e in hs) + ")")
            whole = kinds == {"S"} and all(not any(e[5]) and tuple(e[3]) == tuple(e[4])
                                           for _, e in hs)
            if whole and len(hs) > 1:  # a replicated DTensor: saved once, the work split
                rs = [r for r, _ in hs]
                if me in rs:
                    mine[name] = ("R", rs.index(me), len(rs))
                continue
            boxes = {}
            for r, e in hs:  # the same box (or range) on several ranks (replicated): split
                boxes.setdefault((e[1], e[5], tuple(e[3])), []).append(r)
            for (kind, _, _), rs in boxes.items():
                if me in rs:
                    mine[name] = (kind, rs.index(me), len(rs))
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


def _order_streams(lb, d, leaves):
    """CUDA leaves: the part's copies follow torch's current stream of each device (one stream
    orders them; the others join it by event), as a one-process save_async does.  Returns the
    streams to fence after submit."""
    devs = sorted({lf.mem for lf in leaves if lf.mem >= 0})
    if not devs:
        return {}
    import torch
    streams = {dv: torch.cuda.current_stream(dv) for dv in devs}
    primary = streams[devs[0]]
    for dv in devs[1:]:
        ev = torch.cuda.Event()
        ev.record(streams[dv])
        primary.wait_event(ev)
    L.check(lb.ckpt_save_after_stream(d, primary.cuda_stream), "ordering the copies")
    return streams


def _digest(obj):
    return hashlib.blake2b(pickle.dumps(obj, protocol=4), digest_size=16).digest()


def _prepare(state, step, dg):
    """Flattens this rank's state and exchanges the plan; raises on every rank alike.  Returns
    the tree, the leaves and every rank's [step, entries, tree] (the trees on rank 0 only,
    which alone writes the global manifest's metadata; None elsewhere).

    The ranks first exchange digests of their step, entries and tree (one small all_gather).
    When every rank is ready, the steps are alike, every rank's entries are those of the
    group's last full exchange (a job saving the same layout again) and rank 0 knows every
    tree (each is rank 0's own, or the one it had from that rank last time: scalars such as the
    step may change, alike on every rank), the plan is made from those: no exchange of the
    entries, whose pickling grows with tensors x ranks.  Otherwise (the first save, a changed
    layout, a rank's failure, ranks that differ) every rank sends its whole item, as the
    checks and their messages need.  The choice is made from what every rank received alike,
    so every rank takes the same path."""
    local, item = None, None
    head = b"\0" * 49
    try:
        tree, leaves = T.flatten(state, leaf_hook=D._leaf_hook)
        ents = _entries(leaves)
        item = ["ok", step, ents, tree]
        head = b"\1" + _digest(step) + _digest(ents) + _digest(tree)
    except Exception as e:  # noqa: BLE001  reported to the other ranks, then raised here
        local, item = e, ["error", f"{type(e).__name__}: {e}"]
    heads = dg.gather_bytes(head, f"checkpoint {step}: exchanging the plan's digests")
    cached = getattr(dg, "_plan_cache", None)  # entries' and trees' digests, entries, trees
    if cached and all(h[:17] == heads[0][:17] and h[0] == 1 for h in heads) and \
            cached[0] == [h[17:33] for h in heads] and \
            all(h[33:] in (cached[1][r], heads[0][33:]) for r, h in enumerate(heads)):
        trees = [None] * len(heads)
        if dg.rank == 0:
            trees = [cached[3][r] if h[33:] == cached[1][r] else tree
                     for r, h in enumerate(heads)]
        # the digests alike on every rank (the next choice depends on them), the trees on 0
        dg._plan_cache = (cached[0], [h[33:] for h in heads], cached[2], trees)
        return tree, leaves, [[step, e, t] for e, t in zip(cached[2], trees)]
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
    dg._plan_cache = ([h[17:33] for h in heads], [h[33:] for h in heads],
                      [g[1] for g in gathered], [g[2] if dg.rank == 0 else None for g in gathered])
    return tree, leaves, gathered


def _add(lb, d, dg, leaves, mine, meta, tags, keep):
    for lf in leaves:
        act = mine.get(lf.name, ("skip",))
        if act[0] == "skip":
            continue
        shape = D._u64s(lf.shape)
        t = L.Tensor(name=lf.name.encode(), dtype=lf.dtype, ndim=len(lf.shape), shape=shape,
                     mem=lf.mem, data=lf.ptr, replica=act[1], nreplicas=act[2])
        if act[0] == "S":  # a box of a global tensor
            t.global_shape, t.offsets = D._u64s(lf.box[0]), D._u64s(lf.box[1])
        elif act[0] == "F":  # a flat range of one: shape unused
            t.ndim = len(lf.box[0])
            t.global_shape = D._u64s(lf.box[0])
            t.offset, t.count = lf.box[1], lf.nbytes // max(1, L.dtype_size(lf.dtype))
        keep.append(t)
        L.check(lb.ckpt_save_add(d, ctypes.byref(t)), f"tensor {lf.name!r}")
    if dg.rank == 0:  # the global manifest keeps rank 0's metadata and tags
        for k, v in meta.items():
            L.check(lb.ckpt_save_set_meta(d, k.encode(), v.encode()), f"metadata {k!r}")
        for t in tags:
            L.check(lb.ckpt_save_add_tag(d, t.encode()), f"tag {t!r}")


def save_async(store, state, step, meta, dg, background=True, tags=()):
    """Store.save_async / save with a group: returns a DistSaveHandle.  This rank's part goes
    through the store's pinned pipeline like a one-process save_async (no copy of the state: CPU
    tensors must not change before wait_snapshot(), CUDA tensors are fenced on torch's current
    stream); the collective commit then runs on libckpt's thread (CKPT_SAVE_THREADED: the
    binding's collectives are on its own gloo group).  The save is begun deferred
    (CKPT_SAVE_DEFER) so that a failure of this rank after begin reaches the commit with its
    text (ckpt_save_release); a save that goes well is released at once after its submit.
    background: unused since the commit always runs on libckpt's thread (save() waits for it)."""
    lb = L.load()
    store._dist_wait()
    t0 = time.perf_counter()
    tree, leaves, gathered = _prepare(state, step, dg)
    mine = plan(dg.rank, gathered)
    meta = dict(meta)
    if dg.rank == 0:  # the global manifest keeps rank 0's metadata only
        meta.update(T.binding_meta(merge_trees([g[2] for g in gathered])))
    comm = D._Comm(dg)
    keep = [leaves]
    err, streams = None, {}
    # Begin is collective: every rank calls it, and it fails on every rank alike (a rank that
    # cannot begin, ranks that disagree on the step, another job saving it), so no exchange.
    opts = L.SaveOptions(comm=ctypes.pointer(comm.struct),
                         flags=L.SAVE_THREADED | L.SAVE_DEFER)
    with store._lock:
        out = ctypes.c_void_p()
        rc = lb.ckpt_save_begin(store._handle(), step, ctypes.byref(opts), ctypes.byref(out))
    if rc < 0:
        raise L.make_error(rc, f"checkpoint {step}, rank {dg.rank}")
    d = out.value
    keep.append(opts)
    try:  # every local failure goes to the commit: the other ranks must hear of it
        with store._lock:
            _add(lb, d, dg, leaves, mine, meta, tags, keep)
            streams = _order_streams(lb, d, leaves)
    except Exception as e:  # noqa: BLE001  raised below, after the commit
        err = e
    if err is not None:
        # This rank fails the save. The other ranks learn of it at the commit, whose exchange
        # of the parts' outcomes names this rank and carries its text; so this rank joins the
        # commit (released with the failure) rather than every save paying for an exchange of
        # its own here, one collective of ~10 ms at 4 ranks.
        text = str(err) if isinstance(err, CkptError) else f"{type(err).__name__}: {err}"
        code = getattr(err, "code", 0) or CkptIOError.code
        with store._lock:
            lb.ckpt_save_submit(d)
            lb.ckpt_save_release(d, -abs(code), text.encode(errors="replace")[:220])
        DistSaveHandle(store, d, step, keep, comm, t0).join()
        raise err
    with store._lock:
        # A failed submit still goes on to the commit: the other ranks learn of it there.
        lb.ckpt_save_submit(d)
        lb.ckpt_save_release(d, 0, None)
    h = DistSaveHandle(store, d, step, keep, comm, t0)
    store._dist_started(h)
    for dv, st in streams.items():
        rc = lb.ckpt_save_fence(d, st.cuda_stream)
        if rc < 0:
            ferr = L.make_error(rc, f"checkpoint {step}: fence on cuda:{dv}")
            h.join()
            raise ferr
    return h


class DistSaveHandle(_SnapshotWait):
    """A multi-rank save in flight (Store.save_async with a group).  This rank's part is persisted
    by the pipeline and the collective commit of the global manifest runs on libckpt's thread.
    wait_snapshot(): once this rank's tensors are copied (they may then change).  wait(): this
    rank's SaveStats once the global checkpoint is durable and visible, or the error, on every
    rank alike (the failing rank is named).  done(): True once it finished."""

    def __init__(self, store, d, step, keep, comm, t0):
        self._store, self._ptr, self.step = store, d, step
        self._keep, self._comm, self._t0 = keep, comm, t0
        self._lock = threading.Lock()
        self._snapshot_done = False
        self._stats = self._error = None
        self.snapshot_time = None  # seconds from save_async's start to the end of wait_snapshot

    def _c_wait_snapshot(self, ptr):
        return L.load().ckpt_save_wait_snapshot(ptr)

    def done(self):
        with self._lock:
            return self._ptr is None or L.load().ckpt_save_poll(self._ptr) == 1

    def _finish(self):
        if self._ptr is None:
            return
        st = L.Stats()
        rc = L.load().ckpt_save_wait(self._ptr, ctypes.byref(st))
        self._ptr = None
        if self.snapshot_time is None:
            self.snapshot_time = time.perf_counter() - self._t0
        self._keep = self._comm = None
        if rc < 0:
            if self._error is None:
                self._error = L.make_error(rc)
        else:
            self._stats = _stats(st)

    def join(self):
        """Waits for the commit without raising (the next multi-rank call on the store)."""
        with self._lock:
            self._finish()

    def wait(self):
        with self._lock:
            self._finish()
        store = self._store
        if store is not None:
            store._forget(self)
        if self._error is not None:
            raise self._error
        return self._stats

    def __del__(self):
        if getattr(self, "_ptr", None) is not None:
            try:
                self.join()
            except Exception:  # noqa: BLE001
                pass

    def __repr__(self):
        return f"<libckpt.DistSaveHandle step={self.step} {'done' if self.done() else 'running'}>"
