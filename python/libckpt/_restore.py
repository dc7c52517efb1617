"""Matching a caller's state against a checkpoint's saved structure, for Store.restore().

The walk runs twice: a planning pass that finds every tensor to fill in place, every Stateful
object (state_dict()/load_state_dict()) to hand its saved state to, and every saved entry the
state has no place for -- and checks them all before anything is written -- then, once the data
is read, an applying pass that puts the saved non-tensor values in place.
"""

import warnings

from . import _tree as T
from . import dist as D
from .errors import MismatchError, NotFoundError

NOTREE = object()  # the checkpoint has no libckpt.python description (written by another tool)


class PartialRestoreWarning(UserWarning):
    """restore(strict=False) left part of the checkpoint out (the names are in the message)."""


class DamagedCheckpointWarning(UserWarning):
    """load or restore of "latest" read the newest checkpoint that reads and passed over a newer
    one whose manifest is damaged, in the store or on its remote (the message names it)."""


class RestoreResult(int):
    """What Store.restore() returns: the restored step (an int), with `.step` and
    `.not_restored`, the dotted names of the checkpoint's entries that were left out (only
    ever non-empty with strict=False, which also warns about them), and `.stats`: for a restore
    with a group, a dict of this rank's reads (bytes_read from the store's pack files,
    bytes_read_per_rank of every rank of the group, bytes_received from the other ranks of its
    node, shared_entries read once for its node, entries_read_for_node by this rank); None
    otherwise."""

    def __new__(cls, step, not_restored=(), stats=None):
        obj = int.__new__(cls, step)
        obj.step = int(step)
        obj.not_restored = list(not_restored)
        obj.stats = stats
        return obj


class Plan:
    """What the planning pass found."""

    def __init__(self, reader, alloc, strict):
        self.r = reader
        self.strict = strict
        self.alloc = alloc        # alloc(kind, tensor_info) -> a new tensor for a Stateful's state
        self.found = []           # (name, tensor) filled in place
        self.fresh = []           # (index, info, tensor) read into new tensors
        self.stateful = []        # (object, its state to load, where, (node, path) or None:
                                  # the saved values to merge into that state once it is read)
        self.dropped = []         # dotted names of saved entries the state has no place for
        self._cache = {}

    def new_tensor(self, kind, name, _loc=None):
        if name in self._cache:   # a tensor saved once for several entries stays one tensor
            return self._cache[name]
        idx = self.r.find(name)
        ti = self.r.tensor(idx)
        obj = self.alloc(kind, ti)
        self.fresh.append((idx, ti, obj))
        self._cache[name] = obj
        return obj


def _flat_name(path):
    """The name of a tensor in another tool's checkpoint: its names are plain dotted paths
    ("fc.weight"), as the binding's are, so a key "fc.weight" names it as well as nested keys fc ->
    weight do."""
    return ".".join(path)


def _where(path):
    return ".".join(path) or "<root>"


def _fmt_names(names, limit=8):
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def merge(target, node, path, plan, apply):
    """Walks `target` beside the saved description `node` (NOTREE when there is none).  With
    apply=False fills `plan`; with apply=True returns the value to put in place of target
    (tensors and Stateful objects stay the same objects, scalars become the saved values)."""
    if isinstance(node, dict) and node.get("t") == "stateful" and not T.is_stateful(target):
        node = node["v"]  # saved as an object, restored into its state dict: the same thing
    if T.is_stateful(target):
        if not apply:
            _plan_stateful(target, node, path, plan)
        return target
    if T.is_torch_tensor(target) or T.is_np_array(target) or _is_box(target):
        if isinstance(node, dict) and node.get("t") in ("torch", "numpy"):
            name = node["n"]
        elif node is NOTREE:
            name = _flat_name(path) if path else "tensor"
        else:
            raise MismatchError(f"{_where(path)!r}: the state has a tensor where the checkpoint "
                                f"has {_node_desc(node)}")
        if not apply:
            plan.found.append((name, target))
        return target
    if isinstance(target, dict):
        return _merge_dict(target, node, path, plan, apply)
    if isinstance(target, (list, tuple)):
        return _merge_seq(target, node, path, plan, apply)
    # a scalar (or other non-tensor) value
    if node is NOTREE:
        return target
    if isinstance(node, dict) and node.get("t") in ("torch", "numpy"):
        raise MismatchError(f"{_where(path)!r}: the checkpoint has a tensor, the state a "
                            f"{type(target).__name__}")
    return T.build(node, None) if apply else target


