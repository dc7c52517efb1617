#!/bin/sh
# Driver of `make bench`: the device's limits (fio) and ckpt-bench, alternating run by run, on ONE
# directory; writes $B/bench/results.json (merged: keys owned by other benchmarks are kept) and prints a table.
#
# Environment:
#   B                  build directory (default build)
#   BENCH_DIR          directory to test (default $B/bench/work); files are removed afterwards
#   BENCH_SIZE         state size, K/M/G binary suffixes (default 2G)
#   BENCH_RUNS         repetitions, medians reported (default 3)
#   BENCH_THREADS, BENCH_QUEUE_DEPTH, BENCH_IO_ENGINE (auto|io_uring|psync), BENCH_IO_SIZE,
#   BENCH_CHUNK_SIZE, BENCH_POOL_SIZE   libckpt options (default: the library's; pool: state size)
#   BENCH_ARGS         more ckpt-bench options, e.g. "--sync"
#   BENCH_STRICT=1     exit 1 when a target is missed
set -eu

# One point of the fio sweep: rw, block size, queue depth, jobs (each on its own file,
# SWEEP_BYTES in all, fsync at the end), JSON into $5; the files are removed after a read.
fio_point() {
	[ "$1" = write ] && rm -f "$BENCH_DIR"/ckpt-sweep.*
	fio --name="sweep" --directory="$BENCH_DIR" --filename_format='ckpt-sweep.$jobnum' \
	    --size=$((SWEEP_BYTES / $4)) --bs="$2" --rw="$1" --ioengine=io_uring \
	    --direct=1 --iodepth="$3" --numjobs="$4" --group_reporting --end_fsync=1 \
	    --output-format=json --output="$5" >/dev/null ||
		{ echo "run-bench: fio sweep $1 bs=$2 qd=$3 jobs=$4 failed" >&2; exit 1; }
	[ "$1" = read ] && rm -f "$BENCH_DIR"/ckpt-sweep.*
	return 0
}

# The sweep (once, before the first run): block size 1-16 MiB x queue depth 1-32 x 1-2 jobs,
# write then read at each point; the BEST_N best points of each direction go to best-RW.txt and
# are measured again in every --fio-run. BENCH_FIO_SWEEP=0 skips it.
if [ "${1:-}" = --fio-sweep ]; then
	for bs in 1M 4M 16M; do for qd in 1 4 32; do for nj in 1 2; do
		for rw in write read; do
			fio_point "$rw" "$bs" "$qd" "$nj" "$TMP/sweep-$rw-$bs-$qd-$nj.json"
		done
	done; done; done
	python3 - "$TMP" "${BENCH_FIO_BEST_N:-4}" <<'EOF'
import json, os, sys
tmp, n = sys.argv[1], int(sys.argv[2])
for rw in ("write", "read"):
    pts = []
    for name in os.listdir(tmp):
        if name.startswith("sweep-%s-" % rw):
            with open(os.path.join(tmp, name)) as f:
                txt = f.read()
            j = json.loads(txt[txt.index("{"):])["jobs"][0]
            pts.append((j[rw]["bw_bytes"], name[len("sweep-%s-" % rw):-len(".json")].split("-")))
    pts.sort(reverse=True)
    with open(os.path.join(tmp, "best-%s.txt" % rw), "w") as f:
        for _, p in pts[:n]:
            f.write(" ".join(p) + "\n")
EOF
	echo "bench: fio sweep done (best: write $(tr '\n' ' ' <"$TMP/best-write.txt")/ read $(tr '\n' ' ' <"$TMP/best-read.txt"))" >&2
	exit 0
fi

# One fio repetition (write then read): run by ckpt-bench before each of its own repetitions
# (--before-run), so that the device's limit is measured next to each save and restore.
if [ "${1:-}" = --fio-run ]; then
	i=${CKPT_BENCH_RUN:?}
	for rw in write read; do
		[ "$rw" = write ] && rm -f "$FIOFILE"
		fio --name="ckpt-bench-$rw" --filename="$FIOFILE" --size="$SIZE_BYTES" --bs=1M \
		    --rw="$rw" --ioengine=io_uring --direct=1 --iodepth=32 --numjobs=1 \
		    --end_fsync=1 --output-format=json --output="$TMP/fio-$rw-$i.json" >/dev/null ||
			{ echo "run-bench: fio $rw failed:" >&2; cat "$TMP/fio-$rw-$i.json" >&2; exit 1; }
	done
	rm -f "$FIOFILE"
	# The best configurations of the sweep (fio_*_best_gbps, chosen by --fio-sweep before the
	# first run), measured again in every run, so that a best figure is a median of interleaved
	# runs like libckpt's, not the luckiest of single samples on a disk that swings.
	for rw in write read; do
		[ -s "$TMP/best-$rw.txt" ] || continue
		while read -r bs qd nj; do
			fio_point "$rw" "$bs" "$qd" "$nj" "$TMP/best-$rw-$bs-$qd-$nj-$i.json"
		done <"$TMP/best-$rw.txt"
	done
	echo "bench: fio run $i done" >&2
	exit 0
