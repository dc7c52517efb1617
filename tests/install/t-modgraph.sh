#!/usr/bin/env bash
# No file of the tree depends on another in a circle: the graphs are
# computed from the object files (a file that uses a symbol another defines depends on it) and from
# the Python imports (tools/pyimports.py), and each must be acyclic:
#   - lib/, its files (build/obj/lib/FOLDER/FILE.o), the same in the tests' build (build/obj/hooks),
#     and its folders (docs/architecture.md, section 1: a folder depends on another when one of its
#     files does);
#   - each CLI with the objects of cli/common it links (ckptctl, nvmetune);
#   - the Python modules of every folder that has some (python/libckpt, tests/python, bench, ...).
# On a cycle it prints each strongly connected component with the symbols of its edges, and fails.
# When a graph is acyclic it prints it by level (level 0 uses no other file of the graph; every
# file sits one level above the highest one it uses).
# The detector is first checked on a graph with a known cycle, so that this test can fail.
set -u
cd "$(dirname "$0")/../.."
B=${B:-build}
export LC_ALL=C
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Edges "from to symbol" among the object files named on standard input (paths under $B/obj/; a
# module is its path there without .o, e.g. lib/save/pipeline).
edges() {
	local o
	sed "s|^$B/obj/||; s|\.o\$||" > "$tmp/mods"
	while read -r m; do
		nm --defined-only -g "$B/obj/$m.o" | awk -v m="$m" 'NF == 3 {print $3, m}'
	done < "$tmp/mods" | sort > "$tmp/defs"
	while read -r m; do
		nm -u "$B/obj/$m.o" | awk '{print $2}' | sort -u | join - "$tmp/defs" |
			awk -v m="$m" '$2 != m {print m, $2, $1}'
	done < "$tmp/mods" | sort -u
}

# Reads "from to symbol" lines; prints the SCCs of more than one module (with their edges) and
# exits 1, or prints the levels and exits 0. Mutual reachability by a transitive closure: lib/ has
# a few dozen modules.
check() {
	awk '
	{ n[$1]; n[$2]; e[$1, $2] = 1; sym[$1, $2] = sym[$1, $2] (sym[$1, $2] == "" ? "" : " ") $3 }
	END {
		for (a in n) r[a, a] = 0
		for (k in e) r[k] = 1
		for (m in n) for (a in n) if ((a, m) in r && r[a, m]) for (b in n)
			if ((m, b) in r && r[m, b]) r[a, b] = 1
		bad = 0
		for (a in n) {
			if (a in done) continue
			comp = a; done[a]; size = 1
			for (b in n) if (b != a && r[a, b] && r[b, a]) { comp = comp " " b; done[b]; size++ }
			if (size < 2) continue
			bad = 1
			print "cycle: {" comp "}"
			split(comp, mem, " ")
			for (i in mem) for (j in mem) if ((mem[i], mem[j]) in e)
				print "    " mem[i] " -> " mem[j] ": " sym[mem[i], mem[j]]
		}
		if (bad) exit 1
		# Levels: longest path to a module that uses nothing (the graph is a DAG now).
		for (pass = 0; pass < length(n); pass++)
			for (k in e) { split(k, ab, SUBSEP); if (lv[ab[1]] < lv[ab[2]] + 1) lv[ab[1]] = lv[ab[2]] + 1 }
		for (a in n) { l = lv[a] + 0; line[l] = line[l] " " a; if (l > top) top = l }
		for (l = top; l >= 0; l--) print "level " l ":" line[l]
	}'
}

# The detector finds a known cycle (and its symbols) and accepts a chain.
printf 'a b f\nb c g\nc a h\nc d i\n' > "$tmp/cyclic"
if check < "$tmp/cyclic" > "$tmp/out"; then
	echo "FAIL: the cycle check accepted a -> b -> c -> a"; exit 1
fi
grep -q 'cycle: {' "$tmp/out" && grep -q 'c -> a: h' "$tmp/out" ||
	{ echo "FAIL: the cycle check did not name the cycle:"; cat "$tmp/out"; exit 1; }
printf 'a b f\nb c g\n' | check > /dev/null || { echo "FAIL: the cycle check refused a chain"; exit 1; }

# graph NAME < EDGES: prints its size and levels, or its cycles and fails the test.
fail=0
graph() {
	sort -u > "$tmp/g"
	[ -s "$tmp/g" ] || { echo "FAIL: $1: no dependency found"; fail=1; return; }
	echo "== $1: $(awk '{print $1, $2}' "$tmp/g" | sort -u | wc -l) edges among" \
		"$(awk '{print $1; print $2}' "$tmp/g" | sort -u | wc -l) files"
	if check < "$tmp/g"; then echo "no cycle"; else
		echo "FAIL: $1 depends on itself in a cycle (docs/architecture.md, section 1)"; fail=1
	fi
}

ls "$B"/obj/lib/*/*.o > /dev/null 2>&1 || { echo "SKIP: no object files in $B/obj/lib (run make)"; exit 77; }
for d in cli/ckptctl cli/nvmetune cli/common; do
	ls "$B/obj/$d"/*.o > /dev/null 2>&1 || { echo "FAIL: no object files in $B/obj/$d (run make)"; exit 1; }
done
[ -z "$(ls "$B"/obj/lib/*.o 2>/dev/null)" ] ||
	{ echo "FAIL: object files directly under $B/obj/lib: lib/ keeps its sources in folders"; exit 1; }

ls "$B"/obj/lib/*/*.o | edges > "$tmp/lib"
graph "lib/ files" < "$tmp/lib"
# The tests' archive: the same files, those with test hooks (HOOK_SRC) compiled again, plus the
# test-only ones (the I/O fault injector, lib/io/fault.c).
for o in "$B"/obj/lib/*/*.o; do
	h=$B/obj/hooks/${o#"$B"/obj/}
	[ -e "$h" ] || echo "$o"
done > "$tmp/tlib.list"
ls "$B"/obj/hooks/lib/*/*.o >> "$tmp/tlib.list" 2>/dev/null ||
	{ echo "FAIL: no object files in $B/obj/hooks/lib (run make tests)"; exit 1; }
edges < "$tmp/tlib.list" | sed 's|hooks/lib/|lib/|g' > "$tmp/tlib"
graph "lib/ files, test build" < "$tmp/tlib"
# A folder uses another when one of its files does; the folders are the layers.
awk '{split($1, a, "/"); split($2, b, "/"); if (a[2] != b[2]) print "lib/" a[2], "lib/" b[2], $3}' \
	"$tmp/lib" > "$tmp/folders"
graph "lib/ folders" < "$tmp/folders"
# (graph runs in this shell, not at the end of a pipe, so that its verdict reaches $fail.)
ls "$B"/obj/cli/ckptctl/*.o "$B"/obj/cli/common/*.o | edges > "$tmp/ckptctl"
graph "ckptctl" < "$tmp/ckptctl"
ls "$B"/obj/cli/nvmetune/*.o "$B"/obj/cli/common/*.o | edges > "$tmp/nvmetune"
graph "nvmetune" < "$tmp/nvmetune"

# Python: every folder of the tree that holds modules.
pydirs=$(git ls-files '*.py' 2>/dev/null | xargs -r -n1 dirname | sort -u)
[ -n "$pydirs" ] || pydirs=$(find python tests bench tools examples -name '*.py' | xargs -n1 dirname | sort -u)
python3 tools/pyimports.py $pydirs > "$tmp/py" || { echo "FAIL: tools/pyimports.py"; exit 1; }
graph "Python modules" < "$tmp/py"

# The Python side can fail too: a known circle among two modules of a scratch package.
mkdir -p "$tmp/pkg"
printf 'from . import b\n' > "$tmp/pkg/a.py"; printf 'def f():\n    from .a import g\n' > "$tmp/pkg/b.py"
: > "$tmp/pkg/__init__.py"
python3 tools/pyimports.py "$tmp/pkg" | check > /dev/null &&
	{ echo "FAIL: tools/pyimports.py missed a.py <-> b.py (a deferred import)"; fail=1; }
[ $fail = 0 ] || exit 1
echo "no cycle in any graph"
