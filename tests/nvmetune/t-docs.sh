#!/usr/bin/env bash
# The man page renders without warnings and documents every command, option and exit status the
# tool has; the bash completion offers the commands and option values.
set -uo pipefail
cd "$(dirname "$0")/../.."
B=${B:-build}
fail=0
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
man=docs/nvmetune.1
if command -v groff > /dev/null; then
	err=$(groff -man -Tutf8 -ww "$man" 2>&1 > /dev/null)
	[ -z "$err" ] || bad "groff warnings: $err"
fi
for w in status plan apply rollback "raid create" "raid status" "raid stop" persist bench \
	'\-\-sysfs\-root' '\-\-dev\-root' '\-\-proc\-root' '\-\-state' '\-\-assume\-clean' \
	'\-\-bitmap' '\-\-force' '\-\-dry\-run' '\-\-config' 'nvme_core.default_ps_max_latency_us=0 pcie_aspm=off' \
	'/var/lib/nvmetune/state.json' '60\-nvmetune.rules' 'io_queue_depth' 'io_size_bytes'; do
	grep -qF -- "$w" "$man" || bad "man page lacks '$w'"
done
for s in 0 1 2 3 4 5 6 7; do
	grep -qx ".B $s" "$man" || bad "man page lacks exit status $s"
done
# every command of the binary's list is in the man page
for c in $("$B/bin/nvmetune" --help | awk '/^Commands:/{on=1; next} on && /^  [a-z]/{print $1}'); do
	grep -q "^.B nvmetune $c" "$man" || bad "man page SYNOPSIS lacks '$c'"
done
comp() { # WORDS... -> candidates for the last word
	COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMPREPLY=()
	_nvmetune
	echo "${COMPREPLY[*]}"
}
. tools/completion/nvmetune
[ "$(comp nvmetune ra)" = "raid" ] || bad "completion: 'ra' -> '$(comp nvmetune ra)'"
[ "$(comp nvmetune raid c)" = "create" ] || bad "completion: 'raid c' -> '$(comp nvmetune raid c)'"
[ "$(comp nvmetune raid create --layout f)" = "f2" ] || bad "completion: --layout f"
[ "$(comp nvmetune plan --profile chec)" = "checkpoint" ] || bad "completion: --profile chec"
[ "$(comp nvmetune apply --dr)" = "--dry-run" ] || bad "completion: apply --dr"
echo "$fail failed"
[ "$fail" -eq 0 ]
