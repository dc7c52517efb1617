# The set-up of the power-cut tests (tests/crash/t-powercut*.sh), sourced by bash from the
# repository root: the nvmetune QEMU guest (Debian's kernel, emulated NVMe) with ckptctl, libckpt,
# dmsetup, mke2fs and the log replayer (replay-log.c) in its initramfs.
#   pc_setup        checks the tools (exit 77 when one is missing or the kernel package cannot be
#                   fetched), makes $W (removed at exit unless CKPT_CRASH_KEEP=1) and the rootfs
#                   $R; the test then adds what its scenario needs (install_elf, files under $R);
#   pc_boot SCRIPT  runs SCRIPT in the guest (busybox sh, with tests/crash/powercut-guest-lib.sh
#                   as /pc-lib.sh and the argument $EVERY) on four blank NVMe drives, then prints
#                   the console ($W/console.log);
#   pc_verdict_setup  fails (fail=1) when the guest did not finish or its set-up failed;
#   res NAME        the value of the guest's "RESULT NAME VALUE" line.
# EVERY: check every EVERY-th flush point (PC_EVERY, default 6), every point under
# CKPT_CRASH_LONG=1.
ROOT=$PWD
B=${B:-build}
CACHE=$ROOT/$B/nvmetune-qemu          # the kernel package, shared with t-qemu-e2e
CKPTCTL=$ROOT/$B/bin/ckptctl
EVERY=${PC_EVERY:-6}
[ "${CKPT_CRASH_LONG:-0}" = 1 ] && EVERY=1
skip() { echo "SKIP: $*"; exit 77; }

pc_tools() {
	[ -x "$CKPTCTL" ] || { echo "FAIL: $CKPTCTL not built"; exit 1; }
	for t in qemu-system-x86_64 cpio gzip mke2fs python3 dmsetup cc; do
		command -v "$t" > /dev/null || skip "$t not installed"
	done
	applets=$( [ -x /bin/busybox ] && /bin/busybox --list || true)
	grep -qx su <<< "$applets" || skip "busybox-static not installed"
	DEPMOD=$(command -v depmod || echo /sbin/depmod)
	MODINFO=$(command -v modinfo || echo /sbin/modinfo)
	[ -x "$DEPMOD" ] && [ -x "$MODINFO" ] || skip "kmod (depmod, modinfo) not installed"
}

# ---- kernel (as t-qemu-e2e: downloaded once into the cache, extracted, not installed) ----------
kpkg_name() { apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}'; }
pc_kernel() {
	mkdir -p "$CACHE/pkgs"
	KPKG=$(kpkg_name)
	[ -n "$KPKG" ] || skip "apt-cache does not know linux-image-amd64"
	DEB=$(ls "$CACHE"/pkgs/"$KPKG"_*.deb 2>/dev/null | head -1 || true)
	if [ -z "$DEB" ]; then
		(cd "$CACHE/pkgs" && apt-get download "$KPKG" 2>&1 | tail -2) || true
		DEB=$(ls "$CACHE"/pkgs/"$KPKG"_*.deb 2>/dev/null | head -1 || true)
		[ -n "$DEB" ] || skip "cannot fetch the kernel package $KPKG (no network?)"
	fi
	KDIR=$CACHE/kpkg-$(basename "$DEB" .deb)
	if [ ! -d "$KDIR/boot" ]; then
		rm -rf "$KDIR.tmp" && mkdir -p "$KDIR.tmp" && dpkg-deb -x "$DEB" "$KDIR.tmp" && mv "$KDIR.tmp" "$KDIR"
	fi
	KV=$(ls "$KDIR/lib/modules" | head -1)
	MODSRC=$KDIR/lib/modules/$KV
}

