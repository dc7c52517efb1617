#!/bin/sh
# Runs in the QEMU guest of tests/crash/t-powercut.sh (busybox sh; helpers in
# powercut-guest-lib.sh). Records saves (ckptctl import), prune and gc on ext4 over dm-log-writes,
# with a mark in the log after each reported commit, then replays the log point by point and
# checks each: every checkpoint reported committed before that point (and not pruned) verifies,
# and verify --all finds no damage.
. /pc-lib.sh

pc_record
ops=0
for i in 1 2 3 4; do
	$CK import -q /mnt/fs/s --step $i /data/m$i.st && mark commit-$i && ops=$((ops + 1))
done
mark prune-begin
$CK prune /mnt/fs/s --keep-last 2 > /dev/null && mark prune-done && ops=$((ops + 1))
$CK gc /mnt/fs/s --compact-below 0.9 > /dev/null && mark gc-done && ops=$((ops + 1))
$CK import -q /mnt/fs/s --step 5 /data/m5.st && mark commit-5 && ops=$((ops + 1))
$CK gc /mnt/fs/s --compact-below 0.9 > /dev/null && mark gc2-done && ops=$((ops + 1))
echo "RESULT ops $ops"
pc_record_end

check_import() { # MARKS-FILE
	for i in 1 2 3 4 5; do
		grep -qx "MARK commit-$i" "$1" || continue
		# prune (keep the last 2 of steps 1-4) may remove 1 and 2 once it began
		if [ $i -le 2 ] && grep -qx "MARK prune-begin" "$1"; then continue; fi
		want="$want $i"
	done
	if [ -e /mnt/chk/s/store ]; then
		$CK verify /mnt/chk/s --all -q --no-progress > /tmp/v.out 2>&1 || why="verify --all: $(head -c 300 /tmp/v.out)"
		for s in $want; do
			$CK verify /mnt/chk/s $s -q --no-progress > /dev/null 2>&1 || why="$why; step $s (committed) missing or damaged"
		done
	elif [ -n "$want" ]; then
		why="store missing; committed:$want"
	fi
}
pc_replay check_import
