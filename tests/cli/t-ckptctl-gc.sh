#!/usr/bin/env bash
# ckptctl gc: unreferenced packs and leftovers of interrupted saves removed, packs below the live
# share compacted (manifests rewritten) — the bytes freed it reports equal what left the disk and
# du's garbage before; --dry-run predicts without changing; every checkpoint exports
# byte-identical afterwards; a damaged manifest (refused without --force, naming it), a truncated
# pack, a held lock (exit 3), bad input.
. tests/cli/lib.sh

for s in 1 2 3; do mkst model "$T/m$s.safetensors" "$s"; done
mkst big "$T/big1.safetensors" 1

check gc-missing-store ckptctl gc "$STORE"
ckptctl import -q "$STORE" --step 10 "$T/m1.safetensors" || exit 1
ckptctl import -q "$STORE" --step 20 "$T/big1.safetensors" || exit 1
ckptctl import -q "$STORE" --step 30 "$T/m2.safetensors" || exit 1
ckptctl import -q "$STORE" --step 40 "$T/m3.safetensors" || exit 1
mkdir -p "$T/before"
for s in 10 20 30 40; do ckptctl export -q "$STORE" "$s" -o "$T/before/$s.st" || exit 1; done

# (STORE/LOCK is left out: a writer records its pid there.)
filebytes() { find "$1" -type f ! -name LOCK -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }'; }
# busy CMD...: runs CMD with the lock holder in its "busy" message left out (its wording and pid
# vary).
busy() {
	local rc
	"$@" 2>"$T/.busy.err"
	rc=$?
	sed -e 's/is busy: .* is writing to it/is busy: HOLDER is writing to it/' "$T/.busy.err" >&2
	return $rc
}
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

check gc-clean ckptctl gc "$STORE"
check gc-clean-json ckptctl gc "$STORE" --json

# Garbage: a pack no manifest references (a copy under an unused id) and leftovers of
# interrupted saves.
cp -a "$STORE" "$T/s-gar"
cp "$T/s-gar/packs/00000002.pack" "$T/s-gar/packs/00000090.pack"
head -c 1000 /dev/urandom >"$T/s-gar/manifests/.00000000000000000050.ckpt.tmp.1234"
head -c 24 /dev/urandom >"$T/s-gar/.store.tmp.99"
b=$(filebytes "$T/s-gar")
ckptctl du "$T/s-gar" --json >"$T/du.json"
check gc-dry-run ckptctl gc "$T/s-gar" --dry-run
ckptctl gc "$T/s-gar" --dry-run --json >"$T/dry.json"
expect "gc --dry-run removes no file" test "$(filebytes "$T/s-gar")" = "$b"
check gc-garbage ckptctl gc "$T/s-gar"
expect "gc: bytes freed = bytes gone from disk = du's garbage before" test \
	"$((b - $(filebytes "$T/s-gar")))" = "$(field "$T/du.json" garbage_bytes)" -a \
	"$(field "$T/dry.json" bytes_freed)" = "$(field "$T/du.json" garbage_bytes)"
expect "gc: the copied pack and the leftovers are gone" test ! -e "$T/s-gar/packs/00000090.pack" \
	-a -z "$(find "$T/s-gar" -name '*.tmp.*')"
expect "gc: every checkpoint exports byte-identical" same_exports "$T/s-gar"
check gc-again ckptctl gc "$T/s-gar" --json

