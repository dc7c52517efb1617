#!/usr/bin/env bash
# A checkpoint to S3 and back against `aws s3 cp` (Debian's awscli, its defaults:
# 8 MiB parts, 10 requests in flight) to the same radosgw on loopback (tests/s3/rgw.sh).
#
# The checkpoint: bench/remote-bench saves BENCH_S3_SIZE (default 2G) of incompressible tensors
# into a local store (the packs a real save makes: 1 GiB each by default). Each run, on a fresh
# radosgw (its memstore keeps what was deleted; a fresh one per run never fills) and fresh bucket
# prefixes:
#   upload    `ckptctl push STORE` against `aws s3 cp --recursive STORE` (the same bytes: every
#             file of the store directory)
#   download  `ckptctl pull` into a missing store (the node-loss path: the store is created from
#             the remote's, every record checked, fdatasynced) against `aws s3 cp --recursive`
#             of the aws copy into an empty directory (no check, no sync; a sync after each
#             transfer, not timed, so that the next one does not pay for its writeback)
#   restore   bench/remote-bench restore: an empty store bound to the remote, its checkpoint
#             read straight from the remote into memory without a pull (shown, no target)
# libckpt and aws alternate, the order swapped every run; the objects are deleted after each run;
# a first warm-up run is not counted (BENCH_S3_WARMUP=0: none). Then once, on a fresh radosgw:
# step 1 pushed, 5% of its chunks changed and saved as step 2, step 2 pushed: the bytes that
# push sent against the bytes the save wrote locally (goal <= 1.05).
# Medians of BENCH_RUNS (default 3) merged into $B/bench/results.json as remote_* (see
# bench/README.md); the ratios are aws / libckpt seconds (above 1: libckpt is faster).
# Skips (exit 0, saying why) without awscli or the radosgw packages; BENCH_STRICT=1 fails then.
# Environment: B, BENCH_DIR (default $B/bench/work), BENCH_RUNS, BENCH_S3_SIZE, BENCH_S3_WARMUP.
set -u
cd "$(dirname "$0")/.." || exit 1
B=${B:-build}
SIZE=${BENCH_S3_SIZE:-2G}
RUNS=${BENCH_RUNS:-3}
W=${BENCH_DIR:-$B/bench/work}/remote-bench
RB=$PWD/$B/bench/remote-bench
CK=$PWD/$B/bin/ckptctl
AWS=$(command -v /usr/bin/aws || command -v aws || true)
RESULTS=$B/bench/results.json

skip() {
	echo "remote bench: skipped: $*"
	[ "${BENCH_STRICT:-0}" = 1 ] && exit 1
	exit 0
}
[ -x "$RB" ] && [ -x "$CK" ] || skip "$RB or $CK is not built (make all bench-bins)"
[ -n "$AWS" ] || skip "no aws command (Debian's awscli: tools/deps.d/bench.bench)"
. tests/s3/rgw.sh
why=$(rgw_require) || skip "${why#skip: }"
bytes=$(numfmt --from=iec "$SIZE") || exit 1
mib=$((bytes >> 20))
((mib % 64 == 0)) || { echo "remote bench: BENCH_S3_SIZE must be a multiple of 64 MiB"; exit 1; }
# One run holds two copies of the checkpoint (libckpt's and aws's) in radosgw's RAM.
export RGW_MEMSTORE_MB=$((mib * 2 + 1024))
load_start=$(cut -d' ' -f1 /proc/loadavg)

rm -rf "$W" && mkdir -p "$W" || exit 1
trap 'rgw_stop; rm -rf "$W"' EXIT
"$RB" save "$W/src" "$bytes" || exit 1
store_bytes=$(du -sb "$W/src" | cut -f1)
npacks=$(ls "$W/src/packs" | wc -l)
echo "remote bench: a $mib MiB checkpoint ($npacks packs, $store_bytes bytes in the store)," \
	"radosgw on loopback, $RUNS runs, load average $load_start"

fresh_rgw() {
	rgw_stop
	RGW_NO_TRAP=1 rgw_start 2>/dev/null || { echo "remote bench: radosgw did not start"; exit 1; }
	aws_ s3 mb s3://bench >/dev/null || exit 1
}
aws_() { "$AWS" --endpoint-url "$RGW_ENDPOINT" "$@"; } # Debian's aws 2.9 ignores AWS_ENDPOINT_URL
# seconds of a command, from bash's clock, then the same with the sync after it: so that no
# transfer pays for the writeback of the one before (aws leaves its download dirty in the page
# cache), and aws's download made durable as a pull is ("A B": without, with the sync)
timed() {
	local t0=$EPOCHREALTIME t1
	"$@" >/dev/null || { echo "remote bench: failed: $*" >&2; return 1; }
	t1=$EPOCHREALTIME
	sync
	awk -v a="$t0" -v b="$t1" -v c="$EPOCHREALTIME" 'BEGIN {printf "%.3f %.3f\n", b - a, c - a}'
}
up_ours() { timed "$CK" push "$W/src" --remote "s3://bench/$P/ours" --no-progress; }
up_aws() { timed aws_ s3 cp --recursive --only-show-errors "$W/src" "s3://bench/$P/aws/"; }
down_ours() { rm -rf "$W/dst"; timed "$CK" pull "$W/dst" --remote "s3://bench/$P/ours" --no-progress; }
down_aws() { rm -rf "$W/adst"; timed aws_ s3 cp --recursive --only-show-errors "s3://bench/$P/aws/" "$W/adst/"; }

