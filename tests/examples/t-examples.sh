#!/usr/bin/env bash
# The README's C example is an excerpt of examples/quickstart.c, verbatim: its lines are lines of
# the file, back to back, so the README cannot drift from the code that is compiled; the file
# compiles as written (warnings are errors), and it runs: twice on one store (the second run adds
# the next step), and on a path it cannot create it fails with the library's message.
set -u
cd "$(dirname "$0")/../.."
B=${B:-build}
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The first ```c block of the README, without its fences: at least 10 lines, found back to back in
# the file (the checker is first shown a block that is not, so that this part can fail).
awk '/^```c$/ {inb=1; next} inb && /^```$/ {exit} inb {print}' README.md > "$tmp/readme.c"
excerpt() { # excerpt BLOCK FILE: fails naming the first line of BLOCK that breaks the run
	python3 - "$1" "$2" <<'PY'
import sys
ex = open(sys.argv[1]).read().splitlines()
src = open(sys.argv[2]).read().splitlines()
if len(ex) < 10:
    sys.exit(f"only {len(ex)} lines")
best = 0
for i in range(len(src)):
    k = 0
    while k < len(ex) and i + k < len(src) and src[i + k] == ex[k]:
        k += 1
    best = max(best, k)
if best < len(ex):
    sys.exit(f"line {best + 1} of the block is not the next line of {sys.argv[2]}: {ex[best]!r}")
PY
}
{ head -n 12 examples/quickstart.c; echo "	not a line of the file"; } > "$tmp/bad.c"
excerpt "$tmp/bad.c" examples/quickstart.c 2>/dev/null &&
	{ echo "FAIL: the excerpt check accepted a line the file lacks"; fail=1; }
if ! msg=$(excerpt "$tmp/readme.c" examples/quickstart.c 2>&1); then
	echo "FAIL: README.md's C example is not an excerpt of examples/quickstart.c: $msg"
	fail=1
fi

cc -std=c11 -Wall -Wextra -Werror -Iinclude examples/quickstart.c -o "$tmp/quickstart" \
	${SANITIZE:-} -L"$B/lib" -lckpt -Wl,-rpath,"$PWD/$B/lib" || { echo "FAIL: does not compile"; exit 1; }

out1=$("$tmp/quickstart" "$tmp/store") || { echo "FAIL: first run exit $?: $out1"; fail=1; }
out2=$("$tmp/quickstart" "$tmp/store") || { echo "FAIL: second run exit $?: $out2"; fail=1; }
echo "$out1"; echo "$out2"
[[ "$out1" == "step 0: 32 new chunks of 32" ]] || { echo "FAIL: first run printed '$out1'"; fail=1; }
[[ "$out2" == "step 1: 0 new chunks of 32" ]] || { echo "FAIL: second run printed '$out2'"; fail=1; }
[ "$("$B/bin/ckptctl" list --json "$tmp/store" | grep -c '"step"')" = 2 ] ||
	{ echo "FAIL: the store does not list 2 checkpoints"; fail=1; }

err=$("$tmp/quickstart" "$tmp/nonexistent/deeper/store" 2>&1) && { echo "FAIL: exit 0 on a bad path"; fail=1; }
echo "$err"
[[ "$err" == "open: "*"$tmp/nonexistent/deeper/store"* ]] ||
	{ echo "FAIL: the error does not name the path: $err"; fail=1; }
"$tmp/quickstart" 2>/dev/null; [ $? = 2 ] || { echo "FAIL: no usage error without arguments"; fail=1; }

[ $fail = 0 ] && echo "examples: ok"
exit $fail
