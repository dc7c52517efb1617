#!/usr/bin/env bash
# Multi-rank kill test: T_MPI_KILL_ROUNDS rounds (default 12) on one store. In each,
# a job of 2 to 4 ranks (tests/mpi/t-mpi-kill.c) saves steps in a loop, and at a random time of
# it one SIGKILL hits a random rank other than 0, rank 0 (the coordinator) or mpirun (the
# launcher), in turn. Then a fresh job of another size re-saves the killed step (at random every
# other round; else it is left to gc), saves two more and restores the last 4 steps the killed
# job committed (every step is restored once more at the end), and ckptctl checks the store.
# The invariants, after every round:
#  - every step rank 0 reported committed ("committed S": its commit returned 0) is listed,
#    verifies, and restores the exact data of its step (t-dist-scen.h) on another world size;
#  - nothing else is listed, except the kill's window: the one step whose save began ("begin S")
#    but was not reported, which may be visible, and then only whole (it verifies, restores
#    exactly, and counts as committed from then on); never damaged (verify --all);
#  - after gc: du counts no garbage (no leftover, no unreferenced pack), STORE/parts/ holds only
#    directories of listed steps, each only R.part for R below its step's world size, and
#    everything still verifies.
# The choices (sizes, victims, delays, re-saves) come from T_MPI_KILL_SEED (printed); the moment
# the kill lands within the save depends on the machine too. Every job runs in its own session;
# whatever of it survives the kill (30 s at most) is killed, and counted. Skips (77) without MPI.
set -u
# ps finds what survives a kill; without it every job would look gone at once
command -v ps >/dev/null || { echo "FAIL: ps is missing (Debian package procps)"; exit 1; }
tmp=$(mktemp -d)
sid=
cleanup() {
	[ -n "$sid" ] && kill_session "$sid"
	rm -rf "$tmp"
}
trap cleanup EXIT
. tests/mpi/mpi-lib.sh
mpi_tmpdir "$tmp"
ck=$B/bin/ckptctl
[ -x "$ck" ] || { echo "FAIL: $ck not built"; exit 1; }
mpi_build tests/mpi/t-mpi-kill.c "$tmp/prog"
store=$tmp/store
rounds=${T_MPI_KILL_ROUNDS:-12}
seed=${T_MPI_KILL_SEED:-$$}
echo "seed $seed (T_MPI_KILL_SEED=$seed reproduces the choices), $rounds rounds"
RANDOM=$seed
fail=0
bad() { echo "FAIL: round $r: $*"; fail=1; }

# The processes of session $1 that have not exited (zombies excluded), one pid a line.
session_pids() { ps -e -o pid=,sid=,stat= | awk -v s="$1" '$2 == s && $3 !~ /^Z/ { print $1 }'; }
kill_session() { session_pids "$1" | xargs -r kill -KILL 2>/dev/null; }
# Waits up to 30 s for session $1 to be empty; else kills what is left. Returns 1 if it did.
reap_session() {
	local i=0
	while [ -n "$(session_pids "$1")" ]; do
		[ $i -ge 600 ] && { kill_session "$1"; return 1; }
		sleep 0.05
		i=$((i + 1))
	done
	return 0
}
ckq() { timeout -k 5 120 "$ck" "$@"; }
# Steps listed by ckptctl, "STEP WORLD" a line, into $tmp/listed.
list_steps() {
	ckq list --json "$store" >"$tmp/list.json" 2>"$tmp/list.err" || { bad "ckptctl list failed"; cat "$tmp/list.err"; }
	[ -s "$tmp/list.err" ] && { bad "ckptctl list reports damage: $(head -c 300 "$tmp/list.err")"; }
	awk -F'[:,]' '/"step":/ { s = $2 + 0 } /"world_size":/ { print s, $2 + 0 }' "$tmp/list.json" >"$tmp/listed"
}
jnum() { awk -F'[:,]' -v k="\"$1\"" '$1 ~ k { n = $2 + 0 } END { print n + 0 }' "$2"; } # KEY FILE
in_list() { grep -qx "$1" <<<"$2"; } # STEP LINES