# Both copies back are the store's bytes (not timed).
check_copies() {
	local f
	for f in "$W"/src/packs/*.pack; do
		cmp -s "$f" "$W/dst/packs/${f##*/}" || { echo "remote bench: pulled ${f##*/} differs"; exit 1; }
		cmp -s "$f" "$W/adst/packs/${f##*/}" || { echo "remote bench: aws's ${f##*/} differs"; exit 1; }
	done
	rm -rf "$W/dst" "$W/adst" "$W/rst"
}

# One run: the four transfers interleaved (order by $1), the restore, the check, the cleanup.
one_run() {
	P=run$1-$$-$RANDOM
	fresh_rgw
	if (($1 % 2 == 0)); then
		u1=$(up_ours) && u2=$(up_aws) && d1=$(down_ours) && d2=$(down_aws) || exit 1
	else
		u2=$(up_aws) && u1=$(up_ours) && d2=$(down_aws) && d1=$(down_ours) || exit 1
	fi
	rm -rf "$W/rst"
	r1=$("$RB" restore "$W/rst" "s3://bench/$P/ours") || exit 1
	sync
	check_copies
	aws_ s3 rm --recursive --only-show-errors "s3://bench/$P/" || exit 1
}

declare -a UO UA DO DA DS RO
if [ "${BENCH_S3_WARMUP:-1}" = 1 ]; then
	one_run 1
	echo "warm-up: push ${u1% *} s, aws up ${u2% *} s; pull ${d1% *} s, aws down ${d2% *} s;" \
		"restore $r1 s (not counted)"
fi
for ((i = 0; i < RUNS; i++)); do
	one_run "$i"
	UO[i]=${u1% *} UA[i]=${u2% *} DO[i]=${d1% *} DA[i]=${d2% *} DS[i]=${d2#* } RO[i]=$r1
	echo "run $((i + 1)): push ${UO[i]} s, aws up ${UA[i]} s; pull ${DO[i]} s, aws down ${DA[i]} s" \
		"(${DS[i]} s with its sync); restore $r1 s" \
		"(load $(cut -d' ' -f1 /proc/loadavg))"
done

# The 5%-changed checkpoint: what its push sends against what its save wrote.
fresh_rgw
P=incr-$$
"$CK" push "$W/src" 1 --remote "s3://bench/$P" --no-progress >/dev/null || exit 1
new_bytes=$("$RB" change "$W/src" "$bytes" 5 | python3 -c 'import json,sys; print(json.load(sys.stdin)["new_bytes"])') || exit 1
sent=$("$CK" push "$W/src" 2 --remote "s3://bench/$P" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["bytes_sent"])') || exit 1
aws_ s3 rm --recursive --only-show-errors "s3://bench/$P/"
rgw_stop

load_end=$(cut -d' ' -f1 /proc/loadavg)
python3 - "$RESULTS" "$mib" "$npacks" "$load_start" "$load_end" "$new_bytes" "$sent" \
	"${UO[*]}" "${UA[*]}" "${DO[*]}" "${DA[*]}" "${RO[*]}" "${DS[*]}" <<'EOF'
import json, os, statistics, sys
path, mib, npacks, l0, l1, new, sent = sys.argv[1:8]
uo, ua, do, da, ro, ds = ([float(x) for x in a.split()] for a in sys.argv[8:14])
med = statistics.median
r = {
    "remote_bench_mib": int(mib), "remote_bench_packs": int(npacks), "remote_bench_runs": len(uo),
    "remote_push_seconds": med(uo), "aws_upload_seconds": med(ua),
    "remote_pull_seconds": med(do), "aws_download_seconds": med(da),
    "remote_restore_seconds": med(ro), "aws_download_sync_seconds": med(ds),
    "remote_download_vs_aws_sync": med(ds) / med(do),
    "remote_upload_vs_aws": med(ua) / med(uo), "remote_download_vs_aws": med(da) / med(do),
    "remote_restore_vs_aws_download": med(da) / med(ro),
    "remote_incr5_new_bytes": int(new), "remote_incr5_bytes_sent": int(sent),
    "remote_incr5_sent_vs_new": int(sent) / int(new),
    "remote_incr5_sent_mib": int(sent) / 2**20, "remote_incr5_new_mib": int(new) / 2**20,
    "remote_load_avg_start": float(l0), "remote_load_avg_end": float(l1),
    "remote_bench_samples": {"push": uo, "aws_upload": ua, "pull": do, "aws_download": da,
                             "restore": ro, "aws_download_sync": ds},
}
res = {}
try:
    with open(path) as f:
        res = json.load(f)
except (OSError, ValueError):
    pass
res.update(r)
os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
with open(path + ".tmp", "w") as f:
    json.dump(res, f, indent=2, sort_keys=True)
os.replace(path + ".tmp", path)
s = r["remote_bench_mib"]
print("remote bench, %d MiB checkpoint, medians of %d interleaved runs (load %s -> %s):"
      % (s, len(uo), l0, l1))
for what, a, b in (("upload", med(uo), med(ua)), ("download", med(do), med(da))):
    print("  %-9s libckpt %6.2f s (%5.0f MiB/s)   aws s3 cp %6.2f s (%5.0f MiB/s)   ratio %.2f"
          % (what + ":", a, s / a, b, s / b, b / a))
print("  download against aws s3 cp + sync (as durable as a pull): %.2f s, ratio %.2f"
      % (med(ds), med(ds) / med(do)))
print("  restore from the remote without pull: %.2f s (%.0f MiB/s)" % (med(ro), s / med(ro)))
print("  5%%-changed push: %d bytes sent for %d new bytes: %.3f x" % (int(sent), int(new),
                                                                      int(sent) / int(new)))
print("  merged into %s" % path)
EOF
