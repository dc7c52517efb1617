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
# KEEP_WORK=1). summary.txt names every step with its outcome, then the figures of every result
# file. Exits 0 when every step passed or skipped for lack of a GPU, 1 otherwise: where
# `nvidia-smi -L` lists a GPU, a GPU step that skips (no runtime found, no device seen, torch
# without CUDA) is a failure, never a pass that tested nothing.
#
# Usage: run.sh OUTDIR
# Environment: GPU_BENCH_GIB (default 4), SWEEP_SIZE (default 1G), PIPE_SWEEP_SIZE (bytes, default
# 1 GiB), PY_BENCH_SIZE (default 2G),
# CKPT_CUDART (a directory holding the libcudart to use; default: the one torch loads, else the
# CUDA 13 or 12 wheels' (nvidia/cu13/lib, nvidia/cuda_runtime/lib), else the CUDA toolkit's, else
# the system's: cudart-dirs.sh), PYTHON (default python3), BUNDLE_STEPS (the names of the steps
# to run, blank-separated; default all).
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
GPU_STEPS=" t-gpu t-gpu-order gpu_bench python-cuda "
selected() { [ -z "${BUNDLE_STEPS:-}" ] || case " $BUNDLE_STEPS " in *" $1 "*) true ;; *) false ;; esac; }
# A GPU step's skip: a failure where nvidia-smi lists a GPU (it tested nothing there).
skip_step() {
	local name=$1 why=$2
	if [ "$GPUS_LISTED" -gt 0 ] && case $GPU_STEPS in *" $name "*) true ;; *) false ;; esac; then
		echo "$name: FAIL (skipped, but nvidia-smi lists $GPUS_LISTED GPU(s): $why)" | tee -a "$OUT/summary.txt"
		failed+=("$name (skipped with a GPU present)")
	else
		echo "$name: SKIP ($why)" | tee -a "$OUT/summary.txt"
		skipped+=("$name")
	fi
}
# step NAME LIMIT CMD...: runs CMD with stdout+stderr to OUT/NAME.log under min(LIMIT, time left).
step() {
	local name=$1 lim=$2 l rc
	shift 2
	selected "$name" || return 0
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
	77) skip_step "$name" "$(tail -n 1 "$OUT/$name.log")" ;;
	124|137) echo "$name: TIMEOUT" | tee -a "$OUT/summary.txt"; failed+=("$name (timeout)") ;;
	*) echo "$name: FAIL (exit $rc)" | tee -a "$OUT/summary.txt"; failed+=("$name (exit $rc)") ;;
	esac
}

: >"$OUT/summary.txt"
GPUS_LISTED=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
GPUS_LISTED=${GPUS_LISTED:-0}
say "machine"
{
	uname -a
	grep -m1 'model name' /proc/cpuinfo || true
	echo "cores: $(nproc)  memory: $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
	command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi --query-gpu=name,driver_version,memory.total \
		--format=csv 2>&1 || echo "nvidia-smi: not found"
	echo "GPUs listed by nvidia-smi -L: $GPUS_LISTED"
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
. "$HERE/cudart-dirs.sh"
CUDART_DIR=none
for d in ${CKPT_CUDART:-} $(cudart_dirs "$PY"); do
	if ls "$d"/libcudart.so.1[23] >/dev/null 2>&1; then
		export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$d
		CUDART_DIR=$d
		break
	fi
done
echo "CUDA runtime directory: $CUDART_DIR" | tee -a "$OUT/machine.txt"
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
# cores (bench/pipe-sweep).
step pipe-sweep 90 bash -c '
	n=$(nproc)
	"$HERE/bin/pipe-sweep" --dir "$OUT/work" --size "${PIPE_SWEEP_SIZE:-1073741824}" --runs 3 \
		--threads "$(printf "%s\n" 1 2 $((n / 2)) "$n" | sort -nu | paste -sd, -)" \
		>"$OUT/pipe-sweep.json" && cat "$OUT/pipe-sweep.json"'


if ! selected python-cuda; then
	:
elif [ "$HAVE_TORCH_CUDA" = 1 ]; then
	export CKPT_LIBRARY=$HERE/lib/libckpt.so.0
	step python-cuda 150 env B="$OUT/work/py" BENCH_DIR="$OUT/work" BENCH_SIZE="${PY_BENCH_SIZE:-2G}" \
		BENCH_RUNS=1 PYTHONPATH="$HERE/python" "$PY" "$HERE/bench/python/torch_vs_ckpt.py"
	[ -f "$OUT/work/py/bench/results.json" ] && cp "$OUT/work/py/bench/results.json" "$OUT/python-results.json"
else
	say "python-cuda"
	skip_step python-cuda "no Python with CUDA-enabled torch"
fi

[ "${KEEP_WORK:-0}" = 1 ] || rm -rf "$OUT/work"
say "figures"
# The numbers of every result file, one line per object: the summary is the whole report.
"$PY" - "$OUT" <<'PY' 2>&1 | tee -a "$OUT/summary.txt" || echo "(no Python to print the figures)" | tee -a "$OUT/summary.txt"
import glob, json, os, sys
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    try:
        doc = json.load(open(path))
    except ValueError as e:
        print(f"{os.path.basename(path)}: unreadable ({e})")
        continue
    def walk(prefix, v):
        if isinstance(v, dict):
            nums = {k: x for k, x in v.items() if isinstance(x, (int, float)) and not isinstance(x, bool)}
            if nums:
                print(f"{os.path.basename(path)} {prefix or '.'}: " +
                      ", ".join(f"{k} {x:.4g}" if isinstance(x, float) else f"{k} {x}"
                                for k, x in nums.items()))
            for k, x in v.items():
                if isinstance(x, (dict, list)):
                    walk(f"{prefix}.{k}" if prefix else k, x)
        elif isinstance(v, list):
            for i, x in enumerate(v[:16]):
                walk(f"{prefix}[{i}]", x)
    walk("", doc)
PY
say "done in $(( $(date +%s) - START ))s"
{
	echo "skipped: ${skipped[*]:-none}"
	echo "failed: ${failed[*]:-none}"
} | tee -a "$OUT/summary.txt"
[ ${#failed[@]} -eq 0 ]