# ---- initramfs: busybox, ckptctl + libckpt, dmsetup, mke2fs, the replayer ----------------------
copy_libs() {
	{ ldd "$1" || true; } | awk '/=> \//{print $3} /^\t\/lib64/{print $1}' | while read -r lib; do
		case $lib in *libckpt.so*) continue ;; esac
		mkdir -p "$R$(dirname "$lib")"
		cp -Ln "$lib" "$R$lib"
	done
}
install_elf() { mkdir -p "$(dirname "$R$2")"; cp -L "$1" "$R$2"; copy_libs "$1"; }
declare -A SEEN=()
add_mod() {
	local name=$1 path d
	[ -n "${SEEN[$name]:-}" ] && return 0
	SEEN[$name]=1
	path=$(find "$MODSRC/kernel" \( -name "$name.ko*" -o -name "${name//-/_}.ko*" \) | head -1)
	[ -n "$path" ] || { echo "FAIL: module $name not found in $KPKG"; exit 1; }
	mkdir -p "$R/lib/modules/$KV/$(dirname "${path#"$MODSRC"/}")"
	cp "$path" "$R/lib/modules/$KV/${path#"$MODSRC"/}"
	for d in $("$MODINFO" -F depends "$path" | tr ',' ' '); do add_mod "$d"; done
}
MODS="crct10dif_generic crc64_rocksoft_generic crc32c_generic nvme ext4 dm-mod dm-log-writes dm-snapshot"
pc_rootfs() {
	R=$W/rootfs
	mkdir -p "$R"/{bin,sbin,proc,sys,dev,tmp,mnt,data,etc,opt/tools,opt/ckpt/bin,opt/ckpt/lib}
	ln -s busybox "$R/bin/sh"
	[ -f /etc/mke2fs.conf ] && cp /etc/mke2fs.conf "$R/etc/"
	install_elf /bin/busybox /bin/busybox
	install_elf "$(command -v dmsetup)" /sbin/dmsetup
	install_elf "$(command -v mke2fs)" /opt/tools/mke2fs
	ln -s mke2fs "$R/opt/tools/mkfs.ext4"
	install_elf "$CKPTCTL" /opt/ckpt/bin/ckptctl
	cp -L "$ROOT/$B/lib/libckpt.so.0" "$R/opt/ckpt/lib/"
	copy_libs "$ROOT/$B/lib/libckpt.so.0"
	cc -O2 -static -o "$R/opt/tools/replay-log" tests/crash/replay-log.c
	cp tests/crash/powercut-guest-lib.sh "$R/pc-lib.sh"
	for m in $MODS; do add_mod "$m"; done
	cp "$MODSRC"/modules.{order,builtin,builtin.modinfo} "$R/lib/modules/$KV/"
	"$DEPMOD" -b "$R" "$KV"
}
pc_setup() {
	pc_tools
	W=$(mktemp -d "${TMPDIR:-/tmp}/ckpt-powercut.XXXXXX")
	trap '[ "${CKPT_CRASH_KEEP:-0}" = 1 ] && echo "kept $W" || rm -rf "$W"' EXIT
	pc_kernel
	pc_rootfs
}

pc_initramfs() { # SCRIPT
	cp "$1" "$R/scenario.sh"
	cat > "$R/init" <<-EOF
	#!/bin/sh
	export PATH=/bin:/sbin:/opt/tools
	/bin/busybox --install -s
	mount -t proc proc /proc; mount -t sysfs sysfs /sys; mount -t devtmpfs devtmpfs /dev
	mount -t tmpfs tmpfs /tmp
	echo 1 > /proc/sys/kernel/printk
	exec < /dev/null
	for m in $MODS; do modprobe \$m || echo "MODPROBE-FAILED \$m"; done
	i=0; while [ ! -b /dev/nvme3n1 ] && [ \$i -lt 300 ]; do sleep 0.1; i=\$((i+1)); done
	echo "GUEST-START"
	sh /scenario.sh $EVERY 2>&1
	echo "GUEST-END"
	sync; poweroff -f
	EOF
	chmod +x "$R/init"
	(cd "$R" && find . -print0 | cpio --null -o -H newc --quiet | gzip -1) > "$W/initramfs.cpio.gz"
}

# ---- boot: fs, log, replay target, COW for the check snapshots --------------------------------
pc_boot() { # SCRIPT
	pc_initramfs "$1"
	local QARGS=() sizes=(160M 320M 160M 96M) i ACCEL=(-accel tcg -cpu max) T0 QRC
	for i in 0 1 2 3; do
		truncate -s "${sizes[$i]}" "$W/nvm$i.img"
		QARGS+=(-device "pcie-root-port,id=rp$i,bus=pcie.0,chassis=$((i + 1)),slot=$((i + 1))"
			-drive "file=$W/nvm$i.img,if=none,id=nvm$i,format=raw,cache=unsafe"
			-device "nvme,serial=CKPTCUT$i,drive=nvm$i,bus=rp$i")
	done
	if grep -qwE 'vmx|svm' /proc/cpuinfo && (exec 3<>/dev/kvm) 2>/dev/null; then
		ACCEL=(-accel kvm -cpu host)
	fi
	T0=$(date +%s)
	set +e
	timeout "${CKPT_CRASH_TIMEOUT:-1500}" qemu-system-x86_64 -machine q35 "${ACCEL[@]}" -smp 2 -m 1024 \
		-display none -monitor none -serial stdio -no-reboot \
		-kernel "$KDIR/boot/vmlinuz-$KV" -initrd "$W/initramfs.cpio.gz" \
		-append "console=ttyS0,115200 panic=-1 quiet loglevel=1" \
		"${QARGS[@]}" < /dev/null > "$W/console.raw" 2>&1
	QRC=$?
	set -e
	tr -d '\r' < "$W/console.raw" > "$W/console.log"
	cat "$W/console.log"
	echo "qemu exit $QRC after $(( $(date +%s) - T0 )) s (${ACCEL[1]})"
}

# ---- verdict -------------------------------------------------------------------------------------
res() { awk -v n="$1" '$1 == "RESULT" && $2 == n { print $3; exit }' "$W/console.log"; }
pc_verdict_setup() {
	grep -q '^GUEST-END' "$W/console.log" || { echo "FAIL: the guest did not finish"; fail=1; }
	grep -q 'MODPROBE-FAILED\|RESULT setup FAIL\|RESULT mkfs FAIL\|RESULT mount FAIL\|RESULT mark_failed' \
		"$W/console.log" && { echo "FAIL: setup in the guest failed"; fail=1; }
	return 0
}
# The replay's verdict: OPS operations succeeded in the guest, at least 20 flush points logged and
# 8 checked, none failed, and a point after the last commit checked with exactly the steps LAST
# ("3 4 5"). Prints the figures line, prefixed with WHAT.
pc_verdict_replay() { # WHAT OPS LAST
	[ "$(res ops)" = "$2" ] || { echo "FAIL: the guest's operations did not all succeed (ops $(res ops), want $2)"; fail=1; }
	points=$(res flush_points) checked=$(res checked) failed=$(res failed)
	[ "${points:-0}" -ge 20 ] || { echo "FAIL: only ${points:-0} flush points logged"; fail=1; }
	[ "${checked:-0}" -ge 8 ] || { echo "FAIL: only ${checked:-0} points checked"; fail=1; }
	[ "${failed:-1}" = 0 ] || { echo "FAIL: ${failed:-?} replayed point(s) lost or damaged a committed checkpoint"; fail=1; }
	grep -q "^RESULT point .* ok committed: $3\$" "$W/console.log" ||
		{ echo "FAIL: no checked point after the last commit"; fail=1; }
	echo "$1: $points flush points logged, $checked replayed and checked, ${failed:-?} failed"
}