fi

B=${B:-build}
BENCH_DIR=${BENCH_DIR:-$B/bench/work}
BENCH_SIZE=${BENCH_SIZE:-2G}
BENCH_RUNS=${BENCH_RUNS:-3}
OUTDIR=$B/bench
RESULTS=$OUTDIR/results.json
BIN=$OUTDIR/ckpt-bench

[ -x "$BIN" ] || { echo "run-bench: $BIN is missing; run 'make bench'" >&2; exit 1; }
command -v fio >/dev/null 2>&1 || { echo "run-bench: fio is missing (sh tools/install-deps.sh test)" >&2; exit 1; }
command -v python3 >/dev/null 2>&1 || { echo "run-bench: python3 is missing" >&2; exit 1; }
mkdir -p "$BENCH_DIR" "$OUTDIR"

# Size in bytes, a multiple of 1 MiB (fio's block size).
SIZE_BYTES=$(python3 - "$BENCH_SIZE" <<'EOF'
import re, sys
m = re.fullmatch(r'\s*(\d+)\s*([kKmMgGtT]?)(i?[bB])?\s*', sys.argv[1])
if not m:
    sys.exit("run-bench: bad BENCH_SIZE '%s' (e.g. 256M, 2G)" % sys.argv[1])
n = int(m.group(1)) * 1024 ** " KMGT".index((m.group(2) or " ").upper())
print(n // (1 << 20) * (1 << 20))
EOF
)
[ "$SIZE_BYTES" -ge 1048576 ] || { echo "run-bench: BENCH_SIZE must be at least 1M" >&2; exit 1; }

TMP=$(mktemp -d "$OUTDIR/.run.XXXXXX")
FIOFILE=$BENCH_DIR/ckpt-bench-fio.dat
cleanup() { rm -f "$FIOFILE"; rm -rf "$TMP" "$BENCH_DIR/ckpt-bench-store"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

LOAD_START=$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo 0)
echo "bench: dir $BENCH_DIR ($(df -h "$BENCH_DIR" | awk 'NR==2 {print $1 ", " $4 " free"}')), state $SIZE_BYTES bytes, $BENCH_RUNS run(s)"

# fio (sequential 1 MiB O_DIRECT writes to a new file, fsync at the end as a save does, then
# reads, io_uring at depth 32: the device's limit) and libckpt, alternating run by run.
# The fio sweep's points each move min(state, 1 GiB): 18 points must not take longer than the rest.
SWEEP_BYTES=$(( SIZE_BYTES < 1073741824 ? SIZE_BYTES : 1073741824 ))
export FIOFILE SIZE_BYTES TMP SWEEP_BYTES BENCH_DIR BENCH_RUNS
set -- --dir "$BENCH_DIR" --size "$SIZE_BYTES" --runs "$BENCH_RUNS"
[ -n "${BENCH_THREADS:-}" ] && set -- "$@" --threads "$BENCH_THREADS"
[ -n "${BENCH_QUEUE_DEPTH:-}" ] && set -- "$@" --queue-depth "$BENCH_QUEUE_DEPTH"
[ -n "${BENCH_IO_ENGINE:-}" ] && set -- "$@" --io-engine "$BENCH_IO_ENGINE"
[ -n "${BENCH_IO_SIZE:-}" ] && set -- "$@" --io-size "$BENCH_IO_SIZE"
[ -n "${BENCH_CHUNK_SIZE:-}" ] && set -- "$@" --chunk-size "$BENCH_CHUNK_SIZE"
[ -n "${BENCH_POOL_SIZE:-}" ] && set -- "$@" --pool-size "$BENCH_POOL_SIZE"
[ "${BENCH_FIO_SWEEP:-1}" != 0 ] && sh "$0" --fio-sweep
# shellcheck disable=SC2086
"$BIN" "$@" --before-run "sh '$0' --fio-run" ${BENCH_ARGS:-} >"$TMP/ckpt.json"

# 2b. The pipeline's ceiling (writes discarded) against one thread's copy + hash, at 1, 2 and all
# threads (bench/pipe-sweep; README "Pipeline ceiling"). On at most 1 GiB of the state.
if [ -x "$OUTDIR/pipe-sweep" ]; then
	"$OUTDIR/pipe-sweep" --dir "$BENCH_DIR" --size "$SWEEP_BYTES" --runs "$BENCH_RUNS" >"$TMP/pipe.json" ||
		{ echo "run-bench: pipe-sweep failed" >&2; exit 1; }
fi

# 3. Merge into results.json and print the table.
LOAD_END=$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo 0)
python3 - "$TMP" "$RESULTS" "$BENCH_RUNS" "$BENCH_DIR" "${BENCH_STRICT:-0}" "$LOAD_START" "$LOAD_END" <<'EOF'
import json, os, statistics, sys, time
tmp, results, runs, bdir, strict = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5] == "1"
load = (float(sys.argv[6]), float(sys.argv[7]))

