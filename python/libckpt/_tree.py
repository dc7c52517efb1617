"""Flattening nested state (dicts, lists, tuples of tensors and scalars) into named tensors plus a
JSON description of the structure, and back.

Tensor names are the keys of the path joined by '.', each key as it is, as PyTorch names a
state_dict entry and DCP a fully qualified name: {"model": model.state_dict()} gives
"model.fc1.weight" and "model.layers.0.attn.weight", whether the dots come from nesting or from
the keys themselves (docs/format.md, "Tensor names of the Python binding").  Integer keys and
list indices are written in decimal, float, bool and None keys as repr() gives them, a NUL in a
key as "%00" (a name cannot hold NUL).  Two tensors that would get one name ({"fc1": {"weight":
t}} beside {"fc1.weight": u}) are a ValueError naming both at save.  The exact keys (with their
types) and every non-tensor value are kept in the description (metadata key ``libckpt.python``),
so a load gives back exactly the structure saved; the metadata key ``libckpt.names`` says that
names are written this way.  Checkpoints without it but with a description were written by the
binding before (ee43f25 and older), which escaped '%' as %25, '.' as %2E and NUL as %00 inside a
key ("model.fc1%2Eweight"): readers show and match those names unescaped (old_dotted).
"""

import base64
import collections
import json
import re
import sys

from . import _lib as L

META_KEY = "libckpt.python"
NAMES_KEY = "libckpt.names"   # its value NAMES_DOTTED: the names are plain dotted paths
NAMES_DOTTED = "dotted"
FORMAT = 1

_torch_map = None
_np_map = None


def torch_mod():
    return sys.modules.get("torch")


def np_mod():
    return sys.modules.get("numpy")


def torch_dtypes():
    """torch dtype -> ckpt dtype (built on first use, from the dtypes this torch has)."""
    global _torch_map
    if _torch_map is None:
        import torch
        m = {torch.bool: L.BOOL, torch.uint8: L.U8, torch.int8: L.I8, torch.int16: L.I16,
             torch.int32: L.I32, torch.int64: L.I64, torch.float16: L.F16,
             torch.bfloat16: L.BF16, torch.float32: L.F32, torch.float64: L.F64}
        for name, dt in (("float8_e5m2", L.F8_E5M2), ("float8_e4m3fn", L.F8_E4M3),
                         ("uint16", L.U16), ("uint32", L.U32), ("uint64", L.U64)):
            if hasattr(torch, name):
                m[getattr(torch, name)] = dt
        _torch_map = m
    return _torch_map


def torch_dtype_of(ck):
    for k, v in torch_dtypes().items():
        if v == ck:
            return k
    return None


def np_dtypes():
    """numpy dtype name -> ckpt dtype."""
    global _np_map
    if _np_map is None:
        _np_map = {"bool": L.BOOL, "uint8": L.U8, "int8": L.I8, "int16": L.I16, "uint16": L.U16,
                   "int32": L.I32, "uint32": L.U32, "int64": L.I64, "uint64": L.U64,
                   "float16": L.F16, "float32": L.F32, "float64": L.F64,
                   # ml_dtypes' extension types, when the arrays use them
                   "bfloat16": L.BF16, "float8_e5m2": L.F8_E5M2, "float8_e4m3fn": L.F8_E4M3}
    return _np_map


def np_dtype_of(ck):
    import numpy as np
    for k, v in np_dtypes().items():
        if v == ck:
            try:
                return np.dtype(k)
            except TypeError:
                try:
                    import ml_dtypes  # noqa: F401  registers bfloat16 / float8 with numpy
                    return np.dtype(k)
                except (ImportError, TypeError):
                    return None
    return None


def is_torch_tensor(x):
    t = torch_mod()
    return t is not None and isinstance(x, t.Tensor)


def is_np_array(x):
    n = np_mod()
    return n is not None and isinstance(x, n.ndarray)


