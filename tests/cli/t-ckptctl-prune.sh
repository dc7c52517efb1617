#!/usr/bin/env bash
# ckptctl prune: retention policies (--keep-last, --keep-every, --keep, --keep-tag, and borg's time
# rules --keep-within, --keep-hourly/daily/weekly/monthly/yearly on recorded commit times), --gc, --dry-run, --json; the
# bytes freed it reports equal what left the disk (the sizes of STORE's files before and after),
# the newest checkpoint always stays, the kept ones export byte-identical; a damaged manifest
# (refused without --force, naming the manifest), a truncated pack, a held lock (exit 3), bad
# input.
. tests/cli/lib.sh
# Checkpoints of chosen dates come from the tests' ckptctl (CKPT_TEST_COMMIT_TIME, a test hook).
CKH=$ROOT/$B/tests/hooks/ckptctl
[ -x "$CKH" ] || { echo "skip: $CKH (ckptctl with test hooks) is not built"; exit 77; }

for s in 1 2 3 4; do mkst model "$T/m$s.safetensors" "$s"; done
mkst big "$T/big1.safetensors" 1
mkst big "$T/big2.safetensors" 2

check missing-store ckptctl prune "$STORE" --keep-last 1
ckptctl import -q "$STORE" --step 100 "$T/m1.safetensors" || exit 1
ckptctl import -q "$STORE" --step 200 "$T/big1.safetensors" || exit 1
ckptctl import -q "$STORE" --step 300 "$T/m2.safetensors" || exit 1
ckptctl import -q "$STORE" --step 400 "$T/big2.safetensors" || exit 1
ckptctl import -q "$STORE" --step 500 "$T/m3.safetensors" || exit 1
ckptctl import -q "$STORE" --step 600 "$T/m4.safetensors" || exit 1
mkdir -p "$T/before"
for s in 100 200 300 400 500 600; do ckptctl export -q "$STORE" "$s" -o "$T/before/$s.st" || exit 1; done

