# Shared by tests/python/t-*.sh: picks /usr/bin/python3 (Debian's torch and numpy live there, not
# in a pyenv or venv python on PATH), skips (77) without torch/numpy, and points the binding at
# $B's library; skips under sanitizer builds, whose library cannot be loaded into python.
PY=/usr/bin/python3
B=${B:-build}
if [ ! -x "$PY" ]; then echo "skip: no $PY"; exit 77; fi
if ! "$PY" -c 'import torch, numpy' 2>/dev/null; then
	echo "skip: $PY lacks torch or numpy (apt-get install python3-torch python3-numpy)"; exit 77
fi
LIB=$B/lib/libckpt.so.0
if [ ! -e "$LIB" ]; then echo "FAIL: $LIB is missing (run make)"; exit 1; fi
if ldd "$LIB" 2>/dev/null | grep -q 'lib[at]san'; then
	echo "skip: $LIB is a sanitizer build (the python tests run against the regular build)"; exit 77
fi
CKPT_LIBRARY=$(cd "$(dirname "$LIB")" && pwd)/$(basename "$LIB")
export CKPT_LIBRARY
export PYTHONDONTWRITEBYTECODE=1

# The torch 2.x virtual environment (tools/venv.sh, from tools/deps.d/torch2.test.venv; docs/guide.md):
# $LIBCKPT_TORCH_VENV, default ~/.cache/libckpt/torch2-venv. use_torch2 points PY at its python,
# or skips (77) naming the command that makes it.
TORCH2_VENV=${LIBCKPT_TORCH_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/libckpt/torch2-venv}
use_torch2() {
	if [ ! -x "$TORCH2_VENV/bin/python" ]; then
		echo "skip: no torch 2.x virtual environment at $TORCH2_VENV (make it: sh tools/install-deps.sh test, or sh tools/venv.sh tools/deps.d/torch2.test.venv)"
		exit 77
	fi
	PY=$TORCH2_VENV/bin/python
	if ! "$PY" -c 'import torch, numpy, torch.distributed.checkpoint' 2>/dev/null; then
		echo "FAIL: $PY cannot import torch, numpy and torch.distributed.checkpoint (remake it: rm -r $TORCH2_VENV; sh tools/venv.sh tools/deps.d/torch2.test.venv)"
		exit 1
	fi
}
