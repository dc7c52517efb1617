#!/usr/bin/env bash
# ckptctl import when the input changes underneath: a file that shrinks while it is
# mapped used to kill ckptctl with SIGBUS (exit 135, no message); now it fails with a message
# naming the file and commits nothing. A file that grows (no signal) is reported after the commit.
# Also: --step takes digits only (" 7" was once 7), and a file without tensors imports (it once
# called qsort(NULL, 0), which `make sanitize` reports).
. tests/cli/lib.sh
# The input is resized at the right moment by a hook that only the tests' ckptctl has.
CKH=$ROOT/$B/tests/hooks/ckptctl
[ -x "$CKH" ] || { echo "skip: $CKH (ckptctl with test hooks) is not built"; exit 77; }
ckptctl_hooks() { "$CKH" "$@"; }

mkst big "$T/big.st" 1
mkst model "$T/m.st" 1
mkst notensors "$T/none.st" 1
ckptctl import -q "$STORE" --step 1 "$T/m.st" || exit 1

cp "$T/big.st" "$T/shrink.st"
CKPTCTL_TEST_TRUNCATE_INPUT=4096 check import-shrinks ckptctl_hooks import -q "$STORE" --step 2 "$T/shrink.st"
check import-shrinks-list ckptctl list "$STORE"
check import-shrinks-verify ckptctl verify "$STORE" --all --no-progress

cp "$T/m.st" "$T/grow.st"
size=$(stat -c %s "$T/grow.st")
CKPTCTL_TEST_TRUNCATE_INPUT=$((size + 4096)) check import-grows ckptctl_hooks import -q "$STORE" --step 3 "$T/grow.st"

check import-step-space ckptctl import -q "$STORE" --step " 7" "$T/m.st"
check import-step-plus ckptctl import -q "$STORE" --step "+7" "$T/m.st"
check import-no-tensors ckptctl import -q "$STORE" --step 8 "$T/none.st"
check import-no-tensors-show ckptctl show "$STORE" 8

finish
