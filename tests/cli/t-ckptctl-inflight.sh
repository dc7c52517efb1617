#!/usr/bin/env bash
# ckptctl delete and gc beside a save in flight on another node (issue 24 item 5): a fresh
# in-flight marker of another node (STORE/writers/, docs/format.md) spares every unreferenced
# pack and says which save; once it is older than the grace age (6 h) gc removes it and collects.
. tests/cli/lib.sh

for s in 1 2; do mkst model "$T/m$s.safetensors" "$s"; done
ckptctl import -q "$STORE" --step 1 "$T/m1.safetensors" || exit 1
ckptctl import -q "$STORE" --step 2 "$T/m2.safetensors" || exit 1
mkdir -p "$STORE/writers"
M=$STORE/writers/00000000deadbeef.writer
printf 'pid 4242\nhost far\nwhat save\nsince 2020-01-02T03:04:05Z\nnode node-far\n' > "$M"
check inflight-delete ckptctl delete "$STORE" 1
check inflight-gc-json ckptctl gc "$STORE" --json
expect "the live marker stays" test -e "$M"
touch -d '7 hours ago' "$M"
check inflight-gc-aged ckptctl gc "$STORE"
expect "the aged marker is removed" test ! -e "$M"
check inflight-verify ckptctl verify "$STORE" --all --no-progress

finish
