#!/bin/sh
# The CUDA provider on a CUDA 12 driver: with the test double answering as a
# 12.2 driver, libcudart.so.13 finds no device ("insufficient driver") and the provider must take
# libcudart.so.12, which has no cudaStreamGetDevice (added in 12.8). Runs t-gpu so. Only against
# the double: on a GPU machine the real driver decides.
set -eu
B=${B:-build}
[ "${CKPT_TEST_REAL_CUDA:-0}" = 1 ] && { echo "skip: real CUDA runtime (CKPT_TEST_REAL_CUDA=1)"; exit 77; }
[ -x "$B/tests/bin/t-gpu" ] && [ -e "$B/tests/lib/libcudart.so.12" ] ||
	{ echo "skip: t-gpu or the CUDA test double not built (no CUDA headers)"; exit 77; }
out=$(mktemp "${TMPDIR:-/tmp}/ckpt-cuda12.XXXXXX")
trap 'rm -f "$out"' EXIT
rc=0
CUDADOUBLE_DRIVER=12020 "$B/tests/bin/t-gpu" >"$out" 2>&1 || rc=$?
cat "$out"
[ "$rc" = 0 ] || { echo "FAIL: t-gpu on a CUDA 12 driver exited $rc"; exit 1; }
grep -q 'runtime libcudart.so.12 (12020)' "$out" || { echo "FAIL: the CUDA 12 runtime was not used"; exit 1; }
# A process that already holds the CUDA 12 runtime (torch built for CUDA 12) on a CUDA 13
# driver: the provider takes that runtime instead of loading libcudart.so.13 beside it
# (t-gpu-order checks that only one runtime is loaded). Without cudaStreamGetDevice the provider
# asks the driver for a stream's device: t-gpu-order's two-writer-streams case
# fails here when it guesses the current device (the double refuses an event of another device).
[ -x "$B/tests/bin/t-gpu-order" ] || { echo "FAIL: t-gpu-order not built"; exit 1; }
rc=0
CKPT_TEST_CUDART=libcudart.so.12 "$B/tests/bin/t-gpu-order" >"$out" 2>&1 || rc=$?
cat "$out"
[ "$rc" = 0 ] || { echo "FAIL: t-gpu-order in a process holding libcudart.so.12 exited $rc"; exit 1; }
grep -q 'runtimes loaded in the process: 1' "$out" || { echo "FAIL: runtime count not reported"; exit 1; }
echo ok
