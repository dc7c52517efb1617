#!/usr/bin/env bash
# ckptctl push, pull and list --remote: push sends only what the remote lacks (a second
# push sends nothing); list shows where each checkpoint is (local / remote / remote-only, text and
# --json); after the store is deleted, pull creates it again bound to the remote's store and
# restores the checkpoint (verify, export byte-identical); bad input and a damaged remote object
# get clear errors and exit codes. The remote is $CKPT_TEST_REMOTE/NAME (s3://... once the S3
# backend is in) or a temporary directory.
. tests/cli/lib.sh

if [ -n "${CKPT_TEST_REMOTE:-}" ]; then
	R=$CKPT_TEST_REMOTE/t-remote-cli-$$-$RANDOM
	case $R in /*) mkdir -p "$R" ;; file://*) mkdir -p "${R#file://}" ;; esac
else
	R=$T/remote
	mkdir -p "$R"
fi
j() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }

for s in 1 2 3; do mkst model "$T/m$s.safetensors" "$s"; done
for s in 1 2 3; do ckptctl import -q "$STORE" --step "${s}0" "$T/m$s.safetensors" || exit 1; done

sent=$(ckptctl push "$STORE" 20 --remote "$R" --json | j 'd["packs_sent"], d["bytes_sent"] > 0')
expect "the first push sends packs ($sent)" test "${sent#* }" = True
again=$(ckptctl push "$STORE" 20 --remote "$R" --json | j 'd["packs_sent"], d["bytes_sent"], d["packs_present"] > 0')
expect "a second push sends nothing ($again)" test "$again" = "0 0 True"
ckptctl push "$STORE" --remote "$R" > "$T/push.txt"
expect "push latest says what it sent" grep -q '^pushed step 30: ' "$T/push.txt"
expect "list --remote --json says where each is" test \
	"$(ckptctl list "$STORE" --remote "$R" --json | j '[(c["step"], c["upload"]) for c in d]')" = \
	"[(10, 'local'), (20, 'remote'), (30, 'remote')]"
expect "list --remote has an UPLOAD column" sh -c \
	"'$CK' list '$STORE' --remote '$R' | grep -q '^ *10 .* local *\$'"
expect "CKPT_REMOTE stands for --remote" sh -c \
	"CKPT_REMOTE='$R' '$CK' list '$STORE' | grep -q UPLOAD"
ckptctl export -q "$STORE" 30 -o "$T/before.safetensors" || exit 1

# Node loss: the store is gone; pull creates it bound to the remote's store.
id=$(ckptctl list "$STORE" --remote "$R" --json | j 'd[0]["store_id"]')
rm -rf "$STORE"
out=$(ckptctl pull "$STORE" --remote "$R" --json)
expect "pull into a missing store creates it ($out)" test \
	"$(echo "$out" | j 'd["step"], d["created"], d["store_id"]')" = "30 True $id"
expect "list after the loss: 20 only on the remote" test \
	"$(ckptctl list "$STORE" --remote "$R" --json | j '[(c["step"], c["upload"]) for c in d]')" = \
	"[(20, 'remote-only'), (30, 'remote')]"
expect "the pulled checkpoint verifies" ckptctl verify -q "$STORE" 30
ckptctl export -q "$STORE" 30 -o "$T/after.safetensors" || exit 1
expect "and exports byte-identical" cmp "$T/before.safetensors" "$T/after.safetensors"
expect "pull 20 shares the packs already local" sh -c \
	"'$CK' pull '$STORE' 20 --remote '$R' | grep -q '^pulled step 20: '"
expect "pull of a local checkpoint does nothing" sh -c \
	"'$CK' pull '$STORE' 20 --remote '$R' --json | grep -q '\"packs_sent\": 0'"

# The remote's copy itself: verify and show read it (range reads), local or not.
expect "verify --remote --all checks the remote's copies" ckptctl verify -q "$STORE" --all --remote "$R"
expect "show --remote of a checkpoint only the remote has" sh -c \
	"'$CK' show '$STORE' 20 --remote '$R' --json | grep -q '\"step\": 20'"

# Bad input.
ckptctl push "$STORE" > /dev/null 2> "$T/err"
expect "push without a remote is a usage error" test $? = 2
expect "and says so" grep -q 'no remote' "$T/err"
ckptctl push "$STORE" --remote "ftp://x" > /dev/null 2> "$T/err"
expect "an unknown scheme fails (1)" test $? = 1
expect "naming the schemes" grep -q 'file://' "$T/err"
ckptctl pull "$STORE" 99 --remote "$R" > /dev/null 2> "$T/err"
expect "pull of a step the remote lacks: exit 4" test $? = 4
ckptctl push "$STORE" 99 --remote "$R" > /dev/null 2> "$T/err"
expect "push of a step the store lacks: exit 4" test $? = 4

# A damaged remote pack (a directory remote: flipped in place) is named, and nothing kept.
case $R in
/*|file://*)
	dir=${R#file://}
	pack=$(ls "$dir/libckpt1/$id/packs/" | head -1)
	python3 - "$dir/libckpt1/$id/packs/$pack" <<'PY'
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
b[4096 + 64 + 100] ^= 0x55
open(p, "wb").write(bytes(b))
PY
	rm -rf "$T/fresh"
	ckptctl pull "$T/fresh" 20 --remote "$R" > /dev/null 2> "$T/err"
	expect "a damaged remote pack fails the pull (1)" test $? = 1
	expect "naming the object" grep -q "libckpt1/$id/packs/$pack" "$T/err"
	expect "and no checkpoint is kept" test -z "$(ls "$T/fresh/manifests")"
	ckptctl verify "$STORE" --all --remote "$R" > "$T/out" 2>&1
	expect "verify --remote finds the damage (1)" test $? = 1
	expect "naming the remote object" grep -q "DAMAGED.*libckpt1/$id/packs/$pack" "$T/out"
	expect "the local copy is intact" ckptctl verify -q "$STORE" --all
	;;
esac

# Progress on a terminal: one line per transfer, with the bytes to move as its total.
mkst big "$T/big.safetensors" 1
ckptctl import -q "$T/p" --step 1 "$T/big.safetensors" || exit 1
mkdir -p "$T/pr"
python3 "$ROOT/tests/cli/ptyrun.py" "$CK" push "$T/p" --remote "$T/pr" > "$T/pty"
expect "push draws its progress line, total 4.0 MiB" grep -q '^totals: push: 4.0 MiB$' "$T/pty"
rm -rf "$T/p"
python3 "$ROOT/tests/cli/ptyrun.py" "$CK" pull "$T/p" --remote "$T/pr" > "$T/pty"
expect "pull draws its progress line, total 4.0 MiB" grep -q '^totals: pull: 4.0 MiB$' "$T/pty"
mkdir -p "$T/pr2"
python3 "$ROOT/tests/cli/ptyrun.py" "$CK" push "$T/p" --remote "$T/pr2" --no-progress > "$T/pty"
expect "--no-progress draws none" grep -q '^progress lines: none' "$T/pty"

# prune and gc on the remote, with a second store on the same remote left alone.
mkst model "$T/m4.safetensors" 4
ckptctl import -q "$T/s2" --step 5 "$T/m4.safetensors" && ckptctl push "$T/s2" --remote "$R" > /dev/null ||
	exit 1
expect "a dry run removes nothing" test \
	"$(ckptctl prune "$STORE" --remote "$R" --keep-last 1 --dry-run --json | j 'd["manifests_removed"]')" = 1
expect "the remote still has both" test \
	"$(ckptctl list "$STORE" --remote "$R" --json | j '[c["upload"] for c in d]')" = "['remote', 'remote']"
expect "prune --remote removes step 20 there" test \
	"$(ckptctl prune "$STORE" --remote "$R" --keep-last 1 --json | j 'd["manifests_removed"]')" = 1
expect "locally it stays" test \
	"$(ckptctl list "$STORE" --remote "$R" --json | j '[(c["step"], c["upload"]) for c in d]')" = \
	"[(20, 'local'), (30, 'remote')]"
expect "gc --remote then finds nothing" test \
	"$(ckptctl gc "$STORE" --remote "$R" --json | j 'd["packs_removed"], d["packs_spared"]')" = "0 0"
expect "the other store's checkpoint is untouched" ckptctl verify -q "$T/s2" --all --remote "$R"
ckptctl prune "$STORE" --remote "$R" --keep-daily 0 > /dev/null 2> "$T/err"
expect "prune --remote checks its rules as prune does (2)" test $? = 2
ckptctl gc "$STORE" --remote "$R" --max-unused 5% > /dev/null 2> "$T/err"
expect "gc --remote refuses the compaction options (2)" test $? = 2
finish
