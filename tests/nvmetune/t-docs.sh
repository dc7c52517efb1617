#!/usr/bin/env bash
# The man page renders without warnings and documents every command, option and exit status the
# tool has; every option of every command's table (as `nvmetune __complete CMD` lists it) is in
# the man page, in the command's --help and offered by the bash completion.
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
	'\-\-bitmap' '\-\-force' '\-\-check' 'TRYING NVMETUNE WITHOUT NVME' 't\-qemu\-e2e.sh' '\-\-dry\-run' '\-\-config' 'nvme_core.default_ps_max_latency_us=0 pcie_aspm=off' \
	'/var/lib/nvmetune/state.json' '60\-nvmetune.rules' 'io_queue_depth' 'io_size_bytes'; do
	grep -qF -- "$w" "$man" || bad "man page lacks '$w'"
done
for s in 0 1 2 3 4 5 6 7 8; do
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
# The completion asks the nvmetune on PATH (COMP_WORDS[0]): the one just built.
PATH=$PWD/$B/bin:$PATH
. tools/completion/nvmetune
NT=$B/bin/nvmetune
for c in $("$NT" __complete | grep -v '^-') "raid create" "raid stop" "raid add" "raid replace" \
	"raid assemble"; do
	# A command with subcommands (raid): its options are those of each subcommand.
	[ -n "$("$NT" __complete $c | grep -v '^-')" ] && continue
	table=$("$NT" __complete $c | grep -- '^--' | sed 's/=$//' | sort -u)
	[ -n "$table" ] || bad "no options from 'nvmetune __complete $c'"
	help=$("$NT" $c --help)
	got=" $(comp nvmetune $c --) "
	for o in $table; do
		grep -qF -- "${o//-/\\-}" "$man" || bad "man page lacks '$c $o'"
		grep -qE -- "^ +(-., )?$o( |$)" <<<"$help" || bad "--help of '$c' lacks '$o'"
		[[ $got == *" $o "* ]] || bad "completion of '$c --' lacks '$o': '$got'"
	done
done
[ "$(comp nvmetune ra)" = "raid" ] || bad "completion: 'ra' -> '$(comp nvmetune ra)'"
[ "$(comp nvmetune raid c)" = "create" ] || bad "completion: 'raid c' -> '$(comp nvmetune raid c)'"
[ "$(comp nvmetune raid create --layout f)" = "f2" ] || bad "completion: --layout f"
[ "$(comp nvmetune plan --profile chec)" = "checkpoint" ] || bad "completion: --profile chec"
[ "$(comp nvmetune apply --dr)" = "--dry-run" ] || bad "completion: apply --dr"
echo "$fail failed"
[ "$fail" -eq 0 ]
