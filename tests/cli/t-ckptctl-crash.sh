#!/usr/bin/env bash
# ckptctl prune, prune --gc and gc killed at every point where they change the store
# (CKPT_GC_KILL_AT=N makes the test build of the library, in $B/tests/hooks/ckptctl, raise SIGKILL
# at its Nth change; N = 1, 2, ... until the command completes), each
# time on a fresh copy of the store. After every kill, `ckptctl verify --all` must exit 0 and
# `ckptctl export` of every listed checkpoint must give the bytes exported before; the checkpoints
# the policy keeps must all still be there; running the command again must complete and leave no
# garbage behind.
. tests/cli/lib.sh
CKH=$ROOT/$B/tests/hooks/ckptctl
[ -x "$CKH" ] || { echo "skip: $CKH (ckptctl with test hooks) is not built"; exit 77; }

for s in 1 2 3; do mkst model "$T/m$s.safetensors" "$s"; done
mkst big "$T/big1.safetensors" 1
mkst big "$T/big2.safetensors" 2
ckptctl import -q "$STORE" --step 10 "$T/m1.safetensors" || exit 1
ckptctl import -q "$STORE" --step 20 "$T/m2.safetensors" || exit 1
ckptctl import -q "$STORE" --step 30 "$T/big1.safetensors" || exit 1
ckptctl import -q "$STORE" --step 40 "$T/big2.safetensors" || exit 1
ckptctl import -q "$STORE" --step 50 "$T/m3.safetensors" || exit 1
# Garbage for gc: an unreferenced pack and the leftover of an interrupted save.
cp "$STORE/packs/00000003.pack" "$STORE/packs/00000077.pack"
echo partial >"$STORE/manifests/.00000000000000000060.ckpt.tmp.4242"

mkdir -p "$T/before"
for s in 10 20 30 40 50; do
	ckptctl export -q "$STORE" "$s" -o "$T/before/$s.safetensors" || exit 1
done

steps_of() { ckptctl list "$1" --json 2>/dev/null | python3 -c '
import json, sys
print(" ".join(str(c["step"]) for c in json.load(sys.stdin)))'; }

# Every listed checkpoint verifies and exports byte-identical; each of $2 is listed.
intact() {
	local st=$1 must=$2 s
	ckptctl verify "$st" --all -q --no-progress >/dev/null || { echo "verify --all failed"; return 1; }
	local have=" $(steps_of "$st") "
	for s in $must; do
		[[ $have == *" $s "* ]] || { echo "kept step $s is gone"; return 1; }
	done
	for s in $have; do
		ckptctl export -q "$st" "$s" -o "$T/x.safetensors" || return 1
		cmp -s "$T/x.safetensors" "$T/before/$s.safetensors" || { echo "step $s differs"; return 1; }
	done
}

# The store holds no garbage: gc --dry-run finds nothing to free.
clean() {
	ckptctl du "$1" --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert d["garbage_bytes"] == 0 and d["unreferenced_pack_bytes"] == 0, d'
}

# kills NAME MUST CMD...: runs CMD on copies of the store, killed at point 1, 2, ... until it
# completes.
kills() {
	local name=$1 must=$2 n rc
	shift 2
	for ((n = 1; n <= 500; n++)); do
		rm -rf "$T/c"
		cp -a "$STORE" "$T/c"
		CKPT_GC_KILL_AT=$n "$CKH" "$@" "$T/c" >/dev/null 2>"$T/kill.err"
		rc=$?
		if [ $rc = 0 ]; then
			expect "$name: completes when not killed (after $((n - 1)) kill points)" \
				test $n -gt 2
			expect "$name: the completed run left every checkpoint intact" intact "$T/c" "$must"
			break
		fi
		expect "$name: killed at point $n (exit 137)" test $rc = 137
		expect "$name: killed at point $n: checkpoints intact" intact "$T/c" "$must"
		expect "$name: killed at point $n: a rerun completes" "$CK" "$@" "$T/c"
		expect "$name: killed at point $n: rerun leaves intact store" intact "$T/c" "$must"
	done
}

# prune removes manifests 10, 30 and 40 (and the packs only they use), and the garbage.
kills prune "20 50" prune --keep-last 1 --keep 20
# prune --gc: the same, then every partly dead pack compacted (all copied first, each manifest
# rewritten once, the old packs removed last), in one run under one lock.
kills prune-gc "20 50" prune --keep-last 1 --keep 20 --gc --max-unused 0%
expect "prune-gc: the completed run left no garbage" clean "$T/c"
# gc removes the copied pack and the leftover; once prune has left pack 1 mostly dead, gc
# compacts it, rewriting the two manifests (20 and 50) that reference it.
kills gc "10 20 30 40 50" gc
ckptctl prune "$STORE" --keep-last 1 --keep 20 >/dev/null || exit 1
expect "prune left pack 1 partly dead" test -e "$STORE/packs/00000001.pack"
kills gc-compact "20 50" gc --compact-below 0.99
expect "gc-compact: the completed run left no garbage" clean "$T/c"
expect "gc-compact: pack 1 was compacted away" test ! -e "$T/c/packs/00000001.pack"
finish
