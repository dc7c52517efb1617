#!/usr/bin/env bash
# ckptctl export streams the file in blocks (XFER_BLOCK) filled by several threads (cli/ckptctl/xfer.c):
# round trips stay byte-identical for tensors that span blocks (cut at offsets that are not
# element boundaries), many small tensors in one block, zero-size tensors at the start, at the end
# and exactly on a block boundary; standard output (one thread, in order) gives the same bytes; a
# chunk that fails its digest in a later block fails the export with the store file and the
# tensor named, no output file and no temporary file, and an existing output file unchanged;
# blocks end between chunks, so that each chunk is read once (test hook).
. tests/cli/lib.sh
# The block size in MiB, as the build has it: the cases below are laid out on its boundaries.
BLOCK_MIB=$(sed -n 's/^#define XFER_BLOCK (\([0-9]*\)u << 20)$/\1/p' "$ROOT/cli/ckptctl/xfer.h")
[ -n "$BLOCK_MIB" ] || { echo "cannot read XFER_BLOCK from cli/ckptctl/xfer.h"; exit 1; }

# gen OUT CASE: the safetensors file of CASE in the canonical layout (tests/cli/mkst.py).
gen() {
	python3 - "$ROOT/tests/cli" "$1" "$2" "$BLOCK_MIB" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import mkst
out, case, B = sys.argv[2], sys.argv[3], int(sys.argv[4]) << 20
MiB = 1 << 20
if case == "spans":
    # 5 bytes, 1.25 blocks of F32, 56 bytes, 1 block of BF16: big and big2 cross block
    # boundaries off their elements' grid.
    ts = [("head", "U8", [5]), ("big", "F32", [B * 5 // 16 + 3]), ("mid", "F64", [7]),
          ("big2", "BF16", [B // 2 + 1]), ("tail", "U8", [1])]
elif case == "small":
    dts = ["U8", "F32", "BF16", "I64", "BOOL", "F64", "I16"]
    ts = [("t.%04d" % i, dts[i % 7], [i % 13, 1 + i % 3]) for i in range(3000)]
elif case == "zeros":
    # "a" ends exactly where the second block starts: the empty tensors after it sit on the
    # boundary; others open and close the file.
    def tens(n):
        return [("a0", "F32", [0]), ("a", "U8", [n]), ("z0", "F32", [0]), ("z1", "U8", [0, 3]),
                ("b", "I32", [25]), ("zz", "F64", [2, 0])]
    n = B
    for _ in range(3):
        n = B - (len(mkst.build(tens(n), {"case": case})) - n - 100)
    ts = tens(n)
    assert len(mkst.build(ts, {"case": case})) - 100 == B
open(out, "wb").write(mkst.build(ts, {"case": case}, seed=3))
PY
}

step=0
for c in spans small zeros; do
	step=$((step + 1))
	gen "$T/$c.st" $c || exit 1
	ckptctl import -q "$STORE" --step $step "$T/$c.st" || exit 1
	expect "export of $c succeeds" ckptctl export -q "$STORE" $step -o "$T/$c.out"
	expect "round trip of $c is byte-identical" cmp "$T/$c.st" "$T/$c.out"
	expect "export of $c to standard output is byte-identical" \
		cmp "$T/$c.st" <(ckptctl export "$STORE" $step -o -)
done
expect "no temporary file is left" test -z "$(ls "$T" | grep tmp-)"

# A damaged chunk of big2 (blocks 2 and 3): the export fails as a whole.
cp -a "$STORE" "$T/bad"
corrupt flip-tensor "$T/bad" "$T/spans.st" big2 >/dev/null || exit 1
ckptctl export "$T/bad" 1 -o "$T/new.out" 2>"$T/err"
expect "a damaged chunk fails the export (exit 1)" test $? = 1
expect "the message names the damage and the pack file" grep -q 'packs/.*\.pack' "$T/err"
expect "and the tensor" grep -q "tensor 'big2'" "$T/err"
expect "no output file and no temporary file" \
	test ! -e "$T/new.out" -a -z "$(ls "$T" | grep tmp-)"
cp "$T/small.st" "$T/keep.out"
ckptctl export -q "$T/bad" 1 -o "$T/keep.out" 2>/dev/null
expect "an existing output file is left as it was" cmp "$T/small.st" "$T/keep.out"
expect "and no temporary file" test -z "$(ls "$T" | grep tmp-)"

# Buffered writes where O_DIRECT is refused, at open or at the first write (test-build hook).
CKH=$ROOT/$B/tests/hooks/ckptctl
if [ -x "$CKH" ]; then
	for how in refuse einval; do
		CKPTCTL_TEST_DIRECT=$how "$CKH" export -q "$STORE" 1 -o "$T/$how.out"
		expect "O_DIRECT $how: the export succeeds, byte-identical" cmp "$T/spans.st" "$T/$how.out"
	done
	# Blocks end between the chunks of the tensor they cut: every record is read once (a cut
	# chunk was read by both blocks, 6% more reading on a 2 GiB file). Beyond the records,
	# each reading thread reads the pack's 4 KiB header: less than one chunk in all.
	CKPTCTL_TEST_READ_STATS=$T/read "$CKH" export -q "$STORE" 1 -o "$T/read.out"
	stored=$(ckptctl show --json "$STORE" 1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["stored_bytes"])')
	read=$(cat "$T/read")
	expect "each chunk is read once ($read bytes read, $stored stored)" \
		test "$read" -ge "$stored" -a "$read" -lt $((stored + (1 << 20)))
	expect "and the file is byte-identical" cmp "$T/spans.st" "$T/read.out"
else
	echo "note: $CKH (ckptctl with test hooks) is not built: the O_DIRECT fallbacks are not tested"
fi
finish
