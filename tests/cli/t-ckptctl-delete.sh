#!/usr/bin/env bash
# ckptctl delete: the checkpoints of the steps given removed (manifests, then the packs nothing
# references; with --gc, compaction too), --dry-run, --json; the bytes freed equal what left the
# disk; the others export byte-identical; the newest valid checkpoint refused without --force; a
# missing step (exit 4, naming the steps that exist); a damaged manifest; a held lock (exit 3);
# bad input.
. tests/cli/lib.sh

for s in 1 2 3 4; do mkst model "$T/m$s.safetensors" "$s"; done
mkst big "$T/big1.safetensors" 1

check missing-store ckptctl delete "$STORE" 10
ckptctl import -q "$STORE" --step 10 "$T/m1.safetensors" || exit 1
ckptctl import -q "$STORE" --step 20 "$T/big1.safetensors" || exit 1
ckptctl import -q "$STORE" --step 30 "$T/m2.safetensors" || exit 1
ckptctl import -q "$STORE" --step 40 "$T/m3.safetensors" || exit 1
mkdir -p "$T/before"
for s in 10 20 30 40; do ckptctl export -q "$STORE" "$s" -o "$T/before/$s.st" || exit 1; done

# STORE/packids (a few bytes gc writes before it frees any) is left out, as LOCK is.
filebytes() { find "$1" -type f ! -name LOCK ! -name packids -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }'; }
steps() { ckptctl list "$1" --json 2>/dev/null | python3 -c '
import json, sys
print(" ".join(str(c["step"]) for c in json.load(sys.stdin)))'; }
same_exports() {
	local s
	for s in $(steps "$1"); do
		ckptctl export -q "$1" "$s" -o "$T/x.st" && cmp -s "$T/x.st" "$T/before/$s.st" || return 1
	done
}
field() { python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }
busy() {
	local rc
	"$@" 2>"$T/.busy.err"
	rc=$?
	sed -e 's/is busy: .* is writing to it/is busy: HOLDER is writing to it/' "$T/.busy.err" >&2
	return $rc
}

# One checkpoint in the middle: its exclusive pack goes.
cp -a "$STORE" "$T/s1"
b=$(filebytes "$T/s1")
check dry-run ckptctl delete "$T/s1" 20 --dry-run
ckptctl delete "$T/s1" 20 --dry-run --json >"$T/dry.json"
expect "delete --dry-run removes no file" test "$(filebytes "$T/s1")" = "$b"
check one ckptctl delete "$T/s1" 20 --json
cp "$T/.out" "$T/one.json"
expect "delete 20: 10 30 40 remain" test "$(steps "$T/s1")" = "10 30 40"
expect "delete: bytes freed = bytes gone from disk = the dry run's prediction" test \
	"$((b - $(filebytes "$T/s1")))" = "$(field "$T/one.json" bytes_freed)" -a \
	"$(field "$T/dry.json" bytes_freed)" = "$(field "$T/one.json" bytes_freed)"
expect "delete: the others export byte-identical" same_exports "$T/s1"
expect "delete: the others verify" "$CK" verify -q "$T/s1" --all

# Several steps, with --gc: step 10's pack is partly live afterwards and gets compacted.
cp -a "$STORE" "$T/s2"
check two-gc ckptctl delete "$T/s2" 10 20 --gc
expect "delete 10 20 --gc: 30 40 remain" test "$(steps "$T/s2")" = "30 40"
check two-gc-then-gc ckptctl gc "$T/s2"
expect "delete --gc: the others export byte-identical" same_exports "$T/s2"

# The newest valid checkpoint: refused (also as 'latest'), unless --force.
cp -a "$STORE" "$T/s3"
check newest ckptctl delete "$T/s3" 40
check newest-latest ckptctl delete "$T/s3" 10 latest
expect "a refused delete removes nothing" test "$(steps "$T/s3")" = "10 20 30 40"
check newest-force ckptctl delete "$T/s3" latest --force
expect "delete latest --force: 10 20 30 remain" test "$(steps "$T/s3")" = "10 20 30"
expect "delete --force: the others export byte-identical" same_exports "$T/s3"

# A step without a checkpoint: exit 4, the steps that exist named, nothing removed.
check no-such-step ckptctl delete "$T/s3" 10 25
expect "a delete of a missing step removes nothing" test "$(steps "$T/s3")" = "10 20 30"

# A damaged manifest: refused without --force; with it, deletable by its step.
cp -a "$STORE" "$T/s4"
corrupt flip "$T/s4/manifests/00000000000000000020.ckpt"
check damaged-refused ckptctl delete "$T/s4" 10
check damaged-force ckptctl delete "$T/s4" 20 --force
expect "delete --force of the damaged one: 10 30 40 remain, no damage left" \
	"$CK" verify -q "$T/s4" --all
expect "delete --force: the others export byte-identical" same_exports "$T/s4"

if command -v flock >/dev/null 2>&1; then
	cp -a "$STORE" "$T/s-busy"
	exec 9<"$T/s-busy/LOCK"
	flock -x 9 || exit 1
	check busy busy timeout 20 "$CK" delete "$T/s-busy" 10
	exec 9<&-
	expect "a busy delete removes nothing" test "$(steps "$T/s-busy")" = "10 20 30 40"
fi

check usage-noargs ckptctl delete
check usage-nostep ckptctl delete "$STORE"
check usage-badstep ckptctl delete "$STORE" ten
check usage-gc-only ckptctl delete "$STORE" 10 --compact-below 0.5
check usage-option ckptctl delete "$STORE" 10 --all
expect "usage errors removed nothing" test "$(steps "$STORE")" = "10 20 30 40"
finish
