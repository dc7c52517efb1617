#!/usr/bin/env bash
# ckptctl errors: a missing store or step (exit 4), bad command lines (exit 2), safetensors files
# that break the format (exit 1, the file and the problem named, no store created).
. tests/cli/lib.sh

mkst nometa "$T/ok.safetensors" 1

# A missing store, then unknown steps.
check missing-list ckptctl list "$STORE"
check missing-verify ckptctl verify "$STORE"
check missing-export ckptctl export "$STORE" 1 -o "$T/x.safetensors"
ckptctl import -q "$STORE" --step 5 "$T/ok.safetensors" || exit 1
check unknown-step-verify ckptctl verify "$STORE" 6
check unknown-step-export ckptctl export "$STORE" 6 -o "$T/x.safetensors"
mkdir "$T/plain"
check not-a-store ckptctl list "$T/plain"
check export-bad-dir ckptctl export "$STORE" 5 -o "$T/no/such/dir/x.safetensors"

# Bad command lines (unique prefixes of long options are accepted, as getopt_long does).
check usage-unknown-command ckptctl lsit "$STORE"
check usage-list-noargs ckptctl list
check usage-list-extra ckptctl list "$STORE" extra
check usage-list-option ckptctl list "$STORE" --bogus
# A mistyped long option gets the closest ones; an ambiguous prefix, and a value given to a flag,
# are refused naming the option.
check usage-option-suggest ckptctl verify "$STORE" --no-progres --qiet
check usage-option-suggest-two ckptctl gc "$STORE" --dryrun
check usage-option-ambiguous ckptctl prune "$STORE" --keep-w 1
check usage-option-flag-value ckptctl du "$STORE" --json=yes
check usage-verify-step ckptctl verify "$STORE" 12abc
check usage-verify-negative ckptctl verify "$STORE" -1
check usage-verify-both ckptctl verify "$STORE" 5 --all
check usage-verify-short ckptctl verify "$STORE" -x
check usage-export-no-output ckptctl export "$STORE" 5
check usage-export-output-value ckptctl export "$STORE" 5 -o
check usage-export-step ckptctl export "$STORE" lastest -o "$T/x.safetensors"
check usage-import-no-step ckptctl import "$STORE" "$T/ok.safetensors"
check usage-import-bad-step ckptctl import "$STORE" --step latest "$T/ok.safetensors"
check usage-import-no-file ckptctl import "$STORE" --step 1
check usage-import-chunk ckptctl import "$STORE" --step 1 --chunk-size 3K "$T/ok.safetensors"
check usage-import-compress ckptctl import "$STORE" --step 1 --compress lz4 "$T/ok.safetensors"
check usage-import-level ckptctl import "$STORE" --step 1 --level 99 "$T/ok.safetensors"
check usage-import-step-value ckptctl import "$STORE" "$T/ok.safetensors" --step
check import-abbrev ckptctl import "$STORE" --ste 1 "$T/ok.safetensors"

# Bad safetensors files: each must fail before the store is created.
for kind in truncated short hugelen badjson notobject badutf8 range overlap mismatch hole \
	trailing dupname baddtype negshape missingfield badmeta emptyname; do
	mkst "$kind" "$T/$kind.safetensors"
	check "bad-$kind" ckptctl import "$T/newstore" --step 1 "$T/$kind.safetensors"
done
check bad-missing-file ckptctl import "$T/newstore" --step 1 "$T/nonexistent.safetensors"
check bad-directory ckptctl import "$T/newstore" --step 1 "$T"
: >"$T/empty.safetensors"
check bad-empty-file ckptctl import "$T/newstore" --step 1 "$T/empty.safetensors"
expect "no store was created by a failed import" test ! -e "$T/newstore"
finish
