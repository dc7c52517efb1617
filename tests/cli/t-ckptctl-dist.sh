#!/usr/bin/env bash
# ckptctl on multi-rank checkpoints (format version 2, made by tests/cli/mkdist: N threads as
# ranks): list shows the world size, show the shard layout of every global tensor (boxes, ranks,
# parts; replicated marked) and leaves the ckpt.dist.* entries and large base64 values out unless
# --all, verify checks every part and names the damaged part's rank and the
# rank that wrote a damaged chunk, du counts the parts, prune removes a pruned checkpoint's
# parts/<step>/ and the per-rank packs only it used (a dry run counts them), gc removes the parts
# and packs of a save that never committed; list shows the Lightning file a checkpoint backs.
# Single-process checkpoints print what they always did.
. tests/cli/lib.sh

MK=$ROOT/$B/tests/bin/mkdist
[ -x "$MK" ] || { echo "skip: $MK is not built (make tests)"; exit 77; }
mkdist() { "$MK" "$@"; }
# The parts' checksums (in the global manifest's reserved metadata) cover their commit times.
ckd() {
	"$CK" "$@" >"$T/.d.out" 2>"$T/.d.err"
	local rc=$?
	sed -e 's/\(ckpt\.dist\.part\.[0-9]*"\{0,1\}\( =\|:\) "[0-9]* \)[0-9a-f]\{32\}"/\1HEX"/' "$T/.d.out"
	cat "$T/.d.err" >&2
	return $rc
}
packs() { (cd "$1/packs" && ls); }
P=parts

mkdist "$STORE" 1 4 || exit 1
packs "$STORE" >"$T/packs1"
mkdist "$STORE" 2 4 --gen 1 || exit 1
packs "$STORE" >"$T/packs2"
mkdist "$STORE" 3 2 --gen 2 || exit 1 # resharded: 2 ranks
mkst model "$T/m.safetensors" 1
ckptctl import -q "$STORE" --step 4 "$T/m.safetensors" || exit 1 # single-process

check dist-list ckptctl list "$STORE"
check dist-list-json ckptctl list "$STORE" --json
check dist-show ckd show "$STORE" 2
check dist-show-json ckd show "$STORE" 2 --json
check dist-show-resharded ckd show "$STORE" 3
check dist-show-all ckd show "$STORE" 3 --all
# A DCP-like checkpoint: a large base64 entry (DCP's dcp.metadata) is shown by its size, the
# ckpt.dist.* entries are counted; --all shows both in full.
python3 -c 'import base64, random; r = random.Random(7); print(base64.b64encode(bytes(r.randrange(256) for _ in range(3000))).decode())' >"$T/b64"
mkdist "$T/dcp" 1 2 --meta "dcp.metadata=$(cat "$T/b64")" || exit 1
check dist-show-dcp ckd show "$T/dcp" 1
check dist-show-dcp-json ckd show "$T/dcp" 1 --json
expect "show --all --json has dcp.metadata and the ckpt.dist.* entries whole" python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))["metadata"]
assert d["dcp.metadata"] == open(sys.argv[2]).read().strip(), len(d["dcp.metadata"])
assert sorted(k for k in d if k.startswith("ckpt.dist.")) == ["ckpt.dist.part.0", "ckpt.dist.part.1", "ckpt.dist.shards.w", "ckpt.dist.world"], d.keys()
' <("$CK" show "$T/dcp" 1 --all --json) "$T/b64"
expect "show --all lists the ckpt.dist.* entries" test "$("$CK" show "$T/dcp" 1 --all | grep -c '^  ckpt\.dist\.')" = 4
expect "show of a single-process checkpoint has no global section" \
	bash -c "! '$CK' show '$STORE' 4 | grep -q 'GLOBAL\|world size'"
expect "show --json: shards tile each global tensor, parts exist, replicated has no shards" \
	python3 -c '
