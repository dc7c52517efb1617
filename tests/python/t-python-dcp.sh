#!/bin/sh
# libckpt as DCP's storage (tests/python/test_dcp.py main: see its docstring), on the torch 2.x
# virtual environment (common.sh, use_torch2). Without it, Debian's torch 1.13 checks that
# `import libckpt.dcp` says it needs torch 2.6 (ImportError) and skips.
set -u
. "$(dirname "$0")/common.sh"
if [ -x "$TORCH2_VENV/bin/python" ]; then use_torch2; fi
exec "$PY" tests/python/test_dcp.py main
