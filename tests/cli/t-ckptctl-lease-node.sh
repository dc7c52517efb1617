#!/usr/bin/env bash
# ckptctl prune and gc beside a reader on another node: where flock is node-local, a
# reader's lease (STORE/leases/, docs/format.md) looks unlocked from another node; its record
# names the reader's node, so a fresh lease of another node keeps the packs its checkpoint needs
# (the messages name the reader) until it is older than the grace age (6 h, or --grace).
. tests/cli/lib.sh

mkst big "$T/m1.safetensors" 1 && mkst big "$T/m2.safetensors" 2 || exit 1 # nothing shared
ckptctl import -q "$STORE" --step 1 "$T/m1.safetensors" || exit 1
ids=$(cd "$STORE/packs" && ls | sed 's/^0*\([0-9]\)/\1/; s/\.pack$//')
n=$(echo "$ids" | wc -l)
ckptctl import -q "$STORE" --step 2 "$T/m2.safetensors" || exit 1
mkdir -p "$STORE/leases"
L=$STORE/leases/00000000deadbeef.lease
{ echo "packs $n"; echo "$ids"; echo end
  printf 'pid 4242\nhost far\nwhat reader of step 1\nsince 2020-01-02T03:04:05Z\nnode node-far\n'
} > "$L"
packs() { ls "$STORE/packs" | wc -l; }
before=$(packs)
check lease-prune ckptctl prune "$STORE" --keep-last 1
check lease-gc-json ckptctl gc "$STORE" --json
expect "the fresh lease of another node stays" test -e "$L"
expect "its checkpoint's packs stay" test "$(packs)" -eq "$before"
# 2 hours without a refresh: live by the default grace age, dead by --grace 1H
touch -d '2 hours ago' "$L"
check lease-gc-default ckptctl gc "$STORE"
expect "the 2-hour-old lease stays live by the default grace" test -e "$L"
check lease-gc-grace ckptctl gc "$STORE" --grace 1H
expect "the aged lease is removed" test ! -e "$L"
expect "its packs are collected" test "$(packs)" -lt "$before"
check lease-verify ckptctl verify "$STORE" --all --no-progress

finish
