#!/bin/sh
# Multi-rank checkpoints under Open MPI (mpirun -np 4, include/ckpt_mpi.h): saves with 4 and 2
# ranks (sharded and replicated tensors, an incremental step), restores onto 1 to 4 ranks by rows
# and columns, and SIGKILLs one rank at points of its save (CKPT_DIST_KILL_AT): mpirun ends the
# job, no partial checkpoint is visible, earlier ones are intact, the same step saves again.
# Skips (77) without mpicc/mpirun (Debian: openmpi-bin libopenmpi-dev, tools/deps.d/mpi.test).
set -u
B=${B:-build}
command -v mpicc >/dev/null 2>&1 && command -v mpirun >/dev/null 2>&1 ||
	{ echo "skip: mpicc or mpirun not installed (apt-get install openmpi-bin libopenmpi-dev)"; exit 77; }
tlib=$B/tests/lib/libckpt-internal.a
[ -f "$tlib" ] || { echo "FAIL: $tlib not built (make tests)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# One machine, no network, maybe root in a container: shared memory only, no ssh, no CMA.
export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_plm_rsh_agent=false OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_hwloc_base_binding_policy=none
mpicc -std=gnu11 -D_GNU_SOURCE -O1 -Iinclude -Itests/unit tests/mpi/t-mpi.c "$tlib" \
	$(pkg-config --libs liburing libzstd libxxhash) -lpthread -ldl -o "$tmp/t-mpi" ||
	{ echo "FAIL: mpicc"; exit 1; }
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

# Kills whose outcome does not depend on when mpirun ends the others: no rank has gathered every
# part yet (points 1, 2), or rank 0 dies before its rename (3, 4).
kills=0
step=10
for k in 0:1 0:2 0:3 0:4 1:1 1:2 2:2 3:1 3:2; do
	CKPT_DIST_KILL_AT=$k run 4 save $step && { echo "FAIL: kill $k: the job succeeded"; fail=1; }
	kills=$((kills + 1))
	mf=$store/manifests/$(printf %020d $step).ckpt
	[ ! -e "$mf" ] || { echo "FAIL: kill $k left $mf"; fail=1; }
	ok "after kill $k: step 2 intact" 4 check 2
	ok "after kill $k: step $step saves again" 4 save $step
	step=$((step + 1))
done
echo "$kills kills of one rank under mpirun, no partial checkpoint"
exit $fail