def fio_bw(rw):
    v = []
    for i in range(1, runs + 1):
        with open(os.path.join(tmp, "fio-%s-%d.json" % (rw, i))) as f:
            txt = f.read()
        d = json.loads(txt[txt.index("{"):])  # fio may print notes before the JSON
        j = d["jobs"][0]
        if j.get("error"):
            sys.exit("run-bench: fio %s reported error %s" % (rw, j["error"]))
        v.append(j[rw]["bw_bytes"] / 1e9)
    return v

with open(os.path.join(tmp, "ckpt.json")) as f:
    ck = json.load(f)
fw, fr = fio_bw("write"), fio_bw("read")

def fio_json_bw(name, rw):
    with open(os.path.join(tmp, name)) as f:
        txt = f.read()
    j = json.loads(txt[txt.index("{"):])["jobs"][0]
    if j.get("error"):
        sys.exit("run-bench: fio %s reported error %s" % (name, j["error"]))
    return j[rw]["bw_bytes"] / 1e9

def fio_best(rw):
    """The sweep's best configurations, each the median of its runs (interleaved with
    libckpt's); also the best single sample of the sweep and of those runs, the figure this
    bench reported before (a maximum of noisy samples, biased upward against medians)."""
    runs_of, sample, sweep = {}, None, {}
    for name in sorted(os.listdir(tmp)):
        for pre in ("sweep-%s-" % rw, "best-%s-" % rw):
            if name.startswith(pre):
                bw = fio_json_bw(name, rw)
                sample = bw if sample is None else max(sample, bw)
                if pre.startswith("sweep"):
                    sweep[name[len(pre):-len(".json")]] = round(bw, 4)
                if pre.startswith("best"):
                    at = name[len(pre):-len(".json")].rsplit("-", 1)[0]
                    runs_of.setdefault(at, []).append(bw)
    if not runs_of:
        return None, None, sample, {}, sweep
    med = {at: statistics.median(v) for at, v in runs_of.items()}
    at = max(med, key=med.get)
    return med[at], at, sample, {k: [round(x, 4) for x in v] for k, v in runs_of.items()}, sweep
new = dict(ck)
new["fio_write_gbps"] = round(statistics.median(fw), 4)
new["fio_read_gbps"] = round(statistics.median(fr), 4)
new.setdefault("ckpt_bench_samples", {})["fio_write_gbps"] = [round(x, 4) for x in fw]
new["ckpt_bench_samples"]["fio_read_gbps"] = [round(x, 4) for x in fr]
new["fio_engine"] = "io_uring"
for rw in ("write", "read"):
    best, at, sample, per, sweep = fio_best(rw)
    new["ckpt_bench_samples"]["fio_%s_sweep" % rw] = sweep  # the sweep's single samples
    base = statistics.median(fw if rw == "write" else fr)
    if best is not None:
        # never below the per-run figure (1M-32-1, also a point of the sweep), both medians
        if base > best:
            best, at = base, "1M-32-1"
        new["fio_%s_best_gbps" % rw] = round(best, 4)
        new["fio_%s_best_at" % rw] = at  # bs-iodepth-jobs
        new["ckpt_bench_samples"]["fio_%s_best" % rw] = per
    if sample is not None:
        new["fio_%s_best_sample_gbps" % rw] = round(max(sample, max(fw if rw == "write" else fr)), 4)
pipe = os.path.join(tmp, "pipe.json")
if os.path.exists(pipe):
    with open(pipe) as f:
        ps = json.load(f)
    new["floor_copy_hash_gbps"] = ps["floor_copy_hash_gbps"]
    new["ceiling_save_gbps"] = ps["ceiling_save_gbps"]
    new["ceiling_threads"] = ps["threads"]
    new["ceiling_sweep"] = ps["ceiling_sweep"]
    new["ceiling_vs_threads_x_floor"] = round(ps["ceiling_save_gbps"] / (ps["threads"] * ps["floor_copy_hash_gbps"]), 4)
