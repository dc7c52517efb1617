#!/bin/sh
# Runs in the QEMU guest of tests/crash/t-powercut.sh (busybox sh). Phase 1: ext4 on a
# dm-log-writes device (nvme0n1, log on nvme1n1); saves (ckptctl import), prune and gc, with a
# mark in the log after each reported commit. Phase 2: the log is replayed onto nvme2n1 one flush
# point at a time; at every EVERY-th point (and the last) a throw-away snapshot (COW on nvme3n1)
# is mounted, which replays the ext4 journal like a reboot after a power cut, and checked: every
# checkpoint reported committed before that point (and not pruned) verifies, and verify --all
# finds no damage. Prints "RESULT point N ok" or "RESULT point N FAIL why" per point checked.
EVERY=${1:-4}
CK=/opt/ckpt/bin/ckptctl
DM="dmsetup --noudevsync"
SIZE=$(blockdev --getsz /dev/nvme0n1)
mark() { $DM message lw 0 mark "$1" || echo "RESULT mark_failed $1"; }

$DM create lw --table "0 $SIZE log-writes /dev/nvme0n1 /dev/nvme1n1" || { echo "RESULT setup FAIL"; exit 0; }
$DM mknodes
mark mkfs
/opt/tools/mkfs.ext4 -q -F -E nodiscard,lazy_itable_init=0,lazy_journal_init=0 /dev/mapper/lw || echo "RESULT mkfs FAIL"
mkdir -p /mnt/fs /mnt/chk
mount -t ext4 /dev/mapper/lw /mnt/fs || echo "RESULT mount FAIL"
mark mounted
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
umount /mnt/fs
$DM remove lw

# Phase 2: replay, point by point.
n=0 checked=0 failed=0 last=
check_point() { # MARKS-FILE
	want=
	for i in 1 2 3 4 5; do
		grep -qx "MARK commit-$i" "$1" || continue
		# prune (keep the last 2 of steps 1-4) may remove 1 and 2 once it began
		if [ $i -le 2 ] && grep -qx "MARK prune-begin" "$1"; then continue; fi
		want="$want $i"
	done
	$DM create snap --table "0 $SIZE snapshot /dev/nvme2n1 /dev/nvme3n1 N 8" || { echo "snapshot FAIL"; return; }
	$DM mknodes
	why=
	if ! mount -t ext4 /dev/mapper/snap /mnt/chk 2>/dev/null; then
		grep -qx "MARK mounted" "$1" && why="mount failed"
	elif [ -e /mnt/chk/s/store ]; then
		$CK verify /mnt/chk/s --all -q --no-progress > /tmp/v.out 2>&1 || why="verify --all: $(head -c 300 /tmp/v.out)"
		for s in $want; do
			$CK verify /mnt/chk/s $s -q --no-progress > /dev/null 2>&1 || why="$why; step $s (committed) missing or damaged"
		done
	elif [ -n "$want" ]; then
		why="store missing; committed:$want"
	fi
	grep -qs /mnt/chk /proc/mounts && umount /mnt/chk
	$DM remove snap
	checked=$((checked + 1))
	if [ -n "$why" ]; then
		failed=$((failed + 1))
		echo "RESULT point $n FAIL $why"
	else
		echo "RESULT point $n ok committed:${want:- none}"
	fi
}
rm -f /tmp/replay.state
while /opt/tools/replay-log /dev/nvme1n1 /dev/nvme2n1 /tmp/replay.state > /tmp/point.out; do
	n=$((n + 1))
	grep '^MARK ' /tmp/point.out > /tmp/marks
	sig=$(md5sum < /tmp/marks)
	# every EVERY-th point, and every point where a new mark appeared (a commit reported)
	if [ $((n % EVERY)) = 0 ] || [ "$sig" != "$last" ]; then
		check_point /tmp/marks
	fi
	last=$sig
done
cat /tmp/point.out
n=$((n + 1))
grep '^MARK ' /tmp/point.out > /tmp/marks || true
check_point /tmp/marks # the whole log (unmounted cleanly)
echo "RESULT flush_points $((n - 1))"
echo "RESULT checked $checked"
echo "RESULT failed $failed"