# Total size of the regular files under a store (packs, manifests, leftovers).
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
# steps STORE: the listed steps, space-separated.
steps() { ckptctl list "$1" --json 2>/dev/null | python3 -c '
import json, sys
print(" ".join(str(c["step"]) for c in json.load(sys.stdin)))'; }
# Every listed checkpoint of a store exports as it did before.
same_exports() {
	local s
	for s in $(steps "$1"); do
		ckptctl export -q "$1" "$s" -o "$T/x.st" && cmp -s "$T/x.st" "$T/before/$s.st" || return 1
	done
}
# accounting STORE JSON-REPORT BYTES-BEFORE: bytes_freed == bytes that left the disk.
accounting() {
	python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
before, after = int(sys.argv[2]), int(sys.argv[3])
assert r["bytes_freed"] == before - after, (r["bytes_freed"], before, after)
' "$2" "$3" "$(filebytes "$1")"
}

check dry-run ckptctl prune "$STORE" --keep-last 2 --dry-run
check dry-run-json ckptctl prune "$STORE" --keep-last 2 --dry-run --json
expect "a dry run changes nothing" test "$(steps "$STORE")" = "100 200 300 400 500 600"
cp -a "$STORE" "$T/s-dry"
b=$(filebytes "$T/s-dry")
ckptctl prune "$T/s-dry" --keep-last 2 --dry-run --json >"$T/dry.json"
expect "a dry run removes no file" test "$(filebytes "$T/s-dry")" = "$b"

# --keep-last 2: 500 and 600 stay. What it frees: checked against the disk, and equal to the
# dry run's prediction.
cp -a "$STORE" "$T/s-last"
b=$(filebytes "$T/s-last")
check keep-last ckptctl prune "$T/s-last" --keep-last 2
cp -a "$STORE" "$T/s-last2"
ckptctl prune "$T/s-last2" --keep-last 2 --json >"$T/last.json"
expect "prune --keep-last 2: bytes freed = bytes gone from disk" accounting "$T/s-last2" \
	"$T/last.json" "$b"
expect "prune --keep-last 2: the dry run predicted the bytes freed" python3 -c '
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert a["bytes_freed"] == b["bytes_freed"] and a["removed"] == b["removed"], (a, b)
' "$T/dry.json" "$T/last.json"
expect "prune --keep-last 2: 500 and 600 remain" test "$(steps "$T/s-last2")" = "500 600"
expect "prune --keep-last 2: they export byte-identical" same_exports "$T/s-last2"
expect "prune --keep-last 2: they verify" "$CK" verify -q "$T/s-last2" --all
check again-nothing ckptctl prune "$T/s-last" --keep-last 2

# --keep-every 200 and --keep 100: 100, 200, 400, 600 (newest) stay.
cp -a "$STORE" "$T/s-every"
b=$(filebytes "$T/s-every")
check keep-every ckptctl prune "$T/s-every" --keep-last 1 --keep-every 200 --keep 100 --json
cp -a "$STORE" "$T/s-every2"
ckptctl prune "$T/s-every2" -n 1 -k 200 --keep 100 --json >"$T/every.json"
expect "prune --keep-every: bytes freed = bytes gone from disk" accounting "$T/s-every2" \
	"$T/every.json" "$b"
expect "prune --keep-every 200 --keep 100: 100 200 400 600 remain" \
	test "$(steps "$T/s-every2")" = "100 200 400 600"
expect "prune --keep-every: the rest export byte-identical" same_exports "$T/s-every2"
# --keep twice, and --keep of a step that does not exist (kept if it did; nothing to keep).
cp -a "$STORE" "$T/s-keep"
check keep-steps ckptctl prune "$T/s-keep" --keep-last 1 --keep 300 --keep 100 --keep 7
expect "prune --keep 300 --keep 100: 100 300 600 remain" test "$(steps "$T/s-keep")" = "100 300 600"

# The newest valid checkpoint always stays, even when a damaged manifest is newer (with --force).
cp -a "$STORE" "$T/s-man"
corrupt flip "$T/s-man/manifests/00000000000000000600.ckpt"
check damaged-refused ckptctl prune "$T/s-man" --keep-last 1
expect "a refused prune removes nothing" test "$(steps "$T/s-man" 2>/dev/null)" = "100 200 300 400 500"
check damaged-refused-json ckptctl prune "$T/s-man" --keep-last 1 --json
check damaged-list ckptctl prune "$T/s-man" --keep-last 1 --keep 100 --force --dry-run --list
check damaged-force ckptctl prune "$T/s-man" --keep-last 1 --force
expect "prune --force: the newest valid (500) stays, the damaged manifest too" \
	test "$(steps "$T/s-man" 2>/dev/null)" = "500" -a -e "$T/s-man/manifests/00000000000000000600.ckpt"
expect "prune --force: 500 exports byte-identical" same_exports "$T/s-man"

# A truncated pack: prune reads no chunk data; it removes what the policy says.
cp -a "$STORE" "$T/s-ptrunc"
corrupt truncate "$T/s-ptrunc/packs/00000002.pack" half
check truncated-pack ckptctl prune "$T/s-ptrunc" --keep-last 3

# Another process holds the lock: busy, nothing removed.
if command -v flock >/dev/null 2>&1; then
	cp -a "$STORE" "$T/s-busy"
	exec 9<"$T/s-busy/LOCK"
	flock -x 9 || exit 1
	check busy busy timeout 20 "$CK" prune "$T/s-busy" --keep-last 1
	exec 9<&-
	expect "a busy prune removes nothing" test "$(steps "$T/s-busy")" = "100 200 300 400 500 600"
fi

# --gc: prune, then gc's collection and compaction, in one command (one lock); a gc afterwards has
# nothing left to do, and what was freed is what left the disk.
cp -a "$STORE" "$T/s-gc"
b=$(filebytes "$T/s-gc")
check gc-dry-run ckptctl prune "$T/s-gc" --keep-last 2 --gc --dry-run
ckptctl prune "$T/s-gc" --keep-last 2 --gc --dry-run --json >"$T/gcdry.json"
expect "prune --gc --dry-run removes no file" test "$(filebytes "$T/s-gc")" = "$b"
check gc ckptctl prune "$T/s-gc" --keep-last 2 --gc --json
cp "$T/.out" "$T/s-gc.json" # what check just ran printed
ckptctl du "$T/s-gc" --json >"$T/gcdu.json"
expect "prune --gc: bytes freed = bytes gone from disk = the dry run's prediction" python3 -c '
import json, sys
d, r, du = (json.load(open(f)) for f in sys.argv[1:4])
assert d["bytes_freed"] == r["bytes_freed"] == int(sys.argv[4]) - int(sys.argv[5]), (d, r)
assert d["bytes_copied"] == r["bytes_copied"] > 0, (d, r)
assert du["garbage_bytes"] <= 0.10 * du["pack_bytes"], du
' "$T/gcdry.json" "$T/s-gc.json" "$T/gcdu.json" "$b" "$(filebytes "$T/s-gc")"
check gc-then-gc ckptctl gc "$T/s-gc"
expect "prune --gc: the kept checkpoints export byte-identical" same_exports "$T/s-gc"

# Time-based retention (borg's rules, UTC) on checkpoints whose manifests record chosen commit
# times (CKPT_TEST_COMMIT_TIME): Monday 2026-01-05 00:00, 01:00, 01:30; Tuesday 00:00, 02:00; the
# next Monday 00:00; the next Tuesday 00:00, 01:00.
t0=$(date -u -d 2026-01-05 +%s)
i=0
for off in 0 3600 5400 86400 93600 604800 691200 694800; do
	i=$((i + 1))
	CKPT_TEST_COMMIT_TIME=$((t0 + off)) "$CKH" import -q "$T/s-time" --step "$i" \
		"$T/m$(( (i % 4) + 1 )).safetensors" || exit 1
done
# srule STORE NAME EXPECTED-KEPT ARGS...: prune a copy of STORE with ARGS; the steps left must be
# EXPECTED-KEPT. rule: on s-time.
srule() {
	local src=$1 name=$2 want=$3
	shift 3
	rm -rf "$T/s-rule"
	cp -a "$src" "$T/s-rule"
	check "$name" ckptctl prune "$T/s-rule" "$@"
	expect "prune $*: kept $want" test "$(steps "$T/s-rule")" = "$want"
}
rule() { srule "$T/s-time" "$@"; }
rule hourly "6 7 8" --keep-hourly 3
rule daily "6 8" --keep-daily 2
rule weekly "5 8" --keep-weekly 2
rule weekly-oldest "1 5 8" --keep-weekly 3
rule daily-weekly "1 5 8" --keep-daily 1 --keep-weekly 2
rule last-hourly "6 7 8" --keep-last 1 --keep-hourly 2
rule hourly-every "2 4 6 7 8" --keep-hourly 3 --keep-every 2
check daily-dry-json ckptctl prune "$T/s-time" --keep-daily 2 --dry-run --json
# --list: every checkpoint with the rule that keeps it, as borg prune --list (first rule wins, the
# n-th it keeps; the oldest kept for want of periods), or that it would go.
check list-dry ckptctl prune "$T/s-time" --keep-last 1 --keep-daily 1 --keep-weekly 3 \
	--keep-every 2 --dry-run --list
expect "prune --list: each kept step has its rule" test \
	"$("$CK" prune "$T/s-time" --keep-last 1 --keep-daily 1 --keep-weekly 3 --keep-every 2 --dry-run --list |
	   sed -n 's/^keeping step \([0-9]*\) (saved [^)]*): /\1 /p' | tr '\n' ';')" = \
	"1 keep-weekly (the oldest);2 keep-every;4 keep-every;5 keep-weekly #1;6 keep-daily #1;8 keep-last #1;"
