#!/usr/bin/env bash
# The remote tier against a real S3 server: the same tests that run against a
# directory remote, with CKPT_TEST_REMOTE=s3://... on a radosgw started for this script
# (tests/s3/rgw.sh, through lib.sh): uploads of only the new packs, the node-loss drill of a
# one-process and of a 4-rank checkpoint, every rank uploading its own packs (t-remote-share; pack
# ids never reused, t-remote-packid) (local store deleted, restored bit-identical from the
# remote), faults of the backend, the background uploader with kill -9 at random points of an
# upload (50 trials: the remote never lists a partial checkpoint, the next upload completes),
# remote prune (every local retention rule: t-remote-prune, t-remote-prune-cli; refused while a
# remote manifest is damaged: t-remote-damaged) and gc with two
# stores on one bucket prefix, two writers of one store id and a gc racing a push (t-remote-fence),
# ckptctl push/pull/list --remote, and
# the Python binding's remote= (one process and CheckpointManager on 2 ranks); what a pull and an
# adopt refuse (t-remote-pull: another writer's pack of the same id, cut or wrongly padded packs).
cd "$(dirname "$0")/../.." || exit 1
. tests/s3/lib.sh
"$O" s3://tier mkbucket || { echo "FAIL: could not create the test bucket"; exit 1; }
export CKPT_TEST_REMOTE=s3://tier/run-$$
run_one() {  # NAME COMMAND...: one test, its log kept in the output on failure
	local name=$1 start=$SECONDS
	shift
	"$@" >"$RGW_DIR/$name.log" 2>&1
	local rc=$?
	case $rc in
	0) echo "ok: $name against S3 ($((SECONDS - start)) s)"
	   # the figures the tests print (bytes uploaded against new bytes, kill trials)
	   grep -E 'kill trials|bytes' "$RGW_DIR/$name.log" | head -n 5 | sed 's/^/    /' ;;
	77) echo "skipped: $name: $(tail -n 1 "$RGW_DIR/$name.log")" ;;
	*) echo "FAIL: $name against S3 (exit $rc):"; tail -n 40 "$RGW_DIR/$name.log"; fail=1 ;;
	esac
}
for t in t-remote-tier t-remote-faults t-remote-upload t-remote-dist t-remote-share t-remote-packid \
	t-remote-prune t-remote-gc t-remote-fence t-remote-pull t-remote-damaged; do
	[ -x "$B/tests/bin/$t" ] || { echo "FAIL: $B/tests/bin/$t is not built"; fail=1; continue; }
	run_one "$t" "$B/tests/bin/$t"
done
run_one t-remote-cli tests/remote/t-remote-cli.sh
run_one t-remote-prune-cli tests/remote/t-remote-prune-cli.sh
run_one t-mpi-remote tests/mpi/t-mpi-remote.sh
run_one t-python-remote tests/python/t-python-remote.sh
exit $fail
