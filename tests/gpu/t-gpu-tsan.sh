#!/bin/sh
# The GPU tests under ThreadSanitizer: t-gpu and t-gpu-order, built with
# -fsanitize=thread in their own tree ($B/tsan-gpu: the library, the CUDA module and the CUDA test
# double), run against the double. A data race or a lock-order inversion fails the test (TSan
# reports "WARNING: ThreadSanitizer" and exits 66). Skips in a sanitizer build (it is one
# already) and without the CUDA headers.
set -eu
B=${B:-build}
[ -z "${SANITIZE:-}" ] || { echo "skip: already a sanitizer build"; exit 77; }
[ "${CKPT_TEST_REAL_CUDA:-0}" = 1 ] && { echo "skip: real CUDA runtime (CKPT_TEST_REAL_CUDA=1)"; exit 77; }
[ -e "$B/tests/lib/libcuda.so.1" ] || { echo "skip: the CUDA test double is not built (no CUDA headers)"; exit 77; }
T=$B/tsan-gpu
make -s B="$T" SANITIZE="-fsanitize=thread -fno-omit-frame-pointer" \
	"$T/tests/bin/t-gpu" "$T/tests/bin/t-gpu-order" "$T/tests/lib/libcuda.so.1" \
	"$T/tests/lib/libcudart.so.13" "$T/tests/lib/libcudart.so.12" >/dev/null ||
	{ echo "FAIL: the ThreadSanitizer build"; exit 1; }
out=$(mktemp "${TMPDIR:-/tmp}/ckpt-gputsan.XXXXXX")
trap 'rm -f "$out"' EXIT
fail=0
for t in t-gpu t-gpu-order; do
	rc=0
	B=$T LD_LIBRARY_PATH="$PWD/$T/tests/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
		TSAN_OPTIONS="second_deadlock_stack=1 ${TSAN_OPTIONS:-}" "$T/tests/bin/$t" >"$out" 2>&1 || rc=$?
	if [ "$rc" != 0 ] || grep -q 'WARNING: ThreadSanitizer' "$out"; then
		cat "$out"
		echo "FAIL: $t under ThreadSanitizer (exit $rc)"
		fail=1
	else
		echo "ok: $t under ThreadSanitizer ($(grep -c . "$out") lines of output, no report)"
	fi
done
exit $fail
