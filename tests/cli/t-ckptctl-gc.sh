#!/usr/bin/env bash
# ckptctl gc: unreferenced packs and leftovers of interrupted saves removed, partly live packs
# compacted until at most --max-unused (10%) of the pack bytes is garbage, or below a live share
# with --compact-below (manifests rewritten once each) — the bytes freed it reports equal what left the disk and
# du's garbage before; --dry-run predicts without changing; every checkpoint exports
# byte-identical afterwards; a damaged manifest (refused without --force, naming it), a truncated
# pack, a held lock (exit 3), bad input.
. tests/cli/lib.sh

for s in 1 2 3; do mkst model "$T/m$s.safetensors" "$s"; done
mkst big "$T/big1.safetensors" 1

check missing-store ckptctl gc "$STORE"
ckptctl import -q "$STORE" --step 10 "$T/m1.safetensors" || exit 1
ckptctl import -q "$STORE" --step 20 "$T/big1.safetensors" || exit 1
ckptctl import -q "$STORE" --step 30 "$T/m2.safetensors" || exit 1
ckptctl import -q "$STORE" --step 40 "$T/m3.safetensors" || exit 1
mkdir -p "$T/before"
for s in 10 20 30 40; do ckptctl export -q "$STORE" "$s" -o "$T/before/$s.st" || exit 1; done

# (STORE/LOCK is left out: a writer records its pid there.)
# STORE/packids (a few bytes gc writes before it frees any) is left out, as LOCK is.
filebytes() { find "$1" -type f ! -name LOCK ! -name packids -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }'; }
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

check clean ckptctl gc "$STORE"
check clean-json ckptctl gc "$STORE" --json

# Garbage: a pack no manifest references (a copy under an unused id) and leftovers of
# interrupted saves.
cp -a "$STORE" "$T/s-gar"
cp "$T/s-gar/packs/00000002.pack" "$T/s-gar/packs/00000090.pack"
head -c 1000 /dev/urandom >"$T/s-gar/manifests/.00000000000000000050.ckpt.tmp.1234"
head -c 24 /dev/urandom >"$T/s-gar/.store.tmp.99"
b=$(filebytes "$T/s-gar")
ckptctl du "$T/s-gar" --json >"$T/du.json"
check dry-run ckptctl gc "$T/s-gar" --dry-run
ckptctl gc "$T/s-gar" --dry-run --json >"$T/dry.json"
expect "gc --dry-run removes no file" test "$(filebytes "$T/s-gar")" = "$b"
check garbage ckptctl gc "$T/s-gar"
expect "gc: bytes freed = bytes gone from disk = du's garbage before" test \
	"$((b - $(filebytes "$T/s-gar")))" = "$(field "$T/du.json" garbage_bytes)" -a \
	"$(field "$T/dry.json" bytes_freed)" = "$(field "$T/du.json" garbage_bytes)"
expect "gc: the copied pack and the leftovers are gone" test ! -e "$T/s-gar/packs/00000090.pack" \
	-a -z "$(find "$T/s-gar" -name '*.tmp.*')"
expect "gc: every checkpoint exports byte-identical" same_exports "$T/s-gar"
check again ckptctl gc "$T/s-gar" --json

# Compaction: after pruning 10 and 20, pack 1 (step 10's) holds the embedding and layer 1 that 30
# and 40 still use, and step 10's layer 0 that nothing uses: 52 KiB of 195 KiB, more than the
# default --max-unused 10%.
cp -a "$STORE" "$T/s-cmp"
ckptctl prune "$T/s-cmp" --keep-last 2 >/dev/null || exit 1
cp -a "$T/s-cmp" "$T/s-cb"
ckptctl du "$T/s-cmp" --json >"$T/du.json"
expect "du: pack 1 has dead records" test "$(field "$T/du.json" dead_record_bytes)" -gt 0
b=$(filebytes "$T/s-cmp")
check compact-off ckptctl gc "$T/s-cmp" --compact-below 0
check compact-unlimited ckptctl gc "$T/s-cmp" --max-unused unlimited
check compact-above-limit ckptctl gc "$T/s-cmp" --max-unused 30%
check compact-dry-run ckptctl gc "$T/s-cmp" --dry-run
ckptctl gc "$T/s-cmp" --dry-run --json >"$T/dry.json"
expect "nothing was freed so far" test "$(filebytes "$T/s-cmp")" = "$b"
check compact-default ckptctl gc "$T/s-cmp" --json
expect "gc: bytes freed = bytes gone from disk = du's dead records" test \
	"$((b - $(filebytes "$T/s-cmp")))" = "$(field "$T/du.json" dead_record_bytes)" -a \
	"$(field "$T/dry.json" bytes_freed)" = "$(field "$T/du.json" dead_record_bytes)"
expect "gc: pack 1 is gone, a new pack holds its live records" \
	test ! -e "$T/s-cmp/packs/00000001.pack" -a -e "$T/s-cmp/packs/00000005.pack"
expect "gc: checkpoints verify" "$CK" verify -q "$T/s-cmp" --all
expect "gc: checkpoints export byte-identical" same_exports "$T/s-cmp"
check compact-du ckptctl du "$T/s-cmp"
# The threshold of old stays: --compact-below alone compacts the packs below a live share.
b=$(filebytes "$T/s-cb")
check compact-below-low ckptctl gc "$T/s-cb" --compact-below 0.5
check compact-below ckptctl gc "$T/s-cb" --compact-below 0.9 --json
expect "gc --compact-below: bytes freed = du's dead records" \
	test "$((b - $(filebytes "$T/s-cb")))" = "$(field "$T/du.json" dead_record_bytes)"
