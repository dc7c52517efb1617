#!/usr/bin/env bash
# End-to-end test of nvmetune on real kernel code: boots Debian's kernel (extracted from the
# linux-image package, not installed) under QEMU with 4 emulated NVMe drives and a busybox
# initramfs holding build/bin/nvmetune, mdadm, mke2fs and ckptctl; runs qemu-guest.sh in the
# guest and checks every "RESULT name value" fact it prints against the expected value below.
# Exit: 0 pass, 1 fail, 77 skip (tools missing, or the kernel package cannot be fetched).
# Env: B (build dir), NVMETUNE_QEMU_KEEP=1 keeps the work folder, NVMETUNE_QEMU_ACCEL=kvm|tcg
# forces the accelerator (by default KVM when the CPU has vmx/svm and /dev/kvm opens, else TCG;
# a KVM guest that does not start within 60 s is booted again with TCG).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
B=${B:-build}
HERE=$ROOT/tests/nvmetune
CACHE=$ROOT/$B/nvmetune-qemu          # kernel package, reused across runs
NVT=$ROOT/$B/bin/nvmetune
CKPTCTL=$ROOT/$B/bin/ckptctl
T_START=$(date +%s.%N)

skip() { echo "SKIP: $*"; exit 77; }
[ -x "$NVT" ] || { echo "FAIL: $NVT not built (run make)"; exit 1; }
for t in qemu-system-x86_64 mdadm cpio gzip mke2fs python3; do
	command -v "$t" > /dev/null || skip "$t not installed (tools/install-deps.sh test installs it)"
done
# (no pipe into grep -q: with pipefail, busybox's SIGPIPE would read as failure)
applets=$( [ -x /bin/busybox ] && /bin/busybox --list || true)
grep -qx su <<< "$applets" || skip "busybox-static not installed"
DEPMOD=$(command -v depmod || echo /sbin/depmod)
MODINFO=$(command -v modinfo || echo /sbin/modinfo)
[ -x "$DEPMOD" ] && [ -x "$MODINFO" ] || skip "kmod (depmod, modinfo) not installed"

W=$(mktemp -d "${TMPDIR:-/tmp}/nvmetune-qemu.XXXXXX")
cleanup() { [ "${NVMETUNE_QEMU_KEEP:-0}" = 1 ] && echo "work folder kept: $W" || rm -rf "$W"; }
trap cleanup EXIT

# ---- 1. kernel: download once into the cache, extract (not install) ----------------------------
mkdir -p "$CACHE/pkgs"
kpkg_name() { apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}'; }
KPKG=$(kpkg_name)
if [ -z "$KPKG" ] && [ "$(id -u)" = 0 ]; then   # fresh containers ship without package lists
	apt-get update -qq > /dev/null 2>&1 || true
	KPKG=$(kpkg_name)
fi
[ -n "$KPKG" ] || skip "apt-cache does not know linux-image-amd64 (no Debian apt sources or network?)"
DEB=$(ls "$CACHE"/pkgs/"$KPKG"_*.deb 2>/dev/null | head -1 || true)
if [ -z "$DEB" ]; then
	echo "downloading $KPKG into $CACHE/pkgs"
	(cd "$CACHE/pkgs" && apt-get download "$KPKG" 2>&1 | tail -2) || true
	DEB=$(ls "$CACHE"/pkgs/"$KPKG"_*.deb 2>/dev/null | head -1 || true)
	[ -n "$DEB" ] || skip "cannot fetch the kernel package $KPKG (no network?)"
fi
KDIR=$CACHE/kpkg-$(basename "$DEB" .deb)
if [ ! -d "$KDIR/boot" ]; then
	rm -rf "$KDIR.tmp" && mkdir -p "$KDIR.tmp" && dpkg-deb -x "$DEB" "$KDIR.tmp" && mv "$KDIR.tmp" "$KDIR"
fi
KV=$(ls "$KDIR/lib/modules" | head -1)
VMLINUZ=$KDIR/boot/vmlinuz-$KV
MODSRC=$KDIR/lib/modules/$KV

