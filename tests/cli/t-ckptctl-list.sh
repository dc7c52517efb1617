#!/usr/bin/env bash
# ckptctl import and list: a store of a few checkpoints made from generated safetensors files,
# listed as a table and as JSON; dedup between checkpoints shows in the new bytes; tags; the
# completion of export --select and --tag from the store.
. tests/cli/lib.sh

for s in 1 2 3; do mkst model "$T/m$s.safetensors" "$s"; done
mkst big "$T/big.safetensors" 1

check missing-store ckptctl list "$STORE"
check import-10 ckptctl import "$STORE" --step 10 "$T/m1.safetensors"
check import-20 ckptctl import "$STORE" "$T/m2.safetensors" --step 20
check import-30-json ckptctl import "$STORE" -s 30 "$T/m3.safetensors" --json
check import-40-quiet ckptctl import --quiet "$STORE" --step 40 "$T/big.safetensors"
# The same content again: every chunk is already in the store.
check import-50-dedup ckptctl import "$STORE" --step 50 "$T/big.safetensors"
check import-exists ckptctl import "$STORE" --step 20 "$T/m1.safetensors"
check import-overwrite ckptctl import "$STORE" --step 20 --overwrite "$T/m2.safetensors"
check table ckptctl list "$STORE"
check json ckptctl list "$STORE" --json
check json-first ckptctl list --json "$STORE"
expect "list --json is valid JSON with the documented fields" python3 -c '
import json, sys
a = json.load(open(sys.argv[1]))
assert [c["step"] for c in a] == [10, 20, 30, 40, 50], a
for c in a:
    for k in ("step", "time", "tensors", "logical_bytes", "new_bytes", "stored_bytes", "chunks",
              "new_chunks"):
        assert isinstance(c[k], int), (k, c)
assert a[4]["new_chunks"] == 0 and a[4]["logical_bytes"] == a[3]["logical_bytes"], a
' <(ckptctl list "$STORE" --json)

# Tags: set at import (repeated, a tag given twice kept once), shown by list (a TAGS column), show
# and --json, filtered by list --tag (any of them), kept through export and import (the file's
# "ckpt.tags" entry), refused when they break the rule.
check import-tagged ckptctl import -q "$STORE" --step 60 --tag release -t best --tag release \
	"$T/m1.safetensors"
check import-tagged2 ckptctl import -q "$STORE" --step 70 --tag nightly "$T/m2.safetensors"
check tags ckptctl list "$STORE"
check tag-filter ckptctl list "$STORE" --tag best --tag nightly
check tag-none ckptctl list "$STORE" --tag nope
check tag-json ckptctl list "$STORE" --tag release --json
check show-tags ckptctl show "$STORE" 60
expect "show --json has the tags" python3 -c '
import json, sys
a = json.load(sys.stdin)
assert a["tags"] == ["release", "best"] and a["metadata"]["ckpt.tags"] == "release,best", a
' < <(ckptctl show "$STORE" 60 --json)
ckptctl export -q "$STORE" 60 -o "$T/tagged.safetensors" || exit 1
check import-tags-roundtrip ckptctl import -q "$STORE" --step 80 --tag x "$T/tagged.safetensors"
expect "export then import keeps the tags" test "$(ckptctl list "$STORE" --json | python3 -c '
import json, sys
print([",".join(c["tags"]) for c in json.load(sys.stdin) if c["step"] == 80][0])')" = release,best,x
ckptctl import -q "$STORE" --step 85 "$T/tagged.safetensors" || exit 1
ckptctl export -q "$STORE" 85 -o "$T/tagged2.safetensors" || exit 1
expect "and the file exports byte-identical" cmp "$T/tagged.safetensors" "$T/tagged2.safetensors"
check usage-import-tag-comma ckptctl import "$STORE" --step 90 --tag a,b "$T/m1.safetensors"
check usage-import-tag-space ckptctl import "$STORE" --step 90 --tag "a b" "$T/m1.safetensors"
check usage-import-tag-long ckptctl import "$STORE" --step 90 \
	--tag "$(printf 'x%.0s' $(seq 65))" "$T/m1.safetensors"
check usage-tag-empty ckptctl list "$STORE" --tag ''
python3 "$ROOT/tests/cli/mkst.py" model "$T/badtag.safetensors" 1 >/dev/null 2>&1
python3 - "$T/badtag.safetensors" <<'PY'
# a file whose "ckpt.tags" entry breaks the rule: the import refuses it, naming the entry
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
h.setdefault("__metadata__", {})["ckpt.tags"] = "ok,bad tag"
j = json.dumps(h).encode()
j += b" " * ((8 - len(j) % 8) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(j)) + j + b[8 + n:])
PY
check import-bad-file-tags ckptctl import "$STORE" --step 90 "$T/badtag.safetensors"
expect "refused imports made no checkpoint" test "$(ckptctl list "$STORE" --json | python3 -c '
import json, sys
print(" ".join(str(c["step"]) for c in json.load(sys.stdin)))')" = "10 20 30 40 50 60 70 80 85"

# Completion from the store on the command line (`ckptctl __complete CMD OPTION ARG...`, what
# tools/completion/ckptctl asks): export --select offers the checkpoint's top-level names, --tag
# and --keep-tag the store's tags; a store that cannot be read offers nothing, silently.
python3 "$ROOT/tests/cli/mkst.py" model "$T/tree.safetensors" 1 >/dev/null
python3 - "$T/tree.safetensors" <<'PY'
# top-level names model, optim and ema: rename the tensors of the generated file
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
names = [k for k in h if k != "__metadata__"]
for i, k in enumerate(names):
    h[("model", "optim", "ema")[i % 3] + ".w" + str(i)] = h.pop(k)
j = json.dumps(h).encode()
j += b" " * ((8 - len(j) % 8) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(j)) + j + b[8 + n:])
PY
ckptctl import -q "$T/s-tree" --step 5 "$T/tree.safetensors" || exit 1
ckptctl import -q "$T/s-tree" --step 6 "$T/m1.safetensors" || exit 1
check complete-select ckptctl __complete export --select "$T/s-tree" 5
check complete-select-latest ckptctl __complete export --select "$T/s-tree"
check complete-select-env env CKPT_STORE="$T/s-tree" "$CK" __complete export --select 5
check complete-select-nostore ckptctl __complete export --select "$T/nothere" 5
check complete-select-nostep ckptctl __complete export --select "$T/s-tree" 99
check complete-tags ckptctl __complete list --tag "$STORE"
check complete-keep-tag ckptctl __complete prune --keep-tag "$STORE"
finish
