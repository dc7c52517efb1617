#!/bin/sh
# The README's and python/README.md's Python programs, run as written in fresh processes, resume
# bit-identically to an uninterrupted run (tests/python/check_readme.py).
set -u
. "$(dirname "$0")/common.sh"
exec "$PY" tests/python/check_readme.py
