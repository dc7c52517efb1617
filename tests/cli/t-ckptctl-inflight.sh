#!/usr/bin/env bash
# ckptctl delete and gc beside a save in flight on another node: a fresh
# in-flight marker of another node (STORE/writers/, docs/format.md) spares every unreferenced
# pack and says which save; once it is older than the grace age (6 h, or --grace) gc removes it
# and collects.
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
# --grace: the operator's grace age. 2 hours old is live by the default (6 h), dead by --grace 1H
touch -d '2 hours ago' "$M"
check inflight-grace-bad ckptctl gc "$STORE" --grace 2
check inflight-grace-long ckptctl prune "$STORE" --keep-last 1 --grace 31d
check inflight-gc-default ckptctl gc "$STORE" --dry-run
expect "the 2-hour-old marker stays live by the default grace" test -e "$M"
check inflight-gc-grace ckptctl gc "$STORE" --grace 1H --dry-run
expect "a dry run removes no marker" test -e "$M"
# --grace 0: a job known to be gone; prune and delete honour it too
touch "$M"
check inflight-prune-grace0 ckptctl prune "$STORE" --keep-last 1 --grace 0 --dry-run
touch -d '7 hours ago' "$M"
check inflight-gc-aged ckptctl gc "$STORE"
expect "the aged marker is removed" test ! -e "$M"
check inflight-verify ckptctl verify "$STORE" --all --no-progress

finish
