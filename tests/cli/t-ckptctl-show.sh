#!/usr/bin/env bash
# ckptctl show: a checkpoint's summary, metadata and tensors as a table and as JSON; odd names and
# metadata escaped; empty and scalar tensors; an unknown step, a missing store, bad command lines,
# a damaged manifest, a truncated pack (show reads no tensor data: it still shows).
. tests/cli/lib.sh

mkst model "$T/m1.safetensors" 1
mkst model "$T/m2.safetensors" 2
mkst names "$T/names.safetensors" 1
mkst empty "$T/empty.safetensors" 1
mkst big "$T/big.safetensors" 1

check missing-store ckptctl show "$STORE" 1
ckptctl import -q "$STORE" --step 1 "$T/m1.safetensors" || exit 1
ckptctl import -q "$STORE" --step 2 "$T/m2.safetensors" || exit 1
ckptctl import -q "$STORE" --step 3 "$T/names.safetensors" || exit 1
ckptctl import -q "$STORE" --step 4 "$T/empty.safetensors" || exit 1
ckptctl import -q "$STORE" --step 5 "$T/big.safetensors" || exit 1

# One JSON vocabulary (the C API's names): list, show and import call the chunk counts and the
# new bytes chunks_new, chunks_reused and bytes_new; the older names stay, equal, for one version.
ckptctl import -q "$T/s-voc" --step 1 "$T/m1.safetensors" || exit 1
expect "list, show and import --json share chunks_new, chunks_reused, bytes_new" python3 -c '
import json, sys
lst = json.load(open(sys.argv[1]))[0]
show = json.load(open(sys.argv[2]))
imp = json.load(open(sys.argv[3]))
for d in (lst, show, imp):
    assert d["chunks_new"] == d["new_chunks"] and d["bytes_new"] == d["new_bytes"], d
for k in ("chunks", "chunks_new", "bytes_new"):
    assert lst[k] == show[k], k
assert imp["chunks_reused"] == imp["reused_chunks"] == imp["chunks"] - imp["chunks_new"], imp
assert all("chunks_new" in t and "bytes_new" in t for t in show["tensor_info"])
' <(ckptctl list "$STORE" --json) <(ckptctl show "$STORE" 1 --json) \
	<(ckptctl import "$T/s-voc" --step 2 "$T/m1.safetensors" --json)

check 1 ckptctl show "$STORE" 1
check 2-reused ckptctl show "$STORE" 2
check 2-json ckptctl show "$STORE" 2 --json
check names ckptctl show "$STORE" 3
check names-json ckptctl show --json "$STORE" 3
check empty ckptctl show "$STORE" 4
check latest ckptctl show "$STORE" latest
expect "show --json agrees with list --json and the safetensors header" python3 -c '
import json, struct, sys
s = json.load(open(sys.argv[1]))
l = [c for c in json.load(open(sys.argv[2])) if c["step"] == 3][0]
for k in ("step", "tensors", "logical_bytes", "new_bytes", "stored_bytes", "chunks", "new_chunks"):
    assert s[k] == l[k], (k, s[k], l[k])
raw = open(sys.argv[3], "rb").read()
h = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])
meta = h.pop("__metadata__")
assert s["metadata"] == meta, (s["metadata"], meta)
assert [t["name"] for t in s["tensor_info"]] == list(h), "names"
for t in s["tensor_info"]:
    assert t["dtype"] == h[t["name"]]["dtype"] and t["shape"] == h[t["name"]]["shape"], t
    assert t["chunks"] == t["chunks_new"] + t["chunks_reused"], t
assert sum(t["nbytes"] for t in s["tensor_info"]) == s["logical_bytes"]
' <(ckptctl show "$STORE" 3 --json) <(ckptctl list "$STORE" --json) "$T/names.safetensors"

# The read-only commands take no lock: they work while a writer holds it.
if command -v flock >/dev/null 2>&1; then
	exec 9<"$STORE/LOCK"
	flock -x 9 || exit 1
	expect "show works while the lock is held" bash -c "'$CK' show '$STORE' latest >/dev/null"
	expect "diff works while the lock is held" bash -c "'$CK' diff '$STORE' 1 2 >/dev/null"
	expect "du works while the lock is held" bash -c "'$CK' du '$STORE' >/dev/null"
	exec 9<&-
fi

check unknown-step ckptctl show "$STORE" 9
check usage-nostep ckptctl show "$STORE"
check usage-noargs ckptctl show
check usage-extra ckptctl show "$STORE" 1 2
check usage-step ckptctl show "$STORE" 1x
check usage-option ckptctl show "$STORE" 1 --bogus
mkdir "$T/plain"
check not-a-store ckptctl show "$T/plain" 1

cp -a "$STORE" "$T/s-man"
corrupt flip "$T/s-man/manifests/00000000000000000002.ckpt"
check damaged-manifest ckptctl show "$T/s-man" 2
check damaged-other ckptctl show "$T/s-man" 1

cp -a "$STORE" "$T/s-ptrunc"
for p in "$T"/s-ptrunc/packs/*; do corrupt truncate "$p" half; done
check truncated-pack ckptctl show "$T/s-ptrunc" 5
finish