check usage-list-json ckptctl prune "$T/s-time" --keep-last 1 --list --json
expect "a dry run changes nothing" test "$(steps "$T/s-time")" = "1 2 3 4 5 6 7 8"

# --keep-monthly and --keep-yearly (borg's rules, UTC) across a year boundary, with months that
# have no checkpoint (2025-02, 2025-04, 2025-05: they do not count), and --keep-tag: 2024-11-15
# (tagged best), 2024-12-10 (release), 2024-12-20, 2025-01-05 (release), 2025-01-25, 2025-03-03,
# 2025-06-01 10:00 and 12:00.
i=0
for d in 2024-11-15 2024-12-10 2024-12-20 2025-01-05 2025-01-25 2025-03-03 "2025-06-01 10:00" \
	"2025-06-01 12:00"; do
	i=$((i + 1))
	tag=()
	case $i in 1) tag=(--tag best) ;; 2 | 4) tag=(--tag release) ;; esac
	CKPT_TEST_COMMIT_TIME=$(date -u -d "$d" +%s) "$CKH" import -q "$T/s-cal" --step "$i" \
		"${tag[@]}" "$T/m$(( (i % 4) + 1 )).safetensors" || exit 1
done
# crule NAME EXPECTED-KEPT ARGS...: rule on the store above.
crule() { srule "$T/s-cal" "$@"; }
crule monthly "5 6 8" --keep-monthly 3
crule monthly-all "1 3 5 6 8" --keep-monthly 5
crule monthly-oldest "1 3 5 6 8" --keep-monthly 10
crule yearly "3 8" --keep-yearly 2
crule yearly-oldest "1 3 8" --keep-yearly 3
# 8, the newest of 2025, is kept by --keep-monthly already: 2025 does not count for --keep-yearly,
# which then keeps 3 (2024's newest) and, short of a second year, the oldest.
crule monthly-yearly "1 3 6 8" --keep-monthly 2 --keep-yearly 2
crule daily-monthly "5 6 8" --keep-daily 1 --keep-monthly 2
crule weekly-monthly "1 3 5 6 8" --keep-weekly 1 --keep-daily 2 --keep-monthly 2
crule keep-tag "2 4 8" --keep-last 1 --keep-tag release
crule keep-tags "1 2 4 8" --keep-last 1 --keep-tag release --keep-tag best
crule keep-tag-monthly "2 4 6 8" --keep-monthly 2 --keep-tag release
crule keep-tag-none "8" --keep-last 1 --keep-tag nope
check keep-tag-dry-json ckptctl prune "$T/s-cal" --keep-yearly 1 --keep-tag release \
	--dry-run --json
