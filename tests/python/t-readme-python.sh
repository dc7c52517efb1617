#!/bin/sh
# The Python programs of docs/guide.md and python/README.md, run as written in fresh processes, resume
# bit-identically to an uninterrupted run (tests/python/check_readme.py).
set -u
. "$(dirname "$0")/common.sh"
exec "$PY" tests/python/check_readme.py
