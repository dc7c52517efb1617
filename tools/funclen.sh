#!/bin/sh
# Prints the length of every function in the given C and Python files, longest first:
# "LINES FILE:FUNCTION". C: from the opening brace in column 0 to the closing one (the tree's
# style puts both alone on their lines); Python: the def's first line to its last (nested
# functions counted on their own, and inside their parent). Used by tests/install/t-funclen.sh and
# tools/docfigures.py (the figures of docs/architecture.md). Usage: tools/funclen.sh FILE...
set -eu
c= py=
for f in "$@"; do
	case $f in
	*.c) c="$c $f" ;;
	*.py) py="$py $f" ;;
	esac
done
{
	[ -z "$c" ] || for f in $c; do
		awk -v f="$f" '/^[A-Za-z_].*\(/ {sig=$0} /^\{/ {start=NR}
		  /^\}/ && start {match(sig, /[A-Za-z_0-9]+\(/)
		    print NR - start + 1, f ":" substr(sig, RSTART, RLENGTH - 1); start = 0}' "$f"
	done
	[ -z "$py" ] || python3 - $py <<'PY'
import ast, sys
for path in sys.argv[1:]:
    with open(path, encoding="utf-8") as fh:
        tree = ast.parse(fh.read(), path)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            print(node.end_lineno - node.lineno + 1, f"{path}:{node.name}")
PY
} | sort -k1,1rn -k2
