#!/usr/bin/env bash
# Tensor names as the Python binding writes them (docs/format.md, "Tensor names of the Python
# binding"): show, diff and export --select work on dotted names ("model.fc1.weight"), also for a
# store an older binding wrote with escaped keys ("model.fc1%2Eweight": the fixture
# tests/python/data/oldnames-store.tar.gz); --select takes any subtree, on whole components; the
# binding's own metadata entries are left out of show and diff unless --all; a checkpoint of old
# names and one of new names compare tensor by tensor.
. tests/cli/lib.sh

tar xzf "$ROOT/tests/python/data/oldnames-store.tar.gz" -C "$T" || exit 1
OLD=$T/store  # normalized to $STORE in the golden files

# Old escaped names, shown and compared dotted; the binding's structure entry hidden.
check old-show ckptctl show "$OLD" 2
check old-show-all ckptctl show "$OLD" 2 --all
check old-show-json ckptctl show "$OLD" 2 --json
expect "show --json --all has the binding's entry, without --all it has not" python3 -c '
import json, subprocess, sys
ck, st = sys.argv[1:3]
a = json.loads(subprocess.check_output([ck, "show", st, "2", "--json", "--all"]))
b = json.loads(subprocess.check_output([ck, "show", st, "2", "--json"]))
assert "libckpt.python" in a["metadata"] and b["metadata"] == {"note": "step 2"}, (a, b)
assert [t["name"] for t in a["tensor_info"]][:2] == ["model.fc1.weight", "model.fc1.bias"], a
' "$CK" "$OLD"
check old-diff ckptctl diff "$OLD" 1 2
check old-diff-json ckptctl diff "$OLD" 1 2 --json
expect "diff --all compares the binding's entry too" bash -c \
	"'$CK' diff '$OLD' 1 2 --all | grep -q '^meta ~   libckpt.python = '"

# export --select of any subtree, matched on dotted names by whole components.
sel() { # SUBTREE OUT: the names and data of the exported file, as "name dtype shape sha"
	"$CK" export -q "$OLD" 2 -o "$T/$2.safetensors" --select "$1" &&
	python3 - "$T/$2.safetensors" <<'PY'
import hashlib, json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
print("meta", json.dumps(h.pop("__metadata__", {}), sort_keys=True))
for k, v in h.items():
    d = b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]
    print(k, v["dtype"], v["shape"], hashlib.sha256(d).hexdigest()[:12])
PY
}
check old-select-block sel model.blocks.0 block
check old-select-fc1 sel model.fc1 fc1
check old-select-pct sel model.100% pct
check old-select-optim sel optim.state.0 optim
check old-select-partial ckptctl export "$OLD" 2 -o "$T/x.safetensors" --select model.fc
check old-select-clash ckptctl export "$OLD" 2 -o "$T/x.safetensors" --select x.y
check old-complete ckptctl __complete export --select "$OLD" 2
expect "export without --select keeps the stored names and the binding's entries" python3 -c '
import json, struct, subprocess, sys
ck, st, t = sys.argv[1:4]
subprocess.check_call([ck, "export", "-q", st, "2", "-o", t + "/all.safetensors"])
b = open(t + "/all.safetensors", "rb").read()
h = json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])
assert "model.fc1%2Eweight" in h and "libckpt.python" in h["__metadata__"], sorted(h)
' "$CK" "$OLD" "$T"

# New names (libckpt.names = dotted) are taken as they are: a literal %2E stays.
python3 - "$T" <<'PY'
import json, struct, sys
sys.path.insert(0, "tests/cli")
import mkst
t = sys.argv[1]
tree = json.dumps({"format": 1, "tree": {"t": "dict", "v": []}})
names = [f"model.layers.{i}.attn.weight" for i in (0, 1, 10)] + ["model.embed.weight",
                                                                  "model.lit%2Ekey"]
open(f"{t}/new.safetensors", "wb").write(mkst.build(
    [(n, "F32", [2, 2]) for n in names],
    meta={"libckpt.python": tree, "libckpt.names": "dotted", "note": "new"}, seed=1))

# Step 3 on the old store: the tensors of step 2 under their dotted names, with step 2's values
# (mk_oldnames.state: arange + 1000 n + step) except model.fc1.bias; x.y.z dropped, one added.
def vals(n, shape, step):
    k = 1
    for s in shape:
        k *= s
    return struct.pack(f"<{k}f", *[float(i + 1000 * n + step) for i in range(k)])
ts = [("model.fc1.weight", 1, [4, 3]), ("model.fc1.bias", 2, [4]), ("model.fc10.weight", 3, [2, 4]),
      ("model.blocks.0.attn.weight", 4, [8, 2]), ("model.blocks.1.attn.weight", 5, [8, 2]),
      ("model.100%.scale", 6, []), ("optim.state.0.exp_avg", 7, [4, 3])]
body = [(name, "F32", shape, vals(n, shape, 3 if name == "model.fc1.bias" else 2))
        for name, n, shape in ts] + [("model.added", "F32", [1], vals(0, [1], 0))]
open(f"{t}/step3.safetensors", "wb").write(mkst.build(
    body, meta={"libckpt.python": tree, "libckpt.names": "dotted", "note": "step 3"}))
PY
ckptctl import -q "$T/new" --step 1 "$T/new.safetensors" || exit 1
check new-show ckptctl show "$T/new" 1
check new-select ckptctl export "$T/new" 1 -o "$T/l1.safetensors" --select model.layers.1 --json
expect "--select model.layers.1 is layer 1 alone, not layer 10" python3 -c '
import json, struct, sys
b = open(sys.argv[1], "rb").read()
h = json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])
assert sorted(h) == ["__metadata__", "attn.weight"] and h["__metadata__"] == {"note": "new", "format": "pt"}, h
' "$T/l1.safetensors"
check new-select-literal ckptctl export "$T/new" 1 -o "$T/x.safetensors" --select model.lit.key
expect "--select model of new names keeps a literal %2E" python3 -c '
import json, struct, subprocess, sys
ck, st, out = sys.argv[1:4]
subprocess.check_call([ck, "export", "-q", st, "1", "-o", out, "--select", "model"])
b = open(out, "rb").read()
h = json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])
assert "lit%2Ekey" in h and "embed.weight" in h, sorted(h)
' "$CK" "$T/new" "$T/m.safetensors"

ckptctl import -q "$OLD" --step 3 "$T/step3.safetensors" || exit 1
check old-new-diff ckptctl diff "$OLD" 2 3
finish
