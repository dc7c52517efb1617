#!/usr/bin/env bash
# A quick sanitizer pass inside `make check`: the save pipeline's concurrency test and the
# io_uring ring-reuse test under ThreadSanitizer, and the pipeline, decoder, fused-copy (t-hash) and public API (t-api) tests under ASan/UBSan, each in its own build tree.
# The full runs are `make tsan` and `make sanitize`. Skips (77) when the compiler lacks them.
set -u
cd "$(dirname "$0")/../.."
echo 'int main(void){return 0;}' > /tmp/ckpt-san-probe.c
if ! cc -fsanitize=thread /tmp/ckpt-san-probe.c -o /tmp/ckpt-san-probe 2>/dev/null ||
   ! cc -fsanitize=address,undefined /tmp/ckpt-san-probe.c -o /tmp/ckpt-san-probe 2>/dev/null; then
	echo "skip: the compiler has no ThreadSanitizer/AddressSanitizer"
	exit 77
fi
rm -f /tmp/ckpt-san-probe /tmp/ckpt-san-probe.c
fail=0
make -s B=build/tsan SANITIZE="-fsanitize=thread -fno-omit-frame-pointer" build/tsan/tests/bin/t-pipeline >/dev/null || exit 1
make -s B=build/tsan SANITIZE="-fsanitize=thread -fno-omit-frame-pointer" build/tsan/tests/bin/t-uring-reuse >/dev/null || exit 1
for t in t-pipeline t-uring-reuse; do
	TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" build/tsan/tests/bin/$t
	rc=$?
	[ $rc = 0 ] || [ $rc = 77 ] || { echo "$t failed under ThreadSanitizer (exit $rc)"; fail=1; }
done
ASAN="-fsanitize=address,undefined -fno-omit-frame-pointer"
make -s B=build/asan SANITIZE="$ASAN" build/asan/tests/bin/t-pipeline build/asan/tests/bin/t-format \
	build/asan/tests/bin/t-gc build/asan/tests/bin/t-hash build/asan/tests/bin/t-api \
	>/dev/null || exit 1
for t in t-pipeline t-format t-gc t-hash t-api; do
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
		build/asan/tests/bin/$t || { echo "$t failed under ASan/UBSan"; fail=1; }
done
exit $fail
