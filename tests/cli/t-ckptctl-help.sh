#!/usr/bin/env bash
# ckptctl: the command list, every command's --help and `help COMMAND`, --version, unknown
# commands.
. tests/cli/lib.sh

check noargs ckptctl
check top ckptctl --help
check top-h ckptctl -h
check help ckptctl help
for c in import export list verify show diff du prune gc push pull; do
	check "$c" ckptctl "$c" --help
	check "$c-h" ckptctl "$c" -h
	check "$c-cmd" ckptctl help "$c"
	# --help wins wherever it is, even after bad arguments.
	check "$c-late" ckptctl "$c" /nonexistent --bogus --help
done
check unknown-command ckptctl frobnicate
check unknown-help ckptctl help frobnicate
# A mistyped command gets the closest ones (edit distance, transpositions, prefixes).
check suggest-typo ckptctl expotr
check suggest-prefix ckptctl del
check suggest-help ckptctl help vreify
check suggest-short ckptctl gx
check version ckptctl --version
finish
