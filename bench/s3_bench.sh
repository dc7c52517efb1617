#!/usr/bin/env bash
# Upload and download of one object through the S3 backend (build/bench/s3-bench: rmt_s3_ops,
# multipart parts in parallel, parallel ranged GETs) against `aws s3 cp` (Debian's awscli, its
# defaults: 8 MiB parts, 10 requests in flight) to the same radosgw on loopback (tests/s3/rgw.sh).
# Runs interleaved (libckpt and aws alternate, the order swapped every run) and
# prints the medians and the ratios aws / libckpt (above 1: libckpt is faster), also as JSON in
# build/bench/s3-bench.json (for bench/summary.py).
# Not a test. Environment: S3_BENCH_SIZE (default 2G), S3_BENCH_RUNS (default 3), BENCH_DIR
# (the files, default build/bench/work), S3_BENCH_PARALLEL / S3_BENCH_PART (s3-bench's).
# radosgw keeps the objects in RAM (memstore) and does not give that memory back: each run gets
# a fresh cluster (its limit 3 objects and 1 GiB: the OSD blocks writes when full).
set -u
cd "$(dirname "$0")/.."
B=${B:-build}
SIZE=${S3_BENCH_SIZE:-2G}
RUNS=${S3_BENCH_RUNS:-3}
W=${BENCH_DIR:-$B/bench/work}
SB=$PWD/$B/bench/s3-bench
AWS=$(command -v /usr/bin/aws || command -v aws || true)
[ -x "$SB" ] || { echo "s3 bench: $SB is not built (make bench-bins)"; exit 1; }
[ -n "$AWS" ] || { echo "s3 bench: no aws (Debian's awscli, tools/deps.d/bench.bench)"; exit 1; }
bytes=$(numfmt --from=iec "$SIZE")
mib=$((bytes >> 20))
RGW_MEMSTORE_MB=$((mib * 3 + 1024))
. tests/s3/rgw.sh
rgw_require
mkdir -p "$W"
F=$W/s3-bench.src
trap 'rm -f "$F" "$F".back-*; rgw_stop' EXIT
head -c "$bytes" /dev/urandom >"$F"
# A fresh cluster for each run: memstore does not give memory back, even after deletes.
fresh_rgw() {
	rgw_stop
	RGW_NO_TRAP=1 rgw_start 2>/dev/null || exit 1
	"$AWS" --endpoint-url "$RGW_ENDPOINT" s3 mb s3://bench >/dev/null || exit 1
}

ours_put() { "$SB" s3://bench put ours "$F"; }
ours_get() { "$SB" s3://bench get ours "$F.back-ours"; }
# seconds of a command, from bash's clock
timed() {
	local t0=$EPOCHREALTIME
	"$@" >/dev/null || return 1
	awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.3f\n", b - a}'
}
aws_put() { timed "$AWS" --endpoint-url "$RGW_ENDPOINT" s3 cp --only-show-errors "$F" s3://bench/aws; }
aws_get() { timed "$AWS" --endpoint-url "$RGW_ENDPOINT" s3 cp --only-show-errors s3://bench/aws "$F.back-aws"; }

declare -a OP OG AP AG
for ((i = 0; i < RUNS; i++)); do
	fresh_rgw
	if ((i % 2 == 0)); then
		OP[i]=$(ours_put) && AP[i]=$(aws_put) || exit 1
		OG[i]=$(ours_get) && AG[i]=$(aws_get) || exit 1
	else
		AP[i]=$(aws_put) && OP[i]=$(ours_put) || exit 1
		AG[i]=$(aws_get) && OG[i]=$(ours_get) || exit 1
	fi
	cmp -s "$F" "$F.back-ours" || { echo "s3 bench: the download differs from the file"; exit 1; }
	rm -f "$F.back-ours" "$F.back-aws"
	echo "run $((i + 1)): put libckpt ${OP[i]} s, aws ${AP[i]} s; get libckpt ${OG[i]} s, aws ${AG[i]} s"
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
mop=$(median "${OP[@]}") map=$(median "${AP[@]}") mog=$(median "${OG[@]}") mag=$(median "${AG[@]}")
J=$B/bench/s3-bench.json
awk -v s="$mib" -v op="$mop" -v ap="$map" -v og="$mog" -v ag="$mag" -v n="$RUNS" -v j="$J" 'BEGIN {
	printf "{\"s3_bench_mib\": %d, \"s3_bench_runs\": %d, \"s3_put_s\": %.3f, \"aws_put_s\": %.3f, " \
	       "\"s3_get_s\": %.3f, \"aws_get_s\": %.3f, \"s3_put_ratio\": %.3f, \"s3_get_ratio\": %.3f}\n",
	       s, n, op, ap, og, ag, ap / op, ag / og > j
	printf "s3 bench, %d MiB object, radosgw on loopback, medians of %d interleaved runs:\n", s, n
	printf "  upload:   libckpt %6.2f s (%5.0f MiB/s)   aws s3 cp %6.2f s (%5.0f MiB/s)   ratio %.2f\n", op, s / op, ap, s / ap, ap / op
	printf "  download: libckpt %6.2f s (%5.0f MiB/s)   aws s3 cp %6.2f s (%5.0f MiB/s)   ratio %.2f\n", og, s / og, ag, s / ag, ag / og
}'