# Compaction: after pruning 10 and 20, pack 1 (step 10's) holds the embedding and layer 1 that 30
# and 40 still use, and step 10's layer 0 that nothing uses.
cp -a "$STORE" "$T/s-cmp"
ckptctl prune "$T/s-cmp" --keep-last 2 >/dev/null || exit 1
ckptctl du "$T/s-cmp" --json >"$T/du.json"
expect "du: pack 1 has dead records" test "$(field "$T/du.json" dead_record_bytes)" -gt 0
b=$(filebytes "$T/s-cmp")
check gc-compact-off ckptctl gc "$T/s-cmp" --compact-below 0
check gc-compact-default ckptctl gc "$T/s-cmp"
check gc-compact-dry-run ckptctl gc "$T/s-cmp" --compact-below 0.9 --dry-run
ckptctl gc "$T/s-cmp" -c 0.9 --dry-run --json >"$T/dry.json"
expect "nothing was freed so far" test "$(filebytes "$T/s-cmp")" = "$b"
check gc-compact ckptctl gc "$T/s-cmp" --compact-below 0.9 --json
expect "gc --compact-below: bytes freed = bytes gone from disk = du's dead records" test \
	"$((b - $(filebytes "$T/s-cmp")))" = "$(field "$T/du.json" dead_record_bytes)" -a \
	"$(field "$T/dry.json" bytes_freed)" = "$(field "$T/du.json" dead_record_bytes)"
expect "gc --compact-below: pack 1 is gone, a new pack holds its live records" \
	test ! -e "$T/s-cmp/packs/00000001.pack" -a -e "$T/s-cmp/packs/00000005.pack"
expect "gc --compact-below: checkpoints verify" "$CK" verify -q "$T/s-cmp" --all
expect "gc --compact-below: checkpoints export byte-identical" same_exports "$T/s-cmp"
check gc-compact-du ckptctl du "$T/s-cmp"

# A damaged manifest: refused (naming it) and nothing removed; with --force it goes on.
cp -a "$T/s-gar" "$T/s-man"
cp "$T/s-man/packs/00000002.pack" "$T/s-man/packs/00000091.pack"
corrupt flip "$T/s-man/manifests/00000000000000000020.ckpt"
b=$(filebytes "$T/s-man")
check gc-damaged-refused ckptctl gc "$T/s-man"
check gc-damaged-refused-dry ckptctl gc "$T/s-man" --dry-run
expect "a refused gc removes nothing" test "$(filebytes "$T/s-man")" = "$b"
check gc-damaged-force ckptctl gc "$T/s-man" --force
expect "gc --force: the other checkpoints export byte-identical" same_exports "$T/s-man"

# A truncated pack that gc must compact: the records are checked before being copied, so gc
# fails naming the pack and leaves it in place.
cp -a "$STORE" "$T/s-ptrunc"
ckptctl prune "$T/s-ptrunc" --keep-last 2 >/dev/null || exit 1
corrupt truncate "$T/s-ptrunc/packs/00000001.pack" 126000
check gc-truncated-pack ckptctl gc "$T/s-ptrunc" --compact-below 0.9
expect "a failed compaction leaves the pack, and no new pack" \
	test -e "$T/s-ptrunc/packs/00000001.pack" -a ! -e "$T/s-ptrunc/packs/00000005.pack"
check gc-truncated-pack-verify ckptctl verify "$T/s-ptrunc" --all --no-progress

if command -v flock >/dev/null 2>&1; then
	cp -a "$STORE" "$T/s-busy"
	cp "$T/s-busy/packs/00000002.pack" "$T/s-busy/packs/00000090.pack"
	exec 9<"$T/s-busy/LOCK"
	flock -x 9 || exit 1
	b=$(filebytes "$T/s-busy")
	check gc-busy busy timeout 20 "$CK" gc "$T/s-busy"
	exec 9<&-
	expect "a busy gc removes nothing" test "$(filebytes "$T/s-busy")" = "$b"
fi

check usage-gc-noargs ckptctl gc
check usage-gc-extra ckptctl gc "$STORE" 10
check usage-gc-fraction ckptctl gc "$STORE" --compact-below 1.5
check usage-gc-fraction-neg ckptctl gc "$STORE" --compact-below -0.1
check usage-gc-fraction-garbage ckptctl gc "$STORE" -c half
check usage-gc-fraction-nan ckptctl gc "$STORE" -c nan
check usage-gc-fraction-value ckptctl gc "$STORE" --compact-below
check usage-gc-option ckptctl gc "$STORE" --all
finish
