#!/bin/sh
# Multi-rank checkpoints under Open MPI (mpirun -np 4, include/ckpt_mpi.h): saves with 4 and 2
# ranks (sharded and replicated tensors, an incremental step), restores onto 1 to 4 ranks by rows
# and columns, then kill rounds (t-mpi.c "round"): each launch checks the step the previous
# launch's kill hit (absent, or whole: verified, every rank's boxes byte-exact), saves a new step
# (the store accepts the next save) and SIGKILLs one rank during the save of the step after; 9
# rounds at the library's kill points (CKPT_DIST_KILL_AT), then T_MPI_KILLS (default 50) at
# random points of a random rank's save. Ends with verify and gc by ckptctl: every checkpoint
# intact, the kills' leftovers removed. Seed: T_MPI_SEED.
# Skips (77) without mpicc/mpirun (tests/mpi/mpi-lib.sh).
set -u
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. tests/mpi/mpi-lib.sh
mpi_tmpdir "$tmp"
mpi_build tests/mpi/t-mpi.c "$tmp/t-mpi"
store=$tmp/store
fail=0
run() { # NP ARGS...: mpirun under a timeout, output in $tmp/out
	np=$1; shift
	timeout -k 5 120 mpirun --allow-run-as-root --oversubscribe -np "$np" "$tmp/t-mpi" "$store" "$@" \
		>"$tmp/out" 2>&1
}
ok() { # what NP ARGS...
	what=$1; shift
	if run "$@"; then echo "ok: $what"; else echo "FAIL: $what"; cat "$tmp/out"; fail=1; fi
}
ok "save step 1 with 4 ranks" 4 save 1
ok "save step 2 with 4 ranks (incremental)" 4 save 2
grep -q "rank 1 step 2: 0 of" "$tmp/out" || { echo "FAIL: rank 1 rewrote unchanged chunks"; cat "$tmp/out"; fail=1; }
ok "save step 3 with 2 ranks (resharded)" 2 save 3
grep -q "rank 1 step 3: 0 of" "$tmp/out" || { echo "FAIL: resharded rank 1 rewrote unchanged chunks"; cat "$tmp/out"; fail=1; }
ok "restore step 1 (4 ranks) onto 2" 2 check 1
ok "restore step 3 (2 ranks) onto 4" 4 check 3
ok "restore step 2 onto 3" 3 check 2

# Kill rounds. Rank 0 may commit before mpirun ends it when the victim dies after its part was
# gathered: then the checkpoint is whole (all parts were durable), and the next round checks it.
kills=0 inside=0 after=0 whole=0
seed=${T_MPI_SEED:-$$}
echo "kill rounds: seed $seed (T_MPI_SEED)"
rand() { awk -v s="$1" -v m="$2" 'BEGIN { srand(s); printf "%d\n", rand() * m }'; }
step=100
est=20 # ms: how long the victim's save takes, learnt from the rounds whose kill came after it
round() { # VICTIM DELAY_MS [T_MPI_KILL_AT]
	T_MPI_KILL_AT=${3:-} timeout -k 5 120 mpirun --allow-run-as-root --oversubscribe -np 4 \
		"$tmp/t-mpi" "$store" round "$step" $((step + 1)) "$1" "$2" >"$tmp/out" 2>&1
	rc=$?
	grep -q "committed (whole)" "$tmp/out" && whole=$((whole + 1))
	if ! grep -q "saved step $step: ok" "$tmp/out"; then
		echo "FAIL: round at step $step (victim $1, $2 ${3:-}): check or save failed"
		cat "$tmp/out"; fail=1
	elif [ "$rc" = 0 ]; then
		echo "FAIL: round at step $step: the job survived the kill"; fail=1
	else
		kills=$((kills + 1))
		grep -q KILL-IN-SAVE "$tmp/out" && inside=$((inside + 1))
		if grep -q KILL-AFTER-SAVE "$tmp/out"; then
			after=$((after + 1))
			est=$(awk '/returned after/ { printf "%d\n", $5 + 1 }' "$tmp/out")
		fi
	fi
	step=$((step + 2))
}
for k in 0:1 0:2 0:3 0:4 1:1 1:2 2:2 3:1 3:2; do
	round "${k%%:*}" -1 "$k"
done
# Random points: a random rank, a delay uniform in [0, 1.2 x the save's duration).
n=${T_MPI_KILLS:-50} i=0
while [ $i -lt "$n" ]; do
	s=$((seed * 7919 + i * 104729))
	round "$(rand "$s" 4)" "$(awk -v s="$s" -v e="$est" 'BEGIN { srand(s); rand(); printf "%.3f\n", rand() * 1.2 * e }')"
	i=$((i + 1))
done
# The last kill's step, checked and followed by one more save; no kill.
timeout -k 5 120 mpirun --allow-run-as-root --oversubscribe -np 4 "$tmp/t-mpi" "$store" round \
	"$step" 0 -1 -1 >"$tmp/out" 2>&1 || { echo "FAIL: the last round's check"; cat "$tmp/out"; fail=1; }
grep -q "committed (whole)" "$tmp/out" && whole=$((whole + 1))
ck=$B/bin/ckptctl
if [ -x "$ck" ]; then
	"$ck" verify -q --all "$store" >"$tmp/v" 2>&1 || { echo "FAIL: verify --all after the kills"; cat "$tmp/v"; fail=1; }
	"$ck" gc "$store" >/dev/null 2>&1 || { echo "FAIL: gc after the kills"; fail=1; }
	"$ck" du --json "$store" >"$tmp/du" 2>&1
	grep -q '"leftover_bytes": 0,' "$tmp/du" && grep -q '"unreferenced_pack_bytes": 0,' "$tmp/du" ||
		{ echo "FAIL: gc left garbage of the kills"; cat "$tmp/du"; fail=1; }
	"$ck" verify -q --all "$store" >"$tmp/v" 2>&1 || { echo "FAIL: verify --all after gc"; cat "$tmp/v"; fail=1; }
fi
echo "$kills kills of one rank under mpirun -np 4 ($((kills - inside - after)) at kill points" \
	"or by mpirun, $inside by the timer inside the save, $after right after it returned);" \
	"no partial checkpoint ($whole of the killed saves had committed whole before the job" \
	"ended, the others left nothing visible), earlier ones intact, the next save accepted each time"
exit $fail
