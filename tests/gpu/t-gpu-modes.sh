#!/bin/sh
# The GPU tests against the CUDA test double in its other modes: eager (work
# runs as soon as it is queued, the order a fast GPU gives, where the default lazy mode runs it
# only when something needs it) and a one-device machine (make check's default is two). t-gpu
# and t-gpu-order must pass in each; on one device the two-device cases say they are skipped.
# Only against the double.
set -eu
B=${B:-build}
[ "${CKPT_TEST_REAL_CUDA:-0}" = 1 ] && { echo "skip: real CUDA runtime (CKPT_TEST_REAL_CUDA=1)"; exit 77; }
[ -x "$B/tests/bin/t-gpu" ] && [ -x "$B/tests/bin/t-gpu-order" ] && [ -e "$B/tests/lib/libcuda.so.1" ] ||
	{ echo "skip: the GPU tests or the CUDA test double not built (no CUDA headers)"; exit 77; }
out=$(mktemp "${TMPDIR:-/tmp}/ckpt-gpumodes.XXXXXX")
trap 'rm -f "$out"' EXIT
fail=0
for mode in "CUDADOUBLE_EAGER=1" "CUDADOUBLE_DEVICES=1"; do
	for t in t-gpu t-gpu-order; do
		rc=0
		env "$mode" "$B/tests/bin/$t" >"$out" 2>&1 || rc=$?
		if [ "$rc" != 0 ]; then
			cat "$out"
			echo "FAIL: $t with $mode exited $rc"
			fail=1
			continue
		fi
		case $mode in CUDADOUBLE_DEVICES=1)
			grep -q "1 device" "$out" || { cat "$out"; echo "FAIL: $t did not see one device"; fail=1; } ;;
		esac
		echo "ok: $t with $mode"
	done
done
exit $fail
