"""Store.load()'s partial loads (keys=[prefixes]) and torch.load-style map_location."""

from . import _tree as T
from .errors import NotFoundError


def prefixes(keys):
    """keys: a dotted prefix or a list of them -> list of prefixes (str)."""
    if isinstance(keys, str):
        keys = [keys]
    out = []
    for k in keys:
        if not isinstance(k, str) or not k:
            raise TypeError(f"keys: expected dotted names like 'model.fc1', got {k!r}")
        out.append(k)
    return out


def covers(prefix, name):
    """Whether the dotted prefix names name or a part of it: the same text, or the text followed
    by a dot ("model.fc1" covers "model.fc1.weight", not "model.fc10.weight"). On the text, so
    that a prefix may end inside a key holding dots ("model.blocks.0" covers the entry
    "blocks.0.attn.weight" of a flat state_dict under "model")."""
    return name == prefix or name.startswith(prefix + ".")


def _relation(path, pres):
    """'all' when some prefix covers path (a list of keys), 'part' when path leads to a prefix
    (the root leads to every prefix), else None."""
    if not path:
        return "part"
    name = T.path_name(path)
    if any(covers(p, name) for p in pres):
        return "all"
    return "part" if any(covers(name, p) for p in pres) else None


def select(tree, pres):
    """The part of a saved description under the prefixes: dict entries outside them are left
    out, list and tuple items outside them become None (so indices keep their meaning).  The
    keys stay as saved: a flat state_dict stays flat ({"model": {"blocks.0.w": ...}})."""
    used = set()

    def rec(node, path):
        rel = _relation(path, pres)
        if rel == "all":
            name = T.path_name(path)
            used.update(i for i, p in enumerate(pres) if covers(p, name))
            return node, True
        if rel is None or not isinstance(node, dict):
            return None, False
        t = node.get("t")
        if t == "stateful":
            sub, hit = rec(node["v"], path)
            return ({**node, "v": sub} if hit else None), hit
        if t in ("dict", "odict"):
            items = []
            for k, v in node["v"]:
                sub, hit = rec(v, path + [T._dec_key(k)])
                if hit:
                    items.append([k, sub])
            out = {"t": t, "v": items}
            return out, bool(items)
        if t in ("list", "tuple"):
            vals = [rec(v, path + [i]) for i, v in enumerate(node["v"])]
            return {"t": t, "v": [v if hit else None for v, hit in vals]}, any(h for _, h in vals)
        return None, False

    out, _ = rec(tree, [])
    _unused(pres, used)
    return out if out is not None else {"t": "dict", "v": []}


def select_flat(names, pres):
    """Names of another tool's flat checkpoint under the prefixes (plain dotted names)."""
    used = set()
    out = []
    for name in names:
        hit = [i for i, p in enumerate(pres) if covers(p, name)]
        if hit:
            used.update(hit)
            out.append(name)
    _unused(pres, used)
    return out


def _unused(pres, used):
    missing = [p for i, p in enumerate(pres) if i not in used]
    if missing:
        raise NotFoundError(f"keys: nothing in the checkpoint is named {', '.join(missing)} "
                            f"(or starts with it followed by a dot)")


def dotted_names(stored, old):
    """{dotted name: [stored names]} of a checkpoint's tensors (stored: their names as saved; old:
    True for a checkpoint of the binding's escaped names, whose dotted names are old_dotted)."""
    out = {}
    for n in stored:
        out.setdefault(T.old_dotted(n) if old else n, []).append(n)
    return out


def resolve(name, stored, old, step):
    """The stored name that `name` means: the stored name itself, else the one whose dotted name
    it is.  NotFoundError when none is; ValueError when several old names read the same."""
    if name in stored:
        return name
    hits = dotted_names(stored, old).get(name, []) if old else []
    if len(hits) == 1:
        return hits[0]
    if hits:
        raise ValueError(f"checkpoint {step}: {len(hits)} tensors read {name!r} once their "
                         f"escaped names are undone: {', '.join(map(repr, hits))}; pass one of "
                         f"these names")
    raise NotFoundError(f"no tensor {name!r} in checkpoint {step}", code=NotFoundError.code,
                        name="not found")


def location(map_location, device, saved):
    """The device for a tensor saved on `saved` ('cpu' or 'cuda:N'), or None to use a callable
    map_location afterwards (the tensor is read to the CPU first)."""
    if map_location is None:
        return device
    if callable(map_location) and not isinstance(map_location, str) and \
            not _is_device(map_location):
        return None
    if isinstance(map_location, dict):
        return map_location.get(saved, saved)  # unmapped locations stay, as in torch.load
    return str(map_location)


def _is_device(x):
    t = T.torch_mod()
    return t is not None and isinstance(x, t.device)


def apply_callable(state, fn, locs):
    """Replaces each tensor t of state by fn(t, location) (torch.load's callable map_location)."""
    import collections

    def rec(x):
        if T.is_torch_tensor(x):
            return fn(x, locs.get(id(x), "cpu"))
        if isinstance(x, collections.OrderedDict):
            d = collections.OrderedDict((k, rec(v)) for k, v in x.items())
            if hasattr(x, "_metadata"):
                d._metadata = x._metadata
            return d
        if isinstance(x, dict):
            return {k: rec(v) for k, v in x.items()}
        if isinstance(x, list):
            return [rec(v) for v in x]
        if isinstance(x, tuple) and not type(x).__name__ == "Size":
            return tuple(rec(v) for v in x)
        return x
    return rec(state)
