#!/bin/sh
# The scenario t-qemu-e2e.sh runs inside the guest (busybox sh, 4 emulated NVMe drives).
# It prints "RESULT NAME VALUE" facts (exit statuses, values read back from sysfs) and the full
# output of every command; the host compares each fact with the expected value, so the test
# fails on any wrong result, not only when the scenario stops early.
export PATH=/bin:/sbin:/usr/bin:/usr/sbin:/opt/ckpt/bin
D="/dev/nvme0n1 /dev/nvme1n1 /dev/nvme2n1 /dev/nvme3n1"
NVT="nvmetune --state /tmp/state.json"

R() { echo "RESULT $1 $2"; }
# run NAME CMD...: runs CMD, shows its output, reports NAME_rc
run() {
	n=$1; shift
	"$@" > /tmp/o.$n 2>&1
	rc=$?
	echo "--- $n: $* (rc=$rc)"
	sed 's/^/  | /' /tmp/o.$n
	R "${n}_rc" $rc
}
has() { if grep -q -- "$2" /tmp/o.$1; then echo 1; else echo 0; fi; }
count() { grep -c -- "$2" /tmp/o.$1; }
q() { sed 's/.*\[\(.*\)\].*/\1/' /sys/block/$1/queue/$2; }
vals() { echo "$(q $1 scheduler)/$(q $1 nr_requests)/$(q $1 max_sectors_kb)/$(q $1 read_ahead_kb)"; }
aspm() { sed 's/.*\[\(.*\)\].*/\1/' /sys/module/pcie_aspm/parameters/policy; }
# 1 when mdN is not an active array (sysfs files always have a size, so read them)
active() { if [ -n "$(cat /sys/block/$1/md/level 2>/dev/null)" ]; then echo 0; else echo 1; fi; }
dump() { echo "BEGIN-FILE $1"; cat "$2"; echo "END-FILE $1"; }
# a section, with the guest's uptime: where the run's time goes
sec() { echo "===== $* (uptime $(cut -d' ' -f1 /proc/uptime)s)"; }

sec "status"
run status $NVT status
R status_ctrls "$(count status 'QEMU NVMe Ctrl')"
R status_vwc "$(count status 'volatile write cache: present, enabled')"
R status_health "$(count status 'health: ok, 0% of endurance used')"
R status_lba "$(count status 'LBA format: 512 B (#0); best supported 4 KiB')"
run status_json $NVT status --json
dump status.json /tmp/o.status_json
run plan_missing $NVT plan /dev/nvme9n1
R plan_missing_msg "$(has plan_missing 'nvmetune: /dev/nvme9n1: no such block device')"

