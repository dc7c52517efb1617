"""Store.load()'s partial loads (keys=[prefixes]) and torch.load-style map_location."""

from . import _tree as T
from .errors import NotFoundError


def prefixes(keys):
    """keys: a dotted prefix or a list of them -> list of component lists."""
    if isinstance(keys, str):
        keys = [keys]
    out = []
    for k in keys:
        if not isinstance(k, str) or not k:
            raise TypeError(f"keys: expected dotted names like 'model.fc1', got {k!r}")
        out.append(k.split("."))
    return out


def _relation(path, pres):
    """'all' when some prefix covers path, 'part' when path leads to a prefix, else None."""
    part = False
    for p in pres:
        n = min(len(p), len(path))
        if p[:n] == path[:n]:
            if len(p) <= len(path):
                return "all"
            part = True
    return "part" if part else None


def select(tree, pres):
    """The part of a saved description under the prefixes: dict entries outside them are left
    out, list and tuple items outside them become None (so indices keep their meaning)."""
    used = set()

    def rec(node, path):
        rel = _relation(path, pres)
        if rel == "all":
            for i, p in enumerate(pres):
                if p[:len(path)] == path[:len(p)]:
                    used.add(i)
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
                sub, hit = rec(v, path + [T._enc_key(T._dec_key(k))[1]])
                if hit:
                    items.append([k, sub])
            out = {"t": t, "v": items}
            return out, bool(items)
        if t in ("list", "tuple"):
            vals = [rec(v, path + [str(i)]) for i, v in enumerate(node["v"])]
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
        comps = name.split(".")
        for i, p in enumerate(pres):
            if comps[:len(p)] == p:
                used.add(i)
                out.append(name)
                break
    _unused(pres, used)
    return out


def _unused(pres, used):
    missing = [".".join(p) for i, p in enumerate(pres) if i not in used]
    if missing:
        raise NotFoundError(f"keys: nothing in the checkpoint is named {', '.join(missing)} "
                            f"(or starts with it followed by a dot)")


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