expect "gc --compact-below: checkpoints export byte-identical" same_exports "$T/s-cb"

# A model-shaped store (about 20% of the tensors change per step, 64 KiB chunks, one pack per step):
# after prune --keep-last 2 and a default gc, at most 10% of the pack bytes are garbage, and each
# manifest was rewritten once although several of its packs were compacted.
for s in 0 1 2 3 4 5 6 7 8 9 10 11; do
	mkst drift "$T/d.st" "$s"
	ckptctl import -q "$T/s-drift" --step "$((s + 100))" --chunk-size 64K "$T/d.st" || exit 1
	ckptctl export -q "$T/s-drift" "$((s + 100))" -o "$T/before/$((s + 100)).st" || exit 1
done
ckptctl prune "$T/s-drift" --keep-last 2 >/dev/null || exit 1
# garbage_share STORE: du's garbage as a share of the pack bytes.
garbage_share() { ckptctl du "$1" --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
print("%.3f" % (d["garbage_bytes"] / d["pack_bytes"]))'; }
expect "drift: prune leaves more than 10% garbage (the case gc must handle)" \
	python3 -c 'import sys; assert float(sys.argv[1]) > 0.10, sys.argv[1]' "$(garbage_share "$T/s-drift")"
check drift-dry-run ckptctl gc "$T/s-drift" --dry-run
check drift ckptctl gc "$T/s-drift" --json
expect "drift: after the default gc at most 10% of the pack bytes are garbage" \
	python3 -c 'import sys; assert float(sys.argv[1]) <= 0.10, sys.argv[1]' "$(garbage_share "$T/s-drift")"
# The garbage the default limit leaves (du counts it): a second gc names the limit and what
# --max-unused 0% would free, and that is what it frees.
check drift-again ckptctl gc "$T/s-drift"
hint=$(ckptctl gc "$T/s-drift" | sed -n 's/^nothing to collect within --max-unused 10% (the default): --max-unused 0% would free \([0-9.]* [KM]iB\) .*/\1/p')
expect "drift: a second gc names the 10% limit and what 0% would free ($hint)" test -n "$hint"
expect "drift: du's garbage is that much" test "$(ckptctl du "$T/s-drift" --json | python3 -c '
import json, sys; d = json.load(sys.stdin); print(d["garbage_bytes"])')" -gt 0
expect "drift: --max-unused 0% frees what the hint said" \
	bash -c "'$CK' gc '$T/s-drift' --max-unused 0% | grep -qx 'freed: $hint ([0-9]* bytes)'"
expect "drift: then gc has nothing to collect, plainly" test "$(ckptctl gc "$T/s-drift" | head -1)" = "nothing to collect"
expect "drift: checkpoints verify" "$CK" verify -q "$T/s-drift" --all
expect "drift: checkpoints export byte-identical" same_exports "$T/s-drift"

# A damaged manifest: refused (naming it) and nothing removed; with --force it goes on.
cp -a "$T/s-gar" "$T/s-man"
cp "$T/s-man/packs/00000002.pack" "$T/s-man/packs/00000091.pack"
corrupt flip "$T/s-man/manifests/00000000000000000020.ckpt"
b=$(filebytes "$T/s-man")
check damaged-refused ckptctl gc "$T/s-man"
check damaged-refused-dry ckptctl gc "$T/s-man" --dry-run
expect "a refused gc removes nothing" test "$(filebytes "$T/s-man")" = "$b"
check damaged-force ckptctl gc "$T/s-man" --force
expect "gc --force: the other checkpoints export byte-identical" same_exports "$T/s-man"

# A truncated pack that gc must compact: the records are checked before being copied, so gc
# fails naming the pack and leaves it in place.
cp -a "$STORE" "$T/s-ptrunc"
ckptctl prune "$T/s-ptrunc" --keep-last 2 >/dev/null || exit 1
corrupt truncate "$T/s-ptrunc/packs/00000001.pack" 126000
check truncated-pack ckptctl gc "$T/s-ptrunc" --compact-below 0.9
expect "a failed compaction leaves the pack, and no new pack" \
	test -e "$T/s-ptrunc/packs/00000001.pack" -a ! -e "$T/s-ptrunc/packs/00000005.pack"
check truncated-pack-verify ckptctl verify "$T/s-ptrunc" --all --no-progress

if command -v flock >/dev/null 2>&1; then
	cp -a "$STORE" "$T/s-busy"
	cp "$T/s-busy/packs/00000002.pack" "$T/s-busy/packs/00000090.pack"
	exec 9<"$T/s-busy/LOCK"
	flock -x 9 || exit 1
	b=$(filebytes "$T/s-busy")
	check busy busy timeout 20 "$CK" gc "$T/s-busy"
	exec 9<&-
	expect "a busy gc removes nothing" test "$(filebytes "$T/s-busy")" = "$b"
fi

check usage-noargs ckptctl gc
check usage-extra ckptctl gc "$STORE" 10
check usage-fraction ckptctl gc "$STORE" --compact-below 1.5
check usage-fraction-neg ckptctl gc "$STORE" --compact-below -0.1
check usage-fraction-garbage ckptctl gc "$STORE" -c half
check usage-fraction-nan ckptctl gc "$STORE" -c nan
check usage-fraction-value ckptctl gc "$STORE" --compact-below
check usage-max-unused ckptctl gc "$STORE" --max-unused 10
check usage-max-unused-range ckptctl gc "$STORE" --max-unused 101%
check usage-option ckptctl gc "$STORE" --all
finish
