#!/usr/bin/env bash
# ckptctl verify: intact checkpoints, a flipped byte in a pack file (names the tensor, exit 1), a
# damaged manifest (list warns, verify counts it as damage), a truncated or deleted pack.
. tests/cli/lib.sh

mkst model "$T/m1.safetensors" 1
mkst big "$T/big.safetensors" 1
mkst model "$T/m3.safetensors" 3
ckptctl import -q "$STORE" --step 1 "$T/m1.safetensors" || exit 1
ckptctl import -q "$STORE" --step 2 "$T/big.safetensors" || exit 1
ckptctl import -q "$STORE" --step 3 "$T/m3.safetensors" || exit 1

check latest ckptctl verify "$STORE"
check latest-word ckptctl verify "$STORE" latest
check step ckptctl verify "$STORE" 2
check all ckptctl verify "$STORE" --all
check all-json ckptctl verify "$STORE" --all --json
# --all reads each distinct chunk once (steps 1 and 3 share most of theirs): the bytes read are
# the live records du counts (its live bytes less one pack header per pack), fewer than the sum of
# verifying each checkpoint alone.
expect "verify --all: each distinct chunk read once" python3 -c '
import json, subprocess, sys
ck, st = sys.argv[1], sys.argv[2]
run = lambda *a: json.loads(subprocess.run([ck, *a], capture_output=True, check=True).stdout)
allv, du = run("verify", st, "--all", "--json"), run("du", st, "--json")
alone = sum(run("verify", st, str(c["step"]), "--json")["bytes_read"] for c in allv["checkpoints"])
assert allv["bytes_read"] == du["live_bytes"] - 4096 * du["packs"], (allv["bytes_read"], du)
assert allv["bytes_read"] < alone, (allv["bytes_read"], alone)
' "$CK" "$STORE"
check quiet ckptctl verify -q "$STORE" --all
check unknown-step ckptctl verify "$STORE" 7
check unknown-step-json ckptctl verify "$STORE" 7 --json

# One flipped byte in the data of big.weight (step 2 only).
cp -a "$STORE" "$T/s-flip"
pack=$(corrupt flip-tensor "$T/s-flip" "$T/big.safetensors" big.weight) || exit 1
echo "flipped a byte of big.weight in $pack"
check flip ckptctl verify "$T/s-flip" 2
check flip-all ckptctl verify "$T/s-flip" --all
check flip-json ckptctl verify "$T/s-flip" 2 --json
check flip-other ckptctl verify "$T/s-flip" 1
check export-flip ckptctl export "$T/s-flip" 2 -o "$T/out.safetensors"
expect "a failed export leaves no file behind" \
	test ! -e "$T/out.safetensors" -a -z "$(ls "$T" | grep tmp-)"

# A damaged manifest: the newest one, then an older one.
cp -a "$STORE" "$T/s-man"
corrupt flip "$T/s-man/manifests/$(ls "$T/s-man/manifests" | sort | tail -n 1)"
check manifest-list ckptctl list "$T/s-man"
check manifest-list-json ckptctl list "$T/s-man" --json
check manifest-verify-latest ckptctl verify "$T/s-man"
check manifest-verify-step ckptctl verify "$T/s-man" 3
check manifest-verify-all ckptctl verify "$T/s-man" --all
check manifest-verify-all-json ckptctl verify "$T/s-man" --all --json
check manifest-export ckptctl export "$T/s-man" 3 -o "$T/out.safetensors"
check manifest-verify-older ckptctl verify "$T/s-man" 2

# A truncated manifest.
cp -a "$STORE" "$T/s-mtrunc"
corrupt truncate "$T/s-mtrunc/manifests/$(ls "$T/s-mtrunc/manifests" | sort | head -n 1)" half
check manifest-truncated-list ckptctl list "$T/s-mtrunc"
check manifest-truncated-verify ckptctl verify "$T/s-mtrunc" --all

# A truncated pack: every checkpoint loses chunks.
cp -a "$STORE" "$T/s-ptrunc"
for p in "$T"/s-ptrunc/packs/*; do corrupt truncate "$p" half; done
check pack-truncated-verify ckptctl verify "$T/s-ptrunc" --all
check pack-truncated-export ckptctl export "$T/s-ptrunc" 2 -o "$T/out.safetensors"

# A deleted pack: step 2 (big) loses every chunk, step 1 is intact.
cp -a "$STORE" "$T/s-pdel"
rm "$T/s-pdel/packs/00000002.pack"
check pack-deleted-verify ckptctl verify "$T/s-pdel" --all
finish
