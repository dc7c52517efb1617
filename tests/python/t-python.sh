#!/bin/sh
# The Python binding's unit tests (tests/python/test_libckpt.py, stdlib unittest) with
# /usr/bin/python3 against $B/lib/libckpt.so.0. Exit 77 (skip) when torch or numpy is missing.
set -u
. "$(dirname "$0")/common.sh"
exec "$PY" tests/python/test_libckpt.py
