#!/usr/bin/env bash
# ckptctl import and list: a store of a few checkpoints made from generated safetensors files,
# listed as a table and as JSON; dedup between checkpoints shows in the new bytes.
. tests/cli/lib.sh

for s in 1 2 3; do mkst model "$T/m$s.safetensors" "$s"; done
mkst big "$T/big.safetensors" 1

check list-missing-store ckptctl list "$STORE"
check import-10 ckptctl import "$STORE" --step 10 "$T/m1.safetensors"
check import-20 ckptctl import "$STORE" "$T/m2.safetensors" --step 20
check import-30-json ckptctl import "$STORE" -s 30 "$T/m3.safetensors" --json
check import-40-quiet ckptctl import --quiet "$STORE" --step 40 "$T/big.safetensors"
# The same content again: every chunk is already in the store.
check import-50-dedup ckptctl import "$STORE" --step 50 "$T/big.safetensors"
check import-exists ckptctl import "$STORE" --step 20 "$T/m1.safetensors"
check import-overwrite ckptctl import "$STORE" --step 20 --overwrite "$T/m2.safetensors"
check list ckptctl list "$STORE"
check list-json ckptctl list "$STORE" --json
check list-json-first ckptctl list --json "$STORE"
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
finish
