#!/usr/bin/env bash
# No function of lib/, cli/ or python/ is longer than 100 lines, as
# tools/funclen.sh counts them; the tests' table-driven cases may be longer. No file of lib/ is
# longer than 800 lines. The counter is first checked on a known long C function and a
# known long Python one, so that this test can fail.
set -u
cd "$(dirname "$0")/../.."
MAX_FUNC=${MAX_FUNC:-100}
MAX_FILE=${MAX_FILE:-800}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

{ echo 'static int f(void)'; echo '{'; for i in $(seq 120); do echo "	x++;"; done; echo '}'; } > "$tmp/long.c"
{ echo 'def g():'; for i in $(seq 110); do echo "    x = $i"; done; } > "$tmp/long.py"
out=$(tools/funclen.sh "$tmp/long.c" "$tmp/long.py")
echo "$out" | grep -q "^122 $tmp/long.c:f$" && echo "$out" | grep -q "^111 $tmp/long.py:g$" ||
	{ echo "FAIL: tools/funclen.sh miscounted the known functions:"; echo "$out"; exit 1; }

files=$(git ls-files 'lib/*.c' 'cli/*.c' 'python/*.py' 2>/dev/null)
[ -n "$files" ] || files=$(find lib cli python -name '*.c' -o -name '*.py')
fail=0
tools/funclen.sh $files > "$tmp/all"
echo "longest functions:"; head -n 5 "$tmp/all" | sed 's/^/    /'
long=$(awk -v m="$MAX_FUNC" '$1 > m' "$tmp/all")
if [ -n "$long" ]; then
	echo "FAIL: functions over $MAX_FUNC lines:"; echo "$long" | sed 's/^/    /'; fail=1
fi
big=$(wc -l $(echo "$files" | grep '^lib/') | awk -v m="$MAX_FILE" '$2 != "total" && $1 > m')
if [ -n "$big" ]; then
	echo "FAIL: lib/ files over $MAX_FILE lines:"; echo "$big" | sed 's/^/    /'; fail=1
fi
echo "$(echo "$files" | wc -w) files, $(wc -l < "$tmp/all") functions"
[ $fail = 0 ] && echo "no function over $MAX_FUNC lines, no lib/ file over $MAX_FILE lines"
exit $fail
