#!/usr/bin/env bash
# The figures of docs/architecture.md (sizes, the include graph of lib/, the longest files and
# functions, the public functions and the files that define them) are what tools/docfigures.py
# computes from the tree now: the marked block is never edited by hand, and a change to the tree
# that moves a figure fails here, with a diff, until `make docfigures` rewrites it.
# The checker is first shown a stale copy and a copy without the markers, so that it can fail.
set -u
cd "$(dirname "$0")/../.."
doc=docs/architecture.md
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

grep -qx '<!-- figures:begin -->' "$doc" && grep -qx '<!-- figures:end -->' "$doc" ||
	{ echo "FAIL: $doc has no figures:begin / figures:end block"; exit 1; }

# A stale copy: one figure of the block changed (the count of public functions).
sed '/<!-- figures:begin -->/,/<!-- figures:end -->/ s/^\([0-9][0-9]*\) public functions/9\1 public functions/' \
	"$doc" > "$tmp/stale.md"
cmp -s "$doc" "$tmp/stale.md" && { echo "FAIL: could not make a stale copy of $doc"; exit 1; }
python3 tools/docfigures.py --check "$tmp/stale.md" > "$tmp/out" 2>&1
rc=$?
[ $rc = 1 ] && grep -q '^-9[0-9]* public functions' "$tmp/out" ||
	{ echo "FAIL: the check passed a stale copy (exit $rc):"; cat "$tmp/out"; fail=1; }
# Write mode repairs the copy: it is then the doc again.
python3 tools/docfigures.py "$tmp/stale.md" > /dev/null && python3 tools/docfigures.py --check "$tmp/stale.md" > /dev/null ||
	{ echo "FAIL: tools/docfigures.py did not repair the stale copy"; fail=1; }
# No markers: exit 2, never a silent pass.
grep -v 'figures:' "$doc" > "$tmp/nomark.md"
python3 tools/docfigures.py --check "$tmp/nomark.md" > /dev/null 2>&1
[ $? = 2 ] || { echo "FAIL: a doc without the markers did not exit 2"; fail=1; }

# The doc itself.
if python3 tools/docfigures.py --check "$doc" > "$tmp/out" 2>&1; then
	echo "$doc: the figures are current"
else
	cat "$tmp/out"
	fail=1
fi
[ $fail = 0 ]
