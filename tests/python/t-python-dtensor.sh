#!/bin/sh
# DTensor leaves over 4 gloo ranks (tests/python/test_dtensor.py), on a torch that has DTensor
# (2.x): the torch 2.x virtual environment's (common.sh, use_torch2) when it exists. Elsewhere it
# runs on Debian's torch, which skips (77), and this script checks that the skip names the torch
# version and the alternative (libckpt.Shard): the DTensor call path's message.
set -u
. "$(dirname "$0")/common.sh"
if [ -x "$TORCH2_VENV/bin/python" ]; then use_torch2; fi
out=$("$PY" tests/python/test_dtensor.py 2>&1)
rc=$?
printf '%s\n' "$out"
if [ $rc -eq 77 ]; then
	ver=$("$PY" -c 'import torch; print(torch.__version__)')
	last=$(printf '%s\n' "$out" | tail -n 1)
	case $last in
	"skip: DTensor is not available in torch $ver"*libckpt.Shard*) exit 77 ;;
	*) echo "FAIL: unexpected skip message: $last"; exit 1 ;;
	esac
fi
exit $rc
