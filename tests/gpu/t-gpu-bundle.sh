#!/usr/bin/env bash
# `make gpu-bundle` on a machine without a GPU: the bundle is built, holds no CUDA library (never
# the test double), every binary finds its libraries inside it with a clean environment, and
# run.sh starts, skips the GPU steps cleanly and passes the host steps (small sizes here), its
# summary quotes the figures; with a GPU listed by nvidia-smi the same skips fail the run; and
# the CUDA runtime search looks where CUDA 13 and 12 wheels put libcudart.
# Skips where the CUDA headers are missing (the bundle needs them to build the module).
set -u
cd "$(dirname "$0")/../.."
B=${B:-build}
[ -f "${CUDA_HOME:-/usr/local/cuda}/include/cuda_runtime_api.h" ] ||
	{ echo "skip: no CUDA headers to build the bundle"; exit 77; }
[ -z "${SANITIZE:-}" ] || { echo "skip: the bundle is a release build"; exit 77; }
make -s B="$B" gpu-bundle >/dev/null || { echo "FAIL: make gpu-bundle"; exit 1; }
G=$B/gpu-bundle
fail=0
ls "$G/lib" | grep -q '^libcuda' && { echo "FAIL: a CUDA library is inside the bundle"; fail=1; }
for f in "$G"/bin/* "$G"/lib/libckpt.so.0; do
	miss=$(env -i PATH=/usr/bin:/bin LD_LIBRARY_PATH="$G/lib" ldd "$f" 2>&1 | grep 'not found' |
		grep -v libcudart)
	[ -z "$miss" ] || { echo "FAIL: $f: $miss"; fail=1; }
done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
env -i PATH=/usr/bin:/bin HOME="$out" SWEEP_SIZE=64M PIPE_SWEEP_SIZE=67108864 \
	GPU_BENCH_GIB=1 PY_BENCH_SIZE=64M bash "$G/run.sh" "$out/r" >"$out/log" 2>&1
rc=$?
tail -n 8 "$out/r/summary.txt"
[ $rc = 0 ] || { echo "FAIL: run.sh exit $rc"; tail -n 20 "$out/log"; fail=1; }
grep -q '^failed: none' "$out/r/summary.txt" || { echo "FAIL: a step failed"; fail=1; }
grep -q 'pipe-sweep: PASS' "$out/r/summary.txt" || { echo "FAIL: pipe-sweep did not pass"; fail=1; }
grep -q '"ceiling_save_gbps"' "$out/r/pipe-sweep.json" 2>/dev/null ||
	{ echo "FAIL: no pipe-sweep result"; fail=1; }
grep -q '^gpu_bench.json\|^pipe-sweep.json' "$out/r/summary.txt" ||
	{ echo "FAIL: the summary quotes no figures"; fail=1; }
# Where nvidia-smi lists a GPU, a GPU step that skips is a failure: a fake
# nvidia-smi listing one, the GPU steps only (they skip here: no CUDA runtime in the bundle).
mkdir -p "$out/fakebin"
printf '#!/bin/sh\n[ "$1" = -L ] && echo "GPU 0: NVIDIA H200 (UUID: GPU-0)"\nexit 0\n' >"$out/fakebin/nvidia-smi"
chmod +x "$out/fakebin/nvidia-smi"
env -i PATH="$out/fakebin:/usr/bin:/bin" HOME="$out" BUNDLE_STEPS="t-gpu t-gpu-order gpu_bench python-cuda" \
	bash "$G/run.sh" "$out/g" >"$out/glog" 2>&1 && { echo "FAIL: run.sh passed with GPU steps skipped on a GPU machine"; fail=1; }
for s in t-gpu t-gpu-order gpu_bench python-cuda; do
	grep -q "^$s: FAIL (skipped, but nvidia-smi lists 1 GPU" "$out/g/summary.txt" ||
		{ echo "FAIL: $s's skip with a GPU listed is not a failure"; cat "$out/g/summary.txt"; fail=1; }
done
grep -q 'pipe-sweep' "$out/g/summary.txt" && { echo "FAIL: BUNDLE_STEPS ran an unselected step"; fail=1; }
# The runtime of a CUDA 13 wheel (nvidia/cu13/lib) and of a CUDA 12 one are found.
mkdir -p "$out/site/nvidia/cu13/lib" "$out/site12/nvidia/cuda_runtime/lib"
dirs=$(PYTHONPATH="$out/site" bash -c ". '$G/cudart-dirs.sh'; cudart_dirs python3")
printf '%s\n' "$dirs" | grep -qx "$out/site/nvidia/cu13/lib" ||
	{ echo "FAIL: cudart_dirs does not look in a CUDA 13 wheel: $dirs"; fail=1; }
dirs=$(PYTHONPATH="$out/site12" bash -c ". '$G/cudart-dirs.sh'; cudart_dirs python3")
printf '%s\n' "$dirs" | grep -qx "$out/site12/nvidia/cuda_runtime/lib" ||
	{ echo "FAIL: cudart_dirs does not look in a CUDA 12 wheel: $dirs"; fail=1; }
[ $fail = 0 ] && echo "gpu-bundle: ok"
exit $fail