check list-tag ckptctl prune "$T/s-cal" --keep-monthly 2 --keep-yearly 2 --keep-tag release \
	--keep 5 --dry-run --list
check usage-keep-tag-only ckptctl prune "$T/s-cal" --keep-tag release
check usage-keep-tag-comma ckptctl prune "$T/s-cal" --keep-last 1 --keep-tag a,b
check usage-keep-tag-empty ckptctl prune "$T/s-cal" --keep-last 1 --keep-tag ''
check usage-monthly ckptctl prune "$T/s-cal" --keep-monthly 0
check usage-yearly ckptctl prune "$T/s-cal" --keep-yearly x
expect "usage errors removed nothing" test "$(steps "$T/s-cal")" = "1 2 3 4 5 6 7 8"

# --keep-within counts back from now: checkpoints 10 days, 3 days, 1 day and 1 hour old.
now=$(date -u +%s)
i=0
for age in 864000 259200 86400 3600; do
	i=$((i + 10))
	CKPT_TEST_COMMIT_TIME=$((now - age)) "$CKH" import -q "$T/s-within" --step "$i" \
		"$T/m$(( (i / 10) % 4 + 1 )).safetensors" || exit 1
done
cp -a "$T/s-within" "$T/s-within2"
check within ckptctl prune "$T/s-within" --keep-within 2d
expect "prune --keep-within 2d: 30 and 40 remain" test "$(steps "$T/s-within")" = "30 40"
check within-week ckptctl prune "$T/s-within2" --keep-within 1w --json
expect "prune --keep-within 1w: 20 30 40 remain" test "$(steps "$T/s-within2")" = "20 30 40"

check usage-no-policy ckptctl prune "$STORE"
check usage-noargs ckptctl prune --keep-last 1
check usage-zero ckptctl prune "$STORE" --keep-last 0
check usage-last-value ckptctl prune "$STORE" --keep-last
check usage-last-garbage ckptctl prune "$STORE" --keep-last two
check usage-every ckptctl prune "$STORE" --keep-last 1 --keep-every -5
check usage-keep ckptctl prune "$STORE" --keep-last 1 --keep latest
check usage-extra ckptctl prune "$STORE" "$STORE" --keep-last 1
check usage-option ckptctl prune "$STORE" --keep-last 1 --keep-all
check usage-within ckptctl prune "$STORE" --keep-within 2x
check usage-within-zero ckptctl prune "$STORE" --keep-within 0d
check usage-within-unit ckptctl prune "$STORE" --keep-within d
check usage-daily ckptctl prune "$STORE" --keep-daily 0
check usage-weekly ckptctl prune "$STORE" --keep-weekly many
check usage-gc-only ckptctl prune "$STORE" --keep-last 1 --max-unused 5%
check usage-every-only ckptctl prune "$STORE" --keep-every 10
expect "usage errors removed nothing" test "$(steps "$STORE")" = "100 200 300 400 500 600"
finish
