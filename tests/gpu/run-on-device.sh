#!/usr/bin/env bash
# The one script to run on a machine with a CUDA device (the H200 device machine): builds libckpt
# with the CUDA provider, runs the GPU tests (t-gpu must PASS there, not skip), then the GPU
# benchmark, printing everything. A few minutes at most. Exits non-zero on any failure.
#
# Usage (from anywhere): tests/gpu/run-on-device.sh
# Environment: CUDA_HOME (default: /usr/local/cuda, else found from nvcc), GPU_BENCH_GIB (state
# size, default 4), GPU_BENCH_ARGS (extra gpu_bench options), JOBS (default: online cores),
# GPU_SKIP_BUILD=1 (use the binaries already in build/, e.g. built elsewhere and copied here).
set -u
cd "$(dirname "$0")/../.."
B=${B:-build}
export B
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 4)}
START=$(date +%s)
failed=()

say() { printf '\n=== %s  [+%ss]\n' "$*" "$(( $(date +%s) - START ))"; }
die() { printf '\nrun-on-device: FAIL: %s\n' "$*" >&2; exit 1; }

say "machine"
uname -a
grep -m1 'model name' /proc/cpuinfo || true
echo "cores: $(nproc 2>/dev/null)  memory: $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
df -h . | tail -n 1
if command -v nvidia-smi >/dev/null 2>&1; then
	nvidia-smi -L || true
	nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current --format=csv || true
else
	echo "nvidia-smi: not found"
fi

say "CUDA toolkit"
if [ -z "${CUDA_HOME:-}" ]; then
	CUDA_HOME=/usr/local/cuda
	if [ ! -f "$CUDA_HOME/include/cuda_runtime_api.h" ] && command -v nvcc >/dev/null 2>&1; then
		CUDA_HOME=$(cd "$(dirname "$(command -v nvcc)")/.." && pwd)
	fi
fi
export CUDA_HOME
[ -f "$CUDA_HOME/include/cuda_runtime_api.h" ] ||
	die "no CUDA toolkit: $CUDA_HOME/include/cuda_runtime_api.h is missing (set CUDA_HOME)"
echo "CUDA_HOME=$CUDA_HOME"
grep -m1 '#define CUDART_VERSION' "$CUDA_HOME/include/cuda_runtime_api.h" || true
ls "$CUDA_HOME"/lib64/libcudart.so* 2>/dev/null || ls "$CUDA_HOME"/lib/libcudart.so* 2>/dev/null ||
	die "no libcudart.so under $CUDA_HOME/lib64"

prebuilt() {
	[ -e "$B/lib/libckpt.so" ] && [ -e "$B/lib/libckpt-cuda.so.0" ] && [ -e "$B/tests/bin/t-gpu" ] &&
		[ -e "$B/bench/gpu_bench" ]
}
if [ "${GPU_SKIP_BUILD:-0}" != 1 ]; then
	say "build dependencies"
	missing=""
	for t in gcc make pkg-config; do command -v "$t" >/dev/null 2>&1 || missing="$missing $t"; done
	if [ -z "$missing" ]; then
		for p in liburing libzstd libxxhash; do
			pkg-config --exists "$p" 2>/dev/null || missing="$missing $p"
		done
	fi
	if [ -n "$missing" ]; then
		echo "missing:$missing; trying tools/install-deps.sh build"
		if ! sh tools/install-deps.sh build; then
			prebuilt || die "cannot install the build dependencies (missing:$missing; no apt or no network?).
  Install gcc make pkg-config liburing-dev libzstd-dev libxxhash-dev, or build elsewhere
  (make && make tests) and copy build/lib, build/tests/bin, build/tests/gpu-probe and
  build/bench/gpu_bench here."
			echo "WARNING: cannot build here; using the binaries already in $B/"
			GPU_SKIP_BUILD=1
		fi
	fi
