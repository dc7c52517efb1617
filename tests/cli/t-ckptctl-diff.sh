#!/usr/bin/env bash
# ckptctl diff: tensors added, removed and changed with the changed bytes (chunk digests), a dtype
# or shape change (changed entirely), metadata changes, the same content saved with another chunk
# size (compared by reading), bad input.
. tests/cli/lib.sh

mkst model "$T/m1.safetensors" 1
mkst model "$T/m2.safetensors" 2
mkst big "$T/big1.safetensors" 1
mkst nometa "$T/nometa.safetensors" 1
# big1 with one chunk of big.weight changed (bytes 1 MiB + 10 .. + 20), small retyped to I8 and a
# tensor added; and nometa with "a" reshaped and "b" dropped.
python3 - "$T" <<'PY'
import sys
sys.path.insert(0, "tests/cli")
import mkst
t = sys.argv[1]
raw = open(f"{t}/big1.safetensors", "rb").read()
import json, struct
n = struct.unpack("<Q", raw[:8])[0]
data = bytearray(raw[8 + n:])
h = json.loads(raw[8:8 + n])
b, e = h["big.weight"]["data_offsets"]
w = bytearray(data[b:e])
w[(1 << 20) + 10:(1 << 20) + 20] = bytes(10)
s0, s1 = h["small"]["data_offsets"]
open(f"{t}/big1b.safetensors", "wb").write(mkst.build(
    [("big.weight", "F32", [1024, 1024], bytes(w)), ("small", "I8", [100], bytes(data[s0:s1])),
     ("extra", "U8", [5])], meta={"note": "edited"}, seed=1))
a = mkst.data(1, "a", 24)
open(f"{t}/nometa2.safetensors", "wb").write(mkst.build([("a", "F32", [3, 2], a)], seed=1))
PY

check missing-store ckptctl diff "$STORE" 1 2
ckptctl import -q "$STORE" --step 1 "$T/m1.safetensors" || exit 1
ckptctl import -q "$STORE" --step 2 "$T/m2.safetensors" || exit 1
ckptctl import -q "$STORE" --step 3 "$T/big1.safetensors" || exit 1
ckptctl import -q "$STORE" --step 4 "$T/big1b.safetensors" || exit 1
ckptctl import -q "$STORE" --step 5 "$T/big1.safetensors" --chunk-size 64K || exit 1
ckptctl import -q "$STORE" --step 6 "$T/nometa.safetensors" || exit 1
ckptctl import -q "$STORE" --step 7 "$T/nometa2.safetensors" || exit 1

check models ckptctl diff "$STORE" 1 2
check models-json ckptctl diff "$STORE" 1 2 --json
check same ckptctl diff "$STORE" 2 2
check reverse ckptctl diff "$STORE" 2 1
check latest ckptctl diff "$STORE" 6 latest
check edited ckptctl diff "$STORE" 3 4
check edited-json ckptctl diff --json "$STORE" 3 4
check chunk-size ckptctl diff "$STORE" 3 5
check chunk-size-edited ckptctl diff "$STORE" 5 4
check reshape ckptctl diff "$STORE" 6 7
check reshape-json ckptctl diff "$STORE" 6 7 --json
check disjoint ckptctl diff "$STORE" 2 3
expect "diff 3 4 --json: one 1 MiB chunk of big.weight, small and extra entirely" python3 -c '
import json, sys
d = json.load(sys.stdin)
ch = {c["name"]: c for c in d["changed"]}
assert ch["big.weight"]["changed_bytes"] == 1 << 20 and ch["big.weight"]["changed_chunks"] == 1, ch
assert ch["small"]["layout_changed"] and ch["small"]["changed_bytes"] == 100, ch
assert [a["name"] for a in d["added"]] == ["extra"] and d["added_bytes"] == 5, d
assert d["changed_bytes"] == (1 << 20) + 100 and d["unchanged"] == 0, d
assert d["metadata"]["added"] == {"note": "edited"}, d
' < <(ckptctl diff "$STORE" 3 4 --json)

check unknown-a ckptctl diff "$STORE" 9 1
check unknown-b ckptctl diff "$STORE" 1 9
check usage-one-step ckptctl diff "$STORE" 1
check usage-noargs ckptctl diff
check usage-extra ckptctl diff "$STORE" 1 2 3
check usage-step ckptctl diff "$STORE" 1 two
check usage-option ckptctl diff "$STORE" 1 2 -x

cp -a "$STORE" "$T/s-man"
corrupt flip "$T/s-man/manifests/00000000000000000002.ckpt"
check damaged-manifest ckptctl diff "$T/s-man" 1 2
# Different chunk sizes make diff read the data: a truncated pack is then named.
cp -a "$STORE" "$T/s-ptrunc"
for p in "$T"/s-ptrunc/packs/*; do corrupt truncate "$p" half; done
check truncated-pack ckptctl diff "$T/s-ptrunc" 3 5
check truncated-pack-digests ckptctl diff "$T/s-ptrunc" 3 4
finish
