#!/usr/bin/env bash
# ckptctl prune --remote takes every rule of a local prune with the same meaning: eight
# checkpoints whose manifests record chosen commit times (CKPT_TEST_COMMIT_TIME, through ckptctl
# built with the test hooks) and tags, pushed; for each rule the remote dry run (--json) removes
# exactly what the local dry run removes and keeps the expected steps; text output names each
# step; a real run leaves those on the remote and the local store whole. The remote is
# $CKPT_TEST_REMOTE/NAME or a temporary directory.
. tests/cli/lib.sh
CKH=$ROOT/$B/tests/hooks/ckptctl
[ -x "$CKH" ] || { echo "skip: $CKH (ckptctl with test hooks) is not built"; exit 77; }
if [ -n "${CKPT_TEST_REMOTE:-}" ]; then
	R=$CKPT_TEST_REMOTE/t-remote-prune-cli-$$-$RANDOM
	case $R in /*) mkdir -p "$R" ;; file://*) mkdir -p "${R#file://}" ;; esac
else
	R=$T/remote
	mkdir -p "$R"
fi
for s in 1 2 3 4; do mkst model "$T/m$s.safetensors" "$s"; done
# 2024-11-15 (tagged best), 2024-12-10 (release), 2024-12-20, 2025-01-05 (release), 2025-01-25,
# 2025-03-03, 2025-06-01 10:00 and 12:00 (UTC), as tests/cli/t-ckptctl-prune.sh.
i=0
for d in 2024-11-15 2024-12-10 2024-12-20 2025-01-05 2025-01-25 2025-03-03 "2025-06-01 10:00" \
	"2025-06-01 12:00"; do
	i=$((i + 1))
	tag=()
	case $i in 1) tag=(--tag best) ;; 2 | 4) tag=(--tag release) ;; esac
	CKPT_TEST_COMMIT_TIME=$(date -u -d "$d" +%s) "$CKH" import -q "$STORE" --step "$i" \
		"${tag[@]}" "$T/m$(( (i % 4) + 1 )).safetensors" || exit 1
	ckptctl push "$STORE" "$i" --remote "$R" > /dev/null || exit 1
done
kept() { # the steps a --json dry run keeps, local or remote: "1 3 8"
	python3 -c '
import json, sys
d = json.load(sys.stdin)
gone = set(d["steps_removed"] if "steps_removed" in d else d["removed"])
print(" ".join(str(s) for s in range(1, 9) if s not in gone))'
}
# rule EXPECTED-KEPT ARGS...: local and remote dry runs keep EXPECTED-KEPT.
rule() {
	local want=$1 l r
	shift
	l=$(ckptctl prune "$STORE" "$@" --dry-run --json | kept)
	r=$(ckptctl prune "$STORE" --remote "$R" "$@" --dry-run --json | kept)
	expect "prune --remote $*: keeps $want (local: $l, remote: $r)" \
		test "$l" = "$want" -a "$r" = "$want"
}
rule "5 6 8" --keep-monthly 3
rule "1 3 5 6 8" --keep-monthly 10
rule "3 8" --keep-yearly 2
rule "1 3 6 8" --keep-monthly 2 --keep-yearly 2
rule "1 3 5 6 8" --keep-weekly 1 --keep-daily 2 --keep-monthly 2
rule "7 8" --keep-hourly 2
rule "2 4 8" --keep-last 1 --keep-tag release
rule "1 2 4 8" --keep-last 1 --keep-tag release --keep-tag best
rule "4 8" --keep-last 1 --keep-every 4
rule "3 8" --keep-last 1 --keep 3
ckptctl prune "$STORE" --remote "$R" --keep-yearly 2 --dry-run > "$T/out"
expect "the text names each step it would remove" test \
	"$(grep -c '^would remove step ' "$T/out")" = 6
expect "and says how many" grep -q '^would remove 6 checkpoints from ' "$T/out"
expect "a dry run removes nothing there" test \
	"$(ckptctl list "$STORE" --remote "$R" --json | python3 -c '
import json, sys; print(sum(c["upload"] == "remote" for c in json.load(sys.stdin)))')" = 8
ckptctl prune "$STORE" --remote "$R" --keep-monthly 3 > "$T/out" || exit 1
expect "prune --remote removes 1 2 3 4 7" test \
	"$(grep '^removed step ' "$T/out" | awk '{print $3}' | tr '\n' ' ')" = "1 2 3 4 7 "
expect "the remote keeps 5 6 8, the store all" test \
	"$(ckptctl list "$STORE" --remote "$R" --json | python3 -c '
import json, sys; print([(c["step"], c["upload"]) for c in json.load(sys.stdin)])')" = \
	"[(1, 'local'), (2, 'local'), (3, 'local'), (4, 'local'), (5, 'remote'), (6, 'remote'), (7, 'local'), (8, 'remote')]"
expect "what the remote keeps verifies there" ckptctl verify -q "$STORE" 8 --remote "$R"
ckptctl prune "$STORE" --remote "$R" --keep-tag release > /dev/null 2> "$T/err"
expect "--keep-tag alone is no policy (2)" test $? = 2
ckptctl prune "$STORE" --remote "$R" --keep-within 0d > /dev/null 2> "$T/err"
expect "a bad duration is a usage error (2)" test $? = 2
finish
