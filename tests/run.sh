#!/usr/bin/env bash
# Runs every test of the tree and ends with "N passed, N failed, N skipped".
# Tests: the compiled programs build/tests/bin/t-*, and the scripts tests/*/t-*.sh.
# Each runs from the repository root under a timeout; exit 0 passes, 77 skips, anything else fails.
# Usage: tests/run.sh [--quick] [--list] [PATTERN]
#   PATTERN  runs only tests whose name contains PATTERN
#   --quick  leaves out the tests that tests/slow.list names (`make check-quick`): a test is quick
#            unless listed there
#   --list   prints the names of the tests it would run, and runs none
set -u
cd "$(dirname "$0")/.."
B=${B:-build}
export B
TIMEOUT=${TEST_TIMEOUT:-900}
quick=0 list=0 pat=
for a in "$@"; do
	case $a in
	--quick) quick=1 ;;
	--list) list=1 ;;
	-*) echo "run.sh: unknown option $a (tests/run.sh [--quick] [--list] [PATTERN])" >&2; exit 2 ;;
	*) pat=$a ;;
	esac
done
# The CUDA test double (tests/cudadouble) stands in for the GPU unless CKPT_TEST_REAL_CUDA=1 (a GPU
# machine: the same tests then run against the real runtime).
if [ "${CKPT_TEST_REAL_CUDA:-0}" != 1 ] && [ -e "$B/tests/lib/libcuda.so.1" ]; then
	export LD_LIBRARY_PATH=$PWD/$B/tests/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
logdir=$B/tests/logs
mkdir -p "$logdir"

# The slow tier: one test name a word, '#' to the end of a line a comment. Every name must be a
# test of the tree (a t-*.sh script or a t-*.c program under tests/), so that a renamed or removed
# test cannot leave a stale entry behind.
declare -A slow=()
if [ $quick = 1 ]; then
	declare -A known=()
	while IFS= read -r f; do
		f=${f##*/}
		known[${f%.*}]=1
	done < <(find tests -name 't-*.sh' -o -name 't-*.c')
	while IFS= read -r line; do
		read -ra words <<<"${line%%#*}"
		for w in "${words[@]}"; do
			[ -n "${known[$w]:-}" ] ||
				{ echo "run.sh: tests/slow.list names $w, which is no test" >&2; exit 2; }
			slow[$w]=1
		done
	done < tests/slow.list
fi

tests=() left=0
for t in "$B"/tests/bin/t-* tests/*/t-*.sh; do
	[ -e "$t" ] || continue
	[ -n "$pat" ] && [[ "$t" != *"$pat"* ]] && continue
	name=$(basename "$t" .sh)
	if [ -n "${slow[$name]:-}" ]; then left=$((left + 1)); continue; fi
	if [ $list = 1 ]; then echo "$name"; continue; fi
	tests+=("$t")
done
[ $list = 1 ] && exit 0

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
[ $quick = 1 ] && echo "quick tier: $left slow tests not run (tests/slow.list)"
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ] && [ $((pass + skip)) -gt 0 ]
