#!/usr/bin/env bash
# nvmetune raid create / assemble on a kernel without md, with the real roots: refused
# before mdadm runs with "this kernel has no md driver", naming what was looked at (a dry run
# prints its plan with that as a warning), and nothing is made: no /dev/mdN node or md device appears, mdadm and modprobe never
# run (stand-ins on PATH record any call; the real mdadm would make /dev/md0 and fail). Members are
# two loop devices on files in a temporary folder, detached at the end.
# Skips (77) where it cannot test that: a kernel with md (t-fake-sysfs.sh and the QEMU guest cover
# it), not root, or no loop devices. Exit 0 pass, 1 fail.
set -uo pipefail
cd "$(dirname "$0")/../.."
B=${B:-build}
BIN=$PWD/$B/bin/nvmetune
[ -x "$BIN" ] || { echo "FAIL: $BIN not built"; exit 1; }
REL=$(uname -r)
MODS=/lib/modules/$REL
[ -e /proc/mdstat ] && { echo "SKIP: this kernel has md (/proc/mdstat): nothing to refuse here"; exit 77; }
if cat "$MODS/modules.builtin" "$MODS/modules.dep" 2>/dev/null | grep -qE '(^|/)md[-_]mod\.ko'; then
	echo "SKIP: $MODS has the md_mod module (nvmetune would load it)"; exit 77
fi
[ "$(id -u)" = 0 ] || { echo "SKIP: not root (loop devices and a real raid create need root)"; exit 77; }
command -v losetup > /dev/null || { echo "SKIP: losetup not installed"; exit 77; }

T=$(mktemp -d "${TMPDIR:-/tmp}/nvmetune-nomd.XXXXXX")
LOOPS=()
cleanup() {
	for l in "${LOOPS[@]}"; do losetup -d "$l" 2> /dev/null; done
	rm -rf "$T"
}
trap cleanup EXIT
for i in 0 1; do
	truncate -s 16M "$T/m$i.img"
	l=$(losetup --find --show "$T/m$i.img" 2> /dev/null) || { echo "SKIP: cannot attach a loop device"; exit 77; }
	LOOPS+=("$l")
done
A=${LOOPS[0]} C=${LOOPS[1]}
mkdir -p "$T/bin"
for p in mdadm modprobe; do
	printf '#!/bin/sh\necho "%s $*" >> "%s/calls"\nexit 1\n' "$p" "$T" > "$T/bin/$p"
	chmod +x "$T/bin/$p"
done
mdnodes() { ls -d /dev/md* /dev/md/* /sys/block/md* 2> /dev/null | sort; }
before=$(mdnodes)

fail=0 pass=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
run() { # NAME RC CMD...: runs nvmetune with the stand-ins first on PATH, checks the exit status
	local n=$1 want=$2; shift 2
	PATH=$T/bin:$PATH "$BIN" --state "$T/state.json" "$@" > "$T/$n.out" 2>&1
	local rc=$?
	[ "$rc" -eq "$want" ] && ok || { bad "$n: exit $rc, expected $want"; sed 's/^/    /' "$T/$n.out"; }
}
says() { grep -qF -- "$2" "$T/$1.out" && ok || { bad "$1: output lacks '$2'"; sed 's/^/    /' "$T/$1.out"; }; }
why="this kernel has no md driver: /proc/mdstat is absent (md is neither loaded nor built in) and $MODS lists no md_mod module (modules.dep, modules.builtin); nothing was done (load it with 'modprobe md_mod', or boot a kernel built with CONFIG_BLK_DEV_MD)"

# a dry run prints its plan all the same, warning that the real run would be refused; --json too
warn="${why%%; nothing was done*}; a real run would be refused (load it with 'modprobe md_mod', or boot a kernel built with CONFIG_BLK_DEV_MD)"
run dry 0 raid create --level 0 --dry-run "$A" "$C"; says dry "nvmetune: raid create: warning: $warn"
says dry "mdadm --create /dev/md"
run dryjson 0 raid create --level 0 --dry-run --json "$A" "$C"; says dryjson '"warnings": ['
says dryjson '"mdadm",'
run create10 1 raid create --level 10 --assume-clean "$A" "$C"; says create10 "nvmetune: raid create: $why"
run create0 1 raid create --level 0 --md /dev/md5 "$A" "$C"; says create0 "nvmetune: raid create: $why"
run assemble 1 raid assemble /dev/md0 "$A" "$C"; says assemble "nvmetune: raid assemble: $why"
run scan 1 raid assemble; says scan "nvmetune: raid assemble: $why"
[ ! -e "$T/calls" ] && ok || bad "mdadm or modprobe ran: $(cat "$T/calls")"
after=$(mdnodes)
[ "$before" = "$after" ] && ok || bad "md nodes changed: before '$before', after '$after'"

echo "$pass checks passed, $fail failed"
[ "$fail" -eq 0 ]