declare -A known=() # step -> world: committed (or seen whole in a window); must stay listed
# Checks the listing against known plus the allowed window step $1 (or none); adds a visible
# window to known. Sets win_visible.
check_listing() {
	local w=$1 s n
	win_visible=0
	list_steps
	for s in "${!known[@]}"; do
		grep -q "^$s " "$tmp/listed" || bad "step $s (reported committed) is not listed"
	done
	while read -r s n; do
		[ -n "${known[$s]:-}" ] && continue
		if [ "$s" = "$w" ]; then
			win_visible=1 known[$s]=$n
		else
			bad "step $s is listed but was never reported committed nor in a commit's window"
		fi
	done <"$tmp/listed"
}
verify_all() { # WHEN
	ckq verify -q --all --no-progress "$store" >"$tmp/v" 2>&1 ||
		{ bad "verify --all $1: $(head -c 600 "$tmp/v")"; }
}

kinds=(rank coordinator launcher)
declare -A nkind=() stray=()
step=1 survivors=0 committed=0 windows=0 visible=0 resaved=0 restored=0
strays_parts=0 strays_packs=0 strays_left=0
for ((r = 1; r <= rounds; r++)); do
	n1=$((2 + RANDOM % 3))
	kind=${kinds[$(((seed + r) % 3))]}
	victim=$((1 + RANDOM % (n1 - 1)))
	delay=$((RANDOM % 600))
	n2=$((2 + (n1 - 2 + 1 + RANDOM % 2) % 3))
	coin=$((RANDOM % 2))
	point=
	# Round 1 is the same every time: rank 0 of 4 dies at its 3rd kill point of the first save
	# (the test library's CKPT_DIST_KILL_AT; today after every part is durable, before the
	# global manifest), and 2 ranks re-save the step: a smaller world over a dead one's parts.
	[ $r = 1 ] && n1=4 n2=2 coin=0 kind=coordinator point=0:3 delay=-1
	rep=$tmp/rep.$r
	: >"$rep"
	# (a subshell whose stderr is /dev/null: bash would print "Killed" when the launcher is)
	(CKPT_DIST_KILL_AT=$point setsid -w mpirun --allow-run-as-root --oversubscribe -np "$n1" "$tmp/prog" "$store" "$rep" \
		"$step" 1000000 >"$tmp/out" 2>&1; exit) 2>/dev/null &
	bg=$!
	i=0
	while ! grep -q '^ready' "$rep" && kill -0 $bg 2>/dev/null && [ $i -lt 1200 ]; do
		sleep 0.05
		i=$((i + 1))
	done
	pid0=$(awk '$1 == "pid" && $2 == 0 { print $3 }' "$rep")
	launcher=$(awk '$1 == "pid" && $2 == 0 { print $4 }' "$rep")
	sid=$(awk '$1 == "pid" && $2 == 0 { print $5 }' "$rep")
	if ! grep -q '^ready' "$rep" || [ -z "$pid0" ]; then
		bad "the job of $n1 ranks did not start"; cat "$tmp/out"
		# mpirun leads its session: setsid itself ($bg) or the child it forked
		for p in $bg $(ps -o pid= --ppid $bg); do kill_session "$p"; done
		wait $bg; break
	fi
	case $kind in
	rank) target=$(awk -v v="$victim" '$1 == "pid" && $2 == v { print $3 }' "$rep") ;;
	coordinator) target=$pid0 victim=0 ;;
	launcher) target=$launcher victim=mpirun ;;
	esac
	if [ -n "$point" ]; then
		victim="0 at its kill point $point"
	else
		[ "$(cat /proc/"$launcher"/comm 2>/dev/null)" = mpirun ] || bad "rank 0's parent is not mpirun"
		sleep "$((delay / 1000)).$(printf %03d $((delay % 1000)))"
		grep -q '^done' "$rep" && bad "the job finished before the kill"
		kill -KILL "$target" || bad "kill $kind $target"
	fi
	reap_session "$sid" || survivors=$((survivors + 1))
	wait $bg
	sid=
	nkind[$kind]=$((${nkind[$kind]:-0} + 1))
	mine=$(awk '$1 == "committed" { print $2 }' "$rep")
	last=$(awk '$1 == "begin" { s = $2 } END { print s }' "$rep")
	win=
	[ -n "$last" ] && ! in_list "$last" "$mine" && win=$last windows=$((windows + 1))
	for s in $mine; do known[$s]=$n1; committed=$((committed + 1)); done
	check_listing "$win"
	visible=$((visible + win_visible))
	verify_all "after the kill"
	echo "round $r: $n1 ranks, killed $kind ($victim)$([ -z "$point" ] && echo " after $delay ms"): committed" \
		"$(echo $mine | awk '{ print NF ? $1 ".." $NF : "none" }'), window ${win:-none}" \
		"$([ $win_visible = 1 ] && echo visible)"

	# A fresh job of another size: re-saves the window's step or leaves it to gc, saves two more,
	# restores what the killed job committed.
	step=$((${last:-$((step - 1))} + 1))
	first=$step
	if [ -n "$win" ] && [ $win_visible = 0 ] && [ $coin = 0 ]; then
		first=$win resaved=$((resaved + 1))
	fi
	echo "  then $n2 ranks save $first..$((step + 1))"
	# (the last 4 the killed job committed: every step is restored once more at the end)
	checks=$(echo $(echo $mine | tr ' ' '\n' | tail -n 4) $([ $win_visible = 1 ] && echo "$win"))
	rep2=$tmp/rep2.$r
	timeout -k 5 120 mpirun --allow-run-as-root --oversubscribe -np "$n2" "$tmp/prog" "$store" \
		"$rep2" "$first" $((step + 2 - first)) $checks >"$tmp/out" 2>&1 ||
		{ bad "the fresh job of $n2 ranks (steps $first..$((step + 1))) failed"; cat "$tmp/out" "$rep2"; }
	grep -q '^done' "$rep2" || bad "the fresh job did not finish"
	for s in $(awk '$1 == "committed" { print $2 }' "$rep2"); do known[$s]=$n2; committed=$((committed + 1)); done
	restored=$((restored + $(grep -c '^restored .* ok' "$rep2")))
	step=$((step + 2))

	# gc reclaims the kill's leftovers, and only them.
	ckq gc --json "$store" >"$tmp/gc" 2>&1 || { bad "gc: $(cat "$tmp/gc")"; }
	# parts_removed (of leftovers_removed) is printed only when not 0
	strays_parts=$((strays_parts + $(jnum parts_removed "$tmp/gc")))
	strays_packs=$((strays_packs + $(jnum packs_removed "$tmp/gc")))
	strays_left=$((strays_left + $(jnum leftovers_removed "$tmp/gc") - $(jnum parts_removed "$tmp/gc")))
	ckq du --json "$store" >"$tmp/du" 2>&1
	grep -q '"leftover_bytes": 0,' "$tmp/du" && grep -q '"unreferenced_pack_bytes": 0,' "$tmp/du" ||
		bad "du counts garbage after gc: $(grep -E 'leftover|unreferenced' "$tmp/du" | tr -d '\n ')"
	for d in "$store"/parts/*; do
		[ -e "$d" ] || continue
		s=$((10#$(basename "$d")))
		n=${known[$s]:-}
		if [ -z "$n" ]; then
			[ -z "${stray[$d]:-}" ] && bad "after gc: parts/$(basename "$d") is left of step $s, never committed"
			stray[$d]=1
			continue
		fi
		for f in "$d"/*; do
			b=$(basename "$f")
			[[ $b =~ ^[0-9]+\.part$ ]] && [ "${b%.part}" -lt "$n" ] && continue
			[ -n "${stray[$f]:-}" ] && continue # reported in an earlier round
			stray[$f]=1
			bad "after gc: parts/$(basename "$d")/$b is a stray file of step $s (saved by $n ranks)"
		done
	done
	verify_all "after gc"
	check_listing ""
done

# Every step once more, restored by one job of 3 ranks (each step's rows and columns).
all=$(printf '%s\n' "${!known[@]}" | sort -n | tr '\n' ' ')
timeout -k 5 300 mpirun --allow-run-as-root --oversubscribe -np 3 "$tmp/prog" "$store" "$tmp/repf" \
	"$step" 0 $all >"$tmp/out" 2>&1 || { echo "FAIL: the final restore of every step"; cat "$tmp/out"; fail=1; }
final=$(grep -c '^restored .* ok' "$tmp/repf")
[ "$final" = "${#known[@]}" ] || { echo "FAIL: $final of ${#known[@]} steps restored exactly at the end"; fail=1; }
echo "mpi kill: $rounds rounds, kills: ${nkind[rank]:-0} rank, ${nkind[coordinator]:-0} coordinator," \
	"${nkind[launcher]:-0} launcher ($survivors left survivors to kill); $committed checkpoints" \
	"reported committed, $windows kills inside a save ($visible of them visible whole), $resaved" \
	"re-saved by another size; ${#known[@]} checkpoints verified and restored exactly ($restored" \
	"restores after the kills, $final at the end); gc reclaimed $strays_parts stray parts," \
	"$strays_packs packs, $strays_left other leftovers; $([ $fail = 0 ] && echo ok || echo FAILED)"
exit $fail
