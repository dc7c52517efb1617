#!/usr/bin/env bash
# ckptctl du: space per checkpoint (referenced = exclusive + shared) and garbage, checked against
# the files on disk: the pack total is the sum of the pack files' sizes, the leftover bytes those
# of the temporary files, an unreferenced pack's size shows as unreferenced; a damaged manifest
# makes nothing garbage; bad input.
. tests/cli/lib.sh

for s in 1 2 3; do mkst model "$T/m$s.safetensors" "$s"; done
mkst big "$T/big.safetensors" 1

check missing-store ckptctl du "$STORE"
ckptctl import -q "$STORE" --step 10 "$T/m1.safetensors" || exit 1
ckptctl import -q "$STORE" --step 20 "$T/m2.safetensors" || exit 1
ckptctl import -q "$STORE" --step 30 "$T/big.safetensors" || exit 1
ckptctl import -q "$STORE" --step 40 "$T/m3.safetensors" || exit 1

check table ckptctl du "$STORE"
check json ckptctl du "$STORE" --json

# du --json FILE against the files of STORE: prints nothing, fails on a mismatch.
ondisk() {
	python3 - "$1" "$2" <<'PY'
import glob, json, os, sys
st, d = sys.argv[1], json.load(open(sys.argv[2]))
packs = glob.glob(os.path.join(st, "packs", "*.pack"))
assert d["packs"] == len(packs), (d["packs"], len(packs))
assert d["pack_bytes"] == sum(os.path.getsize(p) for p in packs), d
tmp = [p for p in glob.glob(os.path.join(st, ".*.tmp.*")) + glob.glob(os.path.join(st, "manifests", ".*.tmp.*"))]
assert d["leftover_bytes"] == sum(os.path.getsize(p) for p in tmp), d
mf = [p for p in glob.glob(os.path.join(st, "manifests", "*.ckpt"))]
if d["invalid_manifests"] == 0:
    assert d["manifest_bytes"] == sum(os.path.getsize(p) for p in mf), d
assert d["live_bytes"] + d["unreferenced_pack_bytes"] + d["dead_record_bytes"] == d["pack_bytes"], d
assert d["garbage_bytes"] == d["unreferenced_pack_bytes"] + d["dead_record_bytes"] + d["leftover_bytes"], d
for c in d["checkpoints"]:
    assert c["referenced_bytes"] == c["exclusive_bytes"] + c["shared_bytes"], c
PY
}
ckptctl du "$STORE" --json >"$T/du.json"
expect "du --json: totals match the files on disk" ondisk "$STORE" "$T/du.json"
expect "du --json: no garbage in a fresh store" python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["garbage_bytes"] == 0 and d["invalid_manifests"] == 0, d
assert [c["step"] for c in d["checkpoints"]] == [10, 20, 30, 40], d
big = d["checkpoints"][2]
assert big["shared_bytes"] == 0 and big["exclusive_bytes"] > 4 << 20, big
# 10, 20 and 40 share the embedding and layer 1.
assert all(d["checkpoints"][k]["shared_bytes"] > 0 for k in (0, 1, 3)), d
' "$T/du.json"

# Garbage: an unreferenced pack (a copy under an unused id) and leftovers of interrupted saves.
cp -a "$STORE" "$T/s-gar"
cp "$T/s-gar/packs/00000001.pack" "$T/s-gar/packs/00000099.pack"
head -c 1000 /dev/zero >"$T/s-gar/manifests/.00000000000000000050.ckpt.tmp.1234"
head -c 24 /dev/zero >"$T/s-gar/.store.tmp.99"
check garbage ckptctl du "$T/s-gar"
ckptctl du "$T/s-gar" --json >"$T/du2.json"
expect "du --json with garbage: totals match the files on disk" ondisk "$T/s-gar" "$T/du2.json"
expect "du --json: the copied pack is unreferenced, the leftovers counted" python3 -c '
import json, os, sys
d = json.load(open(sys.argv[1]))
assert d["unreferenced_pack_bytes"] == os.path.getsize(sys.argv[2]), d
assert d["leftover_bytes"] == 1024, d
' "$T/du2.json" "$T/s-gar/packs/00000099.pack"

# A damaged manifest: its chunks are unknown, so nothing is garbage.
cp -a "$T/s-gar" "$T/s-man"
corrupt flip "$T/s-man/manifests/00000000000000000020.ckpt"
check damaged-manifest ckptctl du "$T/s-man"
check damaged-manifest-json ckptctl du "$T/s-man" --json

check usage-noargs ckptctl du
check usage-extra ckptctl du "$STORE" 1
check usage-option ckptctl du --bogus "$STORE"
mkdir "$T/plain"
check not-a-store ckptctl du "$T/plain"
finish
