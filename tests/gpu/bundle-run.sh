#!/usr/bin/env bash
# The GPU checks of libckpt on a bare GPU server (CUDA driver and torch, no package manager, no
# network, no -dev packages): the run script of `make gpu-bundle` (installed as run.sh at the top
# of the bundle). Runs, each under its own timeout and within 8 minutes in all:
#   1. t-gpu and t-gpu-order against the real CUDA runtime (they must pass, not skip, where a
#      device is present),
#   2. the GPU benchmark (gpu_bench, pool at least the state size),
#   3. the pipeline sweep (ckpt-bench over thread counts up to all cores, host memory) and
#      pipe-sweep (the pipeline's ceiling with a discard engine against the copy+hash floor),
#   4. the Python CUDA comparison against torch.distributed.checkpoint.async_save, where torch
#      has CUDA.
# Every result file goes to OUTDIR; scratch stores go to OUTDIR/work (removed at the end unless
# KEEP_WORK=1). Exits 0 when every step passed or skipped for lack of a GPU, 1 otherwise.
#
# Usage: run.sh OUTDIR
# Environment: GPU_BENCH_GIB (default 4), SWEEP_SIZE (default 1G), PIPE_SWEEP_SIZE (bytes, default
# 1 GiB), PY_BENCH_SIZE (default 2G),
# CKPT_CUDART (a libcudart to use; default: the one torch ships, else the CUDA toolkit's, else
# the system's), PYTHON (default python3).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${1:?usage: run.sh OUTDIR}
mkdir -p "$OUT/work" || exit 1
OUT=$(cd "$OUT" && pwd)
START=$(date +%s)
BUDGET=${BUNDLE_BUDGET_S:-470} # 8 minutes, less a margin for the summary
failed=() skipped=()
PY=${PYTHON:-python3}

say() { printf '\n=== %s  [+%ss]\n' "$*" "$(( $(date +%s) - START ))" | tee -a "$OUT/summary.txt"; }
left() { echo $(( BUDGET - ($(date +%s) - START) )); }
# step NAME LIMIT CMD...: runs CMD with stdout+stderr to OUT/NAME.log under min(LIMIT, time left).
step() {
	local name=$1 lim=$2 l rc
	shift 2
	l=$(left)
	[ "$l" -lt "$lim" ] && lim=$l
	if [ "$lim" -lt 10 ]; then
		say "$name: not run (the 8-minute budget is spent)"
		failed+=("$name (no time left)")
		return
	fi
	say "$name (limit ${lim}s)"
	timeout --kill-after=5 "$lim" "$@" >"$OUT/$name.log" 2>&1 </dev/null
	rc=$?
	tail -n 15 "$OUT/$name.log"
	case $rc in
	0) echo "$name: PASS" | tee -a "$OUT/summary.txt" ;;
	77) echo "$name: SKIP ($(tail -n 1 "$OUT/$name.log"))" | tee -a "$OUT/summary.txt"; skipped+=("$name") ;;
	124|137) echo "$name: TIMEOUT" | tee -a "$OUT/summary.txt"; failed+=("$name (timeout)") ;;
	*) echo "$name: FAIL (exit $rc)" | tee -a "$OUT/summary.txt"; failed+=("$name (exit $rc)") ;;
	esac
}

: >"$OUT/summary.txt"
say "machine"
{
	uname -a
	grep -m1 'model name' /proc/cpuinfo || true
	echo "cores: $(nproc)  memory: $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
	command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi --query-gpu=name,driver_version,memory.total \
		--format=csv 2>&1 || echo "nvidia-smi: not found"
	cat "$HERE/BUILD-INFO" 2>/dev/null
} | tee "$OUT/machine.txt"

# The binaries need the C library they were built against (or newer): say so plainly.
need=$(sed -n 's/^needs glibc: //p' "$HERE/BUILD-INFO" 2>/dev/null)
have=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
if [ -n "$need" ] && [ -n "$have" ] &&
   [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -n 1)" != "$need" ]; then
	echo "run.sh: this machine has glibc $have; the bundle needs $need or newer" | tee -a "$OUT/summary.txt"
	exit 1
fi