def _merge_dict(target, node, path, plan, apply):
    saved = None
    if node is not NOTREE:
        if not (isinstance(node, dict) and node.get("t") in ("dict", "odict")):
            raise MismatchError(f"{_where(path)!r}: the state has a dict where the checkpoint "
                                f"has {_node_desc(node)}")
        saved = {T._dec_key(k): v for k, v in node["v"]}
    for k in list(target.keys()):
        _, comp = T._enc_key(k)
        if saved is not None and k not in saved:
            sub = _tensorless(target[k])
            if sub is None:
                continue  # a non-tensor value the checkpoint lacks: left as it is
            raise NotFoundError(f"{'.'.join(path + [comp])!r}: in the state ({sub}) but not in "
                                f"the checkpoint")
        v = merge(target[k], NOTREE if saved is None else saved[k], path + [comp], plan, apply)
        if apply and v is not target[k]:
            target[k] = v
    if saved is not None and not apply:
        for k in saved:
            if k not in target:
                plan.dropped.append(".".join(path + [T._enc_key(k)[1]]))
    return target


def _merge_seq(target, node, path, plan, apply):
    sv = None
    if node is not NOTREE:
        if not (isinstance(node, dict) and node.get("t") in ("list", "tuple", "size")):
            raise MismatchError(f"{_where(path)!r}: the state has a {type(target).__name__} "
                                f"where the checkpoint has {_node_desc(node)}")
        sv = node["v"]
        if len(sv) != len(target):
            raise MismatchError(f"{_where(path)!r}: the state's {type(target).__name__} has "
                                f"{len(target)} items, the checkpoint's {len(sv)}")
        if node["t"] == "size":
            return T.build(node, None) if apply else target
    vals = [merge(e, NOTREE if sv is None else sv[i], path + [str(i)], plan, apply)
            for i, e in enumerate(target)]
    if not apply:
        return target
    if isinstance(target, list):
        for i, v in enumerate(vals):
            if v is not target[i]:
                target[i] = v
        return target
    return tuple(vals)


def _plan_stateful(obj, node, path, plan):
    """Builds the saved state of a Stateful object from new tensors (read with the others) and
    checks what can be checked before anything is written."""
    where = _where(path)
    saved_keys = None  # the saved state's keys, when built is not made from it
    if node is NOTREE:
        # another tool's flat checkpoint: the names under this object's prefix are its keys
        prefix = ".".join(path) + "." if path else ""
        names = plan.r.names()
        built = {n[len(prefix):]: plan.new_tensor("torch", n) for n in names if n.startswith(prefix)}
        if not built:
            raise NotFoundError(f"{where!r}: the checkpoint holds no tensor named {prefix}*")
    else:
        if not (isinstance(node, dict) and node.get("t") in ("dict", "odict", "stateful")):
            raise MismatchError(f"{where!r}: the state has a {type(obj).__name__} (restored with "
                                f"load_state_dict) where the checkpoint has {_node_desc(node)}")
        sub = node["v"] if node["t"] == "stateful" else node
        built = _module_in_place(obj, sub, plan)
        if built is None:
            built = _into_own_state(obj, sub, path, plan)
            if built is not None:
                plan.stateful.append((obj, built, where, (sub, path)))
                return
        if built is None:
            built = T.build(sub, plan.new_tensor)
        elif sub.get("t") in ("dict", "odict"):
            saved_keys = [T._dec_key(k) for k, _ in sub["v"]]
    torch = T.torch_mod()
    if torch is not None and isinstance(obj, torch.nn.Module):
        _check_module(obj, built, path, plan, saved_keys)
    elif torch is not None and isinstance(obj, torch.optim.Optimizer):
        _check_optimizer(obj, built, where)
    plan.stateful.append((obj, built, where, None))


def _into_own_state(obj, node, path, plan):
    """DCP's rule for a Stateful whose state_dict() holds DTensors (or Shards), as DCP's
    tutorial AppState's get_state_dict does: the saved state is read into what state_dict()
    returned (each DTensor's box as this rank holds it now, whatever layout saved it), and
    load_state_dict gets that, not whole tensors, which set_state_dict refuses ("mixed
    torch.Tensor and DTensor").  None for any other object: its saved state is built from new
    tensors."""
    if node.get("t") not in ("dict", "odict"):
        return None
    own = obj.state_dict()
    if not isinstance(own, dict) or not D.holds_boxes(own):
        return None
    merge(own, node, path, plan, apply=False)
    return own


