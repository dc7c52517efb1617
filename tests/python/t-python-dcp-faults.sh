#!/bin/sh
# libckpt as DCP's storage (tests/python/test_dcp.py faults: see its docstring), on the torch 2.x
# virtual environment (common.sh, use_torch2; skips without it).
set -u
. "$(dirname "$0")/common.sh"
use_torch2
exec "$PY" tests/python/test_dcp.py faults
