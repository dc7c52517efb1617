#!/bin/sh
# libckpt.so must not depend on the CUDA runtime or driver (it loads the CUDA provider module at
# run time); the module, when built, must be the one that needs libcudart, export only its entry
# point and have the right soname.
set -eu
B=${B:-build}
lib=$B/lib/libckpt.so
mod=$B/lib/libckpt-cuda.so.0
command -v readelf >/dev/null 2>&1 || { echo "skip: readelf not installed"; exit 77; }
[ -e "$lib" ] || { echo "FAIL: $lib not built (run make)"; exit 1; }

fail=0
needed=$(readelf -d "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
echo "$lib NEEDED: $(echo $needed)"
for n in $needed; do
	case "$n" in
	libcudart*|libcuda.*|libcuda-*|libnvidia*) echo "FAIL: $lib needs $n"; fail=1 ;;
	esac
done
# No CUDA symbol may be referenced either (a static cudart would hide in here).
if readelf -W --dyn-syms "$lib" | grep -E ' (cuda|cu)[A-Z][A-Za-z]*' >/dev/null; then
	echo "FAIL: $lib references CUDA symbols:"
	readelf -W --dyn-syms "$lib" | grep -E ' (cuda|cu)[A-Z][A-Za-z]*' | head
	fail=1
fi

if [ -e "$mod" ]; then
	mneeded=$(readelf -d "$mod" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
	echo "$mod NEEDED: $(echo $mneeded)"
	# It loads libcudart 12 or 13 at run time: linking one at build time
	# would fix the CUDA major version and the build machine's rpath.
	echo "$mneeded" | grep -q '^libcudart\.so' && { echo "FAIL: $mod links libcudart"; fail=1; }
	readelf -d "$mod" | grep -qE 'R(UN)?PATH' && { echo "FAIL: $mod has an rpath"; fail=1; }
	echo "$mneeded" | grep -q '^libckpt\.so' && { echo "FAIL: $mod links libckpt"; fail=1; }
	soname=$(readelf -d "$mod" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
	[ "$soname" = libckpt-cuda.so.0 ] || { echo "FAIL: $mod soname is '$soname'"; fail=1; }
	# Exactly one exported function: the entry point.
	exported=$(readelf -W --dyn-syms "$mod" | awk '$5 != "LOCAL" && $7 != "UND" && $4 == "FUNC" {print $8}')
	echo "$mod exports: $(echo $exported)"
	[ "$exported" = ckpt_gpu_module_ops ] || { echo "FAIL: $mod must export only ckpt_gpu_module_ops"; fail=1; }
else
	echo "note: $mod not built (no CUDA toolkit, or CUDA=0): only libckpt.so checked"
fi
# At run time: a program linked with libckpt.so works on host memory without mapping libcudart;
# the CUDA provider is looked for beside libckpt.so (found when built), and disabled by
# CKPT_CUDA_MODULE=none.
probe=$B/tests/gpu-probe
if [ -x "$probe" ]; then
	tmp=$(mktemp -d "${TMPDIR:-/tmp}/ckpt-probe.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	get() { sed -n "s/^$1=//p" "$2"; }

	CKPT_CUDA_MODULE=none "$probe" "$tmp/s1" >"$tmp/none.out" 2>&1 || true
	echo "--- CKPT_CUDA_MODULE=none:"; cat "$tmp/none.out"
	[ "$(get host "$tmp/none.out")" = ok ] || { echo "FAIL: host save/restore through libckpt.so"; fail=1; }
	for k in cudart_before cudart_after_host cudart_after_cuda; do
		[ "$(get $k "$tmp/none.out")" = 0 ] || { echo "FAIL: libcudart mapped ($k)"; fail=1; }
	done
	[ "$(get cuda_add "$tmp/none.out")" = -7 ] || { echo "FAIL: CUDA tensor not refused as unsupported"; fail=1; }
	get cuda_reason "$tmp/none.out" | grep -q 'CKPT_CUDA_MODULE=none' ||
		{ echo "FAIL: the reason does not name CKPT_CUDA_MODULE=none"; fail=1; }

	env -u CKPT_CUDA_MODULE "$probe" "$tmp/s2" >"$tmp/dflt.out" 2>&1 || true
	echo "--- default:"; cat "$tmp/dflt.out"
	[ "$(get host "$tmp/dflt.out")" = ok ] || { echo "FAIL: host save/restore through libckpt.so"; fail=1; }
	[ "$(get cudart_before "$tmp/dflt.out")" = 0 ] || { echo "FAIL: libcudart mapped at start"; fail=1; }
	# Host-only saves do not load the module or the runtime, even where they are available.
	[ "$(get cudart_after_host "$tmp/dflt.out")" = 0 ] || { echo "FAIL: libcudart mapped by a host-only save"; fail=1; }
	[ "$(get module_after_host "$tmp/dflt.out")" = 0 ] || { echo "FAIL: CUDA module loaded by a host-only save"; fail=1; }
	if [ -e "$mod" ]; then
		# The module beside libckpt.so was found: either a device took the tensor, or the
		# reason is the device, not a missing module.
		if [ "$(get cuda_add "$tmp/dflt.out")" != 0 ]; then
			# (gpu-probe passes a dummy pointer: a provider with a device refuses it
			# as host memory.)
			get cuda_reason "$tmp/dflt.out" | grep -qE 'no CUDA device|is host memory' ||
				{ echo "FAIL: module beside libckpt.so not found"; fail=1; }
		fi
	else
		[ "$(get cuda_add "$tmp/dflt.out")" = -7 ] || { echo "FAIL: CUDA tensor accepted without the module"; fail=1; }
	fi
else
	echo "note: $probe not built (make tests): run-time checks skipped"
fi

[ "$fail" -eq 0 ] && echo "ok"
exit "$fail"