def _module_in_place(module, node, plan):
    """For a module whose state_dict() tensors match the saved ones exactly (names, dtypes,
    shapes), the saved data is read straight into them (on the GPU for a CUDA module) instead of
    into a CPU copy of the whole model; load_state_dict() then still runs, with those tensors, so
    the module's own loading hooks see the saved state.  None when it does not match (then the
    saved state is read into new tensors and load_state_dict converts what it must)."""
    torch = T.torch_mod()
    if torch is None or not isinstance(module, torch.nn.Module) or node.get("t") not in ("dict", "odict"):
        return None
    own = module.state_dict()
    saved = {T._dec_key(k): v for k, v in node["v"]}
    pairs = []
    for k, v in own.items():
        n = saved.get(k)
        if not (T.is_torch_tensor(v) and isinstance(n, dict) and n.get("t") == "torch"):
            return None
        idx = plan.r.names().get(n["n"])
        ti = plan.r.tensor(idx) if idx is not None else None
        if ti is None or T.torch_dtypes().get(v.dtype) != ti["ckpt_dtype"] or \
                tuple(v.shape) != tuple(ti["shape"]) or v.device.type not in ("cpu", "cuda"):
            return None
        pairs.append((n["n"], v))
    plan.found += pairs
    return own


def _check_module(module, built, path, plan, saved_keys=None):
    """Module.load_state_dict copies as it goes and raises at the end: check keys and shapes
    first, so that a mismatch writes nothing."""
    own = module.state_dict()
    where = _where(path)
    missing = sorted(k for k in own if k not in built)
    if missing and plan.strict:  # strict=False: torch's rule, they keep their values
        raise NotFoundError(f"{where!r}: the module's {_fmt_names(missing)} are not in the "
                            f"checkpoint")
    for k, v in own.items():
        b = built.get(k)
        if T.is_torch_tensor(v) and T.is_torch_tensor(b) and tuple(v.shape) != tuple(b.shape):
            raise MismatchError(f"'{where}.{k}': shape mismatch: the checkpoint has "
                                f"{list(b.shape)}, the module {list(v.shape)}")
    for k in built if saved_keys is None else saved_keys:
        if k not in own:  # saved, but the module has no such entry
            plan.dropped.append(f"{where}.{k}" if path else k)


def _check_optimizer(opt, built, where):
    groups = built.get("param_groups") if isinstance(built, dict) else None
    if not isinstance(groups, list) or "state" not in built:
        raise MismatchError(f"{where!r}: the checkpoint does not hold an optimizer's state_dict")
    ours = [len(g["params"]) for g in opt.param_groups]
    theirs = [len(g.get("params", ())) for g in groups]
    if ours != theirs:
        raise MismatchError(f"{where!r}: the optimizer has parameter groups of sizes {ours}, the "
                            f"checkpoint {theirs}")


def finish(plan, strict, step):
    """Raises (strict) or warns about what the checkpoint holds that the state lacks."""
    dropped = sorted(set(plan.dropped))
    if dropped and strict:
        raise MismatchError(
            f"checkpoint {step} holds entries that the given state lacks: {_fmt_names(dropped)}. "
            f"Pass modules and optimizers themselves (restore({{'optim': opt}})): the "
            f"state_dict() of a fresh optimizer is empty. strict=False restores the rest and "
            f"returns the names it left out")
    if dropped:
        warnings.warn(f"libckpt: restore of checkpoint {step} left out {len(dropped)} saved "
                      f"entries: {_fmt_names(dropped)}", PartialRestoreWarning, stacklevel=3)
    return dropped


def load_stateful(plan, strict):
    for obj, built, _where_, saved in plan.stateful:
        if saved is not None:  # the saved non-tensor values into the object's own state
            built = merge(built, saved[0], saved[1], plan, apply=True)
        torch = T.torch_mod()
        if torch is not None and isinstance(obj, torch.nn.Module):
            obj.load_state_dict(built, strict=strict)
        else:
            obj.load_state_dict(built)


def _is_box(x):
    """A dist.Shard target: filled like a tensor, with its box of the global tensor."""
    return getattr(type(x), "_libckpt_box", False) is True


def _tensorless(x):
    """None when x holds no tensor, else a short description."""
    if T.is_torch_tensor(x) or T.is_np_array(x) or _is_box(x):
        return "a tensor"
    if T.is_stateful(x):
        return f"a {type(x).__name__}"
    if isinstance(x, dict):
        for v in x.values():
            if _tensorless(v):
                return "holds tensors"
    if isinstance(x, (list, tuple)):
        for v in x:
            if _tensorless(v):
                return "holds tensors"
    return None


def _node_desc(node):
    if isinstance(node, dict):
        t = node.get("t")
        return {"torch": "a tensor", "numpy": "an array", "odict": "a dict",
                "stateful": "an object's state"}.get(t, f"a {t}")
    return f"a {type(node).__name__} ({node!r})"