import json, os, sys
s = json.load(open(sys.argv[1]))
assert s["world_size"] == 4
g = {t["name"]: t for t in s["global_tensors"]}
assert set(g) == {"w", "emb"}, g
assert g["emb"]["replicated"] and g["emb"]["shards"] == [] and g["emb"]["shape"] == [1000, 320]
w = g["w"]
assert not w["replicated"] and w["shape"] == [8, 6] and len(w["shards"]) == 4
rows = sorted((x["offsets"][0], x["offsets"][0] + x["lengths"][0], x["rank"]) for x in w["shards"])
assert rows == [(0, 2, 0), (2, 4, 1), (4, 6, 2), (6, 8, 3)], rows
for x in w["shards"]:
    assert os.path.isfile(os.path.join(sys.argv[2], x["part"])), x
' <(ckptctl show "$STORE" 2 --json) "$STORE"
check dist-verify ckptctl verify "$STORE" --all

# A forged ckpt.dist.world (out of range, or not one per part record): the library refuses the
# layout, so verify reports the checkpoint damaged, naming the key, and exits 1.
MFSET=$ROOT/$B/tests/bin/mfset
for world in -1 0 3; do
	rm -rf "$T/s-world" && cp -a "$STORE" "$T/s-world"
	"$MFSET" "$T/s-world/manifests/00000000000000000002.ckpt" ckpt.dist.world "$world" || exit 1
	expect "verify: world $world is a DAMAGED multi-rank layout naming ckpt.dist.world, exit 1" \
		bash -c "out=\$(timeout 20 '$CK' verify '$T/s-world' 2); rc=\$?; test \$rc -eq 1 &&
			grep -q '^step 2: DAMAGED multi-rank layout: .*ckpt\.dist\.world = \"$world\"' <<<\"\$out\""
	expect "verify --json: world $world is a damage entry of step 2" python3 -c '
import json, sys
v = json.load(open(sys.argv[1]))
assert not v["intact"] and v["damaged"] == 1, v
(c,) = v["checkpoints"]
assert c["step"] == 2 and c["status"] == "damaged", c
(d,) = c["damage"]
assert d["part"] == "" and d["rank"] == -1 and d["file"] == "" and d["error"], d
assert "ckpt.dist.world" in d["message"], d
' <(timeout 20 "$CK" verify "$T/s-world" 2 --json)
done

# A global manifest without ckpt.dist.world (its checksum valid): the box reader cannot read it,
# and verify and export used to take it for a checkpoint of whole tensors w@0..w@3. Now every
# reader refuses it as damaged, naming the missing key: verify and export exit 1.
rm -rf "$T/s-noworld" && cp -a "$STORE" "$T/s-noworld"
"$MFSET" -d "$T/s-noworld/manifests/00000000000000000002.ckpt" ckpt.dist.world || exit 1
expect "verify: a manifest without ckpt.dist.world is DAMAGED, naming the key, exit 1" \
	bash -c "out=\$(timeout 20 '$CK' verify '$T/s-noworld' 2); rc=\$?; test \$rc -eq 1 &&
		grep -q '^step 2: DAMAGED manifest: .*without ckpt\.dist\.world' <<<\"\$out\""
"$CK" export "$T/s-noworld" 2 -o "$T/noworld.safetensors" 2>"$T/err"
expect "export of it fails (1), naming the key, and writes nothing" \
	bash -c "test $? -eq 1 && grep -q 'without ckpt\.dist\.world' '$T/err' &&
		test ! -e '$T/noworld.safetensors'"

