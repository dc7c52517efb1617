#!/usr/bin/env bash
# ckptctl and the writer lock: while another process holds STORE/LOCK (flock), import fails at
# once with exit 3 and says the store is busy; list, verify and export (read-only) still work.
. tests/cli/lib.sh
command -v flock >/dev/null 2>&1 || { echo "skip: flock(1) not found"; exit 77; }

mkst model "$T/m1.safetensors" 1
mkst model "$T/m2.safetensors" 2
ckptctl import -q "$STORE" --step 1 "$T/m1.safetensors" || exit 1

flock "$STORE/LOCK" sleep 60 &
holder=$!
# Wait until the lock is held.
for _ in $(seq 100); do
	flock -n "$STORE/LOCK" true || break
	sleep 0.05
done
check busy-import timeout 20 "$CK" import "$STORE" --step 2 "$T/m2.safetensors"
check busy-list ckptctl list "$STORE"
check busy-verify ckptctl verify "$STORE"
check busy-export ckptctl export "$STORE" 1 -o "$T/out.safetensors"
# Release: kill the flock process and its sleep child (which shares the lock).
pkill -P "$holder" sleep 2>/dev/null
kill "$holder" 2>/dev/null
wait "$holder" 2>/dev/null
check busy-released ckptctl import "$STORE" --step 2 "$T/m2.safetensors"
finish
