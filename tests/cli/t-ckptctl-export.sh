#!/usr/bin/env bash
# ckptctl export: import -> export round trips are byte-identical for files in the canonical
# layout: every dtype, empty and scalar tensors, unusual names (spaces, unicode, quotes,
# backslashes, slashes, control characters, 1000 characters), metadata, several chunks, zstd.
. tests/cli/lib.sh

step=0
for kind in model dtypes empty names nometa big; do
	step=$((step + 1))
	mkst "$kind" "$T/$kind.safetensors" 7
	check "import-$kind" ckptctl import "$STORE" --step $step "$T/$kind.safetensors"
	check "$kind" ckptctl export "$STORE" $step -o "$T/$kind.out.safetensors"
	expect "round trip of $kind is byte-identical" \
		cmp "$T/$kind.safetensors" "$T/$kind.out.safetensors"
done

# Standard output, the default step (latest), an existing file is replaced.
expect "export to stdout is byte-identical" \
	cmp "$T/dtypes.safetensors" <(ckptctl export "$STORE" 2 -o -)
cp "$T/model.safetensors" "$T/replace.safetensors"
check latest-replace ckptctl export -q "$STORE" -o "$T/replace.safetensors"
expect "export without STEP writes the latest" cmp "$T/big.safetensors" "$T/replace.safetensors"
expect "no temporary file is left" test -z "$(ls "$T" | grep tmp-)"

# A file whose header is not canonical (pretty JSON, tensors listed out of data order) imports;
# its export is the canonical form, with the data in the same order.
python3 - "$T/pretty.safetensors" <<'PY'
import json, struct, sys
data = bytes(range(24))
hdr = {"b": {"dtype": "U8", "shape": [16], "data_offsets": [8, 24]},
       "__metadata__": {"z": "1", "a": "2"},
       "a": {"data_offsets": [0, 8], "shape": [2], "dtype": "F32"}}
js = json.dumps(hdr, indent=2).encode()
open(sys.argv[1], "wb").write(struct.pack("<Q", len(js)) + js + data)
PY
check import-pretty ckptctl import "$STORE" --step 100 "$T/pretty.safetensors"
ckptctl export "$STORE" 100 -o "$T/pretty.out.safetensors" -q
expect "a non-canonical header is exported canonically, data order kept" python3 - \
	"$T/pretty.safetensors" "$T/pretty.out.safetensors" <<'PY'
import struct, sys
a, b = (open(p, "rb").read() for p in sys.argv[1:3])
n = struct.unpack("<Q", b[:8])[0]
js = b[8:8 + n]
assert n % 8 == 0, n
assert js.rstrip(b" ") == b'{"__metadata__":{"z":"1","a":"2"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[16],"data_offsets":[8,24]}}', js
assert b[8 + n:] == a[-24:]
PY

# Options of a new store: 64 KiB chunks and zstd.
mkst big "$T/big2.safetensors" 2
check import-zstd ckptctl import "$T/zstore" --step 1 --chunk-size 64K --compress zstd --level 3 \
	"$T/big2.safetensors"
check zstd ckptctl export "$T/zstore" 1 -o "$T/big2.out.safetensors"
expect "round trip through zstd is byte-identical" \
	cmp "$T/big2.safetensors" "$T/big2.out.safetensors"
check verify-zstd ckptctl verify "$T/zstore"
mkst compressible "$T/comp.safetensors" 1
check import-zstd-compressible ckptctl import "$T/zstore" --step 2 --compress zstd \
	"$T/comp.safetensors"
check zstd-compressible ckptctl export "$T/zstore" 2 -o "$T/comp.out.safetensors"
expect "round trip of compressed chunks is byte-identical" \
	cmp "$T/comp.safetensors" "$T/comp.out.safetensors"
expect "zstd stored less than the logical size" python3 -c '
import json, sys
c = [x for x in json.load(sys.stdin) if x["step"] == 2][0]
assert c["new_bytes"] < c["logical_bytes"] // 2, c
' < <(ckptctl list "$T/zstore" --json)
check verify-zstd-compressible ckptctl verify "$T/zstore" --all
check names-list ckptctl list "$STORE"
# --select: one subtree of a state dict the Python binding saved (escaped keys, its
# "libckpt.python" metadata entry), as load_state_dict() takes it: only that subtree's tensors,
# named relative to it and unescaped, the binding's entry gone, the other metadata and every
# byte kept, and "format": "pt" added as safetensors.torch writes it (transformers 4.x
# refuses a file without it).
mkst pysaved "$T/py.safetensors" 3
ckptctl import -q "$T/pystore" --step 7 "$T/py.safetensors" || exit 1
check select ckptctl export "$T/pystore" 7 -o "$T/model.safetensors" --select model
expect "export --select model: unescaped names, binding metadata dropped, data intact" python3 -c '
import json, struct, sys
def load(p):
    b = open(p, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    meta = h.pop("__metadata__", {})
    return {k: (v["dtype"], v["shape"], b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            for k, v in h.items()}, meta
src, _ = load(sys.argv[1])
out, meta = load(sys.argv[2])
assert meta == {"note": "kept", "format": "pt"}, meta
want = {"conv1.weight": "model.conv1%2Eweight", "fc.bias": "model.fc%2Ebias",
        "100%.scale": "model.100%25%2Escale"}
assert set(out) == set(want), sorted(out)
for k, v in want.items():
    assert out[k] == src[v], k
' "$T/py.safetensors" "$T/model.safetensors"
check select-json ckptctl export "$T/pystore" 7 -o "$T/optim.safetensors" --select optim.state --json
check json ckptctl export "$T/pystore" latest -o "$T/all.safetensors" --json
expect "export --json: the whole checkpoint, byte-identical" cmp "$T/all.safetensors" "$T/py.safetensors"
check select-missing ckptctl export "$T/pystore" 7 -o "$T/x.safetensors" --select modle
check select-leaf ckptctl export "$T/pystore" 7 -o "$T/x.safetensors" --select model.fc%2Ebias
mkst pyclash "$T/clash.safetensors" 1
ckptctl import -q "$T/pystore" --step 8 "$T/clash.safetensors" || exit 1
check select-clash ckptctl export "$T/pystore" 8 -o "$T/x.safetensors" --select model
expect "failed exports leave no file" test ! -e "$T/x.safetensors"
check usage-json-stdout ckptctl export "$T/pystore" 7 -o - --json
check usage-select-empty ckptctl export "$T/pystore" 7 -o "$T/x.safetensors" --select ''
# An output path that is a symbolic link: the link itself is replaced by the new file (rename
# does not follow it); its target, existing or not, is never written.
cp "$T/model.safetensors" "$T/target.safetensors"
ln -s "$T/target.safetensors" "$T/link.safetensors"
ln -s "$T/nowhere.safetensors" "$T/dangling.safetensors"
expect "export to a symlink path succeeds" ckptctl export -q "$STORE" 2 -o "$T/link.safetensors"
expect "a symlink output becomes a regular file with the export" \
	test ! -L "$T/link.safetensors" -a -f "$T/link.safetensors"
expect "holding the export" cmp "$T/dtypes.safetensors" "$T/link.safetensors"
expect "and its target is left as it was" cmp "$T/model.safetensors" "$T/target.safetensors"
expect "export to a dangling symlink succeeds" ckptctl export -q "$STORE" 2 -o "$T/dangling.safetensors"
expect "a dangling symlink output is replaced, its target not created" \
	test ! -L "$T/dangling.safetensors" -a ! -e "$T/nowhere.safetensors"
expect "no temporary file is left" test -z "$(ls "$T" | grep tmp-)"
finish
