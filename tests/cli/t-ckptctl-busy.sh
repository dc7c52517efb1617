#!/usr/bin/env bash
# ckptctl and the writer lock: while another process holds STORE/LOCK (flock(2), as flock(1)
# does), import fails at once with exit 3 and says the store is busy; list, verify and export
# (read-only) still work.
. tests/cli/lib.sh
command -v flock >/dev/null 2>&1 || { echo "skip: flock(1) not found"; exit 77; }

mkst model "$T/m1.safetensors" 1
mkst model "$T/m2.safetensors" 2
ckptctl import -q "$STORE" --step 1 "$T/m1.safetensors" || exit 1

# Hold the lock from this shell (fd 9): no child process to race with on release. The commands
# run below inherit fd 9, which does not matter: the library opens LOCK anew, a separate lock.
exec 9<"$STORE/LOCK"
flock -x 9 || exit 1
check busy-import timeout 20 "$CK" import "$STORE" --step 2 "$T/m2.safetensors"
check busy-list ckptctl list "$STORE"
check busy-verify ckptctl verify "$STORE"
check busy-export ckptctl export "$STORE" 1 -o "$T/out.safetensors"
exec 9<&-
check busy-released ckptctl import "$STORE" --step 2 "$T/m2.safetensors"

# Another process holding the lock, as an operator would: flock(1) running a command.
flock "$STORE/LOCK" sleep 30 &
holder=$!
for _ in $(seq 200); do
	flock -n "$STORE/LOCK" true || break
	sleep 0.05
done
check busy-import-flock timeout 20 "$CK" import "$STORE" --step 3 "$T/m1.safetensors"
pkill -P "$holder" sleep 2>/dev/null
wait "$holder" 2>/dev/null
finish
