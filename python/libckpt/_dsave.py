"""Multi-rank saves (Store.save / save_async with a group): the plan exchanged between ranks, the
part each rank adds, and the collective commit on libckpt's thread (a SaveDriver with a
communicator; DistSaveHandle).  See dist.py for the collective rules."""

import hashlib
import json
import pickle
import time

from . import _driver
from . import _lib as L
from . import _tree as T
from . import dist as D
from .errors import InvalidArgumentError, MismatchError

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


def _order_streams(drv, leaves):
    """CUDA leaves: the part's copies follow torch's current stream of each device, as a
    one-process save_async does (fenced after submit)."""
    drv.order_after([lf.mem for lf in leaves])


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


def _add(drv, dg, leaves, mine, meta, tags):
    for lf in leaves:
        act = mine.get(lf.name, ("skip",))
        what = f"tensor {lf.name!r}"
        if act[0] == "S":  # a box of a global tensor
            drv.add(lf.name, lf.dtype, lf.shape, lf.mem, lf.ptr, global_shape=lf.box[0],
                    offsets=lf.box[1], replica=act[1], nreplicas=act[2], what=what)
        elif act[0] == "F":  # a flat range of one
            drv.add(lf.name, lf.dtype, lf.shape, lf.mem, lf.ptr, global_shape=lf.box[0],
                    offset=lf.box[1], count=lf.nbytes // max(1, L.dtype_size(lf.dtype)),
                    replica=act[1], nreplicas=act[2], what=what)
        elif act[0] == "R":  # a whole tensor held by act[2] ranks alike
            drv.add(lf.name, lf.dtype, lf.shape, lf.mem, lf.ptr, replica=act[1],
                    nreplicas=act[2], what=what)
    if dg.rank == 0:  # the global manifest keeps rank 0's metadata and tags
        for k, v in meta.items():
            drv.set_meta(k, v, f"metadata {k!r}")
        for t in tags:
            drv.add_tag(t)


def save_async(store, state, step, meta, dg, background=True, tags=()):
    """Store.save_async / save with a group: returns a DistSaveHandle.  This rank's part goes
    through the store's pinned pipeline like a one-process save_async (no copy of the state: CPU
    tensors must not change before wait_snapshot(), CUDA tensors are fenced on torch's current
    stream); the collective commit then runs on libckpt's thread (CKPT_SAVE_THREADED: the
    binding's collectives are on its own gloo group), released at once after the submit.
    background: unused since the commit always runs on libckpt's thread (save() waits for it)."""
    store._dist_wait()
    t0 = time.perf_counter()
    tree, leaves, gathered = _prepare(state, step, dg)
    mine = plan(dg.rank, gathered)
    meta = dict(meta)
    if dg.rank == 0:  # the global manifest keeps rank 0's metadata only
        meta.update(T.binding_meta(merge_trees([g[2] for g in gathered])))
    # Begin is collective: every rank calls it, and it fails on every rank alike (a rank that
    # cannot begin, ranks that disagree on the step, another job saving it), so no exchange.
    drv = _driver.SaveDriver(store, step, D._Comm(dg), f"checkpoint {step}, rank {dg.rank}")
    drv.keep.append(leaves)
    err = None
    try:  # every local failure goes to the commit: the other ranks must hear of it
        with store._lock:
            _add(drv, dg, leaves, mine, meta, tags)
            _order_streams(drv, leaves)
    except Exception as e:  # noqa: BLE001  raised below, after the commit
        err = e
    if err is not None:
        # This rank fails the save. The other ranks learn of it at the commit, whose exchange
        # of the parts' outcomes names this rank and carries its text; so this rank joins the
        # commit (released with the failure) rather than every save paying for an exchange of
        # its own here, one collective of ~10 ms at 4 ranks.
        drv.give_up(err)
        DistSaveHandle(store, drv, t0).join()
        raise err
    with store._lock:
        # A failed submit still goes on to the commit: the other ranks learn of it there.
        drv.submit()
        drv.release()
    h = DistSaveHandle(store, drv, t0)
    store._dist_started(h)
    ferr = drv.fence()
    if ferr is not None:
        h.join()
        raise ferr
    return h


class DistSaveHandle(_driver.SaveHandle):
    """A multi-rank save in flight (Store.save_async with a group).  This rank's part is persisted
    by the pipeline and the collective commit of the global manifest runs on libckpt's thread.
    wait_snapshot(): once this rank's tensors are copied (they may then change).  wait(): this
    rank's SaveStats once the global checkpoint is durable and visible, or the error, on every
    rank alike (the failing rank is named).  done(): True once it finished."""

    def __del__(self):
        if getattr(self, "_ptr", None) is not None:
            try:
                self.join()
            except Exception:  # noqa: BLE001
                pass

    def __repr__(self):
        return f"<libckpt.DistSaveHandle step={self.step} {'done' if self.done() else 'running'}>"
