#!/bin/sh
# `make check-fresh`: the README's two commands on a minimal Debian 12 root that holds only the
# source tree, as a new user meets them. Builds the root with mmdebstrap (--variant=minbase, no
# make, gcc, git or python3), puts the committed tree (git archive HEAD) in /src, and runs
# `sh tools/bootstrap.sh demo` then `sh tools/bootstrap.sh check` there as root, in a private mount
# namespace with /proc, /sys and /dev from the host (loop devices, io_uring). Each command's output
# goes to build/fresh/*.log; the exit status is that of the first command that failed.
# Takes minutes (it installs every package the tests need). FRESH_DIR moves the work directory;
# FRESH_KEEP=1 keeps the root afterwards. The pristine minbase root is cached as a tarball (it holds
# nothing of ours), so a second run skips the download.
set -eu
cd "$(dirname "$0")/.."
top=$(pwd)
work=${FRESH_DIR:-$top/build/fresh}
[ "$(id -u)" = 0 ] || { echo "check-fresh: must run as root (chroot, mounts)" >&2; exit 1; }
sh tools/install-deps.sh fresh
mkdir -p "$work"
base=$work/bookworm-minbase.tar
if [ ! -s "$base" ]; then
	echo "check-fresh: building a minimal Debian 12 root (mmdebstrap --variant=minbase)"
	mmdebstrap --quiet --variant=minbase bookworm "$base.tmp" http://deb.debian.org/debian
	mv "$base.tmp" "$base"
fi
root=$work/root
rm -rf "$root"
mkdir -p "$root"
tar -C "$root" -xf "$base"
mkdir -p "$root/src"
git archive HEAD | tar -C "$root/src" -xf -
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
for t in make gcc git python3; do
	chroot "$root" sh -c "command -v $t" >/dev/null 2>&1 && echo "check-fresh: note: the root already has $t"
done

run_in_root() { # name, command
	log=$work/$1.log
	echo "check-fresh: [$1] $2   (log: $log)"
	s=$(date +%s)
	rc=0
	unshare --mount --fork sh -c '
		set -e
		r=$1
		mount -t proc proc "$r/proc"
		mount --rbind /sys "$r/sys"
		mount --rbind /dev "$r/dev"
		exec chroot "$r" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin \
			TERM=dumb LANG=C.UTF-8 sh -c "cd /src && $2"
	' sh "$root" "$2" >"$log" 2>&1 </dev/null || rc=$?
	echo "check-fresh: [$1] exit $rc after $(( $(date +%s) - s )) s; last lines:"
	tail -n 5 "$log" | sed 's/^/    /'
	return $rc
}

rc=0
run_in_root demo "sh tools/bootstrap.sh demo" || rc=$?
[ $rc = 0 ] && { run_in_root check "sh tools/bootstrap.sh check" || rc=$?; }
[ "${FRESH_KEEP:-0}" = 1 ] || rm -rf "$root"
if [ $rc = 0 ]; then echo "check-fresh: passed"; else echo "check-fresh: FAILED (exit $rc)"; fi
exit $rc