sec "plan/apply/rollback on a member device (left misconfigured first)"
echo mq-deadline > /sys/block/nvme0n1/queue/scheduler
echo 64 > /sys/block/nvme0n1/queue/nr_requests
echo 128 > /sys/block/nvme0n1/queue/max_sectors_kb
echo 256 > /sys/block/nvme0n1/queue/read_ahead_kb
R member_before "$(vals nvme0n1)"
R aspm_before "$(aspm)"
run plan_member $NVT plan nvme0n1
R plan_member_sched "$(has plan_member 'scheduler  *mq-deadline  *none  *change')"
R plan_member_apst "$(has plan_member 'apst .*n/a .*no APST')"
R plan_member_format "$(has plan_member "LBA format 512 B (#0) in use, 4 KiB (#4) supported: 'nvmetune format nvme0n1 --force'")"
run apply_member $NVT apply /dev/nvme0n1
R member_applied "$(vals nvme0n1)"
R aspm_applied "$(aspm)"
R state_saved "$(grep -c '"previous"' /tmp/state.json)"
run apply_member_json $NVT apply --json /dev/nvme0n1
dump apply.json /tmp/o.apply_member_json
run check_member $NVT plan --check nvme0n1
run rollback_member $NVT rollback
R member_rolled_back "$(vals nvme0n1)"
# plan --check against the real queue: the rolled-back values drifted from the profile
run check_rolled $NVT plan --check nvme0n1
R check_rolled_sched "$(has check_rolled 'drift: nvme0n1   scheduler       mq-deadline, target none (change)')"
R check_rolled_count "$(grep -c '^drift:' /tmp/o.check_rolled)"
R aspm_rolled_back "$(aspm)"
R state_removed "$([ -e /tmp/state.json ] && echo 0 || echo 1)"
run rollback_again $NVT rollback
R rollback_again_msg "$(has rollback_again 'no saved state')"

sec "explicit settings a device cannot take; the write cache through libnvme"
printf 'scheduler = bfq\nmax_sectors_kb = 4096\n' > /tmp/bad.profile
run apply_bad $NVT apply --profile /tmp/bad.profile nvme1n1
R apply_bad_sched "$(has apply_bad "scheduler 'bfq' not available on nvme1n1")"
R apply_bad_maxsec "$(has apply_bad 'exceeds max_hw_sectors_kb 512')"
# the kernel rounds read_ahead_kb to pages and rejects nr_requests above the tag depth with
# scheduler none: only the read-back tells
printf 'read_ahead_kb = 1\nnr_requests = 2048\n' > /tmp/round.profile
run apply_round $NVT apply --profile /tmp/round.profile nvme2n1
R round_ra "$(has apply_round "DID NOT TAKE: wrote '1', reads back '0'")"
R round_nr "$(has apply_round "FAILED: nr_requests: the device does not accept '2048' (EINVAL)")"
run rollback_round $NVT rollback
R round_restored "$(vals nvme2n1)"
printf 'inherit = default\nvwc = off\nread_ahead_kb = 1024\n' > /tmp/vwc.profile
run apply_vwc $NVT apply --profile /tmp/vwc.profile nvme1n1
run status_vwc_off $NVT status
R vwc_off_seen "$(has status_vwc_off 'present, disabled')"
R nvme1_ra "$(q nvme1n1 read_ahead_kb)"
run rollback_vwc $NVT rollback
run status_vwc_on $NVT status
R vwc_restored "$(count status_vwc_on 'present, enabled')"
R nvme1_ra_restored "$(q nvme1n1 read_ahead_kb)"
echo "nobody:x:65534:65534:nobody:/:/bin/sh" >> /etc/passwd
echo "nogroup:x:65534:" >> /etc/group
run notroot su nobody -s /bin/sh -c "nvmetune --state /tmp/x.json apply"
R notroot_msg "$(has notroot 'apply: must be run as root')"

sec "RAID 0 (md is not loaded yet: raid create loads md_mod and raid0 with modprobe)"
mdloaded() { if [ -e /proc/mdstat ]; then echo 1; else echo 0; fi; }
pers() { grep '^Personalities' /proc/mdstat | tr -s ' ' | sed 's/ $//'; }
R md_at_start "$(mdloaded)"
run raid0_dry $NVT raid create --level 0 --chunk 512K --name ckpt0 --dry-run $D
R raid0_dry_modprobe "$(grep -c '^modprobe \(md_mod\|raid0\)$' /tmp/o.raid0_dry)"
R md_after_dry "$(mdloaded)"
run raid0 $NVT raid create --level 0 --chunk 512K --name ckpt0 $D
R raid0_pers "$(pers)"
R raid0_level "$(cat /sys/block/md0/md/level)"
R raid0_chunk "$(cat /sys/block/md0/md/chunk_size)"
run raid0_status $NVT raid status --json
dump raid0.json /tmp/o.raid0_status
run apply_md0 $NVT apply
R md0_ra_applied "$(q md0 read_ahead_kb)"
R md0_maxsec_applied "$(q md0 max_sectors_kb)"
# members before the array: every nvme line comes before the first md0 line
R md0_apply_order "$(awk '/^nvme/{n=NR} /^md0/{if(!m)m=NR} END{print (n && m && n<m)?1:0}' /tmp/o.apply_md0)"
run rollback_md0 $NVT rollback
R md0_ra_rolled_back "$(q md0 read_ahead_kb)"
run md_sched $NVT plan --profile /tmp/bad.profile md0
R md_sched_unsupported "$(has md_sched "scheduler 'bfq' not available on md0")"
run raid0_stop $NVT raid stop /dev/md0
R raid0_gone "$(active md0)"

sec "refusals"
run refuse_md $NVT raid create --level 10 $D
R refuse_md_reason "$(count refuse_md 'refused: carries a RAID signature (linux_raid_member)')"
mdadm --zero-superblock $D
run mkfs_member /opt/tools/mkfs.ext4 -F /dev/nvme0n1
run refuse_ext4 $NVT raid create --level 10 --layout f2 $D
R refuse_ext4_reason "$(has refuse_ext4 'nvmetune: raid create: /dev/nvme0n1: refused: carries a filesystem signature (ext4)')"
R refuse_ext4_count "$(count refuse_ext4 'refused:')"
R refuse_ext4_nothing "$(active md0)"
run force_dry $NVT raid create --level 10 --layout f2 --assume-clean --name ckpt10 --dry-run --force $D
dump force_dry.txt /tmp/o.force_dry
R force_dry_nothing "$(active md0)"
mkdir -p /mnt/x && mount -t ext4 /dev/nvme0n1 /mnt/x
run refuse_mounted $NVT raid create --level 0 --dry-run $D
R refuse_mounted_reason "$(has refuse_mounted 'nvme0n1: refused: mounted on /mnt/x')"
umount /mnt/x

sec "RAID 10"
run raid10 $NVT raid create --level 10 --layout n2 --assume-clean --name ckpt10 --force $D
R raid10_level "$(cat /sys/block/md0/md/level)"
R raid10_pers "$(pers)"
R raid10_degraded "$(cat /sys/block/md0/md/degraded)"
run raid10_status $NVT raid status
R raid10_status_line "$(has raid10_status 'md0 .*raid10 .*layout n2 .*disks 4')"
run apply_md10 $NVT apply
R md10_ra_applied "$(q md0 read_ahead_kb)"

sec "persist"
run persist $NVT persist
R persist_file "$(grep -c 'ATTRS{serial}=="NVMETUNE[0-3]"' /etc/udev/rules.d/60-nvmetune.rules)"
R persist_md "$(grep -c "KERNEL==\"md\*\", ATTR{md/uuid}==\"$(cat /sys/block/md0/md/uuid)\".*ATTR{queue/read_ahead_kb}=\"4096\"" /etc/udev/rules.d/60-nvmetune.rules)"
R persist_params "$(has persist 'nvme_core.default_ps_max_latency_us=0 pcie_aspm=off')"
R persist_mdadm "$(grep -c '^ARRAY /dev/md0 metadata=1.2 UUID=' /etc/mdadm/mdadm.conf)"
R persist_mdadm_uuid "$([ "$(mdadm --detail --scan | grep -o 'UUID=[0-9a-f:]*' | head -n 1)" = "$(grep -o 'UUID=[0-9a-f:]*' /etc/mdadm/mdadm.conf | head -n 1)" ] && echo 1 || echo 0)"
dump rules /etc/udev/rules.d/60-nvmetune.rules

