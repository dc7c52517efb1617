#!/bin/sh
# `make check-fresh`: the README's two commands on a minimal Debian 12 root that holds only the
# source tree, as a new user meets them. Builds the root with mmdebstrap (--variant=minbase, no
# make, gcc, git or python3), puts the committed tree (git archive HEAD) in /src, and runs
# `sh tools/bootstrap.sh demo` then `sh tools/bootstrap.sh check` there as root, in a private mount
# namespace with /proc, /sys and /dev from the host (loop devices, io_uring). Each command's output
# goes to build/fresh/VARIANT-COMMAND.log; the exit status is that of the first command that failed.
#
# Two variants, one after the other (FRESH_VARIANTS="plain cuda" by default):
#   plain  the minimal root alone;
#   cuda   the same root with a CUDA toolkit's headers in /usr/local/cuda/include (copied from the
#          host's CUDA_HOME, /usr/local/cuda by default), as on a GPU server whose toolkit came
#          first: the build then enables the CUDA provider and its test double before any -dev
#          package is installed, the case where a Makefile that asked pkg-config at parse time
#          stopped. Without a toolkit on the host this variant fails, naming the folder.
# FRESH_COMMANDS="demo check" (default) chooses the commands. Takes minutes per variant (it
# installs every package the tests need). FRESH_DIR moves the work directory; FRESH_KEEP=1 keeps
# the roots afterwards. The pristine minbase root is cached as a tarball (it holds nothing of
# ours), so a second run skips the download.
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
	mmdebstrap --quiet --variant=minbase --format=tar bookworm "$base.tmp" http://deb.debian.org/debian
	mv "$base.tmp" "$base"
fi
variants=${FRESH_VARIANTS:-plain cuda}
commands=${FRESH_COMMANDS:-demo check}
cuda_home=${CUDA_HOME:-/usr/local/cuda}
case " $variants " in *" cuda "*)
	[ -f "$cuda_home/include/cuda_runtime_api.h" ] || {
		echo "check-fresh: the cuda variant needs a CUDA toolkit on the host: no" \
		     "$cuda_home/include/cuda_runtime_api.h (set CUDA_HOME, or FRESH_VARIANTS=plain)" >&2
		exit 1; } ;;
esac

make_root() { # variant: a fresh root from the tarball, the tree in /src
	root=$work/root-$1
	rm -rf "$root"
	mkdir -p "$root"
	tar -C "$root" -xf "$base"
	mkdir -p "$root/src"
	git archive HEAD | tar -C "$root/src" -xf -
	cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
	for t in make gcc git python3 pkg-config; do
		chroot "$root" sh -c "command -v $t" >/dev/null 2>&1 && echo "check-fresh: note: the root already has $t"
	done
	if [ "$1" = cuda ]; then
		mkdir -p "$root/usr/local/cuda"
		cp -a "$cuda_home/include" "$root/usr/local/cuda/include"
		echo "check-fresh: [cuda] CUDA headers from $cuda_home/include in /usr/local/cuda/include"
	fi
}

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
for v in $variants; do
	case $v in plain|cuda) ;; *) echo "check-fresh: unknown variant '$v' (plain, cuda)" >&2; exit 2 ;; esac
	make_root "$v"
	for c in $commands; do
		[ $rc = 0 ] || break
		run_in_root "$v-$c" "sh tools/bootstrap.sh $c" || rc=$?
	done
	if [ $rc = 0 ] && [ "$v" = cuda ]; then
		# The variant proves something only if the build saw the toolkit.
		ls "$root/src/build/lib/libckpt-cuda.so.0" >/dev/null 2>&1 ||
			{ echo "check-fresh: [cuda] the build did not make the CUDA provider"; rc=1; }
	fi
	[ "${FRESH_KEEP:-0}" = 1 ] || rm -rf "$root"
	[ $rc = 0 ] || break
done
if [ $rc = 0 ]; then echo "check-fresh: passed ($variants: $commands)"; else echo "check-fresh: FAILED (exit $rc)"; fi
exit $rc