# A forged shard table of w that does not tile it: rank 1's rows [2, 4) moved to
# [3, 5) (over rank 2's, row 2 in none), or a ninth row no shard holds. Both used to verify, and
# export wrote zeros for the rows no shard held. Now verify reports the layout DAMAGED naming the
# tensor and exits 1, and export refuses.
tab=$("$CK" show "$STORE" 2 --all --json | python3 -c 'import json, sys
print(json.load(sys.stdin)["metadata"]["ckpt.dist.shards.w"])')
overlap=$(python3 -c 'import sys
v = sys.argv[1].split(); assert v[:5] == ["12", "2", "8", "6", "4"] and v[9] == "2", v
v[9] = "3"; print(" ".join(v))' "$tab")
gap=$(python3 -c 'import sys
v = sys.argv[1].split(); v[2] = "9"; print(" ".join(v))' "$tab")
for bad in overlap gap; do
	rm -rf "$T/s-tile" && cp -a "$STORE" "$T/s-tile"
	"$MFSET" "$T/s-tile/manifests/00000000000000000002.ckpt" ckpt.dist.shards.w "${!bad}" || exit 1
	case $bad in overlap) why='the shards of rank 1 (shard 1) and rank 2 (shard 2) overlap' ;;
		gap) why='its 4 shards hold 48 of its 54 elements' ;; esac
	expect "verify: a shard table with a $bad is a DAMAGED multi-rank layout naming w, exit 1" \
		bash -c "out=\$(timeout 20 '$CK' verify '$T/s-tile' 2); rc=\$?; test \$rc -eq 1 &&
			grep -q '^step 2: DAMAGED multi-rank layout: .*tensor w (ckpt\.dist\.shards\.w): $why' <<<\"\$out\""
	expect "export: a shard table with a $bad is refused (exit 1, names tensor w), no file" \
		bash -c "! '$CK' export '$T/s-tile' 2 -o '$T/tile.safetensors' 2>'$T/tile.err' &&
			grep -q 'tensor w (ckpt\.dist\.shards\.w): $why' '$T/tile.err' &&
			test ! -e '$T/tile.safetensors'"
done

# du: the committed checkpoints' parts (4 + 4 + 2 files), in none of the other counters.
check dist-du ckptctl du "$STORE"
expect "du --json counts every part file of the committed checkpoints" python3 -c '
import json, os, sys
d = json.load(open(sys.argv[1]))
top = os.path.join(sys.argv[2], "parts")
files = [os.path.join(top, s, f) for s in os.listdir(top) for f in os.listdir(os.path.join(top, s))]
assert d["parts"] == len(files) == 10, (d["parts"], files)
assert d["part_bytes"] == sum(os.path.getsize(f) for f in files), d
assert d["garbage_bytes"] == 0 and d["leftover_bytes"] == 0, d
' <(ckptctl du "$STORE" --json) "$STORE"

# verify names the damaged part and its rank; a missing part too.
cp -a "$STORE" "$T/s-part"
corrupt flip "$T/s-part/$P/00000000000000000002/2.part"
rm "$T/s-part/$P/00000000000000000001/1.part"
check dist-verify-part ckptctl verify "$T/s-part" --all
expect "verify --json names the damaged parts' ranks" python3 -c '
import json, sys
v = json.load(open(sys.argv[1]))
assert not v["intact"] and v["damaged"] == 2, v
bad = {c["step"]: [d["rank"] for d in c["damage"] if "part" in d] for c in v["checkpoints"]}
assert bad == {1: [1], 2: [2], 3: [], 4: []}, bad
' <(ckptctl verify "$T/s-part" --all --json)

# A damaged chunk in a rank's pack: verify says which rank wrote it.
cp -a "$STORE" "$T/s-chunk"
pk=$(printf %08d $((((3 + 1) << 22) + 1))) # rank 3's first pack (step 1): ids start at the range base + 1
corrupt flip "$T/s-chunk/packs/$pk.pack" 4200
expect "verify names the rank that wrote a damaged chunk" \
	bash -c "'$CK' verify '$T/s-chunk' 1 | grep -q 'packs/$pk.pack (written by rank 3)'"
expect "verify exits 1 on a damaged rank's chunk" bash -c "! '$CK' verify -q '$T/s-chunk' 1"

# A save that never committed (rank 3 gives up): its parts and its ranks' packs are garbage;
# du counts them as leftovers, gc removes them.
mkdist "$STORE" 5 4 --gen 5 --abort 3 2>/dev/null && { echo "FAIL: the aborted save committed"; exit 1; }
[ -d "$STORE/$P/00000000000000000005" ] || { echo "FAIL: the aborted save left no parts"; exit 1; }
expect "du counts the uncommitted save's parts as leftovers, not as parts" python3 -c '
import json, os, sys
d = json.load(open(sys.argv[1]))
top = os.path.join(sys.argv[2], "parts", "00000000000000000005")
left = sum(os.path.getsize(os.path.join(top, f)) for f in os.listdir(top) if f != "CLAIM")  # the claim is not data
assert d["parts"] == 10 and d["leftover_bytes"] == left > 0, (d, left)
assert d["unreferenced_pack_bytes"] > 0, d
' <(ckptctl du "$STORE" --json) "$STORE"
check dist-gc-aborted ckptctl gc "$STORE"
expect "gc removed the uncommitted save's parts" test ! -e "$STORE/$P/00000000000000000005"
expect "gc: nothing unreferenced is left" python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["garbage_bytes"] == 0 and d["parts"] == 10, d
' <(ckptctl du "$STORE" --json)

# prune: a dry run counts the parts it would remove; the real one removes step 1's and 2's
# parts/<step>/ and step 2's packs (w only: step 3 rewrote w, emb's chunks are still step 1's).
check dist-prune-dry ckptctl prune "$STORE" --keep-last 2 --dry-run --json
expect "a dry run removes nothing" test -d "$STORE/$P/00000000000000000001"
check dist-prune ckptctl prune "$STORE" --keep-last 2
expect "prune removed the pruned checkpoints' parts" \
	bash -c "test ! -e '$STORE/$P/00000000000000000001' && test ! -e '$STORE/$P/00000000000000000002' && test -d '$STORE/$P/00000000000000000003'"
comm -13 "$T/packs1" "$T/packs2" >"$T/only2"
expect "step 2 wrote packs of its own (one per rank)" test "$(wc -l <"$T/only2")" -eq 4
expect "prune removed the per-rank packs only step 2 used" bash -c "
	for p in \$(cat '$T/only2'); do test ! -e '$STORE/packs/'\$p || exit 1; done"
check dist-verify-after-prune ckptctl verify "$STORE" --all
expect "after prune: du counts step 3's parts only, nothing unreferenced" python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["parts"] == 2 and d["unreferenced_pack_bytes"] == 0, d
assert [c["step"] for c in d["checkpoints"]] == [3, 4], d
' <(ckptctl du "$STORE" --json)
expect "the store takes the next multi-rank save" mkdist "$STORE" 6 3 --gen 6
check dist-list-after ckptctl list "$STORE"
# A checkpoint saved by Lightning's CheckpointIO records its file name and global step: list shows
# them, so that a prune that leaves a .ckpt pointer dangling can be seen coming.
mkdist "$T/lt" 1 2 --meta lightning.file=epoch=6-step=35.ckpt --meta lightning.global_step=35 &&
	mkdist "$T/lt" 2 2 --gen 1 || exit 1
ckptctl list "$T/lt" >"$T/lt.out"
expect "list: a LIGHTNING column with the file and its step" bash -c "
	grep -q 'LIGHTNING\$' '$T/lt.out' && grep -q '  epoch=6-step=35.ckpt (step 35)\$' '$T/lt.out' &&
	grep -Eq '^ +2 .*  -\$' '$T/lt.out'"
expect "list --json: lightning_file and lightning_step" python3 -c '
import json, sys
d = json.load(sys.stdin)
assert d[0]["lightning_file"] == "epoch=6-step=35.ckpt" and d[0]["lightning_step"] == 35, d[0]
assert "lightning_file" not in d[1], d[1]
' < <(ckptctl list --json "$T/lt")
finish