sec "libckpt save and restore on the array"
if [ -x /opt/ckpt/bin/ckptctl ]; then
	run mkfs_md /opt/tools/mkfs.ext4 -q -F /dev/md0
	mkdir -p /mnt/ckpt && mount -t ext4 /dev/md0 /mnt/ckpt
	R md0_mounted "$(grep -c '^/dev/md0 /mnt/ckpt ext4' /proc/mounts)"
	run ckpt_import ckptctl import /mnt/ckpt/store --step 1 /data/model.safetensors
	run ckpt_verify ckptctl verify /mnt/ckpt/store
	run ckpt_export ckptctl export /mnt/ckpt/store 1 -o /tmp/out.safetensors
	run ckpt_cmp cmp /data/model.safetensors /tmp/out.safetensors
	R ckpt_sha "$(sha256sum < /tmp/out.safetensors | cut -d' ' -f1)"
	run bench_dir $NVT bench --size 4M --config /etc/libckpt.conf /mnt/ckpt
	R bench_conf "$(grep -c '^io_queue_depth = [0-9]' /etc/libckpt.conf)/$(grep -c '^io_size_bytes = [0-9]' /etc/libckpt.conf)"
	R bench_clean "$(ls -a /mnt/ckpt | grep -c nvmetune-bench)"
	run bench_refused $NVT bench --size 4M /dev/md0
	R bench_refused_reason "$(has bench_refused 'refused: mounted on /mnt/ckpt')"
	umount /mnt/ckpt
else
	echo "SKIP: ckptctl not in the initramfs (build/bin/ckptctl missing): libckpt save/restore NOT TESTED"
	R ckpt_skipped 1
fi

sec "bench on a device: refused while it carries a signature, then forced"
run bench_dev_refused $NVT bench --size 4M --no-config /dev/nvme3n1
R bench_dev_reason "$(has bench_dev_refused 'refused: held by md0; carries a RAID signature (linux_raid_member)')"

