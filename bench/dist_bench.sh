#!/bin/sh
# Issue-14 measurement: multi-rank saves into one store (mpirun, bench/mpi/dist-bench.c).
#   1. 4 ranks saving 4 shards of a BENCH_DIST_SIZE (default 2G) state into one store, against
#      fio --numjobs=4 writing the same bytes (each job its own file, O_DIRECT, io_uring, fsync at
#      the end) in the same directory: aggregate GB/s of each and their ratio.
#   3. Asynchronous multi-rank saves: each of the ranks saves its 1/N of a
#      BENCH_DIST_ASYNC_SIZE (default 1G) state with ckpt_save_submit (a save with a
#      communicator); the time it is blocked (begin to wait_snapshot) against one process's
#      ckpt_save_submit of the same per-rank state, alone (the pool holds the state in both;
#      goal: at most 1.1), and against N such one-process saves at once (each its own store),
#      which share the memory bandwidth and cores as the N ranks do: the multi-rank path's own
#      cost.
#   2. A replicated BENCH_DIST_REP_SIZE (default 1G) state on 4 ranks (each replica saves about
#      1/4) against one rank saving it alone: the snapshot time per rank (the part's
#      snapshot_seconds; the mean over the 4 ranks) and its ratio.
#   4. N = 1, 2, 4 ranks (BENCH_DIST_SCALE) saving their 1/N of BENCH_DIST_SIZE into one store,
#      each against fio --numjobs=N on the same directory run as run-bench.sh runs fio for the
#      one-process figure (1 MiB O_DIRECT io_uring writes at depth 32, fsync at the end), each
#      job 1/N of the bytes: dist_shards_gbps_N, dist_fio_numjobs_gbps_N, dist_shards_vs_fio_N
#      (goal >= 0.9). The RANKS figure of 1. is the same at the same N.
#   5. The commit at scale: $B/bench/dist-commit (threads as ranks, no MPI)
#      with 4, 16, 64 and 256 ranks (BENCH_DIST_COMMIT_RANKS) of tiny shards, the median of
#      BENCH_DIST_COMMIT_STEPS (default 5) timed commits after a warm-up save:
#      dist_commit_seconds_N, from every rank's commit call to the last one's return, and
#      dist_begin_seconds_N for their begins (where each rank finds its next pack id).
# Runs interleave (commits, fio and shards per N, replicated, alone, async, single) BENCH_RUNS
# times (default 3); medians are merged
# into $B/bench/results.json as dist_* keys and printed. Each save goes into a fresh store, after a
# small warm-up save. Skips (exit 0) without mpicc, mpirun or fio.
#
# Environment: B (default build), BENCH_DIR (default $B/bench/work), BENCH_RUNS,
# BENCH_DIST_SIZE, BENCH_DIST_REP_SIZE, BENCH_DIST_RANKS (default 4), BENCH_DIST_SCALE (default
# "1 2 4"), BENCH_DIST_COMMIT_RANKS (default "4 16 64 256"), BENCH_DIST_COMMIT_STEPS (default 5).
set -eu
B=${B:-build}
BENCH_DIR=${BENCH_DIR:-$B/bench/work}
BENCH_RUNS=${BENCH_RUNS:-3}
RANKS=${BENCH_DIST_RANKS:-4}
SCALE=${BENCH_DIST_SCALE:-1 2 4}
case " $SCALE " in *" $RANKS "*) ;; *) SCALE="$SCALE $RANKS" ;; esac
COMMIT_RANKS=${BENCH_DIST_COMMIT_RANKS:-4 16 64 256}
COMMIT_STEPS=${BENCH_DIST_COMMIT_STEPS:-5}
COMMIT_BIN=$B/bench/dist-commit
[ -x "$COMMIT_BIN" ] || { echo "dist-bench: $COMMIT_BIN is missing (make bench-bins): commit figures skipped" >&2; COMMIT_RANKS=; }
for t in mpicc mpirun fio python3; do
	command -v $t >/dev/null 2>&1 || { echo "dist-bench: $t is missing; skipped" >&2; exit 0; }