# The bundle's libraries first; then a CUDA runtime for the provider (which dlopens
# libcudart.so.13 or .12): torch's, else the toolkit's, else whatever the loader finds.
export LD_LIBRARY_PATH=$HERE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
HAVE_TORCH_CUDA=0
if command -v "$PY" >/dev/null 2>&1 &&
   "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
	HAVE_TORCH_CUDA=1
fi
if [ -z "${CKPT_CUDART:-}" ]; then
	for d in $("$PY" -c 'import os, nvidia.cuda_runtime as m; print(os.path.join(list(m.__path__)[0], "lib"))' 2>/dev/null) \
		 /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
		if ls "$d"/libcudart.so.1[23] >/dev/null 2>&1; then
			export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$d
			break
		fi
	done
fi
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH" | tee -a "$OUT/machine.txt"
for f in "$HERE"/bin/* "$HERE"/lib/libckpt*.so*; do
	if ldd "$f" 2>&1 | grep -q 'not found'; then
		ldd "$f"
		failed+=("libraries of $(basename "$f")")
	fi
done

export CKPT_CUDA_MODULE=$HERE/lib/libckpt-cuda.so.0
export CKPT_TEST_DIR=$OUT/work
export CKPT_TEST_REAL_CUDA=1

step t-gpu 120 "$HERE/bin/t-gpu"
step t-gpu-order 120 "$HERE/bin/t-gpu-order"
gib=${GPU_BENCH_GIB:-4}
pool_mib=$(awk -v g="$gib" 'BEGIN {printf "%d", g * 1024 + 64}')
step gpu_bench 120 "$HERE/bin/gpu_bench" --gib "$gib" --pool-mib "$pool_mib" --dir "$OUT/work" \
	--json "$OUT/gpu_bench.json"

# The pipeline sweep: host-memory saves at 1, half and all cores (one run each).
export HERE OUT
step pipeline-sweep 120 bash -c '
	n=$(nproc)
	for t in $(printf "%s\n" 1 $((n / 2)) "$n" | sort -nu); do
		[ "$t" -ge 1 ] || continue
		mkdir -p "$OUT/work/sweep-$t"
		echo "--- threads $t"
		"$HERE/bin/ckpt-bench" --dir "$OUT/work/sweep-$t" --size "${SWEEP_SIZE:-1G}" --runs 1 \
			--threads "$t" >"$OUT/sweep-threads-$t.json" || exit 1
		cat "$OUT/sweep-threads-$t.json"
		rm -rf "$OUT/work/sweep-$t"
	done'
# The pipeline's ceiling (a discard I/O engine) against the copy+hash floor at 1, 2, half and all
# cores (bench/pipe-sweep, issue 13).
step pipe-sweep 90 bash -c '
	n=$(nproc)
	"$HERE/bin/pipe-sweep" --dir "$OUT/work" --size "${PIPE_SWEEP_SIZE:-1073741824}" --runs 3 \
		--threads "$(printf "%s\n" 1 2 $((n / 2)) "$n" | sort -nu | paste -sd, -)" \
		>"$OUT/pipe-sweep.json" && cat "$OUT/pipe-sweep.json"'


if [ "$HAVE_TORCH_CUDA" = 1 ]; then
	export CKPT_LIBRARY=$HERE/lib/libckpt.so.0
	step python-cuda 150 env B="$OUT/work/py" BENCH_DIR="$OUT/work" BENCH_SIZE="${PY_BENCH_SIZE:-2G}" \
		BENCH_RUNS=1 PYTHONPATH="$HERE/python" "$PY" "$HERE/bench/python/torch_vs_ckpt.py"
	[ -f "$OUT/work/py/bench/results.json" ] && cp "$OUT/work/py/bench/results.json" "$OUT/python-results.json"
else
	say "python-cuda: SKIP (no Python with CUDA-enabled torch)"
	skipped+=("python-cuda")
fi

[ "${KEEP_WORK:-0}" = 1 ] || rm -rf "$OUT/work"
say "done in $(( $(date +%s) - START ))s"
{
	echo "skipped: ${skipped[*]:-none}"
	echo "failed: ${failed[*]:-none}"
} | tee -a "$OUT/summary.txt"
[ ${#failed[@]} -eq 0 ]
