#!/usr/bin/env bash
# ckptctl and the writer lock: while another process holds STORE/LOCK (flock(2), as flock(1)
# does), import fails at once with exit 3 and says the store is busy, naming the holder: by
# its writer record (pid, host, what, since when) when a libckpt writer holds it, by pid alone
# and "it left no writer record" otherwise; list, verify and export (read-only) still work.
. tests/cli/lib.sh
command -v flock >/dev/null 2>&1 || { echo "skip: flock(1) not found"; exit 77; }

# The holder's pid, host and start time vary between runs.
holder() {
	local rc
	"$@" 2>"$T/.holder.err"
	rc=$?
	sed -e 's/is busy: process [0-9]* /is busy: process PID /' \
	    -e 's/ on host [^ ]* (\(.*\) since [0-9TZ:-]*)/ on host HOST (\1 since TIME)/' \
	    "$T/.holder.err" >&2
	return $rc
}

mkst model "$T/m1.safetensors" 1
mkst model "$T/m2.safetensors" 2
ckptctl import -q "$STORE" --step 1 "$T/m1.safetensors" || exit 1

# Hold the lock from this shell (fd 9): no child process to race with on release. The commands
# run below inherit fd 9, which does not matter: the library opens LOCK anew, a separate lock.
exec 9<"$STORE/LOCK"
flock -x 9 || exit 1
check busy-import holder timeout 20 "$CK" import "$STORE" --step 2 "$T/m2.safetensors"
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
check busy-import-flock holder timeout 20 "$CK" import "$STORE" --step 3 "$T/m1.safetensors"
pkill -P "$holder" sleep 2>/dev/null
wait "$holder" 2>/dev/null

# A libckpt writer holding the lock (a save begun, not committed): the busy message names it
# from its record. The writer says when it holds the lock and waits for a line on its stdin
# (pipes, not sleeps).
coproc WRITER { python3 -c '
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
st, sv = ctypes.c_void_p(), ctypes.c_void_p()
ok = lib.ckpt_store_open(sys.argv[2].encode(), None, ctypes.byref(st)) == 0 and \
    lib.ckpt_save_begin(st, ctypes.c_uint64(9), None, ctypes.byref(sv)) == 0
print("held" if ok else "failed", flush=True)
sys.stdin.readline()
lib.ckpt_save_abort(sv)
lib.ckpt_store_close(st)' "$ROOT/$B/lib/libckpt.so.0" "$STORE"; }
read -r state <&"${WRITER[0]}"
expect "a libckpt writer holds the lock" test "$state" = held
check busy-import-writer holder timeout 20 "$CK" import "$STORE" --step 4 "$T/m1.safetensors"
echo >&"${WRITER[1]}"
wait "$WRITER_PID"
check busy-writer-released ckptctl import -q "$STORE" --step 4 "$T/m1.safetensors"
finish
