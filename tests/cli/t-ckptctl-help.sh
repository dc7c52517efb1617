#!/usr/bin/env bash
# ckptctl: the command list, every command's --help and `help COMMAND`, --version, unknown
# commands.
. tests/cli/lib.sh

check help-noargs ckptctl
check help-top ckptctl --help
check help-top-h ckptctl -h
check help-help ckptctl help
for c in import export list verify show diff du prune gc push pull; do
	check "help-$c" ckptctl "$c" --help
	check "help-$c-h" ckptctl "$c" -h
	check "help-$c-cmd" ckptctl help "$c"
	# --help wins wherever it is, even after bad arguments.
	check "help-$c-late" ckptctl "$c" /nonexistent --bogus --help
done
check help-unknown-command ckptctl frobnicate
check help-unknown-help ckptctl help frobnicate
# A mistyped command gets the closest ones (edit distance, transpositions, prefixes).
check help-suggest-typo ckptctl expotr
check help-suggest-prefix ckptctl del
check help-suggest-help ckptctl help vreify
check help-suggest-short ckptctl gx
check version ckptctl --version
finish
