#!/usr/bin/env bash
# ckptctl with a damaged remote manifest or a missing remote pack: prune --remote refuses before
# removing anything (exit 1, naming the damaged manifest's key; --force proceeds and keeps it),
# as a local prune does; pull of the latest brings the newest intact checkpoint and warns, on
# stderr and in --json, about the newer one it passed over; list --remote warns about it as list
# does about a damaged local manifest; verify --remote names the remote object of a pack the
# remote lacks, not the local pack file. A directory remote ($CKPT_TEST_REMOTE/NAME or a
# temporary directory): the objects are damaged in place.
. tests/cli/lib.sh

if [ -n "${CKPT_TEST_REMOTE:-}" ]; then
	R=$CKPT_TEST_REMOTE/t-remote-damaged-cli-$$-$RANDOM
	case $R in
	/*) mkdir -p "$R" ;;
	file://*) mkdir -p "${R#file://}" ;;
	*) echo "skip: damages remote objects in place: a directory remote only"; exit 77 ;;
	esac
else
	R=$T/remote
	mkdir -p "$R"
fi
dir=${R#file://}
j() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
flip() { # FILE: one byte of a manifest's body flipped (its checksum no longer matches)
	python3 - "$1" <<'PY'
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
b[120] ^= 0x55
open(p, "wb").write(bytes(b))
PY
}

for s in 1 2 3; do
	mkst model "$T/m$s.safetensors" "$s"
	ckptctl import -q "$STORE" --step "$s" "$T/m$s.safetensors" || exit 1
	ckptctl push "$STORE" "$s" --remote "$R" > /dev/null || exit 1
done
id=$(ckptctl list "$STORE" --remote "$R" --json | j 'd[0]["store_id"]')
key=libckpt1/$id/manifests/00000000000000000003.ckpt
flip "$dir/$key"
objects() { (cd "$dir" && find libckpt1 -type f | sort); }
objects > "$T/before"

# prune --remote: refused, nothing removed, the damaged manifest named.
ckptctl prune "$STORE" --remote "$R" --keep-last 1 > "$T/out" 2> "$T/err"
expect "prune --remote with a damaged remote manifest is refused (1)" test $? = 1
expect "naming its key" grep -q "$key" "$T/err"
expect "and saying nothing was removed" grep -q "nothing is removed" "$T/err"
expect "no step is reported removed" test ! -s "$T/out"
objects > "$T/after"
expect "every remote object is still there" cmp -s "$T/before" "$T/after"
ckptctl prune "$STORE" --remote "$R" --keep-last 1 --dry-run --json > /dev/null 2> "$T/err"
expect "a dry run is refused the same way (1)" test $? = 1
expect "naming the key too" grep -q "$key" "$T/err"

# pull of the latest: step 2, and a warning naming step 3 and its key (text and --json).
ckptctl pull "$T/fresh" --remote "$R" > "$T/out" 2> "$T/err"
expect "pull of the latest succeeds (0)" test $? = 0
expect "with the newest intact step, 2" grep -q '^pulled step 2: ' "$T/out"
expect "warning of the damaged newer step 3 and its key" \
	grep -q "^ckptctl: pull: warning: step 3 on the remote is damaged, pulled step 2 .*$key" "$T/err"
ckptctl pull "$T/fresh2" --remote "$R" --json > "$T/out" 2> "$T/err"
expect "pull --json names it in skipped_damaged" test \
	"$(j 'd["step"], [(x["step"], "'"$key"'" in x["message"]) for x in d["skipped_damaged"]]' < "$T/out")" = \
	"2 [(3, True)]"
ckptctl pull "$T/fresh3" 1 --remote "$R" --json > "$T/out" 2> "$T/err"
expect "a pull of a given step warns of nothing" test "$(j 'd["skipped_damaged"]' < "$T/out")" = "[]" -a ! -s "$T/err"

# list --remote: the same warning as list gives for a damaged local manifest.
ckptctl list "$T/fresh" --remote "$R" > "$T/out" 2> "$T/err"
expect "list --remote lists (0)" test $? = 0
expect "list --remote warns of the damaged remote manifest, naming its key" \
	grep -q "^ckptctl: warning: step 3: remote manifest $key: " "$T/err"
cp -a "$STORE" "$T/local"
flip "$T/local/manifests/00000000000000000003.ckpt"
ckptctl list "$T/local" 2> "$T/lerr" > /dev/null
expect "as list warns of a damaged local one" grep -q "^ckptctl: warning: step 3: " "$T/lerr"
expect "the damaged step is not listed" test \
	"$(ckptctl list "$T/fresh" --remote "$R" --json 2>/dev/null | j '[c["step"] for c in d]')" = "[1, 2]"

# --force: the policy's choice goes, the damaged manifest stays.
ckptctl prune "$STORE" --remote "$R" --keep-last 1 --force > "$T/out" 2> "$T/err"
expect "prune --remote --force proceeds (0)" test $? = 0
expect "removing step 1 only" test "$(grep '^removed step ' "$T/out" | awk '{print $3}' | tr '\n' ' ')" = "1 "
expect "keeping the damaged manifest" test -f "$dir/$key"

# A pack the remote lacks: verify --remote names its remote key, not the local pack file.
# (the forced gc removed every pack but step 2's: none other is known referenced)
pack=$(cd "$dir/libckpt1/$id/packs" && ls | tail -1)
rm "$dir/libckpt1/$id/packs/$pack"
ckptctl verify "$STORE" 2 --remote "$R" > "$T/out" 2>&1
expect "verify --remote finds the missing pack (1)" test $? = 1
expect "in the remote object" grep -q "^step 2: DAMAGED .* in [^ ]*libckpt1/$id/packs/$pack: " "$T/out"
expect "not in the local pack file" bash -c "! grep -q ' in $STORE/packs/' '$T/out'"
ckptctl verify "$STORE" 2 --remote "$R" --json > "$T/out" 2>/dev/null
expect "verify --remote --json: the damage's file is the remote object" test "$(j '
set(x["file"].endswith("libckpt1/'"$id"'/packs/'"$pack"'") for c in d["checkpoints"] for x in c["damage"])' < "$T/out")" = "{True}"
finish
