#!/usr/bin/env bash
# CKPT_STORE: the store of every command whose STORE argument is left out (as restic's
# RESTIC_REPOSITORY and borg's BORG_REPO); a STORE given still wins, and a directory whose name
# looks like a step is a STORE; without CKPT_STORE a missing STORE stays a usage error.
. tests/cli/lib.sh

for s in 1 2 3; do mkst model "$T/m$s.safetensors" "$s"; done
ckptctl import -q "$STORE" --step 10 "$T/m1.safetensors" || exit 1
ckptctl import -q "$STORE" --step 20 "$T/m2.safetensors" || exit 1
e() { env CKPT_STORE="$STORE" "$CK" "$@"; }

check import e import --step 30 "$T/m3.safetensors" --no-progress
check list e list
check du e du
check show e show 10
check show-latest e show latest
check diff e diff 10 20
check verify e verify --no-progress
check verify-step e verify 20 --no-progress
check export e export 10 -o "$T/x.safetensors" --no-progress
expect "export with CKPT_STORE writes step 10" cmp "$T/x.safetensors" "$T/m1.safetensors"
check delete-dry e delete 10 --dry-run
check prune-dry e prune --keep-last 1 --dry-run
check gc-dry e gc --dry-run
# A STORE given wins over CKPT_STORE.
cp -a "$STORE" "$T/other"
ckptctl delete "$T/other" 30 --force >/dev/null
check explicit e list "$T/other"
check explicit-show e show "$T/other" 20
# A directory named like a step is a store.
mkdir -p "$T/cwd" && cp -a "$STORE" "$T/cwd/20"
check step-dir bash -c 'cd "$1/cwd" && CKPT_STORE="$2" "$3" show 20 10' _ "$T" "$T/other" "$CK"
# Without CKPT_STORE: usage errors, as before.
check unset-show env -u CKPT_STORE "$CK" show 10
check unset-list env -u CKPT_STORE "$CK" list
finish
