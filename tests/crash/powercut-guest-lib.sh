# Sourced by the guest scenarios of the power-cut tests (tests/crash/powercut*-guest.sh, busybox
# sh in the QEMU guest of tests/crash/powercut-lib.sh) as /pc-lib.sh.
#   pc_record          ext4 on a dm-log-writes device (nvme0n1, its log on nvme1n1), mounted on
#                      /mnt/fs; the scenario then works in /mnt/fs and calls mark TEXT after each
#                      step it must find again (a commit reported, a prune begun);
#   pc_record_end      unmounts it;
#   pc_replay CHECK    replays the log onto nvme2n1 one flush point at a time; at every EVERY-th
#                      point, every point where a new mark appeared, and the end, mounts a
#                      throw-away snapshot of it (COW on nvme3n1) on /mnt/chk, which replays the
#                      ext4 journal like a reboot after a power cut, and runs CHECK MARKS-FILE:
#                      it sets why (empty: the point is fine) and want (the steps it found
#                      committed). Prints "RESULT point N ok committed: STEPS" or "RESULT point N
#                      FAIL why" for each, then "RESULT flush_points", "checked" and "failed".
EVERY=${1:-4}
CK=/opt/ckpt/bin/ckptctl
DM="dmsetup --noudevsync"
SIZE=$(blockdev --getsz /dev/nvme0n1)
mark() { $DM message lw 0 mark "$1" || echo "RESULT mark_failed $1"; }

pc_record() {
	$DM create lw --table "0 $SIZE log-writes /dev/nvme0n1 /dev/nvme1n1" || { echo "RESULT setup FAIL"; exit 0; }
	$DM mknodes
	mark mkfs
	/opt/tools/mkfs.ext4 -q -F -E nodiscard,lazy_itable_init=0,lazy_journal_init=0 /dev/mapper/lw || echo "RESULT mkfs FAIL"
	mkdir -p /mnt/fs /mnt/chk
	mount -t ext4 /dev/mapper/lw /mnt/fs || echo "RESULT mount FAIL"
	mark mounted
}
pc_record_end() {
	umount /mnt/fs
	$DM remove lw
}

n=0 checked=0 failed=0
check_point() { # CHECK MARKS-FILE
	$DM create snap --table "0 $SIZE snapshot /dev/nvme2n1 /dev/nvme3n1 N 8" || { echo "snapshot FAIL"; return; }
	$DM mknodes
	why= want=
	if ! mount -t ext4 /dev/mapper/snap /mnt/chk 2>/dev/null; then
		grep -qx "MARK mounted" "$2" && why="mount failed"
	else
		$1 "$2"
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
pc_replay() { # CHECK
	local last= sig
	rm -f /tmp/replay.state
	while /opt/tools/replay-log /dev/nvme1n1 /dev/nvme2n1 /tmp/replay.state > /tmp/point.out; do
		n=$((n + 1))
		grep '^MARK ' /tmp/point.out > /tmp/marks
		sig=$(md5sum < /tmp/marks)
		# every EVERY-th point, and every point where a new mark appeared (a commit reported)
		if [ $((n % EVERY)) = 0 ] || [ "$sig" != "$last" ]; then
			check_point "$1" /tmp/marks
		fi
		last=$sig
	done
	cat /tmp/point.out
	n=$((n + 1))
	grep '^MARK ' /tmp/point.out > /tmp/marks || true
	check_point "$1" /tmp/marks # the whole log (unmounted cleanly)
	echo "RESULT flush_points $((n - 1))"
	echo "RESULT checked $checked"
	echo "RESULT failed $failed"
}