done
bytes() { python3 -c 'import sys; s = sys.argv[1]; u = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
print(int(s[:-1]) * u[s[-1]] if s[-1] in u else int(s))' "$1"; }
SIZE=$(bytes "${BENCH_DIST_SIZE:-2G}")
REP=$(bytes "${BENCH_DIST_REP_SIZE:-1G}")
ASYNC=$(bytes "${BENCH_DIST_ASYNC_SIZE:-1G}")
mkdir -p "$BENCH_DIR" "$B/bench"
W=$BENCH_DIR/dist
TMP=$(mktemp -d)
trap 'rm -rf "$TMP" "$W"' EXIT
mpicc -std=gnu11 -D_GNU_SOURCE -O2 -Iinclude bench/mpi/dist-bench.c -L"$B/lib" -lckpt \
	-Wl,-rpath,"$(cd "$B/lib" && pwd)" -o "$TMP/dist-bench"
# As tests/mpi/t-mpi.sh: one machine, shared memory, quick launches.
export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_plm_rsh_agent=false OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_hwloc_base_binding_policy=none
export HWLOC_COMPONENTS=-gl,-opencl,-pci OMPI_MCA_pml=ob1 OMPI_MCA_mtl=^ofi OMPI_MCA_coll=^hcoll

run_mpi() { # NP MODE BYTES OUT
	rm -rf "$W" && mkdir -p "$W"
	mpirun --allow-run-as-root --oversubscribe -np "$1" "$TMP/dist-bench" "$W/store" "$2" "$3" \
		>"$4" || { echo "dist-bench: mpirun -np $1 $2 failed" >&2; exit 1; }
	rm -rf "$W"
}
i=1
while [ $i -le "$BENCH_RUNS" ]; do
	for n in $COMMIT_RANKS; do
		rm -rf "$W" && mkdir -p "$W"
		"$COMMIT_BIN" "$W/store" "$n" "$COMMIT_STEPS" >"$TMP/commit-$n-$i.json" ||
			{ echo "dist-bench: dist-commit $n ranks failed" >&2; exit 1; }
		rm -rf "$W"
	done
	for n in $SCALE; do
		mkdir -p "$W"
		fio --name=dist-fio --directory="$W" --filename_format='fio.$jobnum' --numjobs="$n" \
		    --size=$((SIZE / n)) --bs=1M --rw=write --ioengine=io_uring --direct=1 --iodepth=32 \
		    --end_fsync=1 --group_reporting --output-format=json --output="$TMP/fio-$n-$i.json" \
		    >/dev/null || { echo "dist-bench: fio failed" >&2; exit 1; }
		run_mpi "$n" shards "$SIZE" "$TMP/shards-$n-$i.json"
	done
	run_mpi "$RANKS" replicated "$REP" "$TMP/rep-$i.json"
	run_mpi 1 replicated "$REP" "$TMP/alone-$i.json"
	run_mpi "$RANKS" async "$ASYNC" "$TMP/async-$i.json"
	run_mpi 1 single $((ASYNC / RANKS)) "$TMP/single-$i.json"
	run_mpi "$RANKS" single $((ASYNC / RANKS)) "$TMP/singles-$i.json"
	echo "dist-bench: run $i done" >&2
	i=$((i + 1))
done

exec python3 - "$TMP" "$BENCH_RUNS" "$B/bench/results.json" "$SIZE" "$REP" "$RANKS" "$ASYNC" \
	"$SCALE" "$COMMIT_RANKS" <<'EOF'
import json, os, statistics, sys
tmp, runs, results = sys.argv[1], int(sys.argv[2]), sys.argv[3]
size, rep, ranks, asz = map(int, sys.argv[4:8])
scale, commit_ranks = [int(x) for x in sys.argv[8].split()], [int(x) for x in sys.argv[9].split()]
med = statistics.median
def line(p):
    with open(p) as f:
        return json.loads(f.read().strip().splitlines()[-1])
def fio_gbps(p):
    with open(p) as f:
        txt = f.read()
    j = json.loads(txt[txt.index("{"):])["jobs"][0]["write"]  # fio may print notes first
    return j["io_bytes"] / (j["runtime"] / 1000.0) / 1e9  # group_reporting: all jobs
fio_n = {n: [fio_gbps(os.path.join(tmp, "fio-%d-%d.json" % (n, i))) for i in range(1, runs + 1)]
         for n in scale}
shards_n = {n: [line(os.path.join(tmp, "shards-%d-%d.json" % (n, i)))["gbps"]
                for i in range(1, runs + 1)] for n in scale}
commit_lines = {n: [line(os.path.join(tmp, "commit-%d-%d.json" % (n, i)))
                    for i in range(1, runs + 1)] for n in commit_ranks}
commit_n = {n: [c["median"] for c in v] for n, v in commit_lines.items()}
begin_n = {n: [c["begin_median"] for c in v] for n, v in commit_lines.items()}
fio, shards = fio_n[ranks], shards_n[ranks]
repl, alone, asyn, single, singles = [], [], [], [], []
for i in range(1, runs + 1):
    r = line(os.path.join(tmp, "rep-%d.json" % i))["snapshot_seconds"]
    repl.append(sum(r) / len(r))
    alone.append(line(os.path.join(tmp, "alone-%d.json" % i))["snapshot_seconds"][0])
    a = line(os.path.join(tmp, "async-%d.json" % i))["blocked_seconds"]
    asyn.append(max(a))  # the training step waits for the slowest rank
    single.append(line(os.path.join(tmp, "single-%d.json" % i))["blocked_seconds"][0])
    singles.append(max(line(os.path.join(tmp, "singles-%d.json" % i))["blocked_seconds"]))
out = {
    "dist_ranks": ranks,
    "dist_state_bytes": size,
    "dist_shards_gbps": med(shards),
    "dist_fio_numjobs_gbps": med(fio),
    "dist_shards_vs_fio": med(shards) / med(fio),
    "dist_replicated_bytes": rep,
    "dist_replicated_snapshot_seconds_per_rank": med(repl),
    "dist_alone_snapshot_seconds": med(alone),
    "dist_replicated_snapshot_speedup": med(alone) / med(repl),
    "dist_async_bytes": asz,
    "dist_async_blocked_seconds": med(asyn),
    "dist_single_async_blocked_seconds": med(single),
    "dist_async_blocked_vs_single": med(asyn) / med(single),
    "dist_singles_async_blocked_seconds": med(singles),
    "dist_async_blocked_vs_singles": med(asyn) / med(singles),
    "dist_scale_ranks": scale,
    "dist_commit_ranks": commit_ranks,
    "dist_runs": {"fio_gbps": fio, "shards_gbps": shards, "replicated_snapshot_seconds": repl,
                  "fio_numjobs_gbps_n": {str(n): v for n, v in fio_n.items()},
                  "shards_gbps_n": {str(n): v for n, v in shards_n.items()},
                  "commit_seconds_n": {str(n): v for n, v in commit_n.items()},
                  "begin_seconds_n": {str(n): v for n, v in begin_n.items()},
                  "alone_snapshot_seconds": alone, "async_blocked_seconds": asyn,
                  "single_async_blocked_seconds": single,
                  "singles_async_blocked_seconds": singles},
}
for n in scale:
    out["dist_shards_gbps_%d" % n] = med(shards_n[n])
    out["dist_fio_numjobs_gbps_%d" % n] = med(fio_n[n])
    out["dist_shards_vs_fio_%d" % n] = med(shards_n[n]) / med(fio_n[n])
for n in commit_ranks:
    out["dist_commit_seconds_%d" % n] = med(commit_n[n])
    out["dist_begin_seconds_%d" % n] = med(begin_n[n])
old = {}
if os.path.exists(results):
    try:
        with open(results) as f:
            old = json.load(f)
    except ValueError:
        old = {}
old.update(out)
with open(results + ".tmp", "w") as f:
    json.dump(old, f, indent=2, sort_keys=True)
os.replace(results + ".tmp", results)
print("dist: %d ranks saving %d shards of %.1f GiB: %.3f GB/s; fio --numjobs=%d: %.3f GB/s; ratio %.2f"
      % (ranks, ranks, size / 2**30, med(shards), ranks, med(fio), med(shards) / med(fio)))
print("dist: replicated %.1f GiB on %d ranks: snapshot %.3f s per rank; one rank alone: %.3f s; %.2fx"
      % (rep / 2**30, ranks, med(repl), med(alone), med(alone) / med(repl)))
print("dist: async, %d ranks of %.0f MiB each: blocked %.3f s (slowest rank); one process's "
      "save_async of the same: %.3f s; ratio %.2f (goal <= 1.1)"
      % (ranks, asz / ranks / 2**20, med(asyn), med(single), med(asyn) / med(single)))
print("dist: async against %d one-process saves at once (sharing the machine as the ranks do): "
      "%.3f s; ratio %.2f" % (ranks, med(singles), med(asyn) / med(singles)))
for n in scale:
    print("dist: %d rank(s) into one store: %.3f GB/s; fio --numjobs=%d --iodepth=32: %.3f GB/s; "
          "ratio %.2f (goal >= 0.9)" % (n, med(shards_n[n]), n, med(fio_n[n]),
                                        med(shards_n[n]) / med(fio_n[n])))
if commit_ranks:
    print("dist: commit of tiny shards: " + ", ".join("%d ranks %.3f s" % (n, med(commit_n[n]))
                                                      for n in commit_ranks))
    print("dist: begin of the same saves: " + ", ".join("%d ranks %.3f s" % (n, med(begin_n[n]))
                                                        for n in commit_ranks))
print("results: %s" % results)
EOF
