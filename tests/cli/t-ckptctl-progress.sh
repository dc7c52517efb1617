#!/usr/bin/env bash
# Progress lines of import, export, verify and gc's compaction, on a terminal (a pseudo-terminal
# from python3's pty module, tests/cli/ptyrun.py): label, bar, share, bytes, rate and ETA, each
# drawn over a cleared line, the real total from the first line on (verify once drew the stored
# size first), the line cleared at the end, a message (damage, an error) never
# written onto a progress line; none when standard error is not a terminal, with --quiet, --json
# or --no-progress.
. tests/cli/lib.sh
pty() { python3 "$ROOT/tests/cli/ptyrun.py" "$@"; }
python3 -c 'import pty' 2>/dev/null || { echo "skip: python3 has no pty module"; exit 77; }

mkst big "$T/big1.safetensors" 1
for s in 1 2 3; do mkst model "$T/m$s.safetensors" "$s"; done

check progress-import pty "$CK" import "$STORE" --step 10 "$T/big1.safetensors"
check progress-import-quiet pty "$CK" import -q "$STORE" --step 20 "$T/m1.safetensors"
check progress-import-json pty "$CK" import --json "$STORE" --step 30 "$T/m2.safetensors"
check progress-import-off pty "$CK" import --no-progress "$STORE" --step 40 "$T/m3.safetensors"
check progress-verify pty "$CK" verify "$STORE" --all
check progress-verify-off pty "$CK" verify "$STORE" --all --no-progress
check progress-export pty "$CK" export "$STORE" 10 -o "$T/x.safetensors"
check progress-export-off pty "$CK" export "$STORE" 10 -o "$T/x.safetensors" --no-progress
# gc compacts pack 2 (step 20's) once 20 and 30 are gone.
cp -a "$STORE" "$T/s-gc"
ckptctl delete "$T/s-gc" 20 30 >/dev/null || exit 1
check progress-gc pty "$CK" gc "$T/s-gc" --max-unused 0%
# Damage: each report goes on a line of its own, the bar after it.
cp -a "$STORE" "$T/s-bad"
corrupt flip-tensor "$T/s-bad" "$T/big1.safetensors" big.weight >/dev/null || exit 1
check progress-verify-damage pty "$CK" verify "$T/s-bad" 10
check progress-export-damage pty "$CK" export "$T/s-bad" 10 -o "$T/y.safetensors"
# Not a terminal: no progress line, no control character at all.
"$CK" import "$STORE" --step 50 "$T/big1.safetensors" >/dev/null 2>"$T/err"
"$CK" verify "$STORE" --all >/dev/null 2>>"$T/err"
"$CK" export "$STORE" 50 -o "$T/z.safetensors" >/dev/null 2>>"$T/err"
expect "no progress when standard error is not a terminal" test ! -s "$T/err"
finish
