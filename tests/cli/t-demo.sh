#!/usr/bin/env bash
# The demo (`make demo`, demo/ckpt-demo.c) on a small model: it passes, lists its store, and its
# last lines are two commands on that store (named as the shell needs it) that then succeed.
. tests/cli/lib.sh
DEMO=$ROOT/$B/bin/ckpt-demo
[ -x "$DEMO" ] || { echo "skip: $DEMO is not built"; exit 77; }
store="$T/demo store"
(cd "$T" && "$DEMO" --store "$store" --size 8M --steps 4 --every 2) >"$T/demo.out" 2>"$T/demo.err"
expect "the demo passes" test $? = 0 -a ! -s "$T/demo.err"
tail -n 2 "$T/demo.out" >"$T/next"
expect "its last two lines are commands on its store" python3 -c '
import shlex, sys
lines = open(sys.argv[1]).read().splitlines()
assert len(lines) == 2, lines
for l in lines:
    w = shlex.split(l)
    assert w[0].endswith("/ckptctl") and w[2] == sys.argv[2], (w, sys.argv[2])
' "$T/next" "$store"
i=0
while read -r line; do
	i=$((i + 1))
	(cd "$T" && eval "$line") >"$T/next$i.out" 2>&1
	expect "next command $i succeeds: $line" test $? = 0
done <"$T/next"
expect "the export wrote the model's weights" test -s "$T/model.safetensors"
finish
