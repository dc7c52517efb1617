#!/bin/sh
# The Python binding's ctypes declarations (python/libckpt/_lib.py: every struct layout, prototype,
# callback type and constant it mirrors) against include/ckpt.h, through a C program generated
# from them (tests/python/check_abi.py), and a self-test that breaks them one way at a time and
# sees each reported. Needs python3 and a C compiler, not torch nor the built library.
set -u
cd "$(dirname "$0")/../.."
PY=python3
[ -x /usr/bin/python3 ] && PY=/usr/bin/python3
if ! command -v "$PY" >/dev/null 2>&1; then echo "skip: no python3"; exit 77; fi
if ! command -v "${CC:-cc}" >/dev/null 2>&1; then echo "skip: no C compiler (${CC:-cc})"; exit 77; fi
export PYTHONDONTWRITEBYTECODE=1
exec "$PY" tests/python/check_abi.py --selftest