# ---- 2. test data: a small safetensors file (8-byte LE header length, JSON header, data) -------
mkdir -p "$W/data"
python3 - "$W/data/model.safetensors" <<'EOF'
import json, random, struct, sys
random.seed(5)
tensors = [("embed.weight", "F32", [512, 1024]), ("layer0.attn.qkv", "BF16", [1024, 1536]),
           ("layer0.mlp.up", "F16", [1024, 1024]), ("layer0.norm", "F32", [1024])]
size = {"F32": 4, "BF16": 2, "F16": 2}
hdr, blobs, off = {"__metadata__": {"format": "pt", "writer": "nvmetune-e2e"}}, [], 0
for name, dt, shape in tensors:
    n = size[dt]
    for d in shape: n *= d
    hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + n]}
    blobs.append(random.randbytes(n)); off += n
h = json.dumps(hdr, separators=(",", ":")).encode()
h += b" " * (-len(h) % 8)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
EOF
SHA=$(sha256sum "$W/data/model.safetensors" | cut -d' ' -f1)

# ---- 3. initramfs -------------------------------------------------------------------------------
R=$W/rootfs
mkdir -p "$R"/{bin,sbin,usr/bin,usr/sbin,proc,sys,dev,run,tmp,mnt,etc/udev/rules.d,lib64,opt/ckpt/bin,opt/ckpt/lib}
ln -s busybox "$R/bin/sh"
echo "root:x:0:0:root:/:/bin/sh" > "$R/etc/passwd"
echo "root:x:0:" > "$R/etc/group"
[ -f /etc/mke2fs.conf ] && cp /etc/mke2fs.conf "$R/etc/"
copy_libs() { # the ldd-resolved libraries of an ELF, at the same paths (libckpt goes to /opt)
	{ ldd "$1" || true; } | awk '/=> \//{print $3} /^\t\/lib64/{print $1}' | while read -r lib; do
		case $lib in *libckpt.so*) continue ;; esac
		mkdir -p "$R$(dirname "$lib")"
		cp -Ln "$lib" "$R$lib"
	done
}
install_elf() { cp -L "$1" "$R$2"; copy_libs "$1"; }
install_elf /bin/busybox /bin/busybox
install_elf "$NVT" /usr/sbin/nvmetune
install_elf "$(command -v mdadm)" /sbin/mdadm
# e2fsprogs' mke2fs, not busybox's applet (no ext4); as mkfs.ext4 it makes ext4
mkdir -p "$R/opt/tools" && install_elf "$(command -v mke2fs)" /opt/tools/mke2fs
ln -s mke2fs "$R/opt/tools/mkfs.ext4"
if [ -x "$CKPTCTL" ] && [ -e "$ROOT/$B/lib/libckpt.so.0" ]; then
	# rpath $ORIGIN/../lib: keep the bin/lib layout
	install_elf "$CKPTCTL" /opt/ckpt/bin/ckptctl
	cp -L "$ROOT/$B/lib/libckpt.so.0" "$R/opt/ckpt/lib/"
	copy_libs "$ROOT/$B/lib/libckpt.so.0"
	HAVE_CKPT=1
else
	echo "SKIP-PART: $CKPTCTL not built: the libckpt save/restore part will not run"
	HAVE_CKPT=0
fi
cp "$W/data/model.safetensors" "$R/tmp/" && mkdir -p "$R/data" && mv "$R/tmp/model.safetensors" "$R/data/"
cp "$HERE/qemu-guest.sh" "$R/scenario.sh"