def is_stateful(x):
    """True for objects that follow the Stateful protocol (torch.distributed.checkpoint's):
    state_dict() and load_state_dict() -- modules, optimizers, LR schedulers, GradScalers..."""
    if isinstance(x, (dict, list, tuple)) or is_torch_tensor(x) or is_np_array(x):
        return False
    return callable(getattr(x, "state_dict", None)) and callable(getattr(x, "load_state_dict", None))


def _share_key(kind, x):
    """What makes two tensors the same saved tensor: the same memory viewed the same way.  Tied
    weights give two state_dict entries that are distinct tensor objects over one storage."""
    if kind == "torch":
        if x.numel() == 0:
            return None
        return ("torch", str(x.device), x.dtype, x.data_ptr(), tuple(x.shape), tuple(x.stride()))
    if x.size == 0:
        return None
    return ("numpy", x.dtype.str, x.__array_interface__["data"][0], x.shape, x.strides)


_OLD_ESCAPE = re.compile(r"%(2E|25)")


def old_dotted(name):
    """A name as the binding wrote it before names were plain dotted paths ("model.fc1%2Eweight"),
    shown as a dotted path ("model.fc1.weight"): %2E and %25 undone in one pass (so "%252E" gives
    "%2E"); %00 stays, as a name today writes a NUL."""
    return _OLD_ESCAPE.sub(lambda m: "." if m.group(1) == "2E" else "%", name)


def key_text(k):
    """A key's part of a tensor name (k: a dict key, or a list index)."""
    if isinstance(k, str):
        return k.replace("\0", "%00")
    if isinstance(k, int) and not isinstance(k, bool):
        return str(k)
    return repr(k)


def path_name(path):
    """The dotted name of a path of keys ("" for the root)."""
    return ".".join(key_text(k) for k in path)


def path_repr(path):
    """A path of keys as Python subscripts, for messages: ['model']['fc1.weight']."""
    return "".join(f"[{k!r}]" for k in path) or "<root>"


def binding_meta(tree):
    """The binding's own metadata entries of a checkpoint whose structure is tree."""
    return {META_KEY: dumps(tree), NAMES_KEY: NAMES_DOTTED}


def _enc_key(k):
    if isinstance(k, str):
        return k, key_text(k)
    if isinstance(k, bool) or k is None or isinstance(k, float):
        return {"k": k}, key_text(k)
    if isinstance(k, int):
        return {"k": k}, key_text(k)
    raise TypeError(f"unsupported dict key type {type(k).__name__} ({k!r}): keys must be str, "
                    f"int, float, bool or None")


def _dec_key(k):
    return k["k"] if isinstance(k, dict) else k


class Leaf:
    """A tensor to save: its name, the object to keep alive, and what libckpt needs."""
    __slots__ = ("name", "kind", "obj", "dtype", "shape", "ptr", "mem", "nbytes", "box")


