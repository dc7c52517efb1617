#!/bin/sh
# The node-loss drill of a 4-rank checkpoint under Open MPI (tests/mpi/t-mpi-remote.c):
# mpirun -np 4 saves three steps, every rank uploading its own packs in the background after the
# global commit and rank 0 the manifest last; on a directory remote each rank's handle must have
# put exactly the packs of its own id range, and no pack is put twice. At step 1 rank 3's share
# never comes (CKPT_TEST_SHARE_STALL=3, as if it died after the commit): rank 0 sends it after
# CKPT_REMOTE_SHARE_WAIT_S=1. Then the local store is deleted; 4 ranks on a fresh store bound to the remote ('ckptctl pull' into a
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
	if timeout -k 5 120 mpirun --allow-run-as-root --oversubscribe -np 4 \
		-x CKPT_TEST_SHARE_STALL -x CKPT_REMOTE_SHARE_WAIT_S "$tmp/t-mpi-remote" \
		"$@" >"$tmp/out" 2>&1; then
		echo "ok: $what"
		cat "$tmp/out" >> "$tmp/puts"
	else
		echo "FAIL: $what"; cat "$tmp/out"; fail=1
	fi
}
put_by() { # RANK: the packs rank RANK's handles reported putting, summed over the runs so far
	awk -v r="$1" '$3 == "rank" && $4 == r && $5 == "put" {n += $6} END {print n + 0}' "$tmp/puts"
}
on_remote() { # RANGE: the packs of id range RANGE on a directory remote
	n=0
	for f in "${R#file://}"/libckpt1/*/packs/*.pack; do
		[ -e "$f" ] || continue
		id=${f##*/}; id=$(echo "${id%.pack}" | sed 's/^0*//')
		[ $(( ${id:-0} >> 22 )) = "$1" ] && n=$((n + 1))
	done
	echo $n
}
export CKPT_TEST_SHARE_STALL= CKPT_REMOTE_SHARE_WAIT_S=1
: > "$tmp/puts"
CKPT_TEST_SHARE_STALL=3 run "save step 1, rank 3's share never comes: rank 0 sends it" \
	"$tmp/store" save 1 "$R"
run "save step 2 (incremental), every rank uploading its own packs" "$tmp/store" save 2 "$R"
run "save step 3 (incremental), uploaded" "$tmp/store" save 3 "$R"
case $R in
/*|file://*)
	own=ok
	for r in 1 2; do
		[ "$(put_by $r)" = "$(on_remote $((r + 1)))" ] || { own=; fail=1
			echo "FAIL: rank $r put $(put_by $r) packs, its range has $(on_remote $((r + 1)))"; }
	done
	[ -n "$own" ] && echo "ok: ranks 1 and 2 put exactly their own packs ($(put_by 1), $(put_by 2))"
	if [ "$(put_by 3)" -lt "$(on_remote 4)" ]; then
		echo "ok: rank 0 put rank 3's share of step 1 ($(put_by 3) of $(on_remote 4) by rank 3)"
	else
		echo "FAIL: rank 3 put all of its range ($(put_by 3))"; fail=1
	fi
	total=$(( $(on_remote 1) + $(on_remote 2) + $(on_remote 3) + $(on_remote 4) ))
	sum=$(( $(put_by 0) + $(put_by 1) + $(put_by 2) + $(put_by 3) ))
	if [ "$sum" = "$total" ] && [ "$(on_remote 0)" = 0 ]; then
		echo "ok: no pack put twice ($sum)"
	else
		echo "FAIL: the handles put $sum packs, the remote holds $total"; fail=1
	fi ;;
*) echo "note: not a directory remote, the puts by range are not counted" ;;
esac
rm -rf "$tmp/store"
"$CK" pull "$tmp/new" 1 --remote "$R" >/dev/null || { echo "FAIL: pull step 1 into a new store"; fail=1; }
run "restore step 2 read from the remote" "$tmp/new" check 2 "$R"
run "restore step 3 read from the remote" "$tmp/new" check 3 "$R"
[ -z "$(ls "$tmp/new/manifests" | grep 00000000000000000002)" ] ||
	{ echo "FAIL: the remote read left step 2 in the store"; fail=1; }
"$CK" pull "$tmp/new" --remote "$R" >/dev/null || { echo "FAIL: pull latest"; fail=1; }
run "restore step 2 pulled" "$tmp/new" check 2 "$R"
run "restore step 1 pulled" "$tmp/new" check 1 "$R"
"$CK" pull "$tmp/new" 3 --remote "$R" >/dev/null || { echo "FAIL: pull step 3"; fail=1; }
run "restore step 3 pulled" "$tmp/new" check 3 "$R"
"$CK" verify -q "$tmp/new" --all || { echo "FAIL: verify of the pulled store"; fail=1; }
[ $fail = 0 ] && echo "t-mpi-remote: all passed"
exit $fail
