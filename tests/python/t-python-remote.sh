#!/bin/sh
# The remote tier in the Python binding (tests/python/test_remote.py): background uploads, the
# node-loss drill, CheckpointManager on a replacement node. Exit 77 without torch or numpy.
set -u
. "$(dirname "$0")/common.sh"
exec "$PY" tests/python/test_remote.py
