#!/bin/sh
# Store.load's placement of host tensors for the direct restore (tests/python/test_load_direct.py)
# with /usr/bin/python3 against $B/lib/libckpt.so.0. Exit 77 (skip) when torch or numpy is missing.
set -u
. "$(dirname "$0")/common.sh"
exec "$PY" tests/python/test_load_direct.py