sec "cleanup"
run rollback_md10 $NVT rollback
R md10_ra_rolled_back "$(q md0 read_ahead_kb)"
run raid10_stop $NVT raid stop md0
R raid10_gone "$(active md0)"
run bench_dev_forced $NVT bench --size 4M --force --config /tmp/dev.conf /dev/nvme3n1
R bench_dev_conf "$(grep -c '^# nvmetune bench at .* for /dev/nvme3n1' /tmp/dev.conf)"
sec "RAID 10 day two: add a spare, replace a member with it, stop, assemble from mdadm.conf"
# the members of the 4-drive array still carry its superblock (4 KiB in; nvme0n1 an ext4 one at
# 1 KiB): wipe the first MiB
for d in /dev/nvme0n1 /dev/nvme1n1 /dev/nvme2n1; do dd if=/dev/zero of=$d bs=1M count=1 conv=fsync 2>/dev/null; done
M=/sys/block/md0/md
# 16 MiB of each drive: the rebuild copies that, not the whole drive (TCG is slow)
run d2_create $NVT raid create --level 10 --layout n2 --assume-clean --size 16M --name day2 /dev/nvme0n1 /dev/nvme1n1
R d2_disks "$(cat $M/level)/$(cat $M/raid_disks)/$(cat $M/component_size)"
UUID=$(cat $M/uuid)
# 4 MiB of random data on the array, read back after each step past the page cache
dd if=/dev/urandom of=/tmp/blob bs=1M count=4 2>/dev/null
SUM=$(sha256sum < /tmp/blob | cut -d' ' -f1)
dd if=/tmp/blob of=/dev/md0 bs=1M conv=fsync 2>/dev/null
same_data() { # DEV [SECTOR]: 1 when the 4 MiB at SECTOR of DEV are the blob
	echo 3 > /proc/sys/vm/drop_caches
	if [ "$(dd if=$1 bs=512 skip=${2:-0} count=8192 2>/dev/null | sha256sum | cut -d' ' -f1)" = "$SUM" ]; then echo 1; else echo 0; fi
}
R d2_data "$(same_data /dev/md0)"
run d2_add $NVT raid add md0 /dev/nvme2n1
R d2_add_state "$(cat $M/dev-nvme2n1/state)"
run d2_replace $NVT raid replace md0 /dev/nvme0n1 /dev/nvme2n1
R d2_replace_msg "$(has d2_replace 'replacing /dev/nvme0n1 with /dev/nvme2n1 in /dev/md0')"
# the rebuild is over when md marked the old member faulty and is idle: polled, with a deadline
rebuilt() {
	i=0
	while [ $i -lt 600 ]; do
		case "$(cat $M/dev-nvme0n1/state 2>/dev/null)" in
		*faulty*) [ "$(cat $M/sync_action)" = idle ] && { echo 1; return; } ;;
		esac
		sleep 0.2; i=$((i+1))
	done
	echo 0
}
R d2_rebuilt "$(rebuilt)"
echo "rebuild over at uptime $(cut -d' ' -f1 /proc/uptime)s"
cat /proc/mdstat
R d2_new_state "$(cat $M/dev-nvme2n1/state)"
R d2_degraded "$(cat $M/degraded)"
R d2_data_after "$(same_data /dev/md0)"
# the new member holds the data itself (RAID 10 n2 on 2 drives: each member is a full copy)
R d2_new_member_data "$(same_data /dev/nvme2n1 "$(cat $M/dev-nvme2n1/offset)")"
run d2_persist $NVT persist
MUUID=$(echo "$UUID" | tr -d '-' | sed 's/\(.\{8\}\)\(.\{8\}\)\(.\{8\}\)\(.\{8\}\)/\1:\2:\3:\4/')
R d2_conf "$(grep -c "^ARRAY /dev/md0 metadata=1.2 UUID=$MUUID\$" /etc/mdadm/mdadm.conf)/$(grep -c '^ARRAY' /etc/mdadm/mdadm.conf)"
dump mdadm.conf /etc/mdadm/mdadm.conf
# the reboot: the array stops, and comes back from the ARRAY line persist wrote, and nothing else
run d2_stop $NVT raid stop md0
R d2_stopped "$(active md0)"
run d2_assemble $NVT raid assemble --config /etc/mdadm/mdadm.conf
cat /proc/mdstat
R d2_assembled "$(cat $M/level 2>/dev/null)/$(cat $M/degraded 2>/dev/null)"
R d2_same_uuid "$(if [ "$(cat $M/uuid 2>/dev/null)" = "$UUID" ]; then echo 1; else echo 0; fi)"
R d2_members "$(ls /sys/block/md0/slaves 2>/dev/null | tr '\n' ' ' | sed 's/ $//')"
R d2_data_assembled "$(same_data /dev/md0)"
run d2_stop_again $NVT raid stop md0
R d2_gone "$(active md0)"

sec "format: 4 KiB sectors (erases the namespace: --force)"
run format_refused $NVT format nvme3n1
R format_refused_msg "$(has format_refused 'this erases every byte of the namespace (--force erases it)')"
run format_dry $NVT format --dry-run nvme3n1
R format_dry_lbs "$(cat /sys/block/nvme3n1/queue/logical_block_size)"
run format $NVT format --force nvme3n1
R format_lbs "$(cat /sys/block/nvme3n1/queue/logical_block_size)"
run format_again $NVT format --force nvme3n1
R format_again_msg "$(has format_again 'already formatted with 4 KiB (#4): nothing to do')"
echo "NVMETUNE-GUEST-DONE"