fi
if [ "${GPU_SKIP_BUILD:-0}" != 1 ]; then
	echo "ok: $(gcc --version | head -n 1)"
	say "build: make gpu-tests (library, CUDA module, GPU tests, GPU benchmark)"
	make -j"$JOBS" CUDA_HOME="$CUDA_HOME" gpu-tests || die "make gpu-tests failed"
	# The rest of the tree (CLIs such as nvmetune need libnvme-dev and libblkid-dev, which this
	# machine may lack): built too, but a failure here does not stop the GPU checks.
	say "build: make && make tests (whole tree; not fatal)"
	if make -j"$JOBS" CUDA_HOME="$CUDA_HOME" >"$B/full-build.log" 2>&1 &&
		make -j"$JOBS" CUDA_HOME="$CUDA_HOME" tests >>"$B/full-build.log" 2>&1; then
		echo "ok"
	else
		echo "WARNING: the whole-tree build failed (missing packages?); last lines:"
		tail -n 15 "$B/full-build.log"
	fi
fi

for f in "$B/lib/libckpt.so" "$B/lib/libckpt-cuda.so.0" "$B/tests/bin/t-gpu" "$B/bench/gpu_bench"; do
	[ -e "$f" ] || die "$f was not built (is the CUDA toolkit found by lib/cuda/cuda.mk?)"
done
echo "libckpt.so NEEDED: $(readelf -d "$B/lib/libckpt.so" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')"
echo "libckpt-cuda.so.0 NEEDED: $(readelf -d "$B/lib/libckpt-cuda.so.0" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')"
for f in "$B/tests/bin/t-gpu" "$B/bench/gpu_bench" "$B/lib/libckpt-cuda.so.0"; do
	if ldd "$f" | grep -q 'not found'; then
		ldd "$f"
		die "$f misses shared libraries on this machine"
	fi
done

say "GPU tests (tests/run.sh gpu)"
TEST_TIMEOUT=300 tests/run.sh gpu || failed+=("tests/run.sh gpu")
for log in "$B"/tests/logs/t-gpu.log "$B"/tests/logs/t-gpu-loader.log "$B"/tests/logs/t-no-cudart.log; do
	[ -f "$log" ] && { echo "--- $log"; cat "$log"; }
done

say "t-gpu must pass (not skip) on a machine with a device"
timeout 300 "$B/tests/bin/t-gpu"
rc=$?
echo "t-gpu exit status: $rc"
[ "$rc" -eq 0 ] || failed+=("t-gpu (exit $rc)")

say "GPU benchmark (gpu_bench --gib ${GPU_BENCH_GIB:-4})"
mkdir -p "$B/bench"
# shellcheck disable=SC2086
timeout 400 "$B/bench/gpu_bench" --gib "${GPU_BENCH_GIB:-4}" --json "$B/bench/gpu_bench.json" \
	${GPU_BENCH_ARGS:-}
rc=$?
echo "gpu_bench exit status: $rc"
[ "$rc" -eq 0 ] || failed+=("gpu_bench (exit $rc)")

# The Python path with CUDA tensors, against torch.distributed.checkpoint.async_save, when a Python
# with CUDA-enabled torch is there (Debian's python3-torch is CPU-only; the device image may differ).
PY=
for cand in python3 /usr/bin/python3; do
	if command -v "$cand" >/dev/null &&
	   "$cand" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
		PY=$cand
		break
	fi
done
if [ -n "$PY" ]; then
	say "Python binding with CUDA tensors ($PY)"
	timeout 300 "$PY" tests/python/test_libckpt.py 2>&1 | tail -40
	[ "${PIPESTATUS[0]}" -eq 0 ] || failed+=("python tests")
	say "Python benchmark: libckpt vs torch.save vs dcp.async_save (CUDA, ${PY_BENCH_SIZE:-2G})"
	BENCH_SIZE=${PY_BENCH_SIZE:-2G} BENCH_RUNS=3 PYTHONPATH=python timeout 400 "$PY" \
		bench/python/torch_vs_ckpt.py || failed+=("python benchmark")
else
	say "Python with CUDA-enabled torch not found: the Python CUDA comparison is skipped"
fi

say "done"
if [ ${#failed[@]} -gt 0 ]; then
	echo "run-on-device: FAILED: ${failed[*]}"
	exit 1
fi
echo "run-on-device: all GPU tests and the benchmark passed"
