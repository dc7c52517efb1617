#!/bin/sh
# The README's commands on a machine that has the CUDA toolkit but none of the -dev packages yet:
# make must read its files without asking pkg-config, so that `make demo` / `make
# check` reach their first step (tools/install-deps.sh). A fake toolkit (its one header the build
# looks for) makes every CUDA fragment active; PKG_CONFIG_LIBDIR pointing at an empty folder hides
# every .pc file. The steps that do need the flags must still stop with the missing file's name.
set -eu
cd "$(dirname "$0")/../.."
# Run from `make -j2 check-quick`, the makes below would inherit the parent's jobserver flags and
# print make's jobserver warning ahead of their first line: they stand for a fresh shell's make.
unset MAKEFLAGS MFLAGS MAKELEVEL
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
mkdir -p "$W/cuda/include" "$W/nopc"
: > "$W/cuda/include/cuda_runtime_api.h"
export PKG_CONFIG_LIBDIR="$W/nopc" PKG_CONFIG_PATH=
m() { make --no-print-directory -n CUDA_HOME="$W/cuda" B="$W/b" "$@"; }
for t in deps test-deps; do
	m "$t" > "$W/out" 2>&1 || { cat "$W/out"; echo "FAIL: make -n $t stops before installing anything"; exit 1; }
	grep -q "install-deps.sh" "$W/out" || { cat "$W/out"; echo "FAIL: make -n $t does not run install-deps.sh"; exit 1; }
done
# `make check`'s and `make demo`'s own first line is the install step.
for t in check demo; do
	m "$t" > "$W/out" 2>&1 || true
	head -1 "$W/out" | grep -q "install-deps.sh" || { head -3 "$W/out"; echo "FAIL: make -n $t does not start with install-deps.sh"; exit 1; }
done
# The CUDA parts were active (else this test proves nothing): the double's rules are known.
make --no-print-directory -p -n CUDA_HOME="$W/cuda" B="$W/b" deps 2>/dev/null | grep -q "^CUDADOUBLE_CFLAGS" ||
	{ echo "FAIL: the fake toolkit did not enable the CUDA fragments"; exit 1; }
rc=0; m lib > "$W/out" 2>&1 || rc=$?
[ $rc != 0 ] && grep -q "pkg-config file liburing.pc not found (Debian package liburing-dev)" "$W/out" || {
	cat "$W/out"; echo "FAIL: make lib without liburing.pc: exit $rc, no clear message"; exit 1; }
echo PASS
