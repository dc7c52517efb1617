#!/usr/bin/env bash
# ckptctl gc and prune touch only this store's packs: the audit's repro (a copy
# of pack 2 named 2.pack made gc remove 00000002.pack and exit 0) and a data directory shared by
# two stores. The look-alike file is reported and left alone; every checkpoint verifies.
. tests/cli/lib.sh

for s in 1 2; do mkst model "$T/m$s.safetensors" "$s"; done
ckptctl import -q "$STORE" --step 1 "$T/m1.safetensors" || exit 1
ckptctl import -q "$STORE" --step 2 "$T/m2.safetensors" || exit 1
cp "$STORE/packs/00000002.pack" "$STORE/packs/2.pack"
check gc-foreign-lookalike ckptctl gc "$STORE"
expect "gc left 00000002.pack and 2.pack" test -e "$STORE/packs/00000002.pack" -a -e "$STORE/packs/2.pack"
check gc-foreign-lookalike-verify ckptctl verify "$STORE" --all --no-progress
check gc-foreign-lookalike-json ckptctl gc "$STORE" --json

finish