def flatten(state, leaf_hook=None):
    """Returns (tree, leaves): the JSON-able description and the list of tensor Leaf objects.

    leaf_hook(x) -> None or (tensor, box): a leaf that is a box of a global tensor (dist.Shard, a
    DTensor); box = (global shape, offsets) is kept on the Leaf (None for every other tensor)."""
    leaves = []
    names = {}   # name -> the path of keys that gave it
    shared = {}

    def add_tensor(x, path, kind, box=None):
        key = _share_key(kind, x)
        if key is not None and box is not None:
            key = key + (box,)
        if key is not None and key in shared:
            return dict(shared[key])  # saved once, comes back as one tensor
        name = path_name(path) if path else "tensor"
        if name in names:
            raise ValueError(f"two entries of the state would both be saved as the tensor "
                             f"{name!r}: {path_repr(names[name])} and {path_repr(path)} (a name "
                             f"joins the keys with '.', as state_dict keys are written, so a "
                             f"nested key and a key holding dots, or 0 and '0', can meet); "
                             f"rename one")
        names[name] = list(path)
        leaf = Leaf()
        leaf.name, leaf.kind, leaf.box = name, kind, box
        if kind == "torch":
            prep_torch(leaf, x)
        else:
            prep_numpy(leaf, x)
        leaves.append(leaf)
        node = {"t": kind, "n": name}
        if leaf.mem >= 0:
            node["d"] = f"cuda:{leaf.mem}"  # the saved location, for load(map_location=...)
        if key is not None:
            shared[key] = node
        return dict(node)

    def walk(x, path):
        if x is None or isinstance(x, (bool, int, float, str)):
            return x
        hooked = leaf_hook(x) if leaf_hook is not None else None
        if hooked is not None:
            t, box = hooked
            return add_tensor(t, path, "torch" if is_torch_tensor(t) else "numpy", box)
        if is_torch_tensor(x):
            return add_tensor(x, path, "torch")
        if is_np_array(x):
            return add_tensor(x, path, "numpy")
        if isinstance(x, dict):
            items = []
            for k, v in x.items():
                ek, _ = _enc_key(k)
                items.append([ek, walk(v, path + [k])])
            if not isinstance(x, collections.OrderedDict):
                return {"t": "dict", "v": items}
            node = {"t": "odict", "v": items}
            meta = getattr(x, "_metadata", None)
            if meta is not None:
                # Module.state_dict()'s per-module versions, which load_state_dict passes to
                # _load_from_state_dict (no tensors: nothing there is named)
                node["m"] = walk(meta, path + ["%_metadata"])
            return node
        if is_stateful(x):
            return {"t": "stateful", "c": f"{type(x).__module__}.{type(x).__qualname__}",
                    "v": walk(x.state_dict(), path)}
        t = torch_mod()
        if t is not None and isinstance(x, t.Size):
            return {"t": "size", "v": list(x)}
        if isinstance(x, (list, tuple)):
            v = [walk(e, path + [i]) for i, e in enumerate(x)]
            return {"t": "tuple" if isinstance(x, tuple) else "list", "v": v}
        if isinstance(x, (bytes, bytearray)):
            return {"t": "bytes", "v": base64.b64encode(bytes(x)).decode()}
        n = np_mod()
        if n is not None and isinstance(x, n.generic) and x.dtype.kind in "biuf":
            return {"t": "npscalar", "d": x.dtype.name, "v": x.item()}
        where = path_name(path) or "<root>"
        raise TypeError(f"cannot save {where!r}: unsupported type {type(x).__module__}."
                        f"{type(x).__qualname__} (supported: torch tensors, numpy arrays, dict, "
                        f"list, tuple, int, float, bool, None, str, bytes, numpy scalars, objects "
                        f"with state_dict() and load_state_dict())")

    tree = walk(state, [])
    return tree, leaves


def prep_torch(leaf, x):
    import torch
    t = x.detach()
    if t.layout != torch.strided:
        raise TypeError(f"tensor {leaf.name!r}: layout {t.layout} is not supported (only dense "
                        f"tensors; call .to_dense() first)")
    if t.is_quantized:
        raise TypeError(f"tensor {leaf.name!r}: quantized tensors are not supported")
    dt = torch_dtypes().get(t.dtype)
    if dt is None:
        raise TypeError(f"tensor {leaf.name!r}: dtype {t.dtype} is not supported (supported: "
                        f"{', '.join(sorted(str(d) for d in torch_dtypes()))})")
    dev = t.device
    if dev.type == "cpu":
        leaf.mem = L.MEM_HOST
    elif dev.type == "cuda":
        leaf.mem = dev.index if dev.index is not None else torch.cuda.current_device()
    else:
        raise TypeError(f"tensor {leaf.name!r}: device {dev} is not supported (CPU and CUDA only)")
    if getattr(t, "is_neg", None) is not None and t.is_neg():
        t = t.resolve_neg()
    if not t.is_contiguous():
        # Policy: a contiguous copy is made now (on the tensor's device, ordered on the current
        # stream) and kept alive until the snapshot is done.
        t = t.contiguous()
    leaf.obj = t
    leaf.dtype = dt
    leaf.shape = tuple(int(s) for s in t.shape)
    leaf.nbytes = t.numel() * t.element_size()
    leaf.ptr = t.data_ptr() if leaf.nbytes else None


