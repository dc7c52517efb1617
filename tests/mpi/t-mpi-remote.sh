#!/bin/sh
# The node-loss drill of a 4-rank checkpoint under Open MPI (issue 25, tests/mpi/t-mpi-remote.c):
# mpirun -np 4 saves two steps, rank 0 uploading each in the background after the global commit;
# the local store is deleted; 4 ranks on a fresh store bound to the remote ('ckptctl pull' into a
# missing store) restore every rank's rows and columns bit-exact, first reading from the remote
# (nothing pulled), then after 'ckptctl pull'; 'ckptctl verify' checks the pulled checkpoint and
# its parts. The remote is $CKPT_TEST_REMOTE/NAME or a temporary directory. Skips (77) without
# mpicc/mpirun.
set -u
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. tests/mpi/mpi-lib.sh
mpi_tmpdir "$tmp"
mpi_build tests/mpi/t-mpi-remote.c "$tmp/t-mpi-remote"
CK=$B/bin/ckptctl
if [ -n "${CKPT_TEST_REMOTE:-}" ]; then
	R=$CKPT_TEST_REMOTE/t-mpi-remote-$$
	case $R in /*) mkdir -p "$R" ;; file://*) mkdir -p "${R#file://}" ;; esac
else
	R=$tmp/remote
	mkdir -p "$R"
fi
fail=0
run() { # what ARGS...: mpirun -np 4 under a timeout
	what=$1; shift
	if timeout -k 5 120 mpirun --allow-run-as-root --oversubscribe -np 4 "$tmp/t-mpi-remote" \
		"$@" >"$tmp/out" 2>&1; then
		echo "ok: $what"
	else
		echo "FAIL: $what"; cat "$tmp/out"; fail=1
	fi
}
run "save step 1, uploaded by rank 0" "$tmp/store" save 1 "$R"
run "save step 2 (incremental), uploaded" "$tmp/store" save 2 "$R"
rm -rf "$tmp/store"
"$CK" pull "$tmp/new" 1 --remote "$R" >/dev/null || { echo "FAIL: pull step 1 into a new store"; fail=1; }
run "restore step 2 read from the remote" "$tmp/new" check 2 "$R"
[ -z "$(ls "$tmp/new/manifests" | grep 00000000000000000002)" ] ||
	{ echo "FAIL: the remote read left step 2 in the store"; fail=1; }
"$CK" pull "$tmp/new" --remote "$R" >/dev/null || { echo "FAIL: pull latest"; fail=1; }
run "restore step 2 pulled" "$tmp/new" check 2 "$R"
run "restore step 1 pulled" "$tmp/new" check 1 "$R"
"$CK" verify -q "$tmp/new" --all || { echo "FAIL: verify of the pulled store"; fail=1; }
[ $fail = 0 ] && echo "t-mpi-remote: all passed"
exit $fail
