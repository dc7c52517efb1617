#!/usr/bin/env bash
# ckptctl's man page renders without warnings and documents every command, every option of every
# command's option table (as `ckptctl __complete CMD` lists it) and every exit status; --help and
# the bash completion offer exactly the options of the table (run without the bash-completion
# package: the script must not need it). An option added to a table and left out of the man page,
# --help or the completion fails here.
set -uo pipefail
B=${B:-build}
CK=$B/bin/ckptctl
[ -x "$CK" ] || { echo "skip: $CK is not built"; exit 77; }
man=docs/ckptctl.1
fail=0
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }

if command -v groff >/dev/null; then
	err=$(groff -man -Tutf8 -ww "$man" 2>&1 >/dev/null)
	[ -z "$err" ] || bad "groff warnings: $err"
fi
for s in 0 1 2 3 4; do
	grep -qx ".B $s" "$man" || bad "man page lacks exit status $s"
done

# Without bash-completion: only COMP_WORDS/COMP_CWORD, as bash sets them. The completion asks the
# ckptctl on PATH (words[0]): the one just built.
PATH=$PWD/$B/bin:$PATH
. tools/completion/ckptctl
comp() {
	COMP_WORDS=("$@")
	COMP_CWORD=$(($# - 1))
	COMPREPLY=()
	_ckptctl
	printf '%s\n' "${COMPREPLY[@]}" | sort | tr '\n' ' '
}

cmds=$("$CK" --help | awk '/^Commands:/ {on = 1; next} on && /^  [a-z]/ {print $1}')
[ -n "$cmds" ] || bad "no commands in 'ckptctl --help'"
for c in $cmds; do
	grep -q "^\.B ckptctl $c\$" "$man" || bad "man page SYNOPSIS lacks '$c'"
	grep -q "^\.B $c " "$man" || bad "man page COMMANDS lacks '$c'"
	comp ckptctl "$c" | grep -qw -- "$c" || bad "completion does not offer '$c'"
	# The table: long options ("=" marks a value), then the short ones.
	table=$("$CK" __complete "$c" | grep -- '^--' | sed 's/=$//' | sort -u | tr '\n' ' ')
	[ -n "$table" ] || bad "no options from 'ckptctl __complete $c'"
	opts=$("$CK" "$c" --help | grep -o -- '--[a-z][a-z-]*' | sort -u)
	for o in $table; do
		grep -qF -- "${o//-/\\-}" "$man" || bad "man page lacks '$c $o'"
		grep -qE -- "^ +(-., )?$o( |$)" <("$CK" "$c" --help) || bad "--help of '$c' lacks '$o'"
	done
	for s in $("$CK" __complete "$c" | grep -- '^-[a-z]' | sed 's/=$//'); do
		grep -qE -- "^ +$s, --" <("$CK" "$c" --help) || bad "--help of '$c' lacks '$s'"
	done
	want=$(echo $opts | tr ' ' '\n' | sort | tr '\n' ' ')
	[ "$table" = "$want" ] || bad "options of '$c': table '$table', --help mentions '$want'"
	got=$(comp ckptctl "$c" --)
	[ "$got" = "$table" ] || bad "completion of '$c --': '$got', the table has '$table'"
done
[ "$(comp ckptctl import x --compress '')" = "none zstd " ] || bad "completion: --compress"
[ "$(comp ckptctl verify x la)" = "latest " ] || bad "completion: verify STORE la"
[ "$(comp ckptctl gc x --max-unused '')" = "10% 20% 5% unlimited " ] || bad "completion: --max-unused"
[ "$(comp ckptctl import --level 3 x '')" != "" ] || bad "completion: a value skipped as an argument"

# Steps and latest only where a STEP goes, from the store named (or CKPT_STORE); directories where
# the STORE goes, even one whose name begins with l.
T=$(mktemp -d "${TMPDIR:-/tmp}/ckptctl-docs.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT
python3 tests/cli/mkst.py model "$T/m.st" 1 && python3 tests/cli/mkst.py model "$T/m2.st" 2 || exit 1
"$CK" import -q "$T/lstore" --step 10 "$T/m.st" && "$CK" import -q "$T/lstore" --step 200 "$T/m2.st" ||
	exit 1
want() { # want EXPECTED WORDS...: the completion of WORDS is EXPECTED
	local w=$1 got
	shift
	got=$(cd "$T" && comp "$@")
	[ "$got" = "$w" ] || bad "completion of '$*': '$got', expected '$w'"
}
want "lstore " ckptctl export l
want "lstore " ckptctl verify ls
want "10 200 latest " ckptctl export lstore ''
want "200 " ckptctl show lstore 2
want "10 200 latest " ckptctl export -o out.st lstore ''
want "10 200 latest " ckptctl diff lstore 10 ''
want " " ckptctl diff lstore 10 200 ''
want " " ckptctl export lstore 10 ''
want "10 200 latest " ckptctl delete lstore 10 ''
want "lstore " ckptctl list l
CKPT_STORE="$T/lstore" want "10 200 latest lstore " ckptctl show ''
echo "$fail failed"
[ "$fail" -eq 0 ]
