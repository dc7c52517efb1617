#!/usr/bin/env bash
# lib/'s modules depend on each other one way (issue 10, item 1; docs/architecture.md section 1):
# the graph computed from the object files build/obj/lib/*.o (a file that uses a symbol another
# defines depends on it) has no cycle. On a cycle it prints each strongly connected component with
# the symbols of its edges, and fails. When the graph is acyclic it prints it by level (level 0
# uses no other lib/ file; every module sits one level above the highest one it uses).
# The detector is first checked on a graph with a known cycle, so that this test can fail.
set -u
cd "$(dirname "$0")/../.."
B=${B:-build}
export LC_ALL=C
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Edges "from to symbol" of the object files in $1.
edges() {
	local o
	for o in "$1"/*.o; do
		nm --defined-only -g "$o" | awk -v m="$(basename "${o%.o}")" 'NF == 3 {print $3, m}'
	done | sort > "$tmp/defs"
	for o in "$1"/*.o; do
		nm -u "$o" | awk '{print $2}' | sort -u | join - "$tmp/defs" |
			awk -v m="$(basename "${o%.o}")" '$2 != m {print m, $2, $1}'
	done | sort -u
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

objs=$B/obj/lib
ls "$objs"/*.o > /dev/null 2>&1 || { echo "SKIP: no object files in $objs (run make)"; exit 77; }
edges "$objs" > "$tmp/edges"
[ -s "$tmp/edges" ] || { echo "FAIL: no dependency found among $objs/*.o"; exit 1; }
echo "$(awk '{print $1, $2}' "$tmp/edges" | sort -u | wc -l) edges among $(ls "$objs"/*.o | wc -l) objects"
if ! check < "$tmp/edges"; then
	echo "FAIL: lib/'s modules depend on each other in a cycle (docs/architecture.md, section 1)"
	exit 1
fi
echo "no cycle"