declare -A SEEN=()
add_mod() { # a module and its hard dependencies; then depmod lets busybox modprobe work
	local name=$1 path d
	[ -n "${SEEN[$name]:-}" ] && return 0
	SEEN[$name]=1
	path=$(find "$MODSRC/kernel" \( -name "$name.ko*" -o -name "${name//-/_}.ko*" \) | head -1)
	[ -n "$path" ] || { echo "FAIL: module $name not found in $KPKG"; exit 1; }
	mkdir -p "$R/lib/modules/$KV/$(dirname "${path#"$MODSRC"/}")"
	cp "$path" "$R/lib/modules/$KV/${path#"$MODSRC"/}"
	for d in $("$MODINFO" -F depends "$path" | tr ',' ' '); do add_mod "$d"; done
}
# crct10dif/crc64-rocksoft/crc32c: soft dependencies of nvme-core and ext4 that modinfo's
# "depends" does not list
for m in crct10dif_generic crc64_rocksoft_generic crc32c_generic nvme md-mod raid0 raid10 ext4; do
	add_mod "$m"
done
cp "$MODSRC"/modules.{order,builtin,builtin.modinfo} "$R/lib/modules/$KV/"
"$DEPMOD" -b "$R" "$KV"

cat > "$R/init" <<'EOF'
#!/bin/sh
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
/bin/busybox --install -s
mount -t proc proc /proc; mount -t sysfs sysfs /sys; mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
echo 1 > /proc/sys/kernel/printk            # keep kernel messages off the result lines
exec < /dev/null
# md (md_mod, raid0, raid10) is left out: nvmetune raid create loads it, as on a fresh server
for m in crct10dif_generic crc64_rocksoft_generic crc32c_generic nvme ext4; do
	modprobe $m || echo "MODPROBE-FAILED $m"
done
i=0; while [ ! -b /dev/nvme3n1 ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
echo "GUEST-START kernel $(uname -r) uptime $(cut -d' ' -f1 /proc/uptime)s"
sh /scenario.sh 2>&1
echo "GUEST-END uptime $(cut -d' ' -f1 /proc/uptime)s"
sync; poweroff -f
EOF
chmod +x "$R/init"
(cd "$R" && find . -print0 | cpio --null -o -H newc --quiet | gzip -1) > "$W/initramfs.cpio.gz"

# ---- 4. boot ------------------------------------------------------------------------------------
QARGS=()
for i in 0 1 2 3; do
	truncate -s 128M "$W/nvm$i.img"
	QARGS+=(-device "pcie-root-port,id=rp$i,bus=pcie.0,chassis=$((i + 1)),slot=$((i + 1))"
		-drive "file=$W/nvm$i.img,if=none,id=nvm$i,format=raw,cache=unsafe"
		-device "nvme,serial=NVMETUNE$i,drive=nvm$i,bus=rp$i")
done
ACCEL=(-accel tcg -cpu max)
# KVM only when the CPU shows virtualization and /dev/kvm opens: some sandboxes have a /dev/kvm
# on which guests never start
if [ "${NVMETUNE_QEMU_ACCEL:-}" = kvm ] || { [ -z "${NVMETUNE_QEMU_ACCEL:-}" ] &&
	grep -qwE 'vmx|svm' /proc/cpuinfo && (exec 3<>/dev/kvm) 2>/dev/null; }; then
	ACCEL=(-accel kvm -cpu host)
fi
echo "booting $KV with ${ACCEL[1]} (initramfs $(du -h "$W/initramfs.cpio.gz" | cut -f1))"
T_BOOT=$(date +%s.%N)
boot() {
	timeout 240 qemu-system-x86_64 -machine q35 "${ACCEL[@]}" -smp 2 -m 1024 \
		-display none -monitor none -serial stdio -no-reboot \
		-kernel "$VMLINUZ" -initrd "$W/initramfs.cpio.gz" \
		-append "console=ttyS0,115200 panic=-1 quiet loglevel=1" \
		"${QARGS[@]}" < /dev/null > "$W/console.raw" 2>&1 &
	QPID=$!
}
boot
if [ "${ACCEL[1]}" = kvm ]; then
	# a /dev/kvm that opens is not proof that guests run: fall back to TCG if nothing starts
	for _ in $(seq 60); do
		grep -q GUEST-START "$W/console.raw" 2>/dev/null && break
		kill -0 "$QPID" 2>/dev/null || break
		sleep 1
	done
	if ! grep -q GUEST-START "$W/console.raw"; then
		kill "$QPID" 2>/dev/null || true
		wait "$QPID" 2>/dev/null || true
		echo "the KVM guest did not start within 60 s; booting again with TCG"
		ACCEL=(-accel tcg -cpu max)
		T_BOOT=$(date +%s.%N)
		boot
	fi
fi
set +e
wait "$QPID"
QRC=$?
set -e
T_END=$(date +%s.%N)
tr -d '\r' < "$W/console.raw" > "$W/console.log"
cat "$W/console.log"
LOG=$W/console.log
echo
echo "qemu exit $QRC; qemu $(awk -v a="$T_BOOT" -v b="$T_END" 'BEGIN{printf "%.1f", b-a}')s," \
	"total $(awk -v a="$T_START" -v b="$T_END" 'BEGIN{printf "%.1f", b-a}')s"
cp "$LOG" "$ROOT/$B/nvmetune-qemu/last-console.log" 2>/dev/null || true

# ---- 5. check every fact --------------------------------------------------------------------------
fail=0 npass=0
expect() { # NAME VALUE
	local got
	got=$(awk -v n="$1" '$1 == "RESULT" && $2 == n { $1 = ""; $2 = ""; sub(/^  /, ""); print; exit }' "$LOG")
	if [ "$got" = "$2" ]; then
		npass=$((npass + 1))
	else
		echo "FAIL: $1: expected '$2', got '${got:-<missing>}'"
		fail=$((fail + 1))
	fi
}
extract() { awk -v n="$1" '$0 == "BEGIN-FILE " n {on=1; next} $0 == "END-FILE " n {on=0} on' "$LOG"; }

grep -q '^GUEST-END' "$LOG" || { echo "FAIL: the guest did not finish"; fail=$((fail + 1)); }
grep -q 'MODPROBE-FAILED' "$LOG" && { echo "FAIL: a module did not load"; fail=$((fail + 1)); }
while read -r name value; do
	[ -n "$name" ] && expect "$name" "$value"
done <<'EOF'
status_rc 0
status_ctrls 4
status_vwc 4
status_health 4
status_lba 4
status_json_rc 0
plan_missing_rc 4
plan_missing_msg 1
member_before mq-deadline/64/128/256
aspm_before default
plan_member_rc 0
plan_member_sched 1
plan_member_apst 1
plan_member_format 1
apply_member_rc 0
member_applied none/1023/512/2048
aspm_applied performance
state_saved 5
apply_member_json_rc 0
check_member_rc 0
rollback_member_rc 0
member_rolled_back mq-deadline/64/128/256
check_rolled_rc 8
check_rolled_sched 1
check_rolled_count 4
aspm_rolled_back default
state_removed 1
rollback_again_rc 4
rollback_again_msg 1
apply_bad_rc 5
apply_bad_sched 1
apply_bad_maxsec 1
apply_round_rc 5
round_ra 1
round_nr 1
rollback_round_rc 0
round_restored none/1023/512/128
apply_vwc_rc 0
status_vwc_off_rc 0
vwc_off_seen 1
nvme1_ra 1024
rollback_vwc_rc 0
status_vwc_on_rc 0
vwc_restored 4
nvme1_ra_restored 128
notroot_rc 7
notroot_msg 1
md_at_start 0
raid0_dry_rc 0
raid0_dry_modprobe 2
md_after_dry 0
raid0_rc 0
raid0_pers Personalities : [raid0]
raid0_level raid0
raid0_chunk 524288
raid0_status_rc 0
apply_md0_rc 0
md0_ra_applied 8192
md0_maxsec_applied 512
md0_apply_order 1
rollback_md0_rc 0
md0_ra_rolled_back 4096
md_sched_rc 0
md_sched_unsupported 1
raid0_stop_rc 0
raid0_gone 1
refuse_md_rc 6
refuse_md_reason 4
mkfs_member_rc 0
refuse_ext4_rc 6
refuse_ext4_reason 1
refuse_ext4_count 1
refuse_ext4_nothing 1
force_dry_rc 0
force_dry_nothing 1
refuse_mounted_rc 6
refuse_mounted_reason 1
raid10_rc 0
raid10_level raid10
raid10_pers Personalities : [raid0] [raid10]
raid10_degraded 0
raid10_status_rc 0
raid10_status_line 1
apply_md10_rc 0
md10_ra_applied 4096
persist_rc 0
persist_file 4
persist_md 1
persist_params 1
persist_mdadm 1
persist_mdadm_uuid 1
rollback_md10_rc 0
md10_ra_rolled_back 2048
raid10_stop_rc 0
raid10_gone 1
bench_dev_refused_rc 6
bench_dev_reason 1
bench_dev_forced_rc 0
bench_dev_conf 1
d2_create_rc 0
d2_disks raid10/2/16384
d2_data 1
d2_add_rc 0
d2_add_state spare
d2_replace_rc 0
d2_replace_msg 1
d2_rebuilt 1
d2_new_state in_sync
d2_degraded 0
d2_data_after 1
d2_new_member_data 1
d2_persist_rc 0
d2_conf 1/1
d2_stop_rc 0
d2_stopped 1
d2_assemble_rc 0
d2_assembled raid10/0
d2_same_uuid 1
d2_members nvme1n1 nvme2n1
d2_data_assembled 1
d2_stop_again_rc 0
d2_gone 1
format_refused_rc 6
format_refused_msg 1
format_dry_rc 0
format_dry_lbs 512
format_rc 0
format_lbs 4096
format_again_rc 0
format_again_msg 1
EOF
if [ "$HAVE_CKPT" = 1 ]; then
	while read -r name value; do
		[ -n "$name" ] && expect "$name" "$value"
	done <<EOF
mkfs_md_rc 0
md0_mounted 1
ckpt_import_rc 0
ckpt_verify_rc 0
ckpt_export_rc 0
ckpt_cmp_rc 0
ckpt_sha $SHA
bench_dir_rc 0
bench_conf 1/1
bench_clean 0
bench_refused_rc 6
bench_refused_reason 1
EOF
else
	echo "SKIP: libckpt save/restore on the array was not tested ($CKPTCTL missing)"
fi

# the exact mdadm command of the forced dry run
want="mdadm --create /dev/md0 --run --metadata=1.2 --level=10 --layout=f2 --chunk=512K --bitmap=none --assume-clean --name=ckpt10 --raid-devices=4 /dev/nvme0n1 /dev/nvme1n1 /dev/nvme2n1 /dev/nvme3n1"
got=$(extract force_dry.txt | grep '^mdadm ' || true)
if [ "$got" = "$want" ]; then npass=$((npass + 1)); else
	echo "FAIL: dry-run command: expected '$want', got '$got'"; fail=$((fail + 1)); fi

# JSON outputs parse and say what they should
extract status.json > "$W/status.json"
extract raid0.json > "$W/raid0.json"
extract apply.json > "$W/apply.json"
if python3 - "$W" <<'EOF'; then npass=$((npass + 1)); else fail=$((fail + 1)); fi
import json, sys
w = sys.argv[1]
s = json.load(open(w + "/status.json"))
c = s["controllers"]
assert [x["serial"] for x in c] == ["NVMETUNE%d" % i for i in range(4)], c
assert all(x["model"] == "QEMU NVMe Ctrl" and x["vwc_present"] is True and x["vwc_enabled"] is True
           and x["apst_supported"] is False and x["libnvme"] == "ok" for x in c), c
assert all(len(x["namespaces"]) == 1 and x["namespaces"][0]["size_bytes"] == 128 << 20 for x in c), c
# SMART health and the LBA formats (QEMU's namespaces: 512 B in use, 4 KiB among the formats).
assert all(x["health"]["critical_warning"] == 0 and x["health"]["media_errors"] == 0 for x in c), c
for x in c:
    l = x["namespaces"][0]["lba_formats"]
    f = l["formats"]
    assert f[l["current"]]["data_bytes"] == 512 and f[l["best"]]["data_bytes"] == 4096 and \
        f[l["best"]]["metadata_bytes"] == 0, l
b = {d["name"]: d for d in s["block_devices"]}
assert sorted(b) == ["nvme0n1", "nvme1n1", "nvme2n1", "nvme3n1"], b
assert b["nvme1n1"]["scheduler"] == "none" and b["nvme1n1"]["max_hw_sectors_kb"] == "512", b
assert s["aspm_policy"] == "default", s["aspm_policy"]
r = json.load(open(w + "/raid0.json"))["arrays"]
assert len(r) == 1 and r[0]["level"] == "raid0" and r[0]["chunk_bytes"] == 524288 and \
    r[0]["members"] == ["nvme0n1", "nvme1n1", "nvme2n1", "nvme3n1"] and r[0]["size_bytes"] > 0, r
a = json.load(open(w + "/apply.json"))
assert a["ok"] is True and a["dry_run"] is False, a
print("json checks passed")
EOF
echo "$npass checks passed, $fail failed"
[ "$fail" -eq 0 ] && [ "$QRC" -eq 0 ]