def prep_numpy(leaf, x):
    import numpy as np
    dt = np_dtypes().get(x.dtype.name) if x.dtype.isnative or x.dtype.itemsize == 1 else None
    if dt is None and not x.dtype.isnative and x.dtype.name in np_dtypes():
        x = x.astype(x.dtype.newbyteorder("="))
        dt = np_dtypes()[x.dtype.name]
    if dt is None or x.dtype.fields is not None:
        raise TypeError(f"array {leaf.name!r}: dtype {x.dtype} is not supported (supported: "
                        f"bool, int8-64, uint8-64, float16, float32, float64)")
    if not x.flags.c_contiguous:
        x = np.ascontiguousarray(x)
    leaf.obj = x
    leaf.dtype = dt
    leaf.shape = tuple(int(s) for s in x.shape)
    leaf.mem = L.MEM_HOST
    leaf.nbytes = x.nbytes
    leaf.ptr = x.__array_interface__["data"][0] if leaf.nbytes else None


def dumps(tree):
    return json.dumps({"format": FORMAT, "tree": tree}, separators=(",", ":"), allow_nan=True)


def loads(s):
    d = json.loads(s)
    if d.get("format") != FORMAT:
        raise ValueError(f"libckpt.python metadata format {d.get('format')} is not supported")
    return d["tree"]


def build(tree, tensor_for):
    """Rebuilds the state from its description; tensor_for(kind, name, saved location) gives
    each tensor."""
    def rec(n):
        if not isinstance(n, dict):
            return n
        t = n["t"]
        if t in ("torch", "numpy"):
            return tensor_for(t, n["n"], n.get("d", "cpu"))
        if t == "dict":
            return {_dec_key(k): rec(v) for k, v in n["v"]}
        if t == "odict":
            d = collections.OrderedDict((_dec_key(k), rec(v)) for k, v in n["v"])
            if "m" in n:
                d._metadata = rec(n["m"])
            return d
        if t == "stateful":
            return rec(n["v"])  # what state_dict() gave; restore() hands it to load_state_dict
        if t == "list":
            return [rec(v) for v in n["v"]]
        if t == "tuple":
            return tuple(rec(v) for v in n["v"])
        if t == "size":
            import torch
            return torch.Size(n["v"])
        if t == "bytes":
            return base64.b64decode(n["v"])
        if t == "npscalar":
            import numpy as np
            return np.dtype(n["d"]).type(n["v"])
        raise ValueError(f"unknown node type {t!r} in libckpt.python metadata")
    return rec(tree)


def tensor_names(tree):
    out = []

    def rec(n):
        if isinstance(n, dict):
            t = n["t"]
            if t in ("torch", "numpy"):
                out.append(n["n"])
            elif t in ("dict", "odict"):
                for _, v in n["v"]:
                    rec(v)
            elif t == "stateful":
                rec(n["v"])
            elif t in ("list", "tuple"):
                for v in n["v"]:
                    rec(v)
    rec(tree)
    return out


def kind_of(tree, name):
    """'torch' or 'numpy' for the saved tensor called name, None when the tree does not name it."""
    stack = [tree]
    while stack:
        n = stack.pop()
        if isinstance(n, dict):
            t = n.get("t")
            if t in ("torch", "numpy"):
                if n.get("n") == name:
                    return t
            elif t in ("dict", "odict"):
                stack.extend(v for _, v in n["v"])
            elif t in ("list", "tuple"):
                stack.extend(n["v"])
            elif t == "stateful":
                stack.append(n["v"])
    return None
