#!/usr/bin/env python3
"""Writes deterministic safetensors files for the ckptctl tests.

Usage: mkst.py KIND OUT [SEED]

Good files are written in the canonical layout (compact JSON, "__metadata__" first, contiguous
offsets in header order, padded with spaces to a multiple of 8), so that import then export must
give the same bytes back. Bad files each break one rule of the format.
"""
import hashlib
import json
import struct
import sys

SIZES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2, "F16": 2,
         "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "F64": 8, "I64": 8, "U64": 8}


def data(seed, name, n):
    """n deterministic bytes for tensor name."""
    out = bytearray()
    k = 0
    while len(out) < n:
        out += hashlib.sha256(f"{seed}/{name}/{k}".encode()).digest()
        k += 1
    return bytes(out[:n])


def nbytes(dtype, shape):
    n = SIZES[dtype]
    for d in shape:
        n *= d
    return n


def build(tensors, meta=None, seed=0, header_obj=None):
    """tensors: list of (name, dtype, shape[, bytes]). Returns the file's bytes."""
    hdr = {}
    if meta is not None:
        hdr["__metadata__"] = meta
    blob = bytearray()
    for t in tensors:
        name, dtype, shape = t[0], t[1], t[2]
        b = t[3] if len(t) > 3 else data(seed, name, nbytes(dtype, shape))
        hdr[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(blob), len(blob) + len(b)]}
        blob += b
    if header_obj is not None:
        hdr = header_obj
    return raw(json.dumps(hdr, separators=(",", ":"), ensure_ascii=False).encode(), bytes(blob))


def raw(js, blob, pad=True):
    if pad:
        js += b" " * (-len(js) % 8)
    return struct.pack("<Q", len(js)) + js + blob


def model(seed, layers=2, width=64):
    """A small model whose tensors all depend on seed, except the embedding (shared)."""
    t = [("model.embed_tokens.weight", "BF16", [128, width], data(0, "embed", 128 * width * 2))]
    for i in range(layers):
        for p in ("q_proj", "k_proj", "v_proj", "o_proj"):
            t.append((f"model.layers.{i}.attn.{p}.weight", "BF16", [width, width]))
        t.append((f"model.layers.{i}.norm.weight", "F32", [width]))
    t = [x if len(x) > 3 else (x[0], x[1], x[2], data(seed if "layers.0" in x[0] else 0, x[0],
                                                          nbytes(x[1], x[2]))) for x in t]
    return t


