#!/bin/sh
# libckpt as Lightning's CheckpointIO, plain and under AsyncCheckpointIO: a resumed run ends bit
# for bit as one run (tests/python/test_lightning.py), on the torch 2.x virtual environment
# (common.sh, use_torch2; skips without it or without Lightning).
set -u
. "$(dirname "$0")/common.sh"
use_torch2
exec "$PY" tests/python/test_lightning.py
