#!/usr/bin/env bash
# Runs every test of the tree and ends with "N passed, N failed, N skipped".
# Tests: the compiled programs build/tests/bin/t-*, and the scripts tests/*/t-*.sh.
# Each runs from the repository root under a timeout; exit 0 passes, 77 skips, anything else fails.
# Usage: tests/run.sh [PATTERN]   (runs only tests whose name contains PATTERN)
set -u
cd "$(dirname "$0")/.."
B=${B:-build}
export B
TIMEOUT=${TEST_TIMEOUT:-900}
pat=${1:-}
# The CUDA test double (tests/cudadouble) stands in for the GPU unless CKPT_TEST_REAL_CUDA=1 (a GPU
# machine: the same tests then run against the real runtime).
if [ "${CKPT_TEST_REAL_CUDA:-0}" != 1 ] && [ -e "$B/tests/lib/libcuda.so.1" ]; then
	export LD_LIBRARY_PATH=$PWD/$B/tests/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
logdir=$B/tests/logs
mkdir -p "$logdir"

tests=()
for t in "$B"/tests/bin/t-* tests/*/t-*.sh; do
	[ -e "$t" ] || continue
	[ -n "$pat" ] && [[ "$t" != *"$pat"* ]] && continue
	tests+=("$t")
done

pass=0 fail=0 skip=0 failed=()
for t in "${tests[@]}"; do
	name=$(basename "$t")
	name=${name%.sh}
	log=$logdir/$name.log
	start=${EPOCHREALTIME/./}
	timeout --kill-after=10 "$TIMEOUT" "$t" >"$log" 2>&1 </dev/null
	rc=$?
	el=$(( ${EPOCHREALTIME/./} - start ))
	secs=$((el / 1000000)).$(( (el / 100000) % 10 ))
	case $rc in
	0) pass=$((pass + 1)); printf 'PASS %-40s %6ss\n' "$name" "$secs" ;;
	77) skip=$((skip + 1)); printf 'SKIP %-40s %6ss  %s\n' "$name" "$secs" "$(tail -n 1 "$log")" ;;
	*) fail=$((fail + 1)); failed+=("$name")
	   printf 'FAIL %-40s %6ss  (exit %d; log %s)\n' "$name" "$secs" "$rc" "$log"
	   tail -n 25 "$log" | sed 's/^/    | /' ;;
	esac
done
echo
[ ${#failed[@]} -gt 0 ] && echo "failed: ${failed[*]}"
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ] && [ $((pass + skip)) -gt 0 ]
