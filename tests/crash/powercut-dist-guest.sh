#!/bin/sh
# Runs in the QEMU guest of tests/crash/t-powercut-dist.sh (busybox sh; helpers in
# powercut-guest-lib.sh). Records 4-rank commits (tests/cli/mkdist: four threads as ranks, public
# API) on ext4 over dm-log-writes, one after the other: step 1; step 2, whose rank 2 gives up (its
# parts are garbage, it is never visible); step 3; a prune to the last one and a gc that compacts;
# step 4. A mark follows each reported outcome. Then replays the log point by point and
# checks each: every checkpoint reported committed (and not pruned) is listed; nothing else is,
# but the step whose save may be in flight (the first without an outcome mark), never step 2;
# verify --all (every listed checkpoint, parts included) finds no damage: nothing partially
# visible, and after gc no chunk in a missing pack.
. /pc-lib.sh
MK=/opt/ckpt/tests/bin/mkdist

pc_record
ops=0
save() { # STEP [--abort RANK]: 4 ranks, w's values from the step
	s=$1; shift
	# (16 MiB staging a rank: four of the default 256 MiB do not fit in the guest's 1 GiB)
	$MK /mnt/fs/s "$s" 4 --gen "$s" --pool $((16 << 20)) "$@" 2>/tmp/mk.err && return 0
	echo "mkdist step $s $*: $(head -c 400 /tmp/mk.err)"
	return 1
}
save 1 && mark commit-1 && ops=$((ops + 1))
save 2 --abort 2 > /dev/null || { mark aborted-2; ops=$((ops + 1)); }
save 3 && mark commit-3 && ops=$((ops + 1))
mark prune-begin
$CK prune /mnt/fs/s --keep-last 1 > /dev/null && mark prune-done && ops=$((ops + 1))
$CK gc /mnt/fs/s --compact-below 0.9 > /dev/null && mark gc-done && ops=$((ops + 1))
save 4 && mark commit-4 && ops=$((ops + 1))
echo "RESULT ops $ops"
$CK list /mnt/fs/s
pc_record_end

checks=0
check_dist() { # MARKS-FILE
	next=
	for i in 1 2 3 4; do
		if ! grep -qx -e "MARK commit-$i" -e "MARK aborted-$i" "$1"; then
			next=${next:-$i}
			continue
		fi
		grep -qx "MARK commit-$i" "$1" || continue
		# prune (keep the last of 1 and 3) may remove 1 once it began
		[ $i = 1 ] && grep -qx "MARK prune-begin" "$1" && continue
		want="$want $i"
	done
	if [ ! -e /mnt/chk/s/store ]; then
		[ -n "$want" ] && why="store missing; committed:$want"
		return
	fi
	$CK list --json /mnt/chk/s > /tmp/l.json 2> /tmp/l.err || why="list failed: $(head -c 200 /tmp/l.err)"
	[ -s /tmp/l.err ] && why="$why; list: $(head -c 200 /tmp/l.err)"
	listed=$(awk -F'[:,]' '/"step":/ { print $2 + 0 }' /tmp/l.json)
	for s in $listed; do
		checks=$((checks + 1))
		case " 1 3 4 " in *" $s "*) ;; *) why="$why; step $s listed (aborted or never saved)"; continue ;; esac
		grep -qx "MARK commit-$s" "$1" || [ "$s" = "$next" ] ||
			why="$why; step $s listed before its save began"
	done
	for s in $want; do
		checks=$((checks + 1))
		echo "$listed" | grep -qx "$s" || why="$why; step $s (committed) not listed"
	done
	checks=$((checks + 1))
	$CK verify /mnt/chk/s --all -q --no-progress > /tmp/v.out 2>&1 || why="$why; verify --all: $(head -c 300 /tmp/v.out)"
}
pc_replay check_dist
echo "RESULT checks $checks"
