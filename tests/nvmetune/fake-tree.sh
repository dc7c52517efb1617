# Builds a fake /sys, /dev and /proc under $1 for nvmetune's unit tests (sourced by t-*.sh):
#   nvme0 (APST via pm_qos) -> nvme0n1: standalone, mq-deadline, partitioned, nvme0n1p1 mounted
#   nvme1 (no APST)         -> nvme1n1, nvme2n1 on nvme2 -> members of md0 (raid0, 512K chunk)
#   nvme3                   -> nvme3n1: an ext4 filesystem on it
#   nvme4                   -> nvme4n1: blank
#   sda: a rotational disk whose max_hw_sectors_kb is huge (not in the default device set)
#   /proc/mdstat: md loaded with the raid0 and raid10 personalities
# Device nodes are plain files: libblkid probes them, libnvme cannot (status shows "unknown").
fake_tree() {
	local F=$1 S=$1/sys
	rm -rf "$F"
	mkdir -p "$S/class/nvme" "$S/block" "$F/dev" "$F/proc/self"
	w() { mkdir -p "$(dirname "$1")"; printf '%s\n' "$2" > "$1"; }
	for c in 0 1 2 3 4; do
		local C=$S/class/nvme/nvme$c
		w "$C/model" "FAKE NVMe SSD $c"
		w "$C/serial" "FAKESN00$c     "
		w "$C/firmware_rev" "1.0.$c"
		w "$C/transport" "pcie"
		w "$C/state" "live"
		w "$C/queue_count" "17"
		w "$C/device/current_link_speed" "16.0 GT/s PCIe"
		w "$C/device/current_link_width" "4"
		w "$C/device/max_link_speed" "16.0 GT/s PCIe"
		w "$C/device/max_link_width" "4"
		: > "$F/dev/nvme$c"
	done
	w "$S/class/nvme/nvme0/power/pm_qos_latency_tolerance_us" "100000"
	mkdir -p "$S/class/nvme/nvme0/nvme0n1" "$S/class/nvme/nvme1/nvme1n1" \
		"$S/class/nvme/nvme2/nvme2c2n1" "$S/class/nvme/nvme3/nvme3n1" "$S/class/nvme/nvme4/nvme4n1"
	blk() { # NAME MAJ:MIN SCHED NR RA MAXS MAXHW WC OPTIO
		local Q=$S/block/$1/queue
		w "$S/block/$1/dev" "$2"
		w "$S/block/$1/size" "262144"
		w "$S/block/$1/nsid" "1"
		w "$Q/scheduler" "$3"
		w "$Q/nr_requests" "$4"
		w "$Q/read_ahead_kb" "$5"
		w "$Q/max_sectors_kb" "$6"
		w "$Q/max_hw_sectors_kb" "$7"
		w "$Q/write_cache" "$8"
		w "$Q/optimal_io_size" "$9"
		mkdir -p "$S/block/$1/holders" "$S/block/$1/mq/0" "$S/block/$1/mq/1"
		truncate -s 8M "$F/dev/$1"
	}
	blk nvme0n1 259:0 "none [mq-deadline] kyber" 64 128 128 512 "write through" 0
	blk nvme1n1 259:2 "[none] mq-deadline kyber" 1023 128 512 512 "write back" 0
	blk nvme2n1 259:3 "[none] mq-deadline kyber" 1023 128 256 512 "write back" 0
	blk nvme3n1 259:4 "[none] mq-deadline kyber" 1023 128 512 512 "write back" 0
	blk nvme4n1 259:5 "[none] mq-deadline kyber" 1023 128 512 512 "write back" 0
	blk md0 9:0 "none" 128 2048 128 512 "write back" 1048576
	blk sda 8:0 "[mq-deadline] none" 64 128 1280 2147483647 "write back" 0   # a disk, not NVMe
	w "$S/block/sda/queue/rotational" "1"
	rm -rf "$S/block/md0/mq" "$S/block/md0/nsid" "$S/block/sda/nsid"
	w "$S/block/nvme0n1/nvme0n1p1/partition" "1"
	w "$S/block/nvme0n1/nvme0n1p1/dev" "259:1"
	mkdir -p "$S/block/nvme1n1/holders/md0" "$S/block/nvme2n1/holders/md0" \
		"$S/block/md0/slaves/nvme1n1" "$S/block/md0/slaves/nvme2n1"
	w "$S/block/md0/md/level" "raid0"
	w "$S/block/md0/md/chunk_size" "524288"
	w "$S/block/md0/md/raid_disks" "2"
	w "$S/block/md0/md/layout" "0"
	w "$S/block/md0/md/array_state" "clean"
	w "$S/block/md0/md/degraded" "0"
	w "$S/block/md0/md/sync_action" "idle"
	w "$S/block/md0/md/uuid" "3f1c2a4e-8b7d-4f20-9a61-5c0d2e7b9a13"
	w "$S/module/pcie_aspm/parameters/policy" "[default] performance powersave powersupersave"
	w "$S/module/nvme_core/parameters/default_ps_max_latency_us" "100000"
	w "$S/module/nvme_core/parameters/multipath" "Y"
	# md is in the kernel, with both personalities nvmetune creates (raid create checks)
	printf 'Personalities : [raid0] [raid10] \nmd0 : active raid0 nvme2n1[1] nvme1n1[0]\n      262144 blocks super 1.2 512k chunks\n\nunused devices: <none>\n' > "$F/proc/mdstat"
	w "$F/proc/cmdline" "BOOT_IMAGE=/vmlinuz-6.1.0 root=/dev/sda1 ro quiet nvme_core.io_timeout=60"
	w "$F/proc/self/mountinfo" "22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw
36 22 259:1 / /data rw,relatime - ext4 /dev/nvme0n1p1 rw"
	mkfs.ext4 -q -F "$F/dev/nvme3n1" > /dev/null 2>&1
}