new["bench_dir"] = os.path.abspath(bdir)
new["bench_time"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
new["cpus"] = os.cpu_count()
new["load_avg_start"], new["load_avg_end"] = load

def ratio(a, b):
    return round(new[a] / new[b], 4) if new.get(b) else None

new["save_vs_fio"] = ratio("full_save_gbps", "fio_write_gbps")
new["restore_vs_fio"] = ratio("restore_gbps", "fio_read_gbps")
new["incr5_vs_full"] = ratio("incr5_save_seconds", "full_save_seconds")
new["snapshot_vs_memcpy"] = ratio("snapshot_seconds", "memcpy_seconds")
new["save_vs_fio_best"] = ratio("full_save_gbps", "fio_write_best_gbps")
new["restore_vs_fio_best"] = ratio("restore_gbps", "fio_read_best_gbps")
new["save_vs_fio_best_sample"] = ratio("full_save_gbps", "fio_write_best_sample_gbps")
new["restore_vs_fio_best_sample"] = ratio("restore_gbps", "fio_read_best_sample_gbps")

old = {}
if os.path.exists(results):
    try:
        with open(results) as f:
            old = json.load(f)
        if not isinstance(old, dict):
            old = {}
    except ValueError:
        print("run-bench: %s is not valid JSON; rewriting it" % results, file=sys.stderr)
        old = {}
old.update(new)
with open(results + ".tmp", "w") as f:
    json.dump(old, f, indent=2, sort_keys=True)
    f.write("\n")
os.replace(results + ".tmp", results)

rows = [
    # metric, value, unit, ratio key, target text, test
    ("fio write", "fio_write_gbps", "GB/s", None, "", None),
    ("fio read", "fio_read_gbps", "GB/s", None, "", None),
    ("memcpy (pinned)", "memcpy_gbps", "GB/s", None, "", None),
    ("full save", "full_save_gbps", "GB/s", "save_vs_fio", ">= 0.90 x fio write", lambda r: r >= 0.9),
    ("restore", "restore_gbps", "GB/s", "restore_vs_fio", ">= 0.90 x fio read", lambda r: r >= 0.9),
    ("incremental 5%", "incr5_save_seconds", "s", "incr5_vs_full", "<= 0.15 x full save", lambda r: r <= 0.15),
    ("snapshot", "snapshot_seconds", "s", "snapshot_vs_memcpy", "<= 1.20 x memcpy", lambda r: r <= 1.2),
    ("fio write best", "fio_write_best_gbps", "GB/s", None, "", None),
    ("fio read best", "fio_read_best_gbps", "GB/s", None, "", None),
    ("fio write max", "fio_write_best_sample_gbps", "GB/s", None, "", None),
    ("fio read max", "fio_read_best_sample_gbps", "GB/s", None, "", None),
    ("save vs best", "full_save_gbps", "GB/s", "save_vs_fio_best", ">= 0.90 x best write", lambda r: r >= 0.9),
    ("restore vs best", "restore_gbps", "GB/s", "restore_vs_fio_best", ">= 0.95 x best read", lambda r: r >= 0.95),
    ("copy+hash floor", "floor_copy_hash_gbps", "GB/s", None, "", None),
    ("pipe ceiling", "ceiling_save_gbps", "GB/s", "ceiling_vs_threads_x_floor", ">= 0.80 x thr x floor", lambda r: r >= 0.8),
]
rows = [r for r in rows if r[1] in new]  # parts that did not run (no sweep, no pipe-sweep)
print()
print("libckpt %s: %.2f GiB state, %d tensors, %d run(s) (medians); engine %s, O_DIRECT %s, %s threads, %s API"
      % (new.get("library_version"), new["state_bytes"] / 2**30, new.get("tensors", 0), runs,
         new.get("engine") or "?", "yes" if new.get("direct_io") else "no", new.get("threads") or "?",
         "async" if new.get("async") else "sync commit"))
print("full save %.3f s, memcpy %.3f s" % (new["full_save_seconds"], new["memcpy_seconds"]))
print("%-16s %10s %-5s %8s  %-22s %s" % ("metric", "value", "", "ratio", "target", "result"))
missed = 0
for name, key, unit, rkey, target, test in rows:
    v = new[key]
    if rkey is None:
        print("%-16s %10.3f %-5s" % (name, v, unit))
        continue
    r = new[rkey]
    ok = r is not None and test(r)
    missed += not ok
    print("%-16s %10.3f %-5s %8s  %-22s %s" % (name, v, unit, "-" if r is None else "%.3f" % r,
                                                target, "PASS" if ok else "MISS"))
if max(load) > (os.cpu_count() or 1) / 2:
    print("note: load average %.1f / %.1f (start / end) on %d CPUs: other processes shared the machine, "
          "the figures are noisy" % (load[0], load[1], os.cpu_count() or 1))
print("results: %s" % results)
if strict and missed:
    sys.exit(1)
EOF