def main():
    kind, out = sys.argv[1], sys.argv[2]
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    f32 = [("a", "F32", [2, 3]), ("b", "I64", [4])]
    if kind == "model":
        # Layer 0 changes with seed; the rest is the same in every file (dedup).
        body = build(model(seed), meta={"format": "pt", "step": str(seed)}, seed=seed)
    elif kind == "big":
        # One 4 MiB tensor and a small one: several chunks at the default chunk size.
        body = build([("big.weight", "F32", [1024, 1024]), ("small", "U8", [100])], seed=seed)
    elif kind == "drift":
        # A model whose every step changes about 20% of its tensors (ten 64 KiB tensors; whether
        # tensor j changes at step s is a fixed pseudo-random choice): the shape of training runs
        # where dedup leaves partly live packs behind after prune.
        def changes(s, j):
            return s == 0 or hashlib.sha256(f"{s}/{j}".encode()).digest()[0] < 52
        t = []
        for j in range(10):
            last = max(s for s in range(seed + 1) if changes(s, j))
            t.append((f"layer.{j}.weight", "F32", [16384], data(last, f"layer.{j}", 65536)))
        body = build(t, seed=seed)
    elif kind in ("pysaved", "pyclash"):
        # Tensor names as the Python binding writes them (python/libckpt/_tree.py): the dotted
        # path of keys, each key escaped ('%' as %25, '.' as %2E), and its structure entry
        # "libckpt.python" in the metadata. pyclash has two keys that unescape to one name.
        esc = lambda k: k.replace("%", "%25").replace(".", "%2E")
        if kind == "pysaved":
            keys = [("model", "conv1.weight", "F32", [4, 3]), ("model", "fc.bias", "BF16", [5]),
                    ("model", "100%.scale", "F32", []), ("optim", "state.0.exp_avg", "F32", [4, 3])]
        else:
            keys = [("model", "a.b", "F32", [2]), ("model", "a", "F32", [2])]
        t = []
        for top, key, dt, shape in keys:
            name = top + "." + (esc(key) if top == "model" else key)
            if kind == "pyclash" and key == "a":
                name = "model.a.b"
            t.append((name, dt, shape))
        tree = json.dumps({"format": 1, "tree": {"t": "dict", "keys": ["model", "optim"]}})
        body = build(t, meta={"libckpt.python": tree, "note": "kept"}, seed=seed)
    elif kind == "compressible":
        # Low-entropy data that zstd (and byte grouping) shrinks: bf16 and f32 values with few
        # distinct high bytes, and a run of zeros.
        bf = bytes((i * 7 + seed) % 13 if i % 2 == 0 else 0x3f for i in range(2 << 20))
        f4 = b"".join(struct.pack("<f", float((i * 31 + seed) % 97)) for i in range(1 << 18))
        body = build([("w.bf16", "BF16", [1 << 20], bf), ("w.f32", "F32", [1 << 18], f4),
                      ("zeros", "U8", [300000], bytes(300000))], meta={"kind": "compressible"})
    elif kind == "dtypes":
        body = build([(f"t_{d.lower()}", d, [3, 5]) for d in SIZES], seed=seed)
    elif kind == "empty":
        body = build([("scalar_f32", "F32", []), ("zero", "F32", [0]), ("zero2d", "BF16", [4, 0]),
                      ("one", "U8", [1]), ("scalar_i64", "I64", []), ("zero_last", "F64", [0, 7])],
                     meta={"note": "empty and scalar tensors"}, seed=seed)
    elif kind == "notensors":
        body = build([], meta={"note": "no tensors"}, seed=seed)
    elif kind == "names":
        names = ["with space", "unicode: \u00e9\u00e8 \u4e2d\u6587 \U0001F600", 'quote"d',
                 "back\\slash", "slash/in/name", "tab\tand\nnewline", "ctrl\x01\x1f\x7f",
                 "x" * 1000, "__metadata", "{}[]:,"]
        body = build([(n, "F16", [2, 2]) for n in names],
                     meta={"k\u00e9y \"q\"": "v\\al\nue", "empty": ""}, seed=seed)
    elif kind == "nometa":
        body = build(f32, seed=seed)
    # ---- bad files ----
    elif kind == "truncated":
        body = build(f32, seed=seed)[:-5]
    elif kind == "short":
        body = b"\x10\x00\x00"
    elif kind == "hugelen":
        body = struct.pack("<Q", 1 << 40) + b"{}      "
    elif kind == "badjson":
        body = raw(b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},}', b"\0" * 4)
    elif kind == "notobject":
        body = raw(b'["a"]', b"")
    elif kind == "badutf8":
        body = raw(b'{"a\xff":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', b"\0" * 4)
    elif kind == "range":
        body = raw(b'{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}', b"\0" * 8)
    elif kind == "overlap":
        body = raw(b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
                   b'"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}', b"\0" * 12)
    elif kind == "mismatch":
        body = raw(b'{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}', b"\0" * 8)
    elif kind == "hole":
        body = raw(b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
                   b'"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}', b"\0" * 12)
    elif kind == "trailing":
        body = raw(b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', b"\0" * 6)
    elif kind == "dupname":
        body = raw(b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
                   b'"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}', b"\0" * 8)
    elif kind == "baddtype":
        body = raw(b'{"a":{"dtype":"F4","shape":[1],"data_offsets":[0,1]}}', b"\0")
    elif kind == "negshape":
        body = raw(b'{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}', b"\0" * 4)
    elif kind == "missingfield":
        body = raw(b'{"a":{"dtype":"F32","data_offsets":[0,4]}}', b"\0" * 4)
    elif kind == "badmeta":
        body = raw(b'{"__metadata__":{"k":1}}', b"")
    elif kind == "emptyname":
        body = raw(b'{"":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', b"\0")
    else:
        sys.exit(f"mkst.py: unknown kind {kind}")
    with open(out, "wb") as f:
        f.write(body)


if __name__ == "__main__":
    main()
