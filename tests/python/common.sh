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
